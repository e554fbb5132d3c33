/* tests/test_core_mixers_linear.c — the linear-attention family's mixer kinds
 * beyond "linear" (recurrent/mixer_retnet.c, recurrent/mixer_performer.c)
 * end to end.
 *
 * A plain-C double-precision reference computes each model over a 300-token
 * sequence in PARALLEL (quadratic) form, never materializing a state:
 *   retnet     o_t = dh^−½ Σ_{j≤t} γ^{t−j} (q_t·k_j) v_j, group norm per
 *              head, SiLU(g) gate
 *   performer  o_t = Σ_{j≤t} (φ(q_t)·φ(k_j)) v_j / Σ_{j≤t} φ(q_t)·φ(k_j)
 *              with φ_f(x) = exp(ω_fᵀx̂ − ‖x̂‖²/2)/√m taken literally (no
 *              shift), x̂ = x·dh^−¼
 * The engine's recurrent logits (one model_step per token) must match at
 * every position within 1e-4 relative to the largest logit there. Also, per
 * kind: batched prefill (model_forward runs of 1, 3, 7, 64, 150 tokens and
 * two sessions' runs in one call) gives bit for bit the logits and states of
 * one-token steps; sessions stepped together equal the same sessions alone;
 * the state round-trips through model_slot_read/write and
 * state_encode/decode and continues identically; bad tensors are refused by
 * name; the CUDA backend's code under the host harness matches the CPU
 * backend. And RetNet's S: fp32 when every head decays within 16,384
 * tokens, fp64 otherwise, and a session of models/retnet saved with an fp64
 * S by an older lind resumes. */
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
#include "state/le.h"
#include "tests/check.h"
#include "tests/kindcheck.h"
#include "tests/refmodel.h"

#define T 300
#define V 256

static char tmpdir[256];
static int round_bf16;   /* write_model: matrices rounded to bf16-exact values */
static const char *cfg_extra;   /* write_model: appended to layer 0's keys */

typedef struct lspec {
    const char *mixer;   /* "retnet", "performer", "cosformer", "linformer" */
    int H, dh, m;        /* m: n_features (performer), horizon (cosformer), proj_len (linformer) */
    const char *mode;    /* cos_mode (cosformer) */
    int N;               /* max_len (linformer) */
} lspec;

typedef struct mspec {
    int d, ff, nl;
    lspec L[4];
} mspec;

/* The model as tests/refmodel.h writes it: each layer's keys, and the
 * weights' distributions beyond the defaults (projections to q, k, v, g at
 * twice 1/√d; RetNet's γ in [0.8, 0.995]; ω and the Linformer projections
 * at fixed scales). */
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
                                    "\"n_heads\": %d, \"d_head\": %d, \"d_ff\": %d", l->mixer, l->H, l->dh, m->ff);
        char *p = s.layer[i] + n;
        size_t left = sizeof s.layer[i] - n;
        if (!strcmp(l->mixer, "performer")) snprintf(p, left, ", \"n_features\": %d", l->m);
        if (!strcmp(l->mixer, "cosformer")) snprintf(p, left, ", \"horizon\": %d, \"cos_mode\": \"%s\"", l->m, l->mode);
        if (!strcmp(l->mixer, "linformer")) snprintf(p, left, ", \"proj_len\": %d, \"max_len\": %d", l->m, l->N);
    }
    return s;
}

static void dist(void *ctx, const rm_tensor *t, rm_dist *d)
{
    (void)ctx;
    if (t->part != RM_MIXER) return;
    if (!strcmp(t->rel, "wq") || !strcmp(t->rel, "wk") || !strcmp(t->rel, "wv") || !strcmp(t->rel, "wg")) d->a *= 2;
    else if (!strcmp(t->rel, "decay")) *d = (rm_dist){TESTMODEL_RANGE, 0.8, 0.995, 0};
    else if (!strcmp(t->rel, "omega")) d->a = 1.5;
    else if (!strncmp(t->rel, "proj_", 5)) d->a = 0.3;
}

/* config.json + model.safetensors with random weights; `bad` (may be NULL)
 * names a tensor of layer 0's mixer whose first value is set to `badval`. */
static int write_model(const char *dir, const mspec *m, uint64_t seed, const char *bad, float badval)
{
    char poison[96];
    if (bad) snprintf(poison, sizeof poison, "layers.0.mixer.%s", bad);
    rm_spec s = spec_of(m);
    rm_opts o = {.dist = dist, .bf16 = round_bf16, .poison = bad ? poison : NULL, .poison_val = badval,
                 .extra0 = cfg_extra};
    return rm_write(dir, &s, seed, &o);
}

/* ---- the parallel-form reference, in double ------------------------------- */

/* Each mixer kind's reference (tests/refmodel.h rm_mixer_fn): h [T × d] →
 * o [T × n] before Wo, returning n; r->user is the test's mspec. */
typedef rm_ref ref;
#define MS(r) ((const mspec *)(r)->user)

/* q, k, v (and more) of layer l: [T × hd] each, caller frees. */
static double *proj(ref *r, const char *name, int l, const double *h, int hd)
{
    double *w = kc_tensor(&r->st, name, l), *y = malloc(sizeof(double) * T * hd);
    kc_lin(h, T, MS(r)->d, w, NULL, hd, y);
    free(w);
    return y;
}

static int ref_retnet(ref *r, int l, const double *h, double *o)
{
    const lspec *ls = &MS(r)->L[l];
    int H = ls->H, dh = ls->dh, hd = H * dh;
    double *q = proj(r, "layers.%d.mixer.wq", l, h, hd), *k = proj(r, "layers.%d.mixer.wk", l, h, hd);
    double *v = proj(r, "layers.%d.mixer.wv", l, h, hd), *g = proj(r, "layers.%d.mixer.wg", l, h, hd);
    double *gam = kc_tensor(&r->st, "layers.%d.mixer.decay", l), *gw = kc_tensor(&r->st, "layers.%d.mixer.gn_weight", l),
           *gb = kc_tensor(&r->st, "layers.%d.mixer.gn_bias", l);
    for (int hh = 0; hh < H; hh++)
        for (int t = 0; t < T; t++) {
            double y[1024] = {0}, mean = 0, var = 0;
            for (int j = 0; j <= t; j++) {
                double a = 0;
                for (int e = 0; e < dh; e++) a += q[(size_t)t * hd + hh * dh + e] * k[(size_t)j * hd + hh * dh + e];
                a *= pow(gam[hh], t - j) / sqrt((double)dh);
                for (int e = 0; e < dh; e++) y[e] += a * v[(size_t)j * hd + hh * dh + e];
            }
            for (int e = 0; e < dh; e++) mean += y[e] / dh;
            for (int e = 0; e < dh; e++) var += (y[e] - mean) * (y[e] - mean) / dh;
            for (int e = 0; e < dh; e++) {
                size_t c = (size_t)hh * dh + e;
                double gg = g[(size_t)t * hd + c];
                o[(size_t)t * hd + c] = ((y[e] - mean) / sqrt(var + 1e-5) * gw[c] + gb[c]) * gg / (1 + exp(-gg));
            }
        }
    free(q); free(k); free(v); free(g); free(gam); free(gw); free(gb);
    return hd;
}

/* φ(x) for one head, literally: exp(ωᵀx̂ − ‖x̂‖²/2)/√m. */
static void favor(const double *x, const double *om, int dh, int m, double *phi)
{
    double s = pow((double)dh, -0.25), n2 = 0;
    for (int i = 0; i < dh; i++) n2 += x[i] * s * x[i] * s;
    for (int f = 0; f < m; f++) {
        double dot = 0;
        for (int i = 0; i < dh; i++) dot += om[(size_t)f * dh + i] * x[i] * s;
        phi[f] = exp(dot - n2 / 2) / sqrt((double)m);
    }
}

static int ref_performer(ref *r, int l, const double *h, double *o)
{
    const lspec *ls = &MS(r)->L[l];
    int H = ls->H, dh = ls->dh, hd = H * dh, m = ls->m;
    double *q = proj(r, "layers.%d.mixer.wq", l, h, hd), *k = proj(r, "layers.%d.mixer.wk", l, h, hd);
    double *v = proj(r, "layers.%d.mixer.wv", l, h, hd), *om = kc_tensor(&r->st, "layers.%d.mixer.omega", l);
    double *pq = malloc(sizeof(double) * T * H * m), *pk = malloc(sizeof(double) * T * H * m);
    for (int t = 0; t < T; t++)
        for (int hh = 0; hh < H; hh++) {
            favor(q + (size_t)t * hd + hh * dh, om, dh, m, pq + ((size_t)t * H + hh) * m);
            favor(k + (size_t)t * hd + hh * dh, om, dh, m, pk + ((size_t)t * H + hh) * m);
        }
    for (int hh = 0; hh < H; hh++)
        for (int t = 0; t < T; t++) {
            double num[1024] = {0}, den = 0;
            for (int j = 0; j <= t; j++) {
                double a = 0;
                for (int f = 0; f < m; f++) a += pq[((size_t)t * H + hh) * m + f] * pk[((size_t)j * H + hh) * m + f];
                den += a;
                for (int e = 0; e < dh; e++) num[e] += a * v[(size_t)j * hd + hh * dh + e];
            }
            for (int e = 0; e < dh; e++) o[(size_t)t * hd + hh * dh + e] = num[e] / den;
        }
    free(q); free(k); free(v); free(om); free(pq); free(pk);
    return hd;
}

/* cosFormer, quadratic: the weight w(t − j) taken literally. */
static int ref_cosformer(ref *r, int l, const double *h, double *o)
{
    const lspec *ls = &MS(r)->L[l];
    int H = ls->H, dh = ls->dh, hd = H * dh, M = ls->m, periodic = !strcmp(ls->mode, "periodic");
    double *q = proj(r, "layers.%d.mixer.wq", l, h, hd), *k = proj(r, "layers.%d.mixer.wk", l, h, hd);
    double *v = proj(r, "layers.%d.mixer.wv", l, h, hd);
    const double pi = 3.14159265358979323846;
    for (int hh = 0; hh < H; hh++)
        for (int t = 0; t < T; t++) {
            double num[1024] = {0}, den = 0;
            for (int j = 0; j <= t; j++) {
                double a = 0, w = periodic ? 1 + cos(pi * (t - j) / M) : cos(pi / 2 * (t - j) / M);
                for (int e = 0; e < dh; e++)
                    a += fmax(q[(size_t)t * hd + hh * dh + e], 0) * fmax(k[(size_t)j * hd + hh * dh + e], 0);
                a *= w;
                den += a;
                for (int e = 0; e < dh; e++) num[e] += a * v[(size_t)j * hd + hh * dh + e];
            }
            for (int e = 0; e < dh; e++) o[(size_t)t * hd + hh * dh + e] = num[e] / (den + 1e-6);
        }
    free(q); free(k); free(v);
    return hd;
}

/* Causal Linformer through the masked attention matrix: s_t = Σ_{j≤t}
 * (q_t·k_j/√dh) E[j] (never forming K̄), V̄_t = Σ_{j≤t} F[j] v_jᵀ. */
static int ref_linformer(ref *r, int l, const double *h, double *o)
{
    const lspec *ls = &MS(r)->L[l];
    int H = ls->H, dh = ls->dh, hd = H * dh, kp = ls->m;
    double *q = proj(r, "layers.%d.mixer.wq", l, h, hd), *k = proj(r, "layers.%d.mixer.wk", l, h, hd);
    double *v = proj(r, "layers.%d.mixer.wv", l, h, hd);
    double *E = kc_tensor(&r->st, "layers.%d.mixer.proj_k", l), *F = kc_tensor(&r->st, "layers.%d.mixer.proj_v", l);
    for (int hh = 0; hh < H; hh++)
        for (int t = 0; t < T; t++) {
            double s[256] = {0}, a[256], mx = -1e308, sum = 0;
            for (int j = 0; j <= t; j++) {
                double qk = 0;
                for (int e = 0; e < dh; e++) qk += q[(size_t)t * hd + hh * dh + e] * k[(size_t)j * hd + hh * dh + e];
                for (int p = 0; p < kp; p++) s[p] += qk / sqrt((double)dh) * E[(size_t)j * kp + p];
            }
            for (int p = 0; p < kp; p++) mx = fmax(mx, s[p]);
            for (int p = 0; p < kp; p++) sum += a[p] = exp(s[p] - mx);
            for (int e = 0; e < dh; e++) {
                double acc = 0;
                for (int j = 0; j <= t; j++) {
                    double w = 0;
                    for (int p = 0; p < kp; p++) w += a[p] * F[(size_t)j * kp + p];
                    acc += w * v[(size_t)j * hd + hh * dh + e];
                }
                o[(size_t)t * hd + hh * dh + e] = acc / sum;
            }
        }
    free(q); free(k); free(v); free(E); free(F);
    return hd;
}

/* The kinds rm_ref_forward can run, by config name. */
static const rm_mixer_ref kinds[] = {
    {"retnet", ref_retnet}, {"performer", ref_performer}, {"cosformer", ref_cosformer}, {"linformer", ref_linformer},
    {NULL, NULL},
};

/* ---- helpers ---------------------------------------------------------------- */

static model *load_model(const char *name, const mspec *ms, uint64_t seed, const char *backend)
{
    char dir[512], err[512] = "";
    snprintf(dir, sizeof dir, "%s/%s", tmpdir, name);
    int rc = write_model(dir, ms, seed, NULL, 0);
    CHECK(rc == 0, "write_model: %d", rc);
    model *m = NULL;
    rc = model_load(dir, backend, &m, err, sizeof err);
    CHECK(rc == 0, "model_load: %s", err);
    return m;
}

/* Per kind: two layers of different shapes (one head of 24 and heads of 8). */
static const mspec retnet2 = {32, 64, 2, {{"retnet", 2, 16, 0, NULL, 0}, {"retnet", 4, 8, 0, NULL, 0}}};
static const mspec performer2 = {32, 64, 2, {{"performer", 2, 16, 24, NULL, 0}, {"performer", 4, 8, 8, NULL, 0}}};
/* the horizon form within its horizon (300 tokens of 400; the oldest token's
 * weight cos(π/2·299/400) = 0.38); the periodic form past many periods */
static const mspec cos_horizon = {32, 64, 2, {{"cosformer", 2, 16, 400, "horizon", 0}, {"cosformer", 4, 8, 400, "horizon", 0}}};
static const mspec linformer2 = {32, 64, 2, {{"linformer", 2, 16, 12, NULL, 320}, {"linformer", 4, 8, 40, NULL, 300}}};
static const mspec cos_periodic = {32, 64, 2, {{"cosformer", 2, 16, 50, "periodic", 0}, {"cosformer", 4, 8, 37, "periodic", 0}}};

/* ---- cases -------------------------------------------------------------- */

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

/* Chunked prefill equals one-token steps, bit for bit (tests/kindcheck.h). */
static void prefill_case(const char *name, const mspec *ms, uint64_t seed)
{
    model *m = load_model(name, ms, seed, "cpu");
    if (!m) return;
    kc_prefill_bitwise(m, V);
    model_free(m);
}

/* A batch equals its sessions stepped alone, bit for bit (tests/kindcheck.h). */
static void batch_case(const char *name, const mspec *ms, uint64_t seed)
{
    model *m = load_model(name, ms, seed, "cpu");
    if (!m) return;
    kc_batched_equals_unbatched(m, V);
    model_free(m);
}

/* The state blob through model_slot_read/write and state_encode/decode: the
 * copy continues identically; a NaN in the matrix state is refused naming it; a reset slot
 * is the empty history. */
static void state_case(const char *name, const mspec *ms, uint64_t seed)
{
    model *m = load_model(name, ms, seed, "cpu");
    if (!m) return;
    model_state_region reg[16];
    int nr = model_state_regions(m, reg, 16);
    const model_state_region *S = NULL;
    size_t tiled = 0, sb = model_state_bytes(m);
    for (int i = 0; i < nr; i++) {
        tiled += reg[i].count * reg[i].elem_bytes;
        if (!S && reg[i].layer == 0 && (reg[i].type == LIND_EL_F64 || reg[i].type == LIND_EL_F32)) S = &reg[i];
    }
    CHECK(S && S->offset % S->elem_bytes == 0, "layer 0 has an aligned float matrix-state region");
    CHECK(tiled == sb, "regions tile the state: %zu of %zu bytes", tiled, sb);
    if (!S) { model_free(m); return; }
    enum { N1 = 23, N2 = 17 };
    int32_t tok[N1 + N2];
    kc_random_tokens(tok, N1 + N2, 77);
    CHECK(model_slots_reserve(m, 4) == 0, "reserve");
    int s0 = 0, s1 = 1, s2 = 2;
    for (int t = 0; t < N1; t++) model_step(m, &s0, &tok[t], 1, NULL);
    unsigned char *blob = malloc(sb), *b2 = malloc(sb), *b3 = malloc(sb);
    model_slot_read(m, 0, blob);
    model_slot_write(m, 1, blob);
    state_meta meta = {.tokens = N1, .pending_token = -1};
    sampler_params sp = sampler_defaults();
    sampler_init(&meta.sampler, &sp);
    uint8_t *enc = NULL;
    size_t enclen = 0;
    char err[256] = "";
    int rc = state_encode(m, &meta, blob, &enc, &enclen, err, sizeof err);
    CHECK(rc == 0, "state_encode: %s", err);
    state_meta back;
    if (rc == 0) {
        rc = state_decode(m, enc, enclen, &back, b2, err, sizeof err);
        CHECK(rc == 0 && !memcmp(b2, blob, sb), "state_decode: %s", err);
        free(enc);
    }
    model_slot_write(m, 2, b2);
    memcpy(b3, blob, sb);
    double dn = NAN;
    float fn = NAN;
    if (S->elem_bytes == 8) memcpy(b3 + S->offset + 8 * 5, &dn, 8);
    else memcpy(b3 + S->offset + 4 * 5, &fn, 4);
    rc = state_encode(m, &meta, b3, &enc, &enclen, err, sizeof err);
    CHECK(rc == STATE_E_NONFINITE && strstr(err, S->name), "NaN in %s: rc %d, \"%s\"", S->name, rc, err);
    if (rc == 0) free(enc);
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
    CHECK(same2, "a slot written from the decoded state continues differently");
    model_slot_read(m, 0, blob);
    model_slot_read(m, 1, b2);
    model_slot_read(m, 2, b3);
    CHECK(!memcmp(blob, b2, sb) && !memcmp(blob, b3, sb), "states differ after continuing");
    model_slot_reset(m, 3);
    int s3 = 3;
    model_step(m, &s3, &tok[0], 1, l1);
    model *fresh = load_model(name, ms, seed, "cpu");
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

/* A bad tensor value is refused naming the tensor. */
static void refuse_case(const char *name, const mspec *ms, const char *tensor, float val, const char *want)
{
    char dir[512], err[512] = "";
    snprintf(dir, sizeof dir, "%s/%s", tmpdir, name);
    CHECK(write_model(dir, ms, 3, tensor, val) == 0, "write_model");
    model *m = NULL;
    int rc = model_load(dir, "cpu", &m, err, sizeof err);
    CHECK(rc < 0 && strstr(err, want), "%s = %g: rc %d, \"%s\" (want \"%s\")", tensor, (double)val, rc, err, want);
    model_free(m);
}

/* A model big enough that the CPU backend splits the op by (run, head) across
 * threads: 1 and 3 threads agree bit for bit (32 sessions, one-token steps
 * and runs of 3). */
static void threads_case(const char *name, const mspec *ms, uint64_t seed)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", tmpdir, name);
    CHECK(write_model(dir, ms, seed, NULL, 0) == 0, "write_model");
    kc_threads_agree(dir, V, 8);
}

static void threads_all_kinds(void)
{
    static const mspec ms[4] = {
        {128, 128, 1, {{"retnet", 4, 32, 0, NULL, 0}}},
        {128, 128, 1, {{"performer", 4, 32, 48, NULL, 0}}},
        {128, 128, 1, {{"cosformer", 4, 32, 40, "periodic", 0}}},
        {128, 128, 1, {{"linformer", 4, 32, 16, NULL, 64}}},
    };
    for (int i = 0; i < 4; i++) {
        char nm[32];
        snprintf(nm, sizeof nm, "threads%d", i);
        threads_case(nm, &ms[i], 60 + (uint64_t)i);
    }
}

/* Matrix weights held as bf16 (the kinds' half paths: kind_matrix3, and the
 * performer's zero-padded Wv and Wo built from the half data): on weights
 * that are bf16-exact, the bf16-held model gives bit for bit the fp32
 * model's logits (the half GEMM equals the fp32 one on widened weights). */
static void bf16_all_kinds(void)
{
    const mspec *ms[4] = {&retnet2, &performer2, &cos_periodic, &linformer2};
    round_bf16 = 1;
    for (int k = 0; k < 4; k++) {
        char dir[512], err[512] = "";
        snprintf(dir, sizeof dir, "%s/bf16_%d", tmpdir, k);
        CHECK(write_model(dir, ms[k], 70 + (uint64_t)k, NULL, 0) == 0, "write_model");
        model *m[2] = {0};
        model_opts o[2] = {{.backend = "cpu", .weights = LIND_DT_F32}, {.backend = "cpu", .weights = LIND_DT_BF16}};
        for (int i = 0; i < 2; i++) CHECK(model_load_opts(dir, &o[i], &m[i], err, sizeof err) == 0, "load: %s", err);
        if (m[0] && m[1]) {
            CHECK(model_weights_dtype(m[1]) == LIND_DT_BF16, "%s: weights held as %s", ms[k]->L[0].mixer,
                  lind_dtype_name(model_weights_dtype(m[1])));
            int32_t tok[30];
            kc_random_tokens(tok, 30, 9);
            float a[V], b[V];
            int s = 0, same = 1;
            for (int i = 0; i < 2; i++) model_slots_reserve(m[i], 1);
            for (int t = 0; t < 30; t++) {
                model_step(m[0], &s, &tok[t], 1, a);
                model_step(m[1], &s, &tok[t], 1, b);
                same &= !memcmp(a, b, sizeof a);
            }
            CHECK(same, "%s: bf16-held weights give other logits than fp32", ms[k]->L[0].mixer);
        }
        model_free(m[0]);
        model_free(m[1]);
    }
    round_bf16 = 0;
}

/* Bad configuration values are refused naming the key. */
static void bad_config_refused(void)
{
    static const struct { const mspec *ms; const char *extra, *want; } cases[] = {
        {&performer2, "\"n_features\": 8", "n_features"},
        {&cos_periodic, "\"cos_mode\": \"sliding\"", "cos_mode"},
        {&cos_periodic, "\"horizon\": 0", "horizon"},
        {&linformer2, "\"proj_len\": 513", "proj_len"},
        {&linformer2, "\"max_len\": 0", "max_len"},
        {&retnet2, "\"group_norm_eps\": -1", "group_norm_eps"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char dir[512], err[512] = "";
        snprintf(dir, sizeof dir, "%s/badcfg%zu", tmpdir, i);
        cfg_extra = cases[i].extra;
        CHECK(write_model(dir, cases[i].ms, 3, NULL, 0) == 0, "write_model");
        cfg_extra = NULL;
        model *m = NULL;
        int rc = model_load(dir, "cpu", &m, err, sizeof err);
        CHECK(rc < 0 && strstr(err, cases[i].want), "%s: rc %d, \"%s\"", cases[i].extra, rc, err);
        printf("NOTE %s: %s\n", cases[i].extra, err);
        model_free(m);
    }
}

/* The CUDA backend's code under the host harness matches the CPU backend
 * (tests/kindcheck.h): logits within 1e-4 of the row's largest, final
 * states within 1e-5 of each region's largest value. */
static void harness_case(const char *name, const mspec *ms, uint64_t seed)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", tmpdir, name);
    CHECK(write_model(dir, ms, seed, NULL, 0) == 0, "write_model");
    kc_harness_vs_cpu(name, dir, V, 1e-4, 1e-5);
}

/* The element type of layer L's region `name` (-1: none). */
static int region_type(const model *m, int L, const char *name)
{
    model_state_region r[16];
    int n = model_state_regions(m, r, 16);
    for (int i = 0; i < n && i < 16; i++)
        if (r[i].layer == L && !strcmp(r[i].name, name)) return r[i].type;
    return -1;
}

/* RetNet's S is float when every head of the layer forgets within 16,384
 * tokens, 1/(1 − γ) (recurrent/mixer_retnet.c): retnet2's γ are in [0.8,
 * 0.995]. Layer 0's first γ set to 1 − 2^-14 (exactly that memory) keeps it
 * float; to 1 − 2^-15 or 1 (no decay) makes layer 0's S double beside layer
 * 1's float one, and that model's prefill is bit-identical to stepping, a
 * batch equals its sessions alone, and the harness matches the CPU. */
static void retnet_state_precision(void)
{
    static const struct { float g0; int f64; } cases[] = {
        {-1.0f, 0}, {1.0f - 0x1p-14f, 0}, {1.0f - 0x1p-15f, 1}, {1.0f, 1},
    };
    const size_t s0 = 2 * 16 * 16, s1 = 4 * 8 * 8;   /* S elements of layers 0 and 1 */
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char dir[512], nm[64], err[512] = "";
        snprintf(nm, sizeof nm, "retnet_prec%zu", i);
        snprintf(dir, sizeof dir, "%s/%s", tmpdir, nm);
        int poisoned = cases[i].g0 > 0;
        CHECK(write_model(dir, &retnet2, 19, poisoned ? "decay" : NULL, cases[i].g0) == 0, "write_model");
        model *m = NULL;
        CHECK(model_load(dir, "cpu", &m, err, sizeof err) == 0, "model_load: %s", err);
        if (!m) continue;
        int want0 = cases[i].f64 ? LIND_EL_F64 : LIND_EL_F32;
        size_t want_bytes = s0 * (cases[i].f64 ? 8 : 4) + s1 * 4;
        CHECK(region_type(m, 0, "S") == want0 && region_type(m, 1, "S") == LIND_EL_F32 &&
                  model_state_bytes(m) == want_bytes,
              "γ[0] = %.9g: S types %d, %d and %zu state bytes, want %d, %d and %zu", (double)cases[i].g0,
              region_type(m, 0, "S"), region_type(m, 1, "S"), model_state_bytes(m), want0, LIND_EL_F32, want_bytes);
        if (cases[i].f64 && cases[i].g0 == 1.0f) {
            kc_prefill_bitwise(m, V);
            model_free(m);
            m = NULL;
            CHECK(model_load(dir, "cpu", &m, err, sizeof err) == 0, "model_load: %s", err);   /* fresh slots */
            if (m) kc_batched_equals_unbatched(m, V);
        }
        model_free(m);
        if (cases[i].f64 && cases[i].g0 == 1.0f) kc_harness_vs_cpu(nm, dir, V, 1e-4, 1e-5);
    }
}

/* A session of models/retnet saved by lind 6a0cd67, whose retention state
 * was fp64 (tests/fixtures/retnet_fp64_state): it decodes into today's
 * layout, each S element that double rounded once and every other byte as
 * saved; resumed, its logits for the next 32 tokens match what 6a0cd67 gave
 * continuing the same session; its next save is in the new layout and reads
 * back unchanged. */
static void retnet_fp64_state_resumes(void)
{
    const char *fdir = "tests/fixtures/retnet_fp64_state";
    enum { N = 288, SAVED = 256 };
    char p[600], err[512] = "";
    size_t len = 0, tl = 0, ll = 0;
    snprintf(p, sizeof p, "%s/retnet.state", fdir);
    uint8_t *blob = (uint8_t *)kc_read(p, &len);
    snprintf(p, sizeof p, "%s/tokens.i32", fdir);
    int32_t *tok = (int32_t *)kc_read(p, &tl);
    snprintf(p, sizeof p, "%s/logits.f32", fdir);
    float *ref = (float *)kc_read(p, &ll);
    model *m = NULL;
    int rc = model_load("models/retnet", "cpu", &m, err, sizeof err);
    CHECK(rc == 0, "model_load models/retnet: %s", err);
    CHECK(blob && len > 64 && tok && tl == N * 4 && ref && ll == (size_t)(N - SAVED) * V * 4, "fixture files in %s",
          fdir);
    if (!m || !blob || len <= 64 || !tok || tl != N * 4 || !ref || ll != (size_t)(N - SAVED) * V * 4) {
        free(blob); free(tok); free(ref); model_free(m);
        return;
    }
    CHECK(model_fingerprint(m) == le_get64(blob + 24), "models/retnet is not the model the fixture was saved from");
    size_t n = model_state_bytes(m);
    uint8_t *raw = malloc(n), *back = malloc(n), *b2 = NULL;
    state_meta meta;
    rc = state_decode(m, blob, len, &meta, raw, err, sizeof err);
    CHECK(rc == 0 && meta.tokens == SAVED, "decode the fp64 state: %d %s", rc, err);
    if (rc == 0) {
        /* the blob's table (48-byte entries before the raw state) against the model's regions */
        uint32_t hdr = le_get32(blob + 16), bnr = le_get32(blob + 20);
        model_state_region mr[16];
        int mnr = model_state_regions(m, mr, 16), narrowed = 0, same = mnr == (int)bnr && mnr <= 16;
        for (int i = 0; same && i < mnr; i++) {
            const uint8_t *e = NULL;
            for (uint32_t q = 0; q < bnr && !e; q++) {
                const uint8_t *x = blob + hdr - 48 * (bnr - q);
                if ((int32_t)le_get32(x) == mr[i].layer && !strncmp((const char *)x + 8, mr[i].name, 16)) e = x;
            }
            if (!e || le_get64(e + 32) != mr[i].count) { same = 0; break; }
            const uint8_t *src = blob + hdr + le_get64(e + 24);
            if (le_get32(e + 40) == LIND_EL_F64 && mr[i].type == LIND_EL_F32) {
                narrowed++;
                for (size_t k = 0; k < mr[i].count; k++) {
                    double dv;
                    float fv;
                    memcpy(&dv, src + 8 * k, 8);
                    memcpy(&fv, raw + mr[i].offset + 4 * k, 4);
                    same &= fv == (float)dv;
                }
            } else {
                same &= le_get32(e + 4) == (uint32_t)mr[i].elem_bytes &&
                        !memcmp(src, raw + mr[i].offset, mr[i].count * (size_t)mr[i].elem_bytes);
            }
        }
        CHECK(same && narrowed == 4, "the decoded state is not the saved one in this layout (%d regions narrowed, "
              "want 4: S of each layer)", narrowed);
        int slot = 0;
        float *lg = malloc(sizeof(float) * V);
        double worst = 0;
        rc = lg && model_slots_reserve(m, 1) == 0 && model_slot_write(m, 0, raw) == 0 ? 0 : -1;
        for (int t = SAVED; t < N && rc == 0; t++) {
            rc = model_step(m, &slot, &tok[t], 1, lg);
            const float *r = ref + (size_t)(t - SAVED) * V;
            double big = 0, d = 0;
            for (int k = 0; k < V; k++) {
                big = fmax(big, fabs(r[k]));
                d = fmax(d, fabs((double)lg[k] - r[k]));
            }
            if (!(d / big <= worst)) worst = d / big;
        }
        printf("NOTE models/retnet resumed from a state saved with fp64 S at token %d: logits for tokens %d..%d "
               "within %.3g of the fp64 build's (relative to each row's largest)\n", SAVED, SAVED, N - 1, worst);
        CHECK(rc == 0 && worst <= 1e-4, "resumed session: %d, relative error %.3g > 1e-4", rc, worst);
        free(lg);
        size_t l2 = 0;
        rc = state_encode(m, &meta, raw, &b2, &l2, err, sizeof err);
        CHECK(rc == 0 && l2 < len && state_decode(m, b2, l2, &meta, back, err, sizeof err) == 0 &&
                  !memcmp(raw, back, n),
              "re-encoded in the new layout: %d, %zu bytes (was %zu): %s", rc, l2, len, err);
    }
    free(raw); free(back); free(b2); free(blob); free(tok); free(ref);
    model_free(m);
}

static void retnet_parallel(void) { parallel_case("retnet_par", &retnet2, 11); }
static void retnet_prefill(void) { prefill_case("retnet_pre", &retnet2, 13); }
static void retnet_batch(void) { batch_case("retnet_batch", &retnet2, 14); }
static void retnet_state(void) { state_case("retnet_state", &retnet2, 16); }
static void retnet_refuse(void) { refuse_case("retnet_bad", &retnet2, "decay", 1.5f, "layers.0.mixer.decay"); }
static void retnet_harness(void) { harness_case("retnet_harness", &retnet2, 18); }
static void performer_parallel(void) { parallel_case("perf_par", &performer2, 21); }
static void performer_prefill(void) { prefill_case("perf_pre", &performer2, 23); }
static void performer_batch(void) { batch_case("perf_batch", &performer2, 24); }
static void performer_state(void) { state_case("perf_state", &performer2, 26); }
static void performer_refuse(void) { refuse_case("perf_bad", &performer2, "omega", INFINITY, "layers.0.mixer.omega"); }
static void performer_harness(void) { harness_case("perf_harness", &performer2, 28); }

static void cosformer_parallel(void) { parallel_case("cos_par", &cos_horizon, 31); }
static void cosformer_periodic_parallel(void) { parallel_case("cos_per", &cos_periodic, 32); }
static void cosformer_prefill(void) { prefill_case("cos_pre", &cos_periodic, 33); }
static void cosformer_batch(void) { batch_case("cos_batch", &cos_periodic, 34); }
static void cosformer_state(void) { state_case("cos_state", &cos_horizon, 36); }
static void cosformer_harness(void) { harness_case("cos_harness", &cos_periodic, 38); }

/* The horizon form refuses to pass position M with -EOVERFLOW, leaving every
 * slot of the refused call as it was; the pos region counts tokens. */
static void horizon_refused(const char *name, const mspec *ms)
{
    const char *bk[2] = {"cpu", "harness"};
    for (int k = 0; k < 2; k++) {
        char nm[64];
        snprintf(nm, sizeof nm, "%s_%s", name, bk[k]);
        model *m = load_model(nm, ms, 40, bk[k]);
        if (!m) return;
        size_t sb = model_state_bytes(m);
        model_state_region reg[8];
        int nr = model_state_regions(m, reg, 8);
        const model_state_region *pos = NULL;
        for (int i = 0; i < nr; i++)
            if (!strcmp(reg[i].name, "pos")) pos = &reg[i];
        CHECK(pos && pos->type == LIND_EL_I64 && pos->count == 1, "%s: region pos: one int64", bk[k]);
        CHECK(model_max_tokens(m) == 20, "%s: model_max_tokens %lld, want 20", bk[k], model_max_tokens(m));
        int32_t tok[25];
        kc_random_tokens(tok, 25, 5);
        CHECK(model_slots_reserve(m, 3) == 0, "reserve");
        int s0 = 0, rc = 0;
        for (int t = 0; t < 20; t++) rc |= model_step(m, &s0, &tok[t], 1, NULL);
        CHECK(rc == 0, "%s: 20 tokens within the horizon of 20: rc %d", bk[k], rc);
        unsigned char *a = malloc(sb), *b = malloc(sb), *c1 = malloc(sb), *c2 = malloc(sb);
        model_slot_read(m, 0, a);
        int64_t pv = -1;
        if (pos) memcpy(&pv, a + pos->offset, 8);
        CHECK(pv == 20, "%s: pos after 20 tokens is %lld", bk[k], (long long)pv);
        rc = model_step(m, &s0, &tok[20], 1, NULL);
        CHECK(rc == -EOVERFLOW, "%s: the 21st token: rc %d, want -EOVERFLOW", bk[k], rc);
        model_slot_read(m, 0, b);
        CHECK(!memcmp(a, b, sb), "%s: a refused step changed the state", bk[k]);
        /* a run of 3 on slot 1 with the full slot 0 in the same call: refused whole */
        int sl[4] = {1, 1, 1, 0};
        model_slot_read(m, 1, c1);
        rc = model_forward(m, sl, tok, 4, NULL, 0, NULL);
        model_slot_read(m, 1, c2);
        CHECK(rc == -EOVERFLOW && !memcmp(c1, c2, sb), "%s: a call with one session past the horizon: rc %d, other "
              "session %s", bk[k], rc, memcmp(c1, c2, sb) ? "changed" : "unchanged");
        /* a prefill run crossing the horizon is refused too; one that ends on it is not */
        int sl25[25];
        for (int i = 0; i < 25; i++) sl25[i] = 2;
        rc = model_forward(m, sl25, tok, 21, NULL, 0, NULL);
        CHECK(rc == -EOVERFLOW, "%s: a prefill run of 21: rc %d", bk[k], rc);
        rc = model_forward(m, sl25, tok, 20, NULL, 0, NULL);
        CHECK(rc == 0, "%s: a prefill run of 20: rc %d", bk[k], rc);
        model_slot_read(m, 2, c2);
        CHECK(!memcmp(a, c2, sb), "%s: a prefill of 20 differs from 20 steps", bk[k]);
        /* a negative position is a damaged state: refused with -EINVAL */
        if (pos) {
            int64_t neg = -5;
            memcpy(b, a, sb);
            memcpy(b + pos->offset, &neg, 8);
            model_slot_write(m, 1, b);
            int s1 = 1;
            rc = model_step(m, &s1, &tok[0], 1, NULL);
            CHECK(rc == -EINVAL, "%s: a negative position: rc %d, want -EINVAL", bk[k], rc);
        }
        free(a); free(b); free(c1); free(c2);
        model_free(m);
    }
}

/* The periodic form reads any position modulo 2M: a state whose position is
 * moved by a multiple of 2M (to 4·10^10 + t, or below zero) continues bit for
 * bit like the original, on the CPU backend and the harness. */
static void cosformer_periodic_any_position(void)
{
    static const mspec ms = {32, 64, 1, {{"cosformer", 2, 16, 20, "periodic", 0}}};
    const char *bk[2] = {"cpu", "harness"};
    for (int k = 0; k < 2; k++) {
        char nm[64];
        snprintf(nm, sizeof nm, "cos_anypos_%s", bk[k]);
        model *m = load_model(nm, &ms, 41, bk[k]);
        if (!m) return;
        size_t sb = model_state_bytes(m);
        model_state_region reg[8];
        int nr = model_state_regions(m, reg, 8);
        const model_state_region *pos = NULL;
        for (int i = 0; i < nr; i++)
            if (!strcmp(reg[i].name, "pos")) pos = &reg[i];
        CHECK(pos != NULL, "region pos");
        if (!pos) { model_free(m); return; }
        int32_t tok[60];
        kc_random_tokens(tok, 60, 6);
        CHECK(model_slots_reserve(m, 3) == 0, "reserve");
        int s0 = 0, s1 = 1, s2 = 2;
        for (int t = 0; t < 23; t++) model_step(m, &s0, &tok[t], 1, NULL);
        unsigned char *a = malloc(sb);
        model_slot_read(m, 0, a);
        int64_t p0, p1, p2;
        memcpy(&p0, a + pos->offset, 8);
        p1 = p0 + 40LL * 1000000000LL;
        p2 = p0 - 40;
        memcpy(a + pos->offset, &p1, 8);
        model_slot_write(m, 1, a);
        memcpy(a + pos->offset, &p2, 8);
        model_slot_write(m, 2, a);
        float l0[V], l1[V], l2[V];
        int same = 1, rc = 0;
        for (int t = 23; t < 60; t++) {
            rc |= model_step(m, &s0, &tok[t], 1, l0);
            rc |= model_step(m, &s1, &tok[t], 1, l1);
            rc |= model_step(m, &s2, &tok[t], 1, l2);
            same &= !memcmp(l0, l1, sizeof l0) && !memcmp(l0, l2, sizeof l0);
        }
        CHECK(rc == 0 && same, "%s: positions %lld, %lld and %lld (≡ mod 40) continue differently (rc %d)", bk[k],
              (long long)p0, (long long)p1, (long long)p2, rc);
        free(a);
        model_free(m);
    }
}

static void cosformer_horizon_refused(void)
{
    static const mspec ms = {32, 64, 1, {{"cosformer", 2, 16, 20, "horizon", 0}}};
    horizon_refused("cos_ref", &ms);
}

/* Unbounded kinds and the periodic form report no maximum length. */
static void max_tokens_unbounded(void)
{
    const mspec *ms[3] = {&retnet2, &performer2, &cos_periodic};
    for (int i = 0; i < 3; i++) {
        char nm[32];
        snprintf(nm, sizeof nm, "maxtok%d", i);
        model *m = load_model(nm, ms[i], 50, "cpu");
        if (!m) continue;
        CHECK(model_max_tokens(m) == 0, "%s: model_max_tokens %lld, want 0", ms[i]->L[0].mixer, model_max_tokens(m));
        model_free(m);
    }
    model *m = load_model("maxtok_linf", &linformer2, 50, "cpu");
    if (m) {
        CHECK(model_max_tokens(m) == 300, "linformer layers of 320 and 300: model_max_tokens %lld", model_max_tokens(m));
        model_free(m);
    }
}

static void linformer_parallel(void) { parallel_case("linf_par", &linformer2, 41); }
static void linformer_prefill(void) { prefill_case("linf_pre", &linformer2, 43); }
static void linformer_batch(void) { batch_case("linf_batch", &linformer2, 44); }
static void linformer_state(void) { state_case("linf_state", &linformer2, 46); }
static void linformer_refuse(void) { refuse_case("linf_bad", &linformer2, "proj_v", NAN, "layers.0.mixer.proj_v"); }
static void linformer_harness(void) { harness_case("linf_harness", &linformer2, 48); }
static void linformer_max_len_refused(void)
{
    static const mspec ms = {32, 64, 1, {{"linformer", 2, 16, 8, NULL, 20}}};
    horizon_refused("linf_ref", &ms);
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/lind_mixlin.XXXXXX");
    if (!mkdtemp(tmpdir)) {
        printf("FAIL setup: mkdtemp\n");
        return 1;
    }
    RUN(retnet_parallel);
    RUN(retnet_prefill);
    RUN(retnet_batch);
    RUN(retnet_state);
    RUN(retnet_refuse);
    RUN(retnet_harness);
    RUN(retnet_state_precision);
    RUN(retnet_fp64_state_resumes);
    RUN(performer_parallel);
    RUN(performer_prefill);
    RUN(performer_batch);
    RUN(performer_state);
    RUN(performer_refuse);
    RUN(performer_harness);
    RUN(cosformer_parallel);
    RUN(cosformer_periodic_parallel);
    RUN(cosformer_prefill);
    RUN(cosformer_batch);
    RUN(cosformer_state);
    RUN(cosformer_horizon_refused);
    RUN(cosformer_periodic_any_position);
    RUN(cosformer_harness);
    RUN(linformer_parallel);
    RUN(linformer_prefill);
    RUN(linformer_batch);
    RUN(linformer_state);
    RUN(linformer_refuse);
    RUN(linformer_max_len_refused);
    RUN(linformer_harness);
    RUN(max_tokens_unbounded);
    RUN(threads_all_kinds);
    RUN(bf16_all_kinds);
    RUN(bad_config_refused);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) printf("NOTE could not remove %s\n", tmpdir);
    return check_exit();
}
