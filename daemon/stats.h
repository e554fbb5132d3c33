/* daemon/stats.h — counters and latency samples shared by the daemon's
 * threads, behind one mutex (each update is a few adds; contention is nil
 * next to a model step or a commit).
 *
 * Latency percentiles are exact over a window of the most recent samples
 * (STATS_WINDOW per series), so they describe current behaviour rather
 * than the whole uptime. The batch histogram buckets by powers of two. */
#ifndef LIND_DAEMON_STATS_H
#define LIND_DAEMON_STATS_H

#include <pthread.h>
#include <stdint.h>
#include "daemon/event.h"

#define STATS_WINDOW  4096
#define STATS_BUCKETS 12   /* 1, 2-3, 4-7, ..., 1024-2047, 2048+ */

typedef struct lat_series {
    float    ms[STATS_WINDOW];
    uint32_t n, pos;
    double   max;
} lat_series;

/* Cumulative latency histograms over the whole uptime, for Prometheus
 * (GET /metrics, daemon/http_metrics.c): count[i] counts samples <= stats_hist_le[i]
 * ms (the last bound is +Inf); not cumulative across buckets. */
#define STATS_HIST_N 14
extern const double stats_hist_le[STATS_HIST_N];
typedef struct lat_hist {
    uint64_t count[STATS_HIST_N];
    uint64_t n;
    double   sum_ms;
} lat_hist;

/* Scale-out and store health (docs/SCALE.md), for /metrics. Each store
 * thread (daemon/persist.c) owns its store connection and lease set and
 * counts there without locks; it adds what they counted since its last
 * report with stats_store_add (leases_held is then a difference). */
enum { STATS_CONFLICT_VERSION, STATS_CONFLICT_LEASE, STATS_CONFLICT_IF_TOKENS, STATS_CONFLICTS };
typedef struct stats_store {
    int64_t  leases_held;
    uint64_t lease_taken, lease_renewals, lease_renew_failures, lease_lapses;
    uint64_t reconnects, retries, err_io, err_busy, err_other;
} stats_store;

typedef struct stats {
    pthread_mutex_t mu;
    uint64_t start_ns;
    uint64_t tokens_in, tokens_out, steps, turns, saves;
    uint64_t batch_hist[STATS_BUCKETS];
    uint64_t connections, connections_total;
    uint64_t sessions_resident;
    lat_series step, save;
    lat_hist step_h, save_h, ttft_h;   /* step time, store commit, time to first token */
    uint64_t turns_active, turns_waiting;   /* queue depth at the last round */
    stats_store store;
    uint64_t save_failures;                 /* sessions whose save failed (not conflicts) */
    uint64_t moved;                         /* requests answered `moved` */
    uint64_t conflicts[STATS_CONFLICTS];    /* requests answered `conflict`, by reason */
    uint64_t turns_dropped;   /* turns dropped unstarted: their connection was gone */
} stats;

int  stats_init(stats *s);
void stats_destroy(stats *s);
void stats_step(stats *s, int batch, double ms, uint64_t tokens_in, uint64_t tokens_out);
void stats_save(stats *s, double ms, int sessions);
void stats_connections(stats *s, int delta);
void stats_resident(stats *s, uint64_t n);
/* A generate's time to first token (queue + prompt). */
void stats_ttft(stats *s, double ms);
/* The compute thread's queue: turns running, sessions waiting for a load or a slot. */
void stats_queue(stats *s, uint64_t active, uint64_t waiting);
/* Add a store thread's counts since its last report (every field a delta). */
void stats_store_add(stats *s, const stats_store *delta);
void stats_save_failed(stats *s, int sessions);
void stats_moved(stats *s);
/* reason: STATS_CONFLICT_* (the version moved on, the lease was lost, if_tokens). */
void stats_conflict(stats *s, int reason);
/* The scale-out and store series in Prometheus text format (docs/SCALE.md)
 * from a snapshot: *out malloc'd (caller frees), *len its size; 0 or -ENOMEM. */
int  stats_prometheus_store(const stats *snap, const char *node_id, char **out, size_t *len);
/* A turn was dropped before it started: its connection was gone. */
void stats_dropped(stats *s);
/* A consistent copy of everything (taken under the lock). */
void stats_snapshot(stats *s, stats *out);
/* Put the `stats` result's fields (docs/PROTOCOL.md) into the result being
 * built in l (evlist_result_begin); `stored` (NULL: unknown, the store
 * failed to count; nil in the result) and `backend` come from the caller. At most STATS_RESULT_FIELDS fields (containers included) and
 * strlen(backend) bytes, for evlist_reserve_result. Returns the result's
 * sticky code (daemon/event.h). */
#define STATS_RESULT_FIELDS (8 + 1 + STATS_BUCKETS + 2 * 6 + 1)
int  stats_result(stats *s, evlist *l, const uint64_t *stored, const char *backend);

#endif
