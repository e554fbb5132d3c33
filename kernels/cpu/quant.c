/* kernels/cpu/quant.c — see quant.h. The SIMD kernels sit behind function
 * target attributes (the file builds with any -march; cpu_quant_detect
 * decides at run time). One inline template per ISA over the row tile and
 * the panels streamed at once (compile-time constants after inlining),
 * instantiated by a switch. */
#include "kernels/cpu/quant.h"

#include <errno.h>
#include <immintrin.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/gemm.h"
#include "kernels/half.h"

#define QB CPU_QUANT_BLOCK
#define NR CPU_QUANT_NR
#define INLINE static inline __attribute__((always_inline))
#define TGTVNNI __attribute__((target("avx512f,avx512bw,avx512vnni,fma")))
#define TGT256 __attribute__((target("avx2,fma,f16c")))
#if defined(__clang__)
#define UNROLL _Pragma("clang loop unroll(full)")
#else
#define UNROLL _Pragma("GCC unroll 16")
#endif

/* Row tiles (rows × panels ≤ the accumulators the registers hold). At
 * B > 1 the VNNI tiles are MR2_VNNI rows of two panels (each quad broadcast
 * feeds two vpdpbusd: fewer loads per vpdpbusd, docs/CPU.md), MR_VNNI rows
 * of the odd panel left over. */
#define MR_VNNI 8
#define MR2_VNNI 6
#define MR_AVX2 3
/* Panels a single row streams at once (VNNI: 8 streams read faster than 4
 * on the Intel host, docs/CPU.md "Decode at B = 1"). */
#define G1_VNNI 8
#define G1_AVX2 2
/* Blocks ahead that the single-row VNNI kernel prefetches each of its
 * panels' 4-bit weights: with twice the weights a byte and their nibbles to
 * unpack, the hardware prefetchers fell behind those streams (q8's gained
 * too little to pay for the prefetches when the weights are cached;
 * docs/CPU.md, "Decode at B = 1"). Past a panel's end the lines are the
 * next panel's (hints: they never fault). */
#define ROW1_PF 4
/* The tiles' accumulator arrays are sized by these constants, not by their
 * MR and G arguments: an array sized by an argument is a variable-length
 * one, which GCC keeps in memory (every vpdpbusd loaded and stored its
 * accumulator) even once the inlined sizes are constants. Tiles: VNNI MR ≤ 8
 * rows of one panel or MR2_VNNI of two; AVX2 MR ≤ 3 rows of one panel or one
 * row of G1_AVX2. */
#define TILE_VNNI (2 * MR2_VNNI > MR_VNNI ? 2 * MR2_VNNI : MR_VNNI)
#define TILE_AVX2 MR_AVX2

int cpu_quant_supported(cpu_quant_isa isa)
{
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (isa == CPU_QUANT_VNNI)
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("fma");
    /* every AVX2 CPU has F16C (the scales' vcvtph2ps) */
    if (isa == CPU_QUANT_AVX2) return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
    return isa == CPU_QUANT_C;
}

cpu_quant_isa cpu_quant_detect(void)
{
    if (cpu_quant_supported(CPU_QUANT_VNNI)) return CPU_QUANT_VNNI;
    if (cpu_quant_supported(CPU_QUANT_AVX2)) return CPU_QUANT_AVX2;
    return CPU_QUANT_C;
}

const char *cpu_quant_isa_name(cpu_quant_isa isa)
{
    return isa == CPU_QUANT_VNNI ? "VNNI" : isa == CPU_QUANT_AVX2 ? "AVX2" : "C";
}

const char *cpu_quant_type_name(cpu_quant_type t)
{
    return t == CPU_QUANT_Q8 ? "q8" : t == CPU_QUANT_Q4 ? "q4" : t == CPU_QUANT_Q4M ? "q4m" : "?";
}

static int nblocks(int K) { return (K + QB - 1) / QB; }
static size_t round64(size_t x) { return (x + 63) / 64 * 64; }
/* Weight bytes of one block of a panel (16 columns × 32 k). */
static size_t wblock(cpu_quant_type t) { return t == CPU_QUANT_Q8 ? 512 : 256; }
/* fp16 tables per block: scales, and (Q4M) offsets. */
static int ntables(cpu_quant_type t) { return t == CPU_QUANT_Q4M ? 2 : 1; }

size_t cpu_quant_panel_bytes(cpu_quant_type t, int K)
{
    size_t nb = (size_t)nblocks(K);
    return round64(nb * wblock(t) + nb * 32 * (size_t)ntables(t));
}

size_t cpu_quant_packed_bytes(cpu_quant_type t, int N, int K)
{
    return (size_t)((N + NR - 1) / NR) * cpu_quant_panel_bytes(t, K);
}

size_t cpu_quant_data_bytes(cpu_quant_type t, int N, int K)
{
    size_t per = (t == CPU_QUANT_Q8 ? 32 : 16) + 2 * (size_t)ntables(t);
    return (size_t)N * (size_t)nblocks(K) * per;
}

/* ---- packing ---------------------------------------------------------- */

/* Byte offset of weight (j, kk) (column j of the panel, kk < 32 in the
 * block) inside a block, and (Q4) whether it is the high nibble. */
static size_t woff(cpu_quant_type t, int j, int kk, int *hi)
{
    if (t == CPU_QUANT_Q8) {
        *hi = 0;
        return (size_t)(kk / 4) * 64 + (size_t)j * 4 + (size_t)(kk % 4);
    }
    int c = kk / 8, r = kk % 8;
    *hi = r >= 4;
    return (size_t)c * 64 + (size_t)j * 4 + (size_t)(r % 4);
}

static int qclamp(long v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : (int)v; }

/* Quantize one block w[0..n) (n ≤ 32, the rest zero): codes q[32] (Q8:
 * −127…127; Q4/Q4M: 0…15) and the fp16 scale / offset. 0, or -ERANGE. */
static int quant_block(cpu_quant_type t, const float *w, int n, int q[QB], uint16_t *dh, uint16_t *mh)
{
    float v[QB];
    for (int i = 0; i < QB; i++) v[i] = i < n ? w[i] : 0.0f;
    *mh = 0;
    if (t == CPU_QUANT_Q8) {
        float amax = 0.0f;
        for (int i = 0; i < QB; i++) amax = fabsf(v[i]) > amax ? fabsf(v[i]) : amax;
        *dh = lind_f32_to_f16(amax / 127.0f);
        float d = lind_f16_to_f32(*dh);
        if (isinf(d)) return -ERANGE;
        for (int i = 0; i < QB; i++) q[i] = d > 0.0f ? qclamp(lrintf(v[i] / d), -127, 127) : 0;
        return 0;
    }
    if (t == CPU_QUANT_Q4M) {
        float lo = v[0], hi = v[0];
        for (int i = 1; i < QB; i++) {
            lo = v[i] < lo ? v[i] : lo;
            hi = v[i] > hi ? v[i] : hi;
        }
        *mh = lind_f32_to_f16(lo);
        *dh = lind_f32_to_f16((hi - lind_f16_to_f32(*mh)) / 15.0f);
        float m = lind_f16_to_f32(*mh), d = lind_f16_to_f32(*dh);
        if (isinf(m) || isinf(d)) return -ERANGE;
        for (int i = 0; i < QB; i++) q[i] = d > 0.0f ? qclamp(lrintf((v[i] - m) / d), 0, 15) : 0;
        return 0;
    }
    /* Q4: w ≈ d·(q − 8). The value of largest magnitude, m, maps to −8 or to
     * +7 (…+8 clamped): try d = m / c for c in a few steps of [−8, −7] and
     * [7, 8], keep the least squared error (ties: the first). */
    float m = 0.0f;
    for (int i = 0; i < QB; i++) m = fabsf(v[i]) > fabsf(m) ? v[i] : m;
    static const float cand[] = {-8.0f, -7.75f, -7.5f, -7.25f, -7.0f, 7.0f, 7.25f, 7.5f, 7.75f, 8.0f};
    double best = INFINITY;
    *dh = 0;
    for (size_t c = 0; c < sizeof cand / sizeof cand[0]; c++) {
        uint16_t h = lind_f32_to_f16(m / cand[c]);
        float d = lind_f16_to_f32(h);
        if (isinf(d)) return -ERANGE;
        double e = 0.0;
        for (int i = 0; i < QB; i++) {
            int qi = d != 0.0f ? qclamp(lrintf(v[i] / d) + 8, 0, 15) : 8;
            double r = (double)v[i] - (double)d * (qi - 8);
            e += r * r;
        }
        if (e < best) {
            best = e;
            *dh = h;
        }
    }
    float d = lind_f16_to_f32(*dh);
    for (int i = 0; i < QB; i++) q[i] = d != 0.0f ? qclamp(lrintf(v[i] / d) + 8, 0, 15) : 8;
    return 0;
}

int cpu_quant_pack(cpu_quant_type t, const float *W, int N, int K, void *dst, char *err, size_t errlen)
{
    int nb = nblocks(K), panels = (N + NR - 1) / NR;
    size_t pb = cpu_quant_panel_bytes(t, K), wb = wblock(t);
    memset(dst, 0, (size_t)panels * pb);
    for (int p = 0; p < panels; p++) {
        uint8_t *panel = (uint8_t *)dst + (size_t)p * pb;
        uint16_t *scales = (uint16_t *)(panel + (size_t)nb * wb), *mins = scales + (size_t)nb * NR;
        for (int j = 0; j < NR; j++) {
            int n = p * NR + j;
            for (int b = 0; b < nb; b++) {
                int q[QB];
                uint16_t dh = 0, mh = 0;
                if (n < N) {
                    int len = K - b * QB < QB ? K - b * QB : QB;
                    if (quant_block(t, W + (size_t)n * K + (size_t)b * QB, len, q, &dh, &mh) < 0) {
                        snprintf(err, errlen, "row %d, k %d…%d: the %s block's scale overflows fp16", n, b * QB,
                                 b * QB + len - 1, cpu_quant_type_name(t));
                        return -ERANGE;
                    }
                } else {
                    for (int i = 0; i < QB; i++) q[i] = t == CPU_QUANT_Q4 ? 8 : 0;
                }
                scales[(size_t)b * NR + j] = dh;
                if (t == CPU_QUANT_Q4M) mins[(size_t)b * NR + j] = mh;
                uint8_t *blk = panel + (size_t)b * wb;
                for (int kk = 0; kk < QB; kk++) {
                    int hi;
                    size_t o = woff(t, j, kk, &hi);
                    if (t == CPU_QUANT_Q8) blk[o] = (uint8_t)(q[kk] + 128);
                    else blk[o] |= (uint8_t)(q[kk] << (hi ? 4 : 0));
                }
            }
        }
    }
    return 0;
}

void cpu_quant_dequant(cpu_quant_type t, const void *Wp, int N, int K, float *W)
{
    int nb = nblocks(K);
    size_t pb = cpu_quant_panel_bytes(t, K), wb = wblock(t);
    for (int n = 0; n < N; n++) {
        int p = n / NR, j = n % NR;
        const uint8_t *panel = (const uint8_t *)Wp + (size_t)p * pb;
        const uint16_t *scales = (const uint16_t *)(panel + (size_t)nb * wb), *mins = scales + (size_t)nb * NR;
        for (int k = 0; k < K; k++) {
            int b = k / QB, kk = k % QB, hi;
            uint8_t byte = panel[(size_t)b * wb + woff(t, j, kk, &hi)];
            float d = lind_f16_to_f32(scales[(size_t)b * NR + j]);
            float v;
            if (t == CPU_QUANT_Q8) v = d * (float)((int)byte - 128);
            else {
                int qv = hi ? byte >> 4 : byte & 15;
                v = t == CPU_QUANT_Q4 ? d * (float)(qv - 8) : d * (float)qv + lind_f16_to_f32(mins[(size_t)b * NR + j]);
            }
            W[(size_t)n * K + k] = v;
        }
    }
}

/* ---- activations -------------------------------------------------------
 * Row layout: nb·32 int8 codes, nb fp32 scales, nb int32 code sums. */

size_t cpu_quant_act_bytes(int K) { return round64((size_t)nblocks(K) * (QB + 8)); }

static int8_t *act_codes(const void *xq, size_t row, int K)
{
    return (int8_t *)xq + row * cpu_quant_act_bytes(K);
}
static float *act_scales(const void *xq, size_t row, int K)
{
    return (float *)(act_codes(xq, row, K) + (size_t)nblocks(K) * QB);
}
static int32_t *act_sums(const void *xq, size_t row, int K)
{
    return (int32_t *)(act_scales(xq, row, K) + nblocks(K));
}

/* One block the portable way (also the AVX-512 version's fallback for a
 * block holding a NaN or ±inf). */
static void act_block(const float *v, int len, int8_t *qb, float *s, int32_t *sum)
{
    float amax = 0.0f;
    int bad = 0;
    for (int i = 0; i < len; i++) {
        if (!isfinite(v[i])) bad = 1;
        amax = fabsf(v[i]) > amax ? fabsf(v[i]) : amax;
    }
    memset(qb, 0, QB);
    *sum = 0;
    if (bad) {
        *s = NAN;
        return;
    }
    if (amax < 1e-30f) {
        *s = 0.0f;
        return;
    }
    float inv = 127.0f / amax;
    int acc = 0;
    *s = amax / 127.0f;
    for (int i = 0; i < len; i++) {
        int c = qclamp(lrintf(v[i] * inv), -127, 127);
        qb[i] = (int8_t)c;
        acc += c;
    }
    *sum = acc;
}

/* The same values with AVX-512: |x|·inv rounded by vcvtps2dq in the
 * default (nearest-even) mode, as lrintf rounds. */
TGTVNNI static void act_row_avx512(const float *x, int K, int8_t *q, float *s, int32_t *sum)
{
    int nb = nblocks(K);
    for (int b = 0; b < nb; b++) {
        int len = K - b * QB < QB ? K - b * QB : QB;
        const float *v = x + (size_t)b * QB;
        __mmask16 m0 = len >= 16 ? 0xFFFF : (__mmask16)((1u << len) - 1);
        __mmask16 m1 = len >= 32 ? 0xFFFF : len > 16 ? (__mmask16)((1u << (len - 16)) - 1) : 0;
        __m512 v0 = _mm512_maskz_loadu_ps(m0, v), v1 = _mm512_maskz_loadu_ps(m1, v + 16);
        __m512 a0 = _mm512_abs_ps(v0), a1 = _mm512_abs_ps(v1), big = _mm512_set1_ps(3.40282347e38f);
        if (_mm512_cmp_ps_mask(a0, big, _CMP_NLE_UQ) | _mm512_cmp_ps_mask(a1, big, _CMP_NLE_UQ)) {
            act_block(v, len, q + (size_t)b * QB, &s[b], &sum[b]);
            continue;
        }
        float amax = _mm512_reduce_max_ps(_mm512_max_ps(a0, a1));
        if (amax < 1e-30f) {
            memset(q + (size_t)b * QB, 0, QB);
            s[b] = 0.0f;
            sum[b] = 0;
            continue;
        }
        float inv = 127.0f / amax;
        s[b] = amax / 127.0f;
        __m512 iv = _mm512_set1_ps(inv);
        __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127);
        __m512i c0 = _mm512_min_epi32(_mm512_max_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(v0, iv)), lo), hi);
        __m512i c1 = _mm512_min_epi32(_mm512_max_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(v1, iv)), lo), hi);
        _mm_storeu_si128((__m128i *)(q + (size_t)b * QB), _mm512_cvtepi32_epi8(c0));
        _mm_storeu_si128((__m128i *)(q + (size_t)b * QB + 16), _mm512_cvtepi32_epi8(c1));
        sum[b] = _mm512_reduce_add_epi32(_mm512_add_epi32(c0, c1));
    }
}

void cpu_quant_act(const float *x, int ldx, int B, int K, void *xq)
{
    cpu_quant_act_isa(cpu_quant_detect(), x, ldx, B, K, xq);
}

void cpu_quant_act_isa(cpu_quant_isa isa, const float *x, int ldx, int B, int K, void *xq)
{
    int nb = nblocks(K);
    if (isa == CPU_QUANT_VNNI) {
        for (int r = 0; r < B; r++)
            act_row_avx512(x + (size_t)r * ldx, K, act_codes(xq, (size_t)r, K), act_scales(xq, (size_t)r, K),
                           act_sums(xq, (size_t)r, K));
        return;
    }
    for (int r = 0; r < B; r++)
        for (int b = 0; b < nb; b++) {
            int len = K - b * QB < QB ? K - b * QB : QB;
            act_block(x + (size_t)r * ldx + (size_t)b * QB, len, act_codes(xq, (size_t)r, K) + (size_t)b * QB,
                      &act_scales(xq, (size_t)r, K)[b], &act_sums(xq, (size_t)r, K)[b]);
        }
}

void cpu_quant_act_values(const void *xq, int B, int K, float *x)
{
    for (int r = 0; r < B; r++)
        for (int k = 0; k < K; k++)
            x[(size_t)r * K + k] =
                act_scales(xq, (size_t)r, K)[k / QB] * (float)act_codes(xq, (size_t)r, K)[k];
}

/* ---- the epilogue (shared by every path) ------------------------------- */

/* Store a row's sums s[0..cols) of one panel at y (column n0). */
static inline void store_row(const float *s, float *y, const float *bias, int cols, int flags)
{
    for (int j = 0; j < cols; j++) {
        float v = bias ? bias[j] + s[j] : s[j];
        y[j] = (flags & CPU_GEMM_ACCUMULATE) ? y[j] + v : v;
    }
}

/* What a block's integer sum starts from: Σ (stored code)·xq minus the
 * code offset times Σ xq (Q8 codes are stored + 128; Q4's w is q − 8). */
static inline int32_t int_start(cpu_quant_type t, int32_t sum)
{
    return t == CPU_QUANT_Q8 ? -128 * sum : t == CPU_QUANT_Q4 ? -8 * sum : 0;
}

/* ---- portable C ------------------------------------------------------- */

static void run_c(cpu_quant_type t, const void *xq, const void *Wp, const float *bias, float *y, int ldy, int B,
                  int N, int K, int p0, int p1, int flags)
{
    int nb = nblocks(K);
    size_t pb = cpu_quant_panel_bytes(t, K), wb = wblock(t);
    for (int p = p0; p < p1; p++) {
        const uint8_t *panel = (const uint8_t *)Wp + (size_t)p * pb;
        const uint16_t *scales = (const uint16_t *)(panel + (size_t)nb * wb), *mins = scales + (size_t)nb * NR;
        int n0 = p * NR, cols = N - n0 < NR ? N - n0 : NR;
        for (int r = 0; r < B; r++) {
            const int8_t *xc = act_codes(xq, (size_t)r, K);
            const float *xs = act_scales(xq, (size_t)r, K);
            const int32_t *xsum = act_sums(xq, (size_t)r, K);
            float acc[NR] = {0};
            for (int b = 0; b < nb; b++) {
                const uint8_t *blk = panel + (size_t)b * wb;
                const int8_t *xb = xc + (size_t)b * QB;
                for (int j = 0; j < NR; j++) {
                    int32_t is = int_start(t, xsum[b]);
                    for (int kk = 0; kk < QB; kk++) {
                        int hi;
                        uint8_t byte = blk[woff(t, j, kk, &hi)];
                        int code = t == CPU_QUANT_Q8 ? byte : hi ? byte >> 4 : byte & 15;
                        is += code * xb[kk];
                    }
                    float d = lind_f16_to_f32(scales[(size_t)b * NR + j]);
                    acc[j] = fmaf((float)is, d * xs[b], acc[j]);
                    if (t == CPU_QUANT_Q4M)
                        acc[j] = fmaf(lind_f16_to_f32(mins[(size_t)b * NR + j]), xs[b] * (float)xsum[b], acc[j]);
                }
            }
            store_row(acc, y + (size_t)r * ldy + n0, bias ? bias + n0 : NULL, cols, flags);
        }
        cpu_gemm_activate(y + n0, ldy, B, cols, flags);
    }
}

/* ---- AVX-512 VNNI ------------------------------------------------------
 * A tile: MR rows × G panels, one 16-lane int accumulator and one fp32
 * accumulator each. Per block: the int accumulators start at int_start,
 * take 8 vpdpbusd (weights unsigned, activations' quads broadcast, signed),
 * and are folded into the fp32 chain with the scale d·s. */

/* store_row in one masked vector: the same two adds, lane by lane (the
 * scalar loop, which GCC turned into a rep movsq when there is no bias,
 * held about a fifth of a B = 64 product's samples). */
TGTVNNI INLINE void vnni_store(__m512 s, float *y, const float *bias, int cols, int flags)
{
    __mmask16 m = cols >= NR ? (__mmask16)0xFFFF : (__mmask16)((1u << cols) - 1);
    __m512 v = bias ? _mm512_add_ps(_mm512_maskz_loadu_ps(m, bias), s) : s;
    if (flags & CPU_GEMM_ACCUMULATE) v = _mm512_add_ps(_mm512_maskz_loadu_ps(m, y), v);
    _mm512_mask_storeu_ps(y, m, v);
}

TGTVNNI INLINE __m512i vnni_w(cpu_quant_type t, const uint8_t *blk, int g)
{
    if (t == CPU_QUANT_Q8) return _mm512_load_si512((const void *)(blk + (size_t)g * 64));
    __m512i v = _mm512_load_si512((const void *)(blk + (size_t)(g / 2) * 64));
    if (g & 1) v = _mm512_srli_epi16(v, 4);
    return _mm512_and_si512(v, _mm512_set1_epi8(15));
}

TGTVNNI INLINE void vnni_tile(cpu_quant_type t, const void *xq, const uint8_t *Wp, size_t pb, const float *bias,
                              float *y, int ldy, int r0, const int MR, int p, const int G, int N, int K, int flags)
{
    int nb = nblocks(K);
    size_t wb = wblock(t), ab = cpu_quant_act_bytes(K);
    __m512 acc[TILE_VNNI];   /* MR × G of them used */
    UNROLL for (int i = 0; i < MR * G; i++) acc[i] = _mm512_setzero_ps();
    const int8_t *xc = act_codes(xq, (size_t)r0, K);
    const float *xs = act_scales(xq, (size_t)r0, K);
    const int32_t *xsum = act_sums(xq, (size_t)r0, K);
    for (int b = 0; b < nb; b++) {
        __m512i ia[TILE_VNNI];
        UNROLL for (int r = 0; r < MR; r++) {
            const int32_t *sr = (const int32_t *)((const uint8_t *)xsum + (size_t)r * ab);
            __m512i st = _mm512_set1_epi32(int_start(t, sr[b]));
            UNROLL for (int g = 0; g < G; g++) ia[r * G + g] = st;
        }
        UNROLL for (int q = 0; q < 8; q++) {
            __m512i w[TILE_VNNI];
            UNROLL for (int g = 0; g < G; g++) w[g] = vnni_w(t, Wp + (size_t)(p + g) * pb + (size_t)b * wb, q);
            UNROLL for (int r = 0; r < MR; r++) {
                int32_t v;
                memcpy(&v, xc + (size_t)r * ab + (size_t)b * QB + (size_t)q * 4, 4);
                __m512i xr = _mm512_set1_epi32(v);
                UNROLL for (int g = 0; g < G; g++) ia[r * G + g] = _mm512_dpbusd_epi32(ia[r * G + g], w[g], xr);
            }
        }
        UNROLL for (int g = 0; g < G; g++) {
            const uint8_t *panel = Wp + (size_t)(p + g) * pb;
            const uint16_t *sc = (const uint16_t *)(panel + (size_t)nb * wb) + (size_t)b * NR;
            __m512 d = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)sc));
            __m512 m = t == CPU_QUANT_Q4M ? _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(sc + (size_t)nb * NR)))
                                          : d;
            UNROLL for (int r = 0; r < MR; r++) {
                const float *sr = (const float *)((const uint8_t *)xs + (size_t)r * ab);
                __m512 s = _mm512_set1_ps(sr[b]);
                acc[r * G + g] =
                    _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia[r * G + g]), _mm512_mul_ps(d, s), acc[r * G + g]);
                if (t == CPU_QUANT_Q4M) {
                    const int32_t *sm = (const int32_t *)((const uint8_t *)xsum + (size_t)r * ab);
                    acc[r * G + g] = _mm512_fmadd_ps(m, _mm512_set1_ps(sr[b] * (float)sm[b]), acc[r * G + g]);
                }
            }
        }
    }
    UNROLL for (int g = 0; g < G; g++) {
        int n0 = (p + g) * NR, cols = N - n0 < NR ? N - n0 : NR;
        UNROLL for (int r = 0; r < MR; r++)
            vnni_store(acc[r * G + g], y + (size_t)(r0 + r) * ldy + n0, bias ? bias + n0 : NULL, cols, flags);
    }
}

/* The odd quads' weights for vnni_row1: q8's bytes, or the high nibbles
 * left in place (16 × the code: one vpandd where vnni_w also shifts). */
TGTVNNI INLINE __m512i vnni_w_hi(cpu_quant_type t, const uint8_t *blk, int g)
{
    if (t == CPU_QUANT_Q8) return vnni_w(t, blk, g);
    return _mm512_and_si512(_mm512_load_si512((const void *)(blk + (size_t)(g / 2) * 64)),
                            _mm512_set1_epi8((char)0xF0));
}

/* One row, G1_VNNI panels: each panel's block dot split over two integer
 * accumulators (even and odd quads; integer sums, so the split changes
 * nothing) for 16 independent chains, and nothing kept in memory. For
 * the nibble formats the odd quads are the high nibbles, taken as 16 × the
 * code (vnni_w_hi): that accumulator is a multiple of 16 (≤ 16·15·128·16
 * in magnitude, far inside int32), so shifting it right by 4 at the fold
 * is exact and the block's integer sum, hence every bit, is unchanged. At
 * B = 1 the unpacking is most of the kernel's vector work (per 64 bytes:
 * two vpdpbusd, and three shifts and ands before this, two now). */
TGTVNNI INLINE void vnni_row1(cpu_quant_type t, const void *xq, const uint8_t *Wp, size_t pb, const float *bias,
                              float *y, int p, int N, int K, int flags)
{
    enum { G = G1_VNNI };
    int nb = nblocks(K);
    size_t wb = wblock(t);
    const int8_t *xc = act_codes(xq, 0, K);
    const float *xs = act_scales(xq, 0, K);
    const int32_t *xsum = act_sums(xq, 0, K);
    const uint8_t *P = Wp + (size_t)p * pb;
    __m512 f[G];
    UNROLL for (int g = 0; g < G; g++) f[g] = _mm512_setzero_ps();
    for (int b = 0; b < nb; b++) {
        __m512i st = _mm512_set1_epi32(int_start(t, xsum[b])), z = _mm512_setzero_si512();
        __m512i a[G], bb[G];
        UNROLL for (int g = 0; g < G; g++) a[g] = st, bb[g] = z;
        const uint8_t *blk = P + (size_t)b * wb;
        const int8_t *xb = xc + (size_t)b * QB;
        if (t != CPU_QUANT_Q8)   /* ROW1_PF blocks ahead in each panel's stream */
            UNROLL for (int g = 0; g < G; g++)
                UNROLL for (size_t l = 0; l < wb; l += 64)
                    _mm_prefetch((const char *)blk + (size_t)g * pb + ROW1_PF * wb + l, _MM_HINT_T0);
        UNROLL for (int q = 0; q < 8; q += 2) {
            int32_t u, v;
            memcpy(&u, xb + q * 4, 4);
            memcpy(&v, xb + q * 4 + 4, 4);
            __m512i xu = _mm512_set1_epi32(u), xv = _mm512_set1_epi32(v);
            UNROLL for (int g = 0; g < G; g++) a[g] = _mm512_dpbusd_epi32(a[g], vnni_w(t, blk + (size_t)g * pb, q), xu);
            UNROLL for (int g = 0; g < G; g++)
                bb[g] = _mm512_dpbusd_epi32(bb[g], vnni_w_hi(t, blk + (size_t)g * pb, q + 1), xv);
        }
        __m512 s = _mm512_set1_ps(xs[b]);
        const uint16_t *sc = (const uint16_t *)(P + (size_t)nb * wb) + (size_t)b * NR;
        UNROLL for (int g = 0; g < G; g++) {
            const uint16_t *sg = sc + (size_t)g * (pb / 2);
            __m512 d = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)sg));
            __m512i hi = t == CPU_QUANT_Q8 ? bb[g] : _mm512_srai_epi32(bb[g], 4);
            f[g] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(a[g], hi)), _mm512_mul_ps(d, s), f[g]);
            if (t == CPU_QUANT_Q4M)
                f[g] = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(sg + (size_t)nb * NR))),
                                       _mm512_set1_ps(xs[b] * (float)xsum[b]), f[g]);
        }
    }
    UNROLL for (int g = 0; g < G; g++) {
        int n0 = (p + g) * NR, cols = N - n0 < NR ? N - n0 : NR;
        vnni_store(f[g], y + n0, bias ? bias + n0 : NULL, cols, flags);
    }
}

/* mr (≥ 1) rows of G panels, the tile's sizes constants in each case. */
_Static_assert(MR2_VNNI == 6 && MR_VNNI == 8, "VNNI_TILE's cases: 1-6 rows of two panels, 1-8 of one");
#define VNNI_CASE(T, n, G) \
    case n: vnni_tile(T, xq, Wp, pb, bias, y, ldy, r0, n, p, G, N, K, flags); return;
#define VNNI_ROWS6(T, G) \
    VNNI_CASE(T, 1, G) VNNI_CASE(T, 2, G) VNNI_CASE(T, 3, G) VNNI_CASE(T, 4, G) VNNI_CASE(T, 5, G) VNNI_CASE(T, 6, G)
#define VNNI_TILE(T)                                                                                             \
    TGTVNNI static void vnni_rows_##T(const void *xq, const uint8_t *Wp, size_t pb, const float *bias, float *y, \
                                      int ldy, int r0, int mr, int p, int g, int N, int K, int flags) {          \
        if (g == G1_VNNI) {                                                                                      \
            vnni_row1(T, xq, Wp, pb, bias, y, p, N, K, flags);                                                   \
            return;                                                                                              \
        }                                                                                                        \
        if (g == 2) switch (mr < MR2_VNNI ? mr : MR2_VNNI) {                                                     \
            VNNI_ROWS6(T, 2)                                                                                     \
            }                                                                                                    \
        switch (mr < MR_VNNI ? mr : MR_VNNI) {                                                                   \
            VNNI_ROWS6(T, 1)                                                                                     \
            VNNI_CASE(T, 7, 1)                                                                                   \
            VNNI_CASE(T, 8, 1)                                                                                   \
        }                                                                                                        \
    }
VNNI_TILE(CPU_QUANT_Q8)
VNNI_TILE(CPU_QUANT_Q4)
VNNI_TILE(CPU_QUANT_Q4M)

/* ---- AVX2 ----------------------------------------------------------------
 * The same tiles in 8-lane halves (a panel is two). Q8: the stored code
 * flipped back to signed (xor 0x80), vpsignb moves the activation's sign
 * onto it and vpmaddubsw multiplies |xq| by it (pairs ≤ 2·127², no
 * saturation); Q4: nibbles (unsigned) times xq directly (≤ 2·15·127). */

/* vnni_store in two 8-lane halves. */
TGT256 INLINE void avx2_store(__m256 s0, __m256 s1, float *y, const float *bias, int cols, int flags)
{
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    __m256i m0 = _mm256_cmpgt_epi32(_mm256_set1_epi32(cols), lane);
    __m256i m1 = _mm256_cmpgt_epi32(_mm256_set1_epi32(cols - 8), lane);
    __m256 v0 = s0, v1 = s1;
    if (bias) {
        v0 = _mm256_add_ps(_mm256_maskload_ps(bias, m0), v0);
        v1 = _mm256_add_ps(_mm256_maskload_ps(bias + 8, m1), v1);
    }
    if (flags & CPU_GEMM_ACCUMULATE) {
        v0 = _mm256_add_ps(_mm256_maskload_ps(y, m0), v0);
        v1 = _mm256_add_ps(_mm256_maskload_ps(y + 8, m1), v1);
    }
    _mm256_maskstore_ps(y, m0, v0);
    _mm256_maskstore_ps(y + 8, m1, v1);
}

TGT256 INLINE __m256i avx2_dot(cpu_quant_type t, __m256i w, __m256i x)
{
    __m256i p;
    if (t == CPU_QUANT_Q8) {
        __m256i ws = _mm256_xor_si256(w, _mm256_set1_epi8((char)0x80));
        p = _mm256_maddubs_epi16(_mm256_abs_epi8(x), _mm256_sign_epi8(ws, x));
    } else {
        p = _mm256_maddubs_epi16(w, x);
    }
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

TGT256 INLINE __m256i avx2_w(cpu_quant_type t, const uint8_t *blk, int g, int half)
{
    if (t == CPU_QUANT_Q8) return _mm256_load_si256((const __m256i *)(blk + (size_t)g * 64 + (size_t)half * 32));
    __m256i v = _mm256_load_si256((const __m256i *)(blk + (size_t)(g / 2) * 64 + (size_t)half * 32));
    if (g & 1) v = _mm256_srli_epi16(v, 4);
    return _mm256_and_si256(v, _mm256_set1_epi8(15));
}

TGT256 INLINE void avx2_tile(cpu_quant_type t, const void *xq, const uint8_t *Wp, size_t pb, const float *bias,
                             float *y, int ldy, int r0, const int MR, int p, const int G, int N, int K, int flags)
{
    int nb = nblocks(K);
    size_t wb = wblock(t), ab = cpu_quant_act_bytes(K);
    __m256 acc[TILE_AVX2 * 2];   /* MR × G × 2 of them used */
    UNROLL for (int i = 0; i < MR * G * 2; i++) acc[i] = _mm256_setzero_ps();
    const int8_t *xc = act_codes(xq, (size_t)r0, K);
    const float *xs = act_scales(xq, (size_t)r0, K);
    const int32_t *xsum = act_sums(xq, (size_t)r0, K);
    for (int b = 0; b < nb; b++) {
        __m256i ia[TILE_AVX2 * 2];
        UNROLL for (int r = 0; r < MR; r++) {
            const int32_t *sr = (const int32_t *)((const uint8_t *)xsum + (size_t)r * ab);
            __m256i st = _mm256_set1_epi32(int_start(t == CPU_QUANT_Q8 ? CPU_QUANT_Q4M : t, sr[b]));
            UNROLL for (int i = 0; i < G * 2; i++) ia[r * G * 2 + i] = st;
        }
        UNROLL for (int q = 0; q < 8; q++) {
            __m256i xb[TILE_AVX2];
            UNROLL for (int r = 0; r < MR; r++) {
                int32_t v;
                memcpy(&v, xc + (size_t)r * ab + (size_t)b * QB + (size_t)q * 4, 4);
                xb[r] = _mm256_set1_epi32(v);
            }
            UNROLL for (int g = 0; g < G; g++) UNROLL for (int h = 0; h < 2; h++) {
                __m256i w = avx2_w(t, Wp + (size_t)(p + g) * pb + (size_t)b * wb, q, h);
                UNROLL for (int r = 0; r < MR; r++) {
                    int i = (r * G + g) * 2 + h;
                    ia[i] = _mm256_add_epi32(ia[i], avx2_dot(t, w, xb[r]));
                }
            }
        }
        UNROLL for (int g = 0; g < G; g++) {
            const uint8_t *panel = Wp + (size_t)(p + g) * pb;
            const uint16_t *sc = (const uint16_t *)(panel + (size_t)nb * wb) + (size_t)b * NR;
            UNROLL for (int h = 0; h < 2; h++) {
                __m256 d = _mm256_cvtph_ps(_mm_load_si128((const __m128i *)(sc + h * 8)));
                __m256 m = t == CPU_QUANT_Q4M ? _mm256_cvtph_ps(_mm_load_si128((const __m128i *)(sc + (size_t)nb * NR + h * 8)))
                                              : d;
                UNROLL for (int r = 0; r < MR; r++) {
                    int i = (r * G + g) * 2 + h;
                    const float *sr = (const float *)((const uint8_t *)xs + (size_t)r * ab);
                    __m256 s = _mm256_set1_ps(sr[b]);
                    acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ia[i]), _mm256_mul_ps(d, s), acc[i]);
                    if (t == CPU_QUANT_Q4M) {
                        const int32_t *sm = (const int32_t *)((const uint8_t *)xsum + (size_t)r * ab);
                        acc[i] = _mm256_fmadd_ps(m, _mm256_set1_ps(sr[b] * (float)sm[b]), acc[i]);
                    }
                }
            }
        }
    }
    UNROLL for (int g = 0; g < G; g++) {
        int n0 = (p + g) * NR, cols = N - n0 < NR ? N - n0 : NR;
        UNROLL for (int r = 0; r < MR; r++)
            avx2_store(acc[(r * G + g) * 2], acc[(r * G + g) * 2 + 1], y + (size_t)(r0 + r) * ldy + n0,
                       bias ? bias + n0 : NULL, cols, flags);
    }
}

#define AVX2_TILE(T)                                                                                             \
    TGT256 static void avx2_rows_##T(const void *xq, const uint8_t *Wp, size_t pb, const float *bias, float *y,  \
                                     int ldy, int r0, int mr, int p, int g, int N, int K, int flags) {           \
        if (g == G1_AVX2) {                                                                                      \
            avx2_tile(T, xq, Wp, pb, bias, y, ldy, r0, 1, p, G1_AVX2, N, K, flags);                              \
            return;                                                                                              \
        }                                                                                                        \
        switch (mr) {                                                                                            \
        case 1: avx2_tile(T, xq, Wp, pb, bias, y, ldy, r0, 1, p, 1, N, K, flags); break;                         \
        case 2: avx2_tile(T, xq, Wp, pb, bias, y, ldy, r0, 2, p, 1, N, K, flags); break;                         \
        default: avx2_tile(T, xq, Wp, pb, bias, y, ldy, r0, 3, p, 1, N, K, flags); break;                        \
        }                                                                                                        \
    }
AVX2_TILE(CPU_QUANT_Q8)
AVX2_TILE(CPU_QUANT_Q4)
AVX2_TILE(CPU_QUANT_Q4M)

typedef void (*rows_fn)(const void *, const uint8_t *, size_t, const float *, float *, int, int, int, int, int,
                        int, int, int);

void cpu_quant_run(cpu_quant_isa isa, cpu_quant_type t, const void *xq, const void *Wp, const float *bias,
                   float *y, int ldy, int B, int N, int K, int p0, int p1, int flags)
{
    if (isa == CPU_QUANT_C) {
        run_c(t, xq, Wp, bias, y, ldy, B, N, K, p0, p1, flags);
        return;
    }
    rows_fn fn;
    int mr, g1;
    if (isa == CPU_QUANT_VNNI) {
        fn = t == CPU_QUANT_Q8 ? vnni_rows_CPU_QUANT_Q8 : t == CPU_QUANT_Q4 ? vnni_rows_CPU_QUANT_Q4
                                                                             : vnni_rows_CPU_QUANT_Q4M;
        mr = MR_VNNI;
        g1 = G1_VNNI;
    } else {
        fn = t == CPU_QUANT_Q8 ? avx2_rows_CPU_QUANT_Q8 : t == CPU_QUANT_Q4 ? avx2_rows_CPU_QUANT_Q4
                                                                             : avx2_rows_CPU_QUANT_Q4M;
        mr = MR_AVX2;
        g1 = G1_AVX2;
    }
    size_t pb = cpu_quant_panel_bytes(t, K);
    const uint8_t *W = Wp;
    int p = p0;
    if (B == 1)   /* one row: several panels at once (independent chains) */
        for (; p + g1 <= p1; p += g1) {
            fn(xq, W, pb, bias, y, ldy, 0, 1, p, g1, N, K, flags);
            for (int g = 0; g < g1; g++) {
                int n0 = (p + g) * NR;
                cpu_gemm_activate(y + n0, ldy, 1, N - n0 < NR ? N - n0 : NR, flags);
            }
        }
    if (B > 1 && isa == CPU_QUANT_VNNI)   /* two panels a tile, the odd one below */
        for (; p + 2 <= p1; p += 2) {
            for (int r = 0; r < B; r += MR2_VNNI)
                fn(xq, W, pb, bias, y, ldy, r, B - r < MR2_VNNI ? B - r : MR2_VNNI, p, 2, N, K, flags);
            int n0 = p * NR;
            cpu_gemm_activate(y + n0, ldy, B, N - n0 < 2 * NR ? N - n0 : 2 * NR, flags);
        }
    for (; p < p1; p++) {
        for (int r = 0; r < B; r += mr) fn(xq, W, pb, bias, y, ldy, r, B - r < mr ? B - r : mr, p, 1, N, K, flags);
        int n0 = p * NR;
        cpu_gemm_activate(y + n0, ldy, B, N - n0 < NR ? N - n0 : NR, flags);
    }
}

/* ---- on the pool --------------------------------------------------------- */

void cpu_quant_scratch_free(cpu_quant_scratch *s)
{
    free(s->p);
    s->p = NULL;
    s->n = 0;
}

typedef struct qjob {
    cpu_quant_isa isa;
    cpu_quant_type t;
    const float *x, *bias;
    const void *W;
    void *xq;
    float *y;
    int ldx, ldy, B, N, K, flags, panels, chunk;
    atomic_int next;
} qjob;

static void act_part(void *arg, int part, int nparts)
{
    qjob *j = arg;
    int lo = (int)((long)j->B * part / nparts), hi = (int)((long)j->B * (part + 1) / nparts);
    cpu_quant_act_isa(j->isa, j->x + (size_t)lo * j->ldx, j->ldx, hi - lo, j->K,
                  (uint8_t *)j->xq + (size_t)lo * cpu_quant_act_bytes(j->K));
}

/* Parts claim chunks of panels (as the backend's fp32 products do): each
 * panel is computed whole by one thread, so who claims what never changes
 * a result. */
static void run_part(void *arg, int part, int nparts)
{
    qjob *j = arg;
    (void)part;
    (void)nparts;
    for (;;) {
        int c = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        int p0 = c * j->chunk;
        if (p0 >= j->panels) return;
        int p1 = p0 + j->chunk < j->panels ? p0 + j->chunk : j->panels;
        cpu_quant_run(j->isa, j->t, j->xq, j->W, j->bias, j->y, j->ldy, j->B, j->N, j->K, p0, p1, j->flags);
    }
}

int cpu_quant_matmul(cpu_pool *pool, cpu_quant_isa isa, cpu_quant_type t, const float *x, int ldx, const void *Wp,
                     const float *bias, float *y, int ldy, int B, int N, int K, int flags, cpu_quant_scratch *s)
{
    size_t need = (size_t)B * cpu_quant_act_bytes(K);
    if (need > s->n) {
        void *p = NULL;
        if (posix_memalign(&p, 64, need)) return -ENOMEM;
        free(s->p);
        s->p = p;
        s->n = need;
    }
    int threads = cpu_pool_size(pool), panels = (N + NR - 1) / NR;
    qjob j = {.isa = isa, .t = t, .x = x, .bias = bias, .W = Wp, .xq = s->p, .y = y, .ldx = ldx, .ldy = ldy,
              .B = B, .N = N, .K = K, .flags = flags, .panels = panels};
    int rparts = (size_t)B * (size_t)K < (1u << 14) ? 1 : B < threads ? B : threads;
    cpu_pool_run(pool, act_part, &j, rparts);
    int parts = (double)B * N * K < (double)(1 << 14) ? 1 : threads;
    if (parts > panels) parts = panels;
    /* about 8 claims per part; at B = 1 a multiple of the panels streamed at once */
    int g = B == 1 ? (isa == CPU_QUANT_VNNI ? G1_VNNI : G1_AVX2) : 1;
    int chunk = panels / (parts * 8);
    chunk = chunk < g ? g : (chunk + g - 1) / g * g;
    j.chunk = chunk;
    atomic_init(&j.next, 0);
    cpu_pool_run_weighed(pool, run_part, &j, parts, (double)B * N * K, cpu_gemm_pool_class(B));
    return 0;
}
