/* recurrent/mixer_linformer.c — Linformer (Wang et al. 2020) in its causal
 * streaming form, per head h of n_heads (d_head = dh), projection length
 * kp = `proj_len`, maximum length N = `max_len`:
 *   q, k, v = Wq·h, Wk·h, Wv·h
 *   K̄_t = Σ_{j≤t} e_j k_jᵀ,  V̄_t = Σ_{j≤t} f_j v_jᵀ      ([kp × dh] each)
 *   o_t = softmax(K̄_t q_t/√dh)ᵀ V̄_t,   y = Wo·concat(o)
 * where e_j, f_j are row j of the stored projections proj_k, proj_v
 * [N × kp] (Linformer's E and F transposed, so a position's row is
 * contiguous; shared by the heads — the paper's headwise sharing). E·K and
 * F·V restricted to the tokens seen so far are exactly these running sums.
 *
 * Maximum length by construction: there is no projection row for position N
 * and beyond. A session at N tokens refuses to grow: a step that would feed
 * position N fails with -EOVERFLOW ("Value too large for defined data type")
 * before any state of this layer changes, and model_forward / model_step
 * return it (the whole call is refused: give such a session its own call, or
 * reset it). No sliding: dropping the oldest token would need its e_j k_jᵀ
 * (the past keys), which the state does not keep, and re-indexing rows would
 * change every past term.
 * Keys: n_heads, d_head, proj_len, max_len (required); d_head and proj_len
 * at most 512 (the CUDA kernel's block of max(kp, dh) threads uses 72
 * registers each: 1024 of them would not fit the register file).
 * State per session: K̄ and V̄ (2·H·kp·dh doubles) and pos (one int64, tokens
 * seen). Backend op: linformer_step.
 *
 * Long streams: bounded by N; K̄ and V̄ are running sums of at most N terms,
 * fp64; the softmax is shifted by its maximum (no overflow whatever the
 * scores). Projections, inputs and outputs are fp32. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "recurrent/mixer.h"

typedef struct linf_params {
    int H, dh, kp, N;
} linf_params;
_Static_assert(sizeof(linf_params) <= LIND_KIND_PARAMS * 8, "linf_params too big");

enum { T_WQ, T_WK, T_WV, T_WO, T_PK, T_PV };
enum { R_KV, R_POS };

typedef struct linf {
    backend_buf *wqkv;   /* [3·hd × d], fused */
    backend_buf *wo;     /* [d × hd] */
    backend_buf *ef;     /* [2 × N × kp]: proj_k then proj_v */
    int H, dh, d, kp, N;
} linf;

static int linf_configure(const kind_scope *s, const lind_config *c, void *params, char *err, size_t errlen)
{
    (void)c;
    linf_params *p = params;
    int rc;
    if ((rc = kind_cfg_int(s, "n_heads", 1, 0, 1, 1 << 12, &p->H, err, errlen)) ||
        (rc = kind_cfg_int(s, "d_head", 1, 0, 1, 512, &p->dh, err, errlen)) ||
        (rc = kind_cfg_int(s, "proj_len", 1, 0, 1, 512, &p->kp, err, errlen)) ||
        (rc = kind_cfg_int(s, "max_len", 1, 0, 1, 1 << 24, &p->N, err, errlen)))
        return rc;
    if ((long)p->H * p->dh > (1 << 16)) {
        snprintf(err, errlen, "%s: n_heads × d_head = %ld is over 65536", kind_scope_where(s), (long)p->H * p->dh);
        return -EINVAL;
    }
    return 0;
}

static int linf_tensors(const lind_config *c, const void *params, kind_tensor *t)
{
    const linf_params *p = params;
    int hd = p->H * p->dh, d = c->d_model;
    t[T_WQ] = (kind_tensor){"wq", 2, {hd, d}, 0, 1};
    t[T_WK] = (kind_tensor){"wk", 2, {hd, d}, 0, 1};
    t[T_WV] = (kind_tensor){"wv", 2, {hd, d}, 0, 1};
    t[T_WO] = (kind_tensor){"wo", 2, {d, hd}, 0, 1};
    t[T_PK] = (kind_tensor){"proj_k", 2, {p->N, p->kp}, 0, 0};
    t[T_PV] = (kind_tensor){"proj_v", 2, {p->N, p->kp}, 0, 0};
    return T_PV + 1;
}

static int linf_regions(const lind_config *c, const void *params, const void *priv, kind_region *r)
{
    (void)priv;   /* the layout follows from the configuration alone */
    (void)c;
    const linf_params *p = params;
    r[R_KV] = (kind_region){"KV", LIND_EL_F64, 2 * (size_t)p->H * p->kp * p->dh};   /* K̄ then V̄ */
    r[R_POS] = (kind_region){"pos", LIND_EL_I64, 1};
    return 2;
}

/* scratch[0]: q | k | v [R × 3·hd]; scratch[2]: head outputs [R × hd]. */
static size_t linf_scratch(const lind_config *c, const void *params)
{
    (void)c;
    const linf_params *p = params;
    return 3 * (size_t)p->H * (size_t)p->dh;
}

static void linf_free(void *priv, backend *be)
{
    linf *X = priv;
    if (!X) return;
    be->ops->buf_free(be, X->wqkv);
    be->ops->buf_free(be, X->wo);
    be->ops->buf_free(be, X->ef);
    free(X);
}

static int linf_load(const lind_config *c, const void *params, kind_ctx *ctx, const kind_weight *t, void **priv,
                     char *err, size_t errlen)
{
    const linf_params *p = params;
    backend *be = ctx->be;
    static const backend_op need[] = {BACKEND_OP_LINFORMER_STEP};
    if (kind_require_ops(ctx, "mixer \"linformer\"", need, (int)(sizeof need / sizeof *need), err, errlen) < 0)
        return -ENOTSUP;
    size_t n = (size_t)p->N * p->kp;
    for (int w = 0; w < 2; w++)
        for (size_t i = 0; i < n; i++)
            if (!isfinite(t[T_PK + w].f32[i])) {
                snprintf(err, errlen, "tensor 'layers.%d.mixer.%s': element %zu (position %zu) is not finite",
                         ctx->layer, w ? "proj_v" : "proj_k", i, i / (size_t)p->kp);
                return -EINVAL;
            }
    float *ef = malloc(2 * n * sizeof *ef);
    linf *X = calloc(1, sizeof *X);
    if (!ef || !X) {
        free(ef);
        free(X);
        return -ENOMEM;
    }
    memcpy(ef, t[T_PK].f32, n * sizeof *ef);
    memcpy(ef + n, t[T_PV].f32, n * sizeof *ef);
    X->H = p->H;
    X->dh = p->dh;
    X->d = c->d_model;
    X->kp = p->kp;
    X->N = p->N;
    int hd = X->H * X->dh, rc;
    const kind_weight *W[3] = {&t[T_WQ], &t[T_WK], &t[T_WV]};
    if ((rc = kind_matrix3(ctx, W, hd, X->d, &X->wqkv)) < 0 ||
        (rc = kind_matrix(ctx, &t[T_WO], X->d, hd, ctx->out_scale, &X->wo)) < 0 ||
        (rc = kind_vector(ctx, ef, 2 * n, &X->ef)) < 0) {
        snprintf(err, errlen, "layer %d linformer mixer: backend error %d while uploading weights", ctx->layer, rc);
        free(ef);
        linf_free(X, be);
        return rc;
    }
    free(ef);
    *priv = X;
    return 0;
}

static int linf_step(void *priv, const layer_io *io)
{
    linf *X = priv;
    backend *be = io->be;
    const backend_ops *o = be->ops;
    int hd = X->H * X->dh, d = X->d, R = io->R, rc;
    backend_buf *in = io->scratch[0], *out = io->scratch[2];
    /* qkv[R × 3hd] = h[R × d] · Wqkv[3hd × d]ᵀ */
    if ((rc = o->matmul(be, bmview(in, 0, 3 * hd), bview(io->h, 0, d), X->wqkv, NULL, R, 3 * hd, d, 0)) < 0 ||
        (rc = o->linformer_step(be, in, X->ef, out, io->region_off[R_KV], io->region_off[R_POS], X->H, X->dh, X->kp,
                                X->N)) < 0)
        return rc;
    /* x[R × d] += out[R × hd] · Wo[d × hd]ᵀ */
    return o->matmul(be, bmview(io->x, 0, d), bview(out, 0, hd), X->wo, NULL, R, d, hd, BACKEND_MM_ACCUMULATE);
}

static long long linf_max_tokens(const lind_config *c, const void *params)
{
    (void)c;
    const linf_params *p = params;
    return p->N;
}

const layer_kind mixer_linformer = {
    .name = "linformer",
    .configure = linf_configure,
    .tensors = linf_tensors,
    .regions = linf_regions,
    .scratch_floats = linf_scratch,
    .load = linf_load,
    .step = linf_step,
    .free = linf_free,
    .max_tokens = linf_max_tokens,
};
