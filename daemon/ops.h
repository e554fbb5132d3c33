/* daemon/ops.h — the protocol's ops, one row each (docs/PROTOCOL.md).
 *
 * A row says everything the daemon does with an op, in columns:
 *   E        the enum (OP_E)
 *   name     the op on the wire
 *   decode   its fields' decoder (protocol.c)
 *   entry    who takes a decoded request first: the loop answers it
 *            (hello), or it goes to the compute thread, or straight to the
 *            store threads (what needs no session state: stats, gc)
 *   compute  its handler on the compute thread (scheduler.c), 0: none
 *   store    its handler on a store thread (persist.c), 0: none
 *   spread   how the store threads take it: the thread of its session's
 *            name (saves of one session stay in order, loads see them), or
 *            all of them through a barrier (an op over every session, or
 *            fork, which reads one session and writes another)
 *   nodev    1: served when the compute device is lost (the store still
 *            answers, so sessions can be saved elsewhere; `unavailable`)
 *
 * Each of protocol.c, scheduler.c and persist.c expands its own column into
 * a table of its own (static) functions, so adding an op is one row here,
 * its handlers, and its docs; nothing else switches on the op.
 *
 * Requests reach the store threads in the order they arrived only if they
 * all pass the same way: that is why list and export enter through the
 * compute thread (a delete or fork before them is seen by them), while
 * stats and gc, which read no session, go straight to the store. */
#ifndef LIND_DAEMON_OPS_H
#define LIND_DAEMON_OPS_H

#include <stddef.h>

typedef enum op_entry { ENTER_LOOP, ENTER_COMPUTE, ENTER_STORE } op_entry;
typedef enum op_spread { SPREAD_NAME, SPREAD_ALL } op_spread;

/*  X(E,        name,       decode,          entry,         compute,            store,     spread,      nodev) */
#define LIND_OPS(X) \
    X(HELLO,    "hello",    decode_hello,    ENTER_LOOP,    0,                  0,         SPREAD_NAME, 1) \
    X(GENERATE, "generate", decode_generate, ENTER_COMPUTE, start_turn_request, 0,         SPREAD_NAME, 0) \
    X(APPEND,   "append",   decode_append,   ENTER_COMPUTE, start_turn_request, 0,         SPREAD_NAME, 0) \
    X(CANCEL,   "cancel",   decode_cancel,   ENTER_COMPUTE, cancel_request,     0,         SPREAD_NAME, 0) \
    X(INFO,     "info",     decode_session,  ENTER_COMPUTE, info_request,       do_info,   SPREAD_NAME, 0) \
    X(LIST,     "list",     decode_none,     ENTER_COMPUTE, forward,            do_list,   SPREAD_ALL,  1) \
    X(DELETE,   "delete",   decode_session,  ENTER_COMPUTE, delete_request,     do_delete, SPREAD_NAME, 0) \
    X(FORK,     "fork",     decode_fork,     ENTER_COMPUTE, create_request,     do_fork,   SPREAD_ALL,  0) \
    X(EXPORT,   "export",   decode_session,  ENTER_COMPUTE, forward,            do_export, SPREAD_NAME, 1) \
    X(IMPORT,   "import",   decode_import,   ENTER_COMPUTE, create_request,     do_import, SPREAD_NAME, 0) \
    X(STATS,    "stats",    decode_none,     ENTER_STORE,   0,                  do_stats,  SPREAD_ALL,  1) \
    X(GC,       "gc",       decode_none,     ENTER_STORE,   0,                  do_gc,     SPREAD_ALL,  1) \
    X(UNDO,     "undo",     decode_session,  ENTER_COMPUTE, undo_request,       0,         SPREAD_NAME, 0)

typedef enum proto_op {
    OP_NONE = 0,   /* not an op: a request not (yet) decoded */
#define LIND_OP_ENUM(E, name, decode, entry, compute, store, spread, nodev) OP_##E,
    LIND_OPS(LIND_OP_ENUM)
#undef LIND_OP_ENUM
    OP_COUNT
} proto_op;
#define OP_LAST (OP_COUNT - 1)   /* checks over every op end here */

/* The data columns, indexed by op (OP_NONE's row is empty). */
typedef struct op_row {
    const char *name;
    op_entry    entry;
    op_spread   spread;
    int         nodev;
} op_row;
extern const op_row op_table[OP_COUNT];

/* The op named name[0..len) on the wire, or OP_NONE. */
proto_op op_by_name(const char *name, size_t len);
/* The wire name of op, "?" for none. */
const char *op_name(proto_op op);

#endif
