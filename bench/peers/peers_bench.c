/* bench/peers/peers_bench.c — lind and rwkv.cpp measured in the same run, on
 * the same random weights, interleaved in the same windows (`make
 * bench-peers`; docs/BENCHMARKS.md).
 *
 * For each model shape (the files bench/peers/make_weights.py wrote under
 * --models DIR/SHAPE: lind's BF16 checkpoint and rwkv.cpp's FP32 / FP16
 * files; rwkv.cpp's Q8_0 and Q5_1 files are made here by its own
 * rwkv_quantize_model_file when absent) it loads four lind formats (f32,
 * bf16, q8, q4: --dtype, fp32 math) and four rwkv.cpp formats (FP32, FP16,
 * Q8_0, Q5_1) side by side, paired f32/FP32, bf16/FP16, q8/Q8_0, q4/Q5_1,
 * and a fifth pair, lind's bf16 weights with bf16 math (--compute bf16,
 * where the CPU has AVX512_BF16) against FP16 again, and measures
 *   batch 1   ms/token with logits, each window right after one read of a
 *             buffer the size of that engine's matrix bytes, or 3 × the
 *             last-level cache if more (bench_probe): the floor of that
 *             moment is matrix bytes / read bandwidth;
 *   batch 64  aggregate tokens/s of 64 sequences one token each with logits:
 *             lind in one model_step of 64 rows; rwkv.cpp has no batching
 *             across sequences, so its best is the 64 one after another
 *             (rwkv_eval, 64 states);
 *   prefill   a 2,000-token prompt, logits for its last token: lind's
 *             model_forward in chunks of 256 rows; rwkv.cpp's sequence mode
 *             (rwkv_eval_sequence_in_chunks, its chunk length picked as the
 *             faster of 16 and 64 at warm-up, on a prompt of up to 512).
 * Rounds alternate the engines of a pair (lind first in even rounds,
 * rwkv.cpp first in odd ones); the ratio lind : rwkv.cpp (speed, >1 = lind
 * faster) is taken per round from the two adjacent windows, then its median
 * and range. Both engines run --threads threads (default 2).
 *
 * The quiet check: around every window the machine's busy CPU time is read
 * from /proc/stat and this process's own CPU time subtracted; when the other
 * processes used more than --load-limit cores on average (default 0.15) the
 * window is measured again, at most --retries times (default 3); a window
 * that stayed loaded is kept and counted in the row's "loaded" column, and
 * the run's summary says how many there were.
 *
 * Floors: batch 1, matrix bytes / read bandwidth (the moment's probe), and
 * beside it the same with a session's state added twice (a token reads it
 * and writes it back; it weighs where the state is large, as Mamba-2's S);
 * batch 64 and prefill, the FLOPs a token needs (2 × multiply-adds of the
 * products, model_costs: the same model for both engines) over the ceiling
 * measured in this run for the arithmetic the format uses (fp32 FMA for
 * f32/bf16/FP32/FP16, vpdpbusd for q8/q4/Q8_0/Q5_1). Each figure is given
 * as a multiple of its floor (1.00x = at the floor). The bf16-math pair's
 * lind floors use the ceiling of the instruction lind's bf16 math runs on:
 * AMX's TDPBF16PS where the CPU has AMX (and LIND_CPU_AMX is not 0),
 * vdpbf16ps elsewhere; its rwkv.cpp figures are FP16's.
 *
 *   usage: peers_bench [--quick] [--b1-cold] [--models DIR] [--shapes A,B] [--rwkv-lib PATH]
 *                      [--threads N] [--retries N] [--load-limit CORES] [--rounds N]
 *                      [--prefill TOKENS] [--pairs f32,bf16,q8,q4,bf16m] [--measure b1,b64,prefill]
 * --rounds N sets the rounds of all three measurements (default 11, 5, 5);
 * --prefill the prompt's length (default 2000); --quick: 3/2/2 rounds of 4
 * tokens, 1 step and a 256-token prompt, a check of the machinery. --pairs:
 * only these pairs (f32/FP32, bf16/FP16, q8/Q8_0, q4/Q5_1, bf16m: bf16 math
 * against FP16), e.g. for a big
 * shape whose eight formats would not fit in memory together. --measure: only
 * these measurements (warm-up included), e.g. batch 1 of a big shape, whose
 * prefill windows take minutes. --b1-cold: every batch-1 token is timed
 * alone, after an untimed read of max(1 GiB, 3 × L3) that evicts the
 * weights: on a host whose last-level cache holds a small model (the Intel
 * hosts' 300 MiB) the window's later tokens otherwise read it from there,
 * and the figure drops below a floor that assumes memory. */
#include <dlfcn.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bench/benchutil.h"
#include "kernels/backend.h"
#include "kernels/clock.h"
#include "kernels/cpu/gemm.h"
#include "recurrent/model.h"

static void die(const char *what, const char *why)
{
    fprintf(stderr, "peers_bench: %s: %s\n", what, why);
    exit(1);
}

/* ---- rwkv.cpp through its C API (rwkv.h), loaded with dlopen --------------- */

static struct {
    void *(*init)(const char *, uint32_t, uint32_t);
    bool (*eval)(void *, uint32_t, const float *, float *, float *);
    bool (*eval_chunks)(void *, const uint32_t *, size_t, size_t, const float *, float *, float *);
    size_t (*state_len)(const void *);
    size_t (*logits_len)(const void *);
    void (*init_state)(const void *, float *);
    void (*free_ctx)(void *);
    bool (*quantize)(const char *, const char *, const char *);
    const char *(*sysinfo)(void);
} rw;

static void rwkv_open(const char *lib)
{
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) die(lib, dlerror());
#define SYM(f, n) \
    if (!(*(void **)&rw.f = dlsym(h, n))) die(lib, "missing symbol " n)
    SYM(init, "rwkv_init_from_file");
    SYM(eval, "rwkv_eval");
    SYM(eval_chunks, "rwkv_eval_sequence_in_chunks");
    SYM(state_len, "rwkv_get_state_len");
    SYM(logits_len, "rwkv_get_logits_len");
    SYM(init_state, "rwkv_init_state");
    SYM(free_ctx, "rwkv_free");
    SYM(quantize, "rwkv_quantize_model_file");
    SYM(sysinfo, "rwkv_get_system_info_string");
#undef SYM
}

/* Bytes of the tensors an rwkv.cpp file holds that a token streams: every
 * tensor of 2 or more dimensions but the embedding (only its row is read),
 * from the file's own headers (rwkv_file_format.inc). */
static double rwkv_file_matrix_bytes(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) die(path, strerror(errno));
    int32_t h[6], th[3], dims[3];
    char name[256];
    double total = 0;
    if (fread(h, 4, 6, f) != 6 || h[0] != 0x67676d66) die(path, "not an rwkv.cpp file");
    while (fread(th, 4, 3, f) == 3) {
        if (th[0] < 1 || th[0] > 3 || th[1] < 1 || th[1] > 255) die(path, "bad tensor header");
        if (fread(dims, 4, (size_t)th[0], f) != (size_t)th[0] || fread(name, 1, (size_t)th[1], f) != (size_t)th[1])
            die(path, "truncated");
        name[th[1]] = 0;
        double n = 1;
        for (int i = 0; i < th[0]; i++) n *= dims[i];
        double per; /* bytes per element: FP32, FP16, Q4_0, Q4_1, -, -, -, Q5_0, Q5_1, Q8_0 */
        switch (th[2]) {
        case 0: per = 4; break;
        case 1: per = 2; break;
        case 2: per = 18.0 / 32; break;
        case 3: per = 20.0 / 32; break;
        case 7: per = 22.0 / 32; break;
        case 8: per = 24.0 / 32; break;
        case 9: per = 34.0 / 32; break;
        default: die(path, "a tensor type this bench does not size");
        }
        if (th[0] >= 2 && strcmp(name, "emb.weight")) total += n * per;
        if (fseeko(f, (off_t)(n * per), SEEK_CUR)) die(path, "truncated");
    }
    fclose(f);
    return total;
}

/* ---- engines ------------------------------------------------------------------ */

#define B64 64
#define NTOK 4096

typedef struct eng {
    int lind;                 /* 1 lind, 0 rwkv.cpp */
    const char *name;         /* "f32" ... / "FP32" ... */
    model *m;
    void *ctx;
    float *states;            /* rwkv.cpp: B64 states */
    size_t slen;
    int chunk;                /* rwkv.cpp's sequence chunk */
    double wbytes;
    double sbytes;            /* one session's state, read and written each token */
    double ceil_g;            /* the ceiling its batch-64 / prefill floors use */
} eng;

static bench_probe *probe;    /* one buffer, as large as the largest engine's matrix bytes */

static backend_opts be_opts;
static int32_t toks[NTOK];
static uint32_t utoks[NTOK];
static float *logits;         /* B64 × vocab */
static int slots[B64], pslots[256];

static void lind_load(eng *e, const char *dir, lind_dtype dt, lind_compute cm, const char *name)
{
    model_opts o = {.backend = "cpu", .weights = dt, .compute = cm, .be = &be_opts};
    char err[512];
    memset(e, 0, sizeof *e);
    e->lind = 1;
    e->name = name;
    if (model_load_opts(dir, &o, &e->m, err, sizeof err) < 0) die("model_load", err);
    size_t wb;
    model_costs(e->m, NULL, NULL, &wb);
    e->wbytes = (double)wb;
    e->sbytes = (double)model_state_bytes(e->m);
    if (model_slots_reserve(e->m, B64) < 0) die("lind", "slots");
}

static void rwkv_load(eng *e, const char *path, const char *name, int threads)
{
    memset(e, 0, sizeof *e);
    e->name = name;
    if (!(e->ctx = rw.init(path, (uint32_t)threads, 0))) die(path, "rwkv_init_from_file failed");
    e->slen = rw.state_len(e->ctx);
    if (!(e->states = malloc(B64 * e->slen * sizeof(float)))) die("rwkv.cpp states", "out of memory");
    for (int b = 0; b < B64; b++) rw.init_state(e->ctx, e->states + (size_t)b * e->slen);
    e->wbytes = rwkv_file_matrix_bytes(path);
    e->sbytes = (double)e->slen * sizeof(float);
    e->chunk = 16;
}

static void eng_free(eng *e)
{
    if (e->m) model_free(e->m);
    if (e->ctx) rw.free_ctx(e->ctx);
    free(e->states);
}

static int rpos;   /* rotates the tokens fed */

static bench_probe *evict;      /* --b1-cold: read before every batch-1 token, untimed */
static size_t evict_bytes;

/* n batch-1 tokens, logits each; returns the seconds they took (with --b1-cold
 * each token is timed alone, after a read of evict_bytes that leaves none
 * of the weights in any cache) */
static double run_b1(eng *e, int n)
{
    double sum = 0, t0 = clock_mono_s();
    for (int i = 0; i < n; i++) {
        int32_t t = toks[rpos++ % NTOK];
        if (evict) {
            bench_probe_gbs_n(evict, evict_bytes);
            t0 = clock_mono_s();
        }
        if (e->lind) {
            int s = 0;
            if (model_step(e->m, &s, &t, 1, logits) < 0) die(e->name, "model_step failed");
        } else if (!rw.eval(e->ctx, (uint32_t)t, e->states, e->states, logits))
            die(e->name, "rwkv_eval failed");
        if (evict) sum += clock_mono_s() - t0;
    }
    return evict ? sum : clock_mono_s() - t0;
}

/* `steps` steps of B64 sequences, one token each, logits for all */
static void run_b64(eng *e, int steps)
{
    for (int s = 0; s < steps; s++) {
        const int32_t *t = &toks[(rpos += B64) % (NTOK - B64)];
        if (e->lind) {
            if (model_step(e->m, slots, t, B64, logits) < 0) die(e->name, "model_step failed");
        } else
            for (int b = 0; b < B64; b++) {
                float *st = e->states + (size_t)b * e->slen;
                if (!rw.eval(e->ctx, (uint32_t)t[b], st, st, logits)) die(e->name, "rwkv_eval failed");
            }
    }
}

/* a T-token prompt from the zero state, logits for its last token */
static void run_prefill(eng *e, int T)
{
    if (e->lind) {
        model_slot_reset(e->m, 0);
        for (int p = 0; p < T; p += 256) {
            int len = T - p < 256 ? T - p : 256, last = len - 1;
            if (model_forward(e->m, pslots, toks + p, len, p + len == T ? &last : NULL, p + len == T, logits) < 0)
                die(e->name, "model_forward failed");
        }
    } else if (!rw.eval_chunks(e->ctx, utoks, (size_t)T, (size_t)e->chunk, NULL, e->states, logits))
        die(e->name, "rwkv_eval_sequence_in_chunks failed");
}

/* ---- the quiet check ------------------------------------------------------------ */

static double busy_s(void)   /* the machine's busy CPU seconds, all CPUs */
{
    FILE *f = fopen("/proc/stat", "r");
    unsigned long long v[8] = {0};
    if (!f) return 0;
    int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
                   &v[6], &v[7]);
    fclose(f);
    if (n < 4) return 0;
    /* user nice system [idle iowait] irq softirq steal */
    return (double)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / (double)sysconf(_SC_CLK_TCK);
}

static int retries = 3;
static double load_limit = 0.15;
static long windows_total, windows_retried, windows_loaded;

enum { K_B1, K_B64, K_PF };
typedef struct win { double value, floor, floor_s, other; int loaded; } win;

/* One measured window of kind k: b1 → ms/token (and the floor ms of the
 * moment, without and with the state's bytes), b64 / prefill → tokens/s.
 * Repeated while other processes used more than load_limit cores, at most
 * `retries` times. */
static win measure(eng *e, int k, int n)
{
    win w = {0};
    for (int attempt = 0;; attempt++) {
        struct timespec gap = {0, 10 * 1000 * 1000};   /* the other engine's spinning threads settle */
        nanosleep(&gap, NULL);
        double b0 = busy_s(), s0 = clock_cpu_s(), t0 = clock_mono_s();
        double tm;
        if (k == K_B1) {
            double g = bench_probe_gbs_n(probe, (size_t)e->wbytes);
            w.floor = e->wbytes / (g * 1e9) * 1e3;
            w.floor_s = (e->wbytes + 2 * e->sbytes) / (g * 1e9) * 1e3;
            tm = run_b1(e, n);
            w.value = tm * 1e3 / n;
        } else {
            double t1 = clock_mono_s();
            if (k == K_B64) run_b64(e, n);
            else run_prefill(e, n);
            tm = clock_mono_s() - t1;
            w.value = (k == K_B64 ? (double)B64 * n : (double)n) / tm;
        }
        double wall = clock_mono_s() - t0, other = (busy_s() - b0) - (clock_cpu_s() - s0);
        w.other = other > 0 ? other / wall : 0;
        windows_total++;
        if (w.other <= load_limit) return w;
        if (attempt >= retries) {
            w.loaded = 1;
            windows_loaded++;
            return w;
        }
        windows_retried++;
    }
}

/* ---- statistics ----------------------------------------------------------------- */

static int cmp_dbl(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}
typedef struct stat3 { double med, lo, hi; } stat3;
static stat3 stats(const double *v, int n)
{
    double s[256];
    memcpy(s, v, (size_t)n * sizeof *s);
    qsort(s, (size_t)n, sizeof *s, cmp_dbl);
    stat3 r = {n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]), s[0], s[n - 1]};
    return r;
}

/* ---- one shape ------------------------------------------------------------------- */

#define NPAIR 5
#define MAXR 64

static int quick;
static int pair_on[NPAIR] = {1, 1, 1, 1, 1};   /* --pairs: f32, bf16, q8, q4, bf16m */
static int meas_on[3] = {1, 1, 1};      /* --measure: b1, b64, prefill */
static int b1_cold;   /* --b1-cold */
static int rounds_b1 = 11, rounds_b64 = 5, rounds_pf = 5, prefill_T = 2000;

static void file_ok(const char *path)
{
    struct stat st;
    if (stat(path, &st) < 0) {
        fprintf(stderr, "peers_bench: %s: %s (make bench-peers writes it with bench/peers/make_weights.py)\n", path,
                strerror(errno));
        exit(1);
    }
}

static void shape_run(const char *models, const char *shape, int threads, double fma, double dot, double vnni)
{
    char dir[1024], lind_dir[1100], path[1100];
    snprintf(dir, sizeof dir, "%s/%s", models, shape);
    snprintf(lind_dir, sizeof lind_dir, "%s/lind", dir);
    file_ok(lind_dir);
    /* Mamba-2: lind alone (rwkv.cpp has no Mamba), its rows without ratios */
    int solo = !strncmp(shape, "mamba", 5);
    static const char *rq[NPAIR] = {"FP32", "FP16", "Q8_0", "Q5_1", "FP16"};
    static const lind_dtype ld[NPAIR] = {LIND_DT_F32, LIND_DT_BF16, LIND_DT_Q8, LIND_DT_Q4, LIND_DT_BF16};
    static const char *ln[NPAIR] = {"f32", "bf16", "q8", "q4", "bf16, bf16 math"};
    for (int p = 2; p < NPAIR; p++) {   /* rwkv.cpp quantizes its own files */
        if (!pair_on[p] || solo) continue;
        snprintf(path, sizeof path, "%s/rwkv_cpp-%s.bin", dir, rq[p]);
        struct stat st;
        if (stat(path, &st) == 0) continue;
        char src[1100];
        snprintf(src, sizeof src, "%s/rwkv_cpp-FP32.bin", dir);
        file_ok(src);
        fprintf(stderr, "peers_bench: rwkv_quantize_model_file %s -> %s\n", src, rq[p]);
        if (!rw.quantize(src, path, rq[p])) die(path, "rwkv_quantize_model_file failed");
    }
    eng L[NPAIR], R[NPAIR];
    memset(L, 0, sizeof L);
    memset(R, 0, sizeof R);
    double t_load = clock_mono_s(), maxb = 0;
    int p0 = -1;   /* the first pair measured */
    for (int p = 0; p < NPAIR; p++) {
        if (!pair_on[p]) continue;
        if (p0 < 0) p0 = p;
        lind_load(&L[p], lind_dir, ld[p], p == 4 ? LIND_COMPUTE_BF16 : LIND_COMPUTE_F32, ln[p]);
        if (!solo) {
            snprintf(path, sizeof path, "%s/rwkv_cpp-%s.bin", dir, rq[p]);
            file_ok(path);
            rwkv_load(&R[p], path, rq[p], threads);
        }
        L[p].ceil_g = R[p].ceil_g = (p == 2 || p == 3) && vnni > 0 ? vnni : fma;
        if (p == 4) L[p].ceil_g = dot;   /* rwkv.cpp's FP16 keeps fp32 math's */
        if (L[p].wbytes > maxb) maxb = L[p].wbytes;
        if (R[p].wbytes > maxb) maxb = R[p].wbytes;
    }
    if (!(probe = bench_probe_new((size_t)maxb))) die("read probe", "out of memory");
    if (b1_cold && !evict) {   /* 1 GiB, or 3 × the last-level cache if larger */
        long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
        evict_bytes = (size_t)1 << 30;
        if (l3 > 0 && 3 * (size_t)l3 > evict_bytes) evict_bytes = 3 * (size_t)l3;
        if (!(evict = bench_probe_new(evict_bytes))) die("--b1-cold", "out of memory");
    }
    int V = model_vocab(L[p0].m);
    size_t bmacs, hmacs;
    model_costs(L[p0].m, &bmacs, &hmacs, NULL);
    const lind_config *cfg = model_config(L[p0].m);
    if (!solo && rw.logits_len(R[p0].ctx) != (size_t)V) die(shape, "the two engines' vocabularies differ");
    for (int i = 0; i < NTOK; i++) utoks[i] = (uint32_t)(toks[i] = (int32_t)((i * 7919 + 13) % V));
    /* The same weights: lind f32 and rwkv.cpp FP32 fed the same 8 tokens
     * from the zero state; their last logits' largest difference over the
     * largest logit. */
    double agree = 0;
    if (!solo) {
        float *a = malloc((size_t)V * sizeof *a), *b = malloc((size_t)V * sizeof *b);
        float *st = malloc(R[p0].slen * sizeof *st);
        if (!a || !b || !st) die("agreement", "out of memory");
        rw.init_state(R[p0].ctx, st);
        model_slot_reset(L[p0].m, 0);
        for (int i = 0; i < 8; i++) {
            int s0 = 0;
            if (model_step(L[p0].m, &s0, &toks[i], 1, a) < 0) die(ln[p0], "model_step failed");
            if (!rw.eval(R[p0].ctx, utoks[i], st, st, b)) die(rq[p0], "rwkv_eval failed");
        }
        double dmax = 0, amax = 0;
        for (int i = 0; i < V; i++) {
            double d = a[i] > b[i] ? a[i] - b[i] : b[i] - a[i], m = b[i] > 0 ? b[i] : -b[i];
            if (!(d <= dmax)) dmax = d;   /* a NaN counts */
            if (m > amax) amax = m;
        }
        agree = amax > 0 ? dmax / amax : dmax;
        free(a);
        free(b);
        free(st);
        model_slot_reset(L[p0].m, 0);
    }
    int T = quick ? 256 : prefill_T, n1 = quick ? 4 : 16, s64 = 1;
    int r1 = quick ? 3 : rounds_b1, r64 = quick ? 2 : rounds_b64, rpf = quick ? 2 : rounds_pf;
    /* warm-up: every path once (rwkv.cpp builds and caches its graphs);
     * rwkv.cpp's sequence chunk: the faster of 16 and 64 */
    for (int p = 0; p < NPAIR; p++) {
        if (!pair_on[p]) continue;
        for (eng *e = &L[p]; e; e = e == &L[p] && !solo ? &R[p] : NULL) {
            if (meas_on[0]) run_b1(e, 2);
            if (meas_on[1]) run_b64(e, 1);
            if (e->lind || !meas_on[2]) {
                if (meas_on[2]) run_prefill(e, T);
                continue;
            }
            /* timed on a prompt of at most 512 tokens (the choice does not
             * need the whole prompt; the warm-up would take minutes) */
            double best = 0;
            int tw = T < 512 ? T : 512;
            for (int c = 16; c <= 64; c *= 4) {
                e->chunk = c;
                run_prefill(e, tw);   /* builds the graphs */
                double t0 = clock_mono_s();
                run_prefill(e, tw);
                double tps = tw / (clock_mono_s() - t0);
                if (tps > best) { best = tps; R[p].chunk = c; }
            }
            e->chunk = R[p].chunk;
        }
        for (int b = 0; b < B64; b++) model_slot_reset(L[p].m, b);
    }
    t_load = clock_mono_s() - t_load;

    /* [kind][pair][0 lind / 1 rwkv][round] */
    static win W[3][NPAIR][2][MAXR];
    int nr[3] = {r1, r64, rpf}, nn[3] = {n1, s64, T};
    static const char *kname[3] = {"batch 1", "batch 64", "prefill"};
    for (int k = 0; k < 3; k++)
        for (int r = 0; r < nr[k] && meas_on[k]; r++) {
            long retried = windows_retried, ld0 = windows_loaded;
            double t0 = clock_mono_s();
            for (int p = 0; p < NPAIR; p++)
                for (int j = 0; j < 2 && pair_on[p]; j++) {
                    int side = (j + r) % 2;   /* lind first in even rounds */
                    if (solo && side) continue;
                    W[k][p][side][r] = measure(side ? &R[p] : &L[p], k, nn[k]);
                }
            fprintf(stderr, "peers_bench: %s %s round %d/%d: %.1f s, %ld windows repeated, %ld loaded\n", shape,
                    kname[k], r + 1, nr[k], clock_mono_s() - t0, windows_retried - retried, windows_loaded - ld0);
        }

    double fl_tok = 2.0 * (double)(bmacs + hmacs), fl_pf = 2.0 * ((double)bmacs + (double)hmacs / T);
    printf("### %s: d %d, %d layers, vocab %d (%.0fM parameters)\n\n", shape, cfg->d_model, cfg->n_layers, V,
           (double)model_param_count(L[p0].m) / 1e6);
    if (solo)
        printf("Files: `%s` (lind, BF16), random weights; lind alone: rwkv.cpp has no Mamba. Loading and warming up "
               "took %.0f s. FLOPs per token: %.2f G (batch 64), %.2f G (prefill of %d, the head once).\n\n",
               lind_dir, t_load, fl_tok / 1e9, fl_pf / 1e9, T);
    else {
        printf("Files: `%s` (lind, BF16) and rwkv.cpp's `rwkv_cpp-{FP32,FP16,Q8_0,Q5_1}.bin` beside it, the same "
               "random weights; loading, quantizing and warming up took %.0f s. FLOPs per token: %.2f G (batch 64), "
               "%.2f G (prefill of %d, the head once). rwkv.cpp's sequence chunk (the faster of 16 and 64 at warm-up, on a "
               "prompt of up to 512 tokens):",
               lind_dir, t_load, fl_tok / 1e9, fl_pf / 1e9, T);
        for (int p = 0; p < NPAIR; p++)
            if (pair_on[p] && meas_on[2]) printf(" %s %d", rq[p], R[p].chunk);
        printf(meas_on[2] ? " tokens.\n\n" : " not chosen, no prefill in this run.\n\n");
        printf("Same weights, same model: after the same 8 tokens, lind %s's and rwkv.cpp %s's logits differ by at "
               "most %.2g of the largest logit%s.\n\n", ln[p0], rq[p0], agree,
               p0 ? " (not the exact check: rwkv.cpp's FP16 and quantized formats round its activations too; put "
                    "f32 in --pairs for the f32/FP32 one)"
                  : agree < 1e-3 ? "" : " (**more than 1e-3: check the writer**)");
    }

    double v[2][MAXR], fl[2][MAXR], fs[2][MAXR], ra[MAXR];
    int loaded[2];
    /* batch 1 */
    if (meas_on[0]) {
        printf("**Batch 1** (ms/token with logits; %d rounds of %d tokens", r1, n1);
        if (evict)
            printf(", each token timed alone right after a read of %.0f MB (--b1-cold: no weights left in any cache, "
                   "on a host whose last-level cache could hold a model)", evict_bytes / 1e6);
        printf("; floor = matrix bytes / the read bandwidth "
               "probed right before the window (reading the engine's matrix bytes, or 3 × the last-level cache if more); floor + state adds a session's state, read and written once a token, "
               "at the same bandwidth: lind %.2f MB", L[p0].sbytes / 1e6);
        if (!solo) printf(", rwkv.cpp %.2f MB", R[p0].sbytes / 1e6);
        printf(")\n\n");
        printf("| lind | rwkv.cpp | lind MB | rwkv.cpp MB | lind ms (median, range) | rwkv.cpp ms (median, range) | "
               "lind x floor | rwkv.cpp x floor | lind x floor + state | rwkv.cpp x floor + state | speed ratio lind : "
               "rwkv.cpp (median, range) | loaded windows |\n"
               "|---|---|---|---|---|---|---|---|---|---|---|---|\n");
        for (int p = 0; p < NPAIR; p++) {
            if (!pair_on[p]) continue;
            loaded[0] = loaded[1] = 0;
            for (int r = 0; r < r1; r++) {
                for (int s = 0; s < 2; s++) {
                    v[s][r] = W[0][p][s][r].value;
                    fl[s][r] = W[0][p][s][r].value / W[0][p][s][r].floor;
                    fs[s][r] = W[0][p][s][r].value / W[0][p][s][r].floor_s;
                    loaded[s] += W[0][p][s][r].loaded;
                }
                ra[r] = W[0][p][1][r].value / W[0][p][0][r].value;
            }
            stat3 a = stats(v[0], r1), b = stats(v[1], r1), fa = stats(fl[0], r1), fb = stats(fl[1], r1),
                  sa = stats(fs[0], r1), sb = stats(fs[1], r1), q = stats(ra, r1);
            if (solo)
                printf("| %s | — | %.1f | — | %.2f (%.2f–%.2f) | — | %.2fx | — | %.2fx | — | — | %d/%d |\n", ln[p],
                       L[p].wbytes / 1e6, a.med, a.lo, a.hi, fa.med, sa.med, loaded[0], r1);
            else
                printf("| %s | %s | %.1f | %.1f | %.2f (%.2f–%.2f) | %.2f (%.2f–%.2f) | %.2fx | %.2fx | %.2fx | %.2fx | "
                       "**%.2fx** (%.2f–%.2f) | %d/%d |\n", ln[p], rq[p], L[p].wbytes / 1e6, R[p].wbytes / 1e6, a.med,
                       a.lo, a.hi, b.med, b.lo, b.hi, fa.med, fb.med, sa.med, sb.med, q.med, q.lo, q.hi,
                       loaded[0] + loaded[1], 2 * r1);
        }
    }
    /* batch 64 and prefill */
    for (int k = 1; k < 3; k++) {
        if (!meas_on[k]) continue;
        double flops = k == 1 ? fl_tok : fl_pf;
        if (k == 1)
            printf("\n**Batch 64** (aggregate tokens/s, 64 sequences one token each, logits for all; %d rounds; "
                   "rwkv.cpp: the 64 one after another; floor = FLOPs / the format's ceiling)\n\n", r64);
        else
            printf("\n**Prefill** (tokens/s of a %d-token prompt from the zero state, logits for the last; %d "
                   "rounds; floor = FLOPs / the format's ceiling)\n\n", T, rpf);
        printf("| lind | rwkv.cpp | ceiling (G/s) | floor (tok/s) | lind tok/s (median, range) | rwkv.cpp tok/s "
               "(median, range) | lind x floor | rwkv.cpp x floor | speed ratio lind : rwkv.cpp (median, range) "
               "| loaded windows |\n|---|---|---|---|---|---|---|---|---|---|\n");
        for (int p = 0; p < NPAIR; p++) {
            if (!pair_on[p]) continue;
            loaded[0] = loaded[1] = 0;
            double ftps = L[p].ceil_g * 1e9 / flops;
            for (int r = 0; r < nr[k]; r++) {
                for (int s = 0; s < 2; s++) {
                    v[s][r] = W[k][p][s][r].value;
                    loaded[s] += W[k][p][s][r].loaded;
                }
                ra[r] = W[k][p][0][r].value / W[k][p][1][r].value;
            }
            stat3 a = stats(v[0], nr[k]), b = stats(v[1], nr[k]), q = stats(ra, nr[k]);
            if (solo)
                printf("| %s | — | %.0f | %.0f | %.0f (%.0f–%.0f) | — | %.1fx | — | — | %d/%d |\n", ln[p],
                       L[p].ceil_g, ftps, a.med, a.lo, a.hi, ftps / a.med, loaded[0], nr[k]);
            else
                printf("| %s | %s | %.0f | %.0f | %.0f (%.0f–%.0f) | %.1f (%.1f–%.1f) | %.1fx | %.1fx | **%.1fx** "
                       "(%.1f–%.1f) | %d/%d |\n", ln[p], rq[p], L[p].ceil_g, ftps, a.med, a.lo, a.hi, b.med, b.lo,
                       b.hi, ftps / a.med, ftps / b.med, q.med, q.lo, q.hi, loaded[0] + loaded[1], 2 * nr[k]);
        }
    }
    printf("\n");
    fflush(stdout);
    for (int p = 0; p < NPAIR; p++) {
        eng_free(&L[p]);
        eng_free(&R[p]);
    }
    bench_probe_free(probe);
    probe = NULL;
}

int main(int argc, char **argv)
{
    const char *models = "build-peers/models", *lib = "build-peers/src/rwkv.cpp/build/librwkv.so";
    const char *shapes = "rwkv4-169m,rwkv7-0.1b,mamba2-130m";
    int threads = 2;
    const char *q = getenv("BENCH_QUICK");
    quick = q && *q && strcmp(q, "0");
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) { quick = 1; continue; }
        if (!strcmp(argv[i], "--b1-cold")) { b1_cold = 1; continue; }
        if (i + 1 >= argc) die(argv[i], "needs a value");
        const char *v = argv[++i];
        if (!strcmp(argv[i - 1], "--models")) models = v;
        else if (!strcmp(argv[i - 1], "--shapes")) shapes = v;
        else if (!strcmp(argv[i - 1], "--rwkv-lib")) lib = v;
        else if (!strcmp(argv[i - 1], "--threads")) threads = atoi(v);
        else if (!strcmp(argv[i - 1], "--retries")) retries = atoi(v);
        else if (!strcmp(argv[i - 1], "--load-limit")) load_limit = atof(v);
        else if (!strcmp(argv[i - 1], "--rounds")) rounds_b1 = rounds_b64 = rounds_pf = atoi(v);
        else if (!strcmp(argv[i - 1], "--prefill")) prefill_T = atoi(v);
        else if (!strcmp(argv[i - 1], "--pairs")) {   /* a subset of f32,bf16,q8,q4,bf16m */
            static const char *pn[NPAIR] = {"f32", "bf16", "q8", "q4", "bf16m"};
            int any = 0;
            for (int p = 0; p < NPAIR; p++) {
                char pat[8];
                snprintf(pat, sizeof pat, ",%s,", pn[p]);
                char list[128];
                snprintf(list, sizeof list, ",%s,", v);
                any += pair_on[p] = strstr(list, pat) != NULL;
            }
            if (!any) die("--pairs", "want a comma-separated subset of f32,bf16,q8,q4,bf16m");
        }
        else if (!strcmp(argv[i - 1], "--measure")) {   /* a subset of b1,b64,prefill */
            static const char *mn[3] = {"b1", "b64", "prefill"};
            int any = 0;
            for (int k = 0; k < 3; k++) {
                char pat[16], list[128];
                snprintf(pat, sizeof pat, ",%s,", mn[k]);
                snprintf(list, sizeof list, ",%s,", v);
                any += meas_on[k] = strstr(list, pat) != NULL;
            }
            if (!any) die("--measure", "want a comma-separated subset of b1,b64,prefill");
        }
        else die(argv[i - 1], "unknown option");
    }
    if (threads < 1 || threads > 64 || retries < 0 || rounds_b1 < 1 || rounds_b1 > MAXR ||
        prefill_T < 16 || prefill_T > NTOK) die("options", "out of range");
    {
        char eerr[256];
        if (backend_opts_from_env(&be_opts, eerr, sizeof eerr) < 0) die("environment", eerr);
        be_opts.threads = threads;
    }
    rwkv_open(lib);
    logits = malloc((size_t)B64 * 65536 * 2 * sizeof *logits);
    if (!logits) die("logits", "out of memory");
    for (int b = 0; b < B64; b++) slots[b] = b;
    /* pslots: a prompt's rows all in slot 0 */

    printf("## lind and rwkv.cpp in the same run (`make bench-peers`)\n\n");
    bench_header(stdout, argc, argv);
    const char *omp = getenv("OMP_WAIT_POLICY");
    printf("rwkv.cpp: %s; its OpenMP threads' wait policy: %s\n\n", rw.sysinfo(),
           omp && *omp ? omp : "libgomp's default (unset: spin, then sleep)");
    fflush(stdout);
    /* The ceilings, each under the same quiet check as the windows: the
     * best of the quiet attempts (of all attempts when none was quiet). */
    char how[128] = "", how1[128];
    /* k: 0 fp32 FMA, 1 vdpbf16ps, 2 vpdpbusd, 3 DRAM read, 4 AMX TDPBF16PS */
    double c[5] = {0}, cq[5] = {0}, oth[5] = {0};
    int cl[5] = {1, 1, 1, 1, 1};
    int runs = quick ? 1 : 3;
    int amx = backend_cpu_amx(&be_opts);
    for (int k = 0; k < 4 + amx; k++)
        for (int attempt = 0; attempt <= retries; attempt++) {
            double b0 = busy_s(), s0 = clock_cpu_s(), t0 = clock_mono_s(), g;
            if (k == 3) g = bench_read_gbs_how(how1, sizeof how1);
            else g = bench_fma_gflops(threads, k == 4 ? 3 : k, runs);
            double wall = clock_mono_s() - t0, o = ((busy_s() - b0) - (clock_cpu_s() - s0)) / wall;
            if (o < 0) o = 0;
            if (g > c[k]) c[k] = g;
            if (o <= load_limit) {
                cl[k] = 0;
                if (g > cq[k]) {
                    cq[k] = g;
                    oth[k] = o;
                    if (k == 3) snprintf(how, sizeof how, "%s", how1);
                }
                break;
            }
            oth[k] = o;
            if (k == 3 && !how[0]) snprintf(how, sizeof how, "%s", how1);
        }
    for (int k = 0; k < 4 + amx; k++) {
        if (!cl[k]) c[k] = cq[k];
        else windows_loaded++;
    }
    double fma = c[0], dot = c[1], vnni = c[2], gbs = c[3];
    char amxs[160] = "";
    if (amx) {
        snprintf(amxs, sizeof amxs, ", AMX TDPBF16PS %.0f GFLOP/s%s (lind's bf16 math runs on it here; %.2f cores "
                 "of other processes)", c[4], cl[4] ? " (loaded)" : "", oth[4]);
        if (dot > 0) dot = c[4];   /* the bf16m pair's floors */
    }
    if (dot <= 0 && pair_on[4]) {   /* no AVX512_BF16: no bf16 math to measure */
        pair_on[4] = 0;
        fprintf(stderr, "peers_bench: this CPU has no AVX512_BF16: the bf16m pair is left out\n");
    }
    printf("Ceilings of this run (%d threads): fp32 FMA %.0f GFLOP/s%s, vdpbf16ps %.0f GFLOP/s%s%s, vpdpbusd (VNNI) "
           "%.0f GOP/s%s; DRAM read %.1f GB/s%s (bench_read_gbs: 1 GiB, the best strategy, this time %s). "
           "Measured under the quiet check below (\"loaded\": other processes took more than the limit in every "
           "attempt, so the ceiling reads low and the floors built on it too; other processes took %.2f, %.2f, %.2f "
           "and %.2f cores during the kept attempts).\n\n", threads, fma,
           cl[0] ? " (loaded)" : "", c[1], cl[1] ? " (loaded)" : "", amxs, vnni, cl[2] ? " (loaded)" : "", gbs,
           cl[3] ? " (loaded)" : "", how, oth[0], oth[1], oth[2], oth[3]);
    printf("Both engines: %d threads; lind's formats with fp32 math, and bf16 weights with bf16 math (--compute "
           "bf16, its floors against %s) in the pair \"bf16, bf16 math\"; rwkv.cpp built by bench/peers/get_rwkv_cpp.sh. "
           "Ratios are speed ratios (lind's tokens/s over rwkv.cpp's; > 1: lind faster), each round's from its two "
           "adjacent windows. A window during which other processes used more than %.2f cores (/proc/stat less "
           "this process) was measured again, up to %d times%s.\n\n", threads, amx ? "AMX TDPBF16PS" : "vdpbf16ps",
           load_limit, retries,
           retries ? "" : " (--retries 0: never, each loaded window is kept and counted)");
    fflush(stdout);
    char *list = strdup(shapes);
    for (char *save = NULL, *s = strtok_r(list, ",", &save); s; s = strtok_r(NULL, ",", &save))
        shape_run(models, s, threads, fma, dot, vnni);
    free(list);
    printf("**Quiet check:** %ld windows measured, %ld repeated for load, %ld still loaded after %d retries%s.\n",
           windows_total, windows_retried, windows_loaded, retries,
           windows_loaded ? ": this run saw load (the loaded windows are counted per row); rerun on a quiet machine"
                          : " (a quiet run)");
    free(logits);
    bench_probe_free(evict);
    return 0;
}
