/* daemon/http_responses.c — the Responses API (docs/HTTP.md, "The
 * Responses API"): POST /v1/responses' answer object and stream events,
 * the objects remembered for GET, and GET/DELETE /v1/responses/{id} (with
 * the store requests behind GET /v1/sessions). The turn itself runs through
 * http.c's stages like a chat's. See http_impl.h. */
#include "daemon/http_impl.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>
#include <h2o.h>
#include "daemon/http_sessions.h"

/* A Responses API stream event: `event: TYPE`, its data with the type and
 * the stream's next sequence_number added. */
void http_resp_event(hreq *h, const char *type, json_t *j)
{
    if (!j) return;
    json_object_set_new(j, "type", json_string(type));
    json_object_set_new(j, "sequence_number", json_integer(h->seq_no++));
    bytebuf_put(&h->pend, "event: ", 7);
    bytebuf_put(&h->pend, type, strlen(type));
    bytebuf_put(&h->pend, "\n", 1);
    http_sse_event(h, j);
}

/* Remembered responses: the object and its input items, for GET (loop
 * memory; a response not held here is rebuilt from its stored session). */
static size_t resp_slot(const char *id)
{
    return (size_t)(XXH64(id, strlen(id), 1) % RESP_SLOTS);
}

static void resp_forget(http_server *hs, const char *id)
{
    if (!hs->resps) return;
    size_t i = resp_slot(id);
    if (strcmp(hs->resps[i].id, id)) return;
    json_decref(hs->resps[i].obj);
    json_decref(hs->resps[i].items);
    memset(&hs->resps[i], 0, sizeof hs->resps[i]);
}

static void resp_remember(http_server *hs, const char *id, json_t *obj, json_t *items)
{
    if (!hs->resps) return;
    size_t i = resp_slot(id);
    json_decref(hs->resps[i].obj);
    json_decref(hs->resps[i].items);
    snprintf(hs->resps[i].id, sizeof hs->resps[i].id, "%s", id);
    hs->resps[i].obj = json_incref(obj);
    hs->resps[i].items = json_incref(items);
}

/* The id of a response's output message. */
void http_resp_msg_id(const char *resp_id, char *out, size_t n)
{
    snprintf(out, n, "msg_%s", strncmp(resp_id, "resp-", 5) ? resp_id : resp_id + 5);
}

static json_t *resp_message(const char *resp_id, const char *status, const char *text, size_t n, int with_text)
{
    char mid[64];
    http_resp_msg_id(resp_id, mid, sizeof mid);
    json_t *content = json_array();
    if (with_text)
        json_array_append_new(content, json_pack("{s:s, s:s%, s:[], s:[]}", "type", "output_text", "text", text, n,
                                                 "annotations", "logprobs"));
    return json_pack("{s:s, s:s, s:s, s:s, s:o}", "id", mid, "type", "message", "status", status, "role",
                     "assistant", "content", content);
}

/* The response object: status "in_progress" (no output yet), or done
 * ("completed"; "incomplete" when max_output_tokens or a cancel ended it). */
static json_t *resp_object(hreq *h, int done)
{
    hchoice *c = &h->ch[0];
    const char *status = !done ? "in_progress" : !strcmp(c->finish, "stop") ? "completed" : "incomplete";
    json_t *j = json_pack("{s:s, s:s, s:I, s:s, s:n, s:s, s:[], s:b, s:s, s:[], s:{s:{s:s}}, s:s, s:n, s:o, s:{}}",
                          "id", h->resp_id, "object", "response", "created_at", (json_int_t)h->created, "status",
                          status, "error", "model", h->hs->model_id, "output", "parallel_tool_calls", 0,
                          "tool_choice", "auto", "tools", "text", "format", "type", "text", "truncation",
                          "disabled", "incomplete_details", "user", h->user[0] ? json_string(h->user) : json_null(),
                          "metadata");
    if (!j) return NULL;
    json_object_update(j, h->rparams);
    if (done) {
        bytebuf s = { 0 };
        http_reply_text(c, &s);
        json_array_append_new(json_object_get(j, "output"), resp_message(h->resp_id, "completed", s.p ? s.p : "",
                                                                           s.n, 1));
        json_object_set_new(j, "output_text", json_stringn(s.p ? s.p : "", s.n));
        bytebuf_free(&s);
        if (strcmp(status, "completed"))
            json_object_set_new(j, "incomplete_details", json_pack("{s:s}", "reason", !strcmp(c->finish, "length")
                                                                   ? "max_output_tokens" : c->finish));
        json_object_set_new(j, "usage", http_usage_object(h));
        json_object_set_new(j, "lind", json_pack("{s:s, s:I, s:I, s:I, s:I}", "session", h->session,
                                                 "session_tokens", (json_int_t)c->done.session_tokens, "seed",
                                                 (json_int_t)h->seed, "fed_bytes", (json_int_t)h->fed_bytes,
                                                 "prompt_bytes", (json_int_t)h->prompt_bytes));
    } else {
        json_object_set_new(j, "usage", json_null());
    }
    return j;
}

/* A streamed response's opening events, once: created, in_progress, the
 * output message and its text part added. */
void http_resp_begin_stream(hreq *h)
{
    if (h->resp_opened) return;
    h->resp_opened = 1;
    http_start_stream(h);
    json_t *o = resp_object(h, 0);
    http_resp_event(h, "response.created", json_pack("{s:O}", "response", o));
    http_resp_event(h, "response.in_progress", json_pack("{s:o}", "response", o));
    char mid[64];
    http_resp_msg_id(h->resp_id, mid, sizeof mid);
    http_resp_event(h, "response.output_item.added", json_pack("{s:i, s:o}", "output_index", 0, "item",
                                                               resp_message(h->resp_id, "in_progress", "", 0, 0)));
    http_resp_event(h, "response.content_part.added",
                    json_pack("{s:s, s:i, s:i, s:{s:s, s:s, s:[], s:[]}}", "item_id", mid, "output_index", 0,
                              "content_index", 0, "part", "type", "output_text", "text", "", "annotations", "logprobs"));
}

void http_resp_complete(hreq *h)
{
    json_t *o = resp_object(h, 1);
    if (h->store) resp_remember(h->hs, h->resp_id, o, h->input_items);
    if (!h->stream) {
        h2o_req_t *req = h->req;
        h->req = NULL;
        http_turn_headers(h, req);
        http_send_json(req, 200, "OK", o);
        return;
    }
    http_resp_begin_stream(h);
    hchoice *c = &h->ch[0];
    http_stream_text(h, c, 1);
    char mid[64];
    http_resp_msg_id(h->resp_id, mid, sizeof mid);
    json_t *item = json_array_get(json_object_get(o, "output"), 0);
    json_t *part = json_array_get(json_object_get(item, "content"), 0);
    http_resp_event(h, "response.output_text.done", json_pack("{s:s, s:i, s:i, s:O, s:[]}", "item_id", mid,
                                                              "output_index", 0, "content_index", 0, "text",
                                                              json_object_get(part, "text"), "logprobs"));
    http_resp_event(h, "response.content_part.done", json_pack("{s:s, s:i, s:i, s:O}", "item_id", mid, "output_index",
                                                               0, "content_index", 0, "part", part));
    http_resp_event(h, "response.output_item.done", json_pack("{s:i, s:O}", "output_index", 0, "item", item));
    http_resp_event(h, strcmp(json_string_value(json_object_get(o, "status")), "completed") ? "response.incomplete"
                    : "response.completed", json_pack("{s:o}", "response", o));
    h->final_queued = 1;
    http_send_pending(h);
}

/* The admin answer (GET, DELETE, GET input_items) of a response not held
 * in memory, or DELETE's, from the store's `info` / `delete` result. */
void http_resp_admin_result(hreq *h, const evlist *l, const event *e)
{
    http_server *hs = h->hs;
    h->pending_backend = 0;
    h->over = 1;
    if (!h->req) return;
    h2o_req_t *req = h->req;
    h->req = NULL;
    if (e->kind == EV_ERROR) {
        if (e->code == PE_NOT_FOUND)
            http_send_error(hs, req, 404, "not_found", NULL, "no stored %s '%s'", h->admin == 4 ? "session" : "response",
                            h->session);
        else
            http_send_error(hs, req, http_code_status(e->code), proto_code_name(e->code), NULL, "%.*s", (int)e->len,
                            (const char *)event_bytes(l, e));
        return;
    }
    if (h->admin == 4) {
        json_t *j = http_sessions_json(l, e);
        if (j) http_send_json(req, 200, "OK", j);
        else http_send_error(hs, req, 500, "internal", NULL, "out of memory");
        return;
    }
    if (h->admin == 2) {
        resp_forget(hs, h->session);
        http_send_json(req, 200, "OK", json_pack("{s:s, s:s, s:b}", "id", h->session, "object", "response.deleted",
                                                 "deleted", 1));
        return;
    }
    /* Rebuilt from the stored session (after a restart, or when the memory
     * of responses lost it): its transcript's last text out is the output,
     * the text fed before it the one input item. */
    const ev_field *tr = event_result_field(l, e, "transcript");
    const ev_field *cm = event_result_field(l, e, "created_ms");
    const ev_field *tk = event_result_field(l, e, "tokens");
    bytebuf in = { 0 }, out = { 0 };
    if (tr && tr->type == EVV_ARRAY) {
        size_t k = (size_t)(tr - l->f) + 1;
        while (k < tr->end) {
            const ev_field *rec = &l->f[k];
            const char *role = NULL;
            const ev_field *text = NULL;
            for (size_t q = k + 1; q < rec->end; q++) {
                if (l->f[q].key && !strcmp(l->f[q].key, "role")) role = (const char *)ev_field_bytes(l, &l->f[q]);
                if (l->f[q].key && !strcmp(l->f[q].key, "text")) text = &l->f[q];
            }
            if (role && text) {
                int is_out = !strncmp(role, "out", 3);
                if (!is_out && out.n) { in.n = 0; out.n = 0; }   /* a later exchange begins */
                bytebuf *b = is_out ? &out : &in;
                httpreq_put_utf8(b, ev_field_bytes(l, text), text->v.s.len);
            }
            k = rec->type == EVV_RECORD ? rec->end : k + 1;
        }
    }
    json_t *ans;
    if (h->admin == 3) {
        json_t *item = json_pack("{s:s, s:s, s:s, s:s, s:[{s:s, s:s%}]}", "id", "msg_0", "type", "message", "status",
                                 "completed", "role", "user", "content", "type", "input_text", "text",
                                 in.p ? in.p : "", in.n);
        ans = json_pack("{s:s, s:[o], s:s, s:s, s:b}", "object", "list", "data", item, "first_id", "msg_0",
                        "last_id", "msg_0", "has_more", 0);
    } else {
        ans = json_pack("{s:s, s:s, s:I, s:s, s:n, s:n, s:s, s:[o], s:s%, s:n, s:b, s:{s:s, s:I}}", "id", h->session,
                        "object", "response", "created_at", (json_int_t)(cm ? cm->v.i / 1000 : 0), "status",
                        "completed", "error", "incomplete_details", "model", hs->model_id, "output",
                        resp_message(h->session, "completed", out.p ? out.p : "", out.n, 1), "output_text",
                        out.p ? out.p : "", out.n, "usage", "store", 1, "lind", "session", h->session,
                        "session_tokens", (json_int_t)(tk ? tk->v.u : 0));
    }
    bytebuf_free(&in);
    bytebuf_free(&out);
    http_send_json(req, 200, "OK", ans);
}

/* A store request r for req, answered by http_resp_admin_result (admin: which answer). */
void http_admin_request(http_server *hs, h2o_req_t *req, int admin, op_request *r)
{
    hreq *h = calloc(1, sizeof *h);
    if (!h) { http_send_error(hs, req, 500, "internal", NULL, "out of memory"); return; }
    h->hs = hs;
    h->kind = HK_RESP_ADMIN;
    h->stage = ST_ADMIN;
    h->admin = admin;
    h->id = HTTP_CONN_BIT | ++hs->seq;
    snprintf(h->session, sizeof h->session, "%s", r->op == OP_LIST ? "(list)" : r->session);
    http_track(h, req);
    http_send_request(h, r);
}

/* GET /v1/responses/{id}, DELETE /v1/responses/{id},
 * GET /v1/responses/{id}/input_items. */
void http_resp_admin(http_server *hs, h2o_req_t *req, const char *rest, size_t n)
{
    static const char items_sfx[] = "/input_items";
    int items = n > sizeof items_sfx - 1 && !memcmp(rest + n - (sizeof items_sfx - 1), items_sfx, sizeof items_sfx - 1);
    if (items) n -= sizeof items_sfx - 1;
    int get = http_method_is(req, "GET") || http_method_is(req, "HEAD"), del = http_method_is(req, "DELETE");
    if (!get && !(del && !items)) {
        http_add_header(req, "allow", items ? "GET, HEAD" : "GET, HEAD, DELETE");
        http_send_error(hs, req, 405, "method_not_allowed", NULL, "/v1/responses/{id}%s takes %s", items ? items_sfx : "",
                        items ? "GET" : "GET or DELETE");
        return;
    }
    char id[STORE_NAME_MAX + 1], why[160];
    if (n == 0 || n > STORE_NAME_MAX || memchr(rest, '/', n)) {
        http_send_error(hs, req, 404, "not_found", NULL, "no such response");
        return;
    }
    memcpy(id, rest, n);
    id[n] = 0;
    if (strlen(id) != n || strncmp(id, "resp-", 5) || store_name_check(id, why, sizeof why)) {
        http_send_error(hs, req, 404, "not_found", NULL, "no stored response '%.*s'", (int)(n > 200 ? 200 : n), rest);
        return;
    }
    size_t slot = resp_slot(id);
    if (get && hs->resps && !strcmp(hs->resps[slot].id, id) && hs->resps[slot].obj) {
        if (!items) {
            http_send_json(req, 200, "OK", json_incref(hs->resps[slot].obj));
            return;
        }
        json_t *d = hs->resps[slot].items;
        size_t k = json_array_size(d);
        http_send_json(req, 200, "OK", json_pack("{s:s, s:O, s:O?, s:O?, s:b}", "object", "list", "data", d, "first_id",
                                                 k ? json_object_get(json_array_get(d, 0), "id") : NULL, "last_id",
                                                 k ? json_object_get(json_array_get(d, k - 1), "id") : NULL,
                                                 "has_more", 0));
        return;
    }
    op_request r;
    memset(&r, 0, sizeof r);
    r.op = del ? OP_DELETE : OP_INFO;
    r.id = 1;
    snprintf(r.session, sizeof r.session, "%s", id);
    http_admin_request(hs, req, del ? 2 : items ? 3 : 1, &r);
}
