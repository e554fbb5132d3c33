/* daemon/msg.c — constructors and destructors of the inter-thread messages. */
#include "daemon/msg.h"
#include "kernels/clock.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

dmsg *dmsg_new(dmsg_kind kind, uint64_t conn)
{
    dmsg *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    m->kind = kind;
    m->conn = conn;
    return m;
}

void dmsg_free(dmsg *m)
{
    if (!m) return;
    op_request_free(&m->req);
    store_loaded_free(&m->loaded);
    free(m->state);
    free(m->transcript);
    free(m->rinfo.transcript);
    free(m->replay);
    free(m);
}

outmsg *outmsg_new(uint64_t conn)
{
    outmsg *o = calloc(1, sizeof *o);
    if (!o) return NULL;
    o->conn = conn;
    evlist_init(&o->ev);
    return o;
}

void outmsg_free(outmsg *o)
{
    if (!o) return;
    evlist_free(&o->ev);
    free(o);
}

outmsg *outmsg_error(uint64_t conn, uint64_t id, proto_code code, const char *fmt, ...)
{
    outmsg *o = outmsg_new(conn);
    if (!o) return NULL;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (evlist_error(&o->ev, id, code, msg) != 0) {
        outmsg_free(o);
        return NULL;
    }
    o->finals = 1;
    return o;
}

