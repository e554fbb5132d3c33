/* daemon/reserve.h — the disk reserve of an SQLite store: a file of
 * RESERVE_BYTES beside the database (PATH-reserve) that `lind serve` keeps
 * while it can, and removes when the disk is full, so that what frees
 * space (delete, collection) and a restart (whose open ends with a small
 * commit) still find room for SQLite's log (docs/STATE.md, "A full disk").
 * A PostgreSQL store has none: its disk is the server's. */
#ifndef LIND_DAEMON_RESERVE_H
#define LIND_DAEMON_RESERVE_H

#include <stddef.h>

/* Twice SQLite's default checkpoint threshold (1,000 pages of 4 KiB):
 * once released, room for a checkpoint to move a full log into the
 * database and for the deletes that free space. */
#define RESERVE_BYTES (8u << 20)
#define RESERVE_MIN   (128u << 10)

typedef struct reserve {
    char path[1100];          /* "" : no reserve (PostgreSQL, or a path too long) */
} reserve;

/* Where the reserve of the SQLite store at db lives (shared: none). */
void reserve_init(reserve *r, const char *db, int shared);
/* Make sure the reserve holds RESERVE_BYTES (allocated blocks, not a hole).
 * 0, or a negated errno: -ENOSPC when the disk has no room for all of it,
 * in which case the largest of RESERVE_BYTES / 2^k (down to RESERVE_MIN)
 * that fits is kept. */
int  reserve_fill(const reserve *r);
/* Make it again after a full disk, only when the disk then still has as
 * much free again (room for the log to grow): 0 made, -ENOSPC not (none
 * is left behind), or another negated errno. */
int  reserve_refill(const reserve *r);
/* 1 when the disk holding the reserve has less than RESERVE_MIN free (an
 * open that failed with an I/O error there may have found no room: SQLite
 * reports a -shm it cannot grow as one). */
int  reserve_disk_full(const reserve *r);
/* Remove it, giving its space back. 1 when there was one to remove. */
int  reserve_release(const reserve *r);

#endif
