/* recurrent/file.h — the project's one whole-file reader (model and
 * tokenizer configs, chat templates, --config files, the offline commands'
 * inputs). Below the daemon and lindctl so that every layer above shares it. */
#ifndef LIND_RECURRENT_FILE_H
#define LIND_RECURRENT_FILE_H

#include <stddef.h>

/* Read all of path into *out (malloc'd, owned by the caller, one NUL byte
 * past the *len bytes read, so text can be used as a C string). max: the
 * most bytes accepted (0: no limit); a longer file is -EFBIG ("PATH: over
 * MAX bytes"). Returns 0, or -errno with a message naming the file in err:
 * -ENOENT when it does not exist (callers for which absent is normal test
 * for it), -EISDIR, -EACCES, -EIO, -ENOMEM. *out is NULL on error. */
int file_read(const char *path, size_t max, char **out, size_t *len, char *err, size_t errlen);

#endif
