/* kernels/backend.h — the compute backend interface.
 *
 * The model step (recurrent/model.c) is written once against this interface;
 * kernels/cpu/ implements it with OpenBLAS + vectorized C, kernels/cuda/ with
 * cuBLAS + CUDA kernels. Per-element math shared by both lives in
 * kernels/mixer_math.h.
 *
 * The ops the layer kinds add (shift_mix, linear_step, ..., mamba2_step,
 * rmsnorm) are one list, BACKEND_KIND_OPS below, each with its contract as a
 * backend_<op>_fn typedef. Each backend implements them one file per op
 * family (kernels/cpu/ops_<family>.c; kernels/cuda/kb_<family>.h for the
 * kernel bodies and kernels/cuda/grid_<family>.c for the host side); a kind
 * asks backend_supports() for the ones it needs. Adding a kind with a new
 * op: docs/KINDS.md, "What a new kind touches".
 *
 * Memory model
 *   - backend_buf: an opaque device buffer of fp32 values (host memory on
 *     the CPU backend). Ops address a buffer by (buf, float offset, row
 *     stride "ld" in floats) so that e.g. q, k and v can be written as
 *     column blocks of one [B × 3N] buffer; matmul takes the three together
 *     as one operand, a view (backend_view, below).
 *   - The slot pool: the backend owns one contiguous array of per-session
 *     recurrent states ("slots"), each `slot_bytes` long (the model's
 *     model_state_bytes()). A slot's bytes are opaque to the backend except
 *     through the mixer ops below, which receive the byte offset of their
 *     region inside a slot. fp64 regions always sit at 8-byte-aligned
 *     offsets (the model lays them out first); the pool's slot stride may be
 *     padded beyond slot_bytes, only slot_bytes are ever read or written.
 *   - A step's batch: begin_step() hands the backend the slots and tokens of
 *     the R rows stepping together (host arrays; a device backend uploads
 *     them once per step). Every op that touches slots or tokens refers to
 *     that current batch: row r of every activation buffer is a token of
 *     session slots[r]. Rows of one slot are consecutive — a *run* — and are
 *     that session's next tokens in order (batched prefill: a prompt chunk of
 *     T tokens is a run of T rows). Ops that read or write slot state
 *     (shift_mix, linear_step, aft_step, ...) process a run's rows in row
 *     order, each row seeing the state the previous row left, so a run gives
 *     bit for bit what T one-row steps would; different runs are independent.
 *     Row-wise ops (matmul, layernorm, ...) never look at runs: the packed
 *     products are batch-invariant, so one R-row product equals R one-row
 *     products.
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

/* weight_new_half precisions, and weight_new_quant formats */
enum { BACKEND_W_F16 = 1, BACKEND_W_BF16 = 2, BACKEND_W_Q8 = 3, BACKEND_W_Q4 = 4 };

/* set_compute modes */
enum { BACKEND_COMPUTE_F32 = 0, BACKEND_COMPUTE_BF16 = 1 };

/* graph_begin / graph_end results */
enum { BACKEND_GRAPH_EAGER = 0, BACKEND_GRAPH_RECORDING = 1, BACKEND_GRAPH_REPLAYED = 2, BACKEND_GRAPH_RETRY = 3 };

/* matmul flags */
enum { BACKEND_MM_ACCUMULATE = 1, BACKEND_MM_GELU = 2, BACKEND_MM_RELU2 = 4, BACKEND_MM_SIGMOID = 8 };

/* A matmul operand: rows of a buffer, element [b, c] at buf[off + b·ld + c]
 * (off and ld in floats), e.g. the k block of a [B × 3N] buffer is
 * bview(qkv, N, 3 * N). backend_view is read (x), backend_mview written (y).
 * Made where they are passed:
 *     // y[B × N] = x[B × K] · W[N × K]ᵀ
 *     o->matmul(be, bmview(y, 0, N), bview(x, 0, K), W, NULL, B, N, K, 0); */
typedef struct backend_view  { const backend_buf *buf; size_t off; int ld; } backend_view;
typedef struct backend_mview { backend_buf *buf;       size_t off; int ld; } backend_mview;

static inline backend_view bview(const backend_buf *buf, size_t off, int ld)
{
    backend_view v = { buf, off, ld };
    return v;
}
static inline backend_mview bmview(backend_buf *buf, size_t off, int ld)
{
    backend_mview v = { buf, off, ld };
    return v;
}

/* ---- the kinds' ops, by family -------------------------------------------
 * The ops a layer kind adds for its state update (or, for rmsnorm, its
 * norm). Each is a backend_<op>_fn below, with its contract, and one row of
 * BACKEND_KIND_OPS: X(enum constant, backend_ops member). The list
 * generates the members of backend_ops, enum backend_op with
 * backend_supports() and backend_op_name(), and the CPU backend's table (the
 * CPU backend has every op: cpu_<op> in kernels/cpu/ops_<family>.c, declared
 * from the list in kernels/cpu/cpu.h). A device backend sets the members it
 * has (kernels/cuda/grid_backend.c: bodies in kernels/cuda/kb_<family>.h).
 * shift_mix, linear_step and aft_step every backend has; the others are
 * optional (NULL), and a kind asks backend_supports() in load() and refuses
 * to load without one, naming the op and the backend (kind_require_ops,
 * recurrent/kind.h). */

/* Token shift, for each row r in run order with prev = the fp32 vector of
 * d floats at byte offset shift_off inside slot slots[r]:
 *   out[r, p·d + c] = prev[c] + mu[p·d + c] · (h[r, c] − prev[c])   p < nmix
 * then prev ← h[r, :]. h is [R × d], out is [R × nmix·d], mu holds nmix·d.
 * (= μ⊙h_t + (1−μ)⊙h_{t−1}; a zeroed slot gives h_{−1} = 0.) */
typedef int backend_shift_mix_fn(backend *be, const backend_buf *h, const backend_buf *mu, backend_buf *out,
                                 size_t shift_off, int d, int nmix);

/* Linear-attention step for every b < B and head h < H (dh = d_head):
 *   in  = [B × 3·H·dh]: q at column 0, k at H·dh, v at 2·H·dh (raw, before φ)
 *   state in slot slots[b] at byte offset state_off: S as double
 *   [H][dh (k index i)][dh (v index j)], then z as double [H][dh]
 *   gamma: H floats, or NULL for γ = 1
 *   out[b, h·dh + j] = o_h[j] (float), out is [B × H·dh]
 * with S ← γS + φ(k)vᵀ, z ← γz + φ(k), o = φ(q)ᵀS / (φ(q)ᵀz + eps),
 * per element exactly as kernels/mixer_math.h (lind_lin_*). */
typedef int backend_linear_step_fn(backend *be, const backend_buf *in, const backend_buf *gamma, backend_buf *out,
                                   size_t state_off, int H, int dh, float eps);

/* AFT (RWKV-4 form) step for every b < B and channel c < d:
 *   in  = [B × 3·d]: r at column 0, k at d, v at 2·d
 *   state in slot slots[b] at byte offset state_off: num, den, max, each
 *   double[d] (f32 = 0) or float[d] (f32 = 1, a decaying state: the
 *   mixer decides at load), consecutive
 *   w (decay, = exp(time_decay) ≥ 0) and u (bonus): d floats each, or
 *   NULL for 0 (AFT-simple)
 *   out[b, c] = σ(r) · wkv, out is [B × d]
 * per element exactly as lind_aft_channel() in kernels/mixer_math.h
 * (lind_aft_channel_f32() for a float state). */
typedef int backend_aft_step_fn(backend *be, const backend_buf *in, const backend_buf *w, const backend_buf *u,
                                backend_buf *out, size_t state_off, int d, int f32);

/* Causal depthwise convolution of kernel K ≥ 2 over the last K inputs
 * (Mamba's and Gated DeltaNet's short convolution), for each row r in run
 * order and channel c < n:
 *   out[r, c] = act(Σ_{j<K} w[c·K + j] · x_{t−(K−1)+j}[c]),  x_t = in[r, c]
 * per element as lind_conv_channel(); act is lind_silu when silu, else
 * none. in and out have row strides ldi and ldo; out may be in (same
 * stride: each element is read before it is written). State in slot
 * slots[r]: the fp32 ring [n][K−1] at byte offset ring_off and its head
 * index p (int32, the oldest entry) at idx_off, read modulo K−1 (so any
 * bit pattern is a valid state); after a run p is stored in [0, K−1).
 * Zeroed = all-zero past. */
typedef int backend_short_conv_fn(backend *be, const backend_buf *in, int ldi, backend_buf *out, int ldo,
                                  const backend_buf *w, int n, int K, size_t ring_off, size_t idx_off, int silu);

/* Gated delta rule (Gated DeltaNet) for every row r in run order and head
 * h < H (dh = d_head, hd = H·dh):
 *   in  = [R × (3·hd + 2·H)]: q at column 0, k at hd, v at 2·hd (after
 *         the short convolution), then the β logits (H), then the gate
 *         logits (H)
 *   gate: 2·H floats, A = exp(A_log) (H) then the gate bias (H)
 *   norm_w: dh floats, the output RMS norm's weight (shared by heads)
 *   state in slot slots[r] at byte offset state_off: S as double
 *   [H][dh (k index i)][dh (v index j)]
 *   out[r, h·dh + j] = RMSNorm(o_h)[j] (float), out is [R × hd]
 * with q ← q/‖q‖·dh^−½, k ← k/‖k‖, β = σ(β logit), α =
 * exp(−A·softplus(gate logit + bias)), S ← α S (I − β k kᵀ) + β v kᵀ,
 * o = S q, RMS norm with eps inside the √; per element as
 * lind_delta_column() / lind_delta_u() / lind_delta_s() and the
 * lind_delta_* / lind_l2_* / lind_rms_* helpers of kernels/mixer_math.h. */
typedef int backend_delta_step_fn(backend *be, const backend_buf *in, const backend_buf *gate,
                                  const backend_buf *norm_w, backend_buf *out, size_t state_off, int H, int dh,
                                  float eps);

/* Sliding-window softmax attention (the window mixer) for every row r in
 * run order and head h < H (dh = d_head ≤ 256, hd = H·dh, L = w·dil):
 *   in  = [R × 3·hd]: q at column 0, k at hd, v at 2·hd (before RoPE)
 *   slopes: H floats, the ALiBi slopes (ignored when rope_base > 0)
 *   out[r, h·dh + j] (float), out is [R × hd]
 * State in slot slots[r]: at ring_off the fp32 ring of keys [L][hd] then
 * values [L][hd] (position s in row s mod L); at glob_off (when g > 0)
 * the global keys [g][hd] then values [g][hd] (position s < g in row
 * s); at pos_off the int64 absolute position t of the run's first token,
 * read as unsigned (any bits are a valid state), stored + the run's
 * length after it. Row r at position t: k (rotated by t with RoPE) and v
 * go to ring row t mod L and, when t < g, to global row t; then
 * lind_window_head() with q (rotated by t with RoPE), slope = slopes[h]
 * (0 with RoPE). RoPE when rope_base > 0 (lind_rope, dh even). */
typedef int backend_window_step_fn(backend *be, const backend_buf *in, const backend_buf *slopes, backend_buf *out,
                                   size_t ring_off, size_t glob_off, size_t pos_off, int H, int dh, int w, int dil,
                                   int g, float rope_base);

/* AFT-local / AFT-conv (the aft_local and aft_conv mixers) for every row
 * r in run order and channel c < d, with window s ≥ 2 and H heads (c is
 * in head c / (d/H)):
 *   in  = [R × 3·d]: q at column 0, k at d, v at 2·d
 *   w:   [H × s] position biases (w[h·s + j] for the key j tokens back)
 *   out[r, c] = σ(q) · lind_aftw_channel(…), out is [R × d]
 * State in slot slots[r]: at acc_off num, den, max (double [d] each); at
 * ring_off the fp32 ring of keys [d][s−1] then values [d][s−1]; at pos_off
 * the int64 count of tokens seen (read as unsigned), stored + the run's
 * length after it. Zeroed = the empty history. */
typedef int backend_aft_window_step_fn(backend *be, const backend_buf *in, const backend_buf *w, backend_buf *out,
                                       size_t acc_off, size_t ring_off, size_t pos_off, int d, int s, int H);

/* Retention (RetNet) for every row r in run order and head h < H:
 *   in  = [R × 4·hd]: q at column 0, k at hd, v at 2·hd, the gate
 *         logits g at 3·hd
 *   gamma: H floats, the decays γ
 *   norm: 2·hd floats, the group norm's weight then its bias
 *   state in slot slots[r] at byte offset state_off: S as double (f32 =
 *   0) or float (f32 = 1, every head decays: the mixer decides at load)
 *   [H][dh (k index i)][dh (v index j)]
 *   out[r, h·dh + j] = SiLU(g) · GroupNorm_h(o)[j] (float), out [R × hd]
 * with S ← γS + k vᵀ, o_j = dh^−½ Σ_i q_i S[i][j], the group norm over
 * the head's dh outputs (mean, biased variance, eps inside the √); per
 * element lind_lin_s() / lind_lin_column() (φ = identity;
 * lind_lin_column_f32() for a float S), lind_gn_rstd(),
 * lind_retention_out(). */
typedef int backend_retention_step_fn(backend *be, const backend_buf *in, const backend_buf *gamma,
                                      const backend_buf *norm, backend_buf *out, size_t state_off, int H, int dh,
                                      float eps, int f32);

/* FAVOR+ features in log form (Performer), row-wise (no slot state), for
 * every row r < R, part p (0 = queries, 1 = keys) and head h < H:
 *   out[r, p·H·m + h·m + f] = u_f  (f < m)  from x = in[r, p·hd + h·dh ...]
 * per lind_favor_head() with omega [m × dh] (shared by the heads), the
 * keys' shift ck = max_f ‖ω_f‖²/2. in and out have row strides ldi and
 * ldo and must not overlap. */
typedef int backend_favor_features_fn(backend *be, const backend_buf *in, int ldi, const backend_buf *omega,
                                      backend_buf *out, int ldo, int H, int dh, int m, float ck);

/* cosFormer step for every row r in run order and head h < H:
 *   in  = [R × 3·hd]: q at 0, k at hd, v at 2·hd (raw, before ReLU)
 *   state in slot slots[r]: at state_off P (S, z) pairs, S as double
 *   [P][H][dh][dh] then z as double [P][H][dh]; at pos_off the int64
 *   count of tokens seen (the row's position t). P = 3 when periodic,
 *   else 2.
 *   out[r, h·dh + j] = Σ_p φq_p·S_p[·][j] / (Σ_p φq_p·z_p + eps)
 * after S_p += φk_p vᵀ, z_p += φk_p, φ_p(x) = lind_cos_feature(x,
 * lind_cos_mult(lind_cos_theta(t, M, periodic), p)); the position
 * advances by the run's length. Not periodic: a run that would reach
 * position M is refused with -EOVERFLOW, a negative position with
 * -EINVAL, before any state changes (the whole call is refused).
 * Periodic: any position is valid (reduced mod 2M). */
typedef int backend_cosformer_step_fn(backend *be, const backend_buf *in, backend_buf *out, size_t state_off,
                                      size_t pos_off, int H, int dh, int M, int periodic, float eps);

/* Causal Linformer step for every row r in run order and head h < H:
 *   in  = [R × 3·hd]: q at 0, k at hd, v at 2·hd
 *   ef  = [2 × N × kp]: the keys' projection rows E (row t for position
 *         t), then the values' F
 *   state in slot slots[r]: at state_off K̄ as double [H][kp][dh], then
 *   V̄ as double [H][kp][dh]; at pos_off the int64 count of tokens seen
 *   out[r, h·dh + j] = o_j (float), out [R × hd]
 * per lind_linf_row() and a softmax over p shifted by its max (lind_exp),
 * o_j = Σ_p e^{s_p − max} V̄[p][j] / Σ_p e^{s_p − max}, the sums in p
 * order. A run that would reach position N is refused with -EOVERFLOW
 * before any state changes (the whole call is refused). */
typedef int backend_linformer_step_fn(backend *be, const backend_buf *in, const backend_buf *ef, backend_buf *out,
                                      size_t state_off, size_t pos_off, int H, int dh, int kp, int N);

/* RWKV-7 ("Goose", x070) time mixing after its products, for every row r
 * in run order and head h < H (C = H·N channels, c in head c / N):
 *   in  = [R × ldi]: r at column 0, k at C, v at 2C, the a LoRA's output
 *         (xa·A1)·A2 at 3C, the v LoRA's (xv·V1)·V2 at 4C (read when
 *         vmode = 2), the output gate g at 5C, the decay LoRA's inner
 *         activations xw·W1 (dw of them, before tanh) at 6C
 *   par = 8·C floats: w0, a0, v0, k_k, k_a, r_k ([H][N]), ln_x weight,
 *         ln_x bias
 *   w2  = [dw × C] fp32, the decay LoRA's second matrix
 *   vfirst [R × C]: the value residual, row r the first layer's v of
 *         the same token: vmode 1 writes v there, vmode 2 reads it and
 *         mixes v ← v + (vfirst − v)·σ(v0 + v LoRA), vmode 0 neither
 *   state in slot slots[r] at byte offset state_off: S as float
 *         [H][N (v index i)][N (k index j)]
 *   out[r, c] = (GroupNorm_h(o)[c] + (Σ_j r_j k_j r_k[h][j])·v_c) · g_c,
 *         out [R × C]
 * with w = exp(−e^{−½}·σ(w0 + tanh(xw·W1)·W2)), a = σ(a0 + a LoRA),
 * kk = L2-normalised k⊙k_k per head, then k ← k⊙(1 + (a−1)⊙k_a),
 * S ← S·diag(w) + (S·(−kk))(kk⊙a)ᵀ + v·kᵀ (the old S in both terms),
 * o = S·r, GroupNorm over each head's N outputs with eps gn_eps.
 * Optional (kernels/cpu/ops_rwkv7.c has it). */
typedef int backend_rwkv7_step_fn(backend *be, const backend_buf *in, int ldi, const backend_buf *par,
                                  const backend_buf *w2, int dw, backend_buf *vfirst, int vmode, backend_buf *out,
                                  size_t state_off, int H, int N, float gn_eps);

/* Mamba-2's selective state space step after its products and the
 * short convolution, for every row r in run order and head h < H
 * (P = d_head channels per head, I = H·P, N = d_state, G = n_groups,
 * head h reads group g = h / (H/G); CD = I + 2·G·N):
 *   in  = [R × ldi]: the convolution's outputs before bias and
 *         activation, CD of them at column 0 (x [I], then B [G·N], then
 *         C [G·N]), then the gate z [I] at CD, then the raw dt [H] at
 *         CD + I
 *   par = CD + 3·H floats: the conv bias (zeros when the model has
 *         none), dt_bias [H], A = −exp(A_log) [H], D [H]
 *   state in slot slots[r] at byte offset state_off: S as float
 *         [H][P][N]
 *   out[r, c] = y_c · SiLU(z_c), out [R × I] (the gated RMSNorm's input:
 *         the caller applies rmsnorm over all I channels)
 * with u = SiLU(conv + bias) (x, B, C), dt = clamp(softplus(dt_raw +
 * dt_bias), dt_lo, dt_hi), S[h] ← exp(dt·A_h)·S[h] + dt·x_h ⊗ B_g,
 * y_h = S[h]·C_g + D_h·x_h. Optional (kernels/cpu/ops_mamba2.c). */
typedef int backend_mamba2_step_fn(backend *be, const backend_buf *in, int ldi, const backend_buf *par,
                                   backend_buf *out, size_t state_off, int H, int P, int N, int G, float dt_lo,
                                   float dt_hi);

/* y[b, :] = x[b, :] / sqrt(mean(x[b, :]²) + eps) · w over d columns
 * (RMSNorm: Mamba's block norms and its gated norm; T5/Llama's), the sum
 * in double. x and y are [B × d] with ld = d; y may equal x. Optional: a
 * model whose config asks for RMS norms is refused without it. */
typedef int backend_rmsnorm_fn(backend *be, const backend_buf *x, backend_buf *y, const backend_buf *w, int d,
                               float eps);

#define BACKEND_KIND_OPS(X)                          \
    X(BACKEND_OP_SHIFT_MIX,         shift_mix)       \
    X(BACKEND_OP_LINEAR_STEP,       linear_step)     \
    X(BACKEND_OP_AFT_STEP,          aft_step)        \
    X(BACKEND_OP_SHORT_CONV,        short_conv)      \
    X(BACKEND_OP_DELTA_STEP,        delta_step)      \
    X(BACKEND_OP_WINDOW_STEP,       window_step)     \
    X(BACKEND_OP_AFT_WINDOW_STEP,   aft_window_step) \
    X(BACKEND_OP_RETENTION_STEP,    retention_step)  \
    X(BACKEND_OP_FAVOR_FEATURES,    favor_features)  \
    X(BACKEND_OP_COSFORMER_STEP,    cosformer_step)  \
    X(BACKEND_OP_LINFORMER_STEP,    linformer_step)  \
    X(BACKEND_OP_RWKV7_STEP,        rwkv7_step)      \
    X(BACKEND_OP_MAMBA2_STEP,       mamba2_step)     \
    X(BACKEND_OP_RMSNORM,           rmsnorm)

typedef enum backend_op {
#define BACKEND_OP_ENUM(e, op) e,
    BACKEND_KIND_OPS(BACKEND_OP_ENUM)
#undef BACKEND_OP_ENUM
    BACKEND_NOPS
} backend_op;

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
    /* A buffer over n floats of host memory p that the caller owns and keeps
     * until buf_free, which frees only the handle. Ops write into p in place:
     * the model's head fills the caller's logits without a download (a
     * batch-64 step's 13 MB copy on the 169M shape). Optional (NULL: a
     * device backend; the model downloads from its own buffer). */
    int  (*buf_host)(backend *be, float *p, size_t n, backend_buf **out);

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
    /* Set the current batch: row r is slot slots[r] consuming tokens[r]
     * (0 ≤ token < the rows of the embedding; the caller checked). Slots are
     * < the reserved count and form runs (see top: a slot's rows are
     * consecutive; the caller checked). The arrays are copied; R ≤ the
     * capacity passed to any activation buffer is the caller's business. */
    int (*begin_step)(backend *be, const int *slots, const int *tokens, int R);

    /* x[r, :d] = E[tokens[r], :d]  (E is [vocab × d]). */
    int (*embed)(backend *be, const backend_buf *E, backend_buf *x, int d);

    /* y[b, :] = LN(x[b, :]) * w + bias over d columns, eps inside the sqrt.
     * x and y are [B × d] with ld = d; y may equal x. */
    int (*layernorm)(backend *be, const backend_buf *x, backend_buf *y,
                     const backend_buf *w, const backend_buf *bias, int d, float eps);

    /* One GEMM over the batch, y[B × N] (+)= x[B × K] · W[N × K]ᵀ + bias:
     *   y[b, n] = (accumulate ? y[b, n] : 0) + bias[n] + Σ_k x[b, k] · W[n, k]
     * for b < B, n < N, k < K, where x[b, k] is x.buf[x.off + b·x.ld + k] and
     * y[b, n] is y.buf[y.off + b·y.ld + n] (backend_view above). W is
     * [N × K] row-major at offset 0 (or made by weight_new), bias (length N)
     * may be NULL. flags:
     *   BACKEND_MM_ACCUMULATE  add into y: how residual adds are done (x ← x + Wo·o)
     *   BACKEND_MM_GELU        y = GELU(bias + Σ) (lind_gelu_erf per element):
     *                          the feed-forward's first product with its
     *                          activation, in one pass; needs y.ld == N and no
     *                          ACCUMULATE (-EINVAL otherwise).
     *   BACKEND_MM_RELU2       y = max(0, bias + Σ)² (lind_relu2): RWKV's
     *                          channel-mix key; the same conditions as GELU.
     *   BACKEND_MM_SIGMOID     y = σ(bias + Σ) (lind_sigmoid): RWKV's
     *                          receptance gate; the same conditions as GELU.
     * At most one of GELU, RELU2, SIGMOID. W may also come from
     * weight_new_half; the activations x and the result y stay fp32. */
    int (*matmul)(backend *be, backend_mview y, backend_view x, const backend_buf *W, const backend_buf *bias,
                  int B, int N, int K, int flags);

    /* ---- row helpers (no slot state) ------------------------------------ */
    /* dst[i, :d] = src[rows[i], :d] for i < n (src row stride d, rows a host
     * array of n indices < R): the rows whose logits a step wants. */
    int (*gather_rows)(backend *be, const backend_buf *src, const int *rows, int n,
                       backend_buf *dst, int d);
    /* x[r, :d] *= s for r < R (RWKV's rescale_every halving). */
    int (*scale_rows)(backend *be, backend_buf *x, int d, float s);
    /* x[r, c] += g[r, go + c] · v[r, vo + c] for r < R, c < d; g and v have row
     * strides ldg and ldv (floats), x row stride d (a gated residual add:
     * RWKV's channel mix x += σ(r) ⊙ (Wv·k), with σ applied by matmul). */
    int (*gated_add)(backend *be, backend_buf *x, const backend_buf *g, size_t go, int ldg,
                     const backend_buf *v, size_t vo, int ldv, int d);

    /* W [N × K] row-major half-precision host data (IEEE fp16 or bfloat16
     * bits, wtype BACKEND_W_F16 / BACKEND_W_BF16) kept in half precision by
     * the backend; otherwise exactly as weight_new. matmul with such a W
     * gives the same result as with the fp32 weight holding the widened
     * (exact) values. -EINVAL for an unknown wtype. Optional (NULL: the
     * model widens to fp32 and calls weight_new). */
    int (*weight_new_half)(backend *be, int N, int K, const uint16_t *W, int wtype, backend_buf **out);

    /* ---- the kinds' ops ----------------------------------------------------
     * One member per row of BACKEND_KIND_OPS (above, with each op's contract):
     *   int (*shift_mix)(...), int (*linear_step)(...), ..., int (*rmsnorm)(...)
     * NULL for an op the backend does not have (see backend_supports). */
#define BACKEND_OP_MEMBER(e, op) backend_##op##_fn *op;
    BACKEND_KIND_OPS(BACKEND_OP_MEMBER)
#undef BACKEND_OP_MEMBER

    /* ---- health ----------------------------------------------------------
     * Optional (NULL: never anything to report). */

    /* bad[r] = 1 when row r of x [R × d] (R the current batch's rows, row
     * stride d) holds a NaN or ±inf, else 0; bad is a host array of R bytes.
     * Synchronous, like buf_download. The model checks its residual with it
     * after the last block, so one session's overflow fails that session
     * only (docs/NUMERICS.md). */
    int (*rows_nonfinite)(backend *be, const backend_buf *x, int d, unsigned char *bad);
    /* What the last failed op reported (the device's own text, e.g. "kernel
     * launch: an illegal memory access was encountered
     * (cudaErrorIllegalAddress)"), or "" when none failed. Owned by the
     * backend, valid until its next op. */
    const char *(*last_error)(backend *be);
    /* Nonzero once the device has failed in a way no later call recovers
     * from (a sticky CUDA error: the context is lost, every later op fails).
     * The CPU backend never is; on a poisoned backend every device call
     * fails, and model_forward refuses to step. */
    int (*poisoned)(backend *be);

    /* ---- compute precision -----------------------------------------------
     * Optional (NULL: BACKEND_COMPUTE_F32 only). Called once, before any
     * weight is made. BACKEND_COMPUTE_F32 (the default): products are exact
     * fp32 math on the (widened) weights. BACKEND_COMPUTE_BF16: products
     * with a bf16 weight (weight_new_half, BACKEND_W_BF16) round each
     * activation row to bf16 and accumulate bf16·bf16 products in fp32
     * (still batch-invariant; docs/NUMERICS.md). 0, or a negative code with
     * err saying why the device cannot (e.g. no AVX512_BF16). */
    int (*set_compute)(backend *be, int mode, char *err, size_t errlen);

    /* ---- quantized weights -------------------------------------------------
     * Optional (NULL: the backend has none, and a model asking for them is
     * refused). W [N × K] fp32 row-major host data quantized by the backend
     * (BACKEND_W_Q8: 8-bit, BACKEND_W_Q4: 4-bit, one scale per block of 32
     * along K; kernels/cpu/quant.h) and kept packed; matmul with it
     * quantizes each activation row to 8 bits and sums exact integer block
     * dots in fp32, batch-invariant like the other products. 0, or a
     * negative code with err saying why (an unknown format, a value the
     * format cannot hold). */
    int (*weight_new_quant)(backend *be, int N, int K, const float *W, int qtype, backend_buf **out, char *err,
                            size_t errlen);

    /* ---- recorded steps (CUDA graphs) -------------------------------------
     * Optional (NULL: every step issues its ops). Between begin_step and the
     * step's first synchronous op, a model brackets the ops whose launches
     * depend only on `key` (its own description of the step: rows, logits
     * wanted) and the batch's run layout — not on the tokens or slots, which
     * the kernels read from the device. graph_begin(be, key) returns
     *   BACKEND_GRAPH_REPLAYED: a recording for this key and run layout was
     *     enqueued; the caller skips its ops;
     *   BACKEND_GRAPH_RECORDING: the caller's ops until graph_end are
     *     recorded, not run;
     *   BACKEND_GRAPH_EAGER: the caller runs its ops as usual (first sight of
     *     a key, recording off, or a key that could not be recorded);
     *   or <0 on error. graph_end(be, rc), after recording with the ops'
     * result rc: 0 once the recording has been enqueued; BACKEND_GRAPH_RETRY
     * when it could not be kept (an op failed or needed a host copy, a buffer
     * was allocated or freed meanwhile): nothing ran, so the caller issues
     * its ops again, eagerly. A recording is dropped whenever any buffer of
     * the backend is allocated or freed, so it never holds a stale pointer. */
    int (*graph_begin)(backend *be, uint64_t key);
    int (*graph_end)(backend *be, int rc);

    /* Host memory that buf_download fills fastest (page-locked on a GPU: the
     * copy runs at the link's rate, not through a staging buffer). Optional
     * (NULL: malloc/free). host_alloc returns NULL when out of memory. */
    void *(*host_alloc)(backend *be, size_t bytes);
    void (*host_free)(backend *be, void *p);   /* NULL is a no-op */
} backend_ops;

/* Every backend struct starts with this. */
struct backend {
    const backend_ops *ops;
};

/* Whether backend be has op (a row of BACKEND_KIND_OPS): what a kind asks
 * in load() before it uses an optional op (never a NULL check of its own). */
static inline int backend_supports(const backend *be, backend_op op)
{
    switch (op) {
#define BACKEND_OP_HAS(e, name) case e: return be->ops->name != NULL;
    BACKEND_KIND_OPS(BACKEND_OP_HAS)
#undef BACKEND_OP_HAS
    default: return 0;
    }
}

/* The op's name as in backend_ops ("delta_step"); "?" past the list. */
const char *backend_op_name(backend_op op);

/* 0 when be has every op of ops[0..n), else -ENOTSUP with err saying
 * "<who> needs the backend op X (or: ops X, Y and Z: those it lacks), which
 * the <backend> backend does not have (use the cpu backend)". */
int backend_require(const backend *be, const backend_op *ops, int n, const char *who, char *err, size_t errlen);

/* The matmul flags contract, checked the same way by every backend: known
 * flags only; an activation (GELU, RELU2 = max(0, s)², SIGMOID) at most one,
 * only on contiguous rows and without ACCUMULATE. */
#define BACKEND_MM_ACT (BACKEND_MM_GELU | BACKEND_MM_RELU2 | BACKEND_MM_SIGMOID)
static inline int backend_mm_flags_ok(int flags, int ldy, int N)
{
    if (flags & ~(BACKEND_MM_ACCUMULATE | BACKEND_MM_ACT)) return 0;
    int act = flags & BACKEND_MM_ACT;
    if (act & (act - 1)) return 0;
    return !act || (!(flags & BACKEND_MM_ACCUMULATE) && ldy == N);
}

/* Upload a matmul weight through weight_new when the backend has it. */
static inline int backend_weight_new(backend *be, int N, int K, const float *W, backend_buf **out)
{
    if (be->ops->weight_new) return be->ops->weight_new(be, N, K, W, out);
    int rc = be->ops->buf_new(be, (size_t)N * (size_t)K, out);
    if (rc == 0 && (rc = be->ops->buf_upload(be, *out, 0, W, (size_t)N * (size_t)K)) < 0) {
        be->ops->buf_free(be, *out);
        *out = NULL;
    }
    return rc;
}

/* Options of the backends' constructors. The constructors never read the
 * environment: a program's entry point fills this (backend_opts_from_env)
 * and passes it down. A NULL backend_opts * anywhere means the defaults. */
typedef struct backend_opts {
    int         threads;       /* CPU: threads of the pool, 1..64; 0 = every online CPU (at most 64) */
    const char *cpu_gemm;      /* CPU: "openblas", "avx2" or "avx512"; NULL/"" = the best this CPU runs */
    int         cpu_no_amx;    /* CPU: 1 = bf16 compute never on AMX tiles (vdpbf16ps only); 0 = on AMX
                                  where the CPU has it (docs/CPU.md) */
    int         cuda_device;   /* CUDA: device ordinal; -1 = device 0 */
    const char *cuda_weights;  /* CUDA/harness: GEMM precision "fp32" or "bf16"; NULL/"" = fp32 */
    int         cuda_no_graphs; /* CUDA/harness: 1 = never record and replay steps (graph_begin); 0 = do */
    int         cuda_gemv;     /* CUDA/harness: 1 = fp32 products of ≤ 8 rows by kb_gemv (as half weights'
                                  always are); 0 = by the GEMM. Off by default: on an H100 it was 5.5×
                                  faster at 8 rows of the default model, 1.9× slower on 169M (docs/CUDA.md) */
} backend_opts;

#define BACKEND_THREADS_MAX 64

/* The defaults: {threads 0, cpu_gemm NULL, cpu_no_amx 0, cuda_device -1, cuda_weights NULL, cuda_no_graphs 0,
 * cuda_gemv 0}. */
void backend_opts_default(backend_opts *o);

/* The defaults overridden by the environment — LIND_CPU_THREADS (1..64),
 * LIND_CPU_GEMM, LIND_CPU_AMX (0 or 1), LIND_CUDA_DEVICE (an ordinal ≥ 0), LIND_CUDA_WEIGHTS,
 * LIND_CUDA_GRAPHS (0 or 1), LIND_CUDA_GEMV (0 or 1); an
 * unset or empty variable leaves its default. Called by programs' entry
 * points (main, a CLI command's function), never by constructors. Returns
 * 0, or -EINVAL with err naming the variable and its value when
 * LIND_CPU_THREADS or LIND_CUDA_DEVICE is not a decimal number in range,
 * or LIND_CPU_AMX, LIND_CUDA_GRAPHS or LIND_CUDA_GEMV is not 0 or 1.
 * The string options point into the environment (valid while it is not
 * changed); whether the CPU or device supports them is the constructors'
 * check. */
int backend_opts_from_env(backend_opts *o, char *err, size_t errlen);

/* Create a backend by name: "cpu", "cuda", or "auto" (NULL = "auto": CUDA
 * when built with it and a device is usable, else CPU), with options `opts`
 * (NULL = defaults). On failure returns <0 and fills err (e.g. "backend
 * cuda: not built with CUDA support"). */
int  backend_new(const char *name, const backend_opts *opts, backend **out, char *err, size_t errlen);
void backend_free(backend *be);   /* NULL is a no-op */

/* Constructors of the individual backends (kernels/cpu/, kernels/cuda/);
 * opts NULL = defaults. An option value the CPU or device cannot honour
 * (a GEMM kernel it lacks, a device ordinal past the last) fails with
 * -EINVAL and a message naming the value. */
int backend_cpu_new(const backend_opts *opts, backend **out, char *err, size_t errlen);
int backend_cuda_new(const backend_opts *opts, backend **out, char *err, size_t errlen);
/* 1 if the cpu backend that opts (NULL = defaults) make multiplies bf16
 * weights in bf16 math on AMX tiles (docs/CPU.md, "On AMX tiles"); 0 if it
 * uses vdpbf16ps, another kernel, or opts would be refused. For benchmarks,
 * whose ceiling for that math is then the tiles'. */
int backend_cpu_amx(const backend_opts *opts);

#endif
