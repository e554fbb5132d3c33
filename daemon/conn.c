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
#include "kernels/clock.h"

#define CONN_IDX_BITS 24
#define READ_CHUNK    (64 * 1024)
#define READ_FIRST    (16 * 1024)   /* a connection's first buffer: most requests are small */

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
    free(c->idb);
    free(c);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);
static void consume(conn *c);

/* Read while nothing holds the connection back: pausing for output, the
 * byte budget, or closing (a lingering connection reads to discard). */
static void update_reading(conn *c)
{
    if (c->closed) return;
    int want = c->closing == CONN_LINGER ||
               (!c->closing && !c->paused && !c->held && !c->starved);
    if (want == c->reading) return;
    c->reading = want;
    if (!want) uv_read_stop(&c->h.stream);
    else if (uv_read_start(&c->h.stream, on_alloc, on_read) < 0) conn_close(c);
}

static void set_waiting(conn *c, int held, int starved)
{
    server *srv = c->srv;
    int was = c->held || c->starved;
    c->held = held;
    c->starved = starved;
    int now = c->held || c->starved;
    if (was != now) { if (now) srv->starved++; else srv->starved--; }
    update_reading(c);
}

/* Memory was freed: let the connections waiting for the budget try again
 * (they wait again if it is still short). */
static void wake_starved(server *srv)
{
    if (!srv->starved) return;
    conn_table *t = srv->conns;
    for (uint32_t i = 0; i < t->cap && srv->starved; i++) {
        conn *c = t->v[i];
        if (!c || c->closed || !(c->held || c->starved)) continue;
        int held = c->held;
        set_waiting(c, 0, 0);
        if (held) consume(c);
    }
}

static void mem_add(conn *c, size_t in_bytes, size_t req_bytes)
{
    c->srv->mem_bytes += in_bytes + req_bytes;
    c->srv->inflight_bytes += req_bytes;
    c->inflight_bytes += req_bytes;
}

static void mem_sub(conn *c, size_t in_bytes, size_t req_bytes)
{
    c->srv->mem_bytes -= in_bytes + req_bytes;
    c->srv->inflight_bytes -= req_bytes;
    c->inflight_bytes -= req_bytes;
}

void conn_budget_add(server *srv, size_t bytes, size_t inflight)
{
    srv->mem_bytes += bytes;
    srv->inflight_bytes += inflight;
}

void conn_budget_sub(server *srv, size_t bytes, size_t inflight)
{
    srv->mem_bytes -= bytes;
    srv->inflight_bytes -= inflight;
    wake_starved(srv);
}

int conn_budget_over(const server *srv) { return srv->mem_bytes > srv->opt.max_total_bytes; }

/* May this connection grow its input buffer by `grow` bytes? */
static int mem_allow_read(conn *c, size_t grow)
{
    server *srv = c->srv;
    if (srv->mem_bytes + grow <= srv->opt.max_total_bytes) return 1;
    if (c->in_cap + grow + c->inflight_bytes <= CONN_SMALL_BYTES) return 1;
    if (srv->overdraft == c->id) return 1;
    /* One connection at a time may finish a message it started, while the
     * bytes in flight (which end by themselves) are under the budget. */
    if (!srv->overdraft && c->in_len > 0 && srv->inflight_bytes < srv->opt.max_total_bytes) {
        srv->overdraft = c->id;
        return 1;
    }
    return 0;
}

/* May a complete message of n bytes go on to the other threads now? */
static int mem_allow_dispatch(conn *c, size_t n)
{
    server *srv = c->srv;
    if (c->inflight_bytes && c->inflight_bytes + n > srv->opt.max_conn_bytes) return 0;
    if (n <= CONN_SMALL_BYTES && c->inflight_bytes <= CONN_SMALL_BYTES) return 1;
    return !srv->inflight_bytes || srv->inflight_bytes + n <= srv->opt.max_total_bytes;
}

static void release_overdraft(conn *c)
{
    if (c->srv->overdraft != c->id) return;
    c->srv->overdraft = 0;
    wake_starved(c->srv);
}

/* Free an input buffer that is empty and big, or any at close. */
static void shrink_in(conn *c, int always)
{
    if (c->in_len || (!always && c->in_cap <= 4 * READ_CHUNK)) return;
    mem_sub(c, c->in_cap, 0);
    free(c->in);
    c->in = NULL;
    c->in_cap = 0;
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

static int ids_add(conn *c, uint64_t id, uint64_t bytes)
{
    if (2 * (c->ids_n + 1) > c->ids_cap) {
        uint32_t ncap = c->ids_cap ? 2 * c->ids_cap : 16;
        uint64_t *nv = calloc(ncap, sizeof *nv), *nb = calloc(ncap, sizeof *nb);
        uint64_t *old = c->ids, *oldb = c->idb;
        if (!nv || !nb) { free(nv); free(nb); return -ENOMEM; }
        uint32_t ocap = c->ids_cap;
        c->ids = nv;
        c->idb = nb;
        c->ids_cap = ncap;
        c->ids_n = 0;
        for (uint32_t i = 0; i < ocap; i++)
            if (old[i]) ids_add(c, old[i], oldb[i]);
        free(old);
        free(oldb);
    }
    uint32_t i = id_slot(c, id);
    while (c->ids[i] && c->ids[i] != id) i = (i + 1) & (c->ids_cap - 1);
    if (!c->ids[i]) { c->ids[i] = id; c->idb[i] = bytes; c->ids_n++; }
    return 0;
}

/* Forget id; the bytes it held (0 if unknown). */
static uint64_t ids_del(conn *c, uint64_t id)
{
    if (!c->ids_n) return 0;
    uint32_t m = c->ids_cap - 1, i = id_slot(c, id);
    while (c->ids[i] != id) {
        if (!c->ids[i]) return 0;
        i = (i + 1) & m;
    }
    uint64_t bytes = c->idb[i];
    /* Backward-shift deletion keeps every probe chain unbroken. */
    for (uint32_t j = (i + 1) & m; c->ids[j]; j = (j + 1) & m) {
        uint32_t home = id_slot(c, c->ids[j]);
        if (((j - home) & m) >= ((j - i) & m)) { c->ids[i] = c->ids[j]; c->idb[i] = c->idb[j]; i = j; }
    }
    c->ids[i] = 0;
    c->ids_n--;
    return bytes;
}

void conn_close(conn *c)
{
    if (c->closed) return;
    c->closed = 1;
    if (c->held || c->starved) c->srv->starved--;
    c->held = c->starved = 0;
    uv_read_stop(&c->h.stream);
    mem_sub(c, c->in_cap, c->inflight_bytes);   /* the buffers go with on_close */
    if (c->srv->overdraft == c->id) c->srv->overdraft = 0;
    wake_starved(c->srv);
    post_sched(c, M_CONN_CLOSED);
    stats_connections(&c->srv->st, -1);
    table_del(c->srv->conns, c);
    uv_close((uv_handle_t *)&c->h.stream, on_close);
}

/* Over --max-output unsent: pause the connection's turns, and stop reading
 * its requests too (their answers would pile up just the same); both
 * resume once the client has taken all but a quarter of it. */
static void check_pressure(conn *c)
{
    size_t hi = c->srv->opt.max_output, unsent = conn_unsent(c);
    if (!c->paused && unsent > hi) {
        c->paused = 1;
        c->paused_ms = uv_now(c->srv->loop);
        post_sched(c, M_PAUSE);
        update_reading(c);
    } else if (c->paused && unsent <= hi / 4) {
        c->paused = 0;
        c->pause_cancelled = 0;
        post_sched(c, M_RESUME);
        update_reading(c);
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
    c->last_out_ms = uv_now(c->srv->loop);
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
            if (uv_shutdown(&c->sreq, &c->h.stream, on_shutdown) < 0) conn_close(c);
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
    int rc = uv_write(&c->wreq, &c->h.stream, &b, 1, on_write);
    if (rc < 0) { c->writing = 0; c->wbuf.size = 0; conn_close(c); }
}

void conn_out_of_memory(conn *c, size_t len)
{
    char msg[160];
    snprintf(msg, sizeof msg, "out of memory queuing %zu bytes of answers for a client; closing its"
             " connection (its turns are cancelled)", len);
    conn_log_refusal(msg);
    conn_close(c);
}

void conn_send(conn *c, const char *data, size_t len)
{
    if (c->closed || len == 0) return;
    if (!conn_unsent(c)) c->last_out_ms = uv_now(c->srv->loop);   /* the write clock starts */
    if (msgpack_sbuffer_write(&c->pend, data, len) != 0) { conn_out_of_memory(c, len); return; }
    flush(c);
    check_pressure(c);
}

void conn_deliver(server *srv, outmsg *o)
{
    conn *c = conn_lookup(srv->conns, o->conn);
    if (c && !c->closed) {
        c->inflight -= o->finals;
        size_t before = srv->inflight_bytes;
        if (o->finals > 0) {
            for (size_t i = 0; i < o->ev.n; i++)
                if (event_is_final(&o->ev.v[i]) && c->ids_n)
                    mem_sub(c, 0, (size_t)ids_del(c, o->ev.v[i].id));
            c->last_in_ms = uv_now(srv->loop);
        }
        if (o->ev.n) {
            /* The typed events in this protocol's encoding. */
            msgpack_sbuffer enc;
            msgpack_sbuffer_init(&enc);
            /* Room for all of it first: an event must never reach the
             * client cut. */
            size_t need = 0;
            for (size_t i = 0; i < o->ev.n; i++) need += event_msgpack_bound(&o->ev, &o->ev.v[i]);
            if (proto_reserve(&enc, need) != 0) {
                conn_out_of_memory(c, need);
            } else {
                for (size_t i = 0; i < o->ev.n; i++) event_pack_msgpack(&enc, &o->ev, &o->ev.v[i]);
                conn_send(c, enc.data, enc.size);
            }
            msgpack_sbuffer_destroy(&enc);
        }
        if (!c->closed && c->held && !c->starved) { set_waiting(c, 0, 0); consume(c); }
        if (srv->inflight_bytes < before) wake_starved(srv);
    }
    outmsg_free(o);
}

void conn_close_after_flush(conn *c, int how)
{
    if (c->closed || c->closing) return;
    c->closing = how;
    c->in_len = 0;
    set_waiting(c, 0, 0);   /* reads to discard (linger) or not at all */
    release_overdraft(c);
    if (!c->closed) flush(c);
}

void conn_send_error(conn *c, uint64_t id, proto_code code, const char *msg)
{
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    if (proto_reserve(&sb, strlen(msg) + 64) != 0) { conn_out_of_memory(c, strlen(msg) + 64); return; }
    proto_pack_error(&sb, id, code, msg);
    conn_send(c, sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
}

/* A gated (TCP) connection's message: a hello carrying the token opens the
 * gate and goes on to be answered (0); anything else is refused with
 * `unauthorized` and the connection closed once that is written (1). */
static int gate(conn *c, const op_request *req)
{
    const char *tok = c->srv->tcp_token;
    size_t tl = strlen(tok);
    if (req->op == OP_HELLO && req->token_len == tl) {
        unsigned diff = 0;   /* compare in constant time */
        for (size_t k = 0; k < tl; k++) diff |= (unsigned char)req->token[k] ^ (unsigned char)tok[k];
        if (!diff) { c->gated = 0; return 0; }
    }
    const char *msg = req->op != OP_HELLO
        ? "this TCP connection must begin with a hello carrying the server's token (field 'token'); closing it"
        : req->token_len ? "hello's token does not match the server's token; closing the connection"
                         : "hello over TCP must carry the server's token (field 'token'); closing the connection";
    conn_send_error(c, req->id, PE_UNAUTHORIZED, msg);
    conn_log_refusal("refused a TCP connection: no hello with the right token");
    conn_close_after_flush(c, CONN_LINGER);
    return 1;
}

/* Decode and dispatch every complete message in the input buffer. */
static void consume(conn *c)
{
    size_t off = 0;
    const proto_limits *lim = &c->srv->limits;
    while (!c->closing && !c->closed && off < c->in_len) {
        long n = proto_scan(c->in + off, c->in_len - off, lim->max_message);
        if (n == 0) break;
        if (n > 0 && !mem_allow_dispatch(c, (size_t)n)) {
            set_waiting(c, 1, 0);   /* the message stays buffered until bytes free up */
            break;
        }
        if (n < 0) {
            char msg[160];
            if (n == -PE_TOO_LARGE)
                snprintf(msg, sizeof msg, "message is over the limit of %zu bytes; closing the "
                         "connection", lim->max_message);
            else
                snprintf(msg, sizeof msg, "bytes at offset %zu of the stream are not msgpack; "
                         "closing the connection", off);
            conn_send_error(c, 0, (proto_code)-n, msg);
            conn_close_after_flush(c, CONN_LINGER);
            break;
        }
        op_request req;
        proto_error err;
        uint64_t t = clock_mono_ns();
        proto_code code = proto_parse(c->in + off, (size_t)n, lim, &req, &err);
        off += (size_t)n;
        if (code != PE_OK) {
            conn_send_error(c, err.id, code, err.msg);
            if (code == PE_DECODE || code == PE_TOO_LARGE || c->gated) conn_close_after_flush(c, CONN_LINGER);
            continue;
        }
        if (c->gated && gate(c, &req)) {
            op_request_free(&req);
            break;
        }
        if (ids_has(c, req.id)) {
            char msg[200];
            snprintf(msg, sizeof msg, "request id %llu is already in flight on this connection;"
                     " ids must be unique among a connection's requests in flight",
                     (unsigned long long)req.id);
            conn_send_error(c, 0, PE_BAD_REQUEST, msg);
            op_request_free(&req);
            continue;
        }
        uint64_t id = req.id;
        int before = c->inflight;
        commands_dispatch(c->srv, c, &req, t);
        c->last_in_ms = uv_now(c->srv->loop);
        if (c->inflight > before && ids_add(c, id, (uint64_t)n) == 0) mem_add(c, 0, (size_t)n);
        /* (Out of memory for the set: the request runs, only the duplicate
         * check and the byte count miss it.) */
    }
    if (c->closing || c->closed) return;   /* the buffer was dropped */
    if (off) {
        memmove(c->in, c->in + off, c->in_len - off);
        c->in_len -= off;
        if (c->in_len == 0) release_overdraft(c);   /* its message is through */
    }
    shrink_in(c, 0);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    conn *c = (conn *)h;
    (void)suggested;
    size_t chunk = c->in_len + READ_FIRST < READ_CHUNK ? READ_FIRST : READ_CHUNK;
    if (c->in_cap - c->in_len < chunk) {
        size_t nc = c->in_len + chunk;
        if (!mem_allow_read(c, nc - c->in_cap)) { *buf = uv_buf_init(NULL, 0); return; }   /* UV_ENOBUFS */
        uint8_t *ni = realloc(c->in, nc);
        if (!ni) { *buf = uv_buf_init(NULL, 0); return; }
        mem_add(c, nc - c->in_cap, 0);
        c->in = ni;
        c->in_cap = nc;
    }
    *buf = uv_buf_init((char *)c->in + c->in_len, (unsigned)(c->in_cap - c->in_len));
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    conn *c = (conn *)s;
    (void)buf;
    if (nread == UV_ENOBUFS) {   /* over the byte budget: wait, unread, until bytes free up */
        set_waiting(c, c->held, 1);
        return;
    }
    if (nread < 0) { conn_close(c); return; }   /* EOF or error: cancel its turns */
    if (nread == 0) return;
    if (c->closing) {
        /* Lingering after an error: discard, up to a bound. */
        c->discarded += (size_t)nread;
        if (c->discarded > 4 * c->srv->opt.max_message + (1u << 20)) conn_close(c);
        return;
    }
    c->in_len += (size_t)nread;
    consume(c);   /* also frees a large buffer once it is empty */
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
        lind_log(REQLOG_WARN, "conn", "%s (and %ld more refused in the last second)", why, unlogged);
    else
        lind_log(REQLOG_WARN, "conn", "%s", why);
    unlogged = 0;
}

void conn_refuse_fd_limit(conn *c, long long limit)
{
    char msg[240];
    snprintf(msg, sizeof msg, "the server is at its limit of %lld open files (%d kept for its"
             " store) with %u connections; try again later", limit, CONN_FD_RESERVE,
             c->srv->conns->count - 1);
    conn_send_error(c, 0, PE_LIMIT, msg);
    conn_log_refusal(msg);
    conn_close_after_flush(c, CONN_FLUSH_CLOSE);
}

int conn_accept(server *srv, uv_stream_t *listener, int tcp)
{
    conn *c = calloc(1, sizeof *c);
    if (!c) return -ENOMEM;
    c->srv = srv;
    msgpack_sbuffer_init(&c->pend);
    msgpack_sbuffer_init(&c->wbuf);
    int rc = tcp ? uv_tcp_init(srv->loop, &c->h.tcp) : uv_pipe_init(srv->loop, &c->h.pipe, 0);
    if (rc < 0) { free(c); return rc; }
    if ((rc = uv_accept(listener, &c->h.stream)) < 0 ||
        (rc = table_add(srv->conns, c)) < 0) {
        c->closed = 1;
        uv_close((uv_handle_t *)&c->h.stream, on_close);
        return rc;
    }
    stats_connections(&srv->st, +1);
    uv_os_fd_t fd = -1;
    struct rlimit rl;
    if (uv_fileno((uv_handle_t *)&c->h.stream, &fd) == 0 && getrlimit(RLIMIT_NOFILE, &rl) == 0 &&
        rl.rlim_cur != RLIM_INFINITY && (rlim_t)fd + CONN_FD_RESERVE >= rl.rlim_cur) {
        conn_refuse_fd_limit(c, (long long)rl.rlim_cur);
        return 0;
    }
    if (tcp) {
        uv_tcp_nodelay(&c->h.tcp, 1);   /* small events: do not wait to fill a segment */
        c->gated = srv->tcp_token[0] != 0;
    }
    c->last_in_ms = c->last_out_ms = uv_now(srv->loop);
    if ((rc = uv_read_start(&c->h.stream, on_alloc, on_read)) < 0) conn_close(c);
    else c->reading = 1;
    return rc;
}

void conn_tick(server *srv)
{
    const server_options *o = &srv->opt;
    uint64_t now = uv_now(srv->loop);
    /* A read buffer that could not be allocated (on_alloc) stops reading
     * like the byte budget does, but no freed bytes will wake it: retry
     * here (those still short of budget wait again). */
    wake_starved(srv);
    conn_table *t = srv->conns;
    for (uint32_t i = 0; i < t->cap; i++) {
        conn *c = t->v[i];
        if (!c || c->closed) continue;
        size_t unsent = conn_unsent(c);
        if (o->write_timeout && unsent && now - c->last_out_ms >= 1000ull * o->write_timeout) {
            char msg[200];
            snprintf(msg, sizeof msg, "closed a connection whose %zu bytes of output did not move for"
                     " %u s (--write-timeout); its turns are cancelled", unsent, o->write_timeout);
            conn_log_refusal(msg);
            conn_close(c);
            continue;
        }
        if (o->pause_timeout && c->paused && !c->pause_cancelled &&
            now - c->paused_ms >= 1000ull * o->pause_timeout) {
            c->pause_cancelled = 1;
            post_sched(c, M_CANCEL_CONN);
            char msg[200];
            snprintf(msg, sizeof msg, "cancelled the turns of a connection paused for %u s"
                     " (--pause-timeout): its client does not read", o->pause_timeout);
            conn_log_refusal(msg);
        }
        if (c->gated && !c->closing && now - c->last_in_ms >= CONN_HELLO_MS) {
            /* a TCP port is reachable by strangers: one that never says
             * hello must not hold a descriptor for ever */
            conn_send_error(c, 0, PE_UNAUTHORIZED, "no hello with the server's token within 10 s of"
                       " connecting; closing the connection");
            conn_close_after_flush(c, CONN_FLUSH_CLOSE);
            continue;
        }
        if (o->idle_timeout && !c->closing && !c->inflight && !unsent && !c->in_len &&
            now - c->last_in_ms >= 1000ull * o->idle_timeout) {
            char msg[160];
            snprintf(msg, sizeof msg, "closing the connection: no request for %u s (--idle-timeout)",
                     o->idle_timeout);
            conn_send_error(c, 0, PE_LIMIT, msg);
            conn_close_after_flush(c, CONN_FLUSH_CLOSE);
        }
    }
}
