/* recurrent/mixer.h — the seam between the model and its token mixers.
 *
 * A mixer kind (linear attention, AFT, ...) is one file exporting one
 * `mixer_kind` and one entry in the table in recurrent/mixer.c. The model
 * knows nothing of mixer internals: it asks the kind which tensors it expects
 * (names relative to "layers.<i>.mixer."), which state regions one session
 * needs, and then calls its load and step.
 *
 * State layout: the model lays out all layers' regions inside a slot, all
 * 8-byte regions first then all 4-byte ones; regions of one layer with the
 * same element size stay consecutive in the order the kind declares them.
 * The byte offset of each region is handed to step in mixer_io.region_off.
 * A zeroed region must be the empty history. */
#ifndef LIND_RECURRENT_MIXER_H
#define LIND_RECURRENT_MIXER_H

#include <stddef.h>
#include "kernels/backend.h"
#include "recurrent/model.h"

#define MIXER_MAX_TENSORS 16
#define MIXER_MAX_REGIONS 8

typedef struct mixer_tensor {
    const char *name;    /* suffix after "layers.<i>.mixer."; NULL marks an
                            unused entry that keeps a kind's indices stable
                            (load gets NULL for it) */
    int ndim;            /* 1 or 2 */
    int shape[2];
    int optional;        /* absent is allowed (load then gets NULL) */
} mixer_tensor;

typedef struct mixer_region {
    const char *name;    /* short, e.g. "S" (fits model_state_region.name) */
    int elem_bytes;      /* 8 = double, 4 = float */
    size_t count;        /* elements */
} mixer_region;

/* What one layer's step works on. Row b of every buffer is the session in
 * slot slots[b] of the current batch (backend begin_step). */
typedef struct mixer_io {
    backend *be;
    const lind_config *cfg;
    int B;
    const backend_buf *h;    /* LN1(x), [B × d_model] */
    backend_buf *x;          /* residual stream [B × d_model]: step adds its output */
    size_t region_off[MIXER_MAX_REGIONS]; /* byte offsets in a slot, declared order */
    size_t shift_off;        /* fp32 token-shift vector h_{t−1} (d_model), if token_shift */
    backend_buf *scratch[3]; /* each [B × mixer_scratch_floats(cfg)] floats */
} mixer_io;

typedef struct mixer_kind {
    const char *name;
    /* Tensors expected for this config (exactly these; anything else under
     * the layer's "mixer." prefix is refused). Returns the count. */
    int (*tensors)(const lind_config *cfg, mixer_tensor *out);
    /* Per-session state regions. Returns the count. */
    int (*regions)(const lind_config *cfg, mixer_region *out);
    /* Upload weights: t[i] is the host fp32 data of tensors()[i] (NULL if an
     * optional one is absent). Validates values (naming the tensor via
     * `layer`), sets *priv. */
    int (*load)(const lind_config *cfg, int layer, backend *be, const float *const *t,
                void **priv, char *err, size_t errlen);
    /* One token for the current batch: io->x += Wo·(mixer output). */
    int (*step)(void *priv, const mixer_io *io);
    void (*free)(void *priv, backend *be);
} mixer_kind;

/* The kind called name, or NULL. */
const mixer_kind *mixer_find(const char *name);
/* Comma-separated names of all kinds into buf, for messages; returns buf. */
const char *mixer_kind_names(char *buf, size_t len);
/* Floats per batch row each scratch buffer of mixer_io must hold. */
size_t mixer_scratch_floats(const lind_config *cfg);

/* ---- shared by mixers with three input projections (q,k,v / r,k,v) ------ */

/* Three projections from h, each to width n: with token shift, each from its
 * own μ-mix of h_t and h_{t−1}; without, one fused GEMM. */
typedef struct mixer_proj3 {
    backend_buf *fused;   /* [3n × d], without token shift */
    backend_buf *w[3];    /* [n × d] each, with token shift */
    backend_buf *mu;      /* [3 × d], with token shift */
    int n, d, shift;
} mixer_proj3;

/* W[p] are [n × d] host matrices, mu[p] (d floats) are used when shift. */
int  mixer_proj3_load(mixer_proj3 *p, backend *be, int shift, int n, int d,
                      const float *const W[3], const float *const mu[3]);
/* out[b, p·n + j] for p < 3 (out is io->scratch[0] unless given). Uses
 * io->scratch[1] for the mixed inputs when shifting. */
int  mixer_proj3_run(const mixer_proj3 *p, const mixer_io *io, backend_buf *out);
void mixer_proj3_free(mixer_proj3 *p, backend *be);

extern const mixer_kind mixer_linear;
extern const mixer_kind mixer_aft;

#endif
