/* client/lindctl_common.c — helpers lindctl's commands share: connecting
 * with a clear message, mapping server error codes to exit statuses,
 * msgpack → JSON, UTF-8 cutting, number parsing, Ctrl-C. */
#include "client/lindctl.h"
#include "recurrent/bytebuf.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/random.h>
#include <unistd.h>

volatile sig_atomic_t ctl_interrupted;

static void on_sigint(int sig)
{
    (void)sig;
    ctl_interrupted++;
}

void ctl_catch_sigint(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
}

int ctl_dial(const ctl_opts *g, lindc **out, char *err, size_t errlen)
{
    int rc = lindc_connect(out, g->socket, err, errlen);
    if (rc || !g->token_file || !*g->token_file) return rc;
    char tok[260] = "";
    FILE *f = fopen(g->token_file, "r");
    if (!f || !fgets(tok, sizeof tok, f)) {
        snprintf(err, errlen, "--token-file %s: %s", g->token_file, f ? "empty" : strerror(errno));
        if (f) fclose(f);
        lindc_free(*out);
        *out = NULL;
        return -EINVAL;
    }
    fclose(f);
    tok[strcspn(tok, "\r\n")] = 0;   /* the first line, as the daemon reads it */
    if ((rc = lindc_hello_token(*out, tok, err, errlen)) != 0) {
        lindc_free(*out);
        *out = NULL;
    }
    return rc;
}

int ctl_connect(const ctl_opts *g, lindc **out)
{
    char err[512];
    int rc = ctl_dial(g, out, err, sizeof err);
    if (rc == 0) return EXIT_OK;
    fprintf(stderr, "lindctl: %s\n", err);
    return EXIT_UNREACHABLE;
}

int ctl_exit_for_code(const char *code)
{
    static const struct { const char *code; int status; } map[] = {
        { "bad_request", EXIT_REFUSED }, { "unknown_op", EXIT_REFUSED },
        { "too_large", EXIT_REFUSED }, { "decode", EXIT_REFUSED },
        { "bad_name", EXIT_REFUSED }, { "not_found", EXIT_NOT_FOUND },
        { "exists", EXIT_EXISTS }, { "busy", EXIT_BUSY }, { "limit", EXIT_LIMIT },
        { "bad_state", EXIT_BAD_STATE }, { "io", EXIT_IO },
        { "shutting_down", EXIT_SHUTTING_DOWN }, { "internal", EXIT_INTERNAL },
        { "unavailable", EXIT_UNAVAILABLE }, { "moved", EXIT_MOVED }, { "conflict", EXIT_CONFLICT },
        { "insufficient_storage", EXIT_STORAGE }, { "unauthorized", EXIT_REFUSED },
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (!strcmp(map[i].code, code)) return map[i].status;
    return EXIT_INTERNAL;
}

int ctl_report_event(const lindc_event *ev)
{
    fprintf(stderr, "lindctl: %s: %s\n", ev->code, ev->message[0] ? ev->message : "(no message)");
    return ctl_exit_for_code(ev->code);
}

int ctl_conn_lost(int rc)
{
    return rc == LINDC_ECLOSED || rc == LINDC_EBROKEN || rc == -ECONNRESET || rc == -EPIPE;
}

int ctl_report_lib(int rc, const char *what)
{
    if (rc == LINDC_ECLOSED || rc == LINDC_EBROKEN)
        fprintf(stderr, "lindctl: %s: the daemon closed the connection (did it stop or restart?)\n", what);
    else
        fprintf(stderr, "lindctl: %s: %s\n", what, lindc_strerror(rc));
    return EXIT_CONNECTION;
}

int ctl_call(lindc *c, const lindc_req *r, lindc_event *ev)
{
    int rc;
    do rc = lindc_call(c, r, ev, -1);
    while (rc == -EINTR && !ctl_interrupted);
    if (rc == 0) return EXIT_OK;
    if (rc == LINDC_ESERVER) return ctl_report_event(ev);
    if (rc == -EINTR) return EXIT_INTERRUPTED;
    return ctl_report_lib(rc, r->op);
}

/* ---- UTF-8 ------------------------------------------------------------------ */

/* Length of the valid UTF-8 sequence at p (1..4), 0 if invalid there, or
 * -1 if p[0..n) is a valid but unfinished start of one. */
static int utf8_seq(const unsigned char *p, size_t n)
{
    unsigned c = p[0];
    int len;
    unsigned min;
    if (c < 0x80) return 1;
    if (c >= 0xc2 && c <= 0xdf) { len = 2; min = 0x80; }
    else if (c >= 0xe0 && c <= 0xef) { len = 3; min = 0x800; }
    else if (c >= 0xf0 && c <= 0xf4) { len = 4; min = 0x10000; }
    else return 0;
    unsigned cp = c & (0x3f >> (len - 1));
    for (int i = 1; i < len; i++) {
        if ((size_t)i >= n) return -1;
        if ((p[i] & 0xc0) != 0x80) return 0;
        cp = (cp << 6) | (p[i] & 0x3f);
        /* Reject overlongs, surrogates and > U+10FFFF as early as the
         * second byte allows, so a bad start is not held back forever. */
        if (i == 1 && len == 3 && ((c == 0xe0 && p[1] < 0xa0) || (c == 0xed && p[1] > 0x9f))) return 0;
        if (i == 1 && len == 4 && ((c == 0xf0 && p[1] < 0x90) || (c == 0xf4 && p[1] > 0x8f))) return 0;
    }
    return cp >= min ? len : 0;
}

size_t ctl_utf8_complete(const unsigned char *p, size_t n)
{
    size_t i = 0;
    while (i < n) {
        int l = utf8_seq(p + i, n - i);
        if (l < 0) return i;
        i += l ? (size_t)l : 1;
    }
    return n;
}

json_t *ctl_json_bytes(const void *vp, size_t n)
{
    const unsigned char *p = vp;
    char *buf = malloc(3 * n + 1);   /* each bad byte grows to 3 (U+FFFD) */
    if (!buf) return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        int l = utf8_seq(p + i, n - i);
        if (l > 0) {
            memcpy(buf + o, p + i, (size_t)l);
            o += (size_t)l;
            i += (size_t)l;
        } else {
            memcpy(buf + o, "\xef\xbf\xbd", 3);
            o += 3;
            i++;
        }
    }
    json_t *s = json_stringn(buf, o);
    free(buf);
    return s;
}

json_t *ctl_to_json(const msgpack_object *o)
{
    switch (o->type) {
    case MSGPACK_OBJECT_NIL: return json_null();
    case MSGPACK_OBJECT_BOOLEAN: return json_boolean(o->via.boolean);
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
        return o->via.u64 <= (uint64_t)INT64_MAX ? json_integer((json_int_t)o->via.u64)
                                                 : json_real((double)o->via.u64);
    case MSGPACK_OBJECT_NEGATIVE_INTEGER: return json_integer(o->via.i64);
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64:
        return isfinite(o->via.f64) ? json_real(o->via.f64) : json_null();
    case MSGPACK_OBJECT_STR: return ctl_json_bytes(o->via.str.ptr, o->via.str.size);
    case MSGPACK_OBJECT_BIN: return ctl_json_bytes(o->via.bin.ptr, o->via.bin.size);
    case MSGPACK_OBJECT_ARRAY: {
        json_t *a = json_array();
        for (uint32_t i = 0; i < o->via.array.size; i++)
            json_array_append_new(a, ctl_to_json(&o->via.array.ptr[i]));
        return a;
    }
    case MSGPACK_OBJECT_MAP: {
        json_t *m = json_object();
        for (uint32_t i = 0; i < o->via.map.size; i++) {
            const msgpack_object_kv *kv = &o->via.map.ptr[i];
            char key[128];
            if (kv->key.type == MSGPACK_OBJECT_STR || kv->key.type == MSGPACK_OBJECT_BIN) {
                json_t *ks = ctl_to_json(&kv->key);
                snprintf(key, sizeof key, "%s", json_string_value(ks));
                json_decref(ks);
            } else if (kv->key.type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
                snprintf(key, sizeof key, "%llu", (unsigned long long)kv->key.via.u64);
            } else if (kv->key.type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
                snprintf(key, sizeof key, "%lld", (long long)kv->key.via.i64);
            } else {
                snprintf(key, sizeof key, "?");
            }
            json_object_set_new(m, key, ctl_to_json(&kv->val));
        }
        return m;
    }
    default: return json_null();
    }
}

void ctl_json_line(json_t *v)
{
    char *s = json_dumps(v, JSON_COMPACT | JSON_ENSURE_ASCII | JSON_ENCODE_ANY);
    if (s) {
        fputs(s, stdout);
        fputc('\n', stdout);
        free(s);
    }
    fflush(stdout);
}

void ctl_write_text(FILE *f, const uint8_t *p, size_t n, int raw)
{
    if (raw) {
        fwrite(p, 1, n, f);
        return;
    }
    size_t start = 0;
    for (size_t i = 0; i < n; i++) {
        uint8_t b = p[i];
        if ((b >= 0x20 && b != 0x7f) || b == '\n' || b == '\t') continue;
        fwrite(p + start, 1, i - start, f);
        fputc('^', f);
        fputc(b == 0x7f ? '?' : b + '@', f);
        start = i + 1;
    }
    fwrite(p + start, 1, n - start, f);
}

void ctl_fmt_time(char *buf, size_t cap, uint64_t ms)
{
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    if (!localtime_r(&t, &tm) || !strftime(buf, cap, "%Y-%m-%d %H:%M:%S", &tm))
        snprintf(buf, cap, "%llu", (unsigned long long)ms);
}

int ctl_parse_u64(const char *opt, const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    if (!*s || *s == '-') goto bad;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end) goto bad;
    *out = v;
    return 0;
bad:
    fprintf(stderr, "lindctl: %s wants a non-negative integer, got '%s'\n", opt, s);
    return -1;
}

int ctl_parse_f64(const char *opt, const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (!*s || errno || *end || !isfinite(v)) {
        fprintf(stderr, "lindctl: %s wants a number, got '%s'\n", opt, s);
        return -1;
    }
    *out = v;
    return 0;
}

int ctl_check_gen_opts(const lindc_gen_opts *o, char *err, size_t errlen)
{
    if (o->temperature >= 0 && o->temperature > 100)
        snprintf(err, errlen, "--temperature wants 0..100, got %g", o->temperature);
    else if (o->top_k > 256)
        snprintf(err, errlen, "--top-k wants 0..256, got %lld", (long long)o->top_k);
    else if (o->top_p >= 0 && (o->top_p == 0 || o->top_p > 1))
        snprintf(err, errlen, "--top-p wants a number in (0, 1], got %g", o->top_p);
    else if (o->repetition_penalty >= 0 && (o->repetition_penalty < 1 || o->repetition_penalty > 100))
        snprintf(err, errlen, "--repetition-penalty wants 1..100, got %g", o->repetition_penalty);
    else if (o->repetition_window > 256)
        snprintf(err, errlen, "--repetition-window wants 0..256, got %lld", (long long)o->repetition_window);
    else if (o->n_stop > STOP_MAX)
        snprintf(err, errlen, "at most %d stop strings, got %zu", STOP_MAX, o->n_stop);
    else {
        for (size_t i = 0; i < o->n_stop; i++) {
            size_t n = strlen(o->stop[i]);
            if (n < 1 || n > STOP_MAX_LEN) {
                snprintf(err, errlen, "a stop string is 1..%d bytes, got %zu ('%s')", STOP_MAX_LEN, n, o->stop[i]);
                return -EINVAL;
            }
        }
        return 0;
    }
    return -EINVAL;
}

int ctl_write_atomic(const char *path, const void *data, size_t n, char *err, size_t errlen)
{
    /* Write beside the target and rename, so FILE is never half-written. */
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid()) >= (int)sizeof tmp) {
        snprintf(err, errlen, "path too long: %s", path);
        return -ENAMETOOLONG;
    }
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        int e = errno;
        snprintf(err, errlen, "cannot create %s: %s", tmp, strerror(e));
        return -e;
    }
    int ok = fwrite(data, 1, n, f) == n;
    ok = (fflush(f) == 0) && ok && fsync(fileno(f)) == 0;
    int e = errno;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
        if (ok) e = errno;
        snprintf(err, errlen, "cannot write %s: %s", path, strerror(e));
        unlink(tmp);
        return -(e ? e : EIO);
    }
    return 0;
}

int ctl_check_writable(const char *path, char *err, size_t errlen)
{
    /* Create the file if it is not there (removed again), else open it for
     * writing without touching its contents. */
    int existed = access(path, F_OK) == 0;
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        int e = errno;
        snprintf(err, errlen, "cannot write %s: %s", path, strerror(e));
        return -e;
    }
    close(fd);
    if (!existed) unlink(path);
    return 0;
}

int ctl_read_file(const char *path, uint8_t **out, size_t *len)
{
    int fd = strcmp(path, "-") ? open(path, O_RDONLY | O_CLOEXEC) : 0;
    if (fd < 0) return -errno;
    bytebuf b = {0};
    int rc = 0;
    for (;;) {
        if (bytebuf_reserve(&b, 1 << 16)) { rc = -ENOMEM; break; }
        ssize_t got = read(fd, b.p + b.n, b.cap - 1 - b.n);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) { rc = -errno; break; }
        if (got == 0) break;
        b.n += (size_t)got;
        b.p[b.n] = 0;
    }
    if (fd) close(fd);
    if (rc) { bytebuf_free(&b); return rc; }
    *out = (uint8_t *)b.p;
    *len = b.n;
    return 0;
}

int ctl_is_terminal(const char *path)
{
    int fd = open(path, O_WRONLY | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return 0;
    int t = isatty(fd);
    close(fd);
    return t;
}

uint64_t ctl_random_seed(void)
{
    uint64_t s = 0;
    if (getrandom(&s, sizeof s, 0) != (ssize_t)sizeof s) {   /* no entropy source: time and pid */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        s = ((uint64_t)ts.tv_sec * 1000000007u) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 32);
    }
    return s >> 1;   /* fits a JSON integer and msgpack's positive fixint range tools expect */
}

int ctl_session_is_new(lindc *c, const char *name)
{
    lindc_req r;
    lindc_event ev;
    lindc_req_init(&r, "info");
    lindc_req_str(&r, "session", name);
    int rc;
    do rc = lindc_call(c, &r, &ev, -1);
    while (rc == -EINTR && !ctl_interrupted);
    lindc_req_free(&r);
    if (rc == LINDC_ESERVER) return !strcmp(ev.code, "not_found");
    return rc == 0 ? 0 : rc;
}

void ctl_progress_line(const lindc_event *ev, int *shown)
{
    if (!ev) {
        if (*shown) fputs("\r\033[K", stderr);
        *shown = 0;
        return;
    }
    uint64_t fed = 0, total = 0;
    lindc_get_u64(ev->map, "fed", &fed);
    lindc_get_u64(ev->map, "total", &total);
    fprintf(stderr, "\r\033[K[feeding the text: %llu of %llu tokens, %.0f%%]",
            (unsigned long long)fed, (unsigned long long)total, total ? 100.0 * (double)fed / (double)total : 0.0);
    fflush(stderr);
    *shown = 1;
}
