/* recurrent/config.h — reading and validating a model's config.json.
 *
 * Two layouts are read (docs/MODEL.md, docs/MODELS.md):
 *  - lind's own: model-wide keys (vocab_size, d_model, n_layers, norm_eps,
 *    final_norm_eps, emb_norm, rescale_every, bos, tokenizer) and per layer a
 *    mixer kind and an FFN kind — either a "layers" array of objects
 *    ({"mixer": "linear", "ffn": "gelu_mlp", ...kind keys}) or the older flat
 *    form ("mixers": [...], FFN "gelu_mlp", every kind key at the top level).
 *    A kind's keys are read by the kind itself (recurrent/kind.h) from the
 *    layer's object, else the top level.
 *  - Hugging Face RWKV-4 ("model_type": "rwkv"), translated into lind's form
 *    by recurrent/hf_rwkv4.c.
 * Unknown kinds are refused naming the known ones; unknown extra fields
 * (exporters' bookkeeping) are ignored. */
#ifndef LIND_RECURRENT_CONFIG_H
#define LIND_RECURRENT_CONFIG_H

#include <stddef.h>
#include "recurrent/model.h"

/* Parse the JSON text (len bytes) of config.json; `path` is only used in
 * messages. 0 or -EINVAL with a message naming the field. */
int config_parse(const char *text, size_t len, const char *path, lind_config *out,
                 char *err, size_t errlen);

/* Python's json module writes float('inf') as a bare Infinity (and
 * -Infinity, NaN), which is not JSON: HF's Mamba-2 configs hold
 * "time_step_limit": [0.0, Infinity]. Outside strings, those tokens become
 * the strings "Infinity", "-Infinity", "NaN" (the readers that expect
 * numbers take them, recurrent/hf_mamba2.c). A new malloc'd buffer of
 * *outlen bytes, or NULL when out of memory. config_parse reads every
 * config.json through it. */
char *config_quote_nonfinite(const char *text, size_t len, size_t *outlen);

/* Does any layer use the mixer (ffn = 0) or FFN (ffn = 1) kind `kind`? */
int config_uses(const lind_config *c, int ffn, const char *kind);

#endif
