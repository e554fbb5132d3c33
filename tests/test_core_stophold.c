/* tests/test_core_stophold.c — the streamed reply's holdback
 * (recurrent/stophold.h), HTTP's streamed text and lindctl chat's alike:
 *   - the held tail is the longest end that begins a stop string (a whole
 *     stop string included), over several stop strings and ones that
 *     overlap themselves, and no earlier byte could begin one (against a
 *     brute force over random texts);
 *   - a UTF-8 character split at the end waits, bytes that are not UTF-8
 *     do not, and shown = the UTF-8 boundary before the stop tail;
 *   - stream a text a byte at a time, showing what may be shown: nothing
 *     of the first stop string is ever shown, and the reply cut before it is
 *     all shown by the time the stop string is complete;
 *   - stophold_add refuses an empty string, one over STOP_MAX_LEN bytes and
 *     a string past STOP_MAX. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "recurrent/stophold.h"
#include "tests/check.h"

static size_t tail_of(const char *text, const char *const *stops, int n)
{
    stophold h = { 0 };
    for (int i = 0; i < n; i++) stophold_add(&h, stops[i], strlen(stops[i]));
    return stophold_tail(&h, (const uint8_t *)text, strlen(text));
}

static void tail_is_longest_stop_start(void)
{
    const char *user[] = { "\n\nUser:" };
    CHECK(tail_of("Hello", user, 1) == 0, "no stop begins at the end");
    CHECK(tail_of("Hello\n", user, 1) == 1, "one byte of it");
    CHECK(tail_of("Hello\n\nUs", user, 1) == 4, "four bytes of it");
    CHECK(tail_of("Hello\n\nUser:", user, 1) == 7, "a whole stop string waits");
    CHECK(tail_of("Hello\n\nUser:x", user, 1) == 0, "a stop string passed (found by the caller) is not held");
    CHECK(tail_of("", user, 1) == 0, "empty text");
    const char *two[] = { "abc", "bcd" };
    CHECK(tail_of("xxab", two, 2) == 2, "ab begins abc");
    CHECK(tail_of("xxabc", two, 2) == 3, "abc whole beats bc of bcd");
    CHECK(tail_of("xbc", two, 2) == 2, "bc begins bcd");
    const char *self[] = { "aab" };
    CHECK(tail_of("xaa", self, 1) == 2, "aa begins aab");
    CHECK(tail_of("xa", self, 1) == 1, "a begins aab");
    CHECK(tail_of("aaa", self, 1) == 2, "the longest end, not the whole text");
    CHECK(tail_of("anything", NULL, 0) == 0, "no stop strings hold nothing");
}

/* The longest k <= min(len, n) with p[n-k..n) == s[0..k), over all stops. */
static size_t brute_tail(const uint8_t *p, size_t n, const stophold *h)
{
    size_t best = 0;
    for (int i = 0; i < h->n; i++)
        for (size_t k = 1; k <= n && k <= h->len[i]; k++)
            if (!memcmp(p + n - k, h->s[i], k) && k > best) best = k;
    return best;
}

static void tail_matches_brute_force(void)
{
    srand(7);
    int bad = 0;
    for (int trial = 0; trial < 20000 && !bad; trial++) {
        uint8_t text[80], stops[STOP_MAX][STOP_MAX_LEN];
        size_t n = (size_t)(rand() % 80);
        for (size_t i = 0; i < n; i++) text[i] = (uint8_t)('a' + rand() % 3);
        stophold h = { 0 };
        int ns = rand() % (STOP_MAX + 1);
        for (int s = 0; s < ns; s++) {
            size_t L = 1 + (size_t)(rand() % (trial % 2 ? 6 : STOP_MAX_LEN));
            for (size_t i = 0; i < L; i++) stops[s][i] = (uint8_t)('a' + rand() % 3);
            stophold_add(&h, stops[s], L);
        }
        size_t got = stophold_tail(&h, text, n), want = brute_tail(text, n, &h);
        if (got != want) {
            CHECK(0, "trial %d: tail %zu, want %zu (%zu bytes, %d stops)", trial, got, want, n, ns);
            bad = 1;
        }
    }
}

static void utf8_split_waits(void)
{
    CHECK(stophold_utf8((const uint8_t *)"abc", 3) == 3, "ASCII");
    CHECK(stophold_utf8((const uint8_t *)"a\xC3", 2) == 1, "a 2-byte lead alone");
    CHECK(stophold_utf8((const uint8_t *)"a\xC3\xA9", 3) == 3, "é whole");
    CHECK(stophold_utf8((const uint8_t *)"a\xE2\x82", 3) == 1, "€ missing a byte");
    CHECK(stophold_utf8((const uint8_t *)"a\xE2\x82\xAC", 4) == 4, "€ whole");
    CHECK(stophold_utf8((const uint8_t *)"\xF0\x9F\x98", 3) == 0, "a 4-byte character missing a byte");
    CHECK(stophold_utf8((const uint8_t *)"\xF0\x9F\x98\x80", 4) == 4, "a 4-byte character whole");
    CHECK(stophold_utf8((const uint8_t *)"a\xFF", 2) == 2, "a byte that is not UTF-8 does not wait");
    CHECK(stophold_utf8((const uint8_t *)"a\x80", 2) == 2, "a stray continuation byte does not wait");
    CHECK(stophold_utf8((const uint8_t *)"", 0) == 0, "empty");
    stophold h = { 0 };
    stophold_add(&h, "\xC3\xA9!", 4);
    CHECK(stophold_shown(&h, (const uint8_t *)"ab\xC3", 3) == 2, "the stop tail holds the lead byte");
    stophold_add(&h, "zz", 2);
    CHECK(stophold_shown(&h, (const uint8_t *)"ab\xE2\x82", 4) == 2, "a split € waits with no stop in it");
    CHECK(stophold_shown(&h, (const uint8_t *)"ab\xE2\x82\xACz", 6) == 5, "the z that may begin zz waits, € goes");
}

static void streamed_never_shows_a_stop(void)
{
    srand(11);
    int bad = 0;
    for (int trial = 0; trial < 5000 && !bad; trial++) {
        uint8_t text[120], stops[3][8];
        size_t n = 1 + (size_t)(rand() % 120);
        for (size_t i = 0; i < n; i++) text[i] = (uint8_t)('a' + rand() % 3);
        stophold h = { 0 };
        for (int s = 0; s < 3; s++) {
            size_t L = 1 + (size_t)(rand() % 8);
            for (size_t i = 0; i < L; i++) stops[s][i] = (uint8_t)('a' + rand() % 3);
            stophold_add(&h, stops[s], L);
        }
        /* Where the first stop string ends, and where it starts. */
        size_t end = SIZE_MAX, start = SIZE_MAX;
        for (size_t e = 1; e <= n && end == SIZE_MAX; e++)
            for (int s = 0; s < 3; s++)
                if (h.len[s] <= e && !memcmp(text + e - h.len[s], h.s[s], h.len[s])) {
                    end = e;
                    if (e - h.len[s] < start) start = e - h.len[s];
                }
        size_t shown = 0;
        for (size_t got = 1; got <= (end == SIZE_MAX ? n : end); got++) {
            size_t may = stophold_shown(&h, text, got);
            if (may > shown) shown = may;
            if (start != SIZE_MAX && shown > start) {
                CHECK(0, "trial %d: %zu bytes shown, the stop string starts at %zu", trial, shown, start);
                bad = 1;
                break;
            }
        }
        if (!bad && start != SIZE_MAX && shown != start) {
            /* The bytes before the stop are shown by the time it is complete
             * unless they could begin another stop string then. */
            size_t t = stophold_tail(&h, text, end);
            CHECK(shown == end - t, "trial %d: %zu shown when the stop ended at %zu (tail %zu)", trial, shown,
                  end, t);
            bad = shown != end - t;
        }
    }
}

static void add_refuses_bad_strings(void)
{
    stophold h = { 0 };
    char big[STOP_MAX_LEN + 1];
    memset(big, 'x', sizeof big);
    CHECK(stophold_add(&h, "", 0) != 0, "an empty stop string");
    CHECK(stophold_add(&h, big, sizeof big) != 0, "a stop string of %d bytes", STOP_MAX_LEN + 1);
    CHECK(stophold_add(&h, big, STOP_MAX_LEN) == 0, "a stop string of %d bytes", STOP_MAX_LEN);
    for (int i = 1; i < STOP_MAX; i++) CHECK(stophold_add(&h, "s", 1) == 0, "stop string %d", i + 1);
    CHECK(stophold_add(&h, "s", 1) != 0, "stop string %d", STOP_MAX + 1);
    CHECK(h.n == STOP_MAX, "%d stop strings held", h.n);
}

int main(void)
{
    RUN(tail_is_longest_stop_start);
    RUN(tail_matches_brute_force);
    RUN(utf8_split_waits);
    RUN(streamed_never_shows_a_stop);
    RUN(add_refuses_bad_strings);
    return check_exit();
}
