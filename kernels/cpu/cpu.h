/* kernels/cpu/cpu.h — the CPU backend's internals, shared by its files:
 * kernels/cpu/backend_cpu.c (buffers, slots, products, the older mixer ops)
 * and one file per newer mixer's op (kernels/cpu/ops_<kind>.c), so a new
 * kind's CPU op is its own file rather than more lines in backend_cpu.c.
 * Not a public interface: only kernels/cpu/ includes it. */
#ifndef LIND_KERNELS_CPU_CPU_H
#define LIND_KERNELS_CPU_CPU_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/backend.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/pool.h"
#include "kernels/cpu/quant.h"

enum { BUF_PLAIN, BUF_WT, BUF_PACKED, BUF_DOT, BUF_QUANT };

struct backend_buf {
    float *p;
    size_t n;
    int kind;        /* made by weight_new: BUF_WT, p holds Wᵀ [K × N] for
                        OpenBLAS; BUF_PACKED, p holds kernels/cpu/gemm.h panels;
                        BUF_DOT (bf16 compute), p holds cpu_gemm_pack_dot's bf16
                        pair panels; BUF_QUANT, p holds kernels/cpu/quant.h
                        panels of cpu_quant_type wtype */
    int wtype;       /* BUF_PACKED: cpu_gemm_wtype of the panels (F16/BF16:
                        p holds uint16_t elements, made by weight_new_half) */
};

typedef struct cpu {
    backend base;
    uint8_t *pool;          /* nslots × stride bytes */
    int nslots;
    size_t slot_bytes, stride;
    int *slots, *tokens;    /* current batch: B rows */
    int *run;               /* nruns + 1 row indices: run k is rows [run[k], run[k+1]) */
    int B, cap, nruns;
    float *tmp;             /* scratch of the mixer steps */
    size_t tmp_n;
    cpu_pool *threads;      /* every op runs across these */
    cpu_gemm_isa isa;       /* kernels/cpu/gemm.c kernel weights are packed for; NONE: OpenBLAS */
    int dot;                /* compute mode BACKEND_COMPUTE_BF16: bf16 weights become BUF_DOT */
    uint16_t *xb;           /* BUF_DOT products: the activations rounded to bf16 */
    size_t xb_n;            /* uint16 elements of xb */
    cpu_quant_isa qisa;     /* BUF_QUANT products' kernel (follows isa: AVX-512 → VNNI if the CPU has it) */
    cpu_quant_scratch qs;   /* BUF_QUANT products: the quantized activations */
    char device[128];
} cpu;

static inline uint8_t *cpu_slot_ptr(cpu *c, int slot) { return c->pool + (size_t)slot * c->stride; }

/* Items [0, total) split into nparts contiguous shares. */
static inline void cpu_part_range(int total, int part, int nparts, int *lo, int *hi) {
    *lo = (int)((long)total * part / nparts);
    *hi = (int)((long)total * (part + 1) / nparts);
}

/* The mixer ops' scratch, at least n floats (kept between ops; ops do not
 * overlap); NULL when out of memory. */
float *cpu_tmp_get(cpu *c, size_t n);
/* How many parts to split B items of work_per_row each into (1 when the
 * whole is too small for a fork-join to pay). */
int cpu_row_parts(const cpu *c, int B, size_t work_per_row);

/* The ops in their own files (kernels/cpu/ops_<kind>.c). */
int cpu_rwkv7_step(backend *be, const backend_buf *in, int ldi, const backend_buf *par, const backend_buf *w2,
                   int dw, backend_buf *vfirst, int vmode, backend_buf *out, size_t state_off, int H, int N,
                   float gn_eps);
int cpu_mamba2_step(backend *be, const backend_buf *in, int ldi, const backend_buf *par, backend_buf *out,
                    size_t state_off, int H, int P, int N, int G, float dt_lo, float dt_hi);

#endif
