/* kernels/cuda/kb_retention.h — kernel bodies: retention (RetNet).
 * Per-thread bodies and launch geometry (kernels/cuda/kb_common.h says how
 * bodies, phases and barriers work); listed in kernels/cuda/kernel_bodies.h. */
#ifndef LIND_KERNELS_CUDA_KB_RETENTION_H
#define LIND_KERNELS_CUDA_KB_RETENTION_H

#include "kernels/cuda/kb_common.h"

/* ---- retention (RetNet): one block per (head, run) ------------------------
 * Block of T = kb_linear_threads(dh) threads (lg = log2 T); the run's rows
 * one after the other, each in 2·lg + 3 phases with a barrier between every
 * two (also between rows). Per row of head h:
 *   0            thread j < dh: o_j = dh^−½ · lind_lin_column() (φ = identity:
 *                S column j updated and summed with q; lind_lin_column_f32()
 *                on a float S, f32), kept in ov, summed
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
    int f32;                /* S is float (a decaying state), else double */
} kb_retention_args;

static inline lind_launch kb_retention_launch(int nruns, int H, int dh)
{
    int T = kb_linear_threads(dh);
    lind_launch L = { H, nruns, T, 3 * (size_t)T * sizeof(double) };
    return L;
}

LIND_HD static inline int kb_retention_step(const lind_thread *t, int phase, const kb_retention_args *a)
{
    int T = t->bdim, lg = kb_log2(T), tx = t->tx, h = t->bx, per = 2 * lg + 3;
    int r0 = a->runs[t->by], n = a->runs[t->by + 1] - r0, sub = phase % per, b = r0 + phase / per;
    int dh = a->dh, hd = a->H * dh;
    double *red = (double *)t->smem, *red2 = red + T, *ov = red2 + T;
    const float *row = a->in + (size_t)b * 4 * hd;
    if (sub == 0) {
        double o = 0.0;
        if (tx < dh) {
            unsigned char *st = KB_SLOT(a->pool, a->stride, a->slots, r0) + a->state_off;
            const float *k = row + hd + h * dh, *q = row + h * dh;
            float v = row[2 * hd + h * dh + tx];
            double g = (double)a->gamma[h];
            o = (a->f32 ? lind_lin_column_f32((float *)st + (size_t)h * dh * dh, dh, tx, dh, k, q, v, g)
                        : lind_lin_column((double *)st + (size_t)h * dh * dh, dh, tx, dh, k, q, v, g)) *
                (1.0 / sqrt((double)dh));
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

#endif
