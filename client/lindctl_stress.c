/* client/lindctl_stress.c — `lindctl stress`: drive N sessions at once for
 * M tokens each and measure what a long stream costs: per-token latency
 * percentiles in windows along the stream (flat when the cost per token is
 * O(1)), aggregate tokens/s, the daemon's RSS, every error. Writes a CSV
 * and, through gnuplot, a PNG. */
#include "client/lindctl.h"
#include "kernels/clock.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void usage(FILE *f)
{
    fprintf(f,
"usage: lindctl stress --sessions N --tokens M [options]\n"
"\n"
"Run N sessions at once, each generating M tokens (in as many turns as the\n"
"daemon's max_tokens needs), and report aggregate tokens/s, per-token\n"
"latency percentiles in windows along the stream, the daemon's RSS and\n"
"every error. Sessions are named PREFIX-i and deleted afterwards.\n"
"\n"
"options:\n"
"  --sessions N        concurrent sessions (required)\n"
"  --tokens M          tokens per session (required)\n"
"  --connections C     spread the sessions over C connections (default min(N, 16))\n"
"  --windows K         latency windows along the stream (default 20)\n"
"  --text TEXT         each session's prompt (default \"The \")\n"
"  -t, --temperature T sampling temperature (daemon default otherwise)\n"
"  --seed S            session i is seeded with S+i (default 1)\n"
"  --prefix NAME       session name prefix (default stress-PID)\n"
"  --keep              keep the sessions instead of deleting them\n"
"  --csv FILE          write the per-window table as CSV\n"
"  --plot FILE.png     plot latency, tokens/s and RSS against tokens (gnuplot)\n"
"  --progress / --no-progress   live progress line (default: when stderr is a tty)\n"
"  --json              print the report as one JSON object instead of tables\n"
"  --socket PATH       the daemon's socket (default ./lind.sock; tcp://HOST:PORT)\n"
"  --token-file PATH   over TCP, the token for hello (default $LIND_TOKEN_FILE)\n"
"\n"
"exit status: 0 when every session reached M tokens with no error; else the\n"
"status of the first error's class (see lindctl --help), 130 on Ctrl-C.\n");
}

/* ---- latency histogram: log buckets, 2% wide, from 1 µs ------------------ */

#define HB 1100
#define HSTEP 1.02

typedef struct hist {
    uint32_t n[HB];
    uint64_t count;
    double sum_ms, max_ms;
} hist;

static void hist_add(hist *h, double ms)
{
    double us = ms * 1000.0;
    int b = us <= 1.0 ? 0 : 1 + (int)(log(us) / log(HSTEP));
    if (b >= HB) b = HB - 1;
    h->n[b]++;
    h->count++;
    h->sum_ms += ms;
    if (ms > h->max_ms) h->max_ms = ms;
}

/* The q-quantile (0..1), as its bucket's upper edge, in ms (≤2% high). */
static double hist_quantile(const hist *h, double q)
{
    if (!h->count) return 0;
    uint64_t want = (uint64_t)ceil(q * (double)h->count), seen = 0;
    if (want == 0) want = 1;
    for (int b = 0; b < HB; b++) {
        seen += h->n[b];
        if (seen >= want) {
            double edge = pow(HSTEP, b) / 1000.0;
            return edge < h->max_ms ? edge : h->max_ms;
        }
    }
    return h->max_ms;
}

/* ---- state ------------------------------------------------------------------ */

typedef struct sess {
    char name[96];
    int conn;
    uint64_t gen_id;      /* the generate in flight, 0 when none */
    uint64_t got;         /* tokens received */
    int turns, failed, finished, first_seen;
    double t_last;        /* when the last token (or the request) went by */
    double *reach;        /* per window: when this session completed it */
} sess;

typedef struct err_rec {
    char code[32];
    char message[256];
    char session[96];
} err_rec;

typedef struct sample { double t; double rss_mb; uint64_t tokens; } sample;

typedef struct stress {
    ctl_opts g;
    uint64_t n_sessions, m_tokens, n_conns, n_windows, win_len, seed, max_turn;
    double temperature;
    const char *text, *prefix, *csv, *plot;
    int keep, progress, json;
    lindc **conns;
    sess *s;
    hist *win;            /* per window */
    hist ttft;            /* first token of each session's first turn */
    err_rec *errs;
    size_t nerrs, caperrs;
    sample *samples;
    size_t nsamples, capsamples;
    pid_t daemon_pid;
    uint64_t steps0, steps1, out0, out1;   /* daemon stats before / after */
    double step_p50, step_p99;              /* daemon's step time at the end */
    int have_stats;
    uint64_t total;
    double t0, t_end;
    int first_status;
} stress;

static double rss_mb(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    double mb = -1;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6)) {
            mb = strtod(line + 6, NULL) / 1024.0;
            break;
        }
    fclose(f);
    return mb;
}

static void take_sample(stress *st)
{
    if (st->nsamples == st->capsamples) {
        size_t cap = st->capsamples ? 2 * st->capsamples : 256;
        sample *p = realloc(st->samples, cap * sizeof *p);
        if (!p) return;
        st->samples = p;
        st->capsamples = cap;
    }
    st->samples[st->nsamples++] = (sample){ clock_mono_s() - st->t0, st->daemon_pid > 0 ? rss_mb(st->daemon_pid) : -1, st->total };
}

static void record_error(stress *st, sess *s, const char *code, const char *message)
{
    if (st->nerrs == st->caperrs) {
        size_t cap = st->caperrs ? 2 * st->caperrs : 16;
        err_rec *p = realloc(st->errs, cap * sizeof *p);
        if (!p) return;
        st->errs = p;
        st->caperrs = cap;
    }
    err_rec *e = &st->errs[st->nerrs++];
    snprintf(e->code, sizeof e->code, "%s", code);
    snprintf(e->message, sizeof e->message, "%s", message);
    snprintf(e->session, sizeof e->session, "%s", s ? s->name : "-");
    if (!st->first_status) {
        /* bad_request: the generate carried only command-line values. */
        st->first_status = !strcmp(code, "connection") ? EXIT_CONNECTION
                         : !strcmp(code, "bad_request") ? EXIT_USAGE : ctl_exit_for_code(code);
    }
    if (st->nerrs <= 10) {
        if (st->progress) fputc('\n', stderr);
        fprintf(stderr, "lindctl stress: error on %s: %s: %s\n", e->session, code, message);
        if (st->nerrs == 10) fprintf(stderr, "lindctl stress: further errors are listed in the report only\n");
    }
}

static int send_turn(stress *st, sess *s)
{
    lindc_gen_opts o;
    lindc_gen_opts_init(&o);
    o.session = s->name;
    if (s->turns == 0) {
        o.text = st->text;
        o.text_len = strlen(st->text);
        o.has_seed = 1;
        o.seed = st->seed + (uint64_t)(s - st->s);
    }
    uint64_t left = st->m_tokens - s->got;
    o.max_tokens = (int64_t)(left < st->max_turn ? left : st->max_turn);
    if (st->temperature >= 0) o.temperature = st->temperature;
    s->t_last = clock_mono_s();
    s->turns++;
    return lindc_generate(st->conns[s->conn], &o, &s->gen_id);
}

static void fail_conn(stress *st, int ci, int rc)
{
    lindc_free(st->conns[ci]);
    st->conns[ci] = NULL;
    for (uint64_t i = 0; i < st->n_sessions; i++) {
        sess *s = &st->s[i];
        if (s->conn == ci && !s->finished && !s->failed) {
            s->failed = 1;
            record_error(st, s, "connection", lindc_strerror(rc));
        }
    }
}

static void on_event(stress *st, int ci, const lindc_event *ev)
{
    double t = clock_mono_s();
    if (ev->id == 0) {
        if (ev->kind == LINDC_EV_ERROR) record_error(st, NULL, ev->code, ev->message);
        return;
    }
    sess *s = NULL;
    for (uint64_t i = (uint64_t)ci; i < st->n_sessions; i += st->n_conns)
        if (st->s[i].gen_id == ev->id) { s = &st->s[i]; break; }
    if (!s) return;
    if (ev->kind == LINDC_EV_TOKEN) {
        double lat = (t - s->t_last) * 1000.0;
        if (!s->first_seen) {
            hist_add(&st->ttft, lat);
            s->first_seen = 1;
        } else {
            uint64_t w = s->got / st->win_len;
            if (w >= st->n_windows) w = st->n_windows - 1;
            hist_add(&st->win[w], lat);
        }
        for (size_t k = 0; k < ev->len; k++) {
            s->got++;
            if (s->got % st->win_len == 0 || s->got == st->m_tokens) {
                uint64_t w = (s->got - 1) / st->win_len;
                if (w < st->n_windows) s->reach[w] = t;
            }
        }
        st->total += ev->len;
        s->t_last = t;
    } else if (ev->kind == LINDC_EV_DONE) {
        s->gen_id = 0;
        char reason[32] = "";
        lindc_get_strcpy(ev->map, "reason", reason, sizeof reason);
        if (s->got >= st->m_tokens) {
            s->finished = 1;
        } else if (!strcmp(reason, "length")) {
            int rc = send_turn(st, s);
            if (rc) fail_conn(st, ci, rc);
        } else {
            char msg[128];
            snprintf(msg, sizeof msg, "turn ended early (%s) at %llu tokens", reason, (unsigned long long)s->got);
            s->failed = 1;
            record_error(st, s, reason, msg);
        }
    } else if (ev->kind == LINDC_EV_ERROR) {
        s->gen_id = 0;
        s->failed = 1;
        record_error(st, s, ev->code, ev->message);
    }
}

static void progress_line(stress *st, double t)
{
    uint64_t goal = st->n_sessions * st->m_tokens;
    /* Latency of the window most sessions are in now. */
    uint64_t w = st->n_sessions ? st->total / st->n_sessions / st->win_len : 0;
    if (w >= st->n_windows) w = st->n_windows - 1;
    double rss = st->nsamples ? st->samples[st->nsamples - 1].rss_mb : -1;
    fprintf(stderr, "\r\033[K[%6.1fs] %llu/%llu tokens (%.0f%%)  %.0f tok/s  p50 %.2f ms  p99 %.2f ms  rss %.0f MB  errors %zu",
            t - st->t0, (unsigned long long)st->total, (unsigned long long)goal,
            goal ? 100.0 * (double)st->total / (double)goal : 0.0,
            t > st->t0 ? (double)st->total / (t - st->t0) : 0.0,
            hist_quantile(&st->win[w], 0.5), hist_quantile(&st->win[w], 0.99), rss, st->nerrs);
}

/* Read the daemon's counters (and, at the start, its pid: a `pid` stats
 * field when the daemon has one, else the socket peer's credentials).
 * Returns 0 when stats answered. */
static int read_stats(stress *st, lindc *c, int at_start)
{
    lindc_req r;
    lindc_event ev;
    uint64_t pid = 0, steps = 0, out = 0;
    lindc_req_init(&r, "stats");
    int rc = lindc_call(c, &r, &ev, 10000);
    lindc_req_free(&r);
    if (at_start)
        st->daemon_pid = rc == 0 && lindc_get_u64(ev.map, "pid", &pid) == 0 && pid > 0
                       ? (pid_t)pid : lindc_peer_pid(c);
    if (rc) return rc;
    lindc_get_u64(ev.map, "steps", &steps);
    lindc_get_u64(ev.map, "tokens_out", &out);
    if (at_start) {
        st->steps0 = steps;
        st->out0 = out;
    } else {
        st->steps1 = steps;
        st->out1 = out;
        lindc_get_f64(lindc_get(ev.map, "step_ms"), "p50", &st->step_p50);
        lindc_get_f64(lindc_get(ev.map, "step_ms"), "p99", &st->step_p99);
        st->have_stats = 1;
    }
    return 0;
}

/* ---- the run ---------------------------------------------------------------- */

static int run(stress *st)
{
    st->t0 = clock_mono_s();
    for (uint64_t i = 0; i < st->n_sessions; i++) {
        sess *s = &st->s[i];
        if (!st->conns[s->conn]) continue;
        int rc = send_turn(st, s);
        if (rc) fail_conn(st, s->conn, rc);
    }
    take_sample(st);
    double next_sample = clock_mono_s() + 0.2, next_progress = clock_mono_s() + 0.25;
    struct pollfd *pfd = calloc(st->n_conns, sizeof *pfd);
    int *pci = calloc(st->n_conns, sizeof *pci);
    if (!pfd || !pci) {
        free(pfd);
        free(pci);
        return -ENOMEM;
    }
    int interrupted = 0;
    for (;;) {
        size_t live = 0;
        for (uint64_t i = 0; i < st->n_sessions; i++)
            if (!st->s[i].finished && !st->s[i].failed) live++;
        if (!live) break;
        if (ctl_interrupted) { interrupted = 1; break; }
        int np = 0, ready = 0;
        for (uint64_t ci = 0; ci < st->n_conns; ci++) {
            if (!st->conns[ci]) continue;
            if (lindc_pending(st->conns[ci])) ready = 1;
            pfd[np] = (struct pollfd){ .fd = lindc_fd(st->conns[ci]), .events = POLLIN };
            pci[np++] = (int)ci;
        }
        if (!np) break;
        int n = poll(pfd, (nfds_t)np, ready ? 0 : 100);
        if (n < 0 && errno != EINTR) break;
        for (int k = 0; k < np; k++) {
            int ci = pci[k];
            if (!st->conns[ci]) continue;
            if (!(n > 0 && pfd[k].revents) && !lindc_pending(st->conns[ci])) continue;
            /* Drain what is there without blocking. */
            for (;;) {
                lindc_event ev;
                int rc = lindc_next(st->conns[ci], &ev, 0);
                if (rc == -ETIMEDOUT || rc == -EINTR) break;
                if (rc) { fail_conn(st, ci, rc); break; }
                on_event(st, ci, &ev);
                if (!st->conns[ci]) break;
            }
        }
        double t = clock_mono_s();
        if (t >= next_sample) { take_sample(st); next_sample = t + 0.2; }
        if (st->progress && t >= next_progress) { progress_line(st, t); next_progress = t + 0.25; }
    }
    st->t_end = clock_mono_s();
    take_sample(st);
    if (st->progress) { progress_line(st, st->t_end); fputc('\n', stderr); }
    free(pfd);
    free(pci);
    return interrupted ? -EINTR : 0;
}

/* Per window: when all sessions that got that far completed it. */
static double window_end(const stress *st, uint64_t w)
{
    double end = 0;
    for (uint64_t i = 0; i < st->n_sessions; i++)
        if (st->s[i].reach[w] > end) end = st->s[i].reach[w];
    return end;
}

static double rss_at(const stress *st, double t_rel)
{
    double v = -1;
    for (size_t i = 0; i < st->nsamples; i++) {
        if (st->samples[i].t > t_rel + 1e-9) break;
        v = st->samples[i].rss_mb;
    }
    if (v < 0 && st->nsamples) v = st->samples[0].rss_mb;
    return v;
}

typedef struct row {
    uint64_t from, to, samples;
    double p50, p90, p99, max, mean, tps, rss;
} row;

static void build_rows(const stress *st, row *rows)
{
    double prev = st->t0;
    for (uint64_t w = 0; w < st->n_windows; w++) {
        row *r = &rows[w];
        const hist *h = &st->win[w];
        r->from = w * st->win_len;
        r->to = (w + 1) * st->win_len < st->m_tokens ? (w + 1) * st->win_len : st->m_tokens;
        r->samples = h->count;
        r->p50 = hist_quantile(h, 0.50);
        r->p90 = hist_quantile(h, 0.90);
        r->p99 = hist_quantile(h, 0.99);
        r->max = h->max_ms;
        r->mean = h->count ? h->sum_ms / (double)h->count : 0;
        double end = window_end(st, w);
        uint64_t tokens = 0;
        for (uint64_t i = 0; i < st->n_sessions; i++) {
            uint64_t got = st->s[i].got;
            if (got > r->from) tokens += (got < r->to ? got : r->to) - r->from;
        }
        r->tps = end > prev ? (double)tokens / (end - prev) : 0;
        r->rss = end > 0 ? rss_at(st, end - st->t0) : -1;
        if (end > prev) prev = end;
    }
}

static int write_csv(const stress *st, const row *rows)
{
    FILE *f = fopen(st->csv, "w");
    if (!f) {
        fprintf(stderr, "lindctl: cannot write %s: %s\n", st->csv, strerror(errno));
        return EXIT_LOCAL_FILE;
    }
    fprintf(f, "tokens_from,tokens_to,latency_samples,p50_ms,p90_ms,p99_ms,max_ms,mean_ms,tokens_per_s,rss_mb\n");
    for (uint64_t w = 0; w < st->n_windows; w++) {
        const row *r = &rows[w];
        if (!r->samples) break;   /* the windows measured, only */
        fprintf(f, "%llu,%llu,%llu,%.4f,%.4f,%.4f,%.4f,%.4f,%.1f,%.1f\n",
                (unsigned long long)r->from, (unsigned long long)r->to, (unsigned long long)r->samples,
                r->p50, r->p90, r->p99, r->max, r->mean, r->tps, r->rss);
    }
    if (fclose(f) != 0) {
        fprintf(stderr, "lindctl: cannot write %s: %s\n", st->csv, strerror(errno));
        return EXIT_LOCAL_FILE;
    }
    return EXIT_OK;
}

/* gnuplot reads the data inline ("$data << EOD"), so no temp file. */
static int write_plot(const stress *st, const row *rows)
{
    if (strchr(st->plot, '\'') || strchr(st->plot, '\n')) {
        fprintf(stderr, "lindctl: --plot path may not contain quotes or newlines\n");
        return EXIT_USAGE;
    }
    FILE *gp = popen("gnuplot 2>&1", "w");
    if (!gp) {
        fprintf(stderr, "lindctl: cannot run gnuplot: %s\n", strerror(errno));
        return EXIT_LOCAL_FILE;
    }
    fprintf(gp, "$data << EOD\n");
    for (uint64_t w = 0; w < st->n_windows; w++) {
        const row *r = &rows[w];
        if (!r->samples) continue;
        fprintf(gp, "%.1f %.4f %.4f %.4f %.1f %.1f %.4f\n", (double)(r->from + r->to) / 2.0,
                r->p50, r->p90, r->p99, r->tps, r->rss, r->mean);
    }
    fprintf(gp, "EOD\n"
        "set terminal pngcairo size 1000,800 font ',10'\n"
        "set output '%s'\n"
        "set multiplot layout 2,1 title 'lind stress: %llu sessions x %llu tokens'\n"
        "set grid\n"
        "set xlabel 'tokens generated per session (window midpoint)'\n"
        "set ylabel 'per-token latency (ms)'\n"
        "set yrange [0:*]\n"
        "set key below horizontal\n"
        "plot $data using 1:2 with linespoints title 'p50', "
        "$data using 1:7 with linespoints title 'mean', "
        "$data using 1:3 with linespoints title 'p90', "
        "$data using 1:4 with linespoints title 'p99'\n"
        "set ylabel 'aggregate tokens/s'\n"
        "set key below horizontal\n"
        "set y2label 'daemon RSS (MB)'\n"
        "set y2tics\n"
        "set y2range [0:*]\n"
        "plot $data using 1:5 with linespoints lc rgb '#1f77b4' dt 1 pt 7 lw 2 title 'tokens/s (left axis)' axes x1y1, "
        "$data using 1:6 with linespoints lc rgb '#d62728' dt 2 pt 4 lw 2 title 'RSS MB (right axis)' axes x1y2\n"
        "unset multiplot\n",
        st->plot, (unsigned long long)st->n_sessions, (unsigned long long)st->m_tokens);
    int rc = pclose(gp);
    if (rc != 0 || access(st->plot, F_OK) != 0) {
        fprintf(stderr, "lindctl: gnuplot failed to write %s (status %d)\n", st->plot, rc);
        return EXIT_LOCAL_FILE;
    }
    return EXIT_OK;
}

static void report(const stress *st, const row *rows)
{
    double el = st->t_end - st->t0;
    printf("lind stress: %llu sessions x %llu tokens over %llu connections (socket %s)\n",
           (unsigned long long)st->n_sessions, (unsigned long long)st->m_tokens,
           (unsigned long long)st->n_conns, st->g.socket);
    printf("generated %llu tokens in %.2f s: %.1f tokens/s aggregate\n",
           (unsigned long long)st->total, el, el > 0 ? (double)st->total / el : 0.0);
    printf("first token of a session (prompt + queueing): p50 %.2f ms, p99 %.2f ms, max %.2f ms\n",
           hist_quantile(&st->ttft, 0.5), hist_quantile(&st->ttft, 0.99), st->ttft.max_ms);
    double rmin = -1, rmax = -1;
    for (size_t i = 0; i < st->nsamples; i++) {
        double v = st->samples[i].rss_mb;
        if (v < 0) continue;
        if (rmin < 0 || v < rmin) rmin = v;
        if (v > rmax) rmax = v;
    }
    if (rmin >= 0)
        printf("daemon RSS (pid %d): %.1f MB at start, %.1f MB peak, %.1f MB at end\n",
               (int)st->daemon_pid, st->samples[0].rss_mb, rmax, st->samples[st->nsamples - 1].rss_mb);
    else
        printf("daemon RSS: unavailable (pid %d not readable in /proc)\n", (int)st->daemon_pid);
    if (st->have_stats && st->steps1 > st->steps0) {
        uint64_t steps = st->steps1 - st->steps0, out = st->out1 - st->out0;
        printf("daemon: %llu steps for %llu tokens out (%.1f sessions per step on average; "
               "counts every client's work), step time p50 %.3f ms, p99 %.3f ms (daemon's stats)\n",
               (unsigned long long)steps, (unsigned long long)out, (double)out / (double)steps,
               st->step_p50, st->step_p99);
    }
    printf("\nper-token latency along the stream (ms; tokens/s is the whole fleet's):\n");
    printf("%15s %9s %9s %9s %9s %9s %9s %10s %8s\n", "tokens", "samples", "mean", "p50", "p90", "p99", "max",
           "tokens/s", "rss MB");
    const row *first = NULL, *last = NULL;
    for (uint64_t w = 0; w < st->n_windows; w++) {
        const row *r = &rows[w];
        if (!r->samples) {   /* not reached (Ctrl-C, errors): no row of zeros */
            uint64_t left = 0;
            for (uint64_t k = w; k < st->n_windows; k++) left += !rows[k].samples;
            printf("%15s (%llu window%s not reached)\n", "...", (unsigned long long)left, left == 1 ? "" : "s");
            break;
        }
        char span[32];
        snprintf(span, sizeof span, "%llu-%llu", (unsigned long long)r->from, (unsigned long long)r->to);
        printf("%15s %9llu %9.3f %9.3f %9.3f %9.3f %9.3f %10.1f %8.1f\n", span, (unsigned long long)r->samples,
               r->mean, r->p50, r->p90, r->p99, r->max, r->tps, r->rss);
        if (r->samples) {
            if (!first) first = r;
            last = r;
        }
    }
    /* The mean is the steady cost per token of one stream; percentiles can
     * sit near 0 when the daemon's writes carry several tokens at once. */
    if (first && last && first != last && first->mean > 0)
        printf("last window's mean / first window's mean = %.2f\n", last->mean / first->mean);
    size_t finished = 0;
    for (uint64_t i = 0; i < st->n_sessions; i++) finished += st->s[i].finished;
    printf("\nsessions finished: %zu/%llu; errors: %zu\n", finished, (unsigned long long)st->n_sessions, st->nerrs);
    /* Errors by code first (one line per distinct code), then each one. */
    for (size_t i = 0; i < st->nerrs; i++) {
        int seen = 0;
        for (size_t k = 0; k < i && !seen; k++) seen = !strcmp(st->errs[k].code, st->errs[i].code);
        if (seen) continue;
        size_t count = 0;
        for (size_t k = i; k < st->nerrs; k++) count += !strcmp(st->errs[k].code, st->errs[i].code);
        printf("  %zu x %s (first: %s)\n", count, st->errs[i].code, st->errs[i].message);
    }
    for (size_t i = 0; i < st->nerrs; i++)
        printf("  error %s on %s: %s\n", st->errs[i].code, st->errs[i].session, st->errs[i].message);
}

static void report_json(const stress *st, const row *rows)
{
    double el = st->t_end - st->t0, rmax = -1;
    for (size_t i = 0; i < st->nsamples; i++)
        if (st->samples[i].rss_mb > rmax) rmax = st->samples[i].rss_mb;
    size_t finished = 0;
    for (uint64_t i = 0; i < st->n_sessions; i++) finished += st->s[i].finished;
    json_t *j = json_pack("{s:I, s:I, s:I, s:I, s:f, s:f, s:I, s:I}",
        "sessions", (json_int_t)st->n_sessions, "tokens_per_session", (json_int_t)st->m_tokens,
        "connections", (json_int_t)st->n_conns, "tokens", (json_int_t)st->total,
        "seconds", el, "tokens_per_s", el > 0 ? (double)st->total / el : 0.0,
        "finished", (json_int_t)finished, "daemon_pid", (json_int_t)st->daemon_pid);
    json_object_set_new(j, "first_token_ms", json_pack("{s:f, s:f, s:f}",
        "p50", hist_quantile(&st->ttft, 0.5), "p99", hist_quantile(&st->ttft, 0.99), "max", st->ttft.max_ms));
    if (st->nsamples && st->samples[0].rss_mb >= 0)
        json_object_set_new(j, "rss_mb", json_pack("{s:f, s:f, s:f}", "start", st->samples[0].rss_mb,
            "peak", rmax, "end", st->samples[st->nsamples - 1].rss_mb));
    if (st->have_stats && st->steps1 > st->steps0)
        json_object_set_new(j, "daemon", json_pack("{s:I, s:I, s:f, s:f}",
            "steps", (json_int_t)(st->steps1 - st->steps0), "tokens_out", (json_int_t)(st->out1 - st->out0),
            "step_ms_p50", st->step_p50, "step_ms_p99", st->step_p99));
    json_t *w = json_array();
    for (uint64_t k = 0; k < st->n_windows; k++) {
        const row *r = &rows[k];
        if (!r->samples) break;
        json_array_append_new(w, json_pack("{s:I, s:I, s:I, s:f, s:f, s:f, s:f, s:f, s:f, s:f}",
            "tokens_from", (json_int_t)r->from, "tokens_to", (json_int_t)r->to, "samples", (json_int_t)r->samples,
            "p50_ms", r->p50, "p90_ms", r->p90, "p99_ms", r->p99, "max_ms", r->max, "mean_ms", r->mean,
            "tokens_per_s", r->tps, "rss_mb", r->rss));
    }
    json_object_set_new(j, "windows", w);
    json_t *e = json_array();
    for (size_t k = 0; k < st->nerrs; k++)
        json_array_append_new(e, json_pack("{s:s, s:s, s:s}", "session", st->errs[k].session,
            "code", st->errs[k].code, "message", st->errs[k].message));
    json_object_set_new(j, "errors", e);
    ctl_json_line(j);
    json_decref(j);
}

int cmd_stress(const ctl_opts *g0, int argc, char **argv)
{
    stress st = { .g = *g0, .n_windows = 20, .seed = 1, .temperature = -1, .text = "The " };
    st.progress = isatty(2);
    char prefix[64];
    snprintf(prefix, sizeof prefix, "stress-%d", (int)getpid());
    st.prefix = prefix;
    enum { O_SESS = 1, O_TOK, O_CONN, O_WIN, O_TEXT, O_SEED, O_PREFIX, O_KEEP, O_CSV, O_PLOT, O_PROG, O_NOPROG, O_JSON };
    static const struct option longopts[] = {
        CTL_COMMON_LONGOPTS,
        { "sessions", required_argument, NULL, O_SESS }, { "tokens", required_argument, NULL, O_TOK },
        { "connections", required_argument, NULL, O_CONN }, { "windows", required_argument, NULL, O_WIN },
        { "text", required_argument, NULL, O_TEXT }, { "temperature", required_argument, NULL, 't' },
        { "seed", required_argument, NULL, O_SEED }, { "prefix", required_argument, NULL, O_PREFIX },
        { "keep", no_argument, NULL, O_KEEP }, { "csv", required_argument, NULL, O_CSV },
        { "plot", required_argument, NULL, O_PLOT }, { "progress", no_argument, NULL, O_PROG },
        { "no-progress", no_argument, NULL, O_NOPROG }, { "json", no_argument, NULL, O_JSON },
        { 0, 0, 0, 0 },
    };
    int opt;
    while ((opt = getopt_long(argc, argv, "ht:", longopts, NULL)) != -1) {
        switch (opt) {
        case CTL_OPT_SOCKET: st.g.socket = optarg; break;
        case CTL_OPT_TOKEN_FILE: st.g.token_file = optarg; break;
        case CTL_OPT_HELP: usage(stdout); return EXIT_OK;
        case O_SESS: if (ctl_parse_u64("--sessions", optarg, &st.n_sessions)) return EXIT_USAGE; break;
        case O_TOK: if (ctl_parse_u64("--tokens", optarg, &st.m_tokens)) return EXIT_USAGE; break;
        case O_CONN: if (ctl_parse_u64("--connections", optarg, &st.n_conns)) return EXIT_USAGE; break;
        case O_WIN: if (ctl_parse_u64("--windows", optarg, &st.n_windows)) return EXIT_USAGE; break;
        case O_TEXT: st.text = optarg; break;
        case 't': if (ctl_parse_f64("--temperature", optarg, &st.temperature)) return EXIT_USAGE;
                  if (st.temperature < 0 || st.temperature > 100) {   /* the daemon's range: status 2 either way */
                      fprintf(stderr, "lindctl: --temperature wants 0..100, got %s\n", optarg);
                      return EXIT_USAGE;
                  }
                  break;
        case O_SEED: if (ctl_parse_u64("--seed", optarg, &st.seed)) return EXIT_USAGE; break;
        case O_PREFIX: st.prefix = optarg; break;
        case O_KEEP: st.keep = 1; break;
        case O_CSV: st.csv = optarg; break;
        case O_PLOT: st.plot = optarg; break;
        case O_PROG: st.progress = 1; break;
        case O_NOPROG: st.progress = 0; break;
        case O_JSON: st.json = 1; break;
        default: usage(stderr); return EXIT_USAGE;
        }
    }
    if (optind != argc || !st.n_sessions || !st.m_tokens || !st.n_windows) {
        fprintf(stderr, "lindctl stress: --sessions N and --tokens M (both > 0) are required\n");
        usage(stderr);
        return EXIT_USAGE;
    }
    if (st.n_sessions > 100000) {
        fprintf(stderr, "lindctl stress: --sessions is at most 100000\n");
        return EXIT_USAGE;
    }
    /* Output paths are checked now, not after a long run. */
    char perr[600];
    if (st.plot && (strchr(st.plot, '\'') || strchr(st.plot, '\n'))) {
        fprintf(stderr, "lindctl: --plot path may not contain quotes or newlines\n");
        return EXIT_USAGE;
    }
    if (st.plot && (!strcmp(st.plot, "-") || ctl_is_terminal(st.plot))) {
        fprintf(stderr, "lindctl: refusing to write a PNG to a terminal; give --plot a FILE.png\n");
        return EXIT_USAGE;
    }
    const char *outs[2] = { st.csv, st.plot };
    for (int i = 0; i < 2; i++)
        if (outs[i] && ctl_check_writable(outs[i], perr, sizeof perr)) {
            fprintf(stderr, "lindctl: %s\n", perr);
            return EXIT_LOCAL_FILE;
        }
    if (!st.n_conns) st.n_conns = st.n_sessions < 16 ? st.n_sessions : 16;
    if (st.n_conns > st.n_sessions) st.n_conns = st.n_sessions;
    if (st.n_windows > st.m_tokens) st.n_windows = st.m_tokens;
    st.win_len = (st.m_tokens + st.n_windows - 1) / st.n_windows;
    st.n_windows = (st.m_tokens + st.win_len - 1) / st.win_len;

    st.conns = calloc(st.n_conns, sizeof *st.conns);
    st.s = calloc(st.n_sessions, sizeof *st.s);
    st.win = calloc(st.n_windows, sizeof *st.win);
    double *reach = calloc(st.n_sessions * st.n_windows, sizeof *reach);
    int status = EXIT_OK;
    if (!st.conns || !st.s || !st.win || !reach) {
        fprintf(stderr, "lindctl stress: out of memory\n");
        status = EXIT_INTERNAL;
        goto out;
    }
    for (uint64_t ci = 0; ci < st.n_conns; ci++)
        if ((status = ctl_connect(&st.g, &st.conns[ci])) != 0) goto out;

    /* The daemon's per-turn limit decides how many turns a session needs. */
    lindc_req r;
    lindc_event ev;
    lindc_req_init(&r, "hello");
    status = ctl_call(st.conns[0], &r, &ev);
    lindc_req_free(&r);
    if (status) goto out;
    st.max_turn = 256;
    lindc_get_u64(lindc_get(ev.map, "limits"), "max_tokens", &st.max_turn);
    if (!st.max_turn) st.max_turn = 256;
    read_stats(&st, st.conns[0], 1);

    for (uint64_t i = 0; i < st.n_sessions; i++) {
        snprintf(st.s[i].name, sizeof st.s[i].name, "%s-%llu", st.prefix, (unsigned long long)i);
        st.s[i].conn = (int)(i % st.n_conns);
        st.s[i].reach = reach + i * st.n_windows;
    }
    ctl_catch_sigint();
    int rc = run(&st);

    for (uint64_t ci = 0; ci < st.n_conns; ci++)
        if (st.conns[ci]) {
            read_stats(&st, st.conns[ci], 0);
            break;
        }
    row *rows = calloc(st.n_windows, sizeof *rows);
    if (!rows) { status = EXIT_INTERNAL; goto out; }
    build_rows(&st, rows);
    if (st.json) report_json(&st, rows);
    else report(&st, rows);
    status = st.first_status;
    if (rc == -EINTR) status = EXIT_INTERRUPTED;
    int fst = EXIT_OK;
    if (st.csv && (fst = write_csv(&st, rows)) != 0 && !status) status = fst;
    if (st.plot && (fst = write_plot(&st, rows)) != 0 && !status) status = fst;
    free(rows);

    /* Clean up: cancel what still runs (Ctrl-C), then delete. */
    if (!st.keep) {
        lindc *c = NULL;
        for (uint64_t ci = 0; ci < st.n_conns && !c; ci++) c = st.conns[ci];
        for (uint64_t i = 0; c && i < st.n_sessions; i++) {
            sess *s = &st.s[i];
            if (s->gen_id && st.conns[s->conn]) {
                uint64_t cid;
                if (lindc_cancel(st.conns[s->conn], s->gen_id, &cid) == 0)
                    while (lindc_wait(st.conns[s->conn], s->gen_id, &ev, 10000) == 0 && !ev.final) {}
            }
            lindc_req_init(&r, "delete");
            lindc_req_str(&r, "session", s->name);
            lindc_call(c, &r, &ev, 10000);
            lindc_req_free(&r);
        }
    }
out:
    for (uint64_t ci = 0; st.conns && ci < st.n_conns; ci++) lindc_free(st.conns[ci]);
    free(st.conns);
    free(st.s);
    free(st.win);
    free(reach);
    free(st.errs);
    free(st.samples);
    return status;
}
