/* recurrent/rwkv7_pth.h — BlinkDL's RWKV-7 "Goose" (x070) .pth checkpoints
 * read as lind models: no config file exists, so the shape of the model is
 * inferred from the tensors (as ChatRWKV does), translated into lind's own
 * config form, and the tensor names mapped; nothing converted on disk.
 *
 *   vocab, d_model     emb.weight [V, C]
 *   n_layers           blocks.<i>.ln1.weight for i = 0, 1, ... (contiguous)
 *   heads, head size   blocks.<i>.att.r_k [H, N]
 *   LoRA widths        blocks.<i>.att.w1 / a1 / v1 / g1 [C, D] (per layer:
 *                      they vary by model size)
 *   d_ff               blocks.<i>.ffn.key.weight [F, C]
 * A layer is mixer "rwkv7" + FFN "rwkv7_channel_mix"; layer 0's v is the
 * value residual ("source"), every later layer mixes it in ("mix"). Block
 * 0's ln0 is the embedding norm; ln_out the final norm; every LayerNorm has
 * ε 1e-5, ln_x (GroupNorm over heads) 64e-5. Tokenizer: the RWKV World
 * vocabulary rwkv_vocab_v20230424.txt beside the .pth. See docs/MODELS.md. */
#ifndef LIND_RECURRENT_RWKV7_PTH_H
#define LIND_RECURRENT_RWKV7_PTH_H

#include <stddef.h>
#include "recurrent/safetensors.h"

#define RWKV7_VOCAB_FILE "rwkv_vocab_v20230424.txt"

/* The checkpoint's tensors → config.json text in lind's form (*out,
 * malloc'd, NUL-terminated, *len bytes). 0, or -EINVAL naming the file and
 * the tensor that is missing or misshapen (or what other RWKV generation the
 * file looks like). */
int rwkv7_translate(const st_file *f, char **out, size_t *len, char *err, size_t errlen);

/* lind's tensor name → the .pth name (into buf). Returns buf, or NULL when
 * the name has no counterpart. */
const char *rwkv7_tensor_name(const char *lind_name, char *buf, size_t len);

/* The .pth that `path` names: the file itself, or the one *.pth file in the
 * directory `path` when it holds no config.json. 1 with the file in pth and
 * its directory in dir; 0 when `path` is a model directory of another kind;
 * <0 with err when it is ambiguous (several .pth files). */
int rwkv7_locate(const char *path, char *pth, size_t pthlen, char *dir, size_t dirlen, char *err, size_t errlen);

#endif
