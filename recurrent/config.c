/* recurrent/config.c — config.json → lind_config, with validation. The
 * model-wide keys are read here; each layer's mixer and FFN kind read their
 * own keys through a kind_scope (recurrent/kind.h). */
#include "recurrent/config.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "recurrent/bytebuf.h"
#include "recurrent/errmsg.h"
#include "recurrent/hf_mamba2.h"
#include "recurrent/hf_rwkv4.h"
#include "recurrent/kind.h"

struct kind_scope {
    json_t *layer;       /* the layer's object, or NULL */
    json_t *root;
    const char *path;
    int index;
    char where[96];
};

const char *kind_scope_where(const kind_scope *s) { return s->where; }

static json_t *scope_get(const kind_scope *s, const char *key)
{
    json_t *v = s->layer ? json_object_get(s->layer, key) : NULL;
    return v ? v : json_object_get(s->root, key);
}

int kind_cfg_int(const kind_scope *s, const char *key, int required, int def, int lo, int hi, int *out,
                 char *err, size_t errlen)
{
    json_t *v = scope_get(s, key);
    if (!v) {
        if (required) return errmsg_set(-EINVAL, err, errlen, "%s: missing field \"%s\"", s->where, key);
        *out = def;
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return errmsg_set(-EINVAL, err, errlen, "%s: field \"%s\" must be an integer in %d..%d", s->where, key, lo, hi);
    *out = (int)json_integer_value(v);
    return 0;
}

int kind_cfg_num(const kind_scope *s, const char *key, int required, double def, double lo, double hi,
                 float *out, char *err, size_t errlen)
{
    json_t *v = scope_get(s, key);
    if (!v) {
        if (required) return errmsg_set(-EINVAL, err, errlen, "%s: missing field \"%s\"", s->where, key);
        *out = (float)def;
        return 0;
    }
    double x = json_is_number(v) ? json_number_value(v) : NAN;
    if (!(x >= lo && x <= hi))
        return errmsg_set(-EINVAL, err, errlen, "%s: field \"%s\" must be a number in [%g, %g]", s->where, key, lo, hi);
    *out = (float)x;
    return 0;
}

int kind_cfg_bool(const kind_scope *s, const char *key, int required, int def, int *out, char *err, size_t errlen)
{
    json_t *v = scope_get(s, key);
    if (!v) {
        if (required) return errmsg_set(-EINVAL, err, errlen, "%s: missing field \"%s\"", s->where, key);
        *out = def;
        return 0;
    }
    if (!json_is_boolean(v)) return errmsg_set(-EINVAL, err, errlen, "%s: field \"%s\" must be true or false", s->where, key);
    *out = json_is_true(v);
    return 0;
}

int kind_cfg_enum(const kind_scope *s, const char *key, int required, const char *def,
                  const char *const *choices, char *out, size_t outlen, char *err, size_t errlen)
{
    json_t *v = scope_get(s, key);
    const char *val = def;
    if (!v) {
        if (required) return errmsg_set(-EINVAL, err, errlen, "%s: missing field \"%s\"", s->where, key);
    } else if (!json_is_string(v)) {
        return errmsg_set(-EINVAL, err, errlen, "%s: field \"%s\" must be a string", s->where, key);
    } else {
        val = json_string_value(v);
    }
    char known[160] = "";
    size_t n = 0;
    for (int i = 0; choices[i]; i++) {
        if (val && !strcmp(val, choices[i]) && strlen(val) < outlen) {
            strcpy(out, val);
            return 0;
        }
        n += (size_t)snprintf(known + n, n < sizeof known ? sizeof known - n : 0, "%s\"%s\"", i ? ", " : "", choices[i]);
    }
    return errmsg_set(-EINVAL, err, errlen, "%s: field \"%s\" is \"%.40s\" (known: %s)", s->where, key, val ? val : "",
                      known);
}

/* ---- model-wide keys --------------------------------------------------- */

static int get_int(json_t *root, const char *path, const char *key, int required, int def, int lo, int hi, int *out,
                   char *err, size_t errlen)
{
    kind_scope s = {.root = root, .path = path};
    snprintf(s.where, sizeof s.where, "%s", path);
    return kind_cfg_int(&s, key, required, def, lo, hi, out, err, errlen);
}

static int get_num(json_t *root, const char *path, const char *key, int required, double def, double lo, double hi,
                   float *out, char *err, size_t errlen)
{
    kind_scope s = {.root = root, .path = path};
    snprintf(s.where, sizeof s.where, "%s", path);
    return kind_cfg_num(&s, key, required, def, lo, hi, out, err, errlen);
}

int config_uses(const lind_config *c, int ffn, const char *kind)
{
    for (int i = 0; i < c->n_layers && i < LIND_MAX_LAYERS; i++)
        if (!strcmp(ffn ? c->layers[i].ffn : c->layers[i].mixer, kind)) return 1;
    return 0;
}

/* Kind name of layer i's part from "layers"[i][field] or the flat array. */
static int layer_kind_name(json_t *root, json_t *layer, const char *path, int i, int ffn, char *out,
                           size_t outlen, char *err, size_t errlen)
{
    const char *field = ffn ? "ffn" : "mixer", *flat = ffn ? "ffns" : "mixers";
    json_t *v = layer ? json_object_get(layer, field) : NULL;
    if (!layer) {
        json_t *arr = json_object_get(root, flat);
        if (!arr && ffn) {
            strcpy(out, "gelu_mlp");   /* the flat form's only FFN */
            return 0;
        }
        if (!json_is_array(arr))
            return errmsg_set(-EINVAL, err, errlen, "%s: missing or non-array field \"%s\" (or a \"layers\" array)", path,
                              flat);
        v = json_array_get(arr, (size_t)i);
    }
    if (!json_is_string(v))
        return errmsg_set(-EINVAL, err, errlen, "%s: layer %d: \"%s\" is missing or not a string", path, i, field);
    char names[160];
    const char *name = json_string_value(v);
    const layer_kind *k = ffn ? ffn_find(name) : mixer_find(name);
    if (!k || strlen(name) >= outlen)
        return errmsg_set(-EINVAL, err, errlen, "%s: layer %d: %s \"%.40s\" is not a known kind (known: %s)", path, i,
                          field, name, ffn ? ffn_kind_names(names, sizeof names) : mixer_kind_names(names, sizeof names));
    strcpy(out, name);
    return 0;
}

static int parse_tokenizer(json_t *root, const char *path, lind_config *c, char *err, size_t errlen)
{
    json_t *t = json_object_get(root, "tokenizer");
    if (!t) return 0;   /* lind's flat form: bytes; HF: found by model_load */
    json_t *kind = t, *file = NULL;
    if (json_is_object(t)) {
        kind = json_object_get(t, "kind");
        file = json_object_get(t, "file");
    }
    if (!json_is_string(kind) || strlen(json_string_value(kind)) >= sizeof c->tokenizer)
        return errmsg_set(-EINVAL, err, errlen, "%s: \"tokenizer\" must be a kind name or {\"kind\": ..., \"file\": ...}",
                          path);
    strcpy(c->tokenizer, json_string_value(kind));
    if (file) {
        const char *f = json_is_string(file) ? json_string_value(file) : NULL;
        if (!f || !*f || strlen(f) >= sizeof c->tokenizer_file || strstr(f, ".."))
            return errmsg_set(-EINVAL, err, errlen, "%s: \"tokenizer\".\"file\" must be a file name inside the model "
                              "directory", path);
        strcpy(c->tokenizer_file, f);
    }
    return 0;
}

static int parse_native(json_t *root, const char *path, lind_config *c, char *err, size_t errlen)
{
    int rc;
    if ((rc = get_int(root, path, "vocab_size", 1, 0, 1, LIND_MAX_VOCAB, &c->vocab_size, err, errlen)) ||
        (rc = get_int(root, path, "d_model", 1, 0, 1, 1 << 16, &c->d_model, err, errlen)) ||
        (rc = get_int(root, path, "n_layers", 1, 0, 1, LIND_MAX_LAYERS, &c->n_layers, err, errlen)) ||
        (rc = get_int(root, path, "bos", 0, 0, 0, LIND_MAX_VOCAB, &c->bos, err, errlen)) ||
        (rc = get_num(root, path, "norm_eps", 1, 0, 1e-30, 1.0, &c->norm_eps, err, errlen)) ||
        (rc = get_num(root, path, "final_norm_eps", 0, c->norm_eps, 1e-30, 1.0, &c->final_norm_eps, err, errlen)) ||
        (rc = get_int(root, path, "rescale_every", 0, 0, 0, LIND_MAX_LAYERS, &c->rescale_every, err, errlen)))
        return rc;
    if (c->bos >= c->vocab_size)
        return errmsg_set(-EINVAL, err, errlen, "%s: bos %d is outside the vocabulary (%d)", path, c->bos, c->vocab_size);
    json_t *en = json_object_get(root, "emb_norm");
    if (en && !json_is_boolean(en)) return errmsg_set(-EINVAL, err, errlen, "%s: field \"emb_norm\" must be true or false", path);
    c->emb_norm = en && json_is_true(en);
    json_t *nk = json_object_get(root, "norm");
    if (nk && (!json_is_string(nk) || (strcmp(json_string_value(nk), "layernorm") && strcmp(json_string_value(nk), "rms"))))
        return errmsg_set(-EINVAL, err, errlen, "%s: field \"norm\" must be \"layernorm\" or \"rms\"", path);
    c->norm_rms = nk && !strcmp(json_string_value(nk), "rms");
    json_t *th = json_object_get(root, "tie_head");
    if (th && !json_is_boolean(th)) return errmsg_set(-EINVAL, err, errlen, "%s: field \"tie_head\" must be true or false", path);
    c->tie_head = th && json_is_true(th);
    if ((rc = parse_tokenizer(root, path, c, err, errlen))) return rc;

    json_t *layers = json_object_get(root, "layers");
    if (layers && (!json_is_array(layers) || (int)json_array_size(layers) != c->n_layers))
        return errmsg_set(-EINVAL, err, errlen, "%s: \"layers\" must be an array of %d objects", path, c->n_layers);
    json_t *flat = json_object_get(root, "mixers");
    if (!layers && json_is_array(flat) && (int)json_array_size(flat) != c->n_layers)
        return errmsg_set(-EINVAL, err, errlen, "%s: \"mixers\" has %zu entries for %d layers", path, json_array_size(flat),
                          c->n_layers);
    json_t *ffns = json_object_get(root, "ffns");
    if (!layers && ffns && (!json_is_array(ffns) || (int)json_array_size(ffns) != c->n_layers))
        return errmsg_set(-EINVAL, err, errlen, "%s: \"ffns\" must be an array of %d kind names", path, c->n_layers);
    for (int i = 0; i < c->n_layers; i++) {
        json_t *lo = layers ? json_array_get(layers, (size_t)i) : NULL;
        if (layers && !json_is_object(lo))
            return errmsg_set(-EINVAL, err, errlen, "%s: layers[%d] is not an object", path, i);
        lind_layer_cfg *L = &c->layers[i];
        if ((rc = layer_kind_name(root, lo, path, i, 0, L->mixer, sizeof L->mixer, err, errlen)) ||
            (rc = layer_kind_name(root, lo, path, i, 1, L->ffn, sizeof L->ffn, err, errlen)))
            return rc;
        kind_scope s = {.layer = lo, .root = root, .path = path, .index = i};
        snprintf(s.where, sizeof s.where, "%s: layer %d (%s)", path, i, L->mixer);
        if ((rc = mixer_find(L->mixer)->configure(&s, c, L->mixer_p, err, errlen))) return rc;
        snprintf(s.where, sizeof s.where, "%s: layer %d (%s)", path, i, L->ffn);
        if ((rc = ffn_find(L->ffn)->configure(&s, c, L->ffn_p, err, errlen))) return rc;
    }
    return 0;
}

char *config_quote_nonfinite(const char *text, size_t len, size_t *outlen)
{
    static const char *const tok[] = {"-Infinity", "Infinity", "NaN"};
    bytebuf o = {0};
    int rc = bytebuf_reserve(&o, len + len / 4 + 16), in_str = 0;
    for (size_t i = 0; i < len && !rc;) {
        char ch = text[i];
        if (in_str) {
            if (ch == '\\' && i + 1 < len) {
                rc = bytebuf_put(&o, text + i, 2);
                i += 2;
                continue;
            }
            if (ch == '"') in_str = 0;
            rc = bytebuf_put(&o, &ch, 1);
            i++;
            continue;
        }
        if (ch == '"') in_str = 1;
        size_t k = 0;
        for (; k < 3; k++) {
            size_t tl = strlen(tok[k]);
            if (i + tl <= len && !memcmp(text + i, tok[k], tl)) break;
        }
        if (k < 3) {
            char q[16];
            rc = bytebuf_put(&o, q, (size_t)snprintf(q, sizeof q, "\"%s\"", tok[k]));
            i += strlen(tok[k]);
            continue;
        }
        rc = bytebuf_put(&o, &ch, 1);
        i++;
    }
    if (rc) {
        bytebuf_free(&o);
        return NULL;
    }
    *outlen = o.n;
    return o.p;
}

int config_parse(const char *text, size_t len, const char *path, lind_config *c, char *err, size_t errlen)
{
    memset(c, 0, sizeof *c);
    json_error_t je;
    size_t qlen = 0;
    char *q = config_quote_nonfinite(text, len, &qlen);
    if (!q) return errmsg_set(-ENOMEM, err, errlen, "%s: out of memory", path);
    json_t *root = json_loadb(q, qlen, 0, &je);
    free(q);
    if (!root) return errmsg_set(-EINVAL, err, errlen, "%s: bad JSON at line %d column %d: %s", path, je.line, je.column, je.text);
    int rc = -EINVAL;
    if (!json_is_object(root)) {
        errmsg_set(-EINVAL, err, errlen, "%s: top level is not a JSON object", path);
        goto out;
    }
    json_t *mt = json_object_get(root, "model_type");
    if (mt && json_is_string(mt) && !strcmp(json_string_value(mt), "mamba2")) {
        json_t *native = NULL;
        if ((rc = hf_mamba2_translate(root, path, &native, err, errlen)) < 0) goto out;
        rc = parse_native(native, path, c, err, errlen);
        json_decref(native);
        snprintf(c->format, sizeof c->format, "hf-mamba2");
    } else if (mt) {
        if (!json_is_string(mt) || strcmp(json_string_value(mt), "rwkv")) {
            errmsg_set(-EINVAL, err, errlen, "%s: model_type \"%s\" is not supported (lind reads \"rwkv\" — RWKV-4 —, "
                       "\"mamba2\" and its own format)", path, json_is_string(mt) ? json_string_value(mt) : "?");
            goto out;
        }
        json_t *native = NULL;
        if ((rc = hf_rwkv4_translate(root, path, &native, err, errlen)) < 0) goto out;
        rc = parse_native(native, path, c, err, errlen);
        json_decref(native);
        snprintf(c->format, sizeof c->format, "hf-rwkv4");
    } else {
        rc = parse_native(root, path, c, err, errlen);
        snprintf(c->format, sizeof c->format, "lind");
        if (!rc && !c->tokenizer[0]) snprintf(c->tokenizer, sizeof c->tokenizer, "bytes");
    }
out:
    json_decref(root);
    return rc;
}
