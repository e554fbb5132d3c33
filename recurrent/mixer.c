/* recurrent/mixer.c — the table of mixer kinds and the helpers they share.
 * Adding a kind: one file defining a `mixer_kind`, one line in kinds[]. */
#include "recurrent/mixer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const mixer_kind *const kinds[] = {
    &mixer_linear,
    &mixer_aft,
};
#define NKINDS (sizeof kinds / sizeof kinds[0])

const mixer_kind *mixer_find(const char *name) {
    for (size_t i = 0; i < NKINDS; i++)
        if (!strcmp(kinds[i]->name, name)) return kinds[i];
    return NULL;
}

const char *mixer_kind_names(char *buf, size_t len) {
    size_t n = 0;
    if (len) buf[0] = 0;
    for (size_t i = 0; i < NKINDS && n < len; i++)
        n += (size_t)snprintf(buf + n, len - n, "%s%s", i ? ", " : "", kinds[i]->name);
    return buf;
}

size_t mixer_scratch_floats(const lind_config *c) {
    size_t w = (size_t)c->d_model;
    size_t hd = (size_t)c->n_heads * (size_t)c->d_head;
    if (hd > w) w = hd;
    return 3 * w;
}

int mixer_proj3_load(mixer_proj3 *p, backend *be, int shift, int n, int d,
                     const float *const W[3], const float *const mu[3]) {
    const backend_ops *o = be->ops;
    memset(p, 0, sizeof *p);
    p->n = n;
    p->d = d;
    p->shift = shift;
    size_t wn = (size_t)n * (size_t)d;
    int rc;
    if (shift) {
        for (int i = 0; i < 3; i++)
            if ((rc = backend_weight_new(be, n, d, W[i], &p->w[i])) < 0) goto fail;
        if ((rc = o->buf_new(be, 3 * (size_t)d, &p->mu)) < 0) goto fail;
        for (int i = 0; i < 3; i++)
            if ((rc = o->buf_upload(be, p->mu, (size_t)i * d, mu[i], (size_t)d)) < 0) goto fail;
    } else {
        float *cat = malloc(3 * wn * sizeof *cat);
        if (!cat) { rc = -ENOMEM; goto fail; }
        for (int i = 0; i < 3; i++) memcpy(cat + (size_t)i * wn, W[i], wn * sizeof *cat);
        rc = backend_weight_new(be, 3 * n, d, cat, &p->fused);
        free(cat);
        if (rc < 0) goto fail;
    }
    return 0;
fail:
    mixer_proj3_free(p, be);
    return rc;
}

int mixer_proj3_run(const mixer_proj3 *p, const mixer_io *io, backend_buf *out) {
    backend *be = io->be;
    int rc, n = p->n, d = p->d;
    if (!p->shift)
        return be->ops->matmul(be, io->h, 0, d, p->fused, NULL, out, 0, 3 * n, io->B, 3 * n, d, 0);
    backend_buf *mix = io->scratch[1];
    if ((rc = be->ops->shift_mix(be, io->h, p->mu, mix, io->shift_off, d, 3)) < 0) return rc;
    for (int i = 0; i < 3; i++)
        if ((rc = be->ops->matmul(be, mix, (size_t)i * d, 3 * d, p->w[i], NULL, out, (size_t)i * n, 3 * n,
                                  io->B, n, d, 0)) < 0)
            return rc;
    return 0;
}

void mixer_proj3_free(mixer_proj3 *p, backend *be) {
    be->ops->buf_free(be, p->fused);
    for (int i = 0; i < 3; i++) be->ops->buf_free(be, p->w[i]);
    be->ops->buf_free(be, p->mu);
    memset(p, 0, sizeof *p);
}
