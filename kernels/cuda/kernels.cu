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

LIND_KERNEL(k_embed, kb_embed, kb_embed_args)
LIND_KERNEL(k_layernorm, kb_layernorm, kb_layernorm_args)
LIND_KERNEL(k_bias_rows, kb_bias_rows, kb_bias_rows_args)
LIND_KERNEL(k_act, kb_act, kb_act_args)
LIND_KERNEL(k_shift_mix, kb_shift_mix, kb_shift_mix_args)
LIND_KERNEL(k_linear_step, kb_linear_step, kb_linear_args)
LIND_KERNEL(k_aft_step, kb_aft_step, kb_aft_args)
LIND_KERNEL(k_to_bf16, kb_to_bf16, kb_to_bf16_args)
LIND_KERNEL(k_gather_rows, kb_gather_rows, kb_gather_rows_args)
LIND_KERNEL(k_scale, kb_scale, kb_scale_args)
LIND_KERNEL(k_gated_add, kb_gated_add, kb_gated_add_args)
LIND_KERNEL(k_widen_half, kb_widen_half, kb_widen_half_args)
LIND_KERNEL(k_gemv_half, kb_gemv_half, kb_gemv_half_args)
LIND_KERNEL(k_short_conv, kb_short_conv, kb_short_conv_args)
LIND_KERNEL(k_conv_advance, kb_conv_advance, kb_conv_advance_args)
LIND_KERNEL(k_delta_step, kb_delta_step, kb_delta_args)
LIND_KERNEL(k_window_step, kb_window_step, kb_window_args)
LIND_KERNEL(k_pos_advance, kb_pos_advance, kb_pos_advance_args)
LIND_KERNEL(k_aftw_step, kb_aftw_step, kb_aftw_args)
LIND_KERNEL(k_retention_step, kb_retention_step, kb_retention_args)
LIND_KERNEL(k_favor, kb_favor, kb_favor_args)
LIND_KERNEL(k_cosformer_step, kb_cosformer_step, kb_cosformer_args)
LIND_KERNEL(k_linformer_step, kb_linformer_step, kb_linformer_args)
LIND_KERNEL(k_nonfinite, kb_nonfinite, kb_nonfinite_args)

__global__ void k_probe(int *flag) { *flag = 1; }

extern "C" int lind_cuda_launch(int kernel, const lind_launch *L, const void *args, void *stream) {
    dim3 grid((unsigned)L->gx, (unsigned)L->gy), block((unsigned)L->block);
    cudaStream_t s = (cudaStream_t)stream;
    switch (kernel) {
    case KB_EMBED:       k_embed<<<grid, block, L->smem, s>>>(*(const kb_embed_args *)args); break;
    case KB_LAYERNORM:   k_layernorm<<<grid, block, L->smem, s>>>(*(const kb_layernorm_args *)args); break;
    case KB_BIAS_ROWS:   k_bias_rows<<<grid, block, L->smem, s>>>(*(const kb_bias_rows_args *)args); break;
    case KB_ACT:         k_act<<<grid, block, L->smem, s>>>(*(const kb_act_args *)args); break;
    case KB_SHIFT_MIX:   k_shift_mix<<<grid, block, L->smem, s>>>(*(const kb_shift_mix_args *)args); break;
    case KB_LINEAR_STEP: k_linear_step<<<grid, block, L->smem, s>>>(*(const kb_linear_args *)args); break;
    case KB_AFT_STEP:    k_aft_step<<<grid, block, L->smem, s>>>(*(const kb_aft_args *)args); break;
    case KB_TO_BF16:     k_to_bf16<<<grid, block, L->smem, s>>>(*(const kb_to_bf16_args *)args); break;
    case KB_GATHER_ROWS: k_gather_rows<<<grid, block, L->smem, s>>>(*(const kb_gather_rows_args *)args); break;
    case KB_SCALE:       k_scale<<<grid, block, L->smem, s>>>(*(const kb_scale_args *)args); break;
    case KB_GATED_ADD:   k_gated_add<<<grid, block, L->smem, s>>>(*(const kb_gated_add_args *)args); break;
    case KB_WIDEN_HALF:  k_widen_half<<<grid, block, L->smem, s>>>(*(const kb_widen_half_args *)args); break;
    case KB_GEMV_HALF:   k_gemv_half<<<grid, block, L->smem, s>>>(*(const kb_gemv_half_args *)args); break;
    case KB_SHORT_CONV:  k_short_conv<<<grid, block, L->smem, s>>>(*(const kb_short_conv_args *)args); break;
    case KB_CONV_ADVANCE: k_conv_advance<<<grid, block, L->smem, s>>>(*(const kb_conv_advance_args *)args); break;
    case KB_DELTA_STEP:  k_delta_step<<<grid, block, L->smem, s>>>(*(const kb_delta_args *)args); break;
    case KB_WINDOW_STEP: k_window_step<<<grid, block, L->smem, s>>>(*(const kb_window_args *)args); break;
    case KB_POS_ADVANCE: k_pos_advance<<<grid, block, L->smem, s>>>(*(const kb_pos_advance_args *)args); break;
    case KB_AFTW_STEP:   k_aftw_step<<<grid, block, L->smem, s>>>(*(const kb_aftw_args *)args); break;
    case KB_RETENTION_STEP: k_retention_step<<<grid, block, L->smem, s>>>(*(const kb_retention_args *)args); break;
    case KB_FAVOR:       k_favor<<<grid, block, L->smem, s>>>(*(const kb_favor_args *)args); break;
    case KB_COSFORMER_STEP: k_cosformer_step<<<grid, block, L->smem, s>>>(*(const kb_cosformer_args *)args); break;
    case KB_LINFORMER_STEP: k_linformer_step<<<grid, block, L->smem, s>>>(*(const kb_linformer_args *)args); break;
    case KB_NONFINITE:   k_nonfinite<<<grid, block, L->smem, s>>>(*(const kb_nonfinite_args *)args); break;
    default: return (int)cudaErrorInvalidValue;
    }
    return (int)cudaGetLastError();
}

extern "C" int lind_cuda_probe(void *stream) {
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
