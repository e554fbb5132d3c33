/* daemon/commands.c — request routing and `hello`. See commands.h. */
#include "daemon/commands.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include "daemon/msg.h"

/* `hello`, answered on the loop: built as a typed result like every admin
 * answer, then encoded for this (msgpack) connection. */
static void hello(server *srv, conn *c, uint64_t id)
{
    evlist l;
    evlist_init(&l);
    evlist_result_begin(&l, id);
    evlist_put_i64(&l, "protocol", PROTO_VERSION);
    evlist_put_str(&l, "server", LIND_SERVER_VERSION);
    evlist_open_record(&l, "model");
    if (srv->chat_template)   /* optional: lindctl chat frames turns with it */
        evlist_put_str(&l, "chat_template", srv->chat_template);
    evlist_put_str(&l, "path", srv->model_path);
    char fp[17];
    snprintf(fp, sizeof fp, "%016llx", (unsigned long long)srv->fingerprint);
    evlist_put_str(&l, "fingerprint", fp);
    evlist_put_i64(&l, "d_model", srv->d_model);
    evlist_put_i64(&l, "n_layers", srv->n_layers);
    evlist_put_u64(&l, "params", srv->params);
    evlist_put_u64(&l, "state_bytes", srv->state_bytes);
    evlist_put_i64(&l, "vocab", srv->vocab);
    evlist_put_str(&l, "tokenizer", srv->tokenizer);
    evlist_put_str(&l, "weights", srv->dtype);
    evlist_close(&l);
    evlist_put_str(&l, "backend", srv->backend);   /* top level, beside model (docs/PROTOCOL.md) */
    evlist_open_record(&l, "limits");
    evlist_put_u64(&l, "max_message", srv->opt.max_message);
    evlist_put_i64(&l, "max_batch", srv->opt.max_batch);
    evlist_put_u64(&l, "max_tokens", srv->opt.max_tokens);
    evlist_put_i64(&l, "max_name", STORE_NAME_MAX);
    evlist_put_i64(&l, "max_resident", srv->opt.max_resident);
    evlist_put_i64(&l, "max_inflight", srv->opt.max_inflight);
    evlist_put_u64(&l, "max_output", srv->opt.max_output);
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    /* Room first, so the event cannot be packed half-way. */
    int rc = evlist_result_end(&l);
    size_t need = rc == 0 ? event_msgpack_bound(&l, &l.v[0])
                          : 2048 + strlen(srv->model_path) + (srv->chat_template ? strlen(srv->chat_template) : 0);
    if (rc != 0 || proto_reserve(&sb, need) != 0) {
        conn_out_of_memory(c, need);
    } else {
        event_pack_msgpack(&sb, &l, &l.v[0]);
        conn_send(c, sb.data, sb.size);
    }
    msgpack_sbuffer_destroy(&sb);
    evlist_free(&l);
}

int commands_submit(server *srv, uint64_t conn, op_request *req, uint64_t t_recv)
{
    dmsg *m = dmsg_new(M_REQUEST, conn);
    if (!m) {
        op_request_free(req);
        return -ENOMEM;
    }
    m->req = *req;
    memset(req, 0, sizeof *req);
    m->t_recv_ns = t_recv;
    queue_push(op_table[m->req.op].entry == ENTER_STORE ? &srv->persistq : &srv->schedq, &m->node);
    return 0;
}

void commands_dispatch(server *srv, conn *c, op_request *req, uint64_t t_recv)
{
    if (op_table[req->op].entry == ENTER_LOOP) {   /* hello, the one op the loop answers */
        hello(srv, c, req->id);
        op_request_free(req);
        return;
    }
    if (srv->stopping) {
        conn_send_error(c, req->id, PE_SHUTTING_DOWN, "the server is shutting down");
        op_request_free(req);
        return;
    }
    if (c->inflight >= srv->opt.max_inflight) {
        char msg[128];
        snprintf(msg, sizeof msg, "this connection already has %d requests in flight (the limit)",
                 c->inflight);
        conn_send_error(c, req->id, PE_LIMIT, msg);
        op_request_free(req);
        return;
    }
    uint64_t id = req->id;
    if (commands_submit(srv, c->id, req, t_recv) != 0) {
        conn_send_error(c, id, PE_INTERNAL, "out of memory");
        return;
    }
    c->inflight++;
}
