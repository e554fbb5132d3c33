/* tests/test_daemon_lease.c — daemon/lease.{h,c}, the leases a store
 * connection of the daemon holds, on an SQLite store (the same calls run
 * against PostgreSQL in tests/test_daemon_scale.c): renewal keeps a lease,
 * a lease taken over after expiry is reported lost with its new holder and
 * forgotten, renewals go in batches (due soon with due now, chunked; chunk 1
 * the old one-by-one way), release_all gives every lease back; the node id
 * defaults; and the wire codes of the two new errors. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "daemon/errors.h"
#include "daemon/lease.h"
#include "kernels/clock.h"
#include "tests/check.h"

static char dir[64];

static store *open_store(const char *file)
{
    char path[128], err[256];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    store *st = NULL;
    int rc = store_open(path, NULL, &st, err, sizeof err);
    CHECK(rc == 0, "open %s: %s", path, err);
    return st;
}

static void node_ids(void)
{
    char host[256] = "", id[STORE_NAME_MAX + 1], want[400];
    gethostname(host, sizeof host - 1);
    lease_node_id(NULL, 1, id, sizeof id);
    snprintf(want, sizeof want, "%.100s:%ld", host, (long)getpid());
    CHECK(!strcmp(id, want), "shared store default '%s', want '%s'", id, want);
    lease_node_id(NULL, 0, id, sizeof id);
    CHECK(!strcmp(id, "local"), "SQLite default '%s', want 'local'", id);
    lease_node_id("node-a", 1, id, sizeof id);
    CHECK(!strcmp(id, "node-a"), "given id kept: '%s'", id);
    char err[128];
    CHECK(store_name_check(want, err, sizeof err) == 0, "the default is a valid owner: %s", err);
    CHECK(lease_store_shared("postgresql:///x?host=/tmp") && lease_store_shared("postgres://h/db"),
          "URIs are shared stores");
    CHECK(!lease_store_shared("./lind.db") && !lease_store_shared("sqlite:x.db"), "files are not");
}

struct lost_log { int n; char name[STORE_NAME_MAX + 1], holder[STORE_NAME_MAX + 1]; };
static void on_lost(void *arg, const char *name, const char *holder)
{
    struct lost_log *l = arg;
    l->n++;
    snprintf(l->name, sizeof l->name, "%s", name);
    snprintf(l->holder, sizeof l->holder, "%s", holder);
}

static void renew_and_lose(void)
{
    store *st = open_store("renew.db");
    if (!st) return;
    char err[256];
    store_lease cur;
    lease_set ls;
    CHECK(lease_set_init(&ls, "me", 300) == 0, "init");
    CHECK(lease_set_renew(&ls, st, clock_mono_ns(), on_lost, NULL) == -1, "nothing held: no timer");
    CHECK(store_lease_acquire(st, "a", "me", 300, &cur, err, sizeof err) == 0, "acquire a: %s", err);
    CHECK(store_lease_acquire(st, "b", "me", 300, &cur, err, sizeof err) == 0, "acquire b: %s", err);
    uint64_t t = clock_mono_ns();
    CHECK(lease_set_add(&ls, "a", t) == 0 && lease_set_add(&ls, "b", t) == 0, "add");
    CHECK(ls.count == 2 && lease_set_has(&ls, "a") && !lease_set_has(&ls, "c"), "held");
    struct lost_log lost = { 0 };
    int ms = lease_set_renew(&ls, st, t, on_lost, &lost);
    CHECK(ms >= 99 && ms <= 100, "next renewal in a third of the ttl: %d ms", ms);
    /* Due: renewed, the store's expiry moves on (5 ms later: a later
     * expiry on the store's millisecond clock). */
    store_lease first = cur;   /* b's lease as acquired */
    usleep(5000);
    CHECK(lease_set_renew(&ls, st, t + 200000000ull, on_lost, &lost) > 0 && lost.n == 0, "renewed");
    store_lease after;
    CHECK(store_lease_acquire(st, "b", "other", 300, &after, err, sizeof err) == -EAGAIN,
          "another owner is refused");
    CHECK(!strcmp(after.owner, "me") && after.expires_ms > first.expires_ms,
          "held by me, expiry moved on: '%s' %lld > %lld", after.owner, (long long)after.expires_ms,
          (long long)first.expires_ms);
    /* "b" expires (not renewed in time: we wait past the ttl on the store's
     * clock, then another owner takes it) and the next renewal finds it lost. */
    lease_set_remove(&ls, "a");
    uint64_t deadline = clock_mono_ns() + (uint64_t)(10e9 * test_time_scale());
    int rc;
    while ((rc = store_lease_acquire(st, "b", "other", 60000, &cur, err, sizeof err)) == -EAGAIN &&
           clock_mono_ns() < deadline)
        usleep(20000);
    CHECK(rc == 0, "the other owner takes b over once it expired: %d %s", rc, err);
    CHECK(lease_set_renew(&ls, st, clock_mono_ns() + 1000000000ull, on_lost, &lost) == -1, "nothing left");
    CHECK(lost.n == 1 && !strcmp(lost.name, "b") && !strcmp(lost.holder, "other"),
          "lost b to other: %d '%s' '%s'", lost.n, lost.name, lost.holder);
    CHECK(ls.count == 0 && !lease_set_has(&ls, "b"), "forgotten");
    /* What /metrics reports (docs/SCALE.md): 2 taken, 2 renewed (the first
     * call found none due), none failed, b lost; a save fenced out counts
     * as lost too (lease_set_lost), an unknown name does not. */
    CHECK(ls.taken == 2 && ls.renewed == 2 && ls.renew_failed == 0 && ls.lost == 1,
          "counts: taken %llu renewed %llu failed %llu lost %llu", (unsigned long long)ls.taken,
          (unsigned long long)ls.renewed, (unsigned long long)ls.renew_failed,
          (unsigned long long)ls.lost);
    CHECK(lease_set_add(&ls, "c", clock_mono_ns()) == 0 && lease_set_lost(&ls, "c") == 1 &&
          lease_set_lost(&ls, "c") == 0 && ls.lost == 2 && ls.count == 0 && ls.taken == 3,
          "a fenced save's loss counted once: lost %llu", (unsigned long long)ls.lost);
    lease_set_free(&ls);
    store_close(st);
}

/* Batched renewal: the leases due within a sixth of the ttl go with the
 * ones due now, `chunk` names per store call; chunk 1 is the old way, one
 * call per lease at its own due time. (Times are given, not waited for:
 * the set's clock is the caller's.) */
static void batched(void)
{
    store *st = open_store("batch.db");
    if (!st) return;
    char err[256];
    const char *names[] = { "a", "b", "c" };
    for (int i = 0; i < 3; i++)
        CHECK(store_lease_acquire(st, names[i], "me", 60000, NULL, err, sizeof err) == 0,
              "acquire %s: %s", names[i], err);
    const uint64_t ms = 1000000ull, t = clock_mono_ns();
    lease_set ls;
    /* ttl 600 ms: due every 200 ms, 100 ms early at most. */
    CHECK(lease_set_init(&ls, "me", 600) == 0 && ls.chunk == LEASE_RENEW_CHUNK, "init");
    ls.chunk = 2;
    lease_set_add(&ls, "a", t);              /* due t+200 */
    lease_set_add(&ls, "b", t + 50 * ms);    /* due t+250 */
    lease_set_add(&ls, "c", t + 150 * ms);   /* due t+350 */
    struct lost_log lost = { 0 };
    int next = lease_set_renew(&ls, st, t + 200 * ms, on_lost, &lost);
    CHECK(ls.renewed == 2 && ls.renew_calls == 1 && next == 150,
          "a and b in one call, c's turn in 150 ms: renewed %llu calls %llu next %d",
          (unsigned long long)ls.renewed, (unsigned long long)ls.renew_calls, next);
    next = lease_set_renew(&ls, st, t + 350 * ms, on_lost, &lost);
    CHECK(ls.renewed == 5 && ls.renew_calls == 3 && next == 200 && lost.n == 0,
          "c due, a and b (due at 400) along, in chunks of 2: renewed %llu calls %llu next %d",
          (unsigned long long)ls.renewed, (unsigned long long)ls.renew_calls, next);
    lease_set_free(&ls);
    /* The old way: only what is due, one call each. */
    CHECK(lease_set_init(&ls, "me", 600) == 0, "init");
    ls.chunk = 1;
    lease_set_add(&ls, "a", t);
    lease_set_add(&ls, "b", t + 50 * ms);
    lease_set_add(&ls, "c", t + 60 * ms);
    next = lease_set_renew(&ls, st, t + 200 * ms, on_lost, &lost);
    CHECK(ls.renewed == 1 && ls.renew_calls == 1 && next == 50, "a alone: renewed %llu next %d",
          (unsigned long long)ls.renewed, next);
    next = lease_set_renew(&ls, st, t + 260 * ms, on_lost, &lost);
    CHECK(ls.renewed == 3 && ls.renew_calls == 3 && next == 140, "b and c, one call each: %llu %llu %d",
          (unsigned long long)ls.renewed, (unsigned long long)ls.renew_calls, next);
    /* A lease another owner took is lost on the old path too, with its holder. */
    CHECK(store_lease_release(st, "a", "me", err, sizeof err) == 0 &&
          store_lease_acquire(st, "a", "other", 60000, NULL, err, sizeof err) == 0, "a moves: %s", err);
    lease_set_renew(&ls, st, t + 400 * ms, on_lost, &lost);
    CHECK(lost.n == 1 && !strcmp(lost.name, "a") && !strcmp(lost.holder, "other") && ls.count == 2 &&
          ls.lost == 1, "a lost to '%s'", lost.holder);
    lease_set_free(&ls);
    store_close(st);
    /* A store that fails (its file removed: every write is refused) renews
     * nothing: the due leases are retried in a tenth of the ttl (60 ms),
     * one renewed early keeps its own due time, none is lost. */
    st = open_store("gone.db");
    if (!st) return;
    for (int i = 0; i < 3; i++)
        CHECK(store_lease_acquire(st, names[i], "me", 60000, NULL, err, sizeof err) == 0,
              "acquire %s: %s", names[i], err);
    char path[128];
    snprintf(path, sizeof path, "%s/gone.db", dir);
    CHECK(unlink(path) == 0, "remove %s", path);
    CHECK(lease_set_init(&ls, "me", 600) == 0, "init");
    lease_set_add(&ls, "a", t);              /* due t+200 */
    lease_set_add(&ls, "b", t);              /* due t+200 */
    lease_set_add(&ls, "c", t + 50 * ms);    /* due t+250: early at t+200 */
    lost.n = 0;
    next = lease_set_renew(&ls, st, t + 200 * ms, on_lost, &lost);
    CHECK(ls.renew_failed == 3 && ls.renewed == 0 && ls.renew_calls == 1 && ls.count == 3 &&
          lost.n == 0 && next == 50, "failed %llu renewed %llu calls %llu count %zu lost %d next %d",
          (unsigned long long)ls.renew_failed, (unsigned long long)ls.renewed,
          (unsigned long long)ls.renew_calls, ls.count, lost.n, next);
    next = lease_set_renew(&ls, st, t + 250 * ms, on_lost, &lost);
    CHECK(ls.renew_failed == 6 && next == 10 && ls.count == 3,
          "c due, a and b along; retried at 260: failed %llu next %d",
          (unsigned long long)ls.renew_failed, next);
    lease_set_free(&ls);
    store_close(st);
}

static void release_all(void)
{
    store *st = open_store("release.db");
    if (!st) return;
    char err[256];
    store_lease cur;
    lease_set ls;
    CHECK(lease_set_init(&ls, "me", 60000) == 0, "init");
    for (int i = 0; i < 300; i++) {   /* more than the buckets: chains */
        char name[16];
        snprintf(name, sizeof name, "s%d", i);
        CHECK(store_lease_acquire(st, name, "me", 60000, &cur, err, sizeof err) == 0, "acquire %s", name);
        CHECK(lease_set_add(&ls, name, clock_mono_ns()) == 0, "add %s", name);
    }
    CHECK(ls.count == 300, "300 held");
    lease_set_release_all(&ls, st);
    CHECK(ls.count == 0 && !lease_set_has(&ls, "s7"), "forgotten");
    for (int i = 0; i < 300; i += 37) {
        char name[16];
        snprintf(name, sizeof name, "s%d", i);
        CHECK(store_lease_acquire(st, name, "other", 60000, &cur, err, sizeof err) == 0,
              "%s free at once after release_all: %s", name, err);
    }
    lease_set_free(&ls);
    store_close(st);
}

static void wire_codes(void)
{
    CHECK(lind_wire_code(LIND_E_MOVED) == PE_MOVED && !strcmp(proto_code_name(PE_MOVED), "moved"),
          "moved");
    CHECK(lind_wire_code(LIND_E_CONFLICT) == PE_CONFLICT &&
          !strcmp(proto_code_name(PE_CONFLICT), "conflict"), "conflict");
    CHECK(lind_wire_code(-ECANCELED) == PE_INTERNAL, "a cancel stays what it was");
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/lind-lease-XXXXXX");
    if (!mkdtemp(dir)) { printf("FAIL lease: mkdtemp\n"); return 1; }
    RUN(node_ids);
    RUN(renew_and_lose);
    RUN(batched);
    RUN(release_all);
    RUN(wire_codes);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) printf("NOTE could not remove %s\n", dir);
    return check_exit();
}
