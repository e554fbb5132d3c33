/* recurrent/model.c — loading a model and stepping batches of sessions.
 *
 * The step, written once against kernels/backend.h, over R rows (runs of one
 * session's consecutive tokens, kernels/backend.h):
 *   x = embed[token];  x = LN_emb(x) if emb_norm
 *   per layer i:  x += Mixer(LN1(x));  x += FFN(LN2(x));
 *                 x *= ½ after every rescale_every-th block
 *   logits = Head·LN_f(x)   for the rows that want them
 * Mixer and FFN internals live behind recurrent/kind.h. */
#include "recurrent/model.h"
#include "recurrent/file.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "kernels/backend.h"
#include "kernels/half.h"
#include "recurrent/config.h"
#include "recurrent/errmsg.h"
#include "recurrent/conventions.h"
#include "recurrent/ffn.h"
#include "recurrent/hf_mamba2.h"
#include "recurrent/hf_rwkv4.h"
#include "recurrent/kind.h"
#include "recurrent/pth.h"
#include "recurrent/rwkv7_pth.h"
#include "recurrent/safetensors.h"
#include "recurrent/tokenizer.h"

typedef struct part {
    const layer_kind *kind;
    const void *params;               /* in the model's cfg */
    void *priv;
    size_t region_off[KIND_MAX_REGIONS];
} part;

typedef struct layer {
    backend_buf *ln1_w, *ln1_b, *ln2_w, *ln2_b;   /* [d] each */
    part mixer, ffn;
} layer;

struct model {
    lind_config cfg;
    backend *be;
    tokenizer *tok;
    backend_buf *embed;                /* [V × d], fp32 */
    backend_buf *emb_w, *emb_b;        /* [d], when emb_norm */
    backend_buf *lnf_w, *lnf_b;        /* [d] */
    backend_buf *head;                 /* [V × d], a matmul weight */
    layer L[LIND_MAX_LAYERS];
    size_t state_bytes, params, block_macs, head_macs, weight_bytes;
    lind_dtype wdtype;
    lind_compute compute;           /* the products' arithmetic (model_opts) */
    model_state_region *regions;
    int nregions;
    uint64_t fingerprint;
    int nslots;
    uint32_t *mark, stamp;             /* per slot: the call that last saw it (run check) */
    unsigned char *bad;                /* [bad_cap] last step's non-finite rows (model_last_nonfinite) */
    int bad_cap, nbad, bad_rows;
    int cap, lcap;                     /* rows the activations / gathered rows hold */
    size_t scratch_floats;             /* per row, the widest part's */
    size_t carry_floats;               /* per row, the carry channel's (0: none) */
    backend_buf *x, *h, *hrows, *scratch[3], *carry;
    backend_buf *logits;               /* the head's output; NULL where the backend has buf_host */
};

/* ---- loading ------------------------------------------------------------ */

typedef struct loader {
    const char *dir;
    /* lind name → the file's name (HF RWKV-4's, BlinkDL's .pth); NULL: as is */
    const char *(*map)(const char *lind_name, char *buf, size_t len);
    /* a second spelling tried when map's is absent (NULL: none) */
    const char *(*alt)(const char *lind_name, char *buf, size_t len);
    lind_dtype want;                   /* opts.weights */
    lind_dtype head;                   /* the head's precision (Q8/Q4: see head_dtype) */
    int matrix_want_override;          /* take(): use `head` for this matrix */
    st_set st;
    char *err;
    size_t errlen;
} loader;

/* The tensor a lind name refers to in this checkpoint (*file set), or NULL;
 * `shown` receives the name as the file spells it, for messages. */
static st_tensor *find(loader *ld, const char *name, st_file **file, char *shown, size_t shownlen)
{
    const char *n = name;
    if (ld->map && !(n = ld->map(name, shown, shownlen))) {
        snprintf(shown, shownlen, "%s", name);
        return NULL;
    }
    if (n == name) snprintf(shown, shownlen, "%s", name);
    st_tensor *t = st_set_find(&ld->st, shown, file);
    char alt[160];
    if (!t && ld->alt && ld->alt(name, alt, sizeof alt) && (t = st_set_find(&ld->st, alt, file)))
        snprintf(shown, shownlen, "%s", alt);
    return t;
}

/* Shape check: the file's shape equals (d0[, d1]) after dropping leading
 * dimensions of size 1 (HF stores RWKV's μ vectors as [1, 1, d]), or, that
 * failing, after dropping every dimension of size 1 on both sides (a
 * depthwise conv1d weight is [C, 1, K]: Mamba's). */
static int shape_ok(const st_tensor *t, int ndim, int d0, int d1)
{
    int k = 0;
    while (t->ndim - k > ndim && t->shape[k] == 1) k++;
    if (t->ndim - k == ndim && t->shape[k] == d0 && (ndim == 1 || t->shape[k + 1] == d1)) return 1;
    int64_t got[8], want[2];
    int ng = 0, nw = 0;
    for (int i = 0; i < t->ndim; i++)
        if (t->shape[i] != 1) {
            if (ng == 8) return 0;
            got[ng++] = t->shape[i];
        }
    if (d0 != 1) want[nw++] = d0;
    if (ndim == 2 && d1 != 1) want[nw++] = d1;
    if (ng != nw) return 0;
    for (int i = 0; i < ng; i++)
        if (got[i] != want[i]) return 0;
    return 1;
}

static int bad_shape(loader *ld, const st_file *f, const char *shown, const st_tensor *t, int ndim, int d0, int d1)
{
    char got[96] = "[", want[48];
    size_t n = 1;
    for (int i = 0; i < t->ndim && n < sizeof got - 24; i++)
        n += (size_t)snprintf(got + n, sizeof got - n, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
    snprintf(got + n, sizeof got - n, "]");
    if (ndim == 1) snprintf(want, sizeof want, "[%d]", d0);
    else snprintf(want, sizeof want, "[%d, %d]", d0, d1);
    return errmsg_set(-EINVAL, ld->err, ld->errlen, "%s: tensor '%s' has shape %s, expected %s", f->path, shown, got,
                      want);
}

/* Find `name`, check its shape, and read it: as fp32 into w->f32, or — a
 * matrix whose precision stays half — as 16-bit values into w->half. Both
 * malloc'd (the caller frees). Missing: -ENOENT unless optional. */
static int take(loader *ld, const char *name, int ndim, int d0, int d1, int optional, int matrix, kind_weight *w)
{
    memset(w, 0, sizeof *w);
    char shown[160];
    st_file *f = NULL;
    st_tensor *t = find(ld, name, &f, shown, sizeof shown);
    if (!t) {
        if (optional) return 0;
        return errmsg_set(-ENOENT, ld->err, ld->errlen, "%s: missing tensor '%s'",
                          ld->st.index_path ? ld->st.index_path : ld->st.f[0].path, shown);
    }
    if (!shape_ok(t, ndim, d0, d1)) return bad_shape(ld, f, shown, t, ndim, d0, d1);
    t->used = 1;
    size_t n = t->numel ? t->numel : 1;
    int wtype = 0;   /* the half type to keep, 0: fp32 */
    lind_dtype want = ld->matrix_want_override ? ld->head : ld->want;
    if (matrix) {
        if (want == LIND_DT_BF16) wtype = BACKEND_W_BF16;
        else if (want == LIND_DT_F16) wtype = BACKEND_W_F16;
        else if (want == LIND_DT_AUTO && t->dtype != ST_F32)
            wtype = t->dtype == ST_BF16 ? BACKEND_W_BF16 : BACKEND_W_F16;
        else if (want == LIND_DT_Q8 || want == LIND_DT_Q4)   /* fp32 values, quantized by the backend */
            w->quant = want == LIND_DT_Q8 ? BACKEND_W_Q8 : BACKEND_W_Q4;
    }
    float *p = malloc(n * sizeof *p);
    if (!p) return errmsg_set(-ENOMEM, ld->err, ld->errlen, "%s: out of memory reading '%s'", f->path, shown);
    st_read_f32(f, t, p);
    for (size_t i = 0; i < t->numel; i++)
        if (!isfinite(p[i])) {
            free(p);
            return errmsg_set(-EINVAL, ld->err, ld->errlen, "%s: tensor '%s' holds a non-finite value at element %zu",
                              f->path, shown, i);
        }
    if (!wtype) {
        w->f32 = p;
        w->name = name;
    } else {
        uint16_t *h = malloc(n * sizeof *h);
        if (!h) {
            free(p);
            return errmsg_set(-ENOMEM, ld->err, ld->errlen, "%s: out of memory reading '%s'", f->path, shown);
        }
        int same = (t->dtype == ST_BF16 && wtype == BACKEND_W_BF16) || (t->dtype == ST_F16 && wtype == BACKEND_W_F16);
        if (same) st_read_half(f, t, h);
        else
            for (size_t i = 0; i < t->numel; i++)
                h[i] = wtype == BACKEND_W_BF16 ? lind_f32_to_bf16(p[i]) : lind_f32_to_f16(p[i]);
        for (size_t i = 0; i < t->numel && !same; i++)
            if (!isfinite(wtype == BACKEND_W_BF16 ? lind_bf16_to_f32(h[i]) : lind_f16_to_f32(h[i]))) {
                free(p);
                free(h);
                return errmsg_set(-EINVAL, ld->err, ld->errlen, "%s: tensor '%s' element %zu overflows %s", f->path,
                                  shown, i, wtype == BACKEND_W_BF16 ? "bf16" : "fp16");
            }
        free(p);
        w->half = h;
        w->wtype = wtype;
    }
    w->present = 1;
    return 0;
}

/* The head's precision under each --dtype: as asked, except that the
 * quantized formats keep the head in HEAD_Q8 / HEAD_Q4 (docs/CPU.md says
 * what was measured). */
#ifndef HEAD_Q8
#define HEAD_Q8 LIND_DT_Q8
#endif
#ifndef HEAD_Q4
#define HEAD_Q4 LIND_DT_Q4
#endif
static lind_dtype head_dtype(lind_dtype want)
{
    return want == LIND_DT_Q8 ? HEAD_Q8 : want == LIND_DT_Q4 ? HEAD_Q4 : want;
}

static void weight_free(kind_weight *w)
{
    free((void *)w->f32);
    free((void *)w->half);
    memset(w, 0, sizeof *w);
}

/* A vector or an fp32 table uploaded as a plain buffer. */
static int take_vec(model *m, loader *ld, const char *name, int ndim, int d0, int d1, backend_buf **out)
{
    kind_weight w;
    int rc = take(ld, name, ndim, d0, d1, 0, 0, &w);
    if (rc < 0) return rc;
    kind_ctx ctx = {.be = m->be, .layer = -1, .out_scale = 1.0f};
    rc = kind_vector(&ctx, w.f32, (size_t)d0 * (ndim == 2 ? (size_t)d1 : 1), out);
    weight_free(&w);
    if (rc < 0) return errmsg_set(rc, ld->err, ld->errlen, "%s: backend could not take '%s' (error %d)", ld->dir, name, rc);
    return 0;
}

static int load_part(model *m, loader *ld, int i, part *P, const char *kind_name, const uint64_t *params,
                     int ffn, float out_scale)
{
    const lind_config *c = &m->cfg;
    char nm[128];
    P->kind = ffn ? ffn_find(kind_name) : mixer_find(kind_name);
    P->params = params;
    kind_tensor spec[KIND_MAX_TENSORS];
    kind_weight w[KIND_MAX_TENSORS];
    memset(w, 0, sizeof w);
    int n = P->kind->tensors(c, params, spec), rc = 0;
    for (int k = 0; k < n && rc == 0; k++) {
        if (!spec[k].name) continue;
        snprintf(nm, sizeof nm, "layers.%d.%s.%s", i, ffn ? "ffn" : "mixer", spec[k].name);
        rc = take(ld, nm, spec[k].ndim, spec[k].shape[0], spec[k].shape[1], spec[k].optional, spec[k].matrix, &w[k]);
    }
    if (rc == 0) {
        char kerr[256] = "";
        kind_ctx ctx = {.be = m->be, .layer = i, .out_scale = out_scale};
        rc = P->kind->load(c, params, &ctx, w, &P->priv, kerr, sizeof kerr);
        if (rc < 0) errmsg_set(rc, ld->err, ld->errlen, "%s: %s", ld->dir, ctx.err[0] ? ctx.err : kerr);
        m->block_macs += ctx.macs;
        m->weight_bytes += ctx.weight_bytes;
    }
    for (int k = 0; k < n; k++) weight_free(&w[k]);
    return rc;
}

static int load_layer(model *m, loader *ld, int i)
{
    const lind_config *c = &m->cfg;
    layer *L = &m->L[i];
    char nm[64];
    int rc, d = c->d_model;
    backend_buf **bufs[4] = {&L->ln1_w, &L->ln1_b, &L->ln2_w, &L->ln2_b};
    const char *names[4] = {"ln1.weight", "ln1.bias", "ln2.weight", "ln2.bias"};
    int no_ffn = !ffn_find(c->layers[i].ffn)->step;   /* the empty FFN: no ln2 */
    for (int k = 0; k < 4; k++) {
        if ((c->norm_rms && (k & 1)) || (no_ffn && k >= 2)) continue;   /* RMSNorm: no bias */
        snprintf(nm, sizeof nm, "layers.%d.%s", i, names[k]);
        if ((rc = take_vec(m, ld, nm, 1, d, 0, bufs[k])) < 0) return rc;
    }
    /* rescale_every: block i's outputs are scaled by 2^-(i / n), matching x,
     * which is halved after every n-th block. */
    float scale = c->rescale_every ? ldexpf(1.0f, -(i / c->rescale_every)) : 1.0f;
    if ((rc = load_part(m, ld, i, &L->mixer, c->layers[i].mixer, c->layers[i].mixer_p, 0, scale)) < 0) return rc;
    return load_part(m, ld, i, &L->ffn, c->layers[i].ffn, c->layers[i].ffn_p, 1, scale);
}

/* Lay out the per-session state: 8-byte regions first (aligned), then 4-byte,
 * each pass layer by layer, mixer before FFN, in the order the kinds declare. */
static int layout_state(model *m)
{
    const lind_config *c = &m->cfg;
    int total = 0;
    kind_region r[KIND_MAX_REGIONS];
    for (int i = 0; i < c->n_layers; i++)
        total += m->L[i].mixer.kind->regions(c, m->L[i].mixer.params, m->L[i].mixer.priv, r) +
                 m->L[i].ffn.kind->regions(c, m->L[i].ffn.params, m->L[i].ffn.priv, r);
    m->regions = calloc((size_t)total + 1, sizeof *m->regions);
    if (!m->regions) return -ENOMEM;
    size_t off = 0;
    int n = 0;
    for (int pass = 8; pass >= 4; pass -= 4)
        for (int i = 0; i < c->n_layers; i++)
            for (int f = 0; f < 2; f++) {
                part *P = f ? &m->L[i].ffn : &m->L[i].mixer;
                int nr = P->kind->regions(c, P->params, P->priv, r);
                for (int k = 0; k < nr; k++) {
                    int eb = (r[k].type == LIND_EL_F64 || r[k].type == LIND_EL_I64) ? 8 : 4;
                    if (eb != pass) continue;
                    model_state_region *g = &m->regions[n++];
                    g->layer = i;
                    snprintf(g->name, sizeof g->name, "%s%s", f ? "ffn." : "", r[k].name);
                    g->type = r[k].type;
                    g->elem_bytes = eb;
                    g->offset = off;
                    g->count = r[k].count;
                    P->region_off[k] = off;
                    off += r[k].count * (size_t)eb;
                }
            }
    m->nregions = n;
    m->state_bytes = off;
    return 0;
}

/* The carry channel (recurrent/kind.h): every reader needs an earlier writer
 * of the same width; the model holds one buffer of the widest. */
static int check_carry(model *m, char *err, size_t errlen)
{
    size_t written = 0;
    for (int i = 0; i < m->cfg.n_layers; i++)
        for (int f = 0; f < 2; f++) {
            part *P = f ? &m->L[i].ffn : &m->L[i].mixer;
            size_t n = 0;
            int use = P->kind->carry ? P->kind->carry(&m->cfg, P->params, &n) : KIND_CARRY_NONE;
            if (use == KIND_CARRY_READS && n != written)
                return errmsg_set(-EINVAL, err, errlen, "layer %d: %s \"%s\" reads the carry channel (%zu floats per "
                                  "row) but no earlier layer writes %s", i, f ? "FFN" : "mixer", P->kind->name, n,
                                  written ? "that width" : "it");
            if (use == KIND_CARRY_WRITES) written = n;
            if (use != KIND_CARRY_NONE && n > m->carry_floats) m->carry_floats = n;
        }
    return 0;
}

/* The tokenizer the directory declares (lind's config) or holds (HF). */
static int load_tokenizer(model *m, const char *dir, char *err, size_t errlen)
{
    lind_config *c = &m->cfg;
    char path[4096];
    if (!c->tokenizer[0]) {   /* HF: whichever file is there */
        for (int i = 0; i < 2 && !c->tokenizer[0]; i++) {
            snprintf(path, sizeof path, "%s/%s", dir, hf_rwkv4_tokenizer_files[i]);
            if (access(path, F_OK) == 0) {
                snprintf(c->tokenizer, sizeof c->tokenizer, "%s", hf_rwkv4_tokenizer_kinds[i]);
                snprintf(c->tokenizer_file, sizeof c->tokenizer_file, "%s", hf_rwkv4_tokenizer_files[i]);
            }
        }
        if (!c->tokenizer[0])
            return errmsg_set(-ENOENT, err, errlen, "%s: no tokenizer: expected %s (BPE) or %s (RWKV World)", dir,
                              hf_rwkv4_tokenizer_files[0], hf_rwkv4_tokenizer_files[1]);
    }
    if (strcmp(c->tokenizer, "bytes") && !c->tokenizer_file[0])
        return errmsg_set(-EINVAL, err, errlen, "%s/config.json: tokenizer \"%s\" needs a \"file\"", dir, c->tokenizer);
    snprintf(path, sizeof path, "%s/%s", dir, c->tokenizer_file);
    int rc = tokenizer_load(c->tokenizer, c->tokenizer_file[0] ? path : NULL, &m->tok, err, errlen);
    if (rc < 0) return rc;
    if (tokenizer_vocab_size(m->tok) > c->vocab_size)
        return errmsg_set(-EINVAL, err, errlen, "%s: the %s tokenizer has %d tokens but the model's vocab_size is %d", dir,
                          c->tokenizer, tokenizer_vocab_size(m->tok), c->vocab_size);
    return 0;
}

int model_load(const char *dir, const char *backend_name, model **out, char *err, size_t errlen)
{
    model_opts o = {.backend = backend_name, .weights = LIND_DT_AUTO, .compute = LIND_COMPUTE_F32};
    return model_load_opts(dir, &o, out, err, errlen);
}

int model_load_opts(const char *dir, const model_opts *o, model **out, char *err, size_t errlen)
{
    *out = NULL;
    char path[4096];
    loader ld = {.dir = dir, .err = err, .errlen = errlen, .want = o ? o->weights : LIND_DT_AUTO};
    model *m = calloc(1, sizeof *m);
    if (!m) return errmsg_set(-ENOMEM, err, errlen, "out of memory");
    int rc;
    size_t clen = 0;
    char *ctext = NULL, pth[2048], pdir[2048];
    /* A BlinkDL .pth (the file, or a directory holding one and no
     * config.json): its config is inferred from the tensors. */
    if ((rc = rwkv7_locate(dir, pth, sizeof pth, pdir, sizeof pdir, err, errlen)) < 0) { free(m); return rc; }
    if (rc == 1) {
        dir = ld.dir = pdir;
        if (!(ld.st.f = calloc(1, sizeof *ld.st.f))) { free(m); return errmsg_set(-ENOMEM, err, errlen, "out of memory"); }
        if ((rc = pth_open(&ld.st.f[0], pth, err, errlen)) < 0) goto out;
        ld.st.n = 1;
        if ((rc = rwkv7_translate(&ld.st.f[0], &ctext, &clen, err, errlen)) < 0) goto out;
        snprintf(path, sizeof path, "%.2000s (config inferred from its tensors)", pth);
        if ((rc = config_parse(ctext, clen, path, &m->cfg, err, errlen)) < 0) goto out;
        snprintf(m->cfg.format, sizeof m->cfg.format, "rwkv7-pth");
        ld.map = rwkv7_tensor_name;
    } else {
        snprintf(path, sizeof path, "%s/config.json", dir);
        if (file_read(path, 0, &ctext, &clen, err, errlen) < 0) { free(m); return -ENOENT; }
        if ((rc = config_parse(ctext, clen, path, &m->cfg, err, errlen)) < 0) goto out;
        if (!strcmp(m->cfg.format, "hf-rwkv4")) ld.map = hf_rwkv4_tensor_name;
        if (!strcmp(m->cfg.format, "hf-mamba2")) {
            ld.map = hf_mamba2_tensor_name;
            ld.alt = hf_mamba2_tensor_alt;
        }
    }
    if ((rc = load_tokenizer(m, dir, err, errlen)) < 0) goto out;
    if ((rc = conventions_read(dir, &m->cfg, m->tok, o ? o->bos : 0, err, errlen)) < 0) goto out;
    if (!ld.st.n && (rc = st_set_open(&ld.st, dir, err, errlen)) < 0) goto out;
    if ((rc = backend_new(o ? o->backend : NULL, o ? o->be : NULL, &m->be, err, errlen)) < 0) goto out;
    m->compute = o ? o->compute : LIND_COMPUTE_F32;
    if (m->compute == LIND_COMPUTE_BF16) {   /* every matrix in bf16, multiplied in bf16 */
        if (ld.want != LIND_DT_AUTO && ld.want != LIND_DT_BF16) {
            rc = errmsg_set(-EINVAL, err, errlen, "bf16 compute multiplies bf16 weights: weights %s conflicts with it",
                            lind_dtype_name(ld.want));
            goto out;
        }
        ld.want = LIND_DT_BF16;
        if (!m->be->ops->set_compute) {
            rc = errmsg_set(-ENOTSUP, err, errlen, "backend %s: no bf16 compute mode (it is the CPU backend's, "
                            "with AVX512_BF16)", m->be->ops->name);
            goto out;
        }
        if ((rc = m->be->ops->set_compute(m->be, BACKEND_COMPUTE_BF16, err, errlen)) < 0) goto out;
    } else if (m->compute != LIND_COMPUTE_F32) {
        rc = errmsg_set(-EINVAL, err, errlen, "unknown compute mode %d", (int)m->compute);
        goto out;
    }
    if ((ld.want == LIND_DT_Q8 || ld.want == LIND_DT_Q4) && !m->be->ops->weight_new_quant) {
        rc = errmsg_set(-ENOTSUP, err, errlen, "backend %s: no %s weights (quantized weights are the CPU backend's): "
                        "use --dtype f32, bf16 or f16, or --backend cpu", m->be->ops->name, lind_dtype_name(ld.want));
        goto out;
    }
    if ((int)ld.want < LIND_DT_AUTO || ld.want > LIND_DT_Q4) {
        rc = errmsg_set(-EINVAL, err, errlen, "unknown weights dtype %d", (int)ld.want);
        goto out;
    }
    ld.head = head_dtype(ld.want);

    const lind_config *c = &m->cfg;
    int d = c->d_model, V = c->vocab_size;
    if ((rc = take_vec(m, &ld, "embed.weight", 2, V, d, &m->embed)) < 0) goto out;
    if (c->norm_rms && !backend_supports(m->be, BACKEND_OP_RMSNORM)) {
        rc = errmsg_set(-ENOTSUP, err, errlen, "%s: the model's norms are RMSNorms, which the %s backend does not have "
                        "(the rmsnorm op; use the cpu backend)", dir, m->be->ops->name);
        goto out;
    }
    if (c->emb_norm && ((rc = take_vec(m, &ld, "emb_norm.weight", 1, d, 0, &m->emb_w)) < 0 ||
                        (!c->norm_rms && (rc = take_vec(m, &ld, "emb_norm.bias", 1, d, 0, &m->emb_b)) < 0)))
        goto out;
    if ((rc = take_vec(m, &ld, "ln_f.weight", 1, d, 0, &m->lnf_w)) < 0) goto out;
    if (!c->norm_rms && (rc = take_vec(m, &ld, "ln_f.bias", 1, d, 0, &m->lnf_b)) < 0) goto out;
    {
        kind_weight w;
        ld.matrix_want_override = 1;
        /* tie_head: the embedding matrix again, as the head's matmul weight */
        rc = take(&ld, c->tie_head ? "embed.weight" : "head.weight", 2, V, d, 0, 1, &w);
        ld.matrix_want_override = 0;
        if (rc < 0) goto out;
        kind_ctx ctx = {.be = m->be, .layer = -1, .out_scale = 1.0f};
        rc = kind_matrix(&ctx, &w, V, d, 1.0f, &m->head);
        if (w.half && ld.want != LIND_DT_Q8 && ld.want != LIND_DT_Q4)
            m->wdtype = w.wtype == BACKEND_W_BF16 ? LIND_DT_BF16 : LIND_DT_F16;
        weight_free(&w);
        if (rc < 0) {
            if (ctx.err[0]) errmsg_set(rc, err, errlen, "%s: %s", dir, ctx.err);
            else errmsg_set(rc, err, errlen, "%s: backend could not take 'head.weight' (error %d)", dir, rc);
            goto out;
        }
        m->head_macs = ctx.macs;
        m->weight_bytes += ctx.weight_bytes;
    }
    for (int i = 0; i < c->n_layers; i++)
        if ((rc = load_layer(m, &ld, i)) < 0) goto out;
    if (!m->wdtype) m->wdtype = ld.want == LIND_DT_AUTO ? LIND_DT_F32 : ld.want;
    for (int f = 0; f < ld.st.n; f++)
        for (int i = 0; i < ld.st.f[f].n; i++) {
            if (!ld.st.f[f].t[i].used) {
                rc = errmsg_set(-EINVAL, err, errlen, "%s: unexpected tensor '%s' (not used by this config; a silently "
                                "ignored weight would be a bug)", ld.st.f[f].path, ld.st.f[f].t[i].name);
                goto out;
            }
            m->params += ld.st.f[f].t[i].numel;
        }
    if ((rc = check_carry(m, err, errlen)) < 0) goto out;
    if ((rc = layout_state(m)) < 0) { errmsg_set(rc, err, errlen, "out of memory"); goto out; }
    m->scratch_floats = 1;
    for (int i = 0; i < c->n_layers; i++) {
        size_t a = m->L[i].mixer.kind->scratch_floats(c, m->L[i].mixer.params);
        size_t b = m->L[i].ffn.kind->scratch_floats(c, m->L[i].ffn.params);
        if (a > m->scratch_floats) m->scratch_floats = a;
        if (b > m->scratch_floats) m->scratch_floats = b;
    }

    XXH64_state_t *xs = XXH64_createState();
    if (!xs) { rc = errmsg_set(-ENOMEM, err, errlen, "out of memory"); goto out; }
    XXH64_reset(xs, 0);
    XXH64_update(xs, ctext, clen);
    for (int f = 0; f < ld.st.n; f++) XXH64_update(xs, ld.st.f[f].data, ld.st.f[f].data_size);
    if (m->wdtype != LIND_DT_F32) {   /* fp32 models keep the fingerprint they always had */
        char tag[32];
        int n = snprintf(tag, sizeof tag, "weights=%s", lind_dtype_name(m->wdtype));
        XXH64_update(xs, tag, (size_t)n);
    }
    if (m->compute != LIND_COMPUTE_F32) {   /* a bf16-math state is not an fp32-math one: refused */
        char tag[32];
        int n = snprintf(tag, sizeof tag, "compute=%s", lind_compute_name(m->compute));
        XXH64_update(xs, tag, (size_t)n);
    }
    m->fingerprint = XXH64_digest(xs);
    XXH64_freeState(xs);
    rc = 0;
out:
    free(ctext);
    st_set_close(&ld.st);
    if (rc < 0) {
        model_free(m);
        return rc;
    }
    *out = m;
    return 0;
}

static void free_acts(model *m)
{
    backend *be = m->be;
    be->ops->buf_free(be, m->x);
    be->ops->buf_free(be, m->h);
    for (int i = 0; i < 3; i++) be->ops->buf_free(be, m->scratch[i]);
    be->ops->buf_free(be, m->carry);
    m->x = m->h = m->scratch[0] = m->scratch[1] = m->scratch[2] = m->carry = NULL;
    m->cap = 0;
}

static void free_logit_bufs(model *m)
{
    m->be->ops->buf_free(m->be, m->hrows);
    m->be->ops->buf_free(m->be, m->logits);
    m->hrows = m->logits = NULL;
    m->lcap = 0;
}

void model_free(model *m)
{
    if (!m) return;
    backend *be = m->be;
    if (be) {
        free_acts(m);
        free_logit_bufs(m);
        backend_buf *top[] = {m->embed, m->emb_w, m->emb_b, m->lnf_w, m->lnf_b, m->head};
        for (size_t k = 0; k < sizeof top / sizeof top[0]; k++) be->ops->buf_free(be, top[k]);
        for (int i = 0; i < m->cfg.n_layers; i++) {
            layer *L = &m->L[i];
            backend_buf *bs[] = {L->ln1_w, L->ln1_b, L->ln2_w, L->ln2_b};
            for (size_t k = 0; k < sizeof bs / sizeof bs[0]; k++) be->ops->buf_free(be, bs[k]);
            if (L->mixer.kind && L->mixer.priv) L->mixer.kind->free(L->mixer.priv, be);
            if (L->ffn.kind && L->ffn.priv) L->ffn.kind->free(L->ffn.priv, be);
        }
        backend_free(be);
    }
    tokenizer_free(m->tok);
    free(m->regions);
    free(m->mark);
    free(m->bad);
    free(m);
}

/* ---- accessors ------------------------------------------------------- */

const lind_config *model_config(const model *m) { return &m->cfg; }
const char *model_backend_name(const model *m) { return m->be->ops->name; }
const char *model_device_name(const model *m) { return m->be->ops->device_name(m->be); }
size_t model_param_count(const model *m) { return m->params; }
int model_vocab(const model *m) { return m->cfg.vocab_size; }
int model_bos(const model *m) { return m->cfg.add_bos ? m->cfg.bos : -1; }

int model_eos(const model *m, const int32_t **ids)
{
    if (ids) *ids = m->cfg.eos;
    return m->cfg.n_eos;
}

int model_is_eos(const model *m, int32_t tok)
{
    for (int i = 0; i < m->cfg.n_eos; i++)
        if (m->cfg.eos[i] == tok) return 1;
    return 0;
}
const struct tokenizer *model_tokenizer(const model *m) { return m->tok; }
lind_dtype model_weights_dtype(const model *m) { return m->wdtype; }
lind_compute model_compute(const model *m) { return m->compute; }
const char *lind_compute_name(lind_compute c) { return c == LIND_COMPUTE_BF16 ? "bf16" : "f32"; }
size_t model_state_bytes(const model *m) { return m->state_bytes; }
long long model_max_tokens(const model *m)
{
    long long n = 0;
    for (int i = 0; i < m->cfg.n_layers; i++) {
        const layer_kind *k[2] = {m->L[i].mixer.kind, m->L[i].ffn.kind};
        const void *p[2] = {m->L[i].mixer.params, m->L[i].ffn.params};
        for (int j = 0; j < 2; j++) {
            long long x = k[j] && k[j]->max_tokens ? k[j]->max_tokens(&m->cfg, p[j]) : 0;
            if (x > 0 && (n == 0 || x < n)) n = x;
        }
    }
    return n;
}
uint64_t model_fingerprint(const model *m) { return m->fingerprint; }
backend *model_backend(model *m) { return m->be; }

void model_costs(const model *m, size_t *block_macs, size_t *head_macs, size_t *weight_bytes)
{
    if (block_macs) *block_macs = m->block_macs;
    if (head_macs) *head_macs = m->head_macs;
    if (weight_bytes) *weight_bytes = m->weight_bytes;
}

const char *lind_dtype_name(lind_dtype t)
{
    switch (t) {
    case LIND_DT_F32: return "f32";
    case LIND_DT_F16: return "f16";
    case LIND_DT_BF16: return "bf16";
    case LIND_DT_Q8: return "q8";
    case LIND_DT_Q4: return "q4";
    default: return "auto";
    }
}

int lind_dtype_parse(const char *s, lind_dtype *out)
{
    static const lind_dtype all[] = {LIND_DT_F32, LIND_DT_BF16, LIND_DT_F16, LIND_DT_Q8, LIND_DT_Q4};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (s && !strcmp(s, lind_dtype_name(all[i]))) {
            *out = all[i];
            return 0;
        }
    return -EINVAL;
}

int model_state_regions(const model *m, model_state_region *out, int max)
{
    for (int i = 0; i < m->nregions && i < max; i++) out[i] = m->regions[i];
    return m->nregions;
}

/* ---- slots ------------------------------------------------------------ */

int model_slots_reserve(model *m, int n)
{
    if (n < 0) return -EINVAL;
    if (n <= m->nslots) return 0;
    uint32_t *s = realloc(m->mark, (size_t)n * sizeof *s);
    if (!s) return -ENOMEM;
    m->mark = s;
    memset(m->mark + m->nslots, 0, (size_t)(n - m->nslots) * sizeof *s);
    int rc = m->be->ops->slots_reserve(m->be, n, m->state_bytes);
    if (rc < 0) return rc;
    m->nslots = n;
    return 0;
}

int model_slots_count(const model *m) { return m->nslots; }

int model_slot_reset(model *m, int slot)
{
    if (slot < 0 || slot >= m->nslots) return -ERANGE;
    return m->be->ops->slot_zero(m->be, slot);
}

int model_slot_read(model *m, int slot, void *dst)
{
    if (slot < 0 || slot >= m->nslots) return -ERANGE;
    return m->be->ops->slot_read(m->be, slot, dst);
}

int model_slot_write(model *m, int slot, const void *src)
{
    if (slot < 0 || slot >= m->nslots) return -ERANGE;
    return m->be->ops->slot_write(m->be, slot, src);
}

/* ---- the step ---------------------------------------------------------- */

static int ensure_cap(model *m, int R)
{
    if (R <= m->cap) return 0;
    int cap = m->cap ? m->cap : 1;
    while (cap < R) cap *= 2;
    free_acts(m);
    backend *be = m->be;
    size_t d = (size_t)m->cfg.d_model;
    int rc;
    if ((rc = be->ops->buf_new(be, cap * d, &m->x)) < 0 || (rc = be->ops->buf_new(be, cap * d, &m->h)) < 0) goto fail;
    for (int i = 0; i < 3; i++)
        if ((rc = be->ops->buf_new(be, cap * m->scratch_floats, &m->scratch[i])) < 0) goto fail;
    if (m->carry_floats && (rc = be->ops->buf_new(be, cap * m->carry_floats, &m->carry)) < 0) goto fail;
    m->cap = cap;
    return 0;
fail:
    free_acts(m);
    return rc;
}

static int ensure_lcap(model *m, int n)
{
    if (n <= m->lcap) return 0;
    int cap = m->lcap ? m->lcap : 1;
    while (cap < n) cap *= 2;
    free_logit_bufs(m);
    backend *be = m->be;
    int rc;
    /* no m->logits where the head writes the caller's (buf_host) */
    if ((rc = be->ops->buf_new(be, (size_t)cap * (size_t)m->cfg.d_model, &m->hrows)) < 0 ||
        (!be->ops->buf_host &&
         (rc = be->ops->buf_new(be, (size_t)cap * (size_t)m->cfg.vocab_size, &m->logits)) < 0)) {
        free_logit_bufs(m);
        return rc;
    }
    m->lcap = cap;
    return 0;
}

/* Rows form runs: a slot's rows are consecutive and it has one run. */
static int check_rows(model *m, const int *slots, const int32_t *tokens, int R, const int *logit_rows, int nlogits)
{
    if (R < 1 || nlogits < 0 || nlogits > R || (nlogits && !logit_rows && nlogits != R)) return -EINVAL;
    if (++m->stamp == 0) {   /* wrapped: clear old marks */
        memset(m->mark, 0, (size_t)m->nslots * sizeof *m->mark);
        m->stamp = 1;
    }
    for (int r = 0; r < R; r++) {
        int s = slots[r];
        if (s < 0 || s >= m->nslots || tokens[r] < 0 || tokens[r] >= m->cfg.vocab_size) return -EINVAL;
        if (r > 0 && slots[r - 1] == s) continue;   /* the run goes on */
        if (m->mark[s] == m->stamp) return -EINVAL; /* a second run of one slot */
        m->mark[s] = m->stamp;
    }
    for (int i = 0; logit_rows && i < nlogits; i++)
        if (logit_rows[i] < 0 || logit_rows[i] >= R) return -EINVAL;
    return 0;
}

/* Which rows' residual x went non-finite (a NaN or ±inf anywhere in a block
 * reaches x through the residual adds; the AFT math turns a non-finite state
 * into a NaN output, mixer_math.h). 1 if any did, 0 if none, <0 on a backend
 * error. One pass over R × d floats after the blocks: ≪ the step's GEMMs. */
static int check_finite(model *m, int R)
{
    m->nbad = 0;
    m->bad_rows = R;
    if (!m->be->ops->rows_nonfinite) {
        memset(m->bad, 0, (size_t)R);
        return 0;
    }
    int rc = m->be->ops->rows_nonfinite(m->be, m->x, m->cfg.d_model, m->bad);
    if (rc < 0) return rc;
    for (int r = 0; r < R; r++) m->nbad += m->bad[r];
    return m->nbad > 0;
}

int model_last_nonfinite(const model *m, const unsigned char **rows)
{
    if (rows) *rows = m->bad;
    return m->nbad;
}

const char *model_last_error(const model *m)
{
    const char *e = m->be->ops->last_error ? m->be->ops->last_error(m->be) : NULL;
    return e ? e : "";
}

int model_poisoned(const model *m) { return m->be->ops->poisoned ? m->be->ops->poisoned(m->be) != 0 : 0; }

static int forward_ops(model *m, int R, const int *logit_rows, int nlogits, int all, backend_buf *lo);

/* The model's norm (cfg.norm_rms: RMSNorm, weight only; else LayerNorm). */
static int norm_rows(model *m, const backend_buf *x, backend_buf *y, const backend_buf *w, const backend_buf *b,
                     float eps)
{
    const backend_ops *o = m->be->ops;
    int d = m->cfg.d_model;
    return m->cfg.norm_rms ? o->rmsnorm(m->be, x, y, w, d, eps) : o->layernorm(m->be, x, y, w, b, d, eps);
}

int model_forward(model *m, const int *slots, const int32_t *tokens, int R, const int *logit_rows, int nlogits,
                  float *logits)
{
    int rc = check_rows(m, slots, tokens, R, logit_rows, nlogits);
    if (rc < 0) return rc;
    m->nbad = 0;
    m->bad_rows = 0;
    if (R > m->bad_cap) {
        unsigned char *b = realloc(m->bad, (size_t)R);
        if (!b) return -ENOMEM;
        m->bad = b;
        m->bad_cap = R;
    }
    if (model_poisoned(m)) return -EIO;
    if ((rc = ensure_cap(m, R)) < 0) return rc;
    const lind_config *c = &m->cfg;
    backend *be = m->be;
    const backend_ops *o = be->ops;
    size_t nl = (size_t)nlogits * (size_t)c->vocab_size;
    /* The head writes the caller's logits in place where the backend can
     * address host memory (buf_host); else m->logits, downloaded below. */
    backend_buf *host = NULL;
    if (nlogits && o->buf_host && (rc = o->buf_host(be, logits, nl, &host)) < 0) return rc;
    if (nlogits && (rc = ensure_lcap(m, nlogits)) < 0) goto out;
    if ((rc = o->begin_step(be, slots, tokens, R)) < 0) goto out;
    int all = !logit_rows || nlogits == R;
    for (int i = 0; all && logit_rows && i < nlogits; i++) all = logit_rows[i] == i;
    /* Everything up to the head depends only on R, nlogits and the runs
     * (the tokens and slots are read on the device): a backend that records
     * steps replays it (kernels/backend.h, graph_begin). gather_rows
     * uploads its rows, so a step that picks rows is never recorded. */
    int g = all && o->graph_begin ? o->graph_begin(be, ((uint64_t)(unsigned)R << 32) | (unsigned)nlogits)
                                  : BACKEND_GRAPH_EAGER;
    if (g < 0) { rc = g; goto out; }
    backend_buf *lo = host ? host : m->logits;
    if (g != BACKEND_GRAPH_REPLAYED) {
        rc = forward_ops(m, R, logit_rows, nlogits, all, lo);
        if (g == BACKEND_GRAPH_RECORDING && (rc = o->graph_end(be, rc)) == BACKEND_GRAPH_RETRY)
            rc = forward_ops(m, R, logit_rows, nlogits, all, lo);
        if (rc < 0) goto out;
    }
    /* after the head is queued, so a device waits once for the whole step */
    int bad = check_finite(m, R);
    if (bad < 0) { rc = bad; goto out; }
    if (nlogits && !host && (rc = o->buf_download(be, m->logits, 0, logits, nl)) < 0) goto out;
    rc = bad ? -EDOM : 0;
out:
    if (host) o->buf_free(be, host);
    return rc;
}

/* The step's device work after begin_step: embedding, blocks, and (when
 * logits are wanted) the final norm and the head into lo. */
static int forward_ops(model *m, int R, const int *logit_rows, int nlogits, int all, backend_buf *lo)
{
    const lind_config *c = &m->cfg;
    backend *be = m->be;
    const backend_ops *o = be->ops;
    int d = c->d_model, V = c->vocab_size, rc;
    if ((rc = o->embed(be, m->embed, m->x, d)) < 0) return rc;
    if (c->emb_norm && (rc = norm_rows(m, m->x, m->x, m->emb_w, m->emb_b, c->norm_eps)) < 0) return rc;
    layer_io io = {.be = be, .R = R, .h = m->h, .x = m->x,
                   .scratch = {m->scratch[0], m->scratch[1], m->scratch[2]}, .carry = m->carry};
    for (int i = 0; i < c->n_layers; i++) {
        layer *L = &m->L[i];
        if ((rc = norm_rows(m, m->x, m->h, L->ln1_w, L->ln1_b, c->norm_eps)) < 0) return rc;
        memcpy(io.region_off, L->mixer.region_off, sizeof io.region_off);
        if ((rc = L->mixer.kind->step(L->mixer.priv, &io)) < 0) return rc;
        if (L->ffn.kind->step) {   /* else the empty FFN: no second half */
            if ((rc = norm_rows(m, m->x, m->h, L->ln2_w, L->ln2_b, c->norm_eps)) < 0) return rc;
            memcpy(io.region_off, L->ffn.region_off, sizeof io.region_off);
            if ((rc = L->ffn.kind->step(L->ffn.priv, &io)) < 0) return rc;
        }
        if (c->rescale_every && (i + 1) % c->rescale_every == 0 && (rc = o->scale_rows(be, m->x, d, 0.5f)) < 0)
            return rc;
    }
    if (!nlogits) return 0;
    if ((rc = norm_rows(m, m->x, m->h, m->lnf_w, m->lnf_b, c->final_norm_eps)) < 0) return rc;
    const backend_buf *hx = m->h;
    if (!all) {
        if ((rc = o->gather_rows(be, m->h, logit_rows, nlogits, m->hrows, d)) < 0) return rc;
        hx = m->hrows;
    }
    /* logits[nlogits × V] = hx[nlogits × d] · head[V × d]ᵀ */
    return o->matmul(be, bmview(lo, 0, V), bview(hx, 0, d), m->head, NULL, nlogits, V, d, 0);
}

float *model_logits_alloc(model *m, size_t n)
{
    if (n > SIZE_MAX / sizeof(float)) return NULL;
    const backend_ops *o = m->be->ops;
    return o->host_alloc ? o->host_alloc(m->be, n * sizeof(float)) : malloc(n ? n * sizeof(float) : 1);
}

void model_logits_free(model *m, float *p)
{
    if (!p) return;
    const backend_ops *o = m->be->ops;
    if (o->host_free) o->host_free(m->be, p);
    else free(p);
}

int model_step(model *m, const int *slots, const int32_t *tokens, int B, float *logits)
{
    if (B < 1) return -EINVAL;
    for (int b = 1; b < B; b++)   /* distinct slots: adjacent repeats would be a run */
        if (slots[b] == slots[b - 1]) return -EINVAL;
    return model_forward(m, slots, tokens, B, NULL, logits ? B : 0, logits);
}
