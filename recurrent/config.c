/* recurrent/config.c — config.json ⇄ lind_config, with validation. */
#include "recurrent/config.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "recurrent/mixer.h"
#include "recurrent/errmsg.h"

static int get_int(json_t *root, const char *path, const char *key, int *out, char *err, size_t errlen) {
    json_t *v = json_object_get(root, key);
    if (!v) return errmsg_set(-EINVAL, err, errlen, "%s: missing field \"%s\"", path, key);
    if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > (1 << 20))
        return errmsg_set(-EINVAL, err, errlen, "%s: field \"%s\" must be an integer in 1..%d", path, key, 1 << 20);
    *out = (int)json_integer_value(v);
    return 0;
}

static int get_str(json_t *root, const char *path, const char *key, char *out, size_t outlen,
                   int required, char *err, size_t errlen) {
    json_t *v = json_object_get(root, key);
    if (!v) return required ? errmsg_set(-EINVAL, err, errlen, "%s: missing field \"%s\"", path, key) : 0;
    if (!json_is_string(v)) return errmsg_set(-EINVAL, err, errlen, "%s: field \"%s\" must be a string", path, key);
    if (strlen(json_string_value(v)) >= outlen)
        return errmsg_set(-EINVAL, err, errlen, "%s: field \"%s\": \"%s\" is not a known value", path, key, json_string_value(v));
    strcpy(out, json_string_value(v));
    return 0;
}

static int get_num(json_t *root, const char *path, const char *key, float *out, int required,
                   char *err, size_t errlen) {
    json_t *v = json_object_get(root, key);
    if (!v) return required ? errmsg_set(-EINVAL, err, errlen, "%s: missing field \"%s\"", path, key) : 0;
    if (!json_is_number(v)) return errmsg_set(-EINVAL, err, errlen, "%s: field \"%s\" must be a number", path, key);
    *out = (float)json_number_value(v);
    return 0;
}

int config_uses(const lind_config *c, const char *kind) {
    for (int i = 0; i < c->n_layers && i < LIND_MAX_LAYERS; i++)
        if (!strcmp(c->mixers[i], kind)) return 1;
    return 0;
}

int config_check(const lind_config *c, const char *path, char *err, size_t errlen) {
    if (c->vocab_size != LIND_VOCAB)
        return errmsg_set(-EINVAL, err, errlen, "%s: vocab_size is %d, lind models are byte-level (256)", path, c->vocab_size);
    if (c->d_model < 1 || c->n_heads < 1 || c->d_head < 1 || c->d_ff < 1 || c->n_layers < 1)
        return errmsg_set(-EINVAL, err, errlen, "%s: d_model, n_layers, n_heads, d_head and d_ff must be positive", path);
    if (c->n_layers > LIND_MAX_LAYERS)
        return errmsg_set(-EINVAL, err, errlen, "%s: n_layers is %d (at most %d)", path, c->n_layers, LIND_MAX_LAYERS);
    if ((long)c->n_heads * c->d_head > (1 << 20) || c->d_model > (1 << 16) || c->d_ff > (1 << 18))
        return errmsg_set(-EINVAL, err, errlen, "%s: dimensions too large", path);
    char names[128];
    for (int i = 0; i < c->n_layers; i++)
        if (!mixer_find(c->mixers[i]))
            return errmsg_set(-EINVAL, err, errlen, "%s: mixers[%d] is \"%s\": unknown mixer kind (known: %s)", path, i,
                        c->mixers[i], mixer_kind_names(names, sizeof names));
    if (strcmp(c->feature_map, "elu1"))
        return errmsg_set(-EINVAL, err, errlen, "%s: feature_map \"%s\" is not supported (known: elu1)", path, c->feature_map);
    if (config_uses(c, "aft") && strcmp(c->aft_variant, "simple") && strcmp(c->aft_variant, "decay"))
        return errmsg_set(-EINVAL, err, errlen, "%s: aft_variant must be \"simple\" or \"decay\" when a layer is \"aft\" (got \"%s\")",
                    path, c->aft_variant);
    if (!(c->norm_eps > 0) || !isfinite(c->norm_eps))
        return errmsg_set(-EINVAL, err, errlen, "%s: norm_eps must be a positive number", path);
    if (!(c->attn_eps >= 0) || !isfinite(c->attn_eps))
        return errmsg_set(-EINVAL, err, errlen, "%s: attn_eps must be a non-negative number", path);
    return 0;
}

int config_parse(const char *text, size_t len, const char *path, lind_config *c, char *err, size_t errlen) {
    memset(c, 0, sizeof *c);
    c->attn_eps = 1e-6f;
    json_error_t je;
    json_t *root = json_loadb(text, len, 0, &je);
    if (!root) return errmsg_set(-EINVAL, err, errlen, "%s: bad JSON at line %d column %d: %s", path, je.line, je.column, je.text);
    int rc = -EINVAL;
    if (!json_is_object(root)) { errmsg_set(-EINVAL, err, errlen, "%s: top level is not a JSON object", path); goto out; }
    if (get_int(root, path, "vocab_size", &c->vocab_size, err, errlen) ||
        get_int(root, path, "d_model", &c->d_model, err, errlen) ||
        get_int(root, path, "n_layers", &c->n_layers, err, errlen) ||
        get_int(root, path, "n_heads", &c->n_heads, err, errlen) ||
        get_int(root, path, "d_head", &c->d_head, err, errlen) ||
        get_int(root, path, "d_ff", &c->d_ff, err, errlen))
        goto out;
    if (c->n_layers > LIND_MAX_LAYERS) {
        errmsg_set(-EINVAL, err, errlen, "%s: n_layers is %d (at most %d)", path, c->n_layers, LIND_MAX_LAYERS);
        goto out;
    }
    json_t *mx = json_object_get(root, "mixers");
    if (!json_is_array(mx)) { errmsg_set(-EINVAL, err, errlen, "%s: missing or non-array field \"mixers\"", path); goto out; }
    if ((int)json_array_size(mx) != c->n_layers) {
        errmsg_set(-EINVAL, err, errlen, "%s: \"mixers\" has %zu entries for %d layers", path, json_array_size(mx), c->n_layers);
        goto out;
    }
    for (int i = 0; i < c->n_layers; i++) {
        json_t *e = json_array_get(mx, (size_t)i);
        if (!json_is_string(e)) { errmsg_set(-EINVAL, err, errlen, "%s: mixers[%d] is not a string", path, i); goto out; }
        if (strlen(json_string_value(e)) >= sizeof c->mixers[i]) {
            char names[128];
            errmsg_set(-EINVAL, err, errlen, "%s: mixers[%d] is \"%.40s\": unknown mixer kind (known: %s)", path, i,
                 json_string_value(e), mixer_kind_names(names, sizeof names));
            goto out;
        }
        strcpy(c->mixers[i], json_string_value(e));
    }
    if (get_str(root, path, "feature_map", c->feature_map, sizeof c->feature_map, 1, err, errlen) ||
        get_str(root, path, "aft_variant", c->aft_variant, sizeof c->aft_variant, 0, err, errlen) ||
        get_num(root, path, "norm_eps", &c->norm_eps, 1, err, errlen) ||
        get_num(root, path, "attn_eps", &c->attn_eps, 0, err, errlen))
        goto out;
    json_t *ts = json_object_get(root, "token_shift");
    if (!json_is_boolean(ts)) { errmsg_set(-EINVAL, err, errlen, "%s: missing or non-boolean field \"token_shift\"", path); goto out; }
    c->token_shift = json_is_true(ts);
    if (config_uses(c, "aft") && !c->aft_variant[0]) {
        errmsg_set(-EINVAL, err, errlen, "%s: missing field \"aft_variant\" (required when a layer is \"aft\")", path);
        goto out;
    }
    rc = config_check(c, path, err, errlen);
out:
    json_decref(root);
    return rc;
}

char *config_to_json(const lind_config *c) {
    json_t *mx = json_array();
    for (int i = 0; i < c->n_layers; i++) json_array_append_new(mx, json_string(c->mixers[i]));
    json_t *root = json_pack("{s:i, s:i, s:i, s:i, s:i, s:i, s:o, s:s, s:b, s:f, s:f}",
                             "vocab_size", c->vocab_size, "d_model", c->d_model, "n_layers", c->n_layers,
                             "n_heads", c->n_heads, "d_head", c->d_head, "d_ff", c->d_ff, "mixers", mx,
                             "feature_map", c->feature_map, "token_shift", c->token_shift,
                             "norm_eps", (double)c->norm_eps, "attn_eps", (double)c->attn_eps);
    if (!root) return NULL;
    if (c->aft_variant[0]) json_object_set_new(root, "aft_variant", json_string(c->aft_variant));
    char *s = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(root);
    return s;
}
