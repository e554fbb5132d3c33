/* daemon/httpreq.h — the JSON body of an OpenAI-style completions or chat
 * request (docs/HTTP.md), checked field by field and turned into what a
 * turn needs: the generate request (sampler, max_tokens, stop strings),
 * the session it names, and the text to feed (a prompt, or the messages
 * rendered with the chat template, recurrent/chat.h).
 *
 * No network and no server state: the HTTP front door (daemon/http.c)
 * calls it with a request's body and its X-Lind-Session header, and
 * tests/fuzz_http_request.c with arbitrary bytes. What it needs of the
 * server comes in as arguments: the template, the limits, and a lookup of
 * the stop string a session's last reply ended on. */
#ifndef LIND_DAEMON_HTTPREQ_H
#define LIND_DAEMON_HTTPREQ_H

#include <stddef.h>
#include <stdint.h>
#include <jansson.h>
#include "recurrent/bytebuf.h"
#include "recurrent/chat.h"
#include "recurrent/stop.h"
#include "daemon/protocol.h"

/* HTTPREQ_RESPONSES: POST /v1/responses, its input turned into chat
 * messages (parsed as a chat request from there on: r->kind is then
 * HTTPREQ_CHAT, r->responses 1). */
typedef enum { HTTPREQ_COMPLETION = 1, HTTPREQ_CHAT = 2, HTTPREQ_RESPONSES = 3 } httpreq_kind;


typedef struct httpreq_limits {
    const proto_limits *req;   /* the server's, as the socket's (max_tokens, top_k's bound) */
    const chat_template *tpl;  /* chat requests' template */
    const char *model_id;      /* the served model: another `model` is reported ignored; NULL: any */
} httpreq_limits;

#define HTTPREQ_USER_MAX    256   /* bytes of `user` (it goes to the request log) */
#define HTTPREQ_IGNORED_MAX 32    /* fields lind ignores that one request may carry */
#define HTTPREQ_N_MAX       16    /* choices per request (n) */
#define HTTPREQ_TOP_MAX     20    /* top_logprobs, and completions' logprobs */
#define HTTPREQ_BIAS_MAX    1024  /* logit_bias entries */

/* A parsed request. Owns gen (op_request_free), messages and the texts:
 * release with httpreq_free (after taking what it keeps: set those to NULL). */
typedef struct httpreq {
    httpreq_kind kind;
    op_request gen;         /* OP_GENERATE: sampler, max_tokens, stop strings (the request's,
                                * then the template's); no session or text yet */
    size_t   max_stop;         /* the longest stop string */
    int      stream, include_usage;
    int      n;                /* choices: 1..HTTPREQ_N_MAX */
    char     name[STORE_NAME_MAX + 1];    /* the session named: X-Lind-Session, else session; "" */
    char     user[HTTPREQ_USER_MAX + 1];  /* OpenAI's end-user id, for the request log only; "" */
    char    *ignored;          /* the fields lind ignored, as the X-Lind-Ignored header's value
                                * ("a, b.c", names %-escaped to [A-Za-z0-9_.-]); NULL: none */
    char     prev[STORE_NAME_MAX + 1];    /* previous_response_id, "" */
    char     prefix[STORE_NAME_MAX + 1];  /* stateless chat with history: the stored session its
                                           * conversation before the last reply would be (chat-H), "" */
    json_t  *messages;         /* chat: the messages array (a reference) */
    uint8_t *new_text;         /* fed when the session goes on: the prompt, or the messages after
                                * the last assistant message (all of them after previous_response_id) */
    size_t   new_len;
    int      after_reply;      /* new_text begins where the session's reply was closed (with the
                                * template's assistant_end): what the stream already ends with
                                * goes on the compute thread (op_request.reply_tpl) */
    uint8_t *full_text;        /* stateless chat with history: the whole conversation, fed when no
                                * stored session holds its prefix; else NULL */
    size_t   full_len;
    /* the Responses API */
    int      responses;        /* parsed from a /v1/responses body */
    int      store;            /* `store` (default true) */
    json_t  *input_items;      /* the input as message items {id, type, role, content: [{type, text}]} */
    json_t  *rparams;          /* what the response object echoes: instructions, max_output_tokens,
                                * temperature, top_p, store, previous_response_id */
} httpreq;

/* Why a request was refused: the HTTP status (400, or 500 out of memory),
 * the error object's code and param (NULL: none), and the message. */
typedef struct httpreq_error {
    int         status;
    const char *code;
    const char *param;
    char        msg[512];
} httpreq_error;

/* Parse body[0..len) as a request of `kind`. hdr_session (hdr_len bytes, or
 * NULL) is the X-Lind-Session header's value. Every field is either used,
 * refused (400 naming it: out of range, or asking for what lind lacks, such
 * as tools or best_of > 1) or listed in r->ignored; none is dropped silently.
 * 0 and *r filled, or -EINVAL / -ENOMEM with *e filled and nothing to free. */
int  httpreq_parse(httpreq *r, httpreq_kind kind, const char *body, size_t len, const char *hdr_session,
                   size_t hdr_len, const httpreq_limits *lim, httpreq_error *e);
void httpreq_free(httpreq *r);

/* The name of the stored session holding a conversation: chat- and the
 * xxh64 of messages[0..n) (role and text of each), when reply is not
 * NULL the assistant's reply, and the hash of the chat template `tpl` they
 * are rendered with (a conversation under another template is another
 * session: a session keeps its template). -EINVAL for a message without
 * role or text, -ENOMEM. */
int  httpreq_conv_name(json_t *messages, size_t n, const char *reply, size_t reply_len, uint32_t tpl,
                       char *out, size_t outlen);

/* The same name in two steps, for a stateless chat whose copy is kept by
 * its turn's commit (docs/HTTP.md, "Sessions: what is fed"): the messages
 * are hashed where the request is read (httpreq_conv_begin: 0, -EINVAL as
 * above, -ENOMEM; *out owned by the caller, httpreq_conv_free), the reply
 * added where the turn ends (httpreq_conv_end, which leaves c as it was, so
 * any thread may end a copy it owns). */
typedef struct httpreq_conv httpreq_conv;
int  httpreq_conv_begin(json_t *messages, size_t n, uint32_t tpl, httpreq_conv **out);
/* The name for reply[0..reply_len) (reply NULL: none). 0 or -ENOMEM. */
int  httpreq_conv_end(const httpreq_conv *c, const char *reply, size_t reply_len, char *out, size_t outlen);
/* A copy (NULL: out of memory). */
httpreq_conv *httpreq_conv_dup(const httpreq_conv *c);
void httpreq_conv_free(httpreq_conv *c);

/* A reply as the client reads it, appended to b: text[0..n) cut where the
 * first of the stop strings starts (OpenAI returns text without it), each
 * invalid UTF-8 byte as U+FFFD (what http.c's answer holds). The compute
 * thread names a stateless chat's copy from it, and so does the loop when
 * it needs that name: the two agree. 0 or -ENOMEM. */
int  httpreq_reply_text(bytebuf *b, const uint8_t *text, size_t n, int n_stop,
                        const uint8_t stop[][STOP_MAX_LEN], const uint8_t *stop_len);
/* Append p[0..n) to b as valid UTF-8: each invalid byte becomes U+FFFD.
 * 0 or -ENOMEM. */
int  httpreq_put_utf8(bytebuf *b, const uint8_t *p, size_t n);

#endif
