/*
 * launch/commands.h - the sluice subcommands. Each takes the arguments after its name
 * (argv[0] is the subcommand) and returns the process exit status: 0 success, 1 failure
 * (bad input, failed verification), 2 usage error.
 */
#ifndef SL_COMMANDS_H
#define SL_COMMANDS_H

int sl_cmd_train(int argc, char **argv); /* trainer/cmd_train.c */
int sl_cmd_eval(int argc, char **argv);  /* trainer/cmd_eval.c */
int sl_cmd_data(int argc, char **argv);  /* io/cmd_data.c */
int sl_cmd_ckpt(int argc, char **argv);  /* launch/cmd_ckpt.c */

#endif
