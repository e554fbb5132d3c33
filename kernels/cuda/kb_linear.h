/* kernels/cuda/kb_linear.h — kernel bodies: the linear attention step.
 * Per-thread bodies and launch geometry (kernels/cuda/kb_common.h says how
 * bodies, phases and barriers work); listed in kernels/cuda/kernel_bodies.h. */
#ifndef LIND_KERNELS_CUDA_KB_LINEAR_H
#define LIND_KERNELS_CUDA_KB_LINEAR_H

#include "kernels/cuda/kb_common.h"

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

static inline lind_launch kb_linear_launch(int nruns, int H, int dh)
{
    int T = kb_linear_threads(dh);
    lind_launch L = { H, nruns, T, (size_t)T * sizeof(double) + 2 * (size_t)T * sizeof(float) };
    return L;
}

LIND_HD static inline int kb_linear_step(const lind_thread *t, int phase, const kb_linear_args *a)
{
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

#endif
