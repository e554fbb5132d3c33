/* state/store_pg.c — the PostgreSQL implementation of the store (libpq).
 *
 * Chosen by store_open for a postgres:// or postgresql:// URI, so several
 * nodes can share one database. Tables lind_schema (the schema version,
 * also what marks a database as lind's), lind_sessions (one row per
 * session: bytea blobs, token count, times, version) and lind_leases. The
 * schema is created and migrated at open under a transaction-scoped
 * advisory lock, so nodes starting together migrate once. Every statement is
 * prepared once per connection; blobs travel as binary parameters and
 * results. A grouped save is one transaction (BEGIN ... COMMIT): one commit,
 * one WAL flush with synchronous_commit on.
 *
 * Durability: STORE_SYNC_FULL is synchronous_commit = on (the commit is
 * flushed to the server's WAL when save returns); NORMAL is off (a server
 * crash may lose the last commits, never half of one). busy_timeout_ms
 * becomes lock_timeout. Lease times come from the server's clock, so nodes
 * with different clocks agree on expiry.
 *
 * A lost connection fails the operation in progress with -EIO and libpq's
 * message; the next operation reconnects (PQreset) and prepares the
 * statements again, so a handle outlives a server restart. */
#include "state/store_impl.h"

#include <errno.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "recurrent/errmsg.h"

/* Advisory lock key held while checking and migrating the schema ("LIND"). */
#define PG_MIGRATE_LOCK 0x4c494e44

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
};
#define SCHEMA_VERSION ((int)(sizeof migrations / sizeof migrations[0]))

/* The server's clock in ms since the epoch. */
#define PG_NOW "(extract(epoch from clock_timestamp()) * 1000)::bigint"

enum {
    Q_UPSERT, Q_INSERT_NEW, Q_CAS, Q_VERSION, Q_INSERT, Q_LOAD, Q_LIST, Q_COUNT, Q_DELETE,
    Q_FORK, Q_LEASE_TAKE, Q_LEASE_GET, Q_LEASE_RENEW, Q_LEASE_RELEASE, Q_LEASE_HELD, Q_N
};

#define SESSION_COLS "name, state, transcript, tokens, created_ms, updated_ms"

/* Parameters: $1 name, $2 state, $3 transcript, $4 tokens, $5 now (ms,
 * this machine's clock, as SQLite's times), $6 expected version; leases $3
 * the ttl in ms. A versioned save returns a row only when it wrote. */
static const char *const queries[Q_N] = {
    [Q_UPSERT]     = "INSERT INTO lind_sessions(" SESSION_COLS ") VALUES($1, $2, $3, $4, $5, $5)"
                     " ON CONFLICT(name) DO UPDATE SET state = EXCLUDED.state,"
                     " transcript = EXCLUDED.transcript, tokens = EXCLUDED.tokens,"
                     " updated_ms = EXCLUDED.updated_ms, version = lind_sessions.version + 1"
                     " RETURNING version",
    [Q_INSERT_NEW] = "INSERT INTO lind_sessions(" SESSION_COLS ") VALUES($1, $2, $3, $4, $5, $5)"
                     " ON CONFLICT(name) DO NOTHING RETURNING version",
    [Q_CAS]        = "UPDATE lind_sessions SET state = $2, transcript = $3, tokens = $4,"
                     " updated_ms = $5, version = version + 1"
                     " WHERE name = $1 AND version = $6 RETURNING version",
    [Q_VERSION]    = "SELECT version FROM lind_sessions WHERE name = $1",
    [Q_INSERT]     = "INSERT INTO lind_sessions(" SESSION_COLS ") VALUES($1, $2, $3, $4, $5, $5)",
    [Q_LOAD]       = "SELECT state, transcript, tokens, created_ms, updated_ms, version"
                     " FROM lind_sessions WHERE name = $1",
    [Q_LIST]       = "SELECT name, tokens, octet_length(state), created_ms, updated_ms, version"
                     " FROM lind_sessions ORDER BY name",
    [Q_COUNT]      = "SELECT count(*) FROM lind_sessions",
    [Q_DELETE]     = "DELETE FROM lind_sessions WHERE name = $1",
    [Q_FORK]       = "INSERT INTO lind_sessions(" SESSION_COLS ")"
                     " SELECT $2, state, transcript, tokens, $3, $3 FROM lind_sessions"
                     " WHERE name = $1",
    [Q_LEASE_TAKE] = "INSERT INTO lind_leases(name, owner, expires_ms)"
                     " VALUES($1, $2, " PG_NOW " + $3::bigint)"
                     " ON CONFLICT(name) DO UPDATE SET owner = EXCLUDED.owner,"
                     " expires_ms = EXCLUDED.expires_ms"
                     " WHERE lind_leases.owner = EXCLUDED.owner"
                     " OR lind_leases.expires_ms <= " PG_NOW
                     " RETURNING owner, expires_ms",
    [Q_LEASE_GET]  = "SELECT owner, expires_ms, " PG_NOW " FROM lind_leases WHERE name = $1",
    [Q_LEASE_RENEW] = "UPDATE lind_leases SET expires_ms = " PG_NOW " + $3::bigint"
                     " WHERE name = $1 AND owner = $2 RETURNING owner, expires_ms",
    [Q_LEASE_RELEASE] = "DELETE FROM lind_leases WHERE name = $1 AND owner = $2",
    /* A save under a lease: FOR SHARE holds the lease row until the commit,
     * so a takeover (which updates the row) waits for the save, and a save
     * that waited on a takeover re-reads the row and finds the new owner. */
    [Q_LEASE_HELD] = "SELECT 1 FROM lind_leases WHERE name = $1 AND owner = $2"
                     " AND expires_ms > " PG_NOW " FOR SHARE",
};

typedef struct pg_store {
    store base;              /* first: a store * is a pg_store * */
    PGconn *conn;
    store_options opt;
    int prepared;            /* statements prepared on this connection */
    char desc[256];          /* user@host:port/db for messages (no password) */
} pg_store;

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

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

/* SQLSTATE -> the store's codes. A broken connection is -EIO. */
static int map_result(pg_store *s, const PGresult *r)
{
    if (PQstatus(s->conn) != CONNECTION_OK)
        return -EIO;
    const char *st = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
    if (!st)
        return -EIO;
    if (!strcmp(st, "23505")) return -EEXIST;       /* unique_violation */
    if (!strcmp(st, "53100")) return -ENOSPC;       /* disk_full */
    if (!strcmp(st, "53200")) return -ENOMEM;       /* out_of_memory */
    if (!strcmp(st, "55P03") || !strcmp(st, "40001") || !strcmp(st, "40P01"))
        return -EBUSY;                              /* lock timeout, serialization, deadlock */
    return -EIO;
}

/* Report a failed call with the server's (or libpq's) own message. r may be
 * NULL; it is not freed here. */
static int pg_fail(pg_store *s, const PGresult *r, char *err, size_t errlen, const char *what)
{
    char msg[512];
    const char *m = r && *PQresultErrorMessage(r) ? PQresultErrorMessage(r) : PQerrorMessage(s->conn);
    int code = map_result(s, r);
    return errmsg_set(code, err, errlen, "store %s: %s: %s%s", s->desc, what, trim(m, msg, sizeof msg),
                      PQstatus(s->conn) != CONNECTION_OK ? " (connection lost)" : "");
}

/* Run a plain command (no parameters); 0 or the mapped code. */
static int exec_cmd(pg_store *s, const char *sql, char *err, size_t errlen, const char *what)
{
    PGresult *r = PQexec(s->conn, sql);
    ExecStatusType t = PQresultStatus(r);
    int code = t == PGRES_COMMAND_OK || t == PGRES_TUPLES_OK ? 0 : pg_fail(s, r, err, errlen, what);
    PQclear(r);
    return code;
}

/* Per-connection settings and prepared statements (again after a reset). */
static int session_setup(pg_store *s, char *err, size_t errlen)
{
    char sql[160];
    /* lock_timeout 0 would mean "wait forever"; SQLite's 0 means "do not wait". */
    int lt = s->opt.busy_timeout_ms > 0 ? s->opt.busy_timeout_ms : 1;
    snprintf(sql, sizeof sql, "SET synchronous_commit = %s; SET lock_timeout = %d;"
             " SET client_encoding = 'UTF8'",
             s->opt.sync == STORE_SYNC_FULL ? "on" : "off", lt);
    int code = exec_cmd(s, sql, err, errlen, "cannot configure the session");
    if (code < 0)
        return code;
    for (int i = 0; i < Q_N; i++) {
        char name[24];
        snprintf(name, sizeof name, "lind_q%d", i);
        PGresult *r = PQprepare(s->conn, name, queries[i], 0, NULL);
        if (PQresultStatus(r) != PGRES_COMMAND_OK)
            code = pg_fail(s, r, err, errlen, "cannot prepare statements");
        PQclear(r);
        if (code < 0)
            return code;
    }
    s->prepared = 1;
    return 0;
}

/* Before each operation: a connection that broke is re-established. */
static int ensure_conn(pg_store *s, char *err, size_t errlen)
{
    if (PQstatus(s->conn) == CONNECTION_OK && s->prepared)
        return 0;
    s->prepared = 0;
    if (PQstatus(s->conn) != CONNECTION_OK) {
        PQreset(s->conn);
        if (PQstatus(s->conn) != CONNECTION_OK) {
            char msg[512];
            return errmsg_set(-EIO, err, errlen, "store %s: connection lost, reconnecting failed: %s",
                              s->desc, trim(PQerrorMessage(s->conn), msg, sizeof msg));
        }
    }
    return session_setup(s, err, errlen);
}

/* Execute prepared statement q. fmts/lens may be NULL (all text). Results
 * in binary when `binary`. The caller PQclear()s the result. */
static PGresult *exec_q(pg_store *s, int q, int n, const char *const *vals, const int *lens,
                        const int *fmts, int binary)
{
    char name[24];
    snprintf(name, sizeof name, "lind_q%d", q);
    return PQexecPrepared(s->conn, name, n, vals, lens, fmts, binary);
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
    r = PQexec(s->conn, "SELECT to_regclass('lind_schema') IS NOT NULL,"
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
    r = PQexec(s->conn, "SELECT version FROM lind_schema");
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
    if (code == 0)
        code = exec_cmd(s, "COMMIT", err, errlen, "schema migration commit failed");
out:
    PQclear(r);
    if (code < 0 && PQstatus(s->conn) == CONNECTION_OK)
        PQclear(PQexec(s->conn, "ROLLBACK"));
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
    free(s);
}

/* The six session parameters of record r ($6 = expect when non-NULL). */
typedef struct rec_params {
    const char *vals[6];
    int lens[6], fmts[6];
    char tokens[24], now[24], expect[24];
} rec_params;

static void rec_bind(rec_params *p, const store_record *r, int64_t now, const uint64_t *expect)
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
    p->vals[5] = NULL;
    if (expect) {
        snprintf(p->expect, sizeof p->expect, "%llu", (unsigned long long)*expect);
        p->vals[5] = p->expect;
    }
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

static int pg_save(store *base, const store_record *recs, const uint64_t *expect, int n,
                   const char *owner, store_save_result *res, char *err, size_t errlen)
{
    pg_store *s = (pg_store *)base;
    int64_t now = now_ms();
    int code = 0, in_tx = 0;
    for (int i = 0; i < n && code == 0; i++)
        code = check_sizes(&recs[i], err, errlen);
    if (code == 0)
        code = ensure_conn(s, err, errlen);
    if (code == 0 && (code = exec_cmd(s, "BEGIN", err, errlen, "cannot begin the save")) == 0)
        in_tx = 1;
    for (int i = 0; i < n && code == 0; i++) {
        int q = expect[i] == STORE_VERSION_ANY ? Q_UPSERT
                : expect[i] == STORE_VERSION_NEW ? Q_INSERT_NEW : Q_CAS;
        rec_params p;
        rec_bind(&p, &recs[i], now, q == Q_CAS ? &expect[i] : NULL);
        int refused = -ECANCELED;   /* when the write returns no row */
        PGresult *r = NULL;
        if (owner) {
            const char *lv[2] = { recs[i].name, owner };
            r = exec_q(s, Q_LEASE_HELD, 2, lv, NULL, NULL, 0);
            if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 0) {
                refused = -ENOLCK;   /* r: an empty result, as a refused write's */
            } else if (PQresultStatus(r) == PGRES_TUPLES_OK) {
                PQclear(r);
                r = NULL;
            }
        }
        if (!r)
            r = exec_q(s, q, q == Q_CAS ? 6 : 5, p.vals, p.lens, p.fmts, 0);
        if (PQresultStatus(r) != PGRES_TUPLES_OK) {
            char what[STORE_NAME_MAX + 32];
            snprintf(what, sizeof what, "saving '%s'", recs[i].name);
            code = pg_fail(s, r, err, errlen, what);
            code = code == -EEXIST ? -EIO : code;
        } else if (PQntuples(r) == 1) {
            res[i] = (store_save_result){ 0, (uint64_t)text_i64(r, 0, 0) };
        } else {
            /* The swap did not happen: report where the row is instead. */
            PQclear(r);
            r = exec_q(s, Q_VERSION, 1, p.vals, NULL, NULL, 0);
            if (PQresultStatus(r) != PGRES_TUPLES_OK)
                code = pg_fail(s, r, err, errlen, "reading a session's version");
            else
                res[i] = (store_save_result){
                    refused, PQntuples(r) ? (uint64_t)text_i64(r, 0, 0) : 0 };
        }
        PQclear(r);
    }
    if (code == 0)
        code = exec_cmd(s, "COMMIT", err, errlen, "commit failed");
    else if (in_tx && PQstatus(s->conn) == CONNECTION_OK)
        PQclear(PQexec(s->conn, "ROLLBACK"));
    if (code < 0) {
        for (int i = 0; i < n; i++)
            res[i] = (store_save_result){ code, 0 };
        return code;
    }
    /* Records refused by their checks are in res; store.c reports them. */
    return 0;
}

static int pg_create(store *base, const store_record *rec, char *err, size_t errlen)
{
    pg_store *s = (pg_store *)base;
    int code = check_sizes(rec, err, errlen);
    if (code < 0 || (code = ensure_conn(s, err, errlen)) < 0)
        return code;
    rec_params p;
    rec_bind(&p, rec, now_ms(), NULL);
    PGresult *r = exec_q(s, Q_INSERT, 5, p.vals, p.lens, p.fmts, 0);
    if (PQresultStatus(r) != PGRES_COMMAND_OK) {
        code = pg_fail(s, r, err, errlen, "insert failed");
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
    int code = ensure_conn(s, err, errlen);
    if (code < 0)
        return code;
    const char *vals[1] = { name };
    PGresult *r = exec_q(s, Q_LOAD, 1, vals, NULL, NULL, 1);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        code = pg_fail(s, r, err, errlen, "load failed");
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
    int code = ensure_conn(s, err, errlen);
    if (code < 0)
        return code;
    PGresult *r = exec_q(s, Q_LIST, 0, NULL, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        code = pg_fail(s, r, err, errlen, "list failed");
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
    int code = ensure_conn(s, err, errlen);
    if (code < 0)
        return code;
    PGresult *r = exec_q(s, Q_COUNT, 0, NULL, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1)
        code = pg_fail(s, r, err, errlen, "count failed");
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
    int code = ensure_conn(s, err, errlen);
    if (code < 0)
        return code;
    const char *vals[1] = { name };
    PGresult *r = exec_q(s, Q_DELETE, 1, vals, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_COMMAND_OK)
        code = pg_fail(s, r, err, errlen, "delete failed");
    else if (affected(r) == 0)
        code = errmsg_set(-ENOENT, err, errlen, "no session named '%s'", name);
    PQclear(r);
    return code;
}

static int pg_fork(store *base, const char *src, const char *dst, char *err, size_t errlen)
{
    pg_store *s = (pg_store *)base;
    int code = ensure_conn(s, err, errlen);
    if (code < 0)
        return code;
    char now[24];
    snprintf(now, sizeof now, "%lld", (long long)now_ms());
    const char *vals[3] = { src, dst, now };
    PGresult *r = exec_q(s, Q_FORK, 3, vals, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_COMMAND_OK) {
        code = pg_fail(s, r, err, errlen, "fork failed");
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
    PGresult *r = exec_q(s, q, 3, vals, NULL, NULL, 0);
    int code = 0;
    *got = 0;
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        code = pg_fail(s, r, err, errlen, "lease failed");
    } else if (PQntuples(r) == 1) {
        *got = 1;
        snprintf(out->owner, sizeof out->owner, "%s", PQgetvalue(r, 0, 0));
        out->expires_ms = text_i64(r, 0, 1);
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
    PGresult *r = exec_q(s, Q_LEASE_GET, 1, vals, NULL, NULL, 0);
    int code = 0;
    memset(out, 0, sizeof *out);
    *server_now = 0;
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        code = pg_fail(s, r, err, errlen, "reading a lease failed");
    } else if (PQntuples(r) == 1) {
        snprintf(out->owner, sizeof out->owner, "%s", PQgetvalue(r, 0, 0));
        out->expires_ms = text_i64(r, 0, 1);
        *server_now = text_i64(r, 0, 2);
    }
    PQclear(r);
    return code;
}

static int pg_lease_acquire(store *base, const char *name, const char *owner, int64_t ttl_ms,
                            store_lease *out, char *err, size_t errlen)
{
    pg_store *s = (pg_store *)base;
    int code = ensure_conn(s, err, errlen);
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
    int code = ensure_conn(s, err, errlen);
    if (code < 0 ||
        (code = lease_q(s, Q_LEASE_RENEW, name, owner, ttl_ms, out, &got, err, errlen)) < 0 || got)
        return code;
    if ((code = lease_get(s, name, out, &now, err, errlen)) < 0)
        return code;
    return errmsg_set(-ENOLCK, err, errlen, "lease of '%s' is not held by '%s'%s%s%s", name, owner,
                      out->owner[0] ? " (held by '" : " (nobody holds it)", out->owner,
                      out->owner[0] ? "')" : "");
}

static int pg_lease_release(store *base, const char *name, const char *owner, char *err,
                            size_t errlen)
{
    pg_store *s = (pg_store *)base;
    int code = ensure_conn(s, err, errlen);
    if (code < 0)
        return code;
    const char *vals[2] = { name, owner };
    PGresult *r = exec_q(s, Q_LEASE_RELEASE, 2, vals, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_COMMAND_OK)
        code = pg_fail(s, r, err, errlen, "lease release failed");
    else if (affected(r) == 0)
        code = errmsg_set(-ENOLCK, err, errlen, "lease of '%s' is not held by '%s'", name, owner);
    PQclear(r);
    return code;
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
    .del = pg_delete,
    .fork = pg_fork,
    .lease_acquire = pg_lease_acquire,
    .lease_renew = pg_lease_renew,
    .lease_release = pg_lease_release,
};

/* Server notices (e.g. "terminating connection due to immediate shutdown")
 * would go to stderr by default; a library must not write there. The
 * failure they announce reaches the caller as an error anyway. */
static void quiet_notices(void *arg, const char *msg)
{
    (void)arg;
    (void)msg;
}

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
    /* A server that does not answer must not hang the caller forever; the
     * URI's own connect_timeout, if any, comes later and wins. */
    const char *keys[] = { "connect_timeout", "fallback_application_name", "dbname", NULL };
    const char *vals[] = { "10", "lind", uri, NULL };
    s->conn = PQconnectdbParams(keys, vals, 1);
    int code;
    if (!s->conn) {
        free(s);
        return errmsg_set(-ENOMEM, err, errlen, "store %s: out of memory", uri);
    }
    if (PQstatus(s->conn) != CONNECTION_OK) {
        char msg[512];
        code = errmsg_set(-EIO, err, errlen, "cannot connect to store %s: %s", s->desc,
                          trim(PQerrorMessage(s->conn), msg, sizeof msg));
        goto bad;
    }
    /* Kept across PQreset: it belongs to the PGconn. */
    PQsetNoticeProcessor(s->conn, quiet_notices, NULL);
    const char *enc = PQparameterStatus(s->conn, "server_encoding");
    if (enc && strcmp(enc, "UTF8") && strcmp(enc, "SQL_ASCII")) {
        code = errmsg_set(-EINVAL, err, errlen,
                          "store %s: database encoding is %s; session names need UTF8", s->desc, enc);
        goto bad;
    }
    if ((code = migrate(s, err, errlen)) < 0 || (code = session_setup(s, err, errlen)) < 0)
        goto bad;
    *out = &s->base;
    return 0;
bad:
    PQfinish(s->conn);
    free(s);
    return code;
}
