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
 * same results bit for bit). */
#ifndef LIND_KERNELS_CPU_GEMM_H
#define LIND_KERNELS_CPU_GEMM_H

#include <stddef.h>

typedef enum cpu_gemm_isa {
    CPU_GEMM_NONE = 0,     /* neither: the backend uses OpenBLAS */
    CPU_GEMM_AVX2 = 1,
    CPU_GEMM_AVX512 = 2,
} cpu_gemm_isa;

/* cpu_gemm_run flags (the same values as kernels/backend.h's matmul flags) */
#define CPU_GEMM_ACCUMULATE 1
#define CPU_GEMM_GELU       2

/* The best kernel this CPU runs. */
cpu_gemm_isa cpu_gemm_detect(void);
/* 1 if this CPU runs isa's kernel. */
int cpu_gemm_supported(cpu_gemm_isa isa);
/* "AVX-512", "AVX2", "none". */
const char *cpu_gemm_isa_name(cpu_gemm_isa isa);

/* Panel width, panels of an N-column weight, floats of its packed form
 * (isa ≠ CPU_GEMM_NONE). */
int    cpu_gemm_nr(cpu_gemm_isa isa);
int    cpu_gemm_panels(cpu_gemm_isa isa, int N);
size_t cpu_gemm_packed_floats(cpu_gemm_isa isa, int N, int K);

/* Pack W [N × K] row-major into dst (cpu_gemm_packed_floats() floats,
 * caller-owned, 32-byte aligned at least). */
void cpu_gemm_pack(cpu_gemm_isa isa, const float *W, int N, int K, float *dst);

/* Output columns of panels [p0, p1) of
 *   y[b, n] = (ACCUMULATE ? y[b, n] : 0) + (bias ? bias[n] : 0) + Σ_k x[b, k]·W[n, k]
 * or, with CPU_GEMM_GELU, y[b, n] = lind_gelu_erf(bias[n] + Σ), applied to
 * each finished tile while it is in L1; for b < B, with x row stride ldx and
 * y row stride ldy (floats); Wp is the weight packed for the same isa, which
 * the CPU must support. Columns n ≥ N are never written. The bias is added
 * to the finished sum: y + (bias + Σ) when accumulating. Loop order: panels
 * outer, row blocks inner, so a panel is read from memory once per call and
 * the caller's share of W stays in its caches. */
void cpu_gemm_run(cpu_gemm_isa isa, const float *x, int ldx, const float *Wp, const float *bias, float *y,
                  int ldy, int B, int N, int K, int p0, int p1, int flags);

/* y[r·ldy + j] = lind_gelu_erf(y[r·ldy + j]) for r < rows, j < cols: the
 * CPU_GEMM_GELU activation, also applied by the backend after an OpenBLAS
 * product. Runs on any CPU. */
void cpu_gemm_gelu(float *y, int ldy, int rows, int cols);

#endif
