/* tests/test_daemon_units.c — the daemon's small parts on their own: the
 * inter-thread queue, the session table, the statistics. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <msgpack.h>

#include "daemon/errors.h"
#include "daemon/msg.h"
#include "state/format.h"
#include "daemon/queue.h"
#include "daemon/session.h"
#include "daemon/stats.h"
#include "tests/check.h"
#include "kernels/clock.h"

typedef struct item { qnode node; int producer, seq; } item;

#define PRODUCERS 4
#define PER       5000

static queue q;

static void *produce(void *arg)
{
    int p = (int)(intptr_t)arg;
    for (int i = 0; i < PER; i++) {
        item *it = malloc(sizeof *it);
        it->producer = p;
        it->seq = i;
        queue_push(&q, &it->node);
    }
    return NULL;
}

/* Many producers, one consumer: nothing lost, each producer's order kept. */
static void queue_fifo_across_threads(void)
{
    CHECK(queue_init(&q, NULL) == 0, "init");
    pthread_t th[PRODUCERS];
    for (int p = 0; p < PRODUCERS; p++) pthread_create(&th[p], NULL, produce, (void *)(intptr_t)p);
    int next[PRODUCERS] = {0}, got = 0, order_ok = 1;
    while (got < PRODUCERS * PER) {
        qnode *n = queue_take_all(&q, 1000);
        CHECK(n != NULL, "items arrive within a second");
        if (!n) break;
        while (n) {
            item *it = (item *)n;
            n = n->next;
            if (it->seq != next[it->producer]) order_ok = 0;
            next[it->producer] = it->seq + 1;
            got++;
            free(it);
        }
    }
    for (int p = 0; p < PRODUCERS; p++) pthread_join(th[p], NULL);
    CHECK(got == PRODUCERS * PER && order_ok, "%d items, per-producer order %s", got,
          order_ok ? "kept" : "broken");
    CHECK(queue_take_all(&q, 0) == NULL && queue_len(&q) == 0, "empty after");
    uint64_t t0 = clock_mono_ns();
    CHECK(queue_take_all(&q, 50) == NULL, "a timed wait on an empty queue returns nothing");
    CHECK(clock_mono_ns() - t0 >= 40000000ull, "and it did wait");
    queue_destroy(&q);
}

static void session_table_ops(void)
{
    session_table t;
    CHECK(session_table_init(&t) == 0, "init");
    enum { N = 5000 };   /* several times the initial bucket count: the table grows */
    char name[64];
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof name, "session-%d", i);
        session *s = session_new(name, 64);
        CHECK(s && s->slot == -1 && s->meta.pending_token == -1, "new %d", i);
        session_insert(&t, s);
    }
    CHECK(t.count == N && t.nbuckets >= N, "%zu sessions in %zu buckets", t.count, t.nbuckets);
    int found = 0;
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof name, "session-%d", i);
        session *s = session_find(&t, name);
        found += s && !strcmp(s->name, name);
    }
    CHECK(found == N, "all found (%d)", found);
    CHECK(session_find(&t, "session-x") == NULL, "absent name");
    for (int i = 0; i < N; i += 2) {
        snprintf(name, sizeof name, "session-%d", i);
        session *s = session_find(&t, name);
        session_remove(&t, s);
        session_free(s);
    }
    CHECK(t.count == N / 2, "half removed: %zu", t.count);
    CHECK(session_find(&t, "session-2") == NULL && session_find(&t, "session-3") != NULL,
          "removed ones gone, others stay");
    session_table_free(&t);
}

static const msgpack_object *get(const msgpack_object *m, const char *k)
{
    for (uint32_t i = 0; i < m->via.map.size; i++) {
        const msgpack_object *key = &m->via.map.ptr[i].key;
        if (key->via.str.size == strlen(k) && !memcmp(key->via.str.ptr, k, key->via.str.size))
            return &m->via.map.ptr[i].val;
    }
    return NULL;
}

static void stats_percentiles_and_buckets(void)
{
    stats st;
    CHECK(stats_init(&st) == 0, "init");
    for (int i = 1; i <= 100; i++) stats_step(&st, i, (double)i, 2, 1);
    stats_save(&st, 7.0, 3);
    stats_connections(&st, +2);
    stats_connections(&st, -1);
    /* Built typed, as the store thread does, and read as a client would. */
    evlist l;
    evlist_init(&l);
    CHECK(evlist_reserve_result(&l, STATS_RESULT_FIELDS, 3) == 0, "reserve");
    ev_field *f0 = l.f;
    evlist_result_begin(&l, 9);
    stats_result(&st, &l, &(uint64_t){ 42 }, "cpu");
    CHECK(evlist_result_end(&l) == 0 && l.n == 1 && l.f == f0 && l.nf <= STATS_RESULT_FIELDS + 1,
          "built within its reservation (%zu fields)", l.nf);
    const ev_field *sf = event_result_field(&l, &l.v[0], "sessions_stored");
    CHECK(sf && sf->type == EVV_U64 && sf->v.u == 42, "typed sessions_stored");
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    event_pack_msgpack(&sb, &l, &l.v[0]);
    CHECK(sb.size <= event_msgpack_bound(&l, &l.v[0]), "within its bound");
    evlist_free(&l);
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    size_t off = 0;
    CHECK(msgpack_unpack_next(&up, sb.data, sb.size, &off) == MSGPACK_UNPACK_SUCCESS &&
          off == sb.size, "one map, all bytes");
    const msgpack_object *m = &up.data;
    CHECK(m->via.map.size == 2 + 12, "id, event and the 12 stats fields");
    CHECK(get(m, "steps")->via.u64 == 100 && get(m, "tokens_in")->via.u64 == 200 &&
          get(m, "tokens_out")->via.u64 == 100 && get(m, "saves")->via.u64 == 3, "counters");
    CHECK(get(m, "sessions_stored")->via.u64 == 42 && get(m, "connections")->via.u64 == 1, "gauges");
    const msgpack_object *h = get(m, "batch_hist");
    /* batches 1..100: 1 | 2-3 | 4-7 | 8-15 | 16-31 | 32-63 | 64-100 */
    CHECK(h && h->via.map.size == 7, "seven buckets used");
    CHECK(get(h, "1")->via.u64 == 1 && get(h, "2-3")->via.u64 == 2 && get(h, "32-63")->via.u64 == 32 &&
          get(h, "64-127")->via.u64 == 37, "bucket counts");
    const msgpack_object *sm = get(m, "step_ms");
    CHECK(get(sm, "p50")->via.f64 == 50.0 || get(sm, "p50")->via.f64 == 51.0, "p50 %g",
          get(sm, "p50")->via.f64);
    CHECK(get(sm, "p99")->via.f64 >= 98.0 && get(sm, "max")->via.f64 == 100.0, "p99, max");
    CHECK(get(get(m, "save_ms"), "p50")->via.f64 == 7.0, "save p50");
    msgpack_unpacked_destroy(&up);
    msgpack_sbuffer_destroy(&sb);
    stats_destroy(&st);
}

/* One table: every state-format code is bad_state, the store's codes the
 * documented wire codes, every entry named, unknown codes internal. */
static void error_table(void)
{
    for (int c = STATE_E_INVALID; c <= STATE_E_MAGIC; c++)
        CHECK(lind_wire_code(c) == PE_BAD_STATE, "state code %d -> %s", c, proto_code_name(lind_wire_code(c)));
    CHECK(lind_wire_code(0) == PE_OK, "0 is ok");
    CHECK(lind_wire_code(-ENOENT) == PE_NOT_FOUND && lind_wire_code(-EEXIST) == PE_EXISTS &&
          lind_wire_code(-EINVAL) == PE_BAD_REQUEST && lind_wire_code(-EBADMSG) == PE_BAD_STATE &&
          lind_wire_code(-ESTALE) == PE_IO && lind_wire_code(-EBUSY) == PE_IO &&
          lind_wire_code(-ENOSPC) == PE_INSUFFICIENT_STORAGE && lind_wire_code(-EIO) == PE_IO, "store codes");
    CHECK(lind_wire_code(-ENOMEM) == PE_INTERNAL && lind_wire_code(-12345) == PE_INTERNAL, "internal");
    size_t n;
    const lind_error *t = lind_error_table(&n);
    for (size_t i = 0; i < n; i++) {
        CHECK(t[i].text && *t[i].text && !strcmp(lind_strerror(t[i].code), t[i].text), "entry %zu named", i);
        for (size_t j = 0; j < i; j++) CHECK(t[i].code != t[j].code, "code %d listed twice", t[i].code);
    }
    CHECK(!strcmp(lind_strerror(-EPIPE), strerror(EPIPE)), "errno outside the table: strerror");
}

int main(void)
{
    RUN(queue_fifo_across_threads);
    RUN(session_table_ops);
    RUN(stats_percentiles_and_buckets);
    RUN(error_table);
    return check_exit();
}
