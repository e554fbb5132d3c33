/* daemon/lease.h — the leases one store connection of the daemon holds.
 *
 * Several `lind serve` nodes share a store (docs/SCALE.md): a node serves a
 * session only under a lease (state/store.h: owner, expiry) that it takes
 * before loading the session, renews every third of --lease-ms while the
 * session is resident, and gives back when the session leaves its slots
 * (eviction, delete, a failed save) and at shutdown. Each store connection
 * (daemon/persist.c) keeps the set of session names whose lease it holds
 * in a lease_set, on that connection's thread only; lease_set_renew is its
 * timer: it renews every lease that is due and reports the ones found lost
 * (taken over by another node after expiring, or released behind its back),
 * which the node must then stop serving. It renews them in batches:
 * LEASE_RENEW_CHUNK names per statement (store_lease_renew_many, one
 * commit), and the leases due within the next sixth of the ttl along with
 * those due now, so a node holding 10,000 leases commits a few dozen times
 * per ttl, not 30,000 times (docs/SCALE.md, "Leases").
 *
 * The node's identity is the lease owner string: --node-id, else a default
 * (lease_node_id). */
#ifndef LIND_DAEMON_LEASE_H
#define LIND_DAEMON_LEASE_H

#include <stddef.h>
#include <stdint.h>
#include "state/store.h"

/* Is db (the --db value) a store several nodes share (a PostgreSQL URI)? */
int lease_store_shared(const char *db);

/* The lease owner this node writes as: `given` (--node-id) when not NULL,
 * else "HOST:PID" on a shared store (several nodes may run on one host; a
 * restarted node with this default waits for its predecessor's leases to
 * expire, while one with a fixed --node-id takes its own leases back at
 * once), or "local" on SQLite (one node per database file, guarded by the
 * file lock, so a restarted daemon, also in a new container with another
 * host name, resumes its own leases without waiting). */
void lease_node_id(const char *given, int shared, char *out, size_t len);

typedef struct lease_ent {
    char     name[STORE_NAME_MAX + 1];
    uint64_t due_ns;           /* monotonic time of the next renewal */
    struct lease_ent *next;
} lease_ent;

/* Names per renewal statement: a parameter array of ~130 KB at most. */
#define LEASE_RENEW_CHUNK 1000

typedef struct lease_set {
    lease_ent **buckets;
    size_t      nbuckets, count;
    const char *owner;         /* the node id (not owned) */
    int64_t     ttl_ms;
    /* Names per store call (LEASE_RENEW_CHUNK from init). 1: the behaviour
     * before batching, one store_lease_renew per lease at its own due time
     * (bench/scale_bench.c --leases measures both). */
    size_t      chunk;
    uint64_t    renew_calls;   /* store calls (commits) renewals made, since init */
    /* Since init, for /metrics (daemon/stats.h): leases taken (new to the
     * set), renewed, renewals that failed (the store unreachable: retried),
     * leases found lost (at a renewal, or by a fenced save: lease_set_lost). */
    uint64_t    taken, renewed, renew_failed, lost;
} lease_set;

int  lease_set_init(lease_set *ls, const char *owner, int64_t ttl_ms);
void lease_set_free(lease_set *ls);
/* Record that the lease on `name` was just taken or renewed (0, -ENOMEM). */
int  lease_set_add(lease_set *ls, const char *name, uint64_t now);
/* Forget `name` (no store call); 1 if it was there. */
int  lease_set_remove(lease_set *ls, const char *name);
int  lease_set_has(const lease_set *ls, const char *name);
/* A save found the lease on `name` lost (refused by the store's fence):
 * forget it, counted as lost; 1 if it was there. */
int  lease_set_lost(lease_set *ls, const char *name);

/* Renew every lease due at `now`, and those due within a sixth of the ttl
 * after it, through st, in statements of `chunk` names. A lease found lost
 * (-ENOLCK) is forgotten and passed to lost(arg, name, holder) with the
 * holder's name ("" when nobody holds it); a store failure (-EIO: the
 * database is unreachable) leaves the leases not renewed to be retried in a
 * tenth of the ttl (their saves are fenced anyway). Returns the ms until the
 * next renewal is due (-1: none held). */
int  lease_set_renew(lease_set *ls, store *st, uint64_t now,
                     void (*lost)(void *arg, const char *name, const char *holder), void *arg);
/* Release every lease held (shutdown) and forget them. */
void lease_set_release_all(lease_set *ls, store *st);

#endif
