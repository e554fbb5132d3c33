/* kernels/cuda/grid_cosformer.c — the GPU backend's cosformer_step: kb_cosformer_step,
 * then kb_pos_advance.
 * The host side of each op (its contract is in kernels/backend.h): the
 * extents checked before anything reaches the device, then the launches of
 * the bodies of kernels/cuda/kb_cosformer.h, through the runners of
 * kernels/cuda/grid.h. */
#include <errno.h>
#include <stdint.h>

#include "kernels/cuda/grid.h"

/* The horizon form's refusal needs each run's position, which lives on the
 * device: it is read back (two small synchronous copies per run, only when
 * not periodic) before anything is launched, so a refused call changes
 * nothing. */
int grid_cosformer_step(backend *be, const backend_buf *in, backend_buf *out, size_t state_off, size_t pos_off,
                        int H, int dh, int M, int periodic, float eps)
{
    gridbe *g = G(be);
    int B = g->B, rc, P = periodic ? 3 : 2;
    if (H < 1 || dh < 1 || dh > KB_MAX_BLOCK || M < 1)
        return fail(g, -EINVAL, "cosformer_step: %d heads of width %d, horizon %d", H, dh, M);
    if (in == out) return fail(g, -EINVAL, "cosformer_step: out is in (other heads still read the row)");
    size_t hd = (size_t)H * dh;
    if ((rc = region_fits(g, state_off, P * hd * (dh + 1) * sizeof(double), sizeof(double), "cosformer_step")) < 0 ||
        (rc = region_fits(g, pos_off, sizeof(int64_t), sizeof(int64_t), "cosformer_step position")) < 0 ||
        (rc = fits(g, in, (size_t)B * 3 * hd, "cosformer_step", "in")) < 0 ||
        (rc = fits(g, out, (size_t)B * hd, "cosformer_step", "out")) < 0)
        return rc;
    if (B == 0) return 0;
    for (int k = 0; k < g->nruns && !periodic; k++) {
        int slot;
        int64_t pos;
        if ((rc = g->dev->d2h(g->dev, &slot, g->d_slots + g->runs[k], sizeof slot)) < 0 ||
            (rc = g->dev->d2h(g->dev, &pos, g->pool + (size_t)slot * g->stride + pos_off, sizeof pos)) < 0)
            return dev_rc(g, rc, "cosformer_step position");
        if (pos < 0) return fail(g, -EINVAL, "cosformer_step: slot %d: position %lld", slot, (long long)pos);
        if (pos + (g->runs[k + 1] - g->runs[k]) > M) return -EOVERFLOW;
    }
    kb_cosformer_args a = { F(in), F(out), g->pool, g->stride, state_off, pos_off, g->d_slots, g->d_runs,
                            H, dh, M, periodic, eps };
    if ((rc = launch(g, KB_COSFORMER_STEP, kb_cosformer_launch(g->nruns, H, dh), &a, "cosformer_step")) < 0) return rc;
    kb_pos_advance_args v = { g->pool, g->stride, pos_off, g->d_slots, g->d_runs, g->nruns };
    return launch(g, KB_POS_ADVANCE, kb_pos_advance_launch(g->nruns), &v, "cosformer_step position");
}
