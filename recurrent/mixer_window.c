/* recurrent/mixer_window.c — causal softmax attention over a sliding window,
 * in streaming form, per head h of n_heads (d_head = dh, hd = H·dh):
 *   q, k, v = Wq·h, Wk·h, Wv·h
 *   o_t = Σ_{s∈V(t)} softmax_s(q_t·k_s/√dh + bias(t−s)) v_s,  y = Wo·concat_h(o)
 * The visible set V(t): the window t, t−dil, …, t−(w−1)·dil (those ≥ 0;
 * dilation dil attends to every dil-th of the last w·dil positions) and the
 * first g tokens of the stream, visible forever (Longformer's global
 * attention, the attention sinks of StreamingLLM), each counted once.
 * Positions, as a stream allows (key "position"):
 *   "alibi": bias = −m_h·min(t−s, w·dil), m_h = 2^(−8(h+1)/H) (Press et al.);
 *            a global token beyond the window sits at distance w·dil, so it
 *            neither fades nor outweighs the window with age;
 *   "rope":  q and k rotated by their absolute positions (pairs (i, i+dh/2),
 *            angle t·rope_base^(−2i/dh)); keys are stored rotated.
 * Keys: n_heads, d_head (≤ 256), window w (required), dilation (1), global
 * g (0), position ("alibi" | "rope", default "alibi"), rope_base (10000).
 * State per session: the ring of the last L = w·dil keys and values (fp32,
 * [2][L][hd], position s in row s mod L), the g global tokens' keys and
 * values (fp32 [2][g][hd], absent when g = 0) and the absolute position t
 * (int64: the ring's head is t mod L, the global rows filled are min(t, g)).
 * O(w + g) work and memory per token and head. Backend op: window_step.
 *
 * Long streams: only t grows. It is an int64 read as unsigned, so it wraps
 * after 2^64 tokens (never, in practice). With ALiBi nothing else depends on
 * t beyond t mod L and min(t, g): the output at t = 10^12 is computed exactly
 * as at t = 10^3. With RoPE the angle t·θ_i is formed in double (θ_0 = 1):
 * its rounding is about t·2^−53 rad, 1e-7 rad at t = 10^9, 1e-4 rad at
 * t = 10^12 — the rotation stays a rotation (norms kept) but relative angles
 * of q_t·k_s carry that error; the key angles were rounded when stored. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "recurrent/mixer.h"

typedef struct window_params {
    int H, dh, w, dil, g, rope;
    float rope_base;
} window_params;
_Static_assert(sizeof(window_params) <= LIND_KIND_PARAMS * 8, "window_params too big");

enum { T_WQ, T_WK, T_WV, T_WO };

typedef struct window {
    backend_buf *wqkv;     /* [3·hd × d], fused */
    backend_buf *wo;       /* [d × hd] */
    backend_buf *slopes;   /* [H] ALiBi slopes (zeros with RoPE) */
    int H, dh, w, dil, g, d;
    float rope_base;       /* 0 with ALiBi */
} window;

static int window_configure(const kind_scope *s, const lind_config *c, void *params, char *err, size_t errlen)
{
    (void)c;
    window_params *p = params;
    static const char *const pos[] = {"alibi", "rope", NULL};
    char ps[16];
    int rc;
    if ((rc = kind_cfg_int(s, "n_heads", 1, 0, 1, 1 << 12, &p->H, err, errlen)) ||
        (rc = kind_cfg_int(s, "d_head", 1, 0, 1, 256, &p->dh, err, errlen)) ||
        (rc = kind_cfg_int(s, "window", 1, 0, 1, 1 << 16, &p->w, err, errlen)) ||
        (rc = kind_cfg_int(s, "dilation", 0, 1, 1, 1 << 10, &p->dil, err, errlen)) ||
        (rc = kind_cfg_int(s, "global", 0, 0, 0, 1 << 16, &p->g, err, errlen)) ||
        (rc = kind_cfg_enum(s, "position", 0, "alibi", pos, ps, sizeof ps, err, errlen)) ||
        (rc = kind_cfg_num(s, "rope_base", 0, 10000.0, 2.0, 1e9, &p->rope_base, err, errlen)))
        return rc;
    p->rope = !strcmp(ps, "rope");
    if ((long)p->H * p->dh > (1 << 16)) {
        snprintf(err, errlen, "%s: n_heads × d_head = %ld is over 65536", kind_scope_where(s), (long)p->H * p->dh);
        return -EINVAL;
    }
    if ((long)p->w * p->dil > (1 << 20)) {
        snprintf(err, errlen, "%s: window × dilation = %ld is over 1048576", kind_scope_where(s), (long)p->w * p->dil);
        return -EINVAL;
    }
    if (p->rope && p->dh % 2) {
        snprintf(err, errlen, "%s: position \"rope\" needs an even d_head, not %d", kind_scope_where(s), p->dh);
        return -EINVAL;
    }
    return 0;
}

static int window_tensors(const lind_config *c, const void *params, kind_tensor *t)
{
    const window_params *p = params;
    int hd = p->H * p->dh, d = c->d_model;
    t[T_WQ] = (kind_tensor){"wq", 2, {hd, d}, 0, 1};
    t[T_WK] = (kind_tensor){"wk", 2, {hd, d}, 0, 1};
    t[T_WV] = (kind_tensor){"wv", 2, {hd, d}, 0, 1};
    t[T_WO] = (kind_tensor){"wo", 2, {d, hd}, 0, 1};
    return T_WO + 1;
}

/* ring, [global,] pos: the position is always the last region. */
static int window_regions(const lind_config *c, const void *params, const void *priv, kind_region *r)
{
    (void)priv;   /* the layout follows from the configuration alone */
    (void)c;
    const window_params *p = params;
    size_t hd = (size_t)p->H * (size_t)p->dh, n = 0;
    r[n++] = (kind_region){"ring", LIND_EL_F32, 2 * (size_t)p->w * (size_t)p->dil * hd};
    if (p->g) r[n++] = (kind_region){"global", LIND_EL_F32, 2 * (size_t)p->g * hd};
    r[n++] = (kind_region){"pos", LIND_EL_I64, 1};
    return (int)n;
}

/* scratch[0]: q, k, v [R × 3·hd]; scratch[2]: the heads' outputs [R × hd]. */
static size_t window_scratch(const lind_config *c, const void *params)
{
    (void)c;
    const window_params *p = params;
    return 3 * (size_t)p->H * (size_t)p->dh;
}

static void window_free(void *priv, backend *be)
{
    window *X = priv;
    if (!X) return;
    be->ops->buf_free(be, X->wqkv);
    be->ops->buf_free(be, X->wo);
    be->ops->buf_free(be, X->slopes);
    free(X);
}

static int window_load(const lind_config *c, const void *params, kind_ctx *ctx, const kind_weight *t, void **priv,
                       char *err, size_t errlen)
{
    const window_params *p = params;
    backend *be = ctx->be;
    static const backend_op need[] = {BACKEND_OP_WINDOW_STEP};
    if (kind_require_ops(ctx, "mixer \"window\"", need, (int)(sizeof need / sizeof *need), err, errlen) < 0)
        return -ENOTSUP;
    int H = p->H, hd = H * p->dh, rc;
    window *X = calloc(1, sizeof *X);
    float *slopes = malloc((size_t)H * sizeof *slopes);
    if (!X || !slopes) {
        free(X);
        free(slopes);
        return -ENOMEM;
    }
    *X = (window){.H = H, .dh = p->dh, .w = p->w, .dil = p->dil, .g = p->g, .d = c->d_model,
                  .rope_base = p->rope ? p->rope_base : 0.0f};
    for (int h = 0; h < H; h++) slopes[h] = p->rope ? 0.0f : exp2f(-8.0f * (float)(h + 1) / (float)H);
    const kind_weight *W[3] = {&t[T_WQ], &t[T_WK], &t[T_WV]};
    if ((rc = kind_matrix3(ctx, W, hd, X->d, &X->wqkv)) < 0 ||
        (rc = kind_matrix(ctx, &t[T_WO], X->d, hd, ctx->out_scale, &X->wo)) < 0 ||
        (rc = kind_vector(ctx, slopes, (size_t)H, &X->slopes)) < 0) {
        snprintf(err, errlen, "layer %d window mixer: backend error %d while uploading weights", ctx->layer, rc);
        window_free(X, be);
        free(slopes);
        return rc;
    }
    free(slopes);
    *priv = X;
    return 0;
}

static int window_step(void *priv, const layer_io *io)
{
    window *X = priv;
    backend *be = io->be;
    const backend_ops *o = be->ops;
    int hd = X->H * X->dh, d = X->d, R = io->R, rc;
    backend_buf *in = io->scratch[0], *out = io->scratch[2];
    size_t ring = io->region_off[0], glob = X->g ? io->region_off[1] : 0, pos = io->region_off[X->g ? 2 : 1];
    /* qkv[R × 3hd] = h[R × d] · Wqkv[3hd × d]ᵀ */
    if ((rc = o->matmul(be, bmview(in, 0, 3 * hd), bview(io->h, 0, d), X->wqkv, NULL, R, 3 * hd, d, 0)) < 0 ||
        (rc = o->window_step(be, in, X->slopes, out, ring, glob, pos, X->H, X->dh, X->w, X->dil, X->g,
                             X->rope_base)) < 0)
        return rc;
    /* x[R × d] += out[R × hd] · Wo[d × hd]ᵀ */
    return o->matmul(be, bmview(io->x, 0, d), bview(out, 0, hd), X->wo, NULL, R, d, hd, BACKEND_MM_ACCUMULATE);
}

const layer_kind mixer_window = {
    .name = "window",
    .configure = window_configure,
    .tensors = window_tensors,
    .regions = window_regions,
    .scratch_floats = window_scratch,
    .load = window_load,
    .step = window_step,
    .free = window_free,
};
