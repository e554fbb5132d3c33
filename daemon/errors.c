/* daemon/errors.c — see errors.h. */
#include "daemon/errors.h"

#include <errno.h>
#include <string.h>
#include "state/format.h"

static const lind_error table[] = {
    /* the store (state/store.h) */
    { -ENOENT,    PE_NOT_FOUND, "no such session" },
    { -EEXIST,    PE_EXISTS,    "the name is taken" },
    { -EINVAL,    PE_BAD_REQUEST, "invalid name or argument" },
    { -EBADMSG,   PE_BAD_STATE, "not a valid export" },
    { -EBUSY,     PE_IO,        "the database stayed locked past the busy timeout" },
    { -ENOSPC,    PE_INSUFFICIENT_STORAGE, "the store's disk is full" },
    { -EIO,       PE_IO,        "the store failed" },
    { -ESTALE,    PE_IO,        "the database file was removed or replaced under the server" },
    /* several nodes on one store (docs/SCALE.md) */
    { LIND_E_MOVED,    PE_MOVED,    "the session is leased by another node" },
    { LIND_E_CONFLICT, PE_CONFLICT, "the session changed in the store or its lease was lost; the turn was not saved" },
    /* retention (docs/STATE.md) */
    { LIND_E_QUOTA,    PE_INSUFFICIENT_STORAGE, "the store is past --max-store-bytes; new turns are refused" },
    /* the daemon itself */
    { -ENOMEM,    PE_INTERNAL,  "out of memory" },
    { -ENOSYS,    PE_INTERNAL,  "operation routed to the wrong thread" },
    { -EOVERFLOW, PE_INTERNAL,  "the tokenizer held back more text than a session keeps" },
    { -ECANCELED, PE_INTERNAL,  "cancelled" },
    { -EAGAIN,    PE_LIMIT,     "a server limit was reached" },
    /* state blobs (state/format.h) */
    { STATE_E_MAGIC,     PE_BAD_STATE, "not a lind state" },
    { STATE_E_VERSION,   PE_BAD_STATE, "state written by a newer lind" },
    { STATE_E_ENDIAN,    PE_BAD_STATE, "state of another byte order" },
    { STATE_E_MODEL,     PE_BAD_STATE, "state of another model" },
    { STATE_E_CHECKSUM,  PE_BAD_STATE, "state checksum mismatch" },
    { STATE_E_TRUNCATED, PE_BAD_STATE, "state truncated" },
    { STATE_E_NONFINITE, PE_BAD_STATE, "state holds NaN or Inf" },
    { STATE_E_INVALID,   PE_BAD_STATE, "state field out of range" },
};

const lind_error *lind_error_table(size_t *n)
{
    *n = sizeof table / sizeof *table;
    return table;
}

static const lind_error *find(int code)
{
    for (size_t i = 0; i < sizeof table / sizeof *table; i++)
        if (table[i].code == code) return &table[i];
    return NULL;
}

proto_code lind_wire_code(int code)
{
    if (code == 0) return PE_OK;
    const lind_error *e = find(code);
    return e ? e->wire : PE_INTERNAL;
}

const char *lind_strerror(int code)
{
    if (code == 0) return "ok";
    const lind_error *e = find(code);
    if (e) return e->text;
    return code < 0 && code > -4096 ? strerror(-code) : "unknown error";
}
