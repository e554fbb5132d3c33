/* kernels/backend.c — choosing a backend by name, and the backends' options
 * (defaults, or read from the environment by a program's entry point). */
#include "kernels/backend.h"
#include "kernels/cuda/harness.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void backend_opts_default(backend_opts *o)
{
    *o = (backend_opts){.threads = 0, .cpu_gemm = NULL, .cpu_no_amx = 0, .cuda_device = -1, .cuda_weights = NULL,
                        .cuda_no_graphs = 0, .cuda_gemv = 0};
}

/* An integer variable: unset or empty leaves *out; otherwise a decimal in
 * [lo, hi] (surrounding blanks allowed) or -EINVAL naming it and its value. */
static int env_int(const char *name, long lo, long hi, int *out, char *err, size_t errlen)
{
    const char *v = getenv(name);
    if (!v || !*v) return 0;
    char *end;
    errno = 0;
    long n = strtol(v, &end, 10);
    while (*end == ' ' || *end == '\t' || *end == '\n') end++;
    if (end == v || *end || errno) {
        snprintf(err, errlen, "%s=%s: not a whole number (%ld..%ld)", name, v, lo, hi);
        return -EINVAL;
    }
    if (n < lo || n > hi) {
        snprintf(err, errlen, "%s=%s: out of range (%ld..%ld)", name, v, lo, hi);
        return -EINVAL;
    }
    *out = (int)n;
    return 0;
}

int backend_opts_from_env(backend_opts *o, char *err, size_t errlen)
{
    backend_opts_default(o);
    int rc;
    if ((rc = env_int("LIND_CPU_THREADS", 1, BACKEND_THREADS_MAX, &o->threads, err, errlen)) < 0) return rc;
    if ((rc = env_int("LIND_CUDA_DEVICE", 0, INT_MAX, &o->cuda_device, err, errlen)) < 0) return rc;
    const char *g = getenv("LIND_CPU_GEMM");
    if (g && *g) o->cpu_gemm = g;
    int amx = 1;
    if ((rc = env_int("LIND_CPU_AMX", 0, 1, &amx, err, errlen)) < 0) return rc;
    o->cpu_no_amx = !amx;
    const char *w = getenv("LIND_CUDA_WEIGHTS");
    if (w && *w) o->cuda_weights = w;
    int graphs = 1;
    if ((rc = env_int("LIND_CUDA_GRAPHS", 0, 1, &graphs, err, errlen)) < 0) return rc;
    o->cuda_no_graphs = !graphs;
    if ((rc = env_int("LIND_CUDA_GEMV", 0, 1, &o->cuda_gemv, err, errlen)) < 0) return rc;
    return 0;
}

int backend_new(const char *name, const backend_opts *opts, backend **out, char *err, size_t errlen)
{
    *out = NULL;
    if (!name || !strcmp(name, "auto")) {
#ifdef LIND_HAVE_CUDA
        char cerr[256];
        if (backend_cuda_new(opts, out, cerr, sizeof cerr) == 0) return 0;
#endif
        return backend_cpu_new(opts, out, err, errlen);
    }
    if (!strcmp(name, "cpu")) return backend_cpu_new(opts, out, err, errlen);
    if (!strcmp(name, "cuda")) {
#ifdef LIND_HAVE_CUDA
        return backend_cuda_new(opts, out, err, errlen);
#else
        snprintf(err, errlen, "backend cuda: this lind was built without CUDA support");
        return -ENOTSUP;
#endif
    }
    /* the CUDA backend's code with its kernels emulated on the host (slow;
     * for tests and for debugging the CUDA path without a GPU) */
    if (!strcmp(name, "harness")) return backend_harness_new(HARNESS_FORWARD, opts, out, err, errlen);
    snprintf(err, errlen, "unknown backend \"%s\" (cpu, cuda or auto)", name);
    return -EINVAL;
}

const char *backend_op_name(backend_op op)
{
    static const char *const names[BACKEND_NOPS] = {
#define BACKEND_OP_NAME(e, name) [e] = #name,
        BACKEND_KIND_OPS(BACKEND_OP_NAME)
#undef BACKEND_OP_NAME
    };
    return (unsigned)op < BACKEND_NOPS ? names[op] : "?";
}

int backend_require(const backend *be, const backend_op *ops, int n, const char *who, char *err, size_t errlen)
{
    const char *miss[BACKEND_NOPS];
    int m = 0;
    for (int i = 0; i < n; i++)
        if (!backend_supports(be, ops[i]) && m < BACKEND_NOPS) miss[m++] = backend_op_name(ops[i]);
    if (!m) return 0;
    char list[512];
    size_t k = 0;
    list[0] = 0;
    for (int i = 0; i < m && k < sizeof list; i++)
        k += (size_t)snprintf(list + k, sizeof list - k, "%s%s", !i ? "" : i == m - 1 ? " and " : ", ", miss[i]);
    snprintf(err, errlen, "%s needs the backend op%s %s, which the %s backend does not have (use the cpu backend)",
             who, m > 1 ? "s" : "", list, be->ops->name);
    return -ENOTSUP;
}

void backend_free(backend *be)
{
    if (be) be->ops->free(be);
}
