/* tests/kindcheck.h — what the mixer kinds' C tests (test_core_delta,
 * test_core_mixers_linear, test_core_mixers_window, test_core_parallel)
 * share: the parallel-form references' double-precision building blocks
 * over T positions, and the two checks every kind must pass the same way:
 * chunked prefill bit-identical to one-token steps, and a batch bit-identical
 * to its sessions stepped alone. Header-only (static inline), like
 * tests/testmodel.h. */
#ifndef LIND_TESTS_KINDCHECK_H
#define LIND_TESTS_KINDCHECK_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "recurrent/file.h"
#include "recurrent/model.h"
#include "recurrent/safetensors.h"
#include "state/format.h"
#include "tests/check.h"

/* ---- reference math, in double ---------------------------------------------- */

/* The tensor named fmt % layer as a malloc'd double array (NULL if absent). */
static inline double *kc_tensor(st_file *st, const char *fmt, int layer)
{
    char name[128];
    snprintf(name, sizeof name, fmt, layer);
    st_tensor *t = st_find(st, name);
    if (!t) return NULL;
    float *f = malloc(t->numel * sizeof *f);
    double *d = malloc(t->numel * sizeof *d);
    st_read_f32(st, t, f);
    for (size_t i = 0; i < t->numel; i++) d[i] = f[i];
    free(f);
    return d;
}

/* y[t][n] = Σ_k x[t][k] w[n][k] (+ b[n]) for t < T. */
static inline void kc_lin(const double *x, int T, int K, const double *w, const double *b, int N, double *y)
{
    for (int t = 0; t < T; t++)
        for (int n = 0; n < N; n++) {
            double s = b ? b[n] : 0.0;
            for (int k = 0; k < K; k++) s += x[(size_t)t * K + k] * w[(size_t)n * K + k];
            y[(size_t)t * N + n] = s;
        }
}

/* LayerNorm of each of T rows of d. */
static inline void kc_ln(const double *x, int T, int d, const double *w, const double *b, double eps, double *y)
{
    for (int t = 0; t < T; t++) {
        const double *xr = x + (size_t)t * d;
        double mu = 0, v = 0;
        for (int i = 0; i < d; i++) mu += xr[i];
        mu /= d;
        for (int i = 0; i < d; i++) v += (xr[i] - mu) * (xr[i] - mu);
        v /= d;
        for (int i = 0; i < d; i++) y[(size_t)t * d + i] = (xr[i] - mu) / sqrt(v + eps) * w[i] + b[i];
    }
}

static inline double kc_sigm(double x) { return 1 / (1 + exp(-x)); }
static inline double kc_softplus(double x) { return x > 0 ? x + log1p(exp(-x)) : log1p(exp(x)); }

/* BOS, then n−1 pseudo-random byte tokens from seed. */
static inline void kc_random_tokens(int32_t *tok, int n, uint64_t seed)
{
    tok[0] = LIND_BOS;
    for (int t = 1; t < n; t++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        tok[t] = (int32_t)(seed >> 56);
    }
}

/* The reference's logits `want` [T × V] against one session stepped token
 * by token through tok (slot 0): the largest error relative to each row's
 * largest |want| (*worst, at position *worst_t) and its mean (*mean). */
static inline void kc_steps_vs_reference(model *m, const int32_t *tok, const double *want, int T, int V,
                                         double *worst, int *worst_t, double *mean)
{
    *worst = 0;
    *mean = 0;
    *worst_t = -1;
    CHECK(model_slots_reserve(m, 1) == 0 && model_slot_reset(m, 0) == 0, "slots");
    float *got = malloc(sizeof(float) * V);
    int slot = 0;
    for (int t = 0; t < T; t++) {
        CHECK(model_step(m, &slot, &tok[t], 1, got) == 0, "model_step at %d", t);
        double scale = 0, diff = 0;
        for (int i = 0; i < V; i++) {
            double w = want[(size_t)t * V + i];
            if (fabs(w) > scale) scale = fabs(w);
            double e = fabs(got[i] - w);
            if (!(e <= diff)) diff = e;
        }
        double rel = diff / (scale > 1e-30 ? scale : 1e-30);
        *mean += rel / T;
        if (!(rel <= *worst)) { *worst = rel; *worst_t = t; }
    }
    free(got);
}

/* ---- the CPU backend's ISA paths --------------------------------------------- */

/* A 2-thread CPU backend with the kernels of isa ("avx512", "avx2") into
 * *be: 0; or, where this CPU lacks them, a SKIP line naming test and -1. */
static inline int kc_cpu_isa_backend(const char *isa, backend **be, const char *test)
{
    backend_opts bo;
    backend_opts_default(&bo);
    bo.threads = 2;
    bo.cpu_gemm = isa;
    char err[256];
    if (backend_cpu_new(&bo, be, err, sizeof err) == 0) return 0;
    printf("SKIP %s: %s: %s\n", test, isa, err);
    return -1;
}

/* The two paths' outputs (n floats) and both sessions' states (sn floats
 * each) are the same bits. */
static inline void kc_paths_agree(const char *what, float *const out[2], float *const st[2][2], size_t n, size_t sn)
{
    CHECK(!memcmp(out[0], out[1], sizeof(float) * n), "%s: outputs differ", what);
    CHECK(!memcmp(st[0][0], st[1][0], sizeof(float) * sn) && !memcmp(st[0][1], st[1][1], sizeof(float) * sn),
          "%s: states differ", what);
}

/* ---- the checks every kind passes ------------------------------------------- */

/* model_forward over runs = one model_step per token, bit for bit: one
 * session in chunks of 1, 3, 7, 64 and all 150 tokens (logits of every row
 * and the final state), then two sessions' runs of 5 and 101 in one call
 * (ring indexes at different phases; logits of each run's last row) and
 * the second stepped on to the end. V: the model's vocabulary. */
static inline void kc_prefill_bitwise(model *m, int V)
{
    enum { N = 150 };
    size_t sb = model_state_bytes(m);
    int32_t tok[N];
    kc_random_tokens(tok, N, 99);
    float *ref = malloc(sizeof(float) * N * V), *got = malloc(sizeof(float) * N * V), *lg = malloc(sizeof(float) * 2 * V);
    unsigned char *sref = malloc(sb), *sgot = malloc(sb);
    CHECK(model_slots_reserve(m, 8) == 0, "reserve");
    int slot = 0;
    for (int t = 0; t < N; t++) CHECK(model_step(m, &slot, &tok[t], 1, ref + (size_t)t * V) == 0, "step");
    model_slot_read(m, 0, sref);
    int chunks[] = {1, 3, 7, 64, N};
    for (int ci = 0; ci < 5; ci++) {
        int s = 1 + ci, ch = chunks[ci], slots[N], rows[N];
        for (int t0 = 0; t0 < N; t0 += ch) {
            int n = N - t0 < ch ? N - t0 : ch;
            for (int r = 0; r < n; r++) { slots[r] = s; rows[r] = r; }
            CHECK(model_forward(m, slots, tok + t0, n, rows, n, got + (size_t)t0 * V) == 0, "forward");
        }
        CHECK(!memcmp(got, ref, sizeof(float) * N * V), "chunks of %d: logits differ from one-token steps", ch);
        model_slot_read(m, s, sgot);
        CHECK(!memcmp(sgot, sref, sb), "chunks of %d: final state differs", ch);
    }
    int slots[106], rows[2] = {4, 105};
    int32_t toks[106];
    for (int r = 0; r < 5; r++) { slots[r] = 6; toks[r] = tok[r]; }
    for (int r = 0; r < 101; r++) { slots[5 + r] = 7; toks[5 + r] = tok[r]; }
    CHECK(model_forward(m, slots, toks, 106, rows, 2, lg) == 0, "mixed forward");
    CHECK(!memcmp(lg, ref + 4 * V, V * sizeof(float)), "run of 5: last row differs");
    CHECK(!memcmp(lg + V, ref + 100 * V, V * sizeof(float)), "run of 101: last row differs");
    for (int t = 101; t < N; t++) { int s7 = 7; model_step(m, &s7, &tok[t], 1, NULL); }
    model_slot_read(m, 7, sgot);
    CHECK(!memcmp(sgot, sref, sb), "prefill then steps: final state differs");
    free(ref); free(got); free(lg); free(sref); free(sgot);
}

/* Sessions stepped together (starting at different times, batch rows not in
 * slot order) equal the same sessions stepped alone, logits and states, bit
 * for bit. */
static inline void kc_batched_equals_unbatched(model *m, int V)
{
    enum { NS = 6, STEPS = 40 };
    CHECK(model_slots_reserve(m, 2 * NS) == 0, "reserve");
    int32_t tok[NS][STEPS];
    for (int s = 0; s < NS; s++) kc_random_tokens(tok[s], STEPS, 500 + (uint64_t)s);
    float *lb = malloc(sizeof(float) * NS * V), *l1 = malloc(sizeof(float) * V);
    int same = 1;
    for (int step = 0; step < STEPS + NS; step++) {
        int bs[NS], nb = 0, who[NS];
        int32_t bt[NS];
        for (int s = NS - 1; s >= 0; s--) {
            int pos = step - s;
            if (pos < 0 || pos >= STEPS) continue;
            bs[nb] = 2 * s;
            bt[nb] = tok[s][pos];
            who[nb++] = s;
        }
        if (!nb) continue;
        CHECK(model_step(m, bs, bt, nb, lb) == 0, "batched step");
        for (int b = 0; b < nb; b++) {
            int slot = 2 * who[b] + 1;
            CHECK(model_step(m, &slot, &bt[b], 1, l1) == 0, "single step");
            same &= !memcmp(lb + (size_t)b * V, l1, sizeof(float) * V);
        }
    }
    CHECK(same, "batched logits differ from single-session logits");
    size_t sb = model_state_bytes(m);
    char *a = malloc(sb), *b = malloc(sb);
    for (int s = 0; s < NS; s++) {
        model_slot_read(m, 2 * s, a);
        model_slot_read(m, 2 * s + 1, b);
        CHECK(!memcmp(a, b, sb), "session %d: batched state differs", s);
    }
    free(a); free(b); free(lb); free(l1);
}

/* The model in dir loaded with 1 and with 3 CPU threads (backend_opts.threads)
 * agrees bit for bit, logits and states: 32 sessions through `steps`
 * rounds alternating one-token steps and runs of 3 (rows of a run in
 * order, sessions in a shuffled order). The model should be big enough
 * that the ops under test take their threaded paths. */
static inline void kc_threads_agree(const char *dir, int V, int steps)
{
    char err[512] = "";
    model *m[2] = {0};
    static const int nt[2] = {1, 3};
    for (int i = 0; i < 2; i++) {
        backend_opts bo;
        backend_opts_default(&bo);
        bo.threads = nt[i];
        model_opts mo = {.backend = "cpu", .be = &bo};
        CHECK(model_load_opts(dir, &mo, &m[i], err, sizeof err) == 0, "model_load: %s", err);
    }
    if (!m[0] || !m[1]) { model_free(m[0]); model_free(m[1]); return; }
    enum { NB = 32 };
    int slots[NB * 3];
    int32_t toks[NB * 3];
    float *l[2];
    for (int i = 0; i < 2; i++) {
        l[i] = malloc(sizeof(float) * NB * 3 * V);
        model_slots_reserve(m[i], NB);
    }
    uint64_t sd = 5;
    int same = 1;
    for (int step = 0; step < steps; step++) {
        int per = step % 2 ? 3 : 1, R = NB * per;
        for (int r = 0; r < R; r++) {
            slots[r] = (r / per * 7 + step) % NB;
            sd = sd * 6364136223846793005ull + 1;
            toks[r] = (int32_t)(sd >> 56);
        }
        for (int i = 0; i < 2; i++) CHECK(model_forward(m[i], slots, toks, R, NULL, R, l[i]) == 0, "forward");
        same &= !memcmp(l[0], l[1], sizeof(float) * R * V);
    }
    CHECK(same, "1 vs 3 threads: logits differ");
    size_t sb = model_state_bytes(m[0]);
    char *a = malloc(sb), *b = malloc(sb);
    for (int s = 0; s < NB; s++) {
        model_slot_read(m[0], s, a);
        model_slot_read(m[1], s, b);
        CHECK(!memcmp(a, b, sb), "1 vs 3 threads: slot %d state differs", s);
    }
    free(a); free(b); free(l[0]); free(l[1]);
    model_free(m[0]);
    model_free(m[1]);
}

/* ---- the CUDA backend's code under the host harness ------------------------- */

/* Model-level checks over npos tokens against `stepped` (the logits of the
 * same tokens fed one model_step at a time): chunked model_forward runs
 * and three sessions at different paces per call must be bit-identical. */
static inline void kc_chunks_equal_steps(model *m, const char *name, const int32_t *tok, int npos,
                                         const float *stepped, int chunk)
{
    int V = model_vocab(m);
    float *lg = malloc(sizeof(float) * (size_t)chunk * V);
    int *slots = calloc((size_t)chunk, sizeof(int)), *rows = malloc(sizeof(int) * (size_t)chunk);
    int rc = model_slot_reset(m, 0), bad = -1;
    for (int t0 = 0; t0 < npos && rc == 0 && bad < 0; t0 += chunk) {
        int n = npos - t0 < chunk ? npos - t0 : chunk;
        for (int i = 0; i < n; i++) rows[i] = i;
        rc = model_forward(m, slots, &tok[t0], n, rows, n, lg);
        CHECK(rc == 0, "%s: model_forward chunk %d at %d: %d", name, chunk, t0, rc);
        for (int i = 0; i < n && rc == 0 && bad < 0; i++)
            if (memcmp(lg + (size_t)i * V, stepped + (size_t)(t0 + i) * V, sizeof(float) * V) != 0) bad = t0 + i;
    }
    CHECK(bad < 0, "%s: chunks of %d: logits at position %d differ from model_step's", name, chunk, bad);
    free(lg);
    free(slots);
    free(rows);
}

/* Three sessions at different paces in each model_forward call, logit rows in
 * reverse: bit-identical to each session stepped alone. */
static inline void kc_sessions_equal_steps(model *m, const char *name, const int32_t *tok, int npos,
                                           const float *stepped)
{
    enum { S = 3 };
    static const int pace[S][4] = {{5, 1, 33, 64}, {17, 2, 100, 7}, {1, 64, 3, 250}};
    int V = model_vocab(m), rc = model_slots_reserve(m, S);
    for (int s = 0; s < S && rc == 0; s++) rc = model_slot_reset(m, s);
    CHECK(rc == 0, "slots: %d", rc);
    int R_MAX = 64 + 100 + 250, pos[S] = {0, 0, 0}, round = 0, bad = -1;
    int *slots = malloc(sizeof(int) * R_MAX), *rows = malloc(sizeof(int) * R_MAX), *rpos = malloc(sizeof(int) * R_MAX);
    int32_t *toks = malloc(sizeof(int32_t) * R_MAX);
    float *lg = malloc(sizeof(float) * (size_t)R_MAX * V);
    while (rc == 0 && bad < 0 && (pos[0] < npos || pos[1] < npos || pos[2] < npos)) {
        int R = 0;
        for (int k = 0; k < S; k++) {
            int s = (k + round) % S, n = pace[s][round % 4];
            if (n > npos - pos[s]) n = npos - pos[s];
            for (int i = 0; i < n; i++, R++) {
                slots[R] = s;
                toks[R] = tok[pos[s] + i];
                rpos[R] = pos[s] + i;
            }
            pos[s] += n;
        }
        for (int i = 0; i < R; i++) rows[i] = R - 1 - i;
        rc = model_forward(m, slots, toks, R, rows, R, lg);
        CHECK(rc == 0, "%s: model_forward round %d: %d", name, round, rc);
        for (int i = 0; i < R && rc == 0 && bad < 0; i++)
            if (memcmp(lg + (size_t)i * V, stepped + (size_t)rpos[rows[i]] * V, sizeof(float) * V) != 0)
                bad = rpos[rows[i]];
        round++;
    }
    CHECK(bad < 0, "%s: 3 sessions per model_forward: position %d differs from model_step's", name, bad);
    free(slots);
    free(rows);
    free(rpos);
    free(toks);
    free(lg);
}

/* max |a−b| over a row, relative to the row's largest |b|; a NaN anywhere
 * in a or b makes it +inf, so no bound can pass it. */
static inline double kc_rel_row(const float *a, const float *b, int n)
{
    double scale = 0, e = 0;
    for (int i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (isnan(d)) return INFINITY;
        if (fabs(b[i]) > scale) scale = fabs(b[i]);
        if (d > e) e = d;
    }
    return e / (scale > 1e-30 ? scale : 1e-30);
}

/* The worst kc_rel_row over T rows of V; *at gets its row. */
static inline double kc_worst_rows(const float *a, const float *b, int T, int V, int *at)
{
    double w = 0;
    *at = 0;
    for (int t = 0; t < T; t++) {
        double e = kc_rel_row(a + (size_t)t * V, b + (size_t)t * V, V);
        if (e > w) { w = e; *at = t; }
    }
    return w;
}

/* ---- the model families' parity fixtures -------------------------------------
 * (test_model_rwkv4, test_model_rwkv7, test_model_mamba2: a directory per
 * fixture with T tokens and the float64 reference's logits after each.) */

/* path's bytes, malloc'd (the caller frees), *len set; NULL if unreadable. */
static inline char *kc_read(const char *path, size_t *len)
{
    char err[256], *b = NULL;
    *len = 0;
    return file_read(path, 0, &b, len, err, sizeof err) == 0 ? b : NULL;
}

/* buf as the whole of path: 0, or -1. */
static inline int kc_write(const char *path, const void *buf, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(buf, 1, len, f);
    return (fclose(f) == 0 && w == len) ? 0 : -1;
}

/* dir/tokens.i32 (T tokens, little-endian as every lind file) into tok and
 * dir/logits.f32 (T × V floats) into *ref (malloc'd, the caller frees): 1,
 * or a failed CHECK naming the file and its size, and 0. */
static inline int kc_fixture_load(const char *dir, int T, int V, int32_t *tok, float **ref)
{
    char p[1200];
    size_t n = 0, nl = 0;
    snprintf(p, sizeof p, "%s/tokens.i32", dir);
    char *t = kc_read(p, &n);
    CHECK(t && n == sizeof(int32_t) * (size_t)T, "%s: %zu bytes, want %zu", p, n, sizeof(int32_t) * (size_t)T);
    snprintf(p, sizeof p, "%s/logits.f32", dir);
    char *l = kc_read(p, &nl);
    size_t want = sizeof(float) * (size_t)T * (size_t)V;
    CHECK(l && nl == want, "%s: %zu bytes, want %zu", p, nl, want);
    int ok = t && l && n == sizeof(int32_t) * (size_t)T && nl == want;
    *ref = NULL;
    if (ok) {
        memcpy(tok, t, n);
        *ref = (float *)l;
        l = NULL;
    }
    free(t);
    free(l);
    return ok;
}

/* tok[0..T) fed one model_step at a time into a fresh slot 0: T × V logits
 * (malloc'd, the caller frees), or NULL after a failed CHECK. */
static inline float *kc_steps(model *m, const char *name, const int32_t *tok, int T)
{
    int V = model_vocab(m), slot = 0, rc = model_slots_reserve(m, 1);
    CHECK(rc == 0, "%s: model_slots_reserve: %d", name, rc);
    float *out = malloc(sizeof(float) * (size_t)T * (size_t)V);
    if (rc == 0) rc = model_slot_reset(m, 0);
    for (int t = 0; t < T && rc == 0; t++) {
        rc = model_step(m, &slot, &tok[t], 1, out + (size_t)t * V);
        CHECK(rc == 0, "%s: model_step at position %d: %d", name, t, rc);
    }
    if (rc != 0) { free(out); return NULL; }
    return out;
}

/* The model in dir loaded on the host harness (kernels/cuda/) and on the
 * CPU matches: three sessions stepped 40 tokens in one batch (slots 2, 0,
 * 1), session 0 prefilled as a run of 40 (slot 3) and as chunks of 7 (slot
 * 4); logits within tol_logits of each row's largest, final states within
 * tol_state of each region's largest value, integer regions equal, and the
 * run and the chunks leave the same state. name labels the NOTE line. */
static inline void kc_harness_vs_cpu(const char *name, const char *dir, int V, double tol_logits, double tol_state)
{
    enum { N = 40, NS = 3 };
    char err[512] = "";
    model *m[2] = {0};
    const char *names[2] = {"harness", "cpu"};
    for (int k = 0; k < 2; k++)
        CHECK(model_load(dir, names[k], &m[k], err, sizeof err) == 0, "model_load on %s: %s", names[k], err);
    if (!m[0] || !m[1]) { model_free(m[0]); model_free(m[1]); return; }
    size_t sb = model_state_bytes(m[1]);
    int32_t tok[NS][N];
    for (int s = 0; s < NS; s++) kc_random_tokens(tok[s], N, 3 + (uint64_t)s);
    float *lg[2], *pf[2];
    unsigned char *st[2][NS + 2];
    for (int k = 0; k < 2; k++) {
        lg[k] = malloc(sizeof(float) * N * NS * V);
        pf[k] = malloc(sizeof(float) * N * V);
        for (int s = 0; s < NS + 2; s++) st[k][s] = malloc(sb);
        CHECK(model_slots_reserve(m[k], NS + 2) == 0, "reserve");
        int slots[NS] = {2, 0, 1};
        for (int t = 0; t < N; t++) {
            int32_t bt[NS];
            for (int s = 0; s < NS; s++) bt[s] = tok[s][t];
            CHECK(model_step(m[k], slots, bt, NS, lg[k] + (size_t)t * NS * V) == 0, "%s: step %d", names[k], t);
        }
        int ps[N], rows[N];
        for (int r = 0; r < N; r++) { ps[r] = 3; rows[r] = r; }
        CHECK(model_forward(m[k], ps, tok[0], N, rows, N, pf[k]) == 0, "%s: forward", names[k]);
        for (int t0 = 0; t0 < N; t0 += 7) {
            int n = N - t0 < 7 ? N - t0 : 7;
            for (int r = 0; r < n; r++) ps[r] = 4;
            CHECK(model_forward(m[k], ps, tok[0] + t0, n, NULL, 0, NULL) == 0, "%s: forward chunk", names[k]);
        }
        for (int s = 0; s < NS + 2; s++) model_slot_read(m[k], s, st[k][s]);
    }
    double worst = 0, wpf = 0, wst = 0;
    for (int r = 0; r < N * NS; r++) {
        double e = kc_rel_row(lg[0] + (size_t)r * V, lg[1] + (size_t)r * V, V);
        if (!(e <= worst)) worst = e;
    }
    for (int t = 0; t < N; t++) {
        double e = kc_rel_row(pf[0] + (size_t)t * V, pf[1] + (size_t)t * V, V);
        if (!(e <= wpf)) wpf = e;
    }
    model_state_region reg[16];
    int nr = model_state_regions(m[1], reg, 16);
    for (int s = 0; s < NS + 2; s++)
        for (int i = 0; i < nr; i++) {
            const unsigned char *a = st[0][s] + reg[i].offset, *b = st[1][s] + reg[i].offset;
            double diff = 0, scale = 0;
            for (size_t j = 0; j < reg[i].count; j++) {
                double x, y;
                if (reg[i].type == LIND_EL_F64) { memcpy(&x, a + 8 * j, 8); memcpy(&y, b + 8 * j, 8); }
                else if (reg[i].type == LIND_EL_F32) {
                    float fx, fy;
                    memcpy(&fx, a + 4 * j, 4); memcpy(&fy, b + 4 * j, 4);
                    x = fx; y = fy;
                } else {
                    CHECK(!memcmp(a + reg[i].elem_bytes * j, b + reg[i].elem_bytes * j, reg[i].elem_bytes),
                          "slot %d region %s: integers differ", s, reg[i].name);
                    continue;
                }
                if (!(fabs(x - y) <= diff)) diff = fabs(x - y);
                if (fabs(y) > scale) scale = fabs(y);
            }
            double e = scale > 0 ? diff / scale : diff;
            if (!(e <= wst)) wst = e;
        }
    CHECK(worst <= tol_logits, "harness vs cpu, stepped: %.3g", worst);
    CHECK(wpf <= tol_logits, "harness vs cpu, prefilled: %.3g", wpf);
    CHECK(wst <= tol_state, "harness vs cpu, final states: %.3g", wst);
    CHECK(!memcmp(st[0][3], st[0][4], sb), "harness: a run of 40 and chunks of 7 leave different states");
    printf("NOTE %s: harness vs cpu: logits %.2e stepped, %.2e prefilled; states %.2e\n", name, worst, wpf, wst);
    for (int k = 0; k < 2; k++) {
        free(lg[k]);
        free(pf[k]);
        for (int s = 0; s < NS + 2; s++) free(st[k][s]);
        model_free(m[k]);
    }
}

#endif
