/* tests/test_store_basic.c — the session store (SQLite implementation)
 * through its public interface: save/load/list/delete/fork, grouped saves,
 * names, export/import and their refusals, schema versioning. */
#include "tests/check.h"
#include "state/store.h"

#include <errno.h>
#include <sqlite3.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[64];
static int dbseq;

/* A fresh database path per case. */
static const char *newdb(void)
{
    static char path[128];
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
     * -EBUSY and leaves nothing behind. */
    store_options o = store_defaults();
    o.busy_timeout_ms = 50;
    store *s2 = NULL;
    CHECK(store_open(path, &o, &s2, err, sizeof err) == 0, "second handle: %s", err);
    sqlite3 *raw = NULL;
    sqlite3_open(path, &raw);
    CHECK(sqlite3_exec(raw, "BEGIN IMMEDIATE", NULL, NULL, NULL) == SQLITE_OK, "lock");
    int rc = store_save(s2, bad, 2, err, sizeof err);
    CHECK(rc == -EBUSY, "locked store gives -EBUSY, got %d (%s)", rc, err);
    sqlite3_exec(raw, "ROLLBACK", NULL, NULL, NULL);
    sqlite3_close(raw);
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
        if (store_export_decode(x, n, &d, nm, err, sizeof err) != -EINVAL ||
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
            if (store_export_decode(y, xl, &d, nm, err, sizeof err) != -EINVAL)
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
    CHECK(store_export_decode(z, xl + 3, &d, nm, err, sizeof err) == -EINVAL &&
          strstr(err, "after its checksum"), "trailing bytes: %s", err);
    free(z);
    /* A store refuses to import any of these. */
    store *s = open_ok(newdb());
    if (s) {
        y[8] = 1;
        y[20] ^= 1;
        CHECK(store_import(s, "imp", y, xl, err, sizeof err) == -EINVAL, "import refuses damage");
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
    CHECK(sqlite3_step(st) == SQLITE_ROW && sqlite3_column_int(st, 0) == 2, "schema version 2");
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
    CHECK(sqlite3_step(st) == SQLITE_ROW && sqlite3_column_int(st, 0) == 2, "now version 2");
    sqlite3_finalize(st);
    sqlite3_close(db);

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
    CHECK(store_open(nodir, NULL, &s, err, sizeof err) == -EIO, "unopenable path: %s", err);
    store_options o = store_defaults();
    o.sync = (store_sync)5;
    CHECK(store_open(newdb(), &o, &s, err, sizeof err) == -EINVAL, "bad durability refused");
    CHECK(store_open("", NULL, &s, err, sizeof err) == -EINVAL, "empty path refused");
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
    s = open_ok(path);
    store_loaded l;
    CHECK(s && store_load(s, "n", &l, NULL, 0) == 0 && l.state_len == 3 && l.state[2] == 9,
          "reload");
    store_loaded_free(&l);
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
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        printf("NOTE could not remove %s\n", dir);
    return check_exit();
}
