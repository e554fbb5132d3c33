/* recurrent/file.c — see file.h. */
#include "recurrent/file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int file_read(const char *path, size_t max, char **out, size_t *len, char *err, size_t errlen)
{
    *out = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) {
        int e = errno;
        snprintf(err, errlen, "%s: %s", path, strerror(e));
        return -e;
    }
    char *buf = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    for (;;) {
        if (n + 1 >= cap) {   /* room for one more byte than max, and the NUL */
            size_t want = cap ? cap * 2 : 16384;
            if (max && want > max + 2) want = max + 2;
            if (want <= cap) { rc = -EFBIG; break; }
            char *nb = realloc(buf, want);
            if (!nb) { rc = -ENOMEM; break; }
            buf = nb;
            cap = want;
        }
        size_t r = fread(buf + n, 1, cap - 1 - n, f);
        n += r;
        if (max && n > max) { rc = -EFBIG; break; }
        if (r == 0) break;
    }
    if (!rc && ferror(f)) rc = errno ? -errno : -EIO;
    fclose(f);
    if (rc) {
        free(buf);
        if (rc == -EFBIG) snprintf(err, errlen, "%s: over %zu bytes", path, max);
        else if (rc == -ENOMEM) snprintf(err, errlen, "%s: out of memory", path);
        else snprintf(err, errlen, "%s: %s", path, strerror(-rc));
        return rc;
    }
    buf[n] = 0;
    *out = buf;
    *len = n;
    return 0;
}
