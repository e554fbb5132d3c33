/* kernels/cuda/kernel_bodies.h — the CUDA backend's kernels: one list.
 *
 * Each kernel is a per-thread body in a family header kb_<family>.h (how
 * bodies, phases and barriers work: kb_common.h), compiled both as CUDA
 * device code (kernels.cu wraps each in a __global__) and as plain C
 * (harness.c runs them on the host over the same grid). LIND_KERNELS is the
 * one place a kernel is named: it generates the kernel enum here, the
 * __global__ wrappers and the launch switch in kernels.cu, and the harness's
 * table. A new kernel is its body in a family header plus one row below.
 *
 *   X(enum name, body, argument struct) */
#ifndef LIND_KERNELS_CUDA_KERNEL_BODIES_H
#define LIND_KERNELS_CUDA_KERNEL_BODIES_H

#include "kernels/cuda/kb_common.h"
#include "kernels/cuda/kb_rows.h"
#include "kernels/cuda/kb_shift.h"
#include "kernels/cuda/kb_linear.h"
#include "kernels/cuda/kb_aft.h"
#include "kernels/cuda/kb_delta.h"
#include "kernels/cuda/kb_window.h"
#include "kernels/cuda/kb_position.h"
#include "kernels/cuda/kb_retention.h"
#include "kernels/cuda/kb_favor.h"
#include "kernels/cuda/kb_cosformer.h"
#include "kernels/cuda/kb_linformer.h"
#include "kernels/cuda/kb_mamba2.h"

#define LIND_KERNELS(X)                                          \
    X(KB_EMBED,          kb_embed,          kb_embed_args)         \
    X(KB_LAYERNORM,      kb_layernorm,      kb_layernorm_args)     \
    X(KB_BIAS_ROWS,      kb_bias_rows,      kb_bias_rows_args)     \
    X(KB_ACT,            kb_act,            kb_act_args)           \
    X(KB_SHIFT_MIX,      kb_shift_mix,      kb_shift_mix_args)     \
    X(KB_LINEAR_STEP,    kb_linear_step,    kb_linear_args)        \
    X(KB_AFT_STEP,       kb_aft_step,       kb_aft_args)           \
    X(KB_TO_BF16,        kb_to_bf16,        kb_to_bf16_args)       \
    X(KB_GATHER_ROWS,    kb_gather_rows,    kb_gather_rows_args)   \
    X(KB_SCALE,          kb_scale,          kb_scale_args)         \
    X(KB_GATED_ADD,      kb_gated_add,      kb_gated_add_args)     \
    X(KB_WIDEN_HALF,     kb_widen_half,     kb_widen_half_args)    \
    X(KB_GEMV,           kb_gemv,           kb_gemv_args)          \
    X(KB_SHORT_CONV,     kb_short_conv,     kb_short_conv_args)    \
    X(KB_CONV_ADVANCE,   kb_conv_advance,   kb_conv_advance_args)  \
    X(KB_DELTA_STEP,     kb_delta_step,     kb_delta_args)         \
    X(KB_WINDOW_STEP,    kb_window_step,    kb_window_args)        \
    X(KB_POS_ADVANCE,    kb_pos_advance,    kb_pos_advance_args)   \
    X(KB_AFTW_STEP,      kb_aftw_step,      kb_aftw_args)          \
    X(KB_RETENTION_STEP, kb_retention_step, kb_retention_args)     \
    X(KB_FAVOR,          kb_favor,          kb_favor_args)         \
    X(KB_COSFORMER_STEP, kb_cosformer_step, kb_cosformer_args)     \
    X(KB_LINFORMER_STEP, kb_linformer_step, kb_linformer_args)     \
    X(KB_RMSNORM,        kb_rmsnorm,        kb_rmsnorm_args)       \
    X(KB_MAMBA2_STEP,    kb_mamba2_step,    kb_mamba2_args)        \
    X(KB_NONFINITE,      kb_nonfinite,      kb_nonfinite_args)

enum kb_kernel {
#define LIND_KERNEL_ENUM(e, body, Args) e,
    LIND_KERNELS(LIND_KERNEL_ENUM)
#undef LIND_KERNEL_ENUM
    KB_NKERNELS
};

#endif
