/* daemon/persist.c — the store thread. See persist.h. */
#include "daemon/persist.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "daemon/errors.h"
#include "daemon/msg.h"
#include "state/format.h"
#include "state/transcript.h"

#define SAVE_GROUP_MAX 512

struct persist {
    server   *srv;
    store    *st;
    pthread_t th;
    int       stop;
    store_record recs[SAVE_GROUP_MAX];
};

static void send_out(persist *P, outmsg *o)
{
    if (o) queue_push(&P->srv->loopq, &o->node);
}

/* Commit a run of saves, then answer each turn. */
static void do_saves(persist *P, dmsg **v, int n)
{
    char err[512] = "";
    for (int i = 0; i < n; i++) {
        P->recs[i] = (store_record){ .name = v[i]->name, .state = v[i]->state,
                                     .state_len = v[i]->state_len,
                                     .transcript = v[i]->transcript,
                                     .transcript_len = v[i]->transcript_len,
                                     .tokens = v[i]->tokens };
        v[i]->rc = 1;   /* not yet committed */
    }
    uint64_t t0 = now_ns();
    int rc = store_save(P->st, P->recs, n, err, sizeof err);
    if (rc == 0) {
        for (int i = 0; i < n; i++) v[i]->rc = 0;
        stats_save(&P->srv->st, (double)(now_ns() - t0) / 1e6, n);
    } else {
        /* One bad record must not sink the others: retry one by one. */
        for (int i = 0; i < n; i++) {
            uint64_t t1 = now_ns();
            v[i]->rc = n > 1 ? store_save(P->st, &P->recs[i], 1, v[i]->err, sizeof v[i]->err) : rc;
            if (n == 1) snprintf(v[i]->err, sizeof v[i]->err, "%s", err);
            if (v[i]->rc == 0) stats_save(&P->srv->st, (double)(now_ns() - t1) / 1e6, 1);
        }
    }
    double ms_save = (double)(now_ns() - t0) / 1e6;
    for (int i = 0; i < n; i++) {
        dmsg *m = v[i];
        turn_result *res = &m->result;
        outmsg *o = m->rc == 0 ? outmsg_new(m->conn)
                               : outmsg_error(m->conn, res->done.id, PE_IO,
                                              "session '%s': saving the turn failed, it is lost "
                                              "(the session resumes from its last done): %s",
                                              m->name, m->err);
        if (o && m->rc == 0) {
            int erc;
            if (res->is_append) {
                erc = evlist_appended(&o->ev, res->done.id, res->done.session_tokens,
                                      res->done.tokens_in, res->done.fed_bytes, res->cancelled);
            } else {
                proto_done d = res->done;
                d.ms_save = ms_save;
                d.ms_total = (double)(now_ns() - res->t_recv_ns) / 1e6;
                erc = evlist_done(&o->ev, &d);
            }
            if (erc == 0) o->finals = 1;
        }
        reqlog_turn_info li = {
            .session = m->name, .op = res->is_append ? "append" : "generate",
            .tokens_in = res->done.tokens_in, .tokens_out = res->done.tokens_out,
            .ttft_ms = res->done.tokens_out ? res->done.ms_queue + res->done.ms_prompt : -1.0,
            .total_ms = (double)(now_ns() - res->t_recv_ns) / 1e6,
            .queue_ms = res->done.ms_queue, .prompt_ms = res->done.ms_prompt,
            .generate_ms = res->done.ms_generate, .save_ms = ms_save,
            .outcome = m->rc == 0 ? res->done.reason : "io",
        };
        reqlog_turn(&P->srv->log, &li);
        if (m->rc == 0 && !res->is_append && res->done.tokens_out)
            stats_ttft(&P->srv->st, li.ttft_ms);
        /* The compute thread learns of the commit before the client does,
         * so a request sent after `done` never finds the session busy. */
        free(m->state); m->state = NULL;
        free(m->transcript); m->transcript = NULL;
        m->kind = M_SAVED;
        queue_push(&P->srv->schedq, &m->node);
        send_out(P, o);
    }
}

static void pack_transcript(msgpack_packer *pk, const uint8_t *data, size_t len)
{
    transcript t;
    char err[128];
    if (transcript_init(&t, TRANSCRIPT_LIMIT_MAX) != 0 ||
        transcript_decode(&t, data, len, err, sizeof err) != 0) {
        msgpack_pack_array(pk, 0);
        transcript_free(&t);
        return;
    }
    size_t n = transcript_count(&t);
    msgpack_pack_array(pk, n);
    for (size_t i = 0; i < n; i++) {
        transcript_role role;
        const uint8_t *b;
        size_t bl;
        transcript_entry_at(&t, i, &role, &b, &bl);
        msgpack_pack_map(pk, 2);
        proto_pack_key(pk, "role");
        proto_pack_str(pk, role == TRANSCRIPT_IN ? "in" : "out");
        proto_pack_key(pk, "text");
        proto_pack_bin(pk, b, bl);
    }
    transcript_free(&t);
}

static void do_request(persist *P, dmsg *m)
{
    proto_request *r = &m->req;
    char err[512] = "";
    int rc = 0;
    outmsg *o = outmsg_new(m->conn);
    if (!o) { dmsg_free(m); return; }
    msgpack_packer pk;
    switch (r->op) {
    case OP_LIST: {
        store_info *v = NULL;
        size_t n = 0;
        if ((rc = store_list(P->st, &v, &n, err, sizeof err)) != 0) break;
        proto_result_begin(&pk, &o->sb, r->id, 1);
        proto_pack_key(&pk, "sessions");
        msgpack_pack_array(&pk, n);
        for (size_t i = 0; i < n; i++) {
            msgpack_pack_map(&pk, 3);
            proto_pack_key(&pk, "session");
            proto_pack_str(&pk, v[i].name);
            proto_pack_key(&pk, "tokens");
            msgpack_pack_uint64(&pk, v[i].tokens);
            proto_pack_key(&pk, "updated_ms");
            msgpack_pack_int64(&pk, v[i].updated_ms);
        }
        free(v);
        break;
    }
    case OP_EXPORT: {
        uint8_t *data = NULL;
        size_t len = 0;
        if ((rc = store_export(P->st, r->session, &data, &len, err, sizeof err)) != 0) break;
        proto_result_begin(&pk, &o->sb, r->id, 2);
        proto_pack_key(&pk, "session");
        proto_pack_str(&pk, r->session);
        proto_pack_key(&pk, "data");
        proto_pack_bin(&pk, data, len);
        free(data);
        break;
    }
    case OP_DELETE:
        if ((rc = store_delete(P->st, r->session, err, sizeof err)) != 0) break;
        proto_result_begin(&pk, &o->sb, r->id, 1);
        proto_pack_key(&pk, "deleted");
        msgpack_pack_true(&pk);
        break;
    case OP_FORK:
        if ((rc = store_fork(P->st, r->session, r->to, err, sizeof err)) != 0) break;
        proto_result_begin(&pk, &o->sb, r->id, 2);
        proto_pack_key(&pk, "session");
        proto_pack_str(&pk, r->session);
        proto_pack_key(&pk, "to");
        proto_pack_str(&pk, r->to);
        break;
    case OP_IMPORT:
        if ((rc = store_import(P->st, r->session, r->data, r->data_len, err, sizeof err)) != 0) {
            if (rc == -EINVAL) { rc = -EBADMSG; }
            break;
        }
        proto_result_begin(&pk, &o->sb, r->id, 2);
        proto_pack_key(&pk, "session");
        proto_pack_str(&pk, r->session);
        proto_pack_key(&pk, "tokens");
        msgpack_pack_uint64(&pk, m->tokens);
        break;
    case OP_INFO: {
        store_loaded ld;
        memset(&ld, 0, sizeof ld);
        rc = store_load(P->st, r->session, &ld, err, sizeof err);
        int known = m->rinfo.resident || m->rinfo.busy;
        if (rc != 0 && !(rc == -ENOENT && known)) break;
        int stored = rc == 0;
        rc = 0;
        /* the seed: the resident session's, else the one its stored state
         * records (omitted only when neither is there) */
        uint64_t seed = m->rinfo.seed;
        int has_seed = m->rinfo.resident || (stored && state_peek_seed(ld.state, ld.state_len, &seed) == 0);
        proto_result_begin(&pk, &o->sb, r->id, has_seed ? 9 : 8);
        if (has_seed) {
            proto_pack_key(&pk, "seed");
            msgpack_pack_uint64(&pk, seed);
        }
        proto_pack_key(&pk, "session");
        proto_pack_str(&pk, r->session);
        proto_pack_key(&pk, "tokens");
        msgpack_pack_uint64(&pk, m->rinfo.resident ? m->rinfo.tokens : ld.tokens);
        proto_pack_key(&pk, "state_bytes");
        msgpack_pack_uint64(&pk, P->srv->state_bytes);
        proto_pack_key(&pk, "created_ms");
        msgpack_pack_int64(&pk, stored ? ld.created_ms : m->rinfo.created_ms);
        proto_pack_key(&pk, "updated_ms");
        msgpack_pack_int64(&pk, stored ? ld.updated_ms : 0);
        proto_pack_key(&pk, "resident");
        if (m->rinfo.resident) msgpack_pack_true(&pk); else msgpack_pack_false(&pk);
        proto_pack_key(&pk, "busy");
        if (m->rinfo.busy) msgpack_pack_true(&pk); else msgpack_pack_false(&pk);
        proto_pack_key(&pk, "transcript");
        if (m->rinfo.resident) pack_transcript(&pk, m->rinfo.transcript, m->rinfo.transcript_len);
        else pack_transcript(&pk, ld.transcript, ld.transcript_len);
        store_loaded_free(&ld);
        break;
    }
    case OP_STATS: {
        size_t n = 0;
        if ((rc = store_count(P->st, &n, err, sizeof err)) != 0) break;
        proto_result_begin(&pk, &o->sb, r->id, STATS_FIELDS);
        stats_pack(&P->srv->st, &pk, n, P->srv->backend);
        break;
    }
    default:
        rc = -ENOSYS;
        snprintf(err, sizeof err, "op '%s' reached the store thread", proto_op_name(r->op));
        break;
    }
    if (rc != 0) {
        outmsg_free(o);
        /* A store failure the table does not name is still the store's: io. */
        proto_code c = lind_wire_code(rc);
        if (c == PE_INTERNAL && rc != -ENOSYS && rc != -ENOMEM) c = PE_IO;
        o = outmsg_error(m->conn, r->id, c, "%s", err[0] ? err : lind_strerror(rc));
    } else {
        o->finals = 1;
    }
    send_out(P, o);
    dmsg_free(m);
}

static void *store_main(void *arg)
{
    persist *P = arg;
    dmsg *group[SAVE_GROUP_MAX];
    while (!P->stop) {
        qnode *n = queue_take_all(&P->srv->persistq, -1);
        int ng = 0;
        while (n) {
            dmsg *m = (dmsg *)n;
            n = n->next;
            if (m->kind == M_SAVE) {
                group[ng++] = m;
                if (ng == SAVE_GROUP_MAX) { do_saves(P, group, ng); ng = 0; }
                continue;
            }
            if (ng) { do_saves(P, group, ng); ng = 0; }
            switch (m->kind) {
            case M_LOAD:
                m->rc = store_load(P->st, m->name, &m->loaded, m->err, sizeof m->err);
                m->kind = M_LOADED;
                queue_push(&P->srv->schedq, &m->node);
                break;
            case M_REQUEST:
                do_request(P, m);
                break;
            case M_STOP:
                P->stop = 1;
                dmsg_free(m);
                break;
            default:
                dmsg_free(m);
                break;
            }
        }
        if (ng) do_saves(P, group, ng);
    }
    store_close(P->st);
    P->st = NULL;
    outmsg *o = outmsg_new(0);
    if (o) { o->exit = 1; send_out(P, o); }
    return NULL;
}

int persist_start(server *srv, store *st, persist **out)
{
    persist *P = calloc(1, sizeof *P);
    if (!P) return -ENOMEM;
    P->srv = srv;
    P->st = st;
    if (pthread_create(&P->th, NULL, store_main, P) != 0) { free(P); return -EAGAIN; }
    *out = P;
    return 0;
}

void persist_join(persist *P)
{
    if (!P) return;
    pthread_join(P->th, NULL);
    if (P->st) store_close(P->st);
    free(P);
}
