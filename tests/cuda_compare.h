/* tests/cuda_compare.h — one backend's ops against the CPU backend's.
 *
 * Shared by test_cuda_harness.c (the CUDA kernels run on the host by the
 * harness) and test_cuda_backend.c (the real device): each case feeds the
 * same random inputs through backend A (under test) and backend R (the CPU
 * backend) and compares the results, activations and the session states
 * both. Errors are measured relative to the scale of the reference vector:
 * max|a − r| / max|r|. Each case prints a NOTE with its worst error so the
 * margin to the tolerance is visible. */
#ifndef LIND_TESTS_CUDA_COMPARE_H
#define LIND_TESTS_CUDA_COMPARE_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include "kernels/backend.h"
#include "kernels/cuda/grid_backend.h"
#include "kernels/half.h"
#include "recurrent/model.h"
#include "tests/check.h"
#include "tests/testmodel.h"

typedef struct cmp_pair {
    backend *a, *r;
    const char *label;   /* prefix of the case names */
    double tol_f;        /* fp32 activations */
    double tol_s;        /* fp64 state */
} cmp_pair;

static cmp_pair P;
static double worst_;    /* worst relative error seen in the current case */

/* ---- helpers ------------------------------------------------------------ */

static uint64_t rng_ = 0x9e3779b97f4a7c15ull;
static float frand(void)   /* uniform in [-1, 1) */
{
    rng_ ^= rng_ << 13; rng_ ^= rng_ >> 7; rng_ ^= rng_ << 17;
    return (float)((rng_ >> 40) * (1.0 / (1ull << 23)) - 1.0);
}
static void fill(float *p, size_t n, float scale, float shift)
{
    for (size_t i = 0; i < n; i++) p[i] = shift + scale * frand();
}
static float *fvec(size_t n) { float *p = calloc(n ? n : 1, sizeof *p); if (!p) abort(); return p; }

/* The same host data in a new buffer of each backend. */
typedef struct twin { backend_buf *a, *r; size_t n; } twin;

static twin twin_new(const float *host, size_t n)
{
    twin t = { NULL, NULL, n };
    int ra = P.a->ops->buf_new(P.a, n, &t.a), rr = P.r->ops->buf_new(P.r, n, &t.r);
    if (ra || rr) { printf("FAIL %s: buf_new %d %d\n", P.label, ra, rr); exit(1); }
    if (host) {
        CHECK(P.a->ops->buf_upload(P.a, t.a, 0, host, n) == 0, "upload to A");
        CHECK(P.r->ops->buf_upload(P.r, t.r, 0, host, n) == 0, "upload to R");
    }
    return t;
}
static void twin_free(twin *t)
{
    P.a->ops->buf_free(P.a, t->a);
    P.r->ops->buf_free(P.r, t->r);
}

static double rel_err_f(const float *a, const float *r, size_t n)
{
    double d = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - (double)r[i]);
        if (!(e <= d)) d = e;   /* NaN wins */
        if (fabs(r[i]) > s) s = fabs(r[i]);
    }
    return s > 0 ? d / s : d;
}
static double rel_err_d(const double *a, const double *r, size_t n)
{
    double d = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs(a[i] - r[i]);
        if (!(e <= d)) d = e;
        if (fabs(r[i]) > s) s = fabs(r[i]);
    }
    return s > 0 ? d / s : d;
}

/* Download n floats of a twin at off from both and compare. */
static void same_f(const twin *t, size_t off, size_t n, const char *what)
{
    float *a = fvec(n), *r = fvec(n);
    int ra = P.a->ops->buf_download(P.a, t->a, off, a, n), rr = P.r->ops->buf_download(P.r, t->r, off, r, n);
    CHECK(ra == 0 && rr == 0, "%s: download failed (%d, %d)", what, ra, rr);
    double e = rel_err_f(a, r, n);
    if (!(e <= worst_)) worst_ = e;
    CHECK(e <= P.tol_f, "%s: relative error %.3g > %.3g", what, e, P.tol_f);
    free(a);
    free(r);
}

/* Compare slot `slot` of both backends: `nd` doubles at byte offset doff
 * and `nf` floats at foff (the regions a case laid out). */
static void same_slot(int slot, size_t slot_bytes, size_t doff, size_t nd, size_t foff, size_t nf, double tol_d,
                      const char *what)
{
    unsigned char *a = calloc(1, slot_bytes), *r = calloc(1, slot_bytes);
    if (!a || !r) abort();
    int ra = P.a->ops->slot_read(P.a, slot, a), rr = P.r->ops->slot_read(P.r, slot, r);
    CHECK(ra == 0 && rr == 0, "%s: slot_read failed (%d, %d)", what, ra, rr);
    if (nd) {
        double *da = malloc(nd * sizeof *da), *dr = malloc(nd * sizeof *dr);
        memcpy(da, a + doff, nd * sizeof *da);
        memcpy(dr, r + doff, nd * sizeof *dr);
        double e = rel_err_d(da, dr, nd);
        if (!(e <= worst_)) worst_ = e;
        CHECK(e <= tol_d, "%s: slot %d state relative error %.3g > %.3g", what, slot, e, tol_d);
        free(da);
        free(dr);
    }
    if (nf) {
        float *fa = malloc(nf * sizeof *fa), *fr = malloc(nf * sizeof *fr);
        memcpy(fa, a + foff, nf * sizeof *fa);
        memcpy(fr, r + foff, nf * sizeof *fr);
        double e = rel_err_f(fa, fr, nf);
        if (!(e <= worst_)) worst_ = e;
        CHECK(e <= P.tol_f, "%s: slot %d shift relative error %.3g > %.3g", what, slot, e, P.tol_f);
        free(fa);
        free(fr);
    }
    free(a);
    free(r);
}

static void both_reserve(int n, size_t bytes)
{
    CHECK(P.a->ops->slots_reserve(P.a, n, bytes) == 0, "A slots_reserve");
    CHECK(P.r->ops->slots_reserve(P.r, n, bytes) == 0, "R slots_reserve");
}
static void both_begin(const int *slots, const int *tokens, int B)
{
    CHECK(P.a->ops->begin_step(P.a, slots, tokens, B) == 0, "A begin_step");
    CHECK(P.r->ops->begin_step(P.r, slots, tokens, B) == 0, "R begin_step");
}

/* The backends' options both sides load with: the test's main fills them
 * from the environment (LIND_CPU_THREADS, LIND_CUDA_DEVICE, ...); the CPU
 * backend ignores the CUDA ones, so cuda_weights acts on the side under
 * test only. */
static backend_opts cmp_be = { .threads = 0, .cpu_gemm = NULL, .cuda_device = -1, .cuda_weights = NULL };

/* The backends keep their pools: each case uses a fresh pair. */
typedef int (*backend_ctor)(backend **out, char *err, size_t errlen);
static backend_ctor ctor_a_;
static int fresh_pair(void)
{
    char err[256];
    backend_free(P.a);
    backend_free(P.r);
    P.a = P.r = NULL;
    if (ctor_a_(&P.a, err, sizeof err) < 0 || backend_cpu_new(&cmp_be, &P.r, err, sizeof err) < 0) {
        printf("FAIL %s: cannot create the backends: %s\n", P.label, err);
        return -1;
    }
    return 0;
}

/* ---- cases -------------------------------------------------------------- */

static const int cmp_slots[] = { 6, 1, 4, 0, 7, 3 };   /* batch rows → slots, out of order */
#define CMP_B 6
#define CMP_NSLOTS 9

/* Tokens are any id below the embedding's rows (here 300, past a byte). */
static void case_embed(void)
{
    int d = 300, V = 300, tokens[CMP_B] = { 0, 299, 17, 17, 256, 3 };
    float *E = fvec((size_t)V * d);
    fill(E, (size_t)V * d, 1, 0);
    both_reserve(CMP_NSLOTS, 64);
    both_begin(cmp_slots, tokens, CMP_B);
    twin tE = twin_new(E, (size_t)V * d), tx = twin_new(NULL, (size_t)CMP_B * d);
    CHECK(P.a->ops->embed(P.a, tE.a, tx.a, d) == 0 && P.r->ops->embed(P.r, tE.r, tx.r, d) == 0, "embed");
    same_f(&tx, 0, (size_t)CMP_B * d, "embed");
    twin_free(&tE);
    twin_free(&tx);
    free(E);
}

static void case_layernorm(void)
{
    static const int widths[] = { 1, 7, 96, 300, 1000 };
    int tokens[CMP_B] = { 0 };
    both_reserve(CMP_NSLOTS, 64);
    both_begin(cmp_slots, tokens, CMP_B);
    for (size_t wi = 0; wi < sizeof widths / sizeof *widths; wi++) {
        int d = widths[wi];
        size_t n = (size_t)CMP_B * d;
        float *x = fvec(n), *w = fvec(d), *b = fvec(d);
        fill(x, n, 2, 3);   /* an offset mean, as residual streams have */
        fill(w, d, 1, 1);
        fill(b, d, 0.5f, 0);
        twin tx = twin_new(x, n), ty = twin_new(NULL, n), tw = twin_new(w, d), tb = twin_new(b, d);
        char what[64];
        snprintf(what, sizeof what, "layernorm d=%d", d);
        CHECK(P.a->ops->layernorm(P.a, tx.a, ty.a, tw.a, tb.a, d, 1e-5f) == 0 &&
              P.r->ops->layernorm(P.r, tx.r, ty.r, tw.r, tb.r, d, 1e-5f) == 0, "%s", what);
        if (d > 1) same_f(&ty, 0, n, what);
        /* in place */
        CHECK(P.a->ops->layernorm(P.a, tx.a, tx.a, tw.a, tb.a, d, 1e-5f) == 0 &&
              P.r->ops->layernorm(P.r, tx.r, tx.r, tw.r, tb.r, d, 1e-5f) == 0, "%s in place", what);
        strcat(what, " in place");
        same_f(&tx, 0, n, what);
        twin_free(&tx); twin_free(&ty); twin_free(&tw); twin_free(&tb);
        free(x); free(w); free(b);
    }
}

/* Every matmul shape the model uses: column blocks of a wider buffer (offset
 * and row stride), with and without bias, overwrite and accumulate. */
static void case_matmul(void)
{
    int B = CMP_B, K = 40, N = 24, ldx = 3 * K + 5, ldy = 2 * N + 3;
    size_t xo = K + 2, yo = N + 1, xn = (size_t)B * ldx + 8, yn = (size_t)B * ldy + 8;
    float *x = fvec(xn), *y = fvec(yn), *W = fvec((size_t)N * K), *bias = fvec(N);
    fill(x, xn, 1, 0);
    fill(y, yn, 1, 0);
    fill(W, (size_t)N * K, 0.3f, 0);
    fill(bias, N, 1, 0);
    twin tx = twin_new(x, xn), tW = twin_new(W, (size_t)N * K), tb = twin_new(bias, N);
    for (int with_bias = 0; with_bias < 2; with_bias++)
        for (int acc = 0; acc < 2; acc++)
            for (int rows = 1; rows <= B; rows += B - 1) {
                twin ty = twin_new(y, yn);
                const backend_buf *ba = with_bias ? tb.a : NULL, *br = with_bias ? tb.r : NULL;
                char what[80];
                snprintf(what, sizeof what, "matmul B=%d bias=%d accumulate=%d", rows, with_bias, acc);
                /* y[rows × N] (+)= x[rows × K] · W[N × K]ᵀ (+ b), blocks of wider rows */
                CHECK(P.a->ops->matmul(P.a, bmview(ty.a, yo, ldy), bview(tx.a, xo, ldx), tW.a, ba, rows, N, K,
                                       acc) == 0 &&
                      P.r->ops->matmul(P.r, bmview(ty.r, yo, ldy), bview(tx.r, xo, ldx), tW.r, br, rows, N, K,
                                       acc) == 0,
                      "%s", what);
                same_f(&ty, 0, yn, what);   /* the whole buffer: nothing outside the block moves */
                twin_free(&ty);
            }
    twin_free(&tx); twin_free(&tW); twin_free(&tb);
    free(x); free(y); free(W); free(bias);
}

/* The feed-forward's first product with its GELU (BACKEND_MM_GELU): with
 * bias, at an offset, over contiguous rows. */
static void case_matmul_gelu(void)
{
    int B = CMP_B, K = 40, N = 72;
    size_t yo = 5, xn = (size_t)B * K, yn = (size_t)B * N + 16;
    float *x = fvec(xn), *y = fvec(yn), *W = fvec((size_t)N * K), *bias = fvec(N);
    fill(x, xn, 2, 0);
    fill(y, yn, 1, 0);
    fill(W, (size_t)N * K, 0.5f, 0);
    fill(bias, N, 1, 0);
    twin tx = twin_new(x, xn), tW = twin_new(W, (size_t)N * K), tb = twin_new(bias, N), ty = twin_new(y, yn);
    /* y[B × N] = GELU(x[B × K] · W[N × K]ᵀ + b) */
    CHECK(P.a->ops->matmul(P.a, bmview(ty.a, yo, N), bview(tx.a, 0, K), tW.a, tb.a, B, N, K, BACKEND_MM_GELU) == 0 &&
          P.r->ops->matmul(P.r, bmview(ty.r, yo, N), bview(tx.r, 0, K), tW.r, tb.r, B, N, K, BACKEND_MM_GELU) == 0,
          "matmul gelu");
    same_f(&ty, 0, yn, "matmul gelu");
    twin_free(&tx); twin_free(&tW); twin_free(&tb); twin_free(&ty);
    free(x); free(y); free(W); free(bias);
}

/* The activation epilogues (GELU, RELU2, SIGMOID): with bias, at an offset,
 * over contiguous rows, inputs spread so both sides of 0 (and σ's tails)
 * are hit. */
static void case_matmul_act(void)
{
    static const struct { int flag; const char *name; } acts[] = {
        { BACKEND_MM_GELU, "gelu" }, { BACKEND_MM_RELU2, "relu2" }, { BACKEND_MM_SIGMOID, "sigmoid" },
    };
    int B = CMP_B, K = 40, N = 72;
    size_t yo = 5, xn = (size_t)B * K, yn = (size_t)B * N + 16;
    float *x = fvec(xn), *y = fvec(yn), *W = fvec((size_t)N * K), *bias = fvec(N);
    fill(x, xn, 2, 0);
    fill(W, (size_t)N * K, 0.5f, 0);
    fill(bias, N, 1, 0);
    twin tx = twin_new(x, xn), tW = twin_new(W, (size_t)N * K), tb = twin_new(bias, N);
    for (size_t i = 0; i < sizeof acts / sizeof *acts; i++)
        for (int with_bias = 0; with_bias < 2; with_bias++)
            for (int rows = 1; rows <= B; rows += B - 1) {
                fill(y, yn, 1, 0);
                twin ty = twin_new(y, yn);
                char what[64];
                snprintf(what, sizeof what, "matmul %s B=%d bias=%d", acts[i].name, rows, with_bias);
                /* y[rows × N] = act(x[rows × K] · W[N × K]ᵀ (+ b)) */
                CHECK(P.a->ops->matmul(P.a, bmview(ty.a, yo, N), bview(tx.a, 0, K), tW.a, with_bias ? tb.a : NULL,
                                       rows, N, K, acts[i].flag) == 0 &&
                      P.r->ops->matmul(P.r, bmview(ty.r, yo, N), bview(tx.r, 0, K), tW.r, with_bias ? tb.r : NULL,
                                       rows, N, K, acts[i].flag) == 0,
                      "%s", what);
                same_f(&ty, 0, yn, what);
                twin_free(&ty);
            }
    twin_free(&tx); twin_free(&tW); twin_free(&tb);
    free(x); free(y); free(W); free(bias);
}

/* A weight [N × K] in half precision (fp16 and bf16 bits) on a backend: its
 * weight_new_half when it has one, else widened on the host to
 * backend_weight_new — what recurrent/kind.c does. */
static int half_weight(backend *be, int N, int K, const uint16_t *h, int wtype, backend_buf **out)
{
    if (be->ops->weight_new_half) return be->ops->weight_new_half(be, N, K, h, wtype, out);
    size_t n = (size_t)N * K;
    float *f = fvec(n);
    for (size_t i = 0; i < n; i++) f[i] = wtype == BACKEND_W_BF16 ? lind_bf16_to_f32(h[i]) : lind_f16_to_f32(h[i]);
    int rc = backend_weight_new(be, N, K, f, out);
    free(f);
    return rc;
}

/* Products with half weights: both precisions, plain, with bias and
 * accumulate, and with an activation, through offsets and strides; at 6 rows
 * and at 20 (a device backend may read half weights directly for a few rows
 * and widen them for many). */
static void case_matmul_half(void)
{
    int B = 20, K = 56, N = 40, ldx = 2 * K + 3, ldy = N + 7;
    size_t xo = 3, yo = 2, xn = (size_t)B * ldx + 8, yn = (size_t)B * ldy + 8;
    float *x = fvec(xn), *y = fvec(yn), *Wf = fvec((size_t)N * K), *bias = fvec(N);
    uint16_t *Wh = malloc((size_t)N * K * sizeof *Wh);
    if (!Wh) abort();
    fill(x, xn, 2, 0);
    fill(Wf, (size_t)N * K, 0.5f, 0);
    Wf[0] = 3e-6f;   /* an fp16 subnormal */
    fill(bias, N, 1, 0);
    twin tx = twin_new(x, xn), tb = twin_new(bias, N);
    for (int wt = BACKEND_W_F16; wt <= BACKEND_W_BF16; wt++) {
        for (size_t i = 0; i < (size_t)N * K; i++)
            Wh[i] = wt == BACKEND_W_BF16 ? lind_f32_to_bf16(Wf[i]) : lind_f32_to_f16(Wf[i]);
        twin tW = { NULL, NULL, (size_t)N * K };
        CHECK(half_weight(P.a, N, K, Wh, wt, &tW.a) == 0 && half_weight(P.r, N, K, Wh, wt, &tW.r) == 0,
              "half weight %d", wt);
        if (!tW.a || !tW.r) break;
        for (int rows = CMP_B; rows <= B; rows += B - CMP_B)
            for (int mode = 0; mode < 3; mode++) {   /* plain, bias + accumulate, bias + SIGMOID */
                fill(y, yn, 1, 0);
                twin ty = twin_new(y, yn);
                int flags = mode == 1 ? BACKEND_MM_ACCUMULATE : mode == 2 ? BACKEND_MM_SIGMOID : 0;
                int ly = mode == 2 ? N : ldy;
                char what[64];
                snprintf(what, sizeof what, "matmul %s weights B=%d mode %d", wt == BACKEND_W_BF16 ? "bf16" : "fp16",
                         rows, mode);
                /* y[rows × N] (+)= x[rows × K] · W[N × K]ᵀ (+ b), W half */
                CHECK(P.a->ops->matmul(P.a, bmview(ty.a, yo, ly), bview(tx.a, xo, ldx), tW.a, mode ? tb.a : NULL,
                                       rows, N, K, flags) == 0 &&
                      P.r->ops->matmul(P.r, bmview(ty.r, yo, ly), bview(tx.r, xo, ldx), tW.r, mode ? tb.r : NULL,
                                       rows, N, K, flags) == 0,
                      "%s", what);
                same_f(&ty, 0, yn, what);
                twin_free(&ty);
            }
        twin_free(&tW);
    }
    twin_free(&tx); twin_free(&tb);
    free(x); free(y); free(Wf); free(bias); free(Wh);
}

/* gather_rows (any rows, repeated, out of order), scale_rows and gated_add
 * (column blocks of wider buffers) over a batch with runs. */
static void case_row_ops(void)
{
    enum { R = 9, d = 70 };
    const int slots[R] = { 4, 4, 4, 1, 7, 7, 0, 0, 0 }, tokens[R] = { 0 };
    both_reserve(CMP_NSLOTS, 64);
    both_begin(slots, tokens, R);
    size_t n = (size_t)R * d;
    float *src = fvec(n), *dst = fvec(n + 8);
    fill(src, n, 3, 1);
    fill(dst, n + 8, 1, 0);
    twin ts = twin_new(src, n), tdst = twin_new(dst, n + 8);
    const int rows[5] = { 8, 0, 3, 3, 5 };
    CHECK(P.a->ops->gather_rows(P.a, ts.a, rows, 5, tdst.a, d) == 0 &&
          P.r->ops->gather_rows(P.r, ts.r, rows, 5, tdst.r, d) == 0, "gather_rows");
    same_f(&tdst, 0, n + 8, "gather_rows");
    float got[5 * d];
    CHECK(P.a->ops->buf_download(P.a, tdst.a, 0, got, 5 * d) == 0, "download");
    int exact = 1;
    for (int i = 0; i < 5; i++) exact &= !memcmp(got + i * d, src + (size_t)rows[i] * d, d * sizeof(float));
    CHECK(exact, "gather_rows: a row is not the source row it names");
    for (int k = 0; k < 2; k++) {
        float sc = k ? 0.3f : 0.5f;
        CHECK(P.a->ops->scale_rows(P.a, ts.a, d, sc) == 0 && P.r->ops->scale_rows(P.r, ts.r, d, sc) == 0, "scale_rows");
        same_f(&ts, 0, n, "scale_rows");
    }
    int ldg = 2 * d + 5, ldv = 3 * d;
    size_t go = d + 1, vo = 2 * d, gn = (size_t)R * ldg, vn = (size_t)R * ldv;
    float *gate = fvec(gn), *v = fvec(vn);
    fill(gate, gn, 0.5f, 0.5f);
    fill(v, vn, 2, 0);
    twin tg = twin_new(gate, gn), tv = twin_new(v, vn);
    for (int k = 0; k < 2; k++) {
        CHECK(P.a->ops->gated_add(P.a, ts.a, tg.a, go, ldg, tv.a, vo, ldv, d) == 0 &&
              P.r->ops->gated_add(P.r, ts.r, tg.r, go, ldg, tv.r, vo, ldv, d) == 0, "gated_add");
        same_f(&ts, 0, n, "gated_add");
    }
    twin_free(&ts); twin_free(&tdst); twin_free(&tg); twin_free(&tv);
    free(src); free(dst); free(gate); free(v);
}

static void case_shift_mix(void)
{
    int d = 300, tokens[CMP_B] = { 0 };
    size_t slot_bytes = 64 + (size_t)d * 4 + 12, off = 64;
    both_reserve(CMP_NSLOTS, slot_bytes);
    for (int nmix = 1; nmix <= 3; nmix += 2) {
        float *h = fvec((size_t)CMP_B * d), *mu = fvec((size_t)nmix * d);
        fill(mu, (size_t)nmix * d, 0.5f, 0.5f);
        twin tmu = twin_new(mu, (size_t)nmix * d), tout = twin_new(NULL, (size_t)CMP_B * nmix * d);
        for (int step = 0; step < 4; step++) {
            int B = step == 2 ? 3 : CMP_B;   /* a smaller batch in between */
            fill(h, (size_t)B * d, 1, 0);
            twin th = twin_new(h, (size_t)B * d);
            both_begin(cmp_slots + (step == 2 ? 2 : 0), tokens, B);
            char what[64];
            snprintf(what, sizeof what, "shift_mix nmix=%d step %d", nmix, step);
            CHECK(P.a->ops->shift_mix(P.a, th.a, tmu.a, tout.a, off, d, nmix) == 0 &&
                  P.r->ops->shift_mix(P.r, th.r, tmu.r, tout.r, off, d, nmix) == 0, "%s", what);
            same_f(&tout, 0, (size_t)B * nmix * d, what);
            twin_free(&th);
        }
        for (int s = 0; s < CMP_NSLOTS; s++) same_slot(s, slot_bytes, 0, 0, off, d, P.tol_s, "shift_mix prev");
        twin_free(&tmu); twin_free(&tout);
        free(h); free(mu);
    }
}

/* Linear attention: several head widths (a power of two, not one, wider
 * than a warp), γ = 1 and γ < 1, 25 steps on out-of-order slots, the region
 * at a nonzero offset; outputs every step, S and z at the end. */
static void case_linear(void)
{
    static const int dhs[] = { 8, 48, 64 };
    int H = 3, tokens[CMP_B] = { 0 };
    for (size_t di = 0; di < sizeof dhs / sizeof *dhs; di++)
        for (int decay = 0; decay < 2; decay++) {
            if (fresh_pair() < 0) return;
            int dh = dhs[di], HD = H * dh;
            size_t off = 128, nd = (size_t)HD * (dh + 1), slot_bytes = off + nd * 8 + 40;
            both_reserve(CMP_NSLOTS, slot_bytes);
            float gamma[3] = { 0.9f, 0.99f, 0.5f };
            twin tg = twin_new(gamma, H), tin = twin_new(NULL, (size_t)CMP_B * 3 * HD),
                 tout = twin_new(NULL, (size_t)CMP_B * HD);
            float *in = fvec((size_t)CMP_B * 3 * HD);
            for (int step = 0; step < 25; step++) {
                fill(in, (size_t)CMP_B * 3 * HD, 2, 0);
                CHECK(P.a->ops->buf_upload(P.a, tin.a, 0, in, tin.n) == 0 &&
                      P.r->ops->buf_upload(P.r, tin.r, 0, in, tin.n) == 0, "upload");
                both_begin(cmp_slots, tokens, CMP_B);
                char what[80];
                snprintf(what, sizeof what, "linear dh=%d decay=%d step %d", dh, decay, step);
                CHECK(P.a->ops->linear_step(P.a, tin.a, decay ? tg.a : NULL, tout.a, off, H, dh, 1e-6f) == 0 &&
                      P.r->ops->linear_step(P.r, tin.r, decay ? tg.r : NULL, tout.r, off, H, dh, 1e-6f) == 0,
                      "%s", what);
                same_f(&tout, 0, tout.n, what);
                if (check_failed_) break;
            }
            for (int s = 0; s < CMP_NSLOTS; s++) same_slot(s, slot_bytes, off, nd, 0, 0, P.tol_s, "linear S,z");
            twin_free(&tg); twin_free(&tin); twin_free(&tout);
            free(in);
        }
}

/* AFT, simple and with decay/bonus, the latter with a double and a float
 * state; k spans ±60 so the running-max scaling is exercised (e^60
 * overflows fp32). */
static void case_aft(void)
{
    int d = 300, tokens[CMP_B] = { 0 };
    size_t off = 64, nd = (size_t)3 * d, slot_bytes = off + nd * 8;
    for (int variant = 0; variant < 3; variant++) {
        int decay = variant > 0, f32 = variant == 2;
        if (fresh_pair() < 0) return;
        both_reserve(CMP_NSLOTS, slot_bytes);
        float *w = fvec(d), *u = fvec(d), *in = fvec((size_t)CMP_B * 3 * d);
        for (int c = 0; c < d; c++) { w[c] = expf(2 * frand()); u[c] = frand(); }
        twin tw = twin_new(w, d), tu = twin_new(u, d), tin = twin_new(NULL, (size_t)CMP_B * 3 * d),
             tout = twin_new(NULL, (size_t)CMP_B * d);
        for (int step = 0; step < 25; step++) {
            for (int b = 0; b < CMP_B; b++) {
                float *row = in + (size_t)b * 3 * d;
                fill(row, d, 3, 0);                         /* r */
                fill(row + d, d, step % 5 == 4 ? 60 : 3, 0); /* k */
                fill(row + 2 * d, d, 1, 0);                 /* v */
            }
            CHECK(P.a->ops->buf_upload(P.a, tin.a, 0, in, tin.n) == 0 &&
                  P.r->ops->buf_upload(P.r, tin.r, 0, in, tin.n) == 0, "upload");
            both_begin(cmp_slots, tokens, CMP_B);
            char what[64];
            snprintf(what, sizeof what, "aft decay=%d f32=%d step %d", decay, f32, step);
            CHECK(P.a->ops->aft_step(P.a, tin.a, decay ? tw.a : NULL, decay ? tu.a : NULL, tout.a, off, d, f32) == 0 &&
                  P.r->ops->aft_step(P.r, tin.r, decay ? tw.r : NULL, decay ? tu.r : NULL, tout.r, off, d, f32) == 0,
                  "%s", what);
            same_f(&tout, 0, tout.n, what);
            if (check_failed_) break;
        }
        for (int s = 0; s < CMP_NSLOTS; s++)
            same_slot(s, slot_bytes, off, f32 ? 0 : nd, off, f32 ? nd : 0, P.tol_s,
                      f32 ? "aft num,den,max (float)" : "aft num,den,max");
        twin_free(&tw); twin_free(&tu); twin_free(&tin); twin_free(&tout);
        free(w); free(u); free(in);
    }
}

/* ---- runs ----------------------------------------------------------------
 * The state ops over a batch whose rows form runs (a session's consecutive
 * tokens: batched prefill) must equal, bit for bit, the same rows fed one
 * row per step on the same backend, and match the reference backend's runs.
 * One slot holds a linear state (H × dh), an AFT state (d channels) and a
 * token-shift vector (d floats). */
enum { RUN_H = 3, RUN_DH = 48, RUN_HD = RUN_H * RUN_DH, RUN_D = 300 };
static const size_t run_lin_n = (size_t)RUN_HD * (RUN_DH + 1), run_aft_off = run_lin_n * 8,
                    run_sh_off = run_aft_off + (size_t)3 * RUN_D * 8, run_bytes = run_sh_off + (size_t)RUN_D * 4;

typedef struct run_bufs {
    backend_buf *lin_in, *lin_out, *aft_in, *aft_out, *h, *sh_out, *gamma, *w, *u, *mu;
} run_bufs;

static void run_bufs_new(backend *be, run_bufs *b, int R, const float *gamma, const float *w, const float *u,
                         const float *mu)
{
    const backend_ops *o = be->ops;
    int rc = o->buf_new(be, (size_t)R * 3 * RUN_HD, &b->lin_in) | o->buf_new(be, (size_t)R * RUN_HD, &b->lin_out) |
             o->buf_new(be, (size_t)R * 3 * RUN_D, &b->aft_in) | o->buf_new(be, (size_t)R * RUN_D, &b->aft_out) |
             o->buf_new(be, (size_t)R * RUN_D, &b->h) | o->buf_new(be, (size_t)R * 2 * RUN_D, &b->sh_out) |
             o->buf_new(be, RUN_H, &b->gamma) | o->buf_new(be, RUN_D, &b->w) | o->buf_new(be, RUN_D, &b->u) |
             o->buf_new(be, 2 * RUN_D, &b->mu);
    CHECK(rc == 0, "%s: buf_new", o->name);
    if (rc) abort();
    CHECK(o->buf_upload(be, b->gamma, 0, gamma, RUN_H) == 0 && o->buf_upload(be, b->w, 0, w, RUN_D) == 0 &&
          o->buf_upload(be, b->u, 0, u, RUN_D) == 0 && o->buf_upload(be, b->mu, 0, mu, 2 * RUN_D) == 0, "upload");
}

static void run_bufs_free(backend *be, run_bufs *b)
{
    backend_buf *all[] = { b->lin_in, b->lin_out, b->aft_in, b->aft_out, b->h, b->sh_out, b->gamma, b->w, b->u, b->mu };
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) be->ops->buf_free(be, all[i]);
}

/* The three state ops over rows [r0, r0 + R) of the host inputs, as a batch
 * of R rows with the given slots; outputs appended to the host arrays at
 * row r0. */
static int run_ops(backend *be, run_bufs *b, const int *slots, int R, int r0, const float *lin_in,
                   const float *aft_in, const float *h, float *lin_out, float *aft_out, float *sh_out)
{
    const backend_ops *o = be->ops;
    int tokens[64] = { 0 };
    int rc = o->begin_step(be, slots, tokens, R);
    if (!rc) rc = o->buf_upload(be, b->lin_in, 0, lin_in + (size_t)r0 * 3 * RUN_HD, (size_t)R * 3 * RUN_HD);
    if (!rc) rc = o->buf_upload(be, b->aft_in, 0, aft_in + (size_t)r0 * 3 * RUN_D, (size_t)R * 3 * RUN_D);
    if (!rc) rc = o->buf_upload(be, b->h, 0, h + (size_t)r0 * RUN_D, (size_t)R * RUN_D);
    if (!rc) rc = o->linear_step(be, b->lin_in, b->gamma, b->lin_out, 0, RUN_H, RUN_DH, 1e-6f);
    if (!rc) rc = o->aft_step(be, b->aft_in, b->w, b->u, b->aft_out, run_aft_off, RUN_D, 0);
    if (!rc) rc = o->shift_mix(be, b->h, b->mu, b->sh_out, run_sh_off, RUN_D, 2);
    if (!rc) rc = o->buf_download(be, b->lin_out, 0, lin_out + (size_t)r0 * RUN_HD, (size_t)R * RUN_HD);
    if (!rc) rc = o->buf_download(be, b->aft_out, 0, aft_out + (size_t)r0 * RUN_D, (size_t)R * RUN_D);
    if (!rc) rc = o->buf_download(be, b->sh_out, 0, sh_out + (size_t)r0 * 2 * RUN_D, (size_t)R * 2 * RUN_D);
    return rc;
}

/* Two layouts, each over three calls (so states carry from run to run): a
 * prefill chunk (one session, 33 rows) and mixed runs of four sessions
 * (7, 1, 12 and 3 rows). Backend A runs them into slots s; A again one row
 * per call into slots s + 10; R runs them into slots s. */
static void case_runs(void)
{
    static const int chunk[33] = { 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5,
                                   5, 5, 5, 5, 5, 5, 5 };
    static const int mixed[23] = { 6, 6, 6, 6, 6, 6, 6, 1, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 0, 0, 0 };
    static const struct { const int *slots; int R; const char *name; } layouts[] = {
        { chunk, 33, "prefill chunk of 33" }, { mixed, 23, "runs of 7, 1, 12, 3" },
    };
    enum { CALLS = 3, MAXR = 33 };
    float gamma[RUN_H] = { 0.9f, 0.99f, 0.5f }, w[RUN_D], u[RUN_D], mu[2 * RUN_D];
    for (int c = 0; c < RUN_D; c++) { w[c] = expf(2 * frand()); u[c] = frand(); }
    fill(mu, 2 * RUN_D, 0.5f, 0.5f);
    size_t rows = (size_t)CALLS * MAXR;
    float *lin_in = fvec(rows * 3 * RUN_HD), *aft_in = fvec(rows * 3 * RUN_D), *h = fvec(rows * RUN_D);
    float *out[3][3];   /* [A runs, A one row, R runs][lin, aft, shift] */
    for (int k = 0; k < 3; k++) {
        out[k][0] = fvec(rows * RUN_HD);
        out[k][1] = fvec(rows * RUN_D);
        out[k][2] = fvec(rows * 2 * RUN_D);
    }
    unsigned char *sa = malloc(run_bytes), *s1 = malloc(run_bytes);
    for (size_t li = 0; li < sizeof layouts / sizeof *layouts && !check_failed_; li++) {
        if (fresh_pair() < 0) break;
        int R = layouts[li].R;
        const int *sl = layouts[li].slots;
        both_reserve(20, run_bytes);
        run_bufs ba, br;
        run_bufs_new(P.a, &ba, R, gamma, w, u, mu);
        run_bufs_new(P.r, &br, R, gamma, w, u, mu);
        fill(lin_in, (size_t)CALLS * R * 3 * RUN_HD, 2, 0);
        fill(h, (size_t)CALLS * R * RUN_D, 1, 0);
        for (int r = 0; r < CALLS * R; r++) {
            float *row = aft_in + (size_t)r * 3 * RUN_D;
            fill(row, RUN_D, 3, 0);
            fill(row + RUN_D, RUN_D, r % 5 == 4 ? 60 : 3, 0);   /* k up to ±60: the running max */
            fill(row + 2 * RUN_D, RUN_D, 1, 0);
        }
        for (int call = 0; call < CALLS; call++) {
            int r0 = call * R;
            CHECK(run_ops(P.a, &ba, sl, R, r0, lin_in, aft_in, h, out[0][0], out[0][1], out[0][2]) == 0,
                  "A runs: %s", layouts[li].name);
            CHECK(run_ops(P.r, &br, sl, R, r0, lin_in, aft_in, h, out[2][0], out[2][1], out[2][2]) == 0,
                  "R runs: %s", layouts[li].name);
            for (int r = 0; r < R; r++) {
                int one = sl[r] + 10;
                CHECK(run_ops(P.a, &ba, &one, 1, r0 + r, lin_in, aft_in, h, out[1][0], out[1][1], out[1][2]) == 0,
                      "A one row");
            }
        }
        size_t n[3] = { (size_t)CALLS * R * RUN_HD, (size_t)CALLS * R * RUN_D, (size_t)CALLS * R * 2 * RUN_D };
        const char *what[3] = { "linear_step", "aft_step", "shift_mix" };
        for (int k = 0; k < 3; k++) {
            CHECK(!memcmp(out[0][k], out[1][k], n[k] * sizeof(float)), "%s, %s: runs differ from one-row steps",
                  layouts[li].name, what[k]);
            double e = rel_err_f(out[0][k], out[2][k], n[k]);
            if (!(e <= worst_)) worst_ = e;
            CHECK(e <= P.tol_f, "%s, %s: relative error %.3g against the reference > %.3g", layouts[li].name,
                  what[k], e, P.tol_f);
        }
        for (int r = 0; r < R; r++) {
            if (r > 0 && sl[r] == sl[r - 1]) continue;
            CHECK(P.a->ops->slot_read(P.a, sl[r], sa) == 0 && P.a->ops->slot_read(P.a, sl[r] + 10, s1) == 0,
                  "slot_read");
            CHECK(!memcmp(sa, s1, run_bytes), "%s: slot %d after runs differs from one-row steps", layouts[li].name,
                  sl[r]);
            same_slot(sl[r], run_bytes, 0, run_lin_n + 3 * RUN_D, run_sh_off, RUN_D, P.tol_s, layouts[li].name);
        }
        run_bufs_free(P.a, &ba);
        run_bufs_free(P.r, &br);
    }
    for (int k = 0; k < 3; k++) for (int j = 0; j < 3; j++) free(out[k][j]);
    free(lin_in); free(aft_in); free(h); free(sa); free(s1);
}

/* ---- short convolution and the gated delta rule ---------------------------
 * Batches of one row per session and batches of runs of several lengths
 * (the CUDA kernels have one block row per run), alternating so states carry
 * across both. */
static const int dl_single[6] = { 6, 1, 4, 0, 7, 3 };
static const int dl_runs[17] = { 6, 6, 6, 1, 4, 4, 4, 4, 4, 0, 7, 7, 3, 3, 3, 3, 3 };   /* 3, 1, 5, 1, 2, 5 */
static const int *dl_layout(int step, int *R)
{
    *R = step % 2 ? 17 : 6;
    return step % 2 ? dl_runs : dl_single;
}

/* Every slot of both backends starts with the same random bytes in
 * [foff, foff + nf floats) and the int32 `idx` pattern at idx_off (any
 * pattern is a valid ring index: it is read modulo K − 1). */
static void dl_seed_slots(size_t slot_bytes, size_t foff, size_t nf, size_t idx_off, int32_t idx0)
{
    unsigned char *blob = calloc(1, slot_bytes);
    float *f = fvec(nf);
    if (!blob) abort();
    for (int s = 0; s < CMP_NSLOTS; s++) {
        fill(f, nf, 1, 0);
        memcpy(blob + foff, f, nf * sizeof *f);
        uint32_t idx = (uint32_t)idx0 + 7919u * (uint32_t)s;   /* wraps past 2³¹: any pattern */
        memcpy(blob + idx_off, &idx, sizeof idx);
        CHECK(P.a->ops->slot_write(P.a, s, blob) == 0 && P.r->ops->slot_write(P.r, s, blob) == 0, "slot_write");
    }
    free(blob);
    free(f);
}

/* The ring index of every slot equal on both backends; in [0, K − 1) in
 * the slots the batches used (the others keep their seeded pattern). */
static void dl_same_idx(size_t slot_bytes, size_t idx_off, int K, const char *what)
{
    unsigned char *a = malloc(slot_bytes), *r = malloc(slot_bytes);
    if (!a || !r) abort();
    for (int s = 0; s < CMP_NSLOTS; s++) {
        int32_t ia, ir;
        CHECK(P.a->ops->slot_read(P.a, s, a) == 0 && P.r->ops->slot_read(P.r, s, r) == 0, "slot_read");
        memcpy(&ia, a + idx_off, sizeof ia);
        memcpy(&ir, r + idx_off, sizeof ir);
        int used = s != 2 && s != 5 && s != 8;   /* not in dl_single / dl_runs */
        CHECK(ia == ir && (!used || (ia >= 0 && ia < K - 1)), "%s: slot %d ring index %d, reference %d (K %d)", what,
              s, ia, ir, K);
    }
    free(a);
    free(r);
}

/* short_conv: n 300 (two blocks per run, the second partly idle) and 24;
 * K 2, 4 and 7; SiLU on and off; in place (the model's use) and into a
 * separate buffer with other strides; the ring at a nonzero offset, random
 * to start with, and ring indices from arbitrary bit patterns. Outputs every
 * step, rings and indices at the end. */
static void case_short_conv(void)
{
    static const struct { int n, K, silu, inplace; int32_t idx0; } cfgs[] = {
        { 300, 4, 1, 1, -123456789 }, { 300, 2, 0, 0, 0 }, { 24, 7, 1, 0, 2147480000 }, { 24, 4, 0, 1, 5 },
    };
    for (size_t ci = 0; ci < sizeof cfgs / sizeof *cfgs && !check_failed_; ci++) {
        if (fresh_pair() < 0) return;
        int n = cfgs[ci].n, K = cfgs[ci].K, ldi = n + 5, ldo = cfgs[ci].inplace ? ldi : n + 3, tokens[17] = { 0 };
        size_t ring_off = 20, nring = (size_t)n * (K - 1), idx_off = ring_off + nring * 4 + 8,
               slot_bytes = idx_off + 4 + 12;
        both_reserve(CMP_NSLOTS, slot_bytes);
        dl_seed_slots(slot_bytes, ring_off, nring, idx_off, cfgs[ci].idx0);
        float *w = fvec((size_t)n * K), *in = fvec((size_t)17 * ldi);
        fill(w, (size_t)n * K, 1, 0);
        fill(in, (size_t)17 * ldi, 1, 0);   /* out's first contents: what the op must leave past n */
        twin tw = twin_new(w, (size_t)n * K), tin = twin_new(NULL, (size_t)17 * ldi),
             tout = cfgs[ci].inplace ? tin : twin_new(in, (size_t)17 * ldo);
        for (int step = 0; step < 12 && !check_failed_; step++) {
            int R;
            const int *sl = dl_layout(step, &R);
            fill(in, (size_t)17 * ldi, 2, 0);
            CHECK(P.a->ops->buf_upload(P.a, tin.a, 0, in, tin.n) == 0 &&
                  P.r->ops->buf_upload(P.r, tin.r, 0, in, tin.n) == 0, "upload");
            both_begin(sl, tokens, R);
            char what[96];
            snprintf(what, sizeof what, "short_conv n=%d K=%d silu=%d inplace=%d step %d", n, K, cfgs[ci].silu,
                     cfgs[ci].inplace, step);
            CHECK(P.a->ops->short_conv(P.a, tin.a, ldi, tout.a, ldo, tw.a, n, K, ring_off, idx_off, cfgs[ci].silu) == 0 &&
                  P.r->ops->short_conv(P.r, tin.r, ldi, tout.r, ldo, tw.r, n, K, ring_off, idx_off, cfgs[ci].silu) == 0,
                  "%s", what);
            same_f(&tout, 0, (size_t)R * ldo, what);   /* the columns past n too: untouched alike */
        }
        for (int s = 0; s < CMP_NSLOTS; s++) same_slot(s, slot_bytes, 0, 0, ring_off, nring, P.tol_s, "short_conv ring");
        dl_same_idx(slot_bytes, idx_off, K, "short_conv");
        twin_free(&tw);
        twin_free(&tin);
        if (!cfgs[ci].inplace) twin_free(&tout);
        free(w);
        free(in);
    }
}

/* delta_step inputs: q, k, v (±2), β logits (±3), gate logits (±3). */
static void dl_fill_in(float *in, int R, int H, int dh)
{
    int hd = H * dh, ld = 3 * hd + 2 * H;
    for (int r = 0; r < R; r++) {
        fill(in + (size_t)r * ld, (size_t)3 * hd, 2, 0);
        fill(in + (size_t)r * ld + 3 * hd, (size_t)2 * H, 3, 0);
    }
}

/* A = exp(U(−2, 0.5)) and the gate bias U(−3, 0) (α about 0.3 … 0.99, as
 * the models use), the RMS weight 1 ± 0.1. */
static void dl_params(float *gate, float *norm_w, int H, int dh)
{
    for (int h = 0; h < H; h++) {
        gate[h] = expf(-0.75f + 1.25f * frand());
        gate[H + h] = -1.5f + 1.5f * frand();
    }
    fill(norm_w, dh, 0.1f, 1);
}

/* delta_step: head widths 8, 48 (a warp-sized block, partly idle) and 100
 * (not a power of two: 128 threads), 3 heads, 16 steps on out-of-order
 * slots alternating one-row batches and runs, S at a nonzero offset;
 * outputs every step, S at the end. */
static void case_delta(void)
{
    static const int dhs[] = { 8, 48, 100 };
    int H = 3, tokens[17] = { 0 };
    for (size_t di = 0; di < sizeof dhs / sizeof *dhs && !check_failed_; di++) {
        if (fresh_pair() < 0) return;
        int dh = dhs[di], hd = H * dh, ld = 3 * hd + 2 * H;
        size_t off = 64, nd = (size_t)hd * dh, slot_bytes = off + nd * 8 + 24;
        both_reserve(CMP_NSLOTS, slot_bytes);
        float gate[6], *norm_w = fvec(dh), *in = fvec((size_t)17 * ld);
        dl_params(gate, norm_w, H, dh);
        twin tg = twin_new(gate, 2 * H), tn = twin_new(norm_w, dh), tin = twin_new(NULL, (size_t)17 * ld),
             tout = twin_new(NULL, (size_t)17 * hd);
        for (int step = 0; step < 16 && !check_failed_; step++) {
            int R;
            const int *sl = dl_layout(step, &R);
            dl_fill_in(in, R, H, dh);
            CHECK(P.a->ops->buf_upload(P.a, tin.a, 0, in, (size_t)R * ld) == 0 &&
                  P.r->ops->buf_upload(P.r, tin.r, 0, in, (size_t)R * ld) == 0, "upload");
            both_begin(sl, tokens, R);
            char what[80];
            snprintf(what, sizeof what, "delta_step dh=%d step %d (%d rows)", dh, step, R);
            CHECK(P.a->ops->delta_step(P.a, tin.a, tg.a, tn.a, tout.a, off, H, dh, 1e-5f) == 0 &&
                  P.r->ops->delta_step(P.r, tin.r, tg.r, tn.r, tout.r, off, H, dh, 1e-5f) == 0, "%s", what);
            same_f(&tout, 0, (size_t)R * hd, what);
        }
        for (int s = 0; s < CMP_NSLOTS; s++) same_slot(s, slot_bytes, off, nd, 0, 0, P.tol_s, "delta_step S");
        twin_free(&tg); twin_free(&tn); twin_free(&tin); twin_free(&tout);
        free(norm_w); free(in);
    }
}

/* The delta mixer's two ops as the model runs them (the convolution in
 * place over q | k | v of the projections, then the delta rule), over runs:
 * a prefill chunk of 33 rows and runs of 7, 1, 12 and 3, three calls each.
 * Backend A's runs must equal, bit for bit, the same rows one per call
 * (outputs and whole slots), and match the reference's runs. */
enum { DR_H = 2, DR_DH = 16, DR_HD = DR_H * DR_DH, DR_LD = 3 * DR_HD + 2 * DR_H, DR_K = 4 };
static const size_t dr_ring_off = (size_t)DR_HD * DR_DH * 8, dr_nring = (size_t)3 * DR_HD * (DR_K - 1),
                    dr_idx_off = (size_t)DR_HD * DR_DH * 8 + (size_t)3 * DR_HD * (DR_K - 1) * 4,
                    dr_bytes = (size_t)DR_HD * DR_DH * 8 + (size_t)3 * DR_HD * (DR_K - 1) * 4 + 4;

static int dr_ops(backend *be, backend_buf *const *b, const int *slots, int R, int r0, const float *in, float *out)
{
    const backend_ops *o = be->ops;
    int tokens[64] = { 0 };
    int rc = o->begin_step(be, slots, tokens, R);
    if (!rc) rc = o->buf_upload(be, b[0], 0, in + (size_t)r0 * DR_LD, (size_t)R * DR_LD);
    if (!rc) rc = o->short_conv(be, b[0], DR_LD, b[0], DR_LD, b[1], 3 * DR_HD, DR_K, dr_ring_off, dr_idx_off, 1);
    if (!rc) rc = o->delta_step(be, b[0], b[2], b[3], b[4], 0, DR_H, DR_DH, 1e-5f);
    if (!rc) rc = o->buf_download(be, b[4], 0, out + (size_t)r0 * DR_HD, (size_t)R * DR_HD);
    return rc;
}

static void case_delta_runs(void)
{
    static const int chunk[33] = { 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5,
                                   5, 5, 5, 5, 5, 5, 5 };
    static const int mixed[23] = { 6, 6, 6, 6, 6, 6, 6, 1, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 0, 0, 0 };
    static const struct { const int *slots; int R; const char *name; } layouts[] = {
        { chunk, 33, "prefill chunk of 33" }, { mixed, 23, "runs of 7, 1, 12, 3" },
    };
    enum { CALLS = 3, MAXR = 33 };
    float w[3 * DR_HD * DR_K], gate[2 * DR_H], norm_w[DR_DH];
    fill(w, 3 * DR_HD * DR_K, 0.5f, 0);
    dl_params(gate, norm_w, DR_H, DR_DH);
    float *in = fvec((size_t)CALLS * MAXR * DR_LD), *out[3];
    for (int k = 0; k < 3; k++) out[k] = fvec((size_t)CALLS * MAXR * DR_HD);   /* A runs, A one row, R runs */
    unsigned char *sa = malloc(dr_bytes), *s1 = malloc(dr_bytes);
    for (size_t li = 0; li < sizeof layouts / sizeof *layouts && !check_failed_; li++) {
        if (fresh_pair() < 0) break;
        int R = layouts[li].R;
        const int *sl = layouts[li].slots;
        both_reserve(20, dr_bytes);
        backend_buf *ba[5], *br[5];
        backend *be[2] = { P.a, P.r };
        for (int k = 0; k < 2; k++) {
            backend_buf **b = k ? br : ba;
            const backend_ops *o = be[k]->ops;
            int rc = o->buf_new(be[k], (size_t)R * DR_LD, &b[0]) | o->buf_new(be[k], 3 * DR_HD * DR_K, &b[1]) |
                     o->buf_new(be[k], 2 * DR_H, &b[2]) | o->buf_new(be[k], DR_DH, &b[3]) |
                     o->buf_new(be[k], (size_t)R * DR_HD, &b[4]);
            CHECK(rc == 0, "buf_new");
            if (rc) abort();
            CHECK(o->buf_upload(be[k], b[1], 0, w, 3 * DR_HD * DR_K) == 0 &&
                  o->buf_upload(be[k], b[2], 0, gate, 2 * DR_H) == 0 && o->buf_upload(be[k], b[3], 0, norm_w, DR_DH) == 0,
                  "upload");
        }
        for (int r = 0; r < CALLS * R; r++) dl_fill_in(in + (size_t)r * DR_LD, 1, DR_H, DR_DH);
        for (int call = 0; call < CALLS; call++) {
            int r0 = call * R;
            CHECK(dr_ops(P.a, ba, sl, R, r0, in, out[0]) == 0, "A runs: %s", layouts[li].name);
            CHECK(dr_ops(P.r, br, sl, R, r0, in, out[2]) == 0, "R runs: %s", layouts[li].name);
            for (int r = 0; r < R; r++) {
                int one = sl[r] + 10;
                CHECK(dr_ops(P.a, ba, &one, 1, r0 + r, in, out[1]) == 0, "A one row");
            }
        }
        size_t n = (size_t)CALLS * R * DR_HD;
        CHECK(!memcmp(out[0], out[1], n * sizeof(float)), "%s: delta outputs of runs differ from one-row steps",
              layouts[li].name);
        double e = rel_err_f(out[0], out[2], n);
        if (!(e <= worst_)) worst_ = e;
        CHECK(e <= P.tol_f, "%s: relative error %.3g against the reference > %.3g", layouts[li].name, e, P.tol_f);
        for (int r = 0; r < R; r++) {
            if (r > 0 && sl[r] == sl[r - 1]) continue;
            CHECK(P.a->ops->slot_read(P.a, sl[r], sa) == 0 && P.a->ops->slot_read(P.a, sl[r] + 10, s1) == 0,
                  "slot_read");
            CHECK(!memcmp(sa, s1, dr_bytes), "%s: slot %d after runs differs from one-row steps", layouts[li].name,
                  sl[r]);
            same_slot(sl[r], dr_bytes, 0, (size_t)DR_HD * DR_DH, dr_ring_off, dr_nring, P.tol_s, layouts[li].name);
        }
        for (int k = 0; k < 5; k++) { P.a->ops->buf_free(P.a, ba[k]); P.r->ops->buf_free(P.r, br[k]); }
    }
    for (int k = 0; k < 3; k++) free(out[k]);
    free(in); free(sa); free(s1);
}

/* The pool: growing keeps slot contents, new slots are zero, write/read
 * round-trips, zero clears. */
static void case_slots(void)
{
    size_t bytes = 1000;
    unsigned char *src = malloc(bytes), *got = malloc(bytes), *zero = calloc(1, bytes);
    for (size_t i = 0; i < bytes; i++) src[i] = (unsigned char)(i * 7 + 3);
    backend *be[2] = { P.a, P.r };
    for (int k = 0; k < 2; k++) {
        const backend_ops *o = be[k]->ops;
        CHECK(o->slots_reserve(be[k], 3, bytes) == 0, "%s reserve 3", o->name);
        CHECK(o->slot_write(be[k], 2, src) == 0, "%s write", o->name);
        CHECK(o->slots_reserve(be[k], 50, bytes) == 0, "%s grow to 50", o->name);
        CHECK(o->slot_read(be[k], 2, got) == 0 && !memcmp(got, src, bytes), "%s: slot 2 kept across growth", o->name);
        CHECK(o->slot_read(be[k], 49, got) == 0 && !memcmp(got, zero, bytes), "%s: new slot 49 is zero", o->name);
        CHECK(o->slot_zero(be[k], 2) == 0 && o->slot_read(be[k], 2, got) == 0 && !memcmp(got, zero, bytes),
              "%s: slot_zero", o->name);
        CHECK(o->slot_read(be[k], 50, got) < 0, "%s: slot 50 of 50 refused", o->name);
        CHECK(o->slots_reserve(be[k], 60, bytes + 8) < 0, "%s: slot size change refused", o->name);
    }
    free(src); free(got); free(zero);
}

/* A two-layer model (linear then AFT, token shift on) stepped through the
 * ops the way recurrent/ does, 30 tokens for a batch of sessions: logits
 * every step, every state byte at the end. */
static void case_block(void)
{
    enum { d = 32, H = 2, dh = 16, HD = H * dh, F = 64, V = 256, L = 2, B = 4, STEPS = 30 };
    const int slots[B] = { 5, 0, 2, 7 };
    const size_t lin_off = 0, lin_n = (size_t)HD * (dh + 1), aft_off = lin_n * 8, aft_n = 3 * d,
                 sh_off = aft_off + aft_n * 8, slot_bytes = sh_off + 2 * d * 4;
    if (fresh_pair() < 0) return;
    both_reserve(8, slot_bytes);
    float *tmp = fvec((size_t)V * d);
#define PARAM(name, n, scale, shift) fill(tmp, (n), (scale), (shift)); twin name = twin_new(tmp, (n))
    PARAM(E, (size_t)V * d, 1, 0);
    PARAM(ln1w, d, 0.2f, 1);  PARAM(ln1b, d, 0.2f, 0);
    PARAM(ln2w, d, 0.2f, 1);  PARAM(ln2b, d, 0.2f, 0);
    PARAM(lnfw, d, 0.2f, 1);  PARAM(lnfb, d, 0.2f, 0);
    PARAM(mu, 3 * d, 0.5f, 0.5f);
    PARAM(Wq, (size_t)HD * d, 0.3f, 0); PARAM(Wk, (size_t)HD * d, 0.3f, 0); PARAM(Wv, (size_t)HD * d, 0.3f, 0);
    PARAM(Wo, (size_t)d * HD, 0.2f, 0);
    PARAM(Wr, (size_t)d * d, 0.3f, 0); PARAM(Wk2, (size_t)d * d, 0.3f, 0); PARAM(Wv2, (size_t)d * d, 0.3f, 0);
    PARAM(Wo2, (size_t)d * d, 0.2f, 0);
    PARAM(W1, (size_t)F * d, 0.3f, 0); PARAM(b1, F, 0.1f, 0);
    PARAM(W2, (size_t)d * F, 0.2f, 0); PARAM(b2, d, 0.1f, 0);
    PARAM(head, (size_t)V * d, 0.3f, 0);
    PARAM(gamma, H, 0.05f, 0.9f);
    PARAM(aw, d, 0.5f, 0.6f); PARAM(au, d, 0.5f, 0);
#undef PARAM
    twin x = twin_new(NULL, B * d), h = twin_new(NULL, B * d), hm = twin_new(NULL, B * 3 * d),
         qkv = twin_new(NULL, B * 3 * HD), o = twin_new(NULL, B * HD), f = twin_new(NULL, B * F),
         logits = twin_new(NULL, B * V);
    int tokens[B] = { 0, 0, 0, 0 };
    for (int step = 0; step < STEPS && !check_failed_; step++) {
        both_begin(slots, tokens, B);
        for (int k = 0; k < 2; k++) {
            backend *be = k ? P.r : P.a;
            const backend_ops *op = be->ops;
#define S(t) (k ? (t).r : (t).a)
            int rc = op->embed(be, S(E), S(x), d);
            for (int l = 0; l < L && rc == 0; l++) {
                rc = op->layernorm(be, S(x), S(h), S(ln1w), S(ln1b), d, 1e-5f);
                if (!rc) rc = op->shift_mix(be, S(h), S(mu), S(hm), sh_off + (size_t)l * d * 4, d, 3);
                if (l == 0) {
                    /* q, k, v [B × HD] = its block of hm[B × d] · Wq, Wk, Wv [HD × d]ᵀ, into qkv [B × 3HD] */
                    if (!rc) rc = op->matmul(be, bmview(S(qkv), 0, 3 * HD), bview(S(hm), 0, 3 * d), S(Wq), NULL,
                                             B, HD, d, 0);
                    if (!rc) rc = op->matmul(be, bmview(S(qkv), HD, 3 * HD), bview(S(hm), d, 3 * d), S(Wk), NULL,
                                             B, HD, d, 0);
                    if (!rc) rc = op->matmul(be, bmview(S(qkv), 2 * HD, 3 * HD), bview(S(hm), 2 * d, 3 * d), S(Wv),
                                             NULL, B, HD, d, 0);
                    if (!rc) rc = op->linear_step(be, S(qkv), S(gamma), S(o), lin_off, H, dh, 1e-6f);
                    /* x[B × d] += o[B × HD] · Wo[d × HD]ᵀ */
                    if (!rc) rc = op->matmul(be, bmview(S(x), 0, d), bview(S(o), 0, HD), S(Wo), NULL, B, d, HD, 1);
                } else {
                    /* r, k, v [B × d] = its block of hm[B × d] · Wr, Wk, Wv [d × d]ᵀ, into qkv [B × 3d] */
                    if (!rc) rc = op->matmul(be, bmview(S(qkv), 0, 3 * d), bview(S(hm), 0, 3 * d), S(Wr), NULL,
                                             B, d, d, 0);
                    if (!rc) rc = op->matmul(be, bmview(S(qkv), d, 3 * d), bview(S(hm), d, 3 * d), S(Wk2), NULL,
                                             B, d, d, 0);
                    if (!rc) rc = op->matmul(be, bmview(S(qkv), 2 * d, 3 * d), bview(S(hm), 2 * d, 3 * d), S(Wv2),
                                             NULL, B, d, d, 0);
                    if (!rc) rc = op->aft_step(be, S(qkv), S(aw), S(au), S(o), aft_off, d, 0);
                    /* x[B × d] += o[B × d] · Wo[d × d]ᵀ */
                    if (!rc) rc = op->matmul(be, bmview(S(x), 0, d), bview(S(o), 0, d), S(Wo2), NULL, B, d, d, 1);
                }
                if (!rc) rc = op->layernorm(be, S(x), S(h), S(ln2w), S(ln2b), d, 1e-5f);
                /* f[B × F] = GELU(h[B × d] · W1[F × d]ᵀ + b1) */
                if (!rc) rc = op->matmul(be, bmview(S(f), 0, F), bview(S(h), 0, d), S(W1), S(b1), B, F, d,
                                         BACKEND_MM_GELU);
                /* x[B × d] += f[B × F] · W2[d × F]ᵀ + b2 */
                if (!rc) rc = op->matmul(be, bmview(S(x), 0, d), bview(S(f), 0, F), S(W2), S(b2), B, d, F, 1);
            }
            if (!rc) rc = op->layernorm(be, S(x), S(h), S(lnfw), S(lnfb), d, 1e-5f);
            /* logits[B × V] = h[B × d] · head[V × d]ᵀ */
            if (!rc) rc = op->matmul(be, bmview(S(logits), 0, V), bview(S(h), 0, d), S(head), NULL, B, V, d, 0);
#undef S
            CHECK(rc == 0, "%s: step %d failed with %d", op->name, step, rc);
        }
        char what[32];
        snprintf(what, sizeof what, "logits step %d", step);
        same_f(&logits, 0, (size_t)B * V, what);
        /* feed what A predicts most likely, so the streams differ per session */
        float lg[B * V];
        P.a->ops->buf_download(P.a, logits.a, 0, lg, B * V);
        for (int b = 0; b < B; b++) {
            int best = 0;
            for (int v = 1; v < V; v++) if (lg[b * V + v] > lg[b * V + best]) best = v;
            tokens[b] = (best + 7 * b + step) % V;
        }
    }
    /* the states follow from fp32 activations, so they carry fp32 error */
    for (int b = 0; b < B; b++)
        same_slot(slots[b], slot_bytes, 0, lin_n + aft_n, sh_off, 2 * d, P.tol_f, "block state");
    twin *all[] = { &E, &ln1w, &ln1b, &ln2w, &ln2b, &lnfw, &lnfb, &mu, &Wq, &Wk, &Wv, &Wo, &Wr, &Wk2, &Wv2,
                    &Wo2, &W1, &b1, &W2, &b2, &head, &gamma, &aw, &au, &x, &h, &hm, &qkv, &o, &f, &logits };
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) twin_free(all[i]);
    free(tmp);
}

/* ---- whole models -------------------------------------------------------- */

/* The backend name model_load() gets for the side under test, and the
 * logits tolerance (relative to the row's largest logit). */
static const char *cmp_model_backend = "cuda";
static double cmp_logits_tol = 1e-4;

/* Does the backend under test promise batch-invariant fp32 products (the
 * harness does; cuBLAS does not)? Then prefill must equal its own steps bit
 * for bit — for fp32 weights, or with LIND_CUDA_WEIGHTS=bf16 (one GEMM path
 * for every batch). Half weights in fp32 GEMMs take a different path at a
 * few rows (kb_gemv_half) than at many (widened, then the GEMM). */
static int cmp_batch_invariant = 0;

/* Weight precision both sides load with (model_opts.weights). */
static lind_dtype cmp_weights = LIND_DT_AUTO;

static int cmp_load(const char *dir, const char *be, model **out, char *err, size_t errlen)
{
    model_opts o = { .backend = be, .weights = cmp_weights, .be = &cmp_be };
    return model_load_opts(dir, &o, out, err, errlen);
}

/* Token t of session stream s: text bytes, and for a vocabulary past 256
 * every fifth token one of the ids above the bytes. */
static int32_t cmp_token(int t, int s, int V)
{
    static const char text[] = "In the beginning God created the heaven and the earth. And the earth was "
                               "without form, and void; and darkness was upon the face of the deep.";
    if (t == 0) return LIND_BOS;
    if (V > 256 && t % 5 == 3) return 256 + (t * 7 + s * 13) % (V - 256);
    return (unsigned char)text[(t * 3 + s * 11) % (sizeof text - 1)];
}

/* Step B sessions through `steps` tokens on both backends, comparing the
 * logits at every step; halfway, every session's state is read from the CPU
 * model and written into both models in reverse session order (so states
 * cross backends), and the token streams follow them. */
static void compare_models(const char *dir, int B, int steps, const char *label)
{
    char err[512];
    model *a = NULL, *r = NULL;
    int rc = cmp_load(dir, cmp_model_backend, &a, err, sizeof err);
    CHECK(rc == 0, "%s: load on %s: %s", label, cmp_model_backend, err);
    if (rc == 0) {
        rc = cmp_load(dir, "cpu", &r, err, sizeof err);
        CHECK(rc == 0, "%s: load on cpu: %s", label, err);
    }
    if (rc < 0) { model_free(a); return; }
    CHECK(!strcmp(model_backend_name(a), cmp_model_backend), "%s: backend is %s", label, model_backend_name(a));
    CHECK(model_state_bytes(a) == model_state_bytes(r), "%s: state sizes differ", label);
    CHECK(model_slots_reserve(a, B + 3) == 0 && model_slots_reserve(r, B + 3) == 0, "%s: reserve", label);
    size_t sb = model_state_bytes(r), V = (size_t)model_vocab(r);
    int *slots = malloc(B * sizeof *slots), *stream = malloc(B * sizeof *stream);
    int32_t *tok = malloc(B * sizeof *tok);
    float *la = malloc((size_t)B * V * sizeof *la), *lr = malloc((size_t)B * V * sizeof *lr);
    unsigned char *states = malloc((size_t)B * sb);
    if (!slots || !tok || !stream || !la || !lr || !states) abort();
    for (int b = 0; b < B; b++) {
        slots[b] = B + 2 - b;   /* distinct, in reverse, not from 0 */
        stream[b] = b;
        CHECK(model_slot_reset(a, slots[b]) == 0 && model_slot_reset(r, slots[b]) == 0, "%s: reset", label);
    }
    double worst = 0;
    for (int t = 0; t < steps && !check_failed_; t++) {
        if (t == steps / 2) {
            for (int b = 0; b < B; b++)
                CHECK(model_slot_read(r, slots[b], states + (size_t)b * sb) == 0, "%s: slot_read", label);
            for (int b = 0; b < B; b++) {
                const unsigned char *s = states + (size_t)(B - 1 - b) * sb;
                CHECK(model_slot_write(a, slots[b], s) == 0 && model_slot_write(r, slots[b], s) == 0,
                      "%s: slot_write", label);
            }
            for (int b = 0; b < B / 2; b++) { int x = stream[b]; stream[b] = stream[B - 1 - b]; stream[B - 1 - b] = x; }
        }
        for (int b = 0; b < B; b++) tok[b] = cmp_token(t, stream[b], (int)V);
        int ra = model_step(a, slots, tok, B, la), rr = model_step(r, slots, tok, B, lr);
        CHECK(ra == 0 && rr == 0, "%s: step %d: %d %d", label, t, ra, rr);
        for (int b = 0; b < B; b++) {
            double e = rel_err_f(la + (size_t)b * V, lr + (size_t)b * V, V);
            if (!(e <= worst)) worst = e;
            CHECK(e <= cmp_logits_tol, "%s: step %d session %d: logits relative error %.3g > %.3g", label, t, b,
                  e, cmp_logits_tol);
        }
    }
    printf("NOTE %s: worst logits relative error %.3g over %d steps × %d sessions\n", label, worst, steps, B);
    free(slots); free(tok); free(stream); free(la); free(lr); free(states);
    model_free(a);
    model_free(r);
}

/* Batched prefill through model_forward on the backend under test:
 * a reference session fed T tokens one model_step at a time (logits at
 * every position, final state); then the same tokens as one run of T rows,
 * as chunks of 7, and as mixed runs of three sessions in one call (20 rows,
 * 1 row, T − 21 rows; logits of the last row of each run and of a row in the
 * middle, through gather_rows). Against the reference of the same backend:
 * bit for bit where its products are batch-invariant (cmp_batch_invariant:
 * the harness), else within the logits tolerance (cuBLAS picks its kernels
 * by shape); and everything against the CPU backend doing the same, within
 * the logits tolerance. */
static void compare_prefill(const char *dir, const char *label)
{
    enum { T = 45 };
    char err[512];
    model *m[2] = { NULL, NULL };
    int rc = cmp_load(dir, cmp_model_backend, &m[0], err, sizeof err);
    if (rc == 0) rc = cmp_load(dir, "cpu", &m[1], err, sizeof err);
    CHECK(rc == 0, "%s: load: %s", label, err);
    if (rc < 0) { model_free(m[0]); return; }
    int V = model_vocab(m[1]);
    size_t sb = model_state_bytes(m[1]);
    const char *cw = cmp_be.cuda_weights;
    int exact = cmp_batch_invariant && (model_weights_dtype(m[0]) == LIND_DT_F32 || (cw && !strcmp(cw, "bf16")));
    int32_t tok[T];
    for (int t = 0; t < T; t++) tok[t] = cmp_token(t, 1, V);
    float *ref[2], *got[2];
    unsigned char *sref[2], *sgot[2];
    for (int k = 0; k < 2; k++) {
        ref[k] = fvec((size_t)T * V);
        got[k] = fvec((size_t)T * V);
        sref[k] = malloc(sb);
        sgot[k] = malloc(sb);
        CHECK(model_slots_reserve(m[k], 8) == 0, "%s: reserve", label);
        for (int s = 0; s < 8; s++) model_slot_reset(m[k], s);
        int slot = 0;
        for (int t = 0; t < T && rc == 0; t++) rc = model_step(m[k], &slot, &tok[t], 1, ref[k] + (size_t)t * V);
        CHECK(rc == 0, "%s: step-by-step reference: %d", label, rc);
        model_slot_read(m[k], 0, sref[k]);
    }
    double self = 0, cross = 0, sself = 0;   /* worst: A vs A's steps, A vs CPU, A's states vs A's steps */
    /* one session: one run of T rows, then chunks of 7 (slots 1, 2) */
    for (int ci = 0; ci < 2 && !check_failed_; ci++) {
        int ch = ci ? 7 : T, slots[T], rows[T];
        for (int k = 0; k < 2; k++) {
            for (int t0 = 0; t0 < T; t0 += ch) {
                int n = T - t0 < ch ? T - t0 : ch;
                for (int r = 0; r < n; r++) { slots[r] = 1 + ci; rows[r] = r; }
                rc = model_forward(m[k], slots, tok + t0, n, rows, n, got[k] + (size_t)t0 * V);
                CHECK(rc == 0, "%s: forward chunk %d: %d", label, ch, rc);
            }
            model_slot_read(m[k], 1 + ci, sgot[k]);
        }
        double e = rel_err_f(got[0], ref[0], (size_t)T * V);
        if (!(e <= self)) self = e;
        e = rel_err_f(got[0], got[1], (size_t)T * V);
        if (!(e <= cross)) cross = e;
        CHECK(e <= cmp_logits_tol, "%s: chunks of %d: logits relative error %.3g against the CPU backend", label, ch, e);
        e = rel_err_f(got[0], ref[0], (size_t)T * V);
        CHECK(e <= cmp_logits_tol, "%s: chunks of %d: logits relative error %.3g against its own steps", label, ch, e);
        CHECK(!memcmp(got[1], ref[1], (size_t)T * V * sizeof(float)), "%s: the CPU backend's prefill differs from "
              "its steps", label);
        if (memcmp(sgot[0], sref[0], sb)) sself = 1;
        CHECK(!exact || (!memcmp(got[0], ref[0], (size_t)T * V * sizeof(float)) && !sself),
              "%s: chunks of %d: prefill on %s is not bit-identical to its steps (logits %.3g, states %s)", label, ch,
              cmp_model_backend, rel_err_f(got[0], ref[0], (size_t)T * V), sself ? "differ" : "equal");
    }
    /* three sessions in one call: slot 5 the first 20 tokens, slot 6 one,
     * slot 7 the first T − 21; logits for the last row of each run and row 10 */
    int slots[T - 1], rows[4] = { 19, 20, T - 2, 10 };
    int32_t toks[T - 1];
    for (int r = 0; r < 20; r++) { slots[r] = 5; toks[r] = tok[r]; }
    slots[20] = 6; toks[20] = tok[0];
    for (int r = 0; r < T - 22; r++) { slots[21 + r] = 7; toks[21 + r] = tok[r]; }
    for (int k = 0; k < 2 && !check_failed_; k++) {
        rc = model_forward(m[k], slots, toks, T - 1, rows, 4, got[k]);
        CHECK(rc == 0, "%s: mixed runs: %d", label, rc);
    }
    static const int want[4] = { 19, 0, T - 23, 10 };   /* the reference position of each logits row */
    for (int i = 0; i < 4 && !check_failed_; i++) {
        double e = rel_err_f(got[0] + (size_t)i * V, ref[0] + (size_t)want[i] * V, (size_t)V);
        if (!(e <= self)) self = e;
        CHECK(e <= cmp_logits_tol, "%s: mixed runs, logits row %d: relative error %.3g against its own steps", label,
              i, e);
        CHECK(!exact || e == 0, "%s: mixed runs, logits row %d: not bit-identical to its own steps",
              label, i);
        e = rel_err_f(got[0] + (size_t)i * V, got[1] + (size_t)i * V, (size_t)V);
        if (!(e <= cross)) cross = e;
        CHECK(e <= cmp_logits_tol, "%s: mixed runs, logits row %d: relative error %.3g against the CPU backend", label,
              i, e);
    }
    printf("NOTE %s prefill: worst logits relative error %.3g against its own steps (final states %s%s), %.3g "
           "against the CPU backend's prefill\n", label, self, sself ? "differ" : "bit-identical",
           exact ? ", required" : "", cross);
    for (int k = 0; k < 2; k++) {
        free(ref[k]); free(got[k]); free(sref[k]); free(sgot[k]);
        model_free(m[k]);
    }
}

/* An RWKV-4-shaped model in lind's own config form: AFT mixers with decay,
 * aft_dim ≠ d_model and token shift; rwkv_channel_mix FFNs; embedding
 * LayerNorm; rescale_every 2; vocabulary 300 (ids past a byte). Weights
 * drawn from seed; matrices written as dtype ("F32", "F16" or "BF16"). */
static int write_rwkv4(const char *dir, uint64_t seed, const char *dtype)
{
    enum { V = 300, d = 32, L = 3, A = 48, F = 128 };
    if (mkdir(dir, 0755) < 0 && errno != EEXIST) return -errno;
    char path[512];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    if (!f) return -errno;
    fprintf(f, "{\"vocab_size\": %d, \"d_model\": %d, \"n_layers\": %d, \"norm_eps\": 1e-5, "
               "\"final_norm_eps\": 1e-5, \"emb_norm\": true, \"rescale_every\": 2, \"layers\": [", V, d, L);
    for (int i = 0; i < L; i++)
        fprintf(f, "%s{\"mixer\": \"aft\", \"ffn\": \"rwkv_channel_mix\", \"aft_variant\": \"decay\", "
                   "\"aft_dim\": %d, \"token_shift\": true, \"d_ff\": %d}", i ? ", " : "", A, F);
    fprintf(f, "]}\n");
    if (fclose(f)) return -EIO;
    testmodel_tensor t[8 + 19 * L];
    void *bufs[8 + 19 * L];
    int n = 0;
    uint64_t rng = seed * 0x2545f4914f6cdd1dull + 1;
    /* kind: 0 uniform ±a, 1 one ± a, 2 range [a, b]; matrices in `dtype` */
    #define T_ADD(nm, d0, d1, kind, a, b, mat) do {                                                     \
        size_t cnt = (size_t)(d0) * ((d1) ? (size_t)(d1) : 1);                                         \
        int half = (mat) && strcmp(dtype, "F32");                                                       \
        void *p = malloc(cnt * (half ? 2 : 4));                                                         \
        if (!p) abort();                                                                                \
        for (size_t q = 0; q < cnt; q++) {                                                              \
            double u01 = testmodel_u01_(&rng);                                                          \
            float v = (float)((kind) == 0 ? (a) * (2 * u01 - 1) : (kind) == 1 ? 1 + (a) * (2 * u01 - 1)  \
                                                                 : (a) + ((b) - (a)) * u01);            \
            if (!half) ((float *)p)[q] = v;                                                             \
            else ((uint16_t *)p)[q] = !strcmp(dtype, "BF16") ? lind_f32_to_bf16(v) : lind_f32_to_f16(v); \
        }                                                                                               \
        snprintf(t[n].name, sizeof t[n].name, "%s", nm);                                                \
        t[n].dtype = half ? dtype : "F32";                                                              \
        t[n].ndim = (d1) ? 2 : 1;                                                                       \
        t[n].shape[0] = (d0);                                                                           \
        t[n].shape[1] = (d1);                                                                           \
        t[n].data = p;                                                                                  \
        t[n].nbytes = cnt * (half ? 2 : 4);                                                             \
        bufs[n++] = p;                                                                                  \
    } while (0)
    double sd = 1 / sqrt((double)d), sa = 1 / sqrt((double)A), sf = 1 / sqrt((double)F);
    T_ADD("embed.weight", V, d, 0, 1.0, 0, 0);
    T_ADD("emb_norm.weight", d, 0, 1, 0.1, 0, 0);
    T_ADD("emb_norm.bias", d, 0, 0, 0.1, 0, 0);
    T_ADD("ln_f.weight", d, 0, 1, 0.1, 0, 0);
    T_ADD("ln_f.bias", d, 0, 0, 0.1, 0, 0);
    T_ADD("head.weight", V, d, 0, sd, 0, 1);
    char nm[96];
    for (int i = 0; i < L; i++) {
        #define LN(s) (snprintf(nm, sizeof nm, "layers.%d.%s", i, s), nm)
        T_ADD(LN("ln1.weight"), d, 0, 1, 0.1, 0, 0);
        T_ADD(LN("ln1.bias"), d, 0, 0, 0.1, 0, 0);
        T_ADD(LN("ln2.weight"), d, 0, 1, 0.1, 0, 0);
        T_ADD(LN("ln2.bias"), d, 0, 0, 0.1, 0, 0);
        T_ADD(LN("mixer.wr"), A, d, 0, sd, 0, 1);
        T_ADD(LN("mixer.wk"), A, d, 0, 2 * sd, 0, 1);
        T_ADD(LN("mixer.wv"), A, d, 0, sd, 0, 1);
        T_ADD(LN("mixer.wo"), d, A, 0, sa, 0, 1);
        T_ADD(LN("mixer.mu_r"), d, 0, 2, 0.0, 1.0, 0);
        T_ADD(LN("mixer.mu_k"), d, 0, 2, 0.0, 1.0, 0);
        T_ADD(LN("mixer.mu_v"), d, 0, 2, 0.0, 1.0, 0);
        T_ADD(LN("mixer.time_decay"), A, 0, 2, -2.0, 0.5, 0);
        T_ADD(LN("mixer.time_first"), A, 0, 2, -1.0, 1.0, 0);
        T_ADD(LN("ffn.wk"), F, d, 0, sd, 0, 1);
        T_ADD(LN("ffn.wr"), d, d, 0, sd, 0, 1);
        T_ADD(LN("ffn.wv"), d, F, 0, 2 * sf, 0, 1);
        T_ADD(LN("ffn.mu_k"), d, 0, 2, 0.0, 1.0, 0);
        T_ADD(LN("ffn.mu_r"), d, 0, 2, 0.0, 1.0, 0);
        #undef LN
    }
    #undef T_ADD
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    int rc = testmodel_st_write(path, t, n);
    for (int i = 0; i < n; i++) free(bufs[i]);
    return rc;
}

static void rm_model(const char *dir) {
    char path[512];
    snprintf(path, sizeof path, "%s/config.json", dir); unlink(path);
    snprintf(path, sizeof path, "%s/model.safetensors", dir); unlink(path);
    rmdir(dir);
}

/* The RWKV-4-shaped model stepped (7 sessions × 40 steps, states crossing
 * backends halfway) and prefilled, with its matrices stored fp32, fp16 and
 * bf16 and loaded as stored (AUTO: half stays half, through
 * weight_new_half where a backend has it), and the fp32 file loaded as bf16. */
static void models_rwkv4(void) {
    static const struct { const char *dtype; lind_dtype load; } v[] = {
        { "F32", LIND_DT_AUTO }, { "F16", LIND_DT_AUTO }, { "BF16", LIND_DT_AUTO }, { "F32", LIND_DT_BF16 },
    };
    char tmpl[] = "/tmp/lind_cuda_rwkv_XXXXXX";
    char *dir = mkdtemp(tmpl);
    CHECK(dir != NULL, "mkdtemp");
    if (!dir) return;
    for (size_t i = 0; i < sizeof v / sizeof *v && !check_failed_; i++) {
        char sub[128], label[128];
        snprintf(sub, sizeof sub, "%s/m%zu", dir, i);
        snprintf(label, sizeof label, "rwkv4-shaped %s weights, loaded as %s", v[i].dtype,
                 v[i].load == LIND_DT_AUTO ? "stored" : lind_dtype_name(v[i].load));
        int rc = write_rwkv4(sub, 300 + i, v[i].dtype);
        CHECK(rc == 0, "%s: write model: %d", label, rc);
        cmp_weights = v[i].load;
        if (rc == 0) {
            compare_models(sub, 7, 40, label);
            compare_prefill(sub, label);
        }
        cmp_weights = LIND_DT_AUTO;
        rm_model(sub);
    }
    rmdir(dir);
}

static void models_random(void) {
    static const struct { const char *mixers; int shift; const char *aft; float gmin; } cfgs[] = {
        { "linear", 0, NULL, 0 },           { "linear", 1, NULL, 0.8f },
        { "aft", 1, "simple", 0 },          { "aft", 0, "decay", 0 },
        { "linear,aft", 1, "decay", 0.9f },
    };
    char tmpl[] = "/tmp/lind_cuda_test_XXXXXX";
    char *dir = mkdtemp(tmpl);
    CHECK(dir != NULL, "mkdtemp");
    if (!dir) return;
    for (size_t i = 0; i < sizeof cfgs / sizeof *cfgs; i++) {
        testmodel_cfg c = testmodel_config(96, 3, 3, 32, 192, cfgs[i].mixers, cfgs[i].shift, cfgs[i].aft);
        testmodel_opts o = { cfgs[i].gmin, 1 };
        char sub[128], label[128];
        snprintf(sub, sizeof sub, "%s/m%zu", dir, i);
        snprintf(label, sizeof label, "%s shift=%d aft=%s gamma_min=%g", cfgs[i].mixers, cfgs[i].shift,
                 cfgs[i].aft ? cfgs[i].aft : "-", cfgs[i].gmin);
        int rc = testmodel_write(sub, &c, 100 + i, &o);
        CHECK(rc == 0, "%s: write model: %d", label, rc);
        if (rc == 0) {
            compare_models(sub, 7, 40, label);
            compare_prefill(sub, label);
        }
        rm_model(sub);
    }
    rmdir(dir);
}

/* A model with delta mixers in lind's "layers" form, the shapes and weight
 * ranges of tests/test_core_delta.c: `spec` 0 is d 32 with a delta layer
 * (H 2, dh 16, K 4) then a linear one (H 4, dh 8); 1 is d 24 with two delta
 * layers (H 4, dh 8, K 2; H 1, dh 24, K 3); GELU FFNs, vocabulary 256. */
static int write_delta(const char *dir, int spec, uint64_t seed) {
    static const struct { int d, ff; struct { const char *mixer; int H, dh, K; } L[2]; } specs[2] = {
        { 32, 64, { { "delta", 2, 16, 4 }, { "linear", 4, 8, 0 } } },
        { 24, 48, { { "delta", 4, 8, 2 }, { "delta", 1, 24, 3 } } },
    };
    int d = specs[spec].d, ff = specs[spec].ff;
    if (mkdir(dir, 0755) < 0 && errno != EEXIST) return -errno;
    char path[512];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    if (!f) return -errno;
    fprintf(f, "{\"vocab_size\": 256, \"d_model\": %d, \"n_layers\": 2, \"norm_eps\": 1e-5, \"layers\": [", d);
    for (int i = 0; i < 2; i++) {
        fprintf(f, "%s{\"mixer\": \"%s\", \"ffn\": \"gelu_mlp\", \"n_heads\": %d, \"d_head\": %d, \"d_ff\": %d",
                i ? ", " : "", specs[spec].L[i].mixer, specs[spec].L[i].H, specs[spec].L[i].dh, ff);
        if (!strcmp(specs[spec].L[i].mixer, "delta")) fprintf(f, ", \"conv_size\": %d", specs[spec].L[i].K);
        fprintf(f, "}");
    }
    fprintf(f, "]}\n");
    if (fclose(f)) return -EIO;
    testmodel_tensor t[4 + 2 * 24];
    float *bufs[4 + 2 * 24];
    int n = 0, rc = 0;
    uint64_t rng = seed * 0x2545f4914f6cdd1dull + 1;
    double sd = 1 / sqrt((double)d), sff = 1 / sqrt((double)ff);
    char nm[96];
#define D_ADD(name, d0, d1, kind, a, b) \
    if (rc == 0) rc = testmodel_add_(t, &n, bufs, &rng, name, d0, d1, kind, a, b)
    D_ADD("embed.weight", 256, d, TESTMODEL_UNIFORM, 1.0, 0);
    D_ADD("ln_f.weight", d, 0, TESTMODEL_ONE_PLUS, 0.1, 0);
    D_ADD("ln_f.bias", d, 0, TESTMODEL_UNIFORM, 0.1, 0);
    D_ADD("head.weight", 256, d, TESTMODEL_UNIFORM, sd, 0);
    for (int i = 0; i < 2; i++) {
        int H = specs[spec].L[i].H, dh = specs[spec].L[i].dh, K = specs[spec].L[i].K, hd = H * dh;
        double shd = 1 / sqrt((double)hd);
#define D_L(s) (snprintf(nm, sizeof nm, "layers.%d.%s", i, s), nm)
        D_ADD(D_L("ln1.weight"), d, 0, TESTMODEL_ONE_PLUS, 0.1, 0);
        D_ADD(D_L("ln1.bias"), d, 0, TESTMODEL_UNIFORM, 0.1, 0);
        D_ADD(D_L("ln2.weight"), d, 0, TESTMODEL_ONE_PLUS, 0.1, 0);
        D_ADD(D_L("ln2.bias"), d, 0, TESTMODEL_UNIFORM, 0.1, 0);
        D_ADD(D_L("ffn.w1"), ff, d, TESTMODEL_UNIFORM, sd, 0);
        D_ADD(D_L("ffn.b1"), ff, 0, TESTMODEL_UNIFORM, 0.1, 0);
        D_ADD(D_L("ffn.w2"), d, ff, TESTMODEL_UNIFORM, sff, 0);
        D_ADD(D_L("ffn.b2"), d, 0, TESTMODEL_UNIFORM, 0.1, 0);
        D_ADD(D_L("mixer.wq"), hd, d, TESTMODEL_UNIFORM, 2 * sd, 0);
        D_ADD(D_L("mixer.wk"), hd, d, TESTMODEL_UNIFORM, 2 * sd, 0);
        D_ADD(D_L("mixer.wv"), hd, d, TESTMODEL_UNIFORM, 2 * sd, 0);
        D_ADD(D_L("mixer.wo"), d, hd, TESTMODEL_UNIFORM, shd, 0);
        if (K) {
            double sk = 1 / sqrt((double)K);
            D_ADD(D_L("mixer.wb"), H, d, TESTMODEL_UNIFORM, 2 * sd, 0);
            D_ADD(D_L("mixer.wa"), H, d, TESTMODEL_UNIFORM, 2 * sd, 0);
            D_ADD(D_L("mixer.conv_q"), hd, K, TESTMODEL_UNIFORM, sk, 0);
            D_ADD(D_L("mixer.conv_k"), hd, K, TESTMODEL_UNIFORM, sk, 0);
            D_ADD(D_L("mixer.conv_v"), hd, K, TESTMODEL_UNIFORM, sk, 0);
            D_ADD(D_L("mixer.a_log"), H, 0, TESTMODEL_RANGE, -2.0, 0.5);
            D_ADD(D_L("mixer.a_bias"), H, 0, TESTMODEL_RANGE, -3.0, 0.0);
            D_ADD(D_L("mixer.o_norm"), dh, 0, TESTMODEL_ONE_PLUS, 0.1, 0);
        }
#undef D_L
    }
#undef D_ADD
    if (rc == 0) {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        rc = testmodel_st_write(path, t, n);
    }
    for (int i = 0; i < n; i++) free(bufs[i]);
    return rc;
}

/* Delta models (short convolution + gated delta rule) stepped (7 sessions ×
 * 40 steps, states crossing backends halfway) and prefilled. */
static void models_delta(void) {
    static const char *names[2] = { "delta+linear d32 (H 2, dh 16, K 4)", "delta+delta d24 (H 4 dh 8 K 2; H 1 dh 24 K 3)" };
    char tmpl[] = "/tmp/lind_cuda_delta_XXXXXX";
    char *dir = mkdtemp(tmpl);
    CHECK(dir != NULL, "mkdtemp");
    if (!dir) return;
    for (int i = 0; i < 2 && !check_failed_; i++) {
        char sub[128];
        snprintf(sub, sizeof sub, "%s/m%d", dir, i);
        int rc = write_delta(sub, i, 18 + (uint64_t)i);
        CHECK(rc == 0, "%s: write model: %d", names[i], rc);
        if (rc == 0) {
            compare_models(sub, 7, 40, names[i]);
            compare_prefill(sub, names[i]);
        }
        rm_model(sub);
    }
    rmdir(dir);
}

/* The same with cuda_weights "bf16" (LIND_CUDA_WEIGHTS=bf16) on the side
 * under test: GEMMs on bf16-rounded operands put the logits within 2% of
 * the fp32 CPU backend's (measured through the harness: about 0.5%). */
static void models_random_bf16(void) {
    const char *was = cmp_be.cuda_weights;
    cmp_be.cuda_weights = "bf16";
    printf("NOTE with cuda_weights bf16 (LIND_CUDA_WEIGHTS=bf16):\n");
    cmp_logits_tol = 2e-2;
    models_random();
    cmp_logits_tol = 1e-4;
    cmp_be.cuda_weights = was;
}

/* ---- recorded steps (CUDA graphs) -------------------------------------------
 * The same model loaded twice on the backend under test, once recording and
 * replaying its steps (the default) and once with cuda_no_graphs, stepped
 * through the same tokens: decode at batch B (new tokens every step, so a
 * replay must read them on the device), B − 2 and B again (three shapes), a
 * prefill chunk with logits for every row, a slot pool grown halfway (the
 * pool moves: every recording made before must be dropped, or it writes the
 * freed pool), and the states moved between slots. Logits and final states
 * must be the same bits (both sides run the same kernels and GEMMs), and
 * the recording side must really have replayed. */
static void graphs_compare(const char *dir, const char *label) {
    enum { B = 6, STEPS = 14, CH = 5 };
    char err[512];
    model *m[2] = { NULL, NULL };
    backend_opts keep = cmp_be;
    int rc = cmp_load(dir, cmp_model_backend, &m[0], err, sizeof err);
    cmp_be.cuda_no_graphs = 1;
    if (rc == 0) rc = cmp_load(dir, cmp_model_backend, &m[1], err, sizeof err);
    cmp_be = keep;
    CHECK(rc == 0, "%s: load: %s", label, err);
    if (rc < 0) { model_free(m[0]); return; }
    int V = model_vocab(m[0]);
    size_t sb = model_state_bytes(m[0]);
    float *l[2] = { fvec((size_t)B * CH * V), fvec((size_t)B * CH * V) };
    unsigned char *st[2] = { malloc(sb), malloc(sb) };
    if (!st[0] || !st[1]) abort();
    int grid = !strcmp(model_backend_name(m[0]), "cuda") || !strcmp(model_backend_name(m[0]), "harness");
    for (int k = 0; k < 2; k++) {
        CHECK(model_slots_reserve(m[k], B + 1) == 0, "%s: reserve", label);
        for (int s = 0; s < B + 1; s++) model_slot_reset(m[k], s);
    }
    int slots[B * CH], same = 1;
    int32_t tok[B * CH];
    for (int t = 0; t < STEPS && same && !check_failed_; t++) {
        int n = t % 3 == 1 ? B - 2 : B;
        if (t == STEPS / 2) {   /* grow the pool, and move session 0's state to the new slot */
            for (int k = 0; k < 2; k++) {
                CHECK(model_slots_reserve(m[k], 4 * B) == 0, "%s: grow", label);
                CHECK(model_slot_read(m[k], 0, st[k]) == 0 && model_slot_write(m[k], 3 * B, st[k]) == 0,
                      "%s: move", label);
            }
        }
        for (int b = 0; b < n; b++) {
            slots[b] = t >= STEPS / 2 && b == 0 ? 3 * B : (b + t) % (B + 1 - (t >= STEPS / 2));
            if (t >= STEPS / 2 && b > 0 && slots[b] == 0) slots[b] = B;   /* slot 0 moved away */
            tok[b] = cmp_token(t + 1, b, V);
        }
        for (int k = 0; k < 2; k++) {
            rc = model_step(m[k], slots, tok, n, l[k]);
            CHECK(rc == 0, "%s: step %d on %s: %d", label, t, k ? "eager" : "recording", rc);
        }
        same = !memcmp(l[0], l[1], (size_t)n * V * sizeof(float));
        CHECK(same, "%s: step %d: logits of the replayed step differ from the eager one (relative %.3g)", label, t,
              rel_err_f(l[0], l[1], (size_t)n * V));
        if (t % 4 == 3) {   /* a prefill chunk of CH rows on one slot, logits for every row, twice */
            for (int r = 0; r < CH; r++) { slots[r] = B - 1; tok[r] = cmp_token(t + r, 9, V); }
            for (int k = 0; k < 2; k++) {
                rc = model_forward(m[k], slots, tok, CH, NULL, CH, l[k]);
                CHECK(rc == 0, "%s: chunk at step %d: %d", label, t, rc);
            }
            same = !memcmp(l[0], l[1], (size_t)CH * V * sizeof(float));
            CHECK(same, "%s: chunk at step %d: logits differ", label, t);
        }
    }
    for (int s = 0; s < 4 * B && same && !check_failed_; s++) {
        CHECK(model_slot_read(m[0], s, st[0]) == 0 && model_slot_read(m[1], s, st[1]) == 0, "%s: read", label);
        same = !memcmp(st[0], st[1], sb);
        CHECK(same, "%s: slot %d: state after replayed steps differs from the eager one", label, s);
    }
    if (grid) {
        long rec[2], rep[2];
        grid_backend_graph_stats(model_backend(m[0]), &rec[0], &rep[0]);
        grid_backend_graph_stats(model_backend(m[1]), &rec[1], &rep[1]);
        CHECK(rec[0] >= 3 && rep[0] >= STEPS / 2, "%s: only %ld shapes recorded, %ld steps replayed", label, rec[0],
              rep[0]);
        CHECK(rec[1] == 0 && rep[1] == 0, "%s: recorded with cuda_no_graphs", label);
        if (same)
            printf("NOTE %s: %ld step shapes recorded, %ld steps replayed, all bit-identical to eager steps\n",
                   label, rec[0], rep[0]);
    }
    for (int k = 0; k < 2; k++) {
        free(l[k]);
        free(st[k]);
        model_free(m[k]);
    }
}

/* A step that needs a host copy cannot be recorded: the backend says
 * RETRY, nothing ran, the caller's eager ops give the right result, and the
 * key stays eager afterwards. gather_rows uploads its row list. */
static void graphs_host_copy(void) {
    backend *be;
    char err[256];
    int rc = backend_new(cmp_model_backend, &cmp_be, &be, err, sizeof err);
    CHECK(rc == 0, "backend: %s", err);
    if (rc < 0) return;
    if (!be->ops->graph_begin) {
        printf("SKIP graphs_host_copy: backend %s records no steps\n", be->ops->name);
        backend_free(be);
        return;
    }
    enum { R = 3, D = 8 };
    float src[R * D], out[2 * D];
    fill(src, R * D, 1, 0);
    backend_buf *x, *y;
    int slots[R] = { 0, 1, 2 }, toks[R] = { 1, 2, 3 }, rows[2] = { 2, 0 };
    CHECK(be->ops->slots_reserve(be, R, 64) == 0 && be->ops->buf_new(be, R * D, &x) == 0 &&
          be->ops->buf_new(be, 2 * D, &y) == 0 && be->ops->buf_upload(be, x, 0, src, R * D) == 0, "setup");
    int seen[4];
    for (int i = 0; i < 4; i++) {
        CHECK(be->ops->begin_step(be, slots, toks, R) == 0, "begin_step");
        seen[i] = be->ops->graph_begin(be, 42);
        rc = be->ops->gather_rows(be, x, rows, 2, y, D);
        if (seen[i] == BACKEND_GRAPH_RECORDING) {
            CHECK(rc == -EBUSY, "a host copy was recorded: %d", rc);
            rc = be->ops->graph_end(be, rc);
            CHECK(rc == BACKEND_GRAPH_RETRY, "graph_end after a failed op: %d", rc);
            rc = be->ops->gather_rows(be, x, rows, 2, y, D);
        }
        CHECK(rc == 0 && be->ops->buf_download(be, y, 0, out, 2 * D) == 0, "gather: %d", rc);
        CHECK(!memcmp(out, src + 2 * D, D * sizeof(float)) && !memcmp(out + D, src, D * sizeof(float)),
              "round %d: wrong rows", i);
    }
    /* the first gather allocates its row list on the device, which voids
     * what the first sight learnt: eager twice, then the recording fails */
    CHECK(seen[0] == BACKEND_GRAPH_EAGER && seen[1] == BACKEND_GRAPH_EAGER && seen[2] == BACKEND_GRAPH_RECORDING &&
          seen[3] == BACKEND_GRAPH_EAGER, "graph_begin said %d, %d, %d, %d (want eager, eager, recording, eager)",
          seen[0], seen[1], seen[2], seen[3]);
    be->ops->buf_free(be, x);
    be->ops->buf_free(be, y);
    backend_free(be);
}

static void models_graphs(void) {
    char tmpl[] = "/tmp/lind_cuda_graph_XXXXXX";
    char *dir = mkdtemp(tmpl);
    CHECK(dir != NULL, "mkdtemp");
    if (!dir) return;
    char sub[160];
    testmodel_cfg c = testmodel_config(96, 3, 3, 32, 192, "linear,aft", 1, "decay");
    testmodel_opts o = { 0.9f, 1 };
    snprintf(sub, sizeof sub, "%s/lin", dir);
    if (testmodel_write(sub, &c, 77, &o) == 0) graphs_compare(sub, "graphs linear,aft");
    else CHECK(0, "write model");
    rm_model(sub);
    static const char *dt[] = { "F32", "BF16" };
    for (int i = 0; i < 2; i++) {
        snprintf(sub, sizeof sub, "%s/rwkv4_%s", dir, dt[i]);
        char label[64];
        snprintf(label, sizeof label, "graphs rwkv4-shaped %s", dt[i]);
        if (write_rwkv4(sub, 91 + i, dt[i]) == 0) graphs_compare(sub, label);
        else CHECK(0, "write rwkv4 model");
        rm_model(sub);
    }
    snprintf(sub, sizeof sub, "%s/delta", dir);
    if (write_delta(sub, 0, 55) == 0) graphs_compare(sub, "graphs delta");
    else CHECK(0, "write delta model");
    rm_model(sub);
    rmdir(dir);
}

/* ---- sliding-window attention and AFT-local / AFT-conv ---------------------
 * The same single-row and run layouts as the delta ops. Slots start with
 * random rings (and global rows, and sums) and a per-slot int64 position:
 * with ALiBi any bits (read as unsigned: far past the global tokens), with
 * RoPE positions below 2^20 (the angle t·θ is formed in double on both, from
 * exp/log that may differ by an ulp between the C library and the device,
 * so huge t would compare rounding, not the kernel). */
static void ww_seed_slots(size_t slot_bytes, size_t foff, size_t nf, size_t doff, size_t nd, size_t pos_off,
                          uint64_t pos0, uint64_t mask) {
    unsigned char *blob = calloc(1, slot_bytes);
    float *f = fvec(nf);
    if (!blob) abort();
    for (int s = 0; s < CMP_NSLOTS; s++) {
        fill(f, nf, 1, 0);
        memcpy(blob + foff, f, nf * sizeof *f);
        for (size_t i = 0; i < nd; i++) {   /* num, den ≥ 1 (or 0 = empty), max */
            double v = i < 2 * (nd / 3) ? (s == 4 ? 0.0 : 1.0 + 3.0 * (frand() + 1.0)) : 2.0 * frand();
            memcpy(blob + doff + 8 * i, &v, 8);
        }
        uint64_t pos = (pos0 + 0x9e3779b97f4a7c15ull * (uint64_t)s) & mask;
        if (s == 1) pos = 0;   /* one empty history */
        memcpy(blob + pos_off, &pos, 8);
        CHECK(P.a->ops->slot_write(P.a, s, blob) == 0 && P.r->ops->slot_write(P.r, s, blob) == 0, "slot_write");
    }
    free(blob);
    free(f);
}

static void ww_same_pos(size_t slot_bytes, size_t pos_off, const char *what) {
    unsigned char *a = malloc(slot_bytes), *r = malloc(slot_bytes);
    if (!a || !r) abort();
    for (int s = 0; s < CMP_NSLOTS; s++) {
        CHECK(P.a->ops->slot_read(P.a, s, a) == 0 && P.r->ops->slot_read(P.r, s, r) == 0, "slot_read");
        CHECK(!memcmp(a + pos_off, r + pos_off, 8), "%s: slot %d positions differ", what, s);
    }
    free(a);
    free(r);
}

/* ---- the linear-attention family: retention_step, favor_features,
 * cosformer_step, linformer_step (tests/test_core_mixers_linear.c runs them
 * in models). Alternating one-row batches and runs (dl_layout), state at a
 * nonzero offset; outputs every step, states at the end. */

/* The int64 position of every slot seeded with pos0 + step·slot. */
static void ml_seed_pos(size_t slot_bytes, size_t pos_off, int64_t pos0, int64_t step) {
    unsigned char *blob = calloc(1, slot_bytes);
    if (!blob) abort();
    for (int s = 0; s < CMP_NSLOTS; s++) {
        int64_t pos = pos0 + step * (int64_t)s;
        memcpy(blob + pos_off, &pos, sizeof pos);
        CHECK(P.a->ops->slot_write(P.a, s, blob) == 0 && P.r->ops->slot_write(P.r, s, blob) == 0, "slot_write");
    }
    free(blob);
}

/* Positions equal on both backends in every slot. */
static void ml_same_pos(size_t slot_bytes, size_t pos_off, const char *what) {
    unsigned char *a = malloc(slot_bytes), *r = malloc(slot_bytes);
    if (!a || !r) abort();
    for (int s = 0; s < CMP_NSLOTS; s++) {
        CHECK(P.a->ops->slot_read(P.a, s, a) == 0 && P.r->ops->slot_read(P.r, s, r) == 0, "slot_read");
        CHECK(!memcmp(a + pos_off, r + pos_off, 8), "%s: slot %d positions differ", what, s);
        CHECK(!memcmp(a + pos_off, r + pos_off, 8), "%s: slot %d position differs", what, s);
    }
    free(a);
    free(r);
}

/* window_step: ALiBi with dilation and global tokens; RoPE without; 40
 * heads (two blocks of 32 per run); a slot at position 0. Outputs every
 * step, rings, global rows and positions at the end. */
static void case_window(void) {
    static const struct { int H, dh, w, dil, g; float rope; uint64_t mask; } cfgs[] = {
        { 3, 16, 5, 2, 3, 0.0f, ~0ull }, { 2, 32, 7, 1, 0, 10000.0f, (1ull << 20) - 1 },
        { 40, 8, 4, 3, 2, 500.0f, (1ull << 20) - 1 }, { 1, 6, 1, 1, 1, 0.0f, 63 },
    };
    for (size_t ci = 0; ci < sizeof cfgs / sizeof *cfgs && !check_failed_; ci++) {
        if (fresh_pair() < 0) return;
        int H = cfgs[ci].H, dh = cfgs[ci].dh, hd = H * dh, tokens[17] = { 0 };
        size_t L = (size_t)cfgs[ci].w * cfgs[ci].dil, ring_off = 12, nring = 2 * L * hd,
               glob_off = ring_off + 4 * nring, nglob = 2 * (size_t)cfgs[ci].g * hd,
               pos_off = (glob_off + 4 * nglob + 7) / 8 * 8, slot_bytes = pos_off + 8 + 4;
        both_reserve(CMP_NSLOTS, slot_bytes);
        ww_seed_slots(slot_bytes, ring_off, nring + nglob, 0, 0, pos_off, 12345, cfgs[ci].mask);
        float *sl_h = fvec((size_t)H), *in = fvec((size_t)17 * 3 * hd);
        for (int h = 0; h < H; h++) sl_h[h] = 0.05f * (float)(h + 1);
        twin tsl = twin_new(sl_h, (size_t)H), tin = twin_new(NULL, (size_t)17 * 3 * hd),
             tout = twin_new(NULL, (size_t)17 * hd);
        for (int step = 0; step < 12 && !check_failed_; step++) {
            int R;
            const int *sl = dl_layout(step, &R);
            fill(in, (size_t)17 * 3 * hd, 2, 0);
            CHECK(P.a->ops->buf_upload(P.a, tin.a, 0, in, tin.n) == 0 &&
                  P.r->ops->buf_upload(P.r, tin.r, 0, in, tin.n) == 0, "upload");
            both_begin(sl, tokens, R);
            char what[96];
            snprintf(what, sizeof what, "window_step H=%d dh=%d w=%d dil=%d g=%d rope=%g step %d", H, dh,
                     cfgs[ci].w, cfgs[ci].dil, cfgs[ci].g, (double)cfgs[ci].rope, step);
            CHECK(P.a->ops->window_step(P.a, tin.a, tsl.a, tout.a, ring_off, glob_off, pos_off, H, dh, cfgs[ci].w,
                                        cfgs[ci].dil, cfgs[ci].g, cfgs[ci].rope) == 0 &&
                  P.r->ops->window_step(P.r, tin.r, tsl.r, tout.r, ring_off, glob_off, pos_off, H, dh, cfgs[ci].w,
                                        cfgs[ci].dil, cfgs[ci].g, cfgs[ci].rope) == 0, "%s", what);
            same_f(&tout, 0, (size_t)R * hd, what);
        }
        for (int s = 0; s < CMP_NSLOTS; s++)
            same_slot(s, slot_bytes, 0, 0, ring_off, nring + nglob, P.tol_s, "window_step ring and global rows");
        ww_same_pos(slot_bytes, pos_off, "window_step");
        twin_free(&tsl);
        twin_free(&tin);
        twin_free(&tout);
        free(sl_h);
        free(in);
    }
}

/* retention_step: head widths 8, 48, 100; 3 heads; a double S, and for
 * width 48 also a float S. */
static void case_retention(void) {
    static const int dhs[] = { 8, 48, 100, 48 };
    int H = 3, tokens[17] = { 0 };
    for (size_t di = 0; di < sizeof dhs / sizeof *dhs && !check_failed_; di++) {
        if (fresh_pair() < 0) return;
        int dh = dhs[di], hd = H * dh, ld = 4 * hd, f32 = di == 3;
        size_t off = 64, nd = (size_t)hd * dh, slot_bytes = off + nd * 8 + 24;
        both_reserve(CMP_NSLOTS, slot_bytes);
        float gamma[3] = { 0.9f, 0.97f, 1.0f }, *norm = fvec(2 * (size_t)hd), *in = fvec((size_t)17 * ld);
        fill(norm, hd, 0.1f, 1);
        fill(norm + hd, hd, 0.1f, 0);
        twin tg = twin_new(gamma, H), tn = twin_new(norm, 2 * (size_t)hd), tin = twin_new(NULL, (size_t)17 * ld),
             tout = twin_new(NULL, (size_t)17 * hd);
        for (int step = 0; step < 16 && !check_failed_; step++) {
            int R;
            const int *sl = dl_layout(step, &R);
            fill(in, (size_t)R * ld, 2, 0);
            CHECK(P.a->ops->buf_upload(P.a, tin.a, 0, in, (size_t)R * ld) == 0 &&
                  P.r->ops->buf_upload(P.r, tin.r, 0, in, (size_t)R * ld) == 0, "upload");
            both_begin(sl, tokens, R);
            char what[80];
            snprintf(what, sizeof what, "retention_step dh=%d f32=%d step %d (%d rows)", dh, f32, step, R);
            CHECK(P.a->ops->retention_step(P.a, tin.a, tg.a, tn.a, tout.a, off, H, dh, 1e-5f, f32) == 0 &&
                  P.r->ops->retention_step(P.r, tin.r, tg.r, tn.r, tout.r, off, H, dh, 1e-5f, f32) == 0, "%s", what);
            same_f(&tout, 0, (size_t)R * hd, what);
        }
        for (int s = 0; s < CMP_NSLOTS; s++)
            same_slot(s, slot_bytes, off, f32 ? 0 : nd, off, f32 ? nd : 0, P.tol_s,
                      f32 ? "retention_step S (float)" : "retention_step S");
        twin_free(&tg); twin_free(&tn); twin_free(&tin); twin_free(&tout);
        free(norm); free(in);
    }
}

/* favor_features: (dh, m) = (8, 8), (16, 40), (64, 72) over 2 heads and 17
 * rows with padded strides; the keys' shift from omega as the kind computes
 * it. Row-wise: no slots. */
static void case_favor(void) {
    static const struct { int dh, m; } cfgs[] = { { 8, 8 }, { 16, 40 }, { 64, 72 } };
    int H = 2, tokens[17] = { 0 };
    for (size_t ci = 0; ci < sizeof cfgs / sizeof *cfgs && !check_failed_; ci++) {
        if (fresh_pair() < 0) return;
        int dh = cfgs[ci].dh, m = cfgs[ci].m, ldi = 2 * H * dh + 3, ldo = 3 * H * m;
        both_reserve(CMP_NSLOTS, 64);
        float *om = fvec((size_t)m * dh), *in = fvec((size_t)17 * ldi), *out0 = fvec((size_t)17 * ldo);
        fill(om, (size_t)m * dh, 1.5f, 0);
        fill(in, (size_t)17 * ldi, 2, 0);
        double ck = 0;
        for (int f = 0; f < m; f++) {
            double n2 = 0;
            for (int i = 0; i < dh; i++) n2 += (double)om[f * dh + i] * om[f * dh + i];
            if (n2 / 2 > ck) ck = n2 / 2;
        }
        twin to = twin_new(om, (size_t)m * dh), tin = twin_new(in, (size_t)17 * ldi),
             tout = twin_new(out0, (size_t)17 * ldo);
        both_begin(dl_runs, tokens, 17);
        CHECK(P.a->ops->favor_features(P.a, tin.a, ldi, to.a, tout.a, ldo, H, dh, m, (float)ck) == 0 &&
              P.r->ops->favor_features(P.r, tin.r, ldi, to.r, tout.r, ldo, H, dh, m, (float)ck) == 0, "favor_features");
        char what[80];
        snprintf(what, sizeof what, "favor_features dh=%d m=%d", dh, m);
        same_f(&tout, 0, (size_t)17 * ldo, what);   /* the v columns past 2·H·m: untouched alike */
        twin_free(&to); twin_free(&tin); twin_free(&tout);
        free(om); free(in); free(out0);
    }
}

/* cosformer_step: dh 8 and 48, horizon (positions from 0 … 59, M 200) and
 * periodic (positions from 10^12, M 37: the int64 reduction). */
static void case_cosformer(void) {
    static const struct { int dh, M, periodic; int64_t pos0; } cfgs[] = {
        { 8, 200, 0, 0 }, { 48, 200, 0, 3 }, { 8, 37, 1, 1000000000000ll }, { 48, 37, 1, 5 },
    };
    int H = 3, tokens[17] = { 0 };
    for (size_t ci = 0; ci < sizeof cfgs / sizeof *cfgs && !check_failed_; ci++) {
        if (fresh_pair() < 0) return;
        int dh = cfgs[ci].dh, hd = H * dh, P3 = cfgs[ci].periodic ? 3 : 2;
        size_t off = 64, nd = (size_t)P3 * hd * (dh + 1), pos_off = off + nd * 8, slot_bytes = pos_off + 8 + 16;
        both_reserve(CMP_NSLOTS, slot_bytes);
        ml_seed_pos(slot_bytes, pos_off, cfgs[ci].pos0, cfgs[ci].periodic ? 1000 : 7);
        float *in = fvec((size_t)17 * 3 * hd);
        twin tin = twin_new(NULL, (size_t)17 * 3 * hd), tout = twin_new(NULL, (size_t)17 * hd);
        for (int step = 0; step < 12 && !check_failed_; step++) {
            int R;
            const int *sl = dl_layout(step, &R);
            fill(in, (size_t)R * 3 * hd, 2, 0);
            CHECK(P.a->ops->buf_upload(P.a, tin.a, 0, in, (size_t)R * 3 * hd) == 0 &&
                  P.r->ops->buf_upload(P.r, tin.r, 0, in, (size_t)R * 3 * hd) == 0, "upload");
            both_begin(sl, tokens, R);
            char what[96];
            snprintf(what, sizeof what, "cosformer_step dh=%d M=%d periodic=%d step %d", dh, cfgs[ci].M,
                     cfgs[ci].periodic, step);
            int ra = P.a->ops->cosformer_step(P.a, tin.a, tout.a, off, pos_off, H, dh, cfgs[ci].M, cfgs[ci].periodic, 1e-6f);
            int rr = P.r->ops->cosformer_step(P.r, tin.r, tout.r, off, pos_off, H, dh, cfgs[ci].M, cfgs[ci].periodic, 1e-6f);
            CHECK(ra == 0 && rr == 0, "%s: %d %d", what, ra, rr);
            same_f(&tout, 0, (size_t)R * hd, what);
        }
        for (int s = 0; s < CMP_NSLOTS; s++) same_slot(s, slot_bytes, off, nd, 0, 0, P.tol_s, "cosformer_step S, z");
        ml_same_pos(slot_bytes, pos_off, "cosformer_step");
        twin_free(&tin); twin_free(&tout);
        free(in);
    }
}

/* aft_window_step: d 300 (two blocks per run), one head and 4 heads, s 2,
 * 5 and 9; a slot with empty sums. Outputs every step, sums, rings and
 * positions at the end. */
static void case_aft_window(void) {
    static const struct { int d, s, H; } cfgs[] = { { 300, 5, 1 }, { 24, 2, 4 }, { 40, 9, 4 } };
    for (size_t ci = 0; ci < sizeof cfgs / sizeof *cfgs && !check_failed_; ci++) {
        if (fresh_pair() < 0) return;
        int d = cfgs[ci].d, sw = cfgs[ci].s, H = cfgs[ci].H, tokens[17] = { 0 };
        size_t nd = 3 * (size_t)d, ring_off = 8 * nd + 4, nring = 2 * (size_t)d * (sw - 1),
               pos_off = (ring_off + 4 * nring + 7) / 8 * 8, slot_bytes = pos_off + 8;
        both_reserve(CMP_NSLOTS, slot_bytes);
        ww_seed_slots(slot_bytes, ring_off, nring, 0, nd, pos_off, 777, ~0ull);
        float *w = fvec((size_t)H * sw), *in = fvec((size_t)17 * 3 * d);
        fill(w, (size_t)H * sw, 2, 0);
        twin tw = twin_new(w, (size_t)H * sw), tin = twin_new(NULL, (size_t)17 * 3 * d),
             tout = twin_new(NULL, (size_t)17 * d);
        for (int step = 0; step < 12 && !check_failed_; step++) {
            int R;
            const int *sl = dl_layout(step, &R);
            fill(in, (size_t)17 * 3 * d, 3, 0);
            CHECK(P.a->ops->buf_upload(P.a, tin.a, 0, in, tin.n) == 0 &&
                  P.r->ops->buf_upload(P.r, tin.r, 0, in, tin.n) == 0, "upload");
            both_begin(sl, tokens, R);
            char what[96];
            snprintf(what, sizeof what, "aft_window_step d=%d s=%d H=%d step %d", d, sw, H, step);
            CHECK(P.a->ops->aft_window_step(P.a, tin.a, tw.a, tout.a, 0, ring_off, pos_off, d, sw, H) == 0 &&
                  P.r->ops->aft_window_step(P.r, tin.r, tw.r, tout.r, 0, ring_off, pos_off, d, sw, H) == 0,
                  "%s", what);
            same_f(&tout, 0, (size_t)R * d, what);
        }
        for (int s = 0; s < CMP_NSLOTS; s++)
            same_slot(s, slot_bytes, 0, nd, ring_off, nring, P.tol_s, "aft_window_step sums and ring");
        ww_same_pos(slot_bytes, pos_off, "aft_window_step");
        twin_free(&tw);
        twin_free(&tin);
        twin_free(&tout);
        free(w);
        free(in);
    }
}

/* linformer_step: (dh, kp) = (8, 12), (48, 40), (16, 100); N 80. */
static void case_linformer(void) {
    static const struct { int dh, kp; } cfgs[] = { { 8, 12 }, { 48, 40 }, { 16, 100 } };
    int H = 3, N = 80, tokens[17] = { 0 };
    for (size_t ci = 0; ci < sizeof cfgs / sizeof *cfgs && !check_failed_; ci++) {
        if (fresh_pair() < 0) return;
        int dh = cfgs[ci].dh, kp = cfgs[ci].kp, hd = H * dh;
        size_t off = 64, nd = (size_t)2 * hd * kp, pos_off = off + nd * 8, slot_bytes = pos_off + 8 + 16;
        both_reserve(CMP_NSLOTS, slot_bytes);
        float *ef = fvec(2 * (size_t)N * kp), *in = fvec((size_t)17 * 3 * hd);
        fill(ef, 2 * (size_t)N * kp, 0.3f, 0);
        twin te = twin_new(ef, 2 * (size_t)N * kp), tin = twin_new(NULL, (size_t)17 * 3 * hd),
             tout = twin_new(NULL, (size_t)17 * hd);
        for (int step = 0; step < 12 && !check_failed_; step++) {
            int R;
            const int *sl = dl_layout(step, &R);
            fill(in, (size_t)R * 3 * hd, 2, 0);
            CHECK(P.a->ops->buf_upload(P.a, tin.a, 0, in, (size_t)R * 3 * hd) == 0 &&
                  P.r->ops->buf_upload(P.r, tin.r, 0, in, (size_t)R * 3 * hd) == 0, "upload");
            both_begin(sl, tokens, R);
            char what[80];
            snprintf(what, sizeof what, "linformer_step dh=%d kp=%d step %d", dh, kp, step);
            int ra = P.a->ops->linformer_step(P.a, tin.a, te.a, tout.a, off, pos_off, H, dh, kp, N);
            int rr = P.r->ops->linformer_step(P.r, tin.r, te.r, tout.r, off, pos_off, H, dh, kp, N);
            CHECK(ra == 0 && rr == 0, "%s: %d %d", what, ra, rr);
            same_f(&tout, 0, (size_t)R * hd, what);
        }
        for (int s = 0; s < CMP_NSLOTS; s++) same_slot(s, slot_bytes, off, nd, 0, 0, P.tol_s, "linformer_step K̄, V̄");
        ml_same_pos(slot_bytes, pos_off, "linformer_step");
        twin_free(&te); twin_free(&tin); twin_free(&tout);
        free(ef); free(in);
    }
}

/* Run every case with A from `ctor` against the CPU backend. */
static void cmp_run_all(const char *label, backend_ctor ctor, double tol_f, double tol_s) {
    static const struct { const char *name; void (*fn)(void); } cases[] = {
        { "embed", case_embed }, { "layernorm", case_layernorm }, { "matmul", case_matmul },
        { "matmul_gelu", case_matmul_gelu }, { "matmul_act", case_matmul_act }, { "matmul_half", case_matmul_half },
        { "shift_mix", case_shift_mix }, { "linear_step", case_linear }, { "aft_step", case_aft },
        { "runs", case_runs }, { "row_ops", case_row_ops }, { "slots", case_slots },
        { "two_layer_model", case_block }, { "short_conv", case_short_conv }, { "delta_step", case_delta },
        { "delta_runs", case_delta_runs },
        { "window_step", case_window },
        { "aft_window_step", case_aft_window },
        { "retention_step", case_retention }, { "favor_features", case_favor }, { "cosformer_step", case_cosformer }, { "linformer_step", case_linformer },
    };
    static char name[128];
    P.label = label;
    P.tol_f = tol_f;
    P.tol_s = tol_s;
    ctor_a_ = ctor;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        snprintf(name, sizeof name, "%s_%s", label, cases[i].name);
        check_begin(name);
        worst_ = 0;
        if (fresh_pair() == 0) {
            cases[i].fn();
            printf("NOTE %s: worst relative error %.3g\n", name, worst_);
        } else {
            check_failed_++;
        }
        check_end();
    }
    backend_free(P.a);
    backend_free(P.r);
    P.a = P.r = NULL;
}

#endif
