/* bench/jsonmask_bench.c — what structured output's masking adds to each
 * sampled token (recurrent/jsonmask.h), against unconstrained sampling.
 *
 * Vocabulary: GPT-NeoX-20B's 50277 tokens (tests/fixtures/tokenizer) plus
 * synthetic ones up to --vocab (default 65536): each the bytes of two NeoX
 * tokens joined (fixed seed), so the extra tokens look like real ones.
 * Logits: Zipf-like rows as bench/sampler_bench.c's "peaked", a batch of
 * --batch rows; temperature 1 (what structured output is usually run at).
 *
 * Per token, in this thread's CPU time, median of --reps passes:
 *   unconstrained  sampler_next + sampler_observe on the raw row
 *   masked         the daemon's path for a constrained turn (round_once in
 *                  daemon/scheduler.c): jsonmask_allowed for the turn's
 *                  state (a cache hit: the state repeats, as it does from
 *                  token to token inside a string or a number), then
 *                  jsonmask_sample (its three paths are in jsonmask.h: few
 *                  allowed, sample those only; temperature only, draw and
 *                  keep an allowed draw; else mask the row in place), +
 *                  sampler_observe
 *   compute        jsonmask_allowed on a cold cache (a state met for the
 *                  first time: at most once per distinct state of a turn)
 * for automaton states: inside a free string, between values (after ','
 * in an object with declared keys), at a value's start (after ':'), inside
 * a number, at the document's start.
 *
 *   usage: jsonmask_bench [--vocab N] [--batch B] [--rounds R] [--reps N] [--quick] */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "bench/benchutil.h"
#include "kernels/clock.h"
#include "recurrent/jsonfsm.h"
#include "recurrent/jsonmask.h"
#include "recurrent/sampler.h"
#include "recurrent/tokenizer.h"

static const char *SCHEMA =
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{\"type\":\"integer\"},"
    "\"city\":{\"type\":\"string\"},\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}},"
    "\"ok\":{\"type\":\"boolean\"}},\"required\":[\"name\",\"age\"],\"additionalProperties\":false}";

static const struct { const char *name, *prefix; } STATES[] = {
    { "inside a string", "{\"name\": \"John Sm" },
    { "between values (next key)", "{\"name\": \"John\", " },
    { "value start (after ':')", "{\"name\": \"John\", \"age\":" },
    { "inside a number", "{\"name\": \"John\", \"age\": 4" },
    { "document start", "" },
};

int main(int argc, char **argv)
{
    int V = 65536, B = 64, rounds = 20, reps = 5;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--vocab") && i + 1 < argc) V = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc) B = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--quick")) rounds = 3, reps = 3;
        else { fprintf(stderr, "usage: jsonmask_bench [--vocab N] [--batch B] [--rounds R] [--reps N] [--quick]\n"); return 2; }
    }
    if (getenv("BENCH_QUICK")) rounds = 3, reps = 3;
    char path[128], cmd[300], err[256];
    snprintf(path, sizeof path, "/tmp/lind_jsonmask_bench_%d.json", (int)getpid());
    snprintf(cmd, sizeof cmd, "gzip -dc tests/fixtures/tokenizer/20B_tokenizer.json.gz > %s", path);
    tokenizer *t = NULL;
    if (system(cmd) != 0 || tokenizer_load("bpe", path, &t, err, sizeof err)) {
        fprintf(stderr, "jsonmask_bench: cannot load the GPT-NeoX tokenizer (run from the repository root): %s\n", err);
        return 1;
    }
    remove(path);
    int NV = tokenizer_vocab_size(t);
    if (V < NV) V = NV;
    const uint8_t **tb = calloc((size_t)V, sizeof *tb);
    size_t *tl = calloc((size_t)V, sizeof *tl);
    uint8_t **own = calloc((size_t)V, sizeof *own);
    uint64_t seed = 7;
    for (int id = 0; id < V; id++) {
        if (id < NV) { tb[id] = tokenizer_token_bytes(t, id, &tl[id]); continue; }
        size_t la = 0, lb = 0;
        const uint8_t *a = tokenizer_token_bytes(t, 1000 + (int)(bench_lcg(&seed) % 49000), &la);
        const uint8_t *b = tokenizer_token_bytes(t, 1000 + (int)(bench_lcg(&seed) % 49000), &lb);
        own[id] = malloc(la + lb);
        memcpy(own[id], a, la);
        memcpy(own[id] + la, b, lb);
        tb[id] = own[id];
        tl[id] = la + lb;
    }
    int32_t eos = 0;
    jsonmask_vocab *jv = NULL;
    double t0 = clock_mono_s();
    if (jsonmask_vocab_from(V, tb, tl, &eos, 1, &jv, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
    double index_ms = (clock_mono_s() - t0) * 1e3;
    json_t *sj = json_loads(SCHEMA, 0, NULL);
    jsonfsm_schema *schema = NULL;
    if (jsonfsm_schema_compile(sj, &schema, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
    json_decref(sj);

    float *logits = malloc(sizeof(float) * (size_t)V * (size_t)B);
    float *adj = malloc(sizeof(float) * (size_t)V);
    float *scratch = malloc(sizeof(float) * 2 * (size_t)V);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)V);
    bench_fill_logits(logits, V, B, 1, 42);
    float *pristine = malloc(sizeof(float) * (size_t)V * (size_t)B);
    memcpy(pristine, logits, sizeof(float) * (size_t)V * (size_t)B);
    sampler sm;
    sampler_params sp = { 1.0f, 0, 1.0f, 1.0f, 0, 1 };
    sampler_init(&sm, &sp);

    bench_header(stdout, argc, argv);
    printf("\nVocabulary %d (GPT-NeoX's %d + %d synthetic), batch %d rows, temperature 1; µs of CPU time per "
           "token, median of %d passes of %d rounds. Indexing the vocabulary (once per tokenizer): %.1f ms.\n\n",
           V, NV, V - NV, B, reps, rounds, index_ms);
    printf("| sampling | automaton state | allowed tokens | unconstrained | masked (cache hit) | overhead | compute (cold) |\n");
    printf("|---|---|---|---|---|---|---|\n");
    double *tm = malloc(sizeof(double) * (size_t)reps);
    volatile int32_t sink = 0;
    static const struct { const char *name; float top_p; int masked_row; } SET[] = {
        { "T 1", 1.0f, 0 }, { "T 1, logprobs (row masked in place)", 1.0f, 1 }, { "T 1, top-p 0.9", 0.9f, 0 } };
    for (int set = 0; set < 3; set++) {
        sampler_params p = sp;
        p.top_p = SET[set].top_p;
        sampler_set_params(&sm, &p);
        memcpy(logits, pristine, sizeof(float) * (size_t)V * (size_t)B);
        for (int r = 0; r < reps; r++) {
            double c0 = clock_thread_cpu_s();
            for (int k = 0; k < rounds; k++)
                for (int b = 0; b < B; b++) {
                    int32_t tok = sampler_next(&sm, logits + (size_t)b * V, V, scratch);
                    sampler_observe(&sm, tok);
                }
            tm[r] = (clock_thread_cpu_s() - c0) / (rounds * B) * 1e6;
        }
        double base = bench_median(tm, (size_t)reps);
        for (size_t s = 0; s < sizeof STATES / sizeof STATES[0]; s++) {
            if (set > 0 && s > 0) break;   /* logprobs and top-p change only the dense case's path */
            jsonfsm f;
            jsonfsm_init(&f, schema);
            jsonfsm_feed_bytes(&f, (const uint8_t *)STATES[s].prefix, strlen(STATES[s].prefix));
            jsonmask *m = jsonmask_new(jv);
            size_t n = 0;
            jsonmask_allowed(m, &f, &n);   /* warm */
            memcpy(logits, pristine, sizeof(float) * (size_t)V * (size_t)B);   /* unmasked rows again */
            for (int r = 0; r < reps; r++) {
                double c0 = clock_thread_cpu_s();
                for (int k = 0; k < rounds; k++)
                    for (int b = 0; b < B; b++) {
                        /* the daemon's path (round_once in daemon/scheduler.c) */
                        const uint64_t *bits = jsonmask_allowed(m, &f, &n);
                        int32_t tok = jsonmask_sample(&sm, bits, n, logits + (size_t)b * V, V, adj, ids, scratch,
                                                      SET[set].masked_row, NULL);
                        sampler_observe(&sm, tok);
                        sink += tok;
                    }
                tm[r] = (clock_thread_cpu_s() - c0) / (rounds * B) * 1e6;
            }
            double masked = bench_median(tm, (size_t)reps);
            for (int r = 0; r < reps; r++) {
                int cold = rounds < 5 ? rounds : 5;
                double c0 = clock_thread_cpu_s();
                for (int k = 0; k < cold; k++) {
                    jsonmask_free(m);
                    m = jsonmask_new(jv);
                    jsonmask_allowed(m, &f, &n);
                }
                tm[r] = (clock_thread_cpu_s() - c0) / cold * 1e6;
            }
            double cold = bench_median(tm, (size_t)reps);
            printf("| %s | %s | %zu | %.2f | %.2f | %+.0f %% | %.0f |\n", SET[set].name, STATES[s].name, n, base,
                   masked, (masked / base - 1) * 100, cold);
            jsonmask_free(m);
        }
    }
    (void)sink;
    free(tm);
    free(logits);
    free(pristine);
    free(adj);
    free(scratch);
    free(ids);
    free(schema);
    jsonmask_vocab_free(jv);
    for (int id = 0; id < V; id++) free(own[id]);
    free(own);
    free(tb);
    free(tl);
    tokenizer_free(t);
    return 0;
}
