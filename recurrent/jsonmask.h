/* recurrent/jsonmask.h — which tokens of a vocabulary keep a jsonfsm alive
 * (structured output's masking, docs/HTTP.md "Structured output").
 *
 * jsonmask_vocab is built once per tokenizer (immutable afterwards, may be
 * shared between threads): every token's bytes sorted, with the length of
 * the prefix each shares with the one before, so one walk over the sorted
 * list feeds a shared prefix once and skips every token under a prefix that
 * killed the automaton; and the class of "plain" tokens (only bytes
 * 0x20..0x7e but '"' and '\\', or whole UTF-8 sequences), which inside a free
 * string (jsonfsm_is_free_string) are allowed without being fed.
 *
 * jsonmask (one per constrained turn; not shared) computes the allowed set of
 * a state as a bitmap of vocab bits and keeps the last JSONMASK_CACHE
 * results keyed by the state's used bytes: inside one string or between the
 * same values a state repeats, and its set is then a lookup.
 *
 * A token is allowed when feeding all its bytes keeps the state alive; an
 * end token (one of the eos ids given) when the state is complete; a token
 * without bytes never. jsonfsm's live-prefix contract makes every allowed
 * token one after which the document can still be finished. */
#ifndef LIND_RECURRENT_JSONMASK_H
#define LIND_RECURRENT_JSONMASK_H

#include <stddef.h>
#include <stdint.h>

#include "recurrent/jsonfsm.h"
#include "recurrent/tokenizer.h"

#define JSONMASK_CACHE 16   /* allowed sets remembered per turn */
#define JSONMASK_NEG (-1e30f)   /* the logit a masked token gets (finite: logprobs stay printable) */

typedef struct jsonmask_vocab jsonmask_vocab;
typedef struct jsonmask jsonmask;

/* Index the first vocab ids of tokenizer t (ids past its vocabulary, or
 * without bytes, are never allowed); eos[0..neos) are the end tokens. 0, or
 * -ENOMEM with a message in err. */
int  jsonmask_vocab_new(const tokenizer *t, int vocab, const int32_t *eos, int neos, jsonmask_vocab **out,
                        char *err, size_t errlen);
/* The same from the bytes of each token: bytes[id] (lens[id] bytes; NULL or
 * 0: a token without bytes), which must outlive the index (it keeps the
 * pointers). */
int  jsonmask_vocab_from(int vocab, const uint8_t *const *bytes, const size_t *lens, const int32_t *eos, int neos,
                         jsonmask_vocab **out, char *err, size_t errlen);
void jsonmask_vocab_free(jsonmask_vocab *v);   /* NULL is a no-op */
int  jsonmask_vocab_size(const jsonmask_vocab *v);

/* A per-turn masker over v (which must outlive it); NULL on ENOMEM. */
jsonmask *jsonmask_new(const jsonmask_vocab *v);
void jsonmask_free(jsonmask *m);              /* NULL is a no-op */

/* The allowed set of state f: (vocab + 63) / 64 words, bit i of word i / 64
 * for token i; owned by m, valid until the next call. *nallowed receives how
 * many bits are set. NULL on ENOMEM. */
const uint64_t *jsonmask_allowed(jsonmask *m, const jsonfsm *f, size_t *nallowed);

/* Set row[i] to JSONMASK_NEG for every token i not in bits (vocab entries). */
void jsonmask_apply(const uint64_t *bits, float *row, int vocab);

/* The allowed tokens' logits packed: vals[k] = row[ids[k]] for the allowed
 * ids in increasing order; returns their count. Sampling from vals (and
 * mapping the draw back through ids) draws as the whole row masked would,
 * at a cost in the count instead of the vocabulary — the cheap path when
 * few tokens are allowed. */
size_t jsonmask_gather(const uint64_t *bits, const float *row, int vocab, float *vals, int32_t *ids);

/* Draw the next token from row (vocab logits, the caller's to modify) with
 * sampler sm among the tokens in bits (nallowed of them), the cheapest exact
 * way (the same distribution as the masked row; the draws themselves differ
 * by path):
 *   - at most half the vocabulary allowed and no repetition penalty: gather
 *     the allowed logits into vals/ids ([vocab] each) and sample those only;
 *   - greedy, or temperature without top-k and top-p, most tokens allowed:
 *     draw on the whole row and keep the draw when allowed (rejection: exact
 *     for these; inside a string nearly every draw is kept);
 *   - else, or when masked_row is set (the caller reads the row afterwards,
 *     e.g. for logprobs): jsonmask_apply on the row, then draw.
 * A draw that still lands on a masked token (only a rounding edge of the
 * sampler's cumulative sum can) is replaced by the most likely allowed one.
 * *masked (if non-NULL) is set when the row was masked in place. */
struct sampler;
int32_t jsonmask_sample(struct sampler *sm, const uint64_t *bits, size_t nallowed, float *row, int vocab,
                        float *vals, int32_t *ids, float *scratch, int masked_row, int *masked);

/* Whether token id is in bits. */
static inline int jsonmask_has(const uint64_t *bits, int32_t id)
{
    return id >= 0 && (bits[id >> 6] >> (id & 63) & 1);
}

/* Counters since jsonmask_new: cache hits and computed sets. */
void jsonmask_stats(const jsonmask *m, uint64_t *hits, uint64_t *computed);

#endif
