/* recurrent/sampler.h — turning logits into the next token.
 *
 * Temperature, top-k, top-p (nucleus) and a repetition penalty over a window
 * of recent tokens; temperature 0 is greedy. The sampler is a plain struct
 * with no pointers: its RNG state and its window are part of a session's
 * persisted state (state/format.h), so a restored session samples exactly the
 * tokens an uninterrupted one would. */
#ifndef LIND_RECURRENT_SAMPLER_H
#define LIND_RECURRENT_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#define SAMPLER_WINDOW_MAX 256

typedef struct sampler_params {
    float    temperature;   /* 0 = greedy; default 0.8 */
    int      top_k;         /* 0 = off; else keep the k most likely */
    float    top_p;         /* 1 = off; else smallest set with mass >= p */
    float    rep_penalty;   /* 1 = off; >1 divides positive logits (CTRL style) */
    int      rep_window;    /* tokens of history the penalty looks at, <= SAMPLER_WINDOW_MAX */
    uint64_t seed;
} sampler_params;

typedef struct sampler {
    sampler_params p;
    uint64_t rng[4];                    /* xoshiro256** state */
    uint8_t  window[SAMPLER_WINDOW_MAX]; /* ring of recent tokens */
    uint32_t wlen, wpos;                /* filled entries, next write index */
} sampler;

/* The defaults above. */
sampler_params sampler_defaults(void);
/* Check ranges; 0, or -EINVAL with a message naming the parameter. */
int  sampler_params_check(const sampler_params *p, char *err, size_t errlen);
/* (Re)seed from p->seed and clear the window. */
void sampler_init(sampler *s, const sampler_params *p);
/* Change parameters mid-session (a new turn's settings) keeping RNG and
 * window; a new seed reseeds the RNG. */
void sampler_set_params(sampler *s, const sampler_params *p);
/* Record a token in the repetition window (prompt bytes and sampled ones). */
void sampler_observe(sampler *s, int token);
/* Sample the next token from vocab logits; `scratch` holds >= 2*vocab floats.
 * Does not observe the token: the caller does, once it is emitted. */
int  sampler_next(sampler *s, const float *logits, int vocab, float *scratch);

#endif
