/* tests/test_core_quant.c — quantized weights (kernels/cpu/quant.h and
 * --dtype q8 / q4).
 *
 * Kernels, for every format (q8, q4, q4m) and every integer-dot path this
 * CPU runs (portable C, AVX2, AVX-512 VNNI): the packed weight's values
 * within half a step of the original (a clamped code within one), the
 * activations' likewise; products against a double-precision sum over the
 * dequantized weights and activations (every row tile, panel tails, K not a
 * multiple of 32, bias, accumulate, split panel ranges); results bit for bit
 * equal across paths, and a row's result the same alone as in a batch; the
 * fused activations equal to cpu_gemm_activate on the plain result; a NaN
 * activation poisons its row only; a weight fp16 scales cannot hold is
 * refused naming its row.
 *
 * Models: prefill (model_forward in chunks) bit-identical to model_step for
 * q8 and q4 on every GEMM path, and the same logits on every path; the
 * fingerprint differs by format; q8/q4 with bf16 compute, on a backend
 * without quantized weights, and an unknown --dtype are refused with
 * messages naming them. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/backend.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/quant.h"
#include "kernels/mixer_math.h"
#include "recurrent/model.h"
#include "tests/check.h"
#include "tests/testmodel.h"

static const cpu_quant_type TYPES[] = {CPU_QUANT_Q8, CPU_QUANT_Q4, CPU_QUANT_Q4M};
static const cpu_quant_isa ISAS[] = {CPU_QUANT_C, CPU_QUANT_AVX2, CPU_QUANT_VNNI};

static float frand(unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    return (float)((*s >> 8) & 0xFFFF) / 32768.0f - 1.0f;
}

static void *packed(cpu_quant_type t, const float *W, int N, int K)
{
    size_t n = (cpu_quant_packed_bytes(t, N, K) + 63) / 64 * 64;
    void *p = aligned_alloc(64, n);
    char err[200] = "";
    int rc = cpu_quant_pack(t, W, N, K, p, err, sizeof err);
    CHECK(rc == 0, "%s pack %d × %d: %s", cpu_quant_type_name(t), N, K, err);
    return p;
}

/* Random weights whose rows have different magnitudes (scales 2^-6…2^3)
 * and a few outliers, as trained weights do. */
static void fill_w(float *W, int N, int K, unsigned *s)
{
    for (int n = 0; n < N; n++) {
        float sc = ldexpf(1.0f, n % 10 - 6);
        for (int k = 0; k < K; k++) W[(size_t)n * K + k] = sc * frand(s) * ((k * 7 + n) % 29 == 0 ? 6.0f : 1.0f);
    }
}

/* The packed values stay within a step of the originals. */
static void quant_values(void)
{
    unsigned s = 11;
    int N = 37, K = 200;
    float *W = malloc(sizeof(float) * N * K), *D = malloc(sizeof(float) * N * K);
    fill_w(W, N, K, &s);
    for (size_t ti = 0; ti < 3; ti++) {
        cpu_quant_type t = TYPES[ti];
        void *p = packed(t, W, N, K);
        cpu_quant_dequant(t, p, N, K, D);
        int bad = 0;
        for (int n = 0; n < N && !bad; n++)
            for (int b = 0; b * 32 < K && !bad; b++) {
                int len = K - b * 32 < 32 ? K - b * 32 : 32;
                const float *w = W + (size_t)n * K + b * 32, *d = D + (size_t)n * K + b * 32;
                float lo = w[0], hi = w[0], amax = 0;
                for (int i = 0; i < len; i++) {
                    lo = fminf(lo, w[i]);
                    hi = fmaxf(hi, w[i]);
                    amax = fmaxf(amax, fabsf(w[i]));
                }
                if (len < 32) lo = fminf(lo, 0.0f), hi = fmaxf(hi, 0.0f);   /* the zero padding counts */
                /* Q8: half of max/127 (the fp16 scale a hair off); Q4: a step
                 * max/7 at most (one code clamped); Q4M: half of range/15,
                 * plus the fp16 offset's rounding */
                double tol = t == CPU_QUANT_Q8 ? 0.5 * amax / 127 * 1.002
                             : t == CPU_QUANT_Q4 ? amax / 7.0 * 1.002
                                                 : 0.5 * (hi - lo) / 15 * 1.002 + fabsf(lo) * 0x1p-11;
                for (int i = 0; i < len; i++)
                    if (fabs((double)d[i] - w[i]) > tol) {
                        CHECK(0, "%s: W[%d, %d] = %g dequantizes to %g (tolerance %g)", cpu_quant_type_name(t), n,
                              b * 32 + i, w[i], d[i], tol);
                        bad = 1;
                        break;
                    }
            }
        free(p);
    }
    /* activations: within half a step of max|x|/127 per block */
    float x[3 * 70], xd[3 * 70];
    for (int i = 0; i < 3 * 70; i++) x[i] = frand(&s) * (i % 70 < 32 ? 100.0f : 0.01f);
    void *xq = aligned_alloc(64, 3 * cpu_quant_act_bytes(70));
    cpu_quant_act(x, 70, 3, 70, xq);
    cpu_quant_act_values(xq, 3, 70, xd);
    for (int r = 0; r < 3; r++)
        for (int k = 0; k < 70; k++) {
            float amax = 0;
            for (int i = k / 32 * 32; i < k / 32 * 32 + 32 && i < 70; i++) amax = fmaxf(amax, fabsf(x[r * 70 + i]));
            CHECK(fabs((double)xd[r * 70 + k] - x[r * 70 + k]) <= 0.5 * amax / 127 * 1.0001, "x[%d, %d] = %g → %g", r,
                  k, x[r * 70 + k], xd[r * 70 + k]);
        }
    free(xq);
    /* every path quantizes activations to the same bytes: random rows, a
     * NaN, an ∞, a block below 1e-30, a partial last block, exact halves */
    if (cpu_quant_supported(CPU_QUANT_VNNI)) {
        int K = 101, B = 6;
        float *xr = malloc(sizeof(float) * B * K);
        for (int i = 0; i < B * K; i++) xr[i] = frand(&s) * ldexpf(1.0f, i % 13 - 4);
        xr[K + 3] = NAN;
        xr[2 * K + 40] = INFINITY;
        for (int k = 64; k < 96; k++) xr[3 * K + k] = 1e-31f;
        for (int k = 0; k < 32; k++) xr[4 * K + k] = (float)(k - 16) * 0.5f;   /* ties at 127/8 steps */
        size_t ab = cpu_quant_act_bytes(K);
        unsigned char *qa = aligned_alloc(64, B * ab), *qb = aligned_alloc(64, B * ab);
        memset(qa, 0xA5, B * ab);
        memset(qb, 0xA5, B * ab);
        cpu_quant_act_isa(CPU_QUANT_C, xr, K, B, K, qa);
        cpu_quant_act_isa(CPU_QUANT_VNNI, xr, K, B, K, qb);
        CHECK(!memcmp(qa, qb, B * ab), "AVX-512 and C activation quantization differ");
        free(qa);
        free(qb);
        free(xr);
    }
    free(W);
    free(D);
}

/* y through cpu_quant_run over panels [0, P) in two calls (split at P/2). */
static void run_split(cpu_quant_isa isa, cpu_quant_type t, const void *xq, const void *Wp, const float *bias,
                      float *y, int ldy, int B, int N, int K, int flags)
{
    int P = (N + CPU_QUANT_NR - 1) / CPU_QUANT_NR;
    cpu_quant_run(isa, t, xq, Wp, bias, y, ldy, B, N, K, 0, P / 2, flags);
    cpu_quant_run(isa, t, xq, Wp, bias, y, ldy, B, N, K, P / 2, P, flags);
}

/* Every path against the double sum over the dequantized operands, and
 * against each other bit for bit. */
static void quant_products(void)
{
    /* B > 1 row tiles: VNNI 1-6 rows of two panels and 1-8 of the odd
     * panel (B 22: 6,6,6,4 and 8,8,6; B 23: 6,6,6,5 and 8,8,7). The
     * single-row kernel streams 8 panels (VNNI) or 2 (AVX2) at once: B 1
     * N 300 (19 panels, split 9 + 10) and the rows of B 3 N 272 (17, split
     * 8 + 9) run it in both halves, and the panels it leaves one by one. */
    static const int shapes[][3] = {{1, 67, 100}, {1, 128, 256}, {2, 16, 32}, {5, 50, 77}, {9, 33, 64},
                                    {13, 80, 96}, {17, 7, 300},  {22, 48, 64}, {23, 50, 40}, {1, 300, 96},
                                    {3, 272, 64}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        int B = shapes[si][0], N = shapes[si][1], K = shapes[si][2], ldx = K + 3, ldy = N + 5;
        unsigned s = 100 + (unsigned)si;
        float *x = malloc(sizeof(float) * B * ldx), *W = malloc(sizeof(float) * N * K);
        float *bias = malloc(sizeof(float) * N), *y0 = malloc(sizeof(float) * B * ldy);
        float *y = malloc(sizeof(float) * B * ldy), *yc = malloc(sizeof(float) * B * ldy);
        float *Wd = malloc(sizeof(float) * N * K), *xd = malloc(sizeof(float) * B * K);
        for (int i = 0; i < B * ldx; i++) x[i] = frand(&s) * (i % 5 == 0 ? 4.0f : 1.0f);
        fill_w(W, N, K, &s);
        for (int i = 0; i < N; i++) bias[i] = frand(&s);
        for (int i = 0; i < B * ldy; i++) y0[i] = (i % ldy) < N ? frand(&s) : 12345.0f;
        void *xq = aligned_alloc(64, (size_t)B * cpu_quant_act_bytes(K));
        cpu_quant_act(x, ldx, B, K, xq);
        cpu_quant_act_values(xq, B, K, xd);
        for (size_t ti = 0; ti < 3; ti++) {
            cpu_quant_type t = TYPES[ti];
            void *Wp = packed(t, W, N, K);
            cpu_quant_dequant(t, Wp, N, K, Wd);
            for (int mode = 0; mode < 4; mode++) {   /* plain, bias, accumulate, bias + accumulate */
                int with_bias = mode & 1, flags = (mode & 2) ? CPU_GEMM_ACCUMULATE : 0;
                int have_c = 0;
                for (size_t ii = 0; ii < 3; ii++) {
                    cpu_quant_isa isa = ISAS[ii];
                    if (!cpu_quant_supported(isa)) continue;
                    memcpy(y, y0, sizeof(float) * B * ldy);
                    run_split(isa, t, xq, Wp, with_bias ? bias : NULL, y, ldy, B, N, K, flags);
                    double worst = 0;
                    for (int b = 0; b < B; b++)
                        for (int n = 0; n < ldy; n++) {
                            float got = y[b * ldy + n];
                            if (n >= N) {
                                CHECK(got == 12345.0f, "%s/%s: column %d past N written", cpu_quant_isa_name(isa),
                                      cpu_quant_type_name(t), n);
                                continue;
                            }
                            double ref = 0, mag = 0;
                            for (int k = 0; k < K; k++) {
                                double p = (double)xd[b * K + k] * Wd[n * K + k];
                                ref += p;
                                mag += fabs(p);
                            }
                            if (with_bias) ref += bias[n], mag += fabs(bias[n]);
                            if (flags) ref += y0[b * ldy + n], mag += fabs(y0[b * ldy + n]);
                            double err = fabs(got - ref) / (mag + 1e-30);
                            worst = err > worst ? err : worst;
                        }
                    /* fp32: one rounding per block's fma and scale product, then the adds */
                    double tol = ((K + 31) / 32 + 4) * 0x1p-23;
                    CHECK(worst <= tol, "%s/%s B %d N %d K %d mode %d: relative error %.3g > %.3g",
                          cpu_quant_isa_name(isa), cpu_quant_type_name(t), B, N, K, mode, worst, tol);
                    if (isa == CPU_QUANT_C) {
                        memcpy(yc, y, sizeof(float) * B * ldy);
                        have_c = 1;
                    } else if (have_c) {
                        CHECK(!memcmp(y, yc, sizeof(float) * B * ldy), "%s/%s B %d N %d K %d mode %d: differs from C",
                              cpu_quant_isa_name(isa), cpu_quant_type_name(t), B, N, K, mode);
                    }
                    /* batch invariance: each row alone gives its row of the batch */
                    for (int b = 0; b < B; b++) {
                        float row[400];
                        memcpy(row, y0 + (size_t)b * ldy, sizeof(float) * N);
                        run_split(isa, t, (const uint8_t *)xq + (size_t)b * cpu_quant_act_bytes(K), Wp,
                                  with_bias ? bias : NULL, row, N, 1, N, K, flags);
                        CHECK(!memcmp(row, y + (size_t)b * ldy, sizeof(float) * N),
                              "%s/%s B %d N %d K %d: row %d alone differs from the batch", cpu_quant_isa_name(isa),
                              cpu_quant_type_name(t), B, N, K, b);
                    }
                }
            }
            /* the fused activations: act(bias + Σ), as cpu_gemm_activate makes it */
            static const int acts[] = {CPU_GEMM_GELU, CPU_GEMM_RELU2, CPU_GEMM_SIGMOID};
            for (size_t ii = 0; ii < 3; ii++) {
                if (!cpu_quant_supported(ISAS[ii])) continue;
                float *plain = malloc(sizeof(float) * B * N);
                for (size_t a = 0; a < 3; a++) {
                    cpu_quant_run(ISAS[ii], t, xq, Wp, bias, plain, N, B, N, K, 0, (N + 15) / 16, 0);
                    cpu_gemm_activate(plain, N, B, N, acts[a]);
                    memcpy(y, y0, sizeof(float) * B * N);
                    run_split(ISAS[ii], t, xq, Wp, bias, y, N, B, N, K, acts[a]);
                    CHECK(!memcmp(y, plain, sizeof(float) * B * N), "%s/%s: activation flag %d differs",
                          cpu_quant_isa_name(ISAS[ii]), cpu_quant_type_name(t), acts[a]);
                }
                free(plain);
            }
            free(Wp);
        }
        free(xq);
        free(x); free(W); free(bias); free(y0); free(y); free(yc); free(Wd); free(xd);
    }
}

/* A NaN in a row's activations makes that row's outputs NaN (the model's
 * residual check then names the session); the other rows are untouched. */
static void quant_nonfinite(void)
{
    int B = 3, N = 20, K = 64;
    unsigned s = 5;
    float x[3 * 64], W[20 * 64], y[3 * 20], y1[20];
    for (int i = 0; i < B * K; i++) x[i] = frand(&s);
    for (int i = 0; i < N * K; i++) W[i] = frand(&s);
    x[K + 40] = NAN;
    void *xq = aligned_alloc(64, (size_t)B * cpu_quant_act_bytes(K));
    cpu_quant_act(x, K, B, K, xq);
    for (size_t ti = 0; ti < 3; ti++) {
        void *Wp = packed(TYPES[ti], W, N, K);
        for (size_t ii = 0; ii < 3; ii++) {
            if (!cpu_quant_supported(ISAS[ii])) continue;
            cpu_quant_run(ISAS[ii], TYPES[ti], xq, Wp, NULL, y, N, B, N, K, 0, 2, 0);
            cpu_quant_run(ISAS[ii], TYPES[ti], xq, Wp, NULL, y1, N, 1, N, K, 0, 2, 0);
            for (int n = 0; n < N; n++) {
                CHECK(isnan(y[N + n]), "%s/%s: column %d of the NaN row is %g", cpu_quant_isa_name(ISAS[ii]),
                      cpu_quant_type_name(TYPES[ti]), n, y[N + n]);
                CHECK(isfinite(y[n]) && isfinite(y[2 * N + n]) && y[n] == y1[n], "%s/%s: another row changed",
                      cpu_quant_isa_name(ISAS[ii]), cpu_quant_type_name(TYPES[ti]));
            }
        }
        free(Wp);
    }
    free(xq);
}

/* A weight whose block scale overflows fp16 is refused, naming its row. */
static void quant_range(void)
{
    float W[2 * 40] = {0};
    W[40 + 35] = 3e9f;
    for (size_t ti = 0; ti < 3; ti++) {
        void *p = aligned_alloc(64, cpu_quant_packed_bytes(TYPES[ti], 2, 40));
        char err[200] = "";
        int rc = cpu_quant_pack(TYPES[ti], W, 2, 40, p, err, sizeof err);
        CHECK(rc == -ERANGE && strstr(err, "row 1") && strstr(err, "k 32"), "%s: rc %d, \"%s\"",
              cpu_quant_type_name(TYPES[ti]), rc, err);
        free(p);
    }
}

/* ---- models -------------------------------------------------------------- */

#define T 41
#define V LIND_BYTE_VOCAB
static char tmpdir[256];

static model *load(lind_dtype dt, const char *gemm, lind_compute compute, char *err, size_t errlen, int *rc,
                   const char *backend)
{
    char dir[400];
    snprintf(dir, sizeof dir, "%s/m", tmpdir);
    backend_opts bo;
    backend_opts_default(&bo);
    bo.cpu_gemm = gemm;
    bo.threads = 2;
    model_opts mo = {.backend = backend, .weights = dt, .compute = compute, .be = &bo};
    model *m = NULL;
    *rc = model_load_opts(dir, &mo, &m, err, errlen);
    return m;
}

/* Prefill equals stepping for q8 and q4 on every GEMM path; the paths give
 * the same logits. */
static void quant_prefill(void)
{
    static const char *gemms[] = {"openblas", "avx2", "avx512"};
    static const lind_dtype dts[] = {LIND_DT_Q8, LIND_DT_Q4};
    int32_t tok[T];
    for (int t = 0; t < T; t++) tok[t] = (int32_t)((t * 37 + 11) % V);
    float *ref = malloc(sizeof(float) * T * V), *got = malloc(sizeof(float) * T * V);
    float *first = malloc(sizeof(float) * T * V), *f32 = malloc(sizeof(float) * T * V);
    for (size_t di = 0; di < 2; di++) {
        int have_first = 0;
        for (size_t gi = 0; gi < 3; gi++) {
            cpu_gemm_isa isa = gi == 0 ? CPU_GEMM_NONE : gi == 1 ? CPU_GEMM_AVX2 : CPU_GEMM_AVX512;
            if (!cpu_gemm_supported(isa)) continue;
            char err[512] = "";
            int rc;
            model *m = load(dts[di], gemms[gi], LIND_COMPUTE_F32, err, sizeof err, &rc, "cpu");
            CHECK(rc == 0, "load %s on %s: %s", lind_dtype_name(dts[di]), gemms[gi], err);
            if (!m) continue;
            CHECK(model_weights_dtype(m) == dts[di], "weights %s", lind_dtype_name(model_weights_dtype(m)));
            size_t sb = model_state_bytes(m);
            unsigned char *sref = malloc(sb), *sgot = malloc(sb);
            model_slots_reserve(m, 4);
            for (int s = 0; s < 4; s++) model_slot_reset(m, s);
            int slot = 0;
            for (int t = 0; t < T; t++) CHECK(model_step(m, &slot, &tok[t], 1, ref + (size_t)t * V) == 0, "step");
            model_slot_read(m, 0, sref);
            int chunks[] = {7, T};
            for (int ci = 0; ci < 2; ci++) {
                int s = 1 + ci, slots[T], rows[T];
                for (int t0 = 0; t0 < T; t0 += chunks[ci]) {
                    int n = T - t0 < chunks[ci] ? T - t0 : chunks[ci];
                    for (int r = 0; r < n; r++) slots[r] = s, rows[r] = r;
                    CHECK(model_forward(m, slots, tok + t0, n, rows, n, got + (size_t)t0 * V) == 0, "forward");
                }
                CHECK(!memcmp(got, ref, sizeof(float) * T * V), "%s on %s, chunk %d: logits differ from steps",
                      lind_dtype_name(dts[di]), gemms[gi], chunks[ci]);
                model_slot_read(m, s, sgot);
                CHECK(!memcmp(sgot, sref, sb), "%s on %s, chunk %d: state differs", lind_dtype_name(dts[di]),
                      gemms[gi], chunks[ci]);
            }
            if (!have_first) {
                memcpy(first, ref, sizeof(float) * T * V);
                have_first = 1;
            } else {
                CHECK(!memcmp(first, ref, sizeof(float) * T * V), "%s: %s's logits differ from openblas's (C path)",
                      lind_dtype_name(dts[di]), gemms[gi]);
            }
            free(sref);
            free(sgot);
            model_free(m);
        }
        /* and close to fp32 (a loose sanity bound; docs/NUMERICS.md measures) */
        char err[512];
        int rc;
        model *m = load(LIND_DT_F32, NULL, LIND_COMPUTE_F32, err, sizeof err, &rc, "cpu");
        if (m) {
            model_slots_reserve(m, 1);
            model_slot_reset(m, 0);
            int slot = 0;
            for (int t = 0; t < T; t++) model_step(m, &slot, &tok[t], 1, f32 + (size_t)t * V);
            double worst = 0;
            for (int i = 0; i < T * V; i++) worst = fmax(worst, fabs((double)first[i] - f32[i]));
            CHECK(worst < (dts[di] == LIND_DT_Q8 ? 0.05 : 0.5), "%s: max |logit − f32 logit| = %g",
                  lind_dtype_name(dts[di]), worst);
            model_free(m);
        }
    }
    free(ref); free(got); free(first); free(f32);
}

static void quant_fingerprint(void)
{
    static const lind_dtype dts[] = {LIND_DT_F32, LIND_DT_BF16, LIND_DT_Q8, LIND_DT_Q4};
    uint64_t fp[4];
    size_t wb[4];
    for (int i = 0; i < 4; i++) {
        char err[512] = "";
        int rc;
        model *m = load(dts[i], NULL, LIND_COMPUTE_F32, err, sizeof err, &rc, "cpu");
        CHECK(m, "load %s: %s", lind_dtype_name(dts[i]), err);
        if (!m) return;
        fp[i] = model_fingerprint(m);
        model_costs(m, NULL, NULL, &wb[i]);
        model_free(m);
        m = load(dts[i], NULL, LIND_COMPUTE_F32, err, sizeof err, &rc, "cpu");
        CHECK(m && model_fingerprint(m) == fp[i], "%s: a second load changed the fingerprint", lind_dtype_name(dts[i]));
        model_free(m);
    }
    for (int i = 0; i < 4; i++)
        for (int j = i + 1; j < 4; j++)
            CHECK(fp[i] != fp[j], "weights %s and %s share the fingerprint %016llx", lind_dtype_name(dts[i]),
                  lind_dtype_name(dts[j]), (unsigned long long)fp[i]);
    /* K = 48 and 80 pad to 64 and 96: q8 1.42 and 1.28 bytes a weight here */
    CHECK(wb[2] < wb[1] * 3 / 4 && wb[3] < wb[2] * 6 / 10, "weight bytes f32 %zu bf16 %zu q8 %zu q4 %zu", wb[0],
          wb[1], wb[2], wb[3]);
}

static void quant_refused(void)
{
    char err[512] = "";
    int rc;
    model *m;
    if (cpu_gemm_dot_supported() && cpu_gemm_detect() == CPU_GEMM_AVX512) {
        m = load(LIND_DT_Q8, NULL, LIND_COMPUTE_BF16, err, sizeof err, &rc, "cpu");
        CHECK(!m && rc == -EINVAL && strstr(err, "q8") && strstr(err, "bf16 compute"), "q8 + bf16 compute: rc %d, \"%s\"",
              rc, err);
        model_free(m);
    }
    err[0] = 0;
    m = load(LIND_DT_Q4, NULL, LIND_COMPUTE_F32, err, sizeof err, &rc, "harness");
    CHECK(!m && rc == -ENOTSUP && strstr(err, "no q4 weights") && strstr(err, "harness"), "q4 on the harness: rc %d, \"%s\"",
          rc, err);
    model_free(m);
    lind_dtype d = LIND_DT_AUTO;
    CHECK(lind_dtype_parse("q5", &d) == -EINVAL && d == LIND_DT_AUTO, "\"q5\" parsed");
    CHECK(lind_dtype_parse("q4", &d) == 0 && d == LIND_DT_Q4, "\"q4\" not parsed");
    CHECK(lind_dtype_parse("q8", &d) == 0 && d == LIND_DT_Q8, "\"q8\" not parsed");
    m = load((lind_dtype)99, NULL, LIND_COMPUTE_F32, err, sizeof err, &rc, "cpu");
    CHECK(!m && rc == -EINVAL && strstr(err, "dtype"), "dtype 99: rc %d, \"%s\"", rc, err);
    model_free(m);
}

int main(void)
{
    for (size_t i = 0; i < 3; i++)
        if (!cpu_quant_supported(ISAS[i])) printf("SKIP quant_%s: this CPU cannot run it\n", cpu_quant_isa_name(ISAS[i]));
        else printf("NOTE quant kernels: %s path tested\n", cpu_quant_isa_name(ISAS[i]));
    RUN(quant_values);
    RUN(quant_products);
    RUN(quant_nonfinite);
    RUN(quant_range);
    snprintf(tmpdir, sizeof tmpdir, "/tmp/lind_quant.XXXXXX");
    if (!mkdtemp(tmpdir)) return 1;
    char dir[400];
    snprintf(dir, sizeof dir, "%s/m", tmpdir);
    /* d_model 48 and d_ff 80: K not a multiple of 32 in every product */
    testmodel_cfg c = testmodel_config(48, 2, 4, 12, 80, "linear,aft", 1, "decay");
    testmodel_opts o = {0.9f, 1};
    if (testmodel_write(dir, &c, 7, &o) < 0) return 1;
    RUN(quant_prefill);
    RUN(quant_fingerprint);
    RUN(quant_refused);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd)) return 1;
    return check_exit();
}
