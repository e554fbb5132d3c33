/* recurrent/stophold.c — see stophold.h. */
#include "recurrent/stophold.h"

#include <errno.h>
#include <string.h>

int stophold_add(stophold *h, const void *s, size_t len)
{
    if (!len || len > STOP_MAX_LEN || h->n >= STOP_MAX) return -EINVAL;
    h->s[h->n] = s;
    h->len[h->n++] = len;
    return 0;
}

size_t stophold_tail(const stophold *h, const uint8_t *p, size_t n)
{
    size_t keep = 0;
    for (int i = 0; i < h->n; i++) {
        const uint8_t *s = h->s[i];
        size_t L = h->len[i];
        /* The earliest start j of an end p[j..n) that s begins with is the
         * longest; only ends longer than keep matter. */
        for (size_t j = n > L ? n - L : 0; j + keep < n; j++)
            if (p[j] == s[0] && !memcmp(p + j, s, n - j)) { keep = n - j; break; }
    }
    return keep;
}

size_t stophold_utf8(const uint8_t *p, size_t n)
{
    size_t i = n, back = 0;
    while (i > 0 && back < 3 && (p[i - 1] & 0xC0) == 0x80) { i--; back++; }
    if (i == 0) return n;
    uint8_t lead = p[i - 1];
    size_t need = lead >= 0xF0 && lead <= 0xF4 ? 4 : lead >= 0xE0 && lead <= 0xEF ? 3
                : lead >= 0xC2 && lead <= 0xDF ? 2 : 1;
    if (need > 1 && back + 1 < need) return i - 1;   /* the sequence is not complete yet */
    return n;
}

size_t stophold_shown(const stophold *h, const uint8_t *p, size_t n)
{
    return stophold_utf8(p, n - stophold_tail(h, p, n));
}
