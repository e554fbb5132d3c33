/* state/store.h — where sessions persist: a narrow interface with two
 * implementations behind the same calls: SQLite (state/store_sqlite.c, the
 * embedded default: a file path) and PostgreSQL (state/store_pg.c, a server
 * database several nodes share: a postgres:// or postgresql:// URI).
 *
 * The store keeps, per session name: the encoded state blob (state/format.h,
 * opaque here), the transcript tail (state/transcript.h, opaque here), the
 * token count, and created/updated times. Every function returns 0 or a
 * negative code (-ENOENT no such session, -EEXIST name taken, -EINVAL bad
 * name or argument, -EIO storage failure, -ENOSPC disk full, -EBUSY locked
 * past the timeout, -ESTALE the database file was removed or replaced under
 * the open store) and fills `err` when given one (err may be NULL).
 * store_open also refuses (-EINVAL) a file that is not a lind store and a
 * store whose schema is newer than this lind knows, and refuses a database
 * it cannot write (-EACCES, -EROFS, -ENOENT for a missing directory, or the
 * code of the failed probe write), naming the reason.
 *
 * Exclusive use: a handle opened with `exclusive` holds an advisory lock
 * (flock) on the database file for its lifetime; a second exclusive open of
 * the same file, from any process, is refused with -EBUSY and a message
 * naming the database and the pid of the holder (the holder records its pid
 * in the database header's user_version when it takes the lock). The daemon
 * opens its store exclusively; non-exclusive handles (tools, tests) are not
 * refused.
 *
 * Identity: the store remembers which file (device, inode) it opened, and
 * which write-ahead log. Before and after every write (save group, create,
 * delete, fork) it checks that the path still names that file and that the
 * -wal file is still the one SQLite writes. If either was removed or
 * replaced, the write is not acknowledged: it returns -ESTALE with a message
 * saying what happened, and so does every later write on that handle (reads
 * go on from the file still open). When only the -wal was removed, the
 * store first checkpoints the log into the database file, so the commits
 * acknowledged before the removal survive a restart.
 *
 * Durability: with STORE_SYNC_FULL a save is on disk when it returns; with
 * STORE_SYNC_NORMAL it survives a crash of the process (never half-written)
 * but the last commits may be lost to a power failure.
 *
 * Threading: one store handle is used by one thread (the daemon's store
 * thread); open a second handle for another thread.
 *
 * Several nodes on one store (docs/SCALE.md) add these codes: -ECANCELED a
 * versioned save found its session moved on (compare-and-swap lost),
 * -EAGAIN a lease held by another owner, -ENOLCK a lease the caller does
 * not hold; and -EIO includes a lost connection to a database server. */
#ifndef LIND_STATE_STORE_H
#define LIND_STATE_STORE_H

#include <stddef.h>
#include <stdint.h>

#define STORE_NAME_MAX 128

typedef struct store store;

typedef enum { STORE_SYNC_FULL = 0, STORE_SYNC_NORMAL = 1 } store_sync;

typedef struct store_options {
    store_sync sync;        /* FULL (default): on disk when save returns */
    int busy_timeout_ms;    /* default 5000 (PostgreSQL: lock_timeout) */
    /* PostgreSQL only (SQLite ignores them), applied to every transaction
     * and statement the store runs (docs/SCALE.md, "Timeouts"): */
    int statement_timeout_ms;   /* statement_timeout; default 30000, 0: none */
    int idle_tx_timeout_ms;     /* idle_in_transaction_session_timeout; default 10000, 0: none */
    /* How long an operation that finds its connection lost keeps trying to
     * reconnect (database restart, terminated backend) before it fails
     * with -EIO; default 10000, 0: one attempt. */
    int reconnect_ms;
    int exclusive;          /* 1: refuse a second exclusive opener (default 0) */
    /* Called once, on the thread that found it, when the database file or
     * its -wal was removed or replaced (see Identity above), with the
     * message every later write returns; NULL: none. For a daemon to say
     * so loudly. */
    void (*on_lost)(void *arg, const char *why);
    void *on_lost_arg;
} store_options;

/* One session to save. The store copies what it needs; the caller keeps
 * ownership of the buffers. */
typedef struct store_record {
    const char    *name;
    const uint8_t *state;      size_t state_len;
    const uint8_t *transcript; size_t transcript_len;
    uint64_t       tokens;
} store_record;

/* ---- retention (docs/STATE.md, "Retention") ----------------------------
 * Each session row records where it came from. Names beginning `resp-` or
 * `chat-` are the HTTP front door's per-answer copies (ephemeral): the store
 * records them as RESPONSE / CHAT whatever the caller says, on save, fork
 * and import alike; any other name takes the origin the creating save
 * passes (store_save_turns; SOCKET for the other calls; a fork keeps its
 * source's). Later saves keep a row's origin. */
typedef enum store_origin {
    STORE_ORIGIN_SOCKET = 0,     /* named, by a socket client (or unknown: rows from before) */
    STORE_ORIGIN_HTTP = 1,       /* named, by an HTTP request's session */
    STORE_ORIGIN_RESPONSE = 2,   /* resp-: one answer's state */
    STORE_ORIGIN_CHAT = 3,       /* chat-: a stateless chat's prefix */
} store_origin;
const char *store_origin_name(int origin);   /* "socket", "http", "response", "chat" */
/* The origin a row named `name` gets: RESPONSE / CHAT by prefix, else fallback. */
int  store_origin_for(const char *name, int fallback);
#define STORE_ORIGIN_EPHEMERAL(o) ((o) >= STORE_ORIGIN_RESPONSE)

/* A loaded session; store_loaded_free() releases its buffers. */
typedef struct store_loaded {
    uint8_t *state;      size_t state_len;
    uint8_t *transcript; size_t transcript_len;
    uint64_t tokens;
    int64_t  created_ms, updated_ms;
    uint64_t version;          /* the row's version: pass it to store_save_versioned */
} store_loaded;

typedef struct store_info {
    char     name[STORE_NAME_MAX + 1];
    uint64_t tokens;
    size_t   state_len;
    uint64_t bytes;            /* state and transcript bytes together */
    int      origin;           /* store_origin */
    int64_t  created_ms, updated_ms;
    uint64_t version;
} store_info;

store_options store_defaults(void);

/* Check a session name: UTF-8, 1..STORE_NAME_MAX bytes, no control chars. */
int  store_name_check(const char *name, char *err, size_t errlen);

/* Open (creating and migrating as needed) the store at `path`: a file path
 * (optionally "sqlite:PATH") for SQLite, or a libpq URI "postgres://..." /
 * "postgresql://..." for PostgreSQL (e.g. postgresql:///lind?host=/run/pg;
 * key=value conninfo strings are not accepted: they would be file names).
 * A PostgreSQL server that cannot be reached is -EIO with libpq's message.
 * *out is owned by the caller and released with store_close(). */
int  store_open(const char *path, const store_options *opt, store **out,
                char *err, size_t errlen);
void store_close(store *s);
/* Which store this is, for messages and logs: the SQLite file's path, or
 * the PostgreSQL URI without its password (postgresql://user@host:port/db).
 * Owned by the handle, valid until store_close. */
const char *store_where(const store *s);

/* Save n sessions in one atomic commit (all or none), unconditionally (each
 * row's version still moves on by one). */
int  store_save(store *s, const store_record *recs, int n, char *err, size_t errlen);

/* ---- versions: compare-and-swap saves -----------------------------------
 * Every session row carries a version: 1 when created (save, fork, import),
 * one more at every save. store_load returns it; a versioned save passes
 * back the version it loaded and writes only if the row is still at it. */
#define STORE_VERSION_NEW 0            /* expect: the session must not exist */
#define STORE_VERSION_ANY UINT64_MAX   /* expect: unconditional (store_save) */

typedef struct store_save_result {
    int      rc;        /* 0 saved; -ECANCELED not saved, the version moved on;
                         * -ENOLCK not saved, lease_owner does not hold the
                         * session's lease; or the group's error */
    uint64_t version;   /* rc 0: the new version; -ECANCELED / -ENOLCK: the
                         * row's current version (0 = no such session) */
    int      kept;      /* rc 0 and a keep_as (store_save_keep): 1 the copy
                         * was made, 0 that name was taken (left as it was) */
} store_save_result;

/* Save n sessions in one transaction, record i only if its row is at
 * expect[i] (STORE_VERSION_NEW / _ANY above; expect NULL: all _ANY) and,
 * when lease_owner is not NULL, only if lease_owner holds an unexpired
 * lease on that session (see leases below; the lease row is locked until
 * the commit, so a takeover waits for the save or the save sees the
 * takeover). Outcomes are per record: a record that fails its version or
 * lease check writes nothing and gets -ECANCELED or -ENOLCK in res[i], while
 * the other records of the group still commit together (one commit, all or
 * none of them). Returns 0 when every record saved; else the code of the
 * first record that did not (the others did; err names it and counts
 * them); or another negative code when the group failed as a whole
 * (nothing written; every res[i].rc is that code). res has n entries
 * (caller-owned). */
int  store_save_versioned(store *s, const store_record *recs, const uint64_t *expect, int n,
                          const char *lease_owner, store_save_result *res, char *err,
                          size_t errlen);

/* ---- leases: which node serves a session --------------------------------
 * A lease is (session name, owner, expiry) kept in the store, apart from the
 * session row (a node can lease a name before its first save; deleting a
 * session leaves its lease). Expiry is on the store's clock (PostgreSQL: the
 * server's; SQLite: this machine's), in ms since the epoch. Owners are
 * strings checked like session names (e.g. "node-a:pid"). */
typedef struct store_lease {
    char    owner[STORE_NAME_MAX + 1];
    int64_t expires_ms;
    int64_t now_ms;        /* the store's clock when this was read: how long the
                              lease has left is expires_ms - now_ms, on one clock */
} store_lease;

/* Take the lease on `name` for `owner` for ttl_ms (> 0): succeeds (0) when
 * there is no lease, when it has expired (a takeover), or when owner already
 * holds it (then it is renewed). -EAGAIN when another owner holds an
 * unexpired lease. `out` (may be NULL) gets the lease as it now stands: ours
 * on success, the other holder's name and expiry on -EAGAIN. Atomic: of two
 * owners racing for a free or expired lease exactly one gets it. */
int  store_lease_acquire(store *s, const char *name, const char *owner, int64_t ttl_ms,
                         store_lease *out, char *err, size_t errlen);
/* store_lease_acquire for n names at once: in one transaction on SQLite (one
 * commit for the lot, where one each would cost a commit apiece: a node
 * asked for many new sessions together starts them together); a backend
 * without it (PostgreSQL) takes them one at a time. Returns 0 when every
 * name was tried: rcs[i] is then name i's store_lease_acquire code (0 or
 * -EAGAIN) and out[i] (out may be NULL) its lease as it stands. A negative
 * return (-EIO, -EBUSY, ...; a bad name or owner is -EINVAL naming it) says
 * nothing about rcs, and some leases may have been taken (SQLite: none):
 * taking each again one at a time renews those. n == 0 does nothing (0). */
int  store_lease_acquire_many(store *s, const char *const *names, size_t n, const char *owner,
                              int64_t ttl_ms, int *rcs, store_lease *out, char *err, size_t errlen);
/* Extend owner's lease to now + ttl_ms. -ENOLCK when owner does not hold it
 * (released, or expired and taken over; `out` then gets the current holder,
 * owner "" when none). A lease that expired but nobody took is renewed. */
int  store_lease_renew(store *s, const char *name, const char *owner, int64_t ttl_ms,
                       store_lease *out, char *err, size_t errlen);
/* store_lease_renew for n names at once, in one statement (PostgreSQL) or
 * one transaction (SQLite): a node renews all the leases it holds in a
 * handful of commits, not one per session (docs/SCALE.md, "Leases"). Every
 * name that owner holds, expired or not if nobody took it, is extended to
 * now + ttl_ms. Returns 0 when that committed: lost[i] is then 1 for each
 * name owner does not hold (store_lease_renew's -ENOLCK: released, or
 * expired and taken over), else 0; and when `held` is not NULL, held[i] of
 * each lost name gets the lease as it stands (owner "" when nobody holds
 * it), the others are left alone. A negative return (-EIO, -EBUSY, ...; a
 * bad name or owner is -EINVAL naming it) renewed nothing and says nothing
 * about lost. n == 0 does nothing (0). Names should be distinct; the
 * caller bounds n (each is a parameter of one statement: a few thousand). */
int  store_lease_renew_many(store *s, const char *const *names, size_t n, const char *owner,
                            int64_t ttl_ms, uint8_t *lost, store_lease *held, char *err,
                            size_t errlen);
/* Give the lease up. -ENOLCK when owner does not hold it. */
int  store_lease_release(store *s, const char *name, const char *owner, char *err, size_t errlen);

/* ---- node identity -------------------------------------------------------
 * On a shared store (PostgreSQL) each live node has a row (lind_nodes):
 * its node id (the lease owner), the instance that claimed it (one process
 * run, e.g. "host:pid:start-ms") and an expiry on the server's clock that
 * the node's heartbeat moves on. A second process claiming a node id that a
 * live instance holds is refused, so two nodes never write leases under
 * one name. SQLite needs none of it (one daemon per file, the file lock):
 * the three calls succeed there without doing anything. */
typedef struct store_node {
    char    instance[STORE_NAME_MAX + 1];
    int64_t heartbeat_age_ms;   /* since the holder's last heartbeat */
    int64_t expires_in_ms;      /* until its row expires unless renewed */
} store_node;

/* Claim node id `node` for `instance` for ttl_ms: 0 when free, expired, or
 * already this instance's; -EADDRINUSE when another instance holds an
 * unexpired claim (`holder`, may be NULL, then says which and for how long). */
int  store_node_claim(store *s, const char *node, const char *instance, int64_t ttl_ms,
                      store_node *holder, char *err, size_t errlen);
/* The heartbeat: extend the claim to now + ttl_ms. -ENOLCK when the row is
 * no longer this instance's (it expired and another instance claimed it). */
int  store_node_beat(store *s, const char *node, const char *instance, int64_t ttl_ms,
                     char *err, size_t errlen);
/* Give the claim up (shutdown); -ENOLCK when not held. */
int  store_node_release(store *s, const char *node, const char *instance, char *err, size_t errlen);

/* ---- turn results: exactly-once turns (docs/SCALE.md) ---------------------
 * A save (store_save_turns) whose record comes with a request_id records its result bytes
 * (opaque here; the daemon's daemon/turnlog.h) in a table of its own
 * (lind_turns / turns), in the same transaction as the session's row, so a
 * turn is committed with its result or not at all. A session keeps the
 * results of its last STORE_TURNS_KEEP saves: each recorded save drops the
 * session's results recorded STORE_TURNS_KEEP or more versions before it.
 * Deleting a session deletes its results; fork and import copy none.
 * Request ids are 1..STORE_REQUEST_ID_MAX bytes, checked like names. */
#define STORE_REQUEST_ID_MAX 64
#define STORE_TURNS_KEEP     32

/* A turn's result to record with a record's save (store_save_turns). */
typedef struct store_turn_record {
    const char    *request_id;   /* NULL: nothing recorded */
    const uint8_t *result;  size_t result_len;
} store_turn_record;

/* store_save_versioned, and for each record i written whose turns[i] has a
 * request_id, its result recorded in the same transaction (turns NULL:
 * none); origin[i] is the origin (store_origin) a row the save creates
 * records (origin NULL: all SOCKET). */
int  store_save_turns(store *s, const store_record *recs, const store_turn_record *turns,
                      const uint64_t *expect, const int *origin, int n, const char *lease_owner,
                      store_save_result *res, char *err, size_t errlen);
/* store_save_turns, and for each record i written whose keep_as[i] is not
 * NULL, a copy of the row as written under that name, in the same
 * transaction (keep_as NULL: none). The copy is made as store_fork makes
 * one (its origin by its name, else the row's; no turn results), but only
 * where the name is free: a taken name is left as it is, and res[i].kept
 * says which. keep_as[i] must be a valid name other than the record's. */
int  store_save_keep(store *s, const store_record *recs, const store_turn_record *turns,
                     const char *const *keep_as, const uint64_t *expect, const int *origin, int n,
                     const char *lease_owner, store_save_result *res, char *err, size_t errlen);

/* Check a request id: as a name (UTF-8, no control chars), 1..64 bytes. */
int  store_request_id_check(const char *id, char *err, size_t errlen);

/* The result recorded for (name, request_id): *out malloc'd (caller frees),
 * *len its size, *version the session version its save produced; -ENOENT
 * when none is (never recorded, or pruned). */
int  store_turn_get(store *s, const char *name, const char *request_id, uint8_t **out,
                    size_t *len, uint64_t *version, char *err, size_t errlen);

/* Counters of one handle since it opened. */
typedef struct store_counters {
    uint64_t reconnects;   /* connections re-opened after being lost (PostgreSQL) */
    uint64_t retries;      /* operations run again after a lost connection (PostgreSQL) */
    /* Calls that failed, as their callers saw them (a statement retried
     * and then done is not one), by code: -EIO (the database unreachable,
     * the connection lost, an error it did not name), -EBUSY (a lock,
     * statement or busy timeout, a serialization failure, a deadlock), any
     * other. Answers are not failures: not found, name taken, version or
     * lease refused, lease held elsewhere, node id in use. */
    uint64_t err_io, err_busy, err_other;
} store_counters;
void store_get_counters(const store *s, store_counters *out);

int  store_load(store *s, const char *name, store_loaded *out, char *err, size_t errlen);
void store_loaded_free(store_loaded *l);
/* All sessions, sorted by name; *out is malloc'd (free()) with *n entries. */
int  store_list(store *s, store_info **out, size_t *n, char *err, size_t errlen);
int  store_count(store *s, size_t *n, char *err, size_t errlen);
/* How many sessions, and their state and transcript bytes together. */
int  store_usage(store *s, size_t *sessions, uint64_t *bytes, char *err, size_t errlen);

/* One round of collection: first sessions idle past their time to live
 * (ephemeral ones past response_ttl_ms, named ones past session_ttl_ms;
 * "idle" is since the last save, updated_ms), oldest first; then, while
 * the sessions' bytes exceed max_bytes, ephemeral sessions least recently
 * saved first. Named sessions are never deleted for the quota. A session
 * under an unexpired lease (one a daemon is serving) is not collected,
 * except an ephemeral one whose lease `owner` holds: the node collecting
 * serves those from memory, and a later turn on one whose row went is
 * refused as a conflict (owner NULL: every lease protects).
 * At most `batch` sessions go per call, each step one statement (one
 * commit), so a caller that must not stall (the daemon's store thread)
 * calls again while `more`. 0 in a ttl or max_bytes: that rule is off. */
typedef struct store_gc_policy {
    int64_t  response_ttl_ms, session_ttl_ms;
    uint64_t max_bytes;
    int      batch;            /* >= 1 */
    const char *owner;         /* the collecting node's lease owner, or NULL */
} store_gc_policy;
typedef struct store_gc_result {
    uint64_t expired, evicted;   /* sessions deleted: for their ttl, for the quota */
    uint64_t freed;              /* their bytes */
    size_t   sessions;           /* what the store holds after the call */
    uint64_t bytes;
    int      more;               /* a step deleted a full batch: there may be more */
} store_gc_result;
int  store_gc(store *s, const store_gc_policy *p, store_gc_result *out, char *err, size_t errlen);
/* Give back disk space the store holds beyond its rows where that is cheap:
 * SQLite checkpoints its write-ahead log into the database and truncates
 * it (freed pages stay in the database file, for later saves); PostgreSQL:
 * nothing (the server's disk is its own). For a full disk (docs/STATE.md). */
int  store_shrink(store *s, char *err, size_t errlen);

/* Delete sessions whose name starts with `prefix` ("" : any) and that were
 * last saved more than older_than_ms ago (0: any age), up to `batch` per
 * call (*deleted says how many; call again while it equals batch); leased
 * sessions are skipped. */
int  store_remove_matching(store *s, const char *prefix, int64_t older_than_ms, int batch,
                           uint64_t *deleted, uint64_t *freed, char *err, size_t errlen);
int  store_delete(store *s, const char *name, char *err, size_t errlen);
/* Copy src to the new name dst (-EEXIST if dst exists). */
int  store_fork(store *s, const char *src, const char *dst, char *err, size_t errlen);
/* Export one session as a self-contained, checksummed byte string (*out is
 * malloc'd, caller frees) / import such bytes under `name` (-EEXIST if taken,
 * -EBADMSG with a specific message if the bytes are not a valid export,
 * -EINVAL for a bad name).
 * lindctl writes and reads these bytes as files. store_import with name NULL
 * uses the name recorded in the export. */
int  store_export(store *s, const char *name, uint8_t **out, size_t *len,
                  char *err, size_t errlen);
int  store_import(store *s, const char *name, const uint8_t *data, size_t len,
                  char *err, size_t errlen);

/* The export format itself (docs/STATE.md), without a store: encode one
 * record (*out malloc'd, caller frees), or check and parse export bytes. On
 * success rec's buffers point into `data` (valid while data is) and rec->name
 * is `name`, filled with the recorded name. -EBADMSG with a specific message
 * (bad magic, newer version, truncated, checksum mismatch, bad name). */
#define STORE_EXPORT_VERSION 1
int  store_export_encode(const store_record *rec, uint8_t **out, size_t *len,
                         char *err, size_t errlen);
int  store_export_decode(const uint8_t *data, size_t len, store_record *rec,
                         char name[STORE_NAME_MAX + 1], char *err, size_t errlen);

#endif
