/* tests/pgserver.h — a private PostgreSQL server for the store's tests and
 * benchmark (header-only, like tests/testmodel.h).
 *
 * pgserver_start makes a temporary directory, runs Debian's initdb and
 * pg_ctl (/usr/lib/postgresql/<ver>/bin, the newest; LIND_PG_BINDIR
 * overrides) to create a cluster there and start it listening only on a Unix
 * socket in that directory (listen_addresses empty: no TCP). As root the
 * server runs as the unprivileged `postgres` user (PostgreSQL refuses root).
 * Authentication is trust for the superuser "lind" over that socket, which
 * only the directory's owner can reach.
 *
 * A guardian process, forked before the server starts, waits on a pipe the
 * caller holds: when the caller exits — normally, by a failed CHECK, or
 * killed — the guardian stops the server (immediate mode) and removes the
 * directory. pgserver_stop does the same at once.
 *
 * Returns of pgserver_start: 0 running; 1 cannot run here (`why` says why:
 * no PostgreSQL binaries, no user to switch to) — callers print SKIP; -1 the
 * server failed to come up (`why` has the log's last line) — a failure. */
#ifndef LIND_TESTS_PGSERVER_H
#define LIND_TESTS_PGSERVER_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <libpq-fe.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct pgserver {
    char  dir[64];        /* the temporary directory: data/, socket, logs */
    char  bindir[300];
    uid_t uid;            /* the server's user (and its group) */
    gid_t gid;
    int   as_other;       /* switch to uid/gid before running a binary */
    int   port;           /* names the socket file; no TCP */
    pid_t guard;
    int   guard_fd;       /* write end: closing it stops the server */
} pgserver;

/* Run bindir/prog with args (NULL-terminated) as the server's user, output
 * appended to dir/log; its exit status (or -1). */
static int pgserver_run_(const pgserver *p, const char *prog, const char *const *args)
{
    char path[340], log[128];
    snprintf(path, sizeof path, "%s/%s", p->bindir, prog);
    snprintf(log, sizeof log, "%s/log", p->dir);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
        int nul = open("/dev/null", O_RDONLY);
        if (fd >= 0) { dup2(fd, 1); dup2(fd, 2); }
        if (nul >= 0) dup2(nul, 0);
        if (p->as_other && (setgroups(0, NULL) < 0 || setgid(p->gid) < 0 || setuid(p->uid) < 0))
            _exit(126);
        char *argv[16];
        int n = 0;
        argv[n++] = path;
        for (int i = 0; args[i] && n < 15; i++)
            argv[n++] = (char *)args[i];
        argv[n] = NULL;
        execv(path, argv);
        _exit(127);
    }
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The last non-empty line of a log file, for messages. */
static void pgserver_log_tail_(const char *path, char *out, size_t len)
{
    char line[512];
    snprintf(out, len, "(no log)");
    FILE *f = fopen(path, "r");
    while (f && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        size_t n = strlen(line);
        if (n && len) {
            n = n < len ? n : len - 1;
            memcpy(out, line, n);
            out[n] = 0;
        }
    }
    if (f)
        fclose(f);
}

/* pg_ctl's wait for the server: 120 s times LIND_TEST_TIME_SCALE (the
 * tests' one time multiplier, tests/check.h; this header is also the
 * benchmark's, so it reads the variable itself). */
static int pgserver_wait_s_(void)
{
    const char *e = getenv("LIND_TEST_TIME_SCALE");
    double s = e && *e ? atof(e) : 1.0;
    return (int)(120 * (s >= 1.0 ? s : 1.0));
}

/* Start (or, after pgserver_crash, restart) the server on the existing
 * cluster. extra: more postgres options (may be NULL). */
static int pgserver_up(pgserver *p, const char *extra, char *why, size_t whylen)
{
    char data[128], opts[512], slog[128];
    snprintf(data, sizeof data, "%s/data", p->dir);
    snprintf(slog, sizeof slog, "%s/server.log", p->dir);
    snprintf(opts, sizeof opts, "-k %s -p %d -c listen_addresses='' %s", p->dir, p->port,
             extra ? extra : "");
    char wait_s[16];
    snprintf(wait_s, sizeof wait_s, "%d", pgserver_wait_s_());
    const char *args[] = { "-D", data, "-l", slog, "-w", "-t", wait_s, "-o", opts, "start", NULL };
    if (pgserver_run_(p, "pg_ctl", args) != 0) {
        char tail[400];
        pgserver_log_tail_(slog, tail, sizeof tail);
        snprintf(why, whylen, "pg_ctl start failed: %s", tail);
        return -1;
    }
    return 0;
}

/* Crash the server: immediate shutdown (no checkpoint; the next start
 * replays the WAL), as a killed server would. Clients see their connections
 * drop. */
static int pgserver_crash(pgserver *p)
{
    char data[128];
    snprintf(data, sizeof data, "%s/data", p->dir);
    char wait_s[16];
    snprintf(wait_s, sizeof wait_s, "%d", pgserver_wait_s_());
    const char *args[] = { "-D", data, "-m", "immediate", "-w", "-t", wait_s, "stop", NULL };
    return pgserver_run_(p, "pg_ctl", args);
}

static int pgserver_start(pgserver *p, const char *extra, char *why, size_t whylen)
{
    memset(p, 0, sizeof *p);
    p->guard_fd = -1;
    const char *env = getenv("LIND_PG_BINDIR");
    if (env && *env) {
        snprintf(p->bindir, sizeof p->bindir, "%s", env);
    } else {
        /* The newest /usr/lib/postgresql/<ver>/bin with a pg_ctl. */
        int best = -1;
        DIR *d = opendir("/usr/lib/postgresql");
        struct dirent *e;
        while (d && (e = readdir(d))) {
            int v = atoi(e->d_name);
            char probe[320];
            snprintf(probe, sizeof probe, "/usr/lib/postgresql/%s/bin/pg_ctl", e->d_name);
            if (v > best && access(probe, X_OK) == 0) {
                best = v;
                snprintf(p->bindir, sizeof p->bindir, "/usr/lib/postgresql/%s/bin", e->d_name);
            }
        }
        if (d)
            closedir(d);
    }
    char probe[320];
    snprintf(probe, sizeof probe, "%s/initdb", p->bindir);
    if (!p->bindir[0] || access(probe, X_OK) != 0) {
        snprintf(why, whylen, "no PostgreSQL server binaries (initdb, pg_ctl under "
                 "/usr/lib/postgresql/<ver>/bin; Debian package postgresql, or set LIND_PG_BINDIR)");
        return 1;
    }
    if (geteuid() == 0) {
        struct passwd *pw = getpwnam("postgres");
        if (!pw) {
            snprintf(why, whylen, "running as root and there is no 'postgres' user to run the"
                     " server as (PostgreSQL refuses to run as root)");
            return 1;
        }
        p->uid = pw->pw_uid;
        p->gid = pw->pw_gid;
        p->as_other = 1;
    } else {
        p->uid = geteuid();
        p->gid = getegid();
    }
    snprintf(p->dir, sizeof p->dir, "/tmp/lind-pg-XXXXXX");
    if (!mkdtemp(p->dir)) {
        snprintf(why, whylen, "mkdtemp: %s", strerror(errno));
        return -1;
    }
    if (p->as_other && chown(p->dir, p->uid, p->gid) < 0) {
        snprintf(why, whylen, "cannot hand %s to the postgres user: %s", p->dir, strerror(errno));
        rmdir(p->dir);
        return 1;
    }
    p->port = 20000 + (int)(getpid() % 20000);

    /* The guardian: stops the server and removes the directory when the
     * pipe's write end (ours) closes, however we end. */
    int fds[2];
    if (pipe(fds) < 0) {
        snprintf(why, whylen, "pipe: %s", strerror(errno));
        rmdir(p->dir);
        return -1;
    }
    pid_t g = fork();
    if (g == 0) {
        close(fds[1]);
        int nul = open("/dev/null", O_RDWR);
        if (nul >= 0) { dup2(nul, 0); dup2(nul, 1); dup2(nul, 2); }
        /* Ignore the signals a terminal or a test harness sends the group. */
        signal(SIGINT, SIG_IGN);
        signal(SIGTERM, SIG_IGN);
        signal(SIGHUP, SIG_IGN);
        char c;
        for (;;) {
            ssize_t n = read(fds[0], &c, 1);
            if (n == 0 || (n < 0 && errno != EINTR))
                break;
        }
        pgserver_crash(p);
        const char *rmargs[] = { "/bin/rm", "-rf", p->dir, NULL };
        pid_t r = fork();
        if (r == 0) {
            execv("/bin/rm", (char **)rmargs);
            _exit(127);
        }
        waitpid(r, NULL, 0);
        _exit(0);
    }
    close(fds[0]);
    if (g < 0) {
        close(fds[1]);
        snprintf(why, whylen, "fork: %s", strerror(errno));
        rmdir(p->dir);
        return -1;
    }
    p->guard = g;
    p->guard_fd = fds[1];
    fcntl(p->guard_fd, F_SETFD, FD_CLOEXEC);

    char data[128];
    snprintf(data, sizeof data, "%s/data", p->dir);
    const char *args[] = { "-D", data, "-U", "lind", "-A", "trust", "-E", "UTF8", "--locale=C",
                           "-N", NULL };
    int rc = pgserver_run_(p, "initdb", args);
    if (rc == 126) {
        snprintf(why, whylen, "cannot switch to the postgres user to run the server");
        return 1;
    }
    if (rc != 0) {
        char tail[400], log[128];
        snprintf(log, sizeof log, "%s/log", p->dir);
        pgserver_log_tail_(log, tail, sizeof tail);
        snprintf(why, whylen, "initdb failed (status %d): %s", rc, tail);
        return -1;
    }
    return pgserver_up(p, extra, why, whylen);
}

/* A libpq URI for database db on this server. */
static void pgserver_uri(const pgserver *p, const char *db, char *out, size_t len)
{
    snprintf(out, len, "postgresql:///%s?host=%s&port=%d&user=lind", db, p->dir, p->port);
}

/* CREATE DATABASE db; 0 or -1 with why. */
static int pgserver_createdb(const pgserver *p, const char *db, char *why, size_t whylen)
{
    char uri[256], sql[200];
    pgserver_uri(p, "postgres", uri, sizeof uri);
    PGconn *c = PQconnectdb(uri);
    int rc = -1;
    if (PQstatus(c) != CONNECTION_OK) {
        snprintf(why, whylen, "connect %s: %s", uri, PQerrorMessage(c));
    } else {
        snprintf(sql, sizeof sql, "CREATE DATABASE \"%s\"", db);
        PGresult *r = PQexec(c, sql);
        if (PQresultStatus(r) == PGRES_COMMAND_OK)
            rc = 0;
        else
            snprintf(why, whylen, "%s: %s", sql, PQresultErrorMessage(r));
        PQclear(r);
    }
    PQfinish(c);
    return rc;
}

/* Stop the server and remove its directory (the guardian does it). */
static void pgserver_stop(pgserver *p)
{
    if (p->guard_fd >= 0) {
        close(p->guard_fd);
        p->guard_fd = -1;
        waitpid(p->guard, NULL, 0);
    }
}

#endif
