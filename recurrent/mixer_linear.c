/* recurrent/mixer_linear.c — linear attention (Katharopoulos et al. 2020) in
 * recurrent form, with an optional per-head decay γ (RetNet-style when < 1):
 *   q, k, v = Wq·h_q, Wk·h_k, Wv·h_v   (n_heads heads of d_head)
 *   S ← γS + φ(k)vᵀ,  z ← γz + φ(k),  o = φ(q)ᵀS / (φ(q)ᵀz + attn_eps)
 *   y = Wo·concat(o),  φ = elu + 1.
 * Keys: n_heads, d_head (required), feature_map ("elu1"), attn_eps (1e-6),
 * token_shift (false).
 * State per session: S (H·dh·dh doubles), z (H·dh doubles), and with token
 * shift h_{t−1} (d floats). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "recurrent/mixer.h"

typedef struct lin_params {
    int H, dh, shift;
    float eps;
    char feature_map[16];
} lin_params;
_Static_assert(sizeof(lin_params) <= LIND_KIND_PARAMS * 8, "lin_params too big");

enum { T_WQ, T_WK, T_WV, T_WO, T_DECAY, T_MUQ, T_MUK, T_MUV };

typedef struct lin {
    mixer_proj3 qkv;
    backend_buf *wo, *gamma;   /* wo [d × H·dh]; gamma [H] or NULL: γ = 1 */
    int H, dh, d, shift;
    float eps;
} lin;

static int lin_configure(const kind_scope *s, const lind_config *c, void *params, char *err, size_t errlen)
{
    (void)c;
    lin_params *p = params;
    static const char *const maps[] = {"elu1", NULL};
    int rc;
    if ((rc = kind_cfg_int(s, "n_heads", 1, 0, 1, 1 << 12, &p->H, err, errlen)) ||
        (rc = kind_cfg_int(s, "d_head", 1, 0, 1, 1 << 12, &p->dh, err, errlen)) ||
        (rc = kind_cfg_enum(s, "feature_map", 0, "elu1", maps, p->feature_map, sizeof p->feature_map, err, errlen)) ||
        (rc = kind_cfg_num(s, "attn_eps", 0, 1e-6, 0.0, 1.0, &p->eps, err, errlen)) ||
        (rc = kind_cfg_bool(s, "token_shift", 0, 0, &p->shift, err, errlen)))
        return rc;
    if ((long)p->H * p->dh > (1 << 16)) return -EINVAL;
    return 0;
}

static int lin_tensors(const lind_config *c, const void *params, kind_tensor *t)
{
    const lin_params *p = params;
    int hd = p->H * p->dh, d = c->d_model, n = 0;
    t[n++] = (kind_tensor){"wq", 2, {hd, d}, 0, 1};
    t[n++] = (kind_tensor){"wk", 2, {hd, d}, 0, 1};
    t[n++] = (kind_tensor){"wv", 2, {hd, d}, 0, 1};
    t[n++] = (kind_tensor){"wo", 2, {d, hd}, 0, 1};
    t[n++] = (kind_tensor){"decay", 1, {p->H, 0}, 1, 0};
    if (p->shift) {
        t[n++] = (kind_tensor){"mu_q", 1, {d, 0}, 0, 0};
        t[n++] = (kind_tensor){"mu_k", 1, {d, 0}, 0, 0};
        t[n++] = (kind_tensor){"mu_v", 1, {d, 0}, 0, 0};
    }
    return n;
}

static int lin_regions(const lind_config *c, const void *params, const void *priv, kind_region *r)
{
    (void)priv;   /* the layout follows from the configuration alone */
    const lin_params *p = params;
    size_t H = (size_t)p->H, dh = (size_t)p->dh;
    r[0] = (kind_region){"S", LIND_EL_F64, H * dh * dh};
    r[1] = (kind_region){"z", LIND_EL_F64, H * dh};
    if (!p->shift) return 2;
    r[2] = (kind_region){"shift", LIND_EL_F32, (size_t)c->d_model};
    return 3;
}

static size_t lin_scratch(const lind_config *c, const void *params)
{
    const lin_params *p = params;
    size_t w = (size_t)c->d_model, hd = (size_t)p->H * (size_t)p->dh;
    return 3 * (hd > w ? hd : w);
}

static void lin_free(void *priv, backend *be)
{
    lin *L = priv;
    if (!L) return;
    mixer_proj3_free(&L->qkv, be);
    be->ops->buf_free(be, L->wo);
    be->ops->buf_free(be, L->gamma);
    free(L);
}

static int lin_load(const lind_config *c, const void *params, kind_ctx *ctx, const kind_weight *t, void **priv,
                    char *err, size_t errlen)
{
    const lin_params *p = params;
    lin *L = calloc(1, sizeof *L);
    if (!L) return -ENOMEM;
    L->H = p->H;
    L->dh = p->dh;
    L->d = c->d_model;
    L->eps = p->eps;
    L->shift = p->shift;
    int hd = L->H * L->dh, rc;
    const float *decay = t[T_DECAY].f32;
    if (decay)
        for (int h = 0; h < L->H; h++)
            if (!(decay[h] > 0.0f && decay[h] <= 1.0f)) {
                snprintf(err, errlen, "tensor 'layers.%d.mixer.decay': γ[%d] = %g is outside (0, 1]", ctx->layer, h,
                         (double)decay[h]);
                free(L);
                return -EINVAL;
            }
    const kind_weight *W[3] = {&t[T_WQ], &t[T_WK], &t[T_WV]};
    const float *mu[3] = {NULL, NULL, NULL};
    if (p->shift) { mu[0] = t[T_MUQ].f32; mu[1] = t[T_MUK].f32; mu[2] = t[T_MUV].f32; }
    if ((rc = mixer_proj3_load(&L->qkv, ctx, p->shift, hd, L->d, W, mu)) < 0) goto fail;
    if ((rc = kind_matrix(ctx, &t[T_WO], L->d, hd, ctx->out_scale, &L->wo)) < 0) goto fail;
    if (decay && (rc = kind_vector(ctx, decay, (size_t)L->H, &L->gamma)) < 0) goto fail;
    *priv = L;
    return 0;
fail:
    snprintf(err, errlen, "layer %d linear mixer: backend error %d while uploading weights", ctx->layer, rc);
    lin_free(L, ctx->be);
    return rc;
}

static int lin_step(void *priv, const layer_io *io)
{
    lin *L = priv;
    backend *be = io->be;
    int hd = L->H * L->dh, rc;
    backend_buf *qkv = io->scratch[0], *o = io->scratch[2];
    if ((rc = mixer_proj3_run(&L->qkv, io, L->shift ? io->region_off[2] : 0, qkv)) < 0) return rc;
    if ((rc = be->ops->linear_step(be, qkv, L->gamma, o, io->region_off[0], L->H, L->dh, L->eps)) < 0) return rc;
    /* x[R × d] += o[R × hd] · Wo[d × hd]ᵀ */
    return be->ops->matmul(be, bmview(io->x, 0, L->d), bview(o, 0, hd), L->wo, NULL, io->R, L->d, hd,
                           BACKEND_MM_ACCUMULATE);
}

const layer_kind mixer_linear = {
    .name = "linear",
    .configure = lin_configure,
    .tensors = lin_tensors,
    .regions = lin_regions,
    .scratch_floats = lin_scratch,
    .load = lin_load,
    .step = lin_step,
    .free = lin_free,
};
