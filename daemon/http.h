/* daemon/http.h — the HTTP front door (docs/HTTP.md): OpenAI-compatible
 * completions and chat (JSON or server-sent events), models, health and
 * Prometheus metrics, served by libh2o on the daemon's libuv loop.
 *
 * Loop thread only. Each HTTP request that reaches the model is a
 * connection of its own for the compute and store threads: it gets a
 * connection id with HTTP_CONN_BIT set (msgpack connections never have it),
 * its requests go to the same queues as the msgpack socket's, and the loop
 * hands the typed events (daemon/event.h) that come back for such an id to
 * http_deliver, which encodes them as JSON. A client that goes away before
 * its response ended is a closed connection: its turn is cancelled at the
 * next token boundary and what the session holds is saved. */
#ifndef LIND_DAEMON_HTTP_H
#define LIND_DAEMON_HTTP_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include "daemon/msg.h"
#include "daemon/server.h"

#define HTTP_CONN_BIT (1ull << 63)

/* Listen on srv->opt.http_addr (when set): "PORT" binds 127.0.0.1,
 * "ADDR:PORT" / "[V6ADDR]:PORT" that address. Reads the bearer token from
 * srv->opt.http_token_file when set. 0, or a negative code with the reason
 * in err. */
int  http_start(server *srv, char *err, size_t errlen);
/* Parse --http's (or --listen's, `opt` names it) value ("PORT",
 * "ADDR:PORT", "[V6ADDR]:PORT") into *sa. 0, or -EINVAL with the reason in
 * err. */
int  http_parse_addr(const char *opt, const char *s, struct sockaddr_storage *sa, char *err, size_t errlen);
/* The bearer token of --http-token-file (its first line, 8..outlen-2
 * bytes) into out; HTTP and the TCP socket (--listen) share it. 0, or a
 * negative code with the reason in err. */
int  http_read_token(const char *path, char *out, size_t outlen, char *err, size_t errlen);
/* Events for an HTTP connection id (frees o). */
void http_deliver(server *srv, outmsg *o);
/* Shutdown began: stop accepting connections; requests get 503. */
void http_stop_listening(server *srv);
/* The loop is ending: close every HTTP handle (their close callbacks run in
 * the loop's last run). */
void http_close(server *srv);
/* After the loop closed: free the front door (srv->http becomes NULL). */
void http_free(server *srv);

#endif
