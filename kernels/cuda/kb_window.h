/* kernels/cuda/kb_window.h — kernel bodies: sliding-window attention.
 * Per-thread bodies and launch geometry (kernels/cuda/kb_common.h says how
 * bodies, phases and barriers work); listed in kernels/cuda/kernel_bodies.h. */
#ifndef LIND_KERNELS_CUDA_KB_WINDOW_H
#define LIND_KERNELS_CUDA_KB_WINDOW_H

#include "kernels/cuda/kb_common.h"

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

static inline lind_launch kb_window_launch(int nruns, int H)
{
    lind_launch L = { kb_ceil_div((size_t)H, 32), nruns, 32, 0 };
    return L;
}

LIND_HD static inline int kb_window_step(const lind_thread *t, int phase, const kb_window_args *a)
{
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

#endif
