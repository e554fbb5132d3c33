/* kernels/cuda/kb_delta.h — kernel bodies: the short convolution and the gated delta rule.
 * Per-thread bodies and launch geometry (kernels/cuda/kb_common.h says how
 * bodies, phases and barriers work); listed in kernels/cuda/kernel_bodies.h. */
#ifndef LIND_KERNELS_CUDA_KB_DELTA_H
#define LIND_KERNELS_CUDA_KB_DELTA_H

#include "kernels/cuda/kb_common.h"

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

static inline lind_launch kb_short_conv_launch(int nruns, int n)
{
    lind_launch L = { kb_ceil_div((size_t)n, KB_EW_BLOCK), nruns, KB_EW_BLOCK, 0 };
    return L;
}

/* The ring head index of a slot, read modulo K − 1 as the CPU backend does
 * (any bit pattern is a valid state). */
LIND_HD static inline int kb_conv_head(const unsigned char *slot, size_t idx_off, int K)
{
    int32_t idx;
    memcpy(&idx, slot + idx_off, sizeof idx);
    return (int)((uint32_t)idx % (uint32_t)(K - 1));
}

LIND_HD static inline int kb_short_conv(const lind_thread *t, int phase, const kb_short_conv_args *a)
{
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

static inline lind_launch kb_conv_advance_launch(int nruns)
{
    lind_launch L = { kb_ceil_div((size_t)nruns, KB_EW_BLOCK), 1, KB_EW_BLOCK, 0 };
    return L;
}

LIND_HD static inline int kb_conv_advance(const lind_thread *t, int phase, const kb_conv_advance_args *a)
{
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

static inline lind_launch kb_delta_launch(int nruns, int H, int dh)
{
    int T = kb_linear_threads(dh);
    lind_launch L = { H, nruns, T, 4 * (size_t)T * sizeof(double) };
    return L;
}

LIND_HD static inline int kb_delta_step(const lind_thread *t, int phase, const kb_delta_args *a)
{
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

#endif
