/* tests/test_core_backend_opts.c — the backends' options (kernels/backend.h):
 *   - backend_opts_from_env reads LIND_CPU_THREADS, LIND_CPU_GEMM,
 *     LIND_CUDA_DEVICE and LIND_CUDA_WEIGHTS; a garbage or out-of-range
 *     number is an error naming the variable and its value (it used to
 *     become 1 thread silently); unset or empty leaves the default;
 *   - the constructors take the options as an argument and read no
 *     environment: opts.threads sets the CPU pool (its device name says
 *     so), a count outside 0..64 is refused, and one or two threads give
 *     the same matmul bit for bit on each packed kernel the CPU runs;
 *   - NULL options are the defaults;
 *   - buf_host: a buffer over the caller's memory that a matmul fills in
 *     place, bit for bit what a buffer of the backend's own and a download
 *     give, and whose buf_free leaves the caller's memory alone.
 * The CLI side (`lind` refusing LIND_CPU_THREADS=abc, honouring =2) is in
 * tests/test_core_cli.c. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/cpu/gemm.h"
#include "tests/check.h"

static const char *const VARS[] = {"LIND_CPU_THREADS", "LIND_CPU_GEMM", "LIND_CUDA_DEVICE", "LIND_CUDA_WEIGHTS",
                                   "LIND_CPU_AMX"};

static void clear_env(void)
{
    for (size_t i = 0; i < sizeof VARS / sizeof *VARS; i++) unsetenv(VARS[i]);
}

/* Nothing set (or set empty): the defaults. */
static void env_unset_is_default(void)
{
    clear_env();
    backend_opts o, d;
    char err[256] = "";
    backend_opts_default(&d);
    CHECK(d.threads == 0 && d.cpu_gemm == NULL && d.cuda_device == -1 && d.cuda_weights == NULL,
          "defaults: threads %d gemm %p device %d weights %p", d.threads, (const void *)d.cpu_gemm, d.cuda_device,
          (const void *)d.cuda_weights);
    memset(&o, 0x5a, sizeof o);
    CHECK(backend_opts_from_env(&o, err, sizeof err) == 0, "unset: %s", err);
    CHECK(o.threads == 0 && o.cpu_gemm == NULL && o.cuda_device == -1 && o.cuda_weights == NULL && !o.cpu_no_amx,
          "unset: not the defaults");
    for (size_t i = 0; i < sizeof VARS / sizeof *VARS; i++) setenv(VARS[i], "", 1);
    memset(&o, 0x5a, sizeof o);
    CHECK(backend_opts_from_env(&o, err, sizeof err) == 0, "empty: %s", err);
    CHECK(o.threads == 0 && o.cpu_gemm == NULL && o.cuda_device == -1 && o.cuda_weights == NULL && !o.cpu_no_amx,
          "empty: not the defaults");
    clear_env();
}

/* Every variable read into its field. */
static void env_values_read(void)
{
    clear_env();
    setenv("LIND_CPU_THREADS", "2", 1);
    setenv("LIND_CPU_GEMM", "avx2", 1);
    setenv("LIND_CUDA_DEVICE", "1", 1);
    setenv("LIND_CUDA_WEIGHTS", "bf16", 1);
    setenv("LIND_CPU_AMX", "0", 1);
    backend_opts o;
    char err[256] = "";
    CHECK(backend_opts_from_env(&o, err, sizeof err) == 0, "%s", err);
    CHECK(o.threads == 2, "threads %d", o.threads);
    CHECK(o.cpu_gemm && !strcmp(o.cpu_gemm, "avx2"), "cpu_gemm %s", o.cpu_gemm ? o.cpu_gemm : "(null)");
    CHECK(o.cuda_device == 1, "cuda_device %d", o.cuda_device);
    CHECK(o.cuda_weights && !strcmp(o.cuda_weights, "bf16"), "cuda_weights %s", o.cuda_weights ? o.cuda_weights : "(null)");
    CHECK(o.cpu_no_amx == 1, "LIND_CPU_AMX=0: cpu_no_amx %d", o.cpu_no_amx);
    setenv("LIND_CPU_AMX", "1", 1);
    CHECK(backend_opts_from_env(&o, err, sizeof err) == 0 && o.cpu_no_amx == 0, "LIND_CPU_AMX=1: %s", err);
    setenv("LIND_CPU_THREADS", "64", 1);   /* the top of the range */
    setenv("LIND_CUDA_DEVICE", "0", 1);
    CHECK(backend_opts_from_env(&o, err, sizeof err) == 0 && o.threads == 64 && o.cuda_device == 0, "64 / 0: %s", err);
    clear_env();
}

/* Each of n values of variable var, alone in the environment, is refused
 * with a message naming the variable and the value. */
static void refuses_each(const char *var, const char *const *bad, size_t n)
{
    char err[256], want[64];
    backend_opts o;
    for (size_t i = 0; i < n; i++) {
        clear_env();
        setenv(var, bad[i], 1);
        err[0] = 0;
        int rc = backend_opts_from_env(&o, err, sizeof err);
        snprintf(want, sizeof want, "%s=%s", var, bad[i]);
        CHECK(rc == -EINVAL && strstr(err, want), "%s=%s: rc %d, message '%s'", var, bad[i], rc, err);
    }
    clear_env();
}

/* A value that is not a decimal number in range is refused, naming the
 * variable and the value. */
static void env_garbage_refused(void)
{
    static const char *const bad_threads[] = {"abc", "0x", "-3", "99999", "0", "65", "2x", "1.5", "99999999999999999999"};
    static const char *const bad_device[] = {"abc", "-1", "gpu0", "3 4"};
    refuses_each("LIND_CPU_THREADS", bad_threads, sizeof bad_threads / sizeof *bad_threads);
    refuses_each("LIND_CUDA_DEVICE", bad_device, sizeof bad_device / sizeof *bad_device);
    static const char *const bad_amx[] = {"2", "yes", "-1", "on"};
    refuses_each("LIND_CPU_AMX", bad_amx, sizeof bad_amx / sizeof *bad_amx);
}

/* The constructor reads no environment: a garbage LIND_CPU_THREADS does
 * not reach it, opts.threads does (the device name says the count). */
static void ctor_takes_threads(void)
{
    clear_env();
    setenv("LIND_CPU_THREADS", "abc", 1);
    setenv("LIND_CPU_GEMM", "avx1024", 1);
    char err[256] = "";
    backend *be = NULL;
    CHECK(backend_new("cpu", NULL, &be, err, sizeof err) == 0 && be, "NULL opts with garbage in the environment: %s", err);
    backend_free(be);
    clear_env();
    backend_opts o;
    backend_opts_default(&o);
    for (int nt = 1; nt <= 3; nt++) {
        o.threads = nt;
        be = NULL;
        CHECK(backend_cpu_new(&o, &be, err, sizeof err) == 0 && be, "threads %d: %s", nt, err);
        if (!be) continue;
        char want[32];
        snprintf(want, sizeof want, ", %d threads,", nt);
        CHECK(strstr(be->ops->device_name(be), want), "threads %d: device \"%s\"", nt, be->ops->device_name(be));
        backend_free(be);
    }
    static const int bad[] = {-1, 65, 1000};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        o.threads = bad[i];
        be = NULL;
        err[0] = 0;
        int rc = backend_cpu_new(&o, &be, err, sizeof err);
        char want[32];
        snprintf(want, sizeof want, "%d threads", bad[i]);
        CHECK(rc == -EINVAL && be == NULL && strstr(err, want), "threads %d: rc %d, '%s'", bad[i], rc, err);
        if (be) backend_free(be);
    }
}

/* y = x·Wᵀ + b through a CPU backend with `threads` threads on kernel
 * `gemm`: B = 40, N = 512, K = 192 (big enough to split across threads). */
enum { MB = 40, MN = 512, MK = 192 };
static int run_matmul(const char *gemm, int threads, const float *x, const float *W, const float *bias, float *y)
{
    backend_opts o;
    backend_opts_default(&o);
    o.threads = threads;
    o.cpu_gemm = gemm;
    backend *be = NULL;
    char err[256] = "";
    if (backend_cpu_new(&o, &be, err, sizeof err) < 0) {
        CHECK(0, "%s, %d threads: %s", gemm, threads, err);
        return -1;
    }
    const backend_ops *op = be->ops;
    backend_buf *bx = NULL, *bb = NULL, *by = NULL, *bw = NULL;
    int rc = op->buf_new(be, MB * MK, &bx) == 0 && op->buf_new(be, MN, &bb) == 0 && op->buf_new(be, MB * MN, &by) == 0 &&
                     backend_weight_new(be, MN, MK, W, &bw) == 0
                 ? 0
                 : -1;
    if (rc == 0) {
        op->buf_upload(be, bx, 0, x, MB * MK);
        op->buf_upload(be, bb, 0, bias, MN);
        /* y[MB × MN] = x[MB × MK] · W[MN × MK]ᵀ + b */
        rc = op->matmul(be, bmview(by, 0, MN), bview(bx, 0, MK), bw, bb, MB, MN, MK, 0);
        if (rc == 0) rc = op->buf_download(be, by, 0, y, MB * MN);
    }
    CHECK(rc == 0, "%s, %d threads: matmul failed (%d)", gemm, threads, rc);
    if (bx) op->buf_free(be, bx);
    if (bb) op->buf_free(be, bb);
    if (by) op->buf_free(be, by);
    if (bw) op->buf_free(be, bw);
    backend_free(be);
    return rc;
}

/* One and two threads (opts.threads) give the same products bit for bit on
 * each packed kernel this CPU runs. */
static void threads_bit_identical(void)
{
    static float x[MB * MK], W[MN * MK], bias[MN], y1[MB * MN], y2[MB * MN];
    unsigned s = 12345;
    for (size_t i = 0; i < MB * MK; i++) x[i] = (float)((s = s * 1103515245u + 12345u) >> 8) / (float)(1u << 24) - 0.5f;
    for (size_t i = 0; i < MN * MK; i++) W[i] = (float)((s = s * 1103515245u + 12345u) >> 8) / (float)(1u << 24) - 0.5f;
    for (size_t i = 0; i < MN; i++) bias[i] = (float)((s = s * 1103515245u + 12345u) >> 8) / (float)(1u << 24) - 0.5f;
    static const struct { const char *name; cpu_gemm_isa isa; } k[] = {{"avx512", CPU_GEMM_AVX512}, {"avx2", CPU_GEMM_AVX2}};
    for (size_t i = 0; i < sizeof k / sizeof *k; i++) {
        if (!cpu_gemm_supported(k[i].isa)) {
            printf("NOTE threads_bit_identical: this CPU cannot run %s\n", k[i].name);
            continue;
        }
        memset(y1, 0, sizeof y1);
        memset(y2, 0xff, sizeof y2);
        if (run_matmul(k[i].name, 1, x, W, bias, y1) < 0 || run_matmul(k[i].name, 2, x, W, bias, y2) < 0) continue;
        CHECK(!memcmp(y1, y2, sizeof y1), "%s: 1 and 2 threads differ", k[i].name);
        float amax = 0;
        for (size_t j = 0; j < MB * MN; j++) amax = y1[j] > amax ? y1[j] : -y1[j] > amax ? -y1[j] : amax;
        CHECK(amax > 0.5f, "%s: products look empty (max |y| %g)", k[i].name, amax);
    }
}

/* backend_supports / backend_op_name / backend_require: the CPU backend has
 * every kind op (its table is made from BACKEND_KIND_OPS); a backend without
 * some is refused by name, naming only the ops it lacks. */
static void op_capabilities(void)
{
    char err[512];
    backend *be = NULL;
    CHECK(backend_cpu_new(NULL, &be, err, sizeof err) == 0, "cpu backend: %s", err);
    if (!be) return;
    for (int op = 0; op < BACKEND_NOPS; op++)
        CHECK(backend_supports(be, (backend_op)op), "cpu lacks %s", backend_op_name((backend_op)op));
    CHECK(!strcmp(backend_op_name(BACKEND_OP_DELTA_STEP), "delta_step") &&
              !strcmp(backend_op_name(BACKEND_OP_RMSNORM), "rmsnorm") && !strcmp(backend_op_name(BACKEND_NOPS), "?"),
          "op names");
    const backend_op need[] = {BACKEND_OP_SHORT_CONV, BACKEND_OP_DELTA_STEP, BACKEND_OP_RMSNORM};
    CHECK(backend_require(be, need, 3, "layer 0: mixer \"x\"", err, sizeof err) == 0, "cpu refused: %s", err);
    /* the same backend with some ops taken away */
    backend_ops ops = *be->ops;
    ops.name = "partial";
    ops.delta_step = NULL;
    ops.rmsnorm = NULL;
    backend fake = {&ops};
    CHECK(!backend_supports(&fake, BACKEND_OP_DELTA_STEP) && backend_supports(&fake, BACKEND_OP_SHORT_CONV),
          "partial backend's capabilities");
    int rc = backend_require(&fake, need, 3, "layer 2: mixer \"x\"", err, sizeof err);
    CHECK(rc == -ENOTSUP && !strcmp(err, "layer 2: mixer \"x\" needs the backend ops delta_step and rmsnorm, which "
                                          "the partial backend does not have (use the cpu backend)"),
          "rc %d, '%s'", rc, err);
    rc = backend_require(&fake, need, 2, "layer 2: mixer \"x\"", err, sizeof err);
    CHECK(rc == -ENOTSUP && strstr(err, "needs the backend op delta_step, which the partial backend"), "rc %d, '%s'",
          rc, err);
    backend_free(be);
}

/* The head's path on the CPU backend (recurrent/model.c): the logits go
 * straight into the caller's array. */
static void host_buffer(void)
{
    enum { B = 5, N = 70, K = 48 };
    char err[512];
    backend *be = NULL;
    CHECK(backend_cpu_new(NULL, &be, err, sizeof err) == 0, "cpu backend: %s", err);
    if (!be) return;
    const backend_ops *o = be->ops;
    CHECK(o->buf_host != NULL, "the cpu backend has no buf_host");
    static float W[N * K], xs[B * K], direct[B * N + 8], copied[B * N];
    unsigned s = 12345;
    for (int i = 0; i < N * K; i++) W[i] = (float)((s = s * 1103515245u + 12345u) >> 9) / (float)(1u << 23) - 1.0f;
    for (int i = 0; i < B * K; i++) xs[i] = (float)((s = s * 1103515245u + 12345u) >> 9) / (float)(1u << 23) - 1.0f;
    for (int i = 0; i < B * N + 8; i++) direct[i] = -7.0f;
    backend_buf *w = NULL, *x = NULL, *y = NULL, *h = NULL;
    int rc = backend_weight_new(be, N, K, W, &w);
    if (rc == 0) rc = o->buf_new(be, B * K, &x);
    if (rc == 0) rc = o->buf_upload(be, x, 0, xs, B * K);
    if (rc == 0) rc = o->buf_new(be, B * N, &y);
    if (rc == 0) rc = o->buf_host(be, direct, B * N, &h);
    CHECK(rc == 0, "setup: rc %d", rc);
    if (rc == 0) {
        CHECK(o->matmul(be, bmview(y, 0, N), bview(x, 0, K), w, NULL, B, N, K, 0) == 0, "matmul into its buffer");
        CHECK(o->matmul(be, bmview(h, 0, N), bview(x, 0, K), w, NULL, B, N, K, 0) == 0, "matmul into host memory");
        CHECK(o->buf_download(be, y, 0, copied, B * N) == 0, "download");
        CHECK(!memcmp(direct, copied, sizeof copied), "in place differs from the download");
        int tail = 1;
        for (int i = B * N; i < B * N + 8; i++) tail &= direct[i] == -7.0f;
        CHECK(tail, "wrote past the host buffer's n floats");
    }
    o->buf_free(be, h);   /* the handle only: direct is static, freeing it would abort */
    direct[0] += 1.0f;    /* still ours */
    o->buf_free(be, y);
    o->buf_free(be, x);
    o->buf_free(be, w);
    backend_free(be);
}

int main(void)
{
    RUN(env_unset_is_default);
    RUN(env_values_read);
    RUN(env_garbage_refused);
    RUN(ctor_takes_threads);
    RUN(op_capabilities);
    RUN(host_buffer);
    if (cpu_gemm_supported(CPU_GEMM_AVX512) || cpu_gemm_supported(CPU_GEMM_AVX2)) RUN(threads_bit_identical);
    else printf("SKIP threads_bit_identical: this CPU runs neither packed kernel (AVX-512F, AVX2+FMA)\n");
    return check_exit();
}
