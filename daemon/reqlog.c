/* daemon/reqlog.c — the request log. See reqlog.h. */
#include "daemon/reqlog.h"

#include <errno.h>
#include <fcntl.h>
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

void reqlog_close(reqlog *l)
{
    if (l->owned) close(l->fd);
    l->fd = 2;
    l->owned = 0;
}

/* A session name as a log field: bare when it is safe, else quoted with
 * '"' and '\' escaped. Names hold no control characters (bad_name). */
static void put_name(char *buf, size_t cap, const char *name)
{
    if (*name && !strpbrk(name, " \"=\\")) {
        snprintf(buf, cap, "%s", name);
        return;
    }
    size_t o = 0;
    if (o + 1 < cap) buf[o++] = '"';
    for (const char *p = name; *p && o + 3 < cap; p++) {
        if (*p == '"' || *p == '\\') buf[o++] = '\\';
        buf[o++] = *p;
    }
    if (o + 1 < cap) buf[o++] = '"';
    buf[o] = 0;
}

void reqlog_turn(const reqlog *l, const reqlog_turn_info *t)
{
    if (!l || l->level < REQLOG_INFO) return;
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    gmtime_r(&tv.tv_sec, &tm);
    char when[40], name[300], ttft[32], detail[160] = "", line[800];
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
    put_name(name, sizeof name, t->session);
    if (t->ttft_ms >= 0) snprintf(ttft, sizeof ttft, "%.2f", t->ttft_ms);
    else snprintf(ttft, sizeof ttft, "-");
    if (l->level >= REQLOG_DEBUG)
        snprintf(detail, sizeof detail, " queue_ms=%.2f prompt_ms=%.2f generate_ms=%.2f save_ms=%.2f",
                 t->queue_ms, t->prompt_ms, t->generate_ms, t->save_ms);
    int n = snprintf(line, sizeof line,
                     "%s.%03dZ info turn session=%s op=%s in=%llu out=%llu ttft_ms=%s total_ms=%.2f outcome=%s%s\n",
                     when, (int)(tv.tv_usec / 1000), name, t->op, (unsigned long long)t->tokens_in,
                     (unsigned long long)t->tokens_out, ttft, t->total_ms, t->outcome, detail);
    if (n < 0) return;
    if ((size_t)n >= sizeof line) {
        n = sizeof line - 1;
        line[n - 1] = '\n';
    }
    ssize_t w = write(l->fd, line, (size_t)n);
    (void)w;   /* a full disk must not stop the daemon */
}
