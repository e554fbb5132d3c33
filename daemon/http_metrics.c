/* daemon/http_metrics.c — GET /metrics: the daemon's counters, gauges and
 * latency histograms in Prometheus' text format (docs/HTTP.md,
 * "Metrics"). The stats request goes to the store thread first, for the
 * stored session count; the rest is read on the loop. See http_impl.h. */
#include "daemon/http_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <h2o.h>
#include "daemon/procinfo.h"
#include "kernels/clock.h"

static const char *const outcome_names[8] = { "stop", "length", "cancelled", "client_error",
                                              "server_error", "disconnected", "other", "ok" };

static void put_hist(bytebuf *b, const char *name, const char *help, const lat_hist *l)
{
    char line[256];
    int n = snprintf(line, sizeof line, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    bytebuf_put(b, line, (size_t)n);
    uint64_t cum = 0;
    for (int i = 0; i < STATS_HIST_N; i++) {
        cum += l->count[i];
        if (i == STATS_HIST_N - 1)
            n = snprintf(line, sizeof line, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)cum);
        else
            n = snprintf(line, sizeof line, "%s_bucket{le=\"%g\"} %llu\n", name,
                         stats_hist_le[i] / 1000.0, (unsigned long long)cum);
        bytebuf_put(b, line, (size_t)n);
    }
    n = snprintf(line, sizeof line, "%s_sum %.6f\n%s_count %llu\n", name, l->sum_ms / 1000.0, name,
                 (unsigned long long)l->n);
    bytebuf_put(b, line, (size_t)n);
}

static void put_metric(bytebuf *b, const char *name, const char *type, const char *help, double v)
{
    char line[320];
    int n = snprintf(line, sizeof line, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name,
                     type, name, v);
    bytebuf_put(b, line, (size_t)n);
}

/* The byte budget (daemon/conn.h): what it counts, and the socket
 * connections waiting for it. */
static void put_budget(bytebuf *b, const server *srv)
{
    put_metric(b, "lind_budget_bytes", "gauge", "request and output bytes counted against "
               "--max-total-bytes (socket read buffers and requests in flight, HTTP bodies and "
               "buffered output)", (double)srv->mem_bytes);
    put_metric(b, "lind_connections_waiting", "gauge", "socket connections not read until the "
               "byte budget frees up", (double)srv->starved);
}

/* The stats request came back with the store's session count (the typed
 * `stats` result e of l). */
void http_metrics_send(hreq *h, const evlist *l, const event *e)
{
    http_server *hs = h->hs;
    const ev_field *sf = event_result_field(l, e, "sessions_stored");
    uint64_t stored = sf && sf->type == EVV_U64 ? sf->v.u : 0;
    stats *st = malloc(sizeof *st);
    if (!st) { http_fail(h, PE_INTERNAL, "out of memory"); return; }
    stats_snapshot(&hs->srv->st, st);
    bytebuf b = { 0 };
    put_metric(&b, "lind_tokens_generated_total", "counter", "tokens sampled, all protocols",
               (double)st->tokens_out);
    put_metric(&b, "lind_tokens_prompt_total", "counter", "input tokens fed, all protocols",
               (double)st->tokens_in);
    put_metric(&b, "lind_http_tokens_generated_total", "counter", "tokens sampled for HTTP requests",
               (double)hs->http_tokens);
    const char *rname = "lind_http_requests_total";
    char line[256];
    int n = snprintf(line, sizeof line, "# HELP %s HTTP completion requests by outcome\n# TYPE %s counter\n",
                     rname, rname);
    bytebuf_put(&b, line, (size_t)n);
    for (int i = 0; i < 7; i++) {
        n = snprintf(line, sizeof line, "%s{outcome=\"%s\"} %llu\n", rname, outcome_names[i],
                     (unsigned long long)hs->req_total[i]);
        bytebuf_put(&b, line, (size_t)n);
    }
    /* Each stage's requests to the compute and store threads: a stateless
     * chat is one generate (docs/HTTP.md, "Sessions: what is fed"). */
    static const char *const stage_names[ST_TURN_LAST + 1] = {
        [ST_FORK_IN] = "fork_in", [ST_PREFILL] = "prefill", [ST_FORK_N] = "fork_n",
        [ST_GENERATE] = "generate", [ST_FORK_OUT] = "fork_out", [ST_DROP] = "drop",
    };
    rname = "lind_http_stage_requests_total";
    n = snprintf(line, sizeof line, "# HELP %s requests the stages of HTTP completions sent to the compute "
                 "and store threads\n# TYPE %s counter\n", rname, rname);
    bytebuf_put(&b, line, (size_t)n);
    for (int i = ST_FORK_IN; i <= ST_TURN_LAST; i++) {
        n = snprintf(line, sizeof line, "%s{stage=\"%s\"} %llu\n", rname, stage_names[i],
                     (unsigned long long)hs->stage_total[i]);
        bytebuf_put(&b, line, (size_t)n);
    }
    put_hist(&b, "lind_step_seconds", "time of one batched model step", &st->step_h);
    put_hist(&b, "lind_time_to_first_token_seconds", "queue + prompt time of generates, all protocols",
             &st->ttft_h);
    put_hist(&b, "lind_http_time_to_first_token_seconds",
             "HTTP request arrival to its first text on the wire", &hs->ttft);
    put_hist(&b, "lind_store_commit_seconds", "store commit latency (one group of turns)", &st->save_h);
    put_metric(&b, "lind_sessions_resident", "gauge", "sessions in model slots or loading",
               (double)st->sessions_resident);
    if (sf && sf->type == EVV_U64)   /* nil: the store could not count them */
        put_metric(&b, "lind_sessions_stored", "gauge", "sessions in the store", (double)stored);
    put_metric(&b, "lind_store_bytes", "gauge", "sessions' state and transcript bytes at the last "
               "collection (retention; 0 when off)", (double)atomic_load(&hs->srv->store_bytes));
    put_metric(&b, "lind_store_refusing_turns", "gauge", "1 while new turns get insufficient_storage "
               "(past --max-store-bytes, or a full disk)",
               (double)(atomic_load(&hs->srv->store_over) || atomic_load(&hs->srv->store_nospace)));
    put_metric(&b, "lind_turns_running", "gauge", "turns in the compute thread's batch",
               (double)st->turns_active);
    put_metric(&b, "lind_queue_depth", "gauge", "sessions waiting for a load or a model slot",
               (double)st->turns_waiting);
    put_metric(&b, "lind_connections", "gauge", "open msgpack socket connections",
               (double)st->connections);
    put_metric(&b, "lind_http_requests_in_flight", "gauge", "HTTP requests being answered",
               (double)hs->nreq);
    put_budget(&b, hs->srv);
    char *sp = NULL;   /* node id, leases, moved/conflict, store health (daemon/stats.c) */
    size_t sn = 0;
    if (stats_prometheus_store(st, hs->srv->node_id, &sp, &sn) == 0) { bytebuf_put(&b, sp, sn); free(sp); }
    put_metric(&b, "lind_uptime_seconds", "gauge", "seconds since start",
               (double)(clock_mono_ns() - st->start_ns) / 1e9);
    put_metric(&b, "lind_turns_dropped_total", "counter", "turns whose client or connection was gone: "
               "dropped before they started, or their fresh session not kept", (double)st->turns_dropped);
    procinfo pi;
    procinfo_read(&pi);
    char fp[24], pbuf[2048];
    const char *ver = strchr(LIND_SERVER_VERSION, ' ');
    snprintf(fp, sizeof fp, "%016llx", (unsigned long long)hs->srv->fingerprint);
    size_t pn = procinfo_metrics(&pi, ver ? ver + 1 : LIND_SERVER_VERSION, hs->model_id, fp, pbuf, sizeof pbuf);
    bytebuf_put(&b, pbuf, pn);
    free(st);
    h->pending_backend = 0;
    if (!h->req) { bytebuf_free(&b); return; }
    h2o_req_t *req = h->req;
    h->req = NULL;
    req->res.status = 200;
    req->res.reason = "OK";
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL,
                   H2O_STRLIT("text/plain; version=0.0.4"));
    h2o_send_inline(req, b.p ? b.p : "", b.n);
    bytebuf_free(&b);
}

void http_metrics(http_server *hs, h2o_req_t *req)
{
    hreq *h = calloc(1, sizeof *h);
    if (!h) { http_send_error(hs, req, 500, "internal", NULL, "out of memory"); return; }
    h->hs = hs;
    h->kind = HK_METRICS;
    h->stage = ST_STATS;
    h->id = HTTP_CONN_BIT | ++hs->seq;
    http_track(h, req);
    op_request r;
    memset(&r, 0, sizeof r);
    r.op = OP_STATS;
    r.id = 1;
    http_send_request(h, &r);
}
