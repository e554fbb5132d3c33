/* daemon/conn.c — see conn.h. */
#include "daemon/conn.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include "daemon/commands.h"
#include "daemon/msg.h"

#define CONN_IDX_BITS 24
#define READ_CHUNK    (64 * 1024)

int conn_table_init(conn_table *t)
{
    t->cap = 64;
    t->count = 0;
    t->seq = 0;
    t->v = calloc(t->cap, sizeof *t->v);
    if (!t->v) t->cap = 0;
    return t->v ? 0 : -ENOMEM;
}

void conn_table_free(conn_table *t)
{
    free(t->v);
    t->v = NULL;
}

conn *conn_lookup(conn_table *t, uint64_t id)
{
    uint32_t idx = (uint32_t)(id & ((1u << CONN_IDX_BITS) - 1));
    if (idx >= t->cap || !t->v[idx] || t->v[idx]->id != id) return NULL;
    return t->v[idx];
}

static int table_add(conn_table *t, conn *c)
{
    uint32_t idx = 0;
    while (idx < t->cap && t->v[idx]) idx++;
    if (idx == t->cap) {
        if (t->cap >= (1u << CONN_IDX_BITS)) return -EMFILE;
        conn **nv = realloc(t->v, 2 * t->cap * sizeof *nv);
        if (!nv) return -ENOMEM;
        memset(nv + t->cap, 0, t->cap * sizeof *nv);
        t->v = nv;
        t->cap *= 2;
    }
    t->v[idx] = c;
    t->count++;
    c->id = (++t->seq << CONN_IDX_BITS) | idx;
    return 0;
}

static void table_del(conn_table *t, conn *c)
{
    uint32_t idx = (uint32_t)(c->id & ((1u << CONN_IDX_BITS) - 1));
    if (idx < t->cap && t->v[idx] == c) { t->v[idx] = NULL; t->count--; }
}

size_t conn_unsent(const conn *c) { return c->pend.size + c->wbuf.size; }

static void post_sched(conn *c, dmsg_kind kind)
{
    dmsg *m = dmsg_new(kind, c->id);
    if (m) queue_push(&c->srv->schedq, &m->node);
}

static void on_close(uv_handle_t *h)
{
    conn *c = (conn *)h;
    msgpack_sbuffer_destroy(&c->pend);
    msgpack_sbuffer_destroy(&c->wbuf);
    free(c->in);
    free(c->ids);
    free(c);
}

/* ---- ids of requests in flight (ids are never 0: the decoder refuses it) -- */

static uint32_t id_slot(const conn *c, uint64_t id)
{
    uint64_t h = id * 0x9E3779B97F4A7C15ull;
    return (uint32_t)(h >> 32) & (c->ids_cap - 1);
}

static int ids_has(const conn *c, uint64_t id)
{
    if (!c->ids_n) return 0;
    for (uint32_t i = id_slot(c, id);; i = (i + 1) & (c->ids_cap - 1)) {
        if (c->ids[i] == id) return 1;
        if (!c->ids[i]) return 0;
    }
}

static int ids_add(conn *c, uint64_t id)
{
    if (2 * (c->ids_n + 1) > c->ids_cap) {
        uint32_t ncap = c->ids_cap ? 2 * c->ids_cap : 16;
        uint64_t *nv = calloc(ncap, sizeof *nv), *old = c->ids;
        if (!nv) return -ENOMEM;
        uint32_t ocap = c->ids_cap;
        c->ids = nv;
        c->ids_cap = ncap;
        c->ids_n = 0;
        for (uint32_t i = 0; i < ocap; i++)
            if (old[i]) ids_add(c, old[i]);
        free(old);
    }
    uint32_t i = id_slot(c, id);
    while (c->ids[i] && c->ids[i] != id) i = (i + 1) & (c->ids_cap - 1);
    if (!c->ids[i]) { c->ids[i] = id; c->ids_n++; }
    return 0;
}

static void ids_del(conn *c, uint64_t id)
{
    if (!c->ids_n) return;
    uint32_t m = c->ids_cap - 1, i = id_slot(c, id);
    while (c->ids[i] != id) {
        if (!c->ids[i]) return;
        i = (i + 1) & m;
    }
    /* Backward-shift deletion keeps every probe chain unbroken. */
    for (uint32_t j = (i + 1) & m; c->ids[j]; j = (j + 1) & m) {
        uint32_t home = id_slot(c, c->ids[j]);
        if (((j - home) & m) >= ((j - i) & m)) { c->ids[i] = c->ids[j]; i = j; }
    }
    c->ids[i] = 0;
    c->ids_n--;
}

/* The final events (result, done, error) in a batch of events from another
 * thread end their requests: forget those ids. */
static void ids_forget_finals(conn *c, const char *data, size_t len)
{
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    while (c->ids_n && msgpack_unpack_next(&u, data, len, &off) == MSGPACK_UNPACK_SUCCESS) {
        const msgpack_object *o = &u.data;
        if (o->type != MSGPACK_OBJECT_MAP) continue;
        uint64_t id = 0;
        int final = 0;
        for (uint32_t i = 0; i < o->via.map.size; i++) {
            const msgpack_object *k = &o->via.map.ptr[i].key, *v = &o->via.map.ptr[i].val;
            if (k->type != MSGPACK_OBJECT_STR) continue;
            if (k->via.str.size == 2 && !memcmp(k->via.str.ptr, "id", 2) &&
                v->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
                id = v->via.u64;
            else if (k->via.str.size == 5 && !memcmp(k->via.str.ptr, "event", 5) &&
                     v->type == MSGPACK_OBJECT_STR)
                final = !(v->via.str.size == 5 && !memcmp(v->via.str.ptr, "token", 5));
        }
        if (final && id) ids_del(c, id);
    }
    msgpack_unpacked_destroy(&u);
}

void conn_close(conn *c)
{
    if (c->closed) return;
    c->closed = 1;
    uv_read_stop((uv_stream_t *)&c->pipe);
    post_sched(c, M_CONN_CLOSED);
    stats_connections(&c->srv->st, -1);
    table_del(c->srv->conns, c);
    uv_close((uv_handle_t *)&c->pipe, on_close);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);

/* Over --max-output unsent: pause the connection's turns, and stop reading
 * its requests too (their answers would pile up just the same); both
 * resume once the client has taken all but a quarter of it. */
static void check_pressure(conn *c)
{
    size_t hi = c->srv->opt.max_output, unsent = conn_unsent(c);
    if (!c->paused && unsent > hi) {
        c->paused = 1;
        post_sched(c, M_PAUSE);
        if (!c->closing) uv_read_stop((uv_stream_t *)&c->pipe);
    } else if (c->paused && unsent <= hi / 4) {
        c->paused = 0;
        post_sched(c, M_RESUME);
        if (!c->closing && uv_read_start((uv_stream_t *)&c->pipe, on_alloc, on_read) < 0)
            conn_close(c);
    }
}

static void flush(conn *c);

static void on_write(uv_write_t *req, int status)
{
    conn *c = req->data;
    c->writing = 0;
    c->wbuf.size = 0;
    if (c->closed) return;
    if (status < 0) { conn_close(c); return; }
    flush(c);
    check_pressure(c);
}

static void on_shutdown(uv_shutdown_t *req, int status)
{
    conn *c = req->data;
    if (status < 0 && !c->closed) conn_close(c);
}

static void flush(conn *c)
{
    if (c->closed || c->writing) return;
    if (c->pend.size == 0) {
        if (c->closing == CONN_FLUSH_CLOSE) conn_close(c);
        else if (c->closing == CONN_LINGER && !c->shut) {
            c->shut = 1;
            c->sreq.data = c;
            if (uv_shutdown(&c->sreq, (uv_stream_t *)&c->pipe, on_shutdown) < 0) conn_close(c);
        }
        return;
    }
    msgpack_sbuffer tmp = c->wbuf;
    c->wbuf = c->pend;
    c->pend = tmp;
    c->pend.size = 0;
    uv_buf_t b = uv_buf_init(c->wbuf.data, (unsigned)c->wbuf.size);
    c->wreq.data = c;
    c->writing = 1;
    int rc = uv_write(&c->wreq, (uv_stream_t *)&c->pipe, &b, 1, on_write);
    if (rc < 0) { c->writing = 0; c->wbuf.size = 0; conn_close(c); }
}

void conn_send(conn *c, const char *data, size_t len)
{
    if (c->closed || len == 0) return;
    if (msgpack_sbuffer_write(&c->pend, data, len) != 0) { conn_close(c); return; }
    flush(c);
    check_pressure(c);
}

void conn_deliver(server *srv, outmsg *o)
{
    conn *c = conn_lookup(srv->conns, o->conn);
    if (c && !c->closed) {
        c->inflight -= o->finals;
        if (o->finals > 0) ids_forget_finals(c, o->sb.data, o->sb.size);
        conn_send(c, o->sb.data, o->sb.size);
    }
    outmsg_free(o);
}

void conn_close_after_flush(conn *c, int how)
{
    if (c->closed || c->closing) return;
    c->closing = how;
    c->in_len = 0;
    if (how == CONN_FLUSH_CLOSE) uv_read_stop((uv_stream_t *)&c->pipe);
    flush(c);
}

static void send_error(conn *c, uint64_t id, proto_code code, const char *msg)
{
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    proto_pack_error(&sb, id, code, msg);
    conn_send(c, sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
}

/* Decode and dispatch every complete message in the input buffer. */
static void consume(conn *c)
{
    size_t off = 0;
    const proto_limits *lim = &c->srv->limits;
    while (!c->closing && !c->closed && off < c->in_len) {
        long n = proto_scan(c->in + off, c->in_len - off, lim->max_message);
        if (n == 0) break;
        if (n < 0) {
            char msg[160];
            if (n == -PE_TOO_LARGE)
                snprintf(msg, sizeof msg, "message is over the limit of %zu bytes; closing the "
                         "connection", lim->max_message);
            else
                snprintf(msg, sizeof msg, "bytes at offset %zu of the stream are not msgpack; "
                         "closing the connection", off);
            send_error(c, 0, (proto_code)-n, msg);
            conn_close_after_flush(c, CONN_LINGER);
            break;
        }
        proto_request req;
        proto_error err;
        uint64_t t = now_ns();
        proto_code code = proto_parse(c->in + off, (size_t)n, lim, &req, &err);
        off += (size_t)n;
        if (code != PE_OK) {
            send_error(c, err.id, code, err.msg);
            if (code == PE_DECODE || code == PE_TOO_LARGE) conn_close_after_flush(c, CONN_LINGER);
            continue;
        }
        if (ids_has(c, req.id)) {
            char msg[200];
            snprintf(msg, sizeof msg, "request id %llu is already in flight on this connection;"
                     " ids must be unique among a connection's requests in flight",
                     (unsigned long long)req.id);
            send_error(c, 0, PE_BAD_REQUEST, msg);
            proto_request_free(&req);
            continue;
        }
        uint64_t id = req.id;
        int before = c->inflight;
        commands_dispatch(c->srv, c, &req, t);
        if (c->inflight > before && ids_add(c, id) < 0) {
            /* Out of memory for the set: the request runs, only the
             * duplicate check misses it. */
        }
    }
    if (c->closing) return;   /* the buffer was dropped */
    if (off) {
        memmove(c->in, c->in + off, c->in_len - off);
        c->in_len -= off;
    }
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    conn *c = (conn *)h;
    (void)suggested;
    if (c->in_cap - c->in_len < READ_CHUNK) {
        size_t nc = c->in_len + READ_CHUNK;
        uint8_t *ni = realloc(c->in, nc);
        if (!ni) { *buf = uv_buf_init(NULL, 0); return; }
        c->in = ni;
        c->in_cap = nc;
    }
    *buf = uv_buf_init((char *)c->in + c->in_len, (unsigned)(c->in_cap - c->in_len));
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    conn *c = (conn *)s;
    (void)buf;
    if (nread < 0) { conn_close(c); return; }   /* EOF or error: cancel its turns */
    if (nread == 0) return;
    if (c->closing) {
        /* Lingering after an error: discard, up to a bound. */
        c->discarded += (size_t)nread;
        if (c->discarded > 4 * c->srv->opt.max_message + (1u << 20)) conn_close(c);
        return;
    }
    c->in_len += (size_t)nread;
    consume(c);
    /* Don't keep a large buffer around for a connection that is quiet. */
    if (c->in_len == 0 && c->in_cap > 4 * READ_CHUNK) {
        free(c->in);
        c->in = NULL;
        c->in_cap = 0;
    }
}

/* At most one log line a second for refusals, with the count since the last. */
void conn_log_refusal(const char *why)
{
    static time_t last;
    static long unlogged;
    time_t now = time(NULL);
    if (now == last) { unlogged++; return; }
    last = now;
    if (unlogged)
        fprintf(stderr, "lind serve: %s (and %ld more refused in the last second)\n", why, unlogged);
    else
        fprintf(stderr, "lind serve: %s\n", why);
    unlogged = 0;
}

void conn_refuse_fd_limit(conn *c, long long limit)
{
    char msg[240];
    snprintf(msg, sizeof msg, "the server is at its limit of %lld open files (%d kept for its"
             " store) with %u connections; try again later", limit, CONN_FD_RESERVE,
             c->srv->conns->count - 1);
    send_error(c, 0, PE_LIMIT, msg);
    conn_log_refusal(msg);
    conn_close_after_flush(c, CONN_FLUSH_CLOSE);
}

int conn_accept(server *srv)
{
    conn *c = calloc(1, sizeof *c);
    if (!c) return -ENOMEM;
    c->srv = srv;
    msgpack_sbuffer_init(&c->pend);
    msgpack_sbuffer_init(&c->wbuf);
    int rc = uv_pipe_init(srv->loop, &c->pipe, 0);
    if (rc < 0) { free(c); return rc; }
    if ((rc = uv_accept((uv_stream_t *)&srv->listener, (uv_stream_t *)&c->pipe)) < 0 ||
        (rc = table_add(srv->conns, c)) < 0) {
        c->closed = 1;
        uv_close((uv_handle_t *)&c->pipe, on_close);
        return rc;
    }
    stats_connections(&srv->st, +1);
    uv_os_fd_t fd = -1;
    struct rlimit rl;
    if (uv_fileno((uv_handle_t *)&c->pipe, &fd) == 0 && getrlimit(RLIMIT_NOFILE, &rl) == 0 &&
        rl.rlim_cur != RLIM_INFINITY && (rlim_t)fd + CONN_FD_RESERVE >= rl.rlim_cur) {
        conn_refuse_fd_limit(c, (long long)rl.rlim_cur);
        return 0;
    }
    if ((rc = uv_read_start((uv_stream_t *)&c->pipe, on_alloc, on_read)) < 0) conn_close(c);
    return rc;
}
