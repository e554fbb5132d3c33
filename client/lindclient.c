/* client/lindclient.c — lind's client library: one connection (Unix socket or TCP),
 * requests encoded as msgpack maps, events decoded with a streaming
 * msgpack_unpacker. See lindclient.h for the contract. */
#include "client/lindclient.h"
#include "kernels/clock.h"

#include <errno.h>
#include <sys/random.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* A decoded message together with the zone that owns its memory. */
typedef struct qent {
    msgpack_object obj;
    msgpack_zone *zone;
} qent;

struct lindc {
    int fd;
    int broken;                 /* the stream can no longer be trusted */
    msgpack_unpacker up;
    msgpack_zone *held;         /* zone of the event last returned */
    msgpack_object held_obj;
    qent *q;                    /* events read ahead, oldest at q[qhead] */
    size_t qhead, qlen, qcap;
    uint64_t next_id;
    uint64_t *inflight;         /* ids sent, final event not yet returned */
    size_t ninflight, capinflight;
};

const char *lindc_strerror(int code)
{
    switch (code) {
    case 0: return "success";
    case LINDC_ECLOSED: return "the server closed the connection";
    case LINDC_EPROTO: return "the server sent a message that breaks the protocol";
    case LINDC_ESERVER: return "the server answered with an error";
    case LINDC_EBROKEN: return "the connection was lost earlier";
    default: return code < 0 ? strerror(-code) : "unknown error";
    }
}

/* ---- connection ---------------------------------------------------------- */

/* "tcp://HOST:PORT" (HOST may be [V6ADDR]): a connected TCP socket with
 * TCP_NODELAY, or a negated errno with a sentence in err. */
static int dial_tcp(const char *where, char *err, size_t errlen)
{
    const char *hp = where + 6;
    char host[256];
    const char *colon = strrchr(hp, ':');
    size_t hl = colon ? (size_t)(colon - hp) : 0;
    if (hl >= 2 && hp[0] == '[' && hp[hl - 1] == ']') { hp++; hl -= 2; }
    if (!colon || hl == 0 || hl >= sizeof host || !colon[1]) {
        if (err) snprintf(err, errlen, "%s: want tcp://HOST:PORT", where);
        return -EINVAL;
    }
    memcpy(host, hp, hl);
    host[hl] = 0;
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *ai = NULL;
    int g = getaddrinfo(host, colon + 1, &hints, &ai);
    if (g != 0) {
        if (err) snprintf(err, errlen, "cannot resolve %s: %s", where, gai_strerror(g));
        return -EHOSTUNREACH;
    }
    int fd = -1, e = ECONNREFUSED;
    for (struct addrinfo *a = ai; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) { e = errno; continue; }
        if (connect(fd, a->ai_addr, a->ai_addrlen) < 0) { e = errno; close(fd); fd = -1; }
    }
    freeaddrinfo(ai);
    if (fd < 0) {
        if (err) snprintf(err, errlen, "cannot connect to %s: %s%s", where, strerror(e),
                          e == ECONNREFUSED ? " (is `lind serve --listen` running?)" : "");
        return -e;
    }
    int one = 1;   /* requests are small: send each at once */
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

static int dial_unix(const char *path, char *err, size_t errlen)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    if (strlen(path) >= sizeof sa.sun_path) {
        if (err) snprintf(err, errlen, "socket path too long (%zu bytes, at most %zu): %s",
                          strlen(path), sizeof sa.sun_path - 1, path);
        return -ENAMETOOLONG;
    }
    strcpy(sa.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        int e = errno;
        if (err) snprintf(err, errlen, "cannot create a socket: %s", strerror(e));
        return -e;
    }
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
        int e = errno;
        close(fd);
        if (err) {
            const char *hint = (e == ENOENT || e == ECONNREFUSED)
                ? " (is `lind serve` running?)" : "";
            snprintf(err, errlen, "cannot connect to %s: %s%s", path, strerror(e), hint);
        }
        return -e;
    }
    return fd;
}

int lindc_connect(lindc **out, const char *path, char *err, size_t errlen)
{
    *out = NULL;
    int fd = strncmp(path, "tcp://", 6) ? dial_unix(path, err, errlen) : dial_tcp(path, err, errlen);
    if (fd < 0) return fd;
    lindc *c = calloc(1, sizeof *c);
    if (!c || !msgpack_unpacker_init(&c->up, 1 << 16)) {
        free(c);
        close(fd);
        if (err) snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    c->fd = fd;
    c->next_id = 1;
    *out = c;
    return 0;
}

int lindc_hello_token(lindc *c, const char *token, char *err, size_t errlen)
{
    lindc_req r;
    lindc_event ev;
    lindc_req_init(&r, "hello");
    lindc_req_str(&r, "token", token);
    int rc = lindc_call(c, &r, &ev, 10000);
    lindc_req_free(&r);
    if (rc == LINDC_ESERVER) {
        if (err) snprintf(err, errlen, "hello with the token refused: %s: %s", ev.code, ev.message);
        return -EACCES;
    }
    if (rc && err) snprintf(err, errlen, "hello with the token: %s", lindc_strerror(rc));
    return rc;
}

void lindc_free(lindc *c)
{
    if (!c) return;
    for (size_t i = 0; i < c->qlen; i++) msgpack_zone_free(c->q[c->qhead + i].zone);
    free(c->q);
    msgpack_zone_free(c->held);
    msgpack_unpacker_destroy(&c->up);
    free(c->inflight);
    if (c->fd >= 0) close(c->fd);
    free(c);
}

int lindc_fd(const lindc *c) { return c->fd; }
size_t lindc_in_flight(const lindc *c) { return c->ninflight; }

pid_t lindc_peer_pid(const lindc *c)
{
    struct ucred cr;
    socklen_t len = sizeof cr;
    if (getsockopt(c->fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0) return -errno;
    return cr.pid;
}

/* ---- requests ------------------------------------------------------------ */

void lindc_req_init(lindc_req *r, const char *op)
{
    msgpack_sbuffer_init(&r->body);
    msgpack_packer_init(&r->pk, &r->body, msgpack_sbuffer_write);
    r->nfields = 0;
    r->failed = 0;
    snprintf(r->op, sizeof r->op, "%s", op);
}

void lindc_req_free(lindc_req *r) { msgpack_sbuffer_destroy(&r->body); }

static int pack_str(msgpack_packer *pk, const char *s, size_t n)
{
    return msgpack_pack_str(pk, n) || msgpack_pack_str_body(pk, s, n);
}

static void req_key(lindc_req *r, const char *key)
{
    r->nfields++;
    if (pack_str(&r->pk, key, strlen(key))) r->failed = 1;
}

void lindc_req_str(lindc_req *r, const char *key, const char *val)
{
    req_key(r, key);
    if (pack_str(&r->pk, val, strlen(val))) r->failed = 1;
}

void lindc_req_bin(lindc_req *r, const char *key, const void *val, size_t len)
{
    req_key(r, key);
    if (msgpack_pack_bin(&r->pk, len) || msgpack_pack_bin_body(&r->pk, val, len)) r->failed = 1;
}

void lindc_req_u64(lindc_req *r, const char *key, uint64_t val)
{
    req_key(r, key);
    if (msgpack_pack_uint64(&r->pk, val)) r->failed = 1;
}

void lindc_req_i64(lindc_req *r, const char *key, int64_t val)
{
    req_key(r, key);
    if (msgpack_pack_int64(&r->pk, val)) r->failed = 1;
}

void lindc_req_f64(lindc_req *r, const char *key, double val)
{
    req_key(r, key);
    if (msgpack_pack_double(&r->pk, val)) r->failed = 1;
}

void lindc_req_bool(lindc_req *r, const char *key, int val)
{
    req_key(r, key);
    if (val ? msgpack_pack_true(&r->pk) : msgpack_pack_false(&r->pk)) r->failed = 1;
}

void lindc_req_strv(lindc_req *r, const char *key, const char *const *vals, size_t n)
{
    req_key(r, key);
    if (msgpack_pack_array(&r->pk, n)) r->failed = 1;
    for (size_t i = 0; i < n; i++)
        if (pack_str(&r->pk, vals[i], strlen(vals[i]))) r->failed = 1;
}

static int write_all(lindc *c, const void *buf, size_t len)
{
    const char *p = buf;
    while (len) {
        ssize_t n = send(c->fd, p, len, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR) continue;    /* a half-written message must be finished */
            int e = errno;
            c->broken = 1;
            return e == EPIPE || e == ECONNRESET ? LINDC_ECLOSED : -e;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

int lindc_send_raw(lindc *c, const void *buf, size_t len)
{
    if (c->broken) return LINDC_EBROKEN;
    return write_all(c, buf, len);
}

static int inflight_add(lindc *c, uint64_t id)
{
    if (c->ninflight == c->capinflight) {
        size_t cap = c->capinflight ? 2 * c->capinflight : 16;
        uint64_t *p = realloc(c->inflight, cap * sizeof *p);
        if (!p) return -ENOMEM;
        c->inflight = p;
        c->capinflight = cap;
    }
    c->inflight[c->ninflight++] = id;
    return 0;
}

static void inflight_remove(lindc *c, uint64_t id)
{
    for (size_t i = 0; i < c->ninflight; i++)
        if (c->inflight[i] == id) {
            c->inflight[i] = c->inflight[--c->ninflight];
            return;
        }
}

int lindc_send(lindc *c, const lindc_req *r, uint64_t *id)
{
    if (c->broken) return LINDC_EBROKEN;
    if (r->failed) return -ENOMEM;
    uint64_t rid = c->next_id++;
    msgpack_sbuffer head;
    msgpack_packer pk;
    msgpack_sbuffer_init(&head);
    msgpack_packer_init(&pk, &head, msgpack_sbuffer_write);
    int bad = msgpack_pack_map(&pk, r->nfields + 2)
           || pack_str(&pk, "op", 2) || pack_str(&pk, r->op, strlen(r->op))
           || pack_str(&pk, "id", 2) || msgpack_pack_uint64(&pk, rid);
    int rc = bad ? -ENOMEM : inflight_add(c, rid);
    /* One buffer, one write: the message never goes out half-built. */
    if (!rc && msgpack_sbuffer_write(&head, r->body.data, r->body.size)) rc = -ENOMEM;
    if (!rc) rc = write_all(c, head.data, head.size);
    if (rc && !bad) inflight_remove(c, rid);
    msgpack_sbuffer_destroy(&head);
    if (!rc && id) *id = rid;
    return rc;
}

void lindc_gen_opts_init(lindc_gen_opts *o)
{
    memset(o, 0, sizeof *o);
    o->max_tokens = -1;
    o->temperature = -1;
    o->top_k = -1;
    o->top_p = -1;
    o->repetition_penalty = -1;
    o->repetition_window = -1;
    o->ignore_eos = -1;
}

int lindc_generate(lindc *c, const lindc_gen_opts *o, uint64_t *id)
{
    if (!o->session) return -EINVAL;
    lindc_req r;
    lindc_req_init(&r, "generate");
    lindc_req_str(&r, "session", o->session);
    if (o->text) lindc_req_bin(&r, "text", o->text, o->text_len);
    if (o->max_tokens >= 0) lindc_req_u64(&r, "max_tokens", (uint64_t)o->max_tokens);
    if (o->temperature >= 0) lindc_req_f64(&r, "temperature", o->temperature);
    if (o->top_k >= 0) lindc_req_u64(&r, "top_k", (uint64_t)o->top_k);
    if (o->top_p >= 0) lindc_req_f64(&r, "top_p", o->top_p);
    if (o->repetition_penalty >= 0) lindc_req_f64(&r, "repetition_penalty", o->repetition_penalty);
    if (o->repetition_window >= 0) lindc_req_u64(&r, "repetition_window", (uint64_t)o->repetition_window);
    if (o->has_seed) lindc_req_u64(&r, "seed", o->seed);
    if (o->n_stop) lindc_req_strv(&r, "stop", o->stop, o->n_stop);
    if (o->progress) lindc_req_bool(&r, "progress", 1);
    if (o->ignore_eos >= 0) lindc_req_bool(&r, "ignore_eos", o->ignore_eos);
    if (o->request_id) lindc_req_str(&r, "request_id", o->request_id);
    if (o->has_if_tokens) lindc_req_u64(&r, "if_tokens", o->if_tokens);
    if (o->chat_template) lindc_req_u64(&r, "chat_template", o->chat_template);
    int rc = lindc_send(c, &r, id);
    lindc_req_free(&r);
    return rc;
}

int lindc_request_id(char buf[33])
{
    uint8_t b[16];
    size_t got = 0;
    while (got < sizeof b) {
        ssize_t n = getrandom(b + got, sizeof b - got, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return n < 0 ? -errno : -EIO;
        got += (size_t)n;
    }
    for (size_t i = 0; i < sizeof b; i++) snprintf(buf + 2 * i, 3, "%02x", b[i]);
    return 0;
}

int lindc_cancel(lindc *c, uint64_t target, uint64_t *id)
{
    lindc_req r;
    lindc_req_init(&r, "cancel");
    lindc_req_u64(&r, "target", target);
    int rc = lindc_send(c, &r, id);
    lindc_req_free(&r);
    return rc;
}

int lindc_cancel_session(lindc *c, const char *session, uint64_t *id)
{
    lindc_req r;
    lindc_req_init(&r, "cancel");
    lindc_req_str(&r, "session", session);
    int rc = lindc_send(c, &r, id);
    lindc_req_free(&r);
    return rc;
}

/* Decode one complete message from what is buffered. 1: got one; 0: need
 * more bytes; <0: the stream is corrupt. */
static int decode_buffered(lindc *c, qent *out)
{
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    msgpack_unpack_return ret = msgpack_unpacker_next(&c->up, &u);
    if (ret == MSGPACK_UNPACK_SUCCESS) {
        out->obj = u.data;
        out->zone = msgpack_unpacked_release_zone(&u);
        msgpack_unpacked_destroy(&u);
        return 1;
    }
    msgpack_unpacked_destroy(&u);
    if (ret == MSGPACK_UNPACK_CONTINUE) {
        if (msgpack_unpacker_message_size(&c->up) > LINDC_MAX_MESSAGE) {
            c->broken = 1;
            return LINDC_EPROTO;
        }
        return 0;
    }
    c->broken = 1;
    return ret == MSGPACK_UNPACK_NOMEM_ERROR ? -ENOMEM : LINDC_EPROTO;
}

/* Read the next message off the wire into *out, waiting until deadline
 * (ms on the monotonic clock; <0 forever). */
static int fetch(lindc *c, qent *out, int64_t deadline)
{
    if (c->broken) return LINDC_EBROKEN;
    for (;;) {
        int rc = decode_buffered(c, out);
        if (rc) return rc < 0 ? rc : 0;
        int wait = -1;
        if (deadline >= 0) {
            int64_t left = deadline - clock_mono_ms();
            wait = left > 0 ? (int)(left > 1 << 30 ? 1 << 30 : left) : 0;
        }
        struct pollfd pfd = { .fd = c->fd, .events = POLLIN };
        int n = poll(&pfd, 1, wait);
        if (n < 0) return errno == EINTR ? -EINTR : -errno;
        if (n == 0) return -ETIMEDOUT;
        if (!msgpack_unpacker_reserve_buffer(&c->up, 1 << 16)) return -ENOMEM;
        ssize_t got = recv(c->fd, msgpack_unpacker_buffer(&c->up),
                           msgpack_unpacker_buffer_capacity(&c->up), 0);
        if (got == 0) {
            c->broken = 1;
            return LINDC_ECLOSED;
        }
        if (got < 0) {
            if (errno == EINTR) return -EINTR;
            if (errno == EAGAIN) continue;
            int e = errno;
            c->broken = 1;
            return e == ECONNRESET ? LINDC_ECLOSED : -e;
        }
        msgpack_unpacker_buffer_consumed(&c->up, (size_t)got);
    }
}

static int queue_push(lindc *c, qent e)
{
    if (c->qhead + c->qlen == c->qcap) {
        if (c->qhead) {
            memmove(c->q, c->q + c->qhead, c->qlen * sizeof *c->q);
            c->qhead = 0;
        } else {
            size_t cap = c->qcap ? 2 * c->qcap : 32;
            qent *p = realloc(c->q, cap * sizeof *p);
            if (!p) return -ENOMEM;
            c->q = p;
            c->qcap = cap;
        }
    }
    c->q[c->qhead + c->qlen++] = e;
    return 0;
}

static void queue_take(lindc *c, size_t i, qent *out)
{
    *out = c->q[c->qhead + i];
    if (i == 0) {
        c->qhead++;
    } else {
        memmove(c->q + c->qhead + i, c->q + c->qhead + i + 1, (c->qlen - i - 1) * sizeof *c->q);
    }
    if (--c->qlen == 0) c->qhead = 0;
}

/* The `id` of a raw message, or 0 when it has none. */
static uint64_t msg_id(const msgpack_object *m)
{
    uint64_t id = 0;
    lindc_get_u64(m, "id", &id);
    return id;
}

/* Turn a decoded message into *ev, taking ownership of its zone. */
static int deliver(lindc *c, qent e, lindc_event *ev)
{
    msgpack_zone_free(c->held);
    c->held = e.zone;
    c->held_obj = e.obj;
    memset(ev, 0, sizeof *ev);
    ev->map = &c->held_obj;
    int name_rc = lindc_get_strcpy(ev->map, "event", ev->name, sizeof ev->name);
    /* A long event name (from a newer server) is only truncated. */
    if (c->held_obj.type != MSGPACK_OBJECT_MAP || lindc_get_u64(ev->map, "id", &ev->id) != 0
        || (name_rc != 0 && name_rc != -ENOSPC)) {
        c->broken = 1;
        return LINDC_EPROTO;
    }
    if (!strcmp(ev->name, "token")) {
        ev->kind = LINDC_EV_TOKEN;
        if (lindc_get_bytes(ev->map, "data", &ev->data, &ev->len) != 0) {
            c->broken = 1;
            return LINDC_EPROTO;
        }
    } else if (!strcmp(ev->name, "result")) {
        ev->kind = LINDC_EV_RESULT;
    } else if (!strcmp(ev->name, "done")) {
        ev->kind = LINDC_EV_DONE;
    } else if (!strcmp(ev->name, "error")) {
        ev->kind = LINDC_EV_ERROR;
        if (lindc_get_strcpy(ev->map, "code", ev->code, sizeof ev->code) == -ENOENT)
            snprintf(ev->code, sizeof ev->code, "unknown");
        lindc_get_strcpy(ev->map, "message", ev->message, sizeof ev->message);
    } else if (!strcmp(ev->name, "progress")) {
        ev->kind = LINDC_EV_PROGRESS;
    } else {
        ev->kind = LINDC_EV_OTHER;
    }
    ev->final = ev->kind == LINDC_EV_RESULT || ev->kind == LINDC_EV_DONE
             || (ev->kind == LINDC_EV_ERROR && ev->id != 0);
    if (ev->final) inflight_remove(c, ev->id);
    return 0;
}

static int64_t deadline_of(int timeout_ms)
{
    return timeout_ms < 0 ? -1 : clock_mono_ms() + timeout_ms;
}

int lindc_pending(lindc *c)
{
    if (c->qlen) return 1;
    if (c->broken) return 0;
    qent e;
    if (decode_buffered(c, &e) == 1) {
        if (queue_push(c, e) < 0) {
            msgpack_zone_free(e.zone);
            c->broken = 1;
            return 0;
        }
        return 1;
    }
    return 0;
}

int lindc_next(lindc *c, lindc_event *ev, int timeout_ms)
{
    qent e;
    if (c->qlen) {
        queue_take(c, 0, &e);
        return deliver(c, e, ev);
    }
    int rc = fetch(c, &e, deadline_of(timeout_ms));
    if (rc) return rc;
    return deliver(c, e, ev);
}

int lindc_wait(lindc *c, uint64_t id, lindc_event *ev, int timeout_ms)
{
    qent e;
    for (size_t i = 0; i < c->qlen; i++)
        if (msg_id(&c->q[c->qhead + i].obj) == id) {
            queue_take(c, i, &e);
            return deliver(c, e, ev);
        }
    int64_t deadline = deadline_of(timeout_ms);
    for (;;) {
        int rc = fetch(c, &e, deadline);
        if (rc) return rc;
        if (msg_id(&e.obj) == id) return deliver(c, e, ev);
        if ((rc = queue_push(c, e)) < 0) {
            msgpack_zone_free(e.zone);
            c->broken = 1;
            return rc;
        }
    }
}

int lindc_run(lindc *c, uint64_t id, lindc_callback cb, void *user, int timeout_ms)
{
    lindc_event ev;
    for (;;) {
        if (id == 0 && c->ninflight == 0 && c->qlen == 0) return 0;
        int rc = lindc_next(c, &ev, timeout_ms);
        if (rc) return rc;
        rc = cb(&ev, user);
        if (rc) return rc;
        if (id != 0 && ev.id == id && ev.final) return 0;
    }
}

int lindc_call(lindc *c, const lindc_req *r, lindc_event *ev, int timeout_ms)
{
    uint64_t id;
    int rc = lindc_send(c, r, &id);
    if (rc) return rc;
    int64_t deadline = deadline_of(timeout_ms);
    for (;;) {
        int left = -1;
        if (deadline >= 0) {
            int64_t l = deadline - clock_mono_ms();
            left = l > 0 ? (int)l : 0;
        }
        rc = lindc_wait(c, id, ev, left);
        if (rc) return rc;
        if (ev->final) return ev->kind == LINDC_EV_ERROR ? LINDC_ESERVER : 0;
    }
}

/* ---- field access ------------------------------------------------------------ */

const msgpack_object *lindc_get(const msgpack_object *map, const char *key)
{
    if (!map || map->type != MSGPACK_OBJECT_MAP) return NULL;
    size_t klen = strlen(key);
    for (uint32_t i = 0; i < map->via.map.size; i++) {
        const msgpack_object_kv *kv = &map->via.map.ptr[i];
        if (kv->key.type == MSGPACK_OBJECT_STR && kv->key.via.str.size == klen
            && memcmp(kv->key.via.str.ptr, key, klen) == 0)
            return &kv->val;
    }
    return NULL;
}

int lindc_get_u64(const msgpack_object *map, const char *key, uint64_t *out)
{
    const msgpack_object *o = lindc_get(map, key);
    if (!o) return -ENOENT;
    if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER) { *out = o->via.u64; return 0; }
    return -EINVAL;
}

int lindc_get_i64(const msgpack_object *map, const char *key, int64_t *out)
{
    const msgpack_object *o = lindc_get(map, key);
    if (!o) return -ENOENT;
    if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) { *out = o->via.i64; return 0; }
    if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER && o->via.u64 <= INT64_MAX) {
        *out = (int64_t)o->via.u64;
        return 0;
    }
    return -EINVAL;
}

int lindc_get_f64(const msgpack_object *map, const char *key, double *out)
{
    const msgpack_object *o = lindc_get(map, key);
    if (!o) return -ENOENT;
    switch (o->type) {
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64: *out = o->via.f64; return 0;
    case MSGPACK_OBJECT_POSITIVE_INTEGER: *out = (double)o->via.u64; return 0;
    case MSGPACK_OBJECT_NEGATIVE_INTEGER: *out = (double)o->via.i64; return 0;
    default: return -EINVAL;
    }
}

int lindc_get_bool(const msgpack_object *map, const char *key, int *out)
{
    const msgpack_object *o = lindc_get(map, key);
    if (!o) return -ENOENT;
    if (o->type != MSGPACK_OBJECT_BOOLEAN) return -EINVAL;
    *out = o->via.boolean;
    return 0;
}

int lindc_get_bytes(const msgpack_object *map, const char *key, const uint8_t **p, size_t *n)
{
    const msgpack_object *o = lindc_get(map, key);
    if (!o) return -ENOENT;
    if (o->type == MSGPACK_OBJECT_STR) {
        *p = (const uint8_t *)o->via.str.ptr;
        *n = o->via.str.size;
        return 0;
    }
    if (o->type == MSGPACK_OBJECT_BIN) {
        *p = (const uint8_t *)o->via.bin.ptr;
        *n = o->via.bin.size;
        return 0;
    }
    return -EINVAL;
}

int lindc_get_strcpy(const msgpack_object *map, const char *key, char *buf, size_t cap)
{
    const uint8_t *p;
    size_t n;
    if (cap) buf[0] = 0;
    int rc = lindc_get_bytes(map, key, &p, &n);
    if (rc) return rc;
    if (!cap) return -ENOSPC;
    size_t k = n < cap - 1 ? n : cap - 1;
    memcpy(buf, p, k);
    buf[k] = 0;
    return k < n ? -ENOSPC : 0;
}
