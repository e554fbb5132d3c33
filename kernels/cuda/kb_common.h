/* kernels/cuda/kb_common.h — what every kernel body of the CUDA backend shares
 * (kernels/cuda/kernel_bodies.h lists the kernels; kb_<family>.h hold them).
 *
 * The CUDA backend's kernels are written once as
 * per-thread bodies that compile both as CUDA device code (kernels.cu wraps
 * each in a __global__) and as plain C (harness.c runs them on the host over
 * the same grid, so the kernels are tested without a GPU).
 *
 * A body is one thread's work between barriers. It is called with a phase
 * number 0, 1, 2, ... and returns nonzero when another phase follows: the
 * runner then waits for every thread of the block (__syncthreads() on the
 * device; on the host, the harness runs all threads of the block through a
 * phase before any starts the next). All threads of a block return the same
 * value for a given phase. Nothing a thread computes survives a barrier
 * except what it wrote to memory — shared memory or global — which is true
 * on both runners.
 *
 * The launch geometry of each kernel is also defined here (kb_*_launch), so
 * both runners use the same grid, block and shared-memory size.
 *
 * Per-element math comes from kernels/mixer_math.h, the one definition the
 * CPU backend uses too. This header is C and C++ (nvcc) at once: explicit
 * casts from void *, no restrict, no compound literals. */
#ifndef LIND_KERNELS_CUDA_KB_COMMON_H
#define LIND_KERNELS_CUDA_KB_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "kernels/mixer_math.h"

/* One thread's coordinates: blockIdx.x/y, threadIdx.x, blockDim.x and the
 * block's dynamic shared memory (16-byte aligned). */
typedef struct lind_thread {
    int bx, by, tx, bdim;
    void *smem;
} lind_thread;

/* A launch: grid gx × gy blocks of `block` threads, `smem` bytes of dynamic
 * shared memory per block. */
typedef struct lind_launch {
    int gx, gy, block;
    size_t smem;
} lind_launch;

/* Limits every launch respects (those of sm_80 and sm_90 without opting in
 * to large shared memory), checked by the harness so a geometry that passes
 * the tests also launches on a device. */
#define KB_MAX_BLOCK   1024
#define KB_MAX_GRID_Y  65535
#define KB_MAX_SMEM    (48 * 1024)
#define KB_EW_BLOCK    256      /* block size of the element-wise kernels */


/* The per-session state of row b of the batch: slot slots[b] of the pool. */
#define KB_SLOT(pool, stride, slots, b) ((pool) + (size_t)(slots)[b] * (stride))

/* Runs (kernels/backend.h): the batch's rows grouped by session, run k being
 * rows [runs[k], runs[k+1]) of one slot, that session's next tokens in order.
 * The kernels that touch slot state have one block row (blockIdx.y) per run
 * and walk its rows in order, so a run of T rows computes exactly what T
 * one-row steps would, bit for bit; runs are independent of each other. */

LIND_HD static inline int kb_log2(int n)
{
    int l = 0;
    while ((1 << l) < n) l++;
    return l;
}

/* One step of a shared-memory tree sum over bdim (a power of two) doubles:
 * step s ≥ 1 folds the upper half of the remaining 2·(bdim >> s) values onto
 * the lower half. After steps 1..log2(bdim), red[0] holds the total. */
LIND_HD static inline void kb_tree_step(double *red, int tx, int bdim, int s)
{
    int half = bdim >> s;
    if (tx < half) red[tx] += red[tx + half];
}

/* A slot's int64 position (the positional kinds: window, AFT-local/conv,
 * cosFormer, Linformer), read without assuming its alignment. */
LIND_HD static inline unsigned long long kb_slot_pos(const unsigned char *slot, size_t pos_off)
{
    unsigned long long p;
    memcpy(&p, slot + pos_off, sizeof p);
    return p;
}

/* Threads of a per-(head, run) block: a power of two ≥ max(32, d_head)
 * (the linear, delta, retention, cosFormer and Linformer steps). */
static inline int kb_linear_threads(int dh)
{
    int T = 32;
    while (T < dh) T *= 2;
    return T;
}

static inline int kb_ceil_div(size_t n, int d) { return (int)((n + (size_t)d - 1) / (size_t)d); }

#endif
