/* tests/test_lindctl_chat.c — `lindctl chat` driven through a pseudo-
 * terminal against a real `lind serve`: a reply per line, the transcript
 * tail on resume, libedit history (Up arrow, ~/.lindctl_history), Ctrl-C
 * cancelling a reply without ending the program, Ctrl-C at the prompt
 * dropping the line, and the daemon stopping, dying mid-reply and coming
 * back while chat reconnects by itself. */
#include "tests/check.h"
#include "tests/lindctl_harness.h"

#include <jansson.h>
#include <pty.h>
#include <termios.h>

static harness H;
static char home[128];

/* One chat process on a pty, with everything it printed so far. */
typedef struct term {
    pid_t pid;
    int fd;
    char *buf;
    size_t len, mark;    /* mark: where the next expect() starts looking */
} term;

static int term_open(term *t, const char *session, const char *max_tokens)
{
    memset(t, 0, sizeof *t);
    struct winsize ws = { .ws_row = 50, .ws_col = 200 };
    t->pid = forkpty(&t->fd, NULL, NULL, &ws);
    if (t->pid < 0) return -1;
    if (t->pid == 0) {
        setenv("HOME", home, 1);
        setenv("TERM", "xterm", 1);
        unsetenv("LANG");
        unsetenv("LC_ALL");
        unsetenv("LC_CTYPE");
        execl(H.lindctl, H.lindctl, "--socket", H.sock, "chat", session, "-n", max_tokens, "-t", "0",
              (char *)NULL);
        _exit(127);
    }
    t->buf = calloc(1, 1);
    return 0;
}

/* Read what is there for up to ms milliseconds. */
static void term_pump(term *t, int ms)
{
    struct pollfd p = { .fd = t->fd, .events = POLLIN };
    double end = harness_now() + ms / 1000.0;
    do {
        int left = (int)((end - harness_now()) * 1000);
        if (poll(&p, 1, left > 0 ? left : 0) <= 0) break;
        char b[65536];
        ssize_t n = read(t->fd, b, sizeof b);
        if (n <= 0) break;
        harness_buf_add(&t->buf, &t->len, b, (size_t)n);
    } while (harness_now() < end);
}

/* Wait until `needle` shows up after the mark; moves the mark past it. */
static int term_expect(term *t, const char *needle, int timeout_s)
{
    if (H.slow) timeout_s *= 4;
    double end = harness_now() + timeout_s;
    size_t nl = strlen(needle);
    for (;;) {
        if (t->len >= t->mark + nl) {
            char *hit = memmem(t->buf + t->mark, t->len - t->mark, needle, nl);
            if (hit) {
                t->mark = (size_t)(hit - t->buf) + nl;
                return 1;
            }
        }
        if (harness_now() > end) return 0;
        term_pump(t, 50);
    }
}

/* Wait until at least `len` bytes have been printed in all. */
static void term_wait_output(term *t, size_t len, int timeout_s)
{
    double end = harness_now() + (H.slow ? 4 : 1) * timeout_s;
    while (t->len < len && harness_now() < end) term_pump(t, 50);
}

static void term_send(term *t, const char *keys)
{
    if (write(t->fd, keys, strlen(keys)) < 0) perror("pty write");
}

/* Wait for exit; returns the exit status (or 128+signal, or -1 on timeout). */
static int term_wait(term *t, int timeout_s)
{
    double end = harness_now() + (H.slow ? 4 : 1) * timeout_s;
    int st;
    while (harness_now() < end) {
        term_pump(t, 20);
        if (waitpid(t->pid, &st, WNOHANG) == t->pid) {
            t->pid = -1;
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        }
    }
    return -1;
}

static void term_close(term *t)
{
    if (t->pid > 0) {
        kill(t->pid, SIGKILL);
        waitpid(t->pid, NULL, 0);
    }
    close(t->fd);
    free(t->buf);
}

/* The last `n` chars of the screen log, printable, for failure messages. */
static const char *tail(const term *t)
{
    static char out[400];
    size_t from = t->len > 300 ? t->len - 300 : 0, o = 0;
    for (size_t i = from; i < t->len && o < sizeof out - 1; i++)
        out[o++] = (t->buf[i] >= 32 && t->buf[i] < 127) ? t->buf[i] : '.';
    out[o] = 0;
    return out;
}

/* The session's transcript "in" texts joined by '|' (via lindctl --json). */
static void transcript_ins(const char *session, char *out, size_t cap)
{
    ctl_run r;
    out[0] = 0;
    harness_ctl(&H, &r, "sessions", "show", session, "--json");
    json_t *j = json_loads(r.out ? r.out : "", JSON_ALLOW_NUL, NULL);
    json_t *tr = json_object_get(j, "transcript");
    for (size_t i = 0; i < json_array_size(tr); i++) {
        json_t *e = json_array_get(tr, i);
        const char *role = json_string_value(json_object_get(e, "role"));
        const char *text = json_string_value(json_object_get(e, "text"));
        if (role && text && !strcmp(role, "in")) {
            size_t l = strlen(out);
            snprintf(out + l, cap - l, "%s%s", l ? "|" : "", text);
        }
    }
    json_decref(j);
    ctl_run_free(&r);
}

/* ---- cases -------------------------------------------------------------------- */

static void chat_reply_and_quit(void)
{
    term t;
    CHECK(term_open(&t, "c1", "20") == 0, "forkpty");
    CHECK(term_expect(&t, "new session \"c1\"", 20), "banner: %s", tail(&t));
    CHECK(term_expect(&t, "you> ", 10), "prompt: %s", tail(&t));
    term_send(&t, "hello\r");
    CHECK(term_expect(&t, "hello", 10), "echo: %s", tail(&t));
    CHECK(term_expect(&t, "you> ", 20), "prompt after the reply: %s", tail(&t));
    term_send(&t, "\x04");   /* Ctrl-D */
    int st = term_wait(&t, 20);
    CHECK(st == 0, "Ctrl-D exits 0, got %d: %s", st, tail(&t));
    term_close(&t);
    char ins[256];
    transcript_ins("c1", ins, sizeof ins);
    CHECK(!strcmp(ins, "hello\n"), "transcript in-turns: '%s'", ins);
    ctl_run r;
    harness_ctl(&H, &r, "sessions", "show", "c1", "--json");
    json_t *j = json_loads(r.out, JSON_ALLOW_NUL, NULL);
    json_int_t tokens = json_integer_value(json_object_get(j, "tokens"));
    CHECK(tokens >= 26 && tokens <= 27, "tokens: 6 typed + 20 generated (+BOS), got %lld", (long long)tokens);
    json_decref(j);
    ctl_run_free(&r);
}

static void chat_resume_and_history(void)
{
    term t;
    CHECK(term_open(&t, "c1", "20") == 0, "forkpty");
    CHECK(term_expect(&t, "resuming \"c1\"", 20), "resume banner: %s", tail(&t));
    CHECK(term_expect(&t, "you> hello", 10), "transcript tail shown: %s", tail(&t));
    CHECK(term_expect(&t, "you> ", 10), "prompt: %s", tail(&t));
    /* Up arrow recalls "hello" from the history file; Enter sends it. */
    term_send(&t, "\x1b[A");
    CHECK(term_expect(&t, "hello", 10), "history recall: %s", tail(&t));
    term_send(&t, "\r");
    CHECK(term_expect(&t, "you> ", 20), "prompt after the reply: %s", tail(&t));
    term_send(&t, "/quit\r");
    CHECK(term_wait(&t, 20) == 0, "/quit exits 0");
    term_close(&t);
    char ins[256];
    transcript_ins("c1", ins, sizeof ins);
    CHECK(!strcmp(ins, "hello\n|hello\n"), "the recalled line was sent: '%s'", ins);
    char path[256], hist[4096] = "";
    snprintf(path, sizeof path, "%s/.lindctl_history", home);
    FILE *f = fopen(path, "r");
    CHECK(f != NULL, "history file %s", path);
    if (f) {
        size_t n = fread(hist, 1, sizeof hist - 1, f);
        hist[n] = 0;
        fclose(f);
    }
    CHECK(strstr(hist, "hello") != NULL, "history file holds the line: %s", hist);
}

static void chat_ctrl_c(void)
{
    term t;
    CHECK(term_open(&t, "c2", "65536") == 0, "forkpty");
    CHECK(term_expect(&t, "you> ", 20), "prompt: %s", tail(&t));
    /* At the prompt Ctrl-C drops the line being typed. */
    term_send(&t, "dropped");
    CHECK(term_expect(&t, "dropped", 10), "echo");
    term_send(&t, "\x03");
    CHECK(term_expect(&t, "you> ", 10), "fresh prompt after Ctrl-C: %s", tail(&t));
    /* Mid-reply Ctrl-C cancels the turn, not the program. */
    term_send(&t, "go\r");
    CHECK(term_expect(&t, "go", 10), "echo");
    size_t before = t.len;
    term_wait_output(&t, before + 200, 10);
    CHECK(t.len >= before + 200, "the reply streams before Ctrl-C");
    size_t reply_from = t.mark;
    term_send(&t, "\x03");
    CHECK(term_expect(&t, "[cancelled]", 30), "cancel notice: %s", tail(&t));
    /* The random model's control bytes reach the terminal in caret
     * notation, never raw (only the pty's own \r\n and tabs). */
    size_t raw_ctl = 0;
    for (size_t i = reply_from; i + strlen("[cancelled]") < t.mark; i++) {
        unsigned char ch = (unsigned char)t.buf[i];
        if ((ch < 0x20 && ch != '\r' && ch != '\n' && ch != '\t') || ch == 0x7f) raw_ctl++;
    }
    CHECK(raw_ctl == 0, "%zu raw control bytes in %zu bytes of reply", raw_ctl, t.mark - reply_from);
    CHECK(term_expect(&t, "you> ", 10), "prompt after cancel: %s", tail(&t));
    CHECK(waitpid(t.pid, NULL, WNOHANG) == 0, "chat is still running");
    term_send(&t, "\x04");
    CHECK(term_wait(&t, 20) == 0, "Ctrl-D exits 0");
    term_close(&t);
    char ins[256];
    transcript_ins("c2", ins, sizeof ins);
    /* The long reply may push "go" out of the transcript tail; the dropped
     * line must not be there in any case. */
    CHECK(!strstr(ins, "dropped"), "the line dropped with Ctrl-C was not sent: '%s'", ins);
    ctl_run r;
    harness_ctl(&H, &r, "sessions", "show", "c2", "--json");
    json_t *j = json_loads(r.out, JSON_ALLOW_NUL, NULL);
    json_int_t tokens = json_integer_value(json_object_get(j, "tokens"));
    CHECK(tokens > 3 && tokens < 65536, "the cancelled turn kept part of the reply: %lld", (long long)tokens);
    CHECK(json_is_false(json_object_get(j, "busy")), "session not busy after cancel");
    json_decref(j);
    ctl_run_free(&r);
}

static void chat_daemon_restart(void)
{
    term t;
    CHECK(term_open(&t, "c3", "10") == 0, "forkpty");
    CHECK(term_expect(&t, "you> ", 20), "prompt: %s", tail(&t));
    term_send(&t, "one\r");
    CHECK(term_expect(&t, "you> ", 20), "first reply: %s", tail(&t));
    /* The daemon stops and comes back while chat sits at the prompt: chat
     * says so and reconnects without a keystroke. */
    harness_stop(&H);
    CHECK(term_expect(&t, "closed the connection", 20), "notices the daemon left: %s", tail(&t));
    CHECK(term_expect(&t, "the daemon is down", 20), "says it is down: %s", tail(&t));
    CHECK(harness_start(&H) == 0, "restart");
    CHECK(term_expect(&t, "reconnected; session \"c3\" is at", 30), "reconnects by itself: %s", tail(&t));
    CHECK(term_expect(&t, "you> ", 10), "the prompt is redrawn: %s", tail(&t));
    term_send(&t, "two\r");
    CHECK(term_expect(&t, "two", 10), "echo: %s", tail(&t));
    CHECK(term_expect(&t, "you> ", 20), "reply after the reconnect: %s", tail(&t));
    /* A line typed while the daemon is away is sent once it is back. */
    harness_stop(&H);
    CHECK(term_expect(&t, "closed the connection", 20), "notices again: %s", tail(&t));
    term_send(&t, "three\r");
    CHECK(term_expect(&t, "waiting for the daemon", 20), "says the line waits: %s", tail(&t));
    CHECK(harness_start(&H) == 0, "restart");
    CHECK(term_expect(&t, "reconnected", 30), "reconnected: %s", tail(&t));
    CHECK(term_expect(&t, "you> ", 20), "reply: %s", tail(&t));
    char ins[256];
    transcript_ins("c3", ins, sizeof ins);
    CHECK(!strcmp(ins, "one\n|two\n|three\n"), "every line reached the session: '%s'", ins);
    term_send(&t, "\x04");
    CHECK(term_wait(&t, 20) == 0, "exits 0");
    term_close(&t);
}

static void chat_utf8_input(void)
{
    /* Under the plain C locale (the child has no LANG) typed UTF-8 still
     * reaches the session intact. */
    term t;
    CHECK(term_open(&t, "c5", "5") == 0, "forkpty");
    CHECK(term_expect(&t, "you> ", 20), "prompt: %s", tail(&t));
    term_send(&t, "caf\xc3\xa9 \xe2\x86\x92 \xf0\x9f\x99\x82\r");
    CHECK(term_expect(&t, "you> ", 20), "reply: %s", tail(&t));
    term_send(&t, "\x04");
    CHECK(term_wait(&t, 20) == 0, "exits 0");
    term_close(&t);
    char ins[256];
    transcript_ins("c5", ins, sizeof ins);
    CHECK(!strcmp(ins, "caf\xc3\xa9 \xe2\x86\x92 \xf0\x9f\x99\x82\n"), "transcript: '%s'", ins);
}

static void chat_daemon_dies_mid_reply(void)
{
    term t;
    CHECK(term_open(&t, "c4", "65536") == 0, "forkpty");
    CHECK(term_expect(&t, "you> ", 20), "prompt: %s", tail(&t));
    term_send(&t, "long\r");
    CHECK(term_expect(&t, "long", 10), "echo");
    size_t before = t.len;
    term_wait_output(&t, before + 200, 10);
    harness_stop_sig(&H, SIGKILL);
    CHECK(term_expect(&t, "went away mid-reply", 20), "says the reply was cut: %s", tail(&t));
    CHECK(term_expect(&t, "the daemon is down", 20), "says the daemon is down: %s", tail(&t));
    CHECK(waitpid(t.pid, NULL, WNOHANG) == 0, "chat keeps waiting");
    CHECK(harness_start(&H) == 0, "restart");
    CHECK(term_expect(&t, "reconnected", 30), "reconnects by itself: %s", tail(&t));
    CHECK(term_expect(&t, "you> ", 10), "prompt: %s", tail(&t));
    term_send(&t, "\x04");
    CHECK(term_wait(&t, 20) == 0, "exits 0");
    term_close(&t);
}

int main(void)
{
    if (harness_init(&H, 32, 2) != 0) {
        printf("FAIL setup: cannot write the test model\n");
        return 1;
    }
    snprintf(home, sizeof home, "%s/home", H.dir);
    mkdir(home, 0700);
    if (harness_start(&H) != 0) {
        printf("FAIL setup: lind serve did not start\n");
        harness_free(&H);
        return 1;
    }
    RUN(chat_reply_and_quit);
    RUN(chat_resume_and_history);
    RUN(chat_ctrl_c);
    RUN(chat_daemon_restart);
    RUN(chat_utf8_input);
    RUN(chat_daemon_dies_mid_reply);
    harness_free(&H);
    return check_exit();
}
