/* recurrent/sampler.c — see sampler.h. Order of operations on the logits:
 * repetition penalty (each distinct token id of the window once), then greedy
 * argmax if temperature is 0, else temperature, softmax, top-k, top-p, and a
 * draw from the kept tokens. The RNG is xoshiro256** seeded by splitmix64.
 *
 * The rule (v1's, any vocabulary): order the tokens by probability,
 * descending, equal probabilities by id ascending; keep the first k (top-k);
 * within them keep the shortest prefix whose mass reaches p·(their mass)
 * (top-p: the token that brings the mass to >= p is kept, the next is not);
 * draw u·(kept mass) and walk the kept tokens in that order. With neither
 * top-k nor top-p the walk is in id order over every token.
 *
 * What is sorted, so the cost stays O(vocab):
 *   vocab <= SAMPLER_EXACT_VOCAB  every token (cheap at 256), with
 *       lind_softmax's in-order sum: v1's arithmetic exactly, so byte models
 *       draw v1's tokens (tests/fixtures/state_v1/sampler_v1.bin).
 *   above, probabilities fall into bands (the top 12 bits of the float: an
 *   eighth of an octave each; one counting pass):
 *     top-k (k < vocab)  the tokens in the bands that hold the k largest; the
 *       kept set, its order and its sums are the rule's exactly.
 *     top-p alone  the tokens in the bands whose mass (at least count × the
 *       band's lower edge) surely reaches p of the total; if rounding ever
 *       says otherwise every token is sorted. The nucleus is measured against
 *       the total summed by blocks (v1 summed it in sorted order: last bits).
 *   and the softmax total and the plain draw (no top-k/top-p) go by blocks of
 *   1024 tokens with 8-lane sums, instead of one long in-order chain.
 * The sort: up to 1024 candidates (the usual case: top-k 40, or top-p on a
 * peaked distribution) are collected in id order and LSD radix-sorted in
 * stack buffers; more are distributed by band in one pass and sorted band by
 * band (LSD in the scratch, or an in-place MSD radix sort on the 64-bit key
 * (~probability bits, id) for a band too big for it). All give the rule's
 * order. The worst case is a flat distribution under top-p, where the nucleus
 * itself is most of the vocabulary (bench/sampler_bench.c measures both). */
#include "recurrent/sampler.h"

#include "kernels/softmax.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#define SAMPLER_EXACT_VOCAB 256

sampler_params sampler_defaults(void)
{
    return (sampler_params){.temperature = 0.8f, .top_k = 0, .top_p = 1.0f, .rep_penalty = 1.0f,
                            .rep_window = 64, .seed = 0};
}

int sampler_params_check(const sampler_params *p, char *err, size_t errlen)
{
    const char *bad = NULL;
    if (!(p->temperature >= 0.0f && p->temperature <= 100.0f)) bad = "temperature must be in [0, 100]";
    else if (p->top_k < 0 || p->top_k > SAMPLER_VOCAB_MAX) bad = "top_k must be in 0..262144 (0 = off)";
    else if (!(p->top_p > 0.0f && p->top_p <= 1.0f)) bad = "top_p must be in (0, 1]";
    else if (!(p->rep_penalty >= 1.0f && p->rep_penalty <= 100.0f)) bad = "rep_penalty must be in [1, 100]";
    else if (p->rep_window < 0 || p->rep_window > SAMPLER_WINDOW_MAX) bad = "rep_window must be in 0..256";
    if (!bad) return 0;
    if (err && errlen) snprintf(err, errlen, "%s", bad);
    return -EINVAL;
}

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t rng_next(uint64_t s[4])
{
    uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return r;
}

static void reseed(sampler *s, uint64_t seed)
{
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) s->rng[i] = splitmix64(&x);
}

void sampler_init(sampler *s, const sampler_params *p)
{
    memset(s, 0, sizeof *s);
    s->p = *p;
    reseed(s, p->seed);
}

void sampler_set_params(sampler *s, const sampler_params *p)
{
    if (p->seed != s->p.seed) reseed(s, p->seed);
    s->p = *p;
}

void sampler_observe(sampler *s, int32_t token)
{
    s->window[s->wpos] = token;
    s->wpos = (s->wpos + 1) % SAMPLER_WINDOW_MAX;
    if (s->wlen < SAMPLER_WINDOW_MAX) s->wlen++;
}

/* Penalize each distinct id among the last rep_window observed, once (a
 * 512-slot open-addressing set: the window holds at most 256 ids). */
static void apply_penalty(const sampler *s, float *l, int vocab)
{
    int32_t seen[2 * SAMPLER_WINDOW_MAX];
    memset(seen, 0xff, sizeof seen);   /* -1: empty */
    uint32_t n = s->wlen < (uint32_t)s->p.rep_window ? s->wlen : (uint32_t)s->p.rep_window;
    for (uint32_t i = 0; i < n; i++) {
        int32_t t = s->window[(s->wpos + SAMPLER_WINDOW_MAX - 1 - i) % SAMPLER_WINDOW_MAX];
        if (t < 0 || t >= vocab) continue;
        uint32_t h = ((uint32_t)t * 2654435761u) >> 23;   /* 9 bits */
        while (seen[h] != -1 && seen[h] != t) h = (h + 1) & (2 * SAMPLER_WINDOW_MAX - 1);
        if (seen[h] == t) continue;
        seen[h] = t;
        l[t] = l[t] > 0 ? l[t] / s->p.rep_penalty : l[t] * s->p.rep_penalty;
    }
}

/* The first index of the largest value (v1's strict-greater scan). */
static int32_t argmax(const float *l, int n)
{
    float mx = lind_maxf(l, n);
    for (int i = 0; i < n; i++)
        if (l[i] == mx) return i;
    return 0;
}

/* Sort key: ascending key = probability descending, then id ascending. The
 * probabilities are in [0, 1], where float order is bit order. */
static inline uint64_t key_of(const float *p, uint32_t id)
{
    uint32_t u;
    memcpy(&u, &p[id], 4);
    return ((uint64_t)~u << 32) | id;
}

static void insertion_sort(uint32_t *a, uint32_t n, const float *p)
{
    for (uint32_t i = 1; i < n; i++) {
        uint32_t x = a[i], j = i;
        uint64_t kx = key_of(p, x);
        while (j > 0 && key_of(p, a[j - 1]) > kx) {
            a[j] = a[j - 1];
            j--;
        }
        a[j] = x;
    }
}

/* Sort n ids (given in id order) by key_of: a stable LSD radix sort on the
 * 32 probability bits, four 8-bit digits, with keys and ids in the buffers
 * ka, kb, ib (n each); digits all ids share are skipped. Stability keeps
 * equal probabilities in id order. sort_small: up to SMALL_SORT ids, buffers
 * on the stack. */
#define SMALL_SORT 1024
static void sort_lsd(uint32_t *a, uint32_t n, const float *p, uint32_t *ka, uint32_t *kb, uint32_t *ib)
{
    uint32_t *k0 = ka, *k1 = kb, *i0 = a, *i1 = ib;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &p[a[i]], 4);
        ka[i] = ~u;
    }
    for (int shift = 0; shift < 32; shift += 8) {
        uint32_t cnt[256] = {0};
        for (uint32_t i = 0; i < n; i++) cnt[(k0[i] >> shift) & 255]++;
        if (cnt[(k0[0] >> shift) & 255] == n) continue;
        uint32_t at = 0;
        for (int b = 0; b < 256; b++) {
            uint32_t c = cnt[b];
            cnt[b] = at;
            at += c;
        }
        for (uint32_t i = 0; i < n; i++) {
            uint32_t d = (k0[i] >> shift) & 255, to = cnt[d]++;
            k1[to] = k0[i];
            i1[to] = i0[i];
        }
        uint32_t *t = k0; k0 = k1; k1 = t;
        t = i0; i0 = i1; i1 = t;
    }
    if (i0 != a) memcpy(a, i0, n * sizeof *a);
}

static void sort_small(uint32_t *a, uint32_t n, const float *p)
{
    uint32_t ka[SMALL_SORT], kb[SMALL_SORT], ib[SMALL_SORT];
    sort_lsd(a, n, p, ka, kb, ib);
}

/* Sort ids a[0..n) by key_of, in place: MSD radix on the key byte at `shift`
 * (American flag permutation), then each bucket on the next byte down. Keys
 * are distinct (they contain the id), so the order is total. */
static void sort_ids(uint32_t *a, uint32_t n, const float *p, int shift)
{
    while (n > 48 && shift >= 0) {
        uint32_t cnt[256] = {0}, next[256], end[256];
        for (uint32_t i = 0; i < n; i++) cnt[(key_of(p, a[i]) >> shift) & 255]++;
        int only = -1;
        for (int b = 0; b < 256; b++)
            if (cnt[b] == n) only = b;
        if (only >= 0) {   /* one bucket: the next byte down */
            shift -= 8;
            continue;
        }
        uint32_t at = 0;
        for (int b = 0; b < 256; b++) {
            next[b] = at;
            at += cnt[b];
            end[b] = at;
        }
        for (int b = 0; b < 256; b++) {
            while (next[b] < end[b]) {
                uint32_t x = a[next[b]];
                int d = (int)((key_of(p, x) >> shift) & 255);
                while (d != b) {   /* carry x to its bucket, pick up what was there */
                    uint32_t y = a[next[d]];
                    a[next[d]++] = x;
                    x = y;
                    d = (int)((key_of(p, x) >> shift) & 255);
                }
                a[next[b]++] = x;
            }
        }
        for (int b = 0, s = 0; b < 256; s += (int)cnt[b], b++)
            if (cnt[b] > 1) sort_ids(a + s, cnt[b], p, shift - 8);
        return;
    }
    insertion_sort(a, n, p);
}

/* Candidates (in id order, ids[] with room for `room` entries) into the
 * rule's order: LSD when its buffers fit (on the stack, or in the room after
 * the candidates), else the in-place MSD sort (gathers keys: slower). */
static void sort_candidates(uint32_t *ids, uint32_t c, const float *p, uint32_t room)
{
    if (c <= SMALL_SORT) sort_small(ids, c, p);
    else if (c <= room / 4) sort_lsd(ids, c, p, ids + c, ids + 2 * (size_t)c, ids + 3 * (size_t)c);
    else sort_ids(ids, c, p, 56);
}

/* Bands of probability: the top 12 bits of its float (sign, exponent, three
 * mantissa bits), so each band is an eighth of an octave and bands order as
 * the probabilities do (all in [0, 1], band <= 0x3f8). */
#define NBANDS 1024
static inline uint32_t band_of(const float *p, int i)
{
    uint32_t u;
    memcpy(&u, &p[i], 4);
    return u >> 20;
}
static float band_floor(uint32_t b)
{
    uint32_t u = b << 20;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* How many probabilities fall in each band. */
static void band_counts(const float *p, int n, uint32_t cnt[NBANDS])
{
    uint32_t h[4][NBANDS];   /* four interleaved histograms: no store-to-load chains */
    memset(h, 0, sizeof h);
    int i = 0;
    for (; i + 4 <= n; i += 4)
        for (int j = 0; j < 4; j++) h[j][band_of(p, i + j)]++;
    for (; i < n; i++) h[0][band_of(p, i)]++;
    for (int b = 0; b < NBANDS; b++) cnt[b] = h[0][b] + h[1][b] + h[2][b] + h[3][b];
}

/* Ids with p >= tau into ids[], in id order; returns how many. */
static uint32_t collect(const float *p, int n, float tau, uint32_t *ids)
{
    uint32_t c = 0;
    for (int i = 0; i < n; i++) {
        ids[c] = (uint32_t)i;
        c += p[i] >= tau;
    }
    return c;
}

/* Above SAMPLER_EXACT_VOCAB: the candidates, in the rule's order, into
 * ids[] (room for n). The lowest band kept is the highest one such that the
 * bands from it up hold at least k tokens (top-k), or surely hold `want` of
 * the mass (top-p alone: a band's mass is at least its count times its lower
 * edge; the margin covers the rounding of the sorted sums that follow; band 0,
 * every token, when none is that sure). One pass distributes the kept ids by
 * band, highest band first and id order within a band; each band is then
 * sorted on the probability bits below the band's (stable, so equal
 * probabilities stay in id order). Returns how many. */
static uint32_t candidates_by_band(const float *p, int n, int k, double want, uint32_t *ids)
{
    uint32_t cnt[NBANDS], pos[NBANDS];
    band_counts(p, n, cnt);
    int lowest = 0;
    if (k < n) {
        uint32_t acc = 0;
        for (int b = NBANDS - 1; b > 0; b--)
            if ((acc += cnt[b]) >= (uint32_t)k) { lowest = b; break; }
    } else {
        double acc = 0.0, need = want * (1.0 + 1e-6);
        for (int b = NBANDS - 1; b > 0; b--)
            if ((acc += (double)cnt[b] * (double)band_floor((uint32_t)b)) >= need) { lowest = b; break; }
    }
    uint32_t c = 0;
    for (int b = NBANDS - 1; b >= lowest; b--) {
        pos[b] = c;
        c += cnt[b];
    }
    if (c <= SMALL_SORT) {   /* few: collect in id order, one LSD sort */
        c = collect(p, n, band_floor((uint32_t)lowest), ids);
        sort_small(ids, c, p);
        return c;
    }
    for (int i = 0; i < n; i++) {
        uint32_t b = band_of(p, i);
        if ((int)b >= lowest) ids[pos[b]++] = (uint32_t)i;
    }
    uint32_t spare = (uint32_t)n - c;   /* ids[c, n) is free for the LSD buffers */
    for (int b = NBANDS - 1; b >= lowest; b--) {
        uint32_t m = cnt[b], *seg = ids + pos[b] - m;
        if (m <= 1) continue;
        if (m <= 32) insertion_sort(seg, m, p);
        else if (m <= SMALL_SORT) sort_small(seg, m, p);
        else if (m <= spare / 3) sort_lsd(seg, m, p, ids + c, ids + c + m, ids + c + 2 * (size_t)m);
        else sort_ids(seg, m, p, 56);
    }
    return c;
}


/* Above SAMPLER_EXACT_VOCAB: lind_softmax's probabilities (the same max and
 * the same per-element formula), but summed per block of SUM_BLOCK tokens in
 * 8 explicit lanes (so it vectorizes, and the sums are the same whatever the
 * vector width): bsum[b] for block b, returns their sum in block order. The
 * in-order double sum of lind_softmax is one long dependency chain (~70 µs at
 * vocab 50277 here). */
#define SUM_BLOCK 1024
static double softmax_blocks(const float *l, int n, float inv_temp, float *p, double *bsum)
{
    float mx = lind_maxf(l, n);
    for (int i = 0; i < n; i++) p[i] = lind_expf((l[i] - mx) * inv_temp);
    double total = 0.0;
    for (int b = 0; b * SUM_BLOCK < n; b++) {
        int lo = b * SUM_BLOCK, hi = lo + SUM_BLOCK < n ? lo + SUM_BLOCK : n;
        double acc[8] = {0};
        int i = lo;
        for (; i + 8 <= hi; i += 8)
            for (int j = 0; j < 8; j++) acc[j] += p[i + j];
        for (; i < hi; i++) acc[0] += p[i];
        bsum[b] = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
        total += bsum[b];
    }
    return total;
}

/* Draw u in [0, total) over every token in id order, by blocks: the block
 * where the running sum of bsum passes u, then its tokens. */
static int32_t draw_blocks(const float *p, int n, const double *bsum, double u)
{
    double acc = 0.0;
    int b = 0, nb = (n + SUM_BLOCK - 1) / SUM_BLOCK;
    while (b < nb - 1 && u >= acc + bsum[b]) acc += bsum[b++];
    int lo = b * SUM_BLOCK, hi = lo + SUM_BLOCK < n ? lo + SUM_BLOCK : n;
    int32_t last = lo;
    for (int i = lo; i < hi; i++) {
        if (p[i] <= 0.0f) continue;
        acc += p[i];
        last = i;
        if (u < acc) return last;
    }
    return last;   /* rounding: the block's sums differ in the last bits */
}

int32_t sampler_next(sampler *s, const float *logits, int vocab, float *scratch)
{
    if (vocab > SAMPLER_VOCAB_MAX) vocab = SAMPLER_VOCAB_MAX;   /* the contract's bound; bsum[] below */
    /* p: the probabilities, scratch[0, vocab); ids: token ids as uint32 in
     * scratch[vocab, 2·vocab) (the build uses -fno-strict-aliasing) */
    float *p = scratch;
    uint32_t *ids = (uint32_t *)(scratch + vocab);
    const float *l = logits;
    if (s->p.rep_penalty != 1.0f && s->p.rep_window > 0) {
        memcpy(p, logits, (size_t)vocab * sizeof *p);
        apply_penalty(s, p, vocab);
        l = p;
    }
    if (s->p.temperature == 0.0f) return argmax(l, vocab);

    /* probabilities at temperature (unnormalized, max-subtracted) */
    int exact = vocab <= SAMPLER_EXACT_VOCAB;
    double bsum[SAMPLER_VOCAB_MAX / SUM_BLOCK];
    double total = exact ? lind_softmax(l, vocab, 1.0f / s->p.temperature, p)
                         : softmax_blocks(l, vocab, 1.0f / s->p.temperature, p, bsum);
    int n = vocab;
    int k = s->p.top_k > 0 && s->p.top_k < vocab ? s->p.top_k : vocab;
    int ordered = k < vocab || s->p.top_p < 1.0f;   /* draw from ids[], else in token order */
    if (!ordered && !exact)
        return draw_blocks(p, vocab, bsum, (double)(rng_next(s->rng) >> 11) * 0x1.0p-53 * total);
    if (ordered) {
        uint32_t c;
        if (exact) {
            c = collect(p, vocab, 0.0f, ids);
            sort_candidates(ids, c, p, (uint32_t)vocab);
        } else {
            c = candidates_by_band(p, vocab, k, (double)s->p.top_p * total, ids);
        }
        n = k < (int)c ? k : (int)c;
        double mass = 0.0;
        if (k < vocab || exact)
            for (int i = 0; i < n; i++) mass += p[ids[i]];
        else
            mass = total;
        if (s->p.top_p < 1.0f) {
            double want = (double)s->p.top_p * mass;
            for (int pass = 0; pass < 2; pass++) {
                double acc = 0.0;
                int found = 0;
                for (int i = 0; i < n; i++) {
                    acc += p[ids[i]];
                    if (acc >= want) {
                        n = i + 1;
                        found = 1;
                        break;
                    }
                }
                if (found || k < vocab || (int)c == vocab) break;
                /* rounding left the nucleus short of the sorted tokens: all of them */
                c = collect(p, vocab, 0.0f, ids);
                sort_candidates(ids, c, p, (uint32_t)vocab);
                n = vocab;
            }
        }
        total = 0.0;
        for (int i = 0; i < n; i++) total += p[ids[i]];
    }
    /* the draw; the most likely token has mass 1, so `last` is always set
     * from a kept token */
    double u = (double)(rng_next(s->rng) >> 11) * 0x1.0p-53 * total, acc = 0.0;
    int32_t last = 0;   /* rounding fallback: the last kept token with mass */
    for (int i = 0; i < n; i++) {
        int32_t t = ordered ? (int32_t)ids[i] : i;
        float pi = p[t];
        if (pi <= 0.0f) continue;
        acc += pi;
        last = t;
        if (u < acc) return last;
    }
    return last;
}
