/* daemon/main.c — the `lind` command: a table of subcommands. */
#include <stdio.h>
#include <string.h>

#include "daemon/cli.h"
#include "daemon/server.h"

typedef struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *help;
} command;

static const command commands[] = {
    {"info", cli_info, "info --model DIR [--backend B]          config, parameters, state bytes, backend"},
    {"score", cli_score, "score --model DIR FILE [--after-generate N --seed S --temperature T]   bits/byte of FILE"},
    {"generate", cli_generate, "generate --model DIR --prompt TEXT -n N [--seed S --temperature T --top-k K --top-p P]"},
    {"serve", server_main, "serve [--model DIR --socket PATH --db PATH ...]   the daemon (docs/PROTOCOL.md)"},
    {"logits", cli_logits, "logits --model DIR --tokens FILE --out FILE [--chunk N]   float32 logits after every int32 token"},
    {"bench-step", cli_bench_step, "bench-step --model DIR [--max-batch 64 --seconds S]   step time, tokens/s vs SGEMM"},
    {"tokenize", cli_tokenize, "tokenize --tokenizer KIND[:PATH] [--decode] [--chunk N] [--lines] [FILE...]   token ids of texts (--decode: text of ids)"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: lind COMMAND [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) fprintf(f, "  %s\n", commands[i].help);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "lind: unknown command \"%s\"\n", argv[1]);
    usage(stderr);
    return 2;
}
