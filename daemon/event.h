/* daemon/event.h — the typed events the compute and store threads hand to
 * the loop, one schema for every protocol.
 *
 * A turn's stream is token* (progress interleaved while its text is fed),
 * then one final event: done (generate), appended (append's result) or
 * error. The threads that produce them know nothing of wire formats; each
 * kind of connection encodes them itself (event_pack_msgpack for the
 * msgpack socket, daemon/http.c for HTTP), so there is one encoder per
 * protocol and no hand-counted map sizes on the producing side.
 *
 * An evlist owns its events and one byte arena that holds their variable
 * parts (token bytes, error messages, stop strings); events name those by
 * offset so the arena may grow. */
#ifndef LIND_DAEMON_EVENT_H
#define LIND_DAEMON_EVENT_H

#include <stddef.h>
#include <stdint.h>
#include <msgpack.h>
#include "daemon/protocol.h"

typedef enum ev_kind {
    EV_TOKEN = 1,   /* bytes: one sampled token's bytes (may be a partial UTF-8 sequence) */
    EV_PROGRESS,    /* fed of total input tokens are through the model */
    EV_DONE,        /* final: a generate ended (done; bytes: the stop string hit) */
    EV_APPENDED,    /* final: an append ended (done's session_tokens, tokens_in, fed_bytes) */
    EV_ERROR,       /* final: code, bytes: the message */
} ev_kind;

typedef struct event {
    ev_kind    kind;
    uint64_t   id;            /* the request's id */
    size_t     off, len;      /* bytes in the list's arena */
    uint64_t   fed, total;    /* EV_PROGRESS */
    proto_done done;          /* EV_DONE, EV_APPENDED (done.stop is unset: see off/len) */
    int        cancelled;     /* EV_APPENDED */
    proto_code code;          /* EV_ERROR */
} event;

typedef struct evlist {
    event   *v;
    size_t   n, cap;
    uint8_t *arena;
    size_t   arena_len, arena_cap;
} evlist;

void evlist_init(evlist *l);
void evlist_free(evlist *l);
/* Room for `events` more events holding `bytes` more bytes, so that
 * appending them cannot fail: 0 or -ENOMEM. */
int  evlist_reserve(evlist *l, size_t events, size_t bytes);
/* Append an event; each returns 0 or -ENOMEM (nothing added). */
int  evlist_token(evlist *l, uint64_t id, const uint8_t *bytes, size_t n);
int  evlist_progress(evlist *l, uint64_t id, uint64_t fed, uint64_t total);
int  evlist_done(evlist *l, const proto_done *d);       /* copies d->stop */
int  evlist_appended(evlist *l, uint64_t id, uint64_t session_tokens, uint64_t tokens_in,
                     uint64_t fed_bytes, int cancelled);
int  evlist_error(evlist *l, uint64_t id, proto_code code, const char *msg);
/* The event's bytes (token, message, stop string); never NULL. */
static inline const uint8_t *event_bytes(const evlist *l, const event *e)
{
    static const uint8_t none[1];   /* no event of the list has bytes yet */
    return l->arena ? l->arena + e->off : none;
}
/* Does this event end its request? */
static inline int event_is_final(const event *e)
{
    return e->kind == EV_DONE || e->kind == EV_APPENDED || e->kind == EV_ERROR;
}

/* The msgpack protocol's encoding of one event (docs/PROTOCOL.md). */
void event_pack_msgpack(msgpack_sbuffer *sb, const evlist *l, const event *e);

#endif
