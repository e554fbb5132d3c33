/* daemon/http_page.h — the chat page (docs/HTTP.md, "The chat page"):
 * `GET /` answers one self-contained HTML page that talks to the API of
 * the daemon serving it (streaming chat, sampling settings, the stored
 * conversations, forks from earlier answers).
 *
 * The page is daemon/chat_page.html, kept in the tree and compiled into the
 * binary (the Makefile turns it into $(BUILD)/gen/chat_page.c): no build
 * step of its own, no external assets, nothing read from disk at run time.
 * It holds no secrets, so it is served without the bearer token, as
 * /health is; the API calls it makes still need the token, which the user
 * pastes into the page. Loop thread only. */
#ifndef LIND_DAEMON_HTTP_PAGE_H
#define LIND_DAEMON_HTTP_PAGE_H

#include <h2o.h>

/* Answer req (GET or HEAD) with the page. */
void http_page_send(h2o_req_t *req);

#endif
