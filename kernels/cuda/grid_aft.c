/* kernels/cuda/grid_aft.c — the GPU backend's AFT ops: aft_step (kb_aft_step) and
 * aft_window_step (kb_aftw_step, then kb_pos_advance).
 * The host side of each op (its contract is in kernels/backend.h): the
 * extents checked before anything reaches the device, then the launches of
 * the bodies of kernels/cuda/kb_aft.h, through the runners of
 * kernels/cuda/grid.h. */
#include <errno.h>
#include <stdint.h>

#include "kernels/cuda/grid.h"

int grid_aft_step(backend *be, const backend_buf *in, const backend_buf *w, const backend_buf *u,
                  backend_buf *out, size_t state_off, int d, int f32)
{
    gridbe *g = G(be);
    int B = g->B, rc;
    size_t el = f32 ? sizeof(float) : sizeof(double);
    if (d < 1) return fail(g, -EINVAL, "aft_step: width %d", d);
    if ((rc = region_fits(g, state_off, (size_t)3 * d * el, el, "aft_step")) < 0 ||
        (rc = fits(g, in, (size_t)B * 3 * d, "aft_step", "in")) < 0 ||
        (rc = fits(g, out, (size_t)B * d, "aft_step", "out")) < 0 ||
        (w && (rc = fits(g, w, d, "aft_step", "w")) < 0) || (u && (rc = fits(g, u, d, "aft_step", "u")) < 0))
        return rc;
    if (B == 0) return 0;
    kb_aft_args a = { F(in), w ? F(w) : NULL, u ? F(u) : NULL, F(out), g->pool, g->stride, state_off,
                      g->d_slots, g->d_runs, d, f32 != 0 };
    return launch(g, KB_AFT_STEP, kb_aft_launch(g->nruns, d), &a, "aft_step");
}

int grid_aft_window_step(backend *be, const backend_buf *in, const backend_buf *w, backend_buf *out,
                         size_t acc_off, size_t ring_off, size_t pos_off, int d, int s, int H)
{
    gridbe *g = G(be);
    int B = g->B, rc;
    if (d < 1 || s < 2 || H < 1 || d % H)
        return fail(g, -EINVAL, "aft_window_step: width %d, window %d, %d heads", d, s, H);
    if ((rc = region_fits(g, acc_off, (size_t)3 * d * sizeof(double), sizeof(double), "aft_window_step sums")) < 0 ||
        (rc = region_fits(g, ring_off, 2 * (size_t)d * (size_t)(s - 1) * sizeof(float), sizeof(float),
                          "aft_window_step ring")) < 0 ||
        (rc = region_fits(g, pos_off, sizeof(int64_t), sizeof(int64_t), "aft_window_step position")) < 0 ||
        (rc = fits(g, in, (size_t)B * 3 * d, "aft_window_step", "in")) < 0 ||
        (rc = fits(g, out, (size_t)B * d, "aft_window_step", "out")) < 0 ||
        (rc = fits(g, w, (size_t)H * s, "aft_window_step", "w")) < 0)
        return rc;
    if (B == 0) return 0;
    kb_aftw_args a = { F(in), F(w), F(out), g->pool, g->stride, acc_off, ring_off, pos_off, g->d_slots, g->d_runs,
                       d, s, H };
    if ((rc = launch(g, KB_AFTW_STEP, kb_aftw_launch(g->nruns, d), &a, "aft_window_step")) < 0) return rc;
    kb_pos_advance_args v = { g->pool, g->stride, pos_off, g->d_slots, g->d_runs, g->nruns };
    return launch(g, KB_POS_ADVANCE, kb_pos_advance_launch(g->nruns), &v, "aft_window_step position");
}
