/* state/store_impl.h — what a store implementation provides (internal to
 * state/; callers use state/store.h only).
 *
 * store.c checks names and arguments, then dispatches through the ops table
 * of the handle; an implementation embeds `struct store` as the first member
 * of its own handle struct and fills `ops`. Export/import are written once in
 * store.c on top of load and create, so every implementation shares one
 * export format. Arguments reaching an op are already checked: names are
 * valid, n >= 1, pointers non-NULL. Each op returns 0 or a negative code
 * (the codes of store.h) and fills err (never NULL, errlen > 0). */
#ifndef LIND_STATE_STORE_IMPL_H
#define LIND_STATE_STORE_IMPL_H

#include "state/store.h"

typedef struct store_ops {
    const char *name;   /* "sqlite", "postgresql" */
    void (*close)(store *s);
    const char *(*where)(const store *s);   /* store_where's description */
    /* Insert or replace n records in one commit, record i only if its row is
     * at expect[i] (STORE_VERSION_NEW / _ANY; never NULL here) and, with an
     * owner, only under owner's unexpired lease. Returns 0 when the
     * transaction committed, with res[i] saying which records were written
     * (rc 0, the new version) and which refused (-ECANCELED / -ENOLCK, the
     * row's current version); store.c reports those. A negative return is
     * a failure of the whole group: nothing written (res is then ignored).
     * origin[i] is what a row the save creates records (never NULL here). */
    int (*save)(store *s, const store_record *recs, const uint64_t *expect, const int *origin,
                int n, const char *owner, store_save_result *res, char *err, size_t errlen,
                const store_turn_record *turns,    /* NULL, or n: the results to record */
                const char *const *keep_as);       /* NULL, or n: the copies (store_save_keep) */
    /* Insert one record; -EEXIST if the name is taken. */
    int (*create)(store *s, const store_record *rec, char *err, size_t errlen);
    int (*load)(store *s, const char *name, store_loaded *out, char *err, size_t errlen);
    int (*list)(store *s, store_info **out, size_t *n, char *err, size_t errlen);
    int (*count)(store *s, size_t *n, char *err, size_t errlen);
    int (*del)(store *s, const char *name, char *err, size_t errlen);
    /* Copy src to dst atomically; -ENOENT / -EEXIST. */
    int (*fork)(store *s, const char *src, const char *dst, char *err, size_t errlen);
    /* Leases: store.h's contract; names, owner and ttl_ms > 0 checked, out
     * never NULL. */
    int (*lease_acquire)(store *s, const char *name, const char *owner, int64_t ttl_ms,
                         store_lease *out, char *err, size_t errlen);
    int (*lease_renew)(store *s, const char *name, const char *owner, int64_t ttl_ms,
                       store_lease *out, char *err, size_t errlen);
    int (*lease_release)(store *s, const char *name, const char *owner, char *err, size_t errlen);
    /* store_lease_renew_many: n >= 1, names and owner checked, lost never
     * NULL (zeroed), held may be NULL. */
    int (*lease_renew_many)(store *s, const char *const *names, size_t n, const char *owner,
                            int64_t ttl_ms, uint8_t *lost, store_lease *held, char *err,
                            size_t errlen);
    /* store_lease_acquire_many: n >= 1, names and owner checked, rcs and
     * out never NULL; NULL: store.c takes them one at a time. */
    int (*lease_acquire_many)(store *s, const char *const *names, size_t n, const char *owner,
                              int64_t ttl_ms, int *rcs, store_lease *out, char *err, size_t errlen);
    /* Node identity (store.h); NULL: nothing to do (SQLite). */
    int (*node_claim)(store *s, const char *node, const char *instance, int64_t ttl_ms,
                      store_node *holder, char *err, size_t errlen);
    int (*node_beat)(store *s, const char *node, const char *instance, int64_t ttl_ms,
                     char *err, size_t errlen);
    int (*node_release)(store *s, const char *node, const char *instance, char *err, size_t errlen);
    /* store_turn_get (store.h); arguments checked, out/len/version non-NULL. */
    int (*turn_get)(store *s, const char *name, const char *request_id, uint8_t **out,
                    size_t *len, uint64_t *version, char *err, size_t errlen);
    /* Retention (store.h): count and bytes; delete up to limit sessions in
     * one statement, oldest save first, adding to *n and *freed: those past
     * their ttl (expire: ttl 0 = rule off), the ephemeral ones until
     * `excess` bytes went (evict), those under a prefix and older than
     * older_ms (remove; prefix may be ""). Leased sessions are skipped,
     * but for expire and evict not ephemeral ones that `owner` (may be
     * NULL) leases. */
    int (*usage)(store *s, size_t *n, uint64_t *bytes, char *err, size_t errlen);
    int (*expire)(store *s, int64_t resp_ttl_ms, int64_t sess_ttl_ms, int limit,
                  const char *owner, uint64_t *n, uint64_t *freed, char *err, size_t errlen);
    int (*evict)(store *s, uint64_t excess, int limit, const char *owner, uint64_t *n,
                 uint64_t *freed, char *err, size_t errlen);
    int (*remove)(store *s, const char *prefix, int64_t older_ms, int limit, uint64_t *n,
                  uint64_t *freed, char *err, size_t errlen);
    /* store_shrink; NULL: nothing to do. */
    int (*shrink)(store *s, char *err, size_t errlen);
    /* reconnects and retries into out (NULL: zeros). */
    void (*counters)(const store *s, store_counters *out);
} store_ops;

struct store {
    const store_ops *ops;
    uint64_t err_io, err_busy, err_other;   /* store.c: calls that failed (store_counters) */
};

/* SQLite implementation (state/store_sqlite.c). */
int store_sqlite_open(const char *path, const store_options *opt, store **out,
                      char *err, size_t errlen);
/* PostgreSQL implementation (state/store_pg.c); uri is a libpq URI. */
int store_pg_open(const char *uri, const store_options *opt, store **out,
                  char *err, size_t errlen);

#endif
