/* daemon/cli_offline.c — `lind info`, `lind score`, `lind generate`,
 * `lind logits`, `lind bench-step` and `lind tokenize`: the engine driven
 * directly, no daemon. Text goes through the model's own tokenizer; prompts
 * are fed with model_forward in chunks (bit-identical to one token per step). */
#include <cblas.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "daemon/cli.h"
#include "kernels/backend.h"
#include "kernels/softmax.h"
#include "recurrent/file.h"
#include "recurrent/model.h"
#include "recurrent/sampler.h"
#include "recurrent/tokenizer.h"
#include "kernels/clock.h"

/* Options every subcommand shares plus each one's own. */
typedef struct opts {
    const char *model, *backend, *prompt, *tokens, *out;
    long n, after_generate, max_batch, chunk, segment, warm;
    double seconds;
    sampler_params sp;
    int seed_set;
    int bos, ignore_eos;      /* --bos 1 / --no-bos -1 (model_opts.bos); --ignore-eos */
    lind_dtype dtype;
    lind_compute compute;
    backend_opts be;          /* LIND_CPU_THREADS, LIND_CPU_GEMM, ... (backend_opts_from_env) */
} opts;

enum { O_BACKEND = 1000, O_TEMP, O_TOPK, O_TOPP, O_SEED, O_AFTER, O_REP, O_REPWIN, O_MAXB, O_SECS,
       O_DTYPE, O_TOKENS, O_OUT, O_CHUNK, O_COMPUTE, O_SEGMENT, O_WARM, O_BOS, O_NOBOS, O_IGNEOS, O_THREADS };

static int parse_long(const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

static int parse_float(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v)) return -1;
    *out = v;
    return 0;
}

/* Parse argv (positional arguments are left in argv[optind..)) and the
 * backend's environment variables. 0 or 2. */
static int parse(int argc, char **argv, const char *cmd, opts *o)
{
    static const struct option lo[] = {
        {"model", required_argument, 0, 'm'},      {"backend", required_argument, 0, O_BACKEND},
        {"prompt", required_argument, 0, 'p'},     {"temperature", required_argument, 0, O_TEMP},
        {"top-k", required_argument, 0, O_TOPK},   {"top-p", required_argument, 0, O_TOPP},
        {"seed", required_argument, 0, O_SEED},    {"after-generate", required_argument, 0, O_AFTER},
        {"rep-penalty", required_argument, 0, O_REP}, {"rep-window", required_argument, 0, O_REPWIN},
        {"max-batch", required_argument, 0, O_MAXB}, {"seconds", required_argument, 0, O_SECS},
        {"dtype", required_argument, 0, O_DTYPE},  {"tokens", required_argument, 0, O_TOKENS},
        {"out", required_argument, 0, O_OUT},      {"chunk", required_argument, 0, O_CHUNK},
        {"compute", required_argument, 0, O_COMPUTE},
        {"segment", required_argument, 0, O_SEGMENT}, {"warm", required_argument, 0, O_WARM},
        {"bos", no_argument, 0, O_BOS},            {"no-bos", no_argument, 0, O_NOBOS},
        {"ignore-eos", no_argument, 0, O_IGNEOS},  {"threads", required_argument, 0, O_THREADS},
        {0, 0, 0, 0}};
    memset(o, 0, sizeof *o);
    o->sp = sampler_defaults();
    o->n = 256;
    o->max_batch = 64;
    o->seconds = 1.0;
    o->chunk = 64;
    o->warm = 3;
    optind = 1;
    int c;
    double f;
    long l, threads = 0;
    while ((c = getopt_long(argc, argv, "m:p:n:", lo, NULL)) != -1) {
        switch (c) {
        case 'm': o->model = optarg; break;
        case O_BACKEND: o->backend = optarg; break;
        case 'p': o->prompt = optarg; break;
        case 'n':
            if (parse_long(optarg, 0, 1L << 40, &o->n)) goto bad;
            break;
        case O_AFTER:
            if (parse_long(optarg, 0, 1L << 40, &o->after_generate)) goto bad;
            break;
        case O_MAXB:
            if (parse_long(optarg, 1, 4096, &o->max_batch)) goto bad;
            break;
        case O_SECS:
            if (parse_float(optarg, &o->seconds) || o->seconds <= 0) goto bad;
            break;
        case O_TEMP:
            if (parse_float(optarg, &f)) goto bad;
            o->sp.temperature = (float)f;
            break;
        case O_DTYPE:
            if (lind_dtype_parse(optarg, &o->dtype) < 0) {
                fprintf(stderr, "lind %s: --dtype wants f32, bf16, f16, q8 or q4, got \"%s\"\n", cmd, optarg);
                return 2;
            }
            break;
        case O_COMPUTE:
            if (!strcmp(optarg, "f32")) o->compute = LIND_COMPUTE_F32;
            else if (!strcmp(optarg, "bf16")) o->compute = LIND_COMPUTE_BF16;
            else {
                fprintf(stderr, "lind %s: --compute wants f32 or bf16, got \"%s\"\n", cmd, optarg);
                return 2;
            }
            break;
        case O_TOKENS: o->tokens = optarg; break;
        case O_BOS: o->bos = 1; break;
        case O_NOBOS: o->bos = -1; break;
        case O_IGNEOS: o->ignore_eos = 1; break;
        case O_OUT: o->out = optarg; break;
        case O_CHUNK:
            if (parse_long(optarg, 1, 1 << 16, &o->chunk)) goto bad;
            break;
        case O_WARM:
            if (parse_long(optarg, 0, 1L << 30, &o->warm)) goto bad;
            break;
        case O_THREADS:
            if (parse_long(optarg, 1, BACKEND_THREADS_MAX, &threads)) {
                fprintf(stderr, "lind %s: --threads wants a whole number in 1..%d, got \"%s\"\n", cmd,
                        BACKEND_THREADS_MAX, optarg);
                return 2;
            }
            break;
        case O_SEGMENT:
            if (parse_long(optarg, 2, 1L << 40, &o->segment)) goto bad;
            break;
        case O_TOPK:
            if (parse_long(optarg, 0, LIND_MAX_VOCAB, &l)) goto bad;
            o->sp.top_k = (int)l;
            break;
        case O_TOPP:
            if (parse_float(optarg, &f)) goto bad;
            o->sp.top_p = (float)f;
            break;
        case O_REP:
            if (parse_float(optarg, &f)) goto bad;
            o->sp.rep_penalty = (float)f;
            break;
        case O_REPWIN:
            if (parse_long(optarg, 0, SAMPLER_WINDOW_MAX, &l)) goto bad;
            o->sp.rep_window = (int)l;
            break;
        case O_SEED: {
            char *end;
            errno = 0;
            o->sp.seed = strtoull(optarg, &end, 10);
            if (errno || end == optarg || *end) goto bad;
            o->seed_set = 1;
            break;
        }
        default:
            fprintf(stderr, "lind %s: see `lind --help`\n", cmd);
            return 2;
        }
        continue;
    bad:
        fprintf(stderr, "lind %s: bad value \"%s\" for %s\n", cmd, optarg, argv[optind - 1]);
        return 2;
    }
    if (!o->model) {
        fprintf(stderr, "lind %s: --model DIR is required\n", cmd);
        return 2;
    }
    char err[256];
    if (sampler_params_check(&o->sp, err, sizeof err) < 0) {
        fprintf(stderr, "lind %s: %s\n", cmd, err);
        return 2;
    }
    if (backend_opts_from_env(&o->be, err, sizeof err) < 0) {
        fprintf(stderr, "lind %s: %s\n", cmd, err);
        return 2;
    }
    if (threads) o->be.threads = (int)threads;   /* --threads wins over LIND_CPU_THREADS */
    return 0;
}

static model *load(const opts *o, const char *cmd)
{
    char err[512];
    model *m = NULL;
    model_opts mo = {o->backend, o->dtype, o->compute, &o->be, o->bos};
    if (model_load_opts(o->model, &mo, &m, err, sizeof err) < 0) {
        fprintf(stderr, "lind %s: %s\n", cmd, err);
        return NULL;
    }
    return m;
}

/* ---- info ------------------------------------------------------------- */

int cli_info(int argc, char **argv)
{
    opts o;
    if (parse(argc, argv, "info", &o)) return 2;
    model *m = load(&o, "info");
    if (!m) return 1;
    const lind_config *c = model_config(m);
    const tokenizer *tk = model_tokenizer(m);
    size_t block_macs, head_macs, wbytes;
    model_costs(m, &block_macs, &head_macs, &wbytes);
    printf("model:        %s\n", o.model);
    printf("format:       %s\n", c->format[0] ? c->format : "lind");
    printf("fingerprint:  %016llx\n", (unsigned long long)model_fingerprint(m));
    printf("vocab_size:   %d\n", c->vocab_size);
    printf("tokenizer:    %s%s%s (%d ids, %d special)\n", tokenizer_kind_name(tk), c->tokenizer_file[0] ? ", " : "",
           c->tokenizer_file, tokenizer_vocab_size(tk), tokenizer_special_count(tk));
    if (model_bos(m) >= 0) printf("bos:          %d, fed first (%s)\n", c->bos, c->bos_from);
    else printf("bos:          none: the text is fed from the zero state (%s)\n", c->bos_from);
    printf("eos:          ");
    for (int i = 0; i < c->n_eos; i++) printf("%s%d", i ? "," : "", c->eos[i]);
    printf("%s(%s)\n", c->n_eos ? " " : "none ", c->eos_from);
    printf("d_model:      %d\nn_layers:     %d\n", c->d_model, c->n_layers);
    printf("mixers:       ");
    for (int i = 0; i < c->n_layers; i++) printf("%s%s", i ? "," : "", c->layers[i].mixer);
    printf("\nffns:         ");
    for (int i = 0; i < c->n_layers; i++) printf("%s%s", i ? "," : "", c->layers[i].ffn);
    printf("\n");
    for (int i = 0; i < c->n_layers; i++)
        printf("layer %-3d     mixer %s, ffn %s\n", i, c->layers[i].mixer, c->layers[i].ffn);
    printf("norm:         %s\nnorm_eps:     %g\nemb_norm:     %s\nrescale_every: %d\nhead:         %s\n",
           c->norm_rms ? "rms" : "layernorm", (double)c->norm_eps, c->emb_norm ? "true" : "false", c->rescale_every,
           c->tie_head ? "tied to the embedding" : "head.weight");
    printf("weights:      %s (%zu bytes of matrices)\n", lind_dtype_name(model_weights_dtype(m)), wbytes);
    printf("compute:      %s\n", lind_compute_name(model_compute(m)));
    printf("macs/token:   %zu (blocks %zu, head %zu)\n", block_macs + head_macs, block_macs, head_macs);
    printf("parameters:   %zu\n", model_param_count(m));
    printf("state_bytes:  %zu per session\n", model_state_bytes(m));
    printf("backend:      %s (%s)\n", model_backend_name(m), model_device_name(m));
    model_free(m);
    return 0;
}

/* ---- score ------------------------------------------------------------ */

/* −log2 p(y) from logits, in double. */
static double bits_of(const float *l, int vocab, int y) { return -lind_logprob(l, vocab, y) / log(2.0); }

/* Feed tokens[0..n) into slot 0 through model_forward in runs of `chunk`
 * rows (bit-identical to one model_step per token). `last` (vocab floats)
 * receives the logits after the last token when non-NULL. */
static int feed(model *m, const int32_t *tokens, size_t n, long chunk, float *last)
{
    int slots[chunk];
    for (long i = 0; i < chunk; i++) slots[i] = 0;
    for (size_t i = 0; i < n; i += (size_t)chunk) {
        int k = n - i < (size_t)chunk ? (int)(n - i) : (int)chunk, row = k - 1;
        int want = last && i + (size_t)k == n;
        if (model_forward(m, slots, tokens + i, k, want ? &row : NULL, want, want ? last : NULL) < 0) return -1;
    }
    return 0;
}

/* Tokenize a whole text with the model's tokenizer; *toks is malloc'd (the
 * caller frees it). 0, or -1 out of memory. */
static int tokenize_all(const model *m, const unsigned char *text, size_t len, int32_t **toks, size_t *n)
{
    size_t cap = 0, used = 0;
    *toks = NULL;
    *n = 0;
    if (tokenizer_encode(model_tokenizer(m), text, len, 1, toks, n, &cap, &used) < 0) {
        free(*toks);
        *toks = NULL;
        return -1;
    }
    return 0;
}

/* `lind score` on a terminal: a progress line on stderr, redrawn at most
 * five times a second; done = 1 erases it. */
static void score_progress(size_t i, size_t len, double t_start, double *t_last, int done)
{
    if (done) {
        if (*t_last > 0) fputs("\r\033[K", stderr);
        return;
    }
    double t = clock_mono_s();
    if (t - *t_last < 0.2) return;
    *t_last = t;
    fprintf(stderr, "\r\033[K[scored %zu of %zu tokens, %.0f%%, %.0f tokens/s]", i, len,
            len ? 100.0 * (double)i / (double)len : 0.0, (double)i / (t - t_start > 1e-9 ? t - t_start : 1e-9));
    fflush(stderr);
}

int cli_score(int argc, char **argv)
{
    opts o;
    if (parse(argc, argv, "score", &o)) return 2;
    if (optind != argc - 1) {
        fprintf(stderr, "lind score: exactly one FILE to score is required\n");
        return 2;
    }
    const char *path = argv[optind];
    size_t len = 0;
    unsigned char *text = NULL;
    char ferr[1200];
    if (file_read(path, 0, (char **)&text, &len, ferr, sizeof ferr) < 0) {
        fprintf(stderr, "lind score: %s\n", ferr);
        return 1;
    }
    model *m = load(&o, "score");
    if (!m) { free(text); return 1; }
    int V = model_vocab(m), slot = 0, rc = 1;
    int32_t tok = model_bos(m), *toks = NULL;
    size_t ntoks = 0, unscored = 0, unscored_bytes = 0;
    long C = o.chunk;
    float *prev = malloc(sizeof(float) * (size_t)V), *scratch = malloc(sizeof(float) * 2 * (size_t)V);
    float *lg = malloc(sizeof(float) * (size_t)V * (size_t)C);
    int *slots = malloc(sizeof(int) * (size_t)C), *rows = malloc(sizeof(int) * (size_t)C);
    if (!prev || !scratch || !lg || !slots || !rows || tokenize_all(m, text, len, &toks, &ntoks) < 0) {
        fprintf(stderr, "lind score: out of memory\n");
        goto out;
    }
    for (long i = 0; i < C; i++) { slots[i] = 0; rows[i] = (int)i; }
    /* A kind with a maximum length (linformer's max_len, cosformer's
     * horizon) refuses the token past it: say so up front, with the way out. */
    long long maxt = model_max_tokens(m);
    if (o.segment && o.after_generate) {
        fprintf(stderr, "lind score: --segment and --after-generate do not go together (each segment "
                        "starts from a fresh state)\n");
        rc = 2;
        goto out;
    }
    if (tok < 0 && o.after_generate) {
        fprintf(stderr, "lind score: --after-generate samples from a fresh state's logits, which a model fed no "
                        "BOS (%s) does not have; add --bos\n", model_config(m)->bos_from);
        rc = 2;
        goto out;
    }
    if (maxt > 0 && (o.segment ? (unsigned long long)o.segment > (unsigned long long)maxt
                               : (tok >= 0) + (unsigned long long)o.after_generate + ntoks > (unsigned long long)maxt)) {
        if (o.segment)
            fprintf(stderr, "lind score: --segment %ld is longer than the model's maximum length of %lld tokens "
                            "per session (a kind's max_len or horizon)\n", o.segment, maxt);
        else
            fprintf(stderr, "lind score: the model holds at most %lld tokens per session (a kind's max_len or "
                            "horizon) and this needs %llu (BOS, %ld generated, %zu of %s); score it in fresh "
                            "segments with --segment %lld\n", maxt,
                    (tok >= 0) + (unsigned long long)o.after_generate + ntoks, o.after_generate, ntoks, path, maxt);
        goto out;
    }
    if (model_slots_reserve(m, 1) < 0 || model_slot_reset(m, 0) < 0) goto fail;
    double t0 = clock_mono_s();
    /* Without BOS a fresh state predicts nothing: the first token of the
     * text (of each segment) is fed unscored, as Hugging Face's loss skips
     * it. */
    if (tok < 0 && ntoks) {
        size_t bl = 0;
        tokenizer_token_bytes(model_tokenizer(m), toks[0], &bl);
        unscored++;
        unscored_bytes += bl;
        tok = toks[0];
    }
    if (tok >= 0 && model_step(m, &slot, &tok, 1, prev) < 0) goto fail;
    sampler smp;
    sampler_init(&smp, &o.sp);
    for (long i = 0; i < o.after_generate; i++) {
        tok = sampler_next(&smp, prev, V, scratch);
        sampler_observe(&smp, tok);
        if (model_step(m, &slot, &tok, 1, prev) < 0) goto fail;
    }
    /* Token i is scored by the logits after token i-1: the last row of the
     * previous chunk, then the rows of its own chunk. Summed in order, so the
     * figure does not depend on the chunk size. */
    double t1 = clock_mono_s(), bits = 0.0, t_prog = 0;
    int prog = isatty(2);
    /* --segment S: the text in pieces of S − 1 tokens, each after a reset
     * and BOS (S tokens per session, as training windows are). */
    size_t seg = o.segment ? (size_t)o.segment - 1 : ntoks, seg_end = seg;
    if (model_bos(m) < 0 && o.segment) seg++;   /* S tokens of text, the first unscored */
    seg_end = seg;
    for (size_t i = unscored; i < ntoks;) {
        if (prog) score_progress(i, ntoks, t1, &t_prog, 0);
        if (o.segment && i == seg_end) {
            tok = model_bos(m);
            if (tok < 0) {
                size_t bl = 0;
                tokenizer_token_bytes(model_tokenizer(m), toks[i], &bl);
                unscored++;
                unscored_bytes += bl;
                tok = toks[i++];
            }
            if (model_slot_reset(m, 0) < 0 || model_step(m, &slot, &tok, 1, prev) < 0) goto fail;
            seg_end += seg;
            if (i == ntoks) break;
        }
        size_t lim = seg_end < ntoks ? seg_end : ntoks;
        int k = lim - i < (size_t)C ? (int)(lim - i) : (int)C;
        bits += bits_of(prev, V, toks[i]);
        int nl = i + (size_t)k < lim ? k : k - 1;   /* the text's (segment's) last row predicts nothing */
        if (model_forward(m, slots, toks + i, k, rows, nl, nl ? lg : NULL) < 0) goto fail;
        for (int j = 1; j < k; j++) bits += bits_of(lg + (size_t)(j - 1) * V, V, toks[i + (size_t)j]);
        if (nl == k) memcpy(prev, lg + (size_t)(k - 1) * V, sizeof(float) * (size_t)V);
        i += (size_t)k;
    }
    double t2 = clock_mono_s(), dt = t2 - t1 > 0 ? t2 - t1 : 1e-9;
    if (prog) score_progress(ntoks, ntoks, t1, &t_prog, 1);
    printf("file: %s\nbytes: %zu\ntokens: %zu (%s tokenizer)\n", path, len, ntoks,
           tokenizer_kind_name(model_tokenizer(m)));
    if (o.after_generate) printf("after_generate: %ld tokens (seed %llu, temperature %g)\n", o.after_generate,
                                 (unsigned long long)o.sp.seed, (double)o.sp.temperature);
    if (o.segment) printf("segments: %zu of at most %ld tokens, each from a fresh state\n",
                          ntoks ? (ntoks + seg - 1) / seg : 0, o.segment);
    if (unscored)
        printf("unscored: %zu tokens, %zu bytes (no BOS: the first token of the text%s predicts nothing)\n",
               unscored, unscored_bytes, o.segment ? " and of each segment" : "");
    size_t sbytes = len - unscored_bytes, stoks = ntoks - unscored;
    printf("bits_per_byte: %.6f\n", sbytes ? bits / (double)sbytes : 0.0);
    printf("bits_per_token: %.6f\n", stoks ? bits / (double)stoks : 0.0);
    printf("seconds: %.3f (%.0f bytes/s, %.0f tokens/s scored)\n", t2 - t1 + (o.after_generate ? 0 : t1 - t0),
           len / dt, ntoks / dt);
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "lind score: model step failed\n");
out:
    model_free(m);
    free(text);
    free(toks);
    free(prev);
    free(scratch);
    free(lg);
    free(slots);
    free(rows);
    return rc;
}

/* ---- generate ----------------------------------------------------------- */

int cli_generate(int argc, char **argv)
{
    opts o;
    if (parse(argc, argv, "generate", &o)) return 2;
    if (optind != argc) {
        fprintf(stderr, "lind generate: unexpected argument \"%s\"\n", argv[optind]);
        return 2;
    }
    model *m = load(&o, "generate");
    if (!m) return 1;
    const tokenizer *tk = model_tokenizer(m);
    const char *prompt = o.prompt ? o.prompt : "";
    size_t plen = strlen(prompt), n = 0;
    int V = model_vocab(m), rc = 1, slot = 0;
    int32_t *toks = NULL, tok;
    float *logits = malloc(sizeof(float) * (size_t)V), *scratch = malloc(sizeof(float) * 2 * (size_t)V);
    sampler smp;
    sampler_init(&smp, &o.sp);
    /* BOS (when the model feeds one), then the prompt's tokens */
    int32_t bos = model_bos(m);
    size_t cap = 1, used = 0, first = bos >= 0;
    toks = malloc(sizeof *toks);
    if (!logits || !scratch || !toks) goto out;
    if (bos >= 0) toks[n++] = bos;
    if (tokenizer_encode(tk, (const uint8_t *)prompt, plen, 1, &toks, &n, &cap, &used) < 0) goto out;
    if (n == 0) {
        fprintf(stderr, "lind generate: nothing to generate from: the prompt is empty and the model is fed no "
                        "BOS (%s); give --prompt or --bos\n", model_config(m)->bos_from);
        rc = 2;
        goto done;
    }
    for (size_t i = first; i < n; i++) sampler_observe(&smp, toks[i]);
    if (model_slots_reserve(m, 1) < 0 || model_slot_reset(m, 0) < 0) goto out;
    if (feed(m, toks, n, o.chunk, logits) < 0) goto out;
    fwrite(prompt, 1, plen, stdout);
    fflush(stdout);
    for (long i = 0; i < o.n; i++) {
        tok = sampler_next(&smp, logits, V, scratch);
        sampler_observe(&smp, tok);
        if (!o.ignore_eos && model_is_eos(m, tok)) {   /* the end token ends the text, unprinted */
            fprintf(stderr, "[stop: end token %d after %ld tokens]\n", tok, i);
            break;
        }
        size_t bl = 0;
        const uint8_t *b = tokenizer_token_bytes(tk, tok, &bl);
        if (b) fwrite(b, 1, bl, stdout);
        fflush(stdout);
        if (i + 1 < o.n && model_step(m, &slot, &tok, 1, logits) < 0) goto out;
    }
    putchar('\n');
    rc = 0;
out:
    if (rc) fprintf(stderr, "lind generate: model step failed\n");
done:
    free(toks);
    free(logits);
    free(scratch);
    model_free(m);
    return rc;
}

/* ---- logits ------------------------------------------------------------- */

/* `lind logits --model DIR --tokens FILE --out FILE [--chunk N]`: the logits
 * after every position of a token file (int32 little-endian ids), as float32
 * rows of vocab_size, in order. The state starts zeroed and nothing is added
 * (put BOS in the file if it is wanted): the reference implementations the
 * parity tests compare against start the same way. */
int cli_logits(int argc, char **argv)
{
    opts o;
    if (parse(argc, argv, "logits", &o)) return 2;
    if (optind != argc || !o.tokens || !o.out) {
        fprintf(stderr, "lind logits: --tokens FILE and --out FILE are required (and nothing else)\n");
        return 2;
    }
    size_t len = 0;
    unsigned char *raw = NULL;
    char ferr[1200];
    if (file_read(o.tokens, 0, (char **)&raw, &len, ferr, sizeof ferr) < 0) {
        fprintf(stderr, "lind logits: %s\n", ferr);
        return 1;
    }
    if (len % 4) {
        fprintf(stderr, "lind logits: %s: %zu bytes is not a whole number of int32 tokens\n", o.tokens, len);
        free(raw);
        return 1;
    }
    model *m = load(&o, "logits");
    if (!m) { free(raw); return 1; }
    size_t n = len / 4;
    int V = model_vocab(m), rc = 1;
    long C = o.chunk;
    int32_t *toks = malloc(sizeof *toks * (n ? n : 1));
    float *lg = malloc(sizeof(float) * (size_t)V * (size_t)C);
    int *slots = malloc(sizeof(int) * (size_t)C);
    FILE *f = NULL;
    if (!toks || !lg || !slots) { fprintf(stderr, "lind logits: out of memory\n"); goto out; }
    for (size_t i = 0; i < n; i++) {
        toks[i] = (int32_t)((uint32_t)raw[4 * i] | (uint32_t)raw[4 * i + 1] << 8 | (uint32_t)raw[4 * i + 2] << 16 |
                            (uint32_t)raw[4 * i + 3] << 24);
        if (toks[i] < 0 || toks[i] >= V) {
            fprintf(stderr, "lind logits: %s: token %zu is %d, outside the vocabulary 0..%d\n", o.tokens, i,
                    toks[i], V - 1);
            goto out;
        }
    }
    for (long i = 0; i < C; i++) slots[i] = 0;
    if (!(f = fopen(o.out, "wb"))) {
        fprintf(stderr, "lind logits: %s: %s\n", o.out, strerror(errno));
        goto out;
    }
    if (model_slots_reserve(m, 1) < 0 || model_slot_reset(m, 0) < 0) goto step_failed;
    for (size_t i = 0; i < n; i += (size_t)C) {
        int k = n - i < (size_t)C ? (int)(n - i) : (int)C;
        if (model_forward(m, slots, toks + i, k, NULL, k, lg) < 0) goto step_failed;
        if (fwrite(lg, sizeof(float), (size_t)k * (size_t)V, f) != (size_t)k * (size_t)V) {
            fprintf(stderr, "lind logits: writing %s: %s\n", o.out, strerror(errno));
            goto out;
        }
    }
    if (fclose(f) != 0) {
        f = NULL;
        fprintf(stderr, "lind logits: writing %s: %s\n", o.out, strerror(errno));
        goto out;
    }
    f = NULL;
    rc = 0;
    goto out;
step_failed:
    fprintf(stderr, "lind logits: model step failed\n");
out:
    if (f) fclose(f);
    free(raw);
    free(toks);
    free(lg);
    free(slots);
    model_free(m);
    return rc;
}

/* ---- bench-step -------------------------------------------------------- */

/* Every rate is the best of this many equal trials: on a shared machine the
 * best trial is the one least disturbed by other processes. */
#define BENCH_TRIALS 5

/* The matrix products of one token as GEMM shapes {N, K} of y = x·Wᵀ with
 * W [N × K]. A layer's kinds own their products (recurrent/kind.h), so the
 * model reports only their multiply-adds (model_costs): each layer is taken
 * as one GEMM with K = d_model and the layer's share of the blocks'
 * multiply-adds as N, then the head [vocab × d_model]. Same FLOPs as the
 * step's products; the split into separate products is not reproduced. */
typedef struct gemm_shape { int N, K; } gemm_shape;

static int step_gemms(const model *m, gemm_shape *out)
{
    const lind_config *c = model_config(m);
    size_t block_macs, head_macs;
    model_costs(m, &block_macs, &head_macs, NULL);
    int n = 0, d = c->d_model;
    for (int i = 0; i < c->n_layers; i++)
        out[n++] = (gemm_shape){(int)((block_macs / (size_t)c->n_layers + (size_t)d / 2) / (size_t)d), d};
    out[n++] = (gemm_shape){(int)(head_macs / (size_t)d), d};
    return n;
}

/* FLOPs of those products per token (2 per weight): what the SGEMM rates are
 * compared against. Mixer state updates are not counted. */
static double flops_per_token(const gemm_shape *g, int n)
{
    double f = 0;
    for (int i = 0; i < n; i++) f += 2.0 * g[i].N * g[i].K;
    return f;
}

/* A rate in GFLOP per wall-clock second and per CPU-second (best trials). */
typedef struct rates { double wall, cpu; } rates;

/* GFLOP/s of the step's GEMM sequence alone at batch B through the backend
 * (same shapes, same order, nothing else): the rate the step could reach if
 * everything but its matrix products were free. */
static rates gemm_only_rate(backend *be, const gemm_shape *g, int n, int B, double secs)
{
    rates rate = {0, 0};
    if (n < 1 || B < 1) return rate;
    int maxdim = 0;
    for (int i = 0; i < n; i++) {
        if (g[i].N > maxdim) maxdim = g[i].N;
        if (g[i].K > maxdim) maxdim = g[i].K;
    }
    backend_buf *x = NULL, *y = NULL, **w = calloc((size_t)n, sizeof *w);
    float *init = malloc(sizeof(float) * (size_t)maxdim * maxdim);
    if (!w || !init) goto out;
    for (size_t i = 0; i < (size_t)maxdim * maxdim; i++) init[i] = (float)((i * 2654435761u) % 1000) * 1e-4f;
    if (be->ops->buf_new(be, (size_t)B * maxdim, &x) < 0 || be->ops->buf_new(be, (size_t)B * maxdim, &y) < 0)
        goto out;
    be->ops->buf_upload(be, x, 0, init, (size_t)B * maxdim);
    for (int i = 0; i < n; i++) {
        if (backend_weight_new(be, g[i].N, g[i].K, init, &w[i]) < 0) goto out;
    }
    float sink;
    for (int trial = 0; trial < BENCH_TRIALS; trial++) {
        long reps = 0;
        double t0 = clock_mono_s(), c0 = clock_cpu_s(), t;
        do {
            for (int i = 0; i < n; i++)   /* y[B × N] = x[B × K] · W[N × K]ᵀ */
                be->ops->matmul(be, bmview(y, 0, g[i].N), bview(x, 0, g[i].K), w[i], NULL, B, g[i].N, g[i].K, 0);
            be->ops->buf_download(be, y, 0, &sink, 1);
            reps++;
        } while ((t = clock_mono_s() - t0) < secs / BENCH_TRIALS);
        double gflop = flops_per_token(g, n) * B * reps * 1e-9, c = clock_cpu_s() - c0;
        if (gflop / t > rate.wall) rate.wall = gflop / t;
        if (c > 0 && gflop / c > rate.cpu) rate.cpu = gflop / c;
    }
out:
    if (w)
        for (int i = 0; i < n; i++) be->ops->buf_free(be, w[i]);
    free(w);
    free(init);
    be->ops->buf_free(be, x);
    be->ops->buf_free(be, y);
    return rate;
}

/* Best-of rate over `secs` seconds of trials of run(arg, 4): four products
 * of `gflop` GFLOP each, finished when run returns. */
static rates best_rate(void (*run)(void *arg, int reps), void *arg, double gflop, double secs)
{
    rates best = {0, 0};
    double start = clock_mono_s();
    while (clock_mono_s() - start < secs) {
        double t0 = clock_mono_s(), c0 = clock_cpu_s();
        int reps = 4;
        run(arg, reps);
        double g = gflop * reps, t = clock_mono_s() - t0, c = clock_cpu_s() - c0;
        if (g / t > best.wall) best.wall = g / t;
        if (c > 0 && g / c > best.cpu) best.cpu = g / c;
    }
    return best;
}

typedef struct mm_bench {
    backend *be;
    backend_buf *x, *w, *y;
    int M, N, K;
} mm_bench;

static void run_backend_mm(void *arg, int reps)
{
    mm_bench *b = arg;
    float sink;
    for (int r = 0; r < reps; r++)   /* y[M × N] = x[M × K] · W[N × K]ᵀ */
        b->be->ops->matmul(b->be, bmview(b->y, 0, b->N), bview(b->x, 0, b->K), b->w, NULL, b->M, b->N, b->K, 0);
    b->be->ops->buf_download(b->be, b->y, 0, &sink, 1);   /* waits for a device */
}

/* Best-of SGEMM rate of the backend's matmul on M×K · (N×K)ᵀ, GFLOP/s: the
 * yardstick on a GPU backend (cuBLAS). */
static rates sgemm_rate(backend *be, int M, int N, int K, double secs)
{
    mm_bench b = {be, NULL, NULL, NULL, M, N, K};
    rates best = {0, 0};
    float *init = malloc(sizeof(float) * (size_t)(M > N ? M : N) * K);
    if (!init) goto out;
    for (size_t i = 0; i < (size_t)(M > N ? M : N) * K; i++) init[i] = (float)((i * 2654435761u) % 1000) * 1e-3f;
    int ok = be->ops->buf_new(be, (size_t)M * K, &b.x) == 0 && backend_weight_new(be, N, K, init, &b.w) == 0 &&
             be->ops->buf_new(be, (size_t)M * N, &b.y) == 0;
    if (ok) be->ops->buf_upload(be, b.x, 0, init, (size_t)M * K);
    free(init);
    if (ok) best = best_rate(run_backend_mm, &b, 2.0 * M * N * K * 1e-9, secs);
out:
    be->ops->buf_free(be, b.x);
    be->ops->buf_free(be, b.w);
    be->ops->buf_free(be, b.y);
    return best;
}

typedef struct blas_bench {
    const float *a, *b;
    float *c;
    int n;
} blas_bench;

static void run_openblas(void *arg, int reps)
{
    blas_bench *m = arg;
    for (int r = 0; r < reps; r++)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m->n, m->n, m->n, 1.0f, m->a, m->n, m->b, m->n, 0.0f,
                    m->c, m->n);
}

/* The CPU yardstick: OpenBLAS's own SGEMM on every core it sees (the CPU
 * backend's matmul is its packed decode kernel, which is what is being
 * measured, not what it is measured against). The backend runs OpenBLAS
 * single-threaded; that is restored afterwards. */
static rates sgemm_rate_openblas(int n, double secs, int *threads)
{
    rates best = {0, 0};
    float *a = malloc(sizeof(float) * (size_t)n * n), *b = malloc(sizeof(float) * (size_t)n * n);
    float *c = malloc(sizeof(float) * (size_t)n * n);
    *threads = openblas_get_num_procs();
    if (a && b && c) {
        for (size_t i = 0; i < (size_t)n * n; i++) {
            a[i] = (float)((i * 2654435761u) % 1000) * 1e-3f;
            b[i] = (float)((i * 40503u) % 1000) * 1e-3f;
        }
        blas_bench m = {a, b, c, n};
        openblas_set_num_threads(*threads);
        best = best_rate(run_openblas, &m, 2.0 * n * n * n * 1e-9, secs);
        openblas_set_num_threads(1);
    }
    free(a);
    free(b);
    free(c);
    return best;
}

/* Host memory bandwidth: best-of memcpy over 256 MiB, GB/s (read + write). */
static double membw(double secs)
{
    size_t n = 256u << 20;
    char *a = malloc(n), *b = malloc(n);
    double best = 0;
    if (a && b) {
        memset(a, 1, n);
        memset(b, 2, n);
        double start = clock_mono_s();
        while (clock_mono_s() - start < secs) {
            double t0 = clock_mono_s();
            memcpy(b, a, n);
            double g = 2.0 * (double)n / (clock_mono_s() - t0) * 1e-9;
            if (g > best) best = g;
            a[0]++;
        }
    }
    free(a);
    free(b);
    return best;
}

int cli_bench_step(int argc, char **argv)
{
    opts o;
    if (parse(argc, argv, "bench-step", &o)) return 2;
    model *m = load(&o, "bench-step");
    if (!m) return 1;
    const lind_config *c = model_config(m);
    int maxb = (int)o.max_batch, rc = 1, nrows = 0, V = model_vocab(m);
    int *slots = malloc(sizeof(int) * (size_t)maxb);
    int32_t *toks = malloc(sizeof(int32_t) * (size_t)maxb);
    float *logits = malloc(sizeof(float) * (size_t)V * (size_t)maxb);
    gemm_shape *g = malloc(sizeof *g * (size_t)(c->n_layers + 1));
    struct { int B; double step_cpu_gf, alone_cpu_gf, cpu_us_token; } rows[16];
    if (!slots || !toks || !logits || !g || model_slots_reserve(m, maxb) < 0) goto out;
    for (int b = 0; b < maxb; b++) slots[b] = b;
    int ng = step_gemms(m, g);
    double fpt = flops_per_token(g, ng);
    printf("model %s: %zu parameters, %zu state bytes/session, backend %s (%s)\n", o.model, model_param_count(m),
           model_state_bytes(m), model_backend_name(m), model_device_name(m));
    printf("matrix FLOPs per token: %.3f M (model_costs; GEMM-alone runs them as %d GEMMs: one per layer, "
           "then the head)\n", fpt * 1e-6, ng);
    rates peak;
    char yardstick[64];
    if (!strcmp(model_backend_name(m), "cpu")) {
        int nt;
        peak = sgemm_rate_openblas(1024, o.seconds, &nt);
        snprintf(yardstick, sizeof yardstick, "OpenBLAS, %d threads", nt);
    } else {
        peak = sgemm_rate(model_backend(m), 1024, 1024, 1024, o.seconds);
        snprintf(yardstick, sizeof yardstick, "%s backend matmul", model_backend_name(m));
    }
    double bw = membw(o.seconds);
    printf("SGEMM 1024x1024x1024 (%s): %.1f GFLOP/s    host memory bandwidth (memcpy, read+write): %.1f GB/s\n",
           yardstick, peak.wall, bw);
    printf("columns: step time; per-token time; aggregate tokens/s; the step's matrix GFLOP/s; the same GEMMs\n"
           "alone at this batch (GFLOP/s); step rate as a share of GEMMs-alone and of the 1024^3 SGEMM rate\n"
           "(each rate: best of %d trials of %.2f s)\n\n", BENCH_TRIALS, o.seconds / BENCH_TRIALS);
    printf("%6s %10s %10s %10s %9s %11s %9s %9s\n", "batch", "step ms", "us/token", "tokens/s", "GFLOP/s",
           "GEMM-alone", "vs GEMM", "vs peak");
    unsigned seed = 1;
    /* A kind with a maximum length refuses the token past it: the sessions
     * (all at the same length) start over when they reach it, and --warm
     * stops short of it. */
    long long maxt = model_max_tokens(m), held = 0;
    if (maxt > 0) printf("sessions reset every %lld tokens (the model's maximum length)\n", maxt);
    for (int B = 1; B <= maxb; B *= 2) {
        for (int b = 0; b < B; b++) model_slot_reset(m, b);
        held = 0;
        for (long w = 0; w < o.warm && (maxt <= 0 || held + 1 < maxt); w++, held++) {
            for (int b = 0; b < B; b++) toks[b] = (int32_t)(((seed = seed * 1103515245u + 12345u) >> 16) % (unsigned)V);
            if (model_step(m, slots, toks, B, logits) < 0) goto out;
        }
        double step_ms = 1e30, step_cpu_ms = 1e30;
        for (int trial = 0; trial < BENCH_TRIALS; trial++) {
            long steps = 0;
            double t0 = clock_mono_s(), c0 = clock_cpu_s(), t;
            do {
                if (maxt > 0 && held >= maxt) {
                    for (int b = 0; b < B; b++) model_slot_reset(m, b);
                    held = 0;
                }
                for (int b = 0; b < B; b++) toks[b] = (int32_t)(((seed = seed * 1103515245u + 12345u) >> 16) % (unsigned)V);
                if (model_step(m, slots, toks, B, logits) < 0) goto out;
                steps++;
                held++;
            } while ((t = clock_mono_s() - t0) < o.seconds / BENCH_TRIALS);
            double cpu = clock_cpu_s() - c0;
            if (t / steps * 1e3 < step_ms) step_ms = t / steps * 1e3;
            if (cpu > 0 && cpu / steps * 1e3 < step_cpu_ms) step_cpu_ms = cpu / steps * 1e3;
        }
        double tps = B / (step_ms * 1e-3), gf = tps * fpt * 1e-9;
        rates alone = gemm_only_rate(model_backend(m), g, ng, B, o.seconds);
        printf("%6d %10.3f %10.1f %10.0f %9.1f %11.1f %8.0f%% %8.0f%%\n", B, step_ms, step_ms * 1e3 / B, tps, gf,
               alone.wall, 100.0 * gf / alone.wall, 100.0 * gf / peak.wall);
        fflush(stdout);
        if (nrows < 16) {
            rows[nrows].B = B;
            rows[nrows].step_cpu_gf = B * fpt * 1e-9 / (step_cpu_ms * 1e-3);
            rows[nrows].cpu_us_token = step_cpu_ms * 1e3 / B;
            rows[nrows++].alone_cpu_gf = alone.cpu;
        }
        if (B < maxb && B * 2 > maxb) B = maxb / 2;   /* end on max_batch exactly */
    }
    printf("\nper CPU-second of this process (all its threads; unaffected by other jobs taking the CPUs):\n"
           "SGEMM 1024x1024x1024: %.1f GFLOP per CPU-s\n", peak.cpu);
    printf("%6s %12s %12s %9s %9s %13s\n", "batch", "step GF/cpu-s", "GEMM GF/cpu-s", "vs GEMM", "vs peak",
           "cpu-us/token");
    for (int i = 0; i < nrows; i++)
        printf("%6d %12.1f %12.1f %8.0f%% %8.0f%% %13.1f\n", rows[i].B, rows[i].step_cpu_gf, rows[i].alone_cpu_gf,
               100.0 * rows[i].step_cpu_gf / rows[i].alone_cpu_gf, 100.0 * rows[i].step_cpu_gf / peak.cpu,
               rows[i].cpu_us_token);
    rc = 0;
out:
    if (rc) fprintf(stderr, "lind bench-step: failed\n");
    free(slots);
    free(toks);
    free(logits);
    free(g);
    model_free(m);
    return rc;
}

/* `lind tokenize --tokenizer KIND[:PATH] [--decode] [--chunk N] [--lines] [FILE...]`:
 * the token ids of each FILE's (or stdin's) text on one line, space-separated;
 * with --decode, the bytes of the ids read from FILE/stdin. --chunk N feeds
 * the text in N-byte pieces the way a stream does (the undecided tail
 * carried into the next piece), which must give the same ids. --lines
 * encodes each line (without its newline) on its own: one output line each. */
static int tokenize_file(const tokenizer *t, const char *file, int decode, int lines, size_t chunk)
{
    size_t len = 0;
    unsigned char *text = NULL;
    char ferr[1200];
    if (file_read(file, 0, (char **)&text, &len, ferr, sizeof ferr) < 0) {
        fprintf(stderr, "lind tokenize: %s\n", ferr);
        return 1;
    }
    int rc = 0;
    if (decode) {
        char *p = (char *)text, *end;   /* NUL-terminated for strtol (file_read) */
        for (;;) {
            while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r') p++;
            if (!*p) break;
            errno = 0;
            long id = strtol(p, &end, 10);
            size_t bl = 0;
            const uint8_t *b = end != p && !errno && id >= 0 && id <= INT32_MAX ? tokenizer_token_bytes(t, (int32_t)id, &bl) : NULL;
            if (!b) {
                fprintf(stderr, "lind tokenize: %s: \"%.*s\" is not a token id of this tokenizer\n", file, (int)strcspn(p, " \n\t\r"), p);
                rc = 1;
                break;
            }
            fwrite(b, 1, bl, stdout);
            p = end;
        }
        free(text);
        return rc;
    }
    int32_t *toks = NULL;
    size_t ntoks = 0, cap = 0, used;
    for (size_t a = 0; (a < len || (!lines && a == 0)) && !rc;) {
        /* One record: a line (--lines) or the whole text, fed in chunks. */
        const unsigned char *nl = lines ? memchr(text + a, '\n', len - a) : NULL;
        size_t b = lines && nl ? (size_t)(nl - text) : len, start = a, fed = a;
        ntoks = 0;
        for (;;) {
            fed = chunk && fed + chunk < b ? fed + chunk : b;
            int final = fed == b;
            if (tokenizer_encode(t, text + start, fed - start, final, &toks, &ntoks, &cap, &used) < 0) { rc = 1; break; }
            start += used;
            if (final) break;
        }
        for (size_t i = 0; !rc && i < ntoks; i++) printf(i ? " %d" : "%d", toks[i]);
        printf("\n");
        a = b + 1;
    }
    if (rc) fprintf(stderr, "lind tokenize: out of memory\n");
    free(toks);
    free(text);
    return rc;
}

int cli_tokenize(int argc, char **argv)
{
    static const struct option lo[] = {{"tokenizer", required_argument, 0, 't'}, {"decode", no_argument, 0, 'd'},
                                       {"chunk", required_argument, 0, 'c'}, {"lines", no_argument, 0, 'l'},
                                       {0, 0, 0, 0}};
    const char *spec = "bytes";
    int decode = 0, lines = 0, c;
    long chunk = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        if (c == 't') spec = optarg;
        else if (c == 'd') decode = 1;
        else if (c == 'l') lines = 1;
        else if (c == 'c' && !parse_long(optarg, 1, 1L << 30, &chunk)) {}
        else {
            fprintf(stderr, "usage: lind tokenize --tokenizer KIND[:PATH] [--decode] [--chunk N] [--lines] [FILE...]\n");
            return 2;
        }
    }
    char kind[32], err[512];
    const char *colon = strchr(spec, ':');
    size_t kl = colon ? (size_t)(colon - spec) : strlen(spec);
    snprintf(kind, sizeof kind, "%.*s", (int)(kl < sizeof kind ? kl : sizeof kind - 1), spec);
    tokenizer *t = NULL;
    if (tokenizer_load(kind, colon ? colon + 1 : NULL, &t, err, sizeof err) < 0) {
        fprintf(stderr, "lind tokenize: %s\n", err);
        return 1;
    }
    int rc = 0;
    if (optind >= argc) rc = tokenize_file(t, "/dev/stdin", decode, lines, (size_t)chunk);
    for (int i = optind; i < argc && !rc; i++) rc = tokenize_file(t, argv[i], decode, lines, (size_t)chunk);
    tokenizer_free(t);
    if (fflush(stdout)) rc = 1;
    return rc;
}
