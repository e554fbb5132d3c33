/* tests/test_cuda_harness.c — the CUDA backend without a GPU.
 *
 * The CUDA backend's kernels (kernels/cuda/kernel_bodies.h) and its whole
 * host side (kernels/cuda/grid_backend.c: pool, batch arrays, bounds checks,
 * the row-major cuBLAS mapping) run over the host harness, which launches
 * the same per-thread bodies over the same grids with barriers and shared
 * memory emulated. Every op is compared with the CPU backend on random
 * inputs, twice: threads in forward and in reverse order (a kernel whose
 * result depends on the order has a race within a barrier phase). Whole
 * random models (each mixer, token shift on/off, γ < 1 and = 1, AFT simple
 * and decay) loaded on "harness" and on "cpu" give the same logits for a
 * batch of sessions. Then the refusals: what would corrupt device memory
 * must be caught on the host. */
#include <errno.h>
#include <string.h>

#include "kernels/cuda/grid_backend.h"
#include "kernels/cuda/harness.h"
#include "tests/cuda_compare.h"

static int ctor_forward(backend **out, char *err, size_t errlen) {
    return backend_harness_new(HARNESS_FORWARD, out, err, errlen);
}
static int ctor_reverse(backend **out, char *err, size_t errlen) {
    return backend_harness_new(HARNESS_REVERSE, out, err, errlen);
}

/* Each refusal returns an error, says why, and leaves the state untouched. */
static void refusals(void) {
    backend *be;
    char err[256];
    if (backend_harness_new(HARNESS_FORWARD, &be, err, sizeof err) < 0) { CHECK(0, "%s", err); return; }
    const backend_ops *o = be->ops;
    CHECK(!strcmp(o->name, "harness"), "name %s", o->name);
    size_t slot_bytes = 8 * (4 * 8 * 9) + 64;    /* H=4, dh=8 linear state + room */
    CHECK(o->slots_reserve(be, 4, slot_bytes) == 0, "reserve");
    backend_buf *in = NULL, *out = NULL, *small = NULL, *W = NULL;
    if (o->buf_new(be, 2 * 3 * 32, &in) || o->buf_new(be, 2 * 32, &out) || o->buf_new(be, 10, &small) ||
        o->buf_new(be, 32 * 32, &W)) {
        CHECK(0, "buf_new: %s", grid_backend_error(be));
        goto done;
    }
    float zeros[2 * 3 * 32] = { 0 };
    CHECK(o->buf_upload(be, in, 0, zeros, 2 * 3 * 32) == 0, "upload");

    int slots_ok[2] = { 1, 3 }, slots_dup[2] = { 1, 1 }, slots_far[2] = { 1, 4 }, tok[2] = { 0, 255 },
        tok_bad[2] = { 0, 256 };
    CHECK(o->begin_step(be, slots_dup, tok, 2) == -EINVAL, "duplicate slot accepted");
    CHECK(strstr(grid_backend_error(be), "twice") != NULL, "message: %s", grid_backend_error(be));
    CHECK(o->begin_step(be, slots_far, tok, 2) == -EINVAL, "slot past the pool accepted");
    CHECK(o->begin_step(be, slots_ok, tok_bad, 2) == -EINVAL, "token 256 accepted");
    CHECK(o->begin_step(be, slots_ok, tok, 2) == 0, "begin_step: %s", grid_backend_error(be));

    CHECK(o->linear_step(be, in, NULL, out, 0, 4, 8, 1e-6f) == 0, "linear_step: %s", grid_backend_error(be));
    CHECK(o->linear_step(be, in, NULL, out, 4, 4, 8, 1e-6f) == -EINVAL, "misaligned fp64 region accepted");
    CHECK(o->linear_step(be, in, NULL, out, 72, 4, 8, 1e-6f) == -EINVAL, "region past the slot accepted");
    CHECK(strstr(grid_backend_error(be), "exceeds") != NULL, "message: %s", grid_backend_error(be));
    CHECK(o->linear_step(be, small, NULL, out, 0, 4, 8, 1e-6f) == -EINVAL, "short input accepted");
    CHECK(o->linear_step(be, in, small, out, 0, 4, 8, 1e-6f) == 0, "gamma of 10 ≥ 4 heads refused");
    CHECK(o->aft_step(be, in, NULL, NULL, small, 0, 32) == -EINVAL, "short output accepted");
    CHECK(o->matmul(be, in, 0, 32, small, NULL, out, 0, 32, 2, 32, 32, 0) == -EINVAL, "short W accepted");
    CHECK(o->matmul(be, in, 170, 32, W, NULL, out, 0, 32, 2, 32, 32, 0) == -EINVAL, "x offset past end accepted");
    CHECK(o->matmul(be, in, 0, 16, W, NULL, out, 0, 32, 2, 32, 32, 0) == -EINVAL, "ldx < K accepted");
    CHECK(o->matmul(be, in, 0, 32, W, NULL, out, 40, 32, 2, 32, 32, 0) == -EINVAL, "y offset past end accepted");
    CHECK(o->matmul(be, in, 0, 32, W, NULL, out, 0, 32, 2, 32, 32, 0) == 0, "good matmul: %s", grid_backend_error(be));
    CHECK(o->shift_mix(be, in, in, out, slot_bytes - 8, 32, 1) == -EINVAL, "shift region past the slot accepted");
    CHECK(o->buf_upload(be, small, 5, zeros, 6) == -EINVAL, "upload past the end accepted");
    CHECK(o->gelu(be, small, 11) == -EINVAL, "gelu past the end accepted");
    CHECK(o->slots_reserve(be, 8, slot_bytes + 8) == -EINVAL, "slot size change accepted");

    /* dh = 2048 needs more threads than a block has: refused, not launched */
    CHECK(o->linear_step(be, in, NULL, out, 0, 1, 2048, 1e-6f) == -EINVAL, "dh 2048 accepted");

    /* the state of the slots in use is what the one good step left */
    unsigned char st[8 * (4 * 8 * 9) + 64];
    CHECK(o->slot_read(be, 2, st) == 0, "slot_read");
    int untouched = 1;
    for (size_t i = 0; i < sizeof st; i++) untouched &= st[i] == 0;
    CHECK(untouched, "slot 2 (not in the batch) was written");
done:
    o->buf_free(be, in);
    o->buf_free(be, out);
    o->buf_free(be, small);
    o->buf_free(be, W);
    backend_free(be);
}

/* The harness itself refuses launches a GPU would refuse. */
static void harness_limits(void) {
    char err[256];
    kb_gelu_args a = { NULL, 0 };
    lind_launch big = { 1, 1, 2048, 0 }, smem = { 1, 1, 32, 64 * 1024 }, gy = { 1, 70000, 32, 0 };
    CHECK(harness_launch(HARNESS_FORWARD, KB_GELU, &big, &a, err, sizeof err) == -EINVAL, "2048 threads accepted");
    CHECK(harness_launch(HARNESS_FORWARD, KB_GELU, &smem, &a, err, sizeof err) == -EINVAL, "64 KiB shared accepted");
    CHECK(harness_launch(HARNESS_FORWARD, KB_GELU, &gy, &a, err, sizeof err) == -EINVAL, "grid.y 70000 accepted");
    CHECK(harness_launch(HARNESS_FORWARD, KB_NKERNELS, &big, &a, err, sizeof err) == -EINVAL, "unknown kernel accepted");
    /* every kernel's geometry is within limits at the largest shapes lind allows */
    lind_launch L[] = { kb_linear_launch(65535, 64, 1024), kb_layernorm_launch(65535, 1 << 16),
                        kb_aft_launch(65535, 1 << 16), kb_shift_mix_launch(65535, 1 << 16) };
    for (size_t i = 0; i < sizeof L / sizeof *L; i++)
        CHECK(L[i].block <= KB_MAX_BLOCK && L[i].smem <= KB_MAX_SMEM && L[i].gy <= KB_MAX_GRID_Y,
              "geometry %zu out of limits", i);
}

int main(void) {
    /* fp32 results may differ from the CPU backend's only by summation order
     * (layer norm sums in double here, in float there); fp64 states run the
     * same per-element code on the same inputs. */
    cmp_run_all("harness_fwd", ctor_forward, 1e-5, 1e-12);
    cmp_run_all("harness_rev", ctor_reverse, 1e-5, 1e-12);
    /* whole models through recurrent/model.c on the "harness" backend */
    cmp_model_backend = "harness";
    RUN(models_random);
    RUN(refusals);
    RUN(harness_limits);
    return check_exit();
}
