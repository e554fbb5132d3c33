/* daemon/http_impl.h — what the HTTP front door's files share (private to
 * daemon/http*.c; the daemon sees daemon/http.h only). Loop thread only.
 *
 * One front door (http_server) holds every request being answered (hreq),
 * by connection id. Who does what:
 *   http.c            routing (on_req), a request's stages (one generate,
 *                     or for n > 1 prefill and forks), the text it streams, its answer
 *                     or error, and the events the other threads send back;
 *   http_responses.c  the Responses API: its objects, stream events and
 *                     GET/DELETE /v1/responses/{id} (and the store requests
 *                     behind GET /v1/sessions);
 *   http_metrics.c    GET /metrics;
 *   http_listen.c     listening, accepted sockets, libh2o's own refusals,
 *                     start and shutdown; it allocates and frees
 *                     http_server and its tables.
 * An hreq is made by the file that routes its request (http_track puts it
 * in the table) and freed only by http_hreq_free, after libh2o disposed its
 * request. */
#ifndef LIND_DAEMON_HTTP_IMPL_H
#define LIND_DAEMON_HTTP_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include <jansson.h>
#include <h2o.h>
#include "daemon/http.h"
#include "daemon/httpreq.h"
#include "daemon/http_cors.h"
#include "recurrent/bytebuf.h"
#include "recurrent/chat.h"
#include "recurrent/stophold.h"

#define HREQ_BUCKETS 1024   /* http_server.tab: requests by connection id */
#define RESP_SLOTS   4096   /* remembered Responses API objects (http_responses.c) */

typedef enum { HK_COMPLETION = 1, HK_CHAT, HK_METRICS, HK_RESPONSES, HK_RESP_ADMIN } hkind;
typedef enum { ST_FORK_IN = 1, ST_PREFILL, ST_FORK_N, ST_GENERATE, ST_FORK_OUT, ST_DROP, ST_STATS,
               ST_ADMIN } hstage;
#define ST_COUNT     (ST_ADMIN + 1)
#define ST_TURN_LAST ST_DROP   /* the stages of a completion: ST_FORK_IN..ST_DROP */

/* One choice of a response (n of them, docs/HTTP.md "n"): its text as it
 * came, what was streamed, its logprobs, how it ended, its session. */
typedef struct hchoice {
    bytebuf   text;            /* the reply's bytes */
    bytebuf   pre, post;       /* a text chunk's SSE bytes around its text (chunk_template) */
    size_t    emitted;         /* text bytes already streamed */
    size_t    stop_at;         /* text is cut here (a stop string starts), or SIZE_MAX */
    size_t    searched;        /* text searched for stop strings up to here */
    int       got_token;       /* a text chunk of this choice went out (chat: the role was sent) */
    json_t   *lp;              /* logprobs asked: one {token, logprob, bytes, top_logprobs} per token */
    bytebuf   lp_end;          /* size_t each: where each token's bytes end in text */
    size_t    lp_sent;         /* entries streamed */
    proto_done done;
    uint8_t   stop_tail[STOP_MAX_LEN];   /* done.stop points here */
    char      finish[16];
    int       ended;           /* its generate is over */
    char      session[STORE_NAME_MAX + 1];   /* the session its turn runs on */
    char      fork_to[STORE_NAME_MAX + 1];   /* its copy's name: kept by its generate's commit
                                               * (op_request.keep_as; a chat's is known only
                                               * after the turn), forked by ST_FORK_OUT for a
                                               * replayed answer; "" = none */
} hchoice;

struct hreq;

typedef struct http_server {
    server  *srv;
    h2o_globalconf_t config;
    h2o_context_t ctx;
    h2o_accept_ctx_t accept;
    uv_tcp_t listener;
    int      listening, ctx_ready, closed;
    int      leaked;           /* h2o connections were force-closed at exit (http_close) */
    int      freeing;          /* http_free: nothing more goes to the other threads */
    char     token[256];       /* bearer token, "" = none */
    http_cors cors;            /* --http-cors */
    chat_template tpl;
    char     model_id[128];
    int64_t  model_created;    /* /v1/models' `created`: the model files' newest mtime */
    uint64_t seq;
    struct hreq *tab[HREQ_BUCKETS];
    unsigned nreq;
    /* metrics (loop thread) */
    uint64_t req_total[8];     /* by outcome (outcome_names) */
    uint64_t stage_total[ST_COUNT];   /* requests a completion's stages sent the other threads */
    uint64_t http_tokens;
    lat_hist ttft;             /* HTTP time to first token (request arrival to first byte sent) */
    uv_timer_t reaper;         /* frees requests h2o has disposed (never inside an h2o call) */
    uv_timer_t tick;           /* --pause-timeout for readers that stopped reading */
    uv_timer_t flush;          /* --http-stream-interval: hands held stream bytes to h2o */
    uv_timer_t linger;         /* at exit: connections h2o has not closed by now are dropped */
    struct hreq *dead;
    /* the Responses API's objects and input items by id (loop memory only;
     * http_responses.c) */
    struct { char id[STORE_NAME_MAX + 1]; json_t *obj, *items; } *resps;
} http_server;

/* http_server.req_total's index: how a request ended (their names, the
 * outcome label of lind_http_requests_total, are in http_metrics.c). */
enum { OC_STOP, OC_LENGTH, OC_CANCELLED, OC_CLIENT_ERR, OC_SERVER_ERR, OC_GONE, OC_OTHER, OC_OK };

typedef struct hreq {
    http_server *hs;
    uint64_t  id;              /* connection id for the other threads */
    h2o_req_t *req;            /* NULL once the client is gone */
    h2o_generator_t gen;
    struct hreq *hnext;
    hkind     kind;
    hstage    stage;
    int       stream, include_usage;
    int       started, sending, final_queued, paused, pending_backend;
    int       pause_cancelled; /* cancelled for --pause-timeout */
    int       gone_posted;     /* its client was seen gone (on_tick) */
    int       abandoned;       /* its client left before it was told anything (abandoned) */
    uint64_t  paused_ms;       /* uv_now when it paused */
    bytebuf   pend, wbuf;      /* SSE bytes not yet handed to h2o, and those in flight */
    hchoice  *ch;              /* n choices; ch[0].session is `session` */
    int       n, waiting;      /* choices; sub-requests of the stage not answered yet */
    int       over;            /* answered or failed: later events are dropped */
    uint64_t  prompt_tokens;   /* n > 1: the tokens the prefill fed */
    size_t    prompt_bytes;    /* the text the turn feeds (choice 0's, or the prefill's) */
    uint64_t  fed_bytes;       /* of it, what the session holds once the turn ended */
    int       prompt_cut;      /* fed_bytes < prompt_bytes: the turn was cut while it fed */
    int       n_stop;
    uint8_t   stop[STOP_MAX][STOP_MAX_LEN];
    uint8_t   stop_len[STOP_MAX];
    size_t    max_stop;
    stophold  hold;            /* stop[]: what streamed text holds back (streamable) */
    char      resp_id[40];     /* this response's id, also the session it leaves */
    char      session[STORE_NAME_MAX + 1];   /* the session the turn runs on */
    char      fork_from[STORE_NAME_MAX + 1]; /* the session this one continues: the generate's
                                               * start_from (n = 1), ST_FORK_IN's source (n > 1) */
    int       fork_required;   /* previous_response_id: a missing source is an error */
    uint8_t  *full_text, *new_text;   /* the turn's text: whole conversation / only new messages */
    size_t    full_len, new_len;
    size_t    fresh_len;       /* full_len, sent as the generate's fresh_text (prompt_bytes if fed) */
    int       after_reply;     /* new_text begins where the session's reply was closed (httpreq.h) */
    json_t   *messages;        /* chat: the request's messages (the chat-H copy's name) */
    op_request gen_req;     /* the generate request's settings, every choice's */
    uint64_t  seed;            /* the sampler's seed: the request's, or drawn fresh */
    char      user[HTTPREQ_USER_MAX + 1];   /* OpenAI's end-user id, for the request log */
    char     *ignored;         /* X-Lind-Ignored's value, NULL: none */
    char      finish[16];      /* choice 0's finish reason (metrics, request log) */
    /* the Responses API */
    json_t   *input_items;     /* POST: the input as message items; NULL for other kinds */
    json_t   *rparams;         /* POST: the echoed parameters (instructions, temperature, ...) */
    int       store;           /* POST: store (else the session is deleted after the answer) */
    unsigned  seq_no;          /* POST stream: the next event's sequence_number */
    int       admin;           /* HK_RESP_ADMIN: 1 GET, 2 DELETE, 3 GET input_items, 4 GET /v1/sessions[/{name}] */
    int       resp_opened;     /* POST stream: the opening events were written */
    struct hreq *dead_next;    /* on the reaper's list */
    int64_t   created;
    uint64_t  t_recv_ns;
    int       got_token;       /* a text chunk of any choice went out */
    int       sent_text;       /* a text chunk went out: later ones may wait for the flush timer */
    int       write_closed;    /* its socket was shut down for --write-timeout */
    uint64_t  send_ms;         /* uv_now when the write in flight was handed to h2o */
    size_t    body_bytes;      /* the request body libh2o holds for it, in the byte budget */
    size_t    acct;            /* its buffers' bytes in the byte budget (account) */
} hreq;

/* ---- http.c --------------------------------------------------------------- */

/* h (its hs and id set) answers req: it enters hs's table, and is freed
 * once libh2o disposes req (from the loop's next turn, never inside an h2o
 * call). */
void http_track(hreq *h, h2o_req_t *req);
/* Free a request's state; the compute thread forgets its connection. */
void http_hreq_free(hreq *h);
/* The reaper's timer: frees the requests libh2o has disposed. */
void http_on_reap(uv_timer_t *t);
/* Every second: gone clients, --pause-timeout, --write-timeout. */
void http_on_tick(uv_timer_t *t);
/* Our request handler on path (routing: on_req). */
void http_handler_register(h2o_pathconf_t *path, http_server *hs);
int  http_method_is(const h2o_req_t *req, const char *m);
void http_add_header(h2o_req_t *req, const char *name, const char *val);
/* Answer with a JSON body (the request ends; j's reference is taken). */
void http_send_json(h2o_req_t *req, int status, const char *reason, json_t *j);
/* OpenAI's {"error": {...}} (new reference). */
json_t *http_error_object(const char *message, const char *type, const char *code, const char *param);
/* An OpenAI-style error answer (counted in req_total). */
void http_send_error(http_server *hs, h2o_req_t *req, int status, const char *code,
                     const char *param, const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* A lind error code as an HTTP status. */
int  http_code_status(proto_code c);
/* The headers every 200 answer of a turn carries. */
void http_turn_headers(hreq *h, h2o_req_t *req);
/* The text of a choice as the client reads it (valid UTF-8, cut at the stop). */
void http_reply_text(const hchoice *c, bytebuf *out);
/* A stream's 200 and headers, once. */
void http_start_stream(hreq *h);
/* Hand what is pending to h2o (one send in flight at a time). */
void http_send_pending(hreq *h);
/* An SSE `data:` event of j (j's reference is taken) into h->pend. */
void http_sse_event(hreq *h, json_t *j);
json_t *http_usage_object(const hreq *h);
/* Stream the text of choice c that may go now (final: all of it). */
void http_stream_text(hreq *h, hchoice *c, int final);
/* A lind error ends the request. */
void http_fail(hreq *h, proto_code code, const char *msg);
/* Send r (taken) to the compute thread on h's connection. */
void http_send_request(hreq *h, op_request *r);

/* ---- http_responses.c ------------------------------------------------------ */

/* A Responses API stream event: `event: TYPE`, then j (taken) with the type
 * and the stream's next sequence_number. */
void http_resp_event(hreq *h, const char *type, json_t *j);
/* The id of a response's output message. */
void http_resp_msg_id(const char *resp_id, char *out, size_t n);
/* A streamed response's opening events, once. */
void http_resp_begin_stream(hreq *h);
/* A POST /v1/responses turn is over: its answer (or the stream's end). */
void http_resp_complete(hreq *h);
/* GET /v1/responses/{id}[/input_items], DELETE /v1/responses/{id}. */
void http_resp_admin(http_server *hs, h2o_req_t *req, const char *rest, size_t n);
/* A store request r (taken) for req, answered by http_resp_admin_result
 * (admin: which answer, hreq.admin). */
void http_admin_request(http_server *hs, h2o_req_t *req, int admin, op_request *r);
/* The store's answer (e of l) to an http_admin_request. */
void http_resp_admin_result(hreq *h, const evlist *l, const event *e);

/* ---- http_metrics.c -------------------------------------------------------- */

/* GET /metrics: asks the store for its session count ... */
void http_metrics(http_server *hs, h2o_req_t *req);
/* ... and answers when it comes (the typed `stats` result e of l). */
void http_metrics_send(hreq *h, const evlist *l, const event *e);

#endif
