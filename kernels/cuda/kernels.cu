/* kernels/cuda/kernels.cu — the __global__ kernels of the CUDA backend.
 *
 * Each kernel is the generic runner around one per-thread body of
 * kernel_bodies.h: phases separated by __syncthreads() until the body says
 * it is done. The same bodies run under the host harness (harness.c). */
#include "kernels/cuda/cuda_launch.h"

#include <cuda_runtime.h>

#define LIND_KERNEL(name, body, Args)                                        \
    __global__ void name(Args a) {                                           \
        extern __shared__ double lind_smem[];                                \
        lind_thread t;                                                       \
        t.bx = (int)blockIdx.x;                                              \
        t.by = (int)blockIdx.y;                                              \
        t.tx = (int)threadIdx.x;                                             \
        t.bdim = (int)blockDim.x;                                            \
        t.smem = lind_smem;                                                  \
        for (int phase = 0; body(&t, phase, &a); phase++) __syncthreads();   \
    }

/* k_<body>: one __global__ per row of LIND_KERNELS (kernel_bodies.h) */
#define LIND_KERNEL_GLOBAL(e, body, Args) LIND_KERNEL(k_##body, body, Args)
LIND_KERNELS(LIND_KERNEL_GLOBAL)
#undef LIND_KERNEL_GLOBAL

__global__ void k_probe(int *flag) { *flag = 1; }

extern "C" int lind_cuda_launch(int kernel, const lind_launch *L, const void *args, void *stream)
{
    dim3 grid((unsigned)L->gx, (unsigned)L->gy), block((unsigned)L->block);
    cudaStream_t s = (cudaStream_t)stream;
    switch (kernel) {
#define LIND_KERNEL_CASE(e, body, Args) \
    case e: k_##body<<<grid, block, L->smem, s>>>(*(const Args *)args); break;
    LIND_KERNELS(LIND_KERNEL_CASE)
#undef LIND_KERNEL_CASE
    default: return (int)cudaErrorInvalidValue;
    }
    return (int)cudaGetLastError();
}

extern "C" int lind_cuda_probe(void *stream)
{
    int *flag = NULL, host = 0;
    cudaStream_t s = (cudaStream_t)stream;
    cudaError_t e = cudaMalloc((void **)&flag, sizeof *flag);
    if (e != cudaSuccess) return (int)e;
    k_probe<<<1, 1, 0, s>>>(flag);
    e = cudaGetLastError();
    if (e == cudaSuccess) e = cudaMemcpyAsync(&host, flag, sizeof host, cudaMemcpyDeviceToHost, s);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s);
    if (e == cudaSuccess && host != 1) e = cudaErrorUnknown;
    cudaFree(flag);
    return (int)e;
}
