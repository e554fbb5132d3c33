/* daemon/commands.c — request routing and `hello`. See commands.h. */
#include "daemon/commands.h"

#include <stdio.h>
#include <string.h>
#include "daemon/msg.h"

static void hello(server *srv, conn *c, uint64_t id)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    /* Room first, so the event cannot be packed half-way. */
    size_t need = 2048 + strlen(srv->model_path) + (srv->chat_template ? strlen(srv->chat_template) : 0);
    if (proto_reserve(&sb, need) != 0) { conn_out_of_memory(c, need); return; }
    proto_result_begin(&pk, &sb, id, 5);
    proto_pack_key(&pk, "protocol");
    msgpack_pack_int(&pk, PROTO_VERSION);
    proto_pack_key(&pk, "server");
    proto_pack_str(&pk, LIND_SERVER_VERSION);
    proto_pack_key(&pk, "model");
    msgpack_pack_map(&pk, srv->chat_template ? 10 : 9);
    if (srv->chat_template) {   /* optional: lindctl chat frames turns with it */
        proto_pack_key(&pk, "chat_template");
        proto_pack_str(&pk, srv->chat_template);
    }
    proto_pack_key(&pk, "path");
    proto_pack_str(&pk, srv->model_path);
    char fp[17];
    snprintf(fp, sizeof fp, "%016llx", (unsigned long long)srv->fingerprint);
    proto_pack_key(&pk, "fingerprint");
    proto_pack_str(&pk, fp);
    proto_pack_key(&pk, "d_model");
    msgpack_pack_int(&pk, srv->d_model);
    proto_pack_key(&pk, "n_layers");
    msgpack_pack_int(&pk, srv->n_layers);
    proto_pack_key(&pk, "params");
    msgpack_pack_uint64(&pk, srv->params);
    proto_pack_key(&pk, "state_bytes");
    msgpack_pack_uint64(&pk, srv->state_bytes);
    proto_pack_key(&pk, "vocab");
    msgpack_pack_int(&pk, srv->vocab);
    proto_pack_key(&pk, "tokenizer");
    proto_pack_str(&pk, srv->tokenizer);
    proto_pack_key(&pk, "weights");
    proto_pack_str(&pk, srv->dtype);
    proto_pack_key(&pk, "backend");
    proto_pack_str(&pk, srv->backend);
    proto_pack_key(&pk, "limits");
    msgpack_pack_map(&pk, 7);
    proto_pack_key(&pk, "max_message");
    msgpack_pack_uint64(&pk, srv->opt.max_message);
    proto_pack_key(&pk, "max_batch");
    msgpack_pack_int(&pk, srv->opt.max_batch);
    proto_pack_key(&pk, "max_tokens");
    msgpack_pack_uint32(&pk, srv->opt.max_tokens);
    proto_pack_key(&pk, "max_name");
    msgpack_pack_int(&pk, STORE_NAME_MAX);
    proto_pack_key(&pk, "max_resident");
    msgpack_pack_int(&pk, srv->opt.max_resident);
    proto_pack_key(&pk, "max_inflight");
    msgpack_pack_int(&pk, srv->opt.max_inflight);
    proto_pack_key(&pk, "max_output");
    msgpack_pack_uint64(&pk, srv->opt.max_output);
    conn_send(c, sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
}

static void reply_error(conn *c, uint64_t id, proto_code code, const char *msg)
{
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    if (proto_reserve(&sb, strlen(msg) + 64) != 0) { conn_out_of_memory(c, strlen(msg) + 64); return; }
    proto_pack_error(&sb, id, code, msg);
    conn_send(c, sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
}

void commands_dispatch(server *srv, conn *c, proto_request *req, uint64_t t_recv)
{
    if (req->op == OP_HELLO) {
        hello(srv, c, req->id);
        proto_request_free(req);
        return;
    }
    if (srv->stopping) {
        reply_error(c, req->id, PE_SHUTTING_DOWN, "the server is shutting down");
        proto_request_free(req);
        return;
    }
    if (c->inflight >= srv->opt.max_inflight) {
        char msg[128];
        snprintf(msg, sizeof msg, "this connection already has %d requests in flight (the limit)",
                 c->inflight);
        reply_error(c, req->id, PE_LIMIT, msg);
        proto_request_free(req);
        return;
    }
    dmsg *m = dmsg_new(M_REQUEST, c->id);
    if (!m) {
        reply_error(c, req->id, PE_INTERNAL, "out of memory");
        proto_request_free(req);
        return;
    }
    m->req = *req;
    memset(req, 0, sizeof *req);
    m->t_recv_ns = t_recv;
    c->inflight++;
    switch (m->req.op) {
    case OP_STATS:   /* list and export go through the compute thread: see on_request */
        queue_push(&srv->persistq, &m->node);
        break;
    default:
        queue_push(&srv->schedq, &m->node);
        break;
    }
}
