/* daemon/event.c — typed events and their msgpack encoding. See event.h. */
#include "daemon/event.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void evlist_init(evlist *l)
{
    memset(l, 0, sizeof *l);
}

void evlist_free(evlist *l)
{
    free(l->v);
    free(l->arena);
    memset(l, 0, sizeof *l);
}

int evlist_reserve(evlist *l, size_t events, size_t bytes)
{
    if (l->n + events > l->cap) {
        size_t nc = l->cap ? l->cap : 16;
        while (nc < l->n + events) nc *= 2;
        event *nv = realloc(l->v, nc * sizeof *nv);
        if (!nv) return -ENOMEM;
        l->v = nv;
        l->cap = nc;
    }
    if (l->arena_len + bytes > l->arena_cap) {
        size_t nc = l->arena_cap ? l->arena_cap : 256;
        while (nc < l->arena_len + bytes) nc *= 2;
        uint8_t *na = realloc(l->arena, nc);
        if (!na) return -ENOMEM;
        l->arena = na;
        l->arena_cap = nc;
    }
    return 0;
}

/* A new event with n bytes copied into the arena (NULL: out of memory). */
static event *push(evlist *l, ev_kind kind, uint64_t id, const void *bytes, size_t n)
{
    if (l->n == l->cap) {
        size_t nc = l->cap ? 2 * l->cap : 16;
        event *nv = realloc(l->v, nc * sizeof *nv);
        if (!nv) return NULL;
        l->v = nv;
        l->cap = nc;
    }
    if (l->arena_len + n > l->arena_cap) {
        size_t nc = l->arena_cap ? 2 * l->arena_cap : 256;
        while (nc < l->arena_len + n) nc *= 2;
        uint8_t *na = realloc(l->arena, nc);
        if (!na) return NULL;
        l->arena = na;
        l->arena_cap = nc;
    }
    event *e = &l->v[l->n++];
    memset(e, 0, sizeof *e);
    e->kind = kind;
    e->id = id;
    e->off = l->arena_len;
    e->len = n;
    if (n) memcpy(l->arena + l->arena_len, bytes, n);
    l->arena_len += n;
    return e;
}

int evlist_token(evlist *l, uint64_t id, const uint8_t *bytes, size_t n)
{
    return push(l, EV_TOKEN, id, bytes, n) ? 0 : -ENOMEM;
}

int evlist_progress(evlist *l, uint64_t id, uint64_t fed, uint64_t total)
{
    event *e = push(l, EV_PROGRESS, id, NULL, 0);
    if (!e) return -ENOMEM;
    e->fed = fed;
    e->total = total;
    return 0;
}

int evlist_done(evlist *l, const proto_done *d)
{
    size_t n = d->stop ? d->stop_len : 0;
    event *e = push(l, EV_DONE, d->id, d->stop, n);
    if (!e) return -ENOMEM;
    e->done = *d;
    e->done.stop = NULL;
    e->done.stop_len = 0;
    return 0;
}

int evlist_appended(evlist *l, uint64_t id, uint64_t session_tokens, uint64_t tokens_in,
                    uint64_t fed_bytes, int cancelled)
{
    event *e = push(l, EV_APPENDED, id, NULL, 0);
    if (!e) return -ENOMEM;
    e->done.id = id;
    e->done.session_tokens = session_tokens;
    e->done.tokens_in = tokens_in;
    e->done.fed_bytes = fed_bytes;
    e->cancelled = cancelled;
    return 0;
}

int evlist_error(evlist *l, uint64_t id, proto_code code, const char *msg)
{
    event *e = push(l, EV_ERROR, id, msg, msg ? strlen(msg) : 0);
    if (!e) return -ENOMEM;
    e->code = code;
    return 0;
}

void event_pack_msgpack(msgpack_sbuffer *sb, const evlist *l, const event *e)
{
    switch (e->kind) {
    case EV_TOKEN:
        proto_pack_token(sb, e->id, event_bytes(l, e), e->len);
        break;
    case EV_PROGRESS:
        proto_pack_progress(sb, e->id, e->fed, e->total);
        break;
    case EV_DONE: {
        proto_done d = e->done;
        d.stop = e->len ? event_bytes(l, e) : NULL;
        d.stop_len = e->len;
        proto_pack_done(sb, &d);
        break;
    }
    case EV_APPENDED: {
        msgpack_packer pk;
        proto_result_begin(&pk, sb, e->id, 4);
        proto_pack_key(&pk, "session_tokens");
        msgpack_pack_uint64(&pk, e->done.session_tokens);
        proto_pack_key(&pk, "tokens_in");
        msgpack_pack_uint64(&pk, e->done.tokens_in);
        proto_pack_key(&pk, "fed_bytes");
        msgpack_pack_uint64(&pk, e->done.fed_bytes);
        proto_pack_key(&pk, "cancelled");
        if (e->cancelled) msgpack_pack_true(&pk); else msgpack_pack_false(&pk);
        break;
    }
    case EV_ERROR: {
        /* proto_pack_error wants a C string; messages never hold NUL. */
        char *msg = malloc(e->len + 1);
        if (msg) {
            if (e->len) memcpy(msg, event_bytes(l, e), e->len);
            msg[e->len] = 0;
        }
        proto_pack_error(sb, e->id, e->code, msg ? msg : "out of memory");
        free(msg);
        break;
    }
    }
}
