/* kernels/cuda/kernel_bodies.h — the CUDA backend's kernels, written once as
 * per-thread bodies that compile both as CUDA device code (kernels.cu wraps
 * each in a __global__) and as plain C (harness.c runs them on the host over
 * the same grid, so the kernels are tested without a GPU).
 *
 * A body is one thread's work between barriers. It is called with a phase
 * number 0, 1, 2, ... and returns nonzero when another phase follows: the
 * runner then waits for every thread of the block (__syncthreads() on the
 * device; on the host, the harness runs all threads of the block through a
 * phase before any starts the next). All threads of a block return the same
 * value for a given phase. Nothing a thread computes survives a barrier
 * except what it wrote to memory — shared memory or global — which is true
 * on both runners.
 *
 * The launch geometry of each kernel is also defined here (kb_*_launch), so
 * both runners use the same grid, block and shared-memory size.
 *
 * Per-element math comes from kernels/mixer_math.h, the one definition the
 * CPU backend uses too. This header is C and C++ (nvcc) at once: explicit
 * casts from void *, no restrict, no compound literals. */
#ifndef LIND_KERNELS_CUDA_KERNEL_BODIES_H
#define LIND_KERNELS_CUDA_KERNEL_BODIES_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "kernels/mixer_math.h"

/* One thread's coordinates: blockIdx.x/y, threadIdx.x, blockDim.x and the
 * block's dynamic shared memory (16-byte aligned). */
typedef struct lind_thread {
    int bx, by, tx, bdim;
    void *smem;
} lind_thread;

/* A launch: grid gx × gy blocks of `block` threads, `smem` bytes of dynamic
 * shared memory per block. */
typedef struct lind_launch {
    int gx, gy, block;
    size_t smem;
} lind_launch;

/* Limits every launch respects (those of sm_80 and sm_90 without opting in
 * to large shared memory), checked by the harness so a geometry that passes
 * the tests also launches on a device. */
#define KB_MAX_BLOCK   1024
#define KB_MAX_GRID_Y  65535
#define KB_MAX_SMEM    (48 * 1024)
#define KB_EW_BLOCK    256      /* block size of the element-wise kernels */

enum kb_kernel {
    KB_EMBED, KB_LAYERNORM, KB_BIAS_ROWS, KB_GELU, KB_SHIFT_MIX,
    KB_LINEAR_STEP, KB_AFT_STEP, KB_TO_BF16, KB_NKERNELS
};

/* The per-session state of row b of the batch: slot slots[b] of the pool. */
#define KB_SLOT(pool, stride, slots, b) ((pool) + (size_t)(slots)[b] * (stride))

LIND_HD static inline int kb_log2(int n) {
    int l = 0;
    while ((1 << l) < n) l++;
    return l;
}

/* One step of a shared-memory tree sum over bdim (a power of two) doubles:
 * step s ≥ 1 folds the upper half of the remaining 2·(bdim >> s) values onto
 * the lower half. After steps 1..log2(bdim), red[0] holds the total. */
LIND_HD static inline void kb_tree_step(double *red, int tx, int bdim, int s) {
    int half = bdim >> s;
    if (tx < half) red[tx] += red[tx + half];
}

static inline int kb_ceil_div(size_t n, int d) { return (int)((n + (size_t)d - 1) / (size_t)d); }

/* ---- embedding: x[b, c] = E[tokens[b], c] ------------------------------- */
typedef struct kb_embed_args {
    const float *E;
    float *x;
    const int *tokens;
    int d;
} kb_embed_args;

static inline lind_launch kb_embed_launch(int B, int d) {
    lind_launch L = { kb_ceil_div((size_t)d, KB_EW_BLOCK), B, KB_EW_BLOCK, 0 };
    return L;
}

LIND_HD static inline int kb_embed(const lind_thread *t, int phase, const kb_embed_args *a) {
    (void)phase;
    int c = t->bx * t->bdim + t->tx, b = t->by;
    if (c < a->d) a->x[(size_t)b * a->d + c] = a->E[(size_t)a->tokens[b] * a->d + c];
    return 0;
}

/* ---- layer norm: one block per row, two tree sums (mean, then variance) --
 * Sums are double; the per-element result is lind_ln_apply(). y may be x:
 * each thread reads and writes only its own columns. */
typedef struct kb_layernorm_args {
    const float *x;
    float *y;
    const float *w, *b;
    int d;
    float eps;
} kb_layernorm_args;

static inline lind_launch kb_layernorm_launch(int B, int d) {
    int T = 32;
    while (T < d && T < KB_EW_BLOCK) T *= 2;
    lind_launch L = { B, 1, T, 2 * (size_t)T * sizeof(double) };
    return L;
}

LIND_HD static inline int kb_layernorm(const lind_thread *t, int phase, const kb_layernorm_args *a) {
    int T = t->bdim, lg = kb_log2(T), tx = t->tx, d = a->d;
    double *sum = (double *)t->smem, *sq = sum + T;
    const float *x = a->x + (size_t)t->bx * d;
    if (phase == 0) {
        double s = 0.0;
        for (int c = tx; c < d; c += T) s += (double)x[c];
        sum[tx] = s;
        return 1;
    }
    if (phase <= lg) { kb_tree_step(sum, tx, T, phase); return 1; }
    double mean = sum[0] / d;
    if (phase == lg + 1) {
        double s = 0.0;
        for (int c = tx; c < d; c += T) { double e = (double)x[c] - mean; s += e * e; }
        sq[tx] = s;
        return 1;
    }
    if (phase <= 2 * lg + 1) { kb_tree_step(sq, tx, T, phase - lg - 1); return 1; }
    float rstd = lind_ln_rstd((float)(sq[0] / d), a->eps), m = (float)mean;
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

static inline lind_launch kb_bias_rows_launch(int B, int N) {
    lind_launch L = { kb_ceil_div((size_t)N, KB_EW_BLOCK), B, KB_EW_BLOCK, 0 };
    return L;
}

LIND_HD static inline int kb_bias_rows(const lind_thread *t, int phase, const kb_bias_rows_args *a) {
    (void)phase;
    int n = t->bx * t->bdim + t->tx;
    if (n < a->N) {
        float *y = a->y + (size_t)t->by * a->ldy + n;
        *y = (a->accumulate ? *y : 0.0f) + a->bias[n];
    }
    return 0;
}

/* ---- GELU in place over n floats ---------------------------------------- */
typedef struct kb_gelu_args {
    float *x;
    size_t n;
} kb_gelu_args;

static inline lind_launch kb_gelu_launch(size_t n) {
    lind_launch L = { kb_ceil_div(n, KB_EW_BLOCK), 1, KB_EW_BLOCK, 0 };
    return L;
}

LIND_HD static inline int kb_gelu(const lind_thread *t, int phase, const kb_gelu_args *a) {
    (void)phase;
    size_t i = (size_t)t->bx * t->bdim + t->tx;
    if (i < a->n) a->x[i] = lind_gelu_erf(a->x[i]);
    return 0;
}

/* ---- token shift: one thread per (session, channel) ---------------------
 * out[b, p·d + c] = lind_shift_mix(h, prev, μ[p·d + c]) for p < nmix, then
 * prev ← h, prev being d floats at byte shift_off of the session's slot. */
typedef struct kb_shift_mix_args {
    const float *h, *mu;
    float *out;
    unsigned char *pool;
    size_t stride, shift_off;
    const int *slots;
    int d, nmix;
} kb_shift_mix_args;

static inline lind_launch kb_shift_mix_launch(int B, int d) {
    lind_launch L = { kb_ceil_div((size_t)d, KB_EW_BLOCK), B, KB_EW_BLOCK, 0 };
    return L;
}

LIND_HD static inline int kb_shift_mix(const lind_thread *t, int phase, const kb_shift_mix_args *a) {
    (void)phase;
    int c = t->bx * t->bdim + t->tx, b = t->by, d = a->d;
    if (c >= d) return 0;
    float *prev = (float *)(KB_SLOT(a->pool, a->stride, a->slots, b) + a->shift_off);
    float h = a->h[(size_t)b * d + c], p = prev[c];
    float *out = a->out + (size_t)b * a->nmix * d;
    for (int m = 0; m < a->nmix; m++) out[(size_t)m * d + c] = lind_shift_mix(h, p, a->mu[(size_t)m * d + c]);
    prev[c] = h;
    return 0;
}

/* ---- linear attention step: one block per (head, session) ---------------
 * Block of T = max(32, next power of two ≥ dh) threads. Phase 0: thread i < dh
 * computes φ(k_i), φ(q_i) into shared memory, updates z_i and leaves its
 * denominator term φq_i·z_i for the tree sum (phases 1..log2 T). Last phase:
 * thread j < dh updates column j of S — read once, written once, coalesced
 * across the block since S rows are contiguous in j — and writes o_j. */
typedef struct kb_linear_args {
    const float *in;        /* [B × 3·H·dh]: q | k | v */
    const float *gamma;     /* H decays, or NULL for γ = 1 */
    float *out;             /* [B × H·dh] */
    unsigned char *pool;
    size_t stride, state_off;
    const int *slots;
    int H, dh;
    float eps;
} kb_linear_args;

static inline int kb_linear_threads(int dh) {
    int T = 32;
    while (T < dh) T *= 2;
    return T;
}

static inline lind_launch kb_linear_launch(int B, int H, int dh) {
    int T = kb_linear_threads(dh);
    lind_launch L = { H, B, T, (size_t)T * sizeof(double) + 2 * (size_t)T * sizeof(float) };
    return L;
}

LIND_HD static inline int kb_linear_step(const lind_thread *t, int phase, const kb_linear_args *a) {
    int T = t->bdim, lg = kb_log2(T), tx = t->tx, h = t->bx, b = t->by;
    int H = a->H, dh = a->dh, HD = H * dh;
    double *red = (double *)t->smem;
    float *phik = (float *)(red + T), *phiq = phik + T;
    double *S = (double *)(KB_SLOT(a->pool, a->stride, a->slots, b) + a->state_off);
    double *Sh = S + (size_t)h * dh * dh, *zh = S + (size_t)HD * dh + (size_t)h * dh;
    double gamma = a->gamma ? (double)a->gamma[h] : 1.0;
    const float *row = a->in + (size_t)b * 3 * HD;
    if (phase == 0) {
        double term = 0.0;
        if (tx < dh) {
            float fq = lind_elu1(row[h * dh + tx]), fk = lind_elu1(row[HD + h * dh + tx]);
            phiq[tx] = fq;
            phik[tx] = fk;
            term = lind_lin_z(&zh[tx], fk, fq, gamma);
        }
        red[tx] = term;
        return 1;
    }
    if (phase <= lg) { kb_tree_step(red, tx, T, phase); return 1; }
    if (tx < dh) {
        double num = lind_lin_column(Sh, dh, tx, dh, phik, phiq, row[2 * HD + h * dh + tx], gamma);
        a->out[(size_t)b * HD + h * dh + tx] = lind_lin_out(num, red[0], a->eps);
    }
    return 0;
}

/* ---- AFT step: one thread per (session, channel) ------------------------
 * State: num, den, max as double[d] each at byte state_off of the slot. */
typedef struct kb_aft_args {
    const float *in;        /* [B × 3·d]: r | k | v */
    const float *w, *u;     /* d floats each, or NULL for 0 */
    float *out;             /* [B × d] */
    unsigned char *pool;
    size_t stride, state_off;
    const int *slots;
    int d;
} kb_aft_args;

static inline lind_launch kb_aft_launch(int B, int d) {
    lind_launch L = { kb_ceil_div((size_t)d, KB_EW_BLOCK), B, KB_EW_BLOCK, 0 };
    return L;
}

LIND_HD static inline int kb_aft_step(const lind_thread *t, int phase, const kb_aft_args *a) {
    (void)phase;
    int c = t->bx * t->bdim + t->tx, b = t->by, d = a->d;
    if (c >= d) return 0;
    double *st = (double *)(KB_SLOT(a->pool, a->stride, a->slots, b) + a->state_off);
    const float *row = a->in + (size_t)b * 3 * d;
    float w = a->w ? a->w[c] : 0.0f, u = a->u ? a->u[c] : 0.0f;
    float wkv = lind_aft_channel(&st[c], &st[d + c], &st[2 * d + c], row[d + c], row[2 * d + c], w, u);
    a->out[(size_t)b * d + c] = lind_sigmoid(row[c]) * wkv;
    return 0;
}

/* ---- fp32 → bf16 (for the bf16-weights option) --------------------------
 * Round to nearest, ties to even; NaN stays a (quiet) NaN. bf16 keeps fp32's
 * exponent range, so nothing overflows that did not in fp32. */
LIND_HD static inline uint16_t kb_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

LIND_HD static inline float kb_bf16_to_float(uint16_t h) {
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

static inline lind_launch kb_to_bf16_launch(int rows, int cols) {
    lind_launch L = { kb_ceil_div((size_t)cols, KB_EW_BLOCK), rows, KB_EW_BLOCK, 0 };
    return L;
}

LIND_HD static inline int kb_to_bf16(const lind_thread *t, int phase, const kb_to_bf16_args *a) {
    (void)phase;
    int c = t->bx * t->bdim + t->tx, r = t->by;
    if (c < a->cols) a->y[(size_t)r * a->ldy + c] = kb_bf16(a->x[(size_t)r * a->ldx + c]);
    return 0;
}

#endif
