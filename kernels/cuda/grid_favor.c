/* kernels/cuda/grid_favor.c — the GPU backend's favor_features (the Performer's FAVOR+
 * features): kb_favor.
 * The host side of each op (its contract is in kernels/backend.h): the
 * extents checked before anything reaches the device, then the launches of
 * the bodies of kernels/cuda/kb_favor.h, through the runners of
 * kernels/cuda/grid.h. */
#include <errno.h>
#include <stdint.h>

#include "kernels/cuda/grid.h"

int grid_favor_features(backend *be, const backend_buf *in, int ldi, const backend_buf *omega, backend_buf *out,
                        int ldo, int H, int dh, int m, float ck)
{
    gridbe *g = G(be);
    int B = g->B, rc;
    if (H < 1 || dh < 1 || m < 1 || ldi < 2 * H * dh || ldo < 2 * H * m)
        return fail(g, -EINVAL, "favor_features: %d heads of width %d, %d features, ldi %d, ldo %d", H, dh, m, ldi, ldo);
    if (in == out) return fail(g, -EINVAL, "favor_features: out is in");
    if (B == 0) return 0;
    if ((rc = fits(g, in, (size_t)(B - 1) * ldi + 2 * (size_t)H * dh, "favor_features", "in")) < 0 ||
        (rc = fits(g, out, (size_t)(B - 1) * ldo + 2 * (size_t)H * m, "favor_features", "out")) < 0 ||
        (rc = fits(g, omega, (size_t)m * dh, "favor_features", "omega")) < 0)
        return rc;
    kb_favor_args a = { F(in), F(omega), F(out), ldi, ldo, H, dh, m, ck };
    return launch(g, KB_FAVOR, kb_favor_launch(B, H), &a, "favor_features");
}
