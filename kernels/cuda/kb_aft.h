/* kernels/cuda/kb_aft.h — kernel bodies: AFT: the full step and AFT-local / AFT-conv.
 * Per-thread bodies and launch geometry (kernels/cuda/kb_common.h says how
 * bodies, phases and barriers work); listed in kernels/cuda/kernel_bodies.h. */
#ifndef LIND_KERNELS_CUDA_KB_AFT_H
#define LIND_KERNELS_CUDA_KB_AFT_H

#include "kernels/cuda/kb_common.h"

/* ---- AFT step: one thread per (run, channel) -----------------------------
 * State: num, den, max as double[d] each at byte state_off of the slot, or
 * float[d] each when f32, held in registers across the run's rows (a value
 * kept is the value stored: a float state is rounded after every row, as
 * the CPU backend's is). */
typedef struct kb_aft_args {
    const float *in;        /* [R × 3·d]: r | k | v */
    const float *w, *u;     /* d floats each, or NULL for 0 */
    float *out;             /* [R × d] */
    unsigned char *pool;
    size_t stride, state_off;
    const int *slots, *runs;
    int d, f32;
} kb_aft_args;

static inline lind_launch kb_aft_launch(int nruns, int d)
{
    lind_launch L = { kb_ceil_div((size_t)d, KB_EW_BLOCK), nruns, KB_EW_BLOCK, 0 };
    return L;
}

LIND_HD static inline int kb_aft_step(const lind_thread *t, int phase, const kb_aft_args *a)
{
    (void)phase;
    int c = t->bx * t->bdim + t->tx, r0 = a->runs[t->by], r1 = a->runs[t->by + 1], d = a->d;
    if (c >= d) return 0;
    unsigned char *slot = KB_SLOT(a->pool, a->stride, a->slots, r0) + a->state_off;
    float w = a->w ? a->w[c] : 0.0f, u = a->u ? a->u[c] : 0.0f;
    if (a->f32) {
        float *st = (float *)slot;
        float num = st[c], den = st[d + c], mx = st[2 * d + c];
        for (int b = r0; b < r1; b++) {
            const float *row = a->in + (size_t)b * 3 * d;
            float wkv = lind_aft_channel_f32(&num, &den, &mx, row[d + c], row[2 * d + c], w, u);
            a->out[(size_t)b * d + c] = lind_sigmoid(row[c]) * wkv;
        }
        st[c] = num;
        st[d + c] = den;
        st[2 * d + c] = mx;
        return 0;
    }
    double *st = (double *)slot;
    double num = st[c], den = st[d + c], mx = st[2 * d + c];
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

static inline lind_launch kb_aftw_launch(int nruns, int d)
{
    lind_launch L = { kb_ceil_div((size_t)d, KB_EW_BLOCK), nruns, KB_EW_BLOCK, 0 };
    return L;
}

LIND_HD static inline int kb_aftw_step(const lind_thread *t, int phase, const kb_aftw_args *a)
{
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

#endif
