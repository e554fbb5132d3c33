/* daemon/main.c — the `lind` command: a table of subcommands, each with the
 * full help that `lind CMD --help` prints (and the man page is made from). */
#include <stdio.h>
#include <string.h>

#include "daemon/cli.h"
#include "daemon/server.h"

typedef struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
    const char *help;     /* NULL: the command prints its own (serve) */
} command;

#define SAMPLING_HELP \
    "  --temperature T        0 = greedy (default 0.8)\n" \
    "  --top-k K              keep the K likeliest tokens (0 = off)\n" \
    "  --top-p P              nucleus sampling, P in (0, 1] (1 = off)\n" \
    "  --rep-penalty R        repetition penalty, 1..100 (1 = off)\n" \
    "  --rep-window W         tokens the penalty looks back over (default 64)\n" \
    "  --seed S               the sampler's seed (default 0)\n"

static const command commands[] = {
    {"info", cli_info, "info --model DIR [--backend B]          config, parameters, state bytes, backend",
     "usage: lind info --model DIR [--backend cpu|cuda|auto]\n"
     "\n"
     "Print a model's configuration, parameter count, state bytes per session,\n"
     "fingerprint and the backend it runs on.\n"
     "\n"
     "options:\n"
     "  -m, --model DIR        model directory (docs/MODEL.md), required\n"
     "  --backend B            cpu, cuda or auto (default auto)\n"
     "  --dtype T              matrix weights in memory: f32, bf16, f16, q8 or q4 (default: as stored)\n"
     "  --compute C            products' arithmetic: f32 (default, exact) or bf16 (AVX512_BF16)\n"
     "  --bos, --no-bos        show the BOS rule with this override (as score, generate, serve)\n"
     "  --threads N            CPU backend threads, 1..64 (default $LIND_CPU_THREADS, else every CPU)\n"},
    {"score", cli_score, "score --model DIR FILE [--after-generate N --seed S --temperature T]   bits/byte of FILE",
     "usage: lind score --model DIR [options] FILE\n"
     "\n"
     "Feed FILE through the model and print its bits per byte (how well the model\n"
     "predicts it), optionally after first generating N tokens.\n"
     "\n"
     "options:\n"
     "  -m, --model DIR        model directory, required\n"
     "  --backend B            cpu, cuda or auto (default auto)\n"
     "  --dtype T              matrix weights in memory: f32, bf16, f16, q8 or q4 (default: as stored)\n"
     "  --compute C            products' arithmetic: f32 (default, exact) or bf16 (AVX512_BF16)\n"
     "  --chunk N              prompt tokens fed per batched pass (default 64; the bits do not change)\n"
     "  --threads N            CPU backend threads, 1..64 (default $LIND_CPU_THREADS, else every CPU)\n"
     "  --after-generate N     generate N tokens first (sampled as below), then score FILE\n"
     "                         in the same session, continuing that state\n"
     "  --segment S            score FILE in pieces of S-1 tokens, each from a fresh\n"
     "                         state (BOS first): for a model with a maximum length\n"
     "                         (linformer's max_len), or to match training windows\n"
     "  --bos, --no-bos        feed the model's bos first, or not, whatever its files say\n"
     "                         (default: the model's convention, `lind info`); without BOS\n"
     "                         the first token (of each segment) is fed unscored\n"
     SAMPLING_HELP},
    {"generate", cli_generate, "generate --model DIR --prompt TEXT -n N [--seed S --temperature T --top-k K --top-p P]",
     "usage: lind generate --model DIR [--prompt TEXT] [-n N] [options]\n"
     "\n"
     "Generate from the model directly (no daemon, no session): the prompt, then\n"
     "N sampled tokens, on stdout.\n"
     "\n"
     "options:\n"
     "  -m, --model DIR        model directory, required\n"
     "  --backend B            cpu, cuda or auto (default auto)\n"
     "  -p, --prompt TEXT      text fed first (default none)\n"
     "  --dtype T              matrix weights in memory: f32, bf16, f16, q8 or q4 (default: as stored)\n"
     "  --compute C            products' arithmetic: f32 (default, exact) or bf16 (AVX512_BF16)\n"
     "  -n N                   tokens to generate (default 256)\n"
     "  --threads N            CPU backend threads, 1..64 (default $LIND_CPU_THREADS, else every CPU)\n"
     "  --bos, --no-bos        feed the model's bos before the prompt, or not, whatever its\n"
     "                         files say (default: the model's convention, `lind info`)\n"
     "  --ignore-eos           go on past the model's end token (default: it ends the text,\n"
     "                         unprinted, with a note on stderr)\n"
     SAMPLING_HELP},
    {"logits", cli_logits, "logits --model DIR --tokens FILE --out FILE [--chunk N]   float32 logits after every int32 token",
     "usage: lind logits --model DIR --tokens FILE --out FILE [--chunk N] [--dtype T] [--backend B] [--threads N]\n"
     "\n"
     "Feed the int32 little-endian token ids of FILE to a fresh session (nothing is\n"
     "prepended: start the file with the BOS id if you want one) and write the\n"
     "float32 logits after every token, vocab values per position, to --out.\n"
     "The PyTorch parity test uses it (docs/MODELS.md).\n"
     "\n"
     "options:\n"
     "  -m, --model DIR        model directory, required\n"
     "  --tokens FILE          int32 token ids, required\n"
     "  --out FILE             where the logits go, required\n"
     "  --chunk N              tokens per batched pass (default 64; the logits do not change)\n"
     "  --dtype T              matrix weights in memory: f32, bf16, f16, q8 or q4 (default: as stored)\n"
     "  --compute C            products' arithmetic: f32 (default, exact) or bf16 (AVX512_BF16)\n"
     "  --backend B            cpu, cuda or auto (default auto)\n"
     "  --threads N            CPU backend threads, 1..64 (default $LIND_CPU_THREADS, else every CPU)\n"},
    {"serve", server_main, "serve [--model DIR --socket PATH --db PATH ...]   the daemon (docs/DAEMON.md)", NULL},
    {"bench-step", cli_bench_step, "bench-step --model DIR [--max-batch 64 --seconds S]   step time, tokens/s vs SGEMM",
     "usage: lind bench-step --model DIR [--backend B] [--threads N] [--max-batch N] [--seconds S]\n"
     "\n"
     "Time one batched model step at batch sizes 1..N and compare the tokens/s with\n"
     "the machine's SGEMM rate (docs/BENCHMARKS.md).\n"
     "\n"
     "options:\n"
     "  -m, --model DIR        model directory, required\n"
     "  --backend B            cpu, cuda or auto (default auto)\n"
     "  --max-batch N          largest batch timed, 1..4096 (default 64)\n"
     "  --seconds S            time spent per measurement (default 1)\n"
     "  --warm T               tokens fed to every session before timing (default 3;\n"
     "                         a window kind's cost grows until its ring is full)\n"
     "  --dtype T              matrix weights in memory: f32, bf16, f16, q8 or q4 (default: as stored)\n"
     "  --compute C            products' arithmetic: f32 (default, exact) or bf16 (AVX512_BF16)\n"
     "  --threads N            CPU backend threads, 1..64 (default $LIND_CPU_THREADS, else every CPU)\n"},
    {"tokenize", cli_tokenize,
     "tokenize --tokenizer KIND[:PATH] [--decode] [--chunk N] [--lines] [FILE...]   token ids of a text",
     "usage: lind tokenize --tokenizer KIND[:PATH] [--decode] [--chunk N] [--lines] [FILE...]\n"
     "\n"
     "Print the token ids of FILE's text (or stdin) on one line, or with --decode\n"
     "the text of a line of ids. KIND is bytes, bpe (PATH: a tokenizer.json) or world\n"
     "(PATH: the RWKV World vocabulary file); docs/TOKENIZERS.md.\n"
     "\n"
     "options:\n"
     "  --tokenizer KIND[:PATH]  the tokenizer, required\n"
     "  --decode                 ids in, text out\n"
     "  --chunk N                feed the text in N-byte pieces through the streaming encoder\n"
     "  --lines                  one output line per input line\n"},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: lind COMMAND [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) fprintf(f, "  %s\n", commands[i].summary);
    fprintf(f, "\n`lind COMMAND --help` lists a command's options; `lind --version` prints the version.\n"
               "Documents: README.md, docs/DAEMON.md (lind serve), docs/LINDCTL.md (the client).\n");
}

static int wants_help(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--")) break;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || (!strcmp(argv[1], "help") && argc == 2)) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V")) {
        printf("%s\n", LIND_SERVER_VERSION);
        return 0;
    }
    /* "lind help CMD" is "lind CMD --help". */
    static char help_flag[] = "--help";
    char *help_argv[4] = { argv[0], argv[argc > 2 ? 2 : 1], help_flag, NULL };
    if (!strcmp(argv[1], "help")) {
        argv = help_argv;
        argc = 3;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        const command *c = &commands[i];
        if (strcmp(argv[1], c->name)) continue;
        if (c->help && wants_help(argc - 1, argv + 1)) {
            fputs(c->help, stdout);
            return 0;
        }
        return c->run(argc - 1, argv + 1);
    }
    fprintf(stderr, "lind: unknown command \"%s\"\n", argv[1]);
    usage(stderr);
    return 2;
}
