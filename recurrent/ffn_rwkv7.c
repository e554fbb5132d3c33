/* recurrent/ffn_rwkv7.c — RWKV-7's channel mixing: RWKV-4's without the
 * receptance gate,
 *   h_k = h_t + μ_k⊙(h_{t−1} − h_t)
 *   x += Wv·max(0, Wk·h_k)²
 * Key: d_ff (required). Tensors (BlinkDL's names under the part's prefix):
 * x_k [d], key.weight [F × d], value.weight [d × F]. State per session:
 * h_{t−1} (d floats, "ffn.shift"). BlinkDL's μ weighs h_{t−1}; the backend's
 * shift_mix weighs h_t, so it gets 1 − μ_k. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "recurrent/ffn.h"

typedef struct cmix7_params { int F; } cmix7_params;

enum { T_MUK, T_WK, T_WV };

typedef struct cmix7 {
    backend_buf *wk, *wv, *mu;
    int d, F;
} cmix7;

static int cmix7_configure(const kind_scope *s, const lind_config *c, void *params, char *err, size_t errlen)
{
    (void)c;
    return kind_cfg_int(s, "d_ff", 1, 0, 1, 1 << 20, &((cmix7_params *)params)->F, err, errlen);
}

static int cmix7_tensors(const lind_config *c, const void *params, kind_tensor *t)
{
    int d = c->d_model, F = ((const cmix7_params *)params)->F;
    t[T_MUK] = (kind_tensor){"x_k", 1, {d, 0}, 0, 0};
    t[T_WK] = (kind_tensor){"key.weight", 2, {F, d}, 0, 1};
    t[T_WV] = (kind_tensor){"value.weight", 2, {d, F}, 0, 1};
    return 3;
}

static int cmix7_regions(const lind_config *c, const void *params, const void *priv, kind_region *r)
{
    (void)priv;   /* the layout follows from the configuration alone */
    (void)params;
    r[0] = (kind_region){"shift", LIND_EL_F32, (size_t)c->d_model};
    return 1;
}

/* scratch[0]: the keys [R × F]; scratch[1]: the shifted input [R × d]. */
static size_t cmix7_scratch(const lind_config *c, const void *params)
{
    size_t F = (size_t)((const cmix7_params *)params)->F, d = (size_t)c->d_model;
    return F > d ? F : d;
}

static void cmix7_free(void *priv, backend *be)
{
    cmix7 *X = priv;
    if (!X) return;
    be->ops->buf_free(be, X->wk);
    be->ops->buf_free(be, X->wv);
    be->ops->buf_free(be, X->mu);
    free(X);
}

static int cmix7_load(const lind_config *c, const void *params, kind_ctx *ctx, const kind_weight *t, void **priv,
                      char *err, size_t errlen)
{
    cmix7 *X = calloc(1, sizeof *X);
    if (!X) return -ENOMEM;
    X->d = c->d_model;
    X->F = ((const cmix7_params *)params)->F;
    int rc;
    float *mu = malloc((size_t)X->d * sizeof *mu);
    if (!mu) {
        free(X);
        return -ENOMEM;
    }
    for (int i = 0; i < X->d; i++) mu[i] = 1.0f - t[T_MUK].f32[i];
    if ((rc = kind_matrix(ctx, &t[T_WK], X->F, X->d, 1.0f, &X->wk)) < 0 ||
        (rc = kind_matrix(ctx, &t[T_WV], X->d, X->F, ctx->out_scale, &X->wv)) < 0 ||
        (rc = kind_vector(ctx, mu, (size_t)X->d, &X->mu)) < 0) {
        snprintf(err, errlen, "layer %d rwkv7_channel_mix: backend error %d while uploading weights", ctx->layer, rc);
        free(mu);
        cmix7_free(X, ctx->be);
        return rc;
    }
    free(mu);
    *priv = X;
    return 0;
}

static int cmix7_step(void *priv, const layer_io *io)
{
    cmix7 *X = priv;
    backend *be = io->be;
    const backend_ops *o = be->ops;
    int d = X->d, F = X->F, R = io->R, rc;
    backend_buf *mix = io->scratch[1], *k = io->scratch[0];
    if ((rc = o->shift_mix(be, io->h, X->mu, mix, io->region_off[0], d, 1)) < 0 ||
        /* k[R × F] = relu²(mix[R × d] · Wk[F × d]ᵀ) */
        (rc = o->matmul(be, bmview(k, 0, F), bview(mix, 0, d), X->wk, NULL, R, F, d, BACKEND_MM_RELU2)) < 0)
        return rc;
    /* x[R × d] += k[R × F] · Wv[d × F]ᵀ */
    return o->matmul(be, bmview(io->x, 0, d), bview(k, 0, F), X->wv, NULL, R, d, F, BACKEND_MM_ACCUMULATE);
}

const layer_kind ffn_rwkv7_channel_mix = {
    .name = "rwkv7_channel_mix",
    .configure = cmix7_configure,
    .tensors = cmix7_tensors,
    .regions = cmix7_regions,
    .scratch_floats = cmix7_scratch,
    .load = cmix7_load,
    .step = cmix7_step,
    .free = cmix7_free,
};
