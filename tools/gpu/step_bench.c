/* tools/gpu/step_bench.c — decode step time of a model on one backend, for
 * the GPU check (tools/gpu/check.sh, docs/CUDA.md).
 *
 *   step_bench --model DIR [--backend cuda] [--batches 1,8,64,256,1024]
 *              [--steps N] [--label NAME]
 *   step_bench --model DIR --logits TOKENS OUT [--backend cuda]
 *
 * The first form steps B sessions one token each, B from --batches: 3 warm-up
 * steps (the backend records its step on the second), then N timed steps,
 * each ending when the logits of all B rows are on the host (model_step, as
 * the daemon steps). Tokens change every step. One line per batch:
 *   STEP label backend graphs B median_ms min_ms tok_s weight_MB state_KB logits_MB gflop_per_token
 * graphs is whether the backend replayed recorded steps (grid_backend stats).
 * The second form feeds the int32 tokens of file TOKENS to one fresh session
 * and writes the float32 logits of every position to OUT (T × vocab), the
 * input of tools/gpu/hf_rwkv4_check.py.
 *
 * Backend options from the environment (LIND_CUDA_WEIGHTS, LIND_CUDA_GRAPHS,
 * LIND_CPU_THREADS, ...; backend_opts_from_env). */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/backend.h"
#include "kernels/clock.h"
#include "kernels/cuda/grid_backend.h"
#include "recurrent/model.h"

static void die(const char *what, const char *why)
{
    fprintf(stderr, "step_bench: %s: %s\n", what, why);
    exit(1);
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int is_grid(const model *m)
{
    const char *n = model_backend_name(m);
    return !strcmp(n, "cuda") || !strcmp(n, "harness");
}

static void bench_batch(model *m, int B, int steps, const char *label)
{
    int V = model_vocab(m);
    if (model_slots_reserve(m, B) < 0) die("slots_reserve", model_last_error(m));
    int *slots = malloc((size_t)B * sizeof *slots);
    int32_t *tok = malloc((size_t)B * sizeof *tok);
    float *logits = model_logits_alloc(m, (size_t)B * (size_t)V);   /* as the daemon does */
    double *t = malloc((size_t)steps * sizeof *t);
    if (!slots || !tok || !logits || !t) die("memory", "out of host memory");
    for (int b = 0; b < B; b++) {
        slots[b] = b;
        if (model_slot_reset(m, b) < 0) die("slot_reset", model_last_error(m));
    }
    long rec0 = 0, rep0 = 0, rec1 = 0, rep1 = 0;
    if (is_grid(m)) grid_backend_graph_stats(model_backend(m), &rec0, &rep0);
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (int s = -3; s < steps; s++) {
        for (int b = 0; b < B; b++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            tok[b] = (int32_t)((x >> 33) % (uint64_t)V);
        }
        double t0 = clock_mono_s() * 1e3;
        int rc = model_step(m, slots, tok, B, logits);
        double t1 = clock_mono_s() * 1e3;
        if (rc < 0 && rc != -EDOM) die("model_step", model_last_error(m));
        if (s >= 0) t[s] = t1 - t0;
    }
    if (is_grid(m)) grid_backend_graph_stats(model_backend(m), &rec1, &rep1);
    qsort(t, (size_t)steps, sizeof *t, cmp_d);
    size_t block_macs, head_macs, wbytes;
    model_costs(m, &block_macs, &head_macs, &wbytes);
    double med = t[steps / 2];
    printf("STEP %s %s %s %d %.4f %.4f %.1f %.3f %.3f %.4f %.6f\n", label, model_backend_name(m),
           rep1 - rep0 >= steps ? "graph" : "eager", B, med, t[0], B / (med / 1e3), wbytes / 1e6,
           model_state_bytes(m) / 1e3, (double)B * V * 4 / 1e6, 2.0 * (double)(block_macs + head_macs) / 1e9);
    fflush(stdout);
    free(slots);
    free(tok);
    model_logits_free(m, logits);
    free(t);
}

static void dump_logits(model *m, const char *tokfile, const char *out)
{
    FILE *f = fopen(tokfile, "rb");
    if (!f) die(tokfile, strerror(errno));
    int32_t tok[4096];
    size_t T = fread(tok, sizeof *tok, 4096, f);
    fclose(f);
    int V = model_vocab(m);
    float *l = malloc((size_t)V * sizeof *l);
    FILE *o = fopen(out, "wb");
    if (!l || !o) die(out, "cannot open or allocate");
    int slot = 0;
    if (model_slots_reserve(m, 1) < 0 || model_slot_reset(m, 0) < 0) die("slot", model_last_error(m));
    for (size_t t = 0; t < T; t++) {
        if (model_step(m, &slot, &tok[t], 1, l) < 0) die("model_step", model_last_error(m));
        if (fwrite(l, sizeof *l, (size_t)V, o) != (size_t)V) die(out, "short write");
    }
    if (fclose(o) != 0) die(out, strerror(errno));
    free(l);
    printf("LOGITS %zu positions × %d on %s (%s)\n", T, V, model_backend_name(m), model_device_name(m));
}

int main(int argc, char **argv)
{
    const char *dir = NULL, *backend = "cuda", *batches = "1,8,64,256,1024", *label = NULL;
    const char *tokfile = NULL, *out = NULL;
    int steps = 30;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--model") && i + 1 < argc) dir = argv[++i];
        else if (!strcmp(argv[i], "--backend") && i + 1 < argc) backend = argv[++i];
        else if (!strcmp(argv[i], "--batches") && i + 1 < argc) batches = argv[++i];
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--label") && i + 1 < argc) label = argv[++i];
        else if (!strcmp(argv[i], "--logits") && i + 2 < argc) { tokfile = argv[++i]; out = argv[++i]; }
        else die("usage", "step_bench --model DIR [--backend B] [--batches 1,8,...] [--steps N] [--label L] "
                          "| --model DIR --logits TOKENS OUT");
    }
    if (!dir) die("usage", "--model DIR is required");
    if (steps < 1) die("--steps", "must be at least 1");
    backend_opts be;
    char err[512];
    if (backend_opts_from_env(&be, err, sizeof err) < 0) die("environment", err);
    model_opts o = {.backend = backend, .weights = LIND_DT_AUTO, .be = &be};
    model *m;
    if (model_load_opts(dir, &o, &m, err, sizeof err) < 0) die(dir, err);
    if (tokfile) {
        dump_logits(m, tokfile, out);
        model_free(m);
        return 0;
    }
    printf("# %s on %s (%s), %zu parameters, weights %s\n", dir, model_backend_name(m), model_device_name(m),
           model_param_count(m), lind_dtype_name(model_weights_dtype(m)));
    printf("# STEP label backend graph|eager batch median_ms min_ms tokens_per_s weight_MB state_KB_per_session "
           "logits_MB_per_step GFLOP_per_token\n");
    for (const char *p = batches; *p;) {
        int B = atoi(p);
        if (B < 1) die("--batches", batches);
        bench_batch(m, B, steps, label ? label : dir);
        p = strchr(p, ',');
        if (!p) break;
        p++;
    }
    model_free(m);
    return 0;
}
