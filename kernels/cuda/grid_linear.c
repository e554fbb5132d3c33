/* kernels/cuda/grid_linear.c — the GPU backend's linear_step (linear attention):
 * kb_linear_step.
 * The host side of each op (its contract is in kernels/backend.h): the
 * extents checked before anything reaches the device, then the launches of
 * the bodies of kernels/cuda/kb_linear.h, through the runners of
 * kernels/cuda/grid.h. */
#include <errno.h>
#include <stdint.h>

#include "kernels/cuda/grid.h"

int grid_linear_step(backend *be, const backend_buf *in, const backend_buf *gamma, backend_buf *out,
                     size_t state_off, int H, int dh, float eps)
{
    gridbe *g = G(be);
    int B = g->B, rc;
    if (H < 1 || dh < 1 || dh > KB_MAX_BLOCK) return fail(g, -EINVAL, "linear_step: %d heads of width %d", H, dh);
    size_t HD = (size_t)H * dh;
    if ((rc = region_fits(g, state_off, HD * (dh + 1) * sizeof(double), sizeof(double), "linear_step")) < 0 ||
        (rc = fits(g, in, (size_t)B * 3 * HD, "linear_step", "in")) < 0 ||
        (rc = fits(g, out, (size_t)B * HD, "linear_step", "out")) < 0 ||
        (gamma && (rc = fits(g, gamma, H, "linear_step", "gamma")) < 0))
        return rc;
    if (B == 0) return 0;
    kb_linear_args a = { F(in), gamma ? F(gamma) : NULL, F(out), g->pool, g->stride, state_off,
                         g->d_slots, g->d_runs, H, dh, eps };
    return launch(g, KB_LINEAR_STEP, kb_linear_launch(g->nruns, H, dh), &a, "linear_step");
}
