/* tests/refmodel.h — tests from the seams (issue #24 item 5): one model
 * writer driven by the kinds' own tensor lists, and one double-precision
 * reference forward with a per-kind callback for the mixer.
 *
 * The writer: the caller gives each layer's keys (the text inside its object
 * in config.json's "layers" array); rm_write parses that config with the
 * engine's own reader (recurrent/config.h), then asks, like
 * recurrent/model.c does, for the top-level tensors, each layer's norms, and
 * each layer's mixer and FFN kind's layer_kind.tensors(), and writes every
 * one with seeded random values:
 *
 *   rm_spec s = {.d_model = 32, .n_layers = 1};
 *   snprintf(s.layer[0], sizeof s.layer[0], "\"mixer\": \"retnet\", \"ffn\": \"gelu_mlp\", "
 *            "\"n_heads\": 2, \"d_head\": 16, \"d_ff\": 64");
 *   rm_write("/tmp/m", &s, 42, &(rm_opts){.dist = my_dist});
 *
 * Default values (rm_default_dist): embed.weight U(−1,1); a matrix [N × K]
 * U(−1,1)/√K; a vector whose name ends in "weight" 1 + 0.1·U(−1,1); any
 * other vector 0.1·U(−1,1); optional tensors are left out. rm_opts.dist may
 * change any tensor's distribution (or write an optional one). The knobs
 * rm_opts keeps: bf16-exact matrices, a tensor left out, a tensor whose
 * first value is poisoned, keys appended to layer 0 in the written
 * config.json only (a broken config: the tensors follow the spec).
 *
 * The reference: rm_ref_forward computes a whole model over T tokens in
 * double — embedding, per layer LayerNorm + mixer + Wo + residual, LayerNorm
 * + GELU MLP + residual, final LayerNorm and head — calling, for each layer,
 * the rm_mixer_ref entry of its mixer kind, which returns the mixer's output
 * before "mixer.wo". rm_reference_error runs a model dir's engine one token
 * at a time against it (tests/kindcheck.h). */
#ifndef LIND_TESTS_REFMODEL_H
#define LIND_TESTS_REFMODEL_H

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "recurrent/config.h"
#include "recurrent/kind.h"
#include "recurrent/model.h"
#include "recurrent/safetensors.h"
#include "tests/kindcheck.h"
#include "tests/testmodel.h"

/* ---- the writer ------------------------------------------------------------- */

typedef struct rm_spec {
    int vocab_size;                        /* 0 = 256 */
    int d_model, n_layers;
    char layer[LIND_MAX_LAYERS][384];      /* keys of layer i's object */
} rm_spec;

enum { RM_TOP, RM_NORM, RM_MIXER, RM_FFN };

/* One tensor the model expects, as the writer sees it. */
typedef struct rm_tensor {
    const char *name;      /* full name: "layers.0.mixer.wq", "head.weight" */
    const char *rel;       /* relative to the part: "wq"; the full name at the top level */
    int layer;             /* −1 at the top level */
    int part;              /* RM_TOP, RM_NORM (ln1/ln2), RM_MIXER, RM_FFN */
    const char *kind;      /* the part's kind name ("" for RM_TOP / RM_NORM) */
    int ndim, shape[2];
    int optional, matrix;
} rm_tensor;

/* How a tensor's values are drawn: kind TESTMODEL_UNIFORM a·U(−1,1),
 * TESTMODEL_ONE_PLUS 1 + a·U(−1,1), TESTMODEL_RANGE U(a, b). */
typedef struct rm_dist {
    int kind;
    double a, b;
    int skip;              /* 1: not written */
} rm_dist;

typedef void (*rm_dist_fn)(void *ctx, const rm_tensor *t, rm_dist *d);

typedef struct rm_opts {
    rm_dist_fn dist;       /* may change the default distribution; NULL = defaults */
    void *ctx;
    int bf16;              /* matrix tensors (rm_tensor.matrix) rounded to bf16-exact values */
    const char *skip;      /* full name of a tensor left out */
    const char *poison;    /* full name of a tensor whose first value is poison_val */
    float poison_val;
    const char *extra0;    /* appended to layer 0's keys in the written config.json */
} rm_opts;

static inline void rm_default_dist(const rm_tensor *t, rm_dist *d)
{
    size_t n = strlen(t->rel);
    d->skip = t->optional;
    d->b = 0;
    if (t->part == RM_TOP && !strcmp(t->name, "embed.weight")) { d->kind = TESTMODEL_UNIFORM; d->a = 1.0; }
    else if (t->ndim == 2) { d->kind = TESTMODEL_UNIFORM; d->a = 1 / sqrt((double)t->shape[1]); }
    else if (n >= 6 && !strcmp(t->rel + n - 6, "weight")) { d->kind = TESTMODEL_ONE_PLUS; d->a = 0.1; }
    else { d->kind = TESTMODEL_UNIFORM; d->a = 0.1; }
}

/* The config.json text of spec (layer 0 with `extra0` appended when not
 * NULL), malloc'd, or NULL. */
static inline char *rm_config_json(const rm_spec *s, const char *extra0)
{
    size_t cap = 256 + (size_t)s->n_layers * 400 + (extra0 ? strlen(extra0) : 0), n = 0;
    char *js = malloc(cap);
    if (!js) return NULL;
    n += (size_t)snprintf(js + n, cap - n, "{\"vocab_size\": %d, \"d_model\": %d, \"n_layers\": %d, "
                          "\"norm_eps\": 1e-5, \"layers\": [", s->vocab_size ? s->vocab_size : 256, s->d_model,
                          s->n_layers);
    for (int i = 0; i < s->n_layers; i++)
        n += (size_t)snprintf(js + n, cap - n, "%s{%s%s%s}", i ? ", " : "", s->layer[i],
                              i == 0 && extra0 ? ", " : "", i == 0 && extra0 ? extra0 : "");
    snprintf(js + n, cap - n, "]}\n");
    return js;
}

/* Parse the spec's config (without extra0) as the engine does. */
static inline int rm_parse(const rm_spec *s, lind_config *c, char *err, size_t errlen)
{
    char *js = rm_config_json(s, NULL);
    if (!js) return -ENOMEM;
    memset(c, 0, sizeof *c);
    int rc = config_parse(js, strlen(js), "config.json", c, err, errlen);
    free(js);
    return rc;
}

/* The tensors a model of config c expects, in model.c's order; returns the
 * count (≤ cap). Names live in `names` (cap × 96 bytes). */
static inline int rm_tensors(const lind_config *c, rm_tensor *out, char (*names)[96], int cap)
{
    int n = 0, d = c->d_model, V = c->vocab_size;
#define RM_PUT(nm_, rel_, l_, part_, kind_, nd_, s0_, s1_, opt_, mat_)                                   \
    do {                                                                                            \
        if (n < cap) {                                                                              \
            snprintf(names[n], 96, "%s", nm_);                                                      \
            out[n] = (rm_tensor){names[n], NULL, l_, part_, kind_, nd_, {s0_, s1_}, opt_, mat_};    \
            out[n].rel = (part_) == RM_TOP ? names[n] : names[n] + strlen(names[n]) - strlen(rel_); \
            n++;                                                                                    \
        }                                                                                           \
    } while (0)
    RM_PUT("embed.weight", "", -1, RM_TOP, "", 2, V, d, 0, 0);
    if (c->emb_norm) {
        RM_PUT("emb_norm.weight", "", -1, RM_TOP, "", 1, d, 0, 0, 0);
        if (!c->norm_rms) RM_PUT("emb_norm.bias", "", -1, RM_TOP, "", 1, d, 0, 0, 0);
    }
    RM_PUT("ln_f.weight", "", -1, RM_TOP, "", 1, d, 0, 0, 0);
    if (!c->norm_rms) RM_PUT("ln_f.bias", "", -1, RM_TOP, "", 1, d, 0, 0, 0);
    if (!c->tie_head) RM_PUT("head.weight", "", -1, RM_TOP, "", 2, V, d, 0, 1);
    for (int i = 0; i < c->n_layers; i++) {
        char nm[96];
        static const char *const norms[4] = {"ln1.weight", "ln1.bias", "ln2.weight", "ln2.bias"};
        const layer_kind *fk = ffn_find(c->layers[i].ffn), *mk = mixer_find(c->layers[i].mixer);
        for (int k = 0; k < 4; k++) {
            if ((c->norm_rms && (k & 1)) || (fk && !fk->step && k >= 2)) continue;
            snprintf(nm, sizeof nm, "layers.%d.%s", i, norms[k]);
            RM_PUT(nm, norms[k], i, RM_NORM, "", 1, d, 0, 0, 0);
        }
        for (int f = 0; f < 2; f++) {
            const layer_kind *k = f ? fk : mk;
            if (!k) continue;
            kind_tensor kt[KIND_MAX_TENSORS];
            int nk = k->tensors(c, f ? (const void *)c->layers[i].ffn_p : (const void *)c->layers[i].mixer_p, kt);
            for (int j = 0; j < nk; j++) {
                if (!kt[j].name) continue;
                snprintf(nm, sizeof nm, "layers.%d.%s.%s", i, f ? "ffn" : "mixer", kt[j].name);
                RM_PUT(nm, kt[j].name, i, f ? RM_FFN : RM_MIXER, k->name, kt[j].ndim, kt[j].shape[0],
                       kt[j].ndim == 2 ? kt[j].shape[1] : 0, kt[j].optional, kt[j].matrix);
            }
        }
    }
#undef RM_PUT
    return n;
}

/* Write dir/config.json and dir/model.safetensors. 0 or a negative errno
 * (-EINVAL when the spec's config does not parse: err says why, when given). */
static inline int rm_write(const char *dir, const rm_spec *s, uint64_t seed, const rm_opts *opts)
{
    rm_opts o;
    memset(&o, 0, sizeof o);
    if (opts) o = *opts;
    lind_config *c = calloc(1, sizeof *c);
    if (!c) return -ENOMEM;
    char err[256] = "";
    int rc = rm_parse(s, c, err, sizeof err);
    if (rc < 0) {
        fprintf(stderr, "rm_write: %s\n", err);
        free(c);
        return rc;
    }
    if (mkdir(dir, 0755) < 0 && errno != EEXIST) { free(c); return -errno; }
    char path[4096];
    char *js = rm_config_json(s, o.extra0);
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = js ? fopen(path, "w") : NULL;
    int ok = f && fputs(js, f) >= 0;
    if (f && fclose(f) != 0) ok = 0;
    free(js);
    if (!ok) { free(c); return -EIO; }

    int cap = 8 + c->n_layers * (4 + 2 * KIND_MAX_TENSORS), n = 0, nt = 0;
    rm_tensor *spec = calloc((size_t)cap, sizeof *spec);
    char (*names)[96] = calloc((size_t)cap, sizeof *names);
    testmodel_tensor *t = calloc((size_t)cap, sizeof *t);
    float **bufs = calloc((size_t)cap, sizeof *bufs);
    if (!spec || !names || !t || !bufs) rc = -ENOMEM;
    if (rc == 0) n = rm_tensors(c, spec, names, cap);
    uint64_t rng = seed * 0x2545f4914f6cdd1dull + 1;
    for (int i = 0; i < n && rc == 0; i++) {
        rm_dist d;
        rm_default_dist(&spec[i], &d);
        if (o.dist) o.dist(o.ctx, &spec[i], &d);
        if (d.skip || (o.skip && !strcmp(o.skip, spec[i].name))) continue;
        rc = testmodel_add_(t, &nt, bufs, &rng, spec[i].name, spec[i].shape[0], spec[i].ndim == 2 ? spec[i].shape[1] : 0,
                            d.kind, d.a, d.b);
        if (rc < 0) break;
        float *p = bufs[nt - 1];
        size_t numel = t[nt - 1].nbytes / sizeof *p;
        if (o.bf16 && spec[i].matrix)
            for (size_t z = 0; z < numel; z++) {
                uint32_t u;
                memcpy(&u, &p[z], 4);
                u &= 0xFFFF0000u;
                memcpy(&p[z], &u, 4);
            }
        if (o.poison && !strcmp(o.poison, spec[i].name)) p[0] = o.poison_val;
    }
    if (rc == 0) {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        rc = testmodel_st_write(path, t, nt);
    }
    for (int i = 0; i < nt; i++) free(bufs[i]);
    free(bufs); free(t); free(names); free(spec); free(c);
    return rc;
}

/* ---- the reference forward -------------------------------------------------- */

typedef struct rm_ref {
    st_file st;
    lind_config cfg;       /* the model's config, as the engine parses it */
    int T;                 /* positions */
    const void *user;      /* the test's own description of the model */
} rm_ref;

/* A mixer kind's reference: h [T × d] (LN1 of the residual) → o [T × n],
 * the mixer's output before "layers.<l>.mixer.wo" [d × n]; returns n. */
typedef int (*rm_mixer_fn)(rm_ref *r, int l, const double *h, double *o);
typedef struct rm_mixer_ref {
    const char *kind;
    rm_mixer_fn fn;
} rm_mixer_ref;

/* The logits [T × V] of tokens tok[0..T) by the reference; table ends with
 * a NULL kind. 0, or −1 (a layer's mixer or FFN kind has no reference: a
 * CHECK fails naming it). */
static inline int rm_ref_forward(rm_ref *r, const rm_mixer_ref *table, const int *tok, double *logits)
{
    const lind_config *c = &r->cfg;
    int T = r->T, d = c->d_model, V = c->vocab_size, ffmax = 1, o_max = d, rc = 0;
    for (int l = 0; l < c->n_layers; l++) {   /* the widest FFN and mixer output (Wo's columns) */
        st_tensor *st;
        char nm[64];
        snprintf(nm, sizeof nm, "layers.%d.ffn.b1", l);
        if ((st = st_find(&r->st, nm)) && (int)st->numel > ffmax) ffmax = (int)st->numel;
        snprintf(nm, sizeof nm, "layers.%d.mixer.wo", l);
        if ((st = st_find(&r->st, nm)) && (int)(st->numel / (size_t)d) > o_max) o_max = (int)(st->numel / (size_t)d);
    }
    double *x = calloc((size_t)T * d, 8), *h = calloc((size_t)T * d, 8), *y = calloc((size_t)T * d, 8);
    double *o = calloc((size_t)T * o_max, 8), *f = calloc((size_t)T * ffmax, 8);
    double *E = kc_tensor(&r->st, "embed.weight", 0);
    for (int t = 0; t < T; t++) memcpy(x + (size_t)t * d, E + (size_t)tok[t] * d, (size_t)d * 8);
    free(E);
    for (int l = 0; l < c->n_layers && rc == 0; l++) {
        const rm_mixer_ref *mr = table;
        while (mr->kind && strcmp(mr->kind, c->layers[l].mixer)) mr++;
        CHECK(mr->kind && !strcmp(c->layers[l].ffn, "gelu_mlp") && !c->norm_rms,
              "layer %d: no reference for mixer \"%s\", FFN \"%s\"", l, c->layers[l].mixer, c->layers[l].ffn);
        if (!mr->kind || strcmp(c->layers[l].ffn, "gelu_mlp") || c->norm_rms) { rc = -1; break; }
        double *l1w = kc_tensor(&r->st, "layers.%d.ln1.weight", l), *l1b = kc_tensor(&r->st, "layers.%d.ln1.bias", l);
        kc_ln(x, T, d, l1w, l1b, c->norm_eps, h);
        int n = mr->fn(r, l, h, o);
        double *wo = kc_tensor(&r->st, "layers.%d.mixer.wo", l);
        kc_lin(o, T, n, wo, NULL, d, y);
        for (size_t i = 0; i < (size_t)T * d; i++) x[i] += y[i];
        double *l2w = kc_tensor(&r->st, "layers.%d.ln2.weight", l), *l2b = kc_tensor(&r->st, "layers.%d.ln2.bias", l);
        kc_ln(x, T, d, l2w, l2b, c->norm_eps, h);
        double *w1 = kc_tensor(&r->st, "layers.%d.ffn.w1", l), *b1 = kc_tensor(&r->st, "layers.%d.ffn.b1", l);
        double *w2 = kc_tensor(&r->st, "layers.%d.ffn.w2", l), *b2 = kc_tensor(&r->st, "layers.%d.ffn.b2", l);
        char nm[64];
        snprintf(nm, sizeof nm, "layers.%d.ffn.b1", l);
        int ff = (int)st_find(&r->st, nm)->numel;
        kc_lin(h, T, d, w1, b1, ff, f);
        for (size_t i = 0; i < (size_t)T * ff; i++) f[i] = 0.5 * f[i] * (1 + erf(f[i] / sqrt(2.0)));
        kc_lin(f, T, ff, w2, b2, d, y);
        for (size_t i = 0; i < (size_t)T * d; i++) x[i] += y[i];
        free(l1w); free(l1b); free(l2w); free(l2b); free(wo); free(w1); free(b1); free(w2); free(b2);
    }
    if (rc == 0) {
        double *lw = kc_tensor(&r->st, "ln_f.weight", 0), *lb = kc_tensor(&r->st, "ln_f.bias", 0);
        double *hw = kc_tensor(&r->st, "head.weight", 0);
        kc_ln(x, T, d, lw, lb, c->final_norm_eps, h);
        kc_lin(h, T, d, hw, NULL, V, logits);
        free(lw); free(lb); free(hw);
    }
    free(x); free(h); free(y); free(o); free(f);
    return rc;
}

/* The recurrent engine (model m, one model_step per token) against the
 * reference over T random tokens from tok_seed, for the model written in
 * dir from spec: the largest error relative to each position's largest
 * logit (*worst, at *worst_t) and its mean (*mean). 0, or −1 when the
 * reference could not run (a CHECK failed). */
static inline int rm_reference_error(model *m, const char *dir, const rm_spec *spec, const void *user,
                                     const rm_mixer_ref *table, int T, uint64_t tok_seed, double *worst,
                                     int *worst_t, double *mean)
{
    char path[4096], err[512] = "";
    rm_ref *r = calloc(1, sizeof *r);
    if (!r) return -1;
    r->T = T;
    r->user = user;
    int rc = rm_parse(spec, &r->cfg, err, sizeof err);
    CHECK(rc == 0, "the reference's config: %s", err);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (rc == 0) {
        rc = st_open(&r->st, path, err, sizeof err);
        CHECK(rc == 0, "st_open: %s", err);
    }
    if (rc < 0) { free(r); return -1; }
    int V = r->cfg.vocab_size;
    int32_t *tok = malloc(sizeof *tok * (size_t)T);
    int *itok = malloc(sizeof *itok * (size_t)T);
    double *want = malloc(sizeof(double) * (size_t)T * V);
    kc_random_tokens(tok, T, tok_seed);
    for (int t = 0; t < T; t++) itok[t] = tok[t];
    rc = rm_ref_forward(r, table, itok, want);
    if (rc == 0) kc_steps_vs_reference(m, tok, want, T, V, worst, worst_t, mean);
    free(want); free(itok); free(tok);
    st_close(&r->st);
    free(r);
    return rc;
}

#endif
