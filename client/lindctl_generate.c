/* client/lindctl_generate.c — `lindctl generate`: one turn, streamed to
 * stdout as raw bytes or, with --json, as JSON lines for scripts. */
#include "client/lindctl.h"
#include "kernels/clock.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>


static void usage(FILE *f)
{
    fprintf(f,
"usage: lindctl generate SESSION [TEXT] [options]\n"
"\n"
"Append TEXT (\"-\" reads it from stdin) to SESSION, creating the session on\n"
"first use, and stream the model's continuation to stdout. Ctrl-C cancels\n"
"the turn (the session keeps what was streamed); a second Ctrl-C quits.\n"
"\n"
"options:\n"
"  -n, --max-tokens N        tokens to generate (daemon default 256)\n"
"      --seed S              reseed the session's sampler for this turn\n"
"  -t, --temperature T       0 = greedy (daemon default 0.8)\n"
"      --top-k K             keep the K likeliest bytes (0 = off)\n"
"      --top-p P             nucleus sampling (1 = off)\n"
"      --repetition-penalty R, --repetition-window W\n"
"      --stop S              stop after S is produced (repeatable, at most %d)\n"
"      --ignore-eos          go on past the model's end token (by default the turn\n"
"                            ends there: done reason stop, the token not printed)\n"
"      --request-id ID       the turn's request id (default: a random one); a retry\n"
"                            with the same id gets the committed turn's answer\n"
"      --if-tokens N         run only if the session holds N tokens (else conflict)\n"
"      --retry-for S         when the connection is lost mid-turn, reconnect and send\n"
"                            the turn again with its request id for up to S seconds\n"
"                            (default 30; 0: no retry); the turn is applied once\n"
"      --json                print every event as a JSON line: token events as\n"
"                            {\"event\":\"token\",\"id\":N,\"text\":...} (text cut on whole\n"
"                            UTF-8 characters), then the done or error event\n"
"  -v, --verbose             print the done summary on stderr\n"
"      --socket PATH         the daemon's socket (default ./lind.sock; tcp://HOST:PORT)\n"
"      --token-file PATH     over TCP, the token for hello (default $LIND_TOKEN_FILE)\n"
"\n"
"exit status: see lindctl --help (0 ok, 3 no daemon, 6 not_found, 8 busy, ...)\n",
            STOP_MAX);
}

typedef struct gen_state {
    int json, verbose;
    unsigned char pend[8];   /* --json: bytes of an unfinished UTF-8 character */
    size_t npend;
    int last_newline;        /* raw mode: last byte written was '\n' */
    size_t bytes_out;
} gen_state;

static void json_token(gen_state *st, uint64_t id, const uint8_t *p, size_t n, int flush)
{
    unsigned char buf[256];
    while (n || (flush && st->npend)) {
        size_t take = n < sizeof buf - st->npend ? n : sizeof buf - st->npend;
        if (st->npend) memcpy(buf, st->pend, st->npend);
        if (take) memcpy(buf + st->npend, p, take);
        size_t all = st->npend + take;
        if (take) p += take;
        n -= take;
        size_t cut = flush && !n ? all : ctl_utf8_complete(buf, all);
        /* A stuck prefix longer than a character is not UTF-8: let it go. */
        if (cut == 0 && all >= 4) cut = all;
        st->npend = all - cut;
        memcpy(st->pend, buf + cut, st->npend);
        if (cut) {
            json_t *o = json_pack("{s:s, s:I, s:o}", "event", "token", "id", (json_int_t)id,
                                  "text", ctl_json_bytes(buf, cut));
            ctl_json_line(o);
            json_decref(o);
        }
        if (flush && !n) st->npend = 0;
    }
}

static void sleep_ms(int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

/* Reconnect (the daemon may be restarting: waiting up to `until`, clock_mono_s())
 * and send the turn again: 0 with *c and *id, or the last code. */
static int resend(const ctl_opts *g, const lindc_gen_opts *o, lindc **c, uint64_t *id, double until)
{
    int delay = 50, rc;
    for (;;) {
        char err[512];
        rc = ctl_dial(g, c, err, sizeof err);
        if (rc == 0) {
            rc = lindc_generate(*c, o, id);
            if (rc == 0) return 0;
            lindc_free(*c);
            *c = NULL;
        }
        if (ctl_interrupted || clock_mono_s() + delay / 1000.0 > until) return rc;
        sleep_ms(delay);
        delay = delay * 2 > 1000 ? 1000 : delay * 2;
    }
}

int cmd_generate(const ctl_opts *g0, int argc, char **argv)
{
    ctl_opts g = *g0;
    lindc_gen_opts o;
    lindc_gen_opts_init(&o);
    const char *stops[STOP_MAX];
    size_t nstop = 0;
    gen_state st = { .last_newline = 1 };
    enum { O_SEED = 1, O_TOPK, O_TOPP, O_STOP, O_JSON, O_REPP, O_REPW, O_IGNEOS, O_RID, O_IFTOK,
           O_RETRY };
    char rid[33];
    double retry_for = 30;
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
        { "json", no_argument, NULL, O_JSON },
        { "ignore-eos", no_argument, NULL, O_IGNEOS },
        { "request-id", required_argument, NULL, O_RID },
        { "if-tokens", required_argument, NULL, O_IFTOK },
        { "retry-for", required_argument, NULL, O_RETRY },
        { "verbose", no_argument, NULL, 'v' },
        { 0, 0, 0, 0 },
    };
    int opt;
    uint64_t u;
    while ((opt = getopt_long(argc, argv, "hn:t:v", longopts, NULL)) != -1) {
        switch (opt) {
        case CTL_OPT_SOCKET: g.socket = optarg; break;
        case CTL_OPT_TOKEN_FILE: g.token_file = optarg; break;
        case CTL_OPT_HELP: usage(stdout); return EXIT_OK;
        case 'n': if (ctl_parse_u64("--max-tokens", optarg, &u)) return EXIT_USAGE;
                  o.max_tokens = u > INT64_MAX ? INT64_MAX : (int64_t)u; break;   /* the daemon says `limit` */
        case O_SEED: if (ctl_parse_u64("--seed", optarg, &o.seed)) return EXIT_USAGE;
                     o.has_seed = 1; break;
        case 't': if (ctl_parse_f64("--temperature", optarg, &o.temperature)) return EXIT_USAGE;
                  if (o.temperature < 0) { fprintf(stderr, "lindctl: --temperature must be >= 0\n"); return EXIT_USAGE; }
                  break;
        case O_TOPK: if (ctl_parse_u64("--top-k", optarg, &u)) return EXIT_USAGE;
                     if (u > 256) { fprintf(stderr, "lindctl: --top-k wants 0..256, got %s\n", optarg); return EXIT_USAGE; }
                     o.top_k = (int64_t)u; break;
        case O_TOPP: if (ctl_parse_f64("--top-p", optarg, &o.top_p)) return EXIT_USAGE;
                     if (o.top_p < 0) { fprintf(stderr, "lindctl: --top-p must be >= 0\n"); return EXIT_USAGE; }
                     break;
        case O_REPP: if (ctl_parse_f64("--repetition-penalty", optarg, &o.repetition_penalty)) return EXIT_USAGE;
                     if (o.repetition_penalty < 0) { fprintf(stderr, "lindctl: --repetition-penalty must be >= 0\n"); return EXIT_USAGE; }
                     break;
        case O_REPW: if (ctl_parse_u64("--repetition-window", optarg, &u)) return EXIT_USAGE;
                     if (u > 256) { fprintf(stderr, "lindctl: --repetition-window wants 0..256, got %s\n", optarg); return EXIT_USAGE; }
                     o.repetition_window = (int64_t)u; break;
        case O_STOP:
            if (nstop == STOP_MAX) {
                fprintf(stderr, "lindctl: at most %d --stop strings\n", STOP_MAX);
                return EXIT_USAGE;
            }
            stops[nstop++] = optarg;
            break;
        case O_JSON: st.json = 1; break;
        case O_IGNEOS: o.ignore_eos = 1; break;
        case O_RID:
            if (!optarg[0] || strlen(optarg) > 64) {
                fprintf(stderr, "lindctl: --request-id wants 1..64 bytes\n");
                return EXIT_USAGE;
            }
            o.request_id = optarg;
            break;
        case O_IFTOK: if (ctl_parse_u64("--if-tokens", optarg, &o.if_tokens)) return EXIT_USAGE;
                      o.has_if_tokens = 1; break;
        case O_RETRY: if (ctl_parse_f64("--retry-for", optarg, &retry_for)) return EXIT_USAGE;
                      if (retry_for < 0) { fprintf(stderr, "lindctl: --retry-for must be >= 0\n"); return EXIT_USAGE; }
                      break;
        case 'v': st.verbose = 1; break;
        default: usage(stderr); return EXIT_USAGE;
        }
    }
    int nargs = argc - optind;
    if (nargs < 1 || nargs > 2) {
        fprintf(stderr, "lindctl generate: want SESSION and optionally TEXT (got %d arguments)\n", nargs);
        usage(stderr);
        return EXIT_USAGE;
    }
    o.session = argv[optind];
    char *owned = NULL;
    if (nargs == 2) {
        if (!strcmp(argv[optind + 1], "-")) {
            int rc = ctl_read_file("-", (uint8_t **)&owned, &o.text_len);
            if (rc) {
                fprintf(stderr, "lindctl: cannot read the text from stdin: %s\n", strerror(-rc));
                return EXIT_LOCAL_FILE;
            }
            o.text = owned;
        } else {
            o.text = argv[optind + 1];
            o.text_len = strlen(argv[optind + 1]);
        }
    }
    o.stop = stops;
    o.n_stop = nstop;
    o.progress = isatty(2) && !st.json;   /* a progress line while a long text is fed */
    int progress_shown = 0;
    char err[256];
    if (ctl_check_gen_opts(&o, err, sizeof err)) {
        fprintf(stderr, "lindctl: %s\n", err);
        free(owned);
        return EXIT_USAGE;
    }

    lindc *c;
    int status = ctl_connect(&g, &c);
    if (status) { free(owned); return status; }
    ctl_catch_sigint();
    /* A new session without --seed gets a random one (kept in its state). */
    if (!o.has_seed) {
        int isnew = ctl_session_is_new(c, o.session);
        if (isnew < 0) {
            free(owned);
            lindc_free(c);
            return isnew == -EINTR ? EXIT_INTERRUPTED : ctl_report_lib(isnew, "info");
        }
        if (isnew) {
            o.seed = ctl_random_seed();
            o.has_seed = 1;
            if (st.verbose) fprintf(stderr, "[new session \"%s\", seed %llu]\n", o.session, (unsigned long long)o.seed);
        }
    }
    /* Every turn carries a request id, so that it can be sent again after
     * a lost connection without being applied twice (docs/PROTOCOL.md,
     * "Retries"). */
    if (!o.request_id) {
        int r = lindc_request_id(rid);
        if (r) {
            free(owned);
            lindc_free(c);
            return ctl_report_lib(r, "request id");
        }
        o.request_id = rid;
    }
    uint64_t id;
    size_t text_len = o.text_len;
    int rc = lindc_generate(c, &o, &id);
    if (rc) {
        free(owned);
        lindc_free(c);
        return ctl_report_lib(rc, "generate");
    }
    int cancel_sent = 0;
    /* After a reconnect the turn's events start again from its first
     * token (its recorded answer, or a rerun from the same committed state
     * and sampler): the bytes already written are skipped. */
    size_t skip = 0;
    int retried = 0;
    double retry_until = clock_mono_s() + retry_for;
    status = EXIT_CONNECTION;
    for (;;) {
        if (ctl_interrupted >= 2) { status = EXIT_INTERRUPTED; break; }
        if (ctl_interrupted && !cancel_sent) {
            cancel_sent = 1;
            if ((rc = lindc_cancel(c, id, NULL))) { status = ctl_report_lib(rc, "cancel"); break; }
            ctl_progress_line(NULL, &progress_shown);
            fprintf(stderr, "lindctl: cancelling (Ctrl-C again quits at once)\n");
        }
        lindc_event ev;
        rc = lindc_next(c, &ev, -1);
        if (rc == -EINTR) continue;
        if (rc && ctl_conn_lost(rc) && !cancel_sent && clock_mono_s() < retry_until) {
            /* The connection is gone: the turn was committed (its answer is
             * recorded under the request id) or is lost whole. Again. */
            lindc_free(c);
            c = NULL;
            rc = resend(&g, &o, &c, &id, retry_until);
            if (rc == 0) {
                if (!retried) fprintf(stderr, "lindctl: the connection was lost mid-turn; sent the turn "
                                      "again with its request id %s\n", o.request_id);
                retried = 1;
                skip = st.bytes_out;
                continue;
            }
        }
        if (rc) { status = ctl_report_lib(rc, "generate"); break; }
        /* Skip the cancel's own result; id 0 is a connection-level error. */
        if (ev.id != id && !(ev.kind == LINDC_EV_ERROR && ev.id == 0)) continue;
        if (ev.kind == LINDC_EV_PROGRESS) {
            ctl_progress_line(&ev, &progress_shown);
            continue;
        }
        ctl_progress_line(NULL, &progress_shown);
        if (ev.kind == LINDC_EV_TOKEN && skip) {   /* written before the reconnect */
            size_t k = ev.len < skip ? ev.len : skip;
            skip -= k;
            ev.data += k;
            ev.len -= k;
            if (!ev.len) continue;
        }
        if (ev.kind == LINDC_EV_ERROR && retried && !strcmp(ev.code, "busy") && clock_mono_s() < retry_until) {
            /* The first try is still ending on the daemon (cancelled by the
             * lost connection, being saved): ask again shortly. */
            sleep_ms(100);
            if (lindc_generate(c, &o, &id) == 0) continue;
        }
        if (ev.kind == LINDC_EV_TOKEN) {
            if (st.json) {
                json_token(&st, id, ev.data, ev.len, 0);
            } else if (ev.len) {
                fwrite(ev.data, 1, ev.len, stdout);
                fflush(stdout);
                st.last_newline = ev.data[ev.len - 1] == '\n';
            }
            st.bytes_out += ev.len;
        } else if (ev.kind == LINDC_EV_DONE) {
            char reason[32] = "";
            lindc_get_strcpy(ev.map, "reason", reason, sizeof reason);
            if (st.json) {
                json_token(&st, id, NULL, 0, 1);
                json_t *j = ctl_to_json(ev.map);
                ctl_json_line(j);
                json_decref(j);
            } else if (!st.last_newline && isatty(1)) {
                fputc('\n', stdout);
                fflush(stdout);
            }
            if (st.verbose) {
                uint64_t tin = 0, tout = 0, stok = 0;
                double ms = 0;
                lindc_get_u64(ev.map, "tokens_in", &tin);
                lindc_get_u64(ev.map, "tokens_out", &tout);
                lindc_get_u64(ev.map, "session_tokens", &stok);
                lindc_get_f64(lindc_get(ev.map, "ms"), "total", &ms);
                fprintf(stderr, "[%s: %llu in, %llu out, session at %llu tokens, %.1f ms]\n", reason,
                        (unsigned long long)tin, (unsigned long long)tout,
                        (unsigned long long)stok, ms);
            }
            int replayed = 0;
            lindc_get_bool(ev.map, "replayed", &replayed);
            if (!strcmp(reason, "cancelled") && retried && replayed && !cancel_sent) {
                /* The daemon had cancelled the turn when the connection was
                 * lost (docs/PROTOCOL.md, cancel) and committed that. */
                fprintf(stderr, "lindctl: the lost connection cut the turn short; the session keeps the "
                        "%zu bytes streamed before it\n", st.bytes_out);
                status = EXIT_CONNECTION;
            } else if (!strcmp(reason, "cancelled")) {
                uint64_t fed = text_len;
                lindc_get_u64(ev.map, "fed_bytes", &fed);
                if (cancel_sent && fed < text_len) {
                    fprintf(stderr, "lindctl: cancelled after %llu of %zu bytes; the session holds them "
                            "(send the rest again to continue)\n", (unsigned long long)fed, text_len);
                    status = EXIT_INTERRUPTED;
                } else if (cancel_sent) {
                    fprintf(stderr, "lindctl: cancelled; the session keeps the %zu bytes streamed\n", st.bytes_out);
                    status = EXIT_INTERRUPTED;
                } else {
                    fprintf(stderr, "lindctl: the daemon cancelled the turn (is it shutting down?)\n");
                    status = EXIT_SHUTTING_DOWN;
                }
            } else {
                status = EXIT_OK;
            }
            break;
        } else if (ev.kind == LINDC_EV_ERROR) {
            if (st.json) {
                json_t *j = ctl_to_json(ev.map);
                ctl_json_line(j);
                json_decref(j);
            }
            status = ctl_report_event(&ev);
            /* The request holds only what the command line gave: a field the
             * daemon refused is a bad command line, as if lindctl had caught it. */
            if (!strcmp(ev.code, "bad_request")) status = EXIT_USAGE;
            break;
        }
    }
    free(owned);
    lindc_free(c);
    return status;
}
