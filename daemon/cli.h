/* daemon/cli.h — the `lind` subcommands. Each takes the arguments after the
 * subcommand name (argv[0] is the subcommand) and returns the process exit
 * status. daemon/main.c dispatches to them from its table. */
#ifndef LIND_DAEMON_CLI_H
#define LIND_DAEMON_CLI_H

/* Offline commands on a model, no daemon (daemon/cli_offline.c). */
int cli_info(int argc, char **argv);
int cli_score(int argc, char **argv);
int cli_generate(int argc, char **argv);
int cli_bench_step(int argc, char **argv);
int cli_logits(int argc, char **argv);
int cli_tokenize(int argc, char **argv);

#endif
