/* recurrent/kind.c — the upload helpers every kind uses (recurrent/kind.h). */
#include "recurrent/kind.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/half.h"

static float widen(uint16_t h, int wtype) { return wtype == BACKEND_W_BF16 ? lind_bf16_to_f32(h) : lind_f16_to_f32(h); }
static uint16_t narrow(float f, int wtype) { return wtype == BACKEND_W_BF16 ? lind_f32_to_bf16(f) : lind_f32_to_f16(f); }

/* Half weights: kept half when the backend can, else widened. */
static int upload_half(kind_ctx *ctx, const uint16_t *h, int wtype, int N, int K, float scale, backend_buf **out)
{
    backend *be = ctx->be;
    size_t n = (size_t)N * (size_t)K;
    int rc;
    if (be->ops->weight_new_half) {
        uint16_t *tmp = NULL;
        if (scale != 1.0f) {
            if (!(tmp = malloc(n * sizeof *tmp))) return -ENOMEM;
            for (size_t i = 0; i < n; i++) tmp[i] = narrow(widen(h[i], wtype) * scale, wtype);
        }
        rc = be->ops->weight_new_half(be, N, K, tmp ? tmp : h, wtype, out);
        free(tmp);
        if (rc == 0) ctx->weight_bytes += 2 * n;
        return rc;
    }
    float *f = malloc(n * sizeof *f);
    if (!f) return -ENOMEM;
    for (size_t i = 0; i < n; i++) f[i] = widen(h[i], wtype) * scale;
    rc = backend_weight_new(be, N, K, f, out);
    free(f);
    if (rc == 0) ctx->weight_bytes += 4 * n;
    return rc;
}

/* fp32 values quantized by the backend (BACKEND_W_Q8 / Q4). */
static int upload_quant(kind_ctx *ctx, const float *f, int qtype, int N, int K, const char *name, backend_buf **out)
{
    backend *be = ctx->be;
    const char *fmt = qtype == BACKEND_W_Q8 ? "q8" : "q4";
    if (!be->ops->weight_new_quant) {
        snprintf(ctx->err, sizeof ctx->err, "backend %s has no %s weights (quantized weights are the CPU backend's)",
                 be->ops->name, fmt);
        return -ENOTSUP;
    }
    char berr[200] = "";
    int rc = be->ops->weight_new_quant(be, N, K, f, qtype, out, berr, sizeof berr);
    if (rc < 0) {
        snprintf(ctx->err, sizeof ctx->err, "tensor '%s' as %s: %s", name ? name : "?", fmt,
                 berr[0] ? berr : "out of memory");
        return rc;
    }
    /* the bytes a product streams: codes and fp16 scales (Q8 34, Q4 18 per block of 32) */
    ctx->weight_bytes += (size_t)N * (size_t)((K + 31) / 32) * (qtype == BACKEND_W_Q8 ? 34u : 18u);
    return 0;
}

int kind_matrix(kind_ctx *ctx, const kind_weight *w, int N, int K, float scale, backend_buf **out)
{
    size_t n = (size_t)N * (size_t)K;
    int rc;
    if (w->quant && w->f32) {
        float *f = NULL;
        if (scale != 1.0f) {
            if (!(f = malloc(n * sizeof *f))) return -ENOMEM;
            for (size_t i = 0; i < n; i++) f[i] = w->f32[i] * scale;
        }
        rc = upload_quant(ctx, f ? f : w->f32, w->quant, N, K, w->name, out);
        free(f);
    } else if (w->half) {
        rc = upload_half(ctx, w->half, w->wtype, N, K, scale, out);
    } else if (scale != 1.0f) {
        float *f = malloc(n * sizeof *f);
        if (!f) return -ENOMEM;
        for (size_t i = 0; i < n; i++) f[i] = w->f32[i] * scale;
        rc = backend_weight_new(ctx->be, N, K, f, out);
        free(f);
        if (rc == 0) ctx->weight_bytes += 4 * n;
    } else {
        rc = backend_weight_new(ctx->be, N, K, w->f32, out);
        if (rc == 0) ctx->weight_bytes += 4 * n;
    }
    if (rc == 0) ctx->macs += n;
    return rc;
}

int kind_matrix3(kind_ctx *ctx, const kind_weight *const w[3], int n, int d, backend_buf **out)
{
    size_t wn = (size_t)n * (size_t)d;
    int half = w[0]->half && w[1]->half && w[2]->half && w[0]->wtype == w[1]->wtype && w[1]->wtype == w[2]->wtype;
    int quant = w[0]->quant && w[0]->quant == w[1]->quant && w[1]->quant == w[2]->quant;
    int rc;
    if (quant) {
        float *cat = malloc(3 * wn * sizeof *cat);
        if (!cat) return -ENOMEM;
        for (int i = 0; i < 3; i++) memcpy(cat + (size_t)i * wn, w[i]->f32, wn * sizeof *cat);
        rc = upload_quant(ctx, cat, w[0]->quant, 3 * n, d, w[0]->name, out);
        free(cat);
    } else if (half) {
        uint16_t *cat = malloc(3 * wn * sizeof *cat);
        if (!cat) return -ENOMEM;
        for (int i = 0; i < 3; i++) memcpy(cat + (size_t)i * wn, w[i]->half, wn * sizeof *cat);
        rc = upload_half(ctx, cat, w[0]->wtype, 3 * n, d, 1.0f, out);
        free(cat);
    } else {
        float *cat = malloc(3 * wn * sizeof *cat);
        if (!cat) return -ENOMEM;
        for (int i = 0; i < 3; i++) {
            if (w[i]->f32) memcpy(cat + (size_t)i * wn, w[i]->f32, wn * sizeof *cat);
            else for (size_t k = 0; k < wn; k++) cat[(size_t)i * wn + k] = widen(w[i]->half[k], w[i]->wtype);
        }
        rc = backend_weight_new(ctx->be, 3 * n, d, cat, out);
        free(cat);
        if (rc == 0) ctx->weight_bytes += 12 * wn;
    }
    if (rc == 0) ctx->macs += 3 * wn;
    return rc;
}

int kind_vector(kind_ctx *ctx, const float *v, size_t n, backend_buf **out)
{
    backend *be = ctx->be;
    int rc = be->ops->buf_new(be, n, out);
    if (rc == 0 && (rc = be->ops->buf_upload(be, *out, 0, v, n)) < 0) {
        be->ops->buf_free(be, *out);
        *out = NULL;
    }
    return rc;
}

int kind_require_ops(const kind_ctx *ctx, const char *what, const backend_op *ops, int n, char *err, size_t errlen)
{
    char who[128];
    snprintf(who, sizeof who, "layer %d: %s", ctx->layer, what);
    return backend_require(ctx->be, ops, n, who, err, errlen);
}
