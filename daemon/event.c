/* daemon/event.c — typed events, admin results as typed records, and their
 * msgpack encoding. See event.h. */
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
    bytebuf_free(&l->arena);
    free(l->f);
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
    return bytes ? bytebuf_reserve(&l->arena, bytes) : 0;   /* an empty arena stays unallocated */
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
    if (n && bytebuf_reserve(&l->arena, n)) return NULL;
    event *e = &l->v[l->n++];
    memset(e, 0, sizeof *e);
    e->kind = kind;
    e->id = id;
    e->off = l->arena.n;
    e->len = n;
    if (n) bytebuf_put(&l->arena, bytes, n);   /* cannot fail: reserved */
    return e;
}

int evlist_token(evlist *l, uint64_t id, const uint8_t *bytes, size_t n)
{
    return push(l, EV_TOKEN, id, bytes, n) ? 0 : -ENOMEM;
}

int evlist_token_lp(evlist *l, uint64_t id, const uint8_t *bytes, size_t n, float lp, const ev_top *top,
                    uint32_t ntop)
{
    if (ntop > EV_TOP_MAX) ntop = EV_TOP_MAX;
    size_t extra = 0;
    for (uint32_t i = 0; i < ntop; i++) extra += sizeof(float) + 2 + (top[i].len > 65535 ? 65535 : top[i].len);
    if (evlist_reserve(l, 1, n + extra)) return -ENOMEM;
    event *e = push(l, EV_TOKEN, id, bytes, n);   /* cannot fail: reserved */
    e->has_lp = 1;
    e->lp = lp;
    e->ntop = ntop;
    e->lp_off = l->arena.n;
    e->lp_len = extra;
    for (uint32_t i = 0; i < ntop; i++) {   /* none fails: reserved */
        uint16_t k = (uint16_t)(top[i].len > 65535 ? 65535 : top[i].len);
        bytebuf_put(&l->arena, &top[i].lp, sizeof(float));
        bytebuf_put(&l->arena, &k, 2);
        bytebuf_put(&l->arena, top[i].bytes, k);
    }
    return 0;
}

ev_top event_top(const evlist *l, const event *e, uint32_t i)
{
    ev_top t = { 0, NULL, 0 };
    const uint8_t *r = (const uint8_t *)l->arena.p + e->lp_off, *end = r + e->lp_len;
    for (uint32_t k = 0; k <= i && k < e->ntop && r + sizeof(float) + 2 <= end; k++) {
        uint16_t len;
        memcpy(&t.lp, r, sizeof(float));
        memcpy(&len, r + sizeof(float), 2);
        t.bytes = r + sizeof(float) + 2;
        t.len = len;
        r += sizeof(float) + 2 + len;
    }
    return t;
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

/* ---- results ------------------------------------------------------------- */

static int grow_fields(evlist *l, size_t more)
{
    if (l->nf + more <= l->fcap) return 0;
    size_t nc = l->fcap ? l->fcap : 32;
    while (nc < l->nf + more) nc *= 2;
    ev_field *nf = realloc(l->f, nc * sizeof *nf);
    if (!nf) return -ENOMEM;
    l->f = nf;
    l->fcap = nc;
    return 0;
}

static int grow_arena(evlist *l, size_t bytes)
{
    return bytes ? bytebuf_reserve(&l->arena, bytes) : 0;
}

int evlist_reserve_result(evlist *l, size_t fields, size_t bytes)
{
    int rc = evlist_reserve(l, 1, bytes);
    return rc ? rc : grow_fields(l, fields + 1);
}

/* A new field in the innermost open container (NULL: the sticky failure
 * is set, or was). */
static ev_field *add(evlist *l, const char *key, ev_vtype type)
{
    if (!l->depth || l->rfail) return NULL;
    if (grow_fields(l, 1) != 0) { l->rfail = -ENOMEM; return NULL; }
    ev_field *f = &l->f[l->nf];
    memset(f, 0, sizeof *f);
    f->key = key;
    f->type = type;
    l->f[l->open[l->depth - 1]].n++;
    l->nf++;
    return f;
}

/* What a put returns: 0, the sticky failure, or -EINVAL outside a result. */
static int put_rc(const evlist *l)
{
    return !l->depth ? -EINVAL : l->rfail;
}

int evlist_result_begin(evlist *l, uint64_t id)
{
    if (l->depth) return -EINVAL;
    l->mark_n = l->n;
    l->mark_nf = l->nf;
    l->mark_arena = l->arena.n;
    l->rfail = 0;
    l->depth = 1;
    l->open[0] = l->nf;
    event *e = push(l, EV_RESULT, id, NULL, 0);
    if (!e || grow_fields(l, 1) != 0) { l->rfail = -ENOMEM; return l->rfail; }
    e->rec = l->nf;
    memset(&l->f[l->nf], 0, sizeof l->f[l->nf]);
    l->f[l->nf].type = EVV_RECORD;
    l->nf++;
    return 0;
}

int evlist_put_nil(evlist *l, const char *key)
{
    add(l, key, EVV_NIL);
    return put_rc(l);
}

int evlist_put_bool(evlist *l, const char *key, int v)
{
    ev_field *f = add(l, key, EVV_BOOL);
    if (f) f->v.b = v != 0;
    return put_rc(l);
}

int evlist_put_u64(evlist *l, const char *key, uint64_t v)
{
    ev_field *f = add(l, key, EVV_U64);
    if (f) f->v.u = v;
    return put_rc(l);
}

int evlist_put_i64(evlist *l, const char *key, int64_t v)
{
    ev_field *f = add(l, key, EVV_I64);
    if (f) f->v.i = v;
    return put_rc(l);
}

int evlist_put_f64(evlist *l, const char *key, double v)
{
    ev_field *f = add(l, key, EVV_F64);
    if (f) f->v.f = v;
    return put_rc(l);
}

static int put_span(evlist *l, const char *key, ev_vtype type, const void *p, size_t n)
{
    if (!l->depth || l->rfail) return put_rc(l);
    if (grow_arena(l, n) != 0) { l->rfail = -ENOMEM; return l->rfail; }
    ev_field *f = add(l, key, type);
    if (!f) return put_rc(l);
    f->v.s.off = l->arena.n;
    f->v.s.len = n;
    if (n) bytebuf_put(&l->arena, p, n);   /* cannot fail: grown above */
    return 0;
}

int evlist_put_str(evlist *l, const char *key, const char *s)
{
    return put_span(l, key, EVV_STR, s, s ? strlen(s) : 0);
}

int evlist_put_bytes(evlist *l, const char *key, const void *p, size_t n)
{
    return put_span(l, key, EVV_BYTES, p, n);
}

static int open_container(evlist *l, const char *key, ev_vtype type)
{
    if (!l->depth || l->rfail) return put_rc(l);
    if (l->depth == EV_RESULT_DEPTH) { l->rfail = -EOVERFLOW; return l->rfail; }
    size_t at = l->nf;
    if (!add(l, key, type)) return put_rc(l);
    l->open[l->depth++] = at;
    return 0;
}

int evlist_open_record(evlist *l, const char *key)
{
    return open_container(l, key, EVV_RECORD);
}

int evlist_open_array(evlist *l, const char *key)
{
    return open_container(l, key, EVV_ARRAY);
}

int evlist_close(evlist *l)
{
    if (!l->depth || l->rfail) return put_rc(l);
    if (l->depth == 1) { l->rfail = -EINVAL; return l->rfail; }   /* the root: evlist_result_end */
    l->f[l->open[--l->depth]].end = l->nf;
    return 0;
}

int evlist_result_end(evlist *l)
{
    if (!l->depth) return -EINVAL;
    int rc = l->rfail;
    if (rc) {   /* as if it had never begun */
        l->n = l->mark_n;
        l->nf = l->mark_nf;
        l->arena.n = l->mark_arena;
        if (l->arena.p) l->arena.p[l->arena.n] = 0;
    } else {
        while (l->depth > 0) l->f[l->open[--l->depth]].end = l->nf;
        event *e = &l->v[l->mark_n];
        e->len = l->arena.n - e->off;   /* its strings, for event_msgpack_bound */
    }
    l->depth = 0;
    l->rfail = 0;
    return rc;
}

const ev_field *event_result_field(const evlist *l, const event *e, const char *key)
{
    if (e->kind != EV_RESULT) return NULL;
    const ev_field *root = &l->f[e->rec];
    for (size_t i = e->rec + 1; i < root->end; ) {
        const ev_field *f = &l->f[i];
        if (f->key && !strcmp(f->key, key)) return f;
        i = f->type == EVV_ARRAY || f->type == EVV_RECORD ? f->end : i + 1;
    }
    return NULL;
}

/* ---- msgpack ----------------------------------------------------------------- */

/* A result's fields in prefix order are exactly msgpack's order: a map or
 * array header with its count, then its contents. */
static void pack_result(msgpack_sbuffer *sb, const evlist *l, const event *e)
{
    const ev_field *root = &l->f[e->rec];
    msgpack_packer pk;
    proto_result_begin(&pk, sb, e->id, (int)root->n);
    for (size_t i = e->rec + 1; i < root->end; i++) {
        const ev_field *f = &l->f[i];
        if (f->key) proto_pack_key(&pk, f->key);
        switch (f->type) {
        case EVV_NIL:    msgpack_pack_nil(&pk); break;
        case EVV_BOOL:   if (f->v.b) msgpack_pack_true(&pk); else msgpack_pack_false(&pk); break;
        case EVV_U64:    msgpack_pack_uint64(&pk, f->v.u); break;
        case EVV_I64:    msgpack_pack_int64(&pk, f->v.i); break;
        case EVV_F64:    msgpack_pack_double(&pk, f->v.f); break;
        case EVV_STR:
            msgpack_pack_str(&pk, f->v.s.len);
            msgpack_pack_str_body(&pk, ev_field_bytes(l, f), f->v.s.len);
            break;
        case EVV_BYTES:  proto_pack_bin(&pk, ev_field_bytes(l, f), f->v.s.len); break;
        case EVV_ARRAY:  msgpack_pack_array(&pk, f->n); break;
        case EVV_RECORD: msgpack_pack_map(&pk, f->n); break;
        }
    }
}

size_t event_msgpack_bound(const evlist *l, const event *e)
{
    if (e->kind != EV_RESULT) return e->len + 512;   /* fixed fields take well under 512 bytes */
    size_t n = 64;   /* map header, id, event: result */
    const ev_field *root = &l->f[e->rec];
    for (size_t i = e->rec + 1; i < root->end; i++) {
        const ev_field *f = &l->f[i];
        if (f->key) n += strlen(f->key) + 5;
        n += 9;   /* a scalar, or a container's header */
        if (f->type == EVV_STR || f->type == EVV_BYTES) n += f->v.s.len;
    }
    return n;
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
        proto_result_begin(&pk, sb, e->id, 4 + (e->done.replayed ? 1 : 0));
        proto_pack_key(&pk, "session_tokens");
        msgpack_pack_uint64(&pk, e->done.session_tokens);
        proto_pack_key(&pk, "tokens_in");
        msgpack_pack_uint64(&pk, e->done.tokens_in);
        proto_pack_key(&pk, "fed_bytes");
        msgpack_pack_uint64(&pk, e->done.fed_bytes);
        proto_pack_key(&pk, "cancelled");
        if (e->cancelled) msgpack_pack_true(&pk); else msgpack_pack_false(&pk);
        if (e->done.replayed) {
            proto_pack_key(&pk, "replayed");
            msgpack_pack_true(&pk);
        }
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
    case EV_RESULT:
        pack_result(sb, l, e);
        break;
    }
}
