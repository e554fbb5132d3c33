/* recurrent/mixer_aft.c — AFT with an exponential position bias, in the
 * recurrent form RWKV-4 made popular:
 *   r, k, v = Wr·h_r, Wk·h_k, Wv·h_v   (width d_model)
 *   wkv_t = (Σ_{i<t} e^{−(t−1−i)w + k_i} v_i + e^{u+k_t} v_t)
 *         / (Σ_{i<t} e^{−(t−1−i)w + k_i}     + e^{u+k_t})
 *   y = Wo·(σ(r) ⊙ wkv)
 * with w = exp(time_decay), u = time_first for aft_variant "decay", and
 * w = u = 0 for "simple". State per session: num, den, max (d doubles each). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "recurrent/mixer.h"

enum { T_WR, T_WK, T_WV, T_WO, T_MUR, T_MUK, T_MUV, T_TD, T_TF };

typedef struct aft {
    mixer_proj3 rkv;
    backend_buf *wo, *w, *u;   /* w, u NULL for AFT-simple */
    int d;
} aft;

static int is_decay(const lind_config *c) { return !strcmp(c->aft_variant, "decay"); }

static int aft_tensors(const lind_config *c, mixer_tensor *t) {
    int d = c->d_model, n = 0;
    t[n++] = (mixer_tensor){"wr", 2, {d, d}, 0};
    t[n++] = (mixer_tensor){"wk", 2, {d, d}, 0};
    t[n++] = (mixer_tensor){"wv", 2, {d, d}, 0};
    t[n++] = (mixer_tensor){"wo", 2, {d, d}, 0};
    if (c->token_shift) {
        t[n++] = (mixer_tensor){"mu_r", 1, {d, 0}, 0};
        t[n++] = (mixer_tensor){"mu_k", 1, {d, 0}, 0};
        t[n++] = (mixer_tensor){"mu_v", 1, {d, 0}, 0};
    } else {
        /* keep the T_* indices stable: these three are never present */
        t[n++] = (mixer_tensor){NULL, 0, {0, 0}, 1};
        t[n++] = (mixer_tensor){NULL, 0, {0, 0}, 1};
        t[n++] = (mixer_tensor){NULL, 0, {0, 0}, 1};
    }
    if (is_decay(c)) {
        t[n++] = (mixer_tensor){"time_decay", 1, {d, 0}, 0};
        t[n++] = (mixer_tensor){"time_first", 1, {d, 0}, 0};
    }
    return n;
}

static int aft_regions(const lind_config *c, mixer_region *r) {
    size_t d = (size_t)c->d_model;
    r[0] = (mixer_region){"num", 8, d};
    r[1] = (mixer_region){"den", 8, d};
    r[2] = (mixer_region){"max", 8, d};
    return 3;
}

static void aft_free(void *priv, backend *be) {
    aft *A = priv;
    if (!A) return;
    mixer_proj3_free(&A->rkv, be);
    be->ops->buf_free(be, A->wo);
    be->ops->buf_free(be, A->w);
    be->ops->buf_free(be, A->u);
    free(A);
}

static int upload(backend *be, backend_buf **b, const float *src, size_t n) {
    int rc = be->ops->buf_new(be, n, b);
    return rc < 0 ? rc : be->ops->buf_upload(be, *b, 0, src, n);
}

static int aft_load(const lind_config *c, int layer, backend *be, const float *const *t, void **priv,
                    char *err, size_t errlen) {
    aft *A = calloc(1, sizeof *A);
    if (!A) return -ENOMEM;
    int d = A->d = c->d_model, rc;
    float *w = NULL;
    if (is_decay(c)) {
        w = malloc((size_t)d * sizeof *w);
        if (!w) { free(A); return -ENOMEM; }
        for (int i = 0; i < d; i++) {
            w[i] = expf(t[T_TD][i]);
            if (!isfinite(w[i]) || !isfinite(t[T_TF][i])) {
                snprintf(err, errlen, "tensor 'layers.%d.mixer.%s': channel %d is not finite (or exp overflows)",
                         layer, isfinite(t[T_TF][i]) ? "time_decay" : "time_first", i);
                free(w);
                free(A);
                return -EINVAL;
            }
        }
    }
    const float *W[3] = {t[T_WR], t[T_WK], t[T_WV]};
    const float *mu[3] = {t[T_MUR], t[T_MUK], t[T_MUV]};
    if ((rc = mixer_proj3_load(&A->rkv, be, c->token_shift, d, d, W, mu)) < 0) goto fail;
    if ((rc = backend_weight_new(be, d, d, t[T_WO], &A->wo)) < 0) goto fail;
    if (w) {
        if ((rc = upload(be, &A->w, w, (size_t)d)) < 0) goto fail;
        if ((rc = upload(be, &A->u, t[T_TF], (size_t)d)) < 0) goto fail;
    }
    free(w);
    *priv = A;
    return 0;
fail:
    snprintf(err, errlen, "layer %d aft mixer: backend error %d while uploading weights", layer, rc);
    free(w);
    aft_free(A, be);
    return rc;
}

static int aft_step(void *priv, const mixer_io *io) {
    aft *A = priv;
    backend *be = io->be;
    backend_buf *rkv = io->scratch[0], *o = io->scratch[2];
    int rc;
    if ((rc = mixer_proj3_run(&A->rkv, io, rkv)) < 0) return rc;
    if ((rc = be->ops->aft_step(be, rkv, A->w, A->u, o, io->region_off[0], A->d)) < 0) return rc;
    return be->ops->matmul(be, o, 0, A->d, A->wo, NULL, io->x, 0, A->d, io->B, A->d, A->d,
                           BACKEND_MM_ACCUMULATE);
}

const mixer_kind mixer_aft = {
    .name = "aft",
    .tensors = aft_tensors,
    .regions = aft_regions,
    .load = aft_load,
    .step = aft_step,
    .free = aft_free,
};
