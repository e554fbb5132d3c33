/* daemon/httpreq.c — see httpreq.h. */
#include "daemon/httpreq.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>
#include <xxhash.h>
#include "recurrent/jsonfsm.h"
#include "recurrent/model.h"
#include "state/store.h"

/* A field check failed: status 400 naming the parameter. */
static int bad(httpreq_error *e, const char *param, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int bad(httpreq_error *e, const char *param, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    e->status = 400;
    e->code = "invalid_request";
    e->param = param;
    return -EINVAL;
}

static int oom(httpreq_error *e)
{
    snprintf(e->msg, sizeof e->msg, "out of memory");
    e->status = 500;
    e->code = "internal";
    e->param = NULL;
    return -ENOMEM;
}

static const char *jtype(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE: case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

/* A number in lo..hi (lo itself excluded when lo_open); absent or null
 * leaves *out as it is. */
static int get_num(json_t *j, const char *key, double lo, double hi, int lo_open, float *out, httpreq_error *e)
{
    json_t *v = json_object_get(j, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v)) return bad(e, key, "'%s' must be a number, got %s", key, jtype(v));
    double x = json_number_value(v);
    /* (float)x too: top_p 1e-50 is over 0 as a double but 0 to the sampler */
    if (!isfinite(x) || x < lo || x > hi || (lo_open && (x == lo || (float)x == (float)lo)))
        return bad(e, key, "'%s' must be in %c%g, %g], got %g", key, lo_open ? '(' : '[', lo, hi, x);
    *out = (float)x;
    return 0;
}

/* A field whose value asks for what lind does not do: refused by name
 * rather than answered as if it had been done. */
static int unsupported(httpreq_error *e, const char *param, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int unsupported(httpreq_error *e, const char *param, const char *fmt, ...)
{
    char what[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    bad(e, param, "%s: lind does not implement it (docs/HTTP.md lists what it does)", what);
    e->code = "unsupported_parameter";
    return -EINVAL;
}

static int get_int(json_t *j, const char *key, long long lo, long long hi, long long *out, int *has,
                   httpreq_error *e)
{
    json_t *v = json_object_get(j, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_integer(v)) return bad(e, key, "'%s' must be an integer, got %s", key, jtype(v));
    long long x = json_integer_value(v);
    if (x < lo || x > hi) return bad(e, key, "'%s' must be in %lld..%lld, got %lld", key, lo, hi, x);
    *out = x;
    if (has) *has = 1;
    return 0;
}

static int get_bool(json_t *j, const char *key, int *out, httpreq_error *e)
{
    json_t *v = json_object_get(j, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v)) return bad(e, key, "'%s' must be a boolean, got %s", key, jtype(v));
    *out = json_is_true(v);
    return 0;
}

static int get_name(json_t *j, const char *key, char *out, httpreq_error *e)
{
    json_t *v = json_object_get(j, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_string(v)) return bad(e, key, "'%s' must be a string, got %s", key, jtype(v));
    const char *s = json_string_value(v);
    char why[160];
    if (json_string_length(v) > STORE_NAME_MAX || strlen(s) != json_string_length(v) ||
        store_name_check(s, why, sizeof why))
        return bad(e, key, "'%s' cannot name a session: %s", key,
                   json_string_length(v) > STORE_NAME_MAX ? "longer than 128 bytes"
                   : strlen(s) != json_string_length(v) ? "it holds a NUL character" : why);
    snprintf(out, STORE_NAME_MAX + 1, "%s", s);
    return 0;
}

static int add_stop(httpreq *r, const char *s, size_t n, httpreq_error *e)
{
    op_request *g = &r->gen;
    if (n < 1 || n > STOP_MAX_LEN)
        return bad(e, "stop", "each stop string must be 1..%d bytes, got %zu", STOP_MAX_LEN, n);
    if (g->n_stop == STOP_MAX)
        return bad(e, "stop", "at most %d stop strings (the chat template's included)", STOP_MAX);
    memcpy(g->stop[g->n_stop], s, n);
    g->stop_len[g->n_stop++] = (uint8_t)n;
    if (n > r->max_stop) r->max_stop = n;
    return 0;
}

/* The OpenAI fields for what lind does not do: each is accepted only at a
 * value asking for nothing (absent, null, 0, false, empty, "text", "none",
 * "auto", n 1), else refused by name. */
static int parse_unsupported(json_t *j, httpreq_error *e)
{
    json_t *v;
    static const char *const lists[] = { "tools", "functions" };
    for (size_t i = 0; i < 2; i++)
        if ((v = json_object_get(j, lists[i])) && !json_is_null(v)) {
            if (!json_is_array(v))
                return bad(e, lists[i], "'%s' must be an array, got %s", lists[i], jtype(v));
            if (json_array_size(v))
                return unsupported(e, lists[i], "a non-empty '%s' (tool calls; for JSON output use "
                                   "'response_format' json_schema)", lists[i]);
        }
    static const char *const choices[] = { "tool_choice", "function_call" };
    for (size_t i = 0; i < 2; i++)
        if ((v = json_object_get(j, choices[i])) && !json_is_null(v)) {
            const char *c = json_string_value(v);
            if (c && (!strcmp(c, "none") || !strcmp(c, "auto"))) continue;   /* no tools: no call either way */
            if (json_is_object(v) || (c && !strcmp(c, "required")))
                return unsupported(e, choices[i], "'%s' asking for a tool call (tool calls; for JSON output "
                                   "use 'response_format' json_schema)", choices[i]);
            return bad(e, choices[i], "'%s' must be \"none\", \"auto\", \"required\" or an object", choices[i]);
        }
    long long x = 1;
    if (get_int(j, "best_of", 1, 20, &x, NULL, e)) return -EINVAL;
    if (x > 1) return unsupported(e, "best_of", "'best_of' %lld", x);
    int echo = 0;
    if (get_bool(j, "echo", &echo, e)) return -EINVAL;
    if (echo) return unsupported(e, "echo", "'echo' true");
    if ((v = json_object_get(j, "suffix")) && !json_is_null(v)) {
        if (!json_is_string(v)) return bad(e, "suffix", "'suffix' must be a string, got %s", jtype(v));
        if (json_string_length(v)) return unsupported(e, "suffix", "a non-empty 'suffix' (insertion)");
    }
    return 0;
}

/* Structured output: response_format {"type": "text" | "json_object" |
 * "json_schema", "json_schema": {"name", "schema", "strict", "description"}}
 * (on /v1/responses, text.format translated to it: param "text") compiled
 * into g->schema (recurrent/jsonfsm.h); a schema keyword outside the subset
 * is refused naming it. */
static int parse_response_format(httpreq *r, json_t *j, httpreq_error *e)
{
    const char *param = r->responses ? "text" : "response_format";
    const char *field = r->responses ? "text.format" : "response_format";
    json_t *v = json_object_get(j, "response_format");
    if (!v || json_is_null(v)) return 0;
    const char *t = json_is_object(v) ? json_string_value(json_object_get(v, "type")) : NULL;
    if (!t) return bad(e, param, "'%s' must be an object with a string 'type'", field);
    if (!strcmp(t, "text")) return 0;
    op_request *g = &r->gen;
    if (!strcmp(t, "json_object")) {
        if (jsonfsm_schema_object(&g->schema)) return oom(e);
        return 0;
    }
    if (strcmp(t, "json_schema"))
        return unsupported(e, param, "'%s' of type '%.64s' (structured output takes text, json_object and "
                           "json_schema)", field, t);
    json_t *js = r->responses ? v : json_object_get(v, "json_schema");
    if (!json_is_object(js))
        return bad(e, param, "'%s' of type json_schema needs an object 'json_schema' with the schema", field);
    json_t *name = json_object_get(js, "name"), *strict = json_object_get(js, "strict");
    if (name && !json_is_null(name) && !json_is_string(name))
        return bad(e, param, "the json_schema's 'name' must be a string, got %s", jtype(name));
    if (strict && !json_is_null(strict) && !json_is_boolean(strict))
        return bad(e, param, "the json_schema's 'strict' must be a boolean, got %s", jtype(strict));
    json_t *schema = json_object_get(js, "schema");
    if (!schema || json_is_null(schema)) {   /* no schema: any JSON object */
        if (jsonfsm_schema_object(&g->schema)) return oom(e);
        return 0;
    }
    char err[300];
    int rc = jsonfsm_schema_compile(schema, &g->schema, err, sizeof err);
    if (rc == -ENOMEM) return oom(e);
    if (rc) return bad(e, param, "%s: %s; lind serves the subset docs/HTTP.md \"Structured output\" lists",
                       field, err);
    return 0;
}

/* OpenAI's sampling fields: the penalties, logit_bias, logprobs (chat: a
 * boolean and top_logprobs; completions: the legacy integer) and n. */
static int parse_sampling(httpreq *r, json_t *j, const httpreq_limits *lim, httpreq_error *e)
{
    op_request *g = &r->gen;
    json_t *v;
    if (get_num(j, "presence_penalty", -2, 2, 0, &g->presence_penalty, e) ||
        get_num(j, "frequency_penalty", -2, 2, 0, &g->frequency_penalty, e))
        return -EINVAL;
    if ((v = json_object_get(j, "logit_bias")) && !json_is_null(v)) {
        if (!json_is_object(v)) return bad(e, "logit_bias", "'logit_bias' must be an object, got %s", jtype(v));
        size_t n = json_object_size(v);
        if (n > HTTPREQ_BIAS_MAX)
            return bad(e, "logit_bias", "'logit_bias' has %zu entries, at most %d", n, HTTPREQ_BIAS_MAX);
        if (n && (!(g->bias_id = malloc(n * sizeof *g->bias_id)) || !(g->bias = malloc(n * sizeof *g->bias))))
            return oom(e);
        long long vocab = lim->req->max_top_k > 0 ? lim->req->max_top_k : LIND_MAX_VOCAB;
        const char *k;
        json_t *b;
        json_object_foreach(v, k, b) {
            char *end = NULL;
            long long id = -1;
            if (k[0] >= '0' && k[0] <= '9' && strlen(k) <= 9) id = strtoll(k, &end, 10);
            if (id < 0 || *end || id >= vocab)
                return bad(e, "logit_bias", "'logit_bias' key '%.32s' must be a token id in 0..%lld", k, vocab - 1);
            if (!json_is_number(b))
                return bad(e, "logit_bias", "'logit_bias' of token %lld must be a number, got %s", id, jtype(b));
            double x = json_number_value(b);
            if (!(x >= -100 && x <= 100))
                return bad(e, "logit_bias", "'logit_bias' of token %lld must be in [-100, 100], got %g", id, x);
            g->bias_id[g->n_bias] = (int32_t)id;
            g->bias[g->n_bias++] = (float)x;
        }
    }
    long long x = 0;
    if ((v = json_object_get(j, "logprobs")) && !json_is_null(v)) {
        if (r->kind == HTTPREQ_CHAT) {
            int on = 0;
            if (get_bool(j, "logprobs", &on, e)) return -EINVAL;
            if (on) g->logprobs = 1;
        } else if (!json_is_false(v)) {   /* the legacy integer: alternatives per token */
            if (get_int(j, "logprobs", 0, HTTPREQ_TOP_MAX, &x, NULL, e)) return -EINVAL;
            g->logprobs = 1 + (int)x;
        }
    }
    x = 0;
    if (get_int(j, "top_logprobs", 0, HTTPREQ_TOP_MAX, &x, NULL, e)) return -EINVAL;
    if (r->kind != HTTPREQ_CHAT && x)
        return bad(e, "top_logprobs", "'top_logprobs' is chat's; completions take the number of alternatives "
                   "as 'logprobs'");
    if (r->kind == HTTPREQ_CHAT) {
        if (x && !g->logprobs)
            return bad(e, "top_logprobs", "'top_logprobs' %lld needs 'logprobs': true", x);
        if (g->logprobs) g->logprobs = 1 + (int)x;
    }
    x = 1;
    if (get_int(j, "n", 1, HTTPREQ_N_MAX, &x, NULL, e)) return -EINVAL;
    r->n = (int)x;
    return 0;
}

/* The fields the parser reads (used, checked, or refused above); any other
 * is reported in X-Lind-Ignored. */
static int field_read(const char *k, httpreq_kind kind)
{
    static const char *const both[] = {
        "model", "max_tokens", "temperature", "top_p", "top_k", "seed", "n", "stream", "stream_options",
        "stop", "logprobs", "top_logprobs", "best_of", "echo", "suffix", "frequency_penalty",
        "presence_penalty", "logit_bias", "tools", "tool_choice", "functions", "function_call",
        "response_format", "user", "session", "previous_response_id", "ignore_eos", "store",
    };
    for (size_t i = 0; i < sizeof both / sizeof both[0]; i++)
        if (!strcmp(k, both[i])) return 1;
    if (kind == HTTPREQ_CHAT)
        return !strcmp(k, "messages") || !strcmp(k, "max_completion_tokens");
    return !strcmp(k, "prompt");
}

/* Add prefix+key to the ignored list (buf, at most HTTPREQ_IGNORED_MAX
 * names): %-escaped outside [A-Za-z0-9_.-], so a key cannot break the
 * header it is reported in. */
static int note_ignored(char *buf, size_t cap, int *count, const char *prefix, const char *key, size_t klen,
                        httpreq_error *e)
{
    if (klen == 0 || klen > 64)
        return bad(e, NULL, "a field name of %zu bytes: lind names the fields it ignores in X-Lind-Ignored, "
                   "1..64 bytes each", klen);
    if (++*count > HTTPREQ_IGNORED_MAX)
        return bad(e, NULL, "over %d fields that lind ignores (X-Lind-Ignored reports at most that many)",
                   HTTPREQ_IGNORED_MAX);
    size_t o = strlen(buf);
    if (o) o += (size_t)snprintf(buf + o, cap - o, ", ");
    o += (size_t)snprintf(buf + o, cap - o, "%s", prefix);
    for (size_t i = 0; i < klen && o + 4 < cap; i++) {
        unsigned char c = (unsigned char)key[i];
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
            c == '.' || c == '-')
            buf[o++] = (char)c;
        else
            o += (size_t)snprintf(buf + o, cap - o, "%%%02X", c);
    }
    buf[o] = 0;
    return 0;
}

/* Every field lind does not act on, for X-Lind-Ignored. */
static int collect_ignored(httpreq *r, json_t *j, const httpreq_limits *lim, httpreq_error *e)
{
    char buf[HTTPREQ_IGNORED_MAX * (sizeof "stream_options." + 3 * 64 + 2) + 1] = "";
    int count = 0;
    const char *k;
    void *it;
    const char *model = json_string_value(json_object_get(j, "model"));
    if (model && lim->model_id && strcmp(model, lim->model_id) &&
        note_ignored(buf, sizeof buf, &count, "", "model", 5, e))
        return -EINVAL;
    if (r->kind == HTTPREQ_CHAT && json_object_get(j, "max_completion_tokens") &&
        json_object_get(j, "max_tokens") && note_ignored(buf, sizeof buf, &count, "", "max_tokens", 10, e))
        return -EINVAL;
    for (it = json_object_iter(j); it; it = json_object_iter_next(j, it)) {
        k = json_object_iter_key(it);
        size_t kl = json_object_iter_key_len(it);
        if (kl == strlen(k) && field_read(k, r->kind)) continue;
        if (note_ignored(buf, sizeof buf, &count, "", k, kl, e)) return -EINVAL;
    }
    json_t *so = json_object_get(j, "stream_options");
    for (it = json_is_object(so) ? json_object_iter(so) : NULL; it; it = json_object_iter_next(so, it)) {
        k = json_object_iter_key(it);
        size_t kl = json_object_iter_key_len(it);
        if (kl == strlen(k) && !strcmp(k, "include_usage")) continue;
        if (note_ignored(buf, sizeof buf, &count, "stream_options.", k, kl, e)) return -EINVAL;
    }
    if (buf[0] && !(r->ignored = strdup(buf))) return oom(e);
    return 0;
}

/* The fields completions and chat share. */
static int parse_common(httpreq *r, json_t *j, const httpreq_limits *lim, httpreq_error *e)
{
    op_request *g = &r->gen;
    g->op = OP_GENERATE;
    g->id = 1;
    g->sp = (sampler_params){ .temperature = 0.8f, .top_k = 0, .top_p = 1.0f, .rep_penalty = 1.0f,
                              .rep_window = 64, .seed = 0 };
    json_t *v;
    if ((v = json_object_get(j, "model")) && !json_is_string(v))
        return bad(e, "model", "'model' must be a string, got %s", jtype(v));
    long long x = r->kind == HTTPREQ_CHAT ? (lim->req->max_tokens < 256 ? lim->req->max_tokens : 256)
                                          : (lim->req->max_tokens < 16 ? lim->req->max_tokens : 16);
    const char *mt = r->kind == HTTPREQ_CHAT && json_object_get(j, "max_completion_tokens") ?
                     "max_completion_tokens" : "max_tokens";
    if ((v = json_object_get(j, mt)) && json_is_integer(v) && json_integer_value(v) > lim->req->max_tokens)
        return bad(e, mt, "'%s' %lld is over the server's limit of %u", mt,
                   (long long)json_integer_value(v), lim->req->max_tokens);
    if (get_int(j, mt, 1, lim->req->max_tokens, &x, NULL, e)) return -EINVAL;
    g->max_tokens = (uint32_t)x;
    /* OpenAI's ranges: temperature 0..2, top_p (0, 1] (0 would keep no token). */
    if (get_num(j, "temperature", 0, 2, 0, &g->sp.temperature, e)) return -EINVAL;
    if (get_num(j, "top_p", 0, 1, 1, &g->sp.top_p, e)) return -EINVAL;
    x = 0;
    int has = 0;
    if (get_int(j, "top_k", 0, lim->req->max_top_k > 0 ? lim->req->max_top_k : LIND_MAX_VOCAB, &x, &has, e)) return -EINVAL;
    if (has) g->sp.top_k = (int)x;
    has = 0;
    if (get_int(j, "seed", 0, INT64_MAX, &x, &has, e)) return -EINVAL;
    if (has) { g->sp.seed = (uint64_t)x; g->has_seed = 1; }
    if (get_bool(j, "stream", &r->stream, e)) return -EINVAL;
    if ((v = json_object_get(j, "ignore_eos")) && !json_is_null(v)) {   /* vLLM's extension */
        if (get_bool(j, "ignore_eos", &g->ignore_eos, e)) return -EINVAL;
        g->has_ignore_eos = 1;
    }
    if ((v = json_object_get(j, "stream_options")) && !json_is_null(v)) {
        if (!json_is_object(v)) return bad(e, "stream_options", "'stream_options' must be an object");
        if (get_bool(v, "include_usage", &r->include_usage, e)) return -EINVAL;
    }
    if (parse_unsupported(j, e) || parse_response_format(r, j, e) || parse_sampling(r, j, lim, e)) return -EINVAL;
    if ((v = json_object_get(j, "user")) && !json_is_null(v)) {
        if (!json_is_string(v)) return bad(e, "user", "'user' must be a string, got %s", jtype(v));
        size_t n = json_string_length(v);
        if (n > HTTPREQ_USER_MAX || strlen(json_string_value(v)) != n)
            return bad(e, "user", "'user' must be at most %d bytes without NUL characters", HTTPREQ_USER_MAX);
        memcpy(r->user, json_string_value(v), n + 1);
    }
    v = json_object_get(j, "stop");
    if (json_is_string(v)) {
        if (add_stop(r, json_string_value(v), json_string_length(v), e)) return -EINVAL;
    } else if (json_is_array(v)) {
        for (size_t i = 0; i < json_array_size(v); i++) {
            json_t *s = json_array_get(v, i);
            if (!json_is_string(s)) return bad(e, "stop", "stop[%zu] must be a string, got %s", i, jtype(s));
            if (add_stop(r, json_string_value(s), json_string_length(s), e)) return -EINVAL;
        }
    } else if (v && !json_is_null(v)) {
        return bad(e, "stop", "'stop' must be a string or an array of strings, got %s", jtype(v));
    }
    return collect_ignored(r, j, lim, e);
}

struct httpreq_conv {
    XXH64_state_t *st;   /* after the messages */
    uint32_t tpl;
};

void httpreq_conv_free(httpreq_conv *c)
{
    if (!c) return;
    XXH64_freeState(c->st);
    free(c);
}

int httpreq_conv_begin(json_t *messages, size_t n, uint32_t tpl, httpreq_conv **out)
{
    *out = NULL;
    httpreq_conv *c = calloc(1, sizeof *c);
    if (!c || !(c->st = XXH64_createState())) {
        free(c);
        return -ENOMEM;
    }
    c->tpl = tpl;
    XXH64_reset(c->st, 0x6c696e64);   /* "lind" */
    for (size_t i = 0; i < n; i++) {
        json_t *m = json_array_get(messages, i);
        const char *role = json_string_value(json_object_get(m, "role"));
        char *text, err[64];
        size_t len;
        if (!role || chat_message_text(m, i, &text, &len, err, sizeof err)) {
            httpreq_conv_free(c);
            return -EINVAL;
        }
        XXH64_update(c->st, role, strlen(role) + 1);
        XXH64_update(c->st, text, len + 1);
        free(text);
    }
    *out = c;
    return 0;
}

httpreq_conv *httpreq_conv_dup(const httpreq_conv *c)
{
    httpreq_conv *d = calloc(1, sizeof *d);
    if (!d || !(d->st = XXH64_createState())) {
        free(d);
        return NULL;
    }
    XXH64_copyState(d->st, c->st);
    d->tpl = c->tpl;
    return d;
}

int httpreq_conv_end(const httpreq_conv *c, const char *reply, size_t reply_len, char *out, size_t outlen)
{
    httpreq_conv *d = httpreq_conv_dup(c);   /* c stays as it was */
    if (!d) return -ENOMEM;
    if (reply) {
        XXH64_update(d->st, "assistant", 10);
        XXH64_update(d->st, reply, reply_len);
        XXH64_update(d->st, "", 1);
    }
    uint8_t th[4] = { (uint8_t)d->tpl, (uint8_t)(d->tpl >> 8), (uint8_t)(d->tpl >> 16), (uint8_t)(d->tpl >> 24) };
    XXH64_update(d->st, th, 4);
    snprintf(out, outlen, "chat-%016llx", (unsigned long long)XXH64_digest(d->st));
    httpreq_conv_free(d);
    return 0;
}

int httpreq_conv_name(json_t *messages, size_t n, const char *reply, size_t reply_len, uint32_t tpl,
                      char *out, size_t outlen)
{
    httpreq_conv *c;
    int rc = httpreq_conv_begin(messages, n, tpl, &c);
    if (rc == 0) rc = httpreq_conv_end(c, reply, reply_len, out, outlen);
    httpreq_conv_free(c);
    return rc;
}

int httpreq_put_utf8(bytebuf *b, const uint8_t *p, size_t n)
{
    size_t i = 0;
    while (i < n) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t k = utf8proc_iterate(p + i, (utf8proc_ssize_t)(n - i), &cp);
        if (k > 0) {
            if (bytebuf_put(b, p + i, (size_t)k)) return -ENOMEM;
            i += (size_t)k;
        } else {
            if (bytebuf_put(b, "\xEF\xBF\xBD", 3)) return -ENOMEM;
            i++;
        }
    }
    return 0;
}

int httpreq_reply_text(bytebuf *b, const uint8_t *text, size_t n, int n_stop,
                       const uint8_t stop[][STOP_MAX_LEN], const uint8_t *stop_len)
{
    size_t end = n;
    for (int i = 0; i < n_stop; i++) {
        const uint8_t *hit = n ? memmem(text, n, stop[i], stop_len[i]) : NULL;
        if (hit && (size_t)(hit - text) < end) end = (size_t)(hit - text);
    }
    return httpreq_put_utf8(b, text, end);
}

/* The chat text: which messages are new, the template's stop strings, and
 * the rendering (docs/HTTP.md, "Sessions: what is fed"). */
static int parse_chat(httpreq *r, json_t *j, const httpreq_limits *lim, httpreq_error *e)
{
    const chat_template *tpl = lim->tpl;
    json_t *msgs = json_object_get(j, "messages");
    if (!json_is_array(msgs) || json_array_size(msgs) == 0)
        return bad(e, "messages", "'messages' must be a non-empty array of {role, content}");
    r->messages = json_incref(msgs);
    size_t k = 0;   /* messages before k are what the session holds */
    for (size_t i = 0; i < json_array_size(msgs); i++) {
        const char *role = json_string_value(json_object_get(json_array_get(msgs, i), "role"));
        if (role && !strcmp(role, "assistant")) k = i + 1;
    }
    for (size_t i = 0; i < tpl->n_stop; i++) {
        size_t sl = strlen(tpl->stop[i]);
        int dup = 0;
        for (int s2 = 0; s2 < r->gen.n_stop; s2++)
            dup |= r->gen.stop_len[s2] == sl && !memcmp(r->gen.stop[s2], tpl->stop[i], sl);
        if (!dup && add_stop(r, tpl->stop[i], sl, e)) return -EINVAL;
    }
    const char *cont = r->prev[0] ? r->prev : r->name[0] ? r->name : NULL;
    if (!cont && k > 0) {
        int rc = httpreq_conv_name(msgs, k, NULL, 0, tpl->hash, r->prefix, sizeof r->prefix);
        if (rc == -ENOMEM) return oom(e);
        if (rc) r->prefix[0] = 0;   /* a bad message: chat_render names it below */
        else cont = r->prefix;
    }
    size_t from = r->prev[0] ? 0 : k;
    char err[512], *txt = NULL;
    size_t n = 0;
    /* After a reply, what the session's stream already ends with is dropped
     * where the stream is known, on the compute thread (op_request.reply_tpl). */
    r->after_reply = cont && (from > 0 || r->prev[0]);
    int rc = chat_render(tpl, msgs, from, from > 0 || r->prev[0], NULL, 0,
                         from == 0 && !r->prev[0] && !r->name[0], &txt, &n, err, sizeof err);
    if (rc == -ENOMEM) return oom(e);
    if (rc) return bad(e, "messages", "%s", err);
    r->new_text = (uint8_t *)txt;
    r->new_len = n;
    r->gen.chat_template = tpl->hash;   /* the session records it, or refuses another */
    if (!r->prev[0] && !r->name[0] && k > 0) {
        /* Stateless with history: the whole conversation too, in case no
         * stored session holds its prefix. */
        rc = chat_render(tpl, msgs, 0, 0, NULL, 0, 1, &txt, &n, err, sizeof err);
        if (rc == -ENOMEM) return oom(e);
        if (rc) return bad(e, "messages", "%s", err);
        r->full_text = (uint8_t *)txt;
        r->full_len = n;
    }
    return 0;
}

static int parse_object(httpreq *r, json_t *j, const char *hdr, size_t hdr_len, const httpreq_limits *lim,
                        httpreq_error *e)
{
    if (parse_common(r, j, lim, e)) return -EINVAL;
    /* `user` is OpenAI's end-user id (parse_common keeps it for the log):
     * one user has many conversations, so it never names a session. */
    if (get_name(j, "session", r->name, e) || get_name(j, "previous_response_id", r->prev, e))
        return -EINVAL;
    if (hdr) {
        char why[160];
        if (hdr_len == 0 || hdr_len > STORE_NAME_MAX)
            return bad(e, NULL, "header X-Lind-Session must be 1..%d bytes", STORE_NAME_MAX);
        memcpy(r->name, hdr, hdr_len);
        r->name[hdr_len] = 0;
        if (strlen(r->name) != hdr_len) return bad(e, NULL, "header X-Lind-Session holds a NUL byte");
        if (store_name_check(r->name, why, sizeof why))
            return bad(e, NULL, "header X-Lind-Session cannot name a session: %s", why);
    }
    if (r->prev[0] && r->name[0])
        return bad(e, "previous_response_id", "'previous_response_id' continues a response's own "
                   "session; it cannot be combined with a session name (session, X-Lind-Session)");
    if (r->n > 1 && r->name[0])
        return bad(e, "n", "'n' %d: a named session (session, X-Lind-Session) holds one conversation; "
                   "n > 1 answers from fresh or previous_response_id sessions", r->n);
    if (r->kind == HTTPREQ_CHAT) return parse_chat(r, j, lim, e);
    json_t *p = json_object_get(j, "prompt");
    if (json_is_array(p) && json_array_size(p) == 1) p = json_array_get(p, 0);
    if (!p) return bad(e, "prompt", "'prompt' is required");
    if (!json_is_string(p))
        return bad(e, "prompt", "'prompt' must be a string (or an array of one string), got %s", jtype(p));
    size_t n = json_string_length(p);
    if (!(r->new_text = malloc(n ? n : 1))) return oom(e);
    memcpy(r->new_text, json_string_value(p), n);
    r->new_len = n;
    return 0;
}

/* One Responses input item as a chat message, and as the item the
 * response lists (input_items): {type: message, role, content: a string or
 * parts of type input_text / output_text / text}. */
static int response_item(json_t *it, size_t i, json_t *msgs, json_t *items, httpreq_error *e)
{
    char param[48];
    snprintf(param, sizeof param, "input[%zu]", i);
    if (!json_is_object(it)) return bad(e, "input", "%s must be an object, got %s", param, jtype(it));
    const char *type = json_string_value(json_object_get(it, "type"));
    if (json_object_get(it, "type") && (!type || strcmp(type, "message"))) {
        if (!type) return bad(e, "input", "%s.type must be a string", param);
        return unsupported(e, "input", "%s of type '%.40s' (lind takes message items)", param, type);
    }
    const char *role = json_string_value(json_object_get(it, "role"));
    if (!role || (strcmp(role, "user") && strcmp(role, "system") && strcmp(role, "developer") &&
                  strcmp(role, "assistant")))
        return bad(e, "input", "%s.role must be user, system, developer or assistant", param);
    json_t *c = json_object_get(it, "content"), *parts = json_array(), *text = json_array();
    if (!parts || !text) { json_decref(parts); json_decref(text); return oom(e); }
    const char *kind = strcmp(role, "assistant") ? "input_text" : "output_text";
    if (json_is_string(c)) {
        json_array_append_new(parts, json_pack("{s:s, s:O}", "type", "text", "text", c));
        json_array_append_new(text, json_pack("{s:s, s:O}", "type", kind, "text", c));
    } else if (json_is_array(c)) {
        size_t k;
        json_t *p;
        json_array_foreach(c, k, p) {
            const char *pt = json_string_value(json_object_get(p, "type"));
            json_t *t = json_object_get(p, "text");
            if (!pt || !json_is_string(t) ||
                (strcmp(pt, "input_text") && strcmp(pt, "output_text") && strcmp(pt, "text"))) {
                json_decref(parts);
                json_decref(text);
                if (pt && strcmp(pt, "input_text") && strcmp(pt, "output_text") && strcmp(pt, "text"))
                    return unsupported(e, "input", "%s.content[%zu] of type '%.40s' (lind takes text)", param, k,
                                       pt);
                return bad(e, "input", "%s.content[%zu] must be {type: input_text, text: a string}", param, k);
            }
            json_array_append_new(parts, json_pack("{s:s, s:O}", "type", "text", "text", t));
            json_array_append_new(text, json_pack("{s:s, s:O}", "type", pt, "text", t));
        }
    } else {
        json_decref(parts);
        json_decref(text);
        return bad(e, "input", "%s.content must be a string or an array of text parts", param);
    }
    char id[40];
    snprintf(id, sizeof id, "msg_%zu", i);
    json_array_append_new(msgs, json_pack("{s:s, s:o}", "role", role, "content", parts));
    json_array_append_new(items, json_pack("{s:s, s:s, s:s, s:s, s:o}", "id", id, "type", "message", "status",
                                           "completed", "role", role, "content", text));
    return 0;
}

/* The fields of a /v1/responses body lind reads; any other is reported in
 * X-Lind-Ignored. */
static int responses_field_read(const char *k)
{
    static const char *const read[] = {
        "model", "input", "instructions", "previous_response_id", "store", "max_output_tokens",
        "temperature", "top_p", "stream", "user", "text", "tools", "tool_choice", "background",
        "top_logprobs", "seed", "top_k", "session",
    };
    for (size_t i = 0; i < sizeof read / sizeof read[0]; i++)
        if (!strcmp(k, read[i])) return 1;
    return 0;
}

/* POST /v1/responses: `instructions` and `input` become chat messages (a
 * system message, then the items), max_output_tokens max_tokens; the body
 * so made is parsed as a chat request. */
static int parse_responses(httpreq *r, json_t *j, const char *hdr, size_t hdr_len, const httpreq_limits *lim,
                           httpreq_error *e)
{
    json_t *c = json_object(), *msgs = json_array(), *items = json_array(), *v;
    int rc = -EINVAL;
    r->responses = 1;
    r->store = 1;
    if (!c || !msgs || !items) { rc = oom(e); goto out; }
    if (get_bool(j, "store", &r->store, e)) goto out;
    int bg = 0;
    if (get_bool(j, "background", &bg, e)) goto out;
    if (bg) { rc = unsupported(e, "background", "'background' true"); goto out; }
    if ((v = json_object_get(j, "text")) && !json_is_null(v)) {
        json_t *f = json_is_object(v) ? json_object_get(v, "format") : NULL;
        const char *t = json_is_object(f) ? json_string_value(json_object_get(f, "type")) : NULL;
        if (!json_is_object(v) || (f && !json_is_null(f) && !t)) {
            rc = bad(e, "text", "'text' must be an object; text.format an object with a string 'type'");
            goto out;
        }
        /* text.format is response_format flattened: parsed as one */
        if (t && strcmp(t, "text")) json_object_set(c, "response_format", f);
    }
    if ((v = json_object_get(j, "instructions")) && !json_is_null(v)) {
        if (!json_is_string(v)) { rc = bad(e, "instructions", "'instructions' must be a string, got %s", jtype(v)); goto out; }
        json_array_append_new(msgs, json_pack("{s:s, s:O}", "role", "system", "content", v));
    }
    v = json_object_get(j, "input");
    if (json_is_string(v)) {
        json_t *it = json_pack("{s:s, s:O}", "role", "user", "content", v);
        rc = it ? response_item(it, 0, msgs, items, e) : oom(e);
        json_decref(it);
        if (rc) goto out;
        rc = -EINVAL;
    } else if (json_is_array(v) && json_array_size(v)) {
        size_t i;
        json_t *it;
        json_array_foreach(v, i, it)
            if (response_item(it, i, msgs, items, e)) goto out;
    } else {
        rc = bad(e, "input", "'input' must be a string or a non-empty array of message items");
        goto out;
    }
    json_object_set(c, "messages", msgs);
    static const char *const copy[] = { "model", "temperature", "top_p", "stream", "user", "previous_response_id",
                                        "tools", "tool_choice", "seed", "top_k", "session" };
    for (size_t i = 0; i < sizeof copy / sizeof copy[0]; i++)
        if ((v = json_object_get(j, copy[i]))) json_object_set(c, copy[i], v);
    if ((v = json_object_get(j, "max_output_tokens"))) {
        if (json_is_integer(v) && json_integer_value(v) > lim->req->max_tokens) {
            rc = bad(e, "max_output_tokens", "'max_output_tokens' %lld is over the server's limit of %u",
                     (long long)json_integer_value(v), lim->req->max_tokens);
            goto out;
        }
        long long x = 0;
        if (get_int(j, "max_output_tokens", 1, lim->req->max_tokens, &x, NULL, e)) goto out;
        json_object_set(c, "max_tokens", v);
    }
    if ((v = json_object_get(j, "top_logprobs")) && !json_is_null(v)) {
        long long x = 0;
        if (get_int(j, "top_logprobs", 0, HTTPREQ_TOP_MAX, &x, NULL, e)) goto out;
        if (x) { rc = unsupported(e, "top_logprobs", "'top_logprobs' %lld on /v1/responses", x); goto out; }
    }
    if ((rc = parse_object(r, c, hdr, hdr_len, lim, e))) goto out;
    /* What lind ignores is named as the body has it, not as translated. */
    char buf[HTTPREQ_IGNORED_MAX * (3 * 64 + 2) + 1] = "";
    int count = 0;
    const char *model = json_string_value(json_object_get(j, "model"));
    if (model && lim->model_id && strcmp(model, lim->model_id) &&
        (rc = note_ignored(buf, sizeof buf, &count, "", "model", 5, e)))
        goto out;
    for (void *it = json_object_iter(j); it; it = json_object_iter_next(j, it)) {
        const char *k = json_object_iter_key(it);
        size_t kl = json_object_iter_key_len(it);
        if (kl == strlen(k) && responses_field_read(k)) continue;
        if ((rc = note_ignored(buf, sizeof buf, &count, "", k, kl, e))) goto out;
    }
    free(r->ignored);
    r->ignored = NULL;
    if (buf[0] && !(r->ignored = strdup(buf))) { rc = oom(e); goto out; }
    json_t *ins = json_object_get(j, "instructions"), *mot = json_object_get(j, "max_output_tokens");
    r->rparams = json_pack("{s:O, s:O, s:f, s:f, s:b, s:s?}", "instructions", ins ? ins : json_null(),
                           "max_output_tokens", mot ? mot : json_null(), "temperature",
                           round((double)r->gen.sp.temperature * 1e6) / 1e6, "top_p",
                           round((double)r->gen.sp.top_p * 1e6) / 1e6, "store", r->store,
                           "previous_response_id", r->prev[0] ? r->prev : NULL);
    if (!r->rparams) { rc = oom(e); goto out; }
    if (!json_object_get(r->rparams, "previous_response_id"))
        json_object_set_new(r->rparams, "previous_response_id", json_null());
    json_t *fmt = json_object_get(c, "response_format");   /* structured output: echoed as given */
    if (fmt && json_object_set_new(r->rparams, "text", json_pack("{s:O}", "format", fmt))) { rc = oom(e); goto out; }
    r->input_items = items;
    items = NULL;
    rc = 0;
out:
    json_decref(c);
    json_decref(msgs);
    json_decref(items);
    return rc;
}

int httpreq_parse(httpreq *r, httpreq_kind kind, const char *body, size_t len, const char *hdr_session,
                  size_t hdr_len, const httpreq_limits *lim, httpreq_error *e)
{
    memset(r, 0, sizeof *r);
    memset(e, 0, sizeof *e);
    r->kind = kind;
    json_error_t je;
    json_t *j = json_loadb(body ? body : "", len, JSON_REJECT_DUPLICATES, &je);
    if (!j) {
        bad(e, NULL, "the request body is not valid JSON: %s (line %d, column %d)", je.text, je.line,
            je.column);
        e->code = "invalid_json";
        return -EINVAL;
    }
    if (!json_is_object(j)) {
        bad(e, NULL, "the request body must be a JSON object, got %s", jtype(j));
        e->code = "invalid_json";
        json_decref(j);
        return -EINVAL;
    }
    int rc;
    if (kind == HTTPREQ_RESPONSES) {
        r->kind = HTTPREQ_CHAT;
        rc = parse_responses(r, j, hdr_session, hdr_len, lim, e);
    } else {
        r->store = 1;   /* store: false: no resp-/chat- copy is kept (docs/HTTP.md) */
        rc = get_bool(j, "store", &r->store, e) ? -EINVAL
             : parse_object(r, j, hdr_session, hdr_len, lim, e);
    }
    json_decref(j);
    if (rc) httpreq_free(r);
    return rc;
}

void httpreq_free(httpreq *r)
{
    op_request_free(&r->gen);
    json_decref(r->messages);
    free(r->new_text);
    free(r->full_text);
    free(r->ignored);
    json_decref(r->input_items);
    json_decref(r->rparams);
    r->input_items = r->rparams = NULL;
    r->messages = NULL;
    r->new_text = r->full_text = NULL;
    r->ignored = NULL;
}
