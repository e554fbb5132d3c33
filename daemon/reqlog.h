/* daemon/reqlog.h — `lind serve`'s log: one line per finished turn (the
 * request log) plus the daemon's own notices, filtered by a level and
 * written to stderr or a file (--log-level, --log-file).
 *
 * Every line has one form (docs/DAEMON.md, "The log"):
 *   TIME LEVEL KIND key=value key=value ...
 * TIME is UTC with milliseconds (2026-11-23T18:40:20.123Z), LEVEL one of
 * error, warn, info, debug, KIND a word saying what the line is about
 * (turn, http, start, stop, signal, conn, model, store, log, ...), then
 * logfmt pairs: a value is bare when it holds no space, quote, '=', '\' or
 * control character, else in double quotes with '"' and '\' escaped and
 * control characters as \xNN. Notices carry their sentence as msg="...".
 *
 * A turn line is written when its outcome is known (after the commit):
 *   2026-11-23T18:40:20.123Z info turn session=demo op=generate in=5 out=40
 *     ttft_ms=2.4 total_ms=19.1 outcome=length
 * and at level debug " queue_ms=... prompt_ms=... generate_ms=... save_ms=..." before the newline
 * (one line; `session` is quoted when it holds spaces, quotes or '='). Lines are
 * written with one write(2) each, so threads never interleave inside one. */
#ifndef LIND_DAEMON_REQLOG_H
#define LIND_DAEMON_REQLOG_H

#include <stddef.h>
#include <stdint.h>

typedef enum reqlog_level {
    REQLOG_ERROR = 0, REQLOG_WARN = 1, REQLOG_INFO = 2, REQLOG_DEBUG = 3,
} reqlog_level;

typedef struct reqlog {
    int fd;                /* 2 (stderr) unless --log-file opened another */
    int owned;             /* fd was opened here: reqlog_close() closes it */
    reqlog_level level;    /* lines above this level are dropped */
    const char *path;      /* the --log-file path, or NULL (stderr) */
} reqlog;

/* "error", "warn", "info", "debug" → 0, or -EINVAL. */
int  reqlog_parse_level(const char *s, reqlog_level *out);
/* Open the log: path NULL = stderr, else appended to (created 0640).
 * 0, or a negated errno with a sentence in err. */
int  reqlog_open(reqlog *l, const char *path, reqlog_level level, char *err, size_t errlen);
void reqlog_close(reqlog *l);
/* Open the log file again by its path and put it in place of the old one
 * (dup2: a thread writing meanwhile writes whole lines to one or the
 * other), for log rotation (SIGHUP). 1 when a file was reopened, 0 when the
 * log is stderr (nothing to do), or a negated errno with a sentence in err
 * (the old file stays in use). */
int  reqlog_reopen(reqlog *l, char *err, size_t errlen);

/* The daemon's own lines. Until reqlog_use_for_notices names the log they
 * go to stderr at level info. An error line also goes to stderr when the
 * log is a file, so that whoever started the daemon sees why it stopped. */
void reqlog_use_for_notices(reqlog *l);
/* TIME LEVEL KIND msg="the sentence" */
void lind_log(reqlog_level level, const char *kind, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* TIME LEVEL KIND followed by fmt, which must make logfmt pairs (quote
 * strings that may hold blanks with reqlog_value). */
void lind_log_kv(reqlog_level level, const char *kind, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* s as a logfmt value into buf (bare or quoted, see above); returns buf. */
const char *reqlog_value(char *buf, size_t cap, const char *s);

/* What one finished turn reports. */
typedef struct reqlog_turn_info {
    const char *session, *op;      /* op: "generate" or "append" */
    uint64_t tokens_in, tokens_out;
    double ttft_ms;                /* < 0: no token was produced */
    double total_ms;
    double queue_ms, prompt_ms, generate_ms, save_ms;   /* the split, at level debug */
    const char *outcome;           /* done reason ("length", "stop", "cancelled") or "io" */
} reqlog_turn_info;

/* One finished turn at level info; at level debug the line also carries
 * queue_ms, prompt_ms, generate_ms and save_ms. */
void reqlog_turn(const reqlog *l, const reqlog_turn_info *t);

/* What one answered HTTP completion or chat request reports (daemon/http.c):
 *   2026-11-27T14:40:20.123Z info http id=resp-0123456789abcdef
 *     endpoint=chat session=resp-0123456789abcdef user=alice status=200 outcome=stop
 * `user` is the request's OpenAI `user` field ("" when it had none), quoted
 * like a session name, control characters as \xNN. */
typedef struct reqlog_http_info {
    const char *id, *endpoint, *session, *user;
    int status;
    const char *outcome;           /* finish reason, or the error code */
} reqlog_http_info;

void reqlog_http(const reqlog *l, const reqlog_http_info *t);

#endif
