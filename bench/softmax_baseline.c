/* bench/softmax_baseline.c — the softmax-attention + KV-cache baseline of the
 * decode benchmark (see softmax_baseline.h). Not part of lind. */
#include "bench/softmax_baseline.h"

#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/cpu/pool.h"
#include <jansson.h>
#include "recurrent/mixer.h"
#include "recurrent/safetensors.h"
#include "recurrent/errmsg.h"

typedef struct smax_layer {
    backend_buf *ln1_w, *ln1_b, *ln2_w, *ln2_b, *w1, *b1, *w2, *b2, *wo;
    mixer_proj3 qkv;
    float *K, *V;           /* [H][cap][dh] each */
} smax_layer;

struct smax {
    smax_cfg cfg;
    backend *be;
    backend_buf *embed, *lnf_w, *lnf_b, *head;
    smax_layer L[LIND_MAX_LAYERS];
    backend_buf *x, *h, *ff, *logits, *scratch[3];
    long pos, cap;
    float *q, *o, *scores;  /* host: q and o (H·dh), scores (nthreads × cap) */
    cpu_pool *pool;         /* splits the heads; NULL: one thread */
    int nthreads;
};

/* ---- the attention kernel ------------------------------------------------ */

/* e^x for x ≤ 0 (scores after max subtraction), written to vectorize: Cody–
 * Waite reduction x = n·ln2 + r with n rounded to nearest by the 1.5·2^23
 * trick (n then also sits in t's low mantissa bits), a degree-6 polynomial
 * for e^r, 2^n built in the exponent bits. Relative error about 2e-7;
 * x < −87 is clamped (the result is then below 2^−125, negligible against
 * the max's e^0 = 1). */
static inline float exp_nonpos(float x)
{
    x = x < -87.0f ? -87.0f : x;
    float t = x * 1.44269504088896341f + 12582912.0f;
    float n = t - 12582912.0f;
    float r = x - n * 0.693359375f + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    int32_t bits;
    memcpy(&bits, &t, sizeof bits);
    bits = (bits - 0x4B400000 + 127) * (1 << 23);
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

#define LANES 16

/* s[i] ← e^{s[i] − max s}; returns Σ. Three simple passes, each of which
 * gcc vectorizes at -O3 (the max and the sum through explicit lanes, so no
 * reassociation flag is needed). */
static float softmax_unnormalized(float *restrict s, long n)
{
    float lane[LANES];
    long i;
    for (int j = 0; j < LANES; j++) lane[j] = -INFINITY;
    for (i = 0; i + LANES <= n; i += LANES)
        for (int j = 0; j < LANES; j++) lane[j] = fmaxf(lane[j], s[i + j]);
    float m = -INFINITY;
    for (int j = 0; j < LANES; j++) m = fmaxf(m, lane[j]);
    for (; i < n; i++) m = fmaxf(m, s[i]);
    for (i = 0; i < n; i++) s[i] = exp_nonpos(s[i] - m);
    for (int j = 0; j < LANES; j++) lane[j] = 0;
    for (i = 0; i + LANES <= n; i += LANES)
        for (int j = 0; j < LANES; j++) lane[j] += s[i + j];
    float sum = 0;
    for (int j = 0; j < LANES; j++) sum += lane[j];
    for (; i < n; i++) sum += s[i];
    return sum;
}

/* One head: o = softmax(K q · scale)ᵀ V over n cached rows of dh. */
static void attend(const float *K, const float *V, long n, int dh, const float *q, float scale, float *scores,
                   float *o)
{
    cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)n, dh, scale, K, dh, q, 1, 0.0f, scores, 1);
    float sum = softmax_unnormalized(scores, n);
    cblas_sgemv(CblasRowMajor, CblasTrans, (int)n, dh, 1.0f / sum, V, dh, scores, 1, 0.0f, o, 1);
}

double smax_selfcheck(void)
{
    enum { N = 1000, DH = 32 };
    float *K = malloc(sizeof(float) * N * DH), *V = malloc(sizeof(float) * N * DH);
    float q[DH], o[DH], *sc = malloc(sizeof(float) * N);
    double worst = INFINITY;
    if (!K || !V || !sc) goto out;
    uint64_t r = 12345;
    for (int i = 0; i < N * DH; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        K[i] = (float)((double)(r >> 40) / (double)(1ull << 24) * 8.0 - 4.0);
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        V[i] = (float)((double)(r >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
    }
    for (int j = 0; j < DH; j++) q[j] = (float)(0.1 * (j % 7) - 0.3);
    float scale = 1.0f / sqrtf((float)DH);
    attend(K, V, N, DH, q, scale, sc, o);
    double s[N], mx = -INFINITY, sum = 0;
    for (int t = 0; t < N; t++) {
        s[t] = 0;
        for (int j = 0; j < DH; j++) s[t] += (double)K[t * DH + j] * q[j];
        s[t] *= scale;
        if (s[t] > mx) mx = s[t];
    }
    for (int t = 0; t < N; t++) sum += (s[t] = exp(s[t] - mx));
    worst = 0;
    for (int j = 0; j < DH; j++) {
        double ref = 0;
        for (int t = 0; t < N; t++) ref += s[t] / sum * V[t * DH + j];
        double e = fabs(ref - o[j]) / (fabs(ref) > 1e-3 ? fabs(ref) : 1e-3);
        if (!(e <= worst)) worst = e;   /* NaN propagates as the worst */
    }
    /* The exp itself against libm over the range softmax feeds it. */
    for (float x = -87.0f; x <= 0.0f; x += 0.0137f) {
        double e = fabs((double)exp_nonpos(x) - exp((double)x)) / exp((double)x);
        if (!(e <= worst)) worst = e;
    }
out:
    free(K);
    free(V);
    free(sc);
    return worst;
}

/* ---- loading --------------------------------------------------------------- */

typedef struct loader {
    st_file st;
    char *err;
    size_t errlen;
} loader;

static int take(loader *ld, const char *name, int d0, int d1, float **out)
{
    st_tensor *t = st_find(&ld->st, name);
    *out = NULL;
    if (!t) return errmsg_set(-ENOENT, ld->err, ld->errlen, "%s: missing tensor '%s'", ld->st.path, name);
    if (t->ndim != (d1 ? 2 : 1) || t->shape[0] != d0 || (d1 && t->shape[1] != d1))
        return errmsg_set(-EINVAL, ld->err, ld->errlen,
                    "%s: tensor '%s' is not [%d x %d] (the softmax baseline reuses AFT layers' projections "
                    "as q/k/v/o, which needs d_model = n_heads * d_head)", ld->st.path, name, d0, d1 ? d1 : 1);
    float *p = malloc(t->numel * sizeof *p + 1);
    if (!p) return errmsg_set(-ENOMEM, ld->err, ld->errlen, "out of memory reading '%s'", name);
    st_read_f32(&ld->st, t, p);
    *out = p;
    return 0;
}

/* Read a tensor into a backend buffer; weight: a matmul W [d0 × d1]. */
static int take_up(smax *s, loader *ld, const char *name, int d0, int d1, int weight, backend_buf **out)
{
    float *p;
    int rc = take(ld, name, d0, d1, &p);
    if (rc < 0) return rc;
    size_t n = (size_t)d0 * (size_t)(d1 ? d1 : 1);
    if (weight)
        rc = backend_weight_new(s->be, d0, d1, p, out);
    else if ((rc = s->be->ops->buf_new(s->be, n, out)) == 0)
        rc = s->be->ops->buf_upload(s->be, *out, 0, p, n);
    free(p);
    if (rc < 0) return errmsg_set(rc, ld->err, ld->errlen, "backend could not take '%s' (error %d)", name, rc);
    return 0;
}

static int load_layer(smax *s, loader *ld, int i)
{
    const smax_cfg *c = &s->cfg;
    smax_layer *L = &s->L[i];
    int d = c->d_model, hd = c->n_heads * c->d_head, rc;
    char nm[128];
#define T(field, suffix, a, b, w)                                          \
    snprintf(nm, sizeof nm, "layers.%d.%s", i, suffix);                    \
    if ((rc = take_up(s, ld, nm, a, b, w, &L->field)) < 0) return rc;
    T(ln1_w, "ln1.weight", d, 0, 0);
    T(ln1_b, "ln1.bias", d, 0, 0);
    T(ln2_w, "ln2.weight", d, 0, 0);
    T(ln2_b, "ln2.bias", d, 0, 0);
    T(w1, "ffn.w1", c->d_ff, d, 1);
    T(b1, "ffn.b1", c->d_ff, 0, 0);
    T(w2, "ffn.w2", d, c->d_ff, 1);
    T(b2, "ffn.b2", d, 0, 0);
    int lin = !strcmp(c->mixers[i], "linear");
    if (!lin && strcmp(c->mixers[i], "aft"))
        return errmsg_set(-EINVAL, ld->err, ld->errlen, "layer %d: mixer '%s' has no q/k/v/o the baseline can reuse", i,
                    c->mixers[i]);
    T(wo, "mixer.wo", d, hd, 1);
#undef T
    const char *wn[3] = {lin ? "wq" : "wr", "wk", "wv"}, *mn[3] = {lin ? "mu_q" : "mu_r", "mu_k", "mu_v"};
    float *W[3] = {0}, *mu[3] = {0};
    rc = 0;
    for (int p = 0; p < 3 && rc == 0; p++) {
        snprintf(nm, sizeof nm, "layers.%d.mixer.%s", i, wn[p]);
        rc = take(ld, nm, hd, d, &W[p]);
        if (rc == 0 && c->token_shift) {
            snprintf(nm, sizeof nm, "layers.%d.mixer.%s", i, mn[p]);
            rc = take(ld, nm, d, 0, &mu[p]);
        }
    }
    kind_ctx ctx = {.be = s->be, .layer = i, .out_scale = 1.0f};
    kind_weight kw[3];
    const kind_weight *kwp[3];
    for (int p = 0; p < 3; p++) {
        kw[p] = (kind_weight){.f32 = W[p], .present = 1};
        kwp[p] = &kw[p];
    }
    if (rc == 0 && (rc = mixer_proj3_load(&L->qkv, &ctx, c->token_shift, hd, d, kwp, (const float *const *)mu)) < 0)
        errmsg_set(rc, ld->err, ld->errlen, "layer %d: backend could not take the projections (error %d)", i, rc);
    for (int p = 0; p < 3; p++) {
        free(W[p]);
        free(mu[p]);
    }
    return rc;
}

/* The flat config's keys the baseline needs. */
static int parse_cfg(const char *text, size_t len, const char *path, smax_cfg *c, char *err, size_t errlen)
{
    memset(c, 0, sizeof *c);
    json_error_t je;
    json_t *root = json_loadb(text, len, 0, &je);
    if (!root) return errmsg_set(-EINVAL, err, errlen, "%s: bad JSON: %s", path, je.text);
    int ok = json_unpack(root, "{s:i, s:i, s:i, s:i, s:i, s:i, s:b, s:F}", "vocab_size", &c->vocab_size, "d_model",
                         &c->d_model, "n_layers", &c->n_layers, "n_heads", &c->n_heads, "d_head", &c->d_head, "d_ff",
                         &c->d_ff, "token_shift", &c->token_shift, "norm_eps", &(double){0}) == 0;
    json_t *nv = json_object_get(root, "norm_eps"), *mx = json_object_get(root, "mixers");
    ok = ok && json_is_array(mx) && (int)json_array_size(mx) == c->n_layers && c->n_layers <= LIND_MAX_LAYERS;
    for (int i = 0; ok && i < c->n_layers; i++) {
        json_t *e = json_array_get(mx, (size_t)i);
        ok = json_is_string(e) && strlen(json_string_value(e)) < sizeof c->mixers[i];
        if (ok) strcpy(c->mixers[i], json_string_value(e));
    }
    if (ok) c->norm_eps = (float)json_number_value(nv);
    json_decref(root);
    if (!ok)
        return errmsg_set(-EINVAL, err, errlen, "%s: the softmax baseline needs lind's flat config (vocab_size, d_model, "
                          "n_layers, n_heads, d_head, d_ff, token_shift, norm_eps, mixers)", path);
    return 0;
}

int smax_load(const char *dir, int threads, const backend_opts *be, smax **out, char *err, size_t errlen)
{
    *out = NULL;
    if (threads < 1 || threads > 64) return errmsg_set(-EINVAL, err, errlen, "threads must be 1..64, not %d", threads);
    smax *s = calloc(1, sizeof *s);
    if (!s) return errmsg_set(-ENOMEM, err, errlen, "out of memory");
    s->nthreads = threads;
    if (threads > 1 && cpu_pool_new(threads, &s->pool) < 0) {
        free(s);
        return errmsg_set(-EAGAIN, err, errlen, "cannot start %d threads", threads);
    }
    loader ld = {.err = err, .errlen = errlen};
    char path[4096], *text = NULL;
    int rc;
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "rb");
    if (!f) {
        rc = errmsg_set(-errno, err, errlen, "%s: %s", path, strerror(errno));
        smax_free(s);
        return rc;
    }
    text = calloc(1, 1 << 20);
    size_t len = text ? fread(text, 1, (1 << 20) - 1, f) : 0;
    fclose(f);
    if (!text) { smax_free(s); return errmsg_set(-ENOMEM, err, errlen, "out of memory"); }
    rc = parse_cfg(text, len, path, &s->cfg, err, errlen);
    free(text);
    if (rc < 0) { smax_free(s); return rc; }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if ((rc = st_open(&ld.st, path, err, errlen)) < 0) { smax_free(s); return rc; }
    if ((rc = backend_new("cpu", be, &s->be, err, errlen)) < 0) goto out;
    const smax_cfg *c = &s->cfg;
    int d = c->d_model, hd = c->n_heads * c->d_head;
    if ((rc = take_up(s, &ld, "embed.weight", c->vocab_size, d, 0, &s->embed)) < 0 ||
        (rc = take_up(s, &ld, "ln_f.weight", d, 0, 0, &s->lnf_w)) < 0 ||
        (rc = take_up(s, &ld, "ln_f.bias", d, 0, 0, &s->lnf_b)) < 0 ||
        (rc = take_up(s, &ld, "head.weight", c->vocab_size, d, 1, &s->head)) < 0)
        goto out;
    for (int i = 0; i < c->n_layers; i++)
        if ((rc = load_layer(s, &ld, i)) < 0) goto out;
    /* Activations for one row; the token-shift vectors live in the backend's
     * slot pool (one slot) exactly as the recurrent model keeps them. */
    const backend_ops *o = s->be->ops;
    size_t sc = 3 * (size_t)(d > hd ? d : hd);
    if ((rc = o->buf_new(s->be, (size_t)d, &s->x)) < 0 || (rc = o->buf_new(s->be, (size_t)d, &s->h)) < 0 ||
        (rc = o->buf_new(s->be, (size_t)c->d_ff, &s->ff)) < 0 ||
        (rc = o->buf_new(s->be, c->vocab_size, &s->logits)) < 0)
        goto oom;
    for (int i = 0; i < 3; i++)
        if ((rc = o->buf_new(s->be, sc, &s->scratch[i])) < 0) goto oom;
    if ((rc = o->slots_reserve(s->be, 1, (size_t)c->n_layers * (size_t)d * sizeof(float))) < 0) goto oom;
    s->q = malloc(sizeof(float) * (size_t)hd);
    s->o = malloc(sizeof(float) * (size_t)hd);
    if (!s->q || !s->o) { rc = -ENOMEM; goto oom; }
    rc = 0;
    goto out;
oom:
    errmsg_set(rc, err, errlen, "out of memory for activations");
out:
    st_close(&ld.st);
    if (rc < 0) {
        smax_free(s);
        return rc;
    }
    *out = s;
    return 0;
}

void smax_free(smax *s)
{
    if (!s) return;
    backend *be = s->be;
    if (be) {
        const backend_ops *o = be->ops;
        backend_buf *top[] = {s->embed, s->lnf_w, s->lnf_b, s->head, s->x, s->h, s->ff, s->logits,
                              s->scratch[0], s->scratch[1], s->scratch[2]};
        for (size_t k = 0; k < sizeof top / sizeof top[0]; k++) o->buf_free(be, top[k]);
        for (int i = 0; i < s->cfg.n_layers; i++) {
            smax_layer *L = &s->L[i];
            backend_buf *bs[] = {L->ln1_w, L->ln1_b, L->ln2_w, L->ln2_b, L->w1, L->b1, L->w2, L->b2, L->wo};
            for (size_t k = 0; k < sizeof bs / sizeof bs[0]; k++) o->buf_free(be, bs[k]);
            mixer_proj3_free(&L->qkv, be);
        }
        backend_free(be);
    }
    for (int i = 0; i < s->cfg.n_layers; i++) {
        free(s->L[i].K);
        free(s->L[i].V);
    }
    free(s->q);
    free(s->o);
    free(s->scores);
    cpu_pool_free(s->pool);
    free(s);
}

const smax_cfg *smax_config(const smax *s) { return &s->cfg; }

size_t smax_kv_bytes_per_token(const smax *s)
{
    return 2 * (size_t)s->cfg.n_layers * (size_t)s->cfg.n_heads * (size_t)s->cfg.d_head * sizeof(float);
}

size_t smax_session_bytes(const smax *s, long n)
{
    return smax_kv_bytes_per_token(s) * (size_t)n + (size_t)s->cfg.n_layers * (size_t)s->cfg.d_model * sizeof(float);
}

/* ---- the cache --------------------------------------------------------------- */

int smax_reserve(smax *s, long cap)
{
    if (cap <= s->cap) return 0;
    int H = s->cfg.n_heads, dh = s->cfg.d_head, nl = s->cfg.n_layers;
    size_t per = (size_t)H * (size_t)cap * (size_t)dh;
    float *nk[LIND_MAX_LAYERS] = {0}, *nv[LIND_MAX_LAYERS] = {0};
    float *sc = malloc(sizeof(float) * (size_t)cap * (size_t)s->nthreads);
    int ok = sc != NULL;
    for (int i = 0; i < nl && ok; i++) {
        nk[i] = malloc(per * sizeof(float));
        nv[i] = malloc(per * sizeof(float));
        ok = nk[i] && nv[i];
    }
    if (!ok) {
        for (int i = 0; i < nl; i++) {
            free(nk[i]);
            free(nv[i]);
        }
        free(sc);
        return -ENOMEM;
    }
    for (int i = 0; i < nl; i++) {
        for (int h = 0; h < H && s->pos; h++) {
            memcpy(nk[i] + (size_t)h * cap * dh, s->L[i].K + (size_t)h * s->cap * dh, sizeof(float) * s->pos * dh);
            memcpy(nv[i] + (size_t)h * cap * dh, s->L[i].V + (size_t)h * s->cap * dh, sizeof(float) * s->pos * dh);
        }
        free(s->L[i].K);
        free(s->L[i].V);
        s->L[i].K = nk[i];
        s->L[i].V = nv[i];
    }
    free(s->scores);
    s->scores = sc;
    s->cap = cap;
    return 0;
}

void smax_reset(smax *s)
{
    s->pos = 0;
    s->be->ops->slot_zero(s->be, 0);
}

long smax_position(const smax *s) { return s->pos; }

int smax_set_position(smax *s, long n)
{
    if (n < 0 || n > s->cap || (n > s->pos && s->pos == 0)) return -EINVAL;
    int H = s->cfg.n_heads, dh = s->cfg.d_head;
    for (int i = 0; i < s->cfg.n_layers; i++)
        for (int h = 0; h < H; h++) {
            float *k = s->L[i].K + (size_t)h * s->cap * dh, *v = s->L[i].V + (size_t)h * s->cap * dh;
            /* Doubling copies: rows [0, t) repeated into [t, min(2t, n)). */
            for (long t = s->pos; t < n;) {
                long m = t < n - t ? t : n - t;
                memcpy(k + (size_t)t * dh, k, sizeof(float) * (size_t)m * dh);
                memcpy(v + (size_t)t * dh, v, sizeof(float) * (size_t)m * dh);
                t += m;
            }
        }
    s->pos = n;
    return 0;
}

/* ---- the step ---------------------------------------------------------------- */

/* One layer's attention, heads split into contiguous blocks over the pool. */
typedef struct attn_job {
    smax *s;
    const smax_layer *L;
    long n;
    float scale;
} attn_job;

static void attn_part(void *arg, int part, int nparts)
{
    attn_job *j = arg;
    smax *s = j->s;
    int H = s->cfg.n_heads, dh = s->cfg.d_head;
    for (int h = H * part / nparts; h < H * (part + 1) / nparts; h++)
        attend(j->L->K + (size_t)h * s->cap * dh, j->L->V + (size_t)h * s->cap * dh, j->n, dh, s->q + h * dh,
               j->scale, s->scores + (size_t)part * s->cap, s->o + h * dh);
}

int smax_step(smax *s, int token, float *logits)
{
    const smax_cfg *c = &s->cfg;
    if (token < 0 || token >= c->vocab_size || s->pos >= s->cap) return -EINVAL;
    backend *be = s->be;
    const backend_ops *o = be->ops;
    int d = c->d_model, dff = c->d_ff, H = c->n_heads, dh = c->d_head, hd = H * dh, slot = 0, rc;
    long t = s->pos, n = t + 1;
    float scale = 1.0f / sqrtf((float)dh);
    if ((rc = o->begin_step(be, &slot, &token, 1)) < 0) return rc;
    if ((rc = o->embed(be, s->embed, s->x, d)) < 0) return rc;
    layer_io io = {.be = be, .R = 1, .h = s->h, .x = s->x, .scratch = {s->scratch[0], s->scratch[1], s->scratch[2]}};
    for (int i = 0; i < c->n_layers; i++) {
        smax_layer *L = &s->L[i];
        if ((rc = o->layernorm(be, s->x, s->h, L->ln1_w, L->ln1_b, d, c->norm_eps)) < 0) return rc;
        backend_buf *qkv = s->scratch[0], *ob = s->scratch[2];
        if ((rc = mixer_proj3_run(&L->qkv, &io, (size_t)i * (size_t)d * sizeof(float), qkv)) < 0) return rc;
        /* q to the host, k and v straight into row t of each head's cache. */
        if ((rc = o->buf_download(be, qkv, 0, s->q, (size_t)hd)) < 0) return rc;
        for (int h = 0; h < H; h++) {
            size_t row = ((size_t)h * s->cap + (size_t)t) * dh;
            if ((rc = o->buf_download(be, qkv, (size_t)hd + (size_t)h * dh, L->K + row, (size_t)dh)) < 0 ||
                (rc = o->buf_download(be, qkv, 2 * (size_t)hd + (size_t)h * dh, L->V + row, (size_t)dh)) < 0)
                return rc;
        }
        attn_job job = {s, L, n, scale};
        int parts = s->nthreads < H ? s->nthreads : H;
        if (s->pool && parts > 1) cpu_pool_run(s->pool, attn_part, &job, parts);
        else attn_part(&job, 0, 1);
        if ((rc = o->buf_upload(be, ob, 0, s->o, (size_t)hd)) < 0) return rc;
        /* x[1 × d] += o[1 × hd] · Wo[d × hd]ᵀ */
        if ((rc = o->matmul(be, bmview(s->x, 0, d), bview(ob, 0, hd), L->wo, NULL, 1, d, hd, BACKEND_MM_ACCUMULATE)) < 0)
            return rc;
        if ((rc = o->layernorm(be, s->x, s->h, L->ln2_w, L->ln2_b, d, c->norm_eps)) < 0) return rc;
        /* ff[1 × dff] = GELU(h[1 × d] · W1[dff × d]ᵀ + b1) */
        if ((rc = o->matmul(be, bmview(s->ff, 0, dff), bview(s->h, 0, d), L->w1, L->b1, 1, dff, d, BACKEND_MM_GELU)) < 0)
            return rc;
        /* x[1 × d] += ff[1 × dff] · W2[d × dff]ᵀ + b2 */
        if ((rc = o->matmul(be, bmview(s->x, 0, d), bview(s->ff, 0, dff), L->w2, L->b2, 1, d, dff,
                            BACKEND_MM_ACCUMULATE)) < 0)
            return rc;
    }
    s->pos = n;
    if (!logits) return 0;
    if ((rc = o->layernorm(be, s->x, s->h, s->lnf_w, s->lnf_b, d, c->norm_eps)) < 0) return rc;
    /* logits[1 × V] = h[1 × d] · head[V × d]ᵀ */
    if ((rc = o->matmul(be, bmview(s->logits, 0, c->vocab_size), bview(s->h, 0, d), s->head, NULL, 1, c->vocab_size, d,
                        0)) < 0)
        return rc;
    return o->buf_download(be, s->logits, 0, logits, c->vocab_size);
}
