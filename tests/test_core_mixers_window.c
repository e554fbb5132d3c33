/* tests/test_core_mixers_window.c — the sliding-window mixer kinds end to end:
 * "window" (softmax attention over the last w tokens with dilation and
 * global tokens, ALiBi or RoPE, recurrent/mixer_window.c) and "aft_local" /
 * "aft_conv" (recurrent/mixer_aft_window.c).
 *
 * A plain-C double-precision reference computes each model over a 300-token
 * sequence in PARALLEL form: window attention as an explicit softmax over
 * every position s ≤ t with a visibility mask (s < g, or t − s a multiple of
 * dil below w·dil), RoPE applied to whole sequences of q and k; AFT as the
 * explicit sums over all t' ≤ t of e^{k_t' + b(t−t')}, b(j) = w[j] for j < s
 * and 0 beyond. No ring, no position counter. The engine's recurrent logits
 * (one model_step per token) must match at every position within 1e-4 of
 * the largest logit there; every case crosses its window boundary (w·dil,
 * s ≤ 48 < 300), with dilation and global tokens. Also: batched prefill
 * (model_forward runs) and batched sessions equal one-token steps bit for
 * bit; 1 and 3 CPU threads agree; the state blob (fp32 rings, fp64 sums,
 * int64 positions) round-trips through model_slot_read/write and the state
 * format, a position whose bits are a double NaN included; bad configs and
 * tensors are refused by name; the CUDA backend's code under the host
 * harness matches the CPU backend. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/backend.h"
#include "recurrent/model.h"
#include "recurrent/safetensors.h"
#include "state/format.h"
#include "tests/check.h"
#include "tests/kindcheck.h"
#include "tests/refmodel.h"

#define T 300
#define V 256

static char tmpdir[256];

/* ---- writing a model in lind's "layers" form ------------------------------ */

typedef struct lspec {
    const char *mixer;   /* "window", "aft_local", "aft_conv" */
    int H, dh;           /* window: heads and head width; aft_conv: heads */
    int w, dil, g, rope; /* window; w is s (window / kernel_size) for AFT */
} lspec;

typedef struct mspec {
    int d, ff, nl;
    lspec L[4];
} mspec;

static int is_window(const lspec *l) { return !strcmp(l->mixer, "window"); }

/* The model as tests/refmodel.h writes it: each layer's keys, and the
 * weights' distributions beyond the defaults: scores of a few units (Wq, Wk
 * at 4/√d, Wv at 2/√d), so the softmax and e^{k} weights are far from
 * uniform; AFT's position biases and kernels of a few units. */
static rm_spec spec_of(const mspec *m)
{
    rm_spec s;
    memset(&s, 0, sizeof s);
    s.vocab_size = V;
    s.d_model = m->d;
    s.n_layers = m->nl;
    for (int i = 0; i < m->nl; i++) {
        const lspec *l = &m->L[i];
        size_t n = (size_t)snprintf(s.layer[i], sizeof s.layer[i], "\"mixer\": \"%s\", \"ffn\": \"gelu_mlp\", "
                                    "\"d_ff\": %d", l->mixer, m->ff);
        char *p = s.layer[i] + n;
        size_t left = sizeof s.layer[i] - n;
        if (is_window(l))
            snprintf(p, left, ", \"n_heads\": %d, \"d_head\": %d, \"window\": %d, \"dilation\": %d, \"global\": %d, "
                     "\"position\": \"%s\"", l->H, l->dh, l->w, l->dil, l->g, l->rope ? "rope" : "alibi");
        else if (!strcmp(l->mixer, "aft_local"))
            snprintf(p, left, ", \"window\": %d", l->w);
        else
            snprintf(p, left, ", \"n_heads\": %d, \"kernel_size\": %d", l->H, l->w);
    }
    return s;
}

static void dist(void *ctx, const rm_tensor *t, rm_dist *d)
{
    (void)ctx;
    if (t->part != RM_MIXER) return;
    if (!strcmp(t->rel, "wq") || !strcmp(t->rel, "wk")) d->a *= 4;
    else if (!strcmp(t->rel, "wv")) d->a *= 2;
    else if (!strcmp(t->rel, "pos_bias")) d->a = 2.0;
    else if (!strcmp(t->rel, "kernel") || !strcmp(t->rel, "kernel_bias")) d->a = 1.0;
    else if (!strcmp(t->rel, "kernel_gain")) *d = (rm_dist){TESTMODEL_ONE_PLUS, 0.5, 0, 0};
}

/* config.json + model.safetensors with random weights; `cfg_extra` (may be
 * NULL) is added to layer 0's object; `skip` names a tensor to leave out. */
static int write_model(const char *dir, const mspec *m, uint64_t seed, const char *skip, const char *cfg_extra)
{
    rm_spec s = spec_of(m);
    rm_opts o = {.dist = dist, .skip = skip, .extra0 = cfg_extra};
    return rm_write(dir, &s, seed, &o);
}

/* ---- the parallel-form reference, in double ------------------------------- */

/* Each mixer kind's reference (tests/refmodel.h rm_mixer_fn): h [T × d] →
 * o [T × n] before Wo, returning n; r->user is the test's mspec. */
typedef rm_ref ref;
#define MS(r) ((const mspec *)(r)->user)

/* RoPE over a whole sequence [T × hd]: row t, head h rotated by angle
 * t·base^(−2i/dh) on the pairs (i, i + dh/2). */
static void rope_seq(double *x, int H, int dh, double base)
{
    int hd = H * dh, half = dh / 2;
    for (int t = 0; t < T; t++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < half; i++) {
                double th = t * pow(base, -2.0 * i / dh);
                double *p = x + (size_t)t * hd + h * dh, a = p[i], b = p[i + half];
                p[i] = a * cos(th) - b * sin(th);
                p[i + half] = a * sin(th) + b * cos(th);
            }
}

static void qkv(ref *r, int l, const double *h, int n, double **q, double **k, double **v)
{
    int d = MS(r)->d;
    double *out[3];
    const char *pn[3] = {"wq", "wk", "wv"};
    for (int p = 0; p < 3; p++) {
        char nm[64];
        snprintf(nm, sizeof nm, "layers.%%d.mixer.%s", pn[p]);
        double *w = kc_tensor(&r->st, nm, l);
        out[p] = malloc(sizeof(double) * T * n);
        kc_lin(h, T, d, w, NULL, n, out[p]);
        free(w);
    }
    *q = out[0]; *k = out[1]; *v = out[2];
}

/* The window mixer of layer l: o [T × hd] (before Wo), softmax over the
 * masked positions s ≤ t. */
static int ref_window(ref *r, int l, const double *h, double *o)
{
    const lspec *ls = &MS(r)->L[l];
    int H = ls->H, dh = ls->dh, hd = H * dh;
    double *q, *k, *v, span = (double)ls->w * ls->dil;
    qkv(r, l, h, hd, &q, &k, &v);
    if (ls->rope) { rope_seq(q, H, dh, 10000.0); rope_seq(k, H, dh, 10000.0); }
    double *p = malloc(sizeof(double) * T);
    for (int hh = 0; hh < H; hh++) {
        double slope = ls->rope ? 0.0 : pow(2.0, -8.0 * (hh + 1) / H);
        for (int t = 0; t < T; t++) {
            double mx = -INFINITY, sum = 0;
            for (int s = 0; s <= t; s++) {
                int vis = s < ls->g || ((t - s) % ls->dil == 0 && (t - s) / ls->dil < ls->w);
                if (!vis) { p[s] = -INFINITY; continue; }
                double sc = 0;
                for (int e = 0; e < dh; e++) sc += q[(size_t)t * hd + hh * dh + e] * k[(size_t)s * hd + hh * dh + e];
                p[s] = sc / sqrt((double)dh) - slope * fmin((double)(t - s), span);
                if (p[s] > mx) mx = p[s];
            }
            for (int s = 0; s <= t; s++) { p[s] = exp(p[s] - mx); sum += p[s]; }
            for (int j = 0; j < dh; j++) {
                double acc = 0;
                for (int s = 0; s <= t; s++) acc += p[s] * v[(size_t)s * hd + hh * dh + j];
                o[(size_t)t * hd + hh * dh + j] = acc / sum;
            }
        }
    }
    free(p); free(q); free(k); free(v);
    return hd;
}

/* The AFT mixers of layer l: o [T × d] = σ(q) ⊙ the explicit biased sums. */
static int ref_aft(ref *r, int l, const double *h, double *o)
{
    const lspec *ls = &MS(r)->L[l];
    int d = MS(r)->d, s = ls->w, conv = !strcmp(ls->mixer, "aft_conv"), H = conv ? ls->H : 1;
    double *q, *k, *v;
    qkv(r, l, h, d, &q, &k, &v);
    double *w = malloc(sizeof(double) * H * s);
    if (!conv) {
        double *pb = kc_tensor(&r->st, "layers.%d.mixer.pos_bias", l);
        memcpy(w, pb, sizeof(double) * s);
        free(pb);
    } else {
        double *kr = kc_tensor(&r->st, "layers.%d.mixer.kernel", l), *g = kc_tensor(&r->st, "layers.%d.mixer.kernel_gain", l),
               *b = kc_tensor(&r->st, "layers.%d.mixer.kernel_bias", l);
        for (int hh = 0; hh < H; hh++) {
            double mean = 0, var = 0;
            for (int j = 0; j < s; j++) mean += kr[hh * s + j] / s;
            for (int j = 0; j < s; j++) var += (kr[hh * s + j] - mean) * (kr[hh * s + j] - mean) / s;
            for (int j = 0; j < s; j++) w[hh * s + j] = g[hh] * (kr[hh * s + j] - mean) / sqrt(var + 1e-5) + b[hh];
        }
        free(kr); free(g); free(b);
    }
    for (int c = 0; c < d; c++) {
        const double *wh = w + (size_t)(c / (d / H)) * s;
        for (int t = 0; t < T; t++) {
            double mx = -INFINITY, num = 0, den = 0;
            for (int tp = 0; tp <= t; tp++) {
                double e = k[(size_t)tp * d + c] + (t - tp < s ? wh[t - tp] : 0.0);
                if (e > mx) mx = e;
            }
            for (int tp = 0; tp <= t; tp++) {
                double e = exp(k[(size_t)tp * d + c] + (t - tp < s ? wh[t - tp] : 0.0) - mx);
                num += e * v[(size_t)tp * d + c];
                den += e;
            }
            o[(size_t)t * d + c] = kc_sigm(q[(size_t)t * d + c]) * num / den;
        }
    }
    free(w); free(q); free(k); free(v);
    return d;
}

/* The kinds rm_ref_forward can run, by config name. */
static const rm_mixer_ref kinds[] = {
    {"window", ref_window}, {"aft_local", ref_aft}, {"aft_conv", ref_aft}, {NULL, NULL},
};

/* ---- helpers ---------------------------------------------------------------- */

static model *load_model(const char *name, const mspec *ms, uint64_t seed, const char *backend)
{
    char dir[512], err[512] = "";
    snprintf(dir, sizeof dir, "%s/%s", tmpdir, name);
    int rc = write_model(dir, ms, seed, NULL, NULL);
    CHECK(rc == 0, "write_model: %d", rc);
    model *m = NULL;
    rc = model_load(dir, backend, &m, err, sizeof err);
    CHECK(rc == 0, "model_load: %s", err);
    return m;
}

/* ---- cases -------------------------------------------------------------- */

static const mspec win_alibi = {32, 64, 2, {{"window", 4, 8, 16, 1, 0, 0}, {"window", 2, 16, 5, 3, 4, 0}}};
static const mspec win_rope = {32, 64, 2, {{"window", 2, 16, 24, 1, 2, 1}, {"window", 4, 8, 7, 2, 0, 1}}};
static const mspec aft_local2 = {32, 64, 2, {{"aft_local", 0, 0, 8, 0, 0, 0}, {"aft_local", 0, 0, 2, 0, 0, 0}}};
static const mspec aft_conv2 = {32, 64, 2, {{"aft_conv", 4, 0, 6, 0, 0, 0}, {"aft_conv", 1, 0, 33, 0, 0, 0}}};
/* every kind in one model, for the bit-identity cases */
static const mspec mixed = {32, 64, 4,
                            {{"window", 4, 8, 6, 2, 3, 0},
                             {"aft_local", 0, 0, 5, 0, 0, 0},
                             {"aft_conv", 2, 0, 4, 0, 0, 0},
                             {"window", 2, 16, 9, 1, 1, 1}}};
/* no RoPE: a position ≡ t modulo 12 (= lcm(w·dil, s−1 of both AFT layers))
 * past the global tokens and the windows continues identically */
static const mspec nope = {32, 64, 3,
                           {{"window", 4, 8, 6, 2, 3, 0},
                            {"aft_local", 0, 0, 5, 0, 0, 0},
                            {"aft_conv", 2, 0, 4, 0, 0, 0}}};

static void parallel_case(const char *name, const mspec *ms, uint64_t seed)
{
    model *m = load_model(name, ms, seed, "cpu");
    if (!m) return;
    char dir[600];
    snprintf(dir, sizeof dir, "%s/%s", tmpdir, name);
    rm_spec s = spec_of(ms);
    double worst = INFINITY, mean = 0;
    int worst_t = -1;
    rm_reference_error(m, dir, &s, ms, kinds, T, seed * 31, &worst, &worst_t, &mean);
    CHECK(worst <= 1e-4, "max relative logit error %.3g at position %d (tolerance 1e-4)", worst, worst_t);
    printf("NOTE %s: recurrent vs parallel form over %d tokens: max relative logit error %.2e (position %d), "
           "mean %.2e\n", name, T, worst, worst_t, mean);
    model_free(m);
}

static void parallel_window_alibi(void) { parallel_case("window_alibi", &win_alibi, 11); }
static void parallel_window_rope(void) { parallel_case("window_rope", &win_rope, 12); }
static void parallel_aft_local(void) { parallel_case("aft_local", &aft_local2, 13); }
static void parallel_aft_conv(void) { parallel_case("aft_conv", &aft_conv2, 14); }
static void parallel_mixed(void) { parallel_case("mixed", &mixed, 15); }

/* Chunked prefill equals one-token steps, bit for bit (tests/kindcheck.h). */
static void prefill_bitwise(void)
{
    model *m = load_model("prefill", &mixed, 21, "cpu");
    if (!m) return;
    kc_prefill_bitwise(m, V);
    model_free(m);
}

/* A batch equals its sessions stepped alone, bit for bit (tests/kindcheck.h). */
static void batched_equals_unbatched(void)
{
    model *m = load_model("batch", &mixed, 22, "cpu");
    if (!m) return;
    kc_batched_equals_unbatched(m, V);
    model_free(m);
}

/* Big enough that the CPU backend splits window_step by (run, head) and
 * aft_window_step by runs across threads: 1 and 3 threads agree. */
static void threads_equal_single(void)
{
    static const mspec big = {256, 256, 2, {{"window", 8, 32, 16, 2, 4, 1}, {"aft_conv", 8, 0, 8, 0, 0, 0}}};
    char dir[512];
    snprintf(dir, sizeof dir, "%s/threads", tmpdir);
    CHECK(write_model(dir, &big, 23, NULL, NULL) == 0, "write_model");
    kc_threads_agree(dir, V, 24);
}

static const model_state_region *find_region(const model_state_region *r, int n, int layer, const char *name)
{
    for (int i = 0; i < n; i++)
        if (r[i].layer == layer && !strcmp(r[i].name, name)) return &r[i];
    return NULL;
}

/* The typed regions, and the state blob through slot_read/write and the
 * state format: the int64 positions are integers that no float check sees. */
static void state_roundtrip(void)
{
    model *m = load_model("state", &nope, 24, "cpu");
    if (!m) return;
    model_state_region reg[16];
    int nr = model_state_regions(m, reg, 16);
    const model_state_region *ring = find_region(reg, nr, 0, "ring"), *glob = find_region(reg, nr, 0, "global"),
                             *acc = find_region(reg, nr, 1, "acc"), *aring = find_region(reg, nr, 2, "ring"),
                             *pos[3];
    for (int l = 0; l < 3; l++) pos[l] = find_region(reg, nr, l, "pos");
    CHECK(ring && ring->type == LIND_EL_F32 && ring->count == 2 * 12 * 32, "region ring: fp32, 2·w·dil·hd");
    CHECK(glob && glob->type == LIND_EL_F32 && glob->count == 2 * 3 * 32, "region global: fp32, 2·g·hd");
    CHECK(acc && acc->type == LIND_EL_F64 && acc->count == 3 * 32 && acc->offset % 8 == 0, "region acc: fp64, 3·d");
    CHECK(aring && aring->type == LIND_EL_F32 && aring->count == 2 * 32 * 3, "region ring (aft_conv): 2·d·(s−1)");
    for (int l = 0; l < 3; l++)
        CHECK(pos[l] && pos[l]->type == LIND_EL_I64 && pos[l]->elem_bytes == 8 && pos[l]->count == 1 &&
              pos[l]->offset % 8 == 0, "layer %d region pos: one int64", l);
    if (!ring || !glob || !acc || !aring || !pos[0] || !pos[1] || !pos[2]) { model_free(m); return; }
    size_t sb = model_state_bytes(m);
    size_t tiled = 0;
    for (int i = 0; i < nr; i++) tiled += reg[i].count * (size_t)reg[i].elem_bytes;
    CHECK(tiled == sb, "regions tile the state: %zu of %zu bytes", tiled, sb);

    enum { N1 = 29, N2 = 30 };
    int32_t tok[N1 + N2];
    kc_random_tokens(tok, N1 + N2, 77);
    CHECK(model_slots_reserve(m, 4) == 0, "reserve");
    int s0 = 0, s1 = 1, s2 = 2;
    for (int t = 0; t < N1; t++) model_step(m, &s0, &tok[t], 1, NULL);
    unsigned char *blob = malloc(sb), *b2 = malloc(sb), *b3 = malloc(sb);
    model_slot_read(m, 0, blob);
    for (int l = 0; l < 3; l++) {
        int64_t pv;
        memcpy(&pv, blob + pos[l]->offset, 8);
        CHECK(pv == N1, "layer %d: position after %d tokens is %lld", l, N1, (long long)pv);
    }
    /* slot 2: every position replaced by a value ≡ N1 (mod 12) whose bits are
     * a double NaN (0x7ff8… + r): read as unsigned, it is a position far
     * past the global tokens, where only t mod 12 matters without RoPE */
    uint64_t big = 0x7ff8000000000000ull;
    big += (uint64_t)((N1 + 12 - big % 12) % 12);
    double asd;
    memcpy(&asd, &big, 8);
    CHECK(isnan(asd) && big % 12 == N1 % 12, "setup: the position bits are a double NaN");
    model_slot_write(m, 1, blob);
    memcpy(b2, blob, sb);
    for (int l = 0; l < 3; l++) memcpy(b2 + pos[l]->offset, &big, 8);
    state_meta meta = {.tokens = N1, .pending_token = -1};
    sampler_params sp = sampler_defaults();
    sampler_init(&meta.sampler, &sp);
    uint8_t *enc = NULL;
    size_t enclen = 0;
    char err[256] = "";
    int rc = state_encode(m, &meta, b2, &enc, &enclen, err, sizeof err);
    CHECK(rc == 0, "state_encode refused an int64 region holding NaN bits: %s", err);
    state_meta back;
    if (rc == 0) {
        rc = state_decode(m, enc, enclen, &back, b3, err, sizeof err);
        CHECK(rc == 0 && !memcmp(b3, b2, sb), "state_decode: %s", err);
        free(enc);
    }
    model_slot_write(m, 2, b3);
    /* NaNs in the fp32 ring and the fp64 sums are refused, naming the region */
    const model_state_region *bad[2] = {ring, acc};
    for (int i = 0; i < 2; i++) {
        memcpy(b3, blob, sb);
        if (bad[i]->type == LIND_EL_F32) { float fn = NAN; memcpy(b3 + bad[i]->offset + 4 * 7, &fn, 4); }
        else { double dn = NAN; memcpy(b3 + bad[i]->offset + 8 * 5, &dn, 8); }
        rc = state_encode(m, &meta, b3, &enc, &enclen, err, sizeof err);
        CHECK(rc == STATE_E_NONFINITE && strstr(err, bad[i]->name), "NaN in %s: rc %d, \"%s\"", bad[i]->name, rc, err);
        if (rc == 0) free(enc);
    }

    float l0[V], l1[V], l2[V];
    int same1 = 1, same2 = 1;
    for (int t = N1; t < N1 + N2; t++) {
        model_step(m, &s0, &tok[t], 1, l0);
        model_step(m, &s1, &tok[t], 1, l1);
        model_step(m, &s2, &tok[t], 1, l2);
        same1 &= !memcmp(l0, l1, sizeof l0);
        same2 &= !memcmp(l0, l2, sizeof l0);
    }
    CHECK(same1, "a slot written from the read blob continues differently");
    CHECK(same2, "a position ≡ t (mod 12) past the windows continues differently");
    model_slot_read(m, 0, blob);
    model_slot_read(m, 1, b2);
    CHECK(!memcmp(blob, b2, sb), "states differ after continuing");
    /* a reset slot is the empty history: equal to a fresh model's first step */
    model_slot_reset(m, 3);
    int s3 = 3;
    model_step(m, &s3, &tok[0], 1, l1);
    model *fresh = load_model("state", &nope, 24, "cpu");
    if (fresh) {
        model_slots_reserve(fresh, 1);
        int z = 0;
        model_step(fresh, &z, &tok[0], 1, l2);
        CHECK(!memcmp(l1, l2, sizeof l1), "a reset slot is not the empty history");
        model_free(fresh);
    }
    free(blob); free(b2); free(b3);
    model_free(m);
}

/* Bad configs and tensors are refused with messages naming what is wrong. */
static void bad_input_refused(void)
{
    char dir[512], err[512];
    model *m = NULL;
    static const mspec win1 = {32, 64, 1, {{"window", 4, 8, 6, 1, 0, 0}}};
    static const mspec al1 = {32, 64, 1, {{"aft_local", 0, 0, 4, 0, 0, 0}}};
    static const mspec ac1 = {32, 64, 1, {{"aft_conv", 4, 0, 4, 0, 0, 0}}};
    struct { const mspec *m; const char *cfg, *skip, *want; } cases[] = {
        {&win1, "\"window\": 0", NULL, "window"},
        {&win1, "\"dilation\": 0", NULL, "dilation"},
        {&win1, "\"global\": -1", NULL, "global"},
        {&win1, "\"position\": \"sinusoid\"", NULL, "position"},
        {&win1, "\"d_head\": 300", NULL, "d_head"},
        {&win1, NULL, "layers.0.mixer.wk", "layers.0.mixer.wk"},
        {&al1, "\"window\": 1", NULL, "window"},
        {&al1, NULL, "layers.0.mixer.pos_bias", "layers.0.mixer.pos_bias"},
        {&ac1, "\"n_heads\": 5", NULL, "n_heads"},
        {&ac1, "\"kernel_size\": 1", NULL, "kernel_size"},
        {&ac1, NULL, "layers.0.mixer.kernel_gain", "layers.0.mixer.kernel_gain"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(dir, sizeof dir, "%s/bad%zu", tmpdir, i);
        CHECK(write_model(dir, cases[i].m, 17, cases[i].skip, cases[i].cfg) == 0, "write_model");
        err[0] = 0;
        int rc = model_load(dir, "cpu", &m, err, sizeof err);
        CHECK(rc < 0 && strstr(err, cases[i].want), "case %zu: rc %d, message \"%s\" does not name %s", i, rc, err,
              cases[i].want);
        if (rc == 0) model_free(m);
        m = NULL;
    }
}

/* The CUDA backend's code, run by the host harness (kernels/cuda/), has
 * window_step and aft_window_step: the mixed model loads there and matches
 * the CPU backend, stepped (three sessions in one batch, 40 tokens) and
 * prefilled (one run of 40 rows, chunks of 7), logits within 1e-4 relative
 * to the row's largest, float states within 1e-5 of each region's largest
 * value, the int64 positions equal. */
static void harness_matches_cpu(void)
{
    backend *be = NULL;
    char err[512] = "", dir[512];
    CHECK(backend_new("harness", NULL, &be, err, sizeof err) == 0, "harness backend: %s", err);
    if (!be) return;
    CHECK(backend_supports(be, BACKEND_OP_WINDOW_STEP) && backend_supports(be, BACKEND_OP_AFT_WINDOW_STEP),
          "the harness backend lacks window_step or aft_window_step");
    backend_free(be);
    snprintf(dir, sizeof dir, "%s/harness", tmpdir);
    CHECK(write_model(dir, &mixed, 25, NULL, NULL) == 0, "write_model");
    kc_harness_vs_cpu("harness", dir, V, 1e-4, 1e-5);
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/lind_mixwin.XXXXXX");
    if (!mkdtemp(tmpdir)) {
        printf("FAIL setup: mkdtemp\n");
        return 1;
    }
    RUN(parallel_window_alibi);
    RUN(parallel_window_rope);
    RUN(parallel_aft_local);
    RUN(parallel_aft_conv);
    RUN(parallel_mixed);
    RUN(prefill_bitwise);
    RUN(batched_equals_unbatched);
    RUN(threads_equal_single);
    RUN(state_roundtrip);
    RUN(bad_input_refused);
    RUN(harness_matches_cpu);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) printf("NOTE could not remove %s\n", tmpdir);
    return check_exit();
}
