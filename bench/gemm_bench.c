/* bench/gemm_bench.c — the CPU backend's matrix products at RWKV-4 169M
 * shapes (d 768, ffn 3072, vocab 50277), in fp32, bf16, fp16, q8 and q4
 * weights.
 *
 * First the machine's DRAM read bandwidth (bench_read_gbs) and FMA ceiling
 * (every backend thread running independent fused multiply-adds in the
 * vector width of the backend's kernel, no memory traffic). Then each
 * product W [N × K] (768×768, 3072×768, 768×3072, 50277×768) at batch
 * B = 1, 8, 32, 64, 256 through backend matmul (every thread of the backend,
 * as the model runs it): µs per call, GFLOP/s (2·B·N·K per call) and GB/s of
 * weight bytes. Calls cycle through enough copies of the weight (≥ 96 MB
 * and ≥ 3 × the L3 this process sees: 300 MiB on the Intel host) that every
 * call reads its weight from DRAM, as a decode step does; with --warm, one
 * copy, so a weight that fits a cache is read from it (the kernel's own
 * rate, apart from the memory stream). Last, one token's products of the whole 169M model at
 * B = 1 (12 layers × 7 products + the head, 130.6M weights, the channel-mix
 * activations fused), against the bandwidth floor weight_bytes / read GB/s;
 * with --step-batch B, one batched step's products at B rows instead, in
 * GFLOP/s against the ceiling of their math (a decode step of B sessions
 * without the rest of the model: its layer norms, recurrences and logits).
 * Each product's figure is the best of 7 timed runs, a token's the best of
 * 30 (and the median).
 *
 *   usage: gemm_bench [--quick] [--token-only] [--compute-bf16] [--warm] [--step-batch B]
 * --quick (or BENCH_QUICK=1 in the environment): B = 1 and 64 only, short
 * runs — a smoke test of the program, not figures to quote. --token-only:
 * skip the per-product table. --compute-bf16: the backend in bf16 compute
 * mode (lind's --compute bf16), so the bf16 rows are its vdpbf16ps kernel. */
#include <errno.h>
#include <immintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/benchutil.h"
#include "kernels/backend.h"
#include "kernels/clock.h"
#include "kernels/cpu/gemm.h"

enum { WT_F32 = 0 };   /* with BACKEND_W_F16 / _BF16 / _Q8 / _Q4 */
/* bytes per weight; q8 and q4 count their codes and one fp16 scale per 32 */
static const struct { int wt; const char *name; double bytes; } DTYPES[] = {
    {WT_F32, "f32", 4},       {BACKEND_W_BF16, "bf16", 2},      {BACKEND_W_F16, "f16", 2},
    {BACKEND_W_Q8, "q8", 34.0 / 32}, {BACKEND_W_Q4, "q4", 18.0 / 32}};
static const struct { const char *what; int N, K; } SHAPES[] = {
    {"att k/v/r/o, ffn r", 768, 768},
    {"ffn key", 3072, 768},
    {"ffn value", 768, 3072},
    {"head", 50277, 768},
};
#define NDT (int)(sizeof DTYPES / sizeof *DTYPES)
#define NSHAPE (int)(sizeof SHAPES / sizeof *SHAPES)
/* the bytes of weight copies a product cycles through: ≥ 96 MB and 3 × the
 * L3 (0: one copy, --warm) */
static size_t cold_bytes = (size_t)96 << 20;

static unsigned rng = 12345;
static unsigned next(void)
{
    rng = rng * 1103515245u + 12345u;
    return rng >> 8;
}

/* Host weights of one dtype: fp32 values in ±[1/16, 1), or half bits of
 * the same range (no subnormals: they would not change the timing anyway). */
static void *host_weights(int wt, size_t n)
{
    if (wt == WT_F32 || wt == BACKEND_W_Q8 || wt == BACKEND_W_Q4) {   /* quantized at weight_new */
        float *w = malloc(n * sizeof *w);
        for (size_t i = 0; w && i < n; i++) w[i] = ((float)(next() & 0xFFFF) / 65536.0f - 0.5f) * 0.1f;
        return w;
    }
    uint16_t *w = malloc(n * sizeof *w);
    for (size_t i = 0; w && i < n; i++) {
        unsigned r = next();
        w[i] = wt == BACKEND_W_BF16 ? (uint16_t)((r & 0x807F) | ((123u + (r >> 16) % 4) << 7))
                                    : (uint16_t)((r & 0x83FF) | ((11u + (r >> 16) % 4) << 10));
    }
    return w;
}

static int weight_new(backend *be, int wt, int N, int K, const void *host, backend_buf **out)
{
    if (wt == WT_F32) return backend_weight_new(be, N, K, host, out);
    if (wt == BACKEND_W_Q8 || wt == BACKEND_W_Q4) {
        char err[256];
        if (!be->ops->weight_new_quant) return -ENOTSUP;
        return be->ops->weight_new_quant(be, N, K, host, wt, out, err, sizeof err);
    }
    if (!be->ops->weight_new_half) return -ENOTSUP;
    return be->ops->weight_new_half(be, N, K, host, wt, out);
}

/* The bench_fma_gflops kind of dtype d's math at B > 1: the bf16 rows'
 * bf16k, vpdpbusd for q8/q4 (their integer dots), FMA for the rest. */
static int math_kind(int d, int bf16k)
{
    int wt = DTYPES[d].wt;
    return wt == BACKEND_W_BF16 ? bf16k : wt == BACKEND_W_Q8 || wt == BACKEND_W_Q4 ? 2 : 0;
}

/* ---- FMA ceiling: bench_fma_gflops (bench/benchutil.h); kind 1 is
 * vdpbf16ps, the rate lind's bf16 compute mode (--compute bf16) runs at. */
static double fma_ceiling(int threads, int kind, int runs) { return bench_fma_gflops(threads, kind, runs); }

/* Best of 7 runs of at least min_s each: µs per call, calls cycling through
 * the ncopy weights. (Many short runs: on a shared machine the best one
 * falls in a quiet moment more often than one of a few long ones.) */
static double time_calls(backend *be, backend_buf **W, int ncopy, backend_buf *x, backend_buf *y, int B, int N,
                         int K, double min_s)
{
    const backend_ops *o = be->ops;
    /* y[B × N] = x[B × K] · W[N × K]ᵀ; first each weight once, to warm up */
    for (int c = 0; c < ncopy; c++) o->matmul(be, bmview(y, 0, N), bview(x, 0, K), W[c], NULL, B, N, K, 0);
    double best = 1e30;
    for (int run = 0; run < 7; run++) {
        long calls = 0;
        double t0 = clock_mono_s(), dt;
        do {
            o->matmul(be, bmview(y, 0, N), bview(x, 0, K), W[calls % ncopy], NULL, B, N, K, 0);
            calls++;
        } while ((dt = clock_mono_s() - t0) < min_s);
        if (dt / calls < best) best = dt / calls;
    }
    return best * 1e6;
}

/* bf16k: the ceiling kind of the bf16 rows (bench_fma_gflops: 0 FMA, 1
 * vdpbf16ps, 3 AMX tiles), the math they run on; the other rows' is FMA */
static int bench_shapes(backend *be, const int *Bs, int nB, double min_s, int threads, int bf16k)
{
    const backend_ops *o = be->ops;
    printf("## Products, per call\n\n");
    if (cold_bytes)
        printf("Weights cold (cycled through copies totalling ≥ %zu MB). ", cold_bytes >> 20);
    else
        printf("Weights warm (--warm: one copy, read from the caches that hold it). ");
    printf("GFLOP/s counts 2·B·N·K; GB/s is weight bytes "
           "per second; at B ≥ 32 \"ceiling\" is the ceiling of the row's math (FMA; %s for the bf16 rows) measured "
           "again right after the row's timing (on a shared machine it moves; vpdpbusd GOP/s for the q8/q4 rows), and "
           "%% the row's GFLOP/s against it.\n\n", bf16k == 3 ? "AMX TDPBF16PS" : bf16k == 1 ? "vdpbf16ps" : "FMA");
    printf("| W (N × K) | what | dtype | B | µs | GFLOP/s | weight GB/s | ceiling | %% |\n"
           "|---|---|---|---:|---:|---:|---:|---:|---:|\n");
    int maxB = Bs[nB - 1];
    for (int s = 0; s < NSHAPE; s++) {
        int N = SHAPES[s].N, K = SHAPES[s].K;
        backend_buf *x = NULL, *y = NULL;
        if (o->buf_new(be, (size_t)maxB * K, &x) || o->buf_new(be, (size_t)maxB * N, &y)) return -ENOMEM;
        float *hx = malloc(sizeof(float) * (size_t)maxB * K);
        for (size_t i = 0; i < (size_t)maxB * K; i++) hx[i] = (float)(next() & 0xFFFF) / 65536.0f - 0.5f;
        o->buf_upload(be, x, 0, hx, (size_t)maxB * K);
        free(hx);
        for (int d = 0; d < NDT; d++) {
            size_t wbytes = (size_t)((double)N * K * DTYPES[d].bytes);
            int ncopy = cold_bytes ? (int)((cold_bytes + wbytes - 1) / wbytes) : 1;
            void *host = host_weights(DTYPES[d].wt, (size_t)N * K);
            backend_buf **W = calloc((size_t)ncopy, sizeof *W);
            if (!host || !W) return -ENOMEM;
            for (int c = 0; c < ncopy; c++) {
                int rc = weight_new(be, DTYPES[d].wt, N, K, host, &W[c]);
                if (rc < 0) {
                    fprintf(stderr, "gemm_bench: weight %d × %d %s: %s\n", N, K, DTYPES[d].name, strerror(-rc));
                    return rc;
                }
            }
            free(host);
            for (int bi = 0; bi < nB; bi++) {
                int B = Bs[bi];
                double us = time_calls(be, W, ncopy, x, y, B, N, K, min_s), gf = 2.0 * B * N * K / us * 1e-3;
                printf("| %d × %d | %s | %s | %d | %.1f | %.1f | %.1f |", N, K, SHAPES[s].what, DTYPES[d].name, B, us,
                       gf, (double)wbytes / us * 1e-3);
                double ceil = B >= 32 ? fma_ceiling(threads, math_kind(d, bf16k), 1) : 0;
                if (ceil > 0)
                    printf(" %.1f | %.0f |\n", ceil, 100 * gf / ceil);
                else
                    printf(" | |\n");
                fflush(stdout);
            }
            for (int c = 0; c < ncopy; c++) o->buf_free(be, W[c]);
            free(W);
        }
        o->buf_free(be, x);
        o->buf_free(be, y);
    }
    printf("\n");
    return 0;
}

/* One token of the 169M model at B = 1: per layer the time mix's r, k, v
 * (768×768, r with SIGMOID) and output (accumulate), the channel mix's r
 * (SIGMOID), key (3072×768, RELU2) and value (768×3072, accumulate); then
 * the head. The dtypes take turns token by token, so a busy moment of a
 * shared machine hits them alike; the read bandwidth is measured again
 * every 10 rounds and after them, and the best of all is the floor's. */
enum { LAYERS = 12, D = 768, F = 3072, V = 50277, PER_LAYER = 7, NW = LAYERS * PER_LAYER + 1 };

static double best_of(const double *t, int n)
{
    double best = t[0];
    for (int i = 1; i < n; i++)
        if (t[i] < best) best = t[i];
    return best;
}

/* bench_token's B > 1 table: GFLOP/s against the ceiling of each dtype's
 * math (ceil[d]), measured before and after the section (the higher). */
static void print_step(int B, int nt, double t[NDT][64], const double *bytes, const double *ceil, double flops)
{
    printf("## One batched step's products at B = %d (RWKV-4 169M)\n\n", B);
    printf("%d layers × %d products + the %d × %d head at %d rows, %d steps per dtype taking turns; GFLOP/s counts "
           "2·B·N·K of every product (%.1f GFLOP a step); ceiling: the dtype's math (FMA; the bf16 row's kernel with "
           "--compute-bf16; vpdpbusd for q8/q4), the higher of its measurements before and after.\n\n",
           LAYERS, PER_LAYER, V, D, B, nt, flops / 1e9);
    printf("| dtype | weight MB | ms per step (best) | ms (median) | tokens/s (median) | GFLOP/s (median) | ceiling | %% |\n"
           "|---|---:|---:|---:|---:|---:|---:|---:|\n");
    for (int d = 0; d < NDT; d++) {
        double best = best_of(t[d], nt);
        double med = bench_median(t[d], (size_t)nt), g = flops / med / 1e9;
        printf("| %s | %.1f | %.3f | %.3f | %.0f | %.1f | %.1f | %.0f |\n", DTYPES[d].name, bytes[d] / 1e6, best * 1e3,
               med * 1e3, B / med, g, ceil[d], ceil[d] > 0 ? 100 * g / ceil[d] : 0);
    }
    printf("\n");
}

/* The dtype's math ceiling for B > 1 rows (kind as bench_fma_gflops). */
static double math_ceiling(int threads, int d, int bf16k) { return fma_ceiling(threads, math_kind(d, bf16k), 3); }

static int bench_token(backend *be, double read_gbs, int tokens, int B, int threads, int bf16k)
{
    const backend_ops *o = be->ops;
    static const struct { int N, K, flags; } P[PER_LAYER] = {
        {D, D, BACKEND_MM_SIGMOID}, {D, D, 0}, {D, D, 0}, {D, D, BACKEND_MM_ACCUMULATE},
        {D, D, BACKEND_MM_SIGMOID}, {F, D, BACKEND_MM_RELU2}, {D, F, BACKEND_MM_ACCUMULATE}};
    backend_buf *x = NULL, *y = NULL, *W[NDT][NW];
    double bytes[NDT] = {0}, t[NDT][64], ceil[NDT] = {0};
    if (o->buf_new(be, (size_t)B * F, &x) || o->buf_new(be, (size_t)B * V, &y)) return -ENOMEM;
    float *hx = malloc((size_t)B * F * sizeof *hx);
    if (!hx) return -ENOMEM;
    for (size_t i = 0; i < (size_t)B * F; i++) hx[i] = (float)(next() & 0xFFFF) / 65536.0f - 0.5f;
    o->buf_upload(be, x, 0, hx, (size_t)B * F);
    o->buf_upload(be, y, 0, hx, (size_t)B * F);
    free(hx);
    if (B > 1)
        for (int d = 0; d < NDT; d++) ceil[d] = math_ceiling(threads, d, bf16k);
    for (int d = 0; d < NDT; d++) {
        void *hd = host_weights(DTYPES[d].wt, (size_t)D * D), *hf = host_weights(DTYPES[d].wt, (size_t)F * D);
        void *hv = host_weights(DTYPES[d].wt, (size_t)V * D);
        if (!hd || !hf || !hv) return -ENOMEM;
        for (int l = 0; l < LAYERS; l++)
            for (int p = 0; p < PER_LAYER; p++) {
                const void *h = P[p].N * P[p].K == D * D ? hd : hf;
                int rc = weight_new(be, DTYPES[d].wt, P[p].N, P[p].K, h, &W[d][l * PER_LAYER + p]);
                if (rc < 0) return rc;
                bytes[d] += (double)P[p].N * P[p].K * DTYPES[d].bytes;
            }
        int rc = weight_new(be, DTYPES[d].wt, V, D, hv, &W[d][NW - 1]);
        if (rc < 0) return rc;
        bytes[d] += (double)V * D * DTYPES[d].bytes;
        free(hd);
        free(hf);
        free(hv);
    }
    int nt = tokens < 64 ? tokens : 64;
    for (int it = -2; it < nt; it++) {   /* two untimed rounds first */
        if (B == 1 && it > 0 && it % 10 == 0) {
            double g = bench_read_gbs();
            if (g > read_gbs) read_gbs = g;
        }
        for (int d = 0; d < NDT; d++) {
            double t0 = clock_mono_s();
            for (int l = 0; l < LAYERS; l++)
                for (int p = 0; p < PER_LAYER; p++)
                    /* y[B × N] = x[B × K] · W[N × K]ᵀ */
                    o->matmul(be, bmview(y, 0, P[p].N), bview(x, 0, P[p].K), W[d][l * PER_LAYER + p], NULL, B, P[p].N,
                              P[p].K, P[p].flags);
            /* y[B × V] = x[B × D] · head[V × D]ᵀ */
            o->matmul(be, bmview(y, 0, V), bview(x, 0, D), W[d][NW - 1], NULL, B, V, D, 0);
            if (it >= 0) t[d][it] = clock_mono_s() - t0;
        }
    }
    if (B > 1) {
        for (int d = 0; d < NDT; d++) {
            double c = math_ceiling(threads, d, bf16k);
            if (c > ceil[d]) ceil[d] = c;
            for (int i = 0; i < NW; i++) o->buf_free(be, W[d][i]);
        }
        o->buf_free(be, x);
        o->buf_free(be, y);
        print_step(B, nt, t, bytes, ceil, 2.0 * B * (LAYERS * ((double)5 * D * D + 2.0 * F * D) + (double)V * D));
        return 0;
    }
    double again = bench_read_gbs();
    if (again > read_gbs) read_gbs = again;
    printf("## One token's products at B = 1 (RWKV-4 169M)\n\n");
    printf("%d layers × %d products + the %d × %d head, %d tokens per dtype taking turns; floor = weight bytes / "
           "read bandwidth (the best of the measurements before, between and after: %.1f GB/s).\n\n",
           LAYERS, PER_LAYER, V, D, nt, read_gbs);
    printf("| dtype | weight MB | ms per token (best) | ms (median) | floor ms | best / floor | weight GB/s |\n"
           "|---|---:|---:|---:|---:|---:|---:|\n");
    for (int d = 0; d < NDT; d++) {
        double best = best_of(t[d], nt);
        double med = bench_median(t[d], (size_t)nt), floor_s = read_gbs > 0 ? bytes[d] / (read_gbs * 1e9) : 0;
        printf("| %s | %.1f | %.3f | %.3f | %.3f | %.2f | %.1f |\n", DTYPES[d].name, bytes[d] / 1e6, best * 1e3,
               med * 1e3, floor_s * 1e3, floor_s > 0 ? best / floor_s : 0, bytes[d] / best / 1e9);
        for (int i = 0; i < NW; i++) o->buf_free(be, W[d][i]);
    }
    o->buf_free(be, x);
    o->buf_free(be, y);
    printf("\n");
    return 0;
}

int main(int argc, char **argv)
{
    const char *q = getenv("BENCH_QUICK");
    int quick = q && *q && strcmp(q, "0"), token_only = 0, dotc = 0, step_b = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) {
            quick = 1;
        } else if (!strcmp(argv[i], "--token-only")) {
            token_only = 1;
        } else if (!strcmp(argv[i], "--compute-bf16")) {
            dotc = 1;
        } else if (!strcmp(argv[i], "--warm")) {
            cold_bytes = 0;
        } else if (!strcmp(argv[i], "--step-batch") && i + 1 < argc && atoi(argv[i + 1]) >= 1 &&
                   atoi(argv[i + 1]) <= 256) {
            step_b = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: gemm_bench [--quick] [--token-only] [--compute-bf16] [--warm] [--step-batch B (1-256)]\n");
            return 2;
        }
    }
    long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (cold_bytes && l3 > 0 && 3 * (size_t)l3 > cold_bytes) cold_bytes = 3 * (size_t)l3;
    bench_header(stdout, argc, argv);
    backend *be;
    char err[256];
    backend_opts bo;   /* LIND_CPU_THREADS, LIND_CPU_GEMM */
    if (backend_opts_from_env(&bo, err, sizeof err) < 0 || backend_new("cpu", &bo, &be, err, sizeof err) < 0) {
        fprintf(stderr, "gemm_bench: %s\n", err);
        return 1;
    }
    if (dotc && (!be->ops->set_compute || be->ops->set_compute(be, BACKEND_COMPUTE_BF16, err, sizeof err) < 0)) {
        fprintf(stderr, "gemm_bench: --compute-bf16: %s\n", be->ops->set_compute ? err : "not on this backend");
        backend_free(be);
        return 1;
    }
    int amx = dotc && backend_cpu_amx(&bo), bf16k = !dotc ? 0 : amx ? 3 : 1;
    printf("Backend: %s%s\n\n", be->ops->device_name(be),
           !dotc ? "" : amx ? "; bf16 compute (--compute-bf16): the bf16 rows round x to bf16 and run on AMX tiles"
                        : "; bf16 compute (--compute-bf16): the bf16 rows round x to bf16 and run vdpbf16ps");
    char how[128];
    double gbs = bench_read_gbs_how(how, sizeof how);
    printf("DRAM read bandwidth (bench_read_gbs: 2 threads reading a 1 GiB buffer, best of several read strategies: "
           "%s): %.1f GB/s\n\n", how, gbs);
    long nt = bo.threads > 0 ? bo.threads : sysconf(_SC_NPROCESSORS_ONLN);   /* the backend's count */
    printf("FMA ceiling (%ld threads, %s fused multiply-adds from registers, best of 3): %.1f GFLOP/s\n\n", nt,
           cpu_gemm_isa_name(cpu_gemm_detect()), fma_ceiling(nt < 1 ? 1 : (int)nt, 0, 3));
    double dot = fma_ceiling(nt < 1 ? 1 : (int)nt, 1, 3);
    if (dot > 0)
        printf("vdpbf16ps ceiling (the same, AVX512_BF16 bf16-pair dot products, lind's --compute bf16): "
               "%.1f GFLOP/s\n\n", dot);
    if (amx)
        printf("AMX ceiling (the same, TDPBF16PS tile products; lind's --compute bf16 runs on it here): %.1f GFLOP/s\n\n",
               fma_ceiling(nt < 1 ? 1 : (int)nt, 3, 3));
    static const int full[] = {1, 8, 32, 64, 256}, small[] = {1, 64};
    int threads = nt < 1 ? 1 : (int)nt;
    int rc = token_only ? 0 : quick ? bench_shapes(be, small, 2, 0.02, threads, bf16k)
                                         : bench_shapes(be, full, 5, 0.1, threads, bf16k);
    if (rc == 0) rc = bench_token(be, gbs, quick ? 3 : 30, step_b, threads, bf16k);
    backend_free(be);
    if (rc < 0) {
        fprintf(stderr, "gemm_bench: %s\n", strerror(-rc));
        return 1;
    }
    return 0;
}
