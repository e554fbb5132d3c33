/* tests/test_core_cli.c — the offline `lind` commands: info, generate, score
 * (with --after-generate, --segment and any --chunk), logits, and their errors, run as a
 * user would, with the numbers checked against the C API doing the same thing
 * in-process (a BPE model's CLI is checked by tests/test_daemon_tokenized.py). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "kernels/cpu/gemm.h"
#include "recurrent/model.h"
#include "recurrent/sampler.h"
#include "tests/check.h"
#include "tests/testmodel.h"

static char tmpdir[256], lind[512], mdir[300];

/* Run a shell command, capture stdout+stderr into out; returns exit status. */
static int run(char *out, size_t outlen, const char *fmt, ...)
{
    char cmd[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    char full[2200];
    snprintf(full, sizeof full, "%s 2>&1", cmd);
    FILE *p = popen(full, "r");
    if (!p) return -1;
    size_t n = fread(out, 1, outlen - 1, p);
    out[n] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void info_reports_model(void)
{
    char out[4096];
    int rc = run(out, sizeof out, "%s info --model %s --backend cpu", lind, mdir);
    CHECK(rc == 0, "exit %d: %s", rc, out);
    model *m = NULL;
    char err[256];
    CHECK(model_load(mdir, "cpu", &m, err, sizeof err) == 0, "load: %s", err);
    if (!m) return;
    char want[128];
    snprintf(want, sizeof want, "state_bytes:  %zu per session", model_state_bytes(m));
    CHECK(strstr(out, want), "no \"%s\" in:\n%s", want, out);
    snprintf(want, sizeof want, "parameters:   %zu", model_param_count(m));
    CHECK(strstr(out, want), "no \"%s\" in:\n%s", want, out);
    CHECK(strstr(out, "mixers:       linear,aft") && strstr(out, "backend:      cpu"), "config/backend missing:\n%s", out);
    const char *lines[] = {"format:       lind", "tokenizer:    bytes", "vocab_size:   256", "bos:          0",
                           "ffns:         gelu_mlp,gelu_mlp", "layer 1       mixer aft, ffn gelu_mlp",
                           "weights:      f32", "compute:      f32"};
    for (size_t i = 0; i < sizeof lines / sizeof *lines; i++)
        CHECK(strstr(out, lines[i]), "no \"%s\" in:\n%s", lines[i], out);
    model_free(m);
    rc = run(out, sizeof out, "%s info --model %s --backend cpu --dtype bf16", lind, mdir);
    CHECK(rc == 0 && strstr(out, "weights:      bf16"), "--dtype bf16: exit %d:\n%s", rc, out);
    rc = run(out, sizeof out, "%s info --model %s --backend cpu --dtype q8", lind, mdir);
    CHECK(rc == 0 && strstr(out, "weights:      q8"), "--dtype q8: exit %d:\n%s", rc, out);
    rc = run(out, sizeof out, "%s info --model %s --backend cpu --dtype q4", lind, mdir);
    CHECK(rc == 0 && strstr(out, "weights:      q4"), "--dtype q4: exit %d:\n%s", rc, out);
    rc = run(out, sizeof out, "%s info --model %s --backend harness --dtype q4", lind, mdir);
    CHECK(rc != 0 && strstr(out, "no q4 weights"), "--dtype q4 on the harness: exit %d:\n%s", rc, out);
    rc = run(out, sizeof out, "%s info --model %s --dtype f8", lind, mdir);
    CHECK(rc == 2 && strstr(out, "--dtype wants f32, bf16, f16, q8 or q4"), "--dtype f8: exit %d: %s", rc, out);
    rc = run(out, sizeof out, "%s info --model %s --compute f8", lind, mdir);
    CHECK(rc == 2 && strstr(out, "--compute wants f32 or bf16"), "--compute f8: exit %d: %s", rc, out);
    /* bf16 compute: bf16 weights and another fingerprint, or refused with a reason */
    rc = run(out, sizeof out, "%s info --model %s --backend cpu --compute bf16", lind, mdir);
    if (cpu_gemm_dot_supported())
        CHECK(rc == 0 && strstr(out, "compute:      bf16") && strstr(out, "weights:      bf16"),
              "--compute bf16: exit %d:\n%s", rc, out);
    else
        CHECK(rc == 1 && strstr(out, "AVX512_BF16"), "--compute bf16 without AVX512_BF16: exit %d: %s", rc, out);
    rc = run(out, sizeof out, "%s info --model %s --backend cpu --compute bf16 --dtype f16", lind, mdir);
    CHECK(rc == 1 && strstr(out, "bf16 compute multiplies bf16 weights"), "--compute bf16 --dtype f16: exit %d: %s",
          rc, out);
}

/* `lind logits` writes exactly the logits model_step gives after each
 * token of the file, whatever --chunk. */
static void logits_match_api(void)
{
    enum { T = 50, V = 256 };
    char tpath[400], opath[400], out[4096];
    snprintf(tpath, sizeof tpath, "%s/tokens.i32", tmpdir);
    snprintf(opath, sizeof opath, "%s/logits.f32", tmpdir);
    int32_t toks[T];
    for (int t = 0; t < T; t++) toks[t] = (int32_t)((t * 73 + 5) % V);
    FILE *f = fopen(tpath, "wb");
    fwrite(toks, sizeof toks[0], T, f);   /* little-endian host */
    fclose(f);
    model *m = NULL;
    char err[256];
    CHECK(model_load(mdir, "cpu", &m, err, sizeof err) == 0, "load: %s", err);
    if (!m) return;
    static float want[T * V], got[T * V + 1];
    model_slots_reserve(m, 1);
    model_slot_reset(m, 0);
    int slot = 0;
    for (int t = 0; t < T; t++) model_step(m, &slot, &toks[t], 1, want + (size_t)t * V);
    model_free(m);
    const char *chunks[] = {"", "--chunk 1", "--chunk 7"};
    for (int c = 0; c < 3; c++) {
        int rc = run(out, sizeof out, "%s logits --model %s --tokens %s --out %s %s", lind, mdir, tpath, opath,
                     chunks[c]);
        CHECK(rc == 0, "logits %s: exit %d: %s", chunks[c], rc, out);
        f = fopen(opath, "rb");
        size_t n = f ? fread(got, sizeof(float), T * V + 1, f) : 0;
        if (f) fclose(f);
        CHECK(n == (size_t)T * V, "logits %s: %zu floats, want %d", chunks[c], n, T * V);
        CHECK(!memcmp(got, want, sizeof want), "logits %s differ from model_step's", chunks[c]);
    }
    toks[3] = V;   /* past the vocabulary */
    f = fopen(tpath, "wb");
    fwrite(toks, sizeof toks[0], T, f);
    fputc(0, f);   /* and a stray byte */
    fclose(f);
    int rc = run(out, sizeof out, "%s logits --model %s --tokens %s --out %s", lind, mdir, tpath, opath);
    CHECK(rc == 1 && strstr(out, "not a whole number of int32 tokens"), "odd size: exit %d: %s", rc, out);
    f = fopen(tpath, "wb");
    fwrite(toks, sizeof toks[0], T, f);
    fclose(f);
    rc = run(out, sizeof out, "%s logits --model %s --tokens %s --out %s", lind, mdir, tpath, opath);
    CHECK(rc == 1 && strstr(out, "token 3 is 256, outside the vocabulary 0..255"), "bad token: exit %d: %s", rc, out);
    rc = run(out, sizeof out, "%s logits --model %s --tokens %s", lind, mdir, tpath);
    CHECK(rc == 2 && strstr(out, "--out FILE"), "no --out: exit %d: %s", rc, out);
}

/* Greedy generation through the CLI equals the API's greedy continuation. */
static void generate_matches_api(void)
{
    char out[4096];
    int rc = run(out, sizeof out, "%s generate --model %s --prompt 'abc' -n 40 --temperature 0", lind, mdir);
    CHECK(rc == 0, "exit %d: %s", rc, out);
    model *m = NULL;
    char err[256];
    CHECK(model_load(mdir, "cpu", &m, err, sizeof err) == 0, "load: %s", err);
    if (!m) return;
    model_slots_reserve(m, 1);
    model_slot_reset(m, 0);
    int slot = 0, tok = LIND_BOS;
    float l[256];
    char want[64] = "abc";
    model_step(m, &slot, &tok, 1, NULL);
    for (int i = 0; i < 3; i++) {
        tok = want[i];
        model_step(m, &slot, &tok, 1, l);
    }
    for (int i = 0; i < 40; i++) {
        int best = 0;
        for (int k = 1; k < 256; k++)
            if (l[k] > l[best]) best = k;
        want[3 + i] = (char)best;
        tok = best;
        model_step(m, &slot, &tok, 1, l);
    }
    CHECK(!memcmp(out, want, 43) && out[43] == '\n', "CLI output differs from the API's greedy continuation");
    model_free(m);
    /* seeded sampling is reproducible */
    char a[4096], b[4096];
    run(a, sizeof a, "%s generate --model %s --prompt x -n 60 --seed 9 --top-k 20 --top-p 0.9", lind, mdir);
    run(b, sizeof b, "%s generate --model %s --prompt x -n 60 --seed 9 --top-k 20 --top-p 0.9", lind, mdir);
    CHECK(!memcmp(a, b, 62), "same seed, different text");
}

/* bits/byte of `path` after generating n tokens with seed s (n = 0: none). */
static double api_bpb(const char *path, long n, uint64_t seed)
{
    model *m = NULL;
    char err[256];
    if (model_load(mdir, "cpu", &m, err, sizeof err) < 0) return -1;
    FILE *f = fopen(path, "rb");
    unsigned char buf[8192];
    size_t len = fread(buf, 1, sizeof buf, f);
    fclose(f);
    model_slots_reserve(m, 1);
    model_slot_reset(m, 0);
    int slot = 0, tok = LIND_BOS;
    float l[256], scratch[512];
    model_step(m, &slot, &tok, 1, l);
    sampler_params p = sampler_defaults();
    p.seed = seed;
    sampler s;
    sampler_init(&s, &p);
    for (long i = 0; i < n; i++) {
        tok = sampler_next(&s, l, 256, scratch);
        sampler_observe(&s, tok);
        model_step(m, &slot, &tok, 1, l);
    }
    double bits = 0;
    for (size_t i = 0; i < len; i++) {
        double mx = l[0], z = 0;
        for (int k = 1; k < 256; k++)
            if (l[k] > mx) mx = l[k];
        for (int k = 0; k < 256; k++) z += exp(l[k] - mx);
        bits += (log(z) + mx - l[buf[i]]) / log(2.0);
        tok = buf[i];
        model_step(m, &slot, &tok, 1, l);
    }
    model_free(m);
    return bits / (double)len;
}

static void score_matches_api(void)
{
    char path[400], out[4096];
    snprintf(path, sizeof path, "%s/text.txt", tmpdir);
    FILE *f = fopen(path, "w");
    for (int i = 0; i < 40; i++) fprintf(f, "line %d: the quick brown fox jumps over the lazy dog\n", i);
    fclose(f);
    int rc = run(out, sizeof out, "%s score --model %s %s", lind, mdir, path);
    CHECK(rc == 0, "exit %d: %s", rc, out);
    const char *k = strstr(out, "bits_per_byte: ");
    CHECK(k != NULL, "no bits_per_byte in:\n%s", out);
    if (k) {
        double got = atof(k + 15), want = api_bpb(path, 0, 0);
        CHECK(fabs(got - want) < 2e-6, "CLI %.6f vs API %.6f bits/byte", got, want);
    }
    rc = run(out, sizeof out, "%s score --model %s --after-generate 50 --seed 4 %s", lind, mdir, path);
    CHECK(rc == 0, "exit %d: %s", rc, out);
    k = strstr(out, "bits_per_byte: ");
    CHECK(k != NULL && strstr(out, "after_generate: 50 tokens (seed 4"), "no after_generate report in:\n%s", out);
    if (k) {
        double got = atof(k + 15), want = api_bpb(path, 50, 4), fresh = api_bpb(path, 0, 0);
        CHECK(fabs(got - want) < 2e-6, "CLI %.6f vs API %.6f bits/byte after 50 generated", got, want);
        CHECK(fabs(got - fresh) > 1e-6, "--after-generate had no effect (%.6f)", got);
    }
    /* the prompt is fed in chunks of rows; the figure is the same for any */
    char one[4096];
    run(one, sizeof one, "%s score --model %s --chunk 1 %s", lind, mdir, path);
    rc = run(out, sizeof out, "%s score --model %s --chunk 13 %s", lind, mdir, path);
    const char *a = strstr(one, "bits_per_byte: "), *b = strstr(out, "bits_per_byte: ");
    CHECK(rc == 0 && a && b && !strncmp(a, b, 24), "--chunk 1 vs 13:\n%s\n%s", one, out);
    CHECK(strstr(out, "tokens: 2110 (bytes tokenizer)"), "no token count in:\n%s", out);
}

/* bits/byte of a file scored in pieces of seg-1 tokens, each after a reset
 * and BOS, through the C API one token at a time. */
static double api_bpb_segments(const char *path, size_t seg)
{
    model *m = NULL;
    char err[256];
    if (model_load(mdir, "cpu", &m, err, sizeof err) < 0) return -1;
    FILE *f = fopen(path, "rb");
    unsigned char buf[8192];
    size_t len = fread(buf, 1, sizeof buf, f);
    fclose(f);
    model_slots_reserve(m, 1);
    int slot = 0, tok;
    float l[256];
    double bits = 0;
    for (size_t i = 0; i < len; i++) {
        if (i % (seg - 1) == 0) {
            model_slot_reset(m, 0);
            tok = LIND_BOS;
            model_step(m, &slot, &tok, 1, l);
        }
        double mx = l[0], z = 0;
        for (int k = 1; k < 256; k++)
            if (l[k] > mx) mx = l[k];
        for (int k = 0; k < 256; k++) z += exp(l[k] - mx);
        bits += (log(z) + mx - l[buf[i]]) / log(2.0);
        tok = buf[i];
        model_step(m, &slot, &tok, 1, l);
    }
    model_free(m);
    return bits / (double)len;
}

/* --segment S scores the text in fresh sessions of S tokens (BOS + S-1),
 * whatever the chunk; a segment longer than the text is plain scoring. */
static void score_segments(void)
{
    char path[400], out[4096], out2[4096];
    snprintf(path, sizeof path, "%s/text.txt", tmpdir);
    int rc = run(out, sizeof out, "%s score --model %s --segment 100 %s", lind, mdir, path);
    const char *k = strstr(out, "bits_per_byte: ");
    CHECK(rc == 0 && k && strstr(out, "segments: 22 of at most 100 tokens"), "exit %d:\n%s", rc, out);
    if (k) {
        double got = atof(k + 15), want = api_bpb_segments(path, 100), whole = api_bpb(path, 0, 0);
        CHECK(fabs(got - want) < 2e-6, "CLI %.6f vs API %.6f bits/byte in segments of 100", got, want);
        CHECK(got - whole > 1e-3, "segments (%.6f) should score worse than one stream (%.6f)", got, whole);
    }
    rc = run(out2, sizeof out2, "%s score --model %s --segment 100 --chunk 7 %s", lind, mdir, path);
    const char *k2 = strstr(out2, "bits_per_byte: ");
    CHECK(rc == 0 && k && k2 && !strncmp(k, k2, 24), "--chunk 7 changed the figure:\n%s\n%s", out, out2);
    rc = run(out, sizeof out, "%s score --model %s --segment 5000 %s", lind, mdir, path);
    k = strstr(out, "bits_per_byte: ");
    CHECK(rc == 0 && k && fabs(atof(k + 15) - api_bpb(path, 0, 0)) < 2e-6, "one long segment:\n%s", out);
    rc = run(out, sizeof out, "%s score --model %s --segment 50 --after-generate 5 %s", lind, mdir, path);
    CHECK(rc == 2 && strstr(out, "do not go together"), "--segment with --after-generate: exit %d: %s", rc, out);
    rc = run(out, sizeof out, "%s score --model %s --segment 1 %s", lind, mdir, path);
    CHECK(rc == 2 && strstr(out, "bad value"), "--segment 1: exit %d: %s", rc, out);
}

static void errors_are_reported(void)
{
    char out[4096];
    int rc = run(out, sizeof out, "%s score %s/text.txt", lind, tmpdir);
    CHECK(rc == 2 && strstr(out, "--model DIR is required"), "missing --model: exit %d: %s", rc, out);
    rc = run(out, sizeof out, "%s info --model %s/nope", lind, tmpdir);
    CHECK(rc == 1 && strstr(out, "nope/config.json"), "missing model: exit %d: %s", rc, out);
    rc = run(out, sizeof out, "%s generate --model %s --top-p 1.5", lind, mdir);
    CHECK(rc == 2 && strstr(out, "top_p"), "bad top-p: exit %d: %s", rc, out);
    rc = run(out, sizeof out, "%s generate --model %s -n many", lind, mdir);
    CHECK(rc == 2 && strstr(out, "bad value \"many\""), "bad -n: exit %d: %s", rc, out);
    rc = run(out, sizeof out, "%s score --model %s %s/missing.txt", lind, mdir, tmpdir);
    CHECK(rc == 1 && strstr(out, "missing.txt"), "missing file: exit %d: %s", rc, out);
    rc = run(out, sizeof out, "%s frobnicate", lind);
    CHECK(rc == 2 && strstr(out, "unknown command"), "unknown command: exit %d: %s", rc, out);
    rc = run(out, sizeof out, "%s info --model %s --backend tpu", lind, mdir);
    CHECK(rc == 1 && strstr(out, "unknown backend \"tpu\""), "bad backend: exit %d: %s", rc, out);
}

/* The backend's environment variables reach the constructors through the
 * commands' entry points (backend_opts_from_env): LIND_CPU_THREADS=2 gives
 * a 2-thread pool, a garbage value stops the command naming it (it used to
 * become 1 thread silently), and `lind serve` refuses it before starting
 * anything and passes LIND_CUDA_WEIGHTS to the compute thread's backend. */
static void backend_env_reaches_backend(void)
{
    char out[4096];
    int rc = run(out, sizeof out, "LIND_CPU_THREADS=2 %s info --model %s --backend cpu", lind, mdir);
    CHECK(rc == 0 && strstr(out, ", 2 threads,"), "LIND_CPU_THREADS=2: exit %d: %s", rc, out);
    rc = run(out, sizeof out, "LIND_CPU_THREADS=1 %s info --model %s --backend cpu", lind, mdir);
    CHECK(rc == 0 && strstr(out, ", 1 threads,"), "LIND_CPU_THREADS=1: exit %d: %s", rc, out);
    static const char *const bad[] = {"abc", "0x", "-3", "99999"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char want[64];
        snprintf(want, sizeof want, "LIND_CPU_THREADS=%s", bad[i]);
        rc = run(out, sizeof out, "LIND_CPU_THREADS='%s' %s score --model %s --backend cpu %s/model/config.json", bad[i],
                 lind, mdir, tmpdir);
        CHECK(rc == 2 && strstr(out, want), "score with %s: exit %d: %s", want, rc, out);
    }
    rc = run(out, sizeof out, "LIND_CPU_GEMM=avx1024 %s generate --model %s --backend cpu -n 1", lind, mdir);
    CHECK(rc == 1 && strstr(out, "avx1024"), "LIND_CPU_GEMM=avx1024: exit %d: %s", rc, out);
    rc = run(out, sizeof out, "LIND_CPU_THREADS=abc %s serve --model %s --socket %s/s.sock --db %s/s.db", lind, mdir,
             tmpdir, tmpdir);
    CHECK(rc == 2 && strstr(out, "LIND_CPU_THREADS=abc"), "serve with LIND_CPU_THREADS=abc: exit %d: %s", rc, out);
    rc = run(out, sizeof out, "LIND_CUDA_WEIGHTS=int4 %s serve --model %s --backend harness --socket %s/s.sock --db %s/s.db",
             lind, mdir, tmpdir, tmpdir);
    CHECK(rc != 0 && strstr(out, "int4"), "serve with LIND_CUDA_WEIGHTS=int4: exit %d: %s", rc, out);
}

/* --threads N on every command that builds a backend: it wins over
 * LIND_CPU_THREADS, which stays the fallback; out-of-range values are
 * refused naming the option; `lind serve --help` and each command's help
 * list it. */
static void threads_option(void)
{
    static char out[65536];   /* serve --help is past 8 KiB */
    int rc = run(out, sizeof out, "LIND_CPU_THREADS=1 %s info --model %s --backend cpu --threads 2", lind, mdir);
    CHECK(rc == 0 && strstr(out, ", 2 threads,"), "info --threads 2 over LIND_CPU_THREADS=1: exit %d: %s", rc, out);
    rc = run(out, sizeof out, "LIND_CPU_THREADS=2 %s info --model %s --backend cpu --threads 1", lind, mdir);
    CHECK(rc == 0 && strstr(out, ", 1 threads,"), "info --threads 1 over LIND_CPU_THREADS=2: exit %d: %s", rc, out);
    static const char *const bad[] = {"0", "65", "two", "-1"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        rc = run(out, sizeof out, "%s generate --model %s --backend cpu -n 1 --threads %s", lind, mdir, bad[i]);
        CHECK(rc == 2 && strstr(out, "--threads"), "generate --threads %s: exit %d: %s", bad[i], rc, out);
        rc = run(out, sizeof out, "%s serve --model %s --socket %s/t.sock --db %s/t.db --threads %s", lind, mdir, tmpdir,
                 tmpdir, bad[i]);
        CHECK(rc == 2 && strstr(out, "--threads"), "serve --threads %s: exit %d: %s", bad[i], rc, out);
    }
    static const char *const cmds[] = {"serve", "info", "score", "generate", "logits", "bench-step"};
    for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++) {
        rc = run(out, sizeof out, "%s %s --help", lind, cmds[i]);
        CHECK(rc == 0 && strstr(out, "--threads N") && strstr(out, "LIND_CPU_THREADS"), "%s --help: exit %d: %s",
              cmds[i], rc, out);
    }
}

int main(void)
{
    const char *b = getenv("LIND_BUILD");
    snprintf(lind, sizeof lind, "%s/lind", b && *b ? b : "build");
    snprintf(tmpdir, sizeof tmpdir, "/tmp/lind_cli.XXXXXX");
    if (!mkdtemp(tmpdir)) {
        printf("FAIL setup: mkdtemp\n");
        return 1;
    }
    snprintf(mdir, sizeof mdir, "%s/model", tmpdir);
    testmodel_cfg c = testmodel_config(32, 2, 4, 8, 64, "linear,aft", 1, "decay");
    testmodel_opts o = {0.9f, 1};
    if (testmodel_write(mdir, &c, 11, &o) != 0) {
        printf("FAIL setup: testmodel_write\n");
        return 1;
    }
    FILE *f = fopen(lind, "r");
    if (!f) {
        printf("SKIP cli: %s not built\n", lind);
        return 0;
    }
    fclose(f);
    RUN(info_reports_model);
    RUN(generate_matches_api);
    RUN(score_matches_api);
    RUN(score_segments);
    RUN(logits_match_api);
    RUN(errors_are_reported);
    RUN(backend_env_reaches_backend);
    RUN(threads_option);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) printf("NOTE could not remove %s\n", tmpdir);
    return check_exit();
}
