/* kernels/backend.h — the compute backend interface.
 *
 * The model step (recurrent/model.c) is written once against this interface;
 * kernels/cpu/ implements it with OpenBLAS + vectorized C, kernels/cuda/ with
 * cuBLAS + CUDA kernels. Per-element math shared by both lives in
 * kernels/mixer_math.h.
 *
 * Memory model
 *   - backend_buf: an opaque device buffer of fp32 values (host memory on
 *     the CPU backend). Ops address a buffer by (buf, float offset, row
 *     stride "ld" in floats) so that e.g. q, k and v can be written as
 *     column blocks of one [B × 3N] buffer.
 *   - The slot pool: the backend owns one contiguous array of per-session
 *     recurrent states ("slots"), each `slot_bytes` long (the model's
 *     model_state_bytes()). A slot's bytes are opaque to the backend except
 *     through the mixer ops below, which receive the byte offset of their
 *     region inside a slot. fp64 regions always sit at 8-byte-aligned
 *     offsets (the model lays them out first); the pool's slot stride may be
 *     padded beyond slot_bytes, only slot_bytes are ever read or written.
 *   - A step's batch: begin_step() hands the backend the slots and tokens of
 *     the B sessions stepping together (host arrays; a device backend uploads
 *     them once per step). Every op that touches slots or tokens refers to
 *     that current batch: row b of every activation buffer is session
 *     slots[b].
 *
 * All ops are enqueued in order; buf_download() and slot_read() are
 * synchronous (they see every op enqueued before them). Ops return 0 or a
 * negative errno-style code; a device backend may report an asynchronous
 * failure from a later op or from a download.
 *
 * A backend is used by one thread at a time. */
#ifndef LIND_KERNELS_BACKEND_H
#define LIND_KERNELS_BACKEND_H

#include <stddef.h>
#include <stdint.h>

typedef struct backend backend;
typedef struct backend_buf backend_buf;   /* defined by each backend */

/* matmul flags */
enum { BACKEND_MM_ACCUMULATE = 1, BACKEND_MM_GELU = 2 };
/* more matmul flags: RWKV's channel-mix activations (at most one activation
 * flag — GELU, RELU2, SIGMOID — per call) */
enum { BACKEND_MM_RELU2 = 4, BACKEND_MM_SIGMOID = 8 };
/* weight_new_half's wtype: the 16-bit format of the host data */
enum { BACKEND_W_F16 = 1, BACKEND_W_BF16 = 2 };

typedef struct backend_ops {
    const char *name;                     /* "cpu", "cuda" */
    void (*free)(backend *be);            /* frees the pool and the backend; buffers must be freed first */
    const char *(*device_name)(backend *be);  /* e.g. CPU model string, GPU name */

    /* ---- buffers ---------------------------------------------------- */
    /* New buffer of n floats (contents undefined). 0 or -ENOMEM. */
    int  (*buf_new)(backend *be, size_t n, backend_buf **out);
    void (*buf_free)(backend *be, backend_buf *b);   /* NULL is a no-op */
    /* Copy n floats host→device at float offset off, or device→host. */
    int  (*buf_upload)(backend *be, backend_buf *b, size_t off, const float *src, size_t n);
    int  (*buf_download)(backend *be, const backend_buf *b, size_t off, float *dst, size_t n);

    /* A weight W [N × K] (row-major host data) for use as matmul's W. The
     * backend may keep it in another layout (the CPU backend stores Wᵀ, which
     * OpenBLAS multiplies faster at small batch); such a buffer is only ever
     * passed to matmul as W and to buf_free. Optional: NULL means buf_new +
     * buf_upload (see backend_weight_new below). */
    int  (*weight_new)(backend *be, int N, int K, const float *W, backend_buf **out);

    /* ---- slot pool ---------------------------------------------------- */
    /* Make room for at least n slots of slot_bytes each, keeping the contents
     * of existing slots (slot_bytes must not change after the first call).
     * New slots are zeroed. */
    int  (*slots_reserve)(backend *be, int n, size_t slot_bytes);
    int  (*slot_zero)(backend *be, int slot);
    int  (*slot_read)(backend *be, int slot, void *dst);        /* slot_bytes */
    int  (*slot_write)(backend *be, int slot, const void *src); /* slot_bytes */

    /* ---- one step --------------------------------------------------------- */
    /* Set the current batch: row b is slot slots[b] consuming tokens[b]
     * (0..255). Slots are distinct and < the reserved count (the caller
     * checked). The arrays are copied; B ≤ the capacity passed to any
     * activation buffer is the caller's business. */
    int (*begin_step)(backend *be, const int *slots, const int *tokens, int B);

    /* x[b, :d] = E[tokens[b], :d]  (E is [256 × d]). */
    int (*embed)(backend *be, const backend_buf *E, backend_buf *x, int d);

    /* y[b, :] = LN(x[b, :]) * w + bias over d columns, eps inside the sqrt.
     * x and y are [B × d] with ld = d; y may equal x. */
    int (*layernorm)(backend *be, const backend_buf *x, backend_buf *y,
                     const backend_buf *w, const backend_buf *bias, int d, float eps);

    /* One GEMM over the batch:
     *   y[b, yo + n] = (accumulate ? y[b, yo + n] : 0) + bias[n] + Σ_k x[b, xo + k] · W[n, k]
     * for b < B, n < N, k < K; x has row stride ldx, y row stride ldy (floats),
     * W is [N × K] row-major at offset 0 (or made by weight_new), bias
     * (length N) may be NULL. flags:
     *   BACKEND_MM_ACCUMULATE  add into y: how residual adds are done (x ← x + Wo·o)
     *   BACKEND_MM_GELU        y = GELU(bias + Σ) (lind_gelu_erf per element):
     *                          the feed-forward's first product with its
     *                          activation, in one pass; needs ldy == N and no
     *                          ACCUMULATE (-EINVAL otherwise).
     *   BACKEND_MM_RELU2       y = max(0, bias + Σ)² (lind_relu2): RWKV's
     *                          channel-mix key; the same conditions as GELU.
     *   BACKEND_MM_SIGMOID     y = σ(bias + Σ) (lind_sigmoid): RWKV's
     *                          receptance gate; the same conditions as GELU.
     * At most one of GELU, RELU2, SIGMOID. W may also come from
     * weight_new_half; the activations x and the result y stay fp32. */
    int (*matmul)(backend *be, const backend_buf *x, size_t xo, int ldx,
                  const backend_buf *W, const backend_buf *bias,
                  backend_buf *y, size_t yo, int ldy, int B, int N, int K, int flags);

    /* Token shift, for each b < B with prev = the fp32 vector of d floats at
     * byte offset shift_off inside slot slots[b]:
     *   out[b, p·d + c] = prev[c] + mu[p·d + c] · (h[b, c] − prev[c])   p < nmix
     * then prev ← h[b, :]. h is [B × d], out is [B × nmix·d], mu holds nmix·d.
     * (= μ⊙h_t + (1−μ)⊙h_{t−1}; a zeroed slot gives h_{−1} = 0.) */
    int (*shift_mix)(backend *be, const backend_buf *h, const backend_buf *mu,
                     backend_buf *out, size_t shift_off, int d, int nmix);

    /* Linear-attention step for every b < B and head h < H (dh = d_head):
     *   in  = [B × 3·H·dh]: q at column 0, k at H·dh, v at 2·H·dh (raw, before φ)
     *   state in slot slots[b] at byte offset state_off: S as double
     *   [H][dh (k index i)][dh (v index j)], then z as double [H][dh]
     *   gamma: H floats, or NULL for γ = 1
     *   out[b, h·dh + j] = o_h[j] (float), out is [B × H·dh]
     * with S ← γS + φ(k)vᵀ, z ← γz + φ(k), o = φ(q)ᵀS / (φ(q)ᵀz + eps),
     * per element exactly as kernels/mixer_math.h (lind_lin_*). */
    int (*linear_step)(backend *be, const backend_buf *in, const backend_buf *gamma,
                       backend_buf *out, size_t state_off, int H, int dh, float eps);

    /* AFT (RWKV-4 form) step for every b < B and channel c < d:
     *   in  = [B × 3·d]: r at column 0, k at d, v at 2·d
     *   state in slot slots[b] at byte offset state_off: num, den, max, each
     *   double[d], consecutive
     *   w (decay, = exp(time_decay) ≥ 0) and u (bonus): d floats each, or
     *   NULL for 0 (AFT-simple)
     *   out[b, c] = σ(r) · wkv, out is [B × d]
     * per element exactly as lind_aft_channel() in kernels/mixer_math.h. */
    int (*aft_step)(backend *be, const backend_buf *in, const backend_buf *w,
                    const backend_buf *u, backend_buf *out, size_t state_off, int d);

    /* W [N × K] row-major half-precision host data (IEEE fp16 or bfloat16
     * bits, wtype BACKEND_W_F16 / BACKEND_W_BF16) kept in half precision by
     * the backend; otherwise exactly as weight_new. matmul with such a W
     * gives the same result as with the fp32 weight holding the widened
     * (exact) values. -EINVAL for an unknown wtype. Optional (NULL: the
     * model widens to fp32 and calls weight_new). */
    int (*weight_new_half)(backend *be, int N, int K, const uint16_t *W, int wtype, backend_buf **out);
} backend_ops;

/* Every backend struct starts with this. */
struct backend {
    const backend_ops *ops;
};

/* The matmul flags contract, checked the same way by every backend: known
 * flags only, at most one activation (GELU, RELU2, SIGMOID), and an
 * activation only on contiguous rows without ACCUMULATE. */
static inline int backend_mm_flags_ok(int flags, int ldy, int N) {
    const int act = flags & (BACKEND_MM_GELU | BACKEND_MM_RELU2 | BACKEND_MM_SIGMOID);
    if (flags & ~(BACKEND_MM_ACCUMULATE | BACKEND_MM_GELU | BACKEND_MM_RELU2 | BACKEND_MM_SIGMOID)) return 0;
    if (act & (act - 1)) return 0;   /* more than one activation */
    return !act || (!(flags & BACKEND_MM_ACCUMULATE) && ldy == N);
}

/* Upload a matmul weight through weight_new when the backend has it. */
static inline int backend_weight_new(backend *be, int N, int K, const float *W, backend_buf **out) {
    if (be->ops->weight_new) return be->ops->weight_new(be, N, K, W, out);
    int rc = be->ops->buf_new(be, (size_t)N * (size_t)K, out);
    if (rc == 0 && (rc = be->ops->buf_upload(be, *out, 0, W, (size_t)N * (size_t)K)) < 0) {
        be->ops->buf_free(be, *out);
        *out = NULL;
    }
    return rc;
}

/* Create a backend by name: "cpu", "cuda", or "auto" (NULL = "auto": CUDA
 * when built with it and a device is usable, else CPU). On failure returns
 * <0 and fills err (e.g. "backend cuda: not built with CUDA support"). */
int  backend_new(const char *name, backend **out, char *err, size_t errlen);
void backend_free(backend *be);   /* NULL is a no-op */

/* Constructors of the individual backends (kernels/cpu/, kernels/cuda/). */
int backend_cpu_new(backend **out, char *err, size_t errlen);
int backend_cuda_new(backend **out, char *err, size_t errlen);

#endif
