/* recurrent/conventions.h — what a model feeds before a text (BOS) and
 * which tokens end a turn (EOS), read from the files that say it.
 *
 * BOS, first that speaks: the caller's override (--bos / --no-bos); for a
 * Hugging Face directory, tokenizer_config.json "add_bos_token", then
 * tokenizer.json's post_processor (what HF puts before a text when asked
 * for special tokens: nothing for GPT-NeoX-20B's ByteLevel); else the
 * family's default: lind's own models feed their "bos" (they were trained
 * so), HF RWKV-4 feeds none (transformers and ChatRWKV feed the prompt
 * alone from the zero state).
 *
 * EOS: generation_config.json "eos_token_id", then config.json's (an id or
 * a list), else the family's default: id 0 for HF RWKV-4 (<|endoftext|> in
 * both RWKV vocabularies, RwkvConfig's default), none for lind's own
 * models (the byte model has no end token). */
#ifndef LIND_RECURRENT_CONVENTIONS_H
#define LIND_RECURRENT_CONVENTIONS_H

#include <stddef.h>

#include "recurrent/model.h"

struct tokenizer;

/* Fill c->add_bos, c->bos (a post_processor may name its own id), c->eos,
 * c->n_eos and the *_from notes for the model directory dir, whose config
 * is c and tokenizer tok. bos_override as model_opts.bos. 0, or -EINVAL
 * naming the file and field of a malformed value. */
int conventions_read(const char *dir, lind_config *c, const struct tokenizer *tok, int bos_override, char *err,
                     size_t errlen);

#endif
