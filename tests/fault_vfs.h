/* tests/fault_vfs.h — the SQLite VFS both fault sweeps share: the store
 * layer's (tests/test_state_faults.c) and the whole daemon's
 * (tests/fault_shim.c, make test-faults). Every file call passes to the VFS
 * that was the default; each xWrite ('w'), xSync ('s') and xTruncate ('t')
 * first asks the hook, which returns 0 to go on or the SQLite error code
 * that call fails with (SQLITE_IOERR_WRITE, SQLITE_FULL, ...). */
#ifndef LIND_TESTS_FAULT_VFS_H
#define LIND_TESTS_FAULT_VFS_H

typedef int (*fault_vfs_hook)(char kind);

/* Register the VFS, named `name`, as the default over the current default.
 * Allocates nothing itself (the daemon's shim calls it before main). 0, or
 * -1 when SQLite has no default VFS of version 2 or more or refuses it. */
int fault_vfs_install(const char *name, fault_vfs_hook hook);

#endif
