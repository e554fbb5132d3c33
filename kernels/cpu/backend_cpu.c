/* kernels/cpu/backend_cpu.c — the CPU backend: matrix products through the
 * packed AVX-512/AVX2 kernels of kernels/cpu/gemm.h (weights packed once by
 * weight_new) or, on a CPU with neither, OpenBLAS (weights kept transposed
 * so it is a NoTrans·NoTrans product); everything else plain C loops that
 * vectorize at -O3 -march=native (each hot loop in a noinline function with
 * restrict pointers, checked with -fopt-info-vec), per-element math from
 * kernels/mixer_math.h. Every op is split across a fork-join pool
 * (kernels/cpu/pool.h): products by weight panels, batch ops by rows. See
 * docs/CPU.md. */
#if defined(__GNUC__) && !defined(__clang__)
/* Where AVX-512 is enabled, let the element-wise loops use it (GCC defaults
 * to 256-bit vectors on Intel). */
#pragma GCC target("prefer-vector-width=512")
#endif
#include <cblas.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kernels/backend.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/pool.h"
#include "kernels/cpu/quant.h"
#include "kernels/mixer_math.h"

#define ALIGN 64
static size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

#define HUGE_PAGE (2u << 20)

/* Buffers of several MiB (weight matrices, batch activations) ask for
 * transparent huge pages on their whole 2 MiB-aligned interior: a matrix
 * streamed once per token then crosses a page every 2 MiB instead of every
 * 4 KiB (fewer TLB walks, and the hardware prefetcher, which stops at a
 * page's end, keeps running). A hint only: where THP is off nothing changes. */
static void *amalloc(size_t n) {
    void *p = NULL;
    if (posix_memalign(&p, ALIGN, round_up(n ? n : 1, ALIGN))) return NULL;
#ifdef MADV_HUGEPAGE
    if (n >= 2 * (size_t)HUGE_PAGE) {
        uintptr_t lo = round_up((uintptr_t)p, HUGE_PAGE), hi = ((uintptr_t)p + n) / HUGE_PAGE * HUGE_PAGE;
        if (hi > lo) madvise((void *)lo, hi - lo, MADV_HUGEPAGE);
    }
#endif
    return p;
}

static const char *cpu_device_name(backend *be) { return ((cpu *)be)->device; }

static int cpu_buf_new(backend *be, size_t n, backend_buf **out) {
    (void)be;
    backend_buf *b = malloc(sizeof *b);
    if (!b) return -ENOMEM;
    b->p = amalloc(n * sizeof(float));
    if (!b->p) { free(b); return -ENOMEM; }
    b->n = n;
    b->kind = BUF_PLAIN;
    b->wtype = CPU_GEMM_F32;
    *out = b;
    return 0;
}

/* Packed panels for kernels/cpu/gemm.c when the CPU runs it; otherwise Wᵀ,
 * so y = x·Wᵀ runs as a NoTrans·NoTrans SGEMM, which OpenBLAS does faster
 * than NoTrans·Trans for the small M (batch) of a decode step. */
static int cpu_weight_new(backend *be, int N, int K, const float *W, backend_buf **out) {
    cpu *c = (cpu *)be;
    if (c->isa != CPU_GEMM_NONE) {
        int rc = cpu_buf_new(be, cpu_gemm_packed_floats(c->isa, N, K), out);
        if (rc < 0) return rc;
        cpu_gemm_pack(c->isa, W, N, K, (*out)->p);
        (*out)->kind = BUF_PACKED;
        return 0;
    }
    int rc = cpu_buf_new(be, (size_t)N * (size_t)K, out);
    if (rc < 0) return rc;
    float *t = (*out)->p;
    for (int n = 0; n < N; n++)
        for (int k = 0; k < K; k++) t[(size_t)k * N + n] = W[(size_t)n * K + k];
    (*out)->kind = BUF_WT;
    return 0;
}

/* Half-precision panels when the CPU runs the packed kernels (they widen in
 * registers); on a CPU with neither AVX2 nor AVX-512, widened to fp32 here
 * and kept as weight_new keeps it (OpenBLAS multiplies fp32 only). */
static int cpu_weight_new_half(backend *be, int N, int K, const uint16_t *W, int wtype, backend_buf **out) {
    cpu *c = (cpu *)be;
    if (wtype != BACKEND_W_F16 && wtype != BACKEND_W_BF16) return -EINVAL;
    size_t nk = (size_t)N * (size_t)K;
    if (c->isa == CPU_GEMM_NONE) {
        float *wide = malloc((nk ? nk : 1) * sizeof(float));
        if (!wide) return -ENOMEM;
        cpu_gemm_widen((cpu_gemm_wtype)wtype, W, wide, nk);
        int rc = cpu_weight_new(be, N, K, wide, out);
        free(wide);
        return rc;
    }
    int dot = c->dot && wtype == BACKEND_W_BF16;   /* bf16 compute: vdpbf16ps pair panels */
    size_t n = dot ? cpu_gemm_dot_packed_elems(N, K) : cpu_gemm_packed_floats(c->isa, N, K);
    backend_buf *b = malloc(sizeof *b);
    if (!b) return -ENOMEM;
    b->p = amalloc(n * sizeof(uint16_t));
    if (!b->p) { free(b); return -ENOMEM; }
    if (dot)
        cpu_gemm_pack_dot(W, N, K, (uint16_t *)b->p);
    else
        cpu_gemm_pack_half(c->isa, W, N, K, (uint16_t *)b->p);
    b->n = n / 2;   /* floats' worth (never uploaded to or downloaded from) */
    b->kind = dot ? BUF_DOT : BUF_PACKED;
    b->wtype = wtype;
    *out = b;
    return 0;
}

/* Quantized panels (kernels/cpu/quant.h), on any CPU. */
static int cpu_weight_new_quant(backend *be, int N, int K, const float *W, int qtype, backend_buf **out, char *err,
                                size_t errlen) {
    (void)be;
    if (qtype != BACKEND_W_Q8 && qtype != BACKEND_W_Q4) {
        snprintf(err, errlen, "backend cpu: unknown quantized format %d", qtype);
        return -EINVAL;
    }
#ifndef LIND_Q4_FORMAT
#define LIND_Q4_FORMAT CPU_QUANT_Q4   /* Q4M (with offsets) measured against it: docs/NUMERICS.md */
#endif
    cpu_quant_type t = qtype == BACKEND_W_Q8 ? CPU_QUANT_Q8 : LIND_Q4_FORMAT;
    size_t n = cpu_quant_packed_bytes(t, N, K);
    backend_buf *b = malloc(sizeof *b);
    if (!b) return -ENOMEM;
    if (!(b->p = amalloc(n))) { free(b); return -ENOMEM; }
    int rc = cpu_quant_pack(t, W, N, K, b->p, err, errlen);
    if (rc < 0) { free(b->p); free(b); return rc; }
    b->n = n / sizeof(float);   /* floats' worth (never uploaded to or downloaded from) */
    b->kind = BUF_QUANT;
    b->wtype = t;
    *out = b;
    return 0;
}

static void cpu_buf_free(backend *be, backend_buf *b) {
    (void)be;
    if (!b) return;
    free(b->p);
    free(b);
}

static int cpu_buf_upload(backend *be, backend_buf *b, size_t off, const float *src, size_t n) {
    (void)be;
    if (off > b->n || n > b->n - off) return -ERANGE;
    memcpy(b->p + off, src, n * sizeof(float));
    return 0;
}

static int cpu_buf_download(backend *be, const backend_buf *b, size_t off, float *dst, size_t n) {
    (void)be;
    if (off > b->n || n > b->n - off) return -ERANGE;
    memcpy(dst, b->p + off, n * sizeof(float));
    return 0;
}

static int cpu_slots_reserve(backend *be, int n, size_t slot_bytes) {
    cpu *c = (cpu *)be;
    if (c->nslots && slot_bytes != c->slot_bytes) return -EINVAL;
    if (n <= c->nslots) return 0;
    size_t stride = round_up(slot_bytes ? slot_bytes : 1, ALIGN);
    uint8_t *p = amalloc((size_t)n * stride);
    if (!p) return -ENOMEM;
    if (c->pool) memcpy(p, c->pool, (size_t)c->nslots * stride);
    memset(p + (size_t)c->nslots * stride, 0, (size_t)(n - c->nslots) * stride);
    free(c->pool);
    c->pool = p;
    c->nslots = n;
    c->slot_bytes = slot_bytes;
    c->stride = stride;
    return 0;
}

static int cpu_slot_zero(backend *be, int slot) {
    cpu *c = (cpu *)be;
    if (slot < 0 || slot >= c->nslots) return -ERANGE;
    memset(cpu_slot_ptr(c, slot), 0, c->slot_bytes);
    return 0;
}

static int cpu_slot_read(backend *be, int slot, void *dst) {
    cpu *c = (cpu *)be;
    if (slot < 0 || slot >= c->nslots) return -ERANGE;
    memcpy(dst, cpu_slot_ptr(c, slot), c->slot_bytes);
    return 0;
}

static int cpu_slot_write(backend *be, int slot, const void *src) {
    cpu *c = (cpu *)be;
    if (slot < 0 || slot >= c->nslots) return -ERANGE;
    memcpy(cpu_slot_ptr(c, slot), src, c->slot_bytes);
    return 0;
}

static int cpu_begin_step(backend *be, const int *slots, const int *tokens, int B) {
    cpu *c = (cpu *)be;
    if (B > c->cap) {
        int *s = realloc(c->slots, (size_t)B * sizeof *s);
        if (!s) return -ENOMEM;
        c->slots = s;
        int *t = realloc(c->tokens, (size_t)B * sizeof *t);
        if (!t) return -ENOMEM;
        c->tokens = t;
        int *r = realloc(c->run, (size_t)(B + 1) * sizeof *r);
        if (!r) return -ENOMEM;
        c->run = r;
        c->cap = B;
    }
    for (int b = 0; b < B; b++)
        if (slots[b] < 0 || slots[b] >= c->nslots || tokens[b] < 0) return -ERANGE;
    memcpy(c->slots, slots, (size_t)B * sizeof *slots);
    memcpy(c->tokens, tokens, (size_t)B * sizeof *tokens);
    c->B = B;
    c->nruns = 0;
    for (int b = 0; b < B; b++)
        if (b == 0 || slots[b] != slots[b - 1]) c->run[c->nruns++] = b;
    c->run[c->nruns] = B;
    return 0;
}

float *cpu_tmp_get(cpu *c, size_t n) {
    if (n > c->tmp_n) {
        float *t = amalloc(n * sizeof(float));
        if (!t) return NULL;
        free(c->tmp);
        c->tmp = t;
        c->tmp_n = n;
    }
    return c->tmp;
}

static int cpu_embed(backend *be, const backend_buf *E, backend_buf *x, int d) {
    cpu *c = (cpu *)be;
    for (int b = 0; b < c->B; b++)
        memcpy(x->p + (size_t)b * d, E->p + (size_t)c->tokens[b] * d, (size_t)d * sizeof(float));
    return 0;
}

/* ---- running an op over the pool ---------------------------------------
 * Batch-row ops split rows [0, B) into parts; matmul splits the output
 * columns. Tiny ops run inline: a fork-join costs about a microsecond while
 * the workers poll (kernels/cpu/pool.c). */

int cpu_row_parts(const cpu *c, int B, size_t work_per_row) {
    int n = cpu_pool_size(c->threads);
    if ((size_t)B * work_per_row < (1u << 12)) return 1;
    return B < n ? B : n;
}


typedef struct ln_job {
    const float *x, *w, *bias;
    float *y;
    int B, d;
    float eps;
} ln_job;

/* Σ x[i] over 16 interleaved partial sums, so the loop vectorizes (a single
 * running sum must be added in order, one element per add latency). The
 * order differs from the CUDA kernel's tree reduction in the last bits, as
 * any two reductions do. */
#define LN_LANES 16
static inline float lane_sum(const float *x, float mean, int sq, int d) {
    float acc[LN_LANES] = {0};
    int i = 0;
    for (; i + LN_LANES <= d; i += LN_LANES)
        for (int l = 0; l < LN_LANES; l++) {
            float t = x[i + l] - mean;
            acc[l] += sq ? t * t : t;
        }
    float s = 0.0f;
    for (int l = 0; l < LN_LANES; l++) s += acc[l];
    for (; i < d; i++) {
        float t = x[i] - mean;
        s += sq ? t * t : t;
    }
    return s;
}

/* One row; y may equal x (each element is read before it is written). Not
 * inlined into the part loop: as its own function the loops vectorize. */
__attribute__((noinline)) static void ln_row(const float *x, float *y, const float *restrict w,
                                             const float *restrict bias, int d, float eps) {
    float mean = lane_sum(x, 0.0f, 0, d) / (float)d;
    float rstd = lind_ln_rstd(lane_sum(x, mean, 1, d) / (float)d, eps);
    for (int i = 0; i < d; i++) y[i] = lind_ln_apply(x[i], mean, rstd, w[i], bias[i]);
}

static void ln_part(void *arg, int part, int nparts) {
    const ln_job *j = arg;
    int lo, hi, d = j->d;
    cpu_part_range(j->B, part, nparts, &lo, &hi);
    for (int b = lo; b < hi; b++) ln_row(j->x + (size_t)b * d, j->y + (size_t)b * d, j->w, j->bias, d, j->eps);
}

static int cpu_layernorm(backend *be, const backend_buf *x, backend_buf *y, const backend_buf *w,
                         const backend_buf *bias, int d, float eps) {
    cpu *c = (cpu *)be;
    ln_job j = {x->p, w->p, bias->p, y->p, c->B, d, eps};
    cpu_pool_run(c->threads, ln_part, &j, cpu_row_parts(c, c->B, (size_t)d * 4));
    return 0;
}

/* RMSNorm rows (Mamba's norms): the sum of squares in double, then
 * lind_rms_apply per element. */
typedef struct rms_job {
    const float *x, *w;
    float *y;
    int B, d;
    float eps;
} rms_job;

static void rms_part(void *arg, int part, int nparts) {
    const rms_job *j = arg;
    int lo, hi, d = j->d;
    cpu_part_range(j->B, part, nparts, &lo, &hi);
    for (int b = lo; b < hi; b++) {
        const float *x = j->x + (size_t)b * d;
        float *y = j->y + (size_t)b * d;
        double ss = 0.0;
        for (int i = 0; i < d; i++) ss += (double)x[i] * (double)x[i];
        double rs = lind_rms_rscale(ss, d, j->eps);
        for (int i = 0; i < d; i++) y[i] = lind_rms_apply((double)x[i], rs, j->w[i]);
    }
}

static int cpu_rmsnorm(backend *be, const backend_buf *x, backend_buf *y, const backend_buf *w, int d, float eps) {
    cpu *c = (cpu *)be;
    if (d < 1) return -EINVAL;
    rms_job j = {x->p, w->p, y->p, c->B, d, eps};
    cpu_pool_run(c->threads, rms_part, &j, cpu_row_parts(c, c->B, (size_t)d * 4));
    return 0;
}

/* Parts claim chunks of panels from a shared counter instead of taking a
 * fixed share: at batch 1 a product is a stream of weight bytes, and with
 * fixed halves the thread that a neighbour's memory traffic slowed sets the
 * pace while the other waits (in-process A/B on the RWKV-4 169M shape, bf16
 * weights with fp32 math: 9.4–9.7 → 8.8–9.2 ms/token; the other modes
 * within noise). Each panel is still computed whole by one thread with the
 * same arithmetic, so the result does not depend on who claims what.
 * Chunks: about 1/4 of a part's share; at batch 1 about 1/8, a multiple of
 * CPU_GEMM_ROW_GROUP panels so each thread still streams long runs through
 * the widening kernels. The bf16 dot kernel, which streams one panel at a
 * time, takes one whole share per part at batch 1: smaller claims cost it
 * more in stream starts than they gained in balance (in-process A/B, 40
 * windows of 15 rounds: whole shares 1% faster at ordinary bandwidth, 3% at
 * 55–65 GB/s). */
typedef struct panel_claims {
    int panels, chunk;      /* the product's panels; panels per claim */
    atomic_int next;        /* the next chunk to claim */
} panel_claims;

static void claims_init(panel_claims *cl, int B, int panels, int parts, int one_panel_kernel) {
    const int G = CPU_GEMM_ROW_GROUP;
    int c;
    if (B == 1 && one_panel_kernel)
        c = (panels + parts - 1) / parts;
    else if (B == 1)
        c = panels / (parts * 8) <= G ? G : (panels / (parts * 8) + G - 1) / G * G;
    else
        c = panels / (parts * 4);
    cl->panels = panels;
    cl->chunk = c < 1 ? 1 : c;
    atomic_init(&cl->next, 0);
}

/* [p0, p1) of the next chunk; 0 when none is left. */
static int claims_next(panel_claims *cl, int *p0, int *p1) {
    int c = atomic_fetch_add_explicit(&cl->next, 1, memory_order_relaxed);
    if ((long)c * cl->chunk >= cl->panels) return 0;
    *p0 = c * cl->chunk;
    *p1 = *p0 + cl->chunk < cl->panels ? *p0 + cl->chunk : cl->panels;
    return 1;
}

typedef struct mm_job {
    const float *x, *W, *bias;
    float *y;
    int ldx, ldy, B, N, K, kind, flags;
    cpu_gemm_isa isa;
    cpu_gemm_wtype wtype;   /* of a BUF_PACKED W */
    float *scratch;         /* half W: cpu_gemm_scratch_floats() per part, or NULL */
    panel_claims claims;
} mm_job;

/* Panels [p0, p1) of a packed weight for this part. */
static void mm_packed_part(void *arg, int part, int nparts) {
    mm_job *j = arg;
    (void)nparts;
    int p0, p1;
    float *scr = j->scratch ? j->scratch + (size_t)part * cpu_gemm_scratch_floats(j->isa, j->K) : NULL;
    while (claims_next(&j->claims, &p0, &p1))
        cpu_gemm_run(j->isa, j->wtype, j->x, j->ldx, j->W, j->bias, j->y, j->ldy, j->B, j->N, j->K, p0, p1,
                     j->flags, scr);
}

/* bf16 compute: rows [lo, hi) of x rounded into xb, then panels of W. */
typedef struct dot_job {
    const float *x;
    const uint16_t *W;
    uint16_t *xb;
    const float *bias;
    float *y;
    int ldx, ldxb, ldy, B, N, K, flags;
    panel_claims claims;
} dot_job;

static void dot_round_part(void *arg, int part, int nparts) {
    const dot_job *j = arg;
    int lo, hi;
    cpu_part_range(j->B, part, nparts, &lo, &hi);
    cpu_gemm_round_bf16(j->x + (size_t)lo * j->ldx, j->ldx, hi - lo, j->K, j->xb + (size_t)lo * j->ldxb, j->ldxb);
}

static void dot_part(void *arg, int part, int nparts) {
    dot_job *j = arg;
    (void)part;
    (void)nparts;
    int p0, p1;
    while (claims_next(&j->claims, &p0, &p1))
        cpu_gemm_run_dot(j->xb, j->ldxb, j->W, j->bias, j->y, j->ldy, j->B, j->N, j->K, p0, p1, j->flags);
}

static int dot_matmul(cpu *c, const float *x, int ldx, const backend_buf *W, const float *bias, float *y, int ldy,
                      int B, int N, int K, int flags) {
    int ldxb = cpu_gemm_dot_ld(K);
    size_t need = (size_t)B * (size_t)ldxb;
    if (need > c->xb_n) {
        uint16_t *t = amalloc(need * sizeof *t);
        if (!t) return -ENOMEM;
        free(c->xb);
        c->xb = t;
        c->xb_n = need;
    }
    dot_job j = {x, (const uint16_t *)W->p, c->xb, bias, y, ldx, ldxb, ldy, B, N, K, flags, {0}};
    cpu_pool_run(c->threads, dot_round_part, &j, cpu_row_parts(c, B, (size_t)K));
    int parts = cpu_pool_size(c->threads), panels = cpu_gemm_panels(CPU_GEMM_AVX512, N);
    if ((double)B * N * K < (double)(1 << 14)) parts = 1;   /* as cpu_matmul */
    if (parts > panels) parts = panels;
    claims_init(&j.claims, B, panels, parts, 1);
    cpu_pool_run(c->threads, dot_part, &j, parts);
    return 0;
}

/* Output columns [n0, n1) of y = x·Wᵀ (+ bias, + y) through OpenBLAS. */
static void mm_part(void *arg, int part, int nparts) {
    const mm_job *j = arg;
    int n0, n1, acc = j->flags & BACKEND_MM_ACCUMULATE;
    cpu_part_range(j->N / 16, part, nparts, &n0, &n1);   /* 16-column aligned blocks */
    n0 *= 16;
    n1 = part == nparts - 1 ? j->N : n1 * 16;
    int nn = n1 - n0;
    if (nn <= 0) return;
    float beta = acc ? 1.0f : 0.0f;
    if (j->bias) {
        for (int b = 0; b < j->B; b++) {
            float *yr = j->y + (size_t)b * j->ldy + n0;
            if (acc)
                for (int n = 0; n < nn; n++) yr[n] += j->bias[n0 + n];
            else
                memcpy(yr, j->bias + n0, (size_t)nn * sizeof(float));
        }
        beta = 1.0f;
    }
    if (j->kind == BUF_WT)   /* W stored as Wᵀ [K × N] */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, j->B, nn, j->K, 1.0f, j->x, j->ldx, j->W + n0, j->N,
                    beta, j->y + n0, j->ldy);
    else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, j->B, nn, j->K, 1.0f, j->x, j->ldx,
                    j->W + (size_t)n0 * j->K, j->K, beta, j->y + n0, j->ldy);
    cpu_gemm_activate(j->y + n0, j->ldy, j->B, nn, j->flags);   /* GELU, RELU2 or SIGMOID, if any */
}

static int cpu_matmul(backend *be, const backend_buf *x, size_t xo, int ldx, const backend_buf *W,
                      const backend_buf *bias, backend_buf *y, size_t yo, int ldy, int B, int N, int K,
                      int flags) {
    cpu *c = (cpu *)be;
    if (!backend_mm_flags_ok(flags, ldy, N)) return -EINVAL;
    if (W->kind == BUF_DOT) return dot_matmul(c, x->p + xo, ldx, W, bias ? bias->p : NULL, y->p + yo, ldy, B, N, K, flags);
    if (W->kind == BUF_QUANT)
        return cpu_quant_matmul(c->threads, c->qisa, (cpu_quant_type)W->wtype, x->p + xo, ldx, W->p,
                                bias ? bias->p : NULL, y->p + yo, ldy, B, N, K, flags, &c->qs);
    mm_job j = {x->p + xo, W->p, bias ? bias->p : NULL, y->p + yo, ldx, ldy, B, N, K, W->kind, flags, c->isa,
                (cpu_gemm_wtype)W->wtype, NULL, {0}};
    int parts = cpu_pool_size(c->threads);
    /* below ~16k multiply-adds (about 2 µs on one core) a fork-join, about a
     * microsecond, costs more than it saves; at 2^14 rather than 2^16 the
     * 192 × 192 products of a batch-1 step split too (step 171 → 147 µs) */
    if ((double)B * N * K < (double)(1 << 14)) parts = 1;
    if (W->kind == BUF_PACKED) {
        if (parts > cpu_gemm_panels(c->isa, N)) parts = cpu_gemm_panels(c->isa, N);
        claims_init(&j.claims, B, cpu_gemm_panels(c->isa, N), parts, 0);
        /* a half weight's widened panels (the mixer ops' scratch: ops do not overlap) */
        if (W->wtype != CPU_GEMM_F32 && !(j.scratch = cpu_tmp_get(c, (size_t)parts * cpu_gemm_scratch_floats(c->isa, K))))
            return -ENOMEM;
        cpu_pool_run(c->threads, mm_packed_part, &j, parts);
    } else {
        if (N < 16 * parts) parts = 1;
        cpu_pool_run(c->threads, mm_part, &j, parts);
    }
    return 0;
}

/* Work items of a per-channel recurrence: (run, channel slice). A run's rows
 * go in order through one session's state, but every channel's state is
 * its own, so with fewer runs than threads (one long prompt fed in chunks)
 * the channels are split too: the same arithmetic per element, in the same
 * order, on either thread. Slices are multiples of 16 channels (a whole
 * vector) or more; runs of a few rows (decode) are not split. */
static int chan_slices(const cpu *c, int d) {
    int n = cpu_pool_size(c->threads);
    if (c->nruns >= n || c->B < 8 * c->nruns) return 1;   /* decode: a row is too little to split */
    int s = (n + c->nruns - 1) / c->nruns;
    while (s > 1 && d / s < 16) s--;
    return s;
}

static void chan_range(int d, int s, int slices, int *c0, int *c1) {
    *c0 = s ? (int)((long)d * s / slices) & ~15 : 0;
    *c1 = s + 1 == slices ? d : (int)((long)d * (s + 1) / slices) & ~15;
}

typedef struct shift_job {
    cpu *c;
    const float *h, *mu;
    float *out;
    size_t off;
    int d, nmix, slices;
} shift_job;

/* One row's channels [0, n) of d: out[p·d + i] for p < nmix, then prev ← h. */
__attribute__((noinline)) static void shift_row(float *restrict out, float *restrict prev, const float *restrict h,
                                                const float *restrict mu, int d, int n, int nmix) {
    for (int p = 0; p < nmix; p++)
        for (int i = 0; i < n; i++) out[p * d + i] = lind_shift_mix(h[i], prev[i], mu[p * d + i]);
    for (int i = 0; i < n; i++) prev[i] = h[i];
}

/* Parts split (run, channel slice) items, never a run's rows: they go in
 * order through one state. */
static void shift_part(void *arg, int part, int nparts) {
    const shift_job *j = arg;
    int lo, hi, d = j->d;
    cpu_part_range(j->c->nruns * j->slices, part, nparts, &lo, &hi);
    for (int it = lo; it < hi; it++) {
        int k = it / j->slices, c0, c1;
        chan_range(d, it % j->slices, j->slices, &c0, &c1);
        for (int b = j->c->run[k]; b < j->c->run[k + 1]; b++)
            shift_row(j->out + (size_t)b * j->nmix * d + c0, (float *)(cpu_slot_ptr(j->c, j->c->slots[b]) + j->off) + c0,
                      j->h + (size_t)b * d + c0, j->mu + c0, d, c1 - c0, j->nmix);
    }
}

static int cpu_shift_mix(backend *be, const backend_buf *h, const backend_buf *mu, backend_buf *out,
                         size_t shift_off, int d, int nmix) {
    cpu *c = (cpu *)be;
    int slices = chan_slices(c, d);
    shift_job j = {c, h->p, mu->p, out->p, shift_off, d, nmix, slices};
    cpu_pool_run(c->threads, shift_part, &j,
                 cpu_row_parts(c, c->nruns * slices, (size_t)d * nmix * 2 * c->B / c->nruns / slices));
    return 0;
}

/* S ← γS + φk vᵀ and num_j = Σ_i φq_i S[i][j] for one head: i outer, j inner
 * over contiguous rows of S so it vectorizes; the same per-element operation
 * (lind_lin_s) and i-order as lind_lin_column() in kernels/mixer_math.h. */
__attribute__((noinline)) static void lin_head(double *restrict S, double *restrict num, const float *restrict phik,
                     const float *restrict phiq, const float *restrict v, double g, int dh) {
    for (int j = 0; j < dh; j++) num[j] = 0.0;
    for (int i = 0; i < dh; i++) {
        double *restrict Si = S + (size_t)i * dh;
        float pk = phik[i];
        double pq = (double)phiq[i];
        for (int j = 0; j < dh; j++) {
            double s = lind_lin_s(Si[j], g, pk, v[j]);
            Si[j] = s;
            num[j] += pq * s;
        }
    }
}

/* Scratch floats per part: φq and φk of a row (H·dh each), then fp64
 * numerators and z terms of a head (dh each, 8-byte aligned since H·dh·2
 * floats is even). */
static size_t lin_tmp_floats(int H, int dh) { return (size_t)2 * H * dh + 4 * (size_t)dh; }

typedef struct lin_job {
    cpu *c;
    const float *in, *gamma;
    float *out, *tmp;   /* tmp: lin_tmp_floats() per part */
    size_t off;
    int H, dh;
    float eps;
} lin_job;

/* φ over n values (both branches are computed, so the loop vectorizes). */
__attribute__((noinline)) static void phi_row(float *restrict out, const float *restrict x, int n) {
    for (int i = 0; i < n; i++) out[i] = lind_elu1(x[i]);
}

/* z ← γz + φk for one head, returning the denominator Σ_i φq_i z_i summed in
 * i order (the order of the CUDA kernel's reference); the updates vectorize,
 * the sum is a separate pass over term. */
__attribute__((noinline)) static double lin_z_head(double *restrict z, double *restrict term,
                                                   const float *restrict phik, const float *restrict phiq,
                                                   double g, int dh) {
    for (int i = 0; i < dh; i++) term[i] = lind_lin_z(&z[i], phik[i], phiq[i], g);
    double den = 0.0;
    for (int i = 0; i < dh; i++) den += term[i];
    return den;
}

__attribute__((noinline)) static void lin_out_head(float *restrict o, const double *restrict num, double den,
                                                   float eps, int dh) {
    for (int i = 0; i < dh; i++) o[i] = lind_lin_out(num[i], den, eps);
}

static void lin_part(void *arg, int part, int nparts) {
    const lin_job *j = arg;
    int lo, hi, H = j->H, dh = j->dh, hd = H * dh;
    cpu_part_range(j->c->nruns, part, nparts, &lo, &hi);
    float *phiq = j->tmp + (size_t)part * lin_tmp_floats(H, dh), *phik = phiq + hd;
    double *num = (double *)(phik + hd), *term = num + dh;
    for (int b = j->c->run[lo]; b < j->c->run[hi]; b++) {
        uint8_t *st = cpu_slot_ptr(j->c, j->c->slots[b]) + j->off;
        const float *q = j->in + (size_t)b * 3 * hd, *k = q + hd, *v = q + 2 * hd;
        phi_row(phiq, q, hd);
        phi_row(phik, k, hd);
        for (int h = 0; h < H; h++) {
            double *S = (double *)st + (size_t)h * dh * dh;
            double *z = (double *)st + (size_t)H * dh * dh + (size_t)h * dh;
            double g = j->gamma ? (double)j->gamma[h] : 1.0;
            double den = lin_z_head(z, term, phik + h * dh, phiq + h * dh, g, dh);
            lin_head(S, num, phik + h * dh, phiq + h * dh, v + h * dh, g, dh);
            lin_out_head(j->out + (size_t)b * hd + (size_t)h * dh, num, den, j->eps, dh);
        }
    }
}

static int cpu_linear_step(backend *be, const backend_buf *in, const backend_buf *gamma, backend_buf *out,
                           size_t state_off, int H, int dh, float eps) {
    cpu *c = (cpu *)be;
    int parts = cpu_row_parts(c, c->nruns, (size_t)H * dh * dh * c->B / c->nruns);
    float *t = cpu_tmp_get(c, (size_t)parts * lin_tmp_floats(H, dh));
    if (!t) return -ENOMEM;
    lin_job j = {c, in->p, gamma ? gamma->p : NULL, out->p, t, state_off, H, dh, eps};
    cpu_pool_run(c->threads, lin_part, &j, parts);
    return 0;
}

/* One session's AFT channels; restrict lets the loop vectorize. */
__attribute__((noinline)) static void aft_row(float *restrict o, double *restrict num, double *restrict den, double *restrict mx,
                    const float *restrict r, const float *restrict k, const float *restrict v,
                    const float *restrict w, const float *restrict u, int d) {
    for (int i = 0; i < d; i++)
        o[i] = lind_sigmoid(r[i]) * lind_aft_channel(&num[i], &den[i], &mx[i], k[i], v[i], w[i], u[i]);
}

typedef struct aft_job {
    cpu *c;
    const float *in, *w, *u;
    float *out;
    size_t off;
    int d, slices;
} aft_job;

/* Parts split (run, channel slice) items, as shift_part. */
static void aft_part(void *arg, int part, int nparts) {
    const aft_job *j = arg;
    int lo, hi, d = j->d;
    cpu_part_range(j->c->nruns * j->slices, part, nparts, &lo, &hi);
    for (int it = lo; it < hi; it++) {
        int k = it / j->slices, c0, c1;
        chan_range(d, it % j->slices, j->slices, &c0, &c1);
        for (int b = j->c->run[k]; b < j->c->run[k + 1]; b++) {
            double *num = (double *)(cpu_slot_ptr(j->c, j->c->slots[b]) + j->off), *den = num + d, *mx = den + d;
            const float *r = j->in + (size_t)b * 3 * d;
            aft_row(j->out + (size_t)b * d + c0, num + c0, den + c0, mx + c0, r + c0, r + d + c0, r + 2 * d + c0,
                    j->w + c0, j->u + c0, c1 - c0);
        }
    }
}

static int cpu_aft_step(backend *be, const backend_buf *in, const backend_buf *w, const backend_buf *u,
                        backend_buf *out, size_t state_off, int d) {
    cpu *c = (cpu *)be;
    const float *wp = w ? w->p : NULL, *up = u ? u->p : NULL;
    if (!wp || !up) {   /* AFT-simple: w = u = 0 */
        float *zeros = cpu_tmp_get(c, (size_t)d);
        if (!zeros) return -ENOMEM;
        memset(zeros, 0, (size_t)d * sizeof *zeros);
        if (!wp) wp = zeros;
        if (!up) up = zeros;
    }
    int slices = chan_slices(c, d);
    aft_job j = {c, in->p, wp, up, out->p, state_off, d, slices};
    cpu_pool_run(c->threads, aft_part, &j, cpu_row_parts(c, c->nruns * slices, (size_t)d * 16 * c->B / c->nruns / slices));
    return 0;
}

/* ---- short convolution and the gated delta rule --------------------------- */

typedef struct conv_job {
    cpu *c;
    const float *in, *w;
    float *out;
    size_t ring_off, idx_off;
    int ldi, ldo, n, K, silu;
} conv_job;

/* One row of one session: out[c] for c < n, ring[c][p] ← in[c]. */
__attribute__((noinline)) static void conv_row(float *out, const float *in, float *restrict ring,
                                               const float *restrict w, int p, int n, int K, int silu) {
    int K1 = K - 1;
    for (int c = 0; c < n; c++) {
        float x = in[c];   /* read before out[c] is written: out may be in */
        float y = lind_conv_channel(w + (size_t)c * K, ring + (size_t)c * K1, p, x, K);
        ring[(size_t)c * K1 + p] = x;
        out[c] = silu ? lind_silu(y) : y;
    }
}

/* Parts split runs, never a run: its rows go in order through one ring. */
static void conv_part(void *arg, int part, int nparts) {
    const conv_job *j = arg;
    int lo, hi;
    cpu_part_range(j->c->nruns, part, nparts, &lo, &hi);
    for (int k = lo; k < hi; k++) {
        uint8_t *st = cpu_slot_ptr(j->c, j->c->slots[j->c->run[k]]);
        float *ring = (float *)(st + j->ring_off);
        int32_t idx;
        memcpy(&idx, st + j->idx_off, sizeof idx);
        int p = (int)((uint32_t)idx % (uint32_t)(j->K - 1));
        for (int b = j->c->run[k]; b < j->c->run[k + 1]; b++) {
            conv_row(j->out + (size_t)b * j->ldo, j->in + (size_t)b * j->ldi, ring, j->w, p, j->n, j->K, j->silu);
            p = p + 1 == j->K - 1 ? 0 : p + 1;
        }
        idx = p;
        memcpy(st + j->idx_off, &idx, sizeof idx);
    }
}

static int cpu_short_conv(backend *be, const backend_buf *in, int ldi, backend_buf *out, int ldo, const backend_buf *w,
                          int n, int K, size_t ring_off, size_t idx_off, int silu) {
    cpu *c = (cpu *)be;
    if (K < 2 || n < 0 || (in == out && ldi != ldo)) return -EINVAL;
    conv_job j = {c, in->p, w->p, out->p, ring_off, idx_off, ldi, ldo, n, K, silu};
    cpu_pool_run(c->threads, conv_part, &j, cpu_row_parts(c, c->nruns, (size_t)n * K * 2 * c->B / c->nruns));
    return 0;
}

/* Scratch doubles per part: normalized k and q, S·k then u, o (dh each). */
static size_t delta_tmp_doubles(int dh) { return 4 * (size_t)dh; }

typedef struct delta_job {
    cpu *c;
    const float *in, *A, *bias, *norm_w;
    float *out;
    double *tmp;   /* delta_tmp_doubles() per part */
    size_t off;
    int H, dh;
    float eps;
} delta_job;

/* x/‖x‖·scale over one head's dh values, as doubles. */
static void l2_head(double *restrict y, const float *restrict x, double scale, int dh) {
    double ss = 0.0;
    for (int i = 0; i < dh; i++) ss += (double)x[i] * (double)x[i];
    double rs = lind_l2_rscale(ss) * scale;
    for (int i = 0; i < dh; i++) y[i] = (double)x[i] * rs;
}

/* One row of one head: S updated in place, o = S_t q. Two passes over S,
 * i outer and j inner over contiguous rows so they vectorize: (S k)_j, then
 * the update with the o_j sums — the operations and i-order of
 * lind_delta_column(). */
__attribute__((noinline)) static void delta_head(double *restrict S, double *restrict sku, double *restrict o,
                                                 const double *restrict k, const double *restrict q,
                                                 const float *restrict v, double alpha, double beta, int dh) {
    for (int j = 0; j < dh; j++) sku[j] = 0.0;
    for (int i = 0; i < dh; i++) {
        const double *restrict Si = S + (size_t)i * dh;
        double ki = k[i];
        for (int j = 0; j < dh; j++) sku[j] += Si[j] * ki;
    }
    for (int j = 0; j < dh; j++) sku[j] = lind_delta_u(sku[j], v[j], alpha, beta);
    for (int j = 0; j < dh; j++) o[j] = 0.0;
    for (int i = 0; i < dh; i++) {
        double *restrict Si = S + (size_t)i * dh;
        double ki = k[i], qi = q[i];
        for (int j = 0; j < dh; j++) {
            double s = lind_delta_s(Si[j], alpha, ki, sku[j]);
            Si[j] = s;
            o[j] += qi * s;
        }
    }
}

/* Work units are (run, head) pairs: a head of a session is independent of
 * its other heads, and a run's rows go through it in order. */
static void delta_part(void *arg, int part, int nparts) {
    const delta_job *j = arg;
    int H = j->H, dh = j->dh, hd = H * dh, lo, hi;
    cpu_part_range(j->c->nruns * H, part, nparts, &lo, &hi);
    double *kn = j->tmp + (size_t)part * delta_tmp_doubles(dh), *qn = kn + dh, *sku = qn + dh, *o = sku + dh;
    double qscale = 1.0 / sqrt((double)dh);
    size_t ld = (size_t)3 * hd + 2 * (size_t)H;
    for (int unit = lo; unit < hi; unit++) {
        int run = unit / H, h = unit % H;
        for (int b = j->c->run[run]; b < j->c->run[run + 1]; b++) {
            double *S = (double *)(cpu_slot_ptr(j->c, j->c->slots[b]) + j->off) + (size_t)h * dh * dh;
            const float *row = j->in + (size_t)b * ld;
            l2_head(qn, row + h * dh, qscale, dh);
            l2_head(kn, row + hd + h * dh, 1.0, dh);
            double beta = lind_delta_beta(row[3 * hd + h]);
            double alpha = lind_delta_alpha(row[3 * hd + H + h], j->A[h], j->bias[h]);
            delta_head(S, sku, o, kn, qn, row + 2 * hd + h * dh, alpha, beta, dh);
            double ss = 0.0;
            for (int i = 0; i < dh; i++) ss += o[i] * o[i];
            double rs = lind_rms_rscale(ss, dh, j->eps);
            float *out = j->out + (size_t)b * hd + (size_t)h * dh;
            for (int i = 0; i < dh; i++) out[i] = lind_rms_apply(o[i], rs, j->norm_w[i]);
        }
    }
}

static int cpu_delta_step(backend *be, const backend_buf *in, const backend_buf *gate, const backend_buf *norm_w,
                          backend_buf *out, size_t state_off, int H, int dh, float eps) {
    cpu *c = (cpu *)be;
    int units = c->nruns * H;
    int parts = cpu_row_parts(c, units, (size_t)4 * dh * dh * c->B / c->nruns);
    double *t = (double *)cpu_tmp_get(c, 2 * (size_t)parts * delta_tmp_doubles(dh));
    if (!t) return -ENOMEM;
    delta_job j = {c, in->p, gate->p, gate->p + H, norm_w->p, out->p, t, state_off, H, dh, eps};
    cpu_pool_run(c->threads, delta_part, &j, parts);
    return 0;
}

/* ---- sliding-window attention and AFT-local / AFT-conv --------------------- */

typedef struct win_job {
    cpu *c;
    const float *in, *slopes;
    float *out, *tmp;   /* tmp: 4·dh floats per part (q rotated, dh doubles) */
    size_t ring_off, glob_off, pos_off;
    int H, dh, w, dil, g;
    float rope_base;
} win_job;

static uint64_t slot_u64(const uint8_t *st, size_t off) {
    uint64_t v;
    memcpy(&v, st + off, sizeof v);
    return v;
}

/* Work units are (run, head) pairs: heads touch disjoint columns of the
 * rings, a run's rows go through one head in order. The position is only
 * read here; cpu_window_step advances it after every unit is done. */
static void win_part(void *arg, int part, int nparts) {
    const win_job *j = arg;
    int H = j->H, dh = j->dh, hd = H * dh, lo, hi;
    long L = (long)j->w * j->dil;
    cpu_part_range(j->c->nruns * H, part, nparts, &lo, &hi);
    float *q = j->tmp + (size_t)part * 4 * dh;
    double *acc = (double *)(q + 2 * dh);
    for (int unit = lo; unit < hi; unit++) {
        int run = unit / H, h = unit % H, b0 = j->c->run[run];
        uint8_t *st = cpu_slot_ptr(j->c, j->c->slots[b0]);
        float *rk = (float *)(st + j->ring_off) + (size_t)h * dh, *rv = rk + (size_t)L * hd;
        float *gk = (float *)(st + j->glob_off) + (size_t)h * dh, *gv = gk + (size_t)j->g * hd;
        uint64_t t0 = slot_u64(st, j->pos_off);
        double slope = j->rope_base > 0 ? 0.0 : (double)j->slopes[h];
        for (int b = b0; b < j->c->run[run + 1]; b++) {
            uint64_t t = t0 + (uint64_t)(b - b0);
            const float *row = j->in + (size_t)b * 3 * hd + (size_t)h * dh;
            float *kd = rk + (size_t)(t % (uint64_t)L) * hd, *vd = rv + (size_t)(t % (uint64_t)L) * hd;
            if (j->rope_base > 0) {
                lind_rope(kd, row + hd, t, dh, j->rope_base);
                lind_rope(q, row, t, dh, j->rope_base);
            } else {
                memcpy(kd, row + hd, (size_t)dh * sizeof *kd);
                memcpy(q, row, (size_t)dh * sizeof *q);
            }
            memcpy(vd, row + 2 * hd, (size_t)dh * sizeof *vd);
            if (t < (uint64_t)j->g) {
                memcpy(gk + (size_t)t * hd, kd, (size_t)dh * sizeof *kd);
                memcpy(gv + (size_t)t * hd, vd, (size_t)dh * sizeof *vd);
            }
            lind_window_head(j->out + (size_t)b * hd + (size_t)h * dh, acc, q, rk, rv, gk, gv, hd, t, j->w, j->dil,
                             j->g, slope, dh);
        }
    }
}

/* ---- retention (RetNet) -----------------------------------------------------
 * Split by (run, head) like delta_step: a session's heads are independent, a
 * run's rows go in order. The S update and column sums are lin_head() with
 * φ = identity (lind_lin_s, the i-order of lind_lin_column). */
typedef struct ret_job {
    cpu *c;
    const float *in, *gamma, *norm;
    float *out;
    double *tmp;   /* dh doubles per part */
    size_t off;
    int H, dh;
    float eps;
} ret_job;

static void ret_part(void *arg, int part, int nparts) {
    const ret_job *j = arg;
    int H = j->H, dh = j->dh, hd = H * dh, lo, hi;
    cpu_part_range(j->c->nruns * H, part, nparts, &lo, &hi);
    double *o = j->tmp + (size_t)part * dh, scale = 1.0 / sqrt((double)dh);
    for (int unit = lo; unit < hi; unit++) {
        int run = unit / H, h = unit % H;
        double g = (double)j->gamma[h];
        for (int b = j->c->run[run]; b < j->c->run[run + 1]; b++) {
            double *S = (double *)(cpu_slot_ptr(j->c, j->c->slots[b]) + j->off) + (size_t)h * dh * dh;
            const float *row = j->in + (size_t)b * 4 * hd;
            lin_head(S, o, row + hd + h * dh, row + h * dh, row + 2 * hd + h * dh, g, dh);
            double mean = 0.0, var = 0.0;
            for (int i = 0; i < dh; i++) {
                o[i] *= scale;
                mean += o[i];
            }
            mean /= dh;
            for (int i = 0; i < dh; i++) var += (o[i] - mean) * (o[i] - mean);
            double rs = lind_gn_rstd(var / dh, j->eps);
            float *out = j->out + (size_t)b * hd + (size_t)h * dh;
            const float *gt = row + 3 * hd + h * dh, *w = j->norm + h * dh, *bias = j->norm + hd + h * dh;
            for (int i = 0; i < dh; i++) out[i] = lind_retention_out(o[i], mean, rs, w[i], bias[i], gt[i]);
        }
    }
}

static int cpu_retention_step(backend *be, const backend_buf *in, const backend_buf *gamma, const backend_buf *norm,
                              backend_buf *out, size_t state_off, int H, int dh, float eps) {
    cpu *c = (cpu *)be;
    int parts = cpu_row_parts(c, c->nruns * H, (size_t)2 * dh * dh * c->B / c->nruns);
    double *t = (double *)cpu_tmp_get(c, 2 * (size_t)parts * dh);
    if (!t) return -ENOMEM;
    ret_job j = {c, in->p, gamma->p, norm->p, out->p, t, state_off, H, dh, eps};
    cpu_pool_run(c->threads, ret_part, &j, parts);
    return 0;
}

/* ---- FAVOR+ features (row-wise) ---------------------------------------------- */
typedef struct favor_job {
    cpu *c;
    const float *in, *omega;
    float *out;
    int ldi, ldo, H, dh, m;
    float ck;
} favor_job;

static void favor_part(void *arg, int part, int nparts) {
    const favor_job *j = arg;
    int lo, hi;
    cpu_part_range(j->c->B, part, nparts, &lo, &hi);
    for (int r = lo; r < hi; r++)
        for (int p = 0; p < 2; p++)
            for (int h = 0; h < j->H; h++)
                lind_favor_head(j->out + (size_t)r * j->ldo + (size_t)(p * j->H + h) * j->m,
                                j->in + (size_t)r * j->ldi + (size_t)(p * j->H + h) * j->dh, j->omega, j->dh, j->m,
                                p == 0, j->ck);
}

static int cpu_favor_features(backend *be, const backend_buf *in, int ldi, const backend_buf *omega,
                              backend_buf *out, int ldo, int H, int dh, int m, float ck) {
    cpu *c = (cpu *)be;
    favor_job j = {c, in->p, omega->p, out->p, ldi, ldo, H, dh, m, ck};
    cpu_pool_run(c->threads, favor_part, &j, cpu_row_parts(c, c->B, (size_t)6 * H * m * dh));
    return 0;
}

/* ---- cosFormer -----------------------------------------------------------------
 * Split by (run, head); each (S, z) pair through lin_z_head()/lin_head() with
 * γ = 1 and the pair's features, the pairs' sums added in pair order. The
 * position counters are read by every head of a run and advanced after the
 * parallel part. */
static size_t cos_tmp_floats(int dh) { return (size_t)2 * LIND_COS_PAIRS_MAX * dh + 4 * (size_t)dh; }

typedef struct cos_job {
    cpu *c;
    const float *in;
    float *out, *tmp;
    size_t off, pos_off;
    int H, dh, M, periodic;
    float eps;
} cos_job;

static void cos_part(void *arg, int part, int nparts) {
    const cos_job *j = arg;
    int H = j->H, dh = j->dh, hd = H * dh, P = j->periodic ? 3 : 2, lo, hi;
    cpu_part_range(j->c->nruns * H, part, nparts, &lo, &hi);
    float *phiq = j->tmp + (size_t)part * cos_tmp_floats(dh), *phik = phiq + LIND_COS_PAIRS_MAX * dh;
    double *num = (double *)(phik + LIND_COS_PAIRS_MAX * dh), *term = num + dh;
    for (int unit = lo; unit < hi; unit++) {
        int run = unit / H, h = unit % H, r0 = j->c->run[run];
        uint8_t *st = cpu_slot_ptr(j->c, j->c->slots[r0]);
        int64_t pos;
        memcpy(&pos, st + j->pos_off, sizeof pos);
        for (int b = r0; b < j->c->run[run + 1]; b++) {
            const float *q = j->in + (size_t)b * 3 * hd + h * dh, *k = q + hd, *v = q + 2 * hd;
            /* unsigned sum: any stored position (periodic form) wraps instead of overflowing */
            double th = lind_cos_theta((long long)(int64_t)((uint64_t)pos + (uint64_t)(b - r0)), j->M, j->periodic),
                   den = 0.0, acc[1024];
            for (int i = 0; i < dh; i++) acc[i] = 0.0;
            for (int p = 0; p < P; p++) {
                float mult = lind_cos_mult(th, p);
                for (int i = 0; i < dh; i++) {
                    phiq[i] = lind_cos_feature(q[i], mult);
                    phik[i] = lind_cos_feature(k[i], mult);
                }
                double *S = (double *)(st + j->off) + ((size_t)p * H + h) * dh * dh;
                double *z = (double *)(st + j->off) + (size_t)P * hd * dh + ((size_t)p * H + h) * dh;
                den += lin_z_head(z, term, phik, phiq, 1.0, dh);
                lin_head(S, num, phik, phiq, v, 1.0, dh);
                for (int i = 0; i < dh; i++) acc[i] += num[i];
            }
            lin_out_head(j->out + (size_t)b * hd + (size_t)h * dh, acc, den, j->eps, dh);
        }
    }
}

static int cpu_window_step(backend *be, const backend_buf *in, const backend_buf *slopes, backend_buf *out,
                           size_t ring_off, size_t glob_off, size_t pos_off, int H, int dh, int w, int dil, int g,
                           float rope_base) {
    cpu *c = (cpu *)be;
    if (H < 1 || dh < 1 || dh > 256 || w < 1 || dil < 1 || g < 0 || (rope_base > 0 && dh % 2) ||
        (!slopes && !(rope_base > 0)))
        return -EINVAL;
    int units = c->nruns * H;
    int parts = cpu_row_parts(c, units, (size_t)4 * dh * (size_t)(w + g) * c->B / c->nruns);
    float *t = cpu_tmp_get(c, (size_t)parts * 4 * dh);
    if (!t) return -ENOMEM;
    win_job j = {c, in->p, slopes ? slopes->p : NULL, out->p, t, ring_off, glob_off, pos_off, H, dh, w, dil, g,
                 rope_base};
    cpu_pool_run(c->threads, win_part, &j, parts);
    for (int k = 0; k < c->nruns; k++) {
        uint8_t *st = cpu_slot_ptr(c, c->slots[c->run[k]]);
        uint64_t pos = slot_u64(st, pos_off) + (uint64_t)(c->run[k + 1] - c->run[k]);
        memcpy(st + pos_off, &pos, sizeof pos);
    }
    return 0;
}

static int cpu_cosformer_step(backend *be, const backend_buf *in, backend_buf *out, size_t state_off, size_t pos_off,
                              int H, int dh, int M, int periodic, float eps) {
    cpu *c = (cpu *)be;
    if (dh > 1024 || M < 1) return -EINVAL;
    /* the horizon form's refusal; the periodic form reads any position
     * (reduced mod 2M, C's remainder: a negative one is a valid angle too) */
    for (int r = 0; r < c->nruns && !periodic; r++) {
        int64_t pos;
        memcpy(&pos, cpu_slot_ptr(c, c->slots[c->run[r]]) + pos_off, sizeof pos);
        if (pos < 0) return -EINVAL;   /* not a count of tokens: a damaged state */
        if (pos + (c->run[r + 1] - c->run[r]) > M) return -EOVERFLOW;
    }
    int parts = cpu_row_parts(c, c->nruns * H, (size_t)3 * dh * dh * c->B / c->nruns);
    float *t = cpu_tmp_get(c, (size_t)parts * cos_tmp_floats(dh));
    if (!t) return -ENOMEM;
    cos_job j = {c, in->p, out->p, t, state_off, pos_off, H, dh, M, periodic, eps};
    cpu_pool_run(c->threads, cos_part, &j, parts);
    for (int r = 0; r < c->nruns; r++) {
        uint8_t *p = cpu_slot_ptr(c, c->slots[c->run[r]]) + pos_off;
        int64_t pos;
        memcpy(&pos, p, sizeof pos);
        pos = (int64_t)((uint64_t)pos + (uint64_t)(c->run[r + 1] - c->run[r]));
        memcpy(p, &pos, sizeof pos);
    }
    return 0;
}

typedef struct aftw_job {
    cpu *c;
    const float *in, *w;
    float *out;
    size_t acc_off, ring_off, pos_off;
    int d, s, H;
} aftw_job;

/* Parts split runs, never a run: the position is per session. */
static void aftw_part(void *arg, int part, int nparts) {
    const aftw_job *j = arg;
    int lo, hi, d = j->d, s = j->s, S1 = s - 1, per = d / j->H;
    cpu_part_range(j->c->nruns, part, nparts, &lo, &hi);
    for (int k = lo; k < hi; k++) {
        int b0 = j->c->run[k];
        uint8_t *st = cpu_slot_ptr(j->c, j->c->slots[b0]);
        double *num = (double *)(st + j->acc_off), *den = num + d, *mx = den + d;
        float *rk = (float *)(st + j->ring_off), *rv = rk + (size_t)d * S1;
        uint64_t t0 = slot_u64(st, j->pos_off);
        for (int b = b0; b < j->c->run[k + 1]; b++) {
            uint64_t t = t0 + (uint64_t)(b - b0);
            const float *row = j->in + (size_t)b * 3 * d;
            float *o = j->out + (size_t)b * d;
            for (int c = 0; c < d; c++)
                o[c] = lind_sigmoid(row[c]) *
                       (float)lind_aftw_channel(&num[c], &den[c], &mx[c], rk + (size_t)c * S1, rv + (size_t)c * S1, t,
                                                row[d + c], row[2 * d + c], j->w + (size_t)(c / per) * s, s);
        }
        uint64_t pos = t0 + (uint64_t)(j->c->run[k + 1] - b0);
        memcpy(st + j->pos_off, &pos, sizeof pos);
    }
}

static int cpu_aft_window_step(backend *be, const backend_buf *in, const backend_buf *w, backend_buf *out,
                               size_t acc_off, size_t ring_off, size_t pos_off, int d, int s, int H) {
    cpu *c = (cpu *)be;
    if (s < 2 || d < 1 || H < 1 || d % H) return -EINVAL;
    aftw_job j = {c, in->p, w->p, out->p, acc_off, ring_off, pos_off, d, s, H};
    cpu_pool_run(c->threads, aftw_part, &j, cpu_row_parts(c, c->nruns, (size_t)d * s * 8 * c->B / c->nruns));
    return 0;
}

/* ---- causal Linformer ---------------------------------------------------------
 * Split by (run, head); positions checked before and advanced after, as
 * cosformer_step. */
typedef struct linf_job {
    cpu *c;
    const float *in, *ef;
    float *out;
    double *tmp;   /* kp doubles per part */
    size_t off, pos_off;
    int H, dh, kp, N;
} linf_job;

static void linf_part(void *arg, int part, int nparts) {
    const linf_job *j = arg;
    int H = j->H, dh = j->dh, hd = H * dh, kp = j->kp, lo, hi;
    cpu_part_range(j->c->nruns * H, part, nparts, &lo, &hi);
    double *sp = j->tmp + (size_t)part * kp;
    for (int unit = lo; unit < hi; unit++) {
        int run = unit / H, h = unit % H, r0 = j->c->run[run];
        uint8_t *st = cpu_slot_ptr(j->c, j->c->slots[r0]);
        int64_t pos;
        memcpy(&pos, st + j->pos_off, sizeof pos);
        double *Kb = (double *)(st + j->off) + (size_t)h * kp * dh, *Vb = Kb + (size_t)hd * kp;
        for (int b = r0; b < j->c->run[run + 1]; b++) {
            const float *q = j->in + (size_t)b * 3 * hd + h * dh, *k = q + hd, *v = q + 2 * hd;
            size_t t = (size_t)(pos + (b - r0));
            const float *e = j->ef + t * kp, *f = j->ef + ((size_t)j->N + t) * kp;
            double mx = -1e308, sum = 0.0;
            for (int p = 0; p < kp; p++) {
                sp[p] = lind_linf_row(Kb + (size_t)p * dh, Vb + (size_t)p * dh, k, v, q, e[p], f[p], dh);
                mx = sp[p] > mx ? sp[p] : mx;
            }
            for (int p = 0; p < kp; p++) {
                sp[p] = lind_exp(sp[p] - mx);
                sum += sp[p];
            }
            float *o = j->out + (size_t)b * hd + (size_t)h * dh;
            for (int i = 0; i < dh; i++) {
                double acc = 0.0;
                for (int p = 0; p < kp; p++) acc += sp[p] * Vb[(size_t)p * dh + i];
                o[i] = (float)(acc / sum);
            }
        }
    }
}

static int cpu_linformer_step(backend *be, const backend_buf *in, const backend_buf *ef, backend_buf *out,
                              size_t state_off, size_t pos_off, int H, int dh, int kp, int N) {
    cpu *c = (cpu *)be;
    for (int r = 0; r < c->nruns; r++) {
        int64_t pos;
        memcpy(&pos, cpu_slot_ptr(c, c->slots[c->run[r]]) + pos_off, sizeof pos);
        if (pos < 0) return -EINVAL;   /* not a count of tokens: a damaged state */
        if (pos + (c->run[r + 1] - c->run[r]) > N) return -EOVERFLOW;
    }
    int parts = cpu_row_parts(c, c->nruns * H, (size_t)4 * kp * dh * c->B / c->nruns);
    double *t = (double *)cpu_tmp_get(c, 2 * (size_t)parts * kp);
    if (!t) return -ENOMEM;
    linf_job j = {c, in->p, ef->p, out->p, t, state_off, pos_off, H, dh, kp, N};
    cpu_pool_run(c->threads, linf_part, &j, parts);
    for (int r = 0; r < c->nruns; r++) {
        uint8_t *p = cpu_slot_ptr(c, c->slots[c->run[r]]) + pos_off;
        int64_t pos;
        memcpy(&pos, p, sizeof pos);
        pos = (int64_t)((uint64_t)pos + (uint64_t)(c->run[r + 1] - c->run[r]));
        memcpy(p, &pos, sizeof pos);
    }
    return 0;
}

/* ---- row helpers ------------------------------------------------------------ */

static int cpu_gather_rows(backend *be, const backend_buf *src, const int *rows, int n, backend_buf *dst, int d) {
    cpu *c = (cpu *)be;
    for (int i = 0; i < n; i++) {
        if (rows[i] < 0 || rows[i] >= c->B) return -ERANGE;
        memcpy(dst->p + (size_t)i * d, src->p + (size_t)rows[i] * d, (size_t)d * sizeof(float));
    }
    return 0;
}

static int cpu_scale_rows(backend *be, backend_buf *x, int d, float s) {
    cpu *c = (cpu *)be;
    size_t n = (size_t)c->B * (size_t)d;
    float *restrict p = x->p;
    for (size_t i = 0; i < n; i++) p[i] *= s;
    return 0;
}

__attribute__((noinline)) static void gated_row(float *restrict x, const float *restrict g, const float *restrict v,
                                                int d) {
    for (int i = 0; i < d; i++) x[i] += g[i] * v[i];
}

static int cpu_gated_add(backend *be, backend_buf *x, const backend_buf *g, size_t go, int ldg, const backend_buf *v,
                         size_t vo, int ldv, int d) {
    cpu *c = (cpu *)be;
    for (int r = 0; r < c->B; r++)
        gated_row(x->p + (size_t)r * d, g->p + go + (size_t)r * ldg, v->p + vo + (size_t)r * ldv, d);
    return 0;
}

/* The largest exponent field of a row is all ones iff the row holds a NaN
 * or ±inf; an unsigned max reduction vectorizes (no float compares). */
__attribute__((noinline)) static int row_nonfinite(const float *restrict x, int d) {
    uint32_t top = 0;
    for (int i = 0; i < d; i++) {
        uint32_t u;
        memcpy(&u, &x[i], sizeof u);
        u &= 0x7f800000u;
        top = u > top ? u : top;
    }
    return top == 0x7f800000u;
}

static int cpu_rows_nonfinite(backend *be, const backend_buf *x, int d, unsigned char *bad) {
    cpu *c = (cpu *)be;
    for (int r = 0; r < c->B; r++) bad[r] = (unsigned char)row_nonfinite(x->p + (size_t)r * d, d);
    return 0;
}

static void cpu_free(backend *be) {
    cpu *c = (cpu *)be;
    if (!c) return;
    free(c->pool);
    free(c->slots);
    free(c->tokens);
    free(c->run);
    free(c->tmp);
    free(c->xb);
    cpu_quant_scratch_free(&c->qs);
    cpu_pool_free(c->threads);
    free(c);
}

/* BACKEND_COMPUTE_BF16 needs the vdpbf16ps kernels (AVX512_BF16) and the
 * AVX-512 packed GEMM (not LIND_CPU_GEMM=avx2/openblas); there is no
 * emulation (it would not give the instruction's results bit for bit). */
static int cpu_set_compute(backend *be, int mode, char *err, size_t errlen) {
    cpu *c = (cpu *)be;
    if (mode == BACKEND_COMPUTE_F32) {
        c->dot = 0;
        return 0;
    }
    if (mode != BACKEND_COMPUTE_BF16) {
        snprintf(err, errlen, "backend cpu: unknown compute mode %d", mode);
        return -EINVAL;
    }
    if (!cpu_gemm_dot_supported()) {
        snprintf(err, errlen, "backend cpu: bf16 compute needs a CPU with AVX512_BF16 (vdpbf16ps); this one (%s) "
                 "has none: run without --compute bf16", c->device);
        return -ENOTSUP;
    }
    if (c->isa != CPU_GEMM_AVX512) {
        snprintf(err, errlen, "backend cpu: bf16 compute runs on the AVX-512 packed GEMM, not %s "
                 "(unset LIND_CPU_GEMM)", c->isa == CPU_GEMM_NONE ? "OpenBLAS" : cpu_gemm_isa_name(c->isa));
        return -ENOTSUP;
    }
    c->dot = 1;
    return 0;
}

static const backend_ops cpu_ops = {
    .name = "cpu",
    .free = cpu_free,
    .device_name = cpu_device_name,
    .buf_new = cpu_buf_new,
    .buf_free = cpu_buf_free,
    .buf_upload = cpu_buf_upload,
    .buf_download = cpu_buf_download,
    .weight_new = cpu_weight_new,
    .slots_reserve = cpu_slots_reserve,
    .slot_zero = cpu_slot_zero,
    .slot_read = cpu_slot_read,
    .slot_write = cpu_slot_write,
    .begin_step = cpu_begin_step,
    .embed = cpu_embed,
    .layernorm = cpu_layernorm,
    .matmul = cpu_matmul,
    .shift_mix = cpu_shift_mix,
    .linear_step = cpu_linear_step,
    .aft_step = cpu_aft_step,
    .gather_rows = cpu_gather_rows,
    .scale_rows = cpu_scale_rows,
    .gated_add = cpu_gated_add,
    .short_conv = cpu_short_conv,
    .delta_step = cpu_delta_step,
    .weight_new_half = cpu_weight_new_half,
    .window_step = cpu_window_step,
    .aft_window_step = cpu_aft_window_step,
    .retention_step = cpu_retention_step,
    .favor_features = cpu_favor_features,
    .cosformer_step = cpu_cosformer_step,
    .linformer_step = cpu_linformer_step,
    .rwkv7_step = cpu_rwkv7_step,
    .mamba2_step = cpu_mamba2_step,
    .rmsnorm = cpu_rmsnorm,
    .rows_nonfinite = cpu_rows_nonfinite,
    .set_compute = cpu_set_compute,
    .weight_new_quant = cpu_weight_new_quant,
};

/* "model name" from /proc/cpuinfo, else "cpu". */
static void read_cpu_name(char *out, size_t n) {
    snprintf(out, n, "cpu");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, "model name", 10)) {
            char *p = strchr(line, ':');
            if (p) {
                p++;
                while (*p == ' ') p++;
                p[strcspn(p, "\n")] = 0;
                snprintf(out, n, "%s", p);
            }
            break;
        }
    }
    fclose(f);
}

int backend_cpu_new(const backend_opts *opts, backend **out, char *err, size_t errlen) {
    *out = NULL;
    backend_opts defaults;
    if (!opts) {
        backend_opts_default(&defaults);
        opts = &defaults;
    }
    if (opts->threads < 0 || opts->threads > BACKEND_THREADS_MAX) {
        snprintf(err, errlen, "backend cpu: %d threads: out of range (1..%d, or 0 for every CPU)", opts->threads,
                 BACKEND_THREADS_MAX);
        return -EINVAL;
    }
    cpu *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, errlen, "backend cpu: out of memory");
        return -ENOMEM;
    }
    c->base.ops = &cpu_ops;
    /* Threads: opts->threads, else every online CPU. The pool splits
     * every op, GEMMs included, so OpenBLAS itself runs single-threaded
     * (its own threads would spin against ours between calls). */
    long nt = opts->threads > 0 ? opts->threads : sysconf(_SC_NPROCESSORS_ONLN);
    if (nt < 1) nt = 1;
    if (nt > BACKEND_THREADS_MAX) nt = BACKEND_THREADS_MAX;
    if (cpu_pool_new((int)nt, &c->threads) < 0) {
        free(c);
        snprintf(err, errlen, "backend cpu: cannot start %ld threads", nt);
        return -EAGAIN;
    }
    openblas_set_num_threads(1);
    /* opts->cpu_gemm picks the matrix kernel (for comparisons): "openblas",
     * "avx2", "avx512"; NULL or empty, the best this CPU runs. */
    const char *g = opts->cpu_gemm;
    c->isa = cpu_gemm_detect();
    if (g && *g) {
        cpu_gemm_isa want = !strcmp(g, "openblas") ? CPU_GEMM_NONE
                            : !strcmp(g, "avx2")   ? CPU_GEMM_AVX2
                            : !strcmp(g, "avx512") ? CPU_GEMM_AVX512
                                                   : (cpu_gemm_isa)-1;
        if ((int)want < 0 || !cpu_gemm_supported(want)) {
            snprintf(err, errlen, "backend cpu: GEMM kernel \"%s\": %s", g,
                     (int)want < 0 ? "unknown (openblas, avx2 or avx512)" : "this CPU cannot run that kernel");
            cpu_free(&c->base);
            return -EINVAL;
        }
        c->isa = want;
    }
    /* quantized products: VNNI with the AVX-512 kernel (AVX2 on an AVX-512
     * CPU without VNNI), AVX2 with AVX2, portable C with OpenBLAS */
    c->qisa = c->isa == CPU_GEMM_NONE ? CPU_QUANT_C
              : c->isa == CPU_GEMM_AVX512 && cpu_quant_supported(CPU_QUANT_VNNI) ? CPU_QUANT_VNNI
              : cpu_quant_supported(CPU_QUANT_AVX2) ? CPU_QUANT_AVX2 : CPU_QUANT_C;
    read_cpu_name(c->device, sizeof c->device);
    size_t dl = strlen(c->device);
    if (c->isa == CPU_GEMM_NONE)
        snprintf(c->device + dl, sizeof c->device - dl, ", %ld threads, OpenBLAS GEMM", nt);
    else
        snprintf(c->device + dl, sizeof c->device - dl, ", %ld threads, %s packed GEMM", nt,
                 cpu_gemm_isa_name(c->isa));
    *out = &c->base;
    return 0;
}
