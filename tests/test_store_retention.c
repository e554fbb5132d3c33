/* tests/test_store_retention.c — retention in the store (state/store.h,
 * docs/STATE.md "Retention"): each row's origin and bytes, collection by
 * time to live, by quota (ephemeral sessions only, least recently saved
 * first, named ones never), removal by prefix and age, leased sessions
 * never collected, and the migration that adds the origin to a store
 * written before it. Every case runs against SQLite, then (cases named
 * *_pg) against a PostgreSQL server this test starts (tests/pgserver.h). */
#include "tests/check.h"
#include "tests/pgserver.h"
#include "state/store.h"

#include <errno.h>
#include <libpq-fe.h>
#include <sqlite3.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

static char dir[64];
static int dbseq;
static int use_pg;
static pgserver pg;
static uint8_t blob[20000];
static char cur[256];     /* the current case's store, for raw() */

static const char *newdb(void)
{
    static char path[256];
    if (use_pg) {
        char db[32], why[512];
        snprintf(db, sizeof db, "r%d", ++dbseq);
        if (pgserver_createdb(&pg, db, why, sizeof why) < 0)
            CHECK(0, "create database: %s", why);
        pgserver_uri(&pg, db, path, sizeof path);
    } else {
        snprintf(path, sizeof path, "%s/r%d.db", dir, ++dbseq);
    }
    snprintf(cur, sizeof cur, "%s", path);
    return path;
}

static store *open_ok(const char *path)
{
    store *s = NULL;
    char err[256] = "";
    int rc = store_open(path, NULL, &s, err, sizeof err);
    CHECK(rc == 0 && s, "open %s: %d %s", path, rc, err);
    return s;
}

/* Raw SQL on the store's database, behind the store's back. */
static int raw(const char *path, const char *sql)
{
    if (use_pg) {
        PGconn *c = PQconnectdb(path);
        PGresult *r = PQexec(c, sql);
        int ok = PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK;
        CHECK(ok, "%s: %s", sql, PQerrorMessage(c));
        PQclear(r);
        PQfinish(c);
        return ok ? 0 : -1;
    }
    sqlite3 *db;
    char *msg = NULL;
    sqlite3_open(path, &db);
    int rc = sqlite3_exec(db, sql, NULL, NULL, &msg);
    CHECK(rc == SQLITE_OK, "%s: %s", sql, msg ? msg : "?");
    sqlite3_free(msg);
    sqlite3_close(db);
    return rc == SQLITE_OK ? 0 : -1;
}

/* Save `name` holding `len` state bytes and 10 transcript bytes. */
static int save(store *s, const char *name, size_t len, int origin)
{
    store_record r = { name, blob, len, blob, 10, 1 };
    store_save_result res;
    uint64_t any = STORE_VERSION_ANY;
    char err[256] = "";
    int rc = store_save_turns(s, &r, NULL, &any, &origin, 1, NULL, &res, err, sizeof err);
    CHECK(rc == 0, "save %s: %s", name, err);
    return rc;
}

static const store_info *find(const store_info *v, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(v[i].name, name)) return &v[i];
    return NULL;
}

static int exists(store *s, const char *name)
{
    store_loaded l;
    char err[256];
    int rc = store_load(s, name, &l, err, sizeof err);
    if (rc == 0) store_loaded_free(&l);
    return rc == 0;
}

static void origins_and_bytes(void)
{
    store *s = open_ok(newdb());
    if (!s) return;
    char err[256] = "";
    save(s, "sock", 1000, STORE_ORIGIN_SOCKET);
    save(s, "named", 2000, STORE_ORIGIN_HTTP);
    save(s, "resp-0001", 3000, STORE_ORIGIN_HTTP);   /* the prefix decides */
    save(s, "chat-0001", 4000, STORE_ORIGIN_SOCKET);
    save(s, "named", 2500, STORE_ORIGIN_SOCKET);     /* a later save keeps the origin */
    CHECK(store_fork(s, "named", "copy", err, sizeof err) == 0, "fork: %s", err);
    CHECK(store_fork(s, "sock", "resp-0002", err, sizeof err) == 0, "fork: %s", err);
    store_info *v = NULL;
    size_t n = 0;
    CHECK(store_list(s, &v, &n, err, sizeof err) == 0 && n == 6, "list %zu: %s", n, err);
    struct { const char *name; int origin; uint64_t bytes; } want[] = {
        { "sock", STORE_ORIGIN_SOCKET, 1010 }, { "named", STORE_ORIGIN_HTTP, 2510 },
        { "resp-0001", STORE_ORIGIN_RESPONSE, 3010 }, { "chat-0001", STORE_ORIGIN_CHAT, 4010 },
        { "copy", STORE_ORIGIN_HTTP, 2510 }, { "resp-0002", STORE_ORIGIN_RESPONSE, 1010 },
    };
    uint64_t total = 0;
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const store_info *e = find(v, n, want[i].name);
        CHECK(e && e->origin == want[i].origin && e->bytes == want[i].bytes,
              "%s: origin %s bytes %llu", want[i].name, e ? store_origin_name(e->origin) : "-",
              e ? (unsigned long long)e->bytes : 0ull);
        total += want[i].bytes;
    }
    free(v);
    size_t cnt = 0;
    uint64_t bytes = 0;
    CHECK(store_usage(s, &cnt, &bytes, err, sizeof err) == 0 && cnt == 6 && bytes == total,
          "usage %zu sessions %llu bytes (want %llu): %s", cnt, (unsigned long long)bytes,
          (unsigned long long)total, err);
    store_close(s);
}

static void ttl_collects(void)
{
    store *s = open_ok(newdb());
    if (!s) return;
    char err[256] = "";
    save(s, "resp-a", 100, STORE_ORIGIN_RESPONSE);
    save(s, "chat-b", 100, STORE_ORIGIN_CHAT);
    save(s, "resp-leased", 100, STORE_ORIGIN_RESPONSE);
    save(s, "alice", 100, STORE_ORIGIN_SOCKET);
    save(s, "bob", 100, STORE_ORIGIN_HTTP);
    store_lease l;
    CHECK(store_lease_acquire(s, "resp-leased", "node-a", 3600000, &l, err, sizeof err) == 0,
          "lease: %s", err);
    save(s, "resp-new", 100, STORE_ORIGIN_RESPONSE);
    /* All but resp-new last saved in 1970 (resp-a first): past an hour's
     * ttl whatever the machine's speed. */
    const char *tab = use_pg ? "lind_sessions" : "sessions";
    char sql[200];
    snprintf(sql, sizeof sql, "UPDATE %s SET updated_ms = 2000 WHERE name <> 'resp-new'", tab);
    raw(cur, sql);
    snprintf(sql, sizeof sql, "UPDATE %s SET updated_ms = 1000 WHERE name = 'resp-a'", tab);
    raw(cur, sql);
    /* Response ttl only: the old ephemeral sessions go, oldest first, a
     * batch at a time; the leased one and the named ones stay. */
    store_gc_policy p = { .response_ttl_ms = 3600000, .batch = 1 };
    store_gc_result r;
    CHECK(store_gc(s, &p, &r, err, sizeof err) == 0 && r.expired == 1 && r.more == 1 &&
          r.freed == 110 && r.sessions == 5, "first batch: %llu expired, more %d, %zu left: %s",
          (unsigned long long)r.expired, r.more, r.sessions, err);
    CHECK(!exists(s, "resp-a") && exists(s, "chat-b"), "oldest first");
    CHECK(store_gc(s, &p, &r, err, sizeof err) == 0 && r.expired == 1, "second batch: %s", err);
    CHECK(store_gc(s, &p, &r, err, sizeof err) == 0 && r.expired == 0 && r.more == 0,
          "then nothing: %llu", (unsigned long long)r.expired);
    CHECK(!exists(s, "chat-b") && exists(s, "resp-leased") && exists(s, "resp-new") &&
          exists(s, "alice") && exists(s, "bob"), "kept: leased, recent, named");
    /* Session ttl: idle named sessions go too, but not one node-a leases. */
    CHECK(store_lease_acquire(s, "alice", "node-a", 3600000, &l, err, sizeof err) == 0,
          "lease: %s", err);
    p = (store_gc_policy){ .response_ttl_ms = 3600000, .session_ttl_ms = 3600000, .batch = 10,
                           .owner = "node-b" };
    CHECK(store_gc(s, &p, &r, err, sizeof err) == 0 && r.expired == 1 && r.more == 0,
          "named expired: %llu: %s", (unsigned long long)r.expired, err);
    CHECK(exists(s, "alice") && !exists(s, "bob") && exists(s, "resp-leased"),
          "another node's leases keep");
    /* The collecting node's own lease keeps a named session, not an
     * ephemeral one (it serves those from memory). */
    p.owner = "node-a";
    CHECK(store_gc(s, &p, &r, err, sizeof err) == 0 && r.expired == 1 && r.sessions == 2,
          "own ephemeral collected: %llu", (unsigned long long)r.expired);
    CHECK(exists(s, "alice") && !exists(s, "resp-leased") && exists(s, "resp-new"),
          "own named one kept");
    store_close(s);
}

static void quota_evicts_ephemeral_only(void)
{
    store *s = open_ok(newdb());
    if (!s) return;
    char err[256] = "";
    char name[32];
    for (int i = 0; i < 3; i++) {
        snprintf(name, sizeof name, "named-%d", i);
        save(s, name, 9990, i ? STORE_ORIGIN_HTTP : STORE_ORIGIN_SOCKET);
    }
    for (int i = 0; i < 10; i++) {
        snprintf(name, sizeof name, "%s-%02d", i % 2 ? "chat" : "resp", i);
        save(s, name, 9990, i % 2 ? STORE_ORIGIN_CHAT : STORE_ORIGIN_RESPONSE);
    }
    /* The same millisecond orders by name; make the order of saves the
     * order of use, whatever the clock's resolution. */
    for (int i = 0; i < 10; i++) {
        char sql[160];
        snprintf(sql, sizeof sql, "UPDATE %s SET updated_ms = %d WHERE name = '%s-%02d'",
                 use_pg ? "lind_sessions" : "sessions", 1000 + i, i % 2 ? "chat" : "resp", i);
        raw(cur, sql);
    }
    /* 13 sessions of 10,000 bytes; quota 80,000: 5 ephemeral must go, the
     * 5 least recently saved, at most 2 per call. */
    store_gc_policy p = { .max_bytes = 80000, .batch = 2 };
    store_gc_result r;
    int calls = 0;
    uint64_t prev = UINT64_MAX;
    do {
        CHECK(store_gc(s, &p, &r, err, sizeof err) == 0, "gc: %s", err);
        CHECK(r.evicted <= 2 && r.bytes < prev, "call %d: %llu evicted, %llu bytes", calls,
              (unsigned long long)r.evicted, (unsigned long long)r.bytes);
        prev = r.bytes;
    } while (r.more && ++calls < 20);
    CHECK(r.bytes == 80000 && r.sessions == 8, "bounded: %llu bytes, %zu sessions",
          (unsigned long long)r.bytes, r.sessions);
    for (int i = 0; i < 10; i++) {
        snprintf(name, sizeof name, "%s-%02d", i % 2 ? "chat" : "resp", i);
        CHECK(exists(s, name) == (i >= 5), "%s %s", name, i >= 5 ? "kept" : "evicted");
    }
    /* A quota under the named sessions' bytes: every ephemeral one goes,
     * no named one does, and the store stays over (the daemon refuses). */
    p.max_bytes = 15000;
    p.batch = 100;
    CHECK(store_gc(s, &p, &r, err, sizeof err) == 0 && r.evicted == 5 && r.more == 0 &&
          r.bytes == 30000 && r.sessions == 3, "named never evicted: %llu evicted, %llu bytes",
          (unsigned long long)r.evicted, (unsigned long long)r.bytes);
    CHECK(exists(s, "named-0") && exists(s, "named-1") && exists(s, "named-2"), "named kept");
    store_close(s);
}

static void remove_by_prefix_and_age(void)
{
    store *s = open_ok(newdb());
    if (!s) return;
    char err[256] = "";
    save(s, "resp-1", 10, STORE_ORIGIN_RESPONSE);
    save(s, "resp-2", 10, STORE_ORIGIN_RESPONSE);
    save(s, "team/a", 10, STORE_ORIGIN_SOCKET);
    save(s, "team/b", 10, STORE_ORIGIN_SOCKET);
    raw(cur, use_pg ? "UPDATE lind_sessions SET updated_ms = 1000 WHERE name = 'team/a'"
                               : "UPDATE sessions SET updated_ms = 1000 WHERE name = 'team/a'");
    uint64_t n = 0, freed = 0;
    /* older than a day: only team/a, backdated to 1970 */
    CHECK(store_remove_matching(s, "team/", 86400000, 10, &n, &freed, err, sizeof err) == 0 &&
          n == 1 && freed == 20, "old team/: %llu: %s", (unsigned long long)n, err);
    CHECK(!exists(s, "team/a") && exists(s, "team/b"), "only the old one");
    CHECK(store_remove_matching(s, "resp-", 0, 1, &n, &freed, err, sizeof err) == 0 && n == 1,
          "a batch of one: %llu", (unsigned long long)n);
    CHECK(store_remove_matching(s, "resp-", 0, 10, &n, &freed, err, sizeof err) == 0 && n == 1,
          "the rest: %llu", (unsigned long long)n);
    CHECK(store_remove_matching(s, "%", 0, 10, &n, &freed, err, sizeof err) == 0 && n == 0,
          "a prefix is not a pattern: %llu", (unsigned long long)n);
    CHECK(exists(s, "team/b"), "team/b kept");
    store_close(s);
}

/* A store written before retention (schema 2: no origin column) opens,
 * and its rows get their origin from their names. */
static void migrates_older_store(void)
{
    const char *path = newdb();
    char p[256];
    snprintf(p, sizeof p, "%s", path);
    store *s = open_ok(p);
    if (!s) return;
    save(s, "resp-old", 100, STORE_ORIGIN_RESPONSE);
    save(s, "chat-old", 100, STORE_ORIGIN_CHAT);
    save(s, "old", 100, STORE_ORIGIN_HTTP);
    store_close(s);
    int rc = use_pg ? raw(p, "DROP INDEX lind_sessions_updated;"
                             "ALTER TABLE lind_sessions DROP COLUMN origin;"
                             "UPDATE lind_schema SET version = 2")
                    : raw(p, "DROP INDEX sessions_updated;"
                             "ALTER TABLE sessions DROP COLUMN origin;"
                             "UPDATE schema_version SET version = 2");
    CHECK(rc == 0, "schema back to version 2");
    s = open_ok(p);
    if (!s) return;
    char err[256] = "";
    store_info *v = NULL;
    size_t n = 0;
    CHECK(store_list(s, &v, &n, err, sizeof err) == 0 && n == 3, "list: %s", err);
    const store_info *a = find(v, n, "resp-old"), *b = find(v, n, "chat-old"), *c = find(v, n, "old");
    CHECK(a && a->origin == STORE_ORIGIN_RESPONSE && b && b->origin == STORE_ORIGIN_CHAT && c &&
          c->origin == STORE_ORIGIN_SOCKET && c->bytes == 110, "origins from the names");
    free(v);
    store_gc_policy pol = { .max_bytes = 150, .batch = 10 };
    store_gc_result r;
    CHECK(store_gc(s, &pol, &r, err, sizeof err) == 0 && r.evicted == 2 && exists(s, "old"),
          "collected after the migration: %s", err);
    store_close(s);
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/lind-retention-XXXXXX");
    if (!mkdtemp(dir)) {
        printf("FAIL setup: mkdtemp\n");
        return 1;
    }
    for (size_t i = 0; i < sizeof blob; i++) blob[i] = (uint8_t)(i * 131 + 7);
    RUN(origins_and_bytes);
    RUN(ttl_collects);
    RUN(quota_evicts_ephemeral_only);
    RUN(remove_by_prefix_and_age);
    RUN(migrates_older_store);

    char why[600];
    int up = pgserver_start(&pg, NULL, why, sizeof why);
    const char *cases[] = { "origins_and_bytes", "ttl_collects", "quota_evicts_ephemeral_only",
                            "remove_by_prefix_and_age", "migrates_older_store" };
    if (up != 0) {
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
            printf("%s %s_pg: %s PostgreSQL server: %s\n", up > 0 ? "SKIP" : "FAIL", cases[i],
                   up > 0 ? "cannot start a" : "could not start the", why);
        if (up < 0)
            check_total_failed_++;
    } else {
        use_pg = 1;
#define RUN_PG(f) do { check_begin(#f "_pg"); f(); check_end(); } while (0)
        RUN_PG(origins_and_bytes);
        RUN_PG(ttl_collects);
        RUN_PG(quota_evicts_ephemeral_only);
        RUN_PG(remove_by_prefix_and_age);
        RUN_PG(migrates_older_store);
        pgserver_stop(&pg);
    }
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        printf("NOTE could not remove %s\n", dir);
    return check_exit();
}
