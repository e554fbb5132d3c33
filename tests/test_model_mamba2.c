/* tests/test_model_mamba2.c — Hugging Face Mamba-2 checkpoints
 * (Mamba2ForCausalLM): lind computes what transformers' modeling_mamba2
 * computes.
 *
 * The fixtures (tests/fixtures/mamba2/, made by tools/mamba2_fixtures.py,
 * see its README) are random models in the HF layout — f32 with a tied
 * head, bf16 with 3 groups, biases and a clamping time_step_limit, f16 with
 * expand 3 and 4 groups — each with 512 tokens and the float64 reference
 * logits after every one (tools/mamba2_ref.py: the chunked SSD scan of HF's
 * torch_forward). For each fixture:
 *   - model_load reads config.json (its bare Infinity included) and the
 *     HF tensor names; the parsed config is the one the file says;
 *   - one model_step per token: every position within 1e-5 relative
 *     (max|a−b| over the row / max|b| over the row) of the reference (the
 *     fixtures record that the easy mistakes — the gated norm per group,
 *     norm before the gate, the wrong head→group map, no dt clamp — move
 *     some fixture's logits by ≥ 0.7);
 *   - model_forward in prefill chunks of 1, 7, 64 and 512 tokens and three
 *     sessions per call at different paces: bit-identical to stepping;
 *   - the state carried: a prefill of 300 tokens, its slot read, put
 *     through state_encode/state_decode into another slot, then stepped to
 *     512 gives the long run's logits bit for bit; the state's size and
 *     regions (S fp32 H·P·N, conv ring, conv_idx int32) per layer.
 * Then refusals, each naming the file and the culprit: a missing tensor, a
 * misshapen one, an untied config over a tied file, unsupported config
 * values (rms_norm false, hidden_act, n_groups not dividing num_heads,
 * num_heads × head_dim ≠ expand × hidden_size, time_step_limit). Then
 * the CUDA backend's kernel bodies through the host harness against the CPU
 * backend; last, the CPU op's AVX-512 and portable paths against each
 * other. */
#include "tests/check.h"
#include "tests/kindcheck.h"
#include "kernels/backend.h"
#include "recurrent/config.h"
#include "recurrent/model.h"
#include "state/format.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define POS 512
#define TOL 1e-5

typedef struct fixture {
    const char *name;
    int vocab, d, layers, H, P, N, G, K, dtype, tied;
    char dir[1024], model_dir[1100];
    int32_t tok[POS];
    float *ref;
    int ok;
} fixture;

static fixture fx[] = {
    {.name = "a_f32", .vocab = 300, .d = 32, .layers = 2, .H = 4, .P = 16, .N = 16, .G = 1, .K = 4,
     .dtype = LIND_DT_F32, .tied = 1},
    {.name = "b_bf16", .vocab = 290, .d = 24, .layers = 3, .H = 6, .P = 8, .N = 8, .G = 3, .K = 3,
     .dtype = LIND_DT_BF16, .tied = 0},
    {.name = "c_f16", .vocab = 280, .d = 16, .layers = 1, .H = 12, .P = 4, .N = 32, .G = 4, .K = 2,
     .dtype = LIND_DT_F16, .tied = 1},
};
#define NFX ((int)(sizeof fx / sizeof fx[0]))

static const char *root;
static char tmpdir[] = "/tmp/lind-mamba2-XXXXXX";

static void load_fixture(fixture *f)
{
    snprintf(f->dir, sizeof f->dir, "%s/%s", root, f->name);
    snprintf(f->model_dir, sizeof f->model_dir, "%s/%s/model", root, f->name);
    f->ok = kc_fixture_load(f->dir, POS, f->vocab, f->tok, &f->ref);
}

static model *load(const char *path, char *err, size_t errlen)
{
    model *m = NULL;
    int rc = model_load(path, "cpu", &m, err, errlen);
    return rc == 0 ? m : NULL;
}

/* Steps tokens [from, to) of slot `slot` one model_step each into out rows. */
static int step_range(model *m, const fixture *f, int slot, int from, int to, float *out)
{
    int V = model_vocab(m), rc = 0;
    for (int t = from; t < to && rc == 0; t++) {
        rc = model_step(m, &slot, &f->tok[t], 1, out + (size_t)t * V);
        CHECK(rc == 0, "%s: model_step at position %d: %d", f->name, t, rc);
    }
    return rc;
}

static void check_config(const model *m, const fixture *f)
{
    const lind_config *c = model_config(m);
    CHECK(!strcmp(c->format, "hf-mamba2"), "%s: format '%s'", f->name, c->format);
    CHECK(c->vocab_size == f->vocab && c->d_model == f->d && c->n_layers == f->layers, "%s: vocab %d d %d layers %d",
          f->name, c->vocab_size, c->d_model, c->n_layers);
    CHECK(c->norm_rms && !c->emb_norm && c->tie_head == f->tied, "%s: norm_rms %d emb_norm %d tie_head %d", f->name,
          c->norm_rms, c->emb_norm, c->tie_head);
    for (int i = 0; i < c->n_layers; i++)
        CHECK(!strcmp(c->layers[i].mixer, "mamba2") && !strcmp(c->layers[i].ffn, "none"), "%s: layer %d is %s + %s",
              f->name, i, c->layers[i].mixer, c->layers[i].ffn);
    CHECK(!strcmp(c->tokenizer, "bpe"), "%s: tokenizer %s", f->name, c->tokenizer);
    CHECK(model_bos(m) == -1, "%s: model_bos %d, want -1 (the prompt alone)", f->name, model_bos(m));
    CHECK(model_is_eos(m, 0), "%s: eos_token_id 0 is not an end token", f->name);
    CHECK(model_weights_dtype(m) == (lind_dtype)f->dtype, "%s: weights %s, want the file's %s", f->name,
          lind_dtype_name(model_weights_dtype(m)), lind_dtype_name((lind_dtype)f->dtype));
    /* per layer: S (H·P·N floats), the conv ring (CD·(K−1) floats), conv_idx */
    size_t I = (size_t)f->H * f->P, CD = I + 2 * (size_t)f->G * f->N;
    size_t want = (size_t)f->layers * (4 * I * f->N + 4 * CD * (size_t)(f->K - 1) + 4);
    CHECK(model_state_bytes(m) == want, "%s: state %zu bytes, want %zu", f->name, model_state_bytes(m), want);
    model_state_region r[3 * 8];
    int nr = model_state_regions(m, r, 24);
    CHECK(nr == 3 * f->layers, "%s: %d regions", f->name, nr);
    for (int i = 0; i < nr && i < 24; i++) {
        int s = !strcmp(r[i].name, "S"), ring = !strcmp(r[i].name, "conv"), idx = !strcmp(r[i].name, "conv_idx");
        CHECK((s && r[i].type == LIND_EL_F32 && r[i].count == I * f->N) ||
              (ring && r[i].type == LIND_EL_F32 && r[i].count == CD * (size_t)(f->K - 1)) ||
              (idx && r[i].type == LIND_EL_I32 && r[i].count == 1),
              "%s: region %d '%s' type %d count %zu", f->name, i, r[i].name, r[i].type, r[i].count);
    }
}

/* Prefill 300 tokens in one run, save the slot through the state format,
 * restore it into another slot and step on: the long run's logits. */
static void check_carried(model *m, const fixture *f, const float *stepped)
{
    enum { CUT = 300 };
    int V = model_vocab(m), rc = model_slots_reserve(m, 2), zero = 0;
    size_t sb = model_state_bytes(m);
    uint8_t *raw = malloc(sb), *raw2 = malloc(sb), *blob = NULL;
    size_t blen = 0;
    float *lg = malloc(sizeof(float) * POS * (size_t)V);
    int *slots = calloc(CUT, sizeof(int)), last = CUT - 1;
    char err[512] = "";
    if (rc == 0) rc = model_slot_reset(m, 0);
    if (rc == 0) rc = model_forward(m, slots, f->tok, CUT, &last, 1, lg + (size_t)last * V);
    CHECK(rc == 0 && !memcmp(lg + (size_t)last * V, stepped + (size_t)last * V, sizeof(float) * V),
          "%s: a 300-token prefill's last logits: rc %d", f->name, rc);
    if (rc == 0) rc = model_slot_read(m, 0, raw);
    state_meta meta = {.tokens = CUT, .pending_token = -1};
    sampler_params sp = sampler_defaults();
    sampler_init(&meta.sampler, &sp);
    if (rc == 0) rc = state_encode(m, &meta, raw, &blob, &blen, err, sizeof err);
    CHECK(rc == 0, "%s: state_encode: %d %s", f->name, rc, err);
    state_meta back;
    if (rc == 0) rc = state_decode(m, blob, blen, &back, raw2, err, sizeof err);
    CHECK(rc == 0 && back.tokens == CUT && !memcmp(raw, raw2, sb), "%s: state_decode: %d %s", f->name, rc, err);
    if (rc == 0) rc = model_slot_reset(m, 1);
    if (rc == 0) rc = model_slot_write(m, 1, raw2);
    if (rc == 0) rc = step_range(m, f, 1, CUT, POS, lg);
    int bad = -1;
    for (int t = CUT; t < POS && rc == 0 && bad < 0; t++)
        if (memcmp(lg + (size_t)t * V, stepped + (size_t)t * V, sizeof(float) * V)) bad = t;
    CHECK(rc == 0 && bad < 0, "%s: restored state then stepped: rc %d, position %d differs from the long run",
          f->name, rc, bad);
    (void)zero;
    free(raw);
    free(raw2);
    free(blob);
    free(lg);
    free(slots);
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
        printf("NOTE mamba2 %s: worst relative error vs the float64 reference %.3g (position %d of %d)\n", f->name, w,
               at, POS);
        CHECK(w <= TOL, "%s: relative error %.3g at position %d > %g", f->name, w, at, TOL);
        static const int chunks[] = {1, 7, 64, 512};
        for (int i = 0; i < 4; i++) kc_chunks_equal_steps(m, f->name, f->tok, POS, st, chunks[i]);
        kc_sessions_equal_steps(m, f->name, f->tok, POS, st);
        check_carried(m, f, st);
    }
    model_free(m);
    free(st);
}

static void mamba2_a_f32(void) { run_fixture(&fx[0]); }
static void mamba2_b_bf16(void) { run_fixture(&fx[1]); }
static void mamba2_c_f16(void) { run_fixture(&fx[2]); }

/* ---- refusals ------------------------------------------------------------ */

static char tpath[1200];
static const char *tmp_path(const char *name)
{
    snprintf(tpath, sizeof tpath, "%s/%s", tmpdir, name);
    return tpath;
}

/* A copy of fixture f's model directory in tmpdir/m with config.json's text
 * `from` replaced by `to` (from NULL: unchanged); model_load's result. */
static int load_edited(const fixture *f, const char *from, const char *to, char *err, size_t errlen)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "rm -rf '%s/m' && cp -r '%s' '%s/m'", tmpdir, f->model_dir, tmpdir);
    if (system(cmd) != 0) return -999;
    size_t n = 0;
    char *c = kc_read(tmp_path("m/config.json"), &n);
    if (!c) return -998;
    char *p = from ? strstr(c, from) : NULL;
    if (from && !p) {
        free(c);
        snprintf(err, errlen, "(the fixture's config.json has no '%s')", from);
        return -997;
    }
    size_t out_n = n + (to ? strlen(to) : 0) + 1;
    char *o = malloc(out_n);
    if (p) {
        size_t pre = (size_t)(p - c);
        memcpy(o, c, pre);
        size_t k = (size_t)sprintf(o + pre, "%s", to);
        strcpy(o + pre + k, p + strlen(from));
    } else {
        strcpy(o, c);
    }
    int rc = kc_write(tmp_path("m/config.json"), o, strlen(o));
    free(c);
    free(o);
    if (rc) return -996;
    model *m = NULL;
    rc = model_load(tmp_path("m"), "cpu", &m, err, errlen);
    model_free(m);
    return rc;
}

/* Python json's bare tokens become strings outside JSON strings only. */
static void mamba2_config_nonfinite(void)
{
    const char *in = "{\"a\": \"x Infinity \\\"NaN\\\" -Infinity\", \"b\": [0.0, Infinity, -Infinity, NaN]}";
    const char *want = "{\"a\": \"x Infinity \\\"NaN\\\" -Infinity\", \"b\": [0.0, \"Infinity\", \"-Infinity\", "
                       "\"NaN\"]}";
    size_t n = 0;
    char *q = config_quote_nonfinite(in, strlen(in), &n);
    CHECK(q && n == strlen(want) && !memcmp(q, want, n), "quoted: %.*s", q ? (int)n : 4, q ? q : "NULL");
    free(q);
}

static void mamba2_refusals(void)
{
    if (!fx[0].ok || !fx[1].ok) { CHECK(0, "fixtures missing"); return; }
    char err[512] = "";
    int rc;
    /* the copy itself loads (the edit machinery is sound) */
    rc = load_edited(&fx[0], NULL, NULL, err, sizeof err);
    CHECK(rc == 0, "unedited copy: %d %s", rc, err);
    /* a missing tensor: one more layer than the file has */
    rc = load_edited(&fx[0], "\"num_hidden_layers\": 2", "\"num_hidden_layers\": 3", err, sizeof err);
    CHECK(rc == -ENOENT && strstr(err, "model.safetensors") && strstr(err, "missing tensor") &&
          strstr(err, "'backbone.layers.2.norm.weight'"), "missing tensor: %d %s", rc, err);
    /* the head: untied over a file without lm_head.weight */
    rc = load_edited(&fx[0], "\"tie_word_embeddings\": true", "\"tie_word_embeddings\": false", err, sizeof err);
    CHECK(rc == -ENOENT && strstr(err, "missing tensor 'lm_head.weight'"), "untied: %d %s", rc, err);
    /* tied over a file that has lm_head.weight: refused as unused */
    rc = load_edited(&fx[1], "\"tie_word_embeddings\": false", "\"tie_word_embeddings\": true", err, sizeof err);
    CHECK(rc == -EINVAL && strstr(err, "unexpected tensor 'lm_head.weight'"), "tied over lm_head: %d %s", rc, err);
    /* a wrong shape: d_state 16 → 8 makes in_proj and conv1d narrower */
    rc = load_edited(&fx[0], "\"state_size\": 16", "\"state_size\": 8", err, sizeof err);
    CHECK(rc == -EINVAL && strstr(err, "model.safetensors") &&
          strstr(err, "tensor 'backbone.layers.0.mixer.in_proj.weight' has shape [164, 32], expected [148, 32]"),
          "wrong shape: %d %s", rc, err);
    /* the conv bias the config denies is an unexpected tensor */
    rc = load_edited(&fx[0], "\"use_conv_bias\": true", "\"use_conv_bias\": false", err, sizeof err);
    CHECK(rc == -EINVAL && strstr(err, "unexpected tensor 'backbone.layers.0.mixer.conv1d.bias'"), "conv bias: %d %s",
          rc, err);
    /* unsupported config values, each named */
    rc = load_edited(&fx[0], "\"rms_norm\": true", "\"rms_norm\": false", err, sizeof err);
    CHECK(rc == -EINVAL && strstr(err, "config.json") && strstr(err, "rms_norm false is not supported"),
          "rms_norm: %d %s", rc, err);
    rc = load_edited(&fx[0], "\"hidden_act\": \"silu\"", "\"hidden_act\": \"gelu\"", err, sizeof err);
    CHECK(rc == -EINVAL && strstr(err, "hidden_act \"gelu\" is not supported"), "hidden_act: %d %s", rc, err);
    rc = load_edited(&fx[1], "\"n_groups\": 3", "\"n_groups\": 4", err, sizeof err);
    CHECK(rc == -EINVAL && strstr(err, "n_groups 4 does not divide num_heads 6"), "n_groups: %d %s", rc, err);
    rc = load_edited(&fx[0], "\"num_heads\": 4", "\"num_heads\": 3", err, sizeof err);
    CHECK(rc == -EINVAL && strstr(err, "num_heads × head_dim") && strstr(err, "expand × hidden_size"),
          "num_heads: %d %s", rc, err);
    rc = load_edited(&fx[1], "\"time_step_limit\": [\n    0.02,\n    0.3\n  ]", "\"time_step_limit\": [0.3, 0.02]", err,
                     sizeof err);
    CHECK(rc == -EINVAL && strstr(err, "time_step_limit"), "time_step_limit: %d %s", rc, err);
    rc = load_edited(&fx[0], "\"state_size\": 16", "\"state_size\": \"16\"", err, sizeof err);
    CHECK(rc == -EINVAL && strstr(err, "field \"state_size\" must be an integer"), "state_size type: %d %s", rc, err);
    rc = load_edited(&fx[0], "\"hidden_size\": 32,", "", err, sizeof err);
    CHECK(rc == -EINVAL && strstr(err, "missing field \"hidden_size\""), "no hidden_size: %d %s", rc, err);
    /* Infinity in a place that wants a finite number */
    rc = load_edited(&fx[0], "\"layer_norm_epsilon\": 1e-05", "\"layer_norm_epsilon\": Infinity", err, sizeof err);
    CHECK(rc == -EINVAL && strstr(err, "layer_norm_epsilon"), "eps Infinity: %d %s", rc, err);
    char cmd[1300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s/m'", tmpdir);
    CHECK(system(cmd) == 0, "cleanup");
}

/* The CUDA backend's code (its kernel bodies, kb_mamba2.h, run on the host
 * by the harness backend over the same grid): each fixture stepped token by
 * token within 1e-5 relative of the CPU backend's logits (and so of the
 * reference), its own prefill bit-identical to its steps (chunks of 7; of 37
 * with fp32 weights, within 1e-5 with half ones), and the final state within 1e-5 of each region's largest value, ring
 * indices equal. */
static void harness_fixture(fixture *f)
{
    char err[512] = "";
    model *h = NULL, *c = NULL;
    int rc = model_load(f->model_dir, "harness", &h, err, sizeof err);
    if (rc == -ENOTSUP && strstr(err, "not built")) {
        printf("SKIP mamba2_harness: %s\n", err);
        return;
    }
    CHECK(rc == 0, "%s: harness load: %d %s", f->name, rc, err);
    c = load(f->model_dir, err, sizeof err);
    CHECK(c != NULL, "%s: cpu load: %s", f->name, err);
    if (!h || !c) { model_free(h); model_free(c); return; }
    enum { T = 120 };
    int V = f->vocab, zero = 0;
    float *lh = malloc(sizeof(float) * T * V), *lc = malloc(sizeof(float) * T * V), *lp = malloc(sizeof(float) * T * V);
    rc = model_slots_reserve(h, 2) || model_slots_reserve(c, 1) || model_slot_reset(h, 0) || model_slot_reset(h, 1) ||
         model_slot_reset(c, 0);
    for (int t = 0; t < T && rc == 0; t++) {
        rc = model_step(h, &zero, &f->tok[t], 1, lh + (size_t)t * V);
        if (rc == 0) rc = model_step(c, &zero, &f->tok[t], 1, lc + (size_t)t * V);
    }
    CHECK(rc == 0, "%s: stepping: %d (%s)", f->name, rc, model_last_error(h));
    double w = 0;
    for (int t = 0; t < T && rc == 0; t++) {
        double e = kc_rel_row(lh + (size_t)t * V, lc + (size_t)t * V, V);
        if (e > w) w = e;
    }
    /* prefill on the harness: chunks of 7 (≤ 8 rows: half weights stay on
     * kb_gemv_half, whose sums per output are fixed) are bit-identical to
     * its steps; chunks of 37 too with fp32 weights, and within 1e-5 with
     * half weights (over 8 rows they are widened for the GEMM: docs/CUDA.md) */
    int slots[37], rows[37];
    double pw = 0;
    for (int i = 0; i < 37; i++) slots[i] = 1, rows[i] = i;
    for (int pass = 0; pass < 2 && rc == 0; pass++) {
        int chunk = pass ? 37 : 7;
        rc = model_slot_reset(h, 1);
        for (int t0 = 0; t0 < T && rc == 0; t0 += chunk) {
            int n = T - t0 < chunk ? T - t0 : chunk;
            rc = model_forward(h, slots, &f->tok[t0], n, rows, n, lp + (size_t)t0 * V);
        }
        int same = rc == 0 && !memcmp(lp, lh, sizeof(float) * T * V);
        for (int t = 0; t < T && pass; t++) {
            double e = kc_rel_row(lp + (size_t)t * V, lh + (size_t)t * V, V);
            if (e > pw) pw = e;
        }
        CHECK(rc == 0 && (same || (pass && f->dtype != LIND_DT_F32 && pw <= TOL)),
              "%s: harness prefill in chunks of %d vs its steps: rc %d, %s (%.3g)", f->name, chunk, rc,
              same ? "bit-identical" : "differ", pw);
    }
    size_t sb = model_state_bytes(c);
    unsigned char *sh = malloc(sb), *sc = malloc(sb);
    double sw = 0;
    int idx_ok = 1;
    if (rc == 0 && model_slot_read(h, 0, sh) == 0 && model_slot_read(c, 0, sc) == 0) {
        model_state_region r[24];
        int nr = model_state_regions(c, r, 24);
        for (int k = 0; k < nr && k < 24; k++) {
            if (r[k].type == LIND_EL_I32) {
                idx_ok &= !memcmp(sh + r[k].offset, sc + r[k].offset, 4);
                continue;
            }
            const float *a = (const float *)(sh + r[k].offset), *b = (const float *)(sc + r[k].offset);
            double d = 0, m = 0;
            for (size_t e = 0; e < r[k].count; e++) {
                if (fabs((double)a[e] - b[e]) > d) d = fabs((double)a[e] - b[e]);
                if (fabs((double)b[e]) > m) m = fabs((double)b[e]);
            }
            if (m > 0 && d / m > sw) sw = d / m;
        }
    }
    printf("NOTE mamba2 %s: harness vs cpu over %d tokens: logits %.3g, states %.3g; its prefill in chunks of 37 "
           "vs its steps %.3g\n", f->name, T, w, sw, pw);
    CHECK(rc == 0 && w <= TOL && sw <= TOL && idx_ok, "%s: harness vs cpu: logits %.3g, states %.3g, indices %s",
          f->name, w, sw, idx_ok ? "equal" : "differ");
    free(sh);
    free(sc);
    free(lh);
    free(lc);
    free(lp);
    model_free(h);
    model_free(c);
}

/* kernels/cpu/ops_mamba2.c sums eight rows of S at once with AVX-512
 * (mamba2_state512) and one row at a time otherwise (mamba2_state), each row
 * in n order with the same roundings: the op on a backend with cpu_gemm
 * "avx512" and on one with "avx2" gives the same outputs and state bit for
 * bit, over three steps of a run of two rows and a run of one, on a shape
 * with rows and columns left over from the blocks of 8 (P 20, N 13, two
 * groups) and on one without (P 16, N 16). Only where this build fuses
 * multiply-adds (__FMA__), as the AVX-512 path always does. */
static void mamba2_state_paths(void)
{
#ifndef __FMA__
    printf("SKIP mamba2_state_paths: this build does not fuse multiply-adds\n");
#else
    static const struct { int H, P, N, G; } sh[] = {{4, 20, 13, 2}, {2, 16, 16, 1}};
    enum { R = 3, STEPS = 3 };
    const int slots[R] = {0, 0, 1}, toks[R] = {0, 0, 0};
    for (size_t k = 0; k < sizeof sh / sizeof *sh; k++) {
        int H = sh[k].H, P = sh[k].P, N = sh[k].N, G = sh[k].G, I = H * P, CD = I + 2 * G * N, ldi = CD + I + H;
        size_t sn = (size_t)I * N;
        float *in = malloc(sizeof(float) * R * ldi), par[2048], *out[2], *st[2][2];
        srand(7 + (unsigned)k);
        for (int i = 0; i < CD + 3 * H; i++) par[i] = (float)(rand() / (double)RAND_MAX) - 0.5f;
        for (int h = 0; h < H; h++) par[CD + H + h] = -0.1f - (float)h / H;   /* A < 0 */
        for (int e = 0; e < 2; e++) {
            out[e] = malloc(sizeof(float) * R * I * STEPS);
            st[e][0] = malloc(sizeof(float) * sn);
            st[e][1] = malloc(sizeof(float) * sn);
        }
        for (int e = 0; e < 2; e++) {
            const char *isa = e ? "avx2" : "avx512";
            backend *be = NULL;
            backend_buf *bin = NULL, *bout = NULL, *bpar = NULL;
            if (kc_cpu_isa_backend(isa, &be, "mamba2_state_paths")) goto next;
            const backend_ops *o = be->ops;
            int rc = o->slots_reserve(be, 2, sn * sizeof(float)) || o->buf_new(be, (size_t)R * ldi, &bin) ||
                     o->buf_new(be, (size_t)R * I, &bout) || o->buf_new(be, (size_t)CD + 3 * H, &bpar) ||
                     o->slot_zero(be, 0) || o->slot_zero(be, 1) || o->begin_step(be, slots, toks, R) ||
                     o->buf_upload(be, bpar, 0, par, (size_t)CD + 3 * H);
            srand(11 + (unsigned)k);
            for (int t = 0; t < STEPS && !rc; t++) {
                for (int i = 0; i < R * ldi; i++) in[i] = 4.0f * ((float)(rand() / (double)RAND_MAX) - 0.5f);
                rc = o->buf_upload(be, bin, 0, in, (size_t)R * ldi) ||
                     o->mamba2_step(be, bin, ldi, bpar, bout, 0, H, P, N, G, 0.0f, INFINITY) ||
                     o->buf_download(be, bout, 0, out[e] + (size_t)t * R * I, (size_t)R * I);
            }
            rc = rc || o->slot_read(be, 0, st[e][0]) || o->slot_read(be, 1, st[e][1]);
            CHECK(!rc, "P %d N %d: %s backend ops failed", P, N, isa);
            o->buf_free(be, bin);
            o->buf_free(be, bout);
            o->buf_free(be, bpar);
            backend_free(be);
        }
        char what[32];
        snprintf(what, sizeof what, "P %d N %d", P, N);
        kc_paths_agree(what, out, st, (size_t)R * I * STEPS, sn);
    next:
        for (int e = 0; e < 2; e++) {
            free(out[e]);
            free(st[e][0]);
            free(st[e][1]);
        }
        free(in);
    }
#endif
}

static void mamba2_harness(void)
{
    for (int i = 0; i < NFX; i++)
        if (fx[i].ok) harness_fixture(&fx[i]);
}

int main(void)
{
    root = getenv("LIND_MAMBA2_FIXTURES") ? getenv("LIND_MAMBA2_FIXTURES") : "tests/fixtures/mamba2";
    if (!mkdtemp(tmpdir)) {
        printf("FAIL mamba2: mkdtemp: %s\n", strerror(errno));
        return 1;
    }
    check_begin("mamba2_fixtures_present");
    for (int i = 0; i < NFX; i++) load_fixture(&fx[i]);
    check_end();
    RUN(mamba2_a_f32);
    RUN(mamba2_b_bf16);
    RUN(mamba2_c_f16);
    RUN(mamba2_config_nonfinite);
    RUN(mamba2_refusals);
    RUN(mamba2_harness);
    RUN(mamba2_state_paths);
    for (int i = 0; i < NFX; i++) free(fx[i].ref);
    rmdir(tmpdir);
    return check_exit();
}
