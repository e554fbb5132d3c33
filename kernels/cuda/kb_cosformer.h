/* kernels/cuda/kb_cosformer.h — kernel bodies: cosFormer.
 * Per-thread bodies and launch geometry (kernels/cuda/kb_common.h says how
 * bodies, phases and barriers work); listed in kernels/cuda/kernel_bodies.h. */
#ifndef LIND_KERNELS_CUDA_KB_COSFORMER_H
#define LIND_KERNELS_CUDA_KB_COSFORMER_H

#include "kernels/cuda/kb_common.h"

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

static inline lind_launch kb_cosformer_launch(int nruns, int H, int dh)
{
    int T = kb_linear_threads(dh);
    lind_launch L = { H, nruns, T, (size_t)T * sizeof(double) + 2 * LIND_COS_PAIRS_MAX * (size_t)T * sizeof(float) };
    return L;
}

LIND_HD static inline int kb_cosformer_step(const lind_thread *t, int phase, const kb_cosformer_args *a)
{
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

#endif
