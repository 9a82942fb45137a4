/*
 * trainer/trainer.h - the training loop: data, micro-batches, optimizer, evaluation,
 * metrics and saving, on every rank of the job.
 */
#ifndef SL_TRAINER_H
#define SL_TRAINER_H

#include "core/backend.h"
#include "core/comm.h"
#include "trainer/config.h"

/* What `sluice train` asks of a run besides its config (launch/cmd_train.c). */
typedef struct {
    /* NULL or "" for a fresh start, "auto" for the newest committed checkpoint under
     * training.out_dir (a fresh start when there is none), or a checkpoint (or run) directory */
    const char *resume;
    /* lines the start-up banner prints after its first one (how the transport was chosen, each
     * rank's device); NULL for none */
    const char *placement;
    /* the step profile (`--profile`, docs/metrics.md "Step profile"): profile_steps steps from
     * global step profile_from (1-based; 0: this process's second step, or its first when it
     * runs one); profile_steps 0: no profile */
    int profile_steps, profile_from;
    /* the host memory check on the CPU backend (trainer/fit_host.c): host_ranks, the job's
     * ranks on this rank's node (0: one); host_memory, the node's free bytes to assume
     * (SLUICE_HOST_MEMORY; 0: read them from /proc/meminfo and the memory cgroup; -1: no
     * check) */
    int host_ranks;
    int64_t host_memory;
    /* the --set overrides the config was made with (sl_config_apply_sets), n_sets of them:
     * messages about a data path they set name it as "<file> (--set)" */
    const char *const *sets;
    int n_sets;
} sl_train_opts;

/* sl_train's status when a stop signal (SIGTERM, SIGINT, SIGUSR1; trainer/stop_signal.h) ended
 * the run early after committing a checkpoint: 75, EX_TEMPFAIL of sysexits.h ("try again":
 * `--resume auto` continues it), which `sluice train` exits with. */
#define SL_TRAIN_STOPPED 75

/* Runs cfg to completion on the ranks of `world`, computing on backend `be` (created by the
 * launcher from cfg->backend; the caller frees it), as `o` asks (NULL: a fresh start, no
 * profile). Returns 0; SL_TRAIN_STOPPED when a stop signal reached a rank and the run stopped
 * after a checkpoint of its current step (no final/ weights); or 1 after printing an error that
 * names the failing file/key/flag. */
int sl_train(const sl_config *cfg, sl_comm *world, sl_backend *be, const sl_train_opts *o);

#endif
