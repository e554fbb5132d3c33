/* tests/test_core_gemm.c — the CPU backend's packed decode GEMM
 * (kernels/cpu/gemm.h), for each kernel this CPU runs (AVX-512, AVX2),
 * against a long-double reference: every row-block size, panel tails,
 * strides, bias, accumulate, panel ranges; that a row's result does not
 * depend on the batch around it; that the two kernels agree bit for bit;
 * half-precision weights (fp16, bf16): the exact widening, and results bit
 * for bit equal to the fp32 kernel on the widened weights (every row block,
 * the single-row kernel, tails, flags, both kernels); and the backend's
 * matmul flags (fused GELU, ReLU², sigmoid) and weight_new_half on each of
 * its GEMM paths; the bf16 compute kernels (vdpbf16ps, where the CPU has
 * AVX512_BF16): rounding, accuracy against a long-double sum of the same
 * bf16 values, batch invariance, the backend's set_compute. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/cpu/gemm.h"
#include "kernels/mixer_math.h"
#include "tests/check.h"

static cpu_gemm_isa ISA;   /* the kernel under test */

static float *packed_new(cpu_gemm_isa isa, const float *W, int N, int K)
{
    float *Wp = aligned_alloc(64, ((cpu_gemm_packed_floats(isa, N, K) * sizeof(float) + 63) / 64) * 64);
    cpu_gemm_pack(isa, W, N, K, Wp);
    return Wp;
}

static float frand(unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    return (float)((*s >> 8) & 0xFFFF) / 32768.0f - 1.0f;
}

/* One product y = (acc ? y0 : 0) + bias + x·Wᵀ through cpu_gemm_run over all
 * panels, checked element by element; the padding columns of y (ldy > N)
 * must keep their sentinel. Returns the worst relative error. */
static double run_case(int B, int N, int K, int ldx, int ldy, int with_bias, int acc, unsigned seed)
{
    float *x = malloc(sizeof(float) * (size_t)B * ldx), *W = malloc(sizeof(float) * (size_t)N * K);
    float *bias = malloc(sizeof(float) * (size_t)N), *y = malloc(sizeof(float) * (size_t)B * ldy);
    float *y0 = malloc(sizeof(float) * (size_t)B * ldy);
    float *Wp;
    double worst = 0;
    for (int i = 0; i < B * ldx; i++) x[i] = frand(&seed);
    for (int i = 0; i < N * K; i++) W[i] = frand(&seed);
    for (int i = 0; i < N; i++) bias[i] = frand(&seed);
    for (int i = 0; i < B * ldy; i++) y[i] = y0[i] = (i % ldy) < N ? frand(&seed) : 12345.0f;
    Wp = packed_new(ISA, W, N, K);
    cpu_gemm_run(ISA, CPU_GEMM_F32, x, ldx, Wp, with_bias ? bias : NULL, y, ldy, B, N, K, 0, cpu_gemm_panels(ISA, N), acc, NULL);
    for (int b = 0; b < B; b++) {
        for (int n = 0; n < N; n++) {
            long double yv = acc ? y0[b * ldy + n] : 0, bv = with_bias ? bias[n] : 0;
            long double ref = yv + bv, mag = fabsl(yv) + fabsl(bv);
            for (int k = 0; k < K; k++) {
                ref += (long double)x[b * ldx + k] * W[n * K + k];
                mag += fabsl((long double)x[b * ldx + k] * W[n * K + k]);
            }
            double err = (double)(fabsl(y[b * ldy + n] - ref) / (mag + 1e-30L));
            if (err > worst) worst = err;
        }
        for (int n = N; n < ldy; n++)
            CHECK(y[b * ldy + n] == 12345.0f, "B=%d N=%d K=%d: column %d beyond N was written", B, N, K, n);
    }
    free(x); free(W); free(bias); free(y); free(y0); free(Wp);
    return worst;
}

/* Every row-block size 1…12 and the splits of bigger batches, N on and off
 * the 32-column panel edge, K from 1 up. */
static void test_shapes(void)
{
    static const int Bs[] = {1, 2, 3, 5, 7, 11, 12, 13, 24, 25, 32, 37, 64, 100};
    static const int Ns[] = {1, 15, 16, 17, 31, 32, 33, 48, 64, 96, 192};
    static const int Ks[] = {1, 3, 16, 33, 192};
    unsigned seed = 7;
    double worst = 0;
    for (size_t bi = 0; bi < sizeof Bs / sizeof *Bs; bi++)
        for (size_t ni = 0; ni < sizeof Ns / sizeof *Ns; ni++)
            for (size_t ki = 0; ki < sizeof Ks / sizeof *Ks; ki++) {
                int B = Bs[bi], N = Ns[ni], K = Ks[ki];
                double e = run_case(B, N, K, K, N, (int)((bi + ni) % 2), (int)((ni + ki) % 2), seed++);
                if (e > worst) worst = e;
                CHECK(e < 1e-5, "B=%d N=%d K=%d: relative error %.3g", B, N, K, e);
            }
    printf("NOTE gemm shapes (%s): worst relative error %.3g (fp32 sums vs long double)\n", cpu_gemm_isa_name(ISA),
           worst);
}

/* Row strides wider than the product (q, k, v as column blocks of one
 * buffer) and y padding that must stay untouched. */
static void test_strides(void)
{
    CHECK(run_case(9, 40, 50, 77, 53, 1, 1, 3) < 1e-5, "strided, bias, accumulate");
    CHECK(run_case(33, 64, 192, 576, 200, 0, 0, 4) < 1e-5, "strided, plain");
}

/* Splitting panels between callers (the backend's threads) covers each
 * column exactly once, with the same values as one call. */
static void test_panel_ranges(void)
{
    int B = 20, N = 100, K = 40, P = cpu_gemm_panels(ISA, N);
    unsigned seed = 11;
    float *x = malloc(sizeof(float) * B * K), *W = malloc(sizeof(float) * N * K);
    float *y1 = malloc(sizeof(float) * B * N), *y2 = malloc(sizeof(float) * B * N);
    for (int i = 0; i < B * K; i++) x[i] = frand(&seed);
    for (int i = 0; i < N * K; i++) W[i] = frand(&seed);
    float *Wp = packed_new(ISA, W, N, K);
    cpu_gemm_run(ISA, CPU_GEMM_F32, x, K, Wp, NULL, y1, N, B, N, K, 0, P, 0, NULL);
    for (int i = 0; i < B * N; i++) y2[i] = NAN;
    for (int p = 0; p < P; p++) cpu_gemm_run(ISA, CPU_GEMM_F32, x, K, Wp, NULL, y2, N, B, N, K, p, p + 1, 0, NULL);
    CHECK(!memcmp(y1, y2, sizeof(float) * B * N), "panel-by-panel result differs from one call");
    cpu_gemm_run(ISA, CPU_GEMM_F32, x, K, Wp, NULL, y2, N, B, N, K, 1, 1, 0, NULL);   /* empty range writes nothing */
    CHECK(!memcmp(y1, y2, sizeof(float) * B * N), "an empty panel range wrote");
    free(x); free(W); free(y1); free(y2); free(Wp);
}

/* A session's logits must not depend on who shares its step: row b of a
 * batch is bit-identical to the same row computed alone (every element is
 * one FMA chain over k in order, whatever the row block). */
static void test_batch_invariance(void)
{
    /* B = 1 runs the single-row kernel on groups of panels: with AVX-512's
     * 32-column panels N = 300 is a group of 8 and one of 2 (partial), 170
     * one of 6, 520 two of 8 and one of 1 */
    static const int Ns[] = {300, 170, 520};
    for (size_t ni = 0; ni < sizeof Ns / sizeof *Ns; ni++) {
    int N = Ns[ni], K = 192, B = 37;
    unsigned seed = 5 + (unsigned)ni;
    float *x = malloc(sizeof(float) * B * K), *W = malloc(sizeof(float) * N * K), *bias = malloc(sizeof(float) * N);
    float *yb = malloc(sizeof(float) * B * N), *y1 = malloc(sizeof(float) * N);
    for (int i = 0; i < B * K; i++) x[i] = frand(&seed);
    for (int i = 0; i < N * K; i++) W[i] = frand(&seed);
    for (int i = 0; i < N; i++) bias[i] = frand(&seed);
    float *Wp = packed_new(ISA, W, N, K);
    cpu_gemm_run(ISA, CPU_GEMM_F32, x, K, Wp, bias, yb, N, B, N, K, 0, cpu_gemm_panels(ISA, N), 0, NULL);
    for (int b = 0; b < B; b++) {
        cpu_gemm_run(ISA, CPU_GEMM_F32, x + b * K, K, Wp, bias, y1, N, 1, N, K, 0, cpu_gemm_panels(ISA, N), 0, NULL);
        CHECK(!memcmp(y1, yb + b * N, sizeof(float) * N), "N %d: row %d of a batch of %d differs from the row alone", N, b, B);
    }
    free(x); free(W); free(bias); free(yb); free(y1); free(Wp);
    }
}

/* The activation a matmul flag asks for, as the reference applies it. */
static double act_ref(int flags, double s)
{
    if (flags & BACKEND_MM_GELU) return lind_gelu_erf((float)s);
    if (flags & BACKEND_MM_RELU2) return s > 0 ? s * s : 0;
    if (flags & BACKEND_MM_SIGMOID) return 1.0 / (1.0 + exp(-s));
    return s;
}

/* matmul through the CPU backend with each activation flag (GELU, RELU2,
 * SIGMOID) equals the product followed by the activation, on the path
 * opts.cpu_gemm selects; flag combinations the contract refuses are
 * refused. */
static void backend_flags_case(const char *gemm)
{
    enum { B = 19, N = 150, K = 64 };
    backend_opts bo;
    backend_opts_default(&bo);
    bo.cpu_gemm = gemm;
    backend *be;
    char err[256];
    int rc = backend_new("cpu", &bo, &be, err, sizeof err);
    CHECK(rc == 0, "%s: %s", gemm, err);
    if (rc) return;
    const backend_ops *o = be->ops;
    unsigned seed = 9;
    float x[B * K], W[N * K], bias[N], y[B * N];
    for (int i = 0; i < B * K; i++) x[i] = 2 * frand(&seed);
    for (int i = 0; i < N * K; i++) W[i] = 0.3f * frand(&seed);
    for (int i = 0; i < N; i++) bias[i] = frand(&seed);
    backend_buf *bx = NULL, *bW = NULL, *bb = NULL, *by = NULL;
    CHECK(o->buf_new(be, B * K, &bx) == 0 && backend_weight_new(be, N, K, W, &bW) == 0 &&
          o->buf_new(be, N, &bb) == 0 && o->buf_new(be, B * N, &by) == 0, "buffers");
    o->buf_upload(be, bx, 0, x, B * K);
    o->buf_upload(be, bb, 0, bias, N);
    backend_mview yv = bmview(by, 0, N);
    backend_view xv = bview(bx, 0, K);
    static const struct { int flag; const char *name; } acts[] = {
        {BACKEND_MM_GELU, "GELU"}, {BACKEND_MM_RELU2, "RELU2"}, {BACKEND_MM_SIGMOID, "SIGMOID"}};
    for (size_t a = 0; a < sizeof acts / sizeof *acts; a++) {
        int f = acts[a].flag;
        /* y[B × N] = act(x[B × K] · W[N × K]ᵀ + b) */
        CHECK(o->matmul(be, yv, xv, bW, bb, B, N, K, f) == 0, "%s: matmul %s", gemm, acts[a].name);
        o->buf_download(be, by, 0, y, B * N);
        double worst = 0;
        for (int b = 0; b < B; b++)
            for (int n = 0; n < N; n++) {
                double s = bias[n], mag = fabs(bias[n]);
                for (int k = 0; k < K; k++) {
                    s += (double)x[b * K + k] * W[n * K + k];
                    mag += fabs((double)x[b * K + k] * W[n * K + k]);
                }
                /* ReLU² doubles the relative error of s: scale by |s| + mag */
                double scale = f == BACKEND_MM_RELU2 ? mag * (fabs(s) + mag) : mag;
                double e = fabs(y[b * N + n] - act_ref(f, s)) / (scale + 1e-30);
                if (e > worst) worst = e;
            }
        CHECK(worst < 1e-5, "%s: %s(x·Wᵀ + b) off by %.3g relative", gemm, acts[a].name, worst);
        CHECK(o->matmul(be, yv, xv, bW, bb, B, N, K, f | BACKEND_MM_ACCUMULATE) == -EINVAL,
              "%s: %s with accumulate accepted", gemm, acts[a].name);
        CHECK(o->matmul(be, bmview(by, 0, N + 1), xv, bW, bb, B - 1, N, K, f) == -EINVAL,
              "%s: %s with ldy != N accepted", gemm, acts[a].name);
    }
    CHECK(o->matmul(be, yv, xv, bW, bb, B, N, K, BACKEND_MM_RELU2 | BACKEND_MM_SIGMOID) == -EINVAL,
          "%s: two activations accepted", gemm);
    CHECK(o->matmul(be, yv, xv, bW, bb, B, N, K, BACKEND_MM_GELU | BACKEND_MM_RELU2) == -EINVAL,
          "%s: GELU with RELU2 accepted", gemm);
    CHECK(o->matmul(be, yv, xv, bW, bb, B, N, K, 16) == -EINVAL, "%s: unknown flag accepted", gemm);
    o->buf_free(be, bx); o->buf_free(be, bW); o->buf_free(be, bb); o->buf_free(be, by);
    backend_free(be);
}

/* ---- half-precision weights ---------------------------------------------- */

/* Independent references for the two 16-bit formats. */
static float ref_f16(uint16_t h)
{
    int e = (h >> 10) & 31, m = h & 1023;
    float v = e == 0 ? ldexpf((float)m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexpf((float)(1024 + m), e - 25);
    return (h & 0x8000) ? -v : v;
}
static float ref_bf16(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static float ref_half(cpu_gemm_wtype wt, uint16_t h) { return wt == CPU_GEMM_F16 ? ref_f16(h) : ref_bf16(h); }

/* Random finite half bits of moderate size, with subnormals and zeros
 * (exponent 0) now and then. */
static uint16_t hrand(cpu_gemm_wtype wt, unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    unsigned r = *s >> 4, e = (r >> 16) % 12;
    if (wt == CPU_GEMM_F16) return (uint16_t)((r & 0x83FF) | (e ? (e + 6) << 10 : 0));       /* 2^-8 … 2^2 */
    return (uint16_t)((r & 0x807F) | (e ? (e + 118) << 7 : 0));                             /* 2^-8 … 2^2 */
}

/* Half weights packed as the backend packs them: bf16 with its columns
 * interleaved (cpu_gemm_pack_bf16), fp16 in order. */
static uint16_t *half_packed_new(cpu_gemm_isa isa, cpu_gemm_wtype wt, const uint16_t *W, int N, int K)
{
    uint16_t *Wp = aligned_alloc(64, ((cpu_gemm_packed_floats(isa, N, K) * sizeof(uint16_t) + 63) / 64) * 64);
    (wt == CPU_GEMM_BF16 ? cpu_gemm_pack_bf16 : cpu_gemm_pack_half)(isa, W, N, K, Wp);
    return Wp;
}

/* Every half pattern widens to its exact value. */
static void test_widen(void)
{
    static uint16_t h[65536];
    static float f[65536];
    for (int i = 0; i < 65536; i++) h[i] = (uint16_t)i;
    for (int w = 0; w < 2; w++) {
        cpu_gemm_wtype wt = w ? CPU_GEMM_BF16 : CPU_GEMM_F16;
        cpu_gemm_widen(wt, h, f, 65536);
        int bad = 0;
        for (int i = 0; i < 65536; i++) {
            float r = ref_half(wt, h[i]);
            if (isnan(r) ? !isnan(f[i]) : memcmp(&r, &f[i], sizeof r) != 0) {
                if (!bad) CHECK(0, "%s %04x widened to %a, not %a", w ? "bf16" : "f16", i, f[i], r);
                bad++;
            }
        }
    }
}

/* One product with half weights against the fp32 kernel on the widened
 * weights: equal bit for bit. Returns 1 when equal. */
static int half_case(cpu_gemm_wtype wt, int B, int N, int K, int ldx, int ldy, int with_bias, int flags, int p0,
                     int p1, unsigned seed)
{
    float *x = malloc(sizeof(float) * (size_t)B * ldx), *Wf = malloc(sizeof(float) * (size_t)N * K);
    uint16_t *Wh = malloc(sizeof(uint16_t) * (size_t)N * K);
    float *bias = malloc(sizeof(float) * (size_t)N), *yf = malloc(sizeof(float) * (size_t)B * ldy);
    float *yh = malloc(sizeof(float) * (size_t)B * ldy), *yw = malloc(sizeof(float) * (size_t)B * ldy);
    float *scratch = aligned_alloc(64, ((cpu_gemm_scratch_floats(ISA, K) * sizeof(float) + 63) / 64) * 64);
    for (int i = 0; i < B * ldx; i++) x[i] = frand(&seed);
    for (int i = 0; i < N * K; i++) Wf[i] = ref_half(wt, Wh[i] = hrand(wt, &seed));
    for (int i = 0; i < N; i++) bias[i] = frand(&seed);
    for (int i = 0; i < B * ldy; i++) yf[i] = yh[i] = yw[i] = frand(&seed);
    float *pf = packed_new(ISA, Wf, N, K);
    uint16_t *ph = half_packed_new(ISA, wt, Wh, N, K);
    const float *bp = with_bias ? bias : NULL;
    cpu_gemm_run(ISA, CPU_GEMM_F32, x, ldx, pf, bp, yf, ldy, B, N, K, p0, p1, flags, NULL);
    cpu_gemm_run(ISA, wt, x, ldx, ph, bp, yh, ldy, B, N, K, p0, p1, flags, NULL);      /* widened in registers */
    cpu_gemm_run(ISA, wt, x, ldx, ph, bp, yw, ldy, B, N, K, p0, p1, flags, scratch);   /* large B: panel by panel */
    int same = !memcmp(yf, yh, sizeof(float) * (size_t)B * ldy) && !memcmp(yf, yw, sizeof(float) * (size_t)B * ldy);
    free(x); free(Wf); free(Wh); free(bias); free(yf); free(yh); free(yw); free(scratch); free(pf); free(ph);
    return same;
}

/* Both formats, every row-block size and bigger batches, B = 1 on groups of
 * panels and single panels, N on and off the panel edge, strides, bias,
 * every flag, panel ranges starting off a group boundary. */
static void test_half_exact(void)
{
    static const int Bs[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 24, 25, 37, 64};
    static const int Ns[] = {1, 17, 32, 33, 100, 200};
    static const int Ks[] = {1, 7, 64};
    static const int Fs[] = {0, CPU_GEMM_ACCUMULATE, CPU_GEMM_GELU, CPU_GEMM_RELU2, CPU_GEMM_SIGMOID};
    unsigned seed = 77;
    int cases = 0, bad = 0;
    for (int w = 0; w < 2; w++)
        for (size_t bi = 0; bi < sizeof Bs / sizeof *Bs; bi++)
            for (size_t ni = 0; ni < sizeof Ns / sizeof *Ns; ni++)
                for (size_t ki = 0; ki < sizeof Ks / sizeof *Ks; ki++) {
                    cpu_gemm_wtype wt = w ? CPU_GEMM_BF16 : CPU_GEMM_F16;
                    int B = Bs[bi], N = Ns[ni], K = Ks[ki], P = cpu_gemm_panels(ISA, N);
                    int flags = Fs[(bi + ni + ki) % 5], odd = (int)((bi + ki) % 3 == 0);
                    int p0 = odd && P > 1 ? 1 : 0;
                    int ok = half_case(wt, B, N, K, K + odd, N + 3 * odd, (int)((ni + ki) % 2), flags, p0, P, seed++);
                    cases++;
                    if (!ok && bad++ < 5)
                        CHECK(0, "%s B=%d N=%d K=%d flags=%d panels [%d, %d): differs from the fp32 kernel",
                              w ? "bf16" : "f16", B, N, K, flags, p0, P);
                }
    CHECK(bad == 0, "%d of %d cases differ", bad, cases);
}

/* The same through the backend: weight_new_half against weight_new of the
 * widened weights, equal bit for bit, for each flag, at B = 1 and 19, on the
 * path opts.cpu_gemm selects (the OpenBLAS path widens at load). */
static void backend_half_case(const char *gemm)
{
    enum { BM = 40, N = 150, K = 64 };   /* B = 40: half panels widened once per panel */
    backend_opts bo;
    backend_opts_default(&bo);
    bo.cpu_gemm = gemm;
    backend *be;
    char err[256];
    int rc = backend_new("cpu", &bo, &be, err, sizeof err);
    CHECK(rc == 0, "%s: %s", gemm, err);
    if (rc) return;
    const backend_ops *o = be->ops;
    CHECK(o->weight_new_half != NULL, "%s: no weight_new_half", gemm);
    unsigned seed = 31;
    static float x[BM * K], Wf[N * K], bias[N], y0[BM * N], y1[BM * N], y2[BM * N];
    static uint16_t Wh[N * K];
    for (int i = 0; i < BM * K; i++) x[i] = frand(&seed);
    for (int i = 0; i < N; i++) bias[i] = frand(&seed);
    for (int i = 0; i < BM * N; i++) y0[i] = frand(&seed);
    backend_buf *bx = NULL, *bb = NULL, *by = NULL, *bad = NULL;
    CHECK(o->buf_new(be, BM * K, &bx) == 0 && o->buf_new(be, N, &bb) == 0 && o->buf_new(be, BM * N, &by) == 0,
          "buffers");
    o->buf_upload(be, bx, 0, x, BM * K);
    o->buf_upload(be, bb, 0, bias, N);
    static const int Fs[] = {0, BACKEND_MM_ACCUMULATE, BACKEND_MM_GELU, BACKEND_MM_RELU2, BACKEND_MM_SIGMOID};
    for (int w = 0; w < 2; w++) {
        int wtype = w ? BACKEND_W_BF16 : BACKEND_W_F16;
        for (int i = 0; i < N * K; i++)
            Wf[i] = ref_half(w ? CPU_GEMM_BF16 : CPU_GEMM_F16, Wh[i] = hrand(w ? CPU_GEMM_BF16 : CPU_GEMM_F16, &seed));
        backend_buf *bW = NULL, *bH = NULL;
        CHECK(backend_weight_new(be, N, K, Wf, &bW) == 0 && o->weight_new_half(be, N, K, Wh, wtype, &bH) == 0,
              "%s: weights", gemm);
        if (!bW || !bH) break;
        for (int B = 1; B <= BM; B += BM - 1)
            for (size_t f = 0; f < sizeof Fs / sizeof *Fs; f++) {
                o->buf_upload(be, by, 0, y0, BM * N);
                /* y[B × N] = x[B × K] · W[N × K]ᵀ + b (flags Fs[f]), W fp32 then half */
                CHECK(o->matmul(be, bmview(by, 0, N), bview(bx, 0, K), bW, bb, B, N, K, Fs[f]) == 0, "matmul fp32");
                o->buf_download(be, by, 0, y1, BM * N);
                o->buf_upload(be, by, 0, y0, BM * N);
                CHECK(o->matmul(be, bmview(by, 0, N), bview(bx, 0, K), bH, bb, B, N, K, Fs[f]) == 0, "matmul half");
                o->buf_download(be, by, 0, y2, BM * N);
                CHECK(!memcmp(y1, y2, sizeof y1), "%s %s B=%d flags %d: half weight differs from its fp32 widening",
                      gemm, w ? "bf16" : "f16", B, Fs[f]);
            }
        o->buf_free(be, bW);
        o->buf_free(be, bH);
    }
    CHECK(o->weight_new_half(be, N, K, Wh, 3, &bad) == -EINVAL, "%s: unknown wtype accepted", gemm);
    o->buf_free(be, bx); o->buf_free(be, bb); o->buf_free(be, by);
    backend_free(be);
}

/* The AVX2 and AVX-512 kernels compute every element as the same FMA chain:
 * equal bit for bit, with bias and accumulate, on an odd shape. */
static void test_isas_agree(void)
{
    enum { B = 29, N = 75, K = 131 };
    unsigned seed = 21;
    float x[B * K], W[N * K], bias[N], y1[B * N], y2[B * N];
    for (int i = 0; i < B * K; i++) x[i] = frand(&seed);
    for (int i = 0; i < N * K; i++) W[i] = frand(&seed);
    for (int i = 0; i < N; i++) bias[i] = frand(&seed);
    for (int i = 0; i < B * N; i++) y1[i] = y2[i] = frand(&seed);
    float *p512 = packed_new(CPU_GEMM_AVX512, W, N, K), *p256 = packed_new(CPU_GEMM_AVX2, W, N, K);
    cpu_gemm_run(CPU_GEMM_AVX512, CPU_GEMM_F32, x, K, p512, bias, y1, N, B, N, K, 0, cpu_gemm_panels(CPU_GEMM_AVX512, N),
                 CPU_GEMM_ACCUMULATE, NULL);
    cpu_gemm_run(CPU_GEMM_AVX2, CPU_GEMM_F32, x, K, p256, bias, y2, N, B, N, K, 0, cpu_gemm_panels(CPU_GEMM_AVX2, N),
                 CPU_GEMM_ACCUMULATE, NULL);
    CHECK(!memcmp(y1, y2, sizeof y1), "AVX2 and AVX-512 results differ");
    free(p512);
    free(p256);
    /* half weights: the same agreement, B = 1 (single-row kernels) and 29 */
    uint16_t Wh[N * K];
    float y3[B * N], y4[B * N];
    for (int w = 0; w < 2; w++) {
        cpu_gemm_wtype wt = w ? CPU_GEMM_BF16 : CPU_GEMM_F16;
        for (int i = 0; i < N * K; i++) Wh[i] = hrand(wt, &seed);
        uint16_t *h512 = half_packed_new(CPU_GEMM_AVX512, wt, Wh, N, K), *h256 = half_packed_new(CPU_GEMM_AVX2, wt, Wh, N, K);
        for (int b = 1; b <= B; b += B - 1) {
            memcpy(y3, y1, sizeof y3);
            memcpy(y4, y1, sizeof y4);
            cpu_gemm_run(CPU_GEMM_AVX512, wt, x, K, h512, bias, y3, N, b, N, K, 0, cpu_gemm_panels(CPU_GEMM_AVX512, N),
                         CPU_GEMM_ACCUMULATE, NULL);
            cpu_gemm_run(CPU_GEMM_AVX2, wt, x, K, h256, bias, y4, N, b, N, K, 0, cpu_gemm_panels(CPU_GEMM_AVX2, N),
                         CPU_GEMM_ACCUMULATE, NULL);
            CHECK(!memcmp(y3, y4, sizeof y3), "%s B=%d: AVX2 and AVX-512 results differ", w ? "bf16" : "f16", b);
        }
        free(h512);
        free(h256);
    }
}


/* ---- bf16 compute (vdpbf16ps) -------------------------------------------- */

#include "kernels/half.h"

static uint16_t *dot_packed_new(const uint16_t *W, int N, int K)
{
    uint16_t *Wp = aligned_alloc(64, ((cpu_gemm_dot_packed_elems(N, K) * sizeof(uint16_t) + 63) / 64) * 64);
    cpu_gemm_pack_dot(W, N, K, Wp);
    return Wp;
}

/* Activations rounded as the scalar reference rounds (nearest even) for
 * normal numbers, zero for fp32 subnormals (the instruction flushes them),
 * and the row padded with zeros up to its stride. */
static void test_dot_round(void)
{
    enum { B = 3, K = 77 };
    int ld = cpu_gemm_dot_ld(K);
    CHECK(ld >= K + 1 && ld % 32 == 0, "ld %d for K %d", ld, K);
    float x[B * K];
    uint16_t xb[B * 96];
    unsigned seed = 3;
    for (int i = 0; i < B * K; i++) x[i] = frand(&seed) * ldexpf(1.0f, (int)(i % 40) - 20);
    x[5] = 1.0f + ldexpf(1.0f, -8);                    /* a tie: to even (1.0) */
    x[6] = 1.0f + 3 * ldexpf(1.0f, -8);                /* a tie: to even (1 + 2^-6) */
    x[7] = ldexpf(1.0f, -130);                         /* subnormal: 0 */
    x[8] = -0.0f;
    memset(xb, 0xAB, sizeof xb);
    cpu_gemm_round_bf16(x, K, B, K, xb, ld);
    int bad = 0;
    for (int b = 0; b < B; b++)
        for (int k = 0; k < ld; k++) {
            float v = k < K ? x[b * K + k] : 0.0f;
            uint16_t want = fpclassify(v) == FP_SUBNORMAL ? (uint16_t)(signbit(v) ? 0x8000 : 0) : lind_f32_to_bf16(v);
            if (xb[b * ld + k] != want && bad++ < 5)
                CHECK(0, "row %d k %d: %a rounded to %04x, want %04x", b, k, v, xb[b * ld + k], want);
        }
    CHECK(xb[5] == 0x3f80 && xb[6] == 0x3f82, "ties: %04x %04x", xb[5], xb[6]);
    CHECK(bad == 0, "%d elements rounded wrongly", bad);
    /* strides of whole lines, never a multiple of 4 KiB */
    static const int Ks[] = {1, 31, 32, 768, 1024, 2047, 2048, 3072, 4096, 8192};
    for (size_t i = 0; i < sizeof Ks / sizeof *Ks; i++) {
        int l = cpu_gemm_dot_ld(Ks[i]);
        CHECK(l >= Ks[i] + Ks[i] % 2 && l % 32 == 0 && (l * 2) % 4096 != 0 && l <= Ks[i] + 64, "ld %d for K %d", l,
              Ks[i]);
    }
}

/* y = (acc ? y0 : 0) + bias + bf16(x)·Wᵀ against a long-double sum of the
 * same bf16 values (the products are exact in fp32; only the fp32 sums
 * round), for row blocks, panel tails, odd K (a padded last pair), strides,
 * flags; columns beyond N untouched. Returns the worst relative error. */
typedef void (*dot_kernel)(const uint16_t *xb, int ldxb, const uint16_t *Wp, const float *bias, float *y, int ldy,
                           int B, int N, int K, int p0, int p1, int flags);

static double dot_case(dot_kernel run, int B, int N, int K, int ldx, int ldy, int with_bias, int flags, unsigned seed)
{
    int ld = cpu_gemm_dot_ld(K);
    float *x = malloc(sizeof(float) * (size_t)B * ldx), *bias = malloc(sizeof(float) * N);
    float *y = malloc(sizeof(float) * (size_t)B * ldy), *y0 = malloc(sizeof(float) * (size_t)B * ldy);
    uint16_t *W = malloc(sizeof(uint16_t) * (size_t)N * K), *xb = malloc(sizeof(uint16_t) * (size_t)B * ld);
    for (int i = 0; i < B * ldx; i++) x[i] = frand(&seed);
    for (int i = 0; i < N * K; i++) W[i] = hrand(CPU_GEMM_BF16, &seed);
    for (int i = 0; i < N; i++) bias[i] = frand(&seed);
    for (int i = 0; i < B * ldy; i++) y[i] = y0[i] = (i % ldy) < N ? frand(&seed) : 12345.0f;
    uint16_t *Wp = dot_packed_new(W, N, K);
    cpu_gemm_round_bf16(x, ldx, B, K, xb, ld);
    run(xb, ld, Wp, with_bias ? bias : NULL, y, ldy, B, N, K, 0, cpu_gemm_panels(CPU_GEMM_AVX512, N), flags);
    double worst = 0;
    int acc = flags & CPU_GEMM_ACCUMULATE;
    for (int b = 0; b < B; b++) {
        for (int n = 0; n < N; n++) {
            long double s = with_bias ? bias[n] : 0, mag = fabsl(s);
            for (int k = 0; k < K; k++) {
                long double t = (long double)ref_bf16(xb[b * ld + k]) * ref_bf16(W[n * K + k]);
                s += t;
                mag += fabsl(t);
            }
            double ref = (double)s, got = y[b * ldy + n];
            if (acc) {
                ref += y0[b * ldy + n];
                mag += fabsl((long double)y0[b * ldy + n]);
            } else if (flags & CPU_GEMM_ACTIVATIONS) {
                /* the sum's error scaled by the activation's slope (≤ 2|s| + 1.2
                 * for GELU, ReLU², sigmoid), plus the activation's own rounding */
                mag = mag * (2 * fabsl((long double)ref) + 1.2L);
                ref = act_ref(flags, ref);
                mag += fabsl((long double)ref);
            }
            double err = fabs(got - ref) / (double)(mag + 1e-30L);
            if (err > worst) worst = err;
        }
        for (int n = N; n < ldy; n++)
            CHECK(y[b * ldy + n] == 12345.0f, "B=%d N=%d K=%d: column %d beyond N was written", B, N, K, n);
    }
    free(x); free(bias); free(y); free(y0); free(W); free(xb); free(Wp);
    return worst;
}

static void dot_shapes(const char *what, dot_kernel run, const int *Ks, int nK)
{
    static const int Bs[] = {1, 2, 5, 11, 12, 13, 16, 17, 25, 33, 37, 64};
    static const int Ns[] = {1, 17, 32, 33, 100, 160, 200};
    static const int Fs[] = {0, CPU_GEMM_ACCUMULATE, CPU_GEMM_GELU, CPU_GEMM_RELU2, CPU_GEMM_SIGMOID};
    unsigned seed = 101;
    double worst = 0;
    int i = 0;
    for (size_t bi = 0; bi < sizeof Bs / sizeof *Bs; bi++)
        for (size_t ni = 0; ni < sizeof Ns / sizeof *Ns; ni++)
            for (int ki = 0; ki < nK; ki++, i++) {
                int B = Bs[bi], N = Ns[ni], K = Ks[ki], odd = i % 3 == 0, flags = Fs[i % 5];
                double e = dot_case(run, B, N, K, K + odd, N + 2 * odd, i % 2, flags, seed++);
                if (e > worst) worst = e;
                CHECK(e < 1e-5, "%s: B=%d N=%d K=%d flags %d: relative error %.3g", what, B, N, K, flags, e);
            }
    printf("NOTE %s shapes: worst relative error %.3g (fp32 sums of exact bf16 products vs long double)\n", what,
           worst);
}

static void test_dot_shapes(void)
{
    static const int Ks[] = {1, 2, 7, 64, 193};
    dot_shapes("dot", cpu_gemm_run_dot, Ks, 5);
}

/* The AMX kernel: K a multiple of 32 (and 32·n − 1, its last pair padded). */
static void test_amx_shapes(void)
{
    static const int Ks[] = {32, 63, 64, 160};
    dot_shapes("amx", cpu_gemm_run_dot_amx, Ks, 4);
}

/* Batch invariance, the property prefill relies on: row b of any batch is
 * bit for bit the row alone (the single-row kernel), whatever the panel
 * range a thread is given. */
static void dot_batch_invariance(dot_kernel run, int K)
{
    int N = 300, ld = cpu_gemm_dot_ld(K), P = cpu_gemm_panels(CPU_GEMM_AVX512, N);
    static const int Bs[] = {2, 7, 12, 13, 16, 17, 31, 33, 37, 64};
    unsigned seed = 55;
    float *x = malloc(sizeof(float) * 64 * K), *bias = malloc(sizeof(float) * N);
    float *yb = malloc(sizeof(float) * 64 * N), *y1 = malloc(sizeof(float) * N);
    uint16_t *W = malloc(sizeof(uint16_t) * N * K), *xb = malloc(sizeof(uint16_t) * 64 * ld);
    for (int i = 0; i < 64 * K; i++) x[i] = frand(&seed);
    for (int i = 0; i < N * K; i++) W[i] = hrand(CPU_GEMM_BF16, &seed);
    for (int i = 0; i < N; i++) bias[i] = frand(&seed);
    uint16_t *Wp = dot_packed_new(W, N, K);
    cpu_gemm_round_bf16(x, K, 64, K, xb, ld);
    for (size_t bi = 0; bi < sizeof Bs / sizeof *Bs; bi++) {
        int B = Bs[bi];
        /* two callers splitting the panels at an odd place */
        run(xb, ld, Wp, bias, yb, N, B, N, K, 0, 3, 0);
        run(xb, ld, Wp, bias, yb, N, B, N, K, 3, P, 0);
        for (int b = 0; b < B; b++) {
            run(xb + (size_t)b * ld, ld, Wp, bias, y1, N, 1, N, K, 0, P, 0);
            CHECK(!memcmp(y1, yb + (size_t)b * N, sizeof(float) * N), "row %d of a batch of %d differs from the row alone",
                  b, B);
        }
    }
    free(x); free(bias); free(yb); free(y1); free(W); free(xb); free(Wp);
}

static void test_dot_batch_invariance(void) { dot_batch_invariance(cpu_gemm_run_dot, 193); }
static void test_amx_batch_invariance(void) { dot_batch_invariance(cpu_gemm_run_dot_amx, 160); }

/* Random inputs of a backend bf16-compute case: x [B × K], bias [N], y0
 * [B × N], bf16 Wh [N × K]; xb = x rounded (row stride ld). Returns Wh
 * packed for the dot kernels (the caller frees it). */
static uint16_t *dot_inputs(unsigned *seed, int B, int N, int K, float *x, float *bias, float *y0, uint16_t *Wh,
                            uint16_t *xb, int ld)
{
    for (int i = 0; i < B * K; i++) x[i] = frand(seed);
    for (int i = 0; i < N; i++) bias[i] = frand(seed);
    for (int i = 0; i < B * N; i++) y0[i] = frand(seed);
    for (int i = 0; i < N * K; i++) Wh[i] = hrand(CPU_GEMM_BF16, seed);
    cpu_gemm_round_bf16(x, K, B, K, xb, ld);
    return dot_packed_new(Wh, N, K);
}

/* Through the backend: set_compute(BF16) makes bf16 weights run the dot
 * kernel (equal to cpu_gemm_run_dot on the same rounding, every flag, B = 1
 * and 40), leaves fp16 weights exact, and is refused on the AVX2 kernel. */
static void test_backend_dot(void)
{
    enum { BM = 40, N = 150, K = 65 };
    backend *be;
    char err[256];
    CHECK(backend_new("cpu", NULL, &be, err, sizeof err) == 0, "%s", err);
    const backend_ops *o = be->ops;
    CHECK(o->set_compute && o->set_compute(be, BACKEND_COMPUTE_BF16, err, sizeof err) == 0, "set_compute: %s", err);
    unsigned seed = 9;
    int ld = cpu_gemm_dot_ld(K);
    static float x[BM * K], bias[N], y0[BM * N], y1[BM * N], y2[BM * N];
    static uint16_t Wh[N * K], xb[BM * 96];
    uint16_t *Wp = dot_inputs(&seed, BM, N, K, x, bias, y0, Wh, xb, ld);
    backend_buf *bx = NULL, *bb = NULL, *by = NULL, *bH = NULL;
    CHECK(o->buf_new(be, BM * K, &bx) == 0 && o->buf_new(be, N, &bb) == 0 && o->buf_new(be, BM * N, &by) == 0 &&
          o->weight_new_half(be, N, K, Wh, BACKEND_W_BF16, &bH) == 0, "buffers");
    o->buf_upload(be, bx, 0, x, BM * K);
    o->buf_upload(be, bb, 0, bias, N);
    static const int Fs[] = {0, BACKEND_MM_ACCUMULATE, BACKEND_MM_GELU, BACKEND_MM_RELU2, BACKEND_MM_SIGMOID};
    for (int B = 1; B <= BM; B += BM - 1)
        for (size_t f = 0; f < sizeof Fs / sizeof *Fs; f++) {
            memcpy(y1, y0, sizeof y1);
            cpu_gemm_run_dot(xb, ld, Wp, bias, y1, N, B, N, K, 0, cpu_gemm_panels(CPU_GEMM_AVX512, N), Fs[f]);
            o->buf_upload(be, by, 0, y0, BM * N);
            /* y[B × N] = x[B × K] · W[N × K]ᵀ + b (flags Fs[f]) */
            CHECK(o->matmul(be, bmview(by, 0, N), bview(bx, 0, K), bH, bb, B, N, K, Fs[f]) == 0, "matmul");
            o->buf_download(be, by, 0, y2, BM * N);
            CHECK(!memcmp(y1, y2, sizeof y1), "B=%d flags %d: backend differs from the dot kernel", B, Fs[f]);
        }
    o->buf_free(be, bx); o->buf_free(be, bb); o->buf_free(be, by); o->buf_free(be, bH);
    free(Wp);
    backend_free(be);
    /* the AVX2 kernel has no bf16 compute: refused, saying why */
    backend_opts bo;
    backend_opts_default(&bo);
    bo.cpu_gemm = "avx2";
    int rc = backend_new("cpu", &bo, &be, err, sizeof err);
    if (rc == 0) {
        rc = be->ops->set_compute(be, BACKEND_COMPUTE_BF16, err, sizeof err);
        CHECK(rc == -ENOTSUP && strstr(err, "AVX-512"), "on AVX2: rc %d, '%s'", rc, err);
        backend_free(be);
    }
}

/* bf16 compute through a CPU backend made with opts: y[B × N] = x · Wᵀ + b
 * (flags), y preset to y0. */
static void backend_dot_run(const backend_opts *opts, const float *x, const uint16_t *Wh, const float *bias,
                            const float *y0, float *y, int B, int N, int K, int flags)
{
    backend *be;
    char err[256];
    CHECK(backend_new("cpu", opts, &be, err, sizeof err) == 0, "%s", err);
    const backend_ops *o = be->ops;
    CHECK(o->set_compute(be, BACKEND_COMPUTE_BF16, err, sizeof err) == 0, "set_compute: %s", err);
    backend_buf *bx = NULL, *bb = NULL, *by = NULL, *bH = NULL;
    CHECK(o->buf_new(be, (size_t)B * K, &bx) == 0 && o->buf_new(be, N, &bb) == 0 &&
          o->buf_new(be, (size_t)B * N, &by) == 0 && o->weight_new_half(be, N, K, Wh, BACKEND_W_BF16, &bH) == 0,
          "buffers");
    o->buf_upload(be, bx, 0, x, (size_t)B * K);
    o->buf_upload(be, bb, 0, bias, N);
    o->buf_upload(be, by, 0, y0, (size_t)B * N);
    CHECK(o->matmul(be, bmview(by, 0, N), bview(bx, 0, K), bH, bb, B, N, K, flags) == 0, "matmul");
    o->buf_download(be, by, 0, y, (size_t)B * N);
    o->buf_free(be, bx); o->buf_free(be, bb); o->buf_free(be, by); o->buf_free(be, bH);
    backend_free(be);
}

/* Where the CPU has AMX: the backend runs bf16 compute of a K that fits on
 * the tiles (bit for bit cpu_gemm_run_dot_amx, B = 1 and 40, every flag),
 * and with cpu_no_amx (LIND_CPU_AMX=0) on vdpbf16ps (cpu_gemm_run_dot); the
 * two kernels' results differ in the last bits, so each comparison tells
 * which one ran. */
static void test_backend_amx(void)
{
    enum { BM = 40, N = 150, K = 96 };
    int ld = cpu_gemm_dot_ld(K), P = cpu_gemm_panels(CPU_GEMM_AVX512, N);
    unsigned seed = 19;
    static float x[BM * K], bias[N], y0[BM * N], ya[BM * N], yd[BM * N], yb[BM * N];
    static uint16_t Wh[N * K], xb[BM * 128];
    uint16_t *Wp = dot_inputs(&seed, BM, N, K, x, bias, y0, Wh, xb, ld);
    backend_opts no;
    backend_opts_default(&no);
    no.cpu_no_amx = 1;
    static const int Fs[] = {0, BACKEND_MM_ACCUMULATE, BACKEND_MM_GELU, BACKEND_MM_RELU2, BACKEND_MM_SIGMOID};
    int differ = 0;
    for (int B = 1; B <= BM; B += BM - 1)
        for (size_t f = 0; f < sizeof Fs / sizeof *Fs; f++) {
            memcpy(ya, y0, sizeof ya);
            memcpy(yd, y0, sizeof yd);
            cpu_gemm_run_dot_amx(xb, ld, Wp, bias, ya, N, B, N, K, 0, P, Fs[f]);
            cpu_gemm_run_dot(xb, ld, Wp, bias, yd, N, B, N, K, 0, P, Fs[f]);
            differ += memcmp(ya, yd, sizeof(float) * (size_t)B * N) != 0;
            backend_dot_run(NULL, x, Wh, bias, y0, yb, B, N, K, Fs[f]);
            CHECK(!memcmp(ya, yb, sizeof(float) * (size_t)B * N), "B=%d flags %d: backend differs from the AMX kernel",
                  B, Fs[f]);
            backend_dot_run(&no, x, Wh, bias, y0, yb, B, N, K, Fs[f]);
            CHECK(!memcmp(yd, yb, sizeof(float) * (size_t)B * N),
                  "B=%d flags %d: cpu_no_amx: backend differs from the vdpbf16ps kernel", B, Fs[f]);
        }
    CHECK(differ > 0, "the AMX and vdpbf16ps kernels agreed bit for bit in every case: the check tells nothing");
    free(Wp);
    /* what the benchmarks ask (backend_cpu_amx) is what the backend does */
    backend_opts o;
    backend_opts_default(&o);
    CHECK(backend_cpu_amx(NULL) && backend_cpu_amx(&o), "defaults: AMX not reported");
    CHECK(!backend_cpu_amx(&no), "cpu_no_amx: AMX reported");
    o.cpu_gemm = "avx2";
    CHECK(!backend_cpu_amx(&o), "the avx2 kernel: AMX reported");
    o.cpu_gemm = "no-such-kernel";
    CHECK(!backend_cpu_amx(&o), "a refused kernel: AMX reported");
    o.cpu_gemm = "avx512";
    CHECK(backend_cpu_amx(&o), "the avx512 kernel: AMX not reported");
}

static void test_backend_flags_avx512(void) { backend_flags_case("avx512"); }
static void test_backend_flags_avx2(void) { backend_flags_case("avx2"); }
static void test_backend_flags_openblas(void) { backend_flags_case("openblas"); }
static void test_backend_half_avx512(void) { backend_half_case("avx512"); }
static void test_backend_half_avx2(void) { backend_half_case("avx2"); }
static void test_backend_half_openblas(void) { backend_half_case("openblas"); }

/* An unknown kernel name, or one this CPU cannot run, is refused by name —
 * given as the option, or read from LIND_CPU_GEMM by an entry point. */
static void test_backend_bad_gemm_env(void)
{
    backend *be;
    char err[256] = "";
    backend_opts bo;
    backend_opts_default(&bo);
    bo.cpu_gemm = "avx1024";
    int rc = backend_new("cpu", &bo, &be, err, sizeof err);
    CHECK(rc == -EINVAL && be == NULL && strstr(err, "\"avx1024\"") && strstr(err, "unknown"), "rc %d, message '%s'",
          rc, err);
    if (rc == 0) backend_free(be);
    setenv("LIND_CPU_GEMM", "avx1024", 1);
    rc = backend_opts_from_env(&bo, err, sizeof err);   /* bo.cpu_gemm points into the environment */
    CHECK(rc == 0 && bo.cpu_gemm && !strcmp(bo.cpu_gemm, "avx1024"), "from_env: rc %d, '%s'", rc, err);
    if (rc == 0) {   /* the name is checked where the CPU is known: the constructor */
        err[0] = 0;
        rc = backend_new("cpu", &bo, &be, err, sizeof err);
        CHECK(rc == -EINVAL && strstr(err, "avx1024"), "rc %d, message '%s'", rc, err);
        if (rc == 0) backend_free(be);
    }
    unsetenv("LIND_CPU_GEMM");
}

/* Every case for one kernel, named after it. */
static void run_isa(cpu_gemm_isa isa)
{
    static const struct { const char *name; void (*fn)(void); } cases[] = {
        {"shapes", test_shapes}, {"strides", test_strides}, {"panel_ranges", test_panel_ranges},
        {"batch_invariance", test_batch_invariance}, {"half_exact", test_half_exact},
    };
    ISA = isa;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char name[64];
        snprintf(name, sizeof name, "%s_%s", cases[i].name, isa == CPU_GEMM_AVX512 ? "avx512" : "avx2");
        check_begin(name);
        cases[i].fn();
        check_end();
    }
}

int main(void)
{
    RUN(test_widen);
    RUN(test_backend_flags_openblas);
    RUN(test_backend_half_openblas);
    RUN(test_backend_bad_gemm_env);
    int any = 0;   /* some packed kernel runs here */
    if (cpu_gemm_supported(CPU_GEMM_AVX512)) {
        RUN(test_backend_flags_avx512);
        RUN(test_backend_half_avx512);
        run_isa(CPU_GEMM_AVX512);
        any = 1;
    } else {
        printf("SKIP gemm_avx512: this CPU has no AVX-512F\n");
    }
    if (cpu_gemm_supported(CPU_GEMM_AVX2)) {
        RUN(test_backend_flags_avx2);
        RUN(test_backend_half_avx2);
        run_isa(CPU_GEMM_AVX2);
        any = 1;
    } else {
        printf("SKIP gemm_avx2: this CPU has no AVX2+FMA\n");
    }
    if (cpu_gemm_supported(CPU_GEMM_AVX512) && cpu_gemm_supported(CPU_GEMM_AVX2)) RUN(test_isas_agree);
    if (cpu_gemm_dot_supported()) {
        RUN(test_dot_round);
        RUN(test_dot_shapes);
        RUN(test_dot_batch_invariance);
        RUN(test_backend_dot);
    } else {
        printf("SKIP gemm_dot: this CPU has no AVX512_BF16 (bf16 compute is refused here)\n");
    }
    if (cpu_gemm_amx_supported()) {
        RUN(test_amx_shapes);
        RUN(test_amx_batch_invariance);
        RUN(test_backend_amx);
    } else {
        printf("SKIP gemm_amx: no AMX-BF16 here (or the kernel refused tile data): bf16 compute runs on vdpbf16ps\n");
    }
    if (!any) printf("NOTE the CPU backend uses OpenBLAS for every product on this CPU\n");
    return check_exit();
}
