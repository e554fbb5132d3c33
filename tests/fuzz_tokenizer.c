/* tests/fuzz_tokenizer.c — libFuzzer driver for the tokenizer loaders
 * (tokenizer_load, recurrent/tokenizer.h): a model directory's
 * tokenizer.json ("bpe") or RWKV World vocabulary file ("world"). The
 * first input byte picks the kind (even: bpe, odd: world), the rest is the
 * file. Seeds (tests/fuzz_seeds/fuzz_tokenizer) hold a small valid file of
 * each kind. Invariants: no crash, leak or UB; a refusal has a message; a
 * loaded tokenizer encodes a fixed text and the input itself, streaming
 * and whole, into ids below its vocabulary size whose bytes join back to
 * the text, or (a lossy vocabulary, invalid UTF-8 text) to well-formed
 * UTF-8 (the seam's contract). */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>
#include "recurrent/tokenizer.h"
#include "tests/fuzz_common.h"

/* Well-formed UTF-8 (no overlongs, surrogates or code points past U+10FFFF). */
static int utf8_valid(const uint8_t *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t k = utf8proc_iterate(s + i, (utf8proc_ssize_t)(n - i), &cp);
        if (k <= 0) return 0;
        i += (size_t)k;
    }
    return 1;
}

static void roundtrip(const tokenizer *t, const uint8_t *text, size_t len)
{
    int32_t *toks = NULL;
    size_t ntoks = 0, cap = 0, used = 0;
    if (tokenizer_encode(t, text, len, 1, &toks, &ntoks, &cap, &used) != 0) {
        free(toks);
        return;   /* -ENOMEM: allowed */
    }
    if (used != len) abort();
    /* Each ill-formed subpart becomes at most one U+FFFD (3 bytes). */
    size_t backcap = 3 * len + 1, pos = 0;
    uint8_t *back = malloc(backcap);
    int vs = tokenizer_vocab_size(t);
    for (size_t i = 0; i < ntoks; i++) {
        if (toks[i] < 0 || toks[i] >= vs) abort();
        size_t bl = 0;
        const uint8_t *bp = tokenizer_token_bytes(t, toks[i], &bl);
        if (!bp || pos + bl > backcap) abort();
        memcpy(back + pos, bp, bl);
        pos += bl;
    }
    /* The tokens join back to the text; a vocabulary lacking symbols for
     * bytes valid UTF-8 never holds (the genuine NeoX file) may instead see
     * invalid UTF-8 as U+FFFD, so its join is well-formed UTF-8. Valid
     * UTF-8 always round-trips exactly. */
    int same = pos == len && memcmp(back, text, len) == 0;
    if (!same && (utf8_valid(text, len) || !utf8_valid(back, pos))) abort();
    /* Streaming: the held-back tail is bounded. */
    size_t n2 = 0, used2 = 0;
    if (tokenizer_encode(t, text, len, 0, &toks, &n2, &cap, &used2) == 0 &&
        (used2 > len || len - used2 > TOKENIZER_TAIL_MAX + 16))
        abort();
    free(back);
    free(toks);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    const char *kind = data[0] & 1 ? "world" : "bpe";
    tokenizer *t = NULL;
    char err[512] = "";
    int rc = tokenizer_load(kind, fuzz_file(data + 1, size - 1), &t, err, sizeof err);
    if (rc == 0) {
        static const char text[] = "Hello, world! \xc3\xa9t\xc3\xa9 \xe4\xb8\xad 12345  \n\ttabs<|endoftext|>\xff";
        roundtrip(t, (const uint8_t *)text, sizeof text - 1);
        roundtrip(t, data + 1, size - 1 > 512 ? 512 : size - 1);
        tokenizer_free(t);
    } else if (!err[0]) {
        abort();
    }
    return 0;
}
