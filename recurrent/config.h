/* recurrent/config.h — reading and validating a model's config.json.
 *
 * Fields (docs/MODEL.md): vocab_size (must be 256), d_model, n_layers,
 * n_heads, d_head, d_ff, mixers (array, one kind per layer), feature_map
 * ("elu1"), token_shift (bool), norm_eps, aft_variant ("simple" | "decay",
 * required when any layer is "aft"), attn_eps (optional, default 1e-6).
 * Unknown mixer kinds and feature maps are refused; unknown extra fields are
 * ignored (exporters add their own bookkeeping). */
#ifndef LIND_RECURRENT_CONFIG_H
#define LIND_RECURRENT_CONFIG_H

#include <stddef.h>
#include "recurrent/model.h"

/* Parse the JSON text (len bytes) of config.json; `path` is only used in
 * messages. 0 or -EINVAL with a message naming the field. */
int config_parse(const char *text, size_t len, const char *path, lind_config *out,
                 char *err, size_t errlen);

/* Check the numbers and names of a config (also used by tests that build a
 * config in code). */
int config_check(const lind_config *c, const char *path, char *err, size_t errlen);

/* Serialize to config.json text; returns a malloc'd NUL-terminated string
 * (caller frees) or NULL on allocation failure. */
char *config_to_json(const lind_config *c);

/* Does any layer use the mixer kind `kind`? */
int config_uses(const lind_config *c, const char *kind);

#endif
