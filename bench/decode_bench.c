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
 * --threads sets LIND_CPU_THREADS for the backend (default: its own rule)
 * and the baseline's attention threads alike. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/benchutil.h"
#include "bench/softmax_baseline.h"
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
} opts;

typedef struct result {
    long n;
    double rec_us, rec_mean_us, sm_us;   /* sm_us < 0: not run */
    int rec_steps, sm_steps;
    size_t rec_bytes, sm_bytes;
    const char *sm_note;                 /* how the position was reached, or why not run */
    char sm_note_buf[160];
} result;

static void die(const char *what, const char *why) {
    fprintf(stderr, "decode_bench: %s: %s\n", what, why);
    exit(1);
}

static int parse_positions(const char *s, opts *o) {
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
 * that consumed the token at position t (t = 0 is BOS). */
static void run_recurrent(model *m, long steps, float *times) {
    int slot = 0, tok = LIND_BOS;
    float logits[LIND_VOCAB], scratch[2 * LIND_VOCAB];
    sampler_params sp = sampler_defaults();
    sp.seed = 1;
    sampler smp;
    sampler_init(&smp, &sp);
    if (model_slots_reserve(m, 1) < 0 || model_slot_reset(m, 0) < 0) die("recurrent", "no slot");
    double start = bench_now(), next_report = start + 10;
    for (long t = 0; t < steps; t++) {
        double t0 = bench_now();
        if (model_step(m, &slot, &tok, 1, logits) < 0) die("recurrent", "model_step failed");
        double t1 = bench_now();
        times[t] = (float)(t1 - t0);
        tok = sampler_next(&smp, logits, LIND_VOCAB, scratch);
        sampler_observe(&smp, tok);
        if (t1 > next_report) {
            fprintf(stderr, "decode_bench: recurrent at position %ld of %ld (%.0f s, %.1f us/token so far)\n", t + 1,
                    steps, t1 - start, (t1 - start) / (double)(t + 1) * 1e6);
            next_report = t1 + 10;
        }
    }
}

/* Median and mean of times[a, b) in µs. */
static double window_us(const float *times, long a, long b, double *mean) {
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
    float logits[LIND_VOCAB], scratch[2 * LIND_VOCAB];
} sm_run;

/* One timed decode step: feed the pending token, sample the next. */
static double sm_step(sm_run *r) {
    double t0 = bench_now();
    if (smax_step(r->s, r->tok, r->logits) < 0) die("softmax", "smax_step failed");
    double dt = bench_now() - t0;
    r->tok = sampler_next(&r->smp, r->logits, LIND_VOCAB, r->scratch);
    sampler_observe(&r->smp, r->tok);
    return dt;
}

/* W timed steps from the current position (at least 3, fewer than W once
 * `budget` seconds are spent); median µs, count in *steps. */
static double sm_measure(sm_run *r, long W, double budget, int *steps) {
    double *v = malloc(sizeof(double) * (size_t)W), start = bench_now();
    if (!v) die("softmax", "out of memory");
    long k = 0;
    while (k < W && (k < 3 || bench_now() - start < budget)) v[k++] = sm_step(r);
    *steps = (int)k;
    double med = bench_median(v, (size_t)k) * 1e6;
    free(v);
    return med;
}

static void run_softmax(const opts *o, result *res, int nres, const char *dir) {
    char err[512];
    sm_run r = {.tok = LIND_BOS};
    if (smax_load(dir, o->threads, &r.s, err, sizeof err) < 0) die("softmax baseline", err);
    sampler_params sp = sampler_defaults();
    sp.seed = 1;
    sampler_init(&r.smp, &sp);
    long W = o->window, P = o->prefix;
    if (P > res[nres - 1].n) P = res[nres - 1].n;
    size_t avail = bench_mem_available(), limit = (size_t)(o->mem_limit_gib * (double)(1ull << 30));
    /* The real prefix: every position up to P + W stepped from BOS. */
    if (smax_reserve(r.s, P + W) < 0) die("softmax", "out of memory for the prefix cache");
    smax_reset(r.s);
    double *pt = malloc(sizeof(double) * (size_t)(P + W));
    if (!pt) die("softmax", "out of memory");
    for (long t = 0; t < P + W; t++) pt[t] = sm_step(&r);
    for (int i = 0; i < nres; i++) {
        result *x = &res[i];
        x->sm_bytes = smax_session_bytes(r.s, x->n);
        if (x->n <= P) {
            double *w = malloc(sizeof(double) * (size_t)W);
            if (!w) die("softmax", "out of memory");
            memcpy(w, pt + x->n, sizeof(double) * (size_t)W);
            x->sm_us = bench_median(w, (size_t)W) * 1e6;
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
        double f0 = bench_now();
        smax_set_position(r.s, x->n);
        double fill = bench_now() - f0;
        x->sm_us = sm_measure(&r, W, 5.0, &x->sm_steps);
        snprintf(x->sm_note_buf, sizeof x->sm_note_buf,
                 "rows %ld..%ld filled from the %ld stepped ones (%.1f s)", P + W, x->n - 1, P + W, fill);
        x->sm_note = x->sm_note_buf;
        fprintf(stderr, "decode_bench: softmax at %ld: %.1f us/token over %d steps\n", x->n, x->sm_us, x->sm_steps);
    }
    free(pt);
    smax_free(r.s);
}

/* tools/train.py's default configuration: what models/default holds. */
static lind_config fallback_config(void) {
    return testmodel_config(192, 4, 6, 32, 768, "linear,aft", 1, "decay");
}

/* ---- main ------------------------------------------------------------------------ */

static void usage(void) {
    fprintf(stderr, "usage: decode_bench [--model DIR] [--positions N,N,...] [--advance-max N] [--window W]\n"
                    "                    [--prefix P] [--mem-limit-gib G] [--threads T] [--data FILE] [--stream FILE]\n"
                    "                    [--quick]\n");
    exit(2);
}

int main(int argc, char **argv) {
    opts o = {.model = "models/default", .advance_max = 1000000, .window = 256, .prefix = 2048,
              .mem_limit_gib = 16};
    const char *positions = NULL;
    /* --write-model DIR: write the fallback model (random weights, default
     * configuration) for bench/run.sh's other benchmarks, and exit. */
    if (argc == 3 && !strcmp(argv[1], "--write-model")) {
        lind_config c = fallback_config();
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
            setenv("LIND_CPU_THREADS", v, 1);   /* the CPU backend reads it when it starts */
        } else usage();
    }
    /* Both models use the CPU backend's thread count (its rule: the
     * environment's LIND_CPU_THREADS, else every online CPU). */
    if (!o.threads) {
        const char *env = getenv("LIND_CPU_THREADS");
        o.threads = env && *env ? atoi(env) : (int)sysconf(_SC_NPROCESSORS_ONLN);
        if (o.threads < 1) o.threads = 1;
        if (o.threads > 64) o.threads = 64;
    }
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
        lind_config c = fallback_config();
        if (testmodel_write(dir, &c, 1, NULL) < 0) die("testmodel_write", dir);
        snprintf(label, sizeof label,
                 "random weights in tools/train.py's default configuration (%s has no model.safetensors)", o.model);
    }
    model *m = NULL;
    if (model_load(dir, "cpu", &m, err, sizeof err) < 0) die("model_load", err);
    const lind_config *c = model_config(m);
    printf("Model: %s: d_model %d, %d layers (", label, c->d_model, c->n_layers);
    for (int i = 0; i < c->n_layers; i++) printf("%s%s", i ? "," : "", c->mixers[i]);
    printf("), %d heads x %d, d_ff %d, %zu parameters. Backend %s (%s), batch 1; the softmax attention's heads "
           "run on %d threads.\n\n", c->n_heads, c->d_head, c->d_ff, model_param_count(m), model_backend_name(m),
           model_device_name(m), o.threads);

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
        res[i].rec_us = -1;
        if (o.pos[i] <= o.advance_max) rec_end = o.pos[i] + W;
    }

    float *times = NULL;
    double rec_total = 0;
    if (rec_end) {
        times = malloc(sizeof(float) * (size_t)rec_end);
        if (!times) die("recurrent", "out of memory for step times");
        double t0 = bench_now();
        run_recurrent(m, rec_end, times);
        rec_total = bench_now() - t0;
        for (int i = 0; i < nres; i++)
            if (res[i].n + W <= rec_end) {
                res[i].rec_us = window_us(times, res[i].n, res[i].n + W, &res[i].rec_mean_us);
                res[i].rec_steps = (int)W;
            }
    }
    run_softmax(&o, res, nres, dir);

    printf("### Per-token decode time and memory per session\n\n");
    printf("Median of the timed steps after position N (the W = %ld steps after N; fewer for softmax at very "
           "long N, see the last column).\n\n", W);
    printf("| position N | recurrent us/token | recurrent bytes/session | softmax us/token | softmax KV bytes/session |"
           " softmax / recurrent | softmax: how N was reached |\n|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < nres; i++) {
        result *x = &res[i];
        char rec[80], sm[48], ratio[32];
        if (x->rec_us >= 0) snprintf(rec, sizeof rec, "%.1f", x->rec_us);
        else snprintf(rec, sizeof rec, "not run (stepping capped at %ld)", o.advance_max);
        if (x->sm_us >= 0) snprintf(sm, sizeof sm, "%.1f (%d steps)", x->sm_us, x->sm_steps);
        else snprintf(sm, sizeof sm, "out of memory");
        if (x->sm_us >= 0 && x->rec_us > 0) snprintf(ratio, sizeof ratio, "%.2fx", x->sm_us / x->rec_us);
        else snprintf(ratio, sizeof ratio, "-");
        printf("| %ld | %s | %zu | %s | %zu | %s | %s |\n", x->n, rec, x->rec_bytes, sm, x->sm_bytes, ratio,
               x->sm_note);
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
            if (res[i].n == pn[k] && res[i].sm_us >= 0 && res[i].rec_us > 0)
                snprintf(meas, sizeof meas, "%.2fx", res[i].sm_us / res[i].rec_us);
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
        fprintf(f, "# N recurrent_us softmax_us recurrent_bytes softmax_bytes (NaN: not run)\n");
        for (int i = 0; i < nres; i++)
            fprintf(f, "%ld %.3f %.3f %zu %zu\n", res[i].n, res[i].rec_us >= 0 ? res[i].rec_us : NAN,
                    res[i].sm_us >= 0 ? res[i].sm_us : NAN, res[i].rec_bytes, res[i].sm_bytes);
        fclose(f);
    }
    free(times);
    free(res);
    model_free(m);
    if (strcmp(dir, o.model)) {
        char cmd[600];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd) != 0) fprintf(stderr, "decode_bench: could not remove %s\n", dir);
    }
    return 0;
}
