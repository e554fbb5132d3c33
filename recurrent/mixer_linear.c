/* recurrent/mixer_linear.c — linear attention (Katharopoulos et al. 2020) in
 * recurrent form, with an optional per-head decay γ (RetNet-style when < 1):
 *   q, k, v = Wq·h_q, Wk·h_k, Wv·h_v   (n_heads heads of d_head)
 *   S ← γS + φ(k)vᵀ,  z ← γz + φ(k),  o = φ(q)ᵀS / (φ(q)ᵀz + attn_eps)
 *   y = Wo·concat(o),  φ = elu + 1.
 * State per session: S (H·dh·dh doubles), z (H·dh doubles). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "recurrent/mixer.h"

enum { T_WQ, T_WK, T_WV, T_WO, T_DECAY, T_MUQ, T_MUK, T_MUV };

typedef struct lin {
    mixer_proj3 qkv;
    backend_buf *wo, *gamma;   /* gamma NULL: γ = 1 */
    int H, dh, d;
    float eps;
} lin;

static int lin_tensors(const lind_config *c, mixer_tensor *t) {
    int hd = c->n_heads * c->d_head, d = c->d_model, n = 0;
    t[n++] = (mixer_tensor){"wq", 2, {hd, d}, 0};
    t[n++] = (mixer_tensor){"wk", 2, {hd, d}, 0};
    t[n++] = (mixer_tensor){"wv", 2, {hd, d}, 0};
    t[n++] = (mixer_tensor){"wo", 2, {d, hd}, 0};
    t[n++] = (mixer_tensor){"decay", 1, {c->n_heads, 0}, 1};
    if (c->token_shift) {
        t[n++] = (mixer_tensor){"mu_q", 1, {d, 0}, 0};
        t[n++] = (mixer_tensor){"mu_k", 1, {d, 0}, 0};
        t[n++] = (mixer_tensor){"mu_v", 1, {d, 0}, 0};
    }
    return n;
}

static int lin_regions(const lind_config *c, mixer_region *r) {
    size_t H = (size_t)c->n_heads, dh = (size_t)c->d_head;
    r[0] = (mixer_region){"S", 8, H * dh * dh};
    r[1] = (mixer_region){"z", 8, H * dh};
    return 2;
}

static void lin_free(void *priv, backend *be) {
    lin *L = priv;
    if (!L) return;
    mixer_proj3_free(&L->qkv, be);
    be->ops->buf_free(be, L->wo);
    be->ops->buf_free(be, L->gamma);
    free(L);
}

static int lin_load(const lind_config *c, int layer, backend *be, const float *const *t, void **priv,
                    char *err, size_t errlen) {
    lin *L = calloc(1, sizeof *L);
    if (!L) return -ENOMEM;
    L->H = c->n_heads;
    L->dh = c->d_head;
    L->d = c->d_model;
    L->eps = c->attn_eps;
    int hd = L->H * L->dh, rc;
    if (t[T_DECAY])
        for (int h = 0; h < L->H; h++)
            if (!(t[T_DECAY][h] > 0.0f && t[T_DECAY][h] <= 1.0f)) {
                snprintf(err, errlen, "tensor 'layers.%d.mixer.decay': γ[%d] = %g is outside (0, 1]", layer, h,
                         (double)t[T_DECAY][h]);
                free(L);
                return -EINVAL;
            }
    const float *W[3] = {t[T_WQ], t[T_WK], t[T_WV]};
    const float *mu[3] = {NULL, NULL, NULL};
    if (c->token_shift) { mu[0] = t[T_MUQ]; mu[1] = t[T_MUK]; mu[2] = t[T_MUV]; }
    if ((rc = mixer_proj3_load(&L->qkv, be, c->token_shift, hd, L->d, W, mu)) < 0) goto fail;
    if ((rc = backend_weight_new(be, L->d, hd, t[T_WO], &L->wo)) < 0) goto fail;
    if (t[T_DECAY]) {
        if ((rc = be->ops->buf_new(be, (size_t)L->H, &L->gamma)) < 0) goto fail;
        if ((rc = be->ops->buf_upload(be, L->gamma, 0, t[T_DECAY], (size_t)L->H)) < 0) goto fail;
    }
    *priv = L;
    return 0;
fail:
    snprintf(err, errlen, "layer %d linear mixer: backend error %d while uploading weights", layer, rc);
    lin_free(L, be);
    return rc;
}

static int lin_step(void *priv, const mixer_io *io) {
    lin *L = priv;
    backend *be = io->be;
    int hd = L->H * L->dh, rc;
    backend_buf *qkv = io->scratch[0], *o = io->scratch[2];
    if ((rc = mixer_proj3_run(&L->qkv, io, qkv)) < 0) return rc;
    if ((rc = be->ops->linear_step(be, qkv, L->gamma, o, io->region_off[0], L->H, L->dh, L->eps)) < 0) return rc;
    return be->ops->matmul(be, o, 0, hd, L->wo, NULL, io->x, 0, L->d, io->B, L->d, hd,
                           BACKEND_MM_ACCUMULATE);
}

const mixer_kind mixer_linear = {
    .name = "linear",
    .tensors = lin_tensors,
    .regions = lin_regions,
    .load = lin_load,
    .step = lin_step,
    .free = lin_free,
};
