/* kernels/cuda/kb_favor.h — kernel bodies: FAVOR+ log-features (the performer).
 * Per-thread bodies and launch geometry (kernels/cuda/kb_common.h says how
 * bodies, phases and barriers work); listed in kernels/cuda/kernel_bodies.h. */
#ifndef LIND_KERNELS_CUDA_KB_FAVOR_H
#define LIND_KERNELS_CUDA_KB_FAVOR_H

#include "kernels/cuda/kb_common.h"

/* ---- FAVOR+ log-features: one thread per (row, part·H + head) -------------
 * Row-wise (no slot state): thread u of row r calls lind_favor_head() for
 * part p = u / H (0 queries, 1 keys) and head u % H. */
typedef struct kb_favor_args {
    const float *in;        /* [R × ldi]: q at 0, k at H·dh */
    const float *omega;     /* [m × dh] */
    float *out;             /* [R × ldo]: q features at 0, k features at H·m */
    int ldi, ldo, H, dh, m;
    float ck;
} kb_favor_args;

#define KB_FAVOR_BLOCK 64

static inline lind_launch kb_favor_launch(int R, int H)
{
    lind_launch L = { kb_ceil_div((size_t)2 * H, KB_FAVOR_BLOCK), R, KB_FAVOR_BLOCK, 0 };
    return L;
}

LIND_HD static inline int kb_favor(const lind_thread *t, int phase, const kb_favor_args *a)
{
    (void)phase;
    int u = t->bx * t->bdim + t->tx, r = t->by;
    if (u < 2 * a->H)
        lind_favor_head(a->out + (size_t)r * a->ldo + (size_t)u * a->m, a->in + (size_t)r * a->ldi + (size_t)u * a->dh,
                        a->omega, a->dh, a->m, u < a->H, a->ck);
    return 0;
}

#endif
