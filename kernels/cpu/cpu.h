/* kernels/cpu/cpu.h — the CPU backend's internals, shared by its files:
 * kernels/cpu/backend_cpu.c (buffers, slots, begin_step, products, norms,
 * row helpers, the ops table) and one file per op family,
 * kernels/cpu/ops_<family>.c (the ops the kinds add: shift, linear, aft,
 * delta, window, retention, favor, cosformer, linformer, rwkv7, mamba2 — the
 * same families as the CUDA bodies' kernels/cuda/kb_<family>.h), so a new
 * kind's CPU op is its own file rather than more lines in backend_cpu.c.
 * Below: the backend's state, and the runners the op files share (the
 * fork-join split of a batch, scratch, slot access, the linear-attention
 * head). Not a public interface: only kernels/cpu/ includes it. */
#ifndef LIND_KERNELS_CPU_CPU_H
#define LIND_KERNELS_CPU_CPU_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/pool.h"
#include "kernels/cpu/quant.h"

enum { BUF_PLAIN, BUF_HOST, BUF_WT, BUF_PACKED, BUF_DOT, BUF_QUANT };

struct backend_buf {
    float *p;
    size_t n;
    int kind;        /* BUF_HOST: made by buf_host, p is the caller's;
                        made by weight_new: BUF_WT, p holds Wᵀ [K × N] for
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
    int amx;                /* BUF_DOT products of a K cpu_gemm_amx_fits run on AMX tiles (opts, the CPU) */
    uint16_t *xb;           /* BUF_DOT products: the activations rounded to bf16 */
    size_t xb_n;            /* uint16 elements of xb */
    cpu_quant_isa qisa;     /* BUF_QUANT products' kernel (follows isa: AVX-512 → VNNI if the CPU has it) */
    cpu_quant_scratch qs;   /* BUF_QUANT products: the quantized activations */
    char device[192];
} cpu;

static inline uint8_t *cpu_slot_ptr(cpu *c, int slot) { return c->pool + (size_t)slot * c->stride; }

/* Items [0, total) split into nparts contiguous shares. */
static inline void cpu_part_range(int total, int part, int nparts, int *lo, int *hi)
{
    *lo = (int)((long)total * part / nparts);
    *hi = (int)((long)total * (part + 1) / nparts);
}

/* The mixer ops' scratch, at least n floats (kept between ops; ops do not
 * overlap); NULL when out of memory. */
float *cpu_tmp_get(cpu *c, size_t n);
/* How many parts to split B items of work_per_row each into (1 when the
 * whole is too small for a fork-join to pay). */
int cpu_row_parts(const cpu *c, int B, size_t work_per_row);

/* Work items of a per-channel recurrence: (run, channel slice). A run's rows
 * go in order through one session's state, but every channel's state is
 * its own, so with fewer runs than threads (one long prompt fed in chunks)
 * the channels are split too: the same arithmetic per element, in the same
 * order, on either thread. Slices are multiples of 16 channels (a whole
 * vector) or more; runs of a few rows (decode) are not split. */
static inline int cpu_chan_slices(const cpu *c, int d)
{
    int n = cpu_pool_size(c->threads);
    if (c->nruns >= n || c->B < 8 * c->nruns) return 1;   /* decode: a row is too little to split */
    int s = (n + c->nruns - 1) / c->nruns;
    while (s > 1 && d / s < 16) s--;
    return s;
}

static inline void cpu_chan_range(int d, int s, int slices, int *c0, int *c1)
{
    *c0 = s ? (int)((long)d * s / slices) & ~15 : 0;
    *c1 = s + 1 == slices ? d : (int)((long)d * (s + 1) / slices) & ~15;
}

/* The int64 position counter at byte offset off of a slot, as unsigned (any
 * bits are a valid state). */
static inline uint64_t cpu_slot_u64(const uint8_t *st, size_t off)
{
    uint64_t v;
    memcpy(&v, st + off, sizeof v);
    return v;
}

/* One linear-attention head (kernels/cpu/ops_linear.c), shared with
 * retention_step and cosformer_step: S ← γS + φk vᵀ with num_j = Σ_i φq_i
 * S[i][j] (cpu_lin_head); z ← γz + φk returning Σ_i φq_i z_i
 * (cpu_lin_z_head, term: dh doubles of scratch); o = num / (den + eps)
 * (cpu_lin_out_head). */
void   cpu_lin_head(double *restrict S, double *restrict num, const float *restrict phik,
                    const float *restrict phiq, const float *restrict v, double g, int dh);
double cpu_lin_z_head(double *restrict z, double *restrict term, const float *restrict phik,
                      const float *restrict phiq, double g, int dh);
void   cpu_lin_out_head(float *restrict o, const double *restrict num, double den, float eps, int dh);

/* The kinds' ops: cpu_<op> for every row of BACKEND_KIND_OPS
 * (kernels/backend.h), each defined in its family's kernels/cpu/ops_<family>.c
 * (rmsnorm beside layernorm in backend_cpu.c), typed by backend_<op>_fn;
 * backend_cpu.c's ops table is made from the same list. */
#define CPU_OP_DECL(e, op) backend_##op##_fn cpu_##op;
BACKEND_KIND_OPS(CPU_OP_DECL)
#undef CPU_OP_DECL

#endif
