/* kernels/cuda/grid_window.c — the GPU backend's window_step (sliding-window
 * attention): kb_window_step, then kb_pos_advance.
 * The host side of each op (its contract is in kernels/backend.h): the
 * extents checked before anything reaches the device, then the launches of
 * the bodies of kernels/cuda/kb_window.h, through the runners of
 * kernels/cuda/grid.h. */
#include <errno.h>
#include <stdint.h>

#include "kernels/cuda/grid.h"

/* Two launches: the attention (one thread per run and head), then each run's
 * position advanced by the run's length (kb_pos_advance). */
int grid_window_step(backend *be, const backend_buf *in, const backend_buf *slopes, backend_buf *out,
                     size_t ring_off, size_t glob_off, size_t pos_off, int H, int dh, int w, int dil, int gl,
                     float rope_base)
{
    gridbe *g = G(be);
    int B = g->B, rc;
    if (H < 1 || dh < 1 || dh > KB_WINDOW_MAX_DH || w < 1 || dil < 1 || gl < 0 || (rope_base > 0 && dh % 2))
        return fail(g, -EINVAL, "window_step: %d heads of width %d, window %d, dilation %d, global %d", H, dh, w,
                    dil, gl);
    size_t hd = (size_t)H * dh, L = (size_t)w * dil;
    if ((rc = region_fits(g, ring_off, 2 * L * hd * sizeof(float), sizeof(float), "window_step ring")) < 0 ||
        (gl && (rc = region_fits(g, glob_off, 2 * (size_t)gl * hd * sizeof(float), sizeof(float),
                                 "window_step global")) < 0) ||
        (rc = region_fits(g, pos_off, sizeof(int64_t), sizeof(int64_t), "window_step position")) < 0 ||
        (rc = fits(g, in, (size_t)B * 3 * hd, "window_step", "in")) < 0 ||
        (rc = fits(g, out, (size_t)B * hd, "window_step", "out")) < 0 ||
        (!(rope_base > 0) && (rc = fits(g, slopes, (size_t)H, "window_step", "slopes")) < 0))
        return rc;
    if (B == 0) return 0;
    kb_window_args a = { F(in), slopes ? F(slopes) : NULL, F(out), g->pool, g->stride, ring_off, glob_off, pos_off,
                         g->d_slots, g->d_runs, H, dh, w, dil, gl, rope_base };
    if ((rc = launch(g, KB_WINDOW_STEP, kb_window_launch(g->nruns, H), &a, "window_step")) < 0) return rc;
    kb_pos_advance_args v = { g->pool, g->stride, pos_off, g->d_slots, g->d_runs, g->nruns };
    return launch(g, KB_POS_ADVANCE, kb_pos_advance_launch(g->nruns), &v, "window_step position");
}
