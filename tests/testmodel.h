/* tests/testmodel.h — header-only helpers that write model directories for
 * tests: random weights in exactly the layout docs/MODEL.md describes.
 *
 *   testmodel_cfg c = testmodel_config(32, 2, 4, 8, 64, "linear,aft", 1, "decay");
 *   testmodel_write("/tmp/m", &c, 42, NULL);      // config.json + model.safetensors
 *
 * testmodel_st_write() writes an arbitrary list of tensors (any dtype string,
 * any offsets) so loader tests can build broken files. The config is
 * written in lind's flat config.json form (docs/MODEL.md): linear/aft mixers,
 * gelu_mlp FFNs, byte tokens. Signatures are stable: other modules' tests use
 * them. */
#ifndef LIND_TESTS_TESTMODEL_H
#define LIND_TESTS_TESTMODEL_H

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "recurrent/config.h"
#include "recurrent/model.h"

/* The shape of a test model, in the flat config's terms. */
typedef struct testmodel_cfg {
    int vocab_size;            /* 256 */
    int d_model, n_layers, n_heads, d_head, d_ff;
    char mixers[LIND_MAX_LAYERS][16];
    char feature_map[16];
    char aft_variant[16];
    int token_shift;
    float norm_eps, attn_eps;
} testmodel_cfg;

typedef struct testmodel_opts {
    float gamma_min;   /* linear mixers: 0 = no decay tensor (γ = 1); else γ_h uniform in [gamma_min, 1] */
    float scale;       /* multiplies every projection's weights; 0 means 1 */
} testmodel_opts;

typedef struct testmodel_tensor {
    char name[96];
    const char *dtype;     /* "F32", "F16", "BF16", or anything (for broken files) */
    int ndim;
    int64_t shape[2];
    const void *data;      /* nbytes raw bytes */
    size_t nbytes;
} testmodel_tensor;

/* A config with the given sizes. `mixers` is a comma-separated list cycled
 * over the layers ("linear", "aft", "linear,aft"...). aft_variant may be
 * NULL when no layer is aft. norm_eps 1e-5, attn_eps 1e-6. */
static inline testmodel_cfg testmodel_config(int d_model, int n_layers, int n_heads, int d_head, int d_ff,
                                           const char *mixers, int token_shift, const char *aft_variant)
{
    testmodel_cfg c;
    memset(&c, 0, sizeof c);
    c.vocab_size = 256;
    c.d_model = d_model;
    c.n_layers = n_layers;
    c.n_heads = n_heads;
    c.d_head = d_head;
    c.d_ff = d_ff;
    c.token_shift = token_shift;
    c.norm_eps = 1e-5f;
    c.attn_eps = 1e-6f;
    snprintf(c.feature_map, sizeof c.feature_map, "elu1");
    if (aft_variant) snprintf(c.aft_variant, sizeof c.aft_variant, "%s", aft_variant);
    char kinds[8][16];
    int nk = 0;
    memset(kinds, 0, sizeof kinds);
    const char *p = mixers;
    while (*p && nk < 8) {
        size_t n = strcspn(p, ",");
        snprintf(kinds[nk++], 16, "%.*s", (int)n, p);
        p += n;
        if (*p == ',') p++;
    }
    for (int i = 0; i < n_layers && i < LIND_MAX_LAYERS; i++)
        memcpy(c.mixers[i], kinds[nk ? i % nk : 0], sizeof c.mixers[i]);
    return c;
}

/* Write a safetensors file holding tensors t[0..n) packed in order. */
static inline int testmodel_st_write(const char *path, const testmodel_tensor *t, int n)
{
    size_t cap = 256 + (size_t)n * 256, len = 0, off = 0;
    char *hdr = malloc(cap);
    if (!hdr) return -ENOMEM;
    len += (size_t)snprintf(hdr + len, cap - len, "{\"__metadata__\":{\"format\":\"pt\"}");
    for (int i = 0; i < n; i++) {
        len += (size_t)snprintf(hdr + len, cap - len, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[", t[i].name, t[i].dtype);
        for (int k = 0; k < t[i].ndim; k++)
            len += (size_t)snprintf(hdr + len, cap - len, "%s%lld", k ? "," : "", (long long)t[i].shape[k]);
        len += (size_t)snprintf(hdr + len, cap - len, "],\"data_offsets\":[%zu,%zu]}", off, off + t[i].nbytes);
        off += t[i].nbytes;
    }
    len += (size_t)snprintf(hdr + len, cap - len, "}");
    while (len % 8) hdr[len++] = ' ';   /* data 8-aligned, as safetensors writers do */
    FILE *f = fopen(path, "wb");
    if (!f) { free(hdr); return -errno; }
    uint8_t le[8];
    for (int i = 0; i < 8; i++) le[i] = (uint8_t)((uint64_t)len >> (8 * i));
    int ok = fwrite(le, 1, 8, f) == 8 && fwrite(hdr, 1, len, f) == len;
    for (int i = 0; i < n && ok; i++)
        ok = t[i].nbytes == 0 || fwrite(t[i].data, 1, t[i].nbytes, f) == t[i].nbytes;
    ok = (fclose(f) == 0) && ok;
    free(hdr);
    return ok ? 0 : -EIO;
}

static inline double testmodel_u01_(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (double)(z >> 11) * 0x1.0p-53;
}

enum { TESTMODEL_UNIFORM, TESTMODEL_ONE_PLUS, TESTMODEL_RANGE };

/* Append one F32 tensor filled with random values: kind UNIFORM: a·U(−1,1);
 * ONE_PLUS: 1 + a·U(−1,1); RANGE: U(a, b). */
static inline int testmodel_add_(testmodel_tensor *t, int *n, float **bufs, uint64_t *rng, const char *name,
                                 int d0, int d1, int kind, double a, double b)
{
    size_t numel = (size_t)d0 * (size_t)(d1 ? d1 : 1);
    float *p = malloc(numel * sizeof *p + 1);
    if (!p) return -ENOMEM;
    for (size_t i = 0; i < numel; i++) {
        double u = testmodel_u01_(rng);
        p[i] = (float)(kind == TESTMODEL_UNIFORM ? a * (2 * u - 1) : kind == TESTMODEL_ONE_PLUS ? 1 + a * (2 * u - 1)
                                                                                              : a + (b - a) * u);
    }
    testmodel_tensor *x = &t[*n];
    snprintf(x->name, sizeof x->name, "%s", name);
    x->dtype = "F32";
    x->ndim = d1 ? 2 : 1;
    x->shape[0] = d0;
    x->shape[1] = d1;
    x->data = p;
    x->nbytes = numel * sizeof *p;
    bufs[(*n)++] = p;
    return 0;
}

/* Write dir/config.json and dir/model.safetensors (creating dir) with
 * weights drawn from `seed`. 0 or a negative errno. */
/* config.json text for cfg (malloc'd, caller frees), or NULL. */
static inline char *testmodel_config_json(const testmodel_cfg *c)
{
    size_t cap = 512 + (size_t)c->n_layers * 24, n = 0;
    char *s = malloc(cap);
    if (!s) return NULL;
    n += (size_t)snprintf(s + n, cap - n, "{\n \"vocab_size\": %d,\n \"d_model\": %d,\n \"n_layers\": %d,\n"
                          " \"n_heads\": %d,\n \"d_head\": %d,\n \"d_ff\": %d,\n \"mixers\": [",
                          c->vocab_size, c->d_model, c->n_layers, c->n_heads, c->d_head, c->d_ff);
    for (int i = 0; i < c->n_layers; i++) n += (size_t)snprintf(s + n, cap - n, "%s\"%s\"", i ? ", " : "", c->mixers[i]);
    n += (size_t)snprintf(s + n, cap - n, "],\n \"feature_map\": \"%s\",\n \"token_shift\": %s,\n \"norm_eps\": %.9g,\n"
                          " \"attn_eps\": %.9g", c->feature_map, c->token_shift ? "true" : "false",
                          (double)c->norm_eps, (double)c->attn_eps);
    if (c->aft_variant[0]) n += (size_t)snprintf(s + n, cap - n, ",\n \"aft_variant\": \"%s\"", c->aft_variant);
    snprintf(s + n, cap - n, "\n}\n");
    return s;
}

static inline int testmodel_write(const char *dir, const testmodel_cfg *cfg, uint64_t seed, const testmodel_opts *opts)
{
    testmodel_opts o = {0, 1};
    if (opts) o = *opts;
    if (o.scale == 0) o.scale = 1;
    if (mkdir(dir, 0755) < 0 && errno != EEXIST) return -errno;
    char path[4096];
    char *json = testmodel_config_json(cfg);
    if (!json) return -ENOMEM;
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    if (!f) { free(json); return -errno; }
    int ok = fputs(json, f) >= 0;
    ok = (fclose(f) == 0) && ok;
    free(json);
    if (!ok) return -EIO;

    int maxn = 4 + cfg->n_layers * 24, n = 0, rc = 0;
    testmodel_tensor *t = calloc((size_t)maxn, sizeof *t);
    float **bufs = calloc((size_t)maxn, sizeof *bufs);
    if (!t || !bufs) { free(t); free(bufs); return -ENOMEM; }
    uint64_t rng = seed * 0x2545f4914f6cdd1dull + 1;
    int d = cfg->d_model, hd = cfg->n_heads * cfg->d_head, ff = cfg->d_ff;
    double sd = o.scale / sqrt((double)d), shd = o.scale / sqrt((double)hd), sff = o.scale / sqrt((double)ff);
    char nm[96];
#define ADD(name, d0, d1, kind, a, b) \
    if (rc == 0) rc = testmodel_add_(t, &n, bufs, &rng, name, d0, d1, kind, a, b)
    ADD("embed.weight", 256, d, TESTMODEL_UNIFORM, 1.0, 0);
    ADD("ln_f.weight", d, 0, TESTMODEL_ONE_PLUS, 0.1, 0);
    ADD("ln_f.bias", d, 0, TESTMODEL_UNIFORM, 0.1, 0);
    ADD("head.weight", 256, d, TESTMODEL_UNIFORM, sd, 0);
    for (int i = 0; i < cfg->n_layers && rc == 0; i++) {
#define L(s) (snprintf(nm, sizeof nm, "layers.%d.%s", i, s), nm)
        ADD(L("ln1.weight"), d, 0, TESTMODEL_ONE_PLUS, 0.1, 0);
        ADD(L("ln1.bias"), d, 0, TESTMODEL_UNIFORM, 0.1, 0);
        ADD(L("ln2.weight"), d, 0, TESTMODEL_ONE_PLUS, 0.1, 0);
        ADD(L("ln2.bias"), d, 0, TESTMODEL_UNIFORM, 0.1, 0);
        ADD(L("ffn.w1"), ff, d, TESTMODEL_UNIFORM, sd, 0);
        ADD(L("ffn.b1"), ff, 0, TESTMODEL_UNIFORM, 0.1, 0);
        ADD(L("ffn.w2"), d, ff, TESTMODEL_UNIFORM, sff, 0);
        ADD(L("ffn.b2"), d, 0, TESTMODEL_UNIFORM, 0.1, 0);
        if (!strcmp(cfg->mixers[i], "linear")) {
            ADD(L("mixer.wq"), hd, d, TESTMODEL_UNIFORM, sd, 0);
            ADD(L("mixer.wk"), hd, d, TESTMODEL_UNIFORM, sd, 0);
            ADD(L("mixer.wv"), hd, d, TESTMODEL_UNIFORM, sd, 0);
            ADD(L("mixer.wo"), d, hd, TESTMODEL_UNIFORM, shd, 0);
            if (o.gamma_min > 0) ADD(L("mixer.decay"), cfg->n_heads, 0, TESTMODEL_RANGE, o.gamma_min, 1.0);
            if (cfg->token_shift) {
                ADD(L("mixer.mu_q"), d, 0, TESTMODEL_RANGE, 0.0, 1.0);
                ADD(L("mixer.mu_k"), d, 0, TESTMODEL_RANGE, 0.0, 1.0);
                ADD(L("mixer.mu_v"), d, 0, TESTMODEL_RANGE, 0.0, 1.0);
            }
        } else if (!strcmp(cfg->mixers[i], "aft")) {
            ADD(L("mixer.wr"), d, d, TESTMODEL_UNIFORM, sd, 0);
            ADD(L("mixer.wk"), d, d, TESTMODEL_UNIFORM, sd, 0);
            ADD(L("mixer.wv"), d, d, TESTMODEL_UNIFORM, sd, 0);
            ADD(L("mixer.wo"), d, d, TESTMODEL_UNIFORM, sd, 0);
            if (!strcmp(cfg->aft_variant, "decay")) {
                ADD(L("mixer.time_decay"), d, 0, TESTMODEL_RANGE, -2.0, 0.5);
                ADD(L("mixer.time_first"), d, 0, TESTMODEL_RANGE, -1.0, 1.0);
            }
            if (cfg->token_shift) {
                ADD(L("mixer.mu_r"), d, 0, TESTMODEL_RANGE, 0.0, 1.0);
                ADD(L("mixer.mu_k"), d, 0, TESTMODEL_RANGE, 0.0, 1.0);
                ADD(L("mixer.mu_v"), d, 0, TESTMODEL_RANGE, 0.0, 1.0);
            }
        }
#undef L
    }
#undef ADD
    if (rc == 0) {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        rc = testmodel_st_write(path, t, n);
    }
    for (int i = 0; i < n; i++) free(bufs[i]);
    free(bufs);
    free(t);
    return rc;
}

#endif
