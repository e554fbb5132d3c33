/* daemon/stats.c — see stats.h. */
#include "daemon/stats.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "daemon/msg.h"
#include "kernels/clock.h"

int stats_init(stats *s)
{
    memset(s, 0, sizeof *s);
    s->start_ns = clock_mono_ns();
    return pthread_mutex_init(&s->mu, NULL) ? -1 : 0;
}

void stats_destroy(stats *s) { pthread_mutex_destroy(&s->mu); }

const double stats_hist_le[STATS_HIST_N] = { 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000,
                                             2500, 10000, 1e300 };

static void hist_add(lat_hist *h, double ms)
{
    int i = 0;
    while (i < STATS_HIST_N - 1 && ms > stats_hist_le[i]) i++;
    h->count[i]++;
    h->n++;
    h->sum_ms += ms;
}

static void lat_add(lat_series *l, double ms)
{
    l->ms[l->pos] = (float)ms;
    l->pos = (l->pos + 1) % STATS_WINDOW;
    if (l->n < STATS_WINDOW) l->n++;
    if (ms > l->max) l->max = ms;
}

void stats_step(stats *s, int batch, double ms, uint64_t tokens_in, uint64_t tokens_out)
{
    int b = 0;
    while (b < STATS_BUCKETS - 1 && (1 << (b + 1)) <= batch) b++;
    pthread_mutex_lock(&s->mu);
    s->steps++;
    s->batch_hist[b]++;
    s->tokens_in += tokens_in;
    s->tokens_out += tokens_out;
    lat_add(&s->step, ms);
    hist_add(&s->step_h, ms);
    pthread_mutex_unlock(&s->mu);
}

void stats_save(stats *s, double ms, int sessions)
{
    pthread_mutex_lock(&s->mu);
    s->saves += (uint64_t)sessions;
    lat_add(&s->save, ms);
    hist_add(&s->save_h, ms);
    pthread_mutex_unlock(&s->mu);
}

void stats_connections(stats *s, int delta)
{
    pthread_mutex_lock(&s->mu);
    s->connections += (uint64_t)(int64_t)delta;
    if (delta > 0) s->connections_total += (uint64_t)delta;
    pthread_mutex_unlock(&s->mu);
}

void stats_resident(stats *s, uint64_t n)
{
    pthread_mutex_lock(&s->mu);
    s->sessions_resident = n;
    pthread_mutex_unlock(&s->mu);
}

void stats_ttft(stats *s, double ms)
{
    pthread_mutex_lock(&s->mu);
    hist_add(&s->ttft_h, ms);
    pthread_mutex_unlock(&s->mu);
}

void stats_queue(stats *s, uint64_t active, uint64_t waiting)
{
    pthread_mutex_lock(&s->mu);
    s->turns_active = active;
    s->turns_waiting = waiting;
    pthread_mutex_unlock(&s->mu);
}

void stats_store_add(stats *s, const stats_store *d)
{
    pthread_mutex_lock(&s->mu);
    stats_store *t = &s->store;
    t->leases_held += d->leases_held;
    t->lease_taken += d->lease_taken;
    t->lease_renewals += d->lease_renewals;
    t->lease_renew_failures += d->lease_renew_failures;
    t->lease_lapses += d->lease_lapses;
    t->reconnects += d->reconnects;
    t->retries += d->retries;
    t->err_io += d->err_io;
    t->err_busy += d->err_busy;
    t->err_other += d->err_other;
    pthread_mutex_unlock(&s->mu);
}

void stats_save_failed(stats *s, int sessions)
{
    pthread_mutex_lock(&s->mu);
    s->save_failures += (uint64_t)sessions;
    pthread_mutex_unlock(&s->mu);
}

void stats_moved(stats *s)
{
    pthread_mutex_lock(&s->mu);
    s->moved++;
    pthread_mutex_unlock(&s->mu);
}

void stats_conflict(stats *s, int reason)
{
    if (reason < 0 || reason >= STATS_CONFLICTS) return;
    pthread_mutex_lock(&s->mu);
    s->conflicts[reason]++;
    pthread_mutex_unlock(&s->mu);
}

static void prom_head(FILE *f, const char *name, const char *type, const char *help)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void prom_one(FILE *f, const char *name, const char *type, const char *help, uint64_t v)
{
    prom_head(f, name, type, help);
    fprintf(f, "%s %llu\n", name, (unsigned long long)v);
}

int stats_prometheus_store(const stats *st, const char *node_id, char **out, size_t *len)
{
    *out = NULL;
    *len = 0;
    FILE *f = open_memstream(out, len);
    if (!f) return -ENOMEM;
    prom_head(f, "lind_node_info", "gauge", "the node id this node takes leases as (--node-id), "
              "always 1");
    fputs("lind_node_info{node_id=\"", f);
    for (const char *p = node_id ? node_id : ""; *p; p++) {   /* label value escapes */
        if (*p == '\\' || *p == '"') fputc('\\', f);
        if (*p == '\n') { fputs("\\n", f); continue; }
        fputc(*p, f);
    }
    fputs("\"} 1\n", f);
    const stats_store *c = &st->store;
    prom_one(f, "lind_leases_held", "gauge", "session leases this node holds (sessions resident "
             "or loading)", c->leases_held > 0 ? (uint64_t)c->leases_held : 0);
    prom_one(f, "lind_leases_taken_total", "counter", "session leases taken (a session loaded "
             "or deleted here)", c->lease_taken);
    prom_one(f, "lind_lease_renewals_total", "counter", "lease renewals that succeeded",
             c->lease_renewals);
    prom_one(f, "lind_lease_renewal_failures_total", "counter", "lease renewals that could not "
             "reach the store (retried in a tenth of --lease-ms)", c->lease_renew_failures);
    prom_one(f, "lind_lease_lapses_total", "counter", "leases found lost (expired and taken by "
             "another node, or released behind this node's back), at a renewal or a save",
             c->lease_lapses);
    prom_one(f, "lind_moved_total", "counter", "requests answered `moved` (the session is leased "
             "by another node)", st->moved);
    static const char *const why[STATS_CONFLICTS] = { "version", "lease", "if_tokens" };
    prom_head(f, "lind_conflicts_total", "counter", "requests answered `conflict`, by reason: the "
              "session's version moved on in the store, this node's lease was lost, if_tokens "
              "did not match");
    for (int i = 0; i < STATS_CONFLICTS; i++)
        fprintf(f, "lind_conflicts_total{reason=\"%s\"} %llu\n", why[i],
                (unsigned long long)st->conflicts[i]);
    prom_one(f, "lind_store_saves_total", "counter", "sessions saved (a turn committed)", st->saves);
    prom_one(f, "lind_store_save_failures_total", "counter", "sessions whose save failed (the "
             "turn answered `io`; conflicts not counted)", st->save_failures);
    prom_head(f, "lind_store_errors_total", "counter", "store calls that failed (after any "
              "reconnect and retry), by kind: io (the database unreachable, the connection lost), "
              "timeout (a lock, statement or busy timeout, a serialization failure or deadlock), "
              "other");
    fprintf(f, "lind_store_errors_total{kind=\"io\"} %llu\n"
               "lind_store_errors_total{kind=\"timeout\"} %llu\n"
               "lind_store_errors_total{kind=\"other\"} %llu\n",
            (unsigned long long)c->err_io, (unsigned long long)c->err_busy,
            (unsigned long long)c->err_other);
    prom_one(f, "lind_store_reconnects_total", "counter", "store connections re-opened after "
             "being lost", c->reconnects);
    prom_one(f, "lind_store_retries_total", "counter", "store statements run again on a new "
             "connection after the old one was lost", c->retries);
    if (fclose(f) != 0 || !*out) {
        free(*out);
        *out = NULL;
        *len = 0;
        return -ENOMEM;
    }
    return 0;
}

void stats_dropped(stats *s)
{
    pthread_mutex_lock(&s->mu);
    s->turns_dropped++;
    pthread_mutex_unlock(&s->mu);
}

void stats_snapshot(stats *s, stats *out)
{
    pthread_mutex_lock(&s->mu);
    memcpy(out, s, sizeof *out);
    pthread_mutex_unlock(&s->mu);
    memset(&out->mu, 0, sizeof out->mu);   /* a copy, not a lock */
}

static int cmpf(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static void put_lat(evlist *ev, const char *key, const lat_series *l, float *tmp)
{
    memcpy(tmp, l->ms, l->n * sizeof(float));
    qsort(tmp, l->n, sizeof(float), cmpf);
    static const char *const names[] = { "p50", "p90", "p99" };
    const double q[] = { 0.50, 0.90, 0.99 };
    evlist_open_record(ev, key);
    for (int i = 0; i < 3; i++) {
        double v = 0;
        if (l->n) {
            size_t k = (size_t)(q[i] * (double)(l->n - 1) + 0.5);
            v = tmp[k];
        }
        evlist_put_f64(ev, names[i], v);
    }
    evlist_put_f64(ev, "max", l->max);
    evlist_put_u64(ev, "samples", l->n);
    evlist_close(ev);
}

int stats_result(stats *s, evlist *ev, const uint64_t *stored, const char *backend)
{
    static const char *const bucket[STATS_BUCKETS] = {
        "1", "2-3", "4-7", "8-15", "16-31", "32-63", "64-127", "128-255",
        "256-511", "512-1023", "1024-2047", "2048+" };
    float *tmp = malloc(STATS_WINDOW * sizeof(float));
    pthread_mutex_lock(&s->mu);
    evlist_put_f64(ev, "uptime_s", (double)(clock_mono_ns() - s->start_ns) / 1e9);
    evlist_put_u64(ev, "connections", s->connections);
    evlist_put_u64(ev, "sessions_resident", s->sessions_resident);
    if (stored) evlist_put_u64(ev, "sessions_stored", *stored);
    else evlist_put_nil(ev, "sessions_stored");   /* the store could not count them */
    evlist_put_u64(ev, "tokens_in", s->tokens_in);
    evlist_put_u64(ev, "tokens_out", s->tokens_out);
    evlist_put_u64(ev, "steps", s->steps);
    evlist_put_u64(ev, "saves", s->saves);
    evlist_open_record(ev, "batch_hist");   /* the buckets that were hit */
    for (int i = 0; i < STATS_BUCKETS; i++)
        if (s->batch_hist[i]) evlist_put_u64(ev, bucket[i], s->batch_hist[i]);
    evlist_close(ev);
    if (tmp) {
        put_lat(ev, "step_ms", &s->step, tmp);
        put_lat(ev, "save_ms", &s->save, tmp);
    } else {   /* no room to sort: the percentiles are missing, not wrong */
        evlist_put_nil(ev, "step_ms");
        evlist_put_nil(ev, "save_ms");
    }
    pthread_mutex_unlock(&s->mu);
    free(tmp);
    return evlist_put_str(ev, "backend", backend);
}
