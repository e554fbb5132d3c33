/* recurrent/hf_mamba2.c — see hf_mamba2.h. The keys and their defaults are
 * those of transformers' Mamba2Config; the math they configure is in
 * recurrent/mixer_mamba2.c. */
#include "recurrent/hf_mamba2.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "recurrent/errmsg.h"
#include "recurrent/model.h"

/* An integer key; def < lo means required. */
static int m2_int(json_t *root, const char *path, const char *key, int def, int lo, int hi, int *out, char *err,
                  size_t errlen)
{
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) {
        if (def < lo) return errmsg_set(-EINVAL, err, errlen, "%s: missing field \"%s\" (Mamba-2 config)", path, key);
        *out = def;
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return errmsg_set(-EINVAL, err, errlen, "%s: field \"%s\" must be an integer in %d..%d", path, key, lo, hi);
    *out = (int)json_integer_value(v);
    return 0;
}

static int m2_bool(json_t *root, const char *path, const char *key, int def, int *out, char *err, size_t errlen)
{
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) {
        *out = def;
        return 0;
    }
    if (!json_is_boolean(v)) return errmsg_set(-EINVAL, err, errlen, "%s: field \"%s\" must be true or false", path, key);
    *out = json_is_true(v);
    return 0;
}

/* A number, or Python json's Infinity / -Infinity / NaN (as strings). */
static int m2_number(json_t *v, double *out)
{
    if (json_is_number(v)) {
        *out = json_number_value(v);
        return 1;
    }
    const char *s = json_is_string(v) ? json_string_value(v) : NULL;
    if (s && !strcmp(s, "Infinity")) *out = INFINITY;
    else if (s && !strcmp(s, "-Infinity")) *out = -INFINITY;
    else if (s && !strcmp(s, "NaN")) *out = NAN;
    else return 0;
    return 1;
}

int hf_mamba2_translate(json_t *root, const char *path, json_t **out, char *err, size_t errlen)
{
    *out = NULL;
    int hidden = 0, layers = 0, vocab = 0, state = 0, heads = 0, hdim = 0, expand = 0, groups = 0, conv = 0, bos = 0;
    int use_bias = 0, conv_bias = 1, rms = 1, tie = 0, res32 = 1, rc;
    if ((rc = m2_int(root, path, "hidden_size", -1, 1, 1 << 16, &hidden, err, errlen)) ||
        (rc = m2_int(root, path, "num_hidden_layers", -1, 1, LIND_MAX_LAYERS, &layers, err, errlen)) ||
        (rc = m2_int(root, path, "vocab_size", -1, 1, LIND_MAX_VOCAB, &vocab, err, errlen)) ||
        (rc = m2_int(root, path, "state_size", -1, 1, 1 << 12, &state, err, errlen)) ||
        (rc = m2_int(root, path, "num_heads", -1, 1, 1 << 12, &heads, err, errlen)) ||
        (rc = m2_int(root, path, "head_dim", -1, 1, 1 << 12, &hdim, err, errlen)) ||
        (rc = m2_int(root, path, "expand", 2, 1, 64, &expand, err, errlen)) ||
        (rc = m2_int(root, path, "n_groups", 8, 1, 1 << 12, &groups, err, errlen)) ||
        (rc = m2_int(root, path, "conv_kernel", 4, 2, 16, &conv, err, errlen)) ||
        (rc = m2_int(root, path, "bos_token_id", 0, 0, LIND_MAX_VOCAB, &bos, err, errlen)) ||
        (rc = m2_bool(root, path, "use_bias", 0, &use_bias, err, errlen)) ||
        (rc = m2_bool(root, path, "use_conv_bias", 1, &conv_bias, err, errlen)) ||
        (rc = m2_bool(root, path, "rms_norm", 1, &rms, err, errlen)) ||
        (rc = m2_bool(root, path, "residual_in_fp32", 1, &res32, err, errlen)) ||
        (rc = m2_bool(root, path, "tie_word_embeddings", 0, &tie, err, errlen)))
        return rc;
    if ((long)heads * hdim != (long)expand * hidden)
        return errmsg_set(-EINVAL, err, errlen, "%s: num_heads × head_dim = %d × %d = %ld must equal expand × "
                          "hidden_size = %d × %d = %ld (the mixer's inner width)", path, heads, hdim, (long)heads * hdim,
                          expand, hidden, (long)expand * hidden);
    if (heads % groups)
        return errmsg_set(-EINVAL, err, errlen, "%s: n_groups %d does not divide num_heads %d", path, groups, heads);
    if (!rms)
        return errmsg_set(-EINVAL, err, errlen, "%s: rms_norm false is not supported (lind reads Mamba-2 as "
                          "transformers' Mamba2ForCausalLM does, whose block and final norms are RMSNorms; a "
                          "LayerNorm-trained checkpoint would be computed wrongly)", path);
    json_t *act = json_object_get(root, "hidden_act");
    if (act && !json_is_null(act) &&
        (!json_is_string(act) || (strcmp(json_string_value(act), "silu") && strcmp(json_string_value(act), "swish"))))
        return errmsg_set(-EINVAL, err, errlen, "%s: hidden_act \"%s\" is not supported (only \"silu\", Mamba-2's)", path,
                          json_is_string(act) ? json_string_value(act) : "?");
    double eps = 1e-5, lo = 0.0, hi = INFINITY;
    json_t *e = json_object_get(root, "layer_norm_epsilon");
    if (e && !json_is_null(e) && (!m2_number(e, &eps) || !(eps > 0) || !(eps < 1)))
        return errmsg_set(-EINVAL, err, errlen, "%s: field \"layer_norm_epsilon\" must be a number in (0, 1)", path);
    json_t *lim = json_object_get(root, "time_step_limit");
    if (lim && !json_is_null(lim)) {
        if (!json_is_array(lim) || json_array_size(lim) != 2 || !m2_number(json_array_get(lim, 0), &lo) ||
            !m2_number(json_array_get(lim, 1), &hi) || !(lo >= 0) || !(hi >= lo) || isinf(lo))
            return errmsg_set(-EINVAL, err, errlen, "%s: field \"time_step_limit\" must be [min, max] with 0 ≤ min ≤ max "
                              "(max may be Infinity)", path);
    }
    json_t *ls = json_array();
    for (int i = 0; i < layers && ls; i++) {
        json_t *l = json_pack("{s:s, s:s, s:i, s:i, s:i, s:i, s:i, s:b, s:b, s:f, s:f}", "mixer", "mamba2", "ffn",
                              "none", "n_heads", heads, "d_head", hdim, "d_state", state, "n_groups", groups,
                              "conv_size", conv, "proj_bias", use_bias, "conv_bias", conv_bias, "dt_min", lo,
                              "gate_norm_eps", eps);
        if (l && !isinf(hi)) json_object_set_new(l, "dt_max", json_real(hi));
        json_array_append_new(ls, l);
    }
    json_t *n = ls ? json_pack("{s:i, s:i, s:i, s:i, s:f, s:f, s:s, s:b, s:o}", "vocab_size", vocab, "d_model", hidden,
                               "n_layers", layers, "bos", bos, "norm_eps", eps, "final_norm_eps", eps, "norm", "rms",
                               "tie_head", tie, "layers", ls)
                   : NULL;
    if (!n) return errmsg_set(-ENOMEM, err, errlen, "%s: out of memory", path);
    *out = n;
    return 0;
}

const char *hf_mamba2_tensor_name(const char *lind_name, char *buf, size_t len)
{
    static const char *const top[][2] = {
        {"embed.weight", "backbone.embeddings.weight"},
        {"ln_f.weight", "backbone.norm_f.weight"},
        {"head.weight", "lm_head.weight"},
    };
    for (size_t i = 0; i < sizeof top / sizeof top[0]; i++)
        if (!strcmp(lind_name, top[i][0])) {
            snprintf(buf, len, "%s", top[i][1]);
            return buf;
        }
    int layer, n = 0;
    if (sscanf(lind_name, "layers.%d.%n", &layer, &n) != 1 || n == 0) return NULL;
    if (!strcmp(lind_name + n, "ln1.weight")) snprintf(buf, len, "backbone.layers.%d.norm.weight", layer);
    else if (!strncmp(lind_name + n, "mixer.", 6)) snprintf(buf, len, "backbone.layers.%d.%s", layer, lind_name + n);
    else return NULL;
    return buf;
}

const char *hf_mamba2_tensor_alt(const char *lind_name, char *buf, size_t len)
{
    if (strcmp(lind_name, "embed.weight")) return NULL;
    snprintf(buf, len, "backbone.embedding.weight");
    return buf;
}
