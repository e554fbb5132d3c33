/* daemon/http_log.h — the HTTP access log and request ids (docs/HTTP.md,
 * "Access log and request ids").
 *
 * Every HTTP request h2o answers gets one line in the daemon's log, in its
 * one form (daemon/reqlog.h), at level info:
 *   2026-11-27T18:40:20.123Z info access method=POST path=/v1/completions
 *     status=200 bytes=312 duration_ms=41.20 client=127.0.0.1:50512
 *     session=resp-0123456789abcdef request_id=7f3a... proto=HTTP/1.1
 * written when h2o is done with the request (answered, or its client gone).
 * `session` is the X-Lind-Session the answer carried ("-" when none), `bytes`
 * the body bytes h2o sent.
 *
 * Every answer carries an X-Request-Id: the request's own when it sent one
 * of 1..HTTP_LOG_ID_MAX visible ASCII bytes, else a fresh one (32 random hex
 * digits). Loop thread only. */
#ifndef LIND_DAEMON_HTTP_LOG_H
#define LIND_DAEMON_HTTP_LOG_H

#include <h2o.h>

#define HTTP_LOG_ID_MAX 128

/* Log every request answered under this path configuration. */
void http_log_register(h2o_pathconf_t *path);
/* Put the request's X-Request-Id on its answer (once; later calls keep it). */
void http_log_request_id(h2o_req_t *req);

#endif
