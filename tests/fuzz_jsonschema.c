/* tests/fuzz_jsonschema.c — libFuzzer driver for structured output's schema
 * compiler and JSON automaton (recurrent/jsonfsm.h). The input (after
 * tests/fuzz_common.h's flags byte; the valid base is a schema and a
 * document it accepts) is a schema's JSON text, a NUL byte, then a document.
 * Invariants: no crash, leak or UB; the compiler returns 0, or -EINVAL with a
 * message; the automaton (under the schema when it compiled, and under no
 * schema) dies for good once dead; a copy of a state behaves as the state;
 * with no schema, a document the automaton accepts is one jansson parses,
 * and one jansson parses inside the documented limits is accepted. */
#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "recurrent/jsonfsm.h"
#include "tests/fuzz_common.h"

static const char BASE[] =
    "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"enum\":[\"x\",1,null]},"
    "\"c\":{\"type\":\"array\",\"items\":{\"type\":[\"string\",\"number\"]}}},\"required\":[\"a\"],"
    "\"additionalProperties\":false}\0{\"a\": -12, \"c\": [\"\\u00e9\", 1.5e3], \"b\":\"x\"}";

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc; (void)argv;
    fuzz_maybe_write_seed((const uint8_t *)BASE, sizeof BASE - 1);
    return 0;
}

/* jansson refusing for a limit of its own, or the text past the automaton's */
static int limits(const uint8_t *p, size_t n, const json_error_t *e)
{
    if (e && (strstr(e->text, "too big") || strstr(e->text, "overflow") || strstr(e->text, "NUL byte")))
        return 1;
    if (memchr(p, 0, n)) return 1;   /* jansson reads a raw NUL as the end of the text */
    int ws = 0, num = 0, depth = 0;
    for (size_t i = 0; i < n; i++) {
        uint8_t c = p[i];
        ws = (c == ' ' || c == '\t' || c == '\n' || c == '\r') ? ws + 1 : 0;
        num = (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E' ? num + 1 : 0;
        if (c == '[' || c == '{') depth++;
        if (ws > JSONFSM_WS_MAX || num > 15 || depth > JSONFSM_DEPTH - 2) return 1;
    }
    return 0;
}

static int run(const jsonfsm_schema *s, const uint8_t *p, size_t n)
{
    jsonfsm f, g;
    jsonfsm_init(&f, s);
    int alive = 1;
    for (size_t i = 0; i < n; i++) {
        jsonfsm_copy(&g, &f);
        int a = jsonfsm_feed(&f, p[i]), b = jsonfsm_feed(&g, p[i]);
        if (a != b || jsonfsm_is_complete(&f) != jsonfsm_is_complete(&g)) abort();   /* a copy is the state */
        if (!alive && a) abort();   /* dead for good */
        alive = a;
        if (jsonfsm_is_closed(&f) && !jsonfsm_is_complete(&f)) abort();
    }
    return alive && jsonfsm_is_complete(&f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *b;
    int fix;
    size_t n = fuzz_bytes(data, size, (const uint8_t *)BASE, sizeof BASE - 1, &b, &fix);
    const uint8_t *nul = memchr(b, 0, n);
    size_t sl = nul ? (size_t)(nul - b) : n;
    const uint8_t *doc = nul ? nul + 1 : b + n;
    size_t dl = nul ? n - sl - 1 : 0;
    json_t *j = json_loadb((const char *)b, sl, JSON_DECODE_ANY, NULL);
    jsonfsm_schema *s = NULL;
    if (j) {
        char err[300] = "";
        int rc = jsonfsm_schema_compile(j, &s, err, sizeof err);
        if (rc != 0 && (rc != -EINVAL || !err[0] || s)) abort();
        if (rc == 0) {
            jsonfsm_schema *c = jsonfsm_schema_clone(s);
            if (!c || jsonfsm_schema_hash(c) != jsonfsm_schema_hash(s)) abort();
            if (run(c, doc, dl) != run(s, doc, dl)) abort();
            free(c);
        }
        json_decref(j);
    }
    int acc = run(NULL, doc, dl);
    json_error_t e;
    json_t *v = json_loadb((const char *)doc, dl, JSON_DECODE_ANY | JSON_ALLOW_NUL, &e);
    if (!limits(doc, dl, v ? NULL : &e) && !!v != acc) abort();
    json_decref(v);
    free(s);
    free(b);
    return 0;
}
