/* daemon/persist.c — the store threads. See persist.h. */
#include "daemon/persist.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "recurrent/chat.h"
#include "daemon/errors.h"
#include "daemon/http.h"
#include "daemon/lease.h"
#include "daemon/msg.h"
#include "state/format.h"
#include "state/transcript.h"
#include "kernels/clock.h"

#define SAVE_GROUP_MAX 512
#define LOAD_GROUP_MAX 256   /* loads whose leases one commit takes (do_loads) */
/* Retention (docs/STATE.md): sessions deleted per collection step, and how
 * often connection 0 collects when nothing asks sooner. */
#define GC_BATCH 16
#define GC_INTERVAL_MS 1000

/* An op that must see every connection's earlier work (list, stats, fork):
 * connection 0 runs it once the others have reached it, and they wait
 * until it is done. */
typedef struct barrier {
    pthread_mutex_t mu;
    pthread_cond_t  cv;
    int need, arrived, done, refs;
} barrier;

/* A load waiting for another node's lease (--lease-wait). */
typedef struct wait_load {
    dmsg    *m;
    uint64_t deadline_ns;
    struct wait_load *next;
} wait_load;

/* One store connection and its thread. */
typedef struct worker {
    struct persist *P;
    int       idx;
    store    *st;
    queue     q;              /* its own queue (with a dispatcher) */
    queue    *in;             /* &q, or the server's persistq when alone */
    pthread_t th;
    int       started;
    lease_set leases;
    uint64_t  renew_at_ns;    /* next lease renewal due (0: none held) */
    uint64_t  beat_at_ns;     /* connection 0 on a shared store: next node heartbeat */
    lease_set told_leases;    /* the lease counts and store counters as last reported */
    store_counters told_store;   /* (report: only their counts are used) */
    wait_load *waits;
    qnode    *done_head, *done_tail;   /* M_LOADED held until the batch ends */
    store_record recs[SAVE_GROUP_MAX];
    store_turn_record turns[SAVE_GROUP_MAX];   /* recs[i]'s answer to record, if any */
    const char *keep_as[SAVE_GROUP_MAX];       /* recs[i]'s copy to keep, if any */
    uint64_t  expect[SAVE_GROUP_MAX];
    int       origin[SAVE_GROUP_MAX];
    uint64_t  gc_at_ns;       /* connection 0: the next collection (0: at once) */
    int       gc_due;         /* connection 0: collect at the end of this round */
    store_save_result res[SAVE_GROUP_MAX];
    outmsg   *answers[SAVE_GROUP_MAX];   /* do_saves: each turn's answer, made before the commit */
    const char *load_names[LOAD_GROUP_MAX];   /* do_loads */
    int       load_rcs[LOAD_GROUP_MAX];
    store_lease load_cur[LOAD_GROUP_MAX];
} worker;

struct persist {
    server   *srv;
    int       n;
    worker   *w;
    pthread_t disp;           /* the dispatcher, when n > 1 */
    int       has_disp;
    pthread_mutex_t mu;
    int       running;        /* workers not yet finished; the last sends exit */
    outmsg   *exit_msg;       /* the loop's "store done", allocated at start: shutdown cannot fail */
};

struct worker;
static int collect_step(struct worker *W, store_gc_result *res, char *err, size_t errlen);
static void disk_full(persist *P, const char *why);
static void disk_room(struct worker *W);

static void send_out(persist *P, outmsg *o)
{
    if (o) queue_push(&P->srv->loopq, &o->node);
}

/* Add what this connection and its lease set counted since the last
 * report to the server's stats (this thread owns both). Called before
 * answers leave, so a client that saw an answer sees its counts. */
static void report(worker *W)
{
    lease_set *l = &W->leases, *o = &W->told_leases;
    store_counters c;
    store_get_counters(W->st, &c);
    const store_counters *p = &W->told_store;
    stats_store d = {
        .leases_held = (int64_t)l->count - (int64_t)o->count,
        .lease_taken = l->taken - o->taken, .lease_renewals = l->renewed - o->renewed,
        .lease_renew_failures = l->renew_failed - o->renew_failed, .lease_lapses = l->lost - o->lost,
        .reconnects = c.reconnects - p->reconnects, .retries = c.retries - p->retries,
        .err_io = c.err_io - p->err_io,
        .err_busy = c.err_busy - p->err_busy, .err_other = c.err_other - p->err_other,
    };
    if (!memcmp(&c, p, sizeof c) && d.leases_held == 0 && l->taken == o->taken &&
        l->renewed == o->renewed && l->renew_failed == o->renew_failed && l->lost == o->lost)
        return;
    stats_store_add(&W->P->srv->st, &d);
    o->count = l->count;
    o->taken = l->taken;
    o->renewed = l->renewed;
    o->renew_failed = l->renew_failed;
    o->lost = l->lost;
    W->told_store = c;
}

static size_t name_hash(const char *s)
{
    size_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* Commit a run of saves, then answer each turn. Every save is a
 * compare-and-swap on the version the session was loaded at, fenced by this
 * node's lease (state/store.h): a session another node wrote meanwhile, or
 * whose lease this node lost, is not written, and its client is told
 * (`conflict`). A turn whose answer cannot be made (out of memory) is not
 * committed: it fails like a failed save. */
static void do_saves(worker *W, dmsg **v, int n)
{
    persist *P = W->P;
    char err[512] = "";
    const char *owner = P->srv->node_id;
    dmsg *sv[SAVE_GROUP_MAX];   /* sv[j]: the j-th of v with an answer, recs[j] its record */
    int k = 0;
    for (int i = 0; i < n; i++) {
        outmsg *o = outmsg_new(v[i]->conn);
        if (!o || evlist_reserve(&o->ev, 1, STOP_MAX_LEN) != 0 ||   /* its done / result */
            (v[i]->result.is_undo && evlist_reserve_result(&o->ev, 3, STORE_NAME_MAX + 1) != 0)) {
            outmsg_free(o);
            W->answers[i] = NULL;
            v[i]->rc = -ENOMEM;
            snprintf(v[i]->err, sizeof v[i]->err, "out of memory for the turn's answer");
            continue;
        }
        W->answers[i] = o;
        W->recs[k] = (store_record){ .name = v[i]->name, .state = v[i]->state,
                                     .state_len = v[i]->state_len,
                                     .transcript = v[i]->transcript,
                                     .transcript_len = v[i]->transcript_len,
                                     .tokens = v[i]->tokens };
        /* the turn's answer, committed with it (exactly-once turns) */
        W->turns[k] = (store_turn_record){ .request_id = v[i]->replay ? v[i]->req.request_id : NULL,
                                           .result = v[i]->replay, .result_len = v[i]->replay_len };
        /* the copy the request asked for (op_request.keep_as), in the same commit */
        W->keep_as[k] = v[i]->req.keep_as[0] ? v[i]->req.keep_as : NULL;
        W->expect[k] = v[i]->version;
        /* the row's origin if this save creates it (state/store.h) */
        W->origin[k] = v[i]->conn & HTTP_CONN_BIT ? STORE_ORIGIN_HTTP : STORE_ORIGIN_SOCKET;
        v[i]->rc = 1;   /* not yet committed */
        sv[k++] = v[i];
    }
    uint64_t t0 = clock_mono_ns();
    int rc = k ? store_save_keep(W->st, W->recs, W->turns, W->keep_as, W->expect, W->origin, k, owner,
                                 W->res, err, sizeof err) : 0;
    if (k && P->srv->opt.max_store_bytes) W->gc_due = 1;   /* the quota: look after every commit */
    if (rc < 0 && rc != -ECANCELED && rc != -ENOLCK && k > 1) {
        /* The group failed as a whole: one bad record must not sink the
         * others, retry one by one. An -EIO group may have committed all
         * the same (its COMMIT sent, the connection lost, the outcome
         * unknown: a database failing over); a record then found moved on
         * was most likely written by that commit, not by another node, so
         * it is not `conflict` ("not saved") but io, outcome unknown: a
         * client retrying it with its request_id gets the recorded answer
         * if it committed. */
        for (int j = 0; j < k; j++) {
            store_save_keep(W->st, &W->recs[j], &W->turns[j], &W->keep_as[j], &W->expect[j], &W->origin[j],
                            1, owner, &W->res[j], sv[j]->err, sizeof sv[j]->err);
            if (rc == -EIO && W->res[j].rc == -ECANCELED) {
                W->res[j].rc = -EIO;
                snprintf(sv[j]->err, sizeof sv[j]->err, "the save's outcome is unknown (the session"
                         " was saved in a group that failed, and retried alone it was found moved"
                         " on, as that group's commit would have left it): %.300s", err);
            }
        }
    } else if (rc < 0) {
        for (int j = 0; j < k; j++)
            if (W->res[j].rc != 0) snprintf(sv[j]->err, sizeof sv[j]->err, "%s", err);
    }
    int saved = 0;
    for (int j = 0; j < k; j++) {
        dmsg *m = sv[j];
        store_save_result *r = &W->res[j];
        m->rc = r->rc;
        if (r->rc == 0) {
            m->version = r->version;
            m->result.done.kept = r->kept;
            saved++;
            continue;
        }
        if (r->rc == -ENOSPC) disk_full(P, m->err);
        if (r->rc == -ECANCELED) {
            m->rc = LIND_E_CONFLICT;
            stats_conflict(&P->srv->st, STATS_CONFLICT_VERSION);
            snprintf(m->err, sizeof m->err, "the session changed in the store since node '%s' "
                     "loaded it (version %llu expected, the store has %s%llu): another node wrote it",
                     owner, (unsigned long long)m->version, r->version ? "" : "no session, ",
                     (unsigned long long)r->version);
        } else if (r->rc == -ENOLCK) {
            m->rc = LIND_E_CONFLICT;
            stats_conflict(&P->srv->st, STATS_CONFLICT_LEASE);
            lease_set_lost(&W->leases, m->name);
            snprintf(m->err, sizeof m->err, "node '%s' no longer holds the session's lease "
                     "(it expired and another node took it, or it was released)", owner);
        }
    }
    if (saved) stats_save(&P->srv->st, (double)(clock_mono_ns() - t0) / 1e6, saved);
    int failed = 0;
    for (int i = 0; i < n; i++)
        failed += v[i]->rc != 0 && v[i]->rc != LIND_E_CONFLICT;
    if (failed) stats_save_failed(&P->srv->st, failed);
    report(W);
    double ms_save = (double)(clock_mono_ns() - t0) / 1e6;
    for (int i = 0; i < n; i++) {
        dmsg *m = v[i];
        turn_result *res = &m->result;
        outmsg *o = W->answers[i];
        W->answers[i] = NULL;
        if (m->rc != 0 && res->is_undo) {
            outmsg_free(o);
            o = outmsg_error(m->conn, res->done.id, m->rc == LIND_E_CONFLICT ? PE_CONFLICT : m->rc == -ENOMEM
                             ? PE_INTERNAL : m->rc == -ENOSPC ? PE_INSUFFICIENT_STORAGE : PE_IO,
                             "session '%s': the undo was not saved: %s; the session stays as its last "
                             "turn left it", m->name, m->err);
        } else if (m->rc != 0) {
            outmsg_free(o);
            o = m->rc == LIND_E_CONFLICT
                ? outmsg_error(m->conn, res->done.id, PE_CONFLICT,
                               "session '%s': the turn was not saved and this node dropped its copy: %s; "
                               "the session resumes from its last saved turn, retry the turn",
                               m->name, m->err)
                : outmsg_error(m->conn, res->done.id, m->rc == -ENOMEM ? PE_INTERNAL
                               : m->rc == -ENOSPC ? PE_INSUFFICIENT_STORAGE : PE_IO,
                               "session '%s': saving the turn failed, it is not acknowledged "
                               "(the session resumes from its last done; had the store committed it "
                               "before its answer was lost, a retry with the same request_id gets "
                               "the recorded answer): %s",
                               m->name, m->err);
        }
        if (o && m->rc == 0) {
            int erc;
            if (res->is_undo) {
                evlist_result_begin(&o->ev, res->done.id);
                evlist_put_str(&o->ev, "session", m->name);
                evlist_put_u64(&o->ev, "session_tokens", m->tokens);
                evlist_put_bool(&o->ev, "undone", 1);
                erc = evlist_result_end(&o->ev);
            } else if (res->is_append) {
                erc = evlist_appended(&o->ev, res->done.id, res->done.session_tokens,
                                      res->done.tokens_in, res->done.fed_bytes, res->cancelled);
            } else {
                proto_done d = res->done;
                d.ms_save = ms_save;
                d.ms_total = (double)(clock_mono_ns() - res->t_recv_ns) / 1e6;
                erc = evlist_done(&o->ev, &d);
            }
            if (erc == 0) o->finals = 1;
        }
        reqlog_turn_info li = {
            .session = m->name, .op = res->is_undo ? "undo" : res->is_append ? "append" : "generate",
            .tokens_in = res->done.tokens_in, .tokens_out = res->done.tokens_out,
            .ttft_ms = res->done.tokens_out ? res->done.ms_queue + res->done.ms_prompt : -1.0,
            .total_ms = (double)(clock_mono_ns() - res->t_recv_ns) / 1e6,
            .queue_ms = res->done.ms_queue, .prompt_ms = res->done.ms_prompt,
            .generate_ms = res->done.ms_generate, .save_ms = ms_save,
            .outcome = m->rc == 0 ? (res->is_undo ? "undone" : res->done.reason)
                     : m->rc == LIND_E_CONFLICT ? "conflict" : "io",
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

/* A transcript for `info`: a corrupt one is shown empty, one that does not
 * fit in memory fails the answer (-ENOMEM) rather than show as empty. */
static int decode_transcript(transcript *t, const uint8_t *data, size_t len)
{
    char err[128];
    transcript_init(t, TRANSCRIPT_LIMIT_MAX);
    int rc = transcript_decode(t, data, len, err, sizeof err);
    if (rc == -ENOMEM) { transcript_free(t); return rc; }
    if (rc != 0) transcript_clear(t);
    return 0;
}

static void put_transcript(evlist *l, const transcript *t)
{
    size_t n = transcript_count(t);
    evlist_open_array(l, "transcript");
    for (size_t i = 0; i < n; i++) {
        transcript_role role;
        const uint8_t *b;
        size_t bl;
        transcript_entry_at(t, i, &role, &b, &bl);
        evlist_open_record(l, NULL);
        evlist_put_str(l, "role", role == TRANSCRIPT_IN ? "in" : "out");
        evlist_put_bytes(l, "text", b, bl);
        evlist_close(l);
    }
    evlist_close(l);
}

/* ---- requests: the store column of daemon/ops.h ------------------------------
 * Each builds its answer in l (room for a small one reserved already) and
 * returns 0, or an error code with the message in err. */

static int do_list(worker *W, dmsg *m, evlist *l, char *err, size_t errlen)
{
    store_info *v = NULL;
    size_t n = 0;
    int rc = store_list(W->st, &v, &n, err, errlen);
    if (rc != 0) return rc;
    size_t bytes = 0;
    for (size_t i = 0; i < n; i++) bytes += strlen(v[i].name) + 8;   /* and its origin */
    if (evlist_reserve_result(l, 1 + 8 * n, bytes) != 0) {
        free(v);
        snprintf(err, errlen, "out of memory for the list of %zu sessions", n);
        return -ENOMEM;
    }
    evlist_result_begin(l, m->req.id);
    evlist_open_array(l, "sessions");
    for (size_t i = 0; i < n; i++) {
        evlist_open_record(l, NULL);
        evlist_put_str(l, "session", v[i].name);
        evlist_put_u64(l, "tokens", v[i].tokens);
        evlist_put_i64(l, "updated_ms", v[i].updated_ms);
        evlist_put_i64(l, "created_ms", v[i].created_ms);
        evlist_put_u64(l, "bytes", v[i].bytes);
        evlist_put_str(l, "origin", store_origin_name(v[i].origin));
        evlist_close(l);
    }
    evlist_close(l);
    free(v);
    return 0;
}

static int do_export(worker *W, dmsg *m, evlist *l, char *err, size_t errlen)
{
    op_request *r = &m->req;
    uint8_t *data = NULL;
    size_t len = 0;
    int rc = store_export(W->st, r->session, &data, &len, err, errlen);
    if (rc != 0) return rc;
    if (evlist_reserve_result(l, 2, len + STORE_NAME_MAX) != 0) {
        free(data);
        snprintf(err, errlen, "out of memory for the export of '%s' (%zu bytes)", r->session, len);
        return -ENOMEM;
    }
    evlist_result_begin(l, r->id);
    evlist_put_str(l, "session", r->session);
    evlist_put_bytes(l, "data", data, len);
    free(data);
    return 0;
}

static int do_delete(worker *W, dmsg *m, evlist *l, char *err, size_t errlen)
{
    persist *P = W->P;
    op_request *r = &m->req;
    /* Not under another node's feet: delete under the lease. */
    store_lease cur;
    int rc, held = lease_set_has(&W->leases, r->session);
    if (!held && (rc = store_lease_acquire(W->st, r->session, P->srv->node_id,
                                           P->srv->opt.lease_ms, &cur, err, errlen)) != 0) {
        if (rc == -EAGAIN) {
            rc = LIND_E_MOVED;
            stats_moved(&P->srv->st);
            snprintf(err, errlen, "session '%s' is leased by node '%s'; delete it there",
                     r->session, cur.owner);
        }
        return rc;
    }
    rc = store_delete(W->st, r->session, err, errlen);
    if (!held) {
        char e2[256];
        store_lease_release(W->st, r->session, P->srv->node_id, e2, sizeof e2);
    }
    if (rc != 0) return rc;
    if (W->idx == 0) W->gc_due = 1;   /* the quota's verdict may change */
    disk_room(W);
    evlist_result_begin(l, r->id);
    evlist_put_bool(l, "deleted", 1);
    return 0;
}

static int do_fork(worker *W, dmsg *m, evlist *l, char *err, size_t errlen)
{
    op_request *r = &m->req;
    int rc = store_fork(W->st, r->session, r->to, err, errlen);
    if (rc != 0) return rc;
    if (W->idx == 0 && W->P->srv->opt.max_store_bytes) W->gc_due = 1;   /* bytes were added */
    evlist_result_begin(l, r->id);
    evlist_put_str(l, "session", r->session);
    evlist_put_str(l, "to", r->to);
    return 0;
}

static int do_import(worker *W, dmsg *m, evlist *l, char *err, size_t errlen)
{
    op_request *r = &m->req;
    int rc = store_import(W->st, r->session, r->data, r->data_len, err, errlen);
    if (rc != 0) return rc;
    evlist_result_begin(l, r->id);
    evlist_put_str(l, "session", r->session);
    evlist_put_u64(l, "tokens", m->tokens);
    return 0;
}

/* The stored row, with what the compute thread added (m->rinfo: resident,
 * busy, the live transcript). */
static int do_info(worker *W, dmsg *m, evlist *l, char *err, size_t errlen)
{
    persist *P = W->P;
    op_request *r = &m->req;
    store_loaded ld;
    memset(&ld, 0, sizeof ld);
    int rc = store_load(W->st, r->session, &ld, err, errlen);
    int known = m->rinfo.resident || m->rinfo.busy;
    if (rc != 0 && !(rc == -ENOENT && known)) return rc;
    int stored = rc == 0;
    /* the seed: the resident session's, else the one its stored state
     * records (omitted only when neither is there) */
    size_t trl = m->rinfo.resident ? m->rinfo.transcript_len : ld.transcript_len;
    transcript tr;
    if (decode_transcript(&tr, m->rinfo.resident ? m->rinfo.transcript : ld.transcript, trl) != 0 ||
        evlist_reserve_result(l, 18 + 3 * transcript_count(&tr),
                              STORE_NAME_MAX + 64 + 3 * transcript_count(&tr) + trl) != 0) {
        transcript_free(&tr);
        store_loaded_free(&ld);
        snprintf(err, errlen, "out of memory for the info of '%s'", r->session);
        return -ENOMEM;
    }
    uint64_t seed = m->rinfo.seed;
    int has_seed = m->rinfo.resident || (stored && state_peek_seed(ld.state, ld.state_len, &seed) == 0);
    evlist_result_begin(l, r->id);
    if (has_seed) evlist_put_u64(l, "seed", seed);
    /* the chat template it keeps (docs/PROTOCOL.md, "Chat templates") */
    uint32_t tpl = m->rinfo.chat_template;
    if (!m->rinfo.resident && stored && state_peek_chat_template(ld.state, ld.state_len, &tpl) != 0) tpl = 0;
    if (tpl) {
        const char *tn = chat_template_builtin_name(tpl);
        if (!tn && tpl == P->srv->chat_template_hash) tn = P->srv->chat_template_name;
        evlist_put_u64(l, "chat_template", tpl);
        if (tn) evlist_put_str(l, "chat_template_name", tn);
    }
    evlist_put_str(l, "session", r->session);
    evlist_put_u64(l, "tokens", m->rinfo.resident ? m->rinfo.tokens : ld.tokens);
    evlist_put_u64(l, "state_bytes", P->srv->state_bytes);
    evlist_put_i64(l, "created_ms", stored ? ld.created_ms : m->rinfo.created_ms);
    evlist_put_i64(l, "updated_ms", stored ? ld.updated_ms : 0);
    evlist_put_bool(l, "resident", m->rinfo.resident);
    evlist_put_bool(l, "busy", m->rinfo.busy);
    put_transcript(l, &tr);
    transcript_free(&tr);
    store_loaded_free(&ld);
    return 0;
}

/* One step; lindctl sessions gc asks again while `more`. */
static int do_gc(worker *W, dmsg *m, evlist *l, char *err, size_t errlen)
{
    store_gc_result g;
    int rc = collect_step(W, &g, err, errlen);
    if (rc != 0) return rc;
    evlist_result_begin(l, m->req.id);
    evlist_put_u64(l, "expired", g.expired);
    evlist_put_u64(l, "evicted", g.evicted);
    evlist_put_u64(l, "freed_bytes", g.freed);
    evlist_put_u64(l, "sessions", g.sessions);
    evlist_put_u64(l, "bytes", g.bytes);
    evlist_put_u64(l, "max_store_bytes", W->P->srv->opt.max_store_bytes);
    evlist_put_bool(l, "over_quota", atomic_load(&W->P->srv->store_over));
    evlist_put_bool(l, "more", g.more);
    return 0;
}

/* The counters are answered with the store down too (then without the
 * stored count): that is when /metrics' store errors matter. */
static int do_stats(worker *W, dmsg *m, evlist *l, char *err, size_t errlen)
{
    size_t n = 0;
    int crc = store_count(W->st, &n, err, errlen);
    uint64_t stored = n;
    err[0] = 0;
    report(W);
    evlist_result_begin(l, m->req.id);
    stats_result(&W->P->srv->st, l, crc == 0 ? &stored : NULL, W->P->srv->backend);
    return 0;
}

typedef int store_handler(worker *W, dmsg *m, evlist *l, char *err, size_t errlen);
static store_handler *const handlers[OP_COUNT] = {
#define HANDLER(E, name, decode, entry, compute, store, spread, nodev) [OP_##E] = store,
    LIND_OPS(HANDLER)
#undef HANDLER
};

/* Room reserved for every answer before its op runs: a result this small
 * (delete, fork, import, stats) or an error (err[] below, 512 bytes at
 * most) cannot then fail to be built; list, export and info reserve their
 * variable part once they know it. */
#define ANSWER_FIELDS 64
#define ANSWER_BYTES  (1024 + 2 * STORE_NAME_MAX)

static void do_request(worker *W, dmsg *m)
{
    persist *P = W->P;
    op_request *r = &m->req;
    char err[512] = "";
    int rc = 0;
    store_handler *h = r->op > OP_NONE && r->op < OP_COUNT ? handlers[r->op] : NULL;
    /* Room for the answer (or an error) before anything runs, so a change
     * is never made without its answer. */
    outmsg *o = outmsg_new(m->conn);
    if (!o || evlist_reserve_result(&o->ev, ANSWER_FIELDS, ANSWER_BYTES) != 0) {
        outmsg_free(o);
        o = NULL;
        rc = -ENOMEM;
        snprintf(err, sizeof err, "out of memory for the answer to '%s'; nothing was done", op_name(r->op));
    } else if (!h) {
        rc = -ENOSYS;
        snprintf(err, sizeof err, "op '%s' reached the store thread", op_name(r->op));
    } else if ((rc = h(W, m, &o->ev, err, sizeof err)) == 0 && evlist_result_end(&o->ev) != 0) {
        /* Within the room reserved above the result cannot fail; were it
         * to, it is gone whole and the client hears why. */
        rc = -ENOMEM;
        snprintf(err, sizeof err, "out of memory building the answer to '%s'", op_name(r->op));
    }
    if (rc == -ENOSPC) disk_full(P, err);
    if (rc != 0) {
        /* A store failure the table does not name is still the store's: io. */
        proto_code c = lind_wire_code(rc);
        if (c == PE_INTERNAL && rc != -ENOSYS && rc != -ENOMEM) c = PE_IO;
        const char *msg = err[0] ? err : lind_strerror(rc);
        if (!o) o = outmsg_error(m->conn, r->id, c, "%s", msg);
        else if (evlist_error(&o->ev, r->id, c, msg) == 0) o->finals = 1;   /* fits the reserved room */
        else { outmsg_free(o); o = NULL; }
    } else {
        o->finals = 1;
    }
    report(W);
    send_out(P, o);
    dmsg_free(m);
}


/* ---- retention ---------------------------------------------------------------- */

/* A write found the disk full: refuse new turns, and give the reserve's
 * space to what frees room (daemon/reserve.h). */
static void disk_full(persist *P, const char *why)
{
    server *srv = P->srv;
    if (atomic_exchange(&srv->store_nospace, 1)) return;
    int released = reserve_release(&srv->reserve);
    lind_log(REQLOG_WARN, "store", "the disk holding the store is full (%s)%s%s. New turns are refused"
             " (insufficient_storage) until sessions are deleted (lindctl sessions rm, sessions gc);"
             " reads go on", why, released ? "; released the disk reserve " : "",
             released ? srv->reserve.path : "");
}

/* Room was freed (a delete, a collection that deleted something). */
static void disk_room(worker *W)
{
    server *srv = W->P->srv;
    if (!atomic_load(&srv->store_nospace)) return;
    char err[512];
    if (store_shrink(W->st, err, sizeof err) != 0)   /* the log's space back to the disk */
        lind_log(REQLOG_WARN, "store", "%s", err);
    int rc = reserve_refill(&srv->reserve);
    atomic_store(&srv->store_nospace, 0);
    lind_log(rc ? REQLOG_WARN : REQLOG_INFO, "store", "sessions were deleted: new turns are accepted"
             " again%s", rc ? " (the disk reserve could not be made again: the disk is still nearly"
             " full, and a restart on a full disk would fail; free space on it)" : "");
}

static int retention_on(const server_options *o)
{
    return o->response_ttl_ms || o->session_ttl_ms || o->max_store_bytes;
}

/* One collection step (state/store.h, store_gc: at most GC_BATCH sessions,
 * each part one statement), then the quota's verdict for the compute
 * thread: over when the sessions' bytes stay past --max-store-bytes with
 * nothing more to collect. 1 when a full batch went (call again soon). */
static int collect_step(worker *W, store_gc_result *res, char *err, size_t errlen)
{
    server *srv = W->P->srv;
    const server_options *o = &srv->opt;
    store_gc_policy p = { .response_ttl_ms = o->response_ttl_ms, .session_ttl_ms = o->session_ttl_ms,
                          .max_bytes = o->max_store_bytes, .batch = GC_BATCH, .owner = srv->node_id };
    int rc = store_gc(W->st, &p, res, err, errlen);
    if (rc != 0) return rc;
    store_gc_result r = *res;
    if (r.expired || r.evicted) disk_room(W);
    atomic_store(&srv->store_bytes, r.bytes);
    int over = p.max_bytes && r.bytes > p.max_bytes && !r.more;
    int was = atomic_exchange(&srv->store_over, over);
    if (r.expired || r.evicted)
        lind_log(REQLOG_DEBUG, "store", "collected sessions: expired=%llu quota=%llu freed_bytes=%llu"
                 " sessions=%zu bytes=%llu", (unsigned long long)r.expired,
                 (unsigned long long)r.evicted, (unsigned long long)r.freed, r.sessions,
                 (unsigned long long)r.bytes);
    if (over && !was)
        lind_log(REQLOG_WARN, "store", "sessions hold %llu bytes, past --max-store-bytes %llu, and no"
                 " resp-/chat- session is left to collect; new turns are refused"
                 " (insufficient_storage) until sessions are deleted", (unsigned long long)r.bytes,
                 (unsigned long long)p.max_bytes);
    else if (!over && was)
        lind_log(REQLOG_INFO, "store", "sessions hold %llu bytes, within --max-store-bytes %llu;"
                 " turns are accepted again", (unsigned long long)r.bytes,
                 (unsigned long long)p.max_bytes);
    return 0;
}

static int collect(worker *W)
{
    store_gc_result r;
    char err[512];
    if (collect_step(W, &r, err, sizeof err) != 0) {
        lind_log(REQLOG_WARN, "store", "collecting expired sessions failed: %s", err);
        return 0;
    }
    return r.more;
}

/* Connection 0, at the end of each round: collect when due; on a full
 * disk, look whether it has room again (files removed beside the store,
 * or a failure that was passing: the reserve can be made again with as
 * much free beside it). The ms until the next look (-1: none needed). */
static int maybe_collect(worker *W, uint64_t now)
{
    if (W->idx != 0) return -1;
    server *srv = W->P->srv;
    int on = retention_on(&srv->opt), full = atomic_load(&srv->store_nospace);
    if (!on && !full) return -1;
    if (W->gc_due || now >= W->gc_at_ns) {
        if (full && reserve_refill(&srv->reserve) == 0) {
            atomic_store(&srv->store_nospace, 0);
            lind_log(REQLOG_INFO, "store", "the disk holding the store has room again: new turns are"
                     " accepted");
        }
        W->gc_due = on ? collect(W) : 0;
        W->gc_at_ns = now + GC_INTERVAL_MS * 1000000ull;
    }
    return W->gc_due ? 0 : (int)((W->gc_at_ns - now + 999999) / 1000000);
}

/* ---- leases and loads ------------------------------------------------------ */

static void lease_lost(void *arg, const char *name, const char *holder)
{
    worker *W = arg;
    dmsg *m = dmsg_new(M_LEASE_LOST, 0);
    if (!m) return;
    snprintf(m->name, sizeof m->name, "%s", name);
    snprintf(m->lease.owner, sizeof m->lease.owner, "%s", holder);
    queue_push(&W->P->srv->schedq, &m->node);
}

/* Loads answered in one batch reach the compute thread together (each
 * took a lease, a commit of its own), so sessions asked for together start
 * in the same round and are stepped together, as they were when a load was
 * a read alone. */
static void loaded(worker *W, dmsg *m)
{
    m->kind = M_LOADED;
    m->node.next = NULL;
    if (W->done_tail) W->done_tail->next = &m->node; else W->done_head = &m->node;
    W->done_tail = &m->node;
}

static void flush_loaded(worker *W)
{
    report(W);
    for (qnode *n = W->done_head; n; ) {
        qnode *next = n->next;
        queue_push(&W->P->srv->schedq, n);
        n = next;
    }
    W->done_head = W->done_tail = NULL;
}

/* The answer recorded for m->req.request_id of session m->name into
 * m->replay (none: NULL); 0 or the store's code with m->err. Read under the
 * session's lease: nobody else can record one meanwhile. */
static int find_answer(worker *W, dmsg *m)
{
    uint64_t ver = 0;
    int rc = store_turn_get(W->st, m->name, m->req.request_id, &m->replay, &m->replay_len, &ver,
                            m->err, sizeof m->err);
    if (rc == -ENOENT) { m->err[0] = 0; return 0; }
    return rc;
}

static void do_lookup(worker *W, dmsg *m)
{
    m->rc = find_answer(W, m);
    m->kind = M_LOOKED;
    queue_push(&W->P->srv->schedq, &m->node);
}

/* Take the session's lease, then load it (the order matters: a load before
 * the lease could read a version that the previous holder's last save is
 * about to replace). Returns 1 when the load must wait for the lease. */
static int load_leased(worker *W, dmsg *m, int rc, const store_lease *cur, int may_wait);

static int try_load(worker *W, dmsg *m, int may_wait)
{
    store_lease cur;
    int rc = store_lease_acquire(W->st, m->name, W->P->srv->node_id, W->P->srv->opt.lease_ms, &cur,
                                 m->err, sizeof m->err);
    return load_leased(W, m, rc, &cur, may_wait);
}

/* try_load once the lease was asked for: rc is store_lease_acquire's code
 * (m->err its message), cur the lease as it stands. */
static int load_leased(worker *W, dmsg *m, int rc, const store_lease *cur, int may_wait)
{
    persist *P = W->P;
    if (rc == -EAGAIN) {
        if (may_wait) return 1;
        long long left = (long long)(cur->expires_ms - cur->now_ms);   /* on the store's clock */
        m->rc = LIND_E_MOVED;
        stats_moved(&P->srv->st);
        m->lease = *cur;
        snprintf(m->err, sizeof m->err, "session '%s' is leased by node '%s' (for about %lld ms more "
                 "unless renewed); send the request there", m->name, cur->owner, left > 0 ? left : 0);
        loaded(W, m);
        return 0;
    }
    if (rc != 0) {
        if (rc == -ENOSPC) disk_full(P, m->err);   /* taking a lease is a write */
        m->rc = rc;
        loaded(W, m);
        return 0;
    }
    if (lease_set_add(&W->leases, m->name, clock_mono_ns()) != 0) {
        store_lease_release(W->st, m->name, P->srv->node_id, m->err, sizeof m->err);
        m->rc = -ENOMEM;
        snprintf(m->err, sizeof m->err, "out of memory");
        loaded(W, m);
        return 0;
    }
    if (!W->renew_at_ns) W->renew_at_ns = clock_mono_ns() + (uint64_t)P->srv->opt.lease_ms * 1000000ull / 3;
    m->rc = store_load(W->st, m->name, &m->loaded, m->err, sizeof m->err);
    if (m->rc == 0 && m->req.request_id[0]) {   /* a retry: the answer recorded under its id */
        int trc = find_answer(W, m);
        if (trc < 0) {
            store_loaded_free(&m->loaded);
            m->rc = trc;
        }
    }
    if (m->rc == -ENOENT && m->req.start_from[0]) {
        /* A new session that starts from a stored one (op_request.start_from):
         * that one's state, read as a fork reads its source (no lease: it is
         * not written); the session itself is created by the turn's commit. */
        m->rc = store_load(W->st, m->req.start_from, &m->loaded, m->err, sizeof m->err);
        m->start = m->rc == 0 ? 1 : m->rc == -ENOENT ? -1 : 0;
    }
    if (m->rc != 0 && m->rc != -ENOENT) {   /* nothing will be served: give it back */
        char e2[256];
        lease_set_remove(&W->leases, m->name);
        store_lease_release(W->st, m->name, P->srv->node_id, e2, sizeof e2);
    }
    loaded(W, m);
    return 0;
}

/* A load whose lease another node holds waits for it (--lease-wait). */
static void wait_for_lease(worker *W, dmsg *m)
{
    int wait_ms = W->P->srv->opt.lease_wait_ms;
    wait_load *wl = calloc(1, sizeof *wl);
    if (!wl) { try_load(W, m, 0); return; }
    wl->m = m;
    wl->deadline_ns = clock_mono_ns() + (uint64_t)wait_ms * 1000000ull;
    wl->next = W->waits;
    W->waits = wl;
}

static void do_load(worker *W, dmsg *m)
{
    if (try_load(W, m, W->P->srv->opt.lease_wait_ms > 0)) wait_for_lease(W, m);
}

/* Loads that arrived together take their leases in one commit
 * (store_lease_acquire_many), then load one by one: with a commit each, n
 * new sessions asked for at once would reach the compute thread spread over
 * n commits' time and run their first steps in smaller batches. If the
 * batch fails, each load goes alone and meets its own error. */
static void do_loads(worker *W, dmsg **group, int n)
{
    if (n == 1) { do_load(W, group[0]); return; }
    server *srv = W->P->srv;
    char err[256];
    for (int i = 0; i < n; i++) W->load_names[i] = group[i]->name;
    if (store_lease_acquire_many(W->st, W->load_names, (size_t)n, srv->node_id, srv->opt.lease_ms, W->load_rcs,
                                 W->load_cur, err, sizeof err) != 0) {
        for (int i = 0; i < n; i++) do_load(W, group[i]);
        return;
    }
    for (int i = 0; i < n; i++) {
        group[i]->err[0] = 0;
        if (load_leased(W, group[i], W->load_rcs[i], &W->load_cur[i], srv->opt.lease_wait_ms > 0))
            wait_for_lease(W, group[i]);
    }
}

/* Try the waiting loads again; those past --lease-wait get `moved`. The ms
 * until the next try (-1: none waiting). A lease is given back when its
 * holder evicts the session or stops, or when it expires; polled, since the
 * holder is another process that cannot wake this one. */
static int retry_waits(worker *W)
{
    if (!W->waits) return -1;
    int period = W->P->srv->opt.lease_ms / 20;
    if (period < 5) period = 5;
    if (period > 100) period = 100;
    wait_load **pp = &W->waits;
    while (*pp) {
        wait_load *wl = *pp;
        uint64_t now = clock_mono_ns();
        if (!try_load(W, wl->m, now < wl->deadline_ns)) { *pp = wl->next; free(wl); }
        else pp = &wl->next;
    }
    return W->waits ? period : -1;
}

static void do_release(worker *W, dmsg *m)
{
    if (lease_set_remove(&W->leases, m->name)) {
        char err[256];
        store_lease_release(W->st, m->name, W->P->srv->node_id, err, sizeof err);
    }
    dmsg_free(m);
}

/* ---- barriers ------------------------------------------------------------------ */

static void barrier_put(barrier *b)
{
    pthread_mutex_lock(&b->mu);
    int last = --b->refs == 0;
    pthread_mutex_unlock(&b->mu);
    if (!last) return;
    pthread_cond_destroy(&b->cv);
    pthread_mutex_destroy(&b->mu);
    free(b);
}

/* A connection other than 0 reached the barrier: wait for the op. */
static void barrier_arrive(barrier *b)
{
    pthread_mutex_lock(&b->mu);
    b->arrived++;
    pthread_cond_broadcast(&b->cv);
    while (!b->done) pthread_cond_wait(&b->cv, &b->mu);
    pthread_mutex_unlock(&b->mu);
    barrier_put(b);
}

/* Connection 0 runs the op once every other connection is there. */
static void barrier_run(worker *W, barrier *b, dmsg *m)
{
    pthread_mutex_lock(&b->mu);
    while (b->arrived < b->need) pthread_cond_wait(&b->cv, &b->mu);
    pthread_mutex_unlock(&b->mu);
    do_request(W, m);
    pthread_mutex_lock(&b->mu);
    b->done = 1;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
    barrier_put(b);
}

/* ---- the threads --------------------------------------------------------------- */

static int min_wait(int a, int b)
{
    if (a < 0) return b;
    if (b < 0) return a;
    return a < b ? a : b;
}

/* The node's heartbeat (connection 0, a shared store): every third of
 * --lease-ms, like a lease; after a failure again in a tenth. A claim found
 * taken means another process claimed this node id after ours expired
 * (this node was paused or cut off past --lease-ms): said loudly. */
static void node_heartbeat(worker *W, uint64_t now)
{
    server *srv = W->P->srv;
    char err[512];
    int rc = store_node_beat(W->st, srv->node_id, srv->node_instance, srv->opt.lease_ms, err, sizeof err);
    if (rc == -ENOLCK)
        fprintf(stderr, "lind serve: ERROR: %s: another process now runs as node '%s'\n", err,
                srv->node_id);
    W->beat_at_ns = now + (uint64_t)srv->opt.lease_ms * (rc == 0 ? 1000000ull / 3 : 100000ull);
}

static void *worker_main(void *arg)
{
    worker *W = arg;
    persist *P = W->P;
    dmsg *group[SAVE_GROUP_MAX], *loads[LOAD_GROUP_MAX];
    int stop = 0, wait_ms = 0;   /* at once: the first heartbeat, renewals */
    while (!stop) {
        qnode *n = queue_take_all(W->in, wait_ms);
        int ng = 0, nl = 0;
        while (n) {
            dmsg *m = (dmsg *)n;
            n = n->next;
            /* Runs of saves, and of loads, each go as one group; the order
             * of everything else is kept. */
            if (m->kind != M_LOAD && nl) { do_loads(W, loads, nl); nl = 0; }
            if (m->kind == M_SAVE) {
                group[ng++] = m;
                if (ng == SAVE_GROUP_MAX) { do_saves(W, group, ng); ng = 0; }
                continue;
            }
            if (ng) { do_saves(W, group, ng); ng = 0; }
            switch (m->kind) {
            case M_LOAD:
                loads[nl++] = m;
                if (nl == LOAD_GROUP_MAX) { do_loads(W, loads, nl); nl = 0; }
                break;
            case M_RELEASE:
                do_release(W, m);
                break;
            case M_LOOKUP:
                flush_loaded(W);
                do_lookup(W, m);
                break;
            case M_REQUEST:
                if (m->sess) { barrier *b = m->sess; m->sess = NULL; flush_loaded(W); barrier_run(W, b, m); }
                else do_request(W, m);
                break;
            case M_BARRIER:
                flush_loaded(W);
                barrier_arrive(m->sess);
                dmsg_free(m);
                break;
            case M_STOP:
                stop = 1;
                dmsg_free(m);
                break;
            default:
                dmsg_free(m);
                break;
            }
        }
        if (ng) do_saves(W, group, ng);
        if (nl) do_loads(W, loads, nl);
        flush_loaded(W);
        uint64_t now = clock_mono_ns();
        int renew_ms = -1;
        if (W->renew_at_ns && now >= W->renew_at_ns) {
            int ms = lease_set_renew(&W->leases, W->st, now, lease_lost, W);
            W->renew_at_ns = ms < 0 ? 0 : now + (uint64_t)ms * 1000000ull;
        }
        if (W->renew_at_ns) renew_ms = (int)((W->renew_at_ns - now + 999999) / 1000000);
        if (W->idx == 0 && P->srv->node_claimed) {
            if (now >= W->beat_at_ns) node_heartbeat(W, now);
            int beat_ms = (int)((W->beat_at_ns - now + 999999) / 1000000);
            renew_ms = min_wait(renew_ms, beat_ms);
        }
        int gc_ms = maybe_collect(W, now);
        if (gc_ms >= 0) renew_ms = min_wait(renew_ms, gc_ms ? gc_ms : 1);
        if (renew_ms == 0) renew_ms = 1;
        wait_ms = min_wait(renew_ms, retry_waits(W));
        flush_loaded(W);
    }
    /* Loads still waiting for a lease at shutdown: the compute thread
     * waits for every load, so answer them (moved). */
    while (W->waits) {
        wait_load *wl = W->waits;
        W->waits = wl->next;
        try_load(W, wl->m, 0);
        free(wl);
    }
    flush_loaded(W);
    lease_set_release_all(&W->leases, W->st);
    report(W);
    if (W->idx == 0 && P->srv->node_claimed) {
        char err[512];
        store_node_release(W->st, P->srv->node_id, P->srv->node_instance, err, sizeof err);
    }
    store_close(W->st);
    W->st = NULL;
    pthread_mutex_lock(&P->mu);
    int last = --P->running == 0;
    pthread_mutex_unlock(&P->mu);
    if (last) {
        send_out(P, P->exit_msg);
        P->exit_msg = NULL;
    }
    return NULL;
}

/* Which connection serves a message: the session's (by name), so saves of
 * one session stay in order and loads see them; a request whose spread
 * (daemon/ops.h) is SPREAD_ALL goes through a barrier. -1: all. */
static int route(persist *P, dmsg *m, int *all)
{
    *all = 0;
    switch (m->kind) {
    case M_LOAD: case M_SAVE: case M_RELEASE: case M_LOOKUP:
        return (int)(name_hash(m->name) % (size_t)P->n);
    case M_STOP:
        return -1;
    case M_REQUEST:
        if (op_table[m->req.op].spread == SPREAD_ALL) {
            *all = 1;
            return 0;
        }
        return (int)(name_hash(m->req.session) % (size_t)P->n);
    default:
        return 0;
    }
}

static void *dispatch_main(void *arg)
{
    persist *P = arg;
    for (int stop = 0; !stop; ) {
        qnode *n = queue_take_all(&P->srv->persistq, -1);
        while (n) {
            dmsg *m = (dmsg *)n;
            n = n->next;
            int all, k = route(P, m, &all);
            if (k < 0) {   /* M_STOP: one for every connection */
                for (int j = 1; j < P->n; j++) {
                    dmsg *c = dmsg_new(M_STOP, 0);
                    if (c) queue_push(&P->w[j].q, &c->node);
                }
                queue_push(&P->w[0].q, &m->node);
                stop = 1;
                continue;
            }
            if (all) {
                barrier *b = calloc(1, sizeof *b);
                dmsg **bm = calloc((size_t)P->n, sizeof *bm);
                int ok = b && bm;
                for (int j = 1; ok && j < P->n; j++) ok = (bm[j] = dmsg_new(M_BARRIER, 0)) != NULL;
                if (!ok) {   /* out of memory: run it unsynchronised rather than not at all */
                    for (int j = 1; bm && j < P->n; j++) dmsg_free(bm[j]);
                    free(bm);
                    free(b);
                    queue_push(&P->w[0].q, &m->node);
                    continue;
                }
                pthread_mutex_init(&b->mu, NULL);
                pthread_cond_init(&b->cv, NULL);
                b->need = P->n - 1;
                b->refs = P->n;
                m->sess = b;
                for (int j = 1; j < P->n; j++) {
                    bm[j]->sess = b;
                    queue_push(&P->w[j].q, &bm[j]->node);
                }
                free(bm);
            }
            queue_push(&P->w[k].q, &m->node);
        }
    }
    return NULL;
}

static void free_workers(persist *P)
{
    for (int i = 0; i < P->n; i++) {
        worker *W = &P->w[i];
        if (W->st) store_close(W->st);
        if (P->n > 1) {
            for (qnode *n = queue_take_all(&W->q, 0); n; ) {
                qnode *next = n->next;
                dmsg_free((dmsg *)n);
                n = next;
            }
            queue_destroy(&W->q);
        }
        lease_set_free(&W->leases);
    }
    free(P->w);
    pthread_mutex_destroy(&P->mu);
    outmsg_free(P->exit_msg);
    free(P);
}

int persist_start(server *srv, store *st, persist **out, char *err, size_t errlen)
{
    int n = srv->opt.store_conns > 0 ? srv->opt.store_conns : 1;
    persist *P = calloc(1, sizeof *P);
    worker *w = calloc((size_t)n, sizeof *w);
    if (!P || !w) {
        free(P);
        free(w);
        store_close(st);
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    P->srv = srv;
    P->n = n;
    P->w = w;
    w[0].st = st;
    pthread_mutex_init(&P->mu, NULL);
    P->exit_msg = outmsg_new(0);
    if (!P->exit_msg) {
        free_workers(P);   /* closes w[0].st */
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    P->exit_msg->exit = 1;
    store_options so = server_store_options(&srv->opt);
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        worker *W = &w[i];
        W->P = P;
        W->idx = i;
        if (lease_set_init(&W->leases, srv->node_id, srv->opt.lease_ms) != 0) {
            snprintf(err, errlen, "out of memory");
            rc = -ENOMEM;
            break;
        }
        if (n > 1 && queue_init(&W->q, NULL) != 0) {
            snprintf(err, errlen, "out of memory");
            rc = -ENOMEM;
            break;
        }
        W->in = n > 1 ? &W->q : &srv->persistq;
        if (i > 0 && (rc = store_open(srv->opt.db_path, &so, &W->st, err, errlen)) != 0) break;
    }
    if (rc != 0) {
        free_workers(P);
        return rc;
    }
    P->running = n;
    for (int i = 0; i < n; i++) {
        if (pthread_create(&w[i].th, NULL, worker_main, &w[i]) != 0) {
            /* Those started stop at once: they own their stores now. */
            for (int j = 0; j < i; j++) {
                dmsg *m = dmsg_new(M_STOP, 0);
                if (m) queue_push(w[j].in, &m->node);
                pthread_join(w[j].th, NULL);
            }
            free_workers(P);
            snprintf(err, errlen, "cannot create a store thread");
            return -EAGAIN;
        }
        w[i].started = 1;
    }
    if (n > 1) {
        if (pthread_create(&P->disp, NULL, dispatch_main, P) != 0) {
            for (int j = 0; j < n; j++) {
                dmsg *m = dmsg_new(M_STOP, 0);
                if (m) queue_push(w[j].in, &m->node);
                pthread_join(w[j].th, NULL);
            }
            free_workers(P);
            snprintf(err, errlen, "cannot create the store dispatcher thread");
            return -EAGAIN;
        }
        P->has_disp = 1;
    }
    *out = P;
    return 0;
}

void persist_join(persist *P)
{
    if (!P) return;
    if (P->has_disp) pthread_join(P->disp, NULL);
    for (int i = 0; i < P->n; i++)
        if (P->w[i].started) pthread_join(P->w[i].th, NULL);
    free_workers(P);
}
