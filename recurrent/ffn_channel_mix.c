/* recurrent/ffn_channel_mix.c — RWKV-4's channel mixing, an FFN with its
 * own token shift:
 *   h_k = μ_k⊙h_t + (1−μ_k)⊙h_{t−1},  h_r likewise with μ_r
 *   x += σ(Wr·h_r) ⊙ (Wv·max(0, Wk·h_k)²)
 * Key: d_ff (required). State per session: h_{t−1} (d floats, "ffn.shift").
 * Wk [F × d], Wr [d × d], Wv [d × F]. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "recurrent/ffn.h"

typedef struct cmix_params { int F; } cmix_params;

enum { T_WK, T_WR, T_WV, T_MUK, T_MUR };

typedef struct cmix {
    backend_buf *wk, *wr, *wv, *mu;   /* mu [2 × d]: μ_k then μ_r */
    int d, F;
} cmix;

static int cmix_configure(const kind_scope *s, const lind_config *c, void *params, char *err, size_t errlen)
{
    (void)c;
    cmix_params *p = params;
    return kind_cfg_int(s, "d_ff", 1, 0, 1, 1 << 20, &p->F, err, errlen);
}

static int cmix_tensors(const lind_config *c, const void *params, kind_tensor *t)
{
    const cmix_params *p = params;
    int d = c->d_model, F = p->F;
    t[T_WK] = (kind_tensor){"wk", 2, {F, d}, 0, 1};
    t[T_WR] = (kind_tensor){"wr", 2, {d, d}, 0, 1};
    t[T_WV] = (kind_tensor){"wv", 2, {d, F}, 0, 1};
    t[T_MUK] = (kind_tensor){"mu_k", 1, {d, 0}, 0, 0};
    t[T_MUR] = (kind_tensor){"mu_r", 1, {d, 0}, 0, 0};
    return 5;
}

static int cmix_regions(const lind_config *c, const void *params, const void *priv, kind_region *r)
{
    (void)priv;   /* the layout follows from the configuration alone */
    (void)params;
    r[0] = (kind_region){"shift", LIND_EL_F32, (size_t)c->d_model};
    return 1;
}

static size_t cmix_scratch(const lind_config *c, const void *params)
{
    size_t F = (size_t)((const cmix_params *)params)->F, d2 = 2 * (size_t)c->d_model;
    return F > d2 ? F : d2;
}

static void cmix_free(void *priv, backend *be)
{
    cmix *X = priv;
    if (!X) return;
    be->ops->buf_free(be, X->wk);
    be->ops->buf_free(be, X->wr);
    be->ops->buf_free(be, X->wv);
    be->ops->buf_free(be, X->mu);
    free(X);
}

static int cmix_load(const lind_config *c, const void *params, kind_ctx *ctx, const kind_weight *t, void **priv,
                     char *err, size_t errlen)
{
    const cmix_params *p = params;
    cmix *X = calloc(1, sizeof *X);
    float *mu = NULL;
    if (!X) return -ENOMEM;
    int d = X->d = c->d_model, rc;
    X->F = p->F;
    if (!(mu = malloc(2 * (size_t)d * sizeof *mu))) { rc = -ENOMEM; goto fail; }
    memcpy(mu, t[T_MUK].f32, (size_t)d * sizeof *mu);
    memcpy(mu + d, t[T_MUR].f32, (size_t)d * sizeof *mu);
    if ((rc = kind_matrix(ctx, &t[T_WK], X->F, d, 1.0f, &X->wk)) < 0 ||
        (rc = kind_matrix(ctx, &t[T_WR], d, d, 1.0f, &X->wr)) < 0 ||
        (rc = kind_matrix(ctx, &t[T_WV], d, X->F, ctx->out_scale, &X->wv)) < 0 ||
        (rc = kind_vector(ctx, mu, 2 * (size_t)d, &X->mu)) < 0)
        goto fail;
    free(mu);
    *priv = X;
    return 0;
fail:
    snprintf(err, errlen, "layer %d rwkv_channel_mix: backend error %d while uploading weights", ctx->layer, rc);
    free(mu);
    cmix_free(X, ctx->be);
    return rc;
}

static int cmix_step(void *priv, const layer_io *io)
{
    cmix *X = priv;
    backend *be = io->be;
    const backend_ops *o = be->ops;
    int d = X->d, F = X->F, R = io->R, rc;
    backend_buf *mix = io->scratch[1], *k = io->scratch[0], *r = io->scratch[2];
    if ((rc = o->shift_mix(be, io->h, X->mu, mix, io->region_off[0], d, 2)) < 0 ||   /* [R × 2d] */
        /* k[R × F] = relu²(x_k[R × d] · Wk[F × d]ᵀ), x_k columns 0.. of mix */
        (rc = o->matmul(be, bmview(k, 0, F), bview(mix, 0, 2 * d), X->wk, NULL, R, F, d, BACKEND_MM_RELU2)) < 0 ||
        /* r[R × d] = σ(x_r[R × d] · Wr[d × d]ᵀ), x_r columns d.. of mix */
        (rc = o->matmul(be, bmview(r, 0, d), bview(mix, (size_t)d, 2 * d), X->wr, NULL, R, d, d,
                        BACKEND_MM_SIGMOID)) < 0 ||
        /* v[R × d] = k[R × F] · Wv[d × F]ᵀ, over mix */
        (rc = o->matmul(be, bmview(mix, 0, d), bview(k, 0, F), X->wv, NULL, R, d, F, 0)) < 0)
        return rc;
    return o->gated_add(be, io->x, r, 0, d, mix, 0, d, d);
}

const layer_kind ffn_rwkv_channel_mix = {
    .name = "rwkv_channel_mix",
    .configure = cmix_configure,
    .tensors = cmix_tensors,
    .regions = cmix_regions,
    .scratch_floats = cmix_scratch,
    .load = cmix_load,
    .step = cmix_step,
    .free = cmix_free,
};
