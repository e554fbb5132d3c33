/* tests/test_daemon_chat_events.c — two small parts of the HTTP front
 * door on their own: chat rendering (recurrent/chat.c) and the typed events
 * (daemon/event.c) with their msgpack encoding.
 *
 * Rendering: with RWKV's raven template, a conversation rendered whole
 * equals its first turn rendered fresh followed by each later turn rendered
 * after the reply (what a session fed turn by turn holds), also when a reply
 * ended on the stop string the next turn's text starts with; a bad message
 * is refused naming it. Events: each kind encodes to the bytes the
 * proto_pack_* functions write (the wire format did not change), and the
 * arena keeps every event's bytes as the list grows. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>
#include <msgpack.h>

#include "recurrent/chat.h"
#include "daemon/event.h"
#include "tests/check.h"

static const char raven[] =
    "{\"name\":\"raven\",\"system\":\"{system}\\n\\n\",\"user\":\"User: {prompt}\\n\\nAssistant:\","
    "\"assistant_end\":\"\\n\\n\",\"stop\":[\"\\n\\nUser:\"]}";

static char *render(const chat_template *t, json_t *msgs, size_t from, int after, const char *tail,
                    int fresh)
{
    char *out = NULL, err[256];
    size_t n = 0;
    int rc = chat_render(t, msgs, from, after, (const uint8_t *)tail, tail ? strlen(tail) : 0, fresh,
                         &out, &n, err, sizeof err);
    CHECK(rc == 0, "render failed: %s", err);
    CHECK(!out || strlen(out) == n, "length %zu vs %zu", n, out ? strlen(out) : 0);
    return out;
}

static void whole_equals_turns(void)
{
    chat_template t;
    char err[256];
    CHECK(chat_template_parse(&t, raven, err, sizeof err) == 0, "parse: %s", err);
    json_t *msgs = json_loads("[{\"role\":\"system\",\"content\":\"Be kind.\"},"
                              "{\"role\":\"user\",\"content\":\"Hi\\n\"},"
                              "{\"role\":\"assistant\",\"content\":\" Hello.\"},"
                              "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Bye\"}]}]", 0, NULL);
    char *whole = render(&t, msgs, 0, 0, NULL, 1);
    CHECK(whole && !strcmp(whole, "Be kind.\n\nUser: Hi\n\nAssistant: Hello.\n\nUser: Bye\n\nAssistant:"),
          "whole: [%s]", whole);
    /* Turn 1 fresh (system, user), the reply as generated, turn 2 after it. */
    json_t *first = json_array();
    json_array_append(first, json_array_get(msgs, 0));
    json_array_append(first, json_array_get(msgs, 1));
    char *t1 = render(&t, first, 0, 0, NULL, 1);
    char *t2 = render(&t, msgs, 3, 1, NULL, 0);
    char joined[512];
    snprintf(joined, sizeof joined, "%s Hello.%s", t1, t2);
    CHECK(whole && !strcmp(joined, whole), "turns [%s] != whole [%s]", joined, whole);
    /* The reply stopped on "\n\nUser:", which the session holds: not twice. */
    char *t2s = render(&t, msgs, 3, 1, " Hello.\n\nUser:", 0);
    CHECK(t2s && !strcmp(t2s, " Bye\n\nAssistant:"), "after a stop string: [%s]", t2s);
    free(whole); free(t1); free(t2); free(t2s);
    json_decref(first);
    json_decref(msgs);
    chat_template_free(&t);
}

static void none_template_and_bad_messages(void)
{
    chat_template t;
    char err[256], *out = NULL;
    size_t n;
    CHECK(chat_template_parse(&t, NULL, err, sizeof err) == 0, "none: %s", err);
    json_t *m = json_loads("[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"assistant\",\"content\":\"b\"},"
                           "{\"role\":\"user\",\"content\":\"c\"}]", 0, NULL);
    char *s = render(&t, m, 0, 0, NULL, 1);
    CHECK(s && !strcmp(s, "a\nbc\n"), "none: [%s]", s);
    free(s);
    /* Nothing after the last reply renders to "" (not NULL); empty and
     * null contents are empty messages, not a failure. */
    s = render(&t, m, 3, 1, NULL, 0);
    CHECK(s && !strcmp(s, ""), "no new messages: [%s]", s ? s : "(null)");
    free(s);
    json_decref(m);
    m = json_loads("[{\"role\":\"user\",\"content\":\"\"},{\"role\":\"assistant\",\"content\":null}]", 0, NULL);
    s = render(&t, m, 0, 0, NULL, 1);
    CHECK(s && !strcmp(s, "\n"), "empty contents: [%s]", s ? s : "(null)");
    free(s);
    json_decref(m);
    const char *bad[] = { "[{\"role\":\"wizard\",\"content\":\"x\"}]", "[{\"content\":\"x\"}]",
                          "[{\"role\":\"user\",\"content\":5}]", "[7]",
                          "[{\"role\":\"user\",\"content\":[{\"type\":\"image\"}]}]" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        json_t *b = json_loads(bad[i], 0, NULL);
        err[0] = 0;
        int rc = chat_render(&t, b, 0, 0, NULL, 0, 1, &out, &n, err, sizeof err);
        CHECK(rc == -EINVAL && strstr(err, "messages[0]"), "%s: rc %d, err [%s]", bad[i], rc, err);
        json_decref(b);
    }
    chat_template_free(&t);
    CHECK(chat_template_parse(&t, "{\"user\":\"no placeholder\"}", err, sizeof err) == -EINVAL &&
          strstr(err, "{prompt}"), "a template without {prompt}: [%s]", err);
}

/* The events of a list, encoded, against proto_pack_* writing the same. */
static void events_encode_as_before(void)
{
    evlist l;
    evlist_init(&l);
    CHECK(evlist_token(&l, 3, (const uint8_t *)"ab", 2) == 0, "token");
    CHECK(evlist_token(&l, 3, NULL, 0) == 0, "empty token");
    CHECK(evlist_progress(&l, 4, 10, 20) == 0, "progress");
    proto_done d = { .id = 3, .reason = "stop", .tokens_in = 1, .tokens_out = 2, .session_tokens = 9,
                     .fed_bytes = 5, .ms_queue = 1.5, .ms_total = 7, .stop = (const uint8_t *)"\n\nUser:",
                     .stop_len = 7 };
    CHECK(evlist_done(&l, &d) == 0, "done");
    CHECK(evlist_appended(&l, 5, 11, 4, 6, 1) == 0, "appended");
    CHECK(evlist_error(&l, 6, PE_BUSY, "session 'x' has a turn in flight") == 0, "error");
    for (int i = 0; i < 100; i++) evlist_token(&l, 7, (const uint8_t *)"0123456789", 10);   /* grow */
    msgpack_sbuffer got, want;
    msgpack_sbuffer_init(&got);
    msgpack_sbuffer_init(&want);
    for (size_t i = 0; i < l.n; i++) event_pack_msgpack(&got, &l, &l.v[i]);
    proto_pack_token(&want, 3, (const uint8_t *)"ab", 2);
    proto_pack_token(&want, 3, (const uint8_t *)"", 0);
    proto_pack_progress(&want, 4, 10, 20);
    proto_pack_done(&want, &d);
    msgpack_packer pk;
    proto_result_begin(&pk, &want, 5, 4);
    proto_pack_key(&pk, "session_tokens"); msgpack_pack_uint64(&pk, 11);
    proto_pack_key(&pk, "tokens_in"); msgpack_pack_uint64(&pk, 4);
    proto_pack_key(&pk, "fed_bytes"); msgpack_pack_uint64(&pk, 6);
    proto_pack_key(&pk, "cancelled"); msgpack_pack_true(&pk);
    proto_pack_error(&want, 6, PE_BUSY, "session 'x' has a turn in flight");
    for (int i = 0; i < 100; i++) proto_pack_token(&want, 7, (const uint8_t *)"0123456789", 10);
    CHECK(got.size == want.size && !memcmp(got.data, want.data, got.size),
          "encodings differ (%zu vs %zu bytes)", got.size, want.size);
    int finals = 0;
    for (size_t i = 0; i < l.n; i++) finals += event_is_final(&l.v[i]);
    CHECK(finals == 3, "final events: %d", finals);
    msgpack_sbuffer_destroy(&got);
    msgpack_sbuffer_destroy(&want);
    evlist_free(&l);
}

int main(void)
{
    RUN(whole_equals_turns);
    RUN(none_template_and_bad_messages);
    RUN(events_encode_as_before);
    return check_exit();
}
