/* tests/test_core_prefill.c — batched prefill (model_forward over runs)
 * equals feeding one token per model_step, bit for bit.
 *
 * For models with linear and AFT mixers, with and without token shift: a
 * reference session is fed T tokens one model_step at a time, keeping every
 * position's logits and the final state. Other sessions are fed the same
 * tokens through model_forward in chunks of several sizes, several sessions'
 * runs mixed in one call and rows asking for logits anywhere in a run; every
 * logit row and every final state byte must equal the reference's. Also the
 * run rules are enforced (a slot in two runs, a bad logit row: -EINVAL).
 * Where the CPU has AVX512_BF16 the cases run again with bf16 compute
 * (model_opts.compute): the same equalities hold within that mode. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/cpu/gemm.h"
#include "recurrent/model.h"
#include "tests/check.h"
#include "tests/testmodel.h"

#define T 97
#define V LIND_BYTE_VOCAB

static char tmpdir[256];
static lind_compute COMPUTE;   /* the cases run in each compute mode the CPU has */

static int load(const char *mixers, int shift, const char *variant, model **m)
{
    char dir[400], err[512];
    snprintf(dir, sizeof dir, "%s/%s-%d", tmpdir, mixers, shift);
    testmodel_cfg c = testmodel_config(32, 3, 4, 8, 64, mixers, shift, variant);
    testmodel_opts o = {0.9f, 1};
    if (testmodel_write(dir, &c, 7, &o) < 0) return -1;
    model_opts mo = {.backend = "cpu", .weights = LIND_DT_AUTO, .compute = COMPUTE};
    int rc = model_load_opts(dir, &mo, m, err, sizeof err);
    CHECK(rc == 0, "model_load (compute %s): %s", lind_compute_name(COMPUTE), err);
    return rc;
}

static void run_case(const char *mixers, int shift, const char *variant)
{
    model *m = NULL;
    if (load(mixers, shift, variant, &m) < 0) return;
    size_t sb = model_state_bytes(m);
    int32_t tok[T];
    for (int t = 0; t < T; t++) tok[t] = (int32_t)((t * 37 + 11) % V);
    float *ref = malloc((size_t)T * V * sizeof *ref), *got = malloc((size_t)T * V * sizeof *got);
    unsigned char *sref = malloc(sb), *sgot = malloc(sb);
    CHECK(model_slots_reserve(m, 8) == 0, "reserve");
    for (int s = 0; s < 8; s++) model_slot_reset(m, s);
    int slot = 0;
    for (int t = 0; t < T; t++) CHECK(model_step(m, &slot, &tok[t], 1, ref + (size_t)t * V) == 0, "step %d", t);
    model_slot_read(m, 0, sref);

    /* one session, chunks of 1, 5, 32 and all; logits for every row */
    int chunks[] = {1, 5, 32, T};
    for (int ci = 0; ci < 4; ci++) {
        int s = 1 + ci, ch = chunks[ci];
        int slots[T], rows[T];
        for (int t0 = 0; t0 < T; t0 += ch) {
            int n = T - t0 < ch ? T - t0 : ch;
            for (int r = 0; r < n; r++) { slots[r] = s; rows[r] = r; }
            CHECK(model_forward(m, slots, tok + t0, n, rows, n, got + (size_t)t0 * V) == 0, "forward chunk %d", ch);
        }
        CHECK(!memcmp(got, ref, (size_t)T * V * sizeof *got), "chunk %d: logits differ from step-by-step", ch);
        model_slot_read(m, s, sgot);
        CHECK(!memcmp(sgot, sref, sb), "chunk %d: final state differs", ch);
    }

    /* three sessions in one call: runs of 40, 1 and 56 tokens (slot 5 gets
     * the first 40, slot 6 one token, slot 7 the first 56); logits for the
     * last row of each run and one row in the middle */
    int slots[97], rows[4] = {39, 40, 96, 10};
    int32_t toks[97];
    for (int r = 0; r < 40; r++) { slots[r] = 5; toks[r] = tok[r]; }
    slots[40] = 6; toks[40] = tok[0];
    for (int r = 0; r < 56; r++) { slots[41 + r] = 7; toks[41 + r] = tok[r]; }
    float lg[4 * V];
    CHECK(model_forward(m, slots, toks, 97, rows, 4, lg) == 0, "mixed forward");
    CHECK(!memcmp(lg, ref + 39 * V, V * sizeof(float)), "run 1 last row");
    CHECK(!memcmp(lg + V, ref, V * sizeof(float)), "run 2 (one token)");
    CHECK(!memcmp(lg + 2 * V, ref + 55 * V, V * sizeof(float)), "run 3 last row");
    CHECK(!memcmp(lg + 3 * V, ref + 10 * V, V * sizeof(float)), "a middle row");
    /* then continue slot 5 by single steps to T: same final state */
    for (int t = 40; t < T; t++) { int s5 = 5; model_step(m, &s5, &tok[t], 1, NULL); }
    model_slot_read(m, 5, sgot);
    CHECK(!memcmp(sgot, sref, sb), "prefill then steps: final state differs");

    /* the rules */
    int bad_slots[3] = {1, 2, 1};
    int32_t bt[3] = {1, 2, 3};
    CHECK(model_forward(m, bad_slots, bt, 3, NULL, 0, NULL) == -EINVAL, "a slot in two runs is refused");
    int okslots[2] = {1, 1}, badrow = 2;
    CHECK(model_forward(m, okslots, bt, 2, &badrow, 1, lg) == -EINVAL, "a logit row past the batch is refused");
    int32_t badtok[2] = {1, V};
    CHECK(model_forward(m, okslots, badtok, 2, NULL, 0, NULL) == -EINVAL, "a token past the vocabulary is refused");
    CHECK(model_step(m, okslots, bt, 2, NULL) == -EINVAL, "model_step refuses a repeated slot");
    free(ref); free(got); free(sref); free(sgot);
    model_free(m);
}

static void prefill_linear(void) { run_case("linear", 0, NULL); }
static void prefill_linear_shift(void) { run_case("linear", 1, NULL); }
static void prefill_aft_decay_shift(void) { run_case("aft,linear", 1, "decay"); }
static void prefill_aft_simple(void) { run_case("aft", 0, "simple"); }
static void prefill_linear_bf16_compute(void) { run_case("linear", 1, NULL); }
static void prefill_aft_decay_shift_bf16_compute(void) { run_case("aft,linear", 1, "decay"); }
static void prefill_aft_simple_bf16_compute(void) { run_case("aft", 0, "simple"); }

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/lind_prefill.XXXXXX");
    if (!mkdtemp(tmpdir)) return 1;
    RUN(prefill_linear);
    RUN(prefill_linear_shift);
    RUN(prefill_aft_decay_shift);
    RUN(prefill_aft_simple);
    /* bf16 compute is batch-invariant too: the same bit-for-bit equalities */
    if (cpu_gemm_dot_supported() && cpu_gemm_detect() == CPU_GEMM_AVX512) {
        COMPUTE = LIND_COMPUTE_BF16;
        RUN(prefill_linear_bf16_compute);
        RUN(prefill_aft_decay_shift_bf16_compute);
        RUN(prefill_aft_simple_bf16_compute);
    } else {
        printf("SKIP prefill_bf16_compute: this CPU has no AVX512_BF16\n");
    }
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd)) return 1;
    return check_exit();
}
