/* daemon/scheduler.c — the compute thread: turns, batched steps, residency.
 * See scheduler.h for the model of operation. */
#include "daemon/scheduler.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "recurrent/chat.h"
#include "daemon/errors.h"
#include "daemon/httpreq.h"
#include "daemon/msg.h"
#include "daemon/session.h"
#include "daemon/turnlog.h"
#include "recurrent/jsonfsm.h"
#include "recurrent/jsonmask.h"
#include "recurrent/sampler.h"
#include "recurrent/tokenizer.h"
#include "state/format.h"
#include "state/store.h"
#include "state/transcript.h"
#include "kernels/clock.h"

/* The compute thread's view of a connection: paused or not, and the events
 * of the current round waiting to be handed to the loop in one piece. */
typedef struct cconn {
    uint64_t id;
    int      paused, closed;
    int      discard;         /* M_CONN_ABANDONED: a session its turn made is not saved */
    int      refs;            /* turns and waiting requests of this connection */
    outmsg  *out;
    struct cconn *hnext, *fnext;
} cconn;

#define CCONN_BUCKETS 256

typedef struct turn {
    session *s;
    cconn   *c;
    uint64_t req_id;
    int      is_append;
    int      gen;              /* still to sample (cleared by a cancel mid-prompt) */
    int      generating;       /* the prompt is fed; feeding sampled tokens */
    int32_t *feed;             /* pending token, then the text's tokens */
    size_t   feed_len, feed_pos;
    size_t   first;            /* feed index of the text's first token */
    size_t   min_stop;         /* a cancelled feed stops no earlier (the old tail's last token) */
    size_t   observed;         /* feed[first..observed) went to the sampler's window */
    uint8_t *text;             /* the request's text (owned), for the transcript */
    size_t   text_len;
    uint32_t old_tail;         /* bytes of the session's tail put in front of the text */
    uint64_t fed_bytes;        /* bytes of the text the session holds after the turn */
    size_t   skipped;          /* bytes dropped from the text's front: the stream held them (drop_repeated) */
    int      text_logged;      /* the text went into the transcript */
    int32_t  last;             /* last sampled token */
    uint32_t max_tokens, produced;
    int      n_stop;
    uint8_t  stop[STOP_MAX][STOP_MAX_LEN];
    uint8_t  stop_len[STOP_MAX];
    uint8_t  tail[STOP_MAX_LEN];   /* the output's last bytes, for stop strings */
    size_t   tail_len;
    int      cancelled, finished, stop_hit;
    int      ignore_eos;           /* the request's ignore_eos, else --ignore-eos */
    int32_t  eos_hit;              /* the end token that ended the turn, -1 none */
    uint64_t tokens_in;
    uint64_t t_recv, t_start, t_prompt, t_end;
    int      progress;         /* the request asked for `progress` events */
    size_t   progress_next;    /* feed_pos at which the next one is due */
    int      out_lost;         /* a token event or transcript text could not be kept (out of memory) */
    /* HTTP's sampling fields (op_request): logit_bias, the penalties over
     * the tokens this turn sampled (counts[id], the ids seen), logprobs */
    float    pres, freq;
    int      n_bias;
    int32_t *bias_id;
    float   *bias;
    uint32_t *counts;
    int32_t *seen;
    uint32_t nseen;
    int      logprobs;
    /* structured output (docs/HTTP.md): the schema (owned), the automaton
     * fed every sampled token's bytes, and the turn's masker (made at its
     * first sample); schema NULL: unconstrained */
    jsonfsm_schema *schema;
    jsonmask *mask;
    jsonfsm  fsm;
    /* exactly-once turns: the request's id ("" none), the hash of its
     * parameters and the token events sent, recorded with the commit */
    char     request_id[STORE_REQUEST_ID_MAX + 1];
    uint64_t phash;
    turnlog  log;
    /* the copy its commit keeps (op_request.keep_as / keep_conv, owned);
     * with keep_conv, the bytes it sent, to name the copy from the reply */
    char     keep_as[STORE_NAME_MAX + 1];
    httpreq_conv *keep_conv;
    bytebuf  sent;
    int      fed_fresh;        /* its start_from was not stored: it fed fresh_text (proto_done) */
} turn;

struct scheduler {
    server  *srv;
    model   *m;
    pthread_t th;
    session_table tab;
    int     *free_slots, nfree;
    turn   **active;
    int      nactive, cap_active, rr;
    cconn   *cc[CCONN_BUCKETS];
    cconn   *flush;            /* connections with events this round */
    dmsg    *saves, *saves_tail;   /* M_SAVE to push after the round's events */
    session *wait_head, *wait_tail;
    int      nwaiting;         /* sessions loading or waiting for a slot (--max-waiting) */
    uint64_t clock;
    int      shutting, saves_inflight, loads_inflight;
    const tokenizer *tok;      /* the model's */
    int      vocab;
    float   *logits, *scratch;     /* [logits_rows × vocab], [2 × vocab] */
    float   *adj;                  /* [vocab]: a row after logit_bias and penalties */
    jsonmask_vocab *jvocab;        /* structured output's index of the vocabulary, made
                                      at start-up (jvocab_build) */
    int32_t *jids;                 /* [vocab]: the allowed ids of a sparse mask */
    int      logits_rows;
    /* A round: up to max_batch turns (b_turns, b_n rows each, b_lidx their
     * logits row or -1) laid out as max_rows rows (b_slots, b_toks), runs of
     * consecutive rows per turn; b_lrows the rows whose logits are wanted. */
    int     *b_slots, *b_n, *b_lidx, *b_lrows;
    int32_t *b_toks;
    turn   **b_turns;
    int      max_rows, prr;
    long long max_len;         /* model_max_tokens(): tokens a session may hold, 0 = no limit */
    uint8_t  tailbuf[TOKENIZER_TAIL_MAX];   /* a turn's new text tail */
    void    *raw;
    /* start-up handshake with the main thread */
    pthread_mutex_t mu;
    pthread_cond_t  cv;
    int      ready;            /* 0 starting, 1 serving, <0 failed */
    char     err[1024];
    int      dead_logged;      /* the lost device was logged (fail_batch) */
    dmsg    *stop_msg;         /* M_STOP for the store thread, allocated at start */
    int      freed_idle;       /* a session became idle outside a commit (a replayed turn):
                                  serve_waiters after this batch of messages */
};

/* ---- connections --------------------------------------------------------- */

static cconn *cconn_get(scheduler *S, uint64_t id)
{
    cconn **pp = &S->cc[id % CCONN_BUCKETS];
    for (cconn *c = *pp; c; c = c->hnext)
        if (c->id == id) return c;
    cconn *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->id = id;
    c->hnext = *pp;
    *pp = c;
    return c;
}

static void cconn_release(scheduler *S, cconn *c)
{
    if (--c->refs > 0 || !c->closed || c->out) return;
    cconn **pp = &S->cc[c->id % CCONN_BUCKETS];
    while (*pp && *pp != c) pp = &(*pp)->hnext;
    if (*pp) *pp = c->hnext;
    free(c);
}

/* The round's events for a connection (NULL when it is gone). */
static evlist *cconn_out(scheduler *S, cconn *c)
{
    if (c->closed) return NULL;
    if (!c->out) {
        c->out = outmsg_new(c->id);
        if (!c->out) return NULL;
        c->fnext = S->flush;
        S->flush = c;
    }
    return &c->out->ev;
}

static void send_out(scheduler *S, outmsg *o)
{
    if (o) queue_push(&S->srv->loopq, &o->node);
}

static void reply_error(scheduler *S, uint64_t conn, uint64_t id, proto_code code,
                        const char *fmt, const char *arg)
{
    send_out(S, outmsg_error(conn, id, code, fmt, arg));
}

/* ---- slots and residency -------------------------------------------------- */

static void drop_session(scheduler *S, session *s)
{
    if (s->leased) {   /* the session leaves this node: give its lease back */
        dmsg *r = dmsg_new(M_RELEASE, 0);
        if (r) {
            snprintf(r->name, sizeof r->name, "%s", s->name);
            queue_push(&S->srv->persistq, &r->node);
        }
    }
    session_remove(&S->tab, s);
    if (s->slot >= 0) S->free_slots[S->nfree++] = s->slot;
    session_free(s);
    stats_resident(&S->srv->st, S->tab.count);
}

struct lru_pick { session *best; };
static void lru_visit(session *s, void *arg)
{
    struct lru_pick *p = arg;
    if (s->phase == SESS_READY && !s->busy && (!p->best || s->last_use < p->best->last_use))
        p->best = s;
}

/* A free slot, evicting the least recently used idle session if needed (an
 * idle session has nothing unsaved). -1 when every slot is busy. */
static int take_slot(scheduler *S)
{
    if (S->nfree == 0) {
        struct lru_pick p = { NULL };
        session_foreach(&S->tab, lru_visit, &p);
        if (!p.best) return -1;
        drop_session(S, p.best);
    }
    return S->free_slots[--S->nfree];
}

static void begin_turn(scheduler *S, session *s, dmsg *m);
static void serve_waiters(scheduler *S);

/* Put a loaded (or new) session into a slot and start its waiting turn. */
static void place(scheduler *S, session *s)
{
    int slot = take_slot(S);
    if (slot < 0) {
        s->phase = SESS_WAIT_SLOT;
        s->wnext = NULL;
        if (S->wait_tail) S->wait_tail->wnext = s; else S->wait_head = s;
        S->wait_tail = s;
        return;
    }
    s->slot = slot;
    dmsg *ld = s->loaded;
    dmsg *w = s->waiting;
    char err[256];
    if (ld->rc == -ENOENT) {
        model_slot_reset(S->m, slot);
        memset(&s->meta, 0, sizeof s->meta);
        s->meta.pending_token = model_bos(S->m);
        sampler_init(&s->meta.sampler, &w->req.sp);
        s->created_ms = clock_wall_ms();
    } else {
        int rc = state_decode(S->m, ld->loaded.state, ld->loaded.state_len, &s->meta, S->raw,
                              err, sizeof err);
        if (rc == 0) rc = model_slot_write(S->m, slot, S->raw);
        if (rc == 0) {
            /* A bad transcript is dropped (the tail is a convenience; the
             * state is intact), but one that did not fit in memory must not
             * be: the next save would erase it. */
            int trc = transcript_decode(&s->tr, ld->loaded.transcript, ld->loaded.transcript_len,
                                        err, sizeof err);
            if (trc == -ENOMEM) rc = trc;
            else if (trc != 0) transcript_clear(&s->tr);
        }
        if (rc != 0) {
            send_out(S, outmsg_error(w->conn, w->req.id, lind_wire_code(rc),
                                     "session '%s': the stored state cannot be used (%s): %s",
                                     ld->start > 0 ? w->req.start_from : s->name,   /* whose it was */
                                     lind_strerror(rc), err));
            cconn *c = cconn_get(S, w->conn);
            S->nwaiting--;
            drop_session(S, s);
            if (c) cconn_release(S, c);
            return;
        }
        /* a session started from another's state is new: made now */
        s->created_ms = ld->start > 0 ? clock_wall_ms() : ld->loaded.created_ms;
    }
    dmsg_free(ld);
    s->loaded = NULL;
    s->phase = SESS_READY;
    S->nwaiting--;
    s->waiting = NULL;
    s->last_use = ++S->clock;
    stats_resident(&S->srv->st, S->tab.count);
    begin_turn(S, s, w);
}

static void serve_waiters(scheduler *S)
{
    while (S->wait_head) {
        if (S->nfree == 0) {
            struct lru_pick p = { NULL };
            session_foreach(&S->tab, lru_visit, &p);
            if (!p.best) return;
        }
        session *s = S->wait_head;
        S->wait_head = s->wnext;
        if (!S->wait_head) S->wait_tail = NULL;
        place(S, s);
    }
}

/* ---- turns ----------------------------------------------------------------- */

/* The turn's tokens: the session's pending token, then its held-back text
 * tail and this turn's text tokenized together. An append keeps the end the
 * tokenizer cannot decide yet (a word may go on in the next turn) as the new
 * tail; a generate flushes it, since sampling follows. So any split of a text
 * into turns feeds the tokens of the whole text. Runs on the compute thread
 * (never the loop). 0, or -ENOMEM (or -EOVERFLOW: the tokenizer held back
 * more than TOKENIZER_TAIL_MAX bytes, which its contract rules out) with
 * nothing changed. */
static int tokenize_turn(scheduler *S, session *s, const op_request *r, int32_t **feed,
                         size_t *nfeed, size_t *ntext, uint8_t *tail, uint32_t *tail_len)
{
    size_t len = s->meta.tail_len + r->text_len, cap = 1, n = 0, used = 0;
    uint8_t *text = malloc(len ? len : 1);
    int32_t *toks = malloc(sizeof *toks);
    if (!text || !toks) { free(text); free(toks); return -ENOMEM; }
    memcpy(text, s->meta.tail, s->meta.tail_len);
    if (r->text_len) memcpy(text + s->meta.tail_len, r->text, r->text_len);
    if (s->meta.pending_token >= 0) toks[n++] = s->meta.pending_token;
    size_t first = n;
    int final = r->op == OP_GENERATE;
    int rc = tokenizer_encode(S->tok, text, len, final, &toks, &n, &cap, &used);
    if (rc == 0 && len - used > TOKENIZER_TAIL_MAX) rc = -EOVERFLOW;
    if (rc != 0) {
        free(text); free(toks);
        return rc;
    }
    *tail_len = (uint32_t)(len - used);
    memcpy(tail, text + used, len - used);
    free(text);
    *feed = toks;
    *nfeed = n;
    *ntext = n - first;
    return 0;
}

static uint64_t session_tokens(const session *s);

/* A chat template hash as the messages name it: a built-in's name, or
 * the daemon's own, with the hash. */
static void template_label(const scheduler *S, uint32_t h, char *out, size_t n)
{
    const char *b = chat_template_builtin_name(h);
    if (!b && h == S->srv->chat_template_hash) b = S->srv->chat_template_name;
    if (b) snprintf(out, n, "'%s' (%08x)", b, h);
    else snprintf(out, n, "%08x (a template file)", h);
}

/* A turn request that need not run (docs/PROTOCOL.md, "Retries"): a retry
 * of a committed turn gets that turn's recorded answer again; one whose
 * if_tokens is not the session's count gets `conflict`. 1: answered here
 * (m consumed, the session no longer busy); 0: run it. */
static int answer_without_running(scheduler *S, session *s, dmsg *m)
{
    op_request *r = &m->req;
    /* A session not saved yet holds nothing a client was told of: 0. */
    uint64_t have = s->version == STORE_VERSION_NEW ? 0 : session_tokens(s);
    if (m->replay) {
        outmsg *o = outmsg_new(m->conn);
        double ms_total = (double)(clock_mono_ns() - m->t_recv_ns) / 1e6;
        int rc = o ? turnlog_replay(m->replay, m->replay_len, r->id, turnlog_params_hash(r), ms_total,
                                    &o->ev, NULL) : -ENOMEM;
        if (rc == 0) {
            const event *e = &o->ev.v[o->ev.n - 1];   /* done, or the append's result */
            reqlog_turn_info li = {
                .session = s->name, .op = op_name(r->op),
                .tokens_in = e->done.tokens_in, .tokens_out = e->done.tokens_out, .ttft_ms = -1.0,
                .total_ms = ms_total, .outcome = "replayed",
            };
            reqlog_turn(&S->srv->log, &li);
            o->finals = 1;
            send_out(S, o);
        } else {
            outmsg_free(o);
            if (rc == -EINVAL)
                send_out(S, outmsg_error(m->conn, r->id, PE_BAD_REQUEST,
                            "request_id '%s' was already used on session '%s' by a turn with other "
                            "parameters (op, text or settings); a retry must repeat its request "
                            "exactly, a new turn needs a new request_id", r->request_id, s->name));
            else if (rc == -EBADMSG)
                send_out(S, outmsg_error(m->conn, r->id, PE_BAD_STATE,
                            "session '%s': the answer recorded for request_id '%s' does not decode",
                            s->name, r->request_id));
            else
                send_out(S, outmsg_error(m->conn, r->id, PE_INTERNAL, "out of memory replaying request_id '%s'",
                            r->request_id));
        }
    } else if (r->chat_template && s->meta.chat_template && r->chat_template != s->meta.chat_template) {
        char was[96], now[96];
        template_label(S, s->meta.chat_template, was, sizeof was);
        template_label(S, r->chat_template, now, sizeof now);
        send_out(S, outmsg_error(m->conn, r->id, PE_CONFLICT,
                    "session '%s' was started with chat template %s; this request frames its text with %s; "
                    "nothing ran (a session keeps its template: continue it with that one, or start a "
                    "new session)", s->name, was, now));
    } else if (r->has_if_tokens && r->if_tokens != have) {
        stats_conflict(&S->srv->st, STATS_CONFLICT_IF_TOKENS);
        send_out(S, outmsg_error(m->conn, r->id, PE_CONFLICT,
                    "session '%s' has %llu tokens, not the %llu this request expects (if_tokens); "
                    "nothing ran", s->name, (unsigned long long)have,
                    (unsigned long long)r->if_tokens));
    } else {
        return 0;
    }
    cconn *c = cconn_get(S, m->conn);
    s->busy = 0;
    s->last_use = ++S->clock;
    S->freed_idle = 1;   /* evictable now: a session waiting for a slot may take it */
    if (c) cconn_release(S, c);
    dmsg_free(m);
    return 1;
}

/* A turn whose connection went away before it started (an HTTP client
 * that hung up while its request waited, a socket closed with requests
 * queued): nobody waits for it, so it is dropped. Nothing is fed; a session
 * this turn would have created is forgotten (the store never had it), one
 * that was loaded stays resident as it was. */
static void drop_unstarted(scheduler *S, session *s, cconn *c, dmsg *m)
{
    s->busy = 0;
    if (s->version == STORE_VERSION_NEW && s->phase == SESS_READY) drop_session(S, s);
    stats_dropped(&S->srv->st);
    cconn_release(S, c);
    dmsg_free(m);
}

/* Before a turn changes it: keep the session as committed, for `undo`
 * (one level). A session with nothing committed yet has none; out of
 * memory costs only the undo. */
static void keep_undo(scheduler *S, session *s)
{
    free(s->undo_state);
    free(s->undo_tr);
    s->undo_state = s->undo_tr = NULL;
    if (!S->srv->opt.undo || s->version == STORE_VERSION_NEW) return;
    char err[256];
    uint8_t *blob = NULL, *tr = NULL;
    size_t blen = 0, tlen = 0;
    if (model_slot_read(S->m, s->slot, S->raw) != 0 ||
        state_encode(S->m, &s->meta, S->raw, &blob, &blen, err, sizeof err) != 0 ||
        transcript_encode(&s->tr, &tr, &tlen) != 0) {
        free(blob);
        return;
    }
    s->undo_state = blob;
    s->undo_state_len = blen;
    s->undo_tr = tr;
    s->undo_tr_len = tlen;
    s->undo_tokens = session_tokens(s);
}

/* Op undo: commit the kept state over the session's last turn (a save like
 * a turn's, on the version it is at), then drop the resident copy: the next
 * turn loads what was committed. */
static void undo_turn(scheduler *S, session *s, dmsg *m)
{
    cconn *c = cconn_get(S, m->conn);
    dmsg *sv = c ? dmsg_new(M_SAVE, m->conn) : NULL;
    if (!sv) {
        reply_error(S, m->conn, m->req.id, PE_INTERNAL, "out of memory for the undo of '%s'", s->name);
        dmsg_free(m);
        return;
    }
    snprintf(sv->name, sizeof sv->name, "%s", s->name);
    sv->sess = s;
    sv->state = s->undo_state; sv->state_len = s->undo_state_len;
    sv->transcript = s->undo_tr; sv->transcript_len = s->undo_tr_len;
    s->undo_state = s->undo_tr = NULL;
    sv->tokens = s->undo_tokens;
    sv->version = s->version;
    sv->result.is_undo = 1;
    sv->result.done.id = m->req.id;
    sv->result.t_recv_ns = m->t_recv_ns;
    c->refs++;   /* until M_SAVED, as a turn's save */
    s->busy = 1;
    S->saves_inflight++;
    queue_push(&S->srv->persistq, &sv->node);
    dmsg_free(m);
}

/* A chat continued after a reply (r->reply_tpl, HTTP): drop from the front
 * of the text what the session's stream already ends with, e.g. the stop
 * string the reply stopped on (recurrent/chat.h, chat_repeated). The stream
 * is the transcript, so this holds after a restart too; a transcript kept
 * shorter than the stop strings (--transcript-bytes) drops nothing. How
 * many bytes went. */
static size_t drop_repeated(const session *s, op_request *r)
{
    if (!r->reply_tpl || !r->text_len) return 0;
    uint8_t tail[STOP_MAX_LEN];
    size_t tl = transcript_tail(&s->tr, tail, sizeof tail);
    size_t skip = chat_repeated(r->reply_tpl, tail, tl, r->text, r->text_len);
    memmove(r->text, r->text + skip, r->text_len - skip);
    r->text_len -= skip;
    return skip;
}

static void begin_turn(scheduler *S, session *s, dmsg *m)
{
    op_request *r = &m->req;
    cconn *c = cconn_get(S, m->conn);
    if (c && c->closed) {
        drop_unstarted(S, s, c, m);
        return;
    }
    if (answer_without_running(S, s, m)) return;
    keep_undo(S, s);
    if (r->chat_template && !s->meta.chat_template)
        s->meta.chat_template = r->chat_template;   /* saved with this turn's commit */
    uint64_t phash = r->request_id[0] ? turnlog_params_hash(r) : 0;   /* of the request as sent */
    size_t skipped = drop_repeated(s, r);
    turn *t = calloc(1, sizeof *t);
    int32_t *feed = NULL;
    size_t nfeed = 0, ntext = 0;
    uint32_t tail_len = 0;
    int trc = t && c ? tokenize_turn(S, s, r, &feed, &nfeed, &ntext, S->tailbuf, &tail_len) : -ENOMEM;
    int ok = trc == 0;
    if (ok && S->nactive == S->cap_active) {
        int nc = S->cap_active ? S->cap_active * 2 : 64;
        turn **na = realloc(S->active, (size_t)nc * sizeof *na);
        if (na) { S->active = na; S->cap_active = nc; }
        ok = na != NULL;
    }
    if (ok && r->op == OP_GENERATE && (r->presence_penalty != 0 || r->frequency_penalty != 0)) {
        t->counts = calloc((size_t)S->vocab, sizeof *t->counts);
        t->seen = malloc((size_t)(r->max_tokens < (uint32_t)S->vocab ? r->max_tokens : (uint32_t)S->vocab) *
                         sizeof *t->seen);
        if (!t->counts || !t->seen) {
            free(t->counts);
            free(t->seen);
            trc = -ENOMEM;
            ok = 0;
        }
    }
    if (!ok) {
        free(t); free(feed);
        send_out(S, outmsg_error(m->conn, r->id, lind_wire_code(trc ? trc : -ENOMEM),
                                 "cannot start a turn on '%s': %s", s->name,
                                 lind_strerror(trc ? trc : -ENOMEM)));
        s->busy = 0;
        if (c) cconn_release(S, c);
        dmsg_free(m);
        return;
    }
    t->s = s;
    t->c = c;            /* the reference taken when the request arrived */
    t->req_id = r->id;
    if (r->request_id[0]) {   /* recorded with the commit (turnlog.h) */
        snprintf(t->request_id, sizeof t->request_id, "%s", r->request_id);
        t->phash = phash;
    }
    if (r->op == OP_GENERATE) {
        snprintf(t->keep_as, sizeof t->keep_as, "%s", r->keep_as);
        t->keep_conv = r->keep_conv;
        r->keep_conv = NULL;
    }
    t->skipped = skipped;
    t->fed_fresh = m->start < 0;
    t->is_append = r->op == OP_APPEND;
    t->t_recv = m->t_recv_ns;
    t->t_start = clock_mono_ns();
    t->cancelled = m->rc == -ECANCELED || c->closed;
    t->progress = r->progress;
    t->eos_hit = -1;
    if (r->op == OP_GENERATE) {
        if (r->has_seed) {
            sampler_init(&s->meta.sampler, &r->sp);
        } else {
            sampler_params p = r->sp;
            p.seed = s->meta.sampler.p.seed;
            sampler_set_params(&s->meta.sampler, &p);
        }
        t->max_tokens = r->max_tokens;
        t->ignore_eos = r->has_ignore_eos ? r->ignore_eos : S->srv->opt.ignore_eos;
        t->n_stop = r->n_stop;
        t->pres = r->presence_penalty;
        t->freq = r->frequency_penalty;
        t->n_bias = r->n_bias;
        t->bias_id = r->bias_id;
        t->bias = r->bias;
        r->bias_id = NULL;
        r->bias = NULL;
        r->n_bias = 0;
        t->logprobs = r->logprobs;
        t->schema = r->schema;
        r->schema = NULL;
        if (t->schema) {
            jsonfsm_init(&t->fsm, t->schema);
            t->ignore_eos = 0;   /* the end token ends a constrained turn (only once the document may end) */
        }
        memcpy(t->stop, r->stop, sizeof t->stop);
        memcpy(t->stop_len, r->stop_len, sizeof t->stop_len);
    }
    /* Nothing to condition on (a state without a pending token and no
     * text): no logits to sample from. */
    t->gen = r->op == OP_GENERATE && r->max_tokens > 0 && !t->cancelled && nfeed > 0;
    t->feed = feed;
    t->feed_len = nfeed;
    t->tokens_in = ntext;
    t->first = t->observed = nfeed - ntext;
    t->old_tail = s->meta.tail_len;
    t->fed_bytes = r->text_len;
    t->text = r->text;
    t->text_len = r->text_len;
    r->text = NULL;
    r->text_len = 0;
    /* The bytes held in the old tail were acknowledged by an earlier append:
     * a cancelled feed goes on at least through the token that ends them. */
    if (t->old_tail) {
        size_t acc = 0, i = t->first;
        for (; i < nfeed; i++) {
            size_t n = 0;
            tokenizer_token_bytes(S->tok, feed[i], &n);
            acc += n;
            if (acc >= t->old_tail) break;
        }
        t->min_stop = i < nfeed ? i : nfeed ? nfeed - 1 : 0;
    }
    s->meta.pending_token = -1;
    memcpy(s->meta.tail, S->tailbuf, tail_len);
    s->meta.tail_len = tail_len;
    s->turn = t;
    S->active[S->nactive++] = t;
    dmsg_free(m);
}

/* Put the text tokens feed[first..upto) into the sampler's repetition
 * window, once each, in order (as they are fed: a turn stopped early has
 * observed only what the session holds). */
static void observe_to(scheduler *S, turn *t, size_t upto)
{
    (void)S;
    if (upto > t->feed_len) upto = t->feed_len;
    for (; t->observed < upto; t->observed++) sampler_observe(&t->s->meta.sampler, t->feed[t->observed]);
}

/* The text the session holds goes into its transcript, once: all of it, or
 * the first fed_bytes of a turn stopped early. */
static void log_text(turn *t)
{
    if (t->text_logged) return;
    t->text_logged = 1;
    size_t n = t->fed_bytes < t->text_len ? (size_t)t->fed_bytes : t->text_len;
    if (n && transcript_append(&t->s->tr, TRANSCRIPT_IN, t->text, n) != 0)
        t->out_lost = 1;   /* out of memory: the turn must not be saved without it (finish) */
}

static uint64_t session_tokens(const session *s)
{
    return s->meta.tokens + (s->meta.pending_token >= 0 ? 1 : 0);
}

/* The name of the copy the turn's commit keeps ("" none): the request's,
 * or a stateless chat's whole conversation, the reply as its client reads
 * it (cut at the turn's stop strings, which are the request's). Out of
 * memory costs only the copy. */
static void keep_name(const turn *t, char *out, size_t n)
{
    out[0] = 0;
    if (!t->keep_conv) {
        snprintf(out, n, "%s", t->keep_as);
        return;
    }
    bytebuf reply = { 0 };
    if (httpreq_reply_text(&reply, (const uint8_t *)t->sent.p, t->sent.n, t->n_stop, t->stop, t->stop_len) != 0 ||
        httpreq_conv_end(t->keep_conv, reply.p ? reply.p : "", reply.n, out, n) != 0)
        out[0] = 0;
    bytebuf_free(&reply);
}

/* End a turn at a token boundary: the state is consistent with every token
 * emitted. Encode it and queue the commit; `done` follows the commit. */
static void finish(scheduler *S, turn *t, int pending, const char *reason)
{
    session *s = t->s;
    log_text(t);
    t->finished = 1;
    t->t_end = clock_mono_ns();
    if (!t->t_prompt) t->t_prompt = t->t_end;
    s->meta.pending_token = pending;
    s->turn = NULL;
    s->last_use = ++S->clock;

    char err[256];
    uint8_t *blob = NULL, *tr = NULL;
    size_t blen = 0, tlen = 0;
    int rc = model_slot_read(S->m, s->slot, S->raw);
    if (rc == 0) rc = state_encode(S->m, &s->meta, S->raw, &blob, &blen, err, sizeof err);
    else snprintf(err, sizeof err, "reading slot %d failed (%d)", s->slot, rc);
    if (rc == 0 && transcript_encode(&s->tr, &tr, &tlen) != 0) {
        rc = -ENOMEM;
        snprintf(err, sizeof err, "out of memory encoding the transcript");
    }
    if (rc == 0 && t->out_lost) {
        rc = -ENOMEM;
        snprintf(err, sizeof err, "a token event or the transcript's text could not be kept");
    }
    if (rc == 0 && t->c->discard && s->version == STORE_VERSION_NEW) {
        /* Its HTTP client left before it was told anything, not even the
         * session's name: nobody can reach what it fed, so it is not kept. */
        free(blob);
        free(tr);
        stats_dropped(&S->srv->st);
        drop_session(S, s);
        return;
    }
    dmsg *m = rc == 0 ? dmsg_new(M_SAVE, t->c->id) : NULL;
    if (!m) {
        /* Never save a poisoned state over a good one, nor one the client
         * was not told all of: report, and drop the resident copy so the
         * next use resumes from the last commit. Memory running out is
         * `internal`, a poisoned state `bad_state`. */
        evlist *ev = cconn_out(S, t->c);
        if (ev) {
            char msg[800];
            snprintf(msg, sizeof msg, "session '%s': the turn's state was not saved (%s): %s; "
                     "the session stays at its last committed turn", s->name,
                     rc < 0 ? lind_strerror(rc) : "out of memory", rc == 0 ? "out of memory" : err);
            if (evlist_error(ev, t->req_id, rc == 0 || rc == -ENOMEM ? PE_INTERNAL : PE_BAD_STATE,
                             msg) == 0)
                t->c->out->finals++;
        }
        free(blob);
        free(tr);
        drop_session(S, s);
        return;
    }
    snprintf(m->name, sizeof m->name, "%s", s->name);
    m->sess = s;
    m->state = blob; m->state_len = blen;
    m->transcript = tr; m->transcript_len = tlen;
    m->tokens = session_tokens(s);
    m->version = s->version;   /* saved only if the store is still there */
    m->creates = s->version == STORE_VERSION_NEW;
    t->c->refs++;              /* until M_SAVED: its client may be seen gone meanwhile */
    turn_result *res = &m->result;
    res->is_append = t->is_append;
    res->t_recv_ns = t->t_recv;
    res->done.id = t->req_id;
    res->done.reason = reason;
    res->done.tokens_in = t->tokens_in;
    res->done.fed_fresh = t->fed_fresh;
    res->done.fed_bytes = t->fed_bytes + t->skipped;   /* of the request's text: the session held the skipped */
    res->cancelled = !strcmp(reason, "cancelled");
    res->done.tokens_out = t->produced;
    res->done.session_tokens = m->tokens;
    res->done.ms_queue = (double)(t->t_start - t->t_recv) / 1e6;
    res->done.ms_prompt = (double)(t->t_prompt - t->t_start) / 1e6;
    res->done.ms_generate = (double)(t->t_end - t->t_prompt) / 1e6;
    if (t->eos_hit >= 0 && !strcmp(reason, "stop")) {
        res->done.has_stop_token = 1;
        res->done.stop_token = (uint32_t)t->eos_hit;
    } else if (t->stop_hit >= 0 && !strcmp(reason, "stop")) {
        memcpy(res->stop, t->stop[t->stop_hit], t->stop_len[t->stop_hit]);
        res->done.stop = res->stop;
        res->done.stop_len = t->stop_len[t->stop_hit];
    }
    if (t->request_id[0]) {
        /* The answer goes into the commit: a turn that cannot record it is
         * not saved (a retry would run it again). */
        int erc = turnlog_encode(&t->log, t->phash, t->is_append, res->cancelled, &res->done,
                                 &m->replay, &m->replay_len);
        if (erc != 0) {
            evlist *ev = cconn_out(S, t->c);
            if (ev && evlist_error(ev, t->req_id, PE_INTERNAL, "the turn's answer could not be "
                                   "recorded for its request_id (out of memory); the turn was not "
                                   "saved and the session stays at its last committed turn") == 0)
                t->c->out->finals++;
            dmsg_free(m);
            drop_session(S, s);
            return;
        }
        snprintf(m->req.request_id, sizeof m->req.request_id, "%s", t->request_id);
    }
    if (!res->cancelled) keep_name(t, m->req.keep_as, sizeof m->req.keep_as);
    if (S->saves_tail) S->saves_tail->node.next = &m->node; else S->saves = m;
    S->saves_tail = m;
    m->node.next = NULL;
    S->saves_inflight++;
}

/* Does a stop string end inside the token's bytes b[0..n)? Stop strings
 * may span tokens (the output tail holds the bytes before b) and a token may
 * hold several bytes; the first stop string (in request order) found wins. */
static int stop_match(const turn *t, const uint8_t *b, size_t n)
{
    for (int i = 0; i < t->n_stop; i++) {
        const uint8_t *st = t->stop[i];
        size_t L = t->stop_len[i];
        if (n >= L && memmem(b, n, st, L)) return i;
        for (size_t k = 1; k < L; k++)   /* k bytes from the tail, L-k from b */
            if (k <= t->tail_len && L - k <= n && !memcmp(t->tail + t->tail_len - k, st, k) &&
                !memcmp(b, st + k, L - k))
                return i;
    }
    return -1;
}

/* A sampled token: send its bytes (with its logprobs when the turn asked:
 * lp, top[0..ntop)), then see whether the turn has ended. */
static void emit_token(scheduler *S, turn *t, int32_t tok, float lp, const ev_top *top, uint32_t ntop)
{
    session *s = t->s;
    if (!t->ignore_eos && model_is_eos(S->m, tok)) {
        /* The end of the text: never sent, and it stays pending like any
         * last sampled token, so the session holds what the model produced. */
        sampler_observe(&s->meta.sampler, tok);
        t->produced++;
        t->eos_hit = tok;
        finish(S, t, tok, "stop");
        return;
    }
    size_t n = 0;
    const uint8_t *b = tokenizer_token_bytes(S->tok, tok, &n);
    static const uint8_t none[1];
    if (!b) { b = none; n = 0; }   /* an id the tokenizer has no text for (padded vocabularies) */
    if (t->schema) jsonfsm_feed_bytes(&t->fsm, b, n);   /* allowed by the mask: keeps it alive */
    sampler_observe(&s->meta.sampler, tok);
    t->produced++;
    if (t->counts && tok >= 0 && tok < S->vocab && t->counts[tok]++ == 0) t->seen[t->nseen++] = tok;
    evlist *ev = cconn_out(S, t->c);
    int erc = !ev ? 0 : t->logprobs ? evlist_token_lp(ev, t->req_id, b, n, lp, top, ntop)
                                    : evlist_token(ev, t->req_id, b, n);
    if (ev ? erc != 0 : !t->c->closed) {
        /* The client would miss this token: the turn ends here, unsaved (finish). */
        t->out_lost = 1;
        finish(S, t, tok, "length");
        return;
    }
    if (t->request_id[0]) {   /* a failure fails the save (finish) */
        if (t->logprobs) turnlog_token_lp(&t->log, b, n, lp, top, ntop);
        else turnlog_token(&t->log, b, n);
    }
    if (t->keep_conv && n && bytebuf_put(&t->sent, b, n) != 0) {
        httpreq_conv_free(t->keep_conv);   /* out of memory costs only the copy */
        t->keep_conv = NULL;
    }
    if (n && transcript_append(&s->tr, TRANSCRIPT_OUT, b, n) != 0) {
        t->out_lost = 1;   /* the transcript would miss it: end unsaved (finish) */
        finish(S, t, tok, "length");
        return;
    }
    t->stop_hit = stop_match(t, b, n);
    /* keep the last STOP_MAX_LEN bytes of the output */
    if (n >= STOP_MAX_LEN) {
        memcpy(t->tail, b + n - STOP_MAX_LEN, STOP_MAX_LEN);
        t->tail_len = STOP_MAX_LEN;
    } else if (n) {
        size_t keep = t->tail_len + n > STOP_MAX_LEN ? STOP_MAX_LEN - n : t->tail_len;
        memmove(t->tail, t->tail + t->tail_len - keep, keep);
        memcpy(t->tail + keep, b, n);
        t->tail_len = keep + n;
    }
    if (t->stop_hit >= 0) finish(S, t, tok, "stop");
    else if (t->schema && jsonfsm_is_closed(&t->fsm)) finish(S, t, tok, "stop");   /* the document is done */
    else if (t->produced >= t->max_tokens) finish(S, t, tok, "length");
    else if (t->cancelled) finish(S, t, tok, "cancelled");
    else { t->last = tok; t->generating = 1; }
}

/* A turn that is not (or no longer) sampling ends once one token of its
 * feed is left: that token becomes the session's pending token. */
static void maybe_end_feed(scheduler *S, turn *t)
{
    if (t->finished || t->gen || t->generating) return;
    size_t left = t->feed_len - t->feed_pos;
    if (left > 1) return;
    int32_t pending = left ? t->feed[t->feed_pos] : -1;
    observe_to(S, t, t->feed_len);
    finish(S, t, pending, t->is_append ? "append" : (t->cancelled ? "cancelled" : "length"));
}

static void cancel_turn(turn *t)
{
    t->cancelled = 1;
    if (!t->generating) t->gen = 0;   /* stop feeding (stop_feed), sample nothing */
}

/* A cancelled turn still feeding its text stops at this token boundary
 * (once past the old tail's bytes, min_stop): the session holds the tokens
 * fed so far plus the next one as its pending token, i.e. the first
 * fed_bytes bytes of the text as this turn tokenized them; the rest of the
 * text, and the tail an append would have held back, are dropped. */
static void stop_feed(scheduler *S, turn *t, const char *reason)
{
    size_t p = t->feed_pos;                     /* < feed_len: maybe_end_feed ran */
    observe_to(S, t, p + 1);
    uint64_t covered = 0;
    for (size_t i = t->first; i <= p && i < t->feed_len; i++) {
        size_t n = 0;
        tokenizer_token_bytes(S->tok, t->feed[i], &n);
        covered += n;
    }
    t->fed_bytes = covered > t->old_tail ? covered - t->old_tail : 0;
    if (t->fed_bytes > t->text_len) t->fed_bytes = t->text_len;
    t->tokens_in = p >= t->first ? p + 1 - t->first : 0;
    t->s->meta.tail_len = 0;
    finish(S, t, t->feed[p], reason);
}

/* A session at its model's maximum length (a Linformer's N, a cosFormer's
 * horizon M: model_max_tokens): no row of it may be stepped, so its turn ends
 * here with reason "max_length", keeping everything fed before. */
static void at_max_length(scheduler *S, turn *t)
{
    if (t->generating) finish(S, t, t->last, "max_length");
    else stop_feed(S, t, "max_length");
}

/* ---- a round ----------------------------------------------------------------- */

static void flush_round(scheduler *S)
{
    for (cconn *c = S->flush; c; ) {
        cconn *next = c->fnext;
        outmsg *o = c->out;
        c->out = NULL;
        c->fnext = NULL;
        if (!c->closed) send_out(S, o);
        else {
            outmsg_free(o);
            c->refs++;
            cconn_release(S, c);   /* frees it if nothing else holds it */
        }
        c = next;
    }
    S->flush = NULL;
    /* Saves go after the events, so `done` always follows its tokens. */
    for (dmsg *m = S->saves; m; ) {
        dmsg *next = (dmsg *)m->node.next;
        queue_push(&S->srv->persistq, &m->node);
        m = next;
    }
    S->saves = S->saves_tail = NULL;
}

static void reap(scheduler *S)
{
    int j = 0;
    for (int i = 0; i < S->nactive; i++) {
        turn *t = S->active[i];
        if (t->finished) {
            if (S->rr > j) S->rr--;
            cconn_release(S, t->c);
            free(t->feed);
            free(t->text);
            free(t->bias_id);
            free(t->bias);
            free(t->counts);
            free(t->seen);
            free(t->schema);
            jsonmask_free(t->mask);
            turnlog_free(&t->log);
            httpreq_conv_free(t->keep_conv);
            bytebuf_free(&t->sent);
            free(t);
        } else {
            S->active[j++] = t;
        }
    }
    S->nactive = j;
    if (S->rr >= S->nactive) S->rr = 0;
}

/* A failed step. -EDOM: the step completed but some runs went non-finite
 * (model_last_nonfinite): only their turns fail, with bad_state, and their
 * sessions drop the poisoned slot to resume from the last commit; the other
 * turns go on (round_once skips finished turns). Any other code fails the
 * whole batch, naming the backend's error; a lost device (model_poisoned)
 * is logged once and answered `unavailable` from then on (on_request). */
static void fail_batch(scheduler *S, int B, int rc)
{
    const unsigned char *bad = NULL;
    if (rc == -EDOM) model_last_nonfinite(S->m, &bad);
    int dead = model_poisoned(S->m);
    if (dead && !S->dead_logged) {
        S->dead_logged = 1;
        lind_log(REQLOG_ERROR, "model", "the compute device failed: %s. Every request now gets "
                "`unavailable`; restart lind.", model_last_error(S->m));
    }
    for (int b = 0, row = 0; b < B; row += S->b_n[b], b++) {
        turn *t = S->b_turns[b];
        int hit = 0;
        for (int j = 0; bad && j < S->b_n[b]; j++) hit |= bad[row + j];
        if (bad && !hit) continue;
        evlist *ev = cconn_out(S, t->c);
        if (ev) {
            char msg[600];
            if (bad)
                snprintf(msg, sizeof msg, "session '%s': the model produced a non-finite value (NaN or "
                         "infinity) in this turn; its state was discarded and the session stays at its "
                         "last committed turn", t->s->name);
            else
                snprintf(msg, sizeof msg, "model step failed (%d%s%.400s); session '%s' stays at its last "
                         "committed turn", rc, *model_last_error(S->m) ? ": " : "", model_last_error(S->m),
                         t->s->name);
            if (evlist_error(ev, t->req_id, bad ? PE_BAD_STATE : dead ? PE_UNAVAILABLE : PE_INTERNAL,
                             msg) == 0)
                t->c->out->finals++;
        }
        t->finished = 1;
        t->s->turn = NULL;
        drop_session(S, t->s);
    }
}

/* `progress` events for turns that asked, while a long text is fed: about
 * every 2 % of it, and not more often than every 256 tokens. */
static void report_progress(scheduler *S)
{
    for (int i = 0; i < S->nactive; i++) {
        turn *t = S->active[i];
        if (!t->progress || t->finished || t->generating || t->feed_pos >= t->feed_len) continue;
        size_t step = t->feed_len / 50 > 256 ? t->feed_len / 50 : 256;
        if (!t->progress_next) t->progress_next = step;
        if (t->feed_pos < t->progress_next) continue;
        evlist *ev = cconn_out(S, t->c);
        if (ev) evlist_progress(ev, t->req_id, t->feed_pos, t->feed_len);
        t->progress_next = t->feed_pos + step;
    }
}

/* A turn's logits row with logit_bias added and OpenAI's penalties over the
 * tokens the turn sampled so far (logit -= presence + frequency·count of
 * each id sampled): into S->adj, which it returns. */
static const float *adjust(scheduler *S, const turn *t, const float *row)
{
    memcpy(S->adj, row, (size_t)S->vocab * sizeof *S->adj);
    for (int i = 0; i < t->n_bias; i++)
        if (t->bias_id[i] < S->vocab) S->adj[t->bias_id[i]] += t->bias[i];
    for (uint32_t i = 0; i < t->nseen; i++) {
        int32_t id = t->seen[i];
        S->adj[id] -= t->pres + t->freq * (float)t->counts[id];
    }
    return S->adj;
}

/* Structured output's index of the vocabulary (jsonmask.h) and the ids
 * buffer of sparse masks, made once at start-up: indexing a 65k vocabulary
 * takes tens of ms, which the first constrained turn would otherwise stall
 * every stream for. 0, or -ENOMEM with a message in err. */
static int jvocab_build(scheduler *S, char *err, size_t errlen)
{
    char why[200] = "out of memory";
    int32_t *eos = malloc((size_t)S->vocab * sizeof *eos);
    int neos = 0, rc = -ENOMEM;
    if (eos) {
        for (int32_t i = 0; i < S->vocab; i++)
            if (model_is_eos(S->m, i)) eos[neos++] = i;
        rc = jsonmask_vocab_new(S->tok, S->vocab, eos, neos, &S->jvocab, why, sizeof why);
        if (rc) S->jvocab = NULL;
    }
    free(eos);
    if (S->jvocab && !(S->jids = malloc((size_t)S->vocab * sizeof *S->jids))) {
        jsonmask_vocab_free(S->jvocab);
        S->jvocab = NULL;
        rc = -ENOMEM;
    }
    if (rc) snprintf(err, errlen, "indexing the vocabulary for structured output: %s", why);
    return rc;
}

/* A constrained turn's allowed tokens for its next sample (jsonmask.h), or
 * NULL when the turn has ended instead: out of memory, or a vocabulary with
 * no token that keeps the document valid (one lacking byte tokens may) —
 * the client gets an error and the session stays at its last committed
 * turn, so no invalid output is ever completed. */
static const uint64_t *constrain_allowed(scheduler *S, turn *t, size_t *nallowed)
{
    const char *why = NULL;
    if (!t->mask) t->mask = jsonmask_new(S->jvocab);   /* jvocab: made by setup */
    size_t n = 0;
    const uint64_t *bits = t->mask ? jsonmask_allowed(t->mask, &t->fsm, &n) : NULL;
    if (!bits) why = "out of memory masking the vocabulary for structured output";
    else if (!n) why = "no token of the model's vocabulary can continue the JSON document (structured output)";
    *nallowed = n;
    if (!why) return bits;
    evlist *ev = cconn_out(S, t->c);
    if (ev && evlist_error(ev, t->req_id, bits ? PE_BAD_REQUEST : PE_INTERNAL, why) == 0) t->c->out->finals++;
    t->finished = 1;
    t->s->turn = NULL;
    drop_session(S, t->s);
    return NULL;
}

/* The log-softmax of the row the sampler drew from (after logit_bias and
 * the penalties; before temperature, top_k and top_p): tok's value, and the
 * t->logprobs - 1 most likely tokens (most likely first, ties by id) into
 * top[0..*ntop). A biased logit of -inf-like size still gives a finite
 * value (the row is finite: model_forward checks it). */
static float logprobs(scheduler *S, const turn *t, const float *row, int32_t tok, ev_top *top,
                      uint32_t *ntop)
{
    int V = S->vocab, k = t->logprobs - 1;
    if (k > EV_TOP_MAX) k = EV_TOP_MAX;
    if (k > V) k = V;
    float mx = row[0];
    for (int i = 1; i < V; i++) mx = row[i] > mx ? row[i] : mx;
    double sum = 0.0;
    for (int i = 0; i < V; i++) sum += exp((double)row[i] - (double)mx);
    double lse = (double)mx + log(sum);
    int32_t best[EV_TOP_MAX];
    int nb = 0;
    for (int i = 0; i < V && k > 0; i++) {
        if (nb == k && row[i] <= row[best[nb - 1]]) continue;
        int j = nb < k ? nb++ : nb - 1;
        while (j > 0 && row[best[j - 1]] < row[i]) { best[j] = best[j - 1]; j--; }
        best[j] = i;
    }
    for (int i = 0; i < nb; i++) {
        size_t n = 0;
        const uint8_t *b = tokenizer_token_bytes(S->tok, best[i], &n);
        top[i].lp = (float)((double)row[best[i]] - lse);
        top[i].bytes = b;
        top[i].len = b ? n : 0;
    }
    *ntop = (uint32_t)nb;
    return (float)((double)row[tok] - lse);
}

/* Grow the logits buffer to hold n rows. */
static int logits_reserve(scheduler *S, int n)
{
    if (n <= S->logits_rows) return 0;
    /* the backend's own host memory: on a GPU, page-locked, so the step's
     * download runs at the link's rate (docs/CUDA.md) */
    float *l = model_logits_alloc(S->m, (size_t)n * (size_t)S->vocab);
    if (!l) return -ENOMEM;
    model_logits_free(S->m, S->logits);
    S->logits = l;
    S->logits_rows = n;
    return 0;
}

/* One round; returns the number of sessions stepped (0: nothing runnable).
 *
 * Up to --max-batch runnable turns, round-robin, get one row each: a decode
 * turn its last sampled token, a turn feeding its prompt its next prompt
 * token. Turns still feeding then get more of their prompt, up to
 * --prompt-chunk rows each, handed out round-robin until the round has
 * max(--max-batch, --prompt-chunk) such extra rows: a long prompt moves in
 * chunks but never makes a round much longer than a full decode batch. All
 * rows go through one model_forward (a turn's rows are one run), with logits
 * only for decode rows and the last prompt row of a turn about to sample.
 * model_forward equals token-at-a-time feeding bit for bit, so the chunking
 * never changes a result. */
static int round_once(scheduler *S)
{
    int maxb = S->srv->opt.max_batch, B = 0;
    uint64_t t0 = clock_mono_ns();
    for (int k = 0; k < S->nactive && B < maxb; k++) {
        turn *t = S->active[(S->rr + k) % S->nactive];
        if (t->finished) continue;
        if (t->c->closed && !t->cancelled) cancel_turn(t);
        if (t->c->paused && !t->cancelled) continue;
        if (t->generating && t->cancelled) { finish(S, t, t->last, "cancelled"); continue; }
        maybe_end_feed(S, t);
        if (t->finished) continue;
        if (t->cancelled && t->feed_pos >= t->min_stop) { stop_feed(S, t, "cancelled"); continue; }
        if (S->max_len > 0 && t->s->meta.tokens >= (uint64_t)S->max_len) { at_max_length(S, t); continue; }
        S->b_turns[B] = t;
        S->b_n[B] = 1;
        B++;
    }
    if (B == 0) {
        flush_round(S);
        reap(S);
        return 0;
    }
    if (S->nactive) S->rr = (S->rr + B) % S->nactive;

    /* Extra prompt rows, round-robin over the turns still feeding. */
    int chunk = S->srv->opt.prompt_chunk, extra_max = S->max_rows - maxb, extra = 0, np = 0, served = 0;
    for (int b = 0; b < B; b++)
        if (!S->b_turns[b]->generating) S->b_lidx[np++] = b;   /* b_lidx as scratch */
    int start = np ? S->prr % np : 0;
    for (int j = 0; j < np && extra < extra_max; j++) {
        int b = S->b_lidx[(start + j) % np];
        turn *t = S->b_turns[b];
        size_t left = t->feed_len - t->feed_pos - (t->gen ? 0 : 1);   /* an append keeps its last */
        size_t want = left < (size_t)chunk ? left : (size_t)chunk;
        int more = (int)want - 1;
        if (more > extra_max - extra) more = extra_max - extra;
        if (S->max_len > 0 && more > S->max_len - (long long)t->s->meta.tokens - 1)
            more = (int)(S->max_len - (long long)t->s->meta.tokens - 1);   /* stop at the model's length */
        if (more <= 0) continue;
        S->b_n[b] += more;
        extra += more;
        served++;
    }
    S->prr = np ? (start + served) % np : 0;

    /* Lay out the rows. */
    int R = 0, nl = 0;
    for (int b = 0; b < B; b++) {
        turn *t = S->b_turns[b];
        int slot = t->s->slot;
        S->b_lidx[b] = -1;
        if (t->generating) {
            S->b_slots[R] = slot;
            S->b_toks[R] = t->last;
            S->b_lidx[b] = nl;
            S->b_lrows[nl++] = R++;
            continue;
        }
        for (int j = 0; j < S->b_n[b]; j++) {
            S->b_slots[R] = slot;
            S->b_toks[R++] = t->feed[t->feed_pos + (size_t)j];
        }
        if (t->gen && t->feed_pos + (size_t)S->b_n[b] == t->feed_len) {
            S->b_lidx[b] = nl;
            S->b_lrows[nl++] = R - 1;
        }
    }
    int rc = logits_reserve(S, nl);
    if (rc == 0) rc = model_forward(S->m, S->b_slots, S->b_toks, R, S->b_lrows, nl, nl ? S->logits : NULL);
    if (rc == -EDOM) fail_batch(S, B, rc);   /* only the non-finite runs' turns */
    else if (rc != 0) {
        fail_batch(S, B, rc);
        flush_round(S);
        reap(S);
        return B;
    }
    uint64_t fed = 0, out = 0;
    for (int b = 0; b < B; b++) {
        turn *t = S->b_turns[b];
        if (t->finished) continue;   /* failed by fail_batch (-EDOM) */
        t->s->meta.tokens += (uint64_t)S->b_n[b];
        if (!t->generating) {
            t->feed_pos += (size_t)S->b_n[b];
            observe_to(S, t, t->feed_pos);
            fed += (uint64_t)S->b_n[b];
            if (S->b_lidx[b] < 0) { maybe_end_feed(S, t); continue; }
            t->t_prompt = clock_mono_ns();
            log_text(t);   /* the text before the first token out */
        }
        float *lrow = S->logits + (size_t)S->b_lidx[b] * (size_t)S->vocab;
        const float *row = lrow;
        const uint64_t *allowed = NULL;
        size_t nallowed = 0;
        if (t->schema && !(allowed = constrain_allowed(S, t, &nallowed))) continue;   /* ended with an error */
        if (t->n_bias || t->nseen) row = adjust(S, t, row);
        int32_t tok;
        if (allowed) {
            /* the row is this round's own (the logits buffer, or adj): the
             * mask may go into it in place; logprobs read it masked */
            float *w = row == S->adj ? S->adj : lrow;
            tok = jsonmask_sample(&t->s->meta.sampler, allowed, nallowed, w, S->vocab, S->adj, S->jids, S->scratch,
                                  t->logprobs != 0, NULL);
        } else {
            tok = sampler_next(&t->s->meta.sampler, row, S->vocab, S->scratch);
        }
        ev_top top[EV_TOP_MAX];
        uint32_t ntop = 0;
        float lp = t->logprobs ? logprobs(S, t, row, tok, top, &ntop) : 0.0f;
        emit_token(S, t, tok, lp, top, ntop);
        out++;
    }
    report_progress(S);
    stats_step(&S->srv->st, B, (double)(clock_mono_ns() - t0) / 1e6, fed, out);
    flush_round(S);
    reap(S);
    return B;
}

/* ---- messages ---------------------------------------------------------------- */

static turn *find_turn(scheduler *S, uint64_t conn, uint64_t id)
{
    for (int i = 0; i < S->nactive; i++)
        if (!S->active[i]->finished && S->active[i]->c->id == conn && S->active[i]->req_id == id)
            return S->active[i];
    return NULL;
}

struct waiting_find { uint64_t conn, id; dmsg *hit; };
static void waiting_visit(session *s, void *arg)
{
    struct waiting_find *f = arg;
    if (s->waiting && s->waiting->conn == f->conn && s->waiting->req.id == f->id) f->hit = s->waiting;
}

static void cancel_all_visit(session *s, void *arg)
{
    const uint64_t *conn = arg;
    if (s->waiting && (!conn || s->waiting->conn == *conn)) s->waiting->rc = -ECANCELED;
}

static void start_turn_request(scheduler *S, dmsg *m)
{
    op_request *r = &m->req;
    if (S->shutting) {
        reply_error(S, m->conn, r->id, PE_SHUTTING_DOWN, "%s", "the server is shutting down");
        dmsg_free(m);
        return;
    }
    if (atomic_load(&S->srv->store_nospace)) {   /* a full disk (persist.c) */
        reply_error(S, m->conn, r->id, PE_INSUFFICIENT_STORAGE, "%s", "the disk holding the store is "
                    "full: new turns are refused until sessions are deleted (lindctl sessions rm, "
                    "sessions gc) or the disk has room; reads go on");
        dmsg_free(m);
        return;
    }
    if (atomic_load(&S->srv->store_over)) {   /* retention: past the quota (persist.c) */
        char msg[400];
        snprintf(msg, sizeof msg, "sessions hold %llu bytes, past --max-store-bytes %llu, and only "
                 "named sessions are left (they are never deleted for the quota); new turns are "
                 "refused until sessions are deleted (lindctl sessions rm) or the quota is raised; "
                 "reads go on", (unsigned long long)atomic_load(&S->srv->store_bytes),
                 (unsigned long long)S->srv->opt.max_store_bytes);
        reply_error(S, m->conn, r->id, PE_INSUFFICIENT_STORAGE, "%s", msg);
        dmsg_free(m);
        return;
    }
    session *s = session_find(&S->tab, r->session);
    if (s && s->busy) {
        reply_error(S, m->conn, r->id, PE_BUSY, "session '%s' has a turn in flight", r->session);
        dmsg_free(m);
        return;
    }
    cconn *c = cconn_get(S, m->conn);
    if (!c) {
        reply_error(S, m->conn, r->id, PE_INTERNAL, "%s", "out of memory");
        dmsg_free(m);
        return;
    }
    c->refs++;
    if (s) {
        s->busy = 1;
        if (r->request_id[0]) {
            /* A retry may have been committed before (by this node or the
             * one that held the session): ask the store (on_looked). */
            m->kind = M_LOOKUP;
            m->sess = s;
            snprintf(m->name, sizeof m->name, "%s", s->name);
            S->loads_inflight++;
            queue_push(&S->srv->persistq, &m->node);
            return;
        }
        begin_turn(S, s, m);
        return;
    }
    if (S->nwaiting >= S->srv->opt.max_waiting) {
        char msg[160];
        snprintf(msg, sizeof msg, "%d sessions are already waiting to be loaded or for a model slot "
                 "(--max-waiting); try again later", S->nwaiting);
        reply_error(S, m->conn, r->id, PE_LIMIT, "%s", msg);
        cconn_release(S, c);
        dmsg_free(m);
        return;
    }
    s = session_new(r->session, S->srv->opt.transcript_bytes);
    dmsg *ld = dmsg_new(M_LOAD, 0);
    if (!s || !ld) {
        session_free(s);
        dmsg_free(ld);
        reply_error(S, m->conn, r->id, PE_INTERNAL, "%s", "out of memory");
        cconn_release(S, c);
        dmsg_free(m);
        return;
    }
    s->busy = 1;
    s->waiting = m;
    S->nwaiting++;
    session_insert(&S->tab, s);
    snprintf(ld->name, sizeof ld->name, "%s", s->name);
    snprintf(ld->req.request_id, sizeof ld->req.request_id, "%s", r->request_id);
    if (r->op == OP_GENERATE)   /* not stored: the state to start from (persist.c, try_load) */
        snprintf(ld->req.start_from, sizeof ld->req.start_from, "%s", r->start_from);
    ld->sess = s;
    S->loads_inflight++;
    queue_push(&S->srv->persistq, &ld->node);
}

static void forward(scheduler *S, dmsg *m)
{
    queue_push(&S->srv->persistq, &m->node);
}

/* ---- requests: the compute column of daemon/ops.h ---------------------------- */

static void cancel_request(scheduler *S, dmsg *m)
{
    op_request *r = &m->req;
    /* Room for the answer before anything is cancelled. */
    outmsg *o = outmsg_new(m->conn);
    if (!o || evlist_reserve_result(&o->ev, 1, 0) != 0) {
        outmsg_free(o);
        reply_error(S, m->conn, r->id, PE_INTERNAL, "out of memory for the answer to '%s'; "
                    "nothing was cancelled", "cancel");
        dmsg_free(m);
        return;
    }
    turn *t = NULL;
    int hit = 0;
    if (r->session[0]) {   /* by name: the session's turn, from any connection */
        session *s = session_find(&S->tab, r->session);
        if (s && s->turn && !s->turn->finished) { cancel_turn(s->turn); hit = 1; }
        else if (s && s->waiting) { s->waiting->rc = -ECANCELED; hit = 1; }
    } else if ((t = find_turn(S, m->conn, r->target))) { cancel_turn(t); hit = 1; }
    else {
        struct waiting_find f = { m->conn, r->target, NULL };
        session_foreach(&S->tab, waiting_visit, &f);
        if (f.hit) { f.hit->rc = -ECANCELED; hit = 1; }
    }
    evlist_result_begin(&o->ev, r->id);
    evlist_put_bool(&o->ev, "cancelled", hit);
    if (evlist_result_end(&o->ev) != 0) {   /* cannot be: it fits the room reserved */
        outmsg_free(o);
        reply_error(S, m->conn, r->id, PE_INTERNAL, "out of memory for the answer to '%s'", "cancel");
    } else {
        o->finals = 1;
        send_out(S, o);
    }
    dmsg_free(m);
}

/* What only this thread knows (resident, busy, the live transcript), for
 * the store thread's answer. */
static void info_request(scheduler *S, dmsg *m)
{
    op_request *r = &m->req;
    session *s = session_find(&S->tab, r->session);
    if (s) {
        m->rinfo.resident = s->phase == SESS_READY;
        m->rinfo.busy = s->busy;
        m->rinfo.tokens = s->phase == SESS_READY ? session_tokens(s) : 0;
        m->rinfo.created_ms = s->created_ms;
        if (s->phase == SESS_READY) {
            if (transcript_encode(&s->tr, &m->rinfo.transcript, &m->rinfo.transcript_len) != 0) {
                /* not an empty transcript in the answer: say why there is none */
                reply_error(S, m->conn, r->id, PE_INTERNAL,
                            "out of memory encoding the transcript of '%s'", r->session);
                dmsg_free(m);
                return;
            }
            m->rinfo.seed = s->meta.sampler.p.seed;
            m->rinfo.chat_template = s->meta.chat_template;
        }
    }
    forward(S, m);
}

static void undo_request(scheduler *S, dmsg *m)
{
    op_request *r = &m->req;
    session *s = session_find(&S->tab, r->session);
    if (s && s->busy) {
        reply_error(S, m->conn, r->id, PE_BUSY, "session '%s' has a turn in flight", r->session);
        dmsg_free(m);
        return;
    }
    if (!s || s->phase != SESS_READY || !s->undo_state) {
        reply_error(S, m->conn, r->id, PE_NOT_FOUND, "session '%s' has nothing to undo: the state "
                    "before a turn is kept only while the session stays in this daemon's memory, for "
                    "its last turn (not its first, not after an undo, a restart or an eviction)",
                    r->session);
        dmsg_free(m);
        return;
    }
    undo_turn(S, s, m);
}

static void delete_request(scheduler *S, dmsg *m)
{
    op_request *r = &m->req;
    session *s = session_find(&S->tab, r->session);
    if (s && s->busy) {
        reply_error(S, m->conn, r->id, PE_BUSY, "session '%s' has a turn in flight", r->session);
        dmsg_free(m);
        return;
    }
    if (s) drop_session(S, s);
    forward(S, m);
}

/* fork and import: a session that is resident here already exists; an
 * import's bytes are checked against the model before the store sees them. */
static void create_request(scheduler *S, dmsg *m)
{
    op_request *r = &m->req;
    const char *dst = r->op == OP_FORK ? r->to : r->session;
    if (session_find(&S->tab, dst)) {
        reply_error(S, m->conn, r->id, PE_EXISTS, "session '%s' already exists", dst);
        dmsg_free(m);
        return;
    }
    if (r->op == OP_IMPORT) {
        store_record rec;
        char name[STORE_NAME_MAX + 1], err[256];
        int rc = store_export_decode(r->data, r->data_len, &rec, name, err, sizeof err);
        state_meta meta;
        if (rc == 0) rc = state_decode(S->m, rec.state, rec.state_len, &meta, S->raw,
                                       err, sizeof err);
        uint64_t held = rc == 0 ? meta.tokens + (meta.pending_token >= 0 ? 1 : 0) : 0;
        if (rc == 0 && rec.tokens != held) {   /* info and list report the record's count */
            snprintf(err, sizeof err, "the export records %llu tokens but its state holds %llu",
                     (unsigned long long)rec.tokens, (unsigned long long)held);
            rc = -EBADMSG;
        }
        if (rc != 0) {
            send_out(S, outmsg_error(m->conn, r->id, lind_wire_code(rc),
                                     "cannot import into '%s': %s", r->session, err));
            dmsg_free(m);
            return;
        }
        m->tokens = rec.tokens;
    }
    forward(S, m);
}

typedef void compute_handler(scheduler *S, dmsg *m);
static compute_handler *const handlers[OP_COUNT] = {
#define HANDLER(E, name, decode, entry, compute, store, spread, nodev) [OP_##E] = compute,
    LIND_OPS(HANDLER)
#undef HANDLER
};

static void on_request(scheduler *S, dmsg *m)
{
    op_request *r = &m->req;
    /* A lost device: nothing can run (fail_batch logged it). The store still
     * answers list, export and stats, so sessions can be saved elsewhere
     * (docs/PROTOCOL.md, `unavailable`). */
    if (model_poisoned(S->m) && !op_table[r->op].nodev) {
        reply_error(S, m->conn, r->id, PE_UNAVAILABLE, "the compute device failed (%.400s); restart the server",
                    model_last_error(S->m));
        dmsg_free(m);
        return;
    }
    compute_handler *h = r->op > OP_NONE && r->op < OP_COUNT ? handlers[r->op] : NULL;
    if (!h) {
        reply_error(S, m->conn, r->id, PE_INTERNAL, "op '%s' reached the compute thread", op_name(r->op));
        dmsg_free(m);
        return;
    }
    h(S, m);
}

/* The state a new session was to start from is not stored (deleted,
 * collected, never made; op_request.start_from): a request that needs it
 * fails as a fork from it would, with nothing made (the session's lease is
 * given back); any other starts from a zero state and feeds its whole text
 * (fresh_text), as a fresh session would. 1: go on; 0: answered here (m
 * consumed). */
static int start_fresh(scheduler *S, session *s, dmsg *m)
{
    dmsg *w = s->waiting;
    op_request *r = &w->req;
    if (r->start_required) {
        send_out(S, outmsg_error(w->conn, r->id, PE_NOT_FOUND, "no session named '%s'", r->start_from));
        cconn *c = cconn_get(S, w->conn);
        S->nwaiting--;
        drop_session(S, s);
        if (c) cconn_release(S, c);
        dmsg_free(m);
        return 0;
    }
    if (r->fresh_text) {
        free(r->text);
        r->text = r->fresh_text;
        r->text_len = r->fresh_len;
        r->fresh_text = NULL;
        r->fresh_len = 0;
    }
    r->reply_tpl = NULL;   /* no reply before it in a fresh session */
    return 1;
}

static void on_loaded(scheduler *S, dmsg *m)
{
    session *s = m->sess;
    S->loads_inflight--;
    if (m->rc < 0 && m->rc != -ENOENT) {
        dmsg *w = s->waiting;
        if (m->rc == LIND_E_MOVED)   /* leased by another node: the message names it */
            send_out(S, outmsg_error(w->conn, w->req.id, PE_MOVED, "%s", m->err));
        else
            send_out(S, outmsg_error(w->conn, w->req.id, lind_wire_code(m->rc) == PE_INTERNAL ? PE_IO
                                     : lind_wire_code(m->rc), "loading session '%s' failed: %s", s->name, m->err));
        cconn *c = cconn_get(S, w->conn);
        S->nwaiting--;
        drop_session(S, s);
        if (c) cconn_release(S, c);
        dmsg_free(m);
        return;
    }
    s->leased = 1;
    if (m->start < 0 && !start_fresh(S, s, m)) return;
    /* started from another's state, the session is still new: its commit creates it */
    s->version = m->rc == 0 && m->start <= 0 ? m->loaded.version : STORE_VERSION_NEW;
    s->waiting->start = m->start;
    s->waiting->replay = m->replay;   /* the answer recorded under its request_id, if any */
    s->waiting->replay_len = m->replay_len;
    m->replay = NULL;
    s->loaded = m;
    place(S, s);
}

/* The store's answer to M_LOOKUP (start_turn_request). */
static void on_looked(scheduler *S, dmsg *m)
{
    session *s = m->sess;
    S->loads_inflight--;
    m->sess = NULL;
    m->kind = M_REQUEST;
    if (m->rc < 0 || S->shutting) {
        if (S->shutting)
            reply_error(S, m->conn, m->req.id, PE_SHUTTING_DOWN, "%s", "the server is shutting down");
        else
            send_out(S, outmsg_error(m->conn, m->req.id, lind_wire_code(m->rc) == PE_INTERNAL ? PE_IO
                                     : lind_wire_code(m->rc), "session '%s': looking up request_id '%s' "
                                     "failed: %s", s->name, m->req.request_id, m->err));
        cconn *c = cconn_get(S, m->conn);
        s->busy = 0;
        if (c) cconn_release(S, c);
        dmsg_free(m);
        serve_waiters(S);
        return;
    }
    begin_turn(S, s, m);
}

/* A session a commit just created whose HTTP client was seen gone (told
 * nothing) while the commit was on its way: nobody has its name, so it is
 * deleted (as finish() drops one whose client was seen gone before). The
 * delete answers nobody (connection 0) and goes under the lease still held. */
static void discard_created(scheduler *S, session *s)
{
    dmsg *d = dmsg_new(M_REQUEST, 0);
    if (d) {
        d->req.op = OP_DELETE;
        snprintf(d->req.session, sizeof d->req.session, "%s", s->name);
        forward(S, d);
    }
    stats_dropped(&S->srv->st);
    drop_session(S, s);
}

static void on_saved(scheduler *S, dmsg *m)
{
    session *s = m->sess;
    cconn *c = cconn_get(S, m->conn);   /* held since finish() */
    S->saves_inflight--;
    s->busy = 0;
    s->last_use = ++S->clock;
    if (m->rc == 0 && m->creates && c && c->discard) discard_created(S, s);
    else if (m->result.is_undo) drop_session(S, s);   /* the store has the state to go on from */
    else if (m->rc == 0) s->version = m->version;
    else drop_session(S, s);   /* resume from the last commit next time */
    if (c) cconn_release(S, c);
    dmsg_free(m);
    serve_waiters(S);
}

static void handle(scheduler *S, dmsg *m)
{
    switch (m->kind) {
    case M_REQUEST: on_request(S, m); return;
    case M_LOADED:  on_loaded(S, m); return;
    case M_SAVED:   on_saved(S, m); return;
    case M_LOOKED:  on_looked(S, m); return;
    case M_CONN_CLOSED: case M_CONN_ABANDONED: {
        cconn *c = cconn_get(S, m->conn);
        if (c) {
            c->closed = 1;
            if (m->kind == M_CONN_ABANDONED) c->discard = 1;
            for (int i = 0; i < S->nactive; i++)
                if (S->active[i]->c == c) cancel_turn(S->active[i]);
            session_foreach(&S->tab, cancel_all_visit, &m->conn);
            c->refs++;
            cconn_release(S, c);
        }
        break;
    }
    case M_CANCEL_CONN: {   /* paused past --pause-timeout: its turns end, their slots free */
        for (int i = 0; i < S->nactive; i++)
            if (S->active[i]->c->id == m->conn) cancel_turn(S->active[i]);
        session_foreach(&S->tab, cancel_all_visit, &m->conn);
        break;
    }
    case M_PAUSE: case M_RESUME: {
        cconn *c = cconn_get(S, m->conn);
        if (c) {
            c->paused = m->kind == M_PAUSE;
            c->refs++;
            cconn_release(S, c);
        }
        break;
    }
    case M_LEASE_LOST: {
        /* Another node serves it now: an idle copy goes at once; a busy
         * one's save will be refused (fenced) and drop it then. */
        session *s = session_find(&S->tab, m->name);
        if (s && s->leased) {
            s->leased = 0;
            if (!s->busy && s->phase == SESS_READY) drop_session(S, s);
        }
        break;
    }
    case M_SHUTDOWN:
        S->shutting = 1;
        for (int i = 0; i < S->nactive; i++) cancel_turn(S->active[i]);
        session_foreach(&S->tab, cancel_all_visit, NULL);
        break;
    default:
        break;
    }
    dmsg_free(m);
}

/* Without --max-resident: up to 1024 sessions, within about 1 GiB of state. */
#define RESIDENT_DEFAULT     1024
#define RESIDENT_STATE_BYTES (1ull << 30)

/* On the compute thread, before serving: load the model there (a GPU
 * backend's context then belongs to the thread that uses it), publish the
 * facts `hello` reports, size the slots and buffers. */
static int setup(scheduler *S, char *err, size_t errlen)
{
    server *srv = S->srv;
    model_opts mo = { srv->opt.backend, srv->opt.dtype, srv->opt.compute, &srv->opt.be, srv->opt.bos };
    int rc = model_load_opts(srv->opt.model_dir, &mo, &S->m, err, errlen);
    if (rc != 0) return rc;
    srv->m = S->m;
    const lind_config *cfg = model_config(S->m);
    srv->state_bytes = model_state_bytes(S->m);
    srv->fingerprint = model_fingerprint(S->m);
    srv->d_model = cfg->d_model;
    srv->n_layers = cfg->n_layers;
    srv->params = model_param_count(S->m);
    srv->vocab = model_vocab(S->m);
    srv->limits.max_top_k = srv->vocab;   /* read by the loop only after start */
    snprintf(srv->tokenizer, sizeof srv->tokenizer, "%s", tokenizer_kind_name(model_tokenizer(S->m)));
    snprintf(srv->dtype, sizeof srv->dtype, "%s", lind_dtype_name(model_weights_dtype(S->m)));
    snprintf(srv->backend, sizeof srv->backend, "%s", model_backend_name(S->m));
    server_options *o = &srv->opt;
    if (o->max_resident == 0) {
        unsigned long long fit = RESIDENT_STATE_BYTES / (srv->state_bytes ? srv->state_bytes : 1);
        o->max_resident = fit < 1 ? 1 : fit > RESIDENT_DEFAULT ? RESIDENT_DEFAULT : (int)fit;
    }
    if (o->max_batch > o->max_resident) o->max_batch = o->max_resident;
    int nres = o->max_resident, maxb = o->max_batch;
    if ((rc = model_slots_reserve(S->m, nres)) != 0) {
        snprintf(err, errlen, "cannot hold %d sessions of %zu state bytes each (%d); "
                 "lower --max-resident", nres, srv->state_bytes, rc);
        return rc;
    }
    S->tok = model_tokenizer(S->m);
    S->vocab = model_vocab(S->m);
    /* one row per turn, plus the extra prompt rows (round_once) */
    S->max_rows = maxb + (maxb > o->prompt_chunk ? maxb : o->prompt_chunk);
    S->max_len = model_max_tokens(S->m);
    S->free_slots = malloc((size_t)nres * sizeof *S->free_slots);
    S->scratch = malloc(2 * (size_t)S->vocab * sizeof *S->scratch);
    S->adj = malloc((size_t)S->vocab * sizeof *S->adj);
    S->b_slots = malloc((size_t)S->max_rows * sizeof *S->b_slots);
    S->b_toks = malloc((size_t)S->max_rows * sizeof *S->b_toks);
    S->b_n = malloc((size_t)maxb * sizeof *S->b_n);
    S->b_lidx = malloc((size_t)maxb * sizeof *S->b_lidx);
    S->b_lrows = malloc((size_t)maxb * sizeof *S->b_lrows);
    S->b_turns = malloc((size_t)maxb * sizeof *S->b_turns);
    S->raw = malloc(srv->state_bytes);
    if (!S->free_slots || !S->scratch || !S->adj || !S->b_slots || !S->b_toks || !S->b_n || !S->b_lidx || !S->b_lrows ||
        !S->b_turns || !S->raw || logits_reserve(S, maxb < 16 ? maxb : 16) != 0 ||
        session_table_init(&S->tab) != 0) {
        snprintf(err, errlen, "out of memory sizing the compute thread");
        return -ENOMEM;
    }
    for (int i = 0; i < nres; i++) S->free_slots[S->nfree++] = nres - 1 - i;
    return jvocab_build(S, err, errlen);
}

static void *compute_main(void *arg)
{
    scheduler *S = arg;
    int rc = setup(S, S->err, sizeof S->err);
    pthread_mutex_lock(&S->mu);
    S->ready = rc ? rc : 1;
    pthread_cond_signal(&S->cv);
    pthread_mutex_unlock(&S->mu);
    if (rc != 0) {
        model_free(S->m);
        S->m = S->srv->m = NULL;
        return NULL;
    }
    int idle = 1;
    for (;;) {
        qnode *n = queue_take_all(&S->srv->schedq, idle ? -1 : 0);
        while (n) {
            qnode *next = n->next;
            handle(S, (dmsg *)n);
            n = next;
        }
        if (S->freed_idle) {
            S->freed_idle = 0;
            serve_waiters(S);
        }
        stats_queue(&S->srv->st, (uint64_t)S->nactive, (uint64_t)S->nwaiting);
        if (S->shutting && S->nactive == 0 && S->saves_inflight == 0 &&
            S->loads_inflight == 0 && !S->wait_head)
            break;
        idle = round_once(S) == 0;
    }
    queue_push(&S->srv->persistq, &S->stop_msg->node);   /* allocated at start: it cannot fail now */
    S->stop_msg = NULL;
    model_logits_free(S->m, S->logits);
    S->logits = NULL;
    S->logits_rows = 0;
    model_free(S->m);
    S->m = S->srv->m = NULL;
    return NULL;
}

int scheduler_start(server *srv, scheduler **out, char *err, size_t errlen)
{
    scheduler *S = calloc(1, sizeof *S);
    if (!S) { snprintf(err, errlen, "out of memory"); return -ENOMEM; }
    S->srv = srv;
    S->stop_msg = dmsg_new(M_STOP, 0);
    if (!S->stop_msg) { free(S); snprintf(err, errlen, "out of memory"); return -ENOMEM; }
    pthread_mutex_init(&S->mu, NULL);
    pthread_cond_init(&S->cv, NULL);
    if (pthread_create(&S->th, NULL, compute_main, S) != 0) {
        snprintf(err, errlen, "cannot create the compute thread");
        pthread_cond_destroy(&S->cv);
        pthread_mutex_destroy(&S->mu);
        dmsg_free(S->stop_msg);
        free(S);
        return -EAGAIN;
    }
    pthread_mutex_lock(&S->mu);
    while (!S->ready) pthread_cond_wait(&S->cv, &S->mu);
    pthread_mutex_unlock(&S->mu);
    if (S->ready < 0) {
        int rc = S->ready;
        snprintf(err, errlen, "%s", S->err);
        scheduler_join(S);
        return rc;
    }
    *out = S;
    return 0;
}

void scheduler_join(scheduler *S)
{
    if (!S) return;
    if (S->th) pthread_join(S->th, NULL);
    for (int i = 0; i < S->nactive; i++) {
        free(S->active[i]->feed);
        free(S->active[i]->text);
        free(S->active[i]);
    }
    free(S->active);
    for (int i = 0; i < CCONN_BUCKETS; i++)
        for (cconn *c = S->cc[i]; c; ) {
            cconn *n = c->hnext;
            outmsg_free(c->out);
            free(c);
            c = n;
        }
    if (S->tab.buckets) session_table_free(&S->tab);
    free(S->free_slots);
    /* S->logits is the compute thread's, freed there before the model */
    free(S->scratch);
    free(S->adj);
    jsonmask_vocab_free(S->jvocab);
    free(S->jids);
    free(S->b_slots);
    free(S->b_toks);
    free(S->b_n);
    free(S->b_lidx);
    free(S->b_lrows);
    free(S->b_turns);
    free(S->raw);
    dmsg_free(S->stop_msg);   /* unsent when start-up failed */
    pthread_cond_destroy(&S->cv);
    pthread_mutex_destroy(&S->mu);
    free(S);
}
