/* kernels/cpu/gemm.c — see gemm.h. AVX-512 intrinsics behind function
 * target attributes, so the file builds with any -march and the backend
 * decides at run time (cpu_gemm_available). */
#include "kernels/cpu/gemm.h"

#if defined(__GNUC__) && !defined(__clang__)
/* where AVX-512 is enabled, let gelu_tile's loop use it (GCC defaults to
 * 256-bit vectors on Intel) */
#pragma GCC target("prefer-vector-width=512")
#endif
#include <immintrin.h>
#include <string.h>

#include "kernels/mixer_math.h"

#define NR CPU_GEMM_NR
#define MR CPU_GEMM_MR
/* The row loops must be unrolled completely so the accumulator arrays live
 * in registers. */
#if defined(__clang__)
#define UNROLL_ROWS _Pragma("clang loop unroll(full)")
#define UNROLL_K _Pragma("clang loop unroll_count(2)")
#define TGT __attribute__((target("avx512f,fma")))
#else
#define UNROLL_ROWS _Pragma("GCC unroll 12")
#define UNROLL_K _Pragma("GCC unroll 2")
#define TGT __attribute__((target("avx512f,fma")))
#endif

int cpu_gemm_available(void) {
#if defined(__x86_64__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma");
#else
    return 0;
#endif
}

int cpu_gemm_panels(int N) { return (N + NR - 1) / NR; }

size_t cpu_gemm_packed_floats(int N, int K) { return (size_t)cpu_gemm_panels(N) * NR * (size_t)K; }

void cpu_gemm_pack(const float *W, int N, int K, float *dst) {
    for (int p = 0; p < cpu_gemm_panels(N); p++) {
        float *panel = dst + (size_t)p * NR * K;
        for (int k = 0; k < K; k++)
            for (int j = 0; j < NR; j++) {
                int n = p * NR + j;
                panel[(size_t)k * NR + j] = n < N ? W[(size_t)n * K + k] : 0.0f;
            }
    }
}

/* GELU over a finished mr × ncols tile of y, still in L1. A plain function
 * (not TGT) so lind_gelu_erf inlines and the loop vectorizes with the
 * file's own flags: GCC does not inline across differing target options. */
__attribute__((noinline)) static void gelu_tile(float *y, int ldy, int mr, int ncols) {
    for (int r = 0; r < mr; r++) {
        float *restrict yr = y + (size_t)r * ldy;
        for (int j = 0; j < ncols; j++) yr[j] = lind_gelu_erf(yr[j]);
    }
}

/* One row block of `mr` rows (a compile-time constant after inlining)
 * against one panel: 2·mr accumulators of 16 floats stay in registers for the
 * whole k loop; each k loads the panel's two vectors once and broadcasts one
 * x value per row straight from x (packing x would cost as much as the
 * multiply-adds when a thread's share of N is a few panels). */
TGT static inline __attribute__((always_inline)) void micro(const int mr, int K, const float *x, int ldx,
                                                            const float *panel, const float *bias, float *y, int ldy,
                                                            int ncols, int flags) {
    __m512 c0[MR], c1[MR];
UNROLL_ROWS
    for (int r = 0; r < mr; r++) {
        c0[r] = _mm512_setzero_ps();
        c1[r] = _mm512_setzero_ps();
    }
UNROLL_K
    for (int k = 0; k < K; k++) {
        __m512 w0 = _mm512_load_ps(panel + (size_t)k * NR), w1 = _mm512_load_ps(panel + (size_t)k * NR + 16);
UNROLL_ROWS
        for (int r = 0; r < mr; r++) {
            __m512 a = _mm512_set1_ps(x[(size_t)r * ldx + k]);
            c0[r] = _mm512_fmadd_ps(a, w0, c0[r]);
            c1[r] = _mm512_fmadd_ps(a, w1, c1[r]);
        }
    }
    __mmask16 m0 = ncols >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << ncols) - 1);
    __mmask16 m1 = ncols >= NR ? (__mmask16)0xFFFF : ncols > 16 ? (__mmask16)((1u << (ncols - 16)) - 1) : 0;
    __m512 b0 = bias ? _mm512_maskz_loadu_ps(m0, bias) : _mm512_setzero_ps();
    __m512 b1 = bias ? _mm512_maskz_loadu_ps(m1, bias + 16) : _mm512_setzero_ps();
UNROLL_ROWS
    for (int r = 0; r < mr; r++) {
        float *yr = y + (size_t)r * ldy;
        __m512 o0 = _mm512_add_ps(c0[r], b0), o1 = _mm512_add_ps(c1[r], b1);
        if (flags & CPU_GEMM_ACCUMULATE) {
            o0 = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, yr), o0);
            o1 = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, yr + 16), o1);
        }
        _mm512_mask_storeu_ps(yr, m0, o0);
        _mm512_mask_storeu_ps(yr + 16, m1, o1);
    }
}

/* The kernel for a run-time row count: one instance per mr. */
TGT static void micro_any(int mr, int K, const float *x, int ldx, const float *panel, const float *bias, float *y,
                          int ldy, int ncols, int flags) {
    switch (mr) {
#define CASE(n) \
    case n: micro(n, K, x, ldx, panel, bias, y, ldy, ncols, flags); break;
        CASE(1) CASE(2) CASE(3) CASE(4) CASE(5) CASE(6) CASE(7) CASE(8) CASE(9) CASE(10) CASE(11) CASE(12)
#undef CASE
    default: break;
    }
}

/* Row blocks of near-equal size (B = 32 → 11, 11, 10): block i covers rows
 * [row0(i), row0(i + 1)). */
static int nblocks(int B) { return (B + MR - 1) / MR; }
static int row0(int B, int nb, int i) { return (int)((long)B * i / nb); }

void cpu_gemm_run(const float *x, int ldx, const float *Wp, const float *bias, float *y, int ldy, int B, int N,
                  int K, int p0, int p1, int flags) {
    int nb = nblocks(B);
    for (int p = p0; p < p1; p++) {
        const float *panel = Wp + (size_t)p * NR * K;
        int ncols = N - p * NR < NR ? N - p * NR : NR;
        const float *bp = bias ? bias + (size_t)p * NR : NULL;
        for (int i = 0; i < nb; i++) {
            int r0 = row0(B, nb, i), mr = row0(B, nb, i + 1) - r0;
            float *yt = y + (size_t)r0 * ldy + (size_t)p * NR;
            micro_any(mr, K, x + (size_t)r0 * ldx, ldx, panel, bp, yt, ldy, ncols, flags);
            if (flags & CPU_GEMM_GELU) gelu_tile(yt, ldy, mr, ncols);
        }
    }
}
