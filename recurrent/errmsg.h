/* recurrent/errmsg.h — the one helper behind "errors are values".
 *
 * Library functions return 0 or a negative code and, when the caller passed a
 * buffer, describe the failure in it. errmsg_set() does both in one
 * expression: `return errmsg_set(-EINVAL, err, errlen, "tensor %s: ...", n);`
 * The engine (recurrent/) and the state modules (state/) share it. */
#ifndef LIND_RECURRENT_ERRMSG_H
#define LIND_RECURRENT_ERRMSG_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

__attribute__((format(printf, 4, 5)))
static inline int errmsg_set(int code, char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return code;
}

#endif
