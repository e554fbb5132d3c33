/* kernels/cuda/kb_linformer.h — kernel bodies: causal Linformer.
 * Per-thread bodies and launch geometry (kernels/cuda/kb_common.h says how
 * bodies, phases and barriers work); listed in kernels/cuda/kernel_bodies.h. */
#ifndef LIND_KERNELS_CUDA_KB_LINFORMER_H
#define LIND_KERNELS_CUDA_KB_LINFORMER_H

#include "kernels/cuda/kb_common.h"

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

static inline lind_launch kb_linformer_launch(int nruns, int H, int dh, int kp)
{
    int T = kb_linear_threads(kp > dh ? kp : dh);
    lind_launch L = { H, nruns, T, 3 * (size_t)T * sizeof(double) };
    return L;
}

LIND_HD static inline int kb_linformer_step(const lind_thread *t, int phase, const kb_linformer_args *a)
{
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
