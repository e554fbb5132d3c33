/* tests/test_cuda_backend.c — the real CUDA backend against the CPU backend.
 *
 * Needs a build with nvcc and a CUDA device; otherwise prints one SKIP line
 * saying which is missing and exits 0 (`make test-cuda` and `make test` both
 * run it). On a device:
 *   - every op, case by case, as test_cuda_harness.c checks the harness
 *     (tests/cuda_compare.h), with tolerances for the device's own expf/erff
 *     and cuBLAS summation order;
 *   - whole models loaded on "cuda" and on "cpu" (random weights: linear,
 *     AFT and mixed, token shift on and off, γ < 1 and = 1, AFT simple and
 *     decay; plus models/default when present) give the same logits at every
 *     step for a batch of sessions, within 1e-4 relative, also after the
 *     states were moved between the two backends through slot read/write.
 *
 * LIND_CUDA_TEST_BACKEND=name runs the same checks with another backend in
 * the place of "cuda" (e.g. "cpu" against itself, to exercise the test). */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/cuda_compare.h"

static const char *under_test = "cuda";

static int ctor_under_test(backend **out, char *err, size_t errlen) {
    return backend_new(under_test, out, err, errlen);
}

static void model_default(void) {
    compare_models("models/default", 16, 64, "models/default");
}

int main(void) {
    const char *env = getenv("LIND_CUDA_TEST_BACKEND");
    if (env && *env) under_test = env;
    cmp_model_backend = under_test;
    backend *be;
    char err[256];
    if (backend_new(under_test, &be, err, sizeof err) < 0) {
        printf("SKIP cuda_backend: %s\n", err);
        return 0;
    }
    printf("NOTE backend %s on %s\n", be->ops->name, be->ops->device_name(be));
    backend_free(be);
    /* the device computes expf/erff with its own (≤ 2 ulp) routines and sums
     * GEMMs in its own order */
    cmp_run_all(under_test, ctor_under_test, 5e-5, 5e-6);
    RUN(models_random);
    struct stat st;
    if (stat("models/default/config.json", &st) == 0) RUN(model_default);
    else printf("SKIP model_default: no models/default in %s\n", getcwd(err, sizeof err) ? err : ".");
    return check_exit();
}
