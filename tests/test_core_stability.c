/* tests/test_core_stability.c — long streams do not freeze the state.
 *
 * With γ = 1 (and in AFT-simple) the state's sums grow without bound; a
 * float32 running sum stops absorbing terms about 2^24 times smaller than
 * itself. lind keeps these accumulators in fp64 (docs/NUMERICS.md). Here one
 * mixer's state is driven through the CPU backend's own step op for 10^8
 * steps (linear) / 10^7 (AFT-simple) and its output compared with a
 * long-double reference: relative error < 1e-5. Beside it, the same
 * recurrence with a naive float32 state must FAIL that comparison.
 *
 * Inputs: an "anchor" first token whose weight is 2^26 (linear: φ(k) = 2^26;
 * AFT: e^k with k = 20), then tokens of weight about 1 with values that
 * drift. A float32 sum is frozen by the anchor from the start, so the naive
 * state fails at any length, including the shortened runs used under
 * sanitizers (LIND_SANITIZED=1: 100× fewer steps), while fp64 absorbs every
 * term.
 *
 * RWKV-7 and Mamba-2 keep their decaying matrix states in fp32, and so do
 * RWKV-4's AFT and RetNet's retention when they decay (rwkv4_fp32_state,
 * retnet_fp32_state): their ops' stored states are compared with long
 * double over 10^7 tokens (10^8 under
 * make test-long) and must stay within 1e-5, while the same ops with the
 * decay switched off must fail (docs/NUMERICS.md, "Decaying states kept in
 * fp32"). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/mixer_math.h"
#include "tests/check.h"

static long scale_down(long n)
{
    const char *s = getenv("LIND_SANITIZED");
    return s && *s && strcmp(s, "0") ? n / 100 : n;
}

static uint64_t rng = 88172645463325252ull;
static float urand(void)   /* [0, 1) */
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)(rng >> 40) * 0x1.0p-24f;
}

static void linear_1e8(void)
{
    const long N = scale_down(100000000L);
    enum { DH = 2 };
    backend *be = NULL;
    char err[256];
    CHECK(backend_cpu_new(NULL, &be, err, sizeof err) == 0, "backend: %s", err);
    if (!be) return;
    const backend_ops *o = be->ops;
    size_t sbytes = (DH * DH + DH) * sizeof(double);
    backend_buf *in = NULL, *out = NULL;
    int slot = 0, tok = 0;
    CHECK(o->slots_reserve(be, 1, sbytes) == 0 && o->buf_new(be, 3 * DH, &in) == 0 &&
          o->buf_new(be, DH, &out) == 0 && o->begin_step(be, &slot, &tok, 1) == 0, "setup");
    const float eps = 1e-6f;
    float q[DH] = {0.3f, -0.2f}, phiq[DH];
    for (int i = 0; i < DH; i++) phiq[i] = lind_elu1(q[i]);
    long double S_ref[DH][DH] = {{0}}, z_ref[DH] = {0};
    float S32[DH][DH] = {{0}}, z32[DH] = {0};
    double worst64 = 0, worst32 = 0;
    for (long t = 0; t < N; t++) {
        float x[3 * DH], phik[DH];
        memcpy(x, q, sizeof q);
        for (int i = 0; i < DH; i++) {
            x[DH + i] = t == 0 ? 67108864.0f : -0.7f + 1.2f * urand();               /* k */
            x[2 * DH + i] = 1.0f + urand() + (float)((double)t / (double)N);       /* v */
            phik[i] = lind_elu1(x[DH + i]);
        }
        o->buf_upload(be, in, 0, x, 3 * DH);
        o->linear_step(be, in, NULL, out, 0, 1, DH, eps);
        /* reference (long double) and naive float32, same inputs */
        for (int i = 0; i < DH; i++) {
            z_ref[i] += phik[i];
            z32[i] += phik[i];
            for (int j = 0; j < DH; j++) {
                S_ref[i][j] += (long double)phik[i] * x[2 * DH + j];
                S32[i][j] += phik[i] * x[2 * DH + j];
            }
        }
        if ((t + 1) % (N / 10) == 0) {
            float got[DH];
            o->buf_download(be, out, 0, got, DH);
            long double den = eps;
            float den32 = eps;
            for (int i = 0; i < DH; i++) {
                den += phiq[i] * z_ref[i];
                den32 += phiq[i] * z32[i];
            }
            for (int j = 0; j < DH; j++) {
                long double num = 0;
                float num32 = 0;
                for (int i = 0; i < DH; i++) {
                    num += phiq[i] * S_ref[i][j];
                    num32 += phiq[i] * S32[i][j];
                }
                long double want = num / den;
                double e64 = (double)fabsl((got[j] - want) / want), e32 = (double)fabsl((num32 / den32 - want) / want);
                if (!(e64 <= worst64)) worst64 = e64;
                if (!(e32 <= worst32)) worst32 = e32;
            }
        }
    }
    printf("NOTE linear γ=1, %ld steps: fp64 state max rel err %.2e, naive fp32 %.2e\n", N, worst64, worst32);
    CHECK(worst64 < 1e-5, "fp64 state relative error %.3g ≥ 1e-5 after %ld steps", worst64, N);
    CHECK(worst32 >= 1e-5, "naive float32 state did not fail (error %.3g): the test inputs do not stress it", worst32);
    o->buf_free(be, in);
    o->buf_free(be, out);
    backend_free(be);
}

static void aft_simple_1e7(void)
{
    const long N = scale_down(10000000L);
    backend *be = NULL;
    char err[256];
    CHECK(backend_cpu_new(NULL, &be, err, sizeof err) == 0, "backend: %s", err);
    if (!be) return;
    const backend_ops *o = be->ops;
    backend_buf *in = NULL, *out = NULL;
    int slot = 0, tok = 0;
    CHECK(o->slots_reserve(be, 1, 3 * sizeof(double)) == 0 && o->buf_new(be, 3, &in) == 0 &&
          o->buf_new(be, 1, &out) == 0 && o->begin_step(be, &slot, &tok, 1) == 0, "setup");
    long double a = 0, b = 0;            /* reference sums of e^k v and e^k, exact scale */
    float na = 0, nb = 0, nm = 0;         /* naive float32 state, same max-subtracted scheme */
    int nempty = 1;
    double worst64 = 0, worst32 = 0;
    const float r = 2.0f;                 /* σ(r) gate, constant */
    for (long t = 0; t < N; t++) {
        float k = t == 0 ? 20.0f : -0.3f + 0.6f * urand();
        float v = 1.0f + urand() + (float)((double)t / (double)N);
        float x[3] = {r, k, v};
        o->buf_upload(be, in, 0, x, 3);
        o->aft_step(be, in, NULL, NULL, out, 0, 1, 0);
        /* reference output includes the current token (u = 0, w = 0) */
        a += expl((long double)k) * v;
        b += expl((long double)k);
        /* naive float32: same formulas as lind_aft_channel in float */
        float q = nempty ? k : fmaxf(nm, k);
        float e1 = nempty ? 0.0f : expf(nm - q), e2 = expf(k - q);
        float wkv32 = (e1 * na + e2 * v) / (e1 * nb + e2);
        na = e1 * na + e2 * v;
        nb = e1 * nb + e2;
        nm = q;
        nempty = 0;
        if ((t + 1) % (N / 10) == 0) {
            float got;
            o->buf_download(be, out, 0, &got, 1);
            long double want = a / b / (1 + expl(-(long double)r));
            double e64 = (double)fabsl((got - want) / want);
            double e32 = (double)fabsl((lind_sigmoid(r) * wkv32 - want) / want);
            if (!(e64 <= worst64)) worst64 = e64;
            if (!(e32 <= worst32)) worst32 = e32;
        }
    }
    printf("NOTE aft-simple, %ld steps: fp64 state max rel err %.2e, naive fp32 %.2e\n", N, worst64, worst32);
    CHECK(worst64 < 1e-5, "fp64 state relative error %.3g ≥ 1e-5 after %ld steps", worst64, N);
    CHECK(worst32 >= 1e-5, "naive float32 state did not fail (error %.3g): the test inputs do not stress it", worst32);
    o->buf_free(be, in);
    o->buf_free(be, out);
    backend_free(be);
}

/* A float state against its long-double reference (n elements): max |ΔS|
 * over max |S|. */
static double state_err(const float *got, const long double *ref, int n)
{
    long double big = 0, diff = 0;
    for (int i = 0; i < n; i++) {
        long double d = fabsl(got[i] - ref[i]);
        if (fabsl(ref[i]) > big) big = fabsl(ref[i]);
        if (!(d <= diff)) diff = d;
    }
    return (double)(diff / big);
}

/* A checkpoint's error e: into the worst so far (-1: none yet) and, the
 * first time, *first (may be NULL). */
static void checkpoint(double e, double *worst, double *first)
{
    if (*worst < 0 && first) *first = e;
    if (!(e <= *worst)) *worst = e;
}

/* RWKV-7 keeps its matrix state S in float (kernels/cpu/ops_rwkv7.c):
 * every update rounds each element once, and the decay w < 1 forgets each
 * rounding at its rate, so the error stays bounded however long the
 * stream. One head (N = 4) through the backend's rwkv7_step for `steps`
 * tokens at decay w0 (w = exp(−e^{−½}·σ(w0)) on every channel) and
 * in-context rate a = σ(a0), against the same recurrence in long double;
 * the first token is an anchor (k and v of 2^12), the others' k and v are
 * about 1. Returns the worst relative error of S (max |ΔS| / max |S|) over
 * ten checkpoints; *first the one at the first checkpoint. */
static double rwkv7_run(long steps, float w0, float a0, double *first)
{
    enum { N = 4, C = N, LDI = 6 * C };
    backend *be = NULL;
    char err[256];
    double worst = -1;
    if (backend_cpu_new(NULL, &be, err, sizeof err) != 0) { CHECK(0, "backend: %s", err); return worst; }
    const backend_ops *o = be->ops;
    CHECK(o->rwkv7_step != NULL, "the CPU backend has rwkv7_step");
    backend_buf *in = NULL, *out = NULL, *par = NULL, *w2 = NULL;
    int slot = 0, tok = 0;
    CHECK(o->slots_reserve(be, 1, N * N * sizeof(float)) == 0 && o->buf_new(be, LDI, &in) == 0 &&
          o->buf_new(be, C, &out) == 0 && o->buf_new(be, 8 * C, &par) == 0 && o->buf_new(be, C, &w2) == 0 &&
          o->begin_step(be, &slot, &tok, 1) == 0 && o->slot_zero(be, 0) == 0, "setup");
    /* par: w0, a0, v0, k_k, k_a, r_k, ln_x weight, ln_x bias */
    const float kkw = 1.0f, ka = 1.0f;
    float p[8 * C] = {0};
    for (int n = 0; n < N; n++) {
        p[n] = w0; p[C + n] = a0; p[3 * C + n] = kkw; p[4 * C + n] = ka; p[6 * C + n] = 1.0f;
    }
    o->buf_upload(be, par, 0, p, 8 * C);
    long double S[N][N] = {{0}};
    const long double wd = expl(-expl(-0.5L) / (1 + expl(-(long double)w0)));
    const long double ad = 1 / (1 + expl(-(long double)a0));
    float got[N * N];
    for (long t = 0; t < steps; t++) {
        float x[LDI] = {0};
        for (int n = 0; n < N; n++) {
            x[n] = 0.5f + urand();                                          /* r */
            x[C + n] = t == 0 ? 4096.0f : 0.5f + urand();                   /* k */
            x[2 * C + n] = t == 0 ? 4096.0f : 1.0f + urand() + (float)((double)t / (double)steps);  /* v */
            x[5 * C + n] = 1.0f;                                            /* g */
        }
        o->buf_upload(be, in, 0, x, LDI);
        CHECK(o->rwkv7_step(be, in, LDI, par, w2, 0, NULL, 0, out, 0, 1, N, 64e-5f) == 0, "rwkv7_step");
        long double kk[N], k[N], v[N], ss = 0;
        for (int n = 0; n < N; n++) {
            kk[n] = (long double)x[C + n] * kkw;
            ss += kk[n] * kk[n];
            k[n] = (long double)x[C + n] * (1 + (ad - 1) * ka);
            v[n] = x[2 * C + n];
        }
        long double nrm = sqrtl(ss);
        for (int n = 0; n < N; n++) kk[n] /= nrm > 1e-12L ? nrm : 1e-12L;
        for (int i = 0; i < N; i++) {
            long double sa = 0;
            for (int j = 0; j < N; j++) sa -= S[i][j] * kk[j];
            for (int j = 0; j < N; j++) S[i][j] = S[i][j] * wd + sa * kk[j] * ad + v[i] * k[j];
        }
        if ((t + 1) % (steps / 10) == 0) {
            o->slot_read(be, 0, got);
            checkpoint(state_err(got, &S[0][0], N * N), &worst, first);
        }
    }
    o->buf_free(be, in);
    o->buf_free(be, out);
    o->buf_free(be, par);
    o->buf_free(be, w2);
    backend_free(be);
    return worst;
}

/* The long runs: 10^8 tokens under make test-long (LIND_TEST_LONG=1),
 * 10^7 in make test; a hundredth of that under sanitizers. */
static long long_run(void)
{
    const char *l = getenv("LIND_TEST_LONG");
    return scale_down(l && *l && strcmp(l, "0") ? 100000000L : 10000000L);
}

static void rwkv7_fp32_state(void)
{
    const long n = long_run(), nc = scale_down(1000000L);
    /* w0 = −8: w = 0.99980 on every channel, a memory of about 5,000
     * tokens; a = σ(−2) = 0.12 */
    double first = 0, worst = rwkv7_run(n, -8.0f, -2.0f, &first);
    /* w0 = −30, a0 = −30: w = 1 − 6e-14 and a = 1e-13, nothing forgets or
     * removes the roundings: a float state frozen by the anchor must fail,
     * or the test could not tell */
    double undecayed = rwkv7_run(nc, -30.0f, -30.0f, NULL);
    printf("NOTE rwkv7 fp32 state, w0 -8, %ld steps: max rel err %.2e (%.2e at the first checkpoint); "
           "no decay, %ld steps: %.2e\n", n, worst, first, nc, undecayed);
    CHECK(worst >= 0 && worst < 1e-5, "fp32 state relative error %.3g ≥ 1e-5 after %ld steps", worst, n);
    CHECK(undecayed >= 1e-5, "the undecayed float state did not fail (error %.3g): the inputs do not stress it",
          undecayed);
}

/* Mamba-2 keeps S in float too (kernels/cpu/ops_mamba2.c), decayed by
 * exp(dt·A) each token. One head (P = 2, N = 4) through mamba2_step with a
 * fixed dt (dt_lo = dt_hi) and A, against long double; the first token an
 * anchor (x and B of 2^13 before SiLU). Worst relative error of S as in
 * rwkv7_run. */
static double mamba2_run(long steps, float dt, float A, double *first)
{
    enum { P = 2, N = 4, I = P, CD = I + 2 * N, LDI = CD + I + 1 };
    backend *be = NULL;
    char err[256];
    double worst = -1;
    if (backend_cpu_new(NULL, &be, err, sizeof err) != 0) { CHECK(0, "backend: %s", err); return worst; }
    const backend_ops *o = be->ops;
    CHECK(o->mamba2_step != NULL, "the CPU backend has mamba2_step");
    backend_buf *in = NULL, *out = NULL, *par = NULL;
    int slot = 0, tok = 0;
    CHECK(o->slots_reserve(be, 1, P * N * sizeof(float)) == 0 && o->buf_new(be, LDI, &in) == 0 &&
          o->buf_new(be, I, &out) == 0 && o->buf_new(be, CD + 3, &par) == 0 &&
          o->begin_step(be, &slot, &tok, 1) == 0 && o->slot_zero(be, 0) == 0, "setup");
    float p[CD + 3] = {0};   /* conv bias 0, dt_bias 0, A, D 0 */
    p[CD + 1] = A;
    o->buf_upload(be, par, 0, p, CD + 3);
    long double S[P][N] = {{0}};
    const long double dA = expl((long double)dt * A);
    float got[P * N];
    for (long t = 0; t < steps; t++) {
        float x[LDI] = {0};
        for (int c = 0; c < I + N; c++) x[c] = t == 0 ? 8192.0f : 1.0f + urand();   /* x, B */
        for (int c = I + N; c < CD; c++) x[c] = 1.0f;                                 /* C */
        o->buf_upload(be, in, 0, x, LDI);
        CHECK(o->mamba2_step(be, in, LDI, par, out, 0, 1, P, N, 1, dt, dt) == 0, "mamba2_step");
        long double u[I + N];
        for (int c = 0; c < I + N; c++) u[c] = x[c] / (1 + expl(-(long double)x[c]));   /* SiLU */
        for (int i = 0; i < P; i++)
            for (int j = 0; j < N; j++) S[i][j] = dA * S[i][j] + (long double)dt * u[i] * u[I + j];
        if ((t + 1) % (steps / 10) == 0) {
            o->slot_read(be, 0, got);
            checkpoint(state_err(got, &S[0][0], P * N), &worst, first);
        }
    }
    o->buf_free(be, in);
    o->buf_free(be, out);
    o->buf_free(be, par);
    backend_free(be);
    return worst;
}

static void mamba2_fp32_state(void)
{
    const long n = long_run(), nc = scale_down(1000000L);
    /* dt = 0.001, A = −1: exp(dt·A) = 0.999, a memory of 1,000 tokens (the
     * small end of Mamba-2's dt range [0.001, 0.1] and A = −exp(A_log) with
     * A_log ≥ 0 as initialised) */
    double first = 0, worst = mamba2_run(n, 0.001f, -1.0f, &first);
    double undecayed = mamba2_run(nc, 0.001f, 0.0f, NULL);   /* A = 0: no decay, must fail */
    printf("NOTE mamba2 fp32 state, dt 0.001 A -1, %ld steps: max rel err %.2e (%.2e at the first checkpoint); "
           "no decay, %ld steps: %.2e\n", n, worst, first, nc, undecayed);
    CHECK(worst >= 0 && worst < 1e-5, "fp32 state relative error %.3g ≥ 1e-5 after %ld steps", worst, n);
    CHECK(undecayed >= 1e-5, "the undecayed float state did not fail (error %.3g): the inputs do not stress it",
          undecayed);
}

/* RWKV-4's AFT state (num, den, max per channel) is kept in float when
 * every channel decays (recurrent/mixer_aft.c): the op computes in double
 * and rounds each element once, the max with its rounding folded into the
 * sums (lind_aft_channel_f32). One channel through the backend's aft_step
 * (float state) for `steps` tokens with decay w and bonus u = 0.5, against
 * the sums a = Σ e^{−(t−i)w + k_i} v_i and b = Σ e^{−(t−i)w + k_i} in long
 * double; the first token an anchor (k = 20: e^20 ≈ 2^29), the others' k in
 * ±0.3 and v drifting. The error at a point is the worst relative error of
 * the state's meaning (num·e^max against a, den·e^max against b) and of the
 * output. While the anchor outweighs a new term by more than 2^24 the
 * float sums drop the new terms, an error of up to memory·2^-24 that the
 * decay then forgets: r->peak is the worst error over the anchor's life
 * (t·w < 25, every half memory), r->worst the worst over the ten
 * checkpoints after it (t = steps/10, 2·steps/10, ...), r->first the first
 * of those; r->plain the same state with the three values merely rounded
 * (no folding of the max's rounding), for comparison. */
typedef struct rwkv4_err {
    double peak, worst, first, plain;
} rwkv4_err;

static rwkv4_err rwkv4_run(long steps, float w)
{
    backend *be = NULL;
    char err[256];
    rwkv4_err R = {-1, -1, -1, -1};
    if (backend_cpu_new(NULL, &be, err, sizeof err) != 0) { CHECK(0, "backend: %s", err); return R; }
    const backend_ops *o = be->ops;
    backend_buf *in = NULL, *out = NULL, *bw = NULL, *bu = NULL;
    int slot = 0, tok = 0;
    const float u = 0.5f, r = 2.0f;
    CHECK(o->slots_reserve(be, 1, 3 * sizeof(float)) == 0 && o->buf_new(be, 3, &in) == 0 &&
          o->buf_new(be, 1, &out) == 0 && o->buf_new(be, 1, &bw) == 0 && o->buf_new(be, 1, &bu) == 0 &&
          o->begin_step(be, &slot, &tok, 1) == 0 && o->slot_zero(be, 0) == 0, "setup");
    o->buf_upload(be, bw, 0, &w, 1);
    o->buf_upload(be, bu, 0, &u, 1);
    long double a = 0, b = 0;
    const long double decay = expl(-(long double)w);
    const long life = w > 0 ? (long)(25.0 / w) : 0, half = w > 0 ? (long)(0.5 / w) + 1 : steps;
    float pn = 0, pd = 0, pm = 0;   /* the merely rounded state */
    for (long t = 0; t < steps; t++) {
        float k = t == 0 ? 20.0f : -0.3f + 0.6f * urand();
        float v = 1.0f + urand() + (float)((double)t / (double)steps);
        float x[3] = {r, k, v};
        o->buf_upload(be, in, 0, x, 3);
        CHECK(o->aft_step(be, in, bw, bu, out, 0, 1, 1) == 0, "aft_step");
        long double eu = expl((long double)u + k);
        long double want = (a + eu * v) / (b + eu) / (1 + expl(-(long double)r));
        a = decay * a + expl((long double)k) * v;
        b = decay * b + expl((long double)k);
        double pa = pn, pb = pd, pp = pm;
        float po = lind_sigmoid(r) * lind_aft_channel(&pa, &pb, &pp, k, v, w, u);
        pn = (float)pa, pd = (float)pb, pm = (float)pp;
        int at_check = (t + 1) % (steps / 10) == 0 && t >= life, in_life = t < life && (t + 1) % half == 0;
        if (at_check || in_life) {
            float st[3], got;
            o->slot_read(be, 0, st);
            o->buf_download(be, out, 0, &got, 1);
            long double sc = expl((long double)st[2]), psc = expl((long double)pm);
            double e = fmax(fmax((double)fabsl((st[0] * sc - a) / a), (double)fabsl((st[1] * sc - b) / b)),
                            (double)fabsl((got - want) / want));
            double ep = fmax(fmax((double)fabsl((pn * psc - a) / a), (double)fabsl((pd * psc - b) / b)),
                             (double)fabsl((po - want) / want));
            if (in_life) {
                checkpoint(e, &R.peak, NULL);
            } else {
                checkpoint(e, &R.worst, &R.first);
                checkpoint(ep, &R.plain, NULL);
            }
        }
    }
    o->buf_free(be, in);
    o->buf_free(be, out);
    o->buf_free(be, bw);
    o->buf_free(be, bu);
    backend_free(be);
    return R;
}

static void rwkv4_fp32_state(void)
{
    const long n = long_run(), nc = scale_down(1000000L);
    /* w = 3e-4 (time_decay −8.11): a memory of 1/(1 − e^{−w}) ≈ 3,300
     * tokens, within the 16,384 for which recurrent/mixer_aft.c keeps a
     * layer's state in float */
    const float w = 3e-4f;
    const double memory = 1.0 / -expm1(-(double)w);
    rwkv4_err e = rwkv4_run(n, w);
    /* w = 0 (AFT-simple, always kept in double): nothing forgets the
     * roundings, and a float state frozen by the anchor must fail */
    rwkv4_err u = rwkv4_run(nc, 0.0f);
    printf("NOTE rwkv4 fp32 state, w 3e-4, %ld steps: max rel err %.2e (%.2e at the first checkpoint; merely "
           "rounded %.2e); while the anchor lasts %.2e (bound memory·2^-24 = %.2e); no decay, %ld steps: %.2e\n",
           n, e.worst, e.first, e.plain, e.peak, memory * 0x1p-24, nc, u.worst);
    CHECK(e.worst >= 0 && e.worst < 1e-5, "fp32 state relative error %.3g ≥ 1e-5 after %ld steps", e.worst, n);
    /* a and b each within the bound; the output a/b within twice it */
    CHECK(e.peak >= 0 && e.peak <= 2 * memory * 0x1p-24, "fp32 state error %.3g while the anchor lasts, above "
          "2·memory·2^-24 = %.3g", e.peak, 2 * memory * 0x1p-24);
    CHECK(u.worst >= 1e-5, "the undecayed float state did not fail (error %.3g): the inputs do not stress it",
          u.worst);
}

/* RetNet's S is kept in float when every head of the layer decays
 * (recurrent/mixer_retnet.c): the op computes each element in double and
 * rounds it once per step (lind_lin_column_f32). Two heads (dh = 4, a
 * block of the CPU loop's four rows) through the backend's retention_step
 * (float state) for `steps` tokens, head h with decay g[h], against S ← γS + k vᵀ in long double; the first token an
 * anchor (k and v of 2^13: a term 2^26 times the others'), the others' k in
 * [0.5, 1.5) and v drifting from [1, 2) to [2, 3). The error of a head at a
 * point is max |ΔS| / max |S| over its elements. While the anchor dominates,
 * each rounding is relative to it and new terms fall below its float's
 * resolution: r->peak[h] is the worst error over the anchor's life
 * (t·(1 − γ) < 20, after which the anchor and the roundings made at its
 * scale are below 10^-7 of S; every half memory), r->worst[h] the worst over
 * the ten checkpoints after it, r->first[h] the first of those. */
typedef struct retnet_err {
    double peak[2], worst[2], first[2];
} retnet_err;

static retnet_err retnet_run(long steps, const float g[2])
{
    enum { H = 2, DH = 4, HD = H * DH };
    backend *be = NULL;
    char err[256];
    retnet_err R = {{-1, -1}, {-1, -1}, {-1, -1}};
    if (backend_cpu_new(NULL, &be, err, sizeof err) != 0) { CHECK(0, "backend: %s", err); return R; }
    const backend_ops *o = be->ops;
    backend_buf *in = NULL, *out = NULL, *bg = NULL, *bn = NULL;
    int slot = 0, tok = 0;
    float norm[2 * HD];
    for (int i = 0; i < HD; i++) norm[i] = 1.0f, norm[HD + i] = 0.0f;
    CHECK(o->slots_reserve(be, 1, H * DH * DH * sizeof(float)) == 0 && o->buf_new(be, 4 * HD, &in) == 0 &&
          o->buf_new(be, HD, &out) == 0 && o->buf_new(be, H, &bg) == 0 && o->buf_new(be, 2 * HD, &bn) == 0 &&
          o->begin_step(be, &slot, &tok, 1) == 0 && o->slot_zero(be, 0) == 0, "setup");
    o->buf_upload(be, bg, 0, g, H);
    o->buf_upload(be, bn, 0, norm, 2 * HD);
    long double S[H][DH][DH] = {{{0}}};
    long life[H], half[H];
    for (int h = 0; h < H; h++) {
        double f = 1.0 - (double)g[h];
        life[h] = f > 0 ? (long)(20.0 / f) : 0;
        half[h] = f > 0 ? (long)(0.5 / f) + 1 : steps;
    }
    float got[H * DH * DH];
    for (long t = 0; t < steps; t++) {
        float x[4 * HD];
        for (int c = 0; c < HD; c++) {
            x[c] = 0.5f;                                                                    /* q */
            x[HD + c] = t == 0 ? 8192.0f : 0.5f + urand();                                  /* k */
            x[2 * HD + c] = t == 0 ? 8192.0f : 1.0f + urand() + (float)((double)t / (double)steps);   /* v */
            x[3 * HD + c] = 1.0f;                                                           /* gate */
        }
        o->buf_upload(be, in, 0, x, 4 * HD);
        CHECK(o->retention_step(be, in, bg, bn, out, 0, H, DH, 1e-5f, 1) == 0, "retention_step");
        for (int h = 0; h < H; h++)
            for (int i = 0; i < DH; i++)
                for (int j = 0; j < DH; j++)
                    S[h][i][j] = g[h] * S[h][i][j] + (long double)x[HD + h * DH + i] * x[2 * HD + h * DH + j];
        int at_check = (t + 1) % (steps / 10) == 0, read = 0;
        for (int h = 0; h < H; h++) {
            int in_life = t < life[h] && (t + 1) % half[h] == 0, after = at_check && t >= life[h];
            if (!in_life && !after) continue;
            if (!read++) o->slot_read(be, 0, got);
            double e = state_err(got + h * DH * DH, &S[h][0][0], DH * DH);
            if (after) checkpoint(e, &R.worst[h], &R.first[h]);
            else checkpoint(e, &R.peak[h], NULL);
        }
    }
    o->buf_free(be, in);
    o->buf_free(be, out);
    o->buf_free(be, bg);
    o->buf_free(be, bn);
    backend_free(be);
    return R;
}

static void retnet_fp32_state(void)
{
    const long n = long_run(), nc = scale_down(1000000L);
    /* γ = 1 − 2^-12 and 1 − 2^-14: memories of 4,096 tokens and of 16,384,
     * the longest for which recurrent/mixer_retnet.c keeps S in float */
    const float g[2] = {1.0f - 0x1p-12f, 1.0f - 0x1p-14f}, one[2] = {1.0f, 1.0f};
    retnet_err e = retnet_run(n, g);
    /* γ = 1 (always kept in double): nothing forgets the roundings, and a
     * float S frozen by the anchor must fail */
    retnet_err u = retnet_run(nc, one);
    for (int h = 0; h < 2; h++) {
        double memory = 1.0 / (1.0 - (double)g[h]);
        char after[96] = "none: the anchor outlives the run";
        if (e.worst[h] >= 0)
            snprintf(after, sizeof after, "%.2e (%.2e at the first checkpoint)", e.worst[h], e.first[h]);
        printf("NOTE retnet fp32 state, memory %.0f, %ld steps: max rel err %s; while the anchor lasts %.2e (bound "
               "memory·2^-24 = %.2e)\n", memory, n, after, e.peak[h], memory * 0x1p-24);
        CHECK(e.peak[h] >= 0 && e.peak[h] <= memory * 0x1p-24, "memory %.0f: fp32 state error %.3g while the anchor "
              "lasts, above memory·2^-24", memory, e.peak[h]);
        /* after it, roundings of either sign: about √memory·2^-24 */
        CHECK(e.worst[h] <= 2 * sqrt(memory) * 0x1p-24, "memory %.0f: fp32 state relative error %.3g above "
              "2·√memory·2^-24 = %.3g", memory, e.worst[h], 2 * sqrt(memory) * 0x1p-24);
    }
    printf("NOTE retnet no decay, %ld steps: %.2e\n", nc, u.worst[0]);
    CHECK(e.worst[0] >= 0 && e.worst[0] < 1e-5, "fp32 state relative error %.3g ≥ 1e-5 after %ld steps", e.worst[0],
          n);
    CHECK(u.worst[0] >= 1e-5, "the undecayed float state did not fail (error %.3g): the inputs do not stress it",
          u.worst[0]);
}

int main(void)
{
    RUN(linear_1e8);
    RUN(aft_simple_1e7);
    RUN(rwkv7_fp32_state);
    RUN(mamba2_fp32_state);
    RUN(rwkv4_fp32_state);
    RUN(retnet_fp32_state);
    return check_exit();
}
