/* tests/test_lindctl_template.c — lindctl chat's templates (recurrent/chat.c,
 * the module the HTTP front door renders with too): the JSON format's checks, the
 * built-in raven template, and the text one typed message becomes — framed,
 * with the system prompt once, and without repeating the stop string a
 * reply already ended on. */
#include "tests/check.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "recurrent/chat.h"

static chat_template T;

/* Format msg and compare with want. */
static int fmt_is(const char *sys, int after, const char *tail, const char *msg, const char *want)
{
    char *out = NULL;
    size_t n = 0;
    int rc = chat_template_format(&T, sys, after, (const uint8_t *)tail, strlen(tail), msg, strlen(msg), &out, &n);
    int ok = rc == 0 && n == strlen(want) && !memcmp(out, want, n);
    if (!ok) printf("   got '%.*s' want '%s'\n", (int)n, out ? out : "", want);
    free(out);
    return ok;
}

static void raven_builtin(void)
{
    char err[256];
    CHECK(chat_template_load(&T, "raven", err, sizeof err) == 0, "load: %s", err);
    CHECK(!strcmp(T.name, "raven") && T.n_stop == 1 && !strcmp(T.stop[0], "\n\nUser:"), "stop strings");
    /* First message of a new session, with a system prompt. */
    CHECK(fmt_is("Be brief.", 0, "", "Hi\n", "Be brief.\n\nUser: Hi\n\nAssistant:"), "first turn");
    /* The reply stopped on "\n\nUser:": the next message does not repeat it. */
    CHECK(fmt_is(NULL, 1, " Hello.\n\nUser:", "And?\n", " And?\n\nAssistant:"), "after a stop");
    /* The reply ran out of length: assistant_end closes it first. */
    CHECK(fmt_is(NULL, 1, " Hello and", "And?\n", "\n\nUser: And?\n\nAssistant:"), "after length");
    /* ... or ran out half way into it. */
    CHECK(fmt_is(NULL, 1, " Hello.\n", "And?\n", "\nUser: And?\n\nAssistant:"), "after half a separator");
    /* Multi-line messages keep their inner newlines. */
    CHECK(fmt_is(NULL, 0, "", "a\nb\n", "User: a\nb\n\nAssistant:"), "multi-line");
    chat_template_free(&T);
}

/* RWKV World / RWKV-7 G1: "System: " framing, rounds separated by "\n\n". */
static void world_builtin(void)
{
    char err[256];
    CHECK(chat_template_load(&T, "world", err, sizeof err) == 0, "load: %s", err);
    CHECK(!strcmp(T.name, "world") && T.n_stop == 1 && !strcmp(T.stop[0], "\n\nUser:"), "stop strings");
    CHECK(fmt_is("Be brief.", 0, "", "Hi\n", "System: Be brief.\n\nUser: Hi\n\nAssistant:"), "first turn");
    CHECK(fmt_is(NULL, 1, " Hello.\n\nUser:", "And?\n", " And?\n\nAssistant:"), "after a stop");
    CHECK(fmt_is(NULL, 1, " Hello and", "And?\n", "\n\nUser: And?\n\nAssistant:"), "after length");
    chat_template_free(&T);
}

/* RWKV7-G1's think mode: world's framing with each reply opened by "<think"
 * (the model writes ">...</think>" and then the answer). */
static void g1_think_builtin(void)
{
    char err[256];
    CHECK(chat_template_load(&T, "g1-think", err, sizeof err) == 0, "load: %s", err);
    CHECK(!strcmp(T.name, "g1-think") && T.n_stop == 1 && !strcmp(T.stop[0], "\n\nUser:"), "stop strings");
    CHECK(fmt_is(NULL, 0, "", "Hi\n", "User: Hi\n\nAssistant: <think"), "first turn");
    CHECK(fmt_is(NULL, 1, ">\nok</think>\nHello.\n\nUser:", "And?\n", " And?\n\nAssistant: <think"),
          "after a stop");
    chat_template_free(&T);
}

/* The daemon's default per model family, and the JSON text it serves. */
static void family_defaults(void)
{
    CHECK(!strcmp(chat_template_for_family("hf-rwkv4"), "raven"), "HF RWKV-4: raven");
    CHECK(!strcmp(chat_template_for_family("rwkv7-pth"), "world"), "RWKV-7 .pth: world");
    CHECK(chat_template_for_family("lind") == NULL, "lind's own: none chosen");
    CHECK(chat_template_builtin("nothing") == NULL, "not a built-in");
    char *json = NULL, err[256];
    CHECK(chat_template_read("world", &json, err, sizeof err) == 0 && json, "read world: %s", err);
    CHECK(json && !strcmp(json, chat_template_builtin("world")), "the built-in's text");
    free(json);
    CHECK(chat_template_read("/nonexistent/t.json", &json, err, sizeof err) == -ENOENT && !json &&
          strstr(err, "none, raven, world, g1-think"), "neither: %s", err);
}

static void none_builtin(void)
{
    char err[256];
    CHECK(chat_template_load(&T, "none", err, sizeof err) == 0, "load: %s", err);
    /* The typed line as it is; nothing is dropped after a reply that ends
     * with the same byte the message starts with. */
    CHECK(fmt_is(NULL, 1, "...h", "hello\n", "hello\n"), "plain line");
    CHECK(fmt_is("sys", 0, "", "hi\n", "sys\nhi\n"), "unframed system prompt on its own line");
    chat_template_free(&T);
}

static void file_format_errors(void)
{
    char err[256];
    static const struct { const char *json, *needle; } bad[] = {
        { "[1]", "want a JSON object" },
        { "{\"user\": \"no placeholder\"}", "must contain {prompt}" },
        { "{\"user\": \"{prompt}{prompt}\"}", "twice" },
        { "{\"user\": \"{prompt}\", \"system\": \"S\"}", "must contain {system}" },
        { "{\"user\": \"{prompt}\", \"stop\": \"x\"}", "'stop' must be an array" },
        { "{\"user\": \"{prompt}\", \"stop\": [\"\"]}", "stop[0]" },
        { "{\"user\": \"{prompt}\", \"stop\": [\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\",\"9\"]}", "at most 8" },
        { "{\"user\": \"{prompt}\", \"colour\": \"red\"}", "unknown field 'colour'" },
        { "{\"usr\": \"{prompt}\"}", "unknown field 'usr'" },
        { "{\"user\": 3}", "'user' must be a string" },
        { "{\"user\": ", "not JSON" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = 0;
        int rc = chat_template_from_json(&T, bad[i].json, strlen(bad[i].json), "t.json", err, sizeof err);
        CHECK(rc == -EINVAL && strstr(err, bad[i].needle) && !strncmp(err, "t.json: ", 8),
              "%s: rc %d, '%s' (want '%s')", bad[i].json, rc, err, bad[i].needle);
    }
    CHECK(chat_template_load(&T, "/nonexistent/t.json", err, sizeof err) == -ENOENT &&
          strstr(err, "neither a built-in"), "missing file: %s", err);
    const char *good = "{\"name\":\"zephyr\",\"system\":\"<|system|>\\n{system}</s>\\n\","
                       "\"user\":\"<|user|>\\n{prompt}</s>\\n<|assistant|>\\n\","
                       "\"assistant_end\":\"</s>\\n\",\"stop\":[\"</s>\"],\"default_system\":\"Be kind.\"}";
    CHECK(chat_template_from_json(&T, good, strlen(good), "z.json", err, sizeof err) == 0, "good: %s", err);
    CHECK(!strcmp(T.name, "zephyr") && T.default_system && !strcmp(T.default_system, "Be kind."), "fields");
    CHECK(fmt_is(NULL, 1, "Hi.</s>", "Q\n", "\n<|user|>\nQ</s>\n<|assistant|>\n"), "stop then assistant_end");
    chat_template_free(&T);
}

int main(void)
{
    RUN(raven_builtin);
    RUN(world_builtin);
    RUN(g1_think_builtin);
    RUN(family_defaults);
    RUN(none_builtin);
    RUN(file_format_errors);
    return check_exit();
}
