/* bench/scale_bench.c — several nodes on one store (docs/SCALE.md).
 *
 * 1. The store as the daemon uses it on a shared store, PostgreSQL against
 *    SQLite: a save is a versioned, lease-fenced store_save_versioned (one
 *    session per commit, and 8 per commit); a resume is store_lease_acquire
 *    + store_load (the load alone beside it). Then PostgreSQL saves/s from
 *    1, 2 and 4 connections at once, each in its own thread with its own
 *    sessions: what --store-conns buys when the round trip, not the server,
 *    is the limit. Blobs are the model's state size of random bytes (the
 *    stores neither compress nor look into them) plus a 4 KiB transcript.
 * 2. Aggregate tokens/s of `lind serve`: one node on SQLite, one node on
 *    PostgreSQL, three nodes on one PostgreSQL database, every session
 *    routed to a node by its name (client-side routing), all sessions'
 *    turns in flight at once, two turns each.
 *
 * PostgreSQL is a private server the bench starts (tests/pgserver.h: Unix
 * socket, fsync on, default settings); without one, those rows are left
 * out with the reason. Prints markdown. Not a test: the figures depend on
 * the machine and its load (here the nodes, the database and the client
 * share the same CPUs).
 *
 * 3. With --leases (alone: no model, no nodes), lease renewal as a node's
 *    store connection does it: commits/s, renewals/s and lapses holding
 *    1,000 and 10,000 leases with 2 s and 10 s ttls, one commit per lease
 *    against batched (see lease_run).
 *
 *   usage: scale_bench [--lind PATH] [--model DIR] [--quick]
 *          scale_bench --leases [--lease-secs S]
 *     --lind   the lind binary (default: ../lind next to this program)
 *     --model  default $MODEL, else models/default
 *     --quick  fewer sessions and tokens (also when BENCH_QUICK is set)
 *     --lease-secs  how long each lease row runs (default 20) */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "client/lindclient.h"
#include "daemon/lease.h"
#include "kernels/backend.h"
#include "kernels/clock.h"
#include "recurrent/model.h"
#include "state/store.h"
#include "tests/pgserver.h"

#define MAX_NODES 3

static char workdir[256], model_dir[512], lind_bin[512];
static int quick;
/* The CPU backend's options: main reads them from the environment
 * (LIND_CPU_THREADS, LIND_CPU_GEMM; backend_opts_from_env). */
static backend_opts bench_be;
static pgserver pg;
static int have_pg;
static char pg_why[600];
static pid_t nodes[MAX_NODES];
static size_t state_bytes;
static uint8_t *blob, tr[4096];

static void stop_nodes(void)
{
    for (int i = 0; i < MAX_NODES; i++)
        if (nodes[i] > 0) {
            int st;
            kill(nodes[i], SIGTERM);
            waitpid(nodes[i], &st, 0);
            nodes[i] = 0;
        }
}

static void cleanup(void)
{
    stop_nodes();
    if (have_pg) pgserver_stop(&pg);
    have_pg = 0;
    if (workdir[0]) {
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", workdir);
        if (system(cmd) != 0) fprintf(stderr, "scale_bench: could not remove %s\n", workdir);
    }
}

static void die(const char *what, const char *why)
{
    fprintf(stderr, "scale_bench: %s: %s\n", what, why);
    cleanup();
    exit(1);
}

static int cmpd(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmpd);
    return n ? v[n / 2] : 0;
}

/* A fresh store: the SQLite file or PostgreSQL database `name`. */
static void store_path(int pgkind, const char *name, char *out, size_t len)
{
    if (!pgkind) { snprintf(out, len, "%s/%s.db", workdir, name); return; }
    char why[600];
    if (pgserver_createdb(&pg, name, why, sizeof why) != 0) die("createdb", why);
    pgserver_uri(&pg, name, out, len);
}

static store *open_path(const char *path)
{
    store *s;
    char err[512];
    store_options o = store_defaults();
    if (store_open(path, &o, &s, err, sizeof err) != 0) die("store_open", err);
    return s;
}

static store_record rec_of(const char *name)
{
    return (store_record){ .name = name, .state = blob, .state_len = state_bytes,
                           .transcript = tr, .transcript_len = sizeof tr, .tokens = 100 };
}

typedef struct store_row { double save_ms, saves1, saves8, resume_ms, load_ms; } store_row;

/* Saves and resumes as the daemon does them. */
static store_row store_run(int pgkind)
{
    store_row r = {0};
    char path[600], err[512];
    store_path(pgkind, pgkind ? "bench_store" : "bench_store", path, sizeof path);
    store *s = open_path(path);
    int n = quick ? 64 : 256;
    char (*names)[32] = calloc((size_t)n, sizeof *names);
    uint64_t *ver = calloc((size_t)n, sizeof *ver);
    double *t = calloc((size_t)n, sizeof *t);
    store_lease l;
    for (int i = 0; i < n; i++) {
        snprintf(names[i], sizeof names[i], "bench-%d", i);
        if (store_lease_acquire(s, names[i], "bench", 600000, &l, err, sizeof err) != 0) die("lease", err);
    }
    /* one per commit: the first save of each creates it, then a timed one */
    store_save_result res[8];
    for (int i = 0; i < n; i++) {
        store_record rc = rec_of(names[i]);
        if (store_save_versioned(s, &rc, &ver[i], 1, "bench", res, err, sizeof err) != 0) die("save", err);
        ver[i] = res[0].version;
    }
    double t0 = clock_mono_s();
    for (int i = 0; i < n; i++) {
        store_record rc = rec_of(names[i]);
        double a = clock_mono_s();
        if (store_save_versioned(s, &rc, &ver[i], 1, "bench", res, err, sizeof err) != 0) die("save", err);
        t[i] = (clock_mono_s() - a) * 1e3;
        ver[i] = res[0].version;
    }
    r.saves1 = n / (clock_mono_s() - t0);
    r.save_ms = median(t, n);
    t0 = clock_mono_s();
    for (int i = 0; i + 8 <= n; i += 8) {
        store_record rc[8];
        for (int j = 0; j < 8; j++) rc[j] = rec_of(names[i + j]);
        if (store_save_versioned(s, rc, &ver[i], 8, "bench", res, err, sizeof err) != 0) die("save8", err);
        for (int j = 0; j < 8; j++) ver[i + j] = res[j].version;
    }
    r.saves8 = (n / 8 * 8) / (clock_mono_s() - t0);
    /* resume on a node that does not hold the lease yet: acquire + load */
    for (int i = 0; i < n; i++) store_lease_release(s, names[i], "bench", err, sizeof err);
    for (int i = 0; i < n; i++) {
        store_loaded ld;
        double a = clock_mono_s();
        if (store_lease_acquire(s, names[i], "bench2", 600000, &l, err, sizeof err) != 0) die("acquire", err);
        if (store_load(s, names[i], &ld, err, sizeof err) != 0) die("load", err);
        t[i] = (clock_mono_s() - a) * 1e3;
        store_loaded_free(&ld);
    }
    r.resume_ms = median(t, n);
    for (int i = 0; i < n; i++) {
        store_loaded ld;
        double a = clock_mono_s();
        if (store_load(s, names[i], &ld, err, sizeof err) != 0) die("load", err);
        t[i] = (clock_mono_s() - a) * 1e3;
        store_loaded_free(&ld);
    }
    r.load_ms = median(t, n);
    store_close(s);
    free(names); free(ver); free(t);
    return r;
}

typedef struct saver { const char *path; int idx, n; double secs; } saver;

static void *saver_main(void *arg)
{
    saver *sv = arg;
    store *s = open_path(sv->path);
    char err[512], name[32];
    store_lease l;
    store_save_result res;
    uint64_t ver = STORE_VERSION_NEW;
    snprintf(name, sizeof name, "pool-%d", sv->idx);
    if (store_lease_acquire(s, name, "bench", 600000, &l, err, sizeof err) != 0) die("lease", err);
    store_record rc = rec_of(name);
    if (store_save_versioned(s, &rc, &ver, 1, "bench", &res, err, sizeof err) != 0) die("save", err);
    ver = res.version;
    double t0 = clock_mono_s();
    for (int i = 0; i < sv->n; i++) {
        if (store_save_versioned(s, &rc, &ver, 1, "bench", &res, err, sizeof err) != 0) die("save", err);
        ver = res.version;
    }
    sv->secs = clock_mono_s() - t0;
    store_close(s);
    return NULL;
}

/* PostgreSQL saves/s from k connections at once. */
static double pool_rate(int k)
{
    char path[600], db[32];
    snprintf(db, sizeof db, "bench_pool%d", k);
    store_path(1, db, path, sizeof path);
    store *init = open_path(path);   /* create the schema once, before the threads race */
    store_close(init);
    pthread_t th[8];
    saver sv[8];
    int per = quick ? 100 : 400;
    double t0 = clock_mono_s();
    for (int i = 0; i < k; i++) {
        sv[i] = (saver){ .path = path, .idx = i, .n = per };
        pthread_create(&th[i], NULL, saver_main, &sv[i]);
    }
    for (int i = 0; i < k; i++) pthread_join(th[i], NULL);
    return (double)(per * k) / (clock_mono_s() - t0);
}

/* ---- leases (--leases) ---------------------------------------------------------
 * One node's store connection holding n leases of ttl ms for `secs` seconds,
 * renewing them as the daemon does (daemon/lease.c's lease_set_renew on its
 * own timer), with `chunk` names per statement: 1 is the way before
 * batching (one commit per lease at its own due time), LEASE_RENEW_CHUNK
 * today's. The leases start with their renewals spread evenly over one
 * period (sessions loaded at different moments). A second connection plays
 * another node: every 100 ms it takes over every lease of ours that has
 * expired; each one it takes is a lapse (the renewal came too late), and
 * the node finds it lost at its next renewal. */

typedef struct lease_row {
    double secs, calls_s, renewals_s, longest_ms;
    uint64_t lapses, lost, failed;
    size_t held;
} lease_row;

typedef struct thief {
    const char *uri;
    volatile int stop;
    uint64_t taken;
    char err[256];
} thief;

#define PG_NOW_SQL "(extract(epoch from clock_timestamp()) * 1000)::bigint"

static void *thief_main(void *arg)
{
    thief *t = arg;
    PGconn *c = PQconnectdb(t->uri);
    if (PQstatus(c) != CONNECTION_OK) {
        snprintf(t->err, sizeof t->err, "%s", PQerrorMessage(c));
        PQfinish(c);
        return NULL;
    }
    while (!t->stop) {
        PGresult *r = PQexec(c, "UPDATE lind_leases SET owner = 'other-node', expires_ms = "
                             PG_NOW_SQL " + 3600000 WHERE owner = 'bench' AND expires_ms <= " PG_NOW_SQL);
        if (PQresultStatus(r) == PGRES_COMMAND_OK) t->taken += strtoull(PQcmdTuples(r), NULL, 10);
        else snprintf(t->err, sizeof t->err, "%s", PQresultErrorMessage(r));
        PQclear(r);
        usleep(100000);
    }
    PQfinish(c);
    return NULL;
}

static lease_row lease_run(int n, int ttl_ms, size_t chunk, double secs)
{
    lease_row row = {0};
    char db[64], path[600];
    snprintf(db, sizeof db, "bench_leases_%d_%d_%zu", n, ttl_ms, chunk);
    store_path(1, db, path, sizeof path);
    store *s = open_path(path);   /* creates the schema */
    /* The leases, taken in one statement (taking 10,000 one by one is not
     * what is measured). */
    PGconn *c = PQconnectdb(path);
    if (PQstatus(c) != CONNECTION_OK) die("connecting", PQerrorMessage(c));
    char sql[400];
    snprintf(sql, sizeof sql, "INSERT INTO lind_leases(name, owner, expires_ms) SELECT 'sess-' || g, 'bench', "
             PG_NOW_SQL " + %d FROM generate_series(0, %d) g", ttl_ms, n - 1);
    PGresult *r = PQexec(c, sql);
    if (PQresultStatus(r) != PGRES_COMMAND_OK) die("inserting the leases", PQresultErrorMessage(r));
    PQclear(r);
    PQfinish(c);
    lease_set ls;
    if (lease_set_init(&ls, "bench", ttl_ms) != 0) die("lease_set_init", "out of memory");
    ls.chunk = chunk;
    uint64_t period = (uint64_t)ttl_ms * 1000000ull / 3, t0 = clock_mono_ns();
    for (int i = 0; i < n; i++) {
        char name[32];
        snprintf(name, sizeof name, "sess-%d", i);
        /* due at t0 + i/n of a period */
        if (lease_set_add(&ls, name, t0 - period + period * (uint64_t)i / (uint64_t)n) != 0)
            die("lease_set_add", "out of memory");
    }
    thief th = { .uri = path };
    pthread_t tid;
    pthread_create(&tid, NULL, thief_main, &th);
    uint64_t end = t0 + (uint64_t)(secs * 1e9), now;
    double longest = 0;
    while ((now = clock_mono_ns()) < end) {
        int ms = lease_set_renew(&ls, s, now, NULL, NULL);
        double took = (double)(clock_mono_ns() - now) / 1e6;
        if (took > longest) longest = took;
        if (ms < 0) break;   /* every lease lost */
        uint64_t wake = now + (uint64_t)ms * 1000000ull, at = clock_mono_ns();
        if (wake > end) wake = end;
        if (wake > at) usleep((useconds_t)((wake - at) / 1000));
    }
    row.secs = (double)(clock_mono_ns() - t0) / 1e9;   /* a long last round may overrun */
    th.stop = 1;
    pthread_join(tid, NULL);
    if (th.err[0]) die("the other node", th.err);
    row.calls_s = (double)ls.renew_calls / row.secs;
    row.renewals_s = (double)ls.renewed / row.secs;
    row.longest_ms = longest;
    row.lapses = th.taken;
    row.lost = ls.lost;
    row.failed = ls.renew_failed;
    row.held = ls.count;
    lease_set_free(&ls);
    store_close(s);
    return row;
}

static void leases_bench(double secs)
{
    struct utsname u;
    uname(&u);
    printf("# Lease renewal: one commit per lease against batched\n\nOne store connection holding "
           "n leases of the given ttl for %.0f s each, renewed by daemon/lease.c's lease_set_renew "
           "(every third of the ttl) on a private PostgreSQL server (Unix socket, fsync on, "
           "synchronous_commit on: the daemon's default --sync full). \"one per lease\": "
           "chunk 1, one store_lease_renew commit per lease at its own due time (before); "
           "\"batched\": up to %d names per store_lease_renew_many statement, leases due "
           "within ttl/6 renewed with those due now (after). Renewals start spread evenly over "
           "one period. Another connection takes over every expired lease each 100 ms: a "
           "lapse. commits/s: renewal statements (each its own transaction) per second; "
           "longest round: the longest lease_set_renew call (the store connection does nothing "
           "else meanwhile: saves and loads wait). Machine: %s %s, %ld CPUs, shared by the "
           "server and this program.\n\n", secs, LEASE_RENEW_CHUNK, u.sysname, u.machine,
           sysconf(_SC_NPROCESSORS_ONLN));
    printf("| leases | ttl | renewal | seconds | commits/s | renewals/s | lapses | longest round ms "
           "| still held |\n|---:|---:|---|---:|---:|---:|---:|---:|---:|\n");
    const int ns[] = { 1000, 10000 }, ttls[] = { 2000, 10000 };
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++)
            for (int k = 0; k < 2; k++) {
                size_t chunk = k ? LEASE_RENEW_CHUNK : 1;
                lease_row r = lease_run(ns[a], ttls[b], chunk, secs);
                printf("| %d | %d s | %s | %.1f | %.1f | %.0f | %llu | %.0f | %zu |\n", ns[a],
                       ttls[b] / 1000, k ? "batched" : "one per lease", r.secs, r.calls_s,
                       r.renewals_s, (unsigned long long)r.lapses, r.longest_ms, r.held);
                fflush(stdout);
                if (r.failed)
                    fprintf(stderr, "scale_bench: %llu renewals failed (store errors)\n",
                            (unsigned long long)r.failed);
            }
}

/* ---- nodes -------------------------------------------------------------------- */

static void sock_of(int i, char *out, size_t len) { snprintf(out, len, "%s/node%d.sock", workdir, i); }

static void start_node(int i, const char *db)
{
    char sock[300], id[16];
    sock_of(i, sock, sizeof sock);
    snprintf(id, sizeof id, "n%d", i);
    pid_t pid = fork();
    if (pid == 0) {
        execl(lind_bin, lind_bin, "serve", "--model", model_dir, "--socket", sock, "--db", db,
              "--backend", "cpu", "--max-batch", "256", "--log-level", "warn", "--node-id", id,
              (char *)NULL);
        _exit(127);
    }
    if (pid < 0) die("fork", strerror(errno));
    nodes[i] = pid;
    for (int k = 0; k < 3000; k++) {
        lindc *c;
        if (lindc_connect(&c, sock, NULL, 0) == 0) { lindc_free(c); return; }
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) { nodes[i] = 0; die("lind serve", "exited at start"); }
        usleep(10000);
    }
    die("lind serve", "did not start");
}

static size_t name_hash(const char *s)
{
    size_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* S sessions, two turns of `per` tokens each, on k nodes: tokens/s. */
static double nodes_run(int k, const char *db, int S, int per)
{
    for (int i = 0; i < k; i++) start_node(i, db);
    lindc *c[MAX_NODES];
    char err[256], sock[300];
    for (int i = 0; i < k; i++) {
        sock_of(i, sock, sizeof sock);
        if (lindc_connect(&c[i], sock, err, sizeof err) != 0) die("connect", err);
    }
    long tokens = 0;
    double t0 = clock_mono_s();
    for (int turn = 0; turn < 2; turn++) {
        int pending[MAX_NODES] = {0};
        for (int s = 0; s < S; s++) {
            char name[32];
            snprintf(name, sizeof name, "scale-%d", s);
            int n = (int)(name_hash(name) % (size_t)k);
            lindc_gen_opts o;
            lindc_gen_opts_init(&o);
            o.session = name;
            o.text = turn ? " And then" : "Once upon a time";
            o.text_len = strlen(o.text);
            o.max_tokens = per;
            o.has_seed = turn == 0;
            o.seed = (uint64_t)s;
            uint64_t id;
            if (lindc_generate(c[n], &o, &id) != 0) die("generate", "send failed");
            pending[n]++;
        }
        for (int n = 0; n < k; n++)
            while (pending[n] > 0) {
                lindc_event ev;
                int rc = lindc_next(c[n], &ev, 120000);
                if (rc != 0) die("events", lindc_strerror(rc));
                if (ev.kind == LINDC_EV_TOKEN) tokens++;
                else if (ev.final) {
                    if (ev.kind != LINDC_EV_DONE) die("generate", ev.message);
                    pending[n]--;
                }
            }
    }
    double rate = (double)tokens / (clock_mono_s() - t0);
    for (int i = 0; i < k; i++) lindc_free(c[i]);
    stop_nodes();
    return rate;
}

int main(int argc, char **argv)
{
    const char *model_arg = NULL;
    snprintf(lind_bin, sizeof lind_bin, "%s", argv[0]);
    char *slash = strrchr(lind_bin, '/');
    if (slash) snprintf(slash, sizeof lind_bin - (size_t)(slash - lind_bin), "/../lind");
    else snprintf(lind_bin, sizeof lind_bin, "build/lind");
    const char *bq = getenv("BENCH_QUICK"), *env_model = getenv("MODEL");
    if (bq && *bq) quick = 1;
    {
        char eerr[256];
        if (backend_opts_from_env(&bench_be, eerr, sizeof eerr) < 0) die("environment", eerr);
    }
    int leases = 0;
    double lease_secs = 20;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--leases")) leases = 1;
        else if (!strcmp(argv[i], "--lease-secs") && i + 1 < argc) lease_secs = atof(argv[++i]);
        else if (!strcmp(argv[i], "--lind") && i + 1 < argc) snprintf(lind_bin, sizeof lind_bin, "%s", argv[++i]);
        else if (!strcmp(argv[i], "--model") && i + 1 < argc) model_arg = argv[++i];
        else {
            fprintf(stderr, "usage: scale_bench [--lind PATH] [--model DIR] [--quick]\n"
                            "       scale_bench --leases [--lease-secs S]\n");
            return 2;
        }
    }
    if (leases) {
        snprintf(workdir, sizeof workdir, "/tmp/lind-scale-bench-XXXXXX");
        if (!mkdtemp(workdir)) die("mkdtemp", strerror(errno));
        if (pgserver_start(&pg, NULL, pg_why, sizeof pg_why) != 0) die("PostgreSQL", pg_why);
        have_pg = 1;
        leases_bench(lease_secs > 0 ? lease_secs : 20);
        cleanup();
        return 0;
    }
    snprintf(model_dir, sizeof model_dir, "%s",
             model_arg ? model_arg : env_model && *env_model ? env_model : "models/default");
    snprintf(workdir, sizeof workdir, "/tmp/lind-scale-bench-XXXXXX");
    if (!mkdtemp(workdir)) die("mkdtemp", strerror(errno));
    model *m;
    char err[512];
    model_opts mo = {.backend = "cpu", .be = &bench_be};
    if (model_load_opts(model_dir, &mo, &m, err, sizeof err) != 0) die("model_load", err);
    state_bytes = model_state_bytes(m);
    model_free(m);
    blob = malloc(state_bytes);
    if (!blob) die("malloc", "state");
    srand(7);
    for (size_t i = 0; i < state_bytes; i++) blob[i] = (uint8_t)rand();
    for (size_t i = 0; i < sizeof tr; i++) tr[i] = (uint8_t)('a' + i % 26);
    int up = pgserver_start(&pg, NULL, pg_why, sizeof pg_why);
    have_pg = up == 0;
    if (up < 0) { pgserver_stop(&pg); }

    struct utsname u;
    uname(&u);
    printf("# Several nodes on one store\n\nModel: %s (%zu state bytes per session). Machine: %s %s, "
           "%ld CPUs, shared by the nodes, the database server and this client. Durability full "
           "(PostgreSQL: synchronous_commit on, fsync on; a private server on a Unix socket).%s%s\n\n",
           model_dir, state_bytes, u.sysname, u.machine, sysconf(_SC_NPROCESSORS_ONLN),
           have_pg ? "" : " PostgreSQL rows left out: ", have_pg ? "" : pg_why);
    printf("## The store as a node uses it\n\nA save is versioned and lease-fenced "
           "(`store_save_versioned` with the expected version and the node as lease owner); a "
           "resume is `store_lease_acquire` + `store_load` (what a node does before serving a "
           "session it does not hold); the load alone beside it. Medians over %d sessions.\n\n",
           quick ? 64 : 256);
    printf("| store | save ms | saves/s, 1 per commit | saves/s, 8 per commit | resume ms (lease + load) "
           "| load alone ms |\n|---|---:|---:|---:|---:|---:|\n");
    for (int k = 0; k < 2; k++) {
        if (k == 1 && !have_pg) break;
        store_row r = store_run(k);
        printf("| %s | %.3f | %.0f | %.0f | %.3f | %.3f |\n", k ? "PostgreSQL" : "SQLite", r.save_ms,
               r.saves1, r.saves8, r.resume_ms, r.load_ms);
        fflush(stdout);
    }
    if (have_pg) {
        printf("\nPostgreSQL saves/s (versioned, fenced, 1 per commit) from several connections at once, "
               "each its own thread and sessions (as `--store-conns N` spreads a node's saves):\n\n"
               "| connections | saves/s |\n|---:|---:|\n");
        const int ks[] = { 1, 2, 4 };
        for (int i = 0; i < 3; i++) {
            printf("| %d | %.0f |\n", ks[i], pool_rate(ks[i]));
            fflush(stdout);
        }
    }
    int S = quick ? 12 : 48, per = quick ? 32 : 200;
    printf("\n## Aggregate tokens/s\n\n%d sessions, two turns of %d tokens each (the second "
           "resumes the resident session), every session's turn in flight at once, each "
           "session sent to node hash(name) %% nodes; tokens counted at the client.\n\n"
           "| nodes | store | tokens/s |\n|---:|---|---:|\n", S, per);
    char db[600];
    snprintf(db, sizeof db, "%s/nodes.db", workdir);
    printf("| 1 | SQLite | %.0f |\n", nodes_run(1, db, S, per));
    fflush(stdout);
    if (have_pg) {
        store_path(1, "bench_one", db, sizeof db);
        printf("| 1 | PostgreSQL | %.0f |\n", nodes_run(1, db, S, per));
        fflush(stdout);
        store_path(1, "bench_three", db, sizeof db);
        printf("| 3 | PostgreSQL, one database | %.0f |\n", nodes_run(3, db, S, per));
    }
    cleanup();
    return 0;
}
