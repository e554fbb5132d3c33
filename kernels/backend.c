/* kernels/backend.c — choosing a backend by name. */
#include "kernels/backend.h"
#include "kernels/cuda/harness.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

int backend_new(const char *name, backend **out, char *err, size_t errlen) {
    *out = NULL;
    if (!name || !strcmp(name, "auto")) {
#ifdef LIND_HAVE_CUDA
        char cerr[256];
        if (backend_cuda_new(out, cerr, sizeof cerr) == 0) return 0;
#endif
        return backend_cpu_new(out, err, errlen);
    }
    if (!strcmp(name, "cpu")) return backend_cpu_new(out, err, errlen);
    if (!strcmp(name, "cuda")) {
#ifdef LIND_HAVE_CUDA
        return backend_cuda_new(out, err, errlen);
#else
        snprintf(err, errlen, "backend cuda: this lind was built without CUDA support");
        return -ENOTSUP;
#endif
    }
    /* the CUDA backend's code with its kernels emulated on the host (slow;
     * for tests and for debugging the CUDA path without a GPU) */
    if (!strcmp(name, "harness")) return backend_harness_new(HARNESS_FORWARD, out, err, errlen);
    snprintf(err, errlen, "unknown backend \"%s\" (cpu, cuda or auto)", name);
    return -EINVAL;
}

void backend_free(backend *be) {
    if (be) be->ops->free(be);
}
