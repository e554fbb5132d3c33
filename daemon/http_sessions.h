/* daemon/http_sessions.h — the stored sessions, read over HTTP
 * (docs/HTTP.md, "Sessions over HTTP"): GET /v1/sessions lists them (the
 * socket's `list`), GET /v1/sessions/{name} shows one (its `info`: tokens,
 * times, and the tail of its transcript). Read-only: what a browser needs to
 * reopen a conversation (the chat page); writing stays with the turns
 * (X-Lind-Session, previous_response_id) and the socket's ops.
 *
 * This module only maps a path to the store request and the store's answer
 * to JSON; daemon/http_responses.c sends the one and receives the other as
 * it does for /v1/responses/{id}. Loop thread only. */
#ifndef LIND_DAEMON_HTTP_SESSIONS_H
#define LIND_DAEMON_HTTP_SESSIONS_H

#include <stddef.h>
#include <jansson.h>
#include "daemon/event.h"
#include "daemon/protocol.h"

#define HTTP_SESSIONS_PATH "/v1/sessions"

/* The request a GET of the raw request target `target` (n bytes, the query
 * ignored) asks for: OP_LIST for /v1/sessions, OP_INFO naming the session
 * for /v1/sessions/{name} (name %-encoded as in any URL). 0 with *r set, or
 * -ENOENT (another path, or a name no session can have). */
int http_sessions_request(const char *target, size_t n, op_request *r);

/* The JSON answer to that request's result (new reference; NULL: out of
 * memory): the list as {"object": "list", "data": [{session, tokens,
 * updated_ms, created_ms, bytes, origin}, ...]}, a session as {"object":
 * "session", session, tokens, ..., transcript: [{role, text}, ...]}: the
 * fields of docs/PROTOCOL.md's `list` and `info`, text as UTF-8 (a byte
 * that is not UTF-8 as U+FFFD). */
json_t *http_sessions_json(const evlist *l, const event *e);

#endif
