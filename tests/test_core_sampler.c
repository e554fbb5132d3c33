/* tests/test_core_sampler.c — sampling: determinism from seed and state,
 * top-k / top-p only pick allowed tokens, greedy, repetition penalty,
 * parameter checks, and a sampler restored from its bytes continues exactly.
 * Over any vocabulary: frequencies match softmax(logits / T) (chi-square, at
 * 256 and 50277, with and without top-k / top-p), the top-p and top-k
 * boundaries exactly (ties by id), the penalty on ids > 255 and across the
 * window's wrap; and the byte vocabulary draws exactly what lind v1 drew. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "recurrent/sampler.h"
#include "kernels/softmax.h"
#include "tests/check.h"

#define V 256

static void make_logits(float *l, unsigned seed)
{
    for (int i = 0; i < V; i++) {
        seed = seed * 1103515245u + 12345u;
        l[i] = (float)((seed >> 8) % 10000) / 1000.0f - 5.0f;
    }
}

static void same_seed_same_tokens(void)
{
    sampler_params p = sampler_defaults();
    p.seed = 42;
    p.temperature = 1.0f;
    sampler a, b;
    sampler_init(&a, &p);
    sampler_init(&b, &p);
    float l[V], s1[2 * V], s2[2 * V];
    int differ = 0;
    for (int t = 0; t < 500; t++) {
        make_logits(l, (unsigned)t);
        int x = sampler_next(&a, l, V, s1), y = sampler_next(&b, l, V, s2);
        CHECK(x == y, "step %d: %d vs %d", t, x, y);
        if (x != y) break;
        sampler_observe(&a, x);
        sampler_observe(&b, y);
    }
    /* another seed gives another sequence */
    p.seed = 43;
    sampler c;
    sampler_init(&c, &p);
    sampler_init(&a, &(sampler_params){.temperature = 1.0f, .top_p = 1.0f, .rep_penalty = 1.0f, .seed = 42});
    for (int t = 0; t < 50; t++) {
        make_logits(l, (unsigned)t);
        differ += sampler_next(&a, l, V, s1) != sampler_next(&c, l, V, s2);
    }
    CHECK(differ > 10, "seeds 42 and 43 agree on %d of 50 draws", 50 - differ);
}

static void top_k_only_allowed(void)
{
    float l[V], s[2 * V];
    sampler_params p = sampler_defaults();
    p.temperature = 2.0f;   /* flatten: every token would otherwise be likely */
    p.top_k = 5;
    p.seed = 1;
    sampler a;
    sampler_init(&a, &p);
    int seen[V] = {0};
    for (int t = 0; t < 2000; t++) {
        make_logits(l, (unsigned)(t % 7));
        /* the top 5 of this logit vector */
        float sorted[V];
        memcpy(sorted, l, sizeof sorted);
        for (int i = 0; i < 5; i++)
            for (int j = i + 1; j < V; j++)
                if (sorted[j] > sorted[i]) { float x = sorted[i]; sorted[i] = sorted[j]; sorted[j] = x; }
        int x = sampler_next(&a, l, V, s);
        CHECK(x >= 0 && x < V && l[x] >= sorted[4], "top-k 5 picked token %d (logit %g < 5th %g)", x, (double)l[x],
              (double)sorted[4]);
        if (t % 7 == 0) seen[x]++;
    }
    int distinct = 0;
    for (int i = 0; i < V; i++) distinct += seen[i] > 0;
    CHECK(distinct >= 3, "top-k 5 at temperature 2 only ever drew %d distinct tokens", distinct);
}

static void top_p_only_allowed(void)
{
    float l[V], s[2 * V];
    for (int i = 0; i < V; i++) l[i] = -20.0f;
    /* probabilities ∝ e^3, e^2, e^1.5, e^1, rest negligible */
    l[10] = 3.0f; l[20] = 2.0f; l[30] = 1.5f; l[40] = 1.0f;
    double z = exp(3.0) + exp(2.0) + exp(1.5) + exp(1.0) + 252 * exp(-20.0);
    double p10 = exp(3.0) / z, p20 = exp(2.0) / z;
    sampler_params p = sampler_defaults();
    p.temperature = 1.0f;
    p.top_p = (float)(p10 + p20 * 0.5);   /* needs tokens 10 and 20 only */
    p.seed = 9;
    sampler a;
    sampler_init(&a, &p);
    int n10 = 0, n20 = 0;
    for (int t = 0; t < 5000; t++) {
        int x = sampler_next(&a, l, V, s);
        CHECK(x == 10 || x == 20, "top-p %.3f picked token %d", (double)p.top_p, x);
        if (x != 10 && x != 20) break;
        n10 += x == 10;
        n20 += x == 20;
    }
    /* renormalized over {10, 20}: p(10) = e^3 / (e^3 + e^2) ≈ 0.731 */
    double f = n10 / 5000.0;
    CHECK(fabs(f - exp(3.0) / (exp(3.0) + exp(2.0))) < 0.03, "token 10 frequency %.3f, expected 0.731", f);
    CHECK(n20 > 0, "token 20 never drawn");
}

static void greedy_is_argmax(void)
{
    float l[V], s[2 * V];
    sampler_params p = sampler_defaults();
    p.temperature = 0;
    sampler a;
    sampler_init(&a, &p);
    for (int t = 0; t < 100; t++) {
        make_logits(l, (unsigned)t + 1000);
        int best = 0;
        for (int i = 1; i < V; i++)
            if (l[i] > l[best]) best = i;
        CHECK(sampler_next(&a, l, V, s) == best, "greedy did not pick the argmax at %d", t);
    }
}

static void repetition_penalty_applies(void)
{
    float l[V], s[2 * V];
    for (int i = 0; i < V; i++) l[i] = 0.0f;
    l[65] = 2.0f;
    l[66] = 1.5f;
    sampler_params p = sampler_defaults();
    p.temperature = 0;
    p.rep_penalty = 2.0f;
    p.rep_window = 4;
    sampler a;
    sampler_init(&a, &p);
    CHECK(sampler_next(&a, l, V, s) == 65, "without history the best token is 65");
    sampler_observe(&a, 65);   /* 2.0 / 2 = 1.0 < 1.5 */
    CHECK(sampler_next(&a, l, V, s) == 66, "penalized 65 still chosen");
    for (int i = 0; i < 4; i++) sampler_observe(&a, 1);   /* 65 leaves the 4-token window */
    CHECK(sampler_next(&a, l, V, s) == 65, "penalty outlived its window");
    CHECK(l[65] == 2.0f, "caller's logits modified");
}

static void params_checked(void)
{
    char err[128];
    sampler_params p = sampler_defaults();
    CHECK(sampler_params_check(&p, err, sizeof err) == 0, "defaults rejected: %s", err);
    p.temperature = -1;
    CHECK(sampler_params_check(&p, err, sizeof err) < 0 && strstr(err, "temperature"), "negative temperature");
    p = sampler_defaults();
    p.top_p = 0;
    CHECK(sampler_params_check(&p, err, sizeof err) < 0 && strstr(err, "top_p"), "top_p 0");
    p = sampler_defaults();
    p.top_k = -3;
    CHECK(sampler_params_check(&p, err, sizeof err) < 0 && strstr(err, "top_k"), "top_k -3");
    p = sampler_defaults();
    p.rep_window = SAMPLER_WINDOW_MAX + 1;
    CHECK(sampler_params_check(&p, err, sizeof err) < 0 && strstr(err, "rep_window"), "rep_window too big");
    p = sampler_defaults();
    p.rep_penalty = 0.5f;
    CHECK(sampler_params_check(&p, err, sizeof err) < 0 && strstr(err, "rep_penalty"), "rep_penalty < 1");
    p = sampler_defaults();
    p.temperature = NAN;
    CHECK(sampler_params_check(&p, err, sizeof err) < 0, "NaN temperature accepted");
    p = sampler_defaults();
    p.top_k = SAMPLER_VOCAB_MAX;
    CHECK(sampler_params_check(&p, err, sizeof err) == 0, "top_k 2^18 (any vocabulary) rejected: %s", err);
    p.top_k = SAMPLER_VOCAB_MAX + 1;
    CHECK(sampler_params_check(&p, err, sizeof err) < 0 && strstr(err, "top_k"), "top_k 2^18+1 accepted");
}


/* ---- any vocabulary ------------------------------------------------------ */
#define BIG 50277

/* Chi-square critical value at significance 1e-4 (Wilson-Hilferty). */
static double chi2_crit(int df)
{
    double h = 2.0 / (9.0 * df);
    return df * pow(1.0 - h + 3.719 * sqrt(h), 3.0);
}

/* Draw n tokens from logits l (vocab nv) with params p and compare the
 * frequencies with q (the probabilities the rule gives, summing to 1): tokens
 * with q = 0 must never come; tokens expected >= 10 times are their own bin,
 * the rest one pooled bin. Returns the statistic (<0 when a q=0 token came),
 * its degrees of freedom in *df. */
static double chi2_of(const float *l, int nv, sampler_params p, const double *q, int n, int *df)
{
    sampler a;
    sampler_init(&a, &p);
    float *scratch = malloc(sizeof(float) * 2 * (size_t)nv);
    int *cnt = calloc((size_t)nv, sizeof *cnt);
    int forbidden = 0;
    for (int t = 0; t < n; t++) {
        int x = sampler_next(&a, l, nv, scratch);
        if (x < 0 || x >= nv || q[x] == 0.0) forbidden++;
        else cnt[x]++;
    }
    double stat = 0.0, rest_e = 0.0;
    long rest_o = 0;
    int bins = 0;
    for (int i = 0; i < nv; i++) {
        double e = q[i] * n;
        if (e >= 10.0) {
            stat += (cnt[i] - e) * (cnt[i] - e) / e;
            bins++;
        } else {
            rest_e += e;
            rest_o += cnt[i];
        }
    }
    if (rest_e >= 5.0) {
        stat += (rest_o - rest_e) * (rest_o - rest_e) / rest_e;
        bins++;
    }
    *df = bins > 1 ? bins - 1 : 1;
    free(scratch);
    free(cnt);
    return forbidden ? -1.0 : stat;
}

/* The rule's probabilities in double: softmax(l / T), then top-k, then top-p
 * (order by probability, ties by id), renormalized. */
static const double *cmp_desc_q;
static int cmp_desc(const void *x, const void *y)
{
    int a = *(const int *)x, b = *(const int *)y;
    if (cmp_desc_q[a] != cmp_desc_q[b]) return cmp_desc_q[a] > cmp_desc_q[b] ? -1 : 1;
    return a < b ? -1 : 1;
}
static void rule_probs(const float *l, int nv, float T, int top_k, float top_p, double *q)
{
    double mx = l[0], z = 0.0;
    for (int i = 1; i < nv; i++) mx = l[i] > mx ? l[i] : mx;
    for (int i = 0; i < nv; i++) z += q[i] = exp(((double)l[i] - mx) / T);
    for (int i = 0; i < nv; i++) q[i] /= z;
    int *ord = malloc(sizeof(int) * (size_t)nv);
    for (int i = 0; i < nv; i++) ord[i] = i;
    cmp_desc_q = q;
    qsort(ord, (size_t)nv, sizeof *ord, cmp_desc);
    int n = top_k > 0 && top_k < nv ? top_k : nv;
    double mass = 0.0;
    for (int i = 0; i < n; i++) mass += q[ord[i]];
    if (top_p < 1.0f) {
        double acc = 0.0;
        for (int i = 0; i < n; i++) {
            acc += q[ord[i]];
            if (acc >= top_p * mass) { n = i + 1; break; }
        }
    }
    double kept = 0.0;
    for (int i = 0; i < n; i++) kept += q[ord[i]];
    for (int i = n; i < nv; i++) q[ord[i]] = 0.0;
    for (int i = 0; i < n; i++) q[ord[i]] /= kept;
    free(ord);
}

/* Logits a language model might give: Zipf-like over shuffled ids. */
static void zipf_logits(float *l, int nv, unsigned seed)
{
    for (int i = 0; i < nv; i++) l[i] = (float)(-1.1 * log(1.0 + i));
    for (int i = nv - 1; i > 0; i--) {
        seed = seed * 1103515245u + 12345u;
        int j = (int)((seed >> 4) % (unsigned)(i + 1));
        float t = l[i]; l[i] = l[j]; l[j] = t;
    }
}

/* Frequencies follow softmax(l / T): a sampler that multiplied by T, skipped
 * the temperature, or mis-normalized fails at T 0.5 or 2. */
static void frequencies_follow_softmax(void)
{
    int Vs[2] = {V, BIG};
    float Ts[3] = {0.5f, 1.0f, 2.0f};
    for (int vi = 0; vi < 2; vi++) {
        int n = Vs[vi];
        float *l = malloc(sizeof(float) * (size_t)n);
        double *q = malloc(sizeof(double) * (size_t)n);
        if (n == V) make_logits(l, 77u); else zipf_logits(l, n, 77u);
        for (int ti = 0; ti < 3; ti++) {
            sampler_params p = sampler_defaults();
            p.temperature = Ts[ti];
            p.seed = 100u + (uint64_t)ti;
            rule_probs(l, n, p.temperature, 0, 1.0f, q);
            int df;
            double x2 = chi2_of(l, n, p, q, n == V ? 40000 : 6000, &df);
            CHECK(x2 >= 0 && x2 < chi2_crit(df), "vocab %d T %g: chi-square %.1f over %d df (critical %.1f)", n,
                  (double)p.temperature, x2, df, chi2_crit(df));
            /* the same draws judged against T's reciprocal must fail (the test has power) */
            if (ti != 1) {
                rule_probs(l, n, 1.0f / p.temperature, 0, 1.0f, q);
                x2 = chi2_of(l, n, p, q, n == V ? 40000 : 6000, &df);
                CHECK(x2 < 0 || x2 > chi2_crit(df), "vocab %d T %g looks like T %g (chi-square %.1f)", n,
                      (double)p.temperature, 1.0 / p.temperature, x2);
            }
        }
        /* with top-k and top-p: the renormalized rule */
        /* (sorted candidates: a few, thousands, most of the vocabulary) */
        struct { int k; float tp; float T; } cs[4] = {{40, 1.0f, 1.0f}, {0, 0.9f, 1.0f}, {40, 0.8f, 2.0f},
                                                      {5000, 0.5f, 1.0f}};
        for (int c = 0; c < 4; c++) {
            sampler_params p = sampler_defaults();
            p.temperature = cs[c].T;
            p.top_k = cs[c].k;
            p.top_p = cs[c].tp;
            p.seed = 200u + (uint64_t)c;
            rule_probs(l, n, p.temperature, p.top_k, p.top_p, q);
            int df;
            double x2 = chi2_of(l, n, p, q, n == V ? 20000 : 3000, &df);
            CHECK(x2 >= 0 && x2 < chi2_crit(df), "vocab %d T %g top_k %d top_p %g: chi-square %.1f over %d df%s", n,
                  (double)p.temperature, p.top_k, (double)p.top_p, x2, df, x2 < 0 ? " (a token outside the kept set)" : "");
        }
        free(l);
        free(q);
    }
}

/* Draw n tokens; count how often each of the listed ids came and how many
 * draws were none of them. */
static void tally(const float *l, int n_vocab, sampler_params p, int draws, const int *ids, int nids, int *hits,
                  int *other)
{
    sampler a;
    sampler_init(&a, &p);
    float *scratch = malloc(sizeof(float) * 2 * (size_t)n_vocab);
    for (int i = 0; i < nids; i++) hits[i] = 0;
    *other = 0;
    for (int t = 0; t < draws; t++) {
        int x = sampler_next(&a, l, n_vocab, scratch), found = 0;
        for (int i = 0; i < nids; i++)
            if (x == ids[i]) { hits[i]++; found = 1; }
        *other += !found;
    }
    free(scratch);
}

/* The token that brings the mass to >= p is kept, the next is not; equal
 * probabilities are ordered by id. At 256 and 50277 (ids > 255), since the
 * two sizes take different paths. */
static void top_p_boundary_exact(void)
{
    int sizes[2] = {V, BIG};
    for (int si = 0; si < 2; si++) {
        int n = sizes[si];
        int A = n == V ? 200 : 41234, B = n == V ? 17 : 300, C = n == V ? 90 : 20000;
        float *l = malloc(sizeof(float) * (size_t)n);
        for (int i = 0; i < n; i++) l[i] = -1e30f;
        l[A] = logf(0.5f); l[B] = logf(0.3f); l[C] = logf(0.2f);
        int ids[3] = {A, B, C}, h[3], other;
        sampler_params p = sampler_defaults();
        p.temperature = 1.0f;
        p.seed = 5;
        float tps[4] = {0.45f, 0.79f, 0.81f, 1.0f};
        int want_kept[4] = {1, 2, 3, 3};
        for (int c = 0; c < 4; c++) {
            p.top_p = tps[c];
            tally(l, n, p, 1500, ids, 3, h, &other);
            int kept = (h[0] > 0) + (h[1] > 0) + (h[2] > 0);
            CHECK(other == 0 && kept == want_kept[c] && (kept < 2 || h[1] > 0),
                  "vocab %d top_p %.2f over masses .5/.3/.2: drew %d/%d/%d (+%d others), want the first %d", n,
                  (double)tps[c], h[0], h[1], h[2], other, want_kept[c]);
        }
        /* ties: .4 then three at .2 — ids ordered ascending among equals */
        for (int i = 0; i < n; i++) l[i] = -1e30f;
        int T0 = n == V ? 100 : 100, t1 = n == V ? 3 : 300, t2 = n == V ? 7 : 20000, t3 = n == V ? 50 : 40000;
        l[T0] = logf(0.4f); l[t3] = logf(0.2f); l[t1] = logf(0.2f); l[t2] = logf(0.2f);
        int tid[4] = {T0, t1, t2, t3}, th[4];
        p.top_p = 0.5f;   /* .4 < .5; .4 + .2 >= .5: the lowest-id .2 only */
        tally(l, n, p, 1500, tid, 4, th, &other);
        CHECK(th[0] > 0 && th[1] > 0 && th[2] == 0 && th[3] == 0 && other == 0,
              "vocab %d ties at the top-p boundary: drew %d/%d/%d/%d (+%d), want ids %d and %d only", n, th[0], th[1],
              th[2], th[3], other, T0, t1);
        p.top_p = 1.0f;
        p.top_k = 3;      /* the .4 and the two lowest ids among the .2s */
        tally(l, n, p, 1500, tid, 4, th, &other);
        CHECK(th[0] > 0 && th[1] > 0 && th[2] > 0 && th[3] == 0 && other == 0,
              "vocab %d ties at the top-k boundary: drew %d/%d/%d/%d (+%d)", n, th[0], th[1], th[2], th[3], other);
        free(l);
    }
}

/* Top-k at 50277 keeps exactly the k largest (all of them come at T 2). */
static void top_k_exact_big(void)
{
    float *l = malloc(sizeof(float) * BIG), *scratch = malloc(sizeof(float) * 2 * BIG);
    zipf_logits(l, BIG, 3u);
    /* flatten the top so every one of the 40 is likely: the 40 largest are ranks 0..39 */
    int *rank_of = malloc(sizeof(int) * BIG);
    for (int i = 0; i < BIG; i++) rank_of[i] = (int)lround(exp(-(double)l[i] / 1.1) - 1.0);
    for (int i = 0; i < BIG; i++)
        if (rank_of[i] < 40) l[i] = 5.0f - 0.01f * (float)rank_of[i];
    sampler_params p = sampler_defaults();
    p.temperature = 2.0f;
    p.top_k = 40;
    p.seed = 11;
    sampler a;
    sampler_init(&a, &p);
    int seen[40] = {0}, outside = 0;
    for (int t = 0; t < 4000; t++) {
        int x = sampler_next(&a, l, BIG, scratch);
        if (x < 0 || x >= BIG || rank_of[x] >= 40) outside++;
        else seen[rank_of[x]]++;
    }
    int missing = 0;
    for (int r = 0; r < 40; r++) missing += seen[r] == 0;
    CHECK(outside == 0 && missing == 0, "top-k 40 at vocab %d: %d draws outside the 40 largest, %d of them never drawn",
          BIG, outside, missing);
    /* top_k 0, = vocab and above the vocab all mean every token: the same draws */
    int ks[3] = {0, BIG, SAMPLER_VOCAB_MAX}, seq[3][200];
    zipf_logits(l, BIG, 9u);
    for (int c = 0; c < 3; c++) {
        p.top_k = ks[c];
        p.temperature = 1.0f;
        sampler_init(&a, &p);
        for (int t = 0; t < 200; t++) seq[c][t] = sampler_next(&a, l, BIG, scratch);
    }
    CHECK(!memcmp(seq[0], seq[1], sizeof seq[0]) && !memcmp(seq[0], seq[2], sizeof seq[0]),
          "top_k 0, %d and %d draw differently", BIG, SAMPLER_VOCAB_MAX);
    /* greedy: the first of equal maxima */
    zipf_logits(l, BIG, 5u);
    l[30000] = 10.0f;
    l[1000] = 10.0f;
    p = sampler_defaults();
    p.temperature = 0;
    sampler_init(&a, &p);
    int g = sampler_next(&a, l, BIG, scratch);
    CHECK(g == 1000, "greedy over tied maxima at 1000 and 30000 chose %d", g);
    /* one-token and just-above-256 vocabularies */
    p.temperature = 1.0f;
    p.top_p = 0.5f;
    sampler_init(&a, &p);
    float one = 0.0f;
    CHECK(sampler_next(&a, &one, 1, scratch) == 0, "vocab 1");
    for (int i = 0; i < 257; i++) l[i] = -5.0f;
    l[256] = 5.0f;
    CHECK(sampler_next(&a, l, 257, scratch) == 256, "vocab 257 top-p 0.5 over one dominant token");
    free(rank_of);
    free(l);
    free(scratch);
}

/* The penalty works on ids, not bytes: id 300 is not id 44 (300 mod 256);
 * a token seen three times is penalized once; negative logits are multiplied. */
static void penalty_on_big_ids(void)
{
    float *l = calloc(BIG, sizeof(float)), *scratch = malloc(sizeof(float) * 2 * BIG);
    sampler_params p = sampler_defaults();
    p.temperature = 0;
    p.rep_penalty = 2.0f;
    p.rep_window = 64;
    sampler a;
    sampler_init(&a, &p);
    l[44] = 2.0f;
    l[300] = 1.9f;
    sampler_observe(&a, 300);
    int x = sampler_next(&a, l, BIG, scratch);
    CHECK(x == 44, "after observing id 300 greedy chose %d, want 44 (unpenalized)", x);
    l[44] = 0.0f;
    l[300] = 2.0f;
    l[5] = 0.9f;
    sampler_observe(&a, 300);
    sampler_observe(&a, 300);
    x = sampler_next(&a, l, BIG, scratch);
    CHECK(x == 300, "id 300 seen three times: chose %d (penalized more than once?)", x);
    l[300] = 0.0f;
    l[5] = 0.0f;
    for (int i = 0; i < BIG; i++) l[i] = -0.8f;
    l[45000] = -0.5f;
    x = sampler_next(&a, l, BIG, scratch);
    CHECK(x == 45000, "before observing: %d", x);
    sampler_observe(&a, 45000);
    x = sampler_next(&a, l, BIG, scratch);
    CHECK(x != 45000, "negative logit of observed id 45000 not multiplied (chose it again)");
    /* ids outside the vocabulary given are ignored, not written out of bounds */
    sampler_observe(&a, BIG + 5);
    sampler_observe(&a, -3);
    x = sampler_next(&a, l, BIG, scratch);
    CHECK(x >= 0 && x < BIG && x != 45000, "out-of-vocabulary ids in the window: %d", x);
    free(l);
    free(scratch);
}

/* Above 256 the candidates are sorted band by band (sampler.c): with more
 * than a thousand candidates, the k-th / nucleus boundary inside one band of
 * five close probabilities whose ids run opposite to their order must still
 * keep the two most likely of the five. */
static void order_within_a_band(void)
{
    enum { NV = 4000, FILL = 1100 };
    float *l = malloc(sizeof(float) * NV), *scratch = malloc(sizeof(float) * 2 * NV);
    for (int i = 0; i < NV; i++) l[i] = -30.0f;
    for (int i = 0; i < FILL; i++) l[i] = 0.5f;
    int A[5];
    for (int j = 0; j < 5; j++) {   /* A[0] most likely, highest id; all within 4%: one band */
        A[j] = NV - 1 - j;
        l[A[j]] = -0.01f * (float)j;
    }
    for (int mode = 0; mode < 2; mode++) {
        sampler_params p = sampler_defaults();
        p.temperature = 1.0f;
        p.seed = 31u + (uint64_t)mode;
        if (mode == 0) {
            p.top_k = FILL + 2;
        } else {   /* mass: the fillers, A[0], and half of A[1] */
            double e = exp(-0.5), tot = FILL + e * (1 + exp(-0.01) + exp(-0.02) + exp(-0.03) + exp(-0.04));
            p.top_p = (float)((FILL + e * (1 + 0.5 * exp(-0.01))) / tot);
        }
        sampler a;
        sampler_init(&a, &p);
        int h[5] = {0}, other = 0;
        for (int t = 0; t < 30000; t++) {
            int x = sampler_next(&a, l, NV, scratch);
            if (x >= FILL) {
                int j = NV - 1 - x;
                if (j >= 0 && j < 5) h[j]++;
                else other++;
            }
        }
        CHECK(h[0] > 0 && h[1] > 0 && h[2] == 0 && h[3] == 0 && h[4] == 0 && other == 0,
              "%s: the five of one band drawn %d/%d/%d/%d/%d times (+%d others), want the first two only",
              mode ? "top-p" : "top-k", h[0], h[1], h[2], h[3], h[4], other);
    }
    free(l);
    free(scratch);
}

/* The 256-entry ring wraps: a token leaves the window exactly when 256 newer
 * ones have been observed. */
static void window_wraps(void)
{
    float *l = calloc(BIG, sizeof(float)), *scratch = malloc(sizeof(float) * 2 * BIG);
    sampler_params p = sampler_defaults();
    p.temperature = 0;
    p.rep_penalty = 4.0f;
    p.rep_window = SAMPLER_WINDOW_MAX;
    l[70] = 1.0f;      /* penalized: 0.25 < 0.5 */
    l[50000] = 0.5f;
    for (int start = 0; start < 300; start += 97) {   /* different ring positions */
        sampler a;
        sampler_init(&a, &p);
        for (int i = 0; i < start; i++) sampler_observe(&a, 1000 + i);
        sampler_observe(&a, 70);
        for (int i = 0; i < SAMPLER_WINDOW_MAX - 1; i++) sampler_observe(&a, 2000 + i);
        int x = sampler_next(&a, l, BIG, scratch);
        CHECK(x == 50000, "start %d: 70 with 255 newer ids is still in the window, yet chose %d", start, x);
        sampler_observe(&a, 9);
        x = sampler_next(&a, l, BIG, scratch);
        CHECK(x == 70, "start %d: 70 with 256 newer ids left the window, yet chose %d", start, x);
        CHECK(a.wlen == SAMPLER_WINDOW_MAX && a.wpos == (uint32_t)(start + 257) % SAMPLER_WINDOW_MAX &&
                  a.window[(a.wpos + SAMPLER_WINDOW_MAX - 1) % SAMPLER_WINDOW_MAX] == 9,
              "start %d: window length %u position %u", start, a.wlen, a.wpos);
    }
    free(l);
    free(scratch);
}

/* ---- the v1 record: the shipped byte model samples what lind v1 sampled --
 *
 * tests/fixtures/state_v1/sampler_v1.bin holds the tokens the v1 sampler (the
 * commit before 32-bit token ids, 4fbc3f1) drew for the cases below: 300
 * settings (temperature × top-k × top-p × repetition penalty/window), each a
 * seeded session of V1_STEPS draws whose logits alternate between real ones
 * (the shipped model's, tests/fixtures/default_logits.f32) and synthetic ones
 * (scaled, quantized into ties, with -1e30 entries that underflow to 0), every
 * draw observed into the window. LIND_SAMPLER_RECORD=FILE writes the file
 * instead of comparing (how it was made: tests/fixtures/state_v1/README.md). */
#define V1_STEPS 200
#define V1_REAL_ROWS 513

static void v1_logits(float *l, const float *real, int setting, int step)
{
    unsigned seed = (unsigned)(setting * 7919 + step * 104729 + 1);
    if (real && step % 2 == 0) {
        memcpy(l, real + (size_t)((setting * 37 + step * 11) % V1_REAL_ROWS) * V, sizeof(float) * V);
        return;
    }
    static const float scales[4] = {0.3f, 1.0f, 3.0f, 0.05f};
    float sc = scales[(setting + step) % 4];
    for (int i = 0; i < V; i++) {
        seed = seed * 1103515245u + 12345u;
        float x = (float)((seed >> 8) % 10000) / 1000.0f - 5.0f;
        if (step % 3 == 1) x = floorf(x * 2.0f) / 2.0f;          /* ties */
        l[i] = x * sc;
        if (step % 5 == 3 && (seed >> 4) % 7 == 0) l[i] = -1e30f; /* p underflows to 0 */
    }
}

static sampler_params v1_params(int setting)
{
    static const float temps[5] = {0.0f, 0.5f, 0.8f, 1.0f, 1.7f};
    static const int topk[5] = {0, 1, 3, 40, 255};
    static const float topp[4] = {1.0f, 0.95f, 0.6f, 0.2f};
    static const float pen[3] = {1.0f, 1.3f, 2.5f};
    static const int win[3] = {64, 16, 256};
    sampler_params p = sampler_defaults();
    int s = setting;
    p.temperature = temps[s % 5]; s /= 5;
    p.top_k = topk[s % 5]; s /= 5;
    p.top_p = topp[s % 4]; s /= 4;
    p.rep_penalty = pen[s % 3];
    p.rep_window = win[s % 3];
    p.seed = 1000u + (uint64_t)setting;
    return p;
}

#define V1_SETTINGS 300

static void same_tokens_as_v1(void)
{
    const char *rec = getenv("LIND_SAMPLER_RECORD");
    const char *fdir = getenv("LIND_FIXTURE_DIR") ? getenv("LIND_FIXTURE_DIR") : "tests/fixtures";
    char path[512];
    snprintf(path, sizeof path, "%s/default_logits.f32", fdir);
    float *real = malloc(sizeof(float) * V * V1_REAL_ROWS);
    FILE *f = fopen(path, "rb");
    size_t got = f ? fread(real, sizeof(float) * V, V1_REAL_ROWS, f) : 0;
    if (f) fclose(f);
    CHECK(got == V1_REAL_ROWS, "%s: %zu rows of 256 logits, want %d", path, got, V1_REAL_ROWS);
    unsigned char *toks = malloc((size_t)V1_SETTINGS * V1_STEPS), *want = malloc((size_t)V1_SETTINGS * V1_STEPS);
    float l[V], s[2 * V];
    for (int st = 0; st < V1_SETTINGS; st++) {
        sampler_params p = v1_params(st);
        sampler a;
        sampler_init(&a, &p);
        for (int t = 0; t < V1_STEPS; t++) {
            if (t == V1_STEPS / 2) {   /* a new turn's settings: RNG and window kept */
                sampler_params q = p;
                q.temperature = p.temperature == 0.0f ? 0.0f : p.temperature * 1.25f;
                sampler_set_params(&a, &q);
            }
            v1_logits(l, got == V1_REAL_ROWS ? real : NULL, st, t);
            int x = sampler_next(&a, l, V, s);
            toks[(size_t)st * V1_STEPS + t] = (unsigned char)x;
            sampler_observe(&a, x);
        }
    }
    if (rec) {
        FILE *o = fopen(rec, "wb");
        CHECK(o && fwrite(toks, 1, (size_t)V1_SETTINGS * V1_STEPS, o) == (size_t)V1_SETTINGS * V1_STEPS &&
              fclose(o) == 0, "cannot write %s", rec);
    } else {
        snprintf(path, sizeof path, "%s/state_v1/sampler_v1.bin", fdir);
        f = fopen(path, "rb");
        size_t n = f ? fread(want, 1, (size_t)V1_SETTINGS * V1_STEPS + 1, f) : 0;
        if (f) fclose(f);
        CHECK(n == (size_t)V1_SETTINGS * V1_STEPS, "%s: %zu bytes, want %d", path, n, V1_SETTINGS * V1_STEPS);
        int bad = 0;
        for (int st = 0; st < V1_SETTINGS && n == (size_t)V1_SETTINGS * V1_STEPS; st++)
            for (int t = 0; t < V1_STEPS; t++) {
                size_t i = (size_t)st * V1_STEPS + t;
                if (toks[i] == want[i]) continue;
                sampler_params p = v1_params(st);
                if (bad++ < 5)
                    CHECK(0, "setting %d (T %g, top_k %d, top_p %g, penalty %g/%d) step %d: token %d, v1 drew %d",
                          st, (double)p.temperature, p.top_k, (double)p.top_p, (double)p.rep_penalty,
                          p.rep_window, t, toks[i], want[i]);
                break;
            }
        CHECK(bad == 0, "%d of %d settings diverge from v1", bad, V1_SETTINGS);
    }
    free(real);
    free(toks);
    free(want);
}

int main(void)
{
    RUN(same_seed_same_tokens);
    RUN(top_k_only_allowed);
    RUN(top_p_only_allowed);
    RUN(greedy_is_argmax);
    RUN(repetition_penalty_applies);
    RUN(params_checked);
    RUN(frequencies_follow_softmax);
    RUN(top_p_boundary_exact);
    RUN(top_k_exact_big);
    RUN(penalty_on_big_ids);
    RUN(order_within_a_band);
    RUN(window_wraps);
    RUN(same_tokens_as_v1);
    return check_exit();
}
