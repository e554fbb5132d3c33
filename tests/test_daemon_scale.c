/* tests/test_daemon_scale.c — several `lind serve` nodes on one PostgreSQL
 * database (docs/SCALE.md): sessions moving between nodes, a node killed
 * mid-turn and its sessions continued elsewhere, two nodes racing for one
 * session, turns retried with their request ids on another node after a
 * SIGKILL (exactly once), the scale-out series of /metrics moving, three
 * nodes behind HAProxy losing one under load.
 *
 * This program starts a private PostgreSQL server with tests/pgserver.h (the
 * store tests' helper; SKIP when it cannot run here), creates one database
 * per case, and runs the cases themselves in tests/scale_nodes.py (Python:
 * many clients and processes are simpler to drive there), passing the
 * server as LIND_PG_URI (a URI with %s where the database name goes), and
 * what stopping and starting it takes (LIND_PG_DIR, LIND_PG_PORT,
 * LIND_PG_BINDIR, LIND_PG_UID, LIND_PG_GID: pg_ctl as pgserver_up runs it),
 * for the cases that restart it or put PgBouncer in front of it
 * (scale_standby_pg starts a primary and a standby of its own with those
 * binaries and that user; its database here goes unused). The
 * Python script prints the PASS/FAIL lines; the server's guardian stops it
 * and removes its directory when this program exits, however it exits. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "tests/pgserver.h"

static const char *const cases[] = { "moving", "failover", "race", "retry", "dbloss", "dbwait",
                                     "dupid", "bouncer", "metrics", "gone", "balancer", "standby" };

int main(void)
{
    pgserver pg;
    char why[800];
    int up = pgserver_start(&pg, NULL, why, sizeof why);
    if (up > 0) {
        for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
            printf("SKIP scale_%s_pg: PostgreSQL cannot run here: %s\n", cases[i], why);
        return 0;
    }
    if (up < 0) {
        printf("FAIL scale_pg: the PostgreSQL server did not start: %s\n", why);
        return 1;
    }
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char db[64];
        snprintf(db, sizeof db, "scale_%s", cases[i]);
        if (pgserver_createdb(&pg, db, why, sizeof why) != 0) {
            printf("FAIL scale_pg: creating database %s: %s\n", db, why);
            pgserver_stop(&pg);
            return 1;
        }
    }
    char uri[400];
    pgserver_uri(&pg, "%s", uri, sizeof uri);
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) {
        printf("FAIL scale_pg: fork: %s\n", strerror(errno));
        pgserver_stop(&pg);
        return 1;
    }
    if (pid == 0) {
        char num[32];
        setenv("LIND_PG_URI", uri, 1);
        setenv("LIND_PG_DIR", pg.dir, 1);
        setenv("LIND_PG_BINDIR", pg.bindir, 1);
        snprintf(num, sizeof num, "%d", pg.port);
        setenv("LIND_PG_PORT", num, 1);
        snprintf(num, sizeof num, "%d", (int)pg.uid);
        setenv("LIND_PG_UID", num, 1);
        snprintf(num, sizeof num, "%d", (int)pg.gid);
        setenv("LIND_PG_GID", num, 1);
        close(pg.guard_fd);   /* only the parent's exit may stop the server */
        /* LIND_SCALE_SCRIPT: another script to run against the server (debugging) */
        const char *script = getenv("LIND_SCALE_SCRIPT");
        if (!script || !*script) script = "tests/scale_nodes.py";
        execl("/usr/bin/python3", "python3", script, (char *)NULL);
        printf("FAIL scale_pg: cannot run /usr/bin/python3 %s: %s\n", script, strerror(errno));
        _exit(127);
    }
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    pgserver_stop(&pg);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}
