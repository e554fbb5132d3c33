/* kernels/cuda/grid_shift.c — the GPU backend's shift_mix (token shift): kb_shift_mix.
 * The host side of each op (its contract is in kernels/backend.h): the
 * extents checked before anything reaches the device, then the launches of
 * the bodies of kernels/cuda/kb_shift.h, through the runners of
 * kernels/cuda/grid.h. */
#include <errno.h>
#include <stdint.h>

#include "kernels/cuda/grid.h"

int grid_shift_mix(backend *be, const backend_buf *h, const backend_buf *mu, backend_buf *out,
                   size_t shift_off, int d, int nmix)
{
    gridbe *g = G(be);
    int B = g->B, rc;
    if (d < 1 || nmix < 1) return fail(g, -EINVAL, "shift_mix: width %d, %d mixes", d, nmix);
    if ((rc = region_fits(g, shift_off, (size_t)d * sizeof(float), sizeof(float), "shift_mix")) < 0 ||
        (rc = fits(g, h, (size_t)B * d, "shift_mix", "h")) < 0 ||
        (rc = fits(g, mu, (size_t)nmix * d, "shift_mix", "mu")) < 0 ||
        (rc = fits(g, out, (size_t)B * nmix * d, "shift_mix", "out")) < 0)
        return rc;
    if (B == 0) return 0;
    kb_shift_mix_args a = { F(h), F(mu), F(out), g->pool, g->stride, shift_off, g->d_slots, g->d_runs, d, nmix };
    return launch(g, KB_SHIFT_MIX, kb_shift_mix_launch(g->nruns, d), &a, "shift_mix");
}
