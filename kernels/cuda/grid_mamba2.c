/* kernels/cuda/grid_mamba2.c — the GPU backend's mamba2_step (Mamba-2's selective
 * state space step): kb_mamba2_step (rmsnorm, whose body kb_mamba2.h also
 * holds, is grid_backend.c's, beside layernorm).
 * The host side of each op (its contract is in kernels/backend.h): the
 * extents checked before anything reaches the device, then the launches of
 * the bodies of kernels/cuda/kb_mamba2.h, through the runners of
 * kernels/cuda/grid.h. */
#include <errno.h>
#include <stdint.h>

#include "kernels/cuda/grid.h"

/* One thread per (run, channel of x): kb_mamba2_step. */
int grid_mamba2_step(backend *be, const backend_buf *in, int ldi, const backend_buf *par, backend_buf *out,
                     size_t state_off, int H, int P, int N, int ngroups, float dt_lo, float dt_hi)
{
    gridbe *g = G(be);
    int B = g->B, rc;
    if (H < 1 || P < 1 || N < 1 || ngroups < 1 || H % ngroups || (size_t)H * P * N > INT32_MAX / 4 ||
        (size_t)H * P + 2 * (size_t)ngroups * N > INT32_MAX / 8 || !(dt_lo <= dt_hi))
        return fail(g, -EINVAL, "mamba2_step: %d heads of %d, d_state %d, %d groups, dt in [%g, %g]", H, P, N, ngroups,
                    (double)dt_lo, (double)dt_hi);
    size_t I = (size_t)H * P, CD = I + 2 * (size_t)ngroups * N;
    if ((size_t)ldi < CD + I + (size_t)H) return fail(g, -EINVAL, "mamba2_step: ldi %d < %zu", ldi, CD + I + H);
    if (in == out) return fail(g, -EINVAL, "mamba2_step: out is in (other channels still read the row)");
    if ((rc = region_fits(g, state_off, I * N * sizeof(float), sizeof(float), "mamba2_step")) < 0 ||
        (rc = fits(g, par, CD + 3 * (size_t)H, "mamba2_step", "par")) < 0)
        return rc;
    if (B == 0) return 0;
    if ((rc = fits(g, in, (size_t)(B - 1) * ldi + CD + I + H, "mamba2_step", "in")) < 0 ||
        (rc = fits(g, out, (size_t)B * I, "mamba2_step", "out")) < 0)
        return rc;
    kb_mamba2_args a = { F(in), F(par), F(out), g->pool, g->stride, state_off, g->d_slots, g->d_runs, ldi, H, P, N,
                         ngroups, dt_lo, dt_hi };
    return launch(g, KB_MAMBA2_STEP, kb_mamba2_launch(g->nruns, (int)I), &a, "mamba2_step");
}
