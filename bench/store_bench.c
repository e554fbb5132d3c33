/* bench/store_bench.c — how fast sessions persist and resume.
 *
 * For the default model (models/default, or a random-weight model of the
 * same configuration when it is absent) and for a 12-layer, 768-wide model
 * (random weights; 12 heads x 64, mixers alternating linear/aft):
 *   - encode/decode of the state blob, save (encode + one commit) and load
 *     (read + decode + write into a slot);
 *   - sessions saved per second with grouped commits (1, 8, 64 per commit)
 *     under durability full and normal (default model's state);
 *   - resuming from the stored state against re-feeding a history (10,000
 *     tokens, or the --history lengths) through model_step;
 *   - PostgreSQL against SQLite on this machine: save and resume (load)
 *     latency, sessions saved per second with grouped commits, against a
 *     private server the bench starts itself (tests/pgserver.h: Unix socket
 *     only, fsync on, default settings otherwise), or a line saying why not.
 * Prints markdown. Not a test: numbers depend on the machine and its load.
 *
 *   usage: store_bench [--dir DIR] [--model DIR] [--history N,N,...] [--quick]
 *                      [--compare-only]
 *     --dir      where the databases go (default: a new directory in /tmp)
 *     --history  history lengths for resume vs re-feed (default 10000)
 *     --quick    fewer repetitions
 *     --compare-only  only the PostgreSQL vs SQLite section
 * The 12-layer re-feed is measured over 500 tokens (300 with --quick) and
 * scaled: a recurrent step costs the same at every position. */
#include "kernels/backend.h"
#include "kernels/clock.h"
#include "tests/pgserver.h"
#include "tests/testmodel.h"
#include "state/format.h"
#include "state/store.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

static void die(const char *what, const char *err)
{
    fprintf(stderr, "store_bench: %s: %s\n", what, err);
    exit(1);
}

static char workdir[256];
static int quick;
/* The CPU backend's options: main reads them from the environment
 * (LIND_CPU_THREADS, LIND_CPU_GEMM; backend_opts_from_env). */
static backend_opts bench_be;
/* Every save carries a full default-size transcript tail, as the daemon's do. */
static uint8_t tail[4096 + 5];

typedef struct bench_model {
    const char *label;
    model *m;
    size_t state_bytes, blob_bytes;
    uint8_t *raw, *blob;
    state_meta meta;
} bench_model;

static void feed(model *m, int slot, int ntok)
{
    int tok = LIND_BOS;
    uint64_t x = 88172645463325252ull;
    for (int i = 0; i < ntok; i++) {
        if (model_step(m, &slot, &tok, 1, NULL) < 0)
            die("model_step", "failed");
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        tok = 32 + (int)(x % 95);   /* printable ASCII */
    }
}

static void prepare(bench_model *b, const char *label, const char *dir, const testmodel_cfg *cfg)
{
    char err[512] = "";
    if (cfg && testmodel_write(dir, cfg, 1, NULL) < 0)
        die("testmodel_write", dir);
    model_opts mo = {.backend = "cpu", .be = &bench_be};
    if (model_load_opts(dir, &mo, &b->m, err, sizeof err) < 0)
        die("model_load", err);
    b->label = label;
    model_slots_reserve(b->m, 2);
    model_slot_reset(b->m, 0);
    feed(b->m, 0, 64);
    b->state_bytes = model_state_bytes(b->m);
    b->raw = malloc(b->state_bytes);
    model_slot_read(b->m, 0, b->raw);
    memset(&b->meta, 0, sizeof b->meta);
    sampler_params p = sampler_defaults();
    sampler_init(&b->meta.sampler, &p);
    b->meta.tokens = 64;
    b->meta.pending_token = 'a';
    if (state_encode(b->m, &b->meta, b->raw, &b->blob, &b->blob_bytes, err, sizeof err) < 0)
        die("state_encode", err);
}

/* Set while the PostgreSQL comparison runs: stores are then fresh databases
 * on this server instead of files. */
static pgserver *pgsrv;

static store *open_store(const char *name, store_sync sync)
{
    char path[512], err[512];
    if (pgsrv) {
        static int seq;
        char db[64];
        snprintf(db, sizeof db, "bench%d", ++seq);
        if (pgserver_createdb(pgsrv, db, err, sizeof err) < 0)
            die("create database", err);
        pgserver_uri(pgsrv, db, path, sizeof path);
    } else {
        snprintf(path, sizeof path, "%s/%s", workdir, name);
        unlink(path);
    }
    store_options o = store_defaults();
    o.sync = sync;
    store *s = NULL;
    if (store_open(path, &o, &s, err, sizeof err) < 0)
        die("store_open", err);
    return s;
}

/* Median of n doubles (sorts in place). */
static double median(double *v, int n)
{
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && v[j - 1] > v[j]; j--) {
            double t = v[j]; v[j] = v[j - 1]; v[j - 1] = t;
        }
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

typedef struct timings {
    double encode_ms, decode_ms, save_ms, load_ms;
} timings;

static timings time_save_load(bench_model *b)
{
    enum { REPS_MAX = 50 };
    int reps = quick ? 10 : REPS_MAX;
    double t[REPS_MAX];
    char err[512];
    timings r;
    uint8_t *blob;
    size_t len;
    for (int i = 0; i < reps; i++) {
        double t0 = clock_mono_s();
        if (state_encode(b->m, &b->meta, b->raw, &blob, &len, err, sizeof err) < 0)
            die("state_encode", err);
        t[i] = clock_mono_s() - t0;
        free(blob);
    }
    r.encode_ms = 1e3 * median(t, reps);
    uint8_t *out = malloc(b->state_bytes);
    state_meta mt;
    for (int i = 0; i < reps; i++) {
        double t0 = clock_mono_s();
        if (state_decode(b->m, b->blob, b->blob_bytes, &mt, out, err, sizeof err) < 0)
            die("state_decode", err);
        t[i] = clock_mono_s() - t0;
    }
    r.decode_ms = 1e3 * median(t, reps);

    /* A save as the daemon does it: read the slot, encode, commit (full). */
    store *s = open_store("saveload.db", STORE_SYNC_FULL);
    for (int i = 0; i < reps; i++) {
        /* One more token first (untimed): a real save writes a changed
         * state, and SQLite skips rewriting pages whose bytes are equal. */
        int slot = 0, tok = 'a' + i % 26;
        model_step(b->m, &slot, &tok, 1, NULL);
        double t0 = clock_mono_s();
        model_slot_read(b->m, 0, b->raw);
        if (state_encode(b->m, &b->meta, b->raw, &blob, &len, err, sizeof err) < 0)
            die("state_encode", err);
        store_record rec = { "bench", blob, len, tail, sizeof tail, b->meta.tokens };
        if (store_save(s, &rec, 1, err, sizeof err) < 0)
            die("store_save", err);
        t[i] = clock_mono_s() - t0;
        free(blob);
    }
    r.save_ms = 1e3 * median(t, reps);
    /* A load: read the row, decode, write the slot. */
    for (int i = 0; i < reps; i++) {
        double t0 = clock_mono_s();
        store_loaded l;
        if (store_load(s, "bench", &l, err, sizeof err) < 0)
            die("store_load", err);
        if (state_decode(b->m, l.state, l.state_len, &mt, out, err, sizeof err) < 0)
            die("state_decode", err);
        model_slot_write(b->m, 1, out);
        t[i] = clock_mono_s() - t0;
        store_loaded_free(&l);
    }
    r.load_ms = 1e3 * median(t, reps);
    store_close(s);
    free(out);
    return r;
}

/* Sessions per second re-saving `total` existing sessions in commits of g,
 * each save with changed bytes in every page (as a session's state changes
 * everywhere after a turn). The first round, which creates the rows, is not
 * timed. */
static double grouped_rate(bench_model *b, int g, store_sync sync)
{
    int total = quick ? 128 : 512;
    char name[64], err[512];
    snprintf(name, sizeof name, "group-%d-%s.db", g, sync == STORE_SYNC_FULL ? "full" : "normal");
    store *s = open_store(name, sync);
    store_record *recs = calloc((size_t)g, sizeof *recs);
    char (*names)[32] = calloc((size_t)g, 32);
    uint8_t **blobs = calloc((size_t)g, sizeof *blobs);
    for (int i = 0; i < g; i++) {
        blobs[i] = malloc(b->blob_bytes);
        memcpy(blobs[i], b->blob, b->blob_bytes);
    }
    double t0 = 0;
    for (int round = 0; round < 2; round++) {
        if (round == 1)
            t0 = clock_mono_s();
        for (int done = 0; done < total; done += g) {
            for (int i = 0; i < g; i++) {
                for (size_t k = (size_t)(done + i) % 512; k < b->blob_bytes; k += 512)
                    blobs[i][k]++;
                snprintf(names[i], 32, "s%06d", done + i);
                recs[i] = (store_record){ names[i], blobs[i], b->blob_bytes, tail, sizeof tail, 64 };
            }
            if (store_save(s, recs, g, err, sizeof err) < 0)
                die("store_save", err);
        }
    }
    double el = clock_mono_s() - t0;
    store_close(s);
    for (int i = 0; i < g; i++)
        free(blobs[i]);
    free(blobs);
    free(recs);
    free(names);
    return total / el;
}

typedef struct resume {
    long history, tokens_measured;
    double refeed_s, resume_ms;
} resume;

/* Feed positions [from, to) of a fixed history (BOS, then printable ASCII
 * from a hash of the position), prompt-style: no logits. */
static void feed_range(model *m, int slot, long from, long to)
{
    for (long i = from; i < to; i++) {
        uint64_t x = (uint64_t)i * 0x9e3779b97f4a7c15ull;
        x ^= x >> 29;
        int tok = i == 0 ? LIND_BOS : 32 + (int)(x % 95);
        if (model_step(m, &slot, &tok, 1, NULL) < 0)
            die("model_step", "failed");
    }
}

/* Resume (load + decode + slot write, median of 20) of the state after each
 * history length hist[k] (ascending), against re-feeding that history from
 * BOS. One pass feeds the longest history; the re-feed time of a shorter
 * one is the time to reach it. With cap > 0 only the first cap tokens are
 * fed and re-feed times are scaled (a recurrent step costs the same at
 * every position); the state then is the one after cap tokens. */
static void time_resume(bench_model *b, const long *hist, int nh, long cap, resume *out)
{
    char err[512];
    store *s = open_store("resume.db", STORE_SYNC_FULL);
    uint8_t *res = malloc(b->state_bytes);
    model_slot_reset(b->m, 0);
    long fed = 0;
    double elapsed = 0;
    for (int k = 0; k < nh; k++) {
        resume *r = &out[k];
        long target = cap > 0 && hist[k] > cap ? cap : hist[k];
        double t0 = clock_mono_s();
        feed_range(b->m, 0, fed, target);
        elapsed += clock_mono_s() - t0;
        fed = target;
        r->history = hist[k];
        r->tokens_measured = target;
        r->refeed_s = elapsed * ((double)hist[k] / (double)target);
        model_slot_read(b->m, 0, b->raw);
        uint8_t *blob;
        size_t len;
        state_meta mt = b->meta;
        mt.tokens = (uint64_t)hist[k];
        if (state_encode(b->m, &mt, b->raw, &blob, &len, err, sizeof err) < 0)
            die("state_encode", err);
        store_record rec = { "history", blob, len, tail, sizeof tail, mt.tokens };
        if (store_save(s, &rec, 1, err, sizeof err) < 0)
            die("store_save", err);
        double t[20];
        for (int i = 0; i < 20; i++) {
            double a = clock_mono_s();
            store_loaded l;
            if (store_load(s, "history", &l, err, sizeof err) < 0)
                die("store_load", err);
            if (state_decode(b->m, l.state, l.state_len, &mt, res, err, sizeof err) < 0)
                die("state_decode", err);
            model_slot_write(b->m, 1, res);
            t[i] = clock_mono_s() - a;
            store_loaded_free(&l);
        }
        r->resume_ms = 1e3 * median(t, 20);
        free(blob);
        fprintf(stderr, "store_bench: history %ld: re-feed %.2f s, resume %.3f ms\n", r->history, r->refeed_s,
                r->resume_ms);
    }
    store_close(s);
    free(res);
}

/* PostgreSQL against SQLite, one after the other on this machine, with the
 * default model's state: the save and load of time_save_load and the
 * grouped-commit rates, durability full. */
static void compare_pg(bench_model *b)
{
    printf("\n### PostgreSQL vs SQLite\n\n");
    pgserver srv;
    char why[600];
    int up = pgserver_start(&srv, NULL, why, sizeof why);
    if (up != 0) {
        printf("PostgreSQL: not measured: %s\n", why);
        fprintf(stderr, "store_bench: PostgreSQL skipped: %s\n", why);
        pgserver_stop(&srv);
        return;
    }
    char ver[64] = "?";
    {
        char uri[256];
        pgserver_uri(&srv, "postgres", uri, sizeof uri);
        PGconn *c = PQconnectdb(uri);
        if (PQstatus(c) == CONNECTION_OK)
            snprintf(ver, sizeof ver, "%s", PQparameterStatus(c, "server_version"));
        PQfinish(c);
    }
    printf("The default model's %zu-byte state blob and a 4 KiB transcript tail per session;"
           " durability full (SQLite synchronous=FULL in WAL mode; PostgreSQL %s"
           " synchronous_commit=on, fsync on, over a Unix socket, a server this bench started with"
           " default settings). Save: read the slot, encode, commit one session (median). Resume:"
           " load the row, decode, write the slot (median). Saves/s: re-saving %d existing sessions"
           " in commits of 1, 8, 64.\n\n", b->blob_bytes, ver, quick ? 128 : 512);
    printf("| store | save ms | resume ms | saves/s, 1 per commit | saves/s, 8 per commit |"
           " saves/s, 64 per commit |\n|---|---|---|---|---|---|\n");
    for (int k = 0; k < 2; k++) {
        pgsrv = k ? &srv : NULL;
        timings t = time_save_load(b);
        double r1 = grouped_rate(b, 1, STORE_SYNC_FULL);
        double r8 = grouped_rate(b, 8, STORE_SYNC_FULL);
        double r64 = grouped_rate(b, 64, STORE_SYNC_FULL);
        printf("| %s | %.3f | %.3f | %.0f | %.0f | %.0f |\n", k ? "PostgreSQL" : "SQLite", t.save_ms,
               t.load_ms, r1, r8, r64);
        fflush(stdout);
    }
    pgsrv = NULL;
    pgserver_stop(&srv);
}

static void machine(void)
{
    char cpu[256] = "unknown CPU", line[512];
    FILE *f = fopen("/proc/cpuinfo", "r");
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "model name", 10) == 0) {
            char *p = strchr(line, ':');
            if (p) {
                snprintf(cpu, sizeof cpu, "%s", p + 2);
                cpu[strcspn(cpu, "\n")] = 0;
            }
            break;
        }
    if (f)
        fclose(f);
    struct utsname u;
    uname(&u);
    time_t now = time(NULL);
    char when[64];
    strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", gmtime(&now));
    printf("Machine: %s, %ld cores online, %s %s; SQLite %s; databases in %s; %s\n\n", cpu,
           sysconf(_SC_NPROCESSORS_ONLN), u.sysname, u.release, sqlite3_libversion(), workdir, when);
}

/* Up to 8 increasing history lengths, comma-separated; count or -1. */
static int parse_hist(const char *arg, long *out)
{
    int n = 0;
    const char *p = arg;
    while (*p && n < 8) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 1 || (n && v <= out[n - 1]) || (*end && *end != ','))
            return -1;
        out[n++] = v;
        p = *end ? end + 1 : end;
    }
    return *p ? -1 : n;
}

int main(int argc, char **argv)
{
    long hist[8] = { 10000 };
    int nhist = 1, compare_only = 0;
    const char *dir = NULL, *default_dir = "models/default";
    {
        char eerr[256];
        if (backend_opts_from_env(&bench_be, eerr, sizeof eerr) < 0) die("environment", eerr);
    }
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--dir") && i + 1 < argc) dir = argv[++i];
        else if (!strcmp(argv[i], "--model") && i + 1 < argc) default_dir = argv[++i];
        else if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--compare-only")) compare_only = 1;
        else if (!strcmp(argv[i], "--history") && i + 1 < argc && (nhist = parse_hist(argv[++i], hist)) > 0) {}
        else {
            fprintf(stderr, "usage: %s [--dir DIR] [--model DIR] [--history N,N,...] [--quick]"
                    " [--compare-only]\n", argv[0]);
            return 2;
        }
    }
    if (dir)
        snprintf(workdir, sizeof workdir, "%s", dir);
    else {
        snprintf(workdir, sizeof workdir, "/tmp/lind-store-bench-XXXXXX");
        if (!mkdtemp(workdir))
            die("mkdtemp", workdir);
    }

    printf("## Session store\n\nCommand: `");
    for (int i = 0; i < argc; i++)
        printf("%s%s", i ? " " : "", argv[i]);
    printf("`\n\n");
    machine();

    bench_model models[2];
    char path[512], cfgpath[512];
    snprintf(cfgpath, sizeof cfgpath, "%s/model.safetensors", default_dir);
    const char *deflabel;
    if (access(cfgpath, R_OK) == 0) {
        prepare(&models[0], "default", default_dir, NULL);
        deflabel = default_dir;
    } else {
        /* tools/train.py's default configuration, random weights. */
        testmodel_cfg c = testmodel_config(256, 4, 8, 32, 1024, "linear,aft", 1, "decay");
        snprintf(path, sizeof path, "%s/default-random", workdir);
        prepare(&models[0], "default", path, &c);
        deflabel = "random weights, config of tools/train.py's default (models/default absent)";
    }
    memset(tail, 'x', sizeof tail);
    if (compare_only) {
        compare_pg(&models[0]);
        free(models[0].raw);
        free(models[0].blob);
        model_free(models[0].m);
        goto done;
    }
    testmodel_cfg big = testmodel_config(768, 12, 12, 64, 3072, "linear,aft", 1, "decay");
    snprintf(path, sizeof path, "%s/12x768", workdir);
    prepare(&models[1], "12 layers x 768", path, &big);

    printf("### Save and load one session (median)\n\n"
           "Every save also carries a %zu-byte transcript tail (4 KiB of text).\n\n", sizeof tail);
    printf("| model | layers x d_model | state bytes | blob bytes | encode ms | decode ms |"
           " save ms (encode + commit, full) | load ms (read + decode + slot) |\n");
    printf("|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < 2; i++) {
        bench_model *b = &models[i];
        timings t = time_save_load(b);
        const lind_config *c = model_config(b->m);
        printf("| %s | %d x %d | %zu | %zu | %.3f | %.3f | %.3f | %.3f |\n",
               i == 0 ? deflabel : "random weights, 12 heads x 64, linear/aft", c->n_layers,
               c->d_model, b->state_bytes, b->blob_bytes, t.encode_ms, t.decode_ms, t.save_ms,
               t.load_ms);
        fflush(stdout);
    }

    printf("\n### Grouped commits: sessions saved per second\n\n"
           "Re-saving %d existing sessions with changed %zu-byte state blobs (the default model's)"
           " and 4 KiB transcript tails.\n\n",
           quick ? 128 : 512, models[0].blob_bytes);
    printf("| sessions per commit | durability full | durability normal |\n|---|---|---|\n");
    int groups[] = { 1, 8, 64 };
    for (int i = 0; i < 3; i++) {
        double full = grouped_rate(&models[0], groups[i], STORE_SYNC_FULL);
        double normal = grouped_rate(&models[0], groups[i], STORE_SYNC_NORMAL);
        printf("| %d | %.0f | %.0f |\n", groups[i], full, normal);
        fflush(stdout);
    }

    printf("\n### Resume from the stored state vs re-feeding the history\n\n"
           "Re-feed: the history fed token by token through model_step from BOS (no logits), as a server"
           " without saved state would have to. Resume: the stored state read, decoded and written into a slot.\n\n");
    printf("| model | history (tokens) | re-feed (s) | resume (load + decode + slot, ms) | ratio |\n");
    printf("|---|---|---|---|---|\n");
    resume *rs = calloc((size_t)nhist, sizeof *rs);
    for (int i = 0; i < 2; i++) {
        bench_model *b = &models[i];
        long cap = i == 0 ? 0 : quick ? 300 : 500;
        time_resume(b, hist, nhist, cap, rs);
        const lind_config *c = model_config(b->m);
        for (int k = 0; k < nhist; k++) {
            char note[96] = "";
            if (rs[k].tokens_measured != rs[k].history)
                snprintf(note, sizeof note, " (measured over %ld tokens, scaled)", rs[k].tokens_measured);
            printf("| %d x %d | %ld | %.2f%s | %.3f | %.0fx |\n", c->n_layers, c->d_model, rs[k].history,
                   rs[k].refeed_s, note, rs[k].resume_ms, rs[k].refeed_s * 1e3 / rs[k].resume_ms);
        }
        fflush(stdout);
    }
    free(rs);
    compare_pg(&models[0]);
    for (int i = 0; i < 2; i++) {
        free(models[i].raw);
        free(models[i].blob);
        model_free(models[i].m);
    }
done:
    if (!dir) {
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf %s", workdir);
        if (system(cmd) != 0)
            fprintf(stderr, "store_bench: could not remove %s\n", workdir);
    }
    return 0;
}
