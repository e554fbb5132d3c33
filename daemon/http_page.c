/* daemon/http_page.c — the embedded chat page (daemon/http_page.h). */
#include "daemon/http_page.h"

#include <stddef.h>

/* $(BUILD)/gen/chat_page.c, made from daemon/chat_page.html. */
extern const unsigned char chat_page_html[];
extern const size_t chat_page_html_len;

void http_page_send(h2o_req_t *req)
{
    req->res.status = 200;
    req->res.reason = "OK";
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL,
                   H2O_STRLIT("text/html; charset=utf-8"));
    /* The page is the binary's: a new daemon may serve another one. */
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CACHE_CONTROL, NULL, H2O_STRLIT("no-cache"));
    /* Its script and style are inline and it talks to this origin only: the
     * browser refuses anything else (no external assets, by construction). */
    h2o_add_header_by_str(&req->pool, &req->res.headers, H2O_STRLIT("content-security-policy"), 0, NULL,
                          H2O_STRLIT("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                                     "connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; "
                                     "frame-ancestors 'none'"));
    h2o_add_header_by_str(&req->pool, &req->res.headers, H2O_STRLIT("x-content-type-options"), 0, NULL,
                          H2O_STRLIT("nosniff"));
    h2o_send_inline(req, (const char *)chat_page_html, chat_page_html_len);   /* sets the length; HEAD: no body */
}
