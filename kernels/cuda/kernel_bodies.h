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
    KB_DELTA_STEP,
    KB_WINDOW_STEP, KB_POS_ADVANCE, KB_AFTW_STEP,
    KB_RETENTION_STEP, KB_FAVOR, KB_COSFORMER_STEP, KB_LINFORMER_STEP,
    KB_NONFINITE,
    KB_NKERNELS
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

/* ---- sliding-window attention: one thread per (run, head) -----------------
 * For each row b of the run in order, at position t = the slot's int64
 * position (read as unsigned) + b − r0: k (rotated by t with RoPE) and v go
 * to ring row t mod L (and global row t when t < g), then
 * lind_window_head() over the ring and the global rows — exactly the CPU
 * backend's per-(run, head) work. q and the dh accumulators are
 * thread-local (dh ≤ 256). The position is shared by the run's heads, so
 * this kernel only reads it; kb_pos_advance, launched after it, stores it. */
#define KB_WINDOW_MAX_DH 256
typedef struct kb_window_args {
    const float *in;        /* [R × 3·hd]: q | k | v */
    const float *slopes;    /* [H] ALiBi slopes */
    float *out;             /* [R × hd] */
    unsigned char *pool;
    size_t stride, ring_off, glob_off, pos_off;
    const int *slots, *runs;
    int H, dh, w, dil, g;
    float rope_base;        /* > 0: RoPE, slopes unused */
} kb_window_args;

static inline lind_launch kb_window_launch(int nruns, int H) {
    lind_launch L = { kb_ceil_div((size_t)H, 32), nruns, 32, 0 };
    return L;
}

LIND_HD static inline unsigned long long kb_slot_pos(const unsigned char *slot, size_t pos_off) {
    unsigned long long p;
    memcpy(&p, slot + pos_off, sizeof p);
    return p;
}

LIND_HD static inline int kb_window_step(const lind_thread *t, int phase, const kb_window_args *a) {
    (void)phase;
    int h = t->bx * t->bdim + t->tx, r0 = a->runs[t->by], r1 = a->runs[t->by + 1];
    if (h >= a->H) return 0;
    int dh = a->dh, hd = a->H * dh;
    size_t L = (size_t)a->w * (size_t)a->dil;
    unsigned char *slot = KB_SLOT(a->pool, a->stride, a->slots, r0);
    float *rk = (float *)(slot + a->ring_off) + (size_t)h * dh, *rv = rk + L * hd;
    float *gk = (float *)(slot + a->glob_off) + (size_t)h * dh, *gv = gk + (size_t)a->g * hd;
    unsigned long long t0 = kb_slot_pos(slot, a->pos_off);
    double slope = a->rope_base > 0 ? 0.0 : (double)a->slopes[h];
    float q[KB_WINDOW_MAX_DH];
    double acc[KB_WINDOW_MAX_DH];
    for (int b = r0; b < r1; b++) {
        unsigned long long tt = t0 + (unsigned long long)(b - r0);
        const float *row = a->in + (size_t)b * 3 * hd + (size_t)h * dh;
        float *kd = rk + (size_t)(tt % L) * hd, *vd = rv + (size_t)(tt % L) * hd;
        if (a->rope_base > 0) {
            lind_rope(kd, row + hd, tt, dh, a->rope_base);
            lind_rope(q, row, tt, dh, a->rope_base);
        } else {
            for (int i = 0; i < dh; i++) { kd[i] = row[hd + i]; q[i] = row[i]; }
        }
        for (int i = 0; i < dh; i++) vd[i] = row[2 * hd + i];
        if (tt < (unsigned long long)a->g)
            for (int i = 0; i < dh; i++) {
                gk[(size_t)tt * hd + i] = kd[i];
                gv[(size_t)tt * hd + i] = vd[i];
            }
        lind_window_head(a->out + (size_t)b * hd + (size_t)h * dh, acc, q, rk, rv, gk, gv, hd, tt, a->w, a->dil,
                         a->g, slope, dh);
    }
    return 0;
}

/* After kb_window_step / kb_aftw_step: each run's slot gets its int64
 * position advanced by the run's length. One thread per run. */
typedef struct kb_pos_advance_args {
    unsigned char *pool;
    size_t stride, pos_off;
    const int *slots, *runs;
    int nruns;
} kb_pos_advance_args;

static inline lind_launch kb_pos_advance_launch(int nruns) {
    lind_launch L = { kb_ceil_div((size_t)nruns, KB_EW_BLOCK), 1, KB_EW_BLOCK, 0 };
    return L;
}

LIND_HD static inline int kb_pos_advance(const lind_thread *t, int phase, const kb_pos_advance_args *a) {
    (void)phase;
    int k = t->bx * t->bdim + t->tx;
    if (k >= a->nruns) return 0;
    int r0 = a->runs[k];
    unsigned char *slot = KB_SLOT(a->pool, a->stride, a->slots, r0);
    unsigned long long p = kb_slot_pos(slot, a->pos_off) + (unsigned long long)(a->runs[k + 1] - r0);
    memcpy(slot + a->pos_off, &p, sizeof p);
    return 0;
}

/* ---- AFT-local / AFT-conv: one thread per (run, channel) ------------------
 * For each row of the run in order: out = σ(q)·lind_aftw_channel() on the
 * channel's sums and ring, in place in the slot (the CPU backend's loop).
 * The position is only read (kb_pos_advance stores it). */
typedef struct kb_aftw_args {
    const float *in;        /* [R × 3·d]: q | k | v */
    const float *w;         /* [H × s] position biases */
    float *out;             /* [R × d] */
    unsigned char *pool;
    size_t stride, acc_off, ring_off, pos_off;
    const int *slots, *runs;
    int d, s, H;
} kb_aftw_args;

static inline lind_launch kb_aftw_launch(int nruns, int d) {
    lind_launch L = { kb_ceil_div((size_t)d, KB_EW_BLOCK), nruns, KB_EW_BLOCK, 0 };
    return L;
}

LIND_HD static inline int kb_aftw_step(const lind_thread *t, int phase, const kb_aftw_args *a) {
    (void)phase;
    int c = t->bx * t->bdim + t->tx, r0 = a->runs[t->by], r1 = a->runs[t->by + 1], d = a->d, S1 = a->s - 1;
    if (c >= d) return 0;
    unsigned char *slot = KB_SLOT(a->pool, a->stride, a->slots, r0);
    double *num = (double *)(slot + a->acc_off);
    float *rk = (float *)(slot + a->ring_off) + (size_t)c * S1, *rv = rk + (size_t)d * S1;
    const float *w = a->w + (size_t)(c / (d / a->H)) * a->s;
    unsigned long long t0 = kb_slot_pos(slot, a->pos_off);
    for (int b = r0; b < r1; b++) {
        const float *row = a->in + (size_t)b * 3 * d;
        a->out[(size_t)b * d + c] =
            lind_sigmoid(row[c]) * (float)lind_aftw_channel(&num[c], &num[d + c], &num[2 * d + c], rk, rv,
                                                            t0 + (unsigned long long)(b - r0), row[d + c],
                                                            row[2 * d + c], w, a->s);
    }
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

/* ---- retention (RetNet): one block per (head, run) ------------------------
 * Block of T = kb_linear_threads(dh) threads (lg = log2 T); the run's rows
 * one after the other, each in 2·lg + 3 phases with a barrier between every
 * two (also between rows). Per row of head h:
 *   0            thread j < dh: o_j = dh^−½ · lind_lin_column() (φ = identity:
 *                S column j updated and summed with q), kept in ov, summed
 *   1..lg        tree sum of o (red)
 *   lg+1         thread j: (o_j − mean)² into red2
 *   lg+2..2lg+1  tree sum of the squares
 *   2lg+2        thread j < dh: out = lind_retention_out()
 * Shared: red [T], red2 [T], ov [T] doubles. */
typedef struct kb_retention_args {
    const float *in;        /* [R × 4·hd]: q | k | v | g */
    const float *gamma;     /* [H] */
    const float *norm;      /* [2·hd]: group norm weight, then bias */
    float *out;             /* [R × hd] */
    unsigned char *pool;
    size_t stride, state_off;
    const int *slots, *runs;
    int H, dh;
    float eps;
} kb_retention_args;

static inline lind_launch kb_retention_launch(int nruns, int H, int dh) {
    int T = kb_linear_threads(dh);
    lind_launch L = { H, nruns, T, 3 * (size_t)T * sizeof(double) };
    return L;
}

LIND_HD static inline int kb_retention_step(const lind_thread *t, int phase, const kb_retention_args *a) {
    int T = t->bdim, lg = kb_log2(T), tx = t->tx, h = t->bx, per = 2 * lg + 3;
    int r0 = a->runs[t->by], n = a->runs[t->by + 1] - r0, sub = phase % per, b = r0 + phase / per;
    int dh = a->dh, hd = a->H * dh;
    double *red = (double *)t->smem, *red2 = red + T, *ov = red2 + T;
    const float *row = a->in + (size_t)b * 4 * hd;
    if (sub == 0) {
        double o = 0.0;
        if (tx < dh) {
            double *S = (double *)(KB_SLOT(a->pool, a->stride, a->slots, r0) + a->state_off) + (size_t)h * dh * dh;
            o = lind_lin_column(S, dh, tx, dh, row + hd + h * dh, row + h * dh, row[2 * hd + h * dh + tx],
                                (double)a->gamma[h]) * (1.0 / sqrt((double)dh));
        }
        ov[tx] = o;
        red[tx] = o;
        return 1;
    }
    if (sub <= lg) { kb_tree_step(red, tx, T, sub); return 1; }
    double mean = red[0] / dh;
    if (sub == lg + 1) {
        double e = tx < dh ? ov[tx] - mean : 0.0;
        red2[tx] = e * e;
        return 1;
    }
    if (sub <= 2 * lg + 1) { kb_tree_step(red2, tx, T, sub - lg - 1); return 1; }
    if (tx < dh) {
        int c = h * dh + tx;
        double rs = lind_gn_rstd(red2[0] / dh, a->eps);
        a->out[(size_t)b * hd + c] = lind_retention_out(ov[tx], mean, rs, a->norm[c], a->norm[hd + c], row[3 * hd + c]);
    }
    return b - r0 + 1 < n;   /* another row: barrier first */
}

/* ---- FAVOR+ log-features: one thread per (row, part·H + head) -------------
 * Row-wise (no slot state): thread u of row r calls lind_favor_head() for
 * part p = u / H (0 queries, 1 keys) and head u % H. */
typedef struct kb_favor_args {
    const float *in;        /* [R × ldi]: q at 0, k at H·dh */
    const float *omega;     /* [m × dh] */
    float *out;             /* [R × ldo]: q features at 0, k features at H·m */
    int ldi, ldo, H, dh, m;
    float ck;
} kb_favor_args;

#define KB_FAVOR_BLOCK 64

static inline lind_launch kb_favor_launch(int R, int H) {
    lind_launch L = { kb_ceil_div((size_t)2 * H, KB_FAVOR_BLOCK), R, KB_FAVOR_BLOCK, 0 };
    return L;
}

LIND_HD static inline int kb_favor(const lind_thread *t, int phase, const kb_favor_args *a) {
    (void)phase;
    int u = t->bx * t->bdim + t->tx, r = t->by;
    if (u < 2 * a->H)
        lind_favor_head(a->out + (size_t)r * a->ldo + (size_t)u * a->m, a->in + (size_t)r * a->ldi + (size_t)u * a->dh,
                        a->omega, a->dh, a->m, u < a->H, a->ck);
    return 0;
}

/* ---- cosFormer: one block per (head, run) ---------------------------------
 * kb_linear_step's decomposition over P = 2 or 3 (S, z) pairs: per row,
 *   0       thread i < dh: the pairs' features φq_p[i], φk_p[i] into shared
 *           memory, z_p[i] updated, Σ_p φq_p[i]·z_p[i] into red
 *   1..lg   tree sum (the denominator)
 *   lg+1    thread j < dh: Σ_p lind_lin_column(S_p, ...) (γ = 1), o_j
 * The position (int64 at pos_off) is only read here: the row's is pos plus
 * its index in the run; kb_pos_advance, launched after, stores pos + n.
 * Shared: red [T] doubles, φq, φk [P][T] floats. */
typedef struct kb_cosformer_args {
    const float *in;        /* [R × 3·hd]: q | k | v */
    float *out;             /* [R × hd] */
    unsigned char *pool;
    size_t stride, state_off, pos_off;
    const int *slots, *runs;
    int H, dh, M, periodic;
    float eps;
} kb_cosformer_args;

static inline lind_launch kb_cosformer_launch(int nruns, int H, int dh) {
    int T = kb_linear_threads(dh);
    lind_launch L = { H, nruns, T, (size_t)T * sizeof(double) + 2 * LIND_COS_PAIRS_MAX * (size_t)T * sizeof(float) };
    return L;
}

LIND_HD static inline int kb_cosformer_step(const lind_thread *t, int phase, const kb_cosformer_args *a) {
    int T = t->bdim, lg = kb_log2(T), tx = t->tx, h = t->bx, per = lg + 2;
    int r0 = a->runs[t->by], n = a->runs[t->by + 1] - r0, sub = phase % per, b = r0 + phase / per;
    int H = a->H, dh = a->dh, hd = H * dh, P = a->periodic ? 3 : 2;
    double *red = (double *)t->smem;
    float *phiq = (float *)(red + T), *phik = phiq + LIND_COS_PAIRS_MAX * T;
    unsigned char *slot = KB_SLOT(a->pool, a->stride, a->slots, r0);
    double *S = (double *)(slot + a->state_off), *Z = S + (size_t)P * hd * dh;
    const float *row = a->in + (size_t)b * 3 * hd;
    if (sub == 0) {
        double term = 0.0;
        if (tx < dh) {
            int64_t pos;
            memcpy(&pos, slot + a->pos_off, sizeof pos);
            double th = lind_cos_theta((long long)(int64_t)((uint64_t)pos + (uint64_t)(b - r0)), a->M, a->periodic);
            for (int p = 0; p < P; p++) {
                float mult = lind_cos_mult(th, p);
                float fq = lind_cos_feature(row[h * dh + tx], mult), fk = lind_cos_feature(row[hd + h * dh + tx], mult);
                phiq[p * T + tx] = fq;
                phik[p * T + tx] = fk;
                term += lind_lin_z(&Z[((size_t)p * H + h) * dh + tx], fk, fq, 1.0);
            }
        }
        red[tx] = term;
        return 1;
    }
    if (sub <= lg) { kb_tree_step(red, tx, T, sub); return 1; }
    if (tx < dh) {
        double num = 0.0;
        for (int p = 0; p < P; p++)
            num += lind_lin_column(S + ((size_t)p * H + h) * dh * dh, dh, tx, dh, phik + p * T, phiq + p * T,
                                   row[2 * hd + h * dh + tx], 1.0);
        a->out[(size_t)b * hd + h * dh + tx] = lind_lin_out(num, red[0], a->eps);
    }
    return b - r0 + 1 < n;   /* another row: barrier first */
}

/* After kb_cosformer_step the position advances by kb_pos_advance (above). */

/* ---- causal Linformer: one block per (head, run) ---------------------------
 * Block of T = kb_linear_threads(max(kp, dh)) threads (lg = log2 T); per row
 * of the run, 2·lg + 3 phases:
 *   0            thread p < kp: lind_linf_row() on rows p of K̄ and V̄ → s_p
 *   1..lg        tree max of s
 *   lg+1         thread p: e_p = lind_exp(s_p − max) into sp and red2
 *   lg+2..2lg+1  tree sum of e
 *   2lg+2        thread j < dh: o_j = Σ_p e_p V̄[p][j] / Σe (p order)
 * The position is only read; kb_pos_advance, launched after, stores it.
 * Shared: red, red2, sp [T] doubles. */
typedef struct kb_linformer_args {
    const float *in;        /* [R × 3·hd]: q | k | v */
    const float *ef;        /* [2 × N × kp] */
    float *out;             /* [R × hd] */
    unsigned char *pool;
    size_t stride, state_off, pos_off;
    const int *slots, *runs;
    int H, dh, kp, N;
} kb_linformer_args;

static inline lind_launch kb_linformer_launch(int nruns, int H, int dh, int kp) {
    int T = kb_linear_threads(kp > dh ? kp : dh);
    lind_launch L = { H, nruns, T, 3 * (size_t)T * sizeof(double) };
    return L;
}

LIND_HD static inline int kb_linformer_step(const lind_thread *t, int phase, const kb_linformer_args *a) {
    int T = t->bdim, lg = kb_log2(T), tx = t->tx, h = t->bx, per = 2 * lg + 3;
    int r0 = a->runs[t->by], n = a->runs[t->by + 1] - r0, sub = phase % per, b = r0 + phase / per;
    int dh = a->dh, hd = a->H * dh, kp = a->kp;
    double *red = (double *)t->smem, *red2 = red + T, *sp = red2 + T;
    unsigned char *slot = KB_SLOT(a->pool, a->stride, a->slots, r0);
    double *Kb = (double *)(slot + a->state_off) + (size_t)h * kp * dh, *Vb = Kb + (size_t)hd * kp;
    if (sub == 0) {
        double s = -1e308;
        if (tx < kp) {
            int64_t pos;
            memcpy(&pos, slot + a->pos_off, sizeof pos);
            size_t tpos = (size_t)(pos + (b - r0));
            const float *row = a->in + (size_t)b * 3 * hd + h * dh;
            s = lind_linf_row(Kb + (size_t)tx * dh, Vb + (size_t)tx * dh, row + hd, row + 2 * hd, row,
                              a->ef[tpos * kp + tx], a->ef[((size_t)a->N + tpos) * kp + tx], dh);
        }
        sp[tx] = s;
        red[tx] = s;
        return 1;
    }
    if (sub <= lg) {
        int half = T >> sub;
        if (tx < half && red[tx + half] > red[tx]) red[tx] = red[tx + half];
        return 1;
    }
    if (sub == lg + 1) {
        double e = tx < kp ? lind_exp(sp[tx] - red[0]) : 0.0;
        sp[tx] = e;
        red2[tx] = e;
        return 1;
    }
    if (sub <= 2 * lg + 1) { kb_tree_step(red2, tx, T, sub - lg - 1); return 1; }
    if (tx < dh) {
        double acc = 0.0;
        for (int p = 0; p < kp; p++) acc += sp[p] * Vb[(size_t)p * dh + tx];
        a->out[(size_t)b * hd + h * dh + tx] = (float)(acc / red2[0]);
    }
    return b - r0 + 1 < n;   /* another row: barrier first */
}

#endif
