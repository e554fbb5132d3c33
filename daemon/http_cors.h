/* daemon/http_cors.h — CORS for the HTTP front door (--http-cors,
 * docs/HTTP.md "CORS"): which browser pages may call the API.
 *
 * Off unless --http-cors names origins ("https://a.example,http://localhost:3000",
 * or "*" for any). An allowed Origin gets Access-Control-Allow-Origin (the
 * origin itself, or "*" under "*"), Vary: Origin and the lind headers
 * exposed; a preflight (OPTIONS with Origin and
 * Access-Control-Request-Method) from it is answered 204 before the bearer
 * token is asked for (browsers send none on a preflight). Credentials are
 * never allowed (no Access-Control-Allow-Credentials): a page sends the
 * bearer token itself. A preflight from an origin not listed gets 403.
 * Loop thread only, except http_cors_check (any thread). */
#ifndef LIND_DAEMON_HTTP_CORS_H
#define LIND_DAEMON_HTTP_CORS_H

#include <stddef.h>
#include <h2o.h>

#define HTTP_CORS_MAX 16   /* origins in --http-cors */

typedef struct http_cors {
    int    n;                        /* origins listed */
    int    any;                      /* "*" was given (n = 0, any = 0: CORS off) */
    char   origin[HTTP_CORS_MAX][256];
} http_cors;

/* Parse --http-cors's value into c (c may be NULL: only check it). 0, or
 * -EINVAL with the reason in err. */
int http_cors_parse(const char *spec, http_cors *c, char *err, size_t errlen);
/* A request arrived: 1 when it was a preflight and is answered (204, or
 * 403 for an origin not allowed), else 0 after putting the CORS headers
 * its answer carries (none for a request from no allowed origin). */
int http_cors_handle(const http_cors *c, h2o_req_t *req);

#endif
