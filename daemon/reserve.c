/* daemon/reserve.c — see reserve.h. */
#include "daemon/reserve.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
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
    int rc = posix_fallocate(fd, 0, (off_t)RESERVE_BYTES);
    if (rc == 0 && fsync(fd) != 0) rc = errno;
    close(fd);
    if (rc != 0) {
        unlink(r->path);
        return -rc;
    }
    return 0;
}

int reserve_release(const reserve *r)
{
    return r->path[0] && unlink(r->path) == 0;
}
