/* kernels/cuda/cuda_device.c — the CUDA device (device.h) and the CUDA
 * backend's constructor, backend_cuda_new().
 *
 * Everything runs in order on one non-blocking stream: copies, the kernels
 * of kernels.cu, and cuBLAS (bound to the same stream). Only d2h waits, so a
 * step's launches queue up behind each other and the host blocks once, when
 * it downloads the logits or reads a slot back. Built only when nvcc is
 * found (LIND_HAVE_CUDA); links cudart and cublas. */
#include "kernels/cuda/device.h"
#include "kernels/cuda/grid_backend.h"
#include "kernels/cuda/cuda_launch.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct cdev {
    lind_device    dev;     /* first */
    int            ordinal;
    cudaStream_t   stream;
    cublasHandle_t blas;
    void          *blas_ws;     /* cuBLAS's workspace: fixed, so a recorded GEMM never allocates */
    int            recording;   /* inside record_begin .. record_end */
    int            rec_failed;  /* a call failed while recording: the recording is void */
} cdev;

/* cuBLAS's recommended workspace on Hopper (cuBLAS docs, cublasSetWorkspace). */
#define BLAS_WORKSPACE (32u << 20)

static cdev *C(lind_device *d) { return (cdev *)d; }

/* Errors after which the context is unusable: every later call returns them
 * again (CUDA Runtime API, cudaError_t), so the device is dead. */
static int sticky(cudaError_t e)
{
    switch (e) {
    case cudaErrorIllegalAddress: case cudaErrorLaunchFailure: case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction: case cudaErrorMisalignedAddress: case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc: case cudaErrorAssert: case cudaErrorLaunchTimeout: case cudaErrorECCUncorrectable:
        return 1;
    default:
        return 0;
    }
}

static int cuda_rc(lind_device *d, cudaError_t e, const char *what)
{
    if (e == cudaSuccess) return 0;
    if (C(d)->recording) C(d)->rec_failed = 1;
    if (sticky(e)) d->dead = 1;
    snprintf(d->err, sizeof d->err, "%s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
    return e == cudaErrorMemoryAllocation ? -ENOMEM : -EIO;
}

static void c_free(lind_device *d)
{
    cdev *c = C(d);
    if (c->blas) cublasDestroy(c->blas);
    if (c->blas_ws) cudaFree(c->blas_ws);
    if (c->stream) cudaStreamDestroy(c->stream);
    free(c);
}

static int c_alloc(lind_device *d, size_t bytes, void **out)
{
    *out = NULL;
    return cuda_rc(d, cudaMalloc(out, bytes ? bytes : 1), "cudaMalloc");
}

/* Wait for the stream first: work queued on it may still use p. */
static void c_release(lind_device *d, void *p)
{
    if (!p) return;
    cudaStreamSynchronize(C(d)->stream);
    cudaFree(p);
}

/* From pageable host memory the copy is staged before the call returns, so
 * src may be reused at once (the contract of device.h). */
static int no_host_copy(lind_device *d, const char *what)
{
    C(d)->rec_failed = 1;
    snprintf(d->err, sizeof d->err, "%s: not allowed while recording a graph", what);
    return -EBUSY;
}

static int c_h2d(lind_device *d, void *dst, const void *src, size_t bytes)
{
    if (C(d)->recording) return no_host_copy(d, "copy to device");
    return cuda_rc(d, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, C(d)->stream), "copy to device");
}

static int c_d2h(lind_device *d, void *dst, const void *src, size_t bytes)
{
    if (C(d)->recording) return no_host_copy(d, "copy from device");
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, C(d)->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(C(d)->stream);
    return cuda_rc(d, e, "copy from device");
}

static int c_d2d(lind_device *d, void *dst, const void *src, size_t bytes)
{
    return cuda_rc(d, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, C(d)->stream), "device copy");
}

static int c_zero(lind_device *d, void *dst, size_t bytes)
{
    return cuda_rc(d, cudaMemsetAsync(dst, 0, bytes, C(d)->stream), "cudaMemsetAsync");
}

static int c_launch(lind_device *d, int kernel, const lind_launch *L, const void *args, size_t args_bytes)
{
    (void)args_bytes;   /* a captured launch keeps its own copy of the parameters */
    return cuda_rc(d, (cudaError_t)lind_cuda_launch(kernel, L, args, C(d)->stream), "kernel launch");
}

static int c_sgemm(lind_device *d, int transa, int transb, int m, int n, int k, float alpha,
                   const float *A, int lda, const float *B, int ldb, float beta, float *Cm, int ldc)
{
    cublasStatus_t s = cublasSgemm(C(d)->blas, transa ? CUBLAS_OP_T : CUBLAS_OP_N,
                                   transb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k, &alpha, A, lda, B, ldb,
                                   &beta, Cm, ldc);
    if (s == CUBLAS_STATUS_SUCCESS) return 0;
    if (sticky(cudaPeekAtLastError())) d->dead = 1;
    if (C(d)->recording) C(d)->rec_failed = 1;
    snprintf(d->err, sizeof d->err, "cublasSgemm: %s", cublasGetStatusString(s));
    return -EIO;
}

static int c_gemm_bf16(lind_device *d, int transa, int transb, int m, int n, int k, float alpha,
                       const uint16_t *A, int lda, const uint16_t *B, int ldb, float beta, float *Cm, int ldc)
{
    cublasStatus_t s = cublasGemmEx(C(d)->blas, transa ? CUBLAS_OP_T : CUBLAS_OP_N,
                                    transb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k, &alpha, A, CUDA_R_16BF, lda,
                                    B, CUDA_R_16BF, ldb, &beta, Cm, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F,
                                    CUBLAS_GEMM_DEFAULT);
    if (s == CUBLAS_STATUS_SUCCESS) return 0;
    if (sticky(cudaPeekAtLastError())) d->dead = 1;
    if (C(d)->recording) C(d)->rec_failed = 1;
    snprintf(d->err, sizeof d->err, "cublasGemmEx (bf16): %s", cublasGetStatusString(s));
    return -EIO;
}

/* Stream capture in relaxed mode: the backend may still allocate (a lazily
 * grown scratch) while recording; it then discards the recording itself
 * (grid_backend.c), since the graph would hold the old pointer. */
static int c_record_begin(lind_device *d)
{
    cdev *c = C(d);
    if (c->recording) {
        snprintf(d->err, sizeof d->err, "record_begin: already recording");
        return -EBUSY;
    }
    int rc = cuda_rc(d, cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeRelaxed), "cudaStreamBeginCapture");
    if (rc == 0) c->recording = 1, c->rec_failed = 0;
    return rc;
}

static int c_record_end(lind_device *d, int keep, void **out)
{
    cdev *c = C(d);
    *out = NULL;
    if (!c->recording) {
        snprintf(d->err, sizeof d->err, "record_end: not recording");
        return -EINVAL;
    }
    cudaGraph_t graph = NULL;
    cudaError_t e = cudaStreamEndCapture(c->stream, &graph);
    int failed = c->rec_failed;
    c->recording = 0;
    c->rec_failed = 0;
    if (e != cudaSuccess || failed || !keep) {
        if (graph) cudaGraphDestroy(graph);
        (void)cudaGetLastError();   /* a failed capture's error is not sticky: clear it */
        return e != cudaSuccess && keep && !failed ? cuda_rc(d, e, "cudaStreamEndCapture") : 0;
    }
    cudaGraphExec_t exec = NULL;
    e = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    if (e != cudaSuccess) return cuda_rc(d, e, "cudaGraphInstantiate");
    *out = exec;
    return 0;
}

static int c_graph_run(lind_device *d, void *graph)
{
    return cuda_rc(d, cudaGraphLaunch((cudaGraphExec_t)graph, C(d)->stream), "cudaGraphLaunch");
}

static void c_graph_free(lind_device *d, void *graph)
{
    if (!graph) return;
    cudaStreamSynchronize(C(d)->stream);
    cudaGraphExecDestroy((cudaGraphExec_t)graph);
}

static void *c_host_alloc(lind_device *d, size_t bytes)
{
    void *p = NULL;
    return cuda_rc(d, cudaMallocHost(&p, bytes ? bytes : 1), "cudaMallocHost") == 0 ? p : NULL;
}

static void c_host_free(lind_device *d, void *p)
{
    (void)d;
    if (p) cudaFreeHost(p);   /* waits for copies into it, as the contract of d2h already has */
}

int cuda_device_new(int ordinal, lind_device **out, char *err, size_t errlen)
{
    *out = NULL;
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        snprintf(err, errlen, "backend cuda: no usable CUDA device (cudaGetDeviceCount: %s)", cudaGetErrorString(e));
        return -ENODEV;
    }
    if (n == 0) {
        snprintf(err, errlen, "backend cuda: no CUDA device found");
        return -ENODEV;
    }
    if (ordinal < 0) ordinal = 0;
    else if (ordinal >= n) {
        snprintf(err, errlen, "backend cuda: device %d is not a device index below %d", ordinal, n);
        return -EINVAL;
    }
    struct cudaDeviceProp prop;
    if ((e = cudaSetDevice(ordinal)) != cudaSuccess || (e = cudaGetDeviceProperties(&prop, ordinal)) != cudaSuccess) {
        snprintf(err, errlen, "backend cuda: device %d: %s", ordinal, cudaGetErrorString(e));
        return -ENODEV;
    }
    cdev *c = calloc(1, sizeof *c);
    if (!c) { snprintf(err, errlen, "backend cuda: out of memory"); return -ENOMEM; }
    c->ordinal = ordinal;
    snprintf(c->dev.name, sizeof c->dev.name, "%.160s (device %d, sm_%d%d, %.1f GiB)", prop.name, ordinal,
             prop.major, prop.minor, (double)prop.totalGlobalMem / (1024.0 * 1024 * 1024));
    c->dev.free = c_free;
    c->dev.alloc = c_alloc;
    c->dev.release = c_release;
    c->dev.h2d = c_h2d;
    c->dev.d2h = c_d2h;
    c->dev.d2d = c_d2d;
    c->dev.zero = c_zero;
    c->dev.launch = c_launch;
    c->dev.sgemm = c_sgemm;
    c->dev.gemm_bf16 = c_gemm_bf16;
    c->dev.record_begin = c_record_begin;
    c->dev.record_end = c_record_end;
    c->dev.graph_run = c_graph_run;
    c->dev.graph_free = c_graph_free;
    c->dev.host_alloc = c_host_alloc;
    c->dev.host_free = c_host_free;
    if ((e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking)) != cudaSuccess) {
        snprintf(err, errlen, "backend cuda: %s: cannot create a stream: %s", c->dev.name, cudaGetErrorString(e));
        c_free(&c->dev);
        return -EIO;
    }
    cublasHandle_t h = NULL;
    cublasStatus_t s = cublasCreate(&h);
    if (s == CUBLAS_STATUS_SUCCESS) c->blas = h;
    if (s == CUBLAS_STATUS_SUCCESS) s = cublasSetStream(c->blas, c->stream);
    /* plain fp32 GEMMs (no TF32), so results track the CPU backend's */
    if (s == CUBLAS_STATUS_SUCCESS) s = cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH);
    if (s == CUBLAS_STATUS_SUCCESS && cudaMalloc(&c->blas_ws, BLAS_WORKSPACE) != cudaSuccess) {
        snprintf(err, errlen, "backend cuda: %s: cannot allocate cuBLAS's workspace", c->dev.name);
        c_free(&c->dev);
        return -ENOMEM;
    }
    if (s == CUBLAS_STATUS_SUCCESS) s = cublasSetWorkspace(c->blas, c->blas_ws, BLAS_WORKSPACE);
    if (s != CUBLAS_STATUS_SUCCESS) {
        snprintf(err, errlen, "backend cuda: %s: cuBLAS: %s", c->dev.name, cublasGetStatusString(s));
        c_free(&c->dev);
        return -EIO;
    }
    if ((e = (cudaError_t)lind_cuda_probe(c->stream)) != cudaSuccess) {
        snprintf(err, errlen, "backend cuda: %s cannot run this build's kernels (built for sm_80 and sm_90): %s",
                 c->dev.name, cudaGetErrorString(e));
        c_free(&c->dev);
        return -ENODEV;
    }
    *out = &c->dev;
    return 0;
}

int backend_cuda_new(const backend_opts *opts, backend **out, char *err, size_t errlen)
{
    lind_device *dev;
    *out = NULL;
    int rc = cuda_device_new(opts ? opts->cuda_device : -1, &dev, err, errlen);
    if (rc < 0) return rc;
    return grid_backend_new(dev, "cuda", opts, out, err, errlen);
}
