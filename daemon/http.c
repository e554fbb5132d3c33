/* daemon/http.c — the HTTP front door on libh2o: routing, a request's
 * stages, the text it streams and its answer. See http.h, docs/HTTP.md, and
 * http_impl.h for the files it shares the work with.
 *
 * A request for the model (n = 1) is one trip, a generate to the compute
 * thread on the request's connection id: a continued conversation
 * (previous_response_id, or a stored session whose conversation is this
 * request's prefix) starts from that session's stored state (start_from:
 * when it is gone, previous_response_id fails not_found and a chat feeds
 * its whole conversation), and the turn's commit also keeps the copy a
 * later request looks for (keep_as: a named session's response id; a
 * stateless chat's chat-H, named once the reply is known). Other stages,
 * each a request of its own on that id:
 *   prefill, fork n  (n > 1) feed the prompt once into the response's
 *              session, copied first from the session it continues (fork
 *              in), then fork it to every other choice's session;
 *   fork out   a copy for a retry answered from an earlier try's record
 *              (Idempotency-Key), which committed nothing;
 *   drop       store: false, or a client gone before it was told anything:
 *              the answer's sessions and copies are deleted.
 * The response ends (JSON answer, or `data: [DONE]`) once the last stage is
 * committed, so what it names is durable when the client has it. */
#include "daemon/http_impl.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <h2o.h>
#include "daemon/commands.h"
#include "daemon/conn.h"
#include "daemon/errors.h"
#include "daemon/http_framing.h"
#include "daemon/http_log.h"
#include "daemon/http_page.h"
#include "daemon/http_sessions.h"
#include "kernels/clock.h"
#include "recurrent/jsonfsm.h"

/* ---- small helpers ---------------------------------------------------------- */

static hreq *lookup(http_server *hs, uint64_t id)
{
    for (hreq *h = hs->tab[id % HREQ_BUCKETS]; h; h = h->hnext)
        if (h->id == id) return h;
    return NULL;
}

static void unlink_req(http_server *hs, hreq *h)
{
    hreq **pp = &hs->tab[h->id % HREQ_BUCKETS];
    while (*pp && *pp != h) pp = &(*pp)->hnext;
    if (*pp) { *pp = h->hnext; hs->nreq--; }
}

static void post_sched(http_server *hs, uint64_t id, dmsg_kind kind)
{
    if (hs->freeing) return;   /* the compute thread has ended */
    dmsg *m = dmsg_new(kind, id);
    if (m) queue_push(&hs->srv->schedq, &m->node);
}

/* A request's bytes count in the daemon's --max-total-bytes budget as a
 * socket connection's do (daemon/conn.h): its body (libh2o holds it until
 * the request ends: request bytes in flight) and its buffers, the output
 * waiting for the client (pend, wbuf) and the reply's text. Called after
 * whatever grows or frees them. */
static void account(hreq *h)
{
    size_t now = h->pend.cap + h->wbuf.cap;
    for (int i = 0; i < h->n; i++)
        now += h->ch[i].text.cap + h->ch[i].pre.cap + h->ch[i].post.cap + h->ch[i].lp_end.cap;
    if (now > h->acct) conn_budget_add(h->hs->srv, now - h->acct, 0);
    else if (now < h->acct) conn_budget_sub(h->hs->srv, h->acct - now, 0);
    h->acct = now;
}

/* Its client is gone while its turn is pending: was the client told
 * nothing, not even the session's name (nothing streamed, a session this
 * request names afresh; one continued from another is made by the turn's
 * commit too, n = 1)? Then a session the turn made is garbage nobody can
 * reach, and the compute thread does not keep it (M_CONN_ABANDONED). */
static int abandoned(const hreq *h)
{
    return (h->kind == HK_COMPLETION || h->kind == HK_CHAT || h->kind == HK_RESPONSES) && !h->started &&
           h->n == 1 && !strcmp(h->session, h->resp_id);
}

/* Free a request's state; the compute thread forgets its connection. */
void http_hreq_free(hreq *h)
{
    http_server *hs = h->hs;
    unlink_req(hs, h);
    post_sched(hs, h->id, h->abandoned ? M_CONN_ABANDONED : M_CONN_CLOSED);
    bytebuf_free(&h->pend);
    bytebuf_free(&h->wbuf);
    for (int i = 0; i < h->n; i++) {
        hchoice *c = &h->ch[i];
        bytebuf_free(&c->text);
        bytebuf_free(&c->pre);
        bytebuf_free(&c->post);
        bytebuf_free(&c->lp_end);
        json_decref(c->lp);
    }
    account(h);
    free(h->ch);
    json_decref(h->input_items);
    json_decref(h->rparams);
    if (h->body_bytes) conn_budget_sub(hs->srv, h->body_bytes, h->body_bytes);
    free(h->full_text);
    free(h->new_text);
    json_decref(h->messages);
    op_request_free(&h->gen_req);
    free(h->ignored);
    free(h);
}

void http_on_reap(uv_timer_t *t)
{
    http_server *hs = t->data;
    while (hs->dead) {
        hreq *h = hs->dead;
        hs->dead = h->dead_next;
        http_hreq_free(h);
    }
}

/* The h2o request is gone (answered and done, or the client left): if the
 * turn is still running, closing its connection cancels it. Freed from the
 * loop's next turn, as h2o may dispose a request inside a call of ours. */
static void on_pool_dispose(void *p)
{
    hreq *h = *(hreq **)p;
    if (!h) return;
    if (h->req && h->pending_backend && !h->gone_posted) {
        h->hs->req_total[OC_GONE]++;
        h->abandoned = abandoned(h);
    }
    h->req = NULL;
    h->pending_backend = 0;
    h->dead_next = h->hs->dead;
    h->hs->dead = h;
    uv_timer_start(&h->hs->reaper, http_on_reap, 0, 0);
}

void http_track(hreq *h, h2o_req_t *req)
{
    http_server *hs = h->hs;
    h->req = req;
    hreq **hook = h2o_mem_alloc_shared(&req->pool, sizeof *hook, on_pool_dispose);
    *hook = h;
    h->hnext = hs->tab[h->id % HREQ_BUCKETS];
    hs->tab[h->id % HREQ_BUCKETS] = h;
    hs->nreq++;
}

static void on_stop(h2o_generator_t *g, h2o_req_t *req)
{
    (void)req;
    hreq *h = (hreq *)((char *)g - offsetof(hreq, gen));
    if (h->pending_backend && !h->gone_posted) {
        h->hs->req_total[OC_GONE]++;
        h->abandoned = abandoned(h);
    }
    h->req = NULL;   /* h2o disposes the request next (on_pool_dispose frees h) */
    h->pending_backend = 0;
}

void http_add_header(h2o_req_t *req, const char *name, const char *val)
{
    h2o_iovec_t v = h2o_strdup(&req->pool, val, strlen(val));
    h2o_add_header_by_str(&req->pool, &req->res.headers, name, strlen(name), 0, NULL, v.base, v.len);
}

/* Answer with a JSON body (the request ends). */
void http_send_json(h2o_req_t *req, int status, const char *reason, json_t *j)
{
    char *body = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    req->res.status = status;
    req->res.reason = reason;
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL,
                   H2O_STRLIT("application/json"));
    h2o_send_inline(req, body ? body : "{}", body ? strlen(body) : 2);
    free(body);
}

static const char *status_reason(int status)
{
    switch (status) {
    case 200: return "OK";
    case 204: return "No Content";
    case 403: return "Forbidden";
    case 499: return "Client Closed Request";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 409: return "Conflict";
    case 413: return "Payload Too Large";
    case 421: return "Misdirected Request";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 503: return "Service Unavailable";
    default:  return "Internal Server Error";
    }
}

json_t *http_error_object(const char *message, const char *type, const char *code, const char *param)
{
    return json_pack("{s:{s:s, s:s, s:s?, s:s?}}", "error", "message", message, "type", type,
                     "param", param, "code", code);
}

/* An OpenAI-style error answer. */
void http_send_error(http_server *hs, h2o_req_t *req, int status, const char *code,
                     const char *param, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const char *type = status == 401 ? "authentication_error" : status == 429 ? "rate_limit_error"
                     : status >= 500 ? "server_error" : "invalid_request_error";
    hs->req_total[status >= 500 ? OC_SERVER_ERR : OC_CLIENT_ERR]++;
    http_send_json(req, status, status_reason(status), http_error_object(msg, type, code, param));
}

/* A lind error code as an HTTP status. */
int http_code_status(proto_code c)
{
    switch (c) {
    case PE_BAD_REQUEST: case PE_DECODE: case PE_BAD_NAME: case PE_UNKNOWN_OP: return 400;
    case PE_TOO_LARGE: return 413;
    case PE_NOT_FOUND: return 404;
    case PE_EXISTS: case PE_BUSY: return 409;
    case PE_LIMIT: return 429;
    case PE_SHUTTING_DOWN: case PE_UNAVAILABLE: return 503;
    case PE_MOVED: return 421;      /* Misdirected Request: another node holds the session */
    case PE_CONFLICT: return 409;   /* the session changed elsewhere; the turn was not saved */
    case PE_INSUFFICIENT_STORAGE: return 507;   /* past --max-store-bytes, or the disk is full */
    case PE_UNAUTHORIZED: return 401;
    default: return 500;
    }
}

/* A fresh unique name: resp- and 16 random hex digits. */
static void new_resp_id(char *out, size_t n)
{
    uint64_t r = 0;
    if (getrandom(&r, sizeof r, 0) != (ssize_t)sizeof r) r = clock_mono_ns() ^ ((uint64_t)clock_wall_ms() << 20);
    snprintf(out, n, "resp-%016llx", (unsigned long long)r);
}

/* A seed for a request that gave none: fresh randomness, so that asking
 * twice gives two answers (as OpenAI's API does); 63 bits, so that the
 * client may send it back as `seed` to reproduce the answer. */
static uint64_t fresh_seed(void)
{
    static uint64_t fallback;
    uint64_t r;
    if (getrandom(&r, sizeof r, 0) != (ssize_t)sizeof r) {
        /* splitmix64 over the clock and a counter: no two requests alike */
        uint64_t z = (fallback += 0x9e3779b97f4a7c15ull) ^ clock_mono_ns();
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        r = z ^ (z >> 31);
    }
    return r & INT64_MAX;
}

/* The headers every 200 answer of a turn carries. */
void http_turn_headers(hreq *h, h2o_req_t *req)
{
    if (h->kind == HK_RESP_ADMIN) return;
    char seed[24];
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)h->seed);
    http_add_header(req, "x-lind-session", h->session);
    http_add_header(req, "x-lind-seed", seed);
    if (h->prompt_cut) {   /* no token came, so the headers are still unsent: say how much was fed */
        char fb[48];
        snprintf(fb, sizeof fb, "%llu/%zu", (unsigned long long)h->fed_bytes, h->prompt_bytes);
        http_add_header(req, "x-lind-prompt-cut", fb);
    }
    if (h->ignored) http_add_header(req, "x-lind-ignored", h->ignored);
}

/* The request log's line for a completion or chat request. */
static void log_request(hreq *h, int status, const char *outcome)
{
    if (h->kind != HK_COMPLETION && h->kind != HK_CHAT && h->kind != HK_RESPONSES) return;
    reqlog_http_info li = { .id = h->resp_id, .endpoint = h->kind == HK_CHAT ? "chat" : h->kind == HK_RESPONSES
                            ? "responses" : "completions",
                            .session = h->session, .user = h->user, .status = status, .outcome = outcome };
    reqlog_http(&h->hs->srv->log, &li);
}

/* ---- streaming text ----------------------------------------------------------------- */

/* Look for the request's stop strings in the text that arrived: the reply
 * is cut where the first one starts (OpenAI returns text without it). */
static void find_stop(hreq *h, hchoice *c)
{
    if (!h->n_stop || c->stop_at != SIZE_MAX) return;
    size_t from = c->searched > h->max_stop ? c->searched - h->max_stop : 0;
    size_t best = SIZE_MAX;
    for (int i = 0; i < h->n_stop; i++) {
        const uint8_t *hit = memmem(c->text.p + from, c->text.n - from, h->stop[i], h->stop_len[i]);
        if (hit && (size_t)(hit - (uint8_t *)c->text.p) < best) best = (size_t)(hit - (uint8_t *)c->text.p);
    }
    c->stop_at = best;
    c->searched = c->text.n;
}

/* How much of the text may be streamed now: never past a stop string, not
 * the last bytes that could still begin one, not into a UTF-8 sequence
 * (recurrent/stophold.h, lindctl chat's rule too). */
static size_t streamable(hreq *h, hchoice *c, int final)
{
    const uint8_t *p = (const uint8_t *)c->text.p;
    size_t lim = c->stop_at != SIZE_MAX ? c->stop_at : c->text.n;
    if (!final) lim = c->stop_at != SIZE_MAX ? stophold_utf8(p, lim) : stophold_shown(&h->hold, p, lim);
    return lim < c->emitted ? c->emitted : lim;
}

/* The text of a choice as the client reads it (valid UTF-8, cut at the stop). */
void http_reply_text(const hchoice *c, bytebuf *out)
{
    size_t end = c->stop_at != SIZE_MAX ? c->stop_at : c->text.n;
    httpreq_put_utf8(out, (const uint8_t *)c->text.p, end);
}

/* ---- responses ------------------------------------------------------------------------ */

static void send_soon(hreq *h);

/* Should a stream's turn pause? Its unsent bytes are over --max-output,
 * or over CONN_SMALL_BYTES while the daemon's byte budget is spent (a
 * socket connection under that size may always go on, so may a stream). */
static int over_output(const hreq *h)
{
    const server *srv = h->hs->srv;
    return h->pend.n > srv->opt.max_output || (h->pend.n > CONN_SMALL_BYTES && conn_budget_over(srv));
}

/* May a paused stream go on: drained to a quarter of what paused it. */
static int may_resume(const hreq *h)
{
    const server *srv = h->hs->srv;
    return h->pend.n <= srv->opt.max_output / 4 &&
           (h->pend.n <= CONN_SMALL_BYTES / 4 || !conn_budget_over(srv));
}

#define HBUF_KEEP (64u << 10)   /* a drained output buffer bigger than this is freed */

static void on_proceed(h2o_generator_t *g, h2o_req_t *req)
{
    (void)req;
    hreq *h = (hreq *)((char *)g - offsetof(hreq, gen));
    h->sending = 0;
    h->wbuf.n = 0;
    if (h->wbuf.cap > HBUF_KEEP) bytebuf_free(&h->wbuf);   /* what a slow reader left: back to the budget */
    if (h->paused && may_resume(h)) {
        h->paused = 0;
        post_sched(h->hs, h->id, M_RESUME);
    }
    send_soon(h);
    account(h);
}

void http_start_stream(hreq *h)
{
    if (h->started || !h->req) return;
    h->started = 1;
    h2o_req_t *req = h->req;
    req->res.status = 200;
    req->res.reason = "OK";
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL,
                   H2O_STRLIT("text/event-stream"));
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CACHE_CONTROL, NULL, H2O_STRLIT("no-cache"));
    http_turn_headers(h, req);
    h->gen.proceed = on_proceed;
    h->gen.stop = on_stop;
    h2o_start_response(req, &h->gen);
}

/* Hand what is pending to h2o (one send in flight at a time). */
void http_send_pending(hreq *h)
{
    if (!h->req || !h->started || h->sending) return;
    if (!h->pend.n && !h->final_queued) return;
    if (h->got_token) h->sent_text = 1;
    bytebuf t = h->wbuf;
    h->wbuf = h->pend;
    h->pend = t;
    h->pend.n = 0;
    h2o_iovec_t iov = h2o_iovec_init(h->wbuf.p, h->wbuf.n);
    h->sending = 1;
    h->send_ms = uv_now(h->hs->srv->loop);
    int final = h->final_queued;
    h2o_req_t *req = h->req;
    if (final) h->req = NULL;   /* h2o may dispose it from here on; h lives until then */
    h2o_send(req, &iov, h->wbuf.n ? 1 : 0, final ? H2O_SEND_STATE_FINAL : H2O_SEND_STATE_IN_PROGRESS);
}

/* Every --http-stream-interval ms while some stream holds bytes: hand them
 * to h2o, all streams in the same tick. Stops itself when none holds any. */
static void on_flush(uv_timer_t *t)
{
    http_server *hs = t->data;
    int held = 0;
    for (size_t b = 0; b < HREQ_BUCKETS; b++)
        for (hreq *h = hs->tab[b]; h; h = h->hnext)
            if (h->req && h->started && h->pend.n) {
                if (h->sending) held = 1;
                else http_send_pending(h);
            }
    if (!held) uv_timer_stop(t);
}

/* A stream's new bytes: the first text chunk and the end go out at once;
 * with --http-stream-interval the rest waits for the flush timer, so that
 * one write (and one wake-up of the client) carries every token a stream
 * made in that interval instead of one write per token. */
static void send_soon(hreq *h)
{
    http_server *hs = h->hs;
    unsigned ms = hs->srv->opt.http_stream_ms;
    if (!ms || !h->sent_text || h->final_queued) { http_send_pending(h); return; }
    if (h->pend.n && !uv_is_active((uv_handle_t *)&hs->flush) && !uv_is_closing((uv_handle_t *)&hs->flush))
        uv_timer_start(&hs->flush, on_flush, ms, ms);
}

void http_sse_event(hreq *h, json_t *j)
{
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    if (!s) return;
    bytebuf_put(&h->pend, "data: ", 6);
    bytebuf_put(&h->pend, s, strlen(s));
    bytebuf_put(&h->pend, "\n\n", 2);
    free(s);
}

json_t *http_usage_object(const hreq *h)
{
    uint64_t in = h->n > 1 ? h->prompt_tokens : h->ch[0].done.tokens_in, out = 0;
    for (int i = 0; i < h->n; i++) out += h->ch[i].done.tokens_out;
    if (h->kind == HK_RESPONSES)
        return json_pack("{s:I, s:{s:i}, s:I, s:{s:i}, s:I}", "input_tokens", (json_int_t)in,
                         "input_tokens_details", "cached_tokens", 0, "output_tokens", (json_int_t)out,
                         "output_tokens_details", "reasoning_tokens", 0, "total_tokens", (json_int_t)(in + out));
    return json_pack("{s:I, s:I, s:I}", "prompt_tokens", (json_int_t)in, "completion_tokens", (json_int_t)out,
                     "total_tokens", (json_int_t)(in + out));
}

/* The bytes of a token as a JSON array of integers (logprobs' `bytes`). */
static json_t *byte_array(const uint8_t *b, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(a, json_integer(b[i]));
    return a;
}

/* A token as a JSON string: its bytes, each one that is not UTF-8 U+FFFD. */
static json_t *token_string(const uint8_t *b, size_t n)
{
    bytebuf s = { 0 };
    httpreq_put_utf8(&s, b, n);
    json_t *j = json_stringn(s.p ? s.p : "", s.n);
    bytebuf_free(&s);
    return j;
}

/* A choice's logprobs entries [from, to) in the answer's form: chat's
 * {content: [...]}, completions' legacy {tokens, token_logprobs,
 * top_logprobs, text_offset} (text_offset in bytes of the text). */
static json_t *lp_object(hreq *h, hchoice *c, size_t from, size_t to)
{
    if (h->kind == HK_CHAT) {
        json_t *content = json_array();
        for (size_t i = from; i < to; i++) json_array_append(content, json_array_get(c->lp, i));
        return json_pack("{s:o}", "content", content);
    }
    json_t *toks = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
    const size_t *end = (const size_t *)c->lp_end.p;
    for (size_t i = from; i < to; i++) {
        json_t *e = json_array_get(c->lp, i), *d = json_object(), *t;
        size_t k;
        json_array_append(toks, json_object_get(e, "token"));
        json_array_append(lps, json_object_get(e, "logprob"));
        json_array_foreach(json_object_get(e, "top_logprobs"), k, t)
            json_object_set(d, json_string_value(json_object_get(t, "token")), json_object_get(t, "logprob"));
        json_array_append_new(tops, d);
        json_array_append_new(offs, json_integer((json_int_t)(i ? end[i - 1] : 0)));
    }
    return json_pack("{s:o, s:o, s:o, s:o}", "tokens", toks, "token_logprobs", lps, "top_logprobs", tops,
                     "text_offset", offs);
}

/* The logprobs entries a chunk streamed up to text byte lim carries: the
 * tokens whose bytes end by then (final: every token that starts before
 * lim, the one a stop string cuts included). */
static size_t lp_upto(const hchoice *c, size_t lim, int final)
{
    size_t n = json_array_size(c->lp), i = c->lp_sent;
    const size_t *end = (const size_t *)c->lp_end.p;
    while (i < n && (final ? (i ? end[i - 1] : 0) < lim : end[i] <= lim)) i++;
    return i;
}

/* One streamed chunk of choice c: text (n bytes, may be 0), the logprobs
 * entries [lp_from, lp_to) when asked, and maybe the finish reason. */
static json_t *chunk(hreq *h, hchoice *c, const char *text, size_t n, const char *finish, size_t lp_from,
                     size_t lp_to)
{
    json_t *choice, *lp = c->lp && lp_to > lp_from ? lp_object(h, c, lp_from, lp_to) : json_null();
    int index = (int)(c - h->ch);
    if (h->kind == HK_CHAT) {
        json_t *delta = json_object();
        if (!c->got_token) json_object_set_new(delta, "role", json_string("assistant"));
        if (n || !finish) json_object_set_new(delta, "content", json_stringn(text, n));
        choice = json_pack("{s:i, s:o, s:o, s:o}", "index", index, "delta", delta, "finish_reason",
                           finish ? json_string(finish) : json_null(), "logprobs", lp);
    } else {
        choice = json_pack("{s:i, s:s%, s:o, s:o}", "index", index, "text", text, n, "finish_reason",
                           finish ? json_string(finish) : json_null(), "logprobs", lp);
    }
    return json_pack("{s:s, s:s, s:I, s:s, s:[o]}", "id", h->resp_id, "object",
                     h->kind == HK_CHAT ? "chat.completion.chunk" : "text_completion", "created",
                     (json_int_t)h->created, "model", h->hs->model_id, "choices", choice);
}

/* The text chunk's bytes before and after its text, cut from a chunk
 * written by chunk() around a marker text, once per choice. */
static int chunk_template(hreq *h, hchoice *c)
{
    if (c->pre.p) return 0;
    json_t *j = chunk(h, c, "\x01", 1, NULL, 0, 0);
    char *d = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    char *m = d ? strstr(d, "\"\\u0001\"") : NULL;
    int rc = -ENOMEM;
    if (m && bytebuf_put(&c->pre, "data: ", 6) == 0 && bytebuf_put(&c->pre, d, (size_t)(m - d)) == 0 &&
        bytebuf_put(&c->post, m + 8, strlen(m + 8)) == 0 && bytebuf_put(&c->post, "\n\n", 2) == 0)
        rc = 0;
    free(d);
    if (rc) { bytebuf_free(&c->pre); bytebuf_free(&c->post); }
    return rc;
}

/* Stream the text of choice c that may go now as one chunk. */
void http_stream_text(hreq *h, hchoice *c, int final)
{
    size_t lim = streamable(h, c, final);
    if (lim <= c->emitted) return;
    bytebuf s = { 0 };
    if (httpreq_put_utf8(&s, (const uint8_t *)c->text.p + c->emitted, lim - c->emitted) == 0 && s.p) {
        if (h->kind == HK_RESPONSES) {
            char mid[64];
            http_resp_msg_id(h->resp_id, mid, sizeof mid);
            http_resp_begin_stream(h);
            http_resp_event(h, "response.output_text.delta",
                            json_pack("{s:s, s:i, s:i, s:s%, s:[]}", "item_id", mid, "output_index", 0,
                                      "content_index", 0, "delta", s.p, s.n, "logprobs"));
        } else if (c->got_token && !c->lp && chunk_template(h, c) == 0) {
            /* The chunk as chunk() would write it, with only the text
             * encoded per token: the loop's cost per streamed token. */
            json_t *str = json_stringn_nocheck(s.p, s.n);
            size_t need = str ? json_dumpb(str, NULL, 0, JSON_ENCODE_ANY) : 0;
            if (need && bytebuf_reserve(&h->pend, c->pre.n + need + c->post.n) == 0) {
                bytebuf_put(&h->pend, c->pre.p, c->pre.n);
                h->pend.n += json_dumpb(str, h->pend.p + h->pend.n, need, JSON_ENCODE_ANY);
                bytebuf_put(&h->pend, c->post.p, c->post.n);
            }
            json_decref(str);
        } else {
            size_t to = c->lp ? lp_upto(c, lim, final) : 0;
            http_sse_event(h, chunk(h, c, s.p, s.n, NULL, c->lp_sent, to));
            if (c->lp) c->lp_sent = to;
        }
        c->got_token = 1;
        h->got_token = 1;
    }
    bytebuf_free(&s);
    c->emitted = lim;
}

static const char *finish_reason(const char *reason)
{
    if (!strcmp(reason, "stop")) return "stop";
    if (!strcmp(reason, "length") || !strcmp(reason, "max_length")) return "length";
    return reason;
}

/* The response's end, once every stage is committed. */
static void complete(hreq *h)
{
    http_server *hs = h->hs;
    const char *fr = h->ch[0].finish;
    snprintf(h->finish, sizeof h->finish, "%s", fr);
    h->over = 1;
    if (!h->gone_posted)   /* a client seen gone is counted as disconnected */
        hs->req_total[!strcmp(fr, "stop") ? OC_STOP : !strcmp(fr, "length") ? OC_LENGTH
                  : !strcmp(fr, "cancelled") ? OC_CANCELLED : OC_OTHER]++;
    h->pending_backend = 0;
    log_request(h, h->req ? 200 : 499, h->req ? fr : "disconnected");   /* 499: the client left */
    if (!h->req) return;
    if (h->kind == HK_RESPONSES) { http_resp_complete(h); return; }
    if (h->stream) {
        http_start_stream(h);
        for (int i = 0; i < h->n; i++) {
            hchoice *c = &h->ch[i];
            http_stream_text(h, c, 1);
            size_t to = c->lp ? lp_upto(c, c->stop_at != SIZE_MAX ? c->stop_at : c->text.n, 1) : 0;
            json_t *last = chunk(h, c, "", 0, c->finish, c->lp ? c->lp_sent : 0, to);
            if (i == 0 && h->prompt_cut)
                json_object_set_new(last, "lind", json_pack("{s:I, s:I}", "fed_bytes", (json_int_t)h->fed_bytes,
                                                            "prompt_bytes", (json_int_t)h->prompt_bytes));
            http_sse_event(h, last);
        }
        if (h->include_usage) {
            json_t *u = json_pack("{s:s, s:s, s:I, s:s, s:[], s:o}", "id", h->resp_id, "object",
                                  h->kind == HK_CHAT ? "chat.completion.chunk" : "text_completion",
                                  "created", (json_int_t)h->created, "model", hs->model_id,
                                  "choices", "usage", http_usage_object(h));
            http_sse_event(h, u);
        }
        bytebuf_put(&h->pend, "data: [DONE]\n\n", 14);
        h->final_queued = 1;
        http_send_pending(h);
        return;
    }
    json_t *choices = json_array(), *sessions = json_array();
    for (int i = 0; i < h->n; i++) {
        hchoice *c = &h->ch[i];
        bytebuf s = { 0 };
        http_reply_text(c, &s);
        size_t end = c->stop_at != SIZE_MAX ? c->stop_at : c->text.n;
        json_t *lp = c->lp ? lp_object(h, c, 0, lp_upto(c, end, 1)) : json_null(), *choice;
        if (h->kind == HK_CHAT)
            choice = json_pack("{s:i, s:{s:s, s:s%}, s:s, s:o}", "index", i, "message", "role", "assistant",
                               "content", s.p ? s.p : "", s.n, "finish_reason", c->finish, "logprobs", lp);
        else
            choice = json_pack("{s:i, s:s%, s:s, s:o}", "index", i, "text", s.p ? s.p : "", s.n,
                               "finish_reason", c->finish, "logprobs", lp);
        bytebuf_free(&s);
        json_array_append_new(choices, choice);
        json_array_append_new(sessions, json_string(c->session));
    }
    json_t *j = json_pack("{s:s, s:s, s:I, s:s, s:o, s:o, s:{s:s, s:I}}", "id", h->resp_id,
                          "object", h->kind == HK_CHAT ? "chat.completion" : "text_completion",
                          "created", (json_int_t)h->created, "model", hs->model_id, "choices", choices,
                          "usage", http_usage_object(h), "lind", "session", h->session, "session_tokens",
                          (json_int_t)h->ch[0].done.session_tokens);
    json_object_set_new(json_object_get(j, "lind"), "seed", json_integer((json_int_t)h->seed));
    json_object_set_new(json_object_get(j, "lind"), "fed_bytes", json_integer((json_int_t)h->fed_bytes));
    json_object_set_new(json_object_get(j, "lind"), "prompt_bytes", json_integer((json_int_t)h->prompt_bytes));
    if (h->n > 1) json_object_set_new(json_object_get(j, "lind"), "sessions", sessions);
    else json_decref(sessions);
    h2o_req_t *req = h->req;
    h->req = NULL;
    http_turn_headers(h, req);
    http_send_json(req, 200, "OK", j);
}

/* A lind error ends the request. */
void http_fail(hreq *h, proto_code code, const char *msg)
{
    http_server *hs = h->hs;
    h->pending_backend = 0;
    h->over = 1;
    int status = http_code_status(code);
    log_request(h, h->req ? status : 499, proto_code_name(code));
    if (!h->req) return;
    if (!h->started) {
        h2o_req_t *req = h->req;
        h->req = NULL;
        http_send_error(hs, req, status, proto_code_name(code), NULL, "%s", msg);
        return;
    }
    /* Mid-stream: an error event, then the end of the stream. */
    hs->req_total[status >= 500 ? OC_SERVER_ERR : OC_CLIENT_ERR]++;
    const char *type = status >= 500 ? "server_error" : "invalid_request_error";
    if (h->kind == HK_RESPONSES) {
        http_resp_event(h, "error", json_pack("{s:s, s:s, s:n}", "code", proto_code_name(code), "message", msg, "param"));
    } else {
        http_sse_event(h, http_error_object(msg, type, proto_code_name(code), NULL));
        bytebuf_put(&h->pend, "data: [DONE]\n\n", 14);
    }
    h->final_queued = 1;
    http_send_pending(h);
}

/* ---- stages ------------------------------------------------------------------------------ */

void http_send_request(hreq *h, op_request *r)
{
    if (commands_submit(h->hs->srv, h->id, r, clock_mono_ns()) != 0) {
        http_fail(h, PE_INTERNAL, "out of memory");
        return;
    }
    if ((h->kind == HK_COMPLETION || h->kind == HK_CHAT || h->kind == HK_RESPONSES) &&
        h->stage >= ST_FORK_IN && h->stage <= ST_TURN_LAST)
        h->hs->stage_total[h->stage]++;   /* the trips a completion takes (/metrics) */
    h->pending_backend = 1;
}

static void fork_request(hreq *h, uint64_t id, const char *from, const char *to)
{
    op_request r;
    memset(&r, 0, sizeof r);
    r.op = OP_FORK;
    r.id = id;
    snprintf(r.session, sizeof r.session, "%s", from);
    snprintf(r.to, sizeof r.to, "%s", to);
    http_send_request(h, &r);
}

/* Choice i's generate (request id i + 1): the request's settings, seed + i. */
static void generate_choice(hreq *h, int i, uint8_t *text, size_t len)
{
    op_request r = h->gen_req;
    r.id = (uint64_t)i + 1;
    r.text = text;
    r.text_len = len;
    r.sp.seed = (h->seed + (uint64_t)i) & INT64_MAX;
    r.bias_id = NULL;
    r.bias = NULL;
    if (h->gen_req.n_bias) {   /* each turn owns its copy */
        r.bias_id = malloc((size_t)r.n_bias * sizeof *r.bias_id);
        r.bias = malloc((size_t)r.n_bias * sizeof *r.bias);
        if (!r.bias_id || !r.bias) {
            free(r.bias_id);
            free(r.bias);
            free(text);
            http_fail(h, PE_INTERNAL, "out of memory");
            return;
        }
        memcpy(r.bias_id, h->gen_req.bias_id, (size_t)r.n_bias * sizeof *r.bias_id);
        memcpy(r.bias, h->gen_req.bias, (size_t)r.n_bias * sizeof *r.bias);
    }
    r.schema = NULL;
    if (h->gen_req.schema && !(r.schema = jsonfsm_schema_clone(h->gen_req.schema))) {   /* every choice constrained */
        free(r.bias_id);
        free(r.bias);
        free(text);
        http_fail(h, PE_INTERNAL, "out of memory");
        return;
    }
    snprintf(r.session, sizeof r.session, "%s", h->ch[i].session);
    /* The commit keeps the choice's copy (store: false keeps none): a named
     * session's under the response id, a chat's under its conversation's
     * name once the reply is known (a message the hash cannot take, or no
     * memory: no copy, as when the name cannot be made). */
    if (h->store && h->ch[i].fork_to[0] && strcmp(h->ch[i].fork_to, h->ch[i].session))
        snprintf(r.keep_as, sizeof r.keep_as, "%s", h->ch[i].fork_to);
    else if (h->store && h->kind == HK_CHAT && h->messages &&
             httpreq_conv_begin(h->messages, json_array_size(h->messages), h->hs->tpl.hash, &r.keep_conv) != 0)
        r.keep_conv = NULL;
    if (i == 0 && h->n == 1 && h->fork_from[0]) {
        /* One trip: the session starts from the stored one (fork_from) on
         * the compute thread; when that is gone, a required one fails the
         * turn (not_found, as a fork would) and an optional one (a chat's
         * prefix) feeds the whole conversation instead (fresh_text). */
        snprintf(r.start_from, sizeof r.start_from, "%s", h->fork_from);
        r.start_required = h->fork_required;
        if (!h->fork_required) {
            r.fresh_text = h->full_text;
            r.fresh_len = h->full_len;
            h->fresh_len = h->full_len;
            h->full_text = NULL;
            h->full_len = 0;
        }
    }
    if (i == 0 && h->n == 1) h->prompt_bytes = len;
    http_send_request(h, &r);
}

static void start_generate(hreq *h, int continued)
{
    /* The text: only the new messages when the session holds the rest. */
    uint8_t **src = continued ? &h->new_text : &h->full_text;
    size_t *len = continued ? &h->new_len : &h->full_len;
    uint8_t *text = *src;
    size_t n = *len;
    *src = NULL;
    *len = 0;
    /* After a reply the compute thread drops what the stream already ends with. */
    const chat_template *reply_tpl = continued && h->after_reply ? &h->hs->tpl : NULL;
    h->gen_req.reply_tpl = reply_tpl;
    if (h->n == 1) {
        h->stage = ST_GENERATE;
        h->waiting = 1;
        generate_choice(h, 0, text, n);
        return;
    }
    /* n > 1: the text is fed once (an append leaves its last token pending),
     * the state forked to every other choice, and each choice samples from
     * there with its own seed. */
    h->stage = ST_PREFILL;
    h->waiting = 1;
    op_request r;
    memset(&r, 0, sizeof r);
    r.op = OP_APPEND;
    r.id = 1;
    r.sp = h->gen_req.sp;   /* a new session's sampler starts from these (the generates reseed it) */
    snprintf(r.session, sizeof r.session, "%s", h->session);
    r.text = text;
    r.text_len = n;
    r.reply_tpl = reply_tpl;
    h->prompt_bytes = n;
    http_send_request(h, &r);
}

static void forks_done(hreq *h);
static int req_gone(h2o_req_t *req);

/* The turn is committed, and with it each choice's copy where a later
 * request will look (generate_choice). Only a retry answered with an
 * earlier try's recorded answer (Idempotency-Key) committed nothing: its
 * copy is forked here, from the session as it is. */
static void after_generate(hreq *h)
{
    int gone = !h->req;
    for (int i = 0; i < h->n; i++) {
        hchoice *c = &h->ch[i];
        if (!strcmp(c->finish, "cancelled")) gone = 1;
        /* A chat copy's name, as the compute thread made it: for that
         * fork, and for forks_done's drop of one nobody was told of. */
        if (h->kind == HK_CHAT && !c->fork_to[0] && h->messages) {
            bytebuf r = { 0 };
            if (httpreq_reply_text(&r, (const uint8_t *)c->text.p, c->text.n, h->n_stop,
                                   (const uint8_t (*)[STOP_MAX_LEN])h->stop, h->stop_len) != 0 ||
                httpreq_conv_name(h->messages, json_array_size(h->messages), r.p ? r.p : "", r.n,
                                  h->hs->tpl.hash, c->fork_to, sizeof c->fork_to) != 0)
                c->fork_to[0] = 0;
            bytebuf_free(&r);
        }
    }
    if (gone) {   /* the client is gone or we stop */
        complete(h);
        return;
    }
    if (abandoned(h) && req_gone(h->req)) {   /* a copy for nobody: forks_done deletes it and the session */
        forks_done(h);
        return;
    }
    h->stage = ST_FORK_OUT;
    h->waiting = 0;
    for (int i = 0; h->store && i < h->n; i++) {   /* store: false keeps no copy */
        hchoice *c = &h->ch[i];
        if (!c->done.replayed || !c->fork_to[0] || !strcmp(c->fork_to, c->session)) continue;
        h->waiting++;
        fork_request(h, (uint64_t)i + 1, c->session, c->fork_to);
    }
    if (!h->waiting) forks_done(h);
}

/* Every snapshot is taken: store: false drops the answer's own sessions
 * (resp-, and a choice's resp-...-i; a named session stays), and so does a
 * client that left before it was told anything (abandoned: it finished
 * before the client was seen gone); then the answer. */
static void forks_done(hreq *h)
{
    if (h->req && h->store && abandoned(h) && req_gone(h->req)) {
        h->abandoned = 1;
        stats_dropped(&h->hs->srv->st);
    }
    if (h->req && (!h->store || h->abandoned)) {
        h->stage = ST_DROP;
        h->waiting = 0;
        for (int i = 0; i < h->n; i++) {
            /* the answer's own session, and the copy its commit made (none
             * under store: false; a taken name was left as it was) */
            const char *drop[2] = { strncmp(h->ch[i].session, "resp-", 5) ? NULL : h->ch[i].session,
                                    h->ch[i].done.kept ? h->ch[i].fork_to : NULL };
            for (int k = 0; k < 2; k++) {
                if (!drop[k] || !drop[k][0]) continue;
                op_request r;
                memset(&r, 0, sizeof r);
                r.op = OP_DELETE;
                r.id = (uint64_t)i + 1;
                snprintf(r.session, sizeof r.session, "%s", drop[k]);
                h->waiting++;
                http_send_request(h, &r);
            }
        }
        if (h->waiting) return;
    }
    complete(h);
}

/* ---- events from the other threads ------------------------------------------------------ */

static void on_token(hreq *h, hchoice *c, const evlist *l, const event *e)
{
    http_server *hs = h->hs;
    const uint8_t *b = event_bytes(l, e);
    size_t n = e->len;
    hs->http_tokens++;
    if (bytebuf_put(&c->text, b, n)) return;
    if (c->lp && e->has_lp) {
        json_t *top = json_array();
        for (uint32_t i = 0; i < e->ntop; i++) {
            ev_top t = event_top(l, e, i);
            json_array_append_new(top, json_pack("{s:o, s:f, s:o}", "token", token_string(t.bytes, t.len),
                                                 "logprob", (double)t.lp, "bytes", byte_array(t.bytes, t.len)));
        }
        json_array_append_new(c->lp, json_pack("{s:o, s:f, s:o, s:o}", "token", token_string(b, n), "logprob",
                                               (double)e->lp, "bytes", byte_array(b, n), "top_logprobs", top));
        size_t end = c->text.n;
        bytebuf_put(&c->lp_end, &end, sizeof end);
    }
    find_stop(h, c);
    if (!h->stream || !h->req) return;
    if (!h->started) http_start_stream(h);
    size_t before = c->emitted;
    http_stream_text(h, c, 0);
    if (c->emitted > before && h->t_recv_ns) {
        double ms = (double)(clock_mono_ns() - h->t_recv_ns) / 1e6;
        int i = 0;
        while (i < STATS_HIST_N - 1 && ms > stats_hist_le[i]) i++;
        hs->ttft.count[i]++;
        hs->ttft.n++;
        hs->ttft.sum_ms += ms;
        h->t_recv_ns = 0;   /* counted once */
    }
}

/* A final event of the current stage (the choice it is for: c, or NULL). */
static void on_final(hreq *h, hchoice *c, const evlist *l, const event *e)
{
    const uint8_t *b = event_bytes(l, e);
    if (e->kind == EV_ERROR) {
        char msg[1024];
        size_t n = e->len < sizeof msg - 1 ? e->len : sizeof msg - 1;
        if (n) memcpy(msg, b, n);
        msg[n] = 0;
        if (h->stage == ST_FORK_IN && e->code == PE_NOT_FOUND && !h->fork_required) {
            start_generate(h, 0);   /* no stored prefix: feed the whole conversation */
        } else if (h->stage == ST_FORK_OUT) {
            /* The turn is saved on the choice's session; only the snapshot failed. */
            if (c) c->fork_to[0] = 0;
            if (--h->waiting <= 0) forks_done(h);
        } else if (h->stage == ST_DROP) {
            if (--h->waiting <= 0) complete(h);
        } else if (h->stage == ST_ADMIN) {
            http_resp_admin_result(h, l, e);
        } else {
            http_fail(h, e->code, msg);
        }
        return;
    }
    switch (h->stage) {
    case ST_FORK_IN:
        start_generate(h, 1);
        break;
    case ST_PREFILL:
        if (e->kind != EV_APPENDED) break;
        h->prompt_tokens = e->done.tokens_in;
        h->fed_bytes = e->done.fed_bytes;
        h->prompt_cut = h->fed_bytes < h->prompt_bytes;
        if (e->cancelled || !h->req || h->gone_posted) {   /* the client is gone or we stop */
            for (int i = 0; i < h->n; i++) snprintf(h->ch[i].finish, sizeof h->ch[i].finish, "cancelled");
            complete(h);
            break;
        }
        h->stage = ST_FORK_N;
        h->waiting = h->n - 1;
        for (int i = 1; i < h->n; i++) fork_request(h, (uint64_t)i + 1, h->session, h->ch[i].session);
        break;
    case ST_FORK_N:
        if (--h->waiting > 0) break;
        if (!h->req || h->gone_posted) {   /* the client left: no turns for nobody */
            for (int i = 0; i < h->n; i++) snprintf(h->ch[i].finish, sizeof h->ch[i].finish, "cancelled");
            complete(h);
            break;
        }
        h->stage = ST_GENERATE;
        h->waiting = h->n;
        for (int i = 0; i < h->n && !h->over; i++) generate_choice(h, i, NULL, 0);
        break;
    case ST_GENERATE:
        if (e->kind != EV_DONE || !c || c->ended) break;
        c->ended = 1;
        c->done = e->done;
        if (e->len) memcpy(c->stop_tail, b, e->len < sizeof c->stop_tail ? e->len : sizeof c->stop_tail);
        c->done.stop = c->stop_tail;
        c->done.stop_len = e->len < sizeof c->stop_tail ? e->len : sizeof c->stop_tail;
        snprintf(c->finish, sizeof c->finish, "%s", finish_reason(e->done.reason));
        if (h->n == 1) {
            if (e->done.fed_fresh) h->prompt_bytes = h->fresh_len;   /* its prefix was gone: it fed all */
            h->fed_bytes = e->done.fed_bytes;
            h->prompt_cut = h->fed_bytes < h->prompt_bytes;
        }
        if (--h->waiting <= 0) after_generate(h);
        break;
    case ST_FORK_OUT:
        if (--h->waiting <= 0) forks_done(h);
        break;
    case ST_DROP:
        if (--h->waiting <= 0) complete(h);
        break;
    case ST_STATS:
        http_metrics_send(h, l, e);
        break;
    case ST_ADMIN:
        http_resp_admin_result(h, l, e);
        break;
    }
}

void http_deliver(server *srv, outmsg *o)
{
    http_server *hs = srv->http;
    hreq *h = hs ? lookup(hs, o->conn) : NULL;
    if (!h) { outmsg_free(o); return; }
    for (size_t i = 0; i < o->ev.n && !h->over; i++) {
        const event *e = &o->ev.v[i];
        hchoice *c = h->ch && e->id >= 1 && e->id <= (uint64_t)h->n ? &h->ch[e->id - 1] : NULL;
        if (e->kind == EV_TOKEN) {
            if (c) on_token(h, c, &o->ev, e);
        } else if (event_is_final(e)) {
            on_final(h, c, &o->ev, e);
        }
    }
    outmsg_free(o);
    account(h);
    if (h->req && h->stream && h->started) {
        send_soon(h);
        if (!h->paused && over_output(h)) {
            h->paused = 1;
            h->paused_ms = uv_now(srv->loop);
            post_sched(hs, h->id, M_PAUSE);
        }
    }
}

/* Has the client of a request still waiting for its answer closed its
 * connection? libh2o does not read an HTTP/1 connection while its request
 * is being answered, so it would learn only when the answer is written:
 * look at the socket (a peek reads 0 bytes at the peer's close). */
static int req_gone(h2o_req_t *req)
{
    h2o_conn_t *c = req ? req->conn : NULL;
    h2o_socket_t *sock = c && c->callbacks->get_socket ? c->callbacks->get_socket(c) : NULL;
    int fd = sock ? h2o_socket_get_fd(sock) : -1;
    if (fd < 0) return 0;
    char b;
    ssize_t n = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

static int client_gone(hreq *h)
{
    return req_gone(h->req);
}

/* A write that has not completed for --write-timeout: the client takes
 * nothing. Its socket is shut down both ways, so that libh2o's write fails
 * and libh2o closes the connection on its own path (which ends the request
 * and cancels a turn still running); the bytes it held are given back. */
static void write_timed_out(hreq *h)
{
    h2o_conn_t *c = h->req->conn;
    h2o_socket_t *sock = c && c->callbacks->get_socket ? c->callbacks->get_socket(c) : NULL;
    int fd = sock ? h2o_socket_get_fd(sock) : -1;
    if (fd < 0) return;
    h->write_closed = 1;
    char msg[200];
    snprintf(msg, sizeof msg, "closed an HTTP connection whose %zu bytes of output did not move for %u s "
             "(--write-timeout); its turn is cancelled", h->wbuf.n + h->pend.n, h->hs->srv->opt.write_timeout);
    conn_log_refusal(msg);
    shutdown(fd, SHUT_RDWR);
}

/* A request whose client is gone and whose answer has not begun: no
 * event will come for it (the compute thread sends nothing to a closed
 * connection), so it ends here. libh2o, not reading an HTTP/1 connection
 * while a request is answered, learns of the close only when it writes:
 * the answer's write fails, and libh2o closes the connection and disposes
 * the request (on_pool_dispose frees h). */
static void end_gone(hreq *h)
{
    h2o_req_t *req = h->req;
    h->over = 1;
    h->pending_backend = 0;
    log_request(h, 499, "disconnected");
    h->req = NULL;
    req->res.status = 499;
    req->res.reason = status_reason(499);
    h2o_send_inline(req, "", 0);
}

/* Every second: a client gone while its turn runs cancels the turn (as a
 * closed socket connection does); a stream paused by --max-output for
 * --pause-timeout has a client that does not read, so its turn is cancelled
 * too (as conn_tick does for the socket); a write stuck for --write-timeout
 * closes the connection, as on the socket. */
void http_on_tick(uv_timer_t *t)
{
    http_server *hs = t->data;
    unsigned limit = hs->srv->opt.pause_timeout, wlimit = hs->srv->opt.write_timeout;
    uint64_t now = uv_now(hs->srv->loop);
    for (size_t b = 0; b < HREQ_BUCKETS; b++)
        for (hreq *h = hs->tab[b]; h; h = h->hnext) {
            if (wlimit && h->req && h->sending && !h->write_closed && now - h->send_ms >= 1000ull * wlimit)
                write_timed_out(h);
            if (h->pending_backend && !h->gone_posted && client_gone(h)) {
                h->gone_posted = 1;
                hs->req_total[OC_GONE]++;
                h->abandoned = abandoned(h);
                post_sched(hs, h->id, h->abandoned ? M_CONN_ABANDONED : M_CONN_CLOSED);
                if (!h->started) end_gone(h);
            }
            if (limit && h->paused && !h->pause_cancelled && now - h->paused_ms >= 1000ull * limit) {
                h->pause_cancelled = 1;
                post_sched(hs, h->id, M_CANCEL_CONN);
            }
        }
}

/* ---- requests ------------------------------------------------------------------------------- */

typedef struct handler {
    h2o_handler_t super;
    http_server  *hs;
} handler;

static int path_is(const h2o_req_t *req, const char *p)
{
    return h2o_memis(req->path_normalized.base, req->path_normalized.len, p, strlen(p));
}

int http_method_is(const h2o_req_t *req, const char *m)
{
    return h2o_memis(req->method.base, req->method.len, m, strlen(m));
}

/* A request header's value, or NULL (h2o lowercases names). */
static const h2o_iovec_t *header(const h2o_req_t *req, const char *name)
{
    ssize_t i = h2o_find_header_by_str(&req->headers, name, strlen(name), -1);
    return i < 0 ? NULL : &req->headers.entries[i].value;
}

static int token_ok(const http_server *hs, const h2o_req_t *req)
{
    if (!hs->token[0]) return 1;
    ssize_t i = h2o_find_header(&req->headers, H2O_TOKEN_AUTHORIZATION, -1);
    if (i < 0) return 0;
    const h2o_iovec_t *v = &req->headers.entries[i].value;
    size_t tl = strlen(hs->token);
    if (v->len != 7 + tl || strncasecmp(v->base, "Bearer ", 7)) return 0;
    unsigned diff = 0;   /* compare in constant time */
    for (size_t k = 0; k < tl; k++) diff |= (unsigned char)v->base[7 + k] ^ (unsigned char)hs->token[k];
    return diff == 0;
}

/* Idempotency-Key (docs/HTTP.md): the generate's request_id, so that a
 * retry of a committed turn gets its recorded answer. Without a seed the
 * turn's seed comes from the key, so the retry is the same request. 0, or
 * -EINVAL with the reason in why. */
static int idempotency_key(const h2o_req_t *req, httpreq *r, char *why, size_t whylen)
{
    const h2o_iovec_t *v = header(req, "idempotency-key");
    if (!v) return 0;
    char key[STORE_REQUEST_ID_MAX + 1];
    if (v->len == 0 || v->len > STORE_REQUEST_ID_MAX || memchr(v->base, 0, v->len)) {
        snprintf(why, whylen, "the Idempotency-Key header must be 1..%d bytes", STORE_REQUEST_ID_MAX);
        return -EINVAL;
    }
    memcpy(key, v->base, v->len);
    key[v->len] = 0;
    if (store_request_id_check(key, why, whylen) != 0) return -EINVAL;
    if (r->n > 1) {
        snprintf(why, whylen, "Idempotency-Key is for one choice (n = 1); this request asks for %d", r->n);
        return -EINVAL;
    }
    memcpy(r->gen.request_id, key, v->len + 1);
    /* The same request is the same body on the same path and session
     * header: the text derived from a chat body also depends on what this
     * server remembers of the session, which the first try changed. */
    const h2o_iovec_t *sh = header(req, "x-lind-session");
    uint64_t rh = 1469598103934665603ull;
    const h2o_iovec_t parts[3] = { req->path_normalized, sh ? *sh : (h2o_iovec_t){ NULL, 0 }, req->entity };
    for (int k = 0; k < 3; k++) {
        for (size_t i = 0; i < parts[k].len; i++) rh = (rh ^ (unsigned char)parts[k].base[i]) * 1099511628211ull;
        rh = (rh ^ 0xffu) * 1099511628211ull;   /* part separator */
    }
    r->gen.request_hash = rh ? rh : 1;
    if (!r->gen.has_seed) {
        uint64_t h = 1469598103934665603ull;
        for (size_t i = 0; i < v->len; i++) h = (h ^ (unsigned char)key[i]) * 1099511628211ull;
        r->gen.sp.seed = h & INT64_MAX;
        r->gen.has_seed = 1;
    }
    return 0;
}

static void begin(http_server *hs, h2o_req_t *req, hkind kind)
{
    server *srv = hs->srv;
    if (srv->stopping) {
        http_send_error(hs, req, 503, "shutting_down", NULL, "the server is shutting down");
        return;
    }
    const h2o_iovec_t *hv = header(req, "x-lind-session");
    httpreq_limits lim = { .req = &srv->limits, .tpl = &hs->tpl,
                           .model_id = hs->model_id };
    httpreq r;
    httpreq_error e;
    if (httpreq_parse(&r, kind == HK_CHAT ? HTTPREQ_CHAT : kind == HK_RESPONSES ? HTTPREQ_RESPONSES
                      : HTTPREQ_COMPLETION, req->entity.base,
                      req->entity.len, hv ? hv->base : NULL, hv ? hv->len : 0, &lim, &e) != 0) {
        http_send_error(hs, req, e.status, e.code, e.param, "%s", e.msg);
        return;
    }
    char why[200];
    if (idempotency_key(req, &r, why, sizeof why) != 0) {
        httpreq_free(&r);
        http_send_error(hs, req, 400, "invalid_request", "Idempotency-Key", "%s", why);
        return;
    }
    if (req_gone(req)) {
        /* Its client hung up while the request was read or waited for the
         * loop: nobody waits for the answer, so no session is made or fed
         * (docs/HTTP.md, "Work nobody waits for"). */
        httpreq_free(&r);
        hs->req_total[OC_GONE]++;
        req->res.status = 499;
        req->res.reason = status_reason(499);
        h2o_send_inline(req, "", 0);
        return;
    }
    hreq *h = calloc(1, sizeof *h);
    hchoice *ch = calloc((size_t)r.n, sizeof *ch);
    int lp_ok = 1;
    for (int i = 0; i < r.n && ch && r.gen.logprobs; i++) lp_ok &= (ch[i].lp = json_array()) != NULL;
    if (!h || !ch || !lp_ok) {
        for (int i = 0; ch && i < r.n; i++) json_decref(ch[i].lp);
        free(h);
        free(ch);
        httpreq_free(&r);
        http_send_error(hs, req, 500, "internal", NULL, "out of memory");
        return;
    }
    h->hs = hs;
    h->kind = kind;
    h->ch = ch;
    h->n = r.n;
    for (int i = 0; i < h->n; i++) h->ch[i].stop_at = SIZE_MAX;
    h->created = clock_wall_ms() / 1000;
    h->t_recv_ns = clock_mono_ns();
    h->id = HTTP_CONN_BIT | ++hs->seq;
    new_resp_id(h->resp_id, sizeof h->resp_id);
    /* What the turn needs, taken from r (which keeps nothing). */
    h->stream = r.stream;
    h->include_usage = r.include_usage;
    h->gen_req = r.gen;
    memset(&r.gen, 0, sizeof r.gen);
    h->n_stop = h->gen_req.n_stop;
    memcpy(h->stop, h->gen_req.stop, sizeof h->stop);
    memcpy(h->stop_len, h->gen_req.stop_len, sizeof h->stop_len);
    for (int i = 0; i < h->n_stop; i++) stophold_add(&h->hold, h->stop[i], h->stop_len[i]);
    h->max_stop = r.max_stop;
    /* Without a seed, fresh randomness: the seed is then set for this turn
     * like a client's (the sampler's state after the turn is saved with the
     * session as always, so a resumed session continues it exactly). */
    if (!h->gen_req.has_seed) {
        h->gen_req.sp.seed = fresh_seed();
        h->gen_req.has_seed = 1;
    }
    h->seed = h->gen_req.sp.seed;
    memcpy(h->user, r.user, sizeof h->user);
    h->ignored = r.ignored;
    r.ignored = NULL;
    h->messages = r.messages;
    h->new_text = r.new_text;
    h->new_len = r.new_len;
    h->after_reply = r.after_reply;
    h->full_text = r.full_text;
    h->full_len = r.full_len;
    h->input_items = r.input_items;
    h->rparams = r.rparams;
    h->store = r.store;
    r.messages = NULL;
    r.input_items = r.rparams = NULL;
    r.new_text = r.full_text = NULL;
    if (kind == HK_RESPONSES) {   /* a Responses conversation goes on by id: no chat-H snapshots */
        json_decref(h->messages);
        h->messages = NULL;
    }
    httpreq_free(&r);   /* the names stay readable */
    const char *prev = r.prev, *name = r.name;
    /* Stateless chat with history: continue its stored prefix when there is one. */
    snprintf(h->fork_from, sizeof h->fork_from, "%s", r.prefix);
    /* Which session the turn runs on, and what stays afterwards. */
    if (prev[0]) {
        snprintf(h->session, sizeof h->session, "%s", h->resp_id);
        snprintf(h->fork_from, sizeof h->fork_from, "%s", prev);
        h->fork_required = 1;
    } else if (name[0]) {
        snprintf(h->session, sizeof h->session, "%s", name);
        snprintf(h->ch[0].fork_to, sizeof h->ch[0].fork_to, "%s", h->resp_id);   /* previous_response_id's snapshot */
    } else {
        snprintf(h->session, sizeof h->session, "%s", h->resp_id);
    }
    /* Choice 0 runs on the session; choice i on a fork of it after the
     * prompt, named by the response id and -i. */
    snprintf(h->ch[0].session, sizeof h->ch[0].session, "%s", h->session);
    for (int i = 1; i < h->n; i++) snprintf(h->ch[i].session, sizeof h->ch[i].session, "%s-%d", h->resp_id, i);
    http_track(h, req);
    h->body_bytes = req->entity.len;   /* held by libh2o until the request ends */
    conn_budget_add(srv, h->body_bytes, h->body_bytes);
    if (h->fork_from[0] && h->n > 1) {
        /* n > 1 feeds the prompt once into the response's session and forks
         * it to the other choices: that session is copied in first. */
        h->stage = ST_FORK_IN;
        fork_request(h, 1, h->fork_from, h->session);
    } else {
        /* The text when the session goes on: the new part (new_text) for
         * a named session, a completion and a continued conversation (its
         * generate starts from fork_from), the whole for a fresh chat. */
        start_generate(h, 1);
    }
}

static json_t *model_object(const http_server *hs)
{
    return json_pack("{s:s, s:s, s:I, s:s}", "id", hs->model_id, "object", "model", "created",
                     (json_int_t)hs->model_created, "owned_by", "lind");
}

static void models(http_server *hs, h2o_req_t *req)
{
    http_send_json(req, 200, "OK", json_pack("{s:s, s:[o]}", "object", "list", "data", model_object(hs)));
}

/* GET /v1/models/{id}: the served model, or OpenAI's model_not_found. */
static void model_get(http_server *hs, h2o_req_t *req, const char *id, size_t n)
{
    if (n == strlen(hs->model_id) && !memcmp(id, hs->model_id, n)) {
        http_send_json(req, 200, "OK", model_object(hs));
        return;
    }
    http_send_error(hs, req, 404, "model_not_found", "model", "the model '%.*s' does not exist (this server "
                    "serves '%s')", (int)(n > 200 ? 200 : n), id, hs->model_id);
}

/* GET /v1/sessions, GET /v1/sessions/{name} (daemon/http_sessions.h). */
static void sessions_get(http_server *hs, h2o_req_t *req)
{
    op_request r;
    if (!(http_method_is(req, "GET") || http_method_is(req, "HEAD"))) {
        http_add_header(req, "allow", "GET, HEAD");
        http_send_error(hs, req, 405, "method_not_allowed", NULL, "%s takes GET", HTTP_SESSIONS_PATH);
    } else if (http_sessions_request(req->path.base, req->path.len, &r) != 0) {
        http_send_error(hs, req, 404, "not_found", NULL, "no such session (a name is 1..%d bytes of UTF-8, no "
                        "control characters, %%-encoded in the path)", STORE_NAME_MAX);
    } else {
        http_admin_request(hs, req, 4, &r);
    }
}

static int on_req(h2o_handler_t *self, h2o_req_t *req)
{
    http_server *hs = ((handler *)self)->hs;
    http_log_request_id(req);
    const char *amb = http_framing_check(req);
    if (amb) {
        req->http1_is_persistent = 0;   /* what follows on the connection cannot be trusted */
        http_send_error(hs, req, 400, "ambiguous_length", NULL, "the request's body length is ambiguous: %s "
                        "(refused, and the connection closed)", amb);
        return 0;
    }
    if (http_cors_handle(&hs->cors, req)) return 0;   /* a preflight */
    size_t hbytes = req->path.len + req->method.len;
    for (size_t i = 0; i < req->headers.size; i++)
        hbytes += req->headers.entries[i].name->len + req->headers.entries[i].value.len + 4;
    if (hbytes > hs->srv->opt.http_max_header) {
        http_send_error(hs, req, 431, "headers_too_large", NULL, "the request line and headers are %zu bytes,"
                        " over the limit of %zu (--http-max-header)", hbytes, hs->srv->opt.http_max_header);
        return 0;
    }
    int get = http_method_is(req, "GET") || http_method_is(req, "HEAD"), post = http_method_is(req, "POST");
    if (path_is(req, "/health")) {
        if (!get) http_send_error(hs, req, 405, "method_not_allowed", NULL, "/health takes GET");
        else if (hs->srv->stopping)
            http_send_json(req, 503, "Service Unavailable", json_pack("{s:s}", "status", "stopping"));
        else http_send_json(req, 200, "OK", json_pack("{s:s, s:s}", "status", "ok", "model", hs->model_id));
        return 0;
    }
    if (path_is(req, "/")) {   /* the chat page: it holds no secret, so no token (its API calls need one) */
        if (!get) http_send_error(hs, req, 405, "method_not_allowed", NULL, "/ takes GET");
        else http_page_send(req);
        return 0;
    }
    if (!token_ok(hs, req)) {
        http_add_header(req, "www-authenticate", "Bearer");
        http_send_error(hs, req, 401, "invalid_api_key", NULL, "this server wants 'Authorization: Bearer"
                        " <token>' with the token of its --http-token-file");
        return 0;
    }
    static const struct { const char *path; int post; } routes[] = {
        { "/v1/models", 0 }, { "/metrics", 0 }, { "/v1/completions", 1 }, { "/v1/chat/completions", 1 },
        { "/v1/responses", 1 },
    };
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        if (!path_is(req, routes[i].path)) continue;
        if (routes[i].post ? !post : !get) {
            http_add_header(req, "allow", routes[i].post ? "POST" : "GET, HEAD");
            http_send_error(hs, req, 405, "method_not_allowed", NULL, "%s takes %s", routes[i].path,
                            routes[i].post ? "POST" : "GET");
        } else if (i == 0) models(hs, req);
        else if (i == 1) http_metrics(hs, req);
        else if (req->entity.len > hs->srv->opt.http_max_body) {
            http_send_error(hs, req, 413, "body_too_large", NULL, "the request body is %zu bytes, over the "
                            "limit of %zu (--http-max-body)", req->entity.len, hs->srv->opt.http_max_body);
        } else begin(hs, req, i == 2 ? HK_COMPLETION : i == 3 ? HK_CHAT : HK_RESPONSES);
        return 0;
    }
    static const char resp_prefix[] = "/v1/responses/";
    size_t rp = sizeof resp_prefix - 1;
    if (req->path_normalized.len > rp && !memcmp(req->path_normalized.base, resp_prefix, rp)) {
        http_resp_admin(hs, req, req->path_normalized.base + rp, req->path_normalized.len - rp);
        return 0;
    }
    size_t sp = strlen(HTTP_SESSIONS_PATH);
    if (req->path_normalized.len >= sp && !memcmp(req->path_normalized.base, HTTP_SESSIONS_PATH, sp) &&
        (req->path_normalized.len == sp || req->path_normalized.base[sp] == '/')) {
        sessions_get(hs, req);
        return 0;
    }
    static const char model_prefix[] = "/v1/models/";
    size_t mp = sizeof model_prefix - 1;
    if (req->path_normalized.len > mp && !memcmp(req->path_normalized.base, model_prefix, mp)) {
        if (!get) {
            http_add_header(req, "allow", "GET, HEAD");
            http_send_error(hs, req, 405, "method_not_allowed", NULL, "/v1/models/{id} takes GET");
        } else {
            model_get(hs, req, req->path_normalized.base + mp, req->path_normalized.len - mp);
        }
        return 0;
    }
    http_send_error(hs, req, 404, "not_found", NULL, "no such endpoint: %.*s (there are /v1/completions, "
                    "/v1/chat/completions, /v1/responses, /v1/models, /v1/models/{id}, /v1/sessions, /health, /metrics, /)", (int)req->path_normalized.len,
                    req->path_normalized.base);
    return 0;
}

void http_handler_register(h2o_pathconf_t *path, http_server *hs)
{
    handler *hd = (handler *)h2o_create_handler(path, sizeof *hd);
    hd->super.on_req = on_req;
    hd->hs = hs;
}
