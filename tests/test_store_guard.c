/* tests/test_store_guard.c — the store's guards against a database shared,
 * removed or unwritable under it (docs/STATE.md, "Guards"):
 *   - a second exclusive opener, in another process, is refused with -EBUSY
 *     and a message naming the database and the holder's pid; a
 *     non-exclusive one is not; the lock goes with the holder;
 *   - a store in a missing directory, a read-only file or an unwritable
 *     directory is refused at open with the reason (as root, the cases run
 *     in a child that drops to uid 65534);
 *   - removing or replacing the database file, or only its -wal, under an
 *     open store makes the next write -ESTALE (and every later one), never a
 *     silent success; sessions acknowledged before a -wal removal survive a
 *     crash right after it;
 *   - ordinary WAL checkpoints and reopenings never trip the check. */
#include "tests/check.h"
#include "state/store.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[64];
static int dbseq;

static const char *newdb(char *buf, size_t n)
{
    snprintf(buf, n, "%s/g%d.db", dir, ++dbseq);
    return buf;
}

static store *open_with(const char *path, int exclusive, int *rc, char *err, size_t errlen)
{
    store_options o = store_defaults();
    o.exclusive = exclusive;
    store *s = NULL;
    err[0] = 0;
    *rc = store_open(path, &o, &s, err, errlen);
    return s;
}

static int save1(store *s, const char *name, uint8_t fillb, size_t n, char *err, size_t errlen)
{
    static uint8_t buf[200000];
    memset(buf, fillb, n);
    store_record r = { name, buf, n, (const uint8_t *)"t", 1, 7 };
    return store_save(s, &r, 1, err, errlen);
}

static int holds(store *s, const char *name, uint8_t fillb, size_t n)
{
    store_loaded l;
    char err[256];
    if (store_load(s, name, &l, err, sizeof err) != 0) return 0;
    int ok = l.state_len == n;
    for (size_t i = 0; ok && i < n; i++) ok = l.state[i] == fillb;
    store_loaded_free(&l);
    return ok;
}

/* A child holds the store exclusively until the parent writes to `go`. */
static pid_t hold_in_child(const char *path, int *go_fd)
{
    int ready[2], go[2];
    if (pipe(ready) || pipe(go)) return -1;
    pid_t pid = fork();
    if (pid == 0) {
        close(ready[0]); close(go[1]);
        int rc; char err[512];
        store *s = open_with(path, 1, &rc, err, sizeof err);
        char c = s ? 'O' : 'E';
        if (write(ready[1], &c, 1) != 1) _exit(3);
        if (read(go[0], &c, 1) < 0) _exit(3);
        store_close(s);
        _exit(s ? 0 : 2);
    }
    close(ready[1]); close(go[0]);
    char c = 0;
    if (read(ready[0], &c, 1) != 1 || c != 'O') {
        close(ready[0]); close(go[1]);
        waitpid(pid, NULL, 0);
        return -1;
    }
    close(ready[0]);
    *go_fd = go[1];
    return pid;
}

static void second_exclusive_refused(void)
{
    char path[128];
    newdb(path, sizeof path);
    int go = -1;
    pid_t child = hold_in_child(path, &go);
    CHECK(child > 0, "the child could not open the store exclusively");
    if (child <= 0) return;
    int rc; char err[512];
    store *s = open_with(path, 1, &rc, err, sizeof err);
    CHECK(!s && rc == -EBUSY, "second exclusive open: rc %d (%s)", rc, err);
    char want[64];
    snprintf(want, sizeof want, "pid %d", (int)child);
    CHECK(strstr(err, path) && strstr(err, want), "message names the database and %s: %s", want, err);
    store_close(s);
    /* A tool's non-exclusive handle is not refused. */
    s = open_with(path, 0, &rc, err, sizeof err);
    CHECK(s && rc == 0, "non-exclusive open beside the holder: %d %s", rc, err);
    store_close(s);
    if (write(go, "x", 1) != 1) CHECK(0, "cannot release the child");
    close(go);
    int status = 0;
    waitpid(child, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
    /* The lock left with its holder. */
    s = open_with(path, 1, &rc, err, sizeof err);
    CHECK(s && rc == 0, "exclusive open after the holder exited: %d %s", rc, err);
    store_close(s);
}

static void killed_holder_releases(void)
{
    char path[128];
    newdb(path, sizeof path);
    int go = -1;
    pid_t child = hold_in_child(path, &go);
    CHECK(child > 0, "the child could not open the store exclusively");
    if (child <= 0) return;
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    close(go);
    int rc; char err[512];
    store *s = open_with(path, 1, &rc, err, sizeof err);
    CHECK(s && rc == 0, "exclusive open after the holder was killed: %d %s", rc, err);
    store_close(s);
}

static void missing_directory(void)
{
    char path[160];
    snprintf(path, sizeof path, "%s/no-such-dir/x.db", dir);
    int rc; char err[512];
    store *s = open_with(path, 1, &rc, err, sizeof err);
    CHECK(!s && rc == -ENOENT, "rc %d (%s)", rc, err);
    CHECK(strstr(err, "directory does not exist") && strstr(err, path), "message: %s", err);
    CHECK(!strstr(err, "ermission"), "a missing directory is not 'permission denied': %s", err);
}

/* Open `path` as uid 65534 when root (root writes anything), else as we
 * are; the child reports rc and the message through a pipe. */
static int open_as_user(const char *path, char *err, size_t errlen)
{
    int p[2];
    if (pipe(p)) return 1;
    pid_t pid = fork();
    if (pid == 0) {
        close(p[0]);
        if (getuid() == 0 && (setgid(65534) || setuid(65534))) _exit(5);
        int rc; char e[512];
        store *s = open_with(path, 1, &rc, e, sizeof e);
        store_close(s);
        if (write(p[1], &rc, sizeof rc) != sizeof rc || write(p[1], e, sizeof e) != sizeof e) _exit(4);
        _exit(0);
    }
    close(p[1]);
    int rc = 1;
    char e[512] = "";
    if (read(p[0], &rc, sizeof rc) != sizeof rc || read(p[0], e, sizeof e) != sizeof e) rc = 1;
    close(p[0]);
    waitpid(pid, NULL, 0);
    snprintf(err, errlen, "%s", e);
    return rc;
}

static void unwritable_refused_at_open(void)
{
    char sub[96], path[160];
    snprintf(sub, sizeof sub, "%s/ro%d", dir, ++dbseq);
    mkdir(sub, 0755);
    chmod(dir, 0755);
    /* A read-only file. */
    snprintf(path, sizeof path, "%s/a.db", sub);
    int rc; char err[512];
    store *s = open_with(path, 0, &rc, err, sizeof err);
    CHECK(s, "create: %s", err);
    store_close(s);
    chmod(path, 0444);
    rc = open_as_user(path, err, sizeof err);
    CHECK(rc == -EACCES, "read-only file: rc %d (%s)", rc, err);
    CHECK(strstr(err, path) && strstr(err, "writ"), "message names the file and writing: %s", err);
    /* A writable file in a directory where the -wal cannot be made. */
    chmod(path, 0666);
    rc = open_as_user(path, err, sizeof err);
    CHECK(rc < 0 && rc != -EBUSY, "unwritable directory: rc %d (%s)", rc, err);
    CHECK(strstr(err, "directory") && strstr(err, sub), "message names the directory: %s", err);
    chmod(dir, 0700);
}

static int lost_calls;
static char lost_why[1024];
static void on_lost(void *arg, const char *why)
{
    lost_calls += arg == (void *)&lost_calls;
    snprintf(lost_why, sizeof lost_why, "%s", why);
}

static void removed_db_refuses_writes(void)
{
    char path[128];
    newdb(path, sizeof path);
    int rc; char err[512];
    store_options o = store_defaults();
    o.exclusive = 1;
    o.on_lost = on_lost;
    o.on_lost_arg = &lost_calls;
    store *s = NULL;
    rc = store_open(path, &o, &s, err, sizeof err);
    CHECK(s, "open: %s", err);
    if (!s) return;
    CHECK(save1(s, "a", 1, 1000, err, sizeof err) == 0, "save before: %s", err);
    unlink(path);
    rc = save1(s, "b", 2, 1000, err, sizeof err);
    CHECK(rc == -ESTALE, "save after removal: rc %d (%s)", rc, err);
    CHECK(strstr(err, "removed") && strstr(err, path), "message: %s", err);
    rc = save1(s, "c", 3, 1000, err, sizeof err);
    CHECK(rc == -ESTALE, "and every later save: rc %d", rc);
    CHECK(lost_calls == 1, "on_lost called once, not %d times", lost_calls);
    CHECK(strcmp(lost_why, err) == 0, "on_lost got the message writes return: '%s' vs '%s'",
          lost_why, err);
    CHECK(store_delete(s, "a", err, sizeof err) == -ESTALE, "delete refused too");
    CHECK(store_fork(s, "a", "z", err, sizeof err) == -ESTALE, "fork refused too");
    CHECK(holds(s, "a", 1, 1000), "reads go on from the open file");
    store_close(s);
}

static void replaced_db_refuses_writes(void)
{
    char path[128], other[128];
    newdb(path, sizeof path);
    newdb(other, sizeof other);
    int rc; char err[512];
    store *s = open_with(path, 1, &rc, err, sizeof err);
    store *o = open_with(other, 0, &rc, err, sizeof err);
    CHECK(s && o, "open: %s", err);
    if (!s || !o) { store_close(s); store_close(o); return; }
    store_close(o);
    CHECK(save1(s, "a", 1, 1000, err, sizeof err) == 0, "save before: %s", err);
    CHECK(rename(other, path) == 0, "rename");
    rc = save1(s, "b", 2, 1000, err, sizeof err);
    CHECK(rc == -ESTALE && strstr(err, "replaced"), "save after replacement: rc %d (%s)", rc, err);
    store_close(s);
}

/* The -wal removed under a writer that then crashes: what was acknowledged
 * before the removal must be in the database file. */
static void removed_wal_keeps_acknowledged(void)
{
    char path[128], wal[140];
    newdb(path, sizeof path);
    snprintf(wal, sizeof wal, "%s-wal", path);
    int work[2], done[2];
    if (pipe(work) || pipe(done)) { CHECK(0, "pipe"); return; }
    pid_t pid = fork();
    if (pid == 0) {
        close(work[1]); close(done[0]);
        int rc; char err[512], c;
        store *s = open_with(path, 1, &rc, err, sizeof err);
        if (!s) _exit(2);
        int r1 = save1(s, "a", 0x11, 150000, err, sizeof err);
        if (write(done[1], &r1, sizeof r1) != sizeof r1) _exit(3);
        if (read(work[0], &c, 1) != 1) _exit(3);      /* the parent removed the -wal */
        int r2 = save1(s, "b", 0x22, 1000, err, sizeof err);
        if (write(done[1], &r2, sizeof r2) != sizeof r2) _exit(3);
        if (write(done[1], err, sizeof err) != sizeof err) _exit(3);
        raise(SIGKILL);                                 /* crash: no close, no checkpoint */
        _exit(9);
    }
    close(work[0]); close(done[1]);
    int r1 = 1, r2 = 1;
    char err[512] = "";
    CHECK(read(done[0], &r1, sizeof r1) == sizeof r1 && r1 == 0, "first save: %d", r1);
    CHECK(unlink(wal) == 0, "remove %s: %s", wal, strerror(errno));
    if (write(work[1], "x", 1) != 1) CHECK(0, "pipe");
    CHECK(read(done[0], &r2, sizeof r2) == sizeof r2 && read(done[0], err, sizeof err) == sizeof err,
          "child report");
    CHECK(r2 == -ESTALE, "save after the -wal went: rc %d (%s)", r2, err);
    CHECK(strstr(err, "write-ahead log") && strstr(err, "checkpointed"), "message: %s", err);
    waitpid(pid, NULL, 0);
    close(work[1]); close(done[0]);
    int rc;
    store *s = open_with(path, 0, &rc, err, sizeof err);
    CHECK(s, "reopen: %s", err);
    if (!s) return;
    CHECK(holds(s, "a", 0x11, 150000), "the session acknowledged before the removal survived");
    store_loaded l;
    CHECK(store_load(s, "b", &l, err, sizeof err) == -ENOENT, "the refused save is absent");
    store_close(s);
}

static void checkpoints_do_not_trip(void)
{
    char path[128];
    newdb(path, sizeof path);
    int rc; char err[512];
    store *s = open_with(path, 1, &rc, err, sizeof err);
    CHECK(s, "open: %s", err);
    if (!s) return;
    /* ~12 MB through the log: several automatic checkpoints and restarts. */
    for (int i = 0; i < 60 && !check_failed_; i++) {
        char name[16];
        snprintf(name, sizeof name, "s%d", i % 7);
        rc = save1(s, name, (uint8_t)i, 200000, err, sizeof err);
        CHECK(rc == 0, "save %d: %d %s", i, rc, err);
    }
    store_close(s);
    for (int k = 0; k < 3; k++) {
        s = open_with(path, 1, &rc, err, sizeof err);
        CHECK(s && save1(s, "again", (uint8_t)k, 10, err, sizeof err) == 0, "reopen %d: %s", k, err);
        store_close(s);
    }
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/lind-guard-test-XXXXXX");
    if (!mkdtemp(dir)) {
        printf("FAIL setup: mkdtemp\n");
        return 1;
    }
    RUN(second_exclusive_refused);
    RUN(killed_holder_releases);
    RUN(missing_directory);
    RUN(unwritable_refused_at_open);
    RUN(removed_db_refuses_writes);
    RUN(replaced_db_refuses_writes);
    RUN(removed_wal_keeps_acknowledged);
    RUN(checkpoints_do_not_trip);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) printf("NOTE could not remove %s\n", dir);
    return check_exit();
}
