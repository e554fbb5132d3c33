/* tests/fuzz_export.c — libFuzzer driver for the session export decoder
 * (store_export_decode, state/store.h): the file `lindctl import` reads,
 * which anyone can hand over.
 *
 * The valid base is one encoded export (a name, a token count, state and
 * transcript bytes); inputs follow tests/fuzz_common.h, with the trailing
 * xxh64 recomputed on request. Invariants: no crash, leak or UB; a refusal
 * is -EINVAL with a message; an accepted export has a name the store takes,
 * sections inside the input, and encodes back to exactly the input bytes. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>
#include "state/le.h"
#include "state/store.h"
#include "tests/fuzz_common.h"

static uint8_t *base;
static size_t blen;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc; (void)argv;
    static const uint8_t st[40] = "LINDST state bytes of some session.....";
    static const uint8_t tr[] = { 1, 0, 5, 'h', 'e', 'l', 'l', 'o', 1, 3, 'y', 'e', 's' };
    store_record r = { "alice/notes", st, sizeof st, tr, sizeof tr, 42 };
    char err[256];
    if (store_export_encode(&r, &base, &blen, err, sizeof err) != 0) abort();
    fuzz_maybe_write_seed(base, blen);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *b;
    int fix;
    size_t n = fuzz_bytes(data, size, base, blen, &b, &fix);
    if (fix && n >= 8) le_put64(b + n - 8, XXH64(b, n - 8, 0));
    store_record r;
    char name[STORE_NAME_MAX + 1], err[512] = "";
    int rc = store_export_decode(b, n, &r, name, err, sizeof err);
    if (rc == 0) {
        if (store_name_check(r.name, NULL, 0) != 0) abort();
        if (r.state_len > n || r.transcript_len > n) abort();
        if (r.state_len && (r.state < b || r.state + r.state_len > b + n)) abort();
        if (r.transcript_len && (r.transcript < b || r.transcript + r.transcript_len > b + n)) abort();
        uint8_t *again = NULL;
        size_t alen = 0;
        if (store_export_encode(&r, &again, &alen, err, sizeof err) != 0) abort();
        if (alen != n || memcmp(again, b, n) != 0) abort();
        free(again);
    } else if (rc != -EBADMSG || !err[0]) {
        abort();
    }
    free(b);
    return 0;
}
