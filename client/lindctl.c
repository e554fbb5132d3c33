/* client/lindctl.c — lindctl's entry point: global options and dispatch to
 * the commands (lindctl_generate.c, lindctl_chat.c, lindctl_sessions.c,
 * lindctl_stress.c). */
#include "client/lindctl.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f)
{
    fprintf(f,
"usage: lindctl [--socket PATH|tcp://HOST:PORT] [--token-file PATH] COMMAND [ARGS...]\n"
"\n"
"Talk to a running `lind serve`.\n"
"\n"
"commands:\n"
"  chat SESSION              interactive chat (Ctrl-C cancels a reply, Ctrl-D quits)\n"
"  generate SESSION [TEXT]   append TEXT and stream the continuation to stdout\n"
"  cancel SESSION            stop the turn in flight on SESSION (from any client)\n"
"  sessions ls|show|rm|fork|export|import|gc   manage stored sessions\n"
"  stats                     the daemon's counters and latency figures\n"
"  stress                    drive many sessions at once and measure\n"
"\n"
"options (every command):\n"
"  --socket PATH   the daemon's socket (default $LIND_SOCKET, else %s);\n"
"                  tcp://HOST:PORT reaches one started with --listen\n"
"  --token-file PATH  over TCP, hello with the token this file holds (its first\n"
"                  line; default $LIND_TOKEN_FILE): the daemon's --http-token-file\n"
"  --help          help for lindctl or for one command (lindctl CMD --help,\n"
"                  or lindctl help CMD)\n"
"  --version       print the version\n"
"\n"
"exit status:\n"
"  0 ok; 1 daemon internal error; 2 bad command line (also an option value the\n"
"  daemon refused as bad_request); 3 no daemon at the socket;\n"
"  4 connection lost; 5 request refused (bad_name, too_large, unknown_op, ...);\n"
"  6 not_found; 7 exists; 8 busy; 9 limit; 10 bad_state; 11 io (daemon's store);\n"
"  12 shutting_down; 13 local file error; 14 unavailable (device failed);\n"
"  15 moved (another node holds the session); 16 conflict (save refused);\n"
"  130 interrupted (Ctrl-C)\n"
"\n"
"documents: docs/LINDCTL.md (this program), docs/PROTOCOL.md (the wire protocol)\n",
            CTL_DEFAULT_SOCKET);
}

int main(int argc, char **argv)
{
    ctl_opts g = { .socket = getenv("LIND_SOCKET") };
    if (!g.socket || !*g.socket) g.socket = CTL_DEFAULT_SOCKET;
    g.token_file = getenv("LIND_TOKEN_FILE");
    static const struct option longopts[] = { CTL_COMMON_LONGOPTS, { "version", no_argument, NULL, 'V' },
                                               { 0, 0, 0, 0 } };
    int opt;
    /* "+": stop at the command name; its own options follow it. */
    while ((opt = getopt_long(argc, argv, "+hV", longopts, NULL)) != -1) {
        switch (opt) {
        case 'V': printf("%s\n", CTL_VERSION); return EXIT_OK;
        case CTL_OPT_SOCKET: g.socket = optarg; break;
        case CTL_OPT_TOKEN_FILE: g.token_file = optarg; break;
        case CTL_OPT_HELP: usage(stdout); return EXIT_OK;
        default: usage(stderr); return EXIT_USAGE;
        }
    }
    if (optind >= argc) {
        usage(stderr);
        return EXIT_USAGE;
    }
    static const struct { const char *name; int (*fn)(const ctl_opts *, int, char **); } cmds[] = {
        { "chat", cmd_chat }, { "generate", cmd_generate }, { "sessions", cmd_sessions },
        { "stats", cmd_stats }, { "stress", cmd_stress }, { "cancel", cmd_cancel },
    };
    const char *name = argv[optind];
    static char help_flag[] = "--help";
    char *help_argv[3] = { NULL, help_flag, NULL };
    if (!strcmp(name, "help")) {
        if (optind + 1 >= argc) {
            usage(stdout);
            return EXIT_OK;
        }
        /* "lindctl help CMD" is "lindctl CMD --help". */
        name = help_argv[0] = argv[optind + 1];
        argc = 2;
        argv = help_argv;
        optind = 0;
    }
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        if (!strcmp(cmds[i].name, name)) {
            int sub_argc = argc - optind;
            char **sub_argv = argv + optind;
            optind = 0;   /* 0 makes glibc getopt start over on the command's argv */
            return cmds[i].fn(&g, sub_argc, sub_argv);
        }
    fprintf(stderr, "lindctl: unknown command '%s' (try lindctl --help)\n", name);
    return EXIT_USAGE;
}
