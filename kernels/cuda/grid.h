/* kernels/cuda/grid.h — the GPU backend's internals, shared by its files:
 * kernels/cuda/grid_backend.c (buffers, slots, the batch, products, norms,
 * row helpers, recorded steps, the ops table) and one file per op family,
 * kernels/cuda/grid_<family>.c (the host side of the ops the kinds add, each
 * launching the bodies of its kernels/cuda/kb_<family>.h). Below: the
 * backend's state and the runners the op files share (failing with a
 * message, extent checks, a launch). Not a public interface: only
 * kernels/cuda/ includes it. */
#ifndef LIND_KERNELS_CUDA_GRID_H
#define LIND_KERNELS_CUDA_GRID_H

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "kernels/cuda/grid_backend.h"
#include "kernels/cuda/kernel_bodies.h"

#define SLOT_ALIGN 256
/* Distinct step shapes kept recorded: decode at a few batch sizes, a prefill chunk. */
#define GRAPH_CACHE 16

struct backend_buf {
    void  *p;       /* device pointer */
    size_t n;       /* floats */
    uint16_t *bf;   /* bf16 copy (weights, in bf16 mode), device pointer */
    int    bf_ok;   /* bf holds the current contents */
    int    bf_only; /* a weight_new weight in bf16 mode: no fp32 copy (p NULL) */
    uint16_t *half; /* a weight_new_half weight: its n half values (p NULL) */
    int    htype;   /* BACKEND_W_F16 / BACKEND_W_BF16 when half is set */
};

typedef struct gridbe {
    backend      base;          /* first: backend_free() sees a backend */
    backend_ops  ops;           /* the shared table with this backend's name */
    char         name[16];
    lind_device *dev;
    char         err[320];

    unsigned char *pool;        /* nslots × stride bytes */
    int    nslots;
    size_t slot_bytes, stride;

    int   *d_slots, *d_tokens;  /* current batch on the device */
    int   *d_runs;              /* nruns + 1 row starts (kernel_bodies.h) */
    int   *runs;                /* the same on the host */
    int    cap;                 /* capacity of those arrays, in rows */
    int    B, nruns;
    int    max_token;           /* largest token of the batch (embed's bound) */
    unsigned *seen;             /* per slot: stamp of the last batch using it */
    unsigned  stamp;
    int   *d_rows;              /* gather_rows' indices on the device */
    int    rows_cap;
    float *wtmp;                /* fp32 widening of a half weight for one GEMM */
    size_t wtmp_n;

    int       bf16;             /* GEMMs in bf16 (grid_backend_set_weights) */
    uint16_t *xb;               /* bf16 copy of a GEMM's activations */
    size_t    xb_n;

    int   *d_bad, *h_bad;       /* rows_nonfinite's flags, device and host */
    int    bad_cap;

    /* Recorded steps (graph_begin): a small cache keyed by the model's key
     * and the run layout. `gen` counts allocations and frees: a recording
     * made under another generation may hold a freed pointer and is dropped. */
    int      graphs;            /* recording on (device can, option allows) */
    int      gemv;              /* fp32 products of ≤ KB_GEMV_MAXB rows by kb_gemv, not the GEMM (opt-in) */
    unsigned gen;
    struct gstep {
        uint64_t key;           /* 0: empty */
        int      state;         /* GS_SEEN, GS_READY, GS_NEVER */
        unsigned gen;
        void    *graph;         /* GS_READY: the device's recording */
        unsigned long used;     /* for replacing the least recently used */
    } gcache[GRAPH_CACHE];
    int      grec;              /* index being recorded, or -1 */
    unsigned grec_gen;
    unsigned long gclock;
    long     nrecorded, nreplayed;
} gridbe;

enum { GS_SEEN = 1, GS_READY, GS_NEVER };

static inline gridbe *G(backend *be) { return (gridbe *)be; }

static inline int fail(gridbe *g, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g->err, sizeof g->err, fmt, ap);
    va_end(ap);
    return rc;
}

/* A device call; on failure the device's message becomes ours. */
static inline int dev_rc(gridbe *g, int rc, const char *what)
{
    if (rc < 0) snprintf(g->err, sizeof g->err, "%s: %s", what, g->dev->err);
    return rc;
}

static inline float *F(const backend_buf *b) { return (float *)b->p; }

/* Does buffer b hold `need` floats? */
static inline int fits(gridbe *g, const backend_buf *b, size_t need, const char *op, const char *what)
{
    if (!b) return fail(g, -EINVAL, "%s: %s is NULL", op, what);
    if (need > b->n)
        return fail(g, -EINVAL, "%s: %s needs %zu floats, buffer holds %zu", op, what, need, b->n);
    return 0;
}

/* Does a state region of `bytes` at `off` (aligned to `align`) fit a slot? */
static inline int region_fits(gridbe *g, size_t off, size_t bytes, size_t align, const char *op)
{
    if (!g->pool) return fail(g, -EINVAL, "%s: no slots reserved", op);
    if (off % align) return fail(g, -EINVAL, "%s: state offset %zu is not %zu-byte aligned", op, off, align);
    if (off > g->slot_bytes || bytes > g->slot_bytes - off)
        return fail(g, -EINVAL, "%s: state region [%zu, +%zu) exceeds the slot's %zu bytes",
                    op, off, bytes, g->slot_bytes);
    return 0;
}

#define launch(g, kernel, L, args, op) launch_args(g, kernel, L, args, sizeof *(args), op)
static inline int launch_args(gridbe *g, int kernel, lind_launch L, const void *args, size_t bytes, const char *op)
{
    if (L.gx < 1 || L.gy < 1 || L.gy > KB_MAX_GRID_Y || L.block < 1 || L.block > KB_MAX_BLOCK ||
        L.smem > KB_MAX_SMEM)
        return fail(g, -EINVAL, "%s: launch %d×%d blocks of %d threads, %zu B shared is out of limits",
                    op, L.gx, L.gy, L.block, L.smem);
    return dev_rc(g, (g->dev->launch)(g->dev, kernel, &L, args, bytes), op);
}

/* The kinds' ops this backend has: grid_<op> in kernels/cuda/grid_<family>.c
 * (rmsnorm: grid_backend.c), typed by backend_<op>_fn, each one row of
 * grid_backend.c's ops table. A row of BACKEND_KIND_OPS without a grid_<op>
 * (rwkv7_step) is an op this backend lacks: its member stays NULL, and
 * backend_supports() says so. */
#define GRID_OP_DECL(e, op) backend_##op##_fn grid_##op;
BACKEND_KIND_OPS(GRID_OP_DECL)
#undef GRID_OP_DECL

#endif
