/* kernels/cpu/gemm.c — see gemm.h. AVX-512 and AVX2 intrinsics behind
 * function target attributes, so the file builds with any -march and the
 * backend decides at run time (cpu_gemm_detect). */
#include "kernels/cpu/gemm.h"

#if defined(__GNUC__) && !defined(__clang__)
/* where AVX-512 is enabled, let cpu_gemm_gelu's loop use it (GCC defaults to
 * 256-bit vectors on Intel) */
#pragma GCC target("prefer-vector-width=512")
#endif
#include <immintrin.h>
#include <string.h>

#include "kernels/mixer_math.h"

/* The row loops must be unrolled completely so the accumulator arrays live
 * in registers. */
#if defined(__clang__)
#define UNROLL_ROWS _Pragma("clang loop unroll(full)")
#define UNROLL_K _Pragma("clang loop unroll_count(2)")
#else
#define UNROLL_ROWS _Pragma("GCC unroll 12")
#define UNROLL_K _Pragma("GCC unroll 2")
#endif
#define TGT512 __attribute__((target("avx512f,fma")))
#define TGT256 __attribute__((target("avx2,fma")))

#define NR512 32
#define MR512 12
#define NR256 16
#define MR256 6

int cpu_gemm_supported(cpu_gemm_isa isa) {
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (isa == CPU_GEMM_AVX512) return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma");
    if (isa == CPU_GEMM_AVX2) return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
    return isa == CPU_GEMM_NONE;
}

cpu_gemm_isa cpu_gemm_detect(void) {
    if (cpu_gemm_supported(CPU_GEMM_AVX512)) return CPU_GEMM_AVX512;
    if (cpu_gemm_supported(CPU_GEMM_AVX2)) return CPU_GEMM_AVX2;
    return CPU_GEMM_NONE;
}

const char *cpu_gemm_isa_name(cpu_gemm_isa isa) {
    return isa == CPU_GEMM_AVX512 ? "AVX-512" : isa == CPU_GEMM_AVX2 ? "AVX2" : "none";
}

int cpu_gemm_nr(cpu_gemm_isa isa) { return isa == CPU_GEMM_AVX512 ? NR512 : NR256; }

int cpu_gemm_panels(cpu_gemm_isa isa, int N) { return (N + cpu_gemm_nr(isa) - 1) / cpu_gemm_nr(isa); }

size_t cpu_gemm_packed_floats(cpu_gemm_isa isa, int N, int K) {
    return (size_t)cpu_gemm_panels(isa, N) * (size_t)cpu_gemm_nr(isa) * (size_t)K;
}

void cpu_gemm_pack(cpu_gemm_isa isa, const float *W, int N, int K, float *dst) {
    int nr = cpu_gemm_nr(isa);
    for (int p = 0; p < cpu_gemm_panels(isa, N); p++) {
        float *panel = dst + (size_t)p * nr * K;
        for (int k = 0; k < K; k++)
            for (int j = 0; j < nr; j++) {
                int n = p * nr + j;
                panel[(size_t)k * nr + j] = n < N ? W[(size_t)n * K + k] : 0.0f;
            }
    }
}

/* A plain function (no target attribute) so lind_gelu_erf inlines and the
 * loop vectorizes with the file's own flags: GCC does not inline across
 * differing target options. The packed kernels call it on each finished
 * tile while it is still in L1. */
void cpu_gemm_gelu(float *y, int ldy, int rows, int cols) {
    for (int r = 0; r < rows; r++) {
        float *restrict yr = y + (size_t)r * ldy;
        for (int j = 0; j < cols; j++) yr[j] = lind_gelu_erf(yr[j]);
    }
}

/* ---- AVX-512: 12 rows × 32 columns ---------------------------------------
 * One row block of `mr` rows (a compile-time constant after inlining)
 * against one panel: 2·mr accumulators of 16 floats stay in registers for the
 * whole k loop; each k loads the panel's two vectors once and broadcasts one
 * x value per row straight from x (packing x would cost as much as the
 * multiply-adds when a thread's share of N is a few panels). */
TGT512 static inline __attribute__((always_inline)) void micro512(const int mr, int K, const float *x, int ldx,
                                                                  const float *panel, const float *bias, float *y,
                                                                  int ldy, int ncols, int flags) {
    __m512 c0[MR512], c1[MR512];
    UNROLL_ROWS
    for (int r = 0; r < mr; r++) {
        c0[r] = _mm512_setzero_ps();
        c1[r] = _mm512_setzero_ps();
    }
    UNROLL_K
    for (int k = 0; k < K; k++) {
        __m512 w0 = _mm512_load_ps(panel + (size_t)k * NR512), w1 = _mm512_load_ps(panel + (size_t)k * NR512 + 16);
        UNROLL_ROWS
        for (int r = 0; r < mr; r++) {
            __m512 a = _mm512_set1_ps(x[(size_t)r * ldx + k]);
            c0[r] = _mm512_fmadd_ps(a, w0, c0[r]);
            c1[r] = _mm512_fmadd_ps(a, w1, c1[r]);
        }
    }
    __mmask16 m0 = ncols >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << ncols) - 1);
    __mmask16 m1 = ncols >= NR512 ? (__mmask16)0xFFFF : ncols > 16 ? (__mmask16)((1u << (ncols - 16)) - 1) : 0;
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
TGT512 static void micro512_any(int mr, int K, const float *x, int ldx, const float *panel, const float *bias,
                                float *y, int ldy, int ncols, int flags) {
    switch (mr) {
#define CASE(n) \
    case n: micro512(n, K, x, ldx, panel, bias, y, ldy, ncols, flags); break;
        CASE(1) CASE(2) CASE(3) CASE(4) CASE(5) CASE(6) CASE(7) CASE(8) CASE(9) CASE(10) CASE(11) CASE(12)
#undef CASE
    default: break;
    }
}

/* ---- AVX2: 6 rows × 16 columns --------------------------------------------
 * The same scheme in 8-float vectors: 2·mr ≤ 12 accumulators, two panel
 * vectors and one broadcast fill the 16 registers. Partial panels are
 * masked with an integer lane mask. */
TGT256 static inline __attribute__((always_inline)) __m256i lane_mask256(int n) {
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), idx);   /* lane i on when i < n */
}

TGT256 static inline __attribute__((always_inline)) void micro256(const int mr, int K, const float *x, int ldx,
                                                                  const float *panel, const float *bias, float *y,
                                                                  int ldy, int ncols, int flags) {
    __m256 c0[MR256], c1[MR256];
    UNROLL_ROWS
    for (int r = 0; r < mr; r++) {
        c0[r] = _mm256_setzero_ps();
        c1[r] = _mm256_setzero_ps();
    }
    UNROLL_K
    for (int k = 0; k < K; k++) {
        __m256 w0 = _mm256_load_ps(panel + (size_t)k * NR256), w1 = _mm256_load_ps(panel + (size_t)k * NR256 + 8);
        UNROLL_ROWS
        for (int r = 0; r < mr; r++) {
            __m256 a = _mm256_broadcast_ss(x + (size_t)r * ldx + k);
            c0[r] = _mm256_fmadd_ps(a, w0, c0[r]);
            c1[r] = _mm256_fmadd_ps(a, w1, c1[r]);
        }
    }
    __m256i m0 = lane_mask256(ncols), m1 = lane_mask256(ncols - 8);
    __m256 b0 = bias ? _mm256_maskload_ps(bias, m0) : _mm256_setzero_ps();
    __m256 b1 = bias ? _mm256_maskload_ps(bias + 8, m1) : _mm256_setzero_ps();
    UNROLL_ROWS
    for (int r = 0; r < mr; r++) {
        float *yr = y + (size_t)r * ldy;
        __m256 o0 = _mm256_add_ps(c0[r], b0), o1 = _mm256_add_ps(c1[r], b1);
        if (flags & CPU_GEMM_ACCUMULATE) {
            o0 = _mm256_add_ps(_mm256_maskload_ps(yr, m0), o0);
            o1 = _mm256_add_ps(_mm256_maskload_ps(yr + 8, m1), o1);
        }
        _mm256_maskstore_ps(yr, m0, o0);
        _mm256_maskstore_ps(yr + 8, m1, o1);
    }
}

TGT256 static void micro256_any(int mr, int K, const float *x, int ldx, const float *panel, const float *bias,
                                float *y, int ldy, int ncols, int flags) {
    switch (mr) {
#define CASE(n) \
    case n: micro256(n, K, x, ldx, panel, bias, y, ldy, ncols, flags); break;
        CASE(1) CASE(2) CASE(3) CASE(4) CASE(5) CASE(6)
#undef CASE
    default: break;
    }
}

/* Row blocks of near-equal size (B = 32 with MR 12 → 10, 11, 11): block i
 * covers rows [row0(i), row0(i + 1)). */
static int row0(int B, int nb, int i) { return (int)((long)B * i / nb); }

void cpu_gemm_run(cpu_gemm_isa isa, const float *x, int ldx, const float *Wp, const float *bias, float *y,
                  int ldy, int B, int N, int K, int p0, int p1, int flags) {
    int nr = cpu_gemm_nr(isa), mrmax = isa == CPU_GEMM_AVX512 ? MR512 : MR256;
    int nb = (B + mrmax - 1) / mrmax;
    for (int p = p0; p < p1; p++) {
        const float *panel = Wp + (size_t)p * nr * K;
        int ncols = N - p * nr < nr ? N - p * nr : nr;
        const float *bp = bias ? bias + (size_t)p * nr : NULL;
        for (int i = 0; i < nb; i++) {
            int r0 = row0(B, nb, i), mr = row0(B, nb, i + 1) - r0;
            float *yt = y + (size_t)r0 * ldy + (size_t)p * nr;
            if (isa == CPU_GEMM_AVX512)
                micro512_any(mr, K, x + (size_t)r0 * ldx, ldx, panel, bp, yt, ldy, ncols, flags);
            else
                micro256_any(mr, K, x + (size_t)r0 * ldx, ldx, panel, bp, yt, ldy, ncols, flags);
            if (flags & CPU_GEMM_GELU) cpu_gemm_gelu(yt, ldy, mr, ncols);
        }
    }
}
