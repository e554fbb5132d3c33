/* recurrent/ffn_gelu.c — the GELU MLP: x += W2·GELU(W1·h + b1) + b2 (erf
 * GELU, fused into the W1 product). Key: d_ff (required). No state. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "recurrent/ffn.h"

typedef struct gelu_params { int F; } gelu_params;

enum { T_W1, T_B1, T_W2, T_B2 };

typedef struct gelu_mlp {
    backend_buf *w1, *b1, *w2, *b2;   /* [F × d], [F], [d × F], [d] */
    int d, F;
} gelu_mlp;

static int gelu_configure(const kind_scope *s, const lind_config *c, void *params, char *err, size_t errlen)
{
    (void)c;
    gelu_params *p = params;
    return kind_cfg_int(s, "d_ff", 1, 0, 1, 1 << 18, &p->F, err, errlen);
}

static int gelu_tensors(const lind_config *c, const void *params, kind_tensor *t)
{
    const gelu_params *p = params;
    int d = c->d_model, F = p->F;
    t[T_W1] = (kind_tensor){"w1", 2, {F, d}, 0, 1};
    t[T_B1] = (kind_tensor){"b1", 1, {F, 0}, 0, 0};
    t[T_W2] = (kind_tensor){"w2", 2, {d, F}, 0, 1};
    t[T_B2] = (kind_tensor){"b2", 1, {d, 0}, 0, 0};
    return 4;
}

static int gelu_regions(const lind_config *c, const void *params, const void *priv, kind_region *r)
{
    (void)priv;   /* the layout follows from the configuration alone */
    (void)c; (void)params; (void)r;
    return 0;
}

static size_t gelu_scratch(const lind_config *c, const void *params)
{
    (void)c;
    return (size_t)((const gelu_params *)params)->F;
}

static void gelu_free(void *priv, backend *be)
{
    gelu_mlp *G = priv;
    if (!G) return;
    be->ops->buf_free(be, G->w1);
    be->ops->buf_free(be, G->b1);
    be->ops->buf_free(be, G->w2);
    be->ops->buf_free(be, G->b2);
    free(G);
}

static int gelu_load(const lind_config *c, const void *params, kind_ctx *ctx, const kind_weight *t, void **priv,
                     char *err, size_t errlen)
{
    const gelu_params *p = params;
    gelu_mlp *G = calloc(1, sizeof *G);
    float *b2 = NULL;
    if (!G) return -ENOMEM;
    G->d = c->d_model;
    G->F = p->F;
    int rc;
    const float *b2src = t[T_B2].f32;
    if (ctx->out_scale != 1.0f) {   /* the output scaled as a whole: bias too */
        if (!(b2 = malloc((size_t)G->d * sizeof *b2))) { rc = -ENOMEM; goto fail; }
        for (int i = 0; i < G->d; i++) b2[i] = b2src[i] * ctx->out_scale;
        b2src = b2;
    }
    if ((rc = kind_matrix(ctx, &t[T_W1], G->F, G->d, 1.0f, &G->w1)) < 0 ||
        (rc = kind_vector(ctx, t[T_B1].f32, (size_t)G->F, &G->b1)) < 0 ||
        (rc = kind_matrix(ctx, &t[T_W2], G->d, G->F, ctx->out_scale, &G->w2)) < 0 ||
        (rc = kind_vector(ctx, b2src, (size_t)G->d, &G->b2)) < 0)
        goto fail;
    free(b2);
    *priv = G;
    return 0;
fail:
    snprintf(err, errlen, "layer %d gelu_mlp: backend error %d while uploading weights", ctx->layer, rc);
    free(b2);
    gelu_free(G, ctx->be);
    return rc;
}

static int gelu_step(void *priv, const layer_io *io)
{
    gelu_mlp *G = priv;
    backend *be = io->be;
    backend_buf *ff = io->scratch[0];   /* [R × F] */
    int rc;
    /* ff[R × F] = GELU(h[R × d] · W1[F × d]ᵀ + b1) */
    if ((rc = be->ops->matmul(be, bmview(ff, 0, G->F), bview(io->h, 0, G->d), G->w1, G->b1, io->R, G->F, G->d,
                              BACKEND_MM_GELU)) < 0)
        return rc;
    /* x[R × d] += ff[R × F] · W2[d × F]ᵀ + b2 */
    return be->ops->matmul(be, bmview(io->x, 0, G->d), bview(ff, 0, G->F), G->w2, G->b2, io->R, G->d, G->F,
                           BACKEND_MM_ACCUMULATE);
}

const layer_kind ffn_gelu_mlp = {
    .name = "gelu_mlp",
    .configure = gelu_configure,
    .tensors = gelu_tensors,
    .regions = gelu_regions,
    .scratch_floats = gelu_scratch,
    .load = gelu_load,
    .step = gelu_step,
    .free = gelu_free,
};
