/* tests/fuzz_config.c — libFuzzer driver for the model config reader
 * (config_parse, recurrent/config.h): config.json of a model directory,
 * lind's own forms, Hugging Face RWKV-4's or Mamba-2's (seeds mamba2_hf and
 * mamba2_nonfinite: Python json's bare Infinity/NaN). The valid base is a test
 * model's flat config (tests/testmodel.h); inputs follow tests/fuzz_common.h.
 * Invariants: no crash, leak or UB; a refusal is -EINVAL with a message; an
 * accepted config has sizes in their documented ranges, a known tokenizer
 * kind (or none yet, from an HF config: the directory's file decides at load)
 * and NUL-terminated strings. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "recurrent/config.h"
#include "tests/fuzz_common.h"
#include "tests/testmodel.h"

static uint8_t *base;
static size_t blen;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc; (void)argv;
    testmodel_cfg c = testmodel_config(32, 3, 4, 8, 64, "linear,aft", 1, "decay");
    char *s = testmodel_config_json(&c);
    if (!s) abort();
    base = (uint8_t *)s;
    blen = strlen(s);
    fuzz_maybe_write_seed(base, blen);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *b;
    int fix;
    size_t n = fuzz_bytes(data, size, base, blen, &b, &fix);
    lind_config c;
    char err[512] = "";
    int rc = config_parse((const char *)b, n, "fuzz/config.json", &c, err, sizeof err);
    if (rc == 0) {
        if (c.vocab_size < 1 || c.vocab_size > LIND_MAX_VOCAB) abort();
        if (c.n_layers < 1 || c.n_layers > LIND_MAX_LAYERS || c.d_model < 1) abort();
        if (c.bos < 0 || c.bos >= c.vocab_size) abort();
        if (!memchr(c.tokenizer, 0, sizeof c.tokenizer) ||
            !memchr(c.tokenizer_file, 0, sizeof c.tokenizer_file) ||
            !memchr(c.format, 0, sizeof c.format))
            abort();
        /* an HF config leaves it to the directory's tokenizer file (model.c) */
        int hf = !strncmp(c.format, "hf-", 3);
        if (strcmp(c.tokenizer, "bytes") && strcmp(c.tokenizer, "bpe") && strcmp(c.tokenizer, "world") &&
            !(hf && !c.tokenizer[0]))
            abort();
    } else if (rc != -EINVAL || !err[0]) {
        abort();
    }
    free(b);
    return 0;
}
