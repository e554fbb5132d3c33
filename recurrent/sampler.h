/* recurrent/sampler.h — turning logits into the next token.
 *
 * Temperature, top-k, top-p (nucleus) and a repetition penalty over a window
 * of recent tokens; temperature 0 is greedy. Tokens are 32-bit ids in
 * [0, vocab), any vocabulary of 1..SAMPLER_VOCAB_MAX. The sampler is a plain
 * struct with no pointers: its RNG state and its window are part of a
 * session's persisted state (state/format.h), so a restored session samples
 * exactly the tokens an uninterrupted one would.
 *
 * Cost is O(vocab) per token: the softmax, a counting pass, and top-k /
 * top-p radix-sort only the tokens that can be kept (see sampler.c; the
 * penalty copies the logits only when it is on). For a vocabulary of at most 256 the
 * arithmetic is exactly lind v1's, so byte models draw the same tokens for the
 * same seed and settings as before 32-bit ids
 * (tests/fixtures/state_v1/sampler_v1.bin). */
#ifndef LIND_RECURRENT_SAMPLER_H
#define LIND_RECURRENT_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#define SAMPLER_WINDOW_MAX 256          /* entries of the repetition window */
#define SAMPLER_VOCAB_MAX  (1 << 18)    /* largest vocabulary (and top_k) */

typedef struct sampler_params {
    float    temperature;   /* 0 = greedy; default 0.8 */
    int      top_k;         /* 0 = off; else keep the k most likely; k >= the
                               vocabulary keeps every token (same as 0) */
    float    top_p;         /* 1 = off; else smallest set with mass >= p */
    float    rep_penalty;   /* 1 = off; >1 divides positive logits (CTRL style) */
    int      rep_window;    /* tokens of history the penalty looks at, <= SAMPLER_WINDOW_MAX */
    uint64_t seed;
} sampler_params;

typedef struct sampler {
    sampler_params p;
    uint64_t rng[4];                     /* xoshiro256** state */
    int32_t  window[SAMPLER_WINDOW_MAX]; /* ring of recent token ids */
    uint32_t wlen, wpos;                 /* filled entries, next write index */
} sampler;

/* The defaults above. */
sampler_params sampler_defaults(void);
/* Check ranges (top_k 0..SAMPLER_VOCAB_MAX: the vocabulary is not known
 * here); 0, or -EINVAL with a message naming the parameter. */
int  sampler_params_check(const sampler_params *p, char *err, size_t errlen);
/* (Re)seed from p->seed and clear the window. */
void sampler_init(sampler *s, const sampler_params *p);
/* Change parameters mid-session (a new turn's settings) keeping RNG and
 * window; a new seed reseeds the RNG. */
void sampler_set_params(sampler *s, const sampler_params *p);
/* Record a token id in the repetition window (prompt tokens and sampled
 * ones). Ids outside the vocabulary given to sampler_next are never
 * penalized. */
void sampler_observe(sampler *s, int32_t token);
/* Sample the next token from `vocab` logits (1..SAMPLER_VOCAB_MAX; logits
 * past SAMPLER_VOCAB_MAX are ignored; finite);
 * `scratch` holds >= 2*vocab floats. Does not observe the token: the caller
 * does, once it is emitted. Uses one RNG draw unless greedy (none). */
int32_t sampler_next(sampler *s, const float *logits, int vocab, float *scratch);

#endif
