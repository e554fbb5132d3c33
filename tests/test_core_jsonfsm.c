/* tests/test_core_jsonfsm.c — the JSON automaton, the schema subset and the
 * vocabulary mask of structured output (recurrent/jsonfsm.h, jsonmask.h),
 * checked against jansson as the reference parser and a small validator of
 * the schema subset written here. */
#include <errno.h>
#include <math.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

#include "recurrent/jsonfsm.h"
#include "recurrent/jsonmask.h"
#include "recurrent/sampler.h"
#include "recurrent/tokenizer.h"
#include "tests/check.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}
static int rn(int n) { return (int)(rnd() % (uint64_t)n); }

/* p[0..n) printable (a static buffer, the last 600 bytes at most). */
static const char *esc(const char *p, size_t n)
{
    static char out[520];
    size_t o = 0, from = n > 120 ? n - 120 : 0;
    for (size_t i = from; i < n && o + 5 < sizeof out; i++)
        o += (size_t)snprintf(out + o, sizeof out - o, p[i] >= 0x20 && p[i] < 0x7f ? "%c" : "\\x%02x", (uint8_t)p[i]);
    out[o] = 0;
    return out;
}

/* Whether jansson refused a text for a limit of its own, not the grammar:
 * integers past 64 bits, reals past a double, NUL in keys. */
static int ref_limit(const json_error_t *e)
{
    return strstr(e->text, "too big") || strstr(e->text, "overflow") || strstr(e->text, "NUL byte in object key");
}

/* The automaton's verdict on a whole text: 1 accepted (alive and complete). */
static int fsm_accepts(const jsonfsm_schema *s, const char *p, size_t n)
{
    jsonfsm f;
    jsonfsm_init(&f, s);
    return jsonfsm_feed_bytes(&f, (const uint8_t *)p, n) && jsonfsm_is_complete(&f);
}

static json_t *ref_parse(const char *p, size_t n, json_error_t *e)
{
    return json_loadb(p, n, JSON_DECODE_ANY | JSON_ALLOW_NUL, e);
}

/* Whether a text lies outside the automaton's documented limits, where it
 * may refuse what RFC 8259 allows (or jansson refuses numbers it cannot
 * hold): more than JSONFSM_WS_MAX whitespace bytes in a row, a number run
 * longer than JSONFSM_NUMBER_MAX (or than 15 digits, jansson's), nesting past
 * JSONFSM_DEPTH. */
static int outside_limits(const char *p, size_t n)
{
    int ws = 0, num = 0, depth = 0, maxd = 0;
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        ws = (c == ' ' || c == '\t' || c == '\n' || c == '\r') ? ws + 1 : 0;
        if (ws > JSONFSM_WS_MAX) return 1;
        num = (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E' ? num + 1 : 0;
        if (num > 15) return 1;
        if (c == '[' || c == '{') maxd = ++depth > maxd ? depth : maxd;
        if (c == ']' || c == '}') depth--;
    }
    return maxd > JSONFSM_DEPTH - 2;
}

/* ---- a validator of the subset (what a user of the schema checks) -------- */

static int validate(const json_t *s, const json_t *v)
{
    if (json_is_true(s) || !s) return 1;
    json_t *t = json_object_get(s, "type");
    if (t) {
        int ok = 0;
        size_t n = json_is_array(t) ? json_array_size(t) : 1;
        for (size_t i = 0; i < n; i++) {
            const char *ty = json_string_value(json_is_array(t) ? json_array_get(t, i) : t);
            if (!strcmp(ty, "object")) ok |= json_is_object(v);
            else if (!strcmp(ty, "array")) ok |= json_is_array(v);
            else if (!strcmp(ty, "string")) ok |= json_is_string(v);
            else if (!strcmp(ty, "number")) ok |= json_is_number(v);
            else if (!strcmp(ty, "integer")) ok |= json_is_integer(v);
            else if (!strcmp(ty, "boolean")) ok |= json_is_boolean(v);
            else if (!strcmp(ty, "null")) ok |= json_is_null(v);
        }
        if (!ok) return 0;
    }
    json_t *e = json_object_get(s, "enum"), *c = json_object_get(s, "const");
    if (c && !json_equal(c, (json_t *)v)) return 0;
    if (e) {
        int ok = 0;
        size_t i;
        json_t *x;
        json_array_foreach(e, i, x) ok |= json_equal(x, (json_t *)v);
        if (!ok) return 0;
    }
    if (json_is_object(v)) {
        json_t *props = json_object_get(s, "properties"), *addl = json_object_get(s, "additionalProperties");
        const char *k;
        json_t *x;
        json_object_foreach((json_t *)v, k, x) {
            json_t *ps = props ? json_object_get(props, k) : NULL;
            if (ps) { if (!validate(ps, x)) return 0; }
            else if (json_is_false(addl)) return 0;
            else if (addl && !validate(addl, x)) return 0;
        }
        json_t *req = json_object_get(s, "required");
        size_t i;
        json_array_foreach(req, i, x)
            if (!json_object_get(v, json_string_value(x))) return 0;
    }
    if (json_is_array(v)) {
        json_t *items = json_object_get(s, "items"), *x;
        size_t i;
        if (items) json_array_foreach(v, i, x) if (!validate(items, x)) return 0;
    }
    return 1;
}

/* ---- generated documents ---------------------------------------------------- */

typedef struct sbuf { char *p; size_t n, cap; } sbuf;
static void put(sbuf *b, const char *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        b->cap = (b->n + n + 1) * 2;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}
static void puts_(sbuf *b, const char *s) { put(b, s, strlen(s)); }
static void ws(sbuf *b)
{
    static const char *const w[] = { "", "", "", " ", "\n", " \t", "\r\n  " };
    puts_(b, w[rn(7)]);
}
static void gen_string(sbuf *b)
{
    static const char *const parts[] = { "a", "Z", " ", "\\\"", "\\\\", "\\/", "\\b", "\\f", "\\n", "\\r", "\\t",
                                         "\\u00e9", "\\uD83D\\uDE00", "\\u0000", "\xC3\xA9", "\xE2\x82\xAC",
                                         "\xF0\x9F\x98\x80", "\x7F", "~", "{", "]" };
    puts_(b, "\"");
    for (int i = rn(6); i > 0; i--) puts_(b, parts[rn(sizeof parts / sizeof parts[0])]);
    puts_(b, "\"");
}
static void gen_number(sbuf *b)
{
    static const char *const n[] = { "0", "-0", "1", "42", "-17", "3.25", "-0.5", "1e5", "2E-3", "6.02e+23",
                                     "123456789", "0.000001" };
    puts_(b, n[rn(sizeof n / sizeof n[0])]);
}
static void gen_value(sbuf *b, int depth)
{
    int k = rn(depth > 4 ? 5 : 7);
    switch (k) {
    case 0: gen_string(b); break;
    case 1: gen_number(b); break;
    case 2: puts_(b, "true"); break;
    case 3: puts_(b, rn(2) ? "false" : "null"); break;
    case 4: gen_string(b); break;
    case 5: {
        puts_(b, "[");
        ws(b);
        for (int i = rn(4), first = 1; i > 0; i--, first = 0) {
            if (!first) { puts_(b, ","); ws(b); }
            gen_value(b, depth + 1);
            ws(b);
        }
        puts_(b, "]");
        break;
    }
    default: {
        puts_(b, "{");
        ws(b);
        for (int i = rn(4), first = 1; i > 0; i--, first = 0) {
            if (!first) { puts_(b, ","); ws(b); }
            gen_string(b);
            ws(b);
            puts_(b, ":");
            ws(b);
            gen_value(b, depth + 1);
            ws(b);
        }
        puts_(b, "}");
    }
    }
}

/* ---- cases -------------------------------------------------------------------- */

static void fsm_fixed_documents(void)
{
    static const char *const good[] = {
        "{}", "[]", "0", "-0", "1.5e-3", "\"\"", "true", "false", "null", " {\"a\" : [1, 2.0, {}]} ",
        "\"\\u00e9\\uD83D\\uDE00\"", "\"\xF4\x8F\xBF\xBF\"", "[[[[]]]]", "{\"\":null}", "\"\\u0000\"",
        "123", "\"\x7F\"",
    };
    static const char *const bad[] = {
        "", "{", "[1,]", "{\"a\"}", "{\"a\":}", "01", "-", "1.", "1e", "1e+", ".5", "+1", "tru", "nul",
        "\"\\x\"", "\"\\uD83D\"", "\"\\uDE00\"", "\"\\uD83Dx\"", "\"\xC0\x80\"", "\"\xED\xA0\x80\"",
        "\"\xF4\x90\x80\x80\"", "\"\x01\"", "\"abc", "[1 2]", "{\"a\":1,}", "{1:2}", "[] []", "truex",
        "{\"a\":1 \"b\":2}", "\"\xE2\x82\"", "NaN", "Infinity",
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        json_error_t e;
        json_t *j = ref_parse(good[i], strlen(good[i]), &e);
        CHECK(j, "jansson takes %s: %s", good[i], e.text);
        json_decref(j);
        CHECK(fsm_accepts(NULL, good[i], strlen(good[i])), "accepts %s", good[i]);
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        json_error_t e;
        json_t *j = ref_parse(bad[i], strlen(bad[i]), &e);
        CHECK(!j, "jansson refuses %s", bad[i]);
        json_decref(j);
        CHECK(!fsm_accepts(NULL, bad[i], strlen(bad[i])), "refuses %s", bad[i]);
    }
    /* the documented limits */
    jsonfsm f;
    jsonfsm_init(&f, NULL);
    CHECK(!jsonfsm_feed_bytes(&f, (const uint8_t *)"[     1]", 8), "5 spaces in a row are refused");
    char deep[2 * JSONFSM_DEPTH + 4];
    memset(deep, '[', JSONFSM_DEPTH);
    memset(deep + JSONFSM_DEPTH, ']', JSONFSM_DEPTH);
    CHECK(fsm_accepts(NULL, deep, 2 * JSONFSM_DEPTH), "%d levels accepted", JSONFSM_DEPTH);
    memset(deep, '[', JSONFSM_DEPTH + 1);
    jsonfsm_init(&f, NULL);
    CHECK(!jsonfsm_feed_bytes(&f, (const uint8_t *)deep, JSONFSM_DEPTH + 1), "%d levels refused", JSONFSM_DEPTH + 1);
    char num[JSONFSM_NUMBER_MAX + 2];
    memset(num, '7', sizeof num);
    CHECK(fsm_accepts(NULL, num, JSONFSM_NUMBER_MAX), "a %d-byte number", JSONFSM_NUMBER_MAX);
    CHECK(!fsm_accepts(NULL, num, JSONFSM_NUMBER_MAX + 1), "no %d-byte number", JSONFSM_NUMBER_MAX + 1);
    /* 31 bytes then '.' would need a 33rd: refused at the '.' */
    memcpy(num + JSONFSM_NUMBER_MAX - 1, ".", 1);
    jsonfsm_init(&f, NULL);
    CHECK(!jsonfsm_feed_bytes(&f, (const uint8_t *)num, JSONFSM_NUMBER_MAX), "no room to finish: dead at once");
    jsonfsm_init(&f, NULL);
    jsonfsm_feed_bytes(&f, (const uint8_t *)"12", 2);
    CHECK(jsonfsm_is_complete(&f) && !jsonfsm_is_closed(&f), "a top-level number is complete, not closed");
    jsonfsm_init(&f, NULL);
    jsonfsm_feed_bytes(&f, (const uint8_t *)"{}", 2);
    CHECK(jsonfsm_is_closed(&f), "an object closes the document");
}

/* Generated documents and mutations of them: the automaton agrees with
 * jansson byte for byte (within the documented limits), and where it dies,
 * no later byte revives it. */
static void fsm_generated_vs_jansson(void)
{
    int agree = 0, skipped = 0, accepted = 0;
    sbuf b = { 0 };
    for (int it = 0; it < 20000; it++) {
        b.n = 0;
        ws(&b);
        gen_value(&b, 0);
        ws(&b);
        int mut = it % 2;
        if (mut) {
            static const char junk[] = "{}[]:,\"\\ 0-.eE+tfnu\x80\xC3\xFF";
            for (int m = 1 + rn(2); m > 0; m--) {
                size_t at = b.n ? (size_t)rn((int)b.n) : 0;
                int op = rn(3);
                if (op == 0 && b.n) memmove(b.p + at, b.p + at + 1, b.n - at), b.n--;
                else if (op == 1 && b.n) b.p[at] = junk[rn(sizeof junk - 1)];
                else { put(&b, " ", 1); memmove(b.p + at + 1, b.p + at, b.n - at - 1); b.p[at] = junk[rn(sizeof junk - 1)]; }
            }
        }
        if (outside_limits(b.p, b.n)) { skipped++; continue; }
        json_error_t e;
        json_t *j = ref_parse(b.p, b.n, &e);
        int acc = fsm_accepts(NULL, b.p, b.n);
        if (!j && ref_limit(&e)) { skipped++; continue; }
        if (!!j != acc && !check_failed_)
            CHECK(0, "disagree on <%s>: jansson %s (%s), fsm %d", esc(b.p, b.n), j ? "takes" : "refuses", e.text, acc);
        agree += !!j == acc;
        accepted += acc;
        json_decref(j);
    }
    free(b.p);
    CHECK(accepted > 8000, "only %d accepted", accepted);
    printf("# %d documents agree with jansson (%d accepted), %d outside the limits skipped\n", agree, accepted, skipped);
}

/* The shortest bytes over a small alphabet that complete f, appended to b
 * (breadth first, states told apart by their used bytes): 1, or 0 when the
 * search finds none (the live-prefix contract says it must). The alphabet
 * closes every construct: structure, '0' for numbers, the letters of the
 * literals, escapes and surrogates, UTF-8 continuations, and the bytes of
 * the schema's names and values (extra). */
static int complete_bfs(const jsonfsm *f, const char *extra, sbuf *b)
{
    enum { MAXN = 40000, HS = 1 << 17 };
    typedef struct qn { jsonfsm s; int parent; uint8_t byte; } qn;
    uint8_t alpha[256], used[256] = { 0 };
    int na = 0;
    static const char base[] = "}]{[\":,0truefalsn\\uDC8\x80\x90\xA0";
    for (int pass = 0; pass < 2; pass++)
        for (const char *c = pass ? (extra ? extra : "") : base; *c; c++)
            if (!used[(uint8_t)*c]) { used[(uint8_t)*c] = 1; alpha[na++] = (uint8_t)*c; }
    static qn *q;         /* kept from call to call: allocated once */
    static uint64_t *seen;
    if (!f) { free(q); free(seen); q = NULL; seen = NULL; return 0; }
    if (!q) { q = malloc(MAXN * sizeof *q); seen = malloc(HS * sizeof *seen); }
    memset(seen, 0, HS * sizeof *seen);
    int nq = 0, head = 0, found = -1;
    q[nq].s = *f;
    q[nq].parent = -1;
    nq++;
    if (jsonfsm_is_complete(f)) found = 0;
    while (found < 0 && head < nq) {
        for (int i = 0; i < na && found < 0 && nq < MAXN; i++) {
            jsonfsm *g = &q[nq].s;
            jsonfsm_copy(g, &q[head].s);
            if (!jsonfsm_feed(g, alpha[i]) || g->depth > f->depth + 2) continue;
            uint64_t h = XXH3_64bits(g, jsonfsm_used_size(g)) | 1;
            size_t k = h & (HS - 1);
            while (seen[k] && seen[k] != h) k = (k + 1) & (HS - 1);
            if (seen[k]) continue;
            seen[k] = h;
            q[nq].parent = head;
            q[nq].byte = alpha[i];
            if (jsonfsm_is_complete(g)) found = nq;
            nq++;
        }
        head++;
    }
    if (found >= 0) {
        uint8_t path[4096];
        int n = 0;
        for (int i = found; i > 0 && n < (int)sizeof path; i = q[i].parent) path[n++] = q[i].byte;
        while (n > 0) { n--; put(b, (const char *)&path[n], 1); }
    }
    return found >= 0;
}

/* A walk driven by the automaton: random bytes it takes, then bytes that
 * close; it must reach a complete document (the live-prefix contract) that
 * jansson parses and the schema validates. */
static int walk(const jsonfsm_schema *s, const json_t *schema, const char *extra, int len, sbuf *b, char *why, size_t wl)
{
    static const char pick[] = "{}[]:,\"\\ \n0123456789-.eE+truefalsnl\x80\xC3\xE2\xF0\x82\xA9\x98uUabd";
    jsonfsm f;
    jsonfsm_init(&f, s);
    b->n = 0;
    for (int step = 0; step < len; step++) {
        uint8_t c = 0;
        int found = 0;
        for (int t = 0; t < 40 && !found; t++) {
            c = (uint8_t)pick[rn(sizeof pick - 1)];
            jsonfsm g = f;
            found = jsonfsm_feed(&g, c);
        }
        for (int t = 0; !found && t < 256; t++) {
            c = (uint8_t)t;
            jsonfsm g = f;
            found = jsonfsm_feed(&g, c);
        }
        if (!found && jsonfsm_is_complete(&f)) break;
        if (!found) { snprintf(why, wl, "no byte keeps <%s> alive", esc(b->p, b->n)); return 0; }
        jsonfsm_feed(&f, c);
        put(b, (const char *)&c, 1);
    }
    size_t at = b->n;
    char *dump = schema ? json_dumps(schema, JSON_COMPACT) : NULL;   /* names and values as raw bytes */
    (void)extra;
    int got = complete_bfs(&f, dump, b);
    free(dump);
    if (!got) { snprintf(why, wl, "no completion found for <%s>", esc(b->p, b->n)); return 0; }
    jsonfsm_feed_bytes(&f, (const uint8_t *)b->p + at, b->n - at);
    if (!jsonfsm_is_complete(&f)) { snprintf(why, wl, "never completes <%s>", esc(b->p, b->n)); return 0; }
    json_error_t e;
    json_t *j = ref_parse(b->p, b->n, &e);
    if (!j && ref_limit(&e)) return 2;
    if (!j) { snprintf(why, wl, "jansson refuses <%s>: %s", esc(b->p, b->n), e.text); return 0; }
    int ok = validate(schema, j);
    json_decref(j);
    if (!ok) { snprintf(why, wl, "<%s> does not validate", esc(b->p, b->n)); return 0; }
    return 1;
}

static const char *const schemas[] = {
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{\"type\":\"integer\"},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"enum\":[\"red\",\"green\",\"x\\\"y\"]}},"
    "\"ok\":{\"type\":\"boolean\"},\"none\":{\"type\":\"null\"},\"score\":{\"type\":\"number\"}},"
    "\"required\":[\"name\",\"age\"],\"additionalProperties\":false}",
    "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"ab\":{\"type\":[\"string\",\"null\"]}},"
    "\"required\":[\"ab\"]}",
    "{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":{\"k\":{\"const\":3}},\"required\":[\"k\"],"
    "\"additionalProperties\":false}}",
    "{\"enum\":[1,12,\"12\",null,true,[1,2],{\"a\":1}]}",
    "{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"}}",
    "{\"type\":\"number\"}",
    "{\"type\":\"object\",\"properties\":{\"\":{\"type\":\"string\"},\"\\u00e9\\\\\":{\"type\":\"boolean\"}},"
    "\"required\":[\"\",\"\\u00e9\\\\\"],\"additionalProperties\":false}",
};

static jsonfsm_schema *compile_text(const char *text, json_t **js)
{
    json_error_t e;
    json_t *j = json_loads(text, 0, &e);
    if (!j) { printf("# bad schema text: %s\n", e.text); return NULL; }
    jsonfsm_schema *s = NULL;
    char err[256];
    int rc = jsonfsm_schema_compile(j, &s, err, sizeof err);
    if (rc) printf("# compile: %s\n", err);
    if (js) *js = j;
    else json_decref(j);
    return s;
}

static void schema_walks_validate(void)
{
    char why[2048];
    sbuf b = { 0 };
    for (size_t i = 0; i < sizeof schemas / sizeof schemas[0]; i++) {
        json_t *j = NULL;
        jsonfsm_schema *s = compile_text(schemas[i], &j);
        CHECK(s, "schema %zu compiles", i);
        if (!s) continue;
        for (int it = 0; it < 500; it++)
            if (!walk(s, j, schemas[i], rn(200), &b, why, sizeof why)) { CHECK(0, "schema %zu: %s", i, why); break; }
        free(s);
        json_decref(j);
    }
    /* and with no schema */
    for (int it = 0; it < 1000; it++)
        if (!walk(NULL, NULL, NULL, rn(300), &b, why, sizeof why)) { CHECK(0, "no schema: %s", why); break; }
    jsonfsm_schema *o = NULL;
    CHECK(jsonfsm_schema_object(&o) == 0, "json_object mode");
    json_t *objs = json_loads("{\"type\":\"object\"}", 0, NULL);
    for (int it = 0; it < 500 && o; it++)
        if (!walk(o, objs, NULL, rn(200), &b, why, sizeof why)) { CHECK(0, "json_object: %s", why); break; }
    CHECK(!fsm_accepts(o, "[]", 2) && !fsm_accepts(o, "1", 1) && fsm_accepts(o, "{\"x\":[1]}", 9),
          "json_object mode takes objects only");
    json_decref(objs);
    free(o);
    free(b.p);
    complete_bfs(NULL, NULL, NULL);   /* its buffers */
}

/* Documents a user writes against the first schema: accepted exactly when
 * they validate (written in the forms the automaton reads: compact enum
 * values, keys as their plain JSON form). */
static void schema_fixed_documents(void)
{
    json_t *j = NULL;
    jsonfsm_schema *s = compile_text(schemas[0], &j);
    CHECK(s, "compiles");
    if (!s) return;
    static const char *const docs[] = {
        "{\"name\":\"Ann\",\"age\":30}",
        "{\"age\":30,\"name\":\"Ann\"}",
        "{\"name\":\"Ann\"}",
        "{\"name\":\"Ann\",\"age\":30.5}",
        "{\"name\":\"Ann\",\"age\":3e1}",
        "{\"name\":\"Ann\",\"age\":30,\"x\":1}",
        "{\"name\":\"Ann\",\"age\":30,\"tags\":[\"red\",\"x\\\"y\"]}",
        "{\"name\":\"Ann\",\"age\":30,\"tags\":[\"blue\"]}",
        "{\"name\":\"Ann\",\"age\":30,\"name\":\"Bob\"}",
        "{\"name\":1,\"age\":30}",
        "{\"name\":\"A\",\"age\":-1,\"ok\":false,\"none\":null,\"score\":1.5e3}",
        "{\"name\":\"A\",\"age\":1,\"ok\":null}",
        "[]",
        " { \"name\" : \"A\" , \"age\" : 0 } ",
    };
    for (size_t i = 0; i < sizeof docs / sizeof docs[0]; i++) {
        json_t *v = json_loads(docs[i], JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, NULL);
        int want = v && validate(j, v);
        json_decref(v);
        int got = fsm_accepts(s, docs[i], strlen(docs[i]));
        CHECK(want == got, "%s: validator %d, automaton %d", docs[i], want, got);
    }
    /* a closed object whose properties were all written takes no ',' */
    jsonfsm_schema *t = compile_text("{\"type\":\"object\",\"properties\":{\"a\":{}},\"additionalProperties\":false}", NULL);
    jsonfsm f;
    jsonfsm_init(&f, t);
    CHECK(t && jsonfsm_feed_bytes(&f, (const uint8_t *)"{\"a\":1", 6) && !jsonfsm_feed(&f, ','), "no ',' after the last key");
    free(t);
    free(s);
    json_decref(j);
}

static void schema_refusals(void)
{
    static const char *const cases[][2] = {
        { "{\"$ref\":\"#/x\"}", "'$ref'" },
        { "{\"anyOf\":[{}]}", "'anyOf'" },
        { "{\"type\":\"string\",\"pattern\":\"a+\"}", "'pattern'" },
        { "{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\",\"minimum\":3}}}", "'minimum'" },
        { "{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\",\"minimum\":3}}}", "/properties/n" },
        { "{\"type\":\"object\",\"required\":[\"q\"]}", "'q'" },
        { "{\"type\":\"float\"}", "'float'" },
        { "{\"enum\":[]}", "'enum'" },
        { "{\"type\":\"string\",\"enum\":[1]}", "'enum'" },
        { "{\"items\":[{}]}", "'items'" },
        { "[]", "object" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_t *j = json_loads(cases[i][0], JSON_DECODE_ANY, NULL);
        jsonfsm_schema *s = NULL;
        char err[256] = "";
        int rc = jsonfsm_schema_compile(j, &s, err, sizeof err);
        CHECK(rc == -EINVAL && !s && strstr(err, cases[i][1]), "%s: rc %d, message '%s' should name %s", cases[i][0],
              rc, err, cases[i][1]);
        free(s);
        json_decref(j);
    }
    /* annotations are fine; a clone behaves as the original */
    jsonfsm_schema *s = compile_text("{\"title\":\"t\",\"description\":\"d\",\"type\":\"object\",\"$schema\":\"x\"}", NULL);
    CHECK(s, "annotations ignored");
    jsonfsm_schema *c = s ? jsonfsm_schema_clone(s) : NULL;
    CHECK(c && jsonfsm_schema_hash(c) == jsonfsm_schema_hash(s) && fsm_accepts(c, "{}", 2), "the clone");
    free(c);
    free(s);
}

/* ---- masking --------------------------------------------------------------- */

static char dir[64];

static tokenizer *neox(void)
{
    char path[256], cmd[600];
    snprintf(path, sizeof path, "%s/20B_tokenizer.json", dir);
    snprintf(cmd, sizeof cmd, "gzip -dc tests/fixtures/tokenizer/20B_tokenizer.json.gz > %s", path);
    if (system(cmd) != 0) return NULL;
    tokenizer *t = NULL;
    char err[256];
    if (tokenizer_load("bpe", path, &t, err, sizeof err)) printf("# %s\n", err);
    return t;
}

/* For state f: every allowed token keeps it alive, every other kills it
 * (end tokens: allowed exactly when complete). */
static int mask_exact(const tokenizer *t, jsonmask *m, const jsonfsm *f, int32_t eos, char *why, size_t wl)
{
    size_t n = 0;
    const uint64_t *bits = jsonmask_allowed(m, f, &n);
    if (!bits) { snprintf(why, wl, "out of memory"); return 0; }
    size_t count = 0;
    for (int32_t id = 0; id < tokenizer_vocab_size(t); id++) {
        size_t len = 0;
        const uint8_t *b = tokenizer_token_bytes(t, id, &len);
        int want;
        if (id == eos) want = jsonfsm_is_complete(f);
        else {
            jsonfsm g = *f;
            want = b && len && jsonfsm_feed_bytes(&g, b, len);
        }
        count += (size_t)want;
        if (want != jsonmask_has(bits, id)) {
            snprintf(why, wl, "token %d <%.*s>: mask %d, automaton %d", id, (int)len, b ? (const char *)b : "",
                     jsonmask_has(bits, id), want);
            return 0;
        }
    }
    if (count != n) { snprintf(why, wl, "count %zu, said %zu", count, n); return 0; }
    return 1;
}

static void mask_neox(void)
{
    tokenizer *t = neox();
    CHECK(t, "the GPT-NeoX tokenizer loads");
    if (!t) return;
    int V = tokenizer_vocab_size(t);
    int32_t eos = 0;   /* <|endoftext|> */
    jsonmask_vocab *v = NULL;
    char err[256], why[2048];
    CHECK(jsonmask_vocab_new(t, V, &eos, 1, &v, err, sizeof err) == 0, "index: %s", err);
    jsonmask *m = v ? jsonmask_new(v) : NULL;
    CHECK(m, "a masker");
    json_t *j = NULL;
    jsonfsm_schema *s = compile_text(schemas[0], &j);
    static const char *const prefixes[] = {
        "", "{", "{\"", "{\"na", "{\"name\"", "{\"name\":", "{\"name\": \"Jo", "{\"name\":\"\\", "{\"name\":\"\\u00",
        "{\"name\":\"\xE2\x82", "{\"name\":\"x\",\"age\":", "{\"name\":\"x\",\"age\":12", "{\"name\":\"x\",\"age\":-",
        "{\"name\":\"x\",\"age\":1,\"tags\":[\"r", "{\"name\":\"x\",\"age\":1}", "{\"name\":\"x\",\"age\":1,\"score\":1.",
    };
    for (int pass = 0; pass < 2 && m && s; pass++)   /* the second pass is served from the cache */
        for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++) {
            jsonfsm f;
            jsonfsm_init(&f, s);
            CHECK(jsonfsm_feed_bytes(&f, (const uint8_t *)prefixes[i], strlen(prefixes[i])), "prefix %s", prefixes[i]);
            if (!mask_exact(t, m, &f, eos, why, sizeof why)) CHECK(0, "after <%s>: %s", prefixes[i], why);
        }
    /* no schema and json_object mode: a few states */
    static const char *const anyp[] = { "", "[", "[\"a", "[1", "[tr", "{\"k\":{\"", "\"\\uD83D", "12" };
    jsonfsm_schema *o = NULL;
    jsonfsm_schema_object(&o);
    for (size_t i = 0; m && i < sizeof anyp / sizeof anyp[0]; i++) {
        jsonfsm f;
        jsonfsm_init(&f, NULL);
        jsonfsm_feed_bytes(&f, (const uint8_t *)anyp[i], strlen(anyp[i]));
        if (!mask_exact(t, m, &f, eos, why, sizeof why)) CHECK(0, "any, after <%s>: %s", anyp[i], why);
        jsonfsm_init(&f, o);
        if (jsonfsm_feed_bytes(&f, (const uint8_t *)anyp[i], strlen(anyp[i])) &&
            !mask_exact(t, m, &f, eos, why, sizeof why))
            CHECK(0, "json_object, after <%s>: %s", anyp[i], why);
    }
    /* Generation by uniform draws among allowed tokens: never stuck, always
     * a document that parses and validates. */
    sbuf b = { 0 };
    int done = 0;
    for (int it = 0; it < 60 && m && s; it++) {
        jsonfsm f;
        jsonfsm_init(&f, s);
        b.n = 0;
        for (int step = 0; step < 3000; step++) {
            size_t n = 0;
            const uint64_t *bits = jsonmask_allowed(m, &f, &n);
            if (!n) { CHECK(0, "nothing allowed after <%s>", esc(b.p, b.n)); break; }
            /* prefer short documents: after 40 tokens draw among those
             * closing something when the end token is not allowed */
            size_t k = (size_t)rn((int)n);
            int32_t id = -1;
            /* past 40 tokens, close: the first allowed of these bytes */
            for (const char *c = "\"}]0,:"; step > 40 && *c && id < 0; c++) {
                int32_t *toks = NULL;
                size_t nt = 0, cap = 0, used = 0;
                if (tokenizer_encode(t, (const uint8_t *)c, 1, 1, &toks, &nt, &cap, &used) == 0 && nt == 1 &&
                    jsonmask_has(bits, toks[0]))
                    id = toks[0];
                free(toks);
            }
            for (int w = 0; id < 0; w++)
                for (uint64_t x = bits[w]; x; x &= x - 1)
                    if (k-- == 0) { id = w * 64 + __builtin_ctzll(x); break; }
            if (id == eos) break;
            size_t len = 0;
            const uint8_t *tb = tokenizer_token_bytes(t, id, &len);
            if (!jsonfsm_feed_bytes(&f, tb, len)) { CHECK(0, "allowed token %d kills", id); break; }
            put(&b, (const char *)tb, len);
            if (jsonfsm_is_closed(&f)) break;
        }
        if (!jsonfsm_is_complete(&f)) continue;   /* a long random string: the step bound cut it */
        json_error_t e;
        json_t *v2 = ref_parse(b.p, b.n, &e);
        if (!v2 && ref_limit(&e)) continue;
        CHECK(v2 && validate(j, v2), "generated <%s> parses and validates (%s)", esc(b.p, b.n), v2 ? "" : e.text);
        json_decref(v2);
        done++;
    }
    CHECK(done >= 20, "only %d of 60 generations completed", done);
    printf("# %d generated documents complete\n", done);
    uint64_t hits = 0, comp = 0;
    if (m) jsonmask_stats(m, &hits, &comp);
    printf("# cache: %llu hits, %llu computed\n", (unsigned long long)hits, (unsigned long long)comp);
    free(b.p);
    free(o);
    free(s);
    json_decref(j);
    jsonmask_free(m);
    jsonmask_vocab_free(v);
    tokenizer_free(t);
}

/* A byte vocabulary (the shipped model's): the mask is the set of bytes the
 * automaton takes. */
static void mask_bytes(void)
{
    tokenizer *t = NULL;
    char err[256], why[2048];
    CHECK(tokenizer_load("bytes", NULL, &t, err, sizeof err) == 0, "bytes: %s", err);
    if (!t) return;
    jsonmask_vocab *v = NULL;
    CHECK(jsonmask_vocab_new(t, 256, NULL, 0, &v, err, sizeof err) == 0, "index");
    jsonmask *m = jsonmask_new(v);
    static const char *const p[] = { "", "{\"a\":[", "\"\xF0", "-", "{\"a\":1" };
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) {
        jsonfsm f;
        jsonfsm_init(&f, NULL);
        jsonfsm_feed_bytes(&f, (const uint8_t *)p[i], strlen(p[i]));
        if (!mask_exact(t, m, &f, -1, why, sizeof why)) CHECK(0, "after <%s>: %s", p[i], why);
    }
    float row[256];
    for (int i = 0; i < 256; i++) row[i] = 1.0f;
    jsonfsm f;
    jsonfsm_init(&f, NULL);
    size_t n = 0;
    jsonmask_apply(jsonmask_allowed(m, &f, &n), row, 256);
    int kept = 0;
    for (int i = 0; i < 256; i++) kept += row[i] == 1.0f;
    CHECK(kept == (int)n && row['{'] == 1.0f && row['}'] == JSONMASK_NEG, "apply keeps exactly the allowed (%d, %zu)",
          kept, n);
    jsonmask_free(m);
    jsonmask_vocab_free(v);
    tokenizer_free(t);
}

/* jsonmask_sample draws only allowed tokens, and with the distribution of
 * the masked row (the softmax over the allowed tokens alone) on each of its
 * paths: few allowed (gather), most allowed at pure temperature
 * (rejection), top-p (mask in place), masked row wanted (logprobs). */
static void mask_sample_distribution(void)
{
    enum { V = 256, DRAWS = 40000 };
    float logits[V], row[V], vals[V], scratch[2 * V];
    int32_t ids[V];
    for (int i = 0; i < V; i++) logits[i] = (float)(((i * 37) % 11) * 0.3 - 1.0);
    static const int nallow[] = { 6, 250, 250, 250, 250, 6 };
    for (int c = 0; c < 6; c++) {
        uint64_t bits[V / 64] = { 0 };
        for (int i = 0; i < nallow[c]; i++) {
            int id = (i * 41 + 3) % V;
            bits[id >> 6] |= 1ull << (id & 63);
        }
        size_t n = 0;
        for (int w = 0; w < V / 64; w++) n += (size_t)__builtin_popcountll(bits[w]);
        sampler sm;
        /* 4 and 5: greedy (rejection, gather): the most likely allowed token every time */
        sampler_params p = { c >= 4 ? 0.0f : 1.0f, 0, c == 2 ? 0.999999f : 1.0f, 1.0f, 0, 77 };
        sampler_init(&sm, &p);
        double want[V] = { 0 }, z = 0;
        int best = -1;
        for (int i = 0; i < V; i++)
            if (jsonmask_has(bits, i)) {
                z += want[i] = exp(logits[i]);
                if (best < 0 || logits[i] > logits[best]) best = i;
            }
        if (c >= 4) {
            memset(want, 0, sizeof want);
            want[best] = z = 1;
        }
        static int got[V];
        memset(got, 0, sizeof got);
        int bad = 0;
        for (int d = 0; d < DRAWS; d++) {
            memcpy(row, logits, sizeof row);
            int masked = 0;
            int32_t tok = jsonmask_sample(&sm, bits, n, row, V, vals, ids, scratch, c == 3, &masked);
            if (!jsonmask_has(bits, tok)) bad++;
            else got[tok]++;
            if (c == 3 && !masked) bad++;
        }
        double worst = 0;
        for (int i = 0; i < V; i++) {
            double e = fabs((double)got[i] / DRAWS - want[i] / z);
            if (e > worst) worst = e;
        }
        CHECK(!bad, "path %d: %d draws off the mask (or not masked for logprobs)", c, bad);
        CHECK(worst < 0.01, "path %d: frequencies off the masked softmax by %.4f", c, worst);
    }
}

/* A vocabulary without byte tokens can reach a state no token continues:
 * the allowed set is then empty (the daemon ends the turn with an error
 * rather than emit an invalid token), and the end token only when the
 * document is complete. */
static void mask_vocab_without_bytes(void)
{
    static const char *const toks[] = { "{", "\"a\":", "\"x", "}", "<end>" };
    const uint8_t *tb[5];
    size_t tl[5];
    for (int i = 0; i < 5; i++) { tb[i] = (const uint8_t *)toks[i]; tl[i] = strlen(toks[i]); }
    int32_t eos = 4;
    jsonmask_vocab *v = NULL;
    char err[128];
    CHECK(jsonmask_vocab_from(5, tb, tl, &eos, 1, &v, err, sizeof err) == 0, "index: %s", err);
    jsonmask *m = v ? jsonmask_new(v) : NULL;
    jsonfsm_schema *s = compile_text("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},"
                                     "\"required\":[\"a\"],\"additionalProperties\":false}", NULL);
    if (!m || !s) return;
    jsonfsm f;
    jsonfsm_init(&f, s);
    size_t n = 0;
    const uint64_t *bits = jsonmask_allowed(m, &f, &n);
    CHECK(n == 1 && jsonmask_has(bits, 0), "start: '{' only (%zu)", n);
    jsonfsm_feed_bytes(&f, (const uint8_t *)"{", 1);
    bits = jsonmask_allowed(m, &f, &n);
    CHECK(n == 1 && jsonmask_has(bits, 1), "then the required key only (%zu)", n);
    jsonfsm_feed_bytes(&f, (const uint8_t *)"\"a\":", 4);
    bits = jsonmask_allowed(m, &f, &n);
    CHECK(bits && n == 0, "an integer is due and no token starts one: nothing allowed (%zu)", n);
    jsonfsm_init(&f, NULL);
    jsonfsm_feed_bytes(&f, (const uint8_t *)"{}", 2);
    bits = jsonmask_allowed(m, &f, &n);
    CHECK(n == 1 && jsonmask_has(bits, 4), "a closed document: the end token only (%zu)", n);
    free(s);
    jsonmask_free(m);
    jsonmask_vocab_free(v);
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/lind_jsonfsm_%d", (int)getpid());
    if (mkdir(dir, 0700) != 0) { perror(dir); return 1; }
    RUN(fsm_fixed_documents);
    RUN(fsm_generated_vs_jansson);
    RUN(schema_fixed_documents);
    RUN(schema_refusals);
    RUN(schema_walks_validate);
    RUN(mask_bytes);
    RUN(mask_sample_distribution);
    RUN(mask_vocab_without_bytes);
    RUN(mask_neox);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) {}
    return check_exit();
}
