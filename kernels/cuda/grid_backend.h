/* kernels/cuda/grid_backend.h — the backend interface (kernels/backend.h)
 * implemented over a lind_device (device.h): device buffers, a device pool
 * of session-state slots, cuBLAS-style GEMMs over the batch and the kernels
 * of kernel_bodies.h. The CUDA backend is this over the CUDA device; the
 * test harness is this over the host-emulated device. */
#ifndef LIND_KERNELS_CUDA_GRID_BACKEND_H
#define LIND_KERNELS_CUDA_GRID_BACKEND_H

#include <stddef.h>
#include "kernels/backend.h"
#include "kernels/cuda/device.h"

/* A backend named `name` ("cuda", "harness") over `dev`, which it takes
 * ownership of (freed by backend_free, or here on failure). */
int grid_backend_new(lind_device *dev, const char *name, backend **out, char *err, size_t errlen);

/* Message of the last failed op (empty if none) — the interface's ops only
 * return codes; this says what the device reported. */
const char *grid_backend_error(const backend *be);

#endif
