/* tests/fuzz_http_request.c — libFuzzer driver for the HTTP front door's
 * request parsing (httpreq_parse, daemon/httpreq.h): the JSON body of
 * /v1/completions and /v1/chat/completions, every field check, the
 * X-Lind-Session header, and chat messages rendered with a chat template
 * (recurrent/chat.h) — what daemon/http.c runs on a request's bytes, without
 * a network.
 *
 * Input: byte 0 chooses the case (bit 0: chat, else completions; bit 1: the
 * raven template, else "none"; bit 2: bytes 1..(byte 1 % 40) are an
 * X-Lind-Session header; bit 3: sessions are said to have ended on the
 * template's stop string, so the tail is cut from the next turn; bit 4: the
 * served model is "default", so another `model` is reported ignored; bit 5:
 * a /v1/responses body, bit 0 then ignored; bit 6: instead, the rest is a
 * request target for GET /v1/sessions[/{name}], http_sessions_request,
 * which must give a list, the info of a name the store takes, or ENOENT),
 * the rest is the body as
 * tests/fuzz_common.h reads it (its base: a chat request using every field,
 * or a Responses request using every field).
 * Invariants: no crash, leak or UB; a refusal is 400 (or 500 out of
 * memory) with a code and a message; an accepted request has a prompt
 * text, stop strings within the protocol's limits, max_tokens in
 * 1..the server's, sampler settings in OpenAI's ranges (temperature 0..2,
 * top_p in (0, 1]) that the sampler accepts, valid session names and not
 * both a name and a previous response, a `user` of at most 256 bytes, and
 * an X-Lind-Ignored value of at most 32 names made only of header-safe
 * bytes; n in 1..16 and never with a session name; penalties in [-2, 2];
 * logit_bias entries naming tokens of the vocabulary with biases in
 * [-100, 100]; logprobs off or 1 + 0..20 alternatives; a Responses
 * request parsed as chat with its input items and echoed parameters; a stateless chat with history also has the whole text, and its
 * conversation hashes to a chat- name. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "daemon/http_sessions.h"
#include "daemon/httpreq.h"
#include "recurrent/sampler.h"
#include "state/store.h"
#include "tests/fuzz_common.h"

static const char *const base_json =
    "{\"model\":\"default\",\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},"
    "{\"role\":\"user\",\"content\":\"Hello\\n\"},{\"role\":\"assistant\",\"content\":\"Hi.\"},"
    "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"And \"},{\"type\":\"text\",\"text\":\"you?\"}]}],"
    "\"max_tokens\":32,\"temperature\":0.7,\"top_p\":0.9,\"top_k\":40,\"seed\":7,\"stop\":[\"\\n\\n\",\"END\"],"
    "\"stream\":true,\"stream_options\":{\"include_usage\":true,\"x\":0},\"n\":1,\"prompt\":[\"once\"],"
    "\"user\":\"u-1\",\"logprobs\":null,\"echo\":false,\"frequency_penalty\":0,\"presence_penalty\":0,"
    "\"logit_bias\":{},\"tools\":[],\"tool_choice\":\"auto\",\"response_format\":{\"type\":\"text\"},"
    "\"best_of\":1,\"top_logprobs\":0,\"metadata\":{\"k\":1},\"max_completion_tokens\":8}";

/* Every field of /v1/responses lind reads, and one it ignores. */
static const char *const responses_json =
    "{\"model\":\"default\",\"instructions\":\"Be brief.\",\"input\":[{\"role\":\"user\",\"content\":\"Hi\"},"
    "{\"type\":\"message\",\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":\"Hello.\"}]},"
    "{\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"More\"}]}],"
    "\"previous_response_id\":\"resp-0123456789abcdef\",\"store\":true,\"max_output_tokens\":9,"
    "\"temperature\":1,\"top_p\":0.5,\"stream\":true,\"user\":\"u\",\"text\":{\"format\":{\"type\":\"text\"}},"
    "\"tools\":[],\"tool_choice\":\"none\",\"background\":false,\"top_logprobs\":0,\"seed\":3,\"top_k\":5,"
    "\"metadata\":{}}";

static chat_template none_tpl, raven_tpl;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc; (void)argv;
    char err[256];
    if (chat_template_parse(&none_tpl, NULL, err, sizeof err) ||
        chat_template_parse(&raven_tpl, "{\"system\":\"{system}\\n\\n\",\"user\":\"User: {prompt}\\n\\n"
                            "Assistant:\",\"assistant_end\":\"\\n\\n\",\"stop\":[\"\\n\\nUser:\"],"
                            "\"default_system\":\"You are kind.\"}", err, sizeof err))
        abort();
    fuzz_maybe_write_seed((const uint8_t *)base_json, strlen(base_json));
    return 0;
}

/* X-Lind-Ignored's value: "a, b" of at most HTTPREQ_IGNORED_MAX names,
 * each 1.. bytes of [A-Za-z0-9_.-%]. */
static void check_ignored(const char *s)
{
    if (!s) return;
    int names = 1;
    size_t run = 0;
    for (const char *p = s; *p; p++) {
        if (p[0] == ',' && p[1] == ' ' && run) { names++; run = 0; p++; continue; }
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              strchr("_.-%", *p)))
            abort();
        run++;
    }
    if (!run || names > HTTPREQ_IGNORED_MAX) abort();
}

static void check_name(const char *s)
{
    char why[160];
    if (!memchr(s, 0, STORE_NAME_MAX + 1)) abort();
    if (s[0] && store_name_check(s, why, sizeof why)) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    uint8_t sel = data[0];
    const char *hdr = NULL;
    size_t hlen = 0;
    data++, size--;
    if (sel & 64) {   /* the rest is a GET target for /v1/sessions (daemon/http_sessions.h) */
        op_request r;
        int rc = http_sessions_request((const char *)data, size, &r);
        if (rc != 0 && rc != -ENOENT) abort();
        if (rc == 0 && r.op != OP_LIST && !(r.op == OP_INFO && !store_name_check(r.session, NULL, 0)))
            abort();   /* a list, or the info of a name the store takes */
        return 0;
    }
    if ((sel & 4) && size >= 1) {
        hlen = data[0] % 40;
        if (hlen > size - 1) hlen = size - 1;
        hdr = (const char *)data + 1;
        data += 1 + hlen, size -= 1 + hlen;
    }
    uint8_t *b;
    int fix;
    const char *base = (sel & 32) ? responses_json : base_json;
    size_t n = fuzz_bytes(data, size, (const uint8_t *)base, strlen(base), &b, &fix);
    const chat_template *tpl = (sel & 2) ? &raven_tpl : &none_tpl;
    static const proto_limits req_lim = { .max_message = 1 << 20, .max_tokens = 4096, .max_top_k = 256 };
    httpreq_limits lim = { .req = &req_lim, .tpl = tpl,
                           .model_id = (sel & 16) ? "default" : NULL };
    httpreq_kind kind = (sel & 32) ? HTTPREQ_RESPONSES : (sel & 1) ? HTTPREQ_CHAT : HTTPREQ_COMPLETION;
    httpreq r;
    httpreq_error e;
    int rc = httpreq_parse(&r, kind, (const char *)b, n, hdr, hlen, &lim, &e);
    if (rc) {
        if (!((rc == -EINVAL && e.status == 400) || (rc == -ENOMEM && e.status == 500))) abort();
        if (!e.code || !e.msg[0] || !memchr(e.msg, 0, sizeof e.msg)) abort();
        if (r.messages || r.new_text || r.full_text || r.input_items || r.rparams || r.gen.bias_id ||
            r.gen.bias)
            abort();   /* nothing left to free */
        free(b);
        return 0;
    }
    if (!r.new_text || r.gen.op != OP_GENERATE || r.gen.max_tokens > lim.req->max_tokens) abort();
    if (r.gen.n_stop < 0 || r.gen.n_stop > STOP_MAX) abort();
    for (int i = 0; i < r.gen.n_stop; i++)
        if (r.gen.stop_len[i] < 1 || r.gen.stop_len[i] > STOP_MAX_LEN || r.gen.stop_len[i] > r.max_stop)
            abort();
    if (r.gen.max_tokens < 1 || r.gen.sp.top_k < 0 || r.gen.sp.top_k > lim.req->max_top_k ||
        !(r.gen.sp.top_p > 0 && r.gen.sp.top_p <= 1) || !(r.gen.sp.temperature >= 0 && r.gen.sp.temperature <= 2))
        abort();
    char why[128];
    if (sampler_params_check(&r.gen.sp, why, sizeof why)) abort();   /* never a turn that fails its save */
    if (!memchr(r.user, 0, sizeof r.user)) abort();
    check_ignored(r.ignored);
    check_name(r.name);
    check_name(r.prev);
    check_name(r.prefix);
    if (r.name[0] && r.prev[0]) abort();
    if (r.n < 1 || r.n > HTTPREQ_N_MAX || (r.n > 1 && r.name[0])) abort();
    if (!(r.gen.presence_penalty >= -2 && r.gen.presence_penalty <= 2) ||
        !(r.gen.frequency_penalty >= -2 && r.gen.frequency_penalty <= 2))
        abort();
    if (r.gen.n_bias < 0 || r.gen.n_bias > HTTPREQ_BIAS_MAX || (r.gen.n_bias && (!r.gen.bias_id || !r.gen.bias)))
        abort();
    for (int i = 0; i < r.gen.n_bias; i++)
        if (r.gen.bias_id[i] < 0 || r.gen.bias_id[i] >= lim.req->max_top_k || !(r.gen.bias[i] >= -100 && r.gen.bias[i] <= 100))
            abort();
    if (r.gen.logprobs < 0 || r.gen.logprobs > 1 + HTTPREQ_TOP_MAX) abort();
    if (kind == HTTPREQ_RESPONSES) {
        if (!r.responses || r.kind != HTTPREQ_CHAT || !json_array_size(r.input_items) || !json_is_object(r.rparams) ||
            (r.store != 0 && r.store != 1))
            abort();
        kind = HTTPREQ_CHAT;   /* parsed as chat from there on */
    } else if (r.responses || r.input_items || r.rparams) {
        abort();
    }
    if (kind == HTTPREQ_CHAT) {
        if (!json_is_array(r.messages) || !json_array_size(r.messages)) abort();
        if (r.full_text && (r.name[0] || r.prev[0])) abort();
        if (r.prefix[0] && (strncmp(r.prefix, "chat-", 5) || !r.full_text)) abort();
        /* The fork-out hash of the conversation with a reply, as http.c
         * takes it: every message was rendered (so checked) unless a named
         * session holds those before the last reply. */
        char out[STORE_NAME_MAX + 1];
        int hr = httpreq_conv_name(r.messages, json_array_size(r.messages), "ok", 2, 1, out, sizeof out);
        if (hr == 0 ? strncmp(out, "chat-", 5) != 0 : (hr != -EINVAL || !r.name[0])) abort();
        /* After a reply, what the compute thread drops from the text's front
         * (the stream ending on the template's first stop string). */
        if ((sel & 8) && r.after_reply && tpl->n_stop) {
            size_t sk = chat_repeated(tpl, (const uint8_t *)tpl->stop[0], strlen(tpl->stop[0]), r.new_text,
                                      r.new_len);
            if (sk > r.new_len || sk > strlen(tpl->stop[0])) abort();
        }
    } else if (r.messages || r.full_text || r.prefix[0] || r.after_reply) {
        abort();
    }
    httpreq_free(&r);
    free(b);
    return 0;
}
