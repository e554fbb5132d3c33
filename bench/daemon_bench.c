/* bench/daemon_bench.c — `lind serve` under load, through the socket.
 *
 * For 1, 8, 64 and 256 sessions streaming at once (one client connection,
 * every generate in flight together): aggregate tokens/s, per-token latency
 * p50/p99 (the gap between consecutive tokens of one stream as the client
 * sees them), and the ratio to the in-process batched step rate — the same
 * model stepping the same batch size with model_step + sampler_next in this
 * process, no daemon, no socket. The two sides alternate round by round
 * (which goes first alternates too), and the ratio is taken per round, so
 * each ratio compares two adjacent moments of the machine; the row gives
 * its median and range. Then the daemon's RSS, sampled from /proc while
 * one session streams 10^6 tokens.
 *
 * The model is models/default when present, else random weights of the
 * default model's configuration (4 layers, d_model 192, 6 heads x 32,
 * d_ff 768, linear/aft). Prints markdown. Not a test: the figures depend on
 * the machine and its load (client and daemon share the CPU here).
 *
 *   usage: daemon_bench [--lind PATH] [--model DIR] [--quick] [--rss-tokens N]
 *                       [--sessions N[,N...]] [--rounds N] [--tokens N]
 *     --lind        the lind binary (default: ../lind next to this program)
 *     --model       default: $MODEL, else models/default (as bench/run.sh)
 *     --quick       fewer tokens per session, 10^5 tokens for the RSS run
 *                   (also when BENCH_QUICK is set, as bench/run.sh does)
 *     --rss-tokens  length of the RSS run; 0 skips it
 *     --sessions    the session counts to measure (default 1,8,64,256);
 *                   given, the RSS run is skipped unless --rss-tokens is
 *     --rounds      rounds per row, each an in-process run and a daemon run
 *                   (default 3)
 *     --tokens      tokens per session (default: 40000/sessions, at least
 *                   300; --quick 8000/sessions, at least 50)
 *     --lind-b      a second lind binary, run in every round too (the three
 *                   runs' order rotating): an A/B of two builds in one run
 *     --serve-arg   one more argument for lind serve (repeatable) */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench/benchutil.h"
#include "client/lindclient.h"
#include "kernels/backend.h"
#include "kernels/clock.h"
#include "recurrent/model.h"
#include "recurrent/sampler.h"
#include "tests/testmodel.h"

static char workdir[256], model_dir[512], sock_path[300], db_path[300], lind_bin[512], lind_b[512];
static const char *daemon_bin = lind_bin;   /* the binary start_daemon runs */
static char wal_path[320], shm_path[320], reserve_path[320], model_cfg[560], model_st[560];
static int quick;
/* The CPU backend's options: main reads them from the environment
 * (LIND_CPU_THREADS, LIND_CPU_GEMM; backend_opts_from_env). */
static backend_opts bench_be;
static const char *serve_args[16];   /* --serve-arg: appended to lind serve's arguments */
static int nserve_args;
static volatile sig_atomic_t daemon_pid;   /* the running lind serve, 0 if none */

/* Stop the daemon if one runs and remove everything this program created:
 * the database, its WAL files, the socket, the random model. Only
 * async-signal-safe calls, so the signal handler can use it too. */
static void cleanup(void)
{
    pid_t pid = (pid_t)daemon_pid;
    if (pid > 0) {
        int st;
        kill(pid, SIGTERM);
        waitpid(pid, &st, 0);
        daemon_pid = 0;
    }
    if (!workdir[0]) return;
    const char *files[] = {db_path, wal_path, shm_path, reserve_path, sock_path, model_cfg, model_st};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++)
        if (files[i][0]) unlink(files[i]);
    if (model_cfg[0]) rmdir(model_dir);
    rmdir(workdir);
}

/* Ctrl-C or a kill: no daemon or scratch files left behind. */
static void on_signal(int sig)
{
    cleanup();
    signal(sig, SIG_DFL);
    raise(sig);
}

static void die(const char *what, const char *why)
{
    fprintf(stderr, "daemon_bench: %s: %s\n", what, why);
    cleanup();
    exit(1);
}

static pid_t start_daemon(const char *max_tokens)
{
    unlink(db_path);
    unlink(wal_path);
    pid_t pid = fork();
    if (pid == 0) {
        const char *argv0[64] = {
            daemon_bin, "serve", "--model", model_dir, "--socket", sock_path, "--db", db_path, "--backend", "cpu",
            "--max-batch", "256", "--max-resident", "512", "--max-tokens", max_tokens,
            "--log-level", "warn" };   /* no line per turn */
        int n = 0;
        while (argv0[n]) n++;
        for (int k = 0; k < nserve_args && n < 63; k++) argv0[n++] = serve_args[k];   /* --serve-arg */
        argv0[n] = NULL;
        execv(daemon_bin, (char *const *)argv0);
        _exit(127);
    }
    if (pid < 0) die("fork", strerror(errno));
    daemon_pid = pid;
    for (int i = 0; i < 3000; i++) {
        lindc *c;
        if (lindc_connect(&c, sock_path, NULL, 0) == 0) { lindc_free(c); return pid; }
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) die("lind serve", "exited at start");
        usleep(10000);
    }
    die("lind serve", "did not start");
    return -1;
}

static void stop_daemon(pid_t pid)
{
    kill(pid, SIGTERM);
    int st;
    waitpid(pid, &st, 0);
    daemon_pid = 0;
}

static long rss_kib(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    long kib = -1;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6)) { kib = strtol(line + 6, NULL, 10); break; }
    fclose(f);
    return kib;
}

static int cmpd(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* In-process: S sessions stepping together, logits on, one sample each,
 * `per` steps after a few unmeasured ones (at least 20): the tokens a
 * daemon run makes, so both sides cover about the same time. */
static double inproc_cpu_per_token;   /* inproc_rate's CPU seconds per token */

static double inproc_rate(int S, int per)
{
    model *m;
    char err[256];
    model_opts mo = {.backend = "cpu", .be = &bench_be};
    if (model_load_opts(model_dir, &mo, &m, err, sizeof err) != 0) die("model_load", err);
    model_slots_reserve(m, S);
    int V = model_vocab(m);
    int *slots = malloc(sizeof(int) * (size_t)S), *toks = malloc(sizeof(int) * (size_t)S);
    float *logits = malloc(sizeof(float) * (size_t)V * (size_t)S), *scratch = malloc(sizeof(float) * 2 * (size_t)V);
    sampler *sm = malloc(sizeof(sampler) * (size_t)S);
    sampler_params p = sampler_defaults();
    for (int b = 0; b < S; b++) {
        slots[b] = b;
        toks[b] = LIND_BOS;
        model_slot_reset(m, b);
        p.seed = (uint64_t)b;
        sampler_init(&sm[b], &p);
    }
    double t0 = 0, c0 = 0;
    long steps = 0;
    for (int k = 0;; k++) {
        if (k == 5) { t0 = clock_mono_s(); c0 = bench_self_cpu_s(); }   /* a few warm-up steps */
        model_step(m, slots, toks, S, logits);
        for (int b = 0; b < S; b++) {
            toks[b] = sampler_next(&sm[b], logits + (size_t)b * (size_t)V, V, scratch);
            sampler_observe(&sm[b], toks[b]);
        }
        if (k >= 5 && ++steps >= (per > 20 ? per : 20)) break;
    }
    double rate = (double)S * (double)steps / (clock_mono_s() - t0);
    inproc_cpu_per_token = (bench_self_cpu_s() - c0) / ((double)S * (double)steps);
    free(slots); free(toks); free(logits); free(scratch); free(sm);
    model_free(m);
    return rate;
}

typedef struct run_result { double tok_s, p50_ms, p99_ms, wall_s, batch, first_s, last_s, daemon_cpu, client_cpu; long tokens; } run_result;

/* The daemon's steps and tokens_out so far (`stats`), and its steps by
 * batch size on stderr. */
static void daemon_counts(lindc *c, uint64_t *steps, uint64_t *outs, int show_hist)
{
    lindc_req sr;
    lindc_req_init(&sr, "stats");
    lindc_event sev;
    if (lindc_call(c, &sr, &sev, 10000) != 0 || lindc_get_u64(sev.map, "steps", steps) != 0 ||
        lindc_get_u64(sev.map, "tokens_out", outs) != 0)
        die("stats", "no steps/tokens_out in the answer");
    lindc_req_free(&sr);
    const msgpack_object *h = lindc_get(sev.map, "batch_hist");
    if (show_hist && h && h->type == MSGPACK_OBJECT_MAP) {
        char line[512];
        size_t n = 0;
        for (uint32_t i = 0; i < h->via.map.size && n < sizeof line - 64; i++) {
            const msgpack_object_kv *kv = &h->via.map.ptr[i];
            n += (size_t)snprintf(line + n, sizeof line - n, " %.*s:%llu", (int)kv->key.via.str.size,
                                  kv->key.via.str.ptr, (unsigned long long)kv->val.via.u64);
        }
        fprintf(stderr, "daemon_bench: steps by batch since start:%s\n", line);
    }
}

/* S fresh sessions (named PREFIX-i), each generating `per` tokens from
 * "The ", all in flight at once on c. Fills tokens, wall_s, tok_s, the
 * latencies and the times of the first and last tokens. */
static void streams(lindc *c, int S, int per, const char *prefix, run_result *r)
{
    uint64_t *ids = malloc(sizeof(uint64_t) * (size_t)S);
    /* Per-token latency: the time over the last GAP_WINDOW tokens of a
     * stream divided by GAP_WINDOW. Tokens reach the client in bursts (one
     * read can carry several rounds), so single gaps are mostly 0 or a
     * burst; the window averages that out without hiding stalls. */
    enum { GAP_WINDOW = 8 };
    double *last = calloc((size_t)S * GAP_WINDOW, sizeof(double));
    long *seen = calloc((size_t)S, sizeof(long));
    size_t cap = (size_t)S * (size_t)per, ngaps = 0;
    double *gaps = malloc(sizeof(double) * cap);
    double t0 = clock_mono_s();
    for (int i = 0; i < S; i++) {
        char name[48];
        snprintf(name, sizeof name, "%s-%d", prefix, i);
        lindc_gen_opts o;
        lindc_gen_opts_init(&o);
        o.session = name;
        o.text = "The ";
        o.text_len = 4;
        o.max_tokens = per;
        o.has_seed = 1;
        o.seed = (uint64_t)i;
        if (lindc_generate(c, &o, &ids[i]) != 0) die("generate", "send failed");
    }
    uint64_t first = ids[0];
    int done = 0;
    while (done < S) {
        lindc_event ev;
        int rc = lindc_next(c, &ev, 60000);
        if (rc != 0) die("events", lindc_strerror(rc));
        int i = (int)(ev.id - first);
        if (i < 0 || i >= S) continue;
        double t = clock_mono_s();
        if (ev.kind == LINDC_EV_TOKEN) {
            if (!r->tokens) r->first_s = t - t0;
            r->last_s = t - t0;
            double *ring = last + (size_t)i * GAP_WINDOW;
            long k = seen[i]++;
            if (k >= GAP_WINDOW && ngaps < cap)
                gaps[ngaps++] = (t - ring[k % GAP_WINDOW]) * 1e3 / GAP_WINDOW;
            ring[k % GAP_WINDOW] = t;
            r->tokens++;   /* one event per token (a token of a BPE model may hold several bytes, or none) */
        } else if (ev.final) {
            if (ev.kind != LINDC_EV_DONE) die("generate", ev.message);
            done++;
        }
    }
    r->wall_s = clock_mono_s() - t0;
    r->tok_s = (double)r->tokens / r->wall_s;
    qsort(gaps, ngaps, sizeof *gaps, cmpd);
    if (ngaps) {
        r->p50_ms = gaps[(size_t)(0.50 * (double)(ngaps - 1))];
        r->p99_ms = gaps[(size_t)(0.99 * (double)(ngaps - 1))];
    }
    free(ids); free(last); free(seen); free(gaps);
}

/* A fresh daemon, warmed by S sessions of a few tokens (its first steps,
 * the CPU pool's first trials, the store's first transactions: the
 * in-process side skips its first steps too), then the measured run of S
 * other fresh sessions, each loaded, stepped and committed as any turn. */
static run_result daemon_run(int S, int per)
{
    run_result r = {0}, warm = {0};
    pid_t pid = start_daemon("1000000");
    lindc *c;
    char err[256];
    if (lindc_connect(&c, sock_path, err, sizeof err) != 0) die("connect", err);
    streams(c, S, 8, "warm", &warm);
    uint64_t st0, tk0, st1, tk1;
    daemon_counts(c, &st0, &tk0, 0);
    double dc0 = bench_proc_cpu_s((int)pid), cc0 = bench_self_cpu_s();
    streams(c, S, per, "bench", &r);
    r.daemon_cpu = bench_proc_cpu_s((int)pid) - dc0;
    r.client_cpu = bench_self_cpu_s() - cc0;
    daemon_counts(c, &st1, &tk1, 1);
    /* The mean batch the daemon stepped: sessions that start or end apart
     * run smaller batches. */
    r.batch = st1 > st0 ? (double)(tk1 - tk0) / (double)(st1 - st0) : 0;
    lindc_free(c);
    stop_daemon(pid);
    return r;
}

static void rss_run(long ntok)
{
    char mt[32];
    snprintf(mt, sizeof mt, "%ld", ntok);
    pid_t pid = start_daemon(mt);
    lindc *c;
    char err[256];
    if (lindc_connect(&c, sock_path, err, sizeof err) != 0) die("connect", err);
    lindc_gen_opts o;
    lindc_gen_opts_init(&o);
    o.session = "long";
    o.text = "In the beginning ";
    o.text_len = strlen(o.text);
    o.max_tokens = ntok;
    o.has_seed = 1;
    o.seed = 1;
    uint64_t id;
    if (lindc_generate(c, &o, &id) != 0) die("generate", "send failed");
    long got = 0, next_mark = 0, base = -1, maxr = 0, minr = 1L << 40;
    double t0 = clock_mono_s();
    printf("| tokens streamed | daemon RSS (KiB) | elapsed s |\n|---:|---:|---:|\n");
    for (;;) {
        lindc_event ev;
        int rc = lindc_wait(c, id, &ev, 60000);
        if (rc != 0) die("events", lindc_strerror(rc));
        if (ev.kind == LINDC_EV_TOKEN) got++;
        if (got >= next_mark || ev.final) {
            long kib = rss_kib(pid);
            printf("| %ld | %ld | %.1f |\n", got, kib, clock_mono_s() - t0);
            fflush(stdout);
            if (got >= ntok / 10) {   /* after warm-up: buffers at their working size */
                if (base < 0) base = kib;
                if (kib > maxr) maxr = kib;
                if (kib < minr) minr = kib;
            }
            next_mark += ntok / 10;
        }
        if (ev.final) {
            if (ev.kind != LINDC_EV_DONE) die("long generate", ev.message);
            break;
        }
    }
    printf("\nRSS from 10%% to 100%% of the stream: min %ld KiB, max %ld KiB (spread %ld KiB) "
           "over %ld tokens in %.1f s (%.0f tokens/s).\n\n",
           minr, maxr, maxr - minr, got, clock_mono_s() - t0, (double)got / (clock_mono_s() - t0));
    lindc_free(c);
    stop_daemon(pid);
}

int main(int argc, char **argv)
{
    long rss_tokens = 1000000;
    const char *model_arg = NULL;
    int sizes[16] = { 1, 8, 64, 256 }, nsizes = 4, sizes_set = 0, rss_set = 0, rounds = 3, tokens = 0;
    snprintf(lind_bin, sizeof lind_bin, "%s", argv[0]);
    char *slash = strrchr(lind_bin, '/');
    if (slash) snprintf(slash, sizeof lind_bin - (size_t)(slash - lind_bin), "/../lind");
    else snprintf(lind_bin, sizeof lind_bin, "build/lind");
    const char *bq = getenv("BENCH_QUICK"), *env_model = getenv("MODEL");
    if (bq && *bq) { quick = 1; rss_tokens = 100000; }
    {
        char eerr[256];
        if (backend_opts_from_env(&bench_be, eerr, sizeof eerr) < 0) die("environment", eerr);
    }
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) { quick = 1; rss_tokens = 100000; }
        else if (!strcmp(argv[i], "--lind") && i + 1 < argc) snprintf(lind_bin, sizeof lind_bin, "%s", argv[++i]);
        else if (!strcmp(argv[i], "--lind-b") && i + 1 < argc) snprintf(lind_b, sizeof lind_b, "%s", argv[++i]);
        else if (!strcmp(argv[i], "--model") && i + 1 < argc) model_arg = argv[++i];
        else if (!strcmp(argv[i], "--rss-tokens") && i + 1 < argc) { rss_tokens = atol(argv[++i]); rss_set = 1; }
        else if (!strcmp(argv[i], "--sessions") && i + 1 < argc && (nsizes = bench_parse_list(argv[++i], sizes, 16)) > 0) sizes_set = 1;
        else if (!strcmp(argv[i], "--serve-arg") && i + 1 < argc && nserve_args < 16)
            serve_args[nserve_args++] = argv[++i];
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc && (rounds = atoi(argv[++i])) >= 1 && rounds <= 99) {}
        else if (!strcmp(argv[i], "--tokens") && i + 1 < argc && (tokens = atoi(argv[++i])) >= 1) {}
        else {
            fprintf(stderr, "usage: daemon_bench [--lind PATH] [--model DIR] [--quick] [--rss-tokens N] "
                    "[--sessions N[,N...]] [--rounds N] [--tokens N]\n");
            return 2;
        }
    }
    if (sizes_set && !rss_set) rss_tokens = 0;
    snprintf(workdir, sizeof workdir, "/tmp/lind-daemon-bench-XXXXXX");
    if (!mkdtemp(workdir)) die("mkdtemp", strerror(errno));
    snprintf(sock_path, sizeof sock_path, "%s/lind.sock", workdir);
    snprintf(db_path, sizeof db_path, "%s/lind.db", workdir);
    snprintf(wal_path, sizeof wal_path, "%s-wal", db_path);
    snprintf(shm_path, sizeof shm_path, "%s-shm", db_path);
    snprintf(reserve_path, sizeof reserve_path, "%s-reserve", db_path);   /* the daemon's disk reserve */
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGHUP, on_signal);
    struct stat st;
    const char *label = "models/default";
    char probe[600];
    snprintf(probe, sizeof probe, "%s/model.safetensors", env_model ? env_model : "");
    if (model_arg) {
        snprintf(model_dir, sizeof model_dir, "%s", model_arg);
        label = model_arg;
    } else if (env_model && *env_model && stat(probe, &st) == 0) {
        snprintf(model_dir, sizeof model_dir, "%s", env_model);
        label = env_model;
    } else if (stat("models/default/model.safetensors", &st) == 0) {
        snprintf(model_dir, sizeof model_dir, "models/default");
    } else {
        snprintf(model_dir, sizeof model_dir, "%s/model", workdir);
        snprintf(model_cfg, sizeof model_cfg, "%s/config.json", model_dir);
        snprintf(model_st, sizeof model_st, "%s/model.safetensors", model_dir);
        testmodel_cfg cfg = testmodel_config(192, 4, 6, 32, 768, "linear,aft", 1, "decay");
        if (testmodel_write(model_dir, &cfg, 7, NULL) != 0) die("testmodel_write", model_dir);
        label = "random weights, default configuration (4 x 192, d_ff 768)";
    }
    struct utsname u;
    uname(&u);
    printf("# lind serve under load\n\nModel: %s. Machine: %s %s, %ld CPUs. Daemon: %s, "
           "--max-batch 256, durability full. One client connection; every stream in flight "
           "at once.\n\n", label, u.sysname, u.machine, sysconf(_SC_NPROCESSORS_ONLN), lind_bin);
    time_t now = time(NULL);
    char when[64];
    strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", gmtime(&now));
    printf("Run: %s, %d rounds a row. Each round: one in-process run and one daemon run, one "
           "after the other (which goes first alternates from round to round), each making the "
           "row's tokens per session (the in-process one after 5 unmeasured steps, the daemon "
           "after a warm-up of 8 tokens in as many other sessions); the "
           "ratio is the daemon's tokens/s over the in-process rate of the same round. Each "
           "figure: the median over the rounds (range lowest-highest). Latency and mean batch: "
           "the daemon run with the median tokens/s; latency is the client-side time per token "
           "over a sliding window of %d tokens of one stream. CPU: user + system seconds over the "
           "measured part, of the in-process run (this program, all threads), of the daemon (all "
           "threads, /proc) and of the client, per 1000 tokens; medians. The client (this program: "
           "one connection, a msgpack decode per token) shares the machine with the daemon.\n\n",
           when, rounds, 8);
    if (lind_b[0])
        printf("A/B: every round also runs daemon B, %s; the three runs of a round go in an order "
               "that rotates from round to round. B/A: B's tokens/s over A's in the same round.\n\n", lind_b);
    printf("| sessions | tokens/session | daemon tokens/s | per-token latency p50 ms | p99 ms "
           "| daemon mean batch | in-process step rate tokens/s | daemon/in-process | CPU ms per 1000 "
           "tokens: in-process / daemon / client |%s\n"
           "|---:|---:|---:|---:|---:|---:|---:|---:|---:|%s\n",
           lind_b[0] ? " B tokens/s | B mean batch | B/in-process | B/A |" : "",
           lind_b[0] ? "---:|---:|---:|---:|" : "");
    for (int k = 0; k < nsizes; k++) {
        int S = sizes[k];
        int per = tokens ? tokens : (quick ? 8000 : 40000) / S;
        if (!tokens && per < (quick ? 50 : 300)) per = quick ? 50 : 300;   /* start-up and final commits stay small beside the stream */
        double *ipv = malloc(sizeof(double) * (size_t)rounds * 9), *dv = ipv + rounds, *ratio = dv + rounds;
        double *bv = ratio + rounds, *bratio = bv + rounds, *ab = bratio + rounds;
        double *ipc = ab + rounds, *dcpu = ipc + rounds, *ccpu = dcpu + rounds;   /* CPU ms per 1000 tokens */
        run_result *rv = malloc(sizeof(run_result) * (size_t)rounds * 2), *rb = rv + rounds;
        int nruns = lind_b[0] ? 3 : 2;
        for (int rep = 0; rep < rounds; rep++) {
            for (int j = 0; j < nruns; j++) {
                int which = (j + rep) % nruns;   /* 0 in-process, 1 daemon A, 2 daemon B */
                if (which == 0) { ipv[rep] = inproc_rate(S, per); ipc[rep] = 1e6 * inproc_cpu_per_token; }
                else if (which == 1) { daemon_bin = lind_bin; rv[rep] = daemon_run(S, per); }
                else { daemon_bin = lind_b; rb[rep] = daemon_run(S, per); }
            }
            dv[rep] = rv[rep].tok_s;
            ratio[rep] = rv[rep].tok_s / ipv[rep];
            dcpu[rep] = 1e6 * rv[rep].daemon_cpu / (double)rv[rep].tokens;
            ccpu[rep] = 1e6 * rv[rep].client_cpu / (double)rv[rep].tokens;
            fprintf(stderr, "daemon_bench: %d sessions round %d: in-process %.0f, daemon %.0f tokens/s (%.1f%%), "
                    "mean batch %.1f; first token %.3f s, last %.3f s, last done %.3f s; CPU ms per 1000 tokens: "
                    "in-process %.1f, daemon %.1f, client %.1f\n", S, rep + 1, ipv[rep], rv[rep].tok_s,
                    100.0 * ratio[rep], rv[rep].batch, rv[rep].first_s, rv[rep].last_s, rv[rep].wall_s, ipc[rep],
                    dcpu[rep], ccpu[rep]);
            if (nruns == 3) {
                bv[rep] = rb[rep].tok_s;
                bratio[rep] = rb[rep].tok_s / ipv[rep];
                ab[rep] = rb[rep].tok_s / rv[rep].tok_s;
                fprintf(stderr, "daemon_bench: %d sessions round %d: daemon B %.0f tokens/s (%.1f%%), mean batch %.1f; "
                        "first token %.3f s, last %.3f s, last done %.3f s\n", S, rep + 1, rb[rep].tok_s,
                        100.0 * bratio[rep], rb[rep].batch, rb[rep].first_s, rb[rep].last_s, rb[rep].wall_s);
            }
        }
        double ipm, ipl, iph, dm, dl, dh, rm, rl, rh;
        bench_med_range(ipv, rounds, &ipm, &ipl, &iph);
        bench_med_range(dv, rounds, &dm, &dl, &dh);
        bench_med_range(ratio, rounds, &rm, &rl, &rh);
        int mi = 0;   /* the daemon run nearest the median, for its latencies */
        for (int rep = 1; rep < rounds; rep++)
            if (fabs(rv[rep].tok_s - dm) < fabs(rv[mi].tok_s - dm)) mi = rep;
        double icm, dcm, ccm, lo, hi;
        bench_med_range(ipc, rounds, &icm, &lo, &hi);
        bench_med_range(dcpu, rounds, &dcm, &lo, &hi);
        bench_med_range(ccpu, rounds, &ccm, &lo, &hi);
        printf("| %d | %d | %.0f (%.0f-%.0f) | %.3f | %.3f | %.1f | %.0f (%.0f-%.0f) | %.1f%% (%.1f-%.1f%%) "
               "| %.1f / %.1f / %.1f |", S, per, dm, dl, dh, rv[mi].p50_ms, rv[mi].p99_ms, rv[mi].batch, ipm, ipl,
               iph, 100.0 * rm, 100.0 * rl, 100.0 * rh, icm, dcm, ccm);
        if (nruns == 3) {
            double bm, bl, bh, brm, brl, brh, am, al, ah;
            bench_med_range(bv, rounds, &bm, &bl, &bh);
            bench_med_range(bratio, rounds, &brm, &brl, &brh);
            bench_med_range(ab, rounds, &am, &al, &ah);
            int bi = 0;
            for (int rep = 1; rep < rounds; rep++)
                if (fabs(rb[rep].tok_s - bm) < fabs(rb[bi].tok_s - bm)) bi = rep;
            printf(" %.0f (%.0f-%.0f) | %.1f | %.1f%% (%.1f-%.1f%%) | %.1f%% (%.1f-%.1f%%) |", bm, bl, bh, rb[bi].batch,
                   100.0 * brm, 100.0 * brl, 100.0 * brh, 100.0 * am, 100.0 * al, 100.0 * ah);
        }
        printf("\n");
        fflush(stdout);
        free(ipv);
        free(rv);
    }
    if (rss_tokens > 0) {
        printf("\n## RSS while one session streams %ld tokens\n\n", rss_tokens);
        rss_run(rss_tokens);
    }
    cleanup();
    if (access(workdir, F_OK) == 0) fprintf(stderr, "daemon_bench: could not remove %s\n", workdir);
    return 0;
}
