/* bench/sampler_bench.c — time per sampled token against vocabulary size.
 *
 * The daemon samples one token per session per step from a row of logits; at
 * vocab 50277 and batch 64 that is 64 × 50277 logits per step, so the sampler
 * must stay O(vocab) with small constants. This measures sampler_next +
 * sampler_observe per token for each setting, over a batch of sessions whose
 * logit rows are all different (like the daemon's logits buffer, fresh from
 * the head GEMM and larger than the cache at big vocabularies).
 *
 * Logit shapes (synthetic, fixed seed):
 *   peaked  Zipf-like, as a language model's: logit = −1.1·ln(rank) + noise,
 *           ranks shuffled over the ids (at T 0.8 the 0.9-nucleus is a few
 *           hundred tokens of 50277)
 *   flat    Gaussian, σ 1: a hard case for top-p (the 0.9-nucleus is most of
 *           the vocabulary)
 * Settings: greedy (T 0); temperature 0.8; top-k 40 (T 0.8); top-p 0.9
 * (T 0.8); and all of top-k 40, top-p 0.9, repetition penalty 1.3 over 64.
 * Each figure is the median of --reps timed passes of --rounds rounds over
 * the batch, timed in this thread's CPU time (CLOCK_THREAD_CPUTIME_ID: the
 * development machine is shared, and wall time would count other programs);
 * prints markdown.
 *
 *   usage: sampler_bench [--vocab N,N,...] [--batch B] [--rounds R]
 *                        [--reps N] [--quick]
 *   BENCH_QUICK=1 in the environment is the same as --quick (fewer rounds). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/benchutil.h"
#include "kernels/clock.h"
#include "recurrent/sampler.h"

#define MAXV 8

typedef struct setting {
    const char *name;
    float temperature, top_p, rep_penalty;
    int top_k;
} setting;

int main(int argc, char **argv)
{
    int vocabs[MAXV] = {256, 50277}, nv = 2, B = 64, rounds = 0, reps = 5;
    int quick = getenv("BENCH_QUICK") && *getenv("BENCH_QUICK");
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--vocab") && i + 1 < argc) {
            nv = 0;
            for (char *p = argv[++i]; *p && nv < MAXV;) {
                vocabs[nv++] = (int)strtol(p, &p, 10);
                if (*p == ',') p++;
            }
        } else if (!strcmp(argv[i], "--batch") && i + 1 < argc) {
            B = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) {
            rounds = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
            reps = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--quick")) {
            quick = 1;
        } else {
            fprintf(stderr, "usage: sampler_bench [--vocab N,N,...] [--batch B] [--rounds R] [--reps N] [--quick]\n");
            return 2;
        }
    }
    for (int v = 0; v < nv; v++)
        if (vocabs[v] < 1 || vocabs[v] > (1 << 18)) {
            fprintf(stderr, "sampler_bench: vocab %d out of 1..262144\n", vocabs[v]);
            return 2;
        }
    if (B < 1 || reps < 1 || rounds < 0) {
        fprintf(stderr, "sampler_bench: batch and reps must be >= 1\n");
        return 2;
    }
    if (quick) reps = 3;
    static const setting S[] = {
        {"greedy", 0.0f, 1.0f, 1.0f, 0},
        {"temperature 0.8", 0.8f, 1.0f, 1.0f, 0},
        {"top-k 40", 0.8f, 1.0f, 1.0f, 40},
        {"top-p 0.9", 0.8f, 0.9f, 1.0f, 0},
        {"top-k 40 + top-p 0.9 + penalty 1.3/64", 0.8f, 0.9f, 1.3f, 40},
    };
    int ns = (int)(sizeof S / sizeof S[0]);

    printf("## Sampler: time per token against vocabulary size\n\n");
    bench_header(stdout, argc, argv);
    printf("\nsampler_next + sampler_observe per token, batch %d (every session its own logit row), "
           "median of %d passes; µs of CPU time per token.\n\n", B, reps);
    printf("| vocab | logits | ");
    for (int k = 0; k < ns; k++) printf("%s | ", S[k].name);
    printf("\n|---|---|");
    for (int k = 0; k < ns; k++) printf("---|");
    printf("\n");
    sampler *sm = malloc(sizeof *sm * (size_t)B);
    for (int v = 0; v < nv; v++) {
        int V = vocabs[v];
        /* 2·10^7 logits per pass: a fraction of a second at every size */
        int R = rounds ? rounds : (int)(2e7 / ((double)V * B) + 1);
        if (quick) R = R / 10 + 1;
        float *l = malloc(sizeof(float) * (size_t)V * (size_t)B);
        float *scratch = malloc(sizeof(float) * 2 * (size_t)V);
        for (int shape = 1; shape >= 0; shape--) {
            bench_fill_logits(l, V, B, shape, 12345u + (uint64_t)V);
            printf("| %d | %s | ", V, shape ? "peaked" : "flat");
            for (int k = 0; k < ns; k++) {
                sampler_params p = sampler_defaults();
                p.temperature = S[k].temperature;
                p.top_k = S[k].top_k;
                p.top_p = S[k].top_p;
                p.rep_penalty = S[k].rep_penalty;
                p.rep_window = 64;
                double t[16];
                int nrep = reps < 16 ? reps : 16;
                long sink = 0;
                for (int r = 0; r < nrep; r++) {
                    for (int b = 0; b < B; b++) {
                        p.seed = (uint64_t)(b + 1);
                        sampler_init(&sm[b], &p);
                    }
                    double t0 = clock_thread_cpu_s();
                    for (int i = 0; i < R; i++)
                        for (int b = 0; b < B; b++) {
                            int tok = sampler_next(&sm[b], l + (size_t)b * V, V, scratch);
                            sampler_observe(&sm[b], tok);
                            sink += tok;
                        }
                    t[r] = (clock_thread_cpu_s() - t0) / ((double)R * B) * 1e6;
                }
                printf("%.2f | ", bench_median(t, (size_t)nrep));
                if (sink < 0) printf("?");
            }
            printf("\n");
            fflush(stdout);
        }
        free(l);
        free(scratch);
    }
    free(sm);
    return 0;
}
