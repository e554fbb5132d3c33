/* tests/fuzz_state.c — libFuzzer driver for the session state decoder
 * (state_decode, state/format.h): the bytes a store hands back, which a
 * damaged disk or a hand-edited database can make anything.
 *
 * A blob is only meaningful against a model, so the driver writes a tiny
 * test model (tests/testmodel.h: d_model 16, two layers, linear and AFT
 * mixers) into a temporary directory at start and loads it on the CPU
 * backend; its valid base blob is one real encoded state. Inputs follow
 * tests/fuzz_common.h (raw, or patches over the base with the two checksums
 * optionally recomputed). Invariants: no crash, leak or UB; a refusal has a
 * message and one of the documented codes; an accepted blob re-encodes and
 * decodes to the same meta and raw state. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>
#include "state/format.h"
#include "state/le.h"
#include "tests/fuzz_common.h"
#include "tests/testmodel.h"

static model *M;
static uint8_t *base;
static size_t blen, raw_bytes;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc; (void)argv;
    char dir[] = "/tmp/lind-fuzz-state-XXXXXX";
    char err[512];
    if (!mkdtemp(dir)) abort();
    testmodel_cfg c = testmodel_config(16, 2, 2, 8, 32, "linear,aft", 1, "decay");
    if (testmodel_write(dir, &c, 7, NULL) < 0 || model_load(dir, "cpu", &M, err, sizeof err) < 0) {
        fprintf(stderr, "fuzz_state: cannot make the test model: %s\n", err);
        abort();
    }
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "fuzz_state: could not remove %s\n", dir);
    raw_bytes = model_state_bytes(M);
    if (model_slots_reserve(M, 1) < 0) abort();
    int slot = 0;
    int32_t tok = LIND_BOS;
    model_slot_reset(M, 0);
    model_step(M, &slot, &tok, 1, NULL);
    tok = 'a';
    model_step(M, &slot, &tok, 1, NULL);
    uint8_t *raw = malloc(raw_bytes);
    model_slot_read(M, 0, raw);
    state_meta mt;
    memset(&mt, 0, sizeof mt);
    sampler_params p = sampler_defaults();
    p.rep_window = 8;
    sampler_init(&mt.sampler, &p);
    sampler_observe(&mt.sampler, 'a');
    mt.tokens = 2;
    mt.pending_token = 'b';
    if (state_encode(M, &mt, raw, &base, &blen, err, sizeof err) < 0) abort();
    free(raw);
    fuzz_maybe_write_seed(base, blen);
    return 0;
}

/* Recompute the header checksum (u32 at 60 over bytes 0..59) and the
 * trailing one (u64 over everything before it, where the header puts it). */
static void fix_checksums(uint8_t *b, size_t n)
{
    if (n >= 64) le_put32(b + 60, (uint32_t)XXH64(b, 60, 0));
    if (n >= 40) {
        uint64_t end = (uint64_t)le_get32(b + 16) + le_get64(b + 32);
        if (end + 8 == n) le_put64(b + end, XXH64(b, (size_t)end, 0));
        else if (n >= 72) le_put64(b + n - 8, XXH64(b, n - 8, 0));
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *b;
    int fix;
    size_t n = fuzz_bytes(data, size, base, blen, &b, &fix);
    if (fix) fix_checksums(b, n);
    uint8_t *raw = malloc(raw_bytes);
    state_meta mt;
    char err[512] = "";
    int rc = state_decode(M, b, n, &mt, raw, err, sizeof err);
    if (rc == 0) {
        uint8_t *again = NULL;
        size_t alen = 0;
        if (state_encode(M, &mt, raw, &again, &alen, err, sizeof err) != 0) abort();
        uint8_t *raw2 = malloc(raw_bytes);
        state_meta mt2;
        if (state_decode(M, again, alen, &mt2, raw2, err, sizeof err) != 0) abort();
        if (memcmp(raw, raw2, raw_bytes) != 0 || mt.tokens != mt2.tokens ||
            mt.pending_token != mt2.pending_token)
            abort();
        free(raw2);
        free(again);
    } else {
        if (!err[0]) abort();
        if (!(rc <= STATE_E_MAGIC && rc >= STATE_E_INVALID) && rc != -ENOMEM) abort();
        if (!state_strerror(rc) || !*state_strerror(rc)) abort();
    }
    free(raw);
    free(b);
    return 0;
}
