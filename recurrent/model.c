/* recurrent/model.c — loading a model and stepping a batch of sessions.
 *
 * The step, written once against kernels/backend.h:
 *   x = embed[token]
 *   per layer:  h = LN1(x);  x += Mixer(h);  h = LN2(x);  x += W2·GELU(W1·h + b1) + b2
 *   logits = Head·LN_f(x)
 * Mixer internals live behind recurrent/mixer.h. */
#include "recurrent/model.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "kernels/backend.h"
#include "recurrent/config.h"
#include "recurrent/mixer.h"
#include "recurrent/safetensors.h"
#include "recurrent/errmsg.h"

typedef struct layer {
    backend_buf *ln1_w, *ln1_b, *ln2_w, *ln2_b, *w1, *b1, *w2, *b2;
    const mixer_kind *kind;
    void *mixer;
    size_t region_off[MIXER_MAX_REGIONS];
    size_t shift_off;
} layer;

struct model {
    lind_config cfg;
    backend *be;
    backend_buf *embed, *lnf_w, *lnf_b, *head;
    layer L[LIND_MAX_LAYERS];
    size_t state_bytes, params;
    model_state_region *regions;
    int nregions;
    uint64_t fingerprint;
    int nslots;
    uint8_t *seen;                /* nslots flags for the distinct-slot check */
    int cap;                      /* batch rows the activations hold */
    backend_buf *x, *h, *ff, *logits, *scratch[3];
};

/* ---- loading ------------------------------------------------------------ */

typedef struct loader {
    const char *dir;
    st_file st;
    char *err;
    size_t errlen;
} loader;

/* Find `name`, check its shape against (d0[, d1]), widen to a malloc'd fp32
 * array in *out. Missing: -ENOENT unless optional (then *out = NULL). */
static int take(loader *ld, const char *name, int ndim, int d0, int d1, int optional, float **out) {
    *out = NULL;
    st_tensor *t = st_find(&ld->st, name);
    if (!t) {
        if (optional) return 0;
        return errmsg_set(-ENOENT, ld->err, ld->errlen, "%s: missing tensor '%s'", ld->st.path, name);
    }
    int ok = t->ndim == ndim && t->shape[0] == d0 && (ndim == 1 || t->shape[1] == d1);
    if (!ok) {
        char got[96] = "[", want[48];
        size_t n = 1;
        for (int i = 0; i < t->ndim && n < sizeof got - 24; i++)
            n += (size_t)snprintf(got + n, sizeof got - n, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
        snprintf(got + n, sizeof got - n, "]");
        if (ndim == 1) snprintf(want, sizeof want, "[%d]", d0);
        else snprintf(want, sizeof want, "[%d, %d]", d0, d1);
        return errmsg_set(-EINVAL, ld->err, ld->errlen, "%s: tensor '%s' has shape %s, expected %s", ld->st.path, name,
                    got, want);
    }
    t->used = 1;
    float *p = malloc((t->numel ? t->numel : 1) * sizeof *p);
    if (!p) return errmsg_set(-ENOMEM, ld->err, ld->errlen, "%s: out of memory reading '%s'", ld->st.path, name);
    st_read_f32(&ld->st, t, p);
    for (size_t i = 0; i < t->numel; i++)
        if (!isfinite(p[i])) {
            free(p);
            return errmsg_set(-EINVAL, ld->err, ld->errlen, "%s: tensor '%s' holds a non-finite value at element %zu",
                        ld->st.path, name, i);
        }
    *out = p;
    return 0;
}

/* take + upload into a new device buffer; `weight`: a matmul W, uploaded
 * with backend_weight_new (the backend picks its layout). */
static int take_up_as(model *m, loader *ld, const char *name, int ndim, int d0, int d1, int weight,
                      backend_buf **out) {
    float *p;
    int rc = take(ld, name, ndim, d0, d1, 0, &p);
    if (rc < 0) return rc;
    size_t n = (size_t)d0 * (ndim == 2 ? (size_t)d1 : 1);
    if (weight)
        rc = backend_weight_new(m->be, d0, d1, p, out);
    else if ((rc = m->be->ops->buf_new(m->be, n, out)) == 0)
        rc = m->be->ops->buf_upload(m->be, *out, 0, p, n);
    free(p);
    if (rc < 0) return errmsg_set(rc, ld->err, ld->errlen, "%s: backend could not take '%s' (error %d)", ld->dir, name, rc);
    return 0;
}

static int take_up(model *m, loader *ld, const char *name, int ndim, int d0, int d1, backend_buf **out) {
    return take_up_as(m, ld, name, ndim, d0, d1, 0, out);
}

static int take_w(model *m, loader *ld, const char *name, int d0, int d1, backend_buf **out) {
    return take_up_as(m, ld, name, 2, d0, d1, 1, out);
}

static int load_layer(model *m, loader *ld, int i) {
    const lind_config *c = &m->cfg;
    layer *L = &m->L[i];
    char nm[128];
    int rc, d = c->d_model;
#define T(field, suffix, nd, a, b)                                              \
    snprintf(nm, sizeof nm, "layers.%d.%s", i, suffix);                        \
    if ((rc = take_up_as(m, ld, nm, nd, a, b, nd == 2, &L->field)) < 0) return rc;
    T(ln1_w, "ln1.weight", 1, d, 0);
    T(ln1_b, "ln1.bias", 1, d, 0);
    T(ln2_w, "ln2.weight", 1, d, 0);
    T(ln2_b, "ln2.bias", 1, d, 0);
    T(w1, "ffn.w1", 2, c->d_ff, d);
    T(b1, "ffn.b1", 1, c->d_ff, 0);
    T(w2, "ffn.w2", 2, d, c->d_ff);
    T(b2, "ffn.b2", 1, d, 0);
#undef T
    L->kind = mixer_find(c->mixers[i]);
    mixer_tensor spec[MIXER_MAX_TENSORS];
    float *host[MIXER_MAX_TENSORS] = {0};
    int n = L->kind->tensors(c, spec);
    rc = 0;
    for (int k = 0; k < n && rc == 0; k++) {
        if (!spec[k].name) continue;
        snprintf(nm, sizeof nm, "layers.%d.mixer.%s", i, spec[k].name);
        rc = take(ld, nm, spec[k].ndim, spec[k].shape[0], spec[k].shape[1], spec[k].optional, &host[k]);
    }
    if (rc == 0) {
        char merr[256] = "";
        rc = L->kind->load(c, i, m->be, (const float *const *)host, &L->mixer, merr, sizeof merr);
        if (rc < 0) errmsg_set(rc, ld->err, ld->errlen, "%s: %s", ld->st.path, merr);
    }
    for (int k = 0; k < n; k++) free(host[k]);
    return rc;
}

/* Lay out the per-session state: 8-byte regions first (aligned), then 4-byte. */
static int layout_state(model *m) {
    const lind_config *c = &m->cfg;
    int total = 0;
    mixer_region r[MIXER_MAX_REGIONS];
    for (int i = 0; i < c->n_layers; i++) total += m->L[i].kind->regions(c, r) + (c->token_shift ? 1 : 0);
    m->regions = calloc((size_t)total, sizeof *m->regions);
    if (!m->regions) return -ENOMEM;
    size_t off = 0;
    int n = 0;
    for (int pass = 8; pass >= 4; pass -= 4) {
        for (int i = 0; i < c->n_layers; i++) {
            int nr = m->L[i].kind->regions(c, r);
            for (int k = 0; k < nr; k++) {
                if (r[k].elem_bytes != pass) continue;
                model_state_region *g = &m->regions[n++];
                g->layer = i;
                snprintf(g->name, sizeof g->name, "%s", r[k].name);
                g->elem_bytes = r[k].elem_bytes;
                g->type = r[k].elem_bytes == 8 ? LIND_EL_F64 : LIND_EL_F32;
                g->offset = off;
                g->count = r[k].count;
                m->L[i].region_off[k] = off;
                off += r[k].count * (size_t)r[k].elem_bytes;
            }
            if (pass == 4 && c->token_shift) {
                model_state_region *g = &m->regions[n++];
                g->layer = i;
                snprintf(g->name, sizeof g->name, "shift");
                g->type = LIND_EL_F32;
                g->elem_bytes = 4;
                g->offset = off;
                g->count = (size_t)c->d_model;
                m->L[i].shift_off = off;
                off += (size_t)c->d_model * 4;
            }
        }
    }
    m->nregions = n;
    m->state_bytes = off;
    return 0;
}

static char *read_file(const char *path, size_t *len, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        errmsg_set(-errno, err, errlen, "%s: %s", path, strerror(errno));
        return NULL;
    }
    char *buf = NULL;
    size_t n = 0, capb = 0;
    for (;;) {
        if (n + 4096 > capb) {
            capb = capb ? capb * 2 : 8192;
            char *nb = realloc(buf, capb);
            if (!nb) {
                free(buf);
                fclose(f);
                errmsg_set(-ENOMEM, err, errlen, "%s: out of memory", path);
                return NULL;
            }
            buf = nb;
        }
        size_t r = fread(buf + n, 1, capb - n - 1, f);
        n += r;
        if (r == 0) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        errmsg_set(-EIO, err, errlen, "%s: read error", path);
        return NULL;
    }
    buf[n] = 0;
    *len = n;
    return buf;
}

int model_load(const char *dir, const char *backend_name, model **out, char *err, size_t errlen) {
    *out = NULL;
    char path[4096];
    loader ld = {.dir = dir, .err = err, .errlen = errlen};
    model *m = calloc(1, sizeof *m);
    if (!m) return errmsg_set(-ENOMEM, err, errlen, "out of memory");
    int rc;
    snprintf(path, sizeof path, "%s/config.json", dir);
    size_t clen = 0;
    char *ctext = read_file(path, &clen, err, errlen);
    if (!ctext) { free(m); return -ENOENT; }
    if ((rc = config_parse(ctext, clen, path, &m->cfg, err, errlen)) < 0) goto out;
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if ((rc = st_open(&ld.st, path, err, errlen)) < 0) goto out;
    if ((rc = backend_new(backend_name, &m->be, err, errlen)) < 0) goto out;

    const lind_config *c = &m->cfg;
    int d = c->d_model;
    if ((rc = take_up(m, &ld, "embed.weight", 2, LIND_VOCAB, d, &m->embed)) < 0) goto out;
    if ((rc = take_up(m, &ld, "ln_f.weight", 1, d, 0, &m->lnf_w)) < 0) goto out;
    if ((rc = take_up(m, &ld, "ln_f.bias", 1, d, 0, &m->lnf_b)) < 0) goto out;
    if ((rc = take_w(m, &ld, "head.weight", LIND_VOCAB, d, &m->head)) < 0) goto out;
    for (int i = 0; i < c->n_layers; i++)
        if ((rc = load_layer(m, &ld, i)) < 0) goto out;
    for (int i = 0; i < ld.st.n; i++) {
        if (!ld.st.t[i].used) {
            rc = errmsg_set(-EINVAL, err, errlen, "%s: unexpected tensor '%s' (not used by this config; a silently "
                      "ignored weight would be a bug)", ld.st.path, ld.st.t[i].name);
            goto out;
        }
        m->params += ld.st.t[i].numel;
    }
    if ((rc = layout_state(m)) < 0) { errmsg_set(rc, err, errlen, "out of memory"); goto out; }

    XXH64_state_t *xs = XXH64_createState();
    if (!xs) { rc = errmsg_set(-ENOMEM, err, errlen, "out of memory"); goto out; }
    XXH64_reset(xs, 0);
    XXH64_update(xs, ctext, clen);
    XXH64_update(xs, ld.st.data, ld.st.data_size);
    m->fingerprint = XXH64_digest(xs);
    XXH64_freeState(xs);
    rc = 0;
out:
    free(ctext);
    st_close(&ld.st);
    if (rc < 0) {
        model_free(m);
        return rc;
    }
    *out = m;
    return 0;
}

static void free_acts(model *m) {
    backend *be = m->be;
    be->ops->buf_free(be, m->x);
    be->ops->buf_free(be, m->h);
    be->ops->buf_free(be, m->ff);
    be->ops->buf_free(be, m->logits);
    for (int i = 0; i < 3; i++) be->ops->buf_free(be, m->scratch[i]);
    m->x = m->h = m->ff = m->logits = m->scratch[0] = m->scratch[1] = m->scratch[2] = NULL;
    m->cap = 0;
}

void model_free(model *m) {
    if (!m) return;
    backend *be = m->be;
    if (be) {
        free_acts(m);
        be->ops->buf_free(be, m->embed);
        be->ops->buf_free(be, m->lnf_w);
        be->ops->buf_free(be, m->lnf_b);
        be->ops->buf_free(be, m->head);
        for (int i = 0; i < m->cfg.n_layers; i++) {
            layer *L = &m->L[i];
            backend_buf *bs[] = {L->ln1_w, L->ln1_b, L->ln2_w, L->ln2_b, L->w1, L->b1, L->w2, L->b2};
            for (size_t k = 0; k < sizeof bs / sizeof bs[0]; k++) be->ops->buf_free(be, bs[k]);
            if (L->kind && L->mixer) L->kind->free(L->mixer, be);
        }
        backend_free(be);
    }
    free(m->regions);
    free(m->seen);
    free(m);
}

/* ---- accessors ------------------------------------------------------- */

const lind_config *model_config(const model *m) { return &m->cfg; }
const char *model_backend_name(const model *m) { return m->be->ops->name; }
const char *model_device_name(const model *m) { return m->be->ops->device_name(m->be); }
size_t model_param_count(const model *m) { return m->params; }
size_t model_state_bytes(const model *m) { return m->state_bytes; }
uint64_t model_fingerprint(const model *m) { return m->fingerprint; }
backend *model_backend(model *m) { return m->be; }

int model_state_regions(const model *m, model_state_region *out, int max) {
    for (int i = 0; i < m->nregions && i < max; i++) out[i] = m->regions[i];
    return m->nregions;
}

/* ---- slots ------------------------------------------------------------ */

int model_slots_reserve(model *m, int n) {
    if (n < 0) return -EINVAL;
    if (n <= m->nslots) return 0;
    uint8_t *s = realloc(m->seen, (size_t)n);
    if (!s) return -ENOMEM;
    m->seen = s;
    memset(m->seen, 0, (size_t)n);
    int rc = m->be->ops->slots_reserve(m->be, n, m->state_bytes);
    if (rc < 0) return rc;
    m->nslots = n;
    return 0;
}

int model_slots_count(const model *m) { return m->nslots; }

int model_slot_reset(model *m, int slot) {
    if (slot < 0 || slot >= m->nslots) return -ERANGE;
    return m->be->ops->slot_zero(m->be, slot);
}

int model_slot_read(model *m, int slot, void *dst) {
    if (slot < 0 || slot >= m->nslots) return -ERANGE;
    return m->be->ops->slot_read(m->be, slot, dst);
}

int model_slot_write(model *m, int slot, const void *src) {
    if (slot < 0 || slot >= m->nslots) return -ERANGE;
    return m->be->ops->slot_write(m->be, slot, src);
}

/* ---- the step ---------------------------------------------------------- */

static int ensure_cap(model *m, int B) {
    if (B <= m->cap) return 0;
    int cap = m->cap ? m->cap : 1;
    while (cap < B) cap *= 2;
    free_acts(m);
    const lind_config *c = &m->cfg;
    backend *be = m->be;
    size_t d = (size_t)c->d_model, sc = mixer_scratch_floats(c);
    int rc;
    if ((rc = be->ops->buf_new(be, cap * d, &m->x)) < 0 || (rc = be->ops->buf_new(be, cap * d, &m->h)) < 0 ||
        (rc = be->ops->buf_new(be, cap * (size_t)c->d_ff, &m->ff)) < 0 ||
        (rc = be->ops->buf_new(be, cap * (size_t)LIND_VOCAB, &m->logits)) < 0)
        goto fail;
    for (int i = 0; i < 3; i++)
        if ((rc = be->ops->buf_new(be, cap * sc, &m->scratch[i])) < 0) goto fail;
    m->cap = cap;
    return 0;
fail:
    free_acts(m);
    return rc;
}

int model_step(model *m, const int *slots, const int *tokens, int B, float *logits) {
    if (B < 1) return -EINVAL;
    int rc = 0;
    for (int b = 0; b < B; b++) {
        if (slots[b] < 0 || slots[b] >= m->nslots || tokens[b] < 0 || tokens[b] >= LIND_VOCAB || m->seen[slots[b]]) {
            rc = -EINVAL;   /* out of range, bad token or a repeated slot */
            B = b;
            break;
        }
        m->seen[slots[b]] = 1;
    }
    for (int b = 0; b < B; b++) m->seen[slots[b]] = 0;
    if (rc < 0) return rc;
    if ((rc = ensure_cap(m, B)) < 0) return rc;

    const lind_config *c = &m->cfg;
    backend *be = m->be;
    const backend_ops *o = be->ops;
    int d = c->d_model, dff = c->d_ff;
    if ((rc = o->begin_step(be, slots, tokens, B)) < 0) return rc;
    if ((rc = o->embed(be, m->embed, m->x, d)) < 0) return rc;
    mixer_io io = {.be = be, .cfg = c, .B = B, .h = m->h, .x = m->x,
                   .scratch = {m->scratch[0], m->scratch[1], m->scratch[2]}};
    for (int i = 0; i < c->n_layers; i++) {
        layer *L = &m->L[i];
        if ((rc = o->layernorm(be, m->x, m->h, L->ln1_w, L->ln1_b, d, c->norm_eps)) < 0) return rc;
        memcpy(io.region_off, L->region_off, sizeof io.region_off);
        io.shift_off = L->shift_off;
        if ((rc = L->kind->step(L->mixer, &io)) < 0) return rc;
        if ((rc = o->layernorm(be, m->x, m->h, L->ln2_w, L->ln2_b, d, c->norm_eps)) < 0) return rc;
        if ((rc = o->matmul(be, m->h, 0, d, L->w1, L->b1, m->ff, 0, dff, B, dff, d, BACKEND_MM_GELU)) < 0)
            return rc;
        if ((rc = o->matmul(be, m->ff, 0, dff, L->w2, L->b2, m->x, 0, d, B, d, dff, BACKEND_MM_ACCUMULATE)) < 0)
            return rc;
    }
    if (!logits) return 0;
    if ((rc = o->layernorm(be, m->x, m->h, m->lnf_w, m->lnf_b, d, c->norm_eps)) < 0) return rc;
    if ((rc = o->matmul(be, m->h, 0, d, m->head, NULL, m->logits, 0, LIND_VOCAB, B, LIND_VOCAB, d, 0)) < 0)
        return rc;
    return o->buf_download(be, m->logits, 0, logits, (size_t)B * LIND_VOCAB);
}
