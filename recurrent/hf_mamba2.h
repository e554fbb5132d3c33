/* recurrent/hf_mamba2.h — Hugging Face Mamba-2 checkpoints
 * (Mamba2ForCausalLM, "model_type": "mamba2": state-spaces' conversions,
 * Mamba-Codestral) read as lind models: the config translated into lind's
 * own form and the tensor names mapped, nothing converted on disk.
 *
 * A Mamba-2 block is lind's block with the mixer "mamba2"
 * (recurrent/mixer_mamba2.c) and the empty FFN "none", every norm an
 * RMSNorm ("norm": "rms"), the head tied to the embedding when
 * tie_word_embeddings says so. See docs/MODELS.md. */
#ifndef LIND_RECURRENT_HF_MAMBA2_H
#define LIND_RECURRENT_HF_MAMBA2_H

#include <jansson.h>
#include <stddef.h>

/* HF config.json (root) → a new JSON object in lind's form (*out, caller
 * decrefs). 0 or -EINVAL naming the field. Non-finite numbers arrive as the
 * strings "Infinity", "-Infinity", "NaN" (config_parse's reading of Python
 * json's bare tokens). */
int hf_mamba2_translate(json_t *root, const char *path, json_t **out, char *err, size_t errlen);

/* lind's tensor name → the HF name (into buf). Returns buf, or NULL when the
 * name has no HF counterpart. */
const char *hf_mamba2_tensor_name(const char *lind_name, char *buf, size_t len);
/* A second spelling to try when the first is absent (the embedding as
 * mamba_ssm names it, "backbone.embedding.weight", which HF's load hook
 * renames); NULL when there is none. */
const char *hf_mamba2_tensor_alt(const char *lind_name, char *buf, size_t len);

#endif
