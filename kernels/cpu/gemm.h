/* kernels/cpu/gemm.h — the CPU backend's decode-step matrix product.
 *
 * A decode step multiplies a short, wide activation block x [B × K] (B = the
 * sessions stepping together, 1…256) by the transpose of a weight W [N × K]
 * that never changes. General SGEMMs (OpenBLAS) repack W on every call and
 * are tuned for big square products; at these shapes the repacking alone
 * took about a sixth of a step. Here W is packed once, at load, into panels
 * of CPU_GEMM_NR output columns laid out k-major, and an AVX-512 micro-kernel
 * streams a panel against up to CPU_GEMM_MR rows of x held as broadcasts:
 *
 *   panel p, element (k, j) = W[p·NR + j, k]   (zero for p·NR + j ≥ N)
 *
 * Each output element is one fp32 fused-multiply-add chain over k = 0…K−1 in
 * order, whatever B, the row block or the thread: a session's results do not
 * depend on which other sessions share its step.
 *
 * Used only when the CPU has AVX-512F (checked at run time); otherwise the
 * backend keeps calling OpenBLAS. */
#ifndef LIND_KERNELS_CPU_GEMM_H
#define LIND_KERNELS_CPU_GEMM_H

#include <stddef.h>

#define CPU_GEMM_NR 32   /* output columns per panel: two 16-float vectors */
#define CPU_GEMM_MR 12   /* rows of x per micro-kernel call */

/* cpu_gemm_run flags (the same values as kernels/backend.h's matmul flags) */
#define CPU_GEMM_ACCUMULATE 1
#define CPU_GEMM_GELU       2

/* 1 when this CPU can run the packed kernel (AVX-512F). */
int cpu_gemm_available(void);

/* Panels of an N-column weight, and floats of its packed form. */
int    cpu_gemm_panels(int N);
size_t cpu_gemm_packed_floats(int N, int K);

/* Pack W [N × K] row-major into dst (cpu_gemm_packed_floats(N, K) floats,
 * caller-owned). */
void cpu_gemm_pack(const float *W, int N, int K, float *dst);

/* Output columns of panels [p0, p1) of
 *   y[b, n] = (ACCUMULATE ? y[b, n] : 0) + (bias ? bias[n] : 0) + Σ_k x[b, k]·W[n, k]
 * or, with CPU_GEMM_GELU, y[b, n] = lind_gelu_erf(bias[n] + Σ) applied while
 * the tile is still in registers; for b < B, with x row stride ldx and y row
 * stride ldy (floats); Wp is the packed weight. Columns n ≥ N are never
 * written. The bias is added to the finished sum: y + (bias + Σ) when
 * accumulating. Loop order: panels outer, row blocks inner, so a panel is read from
 * memory once per call and the caller's share of W stays in its caches. */
void cpu_gemm_run(const float *x, int ldx, const float *Wp, const float *bias, float *y, int ldy,
                  int B, int N, int K, int p0, int p1, int flags);

#endif
