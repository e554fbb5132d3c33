/* recurrent/mixer_performer.c — Performer (Choromanski et al. 2021): linear
 * attention with FAVOR+ positive random features, in recurrent form. Per head
 * h of n_heads (d_head = dh), with m = n_features random features from the
 * stored projection omega [m × dh] (shared by the heads; fixed and seeded by
 * whoever wrote the file — tools/lindmodel.py draws it from its seed):
 *   q, k, v = Wq·h, Wk·h, Wv·h
 *   φ(x)_f = exp(ω_fᵀx̂ − ‖x̂‖²/2)/√m,   x̂ = x·dh^−¼
 *   S ← S + φ(k)vᵀ,  z ← z + φ(k),  o = φ(q)ᵀS / (φ(q)ᵀz + attn_eps)
 *   y = Wo·concat(o)
 * so that E[φ(q)ᵀφ(k)] = exp(qᵀk/√dh): causal softmax attention in
 * expectation. Keys: n_heads, d_head, n_features (required, m ≥ d_head),
 * attn_eps (0: the features are positive, the denominator never is 0). The
 * ε is added to the shifted form's denominator (below), as the training
 * form adds it; in unshifted terms it is ε·e^{c_q+c_k}/m (docs/KINDS.md).
 *
 * Computed in a numerically safe way (kernels/mixer_math.h,
 * lind_favor_head): the features are formed in log form in double and
 * shifted by a constant that cancels in the ratio — a query by its own
 * largest exponent, keys by max_f ‖ω_f‖²/2, which bounds every key's
 * exponent — so no feature exceeds 1, nothing overflows, and the 1/√m is
 * dropped (it cancels). The stateful part is the linear mixer's op,
 * linear_step, fed the log-features: its φ = elu + 1 is e^u for u ≤ 0. That
 * op keeps S [m × m] per head, so v is zero-padded from dh to m columns
 * (Wv gets m − dh zero rows per head, Wo as many zero columns): m ≥ dh is
 * required, and the state is H·m·(m + 1) doubles.
 *
 * Long streams: S and z are running sums (no decay): z grows by at most 1
 * per token and feature, S by |v|. Both are fp64 (docs/NUMERICS.md): after
 * 10^9 tokens a new term is still resolved to ~1e-7 of the sum. Features
 * are fp32 (e^u of a float u ≤ 0, relative error ~|u|·6e-8). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "recurrent/mixer.h"

typedef struct perf_params {
    int H, dh, m;
    float eps;
} perf_params;
_Static_assert(sizeof(perf_params) <= LIND_KIND_PARAMS * 8, "perf_params too big");

enum { T_WQ, T_WK, T_WV, T_WO, T_OMEGA };

typedef struct perf {
    backend_buf *wqk;     /* [2·hd × d], fused */
    backend_buf *wv;      /* [H·m × d]: Wv with m − dh zero rows after each head */
    backend_buf *wo;      /* [d × H·m]: Wo with m − dh zero columns after each head */
    backend_buf *omega;   /* [m × dh] */
    int H, dh, m, d;
    float eps, ck;        /* the keys' shift max_f ‖ω_f‖²/2 */
} perf;

static int perf_configure(const kind_scope *s, const lind_config *c, void *params, char *err, size_t errlen)
{
    (void)c;
    perf_params *p = params;
    int rc;
    if ((rc = kind_cfg_int(s, "n_heads", 1, 0, 1, 1 << 12, &p->H, err, errlen)) ||
        (rc = kind_cfg_int(s, "d_head", 1, 0, 1, 1 << 10, &p->dh, err, errlen)) ||
        (rc = kind_cfg_int(s, "n_features", 1, 0, 1, 1 << 10, &p->m, err, errlen)) ||
        (rc = kind_cfg_num(s, "attn_eps", 0, 0.0, 0.0, 1.0, &p->eps, err, errlen)))
        return rc;
    if (p->m < p->dh) {
        snprintf(err, errlen, "%s: n_features = %d is below d_head = %d (the performer mixer needs m ≥ d_head)",
                 kind_scope_where(s), p->m, p->dh);
        return -EINVAL;
    }
    if ((long)p->H * p->m > (1 << 16)) {
        snprintf(err, errlen, "%s: n_heads × n_features = %ld is over 65536", kind_scope_where(s), (long)p->H * p->m);
        return -EINVAL;
    }
    return 0;
}

static int perf_tensors(const lind_config *c, const void *params, kind_tensor *t)
{
    const perf_params *p = params;
    int hd = p->H * p->dh, d = c->d_model;
    t[T_WQ] = (kind_tensor){"wq", 2, {hd, d}, 0, 1};
    t[T_WK] = (kind_tensor){"wk", 2, {hd, d}, 0, 1};
    t[T_WV] = (kind_tensor){"wv", 2, {hd, d}, 0, 1};
    t[T_WO] = (kind_tensor){"wo", 2, {d, hd}, 0, 1};
    t[T_OMEGA] = (kind_tensor){"omega", 2, {p->m, p->dh}, 0, 0};
    return T_OMEGA + 1;
}

static int perf_regions(const lind_config *c, const void *params, const void *priv, kind_region *r)
{
    (void)priv;   /* the layout follows from the configuration alone */
    (void)c;
    const perf_params *p = params;
    size_t H = (size_t)p->H, m = (size_t)p->m;
    r[0] = (kind_region){"S", LIND_EL_F64, H * m * m};   /* linear_step's layout: S then z */
    r[1] = (kind_region){"z", LIND_EL_F64, H * m};
    return 2;
}

/* scratch[0]: q | k [R × 2·hd]; scratch[1]: log-features of q, of k, and the
 * padded v [R × 3·H·m]; scratch[2]: head outputs [R × H·m]. */
static size_t perf_scratch(const lind_config *c, const void *params)
{
    (void)c;
    const perf_params *p = params;
    return 3 * (size_t)p->H * (size_t)p->m;
}

static void perf_free(void *priv, backend *be)
{
    perf *X = priv;
    if (!X) return;
    backend_buf *b[] = {X->wqk, X->wv, X->wo, X->omega};
    for (size_t i = 0; i < sizeof b / sizeof b[0]; i++) be->ops->buf_free(be, b[i]);
    free(X);
}

/* A copy of w [N × K] (fp32 or half, element size es) with rows and columns
 * spread: element (n, k) goes to (n + pad_r·(n / blk_r), k + pad_c·(k / blk_c))
 * of [N2 × K2]; the rest is zero (0 bits are 0.0 in fp32, fp16 and bf16). */
static void *spread(const kind_weight *w, int N, int K, int blk_r, int pad_r, int blk_c, int pad_c, int N2, int K2)
{
    size_t es = w->half ? 2 : 4;
    const unsigned char *src = w->half ? (const void *)w->half : (const void *)w->f32;
    unsigned char *dst = calloc((size_t)N2 * K2, es);
    if (!dst) return NULL;
    for (int n = 0; n < N; n++) {
        size_t rn = (size_t)n + (size_t)pad_r * (size_t)(n / blk_r);
        for (int k = 0; k < K; k++) {
            size_t ck = (size_t)k + (size_t)pad_c * (size_t)(k / blk_c);
            memcpy(dst + (rn * K2 + ck) * es, src + ((size_t)n * K + k) * es, es);
        }
    }
    return dst;
}

static int perf_load(const lind_config *c, const void *params, kind_ctx *ctx, const kind_weight *t, void **priv,
                     char *err, size_t errlen)
{
    const perf_params *p = params;
    backend *be = ctx->be;
    static const backend_op need[] = {BACKEND_OP_FAVOR_FEATURES, BACKEND_OP_LINEAR_STEP};
    if (kind_require_ops(ctx, "mixer \"performer\"", need, (int)(sizeof need / sizeof *need), err, errlen) < 0)
        return -ENOTSUP;
    int H = p->H, dh = p->dh, m = p->m, hd = H * dh, d = c->d_model, rc;
    const float *om = t[T_OMEGA].f32;
    double ck = 0.0;
    for (int f = 0; f < m; f++) {
        double n2 = 0.0;
        for (int i = 0; i < dh; i++) n2 += (double)om[(size_t)f * dh + i] * om[(size_t)f * dh + i];
        if (!isfinite(n2)) {
            snprintf(err, errlen, "tensor 'layers.%d.mixer.omega': row %d is not finite", ctx->layer, f);
            return -EINVAL;
        }
        ck = n2 / 2 > ck ? n2 / 2 : ck;
    }
    perf *X = calloc(1, sizeof *X);
    void *wv = spread(&t[T_WV], hd, d, dh, m - dh, d, 0, H * m, d);
    void *wo = spread(&t[T_WO], d, hd, d, 0, dh, m - dh, d, H * m);
    if (!X || !wv || !wo) {
        free(X);
        free(wv);
        free(wo);
        return -ENOMEM;
    }
    X->H = H;
    X->dh = dh;
    X->m = m;
    X->d = d;
    X->eps = p->eps;
    /* ω_fᵀx̂ − ‖x̂‖²/2 ≤ ‖ω_f‖²/2 for any x̂; rounded up to a float (a key's
     * u may still round above 0 by an ulp: lind_favor_head clamps it). */
    X->ck = (float)ck;
    if ((double)X->ck < ck) X->ck = nextafterf(X->ck, INFINITY);
    kind_weight pv = t[T_WV], po = t[T_WO];
    if (pv.half) pv.half = wv; else pv.f32 = wv;
    if (po.half) po.half = wo; else po.f32 = wo;
    {
        /* q and k as one [2·hd × d] weight: kind_matrix3 fuses three, so build the pair here */
        size_t es = t[T_WQ].half ? 2 : 4, n = (size_t)hd * d * es;
        unsigned char *qk = malloc(2 * n);
        if (!qk) { rc = -ENOMEM; goto fail; }
        memcpy(qk, t[T_WQ].half ? (const void *)t[T_WQ].half : (const void *)t[T_WQ].f32, n);
        memcpy(qk + n, t[T_WK].half ? (const void *)t[T_WK].half : (const void *)t[T_WK].f32, n);
        kind_weight pqk = t[T_WQ];
        if (pqk.half) pqk.half = (const uint16_t *)qk; else pqk.f32 = (const float *)qk;
        rc = kind_matrix(ctx, &pqk, 2 * hd, d, 1.0f, &X->wqk);
        free(qk);
        if (rc < 0) goto fail;
    }
    if ((rc = kind_matrix(ctx, &pv, H * m, d, 1.0f, &X->wv)) < 0 ||
        (rc = kind_matrix(ctx, &po, d, H * m, ctx->out_scale, &X->wo)) < 0 ||
        (rc = kind_vector(ctx, om, (size_t)m * dh, &X->omega)) < 0)
        goto fail;
    free(wv);
    free(wo);
    *priv = X;
    return 0;
fail:
    snprintf(err, errlen, "layer %d performer mixer: backend error %d while uploading weights", ctx->layer, rc);
    free(wv);
    free(wo);
    perf_free(X, be);
    return rc;
}

static int perf_step(void *priv, const layer_io *io)
{
    perf *X = priv;
    backend *be = io->be;
    const backend_ops *o = be->ops;
    int H = X->H, hd = H * X->dh, Hm = H * X->m, d = X->d, R = io->R, rc;
    backend_buf *qk = io->scratch[0], *in = io->scratch[1], *out = io->scratch[2];
    /* qk[R × 2hd] = h[R × d] · Wqk[2hd × d]ᵀ */
    if ((rc = o->matmul(be, bmview(qk, 0, 2 * hd), bview(io->h, 0, d), X->wqk, NULL, R, 2 * hd, d, 0)) < 0 ||
        /* v[R × Hm] = h[R × d] · Wv[Hm × d]ᵀ, columns 2Hm.. of in [R × 3Hm] */
        (rc = o->matmul(be, bmview(in, (size_t)2 * Hm, 3 * Hm), bview(io->h, 0, d), X->wv, NULL, R, Hm, d, 0)) < 0 ||
        (rc = o->favor_features(be, qk, 2 * hd, X->omega, in, 3 * Hm, H, X->dh, X->m, X->ck)) < 0 ||
        (rc = o->linear_step(be, in, NULL, out, io->region_off[0], H, X->m, X->eps)) < 0)
        return rc;
    /* x[R × d] += out[R × Hm] · Wo[d × Hm]ᵀ */
    return o->matmul(be, bmview(io->x, 0, d), bview(out, 0, Hm), X->wo, NULL, R, d, Hm, BACKEND_MM_ACCUMULATE);
}

const layer_kind mixer_performer = {
    .name = "performer",
    .configure = perf_configure,
    .tensors = perf_tensors,
    .regions = perf_regions,
    .scratch_floats = perf_scratch,
    .load = perf_load,
    .step = perf_step,
    .free = perf_free,
};
