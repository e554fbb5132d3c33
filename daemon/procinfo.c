/* daemon/procinfo.c — the process's resource use. See procinfo.h. */
#include "daemon/procinfo.h"

#include <dirent.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* Seconds since the epoch the machine booted (/proc/stat's btime), or -1. */
static double boot_time(void)
{
    FILE *f = fopen("/proc/stat", "r");
    char line[256];
    double bt = -1;
    while (f && fgets(line, sizeof line, f)) {
        unsigned long long v;
        if (sscanf(line, "btime %llu", &v) == 1) { bt = (double)v; break; }
    }
    if (f) fclose(f);
    return bt;
}

void procinfo_read(procinfo *p)
{
    p->rss_bytes = p->virtual_bytes = p->cpu_seconds = p->start_time = p->open_fds = p->threads = -1;
    long page = sysconf(_SC_PAGESIZE), hz = sysconf(_SC_CLK_TCK);
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long long size, res;
    if (f && fscanf(f, "%llu %llu", &size, &res) == 2 && page > 0) {
        p->virtual_bytes = (double)size * (double)page;
        p->rss_bytes = (double)res * (double)page;
    }
    if (f) fclose(f);
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0)
        p->cpu_seconds = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
                         (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
    /* /proc/self/stat: the command name is in parentheses and may hold
     * blanks; fields 20 (num_threads) and 22 (starttime, clock ticks after
     * boot) follow the last ')'. */
    char st[1024];
    f = fopen("/proc/self/stat", "r");
    size_t n = f ? fread(st, 1, sizeof st - 1, f) : 0;
    if (f) fclose(f);
    st[n] = 0;
    char *rp = strrchr(st, ')');
    long long threads = 0;
    unsigned long long start = 0;
    if (rp && sscanf(rp + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %lld %*d %llu",
                     &threads, &start) == 2) {
        p->threads = (double)threads;
        double bt = boot_time();
        if (bt >= 0 && hz > 0) p->start_time = bt + (double)start / (double)hz;
    }
    DIR *d = opendir("/proc/self/fd");
    if (d) {
        long k = 0;
        for (struct dirent *de; (de = readdir(d));)
            if (de->d_name[0] != '.') k++;
        closedir(d);
        p->open_fds = (double)(k - 1);   /* less the one opendir holds */
    }
}

/* s as a label value: '\', '"' and newlines escaped. */
static void label(char *out, size_t cap, const char *s)
{
    size_t o = 0;
    for (; *s && o + 3 < cap; s++) {
        if (*s == '\\' || *s == '"') { out[o++] = '\\'; out[o++] = *s; }
        else if (*s == '\n') { out[o++] = '\\'; out[o++] = 'n'; }
        else out[o++] = *s;
    }
    out[o] = 0;
}

static size_t put(char *buf, size_t cap, size_t at, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static size_t put(char *buf, size_t cap, size_t at, const char *fmt, ...)
{
    if (at >= cap) return at;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + at, cap - at, fmt, ap);
    va_end(ap);
    if (n < 0) return at;
    return at + (size_t)n < cap ? at + (size_t)n : cap - 1;
}

size_t procinfo_metrics(const procinfo *p, const char *version, const char *model, const char *fingerprint,
                        char *buf, size_t cap)
{
    static const struct { const char *name, *type, *help; size_t off; } m[] = {
        { "process_resident_memory_bytes", "gauge", "resident memory size in bytes", offsetof(procinfo, rss_bytes) },
        { "process_virtual_memory_bytes", "gauge", "virtual memory size in bytes", offsetof(procinfo, virtual_bytes) },
        { "process_cpu_seconds_total", "counter", "user and system CPU time spent in seconds",
          offsetof(procinfo, cpu_seconds) },
        { "process_start_time_seconds", "gauge", "start time of the process since the Unix epoch in seconds",
          offsetof(procinfo, start_time) },
        { "process_open_fds", "gauge", "number of open file descriptors", offsetof(procinfo, open_fds) },
        { "process_threads", "gauge", "number of OS threads in the process", offsetof(procinfo, threads) },
    };
    size_t at = 0;
    if (cap) buf[0] = 0;
    for (size_t i = 0; i < sizeof m / sizeof m[0]; i++) {
        double v = *(const double *)((const char *)p + m[i].off);
        if (v < 0) continue;   /* not readable here */
        at = put(buf, cap, at, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", m[i].name, m[i].help, m[i].name,
                 m[i].type, m[i].name, v);
    }
    char lv[64], lm[300], lf[64];
    label(lv, sizeof lv, version);
    label(lm, sizeof lm, model);
    label(lf, sizeof lf, fingerprint);
    at = put(buf, cap, at, "# HELP lind_build_info the daemon's version, the served model and its fingerprint\n"
             "# TYPE lind_build_info gauge\nlind_build_info{version=\"%s\",model=\"%s\",fingerprint=\"%s\"} 1\n",
             lv, lm, lf);
    return at;
}
