/* tests/test_model_default.c — the shipped model: lind's recurrent form is
 * the function PyTorch trained in the parallel form.
 *
 * Loads models/default through the public API, feeds BOS then the 512-byte
 * held-out sample of tests/fixtures/ one token at a time, and compares the
 * logits after every step with the PyTorch parallel-form logits written by
 * tools/fixture.py (relative error max|diff| / max|ref| per position < 1e-4).
 * LIND_MODEL_DIR and LIND_FIXTURE_DIR override the two directories (`make
 * test-torch` points the latter at a freshly generated fixture). */
#include "tests/check.h"
#include "recurrent/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SAMPLE 512
#define POS    (SAMPLE + 1)

static const char *model_dir, *fixture_dir;
static unsigned char sample[SAMPLE];
static float *ref;          /* POS × 256 */
static int have_fixture;

static long read_file(const char *dir, const char *name, void *buf, long want)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    long n = (long)fread(buf, 1, (size_t)want + 1, f);
    fclose(f);
    return n;
}

static void load_fixture(void)
{
    ref = malloc(sizeof(float) * POS * 256);
    float *spill = malloc(sizeof(float) * POS * 256 + 1);
    long ns = read_file(fixture_dir, "default_sample.bin", spill, SAMPLE);
    CHECK(ns == SAMPLE, "%s/default_sample.bin: %ld bytes, want %d", fixture_dir, ns, SAMPLE);
    if (ns == SAMPLE) memcpy(sample, spill, SAMPLE);
    long nl = read_file(fixture_dir, "default_logits.f32", spill, (long)sizeof(float) * POS * 256);
    CHECK(nl == (long)sizeof(float) * POS * 256, "%s/default_logits.f32: %ld bytes, want %ld",
          fixture_dir, nl, (long)sizeof(float) * POS * 256);
    if (nl == (long)sizeof(float) * POS * 256) memcpy(ref, spill, sizeof(float) * POS * 256);
    free(spill);
    have_fixture = ns == SAMPLE && nl == (long)sizeof(float) * POS * 256;
}

/* log2 probability of byte y under logits row l. */
static double log2_prob(const float *l, int y)
{
    double mx = l[0];
    for (int i = 1; i < 256; i++) if (l[i] > mx) mx = l[i];
    double s = 0.0;
    for (int i = 0; i < 256; i++) s += exp((double)l[i] - mx);
    return ((double)l[y] - mx - log(s)) / log(2.0);
}

/* The recurrent logits at every position agree with PyTorch's parallel form. */
static void recurrent_matches_pytorch(void)
{
    load_fixture();
    if (!have_fixture) return;
    model *m = NULL;
    char err[512] = "";
    int rc = model_load(model_dir, "cpu", &m, err, sizeof err);
    CHECK(rc == 0, "model_load(%s): %s", model_dir, err);
    if (rc) return;
    const lind_config *c = model_config(m);
    int n_lin = 0, n_aft = 0;
    for (int i = 0; i < c->n_layers; i++) {
        n_lin += strcmp(c->layers[i].mixer, "linear") == 0;
        n_aft += strcmp(c->layers[i].mixer, "aft") == 0;
    }
    CHECK(n_lin >= 1 && n_aft >= 1, "the default model mixes linear and AFT layers (%d, %d)", n_lin, n_aft);
    CHECK(model_slots_reserve(m, 1) == 0, "reserve a slot");
    CHECK(model_slot_reset(m, 0) == 0, "reset the slot");
    float logits[256];
    double worst = 0.0, bits_c = 0.0, bits_ref = 0.0;
    int worst_pos = -1, bad = 0;
    for (int t = 0; t < POS; t++) {
        int slot = 0, tok = t == 0 ? LIND_BOS : sample[t - 1];
        rc = model_step(m, &slot, &tok, 1, logits);
        CHECK(rc == 0, "model_step at position %d: rc %d", t, rc);
        if (rc) break;
        const float *r = ref + (size_t)t * 256;
        double dmax = 0.0, rmax = 0.0;
        for (int i = 0; i < 256; i++) {
            double dd = fabs((double)logits[i] - r[i]);
            if (!(dd <= dmax)) dmax = dd;   /* NaN counts as the worst */
            if (fabs(r[i]) > rmax) rmax = fabs(r[i]);
        }
        double rel = dmax / rmax;
        if (!(rel < 1e-4)) bad++;
        if (!(rel <= worst)) { worst = rel; worst_pos = t; }
        if (t < SAMPLE) {
            bits_c -= log2_prob(logits, sample[t]);
            bits_ref -= log2_prob(r, sample[t]);
        }
    }
    CHECK(bad == 0, "%d of %d positions beyond 1e-4 relative; worst %.3g at position %d",
          bad, POS, worst, worst_pos);
    printf("NOTE default model vs PyTorch: worst relative error %.3g (position %d), "
           "sample %.4f bits/byte (PyTorch %.4f)\n", worst, worst_pos, bits_c / SAMPLE, bits_ref / SAMPLE);
    /* the fixture is a real prediction of held-out text, not noise */
    CHECK(bits_ref / SAMPLE < 2.5, "PyTorch logits give %.3f bits/byte on the sample", bits_ref / SAMPLE);
    model_free(m);
}

int main(void)
{
    model_dir = getenv("LIND_MODEL_DIR") ? getenv("LIND_MODEL_DIR") : "models/default";
    fixture_dir = getenv("LIND_FIXTURE_DIR") ? getenv("LIND_FIXTURE_DIR") : "tests/fixtures";
    RUN(recurrent_matches_pytorch);
    free(ref);
    return check_exit();
}
