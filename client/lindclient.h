/* client/lindclient.h — the C client library for lind's wire protocol v1
 * (docs/PROTOCOL.md), used by lindctl and the tests; any C program can
 * include it and link liblindclient.a with -lmsgpackc.
 *
 * A `lindc` is one connection to a `lind serve` Unix socket. Requests are
 * msgpack maps built with a `lindc_req` (or the convenience senders below);
 * the library picks each request's `id`. Many requests may be in flight at
 * once; their events interleave and come back either
 *   - one at a time through the iterator lindc_next() (any request) or
 *     lindc_wait() (one request; events of others are queued, not lost), or
 *   - through a callback driven by lindc_run().
 * lindc_call() is the synchronous shortcut for one-event operations (info,
 * list, stats, ...).
 *
 * Errors are values: every function returning int returns 0 on success or a
 * negative code: a negated errno (-ENOENT, -ECONNREFUSED, -ETIMEDOUT, -EINTR,
 * -ENOMEM, -EINVAL, ...) or one of the LINDC_E* codes below. lindc_strerror()
 * names any of them. An `error` *event* from the server is not a library
 * error for lindc_next()/lindc_wait()/lindc_run() (it is an event like any
 * other); lindc_call() returns LINDC_ESERVER for it and the event carries
 * the server's `code` and `message`.
 *
 * Threading: a lindc is used by one thread at a time. The library installs
 * no signal handlers; a signal arriving while it waits makes the waiting
 * call return -EINTR (when the handler was installed without SA_RESTART),
 * so a program can react to Ctrl-C mid-stream. */
#ifndef LIND_CLIENT_LINDCLIENT_H
#define LIND_CLIENT_LINDCLIENT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <msgpack.h>

#define LINDC_PROTOCOL 1

/* Library error codes (beyond negated errno values). */
enum {
    LINDC_ECLOSED = -20001,  /* the server closed the connection */
    LINDC_EPROTO  = -20002,  /* the server sent bytes that break the protocol */
    LINDC_ESERVER = -20003,  /* lindc_call(): the request ended with an `error` event */
    LINDC_EBROKEN = -20004,  /* the connection failed earlier; reconnect */
};

/* Largest message the library accepts from a server (an export of a large
 * state fits many times over). */
#define LINDC_MAX_MESSAGE (256u << 20)

typedef struct lindc lindc;

typedef enum lindc_event_kind {
    LINDC_EV_RESULT,   /* `result`: the op's fields are in `map` */
    LINDC_EV_TOKEN,    /* `token`: `data`/`len` hold the bytes */
    LINDC_EV_DONE,     /* `done`: generate finished; see lindc_done */
    LINDC_EV_ERROR,    /* `error`: `code` and `message` */
    LINDC_EV_OTHER,    /* an event name this library does not know */
    LINDC_EV_PROGRESS, /* `progress` (asked with lindc_gen_opts.progress): `fed`, `total` in map */
} lindc_event_kind;

/* One event from the server. Everything it points to (map, data, name)
 * belongs to the connection and stays valid until the next call on the
 * same lindc that reads events (lindc_next/lindc_wait/lindc_run/lindc_call)
 * or lindc_free(). Copy what you need to keep. */
typedef struct lindc_event {
    uint64_t id;                /* the request it answers (0: connection-level) */
    lindc_event_kind kind;
    int final;                  /* 1 when this event ends its request */
    char name[24];              /* the `event` string, NUL-terminated */
    const msgpack_object *map;  /* the whole message */
    const uint8_t *data;        /* LINDC_EV_TOKEN: the token bytes */
    size_t len;
    char code[32];              /* LINDC_EV_ERROR: e.g. "not_found" */
    char message[512];          /* LINDC_EV_ERROR: human-readable */
} lindc_event;

/* ---- connection ---------------------------------------------------------- */

/* Connect to the Unix socket at `path`, or over TCP when path is
 * "tcp://HOST:PORT" (lind serve --listen). On success *out is a new client
 * the caller frees with lindc_free(). On failure returns a negated errno
 * (-ENOENT: no socket file; -ECONNREFUSED: nobody listening; -EACCES, ...)
 * and, when err is non-NULL, writes a sentence naming the socket into it. */
int  lindc_connect(lindc **out, const char *path, char *err, size_t errlen);
/* A TCP connection to a daemon with a token (--http-token-file): the first
 * request, a hello carrying it. 0, -EACCES with the daemon's refusal in err
 * (it then closes the connection), or another lindc code. */
int  lindc_hello_token(lindc *c, const char *token, char *err, size_t errlen);
void lindc_free(lindc *c);

int  lindc_fd(const lindc *c);           /* for the caller's own poll() */
/* 1 when an event can be returned without reading the socket (queued, or a
 * complete message already buffered), else 0. Check before poll()ing. */
int  lindc_pending(lindc *c);
/* Number of requests sent whose final event has not been returned yet. */
size_t lindc_in_flight(const lindc *c);
/* The pid of the process at the other end (SO_PEERCRED), or <0. */
pid_t lindc_peer_pid(const lindc *c);

const char *lindc_strerror(int code);

/* ---- requests ------------------------------------------------------------ */

/* A request under construction: `op` plus fields added in order. Owns its
 * buffer; free with lindc_req_free() (sending does not free it). Adding a
 * field never fails visibly: an allocation failure is remembered and
 * reported by lindc_send(). */
typedef struct lindc_req {
    msgpack_sbuffer body;   /* the encoded fields (keys and values) */
    msgpack_packer pk;
    uint32_t nfields;
    int failed;             /* an allocation failed while adding fields */
    char op[32];
} lindc_req;

void lindc_req_init(lindc_req *r, const char *op);
void lindc_req_free(lindc_req *r);
void lindc_req_str(lindc_req *r, const char *key, const char *val);
void lindc_req_bin(lindc_req *r, const char *key, const void *val, size_t len);
void lindc_req_u64(lindc_req *r, const char *key, uint64_t val);
void lindc_req_i64(lindc_req *r, const char *key, int64_t val);
void lindc_req_f64(lindc_req *r, const char *key, double val);
void lindc_req_bool(lindc_req *r, const char *key, int val);
void lindc_req_strv(lindc_req *r, const char *key, const char *const *vals, size_t n);

/* Send `r` with a fresh id (written to *id when id is non-NULL). */
int  lindc_send(lindc *c, const lindc_req *r, uint64_t *id);
/* Write raw bytes to the socket unchanged (for tests of the server's
 * handling of malformed input). Not tracked as a request. */
int  lindc_send_raw(lindc *c, const void *buf, size_t len);

/* Options of a generate request. lindc_gen_opts_init() leaves every
 * optional field at "server default" (not sent). */
typedef struct lindc_gen_opts {
    const char *session;            /* required */
    const void *text;               /* optional text appended first */
    size_t text_len;
    int64_t max_tokens;             /* <0: server default */
    double temperature;             /* <0: server default */
    int64_t top_k;                  /* <0: server default */
    double top_p;                   /* <0: server default */
    double repetition_penalty;      /* <0: server default */
    int64_t repetition_window;      /* <0: server default */
    int has_seed;
    uint64_t seed;
    const char *const *stop;        /* stop strings, NUL-terminated */
    size_t n_stop;
    int progress;                   /* ask for `progress` events while a long text is fed */
    int ignore_eos;                 /* 1: go on past the model's end token, 0: end there;
                                       <0: server default (lind serve --ignore-eos) */
    /* Retries (docs/PROTOCOL.md, "Retries"): a request id (1..64 bytes;
     * NULL: none) makes a retry of a committed turn answer with its
     * recorded result; see lindc_request_id() for a fresh one. */
    const char *request_id;
    int has_if_tokens;              /* refuse (`conflict`) unless the session has if_tokens */
    uint64_t if_tokens;
    uint32_t chat_template;         /* the hash of the chat template the text is framed with
                                       (recurrent/chat.h); 0: raw text, not sent */
} lindc_gen_opts;

/* A fresh request id (random, 32 hex digits) into buf[33]: unique enough
 * that two turns never share one. 0, or a negated errno when no random
 * bytes could be had. */
int  lindc_request_id(char buf[33]);

void lindc_gen_opts_init(lindc_gen_opts *o);
int  lindc_generate(lindc *c, const lindc_gen_opts *o, uint64_t *id);
/* Cancel the generate `target` sent on this connection. */
int  lindc_cancel(lindc *c, uint64_t target, uint64_t *id);
/* Cancel the turn in flight on session `session`, whichever connection sent
 * it (its result says `cancelled`: false when none was in flight). */
int  lindc_cancel_session(lindc *c, const char *session, uint64_t *id);

/* ---- events: iterator ---------------------------------------------------- */

/* Next event of any request. timeout_ms < 0 waits forever; 0 only takes what
 * is already available. Returns 0 with *ev filled, -ETIMEDOUT, -EINTR (a
 * signal interrupted the wait), LINDC_ECLOSED, LINDC_EPROTO, or another
 * negative code; after ECLOSED/EPROTO/an I/O error the connection is dead
 * and later calls return LINDC_EBROKEN. */
int  lindc_next(lindc *c, lindc_event *ev, int timeout_ms);
/* Next event of request `id`; events of other requests that arrive first
 * are kept, in order, for lindc_next(). Same returns as lindc_next(). */
int  lindc_wait(lindc *c, uint64_t id, lindc_event *ev, int timeout_ms);

/* ---- events: callback ---------------------------------------------------- */

/* Called for each event; return 0 to go on, non-zero to make lindc_run()
 * return that value at once. */
typedef int (*lindc_callback)(const lindc_event *ev, void *user);

/* Read events and hand every one (of any request) to cb until the final
 * event of request `id` has been handed over — or, with id 0, until no
 * request is in flight. timeout_ms bounds each wait for the next event.
 * Returns 0, cb's non-zero value, or a negative code as lindc_next(). */
int  lindc_run(lindc *c, uint64_t id, lindc_callback cb, void *user, int timeout_ms);

/* ---- synchronous call ---------------------------------------------------- */

/* Send `r` and wait for its final event (other requests' events are queued
 * for lindc_next). Returns 0 on `result`/`done`, LINDC_ESERVER on `error`
 * (with ev->code/ev->message set), or a negative library code. Meant for
 * single-event ops; token events of a generate are skipped. */
int  lindc_call(lindc *c, const lindc_req *r, lindc_event *ev, int timeout_ms);

/* ---- reading fields of a message ----------------------------------------- */

/* The value under `key` in a map, or NULL (also when map is not a map). */
const msgpack_object *lindc_get(const msgpack_object *map, const char *key);
/* Typed getters: return 0 and set *out, or -ENOENT (absent) / -EINVAL
 * (wrong type). Integers accept either msgpack integer kind in range;
 * lindc_get_f64 also accepts integers. lindc_get_bytes accepts str or bin
 * and points into the message. */
int  lindc_get_u64(const msgpack_object *map, const char *key, uint64_t *out);
int  lindc_get_i64(const msgpack_object *map, const char *key, int64_t *out);
int  lindc_get_f64(const msgpack_object *map, const char *key, double *out);
int  lindc_get_bool(const msgpack_object *map, const char *key, int *out);
int  lindc_get_bytes(const msgpack_object *map, const char *key, const uint8_t **p, size_t *n);
/* Copy a str/bin field into buf as a NUL-terminated string (truncated to
 * fit). Returns 0, -ENOENT, -EINVAL, or -ENOSPC when it was truncated. */
int  lindc_get_strcpy(const msgpack_object *map, const char *key, char *buf, size_t cap);

#endif
