/* daemon/protocol.h — the wire protocol of docs/PROTOCOL.md as pure functions.
 *
 * Incoming: proto_scan() finds where the next msgpack message ends in a
 * connection's input bytes (and refuses one that is, or declares itself,
 * larger than the limit before anything is allocated for it); proto_parse()
 * turns one complete message into a typed op_request, or into a stable
 * error code and a message naming the field at fault. Neither touches any
 * state, so the fuzz target (tests/fuzz_protocol.c) drives them directly.
 *
 * Outgoing: proto_pack_* append one event (a msgpack map) to a
 * msgpack_sbuffer owned by the caller. */
#ifndef LIND_DAEMON_PROTOCOL_H
#define LIND_DAEMON_PROTOCOL_H

#include <stddef.h>
#include <stdint.h>
#include <msgpack.h>
#include "recurrent/sampler.h"
#include "recurrent/stop.h"
#include "state/store.h"
#include "daemon/request.h"

#define PROTO_VERSION     1
#define PROTO_ERRMSG      256

/* Stable error codes; proto_code_name() gives the wire string. */
typedef enum proto_code {
    PE_OK = 0, PE_BAD_REQUEST, PE_UNKNOWN_OP, PE_TOO_LARGE, PE_DECODE,
    PE_BAD_NAME, PE_NOT_FOUND, PE_EXISTS, PE_BUSY, PE_LIMIT, PE_BAD_STATE,
    PE_IO, PE_SHUTTING_DOWN, PE_INTERNAL, PE_UNAVAILABLE,
    PE_MOVED, PE_CONFLICT,   /* several nodes on one store (docs/SCALE.md) */
    PE_INSUFFICIENT_STORAGE, /* the store is past --max-store-bytes, or its disk is full */
    PE_UNAUTHORIZED,         /* TCP: no hello with the server's token first (docs/PROTOCOL.md) */
    PE_LAST = PE_UNAUTHORIZED   /* keep it the last code: loops over every code end here */
} proto_code;

const char *proto_code_name(proto_code c);

typedef struct proto_error {
    proto_code code;
    uint64_t   id;        /* the request's id when it could be read, else 0 */
    char       msg[PROTO_ERRMSG];
} proto_error;

/* Where the first message in buf[0..len) ends.
 *   > 0: a complete message of that many bytes;
 *     0: incomplete, read more;
 *    <0: -PE_TOO_LARGE (longer than max_message, or a container declaring
 *        more elements than max_message bytes could hold) or -PE_DECODE
 *        (a byte that starts no msgpack value). */
long proto_scan(const uint8_t *buf, size_t len, size_t max_message);

/* Decode one complete message (as delimited by proto_scan). On success
 * returns 0 and fills *req (free it with op_request_free). On failure
 * returns the error code, fills *err and leaves *req empty. Codes PE_DECODE
 * and PE_TOO_LARGE mean the connection must be closed. */
proto_code proto_parse(const uint8_t *msg, size_t len, const proto_limits *lim,
                       op_request *req, proto_error *err);
/* Same, from an already unpacked object. */
proto_code proto_decode(const msgpack_object *o, const proto_limits *lim,
                        op_request *req, proto_error *err);

/* ---- events ------------------------------------------------------------- */

/* Make room for n more bytes in sb: 0, or -ENOMEM (sb unchanged). Packing
 * an event of at most n bytes after it cannot fail half-way (msgpack-c's
 * sbuffer drops a piece it cannot grow for, which would leave a truncated
 * event in the stream). */
int  proto_reserve(msgpack_sbuffer *sb, size_t n);
void proto_pack_error(msgpack_sbuffer *sb, uint64_t id, proto_code code, const char *msg);
void proto_pack_token(msgpack_sbuffer *sb, uint64_t id, const uint8_t *bytes, size_t n);
/* `progress` (only to requests that asked with `progress: true`): `fed` of
 * the turn's `total` input tokens are through the model. */
void proto_pack_progress(msgpack_sbuffer *sb, uint64_t id, uint64_t fed, uint64_t total);

typedef struct proto_done {
    uint64_t id;
    const char *reason;            /* "length", "stop", "cancelled" */
    uint64_t tokens_in, tokens_out, session_tokens;
    uint64_t fed_bytes;        /* bytes of the request's text the session holds */
    double   ms_queue, ms_prompt, ms_generate, ms_save, ms_total;
    const uint8_t *stop; size_t stop_len;  /* when reason is "stop" by a stop string */
    int      has_stop_token;               /* reason "stop" by the model's end token: */
    uint32_t stop_token;                   /* its id (never sent as a token) */
    int      replayed;                     /* the recorded answer of an earlier try (request_id) */
    int      kept;     /* in the daemon only, never on the wire: the commit also made the copy
                        * the request asked for (op_request.keep_as / keep_conv) */
    int      fed_fresh;   /* in the daemon only: start_from was not stored, the turn fed
                           * op_request.fresh_text from a zero state */
} proto_done;
void proto_pack_done(msgpack_sbuffer *sb, const proto_done *d);

/* Start a `result` event with n_fields op-specific fields to follow; the
 * caller then packs n_fields key/value pairs with the helpers below or with
 * msgpack_pack_* on the returned packer. */
void proto_result_begin(msgpack_packer *pk, msgpack_sbuffer *sb, uint64_t id, int n_fields);
void proto_pack_key(msgpack_packer *pk, const char *key);
void proto_pack_str(msgpack_packer *pk, const char *s);
void proto_pack_bin(msgpack_packer *pk, const void *p, size_t n);

#endif
