/* kernels/mixer_math.h — the per-element math of lind's model, one definition
 * compiled both as C (kernels/cpu/) and as CUDA (kernels/cuda/).
 *
 * Everything here is a pure function of its arguments (plus the state it is
 * explicitly handed), so the two backends agree on what a step computes and
 * the tests' reference (tests/test_core_parallel.c) can check the formulas
 * once. Accumulators are fp64 (see docs/NUMERICS.md): inputs and outputs of
 * a step are fp32, the sums that grow with stream length are double (the
 * sums of a decaying state are computed in double and may be stored as
 * float: lind_aft_channel_f32, lind_lin_column_f32, RWKV-7, Mamba-2).
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
LIND_HD static inline float lind_expf(float x)
{
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
LIND_HD static inline float lind_elu1(float x)
{
    return x > 0.0f ? x + 1.0f : lind_expf(x);
}

/* e^x in double, the same construction as lind_expf with a degree-13
 * Taylor polynomial (truncation < 1e-17 relative) and a two-constant split
 * of ln2: within a few ulp of exp(), branch-free, NaN in gives NaN out.
 * Clamped to [−708, 709]. */
LIND_HD static inline double lind_exp(double x)
{
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
LIND_HD static inline float lind_gelu_erf(float x)
{
    float z = fabsf(x) * 0.70710678118654752f;
    float t = 1.0f / fmaf(0.3275911f, z, 1.0f);
    float poly = fmaf(t, 1.061405429f, -1.453152027f);
    poly = fmaf(poly, t, 1.421413741f);
    poly = fmaf(poly, t, -0.284496736f);
    poly = fmaf(poly, t, 0.254829592f);
    float half_erfc = 0.5f * poly * t * lind_expf(-z * z);
    return x * (x >= 0.0f ? 1.0f - half_erfc : half_erfc);
}

LIND_HD static inline float lind_sigmoid(float x)
{
    return 1.0f / (1.0f + lind_expf(-x));
}

/* max(0, x)²: RWKV-4's channel-mix key activation. */
LIND_HD static inline float lind_relu2(float x)
{
    float r = x > 0.0f ? x : 0.0f;
    return r * r;
}

/* ---- half-precision weights --------------------------------------------- */

/* The fp32 value of bfloat16 bits (exact: bf16 is fp32's top half). */
LIND_HD static inline float lind_bf16_to_float(unsigned short h)
{
    unsigned int bits = (unsigned int)h << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* The fp32 value of IEEE binary16 bits: exact for every finite value
 * (subnormals included) and ±inf, the values vcvtph2ps and __half2float
 * give; a NaN stays a NaN. */
LIND_HD static inline float lind_f16_to_float(unsigned short h)
{
    unsigned int sign = (unsigned int)(h & 0x8000u) << 16, e = (h >> 10) & 0x1Fu, m = h & 0x3FFu, bits;
    if (e == 0x1Fu) {
        bits = sign | 0x7F800000u | (m << 13);             /* inf / NaN (payload kept) */
    } else if (e) {
        bits = sign | ((e + 112u) << 23) | (m << 13);       /* normal: rebias 15 → 127 */
    } else if (m) {                                       /* subnormal: m·2^-24, normalized */
        int sh = 0;
        while (!(m & 0x400u)) {
            m <<= 1;
            sh++;
        }
        bits = sign | ((unsigned int)(113 - sh) << 23) | ((m & 0x3FFu) << 13);
    } else {
        bits = sign;                                      /* ±0 */
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* ---- token shift ------------------------------------------------------- */

/* μ⊙h_t + (1−μ)⊙h_{t−1}, written as prev + μ(h − prev). */
LIND_HD static inline float lind_shift_mix(float h, float prev, float mu)
{
    return prev + mu * (h - prev);
}

/* ---- layer norm --------------------------------------------------------- */

/* Per element once the row statistics are known: (x − mean)·rstd·w + b,
 * rstd = 1/√(var + eps), var the biased (1/d) variance. */
LIND_HD static inline float lind_ln_apply(float x, float mean, float rstd, float w, float b)
{
    return (x - mean) * rstd * w + b;
}

LIND_HD static inline float lind_ln_rstd(float var, float eps)
{
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
LIND_HD static inline double lind_lin_s(double s, double gamma, float phik_i, float v_j)
{
    return gamma * s + (double)phik_i * (double)v_j;
}

LIND_HD static inline double lind_lin_column(double *S, int ld, int j, int dh,
                                             const float *phik, const float *phiq,
                                             float v_j, double gamma)
{
    double num = 0.0;
    for (int i = 0; i < dh; i++) {
        double s = lind_lin_s(S[(long)i * ld + j], gamma, phik[i], v_j);
        S[(long)i * ld + j] = s;
        num += (double)phiq[i] * s;
    }
    return num;
}

/* lind_lin_column() on a float S, for a decaying state (RetNet's retention
 * where every head forgets: docs/NUMERICS.md): each element computed in
 * double as lind_lin_s(), stored rounded once, and the numerator summed from
 * the unrounded doubles in the same i-order. */
LIND_HD static inline double lind_lin_column_f32(float *S, int ld, int j, int dh,
                                                 const float *phik, const float *phiq,
                                                 float v_j, double gamma)
{
    double num = 0.0;
    for (int i = 0; i < dh; i++) {
        double s = lind_lin_s((double)S[(long)i * ld + j], gamma, phik[i], v_j);
        S[(long)i * ld + j] = (float)s;
        num += (double)phiq[i] * s;
    }
    return num;
}

/* Update z_i in place and return its term φq_i·z_i of the denominator. */
LIND_HD static inline double lind_lin_z(double *z_i, float phik_i, float phiq_i, double gamma)
{
    double z = gamma * *z_i + (double)phik_i;
    *z_i = z;
    return (double)phiq_i * z;
}

/* The head output from numerator and denominator sums. */
LIND_HD static inline float lind_lin_out(double num, double den, float eps)
{
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
                                             float k, float v, float w, float u)
{
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

/* lind_aft_channel() on a float state, for a decaying channel
 * (docs/NUMERICS.md, "Decaying states kept in fp32"): computed in double,
 * each element rounded once per step. The max is rounded first and the sums
 * multiplied by e^{max − fl(max)}, so the three floats still stand for the
 * same a and b: the max's rounding (relative to |max|, which can be tens)
 * costs nothing, and only num and den carry one float rounding each. The
 * factor is taken as 1 + δ: |δ| ≤ 2^-24·|max|, so δ²/2 is far below a
 * float's precision. A non-finite max gives δ = NaN, so the state stays
 * visibly bad (the output is NaN already). */
LIND_HD static inline void lind_aft_round_f32(double a, double b, double p, float *num, float *den, float *mx)
{
    float p32 = (float)p;
    double s = 1.0 + (p - (double)p32);
    *num = (float)(a * s);
    *den = (float)(b * s);
    *mx = p32;
}

LIND_HD static inline float lind_aft_channel_f32(float *num, float *den, float *mx, float k, float v, float w, float u)
{
    double a = *num, b = *den, p = *mx;
    float o = lind_aft_channel(&a, &b, &p, k, v, w, u);
    lind_aft_round_f32(a, b, p, num, den, mx);
    return o;
}

/* ---- short causal convolution (Mamba / Gated DeltaNet) -----------------
 *
 * Depthwise over channels, kernel K: y_t[c] = Σ_{j<K} w[c][j]·x_{t−(K−1)+j}[c]
 * (w[c][K−1] weighs the current input, as PyTorch's conv1d with K−1 left
 * padding). Per channel the state is a ring of its last K−1 inputs, ring[q]
 * for q < K−1, shared head index p (the oldest entry); a zeroed ring with
 * p = 0 is an all-zero past. Returns y_t before any activation, summing j in
 * order; the caller then stores x at ring[p] and advances p. */
LIND_HD static inline float lind_conv_channel(const float *w, const float *ring, int p, float x, int K)
{
    float acc = 0.0f;
    int q = p;
    for (int j = 0; j < K - 1; j++) {
        acc = fmaf(w[j], ring[q], acc);
        q = q + 1 == K - 1 ? 0 : q + 1;
    }
    return fmaf(w[K - 1], x, acc);
}

/* SiLU, x·σ(x). */
LIND_HD static inline float lind_silu(float x)
{
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
LIND_HD static inline double lind_l2_rscale(double sumsq)
{
    return 1.0 / sqrt(sumsq + LIND_L2_EPS);
}

/* β = σ(x), in double. */
LIND_HD static inline double lind_delta_beta(float x)
{
    return 1.0 / (1.0 + lind_exp(-(double)x));
}

/* α = exp(−A·softplus(x + bias)) with A = exp(A_log) > 0 (Mamba-2's
 * discretized decay, as Gated DeltaNet); softplus(z) = max(z, 0) +
 * log1p(e^{−|z|}) never overflows. */
LIND_HD static inline double lind_delta_alpha(float x, float A, float bias)
{
    double z = (double)x + (double)bias;
    double sp = (z > 0.0 ? z : 0.0) + log1p(lind_exp(-fabs(z)));
    return lind_exp(-(double)A * sp);
}

/* u_j = β (v_j − α (S k)_j). */
LIND_HD static inline double lind_delta_u(double sk_j, float v_j, double alpha, double beta)
{
    return beta * ((double)v_j - alpha * sk_j);
}

/* One element of the S update: α·s + k_i·u_j. */
LIND_HD static inline double lind_delta_s(double s, double alpha, double k_i, double u_j)
{
    return alpha * s + k_i * u_j;
}

/* Column j of one head (elements S[i·ld + j], i < dh): reads it for (S k)_j,
 * updates it and returns o_j = Σ_i q_i S_t[i][j]. A CPU loop may instead run
 * i outer, j inner in two passes with lind_delta_u() and lind_delta_s(): the
 * same operations in the same i-order, so identical results. */
LIND_HD static inline double lind_delta_column(double *S, int ld, int j, int dh, const double *k, const double *q,
                                               float v_j, double alpha, double beta)
{
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
LIND_HD static inline double lind_rms_rscale(double sumsq, int n, float eps)
{
    return 1.0 / sqrt(sumsq / (double)n + (double)eps);
}

LIND_HD static inline float lind_rms_apply(double o, double rs, float w)
{
    return (float)(o * rs * (double)w);
}

/* ---- sliding-window softmax attention (the `window` mixer) ---------------
 * Per head, at absolute position t (the token's own key and value already
 * stored): softmax(q·k_s/√dh + bias(t − s)) over the visible positions s —
 * the window t, t − dil, …, t − (w−1)·dil (those ≥ 0) and the global
 * positions 0 … g−1 (those ≤ t) not already in the window. Keys of window
 * positions come from a ring of L = w·dil rows, row s mod L; keys of global
 * positions from their own rows. ALiBi: bias = −slope·min(t − s, L) (a
 * global token beyond the window sits at distance L, so it never fades);
 * RoPE: slope 0, q and k rotated by their absolute positions. Scores and
 * sums are double; two passes (max, then the weighted sum). */

/* x rotated by angle pos·base^(−2i/dh) on the pairs (i, i + dh/2) (RoPE,
 * the GPT-NeoX layout); the angle is formed in double from the 64-bit
 * position. dh even. */
LIND_HD static inline void lind_rope(float *y, const float *x, unsigned long long pos, int dh, double base)
{
    int half = dh / 2;
    for (int i = 0; i < half; i++) {
        double th = (double)pos * exp(-2.0 * (double)i / (double)dh * log(base));
        double c = cos(th), s = sin(th), a = x[i], b = x[i + half];
        y[i] = (float)(a * c - b * s);
        y[i + half] = (float)(a * s + b * c);
    }
}

/* The e-th visible key of position t (window keys first, nearest first,
 * then the global ones in order): returns its row (≥ 0, in the ring when
 * *in_ring, else in the globals) and its distance t − s, or −1 for a global
 * position that is also in the window (skipped). e < lind_window_count(). */
LIND_HD static inline unsigned long long lind_window_nwin(unsigned long long t, int w, int dil)
{
    unsigned long long n = t / (unsigned long long)dil + 1;
    return n < (unsigned long long)w ? n : (unsigned long long)w;
}
LIND_HD static inline unsigned long long lind_window_nglob(unsigned long long t, int g)
{
    return t + 1 < (unsigned long long)g ? t + 1 : (unsigned long long)g;
}
LIND_HD static inline long long lind_window_key(unsigned long long t, unsigned long long e, int w, int dil,
                                                int *in_ring, unsigned long long *dist)
{
    unsigned long long nw = lind_window_nwin(t, w, dil), L = (unsigned long long)w * (unsigned long long)dil;
    if (e < nw) {
        unsigned long long s = t - e * (unsigned long long)dil;
        *in_ring = 1;
        *dist = t - s;
        return (long long)(s % L);
    }
    unsigned long long s = e - nw, dd = t - s;
    if (dd % (unsigned long long)dil == 0 && dd / (unsigned long long)dil < (unsigned long long)w) return -1;
    *in_ring = 0;
    *dist = dd;
    return (long long)s;
}

/* One head of one row: out[j] (dh floats) from q (dh, already rotated for
 * RoPE) over the ring (keys at rk, values at rv, row r at r·ld) and the
 * global rows (gk, gv, the same stride); acc holds dh doubles of scratch. */
LIND_HD static inline void lind_window_head(float *out, double *acc, const float *q, const float *rk,
                                            const float *rv, const float *gk, const float *gv, long ld,
                                            unsigned long long t, int w, int dil, int g, double slope, int dh)
{
    unsigned long long n = lind_window_nwin(t, w, dil) + lind_window_nglob(t, g);
    double L = (double)w * (double)dil, scale = 1.0 / sqrt((double)dh), mx = -1e300, l = 0.0;
    for (int pass = 0; pass < 2; pass++) {
        for (int j = 0; j < dh; j++) acc[j] = 0.0;
        for (unsigned long long e = 0; e < n; e++) {
            int ring;
            unsigned long long dist;
            long long row = lind_window_key(t, e, w, dil, &ring, &dist);
            if (row < 0) continue;
            const float *k = (ring ? rk : gk) + row * ld, *v = (ring ? rv : gv) + row * ld;
            double sc = 0.0;
            for (int i = 0; i < dh; i++) sc += (double)q[i] * (double)k[i];
            sc = sc * scale - slope * ((double)dist < L ? (double)dist : L);
            if (pass == 0) {
                mx = sc > mx ? sc : mx;
            } else {
                double p = exp(sc - mx);
                l += p;
                for (int j = 0; j < dh; j++) acc[j] += p * (double)v[j];
            }
        }
    }
    for (int j = 0; j < dh; j++) out[j] = (float)(acc[j] / l);
}

/* ---- AFT-local / AFT-conv (the `aft_local` and `aft_conv` mixers) --------
 * One channel at position t with window s ≥ 2 and position biases
 * w[0 … s−1] (w[j] for the key j tokens back):
 *   y_t = Σ_{t'≤t} e^{k_t' + b(t−t')} v_t' / Σ_{t'≤t} e^{k_t' + b(t−t')},
 *   b(j) = w[j] for j < s, 0 beyond
 * The window's last s−1 keys and values sit in a ring (rk, rv; position p
 * at p mod (s−1)); the tokens that have left the window are summed in num,
 * den (double, scaled by e^{−max}, den ≥ 1 once non-empty, den = 0 the
 * empty history) with their running max mx. After y, the oldest window
 * token (position t−s+1) leaves into the sums and the current one takes
 * its ring entry. Returns y (before the σ(q) gate). */
LIND_HD static inline double lind_aftw_channel(double *num, double *den, double *mx, float *rk, float *rv,
                                               unsigned long long t, float k, float v, const float *w, int s)
{
    unsigned long long S1 = (unsigned long long)(s - 1), np = t < S1 ? t : S1;
    double M = (double)k + (double)w[0];
    if (*den > 0.0 && *mx > M) M = *mx;
    for (unsigned long long j = 1; j <= np; j++) {
        double e = (double)rk[(t - j) % S1] + (double)w[j];
        M = e > M ? e : M;
    }
    double n = 0.0, dd = 0.0;
    if (*den > 0.0) {
        double f = exp(*mx - M);
        n = *num * f;
        dd = *den * f;
    }
    double e0 = exp((double)k + (double)w[0] - M);
    n += e0 * (double)v;
    dd += e0;
    for (unsigned long long j = 1; j <= np; j++) {
        unsigned long long p = (t - j) % S1;
        double e = exp((double)rk[p] + (double)w[j] - M);
        n += e * (double)rv[p];
        dd += e;
    }
    unsigned long long slot = t % S1;
    if (t >= S1) {
        double ke = (double)rk[slot], ve = (double)rv[slot];
        if (*den > 0.0) {
            double m2 = ke > *mx ? ke : *mx;
            double f = exp(*mx - m2), e = exp(ke - m2);
            *num = *num * f + e * ve;
            *den = *den * f + e;
            *mx = m2;
        } else {
            *num = ve;
            *den = 1.0;
            *mx = ke;
        }
    }
    rk[slot] = k;
    rv[slot] = v;
    return n / dd;
}

/* ---- retention (RetNet) --------------------------------------------------
 *
 * Per head, no feature map and no normalizer, decay γ ∈ (0, 1]:
 *   S ← γS + k vᵀ,   o_j = dh^−½ Σ_i q_i S[i][j]
 * (the linear mixer's S update and column sum with φ = identity:
 * lind_lin_s() / lind_lin_column() with φk = k, φq = q; on a float S,
 * lind_lin_column_f32()), then the head's
 * group norm and the swish gate, per element: */

/* 1/√(var + eps) of a head's group norm (var the biased variance). */
LIND_HD static inline double lind_gn_rstd(double var, float eps)
{
    return 1.0 / sqrt(var + (double)eps);
}

/* ((o − mean)·rstd·w + b) · SiLU(g). */
LIND_HD static inline float lind_retention_out(double o, double mean, double rstd, float w, float b, float g)
{
    float n = (float)((o - mean) * rstd) * w + b;
    return n * lind_silu(g);
}

/* ---- FAVOR+ positive random features (Performer) --------------------------
 *
 * φ_i(x) = exp(ω_iᵀx̂ − ‖x̂‖²/2)/√m with x̂ = x·dh^−¼, so that
 * E[φ(q)ᵀφ(k)] = exp(qᵀk/√dh). Written in log form u_i, shifted by a
 * constant c: φ_i ∝ e^{u_i}, u_i = ω_iᵀx̂ − ‖x̂‖²/2 − c ≤ 0. The shift
 * cancels in the ratio o = Σ φq·φk v / Σ φq·φk as long as it is the same for
 * every term of a sum: for a query, c = the row's own largest exponent
 * (its largest feature is then 1); for keys, c = max_i ‖ω_i‖²/2, a bound
 * of every key's exponent (ω_iᵀx̂ − ‖x̂‖²/2 = ‖ω_i‖²/2 − ‖x̂ − ω_i‖²/2), fixed
 * by the stored projection — so no feature ever exceeds 1 and the running
 * sums grow at most by 1·|v| per token. The 1/√m cancels too. The
 * exponent is computed in double; u is returned as float clamped to ≤ 0,
 * and e^u is taken by lind_elu1() (= e^u for u ≤ 0) inside the linear
 * mixer's step. Features below e^−87 are raised to e^−87 (lind_expf's
 * clamp): a key that far from every ω gets a weight 1e-38 instead of less. */
LIND_HD static inline void lind_favor_head(float *out, const float *x, const float *omega, int dh, int m, int is_q,
                                           float ck)
{
    double s = 1.0 / sqrt(sqrt((double)dh)), half = 0.0;
    for (int i = 0; i < dh; i++) half += ((double)x[i] * s) * ((double)x[i] * s);
    half *= 0.5;
    double c = (double)ck;
    if (is_q) {
        c = -1e308;
        for (int f = 0; f < m; f++) {
            double dot = 0.0;
            for (int i = 0; i < dh; i++) dot += (double)omega[(long)f * dh + i] * (double)x[i];
            double e = dot * s - half;
            c = e > c ? e : c;
        }
    }
    for (int f = 0; f < m; f++) {
        double dot = 0.0;
        for (int i = 0; i < dh; i++) dot += (double)omega[(long)f * dh + i] * (double)x[i];
        double u = dot * s - half - c;
        out[f] = (float)(u < 0.0 ? u : 0.0);
    }
}

/* ---- cosFormer's cos re-weighting ----------------------------------------
 *
 * Token i attends to j ≤ i with weight relu(q_i)·relu(k_j) · w(i − j).
 * Horizon form (the paper's, M the horizon): w = cos(π/2·(i − j)/M) =
 * cos θ_i cos θ_j + sin θ_i sin θ_j with θ_t = π/2·t/M, so the state is two
 * (S, z) pairs whose features are relu(x)·cos θ_t and relu(x)·sin θ_t. It is
 * a non-negative weight only while i − j ≤ M; past that it turns negative
 * and the normalizer can reach zero, so this form refuses positions ≥ M.
 * Periodic form (sound in an endless stream): w = 1 + cos(π·(i − j)/M) ≥ 0,
 * θ_t = π·(t mod 2M)/M, a third pair with feature relu(x)·1; the recency
 * weighting repeats with period 2M (w = 2 at distance 0, 0 at M, 2 at 2M).
 * The angle is computed from the integer position reduced exactly, in double.
 * Pair p's multiplier: p = 0 cos θ, 1 sin θ, 2 one. */
#define LIND_COS_PAIRS_MAX 3

LIND_HD static inline double lind_cos_theta(long long t, int M, int periodic)
{
    const double pi = 3.14159265358979323846;
    if (periodic) return pi * (double)(t % (2LL * M)) / (double)M;
    return 0.5 * pi * (double)t / (double)M;
}

LIND_HD static inline float lind_cos_mult(double theta, int p)
{
    return p == 0 ? (float)cos(theta) : p == 1 ? (float)sin(theta) : 1.0f;
}

/* φ for pair p: multiplier · relu(x), in float. */
LIND_HD static inline float lind_cos_feature(float x, float mult)
{
    return (x > 0.0f ? x : 0.0f) * mult;
}

/* ---- causal Linformer ------------------------------------------------------
 *
 * Per head, projection length kp, maximum length N, position-indexed rows
 * e_t, f_t (kp each: row t of the stored [N × kp] projections):
 *   K̄[p] += e_t[p]·k,  V̄[p] += f_t[p]·v            (K̄, V̄ [kp × dh], fp64)
 *   s_p = q·K̄[p]/√dh,  a = softmax(s),  o_j = Σ_p a_p V̄[p][j]
 * Row p of K̄ and V̄ is updated by its owner, who also returns s_p; the
 * softmax is shifted by max_p s_p, so no exponential overflows. */
LIND_HD static inline double lind_linf_row(double *Kp, double *Vp, const float *k, const float *v, const float *q,
                                           float e, float f, int dh)
{
    double s = 0.0;
    for (int j = 0; j < dh; j++) {
        double kk = Kp[j] + (double)e * (double)k[j];
        Kp[j] = kk;
        Vp[j] = Vp[j] + (double)f * (double)v[j];
        s += (double)q[j] * kk;
    }
    return s / sqrt((double)dh);
}

/* ---- Mamba-2 (selective state space, HF modeling_mamba2's torch path) ---
 * Per head h with scalar A_h = −exp(A_log_h) < 0 and a step
 * dt = clamp(softplus(dt_raw + dt_bias), lo, hi):
 *   S ← exp(dt·A)·S + dt·x ⊗ B,   y = S·C + D·x
 * (S is P × N per head, x the head's P channels, B and C its group's N).
 * softplus as PyTorch's (threshold 20: z above it is z itself). */
LIND_HD static inline double lind_mamba2_dt(float raw, float bias, float lo, float hi)
{
    double z = (double)raw + (double)bias;
    double sp = z > 20.0 ? z : log1p(lind_exp(z));
    if (sp < (double)lo) sp = (double)lo;
    if (sp > (double)hi) sp = (double)hi;
    return sp;
}

/* One state element: S·dA + (dt·x)·B, in double. */
LIND_HD static inline double lind_mamba2_s(double s, double dA, double dtx, double b)
{
    return s * dA + dtx * b;
}

#endif
