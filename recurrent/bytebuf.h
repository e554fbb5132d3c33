/* recurrent/bytebuf.h — the project's one growable byte buffer (HTTP's
 * stream and reply bytes, chat templates' rendering, ...): appended to,
 * always NUL-terminated just past its n bytes once allocated, so text in it
 * reads as a C string. Whoever holds the struct owns p; a zeroed struct is
 * an empty buffer; bytebuf_free gives p back and zeroes it. */
#ifndef LIND_RECURRENT_BYTEBUF_H
#define LIND_RECURRENT_BYTEBUF_H

#include <stddef.h>

typedef struct bytebuf {
    char  *p;       /* n bytes and a NUL; NULL until the first allocation */
    size_t n, cap;  /* bytes held / allocated (cap > n once p is set) */
} bytebuf;

/* Room for `more` bytes past n (and the NUL): 0 or -ENOMEM (b unchanged). */
int  bytebuf_reserve(bytebuf *b, size_t more);
/* Append n bytes of p (n 0 allocates an empty buffer): 0 or -ENOMEM. */
int  bytebuf_put(bytebuf *b, const void *p, size_t n);
void bytebuf_free(bytebuf *b);

#endif
