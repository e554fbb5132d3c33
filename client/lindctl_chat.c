/* client/lindctl_chat.c — `lindctl chat SESSION`: an interactive terminal
 * chat. Line editing and history come from libedit; each line is one
 * generate turn whose tokens are printed as they stream; Ctrl-C cancels
 * the turn in flight (at the prompt it clears the line); when the daemon
 * goes away chat says so, reconnects by itself and picks the session up
 * where the daemon saved it. */
#include "client/lindctl.h"
#include "kernels/clock.h"
#include "recurrent/stophold.h"

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
#include <termios.h>
#include <time.h>
#include <unistd.h>
#include <wchar.h>

#define TAIL_MAX 256        /* bytes of the stream's end kept for the template */

static void usage(FILE *f)
{
    fprintf(f,
"usage: lindctl chat SESSION [options]\n"
"\n"
"Chat with the model in SESSION (created on first use; when it exists its\n"
"transcript tail is shown first). Each message you enter is appended to the\n"
"session, framed by the chat template, and the reply streams as it is\n"
"generated. An empty line lets the model go on without new text.\n"
"\n"
"  Ctrl-C   cancel the reply in flight (at the prompt: clear the line)\n"
"  Ctrl-D   quit (so do /bye and /quit)\n"
"  Up/Down  history (kept in ~/.lindctl_history), emacs-style editing (libedit)\n"
"  \"\"\"      starts a multi-line message, a line ending in \"\"\" ends it;\n"
"           a line ending in \\ goes on on the next line\n"
"  //text   sends \"/text\" (a line starting with one / is a command)\n"
"\n"
"commands:\n"
"  /help                     this text\n"
"  /bye, /quit               quit\n"
"  /set KEY VALUE            temperature, top-k, top-p, repetition-penalty,\n"
"                            repetition-window, seed, max-tokens, stop (S... or\n"
"                            none; \\n \\t \\\\ are escapes), system (TEXT or none),\n"
"                            template (none, raven, world, g1-think or a FILE)\n"
"  /show session|settings|model\n"
"  /fork NAME                copy this session to NAME (you stay here)\n"
"  /switch NAME              go to session NAME (created on first use)\n"
"  /save FILE                export this session to FILE\n"
"  /load FILE [NAME]         import FILE as NAME (default: FILE's base name) and go there\n"
"  /clear                    start afresh in a new session (SESSION-2, ...); the old one is kept\n"
"  /undo                     the session back to before its last turn (one level; kept\n"
"                            by the daemon while the session stays in its memory)\n"
"\n"
"Text typed while a reply streams is not shown inside it: it waits at the\n"
"next prompt. If the daemon stops or restarts, chat says so, reconnects by\n"
"itself and resumes the session from its last saved state; a reply cut off\n"
"that way is asked for again under the message's request id (applied once).\n"
"\n"
"options:\n"
"  -n, --max-tokens N        reply length (default 200)\n"
"      --seed S              seed of the first turn (later turns continue its\n"
"                            random stream); without it a new session gets a\n"
"                            random seed, shown in the banner\n"
"  -t, --temperature T, --top-k K, --top-p P, --repetition-penalty R,\n"
"      --repetition-window W sampling, as for lindctl generate\n"
"      --stop S              stop a reply at S (repeatable; the template's own\n"
"                            stop strings are added)\n"
"      --system TEXT         system prompt, sent before the first message of a\n"
"                            new session\n"
"      --template T          chat template: a built-in or a lind_chat.json file\n"
"                            (default: the model directory's lind_chat.json,\n"
"                            else none). Built-ins:\n");
    chat_template_list(f);
    fprintf(f,
"      --socket PATH         the daemon's socket (default $LIND_SOCKET, else ./lind.sock;\n"
"                            tcp://HOST:PORT for one started with --listen)\n"
"      --token-file PATH     over TCP, the token for hello (default $LIND_TOKEN_FILE)\n");
}

typedef struct chat {
    ctl_opts g;
    lindc_gen_opts o;       /* the settings of the next turn (o.session = session) */
    char session[256];
    char *stops[STOP_MAX];   /* --stop / /set stop (owned) */
    size_t n_stop;
    chat_template tpl;
    int tpl_chosen;         /* --template or /set template: the model's is not used */
    char *system;           /* system prompt (owned) or NULL */
    int system_pending;     /* send the system prompt before the next message */
    int after_reply;        /* the stream ends with a reply: assistant_end comes next */
    uint8_t tail[TAIL_MAX]; /* the stream's last bytes as far as chat knows */
    size_t tail_len;
    char model_path[256];
    char *model_template;   /* the daemon's chat_template JSON, or NULL */
    char typeahead[4096];   /* keys typed while a reply streamed, for the next prompt */
    size_t ta_len, ta_pos;
    FILE *ui;               /* where command output goes: stdout on a terminal, else stderr */
    lindc *c;               /* NULL while the daemon is away */
    char *hist_path;
    EditLine *el;
    int cont;               /* reading the continuation of a message: prompt "... " */
    int at_prompt;          /* el_gets() is running: notices must redraw the line */
    int said_down;          /* "the daemon is down" was printed for this outage */
    int retry_ms;           /* current reconnect back-off */
    double next_try;        /* monotonic seconds of the next reconnect attempt */
} chat;

/* The chat whose prompt is on screen, so notices printed while the user
 * types can redraw it (set only around el_gets). */
static chat *prompt_owner;

static void tail_add(chat *ch, const void *p, size_t n)
{
    const uint8_t *b = p;
    if (n >= TAIL_MAX) {
        memcpy(ch->tail, b + n - TAIL_MAX, TAIL_MAX);
        ch->tail_len = TAIL_MAX;
        return;
    }
    if (ch->tail_len + n > TAIL_MAX) {
        size_t drop = ch->tail_len + n - TAIL_MAX;
        memmove(ch->tail, ch->tail + drop, ch->tail_len - drop);
        ch->tail_len -= drop;
    }
    memcpy(ch->tail + ch->tail_len, b, n);
    ch->tail_len += n;
}

static const char *prompt_fn(EditLine *el)
{
    chat *ch = NULL;
    el_get(el, EL_CLIENTDATA, &ch);
    return ch && ch->cont ? "... " : "you> ";
}

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

/* Take up the template the daemon reports for its model (hello's
 * model.chat_template) unless the user chose one. */
static void chat_use_model_template(chat *ch, int say)
{
    if (ch->tpl_chosen || !ch->model_template) return;
    chat_template t;
    char err[512];
    if (chat_template_from_json(&t, ch->model_template, strlen(ch->model_template),
                               "the model's lind_chat.json", err, sizeof err)) {
        notice("ignoring the model's chat template: %s", err);
        return;
    }
    chat_template_free(&ch->tpl);
    ch->tpl = t;
    if (!ch->system && t.default_system) ch->system = strdup(t.default_system);
    if (say) notice("chat template \"%s\" served by the daemon (--template none turns it off)", t.name);
}

/* The session keeps the template it was started with (info's
 * chat_template, docs/PROTOCOL.md): a built-in one is taken up unless the
 * user chose a template; otherwise say that the daemon will refuse
 * messages framed with another. */
static void chat_keep_session_template(chat *ch, const msgpack_object *info)
{
    uint64_t h = 0;
    char name[64] = "";
    if (lindc_get_u64(info, "chat_template", &h) || !h || h == ch->tpl.hash) return;
    lindc_get_strcpy(info, "chat_template_name", name, sizeof name);
    chat_template t;
    char err[256];
    if (!ch->tpl_chosen && name[0] && chat_template_load(&t, name, err, sizeof err) == 0 && t.hash == h) {
        chat_template_free(&ch->tpl);
        ch->tpl = t;
        notice("session \"%s\" was started with chat template \"%s\"; continuing with it", ch->session, name);
        return;
    }
    notice("session \"%s\" was started with chat template %s%s%s(%08llx), not \"%s\": the daemon refuses "
           "messages framed with another (--template or /set template)", ch->session, name[0] ? "\"" : "",
           name, name[0] ? "\" " : "", (unsigned long long)h, ch->tpl.name);
}

/* Enter ch->session: ask for its info, show where it stands and set what
 * the template needs to know (is it new, how does its stream end).
 * `first`: show the transcript tail. Returns 0, or a lindc code when the
 * connection failed. */
static int chat_enter(chat *ch, int first)
{
    lindc_req r;
    lindc_event ev;
    lindc_req_init(&r, "info");
    lindc_req_str(&r, "session", ch->session);
    int rc = lindc_call(ch->c, &r, &ev, 10000);
    lindc_req_free(&r);
    if (rc == LINDC_ESERVER) {
        if (!strcmp(ev.code, "not_found")) {
            /* A new session gets a random seed unless one was asked for:
             * two new chats differ, and the state keeps it. */
            if (!ch->o.has_seed) {
                ch->o.seed = ctl_random_seed();
                ch->o.has_seed = 1;
            }
            if (first)
                notice("new session \"%s\" (seed %llu)", ch->session, (unsigned long long)ch->o.seed);
            else
                notice("reconnected; session \"%s\" is not in the daemon's store (never saved)", ch->session);
            ch->after_reply = 0;
            ch->tail_len = 0;
            ch->system_pending = ch->system != NULL;
            return 0;
        }
        notice("lind: %s: %s", ev.code, ev.message);
        return strcmp(ev.code, "shutting_down") ? 0 : rc;
    }
    if (rc) return rc;
    uint64_t tokens = 0;
    lindc_get_u64(ev.map, "tokens", &tokens);
    const msgpack_object *tr = lindc_get(ev.map, "transcript");
    int ntr = tr && tr->type == MSGPACK_OBJECT_ARRAY ? (int)tr->via.array.size : 0;
    if (first) {
        notice("resuming \"%s\" at %llu tokens%s", ch->session, (unsigned long long)tokens,
               ntr ? "; the transcript's tail:" : "");
        ctl_print_transcript(tr, ch->ui, "you> ", !isatty(fileno(ch->ui)));
        fflush(ch->ui);
        /* What the template needs: how the stream ends, and whether a
         * reply came last. */
        ch->tail_len = 0;
        ch->after_reply = 0;
        for (int i = 0; i < ntr; i++) {
            const msgpack_object *t = &tr->via.array.ptr[i];
            char role[8] = "";
            const uint8_t *p;
            size_t n;
            lindc_get_strcpy(t, "role", role, sizeof role);
            if (lindc_get_bytes(t, "text", &p, &n) || !n) continue;
            tail_add(ch, p, n);
            ch->after_reply = !strcmp(role, "out");
        }
        ch->system_pending = ch->system != NULL && tokens <= 1;
        chat_keep_session_template(ch, ev.map);
    } else {
        notice("reconnected; session \"%s\" is at %llu tokens", ch->session, (unsigned long long)tokens);
    }
    return 0;
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
    char server[64] = "?", backend[32] = "?";
    lindc_get_strcpy(ev.map, "server", server, sizeof server);
    lindc_get_strcpy(ev.map, "backend", backend, sizeof backend);
    const msgpack_object *model = lindc_get(ev.map, "model");
    snprintf(ch->model_path, sizeof ch->model_path, "?");
    lindc_get_strcpy(model, "path", ch->model_path, sizeof ch->model_path);
    const uint8_t *tp;
    size_t tn;
    free(ch->model_template);
    ch->model_template = NULL;
    if (lindc_get_bytes(model, "chat_template", &tp, &tn) == 0 && (ch->model_template = malloc(tn + 1))) {
        memcpy(ch->model_template, tp, tn);
        ch->model_template[tn] = 0;
    }
    if (first) {
        notice("lind chat: session \"%s\" on %s (model %s, %s backend). "
               "/help lists commands, Ctrl-C cancels a reply, Ctrl-D quits.", ch->session, server,
               ch->model_path, backend);
        chat_use_model_template(ch, 1);
    }
    return chat_enter(ch, first);
}

/* Forget a dead connection and say why; reconnecting starts now. */
static void chat_lost(chat *ch, const char *why)
{
    lindc_free(ch->c);
    ch->c = NULL;
    ch->said_down = 0;
    ch->retry_ms = 100;
    ch->next_try = clock_mono_s() + 0.1;
    notice("lind: %s; reconnecting to %s", why, ch->g.socket);
}

/* One reconnect attempt. 0 once connected (and greeted), else <0. */
static int chat_try_connect(chat *ch)
{
    char err[512];
    if (ctl_dial(&ch->g, &ch->c, err, sizeof err) == 0) {
        if (chat_greet(ch, 0) == 0) return 0;
        lindc_free(ch->c);
        ch->c = NULL;
    } else if (!ch->said_down) {
        notice("lind: the daemon is down (%s); still trying", err);
        ch->said_down = 1;
    }
    ch->next_try = clock_mono_s() + ch->retry_ms / 1000.0;
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
        double wait = ch->next_try - clock_mono_s();
        if (wait > 0) {
            struct timespec ts = { (time_t)wait, (long)((wait - (double)(time_t)wait) * 1e9) };
            nanosleep(&ts, NULL);
        }
        if (ctl_interrupted) return EXIT_INTERRUPTED;
        if (clock_mono_s() >= ch->next_try && chat_try_connect(ch) == 0) return 0;
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
        /* Keys typed while the last reply streamed come first. */
        if (ch->ta_pos < ch->ta_len) {
            mb[nb++] = ch->typeahead[ch->ta_pos++];
            if (ch->ta_pos == ch->ta_len) ch->ta_pos = ch->ta_len = 0;
            mbstate_t st;
            memset(&st, 0, sizeof st);
            size_t r = mbrtowc(wc, mb, nb, &st);
            if (r == (size_t)-2 && nb < sizeof mb) continue;
            if (r == (size_t)-1 || r == (size_t)-2) { nb = 0; continue; }
            return 1;
        }
        struct pollfd p[2] = { { .fd = 0, .events = POLLIN },
                               { .fd = ch->c ? lindc_fd(ch->c) : -1, .events = POLLIN } };
        struct timespec ts, *tsp = NULL;
        if (!ch->c) {
            double w = ch->next_try - clock_mono_s();
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
        if (!ch->c && clock_mono_s() >= ch->next_try) chat_try_connect(ch);
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

/* While a reply streams the terminal does not echo, and what is typed is
 * kept in ch->typeahead for the next prompt (chat_getc replays it there). */
typedef struct typeahead_tty {
    int on;
    struct termios saved;
} typeahead_tty;

static void typeahead_begin(typeahead_tty *t)
{
    t->on = 0;
    if (!isatty(0) || tcgetattr(0, &t->saved) != 0) return;
    struct termios raw = t->saved;
    raw.c_lflag &= (tcflag_t)~(ECHO | ICANON);   /* ISIG stays: Ctrl-C still cancels */
    raw.c_lflag |= NOFLSH;   /* and does not flush what was typed but not yet read */
    raw.c_cc[VMIN] = 0;
    raw.c_cc[VTIME] = 0;
    if (tcsetattr(0, TCSANOW, &raw) == 0) t->on = 1;
}

static void typeahead_end(typeahead_tty *t)
{
    if (t->on) tcsetattr(0, TCSANOW, &t->saved);
    t->on = 0;
}

static void typeahead_read(chat *ch)
{
    char b[256];
    ssize_t n = read(0, b, sizeof b);
    for (ssize_t i = 0; i < n; i++) {
        if (ch->ta_len == sizeof ch->typeahead) break;
        ch->typeahead[ch->ta_len++] = b[i];
    }
}

/* Whatever the terminal holds now, without waiting. */
static void typeahead_drain(chat *ch)
{
    struct pollfd k = { .fd = 0, .events = POLLIN };
    while (poll(&k, 1, 0) > 0 && (k.revents & POLLIN)) {
        size_t before = ch->ta_len;
        typeahead_read(ch);
        if (ch->ta_len == before) break;   /* the buffer is full, or end of input */
    }
}

/* The reply as shown: bytes that may be the start of a stop string (or
 * of a UTF-8 character) are held back until it is clear (recurrent/stophold.h,
 * as HTTP's streamed text), and the stop string a reply ended on is not
 * shown (it stays in the session). */
typedef struct reply_out {
    chat *ch;
    stophold stops;
    uint8_t *hold;
    size_t n, cap;
    int at_line_start;
    size_t shown;
} reply_out;

static void reply_emit(reply_out *ro, const uint8_t *p, size_t n)
{
    if (!n) return;
    ctl_write_text(stdout, p, n, !isatty(1));
    fflush(stdout);
    ro->at_line_start = p[n - 1] == '\n';
    ro->shown += n;
}

static int reply_add(reply_out *ro, const uint8_t *p, size_t n)
{
    if (ro->n + n > ro->cap) {
        size_t nc = (ro->n + n) * 2 + 64;
        uint8_t *nh = realloc(ro->hold, nc);
        if (!nh) return -ENOMEM;
        ro->hold = nh;
        ro->cap = nc;
    }
    memcpy(ro->hold + ro->n, p, n);
    ro->n += n;
    size_t show = stophold_shown(&ro->stops, ro->hold, ro->n);
    reply_emit(ro, ro->hold, show);
    memmove(ro->hold, ro->hold + show, ro->n - show);
    ro->n -= show;
    return 0;
}

static void reply_finish(reply_out *ro, const uint8_t *stop, size_t stop_len)
{
    size_t show = ro->n;
    if (stop && stop_len && stop_len <= ro->n)
        for (size_t at = ro->n - stop_len + 1; at-- > 0;)
            if (!memcmp(ro->hold + at, stop, stop_len)) { show = at; break; }
    reply_emit(ro, ro->hold, show);
    free(ro->hold);
    ro->hold = NULL;
    ro->n = ro->cap = 0;
}

/* Build this turn's stop list: the template's, then the user's. */
static size_t chat_stops(const chat *ch, const char **out)
{
    size_t n = 0;
    for (size_t i = 0; i < ch->tpl.n_stop && n < STOP_MAX; i++) out[n++] = ch->tpl.stop[i];
    for (size_t i = 0; i < ch->n_stop && n < STOP_MAX; i++) {
        size_t j = 0;
        while (j < n && strcmp(out[j], ch->stops[i])) j++;
        if (j == n) out[n++] = ch->stops[i];
    }
    return n;
}

/* The connection broke mid-turn: wait for the daemon (as for a line typed
 * while it is away) and send the turn again under its request id. What
 * the template knows of the stream is kept across the reconnect (the
 * reconnect's own look at the session would see the turn as not sent).
 * 0 with the new request's *id, else a lindc code or EXIT_INTERRUPTED. */
static int chat_resend(chat *ch, const lindc_gen_opts *o, uint64_t *id, reply_out *ro)
{
    uint8_t tail[TAIL_MAX];
    size_t tail_len = ch->tail_len;
    int after_reply = ch->after_reply, system_pending = ch->system_pending;
    memcpy(tail, ch->tail, tail_len);
    if (!ro->at_line_start) { fputc('\n', stdout); ro->at_line_start = 1; }
    chat_lost(ch, "the daemon went away mid-reply");
    int rc = chat_wait_daemon(ch);
    memcpy(ch->tail, tail, tail_len);
    ch->tail_len = tail_len;
    ch->after_reply = after_reply;
    ch->system_pending = system_pending;
    if (rc) return rc;
    notice("sent the message again with its request id %s (the daemon applies it once)", o->request_id);
    return lindc_generate(ch->c, o, id);
}

/* A resent turn met `busy`: its first try is still being cancelled or
 * saved on the daemon. Ask again a moment later, until `until` (mono_s).
 * 1 when asked, 0 to report the error. */
static int chat_retry_busy(chat *ch, const lindc_gen_opts *o, uint64_t *id, double until)
{
    if (clock_mono_s() > until || ctl_interrupted) return 0;
    struct timespec ts = { 0, 100000000 };
    nanosleep(&ts, NULL);
    return lindc_generate(ch->c, o, id) == 0;
}

/* One turn. Returns 0 when it ended (done or an error event, both shown),
 * or a lindc code when the connection broke. */
static int chat_turn(chat *ch, const char *text, size_t len)
{
    const char *stops[STOP_MAX];
    lindc_gen_opts o = ch->o;
    o.session = ch->session;
    o.text = len ? text : NULL;
    o.text_len = len;
    o.n_stop = chat_stops(ch, stops);
    o.stop = stops;
    o.progress = isatty(2);
    o.chat_template = ch->tpl.hash;   /* the session keeps its template; another is refused */
    /* A request id: after a lost connection the turn is sent again and
     * applied once (its recorded answer, or a rerun of a turn lost whole;
     * docs/PROTOCOL.md, "Retries"). */
    char rid[33];
    if (lindc_request_id(rid) == 0) o.request_id = rid;
    int progress_shown = 0;
    uint64_t id;
    ctl_interrupted = 0;
    int rc = lindc_generate(ch->c, &o, &id);
    if (rc) return rc;
    ch->o.has_seed = 0;   /* --seed seeds the first turn; later ones continue its RNG */
    if (len) {
        tail_add(ch, text, len);
        ch->after_reply = 0;
        ch->system_pending = 0;
    }
    reply_out ro = { .ch = ch, .at_line_start = 1 };
    for (size_t i = 0; i < o.n_stop; i++) stophold_add(&ro.stops, stops[i], strlen(stops[i]));
    typeahead_tty tt;
    typeahead_begin(&tt);
    int cancel_sent = 0, retried = 0;
    size_t got = 0, skip = 0;   /* reply bytes received; of a resent turn's, those to skip */
    double busy_until = 0;
    for (;;) {
        if (ctl_interrupted && !cancel_sent) {
            cancel_sent = 1;
            if ((rc = lindc_cancel(ch->c, id, NULL))) break;
        }
        lindc_event ev;
        if (!ch->c) break;
        if (tt.on && lindc_pending(ch->c)) typeahead_drain(ch);   /* a fast reply never waits in poll */
        if (!lindc_pending(ch->c)) {
            struct pollfd p[2] = { { .fd = lindc_fd(ch->c), .events = POLLIN },
                                   { .fd = tt.on ? 0 : -1, .events = POLLIN } };
            int n = poll(p, 2, -1);
            if (n < 0) continue;   /* EINTR: Ctrl-C is checked at the top */
            if (p[1].revents) typeahead_read(ch);
            if (!p[0].revents) continue;
        }
        rc = lindc_next(ch->c, &ev, 0);
        if (rc == -EINTR || rc == -ETIMEDOUT) continue;
        if (rc && o.request_id && !cancel_sent && ctl_conn_lost(rc)) {
            if ((rc = chat_resend(ch, &o, &id, &ro)) != 0) break;
            retried = 1;
            busy_until = clock_mono_s() + 30;
            skip = got;   /* the answer starts again from its first token */
            continue;
        }
        if (rc) break;
        if (ev.kind == LINDC_EV_ERROR && ev.id == 0) {
            reply_finish(&ro, NULL, 0);
            if (!ro.at_line_start) fputc('\n', stdout);
            notice("lind: %s: %s", ev.code, ev.message);
            rc = !strcmp(ev.code, "shutting_down") ? LINDC_ECLOSED : 0;
            break;
        }
        if (ev.id != id) continue;
        if (ev.kind == LINDC_EV_PROGRESS) {
            ctl_progress_line(&ev, &progress_shown);
            continue;
        }
        ctl_progress_line(NULL, &progress_shown);
        if (ev.kind == LINDC_EV_TOKEN && skip) {   /* shown before the connection was lost */
            size_t k = ev.len < skip ? ev.len : skip;
            skip -= k;
            ev.data += k;
            ev.len -= k;
        }
        if (ev.kind == LINDC_EV_ERROR && retried && !strcmp(ev.code, "busy") &&
            chat_retry_busy(ch, &o, &id, busy_until))
            continue;   /* the first try is still ending on the daemon */
        if (ev.kind == LINDC_EV_TOKEN && ev.len) {
            got += ev.len;
            tail_add(ch, ev.data, ev.len);
            ch->after_reply = 1;
            if ((rc = reply_add(&ro, ev.data, ev.len))) break;
        } else if (ev.kind == LINDC_EV_DONE || ev.kind == LINDC_EV_ERROR) {
            const uint8_t *sp = NULL;
            size_t sn = 0;
            lindc_get_bytes(ev.map, "stop", &sp, &sn);
            reply_finish(&ro, sp, sn);
            if (!ro.at_line_start) fputc('\n', stdout);
            fflush(stdout);
            char reason[32] = "";
            lindc_get_strcpy(ev.map, "reason", reason, sizeof reason);
            if (len) ch->after_reply = 1;   /* the reply (however short) follows the message */
            if (ev.kind == LINDC_EV_ERROR) {
                if (!strcmp(ev.code, "busy"))
                    notice("session \"%s\" is busy with another client's turn; try again", o.session);
                else
                    notice("lind: %s: %s", ev.code, ev.message);
                rc = !strcmp(ev.code, "shutting_down") ? LINDC_ECLOSED : 0;
                break;
            }
            int replayed = 0;
            lindc_get_bool(ev.map, "replayed", &replayed);
            if (!strcmp(reason, "cancelled") && retried && replayed && !cancel_sent) {
                /* the daemon, alive, had cancelled the turn when the connection went */
                notice("the lost connection cut the reply short; the session keeps what was shown");
            } else if (!strcmp(reason, "cancelled")) {
                uint64_t fed = len;
                lindc_get_u64(ev.map, "fed_bytes", &fed);
                if (fed < len)   /* a long paste cut while it was fed */
                    notice("%s after %llu of %zu bytes; the session holds them (/undo drops the turn)",
                           cancel_sent ? "cancelled" : "the daemon cancelled the turn", (unsigned long long)fed, len);
                else notice(cancel_sent ? "cancelled" : "the daemon cancelled the reply");
            }
            rc = 0;
            break;
        }
    }
    if (ro.hold) {   /* the connection broke: show what came */
        reply_finish(&ro, NULL, 0);
        if (!ro.at_line_start) fputc('\n', stdout);
    }
    if (tt.on) typeahead_drain(ch);   /* what was typed last, before the terminal's mode goes back */
    typeahead_end(&tt);
    return rc;
}

/* ---- settings ------------------------------------------------------------ */

/* "\n", "\t" and "\\" in a typed value become the bytes. */
static void unescape(char *s)
{
    char *o = s;
    for (; *s; s++) {
        if (*s == '\\' && s[1]) {
            s++;
            *o++ = *s == 'n' ? '\n' : *s == 't' ? '\t' : *s;
        } else {
            *o++ = *s;
        }
    }
    *o = 0;
}

static void chat_clear_stops(chat *ch)
{
    for (size_t i = 0; i < ch->n_stop; i++) free(ch->stops[i]);
    ch->n_stop = 0;
}

/* Apply one setting (from an option or /set). 0, or -1 with the reason
 * printed. The new value is checked like the daemon would check it. */
static int chat_set(chat *ch, const char *key, char *val)
{
    lindc_gen_opts o = ch->o;
    uint64_t u;
    double f;
    char err[512];
    char opt[64];
    snprintf(opt, sizeof opt, "--%s", key);
    for (char *p = opt; *p; p++) if (*p == '_') *p = '-';
    const char *k = opt + 2;
    if (!strcmp(k, "temperature") || !strcmp(k, "t")) {
        if (ctl_parse_f64("temperature", val, &f)) return -1;
        if (f < 0) { fprintf(stderr, "lindctl: --temperature wants 0..100, got %s\n", val); return -1; }
        o.temperature = f;
    } else if (!strcmp(k, "top-k")) {
        if (ctl_parse_u64("top-k", val, &u)) return -1;
        if (u > 256) { fprintf(stderr, "lindctl: --top-k wants 0..256, got %s\n", val); return -1; }
        o.top_k = (int64_t)u;
    } else if (!strcmp(k, "top-p")) {
        if (ctl_parse_f64("top-p", val, &f)) return -1;
        o.top_p = f <= 0 ? 0 : f;
        if (o.top_p == 0) { fprintf(stderr, "lindctl: --top-p wants a number in (0, 1], got %s\n", val); return -1; }
    } else if (!strcmp(k, "repetition-penalty")) {
        if (ctl_parse_f64("repetition-penalty", val, &f)) return -1;
        if (f < 0) f = 0;   /* out of range: the check below says so */
        o.repetition_penalty = f;
    } else if (!strcmp(k, "repetition-window")) {
        if (ctl_parse_u64("repetition-window", val, &u)) return -1;
        if (u > 256) { fprintf(stderr, "lindctl: --repetition-window wants 0..256, got %s\n", val); return -1; }
        o.repetition_window = (int64_t)u;
    } else if (!strcmp(k, "seed")) {
        if (ctl_parse_u64("seed", val, &o.seed)) return -1;
        o.has_seed = 1;
    } else if (!strcmp(k, "max-tokens") || !strcmp(k, "n")) {
        if (ctl_parse_u64("max-tokens", val, &u)) return -1;
        o.max_tokens = (int64_t)(u > INT64_MAX ? INT64_MAX : u);
    } else if (!strcmp(k, "stop")) {
        /* "/set stop A B" replaces the list; "/set stop none" empties it. */
        char *words[STOP_MAX + 1];
        size_t n = 0;
        for (char *w = strtok(val, " "); w; w = strtok(NULL, " ")) {
            if (n == STOP_MAX) {
                fprintf(stderr, "lindctl: at most %d stop strings\n", STOP_MAX);
                return -1;
            }
            words[n++] = w;
        }
        if (n == 1 && !strcmp(words[0], "none")) n = 0;
        const char *all[STOP_MAX];
        for (size_t i = 0; i < n; i++) {
            unescape(words[i]);
            all[i] = words[i];
        }
        o.stop = all;
        o.n_stop = n;
        if (ctl_check_gen_opts(&o, err, sizeof err)) {
            fprintf(stderr, "lindctl: %s\n", err);
            return -1;
        }
        chat_clear_stops(ch);
        for (size_t i = 0; i < n; i++) ch->stops[ch->n_stop++] = strdup(words[i]);
        return 0;
    } else if (!strcmp(k, "system")) {
        free(ch->system);
        ch->system = NULL;
        if (strcmp(val, "none") && *val) {
            unescape(val);
            ch->system = strdup(val);
        }
        ch->system_pending = ch->system != NULL;
        return 0;
    } else if (!strcmp(k, "template")) {
        chat_template t;
        if (chat_template_load(&t, val, err, sizeof err)) {
            fprintf(stderr, "lindctl: %s\n", err);
            return -1;
        }
        chat_template_free(&ch->tpl);
        ch->tpl = t;
        ch->tpl_chosen = 1;
        return 0;
    } else {
        fprintf(stderr, "lindctl: no setting '%s' (temperature, top-k, top-p, repetition-penalty, "
                        "repetition-window, seed, max-tokens, stop, system, template)\n", key);
        return -1;
    }
    if (ctl_check_gen_opts(&o, err, sizeof err)) {
        fprintf(stderr, "lindctl: %s\n", err);
        return -1;
    }
    ch->o = o;
    return 0;
}

static void show_text(FILE *f, const char *label, const char *s)
{
    fprintf(f, "%-19s", label);
    if (!s) { fputs("(none)\n", f); return; }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '\n') fputs("\\n", f);
        else if (*s == '\t') fputs("\\t", f);
        else if (*s == '"' || *s == '\\') { fputc('\\', f); fputc(*s, f); }
        else fputc(*s, f);
    }
    fputs("\"\n", f);
}

static void chat_show_settings(chat *ch)
{
    FILE *f = ch->ui;
    const lindc_gen_opts *o = &ch->o;
    fprintf(f, "session            %s\n", ch->session);
    fprintf(f, "max-tokens         %lld\n", (long long)o->max_tokens);
    if (o->temperature >= 0) fprintf(f, "temperature        %g\n", o->temperature);
    else fprintf(f, "temperature        (daemon default, 0.8)\n");
    if (o->top_k >= 0) fprintf(f, "top-k              %lld\n", (long long)o->top_k);
    else fprintf(f, "top-k              (daemon default, 0 = off)\n");
    if (o->top_p >= 0) fprintf(f, "top-p              %g\n", o->top_p);
    else fprintf(f, "top-p              (daemon default, 1 = off)\n");
    if (o->repetition_penalty >= 0) fprintf(f, "repetition-penalty %g\n", o->repetition_penalty);
    else fprintf(f, "repetition-penalty (daemon default, 1 = off)\n");
    if (o->repetition_window >= 0) fprintf(f, "repetition-window  %lld\n", (long long)o->repetition_window);
    else fprintf(f, "repetition-window  (daemon default, 64)\n");
    if (o->has_seed) fprintf(f, "seed               %llu (for the next turn)\n", (unsigned long long)o->seed);
    else fprintf(f, "seed               (the session's random stream goes on)\n");
    const char *stops[STOP_MAX];
    size_t n = chat_stops(ch, stops);
    fprintf(f, "stop              ");
    if (!n) fputs(" (none)", f);
    for (size_t i = 0; i < n; i++) {
        fputs(" \"", f);
        for (const char *s = stops[i]; *s; s++)
            if (*s == '\n') fputs("\\n", f); else fputc(*s, f);
        fputc('"', f);
    }
    fputc('\n', f);
    show_text(f, "system", ch->system);
    fprintf(f, "template           %s%s\n", ch->tpl.name,
            ch->tpl_chosen ? "" : ch->model_template ? " (the daemon's)" : " (default)");
    show_text(f, "  user", ch->tpl.user);
    if (ch->tpl.system) show_text(f, "  system", ch->tpl.system);
    if (ch->tpl.assistant_end) show_text(f, "  assistant_end", ch->tpl.assistant_end);
}

/* ---- commands ------------------------------------------------------------- */

/* Send one request and wait for its result; 0, or -1 with the reason shown. */
static int chat_request(chat *ch, lindc_req *r, lindc_event *ev)
{
    if (!ch->c) {
        notice("the daemon is away; try again once it is back");
        lindc_req_free(r);
        return -1;
    }
    int rc = lindc_call(ch->c, r, ev, 60000);
    lindc_req_free(r);
    if (rc == LINDC_ESERVER) {
        notice("lind: %s: %s", ev->code, ev->message);
        return -1;
    }
    if (rc) {
        chat_lost(ch, rc == LINDC_ECLOSED || rc == LINDC_EBROKEN ? "the daemon closed the connection"
                                                                : lindc_strerror(rc));
        return -1;
    }
    return 0;
}

static int session_exists(chat *ch, const char *name)
{
    lindc_req r;
    lindc_event ev;
    lindc_req_init(&r, "info");
    lindc_req_str(&r, "session", name);
    int rc = lindc_call(ch->c, &r, &ev, 10000);
    lindc_req_free(&r);
    if (rc == LINDC_ESERVER && !strcmp(ev.code, "not_found")) return 0;
    return rc == 0 ? 1 : -1;
}

static void chat_switch(chat *ch, const char *name)
{
    snprintf(ch->session, sizeof ch->session, "%s", name);
    ch->o.session = ch->session;
    if (ch->c) chat_enter(ch, 1);
}

static void chat_show_session(chat *ch)
{
    lindc_req r;
    lindc_event ev;
    lindc_req_init(&r, "info");
    lindc_req_str(&r, "session", ch->session);
    if (!ch->c) { chat_request(ch, &r, &ev); return; }
    int rc = lindc_call(ch->c, &r, &ev, 10000);
    lindc_req_free(&r);
    if (rc == LINDC_ESERVER && !strcmp(ev.code, "not_found")) {
        fprintf(ch->ui, "session            %s (new: nothing sent yet)\n", ch->session);
        return;
    }
    if (rc == LINDC_ESERVER) { notice("lind: %s: %s", ev.code, ev.message); return; }
    if (rc) { chat_lost(ch, lindc_strerror(rc)); return; }
    uint64_t tokens = 0, sbytes = 0, ms = 0, seed = 0;
    char when[64];
    lindc_get_u64(ev.map, "tokens", &tokens);
    lindc_get_u64(ev.map, "state_bytes", &sbytes);
    fprintf(ch->ui, "session            %s\n", ch->session);
    fprintf(ch->ui, "tokens             %llu\n", (unsigned long long)tokens);
    fprintf(ch->ui, "state bytes        %llu\n", (unsigned long long)sbytes);
    if (lindc_get_u64(ev.map, "seed", &seed) == 0)
        fprintf(ch->ui, "seed               %llu\n", (unsigned long long)seed);
    if (lindc_get_u64(ev.map, "created_ms", &ms) == 0 && ms) {
        ctl_fmt_time(when, sizeof when, ms);
        fprintf(ch->ui, "created            %s\n", when);
    }
    if (lindc_get_u64(ev.map, "updated_ms", &ms) == 0) {
        if (ms) ctl_fmt_time(when, sizeof when, ms);
        else snprintf(when, sizeof when, "never (no turn committed yet)");
        fprintf(ch->ui, "updated            %s\n", when);
    }
}

static void chat_show_model(chat *ch)
{
    lindc_req r;
    lindc_event ev;
    lindc_req_init(&r, "hello");
    if (chat_request(ch, &r, &ev)) return;
    const msgpack_object *m = lindc_get(ev.map, "model");
    char path[512] = "?", fp[32] = "?", server[64] = "?", backend[32] = "?";
    uint64_t params = 0, d = 0, layers = 0, sb = 0;
    lindc_get_strcpy(ev.map, "server", server, sizeof server);
    lindc_get_strcpy(ev.map, "backend", backend, sizeof backend);
    lindc_get_strcpy(m, "path", path, sizeof path);
    lindc_get_strcpy(m, "fingerprint", fp, sizeof fp);
    lindc_get_u64(m, "params", &params);
    lindc_get_u64(m, "d_model", &d);
    lindc_get_u64(m, "n_layers", &layers);
    lindc_get_u64(m, "state_bytes", &sb);
    fprintf(ch->ui, "server             %s (%s backend)\n", server, backend);
    fprintf(ch->ui, "model              %s\n", path);
    fprintf(ch->ui, "fingerprint        %s\n", fp);
    fprintf(ch->ui, "parameters         %llu (d_model %llu, %llu layers)\n", (unsigned long long)params,
            (unsigned long long)d, (unsigned long long)layers);
    fprintf(ch->ui, "state bytes        %llu per session\n", (unsigned long long)sb);
    /* The daemon's: --template, the model directory's lind_chat.json or the
     * family's built-in (docs/DAEMON.md). */
    chat_template t;
    char why[256];
    if (!ch->model_template)
        fprintf(ch->ui, "chat template      (none: the daemon serves the typed text as it is)\n");
    else if (chat_template_from_json(&t, ch->model_template, strlen(ch->model_template), "the daemon's",
                                     why, sizeof why) == 0) {
        fprintf(ch->ui, "chat template      %s (the daemon's)\n", t.name);
        chat_template_free(&t);
    } else {
        fprintf(ch->ui, "chat template      (the daemon's does not parse: %s)\n", why);
    }
}

static void chat_save(chat *ch, const char *path)
{
    char err[600];
    if (ctl_check_writable(path, err, sizeof err)) { notice("%s", err); return; }
    lindc_req r;
    lindc_event ev;
    lindc_req_init(&r, "export");
    lindc_req_str(&r, "session", ch->session);
    if (chat_request(ch, &r, &ev)) return;
    const uint8_t *data;
    size_t n;
    if (lindc_get_bytes(ev.map, "data", &data, &n)) { notice("the daemon's export has no data"); return; }
    if (ctl_write_atomic(path, data, n, err, sizeof err)) { notice("%s", err); return; }
    notice("saved \"%s\" to %s (%zu bytes)", ch->session, path, n);
}

static void chat_load(chat *ch, const char *path, const char *name)
{
    char def[256];
    if (!name) {   /* FILE's base name without its extension */
        const char *b = strrchr(path, '/');
        snprintf(def, sizeof def, "%s", b ? b + 1 : path);
        char *dot = strrchr(def, '.');
        if (dot && dot != def) *dot = 0;
        name = def;
    }
    uint8_t *data;
    size_t n;
    int rc = ctl_read_file(path, &data, &n);
    if (rc) { notice("cannot read %s: %s", path, strerror(-rc)); return; }
    lindc_req r;
    lindc_event ev;
    lindc_req_init(&r, "import");
    lindc_req_str(&r, "session", name);
    lindc_req_bin(&r, "data", data, n);
    rc = chat_request(ch, &r, &ev);
    free(data);
    if (rc) return;
    notice("loaded %s as \"%s\"", path, name);
    chat_switch(ch, name);
}

static void chat_clear(chat *ch)
{
    if (!ch->c) { notice("the daemon is away; try again once it is back"); return; }
    /* The base name without a "-N" that an earlier /clear added. */
    char base[200], name[256];
    snprintf(base, sizeof base, "%.199s", ch->session);
    char *dash = strrchr(base, '-');
    if (dash && dash[1] && strspn(dash + 1, "0123456789") == strlen(dash + 1)) *dash = 0;
    for (int i = 2; i < 100000; i++) {
        snprintf(name, sizeof name, "%s-%d", base, i);
        int e = session_exists(ch, name);
        if (e < 0) { notice("cannot ask the daemon about \"%s\"", name); return; }
        if (!e) break;
    }
    notice("\"%s\" is kept; starting afresh in \"%s\"", ch->session, name);
    chat_switch(ch, name);
}

/* A line starting with "/": run it. Returns 1 to quit, else 0. */
static int chat_command(chat *ch, char *line)
{
    size_t l = strlen(line);
    while (l && (line[l - 1] == '\n' || line[l - 1] == '\r' || line[l - 1] == ' ')) line[--l] = 0;
    char *cmd = line + 1;
    char *args = cmd + strcspn(cmd, " ");
    if (*args) *args++ = 0;
    while (*args == ' ') args++;
    char *a1 = args, *a2 = NULL;
    if (*a1) {
        a2 = a1 + strcspn(a1, " ");
        if (*a2) { *a2++ = 0; while (*a2 == ' ') a2++; }
        if (!*a2) a2 = NULL;
    }
    if (!strcmp(cmd, "bye") || !strcmp(cmd, "quit")) return 1;
    if (!strcmp(cmd, "help") || !strcmp(cmd, "?")) {
        usage(ch->ui);
    } else if (!strcmp(cmd, "set")) {
        if (!*a1) chat_show_settings(ch);
        else if (chat_set(ch, a1, a2 ? a2 : (char *)"") == 0) {
            if (!strcmp(a1, "template")) notice("template \"%s\"", ch->tpl.name);
        }
    } else if (!strcmp(cmd, "show")) {
        if (!*a1 || !strcmp(a1, "settings")) chat_show_settings(ch);
        else if (!strcmp(a1, "session")) chat_show_session(ch);
        else if (!strcmp(a1, "model")) chat_show_model(ch);
        else notice("/show session, /show settings or /show model");
    } else if (!strcmp(cmd, "fork") || !strcmp(cmd, "switch") || !strcmp(cmd, "save")) {
        if (!*a1 || a2) { notice("/%s wants one %s", cmd, strcmp(cmd, "save") ? "NAME" : "FILE"); return 0; }
        if (!strcmp(cmd, "switch")) { chat_switch(ch, a1); return 0; }
        if (!strcmp(cmd, "save")) { chat_save(ch, a1); return 0; }
        lindc_req r;
        lindc_event ev;
        lindc_req_init(&r, "fork");
        lindc_req_str(&r, "session", ch->session);
        lindc_req_str(&r, "to", a1);
        if (chat_request(ch, &r, &ev) == 0)
            notice("forked \"%s\" to \"%s\" (you are still in \"%s\"; /switch %s goes there)",
                   ch->session, a1, ch->session, a1);
    } else if (!strcmp(cmd, "load")) {
        if (!*a1) { notice("/load wants a FILE (and optionally a NAME)"); return 0; }
        chat_load(ch, a1, a2);
    } else if (!strcmp(cmd, "clear")) {
        chat_clear(ch);
    } else if (!strcmp(cmd, "undo")) {
        lindc_req r;
        lindc_event ev;
        lindc_req_init(&r, "undo");
        lindc_req_str(&r, "session", ch->session);
        if (chat_request(ch, &r, &ev) == 0) {
            uint64_t t = 0;
            lindc_get_u64(ev.map, "session_tokens", &t);
            notice("undone: \"%s\" is back at %llu tokens, as before its last turn", ch->session,
                   (unsigned long long)t);
            chat_enter(ch, 1);   /* the transcript's tail, and what the template must know */
        }
    } else {
        notice("unknown command /%s (/help lists them; start a line with // to send a /)", cmd);
    }
    fflush(ch->ui);
    return 0;
}

/* ---- input ------------------------------------------------------------------ */

/* Read one line with the prompt. NULL at end of input (*eof = 1) or on
 * Ctrl-C (*eof = 0). */
static const char *chat_line(chat *ch, int *eof)
{
    int count = 0;
    ctl_interrupted = 0;
    ch->at_prompt = 1;
    const char *line = el_gets(ch->el, &count);
    ch->at_prompt = 0;
    *eof = 0;
    if (!line) {
        if (count == -1 && (errno == EINTR || ctl_interrupted)) {
            fputc('\n', stdout);
            el_reset(ch->el);
            return NULL;
        }
        *eof = 1;
    }
    return line;
}

static int buf_add(char **buf, size_t *len, const char *p, size_t n)
{
    char *nb = realloc(*buf, *len + n + 1);
    if (!nb) return -1;
    memcpy(nb + *len, p, n);
    *len += n;
    nb[*len] = 0;
    *buf = nb;
    return 0;
}

/* The end of a line without its newline: does it end with `what`? */
static int ends_with(const char *line, const char *what)
{
    size_t l = strlen(line), w = strlen(what);
    while (l && (line[l - 1] == '\n' || line[l - 1] == '\r')) l--;
    return l >= w && !memcmp(line + l - w, what, w);
}

/* Read one message: a line, a """ block, or lines joined by a trailing
 * backslash. Returns 1 with *msg (malloc'd, ends with '\n' unless empty),
 * 0 when Ctrl-C dropped it, -1 at end of input. *block is set for a """
 * block, whose text is never a command. */
static int chat_read_message(chat *ch, History *hist, char **msg, size_t *len, int *block)
{
    HistEvent hev;
    int eof;
    *msg = NULL;
    *len = 0;
    *block = 0;
    ch->cont = 0;
    const char *line = chat_line(ch, &eof);
    if (!line) return eof ? -1 : 0;
    if (strlen(line) > 1) history(hist, &hev, H_ENTER, line);
    if (!strncmp(line, "\"\"\"", 3)) {
        /* A block: from after the opening """ to before the closing one. */
        *block = 1;
        const char *rest = line + 3;
        int done = strcmp(rest, "\n") && ends_with(rest, "\"\"\"");
        for (;;) {
            size_t l = strlen(rest);
            while (l && (rest[l - 1] == '\n' || rest[l - 1] == '\r')) l--;
            if (done) l -= 3;
            if (l || !done) buf_add(msg, len, rest, l);
            if (!done && (l || *len)) buf_add(msg, len, "\n", 1);
            if (done) break;
            ch->cont = 1;
            line = chat_line(ch, &eof);
            ch->cont = 0;
            if (!line) {
                free(*msg);
                *msg = NULL;
                return eof ? -1 : 0;
            }
            if (strlen(line) > 1) history(hist, &hev, H_ENTER, line);
            rest = line;
            done = ends_with(rest, "\"\"\"");
        }
        if (*len && (*msg)[*len - 1] != '\n') buf_add(msg, len, "\n", 1);
        return 1;
    }
    for (;;) {
        if (!ends_with(line, "\\")) {
            buf_add(msg, len, line, strlen(line));
            break;
        }
        size_t l = strlen(line);
        while (l && (line[l - 1] == '\n' || line[l - 1] == '\r')) l--;
        buf_add(msg, len, line, l - 1);
        buf_add(msg, len, "\n", 1);
        ch->cont = 1;
        line = chat_line(ch, &eof);
        ch->cont = 0;
        if (!line) {
            free(*msg);
            *msg = NULL;
            return eof ? -1 : 0;
        }
        if (strlen(line) > 1) history(hist, &hev, H_ENTER, line);
    }
    if (!*msg) buf_add(msg, len, "", 0);
    if (*len && (*msg)[*len - 1] != '\n') buf_add(msg, len, "\n", 1);
    return 1;
}

int cmd_chat(const ctl_opts *g0, int argc, char **argv)
{
    chat ch = { .g = *g0 };
    lindc_gen_opts_init(&ch.o);
    ch.o.max_tokens = 200;
    ch.ui = isatty(1) ? stdout : stderr;
    enum { O_SEED = 1, O_TOPK, O_TOPP, O_STOP, O_REPP, O_REPW, O_SYSTEM, O_TEMPLATE };
    static const struct option longopts[] = {
        CTL_COMMON_LONGOPTS,
        { "max-tokens", required_argument, NULL, 'n' },
        { "seed", required_argument, NULL, O_SEED },
        { "temperature", required_argument, NULL, 't' },
        { "top-k", required_argument, NULL, O_TOPK },
        { "top-p", required_argument, NULL, O_TOPP },
        { "repetition-penalty", required_argument, NULL, O_REPP },
        { "repetition-window", required_argument, NULL, O_REPW },
        { "stop", required_argument, NULL, O_STOP },
        { "system", required_argument, NULL, O_SYSTEM },
        { "template", required_argument, NULL, O_TEMPLATE },
        { 0, 0, 0, 0 },
    };
    static const char *const keys[] = {
        [O_SEED] = "seed", [O_TOPK] = "top-k", [O_TOPP] = "top-p", [O_REPP] = "repetition-penalty",
        [O_REPW] = "repetition-window", [O_TEMPLATE] = "template",
    };
    int opt, status = EXIT_USAGE;
    char err[512];
    if (chat_template_load(&ch.tpl, "none", err, sizeof err)) {
        fprintf(stderr, "lindctl: %s\n", err);
        return EXIT_INTERNAL;
    }
    while ((opt = getopt_long(argc, argv, "hn:t:", longopts, NULL)) != -1) {
        switch (opt) {
        case CTL_OPT_SOCKET: ch.g.socket = optarg; break;
        case CTL_OPT_TOKEN_FILE: ch.g.token_file = optarg; break;
        case CTL_OPT_HELP: usage(stdout); status = EXIT_OK; goto out;
        case 'n': if (chat_set(&ch, "max-tokens", optarg)) goto out; break;
        case 't': if (chat_set(&ch, "temperature", optarg)) goto out; break;
        case O_SEED: case O_TOPK: case O_TOPP: case O_REPP: case O_REPW: case O_TEMPLATE:
            if (chat_set(&ch, keys[opt], optarg)) goto out;
            break;
        case O_STOP: {
            if (ch.n_stop == STOP_MAX) {
                fprintf(stderr, "lindctl: at most %d --stop strings\n", STOP_MAX);
                goto out;
            }
            size_t n = strlen(optarg);
            if (n < 1 || n > STOP_MAX_LEN) {
                fprintf(stderr, "lindctl: a stop string is 1..%d bytes, got %zu\n", STOP_MAX_LEN, n);
                goto out;
            }
            ch.stops[ch.n_stop++] = strdup(optarg);
            break;
        }
        case O_SYSTEM:
            free(ch.system);
            ch.system = *optarg ? strdup(optarg) : NULL;
            break;
        default: usage(stderr); goto out;
        }
    }
    if (argc - optind != 1) {
        fprintf(stderr, "lindctl chat: want exactly one SESSION\n");
        usage(stderr);
        goto out;
    }
    snprintf(ch.session, sizeof ch.session, "%s", argv[optind]);
    ch.o.session = ch.session;

    /* libedit decodes keystrokes with the locale's encoding; under the
     * plain C locale (ASCII) it would drop every non-ASCII key, so take
     * UTF-8 there. */
    const char *loc = setlocale(LC_CTYPE, "");
    if (!loc || !strcmp(nl_langinfo(CODESET), "ANSI_X3.4-1968")) setlocale(LC_CTYPE, "C.UTF-8");

    status = ctl_connect(&ch.g, &ch.c);
    if (status) goto out;
    ctl_catch_sigint();
    int rc = chat_greet(&ch, 1);
    if (rc) {
        status = rc == -EINTR ? EXIT_INTERRUPTED
               : rc == LINDC_ESERVER ? EXIT_SHUTTING_DOWN : ctl_report_lib(rc, "chat");
        goto out;
    }

    EditLine *el = el_init("lindctl", stdin, stdout, stderr);
    History *hist = history_init();
    HistEvent hev;
    if (!el || !hist) {
        fprintf(stderr, "lindctl: cannot set up line editing\n");
        if (el) el_end(el);
        if (hist) history_end(hist);
        status = EXIT_INTERNAL;
        goto out;
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
        char *msg;
        size_t len;
        int block;
        int got = chat_read_message(&ch, hist, &msg, &len, &block);
        if (got < 0) {
            if (isatty(0) && isatty(1)) fputc('\n', stdout);   /* past the prompt; a pipe gets replies only */
            break;    /* Ctrl-D / end of input */
        }
        if (got == 0) continue;   /* Ctrl-C dropped it */
        if (!block && msg[0] == '/' && msg[1] != '/') {
            int quit = chat_command(&ch, msg);
            free(msg);
            if (quit) break;
            continue;
        }
        if (!block && msg[0] == '/') memmove(msg, msg + 1, len--);   /* "//x" sends "/x" */
        const char *why = ch.c ? chat_check_idle(&ch) : NULL;
        if (why) chat_lost(&ch, why);
        if (!ch.c && (status = chat_wait_daemon(&ch)) != 0) {
            free(msg);
            break;
        }
        /* An empty line (just Enter) means "go on" without new text. */
        char *text = NULL;
        size_t tlen = 0;
        if (len > 1 || ch.system_pending) {
            if (chat_template_format(&ch.tpl, ch.system_pending ? ch.system : NULL, ch.after_reply,
                                    ch.tail, ch.tail_len, msg, len, &text, &tlen)) {
                notice("out of memory");
                free(msg);
                continue;
            }
        }
        free(msg);
        rc = chat_turn(&ch, text, tlen);
        free(text);
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
    history_end(hist);
    el_end(el);
out:
    free(ch.hist_path);
    free(ch.system);
    free(ch.model_template);
    chat_clear_stops(&ch);
    chat_template_free(&ch.tpl);
    lindc_free(ch.c);
    return status;
}
