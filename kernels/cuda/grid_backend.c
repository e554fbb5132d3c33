/* kernels/cuda/grid_backend.c — kernels/backend.h over a lind_device.
 *
 * Owns the device buffers, the slot pool (one device allocation, slots at a
 * 256-byte stride so fp64 state regions stay aligned and coalesced), the
 * current batch's slot, token and run arrays on the device, and maps each op
 * to a kernel launch or a GEMM. Every op validates its extents on the host before
 * anything reaches the device: a bad offset here would otherwise be a silent
 * out-of-bounds write in device memory. The ops the kinds add are one file
 * per family, kernels/cuda/grid_<family>.c, over the state and runners of
 * kernels/cuda/grid.h; this file has the rest and the ops table. */
#include "kernels/cuda/grid.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Every device allocation and free goes through these: each one bumps the
 * generation, which voids the recordings (they hold raw pointers). */
static int dalloc(gridbe *g, size_t bytes, void **out)
{
    g->gen++;
    return g->dev->alloc(g->dev, bytes, out);
}

static void drelease(gridbe *g, void *p)
{
    if (!p) return;
    g->gen++;
    g->dev->release(g->dev, p);
}

const char *grid_backend_error(const backend *be) { return ((const gridbe *)be)->err; }

/* ---- lifetime ------------------------------------------------------------ */

static void graphs_drop(gridbe *g);

static void g_free(backend *be)
{
    gridbe *g = G(be);
    if (!g) return;
    graphs_drop(g);
    drelease(g, g->pool);
    drelease(g, g->d_slots);
    drelease(g, g->d_tokens);
    drelease(g, g->d_runs);
    drelease(g, g->d_rows);
    drelease(g, g->xb);
    drelease(g, g->wtmp);
    drelease(g, g->d_bad);
    g->dev->free(g->dev);
    free(g->h_bad);
    free(g->seen);
    free(g->runs);
    free(g);
}

static const char *g_device_name(backend *be) { return G(be)->dev->name; }

/* ---- buffers --------------------------------------------------------------- */

static int g_buf_new(backend *be, size_t n, backend_buf **out)
{
    gridbe *g = G(be);
    *out = NULL;
    if (n > SIZE_MAX / sizeof(float) / 2) return fail(g, -ENOMEM, "buf_new: %zu floats is too many", n);
    backend_buf *b = calloc(1, sizeof *b);
    if (!b) return fail(g, -ENOMEM, "buf_new: out of host memory");
    int rc = dalloc(g, (n ? n : 1) * sizeof(float), &b->p);
    if (rc < 0) { free(b); return dev_rc(g, rc, "buf_new"); }
    b->n = n;
    *out = b;
    return 0;
}

static void g_buf_free(backend *be, backend_buf *b)
{
    if (!b) return;
    drelease(G(be), b->p);
    drelease(G(be), b->bf);
    drelease(G(be), b->half);
    free(b);
}

static int g_buf_upload(backend *be, backend_buf *b, size_t off, const float *src, size_t n)
{
    gridbe *g = G(be);
    if (off > SIZE_MAX - n) return fail(g, -EINVAL, "buf_upload: offset overflows");
    if (b && (b->bf_only || b->half)) return fail(g, -EINVAL, "buf_upload: a bf16 or half weight cannot be written");
    int rc = fits(g, b, off + n, "buf_upload", "destination");
    if (rc < 0 || n == 0) return rc;
    b->bf_ok = 0;
    g->gen++;   /* a recording would skip the bf16 copy's refresh (matmul_bf16) */
    return dev_rc(g, g->dev->h2d(g->dev, F(b) + off, src, n * sizeof(float)), "buf_upload");
}

static int g_buf_download(backend *be, const backend_buf *b, size_t off, float *dst, size_t n)
{
    gridbe *g = G(be);
    if (off > SIZE_MAX - n) return fail(g, -EINVAL, "buf_download: offset overflows");
    if (b && (b->bf_only || b->half)) return fail(g, -EINVAL, "buf_download: a bf16 or half weight cannot be read back");
    int rc = fits(g, b, off + n, "buf_download", "source");
    if (rc < 0 || n == 0) return rc;
    return dev_rc(g, g->dev->d2h(g->dev, dst, F(b) + off, n * sizeof(float)), "buf_download");
}

static int refresh_bf16(gridbe *g, backend_buf *W, const char *op);

/* A matmul weight. In bf16 mode only its bf16 copy stays on the device
 * (half the memory of fp32 instead of one and a half). */
static int g_weight_new(backend *be, int N, int K, const float *W, backend_buf **out)
{
    gridbe *g = G(be);
    *out = NULL;
    if (N < 1 || K < 1) return fail(g, -EINVAL, "weight_new: shape %d × %d", N, K);
    size_t n = (size_t)N * (size_t)K;
    backend_buf *b;
    int rc = g_buf_new(be, n, &b);
    if (rc < 0) return rc;
    if ((rc = g_buf_upload(be, b, 0, W, n)) == 0 && g->bf16 && (rc = refresh_bf16(g, b, "weight_new")) == 0) {
        drelease(g, b->p);
        b->p = NULL;
        b->bf_only = 1;
    }
    if (rc < 0) {
        g_buf_free(be, b);
        return rc;
    }
    *out = b;
    return 0;
}

/* ---- slot pool ----------------------------------------------------------- */

static int g_slots_reserve(backend *be, int n, size_t slot_bytes)
{
    gridbe *g = G(be);
    if (n < 0 || slot_bytes == 0) return fail(g, -EINVAL, "slots_reserve: bad count %d or size %zu", n, slot_bytes);
    if (g->slot_bytes && slot_bytes != g->slot_bytes)
        return fail(g, -EINVAL, "slots_reserve: slot size %zu differs from the pool's %zu", slot_bytes, g->slot_bytes);
    if (n <= g->nslots) return 0;
    size_t stride = (slot_bytes + SLOT_ALIGN - 1) / SLOT_ALIGN * SLOT_ALIGN;
    if ((size_t)n > SIZE_MAX / stride) return fail(g, -ENOMEM, "slots_reserve: %d slots overflow", n);
    unsigned *seen = realloc(g->seen, (size_t)n * sizeof *seen);
    if (!seen) return fail(g, -ENOMEM, "slots_reserve: out of host memory");
    memset(seen + g->nslots, 0, (size_t)(n - g->nslots) * sizeof *seen);
    g->seen = seen;
    void *pool;
    int rc = dalloc(g, (size_t)n * stride, &pool);
    if (rc < 0) return dev_rc(g, rc, "slots_reserve");
    size_t keep = (size_t)g->nslots * stride;
    if (keep) rc = g->dev->d2d(g->dev, pool, g->pool, keep);
    if (rc == 0) rc = g->dev->zero(g->dev, (unsigned char *)pool + keep, (size_t)n * stride - keep);
    if (rc < 0) { drelease(g, pool); return dev_rc(g, rc, "slots_reserve"); }
    drelease(g, g->pool);
    g->pool = pool;
    g->nslots = n;
    g->slot_bytes = slot_bytes;
    g->stride = stride;
    return 0;
}

static int slot_ok(gridbe *g, int slot, const char *op)
{
    if (slot < 0 || slot >= g->nslots)
        return fail(g, -EINVAL, "%s: slot %d out of range (pool has %d)", op, slot, g->nslots);
    return 0;
}

static unsigned char *slot_ptr(gridbe *g, int slot) { return g->pool + (size_t)slot * g->stride; }

static int g_slot_zero(backend *be, int slot)
{
    gridbe *g = G(be);
    int rc = slot_ok(g, slot, "slot_zero");
    return rc < 0 ? rc : dev_rc(g, g->dev->zero(g->dev, slot_ptr(g, slot), g->slot_bytes), "slot_zero");
}

static int g_slot_read(backend *be, int slot, void *dst)
{
    gridbe *g = G(be);
    int rc = slot_ok(g, slot, "slot_read");
    return rc < 0 ? rc : dev_rc(g, g->dev->d2h(g->dev, dst, slot_ptr(g, slot), g->slot_bytes), "slot_read");
}

static int g_slot_write(backend *be, int slot, const void *src)
{
    gridbe *g = G(be);
    int rc = slot_ok(g, slot, "slot_write");
    return rc < 0 ? rc : dev_rc(g, g->dev->h2d(g->dev, slot_ptr(g, slot), src, g->slot_bytes), "slot_write");
}

/* ---- the step ------------------------------------------------------------ */

/* Grow the batch arrays to hold B rows (and B + 1 run starts). */
static int batch_cap(gridbe *g, int B)
{
    if (B <= g->cap) return 0;
    int cap = g->cap * 2 > B ? g->cap * 2 : B;
    int *h = realloc(g->runs, (size_t)(cap + 1) * sizeof *h);
    if (!h) return fail(g, -ENOMEM, "begin_step: out of host memory");
    g->runs = h;
    void *s = NULL, *t = NULL, *r = NULL;
    int rc = dalloc(g, (size_t)cap * sizeof(int), &s);
    if (rc == 0) rc = dalloc(g, (size_t)cap * sizeof(int), &t);
    if (rc == 0) rc = dalloc(g, (size_t)(cap + 1) * sizeof(int), &r);
    if (rc < 0) {
        drelease(g, s);
        drelease(g, t);
        return dev_rc(g, rc, "begin_step");
    }
    drelease(g, g->d_slots);
    drelease(g, g->d_tokens);
    drelease(g, g->d_runs);
    g->d_slots = s;
    g->d_tokens = t;
    g->d_runs = r;
    g->cap = cap;
    return 0;
}

/* The batch: rows form runs (a slot's rows consecutive, one run per slot),
 * checked here since a slot in two runs would be two blocks racing on one
 * state. Tokens must be ≥ 0; their upper bound is the embedding's rows,
 * checked by embed (the only op that indexes by token). */
static int g_begin_step(backend *be, const int *slots, const int *tokens, int B)
{
    gridbe *g = G(be);
    if (B < 0 || B > KB_MAX_GRID_Y) return fail(g, -EINVAL, "begin_step: batch of %d (max %d)", B, KB_MAX_GRID_Y);
    g->B = g->nruns = 0;
    if (++g->stamp == 0) {   /* wrapped: forget every old stamp */
        if (g->nslots) memset(g->seen, 0, (size_t)g->nslots * sizeof *g->seen);
        g->stamp = 1;
    }
    int maxtok = 0;
    for (int b = 0; b < B; b++) {
        int rc = slot_ok(g, slots[b], "begin_step");
        if (rc < 0) return rc;
        if (tokens[b] < 0) return fail(g, -EINVAL, "begin_step: row %d: negative token %d", b, tokens[b]);
        if (tokens[b] > maxtok) maxtok = tokens[b];
        if (b > 0 && slots[b] == slots[b - 1]) continue;   /* the run goes on */
        if (g->seen[slots[b]] == g->stamp)
            return fail(g, -EINVAL, "begin_step: slot %d appears twice, in two runs (row %d)", slots[b], b);
        g->seen[slots[b]] = g->stamp;
    }
    int rc = batch_cap(g, B);
    if (rc < 0 || B == 0) return rc;
    int n = 0;
    for (int b = 0; b < B; b++)
        if (b == 0 || slots[b] != slots[b - 1]) g->runs[n++] = b;
    g->runs[n] = B;
    rc = g->dev->h2d(g->dev, g->d_slots, slots, (size_t)B * sizeof(int));
    if (rc == 0) rc = g->dev->h2d(g->dev, g->d_tokens, tokens, (size_t)B * sizeof(int));
    if (rc == 0) rc = g->dev->h2d(g->dev, g->d_runs, g->runs, (size_t)(n + 1) * sizeof(int));
    if (rc < 0) return dev_rc(g, rc, "begin_step");
    g->B = B;
    g->nruns = n;
    g->max_token = maxtok;
    return 0;
}

static int g_embed(backend *be, const backend_buf *E, backend_buf *x, int d)
{
    gridbe *g = G(be);
    int B = g->B, rc;
    if (d < 1) return fail(g, -EINVAL, "embed: width %d", d);
    if (B == 0) return 0;
    if (E && (size_t)g->max_token >= E->n / (size_t)d)
        return fail(g, -EINVAL, "embed: token %d past the %zu rows of E", g->max_token, E->n / (size_t)d);
    if ((rc = fits(g, E, ((size_t)g->max_token + 1) * d, "embed", "E")) < 0 ||
        (rc = fits(g, x, (size_t)B * d, "embed", "x")) < 0)
        return rc;
    kb_embed_args a = { F(E), F(x), g->d_tokens, d };
    return launch(g, KB_EMBED, kb_embed_launch(B, d), &a, "embed");
}

static int g_layernorm(backend *be, const backend_buf *x, backend_buf *y, const backend_buf *w,
                       const backend_buf *bias, int d, float eps)
{
    gridbe *g = G(be);
    int B = g->B, rc;
    size_t n = (size_t)B * d;
    if (d < 1) return fail(g, -EINVAL, "layernorm: width %d", d);
    if ((rc = fits(g, x, n, "layernorm", "x")) < 0 || (rc = fits(g, y, n, "layernorm", "y")) < 0 ||
        (rc = fits(g, w, d, "layernorm", "w")) < 0 || (rc = fits(g, bias, d, "layernorm", "bias")) < 0)
        return rc;
    if (B == 0) return 0;
    kb_layernorm_args a = { F(x), F(y), F(w), F(bias), d, eps };
    return launch(g, KB_LAYERNORM, kb_layernorm_launch(B, d), &a, "layernorm");
}

/* Make W's bf16 copy current (allocated on first use). */
static int refresh_bf16(gridbe *g, backend_buf *W, const char *op)
{
    int rc;
    if (W->bf_ok) return 0;
    if (W->n > INT32_MAX) return fail(g, -EINVAL, "%s: %zu weights are too many for the bf16 path", op, W->n);
    if (!W->bf) {
        void *p;
        if ((rc = dalloc(g, (W->n ? W->n : 1) * sizeof(uint16_t), &p)) < 0) return dev_rc(g, rc, op);
        W->bf = p;
    }
    if (W->n) {
        kb_to_bf16_args a = { F(W), W->bf, 0, 0, (int)W->n };
        if ((rc = launch(g, KB_TO_BF16, kb_to_bf16_launch(1, (int)W->n), &a, op)) < 0) return rc;
    }
    W->bf_ok = 1;
    return 0;
}

/* The bf16 operand of W: a bf16 half weight as it is; an fp16 one rounded
 * to bf16 once (kept in W->bf); an fp32 one through refresh_bf16. */
static int weight_bf16(gridbe *g, backend_buf *W, const uint16_t **out, const char *op)
{
    int rc;
    *out = NULL;
    if (W->half && W->htype == BACKEND_W_BF16) {
        *out = W->half;
        return 0;
    }
    if (W->half) {
        if (!W->bf_ok) {
            if (!W->bf) {
                void *p;
                if ((rc = dalloc(g, W->n * sizeof(uint16_t), &p)) < 0) return dev_rc(g, rc, op);
                W->bf = p;
            }
            kb_widen_half_args a = { W->half, NULL, W->bf, W->n, 0, 1 };
            if ((rc = launch(g, KB_WIDEN_HALF, kb_widen_half_launch(W->n), &a, op)) < 0) return rc;
            W->bf_ok = 1;
        }
        *out = W->bf;
        return 0;
    }
    if ((rc = refresh_bf16(g, W, op)) < 0) return rc;
    *out = W->bf;
    return 0;
}

/* The bf16 GEMM: W's bf16 operand (made on first use, and again after W is
 * uploaded to), x's block rounded into the scratch, then the same mapping as
 * the fp32 call below. W is the const argument of matmul: its bf16 copy is
 * a cache, not its contents. */
static int matmul_bf16(gridbe *g, const backend_buf *x, size_t xo, int ldx, backend_buf *W, backend_buf *y,
                       size_t yo, int ldy, int B, int N, int K, float beta)
{
    int rc;
    const uint16_t *Wb;
    if ((rc = weight_bf16(g, W, &Wb, "matmul bf16 weights")) < 0) return rc;
    size_t xn = (size_t)B * K;
    if (xn > g->xb_n) {
        void *p;
        if ((rc = dalloc(g, xn * sizeof(uint16_t), &p)) < 0) return dev_rc(g, rc, "matmul bf16 scratch");
        drelease(g, g->xb);
        g->xb = p;
        g->xb_n = xn;
    }
    kb_to_bf16_args a = { F(x) + xo, g->xb, ldx, K, K };
    if ((rc = launch(g, KB_TO_BF16, kb_to_bf16_launch(B, K), &a, "matmul bf16 activations")) < 0) return rc;
    return dev_rc(g, g->dev->gemm_bf16(g->dev, 1, 0, N, B, K, 1.0f, Wb, K, g->xb, K, beta, F(y) + yo, ldy),
                  "matmul");
}

/* The fp32 operand of a half weight: widened (exactly) into the shared
 * scratch, so the GEMM that follows is the fp32 GEMM of the same values —
 * what the model would get by widening on the host, at half the device
 * memory for the weight and one extra pass over it per product. */
static int weight_widen(gridbe *g, const backend_buf *W, const float **out)
{
    int rc;
    if (W->n > g->wtmp_n) {
        void *p;
        if ((rc = dalloc(g, W->n * sizeof(float), &p)) < 0) return dev_rc(g, rc, "matmul half scratch");
        drelease(g, g->wtmp);
        g->wtmp = p;
        g->wtmp_n = W->n;
    }
    kb_widen_half_args a = { W->half, g->wtmp, NULL, W->n, W->htype == BACKEND_W_BF16, 0 };
    if ((rc = launch(g, KB_WIDEN_HALF, kb_widen_half_launch(W->n), &a, "matmul half weights")) < 0) return rc;
    *out = g->wtmp;
    return 0;
}

/* Row-major y[B × N] (+)= x[B × K]·Wᵀ (+ bias) as one column-major SGEMM:
 * read column-major, y is yᵀ [N × B] (ld ldy), W is Wᵀ [K × N] (ld K) and
 * x is xᵀ [K × B] (ld ldx), so yᵀ = op_T(Wᵀ)·xᵀ = W·xᵀ. An activation flag
 * runs as a pass over the B·N outputs after the product (and bias). */
static int g_matmul(backend *be, backend_mview yv, backend_view xv, const backend_buf *W, const backend_buf *bias,
                    int B, int N, int K, int flags)
{
    gridbe *g = G(be);
    const backend_buf *x = xv.buf;
    backend_buf *y = yv.buf;
    size_t xo = xv.off, yo = yv.off;
    int ldx = xv.ld, ldy = yv.ld;
    int rc, accumulate = flags & BACKEND_MM_ACCUMULATE;
    if (B < 0 || N < 1 || K < 1 || ldx < K || ldy < N || B > KB_MAX_GRID_Y)
        return fail(g, -EINVAL, "matmul: bad shape B=%d N=%d K=%d ldx=%d ldy=%d", B, N, K, ldx, ldy);
    if (!backend_mm_flags_ok(flags, ldy, N))
        return fail(g, -EINVAL, "matmul: flags %#x (at most one activation, which needs ldy == N and no accumulate)",
                    flags);
    if (B == 0) return 0;
    size_t xn = xo + (size_t)(B - 1) * ldx + K, yn = yo + (size_t)(B - 1) * ldy + N;
    if ((rc = fits(g, x, xn, "matmul", "x")) < 0 || (rc = fits(g, y, yn, "matmul", "y")) < 0 ||
        (rc = fits(g, W, (size_t)N * K, "matmul", "W")) < 0 || (bias && (rc = fits(g, bias, N, "matmul", "bias")) < 0))
        return rc;
    if (!g->bf16 && W->bf_only) return fail(g, -EINVAL, "matmul: W was made as a bf16 weight, GEMMs are now fp32");
    float beta = accumulate ? 1.0f : 0.0f;
    if (bias) {
        kb_bias_rows_args a = { F(y) + yo, F(bias), ldy, N, accumulate };
        if ((rc = launch(g, KB_BIAS_ROWS, kb_bias_rows_launch(B, N), &a, "matmul bias")) < 0) return rc;
        beta = 1.0f;
    }
    if (g->bf16) {
        rc = matmul_bf16(g, x, xo, ldx, (backend_buf *)W, y, yo, ldy, B, N, K, beta);
    } else if (B <= KB_GEMV_MAXB && (W->half || g->gemv)) {   /* decode: stream W once for the few rows */
        kb_gemv_args a = { W->half ? (const void *)W->half : (const void *)F(W), F(x) + xo, F(y) + yo,
                           !W->half ? KB_W_F32 : W->htype == BACKEND_W_BF16 ? KB_W_BF16 : KB_W_F16,
                           B, N, K, ldx, ldy, beta != 0.0f };
        rc = launch(g, KB_GEMV, kb_gemv_launch(N), &a, "matmul (few rows)");
    } else {
        const float *Wf = F(W);
        if (W->half && (rc = weight_widen(g, W, &Wf)) < 0) return rc;
        rc = dev_rc(g, g->dev->sgemm(g->dev, 1, 0, N, B, K, 1.0f, Wf, K, F(x) + xo, ldx, beta, F(y) + yo, ldy),
                    "matmul");
    }
    int act = flags & BACKEND_MM_ACT;
    if (rc < 0 || !act) return rc;
    /* the activation in place over the B·N contiguous outputs */
    size_t n = (size_t)B * N;
    if (n > (size_t)KB_EW_BLOCK * INT32_MAX) return fail(g, -EINVAL, "matmul activation: %zu elements", n);
    kb_act_args a = { F(y) + yo, n,
                      act == BACKEND_MM_GELU ? KB_ACT_GELU : act == BACKEND_MM_RELU2 ? KB_ACT_RELU2 : KB_ACT_SIGMOID };
    return launch(g, KB_ACT, kb_act_launch(n), &a, "matmul activation");
}

static int g_rmsnorm(backend *be, const backend_buf *x, backend_buf *y, const backend_buf *w, int d, float eps)
{
    gridbe *g = G(be);
    int B = g->B, rc;
    size_t n = (size_t)B * d;
    if (d < 1) return fail(g, -EINVAL, "rmsnorm: width %d", d);
    if ((rc = fits(g, x, n, "rmsnorm", "x")) < 0 || (rc = fits(g, y, n, "rmsnorm", "y")) < 0 ||
        (rc = fits(g, w, d, "rmsnorm", "w")) < 0)
        return rc;
    if (B == 0) return 0;
    kb_rmsnorm_args a = { F(x), F(y), F(w), d, eps };
    return launch(g, KB_RMSNORM, kb_rmsnorm_launch(B, d), &a, "rmsnorm");
}

/* ---- row helpers ----------------------------------------------------------- */

static int g_gather_rows(backend *be, const backend_buf *src, const int *rows, int n, backend_buf *dst, int d)
{
    gridbe *g = G(be);
    int rc;
    if (d < 1 || n < 0 || n > KB_MAX_GRID_Y) return fail(g, -EINVAL, "gather_rows: %d rows of width %d", n, d);
    if (n == 0) return 0;
    for (int i = 0; i < n; i++)
        if (rows[i] < 0 || rows[i] >= g->B)
            return fail(g, -EINVAL, "gather_rows: row %d is %d, the batch has %d rows", i, rows[i], g->B);
    if ((rc = fits(g, src, (size_t)g->B * d, "gather_rows", "src")) < 0 ||
        (rc = fits(g, dst, (size_t)n * d, "gather_rows", "dst")) < 0)
        return rc;
    if (n > g->rows_cap) {
        int cap = g->rows_cap * 2 > n ? g->rows_cap * 2 : n;
        void *p;
        if ((rc = dalloc(g, (size_t)cap * sizeof(int), &p)) < 0) return dev_rc(g, rc, "gather_rows");
        drelease(g, g->d_rows);
        g->d_rows = p;
        g->rows_cap = cap;
    }
    if ((rc = g->dev->h2d(g->dev, g->d_rows, rows, (size_t)n * sizeof(int))) < 0) return dev_rc(g, rc, "gather_rows");
    kb_gather_rows_args a = { F(src), F(dst), g->d_rows, d };
    return launch(g, KB_GATHER_ROWS, kb_gather_rows_launch(n, d), &a, "gather_rows");
}

static int g_scale_rows(backend *be, backend_buf *x, int d, float s)
{
    gridbe *g = G(be);
    int rc;
    if (d < 1) return fail(g, -EINVAL, "scale_rows: width %d", d);
    size_t n = (size_t)g->B * d;
    if ((rc = fits(g, x, n, "scale_rows", "x")) < 0 || n == 0) return rc;
    kb_scale_args a = { F(x), n, s };
    return launch(g, KB_SCALE, kb_scale_launch(n), &a, "scale_rows");
}

static int g_gated_add(backend *be, backend_buf *x, const backend_buf *gate, size_t go, int ldg, const backend_buf *v,
                       size_t vo, int ldv, int d)
{
    gridbe *g = G(be);
    int B = g->B, rc;
    if (d < 1 || ldg < d || ldv < d) return fail(g, -EINVAL, "gated_add: width %d, ldg %d, ldv %d", d, ldg, ldv);
    if (B == 0) return 0;
    if ((rc = fits(g, x, (size_t)B * d, "gated_add", "x")) < 0 ||
        (rc = fits(g, gate, go + (size_t)(B - 1) * ldg + d, "gated_add", "g")) < 0 ||
        (rc = fits(g, v, vo + (size_t)(B - 1) * ldv + d, "gated_add", "v")) < 0)
        return rc;
    kb_gated_add_args a = { F(x), F(gate) + go, F(v) + vo, ldg, ldv, d };
    return launch(g, KB_GATED_ADD, kb_gated_add_launch(B, d), &a, "gated_add");
}

/* ---- health ------------------------------------------------------------------ */

static int g_rows_nonfinite(backend *be, const backend_buf *x, int d, unsigned char *bad)
{
    gridbe *g = G(be);
    int B = g->B, rc;
    if (d < 1) return fail(g, -EINVAL, "rows_nonfinite: width %d", d);
    if (B == 0) return 0;
    if ((rc = fits(g, x, (size_t)B * d, "rows_nonfinite", "x")) < 0) return rc;
    if (B > g->bad_cap) {
        int *h = realloc(g->h_bad, (size_t)B * sizeof *h);
        if (!h) return fail(g, -ENOMEM, "rows_nonfinite: out of host memory");
        g->h_bad = h;
        drelease(g, g->d_bad);
        g->d_bad = NULL;
        g->bad_cap = 0;
        void *p;
        if ((rc = dalloc(g, (size_t)B * sizeof(int), &p)) < 0) return dev_rc(g, rc, "rows_nonfinite");
        g->d_bad = p;
        g->bad_cap = B;
    }
    if ((rc = g->dev->zero(g->dev, g->d_bad, (size_t)B * sizeof(int))) < 0) return dev_rc(g, rc, "rows_nonfinite");
    kb_nonfinite_args a = { F(x), g->d_bad, d };
    if ((rc = launch(g, KB_NONFINITE, kb_nonfinite_launch(B, d), &a, "rows_nonfinite")) < 0) return rc;
    if ((rc = g->dev->d2h(g->dev, g->h_bad, g->d_bad, (size_t)B * sizeof(int))) < 0)
        return dev_rc(g, rc, "rows_nonfinite");
    for (int r = 0; r < B; r++) bad[r] = g->h_bad[r] != 0;
    return 0;
}

/* ---- recorded steps ------------------------------------------------------ */

static void graphs_drop(gridbe *g)
{
    for (int i = 0; i < GRAPH_CACHE; i++) {
        if (g->gcache[i].graph) g->dev->graph_free(g->dev, g->gcache[i].graph);
        memset(&g->gcache[i], 0, sizeof g->gcache[i]);
    }
}

/* The model's key mixed with the batch's run layout (FNV-1a over the run
 * starts; the launches' grids depend on the number of runs, the GEMMs' on
 * the rows). Never 0, which marks an empty entry. */
static uint64_t step_key(const gridbe *g, uint64_t key)
{
    uint64_t h = 1469598103934665603ull ^ key;
    for (int i = 0; i <= g->nruns; i++) {
        h ^= (uint64_t)(unsigned)g->runs[i];
        h *= 1099511628211ull;
    }
    h ^= (uint64_t)(unsigned)g->B << 32;
    return h ? h : 1;
}

/* First sight of a key: run it eagerly (lazy allocations and the bf16
 * copies happen then, outside any recording); second: record it; then
 * replay. Recordings of an older generation are dropped on sight. */
static int g_graph_begin(backend *be, uint64_t key)
{
    gridbe *g = G(be);
    g->grec = -1;
    if (!g->graphs || g->B == 0) return BACKEND_GRAPH_EAGER;
    uint64_t k = step_key(g, key);
    int hit = -1, victim = 0;
    for (int i = 0; i < GRAPH_CACHE; i++) {
        struct gstep *e = &g->gcache[i];
        if (e->key && e->gen != g->gen && e->state != GS_NEVER) {   /* stale pointers inside */
            if (e->graph) g->dev->graph_free(g->dev, e->graph);
            memset(e, 0, sizeof *e);
        }
        if (e->key == k) hit = i;
        if (e->used < g->gcache[victim].used) victim = i;
    }
    g->gclock++;
    if (hit < 0) {
        struct gstep *e = &g->gcache[victim];
        if (e->graph) g->dev->graph_free(g->dev, e->graph);
        *e = (struct gstep){.key = k, .state = GS_SEEN, .gen = g->gen, .used = g->gclock};
        return BACKEND_GRAPH_EAGER;
    }
    struct gstep *e = &g->gcache[hit];
    e->used = g->gclock;
    if (e->state == GS_NEVER) return BACKEND_GRAPH_EAGER;
    if (e->state == GS_READY) {
        int rc = dev_rc(g, g->dev->graph_run(g->dev, e->graph), "graph replay");
        if (rc == 0) g->nreplayed++;
        return rc < 0 ? rc : BACKEND_GRAPH_REPLAYED;
    }
    int rc = g->dev->record_begin(g->dev);
    if (rc < 0) {   /* this device cannot record now: never try this key again */
        e->state = GS_NEVER;
        return BACKEND_GRAPH_EAGER;
    }
    g->grec = hit;
    g->grec_gen = g->gen;
    return BACKEND_GRAPH_RECORDING;
}

static int g_graph_end(backend *be, int rc)
{
    gridbe *g = G(be);
    if (g->grec < 0) return fail(g, -EINVAL, "graph_end: not recording");
    struct gstep *e = &g->gcache[g->grec];
    g->grec = -1;
    int moved = g->gen != g->grec_gen;   /* a buffer came or went: try again next time */
    void *graph = NULL;
    int erc = g->dev->record_end(g->dev, rc == 0 && !moved, &graph);
    if (erc < 0 || !graph) {
        /* an op could not be recorded (a host copy inside the step, say):
         * this key runs eagerly from now on */
        e->state = rc == 0 && erc == 0 && moved ? GS_SEEN : GS_NEVER;
        e->gen = g->gen;
        return BACKEND_GRAPH_RETRY;
    }
    e->graph = graph;
    e->state = GS_READY;
    e->gen = g->gen;
    g->nrecorded++;
    rc = dev_rc(g, g->dev->graph_run(g->dev, graph), "graph replay");
    if (rc == 0) g->nreplayed++;
    return rc < 0 ? rc : 0;
}

static void *g_host_alloc(backend *be, size_t bytes)
{
    lind_device *d = G(be)->dev;
    return d->host_alloc ? d->host_alloc(d, bytes) : malloc(bytes ? bytes : 1);
}

static void g_host_free(backend *be, void *p)
{
    lind_device *d = G(be)->dev;
    if (d->host_free) d->host_free(d, p);
    else free(p);
}

void grid_backend_graph_stats(const backend *be, long *recorded, long *replayed)
{
    const gridbe *g = (const gridbe *)be;
    *recorded = g->nrecorded;
    *replayed = g->nreplayed;
}

static const char *g_last_error(backend *be) { return G(be)->err; }
static int g_poisoned(backend *be) { return G(be)->dev->dead; }

/* A half-precision weight stays half on the device (half the memory of
 * fp32). matmul reads it directly for up to KB_GEMV_MAXB rows (kb_gemv),
 * widens it exactly before an fp32 GEMM over more rows (weight_widen), and
 * hands it to the bf16 GEMMs in bf16 mode. */
static int g_weight_new_half(backend *be, int N, int K, const uint16_t *W, int wtype, backend_buf **out)
{
    gridbe *g = G(be);
    *out = NULL;
    if (N < 1 || K < 1) return fail(g, -EINVAL, "weight_new_half: shape %d × %d", N, K);
    if (wtype != BACKEND_W_F16 && wtype != BACKEND_W_BF16)
        return fail(g, -EINVAL, "weight_new_half: unknown half type %d", wtype);
    size_t n = (size_t)N * (size_t)K;
    if (n > SIZE_MAX / sizeof(float) / 2) return fail(g, -ENOMEM, "weight_new_half: %zu weights is too many", n);
    backend_buf *b = calloc(1, sizeof *b);
    if (!b) return fail(g, -ENOMEM, "weight_new_half: out of host memory");
    void *p;
    int rc = dalloc(g, n * sizeof(uint16_t), &p);
    if (rc < 0) { free(b); return dev_rc(g, rc, "weight_new_half"); }
    b->half = p;
    b->htype = wtype;
    b->n = n;
    if ((rc = g->dev->h2d(g->dev, b->half, W, n * sizeof(uint16_t))) < 0) {
        g_buf_free(be, b);
        return dev_rc(g, rc, "weight_new_half");
    }
    *out = b;
    return 0;
}

static const backend_ops grid_ops = {
    .name = "grid",
    .free = g_free,
    .device_name = g_device_name,
    .buf_new = g_buf_new,
    .buf_free = g_buf_free,
    .buf_upload = g_buf_upload,
    .buf_download = g_buf_download,
    .weight_new = g_weight_new,
    .slots_reserve = g_slots_reserve,
    .slot_zero = g_slot_zero,
    .slot_read = g_slot_read,
    .slot_write = g_slot_write,
    .begin_step = g_begin_step,
    .embed = g_embed,
    .layernorm = g_layernorm,
    .matmul = g_matmul,
    .shift_mix = grid_shift_mix,
    .linear_step = grid_linear_step,
    .aft_step = grid_aft_step,
    .gather_rows = g_gather_rows,
    .scale_rows = g_scale_rows,
    .gated_add = g_gated_add,
    .weight_new_half = g_weight_new_half,
    .short_conv = grid_short_conv,
    .delta_step = grid_delta_step,
    .mamba2_step = grid_mamba2_step,
    .rmsnorm = g_rmsnorm,
    .window_step = grid_window_step,
    .aft_window_step = grid_aft_window_step,
    .retention_step = grid_retention_step,
    .favor_features = grid_favor_features,
    .cosformer_step = grid_cosformer_step,
    .linformer_step = grid_linformer_step,
    .rows_nonfinite = g_rows_nonfinite,
    .last_error = g_last_error,
    .poisoned = g_poisoned,
    .graph_begin = g_graph_begin,
    .graph_end = g_graph_end,
    .host_alloc = g_host_alloc,
    .host_free = g_host_free,
};

int grid_backend_set_weights(backend *be, const char *precision, char *err, size_t errlen)
{
    gridbe *g = G(be);
    g->gen++;   /* recorded steps hold the other precision's launches */
    if (!strcmp(precision, "fp32")) g->bf16 = 0;
    else if (!strcmp(precision, "bf16")) g->bf16 = 1;
    else {
        snprintf(err, errlen, "backend %s: weight precision \"%s\" is not fp32 or bf16", g->name, precision);
        return -EINVAL;
    }
    return 0;
}

int grid_backend_new(lind_device *dev, const char *name, const backend_opts *opts, backend **out, char *err,
                     size_t errlen)
{
    *out = NULL;
    gridbe *g = calloc(1, sizeof *g);
    if (!g) {
        dev->free(dev);
        snprintf(err, errlen, "backend %s: out of memory", name);
        return -ENOMEM;
    }
    g->dev = dev;
    snprintf(g->name, sizeof g->name, "%s", name);
    g->ops = grid_ops;
    g->ops.name = g->name;
    g->base.ops = &g->ops;
    g->grec = -1;
    g->graphs = dev->record_begin && !(opts && opts->cuda_no_graphs);
    g->gemv = opts && opts->cuda_gemv;
    const char *w = opts ? opts->cuda_weights : NULL;
    int rc = w && *w ? grid_backend_set_weights(&g->base, w, err, errlen) : 0;
    if (rc < 0) {
        g_free(&g->base);
        return rc;
    }
    *out = &g->base;
    return 0;
}
