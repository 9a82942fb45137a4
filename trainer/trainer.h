/*
 * trainer/trainer.h - the training loop: data, micro-batches, optimizer, evaluation,
 * metrics and saving, on every rank of the job.
 */
#ifndef SL_TRAINER_H
#define SL_TRAINER_H

#include "core/backend.h"
#include "core/comm.h"
#include "trainer/config.h"

/* Runs cfg to completion on the ranks of `world`, computing on backend `be` (created by the
 * launcher from cfg->backend; the caller frees it). `resume`: NULL or "" for a fresh start,
 * "auto" for the newest committed checkpoint under training.out_dir (a fresh start when there
 * is none), or a checkpoint (or run) directory. `placement`: lines the start-up banner prints
 * after its first one (how the transport was chosen, each rank's device: launch/cmd_train.c);
 * NULL for none. Returns 0, or 1 after printing an error that names the failing file/key. */
int sl_train(const sl_config *cfg, sl_comm *world, sl_backend *be, const char *resume,
             const char *placement);

#endif
