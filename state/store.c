/* state/store.c — the store interface: argument and name checks, dispatch to
 * the implementation through its ops table (state/store_impl.h), and the
 * export format, written once for every implementation.
 *
 * Export format (version 1, integers little-endian):
 *   magic "LINDEX\0\1" | u32 version | u32 name length | name bytes |
 *   u64 tokens | u64 state length | state blob | u64 transcript length |
 *   transcript bytes | u64 xxh64 of everything before it */
#include "state/store.h"
#include "state/store_impl.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>
#include "recurrent/errmsg.h"
#include "state/le.h"

static const uint8_t export_magic[8] = { 'L', 'I', 'N', 'D', 'E', 'X', 0, 1 };

store_options store_defaults(void)
{
    store_options o = { .sync = STORE_SYNC_FULL, .busy_timeout_ms = 5000,
                        .statement_timeout_ms = 30000, .idle_tx_timeout_ms = 10000,
                        .reconnect_ms = 10000 };
    return o;
}

/* Strict UTF-8 (RFC 3629): no overlong forms, no surrogates, nothing above
 * U+10FFFF; and no C0/C1 control characters or DEL. */
int store_name_check(const char *name, char *err, size_t errlen)
{
    if (!name)
        return errmsg_set(-EINVAL, err, errlen, "session name is missing");
    size_t len = strnlen(name, STORE_NAME_MAX + 1);
    if (len == 0)
        return errmsg_set(-EINVAL, err, errlen, "session name is empty");
    if (len > STORE_NAME_MAX)
        return errmsg_set(-EINVAL, err, errlen, "session name is %zu bytes long; at most %d are allowed",
                    strlen(name), STORE_NAME_MAX);
    const uint8_t *s = (const uint8_t *)name;
    for (size_t i = 0; i < len;) {
        uint8_t b = s[i];
        uint32_t cp;
        size_t n;
        if (b < 0x80) { cp = b; n = 1; }
        else if (b >= 0xC2 && b <= 0xDF) { cp = b & 0x1F; n = 2; }
        else if (b >= 0xE0 && b <= 0xEF) { cp = b & 0x0F; n = 3; }
        else if (b >= 0xF0 && b <= 0xF4) { cp = b & 0x07; n = 4; }
        else if (b == 0xC0 || b == 0xC1)
            return errmsg_set(-EINVAL, err, errlen,
                        "session name is not valid UTF-8: overlong encoding at byte %zu", i);
        else if (b >= 0x80 && b <= 0xBF)
            return errmsg_set(-EINVAL, err, errlen,
                        "session name is not valid UTF-8: unexpected continuation byte 0x%02X at byte %zu",
                        b, i);
        else
            return errmsg_set(-EINVAL, err, errlen,
                        "session name is not valid UTF-8: invalid byte 0x%02X at byte %zu", b, i);
        if (i + n > len)
            return errmsg_set(-EINVAL, err, errlen,
                        "session name is not valid UTF-8: character at byte %zu is cut short", i);
        for (size_t k = 1; k < n; k++) {
            if ((s[i + k] & 0xC0) != 0x80)
                return errmsg_set(-EINVAL, err, errlen,
                            "session name is not valid UTF-8: character at byte %zu is cut short", i);
            cp = cp << 6 | (s[i + k] & 0x3F);
        }
        if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000))
            return errmsg_set(-EINVAL, err, errlen,
                        "session name is not valid UTF-8: overlong encoding at byte %zu", i);
        if (cp >= 0xD800 && cp <= 0xDFFF)
            return errmsg_set(-EINVAL, err, errlen,
                        "session name is not valid UTF-8: surrogate U+%04X at byte %zu", cp, i);
        if (cp > 0x10FFFF)
            return errmsg_set(-EINVAL, err, errlen,
                        "session name is not valid UTF-8: code point above U+10FFFF at byte %zu", i);
        if (cp < 0x20 || (cp >= 0x7F && cp <= 0x9F))
            return errmsg_set(-EINVAL, err, errlen,
                        "session name contains control character U+%04X at byte %zu", cp, i);
        i += n;
    }
    return 0;
}

/* `err` may be NULL: the ops always get a buffer. */
#define ERRBUF(err, errlen) \
    char local_err_[256]; \
    if (!(err) || !(errlen)) { (err) = local_err_; (errlen) = sizeof local_err_; } \
    (err)[0] = 0

int store_open(const char *path, const store_options *opt, store **out,
               char *err, size_t errlen)
{
    ERRBUF(err, errlen);
    if (!out)
        return errmsg_set(-EINVAL, err, errlen, "store_open: no output handle");
    *out = NULL;
    if (!path || !*path)
        return errmsg_set(-EINVAL, err, errlen, "store path is empty");
    store_options o = opt ? *opt : store_defaults();
    if (o.sync != STORE_SYNC_FULL && o.sync != STORE_SYNC_NORMAL)
        return errmsg_set(-EINVAL, err, errlen, "store durability must be full or normal");
    if (o.busy_timeout_ms < 0)
        return errmsg_set(-EINVAL, err, errlen, "store busy timeout %d ms is negative",
                    o.busy_timeout_ms);
    if (o.statement_timeout_ms < 0 || o.idle_tx_timeout_ms < 0 || o.reconnect_ms < 0)
        return errmsg_set(-EINVAL, err, errlen, "store %s %d ms is negative",
                          o.statement_timeout_ms < 0 ? "statement timeout"
                          : o.idle_tx_timeout_ms < 0 ? "idle-in-transaction timeout"
                          : "reconnect time",
                          o.statement_timeout_ms < 0 ? o.statement_timeout_ms
                          : o.idle_tx_timeout_ms < 0 ? o.idle_tx_timeout_ms : o.reconnect_ms);
    /* A libpq URI picks PostgreSQL; anything else is an SQLite file. */
    if (strncmp(path, "postgres://", 11) == 0 || strncmp(path, "postgresql://", 13) == 0)
        return store_pg_open(path, &o, out, err, errlen);
    if (strncmp(path, "sqlite:", 7) == 0)
        path += 7;
    return store_sqlite_open(path, &o, out, err, errlen);
}

const char *store_where(const store *s)
{
    return s ? s->ops->where(s) : "(no store)";
}

void store_close(store *s)
{
    if (s)
        s->ops->close(s);
}

static int check_record(const store_record *r, int i, char *err, size_t errlen)
{
    char why[200];
    int rc = store_name_check(r->name, why, sizeof why);
    if (rc < 0)
        return errmsg_set(rc, err, errlen, "record %d: %s", i, why);
    if ((r->state_len && !r->state) || (r->transcript_len && !r->transcript))
        return errmsg_set(-EINVAL, err, errlen, "record %d (%s): missing buffer", i, r->name);
    if (r->tokens > INT64_MAX)
        return errmsg_set(-EINVAL, err, errlen, "record %d (%s): token count too large", i, r->name);
    return 0;
}

/* ---- turn results ---------------------------------------------------------- */

int store_request_id_check(const char *id, char *err, size_t errlen)
{
    ERRBUF(err, errlen);
    if (!id || !id[0] || strlen(id) > STORE_REQUEST_ID_MAX)
        return errmsg_set(-EINVAL, err, errlen, "request id must be 1..%d bytes",
                          STORE_REQUEST_ID_MAX);
    char why[200];
    if (store_name_check(id, why, sizeof why) < 0)
        return errmsg_set(-EINVAL, err, errlen, "request id must be UTF-8 without control characters");
    return 0;
}

/* rc, an implementation's answer to a call: a failure is counted by code
 * (store_counters); answers are not failures. */
static int counted(store *s, int rc)
{
    switch (rc) {
    case -ENOENT: case -EEXIST: case -ECANCELED: case -ENOLCK: case -EAGAIN: case -EADDRINUSE:
        return rc;
    case -EIO:   s->err_io++;   return rc;
    case -EBUSY: s->err_busy++; return rc;
    default:     if (rc < 0) s->err_other++;
                 return rc;
    }
}

int store_turn_get(store *s, const char *name, const char *request_id, uint8_t **out,
                   size_t *len, uint64_t *version, char *err, size_t errlen)
{
    ERRBUF(err, errlen);
    if (!s || !out || !len || !version)
        return errmsg_set(-EINVAL, err, errlen, "store_turn_get: missing argument");
    *out = NULL;
    *len = 0;
    *version = 0;
    int rc = store_name_check(name, err, errlen);
    if (rc == 0)
        rc = store_request_id_check(request_id, err, errlen);
    if (rc < 0)
        return rc;
    return counted(s, s->ops->turn_get(s, name, request_id, out, len, version, err, errlen));
}

/* Group sizes are bounded so the per-record scratch of store_save fits the
 * stack in small groups and the heap otherwise. */
int store_save(store *s, const store_record *recs, int n, char *err, size_t errlen)
{
    ERRBUF(err, errlen);
    if (!s || !recs || n < 1)
        return errmsg_set(-EINVAL, err, errlen, "store_save: need a store and at least one record");
    store_save_result local[16], *res = local;
    if (n > 16 && !(res = malloc((size_t)n * sizeof *res)))
        return errmsg_set(-ENOMEM, err, errlen, "store_save: out of memory");
    int rc = store_save_versioned(s, recs, NULL, n, NULL, res, err, errlen);
    if (res != local)
        free(res);
    return rc;
}

int store_save_versioned(store *s, const store_record *recs, const uint64_t *expect, int n,
                         const char *lease_owner, store_save_result *res, char *err,
                         size_t errlen)
{
    return store_save_turns(s, recs, NULL, expect, NULL, n, lease_owner, res, err, errlen);
}

int store_save_turns(store *s, const store_record *recs, const store_turn_record *turns,
                     const uint64_t *expect, const int *origin, int n, const char *lease_owner,
                     store_save_result *res, char *err, size_t errlen)
{
    return store_save_keep(s, recs, turns, NULL, expect, origin, n, lease_owner, res, err, errlen);
}

int store_save_keep(store *s, const store_record *recs, const store_turn_record *turns,
                    const char *const *keep_as, const uint64_t *expect, const int *origin, int n,
                    const char *lease_owner, store_save_result *res, char *err, size_t errlen)
{
    ERRBUF(err, errlen);
    if (!s || !recs || !res || n < 1)
        return errmsg_set(-EINVAL, err, errlen,
                          "store_save: need a store, at least one record and a result per record");
    int rc = 0;
    char why[200];
    if (lease_owner && store_name_check(lease_owner, why, sizeof why) < 0)
        rc = errmsg_set(-EINVAL, err, errlen, "lease owner: %s", why);
    for (int i = 0; rc == 0 && i < n; i++) {
        rc = check_record(&recs[i], i, err, errlen);
        if (rc == 0 && turns && turns[i].request_id) {
            char why2[200];
            if ((rc = store_request_id_check(turns[i].request_id, why2, sizeof why2)) < 0)
                errmsg_set(rc, err, errlen, "record %d (%s): %s", i, recs[i].name, why2);
            else if (!turns[i].result || turns[i].result_len >= (1u << 30))
                rc = errmsg_set(-EINVAL, err, errlen, "record %d (%s): a request id needs a result "
                                "under 1 GiB", i, recs[i].name);
        }
        if (rc == 0 && keep_as && keep_as[i]) {
            char why2[200];
            if ((rc = store_name_check(keep_as[i], why2, sizeof why2)) < 0)
                errmsg_set(rc, err, errlen, "record %d (%s): its copy's name: %s", i, recs[i].name, why2);
            else if (!strcmp(keep_as[i], recs[i].name))
                rc = errmsg_set(-EINVAL, err, errlen, "record %d (%s): a copy under its own name",
                                i, recs[i].name);
        }
        /* Two versioned records of one group naming one session would swap
         * against each other's version: refused like a bad record. */
        for (int k = 0; rc == 0 && expect && k < i; k++)
            if (strcmp(recs[k].name, recs[i].name) == 0)
                rc = errmsg_set(-EINVAL, err, errlen, "records %d and %d both save '%s'", k, i,
                                recs[i].name);
    }
    if (rc < 0) {
        for (int k = 0; k < n; k++)
            res[k] = (store_save_result){ .rc = rc };
        return rc;
    }
    uint64_t local[16], *ex = (uint64_t *)expect;
    if (!expect) {
        ex = n <= 16 ? local : malloc((size_t)n * sizeof *ex);
        if (!ex)
            return errmsg_set(-ENOMEM, err, errlen, "store_save: out of memory");
        for (int i = 0; i < n; i++)
            ex[i] = STORE_VERSION_ANY;
    }
    int olocal[16], *org = (int *)origin;
    if (!origin) {
        org = n <= 16 ? olocal : calloc((size_t)n, sizeof *org);
        if (!org) {
            if (ex != expect && ex != local)
                free(ex);
            return errmsg_set(-ENOMEM, err, errlen, "store_save: out of memory");
        }
        for (int i = 0; i < n; i++)
            org[i] = STORE_ORIGIN_SOCKET;
    }
    rc = counted(s, s->ops->save(s, recs, ex, org, n, lease_owner, res, err, errlen, turns, keep_as));
    if (org != origin && org != olocal)
        free(org);
    int failed = 0, first = -1;
    for (int i = 0; rc == 0 && i < n; i++)
        if (res[i].rc < 0 && failed++ == 0)
            first = i;
    if (rc < 0) {
        for (int i = 0; i < n; i++)
            res[i] = (store_save_result){ .rc = rc };
    } else if (failed) {
        rc = res[first].rc;
        char want[40], have[40];
        if (ex[first] == STORE_VERSION_NEW)
            snprintf(want, sizeof want, "no session");
        else
            snprintf(want, sizeof want, "version %llu", (unsigned long long)ex[first]);
        if (res[first].version)
            snprintf(have, sizeof have, "version %llu", (unsigned long long)res[first].version);
        else
            snprintf(have, sizeof have, "no session");
        if (rc == -ENOLCK)
            errmsg_set(rc, err, errlen,
                       "session '%s': '%s' does not hold its lease (expired, released or taken"
                       " over); not saved (%d of %d records refused, the others saved)",
                       recs[first].name, lease_owner, failed, n);
        else
            errmsg_set(rc, err, errlen,
                       "session '%s' changed since it was loaded: the save expected %s, the store"
                       " has %s; not saved (%d of %d records refused, the others saved)",
                       recs[first].name, want, have, failed, n);
    }
    if (ex != expect && ex != local)
        free(ex);
    return rc;
}

int store_load(store *s, const char *name, store_loaded *out, char *err, size_t errlen)
{
    ERRBUF(err, errlen);
    if (!s || !out)
        return errmsg_set(-EINVAL, err, errlen, "store_load: missing argument");
    memset(out, 0, sizeof *out);
    int rc = store_name_check(name, err, errlen);
    if (rc < 0)
        return rc;
    return counted(s, s->ops->load(s, name, out, err, errlen));
}

void store_loaded_free(store_loaded *l)
{
    if (!l)
        return;
    free(l->state);
    free(l->transcript);
    memset(l, 0, sizeof *l);
}

int store_list(store *s, store_info **out, size_t *n, char *err, size_t errlen)
{
    ERRBUF(err, errlen);
    if (!s || !out || !n)
        return errmsg_set(-EINVAL, err, errlen, "store_list: missing argument");
    *out = NULL;
    *n = 0;
    return counted(s, s->ops->list(s, out, n, err, errlen));
}

int store_count(store *s, size_t *n, char *err, size_t errlen)
{
    ERRBUF(err, errlen);
    if (!s || !n)
        return errmsg_set(-EINVAL, err, errlen, "store_count: missing argument");
    return counted(s, s->ops->count(s, n, err, errlen));
}

const char *store_origin_name(int origin)
{
    switch (origin) {
    case STORE_ORIGIN_SOCKET:   return "socket";
    case STORE_ORIGIN_HTTP:     return "http";
    case STORE_ORIGIN_RESPONSE: return "response";
    case STORE_ORIGIN_CHAT:     return "chat";
    default:                    return "unknown";
    }
}

int store_origin_for(const char *name, int fallback)
{
    if (!strncmp(name, "resp-", 5)) return STORE_ORIGIN_RESPONSE;
    if (!strncmp(name, "chat-", 5)) return STORE_ORIGIN_CHAT;
    return fallback;
}

int store_usage(store *s, size_t *sessions, uint64_t *bytes, char *err, size_t errlen)
{
    ERRBUF(err, errlen);
    if (!s || !sessions || !bytes)
        return errmsg_set(-EINVAL, err, errlen, "store_usage: missing argument");
    return counted(s, s->ops->usage(s, sessions, bytes, err, errlen));
}

int store_gc(store *s, const store_gc_policy *p, store_gc_result *out, char *err, size_t errlen)
{
    ERRBUF(err, errlen);
    if (!s || !p || !out || p->batch < 1 || p->response_ttl_ms < 0 || p->session_ttl_ms < 0)
        return errmsg_set(-EINVAL, err, errlen, "store_gc: missing or invalid argument");
    char why[200];
    if (p->owner && store_name_check(p->owner, why, sizeof why) < 0)
        return errmsg_set(-EINVAL, err, errlen, "store_gc: owner: %s", why);
    memset(out, 0, sizeof *out);
    int rc = 0;
    if (p->response_ttl_ms || p->session_ttl_ms)
        rc = s->ops->expire(s, p->response_ttl_ms, p->session_ttl_ms, p->batch, p->owner,
                            &out->expired, &out->freed, err, errlen);
    if (rc == 0)
        rc = s->ops->usage(s, &out->sessions, &out->bytes, err, errlen);
    int left = p->batch - (int)out->expired;
    if (rc == 0 && p->max_bytes && out->bytes > p->max_bytes && left > 0) {
        uint64_t freed = 0;
        rc = s->ops->evict(s, out->bytes - p->max_bytes, left, p->owner, &out->evicted, &freed,
                           err, errlen);
        out->freed += freed;
        if (rc == 0)
            rc = s->ops->usage(s, &out->sessions, &out->bytes, err, errlen);
    }
    out->more = out->expired + out->evicted >= (uint64_t)p->batch;
    return counted(s, rc);
}

int store_shrink(store *s, char *err, size_t errlen)
{
    ERRBUF(err, errlen);
    if (!s)
        return errmsg_set(-EINVAL, err, errlen, "store_shrink: no store");
    return s->ops->shrink ? counted(s, s->ops->shrink(s, err, errlen)) : 0;
}

int store_remove_matching(store *s, const char *prefix, int64_t older_than_ms, int batch,
                          uint64_t *deleted, uint64_t *freed, char *err, size_t errlen)
{
    ERRBUF(err, errlen);
    if (!s || !prefix || !deleted || !freed || batch < 1 || older_than_ms < 0)
        return errmsg_set(-EINVAL, err, errlen, "store_remove_matching: missing or invalid argument");
    if (strlen(prefix) > STORE_NAME_MAX)
        return errmsg_set(-EINVAL, err, errlen, "prefix longer than a session name");
    *deleted = *freed = 0;
    return counted(s, s->ops->remove(s, prefix, older_than_ms, batch, deleted, freed, err, errlen));
}

int store_delete(store *s, const char *name, char *err, size_t errlen)
{
    ERRBUF(err, errlen);
    if (!s)
        return errmsg_set(-EINVAL, err, errlen, "store_delete: no store");
    int rc = store_name_check(name, err, errlen);
    if (rc < 0)
        return rc;
    return counted(s, s->ops->del(s, name, err, errlen));
}

int store_fork(store *s, const char *src, const char *dst, char *err, size_t errlen)
{
    ERRBUF(err, errlen);
    if (!s)
        return errmsg_set(-EINVAL, err, errlen, "store_fork: no store");
    char why[200];
    int rc = store_name_check(src, why, sizeof why);
    if (rc < 0)
        return errmsg_set(rc, err, errlen, "fork source: %s", why);
    rc = store_name_check(dst, why, sizeof why);
    if (rc < 0)
        return errmsg_set(rc, err, errlen, "fork target: %s", why);
    if (strcmp(src, dst) == 0)
        return errmsg_set(-EEXIST, err, errlen, "cannot fork session '%s' onto itself", src);
    return counted(s, s->ops->fork(s, src, dst, err, errlen));
}

/* ---- leases ------------------------------------------------------------- */

static int check_lease_args(const char *name, const char *owner, int64_t ttl_ms, int need_ttl,
                            char *err, size_t errlen)
{
    char why[200];
    int rc = store_name_check(name, why, sizeof why);
    if (rc < 0)
        return errmsg_set(rc, err, errlen, "lease: %s", why);
    if (store_name_check(owner, why, sizeof why) < 0)
        return errmsg_set(-EINVAL, err, errlen, "lease owner: %s", why);
    if (need_ttl && ttl_ms <= 0)
        return errmsg_set(-EINVAL, err, errlen, "lease of '%s': ttl %lld ms must be positive", name,
                          (long long)ttl_ms);
    return 0;
}

int store_lease_acquire(store *s, const char *name, const char *owner, int64_t ttl_ms,
                        store_lease *out, char *err, size_t errlen)
{
    ERRBUF(err, errlen);
    store_lease scratch;
    if (!out)
        out = &scratch;
    memset(out, 0, sizeof *out);
    if (!s)
        return errmsg_set(-EINVAL, err, errlen, "store_lease_acquire: no store");
    int rc = check_lease_args(name, owner, ttl_ms, 1, err, errlen);
    return rc < 0 ? rc : counted(s, s->ops->lease_acquire(s, name, owner, ttl_ms, out, err, errlen));
}

int store_lease_acquire_many(store *s, const char *const *names, size_t n, const char *owner,
                             int64_t ttl_ms, int *rcs, store_lease *out, char *err, size_t errlen)
{
    ERRBUF(err, errlen);
    if (!s)
        return errmsg_set(-EINVAL, err, errlen, "store_lease_acquire_many: no store");
    if (n == 0)
        return 0;
    if (!names || !rcs)
        return errmsg_set(-EINVAL, err, errlen, "store_lease_acquire_many: no %s",
                          !names ? "names" : "result array");
    int rc = check_lease_args(names[0], owner, ttl_ms, 1, err, errlen);
    for (size_t i = 1; rc == 0 && i < n; i++) {
        char why[200];
        if ((rc = store_name_check(names[i], why, sizeof why)) < 0)
            return errmsg_set(rc, err, errlen, "lease %zu of %zu: %s", i + 1, n, why);
    }
    if (rc < 0)
        return rc;
    store_lease scratch;
    if (s->ops->lease_acquire_many) {
        store_lease *cur = out ? out : malloc(n * sizeof *cur);
        if (!cur)
            return errmsg_set(-ENOMEM, err, errlen, "store_lease_acquire_many: out of memory");
        memset(cur, 0, n * sizeof *cur);
        rc = counted(s, s->ops->lease_acquire_many(s, names, n, owner, ttl_ms, rcs, cur, err, errlen));
        if (cur != out)
            free(cur);
        return rc;
    }
    for (size_t i = 0; i < n; i++) {
        store_lease *cur = out ? &out[i] : &scratch;
        memset(cur, 0, sizeof *cur);
        rc = counted(s, s->ops->lease_acquire(s, names[i], owner, ttl_ms, cur, err, errlen));
        if (rc < 0 && rc != -EAGAIN)
            return rc;
        rcs[i] = rc;
    }
    err[0] = 0;   /* an -EAGAIN's message is rcs[i]'s, not the call's */
    return 0;
}

int store_lease_renew(store *s, const char *name, const char *owner, int64_t ttl_ms,
                      store_lease *out, char *err, size_t errlen)
{
    ERRBUF(err, errlen);
    store_lease scratch;
    if (!out)
        out = &scratch;
    memset(out, 0, sizeof *out);
    if (!s)
        return errmsg_set(-EINVAL, err, errlen, "store_lease_renew: no store");
    int rc = check_lease_args(name, owner, ttl_ms, 1, err, errlen);
    return rc < 0 ? rc : counted(s, s->ops->lease_renew(s, name, owner, ttl_ms, out, err, errlen));
}

int store_lease_renew_many(store *s, const char *const *names, size_t n, const char *owner,
                           int64_t ttl_ms, uint8_t *lost, store_lease *held, char *err,
                           size_t errlen)
{
    ERRBUF(err, errlen);
    if (!s)
        return errmsg_set(-EINVAL, err, errlen, "store_lease_renew_many: no store");
    if (n == 0)
        return 0;
    if (!names || !lost)
        return errmsg_set(-EINVAL, err, errlen, "store_lease_renew_many: no %s",
                          !names ? "names" : "lost array");
    memset(lost, 0, n);
    int rc = check_lease_args(names[0], owner, ttl_ms, 1, err, errlen);
    for (size_t i = 1; rc == 0 && i < n; i++) {
        char why[200];
        if ((rc = store_name_check(names[i], why, sizeof why)) < 0)
            return errmsg_set(rc, err, errlen, "lease %zu of %zu: %s", i + 1, n, why);
    }
    if (rc < 0)
        return rc;
    return counted(s, s->ops->lease_renew_many(s, names, n, owner, ttl_ms, lost, held, err, errlen));
}

int store_lease_release(store *s, const char *name, const char *owner, char *err, size_t errlen)
{
    ERRBUF(err, errlen);
    if (!s)
        return errmsg_set(-EINVAL, err, errlen, "store_lease_release: no store");
    int rc = check_lease_args(name, owner, 0, 0, err, errlen);
    return rc < 0 ? rc : counted(s, s->ops->lease_release(s, name, owner, err, errlen));
}

/* ---- node identity ------------------------------------------------------ */

static int check_node_args(const char *node, const char *instance, int64_t ttl_ms, int need_ttl,
                           char *err, size_t errlen)
{
    char why[200];
    if (store_name_check(node, why, sizeof why) < 0)
        return errmsg_set(-EINVAL, err, errlen, "node id: %s", why);
    if (store_name_check(instance, why, sizeof why) < 0)
        return errmsg_set(-EINVAL, err, errlen, "node instance: %s", why);
    if (need_ttl && ttl_ms <= 0)
        return errmsg_set(-EINVAL, err, errlen, "node claim of %lld ms: must be positive",
                          (long long)ttl_ms);
    return 0;
}

int store_node_claim(store *s, const char *node, const char *instance, int64_t ttl_ms,
                     store_node *holder, char *err, size_t errlen)
{
    ERRBUF(err, errlen);
    store_node h;
    memset(&h, 0, sizeof h);
    if (!s)
        return errmsg_set(-EINVAL, err, errlen, "store_node_claim: no store");
    int rc = check_node_args(node, instance, ttl_ms, 1, err, errlen);
    if (rc == 0 && s->ops->node_claim)
        rc = counted(s, s->ops->node_claim(s, node, instance, ttl_ms, &h, err, errlen));
    if (holder)
        *holder = h;
    return rc;
}

int store_node_beat(store *s, const char *node, const char *instance, int64_t ttl_ms,
                    char *err, size_t errlen)
{
    ERRBUF(err, errlen);
    if (!s)
        return errmsg_set(-EINVAL, err, errlen, "store_node_beat: no store");
    int rc = check_node_args(node, instance, ttl_ms, 1, err, errlen);
    return rc < 0 || !s->ops->node_beat ? rc : counted(s, s->ops->node_beat(s, node, instance, ttl_ms, err, errlen));
}

int store_node_release(store *s, const char *node, const char *instance, char *err, size_t errlen)
{
    ERRBUF(err, errlen);
    if (!s)
        return errmsg_set(-EINVAL, err, errlen, "store_node_release: no store");
    int rc = check_node_args(node, instance, 0, 0, err, errlen);
    return rc < 0 || !s->ops->node_release ? rc : counted(s, s->ops->node_release(s, node, instance, err, errlen));
}

void store_get_counters(const store *s, store_counters *out)
{
    memset(out, 0, sizeof *out);
    if (!s)
        return;
    if (s->ops->counters)
        s->ops->counters(s, out);
    out->err_io = s->err_io;
    out->err_busy = s->err_busy;
    out->err_other = s->err_other;
}

/* ---- export format ------------------------------------------------------ */

int store_export_encode(const store_record *rec, uint8_t **out, size_t *len,
                        char *err, size_t errlen)
{
    ERRBUF(err, errlen);
    if (!rec || !out || !len)
        return errmsg_set(-EINVAL, err, errlen, "store_export_encode: missing argument");
    int rc = check_record(rec, 0, err, errlen);
    if (rc < 0)
        return rc;
    size_t nlen = strlen(rec->name);
    size_t total = 8 + 4 + 4 + nlen + 8 + 8 + rec->state_len + 8 + rec->transcript_len + 8;
    uint8_t *b = malloc(total);
    if (!b)
        return errmsg_set(-ENOMEM, err, errlen, "export of '%s': out of memory", rec->name);
    uint8_t *p = b;
    memcpy(p, export_magic, 8);             p += 8;
    le_put32(p, STORE_EXPORT_VERSION);       p += 4;
    le_put32(p, (uint32_t)nlen);             p += 4;
    memcpy(p, rec->name, nlen);             p += nlen;
    le_put64(p, rec->tokens);                p += 8;
    le_put64(p, rec->state_len);             p += 8;
    if (rec->state_len)
        memcpy(p, rec->state, rec->state_len);
    p += rec->state_len;
    le_put64(p, rec->transcript_len);        p += 8;
    if (rec->transcript_len)
        memcpy(p, rec->transcript, rec->transcript_len);
    p += rec->transcript_len;
    le_put64(p, XXH64(b, (size_t)(p - b), 0));
    *out = b;
    *len = total;
    return 0;
}

int store_export_decode(const uint8_t *data, size_t len, store_record *rec,
                        char name[STORE_NAME_MAX + 1], char *err, size_t errlen)
{
    ERRBUF(err, errlen);
    if (!rec || !name || (len && !data))
        return errmsg_set(-EINVAL, err, errlen, "store_export_decode: missing argument");
    memset(rec, 0, sizeof *rec);
    name[0] = 0;
    if (len == 0)
        return errmsg_set(-EBADMSG, err, errlen, "session export is empty");
    if (memcmp(data, export_magic, len < 8 ? len : 8) != 0)
        return errmsg_set(-EBADMSG, err, errlen, "not a lind session export (bad magic)");
    const size_t fixed = 8 + 4 + 4;
    if (len < fixed)
        return errmsg_set(-EBADMSG, err, errlen, "session export truncated: %zu bytes", len);
    uint32_t version = le_get32(data + 8);
    if (version == 0 || version > STORE_EXPORT_VERSION)
        return errmsg_set(-EBADMSG, err, errlen,
                    "session export has format version %u; this lind reads version %u%s",
                    version, STORE_EXPORT_VERSION,
                    version > STORE_EXPORT_VERSION ? " (written by a newer lind)" : "");
    /* Walk the declared sections; any that runs past the end is truncation. */
    size_t pos = fixed;
    uint32_t nlen = le_get32(data + 12);
    if (nlen > len - pos)
        return errmsg_set(-EBADMSG, err, errlen,
                    "session export truncated: name of %u bytes, %zu remain", nlen, len - pos);
    const uint8_t *np = data + pos;
    pos += nlen;
    if (len - pos < 16)
        return errmsg_set(-EBADMSG, err, errlen, "session export truncated after the name");
    uint64_t tokens = le_get64(data + pos);
    uint64_t slen = le_get64(data + pos + 8);
    pos += 16;
    if (slen > len - pos)
        return errmsg_set(-EBADMSG, err, errlen,
                    "session export truncated: state of %llu bytes, %zu remain",
                    (unsigned long long)slen, len - pos);
    const uint8_t *sp = data + pos;
    pos += (size_t)slen;
    if (len - pos < 8)
        return errmsg_set(-EBADMSG, err, errlen, "session export truncated after the state");
    uint64_t tlen = le_get64(data + pos);
    pos += 8;
    if (tlen > len - pos)
        return errmsg_set(-EBADMSG, err, errlen,
                    "session export truncated: transcript of %llu bytes, %zu remain",
                    (unsigned long long)tlen, len - pos);
    const uint8_t *tp = data + pos;
    pos += (size_t)tlen;
    if (len - pos < 8)
        return errmsg_set(-EBADMSG, err, errlen, "session export truncated: checksum missing");
    if (len - pos > 8)
        return errmsg_set(-EBADMSG, err, errlen,
                    "session export has %zu unexpected bytes after its checksum", len - pos - 8);
    if (XXH64(data, pos, 0) != le_get64(data + pos))
        return errmsg_set(-EBADMSG, err, errlen, "session export is damaged (checksum mismatch)");
    if (nlen > STORE_NAME_MAX)
        return errmsg_set(-EBADMSG, err, errlen, "session export names a session of %u bytes", nlen);
    memcpy(name, np, nlen);
    name[nlen] = 0;
    if (memchr(name, 0, nlen))
        return errmsg_set(-EBADMSG, err, errlen, "session export's name contains a NUL byte");
    char why[200];
    if (store_name_check(name, why, sizeof why) < 0)
        return errmsg_set(-EBADMSG, err, errlen, "session export's name is invalid: %s", why);
    if (tokens > INT64_MAX)
        return errmsg_set(-EBADMSG, err, errlen, "session export's token count is out of range");
    rec->name = name;
    rec->tokens = tokens;
    rec->state = sp;
    rec->state_len = (size_t)slen;
    rec->transcript = tp;
    rec->transcript_len = (size_t)tlen;
    return 0;
}

int store_export(store *s, const char *name, uint8_t **out, size_t *len,
                 char *err, size_t errlen)
{
    ERRBUF(err, errlen);
    if (!out || !len)
        return errmsg_set(-EINVAL, err, errlen, "store_export: missing argument");
    *out = NULL;
    *len = 0;
    store_loaded l;
    int rc = store_load(s, name, &l, err, errlen);
    if (rc < 0)
        return rc;
    store_record r = {
        .name = name, .state = l.state, .state_len = l.state_len,
        .transcript = l.transcript, .transcript_len = l.transcript_len,
        .tokens = l.tokens,
    };
    rc = store_export_encode(&r, out, len, err, errlen);
    store_loaded_free(&l);
    return rc;
}

int store_import(store *s, const char *name, const uint8_t *data, size_t len,
                 char *err, size_t errlen)
{
    ERRBUF(err, errlen);
    if (!s)
        return errmsg_set(-EINVAL, err, errlen, "store_import: no store");
    if (name) {
        int rc = store_name_check(name, err, errlen);
        if (rc < 0)
            return rc;
    }
    store_record r;
    char exported[STORE_NAME_MAX + 1];
    int rc = store_export_decode(data, len, &r, exported, err, errlen);
    if (rc < 0)
        return rc;
    if (name)
        r.name = name;
    return counted(s, s->ops->create(s, &r, err, errlen));
}
