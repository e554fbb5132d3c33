/* bench/decode_bench.c — decode cost against position: lind's recurrent step
 * against the same model with softmax attention and a KV cache
 * (bench/softmax_baseline.c), one session, batch 1, CPU backend.
 *
 * Recurrent: one session is stepped token by token from BOS to the largest
 * position asked for (up to --advance-max), sampling each next token from
 * the logits; every step is timed. The figure at position N is the median
 * of the W steps after N. Nothing is skipped: reaching 10^6 means 10^6 steps.
 *
 * Softmax: the session is stepped for real up to --prefix positions (2048)
 * + W; a position N beyond that is reached by filling the cache rows
 * [prefix, N) with the real rows repeated (decode cost does not depend on the
 * cached values), then W steps are timed. A cache that would exceed the
 * memory limit (--mem-limit-gib, and what the machine has available) is
 * reported as out of memory, not run.
 *
 * Prints markdown; --data FILE and --stream FILE write the tables gnuplot
 * plots (bench/run.sh).
 *
 *   usage: decode_bench [--model DIR] [--positions N,N,...] [--advance-max N]
 *                       [--window W] [--prefix P] [--mem-limit-gib G]
 *                       [--threads T] [--data FILE] [--stream FILE] [--quick]
 *          decode_bench --write-model DIR   (the fallback model, for run.sh)
 * --threads T (default 1) sets the threads of both models' CPU backends
 * (over LIND_CPU_THREADS; the other backend variables, e.g. LIND_CPU_GEMM,
 * are honoured) and the baseline's attention threads alike. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/benchutil.h"
#include "bench/softmax_baseline.h"
#include "kernels/clock.h"
#include "recurrent/model.h"
#include "recurrent/sampler.h"
#include "tests/testmodel.h"

#define MAXPOS 32

typedef struct opts {
    const char *model, *data, *stream;
    long pos[MAXPOS];
    int npos;
    long advance_max, window, prefix;
    double mem_limit_gib;
    int quick, threads;
    backend_opts be;   /* both backends': the environment's, threads from --threads */
} opts;

typedef struct result {
    long n;
    double rec_us, rec_mean_us, sm_us;   /* sm_us < 0: not run */
    double rec_int_us;                   /* interleaved re-measure, < 0: not run */
    double rec_pair_us;                  /* alternating with the softmax steps, < 0: not run */
    int rec_steps, sm_steps, rec_int_steps;
    uint8_t *snap;                       /* recurrent state holding n tokens */
    size_t rec_bytes, sm_bytes;
    const char *sm_note;                 /* how the position was reached, or why not run */
    char sm_note_buf[160];
} result;

static void die(const char *what, const char *why)
{
    fprintf(stderr, "decode_bench: %s: %s\n", what, why);
    exit(1);
}

static int parse_positions(const char *s, opts *o)
{
    o->npos = 0;
    while (*s && o->npos < MAXPOS) {
        char *end;
        double v = strtod(s, &end);   /* accepts 1e6 */
        if (end == s || v < 1 || v > 1e9) return -1;
        o->pos[o->npos++] = (long)v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return -1;
    }
    for (int i = 1; i < o->npos; i++)
        if (o->pos[i] <= o->pos[i - 1]) return -1;
    return o->npos ? 0 : -1;
}

/* ---- recurrent -------------------------------------------------------------- */

/* Step one session from BOS for `steps` tokens; times[t] = seconds of the step
 * that consumed the token at position t (t = 0 is BOS). The state holding
 * exactly res[i].n tokens is copied to res[i].snap where that is allocated. */
static void run_recurrent(model *m, long steps, float *times, result *res, int nres)
{
    int slot = 0, tok = LIND_BOS;
    float logits[LIND_BYTE_VOCAB], scratch[2 * LIND_BYTE_VOCAB];
    sampler_params sp = sampler_defaults();
    sp.seed = 1;
    sampler smp;
    sampler_init(&smp, &sp);
    if (model_slots_reserve(m, 1) < 0 || model_slot_reset(m, 0) < 0) die("recurrent", "no slot");
    double start = clock_mono_s(), next_report = start + 10;
    for (long t = 0; t < steps; t++) {
        for (int i = 0; i < nres; i++)
            if (res[i].n == t && res[i].snap && model_slot_read(m, 0, res[i].snap) < 0) die("recurrent", "slot read");
        double t0 = clock_mono_s();
        if (model_step(m, &slot, &tok, 1, logits) < 0) die("recurrent", "model_step failed");
        double t1 = clock_mono_s();
        times[t] = (float)(t1 - t0);
        tok = sampler_next(&smp, logits, LIND_BYTE_VOCAB, scratch);
        sampler_observe(&smp, tok);
        if (t1 > next_report) {
            fprintf(stderr, "decode_bench: recurrent at position %ld of %ld (%.0f s, %.1f us/token so far)\n", t + 1,
                    steps, t1 - start, (t1 - start) / (double)(t + 1) * 1e6);
            next_report = t1 + 10;
        }
    }
}

/* The stream above runs for minutes, and the machine's load changes under
 * it. To compare positions under the same conditions, the saved states are
 * measured again in alternation: `rounds` rounds, each writing every saved
 * state into the slot in turn and timing `per` steps from it. */
static void remeasure(model *m, result *res, int nres, int rounds, int per)
{
    int slot = 0;
    float logits[LIND_BYTE_VOCAB];
    double **v = calloc((size_t)nres, sizeof *v);
    if (!v) die("remeasure", "out of memory");
    for (int i = 0; i < nres; i++)
        if (res[i].snap && !(v[i] = malloc(sizeof(double) * (size_t)rounds * (size_t)per))) die("remeasure", "out of memory");
    for (int r = 0; r < rounds; r++)
        for (int i = 0; i < nres; i++) {
            if (!res[i].snap) continue;
            if (model_slot_write(m, 0, res[i].snap) < 0) die("remeasure", "slot write");
            for (int k = 0; k < per; k++) {
                int tok = 32 + (r * per + k) * 37 % 95;
                double t0 = clock_mono_s();
                if (model_step(m, &slot, &tok, 1, logits) < 0) die("remeasure", "model_step failed");
                v[i][r * per + k] = clock_mono_s() - t0;
            }
        }
    for (int i = 0; i < nres; i++) {
        res[i].rec_int_us = v[i] ? bench_median(v[i], (size_t)rounds * (size_t)per) * 1e6 : -1;
        res[i].rec_int_steps = v[i] ? rounds * per : 0;
        free(v[i]);
    }
    free(v);
}

/* Median and mean of times[a, b) in µs. */
static double window_us(const float *times, long a, long b, double *mean)
{
    double *v = malloc(sizeof(double) * (size_t)(b - a)), s = 0;
    if (!v) die("window", "out of memory");
    for (long i = a; i < b; i++) s += (v[i - a] = times[i]);
    if (mean) *mean = s / (double)(b - a) * 1e6;
    double med = bench_median(v, (size_t)(b - a)) * 1e6;
    free(v);
    return med;
}

/* ---- softmax ------------------------------------------------------------------ */

typedef struct sm_run {
    smax *s;
    sampler smp;
    int tok;
    float logits[LIND_BYTE_VOCAB], scratch[2 * LIND_BYTE_VOCAB];
} sm_run;

/* One timed decode step: feed the pending token, sample the next. */
static double sm_step(sm_run *r)
{
    double t0 = clock_mono_s();
    if (smax_step(r->s, r->tok, r->logits) < 0) die("softmax", "smax_step failed");
    double dt = clock_mono_s() - t0;
    r->tok = sampler_next(&r->smp, r->logits, LIND_BYTE_VOCAB, r->scratch);
    sampler_observe(&r->smp, r->tok);
    return dt;
}

/* One timed recurrent step of slot 0 (the paired measurement). */
static double rec_step(model *m, long k)
{
    int slot = 0, tok = 32 + (int)(k * 37 % 95);
    float logits[LIND_BYTE_VOCAB];
    double t0 = clock_mono_s();
    if (model_step(m, &slot, &tok, 1, logits) < 0) die("recurrent", "model_step failed");
    return clock_mono_s() - t0;
}

/* Paired measurement: softmax and recurrent steps alternate in blocks of
 * PAIR steps each (one softmax step per block when a step takes over
 * 10 ms), so both medians are taken under the same machine load while each
 * model mostly runs with its own data in cache, as it would alone; the
 * first step of a block finds the other model's traffic in cache, and the
 * medians look past it. */
#define PAIR 8

/* W timed steps from the current position (at least 3, fewer than W once
 * `budget` seconds are spent); median µs, count in *steps. With a saved
 * recurrent state (snap), blocks of softmax steps alternate with blocks of
 * PAIR recurrent steps from that state: their median in *rec_us (else -1). */
static double sm_measure(sm_run *r, long W, double budget, int *steps, model *m, const uint8_t *snap,
                         double *rec_us)
{
    double *v = malloc(sizeof(double) * (size_t)W), *u = malloc(sizeof(double) * (size_t)(W + 1) * PAIR);
    double start = clock_mono_s();
    if (!v || !u) die("softmax", "out of memory");
    if (snap && model_slot_write(m, 0, snap) < 0) die("recurrent", "slot write");
    long k = 0, nu = 0;
    while (k < W && (k < 3 || clock_mono_s() - start < budget)) {
        double b0 = clock_mono_s();
        for (int j = 0; j < PAIR && k < W && (j == 0 || clock_mono_s() - b0 < 0.01); j++) v[k++] = sm_step(r);
        for (int j = 0; snap && j < PAIR; j++, nu++) u[nu] = rec_step(m, nu);
    }
    *steps = (int)k;
    double med = bench_median(v, (size_t)k) * 1e6;
    *rec_us = snap ? bench_median(u, (size_t)nu) * 1e6 : -1;
    free(v);
    free(u);
    return med;
}

static void run_softmax(const opts *o, result *res, int nres, const char *dir, model *m)
{
    char err[512];
    sm_run r = {.tok = LIND_BOS};
    if (smax_load(dir, o->threads, &o->be, &r.s, err, sizeof err) < 0) die("softmax baseline", err);
    sampler_params sp = sampler_defaults();
    sp.seed = 1;
    sampler_init(&r.smp, &sp);
    long W = o->window, P = o->prefix;
    if (P > res[nres - 1].n) P = res[nres - 1].n;
    size_t avail = bench_mem_available(), limit = (size_t)(o->mem_limit_gib * (double)(1ull << 30));
    /* The real prefix: every position up to P + W stepped from BOS. */
    if (smax_reserve(r.s, P + W) < 0) die("softmax", "out of memory for the prefix cache");
    smax_reset(r.s);
    /* pt: softmax step times; pr: PAIR recurrent steps after each of those
     * in a measured window (from the state saved at that window's N). */
    double *pt = malloc(sizeof(double) * (size_t)(P + W)), *pr = malloc(sizeof(double) * (size_t)(P + W));
    if (!pt || !pr) die("softmax", "out of memory");
    for (long t = 0; t < P + W; t++) {
        pt[t] = sm_step(&r);
        pr[t] = -1;
        /* At the end of every block of PAIR softmax steps inside a measured
         * window, PAIR recurrent steps (from the state saved at N). */
        for (int i = 0; i < nres; i++)
            if (res[i].snap && res[i].n <= P && t >= res[i].n && t < res[i].n + W) {
                if (t == res[i].n && model_slot_write(m, 0, res[i].snap) < 0) die("recurrent", "slot write");
                if ((t - res[i].n) % PAIR == PAIR - 1)
                    for (long j = t - PAIR + 1; j <= t; j++) pr[j] = rec_step(m, j);
                break;
            }
    }
    for (int i = 0; i < nres; i++) {
        result *x = &res[i];
        x->sm_bytes = smax_session_bytes(r.s, x->n);
        x->rec_pair_us = -1;
        if (x->n <= P) {
            double *w = malloc(sizeof(double) * (size_t)W);
            if (!w) die("softmax", "out of memory");
            memcpy(w, pt + x->n, sizeof(double) * (size_t)W);
            x->sm_us = bench_median(w, (size_t)W) * 1e6;
            size_t nu = 0;
            for (long t = x->n; t < x->n + W; t++)
                if (pr[t] >= 0) w[nu++] = pr[t];
            if (nu) x->rec_pair_us = bench_median(w, nu) * 1e6;
            free(w);
            x->sm_steps = (int)W;
            x->sm_note = "stepped from BOS";
            continue;
        }
        size_t need = smax_session_bytes(r.s, x->n + W) + sizeof(float) * (size_t)(x->n + W);
        size_t room = avail > (1ull << 30) ? avail - (1ull << 30) : 0;
        if (need > limit || need > room) {
            x->sm_us = -1;
            snprintf(x->sm_note_buf, sizeof x->sm_note_buf,
                     "out of memory: the KV cache needs %.2f GiB; limit %.1f GiB, %.1f GiB available", need / 1073741824.0,
                     o->mem_limit_gib, avail / 1073741824.0);
            x->sm_note = x->sm_note_buf;
            continue;
        }
        smax_set_position(r.s, P + W);
        if (smax_reserve(r.s, x->n + W) < 0) {
            x->sm_us = -1;
            snprintf(x->sm_note_buf, sizeof x->sm_note_buf, "out of memory: malloc of %.2f GiB failed",
                     need / 1073741824.0);
            x->sm_note = x->sm_note_buf;
            continue;
        }
        double f0 = clock_mono_s();
        smax_set_position(r.s, x->n);
        double fill = clock_mono_s() - f0;
        x->sm_us = sm_measure(&r, W, 5.0, &x->sm_steps, m, x->snap, &x->rec_pair_us);
        snprintf(x->sm_note_buf, sizeof x->sm_note_buf,
                 "rows %ld..%ld filled from the %ld stepped ones (%.1f s)", P + W, x->n - 1, P + W, fill);
        x->sm_note = x->sm_note_buf;
        fprintf(stderr, "decode_bench: softmax at %ld: %.1f us/token over %d steps\n", x->n, x->sm_us, x->sm_steps);
    }
    free(pt);
    free(pr);
    smax_free(r.s);
}

/* tools/train.py's default configuration: what models/default holds. */
static testmodel_cfg fallback_config(void)
{
    return testmodel_config(192, 4, 6, 32, 768, "linear,aft", 1, "decay");
}

/* ---- main ------------------------------------------------------------------------ */

static void usage(void)
{
    fprintf(stderr, "usage: decode_bench [--model DIR] [--positions N,N,...] [--advance-max N] [--window W]\n"
                    "                    [--prefix P] [--mem-limit-gib G] [--threads T] [--data FILE] [--stream FILE]\n"
                    "                    [--quick]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    opts o = {.model = "models/default", .advance_max = 1000000, .window = 256, .prefix = 2048,
              .mem_limit_gib = 16};
    const char *positions = NULL;
    /* --write-model DIR: write the fallback model (random weights, default
     * configuration) for bench/run.sh's other benchmarks, and exit. */
    if (argc == 3 && !strcmp(argv[1], "--write-model")) {
        testmodel_cfg c = fallback_config();
        if (testmodel_write(argv[2], &c, 1, NULL) < 0) die("testmodel_write", argv[2]);
        return 0;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--quick")) { o.quick = 1; continue; }
        if (!v) usage();
        i++;
        if (!strcmp(a, "--model")) o.model = v;
        else if (!strcmp(a, "--positions")) positions = v;
        else if (!strcmp(a, "--advance-max")) o.advance_max = (long)strtod(v, NULL);
        else if (!strcmp(a, "--window")) o.window = atol(v);
        else if (!strcmp(a, "--prefix")) o.prefix = atol(v);
        else if (!strcmp(a, "--mem-limit-gib")) o.mem_limit_gib = strtod(v, NULL);
        else if (!strcmp(a, "--data")) o.data = v;
        else if (!strcmp(a, "--stream")) o.stream = v;
        else if (!strcmp(a, "--threads")) {
            o.threads = atoi(v);
            if (o.threads < 1 || o.threads > 64) usage();
        } else usage();
    }
    /* One thread each by default: per-token cost on one core, and no thread
     * pools of the two models spinning against each other when they are
     * measured in alternation. Throughput on every core is bench-step's. */
    if (!o.threads) o.threads = 1;
    char eerr[256];
    if (backend_opts_from_env(&o.be, eerr, sizeof eerr) < 0) die("environment", eerr);
    o.be.threads = o.threads;
    if (o.quick) {
        if (!positions) positions = "256,512,1024,2048,4096";
        o.window = 32;
        o.prefix = 1024;
    }
    if (parse_positions(positions ? positions : "512,1024,2048,8192,65536,1000000", &o) < 0)
        die("--positions", "want increasing positive integers, comma-separated");
    if (o.window < 3 || o.prefix < 1 || o.advance_max < 0 || !(o.mem_limit_gib > 0)) usage();

    printf("## Decode cost against position: recurrent state vs softmax attention with a KV cache\n\n");
    bench_header(stdout, argc, argv);

    /* The model: the shipped one, else random weights in its configuration. */
    char dir[512], err[512], label[600];
    snprintf(dir, sizeof dir, "%s", o.model);
    char probe[600];
    snprintf(probe, sizeof probe, "%s/model.safetensors", o.model);
    if (access(probe, R_OK) == 0) {
        snprintf(label, sizeof label, "%s", o.model);
    } else {
        snprintf(dir, sizeof dir, "/tmp/lind-decode-bench-%d", (int)getpid());
        testmodel_cfg c = fallback_config();
        if (testmodel_write(dir, &c, 1, NULL) < 0) die("testmodel_write", dir);
        snprintf(label, sizeof label,
                 "random weights in tools/train.py's default configuration (%s has no model.safetensors)", o.model);
    }
    model *m = NULL;
    model_opts mo = {.backend = "cpu", .be = &o.be};
    if (model_load_opts(dir, &mo, &m, err, sizeof err) < 0) die("model_load", err);
    const lind_config *c = model_config(m);
    printf("Model: %s: d_model %d, %d layers (", label, c->d_model, c->n_layers);
    for (int i = 0; i < c->n_layers; i++) printf("%s%s/%s", i ? "," : "", c->layers[i].mixer, c->layers[i].ffn);
    /* the attention shape, as the softmax baseline reads it from the flat config */
    smax *shape = NULL;
    if (smax_load(dir, 1, &o.be, &shape, err, sizeof err) < 0) die("softmax baseline", err);
    const smax_cfg *sc = smax_config(shape);
    printf("), %d heads x %d, d_ff %d, %zu parameters. Backend %s (%s), batch 1; the softmax attention's heads "
           "run on %d thread(s).\n\n", sc->n_heads, sc->d_head, sc->d_ff, model_param_count(m), model_backend_name(m),
           model_device_name(m), o.threads);
    smax_free(shape);

    double worst = smax_selfcheck();
    printf("Softmax baseline self-check (SGEMV scores, vectorized softmax, SGEMV output vs a double loop; "
           "its exp vs libm): max relative error %.2e %s\n\n", worst, worst < 1e-5 ? "(ok)" : "(FAILED)");
    if (!(worst < 1e-5)) die("softmax baseline self-check", "attention kernel disagrees with the reference");

    int nres = o.npos;
    result *res = calloc((size_t)nres, sizeof *res);
    long W = o.window, rec_end = 0;
    for (int i = 0; i < nres; i++) {
        res[i].n = o.pos[i];
        res[i].rec_bytes = model_state_bytes(m);
        res[i].rec_us = res[i].rec_int_us = -1;
        if (o.pos[i] <= o.advance_max) {
            rec_end = o.pos[i] + W;
            if (!(res[i].snap = malloc(model_state_bytes(m)))) die("recurrent", "out of memory");
        }
    }

    float *times = NULL;
    double rec_total = 0;
    if (rec_end) {
        times = malloc(sizeof(float) * (size_t)rec_end);
        if (!times) die("recurrent", "out of memory for step times");
        double t0 = clock_mono_s();
        run_recurrent(m, rec_end, times, res, nres);
        rec_total = clock_mono_s() - t0;
        for (int i = 0; i < nres; i++)
            if (res[i].n + W <= rec_end) {
                res[i].rec_us = window_us(times, res[i].n, res[i].n + W, &res[i].rec_mean_us);
                res[i].rec_steps = (int)W;
            }
        remeasure(m, res, nres, 16, W / 16 > 4 ? (int)(W / 16) : 4);
    }
    run_softmax(&o, res, nres, dir, m);

    printf("### Per-token decode time and memory per session\n\n");
    printf("Medians of timed steps; the machine is shared, so its load changes during the run. Recurrent, "
           "stream order: the W = %ld steps after N in the one long stream. Recurrent, interleaved: the states "
           "saved at each N measured again after the stream, all positions in alternation (16 rounds), so every "
           "position sees the same load. Softmax: the W steps after N (fewer at very long N, see the count), in "
           "blocks of 8 (1 when a step takes over 10 ms) alternating with blocks of 8 recurrent steps from the "
           "state saved at N (recurrent, paired): the ratio is softmax / paired, two medians taken under the same "
           "load. Both models run on %d thread(s).\n\n", W, o.threads);
    printf("| position N | recurrent us/token, stream order | recurrent, interleaved | recurrent, paired |"
           " recurrent bytes/session | softmax us/token | softmax KV bytes/session | softmax / recurrent |"
           " softmax: how N was reached |\n|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < nres; i++) {
        result *x = &res[i];
        char rec[80], ri[48], rp[32], sm[48], ratio[32];
        if (x->rec_us >= 0) snprintf(rec, sizeof rec, "%.1f", x->rec_us);
        else snprintf(rec, sizeof rec, "not run (stepping capped at %ld)", o.advance_max);
        if (x->rec_int_us >= 0) snprintf(ri, sizeof ri, "%.1f (%d steps)", x->rec_int_us, x->rec_int_steps);
        else snprintf(ri, sizeof ri, "-");
        if (x->rec_pair_us >= 0) snprintf(rp, sizeof rp, "%.1f", x->rec_pair_us);
        else snprintf(rp, sizeof rp, "-");
        if (x->sm_us >= 0) snprintf(sm, sizeof sm, "%.1f (%d steps)", x->sm_us, x->sm_steps);
        else snprintf(sm, sizeof sm, "out of memory");
        if (x->sm_us >= 0 && x->rec_pair_us > 0) snprintf(ratio, sizeof ratio, "%.2fx", x->sm_us / x->rec_pair_us);
        else snprintf(ratio, sizeof ratio, "-");
        printf("| %ld | %s | %s | %s | %zu | %s | %zu | %s | %s |\n", x->n, rec, ri, rp, x->rec_bytes, sm,
               x->sm_bytes, ratio, x->sm_note);
    }
    if (rec_end)
        printf("\nThe recurrent session was stepped from BOS through %ld positions (every token sampled from "
               "its own logits) in %.1f s: %.1f us/token on average over the whole stream.\n",
               rec_end, rec_total, rec_total / (double)rec_end * 1e6);

    /* Against the figures quoted in the issue from "Transformers are RNNs". */
    printf("\n### Against the \"Transformers are RNNs\" figures quoted in issue 8\n\n"
           "The paper's ratios (softmax time / linear time) are for its own models and GPU; they are quoted here "
           "only for comparison.\n\n| N | paper | measured here |\n|---|---|---|\n");
    const long pn[3] = {512, 1024, 2048};
    const char *pr[3] = {"3.5x", "8.9x", "23.8x"};
    for (int k = 0; k < 3; k++) {
        char meas[32] = "not measured";
        for (int i = 0; i < nres; i++)
            if (res[i].n == pn[k] && res[i].sm_us >= 0 && res[i].rec_pair_us > 0)
                snprintf(meas, sizeof meas, "%.2fx", res[i].sm_us / res[i].rec_pair_us);
        printf("| %ld | %s | %s |\n", pn[k], pr[k], meas);
    }

    /* Along the whole recurrent stream, in doubling windows. */
    FILE *sf = o.stream ? fopen(o.stream, "w") : NULL;
    if (o.stream && !sf) die(o.stream, strerror(errno));
    if (rec_end) {
        printf("\n### Recurrent per-token time along the whole stream\n\n| positions | median us | mean us |\n"
               "|---|---|---|\n");
        if (sf) fprintf(sf, "# from to median_us mean_us\n");
        for (long a = 1; a < rec_end; a *= 2) {
            long b = 2 * a < rec_end ? 2 * a : rec_end;
            double mean, med = window_us(times, a, b, &mean);
            printf("| %ld..%ld | %.1f | %.1f |\n", a, b - 1, med, mean);
            if (sf) fprintf(sf, "%ld %ld %.3f %.3f\n", a, b - 1, med, mean);
        }
    }
    if (sf) fclose(sf);

    if (o.data) {
        FILE *f = fopen(o.data, "w");
        if (!f) die(o.data, strerror(errno));
        fprintf(f, "# N recurrent_us(stream order) softmax_us recurrent_bytes softmax_bytes recurrent_us(interleaved)"
                   " recurrent_us(paired) (NaN: not run)\n");
        for (int i = 0; i < nres; i++)
            fprintf(f, "%ld %.3f %.3f %zu %zu %.3f %.3f\n", res[i].n, res[i].rec_us >= 0 ? res[i].rec_us : NAN,
                    res[i].sm_us >= 0 ? res[i].sm_us : NAN, res[i].rec_bytes, res[i].sm_bytes,
                    res[i].rec_int_us >= 0 ? res[i].rec_int_us : NAN,
                    res[i].rec_pair_us >= 0 ? res[i].rec_pair_us : NAN);
        fclose(f);
    }
    free(times);
    for (int i = 0; i < nres; i++) free(res[i].snap);
    free(res);
    model_free(m);
    if (strcmp(dir, o.model)) {
        char cmd[600];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd) != 0) fprintf(stderr, "decode_bench: could not remove %s\n", dir);
    }
    return 0;
}
