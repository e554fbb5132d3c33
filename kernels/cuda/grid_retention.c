/* kernels/cuda/grid_retention.c — the GPU backend's retention_step (RetNet):
 * kb_retention_step.
 * The host side of each op (its contract is in kernels/backend.h): the
 * extents checked before anything reaches the device, then the launches of
 * the bodies of kernels/cuda/kb_retention.h, through the runners of
 * kernels/cuda/grid.h. */
#include <errno.h>
#include <stdint.h>

#include "kernels/cuda/grid.h"

int grid_retention_step(backend *be, const backend_buf *in, const backend_buf *gamma, const backend_buf *norm,
                        backend_buf *out, size_t state_off, int H, int dh, float eps, int f32)
{
    gridbe *g = G(be);
    int B = g->B, rc;
    if (H < 1 || dh < 1 || dh > KB_MAX_BLOCK) return fail(g, -EINVAL, "retention_step: %d heads of width %d", H, dh);
    if (in == out) return fail(g, -EINVAL, "retention_step: out is in (other heads still read the row)");
    size_t hd = (size_t)H * dh, el = f32 ? sizeof(float) : sizeof(double);
    if ((rc = region_fits(g, state_off, hd * dh * el, el, "retention_step")) < 0 ||
        (rc = fits(g, in, (size_t)B * 4 * hd, "retention_step", "in")) < 0 ||
        (rc = fits(g, out, (size_t)B * hd, "retention_step", "out")) < 0 ||
        (rc = fits(g, gamma, H, "retention_step", "gamma")) < 0 ||
        (rc = fits(g, norm, 2 * hd, "retention_step", "norm")) < 0)
        return rc;
    if (B == 0) return 0;
    kb_retention_args a = { F(in), F(gamma), F(norm), F(out), g->pool, g->stride, state_off, g->d_slots, g->d_runs,
                            H, dh, eps, f32 != 0 };
    return launch(g, KB_RETENTION_STEP, kb_retention_launch(g->nruns, H, dh), &a, "retention_step");
}
