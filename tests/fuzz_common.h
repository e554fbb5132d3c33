/* tests/fuzz_common.h — shared pieces of the libFuzzer drivers (tests/fuzz_*.c).
 *
 * Checksummed formats (state blob, export) reject nearly every random byte
 * string at the checksum, so a driver reads its input in one of two ways,
 * chosen by the first byte (flags):
 *   bit 1 clear: the rest of the input is the bytes to decode;
 *   bit 1 set:   the bytes are a known-valid base (built by the driver) with
 *                patches applied: each 3 input bytes (u16 LE offset, value)
 *                set base[offset % len] = value; bit 2 also cuts the result
 *                to (byte 1 / 256) of its length;
 *   bit 0 set:   the driver recomputes the checksums after patching, so the
 *                decoder's checks past the checksum see the bytes.
 * Decoders that read files get their bytes through a memfd named by a
 * /proc/self/fd path: no disk I/O per input. */
#ifndef LIND_TESTS_FUZZ_COMMON_H
#define LIND_TESTS_FUZZ_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* Build the bytes to decode from `data` (see above). *out is malloc'd (at
 * least 1 byte) and the caller frees it; returns the length. *fix is set
 * when the caller should recompute checksums. */
static inline size_t fuzz_bytes(const uint8_t *data, size_t size, const uint8_t *base, size_t blen,
                                uint8_t **out, int *fix)
{
    uint8_t flags = size ? data[0] : 0;
    *fix = flags & 1;
    if (!(flags & 2) || !blen) {
        size_t n = size ? size - 1 : 0;
        *out = malloc(n + 1);
        if (n) memcpy(*out, data + 1, n);
        return n;
    }
    uint8_t *b = malloc(blen);
    memcpy(b, base, blen);
    size_t n = blen;
    size_t p = 2;
    for (; p + 3 <= size; p += 3) b[(data[p] | (size_t)data[p + 1] << 8) % blen] = data[p + 2];
    if ((flags & 4) && size > 1) n = blen * data[1] / 256;
    *out = b;
    return n;
}

/* Put `len` bytes in a memfd (created once) and return a path that opens it. */
static inline const char *fuzz_file(const uint8_t *bytes, size_t len)
{
    static int fd = -1;
    static char path[64];
    if (fd < 0) {
        fd = memfd_create("fuzz", 0);
        if (fd < 0) abort();
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    }
    if (ftruncate(fd, 0) != 0 || (len && pwrite(fd, bytes, len, 0) != (ssize_t)len)) abort();
    return path;
}

/* FUZZ_WRITE_SEED=PATH: write the driver's valid base there as a seed
 * input (flags 0: the plain bytes), for tests/fuzz_seeds/. */
static inline void fuzz_maybe_write_seed(const uint8_t *base, size_t blen)
{
    const char *p = getenv("FUZZ_WRITE_SEED");
    if (!p) return;
    FILE *f = fopen(p, "wb");
    if (!f) return;
    fputc(0, f);
    fwrite(base, 1, blen, f);
    fclose(f);
}
#endif
