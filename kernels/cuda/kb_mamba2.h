/* kernels/cuda/kb_mamba2.h — kernel bodies: Mamba-2's state space step and
 * the RMS norm. Per-thread bodies and launch geometry (kernels/cuda/kb_common.h
 * says how bodies, phases and barriers work); listed in
 * kernels/cuda/kernel_bodies.h. */
#ifndef LIND_KERNELS_CUDA_KB_MAMBA2_H
#define LIND_KERNELS_CUDA_KB_MAMBA2_H

#include "kernels/cuda/kb_common.h"

/* ---- RMSNorm rows: one block per row --------------------------------------
 * Phase 0: each thread's share of Σx² (double) into shared memory; phase 1:
 * every thread sums the shares in the same order, then writes its columns
 * as lind_rms_apply(). y may be x: a column is read before it is written and
 * only by its own thread. */
typedef struct kb_rmsnorm_args {
    const float *x;
    float *y;
    const float *w;
    int d;
    float eps;
} kb_rmsnorm_args;

static inline lind_launch kb_rmsnorm_launch(int B, int d)
{
    int T = 32;
    while (T * 16 < d && T < KB_EW_BLOCK) T *= 2;
    lind_launch L = { B, 1, T, (size_t)T * sizeof(double) };
    return L;
}

LIND_HD static inline int kb_rmsnorm(const lind_thread *t, int phase, const kb_rmsnorm_args *a)
{
    int T = t->bdim, tx = t->tx, d = a->d;
    double *sq = (double *)t->smem;
    const float *x = a->x + (size_t)t->bx * d;
    if (phase == 0) {
        double s = 0.0;
        for (int c = tx; c < d; c += T) s += (double)x[c] * (double)x[c];
        sq[tx] = s;
        return 1;
    }
    double s = 0.0;
    for (int i = 0; i < T; i++) s += sq[i];
    double rs = lind_rms_rscale(s, d, a->eps);
    float *y = a->y + (size_t)t->bx * d;
    for (int c = tx; c < d; c += T) y[c] = lind_rms_apply((double)x[c], rs, a->w[c]);
    return 0;
}

/* ---- Mamba-2 step: one thread per (run, channel c = h·P + p) --------------
 * The thread owns row p of head h's state S[h] (N floats in the slot) and
 * walks the run's rows in order: x_p, the head's dt and its group's B and C
 * from the row (each thread of the head recomputes the same dt, B, C: no
 * barrier is needed), then the update and y_p = Σ_n S[p][n]·C_n, the D skip
 * and the gate — the arithmetic of kernels/cpu/ops_mamba2.c in double, each
 * state element rounded once to float. out ≠ in. */
typedef struct kb_mamba2_args {
    const float *in;        /* row b at in + b·ldi: conv outputs [CD], z [I], dt [H] */
    const float *par;       /* conv bias [CD], dt_bias [H], A [H], D [H] */
    float *out;             /* [B × I] */
    unsigned char *pool;
    size_t stride, state_off;
    const int *slots, *runs;
    int ldi, H, P, N, G;
    float lo, hi;
} kb_mamba2_args;

static inline lind_launch kb_mamba2_launch(int nruns, int I)
{
    lind_launch L = { kb_ceil_div((size_t)I, KB_EW_BLOCK), nruns, KB_EW_BLOCK, 0 };
    return L;
}

LIND_HD static inline double kb_silu_d(double x) { return x / (1.0 + lind_exp(-x)); }

LIND_HD static inline int kb_mamba2_step(const lind_thread *t, int phase, const kb_mamba2_args *a)
{
    (void)phase;
    int H = a->H, P = a->P, N = a->N, G = a->G, I = H * P, GN = G * N, CD = I + 2 * GN;
    int c = t->bx * t->bdim + t->tx, r0 = a->runs[t->by], r1 = a->runs[t->by + 1];
    if (c >= I) return 0;
    int h = c / P, p = c % P, g = h / (H / G);
    const float *cb = a->par, *dtb = a->par + CD, *A = dtb + H, *D = A + H;
    float *S = (float *)(KB_SLOT(a->pool, a->stride, a->slots, r0) + a->state_off) + ((size_t)h * P + p) * N;
    for (int b = r0; b < r1; b++) {
        const float *row = a->in + (size_t)b * a->ldi;
        double x = kb_silu_d((double)row[c] + (double)cb[c]);
        double dt = lind_mamba2_dt(row[CD + I + h], dtb[h], a->lo, a->hi);
        double dA = lind_exp(dt * (double)A[h]), dtx = dt * x, y = 0.0;
        for (int n = 0; n < N; n++) {
            int cB = I + g * N + n, cC = I + GN + g * N + n;
            double Bn = kb_silu_d((double)row[cB] + (double)cb[cB]);
            double Cn = kb_silu_d((double)row[cC] + (double)cb[cC]);
            double s = lind_mamba2_s((double)S[n], dA, dtx, Bn);
            S[n] = (float)s;
            y += s * Cn;
        }
        y += (double)D[h] * x;
        a->out[(size_t)b * I + c] = (float)(y * kb_silu_d((double)row[CD + c]));
    }
    return 0;
}

#endif
