/* recurrent/sampler.c — see sampler.h. Order of operations on the logits:
 * repetition penalty (each distinct token of the window once), then greedy
 * argmax if temperature is 0, else temperature, softmax, top-k, top-p, and a
 * draw from the kept tokens. The RNG is xoshiro256** seeded by splitmix64. */
#include "recurrent/sampler.h"

#include "kernels/softmax.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

sampler_params sampler_defaults(void) {
    return (sampler_params){.temperature = 0.8f, .top_k = 0, .top_p = 1.0f, .rep_penalty = 1.0f,
                            .rep_window = 64, .seed = 0};
}

int sampler_params_check(const sampler_params *p, char *err, size_t errlen) {
    const char *bad = NULL;
    if (!(p->temperature >= 0.0f && p->temperature <= 100.0f)) bad = "temperature must be in [0, 100]";
    else if (p->top_k < 0 || p->top_k > 256) bad = "top_k must be in 0..256 (0 = off)";
    else if (!(p->top_p > 0.0f && p->top_p <= 1.0f)) bad = "top_p must be in (0, 1]";
    else if (!(p->rep_penalty >= 1.0f && p->rep_penalty <= 100.0f)) bad = "rep_penalty must be in [1, 100]";
    else if (p->rep_window < 0 || p->rep_window > SAMPLER_WINDOW_MAX) bad = "rep_window must be in 0..256";
    if (!bad) return 0;
    if (err && errlen) snprintf(err, errlen, "%s", bad);
    return -EINVAL;
}

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t rng_next(uint64_t s[4]) {
    uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return r;
}

static void reseed(sampler *s, uint64_t seed) {
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) s->rng[i] = splitmix64(&x);
}

void sampler_init(sampler *s, const sampler_params *p) {
    memset(s, 0, sizeof *s);
    s->p = *p;
    reseed(s, p->seed);
}

void sampler_set_params(sampler *s, const sampler_params *p) {
    if (p->seed != s->p.seed) reseed(s, p->seed);
    s->p = *p;
}

void sampler_observe(sampler *s, int token) {
    s->window[s->wpos] = (uint8_t)token;
    s->wpos = (s->wpos + 1) % SAMPLER_WINDOW_MAX;
    if (s->wlen < SAMPLER_WINDOW_MAX) s->wlen++;
}

/* Penalize each distinct token among the last rep_window observed, once. */
static void apply_penalty(const sampler *s, float *l, int vocab) {
    if (s->p.rep_penalty == 1.0f || s->p.rep_window <= 0) return;
    uint8_t hit[256] = {0};
    uint32_t n = s->wlen < (uint32_t)s->p.rep_window ? s->wlen : (uint32_t)s->p.rep_window;
    for (uint32_t i = 0; i < n; i++) {
        int t = s->window[(s->wpos + SAMPLER_WINDOW_MAX - 1 - i) % SAMPLER_WINDOW_MAX];
        if (t >= vocab || hit[t]) continue;
        hit[t] = 1;
        l[t] = l[t] > 0 ? l[t] / s->p.rep_penalty : l[t] * s->p.rep_penalty;
    }
}

int sampler_next(sampler *s, const float *logits, int vocab, float *scratch) {
    float *l = scratch, *idx = scratch + vocab;   /* indices kept as floats (exact < 2^24) */
    memcpy(l, logits, (size_t)vocab * sizeof *l);
    apply_penalty(s, l, vocab);
    if (s->p.temperature == 0.0f) {
        int best = 0;
        for (int i = 1; i < vocab; i++)
            if (l[i] > l[best]) best = i;
        return best;
    }

    /* probabilities at temperature (unnormalized, max-subtracted) */
    double total = lind_softmax(l, vocab, 1.0f / s->p.temperature, l);
    int n = vocab;
    int k = s->p.top_k > 0 && s->p.top_k < vocab ? s->p.top_k : vocab;
    int ordered = k < vocab || s->p.top_p < 1.0f;   /* draw from idx[], else in token order */
    if (ordered) {
        /* order tokens by probability, descending (insertion sort: vocab ≤ 256) */
        for (int i = 0; i < vocab; i++) {
            int j = i;
            while (j > 0 && l[(int)idx[j - 1]] < l[i]) {
                idx[j] = idx[j - 1];
                j--;
            }
            idx[j] = (float)i;
        }
        n = k;
        double mass = 0.0;
        for (int i = 0; i < n; i++) mass += l[(int)idx[i]];
        if (s->p.top_p < 1.0f) {
            double acc = 0.0, want = (double)s->p.top_p * mass;
            for (int i = 0; i < n; i++) {
                acc += l[(int)idx[i]];
                if (acc >= want) { n = i + 1; break; }
            }
        }
        total = 0.0;
        for (int i = 0; i < n; i++) total += l[(int)idx[i]];
    }
    /* the draw; the most likely token has mass 1, so `last` is always set
     * from a kept token */
    double u = (double)(rng_next(s->rng) >> 11) * 0x1.0p-53 * total, acc = 0.0;
    int last = 0;   /* rounding fallback: the last kept token with mass */
    for (int i = 0; i < n; i++) {
        int t = ordered ? (int)idx[i] : i;
        float pi = l[t];
        if (pi <= 0.0f) continue;
        acc += pi;
        last = t;
        if (u < acc) return last;
    }
    return last;
}
