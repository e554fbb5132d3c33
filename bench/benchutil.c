/* bench/benchutil.c — see benchutil.h. */
#include "bench/benchutil.h"

#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

double bench_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_median(double *v, size_t n) {
    if (!n) return 0;
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static size_t meminfo_kib(const char *key) {
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    size_t kib = 0, kl = strlen(key);
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, key, kl) && line[kl] == ':') {
            kib = strtoull(line + kl + 1, NULL, 10);
            break;
        }
    if (f) fclose(f);
    return kib;
}

size_t bench_mem_available(void) { return meminfo_kib("MemAvailable") * 1024; }

void bench_header(FILE *f, int argc, char **argv) {
    fprintf(f, "Command: `");
    for (int i = 0; i < argc; i++) fprintf(f, "%s%s", i ? " " : "", argv[i]);
    fprintf(f, "`\n\n");
    char cpu[256] = "unknown CPU", line[512];
    FILE *c = fopen("/proc/cpuinfo", "r");
    while (c && fgets(line, sizeof line, c))
        if (!strncmp(line, "model name", 10)) {
            char *p = strchr(line, ':');
            if (p) {
                snprintf(cpu, sizeof cpu, "%s", p + 2);
                cpu[strcspn(cpu, "\n")] = 0;
            }
            break;
        }
    if (c) fclose(c);
    double load[3] = {0, 0, 0};
    if (getloadavg(load, 3) < 0) load[0] = load[1] = load[2] = -1;
    struct utsname u;
    uname(&u);
    time_t now = time(NULL);
    char when[64];
    strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", gmtime(&now));
    fprintf(f, "Machine: %s, %ld cores online, %.1f GiB memory (%.1f GiB available), load average %.2f %.2f %.2f, "
               "%s %s; %s\n\n",
            cpu, sysconf(_SC_NPROCESSORS_ONLN), (double)meminfo_kib("MemTotal") / (1 << 20),
            (double)meminfo_kib("MemAvailable") / (1 << 20), load[0], load[1], load[2], u.sysname, u.release, when);
}
