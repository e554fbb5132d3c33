/* tests/test_core_loader.c — malformed, truncated or mismatched models are
 * refused with a message naming the file, the tensor and what is wrong;
 * fp16/bf16 files are widened exactly. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "recurrent/model.h"
#include "recurrent/safetensors.h"
#include "tests/check.h"
#include "tests/testmodel.h"

static char tmpdir[256];
static int ncase;

/* A valid model directory; returns its path in a static buffer. */
static const char *valid_model(const char *mixers, const char *variant, char *dir, size_t n)
{
    snprintf(dir, n, "%s/m%d", tmpdir, ncase++);
    testmodel_cfg c = testmodel_config(16, 2, 2, 8, 32, mixers, 1, variant);
    testmodel_opts o = {0.9f, 1};
    if (testmodel_write(dir, &c, 3, &o) != 0) return NULL;
    return dir;
}

/* Load the tensors of dir/model.safetensors as an editable list. */
typedef struct tlist {
    testmodel_tensor t[128];
    void *mem[128];
    int n;
} tlist;

static int tlist_read(const char *dir, tlist *L)
{
    char path[600], err[256];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    st_file st;
    if (st_open(&st, path, err, sizeof err) < 0) return -1;
    L->n = 0;
    for (int i = 0; i < st.n && i < 128; i++) {
        testmodel_tensor *t = &L->t[L->n];
        snprintf(t->name, sizeof t->name, "%s", st.t[i].name);
        t->dtype = "F32";
        t->ndim = st.t[i].ndim;
        t->shape[0] = st.t[i].shape[0];
        t->shape[1] = st.t[i].ndim > 1 ? st.t[i].shape[1] : 0;
        float *p = malloc(st.t[i].numel * 4 + 4);
        st_read_f32(&st, &st.t[i], p);
        t->data = p;
        t->nbytes = st.t[i].numel * 4;
        L->mem[L->n++] = p;
    }
    st_close(&st);
    return 0;
}

static int tlist_write(const char *dir, tlist *L)
{
    char path[600];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    return testmodel_st_write(path, L->t, L->n);
}

static void tlist_free(tlist *L)
{
    for (int i = 0; i < L->n; i++) free(L->mem[i]);
    L->n = 0;
}

static testmodel_tensor *tfind(tlist *L, const char *name)
{
    for (int i = 0; i < L->n; i++)
        if (!strcmp(L->t[i].name, name)) return &L->t[i];
    return NULL;
}

static void tremove(tlist *L, const char *name)
{
    for (int i = 0; i < L->n; i++)
        if (!strcmp(L->t[i].name, name)) {
            free(L->mem[i]);
            memmove(&L->t[i], &L->t[i + 1], (size_t)(L->n - i - 1) * sizeof L->t[0]);
            memmove(&L->mem[i], &L->mem[i + 1], (size_t)(L->n - i - 1) * sizeof L->mem[0]);
            L->n--;
            return;
        }
}

/* model_load must fail and its message contain every given fragment. */
#define EXPECT_REFUSED(dir, ...) do {                                                    \
        char err_[512] = "";                                                             \
        model *m_ = NULL;                                                                \
        int rc_ = model_load(dir, "cpu", &m_, err_, sizeof err_);                        \
        CHECK(rc_ < 0 && !m_, "loaded a bad model");                                     \
        const char *frags_[] = {__VA_ARGS__};                                            \
        for (size_t i_ = 0; i_ < sizeof frags_ / sizeof frags_[0]; i_++)                 \
            CHECK(strstr(err_, frags_[i_]), "message \"%s\" lacks \"%s\"", err_, frags_[i_]); \
        if (m_) model_free(m_);                                                          \
    } while (0)

static void write_file(const char *dir, const char *name, const void *data, size_t n) {
    char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (f) {
        fwrite(data, 1, n, f);
        fclose(f);
    }
}

static void valid_loads(void) {
    char dir[300];
    CHECK(valid_model("linear,aft", "decay", dir, sizeof dir), "write");
    char err[512] = "";
    model *m = NULL;
    CHECK(model_load(dir, "cpu", &m, err, sizeof err) == 0, "valid model refused: %s", err);
    if (m) {
        CHECK(model_state_bytes(m) > 0 && model_param_count(m) > 0, "sizes");
        model_free(m);
    }
}

static void truncated_file(void) {
    char dir[300], path[600];
    CHECK(valid_model("linear", NULL, dir, sizeof dir), "write");
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    FILE *f = fopen(path, "rb");
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fclose(f);
    CHECK(truncate(path, n / 2) == 0, "truncate");
    EXPECT_REFUSED(dir, "model.safetensors", "past the end", "truncated");
    CHECK(truncate(path, 5) == 0, "truncate");
    EXPECT_REFUSED(dir, "model.safetensors", "truncated", "8-byte");
    /* header length pointing past the end of the file */
    uint8_t hdr[16] = {0xff, 0xff, 0, 0, 0, 0, 0, 0, '{', '}'};
    write_file(dir, "model.safetensors", hdr, 10);
    EXPECT_REFUSED(dir, "model.safetensors", "truncated", "header length");
}

static void bad_header_json(void) {
    char dir[300];
    CHECK(valid_model("linear", NULL, dir, sizeof dir), "write");
    const char *j = "{\"embed.weight\": {\"dtype\": \"F32\", \"shape\": [256, 16], ";
    uint8_t buf[256];
    size_t n = strlen(j);
    for (int i = 0; i < 8; i++) buf[i] = (uint8_t)(n >> (8 * i));
    memcpy(buf + 8, j, n);
    write_file(dir, "model.safetensors", buf, 8 + n);
    EXPECT_REFUSED(dir, "model.safetensors", "bad header JSON");
    const char *arr = "[1, 2, 3]";
    n = strlen(arr);
    for (int i = 0; i < 8; i++) buf[i] = (uint8_t)(n >> (8 * i));
    memcpy(buf + 8, arr, n);
    write_file(dir, "model.safetensors", buf, 8 + n);
    EXPECT_REFUSED(dir, "model.safetensors", "bad header JSON", "not an object");
}

static void wrong_dtype(void) {
    char dir[300];
    tlist L;
    CHECK(valid_model("linear", NULL, dir, sizeof dir) && tlist_read(dir, &L) == 0, "setup");
    tfind(&L, "layers.1.ffn.b1")->dtype = "I32";
    tlist_write(dir, &L);
    tlist_free(&L);
    EXPECT_REFUSED(dir, "model.safetensors", "layers.1.ffn.b1", "unsupported dtype \"I32\"");
}

static void wrong_shape(void) {
    char dir[300];
    tlist L;
    CHECK(valid_model("linear", NULL, dir, sizeof dir) && tlist_read(dir, &L) == 0, "setup");
    testmodel_tensor *t = tfind(&L, "layers.0.mixer.wq");
    t->shape[0] = 8;   /* [16, 16] → [8, 32]: same byte count, wrong shape */
    t->shape[1] = 32;
    tlist_write(dir, &L);
    tlist_free(&L);
    EXPECT_REFUSED(dir, "model.safetensors", "layers.0.mixer.wq", "shape [8, 32]", "expected [16, 16]");
}

static void missing_tensor(void) {
    char dir[300];
    tlist L;
    CHECK(valid_model("linear", NULL, dir, sizeof dir) && tlist_read(dir, &L) == 0, "setup");
    tremove(&L, "layers.1.ffn.w2");
    tlist_write(dir, &L);
    tlist_free(&L);
    EXPECT_REFUSED(dir, "model.safetensors", "missing tensor 'layers.1.ffn.w2'");
    /* a decay-variant AFT model without its bonus */
    CHECK(valid_model("aft", "decay", dir, sizeof dir) && tlist_read(dir, &L) == 0, "setup");
    tremove(&L, "layers.0.mixer.time_first");
    tlist_write(dir, &L);
    tlist_free(&L);
    EXPECT_REFUSED(dir, "missing tensor 'layers.0.mixer.time_first'");
}

static void offsets_past_end(void) {
    char dir[300];
    CHECK(valid_model("linear", NULL, dir, sizeof dir), "write");
    const char *j = "{\"embed.weight\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                    "\"head.weight\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,4096]}}";
    uint8_t buf[512];
    size_t n = strlen(j);
    for (int i = 0; i < 8; i++) buf[i] = (uint8_t)(n >> (8 * i));
    memcpy(buf + 8, j, n);
    memset(buf + 8 + n, 0, 16);
    write_file(dir, "model.safetensors", buf, 8 + n + 16);
    EXPECT_REFUSED(dir, "model.safetensors", "head.weight", "past the end");
    /* offsets inside the file but not matching the shape's byte count */
    j = "{\"embed.weight\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}";
    n = strlen(j);
    for (int i = 0; i < 8; i++) buf[i] = (uint8_t)(n >> (8 * i));
    memcpy(buf + 8, j, n);
    write_file(dir, "model.safetensors", buf, 8 + n + 16);
    EXPECT_REFUSED(dir, "model.safetensors", "embed.weight", "8 data bytes", "expected 12");
}

static void unexpected_tensor(void) {
    char dir[300];
    tlist L;
    CHECK(valid_model("aft", "simple", dir, sizeof dir) && tlist_read(dir, &L) == 0, "setup");
    /* a decay tensor in a simple-variant model would be silently ignored */
    testmodel_tensor *src = tfind(&L, "layers.0.ln1.bias");
    L.t[L.n] = *src;
    snprintf(L.t[L.n].name, sizeof L.t[L.n].name, "layers.0.mixer.time_decay");
    L.mem[L.n++] = NULL;
    tlist_write(dir, &L);
    tlist_free(&L);
    EXPECT_REFUSED(dir, "unexpected tensor 'layers.0.mixer.time_decay'");
}

static void bad_values(void) {
    char dir[300];
    tlist L;
    CHECK(valid_model("linear", NULL, dir, sizeof dir) && tlist_read(dir, &L) == 0, "setup");
    float *g = (float *)tfind(&L, "layers.1.mixer.decay")->data;
    g[1] = 1.5f;
    tlist_write(dir, &L);
    EXPECT_REFUSED(dir, "layers.1.mixer.decay", "outside (0, 1]");
    g[1] = 0.9f;
    ((float *)tfind(&L, "layers.0.ffn.w1")->data)[7] = NAN;
    tlist_write(dir, &L);
    tlist_free(&L);
    EXPECT_REFUSED(dir, "layers.0.ffn.w1", "non-finite");
}

static void bad_config(void) {
    char dir[300];
    CHECK(valid_model("linear", NULL, dir, sizeof dir), "write");
    const char *base = "\"vocab_size\":256,\"d_model\":16,\"n_layers\":2,\"n_heads\":2,\"d_head\":8,\"d_ff\":32,"
                       "\"token_shift\":true,\"norm_eps\":1e-5";
    char j[1024];
    snprintf(j, sizeof j, "{%s,\"mixers\":[\"linear\",\"mamba9\"],\"feature_map\":\"elu1\"}", base);
    write_file(dir, "config.json", j, strlen(j));
    EXPECT_REFUSED(dir, "config.json", "layer 1", "mamba9", "not a known kind", "linear, aft");
    snprintf(j, sizeof j, "{%s,\"mixers\":[\"linear\",\"linear\"],\"feature_map\":\"relu\"}", base);
    write_file(dir, "config.json", j, strlen(j));
    EXPECT_REFUSED(dir, "config.json", "feature_map", "relu");
    snprintf(j, sizeof j, "{%s,\"mixers\":[\"linear\",\"aft\"],\"feature_map\":\"elu1\"}", base);
    write_file(dir, "config.json", j, strlen(j));
    EXPECT_REFUSED(dir, "config.json", "aft_variant");
    snprintf(j, sizeof j, "{%s,\"mixers\":[\"linear\"],\"feature_map\":\"elu1\"}", base);
    write_file(dir, "config.json", j, strlen(j));
    EXPECT_REFUSED(dir, "config.json", "\"mixers\" has 1 entries for 2 layers");
    write_file(dir, "config.json", "{\"d_model\": 16", 14);
    EXPECT_REFUSED(dir, "config.json", "bad JSON");
    snprintf(j, sizeof j, "{%s,\"mixers\":[\"linear\",\"linear\"],\"feature_map\":\"elu1\"}", base);
    char *v = strstr(j, "256");
    memcpy(v, "128", 3);   /* fewer ids than the byte tokenizer produces */
    write_file(dir, "config.json", j, strlen(j));
    EXPECT_REFUSED(dir, "bytes tokenizer has 256 tokens", "vocab_size is 128");
    memcpy(v, "512", 3);   /* more is allowed (padded vocabularies), but the tensors must match */
    write_file(dir, "config.json", j, strlen(j));
    EXPECT_REFUSED(dir, "embed.weight", "expected [512, 16]");
    char *h = strstr(j, "\"n_heads\":2,");
    memmove(h, h + 12, strlen(h + 12) + 1);
    write_file(dir, "config.json", j, strlen(j));
    EXPECT_REFUSED(dir, "config.json", "layer 0 (linear)", "missing field \"n_heads\"");
    snprintf(j, sizeof j, "{%s,\"mixers\":[\"linear\",\"linear\"],\"ffns\":[\"gelu_mlp\",\"swiglu9\"]}", base);
    write_file(dir, "config.json", j, strlen(j));
    EXPECT_REFUSED(dir, "config.json", "layer 1", "ffn \"swiglu9\"", "gelu_mlp, rwkv_channel_mix");
    char none[300];
    snprintf(none, sizeof none, "%s/does-not-exist", tmpdir);
    EXPECT_REFUSED(none, "does-not-exist/config.json", "No such file");
}

/* fp32 → bf16 / fp16 bit patterns for values exactly representable in them. */
static uint16_t to_bf16(float f) {
    uint32_t b;
    memcpy(&b, &f, 4);
    return (uint16_t)(b >> 16);
}
static uint16_t to_f16(float f) {   /* normal, exactly representable values and 0 */
    if (f == 0.0f) return signbit(f) ? 0x8000 : 0;
    int e;
    float m = frexpf(fabsf(f), &e);   /* f = m·2^e, m in [0.5, 1) */
    uint16_t man = (uint16_t)lrintf((m * 2.0f - 1.0f) * 1024.0f);
    return (uint16_t)((f < 0 ? 0x8000 : 0) | (uint16_t)((e - 1 + 15) << 10) | man);
}

/* The same weights stored as F32 and as F16 / BF16 give identical logits. */
static void half_precision_widened(void) {
    char d32[300], d16[300], dbf[300];
    tlist L;
    CHECK(valid_model("linear,aft", "decay", d32, sizeof d32) && tlist_read(d32, &L) == 0, "setup");
    snprintf(d16, sizeof d16, "%s/f16", tmpdir);
    snprintf(dbf, sizeof dbf, "%s/bf16", tmpdir);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "mkdir -p %s %s && cp %s/config.json %s/ && cp %s/config.json %s/", d16, dbf, d32, d16,
             d32, dbf);
    CHECK(system(cmd) == 0, "copy config");
    /* round every weight to a value exact in both formats: 8 significant bits, |x| ≥ 2^-14 or 0 */
    uint16_t *h16[128], *hbf[128];
    for (int i = 0; i < L.n; i++) {
        float *p = L.mem[i];
        size_t n = L.t[i].nbytes / 4;
        h16[i] = malloc(n * 2 + 2);
        hbf[i] = malloc(n * 2 + 2);
        for (size_t k = 0; k < n; k++) {
            float x = p[k];
            if (fabsf(x) < 0x1.0p-14f) x = 0;
            else {
                int e;
                float m = frexpf(x, &e);
                x = ldexpf(roundf(m * 256.0f) / 256.0f, e);
            }
            if (fabsf(x) > 60000.0f) x = copysignf(60000.0f, x);
            p[k] = x;
            h16[i][k] = to_f16(x);
            hbf[i][k] = to_bf16(x);
        }
    }
    tlist_write(d32, &L);
    testmodel_tensor t16[128], tbf[128];
    for (int i = 0; i < L.n; i++) {
        t16[i] = tbf[i] = L.t[i];
        t16[i].dtype = "F16";
        tbf[i].dtype = "BF16";
        t16[i].data = h16[i];
        tbf[i].data = hbf[i];
        t16[i].nbytes = tbf[i].nbytes = L.t[i].nbytes / 2;
    }
    char path[600];
    snprintf(path, sizeof path, "%s/model.safetensors", d16);
    CHECK(testmodel_st_write(path, t16, L.n) == 0, "write f16");
    snprintf(path, sizeof path, "%s/model.safetensors", dbf);
    CHECK(testmodel_st_write(path, tbf, L.n) == 0, "write bf16");
    model *m[3] = {0};
    const char *dirs[3] = {d32, d16, dbf};
    char err[512];
    for (int i = 0; i < 3; i++) CHECK(model_load(dirs[i], "cpu", &m[i], err, sizeof err) == 0, "load %s: %s", dirs[i], err);
    if (m[0] && m[1] && m[2]) {
        float l[3][256];
        int slot = 0, toks[] = {0, 'a', 'b', 'c', 200, 17};
        for (int i = 0; i < 3; i++) {
            model_slots_reserve(m[i], 1);
            model_slot_reset(m[i], 0);
            for (size_t t = 0; t < sizeof toks / sizeof toks[0]; t++) model_step(m[i], &slot, &toks[t], 1, l[i]);
        }
        CHECK(!memcmp(l[0], l[1], sizeof l[0]), "F16 logits differ from F32");
        CHECK(!memcmp(l[0], l[2], sizeof l[0]), "BF16 logits differ from F32");
    }
    for (int i = 0; i < 3; i++) model_free(m[i]);
    for (int i = 0; i < L.n; i++) {
        free(h16[i]);
        free(hbf[i]);
    }
    tlist_free(&L);
}

static void fingerprint_tracks_weights(void) {
    char dir[300];
    tlist L;
    CHECK(valid_model("linear", NULL, dir, sizeof dir) && tlist_read(dir, &L) == 0, "setup");
    char err[512];
    model *a = NULL, *b = NULL;
    CHECK(model_load(dir, "cpu", &a, err, sizeof err) == 0, "load: %s", err);
    ((float *)tfind(&L, "head.weight")->data)[3] += 1.0f;
    tlist_write(dir, &L);
    tlist_free(&L);
    CHECK(model_load(dir, "cpu", &b, err, sizeof err) == 0, "load: %s", err);
    if (a && b) CHECK(model_fingerprint(a) != model_fingerprint(b), "fingerprint ignores a changed weight");
    model_free(a);
    model_free(b);
}

/* Random damage to a valid file (header bytes flipped, the file cut at
 * many lengths) is refused with a message or, if harmless, loads; it never
 * crashes (this case is most useful under `make asan`). */
static void damage_never_crashes(void) {
    char dir[300], path[600];
    CHECK(valid_model("linear,aft", "decay", dir, sizeof dir), "write");
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    FILE *f = fopen(path, "rb");
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *orig = malloc((size_t)n), *buf = malloc((size_t)n);
    CHECK(fread(orig, 1, (size_t)n, f) == (size_t)n, "read");
    fclose(f);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | orig[i];
    uint64_t rng = 12345;
    int refused = 0, loaded = 0, unexplained = 0;
    int rounds = getenv("LIND_SANITIZED") ? 150 : 600;
    for (int r = 0; r < rounds; r++) {
        memcpy(buf, orig, (size_t)n);
        long len = n;
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        if (r % 3 == 0) {
            len = (long)((rng >> 33) % (uint64_t)n);   /* cut anywhere */
        } else {
            int flips = 1 + (int)((rng >> 60) & 3);
            for (int k = 0; k < flips; k++) {
                rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                size_t at = (size_t)((rng >> 20) % (hlen + 8));
                buf[at] = (unsigned char)(rng >> 56);
            }
        }
        write_file(dir, "model.safetensors", buf, (size_t)len);
        char err[512] = "";
        model *m = NULL;
        if (model_load(dir, "cpu", &m, err, sizeof err) == 0) {
            loaded++;
            model_free(m);
        } else {
            refused++;
            if (!strstr(err, "model.safetensors")) unexplained++;
        }
    }
    CHECK(unexplained == 0, "%d refusals did not name the file", unexplained);
    CHECK(refused > rounds / 2, "only %d of %d damaged files refused", refused, rounds);
    printf("NOTE %d damaged files: %d refused, %d still valid (e.g. a changed digit in a name's padding)\n", rounds,
           refused, loaded);
    free(orig);
    free(buf);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/lind_loader.XXXXXX");
    if (!mkdtemp(tmpdir)) {
        printf("FAIL setup: mkdtemp\n");
        return 1;
    }
    RUN(valid_loads);
    RUN(truncated_file);
    RUN(bad_header_json);
    RUN(wrong_dtype);
    RUN(wrong_shape);
    RUN(missing_tensor);
    RUN(offsets_past_end);
    RUN(unexpected_tensor);
    RUN(bad_values);
    RUN(bad_config);
    RUN(half_precision_widened);
    RUN(fingerprint_tracks_weights);
    RUN(damage_never_crashes);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) printf("NOTE could not remove %s\n", tmpdir);
    return check_exit();
}
