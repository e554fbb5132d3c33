/* recurrent/model.h — lind's recurrent model: the public C API.
 *
 * A model is loaded once from a Hugging Face style directory (config.json +
 * model.safetensors, see docs/MODEL.md) onto a backend (kernels/backend.h).
 * Sessions do not own memory here: their recurrent states live in the
 * backend's pool of *slots*, each holding one session's constant-size state
 * (model_state_bytes() bytes, whatever the stream length). A step advances a
 * batch of slots by one token each, in one batched pass per layer.
 *
 * Token convention: one token per byte (vocab 256). Token 0 (NUL) is BOS: a
 * fresh session is a zeroed slot that is then fed BOS, and the logits after
 * BOS predict the first byte of text (this is what `lind score` and the
 * trainer in tools/ both do).
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

#define LIND_VOCAB     256
#define LIND_BOS       0
#define LIND_MAX_LAYERS 64

typedef struct lind_config {
    int vocab_size;            /* must be 256 */
    int d_model, n_layers, n_heads, d_head, d_ff;
    char mixers[LIND_MAX_LAYERS][16]; /* per layer: "linear", "aft", ... */
    char feature_map[16];      /* "elu1" */
    char aft_variant[16];      /* "simple" or "decay" */
    int token_shift;           /* 0/1 */
    float norm_eps;            /* layer norm epsilon */
    float attn_eps;            /* linear mixer ε in φ(q)ᵀz + ε (optional, default 1e-6) */
} lind_config;

typedef struct model model;

/* Load `dir` onto the backend named `backend` ("cpu", "cuda", or "auto";
 * NULL means "auto"). On success *out is a new model the caller frees with
 * model_free(). On failure returns <0 and writes the reason into err. */
int  model_load(const char *dir, const char *backend, model **out, char *err, size_t errlen);
void model_free(model *m);

const lind_config *model_config(const model *m);
const char *model_backend_name(const model *m);   /* "cpu" / "cuda" */
const char *model_device_name(const model *m);    /* CPU model / GPU name */
size_t   model_param_count(const model *m);
/* Bytes of one session's recurrent state (all layers), as read and written
 * by model_slot_read/model_slot_write. Independent of stream length. */
size_t   model_state_bytes(const model *m);
/* 64-bit fingerprint of the model: xxh64 over config.json and the tensor
 * data. A saved state is only ever loaded into the model it came from. */
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
 * non-NULL it receives B×256 floats (row b for slots[b]); passing NULL skips
 * the head (prompt feeding). Slots in one call must be distinct. */
int  model_step(model *m, const int *slots, const int *tokens, int B, float *logits);

/* The backend the model runs on (kernels/backend.h), for benchmarks that
 * measure the same device's primitive rates. Owned by the model. */
struct backend;
struct backend *model_backend(model *m);

#endif
