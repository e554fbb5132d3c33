/* kernels/cpu/backend_cpu.c — the CPU backend: buffers, the slot pool, the
 * step's batch, matrix products through the packed AVX-512/AVX2 kernels of
 * kernels/cpu/gemm.h (weights packed once by weight_new) or, on a CPU with
 * neither, OpenBLAS (weights kept transposed so it is a NoTrans·NoTrans
 * product), the norms and row helpers, and the ops table. The ops the kinds
 * add live one file per family, kernels/cpu/ops_<family>.c, over the
 * runners of kernels/cpu/cpu.h. Everything but the products is plain C loops
 * that vectorize at -O3 -march=native (each hot loop in a noinline function
 * with restrict pointers, checked with -fopt-info-vec), per-element math
 * from kernels/mixer_math.h. Every op is split across a fork-join pool
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
static void *amalloc(size_t n)
{
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

static int cpu_buf_new(backend *be, size_t n, backend_buf **out)
{
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
static int cpu_weight_new(backend *be, int N, int K, const float *W, backend_buf **out)
{
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
static int cpu_weight_new_half(backend *be, int N, int K, const uint16_t *W, int wtype, backend_buf **out)
{
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
    else if (wtype == BACKEND_W_BF16)
        cpu_gemm_pack_bf16(c->isa, W, N, K, (uint16_t *)b->p);
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
                                size_t errlen)
{
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

static int cpu_buf_host(backend *be, float *p, size_t n, backend_buf **out)
{
    (void)be;
    backend_buf *b = malloc(sizeof *b);
    if (!b) return -ENOMEM;
    b->p = p;
    b->n = n;
    b->kind = BUF_HOST;
    b->wtype = CPU_GEMM_F32;
    *out = b;
    return 0;
}

static void cpu_buf_free(backend *be, backend_buf *b)
{
    (void)be;
    if (!b) return;
    if (b->kind != BUF_HOST) free(b->p);
    free(b);
}

static int cpu_buf_upload(backend *be, backend_buf *b, size_t off, const float *src, size_t n)
{
    (void)be;
    if (off > b->n || n > b->n - off) return -ERANGE;
    memcpy(b->p + off, src, n * sizeof(float));
    return 0;
}

static int cpu_buf_download(backend *be, const backend_buf *b, size_t off, float *dst, size_t n)
{
    (void)be;
    if (off > b->n || n > b->n - off) return -ERANGE;
    memcpy(dst, b->p + off, n * sizeof(float));
    return 0;
}

static int cpu_slots_reserve(backend *be, int n, size_t slot_bytes)
{
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

static int cpu_slot_zero(backend *be, int slot)
{
    cpu *c = (cpu *)be;
    if (slot < 0 || slot >= c->nslots) return -ERANGE;
    memset(cpu_slot_ptr(c, slot), 0, c->slot_bytes);
    return 0;
}

static int cpu_slot_read(backend *be, int slot, void *dst)
{
    cpu *c = (cpu *)be;
    if (slot < 0 || slot >= c->nslots) return -ERANGE;
    memcpy(dst, cpu_slot_ptr(c, slot), c->slot_bytes);
    return 0;
}

static int cpu_slot_write(backend *be, int slot, const void *src)
{
    cpu *c = (cpu *)be;
    if (slot < 0 || slot >= c->nslots) return -ERANGE;
    memcpy(cpu_slot_ptr(c, slot), src, c->slot_bytes);
    return 0;
}

static int cpu_begin_step(backend *be, const int *slots, const int *tokens, int B)
{
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

float *cpu_tmp_get(cpu *c, size_t n)
{
    if (n > c->tmp_n) {
        float *t = amalloc(n * sizeof(float));
        if (!t) return NULL;
        free(c->tmp);
        c->tmp = t;
        c->tmp_n = n;
    }
    return c->tmp;
}

static int cpu_embed(backend *be, const backend_buf *E, backend_buf *x, int d)
{
    cpu *c = (cpu *)be;
    for (int b = 0; b < c->B; b++)
        memcpy(x->p + (size_t)b * d, E->p + (size_t)c->tokens[b] * d, (size_t)d * sizeof(float));
    return 0;
}

/* ---- running an op over the pool ---------------------------------------
 * Batch-row ops split rows [0, B) into parts; matmul splits the output
 * columns. Tiny ops run inline: a fork-join costs about a microsecond while
 * the workers poll (kernels/cpu/pool.c). */

int cpu_row_parts(const cpu *c, int B, size_t work_per_row)
{
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
static inline float lane_sum(const float *x, float mean, int sq, int d)
{
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
                                             const float *restrict bias, int d, float eps)
{
    float mean = lane_sum(x, 0.0f, 0, d) / (float)d;
    float rstd = lind_ln_rstd(lane_sum(x, mean, 1, d) / (float)d, eps);
    for (int i = 0; i < d; i++) y[i] = lind_ln_apply(x[i], mean, rstd, w[i], bias[i]);
}

static void ln_part(void *arg, int part, int nparts)
{
    const ln_job *j = arg;
    int lo, hi, d = j->d;
    cpu_part_range(j->B, part, nparts, &lo, &hi);
    for (int b = lo; b < hi; b++) ln_row(j->x + (size_t)b * d, j->y + (size_t)b * d, j->w, j->bias, d, j->eps);
}

static int cpu_layernorm(backend *be, const backend_buf *x, backend_buf *y, const backend_buf *w,
                         const backend_buf *bias, int d, float eps)
{
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

static void rms_part(void *arg, int part, int nparts)
{
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

int cpu_rmsnorm(backend *be, const backend_buf *x, backend_buf *y, const backend_buf *w, int d, float eps)
{
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

static void claims_init(panel_claims *cl, int B, int panels, int parts, int one_panel_kernel)
{
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
static int claims_next(panel_claims *cl, int *p0, int *p1)
{
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
static void mm_packed_part(void *arg, int part, int nparts)
{
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
    int ldx, ldxb, ldy, B, N, K, flags, amx;
    panel_claims claims;
} dot_job;

static void dot_round_part(void *arg, int part, int nparts)
{
    const dot_job *j = arg;
    int lo, hi;
    cpu_part_range(j->B, part, nparts, &lo, &hi);
    cpu_gemm_round_bf16(j->x + (size_t)lo * j->ldx, j->ldx, hi - lo, j->K, j->xb + (size_t)lo * j->ldxb, j->ldxb);
}

static void dot_part(void *arg, int part, int nparts)
{
    dot_job *j = arg;
    (void)part;
    (void)nparts;
    int p0, p1;
    while (claims_next(&j->claims, &p0, &p1))
        (j->amx ? cpu_gemm_run_dot_amx : cpu_gemm_run_dot)(j->xb, j->ldxb, j->W, j->bias, j->y, j->ldy, j->B, j->N,
                                                           j->K, p0, p1, j->flags);
}

static int dot_matmul(cpu *c, const float *x, int ldx, const backend_buf *W, const float *bias, float *y, int ldy,
                      int B, int N, int K, int flags)
{
    int ldxb = cpu_gemm_dot_ld(K);
    size_t need = (size_t)B * (size_t)ldxb;
    if (need > c->xb_n) {
        uint16_t *t = amalloc(need * sizeof *t);
        if (!t) return -ENOMEM;
        free(c->xb);
        c->xb = t;
        c->xb_n = need;
    }
    dot_job j = {x, (const uint16_t *)W->p, c->xb, bias, y, ldx, ldxb, ldy, B, N, K, flags,
                 c->amx && cpu_gemm_amx_fits(K), {0}};
    cpu_pool_run(c->threads, dot_round_part, &j, cpu_row_parts(c, B, (size_t)K));
    int parts = cpu_pool_size(c->threads), panels = cpu_gemm_panels(CPU_GEMM_AVX512, N);
    if ((double)B * N * K < (double)(1 << 14)) parts = 1;   /* as cpu_matmul */
    if (parts > panels) parts = panels;
    claims_init(&j.claims, B, panels, parts, 1);
    cpu_pool_run_weighed(c->threads, dot_part, &j, parts, (double)B * N * K, cpu_gemm_pool_class(B));
    return 0;
}

/* Output columns [n0, n1) of y = x·Wᵀ (+ bias, + y) through OpenBLAS. */
static void mm_part(void *arg, int part, int nparts)
{
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

static int cpu_matmul(backend *be, backend_mview yv, backend_view xv, const backend_buf *W, const backend_buf *bias,
                      int B, int N, int K, int flags)
{
    cpu *c = (cpu *)be;
    const backend_buf *x = xv.buf;
    backend_buf *y = yv.buf;
    size_t xo = xv.off, yo = yv.off;
    int ldx = xv.ld, ldy = yv.ld;
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
        cpu_pool_run_weighed(c->threads, mm_packed_part, &j, parts, (double)B * N * K, cpu_gemm_pool_class(B));
    } else {
        if (N < 16 * parts) parts = 1;
        cpu_pool_run_weighed(c->threads, mm_part, &j, parts, (double)B * N * K, cpu_gemm_pool_class(B));
    }
    return 0;
}

/* ---- row helpers ------------------------------------------------------------ */

static int cpu_gather_rows(backend *be, const backend_buf *src, const int *rows, int n, backend_buf *dst, int d)
{
    cpu *c = (cpu *)be;
    for (int i = 0; i < n; i++) {
        if (rows[i] < 0 || rows[i] >= c->B) return -ERANGE;
        memcpy(dst->p + (size_t)i * d, src->p + (size_t)rows[i] * d, (size_t)d * sizeof(float));
    }
    return 0;
}

static int cpu_scale_rows(backend *be, backend_buf *x, int d, float s)
{
    cpu *c = (cpu *)be;
    size_t n = (size_t)c->B * (size_t)d;
    float *restrict p = x->p;
    for (size_t i = 0; i < n; i++) p[i] *= s;
    return 0;
}

__attribute__((noinline)) static void gated_row(float *restrict x, const float *restrict g, const float *restrict v,
                                                int d)
{
    for (int i = 0; i < d; i++) x[i] += g[i] * v[i];
}

static int cpu_gated_add(backend *be, backend_buf *x, const backend_buf *g, size_t go, int ldg, const backend_buf *v,
                         size_t vo, int ldv, int d)
{
    cpu *c = (cpu *)be;
    for (int r = 0; r < c->B; r++)
        gated_row(x->p + (size_t)r * d, g->p + go + (size_t)r * ldg, v->p + vo + (size_t)r * ldv, d);
    return 0;
}

/* The largest exponent field of a row is all ones iff the row holds a NaN
 * or ±inf; an unsigned max reduction vectorizes (no float compares). */
__attribute__((noinline)) static int row_nonfinite(const float *restrict x, int d)
{
    uint32_t top = 0;
    for (int i = 0; i < d; i++) {
        uint32_t u;
        memcpy(&u, &x[i], sizeof u);
        u &= 0x7f800000u;
        top = u > top ? u : top;
    }
    return top == 0x7f800000u;
}

static int cpu_rows_nonfinite(backend *be, const backend_buf *x, int d, unsigned char *bad)
{
    cpu *c = (cpu *)be;
    for (int r = 0; r < c->B; r++) bad[r] = (unsigned char)row_nonfinite(x->p + (size_t)r * d, d);
    return 0;
}

static void cpu_free(backend *be)
{
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
static int cpu_set_compute(backend *be, int mode, char *err, size_t errlen)
{
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
    .buf_host = cpu_buf_host,
    .weight_new = cpu_weight_new,
    .slots_reserve = cpu_slots_reserve,
    .slot_zero = cpu_slot_zero,
    .slot_read = cpu_slot_read,
    .slot_write = cpu_slot_write,
    .begin_step = cpu_begin_step,
    .embed = cpu_embed,
    .layernorm = cpu_layernorm,
    .matmul = cpu_matmul,
    .gather_rows = cpu_gather_rows,
    .scale_rows = cpu_scale_rows,
    .gated_add = cpu_gated_add,
#define CPU_OP_ROW(e, op) .op = cpu_##op,
    BACKEND_KIND_OPS(CPU_OP_ROW)   /* every kind op: kernels/cpu/ops_<family>.c */
#undef CPU_OP_ROW
    .weight_new_half = cpu_weight_new_half,
    .rows_nonfinite = cpu_rows_nonfinite,
    .set_compute = cpu_set_compute,
    .weight_new_quant = cpu_weight_new_quant,
};

/* "model name" from /proc/cpuinfo, else "cpu". */
static void read_cpu_name(char *out, size_t n)
{
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

/* opts->cpu_gemm picks the matrix kernel (for comparisons): "openblas",
 * "avx2", "avx512"; NULL or empty, the best this CPU runs. */
static int cpu_pick_isa(const backend_opts *opts, cpu_gemm_isa *isa, char *err, size_t errlen)
{
    const char *g = opts->cpu_gemm;
    *isa = cpu_gemm_detect();
    if (g && *g) {
        cpu_gemm_isa want = !strcmp(g, "openblas") ? CPU_GEMM_NONE
                            : !strcmp(g, "avx2")   ? CPU_GEMM_AVX2
                            : !strcmp(g, "avx512") ? CPU_GEMM_AVX512
                                                   : (cpu_gemm_isa)-1;
        if ((int)want < 0 || !cpu_gemm_supported(want)) {
            snprintf(err, errlen, "backend cpu: GEMM kernel \"%s\": %s", g,
                     (int)want < 0 ? "unknown (openblas, avx2 or avx512)" : "this CPU cannot run that kernel");
            return -EINVAL;
        }
        *isa = want;
    }
    return 0;
}

/* bf16 compute on AMX tiles where the CPU has them, unless opted out */
static int cpu_uses_amx(const backend_opts *opts, cpu_gemm_isa isa)
{
    return !opts->cpu_no_amx && isa == CPU_GEMM_AVX512 && cpu_gemm_amx_supported();
}

int backend_cpu_amx(const backend_opts *opts)
{
    backend_opts d;
    if (!opts) {
        backend_opts_default(&d);
        opts = &d;
    }
    cpu_gemm_isa isa;
    char err[160];
    return cpu_pick_isa(opts, &isa, err, sizeof err) == 0 && cpu_uses_amx(opts, isa);
}

int backend_cpu_new(const backend_opts *opts, backend **out, char *err, size_t errlen)
{
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
    if (cpu_pick_isa(opts, &c->isa, err, errlen) < 0) {
        cpu_free(&c->base);
        return -EINVAL;
    }
    /* quantized products: VNNI with the AVX-512 kernel (AVX2 on an AVX-512
     * CPU without VNNI), AVX2 with AVX2, portable C with OpenBLAS */
    c->qisa = c->isa == CPU_GEMM_NONE ? CPU_QUANT_C
              : c->isa == CPU_GEMM_AVX512 && cpu_quant_supported(CPU_QUANT_VNNI) ? CPU_QUANT_VNNI
              : cpu_quant_supported(CPU_QUANT_AVX2) ? CPU_QUANT_AVX2 : CPU_QUANT_C;
    /* bf16 compute on AMX tiles where the CPU has them, unless opted out */
    c->amx = cpu_uses_amx(opts, c->isa);
    read_cpu_name(c->device, sizeof c->device);
    size_t dl = strlen(c->device);
    if (c->isa == CPU_GEMM_NONE)
        snprintf(c->device + dl, sizeof c->device - dl, ", %ld threads, OpenBLAS GEMM", nt);
    else
        snprintf(c->device + dl, sizeof c->device - dl, ", %ld threads, %s packed GEMM%s", nt,
                 cpu_gemm_isa_name(c->isa), c->amx ? " (bf16 compute on AMX tiles)" : "");
    *out = &c->base;
    return 0;
}
