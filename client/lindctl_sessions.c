/* client/lindctl_sessions.c — `lindctl sessions ls|show|rm|fork|export|
 * import` and `lindctl stats`: one request each, printed as a readable
 * table or, with --json, as one JSON document. */
#include "client/lindctl.h"
#include "kernels/clock.h"
#include "state/store.h"   /* STORE_NAME_MAX */

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static void usage(FILE *f)
{
    fprintf(f,
"usage: lindctl sessions COMMAND [options]\n"
"\n"
"  ls                     every stored session: name, origin, tokens, bytes, age, idle time\n"
"  show SESSION           one session's details and transcript tail\n"
"  rm SESSION...          delete sessions\n"
"  rm --prefix P [--older-than D]\n"
"                         delete every session whose name starts with P (\"\" : any) and,\n"
"                         with --older-than, that was last saved more than D ago (30d,\n"
"                         12h, 90m, 45s)\n"
"  gc                     collect now what the daemon's retention options allow\n"
"                         (--response-ttl, --session-ttl, --max-store-bytes); prints what\n"
"                         went and what is left\n"
"  fork SESSION NEW       copy SESSION's state to a new session NEW\n"
"  export SESSION FILE    write SESSION's self-contained bytes to FILE (- = stdout)\n"
"  import SESSION FILE    create SESSION from an export (FILE - = stdin)\n"
"\n"
"options:\n"
"  --json          print the daemon's answer as JSON\n"
"  --socket PATH   the daemon's socket (default ./lind.sock; tcp://HOST:PORT)\n"
"  --token-file PATH  over TCP, the token for hello (default $LIND_TOKEN_FILE)\n");
}

void ctl_print_transcript(const msgpack_object *arr, FILE *f, const char *in_prefix, int raw)
{
    if (!arr || arr->type != MSGPACK_OBJECT_ARRAY) return;
    int at_line_start = 1;
    for (uint32_t i = 0; i < arr->via.array.size; i++) {
        const msgpack_object *t = &arr->via.array.ptr[i];
        char role[8] = "";
        const uint8_t *p;
        size_t n;
        lindc_get_strcpy(t, "role", role, sizeof role);
        if (lindc_get_bytes(t, "text", &p, &n)) continue;
        if (!strcmp(role, "in")) {
            if (!at_line_start) fputc('\n', f);
            fputs(in_prefix, f);
            /* The user's text usually ends with its own newline. */
            ctl_write_text(f, p, n, raw);
            at_line_start = n && p[n - 1] == '\n';
            if (!at_line_start) { fputc('\n', f); at_line_start = 1; }
        } else {
            ctl_write_text(f, p, n, raw);
            if (n) at_line_start = p[n - 1] == '\n';
        }
    }
    if (!at_line_start) fputc('\n', f);
}

/* ---- subcommands --------------------------------------------------------- */

static int print_json_result(const lindc_event *ev)
{
    json_t *j = ctl_to_json(ev->map);
    json_object_del(j, "id");
    json_object_del(j, "event");
    ctl_json_line(j);
    json_decref(j);
    return EXIT_OK;
}

/* A span of ms as the largest unit or two: 45s, 12m, 3h20m, 4d2h. */
static void fmt_span(char *buf, size_t cap, uint64_t ms)
{
    uint64_t s = ms / 1000;
    if (s < 60) snprintf(buf, cap, "%llus", (unsigned long long)s);
    else if (s < 3600) snprintf(buf, cap, "%llum", (unsigned long long)(s / 60));
    else if (s < 86400) snprintf(buf, cap, "%lluh%llum", (unsigned long long)(s / 3600),
                                 (unsigned long long)(s % 3600 / 60));
    else snprintf(buf, cap, "%llud%lluh", (unsigned long long)(s / 86400),
                  (unsigned long long)(s % 86400 / 3600));
}

/* --older-than: a number and a unit, ms, s, m, h or d (bare: seconds). */
static int parse_duration(const char *opt, const char *v, uint64_t *ms)
{
    static const struct { const char *unit; uint64_t ms; } units[] = {
        { "", 1000 }, { "ms", 1 }, { "s", 1000 }, { "m", 60000 }, { "h", 3600000 }, { "d", 86400000 },
    };
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    for (size_t i = 0; *v != '-' && !errno && end != v && i < sizeof units / sizeof units[0]; i++)
        if (!strcmp(end, units[i].unit) && x <= 36500ull * 86400000 / units[i].ms) {
            *ms = x * units[i].ms;
            return 0;
        }
    fprintf(stderr, "lindctl: %s wants a duration such as 30d, 12h, 90m or 45s, got '%s'\n", opt, v);
    return -1;
}

static int sessions_ls(lindc *c, int json)
{
    lindc_req r;
    lindc_event ev;
    lindc_req_init(&r, "list");
    int status = ctl_call(c, &r, &ev);
    lindc_req_free(&r);
    if (status) return status;
    if (json) return print_json_result(&ev);
    const msgpack_object *arr = lindc_get(ev.map, "sessions");
    if (!arr || arr->type != MSGPACK_OBJECT_ARRAY) {
        fprintf(stderr, "lindctl: the daemon's list has no sessions array\n");
        return EXIT_CONNECTION;
    }
    if (arr->via.array.size == 0) {
        printf("(no sessions)\n");
        return EXIT_OK;
    }
    int w = 7;
    for (uint32_t i = 0; i < arr->via.array.size; i++) {
        char name[256];
        lindc_get_strcpy(&arr->via.array.ptr[i], "session", name, sizeof name);
        if ((int)strlen(name) > w) w = (int)strlen(name);
    }
    /* AGE: since created; IDLE: since the last save (what the ttls count) */
    printf("%-*s  %-8s  %10s  %10s  %7s  %7s  %s\n", w, "SESSION", "ORIGIN", "TOKENS", "BYTES", "AGE",
           "IDLE", "UPDATED");
    uint64_t now = (uint64_t)clock_wall_ms(), total = 0;
    for (uint32_t i = 0; i < arr->via.array.size; i++) {
        const msgpack_object *s = &arr->via.array.ptr[i];
        char name[256], origin[16] = "-", when[64] = "-", age[32] = "-", idle[32] = "-";
        uint64_t tokens = 0, upd = 0, created = 0, bytes = 0;
        lindc_get_strcpy(s, "session", name, sizeof name);
        lindc_get_strcpy(s, "origin", origin, sizeof origin);
        lindc_get_u64(s, "tokens", &tokens);
        lindc_get_u64(s, "bytes", &bytes);
        total += bytes;
        if (lindc_get_u64(s, "updated_ms", &upd) == 0 && upd) {
            ctl_fmt_time(when, sizeof when, upd);
            fmt_span(idle, sizeof idle, now > upd ? now - upd : 0);
        }
        if (lindc_get_u64(s, "created_ms", &created) == 0 && created)
            fmt_span(age, sizeof age, now > created ? now - created : 0);
        printf("%-*s  %-8s  %10llu  %10llu  %7s  %7s  %s\n", w, name, origin,
               (unsigned long long)tokens, (unsigned long long)bytes, age, idle, when);
    }
    printf("%u sessions, %llu bytes\n", arr->via.array.size, (unsigned long long)total);
    return EXIT_OK;
}

static int sessions_show(lindc *c, const char *name, int json)
{
    lindc_req r;
    lindc_event ev;
    lindc_req_init(&r, "info");
    lindc_req_str(&r, "session", name);
    int status = ctl_call(c, &r, &ev);
    lindc_req_free(&r);
    if (status) return status;
    if (json) return print_json_result(&ev);
    uint64_t tokens = 0, sbytes = 0, created = 0, updated = 0;
    int resident = 0, busy = 0;
    char when[64];
    lindc_get_u64(ev.map, "tokens", &tokens);
    lindc_get_u64(ev.map, "state_bytes", &sbytes);
    printf("session      %s\n", name);
    printf("tokens       %llu\n", (unsigned long long)tokens);
    printf("state bytes  %llu\n", (unsigned long long)sbytes);
    if (lindc_get_u64(ev.map, "created_ms", &created) == 0 && created) {
        ctl_fmt_time(when, sizeof when, created);
        printf("created      %s\n", when);
    }
    if (lindc_get_u64(ev.map, "updated_ms", &updated) == 0) {
        /* 0: the first turn is not committed yet (not 1970). */
        if (updated) ctl_fmt_time(when, sizeof when, updated);
        else snprintf(when, sizeof when, "never (no turn committed yet)");
        printf("updated      %s\n", when);
    }
    uint64_t seed;
    if (lindc_get_u64(ev.map, "seed", &seed) == 0) printf("seed         %llu\n", (unsigned long long)seed);
    if (lindc_get_bool(ev.map, "resident", &resident) == 0)
        printf("resident     %s\n", resident ? "yes (in the daemon's memory)" : "no (on disk)");
    if (lindc_get_bool(ev.map, "busy", &busy) == 0)
        printf("busy         %s\n", busy ? "yes (a turn is running)" : "no");
    const msgpack_object *tr = lindc_get(ev.map, "transcript");
    if (tr && tr->type == MSGPACK_OBJECT_ARRAY && tr->via.array.size) {
        printf("transcript (tail):\n");
        ctl_print_transcript(tr, stdout, "> ", !isatty(1));
    }
    return EXIT_OK;
}

static int sessions_rm(lindc *c, char **names, int n, int json)
{
    int first_fail = EXIT_OK;
    for (int i = 0; i < n; i++) {
        lindc_req r;
        lindc_event ev;
        lindc_req_init(&r, "delete");
        lindc_req_str(&r, "session", names[i]);
        int status = ctl_call(c, &r, &ev);
        lindc_req_free(&r);
        if (status == EXIT_CONNECTION || status == EXIT_INTERRUPTED) return status;
        if (status) {
            if (!first_fail) first_fail = status;
            continue;
        }
        if (json) print_json_result(&ev);
        else printf("deleted %s\n", names[i]);
    }
    return first_fail;
}

/* rm --prefix P [--older-than D]: the daemon's list, filtered here, each
 * match deleted through `delete` (so a resident session goes too). */
static int sessions_rm_matching(lindc *c, const char *prefix, uint64_t older_ms, int json)
{
    lindc_req r;
    lindc_event ev;
    lindc_req_init(&r, "list");
    int status = ctl_call(c, &r, &ev);
    lindc_req_free(&r);
    if (status) return status;
    const msgpack_object *arr = lindc_get(ev.map, "sessions");
    if (!arr || arr->type != MSGPACK_OBJECT_ARRAY) {
        fprintf(stderr, "lindctl: the daemon's list has no sessions array\n");
        return EXIT_CONNECTION;
    }
    uint64_t now = (uint64_t)clock_wall_ms();
    size_t n = 0, plen = strlen(prefix);
    char **names = calloc(arr->via.array.size + 1, sizeof *names);
    if (!names) {
        fprintf(stderr, "lindctl: out of memory\n");
        return EXIT_INTERNAL;
    }
    for (uint32_t i = 0; i < arr->via.array.size; i++) {
        const msgpack_object *s = &arr->via.array.ptr[i];
        char name[STORE_NAME_MAX + 1];
        uint64_t upd = 0;
        if (lindc_get_strcpy(s, "session", name, sizeof name) != 0 || strncmp(name, prefix, plen))
            continue;
        lindc_get_u64(s, "updated_ms", &upd);
        if (older_ms && !(upd && now > upd && now - upd > older_ms)) continue;
        if (!(names[n] = strdup(name))) break;
        n++;
    }
    if (n == 0 && !json) printf("no session matches\n");
    status = n ? sessions_rm(c, names, (int)n, json) : EXIT_OK;
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    return status;
}

/* gc: one collection step per request, until the daemon says no more. */
static int sessions_gc(lindc *c, int json)
{
    uint64_t expired = 0, evicted = 0, freed = 0;
    int more = 1, over = 0, status = EXIT_OK;
    lindc_event ev;
    while (more) {
        lindc_req r;
        lindc_req_init(&r, "gc");
        status = ctl_call(c, &r, &ev);
        lindc_req_free(&r);
        if (status) return status;
        uint64_t v = 0;
        if (!lindc_get_u64(ev.map, "expired", &v)) expired += v;
        if (!lindc_get_u64(ev.map, "evicted", &v)) evicted += v;
        if (!lindc_get_u64(ev.map, "freed_bytes", &v)) freed += v;
        if (lindc_get_bool(ev.map, "more", &more)) more = 0;
    }
    if (json) return print_json_result(&ev);
    uint64_t sessions = 0, bytes = 0, quota = 0;
    lindc_get_u64(ev.map, "sessions", &sessions);
    lindc_get_u64(ev.map, "bytes", &bytes);
    lindc_get_u64(ev.map, "max_store_bytes", &quota);
    lindc_get_bool(ev.map, "over_quota", &over);
    printf("collected %llu expired and %llu over the quota (%llu bytes); %llu sessions hold %llu bytes",
           (unsigned long long)expired, (unsigned long long)evicted, (unsigned long long)freed,
           (unsigned long long)sessions, (unsigned long long)bytes);
    if (quota) printf(" of --max-store-bytes %llu%s", (unsigned long long)quota,
                      over ? ": over it, new turns are refused" : "");
    printf("\n");
    return EXIT_OK;
}

static int sessions_fork(lindc *c, const char *from, const char *to, int json)
{
    lindc_req r;
    lindc_event ev;
    lindc_req_init(&r, "fork");
    lindc_req_str(&r, "session", from);
    lindc_req_str(&r, "to", to);
    int status = ctl_call(c, &r, &ev);
    lindc_req_free(&r);
    if (status) return status;
    if (json) return print_json_result(&ev);
    printf("forked %s -> %s\n", from, to);
    return EXIT_OK;
}

/* Write all of buf to fd. */
static int write_fd(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return -errno;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int sessions_export(lindc *c, const char *name, const char *path, int json)
{
    if ((!strcmp(path, "-") && isatty(1)) || (strcmp(path, "-") && ctl_is_terminal(path))) {
        fprintf(stderr, "lindctl: refusing to write binary export data to a terminal; give a FILE\n");
        return EXIT_USAGE;
    }
    char perr[600];
    if (strcmp(path, "-") && ctl_check_writable(path, perr, sizeof perr)) {   /* before asking */
        fprintf(stderr, "lindctl: %s\n", perr);
        return EXIT_LOCAL_FILE;
    }
    lindc_req r;
    lindc_event ev;
    lindc_req_init(&r, "export");
    lindc_req_str(&r, "session", name);
    int status = ctl_call(c, &r, &ev);
    lindc_req_free(&r);
    if (status) return status;
    const uint8_t *data;
    size_t n;
    if (lindc_get_bytes(ev.map, "data", &data, &n)) {
        fprintf(stderr, "lindctl: the daemon's export has no data field\n");
        return EXIT_CONNECTION;
    }
    if (!strcmp(path, "-")) {
        int rc = write_fd(1, data, n);
        if (rc) {
            fprintf(stderr, "lindctl: cannot write the export to stdout: %s\n", strerror(-rc));
            return EXIT_LOCAL_FILE;
        }
        return EXIT_OK;
    }
    char err[600];
    if (ctl_write_atomic(path, data, n, err, sizeof err)) {
        fprintf(stderr, "lindctl: %s\n", err);
        return EXIT_LOCAL_FILE;
    }
    if (json) {
        json_t *j = json_pack("{s:s, s:s, s:I}", "session", name, "file", path, "bytes", (json_int_t)n);
        ctl_json_line(j);
        json_decref(j);
    } else {
        printf("exported %s to %s (%zu bytes)\n", name, path, n);
    }
    return EXIT_OK;
}

static int sessions_import(lindc *c, const char *name, const char *path, int json)
{
    uint8_t *data = NULL;
    size_t n = 0;
    int rc = ctl_read_file(path, &data, &n);
    if (rc) {
        fprintf(stderr, "lindctl: cannot read %s: %s\n", path, strerror(-rc));
        return EXIT_LOCAL_FILE;
    }
    /* Ask the daemon's message limit first: an oversized import would
     * otherwise only be answered by the connection closing. */
    lindc_req r;
    lindc_event ev;
    lindc_req_init(&r, "hello");
    int status = ctl_call(c, &r, &ev);
    lindc_req_free(&r);
    uint64_t max_message = 0;
    if (!status && lindc_get_u64(lindc_get(ev.map, "limits"), "max_message", &max_message) == 0
        && n + strlen(name) + 64 > max_message) {
        fprintf(stderr, "lindctl: %s is %zu bytes; the daemon takes messages of at most %llu bytes\n",
                path, n, (unsigned long long)max_message);
        free(data);
        return EXIT_REFUSED;
    }
    if (!status) {
        lindc_req_init(&r, "import");
        lindc_req_str(&r, "session", name);
        lindc_req_bin(&r, "data", data, n);
        status = ctl_call(c, &r, &ev);
        lindc_req_free(&r);
    }
    free(data);
    if (status) return status;
    if (json) return print_json_result(&ev);
    uint64_t tokens = 0;
    lindc_get_u64(ev.map, "tokens", &tokens);
    printf("imported %s from %s (%llu tokens)\n", name, path, (unsigned long long)tokens);
    return EXIT_OK;
}

int cmd_sessions(const ctl_opts *g0, int argc, char **argv)
{
    ctl_opts g = *g0;
    int json = 0;
    const char *prefix = NULL;
    uint64_t older_ms = 0;
    enum { O_JSON = 1, O_PREFIX, O_OLDER };
    static const struct option longopts[] = {
        CTL_COMMON_LONGOPTS, { "json", no_argument, NULL, O_JSON },
        { "prefix", required_argument, NULL, O_PREFIX },
        { "older-than", required_argument, NULL, O_OLDER }, { 0, 0, 0, 0 },
    };
    int opt;
    while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (opt) {
        case CTL_OPT_SOCKET: g.socket = optarg; break;
        case CTL_OPT_TOKEN_FILE: g.token_file = optarg; break;
        case CTL_OPT_HELP: usage(stdout); return EXIT_OK;
        case O_JSON: json = 1; break;
        case O_PREFIX: prefix = optarg; break;
        case O_OLDER: if (parse_duration("--older-than", optarg, &older_ms)) return EXIT_USAGE; break;
        default: usage(stderr); return EXIT_USAGE;
        }
    }
    if (optind >= argc) {
        usage(stderr);
        return EXIT_USAGE;
    }
    const char *sub = argv[optind];
    char **args = argv + optind + 1;
    int nargs = argc - optind - 1;
    static const struct { const char *name; int min, max; } subs[] = {
        { "ls", 0, 0 }, { "show", 1, 1 }, { "rm", 1, 1 << 20 }, { "fork", 2, 2 },
        { "export", 2, 2 }, { "import", 2, 2 }, { "gc", 0, 0 },
    };
    size_t k;
    for (k = 0; k < sizeof subs / sizeof subs[0]; k++)
        if (!strcmp(subs[k].name, sub)) break;
    if (k == sizeof subs / sizeof subs[0]) {
        fprintf(stderr, "lindctl sessions: unknown command '%s'\n", sub);
        usage(stderr);
        return EXIT_USAGE;
    }
    if ((prefix || older_ms) && strcmp(sub, "rm")) {
        fprintf(stderr, "lindctl sessions %s: --prefix and --older-than go with rm\n", sub);
        return EXIT_USAGE;
    }
    if (!strcmp(sub, "rm") && (prefix || older_ms) && (nargs || !prefix)) {
        fprintf(stderr, "lindctl sessions rm: give names, or --prefix P [--older-than D]\n");
        return EXIT_USAGE;
    }
    if (!(prefix && !strcmp(sub, "rm")) && (nargs < subs[k].min || nargs > subs[k].max)) {
        fprintf(stderr, "lindctl sessions %s: wrong number of arguments\n", sub);
        usage(stderr);
        return EXIT_USAGE;
    }
    lindc *c;
    int status = ctl_connect(&g, &c);
    if (status) return status;
    ctl_catch_sigint();
    switch (k) {
    case 0: status = sessions_ls(c, json); break;
    case 1: status = sessions_show(c, args[0], json); break;
    case 2: status = prefix ? sessions_rm_matching(c, prefix, older_ms, json)
                            : sessions_rm(c, args, nargs, json); break;
    case 3: status = sessions_fork(c, args[0], args[1], json); break;
    case 4: status = sessions_export(c, args[0], args[1], json); break;
    case 6: status = sessions_gc(c, json); break;
    default: status = sessions_import(c, args[0], args[1], json); break;
    }
    lindc_free(c);
    return status;
}

/* ---- stats ------------------------------------------------------------------ */

static void stats_usage(FILE *f)
{
    fprintf(f,
"usage: lindctl stats [--json] [--socket PATH]\n"
"\n"
"The daemon's model, counters and latency figures. --json prints the stats\n"
"result with the hello result under \"hello\".\n");
}

static void print_ms(const char *label, const msgpack_object *m)
{
    double p50 = 0, p90 = 0, p99 = 0, max = 0;
    if (!m) return;
    lindc_get_f64(m, "p50", &p50);
    lindc_get_f64(m, "p90", &p90);
    lindc_get_f64(m, "p99", &p99);
    lindc_get_f64(m, "max", &max);
    printf("%-14s p50 %.3f  p90 %.3f  p99 %.3f  max %.3f\n", label, p50, p90, p99, max);
}

static void print_value(const msgpack_object *o)
{
    json_t *j = ctl_to_json(o);
    char *s = json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY);
    printf("%s", s ? s : "?");
    free(s);
    json_decref(j);
}

int cmd_stats(const ctl_opts *g0, int argc, char **argv)
{
    ctl_opts g = *g0;
    int json = 0;
    enum { O_JSON = 1 };
    static const struct option longopts[] = {
        CTL_COMMON_LONGOPTS, { "json", no_argument, NULL, O_JSON }, { 0, 0, 0, 0 },
    };
    int opt;
    while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (opt) {
        case CTL_OPT_SOCKET: g.socket = optarg; break;
        case CTL_OPT_TOKEN_FILE: g.token_file = optarg; break;
        case CTL_OPT_HELP: stats_usage(stdout); return EXIT_OK;
        case O_JSON: json = 1; break;
        default: stats_usage(stderr); return EXIT_USAGE;
        }
    }
    if (optind != argc) {
        fprintf(stderr, "lindctl stats: takes no arguments\n");
        return EXIT_USAGE;
    }
    lindc *c;
    int status = ctl_connect(&g, &c);
    if (status) return status;
    lindc_req r;
    lindc_event hello, ev;
    lindc_req_init(&r, "hello");
    status = ctl_call(c, &r, &hello);
    lindc_req_free(&r);
    json_t *hj = status ? NULL : ctl_to_json(hello.map);   /* hello's memory ends at the next call */
    if (!status) {
        lindc_req_init(&r, "stats");
        status = ctl_call(c, &r, &ev);
        lindc_req_free(&r);
    }
    if (status) {
        json_decref(hj);
        lindc_free(c);
        return status;
    }
    json_object_del(hj, "id");
    json_object_del(hj, "event");
    if (json) {
        json_t *j = ctl_to_json(ev.map);
        json_object_del(j, "id");
        json_object_del(j, "event");
        json_object_set_new(j, "hello", hj);
        ctl_json_line(j);
        json_decref(j);
        lindc_free(c);
        return EXIT_OK;
    }
    json_t *model = json_object_get(hj, "model");
    printf("%-14s %s (protocol %lld)\n", "server", json_string_value(json_object_get(hj, "server")),
           (long long)json_integer_value(json_object_get(hj, "protocol")));
    if (model) {
        printf("%-14s %s\n", "model", json_string_value(json_object_get(model, "path")));
        printf("%-14s %lld params, d_model %lld, %lld layers, %lld state bytes/session, fingerprint %s\n", "",
               (long long)json_integer_value(json_object_get(model, "params")),
               (long long)json_integer_value(json_object_get(model, "d_model")),
               (long long)json_integer_value(json_object_get(model, "n_layers")),
               (long long)json_integer_value(json_object_get(model, "state_bytes")),
               json_string_value(json_object_get(model, "fingerprint")));
    }
    /* Known fields in a fixed order, then whatever else the daemon sends. */
    static const char *shown[] = { "id", "event", "uptime_s", "connections", "sessions_resident",
        "sessions_stored", "tokens_in", "tokens_out", "steps", "batch_hist", "step_ms", "save_ms",
        "backend" };
    char backend[32] = "?";
    lindc_get_strcpy(ev.map, "backend", backend, sizeof backend);
    printf("%-14s %s\n", "backend", backend);
    uint64_t v1 = 0, v2 = 0;
    double upf = 0;
    lindc_get_f64(ev.map, "uptime_s", &upf);
    uint64_t up = upf > 0 ? (uint64_t)upf : 0;
    printf("%-14s %lluh %02llum %02llus\n", "uptime", (unsigned long long)(up / 3600),
           (unsigned long long)(up / 60 % 60), (unsigned long long)(up % 60));
    lindc_get_u64(ev.map, "connections", &v1);
    printf("%-14s %llu\n", "connections", (unsigned long long)v1);
    v1 = v2 = 0;
    lindc_get_u64(ev.map, "sessions_resident", &v1);
    if (lindc_get_u64(ev.map, "sessions_stored", &v2) == 0)
        printf("%-14s %llu resident, %llu stored\n", "sessions", (unsigned long long)v1, (unsigned long long)v2);
    else   /* nil: the store could not count them */
        printf("%-14s %llu resident, stored unknown (the store did not answer)\n", "sessions",
               (unsigned long long)v1);
    v1 = v2 = 0;
    lindc_get_u64(ev.map, "tokens_in", &v1);
    lindc_get_u64(ev.map, "tokens_out", &v2);
    printf("%-14s %llu in, %llu out\n", "tokens", (unsigned long long)v1, (unsigned long long)v2);
    v1 = 0;
    lindc_get_u64(ev.map, "steps", &v1);
    printf("%-14s %llu\n", "steps", (unsigned long long)v1);
    const msgpack_object *hist = lindc_get(ev.map, "batch_hist");
    if (hist && hist->type == MSGPACK_OBJECT_MAP) {
        printf("%-14s", "batch sizes");
        for (uint32_t i = 0; i < hist->via.map.size; i++) {
            printf(" ");
            const msgpack_object_kv *kv = &hist->via.map.ptr[i];
            if (kv->key.type == MSGPACK_OBJECT_STR) printf("%.*s", (int)kv->key.via.str.size, kv->key.via.str.ptr);
            else print_value(&kv->key);
            printf(":");
            print_value(&kv->val);
        }
        printf("\n");
    }
    print_ms("step ms", lindc_get(ev.map, "step_ms"));
    print_ms("save ms", lindc_get(ev.map, "save_ms"));
    for (uint32_t i = 0; i < ev.map->via.map.size; i++) {
        const msgpack_object_kv *kv = &ev.map->via.map.ptr[i];
        if (kv->key.type != MSGPACK_OBJECT_STR) continue;
        int known = 0;
        for (size_t k = 0; k < sizeof shown / sizeof shown[0]; k++)
            if (kv->key.via.str.size == strlen(shown[k]) && !memcmp(kv->key.via.str.ptr, shown[k], kv->key.via.str.size))
                known = 1;
        if (known) continue;
        char key[64];
        snprintf(key, sizeof key, "%.*s", (int)kv->key.via.str.size, kv->key.via.str.ptr);
        for (char *p = key; *p; p++) if (*p == '_') *p = ' ';
        printf("%-14s ", key);
        print_value(&kv->val);
        printf("\n");
    }
    json_decref(hj);
    lindc_free(c);
    return EXIT_OK;
}

/* ---- cancel ---------------------------------------------------------------- */

static void cancel_usage(FILE *f)
{
    fprintf(f,
"usage: lindctl cancel SESSION\n"
"\n"
"Stop the turn (generate or append) in flight on SESSION, whichever client\n"
"sent it. It ends at the next token boundary; its client gets `done` (or its\n"
"append's result) saying how much of its text the session holds.\n"
"\n"
"exit status: 0 a turn was cancelled; 6 no turn was in flight on SESSION;\n"
"others as for every command (lindctl --help).\n");
}

int cmd_cancel(const ctl_opts *g0, int argc, char **argv)
{
    ctl_opts g = *g0;
    static const struct option longopts[] = { CTL_COMMON_LONGOPTS, { 0, 0, 0, 0 } };
    int opt;
    while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (opt) {
        case CTL_OPT_SOCKET: g.socket = optarg; break;
        case CTL_OPT_TOKEN_FILE: g.token_file = optarg; break;
        case CTL_OPT_HELP: cancel_usage(stdout); return EXIT_OK;
        default: cancel_usage(stderr); return EXIT_USAGE;
        }
    }
    if (argc - optind != 1) {
        fprintf(stderr, "lindctl cancel: want one SESSION (got %d arguments)\n", argc - optind);
        cancel_usage(stderr);
        return EXIT_USAGE;
    }
    const char *name = argv[optind];
    lindc *c;
    int status = ctl_connect(&g, &c);
    if (status) return status;
    lindc_req r;
    lindc_event ev;
    lindc_req_init(&r, "cancel");
    lindc_req_str(&r, "session", name);
    status = ctl_call(c, &r, &ev);
    lindc_req_free(&r);
    if (status == EXIT_OK) {
        int hit = 0;
        const msgpack_object *v = lindc_get(ev.map, "cancelled");
        hit = v && v->type == MSGPACK_OBJECT_BOOLEAN && v->via.boolean;
        if (hit) {
            printf("cancelled the turn in flight on '%s'\n", name);
        } else {
            fprintf(stderr, "lindctl: no turn in flight on '%s'\n", name);
            status = EXIT_NOT_FOUND;
        }
    }
    lindc_free(c);
    return status;
}
