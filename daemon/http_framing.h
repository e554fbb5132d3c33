/* daemon/http_framing.h — refusing HTTP/1 requests whose body length is
 * ambiguous (docs/HTTP.md, "Request smuggling").
 *
 * RFC 9112 6.3: Content-Length headers that disagree, or a Content-Length
 * beside Transfer-Encoding, leave two readings of where the body ends. A
 * proxy in front may read it one way while the server reads it the other,
 * and the bytes one of them takes for the next request were never checked
 * by the other (request smuggling). libh2o 2.2 serves such a request: it
 * takes the first Content-Length, or the chunked coding, and drops those
 * headers from the request it hands on, so the check reads the request's
 * head where libh2o keeps it until the request ends (the start of its
 * socket's input buffer). Loop thread only. */
#ifndef LIND_DAEMON_HTTP_FRAMING_H
#define LIND_DAEMON_HTTP_FRAMING_H

#include <h2o.h>

/* NULL when req's framing is unambiguous (or it is not HTTP/1), else why
 * (a static sentence): refuse it with 400 and close the connection. */
const char *http_framing_check(h2o_req_t *req);

#endif
