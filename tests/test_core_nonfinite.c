/* tests/test_core_nonfinite.c — a non-finite number fails its session's
 * turn, not the batch, and a lost device is reported (issue 14):
 *
 *   - lind_aft_channel: one +inf key, two in a row, or a NaN key leave a
 *     state no token can repair; the channel's output must then be NaN even
 *     where the old formula gave a finite value (one +inf key), so the step
 *     can see it;
 *   - model_forward, on the CPU and on the CUDA backend's code (host
 *     harness): a batch of three sessions where one slot's AFT state was
 *     crafted with max = +inf (or num = NaN) returns -EDOM, flags exactly
 *     that run's rows (model_last_nonfinite), and gives the other runs the
 *     logits and states they get without the bad session beside them;
 *   - the harness with LIND_HARNESS_FAULT: a sticky device error poisons
 *     the backend (model_poisoned), the step fails with -EIO and
 *     model_last_error names the CUDA error; the CPU backend never does. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/mixer_math.h"
#include "recurrent/model.h"
#include "tests/check.h"

static const char *MODEL = "models/default";

static void aft_channel_flags_bad_state(void)
{
    /* a state with a past, then the keys */
    double num = 0, den = 0, mx = 0;
    float o = lind_aft_channel(&num, &den, &mx, 0.5f, 1.0f, 0.3f, 0.1f);
    CHECK(isfinite(o) && isfinite(num) && isfinite(den) && isfinite(mx), "an ordinary key gave %g", o);
    for (int i = 0; i < 20; i++) (void)lind_aft_channel(&num, &den, &mx, 80.0f - i, 2.0f, 0.3f, 0.1f);
    o = lind_aft_channel(&num, &den, &mx, 88.0f, -3.0f, 0.3f, 0.1f);   /* extreme but finite keys are fine */
    CHECK(isfinite(o) && isfinite(mx), "a key of 88 gave output %g, max %g", o, mx);

    double n1 = num, d1 = den, m1 = mx;
    o = lind_aft_channel(&n1, &d1, &m1, INFINITY, 1.0f, 0.3f, 0.1f);
    CHECK(!isfinite(m1), "a +inf key left max %g", m1);
    CHECK(isnan(o), "one +inf key: output %g (the state is poisoned, the output must say so)", o);
    o = lind_aft_channel(&n1, &d1, &m1, 0.5f, 1.0f, 0.3f, 0.1f);
    CHECK(isnan(o), "an ordinary key after a +inf one: output %g", o);
    o = lind_aft_channel(&n1, &d1, &m1, INFINITY, 1.0f, 0.3f, 0.1f);
    CHECK(isnan(o), "a second +inf key: output %g", o);

    double n2 = num, d2 = den, m2 = mx;
    o = lind_aft_channel(&n2, &d2, &m2, NAN, 1.0f, 0.3f, 0.1f);
    CHECK(isnan(o), "a NaN key: output %g", o);

    double n3 = 0, d3 = 0, m3 = 0;   /* first token of a fresh state */
    o = lind_aft_channel(&n3, &d3, &m3, INFINITY, 1.0f, 0.3f, 0.1f);
    CHECK(isnan(o), "a +inf key into a fresh state: output %g (max %g)", o, m3);
    double n4 = 0, d4 = 0, m4 = 0;
    o = lind_aft_channel(&n4, &d4, &m4, 1.0f, INFINITY, 0.3f, 0.1f);
    CHECK(isnan(o) || !isfinite(o), "a +inf value: output %g", o);
}

/* The same on a float state (lind_aft_channel_f32): a +inf key gives NaN
 * output and a state that stays non-finite, so the save-time check sees it. */
static void aft_channel_f32_flags_bad_state(void)
{
    float num = 0, den = 0, mx = 0;
    for (int i = 0; i < 20; i++) (void)lind_aft_channel_f32(&num, &den, &mx, 80.0f - i, 2.0f, 0.3f, 0.1f);
    float o = lind_aft_channel_f32(&num, &den, &mx, 88.0f, -3.0f, 0.3f, 0.1f);
    CHECK(isfinite(o) && isfinite(num) && isfinite(den) && isfinite(mx), "a key of 88 gave output %g, max %g", o,
          mx);
    o = lind_aft_channel_f32(&num, &den, &mx, INFINITY, 1.0f, 0.3f, 0.1f);
    CHECK(isnan(o), "one +inf key: output %g", o);
    CHECK(!(isfinite(num) && isfinite(den) && isfinite(mx)), "a +inf key left a finite float state");
    o = lind_aft_channel_f32(&num, &den, &mx, 0.5f, 1.0f, 0.3f, 0.1f);
    CHECK(isnan(o), "an ordinary key after a +inf one: output %g", o);
}

/* The byte offset of the first element of the first AFT region `name`,
 * and its element size (the sums are floats where the layer decays). */
static size_t aft_region(model *m, const char *name, int *elem)
{
    model_state_region rg[256];
    int n = model_state_regions(m, rg, 256);
    for (int i = 0; i < n && i < 256; i++)
        if (!strcmp(rg[i].name, name) && (rg[i].type == LIND_EL_F64 || rg[i].type == LIND_EL_F32)) {
            *elem = rg[i].elem_bytes;
            return rg[i].offset;
        }
    return (size_t)-1;
}

/* Three sessions, rows [0,0,0 | 1,1 | 2]: slot 1's state is crafted bad. */
static void bad_run_on(const char *backend, const char *region, double value)
{
    char err[512];
    model *m = NULL;
    int rc = model_load(MODEL, backend, &m, err, sizeof err);
    CHECK(rc == 0, "%s: load: %s", backend, err);
    if (rc) return;
    int elem = 0;
    size_t sb = model_state_bytes(m), off = aft_region(m, region, &elem);
    CHECK(off != (size_t)-1, "no AFT region %s in %s", region, MODEL);
    int V = model_vocab(m);
    CHECK(model_slots_reserve(m, 4) == 0, "reserve");
    /* warm every slot with its own prompt, so the states have a past */
    const int32_t warm[3][4] = {{104, 101, 108, 108}, {119, 111, 114, 108}, {116, 101, 120, 116}};
    for (int s = 0; s < 3; s++) {
        int sl[4] = {s, s, s, s};
        CHECK(model_forward(m, sl, warm[s], 4, NULL, 0, NULL) == 0, "%s: warm slot %d", backend, s);
    }
    unsigned char *st = malloc(sb), *ref0 = malloc(sb), *got0 = malloc(sb), *ref2 = malloc(sb), *got2 = malloc(sb);
    CHECK(model_slot_read(m, 1, st) == 0, "read slot 1");
    double v = value;
    float vf = (float)value;
    if (elem == 8) memcpy(st + off, &v, sizeof v);   /* channel 0 of the first AFT layer */
    else memcpy(st + off, &vf, sizeof vf);
    /* references: slots 0 and 2 stepped without the bad one beside them */
    unsigned char *s0 = malloc(sb), *s2 = malloc(sb);
    model_slot_read(m, 0, s0);
    model_slot_read(m, 2, s2);
    const int32_t toks[6] = {32, 97, 98, 99, 100, 33};
    float *want = malloc(6 * (size_t)V * sizeof(float)), *got = malloc(6 * (size_t)V * sizeof(float));
    int sref[4] = {0, 0, 0, 2};
    int32_t tref[4] = {toks[0], toks[1], toks[2], toks[5]};
    CHECK(model_forward(m, sref, tref, 4, NULL, 4, want) == 0, "%s: reference step", backend);
    model_slot_read(m, 0, ref0);
    model_slot_read(m, 2, ref2);
    const unsigned char *flags = NULL;
    CHECK(model_last_nonfinite(m, &flags) == 0, "%s: a finite step reports non-finite rows", backend);
    model_slot_write(m, 0, s0);
    model_slot_write(m, 2, s2);
    model_slot_write(m, 1, st);

    int slots[6] = {0, 0, 0, 1, 1, 2};
    rc = model_forward(m, slots, toks, 6, NULL, 6, got);
    CHECK(rc == -EDOM, "%s: %s = %g in slot 1: step returned %d, want -EDOM", backend, region, value, rc);
    int nbad = model_last_nonfinite(m, &flags);
    CHECK(nbad == 2, "%s: %d non-finite rows, want 2 (slot 1's)", backend, nbad);
    for (int r = 0; flags && r < 6; r++)
        CHECK(flags[r] == (slots[r] == 1), "%s: row %d (slot %d) flagged %d", backend, r, slots[r], flags[r]);
    /* the good runs are untouched by the bad one */
    model_slot_read(m, 0, got0);
    model_slot_read(m, 2, got2);
    CHECK(!memcmp(got0, ref0, sb) && !memcmp(got2, ref2, sb), "%s: the good sessions' states differ", backend);
    int same = 1;
    for (int r = 0; r < 3; r++)
        same &= !memcmp(got + (size_t)r * V, want + (size_t)r * V, (size_t)V * sizeof(float));
    same &= !memcmp(got + (size_t)5 * V, want + (size_t)3 * V, (size_t)V * sizeof(float));
    CHECK(same, "%s: the good sessions' logits differ", backend);
    /* a prefill without logits sees it too; a reset slot is good again */
    model_slot_write(m, 1, st);
    int s1[2] = {1, 1};
    rc = model_forward(m, s1, toks, 2, NULL, 0, NULL);
    CHECK(rc == -EDOM && model_last_nonfinite(m, NULL) == 2, "%s: prefill without logits: %d", backend, rc);
    CHECK(model_slot_reset(m, 1) == 0, "reset");
    rc = model_forward(m, s1, toks, 2, NULL, 2, got);
    CHECK(rc == 0 && model_last_nonfinite(m, NULL) == 0, "%s: after a reset: %d", backend, rc);
    CHECK(!model_poisoned(m), "%s: a non-finite value poisoned the backend", backend);
    free(st); free(ref0); free(got0); free(ref2); free(got2); free(s0); free(s2); free(want); free(got);
    model_free(m);
}

static void cpu_inf_max(void) { bad_run_on("cpu", "max", INFINITY); }
static void cpu_nan_num(void) { bad_run_on("cpu", "num", NAN); }
static void harness_inf_max(void) { bad_run_on("harness", "max", INFINITY); }

/* The CUDA backend's code with a simulated sticky error at its 7th launch
 * (inside the first step). */
static void harness_sticky_error(void)
{
    char err[512];
    model *m = NULL;
    setenv("LIND_HARNESS_FAULT", "7", 1);
    int rc = model_load(MODEL, "harness", &m, err, sizeof err);
    unsetenv("LIND_HARNESS_FAULT");
    CHECK(rc == 0, "load: %s", err);
    if (rc) return;
    CHECK(!model_poisoned(m) && !*model_last_error(m), "poisoned before any failure: '%s'", model_last_error(m));
    model_slots_reserve(m, 2);
    int slots[2] = {0, 1};
    int32_t toks[2] = {104, 105};
    float *lg = malloc(2 * (size_t)model_vocab(m) * sizeof(float));
    rc = model_step(m, slots, toks, 2, lg);
    CHECK(rc == -EIO, "the step with the failing launch returned %d, want -EIO", rc);
    CHECK(model_poisoned(m), "a sticky error did not poison the backend");
    CHECK(strstr(model_last_error(m), "cudaErrorIllegalAddress") != NULL, "last error '%s' does not name it",
          model_last_error(m));
    rc = model_step(m, slots, toks, 2, lg);
    CHECK(rc == -EIO, "a step on a poisoned backend returned %d", rc);
    free(lg);
    model_free(m);

    /* the variable set to nonsense is refused, naming it */
    setenv("LIND_HARNESS_FAULT", "soon", 1);
    rc = model_load(MODEL, "harness", &m, err, sizeof err);
    unsetenv("LIND_HARNESS_FAULT");
    CHECK(rc < 0 && strstr(err, "LIND_HARNESS_FAULT"), "LIND_HARNESS_FAULT=soon: rc %d, '%s'", rc, err);
    if (rc == 0) model_free(m);

    CHECK(model_load(MODEL, "cpu", &m, err, sizeof err) == 0, "cpu load: %s", err);
    CHECK(!model_poisoned(m) && !*model_last_error(m), "the CPU backend is poisoned");
    model_free(m);
}

int main(void)
{
    if (access(MODEL, R_OK) != 0) {
        printf("FAIL setup: %s missing (run from the repository root)\n", MODEL);
        return 1;
    }
    RUN(aft_channel_flags_bad_state);
    RUN(aft_channel_f32_flags_bad_state);
    RUN(cpu_inf_max);
    RUN(cpu_nan_num);
    RUN(harness_inf_max);
    RUN(harness_sticky_error);
    return check_exit();
}
