/* tests/test_cuda_harness.c — the CUDA backend without a GPU.
 *
 * The CUDA backend's kernels (kernels/cuda/kernel_bodies.h) and its whole
 * host side (kernels/cuda/grid_backend.c: pool, batch arrays, bounds checks,
 * the row-major cuBLAS mapping) run over the host harness, which launches
 * the same per-thread bodies over the same grids with barriers and shared
 * memory emulated. Every op is compared with the CPU backend on random
 * inputs, twice: threads in forward and in reverse order (a kernel whose
 * result depends on the order has a race within a barrier phase); batches
 * whose rows form runs (batched prefill) give, bit for bit, what one-row
 * steps give. Whole random models (each mixer, token shift on/off, γ < 1
 * and = 1, AFT simple and decay; an RWKV-4-shaped model with fp32, fp16 and
 * bf16 weights; delta models with their short convolution) loaded on
 * "harness" and on "cpu" give the same logits for a batch of sessions,
 * stepped and prefilled. Then the refusals: what would
 * corrupt device memory must be caught on the host. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/grid_backend.h"
#include "kernels/cuda/harness.h"
#include "tests/cuda_compare.h"

static int ctor_forward(backend **out, char *err, size_t errlen)
{
    return backend_harness_new(HARNESS_FORWARD, &cmp_be, out, err, errlen);
}
static int ctor_reverse(backend **out, char *err, size_t errlen)
{
    return backend_harness_new(HARNESS_REVERSE, &cmp_be, out, err, errlen);
}

/* Each refusal returns an error, says why, and leaves the state untouched. */
static void refusals(void)
{
    backend *be;
    char err[256];
    if (backend_harness_new(HARNESS_FORWARD, NULL, &be, err, sizeof err) < 0) { CHECK(0, "%s", err); return; }
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

    int slots_ok[2] = { 1, 3 }, slots_run[2] = { 1, 1 }, slots_far[2] = { 1, 4 }, tok[2] = { 0, 255 },
        tok_bad[2] = { 0, -1 }, tok_big[2] = { 0, 40 }, slots_split[3] = { 1, 3, 1 }, tok3[3] = { 0, 1, 2 };
    CHECK(o->begin_step(be, slots_run, tok, 2) == 0, "a run of two rows refused: %s", grid_backend_error(be));
    CHECK(o->begin_step(be, slots_split, tok3, 3) == -EINVAL, "a slot in two runs accepted");
    CHECK(strstr(grid_backend_error(be), "twice") != NULL, "message: %s", grid_backend_error(be));
    CHECK(o->begin_step(be, slots_far, tok, 2) == -EINVAL, "slot past the pool accepted");
    CHECK(o->begin_step(be, slots_ok, tok_bad, 2) == -EINVAL, "token -1 accepted");
    /* a token past a byte is fine; past the embedding's rows embed refuses it */
    CHECK(o->begin_step(be, slots_ok, tok_big, 2) == 0, "token 40 refused: %s", grid_backend_error(be));
    CHECK(o->embed(be, W, out, 32) == -EINVAL, "token 40 of a 32-row table embedded");
    CHECK(strstr(grid_backend_error(be), "token 40") != NULL, "message: %s", grid_backend_error(be));
    CHECK(o->begin_step(be, slots_ok, tok, 2) == 0, "begin_step: %s", grid_backend_error(be));

    CHECK(o->linear_step(be, in, NULL, out, 0, 4, 8, 1e-6f) == 0, "linear_step: %s", grid_backend_error(be));
    CHECK(o->linear_step(be, in, NULL, out, 4, 4, 8, 1e-6f) == -EINVAL, "misaligned fp64 region accepted");
    CHECK(o->linear_step(be, in, NULL, out, 72, 4, 8, 1e-6f) == -EINVAL, "region past the slot accepted");
    CHECK(strstr(grid_backend_error(be), "exceeds") != NULL, "message: %s", grid_backend_error(be));
    CHECK(o->linear_step(be, small, NULL, out, 0, 4, 8, 1e-6f) == -EINVAL, "short input accepted");
    CHECK(o->linear_step(be, in, small, out, 0, 4, 8, 1e-6f) == 0, "gamma of 10 ≥ 4 heads refused");
    CHECK(o->aft_step(be, in, NULL, NULL, small, 0, 32, 0) == -EINVAL, "short output accepted");
    /* out[2 × 32] = in[2 × 32] · W[32 × 32]ᵀ, then views and flags it must refuse */
    backend_mview y = bmview(out, 0, 32);
    backend_view x = bview(in, 0, 32);
    CHECK(o->matmul(be, y, x, small, NULL, 2, 32, 32, 0) == -EINVAL, "short W accepted");
    CHECK(o->matmul(be, y, bview(in, 170, 32), W, NULL, 2, 32, 32, 0) == -EINVAL, "x offset past end accepted");
    CHECK(o->matmul(be, y, bview(in, 0, 16), W, NULL, 2, 32, 32, 0) == -EINVAL, "ldx < K accepted");
    CHECK(o->matmul(be, bmview(out, 40, 32), x, W, NULL, 2, 32, 32, 0) == -EINVAL, "y offset past end accepted");
    CHECK(o->matmul(be, y, x, W, NULL, 2, 32, 32, 0) == 0, "good matmul: %s", grid_backend_error(be));
    CHECK(o->shift_mix(be, in, in, out, slot_bytes - 8, 32, 1) == -EINVAL, "shift region past the slot accepted");
    CHECK(o->buf_upload(be, small, 5, zeros, 6) == -EINVAL, "upload past the end accepted");
    CHECK(o->matmul(be, y, x, W, NULL, 2, 32, 32, BACKEND_MM_GELU | BACKEND_MM_ACCUMULATE) == -EINVAL,
          "GELU with accumulate accepted");
    CHECK(o->matmul(be, bmview(out, 0, 40), x, W, NULL, 1, 32, 32, BACKEND_MM_GELU) == -EINVAL,
          "GELU with ldy != N accepted");
    CHECK(o->matmul(be, y, x, W, NULL, 2, 32, 32, BACKEND_MM_RELU2 | BACKEND_MM_SIGMOID) == -EINVAL,
          "two activations accepted");
    CHECK(o->matmul(be, y, x, W, NULL, 2, 32, 32, BACKEND_MM_SIGMOID | BACKEND_MM_ACCUMULATE) == -EINVAL,
          "SIGMOID with accumulate accepted");
    CHECK(o->matmul(be, y, x, W, NULL, 2, 32, 32, 64) == -EINVAL, "an unknown flag accepted");
    int rows_bad[2] = { 0, 2 };
    CHECK(o->gather_rows(be, out, rows_bad, 2, in, 32) == -EINVAL, "gather of row 2 of a 2-row batch accepted");
    CHECK(o->gather_rows(be, out, rows_bad, 1, small, 32) == -EINVAL, "gather into a short buffer accepted");
    CHECK(o->scale_rows(be, small, 32, 0.5f) == -EINVAL, "scale_rows over a short buffer accepted");
    CHECK(o->gated_add(be, out, in, 0, 16, in, 0, 32, 32) == -EINVAL, "gated_add with ldg < d accepted");
    CHECK(o->gated_add(be, out, in, 170, 32, in, 0, 32, 32) == -EINVAL, "gated_add gate past the end accepted");
    CHECK(o->gated_add(be, small, in, 0, 32, in, 0, 32, 32) == -EINVAL, "gated_add into a short x accepted");
    uint16_t hw[4] = { 0 };
    backend_buf *hb = NULL;
    CHECK(o->weight_new_half(be, 2, 2, hw, 3, &hb) == -EINVAL && hb == NULL, "half type 3 accepted");
    CHECK(o->weight_new_half(be, 2, 2, hw, BACKEND_W_F16, &hb) == 0, "weight_new_half: %s", grid_backend_error(be));
    float back[4];
    CHECK(o->buf_download(be, hb, 0, back, 4) == -EINVAL, "a half weight was read back");
    CHECK(o->buf_upload(be, hb, 0, back, 4) == -EINVAL, "a half weight was written");
    o->buf_free(be, hb);
    CHECK(o->slots_reserve(be, 8, slot_bytes + 8) == -EINVAL, "slot size change accepted");

    /* short_conv and delta_step: regions, extents and aliasing checked */
    CHECK(o->short_conv(be, in, 32, out, 32, W, 32, 4, 0, 32 * 3 * 4, 1) == 0, "short_conv: %s", grid_backend_error(be));
    CHECK(o->short_conv(be, in, 32, out, 32, W, 32, 4, 2, 32 * 3 * 4, 1) == -EINVAL, "misaligned ring accepted");
    CHECK(o->short_conv(be, in, 32, out, 32, W, 32, 4, 0, slot_bytes - 2, 1) == -EINVAL, "index past the slot accepted");
    CHECK(o->short_conv(be, in, 32, out, 32, W, 32, 4, 0, 40, 1) == -EINVAL, "index inside the ring accepted");
    CHECK(strstr(grid_backend_error(be), "inside the ring") != NULL, "message: %s", grid_backend_error(be));
    CHECK(o->short_conv(be, in, 32, out, 32, W, 32, 4, slot_bytes - 100, 0, 1) == -EINVAL, "ring past the slot accepted");
    CHECK(o->short_conv(be, in, 32, out, 32, W, 32, 1, 0, 32 * 3 * 4, 1) == -EINVAL, "kernel 1 accepted");
    CHECK(o->short_conv(be, in, 32, in, 40, W, 32, 4, 0, 32 * 3 * 4, 1) == -EINVAL, "in place with two strides accepted");
    CHECK(o->short_conv(be, in, 16, out, 32, W, 32, 4, 0, 32 * 3 * 4, 1) == -EINVAL, "ldi < n accepted");
    CHECK(o->short_conv(be, in, 32, small, 32, W, 32, 4, 0, 32 * 3 * 4, 1) == -EINVAL, "short output accepted");
    CHECK(o->short_conv(be, in, 32, out, 32, small, 32, 4, 0, 32 * 3 * 4, 1) == -EINVAL, "short weights accepted");
    /* delta: in [2 × (3·32 + 8)] = 208 floats > the 192 of in */
    CHECK(o->delta_step(be, in, W, W, out, 0, 4, 8, 1e-5f) == -EINVAL, "short delta input accepted");
    CHECK(o->delta_step(be, W, small, W, out, 0, 8, 4, 1e-5f) == -EINVAL, "gate of 10 < 2·8 accepted");
    CHECK(o->delta_step(be, W, W, small, out, 0, 1, 16, 1e-5f) == -EINVAL, "norm weight of 10 < 16 accepted");
    CHECK(o->delta_step(be, W, W, W, W, 0, 4, 8, 1e-5f) == -EINVAL, "delta out = in accepted");
    CHECK(o->delta_step(be, W, W, W, out, 4, 4, 8, 1e-5f) == -EINVAL, "misaligned delta state accepted");
    CHECK(o->delta_step(be, W, W, W, out, slot_bytes - 8 * 4 * 8 * 8 + 8, 4, 8, 1e-5f) == -EINVAL,
          "delta state past the slot accepted");
    CHECK(o->delta_step(be, W, W, W, out, 0, 1, 2048, 1e-5f) == -EINVAL, "delta dh 2048 accepted");
    CHECK(o->delta_step(be, W, W, W, out, 0, 4, 8, 1e-5f) == 0, "delta_step: %s", grid_backend_error(be));

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
static void harness_limits(void)
{
    char err[256];
    kb_act_args a = { NULL, 0, KB_ACT_GELU };
    lind_launch big = { 1, 1, 2048, 0 }, smem = { 1, 1, 32, 64 * 1024 }, gy = { 1, 70000, 32, 0 };
    CHECK(harness_launch(HARNESS_FORWARD, KB_ACT, &big, &a, err, sizeof err) == -EINVAL, "2048 threads accepted");
    CHECK(harness_launch(HARNESS_FORWARD, KB_ACT, &smem, &a, err, sizeof err) == -EINVAL, "64 KiB shared accepted");
    CHECK(harness_launch(HARNESS_FORWARD, KB_ACT, &gy, &a, err, sizeof err) == -EINVAL, "grid.y 70000 accepted");
    CHECK(harness_launch(HARNESS_FORWARD, KB_NKERNELS, &big, &a, err, sizeof err) == -EINVAL, "unknown kernel accepted");
    /* every kernel's geometry is within limits at the largest shapes lind allows */
    lind_launch L[] = { kb_linear_launch(65535, 64, 1024), kb_layernorm_launch(65535, 1 << 16),
                        kb_aft_launch(65535, 1 << 16), kb_shift_mix_launch(65535, 1 << 16),
                        kb_gather_rows_launch(65535, 1 << 16), kb_gated_add_launch(65535, 1 << 16),
                        kb_scale_launch((size_t)65535 << 16), kb_widen_half_launch((size_t)1 << 34),
                        kb_gemv_launch(1 << 20), kb_short_conv_launch(65535, 3 << 16),
                        kb_conv_advance_launch(65535), kb_delta_launch(65535, 1 << 12, 1024) };
    for (size_t i = 0; i < sizeof L / sizeof *L; i++)
        CHECK(L[i].block <= KB_MAX_BLOCK && L[i].smem <= KB_MAX_SMEM && L[i].gy <= KB_MAX_GRID_Y,
              "geometry %zu out of limits", i);
}

/* bf16 rounding written independently of kb_bf16(): keep 8 significant
 * bits, ties to even (rintf in the default rounding mode). */
static float round_bf16(float f)
{
    int e;
    float m = frexpf(f, &e);
    return ldexpf(rintf(ldexpf(m, 8)), e - 8);
}

/* y = round(x)·round(W)ᵀ (+ bias, + y) in the test, by plain loops in double. */
static void ref_bf16(const float *x, int ldx, const float *W, const float *bias, float *y, int ldy, int B, int N,
                     int K, int acc)
{
    for (int b = 0; b < B; b++)
        for (int n = 0; n < N; n++) {
            double s = (acc ? y[(size_t)b * ldy + n] : 0) + (bias ? bias[n] : 0);
            for (int k = 0; k < K; k++)
                s += (double)round_bf16(x[(size_t)b * ldx + k]) * (double)round_bf16(W[(size_t)n * K + k]);
            y[(size_t)b * ldy + n] = (float)s;
        }
}

/* The bf16 GEMM path: exactly the product of the bf16-rounded operands
 * (fp32 sums), through offsets and strides, with bias and accumulation, and
 * the weights' bf16 copy refreshed when the weights are uploaded again. */
static void bf16_matmul(void)
{
    backend *be;
    char err[256];
    if (backend_harness_new(HARNESS_REVERSE, NULL, &be, err, sizeof err) < 0) { CHECK(0, "%s", err); return; }
    CHECK(grid_backend_set_weights(be, "bf16", err, sizeof err) == 0, "%s", err);
    CHECK(grid_backend_set_weights(be, "fp16", err, sizeof err) == -EINVAL && strstr(err, "fp16"),
          "fp16 accepted or unclear: %s", err);
    const backend_ops *o = be->ops;
    enum { B = 5, N = 24, K = 70, LDX = 2 * K + 3, LDY = N + 9 };
    size_t xo = K + 1, yo = 4;
    float x[B * LDX + 8], W[N * K], bias[N], y0[B * LDY + 8], got[B * LDY + 8], want[B * LDY + 8];
    fill(x, sizeof x / sizeof *x, 3, 0);
    fill(W, N * K, 1, 0);
    fill(bias, N, 1, 0);
    fill(y0, sizeof y0 / sizeof *y0, 1, 0);
    backend_buf *bx, *bW, *bb, *by;
    if (o->buf_new(be, sizeof x / sizeof *x, &bx) || o->buf_new(be, N * K, &bW) || o->buf_new(be, N, &bb) ||
        o->buf_new(be, sizeof y0 / sizeof *y0, &by)) { CHECK(0, "buf_new"); backend_free(be); return; }
    CHECK(o->buf_upload(be, bx, 0, x, sizeof x / sizeof *x) == 0 && o->buf_upload(be, bb, 0, bias, N) == 0, "upload");
    for (int pass = 0; pass < 3; pass++) {
        if (pass == 2) fill(W, N * K, 1, 0);   /* new weights: the bf16 copy must follow */
        if (pass != 1) CHECK(o->buf_upload(be, bW, 0, W, N * K) == 0, "upload W");
        int acc = pass == 1;
        const backend_buf *bias_buf = pass == 0 ? NULL : bb;
        CHECK(o->buf_upload(be, by, 0, y0, sizeof y0 / sizeof *y0) == 0, "upload y");
        /* y[B × N] (+)= x[B × K] · W[N × K]ᵀ (+ b), blocks of wider rows */
        CHECK(o->matmul(be, bmview(by, yo, LDY), bview(bx, xo, LDX), bW, bias_buf, B, N, K, acc) == 0, "matmul: %s",
              grid_backend_error(be));
        CHECK(o->buf_download(be, by, 0, got, sizeof got / sizeof *got) == 0, "download");
        memcpy(want, y0, sizeof want);
        ref_bf16(x + xo, LDX, W, pass == 0 ? NULL : bias, want + yo, LDY, B, N, K, acc);
        double e = rel_err_f(got, want, sizeof got / sizeof *got);
        CHECK(e <= 1e-6, "pass %d: relative error %.3g against the bf16 reference", pass, e);
        /* and it is a different function from the fp32 one */
        float full[B * LDY + 8];
        memcpy(full, y0, sizeof full);
        for (int b = 0; b < B; b++)
            for (int n = 0; n < N; n++) {
                double t = (acc ? full[(size_t)b * LDY + yo + n] : 0) + (pass ? bias[n] : 0);
                for (int k = 0; k < K; k++) t += (double)x[(size_t)b * LDX + xo + k] * W[(size_t)n * K + k];
                full[(size_t)b * LDY + yo + n] = (float)t;
            }
        double d = rel_err_f(got, full, sizeof got / sizeof *got);
        CHECK(d > 1e-4 && d < 3e-2, "pass %d: bf16 vs fp32 differ by %.3g", pass, d);
        if (pass == 2) printf("NOTE bf16_matmul: bf16 against fp32 products: %.3g relative\n", d);
    }
    /* a weight made by weight_new in bf16 mode keeps only its bf16 copy:
     * the same products, but it cannot be read back or used by fp32 GEMMs */
    backend_buf *wW = NULL;
    CHECK(o->weight_new(be, N, K, W, &wW) == 0, "weight_new: %s", grid_backend_error(be));
    if (wW) {
        CHECK(o->buf_upload(be, by, 0, y0, sizeof y0 / sizeof *y0) == 0, "upload y");
        /* y[B × N] = x[B × K] · W[N × K]ᵀ */
        CHECK(o->matmul(be, bmview(by, yo, LDY), bview(bx, xo, LDX), wW, NULL, B, N, K, 0) == 0, "matmul: %s",
              grid_backend_error(be));
        CHECK(o->buf_download(be, by, 0, got, sizeof got / sizeof *got) == 0, "download");
        memcpy(want, y0, sizeof want);
        ref_bf16(x + xo, LDX, W, NULL, want + yo, LDY, B, N, K, 0);
        double e = rel_err_f(got, want, sizeof got / sizeof *got);
        CHECK(e <= 1e-6, "weight_new: relative error %.3g against the bf16 reference", e);
        float back[4];
        CHECK(o->buf_download(be, wW, 0, back, 4) == -EINVAL, "a bf16-only weight was read back");
        CHECK(o->buf_upload(be, wW, 0, back, 4) == -EINVAL, "a bf16-only weight was written");
        CHECK(grid_backend_set_weights(be, "fp32", err, sizeof err) == 0, "%s", err);
        CHECK(o->matmul(be, bmview(by, yo, LDY), bview(bx, xo, LDX), wW, NULL, B, N, K, 0) == -EINVAL,
              "an fp32 GEMM used a bf16-only weight");
        o->buf_free(be, wW);
    }
    o->buf_free(be, bx); o->buf_free(be, bW); o->buf_free(be, bb); o->buf_free(be, by);
    backend_free(be);
}

/* The device's half → fp32 widening equals the host's (kernels/half.h) for
 * every one of the 65536 fp16 and bf16 bit patterns (NaNs as NaNs). */
static void half_widening(void)
{
    int bad[2] = { 0, 0 };
    for (uint32_t h = 0; h < 65536; h++) {
        float dev[2] = { kb_f16_to_float((uint16_t)h), kb_bf16_to_float((uint16_t)h) };
        float host[2] = { lind_f16_to_f32((uint16_t)h), lind_bf16_to_f32((uint16_t)h) };
        for (int k = 0; k < 2; k++)
            if (isnan(host[k]) ? !isnan(dev[k]) : memcmp(&dev[k], &host[k], sizeof(float))) bad[k]++;
    }
    CHECK(bad[0] == 0 && bad[1] == 0, "%d fp16 and %d bf16 patterns widen differently", bad[0], bad[1]);
}

/* Half weights through the GPU backend. Over more than KB_GEMV_MAXB rows in
 * fp32 mode (widened, then the fp32 GEMM) and in bf16 mode for a bf16
 * weight: exactly the products of the widened fp32 copy made by weight_new,
 * bit for bit. Over up to KB_GEMV_MAXB rows in fp32 mode (kb_gemv, its
 * own summation order, for half and fp32 weights alike with cuda_gemv —
 * bit-identical between them): within 10⁻⁶ of a double-precision reference of the
 * widened values, with accumulate, and bit-identical row by row whatever the
 * number of rows (batch-invariant). fp16 weights in bf16 mode are rounded
 * twice (fp16 → bf16): within bf16 accuracy. */
static void half_matmul(void)
{
    backend *be;
    char err[256];
    backend_opts bo;
    backend_opts_default(&bo);
    bo.cuda_gemv = 1;   /* the fp32 weight's few-row products by kb_gemv too */
    if (backend_harness_new(HARNESS_REVERSE, &bo, &be, err, sizeof err) < 0) { CHECK(0, "%s", err); return; }
    const backend_ops *o = be->ops;
    enum { BMAX = 12, N = 44, K = 80, LDY = N + 3 };
    static float x[BMAX * K], Wf[N * K], y0[BMAX * LDY], y1[BMAX * LDY], y2[BMAX * LDY], wide[N * K];
    static uint16_t Wh[N * K];
    fill(x, BMAX * K, 2, 0);
    fill(Wf, N * K, 1, 0);
    fill(y0, BMAX * LDY, 1, 0);
    backend_buf *bx, *by;
    if (o->buf_new(be, BMAX * K, &bx) || o->buf_new(be, BMAX * LDY, &by)) { CHECK(0, "buf_new"); backend_free(be); return; }
    CHECK(o->buf_upload(be, bx, 0, x, BMAX * K) == 0, "upload");
    static const int rows[] = { 1, 4, KB_GEMV_MAXB, BMAX };
    for (int mode = 0; mode < 2; mode++) {
        CHECK(grid_backend_set_weights(be, mode ? "bf16" : "fp32", err, sizeof err) == 0, "%s", err);
        for (int wt = BACKEND_W_F16; wt <= BACKEND_W_BF16; wt++) {
            const char *wn = wt == BACKEND_W_BF16 ? "bf16" : "fp16";
            for (int i = 0; i < N * K; i++) Wh[i] = wt == BACKEND_W_BF16 ? lind_f32_to_bf16(Wf[i]) : lind_f32_to_f16(Wf[i]);
            for (int i = 0; i < N * K; i++) wide[i] = wt == BACKEND_W_BF16 ? lind_bf16_to_f32(Wh[i]) : lind_f16_to_f32(Wh[i]);
            backend_buf *hw = NULL, *fw = NULL;
            CHECK(o->weight_new_half(be, N, K, Wh, wt, &hw) == 0 && o->weight_new(be, N, K, wide, &fw) == 0,
                  "weights: %s", grid_backend_error(be));
            if (!hw || !fw) { o->buf_free(be, hw); o->buf_free(be, fw); continue; }
            float first[LDY];   /* row 0 of the one-row product: every B must give it again */
            for (size_t ri = 0; ri < sizeof rows / sizeof *rows; ri++)
                for (int acc = 0; acc < 2; acc++) {
                    int B = rows[ri];
                    /* y[B × N] (+)= x[B × K] · W[N × K]ᵀ, W half then fp32 */
                    CHECK(o->buf_upload(be, by, 0, y0, BMAX * LDY) == 0 &&
                          o->matmul(be, bmview(by, 0, LDY), bview(bx, 0, K), hw, NULL, B, N, K, acc) == 0 &&
                          o->buf_download(be, by, 0, y1, BMAX * LDY) == 0, "half matmul: %s", grid_backend_error(be));
                    CHECK(o->buf_upload(be, by, 0, y0, BMAX * LDY) == 0 &&
                          o->matmul(be, bmview(by, 0, LDY), bview(bx, 0, K), fw, NULL, B, N, K, acc) == 0 &&
                          o->buf_download(be, by, 0, y2, BMAX * LDY) == 0, "fp32 matmul: %s", grid_backend_error(be));
                    CHECK(!memcmp(y1 + B * LDY, y0 + B * LDY, (BMAX - B) * LDY * sizeof(float)),
                          "%s weights, B=%d: rows past the batch were written", wn, B);
                    for (int b = 0; b < B; b++)
                        CHECK(!memcmp(y1 + b * LDY + N, y0 + b * LDY + N, (LDY - N) * sizeof(float)),
                              "%s weights, B=%d: columns past N were written", wn, B);
                    if (mode == 1 && wt == BACKEND_W_F16) {
                        double e = rel_err_f(y1, y2, B * LDY);
                        CHECK(e < 3e-2, "fp16 weights in bf16 mode, B=%d: %.3g", B, e);
                    } else if (mode == 1 || B > KB_GEMV_MAXB) {
                        CHECK(!memcmp(y1, y2, sizeof y1), "%s weights, %s GEMMs, B=%d: differ from the widened fp32 "
                              "weight", wn, mode ? "bf16" : "fp32", B);
                    } else {
                        double worst = 0, scale = 0;
                        for (int b = 0; b < B; b++)
                            for (int n = 0; n < N; n++) {
                                double r = acc ? y0[b * LDY + n] : 0;
                                for (int k = 0; k < K; k++) r += (double)x[b * K + k] * wide[n * K + k];
                                double e = fabs(y1[b * LDY + n] - r);
                                if (!(e <= worst)) worst = e;
                                if (fabs(r) > scale) scale = fabs(r);
                            }
                        CHECK(worst <= 1e-6 * scale, "%s weights, B=%d accumulate=%d: error %.3g against the "
                              "reference (scale %.3g)", wn, B, acc, worst, scale);
                        /* fp32 weights of the same values take kb_gemv too: the same sums */
                        CHECK(!memcmp(y1, y2, sizeof y1), "%s weights, B=%d: the half and fp32 weights' few-row "
                              "products differ", wn, B);
                        if (B == 1 && !acc) memcpy(first, y1, sizeof first);
                        else if (!acc)
                            CHECK(!memcmp(first, y1, N * sizeof(float)), "%s weights: row 0 at B=%d differs from "
                                  "B=1 (not batch-invariant)", wn, B);
                    }
                }
            o->buf_free(be, hw);
            o->buf_free(be, fw);
        }
    }
    o->buf_free(be, bx);
    o->buf_free(be, by);
    backend_free(be);
}

/* Whole models with cuda_weights bf16 stay close to the fp32 CPU backend;
 * an unknown value is refused by name, given as the option or read from
 * LIND_CUDA_WEIGHTS by an entry point. */
static void bf16_models(void)
{
    char err[256];
    backend *be = NULL;
    backend_opts bo;
    backend_opts_default(&bo);
    bo.cuda_weights = "int4";
    CHECK(backend_harness_new(HARNESS_FORWARD, &bo, &be, err, sizeof err) == -EINVAL && be == NULL && strstr(err, "int4"),
          "cuda_weights int4: %s", err);
    setenv("LIND_CUDA_WEIGHTS", "int4", 1);
    int rc = backend_opts_from_env(&bo, err, sizeof err);
    CHECK(rc == 0 && bo.cuda_weights && !strcmp(bo.cuda_weights, "int4"), "from_env: %d %s", rc, err);
    if (rc == 0)
        CHECK(backend_new("harness", &bo, &be, err, sizeof err) == -EINVAL && be == NULL && strstr(err, "int4"),
              "LIND_CUDA_WEIGHTS=int4: %s", err);
    unsetenv("LIND_CUDA_WEIGHTS");
    models_random_bf16();
}

/* The RWKV-4-shaped models with kb_gemv on for fp32 weights (cuda_gemv):
 * steps of 7 sessions take it, prefill's 45 rows the GEMM; both within the
 * logits tolerance of the CPU backend and of each other. */
static void models_gemv(void) { models_rwkv4(); }

int main(void)
{
    char err[256];
    if (backend_opts_from_env(&cmp_be, err, sizeof err) < 0) {   /* LIND_CPU_THREADS, LIND_CUDA_WEIGHTS, ... */
        printf("FAIL environment: %s\n", err);
        return 1;
    }
    /* fp32 results may differ from the CPU backend's only by summation order
     * (layer norm sums in double here, in float there); fp64 states run the
     * same per-element code on the same inputs. */
    cmp_run_all("harness_fwd", ctor_forward, 1e-5, 1e-12);
    cmp_run_all("harness_rev", ctor_reverse, 1e-5, 1e-12);
    /* whole models through recurrent/model.c on the "harness" backend */
    cmp_model_backend = "harness";
    /* With every fp32 product in the GEMM (cblas here; cuda_gemv off, the
     * default) prefill equals its own steps bit for bit; kb_gemv sums the
     * few-row products in its own order, so with it on (models_gemv) the
     * models are compared within tolerance. */
    cmp_batch_invariant = 1;
    RUN(models_random);
    RUN(models_rwkv4);
    RUN(models_delta);
    RUN(graphs_host_copy);
    RUN(models_graphs);
    cmp_be.cuda_gemv = 1;
    cmp_batch_invariant = 0;
    RUN(models_gemv);
    cmp_be.cuda_gemv = 0;
    cmp_batch_invariant = 1;
    RUN(half_widening);
    RUN(half_matmul);
    RUN(bf16_matmul);
    RUN(bf16_models);
    RUN(refusals);
    RUN(harness_limits);
    return check_exit();
}
