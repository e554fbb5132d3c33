/* daemon/ops.c — the data columns of the op table. See ops.h. */
#include "daemon/ops.h"

#include <string.h>

const op_row op_table[OP_COUNT] = {
#define ROW(E, name, decode, entry, compute, store, spread, nodev) [OP_##E] = { name, entry, spread, nodev },
    LIND_OPS(ROW)
#undef ROW
};

proto_op op_by_name(const char *name, size_t len)
{
    for (int op = 1; op < OP_COUNT; op++)
        if (strlen(op_table[op].name) == len && memcmp(op_table[op].name, name, len) == 0) return (proto_op)op;
    return OP_NONE;
}

const char *op_name(proto_op op)
{
    return op > OP_NONE && op < OP_COUNT ? op_table[op].name : "?";
}
