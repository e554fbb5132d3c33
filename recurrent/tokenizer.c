/* recurrent/tokenizer.c — the tokenizer seam: the table of kinds, dispatch
 * to the kind's functions, the bounded stream tail (TOKENIZER_TAIL_MAX), and
 * the "bytes" kind (token = byte value, vocab 256, nothing held back). The
 * "bpe" and "world" kinds live in tokenizer_bpe.c and tokenizer_world.c. */
#include "recurrent/tokenizer.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "recurrent/errmsg.h"

extern const tokenizer_kind tokenizer_kind_bpe;
extern const tokenizer_kind tokenizer_kind_world;

struct tokenizer {
    const tokenizer_kind *kind;
    void *priv;
};

int tokenizer_push(int32_t **toks, size_t *ntoks, size_t *cap, int32_t id)
{
    if (*ntoks == *cap) {
        size_t nc = *cap ? *cap * 2 : 256;
        int32_t *n = realloc(*toks, nc * sizeof *n);
        if (!n) return -ENOMEM;
        *toks = n;
        *cap = nc;
    }
    (*toks)[(*ntoks)++] = id;
    return 0;
}

/* ---- "bytes": one token per byte, exactly the shipped model's scheme ---- */
#define B4(n) n, n + 1, n + 2, n + 3
#define B16(n) B4(n), B4(n + 4), B4(n + 8), B4(n + 12)
#define B64(n) B16(n), B16(n + 16), B16(n + 32), B16(n + 48)
static const uint8_t byte_values[256] = {B64(0), B64(64), B64(128), B64(192)};   /* [b] = b */

static int bytes_load(const char *path, void **priv, char *err, size_t errlen)
{
    if (path && *path)
        return errmsg_set(-EINVAL, err, errlen, "tokenizer kind \"bytes\" takes no file (got \"%s\")", path);
    *priv = (void *)byte_values;   /* never written through */
    return 0;
}
static void bytes_free(void *priv) { (void)priv; }
static int bytes_vocab_size(const void *priv) { (void)priv; return 256; }
static int bytes_encode(const void *priv, const uint8_t *text, size_t len, int final,
                        int32_t **toks, size_t *ntoks, size_t *cap, size_t *consumed)
{
    (void)priv; (void)final;
    *consumed = 0;
    if (*cap - *ntoks < len) {   /* one realloc, not one per byte */
        size_t nc = *ntoks + len;
        int32_t *n = realloc(*toks, nc * sizeof *n);
        if (!n) return -ENOMEM;
        *toks = n;
        *cap = nc;
    }
    for (size_t i = 0; i < len; i++) (*toks)[(*ntoks)++] = text[i];
    *consumed = len;   /* a byte's token never depends on what follows */
    return 0;
}
static const uint8_t *bytes_token_bytes(const void *priv, int32_t id, size_t *len)
{
    const uint8_t *b = priv;
    if (id < 0 || id > 255) { *len = 0; return NULL; }
    *len = 1;
    return b + id;
}
static int bytes_special_count(const void *priv) { (void)priv; return 0; }
static int32_t bytes_special(const void *priv, int i, const char **text)
{
    (void)priv; (void)i;
    if (text) *text = NULL;
    return -1;
}

static const tokenizer_kind tokenizer_kind_bytes = {
    "bytes", bytes_load, bytes_free, bytes_vocab_size, bytes_encode,
    bytes_token_bytes, bytes_special_count, bytes_special, NULL,
};

static const tokenizer_kind *const kinds[] = {&tokenizer_kind_bytes, &tokenizer_kind_bpe, &tokenizer_kind_world};
#define NKINDS (sizeof kinds / sizeof kinds[0])

const tokenizer_kind *tokenizer_find_kind(const char *name)
{
    for (size_t i = 0; name && i < NKINDS; i++)
        if (!strcmp(kinds[i]->name, name)) return kinds[i];
    return NULL;
}

const char *tokenizer_kind_names(char *buf, size_t len)
{
    if (!buf || !len) return buf;
    buf[0] = 0;
    size_t off = 0;
    for (size_t i = 0; i < NKINDS && off < len; i++) {
        int n = snprintf(buf + off, len - off, "%s%s", i ? ", " : "", kinds[i]->name);
        if (n < 0) break;
        off += (size_t)n;
    }
    return buf;
}

int tokenizer_load(const char *kind, const char *path, tokenizer **out, char *err, size_t errlen)
{
    *out = NULL;
    const tokenizer_kind *k = tokenizer_find_kind(kind);
    if (!k) {
        char names[64];
        return errmsg_set(-EINVAL, err, errlen, "unknown tokenizer kind \"%s\" (known: %s)",
                          kind ? kind : "(null)", tokenizer_kind_names(names, sizeof names));
    }
    if (!path && strcmp(k->name, "bytes"))
        return errmsg_set(-EINVAL, err, errlen, "tokenizer kind \"%s\" needs a file", k->name);
    tokenizer *t = calloc(1, sizeof *t);
    if (!t) return errmsg_set(-ENOMEM, err, errlen, "out of memory");
    t->kind = k;
    int rc = k->load(path, &t->priv, err, errlen);
    if (rc < 0) {
        free(t);
        return rc;
    }
    *out = t;
    return 0;
}

void tokenizer_free(tokenizer *t)
{
    if (!t) return;
    t->kind->free(t->priv);
    free(t);
}

const char *tokenizer_kind_name(const tokenizer *t) { return t->kind->name; }
int tokenizer_vocab_size(const tokenizer *t) { return t->kind->vocab_size(t->priv); }

int tokenizer_encode(const tokenizer *t, const uint8_t *text, size_t len, int final,
                     int32_t **toks, size_t *ntoks, size_t *cap, size_t *consumed)
{
    *consumed = 0;
    int rc = t->kind->encode(t->priv, text, len, final, toks, ntoks, cap, consumed);
    if (rc < 0 || final || len - *consumed <= TOKENIZER_TAIL_MAX) return rc;
    /* The undecided stretch outgrew the bound: tokenize it as if the text
     * ended TOKENIZER_TAIL_MAX bytes before its end (moved back to the start
     * of a UTF-8 character so no character is cut). Exactness across the
     * split no longer holds for this stretch; it is bounded memory instead. */
    size_t cut = len - TOKENIZER_TAIL_MAX;
    for (int back = 0; back < 3 && cut > *consumed && (text[cut] & 0xC0) == 0x80; back++) cut--;
    if (cut <= *consumed) cut = len - TOKENIZER_TAIL_MAX;
    size_t used = 0;
    rc = t->kind->encode(t->priv, text + *consumed, cut - *consumed, 1, toks, ntoks, cap, &used);
    if (rc < 0) return rc;
    *consumed = cut;
    return 0;
}

const uint8_t *tokenizer_token_bytes(const tokenizer *t, int32_t id, size_t *len)
{
    size_t l = 0;
    const uint8_t *p = t->kind->token_bytes(t->priv, id, &l);
    *len = p ? l : 0;
    return p;
}

int tokenizer_bos(const tokenizer *t, int32_t *id)
{
    *id = -1;
    return t->kind->bos ? t->kind->bos(t->priv, id) : -1;
}

int tokenizer_special_count(const tokenizer *t) { return t->kind->special_count(t->priv); }

int32_t tokenizer_special(const tokenizer *t, int i, const char **text)
{
    if (i < 0 || i >= tokenizer_special_count(t)) {
        if (text) *text = NULL;
        return -1;
    }
    return t->kind->special(t->priv, i, text);
}

/* ---- literal (added/special token) matching shared by the kinds ---------- */

/* The longest literal matching at text[i..len), or -1. */
static int literal_at(const tokenizer_literals *L, const uint8_t *text, size_t len, size_t i)
{
    int best = -1;
    for (int k = 0; k < L->n; k++)
        if (L->len[k] <= len - i && (best < 0 || L->len[k] > L->len[best]) &&
            !memcmp(text + i, L->text[k], L->len[k]))
            best = k;
    return best;
}

/* The first q >= from where text[q..len) is a proper prefix of a literal
 * (so more text could complete a literal there), or len. */
static size_t literal_pending(const tokenizer_literals *L, const uint8_t *text, size_t len, size_t from)
{
    size_t q = len > L->maxlen ? len - L->maxlen + 1 : 0;
    if (q < from) q = from;
    for (; q < len; q++) {
        if (!L->first[text[q]]) continue;
        for (int k = 0; k < L->n; k++)
            if (L->len[k] > len - q && !memcmp(text + q, L->text[k], len - q)) return q;
    }
    return len;
}

int tokenizer_encode_literals(const tokenizer_literals *L, tokenizer_segment_fn seg, const void *priv,
                              const uint8_t *text, size_t len, int final,
                              int32_t **toks, size_t *ntoks, size_t *cap, size_t *consumed)
{
    size_t p = 0, used;
    int rc;
    *consumed = 0;
    for (;;) {
        /* Next complete literal at or after p (leftmost, then longest). */
        size_t s = p;
        int which = -1;
        if (L && L->n)
            for (; s < len; s++)
                if (L->first[text[s]] && (which = literal_at(L, text, len, s)) >= 0) break;
        size_t hold = final || !L || !L->n ? len : literal_pending(L, text, len, p);
        if (which >= 0 && s < hold) {
            /* A literal that no later text can lengthen or move: the stretch
             * before it is complete. */
            if ((rc = seg(priv, text + p, s - p, 1, toks, ntoks, cap, &used)) < 0) return rc;
            if ((rc = tokenizer_push(toks, ntoks, cap, L->id[which])) < 0) return rc;
            p = s + L->len[which];
            *consumed = p;
            continue;
        }
        if ((rc = seg(priv, text + p, hold - p, final, toks, ntoks, cap, &used)) < 0) return rc;
        *consumed = p + used;
        return 0;
    }
}
