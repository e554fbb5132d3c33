/* bench/benchutil.c — see benchutil.h. */
#include "bench/benchutil.h"

#include <pthread.h>
#include <stdint.h>
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

/* ---- read bandwidth ------------------------------------------------------- */

#define RB_BYTES ((size_t)1 << 30)

typedef struct rb_arg {
    const uint64_t *p;
    size_t n;        /* uint64 words */
    uint64_t sum;    /* kept so the loads are not optimized away */
} rb_arg;

/* Eight independent sums: the loop vectorizes and the adds never limit it. */
__attribute__((noinline)) static uint64_t rb_sum(const uint64_t *restrict p, size_t n) {
    uint64_t s[8] = {0};
    for (size_t i = 0; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) s[l] += p[i + l];
    return s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7];
}

static void *rb_thread(void *arg) {
    rb_arg *a = arg;
    a->sum = rb_sum(a->p, a->n);
    return NULL;
}

/* The caller sums one half, a second thread the other (its start, some
 * microseconds, is inside the ~15 ms timed). */
double bench_read_gbs(void) {
    uint64_t *buf = NULL;
    if (posix_memalign((void **)&buf, 4096, RB_BYTES)) return 0;
    memset(buf, 1, RB_BYTES);   /* fault every page in before timing */
    double best = 0;
    size_t half = RB_BYTES / sizeof(uint64_t) / 2;
    for (int pass = 0; pass < 5; pass++) {
        rb_arg a = {buf + half, half, 0};
        pthread_t th;
        double t0 = bench_now();
        if (pthread_create(&th, NULL, rb_thread, &a)) {
            best = 0;
            break;
        }
        uint64_t mine = rb_sum(buf, half);
        pthread_join(th, NULL);
        double dt = bench_now() - t0;
        if (mine + a.sum != (uint64_t)0x0101010101010101ull * 2 * half) fprintf(stderr, "read bandwidth: bad sum\n");
        double gbs = (double)RB_BYTES / dt / 1e9;
        if (gbs > best) best = gbs;
    }
    free(buf);
    return best;
}
