/*
 * trainer/train_step.h - one optimizer step on every rank: micro-batches, gradient
 * reduction overlapped with the last backward, clipping, AdamW, router-bias update, and the
 * step's statistics summed over ranks.
 *
 * Every token of the global batch weighs the same: each micro-batch's cross-entropy gradient
 * is scaled by 1 / global_batch_tokens and gradients are summed over ranks, so the step
 * follows the gradient of the global mean loss whatever the number of ranks; the auxiliary
 * losses are averaged over micro-batches and ranks.
 */
#ifndef SL_TRAIN_STEP_H
#define SL_TRAIN_STEP_H

#include "core/comm.h"
#include "model/model.h"
#include "trainer/config.h"
#include "trainer/optimizer.h"

/* Fills one micro-batch tokens [batch, seq + 1]. Returns 0, or -1 with a message in err. */
typedef int (*sl_batch_fn)(void *user, int micro, int32_t *tokens, char *err, size_t errlen);

typedef struct {
    sl_model *model;
    sl_optimizer *opt;
    sl_comm *world;
    int micro_batches; /* per rank per step */
    int32_t *tokens;   /* [batch, seq + 1] staging */
    /* The MoE layers' expert weight gradients over groups of this many micro-batches (1: each
     * its own; 2: 1 and 2, 3 and 4, ...; the last group may be shorter, a last one alone
     * computes its own): each group's in one pass over the fp32 gradients, in its last
     * micro-batch's backward (sl_train_wgrad_group decides). */
    int wgrad_group;
} sl_stepper;

/* What training.defer_expert_wgrad's choice depends on besides the setting. */
typedef struct {
    bool can_park; /* MoE layers that train and own their activations (sl_model_can_defer_wgrad) */
    bool one_pass; /* the pair runs in one pass: bf16 on compute capability 9.x */
    bool ep_overlap; /* expert parallelism with parallel.overlap_moe */
} sl_defer_facts;

/* The choice, one rule for the trainer, `sluice plan` and gpu_train_bench's estimate: "on" where
 * the layers can park; "auto" where, in addition, the pair runs in one pass (the Hopper grouped
 * GEMM; elsewhere the pair is the same two passes, so only memory would change) and not with
 * ep_overlap (there each micro-batch's weight gradients hide its own exchange,
 * docs/parallelism.md); "off" never. */
bool sl_defer_wgrad_decide(const char *setting, const sl_defer_facts *f);

/* training.expert_wgrad_group's size of a group, one rule for the trainer, `sluice plan` and
 * gpu_train_bench: the setting where it names one (2 to 4); 0 ("auto", the default) 4 where
 * the parked micro-batches can be kept as tokens (no expert parallelism, and
 * training.park_expert_rows not "rows"), else 2. Four micro-batches in one pass measured 11.2
 * ms (3.9%) less per step than pairs on an H200 (2026-11-28) for 0.21 GiB more per layer as
 * tokens; as rows (expert parallelism) three parked micro-batches would cost three times the
 * pairs' memory, unmeasured in time (docs/performance.md). */
int sl_wgrad_group_decide(int setting, const char *park_setting, bool expert_parallel);

/* sl_defer_wgrad_decide for model m on backend be. The results: bitwise the same where the pair
 * is two passes; with the one-pass kernel each expert's dW sums both micro-batches' rows in one
 * fp32 accumulation (a different rounding). */
bool sl_train_defer_wgrad(const sl_train_config *tc, const sl_backend *be, const sl_model *m);
/* The stepper's wgrad_group: sl_wgrad_group_decide's size where sl_train_defer_wgrad defers,
 * else 1. */
int sl_train_wgrad_group(const sl_train_config *tc, const sl_backend *be, const sl_model *m);
/* Whether a group of `group` micro-batches (the effective size: at most the step's) parks
 * tokens rather than rows (training.park_expert_rows, one rule for the trainer, `sluice plan`
 * and gpu_train_bench): "tokens" always, "auto" for groups of 3 or more (pairs keep their rows:
 * one parked micro-batch costs less memory than the two passes it would add per layer cost
 * time), "rows" never. Layers with expert parallelism keep rows whatever this says. */
bool sl_park_tokens_decide(const char *setting, int group);
/* The largest group a step of micro_batches micro-batches forms: sl_train_wgrad_group, at most
 * micro_batches. */
int sl_train_wgrad_group_in_step(const sl_train_config *tc, const sl_backend *be, const sl_model *m,
                                 int micro_batches);
/* Whether model m's MoE layers park tokens (sl_park_tokens_decide for
 * sl_train_wgrad_group_in_step), none with expert parallelism. */
bool sl_train_park_tokens(const sl_train_config *tc, const sl_backend *be, const sl_model *m,
                          int micro_batches);
/* The stepper's wgrad_group for model m (sl_train_wgrad_group), with the MoE layers told how
 * to park (sl_train_park_tokens). */
int sl_train_prepare_wgrad(const sl_train_config *tc, const sl_backend *be, sl_model *m,
                           int micro_batches);

typedef struct {
    bool metrics; /* in: also compute lbl, zloss and gate_score (else they are NaN) */
    double loss;  /* mean token cross-entropy over the global batch */
    double lbl;   /* mean over ranks, micro-batches and MoE layers of E sum f_i P_i */
    double zloss;
    double gate_score;
    double grad_norm; /* before clipping */
    double lr;
    int64_t *counts; /* [layers * experts] tokens routed per expert over the global batch
                      * (caller-owned; NULL to skip) */
} sl_step_result;

/* Runs step `step` (0-based). Returns 0, or -1 when the batch function failed (the caller
 * must stop every rank: other ranks may be waiting in a collective). */
int sl_train_step(const sl_stepper *s, const sl_train_config *tc, int step, sl_batch_fn next,
                  void *user, sl_step_result *res, char *err, size_t errlen);

#endif
