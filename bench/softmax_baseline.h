/* bench/softmax_baseline.h — THE BASELINE the decode benchmark compares lind
 * against; not part of lind.
 *
 * lind's model (same config, same embedding, norms, FFN, head, token shift
 * and q/k/v/o projections, read from the same model directory) with every
 * token mixer replaced by causal softmax attention over a KV cache, decoded
 * one token at a time as a transformer server would:
 *   q, k, v = projections of LN1(x) (exactly lind's, recurrent/mixer.h
 *   mixer_proj3); append k, v to the cache;
 *   o_h = softmax(K_h q_h / √d_head)ᵀ V_h;   x += Wo·concat(o_h).
 * Every dense op runs through the same backend (kernels/backend.h, CPU:
 * OpenBLAS) as the recurrent model. The attention is tuned the usual way:
 * per layer and head a contiguous [capacity × d_head] K and V cache, scores
 * by one SGEMV over the cache, a vectorized max/exp/sum softmax, the output
 * by one transposed SGEMV.
 *
 * The weights of lind's linear-attention layers are reused as q/k/v/o; an
 * AFT layer's r/k/v/o are used as q/k/v/o (which needs d_model = n_heads ·
 * d_head). The outputs are therefore not those of a trained softmax model:
 * this is a cost baseline, and decode cost does not depend on weight values.
 *
 * One session, CPU backend. Errors are negative errno values with a message
 * in err. Threads: the backend's own (backend_opts.threads, given to
 * smax_load) for the dense ops, and `threads` for the attention, whose
 * heads are split into blocks over a kernels/cpu/pool.h pool. */
#ifndef LIND_BENCH_SOFTMAX_BASELINE_H
#define LIND_BENCH_SOFTMAX_BASELINE_H

#include <stddef.h>

#include "kernels/backend.h"
#include "recurrent/model.h"

typedef struct smax smax;

/* The shape the baseline reads from a lind flat config.json (docs/MODEL.md):
 * linear/AFT layers with gelu_mlp FFNs, as the shipped model has. */
typedef struct smax_cfg {
    int d_model, n_layers, n_heads, d_head, d_ff, token_shift, vocab_size;
    char mixers[LIND_MAX_LAYERS][16];
    float norm_eps;
} smax_cfg;

/* Load the model directory dir (config.json + model.safetensors) onto a new
 * CPU backend made with options `be` (NULL = defaults); the attention runs
 * on `threads` threads (1..64). The cache starts empty with capacity 0. */
int  smax_load(const char *dir, int threads, const backend_opts *be, smax **out, char *err, size_t errlen);
void smax_free(smax *s);
const smax_cfg *smax_config(const smax *s);

/* Bytes the KV cache holds per cached token (K and V, all layers, fp32). */
size_t smax_kv_bytes_per_token(const smax *s);
/* Bytes of one session at position n: KV cache plus token-shift vectors. */
size_t smax_session_bytes(const smax *s, long n);

/* Make room for cap positions, keeping the cached rows. -ENOMEM on failure
 * (the old cache is kept). */
int  smax_reserve(smax *s, long cap);
/* Forget the session: position 0, token-shift state zeroed. */
void smax_reset(smax *s);
long smax_position(const smax *s);
/* Set the position to n ≤ capacity. Shrinking drops rows; growing fills rows
 * [pos, n) by repeating the cached rows [0, pos) in order (pos must be > 0):
 * how the benchmark reaches positions that stepping cannot reach in its time
 * budget. Decode cost does not depend on the cached values. */
int  smax_set_position(smax *s, long n);

/* Feed one token at the current position (needs capacity > position):
 * appends its keys and values and, when logits is non-NULL, writes 256
 * logits. */
int  smax_step(smax *s, int token, float *logits);

/* Check the attention kernel (SGEMV scores, vectorized softmax, SGEMV output)
 * against a double-precision loop on random data. Returns the largest
 * relative error seen. */
double smax_selfcheck(void);

#endif
