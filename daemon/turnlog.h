/* daemon/turnlog.h — a turn's recorded answer, for exactly-once retries.
 *
 * A generate or append that carries a request id (docs/PROTOCOL.md,
 * "Retries") records, while it runs, the bytes of every token event it
 * sends; when it ends, its answer (done's fields, or the append's result)
 * and those token events are encoded into one blob, which the store commits
 * in the same transaction as the session's state (state/store.h, "turn
 * results"). A retry with the same request id decodes the blob back into
 * the same events — token for token, then `done` / the result with
 * `replayed: true` — instead of running the turn again.
 *
 * The blob also holds a hash of the request's parameters (text, sampling
 * settings, stop strings, ...): a retry whose parameters differ is not the
 * same turn and is refused (turnlog_replay returns -EINVAL).
 *
 * Blob format (little-endian): "LTR1", u64 params hash, u8 flags (1 append,
 * 2 cancelled, 4 stop token, 8 logprobs), u8 reason code, u64 tokens_in,
 * tokens_out, session_tokens, fed_bytes, u32 stop_token, u8 stop length +
 * the stop string, f64 ms queue/prompt/generate, u32 token events n, n ×
 * u32 their lengths, then their bytes; with flag 8, then for every token
 * event its f32 log-probability, u8 alternatives m (<= EV_TOP_MAX) and m ×
 * (f32 log-probability, u16 length, bytes). */
#ifndef LIND_DAEMON_TURNLOG_H
#define LIND_DAEMON_TURNLOG_H

#include <stddef.h>
#include <stdint.h>
#include "daemon/event.h"
#include "daemon/protocol.h"
#include "recurrent/bytebuf.h"

typedef struct turnlog {
    bytebuf   bytes;                      /* token events' bytes, concatenated */
    uint32_t *lens;   size_t n, ncap;     /* each event's length */
    bytebuf   lp;                         /* logprobs section (format above), when has_lp */
    int       has_lp;                     /* the turn asked for logprobs: every token has its record */
    int       failed;                     /* out of memory: the record is incomplete */
} turnlog;

/* The hash of what makes a generate/append the same turn: op, text, and
 * every field that changes its result (not `progress`); or, for a request
 * of the HTTP front door (r->request_hash set), op and the hash it made of
 * the HTTP request, since the text it derives from a chat request also
 * depends on what it remembers of the session. */
uint64_t turnlog_params_hash(const op_request *r);

void turnlog_init(turnlog *t);
void turnlog_free(turnlog *t);
/* One token event's bytes; a failure sets t->failed (and returns -ENOMEM). */
int  turnlog_token(turnlog *t, const uint8_t *b, size_t n);
/* The same with its log-probability and ntop alternatives (a turn asking
 * logprobs records every token this way). */
int  turnlog_token_lp(turnlog *t, const uint8_t *b, size_t n, float lp, const ev_top *top, uint32_t ntop);

/* The blob of a finished turn: d is its done (for an append: session_tokens,
 * tokens_in, fed_bytes), reason one of "length", "stop", "cancelled",
 * "max_length", "append". *out malloc'd. 0, -ENOMEM, or -EINVAL (an unknown
 * reason, or t->failed). */
int  turnlog_encode(const turnlog *t, uint64_t params_hash, int is_append, int cancelled,
                    const proto_done *d, uint8_t **out, size_t *len);

/* Append the recorded answer to ev as request `id`'s events, `done` (or the
 * append's result) marked replayed, its ms.total `ms_total`. 0; -EINVAL when
 * params_hash differs from the recorded one (a different turn: nothing
 * appended); -EBADMSG for a blob that does not decode; -ENOMEM. *is_append
 * (may be NULL) gets which op recorded it. */
int  turnlog_replay(const uint8_t *blob, size_t len, uint64_t id, uint64_t params_hash,
                    double ms_total, evlist *ev, int *is_append);

#endif
