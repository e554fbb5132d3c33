/* recurrent/kind.h — the seam between the model and the parts of a block.
 *
 * A block is x += mixer(LN1(x)); x += ffn(LN2(x)). Both parts are *kinds*
 * with one interface: a mixer kind (linear attention, AFT, ...) or an FFN
 * kind (GELU MLP, RWKV channel mix, ...) is one file exporting one
 * `layer_kind` and one entry in its table (recurrent/mixer.c, recurrent/ffn.c).
 * The model knows nothing of a kind's internals. A kind
 *   - owns its configuration keys: configure() reads them through a
 *     kind_scope (the layer's object in config.json, then the top level) into
 *     its own settings struct of at most LIND_KIND_PARAMS·8 bytes, kept in the
 *     lind_config (layers[i].mixer_p / ffn_p) and handed back to every call;
 *   - declares the tensors it expects (names relative to the part's prefix,
 *     "layers.<i>.mixer." / "layers.<i>.ffn." in lind's own format; other
 *     formats map names, recurrent/hf_rwkv4.c);
 *   - declares its per-session state as typed regions (fp32, fp64, int32,
 *     int64: a token-shift vector, a matrix state S, a running max, a ring of
 *     the last K inputs with its head index...); the model lays them out in a
 *     slot and hands the byte offsets to step(). A zeroed region must be the
 *     empty history. A step may read a region before writing it (the delta
 *     rule) — regions are the kind's own;
 *   - steps R rows of the current batch (kernels/backend.h: rows form runs of
 *     one session's consecutive tokens; state ops honour runs), adding its
 *     output into the residual x;
 *   - may pass per-row values to later layers through the model's carry
 *     channel (layer_kind.carry: RWKV-7's value residual).
 */
#ifndef LIND_RECURRENT_KIND_H
#define LIND_RECURRENT_KIND_H

#include <stddef.h>
#include <stdint.h>
#include "kernels/backend.h"
#include "recurrent/model.h"

#define KIND_MAX_TENSORS 32   /* RWKV-7's time mixing has 26 */
#define KIND_MAX_REGIONS 8

typedef struct kind_tensor {
    const char *name;    /* relative name; NULL marks an unused entry that keeps
                            a kind's indices stable (load gets no data for it) */
    int ndim;            /* 1 or 2 (leading dimensions of size 1 in a file are
                            accepted: HF stores RWKV's μ as [1, 1, d]) */
    int shape[2];
    int optional;        /* absent is allowed */
    int matrix;          /* a matmul weight [N × K]: may stay half precision */
} kind_tensor;

typedef struct kind_region {
    const char *name;    /* short (fits model_state_region.name with "ffn.") */
    int type;            /* lind_elem */
    size_t count;        /* elements */
} kind_region;

/* Weight data handed to load(): vectors always as fp32; a `matrix` tensor as
 * fp32, or as half (f16/bf16 bits) when the model keeps weights in half
 * precision. Host memory, valid during load() only. */
typedef struct kind_weight {
    const float    *f32;     /* NULL when absent or half */
    const uint16_t *half;    /* matrix tensors only */
    int             wtype;   /* BACKEND_W_F16 / BACKEND_W_BF16 when half */
    int             quant;   /* BACKEND_W_Q8 / BACKEND_W_Q4: a matrix whose fp32
                                values kind_matrix has the backend quantize */
    const char     *name;    /* the tensor's name (messages), when fp32 */
    int             present;
} kind_weight;

/* Load context: where the kind uploads, and what the model records. */
typedef struct kind_ctx {
    backend *be;
    int      layer;
    float    out_scale;      /* the model's scale for the part's output
                                projection (rescale_every), 1 otherwise */
    size_t   macs;           /* multiply-adds per row of every matmul weight
                                uploaded through kind_matrix (bench figures) */
    size_t   weight_bytes;   /* bytes of those weights as stored in memory */
    char     err[256];       /* why kind_matrix failed, when the backend said
                                ("" otherwise): the model reports it */
} kind_ctx;

/* Upload a matrix weight [N × K] (fp32 or half as given) scaled by `scale`
 * (1 = as is; a power of two keeps half values exact), counting it in ctx. */
int kind_matrix(kind_ctx *ctx, const kind_weight *w, int N, int K, float scale, backend_buf **out);
/* The backend ops (kernels/backend.h, enum backend_op) a kind needs beyond
 * the ones every backend has: 0 when ctx's backend has all n, else -ENOTSUP
 * with err naming the layer, `what` (e.g. "mixer \"delta\""), the ops it
 * lacks and the backend. A kind calls it in load(), before uploading. */
int kind_require_ops(const kind_ctx *ctx, const char *what, const backend_op *ops, int n, char *err, size_t errlen);
/* Upload a vector of n floats. */
int kind_vector(kind_ctx *ctx, const float *v, size_t n, backend_buf **out);
/* Upload three matrices [n × d] as one [3n × d] (fused projections). */
int kind_matrix3(kind_ctx *ctx, const kind_weight *const w[3], int n, int d, backend_buf **out);

/* Reading configuration keys: the layer's object in "layers" first, then the
 * top level of config.json. Each returns 0 (value or default stored), or
 * -EINVAL with a message naming the file, the layer and the key. Pass
 * required = 1 to refuse an absent key. */
typedef struct kind_scope kind_scope;   /* defined in recurrent/config.c */
int kind_cfg_int(const kind_scope *s, const char *key, int required, int def, int lo, int hi, int *out,
                 char *err, size_t errlen);
int kind_cfg_num(const kind_scope *s, const char *key, int required, double def, double lo, double hi,
                 float *out, char *err, size_t errlen);
int kind_cfg_bool(const kind_scope *s, const char *key, int required, int def, int *out, char *err, size_t errlen);
/* A string that must be one of `choices` (NULL-terminated). */
int kind_cfg_enum(const kind_scope *s, const char *key, int required, const char *def,
                  const char *const *choices, char *out, size_t outlen, char *err, size_t errlen);
/* "config.json, layer 3" for messages of configure(). */
const char *kind_scope_where(const kind_scope *s);

/* What one part's step works on. Row r of every buffer is a token of slot
 * slots[r] of the current batch (backend begin_step). */
typedef struct layer_io {
    backend *be;
    int R;                     /* rows */
    const backend_buf *h;      /* LN(x), [R × d_model] */
    backend_buf *x;            /* residual stream [R × d_model]: step adds its output */
    size_t region_off[KIND_MAX_REGIONS];   /* byte offsets in a slot, declared order */
    backend_buf *scratch[3];   /* each [R × scratch floats of the widest part] */
    backend_buf *carry;        /* the model's carry channel [R × carry floats], or
                                  NULL when no part uses one (layer_kind.carry) */
} layer_io;

/* layer_kind.carry results. The carry channel passes per-row values from an
 * earlier layer to later ones within one step — RWKV-7's value residual,
 * where layer 0's v is mixed into every later layer's v. Row r of the
 * channel belongs to row r of the batch (the same token of the same
 * session), so a run of T rows still equals T single steps. A part that
 * writes it fills it for every row; a part that reads it needs an earlier
 * writer of the same width (checked at load, naming the layer). */
enum { KIND_CARRY_NONE = 0, KIND_CARRY_WRITES = 1, KIND_CARRY_READS = 2 };

typedef struct layer_kind {
    const char *name;
    /* Read this kind's keys into params (zeroed, LIND_KIND_PARAMS·8 bytes). */
    int (*configure)(const kind_scope *sc, const lind_config *c, void *params, char *err, size_t errlen);
    /* Tensors expected (exactly these; anything else under the part's prefix
     * is refused). Returns the count (≤ KIND_MAX_TENSORS). */
    int (*tensors)(const lind_config *c, const void *params, kind_tensor *out);
    /* Per-session state regions. Returns the count (≤ KIND_MAX_REGIONS).
     * Called after load(), with its *priv: a layout may follow from the
     * weights (the AFT state's precision, decided from the decay). */
    int (*regions)(const lind_config *c, const void *params, const void *priv, kind_region *out);
    /* Floats per row each of layer_io's scratch buffers must hold. */
    size_t (*scratch_floats)(const lind_config *c, const void *params);
    /* Upload weights: t[i] for tensors()[i]. Validates values (naming the
     * tensor: "layers.<i>.<part>.<name>"), sets *priv. */
    int (*load)(const lind_config *c, const void *params, kind_ctx *ctx, const kind_weight *t, void **priv,
                char *err, size_t errlen);
    /* Rows of the current batch: io->x += part(io->h). NULL only for the
     * empty FFN ("none", recurrent/ffn_none.c): the block then has no second
     * half — the model reads no ln2 and runs no FFN. */
    int (*step)(void *priv, const layer_io *io);
    void (*free)(void *priv, backend *be);
    /* Optional (NULL = unbounded): the most tokens a session may hold, for a
     * kind with a maximum length by construction (linformer's max_len,
     * cosformer's horizon form); 0 = unbounded. A step that would feed
     * position ≥ this fails with -EOVERFLOW before the kind's state changes. */
    long long (*max_tokens)(const lind_config *c, const void *params);
    /* Optional (NULL = KIND_CARRY_NONE): whether the part writes or reads the
     * carry channel (layer_io.carry), and its width in floats per row. */
    int (*carry)(const lind_config *c, const void *params, size_t *floats);
} layer_kind;

/* The kind tables. */
const layer_kind *mixer_find(const char *name);
const layer_kind *ffn_find(const char *name);
/* Comma-separated names, for messages; returns buf. */
const char *mixer_kind_names(char *buf, size_t len);
const char *ffn_kind_names(char *buf, size_t len);

#endif
