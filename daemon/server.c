/* daemon/server.c — `lind serve`: options, start-up, the event loop, signals
 * and an orderly shutdown. See server.h for the threads and what they own. */
#include "daemon/server.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include "daemon/conn.h"
#include "daemon/msg.h"
#include "daemon/persist.h"
#include "daemon/scheduler.h"
#include "state/transcript.h"

#define EXIT_FLUSH_MS 3000

server_options server_defaults(void)
{
    return (server_options){
        .model_dir = "models/default", .socket_path = "./lind.sock", .db_path = "./lind.db",
        .backend = "auto", .max_batch = 256, .max_resident = 0, .prompt_chunk = 64,
        .max_message = 1u << 20, .max_output = 256u << 10, .max_tokens = 65536,
        .max_inflight = 1024, .sync = STORE_SYNC_FULL, .transcript_bytes = 4096,
    };
}

static int parse_num(const char *opt, const char *v, long long lo, long long hi, long long *out,
                     char *err, size_t errlen)
{
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi) {
        snprintf(err, errlen, "%s wants an integer in %lld..%lld, got '%s'", opt, lo, hi, v);
        return -EINVAL;
    }
    *out = x;
    return 0;
}

static const char usage[] =
    "usage: lind serve [--model DIR] [--socket PATH] [--db PATH] [--backend cpu|cuda|auto]\n"
    "                  [--max-batch N] [--max-resident N] [--max-message BYTES]\n"
    "                  [--max-tokens N] [--sync full|normal] [--transcript-bytes N]\n"
    "                  [--max-output BYTES] [--prompt-chunk N] [--max-inflight N]\n"
    "                  [--dtype f32|bf16|f16]";

int server_parse_args(int argc, char **argv, server_options *o, char *err, size_t errlen)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            snprintf(err, errlen, "%s", usage);
            return -EINVAL;
        }
        if (i + 1 >= argc) {
            snprintf(err, errlen, "unknown option or missing value: '%s'\n%s", a, usage);
            return -EINVAL;
        }
        const char *v = argv[++i];
        long long x = 0;
        int rc = 0;
        if (!strcmp(a, "--model")) o->model_dir = v;
        else if (!strcmp(a, "--socket")) o->socket_path = v;
        else if (!strcmp(a, "--db")) o->db_path = v;
        else if (!strcmp(a, "--backend")) {
            if (strcmp(v, "cpu") && strcmp(v, "cuda") && strcmp(v, "auto")) {
                snprintf(err, errlen, "--backend wants cpu, cuda or auto, got '%s'", v);
                return -EINVAL;
            }
            o->backend = v;
        } else if (!strcmp(a, "--dtype")) {
            if (!strcmp(v, "f32")) o->dtype = LIND_DT_F32;
            else if (!strcmp(v, "bf16")) o->dtype = LIND_DT_BF16;
            else if (!strcmp(v, "f16")) o->dtype = LIND_DT_F16;
            else { snprintf(err, errlen, "--dtype wants f32, bf16 or f16, got '%s'", v); return -EINVAL; }
        } else if (!strcmp(a, "--sync")) {
            if (!strcmp(v, "full")) o->sync = STORE_SYNC_FULL;
            else if (!strcmp(v, "normal")) o->sync = STORE_SYNC_NORMAL;
            else { snprintf(err, errlen, "--sync wants full or normal, got '%s'", v); return -EINVAL; }
        } else if (!strcmp(a, "--max-batch")) {
            if (!(rc = parse_num(a, v, 1, 4096, &x, err, errlen))) o->max_batch = (int)x;
        } else if (!strcmp(a, "--max-resident")) {
            if (!(rc = parse_num(a, v, 1, 1 << 20, &x, err, errlen))) o->max_resident = (int)x;
        } else if (!strcmp(a, "--prompt-chunk")) {
            if (!(rc = parse_num(a, v, 1, 4096, &x, err, errlen))) o->prompt_chunk = (int)x;
        } else if (!strcmp(a, "--max-message")) {
            if (!(rc = parse_num(a, v, 64, 1ll << 30, &x, err, errlen))) o->max_message = (size_t)x;
        } else if (!strcmp(a, "--max-output")) {
            if (!(rc = parse_num(a, v, 1024, 1ll << 32, &x, err, errlen))) o->max_output = (size_t)x;
        } else if (!strcmp(a, "--max-tokens")) {
            if (!(rc = parse_num(a, v, 1, UINT32_MAX, &x, err, errlen))) o->max_tokens = (uint32_t)x;
        } else if (!strcmp(a, "--max-inflight")) {
            if (!(rc = parse_num(a, v, 1, 1 << 20, &x, err, errlen))) o->max_inflight = (int)x;
        } else if (!strcmp(a, "--transcript-bytes")) {
            if (!(rc = parse_num(a, v, 0, TRANSCRIPT_LIMIT_MAX, &x, err, errlen)))
                o->transcript_bytes = (size_t)x;
        } else {
            snprintf(err, errlen, "unknown option '%s'\n%s", a, usage);
            return -EINVAL;
        }
        if (rc) return rc;
    }
    return 0;
}

/* ---- the socket ------------------------------------------------------------ */

/* A socket file left by a killed daemon is removed; one a live daemon
 * answers on, or a path that is not a socket, is refused. */
static int clear_stale_socket(const char *path, char *err, size_t errlen)
{
    struct stat st;
    if (lstat(path, &st) != 0) return 0;
    if (!S_ISSOCK(st.st_mode)) {
        snprintf(err, errlen, "%s exists and is not a socket; not touching it", path);
        return -EEXIST;
    }
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (fd < 0) return 0;
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    int live = connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
    close(fd);
    if (live) {
        snprintf(err, errlen, "another server is listening on %s", path);
        return -EADDRINUSE;
    }
    unlink(path);
    return 0;
}

static void on_connection(uv_stream_t *l, int status)
{
    server *srv = l->data;
    if (status < 0 || srv->stopping) return;
    int rc = conn_accept(srv);
    if (rc < 0) fprintf(stderr, "lind serve: accepting a connection failed: %s\n", uv_strerror(rc));
}

static int listen_on(server *srv, char *err, size_t errlen)
{
    const char *path = srv->opt.socket_path;
    struct sockaddr_un sa;
    if (strlen(path) >= sizeof sa.sun_path) {
        snprintf(err, errlen, "socket path '%s' is longer than %zu bytes", path, sizeof sa.sun_path - 1);
        return -ENAMETOOLONG;
    }
    int rc = clear_stale_socket(path, err, errlen);
    if (rc) return rc;
    mode_t old = umask(0177);   /* the socket is born 0600: no window for others */
    rc = uv_pipe_bind(&srv->listener, path);
    umask(old);
    if (rc < 0) goto fail;
    if ((rc = uv_listen((uv_stream_t *)&srv->listener, 511, on_connection)) < 0) goto fail;
    return 0;
fail:
    snprintf(err, errlen, "listening on %s: %s", path, uv_strerror(rc));
    return rc;
}

/* ---- shutdown ------------------------------------------------------------------ */

static void close_handle(uv_handle_t *h)
{
    if (!uv_is_closing(h)) uv_close(h, NULL);
}

static void close_everything(server *srv)
{
    conn_table *t = srv->conns;
    for (uint32_t i = 0; i < t->cap; i++)
        if (t->v[i]) conn_close(t->v[i]);
    close_handle((uv_handle_t *)&srv->wake);
    close_handle((uv_handle_t *)&srv->sigterm);
    close_handle((uv_handle_t *)&srv->sigint);
    close_handle((uv_handle_t *)&srv->sighup);
    close_handle((uv_handle_t *)&srv->exit_timer);
    close_handle((uv_handle_t *)&srv->listener);
}

static void on_exit_timer(uv_timer_t *t)
{
    close_everything(t->data);
}

/* Every turn is saved and the store closed: write what is left, then end. */
static void finish_exit(server *srv)
{
    conn_table *t = srv->conns;
    int waiting = 0;
    for (uint32_t i = 0; i < t->cap; i++) {
        conn *c = t->v[i];
        if (!c) continue;
        if (conn_unsent(c)) { conn_close_after_flush(c, CONN_FLUSH_CLOSE); waiting = 1; }
        else conn_close(c);
    }
    if (!waiting) { close_everything(srv); return; }
    uv_timer_start(&srv->exit_timer, on_exit_timer, EXIT_FLUSH_MS, 0);
    close_handle((uv_handle_t *)&srv->sigterm);
    close_handle((uv_handle_t *)&srv->sigint);
    close_handle((uv_handle_t *)&srv->sighup);
}

static void on_signal(uv_signal_t *h, int signum)
{
    server *srv = h->data;
    if (srv->stopping) return;
    srv->stopping = 1;
    fprintf(stderr, "lind serve: %s: finishing turns at a token boundary and saving\n",
            strsignal(signum));
    close_handle((uv_handle_t *)&srv->listener);
    dmsg *m = dmsg_new(M_SHUTDOWN, 0);
    if (m) queue_push(&srv->schedq, &m->node);
}

static void on_wake(uv_async_t *a)
{
    server *srv = a->data;
    qnode *n = queue_take_all(&srv->loopq, 0);
    while (n) {
        qnode *next = n->next;
        outmsg *o = (outmsg *)n;
        if (o->exit) {
            srv->store_done = 1;
            outmsg_free(o);
            finish_exit(srv);
        } else {
            conn_deliver(srv, o);
        }
        n = next;
    }
}

/* ---- main ------------------------------------------------------------------------ */

int server_main(int argc, char **argv)
{
    server *srv = calloc(1, sizeof *srv);
    char err[1024] = "";
    if (!srv) { fprintf(stderr, "lind serve: out of memory\n"); return 1; }
    srv->opt = server_defaults();
    if (server_parse_args(argc, argv, &srv->opt, err, sizeof err) != 0) {
        fprintf(stderr, "lind serve: %s\n", err);
        free(srv);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    srv->limits = (proto_limits){ .max_message = srv->opt.max_message,
                                  .max_tokens = srv->opt.max_tokens };
    if (!realpath(srv->opt.model_dir, srv->model_path))
        snprintf(srv->model_path, sizeof srv->model_path, "%s", srv->opt.model_dir);

    uv_loop_t loop;
    conn_table conns;
    scheduler *sched = NULL;
    persist *pers = NULL;
    store *st = NULL;
    int code = 1, rc;
    uv_loop_init(&loop);
    srv->loop = &loop;
    srv->conns = &conns;
    uv_async_init(&loop, &srv->wake, on_wake);
    srv->wake.data = srv;
    uv_signal_init(&loop, &srv->sigterm);
    uv_signal_init(&loop, &srv->sigint);
    uv_signal_init(&loop, &srv->sighup);
    uv_timer_init(&loop, &srv->exit_timer);
    uv_pipe_init(&loop, &srv->listener, 0);
    srv->sigterm.data = srv->sigint.data = srv->sighup.data = srv->exit_timer.data = srv->listener.data = srv;
    if (conn_table_init(&conns) != 0 || stats_init(&srv->st) != 0 ||
        queue_init(&srv->loopq, &srv->wake) != 0 || queue_init(&srv->schedq, NULL) != 0 ||
        queue_init(&srv->persistq, NULL) != 0) {
        fprintf(stderr, "lind serve: out of memory\n");
        goto out;
    }
    if ((rc = scheduler_start(srv, &sched, err, sizeof err)) != 0) {
        fprintf(stderr, "lind serve: cannot load model: %s\n", err);
        goto out;
    }
    store_options so = store_defaults();
    so.sync = srv->opt.sync;
    if ((rc = store_open(srv->opt.db_path, &so, &st, err, sizeof err)) != 0) {
        fprintf(stderr, "lind serve: cannot open the store: %s\n", err);
        goto out;
    }
    if ((rc = listen_on(srv, err, sizeof err)) != 0) {
        fprintf(stderr, "lind serve: %s\n", err);
        goto out;
    }
    if ((rc = persist_start(srv, st, &pers)) != 0) {
        fprintf(stderr, "lind serve: cannot start the store thread: %s\n", strerror(-rc));
        goto out;
    }
    st = NULL;   /* the store thread owns it now */
    uv_signal_start(&srv->sigterm, on_signal, SIGTERM);
    uv_signal_start(&srv->sigint, on_signal, SIGINT);
    uv_signal_start(&srv->sighup, on_signal, SIGHUP);   /* a closed terminal: stop as cleanly */
    fprintf(stderr, "lind serve: %s (%s, %zu params, %zu state bytes/session) on %s, store %s\n",
            srv->model_path, srv->backend, srv->params, srv->state_bytes,
            srv->opt.socket_path, srv->opt.db_path);
    uv_run(&loop, UV_RUN_DEFAULT);
    scheduler_join(sched);
    sched = NULL;
    persist_join(pers);
    pers = NULL;
    unlink(srv->opt.socket_path);
    code = 0;
    fprintf(stderr, "lind serve: stopped; every session saved\n");
out:
    if (sched) {   /* start-up failed after the model loaded: stop the compute thread */
        dmsg *m = dmsg_new(M_SHUTDOWN, 0);
        if (m) queue_push(&srv->schedq, &m->node);
        scheduler_join(sched);
    }
    if (st) store_close(st);
    /* Drain what was left for threads that no longer run (e.g. the
     * connection-closed notes of the final close). */
    for (qnode *n = queue_take_all(&srv->loopq, 0); n; ) {
        qnode *next = n->next;
        outmsg_free((outmsg *)n);
        n = next;
    }
    queue *dq[2] = { &srv->schedq, &srv->persistq };
    for (int i = 0; i < 2; i++)
        for (qnode *n = queue_take_all(dq[i], 0); n; ) {
            qnode *next = n->next;
            dmsg_free((dmsg *)n);
            n = next;
        }
    if (uv_loop_alive(&loop)) { close_everything(srv); uv_run(&loop, UV_RUN_DEFAULT); }
    uv_loop_close(&loop);
    conn_table_free(&conns);
    queue_destroy(&srv->loopq);
    queue_destroy(&srv->schedq);
    queue_destroy(&srv->persistq);
    stats_destroy(&srv->st);
    free(srv);
    return code;
}
