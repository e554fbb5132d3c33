/* recurrent/mixer_aft.c — AFT with an exponential position bias, in the
 * recurrent form of RWKV-4's time mixing:
 *   r, k, v = Wr·h_r, Wk·h_k, Wv·h_v   (width A = aft_dim, default d_model)
 *   wkv_t = (Σ_{i<t} e^{−(t−1−i)w + k_i} v_i + e^{u+k_t} v_t)
 *         / (Σ_{i<t} e^{−(t−1−i)w + k_i}     + e^{u+k_t})
 *   y = Wo·(σ(r) ⊙ wkv)
 * with w = exp(time_decay), u = time_first for aft_variant "decay", and
 * w = u = 0 for "simple". Keys: aft_variant (required), aft_dim, token_shift.
 * State per session: num, den, max (A each), and with token shift h_{t−1}
 * (d floats). num, den and max are floats when every channel decays fast
 * enough (decided at load from time_decay, mixer_f32_ok()), doubles
 * otherwise and always for "simple" (docs/NUMERICS.md). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "recurrent/mixer.h"

typedef struct aft_params {
    int decay, A, shift;
    char variant[16];
} aft_params;
_Static_assert(sizeof(aft_params) <= LIND_KIND_PARAMS * 8, "aft_params too big");

enum { T_WR, T_WK, T_WV, T_WO, T_MUR, T_MUK, T_MUV, T_TD, T_TF };

typedef struct aft {
    mixer_proj3 rkv;
    backend_buf *wo, *w, *u;   /* wo [d × A]; w, u [A], NULL for AFT-simple */
    int d, A, shift;
    int f32;                   /* num, den, max kept as floats */
} aft;

static int aft_configure(const kind_scope *s, const lind_config *c, void *params, char *err, size_t errlen)
{
    aft_params *p = params;
    static const char *const variants[] = {"simple", "decay", NULL};
    int rc;
    if ((rc = kind_cfg_enum(s, "aft_variant", 1, NULL, variants, p->variant, sizeof p->variant, err, errlen)) ||
        (rc = kind_cfg_int(s, "aft_dim", 0, c->d_model, 1, 1 << 16, &p->A, err, errlen)) ||
        (rc = kind_cfg_bool(s, "token_shift", 0, 0, &p->shift, err, errlen)))
        return rc;
    p->decay = !strcmp(p->variant, "decay");
    return 0;
}

static int aft_tensors(const lind_config *c, const void *params, kind_tensor *t)
{
    const aft_params *p = params;
    int d = c->d_model, A = p->A, n = 0;
    t[n++] = (kind_tensor){"wr", 2, {A, d}, 0, 1};
    t[n++] = (kind_tensor){"wk", 2, {A, d}, 0, 1};
    t[n++] = (kind_tensor){"wv", 2, {A, d}, 0, 1};
    t[n++] = (kind_tensor){"wo", 2, {d, A}, 0, 1};
    for (int i = 0; i < 3; i++)   /* μ_r, μ_k, μ_v; unused entries keep the T_* indices stable */
        t[n++] = p->shift ? (kind_tensor){(const char *[]){"mu_r", "mu_k", "mu_v"}[i], 1, {d, 0}, 0, 0}
                          : (kind_tensor){NULL, 0, {0, 0}, 1, 0};
    if (p->decay) {
        t[n++] = (kind_tensor){"time_decay", 1, {A, 0}, 0, 0};
        t[n++] = (kind_tensor){"time_first", 1, {A, 0}, 0, 0};
    }
    return n;
}

static int aft_regions(const lind_config *c, const void *params, const void *priv, kind_region *r)
{
    const aft_params *p = params;
    const aft *X = priv;
    size_t A = (size_t)p->A;
    int el = X && X->f32 ? LIND_EL_F32 : LIND_EL_F64;
    r[0] = (kind_region){"num", el, A};
    r[1] = (kind_region){"den", el, A};
    r[2] = (kind_region){"max", el, A};
    if (!p->shift) return 3;
    r[3] = (kind_region){"shift", LIND_EL_F32, (size_t)c->d_model};
    return 4;
}

static size_t aft_scratch(const lind_config *c, const void *params)
{
    const aft_params *p = params;
    size_t d = (size_t)c->d_model, A = (size_t)p->A;
    return 3 * (A > d ? A : d);
}

static void aft_free(void *priv, backend *be)
{
    aft *X = priv;
    if (!X) return;
    mixer_proj3_free(&X->rkv, be);
    be->ops->buf_free(be, X->wo);
    be->ops->buf_free(be, X->w);
    be->ops->buf_free(be, X->u);
    free(X);
}

static int aft_load(const lind_config *c, const void *params, kind_ctx *ctx, const kind_weight *t, void **priv,
                    char *err, size_t errlen)
{
    const aft_params *p = params;
    aft *X = calloc(1, sizeof *X);
    if (!X) return -ENOMEM;
    X->d = c->d_model;
    X->A = p->A;
    X->shift = p->shift;
    int A = p->A, rc;
    float *w = NULL;
    if (p->decay) {
        w = malloc((size_t)A * sizeof *w);
        if (!w) { free(X); return -ENOMEM; }
        X->f32 = 1;
        for (int i = 0; i < A; i++) {
            w[i] = expf(t[T_TD].f32[i]);
            if (!isfinite(w[i]) || !isfinite(t[T_TF].f32[i])) {
                snprintf(err, errlen, "tensor 'layers.%d.mixer.%s': channel %d is not finite (or exp overflows)",
                         ctx->layer, isfinite(t[T_TF].f32[i]) ? "time_decay" : "time_first", i);
                free(w);
                free(X);
                return -EINVAL;
            }
            /* forgets 1 − e^{−w}; w = 0 (or below double's reach) is no decay */
            if (!mixer_f32_ok(-expm1(-(double)w[i]))) X->f32 = 0;
        }
    }
    const kind_weight *W[3] = {&t[T_WR], &t[T_WK], &t[T_WV]};
    const float *mu[3] = {t[T_MUR].f32, t[T_MUK].f32, t[T_MUV].f32};
    if ((rc = mixer_proj3_load(&X->rkv, ctx, p->shift, A, X->d, W, mu)) < 0) goto fail;
    if ((rc = kind_matrix(ctx, &t[T_WO], X->d, A, ctx->out_scale, &X->wo)) < 0) goto fail;
    if (w) {
        if ((rc = kind_vector(ctx, w, (size_t)A, &X->w)) < 0) goto fail;
        if ((rc = kind_vector(ctx, t[T_TF].f32, (size_t)A, &X->u)) < 0) goto fail;
    }
    free(w);
    *priv = X;
    return 0;
fail:
    snprintf(err, errlen, "layer %d aft mixer: backend error %d while uploading weights", ctx->layer, rc);
    free(w);
    aft_free(X, ctx->be);
    return rc;
}

static int aft_step(void *priv, const layer_io *io)
{
    aft *X = priv;
    backend *be = io->be;
    backend_buf *rkv = io->scratch[0], *o = io->scratch[2];
    int rc;
    if ((rc = mixer_proj3_run(&X->rkv, io, X->shift ? io->region_off[3] : 0, rkv)) < 0) return rc;
    if ((rc = be->ops->aft_step(be, rkv, X->w, X->u, o, io->region_off[0], X->A, X->f32)) < 0) return rc;
    /* x[R × d] += o[R × A] · Wo[d × A]ᵀ */
    return be->ops->matmul(be, bmview(io->x, 0, X->d), bview(o, 0, X->A), X->wo, NULL, io->R, X->d, X->A,
                           BACKEND_MM_ACCUMULATE);
}

const layer_kind mixer_aft = {
    .name = "aft",
    .configure = aft_configure,
    .tensors = aft_tensors,
    .regions = aft_regions,
    .scratch_floats = aft_scratch,
    .load = aft_load,
    .step = aft_step,
    .free = aft_free,
};
