/* TEMPORARY (lead's seam work; replaced by the tokenizer helper's module):
 * the bytes kind only. */
#include "recurrent/tokenizer.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
struct tokenizer { int dummy; };
static uint8_t tb[256];
int tokenizer_load(const char *kind, const char *path, tokenizer **out, char *err, size_t errlen) {
    (void)path;
    if (strcmp(kind, "bytes")) { snprintf(err, errlen, "tokenizer %s not built yet", kind); return -EINVAL; }
    for (int i = 0; i < 256; i++) tb[i] = (uint8_t)i;
    *out = calloc(1, sizeof **out);
    return *out ? 0 : -ENOMEM;
}
void tokenizer_free(tokenizer *t) { free(t); }
const char *tokenizer_kind_name(const tokenizer *t) { (void)t; return "bytes"; }
int tokenizer_vocab_size(const tokenizer *t) { (void)t; return 256; }
int tokenizer_encode(const tokenizer *t, const uint8_t *text, size_t len, int final, int32_t **toks, size_t *ntoks,
                     size_t *cap, size_t *consumed) {
    (void)t; (void)final;
    if (*ntoks + len > *cap) {
        size_t nc = (*ntoks + len) * 2 + 16;
        int32_t *n = realloc(*toks, nc * sizeof *n);
        if (!n) return -ENOMEM;
        *toks = n; *cap = nc;
    }
    for (size_t i = 0; i < len; i++) (*toks)[(*ntoks)++] = text[i];
    *consumed = len;
    return 0;
}
const uint8_t *tokenizer_token_bytes(const tokenizer *t, int32_t id, size_t *len) {
    (void)t;
    if (id < 0 || id > 255) { *len = 0; return NULL; }
    *len = 1;
    return &tb[id];
}
int tokenizer_special_count(const tokenizer *t) { (void)t; return 0; }
int32_t tokenizer_special(const tokenizer *t, int i, const char **text) { (void)t; (void)i; *text = NULL; return -1; }
