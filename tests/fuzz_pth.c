/* tests/fuzz_pth.c — libFuzzer driver for the PyTorch checkpoint reader
 * (pth_open, recurrent/pth.h) and the RWKV-7 shape inference after it
 * (rwkv7_translate, recurrent/rwkv7_pth.h): a .pth someone downloaded.
 * The valid base (patch mode, tests/fuzz_common.h) is a whole x070 model
 * torch.save wrote, read at start-up from tests/fuzz_seeds/fuzz_pth/x070_tiny
 * (tools/rwkv7_fixtures.py makes it; FUZZ_PTH_BASE names another file);
 * without it only the plain mode runs. Patches reach the pickle (at the
 * front), the tensor data and the zip's central directory (at the end: the
 * base is under 64 KiB). Invariants: no crash, leak or UB; a refusal has a
 * message; every accepted tensor lies inside the file with a byte size
 * matching its dtype and shape, reading it stays in bounds, names are
 * unique; the inferred config, when there is one, is JSON text. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "recurrent/pth.h"
#include "recurrent/rwkv7_pth.h"
#include "tests/fuzz_common.h"

static uint8_t *base;
static size_t blen;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc; (void)argv;
    const char *p = getenv("FUZZ_PTH_BASE") ? getenv("FUZZ_PTH_BASE") : "tests/fuzz_seeds/fuzz_pth/x070_tiny";
    FILE *f = fopen(p, "rb");
    if (!f) {
        fprintf(stderr, "fuzz_pth: %s unreadable: the patch mode is off\n", p);
        return 0;
    }
    base = malloc(1 << 16);
    size_t n = base ? fread(base, 1, 1 << 16, f) : 0;
    fclose(f);
    if (n < 2 || n == 1 << 16) abort();   /* a seed: flag byte 0, then the file */
    blen = n - 1;
    memmove(base, base + 1, blen);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *b;
    int fix;
    size_t n = fuzz_bytes(data, size, base, blen, &b, &fix);
    st_file f;
    char err[512] = "";
    int rc = pth_open(&f, fuzz_file(b, n), err, sizeof err);
    if (rc == 0) {
        for (int i = 0; i < f.n; i++) {
            st_tensor *t = &f.t[i];
            size_t es = t->dtype == ST_F32 ? 4 : 2;
            if (t->dtype < ST_F32 || t->dtype > ST_BF16) abort();
            if (t->begin > t->end || t->end > f.data_size || f.data != f.map || f.data_size != f.size) abort();
            if (t->end - t->begin != t->numel * es) abort();
            size_t numel = 1;
            for (int k = 0; k < t->ndim; k++) numel *= (size_t)t->shape[k];
            if (numel != t->numel) abort();
            if (!t->name || st_find(&f, t->name) != t) abort();
            float *dst = malloc(t->numel * sizeof *dst + 1);
            st_read_f32(&f, t, dst);
            free(dst);
        }
        char *cfg = NULL;
        size_t clen = 0;
        err[0] = 0;
        if (rwkv7_translate(&f, &cfg, &clen, err, sizeof err) == 0) {
            if (!cfg || strlen(cfg) != clen || cfg[0] != '{') abort();
        } else if (!err[0]) {
            abort();
        }
        free(cfg);
        st_close(&f);
    } else if (!err[0]) {
        abort();
    }
    free(b);
    return 0;
}
