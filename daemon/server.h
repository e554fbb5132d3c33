/* daemon/server.h — `lind serve`: the daemon as a whole.
 *
 * Three threads share one `server`:
 *   loop    (server.c, conn.c, commands.c) owns the listening socket, every
 *           connection, and the event encoding for connection-level answers;
 *   compute (scheduler.c, session.c) owns the model, its slots and every
 *           resident session, and runs the batched steps;
 *   store   (persist.c) owns the SQLite store and does all of its I/O.
 * They talk only through the three queues below (daemon/msg.h). The fields
 * under "read-only after start" are set before the threads start and never
 * change; `stats` has its own lock. */
#ifndef LIND_DAEMON_SERVER_H
#define LIND_DAEMON_SERVER_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <uv.h>
#include "daemon/queue.h"
#include "daemon/stats.h"
#include "daemon/protocol.h"
#include "daemon/reqlog.h"
#include "daemon/reserve.h"
#include "kernels/backend.h"
#include "recurrent/model.h"
#include "state/store.h"

/* The version `lind --version`, `lindctl --version` and hello's `server` say. */
#define LIND_SERVER_VERSION "lind 1.0"

typedef struct server_options {
    const char *model_dir;     /* --model; NULL (default): server_default_model */
    const char *socket_path;   /* default "./lind.sock" */
    const char *db_path;       /* default "./lind.db" */
    const char *backend;       /* "cpu", "cuda", "auto" (default) */
    lind_dtype  dtype;         /* matrix weights in memory: LIND_DT_AUTO (as stored, default),
                                  F32, BF16, F16 (--dtype) */
    lind_compute compute;      /* products' arithmetic: LIND_COMPUTE_F32 (default) or BF16 (--compute) */
    int      bos;              /* model_opts.bos: 0 the model's convention, 1 --bos, -1 --no-bos */
    int      ignore_eos;       /* --ignore-eos: turns go on past the model's end tokens unless a
                                  request says ignore_eos false */
    backend_opts be;           /* the backend's options: defaults, then server_main reads
                                  LIND_CPU_THREADS etc. (backend_opts_from_env) */
    int      max_batch;        /* sessions per step, default 256 */
    int      max_resident;     /* sessions kept in slots; 0 (default): 1024, or fewer if
                                  their states would pass 1 GiB */
    int      prompt_chunk;     /* prompt tokens per session per round, default 64 */
    size_t   max_message;      /* bytes per request, default 1 MiB */
    size_t   max_output;       /* unsent bytes per connection before its turns pause, default 256 KiB */
    uint32_t max_tokens;       /* per generate, default 65536 */
    int      max_inflight;     /* requests in flight per connection, default 1024 */
    size_t   max_conn_bytes;   /* request bytes in flight per connection, default 4 MiB */
    size_t   max_total_bytes;  /* request bytes in flight and buffered, all connections, default 64 MiB */
    int      max_waiting;      /* sessions waiting for a load or a slot, default 4096 */
    unsigned idle_timeout;     /* s: close a connection with nothing in flight, 0 (default) = never */
    unsigned write_timeout;    /* s: close a connection whose output has not moved, default 60, 0 = never */
    unsigned pause_timeout;    /* s: cancel the turns of a connection paused that long, default 60, 0 = never */
    store_sync sync;           /* default full */
    size_t   transcript_bytes; /* transcript tail per session, default 4 KiB */
    const char *log_file;      /* --log-file: request log and notices; NULL = stderr */
    int      log_level;        /* --log-level: a reqlog_level, default info */
    /* several nodes on one store (docs/SCALE.md) */
    const char *node_id;       /* --node-id: lease owner; NULL (default): hostname:pid on a
                                  PostgreSQL store, "local" on SQLite (daemon/lease.h) */
    int      lease_ms;         /* --lease-ms: lease expiry, renewed every third of it; 0 (default):
                                  10000 on PostgreSQL, 600000 on SQLite */
    int      lease_wait_ms;    /* --lease-wait: wait that long for another node's lease, default 0 */
    int      store_conns;      /* --store-conns: store connections; 0 (default): 4 on
                                  PostgreSQL, 1 on SQLite (one writer anyway) */
    /* the PostgreSQL store's connections (docs/SCALE.md, "Timeouts and reconnecting") */
    int      db_wait_s;        /* --db-wait S: at start, retry an unreachable store for S s, default 0 */
    int      db_lock_timeout_ms;      /* --db-lock-timeout MS: lock_timeout, default 5000 */
    int      db_statement_timeout_ms; /* --db-statement-timeout MS: statement_timeout, default 30000 */
    int      db_idle_tx_timeout_ms;   /* --db-idle-tx-timeout MS: idle_in_transaction_session_timeout,
                                         default 10000 */
    int      db_reconnect_ms;  /* --db-reconnect MS: how long an operation waits for a lost
                                  connection to come back, default 10000 */
    const char *http_addr;     /* --http [ADDR:]PORT: the HTTP front door (docs/HTTP.md); NULL = off */
    const char *http_token_file; /* --http-token-file: clients must send this bearer token
                                  (HTTP, and hello's token on the TCP socket) */
    const char *listen_addr;   /* --listen [ADDR:]PORT: the msgpack protocol over TCP too; NULL = off */
    const char *chat_template; /* --template NAME|FILE: the chat template, over lind_chat.json
                                  and the family's built-in; NULL = not given */
    size_t   http_max_body;    /* --http-max-body: request body bytes, default 1 MiB */
    size_t   http_max_header;  /* --http-max-header: request header bytes, default 16 KiB */
    unsigned http_idle_timeout; /* --http-idle-timeout S: close an idle or slow-sending client, default 30 */
    const char *http_cors;     /* --http-cors ORIGIN[,ORIGIN]: browser origins allowed (daemon/http_cors.h); NULL = off */
    int      http2;            /* --http2 on|off: serve HTTP/2 cleartext (h2c) too, default off */
    int      undo;             /* --undo on|off: keep the state before each turn (op undo), default on */
    unsigned http_stream_ms;   /* --http-stream-interval MS: a stream's tokens after its first are written at most this often, 0 = each at once */
    /* retention (docs/STATE.md, "Retention"; persist.c collects) */
    int64_t  response_ttl_ms;  /* --response-ttl: resp-/chat- sessions idle that long go, default 30 days, 0 = kept */
    int64_t  session_ttl_ms;   /* --session-ttl: named sessions idle that long go, default 0 = kept */
    uint64_t max_store_bytes;  /* --max-store-bytes: sessions' bytes; past it ephemeral ones go, then turns
                                  are refused (insufficient_storage); 0 (default) = no quota */
} server_options;

server_options server_defaults(void);
/* Parse `lind serve` options (argv[0] is "serve"). 0, or -EINVAL with a
 * message in err. */
int server_parse_args(int argc, char **argv, server_options *o, char *err, size_t errlen);
/* --config FILE: its `key = value` lines (keys are the long options
 * without "--", '#' starts a comment line, a value may be in double quotes,
 * flags take true/false) applied to o as options would be. 0, or a negated
 * errno with a message naming the file, line and key in err. The strings
 * the options keep point into a copy of the file kept for the process. */
int server_read_config(const char *path, server_options *o, char *err, size_t errlen);
/* The model `lind serve` takes without --model: ./models/default if the
 * working directory has one (a source tree), else the installed one,
 * PREFIX/share/lind/models/default beside PREFIX/bin/lind, else the source
 * tree's models/default beside its build directory. 0, or -ENOENT with
 * the places looked at in err. */
int server_default_model(char *out, size_t cap, char *err, size_t errlen);
/* `lind serve --help`: every option with its default. */
void server_usage(FILE *f);
/* The store options the daemon's options make (every store connection). */
store_options server_store_options(const server_options *o);

struct conn_table;
struct scheduler;
struct persist;
struct http_server;

typedef struct server {
    /* read-only after start */
    server_options opt;
    proto_limits   limits;
    model         *m;              /* used only by the compute thread once started */
    size_t         state_bytes;
    uint64_t       fingerprint;
    char           backend[16];
    char           model_path[1024];
    char          *chat_template;  /* the served chat template's JSON (NUL-terminated), or NULL
                                    * (none: "{prompt}\n"): --template, else the model
                                    * directory's lind_chat.json, else the model family's
                                    * built-in (chat_template_for_family) */
    char           chat_template_from[128];  /* where it came from, for the start-up log */
    uint32_t       chat_template_hash;       /* its chat_template.hash (the "none" one's when NULL) */
    char           chat_template_name[64];
    reqlog         log;            /* one line per finished turn (daemon/reqlog.h) */
    int            d_model, n_layers;
    size_t         params;
    int            vocab;
    char           tokenizer[16];  /* the model's tokenizer kind */
    char           dtype[8];       /* weights in memory: "f32", "bf16", "f16" */
    char           node_id[STORE_NAME_MAX + 1];   /* the lease owner this node writes as */
    char           node_instance[STORE_NAME_MAX + 1]; /* this process's claim on node_id */
    int            node_claimed;   /* a shared store: node_id claimed, heartbeat by the store */

    queue          loopq;          /* outmsg → loop */
    queue          schedq;         /* dmsg → compute */
    queue          persistq;       /* dmsg → store */
    stats          st;
    /* retention: written by store connection 0 after each collection, read
     * by the compute thread to refuse new turns */
    atomic_int     store_over;     /* 1: past --max-store-bytes with nothing left to collect */
    atomic_ullong  store_bytes;    /* the sessions' bytes at the last collection */
    /* a full disk: set by the store thread when a save found no room (or
     * at start, when the open needed the reserve), cleared when a delete
     * or a collection freed some; new turns are refused meanwhile */
    atomic_int     store_nospace;
    reserve        reserve;        /* the SQLite store's disk reserve (daemon/reserve.h) */

    /* loop thread only */
    uv_loop_t     *loop;
    uv_pipe_t      listener;
    uv_tcp_t       tcp_listener;   /* --listen */
    int            tcp_on;         /* tcp_listener is initialised */
    char           tcp_token[256]; /* --http-token-file's token TCP clients' hello must carry, "" none */
    uv_async_t     wake;
    uv_signal_t    sigterm, sigint, sighup;
    uv_timer_t     exit_timer;
    uv_timer_t     tick;           /* timeouts (conn_tick), every 250 ms */
    size_t         mem_bytes;      /* request bytes in flight + input buffers, all connections */
    size_t         inflight_bytes; /* request bytes in flight, all connections */
    unsigned       starved;        /* connections not reading for mem_bytes (conn.c) */
    uint64_t       overdraft;      /* the connection that may finish a message past the budget */
    struct conn_table *conns;
    int            stopping;       /* SIGTERM/SIGINT seen */
    int            store_done;     /* the store thread has finished */
    int            exit_code;
    struct http_server *http;      /* the HTTP front door (daemon/http.h), or NULL */
} server;

/* Run the daemon until SIGTERM/SIGINT; returns the process exit code.
 * Prints start-up failures (model, store, socket) to stderr. */
int server_main(int argc, char **argv);

#endif
