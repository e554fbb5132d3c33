/* tests/test_core_tokenizer.c — recurrent/tokenizer: the three kinds on
 * tiny handmade vocabularies with tokens derived by hand, the streaming
 * property (any split of a text, encoded piece by piece with the undecided
 * tail carried over, gives the tokens of the whole text) checked at every
 * split point and on random multi-splits, round trips of arbitrary bytes,
 * and a specific error for each malformed file. Files are written to a
 * scratch directory by the test itself (tests/fixtures/tokenizer/ holds the
 * shared World sample). */
#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "recurrent/tokenizer.h"
#include "tests/check.h"

static char dir[64];
static char path_buf[256];

static const char *tmp_path(const char *name)
{
    snprintf(path_buf, sizeof path_buf, "%s/%s", dir, name);
    return path_buf;
}

static const char *write_file(const char *name, const char *text)
{
    const char *p = tmp_path(name);
    FILE *f = fopen(p, "wb");
    if (!f) { perror(p); exit(1); }
    fputs(text, f);
    fclose(f);
    return p;
}

/* ---- encoding helpers ---------------------------------------------------- */
typedef struct toks {
    int32_t *v;
    size_t n, cap;
} toks;

static toks enc(const tokenizer *t, const void *text, size_t len)
{
    toks r = {0};
    size_t used = 0;
    if (tokenizer_encode(t, text, len, 1, &r.v, &r.n, &r.cap, &used) < 0 || used != len) r.n = (size_t)-1;
    return r;
}

static int eq_ids(toks a, const int32_t *want, size_t n)
{
    if (a.n != n) return 0;
    for (size_t i = 0; i < n; i++)
        if (a.v[i] != want[i]) return 0;
    return 1;
}

static void show(const char *what, toks a)
{
    printf("   %s:", what);
    for (size_t i = 0; i < a.n && i < 40; i++) printf(" %d", a.v[i]);
    printf("\n");
}

#define EXPECT(t, str, ...) do { \
    static const int32_t want_[] = {__VA_ARGS__}; \
    toks got_ = enc(t, str, sizeof(str) - 1); \
    CHECK(eq_ids(got_, want_, sizeof want_ / sizeof want_[0]), "tokens of \"%s\"", str); \
    if (!eq_ids(got_, want_, sizeof want_ / sizeof want_[0])) show("got", got_); \
    free(got_.v); } while (0)

/* decode(encode(x)) == x */
static int round_trips(const tokenizer *t, const uint8_t *text, size_t len) {
    toks a = enc(t, text, len);
    if (a.n == (size_t)-1) return 0;
    uint8_t *out = malloc(len + 1);
    size_t o = 0;
    int ok = 1;
    for (size_t i = 0; i < a.n && ok; i++) {
        size_t bl;
        const uint8_t *b = tokenizer_token_bytes(t, a.v[i], &bl);
        if (!b || o + bl > len || memcmp(text + o, b, bl)) ok = 0;
        else o += bl;
    }
    ok = ok && o == len;
    free(out);
    free(a.v);
    return ok;
}

/* Encode text in pieces cut at cuts[0..ncuts) (ascending), carrying the
 * unconsumed tail into the next piece; compare with the whole. */
static int split_matches(const tokenizer *t, const uint8_t *text, size_t len, const size_t *cuts, int ncuts,
                         toks whole, char *why, size_t whylen) {
    toks r = {0};
    size_t start = 0;
    for (int k = 0; k <= ncuts; k++) {
        size_t end = k < ncuts ? cuts[k] : len, used = 0;
        int final = k == ncuts;
        if (end < start) end = start;
        if (tokenizer_encode(t, text + start, end - start, final, &r.v, &r.n, &r.cap, &used) < 0) {
            snprintf(why, whylen, "encode failed");
            free(r.v);
            return 0;
        }
        if (used > end - start || (final && used != end - start)) {
            snprintf(why, whylen, "consumed %zu of %zu (final %d)", used, end - start, final);
            free(r.v);
            return 0;
        }
        if (!final && end - start - used > TOKENIZER_TAIL_MAX) {
            snprintf(why, whylen, "held back %zu bytes > TOKENIZER_TAIL_MAX", end - start - used);
            free(r.v);
            return 0;
        }
        start += used;
    }
    int ok = r.n == whole.n && (!r.n || !memcmp(r.v, whole.v, r.n * sizeof *r.v));
    if (!ok) {
        int o = snprintf(why, whylen, "cuts");
        for (int k = 0; k < ncuts && o < (int)whylen - 12; k++) o += snprintf(why + o, whylen - (size_t)o, " %zu", cuts[k]);
        o += snprintf(why + o, whylen - (size_t)o, ": %zu tokens vs %zu", r.n, whole.n);
        for (size_t i = 0; i < r.n && i < whole.n && o < (int)whylen - 40; i++)
            if (r.v[i] != whole.v[i]) {
                snprintf(why + o, whylen - (size_t)o, "; first difference at token %zu: %d vs %d", i, r.v[i], whole.v[i]);
                break;
            }
    }
    free(r.v);
    return ok;
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t next_rand(void) {
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return rng;
}

/* Every single split point, every pair of split points for short texts, and
 * random multi-splits. */
static void check_streaming(const tokenizer *t, const char *label, const uint8_t *text, size_t len) {
    toks whole = enc(t, text, len);
    CHECK(whole.n != (size_t)-1, "%s: whole encode failed", label);
    char why[512];
    size_t cuts[8];
    int bad = 0;
    for (size_t i = 0; i <= len && bad < 3; i++) {
        cuts[0] = i;
        if (!split_matches(t, text, len, cuts, 1, whole, why, sizeof why)) {
            CHECK(0, "%s (%zu bytes): %s", label, len, why);
            bad++;
        }
    }
    if (len <= 48)
        for (size_t i = 0; i <= len && bad < 3; i++)
            for (size_t j = i; j <= len && bad < 3; j++) {
                cuts[0] = i; cuts[1] = j;
                if (!split_matches(t, text, len, cuts, 2, whole, why, sizeof why)) {
                    CHECK(0, "%s (%zu bytes): %s", label, len, why);
                    bad++;
                }
            }
    for (int r = 0; r < 300 && bad < 3; r++) {
        int nc = 1 + (int)(next_rand() % 8);
        for (int k = 0; k < nc; k++) cuts[k] = len ? next_rand() % (len + 1) : 0;
        for (int a = 1; a < nc; a++)   /* sort */
            for (int b = a; b > 0 && cuts[b - 1] > cuts[b]; b--) { size_t x = cuts[b]; cuts[b] = cuts[b - 1]; cuts[b - 1] = x; }
        if (!split_matches(t, text, len, cuts, nc, whole, why, sizeof why)) {
            CHECK(0, "%s (%zu bytes): %s", label, len, why);
            bad++;
        }
    }
    free(whole.v);
}

/* ---- handmade BPE files --------------------------------------------------- */

/* GPT-2's byte → character table, written out independently of the code
 * under test: printable Latin-1 maps to itself, the rest to U+0100 on. */
static void byte_char(int b, char out[4]) {
    static int map[256], init;
    if (!init) {
        int n = 0;
        for (int i = 0; i < 256; i++) {
            int keep = (i >= '!' && i <= '~') || (i >= 0xA1 && i <= 0xAC) || (i >= 0xAE && i <= 0xFF);
            map[i] = keep ? i : 256 + n++;
        }
        init = 1;
    }
    int c = map[b];
    if (c < 0x80) { out[0] = (char)c; out[1] = 0; }
    else { out[0] = (char)(0xC0 | c >> 6); out[1] = (char)(0x80 | (c & 63)); out[2] = 0; }
}

/* A tokenizer.json: ids 0..255 are the single bytes (id = byte value), then
 * the extra tokens in order from 256, then the merges. */
static json_t *bpe_json(const char *const *extra, int nextra, const char *const *merges, int nmerges) {
    json_t *vocab = json_object();
    for (int b = 0; b < 256; b++) {
        char c[4];
        byte_char(b, c);
        json_object_set_new(vocab, c, json_integer(b));
    }
    for (int i = 0; i < nextra; i++) json_object_set_new(vocab, extra[i], json_integer(256 + i));
    json_t *m = json_array();
    for (int i = 0; i < nmerges; i++) json_array_append_new(m, json_string(merges[i]));
    json_t *model = json_pack("{s:s, s:o, s:o, s:n, s:n}", "type", "BPE", "vocab", vocab, "merges", m, "dropout", "unk_token");
    json_t *pre = json_pack("{s:s, s:b, s:b, s:b}", "type", "ByteLevel", "add_prefix_space", 0, "trim_offsets", 1, "use_regex", 1);
    json_t *added = json_pack("[{s:i, s:s, s:b}, {s:i, s:s, s:b}]", "id", 300, "content", "<|end|>", "special", 1,
                              "id", 301, "content", "<x>", "special", 0);
    return json_pack("{s:s, s:n, s:o, s:o, s:o}", "version", "1.0", "normalizer", "added_tokens", added,
                     "pre_tokenizer", pre, "model", model);
}

/* Extra tokens (byte-level spelling: Ġ is a space) and merges, ranks by index. */
static const char *const EXTRA[] = {"Ġt", "he", "Ġthe", "ll", "ell", "aa", "34", "Ã©", "abc"};
static const char *const MERGES[] = {"Ġ t", "h e", "Ġt he", "l l", "e ll", "a a", "3 4", "Ã ©"};
enum { T_SP_T = 256, T_HE, T_SP_THE, T_LL, T_ELL, T_AA, T_34, T_E_ACUTE, T_ABC, T_END = 300, T_X = 301 };

static tokenizer *load_json(json_t *j, const char *name) {
    const char *p = tmp_path(name);
    json_dump_file(j, p, JSON_COMPACT);
    tokenizer *t = NULL;
    char err[512];
    if (tokenizer_load("bpe", p, &t, err, sizeof err) < 0) {
        printf("   load %s: %s\n", name, err);
        return NULL;
    }
    return t;
}

static tokenizer *base_bpe(void) {
    json_t *j = bpe_json(EXTRA, 9, MERGES, 8);
    tokenizer *t = load_json(j, "base.json");
    json_decref(j);
    return t;
}

/* ---- cases ---------------------------------------------------------------------- */

static void bytes_kind(void) {
    tokenizer *t = NULL;
    char err[256];
    CHECK(tokenizer_load("bytes", NULL, &t, err, sizeof err) == 0, "load: %s", err);
    if (!t) return;
    CHECK(!strcmp(tokenizer_kind_name(t), "bytes"), "name");
    CHECK(tokenizer_vocab_size(t) == 256, "vocab %d", tokenizer_vocab_size(t));
    CHECK(tokenizer_special_count(t) == 0, "no specials");
    const uint8_t text[] = {'h', 0, 0xFF, 0xE4, 0xB8};
    toks r = {0};
    size_t used = 9;
    CHECK(tokenizer_encode(t, text, 5, 0, &r.v, &r.n, &r.cap, &used) == 0 && used == 5, "nothing held back (used %zu)", used);
    static const int32_t want[] = {'h', 0, 0xFF, 0xE4, 0xB8};
    CHECK(eq_ids(r, want, 5), "token = byte value");
    free(r.v);
    size_t bl;
    const uint8_t *b = tokenizer_token_bytes(t, 200, &bl);
    CHECK(b && bl == 1 && b[0] == 200, "bytes of 200");
    CHECK(!tokenizer_token_bytes(t, 256, &bl) && bl == 0, "256 unknown");
    CHECK(!tokenizer_token_bytes(t, -1, &bl), "-1 unknown");
    tokenizer_free(t);
    CHECK(tokenizer_load("bytes", "x.json", &t, err, sizeof err) < 0 && strstr(err, "takes no file"), "a file refused: %s", err);
    CHECK(tokenizer_load("sentencepiece", NULL, &t, err, sizeof err) < 0 && strstr(err, "sentencepiece") &&
          strstr(err, "bytes, bpe, world"), "unknown kind: %s", err);
    char names[64];
    CHECK(!strcmp(tokenizer_kind_names(names, sizeof names), "bytes, bpe, world"), "names %s", names);
    CHECK(tokenizer_find_kind("world") && !tokenizer_find_kind("nope"), "find_kind");
}

static void bpe_merges_by_rank(void) {
    tokenizer *t = base_bpe();
    CHECK(t, "load");
    if (!t) return;
    CHECK(tokenizer_vocab_size(t) == 302, "vocab %d", tokenizer_vocab_size(t));
    /* " the": Ġ t (rank 0), then h e (1), then Ġt he (2). */
    EXPECT(t, " the", T_SP_THE);
    /* "the": h e; then "t he" is no merge. */
    EXPECT(t, "the", 't', T_HE);
    /* "hello": h e (rank 1) goes before l l (rank 3), so "e ll" never applies. */
    EXPECT(t, "hello", T_HE, T_LL, 'o');
    /* without the "he" merge opportunity: "yello" = y, e ll, o after l l then e ll */
    EXPECT(t, "yello", 'y', T_ELL, 'o');
    /* ties: leftmost first */
    EXPECT(t, "aaa", T_AA, 'a');
    EXPECT(t, "aaaa", T_AA, T_AA);
    /* "abc" is in the vocab but no merges build it */
    EXPECT(t, "abc", 'a', 'b', 'c');
    tokenizer_free(t);
}

static void bpe_pre_tokenizer(void) {
    tokenizer *t = base_bpe();
    if (!t) { CHECK(0, "load"); return; }
    /* GPT-2 regex pieces: "the" | " the" | "  " ... merges never cross pieces. */
    EXPECT(t, "the the", 't', T_HE, T_SP_THE);
    /* "  the": \s+(?!\S) takes one space, then " the". */
    EXPECT(t, "  the", ' ', T_SP_THE);
    /* contractions: "'ll" is a piece, so "l l" merges inside it */
    EXPECT(t, "he'll", T_HE, '\'', T_LL);
    /* digits: " 1234" is one piece, 3 4 merges */
    EXPECT(t, "x1234", 'x', '1', '2', T_34);
    /* a trailing space run is its own piece */
    EXPECT(t, "a \n", 'a', ' ', '\n');
    /* invalid UTF-8 is never matched by the regex: a piece of its own, bytes kept */
    EXPECT(t, "he\xff\xfeth", T_HE, 0xFF, 0xFE, 't', 'h');
    EXPECT(t, "aa\x00" "aa", T_AA, 0, T_AA);
    tokenizer_free(t);
}

static void bpe_added_tokens(void) {
    tokenizer *t = base_bpe();
    if (!t) { CHECK(0, "load"); return; }
    EXPECT(t, "the<|end|>the", 't', T_HE, T_END, 't', T_HE);
    EXPECT(t, "<x><|end|><|end", T_X, T_END, '<', '|', 'e', 'n', 'd');
    CHECK(tokenizer_special_count(t) == 1, "one special (<x> is not special): %d", tokenizer_special_count(t));
    const char *s = NULL;
    CHECK(tokenizer_special(t, 0, &s) == T_END && s && !strcmp(s, "<|end|>"), "special 0");
    CHECK(tokenizer_special(t, 1, &s) == -1 && !s, "special 1 out of range");
    size_t bl;
    const uint8_t *b = tokenizer_token_bytes(t, T_END, &bl);
    CHECK(b && bl == 7 && !memcmp(b, "<|end|>", 7), "bytes of the special");
    b = tokenizer_token_bytes(t, T_SP_THE, &bl);
    CHECK(b && bl == 4 && !memcmp(b, " the", 4), "Ġthe decodes to \" the\"");
    CHECK(!tokenizer_token_bytes(t, 299, &bl), "299 is no token");
    tokenizer_free(t);
}

static void bpe_options(void) {
    /* ignore_merges: a piece that is a whole vocab entry is that token. */
    json_t *j = bpe_json(EXTRA, 9, MERGES, 8);
    json_object_set_new(json_object_get(j, "model"), "ignore_merges", json_true());
    tokenizer *t = load_json(j, "ignore.json");
    json_decref(j);
    CHECK(t, "load ignore_merges");
    if (t) {
        EXPECT(t, "abc", T_ABC);
        EXPECT(t, "abcd", 'a', 'b', 'c', 'd');
        tokenizer_free(t);
    }
    /* NFC: e + U+0301 becomes é (C3 A9), merged by "Ã ©". */
    j = bpe_json(EXTRA, 9, MERGES, 8);
    json_object_set_new(j, "normalizer", json_pack("{s:s}", "type", "NFC"));
    t = load_json(j, "nfc.json");
    json_decref(j);
    CHECK(t, "load NFC");
    if (t) {
        EXPECT(t, "e\xcc\x81", T_E_ACUTE);
        EXPECT(t, "\xc3\xa9", T_E_ACUTE);
        /* invalid bytes pass through NFC untouched */
        EXPECT(t, "\xcc\xff" "e", 0xCC, 0xFF, 'e');
        tokenizer_free(t);
    }
    t = base_bpe();
    if (t) {
        EXPECT(t, "e\xcc\x81", 'e', 0xCC, 0x81);   /* no normalizer: left alone */
        tokenizer_free(t);
    }
    /* add_prefix_space: "the" reads as " the". */
    j = bpe_json(EXTRA, 9, MERGES, 8);
    json_object_set_new(json_object_get(j, "pre_tokenizer"), "add_prefix_space", json_true());
    t = load_json(j, "prefix.json");
    json_decref(j);
    CHECK(t, "load add_prefix_space");
    if (t) {
        EXPECT(t, "the", T_SP_THE);
        EXPECT(t, " the", T_SP_THE);
        EXPECT(t, "the<|end|>the", T_SP_THE, T_END, T_SP_THE);   /* per stretch, as HF */
        tokenizer_free(t);
    }
    /* Sequence: Split (digits in threes, Llama-3 style) + ByteLevel without regex. */
    j = bpe_json(EXTRA, 9, MERGES, 8);
    json_object_set_new(j, "pre_tokenizer", json_pack("{s:s, s:[{s:s, s:{s:s}, s:s, s:b}, {s:s, s:b, s:b}]}",
        "type", "Sequence", "pretokenizers", "type", "Split", "pattern", "Regex", "\\p{N}{1,3}| ?\\p{L}+|\\s+|.",
        "behavior", "Isolated", "invert", 0, "type", "ByteLevel", "add_prefix_space", 0, "use_regex", 0));
    t = load_json(j, "split.json");
    json_decref(j);
    CHECK(t, "load Split");
    if (t) {
        EXPECT(t, "12345", '1', '2', '3', '4', '5');   /* "123" "45": 3|4 never meet */
        EXPECT(t, "1345", '1', T_34, '5');
        tokenizer_free(t);
    }
    /* Removed + invert (GPT-4o style): the matches are the pieces. */
    j = bpe_json(EXTRA, 9, MERGES, 8);
    json_object_set_new(j, "pre_tokenizer", json_pack("{s:s, s:[{s:s, s:{s:s}, s:s, s:b}, {s:s, s:b, s:b}]}",
        "type", "Sequence", "pretokenizers", "type", "Split", "pattern", "Regex", "\\p{N}{1,3}| ?\\p{L}+|\\s+|.",
        "behavior", "Removed", "invert", 1, "type", "ByteLevel", "add_prefix_space", 0, "use_regex", 0));
    t = load_json(j, "removed_inv.json");
    json_decref(j);
    CHECK(t, "load Removed + invert");
    if (t) {
        EXPECT(t, "12345 the", '1', '2', '3', '4', '5', T_SP_THE);
        EXPECT(t, "1345\xff", '1', T_34, '5', 0xFF);   /* invalid bytes are kept */
        tokenizer_free(t);
    }
    /* Merges as [a, b] pairs. */
    j = bpe_json(EXTRA, 9, NULL, 0);
    json_t *m = json_object_get(json_object_get(j, "model"), "merges");
    json_array_append_new(m, json_pack("[s,s]", "a", "a"));
    t = load_json(j, "pairs.json");
    json_decref(j);
    CHECK(t, "load pair merges");
    if (t) {
        EXPECT(t, "aaa the", T_AA, 'a', ' ', 't', 'h', 'e');
        tokenizer_free(t);
    }
}

static const char *const STREAM_TEXTS[] = {
    "the the  the\n\n  hello yello",
    "he'll they're I'M 1234567 x3.14 aaaa",
    "a<|end|>b<x><|en<|end|>d <|end",
    "tab\t\tspaces    \n \n\r\n end  ",
    "e\xcc\x81t\xc3\xa9 caf\xc3\xa9\xcc\x81 \xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\x91\x8b\xf0\x9f\x8f\xbd \xe2\x80\x8d",
    "bad\xff\xfe utf8 \xe4\xb8 cut \xf0\x9f\x91",
    "\xea\xb0\x80\xe1\x86\xa8 \xe1\x84\x80\xe1\x85\xa1\xe1\x86\xa8 \xd9\x85\xd8\xb1\xd8\xad\xd8\xa8\xd8\xa7 \xe0\xa4\x95\xe0\xa5\x8d\xe0\xa4\xb7",
};

static void stream_all(tokenizer *t, const char *label) {
    char l[64];
    for (size_t i = 0; i < sizeof STREAM_TEXTS / sizeof STREAM_TEXTS[0]; i++) {
        snprintf(l, sizeof l, "%s text %zu", label, i);
        check_streaming(t, l, (const uint8_t *)STREAM_TEXTS[i], strlen(STREAM_TEXTS[i]));
    }
}

static void bpe_streaming(void) {
    static const struct { const char *name; const char *edit; } variants[] = {
        {"plain", NULL}, {"nfc", "nfc"}, {"prefix", "prefix"}, {"split", "split"}, {"nfc+prefix", "both"},
    };
    for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
        json_t *j = bpe_json(EXTRA, 9, MERGES, 8);
        const char *e = variants[v].edit;
        if (e && (!strcmp(e, "nfc") || !strcmp(e, "both")))
            json_object_set_new(j, "normalizer", json_pack("{s:s}", "type", "NFC"));
        if (e && (!strcmp(e, "prefix") || !strcmp(e, "both")))
            json_object_set_new(json_object_get(j, "pre_tokenizer"), "add_prefix_space", json_true());
        if (e && !strcmp(e, "split"))
            json_object_set_new(j, "pre_tokenizer", json_pack("{s:s, s:[{s:s, s:{s:s}, s:s}, {s:s, s:b}]}",
                "type", "Sequence", "pretokenizers", "type", "Split", "pattern", "Regex",
                "(?i:'s|'ll)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
                "behavior", "Isolated", "type", "ByteLevel", "use_regex", 0));
        tokenizer *t = load_json(j, "stream.json");
        json_decref(j);
        CHECK(t, "load %s", variants[v].name);
        if (!t) continue;
        stream_all(t, variants[v].name);
        tokenizer_free(t);
    }
}

static void bpe_long_runs(void) {
    tokenizer *t = base_bpe();
    if (!t) { CHECK(0, "load"); return; }
    /* Runs longer than the bound: still a round trip, the tail stays bounded,
     * and splits within the bound stay exact. */
    size_t n = 5000;
    uint8_t *s = malloc(n);
    for (int kind = 0; kind < 4; kind++) {
        for (size_t i = 0; i < n; i++) s[i] = kind == 0 ? ' ' : kind == 1 ? '7' : kind == 2 ? 'a' : (i % 3 ? ' ' : '\n');
        CHECK(round_trips(t, s, n), "round trip of run %d", kind);
        toks r = {0};
        size_t used;
        CHECK(tokenizer_encode(t, s, n, 0, &r.v, &r.n, &r.cap, &used) == 0 && n - used <= TOKENIZER_TAIL_MAX,
              "run %d: tail %zu > bound", kind, n - used);
        free(r.v);
        char label[32];
        snprintf(label, sizeof label, "run %d", kind);
        check_streaming(t, label, s, 200);
    }
    free(s);
    tokenizer_free(t);
}

static void round_trip_all_kinds(void) {
    tokenizer *t[3] = {0};
    char err[512];
    tokenizer_load("bytes", NULL, &t[0], err, sizeof err);
    t[1] = base_bpe();
    if (tokenizer_load("world", "tests/fixtures/tokenizer/world_small.txt", &t[2], err, sizeof err) < 0) printf("   %s\n", err);
    CHECK(t[0] && t[1] && t[2], "loads");
    uint8_t buf[600];
    for (int r = 0; r < 400; r++) {
        size_t n = next_rand() % sizeof buf;
        int mode = r % 4;
        for (size_t i = 0; i < n; i++) {
            uint64_t x = next_rand();
            buf[i] = mode == 0 ? (uint8_t)x                            /* anything, NUL and invalid UTF-8 */
                   : mode == 1 ? " \t\n0123456789ab"[x % 15]           /* runs of spaces and digits */
                   : mode == 2 ? "<|end|>xa "[x % 10]                  /* near-specials */
                   : (uint8_t)"\xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9 e\xcc\x81"[x % 15];
        }
        for (int k = 0; k < 3; k++)
            if (t[k]) CHECK(round_trips(t[k], buf, n), "kind %d: round trip of %zu bytes (mode %d)", k, n, mode);
    }
    for (int k = 0; k < 3; k++) tokenizer_free(t[k]);
}

/* ---- World ---------------------------------------------------------------------- */

static void world_kind(void) {
    tokenizer *t = NULL;
    char err[512];
    CHECK(tokenizer_load("world", "tests/fixtures/tokenizer/world_small.txt", &t, err, sizeof err) == 0, "load: %s", err);
    if (!t) return;
    /* The fixture: ids 1..256 are the bytes 0..255, then 257 'ab', 258 'abc',
     * 259 'bcd', 260 'h\u00e9llo', 261 b'\xe4\xb8\xad', 262 '\n\n', 263
     * "it's", 264 '\\x', 265 'b\'c' (a str literal that looks like bytes). */
    CHECK(tokenizer_vocab_size(t) == 266, "vocab %d", tokenizer_vocab_size(t));
    EXPECT(t, "abcd", 258, 'd' + 1);          /* greedy: abc + d, not a + bcd */
    EXPECT(t, "abd", 257, 'd' + 1);
    EXPECT(t, "bcd", 259);
    EXPECT(t, "h\xc3\xa9llo!", 260, '!' + 1);
    EXPECT(t, "\xe4\xb8\xad\xe4\xb8", 261, 0xE4 + 1, 0xB8 + 1);
    EXPECT(t, "\n\n\n", 262, '\n' + 1);
    EXPECT(t, "it's\\x", 263, 264);
    EXPECT(t, "b'c", 265);
    EXPECT(t, "a<|endoftext|>ab", 'a' + 1, 0, 257);
    toks none = enc(t, "", 0);
    CHECK(none.n == 0, "empty text: %zu tokens", none.n);
    free(none.v);
    size_t bl;
    const uint8_t *b = tokenizer_token_bytes(t, 0, &bl);
    CHECK(b && bl == 13 && !memcmp(b, "<|endoftext|>", 13), "token 0");
    const char *s;
    CHECK(tokenizer_special_count(t) == 1 && tokenizer_special(t, 0, &s) == 0 && !strcmp(s, "<|endoftext|>"), "special");
    b = tokenizer_token_bytes(t, 261, &bl);
    CHECK(b && bl == 3 && !memcmp(b, "\xe4\xb8\xad", 3), "bytes literal");
    CHECK(!tokenizer_token_bytes(t, 266, &bl), "266 unknown");
    stream_all(t, "world");
    static const char w[] = "abcabcdbcd abab it's\\x\n\n\n<|endoftext|><|endo";
    check_streaming(t, "world mix", (const uint8_t *)w, sizeof w - 1);
    tokenizer_free(t);
}

/* ---- malformed files ------------------------------------------------------------- */

static void expect_error(const char *kind, const char *path, const char *want1, const char *want2) {
    tokenizer *t = NULL;
    char err[512] = "";
    int rc = tokenizer_load(kind, path, &t, err, sizeof err);
    CHECK(rc < 0 && !t, "%s %s loaded", kind, path);
    CHECK(strstr(err, want1) && (!want2 || strstr(err, want2)), "error \"%s\" lacks \"%s\"%s%s", err, want1,
          want2 ? " / " : "", want2 ? want2 : "");
    tokenizer_free(t);
}

static void bpe_bad_file(const char *name, json_t *j, const char *want) {
    const char *p = tmp_path(name);
    json_dump_file(j, p, JSON_COMPACT);
    json_decref(j);
    char pcopy[256];
    snprintf(pcopy, sizeof pcopy, "%s", p);
    expect_error("bpe", pcopy, want, name);
}

static void bpe_malformed(void) {
    expect_error("bpe", tmp_path("nope.json"), "nope.json", "cannot read");
    expect_error("bpe", write_file("bad.json", "{\"model\": {\"type\": \"BPE\",, }"), "bad JSON", "bad.json:1:");
    expect_error("bpe", write_file("arr.json", "[1, 2]"), "JSON object at the top", NULL);
    expect_error("bpe", write_file("nomodel.json", "{\"version\": \"1.0\"}"), "\"model\" missing", NULL);
    CHECK(tokenizer_load("bpe", NULL, &(tokenizer *){0}, (char[64]){0}, 64) < 0, "bpe without a file");
    json_t *j;
#define EDIT(stmt, name, want) do { j = bpe_json(EXTRA, 9, MERGES, 8); json_t *model = json_object_get(j, "model"); (void)model; stmt; bpe_bad_file(name, j, want); } while (0)
    EDIT(json_object_set_new(model, "type", json_string("Unigram")), "unigram.json", "model.type \"Unigram\" is not supported");
    EDIT(json_object_del(model, "type"), "notype.json", "model.type missing");
    EDIT(json_object_set_new(model, "vocab", json_array()), "vocabarr.json", "model.vocab missing or not an object");
    EDIT(json_object_set_new(json_object_get(model, "vocab"), "zz", json_string("7")), "vocabstr.json", "model.vocab[\"zz\"]");
    EDIT(json_object_set_new(json_object_get(model, "vocab"), "zz", json_integer(-3)), "vocabneg.json", "model.vocab[\"zz\"]");
    EDIT(json_object_set_new(json_object_get(model, "vocab"), "zz", json_integer(257)), "dupid.json", "id 257 is given to both");
    EDIT(json_object_del(json_object_get(model, "vocab"), "Ġ"), "nobyte.json", "no token for byte 0x20");
    EDIT(json_object_set_new(model, "merges", json_object()), "mergesobj.json", "model.merges missing or not an array");
    EDIT(json_array_append_new(json_object_get(model, "merges"), json_string("q zz")), "mergeunk.json", "model.merges[8]: \"zz\" is not in model.vocab");
    EDIT(json_array_append_new(json_object_get(model, "merges"), json_string("q r")), "mergecat.json", "the merged \"qr\" is not in model.vocab");
    EDIT(json_array_append_new(json_object_get(model, "merges"), json_string("abc")), "mergeshape.json", "model.merges[8]: expected");
    EDIT(json_array_append_new(json_object_get(model, "merges"), json_integer(3)), "mergeint.json", "model.merges[8]: expected");
    EDIT(json_object_set_new(model, "dropout", json_real(0.1)), "dropout.json", "model.dropout");
    EDIT(json_object_set_new(model, "continuing_subword_prefix", json_string("##")), "prefix.json", "model.continuing_subword_prefix");
    EDIT(json_object_set_new(model, "byte_fallback", json_true()), "fallback.json", "model.byte_fallback");
    EDIT(json_object_set_new(j, "normalizer", json_pack("{s:s}", "type", "Lowercase")), "lower.json", "normalizer.type \"Lowercase\" is not supported");
    EDIT(json_object_set_new(j, "normalizer", json_string("NFC")), "normstr.json", "normalizer: expected null or an object");
    EDIT(json_object_set_new(j, "pre_tokenizer", json_pack("{s:s}", "type", "Whitespace")), "ws.json", "pre_tokenizer.type \"Whitespace\" is not supported");
    EDIT(json_object_set_new(j, "pre_tokenizer", json_null()), "nopre.json", "pre_tokenizer: expected an object");
    EDIT(json_object_set_new(j, "pre_tokenizer", json_pack("{s:s, s:[{s:s, s:{s:s}, s:s}, {s:s, s:b}]}", "type", "Sequence",
         "pretokenizers", "type", "Split", "pattern", "Regex", "\\s+", "behavior", "Removed", "type", "ByteLevel", "use_regex", 0)),
         "removed.json", "pretokenizers[0].behavior: only \"Isolated\"");
    EDIT(json_object_set_new(j, "pre_tokenizer", json_pack("{s:s, s:[{s:s, s:{s:s}}, {s:s, s:b}]}", "type", "Sequence",
         "pretokenizers", "type", "Split", "pattern", "Regex", "(a", "type", "ByteLevel", "use_regex", 0)),
         "badre.json", "pre_tokenizer pattern \"(a\"");
    EDIT(json_object_set_new(j, "pre_tokenizer", json_pack("{s:s, s:[{s:s, s:{s:s}}, {s:s, s:b}]}", "type", "Sequence",
         "pretokenizers", "type", "Split", "pattern", "Regex", "(?<=a)b|\\w+", "type", "ByteLevel", "use_regex", 0)),
         "behind.json", "looks behind");
    EDIT(json_object_set_new(j, "pre_tokenizer", json_pack("{s:s, s:[{s:s, s:{s:s}}]}", "type", "Sequence",
         "pretokenizers", "type", "Split", "pattern", "Regex", "\\s+")), "nobl.json", "without ByteLevel");
    EDIT(json_object_set_new(json_array_get(json_object_get(j, "added_tokens"), 0), "lstrip", json_true()), "lstrip.json", "added_tokens[0] (\"<|end|>\").lstrip");
    EDIT(json_object_set_new(json_array_get(json_object_get(j, "added_tokens"), 0), "id", json_string("x")), "addedid.json", "added_tokens[0]: expected");
    EDIT(json_object_set_new(json_array_get(json_object_get(j, "added_tokens"), 0), "id", json_integer(257)), "addedclash.json", "id 257 is another string in model.vocab");
    EDIT(json_object_set_new(json_array_get(json_object_get(j, "added_tokens"), 1), "id", json_integer(300)), "addeddup.json", "id 300 is also added_tokens[0]");
    EDIT(json_object_set_new(j, "added_tokens", json_object()), "addedobj.json", "added_tokens: expected an array");
#undef EDIT
}

static void world_malformed(void) {
    char all[256 * 24 + 1];   /* the 256 single bytes: lines 1..256 */
    size_t o = 0;
    for (int b = 0; b < 256; b++) o += (size_t)snprintf(all + o, sizeof all - o, "%d b'\\x%02x' 1\n", b + 1, b);
    char buf[sizeof all + 256];
    expect_error("world", tmp_path("nope.txt"), "nope.txt", "cannot open");
    CHECK(tokenizer_load("world", NULL, &(tokenizer *){0}, (char[64]){0}, 64) < 0, "world without a file");
    static const struct { const char *line, *want; } cases[] = {
        {"300 'abc 3\n", "w.txt:257: token 300: unterminated literal"},
        {"300 'ab' 3\n", "w.txt:257: token 300 is 2 bytes but the line says 3"},
        {"300 abc 3\n", "w.txt:257: token 300: expected a Python string or bytes literal"},
        {"x 'ab' 2\n", "w.txt:257: expected `ID REPR LEN`"},
        {"300 'ab'\n", "w.txt:257: expected ' LEN' after the literal"},
        {"300 'ab' 2x\n", "w.txt:257: the length field must be a decimal number"},
        {"300 '\\x4' 1\n", "w.txt:257: token 300: bad \\x escape"},
        {"300 b'\xc3\xa9' 2\n", "w.txt:257: token 300: non-ASCII character in a bytes literal"},
        {"300 '\xff' 1\n", "w.txt:257: token 300: invalid UTF-8"},
        {"300 '\\ud800' 3\n", "w.txt:257: token 300: escape is not a Unicode scalar value"},
        {"300 '' 0\n", "w.txt:257: token 300 is empty"},
        {"0 'ab' 2\n", "w.txt:257: id 0 is reserved"},
        {"5 'ab' 2\n", "w.txt:257: token id 5 appears twice"},
        {"300 'a' 1\n", "w.txt:257: token 300 has the same bytes as token 98"},
        {"300 '\\N{BULLET}' 3\n", "w.txt:257: token 300: \\N{...} escapes are not supported"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(buf, sizeof buf, "%s%s", all, cases[i].line);
        char p[256];
        snprintf(p, sizeof p, "%s", write_file("w.txt", buf));
        expect_error("world", p, cases[i].want, NULL);
    }
    /* A missing byte: drop line 33 (byte 0x20). */
    char *l33 = strstr(all, "33 b'\\x20' 1\n");
    memmove(l33, l33 + 13, strlen(l33 + 13) + 1);
    char p[256];
    snprintf(p, sizeof p, "%s", write_file("w.txt", all));
    expect_error("world", p, "no token for the single byte 0x20", NULL);
    snprintf(p, sizeof p, "%s", write_file("empty.txt", "\n\n"));
    expect_error("world", p, "empty.txt: no tokens", NULL);
}

/* A vocabulary without tokens for the 13 bytes valid UTF-8 never holds
 * (0xC0, 0xC1, 0xF5-0xFF; GPT-NeoX-20B's file is one) loads, and invalid
 * UTF-8 is then read as Hugging Face's string input would have it: each
 * maximal ill-formed subpart becomes U+FFFD (EF BF BD) before tokenizing. */
static void bpe_missing_bytes(void) {
    json_t *j = bpe_json(EXTRA, 9, MERGES, 8);
    json_t *vocab = json_object_get(json_object_get(j, "model"), "vocab");
    for (int b = 0; b < 256; b++) {
        if (!(b == 0xC0 || b == 0xC1 || b >= 0xF5)) continue;
        char c[4];
        byte_char(b, c);
        json_object_del(vocab, c);
    }
    tokenizer *t = load_json(j, "nobytes.json");
    json_decref(j);
    CHECK(t, "a vocabulary without 0xC0, 0xC1, 0xF5-0xFF loads");
    if (!t) return;
    enum { R0 = 0xEF, R1 = 0xBF, R2 = 0xBD };   /* U+FFFD's bytes, one token each here */
    EXPECT(t, "a\xC0" "b", 'a', R0, R1, R2, 'b');
    EXPECT(t, "\xC0\xAF", R0, R1, R2, R0, R1, R2);              /* overlong: two subparts */
    EXPECT(t, "x\xE4\xB8" "y", 'x', R0, R1, R2, 'y');           /* a truncated character: one */
    EXPECT(t, "\xF0\x9F\x91", R0, R1, R2);                      /* truncated at the end, final */
    EXPECT(t, "\xED\xA0\x80", R0, R1, R2, R0, R1, R2, R0, R1, R2);   /* a surrogate: three */
    EXPECT(t, "\xFF\xFE", R0, R1, R2, R0, R1, R2);
    EXPECT(t, "\x80", R0, R1, R2);                               /* a lone continuation byte */
    EXPECT(t, "\xC3\xA9 the", T_E_ACUTE, T_SP_THE);             /* valid text is untouched */
    /* Streaming: an incomplete character at the end is held back, not
     * replaced, and every split gives the whole text's tokens. */
    toks r = {0};
    size_t used = 0;
    CHECK(tokenizer_encode(t, (const uint8_t *)"ab\xE4\xB8", 4, 0, &r.v, &r.n, &r.cap, &used) == 0 && used <= 2,
          "an incomplete character is held back (used %zu)", used);
    free(r.v);
    static const char mix[] = "he\xC0llo \xE4\xB8\xAD\xE4\xB8 x\xFF\xF5 \xF0\x9F\x91\x8D\xF0\x9F y\xC1\x80<|end|>\xFE";
    check_streaming(t, "missing bytes", (const uint8_t *)mix, sizeof mix - 1);
    /* Decoding gives the replaced text back. */
    toks a = enc(t, "q\xC0", 2);
    uint8_t out[16];
    size_t o = 0;
    for (size_t i = 0; a.n != (size_t)-1 && i < a.n; i++) {
        size_t bl = 0;
        const uint8_t *b = tokenizer_token_bytes(t, a.v[i], &bl);
        if (b && o + bl <= sizeof out) { memcpy(out + o, b, bl); o += bl; }
    }
    CHECK(o == 4 && !memcmp(out, "q\xEF\xBF\xBD", 4), "decodes to q U+FFFD (%zu bytes)", o);
    free(a.v);
    tokenizer_free(t);
}

/* The genuine GPT-NeoX-20B tokenizer.json (RWKV-4 Pile/Raven), committed
 * gzipped: it loads, and ids equal those of Hugging Face's tokenizers.js
 * (tests/test_tokenizer_npm.py compares whole corpora; these few are its
 * output, pinned here so the check runs without node). */
static void bpe_neox_genuine(void) {
    char cmd[768], line[128] = "";
    const char *p = tmp_path("20B_tokenizer.json");
    char path[256];
    snprintf(path, sizeof path, "%s", p);
    snprintf(cmd, sizeof cmd, "gzip -dc tests/fixtures/tokenizer/20B_tokenizer.json.gz > %s && md5sum %s", path, path);
    FILE *f = popen(cmd, "r");
    CHECK(f && fgets(line, sizeof line, f), "gunzip the fixture");
    if (f) pclose(f);
    CHECK(!strncmp(line, "55634e54c40440d3639fc80ef8e7bdd9", 32), "the genuine file (md5 %.32s)", line);
    tokenizer *t = NULL;
    char err[512];
    CHECK(tokenizer_load("bpe", path, &t, err, sizeof err) == 0, "loads: %s", err);
    if (!t) return;
    CHECK(tokenizer_vocab_size(t) == 50277, "vocab %d", tokenizer_vocab_size(t));
    const char *sp = NULL;
    CHECK(tokenizer_special_count(t) == 2 && tokenizer_special(t, 0, &sp) == 0 && !strcmp(sp, "<|endoftext|>"),
          "specials <|endoftext|>, <|padding|>");
    /* NFC (e + U+0301 is é), added space runs, the special, contractions. */
    EXPECT(t, "Hello, world! \xC3\xBCn\xC3\xAF" "c\xC3\xB6" "d\xC3\xA9 \xE4\xBD\xA0\xE5\xA5\xBD e\xCC\x81 x  <|endoftext|>      end's 1234",
           12092, 13, 1533, 2, 15028, 79, 12589, 68, 25873, 860, 209, 24553, 34439, 3974, 1269, 50276, 0, 50272, 423,
           434, 1249, 1706);
    /* Invalid UTF-8: the ids HF gives for "a\uFFFD\uFFFD b \uFFFD\uFFFD x\uFFFD y". */
    EXPECT(t, "a\xC0\xC1 b \xFF\xF5 x\xE4\xB8 y", 66, 42481, 270, 16141, 19675, 21478, 1269, 21478, 340);
    static const char text[] = "The quick brown fox \xE2\x80\x94 jumps!\n\n  \t\xF0\x9F\x98\x80 <|padding|>42";
    CHECK(round_trips(t, (const uint8_t *)text, sizeof text - 1), "round trip");
    check_streaming(t, "neox", (const uint8_t *)text, sizeof text - 1);
    tokenizer_free(t);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/lind_tok_XXXXXX");
    if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
    RUN(bytes_kind);
    RUN(bpe_merges_by_rank);
    RUN(bpe_pre_tokenizer);
    RUN(bpe_added_tokens);
    RUN(bpe_options);
    RUN(bpe_streaming);
    RUN(bpe_long_runs);
    RUN(world_kind);
    RUN(round_trip_all_kinds);
    RUN(bpe_missing_bytes);
    RUN(bpe_neox_genuine);
    RUN(bpe_malformed);
    RUN(world_malformed);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) {}
    return check_exit();
}
