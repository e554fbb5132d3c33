/* bench/http_bench.c — the HTTP front door beside the msgpack socket, in
 * one run on one daemon.
 *
 * For 1, 8 and 64 streams at once: aggregate tokens/s and time to first
 * token (p50, p99 over the streams) through the msgpack socket (one client
 * connection, every generate in flight together, as daemon_bench) and
 * through HTTP (POST /v1/completions with stream:true, one connection per
 * stream, libcurl's multi interface, tokens counted from the answer's
 * usage), and the ratio HTTP/socket. Each stream starts a fresh session
 * with the same prompt, seed and length on both sides. Prints markdown.
 * Not a test: the figures depend on the machine and its load (clients and
 * daemon share the CPU here).
 *
 * The sides alternate round by round (which goes first alternates too) and
 * the ratio is taken per round, from two adjacent runs; a row gives the
 * median and range over the rounds.
 *
 *   usage: http_bench [--lind PATH] [--model DIR] [--quick] [--n-only]
 *                     [--streams N[,N...]] [--rounds N] [--tokens N]
 *     --lind    the lind binary (default: ../lind next to this program)
 *     --model   default: $MODEL when it has weights, else models/default
 *     --quick   fewer tokens per stream (also when BENCH_QUICK is set)
 *     --n-only  only the second table: n answers to one prompt by one request
 *               with `n` (one prefill, forked) against n separate requests
 *     --streams the stream counts to measure (default 1,8,64); given, the
 *               second table is skipped
 *     --rounds  rounds per row, each a socket run and an HTTP run (default 3)
 *     --tokens  tokens per stream (default 32000/streams, at least 300;
 *               --quick 4000/streams, at least 50) */
#include <curl/curl.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench/benchutil.h"
#include "client/lindclient.h"
#include "kernels/clock.h"

static char workdir[256], model_dir[512], sock_path[300], db_path[300], lind_bin[512];
static char wal_path[320], shm_path[320], reserve_path[320];
static int port;
static const char *serve_args[16];   /* --serve-arg: appended to lind serve's arguments */
static int nserve_args;
static volatile sig_atomic_t daemon_pid;

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
    const char *files[] = { db_path, wal_path, shm_path, reserve_path, sock_path };
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) unlink(files[i]);
    rmdir(workdir);
}

static void on_signal(int sig)
{
    cleanup();
    signal(sig, SIG_DFL);
    raise(sig);
}

static void die(const char *what, const char *why)
{
    fprintf(stderr, "http_bench: %s: %s\n", what, why);
    cleanup();
    exit(1);
}

/* A port nobody listens on now (the kernel's pick, released again). */
static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t len = sizeof sa;
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) || getsockname(fd, (struct sockaddr *)&sa, &len))
        die("free_port", strerror(errno));
    close(fd);
    return ntohs(sa.sin_port);
}

static void start_daemon(void)
{
    port = free_port();
    char http[16];
    snprintf(http, sizeof http, "%d", port);
    pid_t pid = fork();
    if (pid == 0) {
        const char *argv0[64] = {
            lind_bin, "serve", "--model", model_dir, "--socket", sock_path, "--db", db_path, "--backend", "cpu",
            "--max-batch", "256", "--max-resident", "512", "--max-tokens", "100000",
            "--log-level", "warn", "--http", http };
        int n = 0;
        while (argv0[n]) n++;
        for (int k = 0; k < nserve_args && n < 63; k++) argv0[n++] = serve_args[k];   /* --serve-arg */
        argv0[n] = NULL;
        execv(lind_bin, (char *const *)argv0);
        _exit(127);
    }
    if (pid < 0) die("fork", strerror(errno));
    daemon_pid = pid;
    for (int i = 0; i < 3000; i++) {
        lindc *c;
        if (lindc_connect(&c, sock_path, NULL, 0) == 0) { lindc_free(c); return; }
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) die("lind serve", "exited at start");
        usleep(10000);
    }
    die("lind serve", "did not start");
}

static int cmpd(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct hbuf_t { char *p; size_t n, cap; } hbuf_t;

typedef struct run_result { double tok_s, ttft_p50, ttft_p99, batch, wall, daemon_cpu, client_cpu; long tokens; } run_result;

/* The daemon's steps and tokens_out so far (from `stats`), so that each run
 * can report the mean batch it got: the model's cost per step is nearly
 * flat in the batch here, so a front door that starts or stops streams
 * unevenly loses throughput through smaller batches. */
static void daemon_counts(uint64_t *steps, uint64_t *tokens)
{
    lindc *c;
    char err[256];
    if (lindc_connect(&c, sock_path, err, sizeof err) != 0) die("connect", err);
    lindc_req r;
    lindc_req_init(&r, "stats");
    lindc_event ev;
    if (lindc_call(c, &r, &ev, 10000) != 0 || lindc_get_u64(ev.map, "steps", steps) != 0 ||
        lindc_get_u64(ev.map, "tokens_out", tokens) != 0)
        die("stats", "no steps/tokens_out in the answer");
    lindc_req_free(&r);
    lindc_free(c);
}

/* The daemon's input tokens fed so far (stats' tokens_in). */
static uint64_t daemon_fed(void)
{
    lindc *c;
    char err[256];
    uint64_t fed = 0;
    if (lindc_connect(&c, sock_path, err, sizeof err) != 0) die("connect", err);
    lindc_req r;
    lindc_req_init(&r, "stats");
    lindc_event ev;
    if (lindc_call(c, &r, &ev, 10000) != 0 || lindc_get_u64(ev.map, "tokens_in", &fed) != 0)
        die("stats", "no tokens_in in the answer");
    lindc_req_free(&r);
    lindc_free(c);
    return fed;
}

static void ttft_stats(run_result *r, double *ttft, int S)
{
    qsort(ttft, (size_t)S, sizeof *ttft, cmpd);
    r->ttft_p50 = ttft[(S - 1) / 2] * 1e3;
    r->ttft_p99 = ttft[(int)(0.99 * (S - 1))] * 1e3;
}

static long seq;   /* unique session names across runs */

static run_result socket_run(int S, int per)
{
    run_result r = { 0 };
    lindc *c;
    char err[256];
    if (lindc_connect(&c, sock_path, err, sizeof err) != 0) die("connect", err);
    uint64_t *ids = malloc(sizeof *ids * (size_t)S);
    double *ttft = calloc((size_t)S, sizeof *ttft);
    uint64_t st0, tk0, st1, tk1;
    daemon_counts(&st0, &tk0);
    double dc0 = bench_proc_cpu_s((int)daemon_pid), cc0 = bench_self_cpu_s();
    double t0 = clock_mono_s();
    for (int i = 0; i < S; i++) {
        char name[48];
        snprintf(name, sizeof name, "sock-%ld", ++seq);
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
    int done = 0;
    while (done < S) {
        lindc_event ev;
        int rc = lindc_next(c, &ev, 60000);
        if (rc != 0) die("events", lindc_strerror(rc));
        int i = (int)(ev.id - ids[0]);
        if (i < 0 || i >= S) continue;
        if (ev.kind == LINDC_EV_TOKEN) {
            if (!ttft[i]) ttft[i] = clock_mono_s() - t0;
            r.tokens++;
        } else if (ev.final) {
            if (ev.kind != LINDC_EV_DONE) die("generate", ev.message);
            done++;
        }
    }
    r.wall = clock_mono_s() - t0;
    r.daemon_cpu = bench_proc_cpu_s((int)daemon_pid) - dc0;
    r.client_cpu = bench_self_cpu_s() - cc0;
    r.tok_s = (double)r.tokens / r.wall;
    daemon_counts(&st1, &tk1);
    r.batch = st1 > st0 ? (double)(tk1 - tk0) / (double)(st1 - st0) : 0;
    ttft_stats(&r, ttft, S);
    lindc_free(c);
    free(ids);
    free(ttft);
    return r;
}

typedef struct stream {
    double t0, ttft;
    long tokens;      /* from the usage chunk */
    char tail[256];   /* the last bytes seen, for the usage figure */
    size_t tail_len;
    int text_seen;
} stream;

/* Body bytes of one SSE stream: the first `"text":"` with content is the
 * first token; completion_tokens comes in the usage chunk at the end. */
static size_t on_data(char *p, size_t sz, size_t n, void *arg)
{
    stream *s = arg;
    size_t len = sz * n;
    /* (a chunk's text may be empty: a token that ends inside a UTF-8 character) */
    for (const char *t = p; !s->text_seen && (t = memmem(t, len - (size_t)(t - p), "\"text\":\"", 8)); t += 8)
        if (t + 8 < p + len && t[8] != '"') { s->text_seen = 1; s->ttft = clock_mono_s() - s->t0; }
    /* keep the last bytes: the usage chunk is small and comes last */
    if (len >= sizeof s->tail) {
        memcpy(s->tail, p + len - (sizeof s->tail - 1), sizeof s->tail - 1);
        s->tail_len = sizeof s->tail - 1;
    } else {
        size_t keep = s->tail_len + len > sizeof s->tail - 1 ? sizeof s->tail - 1 - len : s->tail_len;
        memmove(s->tail, s->tail + s->tail_len - keep, keep);
        memcpy(s->tail + keep, p, len);
        s->tail_len = keep + len;
    }
    s->tail[s->tail_len] = 0;
    return len;
}

static run_result http_run(int S, int per)
{
    run_result r = { 0 };
    CURLM *multi = curl_multi_init();
    CURL **easy = calloc((size_t)S, sizeof *easy);
    stream *st = calloc((size_t)S, sizeof *st);
    char (*body)[160] = calloc((size_t)S, sizeof *body);
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/v1/completions", port);
    struct curl_slist *hdr = curl_slist_append(NULL, "Content-Type: application/json");
    uint64_t st0, tk0, st1, tk1;
    daemon_counts(&st0, &tk0);
    double dc0 = bench_proc_cpu_s((int)daemon_pid), cc0 = bench_self_cpu_s();
    double t0 = clock_mono_s();
    for (int i = 0; i < S; i++) {
        snprintf(body[i], sizeof body[i], "{\"prompt\":\"The \",\"max_tokens\":%d,\"seed\":%d,"
                 "\"stream\":true,\"stream_options\":{\"include_usage\":true}}", per, i);
        easy[i] = curl_easy_init();
        curl_easy_setopt(easy[i], CURLOPT_URL, url);
        curl_easy_setopt(easy[i], CURLOPT_POSTFIELDS, body[i]);
        curl_easy_setopt(easy[i], CURLOPT_HTTPHEADER, hdr);
        curl_easy_setopt(easy[i], CURLOPT_WRITEFUNCTION, on_data);
        curl_easy_setopt(easy[i], CURLOPT_WRITEDATA, &st[i]);
        curl_easy_setopt(easy[i], CURLOPT_TCP_NODELAY, 1L);
        st[i].t0 = t0;
        curl_multi_add_handle(multi, easy[i]);
    }
    int running = 1;
    while (running) {
        if (curl_multi_perform(multi, &running) != CURLM_OK) die("curl", "multi_perform failed");
        if (running) curl_multi_poll(multi, NULL, 0, 1000, NULL);
    }
    double wall = clock_mono_s() - t0;
    r.daemon_cpu = bench_proc_cpu_s((int)daemon_pid) - dc0;
    r.client_cpu = bench_self_cpu_s() - cc0;
    r.wall = wall;
    daemon_counts(&st1, &tk1);
    r.batch = st1 > st0 ? (double)(tk1 - tk0) / (double)(st1 - st0) : 0;
    CURLMsg *m;
    int left;
    while ((m = curl_multi_info_read(multi, &left)))
        if (m->msg == CURLMSG_DONE && m->data.result != CURLE_OK)
            die("curl", curl_easy_strerror(m->data.result));
    double *ttft = calloc((size_t)S, sizeof *ttft);
    for (int i = 0; i < S; i++) {
        long code = 0;
        curl_easy_getinfo(easy[i], CURLINFO_RESPONSE_CODE, &code);
        const char *u = strstr(st[i].tail, "\"completion_tokens\":");
        if (code != 200 || !u) die("http", st[i].tail);
        r.tokens += atol(u + 20);
        ttft[i] = st[i].ttft;
        curl_multi_remove_handle(multi, easy[i]);
        curl_easy_cleanup(easy[i]);
    }
    r.tok_s = (double)r.tokens / wall;
    ttft_stats(&r, ttft, S);
    curl_slist_free_all(hdr);
    curl_multi_cleanup(multi);
    free(easy); free(st); free(body); free(ttft);
    return r;
}

/* n answers to one prompt: one request with n (one prefill, the state
 * forked n ways) or n separate requests at once (n prefills), each a
 * non-streaming POST /v1/completions of a prompt of plen bytes. The wall
 * time until every answer is in, the tokens the model was fed, and the
 * tokens sampled. */
typedef struct n_result { double wall; uint64_t fed; long tokens; } n_result;

static size_t on_body(char *p, size_t sz, size_t n, void *arg)
{
    hbuf_t *b = arg;
    size_t len = sz * n;
    if (b->n + len + 1 > b->cap) {
        size_t nc = (b->n + len + 1) * 2;
        char *q = realloc(b->p, nc);
        if (!q) return 0;
        b->p = q;
        b->cap = nc;
    }
    memcpy(b->p + b->n, p, len);
    b->n += len;
    b->p[b->n] = 0;
    return len;
}

static n_result n_run(int n, int one_request, size_t plen, int max_tokens)
{
    n_result r = { 0 };
    int reqs = one_request ? 1 : n;
    char *prompt = malloc(plen + 1);
    for (size_t i = 0; i < plen; i++) prompt[i] = "In the beginning God created the heaven and the earth. "[i % 55];
    prompt[plen] = 0;
    size_t blen = plen + 200;
    char **body = calloc((size_t)reqs, sizeof *body);
    hbuf_t *out = calloc((size_t)reqs, sizeof *out);
    CURL **easy = calloc((size_t)reqs, sizeof *easy);
    CURLM *multi = curl_multi_init();
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/v1/completions", port);
    struct curl_slist *hdr = curl_slist_append(NULL, "Content-Type: application/json");
    uint64_t fed0 = daemon_fed();
    double t0 = clock_mono_s();
    for (int i = 0; i < reqs; i++) {
        body[i] = malloc(blen);
        snprintf(body[i], blen, "{\"prompt\":\"%s\",\"max_tokens\":%d,\"temperature\":1,\"seed\":%d,\"n\":%d}",
                 prompt, max_tokens, i, one_request ? n : 1);
        easy[i] = curl_easy_init();
        curl_easy_setopt(easy[i], CURLOPT_URL, url);
        curl_easy_setopt(easy[i], CURLOPT_POSTFIELDS, body[i]);
        curl_easy_setopt(easy[i], CURLOPT_HTTPHEADER, hdr);
        curl_easy_setopt(easy[i], CURLOPT_WRITEFUNCTION, on_body);
        curl_easy_setopt(easy[i], CURLOPT_WRITEDATA, &out[i]);
        curl_multi_add_handle(multi, easy[i]);
    }
    int running = 1;
    while (running) {
        if (curl_multi_perform(multi, &running) != CURLM_OK) die("curl", "multi_perform failed");
        if (running) curl_multi_poll(multi, NULL, 0, 1000, NULL);
    }
    r.wall = clock_mono_s() - t0;
    r.fed = daemon_fed() - fed0;
    for (int i = 0; i < reqs; i++) {
        long code = 0;
        curl_easy_getinfo(easy[i], CURLINFO_RESPONSE_CODE, &code);
        const char *u = out[i].p ? strstr(out[i].p, "\"completion_tokens\":") : NULL;
        if (code != 200 || !u) die("http", out[i].p ? out[i].p : "no answer");
        r.tokens += atol(u + 20);
        curl_multi_remove_handle(multi, easy[i]);
        curl_easy_cleanup(easy[i]);
        free(body[i]);
        free(out[i].p);
    }
    curl_slist_free_all(hdr);
    curl_multi_cleanup(multi);
    free(body); free(out); free(easy); free(prompt);
    return r;
}

static int cmp_wall(const void *a, const void *b)
{
    double x = ((const n_result *)a)->wall, y = ((const n_result *)b)->wall;
    return (x > y) - (x < y);
}

/* The run nearest the median tokens/s, for its other figures. */
static run_result median_run(const run_result *v, int n, double med)
{
    int mi = 0;
    for (int i = 1; i < n; i++)
        if (fabs(v[i].tok_s - med) < fabs(v[mi].tok_s - med)) mi = i;
    return v[mi];
}

int main(int argc, char **argv)
{
    int quick = 0, n_only = 0, sizes[16] = { 1, 8, 64 }, nsizes = 3, sizes_set = 0, rounds = 3, tokens = 0;
    const char *model_arg = NULL;
    snprintf(lind_bin, sizeof lind_bin, "%s", argv[0]);
    char *slash = strrchr(lind_bin, '/');
    if (slash) snprintf(slash, sizeof lind_bin - (size_t)(slash - lind_bin), "/../lind");
    else snprintf(lind_bin, sizeof lind_bin, "build/lind");
    const char *bq = getenv("BENCH_QUICK"), *env_model = getenv("MODEL");
    if (bq && *bq) quick = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--n-only")) n_only = 1;
        else if (!strcmp(argv[i], "--lind") && i + 1 < argc) snprintf(lind_bin, sizeof lind_bin, "%s", argv[++i]);
        else if (!strcmp(argv[i], "--model") && i + 1 < argc) model_arg = argv[++i];
        else if (!strcmp(argv[i], "--streams") && i + 1 < argc && (nsizes = bench_parse_list(argv[++i], sizes, 16)) > 0) sizes_set = 1;
        else if (!strcmp(argv[i], "--serve-arg") && i + 1 < argc && nserve_args < 16)
            serve_args[nserve_args++] = argv[++i];
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc && (rounds = atoi(argv[++i])) >= 1 && rounds <= 99) {}
        else if (!strcmp(argv[i], "--tokens") && i + 1 < argc && (tokens = atoi(argv[++i])) >= 1) {}
        else {
            fprintf(stderr, "usage: http_bench [--lind PATH] [--model DIR] [--quick] [--n-only] "
                    "[--streams N[,N...]] [--rounds N] [--tokens N]\n");
            return 2;
        }
    }
    struct stat sb;
    char probe[600];
    snprintf(probe, sizeof probe, "%s/model.safetensors", env_model ? env_model : "");
    if (model_arg) snprintf(model_dir, sizeof model_dir, "%s", model_arg);
    else if (env_model && *env_model && stat(probe, &sb) == 0) snprintf(model_dir, sizeof model_dir, "%s", env_model);
    else snprintf(model_dir, sizeof model_dir, "models/default");
    snprintf(probe, sizeof probe, "%s/model.safetensors", model_dir);
    if (stat(probe, &sb) != 0) die(model_dir, "no model.safetensors (http_bench needs a model with weights)");
    snprintf(workdir, sizeof workdir, "/tmp/lind-http-bench-XXXXXX");
    if (!mkdtemp(workdir)) die("mkdtemp", strerror(errno));
    snprintf(sock_path, sizeof sock_path, "%s/lind.sock", workdir);
    snprintf(db_path, sizeof db_path, "%s/lind.db", workdir);
    snprintf(wal_path, sizeof wal_path, "%s-wal", db_path);
    snprintf(shm_path, sizeof shm_path, "%s-shm", db_path);
    snprintf(reserve_path, sizeof reserve_path, "%s-reserve", db_path);   /* the daemon's disk reserve */
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGHUP, on_signal);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    start_daemon();
    struct utsname u;
    uname(&u);
    if (n_only) {
        printf("# n answers from one prefill\n\nModel: %s. Machine: %s %s, %ld CPUs. Daemon: %s.\n", model_dir,
               u.sysname, u.machine, sysconf(_SC_NPROCESSORS_ONLN), lind_bin);
    } else {
        printf("# HTTP front door beside the msgpack socket\n\nModel: %s. Machine: %s %s, %ld CPUs. "
               "Daemon: %s, --max-batch 256, durability full, one daemon for both sides. Socket: one "
               "connection, every generate in flight at once. HTTP: POST /v1/completions with "
               "stream:true, one connection per stream (libcurl multi). Every stream: a fresh session, "
               "prompt \"The \", its own seed.\n\n", model_dir, u.sysname, u.machine,
               sysconf(_SC_NPROCESSORS_ONLN), lind_bin);
        time_t now = time(NULL);
        char when[64];
        strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", gmtime(&now));
        printf("Run: %s, %d rounds a row. Each round: one socket run and one HTTP run, one after "
               "the other (which goes first alternates from round to round), after an unmeasured "
               "warm-up of 8 tokens a stream on each side; the ratio is "
               "HTTP's tokens/s over the socket's in the same round. Each figure: the median over the "
               "rounds (range lowest-highest); TTFT and mean batch from the run with the median "
               "tokens/s. CPU: user + system seconds over the run, of the daemon (all threads, "
               "/proc) and of this program (getrusage), per 1000 tokens; medians. Time to first token: from sending the request(s) to a stream's first "
               "text, p50/p99 over the streams. The clients (this program: libcurl for HTTP, the "
               "msgpack client library for the socket) share the machine with the daemon.\n\n",
               when, rounds);
        printf("| streams | tokens/stream | socket tokens/s | HTTP tokens/s | HTTP/socket | socket TTFT "
               "p50/p99 ms | HTTP TTFT p50/p99 ms | mean batch socket / HTTP | daemon CPU ms per 1000 "
               "tokens socket / HTTP | client CPU ms per 1000 tokens socket / HTTP |\n"
               "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    }
    for (int k = 0; k < (n_only ? 0 : nsizes); k++) {
        int S = sizes[k];
        int per = tokens ? tokens : (quick ? 4000 : 32000) / S;
        if (!tokens && per < (quick ? 50 : 300)) per = quick ? 50 : 300;
        run_result *sv = malloc(sizeof(run_result) * 2 * (size_t)rounds), *hv = sv + rounds;
        double *sr = malloc(sizeof(double) * 7 * (size_t)rounds), *hr = sr + rounds, *ratio = hr + rounds;
        double *sdc = ratio + rounds, *hdc = sdc + rounds, *scc = hdc + rounds, *hcc = scc + rounds;
        socket_run(S, 8);   /* warm-up, unmeasured: the daemon's first steps and commits, the */
        http_run(S, 8);     /* clients' first connections */
        for (int rep = 0; rep < rounds; rep++) {
            if (rep % 2 == 0) { sv[rep] = socket_run(S, per); hv[rep] = http_run(S, per); }
            else { hv[rep] = http_run(S, per); sv[rep] = socket_run(S, per); }
            sr[rep] = sv[rep].tok_s;
            hr[rep] = hv[rep].tok_s;
            ratio[rep] = hv[rep].tok_s / sv[rep].tok_s;
            sdc[rep] = 1e6 * sv[rep].daemon_cpu / (double)sv[rep].tokens;
            hdc[rep] = 1e6 * hv[rep].daemon_cpu / (double)hv[rep].tokens;
            scc[rep] = 1e6 * sv[rep].client_cpu / (double)sv[rep].tokens;
            hcc[rep] = 1e6 * hv[rep].client_cpu / (double)hv[rep].tokens;
            fprintf(stderr, "http_bench: %d streams round %d: socket %.0f, HTTP %.0f tokens/s (%.1f%%); CPU ms per "
                    "1000 tokens: daemon %.1f / %.1f, client %.1f / %.1f\n", S, rep + 1, sv[rep].tok_s, hv[rep].tok_s,
                    100.0 * ratio[rep], sdc[rep], hdc[rep], scc[rep], hcc[rep]);
        }
        double sm, sl, sh, hm, hl, hh, rm, rl, rh;
        bench_med_range(sr, rounds, &sm, &sl, &sh);
        bench_med_range(hr, rounds, &hm, &hl, &hh);
        bench_med_range(ratio, rounds, &rm, &rl, &rh);
        double sdm, hdm, scm, hcm, lo, hi;
        bench_med_range(sdc, rounds, &sdm, &lo, &hi);
        bench_med_range(hdc, rounds, &hdm, &lo, &hi);
        bench_med_range(scc, rounds, &scm, &lo, &hi);
        bench_med_range(hcc, rounds, &hcm, &lo, &hi);
        run_result s = median_run(sv, rounds, sm), h = median_run(hv, rounds, hm);
        printf("| %d | %d | %.0f (%.0f-%.0f) | %.0f (%.0f-%.0f) | %.1f%% (%.1f-%.1f%%) | %.1f / %.1f | %.1f / %.1f "
               "| %.1f / %.1f | %.1f / %.1f | %.1f / %.1f |\n", S, per, sm, sl, sh, hm, hl, hh, 100.0 * rm,
               100.0 * rl, 100.0 * rh, s.ttft_p50, s.ttft_p99, h.ttft_p50, h.ttft_p99, s.batch, h.batch, sdm, hdm,
               scm, hcm);
        fflush(stdout);
        free(sv);
        free(sr);
    }
    if (sizes_set && !n_only) {
        cleanup();
        curl_global_cleanup();
        return 0;
    }
    printf("\n## n answers from one prefill\n\n%s one POST /v1/completions with `n` against `n` separate "
           "requests sent at once (each n 1), the same prompt, non-streaming, temperature 1, a seed per "
           "answer. Model tokens fed: the daemon's `tokens_in` over the run (one request with n: the prompt "
           "once, then one pending token per answer). Each row: the median of %d alternated runs by wall "
           "time.\n\n| n | prompt bytes | tokens/answer | one request: wall ms | fed | n requests: wall ms | fed "
           "| speed-up |\n|---:|---:|---:|---:|---:|---:|---:|---:|\n", "Each row:", 5);
    const size_t plens[] = { 200, 2000, 8000 };
    for (int k = 0; k < 3; k++) {
        int n = 8, per = quick ? 16 : 32;
        n_result one[5], sep[5];
        for (int rep = 0; rep < 5; rep++) {
            one[rep] = n_run(n, 1, plens[k], per);
            sep[rep] = n_run(n, 0, plens[k], per);
        }
        qsort(one, 5, sizeof one[0], cmp_wall);
        qsort(sep, 5, sizeof sep[0], cmp_wall);
        printf("| %d | %zu | %d | %.1f | %llu | %.1f | %llu | %.2fx |\n", n, plens[k], per, one[2].wall * 1e3,
               (unsigned long long)one[2].fed, sep[2].wall * 1e3, (unsigned long long)sep[2].fed,
               sep[2].wall / one[2].wall);
        fflush(stdout);
    }
    cleanup();
    curl_global_cleanup();
    return 0;
}
