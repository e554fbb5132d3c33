/* recurrent/hf_rwkv4.h — Hugging Face RWKV-4 checkpoints (RwkvForCausalLM,
 * "model_type": "rwkv") read as lind models: the config translated into
 * lind's own form and the tensor names mapped, nothing converted on disk.
 *
 * An RWKV-4 block is lind's block with mixer "aft" (variant "decay", width
 * attention_hidden_size, token shift) and FFN "rwkv_channel_mix", plus the
 * model-wide pieces: a LayerNorm on the embedding (block 0's pre_ln), the
 * final ln_out with PyTorch's default ε 1e-5 (HF builds it without the config
 * ε), and rescale_every. See docs/MODELS.md. */
#ifndef LIND_RECURRENT_HF_RWKV4_H
#define LIND_RECURRENT_HF_RWKV4_H

#include <jansson.h>
#include <stddef.h>

/* HF config.json (root) → a new JSON object in lind's form (*out, caller
 * decrefs). 0 or -EINVAL naming the field. */
int hf_rwkv4_translate(json_t *root, const char *path, json_t **out, char *err, size_t errlen);

/* lind's tensor name → the HF name (into buf). Returns buf, or NULL when the
 * name has no HF counterpart. */
const char *hf_rwkv4_tensor_name(const char *lind_name, char *buf, size_t len);

/* The tokenizer files an HF RWKV directory may hold, in the order tried:
 * "tokenizer.json" (bpe: RWKV-4 Pile / Raven), the World vocabulary (world). */
extern const char *const hf_rwkv4_tokenizer_files[2];
extern const char *const hf_rwkv4_tokenizer_kinds[2];

#endif
