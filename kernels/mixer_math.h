/* kernels/mixer_math.h — the per-element math of lind's model, one definition
 * compiled both as C (kernels/cpu/) and as CUDA (kernels/cuda/).
 *
 * Everything here is a pure function of its arguments (plus the state it is
 * explicitly handed), so the two backends agree on what a step computes and
 * the tests' reference (tests/test_core_parallel.c) can check the formulas
 * once. Accumulators are fp64 (see docs/NUMERICS.md): inputs and outputs of
 * a step are fp32, the sums that grow with stream length are double.
 *
 * Parallel decomposition this is written for:
 *   - linear mixer: one CUDA block per (session, head); thread j owns column
 *     j of S (the v index) and calls lind_lin_column() — it reads and writes
 *     S[·][j] exactly once; thread i < dh also calls lind_lin_z() for z[i] and
 *     the block sums its return values to get the denominator.
 *   - AFT: one thread per (session, channel) calling lind_aft_channel().
 *   - delta rule: one block per (session, head); thread j owns column j of S
 *     and calls lind_delta_column(); the q/k L2 norms and the output's RMS
 *     norm are block sums. Short convolution: one thread per (session,
 *     channel) calling lind_conv_channel() over the session's rows.
 *   - layer norm: one block (or loop) per row; lind_ln_apply() per element
 *     after the row's mean and 1/std are known. */
#ifndef LIND_KERNELS_MIXER_MATH_H
#define LIND_KERNELS_MIXER_MATH_H

#include <math.h>
#include <string.h>

#ifdef __CUDACC__
#define LIND_HD __host__ __device__
#else
#define LIND_HD
#endif

/* ---- activations ----------------------------------------------------- */

/* e^x in float without library calls or branches, so loops over it
 * vectorize on the CPU and it costs a few FMAs on the GPU: x = n·ln2 + r with
 * |r| ≤ ln2/2 (Cody–Waite split of ln2), e^r by its degree-7 Taylor
 * polynomial (truncation < 6e-9 relative), 2^n put in the exponent bits.
 * n is rounded by adding 1.5·2^23, which leaves it in the low bits of the
 * sum: no float-to-int conversion, so a NaN input gives NaN, not UB.
 * Inputs are clamped to [−87, 88] (results stay normal and finite). */
LIND_HD static inline float lind_expf(float x) {
    x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
    const float magic = 12582912.0f;   /* 1.5·2^23 */
    float t = x * 1.44269504088896341f + magic;
    float n = t - magic;
    float r = fmaf(n, -0.693145751953125f, x);
    r = fmaf(n, -1.428606765330187e-6f, r);
    float p = 1.0f / 5040.0f + r * (1.0f / 40320.0f);
    p = fmaf(p, r, 1.0f / 720.0f);
    p = fmaf(p, r, 1.0f / 120.0f);
    p = fmaf(p, r, 1.0f / 24.0f);
    p = fmaf(p, r, 1.0f / 6.0f);
    p = fmaf(p, r, 0.5f);
    p = fmaf(p, r, 1.0f);
    p = fmaf(p, r, 1.0f);
    unsigned int tb, mb, bits;
    memcpy(&tb, &t, sizeof tb);
    memcpy(&mb, &magic, sizeof mb);
    bits = (tb - mb + 127u) << 23;   /* 2^n */
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

/* φ(x) = elu(x) + 1: x + 1 for x > 0, e^x otherwise. Always > 0. */
LIND_HD static inline float lind_elu1(float x) {
    return x > 0.0f ? x + 1.0f : lind_expf(x);
}

/* e^x in double, the same construction as lind_expf with a degree-13
 * Taylor polynomial (truncation < 1e-17 relative) and a two-constant split
 * of ln2: within a few ulp of exp(), branch-free, NaN in gives NaN out.
 * Clamped to [−708, 709]. */
LIND_HD static inline double lind_exp(double x) {
    x = x < -708.0 ? -708.0 : (x > 709.0 ? 709.0 : x);
    const double magic = 6755399441055744.0;   /* 1.5·2^52 */
    double t = x * 1.4426950408889634074 + magic;
    double n = t - magic;
    double r = fma(n, -6.93147180369123816490e-01, x);
    r = fma(n, -1.90821492927058770002e-10, r);
    double p = 1.0 / 6227020800.0;
    p = fma(p, r, 1.0 / 479001600.0);
    p = fma(p, r, 1.0 / 39916800.0);
    p = fma(p, r, 1.0 / 3628800.0);
    p = fma(p, r, 1.0 / 362880.0);
    p = fma(p, r, 1.0 / 40320.0);
    p = fma(p, r, 1.0 / 5040.0);
    p = fma(p, r, 1.0 / 720.0);
    p = fma(p, r, 1.0 / 120.0);
    p = fma(p, r, 1.0 / 24.0);
    p = fma(p, r, 1.0 / 6.0);
    p = fma(p, r, 0.5);
    p = fma(p, r, 1.0);
    p = fma(p, r, 1.0);
    unsigned long long tb, mb, bits;
    memcpy(&tb, &t, sizeof tb);
    memcpy(&mb, &magic, sizeof mb);
    bits = (tb - mb + 1023ull) << 52;   /* 2^n */
    double scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

/* GELU, erf form: x·Φ(x) with Φ(x) = ½(1 + erf(x/√2)). erfc(z) for z ≥ 0 is
 * Abramowitz & Stegun 7.1.26, t·(a1 + t(a2 + …)) e^{−z²} with t = 1/(1+pz)
 * (absolute error ≤ 1.5e-7); Φ is taken from erfc on both sides, so there is
 * no cancellation for negative x. Branch-free: vectorizes on the CPU. */
LIND_HD static inline float lind_gelu_erf(float x) {
    float z = fabsf(x) * 0.70710678118654752f;
    float t = 1.0f / fmaf(0.3275911f, z, 1.0f);
    float poly = fmaf(t, 1.061405429f, -1.453152027f);
    poly = fmaf(poly, t, 1.421413741f);
    poly = fmaf(poly, t, -0.284496736f);
    poly = fmaf(poly, t, 0.254829592f);
    float half_erfc = 0.5f * poly * t * lind_expf(-z * z);
    return x * (x >= 0.0f ? 1.0f - half_erfc : half_erfc);
}

LIND_HD static inline float lind_sigmoid(float x) {
    return 1.0f / (1.0f + lind_expf(-x));
}

/* ---- token shift ------------------------------------------------------- */

/* μ⊙h_t + (1−μ)⊙h_{t−1}, written as prev + μ(h − prev). */
/* RWKV's channel-mix key activation: max(0, x)². */
LIND_HD static inline float lind_relu2(float x) {
    float r = x > 0.0f ? x : 0.0f;
    return r * r;
}

LIND_HD static inline float lind_shift_mix(float h, float prev, float mu) {
    return prev + mu * (h - prev);
}

/* ---- layer norm --------------------------------------------------------- */

/* Per element once the row statistics are known: (x − mean)·rstd·w + b,
 * rstd = 1/√(var + eps), var the biased (1/d) variance. */
LIND_HD static inline float lind_ln_apply(float x, float mean, float rstd, float w, float b) {
    return (x - mean) * rstd * w + b;
}

LIND_HD static inline float lind_ln_rstd(float var, float eps) {
    return 1.0f / sqrtf(var + eps);
}

/* ---- linear attention (Katharopoulos, with per-head decay γ) ------------
 *
 * State of one head: S[i][j] (double, dh × dh, row-major: i indexes φ(k), j
 * indexes v) and z[i] (double, dh). One step with φk = φ(k), φq = φ(q):
 *   S ← γS + φk vᵀ,   z ← γz + φk,   o_j = (Σ_i φq_i S[i][j]) / (Σ_i φq_i z_i + eps)
 * The new S and z include the current token. */

/* Update column j of S (elements S[i·ld + j], i < dh) and return the
 * numerator Σ_i φq_i S[i][j] over the updated column. Each S element is read
 * once and written once. A CPU loop may instead run i outer, j inner (for
 * vectorization) with lind_lin_s(): the per-element operations and the
 * i-order of each numerator sum are the same, so results are identical. */
/* One element of the S update: γ·s + φk_i·v_j (fp64). */
LIND_HD static inline double lind_lin_s(double s, double gamma, float phik_i, float v_j) {
    return gamma * s + (double)phik_i * (double)v_j;
}

LIND_HD static inline double lind_lin_column(double *S, int ld, int j, int dh,
                                             const float *phik, const float *phiq,
                                             float v_j, double gamma) {
    double num = 0.0;
    for (int i = 0; i < dh; i++) {
        double s = lind_lin_s(S[(long)i * ld + j], gamma, phik[i], v_j);
        S[(long)i * ld + j] = s;
        num += (double)phiq[i] * s;
    }
    return num;
}

/* Update z_i in place and return its term φq_i·z_i of the denominator. */
LIND_HD static inline double lind_lin_z(double *z_i, float phik_i, float phiq_i, double gamma) {
    double z = gamma * *z_i + (double)phik_i;
    *z_i = z;
    return (double)phiq_i * z;
}

/* The head output from numerator and denominator sums. */
LIND_HD static inline float lind_lin_out(double num, double den, float eps) {
    return (float)(num / (den + (double)eps));
}

/* ---- AFT with exponential position bias (RWKV-4 form) -------------------
 *
 * Per channel, with decay w ≥ 0 and bonus u:
 *   wkv_t = (Σ_{i<t} e^{−(t−1−i)w + k_i} v_i + e^{u+k_t} v_t)
 *         / (Σ_{i<t} e^{−(t−1−i)w + k_i}     + e^{u+k_t})
 * The state keeps the two past sums scaled by e^{−max}: num = a·e^{−max},
 * den = b·e^{−max}, so no exponential ever overflows whatever k is. A zeroed
 * state (num = den = max = 0) is the empty history: den == 0 is treated as
 * "no past terms" (max is then ignored), so it is valid even for k ≪ 0.
 * After the first token den ≥ 1 (the largest term is scaled to 1).
 *
 * Returns wkv_t (before the σ(r) gate) and advances the state:
 *   a ← e^{−w}·a + e^{k}·v,   b ← e^{−w}·b + e^{k}.
 * Returns NaN when the advanced state is not finite (see the end). */
LIND_HD static inline float lind_aft_channel(double *num, double *den, double *mx,
                                             float k, float v, float w, float u) {
    double a = *num, b = *den, p = *mx;
    int empty = !(b > 0.0);
    /* Output: past sums plus the current token with its bonus. Of the two
     * scale factors e^{p−q} and e^{uk−q} (q the larger exponent) one is 1,
     * so one exp of −|p − uk| suffices. Written without branches so a CPU
     * loop over channels vectorizes. */
    double uk = (double)u + (double)k;
    double e = lind_exp(-fabs(p - uk));
    double e1 = empty ? 0.0 : (p >= uk ? 1.0 : e);
    double e2 = empty ? 1.0 : (p >= uk ? e : 1.0);
    double wkv = (e1 * a + e2 * (double)v) / (e1 * b + e2);
    /* State: decay the past by e^{−w}, add the current token without bonus. */
    double pw = p - (double)w, kk = (double)k;
    double f = lind_exp(-fabs(pw - kk));
    double f1 = empty ? 0.0 : (pw >= kk ? 1.0 : f);
    double f2 = empty ? 1.0 : (pw >= kk ? f : 1.0);
    *num = f1 * a + f2 * (double)v;
    *den = f1 * b + f2;
    *mx = empty ? kk : (pw >= kk ? pw : kk);
    /* A non-finite key or value (k = +inf makes max +inf; a second one then
     * gives inf − inf) leaves a state no later token can repair, while the
     * output may still look finite (a past of +inf keys outweighs every new
     * token). Make it visible: s − s is 0 for a finite s and NaN otherwise,
     * so the output turns NaN exactly when the new state is not finite, and
     * the step's non-finite check (model_forward) fails that session's turn.
     * Branch-free, so the loop still vectorizes. */
    double bad = (*num - *num) + (*den - *den) + (*mx - *mx);
    return (float)(wkv + bad);
}

/* ---- short causal convolution (Mamba / Gated DeltaNet) -----------------
 *
 * Depthwise over channels, kernel K: y_t[c] = Σ_{j<K} w[c][j]·x_{t−(K−1)+j}[c]
 * (w[c][K−1] weighs the current input, as PyTorch's conv1d with K−1 left
 * padding). Per channel the state is a ring of its last K−1 inputs, ring[q]
 * for q < K−1, shared head index p (the oldest entry); a zeroed ring with
 * p = 0 is an all-zero past. Returns y_t before any activation, summing j in
 * order; the caller then stores x at ring[p] and advances p. */
LIND_HD static inline float lind_conv_channel(const float *w, const float *ring, int p, float x, int K) {
    float acc = 0.0f;
    int q = p;
    for (int j = 0; j < K - 1; j++) {
        acc = fmaf(w[j], ring[q], acc);
        q = q + 1 == K - 1 ? 0 : q + 1;
    }
    return fmaf(w[K - 1], x, acc);
}

/* SiLU, x·σ(x). */
LIND_HD static inline float lind_silu(float x) {
    return x / (1.0f + lind_expf(-x));
}

/* ---- gated delta rule (Gated DeltaNet; DeltaNet with α = 1) -------------
 *
 * Per head, with q and k L2-normalized (q also scaled by dh^−½), β ∈ (0, 1)
 * and gate α ∈ (0, 1]:
 *   S_t = α S_{t−1} (I − β k kᵀ) + β v kᵀ,   o = S_t q
 * which is, with the pseudo value u = β (v − α S_{t−1} k):
 *   S_t = α S_{t−1} + u kᵀ
 * State of one head: S[i][j] (double, dh × dh, row-major: i indexes k, j
 * indexes v — the linear mixer's layout). Column j of S is all that o_j
 * needs: it is read once for (S k)_j, then updated and read for o_j. Sums
 * over i go in i order. */

#define LIND_L2_EPS 1e-6   /* inside the √ of the q/k L2 norms (as FLA's l2norm) */

/* 1/‖x‖ from Σx², for the L2 norms of q and k. */
LIND_HD static inline double lind_l2_rscale(double sumsq) {
    return 1.0 / sqrt(sumsq + LIND_L2_EPS);
}

/* β = σ(x), in double. */
LIND_HD static inline double lind_delta_beta(float x) {
    return 1.0 / (1.0 + lind_exp(-(double)x));
}

/* α = exp(−A·softplus(x + bias)) with A = exp(A_log) > 0 (Mamba-2's
 * discretized decay, as Gated DeltaNet); softplus(z) = max(z, 0) +
 * log1p(e^{−|z|}) never overflows. */
LIND_HD static inline double lind_delta_alpha(float x, float A, float bias) {
    double z = (double)x + (double)bias;
    double sp = (z > 0.0 ? z : 0.0) + log1p(lind_exp(-fabs(z)));
    return lind_exp(-(double)A * sp);
}

/* u_j = β (v_j − α (S k)_j). */
LIND_HD static inline double lind_delta_u(double sk_j, float v_j, double alpha, double beta) {
    return beta * ((double)v_j - alpha * sk_j);
}

/* One element of the S update: α·s + k_i·u_j. */
LIND_HD static inline double lind_delta_s(double s, double alpha, double k_i, double u_j) {
    return alpha * s + k_i * u_j;
}

/* Column j of one head (elements S[i·ld + j], i < dh): reads it for (S k)_j,
 * updates it and returns o_j = Σ_i q_i S_t[i][j]. A CPU loop may instead run
 * i outer, j inner in two passes with lind_delta_u() and lind_delta_s(): the
 * same operations in the same i-order, so identical results. */
LIND_HD static inline double lind_delta_column(double *S, int ld, int j, int dh, const double *k, const double *q,
                                               float v_j, double alpha, double beta) {
    double sk = 0.0;
    for (int i = 0; i < dh; i++) sk += S[(long)i * ld + j] * k[i];
    double u = lind_delta_u(sk, v_j, alpha, beta), o = 0.0;
    for (int i = 0; i < dh; i++) {
        double s = lind_delta_s(S[(long)i * ld + j], alpha, k[i], u);
        S[(long)i * ld + j] = s;
        o += q[i] * s;
    }
    return o;
}

/* The head output's RMS norm: o·rs·w with rs = 1/√(Σo²/dh + eps). */
LIND_HD static inline double lind_rms_rscale(double sumsq, int n, float eps) {
    return 1.0 / sqrt(sumsq / (double)n + (double)eps);
}

LIND_HD static inline float lind_rms_apply(double o, double rs, float w) {
    return (float)(o * rs * (double)w);
}

#endif
