/* kernels/cuda/harness.h — the CUDA kernels run on the host, for tests.
 *
 * A lind_device whose memory is host memory and whose launch() runs the
 * per-thread bodies of kernel_bodies.h over the launch's grid: block by
 * block; within a block, phase by phase, every thread through a phase before
 * any thread starts the next (what __syncthreads() guarantees), with the
 * block's shared memory a fresh buffer filled with NaN bytes (so a read of
 * shared memory nobody wrote shows up as NaN). Its GEMMs are cblas_sgemm in
 * column-major order, the same call shape as cublasSgemm (bf16 operands are
 * widened to fp32 first, which is exact), one output column (batch row) at
 * a time so they are batch-invariant. New buffers are NaN-filled too
 * (device memory is uninitialized).
 *
 * The thread order inside a phase is selectable: a kernel whose result
 * depends on it has a race between threads of one phase. The harness also
 * refuses what a GPU would refuse or deadlock on: a launch beyond the
 * device limits, or threads of one block disagreeing on whether a barrier
 * follows. */
#ifndef LIND_KERNELS_CUDA_HARNESS_H
#define LIND_KERNELS_CUDA_HARNESS_H

#include <stddef.h>
#include "kernels/backend.h"
#include "kernels/cuda/device.h"

enum harness_order {
    HARNESS_FORWARD,     /* threads 0, 1, ..., blocks in grid order */
    HARNESS_REVERSE,     /* threads and blocks last to first */
};

int harness_device_new(int order, lind_device **out, char *err, size_t errlen);
/* Environment LIND_HARNESS_FAULT=N (N ≥ 1) makes the device's N-th kernel
 * launch fail as a sticky CUDA error would (cudaErrorIllegalAddress): the
 * device is dead from then on (lind_device.dead) and every later call fails
 * with that message, so the backend's poisoned() and last_error() and the
 * daemon's handling of a lost device are tested without a GPU. */

/* The GPU backend (grid_backend.h) over the harness device, named
 * "harness"; opts (NULL = defaults) as grid_backend_new takes them. */
int backend_harness_new(int order, const backend_opts *opts, backend **out, char *err, size_t errlen);

/* Run one kernel over L on the host (what the harness device's launch does).
 * Returns 0, or -EINVAL with err filled for a bad launch or divergent
 * barrier. */
int harness_launch(int order, int kernel, const lind_launch *L, const void *args, char *err, size_t errlen);

#endif
