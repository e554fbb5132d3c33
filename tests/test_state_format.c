/* tests/test_state_format.c — the state blob: a saved and restored session
 * continues exactly as the uninterrupted one, and every kind of damage is
 * refused with its specific error. Uses small random-weight models
 * (tests/testmodel.h). Version 2: typed regions (integers never checked as
 * floats), the text tail, 32-bit window ids; and the version-1 blobs lind
 * wrote for the shipped model (tests/fixtures/state_v1) still decode. */
#include "tests/check.h"
#include "tests/testmodel.h"
#include "state/format.h"
#include "state/le.h"
#include "recurrent/file.h"

#include <jansson.h>
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

/* Where the raw state starts in a v2 blob with this tail. */
static size_t header_bytes(const model *x, uint32_t tail_len)
{
    return 1164 + tail_len + 48 * (size_t)model_state_regions(x, NULL, 0);
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

static int same_meta(const state_meta *a, const state_meta *b)
{
    return a->tokens == b->tokens && a->pending_token == b->pending_token &&
           same_sampler(&a->sampler, &b->sampler) && a->tail_len == b->tail_len &&
           memcmp(a->tail, b->tail, a->tail_len) == 0;
}

static void resume_continues_exactly(void)
{
    state_meta mt = some_meta();
    uint8_t *raw = run_session(m, 0, "Hello, wor", &mt.sampler);
    mt.tokens = 11;
    /* ids a byte window could not hold, and an unfinished text tail */
    sampler_observe(&mt.sampler, 300);
    sampler_observe(&mt.sampler, SAMPLER_VOCAB_MAX - 1);
    sampler_observe(&mt.sampler, 'l');
    memcpy(mt.tail, "ld \xe2\x82", 5);   /* "ld " and the first two bytes of a UTF-8 character */
    mt.tail_len = 5;
    mt.chat_template = 0x9e3779b9u;   /* the session's chat template hash */
    uint8_t *blob = NULL;
    size_t len = 0;
    char err[256] = "";
    int rc = state_encode(m, &mt, raw, &blob, &len, err, sizeof err);
    CHECK(rc == 0, "encode: %d %s", rc, err);
    if (rc < 0) { free(raw); return; }
    int nr = model_state_regions(m, NULL, 0);
    CHECK(len == 1164 + 5 + 48 * (size_t)nr + model_state_bytes(m) + 8, "blob size %zu", len);

    size_t sb = model_state_bytes(m);
    uint8_t *back = malloc(sb);
    state_meta mb;
    rc = state_decode(m, blob, len, &mb, back, err, sizeof err);
    CHECK(rc == 0, "decode: %d %s", rc, err);
    CHECK(memcmp(back, raw, sb) == 0, "raw state bit-identical");
    CHECK(mb.tokens == 11 && mb.pending_token == 'x', "tokens/pending");
    CHECK(same_sampler(&mb.sampler, &mt.sampler), "sampler (params, RNG, window) identical");
    CHECK(mb.tail_len == 5 && memcmp(mb.tail, "ld \xe2\x82", 5) == 0, "text tail: %u bytes", mb.tail_len);
    CHECK(mb.chat_template == 0x9e3779b9u, "chat template hash: %08x", mb.chat_template);
    int w = (int)((mb.sampler.wpos + SAMPLER_WINDOW_MAX - 2) % SAMPLER_WINDOW_MAX);
    CHECK(mb.sampler.window[w] == SAMPLER_VOCAB_MAX - 1 &&
          mb.sampler.window[(w + SAMPLER_WINDOW_MAX - 1) % SAMPLER_WINDOW_MAX] == 300, "window ids > 255");

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
    y[8] = STATE_FORMAT_VERSION + 1;
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
    for (size_t i = 0; i < len; i += i < header_bytes(m, 0) + 64 ? 1 : 7) {
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
    size_t hdr = header_bytes(m, 0);
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

/* Integer regions hold any bit pattern (NaN-looking ones included); a NaN or
 * Inf in a float region is refused, naming the region. */
static void typed_regions(void)
{
    uint8_t raw[4 * 4 + 8 * 2 + 4 * 4 + 8 * 2];
    model_state_region r[4] = {
        {.layer = 0, .name = "head", .type = LIND_EL_I32, .elem_bytes = 4, .offset = 0, .count = 4},
        {.layer = 0, .name = "pos", .type = LIND_EL_I64, .elem_bytes = 8, .offset = 16, .count = 2},
        {.layer = 1, .name = "S", .type = LIND_EL_F32, .elem_bytes = 4, .offset = 32, .count = 4},
        {.layer = -1, .name = "ffn.k", .type = LIND_EL_F64, .elem_bytes = 8, .offset = 48, .count = 2},
    };
    memset(raw, 0, sizeof raw);
    uint32_t nan32[4] = {0x7fc00000u, 0x7f800000u, 0xff800000u, 0x7fffffffu};
    uint64_t nan64[2] = {0x7ff8000000000000ull, 0xfff0000000000000ull};
    memcpy(raw, nan32, 16);
    memcpy(raw + 16, nan64, 16);
    char err[256] = "";
    int rc = state_check_finite(r, 4, raw, err, sizeof err);
    CHECK(rc == 0, "integer regions holding NaN/Inf bit patterns refused: %d %s", rc, err);
    float nf = NAN;
    memcpy(raw + 32 + 8, &nf, 4);
    rc = state_check_finite(r, 4, raw, err, sizeof err);
    CHECK(rc == STATE_E_NONFINITE && strstr(err, "layer 1 region S") && strstr(err, "NaN at element 2"),
          "NaN in a float region: %d %s", rc, err);
    memset(raw + 32, 0, 16);
    double inf = -INFINITY;
    memcpy(raw + 48 + 8, &inf, 8);
    rc = state_check_finite(r, 4, raw, err, sizeof err);
    CHECK(rc == STATE_E_NONFINITE && strstr(err, "layer -1 region ffn.k") && strstr(err, "-Inf at element 1"),
          "-Inf in a double region: %d %s", rc, err);
    /* the same two regions as float would be refused: the type is what decides */
    r[0].type = LIND_EL_F32;
    memset(raw + 48, 0, 16);
    rc = state_check_finite(r, 4, raw, err, sizeof err);
    CHECK(rc == STATE_E_NONFINITE && strstr(err, "region head"), "as f32 the head region is refused: %d %s", rc, err);

    /* The blob's region table carries the type: a forged table whose type
     * differs from the model's is another layout. */
    state_meta mt = some_meta();
    uint8_t *st = run_session(m, 0, "typed", NULL), *blob = NULL;
    size_t len = 0;
    if (state_encode(m, &mt, st, &blob, &len, err, sizeof err) < 0) {
        CHECK(0, "encode: %s", err);
        free(st);
        return;
    }
    uint8_t *out = malloc(model_state_bytes(m));
    state_meta mo;
    size_t e0 = 1164;   /* first region entry; its type at +40 */
    CHECK(blob[e0 + 40] == LIND_EL_F64 || blob[e0 + 40] == LIND_EL_F32, "region 0 type byte %d", blob[e0 + 40]);
    blob[e0 + 40] = LIND_EL_I64;
    reseal(blob, len);
    rc = state_decode(m, blob, len, &mo, out, err, sizeof err);
    CHECK(rc == STATE_E_MODEL && strstr(err, "i64"), "region type changed: %d %s", rc, err);
    free(out);
    free(blob);
    free(st);
}

/* The text tail: empty, binary, the longest allowed; one byte more is
 * refused at encode and, forged into a blob, at decode. Every truncation of a
 * blob with a tail reads as truncation. */
static void text_tail(void)
{
    uint8_t *st = run_session(m, 0, "tail", NULL);
    size_t sb = model_state_bytes(m);
    uint8_t *out = malloc(sb);
    char err[256] = "";
    uint32_t lens[3] = {0, 7, TOKENIZER_TAIL_MAX};
    for (int c = 0; c < 3; c++) {
        state_meta mt = some_meta(), mo;
        mt.tail_len = lens[c];
        for (uint32_t i = 0; i < lens[c]; i++) mt.tail[i] = (uint8_t)(i * 37 + 1);
        uint8_t *blob = NULL;
        size_t len = 0;
        int rc = state_encode(m, &mt, st, &blob, &len, err, sizeof err);
        CHECK(rc == 0 && len == header_bytes(m, lens[c]) + sb + 8, "tail %u: encode %d %s, %zu bytes", lens[c], rc,
              err, len);
        if (rc < 0) continue;
        memset(&mo, 0x5a, sizeof mo);
        rc = state_decode(m, blob, len, &mo, out, err, sizeof err);
        CHECK(rc == 0 && same_meta(&mo, &mt) && memcmp(out, st, sb) == 0, "tail %u: round trip %d %s", lens[c], rc,
              err);
        if (lens[c] == 7) {
            int wrong = 0;
            for (size_t n = 0; n < len; n++)
                wrong += state_decode(m, blob, n, &mo, out, err, sizeof err) != STATE_E_TRUNCATED;
            CHECK(wrong == 0, "%d truncations of a blob with a tail not reported as truncated", wrong);
            /* tail length changed, checksums recomputed, sizes no longer add up: damage */
            uint8_t *y = malloc(len);
            memcpy(y, blob, len);
            y[1160] = 8;
            reseal(y, len);
            rc = state_decode(m, y, len, &mo, out, err, sizeof err);
            CHECK(rc == STATE_E_CHECKSUM && strstr(err, "inconsistent"), "tail length off by one: %d %s", rc, err);
            free(y);
        }
        if (lens[c] == TOKENIZER_TAIL_MAX) {
            /* forge a blob with one byte more, consistent sizes and checksums */
            uint8_t *y = malloc(len + 1);
            size_t at = 1164 + TOKENIZER_TAIL_MAX;
            memcpy(y, blob, at);
            y[at] = 'x';
            memcpy(y + at + 1, blob + at, len - at);
            uint32_t h = (uint32_t)(header_bytes(m, TOKENIZER_TAIL_MAX) + 1), tl = TOKENIZER_TAIL_MAX + 1;
            for (int i = 0; i < 4; i++) {
                y[16 + i] = (uint8_t)(h >> (8 * i));
                y[1160 + i] = (uint8_t)(tl >> (8 * i));
            }
            reseal(y, len + 1);
            rc = state_decode(m, y, len + 1, &mo, out, err, sizeof err);
            CHECK(rc == STATE_E_INVALID && strstr(err, "tail is 1025 bytes"), "forged tail of 1025: %d %s", rc, err);
            free(y);
        }
        free(blob);
    }
    state_meta mt = some_meta();
    mt.tail_len = TOKENIZER_TAIL_MAX + 1;
    uint8_t *blob = (uint8_t *)1;
    size_t len = 3;
    int rc = state_encode(m, &mt, st, &blob, &len, err, sizeof err);
    CHECK(rc == STATE_E_INVALID && blob == NULL && len == 0 && strstr(err, "tail"), "encode tail 1025: %d %s", rc, err);
    mt = some_meta();
    mt.sampler.window[3] = -1;
    rc = state_encode(m, &mt, st, &blob, &len, err, sizeof err);
    CHECK(rc == STATE_E_INVALID && strstr(err, "window entry 3"), "encode window id -1: %d %s", rc, err);
    mt.sampler.window[3] = SAMPLER_VOCAB_MAX;
    rc = state_encode(m, &mt, st, &blob, &len, err, sizeof err);
    CHECK(rc == STATE_E_INVALID && strstr(err, "window entry 3"), "encode window id 2^18: %d %s", rc, err);
    free(out);
    free(st);
}

/* ---- version 1, as lind wrote it for the shipped model ------------------- */

/* path's bytes (malloc'd, the caller frees); NULL if unreadable. */
static uint8_t *slurp(const char *path, size_t *len)
{
    char err[256], *b = NULL;
    return file_read(path, 0, &b, len, err, sizeof err) == 0 ? (uint8_t *)b : NULL;
}

static uint64_t hex64(json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s ? strtoull(s, NULL, 16) : 0;
}

static void v1_blobs_decode(void)
{
    const char *fdir = getenv("LIND_FIXTURE_DIR") ? getenv("LIND_FIXTURE_DIR") : "tests/fixtures";
    const char *mdir = getenv("LIND_MODEL_DIR") ? getenv("LIND_MODEL_DIR") : "models/default";
    char path[512], err[256] = "";
    snprintf(path, sizeof path, "%s/state_v1/expected.json", fdir);
    json_error_t je;
    json_t *ex = json_load_file(path, 0, &je);
    CHECK(ex != NULL, "%s: %s", path, je.text);
    model *d = NULL;
    int rc = model_load(mdir, "cpu", &d, err, sizeof err);
    CHECK(rc == 0, "model_load %s: %s", mdir, err);
    if (!ex || rc < 0 || model_slots_reserve(d, 2) < 0) {
        json_decref(ex);
        model_free(d);
        return;
    }
    CHECK(model_fingerprint(d) == hex64(ex, "model_fingerprint"), "%s is not the model the fixtures were made with",
          mdir);
    size_t sb = model_state_bytes(d);
    uint8_t *raw = malloc(sb), *raw2 = malloc(sb);
    const char *names[2] = {"bos", "generated"};
    for (int c = 0; c < 2; c++) {
        json_t *o = json_object_get(ex, names[c]);
        snprintf(path, sizeof path, "%s/state_v1/%s", fdir, json_string_value(json_object_get(o, "file")));
        size_t len = 0;
        uint8_t *blob = slurp(path, &len);
        CHECK(blob && len == (size_t)json_integer_value(json_object_get(o, "blob_bytes")), "%s: %zu bytes", path,
              len);
        if (!blob)
            continue;
        CHECK(blob[8] == 1, "%s is not a version-1 blob", path);
        state_meta mt;
        memset(&mt, 0x5a, sizeof mt);
        rc = state_decode(d, blob, len, &mt, raw, err, sizeof err);
        CHECK(rc == 0, "%s: decode %d %s", names[c], rc, err);
        if (rc < 0) {
            free(blob);
            continue;
        }
        const sampler *sp = &mt.sampler;
        CHECK(mt.tokens == (uint64_t)json_integer_value(json_object_get(o, "tokens")) &&
                  mt.pending_token == (int)json_integer_value(json_object_get(o, "pending_token")) && mt.tail_len == 0 &&
                  mt.chat_template == 0,
              "%s: tokens %llu pending %d tail %u", names[c], (unsigned long long)mt.tokens, mt.pending_token,
              mt.tail_len);
        CHECK(sp->p.temperature == (float)json_number_value(json_object_get(o, "temperature")) &&
                  sp->p.top_k == (int)json_integer_value(json_object_get(o, "top_k")) &&
                  sp->p.top_p == (float)json_number_value(json_object_get(o, "top_p")) &&
                  sp->p.rep_penalty == (float)json_number_value(json_object_get(o, "rep_penalty")) &&
                  sp->p.rep_window == (int)json_integer_value(json_object_get(o, "rep_window")) &&
                  sp->p.seed == (uint64_t)json_integer_value(json_object_get(o, "seed")),
              "%s: sampler settings", names[c]);
        json_t *rng = json_object_get(o, "rng"), *win = json_object_get(o, "window");
        int rng_ok = 1, win_ok = json_array_size(win) == SAMPLER_WINDOW_MAX;
        for (int i = 0; i < 4; i++)
            rng_ok &= sp->rng[i] == strtoull(json_string_value(json_array_get(rng, (size_t)i)), NULL, 16);
        for (int i = 0; win_ok && i < SAMPLER_WINDOW_MAX; i++)
            win_ok &= sp->window[i] == (int32_t)json_integer_value(json_array_get(win, (size_t)i));
        CHECK(rng_ok, "%s: RNG words differ", names[c]);
        CHECK(win_ok && sp->wlen == (uint32_t)json_integer_value(json_object_get(o, "wlen")) &&
                  sp->wpos == (uint32_t)json_integer_value(json_object_get(o, "wpos")),
              "%s: window (bytes as ids, length %u, position %u)", names[c], sp->wlen, sp->wpos);
        /* the blob holds what v1 saved; the decoded state is it in this
         * model's layout, where the AFT sums are now floats: each such
         * element the v1 double rounded once, everything else the same bytes */
        uint64_t v1_raw = le_get64(blob + 32), v1_hdr = le_get32(blob + 16), v1_nr = le_get32(blob + 20);
        CHECK(v1_hdr + v1_raw + 8 == len && XXH64(blob + v1_hdr, v1_raw, 0) == hex64(o, "raw_xxh64"),
              "%s: raw state differs from what v1 saved", names[c]);
        model_state_region mr[64];
        int mnr = model_state_regions(d, mr, 64), narrowed = 0, same_v1 = mnr == (int)v1_nr && mnr <= 64;
        for (int i = 0; same_v1 && i < mnr; i++) {
            const uint8_t *e = NULL;
            for (uint64_t q = 0; q < v1_nr && !e; q++) {
                const uint8_t *x = blob + 392 + 40 * q;   /* v1: 40-byte regions after the 256-byte window */
                if ((int32_t)le_get32(x) == mr[i].layer && !strncmp((const char *)x + 8, mr[i].name, 16)) e = x;
            }
            if (!e || le_get64(e + 32) != mr[i].count) {
                same_v1 = 0;
                break;
            }
            const uint8_t *src = blob + v1_hdr + le_get64(e + 24);
            if (le_get32(e + 4) == 8 && mr[i].type == LIND_EL_F32) {
                narrowed++;
                for (size_t k = 0; k < mr[i].count; k++) {
                    double dv;
                    float fv;
                    memcpy(&dv, src + 8 * k, 8);
                    memcpy(&fv, raw + mr[i].offset + 4 * k, 4);
                    same_v1 &= fv == (float)dv;
                }
            } else {
                same_v1 &= le_get32(e + 4) == (uint32_t)mr[i].elem_bytes &&
                           !memcmp(src, raw + mr[i].offset, mr[i].count * (size_t)mr[i].elem_bytes);
            }
        }
        CHECK(same_v1 && narrowed == 6, "%s: the decoded state is not v1's in this layout (%d regions narrowed, "
              "want 6: num, den, max of the two AFT layers)", names[c], narrowed);

        /* upgraded: re-encoded as v2, the same session */
        uint8_t *b2 = NULL;
        size_t l2 = 0;
        state_meta m2;
        rc = state_encode(d, &mt, raw, &b2, &l2, err, sizeof err);
        CHECK(rc == 0 && b2[8] == STATE_FORMAT_VERSION, "%s: re-encode %d %s", names[c], rc, err);
        if (rc == 0) {
            rc = state_decode(d, b2, l2, &m2, raw2, err, sizeof err);
            CHECK(rc == 0 && same_meta(&m2, &mt) && memcmp(raw, raw2, sb) == 0, "%s: v2 round trip %d %s", names[c],
                  rc, err);
            free(b2);
        }

        /* the restored session steps like the one v1 saved: feed the recorded
         * tokens afresh and compare the logits after the pending token */
        if (c == 1 && mt.pending_token >= 0) {
            json_t *fed = json_object_get(o, "fed");
            int s0 = 0, s1 = 1, tok;
            float la[LIND_BYTE_VOCAB], lb[LIND_BYTE_VOCAB];
            model_slot_reset(d, s0);
            for (size_t i = 0; i < json_array_size(fed); i++) {
                tok = (int)json_integer_value(json_array_get(fed, i));
                model_step(d, &s0, &tok, 1, NULL);
            }
            model_slot_write(d, s1, raw);
            tok = mt.pending_token;
            model_step(d, &s0, &tok, 1, la);
            model_step(d, &s1, &tok, 1, lb);
            double md = 0, mx = 0;
            for (int i = 0; i < LIND_BYTE_VOCAB; i++) {
                md = fmax(md, fabs((double)la[i] - lb[i]));
                mx = fmax(mx, fabs((double)la[i]));
            }
            CHECK(md <= 1e-5 * mx, "%s: the restored v1 session's logits differ by %g (max %g)", names[c], md, mx);
        }
        free(blob);
    }
    /* a v1 blob for another model is still refused as such; every cut of a
     * v1 blob reads as truncation; forged v1 fields are refused like v2's */
    snprintf(path, sizeof path, "%s/state_v1/bos.state", fdir);
    size_t len = 0;
    uint8_t *blob = slurp(path, &len);
    if (blob) {
        state_meta mt;
        uint8_t *o = malloc(model_state_bytes(m));
        rc = state_decode(m, blob, len, &mt, o, err, sizeof err);
        CHECK(rc == STATE_E_MODEL && strstr(err, "another model"), "v1 blob into another model: %d %s", rc, err);
        free(o);
        int wrong = 0;
        for (size_t n = 0; n < len; n++)
            wrong += state_decode(d, blob, n, &mt, raw, err, sizeof err) != STATE_E_TRUNCATED;
        CHECK(wrong == 0, "%d truncations of a v1 blob not reported as truncated", wrong);
        blob[48] = 0x00;
        blob[49] = 0x01;
        blob[50] = 0x00;
        blob[51] = 0x00;   /* pending token 256: outside the byte vocabulary */
        reseal(blob, len);
        rc = state_decode(d, blob, len, &mt, raw, err, sizeof err);
        CHECK(rc == STATE_E_INVALID && strstr(err, "pending token 256"), "forged v1 pending token: %d %s", rc, err);
        blob[48] = 0xff;
        blob[49] = 0xff;
        blob[50] = 0xff;
        blob[51] = 0xff;   /* back to -1 */
        blob[200] ^= 1;    /* a window byte, checksum not recomputed */
        rc = state_decode(d, blob, len, &mt, raw, err, sizeof err);
        CHECK(rc == STATE_E_CHECKSUM, "flipped v1 window byte: %d %s", rc, err);
        free(blob);
    }
    free(raw);
    free(raw2);
    json_decref(ex);
    model_free(d);
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
    RUN(typed_regions);
    RUN(text_tail);
    RUN(v1_blobs_decode);
    model_free(m);
    model_free(other);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        printf("NOTE could not remove %s\n", dir);
    return check_exit();
}
