/* tests/fault_vfs.c — see fault_vfs.h. */
#include "tests/fault_vfs.h"

#include <sqlite3.h>
#include <stddef.h>

typedef struct ffile {
    sqlite3_file base;
    sqlite3_file *real;   /* follows this struct in the same block */
} ffile;

static sqlite3_vfs *real_vfs;
static sqlite3_vfs fault_vfs;
static sqlite3_io_methods fault_io;
static fault_vfs_hook hook;

#define REAL(f) (((ffile *)(f))->real)
static int f_close(sqlite3_file *f) { return REAL(f)->pMethods->xClose(REAL(f)); }
static int f_read(sqlite3_file *f, void *b, int n, sqlite3_int64 o)
{ return REAL(f)->pMethods->xRead(REAL(f), b, n, o); }
static int f_write(sqlite3_file *f, const void *b, int n, sqlite3_int64 o)
{
    int rc = hook('w');
    return rc ? rc : REAL(f)->pMethods->xWrite(REAL(f), b, n, o);
}
static int f_truncate(sqlite3_file *f, sqlite3_int64 n)
{
    int rc = hook('t');
    return rc ? rc : REAL(f)->pMethods->xTruncate(REAL(f), n);
}
static int f_sync(sqlite3_file *f, int fl)
{
    int rc = hook('s');
    return rc ? rc : REAL(f)->pMethods->xSync(REAL(f), fl);
}
static int f_size(sqlite3_file *f, sqlite3_int64 *n) { return REAL(f)->pMethods->xFileSize(REAL(f), n); }
static int f_lock(sqlite3_file *f, int l) { return REAL(f)->pMethods->xLock(REAL(f), l); }
static int f_unlock(sqlite3_file *f, int l) { return REAL(f)->pMethods->xUnlock(REAL(f), l); }
static int f_check(sqlite3_file *f, int *r) { return REAL(f)->pMethods->xCheckReservedLock(REAL(f), r); }
static int f_fcntl(sqlite3_file *f, int op, void *a) { return REAL(f)->pMethods->xFileControl(REAL(f), op, a); }
static int f_sector(sqlite3_file *f) { return REAL(f)->pMethods->xSectorSize(REAL(f)); }
static int f_devchar(sqlite3_file *f) { return REAL(f)->pMethods->xDeviceCharacteristics(REAL(f)); }
static int f_shmmap(sqlite3_file *f, int i, int sz, int ext, void volatile **p)
{ return REAL(f)->pMethods->xShmMap(REAL(f), i, sz, ext, p); }
static int f_shmlock(sqlite3_file *f, int o, int n, int fl)
{ return REAL(f)->pMethods->xShmLock(REAL(f), o, n, fl); }
static void f_shmbarrier(sqlite3_file *f) { REAL(f)->pMethods->xShmBarrier(REAL(f)); }
static int f_shmunmap(sqlite3_file *f, int del) { return REAL(f)->pMethods->xShmUnmap(REAL(f), del); }
static int f_fetch(sqlite3_file *f, sqlite3_int64 o, int n, void **p)
{ return REAL(f)->pMethods->xFetch(REAL(f), o, n, p); }
static int f_unfetch(sqlite3_file *f, sqlite3_int64 o, void *p)
{ return REAL(f)->pMethods->xUnfetch(REAL(f), o, p); }

static int f_open(sqlite3_vfs *v, const char *name, sqlite3_file *f, int flags, int *out)
{
    (void)v;
    ffile *p = (ffile *)f;
    p->real = (sqlite3_file *)(p + 1);
    int rc = real_vfs->xOpen(real_vfs, name, p->real, flags, out);
    p->base.pMethods = p->real->pMethods ? &fault_io : NULL;
    return rc;
}

int fault_vfs_install(const char *name, fault_vfs_hook h)
{
    real_vfs = sqlite3_vfs_find(NULL);
    if (!real_vfs || real_vfs->iVersion < 2) return -1;
    hook = h;
    fault_vfs = *real_vfs;
    fault_vfs.zName = name;
    fault_vfs.szOsFile = (int)sizeof(ffile) + real_vfs->szOsFile;
    fault_vfs.xOpen = f_open;
    fault_io = (sqlite3_io_methods){
        .iVersion = 3, .xClose = f_close, .xRead = f_read, .xWrite = f_write,
        .xTruncate = f_truncate, .xSync = f_sync, .xFileSize = f_size, .xLock = f_lock,
        .xUnlock = f_unlock, .xCheckReservedLock = f_check, .xFileControl = f_fcntl,
        .xSectorSize = f_sector, .xDeviceCharacteristics = f_devchar, .xShmMap = f_shmmap,
        .xShmLock = f_shmlock, .xShmBarrier = f_shmbarrier, .xShmUnmap = f_shmunmap,
        .xFetch = f_fetch, .xUnfetch = f_unfetch,
    };
    return sqlite3_vfs_register(&fault_vfs, 1) == SQLITE_OK ? 0 : -1;
}
