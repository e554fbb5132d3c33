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
 *           fingerprint, region table (model_state_region per region),
 *           token count, pending token, sampler (params, RNG, window)
 *   raw state (model_state_bytes())
 *   xxh64 checksum over everything before it
 */
#ifndef LIND_STATE_FORMAT_H
#define LIND_STATE_FORMAT_H

#include <stddef.h>
#include <stdint.h>
#include "recurrent/model.h"
#include "recurrent/sampler.h"

#define STATE_FORMAT_VERSION 1

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
                                   (pending token, sampler settings/window) */
};

/* What a session is, besides its raw recurrent state. */
typedef struct state_meta {
    uint64_t tokens;         /* tokens consumed so far, BOS included */
    int32_t  pending_token;  /* sampled/emitted but not yet fed; -1 = none */
    sampler  sampler;        /* params, RNG, repetition window */
} state_meta;

/* Encode. `raw` is model_state_bytes(m) bytes read from a slot. Fails with
 * STATE_E_NONFINITE (naming the region) if any float/double in raw is NaN or
 * Inf. On success *out is a malloc'd blob the caller frees. */
int state_encode(const model *m, const state_meta *meta, const void *raw,
                 uint8_t **out, size_t *outlen, char *err, size_t errlen);

/* Decode and verify a blob against model m. On success fills *meta and copies
 * the raw state into `raw` (model_state_bytes(m) bytes, caller's buffer). */
int state_decode(const model *m, const uint8_t *blob, size_t len,
                 state_meta *meta, void *raw, char *err, size_t errlen);

/* A short, stable, lowercase word for an error code above ("checksum", ...).
 * Checks run in this order, so the first fault found is the one reported:
 * magic, version, byte order, truncation/checksum, model, field ranges,
 * NaN/Inf. */
const char *state_strerror(int code);

#endif
