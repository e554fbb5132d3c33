/* tests/fuzz_safetensors.c — libFuzzer driver for the safetensors reader
 * (st_open, recurrent/safetensors.h): the header of a weights file someone
 * downloaded. The valid base is a small file of three tensors (F32, F16,
 * BF16); inputs follow tests/fuzz_common.h (patches mostly land in the JSON
 * header). Invariants: no crash, leak or UB; a refusal has a message; every
 * accepted tensor lies inside the data section with a byte size matching
 * its dtype and shape, and reading it (st_read_f32) stays in bounds. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "recurrent/safetensors.h"
#include "tests/fuzz_common.h"
#include "tests/testmodel.h"

static uint8_t *base;
static size_t blen;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc; (void)argv;
    static float a[6] = { 1, 2, 3, 4, 5, 6 };
    static uint16_t h[4] = { 0x3c00, 0x4000, 0xc000, 0x7bff };
    static uint16_t bf[2] = { 0x3f80, 0x4040 };
    testmodel_tensor t[3] = {
        { "emb.weight", "F32", 2, { 2, 3 }, a, sizeof a },
        { "blocks.0.w", "F16", 1, { 4, 0 }, h, sizeof h },
        { "head.b", "BF16", 1, { 2, 0 }, bf, sizeof bf },
    };
    char path[] = "/tmp/lind-fuzz-st-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) abort();
    close(fd);
    if (testmodel_st_write(path, t, 3) != 0) abort();
    FILE *f = fopen(path, "rb");
    if (!f) abort();
    base = malloc(4096);
    blen = fread(base, 1, 4096, f);
    fclose(f);
    unlink(path);
    fuzz_maybe_write_seed(base, blen);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *b;
    int fix;
    size_t n = fuzz_bytes(data, size, base, blen, &b, &fix);
    st_file f;
    char err[512] = "";
    int rc = st_open(&f, fuzz_file(b, n), err, sizeof err);
    if (rc == 0) {
        for (int i = 0; i < f.n; i++) {
            st_tensor *t = &f.t[i];
            size_t es = t->dtype == ST_F32 ? 4 : 2;
            if (t->dtype < ST_F32 || t->dtype > ST_BF16) abort();
            if (t->begin > t->end || t->end > f.data_size) abort();
            if (t->end - t->begin != t->numel * es) abort();
            if (!t->name || st_find(&f, t->name) == NULL) abort();
            float *dst = malloc(t->numel * sizeof *dst + 1);
            st_read_f32(&f, t, dst);
            free(dst);
        }
        st_close(&f);
    } else if (!err[0]) {
        abort();
    }
    free(b);
    return 0;
}
