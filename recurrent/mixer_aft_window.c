/* recurrent/mixer_aft_window.c — AFT-local and AFT-conv (Zhai et al. 2021,
 * "An Attention Free Transformer") in causal streaming form. Both kinds:
 *   q, k, v = Wq·h, Wk·h, Wv·h                       (each [d], d = d_model)
 *   y_t = σ(q_t) ⊙ Σ_{t'≤t} e^{k_t' + b(t−t')} ⊙ v_t' / Σ_{t'≤t} e^{k_t' + b(t−t')}
 *   out = Wo·y
 * with a position bias b(j) = w[j] inside the window (j = t − t' < s) and 0
 * beyond it: the paper's AFT-local sets w_{t,t'} = 0 outside |t−t'| < s
 * (so far tokens still count, with their plain e^{k}), and its AFT-conv is
 * the same sum written as a depthwise convolution with kernel e^{w} − 1
 * added to the global sum. Causal here means t' ≤ t: the window is the s
 * tokens t−s+1 … t, and a pairwise bias w_{t,t'} that a stream can apply
 * is relative, w[t − t'].
 *   aft_local: one learned bias per offset, shared by all channels:
 *              tensor pos_bias [s]; key window = s.
 *   aft_conv:  per-head kernels, channels split into n_heads heads of d/H;
 *              tensors kernel [H × s], kernel_gain γ [H], kernel_bias β [H],
 *              reparameterized as in the paper,
 *              w_h = γ_h·(kernel_h − mean(kernel_h))/√(var(kernel_h) + 1e-5) + β_h
 *              (mean and variance over the head's s taps; the 1e-5, ours,
 *              keeps a constant kernel valid); keys n_heads, kernel_size = s.
 * State per session: the sums over the tokens that have left the window
 * (num, den, max: double [d] each, scaled by e^{−max}), the ring of the last
 * s − 1 keys and values (fp32 [2][d][s−1]) and the count of tokens seen t
 * (int64; the ring's head is t mod (s−1)). O(s) per token and channel.
 * Backend op: aft_window_step (per element lind_aftw_channel).
 *
 * Long streams: t grows (an int64 read as unsigned: 2^64 tokens); the sums
 * are kept relative to their running max, so e^{k} never overflows, and den
 * grows at most by one per token relative to the max term (den ≥ 1): fp64
 * sums lose no precision that matters before ~2^50 tokens. What the model
 * itself does as t grows: the window's s biased terms become a smaller share
 * of a growing global sum (as in the paper's AFT-full, no decay). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "recurrent/mixer.h"

typedef struct aftw_params {
    int s, H, conv;
} aftw_params;
_Static_assert(sizeof(aftw_params) <= LIND_KIND_PARAMS * 8, "aftw_params too big");

enum { T_WQ, T_WK, T_WV, T_WO, T_BIAS, T_GAIN, T_KBIAS };
enum { R_ACC, R_RING, R_POS };

typedef struct aftw {
    backend_buf *wqkv;   /* [3d × d], fused */
    backend_buf *wo;     /* [d × d] */
    backend_buf *w;      /* [H × s] position biases as applied */
    int d, s, H;
} aftw;

static int aftw_configure_(const kind_scope *sc, const lind_config *c, aftw_params *p, int conv, char *err,
                           size_t errlen)
{
    int rc;
    p->conv = conv;
    p->H = 1;
    if (conv) {
        if ((rc = kind_cfg_int(sc, "n_heads", 1, 0, 1, 1 << 12, &p->H, err, errlen)) ||
            (rc = kind_cfg_int(sc, "kernel_size", 1, 0, 2, 4096, &p->s, err, errlen)))
            return rc;
        if (c->d_model % p->H) {
            snprintf(err, errlen, "%s: n_heads %d does not divide d_model %d", kind_scope_where(sc), p->H, c->d_model);
            return -EINVAL;
        }
        return 0;
    }
    return kind_cfg_int(sc, "window", 1, 0, 2, 4096, &p->s, err, errlen);
}
static int aft_local_configure(const kind_scope *sc, const lind_config *c, void *params, char *err, size_t errlen)
{
    return aftw_configure_(sc, c, params, 0, err, errlen);
}
static int aft_conv_configure(const kind_scope *sc, const lind_config *c, void *params, char *err, size_t errlen)
{
    return aftw_configure_(sc, c, params, 1, err, errlen);
}

static int aftw_tensors(const lind_config *c, const void *params, kind_tensor *t)
{
    const aftw_params *p = params;
    int d = c->d_model;
    t[T_WQ] = (kind_tensor){"wq", 2, {d, d}, 0, 1};
    t[T_WK] = (kind_tensor){"wk", 2, {d, d}, 0, 1};
    t[T_WV] = (kind_tensor){"wv", 2, {d, d}, 0, 1};
    t[T_WO] = (kind_tensor){"wo", 2, {d, d}, 0, 1};
    if (!p->conv) {
        t[T_BIAS] = (kind_tensor){"pos_bias", 1, {p->s, 0}, 0, 0};
        return T_BIAS + 1;
    }
    t[T_BIAS] = (kind_tensor){"kernel", 2, {p->H, p->s}, 0, 0};
    t[T_GAIN] = (kind_tensor){"kernel_gain", 1, {p->H, 0}, 0, 0};
    t[T_KBIAS] = (kind_tensor){"kernel_bias", 1, {p->H, 0}, 0, 0};
    return T_KBIAS + 1;
}

static int aftw_regions(const lind_config *c, const void *params, const void *priv, kind_region *r)
{
    (void)priv;   /* the layout follows from the configuration alone */
    const aftw_params *p = params;
    size_t d = (size_t)c->d_model;
    r[R_ACC] = (kind_region){"acc", LIND_EL_F64, 3 * d};
    r[R_RING] = (kind_region){"ring", LIND_EL_F32, 2 * d * (size_t)(p->s - 1)};
    r[R_POS] = (kind_region){"pos", LIND_EL_I64, 1};
    return 3;
}

/* scratch[0]: q, k, v [R × 3d]; scratch[2]: y [R × d]. */
static size_t aftw_scratch(const lind_config *c, const void *params)
{
    (void)params;
    return 3 * (size_t)c->d_model;
}

static void aftw_free(void *priv, backend *be)
{
    aftw *X = priv;
    if (!X) return;
    be->ops->buf_free(be, X->wqkv);
    be->ops->buf_free(be, X->wo);
    be->ops->buf_free(be, X->w);
    free(X);
}

static int aftw_load(const lind_config *c, const void *params, kind_ctx *ctx, const kind_weight *t, void **priv,
                     char *err, size_t errlen)
{
    const aftw_params *p = params;
    backend *be = ctx->be;
    const char *kn = p->conv ? "aft_conv" : "aft_local";
    static const backend_op need[] = {BACKEND_OP_AFT_WINDOW_STEP};
    char what[32];
    snprintf(what, sizeof what, "mixer \"%s\"", kn);
    if (kind_require_ops(ctx, what, need, (int)(sizeof need / sizeof *need), err, errlen) < 0)
        return -ENOTSUP;
    int d = c->d_model, s = p->s, H = p->H, rc;
    aftw *X = calloc(1, sizeof *X);
    float *w = malloc((size_t)H * s * sizeof *w);
    if (!X || !w) {
        free(X);
        free(w);
        return -ENOMEM;
    }
    *X = (aftw){.d = d, .s = s, .H = H};
    for (int h = 0; h < H; h++) {
        if (!p->conv) {
            memcpy(w, t[T_BIAS].f32, (size_t)s * sizeof *w);
            break;
        }
        const float *k = t[T_BIAS].f32 + (size_t)h * s;
        double mean = 0, var = 0;
        for (int j = 0; j < s; j++) mean += k[j];
        mean /= s;
        for (int j = 0; j < s; j++) var += (k[j] - mean) * (k[j] - mean);
        var /= s;
        double rs = 1.0 / sqrt(var + 1e-5);
        for (int j = 0; j < s; j++)
            w[(size_t)h * s + j] = (float)(t[T_GAIN].f32[h] * (k[j] - mean) * rs + t[T_KBIAS].f32[h]);
    }
    for (int i = 0; i < H * s; i++)
        if (!isfinite(w[i]) || fabsf(w[i]) > 80.0f) {
            snprintf(err, errlen, "tensor 'layers.%d.mixer.%s': position bias %d is %g (must be finite, |w| ≤ 80)",
                     ctx->layer, p->conv ? "kernel" : "pos_bias", i, (double)w[i]);
            free(w);
            free(X);
            return -EINVAL;
        }
    const kind_weight *W[3] = {&t[T_WQ], &t[T_WK], &t[T_WV]};
    if ((rc = kind_matrix3(ctx, W, d, d, &X->wqkv)) < 0 ||
        (rc = kind_matrix(ctx, &t[T_WO], d, d, ctx->out_scale, &X->wo)) < 0 ||
        (rc = kind_vector(ctx, w, (size_t)H * s, &X->w)) < 0) {
        snprintf(err, errlen, "layer %d %s mixer: backend error %d while uploading weights", ctx->layer, kn, rc);
        aftw_free(X, be);
        free(w);
        return rc;
    }
    free(w);
    *priv = X;
    return 0;
}

static int aftw_step(void *priv, const layer_io *io)
{
    aftw *X = priv;
    backend *be = io->be;
    const backend_ops *o = be->ops;
    int d = X->d, R = io->R, rc;
    backend_buf *in = io->scratch[0], *out = io->scratch[2];
    /* qkv[R × 3d] = h[R × d] · Wqkv[3d × d]ᵀ */
    if ((rc = o->matmul(be, bmview(in, 0, 3 * d), bview(io->h, 0, d), X->wqkv, NULL, R, 3 * d, d, 0)) < 0 ||
        (rc = o->aft_window_step(be, in, X->w, out, io->region_off[R_ACC], io->region_off[R_RING],
                                 io->region_off[R_POS], d, X->s, X->H)) < 0)
        return rc;
    /* x[R × d] += out[R × d] · Wo[d × d]ᵀ */
    return o->matmul(be, bmview(io->x, 0, d), bview(out, 0, d), X->wo, NULL, R, d, d, BACKEND_MM_ACCUMULATE);
}

const layer_kind mixer_aft_local = {
    .name = "aft_local",
    .configure = aft_local_configure,
    .tensors = aftw_tensors,
    .regions = aftw_regions,
    .scratch_floats = aftw_scratch,
    .load = aftw_load,
    .step = aftw_step,
    .free = aftw_free,
};

const layer_kind mixer_aft_conv = {
    .name = "aft_conv",
    .configure = aft_conv_configure,
    .tensors = aftw_tensors,
    .regions = aftw_regions,
    .scratch_floats = aftw_scratch,
    .load = aftw_load,
    .step = aftw_step,
    .free = aftw_free,
};
