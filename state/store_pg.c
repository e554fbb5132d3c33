/* state/store_pg.c — the PostgreSQL implementation of the store (libpq).
 *
 * Chosen by store_open for a postgres:// or postgresql:// URI, so several
 * nodes can share one database. Tables lind_schema (the schema version,
 * also what marks a database as lind's), lind_sessions (one row per
 * session: bytea blobs, token count, times, version), lind_leases and
 * lind_nodes (one row per live node, kept by its heartbeat). The schema is
 * created and migrated at open under a transaction-scoped advisory lock, so
 * nodes starting together migrate once. Blobs travel as binary parameters
 * and results. A grouped save is one transaction (BEGIN ... COMMIT): one
 * commit, one WAL flush with synchronous_commit on.
 *
 * Poolers: no statement outlives its transaction (unnamed statements, no
 * session-level SET), so the store works through PgBouncer in transaction
 * pooling mode. The settings (synchronous_commit, lock_timeout,
 * statement_timeout, idle_in_transaction_session_timeout) are set LOCAL in
 * every transaction: a save's BEGIN carries them in the same round trip,
 * and a single statement is sent in a pipeline behind a set_config() of
 * them (one round trip, one implicit transaction). TCP keepalives are libpq
 * connection keywords (the URI's own values win).
 *
 * Durability: STORE_SYNC_FULL is synchronous_commit = on (the commit is
 * flushed to the server's WAL when save returns); NORMAL is off (a server
 * crash may lose the last commits, never half of one). busy_timeout_ms
 * becomes lock_timeout. Lease and node expiry come from the server's clock,
 * so nodes with different clocks agree on it.
 *
 * Lost connections (a database restart, a terminated backend, no answer
 * within statement_timeout + 5 s): before each operation a connection the
 * server closed while idle is noticed (its socket is readable) and opened
 * again, waiting up to reconnect_ms for the server, so the statement is
 * sent on a live connection. A connection lost during an operation is
 * re-opened and the operation run again when that is safe: reads and lease
 * or node statements (idempotent), and a save, create, delete or fork (each
 * a transaction) whose COMMIT was not sent (the server rolled it back). One
 * whose COMMIT was sent asks the database what became of its transaction
 * (txid_status of the id it took at BEGIN; after a server restart, which
 * reuses ids, a save's rows decide): committed is success, aborted is run
 * again, unknown is -EIO saying so. */
#include "state/store_impl.h"

#include <errno.h>
#include <libpq-fe.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include "recurrent/errmsg.h"
#include "kernels/clock.h"

/* Advisory lock key held while checking and migrating the schema ("LIND"). */
#define PG_MIGRATE_LOCK 0x4c494e44

/* How often an operation is run again after its connection was lost. */
#define PG_ATTEMPTS 4

/* migrations[i] takes the schema from version i to i + 1. */
static const char *const migrations[] = {
    /* 0 -> 1: sessions with versions, leases. Blobs are stored out of line
     * uncompressed (STORAGE EXTERNAL): a model state does not compress and
     * the attempt costs time on every save. Names sort bytewise (COLLATE
     * "C"), as SQLite's do. */
    "CREATE TABLE lind_sessions ("
    "  name       text COLLATE \"C\" PRIMARY KEY,"
    "  state      bytea NOT NULL,"
    "  transcript bytea NOT NULL,"
    "  tokens     bigint NOT NULL,"
    "  created_ms bigint NOT NULL,"
    "  updated_ms bigint NOT NULL,"
    "  version    bigint NOT NULL DEFAULT 1"
    ");"
    "ALTER TABLE lind_sessions ALTER COLUMN state SET STORAGE EXTERNAL;"
    "ALTER TABLE lind_sessions ALTER COLUMN transcript SET STORAGE EXTERNAL;"
    "CREATE TABLE lind_leases ("
    "  name       text COLLATE \"C\" PRIMARY KEY,"
    "  owner      text NOT NULL,"
    "  expires_ms bigint NOT NULL"
    ");",
    /* 1 -> 2: live nodes (store_node_claim). */
    "CREATE TABLE lind_nodes ("
    "  node         text COLLATE \"C\" PRIMARY KEY,"
    "  instance     text NOT NULL,"
    "  started_ms   bigint NOT NULL,"
    "  heartbeat_ms bigint NOT NULL,"
    "  expires_ms   bigint NOT NULL"
    ");",
    /* 2 -> 3: retention (store.h): where each session came from, and an
     * index for collecting the least recently saved first. Rows from
     * before are ephemeral by their resp-/chat- names, else socket. */
    "ALTER TABLE lind_sessions ADD COLUMN origin integer NOT NULL DEFAULT 0;"
    "UPDATE lind_sessions SET origin = CASE left(name, 5) WHEN 'resp-' THEN 2"
    " WHEN 'chat-' THEN 3 ELSE 0 END;"
    "CREATE INDEX lind_sessions_updated ON lind_sessions(updated_ms);",
};
#define SCHEMA_VERSION ((int)(sizeof migrations / sizeof migrations[0]))

/* Turn results (store.h, "turn results"): a table of their own, created in
 * the schema check's transaction (under its advisory lock) when missing; no
 * schema version of its own, so a lind without it just ignores the table. */
static const char turns_schema[] =
    "CREATE TABLE IF NOT EXISTS lind_turns ("
    "  name       text COLLATE \"C\" NOT NULL,"
    "  request_id text COLLATE \"C\" NOT NULL,"
    "  version    bigint NOT NULL,"
    "  result     bytea NOT NULL,"
    "  PRIMARY KEY(name, request_id)"
    ");"
    "CREATE INDEX IF NOT EXISTS lind_turns_by_version ON lind_turns(name, version);";
/* $1 name, $2 request id, $3 the session version the save produced, $4 the
 * result; the prune drops results STORE_TURNS_KEEP or more versions older. */
#define TURN_PUT_SQL "INSERT INTO lind_turns(name, request_id, version, result)" \
                     " VALUES($1, $2, $3, $4) ON CONFLICT(name, request_id) DO UPDATE" \
                     " SET version = EXCLUDED.version, result = EXCLUDED.result"
#define TURN_PRUNE_SQL "DELETE FROM lind_turns WHERE name = $1 AND version <= $2::bigint"
#define TURN_GET_SQL "SELECT result, version FROM lind_turns WHERE name = $1 AND request_id = $2"
/* A save's copy (store_save_keep), inside its transaction: $1
 * the saved row, $2 the copy's name, $3 now (ms); a fork where the name is
 * free. */
#define KEEP_SQL "INSERT INTO lind_sessions(name, state, transcript, tokens, created_ms, updated_ms, origin)" \
                 " SELECT $2, state, transcript, tokens, $3, $3, CASE left($2, 5)" \
                 " WHEN 'resp-' THEN 2 WHEN 'chat-' THEN 3 ELSE origin END FROM lind_sessions" \
                 " WHERE name = $1 ON CONFLICT(name) DO NOTHING"

/* The server's clock in ms since the epoch. */
#define PG_NOW "(extract(epoch from clock_timestamp()) * 1000)::bigint"

enum {
    Q_UPSERT, Q_INSERT_NEW, Q_CAS, Q_VERSION, Q_INSERT, Q_LOAD, Q_LIST, Q_COUNT, Q_DELETE,
    Q_FORK, Q_LEASE_TAKE, Q_LEASE_GET, Q_LEASE_RENEW, Q_LEASE_RENEW_MANY, Q_LEASE_RELEASE,
    Q_LEASE_HELD,
    Q_NODE_CLAIM, Q_NODE_GET, Q_NODE_BEAT, Q_NODE_RELEASE, Q_XACT_STATUS, Q_ROW_CHECK,
    Q_USAGE, Q_EXPIRE, Q_EVICT, Q_REMOVE, Q_N
};

#define SESSION_COLS "name, state, transcript, tokens, created_ms, updated_ms, origin"
/* A new row's origin (store.h): by the name's prefix, else $6. */
#define ORIGIN "CASE left($1, 5) WHEN 'resp-' THEN 2 WHEN 'chat-' THEN 3 ELSE $6::integer END"
#define BYTES "(octet_length(state) + octet_length(transcript))"
#define NOT_LEASED " AND name NOT IN (SELECT name FROM lind_leases WHERE expires_ms > " PG_NOW ")"
/* Collection: a lease keeps a row unless the row is ephemeral and the
 * lease is the collecting owner's (store.h). */
#define NOT_KEPT(owner) " AND NOT EXISTS (SELECT 1 FROM lind_leases l WHERE l.name = s.name" \
    " AND l.expires_ms > " PG_NOW " AND (s.origin < 2 OR l.owner IS DISTINCT FROM " owner "::text))"

/* Parameters: $1 name, $2 state, $3 transcript, $4 tokens, $5 now (ms,
 * this machine's clock, as SQLite's times), $6 expected version (the
 * swap) or the origin (the inserts); leases $3
 * the ttl in ms; nodes $1 node, $2 instance, $3 ttl. A versioned save
 * returns a row only when it wrote. */
static const char *const queries[Q_N] = {
    [Q_UPSERT]     = "INSERT INTO lind_sessions(" SESSION_COLS ") VALUES($1, $2, $3, $4, $5, $5, " ORIGIN ")"
                     " ON CONFLICT(name) DO UPDATE SET state = EXCLUDED.state,"
                     " transcript = EXCLUDED.transcript, tokens = EXCLUDED.tokens,"
                     " updated_ms = EXCLUDED.updated_ms, version = lind_sessions.version + 1"
                     " RETURNING version",
    [Q_INSERT_NEW] = "INSERT INTO lind_sessions(" SESSION_COLS ") VALUES($1, $2, $3, $4, $5, $5, " ORIGIN ")"
                     " ON CONFLICT(name) DO NOTHING RETURNING version",
    [Q_CAS]        = "UPDATE lind_sessions SET state = $2, transcript = $3, tokens = $4,"
                     " updated_ms = $5, version = version + 1"
                     " WHERE name = $1 AND version = $6 RETURNING version",
    [Q_VERSION]    = "SELECT version FROM lind_sessions WHERE name = $1",
    [Q_INSERT]     = "INSERT INTO lind_sessions(" SESSION_COLS ") VALUES($1, $2, $3, $4, $5, $5, " ORIGIN ")",
    [Q_LOAD]       = "SELECT state, transcript, tokens, created_ms, updated_ms, version"
                     " FROM lind_sessions WHERE name = $1",
    [Q_LIST]       = "SELECT name, tokens, octet_length(state), created_ms, updated_ms, version, "
                     BYTES ", origin"
                     " FROM lind_sessions ORDER BY name",
    [Q_COUNT]      = "SELECT count(*) FROM lind_sessions",
    /* a session's turn results go with it (store.h) */
    [Q_DELETE]     = "WITH t AS (DELETE FROM lind_turns WHERE name = $1)"
                     " DELETE FROM lind_sessions WHERE name = $1",
    [Q_FORK]       = "INSERT INTO lind_sessions(" SESSION_COLS ")"
                     " SELECT $2, state, transcript, tokens, $3, $3, CASE left($2, 5)"
                     " WHEN 'resp-' THEN 2 WHEN 'chat-' THEN 3 ELSE origin END FROM lind_sessions"
                     " WHERE name = $1",
    [Q_LEASE_TAKE] = "INSERT INTO lind_leases(name, owner, expires_ms)"
                     " VALUES($1, $2, " PG_NOW " + $3::bigint)"
                     " ON CONFLICT(name) DO UPDATE SET owner = EXCLUDED.owner,"
                     " expires_ms = EXCLUDED.expires_ms"
                     " WHERE lind_leases.owner = EXCLUDED.owner"
                     " OR lind_leases.expires_ms <= " PG_NOW
                     " RETURNING owner, expires_ms, " PG_NOW,
    [Q_LEASE_GET]  = "SELECT owner, expires_ms, " PG_NOW " FROM lind_leases WHERE name = $1",
    [Q_LEASE_RENEW] = "UPDATE lind_leases SET expires_ms = " PG_NOW " + $3::bigint"
                     " WHERE name = $1 AND owner = $2 RETURNING owner, expires_ms, " PG_NOW,
    /* $1 the names (a text[]), $2 owner, $3 ttl: renews the owner's rows
     * among them and returns only the names it did not renew (their index
     * from 0, and the lease as the statement's snapshot saw it), so the
     * usual answer is no rows. Names compare as the column does (C). */
    [Q_LEASE_RENEW_MANY] = "WITH n AS (SELECT a.name COLLATE \"C\" AS name, a.i"
                     " FROM unnest($1::text[]) WITH ORDINALITY AS a(name, i)),"
                     " u AS (UPDATE lind_leases l SET expires_ms = " PG_NOW " + $3::bigint FROM n"
                     " WHERE l.name = n.name AND l.owner = $2 RETURNING l.name)"
                     " SELECT n.i - 1, coalesce(l.owner, ''), coalesce(l.expires_ms, 0), " PG_NOW
                     " FROM n LEFT JOIN lind_leases l ON l.name = n.name"
                     " WHERE NOT EXISTS (SELECT 1 FROM u WHERE u.name = n.name)",
    [Q_LEASE_RELEASE] = "DELETE FROM lind_leases WHERE name = $1 AND owner = $2",
    /* A save under a lease: FOR SHARE holds the lease row until the commit,
     * so a takeover (which updates the row) waits for the save, and a save
     * that waited on a takeover re-reads the row and finds the new owner. */
    [Q_LEASE_HELD] = "SELECT 1 FROM lind_leases WHERE name = $1 AND owner = $2"
                     " AND expires_ms > " PG_NOW " FOR SHARE",
    [Q_NODE_CLAIM] = "INSERT INTO lind_nodes(node, instance, started_ms, heartbeat_ms, expires_ms)"
                     " VALUES($1, $2, " PG_NOW ", " PG_NOW ", " PG_NOW " + $3::bigint)"
                     " ON CONFLICT(node) DO UPDATE SET instance = EXCLUDED.instance,"
                     " started_ms = CASE WHEN lind_nodes.instance = EXCLUDED.instance"
                     " THEN lind_nodes.started_ms ELSE EXCLUDED.started_ms END,"
                     " heartbeat_ms = EXCLUDED.heartbeat_ms, expires_ms = EXCLUDED.expires_ms"
                     " WHERE lind_nodes.instance = EXCLUDED.instance"
                     " OR lind_nodes.expires_ms <= " PG_NOW
                     " RETURNING instance",
    [Q_NODE_GET]   = "SELECT instance, " PG_NOW " - heartbeat_ms, expires_ms - " PG_NOW
                     " FROM lind_nodes WHERE node = $1",
    [Q_NODE_BEAT]  = "UPDATE lind_nodes SET heartbeat_ms = " PG_NOW ","
                     " expires_ms = " PG_NOW " + $3::bigint"
                     " WHERE node = $1 AND instance = $2 RETURNING instance",
    [Q_NODE_RELEASE] = "DELETE FROM lind_nodes WHERE node = $1 AND instance = $2",
    /* What became of a transaction whose COMMIT got no answer. */
    /* What became of a transaction whose COMMIT got no answer: an id not
     * yet assigned (at or past the snapshot's xmax: the transaction never
     * reached the WAL before a crash) is 'future'; and the server's start
     * time, to tell whether it restarted since (ids are then reused). */
    [Q_XACT_STATUS] = "SELECT CASE WHEN $1::bigint >= txid_snapshot_xmax(txid_current_snapshot())"
                      " THEN 'future' ELSE txid_status($1::bigint) END,"
                      " pg_postmaster_start_time()::text",
    [Q_ROW_CHECK]  = "SELECT version, updated_ms FROM lind_sessions WHERE name = $1",
    /* Retention: each collection is one statement in one transaction; a
     * collected session's recorded turn answers go with it (as Q_DELETE). */
    [Q_USAGE]      = "SELECT count(*), coalesce(sum(" BYTES "), 0) FROM lind_sessions",
    /* $1 response ttl, $2 session ttl (0: off), $3 now (this machine's), $4 limit, $5 owner */
    [Q_EXPIRE]     = "WITH d AS (DELETE FROM lind_sessions WHERE name IN (SELECT name FROM lind_sessions s WHERE"
                     " ((origin >= 2 AND $1::bigint > 0 AND updated_ms < $3::bigint - $1::bigint)"
                     " OR (origin < 2 AND $2::bigint > 0 AND updated_ms < $3::bigint - $2::bigint))"
                     NOT_KEPT("$5") " ORDER BY updated_ms LIMIT $4::integer FOR UPDATE SKIP LOCKED)"
                     " RETURNING name, " BYTES " AS b),"
                     " t AS (DELETE FROM lind_turns WHERE name IN (SELECT name FROM d)) SELECT b FROM d",
    /* $1 excess bytes, $2 limit, $3 owner */
    [Q_EVICT]      = "WITH d AS (DELETE FROM lind_sessions WHERE name IN (SELECT name FROM"
                     " (SELECT name, updated_ms, sum(" BYTES ") OVER (ORDER BY updated_ms, name"
                     " ROWS UNBOUNDED PRECEDING) - " BYTES " AS before FROM lind_sessions s"
                     " WHERE origin >= 2" NOT_KEPT("$3") ") w"
                     " WHERE before < $1::bigint ORDER BY updated_ms, name LIMIT $2::integer)"
                     " RETURNING name, " BYTES " AS b),"
                     " t AS (DELETE FROM lind_turns WHERE name IN (SELECT name FROM d)) SELECT b FROM d",
    /* $1 prefix, $2 cutoff (updated before it; 0: any), $3 limit */
    [Q_REMOVE]     = "WITH d AS (DELETE FROM lind_sessions WHERE name IN (SELECT name FROM lind_sessions WHERE"
                     " left(name, length($1::text)) = $1::text"
                     " AND ($2::bigint = 0 OR updated_ms < $2::bigint)" NOT_LEASED
                     " ORDER BY updated_ms LIMIT $3::integer FOR UPDATE SKIP LOCKED)"
                     " RETURNING name, " BYTES " AS b),"
                     " t AS (DELETE FROM lind_turns WHERE name IN (SELECT name FROM d)) SELECT b FROM d",
};

/* Each statement's name in messages. */
static const char *const qnames[Q_N] = {
    [Q_UPSERT] = "upsert", [Q_INSERT_NEW] = "insert-new", [Q_CAS] = "compare-and-swap",
    [Q_VERSION] = "version", [Q_INSERT] = "insert", [Q_LOAD] = "load", [Q_LIST] = "list",
    [Q_COUNT] = "count", [Q_DELETE] = "delete", [Q_FORK] = "fork", [Q_LEASE_TAKE] = "lease-take",
    [Q_LEASE_GET] = "lease-get", [Q_LEASE_RENEW] = "lease-renew",
    [Q_LEASE_RENEW_MANY] = "lease-renew-many",
    [Q_LEASE_RELEASE] = "lease-release", [Q_LEASE_HELD] = "lease-held",
    [Q_NODE_CLAIM] = "node-claim", [Q_NODE_GET] = "node-get", [Q_NODE_BEAT] = "node-heartbeat",
    [Q_NODE_RELEASE] = "node-release", [Q_XACT_STATUS] = "txid_status", [Q_ROW_CHECK] = "row-check",
    [Q_USAGE] = "usage", [Q_EXPIRE] = "expire", [Q_EVICT] = "evict", [Q_REMOVE] = "remove",
};

/* The settings of a single statement, set for its implicit transaction. */
#define SETTINGS_SQL "SELECT set_config('synchronous_commit', $1, true)," \
                     " set_config('lock_timeout', $2, true)," \
                     " set_config('statement_timeout', $3, true)"

typedef struct pg_store {
    store base;              /* first: a store * is a pg_store * */
    PGconn *conn;
    char *uri;
    store_options opt;
    char desc[256];          /* user@host:port/db for messages (no password) */
    char set_vals[3][16];    /* SETTINGS_SQL's parameters */
    char begin_sql[512];     /* BEGIN, the same settings LOCAL, the transaction's id */
    char note[160];          /* why the connection was lost, for the next message */
    store_counters cnt;
} pg_store;

/* libpq's messages span lines ("...\n\tThis probably means ...\n"); the
 * store's are one line (they end up in logs and protocol errors): line
 * breaks and the tabs after them become one space, the last one goes. */
static const char *trim(const char *msg, char *buf, size_t len)
{
    if (!msg || !*msg)
        msg = "unknown error";
    size_t n = 0;
    for (const char *p = msg; *p && n + 1 < len; p++) {
        if (*p == '\n' || *p == '\t' || *p == '\r') {
            if (n && buf[n - 1] != ' ')
                buf[n++] = ' ';
        } else {
            buf[n++] = *p;
        }
    }
    while (n && buf[n - 1] == ' ')
        n--;
    buf[n] = 0;
    return buf;
}

static int lost(const pg_store *s)
{
    return PQstatus(s->conn) != CONNECTION_OK;
}

/* SQLSTATE -> the store's codes. A broken connection is -EIO. */
static int map_result(pg_store *s, const PGresult *r)
{
    if (lost(s))
        return -EIO;
    const char *st = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
    if (!st)
        return -EIO;
    if (!strcmp(st, "23505")) return -EEXIST;       /* unique_violation */
    if (!strcmp(st, "53100")) return -ENOSPC;       /* disk_full */
    if (!strcmp(st, "53200")) return -ENOMEM;       /* out_of_memory */
    if (!strcmp(st, "55P03") || !strcmp(st, "40001") || !strcmp(st, "40P01") ||
        !strcmp(st, "57014"))
        return -EBUSY;   /* lock timeout, serialization, deadlock, statement timeout */
    return -EIO;
}

/* Report a failed call with the server's (or libpq's) own message. r may be
 * NULL; it is not freed here. */
static int pg_fail(pg_store *s, const PGresult *r, char *err, size_t errlen, const char *what)
{
    char msg[512];
    const char *m = r && *PQresultErrorMessage(r) ? PQresultErrorMessage(r) : PQerrorMessage(s->conn);
    int code = map_result(s, r);
    return errmsg_set(code, err, errlen, "store %s: %s: %s%s%s%s%s", s->desc, what,
                      trim(m, msg, sizeof msg), lost(s) ? " (connection lost" : "",
                      lost(s) && s->note[0] ? "; " : "", lost(s) ? s->note : "",
                      lost(s) ? ")" : "");
}

/* A connection given up (no answer in time, a pipeline that could not be
 * sent): shut its socket, so libpq sees it closed (a late answer must never
 * be taken for a later statement's) and the next operation opens a new
 * one. `why` goes into the next message. */
static void abandon(pg_store *s, const char *why)
{
    snprintf(s->note, sizeof s->note, "%s", why);
    int fd = PQsocket(s->conn);
    if (fd >= 0)
        shutdown(fd, SHUT_RDWR);
    PQconsumeInput(s->conn);
}

/* The longest the store waits for an answer before giving the connection
 * up: the server's statement_timeout ends a statement first. */
static int64_t answer_limit(const pg_store *s)
{
    return s->opt.statement_timeout_ms > 0 ? (int64_t)s->opt.statement_timeout_ms + 5000
                                           : (int64_t)24 * 3600 * 1000;
}

/* The connection's next result, waiting until `deadline` (mono_ms). */
static PGresult *next_result(pg_store *s, int64_t start, int64_t deadline)
{
    while (PQisBusy(s->conn) && !lost(s)) {
        int fd = PQsocket(s->conn);
        int64_t left = deadline - clock_mono_ms();
        if (fd < 0)
            break;
        if (left <= 0) {
            char why[160];
            snprintf(why, sizeof why, "no answer in %lld ms (a busy server, or a pooler with no"
                     " free server connection?), connection dropped",
                     (long long)(clock_mono_ms() - start));
            abandon(s, why);
            break;
        }
        struct pollfd p = { .fd = fd, .events = POLLIN };
        int n = poll(&p, 1, left > 1000 ? 1000 : (int)left);
        if (n < 0 && errno != EINTR) {
            abandon(s, "poll failed, connection dropped");
            break;
        }
        if (n > 0 && !PQconsumeInput(s->conn))
            break;
    }
    return PQgetResult(s->conn);
}

/* A plain command string (one or several statements, no parameters): the
 * first failed result, else the last one; NULL when it could not be sent. */
static PGresult *run_simple(pg_store *s, const char *sql)
{
    if (!PQsendQuery(s->conn, sql))
        return NULL;
    int64_t start = clock_mono_ms(), deadline = start + answer_limit(s);
    PGresult *keep = NULL, *r;
    while ((r = next_result(s, start, deadline))) {
        ExecStatusType k = keep ? PQresultStatus(keep) : PGRES_COMMAND_OK;
        if (k == PGRES_COMMAND_OK || k == PGRES_TUPLES_OK) {   /* the first error stays */
            PQclear(keep);
            keep = r;
        } else {
            PQclear(r);
        }
    }
    return keep;
}

/* One statement with parameters, unnamed (nothing outlives it). */
static PGresult *run_params(pg_store *s, const char *sql, int n, const char *const *vals,
                            const int *lens, const int *fmts, int binary)
{
    if (!PQsendQueryParams(s->conn, sql, n, NULL, vals, lens, fmts, binary))
        return NULL;
    int64_t start = clock_mono_ms(), deadline = start + answer_limit(s);
    PGresult *r = next_result(s, start, deadline), *more;
    while ((more = next_result(s, start, deadline)))
        PQclear(more);
    return r;
}

/* One statement on its own (autocommit), behind the settings: a pipeline
 * of set_config() and the statement with one sync, so both run in one
 * implicit transaction and one round trip. The statement's result, or the
 * settings' when they failed; NULL when nothing could be sent. */
static PGresult *run_single(pg_store *s, const char *sql, int n, const char *const *vals,
                            const int *lens, const int *fmts, int binary)
{
    const char *set[3] = { s->set_vals[0], s->set_vals[1], s->set_vals[2] };
    if (!PQenterPipelineMode(s->conn))
        return NULL;
    if (!PQsendQueryParams(s->conn, SETTINGS_SQL, 3, NULL, set, NULL, NULL, 0) ||
        !PQsendQueryParams(s->conn, sql, n, NULL, vals, lens, fmts, binary) ||
        !PQpipelineSync(s->conn)) {
        abandon(s, "sending the statement failed");
        PQexitPipelineMode(s->conn);
        return NULL;
    }
    int64_t start = clock_mono_ms(), deadline = start + answer_limit(s);
    PGresult *res[2] = { NULL, NULL };
    int seen = 0, synced = 0;
    /* settings, NULL, statement, NULL, sync: bounded, whatever arrives */
    for (int i = 0; i < 8 && !synced; i++) {
        PGresult *r = next_result(s, start, deadline);
        if (!r) {
            if (lost(s))
                break;
            continue;
        }
        if (PQresultStatus(r) == PGRES_PIPELINE_SYNC) {
            synced = 1;
            PQclear(r);
        } else if (seen < 2) {
            res[seen++] = r;
        } else {
            PQclear(r);
        }
    }
    if (!synced && !lost(s))
        abandon(s, "the pipeline did not end, connection dropped");
    PQexitPipelineMode(s->conn);
    if (res[0] && PQresultStatus(res[0]) != PGRES_TUPLES_OK) {
        PQclear(res[1]);
        return res[0];
    }
    PQclear(res[0]);
    return res[1];
}

/* Server notices (e.g. "terminating connection due to immediate shutdown")
 * would go to stderr by default; a library must not write there. The
 * failure they announce reaches the caller as an error anyway. */
static void quiet_notices(void *arg, const char *msg)
{
    (void)arg;
    (void)msg;
}

/* A new connection. A server that does not answer must not hang the caller
 * forever; keepalives find a peer that vanished from the network. The
 * URI's own values, if any, come later and win. */
static PGconn *connect_now(const pg_store *s)
{
    const char *keys[] = { "connect_timeout", "fallback_application_name", "client_encoding",
                           "keepalives", "keepalives_idle", "keepalives_interval",
                           "keepalives_count", "tcp_user_timeout", "dbname", NULL };
    const char *vals[] = { "10", "lind", "UTF8", "1", "10", "5", "3", "30000", s->uri, NULL };
    PGconn *c = PQconnectdbParams(keys, vals, 1);
    if (c)
        PQsetNoticeProcessor(c, quiet_notices, NULL);
    return c;
}

/* Open the connection again, trying for up to reconnect_ms. */
static int reconnect(pg_store *s, char *err, size_t errlen)
{
    int64_t start = clock_mono_ms(), deadline = start + s->opt.reconnect_ms;
    int delay = 50;
    for (int attempt = 1;; attempt++) {
        PQfinish(s->conn);
        s->conn = connect_now(s);
        if (!s->conn)
            return errmsg_set(-ENOMEM, err, errlen, "store %s: out of memory", s->desc);
        if (!lost(s)) {
            s->cnt.reconnects++;
            s->note[0] = 0;
            return 0;
        }
        if (clock_mono_ms() + delay > deadline) {
            char msg[512];
            return errmsg_set(-EIO, err, errlen,
                              "store %s: connection lost; %d attempt%s to reconnect in %lld ms"
                              " failed (the store's reconnect time is %d ms), the last: %s",
                              s->desc, attempt, attempt > 1 ? "s" : "",
                              (long long)(clock_mono_ms() - start), s->opt.reconnect_ms,
                              trim(PQerrorMessage(s->conn), msg, sizeof msg));
        }
        usleep((useconds_t)delay * 1000);
        delay = delay * 2 > 1000 ? 1000 : delay * 2;
    }
}

/* Before each operation: a connection the server closed while it was idle
 * (its socket reads as ready: the termination notice, end of file) is
 * noticed here, before anything is sent on it, and opened again. */
static int ready(pg_store *s, char *err, size_t errlen)
{
    /* The termination notice and the end of file may be read apart: read
     * on while the socket stays ready (bounded). */
    for (int i = 0; i < 8 && !lost(s); i++) {
        int fd = PQsocket(s->conn);
        struct pollfd p = { .fd = fd, .events = POLLIN };
        if (fd < 0 || poll(&p, 1, 0) <= 0)
            break;
        PQconsumeInput(s->conn);
        PGnotify *nt;
        while ((nt = PQnotifies(s->conn)))
            PQfreemem(nt);
    }
    return lost(s) ? reconnect(s, err, errlen) : 0;
}

/* Run a plain command inside the current transaction; 0 or the mapped code. */
static int exec_cmd(pg_store *s, const char *sql, char *err, size_t errlen, const char *what)
{
    PGresult *r = run_simple(s, sql);
    ExecStatusType t = PQresultStatus(r);
    int code = r && (t == PGRES_COMMAND_OK || t == PGRES_TUPLES_OK) ? 0
               : pg_fail(s, r, err, errlen, what);
    PQclear(r);
    return code;
}

/* Statement q inside the current transaction. fmts/lens may be NULL (all
 * text); results in binary when `binary`. The caller PQclear()s it. */
static PGresult *exec_q(pg_store *s, int q, int n, const char *const *vals, const int *lens,
                        const int *fmts, int binary)
{
    return run_params(s, queries[q], n, vals, lens, fmts, binary);
}

/* Statement q on its own, on a live connection; run again on a new one when
 * the connection was lost and q is `idempotent`. NULL with *code set when
 * no connection could be had. */
static PGresult *auto_q(pg_store *s, int q, int n, const char *const *vals, const int *lens,
                        const int *fmts, int binary, int idempotent, int *code, char *err,
                        size_t errlen)
{
    *code = 0;
    for (int attempt = 0;; attempt++) {
        if ((*code = ready(s, err, errlen)) < 0)
            return NULL;
        PGresult *r = run_single(s, queries[q], n, vals, lens, fmts, binary);
        if (!lost(s) || !idempotent || attempt + 1 >= PG_ATTEMPTS)
            return r;
        PQclear(r);
        s->cnt.retries++;
    }
}

/* What a failed statement says, naming it. */
static int q_fail(pg_store *s, int q, const PGresult *r, char *err, size_t errlen, const char *what)
{
    char w[200];
    snprintf(w, sizeof w, "%s (statement %s)", what, qnames[q]);
    return pg_fail(s, r, err, errlen, w);
}

static uint64_t be64(const char *p)
{
    const unsigned char *u = (const unsigned char *)p;
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | u[i];
    return v;
}

static int64_t text_i64(const PGresult *r, int row, int col)
{
    return strtoll(PQgetvalue(r, row, col), NULL, 10);
}

/* ---- schema ------------------------------------------------------------- */

static int migrate(pg_store *s, char *err, size_t errlen)
{
    int code = exec_cmd(s, "BEGIN", err, errlen, "cannot begin the schema check");
    if (code < 0)
        return code;
    char sql[200];
    snprintf(sql, sizeof sql, "SELECT pg_advisory_xact_lock(%d)", PG_MIGRATE_LOCK);
    PGresult *r = NULL;
    if ((code = exec_cmd(s, sql, err, errlen, "cannot lock to check the schema")) < 0)
        goto out;
    r = run_simple(s, "SELECT to_regclass('lind_schema') IS NOT NULL,"
                      " to_regclass('lind_sessions') IS NOT NULL");
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        code = pg_fail(s, r, err, errlen, "cannot read the schema");
        goto out;
    }
    int has_version = PQgetvalue(r, 0, 0)[0] == 't', has_sessions = PQgetvalue(r, 0, 1)[0] == 't';
    PQclear(r);
    r = NULL;
    if (!has_version && has_sessions) {
        code = errmsg_set(-EINVAL, err, errlen,
                          "store %s: has a lind_sessions table but no lind_schema: not a lind store",
                          s->desc);
        goto out;
    }
    if (!has_version &&
        (code = exec_cmd(s, "CREATE TABLE lind_schema (version integer NOT NULL);"
                            "INSERT INTO lind_schema VALUES (0)", err, errlen,
                         "cannot create the schema")) < 0)
        goto out;
    r = run_simple(s, "SELECT version FROM lind_schema");
    if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1) {
        code = PQresultStatus(r) != PGRES_TUPLES_OK
               ? pg_fail(s, r, err, errlen, "cannot read the schema version")
               : errmsg_set(-EINVAL, err, errlen, "store %s: lind_schema has %d rows, not 1",
                            s->desc, PQntuples(r));
        goto out;
    }
    int64_t version = text_i64(r, 0, 0);
    PQclear(r);
    r = NULL;
    if (version > SCHEMA_VERSION || version < 0) {
        code = errmsg_set(-EINVAL, err, errlen,
                          "store %s has schema version %lld; this lind knows versions up to %d"
                          " (written by a newer lind?)", s->desc, (long long)version, SCHEMA_VERSION);
        goto out;
    }
    for (int v = (int)version; v < SCHEMA_VERSION && code == 0; v++) {
        snprintf(sql, sizeof sql, "UPDATE lind_schema SET version = %d", v + 1);
        if ((code = exec_cmd(s, migrations[v], err, errlen, "schema migration failed")) == 0)
            code = exec_cmd(s, sql, err, errlen, "schema migration failed");
    }
    if (code == 0) {   /* only when missing: a role without CREATE can still use a made schema */
        r = run_simple(s, "SELECT to_regclass('lind_turns') IS NULL");
        if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1)
            code = pg_fail(s, r, err, errlen, "cannot read the schema (lind_turns)");
        else if (PQgetvalue(r, 0, 0)[0] == 't')
            code = exec_cmd(s, turns_schema, err, errlen, "creating the turn results' table failed");
        PQclear(r);
        r = NULL;
    }
    if (code == 0)
        code = exec_cmd(s, "COMMIT", err, errlen, "schema migration commit failed");
out:
    PQclear(r);
    if (code < 0 && !lost(s))
        PQclear(run_simple(s, "ROLLBACK"));
    return code;
}

/* ---- operations ---------------------------------------------------------- */

static const char *pg_where(const store *base)
{
    return ((const pg_store *)base)->desc;
}

static void pg_close(store *base)
{
    pg_store *s = (pg_store *)base;
    PQfinish(s->conn);
    free(s->uri);
    free(s);
}

static void pg_counters(const store *base, store_counters *out)
{
    const pg_store *s = (const pg_store *)base;
    out->reconnects = s->cnt.reconnects;
    out->retries = s->cnt.retries;
}

/* The six session parameters of record r ($6 = expect when non-NULL). */
typedef struct rec_params {
    const char *vals[6];
    int lens[6], fmts[6];
    char tokens[24], now[24], expect[24];
} rec_params;
/* All six are bound always: $6 is the expected version (expect given:
 * the swap) or the new row's origin (the inserts). */

static void rec_bind(rec_params *p, const store_record *r, int origin, int64_t now,
                     const uint64_t *expect)
{
    static const char empty[1] = "";
    memset(p->lens, 0, sizeof p->lens);
    memset(p->fmts, 0, sizeof p->fmts);
    snprintf(p->tokens, sizeof p->tokens, "%llu", (unsigned long long)r->tokens);
    snprintf(p->now, sizeof p->now, "%lld", (long long)now);
    p->vals[0] = r->name;
    /* Binary bytea; a zero-length blob must still be a non-NULL value. */
    p->vals[1] = r->state_len ? (const char *)r->state : empty;
    p->lens[1] = (int)r->state_len;
    p->fmts[1] = 1;
    p->vals[2] = r->transcript_len ? (const char *)r->transcript : empty;
    p->lens[2] = (int)r->transcript_len;
    p->fmts[2] = 1;
    p->vals[3] = p->tokens;
    p->vals[4] = p->now;
    if (expect)
        snprintf(p->expect, sizeof p->expect, "%llu", (unsigned long long)*expect);
    else
        snprintf(p->expect, sizeof p->expect, "%d", origin);
    p->vals[5] = p->expect;
}

static int check_sizes(const store_record *r, char *err, size_t errlen)
{
    /* libpq lengths are int; PostgreSQL's own field limit is 1 GB. */
    if (r->state_len >= (1u << 30) || r->transcript_len >= (1u << 30))
        return errmsg_set(-EINVAL, err, errlen,
                          "session '%s': a blob of 1 GiB or more does not fit a PostgreSQL field",
                          r->name);
    return 0;
}

static int copy_value(const PGresult *r, int col, uint8_t **out, size_t *len);

/* Record a saved turn's result inside the save's transaction, and drop the
 * session's results STORE_TURNS_KEEP or more versions old. */
static int turn_put(pg_store *s, const char *name, const store_turn_record *r, uint64_t version,
                    char *err, size_t errlen)
{
    static const char empty[1] = "";
    char ver[24], old[24];
    snprintf(ver, sizeof ver, "%llu", (unsigned long long)version);
    snprintf(old, sizeof old, "%lld", (long long)version - STORE_TURNS_KEEP);
    const char *vals[4] = { name, r->request_id, ver, r->result_len ? (const char *)r->result : empty };
    int lens[4] = { 0, 0, 0, (int)r->result_len }, fmts[4] = { 0, 0, 0, 1 };
    PGresult *q = run_params(s, TURN_PUT_SQL, 4, vals, lens, fmts, 0);
    int code = PQresultStatus(q) == PGRES_COMMAND_OK ? 0
               : pg_fail(s, q, err, errlen, "recording the turn's result (statement turn-put)");
    PQclear(q);
    if (code < 0)
        return code == -EEXIST ? -EIO : code;
    const char *pv[2] = { name, old };
    q = run_params(s, TURN_PRUNE_SQL, 2, pv, NULL, NULL, 0);
    code = PQresultStatus(q) == PGRES_COMMAND_OK ? 0
           : pg_fail(s, q, err, errlen, "dropping old turn results (statement turn-prune)");
    PQclear(q);
    return code;
}

static long affected(const PGresult *r);

/* A saved row's copy under keep_as, inside the save's transaction
 * (store_save_keep); res->kept says whether it was made. */
static int keep_put(pg_store *s, const char *name, const char *keep_as, const char *now,
                    store_save_result *res, char *err, size_t errlen)
{
    const char *vals[3] = { name, keep_as, now };
    PGresult *q = run_params(s, KEEP_SQL, 3, vals, NULL, NULL, 0);
    int code = PQresultStatus(q) == PGRES_COMMAND_OK ? 0
               : pg_fail(s, q, err, errlen, "copying the saved session (statement keep)");
    if (code == 0)
        res->kept = affected(q) > 0;
    PQclear(q);
    return code == -EEXIST ? -EIO : code;
}

static int pg_turn_get(store *base, const char *name, const char *request_id, uint8_t **out,
                       size_t *len, uint64_t *version, char *err, size_t errlen)
{
    pg_store *s = (pg_store *)base;
    const char *vals[2] = { name, request_id };
    PGresult *r = NULL;
    for (int attempt = 0;; attempt++) {   /* a read: run again on a new connection */
        int code = ready(s, err, errlen);
        if (code < 0)
            return code;
        r = run_single(s, TURN_GET_SQL, 2, vals, NULL, NULL, 1);
        if (!lost(s) || attempt + 1 >= PG_ATTEMPTS)
            break;
        PQclear(r);
        s->cnt.retries++;
    }
    int code = 0;
    if (PQresultStatus(r) != PGRES_TUPLES_OK)
        code = pg_fail(s, r, err, errlen, "reading a turn's result failed (statement turn-get)");
    else if (PQntuples(r) == 0)
        code = errmsg_set(-ENOENT, err, errlen, "no result recorded for request id '%s' of '%s'",
                          request_id, name);
    else if (PQgetlength(r, 0, 1) != 8)
        code = errmsg_set(-EIO, err, errlen, "store %s: reading a turn's result: unexpected column size",
                          s->desc);
    else if (copy_value(r, 0, out, len) < 0)
        code = errmsg_set(-ENOMEM, err, errlen, "loading a turn's result: out of memory");
    else
        *version = be64(PQgetvalue(r, 0, 1));
    PQclear(r);
    return code;
}

/* One attempt at a save group: BEGIN (with the settings and the
 * transaction's id into xid), the records, COMMIT. *commit_sent: the
 * COMMIT went out (its outcome is then unknown if the connection broke). */
static int save_tx(pg_store *s, const store_record *recs, const store_turn_record *turns,
                   const char *const *keep_as,
                   const uint64_t *expect, const int *origin, int n,
                   const char *owner, store_save_result *res, int64_t now, char *xid,
                   size_t xidlen, char *started, size_t startedlen, int *commit_sent, char *err,
                   size_t errlen)
{
    *commit_sent = 0;
    xid[0] = 0;
    PGresult *r = run_simple(s, s->begin_sql);
    if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1) {
        int code = pg_fail(s, r, err, errlen, "cannot begin the save (BEGIN, SET LOCAL"
                           " synchronous_commit, lock_timeout, statement_timeout,"
                           " idle_in_transaction_session_timeout, txid_current())");
        PQclear(r);
        if (!lost(s))
            PQclear(run_simple(s, "ROLLBACK"));
        return code;
    }
    snprintf(xid, xidlen, "%s", PQgetvalue(r, 0, 0));
    snprintf(started, startedlen, "%s", PQgetvalue(r, 0, 1));
    PQclear(r);
    int code = 0;
    for (int i = 0; i < n && code == 0; i++) {
        int q = expect[i] == STORE_VERSION_ANY ? Q_UPSERT
                : expect[i] == STORE_VERSION_NEW ? Q_INSERT_NEW : Q_CAS;
        rec_params p;
        rec_bind(&p, &recs[i], origin[i], now, q == Q_CAS ? &expect[i] : NULL);
        int refused = -ECANCELED;   /* when the write returns no row */
        r = NULL;
        if (owner) {
            const char *lv[2] = { recs[i].name, owner };
            r = exec_q(s, Q_LEASE_HELD, 2, lv, NULL, NULL, 0);
            if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 0) {
                refused = -ENOLCK;   /* r: an empty result, as a refused write's */
            } else if (PQresultStatus(r) == PGRES_TUPLES_OK) {
                PQclear(r);
                r = NULL;
            } else {
                q = Q_LEASE_HELD;    /* the failed statement, for the message */
            }
        }
        if (!r)
            r = exec_q(s, q, 6, p.vals, p.lens, p.fmts, 0);
        if (PQresultStatus(r) != PGRES_TUPLES_OK) {
            char what[STORE_NAME_MAX + 64];
            snprintf(what, sizeof what, "saving '%s' (statement %s)", recs[i].name, qnames[q]);
            code = pg_fail(s, r, err, errlen, what);
            code = code == -EEXIST ? -EIO : code;
        } else if (PQntuples(r) == 1) {
            res[i] = (store_save_result){ .version = (uint64_t)text_i64(r, 0, 0) };
            if (turns && turns[i].request_id)
                code = turn_put(s, recs[i].name, &turns[i], res[i].version, err, errlen);
            if (code == 0 && keep_as && keep_as[i])
                code = keep_put(s, recs[i].name, keep_as[i], p.now, &res[i], err, errlen);
        } else {
            /* The swap did not happen: report where the row is instead. */
            PQclear(r);
            r = exec_q(s, Q_VERSION, 1, p.vals, NULL, NULL, 0);
            if (PQresultStatus(r) != PGRES_TUPLES_OK)
                code = pg_fail(s, r, err, errlen, "reading a session's version (statement version)");
            else
                res[i] = (store_save_result){
                    .rc = refused, .version = PQntuples(r) ? (uint64_t)text_i64(r, 0, 0) : 0 };
        }
        PQclear(r);
    }
    if (code == 0) {
        *commit_sent = 1;
        code = exec_cmd(s, "COMMIT", err, errlen, "commit failed");
    } else if (!lost(s)) {
        PQclear(run_simple(s, "ROLLBACK"));
    }
    return code;
}

/* After a restart transaction ids are reused, so a lost commit is judged by
 * its rows: each record it wrote is at the version it gave it, with its
 * update time. 1 all are, 0 none is, or -EIO. */
static int rows_outcome(pg_store *s, const store_record *recs, int n, const store_save_result *res,
                        int64_t now, char *err, size_t errlen)
{
    int ours = 0, others = 0;
    for (int i = 0; i < n; i++) {
        if (res[i].rc != 0)
            continue;
        const char *vals[1] = { recs[i].name };
        int code;
        PGresult *r = auto_q(s, Q_ROW_CHECK, 1, vals, NULL, NULL, 0, 1, &code, err, errlen);
        if (code < 0)
            return code;
        if (PQresultStatus(r) != PGRES_TUPLES_OK) {
            code = q_fail(s, Q_ROW_CHECK, r, err, errlen, "the commit got no answer; checking its rows");
            PQclear(r);
            return code;
        }
        if (PQntuples(r) == 1 && (uint64_t)text_i64(r, 0, 0) == res[i].version &&
            text_i64(r, 0, 1) == now)
            ours++;
        else
            others++;
        PQclear(r);
    }
    if (ours && !others)
        return 1;
    if (!ours)
        return 0;
    return errmsg_set(-EIO, err, errlen, "store %s: the connection was lost during COMMIT and the"
                      " server restarted; %d of the group's rows are as the commit left them and %d"
                      " are not: the save may or may not have committed", s->desc, ours, others);
}

/* What became of transaction xid (begun on a server started at `started`),
 * whose COMMIT got no answer: 1 committed, 0 not (run it again), or a
 * negative code (unknown). */
static int xact_outcome(pg_store *s, const char *xid, const char *started, const store_record *recs,
                        int n, const store_save_result *res, int64_t now, char *err, size_t errlen)
{
    const char *vals[1] = { xid };
    char last[64] = "no answer";
    for (int attempt = 0; attempt < 50; attempt++) {
        int code = ready(s, err, errlen);
        if (code < 0)
            return code;
        PGresult *r = run_params(s, queries[Q_XACT_STATUS], 1, vals, NULL, NULL, 0);
        if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1) {
            char v[64];
            snprintf(v, sizeof v, "%s", PQgetisnull(r, 0, 0) ? "unknown (too old)" : PQgetvalue(r, 0, 0));
            int restarted = strcmp(PQgetvalue(r, 0, 1), started) != 0;
            snprintf(last, sizeof last, "%s", v);
            PQclear(r);
            if (!strcmp(v, "future"))
                return 0;   /* never reached the WAL */
            if (restarted && recs)
                return rows_outcome(s, recs, n, res, now, err, errlen);
            if (restarted)
                return errmsg_set(-EIO, err, errlen, "store %s: the connection was lost during"
                                  " COMMIT and the server restarted (transaction ids are reused):"
                                  " the statement may or may not have committed", s->desc);
            if (!strcmp(v, "committed"))
                return 1;
            if (!strcmp(v, "aborted"))
                return 0;
            if (strcmp(v, "in progress"))
                break;
            usleep(100000);   /* its backend is still ending it */
            continue;
        }
        if (!lost(s)) {
            code = pg_fail(s, r, err, errlen, "the commit got no answer; asking what became of it"
                           " (statement txid_status)");
            PQclear(r);
            return code;
        }
        PQclear(r);
    }
    return errmsg_set(-EIO, err, errlen, "store %s: the connection was lost during COMMIT and the"
                      " transaction's outcome is %s: the save may or may not have committed",
                      s->desc, last);
}

static int pg_save(store *base, const store_record *recs, const uint64_t *expect,
                   const int *origin, int n,
                   const char *owner, store_save_result *res, char *err, size_t errlen,
                   const store_turn_record *turns, const char *const *keep_as)
{
    pg_store *s = (pg_store *)base;
    int64_t now = clock_wall_ms();
    int code = 0;
    for (int i = 0; i < n && code == 0; i++)
        code = check_sizes(&recs[i], err, errlen);
    /* A save lost before its COMMIT went out was rolled back by the server:
     * run it again on a new connection. One lost during the COMMIT is
     * looked up by its transaction id. */
    for (int attempt = 0; code == 0; attempt++) {
        char xid[32], started[64];
        int sent = 0;
        if ((code = ready(s, err, errlen)) < 0)
            break;
        code = save_tx(s, recs, turns, keep_as, expect, origin, n, owner, res, now, xid, sizeof xid, started,
                       sizeof started, &sent, err, errlen);
        if (code == 0 || !lost(s) || attempt + 1 >= PG_ATTEMPTS)
            break;
        if (sent && xid[0]) {
            int st = xact_outcome(s, xid, started, recs, n, res, now, err, errlen);
            if (st == 1) {
                code = 0;   /* committed: res as the transaction computed it */
                break;
            }
            if (st < 0) {
                code = st;
                break;
            }
        }
        s->cnt.retries++;
        code = 0;
    }
    if (code < 0) {
        for (int i = 0; i < n; i++)
            res[i] = (store_save_result){ .rc = code };
        return code;
    }
    /* Records refused by their checks are in res; store.c reports them. */
    return 0;
}

/* Statement q alone in a transaction of its own (BEGIN with the settings,
 * the statement, COMMIT), for the writes that are not idempotent (create,
 * delete, fork): a connection lost before the COMMIT runs it again on a new
 * one; one lost during the COMMIT asks the database what became of it. The
 * statement's result, committed or failed (the caller checks and
 * PQclear()s it), or NULL with *code set. */
static PGresult *tx_q(pg_store *s, int q, int n, const char *const *vals, const int *lens,
                      const int *fmts, int *code, char *err, size_t errlen)
{
    for (int attempt = 0;; attempt++) {
        int last = attempt + 1 >= PG_ATTEMPTS;
        char xid[32], started[64];
        if ((*code = ready(s, err, errlen)) < 0)
            return NULL;
        PGresult *b = run_simple(s, s->begin_sql);
        if (PQresultStatus(b) != PGRES_TUPLES_OK || PQntuples(b) != 1) {
            *code = q_fail(s, q, b, err, errlen, "cannot begin (BEGIN, SET LOCAL of the settings,"
                           " txid_current())");
            PQclear(b);
            if (!lost(s))
                PQclear(run_simple(s, "ROLLBACK"));
            else if (!last) {
                s->cnt.retries++;
                continue;
            }
            return NULL;
        }
        snprintf(xid, sizeof xid, "%s", PQgetvalue(b, 0, 0));
        snprintf(started, sizeof started, "%s", PQgetvalue(b, 0, 1));
        PQclear(b);
        PGresult *r = run_params(s, queries[q], n, vals, lens, fmts, 0);
        ExecStatusType t = PQresultStatus(r);
        if (t != PGRES_COMMAND_OK && t != PGRES_TUPLES_OK) {
            if (lost(s) && !last) {   /* rolled back by the server */
                PQclear(r);
                s->cnt.retries++;
                continue;
            }
            if (!lost(s))
                PQclear(run_simple(s, "ROLLBACK"));
            return r;
        }
        int c = exec_cmd(s, "COMMIT", err, errlen, "commit failed");
        if (c == 0)
            return r;
        if (!lost(s)) {
            PQclear(r);
            *code = c;
            return NULL;
        }
        int st = xact_outcome(s, xid, started, NULL, 0, NULL, 0, err, errlen);
        if (st == 1)
            return r;   /* committed: its result stands */
        PQclear(r);
        if (st < 0 || last) {
            *code = st < 0 ? st : c;
            return NULL;
        }
        s->cnt.retries++;
    }
}

static int pg_create(store *base, const store_record *rec, char *err, size_t errlen)
{
    pg_store *s = (pg_store *)base;
    int code = check_sizes(rec, err, errlen);
    if (code < 0)
        return code;
    rec_params p;
    rec_bind(&p, rec, STORE_ORIGIN_SOCKET, clock_wall_ms(), NULL);
    PGresult *r = tx_q(s, Q_INSERT, 6, p.vals, p.lens, p.fmts, &code, err, errlen);
    if (code < 0)
        return code;
    if (PQresultStatus(r) != PGRES_COMMAND_OK) {
        code = q_fail(s, Q_INSERT, r, err, errlen, "insert failed");
        if (code == -EEXIST)
            errmsg_set(-EEXIST, err, errlen, "a session named '%s' already exists", rec->name);
    }
    PQclear(r);
    return code;
}

static int copy_value(const PGresult *r, int col, uint8_t **out, size_t *len)
{
    size_t n = (size_t)PQgetlength(r, 0, col);
    /* One spare byte so an empty blob is still a non-NULL buffer. */
    *out = malloc(n + 1);
    if (!*out)
        return -ENOMEM;
    if (n)
        memcpy(*out, PQgetvalue(r, 0, col), n);
    *len = n;
    return 0;
}

static int pg_load(store *base, const char *name, store_loaded *out, char *err, size_t errlen)
{
    pg_store *s = (pg_store *)base;
    int code;
    const char *vals[1] = { name };
    PGresult *r = auto_q(s, Q_LOAD, 1, vals, NULL, NULL, 1, 1, &code, err, errlen);
    if (code < 0)
        return code;
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        code = q_fail(s, Q_LOAD, r, err, errlen, "load failed");
    } else if (PQntuples(r) == 0) {
        code = errmsg_set(-ENOENT, err, errlen, "no session named '%s'", name);
    } else if (PQgetlength(r, 0, 2) != 8 || PQgetlength(r, 0, 3) != 8 ||
               PQgetlength(r, 0, 4) != 8 || PQgetlength(r, 0, 5) != 8) {
        code = errmsg_set(-EIO, err, errlen, "store %s: loading '%s': unexpected column sizes",
                          s->desc, name);
    } else if (copy_value(r, 0, &out->state, &out->state_len) < 0 ||
               copy_value(r, 1, &out->transcript, &out->transcript_len) < 0) {
        store_loaded_free(out);
        code = errmsg_set(-ENOMEM, err, errlen, "loading '%s': out of memory", name);
    } else {
        out->tokens = be64(PQgetvalue(r, 0, 2));
        out->created_ms = (int64_t)be64(PQgetvalue(r, 0, 3));
        out->updated_ms = (int64_t)be64(PQgetvalue(r, 0, 4));
        out->version = be64(PQgetvalue(r, 0, 5));
    }
    PQclear(r);
    return code;
}

static int pg_list(store *base, store_info **out, size_t *n, char *err, size_t errlen)
{
    pg_store *s = (pg_store *)base;
    int code;
    PGresult *r = auto_q(s, Q_LIST, 0, NULL, NULL, NULL, 0, 1, &code, err, errlen);
    if (code < 0)
        return code;
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        code = q_fail(s, Q_LIST, r, err, errlen, "list failed");
        PQclear(r);
        return code;
    }
    size_t cnt = (size_t)PQntuples(r);
    store_info *v = calloc(cnt ? cnt : 1, sizeof *v);
    if (!v) {
        PQclear(r);
        return errmsg_set(-ENOMEM, err, errlen, "listing sessions: out of memory");
    }
    for (size_t i = 0; i < cnt; i++) {
        snprintf(v[i].name, sizeof v[i].name, "%s", PQgetvalue(r, (int)i, 0));
        v[i].tokens = (uint64_t)text_i64(r, (int)i, 1);
        v[i].state_len = (size_t)text_i64(r, (int)i, 2);
        v[i].created_ms = text_i64(r, (int)i, 3);
        v[i].updated_ms = text_i64(r, (int)i, 4);
        v[i].version = (uint64_t)text_i64(r, (int)i, 5);
        v[i].bytes = (uint64_t)text_i64(r, (int)i, 6);
        v[i].origin = (int)text_i64(r, (int)i, 7);
    }
    PQclear(r);
    if (cnt == 0) {
        free(v);
        v = NULL;
    }
    *out = v;
    *n = cnt;
    return 0;
}

static int pg_count(store *base, size_t *n, char *err, size_t errlen)
{
    pg_store *s = (pg_store *)base;
    int code;
    PGresult *r = auto_q(s, Q_COUNT, 0, NULL, NULL, NULL, 0, 1, &code, err, errlen);
    if (code < 0)
        return code;
    if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1)
        code = q_fail(s, Q_COUNT, r, err, errlen, "count failed");
    else
        *n = (size_t)text_i64(r, 0, 0);
    PQclear(r);
    return code;
}

/* Rows a command touched. */
static long affected(const PGresult *r)
{
    return strtol(PQcmdTuples((PGresult *)r), NULL, 10);
}

static int pg_delete(store *base, const char *name, char *err, size_t errlen)
{
    pg_store *s = (pg_store *)base;
    int code;
    const char *vals[1] = { name };
    PGresult *r = tx_q(s, Q_DELETE, 1, vals, NULL, NULL, &code, err, errlen);
    if (code < 0)
        return code;
    if (PQresultStatus(r) != PGRES_COMMAND_OK)
        code = q_fail(s, Q_DELETE, r, err, errlen, "delete failed");
    else if (affected(r) == 0)
        code = errmsg_set(-ENOENT, err, errlen, "no session named '%s'", name);
    PQclear(r);
    return code;
}

/* ---- retention ---------------------------------------------------------- */

static int pg_usage(store *base, size_t *n, uint64_t *bytes, char *err, size_t errlen)
{
    pg_store *s = (pg_store *)base;
    int code;
    PGresult *r = auto_q(s, Q_USAGE, 0, NULL, NULL, NULL, 0, 1, &code, err, errlen);
    if (code < 0)
        return code;
    if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1) {
        code = q_fail(s, Q_USAGE, r, err, errlen, "usage failed");
    } else {
        *n = (size_t)text_i64(r, 0, 0);
        *bytes = (uint64_t)text_i64(r, 0, 1);
    }
    PQclear(r);
    return code;
}

/* Run one collecting DELETE ... RETURNING bytes in a transaction, counting. */
static int collect(pg_store *s, int q, int nv, const char *const *vals, uint64_t *n,
                   uint64_t *freed, char *err, size_t errlen, const char *what)
{
    int code;
    PGresult *r = tx_q(s, q, nv, vals, NULL, NULL, &code, err, errlen);
    if (code < 0)
        return code;
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        code = q_fail(s, q, r, err, errlen, what);
    } else {
        for (int i = 0; i < PQntuples(r); i++)
            *freed += (uint64_t)text_i64(r, i, 0);
        *n += (uint64_t)PQntuples(r);
    }
    PQclear(r);
    return code;
}

static int pg_expire(store *base, int64_t resp_ttl, int64_t sess_ttl, int limit,
                     const char *owner, uint64_t *n, uint64_t *freed, char *err, size_t errlen)
{
    char a[24], b[24], now[24], lim[16];
    snprintf(a, sizeof a, "%lld", (long long)resp_ttl);
    snprintf(b, sizeof b, "%lld", (long long)sess_ttl);
    snprintf(now, sizeof now, "%lld", (long long)clock_wall_ms());
    snprintf(lim, sizeof lim, "%d", limit);
    const char *vals[5] = { a, b, now, lim, owner };
    return collect((pg_store *)base, Q_EXPIRE, 5, vals, n, freed, err, errlen,
                   "collecting expired sessions failed");
}

static int pg_evict(store *base, uint64_t excess, int limit, const char *owner, uint64_t *n,
                    uint64_t *freed, char *err, size_t errlen)
{
    char ex[24], lim[16];
    snprintf(ex, sizeof ex, "%llu", (unsigned long long)(excess > INT64_MAX ? INT64_MAX : excess));
    snprintf(lim, sizeof lim, "%d", limit);
    const char *vals[3] = { ex, lim, owner };
    return collect((pg_store *)base, Q_EVICT, 3, vals, n, freed, err, errlen,
                   "collecting sessions over the quota failed");
}

static int pg_remove(store *base, const char *prefix, int64_t older_ms, int limit, uint64_t *n,
                     uint64_t *freed, char *err, size_t errlen)
{
    char cut[24], lim[16];
    snprintf(cut, sizeof cut, "%lld", (long long)(older_ms ? clock_wall_ms() - older_ms : 0));
    snprintf(lim, sizeof lim, "%d", limit);
    const char *vals[3] = { prefix, cut, lim };
    return collect((pg_store *)base, Q_REMOVE, 3, vals, n, freed, err, errlen,
                   "removing sessions failed");
}

static int pg_fork(store *base, const char *src, const char *dst, char *err, size_t errlen)
{
    pg_store *s = (pg_store *)base;
    int code;
    char now[24];
    snprintf(now, sizeof now, "%lld", (long long)clock_wall_ms());
    const char *vals[3] = { src, dst, now };
    PGresult *r = tx_q(s, Q_FORK, 3, vals, NULL, NULL, &code, err, errlen);
    if (code < 0)
        return code;
    if (PQresultStatus(r) != PGRES_COMMAND_OK) {
        code = q_fail(s, Q_FORK, r, err, errlen, "fork failed");
        if (code == -EEXIST)
            errmsg_set(-EEXIST, err, errlen, "a session named '%s' already exists", dst);
    } else if (affected(r) == 0) {
        code = errmsg_set(-ENOENT, err, errlen, "no session named '%s'", src);
    }
    PQclear(r);
    return code;
}

/* ---- leases ------------------------------------------------------------- */

/* Run lease statement q with (name, owner, ttl); a returned row is the
 * lease as it now stands (*got). */
static int lease_q(pg_store *s, int q, const char *name, const char *owner, int64_t ttl,
                   store_lease *out, int *got, char *err, size_t errlen)
{
    char t[24];
    snprintf(t, sizeof t, "%lld", (long long)ttl);
    const char *vals[3] = { name, owner, t };
    int code;
    *got = 0;
    PGresult *r = auto_q(s, q, 3, vals, NULL, NULL, 0, 1, &code, err, errlen);
    if (code < 0)
        return code;
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        code = q_fail(s, q, r, err, errlen, "lease failed");
    } else if (PQntuples(r) == 1) {
        *got = 1;
        snprintf(out->owner, sizeof out->owner, "%s", PQgetvalue(r, 0, 0));
        out->expires_ms = text_i64(r, 0, 1);
        out->now_ms = text_i64(r, 0, 2);
    }
    PQclear(r);
    return code;
}

/* The lease on name as it stands (owner "" when none); *server_now gets
 * the server's clock. */
static int lease_get(pg_store *s, const char *name, store_lease *out, int64_t *server_now,
                     char *err, size_t errlen)
{
    const char *vals[1] = { name };
    int code;
    memset(out, 0, sizeof *out);
    *server_now = 0;
    PGresult *r = auto_q(s, Q_LEASE_GET, 1, vals, NULL, NULL, 0, 1, &code, err, errlen);
    if (code < 0)
        return code;
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        code = q_fail(s, Q_LEASE_GET, r, err, errlen, "reading a lease failed");
    } else if (PQntuples(r) == 1) {
        snprintf(out->owner, sizeof out->owner, "%s", PQgetvalue(r, 0, 0));
        out->expires_ms = text_i64(r, 0, 1);
        *server_now = out->now_ms = text_i64(r, 0, 2);
    }
    PQclear(r);
    return code;
}

static int pg_lease_acquire(store *base, const char *name, const char *owner, int64_t ttl_ms,
                            store_lease *out, char *err, size_t errlen)
{
    pg_store *s = (pg_store *)base;
    int code = 0;
    /* Taking and reading the holder are two statements: if the holder let go
     * in between, try again. */
    for (int attempt = 0; code == 0 && attempt < 3; attempt++) {
        int got = 0;
        int64_t now = 0;
        if ((code = lease_q(s, Q_LEASE_TAKE, name, owner, ttl_ms, out, &got, err, errlen)) < 0 ||
            got)
            return code;
        if ((code = lease_get(s, name, out, &now, err, errlen)) < 0)
            return code;
        if (out->owner[0])
            return errmsg_set(-EAGAIN, err, errlen,
                              "session '%s' is leased by '%s' for %lld ms more", name, out->owner,
                              (long long)(out->expires_ms - now));
    }
    return code < 0 ? code : errmsg_set(-EBUSY, err, errlen, "lease of '%s' keeps changing hands",
                                        name);
}

static int pg_lease_renew(store *base, const char *name, const char *owner, int64_t ttl_ms,
                          store_lease *out, char *err, size_t errlen)
{
    pg_store *s = (pg_store *)base;
    int got = 0;
    int64_t now;
    int code = lease_q(s, Q_LEASE_RENEW, name, owner, ttl_ms, out, &got, err, errlen);
    if (code < 0 || got)
        return code;
    if ((code = lease_get(s, name, out, &now, err, errlen)) < 0)
        return code;
    return errmsg_set(-ENOLCK, err, errlen, "lease of '%s' is not held by '%s'%s%s%s", name, owner,
                      out->owner[0] ? " (held by '" : " (nobody holds it)", out->owner,
                      out->owner[0] ? "')" : "");
}

/* names as a text[] literal: every element quoted, '"' and backslash escaped.
 * NULL when out of memory. */
static char *text_array(const char *const *names, size_t n)
{
    size_t len = 3;
    for (size_t i = 0; i < n; i++)
        len += 2 * strlen(names[i]) + 3;
    char *a = malloc(len), *p = a;
    if (!a)
        return NULL;
    *p++ = '{';
    for (size_t i = 0; i < n; i++) {
        if (i)
            *p++ = ',';
        *p++ = '"';
        for (const char *c = names[i]; *c; c++) {
            if (*c == '"' || *c == '\\')
                *p++ = '\\';
            *p++ = *c;
        }
        *p++ = '"';
    }
    *p++ = '}';
    *p = 0;
    return a;
}

/* One statement for every name (idempotent: run again after a lost
 * connection like the single renewal). */
static int pg_lease_renew_many(store *base, const char *const *names, size_t n, const char *owner,
                               int64_t ttl_ms, uint8_t *lost, store_lease *held, char *err,
                               size_t errlen)
{
    pg_store *s = (pg_store *)base;
    char t[24];
    snprintf(t, sizeof t, "%lld", (long long)ttl_ms);
    char *arr = text_array(names, n);
    if (!arr)
        return errmsg_set(-ENOMEM, err, errlen, "store %s: renewing %zu leases: out of memory",
                          s->desc, n);
    const char *vals[3] = { arr, owner, t };
    int code;
    PGresult *r = auto_q(s, Q_LEASE_RENEW_MANY, 3, vals, NULL, NULL, 0, 1, &code, err, errlen);
    free(arr);
    if (code < 0)
        return code;
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        char what[64];
        snprintf(what, sizeof what, "renewing %zu leases failed", n);
        code = q_fail(s, Q_LEASE_RENEW_MANY, r, err, errlen, what);
        PQclear(r);
        return code;
    }
    for (int row = 0; row < PQntuples(r); row++) {
        long long i = text_i64(r, row, 0);
        if (i < 0 || (size_t)i >= n)
            continue;
        lost[i] = 1;
        if (!held)
            continue;
        snprintf(held[i].owner, sizeof held[i].owner, "%s", PQgetvalue(r, row, 1));
        held[i].expires_ms = text_i64(r, row, 2);
        held[i].now_ms = text_i64(r, row, 3);
    }
    PQclear(r);
    /* The snapshot may still show owner's row when a takeover committed
     * while the update waited on it: read the holder again. The renewal has
     * committed whatever this read does, so its failure is not returned
     * (the holder then stays as the snapshot saw it). */
    for (size_t i = 0; held && i < n; i++) {
        int64_t now;
        char ignored[256];
        store_lease again;
        if (lost[i] && !strcmp(held[i].owner, owner) &&
            lease_get(s, names[i], &again, &now, ignored, sizeof ignored) == 0)
            held[i] = again;
    }
    return 0;
}

static int pg_lease_release(store *base, const char *name, const char *owner, char *err,
                            size_t errlen)
{
    pg_store *s = (pg_store *)base;
    int code;
    const char *vals[2] = { name, owner };
    PGresult *r = auto_q(s, Q_LEASE_RELEASE, 2, vals, NULL, NULL, 0, 1, &code, err, errlen);
    if (code < 0)
        return code;
    if (PQresultStatus(r) != PGRES_COMMAND_OK)
        code = q_fail(s, Q_LEASE_RELEASE, r, err, errlen, "lease release failed");
    else if (affected(r) == 0)
        code = errmsg_set(-ENOLCK, err, errlen, "lease of '%s' is not held by '%s'", name, owner);
    PQclear(r);
    return code;
}

/* ---- node identity ------------------------------------------------------ */

static int pg_node_claim(store *base, const char *node, const char *instance, int64_t ttl_ms,
                         store_node *holder, char *err, size_t errlen)
{
    pg_store *s = (pg_store *)base;
    char t[24];
    snprintf(t, sizeof t, "%lld", (long long)ttl_ms);
    const char *vals[3] = { node, instance, t };
    int code;
    /* Claiming and reading the holder are two statements: if the holder let
     * go in between, try again. */
    for (int attempt = 0; attempt < 3; attempt++) {
        PGresult *r = auto_q(s, Q_NODE_CLAIM, 3, vals, NULL, NULL, 0, 1, &code, err, errlen);
        if (code < 0)
            return code;
        if (PQresultStatus(r) != PGRES_TUPLES_OK) {
            code = q_fail(s, Q_NODE_CLAIM, r, err, errlen, "claiming the node id failed");
            PQclear(r);
            return code;
        }
        int got = PQntuples(r) == 1;
        PQclear(r);
        if (got)
            return 0;
        r = auto_q(s, Q_NODE_GET, 1, vals, NULL, NULL, 0, 1, &code, err, errlen);
        if (code < 0)
            return code;
        if (PQresultStatus(r) != PGRES_TUPLES_OK) {
            code = q_fail(s, Q_NODE_GET, r, err, errlen, "reading the node id's holder failed");
            PQclear(r);
            return code;
        }
        if (PQntuples(r) == 1) {
            snprintf(holder->instance, sizeof holder->instance, "%s", PQgetvalue(r, 0, 0));
            holder->heartbeat_age_ms = text_i64(r, 0, 1);
            holder->expires_in_ms = text_i64(r, 0, 2);
            PQclear(r);
            return errmsg_set(-EADDRINUSE, err, errlen,
                              "node id '%s' is held by a live node (instance '%s', last heartbeat"
                              " %lld ms ago, its claim expires in %lld ms unless renewed)", node,
                              holder->instance, (long long)holder->heartbeat_age_ms,
                              (long long)holder->expires_in_ms);
        }
        PQclear(r);
    }
    return errmsg_set(-EBUSY, err, errlen, "node id '%s' keeps changing hands", node);
}

static int node_write(pg_store *s, int q, const char *node, const char *instance, int64_t ttl_ms,
                      char *err, size_t errlen)
{
    char t[24];
    snprintf(t, sizeof t, "%lld", (long long)ttl_ms);
    const char *vals[3] = { node, instance, t };
    int code;
    PGresult *r = auto_q(s, q, q == Q_NODE_BEAT ? 3 : 2, vals, NULL, NULL, 0, 1, &code, err, errlen);
    if (code < 0)
        return code;
    ExecStatusType want = q == Q_NODE_BEAT ? PGRES_TUPLES_OK : PGRES_COMMAND_OK;
    if (PQresultStatus(r) != want)
        code = q_fail(s, q, r, err, errlen, q == Q_NODE_BEAT ? "node heartbeat failed"
                                                            : "releasing the node id failed");
    else if ((q == Q_NODE_BEAT ? PQntuples(r) : atoi(PQcmdTuples(r))) == 0)
        code = errmsg_set(-ENOLCK, err, errlen, "node id '%s' is no longer held by instance '%s'"
                          " (its claim expired and another instance took it)", node, instance);
    PQclear(r);
    return code;
}

static int pg_node_beat(store *base, const char *node, const char *instance, int64_t ttl_ms,
                        char *err, size_t errlen)
{
    return node_write((pg_store *)base, Q_NODE_BEAT, node, instance, ttl_ms, err, errlen);
}

static int pg_node_release(store *base, const char *node, const char *instance, char *err,
                           size_t errlen)
{
    return node_write((pg_store *)base, Q_NODE_RELEASE, node, instance, 0, err, errlen);
}

static const store_ops pg_ops = {
    .name = "postgresql",
    .close = pg_close,
    .where = pg_where,
    .save = pg_save,
    .create = pg_create,
    .load = pg_load,
    .list = pg_list,
    .count = pg_count,
    .usage = pg_usage,
    .expire = pg_expire,
    .evict = pg_evict,
    .remove = pg_remove,
    .del = pg_delete,
    .fork = pg_fork,
    .lease_acquire = pg_lease_acquire,
    .lease_renew = pg_lease_renew,
    .lease_renew_many = pg_lease_renew_many,
    .lease_release = pg_lease_release,
    .turn_get = pg_turn_get,
    .node_claim = pg_node_claim,
    .node_beat = pg_node_beat,
    .node_release = pg_node_release,
    .counters = pg_counters,
};

/* "user@host:port/db" from the URI, never its password. */
static void describe(const char *uri, char *out, size_t len)
{
    const char *user = "", *host = "", *port = "", *db = "";
    PQconninfoOption *o = PQconninfoParse(uri, NULL);
    for (PQconninfoOption *p = o; p && p->keyword; p++) {
        if (!p->val) continue;
        if (!strcmp(p->keyword, "user")) user = p->val;
        else if (!strcmp(p->keyword, "host")) host = p->val;
        else if (!strcmp(p->keyword, "port")) port = p->val;
        else if (!strcmp(p->keyword, "dbname")) db = p->val;
    }
    snprintf(out, len, "postgresql://%s%s%s%s%s/%s", user, *user ? "@" : "", host,
             *port ? ":" : "", port, db);
    PQconninfoFree(o);
}

int store_pg_open(const char *uri, const store_options *opt, store **out, char *err, size_t errlen)
{
    pg_store *s = calloc(1, sizeof *s);
    if (!s)
        return errmsg_set(-ENOMEM, err, errlen, "store: out of memory");
    s->base.ops = &pg_ops;
    s->opt = *opt;
    char *perr = NULL;
    PQconninfoOption *check = PQconninfoParse(uri, &perr);
    if (!check) {
        char msg[512];
        int code = errmsg_set(-EINVAL, err, errlen, "store URI is not a valid PostgreSQL URI: %s",
                              trim(perr, msg, sizeof msg));
        PQfreemem(perr);
        free(s);
        return code;
    }
    PQconninfoFree(check);
    describe(uri, s->desc, sizeof s->desc);
    /* lock_timeout 0 would mean "wait forever"; SQLite's 0 means "do not wait". */
    int lt = s->opt.busy_timeout_ms > 0 ? s->opt.busy_timeout_ms : 1;
    const char *sync = s->opt.sync == STORE_SYNC_FULL ? "on" : "off";
    snprintf(s->set_vals[0], sizeof s->set_vals[0], "%s", sync);
    snprintf(s->set_vals[1], sizeof s->set_vals[1], "%d", lt);
    snprintf(s->set_vals[2], sizeof s->set_vals[2], "%d", s->opt.statement_timeout_ms);
    snprintf(s->begin_sql, sizeof s->begin_sql,
             "BEGIN; SET LOCAL synchronous_commit = %s; SET LOCAL lock_timeout = %d;"
             " SET LOCAL statement_timeout = %d; SET LOCAL idle_in_transaction_session_timeout = %d;"
             " SELECT txid_current(), pg_postmaster_start_time()::text", sync, lt, s->opt.statement_timeout_ms,
             s->opt.idle_tx_timeout_ms);
    int code;
    if (!(s->uri = strdup(uri)) || !(s->conn = connect_now(s))) {
        free(s->uri);
        free(s);
        return errmsg_set(-ENOMEM, err, errlen, "store: out of memory");
    }
    if (PQstatus(s->conn) != CONNECTION_OK) {
        char msg[512];
        code = errmsg_set(-EIO, err, errlen, "cannot connect to store %s: %s", s->desc,
                          trim(PQerrorMessage(s->conn), msg, sizeof msg));
        goto bad;
    }
    const char *enc = PQparameterStatus(s->conn, "server_encoding");
    if (enc && strcmp(enc, "UTF8") && strcmp(enc, "SQL_ASCII")) {
        code = errmsg_set(-EINVAL, err, errlen,
                          "store %s: database encoding is %s; session names need UTF8", s->desc, enc);
        goto bad;
    }
    if ((code = migrate(s, err, errlen)) < 0)
        goto bad;
    *out = &s->base;
    return 0;
bad:
    PQfinish(s->conn);
    free(s->uri);
    free(s);
    return code;
}
