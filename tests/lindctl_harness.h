/* tests/lindctl_harness.h — header-only harness for lindctl's end-to-end
 * tests: a temporary directory with a small random model (tests/testmodel.h),
 * a real `$LIND_BUILD/lind serve` on a socket and database in it, and
 * helpers that run `$LIND_BUILD/lindctl` capturing stdout, stderr and the
 * exit status. LIND_BUILD defaults to "build". */
#ifndef LIND_TESTS_LINDCTL_HARNESS_H
#define LIND_TESTS_LINDCTL_HARNESS_H

#include "kernels/clock.h"
#include "tests/check.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/testmodel.h"

typedef struct harness {
    char dir[64];
    char sock[128], db[128], model[128], log[128];
    char lind[512], lindctl[512];
    pid_t daemon;
    double scale;          /* time bounds are seconds times this (test_time_scale) */
    const char *extra[8];  /* more `lind serve` options (NULL-terminated) */
} harness;

/* Captured result of one lindctl run. */
typedef struct ctl_run {
    int status;            /* exit status, or 128+signal */
    char *out, *err;       /* NUL-terminated (may also contain NULs) */
    size_t out_len, err_len;
} ctl_run;

static inline void harness_sleep_ms(int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {}
}

/* Make the directory and a model of the given width/depth in it. */
static inline int harness_init(harness *h, int d_model, int n_layers)
{
    memset(h, 0, sizeof *h);
    h->daemon = -1;
    h->scale = test_time_scale();
    snprintf(h->dir, sizeof h->dir, "/tmp/lindctl-test-XXXXXX");
    if (!mkdtemp(h->dir)) return -errno;
    snprintf(h->sock, sizeof h->sock, "%s/lind.sock", h->dir);
    snprintf(h->db, sizeof h->db, "%s/lind.db", h->dir);
    snprintf(h->model, sizeof h->model, "%s/model", h->dir);
    snprintf(h->log, sizeof h->log, "%s/daemon.log", h->dir);
    const char *b = getenv("LIND_BUILD");
    if (!b || !*b) b = "build";
    snprintf(h->lind, sizeof h->lind, "%s/lind", b);
    snprintf(h->lindctl, sizeof h->lindctl, "%s/lindctl", b);
    int heads = d_model / 8 > 0 ? d_model / 8 : 1;
    testmodel_cfg c = testmodel_config(d_model, n_layers, heads, d_model / heads, 4 * d_model,
                                     "linear,aft", 1, "decay");
    testmodel_opts o = { 0.9f, 1.0f };
    return testmodel_write(h->model, &c, 1234, &o);
}

/* True once something accepts connections on the socket. */
static inline int harness_socket_up(const char *path)
{
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    size_t l = strlen(path);
    if (l >= sizeof sa.sun_path) { close(fd); return 0; }
    memcpy(sa.sun_path, path, l + 1);
    int ok = connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
    close(fd);
    return ok;
}

/* Start `lind serve` and wait until it accepts connections. 0, or -1 with
 * the reason printed. */
static inline int harness_start(harness *h)
{
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        int fd = open(h->log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) { dup2(fd, 1); dup2(fd, 2); close(fd); }
        const char *av[24] = { h->lind, "serve", "--model", h->model, "--socket", h->sock,
                               "--db", h->db, "--backend", "cpu" };
        int n = 10;
        for (int i = 0; i < 8 && h->extra[i]; i++) av[n++] = h->extra[i];
        av[n] = NULL;
        execv(h->lind, (char *const *)av);
        fprintf(stderr, "exec %s: %s\n", h->lind, strerror(errno));
        _exit(127);
    }
    h->daemon = pid;
    double deadline = clock_mono_s() + 30 * h->scale;
    while (clock_mono_s() < deadline) {
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            h->daemon = -1;
            printf("NOTE daemon exited at start (status %d); log %s:\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1, h->log);
            FILE *f = fopen(h->log, "r");
            char line[512];
            while (f && fgets(line, sizeof line, f)) printf("NOTE   %s", line);
            if (f) fclose(f);
            return -1;
        }
        if (harness_socket_up(h->sock)) return 0;
        harness_sleep_ms(20);
    }
    printf("NOTE daemon did not come up within the deadline\n");
    return -1;
}

/* Stop the daemon: SIGTERM (or `sig`), wait; SIGKILL if it lingers. */
static inline int harness_stop_sig(harness *h, int sig)
{
    if (h->daemon <= 0) return -1;
    kill(h->daemon, sig);
    double deadline = clock_mono_s() + 20 * h->scale;
    int st = 0;
    while (waitpid(h->daemon, &st, WNOHANG) == 0) {
        if (clock_mono_s() > deadline) {
            kill(h->daemon, SIGKILL);
            waitpid(h->daemon, &st, 0);
            break;
        }
        harness_sleep_ms(10);
    }
    h->daemon = -1;
    return st;
}
static inline int harness_stop(harness *h) { return harness_stop_sig(h, SIGTERM); }

static int harness_rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb; (void)flag; (void)ftw;
    return remove(p);
}

static inline void harness_free(harness *h)
{
    if (h->daemon > 0) harness_stop(h);
    nftw(h->dir, harness_rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

static inline void ctl_run_free(ctl_run *r)
{
    free(r->out);
    free(r->err);
    memset(r, 0, sizeof *r);
}

static inline void harness_buf_add(char **buf, size_t *len, const char *p, size_t n)
{
    char *nb = realloc(*buf, *len + n + 1);
    if (!nb) return;
    memcpy(nb + *len, p, n);
    *len += n;
    nb[*len] = 0;
    *buf = nb;
}

/* Start lindctl with argv (NULL-terminated; argv[0] is ignored and replaced
 * by the binary's path). Its stdin/stdout/stderr are pipes; *in, *out and
 * *err get the parent's ends (in may be NULL: stdin is /dev/null). */
static inline pid_t harness_spawn(harness *h, char *const *argv, int *in, int *out, int *err)
{
    int pi[2] = { -1, -1 }, po[2], pe[2];
    if ((in && pipe(pi)) || pipe(po) || pipe(pe)) return -1;
    pid_t pid = fork();
    if (pid == 0) {
        if (in) dup2(pi[0], 0);
        else {
            int fd = open("/dev/null", O_RDONLY);
            dup2(fd, 0);
            close(fd);
        }
        dup2(po[1], 1);
        dup2(pe[1], 2);
        for (int fd = 3; fd < 64; fd++) close(fd);
        int n = 0;
        while (argv[n]) n++;
        char **av = calloc((size_t)n + 1, sizeof *av);
        av[0] = h->lindctl;
        for (int i = 1; i < n; i++) av[i] = argv[i];
        execv(h->lindctl, av);
        fprintf(stderr, "exec %s: %s\n", h->lindctl, strerror(errno));
        _exit(127);
    }
    if (in) { close(pi[0]); *in = pi[1]; }
    close(po[1]);
    close(pe[1]);
    *out = po[0];
    *err = pe[0];
    return pid;
}

/* Collect a spawned lindctl's output until it exits. */
static inline void harness_collect(harness *h, pid_t pid, int out, int err, ctl_run *r)
{
    struct pollfd p[2] = { { .fd = out, .events = POLLIN }, { .fd = err, .events = POLLIN } };
    int open_n = 2;
    double deadline = clock_mono_s() + 180 * h->scale;
    memset(r, 0, sizeof *r);
    r->out = calloc(1, 1);
    r->err = calloc(1, 1);
    while (open_n && clock_mono_s() < deadline) {
        if (poll(p, 2, 1000) <= 0) continue;
        for (int i = 0; i < 2; i++) {
            if (p[i].fd < 0 || !p[i].revents) continue;
            char buf[65536];
            ssize_t n = read(p[i].fd, buf, sizeof buf);
            if (n <= 0) {
                close(p[i].fd);
                p[i].fd = -1;
                open_n--;
            } else if (i == 0) {
                harness_buf_add(&r->out, &r->out_len, buf, (size_t)n);
            } else {
                harness_buf_add(&r->err, &r->err_len, buf, (size_t)n);
            }
        }
    }
    for (int i = 0; i < 2; i++) if (p[i].fd >= 0) { close(p[i].fd); kill(pid, SIGKILL); }
    int st = 0;
    waitpid(pid, &st, 0);
    r->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Run lindctl to completion: `input` (may be NULL) is fed on stdin. The
 * arguments after `r` are lindctl's, NULL-terminated; "--socket <sock>" is
 * added first unless the first argument is "--socket". */
static inline int harness_ctl_in(harness *h, ctl_run *r, const char *input, size_t input_len, ...)
{
    char *argv[64];
    int n = 0;
    argv[n++] = "lindctl";
    va_list ap;
    va_start(ap, input_len);
    const char *a = va_arg(ap, const char *);
    if (!a || strcmp(a, "--socket")) { argv[n++] = "--socket"; argv[n++] = h->sock; }
    for (; a && n < 63; a = va_arg(ap, const char *)) argv[n++] = (char *)a;
    va_end(ap);
    argv[n] = NULL;
    int in = -1, out, err;
    pid_t pid = harness_spawn(h, argv, input ? &in : NULL, &out, &err);
    if (pid < 0) return -1;
    if (input) {
        signal(SIGPIPE, SIG_IGN);
        size_t off = 0;
        while (off < input_len) {
            ssize_t w = write(in, input + off, input_len - off);
            if (w <= 0) break;
            off += (size_t)w;
        }
        close(in);
    }
    harness_collect(h, pid, out, err, r);
    return r->status;
}
#define harness_ctl(h, r, ...) harness_ctl_in((h), (r), NULL, 0, __VA_ARGS__, (const char *)NULL)

#endif
