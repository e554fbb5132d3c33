/* recurrent/mixer_mamba2.c — Mamba-2's mixer (Dao & Gu 2024, "Transformers
 * are SSMs"), the function of transformers' Mamba2Mixer (its torch path), in
 * recurrent form. With H = n_heads, P = d_head, I = H·P, N = d_state,
 * G = n_groups, CD = I + 2·G·N:
 *   [z | xBC | dt] = in_proj·h                    (z [I], xBC [CD], dt [H])
 *   xBC = SiLU(conv_K(xBC) + conv_bias)           causal depthwise, K taps
 *   x, B, C = xBC split [I, G·N, G·N]             head h reads group h/(H/G)
 *   dt = clamp(softplus(dt + dt_bias), dt_min, dt_max),  A = −exp(A_log)
 *   S[h] ← exp(dt·A)·S[h] + dt·x_h ⊗ B_g,  y_h = S[h]·C_g + D_h·x_h
 *   out = out_proj·RMSNorm_I(y ⊙ SiLU(z))·norm_w  (over all I channels, as
 *                                                  HF's MambaRMSNormGated)
 * Keys: n_heads, d_head, d_state (required); n_groups (1, divides n_heads),
 * conv_size (4), proj_bias (false: in_proj/out_proj biases), conv_bias
 * (true), dt_min (0), dt_max (+inf), gate_norm_eps (1e-5).
 * Tensors carry HF's names under the part's prefix (in_proj.weight,
 * conv1d.weight [CD, 1, K], dt_bias, A_log, D, norm.weight, out_proj.weight,
 * and the biases). in_proj's rows are uploaded reordered as [xBC | z | dt]
 * so the convolution's channels start at column 0 of the product.
 * State per session: S (H·P·N floats), the convolution's ring of the last
 * K−1 inputs (CD·(K−1) floats) and its head index (one int32).
 * Backend ops: short_conv, mamba2_step, rmsnorm. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "recurrent/mixer.h"

typedef struct mamba2_params {
    int H, P, N, G, K, proj_bias, conv_bias;
    float dt_min, dt_max, eps;
} mamba2_params;
_Static_assert(sizeof(mamba2_params) <= LIND_KIND_PARAMS * 8, "mamba2_params too big");

enum { T_IN, T_IN_B, T_CONV, T_CONV_B, T_DTB, T_ALOG, T_D, T_NORM, T_OUT, T_OUT_B };
enum { R_S, R_RING, R_IDX };

typedef struct mamba2 {
    backend_buf *w_in, *b_in;   /* [(CD + I + H) × d], rows [xBC | z | dt]; bias or NULL */
    backend_buf *conv;          /* [CD × K] */
    backend_buf *par;           /* conv bias [CD], dt_bias [H], A [H], D [H] */
    backend_buf *norm;          /* [I] */
    backend_buf *w_out, *b_out; /* [d × I]; bias or NULL */
    int H, P, N, G, K, d;
    float dt_min, dt_max, eps;
} mamba2;

static int dims(const mamba2_params *p, int *I, int *CD, int *PT)
{
    *I = p->H * p->P;
    *CD = *I + 2 * p->G * p->N;
    *PT = *CD + *I + p->H;
    return 0;
}

static int mamba2_configure(const kind_scope *s, const lind_config *c, void *params, char *err, size_t errlen)
{
    (void)c;
    mamba2_params *p = params;
    int rc;
    if ((rc = kind_cfg_int(s, "n_heads", 1, 0, 1, 1 << 12, &p->H, err, errlen)) ||
        (rc = kind_cfg_int(s, "d_head", 1, 0, 1, 1 << 12, &p->P, err, errlen)) ||
        (rc = kind_cfg_int(s, "d_state", 1, 0, 1, 1 << 12, &p->N, err, errlen)) ||
        (rc = kind_cfg_int(s, "n_groups", 0, 1, 1, 1 << 12, &p->G, err, errlen)) ||
        (rc = kind_cfg_int(s, "conv_size", 0, 4, 2, 16, &p->K, err, errlen)) ||
        (rc = kind_cfg_bool(s, "proj_bias", 0, 0, &p->proj_bias, err, errlen)) ||
        (rc = kind_cfg_bool(s, "conv_bias", 0, 1, &p->conv_bias, err, errlen)) ||
        (rc = kind_cfg_num(s, "dt_min", 0, 0.0, 0.0, 1e30, &p->dt_min, err, errlen)) ||
        (rc = kind_cfg_num(s, "dt_max", 0, INFINITY, 0.0, INFINITY, &p->dt_max, err, errlen)) ||
        (rc = kind_cfg_num(s, "gate_norm_eps", 0, 1e-5, 0.0, 1.0, &p->eps, err, errlen)))
        return rc;
    if (p->H % p->G) {
        snprintf(err, errlen, "%s: n_groups %d does not divide n_heads %d", kind_scope_where(s), p->G, p->H);
        return -EINVAL;
    }
    if (p->dt_min > p->dt_max) {
        snprintf(err, errlen, "%s: dt_min %g is above dt_max %g", kind_scope_where(s), (double)p->dt_min,
                 (double)p->dt_max);
        return -EINVAL;
    }
    if ((long)p->H * p->P > (1 << 17) || (long)p->H * p->P * p->N > (1L << 24) || (long)p->G * p->N > (1 << 16)) {
        snprintf(err, errlen, "%s: n_heads × d_head = %ld (≤ 131072), × d_state = %ld (≤ 16777216), n_groups × d_state "
                 "= %ld (≤ 65536): too large", kind_scope_where(s), (long)p->H * p->P, (long)p->H * p->P * p->N,
                 (long)p->G * p->N);
        return -EINVAL;
    }
    return 0;
}

static int mamba2_tensors(const lind_config *c, const void *params, kind_tensor *t)
{
    const mamba2_params *p = params;
    int I, CD, PT, d = c->d_model, H = p->H;
    dims(p, &I, &CD, &PT);
    t[T_IN] = (kind_tensor){"in_proj.weight", 2, {PT, d}, 0, 1};
    t[T_IN_B] = (kind_tensor){p->proj_bias ? "in_proj.bias" : NULL, 1, {PT, 0}, 0, 0};
    t[T_CONV] = (kind_tensor){"conv1d.weight", 2, {CD, p->K}, 0, 0};
    t[T_CONV_B] = (kind_tensor){p->conv_bias ? "conv1d.bias" : NULL, 1, {CD, 0}, 0, 0};
    t[T_DTB] = (kind_tensor){"dt_bias", 1, {H, 0}, 0, 0};
    t[T_ALOG] = (kind_tensor){"A_log", 1, {H, 0}, 0, 0};
    t[T_D] = (kind_tensor){"D", 1, {H, 0}, 0, 0};
    t[T_NORM] = (kind_tensor){"norm.weight", 1, {I, 0}, 0, 0};
    t[T_OUT] = (kind_tensor){"out_proj.weight", 2, {d, I}, 0, 1};
    t[T_OUT_B] = (kind_tensor){p->proj_bias ? "out_proj.bias" : NULL, 1, {d, 0}, 0, 0};
    return T_OUT_B + 1;
}

static int mamba2_regions(const lind_config *c, const void *params, const void *priv, kind_region *r)
{
    (void)priv;   /* the layout follows from the configuration alone */
    (void)c;
    const mamba2_params *p = params;
    int I, CD, PT;
    dims(p, &I, &CD, &PT);
    r[R_S] = (kind_region){"S", LIND_EL_F32, (size_t)p->H * p->P * p->N};
    r[R_RING] = (kind_region){"conv", LIND_EL_F32, (size_t)CD * (size_t)(p->K - 1)};
    r[R_IDX] = (kind_region){"conv_idx", LIND_EL_I32, 1};
    return 3;
}

/* scratch[0]: the products [R × (CD + I + H)], convolved in place;
 * scratch[1]: the gated outputs [R × I], normed in place. */
static size_t mamba2_scratch(const lind_config *c, const void *params)
{
    (void)c;
    int I, CD, PT;
    dims(params, &I, &CD, &PT);
    return (size_t)PT;
}

static void mamba2_free(void *priv, backend *be)
{
    mamba2 *X = priv;
    if (!X) return;
    backend_buf *b[] = {X->w_in, X->b_in, X->conv, X->par, X->norm, X->w_out, X->b_out};
    for (size_t i = 0; i < sizeof b / sizeof b[0]; i++) be->ops->buf_free(be, b[i]);
    free(X);
}

/* in_proj's rows from HF's order [z (I) | xBC (CD) | dt (H)] to [xBC | z | dt],
 * rows of `row` bytes each; returns a malloc'd copy (NULL: out of memory). */
static void *reorder_rows(const void *src, int I, int CD, int H, size_t row)
{
    char *dst = malloc((size_t)(CD + I + H) * row);
    if (!dst) return NULL;
    const char *s = src;
    memcpy(dst, s + (size_t)I * row, (size_t)CD * row);
    memcpy(dst + (size_t)CD * row, s, (size_t)I * row);
    memcpy(dst + (size_t)(CD + I) * row, s + (size_t)(I + CD) * row, (size_t)H * row);
    return dst;
}

static int mamba2_load(const lind_config *c, const void *params, kind_ctx *ctx, const kind_weight *t, void **priv,
                       char *err, size_t errlen)
{
    const mamba2_params *p = params;
    backend *be = ctx->be;
    static const backend_op need[] = {BACKEND_OP_SHORT_CONV, BACKEND_OP_MAMBA2_STEP, BACKEND_OP_RMSNORM};
    if (kind_require_ops(ctx, "mixer \"mamba2\"", need, (int)(sizeof need / sizeof *need), err, errlen) < 0)
        return -ENOTSUP;
    int I, CD, PT, H = p->H, d = c->d_model, rc = -ENOMEM;
    dims(p, &I, &CD, &PT);
    mamba2 *X = calloc(1, sizeof *X);
    float *par = calloc((size_t)CD + 3 * (size_t)H, sizeof *par), *bin = NULL;
    kind_weight win = t[T_IN];
    void *rows = NULL;
    if (!X || !par) goto out;
    *X = (mamba2){.H = H, .P = p->P, .N = p->N, .G = p->G, .K = p->K, .d = d, .dt_min = p->dt_min,
                  .dt_max = p->dt_max, .eps = p->eps};
    if (p->conv_bias) memcpy(par, t[T_CONV_B].f32, (size_t)CD * sizeof *par);
    for (int h = 0; h < H; h++) {
        float A = -expf(t[T_ALOG].f32[h]);
        if (!isfinite(A) || !(A < 0.0f)) {
            snprintf(err, errlen, "tensor 'layers.%d.mixer.A_log': head %d: −exp(%g) is not a finite negative rate",
                     ctx->layer, h, (double)t[T_ALOG].f32[h]);
            rc = -EINVAL;
            goto out;
        }
        par[CD + h] = t[T_DTB].f32[h];
        par[CD + H + h] = A;
        par[CD + 2 * H + h] = t[T_D].f32[h];
    }
    /* in_proj reordered: as fp32 (plain or to be quantized) or as half */
    if (win.half) {
        if (!(rows = reorder_rows(win.half, I, CD, H, (size_t)d * sizeof *win.half))) goto out;
        win.half = rows;
    } else {
        if (!(rows = reorder_rows(win.f32, I, CD, H, (size_t)d * sizeof *win.f32))) goto out;
        win.f32 = rows;
    }
    if (p->proj_bias && !(bin = reorder_rows(t[T_IN_B].f32, I, CD, H, sizeof *bin))) goto out;
    if ((rc = kind_matrix(ctx, &win, PT, d, 1.0f, &X->w_in)) < 0 ||
        (bin && (rc = kind_vector(ctx, bin, (size_t)PT, &X->b_in)) < 0) ||
        (rc = kind_vector(ctx, t[T_CONV].f32, (size_t)CD * p->K, &X->conv)) < 0 ||
        (rc = kind_vector(ctx, par, (size_t)CD + 3 * (size_t)H, &X->par)) < 0 ||
        (rc = kind_vector(ctx, t[T_NORM].f32, (size_t)I, &X->norm)) < 0 ||
        (rc = kind_matrix(ctx, &t[T_OUT], d, I, ctx->out_scale, &X->w_out)) < 0 ||
        (p->proj_bias && (rc = kind_vector(ctx, t[T_OUT_B].f32, (size_t)d, &X->b_out)) < 0)) {
        snprintf(err, errlen, "layer %d mamba2 mixer: backend error %d while uploading weights", ctx->layer, rc);
        goto out;
    }
    if (p->proj_bias && ctx->out_scale != 1.0f) {   /* never with HF's config; kept exact otherwise */
        snprintf(err, errlen, "layer %d mamba2 mixer: rescale_every with proj_bias is not supported", ctx->layer);
        rc = -EINVAL;
        goto out;
    }
    *priv = X;
    X = NULL;
    rc = 0;
out:
    if (rc == -ENOMEM && !err[0]) snprintf(err, errlen, "layer %d mamba2 mixer: out of memory", ctx->layer);
    free(par);
    free(bin);
    free(rows);
    mamba2_free(X, be);
    return rc;
}

static int mamba2_step(void *priv, const layer_io *io)
{
    mamba2 *X = priv;
    backend *be = io->be;
    const backend_ops *o = be->ops;
    int I = X->H * X->P, CD = I + 2 * X->G * X->N, PT = CD + I + X->H, d = X->d, R = io->R, rc;
    backend_buf *in = io->scratch[0], *y = io->scratch[1];
    /* in[R × PT] = h[R × d] · W_in[PT × d]ᵀ + b_in */
    if ((rc = o->matmul(be, bmview(in, 0, PT), bview(io->h, 0, d), X->w_in, X->b_in, R, PT, d, 0)) < 0 ||
        (rc = o->short_conv(be, in, PT, in, PT, X->conv, CD, X->K, io->region_off[R_RING], io->region_off[R_IDX],
                            0)) < 0 ||
        (rc = o->mamba2_step(be, in, PT, X->par, y, io->region_off[R_S], X->H, X->P, X->N, X->G, X->dt_min,
                             X->dt_max)) < 0 ||
        (rc = o->rmsnorm(be, y, y, X->norm, I, X->eps)) < 0)
        return rc;
    /* x[R × d] += y[R × I] · W_out[d × I]ᵀ + b_out */
    return o->matmul(be, bmview(io->x, 0, d), bview(y, 0, I), X->w_out, X->b_out, R, d, I, BACKEND_MM_ACCUMULATE);
}

const layer_kind mixer_mamba2 = {
    .name = "mamba2",
    .configure = mamba2_configure,
    .tensors = mamba2_tensors,
    .regions = mamba2_regions,
    .scratch_floats = mamba2_scratch,
    .load = mamba2_load,
    .step = mamba2_step,
    .free = mamba2_free,
};
