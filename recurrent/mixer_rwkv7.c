/* recurrent/mixer_rwkv7.c — RWKV-7 "Goose" (x070) time mixing, the math of
 * BlinkDL's RWKV-v7/rwkv_v7_demo_rnn.py, per head h of n_heads (N = d_head,
 * C = H·N = d_model):
 *   x_p = h_t + μ_p⊙(h_{t−1} − h_t)              p ∈ r, w, k, v, a, g
 *   r, k, v = Wr·x_r, Wk·x_k, Wv·x_v
 *   w = exp(−e^{−½}·σ(w0 + tanh(x_w·W1)·W2))       (the decay, in (0.545, 1))
 *   a = σ(a0 + (x_a·A1)·A2),  g = σ(x_g·G1)·G2
 *   v ← v + (v_first − v)⊙σ(v0 + (x_v·V1)·V2)      (not in the source layer)
 *   kk = normalize_h(k⊙k_k),  k ← k⊙(1 + (a − 1)⊙k_a)
 *   S ← S·diag(w) + (S·(−kk))(kk⊙a)ᵀ + v·kᵀ,  o = S·r
 *   y = Wo·((GroupNorm_h(o) + (Σ r⊙k⊙r_k)_h·v) ⊙ g)
 * The value residual v_first is layer 0's v of the same token, passed to
 * later layers through the model's carry channel (recurrent/kind.h): key
 * value_residual "source" (this layer's v becomes v_first; its v0/v1/v2,
 * which BlinkDL's block 0 carries unused, are accepted and ignored), "mix"
 * (the later layers) or "none".
 * Keys: n_heads, d_head, w_lora, a_lora, g_lora (required), v_lora
 * (required with "mix"), value_residual (required), group_norm_eps (64e-5,
 * ln_x's: 1e-5 × head_size_divisor² with BlinkDL's divisor 8). d_model must
 * be n_heads × d_head (x070's dim_att = n_embd).
 * Tensors: BlinkDL's names under the part's prefix; the LoRA matrices are
 * stored [in × out] (x @ W1), transposed here for the backend's products.
 * State per session: the token shift h_{t−1} (C floats) and S (H·N·N floats,
 * fp32: the decay bounds it, see kernels/cpu/ops_rwkv7.c). Backend op:
 * rwkv7_step. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "recurrent/mixer.h"

enum { VR_NONE = 0, VR_SOURCE = 1, VR_MIX = 2 };

typedef struct rwkv7_params {
    int H, N, dw, da, dv, dg, vmode;
    float eps;
} rwkv7_params;
_Static_assert(sizeof(rwkv7_params) <= LIND_KIND_PARAMS * 8, "rwkv7_params too big");

enum {
    T_XR, T_XW, T_XK, T_XV, T_XA, T_XG,
    T_W0, T_W1, T_W2, T_A0, T_A1, T_A2, T_V0, T_V1, T_V2, T_G1, T_G2,
    T_KK, T_KA, T_RK, T_WR, T_WK, T_WV, T_WO, T_LNW, T_LNB, T_COUNT
};
enum { R_SHIFT, R_S };

typedef struct rwkv7 {
    backend_buf *mu;                /* [6C]: 1 − x_r, x_w, x_k, x_v, x_a, x_g */
    backend_buf *wr, *wk, *wv, *wo; /* [C × C] */
    backend_buf *w1, *a1, *a2, *v1, *v2, *g1, *g2;   /* transposed LoRA matrices */
    backend_buf *w2;                /* [dw × C] fp32, for the op */
    backend_buf *par;               /* [8C], rwkv7_step's */
    rwkv7_params p;
    int C;
} rwkv7;

static int rwkv7_configure(const kind_scope *s, const lind_config *c, void *params, char *err, size_t errlen)
{
    rwkv7_params *p = params;
    static const char *const modes[] = {"none", "source", "mix", NULL};
    char vr[16];
    int rc;
    if ((rc = kind_cfg_int(s, "n_heads", 1, 0, 1, 1 << 12, &p->H, err, errlen)) ||
        (rc = kind_cfg_int(s, "d_head", 1, 0, 1, 1 << 10, &p->N, err, errlen)) ||
        (rc = kind_cfg_int(s, "w_lora", 1, 0, 1, 1 << 14, &p->dw, err, errlen)) ||
        (rc = kind_cfg_int(s, "a_lora", 1, 0, 1, 1 << 14, &p->da, err, errlen)) ||
        (rc = kind_cfg_int(s, "g_lora", 1, 0, 1, 1 << 14, &p->dg, err, errlen)) ||
        (rc = kind_cfg_enum(s, "value_residual", 1, NULL, modes, vr, sizeof vr, err, errlen)) ||
        (rc = kind_cfg_num(s, "group_norm_eps", 0, 64e-5, 0.0, 1.0, &p->eps, err, errlen)))
        return rc;
    p->vmode = !strcmp(vr, "source") ? VR_SOURCE : !strcmp(vr, "mix") ? VR_MIX : VR_NONE;
    if ((rc = kind_cfg_int(s, "v_lora", p->vmode == VR_MIX, 0, 0, 1 << 14, &p->dv, err, errlen))) return rc;
    if (p->vmode == VR_MIX && p->dv < 1) {
        snprintf(err, errlen, "%s: value_residual \"mix\" needs v_lora ≥ 1", kind_scope_where(s));
        return -EINVAL;
    }
    if ((long)p->H * p->N != c->d_model) {
        snprintf(err, errlen, "%s: n_heads × d_head = %ld must equal d_model %d", kind_scope_where(s),
                 (long)p->H * p->N, c->d_model);
        return -EINVAL;
    }
    return 0;
}

static int rwkv7_tensors(const lind_config *c, const void *params, kind_tensor *t)
{
    const rwkv7_params *p = params;
    int C = c->d_model;
    static const char *const mu[6] = {"x_r", "x_w", "x_k", "x_v", "x_a", "x_g"};
    for (int i = 0; i < 6; i++) t[T_XR + i] = (kind_tensor){mu[i], 1, {C, 0}, 0, 0};
    t[T_W0] = (kind_tensor){"w0", 1, {C, 0}, 0, 0};
    t[T_W1] = (kind_tensor){"w1", 2, {C, p->dw}, 0, 1};
    t[T_W2] = (kind_tensor){"w2", 2, {p->dw, C}, 0, 0};   /* fp32: the op reads it */
    t[T_A0] = (kind_tensor){"a0", 1, {C, 0}, 0, 0};
    t[T_A1] = (kind_tensor){"a1", 2, {C, p->da}, 0, 1};
    t[T_A2] = (kind_tensor){"a2", 2, {p->da, C}, 0, 1};
    /* "mix" needs them; elsewhere present-and-ignored is allowed (block 0) */
    int vopt = p->vmode != VR_MIX;
    t[T_V0] = (kind_tensor){"v0", 1, {C, 0}, vopt, 0};
    t[T_V1] = (kind_tensor){p->dv ? "v1" : NULL, 2, {C, p->dv}, vopt, 1};
    t[T_V2] = (kind_tensor){p->dv ? "v2" : NULL, 2, {p->dv, C}, vopt, 1};
    t[T_G1] = (kind_tensor){"g1", 2, {C, p->dg}, 0, 1};
    t[T_G2] = (kind_tensor){"g2", 2, {p->dg, C}, 0, 1};
    t[T_KK] = (kind_tensor){"k_k", 1, {C, 0}, 0, 0};
    t[T_KA] = (kind_tensor){"k_a", 1, {C, 0}, 0, 0};
    t[T_RK] = (kind_tensor){"r_k", 2, {p->H, p->N}, 0, 0};
    t[T_WR] = (kind_tensor){"receptance.weight", 2, {C, C}, 0, 1};
    t[T_WK] = (kind_tensor){"key.weight", 2, {C, C}, 0, 1};
    t[T_WV] = (kind_tensor){"value.weight", 2, {C, C}, 0, 1};
    t[T_WO] = (kind_tensor){"output.weight", 2, {C, C}, 0, 1};
    t[T_LNW] = (kind_tensor){"ln_x.weight", 1, {C, 0}, 0, 0};
    t[T_LNB] = (kind_tensor){"ln_x.bias", 1, {C, 0}, 0, 0};
    return T_COUNT;
}

static int rwkv7_regions(const lind_config *c, const void *params, const void *priv, kind_region *r)
{
    (void)priv;   /* the layout follows from the configuration alone */
    const rwkv7_params *p = params;
    r[R_SHIFT] = (kind_region){"shift", LIND_EL_F32, (size_t)c->d_model};
    r[R_S] = (kind_region){"S", LIND_EL_F32, (size_t)p->H * (size_t)p->N * (size_t)p->N};
    return 2;
}

/* scratch[0]: the op's input [R × (6C + dw)]; scratch[1]: the six shifted
 * inputs [R × 6C]; scratch[2]: the LoRA inner activations (each [R × D],
 * one after the other), then the op's output [R × C]. */
static size_t rwkv7_scratch(const lind_config *c, const void *params)
{
    const rwkv7_params *p = params;
    size_t C = (size_t)c->d_model, lora = (size_t)(p->da > p->dg ? p->da : p->dg);
    if ((size_t)p->dv > lora) lora = (size_t)p->dv;
    size_t n = 6 * C + (size_t)p->dw;
    return n > lora ? n : lora;
}

static int rwkv7_carry(const lind_config *c, const void *params, size_t *floats)
{
    *floats = (size_t)c->d_model;
    int m = ((const rwkv7_params *)params)->vmode;
    return m == VR_SOURCE ? KIND_CARRY_WRITES : m == VR_MIX ? KIND_CARRY_READS : KIND_CARRY_NONE;
}

static void rwkv7_free(void *priv, backend *be)
{
    rwkv7 *X = priv;
    if (!X) return;
    backend_buf *b[] = {X->mu, X->wr, X->wk, X->wv, X->wo, X->w1, X->a1, X->a2,
                        X->v1, X->v2, X->g1, X->g2, X->w2, X->par};
    for (size_t i = 0; i < sizeof b / sizeof b[0]; i++) be->ops->buf_free(be, b[i]);
    free(X);
}

/* Upload a file's [rows × cols] LoRA matrix (x @ W) as the backend's
 * [cols × rows] weight, in the precision it arrived in. */
static int lora_upload(kind_ctx *ctx, const kind_weight *w, int rows, int cols, backend_buf **out)
{
    size_t n = (size_t)rows * (size_t)cols;
    kind_weight t = *w;
    void *buf = malloc(n * (w->half ? sizeof(uint16_t) : sizeof(float)));
    if (!buf) return -ENOMEM;
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) {
            size_t from = (size_t)i * cols + j, to = (size_t)j * rows + i;
            if (w->half) ((uint16_t *)buf)[to] = w->half[from];
            else ((float *)buf)[to] = w->f32[from];
        }
    if (w->half) t.half = buf;
    else t.f32 = buf;
    int rc = kind_matrix(ctx, &t, cols, rows, 1.0f, out);
    free(buf);
    return rc;
}

static int rwkv7_load(const lind_config *c, const void *params, kind_ctx *ctx, const kind_weight *t, void **priv,
                      char *err, size_t errlen)
{
    const rwkv7_params *p = params;
    backend *be = ctx->be;
    static const backend_op need[] = {BACKEND_OP_RWKV7_STEP};
    if (kind_require_ops(ctx, "mixer \"rwkv7\"", need, (int)(sizeof need / sizeof *need), err, errlen) < 0)
        return -ENOTSUP;
    int C = c->d_model, rc = -ENOMEM;
    rwkv7 *X = calloc(1, sizeof *X);
    float *mu = malloc(6 * (size_t)C * sizeof *mu), *par = calloc(8 * (size_t)C, sizeof *par);
    if (!X || !mu || !par) goto out;
    X->p = *p;
    X->C = C;
    for (int i = 0; i < 6; i++)
        for (int k = 0; k < C; k++) mu[(size_t)i * C + k] = 1.0f - t[T_XR + i].f32[k];
    const int parts[8] = {T_W0, T_A0, T_V0, T_KK, T_KA, T_RK, T_LNW, T_LNB};
    for (int i = 0; i < 8; i++)   /* v0 of a source layer stays 0: unused */
        if (t[parts[i]].f32 && (i != 2 || p->vmode == VR_MIX))
            memcpy(par + (size_t)i * C, t[parts[i]].f32, (size_t)C * sizeof *par);
    if ((rc = kind_vector(ctx, mu, 6 * (size_t)C, &X->mu)) < 0 ||
        (rc = kind_vector(ctx, par, 8 * (size_t)C, &X->par)) < 0 ||
        (rc = kind_vector(ctx, t[T_W2].f32, (size_t)p->dw * C, &X->w2)) < 0 ||
        (rc = kind_matrix(ctx, &t[T_WR], C, C, 1.0f, &X->wr)) < 0 ||
        (rc = kind_matrix(ctx, &t[T_WK], C, C, 1.0f, &X->wk)) < 0 ||
        (rc = kind_matrix(ctx, &t[T_WV], C, C, 1.0f, &X->wv)) < 0 ||
        (rc = kind_matrix(ctx, &t[T_WO], C, C, ctx->out_scale, &X->wo)) < 0 ||
        (rc = lora_upload(ctx, &t[T_W1], C, p->dw, &X->w1)) < 0 ||
        (rc = lora_upload(ctx, &t[T_A1], C, p->da, &X->a1)) < 0 ||
        (rc = lora_upload(ctx, &t[T_A2], p->da, C, &X->a2)) < 0 ||
        (rc = lora_upload(ctx, &t[T_G1], C, p->dg, &X->g1)) < 0 ||
        (rc = lora_upload(ctx, &t[T_G2], p->dg, C, &X->g2)) < 0 ||
        (p->vmode == VR_MIX && ((rc = lora_upload(ctx, &t[T_V1], C, p->dv, &X->v1)) < 0 ||
                                (rc = lora_upload(ctx, &t[T_V2], p->dv, C, &X->v2)) < 0))) {
        snprintf(err, errlen, "layer %d rwkv7 mixer: backend error %d while uploading weights", ctx->layer, rc);
        goto out;
    }
    *priv = X;
    X = NULL;
    rc = 0;
out:
    if (rc == -ENOMEM && X) snprintf(err, errlen, "layer %d rwkv7 mixer: out of memory", ctx->layer);
    free(mu);
    free(par);
    rwkv7_free(X, be);
    return rc;
}

static int rwkv7_step(void *priv, const layer_io *io)
{
    rwkv7 *X = priv;
    backend *be = io->be;
    const backend_ops *o = be->ops;
    const rwkv7_params *p = &X->p;
    int C = X->C, R = io->R, ld = 6 * C + p->dw, m6 = 6 * C, rc;
    backend_buf *in = io->scratch[0], *mix = io->scratch[1], *tmp = io->scratch[2];
    if (p->vmode != VR_NONE && !io->carry) return -EINVAL;
    /* mix [R × 6C] columns: x_r 0, x_w C, x_k 2C, x_v 3C, x_a 4C, x_g 5C;
     * in [R × ld] columns as rwkv7_step reads them: r 0, k C, v 2C, a 3C, v LoRA 4C, g 5C, xw·W1 6C */
    if ((rc = o->shift_mix(be, io->h, X->mu, mix, io->region_off[R_SHIFT], C, 6)) < 0 ||
        /* r[R × C] = x_r[R × C] · Wr[C × C]ᵀ */
        (rc = o->matmul(be, bmview(in, 0, ld), bview(mix, 0, m6), X->wr, NULL, R, C, C, 0)) < 0 ||
        /* k[R × C] = x_k[R × C] · Wk[C × C]ᵀ */
        (rc = o->matmul(be, bmview(in, (size_t)C, ld), bview(mix, 2 * (size_t)C, m6), X->wk, NULL, R, C, C, 0)) < 0 ||
        /* v[R × C] = x_v[R × C] · Wv[C × C]ᵀ */
        (rc = o->matmul(be, bmview(in, 2 * (size_t)C, ld), bview(mix, 3 * (size_t)C, m6), X->wv, NULL, R, C, C, 0)) < 0 ||
        /* tmp[R × da] = x_a[R × C] · A1[da × C]ᵀ */
        (rc = o->matmul(be, bmview(tmp, 0, p->da), bview(mix, 4 * (size_t)C, m6), X->a1, NULL, R, p->da, C, 0)) < 0 ||
        /* a[R × C] = tmp[R × da] · A2[C × da]ᵀ */
        (rc = o->matmul(be, bmview(in, 3 * (size_t)C, ld), bview(tmp, 0, p->da), X->a2, NULL, R, C, p->da, 0)) < 0 ||
        /* tmp[R × dg] = σ(x_g[R × C] · G1[dg × C]ᵀ) */
        (rc = o->matmul(be, bmview(tmp, 0, p->dg), bview(mix, 5 * (size_t)C, m6), X->g1, NULL, R, p->dg, C,
                        BACKEND_MM_SIGMOID)) < 0 ||
        /* g[R × C] = tmp[R × dg] · G2[C × dg]ᵀ */
        (rc = o->matmul(be, bmview(in, 5 * (size_t)C, ld), bview(tmp, 0, p->dg), X->g2, NULL, R, C, p->dg, 0)) < 0 ||
        /* xw·W1[R × dw] = x_w[R × C] · W1[dw × C]ᵀ */
        (rc = o->matmul(be, bmview(in, 6 * (size_t)C, ld), bview(mix, (size_t)C, m6), X->w1, NULL, R, p->dw, C, 0)) < 0)
        return rc;
    if (p->vmode == VR_MIX &&
        /* tmp[R × dv] = x_v[R × C] · V1[dv × C]ᵀ */
        ((rc = o->matmul(be, bmview(tmp, 0, p->dv), bview(mix, 3 * (size_t)C, m6), X->v1, NULL, R, p->dv, C, 0)) < 0 ||
         /* v LoRA[R × C] = tmp[R × dv] · V2[C × dv]ᵀ */
         (rc = o->matmul(be, bmview(in, 4 * (size_t)C, ld), bview(tmp, 0, p->dv), X->v2, NULL, R, C, p->dv, 0)) < 0))
        return rc;
    if ((rc = o->rwkv7_step(be, in, ld, X->par, X->w2, p->dw, io->carry, p->vmode, tmp, io->region_off[R_S], p->H,
                            p->N, p->eps)) < 0)
        return rc;
    /* x[R × C] += tmp[R × C] · Wo[C × C]ᵀ */
    return o->matmul(be, bmview(io->x, 0, C), bview(tmp, 0, C), X->wo, NULL, R, C, C, BACKEND_MM_ACCUMULATE);
}

const layer_kind mixer_rwkv7 = {
    .name = "rwkv7",
    .configure = rwkv7_configure,
    .tensors = rwkv7_tensors,
    .regions = rwkv7_regions,
    .scratch_floats = rwkv7_scratch,
    .load = rwkv7_load,
    .step = rwkv7_step,
    .free = rwkv7_free,
    .carry = rwkv7_carry,
};
