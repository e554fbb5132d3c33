/* tests/fuzz_transcript.c — libFuzzer driver for the transcript decoder
 * (transcript_decode, state/transcript.h): bytes read back from the store.
 *
 * Invariants: no crash, leak or UB; a refusal is -EINVAL with a message and
 * leaves the transcript as it was; an accepted input gives entries within
 * the limit, none empty, no two neighbours of one role, and its encoding
 * decodes to the same entries. The limit comes from the first byte (0..255
 * bytes, or the default 4 KiB when it is 255), so trimming is exercised. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "state/transcript.h"

static int same(const transcript *a, const transcript *b)
{
    if (transcript_count(a) != transcript_count(b)) return 0;
    for (size_t i = 0; i < transcript_count(a); i++) {
        transcript_role ra, rb;
        const uint8_t *pa, *pb;
        size_t la, lb;
        transcript_entry_at(a, i, &ra, &pa, &la);
        transcript_entry_at(b, i, &rb, &pb, &lb);
        if (ra != rb || la != lb || memcmp(pa, pb, la) != 0) return 0;
    }
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    size_t limit = data[0] == 255 ? TRANSCRIPT_DEFAULT_LIMIT : data[0];
    transcript t, before;
    if (transcript_init(&t, limit) != 0 || transcript_init(&before, limit) != 0) abort();
    /* Something already there, to see that a refusal leaves it alone. */
    transcript_append(&t, TRANSCRIPT_IN, "prior", 5);
    transcript_append(&before, TRANSCRIPT_IN, "prior", 5);
    char err[256] = "";
    int rc = transcript_decode(&t, data + 1, size - 1, err, sizeof err);
    if (rc == 0) {
        size_t total = 0;
        for (size_t i = 0; i < transcript_count(&t); i++) {
            transcript_role r;
            const uint8_t *p;
            size_t l;
            if (transcript_entry_at(&t, i, &r, &p, &l) != 0) abort();
            if (l == 0 || (r != TRANSCRIPT_IN && r != TRANSCRIPT_OUT)) abort();
            if (i > 0) {
                transcript_role pr;
                const uint8_t *pp;
                size_t pl;
                transcript_entry_at(&t, i - 1, &pr, &pp, &pl);
                if (pr == r) abort();
            }
            total += l;
        }
        if (total > limit) abort();
        uint8_t *enc = NULL;
        size_t elen = 0;
        if (transcript_encode(&t, &enc, &elen) != 0) abort();
        transcript back;
        if (transcript_init(&back, limit) != 0) abort();
        if (transcript_decode(&back, enc, elen, err, sizeof err) != 0 || !same(&t, &back)) abort();
        transcript_free(&back);
        free(enc);
    } else {
        if (rc != -EINVAL || !err[0]) abort();
        if (!same(&t, &before)) abort();
    }
    transcript_free(&t);
    transcript_free(&before);
    return 0;
}
