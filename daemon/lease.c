/* daemon/lease.c — see lease.h. */
#include "daemon/lease.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int lease_store_shared(const char *db)
{
    return db && (!strncmp(db, "postgres://", 11) || !strncmp(db, "postgresql://", 13));
}

void lease_node_id(const char *given, int shared, char *out, size_t len)
{
    if (given) { snprintf(out, len, "%s", given); return; }
    if (!shared) { snprintf(out, len, "local"); return; }
    char host[256] = "";
    if (gethostname(host, sizeof host - 1) != 0 || !host[0]) snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = 0;
    snprintf(out, len, "%.100s:%ld", host, (long)getpid());
}

static size_t hash_name(const char *s)
{
    size_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

int lease_set_init(lease_set *ls, const char *owner, int64_t ttl_ms)
{
    memset(ls, 0, sizeof *ls);
    ls->nbuckets = 256;
    ls->buckets = calloc(ls->nbuckets, sizeof *ls->buckets);
    ls->owner = owner;
    ls->ttl_ms = ttl_ms;
    ls->chunk = LEASE_RENEW_CHUNK;
    return ls->buckets ? 0 : -ENOMEM;
}

void lease_set_free(lease_set *ls)
{
    for (size_t i = 0; ls->buckets && i < ls->nbuckets; i++)
        for (lease_ent *e = ls->buckets[i]; e; ) {
            lease_ent *n = e->next;
            free(e);
            e = n;
        }
    free(ls->buckets);
    memset(ls, 0, sizeof *ls);
}

static lease_ent **slot(const lease_set *ls, const char *name)
{
    lease_ent **pp = &ls->buckets[hash_name(name) % ls->nbuckets];
    while (*pp && strcmp((*pp)->name, name)) pp = &(*pp)->next;
    return pp;
}

/* Renew at a third of the ttl: two renewals may fail (a slow round trip, a
 * database restart) before the lease runs out. */
static uint64_t period_ns(const lease_set *ls)
{
    return (uint64_t)ls->ttl_ms * 1000000ull / 3;
}

int lease_set_add(lease_set *ls, const char *name, uint64_t now)
{
    lease_ent **pp = slot(ls, name);
    if (!*pp) {
        lease_ent *e = calloc(1, sizeof *e);
        if (!e) return -ENOMEM;
        snprintf(e->name, sizeof e->name, "%s", name);
        *pp = e;
        ls->count++;
        ls->taken++;
    }
    (*pp)->due_ns = now + period_ns(ls);
    return 0;
}

int lease_set_remove(lease_set *ls, const char *name)
{
    lease_ent **pp = slot(ls, name);
    if (!*pp) return 0;
    lease_ent *e = *pp;
    *pp = e->next;
    free(e);
    ls->count--;
    return 1;
}

int lease_set_has(const lease_set *ls, const char *name)
{
    return *slot(ls, name) != NULL;
}

int lease_set_lost(lease_set *ls, const char *name)
{
    if (!lease_set_remove(ls, name)) return 0;
    ls->lost++;
    return 1;
}

/* A tenth of the ttl: when a renewal failed (the store unreachable), the
 * next try; a save meanwhile is fenced by the lease anyway. */
static uint64_t retry_ns(const lease_set *ls)
{
    return (uint64_t)ls->ttl_ms * 100000ull;
}

/* A renewal of e that did not happen (the store failed): retried in a
 * tenth of the ttl, or at its own due time when that comes first (a lease
 * renewed early, along with the due ones). */
static void retry_later(lease_set *ls, lease_ent *e, uint64_t now)
{
    uint64_t retry = now + retry_ns(ls);
    ls->renew_failed++;
    if (e->due_ns <= now || e->due_ns > retry) e->due_ns = retry;
}

/* Leases due within a sixth of the ttl are renewed with the ones due now:
 * a lease is then renewed between ttl/6 and ttl/3 after the last renewal
 * (never later than its due time, so never with less than two thirds of
 * the ttl left), and leases taken at different moments fall into a few
 * rounds per period instead of one round each. */
static uint64_t early_ns(const lease_set *ls)
{
    return (uint64_t)ls->ttl_ms * 1000000ull / 6;
}

/* The ms until the earliest due renewal (-1: none held), bounded as
 * persist.c's timer wants it. */
static int next_ms(const lease_set *ls, uint64_t now)
{
    uint64_t next = 0;
    for (size_t i = 0; i < ls->nbuckets; i++)
        for (const lease_ent *e = ls->buckets[i]; e; e = e->next)
            if (!next || e->due_ns < next) next = e->due_ns;
    if (!next) return -1;
    uint64_t ms = next > now ? (next - now + 999999) / 1000000 : 0;
    return ms < 1 ? 1 : ms > 3600000 ? 3600000 : (int)ms;
}

/* chunk 1: one store_lease_renew (one commit) per lease at its own due
 * time, as before renewals were batched; kept for the bench's comparison. */
static void renew_each(lease_set *ls, store *st, uint64_t now,
                       void (*lost)(void *arg, const char *name, const char *holder), void *arg)
{
    for (size_t i = 0; i < ls->nbuckets; i++) {
        lease_ent **pp = &ls->buckets[i];
        while (*pp) {
            lease_ent *e = *pp;
            if (e->due_ns <= now) {
                store_lease cur;
                char err[256];
                int rc = store_lease_renew(st, e->name, ls->owner, ls->ttl_ms, &cur, err, sizeof err);
                ls->renew_calls++;
                if (rc == -ENOLCK) {
                    *pp = e->next;
                    ls->count--;
                    ls->lost++;
                    if (lost) lost(arg, e->name, cur.owner);
                    free(e);
                    continue;
                }
                if (rc == 0) ls->renewed++; else ls->renew_failed++;
                e->due_ns = now + (rc == 0 ? period_ns(ls) : retry_ns(ls));
            }
            pp = &e->next;
        }
    }
}

int lease_set_renew(lease_set *ls, store *st, uint64_t now,
                    void (*lost)(void *arg, const char *name, const char *holder), void *arg)
{
    if (ls->chunk <= 1) {
        renew_each(ls, st, now, lost, arg);
        return next_ms(ls, now);
    }
    uint64_t horizon = now + early_ns(ls);
    size_t nd = 0;
    lease_ent **due = NULL;
    for (size_t i = 0; i < ls->nbuckets; i++)
        for (lease_ent *e = ls->buckets[i]; e; e = e->next)
            nd += e->due_ns <= horizon;
    if (!nd) return next_ms(ls, now);
    size_t k = nd < ls->chunk ? nd : ls->chunk;
    due = malloc(nd * sizeof *due);
    const char **names = malloc(k * sizeof *names);
    uint8_t *gone = malloc(k);
    store_lease *held = malloc(k * sizeof *held);
    size_t j = 0;
    for (size_t i = 0; due && i < ls->nbuckets; i++)
        for (lease_ent *e = ls->buckets[i]; e; e = e->next)
            if (e->due_ns <= horizon) due[j++] = e;
    /* After a failed statement the rest are not tried (the store is most
     * likely unreachable: each try would wait out its reconnect time);
     * every lease not renewed is retried in a tenth of the ttl. Out of
     * memory counts as a failure too. */
    int rc = due && names && gone && held ? 0 : -ENOMEM;
    for (size_t off = 0; due && off < nd; off += k) {
        size_t m = nd - off < k ? nd - off : k;
        if (rc == 0) {
            char err[256];
            for (size_t x = 0; x < m; x++) names[x] = due[off + x]->name;
            rc = store_lease_renew_many(st, names, m, ls->owner, ls->ttl_ms, gone, held, err,
                                        sizeof err);
            ls->renew_calls++;
        }
        for (size_t x = 0; x < m; x++) {
            lease_ent *e = due[off + x];
            if (rc == 0 && gone[x]) {
                lease_ent **pp = slot(ls, e->name);
                *pp = e->next;
                ls->count--;
                ls->lost++;
                if (lost) lost(arg, e->name, held[x].owner);
                free(e);
                continue;
            }
            if (rc == 0) {
                ls->renewed++;
                e->due_ns = now + period_ns(ls);
            } else {
                retry_later(ls, e, now);
            }
        }
    }
    if (!due)   /* not even the list: every due lease is retried soon */
        for (size_t i = 0; i < ls->nbuckets; i++)
            for (lease_ent *e = ls->buckets[i]; e; e = e->next)
                if (e->due_ns <= horizon) retry_later(ls, e, now);
    free(due);
    free(names);
    free(gone);
    free(held);
    return next_ms(ls, now);
}

void lease_set_release_all(lease_set *ls, store *st)
{
    for (size_t i = 0; i < ls->nbuckets; i++)
        for (lease_ent *e = ls->buckets[i]; e; ) {
            lease_ent *n = e->next;
            char err[256];
            store_lease_release(st, e->name, ls->owner, err, sizeof err);
            free(e);
            e = n;
        }
    memset(ls->buckets, 0, ls->nbuckets * sizeof *ls->buckets);
    ls->count = 0;
}
