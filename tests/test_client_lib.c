/* tests/test_client_lib.c — unit tests of the client library (client/
 * lindclient.h) against a scripted fake server on a temporary Unix socket:
 * request encoding, framing of messages split across reads, interleaved
 * requests (iterator, wait-with-queue, callback), errors as values (absent
 * daemon, server error event, garbage, closed connection, timeout, signal).
 * The end-to-end tests against the real daemon are tests/test_lindctl_*. */
#include "client/lindclient.h"
#include "tests/check.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

/* ---- fake server ----------------------------------------------------------- */

typedef void (*script_fn)(int fd);

typedef struct server {
    char dir[64], path[128];
    int lfd;
    script_fn script;
    pthread_t th;
} server;

static void *server_main(void *arg)
{
    server *s = arg;
    int fd = accept(s->lfd, NULL, NULL);
    if (fd >= 0) {
        s->script(fd);
        close(fd);
    }
    return NULL;
}

static void server_start(server *s, script_fn script)
{
    snprintf(s->dir, sizeof s->dir, "/tmp/lindc-test-XXXXXX");
    if (!mkdtemp(s->dir)) { perror("mkdtemp"); exit(1); }
    snprintf(s->path, sizeof s->path, "%s/sock", s->dir);
    s->lfd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    strcpy(sa.sun_path, s->path);
    if (bind(s->lfd, (struct sockaddr *)&sa, sizeof sa) || listen(s->lfd, 4)) { perror("bind"); exit(1); }
    s->script = script;
    pthread_create(&s->th, NULL, server_main, s);
}

static void server_stop(server *s)
{
    pthread_join(s->th, NULL);
    close(s->lfd);
    unlink(s->path);
    rmdir(s->dir);
}

/* Read one request map; returns 0 and fills *u, or -1 at EOF. */
typedef struct reader { msgpack_unpacker up; } reader;

static int read_msg(int fd, reader *r, msgpack_unpacked *u)
{
    for (;;) {
        if (msgpack_unpacker_next(&r->up, u) == MSGPACK_UNPACK_SUCCESS) return 0;
        msgpack_unpacker_reserve_buffer(&r->up, 4096);
        ssize_t n = read(fd, msgpack_unpacker_buffer(&r->up), 4096);
        if (n <= 0) return -1;
        msgpack_unpacker_buffer_consumed(&r->up, (size_t)n);
    }
}

/* Build a server message: id, event and extra key/values packed by `extra`. */
typedef struct out { msgpack_sbuffer sb; msgpack_packer pk; } out;

static void out_begin(out *o, uint64_t id, const char *event, uint32_t extra)
{
    msgpack_sbuffer_init(&o->sb);
    msgpack_packer_init(&o->pk, &o->sb, msgpack_sbuffer_write);
    msgpack_pack_map(&o->pk, 2 + extra);
    msgpack_pack_str_with_body(&o->pk, "id", 2);
    msgpack_pack_uint64(&o->pk, id);
    msgpack_pack_str_with_body(&o->pk, "event", 5);
    msgpack_pack_str_with_body(&o->pk, event, strlen(event));
}

static void out_key(out *o, const char *k) { msgpack_pack_str_with_body(&o->pk, k, strlen(k)); }

static void out_send(out *o, int fd, int one_byte_at_a_time)
{
    if (one_byte_at_a_time) {
        for (size_t i = 0; i < o->sb.size; i++) {
            if (write(fd, o->sb.data + i, 1) != 1) break;
            usleep(200);
        }
    } else if (write(fd, o->sb.data, o->sb.size) != (ssize_t)o->sb.size) {
        perror("fake server write");
    }
    msgpack_sbuffer_destroy(&o->sb);
}

static void send_token(int fd, uint64_t id, char byte, int slow)
{
    out o;
    out_begin(&o, id, "token", 1);
    out_key(&o, "data");
    msgpack_pack_bin_with_body(&o.pk, &byte, 1);
    out_send(&o, fd, slow);
}

static void send_done(int fd, uint64_t id, uint64_t n, int slow)
{
    out o;
    out_begin(&o, id, "done", 2);
    out_key(&o, "reason");
    msgpack_pack_str_with_body(&o.pk, "length", 6);
    out_key(&o, "tokens_out");
    msgpack_pack_uint64(&o.pk, n);
    out_send(&o, fd, slow);
}

static uint64_t req_id(const msgpack_object *m)
{
    uint64_t id = 0;
    lindc_get_u64(m, "id", &id);
    return id;
}

/* ---- scripts --------------------------------------------------------------- */

/* Echo back what the generate request carried, as a `result`. */
static void script_echo(int fd)
{
    reader r;
    msgpack_unpacker_init(&r.up, 4096);
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    while (read_msg(fd, &r, &u) == 0) {
        /* Reply with the request map itself under "req". */
        out o;
        out_begin(&o, req_id(&u.data), "result", 1);
        out_key(&o, "req");
        msgpack_pack_object(&o.pk, u.data);
        out_send(&o, fd, 0);
    }
    msgpack_unpacked_destroy(&u);
    msgpack_unpacker_destroy(&r.up);
}

/* Two generates: their tokens interleave "a1 b1 a2 b2 a3 b3", then done
 * for each; every byte written separately to exercise reassembly. */
static void script_interleave(int fd)
{
    reader r;
    msgpack_unpacker_init(&r.up, 4096);
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    uint64_t a, b;
    if (read_msg(fd, &r, &u)) goto out;
    a = req_id(&u.data);
    if (read_msg(fd, &r, &u)) goto out;
    b = req_id(&u.data);
    for (int i = 0; i < 3; i++) {
        send_token(fd, a, (char)('a' + i), 1);
        send_token(fd, b, (char)('A' + i), 1);
    }
    send_done(fd, a, 3, 1);
    send_done(fd, b, 3, 1);
out:
    msgpack_unpacked_destroy(&u);
    msgpack_unpacker_destroy(&r.up);
}

static void script_error(int fd)
{
    reader r;
    msgpack_unpacker_init(&r.up, 4096);
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    if (read_msg(fd, &r, &u) == 0) {
        out o;
        out_begin(&o, req_id(&u.data), "error", 2);
        out_key(&o, "code");
        msgpack_pack_str_with_body(&o.pk, "not_found", 9);
        out_key(&o, "message");
        msgpack_pack_str_with_body(&o.pk, "no session \"x\"", 14);
        out_send(&o, fd, 0);
        read_msg(fd, &r, &u);   /* wait for the client to hang up */
    }
    msgpack_unpacked_destroy(&u);
    msgpack_unpacker_destroy(&r.up);
}

/* An event this library does not know, with a long name, then a result. */
static void script_future(int fd)
{
    reader r;
    msgpack_unpacker_init(&r.up, 4096);
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    if (read_msg(fd, &r, &u) == 0) {
        uint64_t id = req_id(&u.data);
        out o;
        out_begin(&o, id, "progress_report_from_a_newer_server", 1);
        out_key(&o, "pct");
        msgpack_pack_uint64(&o.pk, 50);
        out_send(&o, fd, 0);
        out_begin(&o, id, "result", 0);
        out_send(&o, fd, 0);
        read_msg(fd, &r, &u);
    }
    msgpack_unpacked_destroy(&u);
    msgpack_unpacker_destroy(&r.up);
}

static void script_garbage(int fd)
{
    /* 0xc1 is the one byte msgpack never uses. */
    const unsigned char junk[] = { 0xc1, 0xc1, 0xc1 };
    if (write(fd, junk, sizeof junk) < 0) perror("write");
    char c;
    while (read(fd, &c, 1) > 0) {}
}

static void script_not_a_map(int fd)
{
    out o;
    msgpack_sbuffer_init(&o.sb);
    msgpack_packer_init(&o.pk, &o.sb, msgpack_sbuffer_write);
    msgpack_pack_array(&o.pk, 1);
    msgpack_pack_int(&o.pk, 7);
    out_send(&o, fd, 0);
    char c;
    while (read(fd, &c, 1) > 0) {}
}

static void script_hangup(int fd) { (void)fd; }

static void script_silent(int fd)
{
    char c;
    while (read(fd, &c, 1) > 0) {}
}

/* ---- cases ------------------------------------------------------------------ */

static void connect_absent(void)
{
    lindc *c = (lindc *)1;
    char err[256];
    int rc = lindc_connect(&c, "/tmp/lind-no-such-dir-xyz/lind.sock", err, sizeof err);
    CHECK(rc == -ENOENT, "rc %d (%s)", rc, lindc_strerror(rc));
    CHECK(c == NULL, "out not cleared");
    CHECK(strstr(err, "/tmp/lind-no-such-dir-xyz/lind.sock") && strstr(err, "lind serve"), "message: %s", err);
}

static void connect_refused(void)
{
    char dir[] = "/tmp/lindc-test-XXXXXX", path[128];
    CHECK(mkdtemp(dir), "mkdtemp");
    snprintf(path, sizeof path, "%s/sock", dir);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    strcpy(sa.sun_path, path);
    CHECK(bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0, "bind");
    close(fd);                      /* a socket file nobody listens on: a dead daemon */
    lindc *c;
    char err[256];
    int rc = lindc_connect(&c, path, err, sizeof err);
    CHECK(rc == -ECONNREFUSED, "rc %d (%s)", rc, lindc_strerror(rc));
    CHECK(strstr(err, "refused") != NULL, "message: %s", err);
    unlink(path);
    rmdir(dir);
}

static void connect_path_too_long(void)
{
    char path[300];
    memset(path, 'a', sizeof path - 1);
    path[sizeof path - 1] = 0;
    lindc *c;
    char err[512];
    CHECK(lindc_connect(&c, path, err, sizeof err) == -ENAMETOOLONG, "rc");
    CHECK(strstr(err, "too long") != NULL, "message: %s", err);
}

static void request_encoding(void)
{
    server s;
    server_start(&s, script_echo);
    lindc *c;
    char err[256];
    CHECK(lindc_connect(&c, s.path, err, sizeof err) == 0, "connect: %s", err);
    CHECK(lindc_peer_pid(c) == getpid(), "peer pid %d", (int)lindc_peer_pid(c));
    lindc_gen_opts o;
    lindc_gen_opts_init(&o);
    const char *stops[] = { "\n\n", "END" };
    o.session = "s1";
    o.text = "hi\xff";
    o.text_len = 3;
    o.max_tokens = 17;
    o.temperature = 0;
    o.top_p = 0.9;
    o.has_seed = 1;
    o.seed = 42;
    o.stop = stops;
    o.n_stop = 2;
    uint64_t id = 0;
    CHECK(lindc_generate(c, &o, &id) == 0 && id == 1, "send id %llu", (unsigned long long)id);
    lindc_event ev;
    int rc = lindc_wait(c, id, &ev, 5000);
    CHECK(rc == 0, "wait %s", lindc_strerror(rc));
    if (rc == 0) {
        CHECK(ev.kind == LINDC_EV_RESULT && ev.final && ev.id == id, "event %s", ev.name);
        const msgpack_object *req = lindc_get(ev.map, "req");
        char buf[64];
        uint64_t u = 0;
        double d = -1;
        const uint8_t *p;
        size_t n;
        CHECK(lindc_get_strcpy(req, "op", buf, sizeof buf) == 0 && !strcmp(buf, "generate"), "op %s", buf);
        CHECK(lindc_get_strcpy(req, "session", buf, sizeof buf) == 0 && !strcmp(buf, "s1"), "session");
        CHECK(lindc_get(req, "text") && lindc_get(req, "text")->type == MSGPACK_OBJECT_BIN, "text is bin");
        CHECK(lindc_get_bytes(req, "text", &p, &n) == 0 && n == 3 && !memcmp(p, "hi\xff", 3), "text bytes");
        CHECK(lindc_get_u64(req, "max_tokens", &u) == 0 && u == 17, "max_tokens");
        CHECK(lindc_get_f64(req, "temperature", &d) == 0 && d == 0, "temperature");
        CHECK(lindc_get_f64(req, "top_p", &d) == 0 && d == 0.9, "top_p");
        CHECK(lindc_get_u64(req, "seed", &u) == 0 && u == 42, "seed");
        CHECK(lindc_get(req, "top_k") == NULL, "unset top_k must not be sent");
        CHECK(lindc_get(req, "repetition_penalty") == NULL, "unset penalty must not be sent");
        const msgpack_object *st = lindc_get(req, "stop");
        CHECK(st && st->type == MSGPACK_OBJECT_ARRAY && st->via.array.size == 2
              && st->via.array.ptr[1].via.str.size == 3, "stop array");
        CHECK(lindc_get_u64(req, "op", &u) == -EINVAL, "typed getter must refuse a string");
        CHECK(lindc_get_u64(req, "nope", &u) == -ENOENT, "absent key");
        CHECK(lindc_get_strcpy(req, "session", buf, 2) == -ENOSPC && !strcmp(buf, "s"), "truncation");
    }
    /* A second request gets the next id; lindc_call returns its result. */
    lindc_req r;
    lindc_req_init(&r, "stats");
    lindc_req_bool(&r, "flag", 1);
    lindc_req_i64(&r, "neg", -5);
    rc = lindc_call(c, &r, &ev, 5000);
    lindc_req_free(&r);
    CHECK(rc == 0 && ev.id == 2, "call rc %d id %llu", rc, (unsigned long long)ev.id);
    int b = 0;
    int64_t i = 0;
    const msgpack_object *req = lindc_get(ev.map, "req");
    CHECK(lindc_get_bool(req, "flag", &b) == 0 && b == 1, "bool");
    CHECK(lindc_get_i64(req, "neg", &i) == 0 && i == -5, "i64");
    CHECK(lindc_in_flight(c) == 0, "in flight %zu", lindc_in_flight(c));
    lindc_free(c);
    server_stop(&s);
}

static void interleaved_iterator(void)
{
    server s;
    server_start(&s, script_interleave);
    lindc *c;
    CHECK(lindc_connect(&c, s.path, NULL, 0) == 0, "connect");
    lindc_gen_opts o;
    lindc_gen_opts_init(&o);
    o.session = "a";
    uint64_t a, b;
    CHECK(lindc_generate(c, &o, &a) == 0, "send a");
    o.session = "b";
    CHECK(lindc_generate(c, &o, &b) == 0, "send b");
    CHECK(lindc_in_flight(c) == 2, "in flight");
    char seq[32] = "";
    lindc_event ev;
    int dones = 0;
    while (dones < 2) {
        int rc = lindc_next(c, &ev, T_MS(5000));
        if (rc) { CHECK(0, "next: %s", lindc_strerror(rc)); break; }
        if (ev.kind == LINDC_EV_TOKEN) {
            CHECK(ev.len == 1, "len");
            size_t l = strlen(seq);
            seq[l] = (char)ev.data[0];
            seq[l + 1] = 0;
        } else if (ev.kind == LINDC_EV_DONE) {
            dones++;
            CHECK(ev.final, "done is final");
        }
    }
    CHECK(!strcmp(seq, "aAbBcC"), "order %s", seq);
    CHECK(lindc_in_flight(c) == 0, "in flight %zu", lindc_in_flight(c));
    lindc_free(c);
    server_stop(&s);
}

static void wait_queues_others(void)
{
    server s;
    server_start(&s, script_interleave);
    lindc *c;
    CHECK(lindc_connect(&c, s.path, NULL, 0) == 0, "connect");
    lindc_gen_opts o;
    lindc_gen_opts_init(&o);
    o.session = "a";
    uint64_t a, b;
    lindc_generate(c, &o, &a);
    lindc_generate(c, &o, &b);
    /* Drain b first: a's events must be kept, in order. */
    char sb[16] = "", sa[16] = "";
    lindc_event ev;
    for (;;) {
        int rc = lindc_wait(c, b, &ev, 5000);
        if (rc) { CHECK(0, "wait: %s", lindc_strerror(rc)); break; }
        CHECK(ev.id == b, "wrong id");
        if (ev.final) break;
        sb[strlen(sb)] = (char)ev.data[0];
    }
    CHECK(lindc_pending(c) == 1, "a's events should be pending");
    for (;;) {
        int rc = lindc_next(c, &ev, T_MS(5000));
        if (rc) { CHECK(0, "next: %s", lindc_strerror(rc)); break; }
        CHECK(ev.id == a, "wrong id");
        if (ev.final) break;
        sa[strlen(sa)] = (char)ev.data[0];
    }
    CHECK(!strcmp(sb, "ABC") && !strcmp(sa, "abc"), "b=%s a=%s", sb, sa);
    CHECK(lindc_pending(c) == 0, "nothing left");
    lindc_free(c);
    server_stop(&s);
}

typedef struct cbstate { int tokens, events; uint64_t stop_after; } cbstate;

static int count_cb(const lindc_event *ev, void *user)
{
    cbstate *st = user;
    st->events++;
    if (ev->kind == LINDC_EV_TOKEN) st->tokens++;
    return st->stop_after && (uint64_t)st->events == st->stop_after ? 99 : 0;
}

static void callback_run(void)
{
    server s;
    server_start(&s, script_interleave);
    lindc *c;
    CHECK(lindc_connect(&c, s.path, NULL, 0) == 0, "connect");
    lindc_gen_opts o;
    lindc_gen_opts_init(&o);
    o.session = "a";
    uint64_t a, b;
    lindc_generate(c, &o, &a);
    lindc_generate(c, &o, &b);
    cbstate st = { 0, 0, 2 };
    CHECK(lindc_run(c, 0, count_cb, &st, 5000) == 99 && st.events == 2, "callback stop value");
    st.stop_after = 0;
    /* Run until a's done: 6 tokens + a's done seen (b's done still ahead). */
    CHECK(lindc_run(c, a, count_cb, &st, 5000) == 0, "run to a");
    CHECK(st.tokens == 6 && st.events == 7, "tokens %d events %d", st.tokens, st.events);
    CHECK(lindc_run(c, 0, count_cb, &st, 5000) == 0 && st.events == 8, "run to the end");
    CHECK(lindc_in_flight(c) == 0, "in flight");
    lindc_free(c);
    server_stop(&s);
}

static void server_error_event(void)
{
    server s;
    server_start(&s, script_error);
    lindc *c;
    CHECK(lindc_connect(&c, s.path, NULL, 0) == 0, "connect");
    lindc_req r;
    lindc_req_init(&r, "info");
    lindc_req_str(&r, "session", "x");
    lindc_event ev;
    int rc = lindc_call(c, &r, &ev, 5000);
    lindc_req_free(&r);
    CHECK(rc == LINDC_ESERVER, "rc %d", rc);
    CHECK(ev.kind == LINDC_EV_ERROR && !strcmp(ev.code, "not_found")
          && !strcmp(ev.message, "no session \"x\""), "code %s message %s", ev.code, ev.message);
    lindc_free(c);
    server_stop(&s);
}

static void unknown_event_passes(void)
{
    server s;
    server_start(&s, script_future);
    lindc *c;
    CHECK(lindc_connect(&c, s.path, NULL, 0) == 0, "connect");
    lindc_req r;
    lindc_req_init(&r, "anything");
    uint64_t id;
    CHECK(lindc_send(c, &r, &id) == 0, "send");
    lindc_req_free(&r);
    lindc_event ev;
    int rc = lindc_next(c, &ev, T_MS(5000));
    CHECK(rc == 0 && ev.kind == LINDC_EV_OTHER && !ev.final && ev.id == id, "unknown event: rc %d kind %d", rc, ev.kind);
    CHECK(!strncmp(ev.name, "progress_report_from_a_", strlen(ev.name)) && strlen(ev.name) == sizeof ev.name - 1,
          "name truncated: %s", ev.name);
    uint64_t pct = 0;
    CHECK(lindc_get_u64(ev.map, "pct", &pct) == 0 && pct == 50, "fields readable");
    rc = lindc_next(c, &ev, T_MS(5000));
    CHECK(rc == 0 && ev.kind == LINDC_EV_RESULT && ev.final, "then the result: rc %d", rc);
    CHECK(lindc_in_flight(c) == 0, "done");
    lindc_free(c);
    server_stop(&s);
}

static void garbage_is_proto_error(void)
{
    server s;
    server_start(&s, script_garbage);
    lindc *c;
    CHECK(lindc_connect(&c, s.path, NULL, 0) == 0, "connect");
    lindc_event ev;
    int rc = lindc_next(c, &ev, T_MS(5000));
    CHECK(rc == LINDC_EPROTO, "rc %d %s", rc, lindc_strerror(rc));
    rc = lindc_next(c, &ev, T_MS(5000));
    CHECK(rc == LINDC_EBROKEN, "then broken: %d", rc);
    lindc_req r;
    lindc_req_init(&r, "stats");
    CHECK(lindc_send(c, &r, NULL) == LINDC_EBROKEN, "send on a broken connection");
    lindc_req_free(&r);
    lindc_free(c);
    server_stop(&s);

    server_start(&s, script_not_a_map);
    CHECK(lindc_connect(&c, s.path, NULL, 0) == 0, "connect");
    rc = lindc_next(c, &ev, T_MS(5000));
    CHECK(rc == LINDC_EPROTO, "non-map message: rc %d", rc);
    lindc_free(c);
    server_stop(&s);
}

static void closed_connection(void)
{
    server s;
    server_start(&s, script_hangup);
    lindc *c;
    CHECK(lindc_connect(&c, s.path, NULL, 0) == 0, "connect");
    lindc_event ev;
    int rc = lindc_next(c, &ev, T_MS(5000));
    CHECK(rc == LINDC_ECLOSED, "rc %d %s", rc, lindc_strerror(rc));
    lindc_free(c);
    server_stop(&s);
}

static volatile sig_atomic_t got_alarm;
static void on_alarm(int sig) { (void)sig; got_alarm = 1; }

static void timeout_and_signal(void)
{
    server s;
    server_start(&s, script_silent);
    lindc *c;
    CHECK(lindc_connect(&c, s.path, NULL, 0) == 0, "connect");
    lindc_event ev;
    CHECK(lindc_next(c, &ev, 0) == -ETIMEDOUT, "zero timeout");
    CHECK(lindc_next(c, &ev, 30) == -ETIMEDOUT, "short timeout");
    struct sigaction sa = { .sa_handler = on_alarm }, old;   /* no SA_RESTART */
    sigaction(SIGALRM, &sa, &old);
    struct itimerval it = { .it_value = { .tv_usec = 50000 } };
    setitimer(ITIMER_REAL, &it, NULL);
    int rc = lindc_next(c, &ev, T_MS(5000));
    CHECK(rc == -EINTR && got_alarm, "signal: rc %d", rc);
    sigaction(SIGALRM, &old, NULL);
    /* The connection is still usable after an interrupted wait. */
    lindc_req r;
    lindc_req_init(&r, "stats");
    CHECK(lindc_send(c, &r, NULL) == 0, "send after EINTR");
    lindc_req_free(&r);
    lindc_free(c);
    server_stop(&s);
}

int main(void)
{
    RUN(connect_absent);
    RUN(connect_refused);
    RUN(connect_path_too_long);
    RUN(request_encoding);
    RUN(interleaved_iterator);
    RUN(wait_queues_others);
    RUN(callback_run);
    RUN(server_error_event);
    RUN(unknown_event_passes);
    RUN(garbage_is_proto_error);
    RUN(closed_connection);
    RUN(timeout_and_signal);
    return check_exit();
}
