/* recurrent/mixer.h — mixer kinds (recurrent/kind.h) and the helpers they
 * share. Adding a mixer kind: one file defining a `layer_kind`, one row in
 * MIXER_KINDS in recurrent/mixer.c (docs/KINDS.md). */
#ifndef LIND_RECURRENT_MIXER_H
#define LIND_RECURRENT_MIXER_H

#include <stddef.h>
#include "kernels/backend.h"
#include "recurrent/kind.h"

/* Three projections from h, each to width n: with token shift, each from its
 * own μ-mix of h_t and h_{t−1}; without, one fused GEMM. */
typedef struct mixer_proj3 {
    backend_buf *fused;   /* [3n × d], without token shift */
    backend_buf *w[3];    /* [n × d] each, with token shift */
    backend_buf *mu;      /* [3 × d], with token shift */
    int n, d, shift;
} mixer_proj3;

/* W[p]: [n × d] weights; mu[p] (d floats) are used when shift. */
int  mixer_proj3_load(mixer_proj3 *p, kind_ctx *ctx, int shift, int n, int d,
                      const kind_weight *const W[3], const float *const mu[3]);
/* out[r, p·n + j] for p < 3. With token shift, `shift_off` is the byte
 * offset of the fp32 h_{t−1} region (d floats) in a slot and io->scratch[1]
 * holds the mixed inputs. */
int  mixer_proj3_run(const mixer_proj3 *p, const layer_io *io, size_t shift_off, backend_buf *out);
void mixer_proj3_free(mixer_proj3 *p, backend *be);

/* The longest memory, 1/(1 − decay) tokens, for which a decaying state (RWKV-4's
 * AFT sums, RetNet's S) is kept in fp32: each step rounds each element once and
 * the decay forgets a rounding at its rate, so the error carried is at most
 * memory·2^-24 relative even if every rounding went the same way
 * (docs/NUMERICS.md). */
#define MIXER_F32_MEMORY 16384.0

/* Whether a state that forgets `forget` = 1 − decay of itself per token
 * (computed without cancellation) may be kept in fp32; never for forget = 0
 * (no decay) or NaN. */
static inline int mixer_f32_ok(double forget) { return forget * MIXER_F32_MEMORY >= 1.0; }


#endif
