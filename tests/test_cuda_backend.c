/* tests/test_cuda_backend.c — the real CUDA backend against the CPU backend.
 *
 * Always: "auto" picks the CUDA backend when it can be created and the CPU
 * backend otherwise, and a failing "cuda" says why. The rest needs a build
 * with nvcc and a CUDA device; otherwise it prints one SKIP line saying
 * which is missing (`make test-cuda` and `make test` both run it). On a
 * device:
 *   - every op, case by case, as test_cuda_harness.c checks the harness
 *     (tests/cuda_compare.h), with tolerances for the device's own expf/erff
 *     and cuBLAS summation order;
 *   - whole models loaded on "cuda" and on "cpu" (random weights: linear,
 *     AFT and mixed, token shift on and off, γ < 1 and = 1, AFT simple and
 *     decay; plus models/default when present) give the same logits at every
 *     step for a batch of sessions, within 1e-4 relative, also after the
 *     states were moved between the two backends through slot read/write;
 *   - an RWKV-4-shaped model (AFT with aft_dim ≠ d_model, channel-mix FFN,
 *     embedding norm, rescale_every, vocabulary 300) with fp32, fp16 and
 *     bf16 weights, stepped and prefilled (model_forward over runs);
 *   - two delta models (short convolution + gated delta rule, the shapes of
 *     tests/test_core_delta.c), stepped and prefilled;
 *   - the random models again with cuda_weights bf16, within 2%;
 *   - recorded steps (CUDA graphs): replays bit-identical to eager steps
 *     across batch shapes, prefill chunks, a pool growth and moved states,
 *     and a step that needs a host copy falling back to eager.
 * LIND_CUDA_TEST_SHORT=1 runs the op cases and the recorded steps only (the
 * compute-sanitizer run of tools/gpu/check.sh).
 *
 * LIND_CUDA_TEST_BACKEND=name runs the same checks with another backend in
 * the place of "cuda" (e.g. "cpu" against itself, to exercise the test). */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/cuda_compare.h"

static const char *under_test = "cuda";

static int ctor_under_test(backend **out, char *err, size_t errlen)
{
    return backend_new(under_test, &cmp_be, out, err, errlen);
}

/* "auto" takes the GPU when "cuda" works and the CPU when it does not; a
 * failing "cuda" says why, under its own name. */
static void auto_selection(void)
{
    backend *cu = NULL, *au = NULL;
    char err[256] = "", aerr[256] = "";
    int rc = backend_new("cuda", &cmp_be, &cu, err, sizeof err);
    CHECK(backend_new("auto", &cmp_be, &au, aerr, sizeof aerr) == 0, "auto failed: %s", aerr);
    if (rc == 0) {
        CHECK(!strcmp(cu->ops->name, "cuda"), "cuda backend is named %s", cu->ops->name);
        CHECK(au && !strcmp(au->ops->name, "cuda"), "auto picked %s with a device present", au ? au->ops->name : "-");
    } else {
        CHECK(cu == NULL, "failed constructor left a backend");
        CHECK(!strncmp(err, "backend cuda: ", 14) && strlen(err) > 20, "unclear message \"%s\"", err);
        CHECK(au && !strcmp(au->ops->name, "cpu"), "auto picked %s without a device", au ? au->ops->name : "-");
        printf("NOTE without a device: %s\n", err);
    }
    backend_free(cu);
    backend_free(au);
}

static void model_default(void)
{
    compare_models("models/default", 16, 64, "models/default");
}

int main(void)
{
    const char *env = getenv("LIND_CUDA_TEST_BACKEND");
    if (env && *env) under_test = env;
    cmp_model_backend = under_test;
    backend *be;
    char err[256];
    if (backend_opts_from_env(&cmp_be, err, sizeof err) < 0) {   /* LIND_CUDA_DEVICE, LIND_CPU_THREADS, ... */
        printf("FAIL environment: %s\n", err);
        return 1;
    }
    RUN(auto_selection);
    if (backend_new(under_test, &cmp_be, &be, err, sizeof err) < 0) {
        printf("SKIP cuda_backend: %s\n", err);
        return 0;
    }
    printf("NOTE backend %s on %s\n", be->ops->name, be->ops->device_name(be));
    backend_free(be);
    /* the device computes expf/erff with its own (≤ 2 ulp) routines and sums
     * GEMMs in its own order */
    cmp_run_all(under_test, ctor_under_test, 5e-5, 5e-6);
    /* LIND_CUDA_TEST_SHORT=1: the ops and the recorded steps only — the run
     * tools/gpu/check.sh puts under compute-sanitizer */
    const char *sh = getenv("LIND_CUDA_TEST_SHORT");
    if (sh && *sh == '1') {
        RUN(graphs_host_copy);
        RUN(models_graphs);
        return check_exit();
    }
    RUN(models_random);
    RUN(models_rwkv4);
    RUN(models_delta);
    RUN(graphs_host_copy);
    RUN(models_graphs);
    RUN(models_random_bf16);
    struct stat st;
    if (stat("models/default/config.json", &st) == 0) RUN(model_default);
    else printf("SKIP model_default: no models/default in %s\n", getcwd(err, sizeof err) ? err : ".");
    return check_exit();
}
