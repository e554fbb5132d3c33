/* kernels/cuda/grid_delta.c — the GPU backend's short_conv (kb_short_conv, then
 * kb_conv_advance) and delta_step (kb_delta_step).
 * The host side of each op (its contract is in kernels/backend.h): the
 * extents checked before anything reaches the device, then the launches of
 * the bodies of kernels/cuda/kb_delta.h, through the runners of
 * kernels/cuda/grid.h. */
#include <errno.h>
#include <stdint.h>

#include "kernels/cuda/grid.h"

/* Two launches: the convolution (one thread per run and channel), then the
 * ring head index of each run's slot advanced by the run's length (see
 * kb_conv_advance: no thread of the first kernel may store it). */
int grid_short_conv(backend *be, const backend_buf *in, int ldi, backend_buf *out, int ldo, const backend_buf *w,
                    int n, int K, size_t ring_off, size_t idx_off, int silu)
{
    gridbe *g = G(be);
    int B = g->B, rc;
    if (n < 0 || K < 2 || ldi < n || ldo < n)
        return fail(g, -EINVAL, "short_conv: %d channels, kernel %d, ldi %d, ldo %d", n, K, ldi, ldo);
    if (in == out && ldi != ldo)
        return fail(g, -EINVAL, "short_conv: in place with ldi %d != ldo %d", ldi, ldo);
    if ((rc = region_fits(g, ring_off, (size_t)n * (size_t)(K - 1) * sizeof(float), sizeof(float),
                          "short_conv ring")) < 0 ||
        (rc = region_fits(g, idx_off, sizeof(int32_t), sizeof(int32_t), "short_conv index")) < 0 ||
        (rc = fits(g, w, (size_t)n * K, "short_conv", "w")) < 0)
        return rc;
    /* blocks of a run read the index while others write the ring */
    if (idx_off + sizeof(int32_t) > ring_off && idx_off < ring_off + (size_t)n * (size_t)(K - 1) * sizeof(float))
        return fail(g, -EINVAL, "short_conv: index at byte %zu lies inside the ring [%zu, +%zu)", idx_off, ring_off,
                    (size_t)n * (size_t)(K - 1) * sizeof(float));
    if (B == 0 || n == 0) return 0;
    if ((rc = fits(g, in, (size_t)(B - 1) * ldi + n, "short_conv", "in")) < 0 ||
        (rc = fits(g, out, (size_t)(B - 1) * ldo + n, "short_conv", "out")) < 0)
        return rc;
    kb_short_conv_args a = { F(in), F(out), F(w), g->pool, g->stride, ring_off, idx_off, g->d_slots, g->d_runs,
                             ldi, ldo, n, K, silu != 0 };
    if ((rc = launch(g, KB_SHORT_CONV, kb_short_conv_launch(g->nruns, n), &a, "short_conv")) < 0) return rc;
    kb_conv_advance_args v = { g->pool, g->stride, idx_off, g->d_slots, g->d_runs, g->nruns, K };
    return launch(g, KB_CONV_ADVANCE, kb_conv_advance_launch(g->nruns), &v, "short_conv index");
}

int grid_delta_step(backend *be, const backend_buf *in, const backend_buf *gate, const backend_buf *norm_w,
                    backend_buf *out, size_t state_off, int H, int dh, float eps)
{
    gridbe *g = G(be);
    int B = g->B, rc;
    if (H < 1 || dh < 1 || dh > KB_MAX_BLOCK || (size_t)H * dh > INT32_MAX / 4)
        return fail(g, -EINVAL, "delta_step: %d heads of width %d", H, dh);
    if (in == out) return fail(g, -EINVAL, "delta_step: out is in (other heads still read the row)");
    size_t hd = (size_t)H * dh;
    if ((rc = region_fits(g, state_off, hd * dh * sizeof(double), sizeof(double), "delta_step")) < 0 ||
        (rc = fits(g, in, (size_t)B * (3 * hd + 2 * (size_t)H), "delta_step", "in")) < 0 ||
        (rc = fits(g, out, (size_t)B * hd, "delta_step", "out")) < 0 ||
        (rc = fits(g, gate, 2 * (size_t)H, "delta_step", "gate")) < 0 ||
        (rc = fits(g, norm_w, dh, "delta_step", "norm_w")) < 0)
        return rc;
    if (B == 0) return 0;
    kb_delta_args a = { F(in), F(gate), F(norm_w), F(out), g->pool, g->stride, state_off, g->d_slots, g->d_runs,
                        H, dh, eps };
    return launch(g, KB_DELTA_STEP, kb_delta_launch(g->nruns, H, dh), &a, "delta_step");
}
