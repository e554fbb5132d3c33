/* tests/test_core_gemm.c — the CPU backend's packed decode GEMM
 * (kernels/cpu/gemm.h), for each kernel this CPU runs (AVX-512, AVX2),
 * against a long-double reference: every row-block size, panel tails,
 * strides, bias, accumulate, panel ranges; that a row's result does not
 * depend on the batch around it; that the two kernels agree bit for bit; and
 * the backend's matmul flags (fused GELU) on each of its GEMM paths. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/cpu/gemm.h"
#include "kernels/mixer_math.h"
#include "tests/check.h"

static cpu_gemm_isa ISA;   /* the kernel under test */

static float *packed_new(cpu_gemm_isa isa, const float *W, int N, int K) {
    float *Wp = aligned_alloc(64, ((cpu_gemm_packed_floats(isa, N, K) * sizeof(float) + 63) / 64) * 64);
    cpu_gemm_pack(isa, W, N, K, Wp);
    return Wp;
}

static float frand(unsigned *s) {
    *s = *s * 1103515245u + 12345u;
    return (float)((*s >> 8) & 0xFFFF) / 32768.0f - 1.0f;
}

/* One product y = (acc ? y0 : 0) + bias + x·Wᵀ through cpu_gemm_run over all
 * panels, checked element by element; the padding columns of y (ldy > N)
 * must keep their sentinel. Returns the worst relative error. */
static double run_case(int B, int N, int K, int ldx, int ldy, int with_bias, int acc, unsigned seed) {
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
    cpu_gemm_run(ISA, x, ldx, Wp, with_bias ? bias : NULL, y, ldy, B, N, K, 0, cpu_gemm_panels(ISA, N), acc);
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
static void test_shapes(void) {
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
static void test_strides(void) {
    CHECK(run_case(9, 40, 50, 77, 53, 1, 1, 3) < 1e-5, "strided, bias, accumulate");
    CHECK(run_case(33, 64, 192, 576, 200, 0, 0, 4) < 1e-5, "strided, plain");
}

/* Splitting panels between callers (the backend's threads) covers each
 * column exactly once, with the same values as one call. */
static void test_panel_ranges(void) {
    int B = 20, N = 100, K = 40, P = cpu_gemm_panels(ISA, N);
    unsigned seed = 11;
    float *x = malloc(sizeof(float) * B * K), *W = malloc(sizeof(float) * N * K);
    float *y1 = malloc(sizeof(float) * B * N), *y2 = malloc(sizeof(float) * B * N);
    for (int i = 0; i < B * K; i++) x[i] = frand(&seed);
    for (int i = 0; i < N * K; i++) W[i] = frand(&seed);
    float *Wp = packed_new(ISA, W, N, K);
    cpu_gemm_run(ISA, x, K, Wp, NULL, y1, N, B, N, K, 0, P, 0);
    for (int i = 0; i < B * N; i++) y2[i] = NAN;
    for (int p = 0; p < P; p++) cpu_gemm_run(ISA, x, K, Wp, NULL, y2, N, B, N, K, p, p + 1, 0);
    CHECK(!memcmp(y1, y2, sizeof(float) * B * N), "panel-by-panel result differs from one call");
    cpu_gemm_run(ISA, x, K, Wp, NULL, y2, N, B, N, K, 1, 1, 0);   /* empty range writes nothing */
    CHECK(!memcmp(y1, y2, sizeof(float) * B * N), "an empty panel range wrote");
    free(x); free(W); free(y1); free(y2); free(Wp);
}

/* A session's logits must not depend on who shares its step: row b of a
 * batch is bit-identical to the same row computed alone (every element is
 * one FMA chain over k in order, whatever the row block). */
static void test_batch_invariance(void) {
    int N = 96, K = 192, B = 37;
    unsigned seed = 5;
    float *x = malloc(sizeof(float) * B * K), *W = malloc(sizeof(float) * N * K), *bias = malloc(sizeof(float) * N);
    float *yb = malloc(sizeof(float) * B * N), *y1 = malloc(sizeof(float) * N);
    for (int i = 0; i < B * K; i++) x[i] = frand(&seed);
    for (int i = 0; i < N * K; i++) W[i] = frand(&seed);
    for (int i = 0; i < N; i++) bias[i] = frand(&seed);
    float *Wp = packed_new(ISA, W, N, K);
    cpu_gemm_run(ISA, x, K, Wp, bias, yb, N, B, N, K, 0, cpu_gemm_panels(ISA, N), 0);
    for (int b = 0; b < B; b++) {
        cpu_gemm_run(ISA, x + b * K, K, Wp, bias, y1, N, 1, N, K, 0, cpu_gemm_panels(ISA, N), 0);
        CHECK(!memcmp(y1, yb + b * N, sizeof(float) * N), "row %d of a batch of %d differs from the row alone", b, B);
    }
    free(x); free(W); free(bias); free(yb); free(y1); free(Wp);
}

/* matmul through the CPU backend with BACKEND_MM_GELU equals the product
 * followed by lind_gelu_erf, on the path LIND_CPU_GEMM selects; flag
 * combinations the contract refuses are refused. */
static void backend_gelu_case(const char *gemm) {
    enum { B = 19, N = 150, K = 64 };
    setenv("LIND_CPU_GEMM", gemm, 1);
    backend *be;
    char err[256];
    int rc = backend_new("cpu", &be, err, sizeof err);
    unsetenv("LIND_CPU_GEMM");
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
    CHECK(o->matmul(be, bx, 0, K, bW, bb, by, 0, N, B, N, K, BACKEND_MM_GELU) == 0, "%s: matmul gelu", gemm);
    o->buf_download(be, by, 0, y, B * N);
    double worst = 0;
    for (int b = 0; b < B; b++)
        for (int n = 0; n < N; n++) {
            double s = bias[n], mag = fabs(bias[n]);
            for (int k = 0; k < K; k++) {
                s += (double)x[b * K + k] * W[n * K + k];
                mag += fabs((double)x[b * K + k] * W[n * K + k]);
            }
            double e = fabs(y[b * N + n] - lind_gelu_erf((float)s)) / (mag + 1e-30);
            if (e > worst) worst = e;
        }
    CHECK(worst < 1e-5, "%s: GELU(x·Wᵀ + b) off by %.3g relative", gemm, worst);
    CHECK(o->matmul(be, bx, 0, K, bW, bb, by, 0, N, B, N, K, BACKEND_MM_GELU | BACKEND_MM_ACCUMULATE) == -EINVAL,
          "%s: GELU with accumulate accepted", gemm);
    CHECK(o->matmul(be, bx, 0, K, bW, bb, by, 0, N + 1, B - 1, N, K, BACKEND_MM_GELU) == -EINVAL,
          "%s: GELU with ldy != N accepted", gemm);
    CHECK(o->matmul(be, bx, 0, K, bW, bb, by, 0, N, B, N, K, 4) == -EINVAL, "%s: unknown flag accepted", gemm);
    o->buf_free(be, bx); o->buf_free(be, bW); o->buf_free(be, bb); o->buf_free(be, by);
    backend_free(be);
}

/* The AVX2 and AVX-512 kernels compute every element as the same FMA chain:
 * equal bit for bit, with bias and accumulate, on an odd shape. */
static void test_isas_agree(void) {
    enum { B = 29, N = 75, K = 131 };
    unsigned seed = 21;
    float x[B * K], W[N * K], bias[N], y1[B * N], y2[B * N];
    for (int i = 0; i < B * K; i++) x[i] = frand(&seed);
    for (int i = 0; i < N * K; i++) W[i] = frand(&seed);
    for (int i = 0; i < N; i++) bias[i] = frand(&seed);
    for (int i = 0; i < B * N; i++) y1[i] = y2[i] = frand(&seed);
    float *p512 = packed_new(CPU_GEMM_AVX512, W, N, K), *p256 = packed_new(CPU_GEMM_AVX2, W, N, K);
    cpu_gemm_run(CPU_GEMM_AVX512, x, K, p512, bias, y1, N, B, N, K, 0, cpu_gemm_panels(CPU_GEMM_AVX512, N),
                 CPU_GEMM_ACCUMULATE);
    cpu_gemm_run(CPU_GEMM_AVX2, x, K, p256, bias, y2, N, B, N, K, 0, cpu_gemm_panels(CPU_GEMM_AVX2, N),
                 CPU_GEMM_ACCUMULATE);
    CHECK(!memcmp(y1, y2, sizeof y1), "AVX2 and AVX-512 results differ");
    free(p512);
    free(p256);
}

static void test_backend_gelu_avx512(void) { backend_gelu_case("avx512"); }
static void test_backend_gelu_avx2(void) { backend_gelu_case("avx2"); }
static void test_backend_gelu_openblas(void) { backend_gelu_case("openblas"); }

/* An unknown kernel name, or one this CPU cannot run, is refused by name. */
static void test_backend_bad_gemm_env(void) {
    backend *be;
    char err[256] = "";
    setenv("LIND_CPU_GEMM", "avx1024", 1);
    int rc = backend_new("cpu", &be, err, sizeof err);
    unsetenv("LIND_CPU_GEMM");
    CHECK(rc == -EINVAL && strstr(err, "LIND_CPU_GEMM=avx1024"), "rc %d, message '%s'", rc, err);
    if (rc == 0) backend_free(be);
}

/* Every case for one kernel, named after it. */
static void run_isa(cpu_gemm_isa isa) {
    static const struct { const char *name; void (*fn)(void); } cases[] = {
        {"shapes", test_shapes}, {"strides", test_strides}, {"panel_ranges", test_panel_ranges},
        {"batch_invariance", test_batch_invariance},
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

int main(void) {
    RUN(test_backend_gelu_openblas);
    RUN(test_backend_bad_gemm_env);
    int any = 0;   /* some packed kernel runs here */
    if (cpu_gemm_supported(CPU_GEMM_AVX512)) {
        RUN(test_backend_gelu_avx512);
        run_isa(CPU_GEMM_AVX512);
        any = 1;
    } else {
        printf("SKIP gemm_avx512: this CPU has no AVX-512F\n");
    }
    if (cpu_gemm_supported(CPU_GEMM_AVX2)) {
        RUN(test_backend_gelu_avx2);
        run_isa(CPU_GEMM_AVX2);
        any = 1;
    } else {
        printf("SKIP gemm_avx2: this CPU has no AVX2+FMA\n");
    }
    if (cpu_gemm_supported(CPU_GEMM_AVX512) && cpu_gemm_supported(CPU_GEMM_AVX2)) RUN(test_isas_agree);
    if (!any) printf("NOTE the CPU backend uses OpenBLAS for every product on this CPU\n");
    return check_exit();
}
