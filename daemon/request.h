/* daemon/request.h — a request for one op (daemon/ops.h), whichever door it
 * came in by: the socket's msgpack (protocol.c decodes it) or HTTP's JSON
 * (httpreq.c and http.c build it). The threads that serve it see only this.
 * Its limits were checked where it was decoded (proto_limits); where it goes
 * next is commands_submit's (commands.h). */
#ifndef LIND_DAEMON_REQUEST_H
#define LIND_DAEMON_REQUEST_H

#include <stddef.h>
#include <stdint.h>
#include "recurrent/sampler.h"
#include "recurrent/stop.h"
#include "state/store.h"
#include "daemon/ops.h"

#define PROTO_MAX_TOKEN   255   /* hello's token: --http-token-file's limit */

/* The server's limits on a request, the same whichever door it came in by:
 * the socket's decoder (protocol.c) and HTTP's (httpreq.c) enforce them. */
typedef struct proto_limits {
    size_t   max_message;   /* bytes per message */
    uint32_t max_tokens;    /* per generate */
    int      max_top_k;     /* top_k up to the model's vocabulary; 0: LIND_MAX_VOCAB */
} proto_limits;

/* A decoded request. Byte fields are malloc'd copies owned by the request:
 * release with op_request_free(). */
typedef struct op_request {
    proto_op op;
    uint64_t id;
    char     session[STORE_NAME_MAX + 1];
    char     to[STORE_NAME_MAX + 1];          /* fork */
    char     token[PROTO_MAX_TOKEN];          /* hello: the token a TCP client presents */
    size_t   token_len;
    uint8_t *text;  size_t text_len;          /* generate, append */
    uint8_t *data;  size_t data_len;          /* import */
    uint64_t target;                          /* cancel */
    uint32_t max_tokens;                      /* generate */
    int      n_stop;
    uint8_t  stop[STOP_MAX][STOP_MAX_LEN];
    uint8_t  stop_len[STOP_MAX];
    sampler_params sp;                        /* generate: this turn's settings */
    int      has_seed;
    int      progress;                        /* generate/append: send `progress` events */
    /* generate/append, optional (docs/PROTOCOL.md, "Retries"): the client's
     * request id ("" none; the HTTP front door fills it from the
     * Idempotency-Key header) and the session token count it expects. */
    char     request_id[STORE_REQUEST_ID_MAX + 1];
    uint64_t request_hash;    /* HTTP: what identifies the request (its body), 0: none; see
                               * turnlog_params_hash */
    int      has_if_tokens;
    uint64_t if_tokens;
    uint32_t chat_template;   /* generate/append: the hash of the chat template the text is
                               * framed with (recurrent/chat.h), 0: raw text. A session
                               * records the first; another is refused with conflict */
    int      has_ignore_eos, ignore_eos;      /* generate: go on past the model's end token */
    /* generate, set only by the HTTP front door (docs/HTTP.md; the socket
     * has no such fields): OpenAI's penalties over the tokens this turn
     * samples, logit_bias (n_bias ids and biases, owned), and logprobs
     * (0: off; else 1 + the number of alternatives wanted per token). */
    float    presence_penalty, frequency_penalty;
    int      n_bias;
    int32_t *bias_id;
    float   *bias;
    int      logprobs;
    /* generate, HTTP only: structured output (response_format json_object or
     * json_schema, docs/HTTP.md "Structured output"): the compiled schema
     * every sampled token must keep valid (recurrent/jsonfsm.h), owned (one
     * block, free()); NULL: unconstrained. */
    struct jsonfsm_schema *schema;
    /* generate/append, HTTP only: the text begins where the session's reply
     * was closed (a chat continued after an assistant message), framed by
     * this template (the server's, not owned): the compute thread drops what
     * the session's stream already ends with (chat_repeated over its
     * transcript's last bytes, e.g. the stop string the reply stopped on). */
    const struct chat_template *reply_tpl;
    /* generate, HTTP only (docs/HTTP.md "Sessions: what is fed"): the turn's
     * commit also keeps a copy of the session, in the same transaction,
     * where the name is free (a taken one is left as it is; the done event's
     * `kept` says which). Under keep_as ("" none: a named session's
     * response id); or, keep_conv non-NULL (owned), under the name of the
     * stateless chat's whole conversation, its messages hashed there and
     * the reply added when the turn ends (daemon/httpreq.h,
     * httpreq_conv_end). A cancelled turn keeps no copy. */
    char     keep_as[STORE_NAME_MAX + 1];
    struct httpreq_conv *keep_conv;
    /* generate, HTTP only (docs/HTTP.md "Sessions: what is fed"): a session
     * not stored yet starts from a copy of start_from's stored state (as a
     * fork would copy it; "" none), and the turn's commit creates it. When
     * start_from is not stored by the time the turn starts: start_required
     * fails the turn with not_found, as the fork would (nothing is made);
     * else the turn starts from a zero state and feeds fresh_text (owned)
     * instead of text, without reply_tpl (the done event's `fed_fresh`). */
    char     start_from[STORE_NAME_MAX + 1];
    int      start_required;
    uint8_t *fresh_text; size_t fresh_len;
} op_request;

/* Free what the request owns and leave it empty of buffers (its other
 * fields stay). */
void op_request_free(op_request *req);

#endif
