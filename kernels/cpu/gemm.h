/* kernels/cpu/gemm.h — the CPU backend's decode-step matrix product.
 *
 * A decode step multiplies a short, wide activation block x [B × K] (B = the
 * sessions stepping together, 1…256) by the transpose of a weight W [N × K]
 * that never changes. General SGEMMs (OpenBLAS) repack W on every call and
 * are tuned for big square products; at these shapes they ran the step's
 * products at about 60% of the rate below. Here W is packed once, at load,
 * into panels of NR output columns laid out k-major, and a register-tile
 * micro-kernel streams a panel against up to MR rows of x held as
 * broadcasts:
 *
 *   panel p, element (k, j) = W[p·NR + j, k]   (zero for p·NR + j ≥ N)
 *
 * Two kernels, picked at run time by what the CPU has (cpu_gemm_detect):
 *   AVX-512F: NR 32 (two 16-float vectors), MR 12, 24 accumulators;
 *   AVX2+FMA: NR 16 (two 8-float vectors),  MR 6,  12 accumulators.
 * The packed layout depends on NR, so a weight is packed for one ISA.
 *
 * Each output element is one fp32 fused-multiply-add chain over k = 0…K−1 in
 * order, whatever B, the row block or the thread: a session's results do not
 * depend on which other sessions share its step (and the two ISAs give the
 * same results bit for bit).
 *
 * Half-precision weights (fp16 or bf16) are packed the same way with 16-bit
 * elements and widened to fp32 in registers (vcvtph2ps; a bf16 is the top
 * half of an fp32) right before the same FMA chains, so a half weight gives
 * exactly the fp32 kernel's result on the widened weight while streaming
 * half the bytes. Activations and sums stay fp32.
 *
 * A single row (B = 1, a decode step of one session) runs a kernel of its
 * own that streams four panels at once: eight independent FMA chains
 * instead of two, so the product runs at memory bandwidth rather than at
 * FMA latency. Same chains, same results. */
#ifndef LIND_KERNELS_CPU_GEMM_H
#define LIND_KERNELS_CPU_GEMM_H

#include <stddef.h>
#include <stdint.h>

typedef enum cpu_gemm_isa {
    CPU_GEMM_NONE = 0,     /* neither: the backend uses OpenBLAS */
    CPU_GEMM_AVX2 = 1,
    CPU_GEMM_AVX512 = 2,
} cpu_gemm_isa;

/* Weight element types (the values of kernels/backend.h's BACKEND_W_*). */
typedef enum cpu_gemm_wtype {
    CPU_GEMM_F32 = 0,
    CPU_GEMM_F16 = 1,    /* IEEE binary16 */
    CPU_GEMM_BF16 = 2,   /* bfloat16 */
} cpu_gemm_wtype;

/* cpu_gemm_run flags (the same values as kernels/backend.h's matmul flags);
 * at most one of GELU, RELU2, SIGMOID */
#define CPU_GEMM_ACCUMULATE 1
#define CPU_GEMM_GELU       2   /* y = lind_gelu_erf(s) */
#define CPU_GEMM_RELU2      4   /* y = lind_relu2(s) = max(0, s)² */
#define CPU_GEMM_SIGMOID    8   /* y = lind_sigmoid(s) */
#define CPU_GEMM_ACTIVATIONS (CPU_GEMM_GELU | CPU_GEMM_RELU2 | CPU_GEMM_SIGMOID)

/* The best kernel this CPU runs. */
cpu_gemm_isa cpu_gemm_detect(void);
/* 1 if this CPU runs isa's kernel. */
int cpu_gemm_supported(cpu_gemm_isa isa);
/* "AVX-512", "AVX2", "none". */
const char *cpu_gemm_isa_name(cpu_gemm_isa isa);

/* Panel width, panels of an N-column weight, elements of its packed form
 * (floats, or uint16 for a half weight; isa ≠ CPU_GEMM_NONE). */
int    cpu_gemm_nr(cpu_gemm_isa isa);
int    cpu_gemm_panels(cpu_gemm_isa isa, int N);
size_t cpu_gemm_packed_floats(cpu_gemm_isa isa, int N, int K);

/* Pack W [N × K] row-major into dst (cpu_gemm_packed_floats() elements,
 * caller-owned, 64-byte aligned): fp32; fp16 bits (cpu_gemm_pack_half: a
 * panel's columns in order at each k); bf16 bits (cpu_gemm_pack_bf16: at
 * each k the panel's two column halves interleaved, column j at 2j and
 * column nr/2 + j at 2j + 1, so that one shift and one mask of the 32-bit
 * lanes widen them, in order, to fp32). */
void cpu_gemm_pack(cpu_gemm_isa isa, const float *W, int N, int K, float *dst);
void cpu_gemm_pack_half(cpu_gemm_isa isa, const uint16_t *W, int N, int K, uint16_t *dst);
void cpu_gemm_pack_bf16(cpu_gemm_isa isa, const uint16_t *W, int N, int K, uint16_t *dst);

/* Output columns of panels [p0, p1) of
 *   y[b, n] = (ACCUMULATE ? y[b, n] : 0) + (bias ? bias[n] : 0) + Σ_k x[b, k]·W[n, k]
 * or, with an activation flag, y[b, n] = act(bias[n] + Σ), applied to a
 * panel's columns of all B rows once they are stored; for b < B, with x row
 * stride ldx and y row stride ldy (floats); Wp is the weight packed for the same isa (which
 * the CPU must support), of element type wtype (const float * for F32,
 * const uint16_t * for F16/BF16). Columns n ≥ N are never written. The bias
 * is added to the finished sum: y + (bias + Σ) when accumulating. Loop
 * order: panels outer, row blocks inner, so a panel is read from memory once
 * per call and the caller's share of W stays in its caches. scratch: NULL,
 * or cpu_gemm_scratch_floats(isa, K) floats, 64-byte aligned, owned by this
 * caller for the call: with it, a half weight at a large B is widened one
 * panel at a time into scratch and run by the fp32 kernel (the same values,
 * the same chains) instead of being widened again for every row block. */
void cpu_gemm_run(cpu_gemm_isa isa, cpu_gemm_wtype wtype, const float *x, int ldx, const void *Wp,
                  const float *bias, float *y, int ldy, int B, int N, int K, int p0, int p1, int flags,
                  float *scratch);
size_t cpu_gemm_scratch_floats(cpu_gemm_isa isa, int K);
/* A caller that splits a B = 1 product into panel ranges keeps them
 * multiples of this, so every panel runs in a widening single-row kernel:
 * AVX2's streams 4 panels at once, AVX-512's up to 8 of a range (the rest
 * as one smaller group); the bf16 dot kernel streams one. (Ranges of 8 made
 * two threads' shares of a 24-panel product uneven: docs/CPU.md.) */
#define CPU_GEMM_ROW_GROUP 4

/* The thread pool's class of a product of B rows (cpu_pool_run_weighed,
 * kernels/cpu/pool.h): one row is bound by the weights' bytes, many by the
 * multiply-adds, a few by both, so their times per multiply-add differ. */
static inline int cpu_gemm_pool_class(int B) { return B == 1 ? 0 : B < 16 ? 1 : 2; }

/* y[r·ldy + j] = act(y[r·ldy + j]) for r < rows, j < cols, act the
 * activation flag in flags (none: nothing): the packed kernels' epilogue,
 * also applied by the backend after an OpenBLAS product. Runs on any CPU. */
void cpu_gemm_activate(float *y, int ldy, int rows, int cols, int flags);

/* dst[i] = the fp32 value of the half-precision bits src[i] (wtype F16 or
 * BF16), for i < n: exact. Runs on any CPU (the OpenBLAS path widens half
 * weights at load with it). */
void cpu_gemm_widen(cpu_gemm_wtype wtype, const uint16_t *src, float *dst, size_t n);

/* ---- bf16 compute (opt-in, AVX512_BF16) -----------------------------------
 * The fast mode for bf16 weights: each activation row is rounded once to
 * bf16 (round to nearest even; vcvtneps2bf16, which also flushes fp32
 * subnormal inputs to zero) and multiplied with vdpbf16ps, which adds two
 * bf16·bf16 products per fp32 lane into an fp32 accumulator: twice the FMA
 * rate on AMD's cores (half of it on Intel's, which run the AMX kernel
 * below instead), activations half the bytes. Not exact fp32 math on the widened
 * weights (the default kernels are): docs/NUMERICS.md states the error.
 *
 * Panels are NR512 = 32 columns of k *pairs* (the instruction's operand):
 *
 *   panel p, element (k, j) at [(k/2)·64 + 2·j + k%2] = W[p·32 + j, k]
 *   (zero for p·32 + j ≥ N and, when K is odd, for k = K)
 *
 * Each output element is one fp32 chain of vdpbf16ps over the pairs k/2 =
 * 0…⌈K/2⌉−1 in order, whatever the batch size, the row block or the
 * thread, so the mode is batch-invariant like the fp32 kernels (prefill
 * stays bit-identical to token-by-token decode). The chains' rounding is
 * the instruction's, so results can differ between CPU vendors, never
 * between runs or batch shapes on one CPU. */

/* 1 if this CPU runs the bf16 compute kernels (AVX-512F and AVX512_BF16). */
int cpu_gemm_dot_supported(void);
/* uint16 elements of the packed form of an N × K weight. */
size_t cpu_gemm_dot_packed_elems(int N, int K);
/* Pack bf16 bits W [N × K] row-major into dst (cpu_gemm_dot_packed_elems()
 * elements, caller-owned, 64-byte aligned). Runs on any CPU. */
void cpu_gemm_pack_dot(const uint16_t *W, int N, int K, uint16_t *dst);
/* Row stride (uint16 elements) of the rounded activations of a K-wide row:
 * K rounded up to 32 (64 bytes, and an even count for the last pair), and
 * never a multiple of 4 KiB (so a row block's rows do not all fall in one
 * L1 set). */
int cpu_gemm_dot_ld(int K);
/* dst[b·ldd + k] = bf16(x[b·ldx + k]) (round to nearest even, subnormals to
 * zero) for b < B, k < K, and dst[b·ldd + k] = 0 for K ≤ k < ldd; ldd ≥
 * cpu_gemm_dot_ld(K). Needs cpu_gemm_dot_supported(). */
void cpu_gemm_round_bf16(const float *x, int ldx, int B, int K, uint16_t *dst, int ldd);
/* cpu_gemm_run's product (same flags, bias, panel range [p0, p1) of 32
 * columns, tiles, epilogue) with the rounded activations xb (row stride
 * ldxb, from cpu_gemm_round_bf16) and a weight packed by cpu_gemm_pack_dot.
 * Needs cpu_gemm_dot_supported(). */
void cpu_gemm_run_dot(const uint16_t *xb, int ldxb, const uint16_t *Wp, const float *bias, float *y, int ldy, int B,
                      int N, int K, int p0, int p1, int flags);

/* ---- bf16 compute on AMX tiles (where the CPU has AMX-BF16) ---------------
 * The same product as cpu_gemm_run_dot (same packed weight, same rounded
 * activations, same flags and epilogue) on TDPBF16PS tiles. Each element is
 * one fp32 accumulator over the pairs in order, batch-invariant as the
 * vdpbf16ps kernel, but rounded by the tile unit: its results differ from
 * cpu_gemm_run_dot's in the last bits, so a caller runs one of the two for
 * all of a weight's products. */

/* 1 if this CPU has AMX-BF16 and the kernel let this process use tile data
 * (asked once, for every thread; Linux ARCH_REQ_XCOMP_PERM). */
int cpu_gemm_amx_supported(void);
/* 1 if cpu_gemm_run_dot_amx takes a K-wide weight: K a multiple of 32
 * (whole tiles of 16 pairs; K = 32·n − 1 too, its last pair padded). */
int cpu_gemm_amx_fits(int K);
/* Loads a palette-1 tile configuration on the calling thread: tile t
 * (0–7) rows[t] rows of 64 bytes, none when 0 (for cpu_gemm_run_dot_amx
 * and the benchmarks' tile ceiling; the caller releases the tiles with
 * _tile_release). Needs cpu_gemm_amx_supported(). */
void cpu_gemm_amx_configure(const int rows[8]);
/* Needs cpu_gemm_amx_supported() and cpu_gemm_amx_fits(K); leaves no tile
 * state behind (releases the tiles). */
void cpu_gemm_run_dot_amx(const uint16_t *xb, int ldxb, const uint16_t *Wp, const float *bias, float *y, int ldy,
                          int B, int N, int K, int p0, int p1, int flags);

#endif
