/*
 * trainer/plan_time.h - the per-component compute time of one GPU's step for trainer/plan.c
 * (internal to the plan; docs/plan.md, "Step time").
 */
#ifndef SL_TRAINER_PLAN_TIME_H
#define SL_TRAINER_PLAN_TIME_H

#include "trainer/plan.h"

/* Fills p->parts, p->n_parts, p->rows_per_expert and p->t_compute (their sum, seconds per
 * optimizer step) from p's shape (micro_tokens, seq_len, micro_batch, accum, ep, zero1, mode,
 * moe_layers, parameters, hw FLOPs, defer_wgrad), p->gpu's rates, p->gpu_tflops and
 * p->expert_path; m is the planned model (its layer count cut as planned).
 * *t_wgrad_one: the experts' weight-gradient time of one MoE layer and micro-batch;
 * *t_wgrad_pair: of one MoE layer and pair of micro-batches (p->wgrad_pairs: one pass over
 * both; else twice *t_wgrad_one). */
/* Whether the trainer would run p's micro-batches in pairs for the experts' weight gradients in
 * memory mode `mode`: p->defer_wgrad and layers that own their rows (not recompute layer). */
bool sl_plan_pairs(const sl_plan *p, sl_memory_mode mode);

void sl_plan_time_parts(const sl_model_config *m, sl_plan *p, double *t_wgrad_one,
                        double *t_wgrad_pair);

#endif
