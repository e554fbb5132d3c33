/* tests/test_store_basic.c — the session store through its public
 * interface: save/load/list/delete/fork, grouped saves, names,
 * export/import and their refusals, schema versioning, versions
 * (compare-and-swap saves), leases (one at a time and many at once) and
 * turn results (recorded with their save, kept for the last 32 saves,
 * deleted with the session). Every case that is not about SQLite's
 * file runs twice: against SQLite, then (cases named *_pg) against a
 * PostgreSQL server this test starts itself (tests/pgserver.h; SKIP lines
 * when it cannot run here), plus PostgreSQL's own cases: schema, lock
 * timeout, connection loss and recovery. */
#include "tests/check.h"
#include "tests/pgserver.h"
#include "state/store.h"

#include <errno.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[64];
static int dbseq;
static int use_pg;        /* the cases run against pg, not SQLite files */
static pgserver pg;

/* A fresh store per case: an SQLite file, or a new PostgreSQL database. */
static const char *newdb(void)
{
    static char path[256];
    if (use_pg) {
        char db[32], why[512];
        snprintf(db, sizeof db, "s%d", ++dbseq);
        if (pgserver_createdb(&pg, db, why, sizeof why) < 0)
            CHECK(0, "create database: %s", why);
        pgserver_uri(&pg, db, path, sizeof path);
        return path;
    }
    snprintf(path, sizeof path, "%s/s%d.db", dir, ++dbseq);
    return path;
}

static void fill(uint8_t *p, size_t n, uint32_t seed)
{
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13; x ^= x >> 17; x ^= x << 5;
        p[i] = (uint8_t)x;
    }
}

static store *open_ok(const char *path)
{
    store *s = NULL;
    char err[256] = "";
    int rc = store_open(path, NULL, &s, err, sizeof err);
    CHECK(rc == 0 && s, "open %s: %d %s", path, rc, err);
    return s;
}

static void save_load_roundtrip(void)
{
    const char *path = newdb();
    store *s = open_ok(path);
    if (!s) return;
    static uint8_t st[100000], tr[3000];
    fill(st, sizeof st, 1);
    fill(tr, sizeof tr, 2);
    store_record r = { "alice", st, sizeof st, tr, sizeof tr, 1234 };
    char err[256] = "";
    CHECK(store_save(s, &r, 1, err, sizeof err) == 0, "save: %s", err);
    store_close(s);
    s = open_ok(path);
    store_loaded l;
    CHECK(store_load(s, "alice", &l, err, sizeof err) == 0, "load: %s", err);
    CHECK(l.state_len == sizeof st && memcmp(l.state, st, sizeof st) == 0, "state bit-identical");
    CHECK(l.transcript_len == sizeof tr && memcmp(l.transcript, tr, sizeof tr) == 0,
          "transcript bit-identical");
    CHECK(l.tokens == 1234, "tokens %llu", (unsigned long long)l.tokens);
    CHECK(l.created_ms > 1700000000000LL && l.updated_ms >= l.created_ms, "times %lld %lld",
          (long long)l.created_ms, (long long)l.updated_ms);
    int64_t created = l.created_ms;
    store_loaded_free(&l);
    CHECK(l.state == NULL && l.transcript == NULL, "free clears");
    usleep(5000);
    /* Overwrite: new content, same creation time, later update time. */
    fill(st, 10, 9);
    store_record r2 = { "alice", st, 10, NULL, 0, 1300 };
    CHECK(store_save(s, &r2, 1, err, sizeof err) == 0, "resave: %s", err);
    CHECK(store_load(s, "alice", &l, err, sizeof err) == 0, "reload");
    CHECK(l.state_len == 10 && memcmp(l.state, st, 10) == 0, "overwritten state");
    CHECK(l.transcript_len == 0 && l.transcript != NULL, "empty transcript is an empty buffer");
    CHECK(l.tokens == 1300, "tokens updated");
    CHECK(l.created_ms == created && l.updated_ms > created, "created kept, updated moved");
    store_loaded_free(&l);
    store_close(s);
}

static void missing_and_delete(void)
{
    store *s = open_ok(newdb());
    if (!s) return;
    char err[256] = "";
    store_loaded l;
    CHECK(store_load(s, "nobody", &l, err, sizeof err) == -ENOENT, "missing load is ENOENT");
    CHECK(strstr(err, "nobody") != NULL, "message names the session: %s", err);
    CHECK(store_delete(s, "nobody", err, sizeof err) == -ENOENT, "missing delete is ENOENT");
    uint8_t b[4] = { 1, 2, 3, 4 };
    store_record r = { "x", b, 4, b, 4, 1 };
    store_save(s, &r, 1, NULL, 0);
    CHECK(store_delete(s, "x", err, sizeof err) == 0, "delete: %s", err);
    CHECK(store_load(s, "x", &l, NULL, 0) == -ENOENT, "gone after delete");
    size_t n = 99;
    CHECK(store_count(s, &n, NULL, 0) == 0 && n == 0, "count 0 (got %zu)", n);
    store_close(s);
}

static void list_sorted(void)
{
    store *s = open_ok(newdb());
    if (!s) return;
    const char *names[] = { "zeta", "alpha", "Mu", "beta", "\xc3\xa9t\xc3\xa9" };
    uint8_t b[64];
    store_record r[5];
    for (int i = 0; i < 5; i++) {
        r[i] = (store_record){ names[i], b, (size_t)(10 + i), NULL, 0, (uint64_t)(100 + i) };
    }
    char err[256] = "";
    CHECK(store_save(s, r, 5, err, sizeof err) == 0, "grouped save: %s", err);
    store_info *v = NULL;
    size_t n = 0;
    CHECK(store_list(s, &v, &n, err, sizeof err) == 0 && n == 5, "list: %zu %s", n, err);
    const char *want[] = { "Mu", "alpha", "beta", "zeta", "\xc3\xa9t\xc3\xa9" };
    for (size_t i = 0; i < n && i < 5; i++)
        CHECK(strcmp(v[i].name, want[i]) == 0, "position %zu: %s", i, v[i].name);
    CHECK(v && v[1].tokens == 101 && v[1].state_len == 11, "info fields of alpha");
    free(v);
    size_t c = 0;
    CHECK(store_count(s, &c, NULL, 0) == 0 && c == 5, "count 5");
    store_close(s);
}

static void grouped_save_all_or_nothing(void)
{
    const char *path = newdb();
    store *s = open_ok(path);
    if (!s) return;
    uint8_t b[16] = { 0 };
    char err[256] = "";
    store_record bad[3] = {
        { "one", b, 16, NULL, 0, 1 }, { "two", b, 16, NULL, 0, 1 }, { "bad\nname", b, 16, NULL, 0, 1 },
    };
    CHECK(store_save(s, bad, 3, err, sizeof err) == -EINVAL, "a bad record refuses the group");
    CHECK(strstr(err, "record 2") != NULL, "message names the record: %s", err);
    size_t n = 9;
    store_count(s, &n, NULL, 0);
    CHECK(n == 0, "nothing saved (%zu)", n);
    CHECK(store_save(s, bad, 0, err, sizeof err) == -EINVAL, "n = 0 refused");

    /* A second handle holding the write lock: the save times out with
     * -EBUSY and leaves nothing behind. (PostgreSQL: another connection
     * holds an exclusive lock on the sessions table.) */
    store_options o = store_defaults();
    o.busy_timeout_ms = 50;
    store *s2 = NULL;
    CHECK(store_open(path, &o, &s2, err, sizeof err) == 0, "second handle: %s", err);
    sqlite3 *raw = NULL;
    PGconn *praw = NULL;
    if (use_pg) {
        praw = PQconnectdb(path);
        PGresult *r = PQexec(praw, "BEGIN; LOCK TABLE lind_sessions IN EXCLUSIVE MODE");
        CHECK(PQresultStatus(r) == PGRES_COMMAND_OK, "lock: %s", PQerrorMessage(praw));
        PQclear(r);
    } else {
        sqlite3_open(path, &raw);
        CHECK(sqlite3_exec(raw, "BEGIN IMMEDIATE", NULL, NULL, NULL) == SQLITE_OK, "lock");
    }
    int rc = store_save(s2, bad, 2, err, sizeof err);
    CHECK(rc == -EBUSY, "locked store gives -EBUSY, got %d (%s)", rc, err);
    if (use_pg) {
        PQclear(PQexec(praw, "ROLLBACK"));
        PQfinish(praw);
    } else {
        sqlite3_exec(raw, "ROLLBACK", NULL, NULL, NULL);
        sqlite3_close(raw);
    }
    store_count(s, &n, NULL, 0);
    CHECK(n == 0, "still nothing saved (%zu)", n);
    CHECK(store_save(s2, bad, 2, err, sizeof err) == 0, "unlocked save: %s", err);
    /* The other handle sees the commit at once. */
    store_count(s, &n, NULL, 0);
    CHECK(n == 2, "both saved (%zu)", n);
    store_close(s2);
    store_close(s);
}

static void fork_copies(void)
{
    store *s = open_ok(newdb());
    if (!s) return;
    uint8_t st[5000], tr[40];
    fill(st, sizeof st, 5);
    fill(tr, sizeof tr, 6);
    store_record r = { "main", st, sizeof st, tr, sizeof tr, 77 };
    char err[256] = "";
    store_save(s, &r, 1, NULL, 0);
    CHECK(store_fork(s, "main", "branch", err, sizeof err) == 0, "fork: %s", err);
    store_loaded a, b;
    CHECK(store_load(s, "branch", &b, NULL, 0) == 0, "branch loads");
    store_load(s, "main", &a, NULL, 0);
    CHECK(b.state_len == a.state_len && memcmp(a.state, b.state, a.state_len) == 0, "same state");
    CHECK(b.transcript_len == a.transcript_len &&
          memcmp(a.transcript, b.transcript, a.transcript_len) == 0, "same transcript");
    CHECK(b.tokens == 77, "same tokens");
    store_loaded_free(&a);
    store_loaded_free(&b);
    /* The branch is independent of its source. */
    store_record r2 = { "main", st, 3, NULL, 0, 80 };
    store_save(s, &r2, 1, NULL, 0);
    store_load(s, "branch", &b, NULL, 0);
    CHECK(b.state_len == sizeof st && b.tokens == 77, "branch unchanged by a later save");
    store_loaded_free(&b);
    CHECK(store_fork(s, "main", "branch", err, sizeof err) == -EEXIST, "fork onto existing");
    CHECK(strstr(err, "branch") != NULL, "message names the target: %s", err);
    CHECK(store_fork(s, "ghost", "new", err, sizeof err) == -ENOENT, "fork of missing");
    CHECK(store_fork(s, "main", "main", err, sizeof err) == -EEXIST, "fork onto itself");
    CHECK(store_fork(s, "main", "", err, sizeof err) == -EINVAL, "fork to a bad name");
    CHECK(strstr(err, "target") != NULL, "says which name: %s", err);
    size_t n;
    store_count(s, &n, NULL, 0);
    CHECK(n == 2, "count %zu", n);
    store_close(s);
}

static void names(void)
{
    char err[256];
    char max[STORE_NAME_MAX + 2];
    memset(max, 'a', STORE_NAME_MAX);
    max[STORE_NAME_MAX] = 0;
    const char *good[] = { "a", "chat-1", "with space", "caf\xc3\xa9", "\xe6\x97\xa5\xe6\x9c\xac",
                           "\xf0\x9f\x98\x80", "\xef\xbf\xbf", "\xf4\x8f\xbf\xbf", max };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        err[0] = 0;
        CHECK(store_name_check(good[i], err, sizeof err) == 0, "good name %zu refused: %s", i, err);
    }
    char over[STORE_NAME_MAX + 2];
    memset(over, 'a', STORE_NAME_MAX + 1);
    over[STORE_NAME_MAX + 1] = 0;
    struct { const char *name; const char *word; } bad[] = {
        { "", "empty" },
        { over, "at most 128" },
        { "tab\there", "control character U+0009" },
        { "nl\n", "control character U+000A" },
        { "del\x7f", "control character U+007F" },
        { "c1\xc2\x85", "control character U+0085" },
        { "\xc0\xaf", "overlong" },
        { "\xc1\xbf", "overlong" },
        { "\xe0\x80\xaf", "overlong" },
        { "\xe0\x9f\xbf", "overlong" },
        { "\xf0\x8f\xbf\xbf", "overlong" },
        { "\xed\xa0\x80", "surrogate" },
        { "\xed\xbf\xbf", "surrogate" },
        { "\xf4\x90\x80\x80", "above U+10FFFF" },
        { "\xf5\x80\x80\x80", "invalid byte 0xF5" },
        { "\xff", "invalid byte 0xFF" },
        { "a\x80", "continuation byte 0x80 at byte 1" },
        { "\xc3", "cut short" },
        { "\xe2\x82", "cut short" },
        { "\xe2\x82x", "cut short" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = 0;
        int rc = store_name_check(bad[i].name, err, sizeof err);
        CHECK(rc == -EINVAL, "bad name %zu accepted", i);
        CHECK(strstr(err, bad[i].word) != NULL, "bad name %zu: '%s' lacks '%s'", i, err, bad[i].word);
    }
    CHECK(store_name_check(NULL, err, sizeof err) == -EINVAL, "NULL name");
    /* Every entry point checks names. */
    store *s = open_ok(newdb());
    if (!s) return;
    store_loaded l;
    uint8_t b = 0;
    store_record r = { over, &b, 1, NULL, 0, 0 };
    CHECK(store_save(s, &r, 1, err, sizeof err) == -EINVAL, "save checks");
    CHECK(store_load(s, "\xff", &l, err, sizeof err) == -EINVAL, "load checks");
    CHECK(store_delete(s, "", err, sizeof err) == -EINVAL, "delete checks");
    store_close(s);
}

static void export_import(void)
{
    store *s = open_ok(newdb());
    if (!s) return;
    uint8_t st[777], tr[55];
    fill(st, sizeof st, 11);
    fill(tr, sizeof tr, 12);
    store_record r = { "orig", st, sizeof st, tr, sizeof tr, 4242 };
    char err[256] = "";
    store_save(s, &r, 1, NULL, 0);
    uint8_t *x = NULL;
    size_t xl = 0;
    CHECK(store_export(s, "orig", &x, &xl, err, sizeof err) == 0, "export: %s", err);
    free(x);
    CHECK(store_export(s, "ghost", &x, &xl, err, sizeof err) == -ENOENT && x == NULL,
          "export of missing");
    store_export(s, "orig", &x, &xl, NULL, 0);
    CHECK(xl == 8 + 4 + 4 + 4 + 8 + 8 + 777 + 8 + 55 + 8, "export size %zu", xl);
    CHECK(store_import(s, "copy", x, xl, err, sizeof err) == 0, "import: %s", err);
    CHECK(store_import(s, "copy", x, xl, err, sizeof err) == -EEXIST, "import onto existing");
    CHECK(store_import(s, NULL, x, xl, err, sizeof err) == -EEXIST, "NULL name uses 'orig'");
    store_delete(s, "orig", NULL, 0);
    CHECK(store_import(s, NULL, x, xl, err, sizeof err) == 0, "import under recorded name: %s", err);
    CHECK(store_import(s, "bad\x01", x, xl, err, sizeof err) == -EINVAL, "import name checked");
    const char *names2[] = { "copy", "orig" };
    for (int k = 0; k < 2; k++) {
        store_loaded l;
        CHECK(store_load(s, names2[k], &l, NULL, 0) == 0, "load %s", names2[k]);
        CHECK(l.state_len == sizeof st && memcmp(l.state, st, sizeof st) == 0, "%s state", names2[k]);
        CHECK(l.transcript_len == sizeof tr && memcmp(l.transcript, tr, sizeof tr) == 0,
              "%s transcript", names2[k]);
        CHECK(l.tokens == 4242, "%s tokens", names2[k]);
        store_loaded_free(&l);
    }
    /* The format without a store. */
    store_record d;
    char nm[STORE_NAME_MAX + 1];
    CHECK(store_export_decode(x, xl, &d, nm, err, sizeof err) == 0 && strcmp(d.name, "orig") == 0 &&
          d.state_len == sizeof st && d.tokens == 4242, "decode: %s", err);
    free(x);
    store_close(s);
}

static void export_refusals(void)
{
    uint8_t st[40], tr[7];
    fill(st, sizeof st, 21);
    fill(tr, sizeof tr, 22);
    store_record r = { "sess", st, sizeof st, tr, sizeof tr, 9 };
    uint8_t *x = NULL;
    size_t xl = 0;
    char err[256] = "", nm[STORE_NAME_MAX + 1];
    CHECK(store_export_encode(&r, &x, &xl, err, sizeof err) == 0, "encode: %s", err);
    if (!x) return;
    store_record d;
    /* Every truncation is refused, naming truncation (or the magic, when
     * not even the magic is whole and what is there differs). */
    int bad_trunc = 0;
    for (size_t n = 0; n < xl; n++) {
        err[0] = 0;
        if (store_export_decode(x, n, &d, nm, err, sizeof err) != -EBADMSG ||
            (n >= 8 && !strstr(err, "truncated")) || (n > 0 && n < 8 && !strstr(err, "truncated") &&
                                                      !strstr(err, "magic")))
            bad_trunc++;
        if (n == 0 && !strstr(err, "empty"))
            bad_trunc++;
    }
    CHECK(bad_trunc == 0, "%d truncations not refused as such", bad_trunc);
    /* Every single flipped bit is refused. */
    int accepted = 0;
    uint8_t *y = malloc(xl);
    for (size_t i = 0; i < xl; i++)
        for (int bit = 0; bit < 8; bit++) {
            memcpy(y, x, xl);
            y[i] ^= (uint8_t)(1 << bit);
            if (store_export_decode(y, xl, &d, nm, err, sizeof err) != -EBADMSG)
                accepted++;
        }
    CHECK(accepted == 0, "%d bit flips accepted", accepted);
    /* Specific messages. */
    memcpy(y, x, xl);
    y[8 + 4 + 4] ^= 0x20; /* a byte of the name */
    store_export_decode(y, xl, &d, nm, err, sizeof err);
    CHECK(strstr(err, "checksum") != NULL, "damage: %s", err);
    memcpy(y, x, xl);
    y[0] = 'X';
    store_export_decode(y, xl, &d, nm, err, sizeof err);
    CHECK(strstr(err, "magic") != NULL, "magic: %s", err);
    memcpy(y, x, xl);
    y[8] = 2;
    store_export_decode(y, xl, &d, nm, err, sizeof err);
    CHECK(strstr(err, "newer") != NULL, "version: %s", err);
    uint8_t *z = malloc(xl + 3);
    memcpy(z, x, xl);
    memset(z + xl, 0, 3);
    CHECK(store_export_decode(z, xl + 3, &d, nm, err, sizeof err) == -EBADMSG &&
          strstr(err, "after its checksum"), "trailing bytes: %s", err);
    free(z);
    /* A store refuses to import any of these. */
    store *s = open_ok(newdb());
    if (s) {
        y[8] = 1;
        y[20] ^= 1;
        CHECK(store_import(s, "imp", y, xl, err, sizeof err) == -EBADMSG, "import refuses damage");
        size_t n = 1;
        store_count(s, &n, NULL, 0);
        CHECK(n == 0, "nothing imported");
        store_close(s);
    }
    free(y);
    free(x);
}

static void schema_and_foreign_files(void)
{
    char err[256] = "";
    const char *path = newdb();
    store *s = open_ok(path);
    if (!s) return;
    store_close(s);
    sqlite3 *db = NULL;
    sqlite3_open(path, &db);
    sqlite3_stmt *st;
    sqlite3_prepare_v2(db, "SELECT version FROM schema_version", -1, &st, NULL);
    CHECK(sqlite3_step(st) == SQLITE_ROW && sqlite3_column_int(st, 0) == 3, "schema version 3");
    sqlite3_finalize(st);
    sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &st, NULL);
    CHECK(sqlite3_step(st) == SQLITE_ROW && strcmp((const char *)sqlite3_column_text(st, 0), "wal") == 0,
          "WAL mode");
    sqlite3_finalize(st);
    struct stat sb;
    CHECK(stat(path, &sb) == 0 && (sb.st_mode & 0777) == 0600, "new store is private (mode %o)",
          (unsigned)(sb.st_mode & 0777));
    sqlite3_exec(db, "UPDATE schema_version SET version = 99", NULL, NULL, NULL);
    sqlite3_close(db);
    s = NULL;
    CHECK(store_open(path, NULL, &s, err, sizeof err) == -EINVAL && !s, "newer schema refused");
    CHECK(strstr(err, "schema version 99") != NULL, "says so: %s", err);

    /* A store left at schema version 0 (created, never migrated) is brought
     * to the current version when opened. */
    const char *v0 = newdb();
    sqlite3_open(v0, &db);
    sqlite3_exec(db, "CREATE TABLE schema_version (version INTEGER NOT NULL);"
                     "INSERT INTO schema_version VALUES (0); PRAGMA application_id = 1279872580;",
                 NULL, NULL, NULL);
    sqlite3_close(db);
    s = NULL;
    CHECK(store_open(v0, NULL, &s, err, sizeof err) == 0, "v0 store migrates: %s", err);
    if (s) {
        uint8_t b = 1;
        store_record r = { "after-migration", &b, 1, NULL, 0, 1 };
        CHECK(store_save(s, &r, 1, err, sizeof err) == 0, "save after migration: %s", err);
        store_close(s);
    }
    sqlite3_open(v0, &db);
    sqlite3_prepare_v2(db, "SELECT version FROM schema_version", -1, &st, NULL);
    CHECK(sqlite3_step(st) == SQLITE_ROW && sqlite3_column_int(st, 0) == 3, "now version 3");
    sqlite3_finalize(st);
    sqlite3_close(db);

    /* A v1 store (before versions and leases) with a session in it: its
     * rows start at version 1 and leases work after the migration. */
    const char *v1 = newdb();
    sqlite3_open(v1, &db);
    sqlite3_exec(db, "CREATE TABLE schema_version (version INTEGER NOT NULL);"
                     "INSERT INTO schema_version VALUES (1); PRAGMA application_id = 1279872580;"
                     "CREATE TABLE sessions (name TEXT PRIMARY KEY NOT NULL, state BLOB NOT NULL,"
                     " transcript BLOB NOT NULL, tokens INTEGER NOT NULL,"
                     " created_ms INTEGER NOT NULL, updated_ms INTEGER NOT NULL);"
                     "INSERT INTO sessions VALUES ('old', x'0102', x'', 7, 1700000000000, 1700000000000);",
                 NULL, NULL, NULL);
    sqlite3_close(db);
    s = NULL;
    CHECK(store_open(v1, NULL, &s, err, sizeof err) == 0, "v1 store migrates: %s", err);
    if (s) {
        store_loaded l;
        CHECK(store_load(s, "old", &l, err, sizeof err) == 0 && l.version == 1 && l.tokens == 7 &&
              l.state_len == 2 && l.state[1] == 2, "old session kept, at version 1: %s", err);
        store_loaded_free(&l);
        store_save_result res;
        uint8_t b = 3;
        store_record r = { "old", &b, 1, NULL, 0, 8 };
        CHECK(store_save_versioned(s, &r, (uint64_t[]){ 1 }, 1, NULL, &res, err, sizeof err) == 0 &&
              res.version == 2, "versioned save after migration: %s", err);
        CHECK(store_lease_acquire(s, "old", "node-a", 1000, NULL, err, sizeof err) == 0,
              "lease after migration: %s", err);
        store_close(s);
    }

    const char *other = newdb();
    sqlite3_open(other, &db);
    sqlite3_exec(db, "CREATE TABLE users(id INTEGER)", NULL, NULL, NULL);
    sqlite3_close(db);
    CHECK(store_open(other, NULL, &s, err, sizeof err) == -EINVAL, "foreign database refused");
    CHECK(strstr(err, "another application") != NULL, "says so: %s", err);

    const char *junk = newdb();
    FILE *f = fopen(junk, "wb");
    for (int i = 0; i < 4096; i++)
        fputc("not a database "[i % 15], f);
    fclose(f);
    CHECK(store_open(junk, NULL, &s, err, sizeof err) == -EINVAL, "non-database refused");
    CHECK(strstr(err, "not an SQLite database") != NULL, "says so: %s", err);

    char nodir[200];
    snprintf(nodir, sizeof nodir, "%s/no/such/dir/x.db", dir);
    CHECK(store_open(nodir, NULL, &s, err, sizeof err) == -ENOENT, "unopenable path: %s", err);
    CHECK(strstr(err, "directory does not exist") != NULL, "says why: %s", err);
    store_options o = store_defaults();
    o.sync = (store_sync)5;
    CHECK(store_open(newdb(), &o, &s, err, sizeof err) == -EINVAL, "bad durability refused");
    CHECK(store_open("", NULL, &s, err, sizeof err) == -EINVAL, "empty path refused");
}

/* ---- versions --------------------------------------------------------- */

static int load_version(store *s, const char *name, uint64_t *v, uint8_t *first)
{
    store_loaded l;
    int rc = store_load(s, name, &l, NULL, 0);
    if (rc == 0) {
        *v = l.version;
        if (first)
            *first = l.state_len ? l.state[0] : 0;
        store_loaded_free(&l);
    }
    return rc;
}

/* Two handles load version v; one saves; the other's save fails with
 * -ECANCELED and the row keeps the first save. */
static void versions_cas(void)
{
    const char *path = newdb();
    store *a = open_ok(path), *b = open_ok(path);
    if (!a || !b) { store_close(a); store_close(b); return; }
    char err[256] = "";
    uint8_t one = 1, two = 2, three = 3;
    store_record r = { "conv", &one, 1, NULL, 0, 10 };
    CHECK(store_save(a, &r, 1, err, sizeof err) == 0, "first save: %s", err);
    uint64_t va = 0, vb = 0, v = 0;
    CHECK(load_version(a, "conv", &va, NULL) == 0 && load_version(b, "conv", &vb, NULL) == 0 &&
          va == 1 && vb == 1, "both load version 1 (%llu %llu)", (unsigned long long)va,
          (unsigned long long)vb);
    store_save_result res;
    r.state = &two;
    CHECK(store_save_versioned(a, &r, &va, 1, NULL, &res, err, sizeof err) == 0 && res.rc == 0 &&
          res.version == 2, "a's swap 1 -> 2: %s (version %llu)", err, (unsigned long long)res.version);
    r.state = &three;
    err[0] = 0;
    int rc = store_save_versioned(b, &r, &vb, 1, NULL, &res, err, sizeof err);
    CHECK(rc == -ECANCELED && res.rc == -ECANCELED && res.version == 2,
          "b's stale save refused: %d, result %d, store at %llu", rc, res.rc,
          (unsigned long long)res.version);
    CHECK(strstr(err, "conv") && strstr(err, "expected version 1") && strstr(err, "has version 2"),
          "message names session and versions: %s", err);
    uint8_t first = 0;
    CHECK(load_version(b, "conv", &v, &first) == 0 && v == 2 && first == 2,
          "row keeps a's save (version %llu, byte %u)", (unsigned long long)v, first);
    /* b reloads and swaps from the version it now sees. */
    CHECK(store_save_versioned(b, &r, &v, 1, NULL, &res, err, sizeof err) == 0 && res.version == 3,
          "b after reloading: %s", err);
    /* store_save stays unconditional and still moves the version. */
    CHECK(store_save(a, &r, 1, err, sizeof err) == 0, "unconditional: %s", err);
    CHECK(load_version(a, "conv", &v, NULL) == 0 && v == 4, "version 4 (%llu)", (unsigned long long)v);
    /* NEW: only when the name is free. */
    uint64_t fresh = STORE_VERSION_NEW;
    CHECK(store_save_versioned(a, &r, &fresh, 1, NULL, &res, err, sizeof err) == -ECANCELED && res.version == 4,
          "NEW over an existing session refused");
    CHECK(strstr(err, "expected no session"), "says so: %s", err);
    store_record n = { "newborn", &one, 1, NULL, 0, 1 };
    CHECK(store_save_versioned(a, &n, &fresh, 1, NULL, &res, err, sizeof err) == 0 && res.version == 1,
          "NEW on a free name: %s", err);
    /* A deleted session: the swap finds no row. */
    CHECK(store_delete(b, "conv", NULL, 0) == 0, "delete");
    v = 4;
    CHECK(store_save_versioned(a, &r, &v, 1, NULL, &res, err, sizeof err) == -ECANCELED && res.version == 0,
          "save over a deleted session refused");
    CHECK(strstr(err, "has no session"), "says so: %s", err);
    CHECK(store_load(a, "conv", &(store_loaded){ 0 }, NULL, 0) == -ENOENT, "not recreated");
    /* Fork and import start at version 1; list shows versions. */
    CHECK(store_save(a, &n, 1, NULL, 0) == 0, "newborn -> 2");
    CHECK(store_fork(a, "newborn", "child", err, sizeof err) == 0, "fork: %s", err);
    uint8_t *x = NULL;
    size_t xl = 0;
    store_export(a, "newborn", &x, &xl, NULL, 0);
    CHECK(x && store_import(a, "imported", x, xl, err, sizeof err) == 0, "import: %s", err);
    free(x);
    store_info *info = NULL;
    size_t cnt = 0;
    CHECK(store_list(a, &info, &cnt, err, sizeof err) == 0 && cnt == 3, "list %zu", cnt);
    for (size_t i = 0; i < cnt; i++) {
        uint64_t want = strcmp(info[i].name, "newborn") == 0 ? 2 : 1;
        CHECK(info[i].version == want, "%s at version %llu, want %llu", info[i].name,
              (unsigned long long)info[i].version, (unsigned long long)want);
    }
    free(info);
    store_close(a);
    store_close(b);
}

/* A group commits together; a stale record is skipped alone and reported
 * in its own result; a bad record or a repeated name refuses the group. */
static void versions_grouped(void)
{
    store *s = open_ok(newdb());
    if (!s) return;
    char err[256] = "";
    uint8_t b[8] = { 0 };
    store_record base[2] = { { "a", b, 8, NULL, 0, 1 }, { "b", b, 8, NULL, 0, 1 } };
    CHECK(store_save(s, base, 2, err, sizeof err) == 0, "setup: %s", err);
    CHECK(store_save(s, &base[1], 1, NULL, 0) == 0, "b -> 2");
    uint8_t nb[8] = { 9, 9, 9, 9, 9, 9, 9, 9 };
    store_record g[3] = {
        { "a", nb, 8, NULL, 0, 5 }, { "b", nb, 8, NULL, 0, 5 }, { "c", nb, 8, NULL, 0, 5 },
    };
    uint64_t ex[3] = { 1, 1, STORE_VERSION_NEW };   /* b is at 2: stale */
    store_save_result res[3];
    int rc = store_save_versioned(s, g, ex, 3, NULL, res, err, sizeof err);
    CHECK(rc == -ECANCELED, "group with one stale record: %d (%s)", rc, err);
    CHECK(res[0].rc == 0 && res[0].version == 2, "a saved at 2 (%d %llu)", res[0].rc,
          (unsigned long long)res[0].version);
    CHECK(res[1].rc == -ECANCELED && res[1].version == 2, "b stale at 2 (%d %llu)", res[1].rc,
          (unsigned long long)res[1].version);
    CHECK(res[2].rc == 0 && res[2].version == 1, "c created (%d)", res[2].rc);
    CHECK(strstr(err, "'b'") && strstr(err, "1 of 3"), "message: %s", err);
    uint64_t v;
    uint8_t first;
    CHECK(load_version(s, "a", &v, &first) == 0 && first == 9, "a has the group's bytes");
    CHECK(load_version(s, "b", &v, &first) == 0 && first == 0 && v == 2, "b untouched");
    CHECK(load_version(s, "c", &v, &first) == 0 && first == 9, "c has the group's bytes");
    /* The same session twice in one versioned group. */
    store_record dup[2] = { { "a", nb, 8, NULL, 0, 6 }, { "a", nb, 8, NULL, 0, 7 } };
    uint64_t ex2[2] = { 2, 3 };
    CHECK(store_save_versioned(s, dup, ex2, 2, NULL, res, err, sizeof err) == -EINVAL &&
          res[0].rc == -EINVAL && strstr(err, "both save 'a'"), "repeated name refused: %s", err);
    /* A bad record: the whole group refused, every result says so. */
    store_record badg[2] = { { "a", nb, 8, NULL, 0, 6 }, { "", nb, 8, NULL, 0, 7 } };
    CHECK(store_save_versioned(s, badg, ex2, 2, NULL, res, err, sizeof err) == -EINVAL &&
          res[0].rc == -EINVAL && res[1].rc == -EINVAL, "bad record refuses the group");
    CHECK(load_version(s, "a", &v, NULL) == 0 && v == 2, "a still at 2 (%llu)", (unsigned long long)v);
    CHECK(store_save_versioned(s, g, ex, 3, NULL, NULL, err, sizeof err) == -EINVAL, "results required");
    store_close(s);
}

/* ---- leases ----------------------------------------------------------- */

static void leases(void)
{
    const char *path = newdb();
    store *s = open_ok(path), *t = open_ok(path);
    if (!s || !t) { store_close(s); store_close(t); return; }
    char err[256] = "";
    store_lease l;
    /* A lease needs no session row. */
    CHECK(store_lease_acquire(s, "chat", "node-a", 10000, &l, err, sizeof err) == 0, "a takes: %s",
          err);
    CHECK(strcmp(l.owner, "node-a") == 0 && l.expires_ms > 1700000000000LL, "lease is a's (%s %lld)",
          l.owner, (long long)l.expires_ms);
    int64_t first_expiry = l.expires_ms;
    err[0] = 0;
    CHECK(store_lease_acquire(t, "chat", "node-b", 10000, &l, err, sizeof err) == -EAGAIN,
          "b refused while a holds it");
    CHECK(strcmp(l.owner, "node-a") == 0 && l.expires_ms == first_expiry, "b told the holder: %s %lld",
          l.owner, (long long)l.expires_ms);
    CHECK(strstr(err, "node-a") && strstr(err, "chat"), "message names holder: %s", err);
    usleep(20000);
    CHECK(store_lease_acquire(s, "chat", "node-a", 10000, &l, err, sizeof err) == 0 &&
          l.expires_ms > first_expiry, "a re-acquiring renews");
    CHECK(store_lease_renew(t, "chat", "node-b", 10000, &l, err, sizeof err) == -ENOLCK &&
          strcmp(l.owner, "node-a") == 0, "b cannot renew a's lease: %s", err);
    int64_t before = l.expires_ms;
    usleep(20000);
    CHECK(store_lease_renew(s, "chat", "node-a", 20000, &l, err, sizeof err) == 0 &&
          l.expires_ms > before + 5000, "a renews for longer: %s", err);
    CHECK(store_lease_release(t, "chat", "node-b", err, sizeof err) == -ENOLCK, "b cannot release");
    CHECK(store_lease_release(s, "chat", "node-a", err, sizeof err) == 0, "a releases: %s", err);
    CHECK(store_lease_renew(s, "chat", "node-a", 1000, &l, err, sizeof err) == -ENOLCK &&
          l.owner[0] == 0 && strstr(err, "nobody"), "released lease cannot be renewed: %s", err);
    CHECK(store_lease_acquire(t, "chat", "node-b", 10000, &l, err, sizeof err) == 0, "b takes it");
    /* Expiry: a short lease lapses and another owner takes it over; the old
     * owner then can neither renew nor release. (Taken for 10 s, so that no
     * machine is slow enough to let it lapse before the "not yet" check,
     * then cut to 1 ms by its owner's renewal, and slept past.) */
    CHECK(store_lease_acquire(s, "short", "node-a", 10000, &l, err, sizeof err) == 0, "a short: %s", err);
    CHECK(store_lease_acquire(t, "short", "node-b", 5000, NULL, err, sizeof err) == -EAGAIN,
          "not yet expired");
    CHECK(store_lease_renew(s, "short", "node-a", 1, &l, err, sizeof err) == 0, "a cuts its lease: %s", err);
    usleep(20000);
    CHECK(store_lease_acquire(t, "short", "node-b", 5000, &l, err, sizeof err) == 0 &&
          strcmp(l.owner, "node-b") == 0, "b takes over the expired lease: %s", err);
    CHECK(store_lease_renew(s, "short", "node-a", 5000, &l, err, sizeof err) == -ENOLCK &&
          strcmp(l.owner, "node-b") == 0 && strstr(err, "node-b"), "a lost it: %s", err);
    CHECK(store_lease_release(s, "short", "node-a", err, sizeof err) == -ENOLCK, "a cannot release");
    /* An expired lease nobody took is still its owner's to renew. */
    CHECK(store_lease_acquire(s, "lapsed", "node-a", 50, NULL, NULL, 0) == 0, "lapsed taken");
    usleep(150000);
    CHECK(store_lease_renew(s, "lapsed", "node-a", 5000, &l, err, sizeof err) == 0, "renewed: %s", err);
    /* Arguments. */
    CHECK(store_lease_acquire(s, "x", "node-a", 0, NULL, err, sizeof err) == -EINVAL &&
          strstr(err, "ttl"), "ttl 0: %s", err);
    CHECK(store_lease_acquire(s, "x", "", 10, NULL, err, sizeof err) == -EINVAL &&
          strstr(err, "owner"), "empty owner: %s", err);
    CHECK(store_lease_acquire(s, "bad\n", "a", 10, NULL, err, sizeof err) == -EINVAL, "bad name");
    store_close(s);
    store_close(t);
}

/* store_lease_renew_many: one call renews every name the owner holds
 * (names that need quoting in PostgreSQL's array syntax among them, and one
 * expired that nobody took) and reports the others lost with their holder:
 * one taken over after expiry, one another owner holds, one released, one
 * never leased. */
static void leases_many(void)
{
    const char *path = newdb();
    store *s = open_ok(path), *t = open_ok(path);
    if (!s || !t) { store_close(s); store_close(t); return; }
    char err[256] = "";
    store_lease l;
    const char *mine[] = { "m0", "m\"q", "m\\b", "m,{x} y", "lapsed" };
    for (int i = 0; i < 5; i++)
        CHECK(store_lease_acquire(s, mine[i], "node-a", i == 4 ? 50 : 10000, NULL, err, sizeof err) == 0,
              "a takes '%s': %s", mine[i], err);
    CHECK(store_lease_acquire(s, "over", "node-a", 10000, NULL, err, sizeof err) == 0 &&
          store_lease_renew(s, "over", "node-a", 1, NULL, err, sizeof err) == 0, "over: %s", err);
    CHECK(store_lease_acquire(t, "b-holds", "node-b", 60000, NULL, err, sizeof err) == 0, "b: %s", err);
    CHECK(store_lease_acquire(s, "released", "node-a", 10000, NULL, err, sizeof err) == 0 &&
          store_lease_release(s, "released", "node-a", err, sizeof err) == 0, "released: %s", err);
    usleep(150000);   /* "lapsed" and "over" expire */
    CHECK(store_lease_acquire(t, "over", "node-b", 60000, NULL, err, sizeof err) == 0,
          "b takes 'over' over: %s", err);
    const char *names[] = { "m0", "m\"q", "m\\b", "m,{x} y", "lapsed", "over", "b-holds",
                            "released", "never" };
    const uint8_t want[] = { 0, 0, 0, 0, 0, 1, 1, 1, 1 };
    const char *holder[] = { "", "", "", "", "", "node-b", "node-b", "", "" };
    enum { N = sizeof names / sizeof names[0] };
    uint8_t lost[N];
    store_lease held[N];
    memset(lost, 7, sizeof lost);
    memset(held, 0, sizeof held);
    CHECK(store_lease_renew_many(s, names, N, "node-a", 60000, lost, held, err, sizeof err) == 0,
          "renew many: %s", err);
    for (int i = 0; i < N; i++) {
        CHECK(lost[i] == want[i], "'%s' lost %d, want %d", names[i], lost[i], want[i]);
        CHECK(!want[i] || !strcmp(held[i].owner, holder[i]), "'%s' held by '%s', want '%s'",
              names[i], held[i].owner, holder[i]);
    }
    /* Renewed for 60 s: b is refused with that expiry (the 10 s ones moved). */
    for (int i = 0; i < 5; i++) {
        CHECK(store_lease_acquire(t, mine[i], "node-b", 1000, &l, err, sizeof err) == -EAGAIN &&
              !strcmp(l.owner, "node-a") && l.expires_ms - l.now_ms > 30000,
              "'%s' renewed for a: '%s' %lld ms left", mine[i], l.owner,
              (long long)(l.expires_ms - l.now_ms));
    }
    CHECK(store_lease_acquire(t, "released", "node-b", 1000, NULL, err, sizeof err) == 0,
          "a renewal took no lease it did not hold: %s", err);
    /* held may be NULL; n == 0 does nothing; a bad name or owner renews nothing. */
    CHECK(store_lease_renew_many(s, names, N, "node-a", 60000, lost, NULL, err, sizeof err) == 0 &&
          lost[0] == 0 && lost[5] == 1, "no holders asked: %s", err);
    CHECK(store_lease_renew_many(s, names, 0, "node-a", 60000, NULL, NULL, err, sizeof err) == 0,
          "nothing to renew");
    const char *bad[] = { "m0", "m\"q", "bad\n" };
    CHECK(store_lease_renew_many(s, bad, 3, "node-a", 60000, lost, NULL, err, sizeof err) == -EINVAL &&
          strstr(err, "lease 3 of 3"), "bad name named: %s", err);
    CHECK(store_lease_renew_many(s, bad, 2, "", 60000, lost, NULL, err, sizeof err) == -EINVAL &&
          strstr(err, "owner"), "empty owner: %s", err);
    CHECK(store_lease_renew_many(s, bad, 2, "node-a", 0, lost, NULL, err, sizeof err) == -EINVAL &&
          strstr(err, "ttl"), "ttl 0: %s", err);
    /* Many names at once, none lost. */
    enum { M = 300 };
    static char many[M][16];
    const char *mp[M];
    uint8_t mlost[M];
    for (int i = 0; i < M; i++) {
        snprintf(many[i], sizeof many[i], "s%d", i);
        mp[i] = many[i];
        CHECK(store_lease_acquire(s, mp[i], "node-a", 10000, NULL, err, sizeof err) == 0, "%s: %s",
              mp[i], err);
    }
    CHECK(store_lease_renew_many(s, mp, M, "node-a", 60000, mlost, NULL, err, sizeof err) == 0,
          "%d at once: %s", M, err);
    int nlost = 0;
    for (int i = 0; i < M; i++) nlost += mlost[i];
    CHECK(nlost == 0, "%d of %d lost", nlost, M);
    store_close(s);
    store_close(t);
}

/* store_lease_acquire_many: free names, one this owner holds already (a
 * renewal) and one expired are taken; one another owner holds is -EAGAIN
 * with its holder; the others then see ours. */
static void leases_acquire_many(void)
{
    const char *path = newdb();
    store *s = open_ok(path), *t = open_ok(path);
    if (!s || !t) { store_close(s); store_close(t); return; }
    char err[256] = "";
    store_lease l;
    CHECK(store_lease_acquire(s, "mine", "node-a", 10000, NULL, err, sizeof err) == 0, "a: %s", err);
    CHECK(store_lease_acquire(t, "b-holds", "node-b", 60000, NULL, err, sizeof err) == 0, "b: %s", err);
    CHECK(store_lease_acquire(t, "lapsed", "node-b", 50, NULL, err, sizeof err) == 0, "b lapsed: %s", err);
    usleep(150000);   /* "lapsed" expires */
    const char *names[] = { "n0", "mine", "b-holds", "m\"q", "lapsed" };
    const int want[] = { 0, 0, -EAGAIN, 0, 0 };
    enum { N = sizeof names / sizeof names[0] };
    int rcs[N];
    store_lease cur[N];
    memset(cur, 0, sizeof cur);
    CHECK(store_lease_acquire_many(s, names, N, "node-a", 60000, rcs, cur, err, sizeof err) == 0,
          "acquire many: %s", err);
    for (int i = 0; i < N; i++) {
        CHECK(rcs[i] == want[i], "'%s' rc %d, want %d", names[i], rcs[i], want[i]);
        CHECK(!strcmp(cur[i].owner, want[i] ? "node-b" : "node-a") && cur[i].expires_ms > cur[i].now_ms,
              "'%s' held by '%s' for %lld ms", names[i], cur[i].owner,
              (long long)(cur[i].expires_ms - cur[i].now_ms));
        int mine = want[i] == 0;
        CHECK(store_lease_acquire(t, names[i], "node-b", 1000, &l, err, sizeof err) == (mine ? -EAGAIN : 0) &&
              !strcmp(l.owner, mine ? "node-a" : "node-b"), "b sees '%s' held by '%s'", names[i], l.owner);
    }
    /* out may be NULL; n == 0 does nothing; a bad name or owner takes nothing. */
    const char *more[] = { "n1", "n2" };
    CHECK(store_lease_acquire_many(s, more, 2, "node-a", 60000, rcs, NULL, err, sizeof err) == 0 &&
          rcs[0] == 0 && rcs[1] == 0, "no leases asked back: %s", err);
    CHECK(store_lease_acquire_many(s, more, 0, "node-a", 60000, NULL, NULL, err, sizeof err) == 0, "nothing");
    const char *bad[] = { "n3", "bad\n" };
    CHECK(store_lease_acquire_many(s, bad, 2, "node-a", 60000, rcs, NULL, err, sizeof err) == -EINVAL &&
          strstr(err, "lease 2 of 2"), "bad name named: %s", err);
    CHECK(store_lease_acquire_many(s, bad, 1, "", 60000, rcs, NULL, err, sizeof err) == -EINVAL &&
          strstr(err, "owner"), "empty owner: %s", err);
    CHECK(store_lease_acquire(t, "n3", "node-b", 1000, NULL, err, sizeof err) == 0,
          "a refused call took no lease: %s", err);
    /* Many at once. */
    enum { M = 300 };
    static char many[M][16];
    const char *mp[M];
    static int mrc[M];
    for (int i = 0; i < M; i++) {
        snprintf(many[i], sizeof many[i], "s%d", i);
        mp[i] = many[i];
    }
    CHECK(store_lease_acquire_many(s, mp, M, "node-a", 60000, mrc, NULL, err, sizeof err) == 0, "%d: %s", M, err);
    int taken = 0;
    for (int i = 0; i < M; i++) taken += mrc[i] == 0;
    CHECK(taken == M, "%d of %d taken", taken, M);
    store_close(s);
    store_close(t);
}

/* Saves under a lease: only the holder of an unexpired lease writes; the
 * others of the group still do. */
static void leased_saves(void)
{
    const char *path = newdb();
    store *s = open_ok(path);
    if (!s) return;
    char err[256] = "";
    uint8_t b1 = 1, b2 = 2;
    store_record r[2] = { { "held", &b1, 1, NULL, 0, 1 }, { "unleased", &b1, 1, NULL, 0, 1 } };
    store_save_result res[2];
    CHECK(store_lease_acquire(s, "held", "node-a", 10000, NULL, err, sizeof err) == 0, "lease: %s", err);
    CHECK(store_save_versioned(s, r, NULL, 1, "node-a", res, err, sizeof err) == 0 && res[0].version == 1,
          "holder saves: %s", err);
    r[0].state = &b2;
    err[0] = 0;
    CHECK(store_save_versioned(s, r, NULL, 1, "node-b", res, err, sizeof err) == -ENOLCK &&
          res[0].rc == -ENOLCK && res[0].version == 1, "another owner refused: %s", err);
    CHECK(strstr(err, "'node-b' does not hold its lease") && strstr(err, "held"), "message: %s", err);
    /* A group: the leased record saves, the unleased one is refused alone. */
    int rc = store_save_versioned(s, r, (uint64_t[]){ 1, STORE_VERSION_NEW }, 2, "node-a", res, err,
                                  sizeof err);
    CHECK(rc == -ENOLCK && res[0].rc == 0 && res[0].version == 2 && res[1].rc == -ENOLCK &&
          res[1].version == 0, "per record: %d %d %d", rc, res[0].rc, res[1].rc);
    CHECK(strstr(err, "unleased") && strstr(err, "1 of 2"), "message: %s", err);
    size_t n = 0;
    CHECK(store_count(s, &n, NULL, 0) == 0 && n == 1, "unleased not created (%zu)", n);
    /* Version and lease both checked: a stale version under a good lease. */
    CHECK(store_save_versioned(s, r, (uint64_t[]){ 1 }, 1, "node-a", res, err, sizeof err) == -ECANCELED,
          "stale under lease: %s", err);
    /* An expired lease no longer lets its owner write, taken over or not. */
    CHECK(store_lease_acquire(s, "held", "node-a", 100, NULL, NULL, 0) == 0, "short renewal");
    usleep(250000);
    CHECK(store_save_versioned(s, r, NULL, 1, "node-a", res, err, sizeof err) == -ENOLCK,
          "expired lease refused");
    CHECK(store_lease_acquire(s, "held", "node-b", 10000, NULL, NULL, 0) == 0, "b takes over");
    CHECK(store_save_versioned(s, r, (uint64_t[]){ 2 }, 1, "node-b", res, err, sizeof err) == 0 &&
          res[0].version == 3, "new holder saves: %s", err);
    CHECK(store_save_versioned(s, r, NULL, 1, "bad\n", res, err, sizeof err) == -EINVAL,
          "owner checked");
    store_close(s);
}

/* Eight handles race for one free lease, then for it expired: exactly one
 * wins each time. The leases are long (60 s: every racer tries well within
 * the winner's lease however loaded the machine); between the rounds the
 * winner's own renewal cuts its lease to 1 ms, and it lapses. */
#define RACERS 8
typedef struct racer {
    const char *path;
    const char *name;
    int idx, rc;
    pthread_barrier_t *bar;
} racer;

static void *race(void *arg)
{
    racer *r = arg;
    store *s = NULL;
    char owner[32], err[256];
    snprintf(owner, sizeof owner, "racer-%d", r->idx);
    r->rc = store_open(r->path, NULL, &s, err, sizeof err);
    pthread_barrier_wait(r->bar);
    if (r->rc == 0)
        r->rc = store_lease_acquire(s, r->name, owner, 60000, NULL, err, sizeof err);
    store_close(s);
    return NULL;
}

static void leases_race(void)
{
    const char *path = newdb();
    store *s = open_ok(path);   /* creates the schema before the race */
    if (!s) return;
    int winner = -1;
    for (int round = 0; round < 2; round++) {
        if (round == 1 && winner >= 0) {   /* the winner's lease lapses */
            char owner[32], err[256];
            snprintf(owner, sizeof owner, "racer-%d", winner);
            CHECK(store_lease_renew(s, "contested", owner, 1, NULL, err, sizeof err) == 0,
                  "the winner cuts its lease: %s", err);
            usleep(20000);
        }
        pthread_t th[RACERS];
        racer r[RACERS];
        pthread_barrier_t bar;
        pthread_barrier_init(&bar, NULL, RACERS);
        for (int i = 0; i < RACERS; i++) {
            r[i] = (racer){ path, "contested", i, 0, &bar };
            pthread_create(&th[i], NULL, race, &r[i]);
        }
        int won = 0, lost = 0;
        for (int i = 0; i < RACERS; i++) {
            pthread_join(th[i], NULL);
            won += r[i].rc == 0;
            lost += r[i].rc == -EAGAIN;
            if (r[i].rc == 0)
                winner = i;
        }
        pthread_barrier_destroy(&bar);
        CHECK(won == 1 && lost == RACERS - 1, "round %d: %d won, %d refused of %d", round, won, lost,
              RACERS);
    }
    store_close(s);
}

static void durability_normal_and_prefix(void)
{
    store_options o = store_defaults();
    CHECK(o.sync == STORE_SYNC_FULL && o.busy_timeout_ms == 5000, "defaults");
    o.sync = STORE_SYNC_NORMAL;
    char path[160], err[256] = "";
    snprintf(path, sizeof path, "sqlite:%s", newdb());
    store *s = NULL;
    CHECK(store_open(path, &o, &s, err, sizeof err) == 0, "open normal: %s", err);
    if (!s) return;
    uint8_t b[3] = { 7, 8, 9 };
    store_record r = { "n", b, 3, NULL, 0, 3 };
    CHECK(store_save(s, &r, 1, err, sizeof err) == 0, "save");
    store_close(s);
    CHECK(access(path + 7, F_OK) == 0, "prefix stripped: file at the path");
    s = open_ok(path + 7);
    CHECK(s && strcmp(store_where(s), path + 7) == 0, "where: %s", s ? store_where(s) : "");
    store_close(s);
    s = open_ok(path);
    store_loaded l;
    CHECK(s && store_load(s, "n", &l, NULL, 0) == 0 && l.state_len == 3 && l.state[2] == 9,
          "reload");
    store_loaded_free(&l);
    store_close(s);
}

/* ---- PostgreSQL's own cases -------------------------------------------- */

/* One SQL command on a raw connection; 0 when it succeeded. */
static int pg_exec(const char *uri, const char *sql, char *out, size_t outlen)
{
    PGconn *c = PQconnectdb(uri);
    PGresult *r = PQexec(c, sql);
    ExecStatusType t = PQresultStatus(r);
    if (out && outlen) {
        out[0] = 0;
        if (t == PGRES_TUPLES_OK && PQntuples(r) > 0)
            snprintf(out, outlen, "%s", PQgetvalue(r, 0, 0));
    }
    PQclear(r);
    PQfinish(c);
    return t == PGRES_COMMAND_OK || t == PGRES_TUPLES_OK ? 0 : -1;
}

static void schema_server(void)
{
    char err[512] = "", v[32];
    const char *uri = newdb();
    char path[256];
    snprintf(path, sizeof path, "%s", uri);
    store *s = open_ok(path);
    if (!s) return;
    store_close(s);
    CHECK(pg_exec(path, "SELECT version FROM lind_schema", v, sizeof v) == 0 && !strcmp(v, "3"),
          "schema version 3 (%s)", v);
    CHECK(pg_exec(path, "SELECT attstorage FROM pg_attribute WHERE attrelid = 'lind_sessions'::regclass"
                        " AND attname = 'state'", v, sizeof v) == 0 && !strcmp(v, "e"),
          "state stored uncompressed out of line (%s)", v);
    /* Opening again (as a second node would) migrates nothing twice. */
    s = open_ok(path);
    store_close(s);
    pg_exec(path, "UPDATE lind_schema SET version = 99", NULL, 0);
    s = NULL;
    CHECK(store_open(path, NULL, &s, err, sizeof err) == -EINVAL && !s, "newer schema refused");
    CHECK(strstr(err, "schema version 99") != NULL, "says so: %s", err);
    /* A database holding another application's lind_sessions. */
    const char *other = newdb();
    pg_exec(other, "CREATE TABLE lind_sessions (id integer)", NULL, 0);
    CHECK(store_open(other, NULL, &s, err, sizeof err) == -EINVAL && strstr(err, "not a lind store"),
          "foreign table refused: %s", err);
    /* Two nodes opening a fresh database together: one creates, both work. */
    const char *fresh = newdb();
    snprintf(path, sizeof path, "%s", fresh);
    pid_t kids[4];
    for (int i = 0; i < 4; i++)
        if ((kids[i] = fork()) == 0) {
            store *k = NULL;
            _exit(store_open(path, NULL, &k, NULL, 0) == 0 ? (store_close(k), 0) : 1);
        }
    int ok = 0;
    for (int i = 0; i < 4; i++) {
        int st = 0;
        waitpid(kids[i], &st, 0);
        ok += WIFEXITED(st) && WEXITSTATUS(st) == 0;
    }
    CHECK(ok == 4, "%d of 4 concurrent first opens succeeded", ok);
    /* A password in the URI never shows in store_where or in messages. */
    char secret[300];
    snprintf(secret, sizeof secret, "postgresql://lind:hunter2@/s%d?host=%s&port=%d", dbseq, pg.dir,
             pg.port);   /* the database `fresh` */
    s = NULL;
    CHECK(store_open(secret, NULL, &s, err, sizeof err) == 0, "open with a password: %s", err);
    if (s) {
        CHECK(strncmp(store_where(s), "postgresql://lind@", 18) == 0 &&
              !strstr(store_where(s), "hunter2"), "where: %s", store_where(s));
        store_loaded ld;
        CHECK(store_load(s, "ghost", &ld, err, sizeof err) == -ENOENT && !strstr(err, "hunter2"),
              "message: %s", err);
        store_close(s);
        s = NULL;
    }
    /* Another schema of the same database, through the URI's options: a
     * second, independent store. */
    char other_schema[400];
    pg_exec(path, "CREATE SCHEMA tenant2", NULL, 0);
    snprintf(other_schema, sizeof other_schema, "%s&options=-csearch_path%%3Dtenant2", path);
    s = NULL;
    CHECK(store_open(other_schema, NULL, &s, err, sizeof err) == 0, "open in schema tenant2: %s", err);
    if (s) {
        size_t cnt = 9;
        CHECK(store_count(s, &cnt, NULL, 0) == 0 && cnt == 0, "tenant2 starts empty (%zu)", cnt);
        store_close(s);
        s = NULL;
    }
    CHECK(pg_exec(path, "SELECT count(*) FROM tenant2.lind_sessions", v, sizeof v) == 0 &&
          !strcmp(v, "0"), "tables created in tenant2");
    /* Bad and unreachable URIs: clear errors, no crash. */
    CHECK(store_open("postgresql://[bad", NULL, &s, err, sizeof err) == -EINVAL && !s,
          "malformed URI: %s", err);
    char nowhere[256];
    snprintf(nowhere, sizeof nowhere, "postgresql:///x?host=%s/no-such-dir&user=lind", pg.dir);
    CHECK(store_open(nowhere, NULL, &s, err, sizeof err) == -EIO && !s, "unreachable server: %s", err);
    CHECK(strstr(err, "cannot connect") && strstr(err, "no-such-dir"), "message: %s", err);
    CHECK(!strchr(err, '\n') && !strchr(err, '\t'), "message is one line: %s", err);
    pgserver_uri(&pg, "no_such_database", nowhere, sizeof nowhere);
    CHECK(store_open(nowhere, NULL, &s, err, sizeof err) == -EIO && strstr(err, "no_such_database"),
          "missing database: %s", err);
}

/* The store's connections (libpq's fallback_application_name "lind"): not
 * a test helper's own, which may still be exiting. */
#define LIND_CONNS " AND application_name = 'lind'"

/* Terminate every backend of database uri but the caller's (as an
 * administrator's pg_terminate_backend would); how many it ended. */
static int terminate_backends(const char *uri, const char *extra_where)
{
    char sql[600], pids[400] = "";
    snprintf(sql, sizeof sql, "SELECT coalesce(string_agg(pid::text, ','), '') FROM (SELECT pid,"
             " pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database()"
             " AND pid <> pg_backend_pid()%s) t", extra_where ? extra_where : "");
    if (pg_exec(uri, sql, pids, sizeof pids) != 0)
        return -1;
    if (!pids[0])
        return 0;
    int n = 1;
    for (const char *p = pids; *p; p++)
        n += *p == ',';
    /* pg_terminate_backend only signals: wait until those backends are gone
     * (as after a restart), so the store finds its connection closed, not
     * closing. */
    char v[32];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM pg_stat_activity WHERE pid IN (%s)", pids);
    for (int i = 0; i < 6000 && pg_exec(uri, sql, v, sizeof v) == 0 && atoi(v) > 0; i++)
        usleep(10000);
    return n;
}

/* Timeouts apply to every statement, including through a pooler's
 * connection: a single statement (a lease) and a transaction (a save)
 * blocked by another connection's row lock end with the lock timeout
 * (-EBUSY), named; a transaction blocked longer than statement_timeout
 * ends with it. */
static void timeouts(void)
{
    char path[256], err[512] = "";
    snprintf(path, sizeof path, "%s", newdb());
    store_options o = store_defaults();
    o.busy_timeout_ms = 100;
    store *s = NULL;
    CHECK(store_open(path, &o, &s, err, sizeof err) == 0, "open: %s", err);
    if (!s) return;
    uint8_t st[64];
    fill(st, sizeof st, 5);
    store_record r = { "t1", st, sizeof st, NULL, 0, 1 };
    store_lease l;
    CHECK(store_save(s, &r, 1, err, sizeof err) == 0, "save: %s", err);
    CHECK(store_lease_acquire(s, "t1", "me", 60000, &l, err, sizeof err) == 0, "lease: %s", err);
    PGconn *locker = PQconnectdb(path);
    PGresult *x = PQexec(locker, "BEGIN; SELECT 1 FROM lind_leases WHERE name = 't1' FOR UPDATE;"
                                 " SELECT 1 FROM lind_sessions WHERE name = 't1' FOR UPDATE");
    CHECK(PQresultStatus(x) == PGRES_TUPLES_OK, "lock rows: %s", PQerrorMessage(locker));
    PQclear(x);
    int rc = store_lease_renew(s, "t1", "me", 60000, &l, err, sizeof err);
    CHECK(rc == -EBUSY && strstr(err, "lock timeout") && strstr(err, "lease-renew"),
          "a single statement waits lock_timeout: %d %s", rc, err);
    rc = store_save(s, &r, 1, err, sizeof err);
    CHECK(rc == -EBUSY && strstr(err, "lock timeout"), "a save waits lock_timeout: %d %s", rc, err);
    store_counters c;   /* /metrics: lind_store_errors_total{kind} */
    store_get_counters(s, &c);
    CHECK(c.err_busy == 2 && c.err_io == 0 && c.err_other == 0,
          "two timeouts counted: timeout %llu connection %llu other %llu",
          (unsigned long long)c.err_busy, (unsigned long long)c.err_io,
          (unsigned long long)c.err_other);
    store_close(s);
    s = NULL;
    o.busy_timeout_ms = 60000;
    o.statement_timeout_ms = 200;
    CHECK(store_open(path, &o, &s, err, sizeof err) == 0, "open: %s", err);
    if (s) {
        rc = store_save(s, &r, 1, err, sizeof err);
        CHECK(rc == -EBUSY && strstr(err, "statement timeout"), "statement_timeout: %d %s", rc, err);
        rc = store_lease_renew(s, "t1", "me", 60000, &l, err, sizeof err);
        CHECK(rc == -EBUSY && strstr(err, "statement timeout"), "statement_timeout, single: %d %s",
              rc, err);
        store_get_counters(s, &c);
        CHECK(c.err_busy == 2 && c.err_other == 0, "statement timeouts counted: %llu %llu",
              (unsigned long long)c.err_busy, (unsigned long long)c.err_other);
    }
    PQclear(PQexec(locker, "ROLLBACK"));
    PQfinish(locker);
    if (s) {
        CHECK(store_save(s, &r, 1, err, sizeof err) == 0, "unlocked: %s", err);
        store_close(s);
    }
}

/* A save blocked on a row lock in the store thread; another thread
 * terminates its backend once it waits (pg_stat_activity says so) and then
 * lets the lock go. */
struct killer { const char *uri; PGconn *locker; int killed; };
static void *kill_waiting(void *arg)
{
    struct killer *k = arg;
    char v[32];
    for (int i = 0; i < 6000 && k->killed <= 0; i++) {   /* at most 10 minutes */
        if (pg_exec(k->uri, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                    " AND application_name = 'lind' AND wait_event_type = 'Lock'", v, sizeof v) == 0 &&
            atoi(v) > 0)
            k->killed = terminate_backends(k->uri, LIND_CONNS);
        else
            usleep(100000);
    }
    PQclear(PQexec(k->locker, "ROLLBACK"));
    return NULL;
}

/* A takeover that commits while store_lease_renew_many waits on its row:
 * the renewal re-reads the row and leaves it (lost), and the holder it
 * reports is the new one, not what the statement's snapshot still showed
 * (this owner). */
struct taker { const char *uri; PGconn *c; int done; };
static void *commit_when_waited(void *arg)
{
    struct taker *t = arg;
    char v[32];
    for (int i = 0; i < 6000 && !t->done; i++) {   /* at most 10 minutes */
        if (pg_exec(t->uri, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                    " AND application_name = 'lind' AND wait_event_type = 'Lock'", v, sizeof v) == 0 &&
            atoi(v) > 0)
            t->done = 1;
        else
            usleep(20000);
    }
    PQclear(PQexec(t->c, "COMMIT"));
    return NULL;
}

static void leases_many_race(void)
{
    const char *path = newdb();
    store *s = open_ok(path);
    if (!s) return;
    char err[512] = "";
    CHECK(store_lease_acquire(s, "k", "node-a", 60000, NULL, err, sizeof err) == 0 &&
          store_lease_acquire(s, "r", "node-a", 60000, NULL, err, sizeof err) == 0, "take: %s", err);
    struct taker t = { path, PQconnectdb(path), 0 };
    PGresult *x = PQexec(t.c, "BEGIN; UPDATE lind_leases SET owner = 'node-b' WHERE name = 'r'");
    CHECK(PQresultStatus(x) == PGRES_COMMAND_OK, "takeover begun: %s", PQerrorMessage(t.c));
    PQclear(x);
    pthread_t th;
    CHECK(pthread_create(&th, NULL, commit_when_waited, &t) == 0, "thread");
    const char *names[] = { "k", "r" };
    uint8_t lost[2];
    store_lease held[2];
    memset(held, 0, sizeof held);
    int rc = store_lease_renew_many(s, names, 2, "node-a", 60000, lost, held, err, sizeof err);
    pthread_join(th, NULL);
    PQfinish(t.c);
    CHECK(t.done == 1, "the renewal waited on the row lock");
    CHECK(rc == 0 && lost[0] == 0 && lost[1] == 1, "k renewed, r lost: %d %d %d %s", rc, lost[0],
          lost[1], err);
    CHECK(!strcmp(held[1].owner, "node-b"), "r's holder is the new one: '%s'", held[1].owner);
    store_close(s);
}

/* Lost connections cost no operation that could succeed: backends
 * terminated while idle and a server restart are noticed before the next
 * statement is sent, which then runs on a new connection; an operation
 * started while the server is down waits for it (reconnect_ms); a save whose
 * backend is terminated mid-transaction (before COMMIT) runs again. */
static void reconnect(void)
{
    char path[256], err[512] = "";
    snprintf(path, sizeof path, "%s", newdb());
    store_options o = store_defaults();
    o.reconnect_ms = 600000;     /* a loaded machine restarts a server slowly */
    o.busy_timeout_ms = 600000;  /* the save below waits on a lock until the kill */
    store *s = NULL;
    CHECK(store_open(path, &o, &s, err, sizeof err) == 0, "open: %s", err);
    if (!s) return;
    uint8_t st[3000];
    fill(st, sizeof st, 9);
    store_record r[2] = { { "r1", st, sizeof st, NULL, 0, 1 }, { "r2", st, 100, NULL, 0, 2 } };
    store_save_result res[2];
    store_loaded ld;
    store_lease l;
    store_counters c0, c;
    CHECK(store_save(s, r, 2, err, sizeof err) == 0, "save: %s", err);
    CHECK(store_lease_acquire(s, "r1", "me", 600000, &l, err, sizeof err) == 0, "lease: %s", err);
    store_get_counters(s, &c0);
    /* 1. Terminated while idle: every kind of operation goes through. */
    CHECK(terminate_backends(path, LIND_CONNS) == 1, "one backend terminated");
    CHECK(store_load(s, "r1", &ld, err, sizeof err) == 0, "load after terminate: %s", err);
    if (ld.state) store_loaded_free(&ld);
    CHECK(terminate_backends(path, LIND_CONNS) == 1, "terminated again");
    CHECK(store_save_versioned(s, r, (uint64_t[]){ 1, 1 }, 2, "me", res, err, sizeof err) == -ENOLCK,
          "versioned save after terminate: %s", err);
    CHECK(res[0].rc == 0 && res[0].version == 2 && res[1].rc == -ENOLCK,
          "r1 saved under its lease, r2 refused (no lease): %d %d", res[0].rc, res[1].rc);
    CHECK(terminate_backends(path, LIND_CONNS) == 1, "terminated again");
    CHECK(store_fork(s, "r1", "r3", err, sizeof err) == 0, "fork after terminate: %s", err);
    CHECK(terminate_backends(path, LIND_CONNS) == 1, "terminated again");
    CHECK(store_delete(s, "r3", err, sizeof err) == 0, "delete after terminate: %s", err);
    CHECK(terminate_backends(path, LIND_CONNS) == 1, "terminated again");
    CHECK(store_lease_renew(s, "r1", "me", 600000, &l, err, sizeof err) == 0, "renew: %s", err);
    store_get_counters(s, &c);
    CHECK(c.reconnects == c0.reconnects + 5, "five reconnects: %llu",
          (unsigned long long)(c.reconnects - c0.reconnects));
    CHECK(c.err_io == c0.err_io && c.err_other == c0.err_other, "no call failed: io %llu other %llu",
          (unsigned long long)(c.err_io - c0.err_io), (unsigned long long)(c.err_other - c0.err_other));
    /* 2. The server restarted while the handle was idle. */
    char why[512] = "";
    CHECK(pgserver_crash(&pg) == 0 && pgserver_up(&pg, NULL, why, sizeof why) == 0, "restart: %s", why);
    size_t n = 0;
    CHECK(store_count(s, &n, err, sizeof err) == 0 && n == 2, "count after restart (%zu): %s", n, err);
    /* 3. Down when the operation starts: it waits for the server, which a
     * child brings up. */
    CHECK(pgserver_crash(&pg) == 0, "stopped");
    pid_t kid = fork();
    if (kid == 0)
        _exit(pgserver_up(&pg, NULL, why, sizeof why) == 0 ? 0 : 1);
    CHECK(store_load(s, "r2", &ld, err, sizeof err) == 0 && ld.state_len == 100,
          "load while the server comes back: %s", err);
    if (ld.state) store_loaded_free(&ld);
    int wst = 0;
    waitpid(kid, &wst, 0);
    CHECK(WIFEXITED(wst) && WEXITSTATUS(wst) == 0, "the server came back");
    /* 4. Terminated inside a save transaction, before COMMIT. */
    struct killer k = { path, PQconnectdb(path), 0 };
    PGresult *x = PQexec(k.locker, "BEGIN; SELECT 1 FROM lind_leases WHERE name = 'r1' FOR UPDATE");
    CHECK(PQresultStatus(x) == PGRES_TUPLES_OK, "lock: %s", PQerrorMessage(k.locker));
    PQclear(x);
    pthread_t th;
    store_get_counters(s, &c0);
    CHECK(pthread_create(&th, NULL, kill_waiting, &k) == 0, "thread");
    /* The lease check (FOR SHARE on the lease row) waits for the locker. */
    int rc = store_save_versioned(s, r, (uint64_t[]){ 2 }, 1, "me", res, err, sizeof err);
    pthread_join(th, NULL);
    PQfinish(k.locker);
    store_get_counters(s, &c);
    CHECK(k.killed == 1, "the waiting backend was terminated (%d)", k.killed);
    CHECK(rc == 0 && res[0].rc == 0 && res[0].version == 3, "the save ran again and committed:"
          " %d %d v%llu %s", rc, res[0].rc, (unsigned long long)res[0].version, err);
    CHECK(c.retries >= c0.retries + 1 && c.err_io == c0.err_io, "counted as a retry, not a failure");
    CHECK(store_load(s, "r1", &ld, err, sizeof err) == 0 && ld.version == 3, "r1 at version 3: %s",
          err);
    if (ld.state) store_loaded_free(&ld);
    store_close(s);
}

/* The server dies under an open handle: every operation fails with -EIO
 * and libpq's message, nothing crashes; when the server is back the same
 * handle reconnects and every committed save is there. */
static void connection_loss(void)
{
    char path[256], err[512] = "";
    snprintf(path, sizeof path, "%s", newdb());
    store_options o = store_defaults();
    o.reconnect_ms = 0;   /* one attempt: the server stays down */
    store *s = NULL;
    CHECK(store_open(path, &o, &s, err, sizeof err) == 0, "open: %s", err);
    if (!s) return;
    uint8_t st[3000];
    fill(st, sizeof st, 77);
    store_record r[3] = { { "k1", st, sizeof st, st, 10, 1 }, { "k2", st, 100, NULL, 0, 2 },
                          { "k3", st, 5, NULL, 0, 3 } };
    CHECK(store_save(s, r, 3, err, sizeof err) == 0, "save: %s", err);
    store_lease l;
    CHECK(store_lease_acquire(s, "k1", "node-a", 60000, &l, err, sizeof err) == 0, "lease: %s", err);
    CHECK(pgserver_crash(&pg) == 0, "server stopped");
    store_loaded ld;
    size_t n;
    store_info *v = NULL;
    store_save_result res[3];
    int rc;
    err[0] = 0;
    rc = store_save(s, r, 3, err, sizeof err);
    CHECK(rc == -EIO && err[0], "save on a dead server: %d %s", rc, err);
    rc = store_save_versioned(s, r, (uint64_t[]){ 1, 1, 1 }, 3, NULL, res, err, sizeof err);
    CHECK(rc == -EIO && res[0].rc == -EIO && res[2].rc == -EIO, "versioned save: %d", rc);
    err[0] = 0;
    CHECK(store_load(s, "k1", &ld, err, sizeof err) == -EIO && err[0], "load: %s", err);
    CHECK(strstr(err, "connection") != NULL, "message says connection: %s", err);
    CHECK(!strchr(err, '\n') && !strchr(err, '\t'), "message is one line: %s", err);
    CHECK(store_list(s, &v, &n, err, sizeof err) == -EIO && !v, "list: %s", err);
    CHECK(store_count(s, &n, err, sizeof err) == -EIO, "count");
    CHECK(store_delete(s, "k2", err, sizeof err) == -EIO, "delete");
    CHECK(store_fork(s, "k1", "k9", err, sizeof err) == -EIO, "fork");
    CHECK(store_lease_renew(s, "k1", "node-a", 1000, &l, err, sizeof err) == -EIO, "renew");
    store *t = NULL;
    CHECK(store_open(path, NULL, &t, err, sizeof err) == -EIO && !t, "open: %s", err);
    char why[512] = "";
    CHECK(pgserver_up(&pg, NULL, why, sizeof why) == 0, "restart: %s", why);
    /* The same handle again: it reconnects. */
    CHECK(store_load(s, "k1", &ld, err, sizeof err) == 0, "load after restart: %s", err);
    CHECK(ld.state_len == sizeof st && memcmp(ld.state, st, sizeof st) == 0 && ld.transcript_len == 10 &&
          ld.version == 1, "k1 intact");
    store_loaded_free(&ld);
    CHECK(store_count(s, &n, err, sizeof err) == 0 && n == 3, "all three there (%zu): %s", n, err);
    CHECK(store_lease_renew(s, "k1", "node-a", 1000, &l, err, sizeof err) == 0,
          "the lease survived: %s", err);
    CHECK(store_save_versioned(s, r, (uint64_t[]){ 1, 1, 1 }, 3, NULL, res, err, sizeof err) == 0 &&
          res[1].version == 2, "versioned save after restart: %s", err);
    CHECK(store_open(path, NULL, &t, err, sizeof err) == 0, "new handle: %s", err);
    store_close(t);
    store_close(s);
}

/* Node ids: one live instance per id (PostgreSQL's lind_nodes); SQLite
 * accepts every claim (one daemon per file). */
static void nodes(void)
{
    char err[512] = "";
    store *s = open_ok(newdb());
    if (!s) return;
    store_node h;
    int rc = store_node_claim(s, "n0", "inst-a", 60000, &h, err, sizeof err);
    CHECK(rc == 0, "first claim: %d %s", rc, err);
    rc = store_node_claim(s, "n0", "inst-b", 60000, &h, err, sizeof err);
    if (!use_pg) {
        CHECK(rc == 0, "SQLite: nothing to claim: %d %s", rc, err);
        CHECK(store_node_beat(s, "n0", "inst-a", 1000, err, sizeof err) == 0, "beat: %s", err);
        CHECK(store_node_release(s, "n0", "inst-a", err, sizeof err) == 0, "release: %s", err);
        store_close(s);
        return;
    }
    CHECK(rc == -EADDRINUSE && !strcmp(h.instance, "inst-a") && h.expires_in_ms > 0 &&
          h.expires_in_ms <= 60000 && h.heartbeat_age_ms >= 0, "a live id is refused: %d '%s' %lld",
          rc, h.instance, (long long)h.expires_in_ms);
    CHECK(strstr(err, "'n0'") && strstr(err, "inst-a"), "message names both: %s", err);
    CHECK(store_node_claim(s, "n1", "inst-b", 60000, &h, err, sizeof err) == 0, "another id: %s", err);
    CHECK(store_node_claim(s, "n0", "inst-a", 60000, &h, err, sizeof err) == 0,
          "its own instance claims again: %s", err);
    CHECK(store_node_beat(s, "n0", "inst-a", 60000, err, sizeof err) == 0, "heartbeat: %s", err);
    CHECK(store_node_beat(s, "n0", "inst-b", 60000, err, sizeof err) == -ENOLCK, "not b's: %s", err);
    CHECK(store_node_release(s, "n0", "inst-a", err, sizeof err) == 0, "release: %s", err);
    CHECK(store_node_claim(s, "n0", "inst-b", 300, &h, err, sizeof err) == 0, "free again: %s", err);
    CHECK(store_node_beat(s, "n0", "inst-a", 60000, err, sizeof err) == -ENOLCK && strstr(err, "inst-a"),
          "a's heartbeat finds it taken: %s", err);
    /* b stops beating: its claim expires on the server's clock and c gets it. */
    rc = -EADDRINUSE;
    for (int i = 0; i < 6000 && rc == -EADDRINUSE; i++) {   /* at most ~2 minutes */
        rc = store_node_claim(s, "n0", "inst-c", 60000, &h, err, sizeof err);
        if (rc == -EADDRINUSE)
            usleep(20000);
    }
    CHECK(rc == 0, "an expired claim is taken over: %d %s", rc, err);
    CHECK(store_node_claim(s, "bad\nid", "x", 1000, &h, err, sizeof err) == -EINVAL, "bad id");
    store_close(s);
}

/* ---- turn results (exactly-once turns) -------------------------------- */

static void turn_results(void)
{
    store *s = open_ok(newdb());
    if (!s) return;
    char err[256] = "";
    uint8_t b[8] = { 1 }, *out = NULL;
    size_t len = 0;
    uint64_t ver = 0;
    const uint8_t ans[5] = { 'h', 'e', 'l', 'l', 'o' };
    store_record r = { "t", b, 8, NULL, 0, 3 };
    store_turn_record tr = { "req-1", ans, sizeof ans };
    uint64_t ex = STORE_VERSION_NEW;
    store_save_result res[2];
    CHECK(store_save_turns(s, &r, &tr, &ex, NULL, 1, NULL, res, err, sizeof err) == 0, "save: %s", err);
    CHECK(store_turn_get(s, "t", "req-1", &out, &len, &ver, err, sizeof err) == 0 && len == 5 &&
          !memcmp(out, "hello", 5) && ver == 1, "recorded with the save: %s", err);
    free(out);
    CHECK(store_turn_get(s, "t", "req-2", &out, &len, &ver, err, sizeof err) == -ENOENT, "none: %s", err);
    CHECK(store_turn_get(s, "u", "req-1", &out, &len, &ver, err, sizeof err) == -ENOENT,
          "per session: %s", err);
    /* A save refused by its version records nothing; a group records only
     * what it writes. */
    store_record g[2] = { { "t", b, 8, NULL, 0, 4 }, { "v", b, 8, NULL, 0, 4 } };
    store_turn_record gt[2] = { { "stale", ans, 5 }, { "fresh", ans, 5 } };
    uint64_t gex[2] = { 7, STORE_VERSION_NEW };
    CHECK(store_save_turns(s, g, gt, gex, NULL, 2, NULL, res, err, sizeof err) == -ECANCELED &&
          res[1].rc == 0, "one stale: %s", err);
    CHECK(store_turn_get(s, "t", "stale", &out, &len, &ver, err, sizeof err) == -ENOENT,
          "the refused record's result is not kept");
    CHECK(store_turn_get(s, "v", "fresh", &out, &len, &ver, err, sizeof err) == 0, "the written one's is");
    free(out);
    /* A bad request id refuses the whole group. */
    store_turn_record bad = { "a\nb", ans, 5 };
    ex = 1;
    CHECK(store_save_turns(s, &r, &bad, &ex, NULL, 1, NULL, res, err, sizeof err) == -EINVAL, "bad id: %s", err);
    char longid[80];
    memset(longid, 'x', 65);
    longid[65] = 0;
    bad.request_id = longid;
    CHECK(store_save_turns(s, &r, &bad, &ex, NULL, 1, NULL, res, err, sizeof err) == -EINVAL, "65 bytes");
    /* The last STORE_TURNS_KEEP saves' results are kept. */
    uint64_t v = 1;
    for (int i = 0; i < STORE_TURNS_KEEP + 8; i++) {
        char id[32];
        snprintf(id, sizeof id, "k%d", i);
        store_turn_record k = { id, ans, 5 };
        CHECK(store_save_turns(s, &r, &k, &v, NULL, 1, NULL, res, err, sizeof err) == 0, "save %d: %s", i, err);
        v = res[0].version;
    }
    int kept = 0;
    for (int i = 0; i < STORE_TURNS_KEEP + 8; i++) {
        char id[32];
        snprintf(id, sizeof id, "k%d", i);
        int rc = store_turn_get(s, "t", id, &out, &len, &ver, err, sizeof err);
        if (rc == 0) { kept++; free(out); }
        CHECK(rc == (i < 8 ? -ENOENT : 0), "k%d: %d", i, rc);
    }
    CHECK(kept == STORE_TURNS_KEEP, "%d kept", kept);
    CHECK(store_turn_get(s, "t", "req-1", &out, &len, &ver, err, sizeof err) == -ENOENT, "the first pruned");
    /* Deleting the session deletes its results. */
    CHECK(store_delete(s, "t", err, sizeof err) == 0, "delete: %s", err);
    CHECK(store_save(s, &r, 1, err, sizeof err) == 0, "recreated");
    CHECK(store_turn_get(s, "t", "k39", &out, &len, &ver, err, sizeof err) == -ENOENT, "gone with it");
    store_close(s);
}

/* store_save_keep: the copy is written in the save's transaction, as a
 * fork of the row as saved, only where its name is free; a refused record
 * keeps no copy, and a bad copy name refuses the group. */
static void save_keeps_a_copy(void)
{
    store *s = open_ok(newdb());
    if (!s) return;
    char err[256] = "";
    uint8_t st[300], tr[20];
    fill(st, sizeof st, 11);
    fill(tr, sizeof tr, 12);
    store_record r = { "resp-a", st, sizeof st, tr, sizeof tr, 9 };
    const char *keep[2] = { "chat-0000000000000001", NULL };
    uint64_t ex = STORE_VERSION_NEW;
    store_save_result res[2];
    CHECK(store_save_keep(s, &r, NULL, keep, &ex, NULL, 1, NULL, res, err, sizeof err) == 0 &&
          res[0].rc == 0 && res[0].kept == 1, "save with a copy: %s", err);
    store_loaded a, b;
    CHECK(store_load(s, "chat-0000000000000001", &b, err, sizeof err) == 0, "the copy loads: %s", err);
    store_load(s, "resp-a", &a, NULL, 0);
    CHECK(b.state_len == a.state_len && !memcmp(a.state, b.state, a.state_len) && b.tokens == 9 &&
          b.transcript_len == a.transcript_len && !memcmp(a.transcript, b.transcript, a.transcript_len),
          "the copy is the saved row");
    CHECK(b.version == 1, "a new row: version %llu", (unsigned long long)b.version);
    store_loaded_free(&a);
    store_loaded_free(&b);
    store_info *v = NULL;
    size_t n = 0;
    CHECK(store_list(s, &v, &n, err, sizeof err) == 0 && n == 2, "two rows: %s", err);
    for (size_t i = 0; i < n; i++)
        CHECK(v[i].origin == (!strncmp(v[i].name, "chat-", 5) ? STORE_ORIGIN_CHAT : STORE_ORIGIN_RESPONSE),
              "%s's origin %d", v[i].name, v[i].origin);
    free(v);
    /* A taken name is left as it is; the save still commits. */
    uint8_t st2[10];
    fill(st2, sizeof st2, 13);
    store_record r2 = { "resp-b", st2, sizeof st2, NULL, 0, 3 };
    CHECK(store_save_keep(s, &r2, NULL, keep, &ex, NULL, 1, NULL, res, err, sizeof err) == 0 &&
          res[0].rc == 0 && res[0].kept == 0, "a taken name: %s", err);
    store_load(s, "chat-0000000000000001", &b, NULL, 0);
    CHECK(b.tokens == 9 && b.state_len == sizeof st, "the taken name keeps its row");
    store_loaded_free(&b);
    CHECK(store_load(s, "resp-b", &a, NULL, 0) == 0 && a.tokens == 3, "the record itself saved");
    store_loaded_free(&a);
    /* A record refused by its version keeps no copy. */
    const char *keep2[1] = { "chat-0000000000000002" };
    uint64_t stale = 42;
    CHECK(store_save_keep(s, &r, NULL, keep2, &stale, NULL, 1, NULL, res, err, sizeof err) == -ECANCELED,
          "stale: %s", err);
    CHECK(store_load(s, "chat-0000000000000002", &b, NULL, 0) == -ENOENT, "no copy of a refused save");
    /* A copy under the record's own name, or a bad name, refuses the group. */
    const char *self[1] = { "resp-a" }, *bad[1] = { "" };
    uint64_t one = 1;
    CHECK(store_save_keep(s, &r, NULL, self, &one, NULL, 1, NULL, res, err, sizeof err) == -EINVAL,
          "its own name: %s", err);
    CHECK(store_save_keep(s, &r, NULL, bad, &one, NULL, 1, NULL, res, err, sizeof err) == -EINVAL &&
          strstr(err, "copy") != NULL, "a bad name: %s", err);
    store_close(s);
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/lind-store-test-XXXXXX");
    if (!mkdtemp(dir)) {
        printf("FAIL setup: mkdtemp\n");
        return 1;
    }
    RUN(save_load_roundtrip);
    RUN(missing_and_delete);
    RUN(list_sorted);
    RUN(grouped_save_all_or_nothing);
    RUN(fork_copies);
    RUN(names);
    RUN(export_import);
    RUN(export_refusals);
    RUN(schema_and_foreign_files);
    RUN(durability_normal_and_prefix);
    RUN(versions_cas);
    RUN(versions_grouped);
    RUN(leases);
    RUN(leases_many);
    RUN(leases_acquire_many);
    RUN(leases_race);
    RUN(leased_saves);
    RUN(nodes);
    RUN(turn_results);
    RUN(save_keeps_a_copy);

    /* The same cases against PostgreSQL (names end in _pg). */
    char why[600];
    int up = pgserver_start(&pg, NULL, why, sizeof why);
    const char *pg_cases[] = { "save_load_roundtrip", "missing_and_delete", "list_sorted",
                               "grouped_save_all_or_nothing", "fork_copies", "names",
                               "export_import", "export_refusals", "versions_cas",
                               "versions_grouped", "leases", "leases_many", "leases_acquire_many", "leases_race",
                               "leased_saves", "schema_server",
                               "connection_loss", "timeouts", "reconnect", "nodes", "turn_results",
                               "leases_many_race", "save_keeps_a_copy" };
    if (up != 0) {
        for (size_t i = 0; i < sizeof pg_cases / sizeof pg_cases[0]; i++)
            printf("%s %s_pg: %s PostgreSQL server: %s\n", up > 0 ? "SKIP" : "FAIL", pg_cases[i],
                   up > 0 ? "cannot start a" : "could not start the", why);
        if (up < 0)
            check_total_failed_++;
    } else {
        use_pg = 1;
#define RUN_PG(f) do { check_begin(#f "_pg"); f(); check_end(); } while (0)
        RUN_PG(save_load_roundtrip);
        RUN_PG(missing_and_delete);
        RUN_PG(list_sorted);
        RUN_PG(grouped_save_all_or_nothing);
        RUN_PG(fork_copies);
        RUN_PG(names);
        RUN_PG(export_import);
        RUN_PG(export_refusals);
        RUN_PG(versions_cas);
        RUN_PG(versions_grouped);
        RUN_PG(leases);
        RUN_PG(leases_many);
        RUN_PG(leases_acquire_many);
        RUN_PG(leases_race);
        RUN_PG(leased_saves);
        RUN_PG(schema_server);
        RUN_PG(connection_loss);
        RUN_PG(timeouts);
        RUN_PG(reconnect);
        RUN_PG(nodes);
        RUN_PG(leases_many_race);
        RUN_PG(turn_results);
        RUN_PG(save_keeps_a_copy);
        pgserver_stop(&pg);
    }
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        printf("NOTE could not remove %s\n", dir);
    return check_exit();
}
