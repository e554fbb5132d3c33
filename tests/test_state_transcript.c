/* tests/test_state_transcript.c — the bounded transcript tail: entries,
 * trimming to the last N bytes at character boundaries, the serialized form
 * and its refusals. */
#include "tests/check.h"
#include "state/transcript.h"

#include <errno.h>
#include <string.h>

/* The whole tail as "I:..|O:.." for easy comparison. */
static const char *render(const transcript *t)
{
    static char buf[16384];
    size_t pos = 0;
    for (size_t i = 0; i < transcript_count(t); i++) {
        transcript_role r;
        const uint8_t *b;
        size_t n;
        transcript_entry_at(t, i, &r, &b, &n);
        pos += (size_t)snprintf(buf + pos, sizeof buf - pos, "%s%c:%.*s", i ? "|" : "",
                                r == TRANSCRIPT_IN ? 'I' : 'O', (int)n, (const char *)b);
    }
    buf[pos] = 0;
    return buf;
}

static void entries_merge_by_role(void)
{
    transcript t;
    CHECK(transcript_init(&t, 100) == 0, "init");
    CHECK(transcript_count(&t) == 0, "empty at start");
    transcript_append(&t, TRANSCRIPT_IN, "Hello", 5);
    transcript_append(&t, TRANSCRIPT_IN, ", you", 5);
    transcript_append(&t, TRANSCRIPT_OUT, "h", 1);
    transcript_append(&t, TRANSCRIPT_OUT, "i!", 2);
    transcript_append(&t, TRANSCRIPT_IN, "bye", 3);
    transcript_append(&t, TRANSCRIPT_OUT, "", 0);
    CHECK(transcript_count(&t) == 3, "3 entries, got %zu", transcript_count(&t));
    CHECK(strcmp(render(&t), "I:Hello, you|O:hi!|I:bye") == 0, "got %s", render(&t));
    CHECK(transcript_append(&t, (transcript_role)7, "x", 1) == -EINVAL, "bad role refused");
    CHECK(transcript_entry_at(&t, 3, NULL, NULL, NULL) == -EINVAL, "entry past end refused");
    transcript_free(&t);
}

static void trims_to_last_n_bytes(void)
{
    transcript t;
    transcript_init(&t, 10);
    transcript_append(&t, TRANSCRIPT_IN, "abcdef", 6);
    transcript_append(&t, TRANSCRIPT_OUT, "1234", 4);
    CHECK(strcmp(render(&t), "I:abcdef|O:1234") == 0, "exactly full: %s", render(&t));
    transcript_append(&t, TRANSCRIPT_IN, "XYZ", 3);
    CHECK(strcmp(render(&t), "I:def|O:1234|I:XYZ") == 0, "front cut: %s", render(&t));
    CHECK(t.len == 10, "len %zu", t.len);
    transcript_append(&t, TRANSCRIPT_OUT, "0123456789", 10);
    CHECK(strcmp(render(&t), "O:0123456789") == 0, "whole entries dropped: %s", render(&t));
    transcript_append(&t, TRANSCRIPT_IN, "a very long prompt indeed", 25);
    CHECK(strcmp(render(&t), "I:mpt indeed") == 0,
          "input longer than the limit keeps its tail: %s", render(&t));
    transcript_free(&t);
}

static void default_limit_4k(void)
{
    transcript t;
    transcript_init(&t, TRANSCRIPT_DEFAULT_LIMIT);
    char chunk[100];
    memset(chunk, 'x', sizeof chunk);
    for (int i = 0; i < 1000; i++)
        transcript_append(&t, i % 2 ? TRANSCRIPT_OUT : TRANSCRIPT_IN, chunk, sizeof chunk);
    CHECK(TRANSCRIPT_DEFAULT_LIMIT == 4096, "default is 4 KiB");
    CHECK(t.len == 4096, "kept %zu bytes", t.len);
    size_t sum = 0;
    for (size_t i = 0; i < transcript_count(&t); i++) {
        size_t n;
        transcript_entry_at(&t, i, NULL, NULL, &n);
        sum += n;
    }
    CHECK(sum == 4096, "entries add up to %zu", sum);
    transcript_role last;
    transcript_entry_at(&t, transcript_count(&t) - 1, &last, NULL, NULL);
    CHECK(last == TRANSCRIPT_OUT, "newest entry is the last out");
    transcript_free(&t);
}

static void cut_respects_utf8(void)
{
    transcript t;
    transcript_init(&t, 4);
    /* "é" is C3 A9; "€" is E2 82 AC. */
    transcript_append(&t, TRANSCRIPT_OUT, "a\xC3\xA9\xE2\x82\xAC", 6);
    /* Keeping 4 bytes would start at A9 (a continuation byte): it goes too. */
    CHECK(t.len == 3 && memcmp(t.text, "\xE2\x82\xAC", 3) == 0,
          "tail starts at a character boundary (len %zu)", t.len);
    transcript_append(&t, TRANSCRIPT_IN, "\xE2\x82\xAC\xE2\x82\xAC", 6);
    CHECK(t.len == 3 && transcript_count(&t) == 1, "only whole characters kept (len %zu)", t.len);
    transcript_free(&t);
}

static void zero_limit_keeps_nothing(void)
{
    transcript t;
    CHECK(transcript_init(&t, 0) == 0, "init 0");
    CHECK(transcript_append(&t, TRANSCRIPT_IN, "abc", 3) == 0, "append");
    CHECK(transcript_count(&t) == 0 && t.len == 0, "nothing kept");
    transcript_free(&t);
    CHECK(transcript_init(&t, TRANSCRIPT_LIMIT_MAX + 1) == -EINVAL, "absurd limit refused");
}

static void roundtrip(void)
{
    transcript t, u;
    transcript_init(&t, 4096);
    transcript_init(&u, 4096);
    uint8_t bin[300];
    for (int i = 0; i < 300; i++)
        bin[i] = (uint8_t)(i * 7);
    transcript_append(&t, TRANSCRIPT_IN, "question?", 9);
    transcript_append(&t, TRANSCRIPT_OUT, bin, sizeof bin);
    transcript_append(&t, TRANSCRIPT_IN, "more", 4);
    uint8_t *enc;
    size_t len;
    CHECK(transcript_encode(&t, &enc, &len) == 0, "encode");
    /* version + 3 × (role + varint) + text: compact. */
    CHECK(len == 1 + (1 + 1) + (1 + 2) + (1 + 1) + 9 + 300 + 4, "compact size %zu", len);
    char err[200] = "";
    CHECK(transcript_decode(&u, enc, len, err, sizeof err) == 0, "decode: %s", err);
    CHECK(u.len == t.len && memcmp(u.text, t.text, t.len) == 0, "same bytes");
    CHECK(transcript_count(&u) == 3, "same entries");
    for (size_t i = 0; i < 3; i++) {
        transcript_role a, b;
        size_t na, nb;
        transcript_entry_at(&t, i, &a, NULL, &na);
        transcript_entry_at(&u, i, &b, NULL, &nb);
        CHECK(a == b && na == nb, "entry %zu", i);
    }
    /* A smaller limit on load trims the saved tail. */
    transcript small;
    transcript_init(&small, 6);
    CHECK(transcript_decode(&small, enc, len, err, sizeof err) == 0, "decode small");
    /* bin[298] = 38 '&', bin[299] = 45 '-' */
    CHECK(strcmp(render(&small), "O:&-|I:more") == 0, "trimmed to the newest 6 bytes: %s",
          render(&small));
    transcript_free(&small);
    free(enc);
    /* Empty transcript: zero bytes and the 1-byte form both decode empty. */
    transcript e;
    transcript_init(&e, 10);
    CHECK(transcript_encode(&e, &enc, &len) == 0 && len == 1, "empty encodes to 1 byte");
    CHECK(transcript_decode(&u, enc, len, err, sizeof err) == 0 && transcript_count(&u) == 0,
          "empty decodes empty");
    CHECK(transcript_decode(&u, NULL, 0, err, sizeof err) == 0 && transcript_count(&u) == 0,
          "zero bytes decode empty");
    free(enc);
    transcript_free(&e);
    transcript_free(&t);
    transcript_free(&u);
}

static void refuses_malformed(void)
{
    transcript t;
    transcript_init(&t, 100);
    transcript_append(&t, TRANSCRIPT_IN, "keep", 4);
    char err[200];
    struct { const char *bytes; size_t len; const char *word; } cases[] = {
        { "\x02\x00\x01x", 4, "version" },
        { "\x01\x05\x01x", 4, "role" },
        { "\x01\x00", 2, "truncated length" },
        { "\x01\x00\x80", 3, "truncated length" },
        { "\x01\x00\x05" "ab", 5, "claims 5 bytes" },
        { "\x01\x00\x00", 3, "empty" },
        { "\x01\x00\xff\xff\xff\xff\xff\xff\xff\xff\xff\x7f", 12, "overflows" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        err[0] = 0;
        int rc = transcript_decode(&t, (const uint8_t *)cases[i].bytes, cases[i].len, err, sizeof err);
        CHECK(rc == -EINVAL, "case %zu: rc %d", i, rc);
        CHECK(strstr(err, cases[i].word) != NULL, "case %zu: message '%s' lacks '%s'", i, err,
              cases[i].word);
        CHECK(strcmp(render(&t), "I:keep") == 0, "case %zu: transcript unchanged", i);
    }
    transcript_free(&t);
}

/* Random bytes after a valid version byte: decoded or refused, never
 * anything else, and a decoded tail keeps the transcript's invariants. */
static void random_bytes(void)
{
    uint64_t x = 0x243F6A8885A308D3ull;
    uint8_t buf[64];
    int decoded = 0, broken = 0;
    for (int it = 0; it < 20000; it++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        size_t n = 1 + x % sizeof buf;
        for (size_t i = 0; i < n; i++) {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            /* Mostly small values so roles and lengths are often plausible. */
            buf[i] = (uint8_t)(x % 4 == 0 ? x >> 8 : (x >> 8) % 6);
        }
        buf[0] = TRANSCRIPT_FORMAT_VERSION;
        transcript t;
        transcript_init(&t, 16);
        char err[200];
        int rc = transcript_decode(&t, buf, n, err, sizeof err);
        if (rc == 0) {
            decoded++;
            size_t sum = 0;
            for (size_t i = 0; i < transcript_count(&t); i++) {
                size_t len;
                transcript_entry_at(&t, i, NULL, NULL, &len);
                sum += len;
                if (len == 0)
                    broken++;
            }
            if (sum != t.len || t.len > 16)
                broken++;
        } else if (rc != -EINVAL) {
            broken++;
        }
        transcript_free(&t);
    }
    CHECK(broken == 0, "%d inputs broke an invariant", broken);
    CHECK(decoded > 100, "only %d random inputs decoded: the generator is off", decoded);
}

int main(void)
{
    RUN(entries_merge_by_role);
    RUN(trims_to_last_n_bytes);
    RUN(default_limit_4k);
    RUN(cut_respects_utf8);
    RUN(zero_limit_keeps_nothing);
    RUN(roundtrip);
    RUN(refuses_malformed);
    RUN(random_bytes);
    return check_exit();
}
