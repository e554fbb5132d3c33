/* daemon/procinfo.h — the process's own resource use, for /metrics
 * (docs/HTTP.md, "Metrics"): Prometheus's standard process_* metrics and
 * lind_build_info. Any thread. */
#ifndef LIND_DAEMON_PROCINFO_H
#define LIND_DAEMON_PROCINFO_H

#include <stddef.h>
#include <stdint.h>

typedef struct procinfo {
    double rss_bytes;        /* resident set (/proc/self/statm) */
    double virtual_bytes;    /* address space (/proc/self/statm) */
    double cpu_seconds;      /* user + system time of every thread (getrusage) */
    double start_time;       /* Unix time the process started (/proc/self/stat, btime) */
    double open_fds;         /* entries of /proc/self/fd */
    double threads;          /* /proc/self/stat's num_threads */
} procinfo;

/* Read them; a figure that cannot be read is -1. */
void procinfo_read(procinfo *p);
/* The Prometheus text of p and of
 *   lind_build_info{version="...",model="...",fingerprint="..."} 1
 * into buf (label values escaped as the format wants). The bytes written
 * (cut at cap - 1, NUL-terminated). */
size_t procinfo_metrics(const procinfo *p, const char *version, const char *model, const char *fingerprint,
                        char *buf, size_t cap);

#endif
