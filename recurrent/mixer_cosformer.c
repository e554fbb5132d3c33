/* recurrent/mixer_cosformer.c — cosFormer (Qin et al. 2022) in streaming
 * form, per head h of n_heads (d_head = dh):
 *   q, k, v = Wq·h, Wk·h, Wv·h
 *   o_t = Σ_{j≤t} w(t − j)·(relu(q_t)·relu(k_j)) v_j / (Σ_{j≤t} w(t − j)·relu(q_t)·relu(k_j) + attn_eps)
 *   y = Wo·concat(o)
 * The re-weighting w decomposes into (S, z) pairs (kernels/mixer_math.h,
 * "cosFormer's cos re-weighting"); `cos_mode` picks it:
 *   "horizon"   w(Δ) = cos(π/2·Δ/M), M = `horizon` (the paper's form, M the
 *               longest sequence). Two pairs: features relu(x)·cos θ_t and
 *               relu(x)·sin θ_t, θ_t = π/2·t/M. Past the horizon the weight
 *               of old tokens turns negative and the normalizer can cross
 *               zero, so a session refuses to grow: a step that would feed
 *               position M fails with -EOVERFLOW ("Value too large for
 *               defined data type") before any state of this layer changes,
 *               and model_forward / model_step return it (the whole batch
 *               is refused: give such a session its own call, or reset it).
 *   "periodic"  w(Δ) = 1 + cos(π·Δ/M) ≥ 0 (three pairs: the constant one too,
 *               θ_t = π·(t mod 2M)/M). Sound for any length: every weight is
 *               non-negative, so the normalizer never crosses zero; the price
 *               is that the recency bias repeats with period 2M (a token 2M
 *               back weighs as much as the current one).
 * Keys: n_heads, d_head, horizon (required), cos_mode ("horizon"),
 * attn_eps (1e-6).
 * State per session: S (P·H·dh·dh doubles), z (P·H·dh doubles), P = 2 or 3
 * pairs, and pos (one int64, tokens seen). Backend op: cosformer_step.
 *
 * Long streams: no decay, S and z are running sums growing linearly in t
 * (fp64, docs/NUMERICS.md); the angle is computed from the int64 position
 * (reduced mod 2M exactly in the periodic form), so it does not drift. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "recurrent/mixer.h"

typedef struct cos_params {
    int H, dh, M, periodic;
    float eps;
} cos_params;
_Static_assert(sizeof(cos_params) <= LIND_KIND_PARAMS * 8, "cos_params too big");

enum { T_WQ, T_WK, T_WV, T_WO };
enum { R_S, R_Z, R_POS };

typedef struct cosf {
    backend_buf *wqkv;   /* [3·hd × d], fused */
    backend_buf *wo;     /* [d × hd] */
    int H, dh, d, M, periodic;
    float eps;
} cosf;

static int cos_configure(const kind_scope *s, const lind_config *c, void *params, char *err, size_t errlen)
{
    (void)c;
    cos_params *p = params;
    static const char *const modes[] = {"horizon", "periodic", NULL};
    char mode[16];
    int rc;
    if ((rc = kind_cfg_int(s, "n_heads", 1, 0, 1, 1 << 12, &p->H, err, errlen)) ||
        (rc = kind_cfg_int(s, "d_head", 1, 0, 1, 1 << 10, &p->dh, err, errlen)) ||
        (rc = kind_cfg_int(s, "horizon", 1, 0, 1, 1 << 30, &p->M, err, errlen)) ||
        (rc = kind_cfg_enum(s, "cos_mode", 0, "horizon", modes, mode, sizeof mode, err, errlen)) ||
        (rc = kind_cfg_num(s, "attn_eps", 0, 1e-6, 0.0, 1.0, &p->eps, err, errlen)))
        return rc;
    p->periodic = !strcmp(mode, "periodic");
    if ((long)p->H * p->dh > (1 << 16)) {
        snprintf(err, errlen, "%s: n_heads × d_head = %ld is over 65536", kind_scope_where(s), (long)p->H * p->dh);
        return -EINVAL;
    }
    return 0;
}

static int cos_tensors(const lind_config *c, const void *params, kind_tensor *t)
{
    const cos_params *p = params;
    int hd = p->H * p->dh, d = c->d_model;
    t[T_WQ] = (kind_tensor){"wq", 2, {hd, d}, 0, 1};
    t[T_WK] = (kind_tensor){"wk", 2, {hd, d}, 0, 1};
    t[T_WV] = (kind_tensor){"wv", 2, {hd, d}, 0, 1};
    t[T_WO] = (kind_tensor){"wo", 2, {d, hd}, 0, 1};
    return T_WO + 1;
}

static int cos_regions(const lind_config *c, const void *params, const void *priv, kind_region *r)
{
    (void)priv;   /* the layout follows from the configuration alone */
    (void)c;
    const cos_params *p = params;
    size_t P = p->periodic ? 3 : 2, hd = (size_t)p->H * p->dh;
    r[R_S] = (kind_region){"S", LIND_EL_F64, P * hd * (size_t)p->dh};   /* cosformer_step's layout: S then z */
    r[R_Z] = (kind_region){"z", LIND_EL_F64, P * hd};
    r[R_POS] = (kind_region){"pos", LIND_EL_I64, 1};
    return 3;
}

/* scratch[0]: q | k | v [R × 3·hd]; scratch[2]: head outputs [R × hd]. */
static size_t cos_scratch(const lind_config *c, const void *params)
{
    (void)c;
    const cos_params *p = params;
    return 3 * (size_t)p->H * (size_t)p->dh;
}

static void cos_free(void *priv, backend *be)
{
    cosf *X = priv;
    if (!X) return;
    be->ops->buf_free(be, X->wqkv);
    be->ops->buf_free(be, X->wo);
    free(X);
}

static int cos_load(const lind_config *c, const void *params, kind_ctx *ctx, const kind_weight *t, void **priv,
                    char *err, size_t errlen)
{
    const cos_params *p = params;
    backend *be = ctx->be;
    static const backend_op need[] = {BACKEND_OP_COSFORMER_STEP};
    if (kind_require_ops(ctx, "mixer \"cosformer\"", need, (int)(sizeof need / sizeof *need), err, errlen) < 0)
        return -ENOTSUP;
    cosf *X = calloc(1, sizeof *X);
    if (!X) return -ENOMEM;
    X->H = p->H;
    X->dh = p->dh;
    X->d = c->d_model;
    X->M = p->M;
    X->periodic = p->periodic;
    X->eps = p->eps;
    int hd = X->H * X->dh, rc;
    const kind_weight *W[3] = {&t[T_WQ], &t[T_WK], &t[T_WV]};
    if ((rc = kind_matrix3(ctx, W, hd, X->d, &X->wqkv)) < 0 ||
        (rc = kind_matrix(ctx, &t[T_WO], X->d, hd, ctx->out_scale, &X->wo)) < 0) {
        snprintf(err, errlen, "layer %d cosformer mixer: backend error %d while uploading weights", ctx->layer, rc);
        cos_free(X, be);
        return rc;
    }
    *priv = X;
    return 0;
}

static int cos_step(void *priv, const layer_io *io)
{
    cosf *X = priv;
    backend *be = io->be;
    const backend_ops *o = be->ops;
    int hd = X->H * X->dh, d = X->d, R = io->R, rc;
    backend_buf *in = io->scratch[0], *out = io->scratch[2];
    /* qkv[R × 3hd] = h[R × d] · Wqkv[3hd × d]ᵀ */
    if ((rc = o->matmul(be, bmview(in, 0, 3 * hd), bview(io->h, 0, d), X->wqkv, NULL, R, 3 * hd, d, 0)) < 0 ||
        (rc = o->cosformer_step(be, in, out, io->region_off[R_S], io->region_off[R_POS], X->H, X->dh, X->M,
                                X->periodic, X->eps)) < 0)
        return rc;
    /* x[R × d] += out[R × hd] · Wo[d × hd]ᵀ */
    return o->matmul(be, bmview(io->x, 0, d), bview(out, 0, hd), X->wo, NULL, R, d, hd, BACKEND_MM_ACCUMULATE);
}

static long long cos_max_tokens(const lind_config *c, const void *params)
{
    (void)c;
    const cos_params *p = params;
    return p->periodic ? 0 : p->M;
}

const layer_kind mixer_cosformer = {
    .name = "cosformer",
    .configure = cos_configure,
    .tensors = cos_tensors,
    .regions = cos_regions,
    .scratch_floats = cos_scratch,
    .load = cos_load,
    .step = cos_step,
    .free = cos_free,
    .max_tokens = cos_max_tokens,
};
