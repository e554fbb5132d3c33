/* daemon/persist.h — the store thread: every SQLite call of the daemon.
 *
 * It takes the store handle over at start and serves, in arrival order:
 * loads for the compute thread, saves of finished turns, and the session
 * admin ops (list, info, delete, fork, export, import) plus stats. Saves that
 * queue up while a commit runs are committed together in one transaction
 * (grouped commit); each turn's `done` (or `result` for append) is sent
 * only after its commit returned, and the compute thread is told so that
 * the session stops being busy. */
#ifndef LIND_DAEMON_PERSIST_H
#define LIND_DAEMON_PERSIST_H

#include "daemon/server.h"
#include "state/store.h"

typedef struct persist persist;

int  persist_start(server *srv, store *st, persist **out);
/* Wait for the thread to end (after M_STOP); it closes the store. */
void persist_join(persist *p);

#endif
