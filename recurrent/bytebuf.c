/* recurrent/bytebuf.c — see bytebuf.h. */
#include "recurrent/bytebuf.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int bytebuf_reserve(bytebuf *b, size_t more)
{
    if (b->p && b->n + more + 1 <= b->cap) return 0;
    if (more > (size_t)-1 / 4 - b->n) return -ENOMEM;
    size_t nc = b->cap ? b->cap : 256;
    while (nc < b->n + more + 1) nc *= 2;
    char *np = realloc(b->p, nc);
    if (!np) return -ENOMEM;
    b->p = np;
    b->cap = nc;
    return 0;
}

int bytebuf_put(bytebuf *b, const void *p, size_t n)
{
    if (bytebuf_reserve(b, n)) return -ENOMEM;
    if (n) memcpy(b->p + b->n, p, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

void bytebuf_free(bytebuf *b)
{
    free(b->p);
    memset(b, 0, sizeof *b);
}
