/* daemon/commands.h — where each request goes (loop thread).
 *
 * `hello` is answered on the spot from facts fixed at start-up; `list`,
 * `export` and `stats` go to the store thread; everything that touches a
 * session's live state (generate, append, cancel, info, delete, fork,
 * import) goes to the compute thread, which owns the sessions and forwards
 * to the store thread what needs it. During shutdown every op but `hello`
 * gets `shutting_down`. */
#ifndef LIND_DAEMON_COMMANDS_H
#define LIND_DAEMON_COMMANDS_H

#include <stdint.h>
#include "daemon/conn.h"
#include "daemon/protocol.h"

/* Takes over req's buffers (req is left empty). t_recv: clock_mono_ns() at arrival. */
void commands_dispatch(server *srv, conn *c, proto_request *req, uint64_t t_recv);

#endif
