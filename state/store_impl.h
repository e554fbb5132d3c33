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
    const char *name;   /* "sqlite" */
    void (*close)(store *s);
    /* Insert or replace n records in one atomic commit. */
    int (*save)(store *s, const store_record *recs, int n, char *err, size_t errlen);
    /* Insert one record; -EEXIST if the name is taken. */
    int (*create)(store *s, const store_record *rec, char *err, size_t errlen);
    int (*load)(store *s, const char *name, store_loaded *out, char *err, size_t errlen);
    int (*list)(store *s, store_info **out, size_t *n, char *err, size_t errlen);
    int (*count)(store *s, size_t *n, char *err, size_t errlen);
    int (*del)(store *s, const char *name, char *err, size_t errlen);
    /* Copy src to dst atomically; -ENOENT / -EEXIST. */
    int (*fork)(store *s, const char *src, const char *dst, char *err, size_t errlen);
} store_ops;

struct store {
    const store_ops *ops;
};

/* SQLite implementation (state/store_sqlite.c). */
int store_sqlite_open(const char *path, const store_options *opt, store **out,
                      char *err, size_t errlen);

#endif
