/* kernels/cuda/cuda_launch.h — the C entry into kernels.cu: launch one of
 * the kernels of kernel_bodies.h on a CUDA stream. */
#ifndef LIND_KERNELS_CUDA_CUDA_LAUNCH_H
#define LIND_KERNELS_CUDA_CUDA_LAUNCH_H

#include "kernels/cuda/kernel_bodies.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Enqueue kernel `kernel` (enum kb_kernel) over L with its kb_*_args on
 * `stream` (a cudaStream_t). Returns the cudaError_t of the launch (0 =
 * cudaSuccess); faults inside the kernel surface at a later sync. */
int lind_cuda_launch(int kernel, const lind_launch *L, const void *args, void *stream);

/* Check that this binary holds code the current device can run: launches a
 * one-thread kernel and waits. Returns its cudaError_t. */
int lind_cuda_probe(void *stream);

#ifdef __cplusplus
}
#endif
#endif
