/*
 * trainer/trainer.h - the training loop: data, micro-batches, optimizer, evaluation,
 * metrics and saving, on every rank of the job.
 */
#ifndef SL_TRAINER_H
#define SL_TRAINER_H

#include "core/comm.h"
#include "core/config.h"

/* Runs cfg to completion on the ranks of `world`. Returns 0, or 1 after printing an error
 * that names the failing file/key (on every rank that saw it). */
int sl_train(const sl_config *cfg, sl_comm *world);

#endif
