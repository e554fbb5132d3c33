/* daemon/commands.h — where each request goes (loop thread).
 *
 * The op table's entry column (daemon/ops.h) decides: `hello` is answered
 * on the spot from facts fixed at start-up; `stats` and `gc` go straight to
 * the store threads; everything else goes to the compute thread, which owns
 * the sessions and forwards to the store threads what needs them. During
 * shutdown every op but `hello` gets `shutting_down`; past --max-inflight,
 * `limit`. */
#ifndef LIND_DAEMON_COMMANDS_H
#define LIND_DAEMON_COMMANDS_H

#include <stdint.h>
#include "daemon/conn.h"
#include "daemon/protocol.h"

/* A socket connection's request. Takes over req's buffers (req is left
 * empty). t_recv: clock_mono_ns() at arrival. */
void commands_dispatch(server *srv, conn *c, op_request *req, uint64_t t_recv);

/* The one way into the other threads, for both doors (the socket above,
 * HTTP's request stages): req (taken over, left empty; its limits checked
 * where it was decoded) goes to the thread its op enters by, for connection
 * id conn. 0, or -ENOMEM (req freed, nothing sent). The socket refuses new
 * requests while the server stops; HTTP stops taking them at its door, and
 * the further steps of one already taken go on. */
int commands_submit(server *srv, uint64_t conn, op_request *req, uint64_t t_recv);

#endif
