/* kernels/cuda/kb_position.h — kernel bodies: the int64 position advance shared by the positional kinds.
 * Per-thread bodies and launch geometry (kernels/cuda/kb_common.h says how
 * bodies, phases and barriers work); listed in kernels/cuda/kernel_bodies.h. */
#ifndef LIND_KERNELS_CUDA_KB_POSITION_H
#define LIND_KERNELS_CUDA_KB_POSITION_H

#include "kernels/cuda/kb_common.h"

/* After kb_window_step / kb_aftw_step: each run's slot gets its int64
 * position advanced by the run's length. One thread per run. */
typedef struct kb_pos_advance_args {
    unsigned char *pool;
    size_t stride, pos_off;
    const int *slots, *runs;
    int nruns;
} kb_pos_advance_args;

static inline lind_launch kb_pos_advance_launch(int nruns)
{
    lind_launch L = { kb_ceil_div((size_t)nruns, KB_EW_BLOCK), 1, KB_EW_BLOCK, 0 };
    return L;
}

LIND_HD static inline int kb_pos_advance(const lind_thread *t, int phase, const kb_pos_advance_args *a)
{
    (void)phase;
    int k = t->bx * t->bdim + t->tx;
    if (k >= a->nruns) return 0;
    int r0 = a->runs[k];
    unsigned char *slot = KB_SLOT(a->pool, a->stride, a->slots, r0);
    unsigned long long p = kb_slot_pos(slot, a->pos_off) + (unsigned long long)(a->runs[k + 1] - r0);
    memcpy(slot + a->pos_off, &p, sizeof p);
    return 0;
}

#endif
