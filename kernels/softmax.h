/* kernels/softmax.h — logits to probabilities, one definition for the
 * sampler (recurrent/sampler.c) and for scoring (`lind score`). Header
 * functions, host and device like kernels/mixer_math.h. */
#ifndef LIND_KERNELS_SOFTMAX_H
#define LIND_KERNELS_SOFTMAX_H

#include "kernels/mixer_math.h"

/* The largest of l[0..n), n ≥ 1, over 16 interleaved lanes so that it
 * vectorizes (max is exact: the lanes change nothing but the speed). */
LIND_HD static inline float lind_maxf(const float *l, int n)
{
    float lane[16];
    int i = 0;
    for (int j = 0; j < 16; j++) lane[j] = l[0];
    for (; i + 16 <= n; i += 16)
        for (int j = 0; j < 16; j++) lane[j] = l[i + j] > lane[j] ? l[i + j] : lane[j];
    float mx = lane[0];
    for (int j = 1; j < 16; j++) mx = lane[j] > mx ? lane[j] : mx;
    for (; i < n; i++) mx = l[i] > mx ? l[i] : mx;
    return mx;
}

/* p[i] = e^{(l[i] − max l)·inv_temp}, unnormalized (the largest is 1);
 * returns Σ p[i] in double. p may equal l. */
LIND_HD static inline double lind_softmax(const float *l, int n, float inv_temp, float *p)
{
    /* the max and the exponentials in loops of their own, so both
     * vectorize; the sum stays one in-order double pass, so the result is
     * the same whatever the vector width */
    float mx = lind_maxf(l, n);
    for (int i = 0; i < n; i++) p[i] = lind_expf((l[i] - mx) * inv_temp);
    double total = 0.0;
    for (int i = 0; i < n; i++) total += p[i];
    return total;
}

/* ln p(y) under softmax(l) at temperature 1, in double: the log-likelihood
 * `lind score` sums (−ln p / ln 2 bits per byte). */
LIND_HD static inline double lind_logprob(const float *l, int n, int y)
{
    float mx = lind_maxf(l, n);
    double z = 0.0;
    for (int i = 0; i < n; i++) z += exp((double)l[i] - (double)mx);
    return (double)l[y] - (double)mx - log(z);
}

#endif
