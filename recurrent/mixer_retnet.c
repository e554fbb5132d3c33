/* recurrent/mixer_retnet.c — retention (RetNet, Sun et al. 2023) in
 * recurrent form, per head h of n_heads (d_k = d_v = d_head = dh):
 *   q, k, v, g = Wq·h, Wk·h, Wv·h, Wg·h
 *   S_t = γ_h S_{t−1} + k_t v_tᵀ,   o_t = dh^−½ · S_tᵀ q_t
 *   y = Wo · (SiLU(g) ⊙ GroupNorm(concat_h o_h))   (one group per head)
 * No feature map and no normalizer (the group norm takes the scale out);
 * γ is a tensor, "decay" [H], each in (0, 1] (the paper's 1 − 2^{−5−h} is
 * what tools/lindmodel.py writes). No xPos / rotary rotation of q and k: the
 * retention of the paper's recurrent form with Θ = 0.
 * Keys: n_heads, d_head (required), group_norm_eps (1e-5).
 * State per session: S (H·dh·dh). Backend op: retention_step.
 *
 * Long streams: S is a decayed sum, ‖S‖ ≤ max‖k vᵀ‖ / (1 − γ) — bounded for
 * γ < 1; with γ = 1 it grows linearly with t (as the linear mixer's S). S is
 * fp32 when every head of the layer forgets fast enough (mixer_f32_ok() on
 * 1 − γ, decided at load): the op computes in double and rounds each element
 * once per step, and the decay forgets the roundings. Otherwise, and always
 * when a head has γ = 1, S is fp64, whose per-token increments stay resolved
 * against an undecayed sum (docs/NUMERICS.md). Inputs and outputs of a step
 * are fp32; the group norm's mean and variance are taken in double. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "recurrent/mixer.h"

typedef struct ret_params {
    int H, dh;
    float eps;
} ret_params;
_Static_assert(sizeof(ret_params) <= LIND_KIND_PARAMS * 8, "ret_params too big");

enum { T_WQ, T_WK, T_WV, T_WG, T_WO, T_DECAY, T_GNW, T_GNB };

typedef struct ret {
    backend_buf *wqkv;    /* [3·hd × d], fused */
    backend_buf *wg;      /* [hd × d] */
    backend_buf *wo;      /* [d × hd] */
    backend_buf *gamma;   /* [H] */
    backend_buf *norm;    /* [2·hd]: group norm weight, then bias */
    int H, dh, d;
    float eps;
    int f32;              /* S kept as floats */
} ret;

static int ret_configure(const kind_scope *s, const lind_config *c, void *params, char *err, size_t errlen)
{
    (void)c;
    ret_params *p = params;
    int rc;
    if ((rc = kind_cfg_int(s, "n_heads", 1, 0, 1, 1 << 12, &p->H, err, errlen)) ||
        (rc = kind_cfg_int(s, "d_head", 1, 0, 1, 1 << 10, &p->dh, err, errlen)) ||
        (rc = kind_cfg_num(s, "group_norm_eps", 0, 1e-5, 0.0, 1.0, &p->eps, err, errlen)))
        return rc;
    if ((long)p->H * p->dh > (1 << 16)) {
        snprintf(err, errlen, "%s: n_heads × d_head = %ld is over 65536", kind_scope_where(s), (long)p->H * p->dh);
        return -EINVAL;
    }
    return 0;
}

static int ret_tensors(const lind_config *c, const void *params, kind_tensor *t)
{
    const ret_params *p = params;
    int hd = p->H * p->dh, d = c->d_model;
    t[T_WQ] = (kind_tensor){"wq", 2, {hd, d}, 0, 1};
    t[T_WK] = (kind_tensor){"wk", 2, {hd, d}, 0, 1};
    t[T_WV] = (kind_tensor){"wv", 2, {hd, d}, 0, 1};
    t[T_WG] = (kind_tensor){"wg", 2, {hd, d}, 0, 1};
    t[T_WO] = (kind_tensor){"wo", 2, {d, hd}, 0, 1};
    t[T_DECAY] = (kind_tensor){"decay", 1, {p->H, 0}, 0, 0};
    t[T_GNW] = (kind_tensor){"gn_weight", 1, {hd, 0}, 0, 0};
    t[T_GNB] = (kind_tensor){"gn_bias", 1, {hd, 0}, 0, 0};
    return T_GNB + 1;
}

static int ret_regions(const lind_config *c, const void *params, const void *priv, kind_region *r)
{
    (void)c;
    const ret_params *p = params;
    const ret *X = priv;
    r[0] = (kind_region){"S", X && X->f32 ? LIND_EL_F32 : LIND_EL_F64, (size_t)p->H * p->dh * p->dh};
    return 1;
}

/* scratch[0]: q | k | v | g [R × 4·hd]; scratch[2]: gated outputs [R × hd]. */
static size_t ret_scratch(const lind_config *c, const void *params)
{
    (void)c;
    const ret_params *p = params;
    return 4 * (size_t)p->H * (size_t)p->dh;
}

static void ret_free(void *priv, backend *be)
{
    ret *X = priv;
    if (!X) return;
    backend_buf *b[] = {X->wqkv, X->wg, X->wo, X->gamma, X->norm};
    for (size_t i = 0; i < sizeof b / sizeof b[0]; i++) be->ops->buf_free(be, b[i]);
    free(X);
}

static int ret_load(const lind_config *c, const void *params, kind_ctx *ctx, const kind_weight *t, void **priv,
                    char *err, size_t errlen)
{
    const ret_params *p = params;
    backend *be = ctx->be;
    static const backend_op need[] = {BACKEND_OP_RETENTION_STEP};
    if (kind_require_ops(ctx, "mixer \"retnet\"", need, (int)(sizeof need / sizeof *need), err, errlen) < 0)
        return -ENOTSUP;
    int H = p->H, hd = H * p->dh, rc;
    const float *decay = t[T_DECAY].f32;
    for (int h = 0; h < H; h++)
        if (!(decay[h] > 0.0f && decay[h] <= 1.0f)) {
            snprintf(err, errlen, "tensor 'layers.%d.mixer.decay': γ[%d] = %g is outside (0, 1]", ctx->layer, h,
                     (double)decay[h]);
            return -EINVAL;
        }
    float *norm = malloc(2 * (size_t)hd * sizeof *norm);
    ret *X = calloc(1, sizeof *X);
    if (!norm || !X) {
        free(norm);
        free(X);
        return -ENOMEM;
    }
    X->H = H;
    X->dh = p->dh;
    X->d = c->d_model;
    X->eps = p->eps;
    X->f32 = 1;
    for (int h = 0; h < H; h++)
        if (!mixer_f32_ok(1.0 - (double)decay[h])) X->f32 = 0;   /* exact for a float γ in (0, 1] */
    for (int i = 0; i < hd; i++) {
        norm[i] = t[T_GNW].f32[i];
        norm[hd + i] = t[T_GNB].f32[i];
    }
    const kind_weight *W[3] = {&t[T_WQ], &t[T_WK], &t[T_WV]};
    if ((rc = kind_matrix3(ctx, W, hd, X->d, &X->wqkv)) < 0 ||
        (rc = kind_matrix(ctx, &t[T_WG], hd, X->d, 1.0f, &X->wg)) < 0 ||
        (rc = kind_matrix(ctx, &t[T_WO], X->d, hd, ctx->out_scale, &X->wo)) < 0 ||
        (rc = kind_vector(ctx, decay, (size_t)H, &X->gamma)) < 0 ||
        (rc = kind_vector(ctx, norm, 2 * (size_t)hd, &X->norm)) < 0) {
        snprintf(err, errlen, "layer %d retnet mixer: backend error %d while uploading weights", ctx->layer, rc);
        free(norm);
        ret_free(X, be);
        return rc;
    }
    free(norm);
    *priv = X;
    return 0;
}

static int ret_step(void *priv, const layer_io *io)
{
    ret *X = priv;
    backend *be = io->be;
    const backend_ops *o = be->ops;
    int hd = X->H * X->dh, d = X->d, R = io->R, rc;
    backend_buf *in = io->scratch[0], *out = io->scratch[2];
    /* qkv[R × 3hd] = h[R × d] · Wqkv[3hd × d]ᵀ, columns 0.. of in [R × 4hd] */
    if ((rc = o->matmul(be, bmview(in, 0, 4 * hd), bview(io->h, 0, d), X->wqkv, NULL, R, 3 * hd, d, 0)) < 0 ||
        /* g[R × hd] = h[R × d] · Wg[hd × d]ᵀ, columns 3hd.. of in */
        (rc = o->matmul(be, bmview(in, (size_t)3 * hd, 4 * hd), bview(io->h, 0, d), X->wg, NULL, R, hd, d, 0)) < 0 ||
        (rc = o->retention_step(be, in, X->gamma, X->norm, out, io->region_off[0], X->H, X->dh, X->eps,
                                   X->f32)) < 0)
        return rc;
    /* x[R × d] += out[R × hd] · Wo[d × hd]ᵀ */
    return o->matmul(be, bmview(io->x, 0, d), bview(out, 0, hd), X->wo, NULL, R, d, hd, BACKEND_MM_ACCUMULATE);
}

const layer_kind mixer_retnet = {
    .name = "retnet",
    .configure = ret_configure,
    .tensors = ret_tensors,
    .regions = ret_regions,
    .scratch_floats = ret_scratch,
    .load = ret_load,
    .step = ret_step,
    .free = ret_free,
};
