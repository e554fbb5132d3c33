/* recurrent/mixer_delta.c — the gated delta rule (Gated DeltaNet, Yang et al.
 * 2024) in recurrent form, per head h of n_heads (d_k = d_v = d_head):
 *   q, k, v = SiLU(conv_K(Wq·h)), SiLU(conv_K(Wk·h)), SiLU(conv_K(Wv·h))
 *             (a causal depthwise convolution over the last K tokens)
 *   q ← q/‖q‖·dh^−½,  k ← k/‖k‖,  β = σ(Wβ·h),
 *   α = exp(−exp(A_log)·softplus(Wa·h + a_bias))
 *   S_t = α S_{t−1} (I − β k kᵀ) + β v kᵀ,   o = S_t q
 *   y = Wo·concat(RMSNorm(o_h) ⊙ o_norm)
 * The update reads S (S·k) before writing it. No output gate (FLA's
 * use_gate = false). Keys: n_heads, d_head (required), conv_size (4, in
 * [2, 16]), head_norm_eps (1e-5).
 * State per session: S (H·dh·dh doubles — the delta rule subtracts from S,
 * so it is kept in fp64 like the other matrix states, docs/NUMERICS.md), the
 * convolution's ring of the last K−1 inputs (3·H·dh·(K−1) floats) and the
 * ring's head index (one int32). Backend ops: short_conv, delta_step. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "recurrent/mixer.h"

typedef struct delta_params {
    int H, dh, K;
    float eps;
} delta_params;
_Static_assert(sizeof(delta_params) <= LIND_KIND_PARAMS * 8, "delta_params too big");

enum { T_WQ, T_WK, T_WV, T_WB, T_WA, T_WO, T_CQ, T_CK, T_CV, T_ALOG, T_ABIAS, T_NORM };
enum { R_S, R_RING, R_IDX };

typedef struct delta {
    backend_buf *wqkv;     /* [3·hd × d], fused */
    backend_buf *wb, *wa;  /* [H × d] each */
    backend_buf *wo;       /* [d × hd] */
    backend_buf *conv;     /* [3·hd × K]: conv_q, conv_k, conv_v */
    backend_buf *gate;     /* [2H]: A = exp(A_log), then a_bias */
    backend_buf *norm;     /* [dh] */
    int H, dh, K, d;
    float eps;
} delta;

static int delta_configure(const kind_scope *s, const lind_config *c, void *params, char *err, size_t errlen)
{
    (void)c;
    delta_params *p = params;
    int rc;
    if ((rc = kind_cfg_int(s, "n_heads", 1, 0, 1, 1 << 12, &p->H, err, errlen)) ||
        (rc = kind_cfg_int(s, "d_head", 1, 0, 1, 1 << 10, &p->dh, err, errlen)) ||
        (rc = kind_cfg_int(s, "conv_size", 0, 4, 2, 16, &p->K, err, errlen)) ||
        (rc = kind_cfg_num(s, "head_norm_eps", 0, 1e-5, 0.0, 1.0, &p->eps, err, errlen)))
        return rc;
    if ((long)p->H * p->dh > (1 << 16)) {
        snprintf(err, errlen, "%s: n_heads × d_head = %ld is over 65536", kind_scope_where(s), (long)p->H * p->dh);
        return -EINVAL;
    }
    return 0;
}

static int delta_tensors(const lind_config *c, const void *params, kind_tensor *t)
{
    const delta_params *p = params;
    int hd = p->H * p->dh, d = c->d_model, H = p->H;
    t[T_WQ] = (kind_tensor){"wq", 2, {hd, d}, 0, 1};
    t[T_WK] = (kind_tensor){"wk", 2, {hd, d}, 0, 1};
    t[T_WV] = (kind_tensor){"wv", 2, {hd, d}, 0, 1};
    t[T_WB] = (kind_tensor){"wb", 2, {H, d}, 0, 1};
    t[T_WA] = (kind_tensor){"wa", 2, {H, d}, 0, 1};
    t[T_WO] = (kind_tensor){"wo", 2, {d, hd}, 0, 1};
    t[T_CQ] = (kind_tensor){"conv_q", 2, {hd, p->K}, 0, 0};
    t[T_CK] = (kind_tensor){"conv_k", 2, {hd, p->K}, 0, 0};
    t[T_CV] = (kind_tensor){"conv_v", 2, {hd, p->K}, 0, 0};
    t[T_ALOG] = (kind_tensor){"a_log", 1, {H, 0}, 0, 0};
    t[T_ABIAS] = (kind_tensor){"a_bias", 1, {H, 0}, 0, 0};
    t[T_NORM] = (kind_tensor){"o_norm", 1, {p->dh, 0}, 0, 0};
    return T_NORM + 1;
}

static int delta_regions(const lind_config *c, const void *params, const void *priv, kind_region *r)
{
    (void)priv;   /* the layout follows from the configuration alone */
    (void)c;
    const delta_params *p = params;
    size_t H = (size_t)p->H, dh = (size_t)p->dh;
    r[R_S] = (kind_region){"S", LIND_EL_F64, H * dh * dh};
    r[R_RING] = (kind_region){"conv", LIND_EL_F32, 3 * H * dh * (size_t)(p->K - 1)};
    r[R_IDX] = (kind_region){"conv_idx", LIND_EL_I32, 1};
    return 3;
}

/* scratch[0]: the projections [R × (3·hd + 2H)], convolved in place;
 * scratch[2]: the normed head outputs [R × hd]. */
static size_t delta_scratch(const lind_config *c, const void *params)
{
    (void)c;
    const delta_params *p = params;
    return 3 * (size_t)p->H * (size_t)p->dh + 2 * (size_t)p->H;
}

static void delta_free(void *priv, backend *be)
{
    delta *X = priv;
    if (!X) return;
    backend_buf *b[] = {X->wqkv, X->wb, X->wa, X->wo, X->conv, X->gate, X->norm};
    for (size_t i = 0; i < sizeof b / sizeof b[0]; i++) be->ops->buf_free(be, b[i]);
    free(X);
}

static int delta_load(const lind_config *c, const void *params, kind_ctx *ctx, const kind_weight *t, void **priv,
                      char *err, size_t errlen)
{
    const delta_params *p = params;
    backend *be = ctx->be;
    static const backend_op need[] = {BACKEND_OP_SHORT_CONV, BACKEND_OP_DELTA_STEP};
    if (kind_require_ops(ctx, "mixer \"delta\"", need, (int)(sizeof need / sizeof *need), err, errlen) < 0)
        return -ENOTSUP;
    int H = p->H, dh = p->dh, K = p->K, hd = H * dh, rc;
    /* A = exp(A_log) must be a finite positive rate: α = e^{−A·softplus} ∈ (0, 1]. */
    float *gate = malloc(2 * (size_t)H * sizeof *gate), *conv = malloc(3 * (size_t)hd * K * sizeof *conv);
    delta *X = calloc(1, sizeof *X);
    if (!gate || !conv || !X) {
        free(gate);
        free(conv);
        free(X);
        return -ENOMEM;
    }
    X->H = H;
    X->dh = dh;
    X->K = K;
    X->d = c->d_model;
    X->eps = p->eps;
    for (int h = 0; h < H; h++) {
        gate[h] = expf(t[T_ALOG].f32[h]);
        gate[H + h] = t[T_ABIAS].f32[h];
        if (!(gate[h] > 0.0f) || !isfinite(gate[h])) {
            snprintf(err, errlen, "tensor 'layers.%d.mixer.a_log': head %d: exp(%g) is not a finite positive decay rate",
                     ctx->layer, h, (double)t[T_ALOG].f32[h]);
            rc = -EINVAL;
            goto out;
        }
    }
    for (int i = 0; i < 3; i++) memcpy(conv + (size_t)i * hd * K, t[T_CQ + i].f32, (size_t)hd * K * sizeof *conv);
    const kind_weight *W[3] = {&t[T_WQ], &t[T_WK], &t[T_WV]};
    if ((rc = kind_matrix3(ctx, W, hd, X->d, &X->wqkv)) < 0 ||
        (rc = kind_matrix(ctx, &t[T_WB], H, X->d, 1.0f, &X->wb)) < 0 ||
        (rc = kind_matrix(ctx, &t[T_WA], H, X->d, 1.0f, &X->wa)) < 0 ||
        (rc = kind_matrix(ctx, &t[T_WO], X->d, hd, ctx->out_scale, &X->wo)) < 0 ||
        (rc = kind_vector(ctx, conv, 3 * (size_t)hd * K, &X->conv)) < 0 ||
        (rc = kind_vector(ctx, gate, 2 * (size_t)H, &X->gate)) < 0 ||
        (rc = kind_vector(ctx, t[T_NORM].f32, (size_t)dh, &X->norm)) < 0) {
        snprintf(err, errlen, "layer %d delta mixer: backend error %d while uploading weights", ctx->layer, rc);
        goto out;
    }
    *priv = X;
    X = NULL;
    rc = 0;
out:
    free(gate);
    free(conv);
    delta_free(X, be);
    return rc;
}

static int delta_step(void *priv, const layer_io *io)
{
    delta *X = priv;
    backend *be = io->be;
    const backend_ops *o = be->ops;
    int H = X->H, hd = H * X->dh, d = X->d, R = io->R, ld = 3 * hd + 2 * H, rc;
    backend_buf *in = io->scratch[0], *out = io->scratch[2];
    /* in [R × ld] columns: q 0, k hd, v 2hd, β logits 3hd, gate logits 3hd + H */
    /* qkv[R × 3hd] = h[R × d] · Wqkv[3hd × d]ᵀ */
    if ((rc = o->matmul(be, bmview(in, 0, ld), bview(io->h, 0, d), X->wqkv, NULL, R, 3 * hd, d, 0)) < 0 ||
        /* β logits[R × H] = h[R × d] · Wb[H × d]ᵀ */
        (rc = o->matmul(be, bmview(in, (size_t)3 * hd, ld), bview(io->h, 0, d), X->wb, NULL, R, H, d, 0)) < 0 ||
        /* gate logits[R × H] = h[R × d] · Wa[H × d]ᵀ */
        (rc = o->matmul(be, bmview(in, (size_t)3 * hd + H, ld), bview(io->h, 0, d), X->wa, NULL, R, H, d, 0)) < 0 ||
        (rc = o->short_conv(be, in, ld, in, ld, X->conv, 3 * hd, X->K, io->region_off[R_RING],
                            io->region_off[R_IDX], 1)) < 0 ||
        (rc = o->delta_step(be, in, X->gate, X->norm, out, io->region_off[R_S], H, X->dh, X->eps)) < 0)
        return rc;
    /* x[R × d] += out[R × hd] · Wo[d × hd]ᵀ */
    return o->matmul(be, bmview(io->x, 0, d), bview(out, 0, hd), X->wo, NULL, R, d, hd, BACKEND_MM_ACCUMULATE);
}

const layer_kind mixer_delta = {
    .name = "delta",
    .configure = delta_configure,
    .tensors = delta_tensors,
    .regions = delta_regions,
    .scratch_floats = delta_scratch,
    .load = delta_load,
    .step = delta_step,
    .free = delta_free,
};
