/* daemon/http_log.c — the HTTP access log and request ids. See http_log.h. */
#include "daemon/http_log.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/time.h>
#include "daemon/reqlog.h"

/* A response header's value, or NULL. */
static const h2o_iovec_t *res_header(const h2o_req_t *req, const char *name)
{
    ssize_t i = h2o_find_header_by_str(&req->res.headers, name, strlen(name), -1);
    return i < 0 ? NULL : &req->res.headers.entries[i].value;
}

static int id_ok(const h2o_iovec_t *v)
{
    if (!v || v->len == 0 || v->len > HTTP_LOG_ID_MAX) return 0;
    for (size_t i = 0; i < v->len; i++)
        if ((unsigned char)v->base[i] <= 0x20 || (unsigned char)v->base[i] >= 0x7f) return 0;
    return 1;
}

void http_log_request_id(h2o_req_t *req)
{
    if (res_header(req, "x-request-id")) return;
    ssize_t i = h2o_find_header_by_str(&req->headers, H2O_STRLIT("x-request-id"), -1);
    h2o_iovec_t v;
    if (i >= 0 && id_ok(&req->headers.entries[i].value)) {
        v = h2o_strdup(&req->pool, req->headers.entries[i].value.base, req->headers.entries[i].value.len);
    } else {
        uint8_t r[16] = { 0 };
        if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r) {
            static uint64_t n;   /* no randomness: unique in this process all the same */
            struct timeval tv;
            gettimeofday(&tv, NULL);
            uint64_t a = (uint64_t)tv.tv_sec * 1000000u + (uint64_t)tv.tv_usec, b = ++n;
            memcpy(r, &a, 8);
            memcpy(r + 8, &b, 8);
        }
        char hex[33];
        for (int k = 0; k < 16; k++) snprintf(hex + 2 * k, 3, "%02x", r[k]);
        v = h2o_strdup(&req->pool, hex, 32);
    }
    h2o_add_header_by_str(&req->pool, &req->res.headers, H2O_STRLIT("x-request-id"), 0, NULL, v.base, v.len);
}

/* "ADDR:PORT" ("[V6]:PORT") of the client, or "-". */
static void peer(h2o_req_t *req, char *out, size_t cap)
{
    struct sockaddr_storage ss;
    socklen_t n = req->conn && req->conn->callbacks->get_peername
                      ? req->conn->callbacks->get_peername(req->conn, (struct sockaddr *)&ss) : 0;
    char ip[INET6_ADDRSTRLEN] = "";
    if (n && ss.ss_family == AF_INET && inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, ip, sizeof ip))
        snprintf(out, cap, "%s:%u", ip, ntohs(((struct sockaddr_in *)&ss)->sin_port));
    else if (n && ss.ss_family == AF_INET6 &&
             inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, ip, sizeof ip))
        snprintf(out, cap, "[%s]:%u", ip, ntohs(((struct sockaddr_in6 *)&ss)->sin6_port));
    else snprintf(out, cap, "-");
}

/* n bytes of s as a C string in buf (cut at cap - 1). */
static const char *cstr(char *buf, size_t cap, const char *s, size_t n)
{
    if (n >= cap) n = cap - 1;
    memcpy(buf, s, n);
    buf[n] = 0;
    for (size_t i = 0; i < n; i++)
        if (!buf[i]) buf[i] = '?';   /* a NUL in a path must not end the value early */
    return buf;
}

static void log_access(h2o_logger_t *self, h2o_req_t *req)
{
    (void)self;
    char tmp[1100], method[40], path[1100], session[300], rid[300], client[80];
    reqlog_value(method, sizeof method, req->method.len ? cstr(tmp, 32, req->method.base, req->method.len) : "-");
    reqlog_value(path, sizeof path, req->path.len ? cstr(tmp, 512, req->path.base, req->path.len) : "-");
    const h2o_iovec_t *s = res_header(req, "x-lind-session");
    reqlog_value(session, sizeof session, s ? cstr(tmp, 256, s->base, s->len) : "-");
    const h2o_iovec_t *r = res_header(req, "x-request-id");
    reqlog_value(rid, sizeof rid, r ? cstr(tmp, HTTP_LOG_ID_MAX + 1, r->base, r->len) : "-");
    peer(req, client, sizeof client);
    struct timeval now;
    gettimeofday(&now, NULL);
    const struct timeval *t0 = &req->timestamps.request_begin_at;
    double ms = t0->tv_sec ? (double)(now.tv_sec - t0->tv_sec) * 1e3 + (double)(now.tv_usec - t0->tv_usec) / 1e3 : 0;
    if (ms < 0) ms = 0;
    lind_log_kv(REQLOG_INFO, "access", "method=%s path=%s status=%d bytes=%zu duration_ms=%.2f client=%s "
                "session=%s request_id=%s proto=HTTP/%d.%d", method, path, req->res.status ? req->res.status : 0,
                req->bytes_sent, ms, client, session, rid, req->version >> 8, req->version & 0xff);
}

void http_log_register(h2o_pathconf_t *path)
{
    h2o_logger_t *l = h2o_create_logger(path, sizeof *l);
    l->log_access = log_access;
}
