/* daemon/http_listen.c — the HTTP front door's listening socket and
 * accepted connections, the answers libh2o gives before any handler runs,
 * and its start and shutdown (http.h's http_start .. http_free). See
 * http_impl.h. */
#include "daemon/http_impl.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <h2o.h>
#include "daemon/http_log.h"
#include "kernels/clock.h"

#define HTTP_SNDBUF  (256 << 10)   /* SO_SNDBUF of an accepted connection */

/* The newest modification time of the model's files (the model directory's
 * entries, or the file itself): when the served model was made. The
 * daemon's start when none can be read. */
static int64_t model_mtime(const char *path)
{
    struct stat st;
    int64_t newest = 0;
    if (stat(path, &st) == 0 && !S_ISDIR(st.st_mode)) newest = st.st_mtime;
    DIR *d = newest ? NULL : opendir(path);
    for (struct dirent *de; d && (de = readdir(d));) {
        char p[2048];
        snprintf(p, sizeof p, "%s/%s", path, de->d_name);
        if (de->d_name[0] != '.' && stat(p, &st) == 0 && S_ISREG(st.st_mode) && st.st_mtime > newest)
            newest = st.st_mtime;
    }
    if (d) closedir(d);
    return newest > 0 ? newest : clock_wall_ms() / 1000;
}

/* ---- connections ------------------------------------------------------------------------------ */

static unsigned n_sockets;   /* accepted TCP handles not yet closed (one front door per process) */
static http_server *closing;  /* http_close is waiting for h2o to close its connections */

static void finish_close(http_server *hs);

static void on_socket_closed(uv_handle_t *h)
{
    n_sockets--;
    free(h);
    if (closing && !n_sockets) finish_close(closing);
}

static void on_accept(uv_stream_t *l, int status)
{
    http_server *hs = l->data;
    if (status < 0) return;
    uv_tcp_t *c = calloc(1, sizeof *c);
    if (!c) return;
    uv_tcp_init(l->loop, c);
    n_sockets++;
    if (uv_accept(l, (uv_stream_t *)c) != 0) {
        uv_close((uv_handle_t *)c, on_socket_closed);
        return;
    }
    uv_tcp_nodelay(c, 1);   /* a streamed token goes out at once */
    /* A fixed kernel send buffer (the kernel doubles it): with autotuning a
     * client that stops reading could park megabytes per connection in the
     * kernel, outside --max-output and --max-total-bytes. 256 KiB carries
     * any one stream's rate with room to spare. */
    int sndbuf = HTTP_SNDBUF;
    uv_send_buffer_size((uv_handle_t *)c, &sndbuf);
    h2o_socket_t *sock = h2o_uv_socket_create((uv_stream_t *)c, on_socket_closed);
    h2o_accept(&hs->accept, sock);
}

int http_parse_addr(const char *opt, const char *s, struct sockaddr_storage *sa, char *err, size_t errlen)
{
    char host[64] = "127.0.0.1";
    const char *port = s;
    const char *colon = strrchr(s, ':');
    if (colon) {
        size_t hl = (size_t)(colon - s);
        const char *h = s;
        if (hl >= 2 && s[0] == '[' && s[hl - 1] == ']') { h = s + 1; hl -= 2; }
        if (hl == 0 || hl >= sizeof host) {
            snprintf(err, errlen, "%s wants [ADDR:]PORT, got '%s'", opt, s);
            return -EINVAL;
        }
        memcpy(host, h, hl);
        host[hl] = 0;
        port = colon + 1;
    }
    char *end;
    long p = strtol(port, &end, 10);
    if (!*port || *end || p < 0 || p > 65535) {
        snprintf(err, errlen, "%s wants [ADDR:]PORT with a port in 0..65535, got '%s'", opt, s);
        return -EINVAL;
    }
    if (uv_ip4_addr(host, (int)p, (struct sockaddr_in *)sa) != 0 &&
        uv_ip6_addr(host, (int)p, (struct sockaddr_in6 *)sa) != 0) {
        snprintf(err, errlen, "%s: '%s' is not an IPv4 or IPv6 address", opt, host);
        return -EINVAL;
    }
    return 0;
}

int http_read_token(const char *path, char *out, size_t outlen, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "--http-token-file %s: %s", path, strerror(errno));
        return -errno;
    }
    if (!fgets(out, (int)outlen, f)) out[0] = 0;
    fclose(f);
    out[strcspn(out, "\r\n")] = 0;
    if (strlen(out) < 8 || strlen(out) >= outlen - 1) {
        snprintf(err, errlen, "--http-token-file %s: the token (its first line) must be 8..%zu bytes",
                 path, outlen - 2);
        return -EINVAL;
    }
    return 0;
}

/* ---- libh2o's own refusals ------------------------------------------------------------------ */

/* libh2o refuses a request body before any handler runs: a Content-Length
 * over its limit at once, a chunked body as soon as its decoded bytes pass
 * the limit (so no more than about --http-max-body is ever buffered), and
 * broken body framing (400) or an unknown Expect (417). It answers those
 * with a plain-text body on the host's fallback path, which no request our
 * handler sees is bound to: this filter on that path rewrites them into
 * the OpenAI-style error object every other refusal carries. */
typedef struct early_filter {
    h2o_filter_t  super;
    http_server  *hs;
} early_filter;

typedef struct early_ostream {
    h2o_ostream_t super;
    http_server  *hs;
} early_ostream;

static void early_send(h2o_ostream_t *self, h2o_req_t *req, h2o_iovec_t *bufs, size_t bufcnt,
                       h2o_send_state_t state)
{
    http_server *hs = ((early_ostream *)self)->hs;
    char why[256] = "";   /* libh2o's own words */
    size_t wn = 0;
    for (size_t i = 0; i < bufcnt && wn < sizeof why - 1; i++) {
        size_t k = bufs[i].len < sizeof why - 1 - wn ? bufs[i].len : sizeof why - 1 - wn;
        memcpy(why + wn, bufs[i].base, k);
        wn += k;
    }
    why[wn] = 0;
    char msg[512];
    const char *code = "invalid_request";
    int status = req->res.status;
    if (status == 413) {
        code = "body_too_large";   /* as on_req's own 413 */
        snprintf(msg, sizeof msg, "the request body is over the limit of %zu bytes (--http-max-body)",
                 hs->srv->opt.http_max_body);
    } else if (status == 417) {
        code = "expectation_failed";
        snprintf(msg, sizeof msg, "the Expect header is not understood (only 100-continue is): %s", why);
    } else {
        snprintf(msg, sizeof msg, "the request body cannot be read: %s", why);
    }
    hs->req_total[status >= 500 ? OC_SERVER_ERR : OC_CLIENT_ERR]++;
    json_t *j = http_error_object(msg, status >= 500 ? "server_error" : "invalid_request_error", code, NULL);
    char *body = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    h2o_iovec_t out = body ? h2o_strdup(&req->pool, body, strlen(body)) : h2o_iovec_init(H2O_STRLIT("{}"));
    free(body);
    req->res.content_length = out.len;
    h2o_ostream_send_next(self, req, &out, bufcnt ? 1 : 0, state);   /* HEAD: headers only */
}

static void early_setup(h2o_filter_t *self, h2o_req_t *req, h2o_ostream_t **slot)
{
    http_log_request_id(req);
    if (req->res.status >= 400) {
        ssize_t ct = h2o_find_header(&req->res.headers, H2O_TOKEN_CONTENT_TYPE, -1);
        if (ct >= 0) req->res.headers.entries[ct].value = h2o_iovec_init(H2O_STRLIT("application/json"));
        else h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL,
                            H2O_STRLIT("application/json"));
        early_ostream *os = (early_ostream *)h2o_add_ostream(req, sizeof *os, slot);
        os->super.do_send = early_send;
        os->hs = ((early_filter *)self)->hs;
        slot = &os->super.next;
    }
    h2o_setup_next_ostream(req, slot);
}

int http_start(server *srv, char *err, size_t errlen)
{
    if (!srv->opt.http_addr) return 0;
    struct sockaddr_storage sa;
    memset(&sa, 0, sizeof sa);
    int rc = http_parse_addr("--http", srv->opt.http_addr, &sa, err, errlen);
    if (rc) return rc;
    http_server *hs = calloc(1, sizeof *hs);
    if (!hs) { snprintf(err, errlen, "out of memory"); return -ENOMEM; }
    hs->srv = srv;
    if (srv->opt.http_cors && (rc = http_cors_parse(srv->opt.http_cors, &hs->cors, err, errlen)) != 0) {
        free(hs);
        return rc;
    }
    hs->resps = calloc(RESP_SLOTS, sizeof *hs->resps);
    if (srv->opt.http_token_file &&
        (rc = http_read_token(srv->opt.http_token_file, hs->token, sizeof hs->token, err, errlen))) {
        free(hs->resps);
        free(hs);
        return rc;
    }
    if ((rc = chat_template_parse(&hs->tpl, srv->chat_template, err, errlen)) != 0) {
        free(hs->resps);
        free(hs);
        return rc;
    }
    const char *base = strrchr(srv->model_path, '/');
    snprintf(hs->model_id, sizeof hs->model_id, "%.127s", base && base[1] ? base + 1 : srv->model_path);
    hs->model_created = model_mtime(srv->model_path);
    srv->http = hs;
    uv_timer_init(srv->loop, &hs->reaper);
    hs->reaper.data = hs;
    uv_timer_init(srv->loop, &hs->tick);
    hs->tick.data = hs;
    uv_timer_start(&hs->tick, http_on_tick, 1000, 1000);
    uv_timer_init(srv->loop, &hs->flush);
    hs->flush.data = hs;
    uv_timer_init(srv->loop, &hs->linger);
    hs->linger.data = hs;
    h2o_config_init(&hs->config);
    hs->config.server_name = h2o_iovec_init(H2O_STRLIT("lind"));
    /* libh2o refuses a body over its limit itself, before reading it
     * (early_setup gives that answer its error object). Its chunked check
     * refuses a body of exactly the limit, hence +1; a Content-Length of
     * limit + 1 reaches on_req, which refuses it the same way. */
    hs->config.max_request_entity_size = srv->opt.http_max_body + 1;
    hs->config.http1.req_timeout = 1000ull * srv->opt.http_idle_timeout;
    hs->config.http2.idle_timeout = 1000ull * srv->opt.http_idle_timeout;
    hs->config.http1.upgrade_to_http2 = srv->opt.http2;   /* --http2: h2c by prior knowledge or Upgrade */
    h2o_hostconf_t *host = h2o_config_register_host(&hs->config, h2o_iovec_init(H2O_STRLIT("default")), 65535);
    h2o_pathconf_t *path = h2o_config_register_path(host, "/", 0);
    http_handler_register(path, hs);
    http_log_register(path);
    http_log_register(&host->fallback_path);
    early_filter *ef = (early_filter *)h2o_create_filter(&host->fallback_path, sizeof *ef);
    ef->super.on_setup_ostream = early_setup;
    ef->hs = hs;
    h2o_context_init(&hs->ctx, srv->loop, &hs->config);
    hs->ctx_ready = 1;
    hs->accept.ctx = &hs->ctx;
    hs->accept.hosts = hs->config.hosts;
    uv_tcp_init(srv->loop, &hs->listener);
    hs->listener.data = hs;
    hs->listening = 1;
    if ((rc = uv_tcp_bind(&hs->listener, (struct sockaddr *)&sa, 0)) != 0 ||
        (rc = uv_listen((uv_stream_t *)&hs->listener, 511, on_accept)) != 0) {
        snprintf(err, errlen, "HTTP: listening on %s: %s", srv->opt.http_addr, uv_strerror(rc));
        return rc;
    }
    struct sockaddr_storage bound;
    int blen = sizeof bound;
    char ip[64] = "?";
    int port = 0;
    if (uv_tcp_getsockname(&hs->listener, (struct sockaddr *)&bound, &blen) == 0) {
        if (bound.ss_family == AF_INET6) {
            uv_ip6_name((struct sockaddr_in6 *)&bound, ip, sizeof ip);
            port = ntohs(((struct sockaddr_in6 *)&bound)->sin6_port);
        } else {
            uv_ip4_name((struct sockaddr_in *)&bound, ip, sizeof ip);
            port = ntohs(((struct sockaddr_in *)&bound)->sin_port);
        }
    }
    lind_log(REQLOG_INFO, "start", "HTTP on %s:%d%s", ip, port, hs->token[0] ? " (bearer token)" : "");
    return 0;
}

void http_stop_listening(server *srv)
{
    http_server *hs = srv->http;
    if (!hs || !hs->listening) return;
    hs->listening = 0;
    uv_close((uv_handle_t *)&hs->listener, NULL);
    uv_timer_stop(&hs->tick);
}

static void close_walk(uv_handle_t *h, void *arg)
{
    (void)arg;
    /* What is left of h2o's (client sockets, its timers) when the loop ends:
     * every turn is saved by now, the clients just lose the connection. */
    if (!uv_is_closing(h) && (h->type == UV_TCP || h->type == UV_TIMER)) uv_close(h, NULL);
}

/* Every connection is closed: the reaper's last requests, then h2o's
 * context (its timers). */
static void finish_close(http_server *hs)
{
    closing = NULL;
    if (!uv_is_closing((uv_handle_t *)&hs->linger)) uv_close((uv_handle_t *)&hs->linger, NULL);
    if (!uv_is_closing((uv_handle_t *)&hs->reaper)) {
        http_on_reap(&hs->reaper);
        uv_close((uv_handle_t *)&hs->reaper, NULL);
    }
    if (hs->ctx_ready) {
        hs->ctx_ready = 0;
        h2o_context_dispose(&hs->ctx);   /* closes its timers */
    }
}

/* A client socket of h2o's: shut it down both ways, so that h2o's pending
 * write fails and its read sees the end, and h2o closes it on its own path
 * (closing it under h2o while a write is pending makes h2o close it a
 * second time from the write's callback, which libuv refuses by abort). */
static void shutdown_walk(uv_handle_t *h, void *arg)
{
    http_server *hs = arg;
    uv_os_fd_t fd;
    if (h->type == UV_TCP && h != (uv_handle_t *)&hs->listener && !uv_is_closing(h) && uv_fileno(h, &fd) == 0)
        shutdown(fd, SHUT_RDWR);
}

/* LINGER_MS after the shutdowns, connections h2o still holds are dropped
 * as they are (their memory stays h2o's until the process ends). */
#define LINGER_MS 2000
static void on_linger(uv_timer_t *t)
{
    http_server *hs = t->data;
    if (!closing) return;
    lind_log(REQLOG_WARN, "stop", "HTTP: %u connection(s) did not close within %d ms of shutdown; dropping them",
            n_sockets, LINGER_MS);
    closing = NULL;
    hs->leaked = 1;
    http_on_reap(&hs->reaper);
    uv_walk(hs->srv->loop, close_walk, NULL);
}

void http_close(server *srv)
{
    http_server *hs = srv->http;
    if (!hs || hs->closed) return;
    hs->closed = 1;
    http_stop_listening(srv);
    if (!uv_is_closing((uv_handle_t *)&hs->tick)) uv_close((uv_handle_t *)&hs->tick, NULL);
    if (!uv_is_closing((uv_handle_t *)&hs->flush)) uv_close((uv_handle_t *)&hs->flush, NULL);
    if (!hs->ctx_ready || !n_sockets) { finish_close(hs); return; }
    /* Connections h2o still holds (HTTP/1 in libh2o 2.2 has no graceful
     * close): every turn is saved by now, their clients just lose the
     * connection, which h2o closes once its socket fails. */
    closing = hs;
    uv_walk(srv->loop, shutdown_walk, hs);
    uv_timer_start(&hs->linger, on_linger, LINGER_MS, 0);
}

/* Kept reachable when h2o's connections could not be closed cleanly. */
static http_server *leftover;

void http_free(server *srv)
{
    http_server *hs = srv->http;
    if (!hs) return;
    srv->http = NULL;
    hs->freeing = 1;
    for (size_t b = 0; b < HREQ_BUCKETS; b++)
        while (hs->tab[b]) http_hreq_free(hs->tab[b]);
    if (hs->leaked) { leftover = hs; return; }
    if (hs->ctx_ready) h2o_context_dispose(&hs->ctx);
    h2o_config_dispose(&hs->config);
    chat_template_free(&hs->tpl);
    for (size_t i = 0; hs->resps && i < RESP_SLOTS; i++) {
        json_decref(hs->resps[i].obj);
        json_decref(hs->resps[i].items);
    }
    free(hs->resps);
    free(hs);
}
