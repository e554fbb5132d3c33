/* kernels/cuda/device.h — what the GPU backend needs from a device.
 *
 * The backend logic (kernels/cuda/grid_backend.c: buffers, the slot pool,
 * bounds checks, the row-major GEMM mapping, each op's launch geometry) is
 * written once against this small table. Two devices implement it:
 *   - the CUDA device (cuda_device.c, kernels.cu): cudaMalloc, cudaMemcpy on
 *     one stream, the kernels of kernel_bodies.h as __global__s, cuBLAS;
 *   - the harness (harness.c): host memory, the same kernel bodies run block
 *     by block and thread by thread, cblas_sgemm in column-major order.
 * So everything above the device layer is exercised by the tests even on a
 * machine without a GPU.
 *
 * Pointers called "device" are whatever alloc() returned; the backend does
 * arithmetic on them but never dereferences them. Calls return 0 or a
 * negative errno-style code; the device keeps a message for the last failure
 * (device->err). */
#ifndef LIND_KERNELS_CUDA_DEVICE_H
#define LIND_KERNELS_CUDA_DEVICE_H

#include <stddef.h>
#include "kernels/cuda/kernel_bodies.h"

typedef struct lind_device lind_device;

struct lind_device {
    char name[256];          /* e.g. "NVIDIA H100 80GB HBM3 (sm_90, 79 GiB)" */
    char err[256];           /* message of the last failure */
    int  dead;               /* set by a failure no later call recovers from
                                (a sticky CUDA error: the context is lost);
                                every later call fails */
    void (*free)(lind_device *dev);
    int  (*alloc)(lind_device *dev, size_t bytes, void **out);
    void (*release)(lind_device *dev, void *p);          /* NULL is a no-op */
    /* Ordered after every earlier call. h2d may return before the copy
     * lands, but src (ordinary pageable host memory, as from malloc, not
     * pinned) may be reused as soon as it returns; d2h returns once dst
     * holds the data (it waits for all earlier work). */
    int  (*h2d)(lind_device *dev, void *dst, const void *src, size_t bytes);
    int  (*d2h)(lind_device *dev, void *dst, const void *src, size_t bytes);
    int  (*d2d)(lind_device *dev, void *dst, const void *src, size_t bytes);
    int  (*zero)(lind_device *dev, void *dst, size_t bytes);
    /* Run kernel `kernel` (enum kb_kernel) over L with its kb_*_args
     * (args_bytes long: a recording keeps a copy). */
    int  (*launch)(lind_device *dev, int kernel, const lind_launch *L, const void *args, size_t args_bytes);
    /* Column-major SGEMM, BLAS/cuBLAS semantics:
     *   C[m × n] = α·op(A)·op(B) + β·C, op = transpose when trans* != 0;
     * β = 0 means C is not read. */
    int  (*sgemm)(lind_device *dev, int transa, int transb, int m, int n, int k,
                  float alpha, const float *A, int lda, const float *B, int ldb,
                  float beta, float *C, int ldc);
    /* The same with A and B in bf16 (bit patterns, see kb_bf16()) and C in
     * fp32; products and sums in fp32 (cublasGemmEx, CUBLAS_COMPUTE_32F). */
    int  (*gemm_bf16)(lind_device *dev, int transa, int transb, int m, int n, int k,
                      float alpha, const uint16_t *A, int lda, const uint16_t *B, int ldb,
                      float beta, float *C, int ldc);
    /* Recording (a CUDA graph; optional, NULL where the device has none).
     * Between record_begin and record_end the launches, GEMMs, d2d and zero
     * calls are recorded with their arguments as given, not run; h2d and d2h
     * fail (-EBUSY: a recording cannot hold a host copy). record_end(keep)
     * stops recording and, when keep and nothing failed, returns the
     * recording in *out (owned by the caller: graph_free) — else NULL.
     * graph_run enqueues a recording: the same work again, reading and
     * writing whatever the recorded pointers hold at the time. */
    int  (*record_begin)(lind_device *dev);
    int  (*record_end)(lind_device *dev, int keep, void **out);
    int  (*graph_run)(lind_device *dev, void *graph);
    void (*graph_free)(lind_device *dev, void *graph);   /* NULL is a no-op */
    /* Page-locked host memory (optional, NULL: the backend uses malloc). */
    void *(*host_alloc)(lind_device *dev, size_t bytes);
    void (*host_free)(lind_device *dev, void *p);
};

/* The CUDA device (only when built with LIND_HAVE_CUDA): device `ordinal`
 * (backend_opts.cuda_device; -1 = device 0). Fails with a clear message
 * when no device is usable or the ordinal is past the last device. */
int cuda_device_new(int ordinal, lind_device **out, char *err, size_t errlen);

#endif
