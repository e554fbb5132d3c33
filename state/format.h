/* state/format.h — the versioned, checksummed byte format of a session.
 *
 * A session's whole context is its constant-size recurrent state plus what
 * the next step needs. state_encode() turns that into one self-describing
 * blob; state_decode() refuses anything it cannot trust, with a specific
 * error: wrong magic, newer version, other byte order, another model
 * (fingerprint or layout mismatch), bad checksum, truncation.
 *
 * Blob layout (little-endian, all integers fixed width; see docs/STATE.md):
 *   header: magic "LINDST\0\1", format version, byte-order mark, model
 *           fingerprint, token count, pending token, sampler (params, RNG,
 *           window of token ids), the unfinished text tail, region table
 *           (model_state_region per region, with its element type)
 *   raw state (model_state_bytes())
 *   xxh64 checksum over everything before it
 * state_decode() also reads version 1 (byte windows, no tail, untyped
 * regions: all float), as lind wrote it before 32-bit token ids, and
 * converts a region saved as f64 that the model now keeps as f32 (the AFT
 * sums or the RetNet S of a decaying layer, docs/STATE.md), matching
 * regions by layer and name.
 */
#ifndef LIND_STATE_FORMAT_H
#define LIND_STATE_FORMAT_H

#include <stddef.h>
#include <stdint.h>
#include "recurrent/model.h"
#include "recurrent/sampler.h"
#include "recurrent/tokenizer.h"

#define STATE_FORMAT_VERSION 2

/* Error codes beyond errno values (all negative). */
enum {
    STATE_E_MAGIC     = -2001,  /* not a lind state */
    STATE_E_VERSION   = -2002,  /* written by a newer lind */
    STATE_E_ENDIAN    = -2003,  /* other byte order */
    STATE_E_MODEL     = -2004,  /* fingerprint or layout of another model */
    STATE_E_CHECKSUM  = -2005,  /* bytes changed after writing */
    STATE_E_TRUNCATED = -2006,  /* shorter than its header says */
    STATE_E_NONFINITE = -2007,  /* NaN/Inf in the state: never written */
    STATE_E_INVALID   = -2008,  /* intact, but a field is out of range
                                   (pending token, sampler settings/window,
                                   text tail) */
};

/* What a session is, besides its raw recurrent state. */
typedef struct state_meta {
    uint64_t tokens;         /* tokens consumed so far, BOS included */
    int32_t  pending_token;  /* sampled/emitted but not yet fed; -1 = none;
                                else an id in [0, the model's vocab) */
    sampler  sampler;        /* params, RNG, repetition window (ids in
                                [0, SAMPLER_VOCAB_MAX): one the model lacks is
                                never penalized) */
    uint32_t tail_len;  uint8_t tail[TOKENIZER_TAIL_MAX];   /* text not yet tokenized (recurrent/tokenizer.h) */
    uint32_t chat_template;  /* the hash (recurrent/chat.h chat_template.hash) of the chat
                                template the session's chat turns are framed with;
                                0: none recorded (raw text only, or saved before lind
                                recorded it) */
} state_meta;

/* Encode. `raw` is model_state_bytes(m) bytes read from a slot. Fails with
 * STATE_E_NONFINITE (naming the region) if any element of a float region
 * (LIND_EL_F32/F64) of raw is NaN or Inf (integer regions are never checked),
 * and with STATE_E_INVALID if a meta field is out of range (pending token
 * outside the model's vocabulary, a window id outside [0, SAMPLER_VOCAB_MAX),
 * window length/position, sampler settings, tail_len > TOKENIZER_TAIL_MAX). On success *out is a malloc'd blob the
 * caller frees. Always writes STATE_FORMAT_VERSION. */
int state_encode(const model *m, const state_meta *meta, const void *raw,
                 uint8_t **out, size_t *outlen, char *err, size_t errlen);

/* Decode and verify a blob against model m. On success fills *meta and copies
 * the raw state into `raw` (model_state_bytes(m) bytes, caller's buffer).
 * A version-1 blob decodes into the same state_meta: its window bytes become
 * ids, tail_len is 0; its regions must match the model's (all float). */
int state_decode(const model *m, const uint8_t *blob, size_t len,
                 state_meta *meta, void *raw, char *err, size_t errlen);

/* The NaN/Inf check both run: every element of the float regions
 * (LIND_EL_F32/F64) of raw, never the integer ones (ring heads, positions,
 * counters: any bit pattern is theirs). 0, or STATE_E_NONFINITE with a message
 * naming layer, region and element. */
int state_check_finite(const model_state_region *r, int nr, const void *raw, char *err, size_t errlen);

/* The sampler seed recorded in a blob, read without a model (for `info` on
 * a stored session): checks the magic, the version and the header check,
 * not the whole checksum. 0, or a STATE_E_* code. */
int state_peek_seed(const uint8_t *blob, size_t len, uint64_t *seed);
/* The chat template hash recorded in a blob (state_meta.chat_template; 0:
 * none), read as state_peek_seed reads the seed. */
int state_peek_chat_template(const uint8_t *blob, size_t len, uint32_t *hash);

/* A short, stable, lowercase word for an error code above ("checksum", ...).
 * Checks run in this order, so the first fault found is the one reported:
 * magic, version, byte order, truncation/checksum, model, field ranges,
 * NaN/Inf. */
const char *state_strerror(int code);

#endif
