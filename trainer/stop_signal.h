/*
 * trainer/stop_signal.h - a stop asked of a training run by a signal: SIGTERM (Slurm at the
 * time limit or on scancel, `kill`, a container stopping), SIGINT (Ctrl-C) or SIGUSR1 (Slurm's
 * `--signal=USR1@SECONDS`; mpirun forwards it to every rank). The handler only records the
 * signal; the training loop agrees on it across ranks after each step (trainer.c), saves a
 * checkpoint and stops (docs/checkpoint-format.md, "Stopping a run"). Each handler is
 * installed once-only (SA_RESETHAND): the same signal again ends the process as it would have
 * without sluice, so a second Ctrl-C still stops a run at once.
 */
#ifndef SL_TRAINER_STOP_SIGNAL_H
#define SL_TRAINER_STOP_SIGNAL_H

/* Installs the handlers (saving the ones they replace). */
void sl_stop_signal_install(void);
/* The signal received since sl_stop_signal_install, or 0. */
int sl_stop_signal_received(void);
/* Puts the replaced handlers back; a signal received stays recorded. */
void sl_stop_signal_restore(void);
/* "SIGTERM", "SIGINT", "SIGUSR1" or "signal N". */
const char *sl_stop_signal_name(int sig);

#endif
