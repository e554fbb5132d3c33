/* tests/test_model_rwkv7.c — BlinkDL's RWKV-7 (x070) .pth checkpoints: lind
 * computes what the published math computes.
 *
 * The fixtures (tests/fixtures/rwkv7/, made by tools/rwkv7_fixtures.py, see
 * its README) are random x070 models in the .pth layout — FloatStorage in a
 * plain dict, BFloat16Storage in an OrderedDict with _metadata, HalfStorage;
 * 3, 5 and 1 heads; LoRA widths differing per kind — each with 512 tokens
 * and the float64 reference logits after every one (tools/rwkv7_ref.py).
 * For each fixture:
 *   - model_load of the directory (one .pth + the World vocabulary) infers
 *     the config from the tensor shapes, and of the .pth file itself too;
 *   - one model_step per token: every position within 1e-5 relative
 *     (max|a−b| over the row / max|b| over the row) of the reference (the
 *     fixtures record that the easy mistakes — kk after the k_a rescale, the
 *     bonus with the raw k, no value residual, ln_x's eps, S·kk from the
 *     decayed S — move some fixture's logits by ≥ 10× that);
 *   - model_forward in prefill chunks of 1, 7, 64 and 512 tokens: bit-identical
 *     to the step path; three sessions per call at different paces too.
 * Then refusals, each naming the file and the culprit: a global outside the
 * whitelist (_rebuild_parameter), a disallowed opcode (INST), a compressed
 * zip entry, a truncated file, two .pth files in one directory, a missing
 * vocabulary; and a backend
 * without the op (the CUDA backend's host harness) refuses the kind by name.
 * LIND_RWKV7_FIXTURES overrides the fixture directory. */
#include "tests/check.h"
#include "tests/kindcheck.h"
#include "kernels/backend.h"
#include "recurrent/model.h"
#include "recurrent/pth.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define POS 512
#define TOL 1e-5

typedef struct fixture {
    const char *name;
    int vocab, C, H, layers, ffn, lora[4], dtype;   /* lora: w, a, v, g; dtype LIND_DT_* of the file */
    char dir[1024], model_dir[1100], pth[1300];
    int32_t tok[POS];
    float *ref;
    int ok;
} fixture;

static fixture fx[] = {
    {.name = "a_f32", .vocab = 280, .C = 48, .H = 3, .layers = 2, .ffn = 160, .lora = {16, 8, 8, 24}, .dtype = LIND_DT_F32},
    {.name = "b_bf16", .vocab = 300, .C = 40, .H = 5, .layers = 3, .ffn = 128, .lora = {8, 12, 4, 16}, .dtype = LIND_DT_BF16},
    {.name = "c_f16", .vocab = 272, .C = 32, .H = 1, .layers = 1, .ffn = 96, .lora = {4, 4, 4, 8}, .dtype = LIND_DT_F16},
};
#define NFX ((int)(sizeof fx / sizeof fx[0]))

static const char *root;
static char tmpdir[] = "/tmp/lind-rwkv7-XXXXXX";

static void load_fixture(fixture *f)
{
    snprintf(f->dir, sizeof f->dir, "%s/%s", root, f->name);
    snprintf(f->model_dir, sizeof f->model_dir, "%s/%s/model", root, f->name);
    snprintf(f->pth, sizeof f->pth, "%s/%s/model/RWKV-x070-%s.pth", root, f->name, f->name);
    f->ok = kc_fixture_load(f->dir, POS, f->vocab, f->tok, &f->ref);
}

static model *load(const char *path, char *err, size_t errlen)
{
    model *m = NULL;
    int rc = model_load(path, "cpu", &m, err, errlen);
    return rc == 0 ? m : NULL;
}

static void check_config(const model *m, const fixture *f)
{
    const lind_config *c = model_config(m);
    CHECK(!strcmp(c->format, "rwkv7-pth"), "%s: format '%s'", f->name, c->format);
    CHECK(c->vocab_size == f->vocab && c->d_model == f->C && c->n_layers == f->layers, "%s: vocab %d C %d layers %d",
          f->name, c->vocab_size, c->d_model, c->n_layers);
    CHECK(c->emb_norm && c->norm_eps == 1e-5f && c->final_norm_eps == 1e-5f, "%s: emb_norm %d eps %g/%g", f->name,
          c->emb_norm, c->norm_eps, c->final_norm_eps);
    for (int i = 0; i < c->n_layers; i++)
        CHECK(!strcmp(c->layers[i].mixer, "rwkv7") && !strcmp(c->layers[i].ffn, "rwkv7_channel_mix"),
              "%s: layer %d is %s + %s", f->name, i, c->layers[i].mixer, c->layers[i].ffn);
    CHECK(!strcmp(c->tokenizer, "world"), "%s: tokenizer %s", f->name, c->tokenizer);
    CHECK(model_bos(m) == -1, "%s: model_bos %d, want -1 (the prompt alone)", f->name, model_bos(m));
    CHECK(model_is_eos(m, 0) && !model_is_eos(m, 1), "%s: eos is not World's 0", f->name);
    CHECK(model_weights_dtype(m) == (lind_dtype)f->dtype, "%s: weights %s, want the file's %s", f->name,
          lind_dtype_name(model_weights_dtype(m)), lind_dtype_name((lind_dtype)f->dtype));
    /* per layer: shift (C) + S (H·N·N) floats, and the FFN's shift (C) */
    size_t N = (size_t)(f->C / f->H);
    size_t want = (size_t)f->layers * 4 * (2 * (size_t)f->C + (size_t)f->H * N * N);
    CHECK(model_state_bytes(m) == want, "%s: state %zu bytes, want %zu (fp32 S)", f->name, model_state_bytes(m), want);
}

static void run_fixture(fixture *f)
{
    if (!f->ok) { CHECK(0, "%s: fixture files missing", f->name); return; }
    char err[512] = "";
    model *m = load(f->model_dir, err, sizeof err);
    CHECK(m, "model_load(%s): %s", f->model_dir, err);
    if (!m) return;
    check_config(m, f);
    float *st = model_vocab(m) == f->vocab ? kc_steps(m, f->name, f->tok, POS) : NULL;
    if (st) {
        int at = 0;
        double w = kc_worst_rows(st, f->ref, POS, f->vocab, &at);
        printf("NOTE rwkv7 %s: worst relative error vs the float64 reference %.3g (position %d of %d)\n", f->name, w,
               at, POS);
        CHECK(w <= TOL, "%s: relative error %.3g at position %d > %g", f->name, w, at, TOL);
        static const int chunks[] = {1, 7, 64, 512};
        for (int i = 0; i < 4; i++) kc_chunks_equal_steps(m, f->name, f->tok, POS, st, chunks[i]);
        kc_sessions_equal_steps(m, f->name, f->tok, POS, st);
    }
    model_free(m);
    /* the .pth named directly: the same model (fingerprint) */
    model *m2 = load(f->pth, err, sizeof err);
    CHECK(m2, "model_load(%s): %s", f->pth, err);
    if (m2 && st) {
        float *st2 = kc_steps(m2, f->name, f->tok, POS);
        CHECK(st2 && !memcmp(st, st2, sizeof(float) * POS * (size_t)f->vocab), "%s: the .pth path gives other logits",
              f->name);
        free(st2);
    }
    model_free(m2);
    free(st);
}

static void rwkv7_a_f32(void) { run_fixture(&fx[0]); }
static void rwkv7_b_bf16(void) { run_fixture(&fx[1]); }
static void rwkv7_c_f16(void) { run_fixture(&fx[2]); }

/* ---- refusals ------------------------------------------------------------ */

static char tpath[1200];
static const char *tmp_path(const char *name)
{
    snprintf(tpath, sizeof tpath, "%s/%s", tmpdir, name);
    return tpath;
}

/* a_f32's .pth with `patch` applied, opened by pth_open: its message. */
static int open_patched(void (*patch)(char *buf, size_t *len), char *err, size_t errlen)
{
    size_t n = 0;
    char *b = kc_read(fx[0].pth, &n);
    if (!b) return -999;
    patch(b, &n);
    const char *p = tmp_path("RWKV-x070-bad.pth");
    int rc = kc_write(p, b, n);
    free(b);
    if (rc) return -998;
    st_file f;
    rc = pth_open(&f, p, err, errlen);
    if (rc == 0) st_close(&f);
    return rc;
}

static char *find(char *b, size_t n, const char *s)
{
    size_t k = strlen(s);
    for (size_t i = 0; i + k <= n; i++)
        if (!memcmp(b + i, s, k)) return b + i;
    return NULL;
}

static void patch_global(char *b, size_t *n)   /* same length: the zip stays valid */
{
    char *p = find(b, *n, "_rebuild_tensor_v2");
    if (p) memcpy(p, "_rebuild_parameter", 18);
}
static void patch_opcode(char *b, size_t *n)   /* the first key's BINUNICODE → INST */
{
    char *p = find(b, *n, "emb.weight");
    if (p) p[-5] = 'i';
}
static void patch_method(char *b, size_t *n)   /* the first central entry says deflate */
{
    char *p = find(b, *n, "PK\x01\x02");
    if (p) p[10] = 8;
}
static void patch_cut(char *b, size_t *n) { (void)b; *n /= 2; }

static void rwkv7_pth_refusals(void)
{
    if (!fx[0].ok) { CHECK(0, "fixture missing"); return; }
    char err[512];
    int rc = open_patched(patch_global, err, sizeof err);
    CHECK(rc == -EINVAL && strstr(err, "RWKV-x070-bad.pth") && strstr(err, "torch._utils._rebuild_parameter") &&
          strstr(err, "not allowed"), "global: %d %s", rc, err);
    rc = open_patched(patch_opcode, err, sizeof err);
    CHECK(rc == -EINVAL && strstr(err, "RWKV-x070-bad.pth") && strstr(err, "INST") && strstr(err, "data.pkl"),
          "opcode: %d %s", rc, err);
    rc = open_patched(patch_method, err, sizeof err);
    CHECK(rc == -EINVAL && strstr(err, "compressed (method 8)"), "compressed: %d %s", rc, err);
    rc = open_patched(patch_cut, err, sizeof err);
    CHECK(rc == -EINVAL && strstr(err, "RWKV-x070-bad.pth") && strstr(err, "zip"), "truncated: %d %s", rc, err);
    unlink(tmp_path("RWKV-x070-bad.pth"));
}

/* Through model_load: a directory with two .pth files is ambiguous; one
 * .pth in a directory loads; a .pth without the World vocabulary beside it
 * is refused naming the file. */
static void rwkv7_load_refusals(void)
{
    if (!fx[0].ok || !fx[1].ok) { CHECK(0, "fixtures missing"); return; }
    char err[512] = "", cmd[8192];
    /* two .pth files in one directory: ambiguous */
    snprintf(cmd, sizeof cmd, "cp '%s' '%s/one.pth' && cp '%s' '%s/two.pth' && cp '%s/rwkv_vocab_v20230424.txt' '%s'",
             fx[0].pth, tmpdir, fx[1].pth, tmpdir, fx[0].model_dir, tmpdir);
    CHECK(system(cmd) == 0, "copy");
    model *m = load(tmpdir, err, sizeof err);
    CHECK(!m && strstr(err, "more than one .pth"), "two .pth: %s", err);
    model_free(m);
    unlink(tmp_path("two.pth"));
    m = load(tmpdir, err, sizeof err);
    CHECK(m != NULL, "one .pth in a directory: %s", err);
    model_free(m);
    /* no vocabulary beside it */
    unlink(tmp_path("rwkv_vocab_v20230424.txt"));
    m = load(tmp_path("one.pth"), err, sizeof err);
    CHECK(!m && strstr(err, "rwkv_vocab_v20230424.txt"), "no vocabulary: %s", err);
    model_free(m);
    unlink(tmp_path("one.pth"));
}

/* The CUDA backend has no rwkv7_step yet: its host harness refuses the kind. */
static void rwkv7_backend_without_op(void)
{
    if (!fx[0].ok) { CHECK(0, "fixture missing"); return; }
    char err[512] = "";
    model *m = NULL;
    int rc = model_load(fx[0].model_dir, "harness", &m, err, sizeof err);
    if (rc == -ENOTSUP && strstr(err, "not built")) {
        printf("SKIP rwkv7_backend_without_op: %s\n", err);
        return;
    }
    CHECK(rc == -ENOTSUP && strstr(err, "\"rwkv7\"") && strstr(err, "rwkv7_step") && strstr(err, "backend"),
          "harness: %d %s", rc, err);
    model_free(m);
}

/* rwkv7_step's AVX-512 state update (eight rows of S at once, kernels/cpu/
 * ops_rwkv7.c) against the one-row loop of the AVX2 backend: the same
 * outputs and states bit for bit, for a head size with a partial tile (13)
 * and whole ones (16), over a run of two rows of one session and a second
 * session, three steps. A transposition that mixed rows or columns fails. */
static void rwkv7_state_paths(void)
{
#ifndef __FMA__
    printf("SKIP rwkv7_state_paths: this build does not fuse multiply-adds\n");
#else
    static const struct { int H, N, dw; } sh[] = {{3, 13, 5}, {2, 16, 8}};
    enum { R = 3, STEPS = 3 };
    const int slots[R] = {0, 0, 1}, toks[R] = {0, 0, 0};
    for (size_t k = 0; k < sizeof sh / sizeof *sh; k++) {
        int H = sh[k].H, N = sh[k].N, dw = sh[k].dw, C = H * N, ldi = 6 * C + dw;
        size_t sn = (size_t)H * N * N;
        float *in = malloc(sizeof(float) * R * ldi), *par = malloc(sizeof(float) * 8 * C),
              *w2 = malloc(sizeof(float) * dw * C), *out[2], *st[2][2];
        srand(5 + (unsigned)k);
        for (int i = 0; i < 8 * C; i++) par[i] = (float)(rand() / (double)RAND_MAX) - 0.5f;
        for (int i = 0; i < dw * C; i++) w2[i] = 0.2f * ((float)(rand() / (double)RAND_MAX) - 0.5f);
        for (int e = 0; e < 2; e++) {
            out[e] = malloc(sizeof(float) * R * C * STEPS);
            st[e][0] = malloc(sizeof(float) * sn);
            st[e][1] = malloc(sizeof(float) * sn);
        }
        for (int e = 0; e < 2; e++) {
            const char *isa = e ? "avx2" : "avx512";
            backend *be = NULL;
            backend_buf *bin = NULL, *bout = NULL, *bpar = NULL, *bw2 = NULL;
            if (kc_cpu_isa_backend(isa, &be, "rwkv7_state_paths")) goto next;
            const backend_ops *o = be->ops;
            int rc = o->slots_reserve(be, 2, sn * sizeof(float)) || o->buf_new(be, (size_t)R * ldi, &bin) ||
                     o->buf_new(be, (size_t)R * C, &bout) || o->buf_new(be, (size_t)8 * C, &bpar) ||
                     o->buf_new(be, (size_t)dw * C, &bw2) || o->slot_zero(be, 0) || o->slot_zero(be, 1) ||
                     o->begin_step(be, slots, toks, R) || o->buf_upload(be, bpar, 0, par, (size_t)8 * C) ||
                     o->buf_upload(be, bw2, 0, w2, (size_t)dw * C);
            srand(9 + (unsigned)k);
            for (int t = 0; t < STEPS && !rc; t++) {
                for (int i = 0; i < R * ldi; i++) in[i] = 2.0f * ((float)(rand() / (double)RAND_MAX) - 0.5f);
                rc = o->buf_upload(be, bin, 0, in, (size_t)R * ldi) ||
                     o->rwkv7_step(be, bin, ldi, bpar, bw2, dw, NULL, 0, bout, 0, H, N, 64e-5f) ||
                     o->buf_download(be, bout, 0, out[e] + (size_t)t * R * C, (size_t)R * C);
            }
            rc = rc || o->slot_read(be, 0, st[e][0]) || o->slot_read(be, 1, st[e][1]);
            CHECK(!rc, "N %d: %s backend ops failed", N, isa);
            o->buf_free(be, bin);
            o->buf_free(be, bout);
            o->buf_free(be, bpar);
            o->buf_free(be, bw2);
            backend_free(be);
        }
        char what[32];
        snprintf(what, sizeof what, "N %d", N);
        kc_paths_agree(what, out, st, (size_t)R * C * STEPS, sn);
    next:
        for (int e = 0; e < 2; e++) {
            free(out[e]);
            free(st[e][0]);
            free(st[e][1]);
        }
        free(in);
        free(par);
        free(w2);
    }
#endif
}

int main(void)
{
    root = getenv("LIND_RWKV7_FIXTURES") ? getenv("LIND_RWKV7_FIXTURES") : "tests/fixtures/rwkv7";
    if (!mkdtemp(tmpdir)) {
        printf("FAIL rwkv7: mkdtemp: %s\n", strerror(errno));
        return 1;
    }
    check_begin("rwkv7_fixtures_present");
    for (int i = 0; i < NFX; i++) load_fixture(&fx[i]);
    check_end();
    RUN(rwkv7_a_f32);
    RUN(rwkv7_b_bf16);
    RUN(rwkv7_c_f16);
    RUN(rwkv7_pth_refusals);
    RUN(rwkv7_load_refusals);
    RUN(rwkv7_backend_without_op);
    RUN(rwkv7_state_paths);
    for (int i = 0; i < NFX; i++) free(fx[i].ref);
    rmdir(tmpdir);
    return check_exit();
}
