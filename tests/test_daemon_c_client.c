/* tests/test_daemon_c_client.c — `lind serve` end to end through the C
 * client library (client/lindclient.h).
 *
 * Starts the real daemon ($LIND_BUILD/lind, default build/lind) on a random
 * model from tests/testmodel.h, in a temporary directory. The reference for
 * "no bleed" is the engine itself, in process: each session's tokens from
 * the daemon, stepped in batches with many others, must equal a plain
 * single-session loop of model_step + sampler_next on the same model. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "client/lindclient.h"
#include "recurrent/model.h"
#include "recurrent/sampler.h"
#include "tests/check.h"
#include "tests/testmodel.h"

static char dir[256], model_dir[300], sock_path[300], db_path[300], lind_bin[512];
static pid_t server_pid = -1;

static int start_server(void)
{
    pid_t pid = fork();
    if (pid == 0) {
        char log[400];
        snprintf(log, sizeof log, "%s/server.log", dir);
        FILE *f = freopen(log, "a", stderr);
        (void)f;
        execl(lind_bin, lind_bin, "serve", "--model", model_dir, "--socket", sock_path,
              "--db", db_path, "--backend", "cpu", "--max-batch", "64", (char *)NULL);
        _exit(127);
    }
    server_pid = pid;
    int tries = (int)(3000 * test_time_scale());   /* 30 s at 10 ms a try */
    for (int i = 0; i < tries; i++) {
        lindc *c;
        if (lindc_connect(&c, sock_path, NULL, 0) == 0) { lindc_free(c); return 0; }
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) { server_pid = -1; return -1; }
        usleep(10000);
    }
    return -1;
}

static int stop_server(int sig)
{
    if (server_pid < 0) return -1;
    kill(server_pid, sig);
    int st = 0;
    waitpid(server_pid, &st, 0);
    server_pid = -1;
    if (WIFEXITED(st)) return WEXITSTATUS(st);
    return 128 + WTERMSIG(st);
}

/* The engine alone: BOS, text, then n sampled tokens. */
static int reference(const char *text, uint64_t seed, int n, uint8_t *out)
{
    model *m;
    char err[256];
    if (model_load(model_dir, "cpu", &m, err, sizeof err) != 0) return -1;
    model_slots_reserve(m, 1);
    model_slot_reset(m, 0);
    sampler_params p = sampler_defaults();
    p.temperature = 0.9f;
    p.seed = seed;
    sampler s;
    sampler_init(&s, &p);
    size_t tl = strlen(text);
    for (size_t i = 0; i < tl; i++) sampler_observe(&s, (uint8_t)text[i]);
    float logits[LIND_BYTE_VOCAB], scratch[2 * LIND_BYTE_VOCAB];
    int slot = 0, tok = LIND_BOS;
    for (size_t i = 0; i <= tl; i++) {
        model_step(m, &slot, &tok, 1, i == tl ? logits : NULL);
        if (i < tl) tok = (uint8_t)text[i];
    }
    for (int k = 0; k < n; k++) {
        tok = sampler_next(&s, logits, LIND_BYTE_VOCAB, scratch);
        sampler_observe(&s, tok);
        out[k] = (uint8_t)tok;
        if (k + 1 < n) model_step(m, &slot, &tok, 1, logits);
    }
    model_free(m);
    return 0;
}

static int generate(lindc *c, const char *session, const char *text, int has_seed, uint64_t seed,
                    int n, uint64_t *id)
{
    lindc_gen_opts o;
    lindc_gen_opts_init(&o);
    o.session = session;
    o.text = text;
    o.text_len = text ? strlen(text) : 0;
    o.max_tokens = n;
    o.temperature = 0.9;
    o.has_seed = has_seed;
    o.seed = seed;
    return lindc_generate(c, &o, id);
}

/* Collect the tokens of request id until its final event. Returns the
 * number of bytes, or -1 if the request did not end with `done`. */
static int collect(lindc *c, uint64_t id, uint8_t *out, size_t cap, char *reason)
{
    size_t n = 0;
    for (;;) {
        lindc_event ev;
        if (lindc_wait(c, id, &ev, 30000) != 0) return -1;
        if (ev.kind == LINDC_EV_TOKEN) {
            if (n + ev.len <= cap) memcpy(out + n, ev.data, ev.len);
            n += ev.len;
            continue;
        }
        if (ev.kind != LINDC_EV_DONE) return -1;
        if (reason) lindc_get_strcpy(ev.map, "reason", reason, 32);
        return (int)n;
    }
}

#define NSESS 24
/* Long enough that the streams overlap however fast a step is: the batching
 * check below needs 16+ of them in one step (at 48 tokens a fast step let
 * early streams end before the last requests arrived). */
#define NTOK  200

static void batched_sessions_equal_engine_alone(void)
{
    lindc *c;
    CHECK(lindc_connect(&c, sock_path, NULL, 0) == 0, "connect");
    uint64_t ids[NSESS];
    char names[NSESS][32], texts[NSESS][64];
    for (int i = 0; i < NSESS; i++) {
        snprintf(names[i], sizeof names[i], "batch-%d", i);
        snprintf(texts[i], sizeof texts[i], "prompt number %d %.*s", i, i, "xxxxxxxxxxxxxxxxxxxxxxxxx");
        CHECK(generate(c, names[i], texts[i], 1, 1000 + (uint64_t)i, NTOK, &ids[i]) == 0, "send %d", i);
    }
    for (int i = 0; i < NSESS; i++) {
        uint8_t got[NTOK + 8], want[NTOK];
        char reason[32] = "";
        int n = collect(c, ids[i], got, sizeof got, reason);
        CHECK(n == NTOK && !strcmp(reason, "length"), "session %d: %d tokens, %s", i, n, reason);
        CHECK(reference(texts[i], 1000 + (uint64_t)i, NTOK, want) == 0, "reference");
        CHECK(n == NTOK && !memcmp(got, want, NTOK), "session %d differs from the engine alone", i);
    }
    lindc_req r;
    lindc_req_init(&r, "stats");
    lindc_event ev;
    CHECK(lindc_call(c, &r, &ev, 10000) == 0, "stats");
    lindc_req_free(&r);
    const msgpack_object *h = lindc_get(ev.map, "batch_hist");
    uint64_t big = 0;
    CHECK(h && lindc_get_u64(h, "16-31", &big) == 0 && big > 0, "steps with 16+ sessions happened");
    lindc_free(c);
}

static void restart_split(int sig)
{
    const char *name = sig == SIGKILL ? "split-kill" : "split-term";
    const int n1 = 30, n2 = 34;
    uint8_t want[64], a[64], b[64];
    CHECK(reference("Tell me a story.", 77, n1 + n2, want) == 0, "reference");
    lindc *c;
    CHECK(lindc_connect(&c, sock_path, NULL, 0) == 0, "connect");
    uint64_t id;
    generate(c, name, "Tell me a story.", 1, 77, n1, &id);
    int na = collect(c, id, a, sizeof a, NULL);
    lindc_free(c);
    int rc = stop_server(sig);
    CHECK(rc == (sig == SIGKILL ? 128 + SIGKILL : 0), "server exit %d", rc);
    CHECK(start_server() == 0, "restart");
    CHECK(lindc_connect(&c, sock_path, NULL, 0) == 0, "reconnect");
    generate(c, name, NULL, 0, 0, n2, &id);
    int nb = collect(c, id, b, sizeof b, NULL);
    lindc_free(c);
    CHECK(na == n1 && nb == n2, "lengths %d %d", na, nb);
    CHECK(na == n1 && nb == n2 && !memcmp(a, want, n1) && !memcmp(b, want + n1, n2),
          "split stream differs from the uninterrupted one");
}

static void restart_graceful(void) { restart_split(SIGTERM); }
static void restart_sigkill(void) { restart_split(SIGKILL); }
/* SIGHUP between two turns reopens the log (stderr here: nothing to
 * reopen) and the daemon goes on: the same connection's next turn continues
 * the stream exactly, and the server has not exited. */
static void sighup_keeps_serving(void)
{
    const int n1 = 30, n2 = 34;
    uint8_t want[64], a[64], b[64];
    CHECK(reference("Tell me a story.", 77, n1 + n2, want) == 0, "reference");
    lindc *c;
    CHECK(lindc_connect(&c, sock_path, NULL, 0) == 0, "connect");
    uint64_t id;
    generate(c, "split-hup", "Tell me a story.", 1, 77, n1, &id);
    int na = collect(c, id, a, sizeof a, NULL);
    CHECK(kill(server_pid, SIGHUP) == 0, "kill -HUP");
    generate(c, "split-hup", NULL, 0, 0, n2, &id);
    int nb = collect(c, id, b, sizeof b, NULL);
    lindc_free(c);
    CHECK(lindc_connect(&c, sock_path, NULL, 0) == 0, "a new connection after SIGHUP");
    lindc_free(c);
    int st;
    CHECK(waitpid(server_pid, &st, WNOHANG) == 0, "the server exited on SIGHUP");
    CHECK(na == n1 && nb == n2 && !memcmp(a, want, n1) && !memcmp(b, want + n1, n2),
          "the stream across SIGHUP differs from the uninterrupted one (lengths %d %d)", na, nb);
}

static void garbage_gets_error_and_close(void)
{
    lindc *c;
    CHECK(lindc_connect(&c, sock_path, NULL, 0) == 0, "connect");
    const uint8_t junk[] = { 0xc1, 0x00, 0x01 };
    lindc_send_raw(c, junk, sizeof junk);
    lindc_event ev;
    int rc = lindc_next(c, &ev, T_MS(10000));
    CHECK(rc == 0 && ev.kind == LINDC_EV_ERROR && !strcmp(ev.code, "decode"), "decode error, rc %d", rc);
    rc = lindc_next(c, &ev, T_MS(10000));
    CHECK(rc == LINDC_ECLOSED, "then closed (%d)", rc);
    lindc_free(c);
    CHECK(lindc_connect(&c, sock_path, NULL, 0) == 0, "others still served");
    lindc_req r;
    lindc_req_init(&r, "generate");
    lindc_req_str(&r, "session", "bad\x01name");
    rc = lindc_call(c, &r, &ev, 10000);
    lindc_req_free(&r);
    CHECK(rc == LINDC_ESERVER && !strcmp(ev.code, "bad_name"), "bad name: %d %s", rc, ev.code);
    lindc_free(c);
}

int main(void)
{
    const char *b = getenv("LIND_BUILD");
    snprintf(lind_bin, sizeof lind_bin, "%s/lind", b && *b ? b : "build");
    snprintf(dir, sizeof dir, "/tmp/lind-ctest-XXXXXX");
    if (!mkdtemp(dir)) { printf("FAIL setup: mkdtemp\n"); return 1; }
    snprintf(model_dir, sizeof model_dir, "%s/model", dir);
    snprintf(sock_path, sizeof sock_path, "%s/lind.sock", dir);
    snprintf(db_path, sizeof db_path, "%s/lind.db", dir);
    testmodel_cfg cfg = testmodel_config(32, 2, 4, 8, 64, "linear,aft", 1, "decay");
    testmodel_opts mo = { 0.9f, 1.0f };
    if (testmodel_write(model_dir, &cfg, 11, &mo) != 0) { printf("FAIL setup: model\n"); return 1; }
    if (start_server() != 0) { printf("FAIL setup: server did not start (%s)\n", lind_bin); return 1; }
    RUN(batched_sessions_equal_engine_alone);
    RUN(restart_graceful);
    RUN(restart_sigkill);
    RUN(sighup_keeps_serving);
    RUN(garbage_gets_error_and_close);
    check_begin("graceful_exit");
    CHECK(stop_server(SIGTERM) == 0, "exit status 0 on SIGTERM");
    check_end();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) printf("NOTE could not remove %s\n", dir);
    return check_exit();
}
