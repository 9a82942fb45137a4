/*
 * trainer/plan_time.h - the per-component compute time of one GPU's step for trainer/plan.c
 * (internal to the plan; docs/plan.md, "Step time").
 */
#ifndef SL_TRAINER_PLAN_TIME_H
#define SL_TRAINER_PLAN_TIME_H

#include "trainer/plan.h"

/* How many micro-batches the trainer would group for the experts' weight gradients in memory
 * mode `mode`: p->wgrad_group where the layers own their rows (not recompute layer), else 1. */
int sl_plan_group(const sl_plan *p, sl_memory_mode mode);
/* The micro-batches of a step as the trainer groups them: `full` groups of `group` and one of
 * `rest` (0: none; 1: a last micro-batch alone); group >= 1. */
void sl_plan_groups(int accum, int group, int *full, int *rest);

/* Fills p->parts, p->n_parts, p->rows_per_expert and p->t_compute (their sum, seconds per
 * optimizer step) from p's shape (micro_tokens, seq_len, micro_batch, accum, ep, zero1, mode,
 * moe_layers, parameters, hw FLOPs, defer_wgrad), p->gpu's rates, p->gpu_tflops and
 * p->expert_path; m is the planned model (its layer count cut as planned).
 * t_wgrad[n] (n = 1 .. SL_DW_MAX_SEGMENTS): the experts' weight-gradient time of one MoE layer
 * and n micro-batches (p->wgrad_grouped: one pass over all n; else n times t_wgrad[1]);
 * t_wgrad[0] is 0. */
void sl_plan_time_parts(const sl_model_config *m, sl_plan *p,
                        double t_wgrad[SL_DW_MAX_SEGMENTS + 1]);

#endif
