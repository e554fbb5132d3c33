/* state/transcript.c — the bounded text tail of a session (see transcript.h).
 *
 * Serialized form (version 1): one byte, the format version; then per entry
 * one byte role (0 in, 1 out), the byte count as an unsigned LEB128 varint,
 * and the bytes. Nothing else: the store and the export format around it
 * carry the checksums. */
#include "state/transcript.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "recurrent/errmsg.h"

int transcript_init(transcript *t, size_t limit)
{
    memset(t, 0, sizeof *t);
    if (limit > TRANSCRIPT_LIMIT_MAX)
        return -EINVAL;
    t->limit = limit;
    return 0;
}

void transcript_free(transcript *t)
{
    free(t->text);
    free(t->entries);
    memset(t, 0, sizeof *t);
}

void transcript_clear(transcript *t)
{
    t->len = 0;
    t->n = 0;
}

size_t transcript_count(const transcript *t) { return t->n; }

size_t transcript_tail(const transcript *t, uint8_t *out, size_t max)
{
    size_t n = t->len < max ? t->len : max;
    if (n) memcpy(out, t->text + t->len - n, n);
    return n;
}

int transcript_entry_at(const transcript *t, size_t i, transcript_role *role,
                        const uint8_t **bytes, size_t *len)
{
    if (i >= t->n)
        return -EINVAL;
    size_t off = 0;
    for (size_t k = 0; k < i; k++)
        off += t->entries[k].len;
    if (role) *role = t->entries[i].role;
    if (bytes) *bytes = t->text + off;
    if (len) *len = t->entries[i].len;
    return 0;
}

/* Drop the oldest `drop` bytes (drop <= t->len). */
static void drop_front(transcript *t, size_t drop)
{
    if (drop == 0)
        return;
    size_t left = drop, k = 0;
    while (k < t->n && t->entries[k].len <= left)
        left -= t->entries[k++].len;
    if (k < t->n)
        t->entries[k].len -= left;
    memmove(t->entries, t->entries + k, (t->n - k) * sizeof *t->entries);
    t->n -= k;
    memmove(t->text, t->text + drop, t->len - drop);
    t->len -= drop;
}

static int is_cont(uint8_t b) { return (b & 0xC0) == 0x80; }

int transcript_append(transcript *t, transcript_role role, const void *bytes, size_t n)
{
    if (role != TRANSCRIPT_IN && role != TRANSCRIPT_OUT)
        return -EINVAL;
    if (n && !bytes)
        return -EINVAL;
    const uint8_t *src = bytes;
    if (n == 0)
        return 0;
    /* Bytes to drop from the front of old text + new bytes, then past any
     * continuation bytes (at most 3: a UTF-8 character is at most 4 bytes). */
    size_t total = t->len + n;
    size_t d = total > t->limit ? total - t->limit : 0;
    if (d > 0) {
        for (int extra = 0; extra < 3 && d < total; extra++) {
            uint8_t b = d < t->len ? t->text[d] : src[d - t->len];
            if (!is_cont(b))
                break;
            d++;
        }
    }
    size_t drop_old = d < t->len ? d : t->len;
    size_t skip_new = d > t->len ? d - t->len : 0;
    src += skip_new;
    n -= skip_new;
    if (n == 0) {
        drop_front(t, drop_old);
        return 0;
    }
    /* Reserve before changing anything so -ENOMEM leaves t as it was. */
    size_t need = t->len - drop_old + n;
    int merge = t->n > 0 && drop_old < t->len && t->entries[t->n - 1].role == role;
    if (need > t->text_cap) {
        size_t cap = t->text_cap ? t->text_cap : 64;
        while (cap < need)
            cap *= 2;
        if (cap > t->limit)
            cap = t->limit;
        uint8_t *nt = realloc(t->text, cap);
        if (!nt)
            return -ENOMEM;
        t->text = nt;
        t->text_cap = cap;
    }
    if (!merge && t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 8;
        transcript_entry *ne = realloc(t->entries, cap * sizeof *ne);
        if (!ne)
            return -ENOMEM;
        t->entries = ne;
        t->cap = cap;
    }
    drop_front(t, drop_old);
    memcpy(t->text + t->len, src, n);
    t->len += n;
    if (merge) {
        t->entries[t->n - 1].len += n;
    } else {
        t->entries[t->n].role = role;
        t->entries[t->n].len = n;
        t->n++;
    }
    return 0;
}

int transcript_encode(const transcript *t, uint8_t **out, size_t *outlen)
{
    size_t cap = 1 + t->n * 11 + t->len, pos = 0, off = 0;
    uint8_t *b = malloc(cap);
    if (!b)
        return -ENOMEM;
    b[pos++] = TRANSCRIPT_FORMAT_VERSION;
    for (size_t i = 0; i < t->n; i++) {
        size_t len = t->entries[i].len;
        b[pos++] = (uint8_t)t->entries[i].role;
        uint64_t v = len;
        do {
            uint8_t byte = v & 0x7F;
            v >>= 7;
            b[pos++] = byte | (v ? 0x80 : 0);
        } while (v);
        memcpy(b + pos, t->text + off, len);
        pos += len;
        off += len;
    }
    *out = b;
    *outlen = pos;
    return 0;
}

int transcript_decode(transcript *t, const uint8_t *data, size_t len,
                      char *err, size_t errlen)
{
    transcript tmp;
    int rc = transcript_init(&tmp, t->limit);
    if (rc < 0)
        return errmsg_set(rc, err, errlen, "transcript limit %zu too large", t->limit);
    if (len == 0)
        goto done;
    if (!data)
        return errmsg_set(-EINVAL, err, errlen, "transcript: no data");
    if (data[0] != TRANSCRIPT_FORMAT_VERSION)
        return errmsg_set(-EINVAL, err, errlen,
                    "transcript: unknown format version %u (this lind reads %u)",
                    data[0], TRANSCRIPT_FORMAT_VERSION);
    size_t pos = 1;
    for (size_t entry = 0; pos < len; entry++) {
        uint8_t role = data[pos++];
        if (role > TRANSCRIPT_OUT) {
            rc = errmsg_set(-EINVAL, err, errlen, "transcript: entry %zu has unknown role %u",
                      entry, role);
            goto bad;
        }
        uint64_t n = 0;
        int shift = 0;
        for (;;) {
            if (pos >= len) {
                rc = errmsg_set(-EINVAL, err, errlen,
                          "transcript: truncated length of entry %zu", entry);
                goto bad;
            }
            uint8_t b = data[pos++];
            if (shift > 63 || (shift == 63 && (b & 0x7E))) {
                rc = errmsg_set(-EINVAL, err, errlen,
                          "transcript: length of entry %zu overflows", entry);
                goto bad;
            }
            n |= (uint64_t)(b & 0x7F) << shift;
            shift += 7;
            if (!(b & 0x80))
                break;
        }
        if (n == 0) {
            rc = errmsg_set(-EINVAL, err, errlen, "transcript: entry %zu is empty", entry);
            goto bad;
        }
        if (n > len - pos) {
            rc = errmsg_set(-EINVAL, err, errlen,
                      "transcript: entry %zu claims %llu bytes, %zu remain",
                      entry, (unsigned long long)n, len - pos);
            goto bad;
        }
        rc = transcript_append(&tmp, (transcript_role)role, data + pos, (size_t)n);
        if (rc < 0) {
            errmsg_set(rc, err, errlen, "transcript: out of memory");
            goto bad;
        }
        pos += (size_t)n;
    }
done:
    transcript_free(t);
    *t = tmp;
    return 0;
bad:
    transcript_free(&tmp);
    return rc;
}
