/*
 * trainer/lr_schedule.h - learning rate as a function of the optimizer step.
 *
 *   warmup:   lr * (step + 1) / warmup_steps           for step < warmup_steps
 *   cosine:   min_lr + (lr - min_lr) * (1 + cos(pi * p)) / 2,  p = progress after warmup
 *   wsd:      lr until the last decay_fraction of the steps, then linear down to min_lr
 *   constant: lr
 * `step` is 0-based; the schedule spans training.max_steps.
 */
#ifndef SL_LR_SCHEDULE_H
#define SL_LR_SCHEDULE_H

#include "trainer/config.h"

/* The learning rate of 0-based optimizer step `step` under t's schedule (above). */
double sl_lr_at(const sl_train_config *t, int step);

#endif
