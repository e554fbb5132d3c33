/* recurrent/mixer.c — the table of mixer kinds and the helpers they share.
 * Adding a kind: one file defining a `layer_kind`, one row in MIXER_KINDS. */
#include "recurrent/mixer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The mixer kinds, one row each: X(its layer_kind, defined in its
 * recurrent/mixer_*.c); mixer_kind_names() lists them in this order. */
#define MIXER_KINDS(X) \
    X(mixer_linear)    \
    X(mixer_aft)       \
    X(mixer_delta)     \
    X(mixer_window)    \
    X(mixer_aft_local) \
    X(mixer_aft_conv)  \
    X(mixer_retnet)    \
    X(mixer_performer) \
    X(mixer_cosformer) \
    X(mixer_linformer) \
    X(mixer_rwkv7)     \
    X(mixer_mamba2)

#define MIXER_DECL(k) extern const layer_kind k;
MIXER_KINDS(MIXER_DECL)
#undef MIXER_DECL

static const layer_kind *const kinds[] = {
#define MIXER_ROW(k) &k,
    MIXER_KINDS(MIXER_ROW)
#undef MIXER_ROW
};
#define NKINDS (sizeof kinds / sizeof kinds[0])

const layer_kind *mixer_find(const char *name)
{
    for (size_t i = 0; i < NKINDS; i++)
        if (!strcmp(kinds[i]->name, name)) return kinds[i];
    return NULL;
}

const char *mixer_kind_names(char *buf, size_t len)
{
    size_t n = 0;
    if (len) buf[0] = 0;
    for (size_t i = 0; i < NKINDS && n < len; i++)
        n += (size_t)snprintf(buf + n, len - n, "%s%s", i ? ", " : "", kinds[i]->name);
    return buf;
}

int mixer_proj3_load(mixer_proj3 *p, kind_ctx *ctx, int shift, int n, int d, const kind_weight *const W[3],
                     const float *const mu[3])
{
    backend *be = ctx->be;
    memset(p, 0, sizeof *p);
    p->n = n;
    p->d = d;
    p->shift = shift;
    int rc;
    if (shift) {
        for (int i = 0; i < 3; i++)
            if ((rc = kind_matrix(ctx, W[i], n, d, 1.0f, &p->w[i])) < 0) goto fail;
        if ((rc = be->ops->buf_new(be, 3 * (size_t)d, &p->mu)) < 0) goto fail;
        for (int i = 0; i < 3; i++)
            if ((rc = be->ops->buf_upload(be, p->mu, (size_t)i * d, mu[i], (size_t)d)) < 0) goto fail;
    } else if ((rc = kind_matrix3(ctx, W, n, d, &p->fused)) < 0) {
        goto fail;
    }
    return 0;
fail:
    mixer_proj3_free(p, be);
    return rc;
}

int mixer_proj3_run(const mixer_proj3 *p, const layer_io *io, size_t shift_off, backend_buf *out)
{
    backend *be = io->be;
    int rc, n = p->n, d = p->d;
    if (!p->shift)
        /* out[R × 3n] = h[R × d] · W[3n × d]ᵀ */
        return be->ops->matmul(be, bmview(out, 0, 3 * n), bview(io->h, 0, d), p->fused, NULL, io->R, 3 * n, d, 0);
    backend_buf *mix = io->scratch[1];
    if ((rc = be->ops->shift_mix(be, io->h, p->mu, mix, shift_off, d, 3)) < 0) return rc;
    for (int i = 0; i < 3; i++)
        /* out[R × n] at column i·n = mix[R × d] at column i·d · W_i[n × d]ᵀ */
        if ((rc = be->ops->matmul(be, bmview(out, (size_t)i * n, 3 * n), bview(mix, (size_t)i * d, 3 * d), p->w[i],
                                  NULL, io->R, n, d, 0)) < 0)
            return rc;
    return 0;
}

void mixer_proj3_free(mixer_proj3 *p, backend *be)
{
    be->ops->buf_free(be, p->fused);
    for (int i = 0; i < 3; i++) be->ops->buf_free(be, p->w[i]);
    be->ops->buf_free(be, p->mu);
    memset(p, 0, sizeof *p);
}
