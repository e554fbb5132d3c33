/* daemon/session.h — the compute thread's table of resident sessions.
 *
 * A session is resident while it is in this table: loading from the store,
 * or loaded into a model slot. Its whole context is the slot's recurrent
 * state plus `meta` (state/format.h: token count, pending token, sampler,
 * the text tail the tokenizer has not decided yet) and its transcript tail. `busy` covers a
 * turn from its start until its state is committed, so a session that is
 * not busy has nothing unsaved and may be evicted by dropping it. Only the
 * compute thread touches this table. */
#ifndef LIND_DAEMON_SESSION_H
#define LIND_DAEMON_SESSION_H

#include <stddef.h>
#include <stdint.h>
#include "state/format.h"
#include "state/store.h"
#include "state/transcript.h"

struct turn;
struct dmsg;

typedef enum { SESS_LOADING = 0, SESS_WAIT_SLOT, SESS_READY } session_phase;

typedef struct session {
    char          name[STORE_NAME_MAX + 1];
    session_phase phase;
    int           slot;          /* model slot, -1 until READY */
    state_meta    meta;
    transcript    tr;
    int           busy;          /* a turn is queued, running, or being saved */
    struct turn  *turn;          /* the running turn */
    struct dmsg  *waiting;       /* the request to start once loaded */
    struct dmsg  *loaded;        /* M_LOADED kept while waiting for a slot */
    uint64_t      last_use;      /* LRU clock */
    int64_t       created_ms;
    uint64_t      version;       /* the stored version this copy is at (STORE_VERSION_NEW: none) */
    int           leased;        /* this node holds the session's lease (give it back on drop) */
    /* Undo (op `undo`): the session as committed before its running or
     * last turn — encoded state and transcript (owned), tokens; NULL: none. */
    uint8_t      *undo_state, *undo_tr;
    size_t        undo_state_len, undo_tr_len;
    uint64_t      undo_tokens;
    struct session *hnext;       /* hash chain */
    struct session *wnext;       /* slot wait list */
} session;

typedef struct session_table {
    session **buckets;
    size_t    nbuckets, count;
} session_table;

int      session_table_init(session_table *t);
void     session_table_free(session_table *t);   /* frees every session */
session *session_find(session_table *t, const char *name);
/* A new LOADING session named `name` (not yet in the table). */
session *session_new(const char *name, size_t transcript_limit);
void     session_insert(session_table *t, session *s);
void     session_remove(session_table *t, session *s);  /* does not free */
void     session_free(session *s);
/* Visit every session (the callback must not change the table). */
void     session_foreach(session_table *t, void (*fn)(session *, void *), void *arg);

#endif
