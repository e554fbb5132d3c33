/* tests/test_lindctl_e2e.c — lindctl against a real `lind serve` (a small
 * random model in a temporary directory): generate (raw, --json, --stop,
 * continuation, Ctrl-C, error exit statuses), every `sessions` subcommand,
 * stats, a small stress run (CSV and PNG, sane numbers), and what happens
 * when no daemon is there. Chat is tests/test_lindctl_chat.c. */
#include "client/lindclient.h"
#include "tests/check.h"
#include "tests/lindctl_harness.h"

#include <pty.h>

#include <jansson.h>
#include <locale.h>
#include <wchar.h>

static harness H;

/* Nonzero if s contains needle. */
static int has(const char *s, const char *needle) { return s && strstr(s, needle) != NULL; }

/* ---- no daemon -------------------------------------------------------------- */

static void absent_daemon(void)
{
    char sock[100];
    snprintf(sock, sizeof sock, "%s/nobody.sock", H.dir);
    const char *cmds[][4] = {
        { "generate", "s", "hi", NULL }, { "sessions", "ls", NULL, NULL }, { "stats", NULL, NULL, NULL },
        { "chat", "s", NULL, NULL }, { "stress", "--sessions", "1", NULL },
    };
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        ctl_run r;
        harness_ctl(&H, &r, "--socket", sock, cmds[i][0], cmds[i][1], cmds[i][2],
                    i == 4 ? "--tokens" : NULL, "5", NULL);
        CHECK(r.status == 3, "%s: exit %d, want 3 (stderr: %s)", cmds[i][0], r.status, r.err);
        CHECK(has(r.err, "cannot connect") && has(r.err, sock) && has(r.err, "lind serve"),
              "%s: stderr should name the socket and the cause: %s", cmds[i][0], r.err);
        ctl_run_free(&r);
    }
    /* A socket file left by a dead daemon: connection refused, same status. */
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    memcpy(sa.sun_path, sock, strlen(sock) + 1);   /* H.dir is short: fits */
    CHECK(bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0, "bind");
    close(fd);
    ctl_run r;
    harness_ctl(&H, &r, "--socket", sock, "sessions", "ls");
    CHECK(r.status == 3 && has(r.err, "refused"), "stale socket: exit %d, stderr %s", r.status, r.err);
    ctl_run_free(&r);
    unlink(sock);
}

/* Run build/lind with argv (NULL-terminated, argv[0] ignored). */
static void run_lind(ctl_run *r, char *const *argv)
{
    harness L = H;
    snprintf(L.lindctl, sizeof L.lindctl, "%s", H.lind);
    int out = -1, err = -1;
    pid_t pid = harness_spawn(&L, argv, NULL, &out, &err);
    harness_collect(&L, pid, out, err, r);
}

static void help_and_version(void)
{
    ctl_run r;
    char *v[] = { "lind", "--version", NULL };
    run_lind(&r, v);
    CHECK(r.status == 0 && has(r.out, "lind 1."), "lind --version: %d %s", r.status, r.out);
    ctl_run_free(&r);
    harness_ctl(&H, &r, "--version");
    CHECK(r.status == 0 && has(r.out, "lindctl 1."), "lindctl --version: %d %s", r.status, r.out);
    ctl_run_free(&r);
    static char *const subs[] = { "info", "score", "generate", "serve", "bench-step" };
    for (size_t i = 0; i < 5; i++) {
        char want[64];
        snprintf(want, sizeof want, "usage: lind %s", subs[i]);
        char *a[] = { "lind", subs[i], "--help", NULL };
        run_lind(&r, a);
        CHECK(r.status == 0 && has(r.out, want) && has(r.out, "--model") && has(r.out, "--backend"),
              "lind %s --help: %d %.200s", subs[i], r.status, r.out);
        ctl_run_free(&r);
    }
    char *sv[] = { "lind", "serve", "--help", NULL };
    run_lind(&r, sv);
    static const char *const serve_opts[] = { "--socket", "--db", "--max-batch", "--max-resident",
        "--max-message", "--max-tokens", "--sync", "--transcript-bytes", "--max-output",
        "--prompt-chunk", "--max-inflight", "$LIND_SOCKET" };
    for (size_t i = 0; i < sizeof serve_opts / sizeof serve_opts[0]; i++)
        CHECK(has(r.out, serve_opts[i]), "lind serve --help names %s", serve_opts[i]);
    ctl_run_free(&r);
    char *hv[] = { "lind", "help", "generate", NULL };
    run_lind(&r, hv);
    CHECK(r.status == 0 && has(r.out, "usage: lind generate"), "lind help generate: %d", r.status);
    ctl_run_free(&r);
    static const char *const chat_opts[] = { "--template", "--system", "--stop", "--seed", "--top-p",
                                             "--repetition-penalty", "/fork", "/save", "raven" };
    harness_ctl(&H, &r, "chat", "--help");
    for (size_t i = 0; i < sizeof chat_opts / sizeof chat_opts[0]; i++)
        CHECK(has(r.out, chat_opts[i]), "chat --help names %s", chat_opts[i]);
    ctl_run_free(&r);
}

/* lind score draws a progress line when stderr is a terminal, and not
 * when it is a pipe (the result lines are the same). */
static void score_progress_on_terminal(void)
{
    char file[256];
    snprintf(file, sizeof file, "%s/score.txt", H.dir);
    FILE *f = fopen(file, "w");
    for (int i = 0; f && i < 3000; i++) fputs("In the beginning. ", f);
    if (f) fclose(f);
    int fd;
    pid_t pid = forkpty(&fd, NULL, NULL, NULL);
    if (pid == 0) {
        execl(H.lind, H.lind, "score", "--model", H.model, "--backend", "cpu", file, (char *)NULL);
        _exit(127);
    }
    char *buf = calloc(1, 1);
    size_t len = 0;
    for (;;) {
        char b[4096];
        ssize_t n = read(fd, b, sizeof b);
        if (n <= 0) break;
        harness_buf_add(&buf, &len, b, (size_t)n);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    close(fd);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "score exits 0");
    CHECK(has(buf, "[scored 0 of 54000 tokens") && has(buf, "bits_per_byte:"), "progress line: %.300s", buf);
    free(buf);
    ctl_run r;
    char *av[] = { "lind", "score", "--model", H.model, "--backend", "cpu", file, NULL };
    run_lind(&r, av);
    CHECK(r.status == 0 && has(r.out, "bits_per_byte:") && !has(r.err, "[scored"), "no progress into a pipe: %s", r.err);
    ctl_run_free(&r);
}

/* Output paths are checked before any work; a PNG never goes to a terminal. */
static void output_paths_first(void)
{
    ctl_run r;
    double t0 = clock_mono_s();
    harness_ctl(&H, &r, "stress", "--sessions", "2", "--tokens", "100000", "--prefix", "pathchk",
                "--csv", "/nonexistent-dir/x.csv");
    CHECK(r.status == 13 && has(r.err, "/nonexistent-dir/x.csv"), "bad --csv: %d %s", r.status, r.err);
    ctl_run_free(&r);
    harness_ctl(&H, &r, "stress", "--sessions", "2", "--tokens", "100000", "--prefix", "pathchk",
                "--plot", "/nonexistent-dir/x.png");
    CHECK(r.status == 13, "bad --plot: %d %s", r.status, r.err);
    ctl_run_free(&r);
    CHECK(clock_mono_s() - t0 < 20, "refused before running (%.1f s)", clock_mono_s() - t0);
    harness_ctl(&H, &r, "sessions", "ls");
    CHECK(!has(r.out, "pathchk"), "no stress session was created: %s", r.out);
    ctl_run_free(&r);
    int master, slave;
    char tty[128];
    if (openpty(&master, &slave, tty, NULL, NULL) == 0) {
        harness_ctl(&H, &r, "stress", "--sessions", "1", "--tokens", "10", "--plot", tty);
        CHECK(r.status == 2 && has(r.err, "terminal"), "--plot to a terminal: %d %s", r.status, r.err);
        ctl_run_free(&r);
        harness_ctl(&H, &r, "sessions", "export", "whatever", tty);
        CHECK(r.status == 2 && has(r.err, "terminal"), "export to a terminal: %d %s", r.status, r.err);
        ctl_run_free(&r);
        close(master);
        close(slave);
    }
    harness_ctl(&H, &r, "sessions", "export", "whatever", "/nonexistent-dir/f");
    CHECK(r.status == 13, "export to a bad path is refused before asking: %d %s", r.status, r.err);
    ctl_run_free(&r);
}

static void usage_errors(void)
{
    ctl_run r;
    harness_ctl(&H, &r, "bogus");
    CHECK(r.status == 2 && has(r.err, "unknown command"), "unknown command: %d %s", r.status, r.err);
    ctl_run_free(&r);
    harness_ctl(&H, &r, "generate");
    CHECK(r.status == 2 && has(r.err, "usage:"), "generate without session: %d", r.status);
    ctl_run_free(&r);
    harness_ctl(&H, &r, "generate", "s", "x", "-n", "ten");
    CHECK(r.status == 2 && has(r.err, "--max-tokens"), "bad number: %d %s", r.status, r.err);
    ctl_run_free(&r);
    harness_ctl(&H, &r, "sessions", "fork", "onlyone");
    CHECK(r.status == 2, "fork with one name: %d", r.status);
    ctl_run_free(&r);
    harness_ctl(&H, &r, "stress", "--sessions", "2");
    CHECK(r.status == 2 && has(r.err, "--tokens"), "stress without --tokens: %d %s", r.status, r.err);
    ctl_run_free(&r);
    const char *cmds[] = { "chat", "generate", "sessions", "stats", "stress" };
    for (size_t i = 0; i < 5; i++) {
        harness_ctl(&H, &r, cmds[i], "--help");
        CHECK(r.status == 0 && has(r.out, "usage: lindctl") && has(r.out, "--socket"),
              "%s --help: %d", cmds[i], r.status);
        ctl_run_free(&r);
    }
    harness_ctl(&H, &r, "--help");
    CHECK(r.status == 0 && has(r.out, "exit status"), "lindctl --help documents exit statuses");
    ctl_run_free(&r);
    harness_ctl(&H, &r, "help", "generate");
    CHECK(r.status == 0 && has(r.out, "usage: lindctl generate"), "lindctl help generate: %d", r.status);
    ctl_run_free(&r);
}

/* ---- generate -------------------------------------------------------------- */

/* --log-file takes the request log; --log-level debug adds the time split,
 * --log-level warn drops turn lines. */
static void request_log_file_and_levels(void)
{
    static const char *const levels[2] = { "debug", "warn" };
    for (int k = 0; k < 2; k++) {
        harness h2;
        if (harness_init(&h2, 16, 1) != 0) { CHECK(0, "second harness"); return; }
        char logf[256];
        snprintf(logf, sizeof logf, "%s/requests.log", h2.dir);
        h2.extra[0] = "--log-file";
        h2.extra[1] = logf;
        h2.extra[2] = "--log-level";
        h2.extra[3] = levels[k];
        CHECK(harness_start(&h2) == 0, "daemon with --log-file");
        ctl_run r;
        harness_ctl(&h2, &r, "generate", "lf", "abc", "-n", "3", "-t", "0");
        CHECK(r.status == 0, "generate: %d %s", r.status, r.err);
        ctl_run_free(&r);
        harness_stop(&h2);
        FILE *f = fopen(logf, "r");
        char line[1024];
        int turn = 0, split = 0;
        while (f && fgets(line, sizeof line, f)) {
            if (strstr(line, " info turn session=lf op=generate in=3 out=3 ")) turn++;
            if (strstr(line, " queue_ms=") && strstr(line, " save_ms=")) split++;
        }
        if (f) fclose(f);
        if (k == 0) CHECK(f && turn == 1 && split == 1, "debug: %d turn lines, %d with the split", turn, split);
        else CHECK(f && turn == 0, "warn: %d turn lines", turn);
        harness_free(&h2);
    }
}

/* A new session whose first turn is still running has no commit yet:
 * sessions show says "never", not a 1970 date. */
static void show_uncommitted(void)
{
    lindc *c;
    char e[256];
    if (lindc_connect(&c, H.sock, e, sizeof e)) { CHECK(0, "connect: %s", e); return; }
    lindc_gen_opts o;
    lindc_gen_opts_init(&o);
    o.session = "uncommitted";
    o.text = "x";
    o.text_len = 1;
    o.max_tokens = 65536;
    uint64_t id;
    lindc_event ev;
    CHECK(lindc_generate(c, &o, &id) == 0, "generate");
    CHECK(lindc_wait(c, id, &ev, 30000) == 0 && ev.kind == LINDC_EV_TOKEN, "the turn streams");
    ctl_run r;
    harness_ctl(&H, &r, "sessions", "show", "uncommitted");
    CHECK(r.status == 0 && has(r.out, "updated      never (no turn committed yet)") && !has(r.out, "1970"),
          "show: %d %s", r.status, r.out);
    ctl_run_free(&r);
    harness_ctl(&H, &r, "sessions", "ls");
    CHECK(!has(r.out, "1970"), "ls: %s", r.out);
    ctl_run_free(&r);
    lindc_cancel(c, id, NULL);
    while (lindc_wait(c, id, &ev, 30000) == 0 && !ev.final) {}
    lindc_free(c);
}

/* A new session without --seed draws a random one: two new sessions
 * differ, the seed is reported (-v, sessions show) and replays the stream. */
static void random_seeds(void)
{
    ctl_run a, b, c, show;
    harness_ctl(&H, &a, "generate", "rs-a", "And", "-n", "64", "-t", "1", "-v");
    harness_ctl(&H, &b, "generate", "rs-b", "And", "-n", "64", "-t", "1", "-v");
    CHECK(a.status == 0 && b.status == 0, "exits %d %d", a.status, b.status);
    CHECK(a.out_len != b.out_len || memcmp(a.out, b.out, a.out_len), "two new sessions differ");
    const char *p = strstr(a.err, "seed ");
    unsigned long long seed = 0;
    CHECK(p && sscanf(p, "seed %llu", &seed) == 1, "-v names the seed: %s", a.err);
    char sd[32];
    snprintf(sd, sizeof sd, "%llu", seed);
    harness_ctl(&H, &c, "generate", "rs-c", "And", "-n", "64", "-t", "1", "--seed", sd);
    CHECK(c.status == 0 && c.out_len == a.out_len && !memcmp(a.out, c.out, a.out_len),
          "the reported seed replays the stream");
    harness_ctl(&H, &show, "sessions", "show", "rs-a");
    char want[64];
    snprintf(want, sizeof want, "seed         %llu", seed);
    CHECK(has(show.out, want), "sessions show prints the seed: %s", show.out);
    ctl_run_free(&a);
    ctl_run_free(&b);
    ctl_run_free(&c);
    ctl_run_free(&show);
}

/* A generate that asks for progress gets `progress` events while its long
 * text is fed (fed rising, total fixed); one that does not ask gets none. */
static void prompt_progress(void)
{
    lindc *c;
    char e[256];
    if (lindc_connect(&c, H.sock, e, sizeof e)) { CHECK(0, "connect: %s", e); return; }
    static char text[20000];
    for (size_t i = 0; i < sizeof text; i++) text[i] = (char)('a' + i % 26);
    for (int ask = 0; ask < 2; ask++) {
        lindc_gen_opts o;
        lindc_gen_opts_init(&o);
        o.session = ask ? "prog-yes" : "prog-no";
        o.text = text;
        o.text_len = sizeof text;
        o.max_tokens = 1;
        o.progress = ask;
        uint64_t id, last_fed = 0, total = 0;
        int n = 0, rising = 1, rc = lindc_generate(c, &o, &id);
        lindc_event ev;
        while (!rc && !(rc = lindc_wait(c, id, &ev, 60000)) && !ev.final) {
            if (ev.kind != LINDC_EV_PROGRESS) continue;
            uint64_t fed = 0;
            lindc_get_u64(ev.map, "fed", &fed);
            lindc_get_u64(ev.map, "total", &total);
            if (fed <= last_fed || fed >= total) rising = 0;
            last_fed = fed;
            n++;
        }
        CHECK(rc == 0 && ev.kind == LINDC_EV_DONE, "%s: ends with done (%d)", o.session, rc);
        if (ask)
            CHECK(n >= 10 && rising && total == sizeof text + 1, "progress events: %d, rising %d, total %llu",
                  n, rising, (unsigned long long)total);
        else
            CHECK(n == 0, "no progress events unasked, got %d", n);
    }
    lindc_free(c);
}

/* lind serve writes one request log line per finished turn (to stderr,
 * which the harness sends to its log file). */
static void request_log(void)
{
    ctl_run r;
    harness_ctl(&H, &r, "generate", "log me", "Genesis", "-n", "6", "-t", "0");
    CHECK(r.status == 0, "generate: %d %s", r.status, r.err);
    ctl_run_free(&r);
    FILE *f = fopen(H.log, "r");
    char line[1024];
    int found = 0;
    while (f && fgets(line, sizeof line, f))
        if (strstr(line, " info turn session=\"log me\" op=generate in=7 out=6 ttft_ms=") &&
            strstr(line, " total_ms=") && strstr(line, " outcome=length\n"))
            found = 1;
    if (f) fclose(f);
    CHECK(found, "no turn line for session 'log me' in %s", H.log);
}

static void generate_streams(void)
{
    ctl_run a, b;
    harness_ctl(&H, &a, "generate", "g1", "In the beginning", "-n", "40", "-t", "0");
    CHECK(a.status == 0, "exit %d: %s", a.status, a.err);
    CHECK(a.out_len == 40, "40 tokens are 40 bytes, got %zu", a.out_len);
    /* Greedy from the same text on a fresh session gives the same bytes. */
    harness_ctl(&H, &b, "generate", "g2", "In the beginning", "-n", "40", "-t", "0");
    CHECK(b.status == 0 && b.out_len == a.out_len && !memcmp(a.out, b.out, a.out_len), "greedy is deterministic");
    ctl_run_free(&a);
    ctl_run_free(&b);

    /* A seeded sampled stream split over two turns equals the whole stream. */
    harness_ctl(&H, &a, "generate", "whole", "And", "-n", "30", "--seed", "9", "--temperature", "1", "--top-k", "40", "--top-p", "0.95");
    harness_ctl(&H, &b, "generate", "split", "And", "-n", "12", "--seed", "9", "--temperature", "1", "--top-k", "40", "--top-p", "0.95");
    ctl_run c;
    harness_ctl(&H, &c, "generate", "split", "-n", "18", "--temperature", "1", "--top-k", "40", "--top-p", "0.95");
    CHECK(a.status == 0 && b.status == 0 && c.status == 0, "exits %d %d %d", a.status, b.status, c.status);
    CHECK(a.out_len == 30 && b.out_len + c.out_len == 30 && !memcmp(a.out, b.out, b.out_len)
          && !memcmp(a.out + b.out_len, c.out, c.out_len), "continuation without text resumes the stream");
    ctl_run_free(&a);
    ctl_run_free(&b);
    ctl_run_free(&c);

    /* Text from stdin ("-"), --verbose summary on stderr. */
    harness_ctl_in(&H, &a, "Genesis", 7, "generate", "stdin1", "-", "-n", "5", "-v", (const char *)NULL);
    CHECK(a.status == 0 && a.out_len == 5, "stdin text: %d %zu", a.status, a.out_len);
    CHECK(has(a.err, "length") && has(a.err, "7 in") && has(a.err, "5 out"), "verbose summary: %s", a.err);
    ctl_run_free(&a);
}

static void generate_stop(void)
{
    ctl_run a, b;
    harness_ctl(&H, &a, "generate", "stopA", "The", "-n", "60", "-t", "0");
    CHECK(a.status == 0 && a.out_len == 60, "greedy run: %d %zu", a.status, a.out_len);
    if (a.out_len < 60) { ctl_run_free(&a); return; }
    /* Stop on 3 bytes of the greedy stream from position 20 on (none NUL:
     * a command-line argument cannot hold one). */
    char stop[4] = "";
    size_t at = 20;
    for (; at + 3 <= 60; at++)
        if (a.out[at] && a.out[at + 1] && a.out[at + 2]) break;
    CHECK(at + 3 <= 60, "no NUL-free window in the greedy stream");
    if (at + 3 > 60) { ctl_run_free(&a); return; }
    memcpy(stop, a.out + at, 3);
    const char *hit = memmem(a.out, 60, stop, 3);   /* the first occurrence stops it */
    size_t first = hit ? (size_t)(hit - a.out) : at;
    harness_ctl(&H, &b, "generate", "stopB", "The", "-n", "60", "-t", "0", "--stop", stop);
    CHECK(b.status == 0, "exit %d: %s", b.status, b.err);
    CHECK(b.out_len == first + 3 && !memcmp(b.out, a.out, b.out_len),
          "stream ends with the stop string: %zu bytes, want %zu", b.out_len, first + 3);
    ctl_run_free(&b);

    /* The same with --json: every line is JSON, the done event says why. */
    harness_ctl(&H, &b, "generate", "stopC", "The", "-n", "60", "-t", "0", "--stop", stop, "--json");
    CHECK(b.status == 0, "exit %d: %s", b.status, b.err);
    json_t *done = NULL;
    size_t token_lines = 0;
    char *line = b.out;
    while (line && *line) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = 0;
        json_error_t je;
        json_t *j = json_loads(line, JSON_ALLOW_NUL, &je);
        CHECK(j != NULL, "not JSON: %s", line);
        const char *evn = j ? json_string_value(json_object_get(j, "event")) : NULL;
        if (evn && !strcmp(evn, "token")) {
            token_lines++;
            CHECK(json_string_value(json_object_get(j, "text")) != NULL, "token line has text");
        }
        if (evn && !strcmp(evn, "done")) { json_decref(done); done = json_incref(j); }
        json_decref(j);
        line = nl ? nl + 1 : NULL;
    }
    CHECK(done != NULL, "no done event");
    if (done) {
        const char *reason = json_string_value(json_object_get(done, "reason"));
        CHECK(reason && !strcmp(reason, "stop"), "reason %s", reason ? reason : "(none)");
        CHECK(json_integer_value(json_object_get(done, "tokens_out")) == (json_int_t)(first + 3),
              "tokens_out %lld", (long long)json_integer_value(json_object_get(done, "tokens_out")));
        CHECK(token_lines >= 1 && token_lines <= first + 3, "token lines %zu", token_lines);
    }
    json_decref(done);
    ctl_run_free(&b);
    ctl_run_free(&a);
}

/* --json token lines cut the stream on whole UTF-8 characters: their texts
 * joined equal the raw stream decoded in one go (glibc's mbrtowc held to
 * RFC 3629 as the reference; each byte that starts no valid character
 * becomes U+FFFD). */
static void generate_json_utf8(void)
{
    ctl_run a, b;
    harness_ctl(&H, &a, "generate", "u1", "x", "-n", "4000", "-t", "1", "--seed", "3");
    harness_ctl(&H, &b, "generate", "u2", "x", "-n", "4000", "-t", "1", "--seed", "3", "--json");
    CHECK(a.status == 0 && b.status == 0 && a.out_len == 4000, "runs: %d %d %zu", a.status, b.status, a.out_len);
    char *want = calloc(3 * a.out_len + 1, 1), *got = calloc(3 * a.out_len + 1, 1);
    size_t wn = 0, gn = 0, multibyte = 0, lines = 0;
    setlocale(LC_CTYPE, "C.UTF-8");
    for (size_t i = 0; i < a.out_len;) {
        mbstate_t st;
        memset(&st, 0, sizeof st);
        wchar_t wc;
        size_t r = mbrtowc(&wc, a.out + i, a.out_len - i, &st);
        if (r == 0) r = 1;   /* a NUL byte is a character of its own */
        /* glibc also takes the old 5- and 6-byte forms and values past
         * U+10FFFF; RFC 3629 UTF-8 does not. */
        int strict_bad = r != (size_t)-1 && r != (size_t)-2 && (r > 4 || wc > 0x10FFFF || (wc >= 0xD800 && wc <= 0xDFFF));
        if (r == (size_t)-1 || r == (size_t)-2 || strict_bad) {
            memcpy(want + wn, "\xef\xbf\xbd", 3);
            wn += 3;
            i++;
        } else {
            memcpy(want + wn, a.out + i, r);
            wn += r;
            i += r;
            multibyte += r > 1;
        }
    }
    for (char *line = b.out; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = 0;
        json_t *j = json_loads(line, JSON_ALLOW_NUL, NULL);
        const char *evn = json_string_value(json_object_get(j, "event"));
        if (evn && !strcmp(evn, "token")) {
            json_t *t = json_object_get(j, "text");
            size_t n = json_string_length(t);
            CHECK(n > 0 && gn + n <= 3 * a.out_len, "token text length %zu", n);
            if (n && gn + n <= 3 * a.out_len) memcpy(got + gn, json_string_value(t), n);
            gn += n;
            lines++;
        }
        json_decref(j);
        line = nl ? nl + 1 : NULL;
    }
    CHECK(gn == wn && !memcmp(got, want, wn), "joined texts (%zu bytes) differ from the decoded stream (%zu bytes)", gn, wn);
    CHECK(lines > 1, "token lines %zu", lines);
    printf("NOTE json_utf8: %zu multi-byte characters among 4000 bytes, %zu token lines\n", multibyte, lines);
    free(want);
    free(got);
    ctl_run_free(&a);
    ctl_run_free(&b);
}

static void generate_errors(void)
{
    ctl_run r;
    char longname[300];
    memset(longname, 'n', sizeof longname - 1);
    longname[sizeof longname - 1] = 0;
    harness_ctl(&H, &r, "generate", longname, "x", "-n", "1");
    CHECK(r.status == 5 && has(r.err, "bad_name"), "long name: %d %s", r.status, r.err);
    ctl_run_free(&r);
    harness_ctl(&H, &r, "generate", "bad\x01name", "x", "-n", "1");
    CHECK(r.status == 5 && has(r.err, "bad_name"), "control char: %d %s", r.status, r.err);
    ctl_run_free(&r);
    harness_ctl(&H, &r, "generate", "lim", "x", "-n", "999999999");
    CHECK(r.status == 9 && has(r.err, "limit"), "over max_tokens: %d %s", r.status, r.err);
    ctl_run_free(&r);
    /* A bad option value is status 2 whoever notices it: lindctl checks the
     * daemon's ranges, and the daemon refuses the same values. */
    static const char *const badv[][2] = { { "--top-p", "7" }, { "-t", "101" },
                                           { "--repetition-penalty", "0.5" }, { "--top-k", "300" } };
    for (size_t i = 0; i < 4; i++) {
        harness_ctl(&H, &r, "generate", "t", "x", badv[i][0], badv[i][1]);
        CHECK(r.status == 2 && has(r.err, "wants"), "%s %s: %d %s", badv[i][0], badv[i][1], r.status, r.err);
        ctl_run_free(&r);
    }
    {
        lindc *lc;
        char e[256];
        CHECK(lindc_connect(&lc, H.sock, e, sizeof e) == 0, "connect: %s", e);
        lindc_gen_opts go;
        lindc_gen_opts_init(&go);
        go.session = "t";
        go.top_p = 7;
        uint64_t gid;
        lindc_event gev;
        int grc = lindc_generate(lc, &go, &gid);
        while (!grc && !(grc = lindc_wait(lc, gid, &gev, 10000)) && !gev.final) {}
        CHECK(!grc && gev.kind == LINDC_EV_ERROR && !strcmp(gev.code, "bad_request"),
              "the daemon refuses top_p 7 too: %d %s", grc, gev.code);
        lindc_free(lc);
    }

    /* busy: hold a long turn on the session through the library, then ask lindctl. */
    lindc *c;
    CHECK(lindc_connect(&c, H.sock, NULL, 0) == 0, "connect");
    lindc_gen_opts o;
    lindc_gen_opts_init(&o);
    o.session = "busy1";
    o.text = "x";
    o.text_len = 1;
    o.max_tokens = 65536;
    uint64_t id;
    CHECK(lindc_generate(c, &o, &id) == 0, "send");
    lindc_event ev;
    CHECK(lindc_wait(c, id, &ev, 30000) == 0 && ev.kind == LINDC_EV_TOKEN, "first token");
    harness_ctl(&H, &r, "generate", "busy1", "y", "-n", "1");
    CHECK(r.status == 8 && has(r.err, "busy"), "busy: %d %s", r.status, r.err);
    ctl_run_free(&r);
    lindc_cancel(c, id, NULL);
    while (lindc_wait(c, id, &ev, 30000) == 0 && !ev.final) {}
    CHECK(ev.kind == LINDC_EV_DONE, "cancelled turn ends with done");
    lindc_free(c);
}

static void generate_ctrl_c(void)
{
    char *argv[] = { "lindctl", "--socket", H.sock, "generate", "intr", "x", "-n", "65536", NULL };
    int out, err;
    pid_t pid = harness_spawn(&H, argv, NULL, &out, &err);
    /* Wait for the stream to start, then Ctrl-C. */
    char buf[4096];
    ssize_t n = read(out, buf, sizeof buf);
    CHECK(n > 0, "no output before Ctrl-C");
    kill(pid, SIGINT);
    ctl_run r = { 0 };
    harness_collect(&H, pid, out, err, &r);
    CHECK(r.status == 130, "exit %d, want 130 (stderr %s)", r.status, r.err);
    CHECK(has(r.err, "cancelled"), "stderr: %s", r.err);
    size_t streamed = (size_t)n + r.out_len;
    ctl_run_free(&r);
    /* The session kept what was streamed: its tokens are the 1-byte text,
     * the bytes streamed and, depending on counting, BOS. */
    harness_ctl(&H, &r, "sessions", "show", "intr", "--json");
    json_t *j = json_loads(r.out, JSON_ALLOW_NUL, NULL);
    CHECK(j != NULL, "show --json: %s", r.out);
    json_int_t tokens = j ? json_integer_value(json_object_get(j, "tokens")) : 0;
    CHECK(tokens > 0 && (size_t)tokens >= streamed && (size_t)tokens <= streamed + 2,
          "session has %lld tokens after %zu streamed bytes", (long long)tokens, streamed);
    json_decref(j);
    ctl_run_free(&r);
}

/* ---- sessions ---------------------------------------------------------------- */

static json_int_t show_tokens(const char *name)
{
    ctl_run r;
    harness_ctl(&H, &r, "sessions", "show", name, "--json");
    json_t *j = json_loads(r.out ? r.out : "", JSON_ALLOW_NUL, NULL);
    json_int_t t = j ? json_integer_value(json_object_get(j, "tokens")) : -1;
    json_decref(j);
    ctl_run_free(&r);
    return t;
}

static void sessions_all(void)
{
    ctl_run r, a, b;
    harness_ctl(&H, &r, "generate", "alpha", "Hello there", "-n", "20", "-t", "0");
    CHECK(r.status == 0, "generate alpha %d", r.status);
    ctl_run_free(&r);

    harness_ctl(&H, &r, "sessions", "ls");
    CHECK(r.status == 0 && has(r.out, "SESSION") && has(r.out, "alpha"), "ls: %d %s", r.status, r.out);
    ctl_run_free(&r);
    harness_ctl(&H, &r, "sessions", "ls", "--json");
    json_t *j = json_loads(r.out, JSON_ALLOW_NUL, NULL);
    json_t *arr = json_object_get(j, "sessions");
    int found = 0;
    for (size_t i = 0; i < json_array_size(arr); i++) {
        json_t *s = json_array_get(arr, i);
        const char *name = json_string_value(json_object_get(s, "session"));
        if (name && !strcmp(name, "alpha")) found = json_integer_value(json_object_get(s, "tokens")) > 20;
    }
    CHECK(found, "ls --json lists alpha with its tokens: %s", r.out);
    json_decref(j);
    ctl_run_free(&r);

    harness_ctl(&H, &r, "sessions", "show", "alpha");
    CHECK(r.status == 0 && has(r.out, "tokens") && has(r.out, "Hello there"), "show: %s", r.out);
    ctl_run_free(&r);
    json_int_t alpha_tokens = show_tokens("alpha");
    CHECK(alpha_tokens >= 31, "alpha tokens %lld", (long long)alpha_tokens);

    harness_ctl(&H, &r, "sessions", "show", "nosuch");
    CHECK(r.status == 6 && has(r.err, "not_found"), "show missing: %d %s", r.status, r.err);
    ctl_run_free(&r);

    /* fork: same state, so the same greedy continuation. */
    harness_ctl(&H, &r, "sessions", "fork", "alpha", "beta");
    CHECK(r.status == 0 && has(r.out, "beta"), "fork: %d %s", r.status, r.err);
    ctl_run_free(&r);
    CHECK(show_tokens("beta") == alpha_tokens, "fork keeps the token count");
    harness_ctl(&H, &r, "sessions", "fork", "alpha", "beta");
    CHECK(r.status == 7 && has(r.err, "exists"), "fork onto existing: %d %s", r.status, r.err);
    ctl_run_free(&r);
    harness_ctl(&H, &r, "sessions", "fork", "nosuch", "gamma");
    CHECK(r.status == 6, "fork of missing: %d", r.status);
    ctl_run_free(&r);

    /* export / import round trip. */
    char file[256], bad[256];
    snprintf(file, sizeof file, "%s/alpha.lind", H.dir);
    harness_ctl(&H, &r, "sessions", "export", "alpha", file);
    CHECK(r.status == 0 && has(r.out, "exported"), "export: %d %s", r.status, r.err);
    ctl_run_free(&r);
    struct stat sb;
    CHECK(stat(file, &sb) == 0 && sb.st_size > 64, "export file written");
    harness_ctl(&H, &r, "sessions", "import", "delta", file);
    CHECK(r.status == 0 && has(r.out, "imported"), "import: %d %s", r.status, r.err);
    ctl_run_free(&r);
    CHECK(show_tokens("delta") == alpha_tokens, "import keeps the token count");
    harness_ctl(&H, &r, "sessions", "import", "delta", file);
    CHECK(r.status == 7, "import onto existing: %d %s", r.status, r.err);
    ctl_run_free(&r);

    harness_ctl(&H, &a, "generate", "alpha", "-n", "25", "-t", "0");
    harness_ctl(&H, &b, "generate", "delta", "-n", "25", "-t", "0");
    CHECK(a.status == 0 && b.status == 0 && a.out_len == 25 && b.out_len == 25
          && !memcmp(a.out, b.out, 25), "imported state continues like the original");
    ctl_run_free(&a);
    ctl_run_free(&b);
    harness_ctl(&H, &b, "generate", "beta", "-n", "25", "-t", "0");
    harness_ctl(&H, &a, "generate", "delta", "-n", "1", "-t", "0");   /* keep delta busy-free */
    CHECK(b.status == 0 && b.out_len == 25, "fork generates");
    ctl_run_free(&a);
    ctl_run_free(&b);

    /* Broken import files and local file errors. */
    snprintf(bad, sizeof bad, "%s/garbage.lind", H.dir);
    FILE *f = fopen(bad, "w");
    fputs("this is not an export", f);
    fclose(f);
    harness_ctl(&H, &r, "sessions", "import", "eps", bad);
    CHECK((r.status == 10 || r.status == 5) && (has(r.err, "bad_state") || has(r.err, "bad_request")),
          "garbage import: %d %s", r.status, r.err);
    ctl_run_free(&r);
    CHECK(show_tokens("eps") == -1, "a refused import creates nothing");
    harness_ctl(&H, &r, "sessions", "import", "eps", "/nonexistent/file");
    CHECK(r.status == 13 && has(r.err, "/nonexistent/file"), "missing file: %d %s", r.status, r.err);
    ctl_run_free(&r);
    harness_ctl(&H, &r, "sessions", "export", "alpha", "/nonexistent/dir/f");
    CHECK(r.status == 13, "unwritable export path: %d %s", r.status, r.err);
    ctl_run_free(&r);
    harness_ctl(&H, &r, "sessions", "export", "nosuch", file);
    CHECK(r.status == 6, "export of missing: %d", r.status);
    ctl_run_free(&r);

    /* rm: several at once; a missing one fails the command but not the rest. */
    harness_ctl(&H, &r, "sessions", "rm", "beta", "nosuch", "delta");
    CHECK(r.status == 6 && has(r.out, "deleted beta") && has(r.out, "deleted delta"), "rm: %d %s %s", r.status, r.out, r.err);
    ctl_run_free(&r);
    CHECK(show_tokens("beta") == -1 && show_tokens("delta") == -1, "deleted sessions are gone");
    harness_ctl(&H, &r, "sessions", "ls");
    CHECK(!has(r.out, "beta") && has(r.out, "alpha"), "ls after rm: %s", r.out);
    ctl_run_free(&r);
}

static void stats_table_and_json(void)
{
    ctl_run r;
    harness_ctl(&H, &r, "stats");
    CHECK(r.status == 0, "exit %d %s", r.status, r.err);
    CHECK(has(r.out, "uptime") && has(r.out, "tokens") && has(r.out, "step ms") && has(r.out, "backend"),
          "table: %s", r.out);
    ctl_run_free(&r);
    harness_ctl(&H, &r, "stats", "--json");
    json_t *j = json_loads(r.out, JSON_ALLOW_NUL, NULL);
    CHECK(j != NULL, "json: %s", r.out);
    CHECK(json_integer_value(json_object_get(j, "tokens_out")) >= 100, "tokens_out counts what we generated");
    CHECK(json_integer_value(json_object_get(j, "connections")) >= 1, "our own connection counts");
    json_t *model = json_object_get(json_object_get(j, "hello"), "model");
    CHECK(json_string_value(json_object_get(model, "fingerprint")) != NULL, "hello.model.fingerprint");
    json_decref(j);
    ctl_run_free(&r);
}

/* ---- stress ------------------------------------------------------------------- */

/* The daemon's tokens_out (`lindctl stats`); 0 when it cannot be read. */
static unsigned long long daemon_tokens_out(void)
{
    ctl_run r;
    harness_ctl(&H, &r, "stats");
    unsigned long long in = 0, out = 0;
    const char *p = r.out ? strstr(r.out, "\ntokens ") : NULL;
    if (!p || sscanf(p, " tokens %llu in, %llu out", &in, &out) != 2)
        out = 0;
    ctl_run_free(&r);
    return out;
}

/* Wait (an event, not a time) until the daemon has streamed `more` tokens
 * past `base`; 0 when it did, -1 at the limit (60 s times the scale). */
static int wait_tokens_out(unsigned long long base, unsigned long long more)
{
    double deadline = clock_mono_s() + 60 * H.scale;
    while (daemon_tokens_out() < base + more) {
        if (clock_mono_s() > deadline)
            return -1;
        harness_sleep_ms(50);
    }
    return 0;
}

/* Ctrl-C mid-run: stress reports the windows it measured, says how many
 * it did not reach, and writes no rows of zeros to the CSV. */
static void stress_ctrl_c(void)
{
    char csv[256];
    snprintf(csv, sizeof csv, "%s/intr.csv", H.dir);
    char *argv[] = { "lindctl", "--socket", H.sock, "stress", "--sessions", "2", "--tokens", "2000000",
                     "--windows", "1000", "--prefix", "intr", "--csv", csv, NULL };
    int out, err;
    unsigned long long base = daemon_tokens_out();
    pid_t pid = harness_spawn(&H, argv, NULL, &out, &err);
    CHECK(pid > 0, "spawn");
    /* Interrupted once both sessions are well into their first 2,000-token
     * window (a few hundred tokens on a quiet machine's old 3 s sleep). */
    CHECK(wait_tokens_out(base, 400) == 0, "stress streamed no tokens");
    kill(pid, SIGINT);
    ctl_run r;
    harness_collect(&H, pid, out, err, &r);
    CHECK(r.status == 130, "interrupted: %d %s", r.status, r.err);
    CHECK(has(r.out, "windows not reached"), "says windows were not reached: %.400s", r.out);
    /* Every table row printed has samples. */
    const char *p = strstr(r.out, "tokens/s   rss MB\n");
    int rows = 0, zero = 0;
    for (p = p ? strchr(p, '\n') + 1 : NULL; p && *p && strchr(p, '\n'); p = strchr(p, '\n') + 1) {
        unsigned long long a, b, samples;
        if (sscanf(p, " %llu-%llu %llu", &a, &b, &samples) != 3) break;
        rows++;
        if (!samples) zero++;
    }
    CHECK(rows >= 1 && zero == 0, "%d rows, %d with no samples", rows, zero);
    FILE *f = fopen(csv, "r");
    char line[512];
    int crow = 0, czero = 0;
    while (f && fgets(line, sizeof line, f)) {
        unsigned long long a, b, samples;
        if (sscanf(line, "%llu,%llu,%llu", &a, &b, &samples) != 3) continue;
        crow++;
        if (!samples) czero++;
    }
    if (f) fclose(f);
    CHECK(crow == rows && czero == 0, "csv: %d rows (table %d), %d empty", crow, rows, czero);
    ctl_run_free(&r);
}

static void stress_small(void)
{
    char csv[256], png[256];
    snprintf(csv, sizeof csv, "%s/stress.csv", H.dir);
    snprintf(png, sizeof png, "%s/stress.png", H.dir);
    ctl_run r;
    harness_ctl(&H, &r, "stress", "--sessions", "3", "--tokens", "120", "--windows", "4",
                "--prefix", "st", "--csv", csv, "--plot", png, "--progress");
    CHECK(r.status == 0, "exit %d: %s", r.status, r.err);
    CHECK(has(r.err, "\r") && has(r.err, "360/360 tokens (100%)") && has(r.err, "tok/s") && has(r.err, "errors 0"),
          "progress line: %s", r.err);
    CHECK(has(r.out, "tokens/s aggregate") && has(r.out, "sessions finished: 3/3; errors: 0")
          && has(r.out, "daemon RSS (pid"), "report: %s", r.out);
    ctl_run_free(&r);

    FILE *f = fopen(csv, "r");
    CHECK(f != NULL, "csv written");
    if (f) {
        char line[512];
        CHECK(fgets(line, sizeof line, f) && has(line, "tokens_from,tokens_to"), "csv header");
        int rows = 0;
        unsigned long long from, to, samples, total = 0, prev_to = 0;
        double p50, p90, p99, max, mean, tps, rss;
        while (fgets(line, sizeof line, f)) {
            if (sscanf(line, "%llu,%llu,%llu,%lf,%lf,%lf,%lf,%lf,%lf,%lf", &from, &to, &samples,
                       &p50, &p90, &p99, &max, &mean, &tps, &rss) != 10) {
                CHECK(0, "bad csv row: %s", line);
                continue;
            }
            rows++;
            CHECK(from == prev_to && to == from + 30, "window bounds %llu-%llu", from, to);
            prev_to = to;
            CHECK(p50 > 0 && p50 <= p90 && p90 <= p99 && p99 <= max, "ordered percentiles: %s", line);
            CHECK(tps > 0 && rss > 1, "tokens/s and RSS: %s", line);
            total += samples;
        }
        CHECK(rows == 4, "rows %d", rows);
        /* Every token but each session's first (reported as TTFT) is a sample. */
        CHECK(total == 3 * 120 - 3, "latency samples %llu", total);
        fclose(f);
    }
    f = fopen(png, "rb");
    unsigned char magic[8] = { 0 };
    CHECK(f && fread(magic, 1, 8, f) == 8 && !memcmp(magic, "\x89PNG\r\n\x1a\n", 8), "png written");
    if (f) fclose(f);
    harness_ctl(&H, &r, "sessions", "ls");
    CHECK(!has(r.out, "st-0"), "stress deletes its sessions: %s", r.out);
    ctl_run_free(&r);

    /* --json: the same report as one object. */
    harness_ctl(&H, &r, "stress", "--sessions", "2", "--tokens", "30", "--windows", "3", "--json");
    CHECK(r.status == 0, "json run: exit %d %s", r.status, r.err);
    json_t *j = json_loads(r.out, 0, NULL);
    CHECK(j && json_integer_value(json_object_get(j, "tokens")) == 60
          && json_integer_value(json_object_get(j, "finished")) == 2
          && json_real_value(json_object_get(j, "tokens_per_s")) > 0
          && json_array_size(json_object_get(j, "errors")) == 0, "summary: %s", r.out);
    json_t *w = json_object_get(j, "windows");
    json_int_t samples = 0;
    for (size_t i = 0; i < json_array_size(w); i++)
        samples += json_integer_value(json_object_get(json_array_get(w, i), "samples"));
    CHECK(json_array_size(w) == 3 && samples == 58, "windows %zu samples %lld", json_array_size(w), (long long)samples);
    CHECK(json_real_value(json_object_get(json_object_get(j, "rss_mb"), "peak")) > 1, "rss");
    json_decref(j);
    ctl_run_free(&r);
}

static void stress_many_turns(void)
{
    /* A daemon whose turns are capped at 50 tokens: stress goes on in as
     * many turns as it takes, and the stream stays one stream. */
    harness_stop(&H);
    H.extra[0] = "--max-tokens";
    H.extra[1] = "50";
    H.extra[2] = "--max-inflight";
    H.extra[3] = "2";
    CHECK(harness_start(&H) == 0, "start with --max-tokens 50 --max-inflight 2");
    H.extra[0] = NULL;
    char csv[256];
    snprintf(csv, sizeof csv, "%s/turns.csv", H.dir);
    ctl_run r;
    harness_ctl(&H, &r, "stress", "--sessions", "2", "--tokens", "130", "--windows", "2", "--csv", csv, "--keep",
                "--prefix", "mt");
    CHECK(r.status == 0 && has(r.out, "sessions finished: 2/2; errors: 0"), "exit %d: %s %s", r.status, r.out, r.err);
    ctl_run_free(&r);
    FILE *f = fopen(csv, "r");
    char line[512];
    unsigned long long total = 0, from, to, samples;
    if (f) {
        if (!fgets(line, sizeof line, f)) line[0] = 0;
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "%llu,%llu,%llu", &from, &to, &samples) == 3) total += samples;
        fclose(f);
    }
    CHECK(total == 2 * 130 - 2, "latency samples over 3 turns each: %llu", total);
    /* The kept sessions hold the whole stream: BOS, the 4-byte prompt, 130 tokens. */
    CHECK(show_tokens("mt-0") == 135 && show_tokens("mt-1") == 135, "session tokens %lld %lld",
          (long long)show_tokens("mt-0"), (long long)show_tokens("mt-1"));
    harness_ctl(&H, &r, "generate", "mt-0", "-n", "51");
    CHECK(r.status == 9 && has(r.err, "limit"), "-n over this daemon's max_tokens: %d %s", r.status, r.err);
    ctl_run_free(&r);
    /* Session 0 (seed 1, prompt "The ") is where three plain turns get. */
    harness_ctl(&H, &r, "generate", "ref", "The ", "-n", "50", "--seed", "1");
    ctl_run_free(&r);
    harness_ctl(&H, &r, "generate", "ref", "-n", "50");
    ctl_run_free(&r);
    harness_ctl(&H, &r, "generate", "ref", "-n", "30");
    ctl_run_free(&r);
    ctl_run a, b;
    harness_ctl(&H, &a, "generate", "mt-0", "-n", "20", "-t", "0");
    harness_ctl(&H, &b, "generate", "ref", "-n", "20", "-t", "0");
    CHECK(a.status == 0 && b.status == 0 && a.out_len == 20 && b.out_len == 20 && !memcmp(a.out, b.out, 20),
          "stress's session continues like the same turns done by hand");
    ctl_run_free(&a);
    ctl_run_free(&b);
    /* Three sessions on one connection that takes two requests: the third
     * is refused, reported, and decides the exit status. */
    /* 50 tokens (this daemon's most): the two admitted turns are still running when the
     * third request arrives, however slow the build (a sanitizer's) */
    harness_ctl(&H, &r, "stress", "--sessions", "3", "--connections", "1", "--tokens", "50", "--prefix", "lim");
    CHECK(r.status == 9, "exit %d, want 9 (limit)", r.status);
    CHECK(has(r.out, "sessions finished: 2/3; errors: 1") && has(r.out, "1 x limit")
          && has(r.out, "error limit on lim-2") && has(r.err, "error on lim-2: limit"),
          "report: %s / %s", r.out, r.err);
    ctl_run_free(&r);
    harness_ctl(&H, &r, "sessions", "rm", "mt-0", "mt-1", "ref");
    CHECK(r.status == 0, "rm %d", r.status);
    ctl_run_free(&r);
    harness_stop(&H);
    CHECK(harness_start(&H) == 0, "restart with defaults");
}

static void stress_daemon_dies(void)
{
    /* The daemon goes away mid-run: every session's error is reported and
     * the exit status says the connection was lost. */
    char *argv[] = { "lindctl", "--socket", H.sock, "stress", "--sessions", "2", "--tokens", "100000000",
                     "--no-progress", NULL };
    int out, err;
    unsigned long long base = daemon_tokens_out();
    pid_t pid = harness_spawn(&H, argv, NULL, &out, &err);
    /* Killed once both sessions are streaming. */
    CHECK(wait_tokens_out(base, 200) == 0, "stress streamed no tokens");
    harness_stop_sig(&H, SIGKILL);
    ctl_run r = { 0 };
    harness_collect(&H, pid, out, err, &r);
    CHECK(r.status == 4, "exit %d, want 4: %s", r.status, r.err);
    CHECK(has(r.out, "errors: 2") && has(r.err, "connection"), "report: %s / %s", r.out, r.err);
    ctl_run_free(&r);
    CHECK(harness_start(&H) == 0, "restart");
}

int main(void)
{
    if (harness_init(&H, 32, 2) != 0) {
        printf("FAIL setup: cannot write the test model\n");
        return 1;
    }
    RUN(absent_daemon);
    RUN(usage_errors);
    RUN(help_and_version);
    if (harness_start(&H) != 0) {
        printf("FAIL setup: lind serve did not start\n");
        harness_free(&H);
        return 1;
    }
    RUN(output_paths_first);
    RUN(score_progress_on_terminal);
    RUN(generate_streams);
    RUN(request_log);
    RUN(request_log_file_and_levels);
    RUN(prompt_progress);
    RUN(random_seeds);
    RUN(show_uncommitted);
    RUN(generate_stop);
    RUN(generate_json_utf8);
    RUN(generate_errors);
    RUN(generate_ctrl_c);
    RUN(sessions_all);
    RUN(stats_table_and_json);
    RUN(stress_small);
    RUN(stress_many_turns);
    RUN(stress_ctrl_c);
    RUN(stress_daemon_dies);
    harness_free(&H);
    return check_exit();
}
