/*
 * launch/commands.h - the sluice subcommands. Each takes the arguments after its name
 * (argv[0] is the subcommand) and returns the process exit status: 0 success, 1 failure
 * (bad input, failed verification), 2 usage error.
 */
#ifndef SL_COMMANDS_H
#define SL_COMMANDS_H

#include <stdbool.h>
#include <stdio.h>
#include <stdint.h>

#include "core/log.h" /* SL_PRINTF */

int sl_cmd_train(int argc, char **argv);     /* launch/cmd_train.c */
int sl_cmd_eval(int argc, char **argv);      /* launch/cmd_eval.c */
int sl_cmd_generate(int argc, char **argv);  /* launch/cmd_generate.c */
int sl_cmd_data(int argc, char **argv);      /* launch/cmd_data.c */
int sl_cmd_data_show(int argc, char **argv); /* launch/cmd_data_show.c: `sluice data show` */
int sl_cmd_ckpt(int argc, char **argv);      /* launch/cmd_ckpt.c */
int sl_cmd_plot(int argc, char **argv);      /* launch/cmd_plot.c */
int sl_cmd_plan(int argc, char **argv);      /* launch/cmd_plan.c */
int sl_cmd_doctor(int argc, char **argv);    /* launch/cmd_doctor.c */

/* launch/cmd_data.c: the shard files of one PATH argument of `sluice data info | show |
 * verify` (sl_data_resolve_arg: a shard, a directory of shards or a glob, whose directories
 * are listed as a directory argument is), in *files (free with sl_data_paths_free) and *n.
 * What a glob matched that is no shard (a file not named *.shard.zst whose first bytes are not
 * a shard's, a directory without shards) is left out and counted in *skipped (when not NULL), each
 * with a note on stderr when `notes`; a file named otherwise is kept, so that opening it fails. -1
 * after printing why when the argument names no shard. */
int sl_data_cli_files(const char *arg, bool notes, char ***files, int *n, int *skipped);

/* launch/cli.c: "-h" or "--help". */
bool sl_cli_is_help(const char *a);
/* A non-negative decimal integer; with `suffix` also K, M, G, T (binary, optionally followed
 * by "i" and/or "B": 64K, 2GiB, 1MB). 0, or -1 for anything else or an overflow. */
int sl_cli_parse_u64(const char *s, bool suffix, uint64_t *out);
/* Where a command writes the errors of its flags, which it finds before MPI starts: stderr,
 * except in the processes of a launch (mpirun, srun) that are not its rank 0 (the launcher's
 * OMPI_COMM_WORLD_RANK, PMIX_RANK, PMI_RANK or SLURM_PROCID), which write to /dev/null, so that
 * a job of N ranks prints a bad flag once. */
FILE *sl_cli_error_stream(void);
/* A usage error of `sluice <cmd>` (cmd: "train", "data verify", ...) that its --help answers
 * (an unknown option, a missing or stray argument): "sluice <cmd>: error: <msg>" and the
 * pointer "(sluice <cmd> --help shows the options)" on sl_cli_error_stream(), rather than the
 * whole help, which would scroll the error away. Returns 2, the usage error status. */
int sl_cli_usage_error(const char *cmd, const char *fmt, ...) SL_PRINTF(2, 3);
/* The value v of an integer flag of `sluice <cmd>`: a decimal integer in [lo, hi] (0 <= lo),
 * stored in *out: 0; else (junk, a sign, an overflow, out of range; v NULL: no value) 2, the
 * usage error status, after printing "sluice <cmd>: error: <flag>..." with the range. */
int sl_cli_int_flag(const char *cmd, const char *flag, const char *v, long long lo, long long hi,
                    long long *out);

#endif
