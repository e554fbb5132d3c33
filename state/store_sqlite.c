/* state/store_sqlite.c — the SQLite implementation of the store.
 *
 * One table of sessions in a WAL-mode database; a schema_version table and
 * a list of migrations (migrations[i] takes the schema from version i to
 * i + 1, so schema v2 is one more entry). Every statement is prepared once
 * at open and bound per call; saves of several sessions share one
 * transaction (BEGIN IMMEDIATE ... COMMIT), so a group is all-or-nothing and
 * costs one commit (one fsync with synchronous=FULL).
 *
 * Guards (store.h): an exclusive handle holds flock() on its own descriptor
 * of the database file (flock and SQLite's POSIX locks do not interact on
 * Linux) and records its pid in the header's user_version; every open
 * probes writability with one small commit; every write checks, before and
 * after, that the path and its -wal still name the files SQLite has open.
 * That descriptor is closed only after sqlite3_close(): closing any
 * descriptor of the file would drop the process's POSIX locks on it. */
#include "state/store_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "recurrent/errmsg.h"
#include "kernels/clock.h"

#define LIND_APPLICATION_ID 0x4c494e44   /* "LIND" in the database header */

static const char *const migrations[] = {
    /* 0 -> 1 */
    "CREATE TABLE sessions ("
    "  name       TEXT PRIMARY KEY NOT NULL,"
    "  state      BLOB NOT NULL,"
    "  transcript BLOB NOT NULL,"
    "  tokens     INTEGER NOT NULL,"
    "  created_ms INTEGER NOT NULL,"
    "  updated_ms INTEGER NOT NULL"
    ");",
    /* 1 -> 2: versions and leases (store.h); existing rows start at 1. */
    "ALTER TABLE sessions ADD COLUMN version INTEGER NOT NULL DEFAULT 1;"
    "CREATE TABLE leases ("
    "  name       TEXT PRIMARY KEY NOT NULL,"
    "  owner      TEXT NOT NULL,"
    "  expires_ms INTEGER NOT NULL"
    ");",
    /* 2 -> 3: retention (store.h): where each session came from, and an
     * index for collecting the least recently saved first. Rows from
     * before are ephemeral by their resp-/chat- names, else socket. */
    "ALTER TABLE sessions ADD COLUMN origin INTEGER NOT NULL DEFAULT 0;"
    "UPDATE sessions SET origin = CASE substr(name, 1, 5) WHEN 'resp-' THEN 2"
    " WHEN 'chat-' THEN 3 ELSE 0 END;"
    "CREATE INDEX sessions_updated ON sessions(updated_ms);",
};
#define SCHEMA_VERSION ((int)(sizeof migrations / sizeof migrations[0]))

enum {
    Q_BEGIN, Q_COMMIT, Q_ROLLBACK, Q_UPSERT, Q_INSERT, Q_LOAD, Q_LIST, Q_COUNT,
    Q_DELETE, Q_FORK, Q_KEEP, Q_INSERT_NEW, Q_CAS, Q_VERSION, Q_LEASE_TAKE, Q_LEASE_GET,
    Q_LEASE_RENEW, Q_LEASE_RELEASE, Q_LEASE_HELD,
    Q_RETENTION,   /* from here on: prepared on first use (only a daemon collects) */
    Q_USAGE = Q_RETENTION, Q_EXPIRE, Q_EVICT, Q_REMOVE, Q_N
};

/* A new row's origin (store.h): by the name's prefix, else `other`. */
#define ORIGIN(other) "CASE substr(?1, 1, 5) WHEN 'resp-' THEN 2 WHEN 'chat-' THEN 3 ELSE " other " END"
#define BYTES "(length(state) + length(transcript))"
#define NOT_LEASED(now) " AND name NOT IN (SELECT name FROM leases WHERE expires_ms > " now ")"
/* Collection: a lease keeps a row unless the row is ephemeral and the
 * lease is the collecting owner's (store.h). */
#define NOT_KEPT(now, owner) " AND NOT EXISTS (SELECT 1 FROM leases l WHERE l.name = sessions.name" \
    " AND l.expires_ms > " now " AND (sessions.origin < 2 OR l.owner IS NOT " owner "))"

static const char *const queries[Q_N] = {
    [Q_BEGIN]    = "BEGIN IMMEDIATE",
    [Q_COMMIT]   = "COMMIT",
    [Q_ROLLBACK] = "ROLLBACK",
    [Q_UPSERT]   = "INSERT INTO sessions(name, state, transcript, tokens, created_ms, updated_ms, origin)"
                   " VALUES(?1, ?2, ?3, ?4, ?5, ?5, " ORIGIN("coalesce(?7, 0)") ")"
                   " ON CONFLICT(name) DO UPDATE SET state = excluded.state,"
                   " transcript = excluded.transcript, tokens = excluded.tokens,"
                   " updated_ms = excluded.updated_ms, version = sessions.version + 1"
                   " RETURNING version",
    [Q_INSERT]   = "INSERT INTO sessions(name, state, transcript, tokens, created_ms, updated_ms, origin)"
                   " VALUES(?1, ?2, ?3, ?4, ?5, ?5, " ORIGIN("coalesce(?7, 0)") ")",
    [Q_LOAD]     = "SELECT state, transcript, tokens, created_ms, updated_ms, version"
                   " FROM sessions WHERE name = ?1",
    [Q_LIST]     = "SELECT name, tokens, length(state), created_ms, updated_ms, version, "
                   BYTES ", origin"
                   " FROM sessions ORDER BY name",
    [Q_COUNT]    = "SELECT count(*) FROM sessions",
    [Q_DELETE]   = "DELETE FROM sessions WHERE name = ?1",
    [Q_FORK]     = "INSERT INTO sessions(name, state, transcript, tokens, created_ms, updated_ms, origin)"
                   " SELECT ?2, state, transcript, tokens, ?3, ?3,"
                   " CASE substr(?2, 1, 5) WHEN 'resp-' THEN 2 WHEN 'chat-' THEN 3 ELSE origin END"
                   " FROM sessions WHERE name = ?1",
    /* A save's copy (store_save_keep): a fork where the name is free. */
    [Q_KEEP]     = "INSERT INTO sessions(name, state, transcript, tokens, created_ms, updated_ms, origin)"
                   " SELECT ?2, state, transcript, tokens, ?3, ?3,"
                   " CASE substr(?2, 1, 5) WHEN 'resp-' THEN 2 WHEN 'chat-' THEN 3 ELSE origin END"
                   " FROM sessions WHERE name = ?1 ON CONFLICT(name) DO NOTHING",
    /* Versioned saves: a row comes back only when the swap happened. */
    [Q_INSERT_NEW] = "INSERT INTO sessions(name, state, transcript, tokens, created_ms, updated_ms, origin)"
                   " VALUES(?1, ?2, ?3, ?4, ?5, ?5, " ORIGIN("coalesce(?7, 0)") ") ON CONFLICT(name) DO NOTHING RETURNING version",
    [Q_CAS]      = "UPDATE sessions SET state = ?2, transcript = ?3, tokens = ?4, updated_ms = ?5,"
                   " version = version + 1 WHERE name = ?1 AND version = ?6 RETURNING version",
    [Q_VERSION]  = "SELECT version FROM sessions WHERE name = ?1",
    /* Leases: ?3 is now (ms), ?4 the ttl. */
    [Q_LEASE_TAKE] = "INSERT INTO leases(name, owner, expires_ms) VALUES(?1, ?2, ?3 + ?4)"
                   " ON CONFLICT(name) DO UPDATE SET owner = excluded.owner,"
                   " expires_ms = excluded.expires_ms"
                   " WHERE leases.owner = excluded.owner OR leases.expires_ms <= ?3"
                   " RETURNING owner, expires_ms",
    [Q_LEASE_GET] = "SELECT owner, expires_ms FROM leases WHERE name = ?1",
    [Q_LEASE_RENEW] = "UPDATE leases SET expires_ms = ?3 + ?4 WHERE name = ?1 AND owner = ?2"
                   " RETURNING owner, expires_ms",
    [Q_LEASE_RELEASE] = "DELETE FROM leases WHERE name = ?1 AND owner = ?2",
    /* Inside a save's BEGIN IMMEDIATE: nobody can take the lease over
     * between this check and the commit. */
    [Q_LEASE_HELD] = "SELECT 1 FROM leases WHERE name = ?1 AND owner = ?2 AND expires_ms > ?3",
    /* Retention: each collection is one statement (one commit). */
    [Q_USAGE]    = "SELECT count(*), coalesce(sum(" BYTES "), 0) FROM sessions",
    /* ?1 response ttl, ?2 session ttl (0: off), ?3 now, ?4 limit, ?5 owner */
    [Q_EXPIRE]   = "DELETE FROM sessions WHERE name IN (SELECT name FROM sessions WHERE"
                   " ((origin >= 2 AND ?1 > 0 AND updated_ms < ?3 - ?1)"
                   " OR (origin < 2 AND ?2 > 0 AND updated_ms < ?3 - ?2))" NOT_KEPT("?3", "?5")
                   " ORDER BY updated_ms LIMIT ?4) RETURNING " BYTES,
    /* ?1 now, ?2 excess bytes, ?3 limit, ?4 owner: the oldest ephemeral
     * sessions until the bytes before each reach the excess */
    [Q_EVICT]    = "DELETE FROM sessions WHERE name IN (SELECT name FROM"
                   " (SELECT name, updated_ms, sum(" BYTES ") OVER (ORDER BY updated_ms, name"
                   " ROWS UNBOUNDED PRECEDING) - " BYTES " AS before FROM sessions"
                   " WHERE origin >= 2" NOT_KEPT("?1", "?4") ")"
                   " WHERE before < ?2 ORDER BY updated_ms, name LIMIT ?3) RETURNING " BYTES,
    /* ?1 prefix, ?2 cutoff (updated before it; 0: any), ?3 now, ?4 limit */
    [Q_REMOVE]   = "DELETE FROM sessions WHERE name IN (SELECT name FROM sessions WHERE"
                   " substr(name, 1, length(?1)) = ?1 AND (?2 = 0 OR updated_ms < ?2)"
                   NOT_LEASED("?3") " ORDER BY updated_ms LIMIT ?4) RETURNING " BYTES,
};

/* Turn results (store.h, "turn results"): a table of their own, created at
 * every open if missing (no schema version of its own: a lind without it
 * ignores the table, and the trigger deletes a session's results with it
 * whichever lind deletes the session). */
static const char turns_schema[] =
    "CREATE TABLE IF NOT EXISTS turns ("
    "  name       TEXT NOT NULL,"
    "  request_id TEXT NOT NULL,"
    "  version    INTEGER NOT NULL,"
    "  result     BLOB NOT NULL,"
    "  PRIMARY KEY(name, request_id)"
    ");"
    "CREATE INDEX IF NOT EXISTS turns_by_version ON turns(name, version);"
    "CREATE TRIGGER IF NOT EXISTS turns_of_deleted AFTER DELETE ON sessions"
    " BEGIN DELETE FROM turns WHERE name = old.name; END;";

enum { TQ_PUT, TQ_PRUNE, TQ_GET, TQ_N };
static const char *const turn_queries[TQ_N] = {
    [TQ_PUT]   = "INSERT INTO turns(name, request_id, version, result) VALUES(?1, ?2, ?3, ?4)"
                 " ON CONFLICT(name, request_id) DO UPDATE SET version = excluded.version,"
                 " result = excluded.result",
    [TQ_PRUNE] = "DELETE FROM turns WHERE name = ?1 AND version <= ?2",
    [TQ_GET]   = "SELECT result, version FROM turns WHERE name = ?1 AND request_id = ?2",
};

typedef struct sqlite_store {
    store base;              /* first: a store * is a sqlite_store * */
    sqlite3 *db;
    sqlite3_stmt *q[Q_N];
    sqlite3_stmt *tq[TQ_N];  /* turn results */
    int lock_fd;             /* exclusive handles: the flock()ed descriptor; else -1 */
    dev_t dev; ino_t ino;    /* the database file this handle opened */
    dev_t wal_dev; ino_t wal_ino;  /* its -wal, once it exists (wal_ino 0: not yet) */
    char *lost;              /* set once the file was removed/replaced: why (malloc'd) */
    void (*on_lost)(void *, const char *);
    void *on_lost_arg;
    char path[];             /* for messages */
} sqlite_store;

static int map_rc(int rc)
{
    switch (rc & 0xFF) {
    case SQLITE_BUSY: case SQLITE_LOCKED: return -EBUSY;
    case SQLITE_FULL:                     return -ENOSPC;
    case SQLITE_CONSTRAINT:               return -EEXIST;
    case SQLITE_NOMEM:                    return -ENOMEM;
    case SQLITE_NOTADB:                   return -EINVAL;
    default:                              return -EIO;
    }
}

/* Report a failed SQLite call with the database's own message. */
static int db_fail(sqlite_store *s, int rc, char *err, size_t errlen, const char *what)
{
    return errmsg_set(map_rc(rc), err, errlen, "store %s: %s: %s", s->path, what,
                sqlite3_errmsg(s->db));
}

/* Run one prepared statement that returns no rows, leaving it reset. */
static int run(sqlite3_stmt *st)
{
    int rc = sqlite3_step(st);
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return rc == SQLITE_DONE || rc == SQLITE_ROW ? SQLITE_OK : rc;
}

/* Run a script (migrations, pragmas) statement by statement. */
static int run_script(sqlite3 *db, const char *sql)
{
    while (sql && *sql) {
        sqlite3_stmt *st = NULL;
        const char *tail = NULL;
        int rc = sqlite3_prepare_v2(db, sql, -1, &st, &tail);
        if (rc != SQLITE_OK)
            return rc;
        if (st) {
            while ((rc = sqlite3_step(st)) == SQLITE_ROW)
                ;
            sqlite3_finalize(st);
            if (rc != SQLITE_DONE)
                return rc;
        }
        sql = tail;
    }
    return SQLITE_OK;
}

/* One integer from a one-row query; `bind` is bound to ?1 when non-NULL. */
static int query_int(sqlite3 *db, const char *sql, const char *bind, int64_t *out)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
    if (rc != SQLITE_OK)
        return rc;
    if (bind)
        sqlite3_bind_text(st, 1, bind, -1, SQLITE_STATIC);
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        *out = sqlite3_column_int64(st, 0);
        rc = SQLITE_OK;
    } else if (rc == SQLITE_DONE) {
        *out = 0;
        rc = SQLITE_OK;
    }
    sqlite3_finalize(st);
    return rc;
}

/* Where the -wal of `path` lives: path + "-wal" (SQLite's own naming). */
static int stat_wal(const sqlite_store *s, struct stat *st)
{
    char wal[4096];
    if (snprintf(wal, sizeof wal, "%s-wal", s->path) >= (int)sizeof wal) {
        errno = ENAMETOOLONG;
        return -1;
    }
    return stat(wal, st);
}

static void remember_wal(sqlite_store *s)
{
    struct stat st;
    if (stat_wal(s, &st) == 0) {
        s->wal_dev = st.st_dev;
        s->wal_ino = st.st_ino;
    }
}

static int lost_message(const sqlite_store *s, char *err, size_t errlen)
{
    return errmsg_set(-ESTALE, err, errlen,
                      "store %s: %s while lind had it open; nothing more is saved or"
                      " acknowledged on it (restore the file, or restart lind on a new one)",
                      s->path, s->lost);
}

/* Is the path still the file SQLite writes, and its -wal the log SQLite
 * appends to? If not, remember why and refuse this and every later write:
 * a commit into an unlinked file would be acknowledged and then lost. */
static int check_identity(sqlite_store *s, char *err, size_t errlen)
{
    if (!s->lost) {
        struct stat st;
        char why[512] = "";
        int gone = 0;
        if (stat(s->path, &st) != 0)
            snprintf(why, sizeof why, "the database file %s was removed (%s)", s->path,
                     strerror(errno));
        else if (st.st_dev != s->dev || st.st_ino != s->ino)
            snprintf(why, sizeof why, "the database file %s was replaced by another file"
                     " (inode %llu, was %llu)", s->path, (unsigned long long)st.st_ino,
                     (unsigned long long)s->ino);
        else if (s->wal_ino == 0)
            remember_wal(s);
        else if ((gone = stat_wal(s, &st) != 0) || st.st_dev != s->wal_dev ||
                 st.st_ino != s->wal_ino) {
            snprintf(why, sizeof why, "the write-ahead log %s-wal was %s", s->path,
                     gone ? "removed" : "replaced by another file");
            /* The log SQLite has open still holds every acknowledged commit:
             * copy them into the database file before refusing more. */
            int rc = sqlite3_wal_checkpoint_v2(s->db, NULL, SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL);
            size_t k = strlen(why);
            snprintf(why + k, sizeof why - k, rc == SQLITE_OK
                     ? "; the sessions saved before that were checkpointed into %s"
                     : "; checkpointing the saved sessions into %s failed too", s->path);
        }
        if (why[0]) {
            size_t n = strlen(why) + 1;
            s->lost = malloc(n);
            if (!s->lost)
                return errmsg_set(-ESTALE, err, errlen, "store %s: %s", s->path, why);
            memcpy(s->lost, why, n);
            if (s->on_lost) {
                char msg[1024];
                lost_message(s, msg, sizeof msg);
                s->on_lost(s->on_lost_arg, msg);
            }
        }
    }
    if (s->lost)
        return lost_message(s, err, errlen);
    return 0;
}

static int rollback(sqlite_store *s)
{
    if (sqlite3_get_autocommit(s->db))
        return SQLITE_OK;
    return run(s->q[Q_ROLLBACK]);
}

/* The probe write failed: say why in the user's terms where we can tell. */
static int unwritable(sqlite_store *s, int rc, char *err, size_t errlen)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", s->path);
    char *slash = strrchr(dir, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == dir) dir[1] = 0;
    else *slash = 0;
    int code = map_rc(rc);
    char why[1024];
    snprintf(why, sizeof why, "%s", sqlite3_errmsg(s->db));
    run_script(s->db, "ROLLBACK");
    if (access(s->path, W_OK) != 0)
        return errmsg_set(-errno, err, errlen, "store %s is not writable: %s (%s)", s->path,
                          strerror(errno), why);
    if (access(dir, W_OK | X_OK) != 0)
        return errmsg_set(-errno, err, errlen, "store %s is not writable: its directory %s: %s"
                          " (SQLite creates %s-wal and %s-shm there) (%s)", s->path, dir,
                          strerror(errno), s->path, s->path, why);
    return errmsg_set(code == -EEXIST ? -EIO : code, err, errlen,
                      "store %s is not writable: a test write failed: %s", s->path, why);
}

/* Bring the schema to SCHEMA_VERSION inside one transaction. */
static int migrate(sqlite_store *s, char *err, size_t errlen)
{
    sqlite3 *db = s->db;
    int rc = run_script(db, "BEGIN IMMEDIATE");
    if (rc != SQLITE_OK && ((rc & 0xFF) == SQLITE_READONLY || (rc & 0xFF) == SQLITE_CANTOPEN))
        return unwritable(s, rc, err, errlen);
    if (rc != SQLITE_OK)
        return db_fail(s, rc, err, errlen, "cannot lock to check the schema");
    int64_t appid = 0, has_version = 0, tables = 0, version = 0;
    if ((rc = query_int(db, "PRAGMA application_id", NULL, &appid)) != SQLITE_OK ||
        (rc = query_int(db, "SELECT count(*) FROM sqlite_master WHERE type = 'table'"
                            " AND name = 'schema_version'", NULL, &has_version)) != SQLITE_OK ||
        (rc = query_int(db, "SELECT count(*) FROM sqlite_master", NULL, &tables)) != SQLITE_OK) {
        int code = db_fail(s, rc, err, errlen, "cannot read the schema");
        run_script(db, "ROLLBACK");
        return code;
    }
    if ((appid != 0 && appid != LIND_APPLICATION_ID) || (!has_version && tables > 0)) {
        run_script(db, "ROLLBACK");
        return errmsg_set(-EINVAL, err, errlen,
                    "store %s: an SQLite database of another application, not a lind store",
                    s->path);
    }
    if (!has_version) {
        char sql[160];
        snprintf(sql, sizeof sql,
                 "CREATE TABLE schema_version (version INTEGER NOT NULL);"
                 "INSERT INTO schema_version VALUES (0);"
                 "PRAGMA application_id = %d;", LIND_APPLICATION_ID);
        if ((rc = run_script(db, sql)) != SQLITE_OK)
            goto fail_rb;
    } else if ((rc = query_int(db, "SELECT version FROM schema_version", NULL, &version)) != SQLITE_OK) {
        goto fail_rb;
    }
    if (version > SCHEMA_VERSION || version < 0) {
        run_script(db, "ROLLBACK");
        return errmsg_set(-EINVAL, err, errlen,
                    "store %s has schema version %lld; this lind knows versions up to %d"
                    " (written by a newer lind?)", s->path, (long long)version, SCHEMA_VERSION);
    }
    for (int v = (int)version; v < SCHEMA_VERSION; v++) {
        char sql[80];
        snprintf(sql, sizeof sql, "UPDATE schema_version SET version = %d", v + 1);
        if ((rc = run_script(db, migrations[v])) != SQLITE_OK ||
            (rc = run_script(db, sql)) != SQLITE_OK)
            goto fail_rb;
    }
    /* Every open writes one header field and commits: the probe that this
     * database can be written at all (file mode, directory for the -wal,
     * read-only mount, full disk), so a daemon refuses at start instead of
     * failing every turn. An exclusive handle writes its pid there (what a
     * refused second opener reports); others rewrite the value they read. */
    int64_t owner = 0;
    if ((rc = query_int(db, "PRAGMA user_version", NULL, &owner)) != SQLITE_OK)
        goto fail_probe;
    {
        char sql[64];
        snprintf(sql, sizeof sql, "PRAGMA user_version = %lld",
                 s->lock_fd >= 0 ? (long long)getpid() : (long long)owner);
        if ((rc = run_script(db, sql)) != SQLITE_OK)
            goto fail_probe;
    }
    if ((rc = run_script(db, turns_schema)) != SQLITE_OK)
        goto fail_rb;
    if ((rc = run_script(db, "COMMIT")) != SQLITE_OK)
        goto fail_probe;
    return 0;
fail_rb: {
        int code = db_fail(s, rc, err, errlen, "schema migration failed");
        run_script(db, "ROLLBACK");
        return code;
    }
fail_probe:
    return unwritable(s, rc, err, errlen);
}

static const char *sq_where(const store *base)
{
    return ((const sqlite_store *)base)->path;
}

static void sq_close(store *base)
{
    sqlite_store *s = (sqlite_store *)base;
    for (int i = 0; i < Q_N; i++)
        sqlite3_finalize(s->q[i]);
    for (int i = 0; i < TQ_N; i++)
        sqlite3_finalize(s->tq[i]);
    sqlite3_close(s->db);
    if (s->lock_fd >= 0)
        close(s->lock_fd);   /* after sqlite3_close: see the top of the file */
    free(s->lost);
    free(s);
}

static int bind_record(sqlite3_stmt *st, const store_record *r, int origin, int64_t now)
{
    int rc = sqlite3_bind_text(st, 1, r->name, -1, SQLITE_STATIC);
    /* A zero-length blob must not bind as NULL. */
    if (rc == SQLITE_OK)
        rc = r->state_len ? sqlite3_bind_blob64(st, 2, r->state, r->state_len, SQLITE_STATIC)
                          : sqlite3_bind_zeroblob(st, 2, 0);
    if (rc == SQLITE_OK)
        rc = r->transcript_len
             ? sqlite3_bind_blob64(st, 3, r->transcript, r->transcript_len, SQLITE_STATIC)
             : sqlite3_bind_zeroblob(st, 3, 0);
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_int64(st, 4, (sqlite3_int64)r->tokens);
    if (rc == SQLITE_OK)
        rc = sqlite3_bind_int64(st, 5, now);
    if (rc == SQLITE_OK && sqlite3_bind_parameter_count(st) >= 7)   /* the inserts */
        rc = sqlite3_bind_int(st, 7, origin);
    return rc;
}

/* Step a statement that returns at most one row of integers (RETURNING,
 * SELECT): *got says whether a row came, cols of it land in v; reset after. */
static int step_ints(sqlite3_stmt *st, int64_t *v, int cols, int *got)
{
    int rc = sqlite3_step(st);
    *got = rc == SQLITE_ROW;
    for (int c = 0; *got && c < cols; c++)
        v[c] = sqlite3_column_int64(st, c);
    if (*got)   /* to the statement's end: an autocommit one commits there (see lease_step) */
        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {}
    int rr = sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    if (rc == SQLITE_DONE && rr != SQLITE_OK) rc = rr;
    if (rc != SQLITE_DONE && rc != SQLITE_ROW) *got = 0;
    return rc == SQLITE_DONE || rc == SQLITE_ROW ? SQLITE_OK : rc;
}

static int copy_blob(sqlite3_stmt *st, int col, uint8_t **out, size_t *len);

/* Record a saved turn's result (in the save's transaction) and drop the
 * session's results STORE_TURNS_KEEP or more versions old. */
static int turn_put(sqlite_store *s, const char *name, const store_turn_record *r, int64_t version)
{
    sqlite3_stmt *st = s->tq[TQ_PUT];
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, r->request_id, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, version);
    int rc = r->result_len ? sqlite3_bind_blob64(st, 4, r->result, r->result_len, SQLITE_STATIC)
                           : sqlite3_bind_zeroblob(st, 4, 0);
    rc = rc == SQLITE_OK ? run(st) : rc;
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    if (rc != SQLITE_OK)
        return rc;
    st = s->tq[TQ_PRUNE];
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, version - STORE_TURNS_KEEP);
    rc = run(st);
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return rc;
}

static int sq_turn_get(store *base, const char *name, const char *request_id, uint8_t **out,
                       size_t *len, uint64_t *version, char *err, size_t errlen)
{
    sqlite_store *s = (sqlite_store *)base;
    sqlite3_stmt *st = s->tq[TQ_GET];
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, request_id, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st), code = 0;
    if (rc == SQLITE_ROW) {
        if (copy_blob(st, 0, out, len) < 0)
            code = errmsg_set(-ENOMEM, err, errlen, "loading a turn's result: out of memory");
        else
            *version = (uint64_t)sqlite3_column_int64(st, 1);
    } else if (rc == SQLITE_DONE) {
        code = errmsg_set(-ENOENT, err, errlen, "no result recorded for request id '%s' of '%s'",
                          request_id, name);
    } else {
        code = db_fail(s, rc, err, errlen, "reading a turn's result failed");
    }
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return code;
}

static int sq_save(store *base, const store_record *recs, const uint64_t *expect,
                   const int *origin, int n,
                   const char *owner, store_save_result *res, char *err, size_t errlen,
                   const store_turn_record *turns, const char *const *keep_as)
{
    sqlite_store *s = (sqlite_store *)base;
    int64_t now = clock_wall_ms();
    int rc = check_identity(s, err, errlen);
    if (rc < 0)
        return rc;
    rc = run(s->q[Q_BEGIN]);
    if (rc != SQLITE_OK)
        return db_fail(s, rc, err, errlen, "cannot begin the save");
    for (int i = 0; i < n; i++) {
        /* Which write: unconditional, create-only, or the swap from expect[i]. */
        sqlite3_stmt *st = s->q[expect[i] == STORE_VERSION_ANY ? Q_UPSERT
                                : expect[i] == STORE_VERSION_NEW ? Q_INSERT_NEW : Q_CAS];
        int64_t v = 0;
        int got = 0, refused = -ECANCELED;   /* when the write returns no row */
        if (owner) {
            sqlite3_stmt *lq = s->q[Q_LEASE_HELD];
            sqlite3_bind_text(lq, 1, recs[i].name, -1, SQLITE_STATIC);
            sqlite3_bind_text(lq, 2, owner, -1, SQLITE_STATIC);
            sqlite3_bind_int64(lq, 3, clock_wall_ms());
            rc = step_ints(lq, &v, 1, &got);
            if (rc == SQLITE_OK && !got)
                refused = -ENOLCK;
        }
        if (rc == SQLITE_OK && refused != -ENOLCK) {
            rc = bind_record(st, &recs[i], origin[i], now);
            if (rc == SQLITE_OK && st == s->q[Q_CAS])
                rc = sqlite3_bind_int64(st, 6, (sqlite3_int64)expect[i]);
            if (rc == SQLITE_OK)
                rc = step_ints(st, &v, 1, &got);
            else {
                sqlite3_reset(st);
                sqlite3_clear_bindings(st);
            }
        }
        if (rc == SQLITE_OK && !got) {
            /* Not written: report where the row is instead. */
            sqlite3_bind_text(s->q[Q_VERSION], 1, recs[i].name, -1, SQLITE_STATIC);
            rc = step_ints(s->q[Q_VERSION], &v, 1, &got);
            res[i] = (store_save_result){ .rc = refused, .version = got ? (uint64_t)v : 0 };
        } else {
            res[i] = (store_save_result){ .version = (uint64_t)v };
            if (rc == SQLITE_OK && turns && turns[i].request_id)
                rc = turn_put(s, recs[i].name, &turns[i], v);
            if (rc == SQLITE_OK && keep_as && keep_as[i]) {
                sqlite3_stmt *kq = s->q[Q_KEEP];
                sqlite3_bind_text(kq, 1, recs[i].name, -1, SQLITE_STATIC);
                sqlite3_bind_text(kq, 2, keep_as[i], -1, SQLITE_STATIC);
                sqlite3_bind_int64(kq, 3, now);
                rc = run(kq);
                res[i].kept = rc == SQLITE_OK && sqlite3_changes(s->db) > 0;
            }
        }
        if (rc != SQLITE_OK) {
            char what[STORE_NAME_MAX + 32];
            snprintf(what, sizeof what, "saving '%s'", recs[i].name);
            int code = db_fail(s, rc, err, errlen, what);
            rollback(s);
            return code == -EEXIST ? -EIO : code;
        }
    }
    /* Records refused by their checks are in res; store.c reports them. */
    rc = run(s->q[Q_COMMIT]);
    if (rc != SQLITE_OK) {
        int code = db_fail(s, rc, err, errlen, "commit failed");
        rollback(s);
        return code;
    }
    return check_identity(s, err, errlen);
}

static int sq_create(store *base, const store_record *rec, char *err, size_t errlen)
{
    sqlite_store *s = (sqlite_store *)base;
    sqlite3_stmt *st = s->q[Q_INSERT];
    int rc = check_identity(s, err, errlen);
    if (rc < 0)
        return rc;
    rc = bind_record(st, rec, STORE_ORIGIN_SOCKET, clock_wall_ms());
    if (rc == SQLITE_OK)
        rc = run(st);
    else {
        sqlite3_reset(st);
        sqlite3_clear_bindings(st);
    }
    if ((rc & 0xFF) == SQLITE_CONSTRAINT)
        return errmsg_set(-EEXIST, err, errlen, "a session named '%s' already exists", rec->name);
    if (rc != SQLITE_OK)
        return db_fail(s, rc, err, errlen, "insert failed");
    return check_identity(s, err, errlen);
}

static int copy_blob(sqlite3_stmt *st, int col, uint8_t **out, size_t *len)
{
    const void *p = sqlite3_column_blob(st, col);
    size_t n = (size_t)sqlite3_column_bytes(st, col);
    /* One spare byte so an empty blob is still a non-NULL buffer. */
    *out = malloc(n + 1);
    if (!*out)
        return -ENOMEM;
    if (n)
        memcpy(*out, p, n);
    *len = n;
    return 0;
}

static int sq_load(store *base, const char *name, store_loaded *out, char *err, size_t errlen)
{
    sqlite_store *s = (sqlite_store *)base;
    sqlite3_stmt *st = s->q[Q_LOAD];
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st), code = 0;
    if (rc == SQLITE_ROW) {
        if (copy_blob(st, 0, &out->state, &out->state_len) < 0 ||
            copy_blob(st, 1, &out->transcript, &out->transcript_len) < 0) {
            store_loaded_free(out);
            code = errmsg_set(-ENOMEM, err, errlen, "loading '%s': out of memory", name);
        } else {
            out->tokens = (uint64_t)sqlite3_column_int64(st, 2);
            out->created_ms = sqlite3_column_int64(st, 3);
            out->updated_ms = sqlite3_column_int64(st, 4);
            out->version = (uint64_t)sqlite3_column_int64(st, 5);
        }
    } else if (rc == SQLITE_DONE) {
        code = errmsg_set(-ENOENT, err, errlen, "no session named '%s'", name);
    } else {
        code = db_fail(s, rc, err, errlen, "load failed");
    }
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return code;
}

static int sq_list(store *base, store_info **out, size_t *n, char *err, size_t errlen)
{
    sqlite_store *s = (sqlite_store *)base;
    sqlite3_stmt *st = s->q[Q_LIST];
    store_info *v = NULL;
    size_t cnt = 0, cap = 0;
    int rc, code = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (cnt == cap) {
            size_t nc = cap ? cap * 2 : 16;
            store_info *nv = realloc(v, nc * sizeof *nv);
            if (!nv) {
                code = errmsg_set(-ENOMEM, err, errlen, "listing sessions: out of memory");
                break;
            }
            v = nv;
            cap = nc;
        }
        store_info *e = &v[cnt++];
        memset(e, 0, sizeof *e);
        const char *nm = (const char *)sqlite3_column_text(st, 0);
        if (nm)
            snprintf(e->name, sizeof e->name, "%s", nm);
        e->tokens = (uint64_t)sqlite3_column_int64(st, 1);
        e->state_len = (size_t)sqlite3_column_int64(st, 2);
        e->created_ms = sqlite3_column_int64(st, 3);
        e->updated_ms = sqlite3_column_int64(st, 4);
        e->version = (uint64_t)sqlite3_column_int64(st, 5);
        e->bytes = (uint64_t)sqlite3_column_int64(st, 6);
        e->origin = sqlite3_column_int(st, 7);
    }
    if (!code && rc != SQLITE_DONE)
        code = db_fail(s, rc, err, errlen, "list failed");
    sqlite3_reset(st);
    if (code) {
        free(v);
        return code;
    }
    *out = v;
    *n = cnt;
    return 0;
}

static int sq_count(store *base, size_t *n, char *err, size_t errlen)
{
    sqlite_store *s = (sqlite_store *)base;
    sqlite3_stmt *st = s->q[Q_COUNT];
    int rc = sqlite3_step(st), code = 0;
    if (rc == SQLITE_ROW)
        *n = (size_t)sqlite3_column_int64(st, 0);
    else
        code = db_fail(s, rc, err, errlen, "count failed");
    sqlite3_reset(st);
    return code;
}

static int sq_delete(store *base, const char *name, char *err, size_t errlen)
{
    sqlite_store *s = (sqlite_store *)base;
    sqlite3_stmt *st = s->q[Q_DELETE];
    int rc = check_identity(s, err, errlen);
    if (rc < 0)
        return rc;
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    rc = run(st);
    if (rc != SQLITE_OK)
        return db_fail(s, rc, err, errlen, "delete failed");
    if (sqlite3_changes(s->db) == 0)
        return errmsg_set(-ENOENT, err, errlen, "no session named '%s'", name);
    return check_identity(s, err, errlen);
}

static int sq_fork(store *base, const char *src, const char *dst, char *err, size_t errlen)
{
    sqlite_store *s = (sqlite_store *)base;
    sqlite3_stmt *st = s->q[Q_FORK];
    int rc = check_identity(s, err, errlen);
    if (rc < 0)
        return rc;
    sqlite3_bind_text(st, 1, src, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, dst, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, clock_wall_ms());
    rc = run(st);
    if ((rc & 0xFF) == SQLITE_CONSTRAINT)
        return errmsg_set(-EEXIST, err, errlen, "a session named '%s' already exists", dst);
    if (rc != SQLITE_OK)
        return db_fail(s, rc, err, errlen, "fork failed");
    if (sqlite3_changes(s->db) == 0)
        return errmsg_set(-ENOENT, err, errlen, "no session named '%s'", src);
    return check_identity(s, err, errlen);
}

/* ---- retention ---------------------------------------------------------- */

/* A retention statement, prepared the first time it is needed. */
static sqlite3_stmt *retention_q(sqlite_store *s, int q, char *err, size_t errlen)
{
    if (!s->q[q]) {
        int rc = sqlite3_prepare_v3(s->db, queries[q], -1, SQLITE_PREPARE_PERSISTENT, &s->q[q], NULL);
        if (rc != SQLITE_OK) {
            db_fail(s, rc, err, errlen, "cannot prepare the retention statements");
            return NULL;
        }
    }
    return s->q[q];
}

static int sq_usage(store *base, size_t *n, uint64_t *bytes, char *err, size_t errlen)
{
    sqlite_store *s = (sqlite_store *)base;
    int64_t v[2] = { 0, 0 };
    sqlite3_stmt *st = retention_q(s, Q_USAGE, err, errlen);
    if (!st)
        return map_rc(sqlite3_errcode(s->db));
    int got = 0, rc = step_ints(st, v, 2, &got);
    if (rc != SQLITE_OK || !got)
        return db_fail(s, rc != SQLITE_OK ? rc : SQLITE_ERROR, err, errlen, "usage failed");
    *n = (size_t)v[0];
    *bytes = (uint64_t)v[1];
    return 0;
}

/* Step a bound DELETE ... RETURNING bytes to its end (its commit), counting. */
static int collect(sqlite_store *s, int q, uint64_t *n, uint64_t *freed, char *err,
                   size_t errlen, const char *what)
{
    int rc = check_identity(s, err, errlen);
    if (rc < 0) {
        sqlite3_reset(s->q[q]);
        sqlite3_clear_bindings(s->q[q]);
        return rc;
    }
    sqlite3_stmt *st = s->q[q];
    uint64_t cnt = 0, sum = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        cnt++;
        sum += (uint64_t)sqlite3_column_int64(st, 0);
    }
    int rr = sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    if (rc == SQLITE_DONE && rr != SQLITE_OK) rc = rr;
    if (rc != SQLITE_DONE)
        return db_fail(s, rc, err, errlen, what);   /* rolled back: nothing went */
    *n += cnt;
    *freed += sum;
    return check_identity(s, err, errlen);
}

static int sq_expire(store *base, int64_t resp_ttl, int64_t sess_ttl, int limit,
                     const char *owner, uint64_t *n, uint64_t *freed, char *err, size_t errlen)
{
    sqlite_store *s = (sqlite_store *)base;
    sqlite3_stmt *st = retention_q(s, Q_EXPIRE, err, errlen);
    if (!st)
        return map_rc(sqlite3_errcode(s->db));
    sqlite3_bind_int64(st, 1, resp_ttl);
    sqlite3_bind_int64(st, 2, sess_ttl);
    sqlite3_bind_int64(st, 3, clock_wall_ms());
    sqlite3_bind_int(st, 4, limit);
    if (owner)
        sqlite3_bind_text(st, 5, owner, -1, SQLITE_STATIC);
    return collect(s, Q_EXPIRE, n, freed, err, errlen, "collecting expired sessions failed");
}

static int sq_evict(store *base, uint64_t excess, int limit, const char *owner, uint64_t *n,
                    uint64_t *freed, char *err, size_t errlen)
{
    sqlite_store *s = (sqlite_store *)base;
    sqlite3_stmt *st = retention_q(s, Q_EVICT, err, errlen);
    if (!st)
        return map_rc(sqlite3_errcode(s->db));
    sqlite3_bind_int64(st, 1, clock_wall_ms());
    sqlite3_bind_int64(st, 2, excess > INT64_MAX ? INT64_MAX : (int64_t)excess);
    sqlite3_bind_int(st, 3, limit);
    if (owner)
        sqlite3_bind_text(st, 4, owner, -1, SQLITE_STATIC);
    return collect(s, Q_EVICT, n, freed, err, errlen, "collecting sessions over the quota failed");
}

static int sq_remove(store *base, const char *prefix, int64_t older_ms, int limit, uint64_t *n,
                     uint64_t *freed, char *err, size_t errlen)
{
    sqlite_store *s = (sqlite_store *)base;
    sqlite3_stmt *st = retention_q(s, Q_REMOVE, err, errlen);
    if (!st)
        return map_rc(sqlite3_errcode(s->db));
    int64_t now = clock_wall_ms();
    sqlite3_bind_text(st, 1, prefix, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, older_ms ? now - older_ms : 0);
    sqlite3_bind_int64(st, 3, now);
    sqlite3_bind_int(st, 4, limit);
    return collect(s, Q_REMOVE, n, freed, err, errlen, "removing sessions failed");
}

static int sq_shrink(store *base, char *err, size_t errlen)
{
    sqlite_store *s = (sqlite_store *)base;
    int rc = check_identity(s, err, errlen);
    if (rc < 0)
        return rc;
    rc = sqlite3_wal_checkpoint_v2(s->db, NULL, SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL);
    if (rc != SQLITE_OK)
        return db_fail(s, rc, err, errlen, "checkpoint failed");
    return 0;
}

/* ---- leases ------------------------------------------------------------- */

/* The lease on name as it stands (owner "" when none). */
static int lease_get(sqlite_store *s, const char *name, store_lease *out)
{
    sqlite3_stmt *st = s->q[Q_LEASE_GET];
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    memset(out, 0, sizeof *out);
    out->now_ms = clock_wall_ms();
    if (rc == SQLITE_ROW) {
        snprintf(out->owner, sizeof out->owner, "%s", (const char *)sqlite3_column_text(st, 0));
        out->expires_ms = sqlite3_column_int64(st, 1);
    }
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? SQLITE_OK : rc;
}

/* Run a lease statement binding (name, owner, now, ttl); a returned row
 * (owner, expires_ms) is the lease we now hold. */
static int lease_step(sqlite_store *s, int q, const char *name, const char *owner, int64_t ttl,
                      store_lease *out, int *got)
{
    sqlite3_stmt *st = s->q[q];
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, owner, -1, SQLITE_STATIC);
    int64_t now = clock_wall_ms();
    sqlite3_bind_int64(st, 3, now);
    sqlite3_bind_int64(st, 4, ttl);
    int rc = sqlite3_step(st);
    *got = rc == SQLITE_ROW;
    if (*got) {
        out->now_ms = now;
        snprintf(out->owner, sizeof out->owner, "%s", (const char *)sqlite3_column_text(st, 0));
        out->expires_ms = sqlite3_column_int64(st, 1);
        /* With RETURNING the row comes before the statement ends: its
         * (autocommit) commit happens at the next step, and may fail there
         * (the daemon's fault sweep found a lease reported held whose commit
         * had failed). Step to the end so a failed commit is seen. */
        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {}
    }
    int rr = sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    if (rc == SQLITE_DONE && rr != SQLITE_OK) rc = rr;
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) *got = 0;
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? SQLITE_OK : rc;
}

static int sq_lease_acquire(store *base, const char *name, const char *owner, int64_t ttl_ms,
                            store_lease *out, char *err, size_t errlen)
{
    sqlite_store *s = (sqlite_store *)base;
    int ic = check_identity(s, err, errlen);   /* a replaced file holds no lease of ours */
    if (ic < 0)
        return ic;
    /* Taking and reading the holder are two statements: if the holder let go
     * in between, try again. */
    for (int attempt = 0; attempt < 3; attempt++) {
        int got = 0, rc = lease_step(s, Q_LEASE_TAKE, name, owner, ttl_ms, out, &got);
        if (rc == SQLITE_OK && got)
            return check_identity(s, err, errlen);
        if (rc == SQLITE_OK)
            rc = lease_get(s, name, out);
        if (rc != SQLITE_OK)
            return db_fail(s, rc, err, errlen, "lease failed");
        if (out->owner[0])
            return errmsg_set(-EAGAIN, err, errlen,
                              "session '%s' is leased by '%s' for %lld ms more", name, out->owner,
                              (long long)(out->expires_ms - clock_wall_ms()));
    }
    return errmsg_set(-EBUSY, err, errlen, "lease of '%s' keeps changing hands", name);
}

/* Every name's lease taken in one transaction: one commit (one fsync under
 * STORE_SYNC_FULL) for the lot, all or nothing. Inside it nobody can let a
 * lease go between the take and the read of its holder. */
static int sq_lease_acquire_many(store *base, const char *const *names, size_t n, const char *owner,
                                 int64_t ttl_ms, int *rcs, store_lease *out, char *err,
                                 size_t errlen)
{
    sqlite_store *s = (sqlite_store *)base;
    int rc = check_identity(s, err, errlen);   /* a replaced file holds no lease of ours */
    if (rc < 0)
        return rc;
    rc = run(s->q[Q_BEGIN]);
    if (rc != SQLITE_OK)
        return db_fail(s, rc, err, errlen, "cannot begin taking the leases");
    for (size_t i = 0; i < n; i++) {
        int got = 0;
        rc = lease_step(s, Q_LEASE_TAKE, names[i], owner, ttl_ms, &out[i], &got);
        if (rc == SQLITE_OK && !got)
            rc = lease_get(s, names[i], &out[i]);
        if (rc == SQLITE_OK && !got && !out[i].owner[0])
            rc = SQLITE_BUSY;   /* not taken, yet nobody holds it: cannot be in one transaction */
        if (rc != SQLITE_OK) {
            char what[STORE_NAME_MAX + 64];
            snprintf(what, sizeof what, "taking the lease of '%s'", names[i]);
            int code = db_fail(s, rc, err, errlen, what);
            rollback(s);
            return code;
        }
        rcs[i] = got ? 0 : -EAGAIN;
    }
    rc = run(s->q[Q_COMMIT]);
    if (rc != SQLITE_OK) {
        int code = db_fail(s, rc, err, errlen, "taking the leases: commit failed");
        rollback(s);
        return code;
    }
    return check_identity(s, err, errlen);
}

static int sq_lease_renew(store *base, const char *name, const char *owner, int64_t ttl_ms,
                          store_lease *out, char *err, size_t errlen)
{
    sqlite_store *s = (sqlite_store *)base;
    int ic = check_identity(s, err, errlen);
    if (ic < 0)
        return ic;
    int got = 0, rc = lease_step(s, Q_LEASE_RENEW, name, owner, ttl_ms, out, &got);
    if (rc == SQLITE_OK && got)
        return check_identity(s, err, errlen);
    if (rc == SQLITE_OK)
        rc = lease_get(s, name, out);
    if (rc != SQLITE_OK)
        return db_fail(s, rc, err, errlen, "lease renewal failed");
    return errmsg_set(-ENOLCK, err, errlen, "lease of '%s' is not held by '%s'%s%s%s", name, owner,
                      out->owner[0] ? " (held by '" : " (nobody holds it)", out->owner,
                      out->owner[0] ? "')" : "");
}

/* Every name's renewal in one transaction: one commit (one fsync under
 * STORE_SYNC_FULL) for the lot, all or nothing. */
static int sq_lease_renew_many(store *base, const char *const *names, size_t n, const char *owner,
                               int64_t ttl_ms, uint8_t *lost, store_lease *held, char *err,
                               size_t errlen)
{
    sqlite_store *s = (sqlite_store *)base;
    int rc = check_identity(s, err, errlen);
    if (rc < 0)
        return rc;
    rc = run(s->q[Q_BEGIN]);
    if (rc != SQLITE_OK)
        return db_fail(s, rc, err, errlen, "cannot begin the lease renewal");
    for (size_t i = 0; i < n && rc == SQLITE_OK; i++) {
        store_lease cur;
        int got = 0;
        rc = lease_step(s, Q_LEASE_RENEW, names[i], owner, ttl_ms, &cur, &got);
        if (rc == SQLITE_OK && !got) {
            lost[i] = 1;
            if (held)
                rc = lease_get(s, names[i], &held[i]);
        }
        if (rc != SQLITE_OK) {
            char what[STORE_NAME_MAX + 64];
            snprintf(what, sizeof what, "renewing the lease of '%s'", names[i]);
            int code = db_fail(s, rc, err, errlen, what);
            rollback(s);
            return code;
        }
    }
    rc = run(s->q[Q_COMMIT]);
    if (rc != SQLITE_OK) {
        int code = db_fail(s, rc, err, errlen, "lease renewal: commit failed");
        rollback(s);
        return code;
    }
    return check_identity(s, err, errlen);
}

static int sq_lease_release(store *base, const char *name, const char *owner, char *err,
                            size_t errlen)
{
    sqlite_store *s = (sqlite_store *)base;
    sqlite3_stmt *st = s->q[Q_LEASE_RELEASE];
    int rc = check_identity(s, err, errlen);
    if (rc < 0)
        return rc;
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, owner, -1, SQLITE_STATIC);
    rc = run(st);
    if (rc != SQLITE_OK)
        return db_fail(s, rc, err, errlen, "lease release failed");
    if (sqlite3_changes(s->db) == 0)
        return errmsg_set(-ENOLCK, err, errlen, "lease of '%s' is not held by '%s'", name, owner);
    return check_identity(s, err, errlen);
}

static const store_ops sqlite_ops = {
    .name = "sqlite",
    .close = sq_close,
    .where = sq_where,
    .save = sq_save,
    .create = sq_create,
    .load = sq_load,
    .list = sq_list,
    .count = sq_count,
    .usage = sq_usage,
    .expire = sq_expire,
    .evict = sq_evict,
    .remove = sq_remove,
    .shrink = sq_shrink,
    .del = sq_delete,
    .fork = sq_fork,
    .lease_acquire = sq_lease_acquire,
    .lease_acquire_many = sq_lease_acquire_many,
    .lease_renew = sq_lease_renew,
    .lease_renew_many = sq_lease_renew_many,
    .lease_release = sq_lease_release,
    .turn_get = sq_turn_get,
};

/* The pid an exclusive holder of `path` recorded (0 if none readable): a
 * read-only look, which WAL mode allows while the holder writes. */
static long long holder_pid(const char *path)
{
    sqlite3 *db = NULL;
    int64_t pid = 0;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, NULL) == SQLITE_OK) {
        sqlite3_busy_timeout(db, 1000);
        if (query_int(db, "PRAGMA user_version", NULL, &pid) != SQLITE_OK)
            pid = 0;
    }
    sqlite3_close(db);
    return (long long)pid;
}

int store_sqlite_open(const char *path, const store_options *opt, store **out,
                      char *err, size_t errlen)
{
    size_t plen = strlen(path);
    sqlite_store *s = calloc(1, sizeof *s + plen + 1);
    if (!s)
        return errmsg_set(-ENOMEM, err, errlen, "store %s: out of memory", path);
    memcpy(s->path, path, plen + 1);
    s->base.ops = &sqlite_ops;
    s->lock_fd = -1;
    s->on_lost = opt->on_lost;
    s->on_lost_arg = opt->on_lost_arg;
    /* Sessions hold users' conversations: a new store is private to its
     * owner (SQLite gives the -wal and -shm files the same mode). Opening it
     * read-write here is also the first writability check, with the
     * system's own reason (a missing directory, a read-only file or mount). */
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
        int e = errno;
        free(s);
        if (e == ENOENT)
            return errmsg_set(-ENOENT, err, errlen, "cannot open store %s: its directory does"
                              " not exist", path);
        return errmsg_set(-e, err, errlen, "store %s is not writable: opening it for writing:"
                          " %s", path, strerror(e));
    }
    struct stat fst;
    if (fstat(fd, &fst) != 0 || !S_ISREG(fst.st_mode)) {
        close(fd);
        free(s);
        return errmsg_set(-EINVAL, err, errlen, "store %s is not a regular file", path);
    }
    s->dev = fst.st_dev;
    s->ino = fst.st_ino;
    if (opt->exclusive) {
        s->lock_fd = fd;
        if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
            int e = errno;
            long long pid = holder_pid(path);
            close(fd);
            free(s);
            if (e != EWOULDBLOCK)
                return errmsg_set(-e, err, errlen, "store %s: cannot lock it: %s", path,
                                  strerror(e));
            char who[64] = "a process whose pid it did not record";
            if (pid > 0)
                snprintf(who, sizeof who, "pid %lld", pid);
            return errmsg_set(-EBUSY, err, errlen, "store %s is in use by another lind serve (%s);"
                              " one database serves one daemon", path, who);
        }
    } else {
        close(fd);   /* before SQLite opens the file: see the top of the file */
    }
    int rc = sqlite3_open_v2(path, &s->db,
                             SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                             NULL);
    int code;
    if (rc != SQLITE_OK) {
        code = errmsg_set(rc == SQLITE_CANTOPEN ? -EIO : map_rc(rc), err, errlen,
                    "cannot open store %s: %s", path,
                    s->db ? sqlite3_errmsg(s->db) : sqlite3_errstr(rc));
        goto bad;
    }
    sqlite3_extended_result_codes(s->db, 1);
    sqlite3_busy_timeout(s->db, opt->busy_timeout_ms);
    /* WAL: readers never block the writer, a commit appends to the log. */
    sqlite3_stmt *st = NULL;
    rc = sqlite3_prepare_v2(s->db, "PRAGMA journal_mode = WAL", -1, &st, NULL);
    if (rc == SQLITE_OK) {
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
            const char *mode = (const char *)sqlite3_column_text(st, 0);
            rc = mode && strcmp(mode, "wal") == 0 ? SQLITE_OK : SQLITE_ERROR;
            if (rc != SQLITE_OK) {
                code = errmsg_set(-EIO, err, errlen, "store %s: cannot use WAL mode (got %s)",
                            path, mode ? mode : "nothing");
                sqlite3_finalize(st);
                goto bad;
            }
        }
        sqlite3_finalize(st);
    }
    if (rc != SQLITE_OK) {
        if ((rc & 0xFF) == SQLITE_NOTADB)
            code = errmsg_set(-EINVAL, err, errlen, "store %s: not an SQLite database, not a lind store",
                        path);
        else if ((rc & 0xFF) == SQLITE_READONLY || (rc & 0xFF) == SQLITE_CANTOPEN)
            code = unwritable(s, rc, err, errlen);
        else
            code = db_fail(s, rc, err, errlen, "cannot set WAL mode");
        goto bad;
    }
    rc = run_script(s->db, opt->sync == STORE_SYNC_FULL
                           ? "PRAGMA synchronous = FULL" : "PRAGMA synchronous = NORMAL");
    if (rc == SQLITE_OK)
        rc = run_script(s->db, "PRAGMA journal_size_limit = 67108864");
    if (rc != SQLITE_OK) {
        code = db_fail(s, rc, err, errlen, "cannot set durability");
        goto bad;
    }
    if ((code = migrate(s, err, errlen)) < 0)
        goto bad;
    remember_wal(s);
    for (int i = 0; i < Q_RETENTION; i++) {   /* retention's on first use (retention_q) */
        rc = sqlite3_prepare_v3(s->db, queries[i], -1, SQLITE_PREPARE_PERSISTENT, &s->q[i], NULL);
        if (rc != SQLITE_OK) {
            code = db_fail(s, rc, err, errlen, "cannot prepare statements");
            goto bad;
        }
    }
    for (int i = 0; i < TQ_N; i++) {
        rc = sqlite3_prepare_v3(s->db, turn_queries[i], -1, SQLITE_PREPARE_PERSISTENT, &s->tq[i], NULL);
        if (rc != SQLITE_OK) {
            code = db_fail(s, rc, err, errlen, "cannot prepare the turn results' statements");
            goto bad;
        }
    }
    *out = &s->base;
    return 0;
bad:
    for (int i = 0; i < Q_N; i++)
        sqlite3_finalize(s->q[i]);
    for (int i = 0; i < TQ_N; i++)
        sqlite3_finalize(s->tq[i]);
    sqlite3_close(s->db);
    if (s->lock_fd >= 0)
        close(s->lock_fd);
    free(s);
    return code;
}
