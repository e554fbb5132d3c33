/* kernels/cpu/gemm.c — see gemm.h. AVX-512 and AVX2 intrinsics behind
 * function target attributes, so the file builds with any -march and the
 * backend decides at run time (cpu_gemm_detect). Each kernel is one inline
 * template over the row count and the weight type (both compile-time
 * constants after inlining), instantiated by a switch. */
#include "kernels/cpu/gemm.h"

#if defined(__GNUC__) && !defined(__clang__)
/* where AVX-512 is enabled, let cpu_gemm_activate's loops use it (GCC
 * defaults to 256-bit vectors on Intel) */
#pragma GCC target("prefer-vector-width=512")
#endif
#include <cpuid.h>
#include <immintrin.h>
#include <pthread.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

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
#define TGT256 __attribute__((target("avx2,fma,f16c")))
#define INLINE static inline __attribute__((always_inline))

#define NR512 32
#define MR512 12
#define NR256 16
#define MR256 6
/* Panels the single-row kernels stream at once: AVX-512 eight (16 chains;
 * on the Intel host eight streams read faster than four, docs/CPU.md
 * "Decode at B = 1"), AVX2 four (its 16 registers hold 8 chains and their
 * loads). A B = 1 caller's ranges are multiples of CPU_GEMM_ROW_GROUP; what
 * is left of a range after whole groups runs as one smaller group. */
#define G1_512 8
#define G1_256 4
_Static_assert(G1_256 == CPU_GEMM_ROW_GROUP && G1_512 % CPU_GEMM_ROW_GROUP == 0, "B = 1 groups");
/* A half panel is widened once into the caller's scratch, by its first row
 * block, when at least this many row blocks will read it (below, widening in
 * registers costs less; measured with a separate widening pass). */
#define WIDEN_MIN_BLOCKS 3
/* B > 1: bytes ahead in its own panel each k step prefetches into L1. The
 * panel comes from L2 (or memory, in the first row block) and a tile
 * broadcasts from twelve rows of x besides; the hardware's L1 prefetch
 * alone left it waiting (in-process A/B on 2 threads, 1,024–4,096 ahead:
 * 1.01–1.12 by shape, 2,048 the best overall; docs/CPU.md). */
#define PANEL_AHEAD 2048

/* Next-panel prefetch for B > 1. A panel's first row block reads it from
 * memory and the others from L2, so the first would wait on memory with no
 * multiply-adds to overlap. The blocks after the first (the only block,
 * when there is one) fetch the next panel into L2 as they go, `step` bytes
 * of it per k step (32: a line every second step; 64 or 128 where the
 * later blocks have too few steps for that to cover the panel), spread
 * among the multiply-adds and over as many blocks as it takes
 * (docs/CPU.md). */
typedef struct pf_plan {
    const char *next;   /* the next panel's first byte; NULL: nothing to fetch */
    size_t bytes, done; /* its size, and how much the earlier blocks fetched */
    int step;           /* bytes per k step: 32, 64 or 128 */
    int steps, nb;      /* k steps per block, row blocks per panel */
} pf_plan;

static pf_plan pf_begin(const char *next, size_t pstride, int steps, int nb)
{
    int blocks = nb == 1 ? 1 : nb - 1;
    size_t cover = (size_t)blocks * steps;   /* × step: what the blocks could fetch */
    int step = cover * 32 >= pstride ? 32 : cover * 64 >= pstride ? 64 : 128;
    pf_plan f = {next, pstride, 0, step, steps, nb};
    return f;
}

/* Where block i fetches from (NULL: it fetches nothing), and counts it. */
static const char *pf_block(pf_plan *f, int i)
{
    if (!f->next || (i == 0 && f->nb > 1) || f->done >= f->bytes) return NULL;
    const char *at = f->next + f->done;
    f->done += (size_t)f->steps * f->step;
    return at;
}

/* The next panel's line(s) at k step k (prefetches never fault: the last
 * block's lines may run past the panel's end; at 32 bytes a step each line
 * is asked for twice, the second time a hit). pfs is a compile-time
 * constant in every kernel (PF_CALL): 0, 32, 64 or 128. */
#define PF_STEP(pf, pfs, k)                                                  \
    do {                                                                     \
        if (pfs) {                                                           \
            _mm_prefetch((pf) + (size_t)(k) * (pfs), _MM_HINT_T1);           \
            if ((pfs) > 64) _mm_prefetch((pf) + (size_t)(k) * (pfs) + 64, _MM_HINT_T1); \
        }                                                                    \
    } while (0)

/* KERNEL(args..., pf, pfs) with pfs a constant: the k loops carry no
 * prefetch tests (with them, a test and one or two branches a k step, and
 * a stack reload of pfs: 2–4% slower at B = 64, docs/CPU.md). */
#define PF_CALL(KERNEL, pf, pfs, ...)                                        \
    do {                                                                     \
        if (!(pf))                                                           \
            KERNEL(__VA_ARGS__, NULL, 0);                                    \
        else if ((pfs) > 64)                                                 \
            KERNEL(__VA_ARGS__, pf, 128);                                    \
        else if ((pfs) > 32)                                                 \
            KERNEL(__VA_ARGS__, pf, 64);                                     \
        else                                                                 \
            KERNEL(__VA_ARGS__, pf, 32);                                     \
    } while (0)

int cpu_gemm_supported(cpu_gemm_isa isa)
{
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (isa == CPU_GEMM_AVX512) return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma");
    /* every AVX2 CPU has F16C (fp16 weights' vcvtph2ps) */
    if (isa == CPU_GEMM_AVX2) return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
    return isa == CPU_GEMM_NONE;
}

cpu_gemm_isa cpu_gemm_detect(void)
{
    if (cpu_gemm_supported(CPU_GEMM_AVX512)) return CPU_GEMM_AVX512;
    if (cpu_gemm_supported(CPU_GEMM_AVX2)) return CPU_GEMM_AVX2;
    return CPU_GEMM_NONE;
}

const char *cpu_gemm_isa_name(cpu_gemm_isa isa)
{
    return isa == CPU_GEMM_AVX512 ? "AVX-512" : isa == CPU_GEMM_AVX2 ? "AVX2" : "none";
}

int cpu_gemm_nr(cpu_gemm_isa isa) { return isa == CPU_GEMM_AVX512 ? NR512 : NR256; }

int cpu_gemm_panels(cpu_gemm_isa isa, int N) { return (N + cpu_gemm_nr(isa) - 1) / cpu_gemm_nr(isa); }

size_t cpu_gemm_packed_floats(cpu_gemm_isa isa, int N, int K)
{
    return (size_t)cpu_gemm_panels(isa, N) * (size_t)cpu_gemm_nr(isa) * (size_t)K;
}

void cpu_gemm_pack(cpu_gemm_isa isa, const float *W, int N, int K, float *dst)
{
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

/* 16-bit panels: column j of a panel row at slot j, or (interleaved, bf16)
 * the two column halves alternating: j < nr/2 at 2j, the others at
 * 2(j − nr/2) + 1. */
static void pack16(cpu_gemm_isa isa, const uint16_t *W, int N, int K, uint16_t *dst, int interleaved)
{
    int nr = cpu_gemm_nr(isa), h = nr / 2;
    for (int p = 0; p < cpu_gemm_panels(isa, N); p++) {
        uint16_t *panel = dst + (size_t)p * nr * K;
        for (int k = 0; k < K; k++)
            for (int j = 0; j < nr; j++) {
                int n = p * nr + j, slot = !interleaved ? j : j < h ? 2 * j : 2 * (j - h) + 1;
                panel[(size_t)k * nr + slot] = n < N ? W[(size_t)n * K + k] : 0;   /* +0 in both formats */
            }
    }
}

void cpu_gemm_pack_half(cpu_gemm_isa isa, const uint16_t *W, int N, int K, uint16_t *dst)
{
    pack16(isa, W, N, K, dst, 0);
}

void cpu_gemm_pack_bf16(cpu_gemm_isa isa, const uint16_t *W, int N, int K, uint16_t *dst)
{
    pack16(isa, W, N, K, dst, 1);
}

void cpu_gemm_widen(cpu_gemm_wtype wtype, const uint16_t *src, float *dst, size_t n)
{
    if (wtype == CPU_GEMM_BF16)
        for (size_t i = 0; i < n; i++) dst[i] = lind_bf16_to_float(src[i]);
    else
        for (size_t i = 0; i < n; i++) dst[i] = lind_f16_to_float(src[i]);
}

/* Plain functions (no target attribute) so the activations inline and the
 * loops vectorize with the file's own flags: GCC does not inline across
 * differing target options. The packed kernels call cpu_gemm_activate on
 * a panel's columns once all its rows are stored (B = 1: on each group). */
__attribute__((noinline)) static void act_gelu(float *restrict y, int n)
{
    for (int j = 0; j < n; j++) y[j] = lind_gelu_erf(y[j]);
}
__attribute__((noinline)) static void act_relu2(float *restrict y, int n)
{
    for (int j = 0; j < n; j++) y[j] = lind_relu2(y[j]);
}
__attribute__((noinline)) static void act_sigmoid(float *restrict y, int n)
{
    for (int j = 0; j < n; j++) y[j] = lind_sigmoid(y[j]);
}

void cpu_gemm_activate(float *y, int ldy, int rows, int cols, int flags)
{
    void (*f)(float *restrict, int) = (flags & CPU_GEMM_GELU)      ? act_gelu
                                      : (flags & CPU_GEMM_RELU2)   ? act_relu2
                                      : (flags & CPU_GEMM_SIGMOID) ? act_sigmoid
                                                                   : NULL;
    if (!f) return;
    for (int r = 0; r < rows; r++) f(y + (size_t)r * ldy, cols);
}

/* ---- AVX-512: 12 rows × 32 columns ---------------------------------------
 * One row block of `mr` rows against one panel: 2·mr accumulators of 16
 * floats stay in registers for the whole k loop; each k loads the panel's
 * two vectors once (widening half weights in registers) and broadcasts one x
 * value per row straight from x (packing x would cost as much as the
 * multiply-adds when a thread's share of N is a few panels). */

/* Panel row k as two vectors of 16 floats: columns 0–15 and 16–31. */
TGT512 INLINE void wload512(const cpu_gemm_wtype wt, const void *panel, size_t k, __m512 *w0, __m512 *w1)
{
    if (wt == CPU_GEMM_F32) {
        const float *p = (const float *)panel + k * NR512;
        *w0 = _mm512_load_ps(p);
        *w1 = _mm512_load_ps(p + 16);
        return;
    }
    if (wt == CPU_GEMM_F16) {
        const __m256i *p = (const __m256i *)((const uint16_t *)panel + k * NR512);
        *w0 = _mm512_cvtph_ps(_mm256_load_si256(p));
        *w1 = _mm512_cvtph_ps(_mm256_load_si256(p + 1));
    } else {   /* bf16 → fp32, the 16 bits become the top half: lane j holds columns j (low) and 16 + j (high) */
        __m512i v = _mm512_load_si512((const void *)((const uint16_t *)panel + k * NR512));
        *w0 = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
        *w1 = _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32((int)0xFFFF0000u)));
    }
}

/* Lane masks of a panel's first ncols columns. */
TGT512 INLINE __mmask16 mask512_lo(int ncols)
{
    return ncols >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << ncols) - 1);
}
TGT512 INLINE __mmask16 mask512_hi(int ncols)
{
    return ncols >= NR512 ? (__mmask16)0xFFFF : ncols > 16 ? (__mmask16)((1u << (ncols - 16)) - 1) : 0;
}

/* One finished row of a tile: y = (ACCUMULATE ? y : 0) + (bias + Σ). */
TGT512 INLINE void store512(float *yr, __m512 c0, __m512 c1, __m512 b0, __m512 b1, __mmask16 m0, __mmask16 m1,
                            int flags)
{
    __m512 o0 = _mm512_add_ps(c0, b0), o1 = _mm512_add_ps(c1, b1);
    if (flags & CPU_GEMM_ACCUMULATE) {
        o0 = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, yr), o0);
        o1 = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, yr + 16), o1);
    }
    _mm512_mask_storeu_ps(yr, m0, o0);
    _mm512_mask_storeu_ps(yr + 16, m1, o1);
}

/* keep (a constant): also store the panel as widened, K·NR512 floats to
 * wide, for the next row blocks' fp32 kernel (cpu_gemm_run). */
TGT512 INLINE void micro512k(const int mr, const cpu_gemm_wtype wt, const int keep, int K, const float *x, int ldx,
                             const void *panel, const float *bias, float *y, int ldy, int ncols, int flags,
                             float *wide, const char *pf, const int pfs)
{
    __m512 c0[MR512], c1[MR512];
    UNROLL_ROWS
    for (int r = 0; r < mr; r++) {
        c0[r] = _mm512_setzero_ps();
        c1[r] = _mm512_setzero_ps();
    }
    UNROLL_K
    for (int k = 0; k < K; k++) {
        __m512 w0, w1;
        PF_STEP(pf, pfs, k);
        {   /* a panel row: 128 bytes in fp32, 64 in half */
            const size_t rb = wt == CPU_GEMM_F32 ? NR512 * 4 : NR512 * 2;
            _mm_prefetch((const char *)panel + (size_t)k * rb + PANEL_AHEAD, _MM_HINT_T0);
            if (rb > 64) _mm_prefetch((const char *)panel + (size_t)k * rb + PANEL_AHEAD + 64, _MM_HINT_T0);
        }
        wload512(wt, panel, (size_t)k, &w0, &w1);
        if (keep) {
            _mm512_store_ps(wide + (size_t)k * NR512, w0);
            _mm512_store_ps(wide + (size_t)k * NR512 + 16, w1);
        }
        UNROLL_ROWS
        for (int r = 0; r < mr; r++) {
            __m512 a = _mm512_set1_ps(x[(size_t)r * ldx + k]);
            c0[r] = _mm512_fmadd_ps(a, w0, c0[r]);
            c1[r] = _mm512_fmadd_ps(a, w1, c1[r]);
        }
    }
    __mmask16 m0 = mask512_lo(ncols), m1 = mask512_hi(ncols);
    __m512 b0 = bias ? _mm512_maskz_loadu_ps(m0, bias) : _mm512_setzero_ps();
    __m512 b1 = bias ? _mm512_maskz_loadu_ps(m1, bias + 16) : _mm512_setzero_ps();
    UNROLL_ROWS
    for (int r = 0; r < mr; r++) store512(y + (size_t)r * ldy, c0[r], c1[r], b0, b1, m0, m1, flags);
}
TGT512 INLINE void micro512(const int mr, const cpu_gemm_wtype wt, int K, const float *x, int ldx, const void *panel,
                            const float *bias, float *y, int ldy, int ncols, int flags, const char *pf, int pfs)
{
    PF_CALL(micro512k, pf, pfs, mr, wt, 0, K, x, ldx, panel, bias, y, ldy, ncols, flags, NULL);
}

/* One row against gs ≤ G1_512 consecutive panels (B = 1: the weights' bytes
 * are the whole cost), the last of them with ncols columns. Two chains per
 * panel would leave the loads waiting on FMA latency; gs panels give 2·gs
 * independent chains. No software prefetch: the hardware prefetchers follow
 * these sequential streams, and prefetching 1–2 KB ahead measured slower
 * for half weights (docs/CPU.md). The per-element chains are micro512's. */
TGT512 INLINE void row512(const cpu_gemm_wtype wt, const int gs, int K, const float *x, const void *panels,
                          size_t pstride, const float *bias, float *y, int ncols, int flags)
{
    const char *pp[G1_512];
    __m512 c0[G1_512], c1[G1_512];
    for (int g = 0; g < gs; g++) {
        pp[g] = (const char *)panels + (size_t)g * pstride;
        c0[g] = c1[g] = _mm512_setzero_ps();
    }
    UNROLL_K
    for (int k = 0; k < K; k++) {
        __m512 a = _mm512_set1_ps(x[k]);
        UNROLL_ROWS
        for (int g = 0; g < gs; g++) {
            __m512 w0, w1;
            wload512(wt, pp[g], (size_t)k, &w0, &w1);
            c0[g] = _mm512_fmadd_ps(a, w0, c0[g]);
            c1[g] = _mm512_fmadd_ps(a, w1, c1[g]);
        }
    }
    for (int g = 0; g < gs; g++) {
        int nc = g < gs - 1 ? NR512 : ncols;
        __mmask16 m0 = mask512_lo(nc), m1 = mask512_hi(nc);
        __m512 b0 = bias ? _mm512_maskz_loadu_ps(m0, bias + g * NR512) : _mm512_setzero_ps();
        __m512 b1 = bias ? _mm512_maskz_loadu_ps(m1, bias + g * NR512 + 16) : _mm512_setzero_ps();
        store512(y + g * NR512, c0[g], c1[g], b0, b1, m0, m1, flags);
    }
}

/* The kernels for a run-time row count and weight type: one instance each. */
#define ROWS12(M) M(1) M(2) M(3) M(4) M(5) M(6) M(7) M(8) M(9) M(10) M(11) M(12)
#define ROWS6(M) M(1) M(2) M(3) M(4) M(5) M(6)

#define DEF_ANY512(WT, SUF)                                                                                     \
    TGT512 static void micro512_##SUF(int mr, int K, const float *x, int ldx, const void *panel,              \
                                      const float *bias, float *y, int ldy, int ncols, int flags,               \
                                      const char *pf, int pfs) {                                                \
        switch (mr) {                                                                                           \
            ROWS12(CASE512_##SUF)                                                                               \
        default: break;                                                                                         \
        }                                                                                                       \
    }                                                                                                           \
    TGT512 static void row512_##SUF(int gs, int K, const float *x, const void *panels, size_t pstride,          \
                                    const float *bias, float *y, int ncols, int flags) {                        \
        switch (gs) {                                                                                           \
        case 1: row512(WT, 1, K, x, panels, pstride, bias, y, ncols, flags); break;                             \
        case 2: row512(WT, 2, K, x, panels, pstride, bias, y, ncols, flags); break;                             \
        case 3: row512(WT, 3, K, x, panels, pstride, bias, y, ncols, flags); break;                             \
        case 4: row512(WT, 4, K, x, panels, pstride, bias, y, ncols, flags); break;                             \
        case 5: row512(WT, 5, K, x, panels, pstride, bias, y, ncols, flags); break;                             \
        case 6: row512(WT, 6, K, x, panels, pstride, bias, y, ncols, flags); break;                             \
        case 7: row512(WT, 7, K, x, panels, pstride, bias, y, ncols, flags); break;                             \
        default: row512(WT, G1_512, K, x, panels, pstride, bias, y, ncols, flags); break;                           \
        }                                                                                                       \
    }
#define CASE512_f32(n) case n: micro512(n, CPU_GEMM_F32, K, x, ldx, panel, bias, y, ldy, ncols, flags, pf, pfs); break;
#define CASE512_f16(n) case n: micro512(n, CPU_GEMM_F16, K, x, ldx, panel, bias, y, ldy, ncols, flags, pf, pfs); break;
#define CASE512_bf16(n) case n: micro512(n, CPU_GEMM_BF16, K, x, ldx, panel, bias, y, ldy, ncols, flags, pf, pfs); break;
DEF_ANY512(CPU_GEMM_F32, f32)
DEF_ANY512(CPU_GEMM_F16, f16)
DEF_ANY512(CPU_GEMM_BF16, bf16)

/* A half panel's first row block, keeping the panel widened in wide
 * (K·NR512 floats) for the fp32 kernel of the next blocks: the stores ride
 * along the block's multiply-adds. A widening pass of its own waited on
 * them instead, the scratch being larger than L1 (1 thread, batch 64 on
 * bf16 weights: 14% of the samples). */
#define CASE512K_f16(n) case n: micro512k(n, CPU_GEMM_F16, 1, K, x, ldx, panel, bias, y, ldy, ncols, flags, wide, NULL, 0); break;
#define CASE512K_bf16(n) case n: micro512k(n, CPU_GEMM_BF16, 1, K, x, ldx, panel, bias, y, ldy, ncols, flags, wide, NULL, 0); break;
TGT512 static void micro512_keep(cpu_gemm_wtype wt, int mr, int K, const float *x, int ldx, const void *panel,
                                 const float *bias, float *y, int ldy, int ncols, int flags, float *wide)
{
    if (wt == CPU_GEMM_F16) {
        switch (mr) {
            ROWS12(CASE512K_f16)
        default: break;
        }
    } else {
        switch (mr) {
            ROWS12(CASE512K_bf16)
        default: break;
        }
    }
}

/* ---- AVX2: 6 rows × 16 columns --------------------------------------------
 * The same scheme in 8-float vectors: 2·mr ≤ 12 accumulators, two panel
 * vectors and one broadcast fill the 16 registers. Partial panels are
 * masked with an integer lane mask. */
TGT256 INLINE __m256i lane_mask256(int n)
{
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), idx);   /* lane i on when i < n */
}

TGT256 INLINE void wload256(const cpu_gemm_wtype wt, const void *panel, size_t k, __m256 *w0, __m256 *w1)
{
    if (wt == CPU_GEMM_F32) {
        const float *p = (const float *)panel + k * NR256;
        *w0 = _mm256_load_ps(p);
        *w1 = _mm256_load_ps(p + 8);
        return;
    }
    if (wt == CPU_GEMM_F16) {
        const __m128i *p = (const __m128i *)((const uint16_t *)panel + k * NR256);
        *w0 = _mm256_cvtph_ps(_mm_load_si128(p));
        *w1 = _mm256_cvtph_ps(_mm_load_si128(p + 1));
    } else {   /* as wload512: lane j holds columns j and 8 + j */
        __m256i v = _mm256_load_si256((const __m256i *)((const uint16_t *)panel + k * NR256));
        *w0 = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
        *w1 = _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32((int)0xFFFF0000u)));
    }
}

TGT256 INLINE void store256(float *yr, __m256 c0, __m256 c1, __m256 b0, __m256 b1, __m256i m0, __m256i m1,
                            int flags)
{
    __m256 o0 = _mm256_add_ps(c0, b0), o1 = _mm256_add_ps(c1, b1);
    if (flags & CPU_GEMM_ACCUMULATE) {
        o0 = _mm256_add_ps(_mm256_maskload_ps(yr, m0), o0);
        o1 = _mm256_add_ps(_mm256_maskload_ps(yr + 8, m1), o1);
    }
    _mm256_maskstore_ps(yr, m0, o0);
    _mm256_maskstore_ps(yr + 8, m1, o1);
}

TGT256 INLINE void micro256k(const int mr, const cpu_gemm_wtype wt, const int keep, int K, const float *x, int ldx,
                             const void *panel, const float *bias, float *y, int ldy, int ncols, int flags,
                             float *wide, const char *pf, const int pfs)
{
    __m256 c0[MR256], c1[MR256];
    UNROLL_ROWS
    for (int r = 0; r < mr; r++) {
        c0[r] = _mm256_setzero_ps();
        c1[r] = _mm256_setzero_ps();
    }
    UNROLL_K
    for (int k = 0; k < K; k++) {
        __m256 w0, w1;
        PF_STEP(pf, pfs, k);
        wload256(wt, panel, (size_t)k, &w0, &w1);
        if (keep) {
            _mm256_store_ps(wide + (size_t)k * NR256, w0);
            _mm256_store_ps(wide + (size_t)k * NR256 + 8, w1);
        }
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
    for (int r = 0; r < mr; r++) store256(y + (size_t)r * ldy, c0[r], c1[r], b0, b1, m0, m1, flags);
}
TGT256 INLINE void micro256(const int mr, const cpu_gemm_wtype wt, int K, const float *x, int ldx, const void *panel,
                            const float *bias, float *y, int ldy, int ncols, int flags, const char *pf, int pfs)
{
    PF_CALL(micro256k, pf, pfs, mr, wt, 0, K, x, ldx, panel, bias, y, ldy, ncols, flags, NULL);
}

/* AVX2's single-row kernel: gs ≤ G1_256 panels, 2·gs chains of 8 floats. */
TGT256 INLINE void row256(const cpu_gemm_wtype wt, const int gs, int K, const float *x, const void *panels,
                          size_t pstride, const float *bias, float *y, int ncols, int flags)
{
    const char *pp[G1_256];
    __m256 c0[G1_256], c1[G1_256];
    for (int g = 0; g < gs; g++) {
        pp[g] = (const char *)panels + (size_t)g * pstride;
        c0[g] = c1[g] = _mm256_setzero_ps();
    }
    UNROLL_K
    for (int k = 0; k < K; k++) {
        __m256 a = _mm256_broadcast_ss(x + k);
        UNROLL_ROWS
        for (int g = 0; g < gs; g++) {
            __m256 w0, w1;
            wload256(wt, pp[g], (size_t)k, &w0, &w1);
            c0[g] = _mm256_fmadd_ps(a, w0, c0[g]);
            c1[g] = _mm256_fmadd_ps(a, w1, c1[g]);
        }
    }
    for (int g = 0; g < gs; g++) {
        int nc = g < gs - 1 ? NR256 : ncols;
        __m256i m0 = lane_mask256(nc), m1 = lane_mask256(nc - 8);
        __m256 b0 = bias ? _mm256_maskload_ps(bias + g * NR256, m0) : _mm256_setzero_ps();
        __m256 b1 = bias ? _mm256_maskload_ps(bias + g * NR256 + 8, m1) : _mm256_setzero_ps();
        store256(y + g * NR256, c0[g], c1[g], b0, b1, m0, m1, flags);
    }
}

#define DEF_ANY256(WT, SUF)                                                                                     \
    TGT256 static void micro256_##SUF(int mr, int K, const float *x, int ldx, const void *panel,              \
                                      const float *bias, float *y, int ldy, int ncols, int flags,               \
                                      const char *pf, int pfs) {                                                \
        switch (mr) {                                                                                           \
            ROWS6(CASE256_##SUF)                                                                                \
        default: break;                                                                                         \
        }                                                                                                       \
    }                                                                                                           \
    TGT256 static void row256_##SUF(int gs, int K, const float *x, const void *panels, size_t pstride,          \
                                    const float *bias, float *y, int ncols, int flags) {                        \
        switch (gs) {                                                                                           \
        case 1: row256(WT, 1, K, x, panels, pstride, bias, y, ncols, flags); break;                             \
        case 2: row256(WT, 2, K, x, panels, pstride, bias, y, ncols, flags); break;                             \
        case 3: row256(WT, 3, K, x, panels, pstride, bias, y, ncols, flags); break;                             \
        default: row256(WT, G1_256, K, x, panels, pstride, bias, y, ncols, flags); break;                           \
        }                                                                                                       \
    }
#define CASE256_f32(n) case n: micro256(n, CPU_GEMM_F32, K, x, ldx, panel, bias, y, ldy, ncols, flags, pf, pfs); break;
#define CASE256_f16(n) case n: micro256(n, CPU_GEMM_F16, K, x, ldx, panel, bias, y, ldy, ncols, flags, pf, pfs); break;
#define CASE256_bf16(n) case n: micro256(n, CPU_GEMM_BF16, K, x, ldx, panel, bias, y, ldy, ncols, flags, pf, pfs); break;
DEF_ANY256(CPU_GEMM_F32, f32)
DEF_ANY256(CPU_GEMM_F16, f16)
DEF_ANY256(CPU_GEMM_BF16, bf16)

/* micro512_keep's AVX2 twin (wide: K·NR256 floats). */
#define CASE256K_f16(n) case n: micro256k(n, CPU_GEMM_F16, 1, K, x, ldx, panel, bias, y, ldy, ncols, flags, wide, NULL, 0); break;
#define CASE256K_bf16(n) case n: micro256k(n, CPU_GEMM_BF16, 1, K, x, ldx, panel, bias, y, ldy, ncols, flags, wide, NULL, 0); break;
TGT256 static void micro256_keep(cpu_gemm_wtype wt, int mr, int K, const float *x, int ldx, const void *panel,
                                 const float *bias, float *y, int ldy, int ncols, int flags, float *wide)
{
    if (wt == CPU_GEMM_F16) {
        switch (mr) {
            ROWS6(CASE256K_f16)
        default: break;
        }
    } else {
        switch (mr) {
            ROWS6(CASE256K_bf16)
        default: break;
        }
    }
}

/* ---- driver ------------------------------------------------------------ */

typedef void (*micro_fn)(int mr, int K, const float *x, int ldx, const void *panel, const float *bias, float *y,
                         int ldy, int ncols, int flags, const char *pf, int pfs);
typedef void (*row_fn)(int gs, int K, const float *x, const void *panels, size_t pstride, const float *bias, float *y,
                       int ncols, int flags);

/* Row blocks of near-equal size (B = 32 with MR 12 → 10, 11, 11): block i
 * covers rows [row0(i), row0(i + 1)). */
static int row0(int B, int nb, int i) { return (int)((long)B * i / nb); }

size_t cpu_gemm_scratch_floats(cpu_gemm_isa isa, int K) { return (size_t)cpu_gemm_nr(isa) * (size_t)K; }

void cpu_gemm_run(cpu_gemm_isa isa, cpu_gemm_wtype wtype, const float *x, int ldx, const void *Wp,
                  const float *bias, float *y, int ldy, int B, int N, int K, int p0, int p1, int flags,
                  float *scratch)
{
    const int is512 = isa == CPU_GEMM_AVX512, nr = cpu_gemm_nr(isa), mrmax = is512 ? MR512 : MR256;
    const int wt = (int)wtype;
    micro_fn micro = is512 ? (wt == CPU_GEMM_F32 ? micro512_f32 : wt == CPU_GEMM_F16 ? micro512_f16 : micro512_bf16)
                           : (wt == CPU_GEMM_F32 ? micro256_f32 : wt == CPU_GEMM_F16 ? micro256_f16 : micro256_bf16);
    row_fn row = is512 ? (wt == CPU_GEMM_F32 ? row512_f32 : wt == CPU_GEMM_F16 ? row512_f16 : row512_bf16)
                       : (wt == CPU_GEMM_F32 ? row256_f32 : wt == CPU_GEMM_F16 ? row256_f16 : row256_bf16);
    const size_t pstride = (size_t)nr * K * (wt == CPU_GEMM_F32 ? sizeof(float) : sizeof(uint16_t));
    const char *W = Wp;
    int nb = (B + mrmax - 1) / mrmax, p = p0;
    /* many row blocks per panel: the first widens the half panel, the others run the fp32 kernel */
    const int widen = wt != CPU_GEMM_F32 && scratch && nb >= WIDEN_MIN_BLOCKS;
    if (B == 1) {   /* groups of g1 full panels, then what is left when fewer: the rest below */
        const int g1 = is512 ? G1_512 : G1_256;
        int full = N / nr < p1 ? N / nr : p1;
        for (; p + g1 <= full; p += g1) {
            float *yt = y + (size_t)p * nr;
            row(g1, K, x, W + (size_t)p * pstride, pstride, bias ? bias + (size_t)p * nr : NULL, yt, nr, flags);
            if (flags & CPU_GEMM_ACTIVATIONS) cpu_gemm_activate(yt, ldy, 1, g1 * nr, flags);
        }
        if (p < p1 && p1 - p <= g1) {   /* at most g1 panels, the last maybe partial */
            float *yt = y + (size_t)p * nr;
            int ncols = N - (p1 - 1) * nr < nr ? N - (p1 - 1) * nr : nr;
            row(p1 - p, K, x, W + (size_t)p * pstride, pstride, bias ? bias + (size_t)p * nr : NULL, yt, ncols,
                flags);
            if (flags & CPU_GEMM_ACTIVATIONS) cpu_gemm_activate(yt, ldy, 1, (p1 - 1 - p) * nr + ncols, flags);
            p = p1;
        }
    }
    for (; p < p1; p++) {
        const void *panel = W + (size_t)p * pstride;
        int ncols = N - p * nr < nr ? N - p * nr : nr;
        const float *bp = bias ? bias + (size_t)p * nr : NULL;
        micro_fn mk = micro;
        int i = 0;
        pf_plan f = pf_begin(p + 1 < p1 ? W + (size_t)(p + 1) * pstride : NULL, pstride, K, nb);
        if (widen) {   /* the first block keeps the widened panel for the others */
            (is512 ? micro512_keep : micro256_keep)(wtype, row0(B, nb, 1), K, x, ldx, panel, bp, y + (size_t)p * nr,
                                                    ldy, ncols, flags, scratch);
            i = 1;
            panel = scratch;
            mk = is512 ? micro512_f32 : micro256_f32;
        }
        for (; i < nb; i++) {
            int r0 = row0(B, nb, i), mr = row0(B, nb, i + 1) - r0;
            float *yt = y + (size_t)r0 * ldy + (size_t)p * nr;
            mk(mr, K, x + (size_t)r0 * ldx, ldx, panel, bp, yt, ldy, ncols, flags, pf_block(&f, i), f.step);
        }
        /* The activation runs over the panel's columns of all B rows once the
         * last row block is stored, not after each block: reading back a
         * tile just written (with masked stores, at a row stride that is a
         * multiple of 4 KiB) waited for the stores to reach L1. In-process
         * A/B, 2,000-token prefill: +1–5% with bf16 math, +5–18% with fp32
         * math on bf16 weights. */
        if (flags & CPU_GEMM_ACTIVATIONS) cpu_gemm_activate(y + (size_t)p * nr, ldy, B, ncols, flags);
    }
}

/* ---- bf16 compute: vdpbf16ps, 12 rows × 32 columns --------------------------
 * The AVX-512 scheme with k pairs: each pair loads the panel's two vectors
 * of 16 (k, k+1) pairs and broadcasts one row's activation pair (32 bits)
 * per row; one vdpbf16ps per accumulator adds both products. */
#define TGTDOT __attribute__((target("avx512f,avx512bw,avx512bf16,fma")))

int cpu_gemm_dot_supported(void)
{
#if defined(__x86_64__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512bf16");
#else
    return 0;
#endif
}

static int pairs_of(int K) { return (K + 1) / 2; }

size_t cpu_gemm_dot_packed_elems(int N, int K)
{
    return (size_t)((N + NR512 - 1) / NR512) * NR512 * 2 * (size_t)pairs_of(K);
}

void cpu_gemm_pack_dot(const uint16_t *W, int N, int K, uint16_t *dst)
{
    int np = (N + NR512 - 1) / NR512, kp = pairs_of(K);
    for (int p = 0; p < np; p++) {
        uint16_t *panel = dst + (size_t)p * NR512 * 2 * kp;
        for (int q = 0; q < kp; q++)
            for (int j = 0; j < NR512; j++)
                for (int e = 0; e < 2; e++) {
                    int n = p * NR512 + j, k = 2 * q + e;
                    panel[(size_t)q * 2 * NR512 + 2 * j + e] = n < N && k < K ? W[(size_t)n * K + k] : 0;
                }
    }
}

/* A stride of a multiple of 4 KiB (K = 2048, 4096, 8192: d 2048 models and
 * their FFN keys) would put every row of a row block in the same L1 set,
 * twelve rows against eight ways, so each activation broadcast would miss
 * L1; one line more spreads the rows over the sets. */
int cpu_gemm_dot_ld(int K)
{
    int lines = (K + 31) / 32;   /* 64-byte lines of 32 bf16 values */
    return 32 * (lines % 64 ? lines : lines + 1);
}

TGTDOT void cpu_gemm_round_bf16(const float *x, int ldx, int B, int K, uint16_t *dst, int ldd)
{
    for (int b = 0; b < B; b++) {
        const float *xr = x + (size_t)b * ldx;
        uint16_t *dr = dst + (size_t)b * ldd;
        int k = 0;
        for (; k + 16 <= K; k += 16) {
            __m256bh h = _mm512_cvtneps_pbh(_mm512_loadu_ps(xr + k));
            _mm256_storeu_si256((__m256i *)(dr + k), (__m256i)h);
        }
        if (k < K) {
            __mmask16 m = (__mmask16)((1u << (K - k)) - 1);
            __m256bh h = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, xr + k));   /* masked lanes: +0 */
            _mm256_storeu_si256((__m256i *)(dr + k), (__m256i)h);
            k += 16;
        }
        for (; k < ldd; k++) dr[k] = 0;
    }
}

/* The activation pair q of a rounded row, broadcast to every lane. */
TGTDOT INLINE __m512bh xpair(const uint16_t *xr, int q)
{
    int32_t v;
    memcpy(&v, xr + 2 * q, 4);
    return (__m512bh)_mm512_set1_epi32(v);
}

TGTDOT INLINE void microdotp(const int mr, int KP, const uint16_t *xb, int ldxb, const uint16_t *panel,
                             const float *bias, float *y, int ldy, int ncols, int flags, const char *pf, const int pfs)
{
    __m512 c0[MR512], c1[MR512];
    UNROLL_ROWS
    for (int r = 0; r < mr; r++) {
        c0[r] = _mm512_setzero_ps();
        c1[r] = _mm512_setzero_ps();
    }
    UNROLL_K
    for (int q = 0; q < KP; q++) {
        PF_STEP(pf, pfs, q);
        __m512bh w0 = (__m512bh)_mm512_load_si512(panel + (size_t)q * 2 * NR512);
        __m512bh w1 = (__m512bh)_mm512_load_si512(panel + (size_t)q * 2 * NR512 + NR512);
        UNROLL_ROWS
        for (int r = 0; r < mr; r++) {
            __m512bh a = xpair(xb + (size_t)r * ldxb, q);
            c0[r] = _mm512_dpbf16_ps(c0[r], a, w0);
            c1[r] = _mm512_dpbf16_ps(c1[r], a, w1);
        }
    }
    __mmask16 m0 = mask512_lo(ncols), m1 = mask512_hi(ncols);
    __m512 b0 = bias ? _mm512_maskz_loadu_ps(m0, bias) : _mm512_setzero_ps();
    __m512 b1 = bias ? _mm512_maskz_loadu_ps(m1, bias + 16) : _mm512_setzero_ps();
    UNROLL_ROWS
    for (int r = 0; r < mr; r++) store512(y + (size_t)r * ldy, c0[r], c1[r], b0, b1, m0, m1, flags);
}

TGTDOT INLINE void microdot(const int mr, int KP, const uint16_t *xb, int ldxb, const uint16_t *panel,
                            const float *bias, float *y, int ldy, int ncols, int flags, const char *pf, int pfs)
{
    PF_CALL(microdotp, pf, pfs, mr, KP, xb, ldxb, panel, bias, y, ldy, ncols, flags);
}

/* Panels rowdot streams at once. One: with 4 the two threads read 8
 * streams and reached 27–28 GB/s where a plain read made 32 (paired runs of
 * a 261 MB product, 2026-11-24); one panel at a time, 32–33. Its two chains
 * of vdpbf16ps still retire a panel row far faster than memory delivers it.
 * (The widening kernel row512 streams several: with one panel it lost 3–10%,
 * in-process A/B.) */
#define GDOT 1

/* One row against GDOT full consecutive panels: 2·GDOT independent chains,
 * the same per element as microdot's. */
TGTDOT INLINE void rowdot(int KP, const uint16_t *xb, const uint16_t *panels, size_t pstride, const float *bias,
                          float *y, int flags)
{
    __m512 c0[GDOT], c1[GDOT];
    for (int g = 0; g < GDOT; g++) c0[g] = c1[g] = _mm512_setzero_ps();
    UNROLL_K
    for (int q = 0; q < KP; q++) {
        __m512bh a = xpair(xb, q);
        UNROLL_ROWS
        for (int g = 0; g < GDOT; g++) {
            const uint16_t *pp = panels + (size_t)g * pstride + (size_t)q * 2 * NR512;
            c0[g] = _mm512_dpbf16_ps(c0[g], a, (__m512bh)_mm512_load_si512(pp));
            c1[g] = _mm512_dpbf16_ps(c1[g], a, (__m512bh)_mm512_load_si512(pp + NR512));
        }
    }
    for (int g = 0; g < GDOT; g++) {
        __m512 b0 = bias ? _mm512_loadu_ps(bias + g * NR512) : _mm512_setzero_ps();
        __m512 b1 = bias ? _mm512_loadu_ps(bias + g * NR512 + 16) : _mm512_setzero_ps();
        store512(y + g * NR512, c0[g], c1[g], b0, b1, 0xFFFF, 0xFFFF, flags);
    }
}

#define CASEDOT(n) case n: microdot(n, KP, xb, ldxb, panel, bias, y, ldy, ncols, flags, pf, pfs); break;
TGTDOT static void microdot_any(int mr, int KP, const uint16_t *xb, int ldxb, const uint16_t *panel,
                                const float *bias, float *y, int ldy, int ncols, int flags, const char *pf, int pfs)
{
    switch (mr) {
        ROWS12(CASEDOT)
    default: break;
    }
}
TGTDOT static void rowdot_any(int KP, const uint16_t *xb, const uint16_t *panels, size_t pstride, const float *bias,
                              float *y, int flags)
{
    rowdot(KP, xb, panels, pstride, bias, y, flags);
}

void cpu_gemm_run_dot(const uint16_t *xb, int ldxb, const uint16_t *Wp, const float *bias, float *y, int ldy, int B,
                      int N, int K, int p0, int p1, int flags)
{
    const int KP = pairs_of(K), nb = (B + MR512 - 1) / MR512;
    const size_t pstride = (size_t)NR512 * 2 * KP;
    int p = p0;
    if (B == 1) {   /* groups of GDOT full panels, the rest below */
        int full = N / NR512 < p1 ? N / NR512 : p1;
        for (; p + GDOT <= full; p += GDOT) {
            float *yt = y + (size_t)p * NR512;
            rowdot_any(KP, xb, Wp + (size_t)p * pstride, pstride, bias ? bias + (size_t)p * NR512 : NULL, yt, flags);
            if (flags & CPU_GEMM_ACTIVATIONS) cpu_gemm_activate(yt, ldy, 1, GDOT * NR512, flags);
        }
    }
    for (; p < p1; p++) {
        const uint16_t *panel = Wp + (size_t)p * pstride;
        int ncols = N - p * NR512 < NR512 ? N - p * NR512 : NR512;
        const float *bp = bias ? bias + (size_t)p * NR512 : NULL;
        pf_plan f = pf_begin(p + 1 < p1 ? (const char *)(panel + pstride) : NULL, pstride * sizeof *Wp, KP, nb);
        for (int i = 0; i < nb; i++) {
            int r0 = row0(B, nb, i), mr = row0(B, nb, i + 1) - r0;
            float *yt = y + (size_t)r0 * ldy + (size_t)p * NR512;
            microdot_any(mr, KP, xb + (size_t)r0 * ldxb, ldxb, panel, bp, yt, ldy, ncols, flags, pf_block(&f, i),
                         f.step);
        }
        /* the panel's columns of every row at once, as cpu_gemm_run */
        if (flags & CPU_GEMM_ACTIVATIONS) cpu_gemm_activate(y + (size_t)p * NR512, ldy, B, ncols, flags);
    }
}

/* ---- bf16 compute on AMX tiles ----------------------------------------------
 * Where the CPU has AMX (Intel Sapphire Rapids and later), the same product
 * runs on tiles: TDPBF16PS multiplies a 16-row tile of activation pairs by
 * a 16-pair × 16-column tile of the packed panel (the dot layout above, read
 * with a 128-byte row stride, so the weights are the same bytes) into 16×16
 * fp32 accumulators. On those CPUs vdpbf16ps retires one per two cycles
 * (half the FMA rate) while a tile product does 8,192 products per 16.
 *
 * Each output element is still one fp32 accumulator over the pairs in
 * order, in every row block and batch size: batch-invariant. Its rounding
 * is the tile unit's, not vdpbf16ps's (it differs in the last bits), so a
 * CPU that runs this kernel runs it for every product it can (K a multiple
 * of 32), never mixing the two for one weight. */
/* Steps (2 KiB of panel each) the tile kernel prefetches ahead: tile loads
 * wait on memory one step at a time, and a single row (decode) has nothing
 * else to overlap them with (docs/CPU.md). */
#define AMX_PF 4
#define TGTAMX __attribute__((target("avx512f,avx512bw,avx512bf16,fma,amx-tile,amx-bf16")))
#define ARCH_GET_XCOMP_PERM_ 0x1022
#define ARCH_REQ_XCOMP_PERM_ 0x1023
#define XFEATURE_XTILEDATA_ 18

static int amx_ready;
static pthread_once_t amx_once = PTHREAD_ONCE_INIT;

/* The CPU's AMX-BF16 and AMX-TILE bits (CPUID leaf 7), then the kernel's
 * permission for this process's threads to hold tile data (Linux 5.16+;
 * refused, e.g., where a signal stack is too small for the tile state). */
static void amx_probe(void)
{
#if defined(__x86_64__) && defined(__linux__)
    unsigned a, b, c, d;
    if (!cpu_gemm_dot_supported() || !__get_cpuid_count(7, 0, &a, &b, &c, &d)) return;
    if (!(d & (1u << 22)) || !(d & (1u << 24))) return;
    unsigned long perm = 0;
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM_, XFEATURE_XTILEDATA_) != 0) return;
    if (syscall(SYS_arch_prctl, ARCH_GET_XCOMP_PERM_, &perm) != 0 || !(perm & (1ul << XFEATURE_XTILEDATA_))) return;
    amx_ready = 1;
#endif
}

int cpu_gemm_amx_supported(void)
{
    pthread_once(&amx_once, amx_probe);
    return amx_ready;
}

int cpu_gemm_amx_fits(int K) { return K > 0 && pairs_of(K) % 16 == 0; }

typedef struct __attribute__((packed, aligned(64))) amx_cfg {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_cfg;

TGTAMX void cpu_gemm_amx_configure(const int rows[8])
{
    amx_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) {
        cfg.rows[t] = (uint8_t)rows[t];
        cfg.colsb[t] = rows[t] ? 64 : 0;
    }
    /* GCC does not count ldtilecfg as reading cfg: without this it drops
     * the stores above (only the zeroing and the palette were kept) */
    __asm__ volatile("" : : "m"(cfg) : "memory");
    _tile_loadconfig(&cfg);
}

/* The kernel's tiles: C tiles 0, 1 (h0 rows: the panel's column halves)
 * and 2, 3 (h1 rows), A tiles 4 (h0 rows of 16 pairs) and 5 (h1), B tiles
 * 6, 7 (16 pairs of a column half). */
static void amx_configure(int h0, int h1)
{
    const int rows[8] = {h0, h0, h1, h1, h0, h1, 16, 16};
    cpu_gemm_amx_configure(rows);
}

/* One panel (32 columns) against a block of h0 + h1 ≤ 32 rows (two: a
 * compile-time constant, h1 > 0), steps of 16 pairs. */
TGTAMX INLINE void amx_block(const int two, int h0, int h1, int steps, const uint16_t *xb, int ldxb,
                             const uint16_t *panel, const float *bias, float *y, int ldy, int ncols, int flags)
{
    float c[32 * NR512] __attribute__((aligned(64)));   /* the block's rows × the panel's columns */
    const size_t xs = (size_t)ldxb * sizeof(uint16_t);
    const uint16_t *x1 = xb + (size_t)h0 * ldxb;
    _tile_zero(0);
    _tile_zero(1);
    if (two) {
        _tile_zero(2);
        _tile_zero(3);
    }
    for (int s = 0; s < steps; s++) {
        const uint16_t *pp = panel + (size_t)s * 16 * 2 * NR512;   /* pairs 16s.. : 128 bytes each */
        const char *f = (const char *)pp + AMX_PF * 2048;   /* past the panel's end: harmless hints */
        for (int l = 0; l < 2048; l += 64) _mm_prefetch(f + l, _MM_HINT_T0);
        _tile_loadd(6, pp, 2 * NR512 * sizeof(uint16_t));
        _tile_loadd(7, pp + NR512, 2 * NR512 * sizeof(uint16_t));
        _tile_loadd(4, xb + (size_t)s * 32, xs);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        if (two) {
            _tile_loadd(5, x1 + (size_t)s * 32, xs);
            _tile_dpbf16ps(2, 5, 6);
            _tile_dpbf16ps(3, 5, 7);
        }
    }
    _tile_stored(0, c, NR512 * sizeof(float));
    _tile_stored(1, c + 16, NR512 * sizeof(float));
    if (two) {
        _tile_stored(2, c + 16 * NR512, NR512 * sizeof(float));
        _tile_stored(3, c + 16 * NR512 + 16, NR512 * sizeof(float));
    }
    __mmask16 m0 = mask512_lo(ncols), m1 = mask512_hi(ncols);
    __m512 b0 = bias ? _mm512_maskz_loadu_ps(m0, bias) : _mm512_setzero_ps();
    __m512 b1 = bias ? _mm512_maskz_loadu_ps(m1, bias + 16) : _mm512_setzero_ps();
    for (int r = 0; r < h0 + h1; r++) {
        const float *cr = c + (size_t)(r < h0 ? r : 16 + r - h0) * NR512;
        store512(y + (size_t)r * ldy, _mm512_load_ps(cr), _mm512_load_ps(cr + 16), b0, b1, m0, m1, flags);
    }
}

TGTAMX void cpu_gemm_run_dot_amx(const uint16_t *xb, int ldxb, const uint16_t *Wp, const float *bias, float *y,
                                 int ldy, int B, int N, int K, int p0, int p1, int flags)
{
    const int steps = pairs_of(K) / 16, nb = (B + 31) / 32;
    const size_t pstride = (size_t)NR512 * 2 * pairs_of(K);
    int cur0 = -1, cur1 = -1;
    for (int p = p0; p < p1; p++) {
        const uint16_t *panel = Wp + (size_t)p * pstride;
        int ncols = N - p * NR512 < NR512 ? N - p * NR512 : NR512;
        const float *bp = bias ? bias + (size_t)p * NR512 : NULL;
        for (int i = 0; i < nb; i++) {
            int r0 = row0(B, nb, i), mr = row0(B, nb, i + 1) - r0;
            int h0 = mr > 16 ? (mr + 1) / 2 : mr, h1 = mr - h0;
            if (h0 != cur0 || h1 != cur1) {
                amx_configure(h0, h1);
                cur0 = h0;
                cur1 = h1;
            }
            float *yt = y + (size_t)r0 * ldy + (size_t)p * NR512;
            const uint16_t *xr = xb + (size_t)r0 * ldxb;
            if (h1)
                amx_block(1, h0, h1, steps, xr, ldxb, panel, bp, yt, ldy, ncols, flags);
            else
                amx_block(0, h0, 0, steps, xr, ldxb, panel, bp, yt, ldy, ncols, flags);
        }
        if (flags & CPU_GEMM_ACTIVATIONS) cpu_gemm_activate(y + (size_t)p * NR512, ldy, B, ncols, flags);
    }
    if (cur0 >= 0) _tile_release();
}
