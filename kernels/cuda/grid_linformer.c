/* kernels/cuda/grid_linformer.c — the GPU backend's linformer_step (causal Linformer):
 * kb_linformer_step, then kb_pos_advance.
 * The host side of each op (its contract is in kernels/backend.h): the
 * extents checked before anything reaches the device, then the launches of
 * the bodies of kernels/cuda/kb_linformer.h, through the runners of
 * kernels/cuda/grid.h. */
#include <errno.h>
#include <stdint.h>

#include "kernels/cuda/grid.h"

/* Positions are read back before anything is launched, as cosformer_step's
 * horizon form (two small synchronous copies per run). */
int grid_linformer_step(backend *be, const backend_buf *in, const backend_buf *ef, backend_buf *out,
                        size_t state_off, size_t pos_off, int H, int dh, int kp, int N)
{
    gridbe *g = G(be);
    int B = g->B, rc;
    /* ≤ 512 threads: k_linformer_step uses 72 registers, 1024 × 72 is over the 64 K file */
    if (H < 1 || dh < 1 || dh > 512 || kp < 1 || kp > 512 || N < 1)
        return fail(g, -EINVAL, "linformer_step: %d heads of width %d, %d projections, length %d (width and "
                    "projections at most 512)", H, dh, kp, N);
    if (in == out) return fail(g, -EINVAL, "linformer_step: out is in (other heads still read the row)");
    size_t hd = (size_t)H * dh;
    if ((rc = region_fits(g, state_off, 2 * hd * kp * sizeof(double), sizeof(double), "linformer_step")) < 0 ||
        (rc = region_fits(g, pos_off, sizeof(int64_t), sizeof(int64_t), "linformer_step position")) < 0 ||
        (rc = fits(g, in, (size_t)B * 3 * hd, "linformer_step", "in")) < 0 ||
        (rc = fits(g, out, (size_t)B * hd, "linformer_step", "out")) < 0 ||
        (rc = fits(g, ef, 2 * (size_t)N * kp, "linformer_step", "ef")) < 0)
        return rc;
    if (B == 0) return 0;
    for (int k = 0; k < g->nruns; k++) {
        int slot;
        int64_t pos;
        if ((rc = g->dev->d2h(g->dev, &slot, g->d_slots + g->runs[k], sizeof slot)) < 0 ||
            (rc = g->dev->d2h(g->dev, &pos, g->pool + (size_t)slot * g->stride + pos_off, sizeof pos)) < 0)
            return dev_rc(g, rc, "linformer_step position");
        if (pos < 0) return fail(g, -EINVAL, "linformer_step: slot %d: position %lld", slot, (long long)pos);
        if (pos + (g->runs[k + 1] - g->runs[k]) > N) return -EOVERFLOW;
    }
    kb_linformer_args a = { F(in), F(ef), F(out), g->pool, g->stride, state_off, pos_off, g->d_slots, g->d_runs,
                            H, dh, kp, N };
    if ((rc = launch(g, KB_LINFORMER_STEP, kb_linformer_launch(g->nruns, H, dh, kp), &a, "linformer_step")) < 0)
        return rc;
    kb_pos_advance_args v = { g->pool, g->stride, pos_off, g->d_slots, g->d_runs, g->nruns };
    return launch(g, KB_POS_ADVANCE, kb_pos_advance_launch(g->nruns), &v, "linformer_step position");
}
