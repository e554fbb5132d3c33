/* recurrent/hf_rwkv4.c — see hf_rwkv4.h. The keys and their defaults are
 * those of transformers' RwkvConfig; the math they configure is in
 * recurrent/mixer_aft.c and recurrent/ffn_channel_mix.c. */
#include "recurrent/hf_rwkv4.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "recurrent/errmsg.h"
#include "recurrent/model.h"

const char *const hf_rwkv4_tokenizer_files[2] = {"tokenizer.json", "rwkv_vocab_v20230424.txt"};
const char *const hf_rwkv4_tokenizer_kinds[2] = {"bpe", "world"};

static int hf_int(json_t *root, const char *path, const char *key, int def, int lo, int hi, int *out, char *err,
                  size_t errlen)
{
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) {
        if (def < lo) return errmsg_set(-EINVAL, err, errlen, "%s: missing field \"%s\" (RWKV-4 config)", path, key);
        *out = def;
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return errmsg_set(-EINVAL, err, errlen, "%s: field \"%s\" must be an integer in %d..%d", path, key, lo, hi);
    *out = (int)json_integer_value(v);
    return 0;
}

int hf_rwkv4_translate(json_t *root, const char *path, json_t **out, char *err, size_t errlen)
{
    *out = NULL;
    int hidden = 0, layers = 0, att = 0, inter = 0, vocab = 0, rescale = 0, bos = 0;
    int rc;
    if ((rc = hf_int(root, path, "hidden_size", -1, 1, 1 << 16, &hidden, err, errlen)) ||
        (rc = hf_int(root, path, "num_hidden_layers", -1, 1, LIND_MAX_LAYERS, &layers, err, errlen)) ||
        (rc = hf_int(root, path, "vocab_size", -1, 1, LIND_MAX_VOCAB, &vocab, err, errlen)) ||
        (rc = hf_int(root, path, "attention_hidden_size", hidden, 1, 1 << 16, &att, err, errlen)) ||
        (rc = hf_int(root, path, "intermediate_size", 4 * hidden, 1, 1 << 20, &inter, err, errlen)) ||
        (rc = hf_int(root, path, "rescale_every", 6, 0, 1 << 20, &rescale, err, errlen)) ||
        (rc = hf_int(root, path, "bos_token_id", 0, 0, LIND_MAX_VOCAB, &bos, err, errlen)))
        return rc;
    double eps = 1e-5;
    json_t *e = json_object_get(root, "layer_norm_epsilon");
    if (e && !json_is_null(e)) {
        if (!json_is_number(e) || !(json_number_value(e) > 0))
            return errmsg_set(-EINVAL, err, errlen, "%s: field \"layer_norm_epsilon\" must be a positive number", path);
        eps = json_number_value(e);
    }
    json_t *tie = json_object_get(root, "tie_word_embeddings");
    if (tie && json_is_true(tie))
        return errmsg_set(-EINVAL, err, errlen, "%s: tie_word_embeddings true is not supported (RWKV-4 checkpoints "
                          "have their own head.weight)", path);
    if (rescale > layers) rescale = 0;   /* never reached: no halving */
    json_t *ls = json_array();
    for (int i = 0; i < layers && ls; i++)
        json_array_append_new(ls, json_pack("{s:s, s:s, s:s, s:i, s:b, s:i}", "mixer", "aft", "ffn",
                                            "rwkv_channel_mix", "aft_variant", "decay", "aft_dim", att,
                                            "token_shift", 1, "d_ff", inter));
    json_t *n = ls ? json_pack("{s:i, s:i, s:i, s:i, s:f, s:f, s:b, s:i, s:o}", "vocab_size", vocab, "d_model", hidden,
                               "n_layers", layers, "bos", bos, "norm_eps", eps, "final_norm_eps", 1e-5, "emb_norm", 1,
                               "rescale_every", rescale, "layers", ls)
                   : NULL;
    if (!n) return errmsg_set(-ENOMEM, err, errlen, "%s: out of memory", path);
    *out = n;
    return 0;
}

/* lind suffix → HF suffix inside rwkv.blocks.<i>. */
static const char *const block_map[][2] = {
    {"ln1.weight", "ln1.weight"},
    {"ln1.bias", "ln1.bias"},
    {"ln2.weight", "ln2.weight"},
    {"ln2.bias", "ln2.bias"},
    {"mixer.wr", "attention.receptance.weight"},
    {"mixer.wk", "attention.key.weight"},
    {"mixer.wv", "attention.value.weight"},
    {"mixer.wo", "attention.output.weight"},
    {"mixer.mu_r", "attention.time_mix_receptance"},
    {"mixer.mu_k", "attention.time_mix_key"},
    {"mixer.mu_v", "attention.time_mix_value"},
    {"mixer.time_decay", "attention.time_decay"},
    {"mixer.time_first", "attention.time_first"},
    {"ffn.wk", "feed_forward.key.weight"},
    {"ffn.wr", "feed_forward.receptance.weight"},
    {"ffn.wv", "feed_forward.value.weight"},
    {"ffn.mu_k", "feed_forward.time_mix_key"},
    {"ffn.mu_r", "feed_forward.time_mix_receptance"},
};

static const char *const top_map[][2] = {
    {"embed.weight", "rwkv.embeddings.weight"},
    {"emb_norm.weight", "rwkv.blocks.0.pre_ln.weight"},
    {"emb_norm.bias", "rwkv.blocks.0.pre_ln.bias"},
    {"ln_f.weight", "rwkv.ln_out.weight"},
    {"ln_f.bias", "rwkv.ln_out.bias"},
    {"head.weight", "head.weight"},
};

const char *hf_rwkv4_tensor_name(const char *lind_name, char *buf, size_t len)
{
    for (size_t i = 0; i < sizeof top_map / sizeof top_map[0]; i++)
        if (!strcmp(lind_name, top_map[i][0])) {
            snprintf(buf, len, "%s", top_map[i][1]);
            return buf;
        }
    int layer, n = 0;
    if (sscanf(lind_name, "layers.%d.%n", &layer, &n) != 1 || n == 0) return NULL;
    for (size_t i = 0; i < sizeof block_map / sizeof block_map[0]; i++)
        if (!strcmp(lind_name + n, block_map[i][0])) {
            snprintf(buf, len, "rwkv.blocks.%d.%s", layer, block_map[i][1]);
            return buf;
        }
    return NULL;
}
