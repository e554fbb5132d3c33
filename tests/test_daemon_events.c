/* tests/test_daemon_events.c — admin answers as typed `result` events
 * (daemon/event.h): built field by field into an evlist, encoded by the
 * msgpack connection to exactly the bytes the hand-packed answers had
 * (docs/PROTOCOL.md), read back by key as HTTP does, and safe to build:
 * room reserved first means no allocation while building, and a result that
 * fails part-way leaves the list as it was. */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <msgpack.h>

#include "daemon/event.h"
#include "daemon/protocol.h"
#include "tests/check.h"

static int same(const msgpack_sbuffer *a, const msgpack_sbuffer *b)
{
    return a->size == b->size && !memcmp(a->data, b->data, a->size);
}

/* An `info`-shaped answer with every kind of value, nested both ways,
 * against the same answer packed by hand as persist.c used to. */
static void result_encodes_as_hand_packed(void)
{
    static const uint8_t text[] = { 'h', 'i', 0, 0xff };
    evlist l;
    evlist_init(&l);
    CHECK(evlist_token(&l, 2, (const uint8_t *)"tok", 3) == 0, "a token before");
    CHECK(evlist_result_begin(&l, 5) == 0, "begin");
    evlist_put_u64(&l, "seed", 42);
    evlist_put_str(&l, "session", "demo");
    evlist_put_i64(&l, "created_ms", -7);
    evlist_put_i64(&l, "updated_ms", 1700000000000ll);
    evlist_put_bool(&l, "resident", 1);
    evlist_put_bool(&l, "busy", 0);
    evlist_put_f64(&l, "uptime_s", 0.54);
    evlist_put_nil(&l, "step_ms");
    evlist_open_array(&l, "transcript");
    for (int i = 0; i < 2; i++) {
        evlist_open_record(&l, NULL);
        evlist_put_str(&l, "role", i ? "out" : "in");
        evlist_put_bytes(&l, "text", text, sizeof text);
        evlist_close(&l);
    }
    evlist_close(&l);
    evlist_open_record(&l, "limits");
    evlist_put_u64(&l, "max_message", 1u << 20);
    evlist_open_array(&l, "empty");
    evlist_close(&l);
    evlist_close(&l);
    evlist_open_record(&l, "batch_hist");
    evlist_close(&l);
    evlist_put_u64(&l, "big", UINT64_MAX);
    CHECK(evlist_result_end(&l) == 0, "end");
    CHECK(evlist_error(&l, 6, PE_NOT_FOUND, "no session 'x'") == 0, "an error after");

    msgpack_sbuffer got, want;
    msgpack_sbuffer_init(&got);
    msgpack_sbuffer_init(&want);
    size_t bound = 0;
    for (size_t i = 0; i < l.n; i++) {
        event_pack_msgpack(&got, &l, &l.v[i]);
        bound += event_msgpack_bound(&l, &l.v[i]);
    }
    proto_pack_token(&want, 2, (const uint8_t *)"tok", 3);
    msgpack_packer pk;
    proto_result_begin(&pk, &want, 5, 12);
    proto_pack_key(&pk, "seed"); msgpack_pack_uint64(&pk, 42);
    proto_pack_key(&pk, "session"); proto_pack_str(&pk, "demo");
    proto_pack_key(&pk, "created_ms"); msgpack_pack_int64(&pk, -7);
    proto_pack_key(&pk, "updated_ms"); msgpack_pack_int64(&pk, 1700000000000ll);
    proto_pack_key(&pk, "resident"); msgpack_pack_true(&pk);
    proto_pack_key(&pk, "busy"); msgpack_pack_false(&pk);
    proto_pack_key(&pk, "uptime_s"); msgpack_pack_double(&pk, 0.54);
    proto_pack_key(&pk, "step_ms"); msgpack_pack_nil(&pk);
    proto_pack_key(&pk, "transcript");
    msgpack_pack_array(&pk, 2);
    for (int i = 0; i < 2; i++) {
        msgpack_pack_map(&pk, 2);
        proto_pack_key(&pk, "role"); proto_pack_str(&pk, i ? "out" : "in");
        proto_pack_key(&pk, "text"); proto_pack_bin(&pk, text, sizeof text);
    }
    proto_pack_key(&pk, "limits");
    msgpack_pack_map(&pk, 2);
    proto_pack_key(&pk, "max_message"); msgpack_pack_int(&pk, 1 << 20);   /* as hello packed an int */
    proto_pack_key(&pk, "empty"); msgpack_pack_array(&pk, 0);
    proto_pack_key(&pk, "batch_hist"); msgpack_pack_map(&pk, 0);
    proto_pack_key(&pk, "big"); msgpack_pack_uint64(&pk, UINT64_MAX);
    proto_pack_error(&want, 6, PE_NOT_FOUND, "no session 'x'");
    CHECK(same(&got, &want), "encodings differ (%zu vs %zu bytes)", got.size, want.size);
    CHECK(got.size <= bound, "%zu bytes written past the bound %zu", got.size, bound);
    CHECK(event_is_final(&l.v[1]) && l.v[1].kind == EV_RESULT, "a result is final");

    /* Read back by key (as HTTP reads stats): top level only. */
    const ev_field *f = event_result_field(&l, &l.v[1], "session");
    CHECK(f && f->type == EVV_STR && f->v.s.len == 4 && !memcmp(ev_field_bytes(&l, f), "demo", 4),
          "session");
    f = event_result_field(&l, &l.v[1], "big");
    CHECK(f && f->type == EVV_U64 && f->v.u == UINT64_MAX, "big, past two containers");
    CHECK(!event_result_field(&l, &l.v[1], "role") && !event_result_field(&l, &l.v[1], "max_message"),
          "fields of nested records are not top-level");
    f = event_result_field(&l, &l.v[1], "transcript");
    CHECK(f && f->type == EVV_ARRAY && f->n == 2, "the array counts its elements");
    CHECK(!event_result_field(&l, &l.v[0], "session"), "a token has no fields");
    msgpack_sbuffer_destroy(&got);
    msgpack_sbuffer_destroy(&want);
    evlist_free(&l);
}

/* Several results in one list keep their own fields, also after the
 * tables grew under the first. */
static void results_side_by_side(void)
{
    evlist l;
    evlist_init(&l);
    for (uint64_t id = 1; id <= 50; id++) {
        evlist_result_begin(&l, id);
        evlist_open_array(&l, "sessions");
        for (uint64_t k = 0; k < id; k++) {
            evlist_open_record(&l, NULL);
            evlist_put_str(&l, "session", "s");
            evlist_put_u64(&l, "tokens", k);
            evlist_close(&l);
        }
        evlist_close(&l);
        evlist_put_u64(&l, "id_again", id);
        CHECK(evlist_result_end(&l) == 0, "result %llu", (unsigned long long)id);
    }
    CHECK(l.n == 50, "%zu events", l.n);
    for (size_t i = 0; i < l.n; i++) {
        const ev_field *a = event_result_field(&l, &l.v[i], "sessions");
        const ev_field *b = event_result_field(&l, &l.v[i], "id_again");
        CHECK(a && a->n == i + 1 && b && b->v.u == i + 1 && l.v[i].id == i + 1, "result %zu", i + 1);
    }
    evlist_free(&l);
}

/* A result that fails part-way is gone whole: the list is what it was
 * before it began, and the next one builds normally. */
static void failure_leaves_the_list_as_it_was(void)
{
    evlist l;
    evlist_init(&l);
    CHECK(evlist_put_u64(&l, "x", 1) == -EINVAL && evlist_close(&l) == -EINVAL &&
          evlist_result_end(&l) == -EINVAL, "outside a result: -EINVAL");
    CHECK(evlist_token(&l, 1, (const uint8_t *)"ab", 2) == 0, "token");
    size_t n = l.n, nf = l.nf, arena = l.arena.n;

    /* deeper than EV_RESULT_DEPTH */
    evlist_result_begin(&l, 2);
    CHECK(evlist_result_begin(&l, 3) == -EINVAL, "no result inside a result");
    evlist_put_str(&l, "session", "abcdef");
    int rc = 0;
    for (int d = 0; d < EV_RESULT_DEPTH && rc == 0; d++) rc = evlist_open_record(&l, "r");
    CHECK(rc == -EOVERFLOW, "too deep: %d", rc);
    CHECK(evlist_put_u64(&l, "y", 2) == -EOVERFLOW, "sticky");
    CHECK(evlist_result_end(&l) == -EOVERFLOW, "end says why");
    CHECK(l.n == n && l.nf == nf && l.arena.n == arena, "rolled back (%zu events, %zu fields, %zu bytes)",
          l.n, l.nf, l.arena.n);

    /* closing the root with evlist_close */
    evlist_result_begin(&l, 4);
    evlist_put_bool(&l, "ok", 1);
    CHECK(evlist_close(&l) == -EINVAL && evlist_result_end(&l) == -EINVAL, "the root closes at end");
    CHECK(l.n == n && l.nf == nf && l.arena.n == arena, "rolled back again");

    evlist_result_begin(&l, 5);
    evlist_put_bool(&l, "deleted", 1);
    CHECK(evlist_result_end(&l) == 0 && l.n == n + 1, "the next one builds");
    msgpack_sbuffer got, want;
    msgpack_sbuffer_init(&got);
    msgpack_sbuffer_init(&want);
    for (size_t i = 0; i < l.n; i++) event_pack_msgpack(&got, &l, &l.v[i]);
    proto_pack_token(&want, 1, (const uint8_t *)"ab", 2);
    msgpack_packer pk;
    proto_result_begin(&pk, &want, 5, 1);
    proto_pack_key(&pk, "deleted"); msgpack_pack_true(&pk);
    CHECK(same(&got, &want), "the token and the new result, nothing of the failed ones");
    msgpack_sbuffer_destroy(&got);
    msgpack_sbuffer_destroy(&want);
    evlist_free(&l);
}

/* After evlist_reserve_result(fields, bytes) a result of that size is built
 * without growing any table: nothing can fail after a commit. The error
 * that replaces a failed result fits the same room. */
static void reservation_means_no_allocation(void)
{
    evlist l;
    evlist_init(&l);
    CHECK(evlist_reserve_result(&l, 1 + 3 * 40, 40 * 5) == 0, "reserve");
    const event *v = l.v;
    const ev_field *f = l.f;
    const char *a = l.arena.p;
    size_t cap = l.cap, fcap = l.fcap, acap = l.arena.cap;
    evlist_result_begin(&l, 1);
    evlist_open_array(&l, "sessions");
    for (int i = 0; i < 40; i++) {
        evlist_open_record(&l, NULL);
        evlist_put_str(&l, "session", "sess5");
        evlist_put_i64(&l, "updated_ms", i);
        evlist_close(&l);
    }
    evlist_close(&l);
    CHECK(evlist_result_end(&l) == 0, "built");
    CHECK(l.v == v && l.f == f && l.arena.p == a && l.cap == cap && l.fcap == fcap && l.arena.cap == acap,
          "no table grew");
    CHECK(l.nf == 1 + 1 + 3 * 40 && l.arena.n == 40 * 5, "%zu fields, %zu bytes", l.nf, l.arena.n);
    evlist_free(&l);

    /* the error path of persist.c: result room taken, result abandoned, error in its place */
    evlist_init(&l);
    CHECK(evlist_reserve_result(&l, 4, 600) == 0, "reserve");
    v = l.v;
    a = l.arena.p;
    evlist_result_begin(&l, 2);
    evlist_put_str(&l, "session", "x");
    for (int d = 0; d < EV_RESULT_DEPTH; d++) evlist_open_array(&l, "deep");
    CHECK(evlist_result_end(&l) == -EOVERFLOW, "failed");
    char msg[512];
    memset(msg, 'e', sizeof msg - 1);
    msg[sizeof msg - 1] = 0;
    CHECK(evlist_error(&l, 2, PE_IO, msg) == 0 && l.n == 1 && l.v == v && l.arena.p == a,
          "the error took the result's room");
    evlist_free(&l);
}

/* A token with logprobs keeps its bytes and its alternatives, in order,
 * beside other events of the list, and the socket encodes it as a plain
 * token (the msgpack protocol has no logprobs). */
static void token_logprobs_round_trip(void)
{
    evlist l;
    evlist_init(&l);
    ev_top top[3] = { { -0.5f, (const uint8_t *)"ab", 2 }, { -1.25f, (const uint8_t *)"", 0 },
                      { -7.0f, (const uint8_t *)"\xff", 1 } };
    CHECK(evlist_token(&l, 1, (const uint8_t *)"x", 1) == 0, "a plain token");
    CHECK(evlist_token_lp(&l, 2, (const uint8_t *)"ab", 2, -0.5f, top, 3) == 0, "a token with logprobs");
    CHECK(evlist_progress(&l, 2, 1, 2) == 0, "an event after it");
    const event *e = &l.v[1];
    CHECK(e->kind == EV_TOKEN && e->has_lp && e->lp == -0.5f && e->ntop == 3 && e->len == 2 &&
          !memcmp(event_bytes(&l, e), "ab", 2), "the token event");
    CHECK(!l.v[0].has_lp, "a plain token has no logprobs");
    for (uint32_t i = 0; i < 3; i++) {
        ev_top t = event_top(&l, e, i);
        CHECK(t.lp == top[i].lp && t.len == top[i].len && (!t.len || !memcmp(t.bytes, top[i].bytes, t.len)),
              "alternative %u", i);
    }
    msgpack_sbuffer a, b;
    msgpack_sbuffer_init(&a);
    msgpack_sbuffer_init(&b);
    event_pack_msgpack(&a, &l, e);
    proto_pack_token(&b, 2, (const uint8_t *)"ab", 2);
    CHECK(a.size == b.size && !memcmp(a.data, b.data, a.size), "the socket sees a plain token");
    msgpack_sbuffer_destroy(&a);
    msgpack_sbuffer_destroy(&b);
    evlist_free(&l);
}

int main(void)
{
    RUN(result_encodes_as_hand_packed);
    RUN(results_side_by_side);
    RUN(failure_leaves_the_list_as_it_was);
    RUN(reservation_means_no_allocation);
    RUN(token_logprobs_round_trip);
    return check_exit();
}
