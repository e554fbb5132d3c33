/* kernels/cpu/quant.h — quantized matrix weights for the CPU backend: 8-bit
 * and 4-bit blocks, multiplied without a dequantized copy (docs/CPU.md,
 * "Quantized weights"; accuracy in docs/NUMERICS.md).
 *
 * Formats (a block is 32 consecutive k of one output row n of W [N × K];
 * K is padded with zeros to a multiple of 32):
 *   Q8:  w = d·q, q an int8 in [−127, 127], d one fp16 scale per block
 *        (d = max|w|/127): 8.5 bits a weight.
 *   Q4:  w = d·(q − 8), q a nibble in [0, 15], d one fp16 scale per block,
 *        chosen among a few candidates (±max|w| over 7…8) by the least
 *        squared error: 4.5 bits a weight.
 *   Q4M: w = d·q + m, q a nibble, d and the offset m fp16 per block (m the
 *        block's least value, d its range over 15): 5 bits a weight. Kept
 *        for the measurement that chose Q4 (docs/NUMERICS.md).
 *
 * The activations are quantized on the fly, row by row: per block of 32,
 * xq = round(x · 127/max|x|) in [−127, 127] with the scale s = max|x|/127
 * (fp32) and the integer Σ xq. A block's product is an exact integer dot
 * Σ q·xq, and each output is one fp32 chain over the blocks in order:
 *
 *   acc ← fma((float)Σ_k qw·xq, d·s, acc)           (Q8, Q4: qw = q or q − 8)
 *   acc ← fma(m, s·(float)Σ xq, acc)                (Q4M, after the above)
 *
 * Integer dots are exact whatever the instruction order, so every ISA path
 * (AVX-512 VNNI vpdpbusd, AVX2 vpmaddubsw/vpmaddwd, portable C) gives the
 * same results bit for bit, whatever B, row tile, panel range or thread:
 * prefill stays bit-identical to stepping, and a session's logits do not
 * depend on its batch.
 *
 * Packed layout: panels of NR = 16 output columns; a panel holds its blocks'
 * weights, then their scales (16 fp16 per block), then (Q4M) their offsets,
 * the panel rounded up to 64 bytes. Within a block the weights are grouped
 * by "quads" of 4 consecutive k (vpdpbusd's operand): Q8 quad g (0…7) is 64
 * bytes at g·64, byte j·4 + t = q(column j, k = 4g + t) + 128 (unsigned);
 * Q4 chunk c (0…3) is 64 bytes at c·64, byte j·4 + t holding q(j, 8c + t)
 * in its low nibble and q(j, 8c + 4 + t) in its high one. Columns n ≥ N
 * are zero with scale 0. The layout is the same for every ISA. */
#ifndef LIND_KERNELS_CPU_QUANT_H
#define LIND_KERNELS_CPU_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/cpu/pool.h"

typedef enum cpu_quant_type { CPU_QUANT_Q8 = 1, CPU_QUANT_Q4 = 2, CPU_QUANT_Q4M = 3 } cpu_quant_type;

/* The integer-dot kernels. */
typedef enum cpu_quant_isa {
    CPU_QUANT_C = 0,      /* portable C */
    CPU_QUANT_AVX2 = 1,   /* vpmaddubsw + vpmaddwd */
    CPU_QUANT_VNNI = 2,   /* AVX-512 VNNI vpdpbusd */
} cpu_quant_isa;

#define CPU_QUANT_BLOCK 32
#define CPU_QUANT_NR    16

int cpu_quant_supported(cpu_quant_isa isa);
cpu_quant_isa cpu_quant_detect(void);
const char *cpu_quant_isa_name(cpu_quant_isa isa);   /* "VNNI", "AVX2", "C" */
const char *cpu_quant_type_name(cpu_quant_type t);    /* "q8", "q4", "q4m" */

/* Bytes of one packed panel (K columns of k), and of a packed N × K weight. */
size_t cpu_quant_panel_bytes(cpu_quant_type t, int K);
size_t cpu_quant_packed_bytes(cpu_quant_type t, int N, int K);
/* Bytes of the weight's data without padding (N·⌈K/32⌉ blocks): the
 * bytes a product streams, for benchmark floors. */
size_t cpu_quant_data_bytes(cpu_quant_type t, int N, int K);

/* Quantize W [N × K] row-major (finite values) into dst
 * (cpu_quant_packed_bytes bytes, 64-byte aligned). 0, or -ERANGE when a
 * block's scale or offset overflows fp16 (|w| beyond about 8·10^6), with
 * err naming the row and block. */
int cpu_quant_pack(cpu_quant_type t, const float *W, int N, int K, void *dst, char *err, size_t errlen);
/* The values the packed weight stands for: W [N × K] (tests, tools). */
void cpu_quant_dequant(cpu_quant_type t, const void *Wp, int N, int K, float *W);

/* Bytes of one quantized activation row (64-byte multiple). */
size_t cpu_quant_act_bytes(int K);
/* Quantize rows b < B of x (row stride ldx floats) into xq (row stride
 * cpu_quant_act_bytes(K)). A block holding a NaN or ±inf gets a NaN scale
 * (its outputs are NaN, which the model's residual check reports); a block
 * whose max|x| is below 1e-30 is zero. */
void cpu_quant_act(const float *x, int ldx, int B, int K, void *xq);
/* The same with isa's code (VNNI: AVX-512; the others portable C): the
 * same bytes whichever (tests compare them). */
void cpu_quant_act_isa(cpu_quant_isa isa, const float *x, int ldx, int B, int K, void *xq);
/* The values quantized activations stand for (tests): x [B × K]. */
void cpu_quant_act_values(const void *xq, int B, int K, float *x);

/* Columns of panels [p0, p1) of
 *   y[b, n] = (ACCUMULATE ? y[b, n] : 0) + (bias ? bias[n] : 0) + Σ
 * or, with an activation flag, y = act(bias + Σ) (kernels/cpu/gemm.h's
 * flags and epilogue), for b < B, from activations quantized by
 * cpu_quant_act and a weight packed by cpu_quant_pack. isa must be
 * supported. Columns n ≥ N are never written. */
void cpu_quant_run(cpu_quant_isa isa, cpu_quant_type t, const void *xq, const void *Wp, const float *bias,
                   float *y, int ldy, int B, int N, int K, int p0, int p1, int flags);

/* Scratch the caller owns for cpu_quant_matmul (zero-initialized; free
 * with cpu_quant_scratch_free). */
typedef struct cpu_quant_scratch {
    void  *p;
    size_t n;
} cpu_quant_scratch;
void cpu_quant_scratch_free(cpu_quant_scratch *s);

/* The whole product on a pool: the activations quantized (rows split
 * across the pool), then panels claimed by the pool's threads. 0 or
 * -ENOMEM. */
int cpu_quant_matmul(cpu_pool *pool, cpu_quant_isa isa, cpu_quant_type t, const float *x, int ldx, const void *Wp,
                     const float *bias, float *y, int ldy, int B, int N, int K, int flags, cpu_quant_scratch *s);

#endif
