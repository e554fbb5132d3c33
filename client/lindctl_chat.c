/* client/lindctl_chat.c — `lindctl chat SESSION`: an interactive terminal
 * chat. Line editing and history come from libedit; each line is one
 * generate turn whose tokens are printed as they stream; Ctrl-C cancels
 * the turn in flight (at the prompt it clears the line); when the daemon
 * goes away chat says so, reconnects by itself and picks the session up
 * where the daemon saved it. */
#include "client/lindctl.h"

#include <errno.h>
#include <getopt.h>
#include <histedit.h>
#include <limits.h>
#include <langinfo.h>
#include <locale.h>
#include <poll.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <wchar.h>

#define MAX_STOPS 8

static void usage(FILE *f)
{
    fprintf(f,
"usage: lindctl chat SESSION [options]\n"
"\n"
"Chat with the model in SESSION (created on first use; when it exists its\n"
"transcript tail is shown first). Each line you enter is appended to the\n"
"session and the reply streams as it is generated. An empty line lets the\n"
"model go on without new text.\n"
"\n"
"  Ctrl-C   cancel the reply in flight (at the prompt: clear the line)\n"
"  Ctrl-D   quit (so does /quit)\n"
"  Up/Down  history (kept in ~/.lindctl_history), emacs-style editing (libedit)\n"
"\n"
"If the daemon stops or restarts, chat says so, reconnects by itself and\n"
"resumes the session from its last saved state.\n"
"\n"
"options:\n"
"  -n, --max-tokens N     reply length (default 200)\n"
"      --seed S, -t/--temperature T, --top-k K, --top-p P, --stop S (repeatable)\n"
"                         sampling, as for lindctl generate (the seed applies to\n"
"                         the first turn; later turns continue its random stream)\n"
"      --socket PATH      the daemon's socket (default ./lind.sock)\n");
}

typedef struct chat {
    ctl_opts g;
    lindc_gen_opts o;
    lindc *c;               /* NULL while the daemon is away */
    char *hist_path;
    EditLine *el;
    int at_prompt;          /* el_gets() is running: notices must redraw the line */
    int said_down;          /* "the daemon is down" was printed for this outage */
    int retry_ms;           /* current reconnect back-off */
    double next_try;        /* monotonic seconds of the next reconnect attempt */
} chat;

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static const char *prompt_fn(EditLine *el)
{
    (void)el;
    return "you> ";
}

/* The chat whose prompt is on screen, so notices printed while the user
 * types can redraw it (set only around el_gets). */
static chat *prompt_owner;

static void notice(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void notice(const char *fmt, ...)
{
    fflush(stdout);
    chat *ch = prompt_owner;
    int redraw = ch && ch->at_prompt;
    if (redraw && isatty(2)) fputs("\r\033[K", stderr);   /* over the prompt line */
    va_list ap;
    va_start(ap, fmt);
    fputc('[', stderr);
    vfprintf(stderr, fmt, ap);
    fputs("]\n", stderr);
    va_end(ap);
    if (redraw) el_set(ch->el, EL_REFRESH);
}

/* hello + info: print what we are talking to and where the session is.
 * `first`: also show the transcript tail. Returns 0, or a lindc code when
 * the connection failed. */
static int chat_greet(chat *ch, int first)
{
    lindc_req r;
    lindc_event ev;
    lindc_req_init(&r, "hello");
    int rc = lindc_call(ch->c, &r, &ev, 10000);
    lindc_req_free(&r);
    if (rc == LINDC_ESERVER) {
        notice("lind: %s: %s", ev.code, ev.message);
        return rc;
    }
    if (rc) return rc;
    char server[64] = "?", backend[32] = "?", model[256] = "?";
    lindc_get_strcpy(ev.map, "server", server, sizeof server);
    lindc_get_strcpy(ev.map, "backend", backend, sizeof backend);
    lindc_get_strcpy(lindc_get(ev.map, "model"), "path", model, sizeof model);
    if (first)
        notice("lind chat: session \"%s\" on %s (model %s, %s backend). "
               "Ctrl-C cancels a reply, Ctrl-D quits.", ch->o.session, server, model, backend);

    lindc_req_init(&r, "info");
    lindc_req_str(&r, "session", ch->o.session);
    rc = lindc_call(ch->c, &r, &ev, 10000);
    lindc_req_free(&r);
    if (rc == LINDC_ESERVER) {
        if (!strcmp(ev.code, "not_found")) {
            notice(first ? "new session \"%s\""
                         : "reconnected; session \"%s\" is not in the daemon's store (never saved)",
                   ch->o.session);
            return 0;
        }
        notice("lind: %s: %s", ev.code, ev.message);
        return strcmp(ev.code, "shutting_down") ? 0 : rc;
    }
    if (rc) return rc;
    uint64_t tokens = 0;
    lindc_get_u64(ev.map, "tokens", &tokens);
    if (first) {
        const msgpack_object *tr = lindc_get(ev.map, "transcript");
        notice("resuming \"%s\" at %llu tokens%s", ch->o.session, (unsigned long long)tokens,
               tr && tr->type == MSGPACK_OBJECT_ARRAY && tr->via.array.size ? "; the transcript's tail:" : "");
        ctl_print_transcript(tr, stdout, "you> ", !isatty(1));
        fflush(stdout);
    } else {
        notice("reconnected; session \"%s\" is at %llu tokens", ch->o.session, (unsigned long long)tokens);
    }
    return 0;
}

/* Forget a dead connection and say why; reconnecting starts now. */
static void chat_lost(chat *ch, const char *why)
{
    lindc_free(ch->c);
    ch->c = NULL;
    ch->said_down = 0;
    ch->retry_ms = 100;
    ch->next_try = mono_s() + 0.1;
    notice("lind: %s; reconnecting to %s", why, ch->g.socket);
}

/* One reconnect attempt. 0 once connected (and greeted), else <0. */
static int chat_try_connect(chat *ch)
{
    char err[512];
    if (lindc_connect(&ch->c, ch->g.socket, err, sizeof err) == 0) {
        if (chat_greet(ch, 0) == 0) return 0;
        lindc_free(ch->c);
        ch->c = NULL;
    } else if (!ch->said_down) {
        notice("lind: the daemon is down (%s); still trying", err);
        ch->said_down = 1;
    }
    ch->next_try = mono_s() + ch->retry_ms / 1000.0;
    if (ch->retry_ms < 1000) ch->retry_ms *= 2;
    return -1;
}

/* Block until the daemon is back (a line is waiting to be sent). 0 once
 * reconnected, EXIT_INTERRUPTED when the user pressed Ctrl-C instead. */
static int chat_wait_daemon(chat *ch)
{
    notice("waiting for the daemon to send that line (Ctrl-C quits)");
    ctl_interrupted = 0;
    for (;;) {
        double wait = ch->next_try - mono_s();
        if (wait > 0) {
            struct timespec ts = { (time_t)wait, (long)((wait - (double)(time_t)wait) * 1e9) };
            nanosleep(&ts, NULL);
        }
        if (ctl_interrupted) return EXIT_INTERRUPTED;
        if (mono_s() >= ch->next_try && chat_try_connect(ch) == 0) return 0;
    }
}

/* The connection is dead when the daemon has closed it (it restarted while
 * we sat at the prompt) or told us it is stopping. */
static const char *chat_check_idle(chat *ch)
{
    lindc_event ev;
    for (;;) {
        int rc = lindc_next(ch->c, &ev, 0);
        if (rc == -ETIMEDOUT || rc == -EINTR) return NULL;
        if (rc) return "the daemon closed the connection (it stopped or restarted)";
        if (ev.kind == LINDC_EV_ERROR && !strcmp(ev.code, "shutting_down"))
            return "the daemon is shutting down";
    }
}

/* libedit's character reader (EL_GETCFN): waits on the terminal and the
 * daemon's socket together, so a daemon that stops or comes back while the
 * user sits at the prompt is reported at once, and reconnects happen in the
 * background. Decodes UTF-8 (the locale's multibyte encoding) like
 * libedit's own reader: 1 = a character, 0 = end of input, -1 = error or
 * interrupted (errno EINTR: Ctrl-C). */
static int chat_getc(EditLine *el, wchar_t *wc)
{
    chat *ch = NULL;
    el_get(el, EL_CLIENTDATA, &ch);
    char mb[MB_LEN_MAX];
    size_t nb = 0;
    for (;;) {
        struct pollfd p[2] = { { .fd = 0, .events = POLLIN },
                               { .fd = ch->c ? lindc_fd(ch->c) : -1, .events = POLLIN } };
        struct timespec ts, *tsp = NULL;
        if (!ch->c) {
            double w = ch->next_try - mono_s();
            if (w < 0) w = 0;
            ts.tv_sec = (time_t)w;
            ts.tv_nsec = (long)((w - (double)ts.tv_sec) * 1e9);
            tsp = &ts;
        }
        /* A Ctrl-C that lands while we are not blocked (echoing the last
         * key, say) only sets the flag: check it with SIGINT blocked and
         * wait with it unblocked atomically (ppoll), so none is missed. */
        sigset_t block, orig;
        sigemptyset(&block);
        sigaddset(&block, SIGINT);
        sigprocmask(SIG_BLOCK, &block, &orig);
        if (ctl_interrupted) {
            sigprocmask(SIG_SETMASK, &orig, NULL);
            errno = EINTR;
            return -1;
        }
        int n = ppoll(p, 2, tsp, &orig);
        int poll_errno = errno;
        sigprocmask(SIG_SETMASK, &orig, NULL);
        errno = poll_errno;
        if (n < 0) {
            if (errno == EINTR && !ctl_interrupted) continue;   /* SIGWINCH, SIGCONT */
            return -1;
        }
        if (!ch->c && mono_s() >= ch->next_try) chat_try_connect(ch);
        if (n > 0 && p[1].revents && ch->c) {
            const char *why = chat_check_idle(ch);
            if (why) chat_lost(ch, why);
        }
        if (n <= 0 || !p[0].revents) continue;
        ssize_t got = read(0, mb + nb, 1);
        if (got < 0) {
            if (errno == EINTR && !ctl_interrupted) continue;
            return -1;
        }
        if (got == 0) {
            *wc = 0;
            return 0;
        }
        nb++;
        mbstate_t st;
        memset(&st, 0, sizeof st);
        size_t r = mbrtowc(wc, mb, nb, &st);
        if (r == (size_t)-2 && nb < sizeof mb) continue;   /* more bytes of one character */
        if (r == (size_t)-1 || r == (size_t)-2) {           /* not a character: drop it */
            nb = 0;
            continue;
        }
        return 1;
    }
}

/* One turn. Returns 0 when it ended (done or an error event, both shown),
 * or a lindc code when the connection broke. */
static int chat_turn(chat *ch, const char *text, size_t len)
{
    lindc_gen_opts o = ch->o;
    o.text = len ? text : NULL;
    o.text_len = len;
    uint64_t id;
    ctl_interrupted = 0;
    int rc = lindc_generate(ch->c, &o, &id);
    if (rc) return rc;
    ch->o.has_seed = 0;   /* --seed seeds the first turn; later ones continue its RNG */
    int cancel_sent = 0, at_line_start = 1;
    for (;;) {
        if (ctl_interrupted && !cancel_sent) {
            cancel_sent = 1;
            if ((rc = lindc_cancel(ch->c, id, NULL))) return rc;
        }
        lindc_event ev;
        rc = lindc_next(ch->c, &ev, -1);
        if (rc == -EINTR) continue;
        if (rc) {
            if (!at_line_start) fputc('\n', stdout);
            return rc;
        }
        if (ev.kind == LINDC_EV_ERROR && ev.id == 0) {
            if (!at_line_start) fputc('\n', stdout);
            notice("lind: %s: %s", ev.code, ev.message);
            return !strcmp(ev.code, "shutting_down") ? LINDC_ECLOSED : 0;
        }
        if (ev.id != id) continue;
        if (ev.kind == LINDC_EV_TOKEN && ev.len) {
            ctl_write_text(stdout, ev.data, ev.len, !isatty(1));
            fflush(stdout);
            at_line_start = ev.data[ev.len - 1] == '\n';
        } else if (ev.kind == LINDC_EV_DONE || ev.kind == LINDC_EV_ERROR) {
            if (!at_line_start) fputc('\n', stdout);
            fflush(stdout);
            char reason[32] = "";
            lindc_get_strcpy(ev.map, "reason", reason, sizeof reason);
            if (ev.kind == LINDC_EV_ERROR) {
                if (!strcmp(ev.code, "busy"))
                    notice("session \"%s\" is busy with another client's turn; try again", o.session);
                else
                    notice("lind: %s: %s", ev.code, ev.message);
                return !strcmp(ev.code, "shutting_down") ? LINDC_ECLOSED : 0;
            }
            if (!strcmp(reason, "cancelled")) notice(cancel_sent ? "cancelled" : "the daemon cancelled the reply");
            return 0;
        }
    }
}

int cmd_chat(const ctl_opts *g0, int argc, char **argv)
{
    chat ch = { .g = *g0 };
    lindc_gen_opts_init(&ch.o);
    ch.o.max_tokens = 200;
    const char *stops[MAX_STOPS];
    size_t nstop = 0;
    enum { O_SEED = 1, O_TOPK, O_TOPP, O_STOP };
    static const struct option longopts[] = {
        CTL_COMMON_LONGOPTS,
        { "max-tokens", required_argument, NULL, 'n' },
        { "seed", required_argument, NULL, O_SEED },
        { "temperature", required_argument, NULL, 't' },
        { "top-k", required_argument, NULL, O_TOPK },
        { "top-p", required_argument, NULL, O_TOPP },
        { "stop", required_argument, NULL, O_STOP },
        { 0, 0, 0, 0 },
    };
    int opt;
    uint64_t u;
    while ((opt = getopt_long(argc, argv, "hn:t:", longopts, NULL)) != -1) {
        switch (opt) {
        case CTL_OPT_SOCKET: ch.g.socket = optarg; break;
        case CTL_OPT_HELP: usage(stdout); return EXIT_OK;
        case 'n': if (ctl_parse_u64("--max-tokens", optarg, &u)) return EXIT_USAGE;
                  ch.o.max_tokens = (int64_t)u; break;
        case O_SEED: if (ctl_parse_u64("--seed", optarg, &ch.o.seed)) return EXIT_USAGE;
                     ch.o.has_seed = 1; break;
        case 't': if (ctl_parse_f64("--temperature", optarg, &ch.o.temperature) || ch.o.temperature < 0) return EXIT_USAGE;
                  break;
        case O_TOPK: if (ctl_parse_u64("--top-k", optarg, &u)) return EXIT_USAGE;
                     ch.o.top_k = (int64_t)u; break;
        case O_TOPP: if (ctl_parse_f64("--top-p", optarg, &ch.o.top_p) || ch.o.top_p < 0) return EXIT_USAGE;
                     break;
        case O_STOP:
            if (nstop == MAX_STOPS) {
                fprintf(stderr, "lindctl: at most %d --stop strings\n", MAX_STOPS);
                return EXIT_USAGE;
            }
            stops[nstop++] = optarg;
            break;
        default: usage(stderr); return EXIT_USAGE;
        }
    }
    if (argc - optind != 1) {
        fprintf(stderr, "lindctl chat: want exactly one SESSION\n");
        usage(stderr);
        return EXIT_USAGE;
    }
    ch.o.session = argv[optind];
    ch.o.stop = stops;
    ch.o.n_stop = nstop;

    /* libedit decodes keystrokes with the locale's encoding; under the
     * plain C locale (ASCII) it would drop every non-ASCII key, so take
     * UTF-8 there. */
    const char *loc = setlocale(LC_CTYPE, "");
    if (!loc || !strcmp(nl_langinfo(CODESET), "ANSI_X3.4-1968")) setlocale(LC_CTYPE, "C.UTF-8");

    int status = ctl_connect(&ch.g, &ch.c);
    if (status) return status;
    ctl_catch_sigint();
    int rc = chat_greet(&ch, 1);
    if (rc) {
        lindc_free(ch.c);
        if (rc == -EINTR) return EXIT_INTERRUPTED;
        return rc == LINDC_ESERVER ? EXIT_SHUTTING_DOWN : ctl_report_lib(rc, "chat");
    }

    EditLine *el = el_init("lindctl", stdin, stdout, stderr);
    History *hist = history_init();
    HistEvent hev;
    if (!el || !hist) {
        fprintf(stderr, "lindctl: cannot set up line editing\n");
        if (el) el_end(el);
        if (hist) history_end(hist);
        lindc_free(ch.c);
        return EXIT_INTERNAL;
    }
    history(hist, &hev, H_SETSIZE, 1000);
    history(hist, &hev, H_SETUNIQUE, 1);
    const char *home = getenv("HOME");
    if (home && *home && asprintf(&ch.hist_path, "%s/.lindctl_history", home) > 0)
        history(hist, &hev, H_LOAD, ch.hist_path);
    el_set(el, EL_EDITOR, "emacs");
    el_set(el, EL_PROMPT, prompt_fn);
    el_set(el, EL_HIST, history, hist);
    el_set(el, EL_SIGNAL, 1);
    el_set(el, EL_CLIENTDATA, &ch);
    el_set(el, EL_GETCFN, chat_getc);
    el_source(el, NULL);
    ch.el = el;
    prompt_owner = &ch;

    status = EXIT_OK;
    for (;;) {
        int count = 0;
        ctl_interrupted = 0;
        ch.at_prompt = 1;
        const char *line = el_gets(el, &count);
        ch.at_prompt = 0;
        if (!line) {
            if (count == -1 && (errno == EINTR || ctl_interrupted)) {
                /* Ctrl-C at the prompt: drop the line, prompt again. */
                fputc('\n', stdout);
                el_reset(el);
                continue;
            }
            fputc('\n', stdout);
            break;    /* Ctrl-D / end of input */
        }
        size_t len = strlen(line);
        if (!strcmp(line, "/quit\n") || !strcmp(line, "/quit")) break;
        if (!strcmp(line, "/help\n") || !strcmp(line, "/help")) {
            usage(stdout);
            continue;
        }
        if (len > 1) history(hist, &hev, H_ENTER, line);
        /* An empty line (just Enter) means "go on" without new text. */
        if (len == 1 && line[0] == '\n') len = 0;
        const char *why = ch.c ? chat_check_idle(&ch) : NULL;
        if (why) chat_lost(&ch, why);
        if (!ch.c && (status = chat_wait_daemon(&ch)) != 0) break;
        rc = chat_turn(&ch, line, len);
        if (rc == LINDC_ECLOSED || rc == LINDC_EBROKEN || rc == LINDC_EPROTO || (rc < 0 && rc != -EINTR)) {
            char buf[160];
            snprintf(buf, sizeof buf, "%s; the reply was cut off, the session keeps what the daemon saved",
                     rc == LINDC_ECLOSED || rc == LINDC_EBROKEN
                         ? "the daemon went away mid-reply" : lindc_strerror(rc));
            chat_lost(&ch, buf);
        }
    }
    prompt_owner = NULL;
    if (ch.hist_path) history(hist, &hev, H_SAVE, ch.hist_path);
    free(ch.hist_path);
    history_end(hist);
    el_end(el);
    lindc_free(ch.c);
    return status;
}
