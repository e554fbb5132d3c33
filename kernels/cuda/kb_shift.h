/* kernels/cuda/kb_shift.h — kernel bodies: token shift.
 * Per-thread bodies and launch geometry (kernels/cuda/kb_common.h says how
 * bodies, phases and barriers work); listed in kernels/cuda/kernel_bodies.h. */
#ifndef LIND_KERNELS_CUDA_KB_SHIFT_H
#define LIND_KERNELS_CUDA_KB_SHIFT_H

#include "kernels/cuda/kb_common.h"

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

static inline lind_launch kb_shift_mix_launch(int nruns, int d)
{
    lind_launch L = { kb_ceil_div((size_t)d, KB_EW_BLOCK), nruns, KB_EW_BLOCK, 0 };
    return L;
}

LIND_HD static inline int kb_shift_mix(const lind_thread *t, int phase, const kb_shift_mix_args *a)
{
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

#endif
