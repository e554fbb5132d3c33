/* bench/rwkv_bench.c — a real-sized RWKV-4 model on this machine's CPU:
 * decode at batch 1, aggregate decode at batch 8/32/64 and batched prefill of
 * a 2,000-token prompt, with fp32 weights, bf16 weights (exact fp32 math on
 * them) and bf16 weights with bf16 math (--compute bf16, where the CPU has
 * AVX512_BF16), against the memory bandwidth floor and the arithmetic
 * ceilings measured in the same run.
 *
 * The model has RWKV-4 169M's shape (d 768, 12 layers, ffn 3072, vocab
 * 50277, emb_norm, rescale_every 6) with random weights, written in lind's own
 * config form (the same kinds an HF RWKV-4 checkpoint loads into). Speed does
 * not depend on the weights' values. Batch 1 streams every matrix weight
 * once per token: its floor is weight bytes / read bandwidth.
 *
 * --load-only: write the model (with --file-bf16 its tensors are stored as
 * BF16, as published half-precision checkpoints are), load it keeping the
 * stored precision, step once, and print the resident memory: the check
 * that a big model fits (e.g. a 7B shape: --d 4096 --layers 32 --ffn 16384
 * --vocab 65536 --file-bf16 --load-only).
 *
 * --b1-formats: batch 1 only, for every weight format (f32, bf16, q8, q4)
 * loaded side by side and measured in interleaved rounds (the order rotating
 * each round), each round held to the read bandwidth of its moment: the
 * formats' ms/token and their weight-byte floors from the same windows.
 *
 *   usage: rwkv_bench [--quick] [--dir DIR] [--d D --layers L --ffn F --vocab V]
 *                     [--file-bf16] [--load-only | --b1-formats] */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bench/benchutil.h"
#include "kernels/cpu/gemm.h"
#include "kernels/backend.h"
#include "kernels/clock.h"
#include "kernels/half.h"
#include "recurrent/model.h"

static void die(const char *what, const char *why)
{
    fprintf(stderr, "rwkv_bench: %s: %s\n", what, why);
    exit(1);
}

/* The CPU backend's options: main reads them from the environment
 * (LIND_CPU_THREADS, LIND_CPU_GEMM; backend_opts_from_env). */
static backend_opts bench_be;

/* ---- the model ------------------------------------------------------------ */

typedef struct shape { int d, layers, ffn, vocab; } shape;

static uint64_t rng_state = 0x1234567;
static float urand(float a)   /* a·U(−1, 1) */
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return a * ((float)(rng_state >> 40) / (float)(1 << 23) - 1.0f);
}

static int file_bf16;   /* --file-bf16: tensors stored as BF16 */

/* The tensors are described first and written one at a time, each generated
 * just before it is written, so a model far bigger than memory allows
 * (a 7B shape) never sits in memory whole. */
typedef struct tdesc { char name[96]; int d0, d1; float lo, hi; } tdesc;

static void describe(tdesc *t, int *n, const char *name, int d0, int d1, float lo, float hi)
{
    snprintf(t[*n].name, sizeof t[*n].name, "%s", name);
    t[*n].d0 = d0;
    t[*n].d1 = d1;
    t[*n].lo = lo;
    t[*n].hi = hi;
    (*n)++;
}

static size_t tbytes(const tdesc *t) { return (size_t)t->d0 * (size_t)(t->d1 ? t->d1 : 1) * (file_bf16 ? 2 : 4); }

/* safetensors: 8-byte header length, the JSON header, then the data. */
static void write_tensors(const char *path, const tdesc *t, int n)
{
    size_t cap = 256 + (size_t)n * 256, len = 0, off = 0;
    char *hdr = malloc(cap);
    if (!hdr) die(path, "out of memory");
    len += (size_t)snprintf(hdr + len, cap - len, "{\"__metadata__\":{\"format\":\"pt\"}");
    for (int i = 0; i < n; i++) {
        len += (size_t)snprintf(hdr + len, cap - len, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[%d", t[i].name,
                                file_bf16 ? "BF16" : "F32", t[i].d0);
        if (t[i].d1) len += (size_t)snprintf(hdr + len, cap - len, ",%d", t[i].d1);
        len += (size_t)snprintf(hdr + len, cap - len, "],\"data_offsets\":[%zu,%zu]}", off, off + tbytes(&t[i]));
        off += tbytes(&t[i]);
    }
    len += (size_t)snprintf(hdr + len, cap - len, "}");
    while (len % 8) hdr[len++] = ' ';
    FILE *f = fopen(path, "wb");
    if (!f) die(path, strerror(errno));
    uint8_t le[8];
    for (int i = 0; i < 8; i++) le[i] = (uint8_t)((uint64_t)len >> (8 * i));
    int ok = fwrite(le, 1, 8, f) == 8 && fwrite(hdr, 1, len, f) == len;
    free(hdr);
    for (int i = 0; i < n && ok; i++) {
        size_t numel = (size_t)t[i].d0 * (size_t)(t[i].d1 ? t[i].d1 : 1);
        void *p = malloc(tbytes(&t[i]));
        if (!p) die(path, "out of memory");
        for (size_t k = 0; k < numel; k++) {
            float v = t[i].lo + (t[i].hi - t[i].lo) * 0.5f * (urand(1.0f) + 1.0f);
            if (file_bf16) ((uint16_t *)p)[k] = lind_f32_to_bf16(v);
            else ((float *)p)[k] = v;
        }
        ok = fwrite(p, 1, tbytes(&t[i]), f) == tbytes(&t[i]);
        free(p);
    }
    if (fclose(f) != 0 || !ok) die(path, "write failed");
}

static void write_model(const char *dir, shape s)
{
    if (mkdir(dir, 0755) < 0 && errno != EEXIST) die(dir, strerror(errno));
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    if (!f) die(path, strerror(errno));
    fprintf(f, "{\"vocab_size\": %d, \"d_model\": %d, \"n_layers\": %d, \"norm_eps\": 1e-5, \"final_norm_eps\": 1e-5,\n"
               " \"emb_norm\": true, \"rescale_every\": 6, \"tokenizer\": \"bytes\",\n"
               " \"mixers\": [", s.vocab, s.d, s.layers);
    for (int i = 0; i < s.layers; i++) fprintf(f, "%s\"aft\"", i ? ", " : "");
    fprintf(f, "], \"ffns\": [");
    for (int i = 0; i < s.layers; i++) fprintf(f, "%s\"rwkv_channel_mix\"", i ? ", " : "");
    fprintf(f, "],\n \"aft_variant\": \"decay\", \"token_shift\": true, \"d_ff\": %d}\n", s.ffn);
    if (fclose(f)) die(path, "write failed");
    int maxn = 8 + 24 * s.layers, n = 0;
    tdesc *t = calloc((size_t)maxn, sizeof *t);
    if (!t) die("model", "out of memory");
    int d = s.d, F = s.ffn;
    float sd = 1.0f / 27.7f, sf = 1.0f / 55.4f;   /* ≈ 1/√d, 1/√F for d 768, F 3072 */
    char nm[96];
#define A(name, d0, d1, lo, hi) describe(t, &n, name, d0, d1, lo, hi)
    A("embed.weight", s.vocab, d, -1, 1);
    A("emb_norm.weight", d, 0, 0.9f, 1.1f);
    A("emb_norm.bias", d, 0, -0.1f, 0.1f);
    A("ln_f.weight", d, 0, 0.9f, 1.1f);
    A("ln_f.bias", d, 0, -0.1f, 0.1f);
    A("head.weight", s.vocab, d, -sd, sd);
    for (int i = 0; i < s.layers; i++) {
#define L(x) (snprintf(nm, sizeof nm, "layers.%d.%s", i, x), nm)
        A(L("ln1.weight"), d, 0, 0.9f, 1.1f);
        A(L("ln1.bias"), d, 0, -0.1f, 0.1f);
        A(L("ln2.weight"), d, 0, 0.9f, 1.1f);
        A(L("ln2.bias"), d, 0, -0.1f, 0.1f);
        A(L("mixer.wr"), d, d, -sd, sd);
        A(L("mixer.wk"), d, d, -sd, sd);
        A(L("mixer.wv"), d, d, -sd, sd);
        A(L("mixer.wo"), d, d, -sd, sd);
        A(L("mixer.mu_r"), d, 0, 0, 1);
        A(L("mixer.mu_k"), d, 0, 0, 1);
        A(L("mixer.mu_v"), d, 0, 0, 1);
        A(L("mixer.time_decay"), d, 0, -6, 1);
        A(L("mixer.time_first"), d, 0, -1, 1);
        A(L("ffn.wk"), F, d, -sd, sd);
        A(L("ffn.wr"), d, d, -sd, sd);
        A(L("ffn.wv"), d, F, -sf, sf);
        A(L("ffn.mu_k"), d, 0, 0, 1);
        A(L("ffn.mu_r"), d, 0, 0, 1);
#undef L
    }
#undef A
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    write_tensors(path, t, n);
    free(t);
}

/* ---- measurements ------------------------------------------------------------ */

typedef struct row {
    const char *dtype, *compute;
    double weight_mb, floor_ms, b1_ms, b1_lo, b1_hi, tps[3], prefill_tps;
    double block_flops, head_flops;   /* per token: 2 × multiply-adds */
} row;

static const int batches[3] = {8, 32, 64};

/* Batch 1 against the bandwidth floor: the machine's read bandwidth varies
 * from moment to moment with the host's other tenants (25 to 67 GB/s seen
 * here, changing within a second), so batch 1 runs in B1_ROUNDS short rounds
 * of B1_TOKENS tokens, each right after one read of a buffer the size of the
 * weight bytes (bench_probe), and is held to the floor of that moment; the
 * row shows the round whose ratio is the median, and the spread of all. */
#define B1_ROUNDS 15
#define B1_TOKENS 4

static int cmp_pair(const void *a, const void *b)
{
    const double *x = a, *y = b;
    return (x[0] > y[0]) - (x[0] < y[0]);
}

static void measure(const char *dir, lind_dtype dt, lind_compute cm, int quick, row *r)
{
    model_opts o = {.backend = "cpu", .weights = dt, .compute = cm, .be = &bench_be};
    model *m = NULL;
    char err[512];
    if (model_load_opts(dir, &o, &m, err, sizeof err) < 0) die("model_load", err);
    int V = model_vocab(m);
    size_t wbytes;
    size_t bmacs, hmacs;
    model_costs(m, &bmacs, &hmacs, &wbytes);
    r->block_flops = 2.0 * (double)bmacs;
    r->head_flops = 2.0 * (double)hmacs;
    r->dtype = lind_dtype_name(model_weights_dtype(m));
    r->compute = lind_compute_name(model_compute(m));
    r->weight_mb = (double)wbytes / 1e6;
    int maxb = 64;
    float *logits = malloc((size_t)maxb * (size_t)V * sizeof *logits);
    int *slots = malloc(2048 * sizeof *slots);
    int32_t *toks = malloc(2048 * sizeof *toks);
    if (!logits || !slots || !toks || model_slots_reserve(m, maxb) < 0) die("bench", "out of memory");
    for (int i = 0; i < 2048; i++) toks[i] = (int32_t)((i * 7919 + 13) % V);

    /* batch 1: (ratio, ms, floor ms) per round, the median round kept */
    int rounds = quick ? 3 : B1_ROUNDS;
    int slot = 0;
    model_slot_reset(m, 0);
    for (int i = 0; i < 4; i++) model_step(m, &slot, &toks[i], 1, logits);
    bench_probe *probe = bench_probe_new(wbytes);
    if (!probe) die("read probe", "out of memory");
    double pr[B1_ROUNDS][3];
    for (int rep = 0; rep < rounds; rep++) {
        double g = bench_probe_gbs(probe);
        double t0 = clock_mono_s();
        for (int i = 0; i < B1_TOKENS; i++)
            if (model_step(m, &slot, &toks[rep * B1_TOKENS + i], 1, logits) < 0) die("step", "failed");
        double ms = (clock_mono_s() - t0) * 1e3 / B1_TOKENS, floor = (double)wbytes / (g * 1e9) * 1e3;
        pr[rep][0] = ms / floor;
        pr[rep][1] = ms;
        pr[rep][2] = floor;
    }
    bench_probe_free(probe);
    qsort(pr, (size_t)rounds, sizeof pr[0], cmp_pair);
    r->b1_ms = pr[rounds / 2][1];
    r->floor_ms = pr[rounds / 2][2];
    r->b1_lo = pr[0][0];
    r->b1_hi = pr[rounds - 1][0];

    /* batch 8 / 32 / 64: every session one token per step, all with logits;
     * best of `reps` runs (on a shared machine the best falls in the
     * quietest moment) */
    int reps = quick ? 1 : 3;
    for (int k = 0; k < 3; k++) {
        int B = batches[k], steps = quick ? 3 : 10;
        for (int b = 0; b < B; b++) { slots[b] = b; model_slot_reset(m, b); }
        model_step(m, slots, toks, B, logits);
        r->tps[k] = 0;
        for (int rep = 0; rep < reps; rep++) {
            double t0 = clock_mono_s();
            for (int s = 0; s < steps; s++)
                if (model_step(m, slots, toks + s, B, logits) < 0) die("batched step", "failed");
            double tps = (double)B * steps / (clock_mono_s() - t0);
            if (tps > r->tps[k]) r->tps[k] = tps;
        }
    }

    /* prefill: a 2,000-token prompt in chunks of 256 rows, logits for the
     * last; best of `reps` */
    int T = quick ? 512 : 2000, chunk = 256;
    for (int i = 0; i < chunk; i++) slots[i] = 0;
    r->prefill_tps = 0;
    for (int rep = 0; rep < reps; rep++) {
        model_slot_reset(m, 0);
        double t0 = clock_mono_s();
        for (int p = 0; p < T; p += chunk) {
            int len = T - p < chunk ? T - p : chunk, last = len - 1;
            if (model_forward(m, slots, toks + p, len, p + len == T ? &last : NULL, p + len == T, logits) < 0)
                die("prefill", "failed");
        }
        double tps = T / (clock_mono_s() - t0);
        if (tps > r->prefill_tps) r->prefill_tps = tps;
    }
    free(logits);
    free(slots);
    free(toks);
    model_free(m);
}

/* VmRSS of this process, MB. */
static double rss_mb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    double kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6)) kb = atof(line + 6);
    if (f) fclose(f);
    return kb / 1024.0;
}

static void load_only(const char *dir, shape s)
{
    double t0 = clock_mono_s(), rss0 = rss_mb();
    model *m = NULL;
    char err[512];
    model_opts o = {.backend = "cpu", .weights = LIND_DT_AUTO, .be = &bench_be};
    if (model_load_opts(dir, &o, &m, err, sizeof err) < 0) die("model_load", err);
    double t_load = clock_mono_s() - t0, rss_load = rss_mb();
    size_t wbytes;
    model_costs(m, NULL, NULL, &wbytes);
    float *logits = malloc((size_t)model_vocab(m) * sizeof *logits);
    int slot = 0;
    int32_t tok = 1;
    if (!logits || model_slots_reserve(m, 1) < 0 || model_step(m, &slot, &tok, 1, logits) < 0) die("step", "failed");
    double rss_step = rss_mb();
    printf("| shape | parameters | weights in memory | matrix bytes (GB) | load (s) | RSS after load (GiB) |"
           " RSS after a step (GiB) |\n|---|---|---|---|---|---|---|\n");
    printf("| d %d, %d layers, ffn %d, vocab %d | %.2fB | %s | %.2f | %.1f | %.2f | %.2f |\n", s.d, s.layers, s.ffn,
           s.vocab, (double)model_param_count(m) / 1e9, lind_dtype_name(model_weights_dtype(m)), (double)wbytes / 1e9,
           t_load, (rss_load - rss0) / 1024.0, (rss_step - rss0) / 1024.0);
    free(logits);
    model_free(m);
}

static int cmp_dbl(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* --b1-formats: the formats side by side, rounds interleaved. */
#define NFMT 4
static void b1_formats(const char *dir, int quick)
{
    static const lind_dtype dts[NFMT] = {LIND_DT_F32, LIND_DT_BF16, LIND_DT_Q8, LIND_DT_Q4};
    model *m[NFMT];
    size_t wb[NFMT];
    bench_probe *probe[NFMT];
    float *logits = NULL;
    int slot = 0, rounds = quick ? 3 : 21, tokens = 8;
    int32_t toks[64];
    for (int i = 0; i < 64; i++) toks[i] = (int32_t)((i * 7919 + 13) % 50000);
    for (int f = 0; f < NFMT; f++) {
        model_opts o = {.backend = "cpu", .weights = dts[f], .compute = LIND_COMPUTE_F32, .be = &bench_be};
        char err[512];
        if (model_load_opts(dir, &o, &m[f], err, sizeof err) < 0) die("model_load", err);
        model_costs(m[f], NULL, NULL, &wb[f]);
        if (!logits && !(logits = malloc((size_t)model_vocab(m[f]) * sizeof *logits))) die("bench", "out of memory");
        if (model_slots_reserve(m[f], 1) < 0 || model_slot_reset(m[f], 0) < 0) die("bench", "slots");
        for (int i = 0; i < 4; i++) model_step(m[f], &slot, &toks[i], 1, logits);
        if (!(probe[f] = bench_probe_new(wb[f]))) die("read probe", "out of memory");
    }
    /* per format and round: (ms / floor, ms, floor, CPU ms) */
    double (*pr)[NFMT][4] = calloc((size_t)rounds, sizeof *pr);
    if (!pr) die("bench", "out of memory");
    for (int rep = 0; rep < rounds; rep++)
        for (int i = 0; i < NFMT; i++) {
            int f = (i + rep) % NFMT;
            double g = bench_probe_gbs(probe[f]);
            double t0 = clock_mono_s(), c0 = clock_cpu_s();
            for (int k = 0; k < tokens; k++)
                if (model_step(m[f], &slot, &toks[(rep * tokens + k) % 64], 1, logits) < 0) die("step", "failed");
            double ms = (clock_mono_s() - t0) * 1e3 / tokens, floor = (double)wb[f] / (g * 1e9) * 1e3;
            pr[rep][f][3] = (clock_cpu_s() - c0) * 1e3 / tokens;
            pr[rep][f][0] = ms / floor;
            pr[rep][f][1] = ms;
            pr[rep][f][2] = floor;
        }
    printf("Batch 1, the formats interleaved: %d rounds of %d tokens per format (the order rotating), each right "
           "after one read of a buffer the size of that format's weight bytes (bench_probe); medians over the "
           "rounds, and the ratio's range. CPU ms: the process's CPU time per token (all pool threads, their spinning "
           "included), which a machine busy with other work distorts less than the wall clock.\n\n", rounds, tokens);
    printf("| weights | matrix bytes (MB) | floor (ms/token, median) | batch 1 (ms/token, median) | ms range | "
           "batch 1 / floor (median) | ratio range | streamed GB/s (median) | CPU ms/token (median) |\n"
           "|---|---|---|---|---|---|---|---|---|\n");
    for (int f = 0; f < NFMT; f++) {
        double r[64], ms[64], fl[64], cm[64];
        for (int rep = 0; rep < rounds; rep++) {
            cm[rep] = pr[rep][f][3];
            r[rep] = pr[rep][f][0];
            ms[rep] = pr[rep][f][1];
            fl[rep] = pr[rep][f][2];
        }
        qsort(r, (size_t)rounds, sizeof r[0], cmp_dbl);
        qsort(ms, (size_t)rounds, sizeof ms[0], cmp_dbl);
        qsort(fl, (size_t)rounds, sizeof fl[0], cmp_dbl);
        qsort(cm, (size_t)rounds, sizeof cm[0], cmp_dbl);
        printf("| %s | %.1f | %.2f | %.2f | %.2f–%.2f | %.2fx | %.2f–%.2fx | %.1f | %.2f |\n", lind_dtype_name(dts[f]),
               (double)wb[f] / 1e6, fl[rounds / 2], ms[rounds / 2], ms[0], ms[rounds - 1], r[rounds / 2], r[0],
               r[rounds - 1], (double)wb[f] / (ms[rounds / 2] * 1e6), cm[rounds / 2]);
    }
    printf("\n");
    for (int f = 0; f < NFMT; f++) {
        bench_probe_free(probe[f]);
        model_free(m[f]);
    }
    free(pr);
    free(logits);
}

int main(int argc, char **argv)
{
    shape s = {768, 12, 3072, 50277};
    const char *q = getenv("BENCH_QUICK");   /* make bench's smoke mode */
    int quick = q && *q && strcmp(q, "0"), only_load = 0, only_b1 = 0;
    {
        char eerr[256];
        if (backend_opts_from_env(&bench_be, eerr, sizeof eerr) < 0) die("environment", eerr);
    }
    const char *dir = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) { quick = 1; continue; }
        if (!strcmp(argv[i], "--file-bf16")) { file_bf16 = 1; continue; }
        if (!strcmp(argv[i], "--load-only")) { only_load = 1; continue; }
        if (!strcmp(argv[i], "--b1-formats")) { only_b1 = 1; continue; }
        if (i + 1 >= argc) die(argv[i], "needs a value");
        const char *v = argv[++i];
        if (!strcmp(argv[i - 1], "--dir")) dir = v;
        else if (!strcmp(argv[i - 1], "--d")) s.d = atoi(v);
        else if (!strcmp(argv[i - 1], "--layers")) s.layers = atoi(v);
        else if (!strcmp(argv[i - 1], "--ffn")) s.ffn = atoi(v);
        else if (!strcmp(argv[i - 1], "--vocab")) s.vocab = atoi(v);
        else die(argv[i - 1], "unknown option");
    }
    if (s.d < 8 || s.layers < 1 || s.ffn < 8 || s.vocab < 256) die("shape", "out of range");
    char tmp[256];
    if (!dir) {
        snprintf(tmp, sizeof tmp, "/tmp/lind-rwkv-bench-%d", (int)getpid());
        dir = tmp;
    }
    printf("## RWKV-4 (169M shape) on the CPU: decode, batched decode, prefill\n\n");
    bench_header(stdout, argc, argv);
    printf("Model: random weights, d %d, %d layers, ffn %d, vocab %d (mixer aft/decay + rwkv_channel_mix, "
           "emb_norm, rescale_every 6).\n\n", s.d, s.layers, s.ffn, s.vocab);
    fflush(stdout);
    write_model(dir, s);
    if (only_load || only_b1) {
        if (only_load) load_only(dir, s);
        else b1_formats(dir, quick);
        if (dir == tmp) {
            char cmd[400];
            snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
            if (system(cmd)) return 1;
        }
        return 0;
    }
    char how[128];
    double gbs = bench_read_gbs_how(how, sizeof how);
    long nt = bench_be.threads > 0 ? bench_be.threads : sysconf(_SC_NPROCESSORS_ONLN);   /* the backend's count */
    if (nt < 1) nt = 1;
    double fma = bench_fma_gflops((int)nt, 0, quick ? 1 : 3), dot = bench_fma_gflops((int)nt, 1, quick ? 1 : 3);
    /* where lind's bf16 math runs on AMX tiles, their ceiling is its own */
    int amx = dot > 0 && backend_cpu_amx(&bench_be);
    double tiles = amx ? bench_fma_gflops((int)nt, 3, quick ? 1 : 3) : 0;
    printf("Arithmetic ceilings (%ld threads, independent chains from registers, best of 3): fp32 FMA %.0f GFLOP/s, "
           "vdpbf16ps %.0f GFLOP/s%s", nt, fma, dot, dot > 0 ? "" : " (no AVX512_BF16)");
    if (amx) printf(", AMX TDPBF16PS %.0f GFLOP/s (bf16 math runs on the tiles here: its ceiling)", tiles);
    printf("\n\n");
    if (amx) dot = tiles;
    fflush(stdout);
    /* fp32 weights and math; bf16 weights, exact fp32 math on them; bf16
     * weights and bf16 math (--compute bf16), where the CPU has it */
    row rows[3];
    int nrows = 0;
    measure(dir, LIND_DT_F32, LIND_COMPUTE_F32, quick, &rows[nrows++]);
    measure(dir, LIND_DT_BF16, LIND_COMPUTE_F32, quick, &rows[nrows++]);
    if (dot > 0) measure(dir, LIND_DT_BF16, LIND_COMPUTE_BF16, quick, &rows[nrows++]);
    printf("Read bandwidth at the start (bench_read_gbs: reading 1 GiB, the best of several read strategies; "
           "this time %s): %.1f GB/s. Batch 1 is held to the floor of its own moment: it runs in %d rounds of "
           "%d tokens, each right after one read of a buffer the size of the weight bytes (bench_probe: the "
           "fastest of three strategies), and the table shows the round whose batch-1 time / floor is the median, "
           "with the lowest and highest ratio of all rounds.\n\n", how, gbs, quick ? 3 : B1_ROUNDS, B1_TOKENS);
    printf("Batch 8/32/64 and prefill: the best of %d runs (%d steps; the whole prompt in chunks of 256).\n\n",
           quick ? 1 : 3, quick ? 3 : 10);
    printf("| weights | compute | matrix bytes (MB) | bandwidth floor (ms/token) | batch 1 (ms/token) | vs floor |"
           " rounds' range |"
           " batch 8 (tok/s) | batch 32 (tok/s) | batch 64 (tok/s) | batch 64 GFLOP/s | prefill %d tokens (tok/s) |"
           " prefill GFLOP/s |\n", quick ? 512 : 2000);
    printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < nrows; i++) {
        /* the products' FLOPs: every token runs the head at batch 64, one
         * token per prompt in prefill */
        double g64 = rows[i].tps[2] * (rows[i].block_flops + rows[i].head_flops) / 1e9;
        double gpf = rows[i].prefill_tps * (rows[i].block_flops + rows[i].head_flops / (quick ? 512 : 2000)) / 1e9;
        printf("| %s | %s | %.1f | %.2f | %.2f | %.2fx | %.2f–%.2fx | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f |\n",
               rows[i].dtype, rows[i].compute, rows[i].weight_mb, rows[i].floor_ms, rows[i].b1_ms,
               rows[i].b1_ms / rows[i].floor_ms, rows[i].b1_lo, rows[i].b1_hi,
               rows[i].tps[0], rows[i].tps[1], rows[i].tps[2], g64, rows[i].prefill_tps, gpf);
    }
    printf("\nGFLOP/s: 2 × the products' multiply-adds per token (model_costs) × tokens/s, against the ceilings "
           "above; the rest of a step (layer norms, token shift, the AFT recurrence, the head's logits copy) is in "
           "the time but not in the FLOPs.\n");
    /* rwkv.cpp is measured beside lind in `make bench-peers` (bench/peers/,
     * docs/BENCHMARKS.md), in the same windows on the same weights: no
     * figure of another run is quoted here. */
    printf("\nrwkv.cpp on the same weights, interleaved with lind in the same run: `make bench-peers` "
           "(bench/results/peers.md).\n\n");
    /* Each row against the floor, and what its arithmetic allows at all:
     * the ceiling measured above over the FLOPs a token needs. */
    printf("| weights | compute | batch 1 <= 1.3x floor | ceiling's batch 64 (tok/s) | ceiling's prefill (tok/s) |\n"
           "|---|---|---|---|---|\n");
    for (int i = 0; i < nrows; i++) {
        double ceil_g = !strcmp(rows[i].compute, "bf16") ? dot : fma;
        double t64 = ceil_g * 1e9 / (rows[i].block_flops + rows[i].head_flops);
        double tpf = ceil_g * 1e9 / (rows[i].block_flops + rows[i].head_flops / (quick ? 512 : 2000));
        printf("| %s | %s | %s | %.0f | %.0f |\n", rows[i].dtype, rows[i].compute,
               rows[i].b1_ms <= 1.3 * rows[i].floor_ms ? "yes" : "no", t64, tpf);
    }
    if (dir == tmp) {
        char cmd[400];
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        if (system(cmd)) return 1;
    }
    return 0;
}
