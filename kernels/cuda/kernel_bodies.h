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
    KB_EMBED, KB_LAYERNORM, KB_BIAS_ROWS, KB_ACT, KB_SHIFT_MIX,
    KB_LINEAR_STEP, KB_AFT_STEP, KB_TO_BF16, KB_GATHER_ROWS, KB_SCALE,
    KB_GATED_ADD, KB_WIDEN_HALF, KB_GEMV_HALF, KB_SHORT_CONV, KB_CONV_ADVANCE,
    KB_DELTA_STEP, KB_NONFINITE, KB_NKERNELS
};

/* The per-session state of row b of the batch: slot slots[b] of the pool. */
#define KB_SLOT(pool, stride, slots, b) ((pool) + (size_t)(slots)[b] * (stride))

/* Runs (kernels/backend.h): the batch's rows grouped by session, run k being
 * rows [runs[k], runs[k+1]) of one slot, that session's next tokens in order.
 * The kernels that touch slot state have one block row (blockIdx.y) per run
 * and walk its rows in order, so a run of T rows computes exactly what T
 * one-row steps would, bit for bit; runs are independent of each other. */

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

static inline lind_launch kb_act_launch(size_t n) {
    lind_launch L = { kb_ceil_div(n, KB_EW_BLOCK), 1, KB_EW_BLOCK, 0 };
    return L;
}

LIND_HD static inline int kb_act(const lind_thread *t, int phase, const kb_act_args *a) {
    (void)phase;
    size_t i = (size_t)t->bx * t->bdim + t->tx;
    if (i < a->n) {
        float x = a->x[i];
        a->x[i] = a->act == KB_ACT_GELU ? lind_gelu_erf(x) : a->act == KB_ACT_RELU2 ? lind_relu2(x) : lind_sigmoid(x);
    }
    return 0;
}

/* ---- token shift: one thread per (run, channel) ---------------------------
 * For each row b of the run in order: out[b, p·d + c] = lind_shift_mix(h,
 * prev, μ[p·d + c]) for p < nmix, then prev ← h; prev is d floats at byte
 * shift_off of the run's slot, read once before the run and written once
 * after it (a float kept in a register is the float the store would hold). */
typedef struct kb_shift_mix_args {
    const float *h, *mu;
    float *out;
    unsigned char *pool;
    size_t stride, shift_off;
    const int *slots, *runs;
    int d, nmix;
} kb_shift_mix_args;

static inline lind_launch kb_shift_mix_launch(int nruns, int d) {
    lind_launch L = { kb_ceil_div((size_t)d, KB_EW_BLOCK), nruns, KB_EW_BLOCK, 0 };
    return L;
}

LIND_HD static inline int kb_shift_mix(const lind_thread *t, int phase, const kb_shift_mix_args *a) {
    (void)phase;
    int c = t->bx * t->bdim + t->tx, r0 = a->runs[t->by], r1 = a->runs[t->by + 1], d = a->d;
    if (c >= d) return 0;
    float *prev = (float *)(KB_SLOT(a->pool, a->stride, a->slots, r0) + a->shift_off);
    float p = prev[c];
    for (int b = r0; b < r1; b++) {
        float h = a->h[(size_t)b * d + c];
        float *out = a->out + (size_t)b * a->nmix * d;
        for (int m = 0; m < a->nmix; m++) out[(size_t)m * d + c] = lind_shift_mix(h, p, a->mu[(size_t)m * d + c]);
        p = h;
    }
    prev[c] = p;
    return 0;
}

/* ---- linear attention step: one block per (head, run) ---------------------
 * Block of T = max(32, next power of two ≥ dh) threads; the run's rows one
 * after the other, each in lg + 2 phases (lg = log2 T), a barrier between
 * every two, also between rows (the next row's phase 0 overwrites the shared
 * φ and the sum the last phase of this one reads). Per row, phase 0: thread
 * i < dh computes φ(k_i), φ(q_i) into shared memory, updates z_i and leaves
 * its denominator term φq_i·z_i for the tree sum (phases 1..lg). Last phase:
 * thread j < dh updates column j of S — read once, written once, coalesced
 * across the block since S rows are contiguous in j — and writes o_j. */
typedef struct kb_linear_args {
    const float *in;        /* [R × 3·H·dh]: q | k | v */
    const float *gamma;     /* H decays, or NULL for γ = 1 */
    float *out;             /* [R × H·dh] */
    unsigned char *pool;
    size_t stride, state_off;
    const int *slots, *runs;
    int H, dh;
    float eps;
} kb_linear_args;

static inline int kb_linear_threads(int dh) {
    int T = 32;
    while (T < dh) T *= 2;
    return T;
}

static inline lind_launch kb_linear_launch(int nruns, int H, int dh) {
    int T = kb_linear_threads(dh);
    lind_launch L = { H, nruns, T, (size_t)T * sizeof(double) + 2 * (size_t)T * sizeof(float) };
    return L;
}

LIND_HD static inline int kb_linear_step(const lind_thread *t, int phase, const kb_linear_args *a) {
    int T = t->bdim, lg = kb_log2(T), tx = t->tx, h = t->bx, per = lg + 2;
    int r0 = a->runs[t->by], n = a->runs[t->by + 1] - r0, sub = phase % per, b = r0 + phase / per;
    int H = a->H, dh = a->dh, HD = H * dh;
    double *red = (double *)t->smem;
    float *phik = (float *)(red + T), *phiq = phik + T;
    double *S = (double *)(KB_SLOT(a->pool, a->stride, a->slots, r0) + a->state_off);
    double *Sh = S + (size_t)h * dh * dh, *zh = S + (size_t)HD * dh + (size_t)h * dh;
    double gamma = a->gamma ? (double)a->gamma[h] : 1.0;
    const float *row = a->in + (size_t)b * 3 * HD;
    if (sub == 0) {
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
    if (sub <= lg) { kb_tree_step(red, tx, T, sub); return 1; }
    if (tx < dh) {
        double num = lind_lin_column(Sh, dh, tx, dh, phik, phiq, row[2 * HD + h * dh + tx], gamma);
        a->out[(size_t)b * HD + h * dh + tx] = lind_lin_out(num, red[0], a->eps);
    }
    return b - r0 + 1 < n;   /* another row: barrier first */
}

/* ---- AFT step: one thread per (run, channel) -----------------------------
 * State: num, den, max as double[d] each at byte state_off of the slot, held
 * in registers across the run's rows (a double kept is the double stored). */
typedef struct kb_aft_args {
    const float *in;        /* [R × 3·d]: r | k | v */
    const float *w, *u;     /* d floats each, or NULL for 0 */
    float *out;             /* [R × d] */
    unsigned char *pool;
    size_t stride, state_off;
    const int *slots, *runs;
    int d;
} kb_aft_args;

static inline lind_launch kb_aft_launch(int nruns, int d) {
    lind_launch L = { kb_ceil_div((size_t)d, KB_EW_BLOCK), nruns, KB_EW_BLOCK, 0 };
    return L;
}

LIND_HD static inline int kb_aft_step(const lind_thread *t, int phase, const kb_aft_args *a) {
    (void)phase;
    int c = t->bx * t->bdim + t->tx, r0 = a->runs[t->by], r1 = a->runs[t->by + 1], d = a->d;
    if (c >= d) return 0;
    double *st = (double *)(KB_SLOT(a->pool, a->stride, a->slots, r0) + a->state_off);
    double num = st[c], den = st[d + c], mx = st[2 * d + c];
    float w = a->w ? a->w[c] : 0.0f, u = a->u ? a->u[c] : 0.0f;
    for (int b = r0; b < r1; b++) {
        const float *row = a->in + (size_t)b * 3 * d;
        float wkv = lind_aft_channel(&num, &den, &mx, row[d + c], row[2 * d + c], w, u);
        a->out[(size_t)b * d + c] = lind_sigmoid(row[c]) * wkv;
    }
    st[c] = num;
    st[d + c] = den;
    st[2 * d + c] = mx;
    return 0;
}

/* ---- short causal convolution: one thread per (run, channel) --------------
 * For each row b of the run in order: y = lind_conv_channel() over the
 * channel's ring and the row's input, the input stored at ring[p], p
 * advanced; out[b, c] = y or lind_silu(y). The ring is read and written in
 * place in the slot (K − 1 ≤ 15 floats indexed by p: in registers they
 * would be local memory anyway). out may be in (same stride): each thread
 * reads in[b, c] before it writes out[b, c], and no other thread touches
 * that element. The ring's head index p is shared by all channels of the
 * slot, so this kernel only reads it; kb_conv_advance, launched after it,
 * stores the advanced index (a thread here cannot: other blocks of the same
 * run may not have read it yet). */
typedef struct kb_short_conv_args {
    const float *in;        /* row b at in + b·ldi */
    float *out;             /* row b at out + b·ldo */
    const float *w;         /* [n × K] */
    unsigned char *pool;
    size_t stride, ring_off, idx_off;
    const int *slots, *runs;
    int ldi, ldo, n, K, silu;
} kb_short_conv_args;

static inline lind_launch kb_short_conv_launch(int nruns, int n) {
    lind_launch L = { kb_ceil_div((size_t)n, KB_EW_BLOCK), nruns, KB_EW_BLOCK, 0 };
    return L;
}

/* The ring head index of a slot, read modulo K − 1 as the CPU backend does
 * (any bit pattern is a valid state). */
LIND_HD static inline int kb_conv_head(const unsigned char *slot, size_t idx_off, int K) {
    int32_t idx;
    memcpy(&idx, slot + idx_off, sizeof idx);
    return (int)((uint32_t)idx % (uint32_t)(K - 1));
}

LIND_HD static inline int kb_short_conv(const lind_thread *t, int phase, const kb_short_conv_args *a) {
    (void)phase;
    int c = t->bx * t->bdim + t->tx, r0 = a->runs[t->by], r1 = a->runs[t->by + 1], K = a->K, K1 = K - 1;
    if (c >= a->n) return 0;
    unsigned char *slot = KB_SLOT(a->pool, a->stride, a->slots, r0);
    float *ring = (float *)(slot + a->ring_off) + (size_t)c * K1;
    const float *w = a->w + (size_t)c * K;
    int p = kb_conv_head(slot, a->idx_off, K);
    for (int b = r0; b < r1; b++) {
        float x = a->in[(size_t)b * a->ldi + c];
        float y = lind_conv_channel(w, ring, p, x, K);
        ring[p] = x;
        a->out[(size_t)b * a->ldo + c] = a->silu ? lind_silu(y) : y;
        p = p + 1 == K1 ? 0 : p + 1;
    }
    return 0;
}

/* After kb_short_conv: each run's slot gets its head index advanced by the
 * run's length, stored in [0, K − 1). One thread per run. */
typedef struct kb_conv_advance_args {
    unsigned char *pool;
    size_t stride, idx_off;
    const int *slots, *runs;
    int nruns, K;
} kb_conv_advance_args;

static inline lind_launch kb_conv_advance_launch(int nruns) {
    lind_launch L = { kb_ceil_div((size_t)nruns, KB_EW_BLOCK), 1, KB_EW_BLOCK, 0 };
    return L;
}

LIND_HD static inline int kb_conv_advance(const lind_thread *t, int phase, const kb_conv_advance_args *a) {
    (void)phase;
    int k = t->bx * t->bdim + t->tx;
    if (k >= a->nruns) return 0;
    int r0 = a->runs[k], K1 = a->K - 1;
    unsigned char *slot = KB_SLOT(a->pool, a->stride, a->slots, r0);
    int32_t idx = (int32_t)((kb_conv_head(slot, a->idx_off, a->K) + (a->runs[k + 1] - r0) % K1) % K1);
    memcpy(slot + a->idx_off, &idx, sizeof idx);
    return 0;
}

/* ---- gated delta rule: one block per (head, run) ---------------------------
 * Block of T = kb_linear_threads(dh) threads (lg = log2 T); the run's rows
 * one after the other, each in 2·lg + 4 phases with a barrier between every
 * two (also between rows). Per row of head h:
 *   0         thread i < dh: q_i², k_i² into the two halves of red (0 past dh)
 *   1..lg     both tree sums at once
 *   lg+1      thread i < dh: k̂_i = k_i/‖k‖, q̂_i = q_i/‖q‖·dh^−½ (doubles,
 *             shared) — the CPU backend's l2 scaling
 *   lg+2      thread j < dh: lind_delta_column() on column j of S (read for
 *             (S k)_j, then updated and summed with q̂: o_j), o_j and o_j²
 *             into red (β and α computed per thread from the row: two
 *             scalars, no barrier needed)
 *   lg+3..2lg+2  tree sum of o²
 *   2lg+3     thread j < dh: out = lind_rms_apply(o_j, rs, w_j)
 * S columns are contiguous across the block (S rows are rows of j), so every
 * pass over S is coalesced. Shared: red [2T], k̂ [T], q̂ [T] doubles; the o
 * phases reuse red (o² in the first half, o in the second). */
typedef struct kb_delta_args {
    const float *in;        /* [R × (3·hd + 2·H)]: q | k | v | β logits | gate logits */
    const float *gate;      /* [2H]: A = exp(A_log), then the gate bias */
    const float *norm_w;    /* [dh] */
    float *out;             /* [R × hd] */
    unsigned char *pool;
    size_t stride, state_off;
    const int *slots, *runs;
    int H, dh;
    float eps;
} kb_delta_args;

static inline lind_launch kb_delta_launch(int nruns, int H, int dh) {
    int T = kb_linear_threads(dh);
    lind_launch L = { H, nruns, T, 4 * (size_t)T * sizeof(double) };
    return L;
}

LIND_HD static inline int kb_delta_step(const lind_thread *t, int phase, const kb_delta_args *a) {
    int T = t->bdim, lg = kb_log2(T), tx = t->tx, h = t->bx, per = 2 * lg + 4;
    int r0 = a->runs[t->by], n = a->runs[t->by + 1] - r0, sub = phase % per, b = r0 + phase / per;
    int H = a->H, dh = a->dh, hd = H * dh;
    double *red = (double *)t->smem, *kn = red + 2 * T, *qn = kn + T;
    const float *row = a->in + (size_t)b * (3 * (size_t)hd + 2 * (size_t)H);
    if (sub == 0) {
        double q = 0.0, k = 0.0;
        if (tx < dh) {
            q = (double)row[h * dh + tx];
            k = (double)row[hd + h * dh + tx];
        }
        red[tx] = q * q;
        red[T + tx] = k * k;
        return 1;
    }
    if (sub <= lg) {
        kb_tree_step(red, tx, T, sub);
        kb_tree_step(red + T, tx, T, sub);
        return 1;
    }
    if (sub == lg + 1) {
        if (tx < dh) {
            double qs = lind_l2_rscale(red[0]) * (1.0 / sqrt((double)dh)), ks = lind_l2_rscale(red[T]);
            qn[tx] = (double)row[h * dh + tx] * qs;
            kn[tx] = (double)row[hd + h * dh + tx] * ks;
        }
        return 1;
    }
    if (sub == lg + 2) {
        double o = 0.0;
        if (tx < dh) {
            double *S = (double *)(KB_SLOT(a->pool, a->stride, a->slots, r0) + a->state_off) + (size_t)h * dh * dh;
            double beta = lind_delta_beta(row[3 * hd + h]);
            double alpha = lind_delta_alpha(row[3 * hd + H + h], a->gate[h], a->gate[H + h]);
            o = lind_delta_column(S, dh, tx, dh, kn, qn, row[2 * hd + h * dh + tx], alpha, beta);
        }
        red[tx] = o * o;
        red[T + tx] = o;
        return 1;
    }
    if (sub <= 2 * lg + 2) { kb_tree_step(red, tx, T, sub - lg - 2); return 1; }
    if (tx < dh) {
        double rs = lind_rms_rscale(red[0], dh, a->eps);
        a->out[(size_t)b * hd + h * dh + tx] = lind_rms_apply(red[T + tx], rs, a->norm_w[tx]);
    }
    return b - r0 + 1 < n;   /* another row: barrier first */
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

/* ---- gather rows: dst[i, c] = src[rows[i], c] ----------------------------- */
typedef struct kb_gather_rows_args {
    const float *src;
    float *dst;
    const int *rows;        /* n row indices (device copy of gather_rows' host array) */
    int d;
} kb_gather_rows_args;

static inline lind_launch kb_gather_rows_launch(int n, int d) {
    lind_launch L = { kb_ceil_div((size_t)d, KB_EW_BLOCK), n, KB_EW_BLOCK, 0 };
    return L;
}

LIND_HD static inline int kb_gather_rows(const lind_thread *t, int phase, const kb_gather_rows_args *a) {
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

static inline lind_launch kb_scale_launch(size_t n) {
    lind_launch L = { kb_ceil_div(n, KB_EW_BLOCK), 1, KB_EW_BLOCK, 0 };
    return L;
}

LIND_HD static inline int kb_scale(const lind_thread *t, int phase, const kb_scale_args *a) {
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

static inline lind_launch kb_nonfinite_launch(int R, int d) {
    lind_launch L = { kb_ceil_div((size_t)d, KB_EW_BLOCK), R, KB_EW_BLOCK, 0 };
    return L;
}

LIND_HD static inline int kb_nonfinite(const lind_thread *t, int phase, const kb_nonfinite_args *a) {
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

static inline lind_launch kb_gated_add_launch(int R, int d) {
    lind_launch L = { kb_ceil_div((size_t)d, KB_EW_BLOCK), R, KB_EW_BLOCK, 0 };
    return L;
}

LIND_HD static inline int kb_gated_add(const lind_thread *t, int phase, const kb_gated_add_args *a) {
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
LIND_HD static inline float kb_f16_to_float(uint16_t h) {
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

static inline lind_launch kb_widen_half_launch(size_t n) {
    lind_launch L = { kb_ceil_div(n, KB_EW_BLOCK), 1, KB_EW_BLOCK, 0 };
    return L;
}

LIND_HD static inline int kb_widen_half(const lind_thread *t, int phase, const kb_widen_half_args *a) {
    (void)phase;
    size_t i = (size_t)t->bx * t->bdim + t->tx;
    if (i < a->n) {
        float f = a->bf16 ? kb_bf16_to_float(a->x[i]) : kb_f16_to_float(a->x[i]);
        if (a->to_bf16) a->yb[i] = kb_bf16(f);
        else a->y[i] = f;
    }
    return 0;
}

/* ---- small-batch product with half weights --------------------------------
 * y[b, n] = (beta ? y[b, n] : 0) + Σ_k x[b, k] · widen(W[n, k]) for b < B ≤
 * KB_GEMV_MAXB: the decode step's products read the half weights directly
 * (2 bytes per weight, where widening first costs 2 + 4 + 4). Block of 256
 * threads = 8 groups of 32 lanes, group w on output n = 8·blockIdx.x + w:
 * lane l sums k ≡ l (mod 32) in k order for every row (fp32, widen(W) · x
 * as one fmaf), then a tree over the 32 lanes in shared memory (5 phases)
 * and lane b < B writes row b. Every output's sum has the same order
 * whatever B is, so this kernel alone is batch-invariant. */
#define KB_GEMV_MAXB  8
#define KB_GEMV_LANES 32
#define KB_GEMV_GROUPS 8

typedef struct kb_gemv_half_args {
    const uint16_t *W;      /* [N × K] half bits */
    const float *x;         /* row b at x + b·ldx */
    float *y;               /* row b at y + b·ldy */
    int bf16, B, N, K, ldx, ldy, beta;
} kb_gemv_half_args;

static inline lind_launch kb_gemv_half_launch(int N) {
    lind_launch L = { kb_ceil_div((size_t)N, KB_GEMV_GROUPS), 1, KB_GEMV_GROUPS * KB_GEMV_LANES,
                      (size_t)KB_GEMV_GROUPS * KB_GEMV_MAXB * KB_GEMV_LANES * sizeof(float) };
    return L;
}

LIND_HD static inline int kb_gemv_half(const lind_thread *t, int phase, const kb_gemv_half_args *a) {
    int w = t->tx / KB_GEMV_LANES, l = t->tx % KB_GEMV_LANES, n = t->bx * KB_GEMV_GROUPS + w;
    float *red = (float *)t->smem + (size_t)w * KB_GEMV_MAXB * KB_GEMV_LANES;   /* [MAXB][LANES] of group w */
    if (phase == 0) {
        float acc[KB_GEMV_MAXB];
        for (int b = 0; b < KB_GEMV_MAXB; b++) acc[b] = 0.0f;
        if (n < a->N) {
            const uint16_t *Wn = a->W + (size_t)n * a->K;
            for (int k = l; k < a->K; k += KB_GEMV_LANES) {
                float wk = a->bf16 ? kb_bf16_to_float(Wn[k]) : kb_f16_to_float(Wn[k]);
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
