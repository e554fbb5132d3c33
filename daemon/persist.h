/* daemon/persist.h — the store threads: every store call of the daemon.
 *
 * --store-conns N store connections, each with its own thread, serve in
 * arrival order: loads for the compute thread, saves of finished turns, and
 * the session admin ops (list, info, delete, fork, export, import) plus
 * stats. With N > 1 a dispatcher thread hands each message to the
 * connection of its session (a hash of the name), so one session's loads,
 * saves and ops stay in order while a slow round trip for one session does
 * not hold up the others; list, stats and fork, which read more than one
 * session, run on connection 0 once every connection has finished what
 * came before them (the others wait meanwhile). Saves that queue up on a
 * connection while a commit runs are committed together in one transaction
 * (grouped commit); each turn's `done` (or `result` for append) is sent
 * only after its commit returned, and the compute thread is told so that
 * the session stops being busy.
 *
 * Ownership (docs/SCALE.md): a load first takes the session's lease for
 * the node (srv->node_id, --lease-ms), waiting up to --lease-wait for
 * another node's, else answering LIND_E_MOVED naming the holder; each
 * connection renews its leases every third of --lease-ms and tells the
 * compute thread of a lease found lost (M_LEASE_LOST); M_RELEASE gives one
 * back, and every lease is given back at stop. Every save is versioned
 * against the version the session was loaded at and fenced by the lease: a
 * refused one is answered `conflict`. A delete takes the lease too. */
#ifndef LIND_DAEMON_PERSIST_H
#define LIND_DAEMON_PERSIST_H

#include "daemon/server.h"
#include "state/store.h"

typedef struct persist persist;

/* Start the threads: st becomes connection 0 (taken over, closed on
 * failure too); connections 1..N-1 are opened here. 0, or a negative code
 * with err filled. */
int  persist_start(server *srv, store *st, persist **out, char *err, size_t errlen);
/* Wait for the threads to end (after M_STOP); they close the stores. */
void persist_join(persist *p);

#endif
