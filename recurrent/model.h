/* recurrent/model.h — lind's recurrent model: the public C API.
 *
 * A model is loaded once from a Hugging Face style directory (config.json +
 * model.safetensors, see docs/MODEL.md) onto a backend (kernels/backend.h).
 * Sessions do not own memory here: their recurrent states live in the
 * backend's pool of *slots*, each holding one session's constant-size state
 * (model_state_bytes() bytes, whatever the stream length). A step advances a
 * batch of slots by one token each, in one batched pass per layer.
 *
 * Tokens: 32-bit ids in [0, vocab_size); a model directory declares its
 * tokenizer (recurrent/tokenizer.h), which the model loads and owns. A fresh
 * session is a zeroed slot that is then fed the BOS token (config "bos",
 * default 0: NUL for byte models) when the model's convention says so:
 * lind's own models do (the logits after BOS predict the first token of
 * text; `lind score` and the trainer in tools/ both do this); Hugging Face
 * RWKV-4 checkpoints feed the prompt alone from the zero state unless their
 * files say otherwise (recurrent/conventions.h, docs/MODELS.md).
 *
 * Errors are values: functions return 0 or a negative errno-style code and,
 * where they take one, fill `err` (a caller-provided buffer) with a message
 * that names the file, tensor or field at fault.
 *
 * Threading: a model is used by one thread at a time (the daemon's compute
 * thread). */
#ifndef LIND_RECURRENT_MODEL_H
#define LIND_RECURRENT_MODEL_H

#include <stddef.h>
#include <stdint.h>

#define LIND_BYTE_VOCAB 256          /* the "bytes" tokenizer's vocabulary */
#define LIND_BOS        0            /* the default "bos" (NUL for byte models) */
#define LIND_MAX_VOCAB  (1 << 18)
#define LIND_MAX_LAYERS 64
#define LIND_MAX_EOS    8            /* end-of-text token ids a model may declare */
#define LIND_KIND_PARAMS 16          /* uint64 words of a kind's parsed settings */

/* One block: x += mixer(LN1(x)); x += ffn(LN2(x)). Each part is a kind
 * (recurrent/kind.h) that owns its configuration keys: it parses them into
 * its own settings struct, stored in mixer_p / ffn_p (≤ 128 bytes). */
typedef struct lind_layer_cfg {
    char     mixer[24], ffn[24];     /* kind names: "linear", "aft", ...; "gelu_mlp", ... */
    uint64_t mixer_p[LIND_KIND_PARAMS], ffn_p[LIND_KIND_PARAMS];
} lind_layer_cfg;

/* Model-wide settings (docs/MODEL.md); everything per kind is in layers[]. */
typedef struct lind_config {
    int   vocab_size;                /* 1..LIND_MAX_VOCAB */
    int   d_model, n_layers;
    int   bos;                       /* token fed to a fresh session, default 0 */
    float norm_eps;                  /* ln1, ln2 and the embedding norm */
    float final_norm_eps;            /* ln_f; default norm_eps */
    int   emb_norm;                  /* LayerNorm on the embedding (RWKV-4's pre_ln) */
    int   norm_rms;                  /* "norm": "rms": every norm (ln1, ln2, ln_f, the
                                        embedding's) is an RMSNorm with a weight and
                                        no bias (Mamba); default LayerNorm */
    int   tie_head;                  /* the head is the embedding matrix (no head.weight) */
    int   rescale_every;             /* 0, or: x halved after every n-th block and each
                                        block's output projections scaled to match
                                        (RWKV's fp16 overflow guard; same function) */
    char  tokenizer[16];             /* "bytes", "bpe", "world"; "" from an HF config: the
                                        directory's tokenizer file decides at load */
    char  tokenizer_file[256];       /* relative to the model directory; "" for bytes */
    char  format[16];                /* "lind", "hf-rwkv4", "hf-mamba2", "rwkv7-pth": where the config came from */
    /* Filled at load (recurrent/conventions.h), not from config.json alone: */
    int   add_bos;                   /* feed bos to a fresh session (1) or not (0) */
    int   n_eos;                     /* end tokens: sampling one ends a turn */
    int32_t eos[LIND_MAX_EOS];
    char  bos_from[96], eos_from[96];   /* which file or rule decided each */
    lind_layer_cfg layers[LIND_MAX_LAYERS];
} lind_config;

/* Weight precision in memory (matrix weights; vectors are always fp32).
 * Q8 / Q4: quantized at load from any checkpoint precision, 8-bit or 4-bit
 * codes with an fp16 scale per block of 32 along K (the CPU backend only,
 * kernels/cpu/quant.h; docs/CPU.md says which matrices stay otherwise,
 * docs/NUMERICS.md what it costs in accuracy). */
typedef enum lind_dtype { LIND_DT_AUTO = 0, LIND_DT_F32, LIND_DT_F16, LIND_DT_BF16, LIND_DT_Q8, LIND_DT_Q4 } lind_dtype;

/* Arithmetic of the matrix products. F32 (the default, 0): exact fp32
 * math on the weights' (widened) values. BF16: every matrix held in bf16
 * and multiplied in bf16 with fp32 sums (AVX512_BF16's vdpbf16ps; the CPU
 * backend only, refused elsewhere) — about twice the arithmetic rate, at
 * the accuracy docs/NUMERICS.md measures; still batch-invariant. */
typedef enum lind_compute { LIND_COMPUTE_F32 = 0, LIND_COMPUTE_BF16 = 1 } lind_compute;

struct backend_opts;                 /* kernels/backend.h */

typedef struct model_opts {
    const char *backend;             /* "cpu", "cuda", "auto"; NULL = "auto" */
    lind_dtype  weights;             /* AUTO: as stored (fp16/bf16 stay half);
                                        with compute BF16: AUTO or BF16 only */
    lind_compute compute;            /* LIND_COMPUTE_F32 unless asked */
    const struct backend_opts *be;   /* the backend's options (threads, GEMM kernel,
                                        device...); NULL = defaults. Only read
                                        during model_load_opts. */
    int         bos;                 /* 0: the model's own BOS convention
                                        (recurrent/conventions.h); 1: feed cfg.bos
                                        (--bos); -1: feed nothing (--no-bos) */
} model_opts;

typedef struct model model;

/* Load `dir` onto the backend named `backend` ("cpu", "cuda", or "auto";
 * NULL means "auto") with the backend's default options (no environment is
 * read). On success *out is a new model the caller frees with
 * model_free(). On failure returns <0 and writes the reason into err. */
int  model_load(const char *dir, const char *backend, model **out, char *err, size_t errlen);
/* The same with options (precision, the backend's options). */
int  model_load_opts(const char *dir, const model_opts *o, model **out, char *err, size_t errlen);
void model_free(model *m);

const lind_config *model_config(const model *m);
const char *model_backend_name(const model *m);   /* "cpu" / "cuda" */
const char *model_device_name(const model *m);    /* CPU model / GPU name */
size_t   model_param_count(const model *m);
int      model_vocab(const model *m);                /* cfg.vocab_size */
/* The token fed to a fresh session before its text: cfg.bos when the
 * model's convention (or model_opts.bos) says to feed one, else -1 (the
 * text is fed from the zero state). */
int      model_bos(const model *m);
/* The end-of-text tokens (cfg.eos): sampling one ends a turn. The count;
 * *ids (may be NULL) points at them, owned by the model. */
int      model_eos(const model *m, const int32_t **ids);
int      model_is_eos(const model *m, int32_t tok);
/* The tokenizer the model directory declares; owned by the model. */
const struct tokenizer *model_tokenizer(const model *m);
/* Precision the matrix weights are held in (LIND_DT_F32/F16/BF16/Q8/Q4). */
lind_dtype model_weights_dtype(const model *m);
const char *lind_dtype_name(lind_dtype t);           /* "f32", "f16", "bf16", "q8", "q4", "auto" */
/* The dtype a --dtype argument names ("f32", "bf16", "f16", "q8", "q4"):
 * 0, or -EINVAL for any other string. */
int lind_dtype_parse(const char *s, lind_dtype *out);
/* The compute mode the model was loaded with, and its name ("f32", "bf16"). */
lind_compute model_compute(const model *m);
const char *lind_compute_name(lind_compute c);
/* Bytes of one session's recurrent state (all layers), as read and written
 * by model_slot_read/model_slot_write. Independent of stream length. */
size_t   model_state_bytes(const model *m);
/* The most tokens a session of this model may hold: the least of its kinds'
 * maximum lengths (layer_kind.max_tokens), 0 when unbounded. model_step /
 * model_forward return -EOVERFLOW for a call that would feed a session past
 * it (before that layer's state changes), so a caller that tracks a
 * session's token count can refuse a turn up front with a clear message. */
long long model_max_tokens(const model *m);
/* Multiply-adds per token of the blocks' products and of the head, and the
 * bytes of all matrix weights as held in memory (benchmark figures). */
void     model_costs(const model *m, size_t *block_macs, size_t *head_macs, size_t *weight_bytes);
/* 64-bit fingerprint of the model: xxh64 over config.json and the tensor
 * data, the in-memory weight precision when it is not fp32 (a state made
 * with bf16 weights is not the state fp32 weights would make) and the
 * compute mode when it is not fp32 (nor is a state made with bf16 math). A
 * saved state is only ever loaded into the model it came from. */
uint64_t model_fingerprint(const model *m);

/* The raw state described as typed regions (for the state format's header,
 * its NaN/Inf check, and tools). Fills up to `max` regions, returns how many
 * the model has (call with max = 0 to count). Regions tile the raw state. */
typedef enum lind_elem { LIND_EL_F32 = 0, LIND_EL_F64 = 1, LIND_EL_I32 = 2, LIND_EL_I64 = 3 } lind_elem;
typedef struct model_state_region {
    int    layer;         /* -1 for model-wide regions */
    char   name[16];      /* e.g. "S", "z", "num", "den", "max", "shift"; a
                             layer's FFN regions are prefixed "ffn." */
    int    type;          /* lind_elem: floats are checked for NaN/Inf, integers never */
    int    elem_bytes;    /* 4 or 8 (follows from type) */
    size_t offset, count; /* byte offset in the raw state, element count */
} model_state_region;
int model_state_regions(const model *m, model_state_region *out, int max);

/* Slots. model_slots_reserve() sizes the pool to hold at least n slots
 * (existing slot contents are kept). Slot indices run 0..n-1. */
int  model_slots_reserve(model *m, int n);
int  model_slots_count(const model *m);
/* Zero a slot's state (a fresh session, before BOS is fed). */
int  model_slot_reset(model *m, int slot);
/* Copy a slot's raw state to/from host memory of model_state_bytes() bytes. */
int  model_slot_read(model *m, int slot, void *dst);
int  model_slot_write(model *m, int slot, const void *src);

/* Advance B slots by one token each: slots[b] consumes tokens[b]. If logits is
 * non-NULL it receives B×vocab floats (row b for slots[b]); passing NULL skips
 * the head (prompt feeding). Slots in one call must be distinct. */
int  model_step(model *m, const int *slots, const int32_t *tokens, int B, float *logits);

/* The general step, for batched prefill: R rows, row r feeds tokens[r] into
 * slot slots[r]. Rows of one slot must be consecutive (a "run"): they are that
 * session's next tokens in order, and a slot appears in at most one run. The
 * products run as R-row GEMMs; each mixer applies its state updates token by
 * token inside a run, so the result is bit-identical to feeding the tokens
 * one model_step at a time. logits (if nlogits > 0) receives nlogits×vocab
 * floats: row i for row index logit_rows[i] (any rows, in any order;
 * logit_rows NULL with nlogits = R means every row).
 * -EINVAL for a bad slot, token, run order or logit row.
 *
 * Non-finite numbers: after the blocks the step checks every row's residual
 * for NaN/±inf (a NaN or overflow anywhere in a block reaches it; an AFT
 * state that turns non-finite makes its output NaN). If any row has one,
 * the step still completes — every other run's state and logits are valid —
 * and returns -EDOM; model_last_nonfinite() then names the rows. The slot of
 * a bad run holds a state that must not be used or saved: reset it or write
 * a saved state back (docs/NUMERICS.md). -EIO when the backend is poisoned
 * (model_poisoned), without touching any slot. */
/* Host memory for n floats of logits (model_forward's output) that the
 * backend downloads into fastest: page-locked on a GPU (3.7× the pageable
 * rate on an H200, docs/CUDA.md), the plain heap on the CPU. NULL when out
 * of memory. Free with model_logits_free, before model_free. */
float *model_logits_alloc(model *m, size_t n);
void   model_logits_free(model *m, float *p);   /* NULL is a no-op */

int  model_forward(model *m, const int *slots, const int32_t *tokens, int R,
                   const int *logit_rows, int nlogits, float *logits);

/* After a model_forward/model_step: the number of its rows whose residual
 * went non-finite (0 when it returned 0), and in *rows (if non-NULL) one
 * flag per row of that call (1 = non-finite), owned by the model and valid
 * until the next step. A run with a flagged row is a session whose turn
 * failed. */
int  model_last_nonfinite(const model *m, const unsigned char **rows);

/* The backend's message for the last failed op, naming the device error
 * (e.g. "kernel launch: an illegal memory access was encountered
 * (cudaErrorIllegalAddress)"); "" when it has none. Owned by the backend,
 * valid until the next call on the model. */
const char *model_last_error(const model *m);
/* Nonzero once the backend's device has failed for good (a sticky CUDA
 * error): every later step fails with -EIO; nothing short of a new process
 * recovers. The CPU backend never is. */
int  model_poisoned(const model *m);

/* The backend the model runs on (kernels/backend.h), for benchmarks that
 * measure the same device's primitive rates. Owned by the model. */
struct backend;
struct backend *model_backend(model *m);

#endif
