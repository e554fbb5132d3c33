/* daemon/conn.h — client connections (loop thread only).
 *
 * A connection reads bytes into its input buffer, cuts them into messages
 * with proto_scan, decodes each (proto_parse) and hands it to
 * commands_dispatch. Output is appended to a pending buffer and written in
 * as few writes as possible: one write in flight, everything that arrives
 * meanwhile goes out in the next one. When unsent output passes
 * --max-output the compute thread is told to pause this connection's turns
 * (M_PAUSE) and the connection stops reading requests; both resume
 * (M_RESUME) once it drained below a quarter of that. Bytes that are not
 * msgpack, or an oversized message, get an error and the connection is
 * closed once the error is written.
 *
 * Memory: a request's bytes count from its arrival until its final event is
 * delivered. A connection with --max-conn-bytes of requests in flight stops
 * reading until some end; all connections together stop growing their input
 * buffers and dispatching past --max-total-bytes (counting input buffers
 * too), except that a connection using under CONN_SMALL_BYTES may always go
 * on (so a small client is never starved by big ones) and one connection at
 * a time may finish a message it started (so the budget cannot deadlock on
 * half-read messages). The HTTP front door's bodies and buffered output
 * count in the same total (conn_budget_add). So the daemon holds about --max-total-bytes +
 * --max-message + connections × (CONN_SMALL_BYTES + --max-output) of
 * request and output bytes (docs/DAEMON.md).
 *
 * Timeouts (conn_tick, every 250 ms): --idle-timeout closes a connection
 * with nothing in flight and no request for that long (with a `limit` error
 * on id 0); --write-timeout closes one whose pending output has not moved
 * (its turns are cancelled like on any close); --pause-timeout cancels the
 * turns of one paused by --max-output that long, freeing their slots.
 *
 * Connections are named by a 64-bit id that is never reused, so a message
 * from another thread for a connection that has gone is simply dropped.
 *
 * Request ids: a connection remembers the ids of its requests in flight
 * (handed to another thread, final event not yet delivered); a request
 * reusing one of them is refused with `bad_request` on id 0 (an answer on
 * its own id would read as the other request's final event).
 *
 * TCP (--listen): the same connections over uv_tcp_t, with TCP_NODELAY
 * (events are small and latency-bound). With a token (--http-token-file)
 * a TCP connection is gated: its first message must be a hello whose
 * `token` matches (compared in constant time); anything else gets an
 * `unauthorized` error and the connection is closed once it is written;
 * so is one that sends nothing for CONN_HELLO_MS.
 *
 * File descriptors: a connection accepted within CONN_FD_RESERVE of the
 * process's open-file limit is answered with a `limit` error on id 0 and
 * closed, and the refusal is logged, so the daemon keeps descriptors for its
 * store and the client learns why. */
#ifndef LIND_DAEMON_CONN_H
#define LIND_DAEMON_CONN_H

#include <stdint.h>
#include <msgpack.h>
#include <uv.h>
#include "daemon/msg.h"
#include "daemon/server.h"

typedef struct conn {
    union {                    /* first: the handle's address is the conn's */
        uv_stream_t stream;
        uv_pipe_t   pipe;      /* the Unix socket */
        uv_tcp_t    tcp;       /* --listen */
    } h;
    int       gated;           /* TCP with a token: nothing but a hello carrying it until one did */
    server   *srv;
    uint64_t  id;
    uint8_t  *in;              /* bytes read, not yet a complete message */
    size_t    in_len, in_cap;
    msgpack_sbuffer pend;      /* output not yet handed to a write */
    msgpack_sbuffer wbuf;      /* output of the write in flight */
    uv_write_t wreq;
    uv_shutdown_t sreq;
    int       writing, paused, closed;
    int       closing;         /* CONN_LINGER or CONN_FLUSH_CLOSE once set */
    int       shut;            /* write side shut down (lingering) */
    size_t    discarded;       /* input thrown away while lingering */
    int       inflight;        /* requests sent on to other threads, not yet answered */
    uint64_t *ids;             /* open-addressing set of their request ids (0 = empty slot) */
    uint64_t *idb;             /* [ids_cap] the message bytes of each id in flight */
    size_t    inflight_bytes;  /* their sum */
    int       reading;         /* uv_read_start is on */
    int       held;            /* a complete message waits for the byte budget */
    int       starved;         /* reading stopped for the byte budget (srv->starved counts) */
    uint64_t  last_in_ms;      /* last request or final answer (uv_now) */
    uint64_t  last_out_ms;     /* last write completed, or output queued onto none */
    uint64_t  paused_ms;       /* when the connection paused */
    int       pause_cancelled; /* its turns were cancelled for --pause-timeout */
    uint32_t  ids_cap, ids_n;
} conn;

#define CONN_FD_RESERVE 16      /* descriptors kept free for the store and the loop */
#define CONN_SMALL_BYTES (32u << 10)    /* a connection under this many bytes always reads */
#define CONN_HELLO_MS   10000   /* a gated TCP connection without its hello is closed after this */

typedef struct conn_table {
    conn   **v;
    uint32_t cap, count;
    uint64_t seq;
} conn_table;

int   conn_table_init(conn_table *t);
void  conn_table_free(conn_table *t);
conn *conn_lookup(conn_table *t, uint64_t id);

/* Accept a pending connection on a listener: the Unix socket's, or the TCP
 * one (tcp: TCP_NODELAY, and the token gate when srv->tcp_token is set). */
int   conn_accept(server *srv, uv_stream_t *listener, int tcp);
/* Queue bytes for the client (the events of one outmsg). */
void  conn_send(conn *c, const char *data, size_t len);
/* Queue an `error` event answering request id (0: the connection's own). */
void  conn_send_error(conn *c, uint64_t id, proto_code code, const char *msg);
/* Deliver an outmsg from another thread (frees it). */
void  conn_deliver(server *srv, outmsg *o);
/* Close now (turns are cancelled by the compute thread). */
void  conn_close(conn *c);
/* Answers of `len` bytes could not be queued (out of memory): log it and
 * close, so the client sees the connection end rather than wait forever. */
void  conn_out_of_memory(conn *c, size_t len);
/* After a fatal input error: write what is pending (the error), shut the
 * write side, and read-and-discard until the client closes (a bounded
 * amount), so the client reads the error instead of a connection reset. */
#define CONN_LINGER      1
/* At shutdown: stop reading, close once pending output is written. */
#define CONN_FLUSH_CLOSE 2
void  conn_close_after_flush(conn *c, int how);
/* Unsent output bytes (pending + in flight). */
size_t conn_unsent(const conn *c);
/* Answer a just-accepted connection with a `limit` error on id 0 naming the
 * open-file limit, log it, and close it once written. */
void  conn_refuse_fd_limit(conn *c, long long limit);
/* Log a refused connection to stderr, at most one line a second (with the
 * number refused meanwhile). */
void  conn_log_refusal(const char *why);
/* Apply the timeouts (loop thread, every 250 ms). */
void  conn_tick(server *srv);

/* Bytes held for clients outside these connections (the HTTP front door's
 * request bodies and buffered output, daemon/http.c) in the same
 * --max-total-bytes budget: `inflight` of `bytes` are request bytes in
 * flight (they end by themselves), the rest output waiting for a client.
 * conn_budget_sub gives them back and lets connections waiting for the
 * budget read again. Loop thread only. */
void  conn_budget_add(server *srv, size_t bytes, size_t inflight);
void  conn_budget_sub(server *srv, size_t bytes, size_t inflight);
/* Is the budget spent (every byte counted, over --max-total-bytes)? */
int   conn_budget_over(const server *srv);

#endif
