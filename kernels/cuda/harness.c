/* kernels/cuda/harness.c — the host emulation of the CUDA device (see
 * harness.h): host memory, kernel bodies run over the launch grid with
 * barrier phases and emulated shared memory, cblas for cuBLAS. */
#include "kernels/cuda/harness.h"
#include "kernels/cuda/grid_backend.h"

#include <cblas.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int (*body_fn)(const lind_thread *t, int phase, const void *args);

/* run_<body>: each kernel of LIND_KERNELS (kernel_bodies.h) behind one
 * signature, and the table of them by kernel number. */
#define LIND_KERNEL_RUNNER(e, body, Args) \
    static int run_##body(const lind_thread *t, int p, const void *a) { return body(t, p, (const Args *)a); }
LIND_KERNELS(LIND_KERNEL_RUNNER)
#undef LIND_KERNEL_RUNNER

static const body_fn bodies[KB_NKERNELS] = {
#define LIND_KERNEL_ROW(e, body, Args) [e] = run_##body,
    LIND_KERNELS(LIND_KERNEL_ROW)
#undef LIND_KERNEL_ROW
};

/* A body that never says it is done is a bug the harness reports rather than
 * hangs on. The linear step takes log2(T) + 2 phases per row of a run, the
 * delta step 2·log2(T) + 4, so the bound allows runs of well over 10^5 rows. */
#define MAX_PHASES (1 << 22)

/* Index i of n in the given order. */
static int ordered(int order, int i, int n) { return order == HARNESS_REVERSE ? n - 1 - i : i; }

int harness_launch(int order, int kernel, const lind_launch *L, const void *args, char *err, size_t errlen)
{
    if (kernel < 0 || kernel >= KB_NKERNELS || !bodies[kernel]) {
        snprintf(err, errlen, "harness: no kernel %d", kernel);
        return -EINVAL;
    }
    if (L->gx < 1 || L->gy < 1 || L->gy > KB_MAX_GRID_Y || L->block < 1 || L->block > KB_MAX_BLOCK ||
        L->smem > KB_MAX_SMEM) {
        snprintf(err, errlen, "harness: kernel %d: invalid launch %d×%d blocks of %d threads, %zu B shared",
                 kernel, L->gx, L->gy, L->block, L->smem);
        return -EINVAL;
    }
    /* 16-byte aligned, as dynamic shared memory is; never zero-sized so a
     * kernel reading it without asking for any still reads poison */
    size_t sbytes = (L->smem + 15) / 16 * 16 + 16;
    void *smem = aligned_alloc(16, sbytes);
    if (!smem) { snprintf(err, errlen, "harness: out of memory"); return -ENOMEM; }
    int rc = 0;
    size_t nblocks = (size_t)L->gx * (size_t)L->gy;
    for (size_t bi = 0; bi < nblocks && rc == 0; bi++) {
        size_t blk = order == HARNESS_REVERSE ? nblocks - 1 - bi : bi;
        lind_thread t = { (int)(blk % (size_t)L->gx), (int)(blk / (size_t)L->gx), 0, L->block, smem };
        memset(smem, 0xff, sbytes);
        for (int phase = 0, more = 1; more; phase++) {
            if (phase == MAX_PHASES) {
                snprintf(err, errlen, "harness: kernel %d never finished (%d phases)", kernel, MAX_PHASES);
                rc = -EINVAL;
                break;
            }
            for (int i = 0; i < L->block; i++) {
                t.tx = ordered(order, i, L->block);
                int m = bodies[kernel](&t, phase, args) != 0;
                if (i == 0) more = m;
                else if (m != more) {
                    snprintf(err, errlen, "harness: kernel %d block (%d,%d): threads disagree on the barrier "
                             "after phase %d", kernel, t.bx, t.by, phase);
                    rc = -EINVAL;
                    more = 0;
                    break;
                }
            }
        }
    }
    free(smem);
    return rc;
}

/* ---- the device ---------------------------------------------------------- */

/* One recorded call: what a CUDA graph node holds — the kernel and a copy
 * of its parameters, or a GEMM's or copy's arguments, pointers as given. */
enum rec_op { REC_LAUNCH, REC_SGEMM, REC_GEMM_BF16, REC_D2D, REC_ZERO };
typedef struct rec_call {
    enum rec_op op;
    int kernel;
    lind_launch L;
    void *args;                          /* REC_LAUNCH: its own copy */
    int ta, tb, m, n, k, lda, ldb, ldc;
    float alpha, beta;
    const void *A, *B;
    void *C;                             /* also d2d's / zero's destination */
    const void *src;
    size_t bytes;
} rec_call;

typedef struct recording {
    rec_call *calls;
    int n, cap;
} recording;

typedef struct hdev {
    lind_device dev;   /* first */
    int order;
    long fault_in;     /* launches until a simulated sticky error; 0: never */
    recording *rec;    /* being recorded (record_begin .. record_end), or NULL */
    int rec_failed;
} hdev;

static void rec_free(recording *r)
{
    if (!r) return;
    for (int i = 0; i < r->n; i++) free(r->calls[i].args);
    free(r->calls);
    free(r);
}

/* Append a call to the recording; NULL (and the recording void) when out of memory. */
static rec_call *rec_add(hdev *h, enum rec_op op)
{
    recording *r = h->rec;
    if (r->n == r->cap) {
        int cap = r->cap ? 2 * r->cap : 64;
        rec_call *c = realloc(r->calls, (size_t)cap * sizeof *c);
        if (!c) {
            h->rec_failed = 1;
            snprintf(h->dev.err, sizeof h->dev.err, "harness: out of memory recording");
            return NULL;
        }
        r->calls = c;
        r->cap = cap;
    }
    rec_call *c = &r->calls[r->n++];
    memset(c, 0, sizeof *c);
    c->op = op;
    return c;
}

/* What a CUDA device does after a sticky error: every call fails with it. */
static int h_dead(lind_device *d, const char *what)
{
    snprintf(d->err, sizeof d->err, "%s: an illegal memory access was encountered (cudaErrorIllegalAddress; "
             "simulated by LIND_HARNESS_FAULT)", what);
    return -EIO;
}

static void h_free(lind_device *d)
{
    rec_free(((hdev *)d)->rec);
    free(d);
}

static int h_alloc(lind_device *d, size_t bytes, void **out)
{
    *out = NULL;
    if (d->dead) return h_dead(d, "cudaMalloc");
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        snprintf(d->err, sizeof d->err, "harness: cannot allocate %zu bytes", bytes);
        return -ENOMEM;
    }
    memset(p, 0xff, bytes);
    *out = p;
    return 0;
}

static void h_release(lind_device *d, void *p) { (void)d; free(p); }

static int h_copy(lind_device *d, void *dst, const void *src, size_t bytes)
{
    if (d->dead) return h_dead(d, "copy");
    memmove(dst, src, bytes);
    return 0;
}

/* What the CUDA device does: a recording cannot hold a copy from or to
 * pageable host memory. */
static int h_host_copy(lind_device *d, void *dst, const void *src, size_t bytes)
{
    hdev *h = (hdev *)d;
    if (h->rec) {
        h->rec_failed = 1;
        snprintf(d->err, sizeof d->err, "copy: not allowed while recording a graph");
        return -EBUSY;
    }
    return h_copy(d, dst, src, bytes);
}

static int h_d2d(lind_device *d, void *dst, const void *src, size_t bytes)
{
    hdev *h = (hdev *)d;
    if (h->rec && !d->dead) {
        rec_call *c = rec_add(h, REC_D2D);
        if (!c) return -ENOMEM;
        c->C = dst, c->src = src, c->bytes = bytes;
        return 0;
    }
    return h_copy(d, dst, src, bytes);
}

static int h_zero(lind_device *d, void *dst, size_t bytes)
{
    hdev *h = (hdev *)d;
    if (d->dead) return h_dead(d, "cudaMemsetAsync");
    if (h->rec) {
        rec_call *c = rec_add(h, REC_ZERO);
        if (!c) return -ENOMEM;
        c->C = dst, c->bytes = bytes;
        return 0;
    }
    memset(dst, 0, bytes);
    return 0;
}

static int h_launch(lind_device *d, int kernel, const lind_launch *L, const void *args, size_t args_bytes)
{
    hdev *h = (hdev *)d;
    if (d->dead) return h_dead(d, "kernel launch");
    if (h->rec) {   /* counted for LIND_HARNESS_FAULT when it runs, not here */
        rec_call *c = rec_add(h, REC_LAUNCH);
        if (!c) return -ENOMEM;
        c->kernel = kernel;
        c->L = *L;
        if (!(c->args = malloc(args_bytes ? args_bytes : 1))) {
            h->rec->n--;
            h->rec_failed = 1;
            snprintf(d->err, sizeof d->err, "harness: out of memory recording");
            return -ENOMEM;
        }
        memcpy(c->args, args, args_bytes);
        return 0;
    }
    if (h->fault_in > 0 && --h->fault_in == 0) {
        d->dead = 1;
        return h_dead(d, "kernel launch");
    }
    return harness_launch(((hdev *)d)->order, kernel, L, args, d->err, sizeof d->err);
}

/* Column by column of C (a batch row each, in the backend's mapping), so the
 * harness's products are batch-invariant whatever OpenBLAS does for
 * different n: a row's result never depends on the rows beside it, and the
 * tests can require batched prefill to equal one-row steps bit for bit on
 * the harness. (cuBLAS promises no such thing; see docs/CUDA.md.) */
static void colwise_sgemm(int transa, int transb, int m, int n, int k, float alpha, const float *A, int lda,
                          const float *B, int ldb, float beta, float *C, int ldc)
{
    for (int j = 0; j < n; j++)
        cblas_sgemm(CblasColMajor, transa ? CblasTrans : CblasNoTrans, transb ? CblasTrans : CblasNoTrans,
                    m, 1, k, alpha, A, lda, transb ? B + j : B + (size_t)j * ldb, ldb, beta, C + (size_t)j * ldc, ldc);
}

/* Record a GEMM (both kinds); 1 when recorded, <0 on failure, 0 when not recording. */
static int rec_gemm(lind_device *d, enum rec_op op, int transa, int transb, int m, int n, int k, float alpha,
                    const void *A, int lda, const void *B, int ldb, float beta, float *C, int ldc)
{
    hdev *h = (hdev *)d;
    if (!h->rec) return 0;
    rec_call *c = rec_add(h, op);
    if (!c) return -ENOMEM;
    c->ta = transa, c->tb = transb, c->m = m, c->n = n, c->k = k, c->alpha = alpha, c->beta = beta;
    c->A = A, c->lda = lda, c->B = B, c->ldb = ldb, c->C = C, c->ldc = ldc;
    return 1;
}

static int h_sgemm(lind_device *d, int transa, int transb, int m, int n, int k, float alpha,
                   const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
    if (d->dead) return h_dead(d, "cublasSgemm");
    int r = rec_gemm(d, REC_SGEMM, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
    if (r) return r < 0 ? r : 0;
    colwise_sgemm(transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
    return 0;
}

/* A column-major bf16 matrix of rows × cols (ld ≥ rows) widened to fp32:
 * every bf16 product is exact in fp32, so cblas on the widened values is
 * the bf16 GEMM with fp32 accumulation. */
static float *widen(const uint16_t *A, int ld, int rows, int cols)
{
    float *w = calloc((size_t)ld * (size_t)cols + 1, sizeof *w);
    if (!w) return NULL;
    for (int c = 0; c < cols; c++)
        for (int r = 0; r < rows; r++) w[(size_t)c * ld + r] = kb_bf16_to_float(A[(size_t)c * ld + r]);
    return w;
}

static int h_gemm_bf16(lind_device *d, int transa, int transb, int m, int n, int k, float alpha,
                       const uint16_t *A, int lda, const uint16_t *B, int ldb, float beta, float *C, int ldc)
{
    if (d->dead) return h_dead(d, "cublasGemmEx (bf16)");
    int r = rec_gemm(d, REC_GEMM_BF16, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
    if (r) return r < 0 ? r : 0;
    float *a = widen(A, lda, transa ? k : m, transa ? m : k), *b = widen(B, ldb, transb ? n : k, transb ? k : n);
    if (!a || !b) {
        free(a);
        free(b);
        snprintf(d->err, sizeof d->err, "harness: out of memory");
        return -ENOMEM;
    }
    colwise_sgemm(transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, C, ldc);
    free(a);
    free(b);
    return 0;
}

static int h_record_begin(lind_device *d)
{
    hdev *h = (hdev *)d;
    if (d->dead) return h_dead(d, "cudaStreamBeginCapture");
    if (h->rec) {
        snprintf(d->err, sizeof d->err, "record_begin: already recording");
        return -EBUSY;
    }
    if (!(h->rec = calloc(1, sizeof *h->rec))) {
        snprintf(d->err, sizeof d->err, "harness: out of memory");
        return -ENOMEM;
    }
    h->rec_failed = 0;
    return 0;
}

static int h_record_end(lind_device *d, int keep, void **out)
{
    hdev *h = (hdev *)d;
    *out = NULL;
    if (!h->rec) {
        snprintf(d->err, sizeof d->err, "record_end: not recording");
        return -EINVAL;
    }
    recording *r = h->rec;
    h->rec = NULL;
    if (!keep || h->rec_failed || d->dead) rec_free(r);
    else *out = r;
    h->rec_failed = 0;
    return 0;
}

/* Replay: every recorded call again, in order, through the same paths. */
static int h_graph_run(lind_device *d, void *graph)
{
    const recording *r = graph;
    for (int i = 0; i < r->n; i++) {
        const rec_call *c = &r->calls[i];
        int rc = 0;
        switch (c->op) {
        case REC_LAUNCH: rc = h_launch(d, c->kernel, &c->L, c->args, 0); break;
        case REC_SGEMM:
            rc = h_sgemm(d, c->ta, c->tb, c->m, c->n, c->k, c->alpha, c->A, c->lda, c->B, c->ldb, c->beta, c->C, c->ldc);
            break;
        case REC_GEMM_BF16:
            rc = h_gemm_bf16(d, c->ta, c->tb, c->m, c->n, c->k, c->alpha, c->A, c->lda, c->B, c->ldb, c->beta,
                             c->C, c->ldc);
            break;
        case REC_D2D: rc = h_d2d(d, c->C, c->src, c->bytes); break;
        case REC_ZERO: rc = h_zero(d, c->C, c->bytes); break;
        }
        if (rc < 0) return rc;
    }
    return 0;
}

static void h_graph_free(lind_device *d, void *graph)
{
    (void)d;
    rec_free(graph);
}

int harness_device_new(int order, lind_device **out, char *err, size_t errlen)
{
    *out = NULL;
    if (order != HARNESS_FORWARD && order != HARNESS_REVERSE) {
        snprintf(err, errlen, "harness: unknown thread order %d", order);
        return -EINVAL;
    }
    hdev *h = calloc(1, sizeof *h);
    if (!h) { snprintf(err, errlen, "harness: out of memory"); return -ENOMEM; }
    h->order = order;
    const char *f = getenv("LIND_HARNESS_FAULT");
    if (f && *f) {
        char *end;
        long n = strtol(f, &end, 10);
        if (*end || n < 1) {
            free(h);
            snprintf(err, errlen, "harness: LIND_HARNESS_FAULT=%s is not a launch count ≥ 1", f);
            return -EINVAL;
        }
        h->fault_in = n;
    }
    snprintf(h->dev.name, sizeof h->dev.name, "host emulation of the CUDA kernels (%s thread order)",
             order == HARNESS_REVERSE ? "reverse" : "forward");
    h->dev.free = h_free;
    h->dev.alloc = h_alloc;
    h->dev.release = h_release;
    h->dev.h2d = h_host_copy;
    h->dev.d2h = h_host_copy;
    h->dev.d2d = h_d2d;
    h->dev.zero = h_zero;
    h->dev.launch = h_launch;
    h->dev.sgemm = h_sgemm;
    h->dev.gemm_bf16 = h_gemm_bf16;
    h->dev.record_begin = h_record_begin;
    h->dev.record_end = h_record_end;
    h->dev.graph_run = h_graph_run;
    h->dev.graph_free = h_graph_free;
    *out = &h->dev;
    return 0;
}

int backend_harness_new(int order, const backend_opts *opts, backend **out, char *err, size_t errlen)
{
    lind_device *dev;
    int rc = harness_device_new(order, &dev, err, errlen);
    if (rc < 0) return rc;
    return grid_backend_new(dev, "harness", opts, out, err, errlen);
}
