/* tests/test_state_format.c — the state blob: a saved and restored session
 * continues exactly as the uninterrupted one, and every kind of damage is
 * refused with its specific error. Uses small random-weight models
 * (tests/testmodel.h). */
#include "tests/check.h"
#include "tests/testmodel.h"
#include "state/format.h"

#include <math.h>
#include <string.h>
#include <xxhash.h>

static char dir[64];
static model *m, *other;

static model *load_random(const char *sub, uint64_t seed)
{
    char path[128], err[256] = "";
    snprintf(path, sizeof path, "%s/%s", dir, sub);
    testmodel_cfg c = testmodel_config(32, 2, 4, 8, 64, "linear,aft", 1, "decay");
    if (testmodel_write(path, &c, seed, NULL) < 0)
        return NULL;
    model *x = NULL;
    if (model_load(path, "cpu", &x, err, sizeof err) < 0) {
        printf("NOTE model_load: %s\n", err);
        return NULL;
    }
    return x;
}

/* Feed BOS + text into slot, return its raw state in a malloc'd buffer. */
static uint8_t *run_session(model *x, int slot, const char *text, sampler *smp)
{
    model_slot_reset(x, slot);
    int tok = LIND_BOS;
    model_step(x, &slot, &tok, 1, NULL);
    for (const char *p = text; *p; p++) {
        tok = (uint8_t)*p;
        model_step(x, &slot, &tok, 1, NULL);
        if (smp)
            sampler_observe(smp, tok);
    }
    uint8_t *raw = malloc(model_state_bytes(x));
    model_slot_read(x, slot, raw);
    return raw;
}

static state_meta some_meta(void)
{
    state_meta mt;
    memset(&mt, 0, sizeof mt);
    sampler_params p = sampler_defaults();
    p.temperature = 0.7f;
    p.top_k = 40;
    p.top_p = 0.9f;
    p.rep_penalty = 1.3f;
    p.rep_window = 32;
    p.seed = 12345;
    sampler_init(&mt.sampler, &p);
    mt.tokens = 12;
    mt.pending_token = 'x';
    return mt;
}

static int same_sampler(const sampler *a, const sampler *b)
{
    return a->p.temperature == b->p.temperature && a->p.top_k == b->p.top_k &&
           a->p.top_p == b->p.top_p && a->p.rep_penalty == b->p.rep_penalty &&
           a->p.rep_window == b->p.rep_window && a->p.seed == b->p.seed &&
           memcmp(a->rng, b->rng, sizeof a->rng) == 0 && a->wlen == b->wlen &&
           a->wpos == b->wpos && memcmp(a->window, b->window, sizeof a->window) == 0;
}

static void resume_continues_exactly(void)
{
    state_meta mt = some_meta();
    uint8_t *raw = run_session(m, 0, "Hello, wor", &mt.sampler);
    mt.tokens = 11;
    uint8_t *blob = NULL;
    size_t len = 0;
    char err[256] = "";
    int rc = state_encode(m, &mt, raw, &blob, &len, err, sizeof err);
    CHECK(rc == 0, "encode: %d %s", rc, err);
    if (rc < 0) { free(raw); return; }
    int nr = model_state_regions(m, NULL, 0);
    CHECK(len == 392 + 40 * (size_t)nr + model_state_bytes(m) + 8, "blob size %zu", len);

    size_t sb = model_state_bytes(m);
    uint8_t *back = malloc(sb);
    state_meta mb;
    rc = state_decode(m, blob, len, &mb, back, err, sizeof err);
    CHECK(rc == 0, "decode: %d %s", rc, err);
    CHECK(memcmp(back, raw, sb) == 0, "raw state bit-identical");
    CHECK(mb.tokens == 11 && mb.pending_token == 'x', "tokens/pending");
    CHECK(same_sampler(&mb.sampler, &mt.sampler), "sampler (params, RNG, window) identical");

    /* The restored session, in another slot, continues exactly like the
     * original: same logits and the same sampled tokens. */
    model_slot_write(m, 1, back);
    float la[256], lb[256], scratch[512];
    int s0 = 0, s1 = 1, tok = 'l';
    int same = 1;
    for (int i = 0; i < 20; i++) {
        model_step(m, &s0, &tok, 1, la);
        model_step(m, &s1, &tok, 1, lb);
        same &= memcmp(la, lb, sizeof la) == 0;
        int ta = sampler_next(&mt.sampler, la, 256, scratch);
        int tb = sampler_next(&mb.sampler, lb, 256, scratch);
        same &= ta == tb;
        sampler_observe(&mt.sampler, ta);
        sampler_observe(&mb.sampler, tb);
        tok = ta;
    }
    CHECK(same, "restored session diverged from the original");
    CHECK(strcmp(state_strerror(0), "ok") == 0, "strerror ok");
    free(back);
    free(blob);
    free(raw);
}

/* Rewrite both checksums after a deliberate edit, as a forger would. */
static void reseal(uint8_t *b, size_t len)
{
    uint32_t h = (uint32_t)XXH64(b, 60, 0);
    for (int i = 0; i < 4; i++)
        b[60 + i] = (uint8_t)(h >> (8 * i));
    uint64_t s = XXH64(b, len - 8, 0);
    for (int i = 0; i < 8; i++)
        b[len - 8 + i] = (uint8_t)(s >> (8 * i));
}

static void refusals(void)
{
    state_meta mt = some_meta();
    uint8_t *raw = run_session(m, 0, "abc", NULL);
    uint8_t *blob = NULL;
    size_t len = 0;
    char err[256] = "";
    if (state_encode(m, &mt, raw, &blob, &len, err, sizeof err) < 0) {
        CHECK(0, "encode: %s", err);
        free(raw);
        return;
    }
    size_t sb = model_state_bytes(m);
    uint8_t *out = malloc(sb), *y = malloc(len + 16);
    state_meta mo;
    int rc;

    memcpy(y, blob, len);
    y[3] = 'X';
    rc = state_decode(m, y, len, &mo, out, err, sizeof err);
    CHECK(rc == STATE_E_MAGIC && strstr(err, "magic"), "magic: %d %s", rc, err);
    CHECK(state_decode(m, (const uint8_t *)"hello", 5, &mo, out, err, sizeof err) == STATE_E_MAGIC,
          "text is not a state");

    memcpy(y, blob, len);
    y[8] = 2;
    reseal(y, len);
    rc = state_decode(m, y, len, &mo, out, err, sizeof err);
    CHECK(rc == STATE_E_VERSION && strstr(err, "newer"), "newer version: %d %s", rc, err);

    memcpy(y, blob, len);
    uint8_t t = y[12]; y[12] = y[15]; y[15] = t;
    t = y[13]; y[13] = y[14]; y[14] = t;
    reseal(y, len);
    rc = state_decode(m, y, len, &mo, out, err, sizeof err);
    CHECK(rc == STATE_E_ENDIAN && strstr(err, "byte order"), "byte order: %d %s", rc, err);

    rc = state_decode(other, blob, len, &mo, out, err, sizeof err);
    CHECK(rc == STATE_E_MODEL && strstr(err, "another model"), "other model: %d %s", rc, err);

    /* Every truncation. */
    int wrong = 0;
    for (size_t n = 0; n < len; n++) {
        rc = state_decode(m, blob, n, &mo, out, err, sizeof err);
        if (rc != STATE_E_TRUNCATED)
            wrong++;
    }
    CHECK(wrong == 0, "%d truncations not reported as truncated", wrong);
    memcpy(y, blob, len);
    y[len] = 0;
    rc = state_decode(m, y, len + 1, &mo, out, err, sizeof err);
    CHECK(rc == STATE_E_CHECKSUM, "trailing byte: %d %s", rc, err);

    /* A flipped bit anywhere: bad magic, a version this lind does not read,
     * or — everywhere else — a checksum mismatch. Never accepted. */
    int accepted = 0, mislabeled = 0;
    for (size_t i = 0; i < len; i += i < 400 + 40 * 16 ? 1 : 7) {
        for (int bit = 0; bit < 8; bit += 3) {
            memcpy(y, blob, len);
            y[i] ^= (uint8_t)(1u << bit);
            rc = state_decode(m, y, len, &mo, out, err, sizeof err);
            int want = i < 8 ? STATE_E_MAGIC : i < 12 ? STATE_E_VERSION : STATE_E_CHECKSUM;
            accepted += rc == 0;
            mislabeled += rc != want;
        }
    }
    CHECK(accepted == 0, "%d bit flips accepted", accepted);
    CHECK(mislabeled == 0, "%d bit flips with the wrong error", mislabeled);

    /* Forged (checksums recomputed) but out-of-range fields. */
    memcpy(y, blob, len);
    y[48] = 0xE7; y[49] = 0x03; y[50] = 0; y[51] = 0; /* pending token 999 */
    reseal(y, len);
    rc = state_decode(m, y, len, &mo, out, err, sizeof err);
    CHECK(rc == STATE_E_INVALID && strstr(err, "pending token 999"), "pending: %d %s", rc, err);
    memcpy(y, blob, len);
    y[129] = 0x10; /* window length 4096+ */
    reseal(y, len);
    rc = state_decode(m, y, len, &mo, out, err, sizeof err);
    CHECK(rc == STATE_E_INVALID && strstr(err, "window"), "window: %d %s", rc, err);
    memcpy(y, blob, len);
    float five = 5.0f;
    memcpy(y + 72, &five, 4); /* top_p (little-endian host) */
    reseal(y, len);
    rc = state_decode(m, y, len, &mo, out, err, sizeof err);
    CHECK(rc == STATE_E_INVALID && strstr(err, "top_p"), "top_p: %d %s", rc, err);
    /* A forged NaN in the raw state. */
    memcpy(y, blob, len);
    size_t hdr = 392 + 40 * (size_t)model_state_regions(m, NULL, 0);
    float nan = NAN;
    memcpy(y + hdr + sb - 4, &nan, 4);
    reseal(y, len);
    rc = state_decode(m, y, len, &mo, out, err, sizeof err);
    CHECK(rc == STATE_E_NONFINITE, "forged NaN: %d %s", rc, err);
    CHECK(strcmp(state_strerror(STATE_E_CHECKSUM), "checksum") == 0 &&
          strcmp(state_strerror(STATE_E_MODEL), "model") == 0 &&
          strcmp(state_strerror(STATE_E_TRUNCATED), "truncated") == 0, "strerror words");
    free(y);
    free(out);
    free(blob);
    free(raw);
}

static void nonfinite_never_encoded(void)
{
    state_meta mt = some_meta();
    uint8_t *raw = run_session(m, 0, "poison", NULL);
    int nr = model_state_regions(m, NULL, 0);
    model_state_region *r = calloc((size_t)nr, sizeof *r);
    model_state_regions(m, r, nr);
    char err[256];
    int refused = 0;
    for (int i = 0; i < nr; i++) {
        uint8_t *copy = malloc(model_state_bytes(m));
        memcpy(copy, raw, model_state_bytes(m));
        size_t at = r[i].offset + (r[i].count / 2) * (size_t)r[i].elem_bytes;
        if (r[i].elem_bytes == 4) {
            float v = i % 2 ? INFINITY : NAN;
            memcpy(copy + at, &v, 4);
        } else {
            double v = i % 2 ? -INFINITY : NAN;
            memcpy(copy + at, &v, 8);
        }
        uint8_t *blob = (uint8_t *)1;
        size_t len = 7;
        err[0] = 0;
        int rc = state_encode(m, &mt, copy, &blob, &len, err, sizeof err);
        char want[64];
        snprintf(want, sizeof want, "layer %d region %s", r[i].layer, r[i].name);
        if (rc == STATE_E_NONFINITE && blob == NULL && len == 0 && strstr(err, want))
            refused++;
        else
            CHECK(0, "region %d (%s): rc %d, message '%s'", i, want, rc, err);
        free(copy);
    }
    CHECK(refused == nr && nr > 0, "%d of %d regions refused", refused, nr);
    mt.pending_token = 256;
    uint8_t *blob;
    size_t len;
    CHECK(state_encode(m, &mt, raw, &blob, &len, err, sizeof err) == STATE_E_INVALID,
          "pending token 256 refused at encode");
    free(r);
    free(raw);
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/lind-format-test-XXXXXX");
    if (!mkdtemp(dir)) {
        printf("FAIL setup: mkdtemp\n");
        return 1;
    }
    m = load_random("a", 1);
    other = load_random("b", 2);
    if (!m || !other || model_slots_reserve(m, 2) < 0) {
        printf("FAIL setup: cannot build the random test models\n");
        return 1;
    }
    RUN(resume_continues_exactly);
    RUN(refusals);
    RUN(nonfinite_never_encoded);
    model_free(m);
    model_free(other);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        printf("NOTE could not remove %s\n", dir);
    return check_exit();
}
