/* tests/test_state_faults.c — fault injection into the store layer.
 *
 * One fixed workload through state/store.h (an exclusive open, grouped and
 * single saves, loads, a fork, export and import, a delete, list and count,
 * close, then a reopen, a save and a close) is run once cleanly to count
 * the allocations (SQLite's and lind's own), file writes and fsyncs, then
 * again once per N with
 *   - the N-th allocation failing, once: SQLite's through an
 *     SQLITE_CONFIG_MALLOC wrapper, lind's through the linker (the Makefile
 *     links this test with -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,
 *     which reroutes every call from the engine archive to __wrap_*);
 *   - the N-th write failing (a VFS shim over the default VFS), once;
 *   - every write from the N-th on failing (a disk gone bad);
 *   - the N-th fsync failing, once.
 * After each run the database is reopened without faults and checked:
 *   - every call either succeeded or returned one of the I/O-class codes
 *     (-EIO, -ENOMEM, -ENOSPC, -EBUSY) with a message: no crash, no other
 *     code, no silent failure;
 *   - every session holds the value of its last acknowledged write, or the
 *     value of a write after it that failed (a failed commit may or may not
 *     have reached the disk), never anything else: no acknowledged save is
 *     lost, nothing is half-written;
 *   - a load inside the run returns a value allowed at that point;
 *   - SQLite holds no allocation after the store is closed (no leak on any
 *     error path).
 * By default every write/fsync position and every 7th allocation position
 * are tried (a few seconds); LIND_FAULTS_FULL=1 (make test-faults) tries
 * every allocation too. Databases live in /dev/shm when it exists, so the
 * sweep does not wear a disk. */
#include "tests/check.h"
#include "tests/fault_vfs.h"
#include "state/store.h"

#include <errno.h>
#include <sqlite3.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- injection ----------------------------------------------------------- */

enum { F_ALLOC, F_WRITE, F_SYNC, F_KINDS };
static const char *const kind_name[F_KINDS] = { "allocation", "write", "fsync" };
static long counts[F_KINDS];      /* events seen since the last reset */
static long arm_at[F_KINDS];      /* fail the event with this number (1-based); 0 = off */
static int persistent;            /* keep failing after arm_at */
static long fired;
static long outstanding;          /* SQLite allocations not yet freed */

static int hit(int kind)
{
    long n = ++counts[kind];
    if (arm_at[kind] && (n == arm_at[kind] || (persistent && n > arm_at[kind]))) {
        fired++;
        return 1;
    }
    return 0;
}

static sqlite3_mem_methods real_mem;

/* lind's own allocations (store.c, store_sqlite.c, ...): see the top. */
void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t m);
void *__real_realloc(void *p, size_t n);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t m);
void *__wrap_realloc(void *p, size_t n);
/* Of the allocation events, how many were lind's, and (in the clean run)
 * their positions, so a strided sweep still tries every one of them. */
static long lind_allocs, lind_pos[256];
static int lind_hit(void)
{
    int h = hit(F_ALLOC);
    if (lind_allocs < 256) lind_pos[lind_allocs] = counts[F_ALLOC];
    lind_allocs++;
    return h;
}
void *__wrap_malloc(size_t n) { return lind_hit() ? NULL : __real_malloc(n); }
void *__wrap_calloc(size_t n, size_t m) { return lind_hit() ? NULL : __real_calloc(n, m); }
void *__wrap_realloc(void *p, size_t n) { return lind_hit() ? NULL : __real_realloc(p, n); }

static void *m_malloc(int n)
{
    if (hit(F_ALLOC)) return NULL;
    void *p = real_mem.xMalloc(n);
    if (p) outstanding++;
    return p;
}
static void m_free(void *p)
{
    if (p) outstanding--;
    real_mem.xFree(p);
}
static void *m_realloc(void *p, int n)
{
    if (hit(F_ALLOC)) return NULL;
    return real_mem.xRealloc(p, n);
}
static int m_size(void *p) { return real_mem.xSize(p); }
static int m_roundup(int n) { return real_mem.xRoundup(n); }
static int m_init(void *a) { return real_mem.xInit(a); }
static void m_shutdown(void *a) { real_mem.xShutdown(a); }

/* The shared VFS's hook (tests/fault_vfs.h): writes and syncs fail when
 * told to; truncations are passed through uncounted. */
static int write_hook(char kind)
{
    if (kind == 'w') return hit(F_WRITE) ? SQLITE_IOERR_WRITE : 0;
    if (kind == 's') return hit(F_SYNC) ? SQLITE_IOERR_FSYNC : 0;
    return 0;
}

static int install(void)
{
    if (sqlite3_config(SQLITE_CONFIG_GETMALLOC, &real_mem) != SQLITE_OK) return -1;
    sqlite3_mem_methods mm = real_mem;
    mm.xMalloc = m_malloc; mm.xFree = m_free; mm.xRealloc = m_realloc;
    mm.xSize = m_size; mm.xRoundup = m_roundup; mm.xInit = m_init; mm.xShutdown = m_shutdown;
    if (sqlite3_config(SQLITE_CONFIG_MALLOC, &mm) != SQLITE_OK) return -1;
    if (sqlite3_initialize() != SQLITE_OK) return -1;
    return fault_vfs_install("lind-faulty", write_hook);
}

/* ---- the workload and what it may leave behind -------------------------- */

#define NNAMES 6
static const char *const names[NNAMES] = { "a", "b", "c", "d", "e", "f" };
#define ABSENT (1ull << 63)
/* Values are small integers (bit positions); value v of any session has the
 * bytes content(v). allowed[i]: the values session i may hold now. */
static uint64_t allowed[NNAMES];

static size_t content(int v, int which, uint8_t *out)
{
    size_t n = which == 0 ? 3000 + (size_t)v * 9000 : 50 + (size_t)v * 7;
    uint32_t x = 0x9E3779B9u * (uint32_t)(v * 2 + which + 1);
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13; x ^= x >> 17; x ^= x << 5;
        out[i] = (uint8_t)x;
    }
    return n;
}
#define CONTENT_MAX (3000 + 8 * 9000)

static uint8_t cbuf[8][2][CONTENT_MAX];
static size_t clen[8][2];

static store_record rec(int name, int v)
{
    return (store_record){ names[name], cbuf[v][0], clen[v][0], cbuf[v][1], clen[v][1],
                           (uint64_t)v * 11 };
}

/* Which value a loaded session holds: -1 if its bytes match none. */
static int value_of(const store_loaded *l)
{
    for (int v = 1; v < 8; v++)
        if (l->state_len == clen[v][0] && l->transcript_len == clen[v][1] &&
            l->tokens == (uint64_t)v * 11 && memcmp(l->state, cbuf[v][0], l->state_len) == 0 &&
            memcmp(l->transcript, cbuf[v][1], l->transcript_len) == 0)
            return v;
    return -1;
}

static const char *run_label = "";

/* A failed call: its code must be an I/O-class code and come with a message
 * (or the answer an earlier failure made right: see semantic()). */
static void failed(const char *what, int rc, const char *err)
{
    CHECK(rc == -EIO || rc == -ENOMEM || rc == -ENOSPC || rc == -EBUSY,
          "%s: %s failed with unexpected code %d (%s)", run_label, what, rc, err);
    CHECK(err[0] != 0, "%s: %s failed (%d) without a message", run_label, what, rc);
}

/* -ENOENT for a session an earlier failed write may have left absent, or
 * -EEXIST for one it may have left present, is the right answer, not a
 * fault: 1 if rc is that, else 0. */
static int semantic(const char *what, int rc, const char *err, int may_be_absent, int may_exist)
{
    if (!((rc == -ENOENT && may_be_absent) || (rc == -EEXIST && may_exist)))
        return 0;
    CHECK(err[0] != 0, "%s: %s failed (%d) without a message", run_label, what, rc);
    return 1;
}
#define ABSENT_MAYBE(i) ((allowed[i] & ABSENT) != 0)
#define PRESENT_MAYBE(i) ((allowed[i] & ~ABSENT) != 0)

static void save_op(store *s, const int *nm, const int *vals, int n)
{
    store_record r[4] = { { 0 } };
    for (int i = 0; i < n; i++) r[i] = rec(nm[i], vals[i]);
    char err[512] = "";
    int rc = store_save(s, r, n, err, sizeof err);
    for (int i = 0; i < n; i++) {
        uint64_t bit = 1ull << vals[i];
        allowed[nm[i]] = rc == 0 ? bit : allowed[nm[i]] | bit;
    }
    if (rc) failed("save", rc, err);
}

/* src's possible values copied to dst (fork, export+import). */
static void copy_op(int rc, int src, int dst)
{
    uint64_t vals = allowed[src] & ~ABSENT;
    allowed[dst] = rc == 0 ? vals : allowed[dst] | vals;
}

static void workload(const char *path)
{
    store_options o = store_defaults();
    o.exclusive = 1;
    store *s = NULL;
    char err[512] = "";
    int rc = store_open(path, &o, &s, err, sizeof err);
    if (rc) { failed("open", rc, err); return; }
    int g1[3] = { 0, 1, 2 }, v1[3] = { 1, 2, 3 };
    save_op(s, g1, v1, 3);
    int a = 0, v4 = 4;
    save_op(s, &a, &v4, 1);
    err[0] = 0;
    rc = store_fork(s, "a", "d", err, sizeof err);
    if (!semantic("fork", rc, err, ABSENT_MAYBE(0), PRESENT_MAYBE(3))) {
        copy_op(rc, 0, 3);
        if (rc) failed("fork", rc, err);
    }
    uint8_t *ex = NULL;
    size_t exlen = 0;
    err[0] = 0;
    rc = store_export(s, "b", &ex, &exlen, err, sizeof err);
    if (rc) {
        if (!semantic("export", rc, err, ABSENT_MAYBE(1), 0)) failed("export", rc, err);
    } else {
        err[0] = 0;
        rc = store_import(s, "e", ex, exlen, err, sizeof err);
        if (!semantic("import", rc, err, 0, PRESENT_MAYBE(4))) {
            copy_op(rc, 1, 4);
            if (rc) failed("import", rc, err);
        }
        free(ex);
    }
    err[0] = 0;
    rc = store_delete(s, "c", err, sizeof err);
    if (!semantic("delete", rc, err, ABSENT_MAYBE(2), 0)) {
        allowed[2] = rc == 0 ? ABSENT : allowed[2] | ABSENT;
        if (rc) failed("delete", rc, err);
    }
    int g2[2] = { 0, 3 }, v2[2] = { 5, 6 };
    save_op(s, g2, v2, 2);
    store_loaded l;
    err[0] = 0;
    rc = store_load(s, "a", &l, err, sizeof err);
    if (rc == 0) {
        int v = value_of(&l);
        CHECK(v > 0 && (allowed[0] >> v & 1), "%s: load inside the run gave value %d", run_label, v);
        store_loaded_free(&l);
    } else if (!semantic("load", rc, err, ABSENT_MAYBE(0), 0)) {
        failed("load", rc, err);
    }
    store_info *inf = NULL;
    size_t n = 0;
    err[0] = 0;
    rc = store_list(s, &inf, &n, err, sizeof err);
    if (rc) failed("list", rc, err);
    free(inf);
    err[0] = 0;
    rc = store_count(s, &n, err, sizeof err);
    if (rc) failed("count", rc, err);
    store_close(s);
    /* A restart after whatever happened above. */
    s = NULL;
    err[0] = 0;
    rc = store_open(path, &o, &s, err, sizeof err);
    if (rc) { failed("reopen", rc, err); return; }
    int f = 5, v7 = 7;
    save_op(s, &f, &v7, 1);
    store_close(s);
}

/* Reopen without faults: every session holds an allowed value. */
static void verify(const char *path)
{
    store *s = NULL;
    char err[512] = "";
    int rc = store_open(path, NULL, &s, err, sizeof err);
    int never_opened = 1;
    for (int i = 0; i < NNAMES; i++) never_opened &= allowed[i] == ABSENT;
    if (rc) {
        CHECK(0, "%s: reopening without faults failed: %d %s", run_label, rc, err);
        return;
    }
    for (int i = 0; i < NNAMES; i++) {
        store_loaded l;
        rc = store_load(s, names[i], &l, err, sizeof err);
        if (rc == -ENOENT) {
            CHECK(allowed[i] & ABSENT, "%s: session %s is missing; it was acknowledged"
                  " (allowed values %#llx)", run_label, names[i], (unsigned long long)allowed[i]);
            continue;
        }
        CHECK(rc == 0, "%s: load %s: %d %s", run_label, names[i], rc, err);
        if (rc) continue;
        int v = value_of(&l);
        CHECK(v > 0 && (allowed[i] >> v & 1), "%s: session %s holds value %d; allowed %#llx",
              run_label, names[i], v, (unsigned long long)allowed[i]);
        store_loaded_free(&l);
    }
    (void)never_opened;
    store_close(s);
}

static char dir[64];
static int seq;

static void one_run(int kind, long at, int persist)
{
    char path[128];
    snprintf(path, sizeof path, "%s/f%d.db", dir, ++seq);
    for (int i = 0; i < NNAMES; i++) allowed[i] = ABSENT;
    memset(counts, 0, sizeof counts);
    memset(arm_at, 0, sizeof arm_at);
    arm_at[kind] = at;
    persistent = persist;
    workload(path);
    memset(arm_at, 0, sizeof arm_at);
    persistent = 0;
    verify(path);
    CHECK(outstanding == 0, "%s: %ld SQLite allocations still held after every handle closed",
          run_label, outstanding);
    outstanding = 0;
    char p2[160];
    unlink(path);
    snprintf(p2, sizeof p2, "%s-wal", path); unlink(p2);
    snprintf(p2, sizeof p2, "%s-shm", path); unlink(p2);
}

static long clean[F_KINDS];
static long clean_lind_pos[256], clean_lind_n;

static void clean_run_counts(void)
{
    run_label = "clean run";
    lind_allocs = 0;
    one_run(F_ALLOC, 0, 0);
    memcpy(clean, counts, sizeof clean);
    clean_lind_n = lind_allocs < 256 ? lind_allocs : 256;
    memcpy(clean_lind_pos, lind_pos, sizeof lind_pos);
    CHECK(fired == 0, "nothing injected");
    CHECK(clean[F_ALLOC] > 100 && clean[F_WRITE] > 10 && clean[F_SYNC] > 2 && lind_allocs > 5,
          "the workload exercises the store: %ld allocations (%ld of them lind's), %ld writes,"
          " %ld fsyncs", clean[F_ALLOC], lind_allocs, clean[F_WRITE], clean[F_SYNC]);
    for (int i = 0; i < NNAMES; i++)
        CHECK(allowed[i] == (i == 2 ? ABSENT : 1ull << (i == 0 ? 5 : i == 1 ? 2 : i == 3 ? 6 :
                                                      i == 4 ? 2 : 7)),
              "clean run: session %s ends as expected (%#llx)", names[i],
              (unsigned long long)allowed[i]);
    printf("NOTE workload: %ld allocations, %ld writes, %ld fsyncs\n",
           clean[F_ALLOC], clean[F_WRITE], clean[F_SYNC]);
}

static void sweep(int kind, int persist, long stride)
{
    char label[96];
    long runs = 0, fires = 0;
    long extra = kind == F_ALLOC && stride > 1 ? clean_lind_n : 0;
    for (long n = 1, k = 0; !check_failed_; ) {
        if (n > clean[kind]) {
            /* Strided: then every position of a lind allocation. */
            if (k >= extra) break;
            n = clean_lind_pos[k++];
            if ((n - 1) % stride == 0) continue;
        }
        snprintf(label, sizeof label, "%s %ld%s", kind_name[kind], n, persist ? " onwards" : "");
        run_label = label;
        long before = fired;
        one_run(kind, n, persist);
        fires += fired > before;
        runs++;
        n = k ? clean[kind] + 1 : n + stride;
    }
    CHECK(fires > 0, "no fault fired in %ld runs", runs);
    printf("NOTE %s%s: %ld runs, a fault fired in %ld\n", kind_name[kind],
           persist ? " (persistent)" : "", runs, fires);
}

static long alloc_stride = 7;
static void alloc_failures(void) { sweep(F_ALLOC, 0, alloc_stride); }
static void write_failures(void) { sweep(F_WRITE, 0, 1); }
static void write_failures_persistent(void) { sweep(F_WRITE, 1, 1); }
static void fsync_failures(void) { sweep(F_SYNC, 0, 1); }

int main(void)
{
    if (install() != 0) {
        printf("FAIL setup: cannot install the allocation wrapper and the VFS shim\n");
        return 1;
    }
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(dir, sizeof dir, "%s/lind-faults-XXXXXX", base);
    if (!mkdtemp(dir)) {
        printf("FAIL setup: mkdtemp\n");
        return 1;
    }
    const char *full = getenv("LIND_FAULTS_FULL");
    if (full && *full && strcmp(full, "0")) alloc_stride = 1;
    for (int v = 1; v < 8; v++)
        for (int w = 0; w < 2; w++) clen[v][w] = content(v, w, cbuf[v][w]);
    RUN(clean_run_counts);
    if (!check_total_failed_) {
        RUN(alloc_failures);
        RUN(write_failures);
        RUN(write_failures_persistent);
        RUN(fsync_failures);
    }
    rmdir(dir);
    return check_exit();
}
