/*
 * trainer/optimizer.h - one optimizer step over the flat parameter groups:
 *
 *   1. reduce gradients: dense group summed over all ranks, expert group summed over the
 *      expert-data-parallel group (the ranks holding the same experts);
 *   2. global gradient norm (expert groups' squares summed over the expert-parallel group,
 *      so every rank sees the norm of the whole model), clip factor min(1, clip / norm);
 *   3. AdamW: with weight decay on the matrices, without on norm weights.
 */
#ifndef SL_OPTIMIZER_H
#define SL_OPTIMIZER_H

#include "core/comm.h"
#include "core/config.h"
#include "core/params.h"

typedef struct {
    sl_comm *dense;  /* ranks that replicate the dense parameters (the world) */
    sl_comm *expert; /* ranks that hold the same experts (NULL: like dense) */
    sl_comm *ep;     /* expert-parallel group (NULL: single rank) */
    int step;        /* optimizer steps taken */
} sl_optimizer;

/* Sums gradients across ranks; returns the global L2 norm of the summed gradient. */
double sl_optimizer_reduce_grads(sl_optimizer *o, sl_params *ps);
/* Applies AdamW with learning rate lr; grad_scale multiplies the gradients first
 * (clipping). Increments o->step. */
void sl_optimizer_apply(sl_optimizer *o, sl_params *ps, const sl_train_config *t, double lr,
                        double grad_scale);

#endif
