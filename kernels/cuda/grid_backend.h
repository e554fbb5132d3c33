/* kernels/cuda/grid_backend.h — the backend interface (kernels/backend.h)
 * implemented over a lind_device (device.h): device buffers, a device pool
 * of session-state slots, the batch's rows and runs, cuBLAS-style GEMMs over
 * the batch and the kernels of kernel_bodies.h. The CUDA backend is this over the CUDA device; the
 * test harness is this over the host-emulated device. */
#ifndef LIND_KERNELS_CUDA_GRID_BACKEND_H
#define LIND_KERNELS_CUDA_GRID_BACKEND_H

#include <stddef.h>
#include "kernels/backend.h"
#include "kernels/cuda/device.h"

/* A backend named `name` ("cuda", "harness") over `dev`, which it takes
 * ownership of (freed by backend_free, or here on failure). opts (NULL =
 * defaults): cuda_weights "fp32"|"bf16" sets the GEMM precision (below;
 * NULL or empty = fp32); any other value fails. */
int grid_backend_new(lind_device *dev, const char *name, const backend_opts *opts, backend **out, char *err,
                     size_t errlen);

/* Message of the last failed op (empty if none) — the interface's ops only
 * return codes; this says what the device reported. */
const char *grid_backend_error(const backend *be);

/* Precision of the GEMMs: "fp32" (the default: cublasSgemm, results track
 * the CPU backend to rounding) or "bf16": each weight matrix gets a bf16
 * copy on its first use (kept until the buffer is uploaded to again), the
 * activations are rounded to bf16 before each GEMM, and cuBLAS multiplies
 * them with fp32 accumulation — half the weight bytes per step, about 3
 * significant digits in the products. Everything else (norms, mixers,
 * states) stays fp32/fp64. A W given to matmul must be a weight buffer,
 * written only by buf_upload; one made by weight_new while in bf16 mode
 * keeps only its bf16 copy (it cannot be read back, nor used after a switch
 * back to fp32). A half weight (weight_new_half) works in both modes: fp32
 * GEMMs widen it exactly first, bf16 GEMMs take a bf16 weight as it is and
 * an fp16 one rounded to bf16 once. 0, or -EINVAL naming the bad value. */
int grid_backend_set_weights(backend *be, const char *precision, char *err, size_t errlen);

/* Recorded steps so far (graph_begin): how many step shapes were recorded,
 * and how many steps ran as a replay of a recording (the recording's first
 * run included). For tests and benchmarks. */
void grid_backend_graph_stats(const backend *be, long *recorded, long *replayed);

#endif
