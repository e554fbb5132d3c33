// tools/gpu/ceilings.cu — the device's two ceilings, measured in the same run
// as the step times (tools/gpu/check.sh, docs/CUDA.md):
//   - memory bandwidth: a device-to-device copy of 1 GiB, bytes read plus
//     bytes written over the time;
//   - arithmetic: cuBLAS SGEMM (fp32, no TF32: CUBLAS_DEFAULT_MATH, as lind
//     runs it) and bf16 GemmEx with fp32 accumulation, 8192 x 8192 x 8192;
//   - the host link: device-to-host copies of 256 MiB into pageable and into
//     pinned memory (lind downloads logits into pageable memory).
// Random inputs (never zeros), CUDA events, median of the repeats after a
// warm-up. One line per ceiling: "CEIL name value unit".
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

#define CK(x)                                                                              \
    do {                                                                                   \
        cudaError_t e_ = (x);                                                              \
        if (e_ != cudaSuccess) {                                                           \
            fprintf(stderr, "ceilings: %s: %s\n", #x, cudaGetErrorString(e_));             \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)
#define CB(x)                                                                              \
    do {                                                                                   \
        cublasStatus_t s_ = (x);                                                           \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                 \
            fprintf(stderr, "ceilings: %s: %s\n", #x, cublasGetStatusString(s_));          \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

__global__ void fill_f32(float *p, size_t n, unsigned seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        unsigned x = (unsigned)i * 2654435761u ^ seed;
        x ^= x >> 15; x *= 2246822519u; x ^= x >> 13;
        p[i] = (float)(x & 0xffff) / 32768.0f - 1.0f;
    }
}

__global__ void fill_bf16(__nv_bfloat16 *p, size_t n, unsigned seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        unsigned x = (unsigned)i * 2654435761u ^ seed;
        x ^= x >> 15; x *= 2246822519u; x ^= x >> 13;
        p[i] = __float2bfloat16((float)(x & 0xffff) / 32768.0f - 1.0f);
    }
}

// Median of `reps` timed runs of f after `warm` untimed ones, in ms.
template <class F> static double time_ms(F f, int warm, int reps)
{
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    for (int i = 0; i < warm; i++) f();
    std::vector<double> t;
    for (int i = 0; i < reps; i++) {
        CK(cudaEventRecord(a));
        f();
        CK(cudaEventRecord(b));
        CK(cudaEventSynchronize(b));
        float ms;
        CK(cudaEventElapsedTime(&ms, a, b));
        t.push_back(ms);
    }
    CK(cudaGetLastError());
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

int main()
{
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("# %s, sm_%d%d, %d SMs, %.1f GiB, L2 %d MiB\n", prop.name, prop.major, prop.minor,
           prop.multiProcessorCount, prop.totalGlobalMem / 1073741824.0, prop.l2CacheSize >> 20);

    size_t bytes = (size_t)1 << 30;
    float *src, *dst;
    CK(cudaMalloc(&src, bytes));
    CK(cudaMalloc(&dst, bytes));
    fill_f32<<<1024, 256>>>(src, bytes / 4, 1);
    double ms = time_ms([&] { CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice)); }, 3, 20);
    printf("CEIL copy_d2d %.1f GB/s (1 GiB read + 1 GiB written in %.3f ms)\n", 2.0 * bytes / ms / 1e6, ms);

    size_t hb = (size_t)256 << 20;
    void *pageable = malloc(hb), *pinned;
    CK(cudaMallocHost(&pinned, hb));
    memset(pageable, 1, hb);
    ms = time_ms([&] { CK(cudaMemcpy(pageable, src, hb, cudaMemcpyDeviceToHost)); }, 2, 10);
    printf("CEIL copy_d2h_pageable %.1f GB/s\n", hb / ms / 1e6);
    ms = time_ms([&] { CK(cudaMemcpy(pinned, src, hb, cudaMemcpyDeviceToHost)); }, 2, 10);
    printf("CEIL copy_d2h_pinned %.1f GB/s\n", hb / ms / 1e6);
    free(pageable);
    CK(cudaFreeHost(pinned));
    CK(cudaFree(dst));
    CK(cudaFree(src));

    const int n = 8192;
    size_t nn = (size_t)n * n;
    cublasHandle_t h;
    CB(cublasCreate(&h));
    CB(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));
    float *A, *B, *C;
    CK(cudaMalloc(&A, nn * 4));
    CK(cudaMalloc(&B, nn * 4));
    CK(cudaMalloc(&C, nn * 4));
    fill_f32<<<1024, 256>>>(A, nn, 2);
    fill_f32<<<1024, 256>>>(B, nn, 3);
    const float one = 1, zero = 0;
    ms = time_ms([&] { CB(cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, n, n, n, &one, A, n, B, n, &zero, C, n)); }, 2, 8);
    printf("CEIL sgemm_fp32 %.1f TFLOP/s (%dx%dx%d in %.3f ms)\n", 2.0 * n * n * n / ms / 1e9, n, n, n, ms);
    __nv_bfloat16 *Ab, *Bb;
    CK(cudaMalloc(&Ab, nn * 2));
    CK(cudaMalloc(&Bb, nn * 2));
    fill_bf16<<<1024, 256>>>(Ab, nn, 4);
    fill_bf16<<<1024, 256>>>(Bb, nn, 5);
    ms = time_ms([&] {
        CB(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, n, n, n, &one, Ab, CUDA_R_16BF, n, Bb, CUDA_R_16BF, n, &zero, C,
                        CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    }, 2, 8);
    printf("CEIL gemm_bf16 %.1f TFLOP/s (%dx%dx%d in %.3f ms)\n", 2.0 * n * n * n / ms / 1e9, n, n, n, ms);
    cublasDestroy(h);
    CK(cudaFree(A)); CK(cudaFree(B)); CK(cudaFree(C)); CK(cudaFree(Ab)); CK(cudaFree(Bb));
    return 0;
}
