/* daemon/errors.h — the daemon's one table of error codes.
 *
 * Inside the daemon an error is an int: 0, a negated errno (the store's
 * -ENOENT, -EEXIST, -EINVAL, -EBUSY, -ENOSPC, -EIO, -ESTALE; -EBADMSG for
 * export bytes that are not an export; -ENOMEM, ...), or a state-format code
 * STATE_E_* (state/format.h). On the wire it is one of the stable
 * proto_code names (docs/PROTOCOL.md, "Errors"). This table is the one place
 * that relates the two: lind_wire_code() maps any internal code to its wire
 * code, lind_strerror() names it. Codes not in the table map to `internal`
 * and are named by strerror(). */
#ifndef LIND_DAEMON_ERRORS_H
#define LIND_DAEMON_ERRORS_H

#include "daemon/protocol.h"

/* Ownership on a shared store (docs/SCALE.md), daemon codes apart from
 * errno's and STATE_E_*: another node holds the session's lease (the store's
 * -EAGAIN from a lease acquire), and a turn whose save was refused because
 * this node lost the lease or the stored session moved past the version it
 * loaded (the store's -ENOLCK / -ECANCELED from a versioned save). */
#define LIND_E_MOVED    (-4201)
#define LIND_E_CONFLICT (-4202)
#define LIND_E_QUOTA    (-4203)   /* the store is past --max-store-bytes (retention) */

/* The wire code for an internal code (0 gives PE_OK). */
proto_code  lind_wire_code(int code);
/* A short description of an internal code (static storage). */
const char *lind_strerror(int code);

/* The table, for tests and documentation: n entries. */
typedef struct lind_error {
    int         code;       /* internal code */
    proto_code  wire;       /* what a client sees */
    const char *text;       /* lind_strerror() */
} lind_error;
const lind_error *lind_error_table(size_t *n);

#endif
