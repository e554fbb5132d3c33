/* daemon/reserve.c — see reserve.h. */
#include "daemon/reserve.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

void reserve_init(reserve *r, const char *db, int shared)
{
    r->path[0] = 0;
    if (shared || !db) return;
    if (!strncmp(db, "sqlite:", 7)) db += 7;
    if (strlen(db) + sizeof "-reserve" <= sizeof r->path)
        snprintf(r->path, sizeof r->path, "%s-reserve", db);
}

int reserve_fill(const reserve *r)
{
    if (!r->path[0]) return 0;
    struct stat st;
    if (stat(r->path, &st) == 0 && st.st_size >= (off_t)RESERVE_BYTES &&
        (off_t)st.st_blocks * 512 >= (off_t)RESERVE_BYTES)
        return 0;
    int fd = open(r->path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) return -errno;
    /* posix_fallocate allocates the blocks (falling back to writing zeros
     * where the filesystem cannot), so the space is really taken. */
    int rc = 0, first = 0;
    for (off_t n = (off_t)RESERVE_BYTES; n >= (off_t)RESERVE_MIN; n /= 2) {
        if (ftruncate(fd, 0) != 0) { rc = errno; break; }
        rc = posix_fallocate(fd, 0, n);
        if (rc == 0 && fsync(fd) != 0) rc = errno;
        if (!first) first = rc;
        if (rc != ENOSPC) break;
    }
    close(fd);
    if (rc != 0) {
        unlink(r->path);
        return -rc;
    }
    return -first;
}

/* Free bytes on the reserve's filesystem, or a negated errno. */
static long long disk_free(const reserve *r)
{
    char dir[sizeof r->path];
    snprintf(dir, sizeof dir, "%s", r->path);
    char *slash = strrchr(dir, '/');
    if (slash) *(slash == dir ? slash + 1 : slash) = 0;
    else snprintf(dir, sizeof dir, ".");
    struct statvfs vfs;
    if (statvfs(dir, &vfs) != 0) return -errno;
    return (long long)vfs.f_bavail * (long long)vfs.f_frsize;
}

int reserve_disk_full(const reserve *r)
{
    if (!r->path[0]) return 0;
    long long f = disk_free(r);
    return f >= 0 && f < (long long)RESERVE_MIN;
}

int reserve_refill(const reserve *r)
{
    if (!r->path[0]) return 0;
    long long f = disk_free(r);
    if (f < 0) return (int)f;
    if (f < 2ll * RESERVE_BYTES) return -ENOSPC;
    int rc = reserve_fill(r);
    if (rc != 0) unlink(r->path);   /* not a part of one */
    return rc;
}

int reserve_release(const reserve *r)
{
    return r->path[0] && unlink(r->path) == 0;
}
