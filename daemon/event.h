/* daemon/event.h — the typed events the compute and store threads hand to
 * the loop, one schema for every protocol.
 *
 * A turn's stream is token* (progress interleaved while its text is fed),
 * then one final event: done (generate), appended (append's result) or
 * error. Every other request (hello, list, info, export, delete, fork,
 * import, stats, cancel) ends with one final event: result or error. The
 * threads that produce them know nothing of wire formats; each kind of
 * connection encodes them itself (event_pack_msgpack for the
 * msgpack socket, daemon/http.c for HTTP), so there is one encoder per
 * protocol and no hand-counted map sizes on the producing side.
 *
 * An evlist owns its events, one byte arena that holds their variable
 * parts (token bytes, error messages, stop strings, a result's strings) and
 * one table of result fields; events name those by offset or index so both
 * may grow. */
#ifndef LIND_DAEMON_EVENT_H
#define LIND_DAEMON_EVENT_H

#include <stddef.h>
#include <stdint.h>
#include <msgpack.h>
#include "daemon/protocol.h"
#include "recurrent/bytebuf.h"

typedef enum ev_kind {
    EV_TOKEN = 1,   /* bytes: one sampled token's bytes (may be a partial UTF-8 sequence) */
    EV_PROGRESS,    /* fed of total input tokens are through the model */
    EV_DONE,        /* final: a generate ended (done; bytes: the stop string hit) */
    EV_APPENDED,    /* final: an append ended (done's session_tokens, tokens_in, fed_bytes) */
    EV_ERROR,       /* final: code, bytes: the message */
    EV_RESULT,      /* final: an admin op's answer, the record at field `rec` */
} ev_kind;

/* A result is a record: (key, value) fields, where a value may itself be
 * a record or an array (of records or of values). Fields sit in the list's
 * field table in prefix order: a container, then everything inside it, so
 * an encoder walks them front to back; each container counts its direct
 * children (n) and knows where it ends (end), so nobody counts by hand. */
typedef enum ev_vtype {
    EVV_NIL = 1, EVV_BOOL, EVV_U64, EVV_I64, EVV_F64,
    EVV_STR,        /* v.s: UTF-8 text in the arena */
    EVV_BYTES,      /* v.s: raw bytes in the arena */
    EVV_ARRAY,      /* n elements (their key is NULL) follow */
    EVV_RECORD,     /* n fields follow */
} ev_vtype;

typedef struct ev_field {
    const char *key;      /* static storage (a literal: not copied); NULL in an array or at the root */
    ev_vtype    type;
    uint32_t    n;        /* EVV_ARRAY, EVV_RECORD: direct children */
    size_t      end;      /* EVV_ARRAY, EVV_RECORD: index one past its last descendant */
    union {
        int      b;
        uint64_t u;
        int64_t  i;
        double   f;
        struct { size_t off, len; } s;
    } v;
} ev_field;

#define EV_RESULT_DEPTH 8   /* records and arrays open at once, the root included */

typedef struct event {
    ev_kind    kind;
    uint64_t   id;            /* the request's id */
    size_t     off, len;      /* bytes in the list's arena */
    uint64_t   fed, total;    /* EV_PROGRESS */
    proto_done done;          /* EV_DONE, EV_APPENDED (done.stop is unset: see off/len) */
    int        cancelled;     /* EV_APPENDED */
    proto_code code;          /* EV_ERROR */
    size_t     rec;           /* EV_RESULT: index of its root record in the field table */
    /* EV_TOKEN of a turn that asked for logprobs (only HTTP requests do):
     * the token's log-probability, and ntop alternatives in the arena at
     * lp_off (lp_len bytes), each a float, a uint16 byte count and the
     * token's bytes (evlist_token_lp) */
    int        has_lp;
    float      lp;
    uint32_t   ntop;
    size_t     lp_off, lp_len;
} event;

#define EV_TOP_MAX 20   /* alternatives a token event may carry */

typedef struct ev_top {
    float          lp;
    const uint8_t *bytes;
    size_t         len;
} ev_top;

typedef struct evlist {
    event   *v;
    size_t   n, cap;
    bytebuf  arena;           /* the events' and fields' variable bytes */
    ev_field *f;              /* result fields, all results of the list */
    size_t   nf, fcap;
    /* the result being built (evlist_result_begin .. _end) */
    size_t   open[EV_RESULT_DEPTH];   /* indices of the open containers, root first */
    int      depth;                   /* 0: no result is being built */
    int      rfail;                   /* the first failure while building it, or 0 */
    size_t   mark_n, mark_nf, mark_arena;   /* where it started: undone on failure */
} evlist;

void evlist_init(evlist *l);
void evlist_free(evlist *l);
/* Room for `events` more events holding `bytes` more bytes, so that
 * appending them cannot fail: 0 or -ENOMEM. */
int  evlist_reserve(evlist *l, size_t events, size_t bytes);
/* Append an event; each returns 0 or -ENOMEM (nothing added). */
int  evlist_token(evlist *l, uint64_t id, const uint8_t *bytes, size_t n);
/* A token with its log-probability and ntop (<= EV_TOP_MAX) alternatives. */
int  evlist_token_lp(evlist *l, uint64_t id, const uint8_t *bytes, size_t n, float lp, const ev_top *top,
                     uint32_t ntop);
/* The i-th alternative of a token event with logprobs (i < e->ntop). */
ev_top event_top(const evlist *l, const event *e, uint32_t i);
int  evlist_progress(evlist *l, uint64_t id, uint64_t fed, uint64_t total);
int  evlist_done(evlist *l, const proto_done *d);       /* copies d->stop */
int  evlist_appended(evlist *l, uint64_t id, uint64_t session_tokens, uint64_t tokens_in,
                     uint64_t fed_bytes, int cancelled);
int  evlist_error(evlist *l, uint64_t id, proto_code code, const char *msg);

/* Building a result:
 *
 *     evlist_result_begin(l, id);
 *     evlist_put_str(l, "session", name);
 *     evlist_open_array(l, "sessions");
 *       evlist_open_record(l, NULL); evlist_put_u64(l, "tokens", 5); evlist_close(l);
 *     evlist_close(l);
 *     rc = evlist_result_end(l);
 *
 * Failures are sticky: after one (out of memory, nesting past
 * EV_RESULT_DEPTH, a close without an open) the other calls do nothing,
 * and evlist_result_end returns it and removes the whole result, leaving
 * the list as it was before evlist_result_begin; so callers check the end
 * alone, and a half-built answer never reaches a client. The puts and opens
 * return the sticky code too. -EINVAL: no result is being built (or one
 * already is, for evlist_result_begin). Nothing else is appended to the
 * list while a result is being built. */
int  evlist_result_begin(evlist *l, uint64_t id);
int  evlist_put_nil(evlist *l, const char *key);
int  evlist_put_bool(evlist *l, const char *key, int v);
int  evlist_put_u64(evlist *l, const char *key, uint64_t v);
int  evlist_put_i64(evlist *l, const char *key, int64_t v);
int  evlist_put_f64(evlist *l, const char *key, double v);
int  evlist_put_str(evlist *l, const char *key, const char *s);            /* copied */
int  evlist_put_bytes(evlist *l, const char *key, const void *p, size_t n); /* copied */
int  evlist_open_record(evlist *l, const char *key);
int  evlist_open_array(evlist *l, const char *key);
int  evlist_close(evlist *l);
/* Close the root (and anything left open): 0, or the first failure. */
int  evlist_result_end(evlist *l);
/* Room for one result of at most `fields` fields (containers included,
 * the root not) holding at most `bytes` bytes of strings and bytes, so that
 * building it cannot fail: 0 or -ENOMEM. As evlist_reserve, it is taken
 * before a change is committed, so that the change's answer cannot be lost. */
int  evlist_reserve_result(evlist *l, size_t fields, size_t bytes);
/* A top-level field of a result by key (NULL: none); its str/bytes value
 * through ev_field_bytes. */
const ev_field *event_result_field(const evlist *l, const event *e, const char *key);
static inline const uint8_t *ev_field_bytes(const evlist *l, const ev_field *f)
{
    static const uint8_t none[1];
    return l->arena.p ? (const uint8_t *)l->arena.p + f->v.s.off : none;
}
/* The event's bytes (token, message, stop string); never NULL. */
static inline const uint8_t *event_bytes(const evlist *l, const event *e)
{
    static const uint8_t none[1];   /* no event of the list has bytes yet */
    return l->arena.p ? (const uint8_t *)l->arena.p + e->off : none;
}
/* Does this event end its request? */
static inline int event_is_final(const event *e)
{
    return e->kind == EV_DONE || e->kind == EV_APPENDED || e->kind == EV_ERROR ||
           e->kind == EV_RESULT;
}

/* The msgpack protocol's encoding of one event (docs/PROTOCOL.md). */
void event_pack_msgpack(msgpack_sbuffer *sb, const evlist *l, const event *e);
/* At least the bytes event_pack_msgpack writes for e, so that a caller can
 * reserve them first and never send an event cut half-way. */
size_t event_msgpack_bound(const evlist *l, const event *e);

#endif
