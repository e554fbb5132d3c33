/* kernels/cuda/kb_rows.h — kernel bodies: row-wise ops: embedding, layer norm, bias, activations, bf16 rounding, gather, scale,
 * non-finite check, gated add, half weights (widening and the small-batch product).
 * Per-thread bodies and launch geometry (kernels/cuda/kb_common.h says how
 * bodies, phases and barriers work); listed in kernels/cuda/kernel_bodies.h. */
#ifndef LIND_KERNELS_CUDA_KB_ROWS_H
#define LIND_KERNELS_CUDA_KB_ROWS_H

#include "kernels/cuda/kb_common.h"

/* ---- embedding: x[b, c] = E[tokens[b], c] ------------------------------- */
typedef struct kb_embed_args {
    const float *E;
    float *x;
    const int *tokens;
    int d;
} kb_embed_args;

static inline lind_launch kb_embed_launch(int B, int d)
{
    lind_launch L = { kb_ceil_div((size_t)d, KB_EW_BLOCK), B, KB_EW_BLOCK, 0 };
    return L;
}

LIND_HD static inline int kb_embed(const lind_thread *t, int phase, const kb_embed_args *a)
{
    (void)phase;
    int c = t->bx * t->bdim + t->tx, b = t->by;
    if (c < a->d) a->x[(size_t)b * a->d + c] = a->E[(size_t)a->tokens[b] * a->d + c];
    return 0;
}

/* ---- layer norm: one block per row, two passes (mean, then variance) ----
 * Sums are double; the per-element result is lind_ln_apply(). y may be x:
 * each thread reads and writes only its own columns. Each thread leaves
 * the partial sum of its columns in shared memory and, after one barrier,
 * every thread adds all T partials itself in index order — the same total
 * in every thread, with one barrier per pass where a tree needed log2 T
 * (a 768-wide row took 19 phases, now 3). T is about d/16, at most 256, so
 * that serial sum stays short. */
typedef struct kb_layernorm_args {
    const float *x;
    float *y;
    const float *w, *b;
    int d;
    float eps;
} kb_layernorm_args;

static inline lind_launch kb_layernorm_launch(int B, int d)
{
    int T = 32;
    while (T * 16 < d && T < KB_EW_BLOCK) T *= 2;
    lind_launch L = { B, 1, T, 2 * (size_t)T * sizeof(double) };
    return L;
}

LIND_HD static inline int kb_layernorm(const lind_thread *t, int phase, const kb_layernorm_args *a)
{
    int T = t->bdim, tx = t->tx, d = a->d;
    double *sum = (double *)t->smem, *sq = sum + T;
    const float *x = a->x + (size_t)t->bx * d;
    double s = 0.0;
    if (phase == 0) {
        for (int c = tx; c < d; c += T) s += (double)x[c];
        sum[tx] = s;
        return 1;
    }
    for (int i = 0; i < T; i++) s += sum[i];
    double mean = s / d;
    if (phase == 1) {
        double v = 0.0;
        for (int c = tx; c < d; c += T) { double e = (double)x[c] - mean; v += e * e; }
        sq[tx] = v;
        return 1;
    }
    double v = 0.0;
    for (int i = 0; i < T; i++) v += sq[i];
    float rstd = lind_ln_rstd((float)(v / d), a->eps), m = (float)mean;
    float *y = a->y + (size_t)t->bx * d;
    for (int c = tx; c < d; c += T) y[c] = lind_ln_apply(x[c], m, rstd, a->w[c], a->b[c]);
    return 0;
}

/* ---- bias rows: y[b, n] = (accumulate ? y[b, n] : 0) + bias[n] -----------
 * Run before a GEMM with β = 1, which then adds x·Wᵀ on top. */
typedef struct kb_bias_rows_args {
    float *y;           /* already offset to column 0 of the output block */
    const float *bias;
    int ldy, N, accumulate;
} kb_bias_rows_args;

static inline lind_launch kb_bias_rows_launch(int B, int N)
{
    lind_launch L = { kb_ceil_div((size_t)N, KB_EW_BLOCK), B, KB_EW_BLOCK, 0 };
    return L;
}

LIND_HD static inline int kb_bias_rows(const lind_thread *t, int phase, const kb_bias_rows_args *a)
{
    (void)phase;
    int n = t->bx * t->bdim + t->tx;
    if (n < a->N) {
        float *y = a->y + (size_t)t->by * a->ldy + n;
        *y = (a->accumulate ? *y : 0.0f) + a->bias[n];
    }
    return 0;
}

/* ---- activation in place over n floats ----------------------------------
 * The epilogue of matmul's activation flags, after the product (and bias):
 * KB_ACT_GELU lind_gelu_erf, KB_ACT_RELU2 lind_relu2 (max(0, x)²),
 * KB_ACT_SIGMOID lind_sigmoid — the per-element functions the CPU backend
 * applies. */
enum { KB_ACT_GELU, KB_ACT_RELU2, KB_ACT_SIGMOID };

typedef struct kb_act_args {
    float *x;
    size_t n;
    int act;
} kb_act_args;

static inline lind_launch kb_act_launch(size_t n)
{
    lind_launch L = { kb_ceil_div(n, KB_EW_BLOCK), 1, KB_EW_BLOCK, 0 };
    return L;
}

LIND_HD static inline int kb_act(const lind_thread *t, int phase, const kb_act_args *a)
{
    (void)phase;
    size_t i = (size_t)t->bx * t->bdim + t->tx;
    if (i < a->n) {
        float x = a->x[i];
        a->x[i] = a->act == KB_ACT_GELU ? lind_gelu_erf(x) : a->act == KB_ACT_RELU2 ? lind_relu2(x) : lind_sigmoid(x);
    }
    return 0;
}

/* ---- fp32 → bf16 (for the bf16-weights option) --------------------------
 * Round to nearest, ties to even; NaN stays a (quiet) NaN. bf16 keeps fp32's
 * exponent range, so nothing overflows that did not in fp32. */
LIND_HD static inline uint16_t kb_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

LIND_HD static inline float kb_bf16_to_float(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* y[r, c] = bf16(x[r, c]) for r < rows, c < cols (row strides ldx, ldy). */
typedef struct kb_to_bf16_args {
    const float *x;
    uint16_t *y;
    int ldx, ldy, cols;
} kb_to_bf16_args;

static inline lind_launch kb_to_bf16_launch(int rows, int cols)
{
    lind_launch L = { kb_ceil_div((size_t)cols, KB_EW_BLOCK), rows, KB_EW_BLOCK, 0 };
    return L;
}

LIND_HD static inline int kb_to_bf16(const lind_thread *t, int phase, const kb_to_bf16_args *a)
{
    (void)phase;
    int c = t->bx * t->bdim + t->tx, r = t->by;
    if (c < a->cols) a->y[(size_t)r * a->ldy + c] = kb_bf16(a->x[(size_t)r * a->ldx + c]);
    return 0;
}

/* ---- gather rows: dst[i, c] = src[rows[i], c] ----------------------------- */
typedef struct kb_gather_rows_args {
    const float *src;
    float *dst;
    const int *rows;        /* n row indices (device copy of gather_rows' host array) */
    int d;
} kb_gather_rows_args;

static inline lind_launch kb_gather_rows_launch(int n, int d)
{
    lind_launch L = { kb_ceil_div((size_t)d, KB_EW_BLOCK), n, KB_EW_BLOCK, 0 };
    return L;
}

LIND_HD static inline int kb_gather_rows(const lind_thread *t, int phase, const kb_gather_rows_args *a)
{
    (void)phase;
    int c = t->bx * t->bdim + t->tx, i = t->by;
    if (c < a->d) a->dst[(size_t)i * a->d + c] = a->src[(size_t)a->rows[i] * a->d + c];
    return 0;
}

/* ---- scale: x[i] *= s over n floats (rescale_every's halving) ------------- */
typedef struct kb_scale_args {
    float *x;
    size_t n;
    float s;
} kb_scale_args;

static inline lind_launch kb_scale_launch(size_t n)
{
    lind_launch L = { kb_ceil_div(n, KB_EW_BLOCK), 1, KB_EW_BLOCK, 0 };
    return L;
}

LIND_HD static inline int kb_scale(const lind_thread *t, int phase, const kb_scale_args *a)
{
    (void)phase;
    size_t i = (size_t)t->bx * t->bdim + t->tx;
    if (i < a->n) a->x[i] *= a->s;
    return 0;
}

/* ---- non-finite rows: bad[r] = 1 if x[r, :d] holds a NaN or ±inf ----------
 * bad is zeroed before the launch; threads that find one all store the same
 * 1, so the order of their stores does not matter. */
typedef struct kb_nonfinite_args {
    const float *x;
    int *bad;
    int d;
} kb_nonfinite_args;

static inline lind_launch kb_nonfinite_launch(int R, int d)
{
    lind_launch L = { kb_ceil_div((size_t)d, KB_EW_BLOCK), R, KB_EW_BLOCK, 0 };
    return L;
}

LIND_HD static inline int kb_nonfinite(const lind_thread *t, int phase, const kb_nonfinite_args *a)
{
    (void)phase;
    int c = t->bx * t->bdim + t->tx, r = t->by;
    if (c < a->d && !isfinite(a->x[(size_t)r * a->d + c])) a->bad[r] = 1;
    return 0;
}

/* ---- gated residual add: x[r, c] += g[r, c] · v[r, c] ----------------------
 * g and v already offset to their column 0, row strides ldg and ldv; x has
 * row stride d. One rounding (fmaf), as the CPU backend's loop compiles to
 * wherever the CPU has FMA. */
typedef struct kb_gated_add_args {
    float *x;
    const float *g, *v;
    int ldg, ldv, d;
} kb_gated_add_args;

static inline lind_launch kb_gated_add_launch(int R, int d)
{
    lind_launch L = { kb_ceil_div((size_t)d, KB_EW_BLOCK), R, KB_EW_BLOCK, 0 };
    return L;
}

LIND_HD static inline int kb_gated_add(const lind_thread *t, int phase, const kb_gated_add_args *a)
{
    (void)phase;
    int c = t->bx * t->bdim + t->tx, r = t->by;
    if (c < a->d) {
        float *x = a->x + (size_t)r * a->d + c;
        *x = fmaf(a->g[(size_t)r * a->ldg + c], a->v[(size_t)r * a->ldv + c], *x);
    }
    return 0;
}

/* ---- half → fp32 (half-precision weights) ----------------------------------
 * Exact: every fp16 and bf16 value is an fp32 value. fp16 subnormals are
 * m·2^-24 (m < 1024), computed as a float product, which is exact too. */
LIND_HD static inline float kb_f16_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, bits;
    if (e == 0x1fu) {
        bits = sign | 0x7f800000u | (m << 13);
    } else if (e != 0) {
        bits = sign | ((e + 112u) << 23) | (m << 13);
    } else {
        float f = (float)m * 5.9604644775390625e-8f;   /* 2^-24 */
        memcpy(&bits, &f, sizeof bits);
        bits |= sign;
    }
    float out;
    memcpy(&out, &bits, sizeof out);
    return out;
}

/* y[i] = widen(x[i]) for i < n, x fp16 (bf16 = 0) or bf16 (bf16 = 1) bits;
 * or, with to_bf16, the bf16 rounding of that (an fp16 weight for the bf16
 * GEMMs), written as bf16 bits into yb. */
typedef struct kb_widen_half_args {
    const uint16_t *x;
    float *y;
    uint16_t *yb;
    size_t n;
    int bf16, to_bf16;
} kb_widen_half_args;

static inline lind_launch kb_widen_half_launch(size_t n)
{
    lind_launch L = { kb_ceil_div(n, KB_EW_BLOCK), 1, KB_EW_BLOCK, 0 };
    return L;
}

LIND_HD static inline int kb_widen_half(const lind_thread *t, int phase, const kb_widen_half_args *a)
{
    (void)phase;
    size_t i = (size_t)t->bx * t->bdim + t->tx;
    if (i < a->n) {
        float f = a->bf16 ? kb_bf16_to_float(a->x[i]) : kb_f16_to_float(a->x[i]);
        if (a->to_bf16) a->yb[i] = kb_bf16(f);
        else a->y[i] = f;
    }
    return 0;
}

/* ---- small-batch product (decode) -----------------------------------------
 * y[b, n] = (beta ? y[b, n] : 0) + Σ_k x[b, k] · W[n, k] for b < B ≤
 * KB_GEMV_MAXB, W fp32, or fp16/bf16 widened exactly in registers (2 bytes
 * per weight, where widening first costs 2 + 4 + 4). A GEMM library's
 * kernels for a few rows are tuned for many (cuBLAS picked a 264-way
 * split-K kernel for 8 rows); this one streams W once for all B rows.
 * Block of 256 threads = 8 groups of 32 lanes, group w on output
 * n = 8·blockIdx.x + w: lane l sums k ≡ l (mod 32) in k order for every row
 * (fp32, W · x as one fmaf), then a tree over the 32 lanes in shared memory
 * (5 phases) and lane b < B writes row b. Every output's sum has the same
 * order whatever B is, so this kernel alone is batch-invariant. */
#define KB_GEMV_MAXB  8
#define KB_GEMV_LANES 32
#define KB_GEMV_GROUPS 8

enum { KB_W_F32, KB_W_F16, KB_W_BF16 };

typedef struct kb_gemv_args {
    const void *W;          /* [N × K]: fp32 (KB_W_F32) or half bits */
    const float *x;         /* row b at x + b·ldx */
    float *y;               /* row b at y + b·ldy */
    int wtype, B, N, K, ldx, ldy, beta;
} kb_gemv_args;

static inline lind_launch kb_gemv_launch(int N)
{
    lind_launch L = { kb_ceil_div((size_t)N, KB_GEMV_GROUPS), 1, KB_GEMV_GROUPS * KB_GEMV_LANES,
                      (size_t)KB_GEMV_GROUPS * KB_GEMV_MAXB * KB_GEMV_LANES * sizeof(float) };
    return L;
}

LIND_HD static inline float kb_gemv_w(const kb_gemv_args *a, size_t i)
{
    if (a->wtype == KB_W_F32) return ((const float *)a->W)[i];
    uint16_t h = ((const uint16_t *)a->W)[i];
    return a->wtype == KB_W_BF16 ? kb_bf16_to_float(h) : kb_f16_to_float(h);
}

LIND_HD static inline int kb_gemv(const lind_thread *t, int phase, const kb_gemv_args *a)
{
    int w = t->tx / KB_GEMV_LANES, l = t->tx % KB_GEMV_LANES, n = t->bx * KB_GEMV_GROUPS + w;
    float *red = (float *)t->smem + (size_t)w * KB_GEMV_MAXB * KB_GEMV_LANES;   /* [MAXB][LANES] of group w */
    if (phase == 0) {
        float acc[KB_GEMV_MAXB];
        for (int b = 0; b < KB_GEMV_MAXB; b++) acc[b] = 0.0f;
        if (n < a->N) {
            size_t row = (size_t)n * a->K;
            for (int k = l; k < a->K; k += KB_GEMV_LANES) {
                float wk = kb_gemv_w(a, row + k);
                for (int b = 0; b < KB_GEMV_MAXB; b++)   /* constant trip count: acc stays in registers */
                    if (b < a->B) acc[b] = fmaf(wk, a->x[(size_t)b * a->ldx + k], acc[b]);
            }
        }
        for (int b = 0; b < KB_GEMV_MAXB; b++) red[b * KB_GEMV_LANES + l] = acc[b];
        return 1;
    }
    if (phase <= 5) {   /* log2(32) tree steps */
        int half = KB_GEMV_LANES >> phase;
        if (l < half)
            for (int b = 0; b < a->B; b++) red[b * KB_GEMV_LANES + l] += red[b * KB_GEMV_LANES + l + half];
        return 1;
    }
    if (n < a->N && l < a->B) {
        float *y = a->y + (size_t)l * a->ldy + n;
        *y = (a->beta ? *y : 0.0f) + red[l * KB_GEMV_LANES];
    }
    return 0;
}

#endif
