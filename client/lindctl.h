/* client/lindctl.h — what lindctl's command files share: global options,
 * exit statuses, and helpers to connect, report errors and print JSON.
 * Internal to the lindctl program (not part of the client library). */
#ifndef LIND_CLIENT_LINDCTL_H
#define LIND_CLIENT_LINDCTL_H

#include <jansson.h>
#include <signal.h>
#include <stdio.h>

#include "client/lindclient.h"

/* Exit statuses, one per class of failure (docs/LINDCTL.md lists them). */
enum {
    EXIT_OK = 0,
    EXIT_INTERNAL = 1,     /* the daemon reported `internal` or an unknown code */
    EXIT_USAGE = 2,        /* bad command line */
    EXIT_UNREACHABLE = 3,  /* no daemon at the socket */
    EXIT_CONNECTION = 4,   /* connection lost or broken protocol mid-request */
    EXIT_REFUSED = 5,      /* bad_request, unknown_op, too_large, decode, bad_name */
    EXIT_NOT_FOUND = 6,
    EXIT_EXISTS = 7,
    EXIT_BUSY = 8,
    EXIT_LIMIT = 9,
    EXIT_BAD_STATE = 10,
    EXIT_IO = 11,          /* the daemon's store failed */
    EXIT_SHUTTING_DOWN = 12,
    EXIT_LOCAL_FILE = 13,  /* a local file could not be read or written */
    EXIT_INTERRUPTED = 130 /* Ctrl-C */
};

#define CTL_DEFAULT_SOCKET "./lind.sock"

/* Options every command takes. */
typedef struct ctl_opts {
    const char *socket;    /* --socket, else $LIND_SOCKET, else ./lind.sock */
} ctl_opts;

/* Set by the SIGINT handler that ctl_catch_sigint() installs. */
extern volatile sig_atomic_t ctl_interrupted;
/* Install a SIGINT handler without SA_RESTART, so blocking client calls
 * return -EINTR and the command decides what Ctrl-C means. */
void ctl_catch_sigint(void);

/* Connect, or print why not and return EXIT_UNREACHABLE. */
int  ctl_connect(const ctl_opts *g, lindc **out);
/* Exit status for a server error code. */
int  ctl_exit_for_code(const char *code);
/* Print an error event ("lindctl: not_found: no session ...") and return
 * its exit status. */
int  ctl_report_event(const lindc_event *ev);
/* Print a library failure during `what` and return its exit status. */
int  ctl_report_lib(int rc, const char *what);
/* Send r and wait for its result: EXIT_OK with *ev filled, or a reported
 * failure's exit status. */
int  ctl_call(lindc *c, const lindc_req *r, lindc_event *ev);

/* msgpack → JSON. bin and str become JSON strings (bytes that are not
 * UTF-8 become U+FFFD). Caller owns the returned value (json_decref). */
json_t *ctl_to_json(const msgpack_object *o);
/* A JSON string from raw bytes, invalid UTF-8 replaced by U+FFFD. */
json_t *ctl_json_bytes(const void *p, size_t n);
/* Print one JSON value as a line on stdout and flush. */
void ctl_json_line(json_t *v);

/* Length of the longest prefix of p[0..n) that does not end inside an
 * incomplete UTF-8 sequence (so streamed text can be cut on characters). */
size_t ctl_utf8_complete(const unsigned char *p, size_t n);
/* Format a millisecond epoch as local "YYYY-MM-DD HH:MM:SS". */
void ctl_fmt_time(char *buf, size_t cap, uint64_t ms);

/* Print a transcript array ({role, text} maps, oldest first): the user's
 * turns after `in_prefix`, the model's text as it is. */
void ctl_print_transcript(const msgpack_object *arr, FILE *f, const char *in_prefix);

/* Commands: each parses its own argv (argv[0] is the command name) and
 * returns an exit status. */
int cmd_generate(const ctl_opts *g, int argc, char **argv);
int cmd_chat(const ctl_opts *g, int argc, char **argv);
int cmd_sessions(const ctl_opts *g, int argc, char **argv);
int cmd_stats(const ctl_opts *g, int argc, char **argv);
int cmd_stress(const ctl_opts *g, int argc, char **argv);

/* Parse the options every command accepts (--socket, --help) out of a
 * getopt_long loop: returns 1 when `opt` was one of them. */
#define CTL_OPT_SOCKET 1000
#define CTL_OPT_HELP   'h'
#define CTL_COMMON_LONGOPTS \
    { "socket", required_argument, NULL, CTL_OPT_SOCKET }, \
    { "help", no_argument, NULL, CTL_OPT_HELP }

/* Parse a number option strictly; print an error naming `opt` on failure. */
int ctl_parse_u64(const char *opt, const char *s, uint64_t *out);
int ctl_parse_f64(const char *opt, const char *s, double *out);

#endif
