/* daemon/reserve.h — the disk reserve of an SQLite store: a file of
 * RESERVE_BYTES beside the database (PATH-reserve) that `lind serve` keeps
 * while it can, and removes when the disk is full, so that what frees
 * space (delete, collection) and a restart (whose open ends with a small
 * commit) still find room for SQLite's log (docs/STATE.md, "A full disk").
 * A PostgreSQL store has none: its disk is the server's. */
#ifndef LIND_DAEMON_RESERVE_H
#define LIND_DAEMON_RESERVE_H

#include <stddef.h>

#define RESERVE_BYTES (1u << 20)

typedef struct reserve {
    char path[1100];          /* "" : no reserve (PostgreSQL, or a path too long) */
} reserve;

/* Where the reserve of the SQLite store at db lives (shared: none). */
void reserve_init(reserve *r, const char *db, int shared);
/* Make sure the reserve holds RESERVE_BYTES (allocated blocks, not a hole).
 * 0, or a negated errno (-ENOSPC: the disk has no room for it; nothing is
 * left behind). */
int  reserve_fill(const reserve *r);
/* Remove it, giving its space back. 1 when there was one to remove. */
int  reserve_release(const reserve *r);

#endif
