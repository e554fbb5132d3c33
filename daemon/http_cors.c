/* daemon/http_cors.c — CORS. See http_cors.h. */
#include "daemon/http_cors.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

int http_cors_parse(const char *spec, http_cors *c, char *err, size_t errlen)
{
    http_cors tmp;
    if (!c) c = &tmp;
    memset(c, 0, sizeof *c);
    const char *p = spec;
    while (1) {
        const char *e = strchr(p, ',');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        while (n && (*p == ' ')) { p++; n--; }
        while (n && p[n - 1] == ' ') n--;
        if (n == 1 && *p == '*') {
            c->any = 1;
        } else {
            int scheme = (n > 7 && !strncmp(p, "http://", 7)) ? 7 : (n > 8 && !strncmp(p, "https://", 8)) ? 8 : 0;
            int ok = scheme && n < sizeof c->origin[0];
            for (size_t i = scheme; ok && i < n; i++)
                ok = (unsigned char)p[i] > 0x20 && (unsigned char)p[i] < 0x7f && p[i] != '/';
            if (!ok) {
                snprintf(err, errlen, "--http-cors wants '*' or origins like https://example.com[:PORT] "
                         "(scheme, host, optional port, no path), comma-separated; got '%.*s'", (int)(n > 200 ? 200 : n), p);
                return -EINVAL;
            }
            if (c->n == HTTP_CORS_MAX) {
                snprintf(err, errlen, "--http-cors takes at most %d origins", HTTP_CORS_MAX);
                return -EINVAL;
            }
            memcpy(c->origin[c->n], p, n);
            c->origin[c->n][n] = 0;
            c->n++;
        }
        if (!e) break;
        p = e + 1;
    }
    return 0;
}

static const h2o_iovec_t *req_header(const h2o_req_t *req, const char *name)
{
    ssize_t i = h2o_find_header_by_str(&req->headers, name, strlen(name), -1);
    return i < 0 ? NULL : &req->headers.entries[i].value;
}

static void put(h2o_req_t *req, const char *name, const char *val, size_t len)
{
    h2o_iovec_t v = h2o_strdup(&req->pool, val, len);
    h2o_add_header_by_str(&req->pool, &req->res.headers, name, strlen(name), 0, NULL, v.base, v.len);
}

static int allowed(const http_cors *c, const h2o_iovec_t *o)
{
    if (c->any) return 1;
    for (int i = 0; i < c->n; i++)
        if (strlen(c->origin[i]) == o->len && !strncasecmp(c->origin[i], o->base, o->len)) return 1;
    return 0;
}

int http_cors_handle(const http_cors *c, h2o_req_t *req)
{
    if (!c->n && !c->any) return 0;
    const h2o_iovec_t *o = req_header(req, "origin");
    int preflight = o && h2o_memis(req->method.base, req->method.len, H2O_STRLIT("OPTIONS")) &&
                    req_header(req, "access-control-request-method");
    put(req, "vary", H2O_STRLIT("Origin"));
    if (!o || !allowed(c, o)) {
        if (!preflight) return 0;
        static const char body[] = "{\"error\":{\"message\":\"this origin may not call the API (--http-cors)\","
                                   "\"type\":\"invalid_request_error\",\"param\":null,\"code\":\"cors_origin_not_allowed\"}}";
        req->res.status = 403;
        req->res.reason = "Forbidden";
        put(req, "content-type", H2O_STRLIT("application/json"));
        h2o_send_inline(req, body, sizeof body - 1);
        return 1;
    }
    if (c->any) put(req, "access-control-allow-origin", H2O_STRLIT("*"));
    else put(req, "access-control-allow-origin", o->base, o->len);
    if (!preflight) {
        put(req, "access-control-expose-headers",
            H2O_STRLIT("X-Request-Id, X-Lind-Session, X-Lind-Seed, X-Lind-Ignored"));
        return 0;
    }
    put(req, "access-control-allow-methods", H2O_STRLIT("GET, POST, DELETE, OPTIONS"));
    put(req, "access-control-allow-headers",
        H2O_STRLIT("Authorization, Content-Type, X-Lind-Session, X-Request-Id, Idempotency-Key"));
    put(req, "access-control-max-age", H2O_STRLIT("600"));
    req->res.status = 204;
    req->res.reason = "No Content";
    h2o_send_inline(req, "", 0);
    return 1;
}
