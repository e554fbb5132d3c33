/* daemon/reqlog.c — the request log. See reqlog.h. */
#include "daemon/reqlog.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

int reqlog_parse_level(const char *s, reqlog_level *out)
{
    static const char *const names[] = { "error", "warn", "info", "debug" };
    for (int i = 0; i < 4; i++)
        if (!strcmp(s, names[i])) {
            *out = (reqlog_level)i;
            return 0;
        }
    return -EINVAL;
}

int reqlog_open(reqlog *l, const char *path, reqlog_level level, char *err, size_t errlen)
{
    l->fd = 2;
    l->owned = 0;
    l->level = level;
    l->path = path;
    if (!path) return 0;
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
    if (fd < 0) {
        int e = errno;
        snprintf(err, errlen, "cannot open the log file %s: %s", path, strerror(e));
        return -e;
    }
    l->fd = fd;
    l->owned = 1;
    return 0;
}

int reqlog_reopen(reqlog *l, char *err, size_t errlen)
{
    if (!l->owned || !l->path) return 0;
    int fd = open(l->path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
    if (fd < 0) {
        int e = errno;
        snprintf(err, errlen, "cannot reopen the log file %s: %s", l->path, strerror(e));
        return -e;
    }
    int rc = dup3(fd, l->fd, O_CLOEXEC) < 0 ? -errno : 1;
    if (rc < 0) snprintf(err, errlen, "cannot reopen the log file %s: %s", l->path, strerror(-rc));
    close(fd);
    return rc;
}

void reqlog_close(reqlog *l)
{
    if (l->owned) close(l->fd);
    l->fd = 2;
    l->owned = 0;
}

/* A session name or user id as a log field: bare when it is safe, else
 * quoted with '"' and '\' escaped (and control characters as \xNN: names
 * hold none, a user id may). */
static void put_name(char *buf, size_t cap, const char *name);

const char *reqlog_value(char *buf, size_t cap, const char *s)
{
    put_name(buf, cap, s);
    return buf;
}

static void put_name(char *buf, size_t cap, const char *name)
{
    int plain = *name != 0;
    for (const char *p = name; *p && plain; p++)
        plain = (unsigned char)*p > 0x20 && *p != 0x7f && !strchr("\"=\\", *p);
    if (plain) {
        snprintf(buf, cap, "%s", name);
        return;
    }
    size_t o = 0;
    if (o + 1 < cap) buf[o++] = '"';
    for (const char *p = name; *p && o + 6 < cap; p++) {
        unsigned char c = (unsigned char)*p;
        if (c < 0x20 || c == 0x7f) {
            o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", c);
            continue;
        }
        if (c == '"' || c == '\\') buf[o++] = '\\';
        buf[o++] = (char)c;
    }
    if (o + 1 < cap) buf[o++] = '"';
    buf[o] = 0;
}

/* The line's time stamp: 2026-11-23T18:40:20.123Z. */
static void put_when(char *buf, size_t cap)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    gmtime_r(&tv.tv_sec, &tm);
    char s[40];
    strftime(s, sizeof s, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf, cap, "%s.%03dZ", s, (int)(tv.tv_usec / 1000));
}

/* One line, one write(2); a line cut at the buffer still ends in '\n'. */
static void put_line(const reqlog *l, char *line, size_t cap, int n)
{
    if (n < 0) return;
    if ((size_t)n >= cap) {
        n = (int)cap - 1;
        line[n - 1] = '\n';
    }
    ssize_t w = write(l->fd, line, (size_t)n);
    (void)w;   /* a full disk must not stop the daemon */
}

void reqlog_http(const reqlog *l, const reqlog_http_info *t)
{
    if (!l || l->level < REQLOG_INFO) return;
    char when[48], session[300], user[1100], line[1800];
    put_when(when, sizeof when);
    put_name(session, sizeof session, t->session);
    put_name(user, sizeof user, t->user);
    int n = snprintf(line, sizeof line, "%s info http id=%s endpoint=%s session=%s user=%s status=%d outcome=%s\n",
                     when, t->id, t->endpoint, session, user, t->status, t->outcome);
    put_line(l, line, sizeof line, n);
}

void reqlog_turn(const reqlog *l, const reqlog_turn_info *t)
{
    if (!l || l->level < REQLOG_INFO) return;
    char when[48], name[300], ttft[32], detail[160] = "", line[800];
    put_when(when, sizeof when);
    put_name(name, sizeof name, t->session);
    if (t->ttft_ms >= 0) snprintf(ttft, sizeof ttft, "%.2f", t->ttft_ms);
    else snprintf(ttft, sizeof ttft, "-");
    if (l->level >= REQLOG_DEBUG)
        snprintf(detail, sizeof detail, " queue_ms=%.2f prompt_ms=%.2f generate_ms=%.2f save_ms=%.2f",
                 t->queue_ms, t->prompt_ms, t->generate_ms, t->save_ms);
    int n = snprintf(line, sizeof line,
                     "%s info turn session=%s op=%s in=%llu out=%llu ttft_ms=%s total_ms=%.2f outcome=%s%s\n",
                     when, name, t->op, (unsigned long long)t->tokens_in, (unsigned long long)t->tokens_out,
                     ttft, t->total_ms, t->outcome, detail);
    put_line(l, line, sizeof line, n);
}

/* ---- the daemon's notices ------------------------------------------------ */

static const reqlog *notices;
static const char *const level_names[] = { "error", "warn", "info", "debug" };

void reqlog_use_for_notices(reqlog *l) { notices = l; }

static void note_line(reqlog_level level, const char *kind, const char *kv)
{
    static const reqlog stderr_log = { 2, 0, REQLOG_INFO, NULL };
    const reqlog *l = notices ? notices : &stderr_log;
    if (level > l->level) return;
    char when[48], line[4200];
    put_when(when, sizeof when);
    int n = snprintf(line, sizeof line, "%s %s %s %s\n", when, level_names[level], kind, kv);
    put_line(l, line, sizeof line, n);
    if (level == REQLOG_ERROR && l->fd != 2) put_line(&stderr_log, line, sizeof line, n);
}

void lind_log(reqlog_level level, const char *kind, const char *fmt, ...)
{
    char msg[2048], kv[4100];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    char *v = kv + 4;
    memcpy(kv, "msg=", 4);
    put_name(v, sizeof kv - 4, msg);
    if (*v != '"') {   /* a one-word message: quoted all the same, so msg always reads alike */
        size_t len = strlen(v);
        memmove(v + 1, v, len);
        v[0] = '"';
        v[len + 1] = '"';
        v[len + 2] = 0;
    }
    note_line(level, kind, kv);
}

void lind_log_kv(reqlog_level level, const char *kind, const char *fmt, ...)
{
    char kv[4000];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(kv, sizeof kv, fmt, ap);
    va_end(ap);
    note_line(level, kind, kv);
}
