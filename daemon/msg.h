/* daemon/msg.h — the messages the daemon's threads exchange.
 *
 *   loop  → compute : requests on sessions, connection closed/paused/resumed,
 *                     shutdown                                  (dmsg)
 *   loop  → store   : list, export, stats                       (dmsg)
 *   compute → store : load, save (a finished turn), admin ops   (dmsg)
 *   store → compute : loaded, saved                             (dmsg)
 *   any   → loop    : typed events for one connection, exit     (outmsg)
 *
 * Ownership passes with the message: the receiver frees it (dmsg_free /
 * outmsg_free), including every buffer it points to. */
#ifndef LIND_DAEMON_MSG_H
#define LIND_DAEMON_MSG_H

#include <stdint.h>
#include "daemon/event.h"
#include "daemon/queue.h"
#include "daemon/protocol.h"
#include "state/store.h"

typedef enum dmsg_kind {
    M_REQUEST = 1,  /* a client request (req), from connection `conn` */
    M_CONN_CLOSED,  /* connection `conn` is gone: cancel its turns */
    M_PAUSE,        /* connection `conn` has too much unsent output */
    M_RESUME,       /* ... and has drained */
    M_CANCEL_CONN,  /* connection `conn` stayed paused past --pause-timeout: cancel its turns */
    M_SHUTDOWN,     /* stop: cancel turns, save, then stop the store thread */
    M_LOAD,         /* compute → store: load session `name` */
    M_LOADED,       /* store → compute: rc, loaded */
    M_SAVE,         /* compute → store: commit rec, then answer the turn */
    M_SAVED,        /* store → compute: rc (0 = committed) */
    M_STOP,         /* compute → store: nothing more will come */
    M_RELEASE,      /* compute → store: session `name` left the slots: give its lease back */
    M_LEASE_LOST,   /* store → compute: the lease on `name` was lost to lease.owner */
    M_BARRIER,      /* store dispatcher → a store connection: wait for an op on all (persist.c) */
    M_LOOKUP,       /* compute → store: a turn request (req) with a request_id on a resident
                       session: find its recorded answer (replay) */
    M_LOOKED,       /* store → compute: rc, replay (NULL: none recorded) */
    M_CONN_ABANDONED, /* as M_CONN_CLOSED, for an HTTP request whose client left before it was told
                         anything: a session its turn made is not kept (nobody has its name) */
} dmsg_kind;

/* What a finished turn tells its client once its state is committed. */
typedef struct turn_result {
    int      is_append;       /* answer with `result` {session_tokens, tokens_in, fed_bytes, cancelled} */
    int      cancelled;       /* the turn ended by a cancel (its text may be cut: done.fed_bytes) */
    int      is_undo;         /* op undo: answer with `result` {session, session_tokens, undone} */
    proto_done done;          /* generate: the done event (ms_save filled by the store) */
    uint8_t  stop[STOP_MAX_LEN];
    uint64_t t_recv_ns;       /* when the request arrived, for ms.total */
} turn_result;

/* Resident facts the store thread adds to an `info` answer. */
typedef struct resident_info {
    int      resident, busy;
    uint64_t tokens;
    int64_t  created_ms;
    uint8_t *transcript; size_t transcript_len;   /* encoded, owned */
    uint64_t seed;            /* the sampler's seed, when resident */
    uint32_t chat_template;   /* its recorded chat template hash, when resident (0: none) */
} resident_info;

typedef struct dmsg {
    qnode    node;
    dmsg_kind kind;
    uint64_t conn;            /* connection id (0: none) */
    uint64_t t_recv_ns;       /* monotonic time the request arrived */
    op_request req;        /* M_REQUEST */
    void    *sess;            /* the compute thread's session, opaque elsewhere */
    char     name[STORE_NAME_MAX + 1];
    int      rc;              /* M_LOADED, M_SAVED: 0 or negative code */
    proto_code code;          /* M_SAVED failure: the error code sent */
    char     err[512];
    store_loaded loaded;      /* M_LOADED */
    /* M_LOADED: -EAGAIN, the lease's holder; M_LEASE_LOST: the new holder */
    store_lease lease;
    uint64_t version;         /* M_SAVE: the version loaded (expected); M_SAVED: the new one */
    /* M_SAVE */
    uint8_t *state; size_t state_len;
    uint8_t *transcript; size_t transcript_len;
    uint64_t tokens;
    int      creates;         /* M_SAVE / M_SAVED: this commit creates the session (version NEW) */
    turn_result result;
    resident_info rinfo;      /* M_REQUEST op info, forwarded by compute */
    /* Exactly-once turns (daemon/turnlog.h): M_LOADED / M_LOOKED, and the
     * turn request they start: the answer recorded under req.request_id
     * (owned; NULL: none); M_SAVE: the turn's answer to record under
     * req.request_id with the commit. M_LOAD carries req.request_id. */
    uint8_t *replay; size_t replay_len;
    /* M_LOADED of a session not stored whose request starts from another
     * (op_request.start_from, carried by M_LOAD's req): 1 loaded is that
     * one's state, -1 it is not stored either (rc -ENOENT), 0 neither; the
     * turn request it starts takes the same value. */
    int      start;
} dmsg;

dmsg *dmsg_new(dmsg_kind kind, uint64_t conn);
void  dmsg_free(dmsg *m);

/* Events for one connection: typed events (daemon/event.h) — a turn's
 * stream, an admin op's result or an error — which the connection encodes
 * in its own protocol. `finals` counts the final events, so the loop knows
 * requests that ended. */
typedef struct outmsg {
    qnode    node;
    uint64_t conn;
    int      finals;
    int      exit;            /* the store thread is done: the loop may end */
    evlist   ev;
} outmsg;

outmsg *outmsg_new(uint64_t conn);
void    outmsg_free(outmsg *o);
/* One-event helpers: a new outmsg holding an error / nothing yet (NULL when
 * out of memory, never a half-packed event). */
outmsg *outmsg_error(uint64_t conn, uint64_t id, proto_code code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
