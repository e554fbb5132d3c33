/* recurrent/jsonmask.c — see jsonmask.h. */
#include "recurrent/jsonmask.h"
#include "recurrent/sampler.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

struct jsonmask_vocab {
    int       vocab, words;
    const uint8_t **tb;   /* [vocab] each token's bytes (the tokenizer's) */
    uint32_t *tl;         /* [vocab] their lengths */
    int32_t  *ord;        /* [nord] ids with bytes, not end tokens, sorted by bytes */
    uint16_t *lcp;        /* [nord] bytes ord[i] shares with ord[i-1] */
    int       nord;
    uint32_t  maxlen;
    uint64_t *plain;      /* [words] tokens a free string takes as they are */
    size_t    nplain;
    int32_t  *nonplain;   /* [nnonplain] the other tokens with bytes */
    int       nnonplain;
    int32_t  *eos;
    int       neos;
};

typedef struct centry {
    uint64_t  hash, age;
    size_t    keylen, n;
    jsonfsm   key;
    uint64_t *bits;
} centry;

struct jsonmask {
    const jsonmask_vocab *v;
    centry    c[JSONMASK_CACHE];
    int       nc;
    uint64_t  clock, hits, computed;
};

static int cmp_tok(const void *a, const void *b, void *ctx)
{
    const jsonmask_vocab *sort_v = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    uint32_t lx = sort_v->tl[x], ly = sort_v->tl[y], n = lx < ly ? lx : ly;
    int c = memcmp(sort_v->tb[x], sort_v->tb[y], n);
    if (c) return c;
    if (lx != ly) return lx < ly ? -1 : 1;
    return x < y ? -1 : x > y;
}

/* Whether bytes p[0..n) are all plain: 0x20..0x7e but '"' and '\\', or
 * whole well-formed UTF-8 sequences. */
static int plain_bytes(const uint8_t *p, size_t n)
{
    jsonfsm f;
    jsonfsm_init(&f, NULL);
    jsonfsm_feed(&f, '"');
    for (size_t i = 0; i < n; i++) {
        if (p[i] == '"' || p[i] == '\\' || p[i] < 0x20) return 0;
        if (!jsonfsm_feed(&f, p[i])) return 0;
    }
    return jsonfsm_is_free_string(&f);
}

void jsonmask_vocab_free(jsonmask_vocab *v)
{
    if (!v) return;
    free(v->tb);
    free(v->tl);
    free(v->ord);
    free(v->lcp);
    free(v->plain);
    free(v->nonplain);
    free(v->eos);
    free(v);
}

typedef const uint8_t *(*bytes_fn)(const void *ctx, int32_t id, size_t *len);

static const uint8_t *tok_bytes(const void *ctx, int32_t id, size_t *len)
{
    return tokenizer_token_bytes(ctx, id, len);
}

typedef struct arrays { const uint8_t *const *b; const size_t *l; } arrays;
static const uint8_t *arr_bytes(const void *ctx, int32_t id, size_t *len)
{
    const arrays *a = ctx;
    *len = a->b[id] ? a->l[id] : 0;
    return a->b[id];
}

static int vocab_build(bytes_fn fn, const void *ctx, int vocab, const int32_t *eos, int neos, jsonmask_vocab **out,
                       char *err, size_t errlen);

int jsonmask_vocab_new(const tokenizer *t, int vocab, const int32_t *eos, int neos, jsonmask_vocab **out,
                       char *err, size_t errlen)
{
    return vocab_build(tok_bytes, t, vocab, eos, neos, out, err, errlen);
}

int jsonmask_vocab_from(int vocab, const uint8_t *const *bytes, const size_t *lens, const int32_t *eos, int neos,
                        jsonmask_vocab **out, char *err, size_t errlen)
{
    arrays a = { bytes, lens };
    return vocab_build(arr_bytes, &a, vocab, eos, neos, out, err, errlen);
}

static int vocab_build(bytes_fn fn, const void *ctx, int vocab, const int32_t *eos, int neos, jsonmask_vocab **out,
                       char *err, size_t errlen)
{
    *out = NULL;
    jsonmask_vocab *v = calloc(1, sizeof *v);
    if (!v) goto oom;
    v->vocab = vocab;
    v->words = (vocab + 63) / 64;
    v->tb = calloc((size_t)vocab, sizeof *v->tb);
    v->tl = calloc((size_t)vocab, sizeof *v->tl);
    v->ord = malloc((size_t)vocab * sizeof *v->ord);
    v->lcp = calloc((size_t)vocab, sizeof *v->lcp);
    v->plain = calloc((size_t)v->words, sizeof *v->plain);
    v->nonplain = malloc((size_t)vocab * sizeof *v->nonplain);
    v->eos = malloc((size_t)(neos > 0 ? neos : 1) * sizeof *v->eos);
    if (!v->tb || !v->tl || !v->ord || !v->lcp || !v->plain || !v->nonplain || !v->eos) goto oom;
    for (int i = 0; i < neos; i++)
        if (eos[i] >= 0 && eos[i] < vocab) v->eos[v->neos++] = eos[i];
    for (int32_t id = 0; id < vocab; id++) {
        int is_eos = 0;
        for (int i = 0; i < v->neos; i++) is_eos |= v->eos[i] == id;
        size_t n = 0;
        const uint8_t *b = fn(ctx, id, &n);
        if (is_eos || !b || !n || n > 65535) continue;
        v->tb[id] = b;
        v->tl[id] = (uint32_t)n;
        if (n > v->maxlen) v->maxlen = (uint32_t)n;
        v->ord[v->nord++] = id;
        if (plain_bytes(b, n)) {
            v->plain[id >> 6] |= 1ull << (id & 63);
            v->nplain++;
        } else {
            v->nonplain[v->nnonplain++] = id;
        }
    }
    qsort_r(v->ord, (size_t)v->nord, sizeof *v->ord, cmp_tok, v);
    for (int i = 1; i < v->nord; i++) {
        int32_t a = v->ord[i - 1], b = v->ord[i];
        uint32_t n = v->tl[a] < v->tl[b] ? v->tl[a] : v->tl[b], k = 0;
        while (k < n && v->tb[a][k] == v->tb[b][k]) k++;
        v->lcp[i] = (uint16_t)k;
    }
    *out = v;
    return 0;
oom:
    jsonmask_vocab_free(v);
    if (errlen) snprintf(err, errlen, "out of memory indexing the vocabulary for structured output");
    return -ENOMEM;
}

int jsonmask_vocab_size(const jsonmask_vocab *v) { return v->vocab; }

jsonmask *jsonmask_new(const jsonmask_vocab *v)
{
    jsonmask *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    m->v = v;
    return m;
}

void jsonmask_free(jsonmask *m)
{
    if (!m) return;
    for (int i = 0; i < m->nc; i++) free(m->c[i].bits);
    free(m);
}

void jsonmask_stats(const jsonmask *m, uint64_t *hits, uint64_t *computed)
{
    *hits = m->hits;
    *computed = m->computed;
}

static size_t popcount_words(const uint64_t *b, int w)
{
    size_t n = 0;
    for (int i = 0; i < w; i++) n += (size_t)__builtin_popcountll(b[i]);
    return n;
}

/* The allowed set of f into bits (zeroed by the caller): 0, or -ENOMEM.
 * The walk's states (one per byte of the longest token, some hundred kB
 * for a large vocabulary) are allocated for the walk only, so an idle turn
 * holds just its cache. */
static int compute(jsonmask *m, const jsonfsm *f, uint64_t *bits)
{
    const jsonmask_vocab *v = m->v;
    jsonfsm *st = malloc(((size_t)v->maxlen + 2) * sizeof *st);
    if (!st) return -ENOMEM;
    if (jsonfsm_is_free_string(f)) {
        memcpy(bits, v->plain, (size_t)v->words * sizeof *bits);
        jsonfsm *s = &st[0];
        for (int i = 0; i < v->nnonplain; i++) {
            int32_t id = v->nonplain[i];
            jsonfsm_copy(s, f);
            if (jsonfsm_feed_bytes(s, v->tb[id], v->tl[id])) bits[id >> 6] |= 1ull << (id & 63);
        }
    } else {
        /* the sorted walk: st[d] is the state after the first d bytes of
         * the current token, valid for d <= valid */
        jsonfsm_copy(&st[0], f);
        uint32_t valid = 0;
        int i = 0;
        while (i < v->nord) {
            int32_t id = v->ord[i];
            const uint8_t *b = v->tb[id];
            uint32_t len = v->tl[id], d = v->lcp[i] < valid ? v->lcp[i] : valid;
            if (i == 0) d = 0;
            int alive = 1;
            while (d < len) {
                jsonfsm_copy(&st[d + 1], &st[d]);
                if (!jsonfsm_feed(&st[d + 1], b[d])) { alive = 0; break; }
                d++;
            }
            valid = d;
            i++;
            if (alive) { bits[id >> 6] |= 1ull << (id & 63); continue; }
            /* byte d killed it: so it does every token sharing bytes 0..d */
            while (i < v->nord && v->lcp[i] > d) i++;
        }
    }
    if (jsonfsm_is_complete(f))
        for (int i = 0; i < v->neos; i++) bits[v->eos[i] >> 6] |= 1ull << (v->eos[i] & 63);
    free(st);
    return 0;
}

const uint64_t *jsonmask_allowed(jsonmask *m, const jsonfsm *f, size_t *nallowed)
{
    const jsonmask_vocab *v = m->v;
    size_t kl = jsonfsm_used_size(f);
    uint64_t h = XXH3_64bits(f, kl);
    m->clock++;
    for (int i = 0; i < m->nc; i++) {
        centry *e = &m->c[i];
        if (e->hash == h && e->keylen == kl && !memcmp(&e->key, f, kl)) {
            e->age = m->clock;
            m->hits++;
            *nallowed = e->n;
            return e->bits;
        }
    }
    centry *e;
    if (m->nc < JSONMASK_CACHE) {
        e = &m->c[m->nc];
        e->bits = malloc((size_t)v->words * sizeof *e->bits);
        if (!e->bits) return NULL;
        m->nc++;
    } else {
        e = &m->c[0];
        for (int i = 1; i < m->nc; i++)
            if (m->c[i].age < e->age) e = &m->c[i];
    }
    memset(e->bits, 0, (size_t)v->words * sizeof *e->bits);
    if (compute(m, f, e->bits)) {
        e->hash = 0;
        e->keylen = 0;   /* matches no state */
        return NULL;
    }
    m->computed++;
    e->hash = h;
    e->keylen = kl;
    e->age = m->clock;
    jsonfsm_copy(&e->key, f);
    e->n = popcount_words(e->bits, v->words);
    *nallowed = e->n;
    return e->bits;
}

void jsonmask_apply(const uint64_t *bits, float *row, int vocab)
{
    int words = (vocab + 63) / 64;
    for (int w = 0; w < words; w++) {
        uint64_t z = ~bits[w];   /* the masked tokens of this word */
        if (!z) continue;
        int base = w * 64;
        if (base + 64 > vocab) z &= (1ull << (vocab - base)) - 1;
        if (z == ~0ull) {
            for (int i = 0; i < 64; i++) row[base + i] = JSONMASK_NEG;
            continue;
        }
        for (; z; z &= z - 1) row[base + __builtin_ctzll(z)] = JSONMASK_NEG;
    }
}

size_t jsonmask_gather(const uint64_t *bits, const float *row, int vocab, float *vals, int32_t *ids)
{
    int words = (vocab + 63) / 64;
    size_t n = 0;
    for (int w = 0; w < words; w++)
        for (uint64_t b = bits[w]; b; b &= b - 1) {
            int i = w * 64 + __builtin_ctzll(b);
            if (i >= vocab) break;
            vals[n] = row[i];
            ids[n++] = i;
        }
    return n;
}

int32_t jsonmask_sample(struct sampler *sm, const uint64_t *bits, size_t nallowed, float *row, int vocab,
                        float *vals, int32_t *ids, float *scratch, int masked_row, int *masked)
{
    if (masked) *masked = 0;
    int rep = sm->p.rep_penalty != 1.0f && sm->p.rep_window > 0;
    if (!masked_row && !rep && nallowed <= (size_t)vocab / 2 && nallowed > 0) {
        size_t n = jsonmask_gather(bits, row, vocab, vals, ids);
        return ids[sampler_next(sm, vals, (int)n, scratch)];
    }
    /* greedy, or temperature without top-k and top-p: a draw on the whole
     * row that lands on an allowed token is a draw of the masked row */
    int pure = sm->p.temperature == 0.0f ||
               ((sm->p.top_k <= 0 || sm->p.top_k >= vocab) && sm->p.top_p >= 1.0f);
    if (!masked_row && pure) {
        int32_t tok = sampler_next(sm, row, vocab, scratch);
        if (jsonmask_has(bits, tok)) return tok;
    }
    jsonmask_apply(bits, row, vocab);
    if (masked) *masked = 1;
    int32_t tok = sampler_next(sm, row, vocab, scratch);
    if (jsonmask_has(bits, tok)) return tok;
    int32_t best = -1;
    for (int i = 0; i < vocab; i++)
        if (jsonmask_has(bits, i) && (best < 0 || row[i] > row[best])) best = i;
    return best;
}
