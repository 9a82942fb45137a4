/*
 * trainer/optimizer.h - one optimizer step over the flat parameter groups:
 *
 *   1. reduce gradients (trainer/grad_reducer.h): the dense group summed over all ranks,
 *      the expert group over the expert-data-parallel group (the ranks holding the same
 *      experts), in buckets that start during the backward; all-reduced, or with ZeRO-1
 *      reduce-scattered (each rank receives the sum of its shard only);
 *   2. global gradient norm (the expert group's squares summed over the expert-parallel
 *      group, and with ZeRO-1 the shards' squares over each group, so every rank sees the
 *      norm of the whole model), clip factor min(1, clip / norm);
 *   3. AdamW, with weight decay on matrices only. With ZeRO-1 each rank keeps the AdamW
 *      moments of one contiguous shard of each group (1/ranks of the memory), updates only
 *      that shard and all-gathers the updated parameters. AdamW updates the fp32 master
 *      weights and, in bf16 training, writes their bf16 compute copy in the same kernel
 *      (with ZeRO-1 its shard's; the other ranks' shards of the copy are converted from the
 *      gathered master, and a group of one rank has none).
 */
#ifndef SL_OPTIMIZER_H
#define SL_OPTIMIZER_H

#include <stdbool.h>

#include "core/comm.h"
#include "core/params.h"
#include "trainer/config.h"
#include "trainer/grad_reducer.h"

typedef struct {
    sl_params *ps;
    sl_comm *group_comm[SL_PGROUP_COUNT]; /* who shares each group: world / expert-data-parallel */
    sl_comm *ep;                          /* expert-parallel group (NULL: single rank) */
    bool zero1;
    sl_grad_reducer reducer[SL_PGROUP_COUNT];
    /* this rank's shard of each group: [shard_off, shard_off + shard_len) */
    int64_t shard_off[SL_PGROUP_COUNT], shard_len[SL_PGROUP_COUNT];
    int64_t *seg_off[SL_PGROUP_COUNT], *seg_len[SL_PGROUP_COUNT]; /* every rank's shard */
    sl_tensor *shard_g[SL_PGROUP_COUNT]; /* view of the shard's gradient (NULL: empty) */
    sl_tensor *m[SL_PGROUP_COUNT], *v[SL_PGROUP_COUNT]; /* moments of the shard */
    int64_t *layer_offset[SL_PGROUP_COUNT]; /* [layers + 1]: first offset of layer l's params */
    int layers;
    int step;         /* optimizer steps taken */
    sl_tensor *sumsq; /* [groups] device scalars: each group's sum of squared gradients */
    sl_tensor *group_sumsq[SL_PGROUP_COUNT]; /* [1] views of it, made once */
    /* The expert group's sum came from the backward this step (sl_optimizer_expert_sumsq). */
    bool expert_sq_fused;
    /* The AdamW launches of a step: runs of parameters inside this rank's shard that lie back
     * to back in their group's buffers and share the weight decay (one launch for each run
     * instead of one per parameter: 40 instead of 102 on 15A2B cut to 9 layers). Views of the
     * master weight, gradient, moments and compute copy (NULL when there is none or none is written
     * here), made once so that a step allocates no tensor handles. */
    struct sl_opt_slice {
        bool decay;
        sl_tensor *w, *g, *m, *v, *copy;
    } * slices;
    int nslices;
    sl_tensor *hv[2]; /* view handles: the gathered shards' conversion to the compute copy */
} sl_optimizer;

typedef struct {
    sl_comm *dense;  /* ranks replicating the dense parameters (the world) */
    sl_comm *expert; /* ranks holding the same experts (NULL: dense) */
    sl_comm *ep;     /* the expert-parallel group, NULL with one rank; the expert groups of
                      * its ranks together make up `dense` (trainer/topology.c) */
    bool zero1;
    int64_t bucket_bytes;
    int layers;
} sl_optimizer_params;

/* Sets up AdamW over ps (finalized): each parameter group's communicator, this rank's ZeRO-1
 * shard of each group (the whole group without zero1), the moments over that shard, and the
 * gradient reduction's buckets of p->bucket_bytes in layer order. */
void sl_optimizer_init(sl_optimizer *o, sl_params *ps, const sl_optimizer_params *p);
/* Starts a step's gradient reduction (before the last micro-batch's backward). */
void sl_optimizer_begin_reduce(sl_optimizer *o);
/* Backward progress: every parameter of layers >= `layer` has its final gradient
 * (layer -1: all parameters). Starts the buckets that became final. */
void sl_optimizer_grads_ready(sl_optimizer *o, int layer);
/* Where the step's last backward can add the squares of the expert gradients as their
 * weight-gradient GEMMs complete them (sl_model_set_wgrad; the expert group holds those
 * gradients and nothing else): the expert group's device scalar, zeroed, after which
 * finish_reduce takes that group's sum from it instead of a pass over the gradients (25 GB of
 * reads per step at 15A2B's 9 layers). NULL where the squares of the local gradients are not
 * the group's share of the norm: the expert gradients are summed across expert-data-parallel
 * ranks afterwards, or there are none. Call once per step, before the last backward. */
sl_tensor *sl_optimizer_expert_sumsq(sl_optimizer *o);
/* Completes the reduction; returns the global L2 norm of the summed gradient. With ZeRO-1
 * only this rank's shard of each gradient buffer holds the sum afterwards. */
double sl_optimizer_finish_reduce(sl_optimizer *o);
/* AdamW with learning rate lr on gradients scaled by grad_scale (clipping). */
void sl_optimizer_apply(sl_optimizer *o, const sl_train_config *t, double lr, double grad_scale);
/* Forgets the AdamW moments and the step count (a stage with reset_optimizer): the next step
 * is bias-corrected as a first step. */
void sl_optimizer_reset(sl_optimizer *o);
void sl_optimizer_free(sl_optimizer *o);

#endif
