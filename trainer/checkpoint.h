/*
 * trainer/checkpoint.h - what a training checkpoint holds, written and read by every rank
 * (io/checkpoint.h is the format; docs/checkpoint-format.md, "What the trainer stores").
 *
 * Tensors, each under a global name and shape, so that a checkpoint loads on any number of
 * ranks and any expert-parallel / ZeRO-1 layout:
 *   <parameter name>           the fp32 master weight, e.g. model.layers.3.self_attn.q_proj.weight;
 *                              an expert stack has its global shape [num_experts, ...] and each
 *                              expert slice is written by the first rank of the ranks holding it
 *   optim.m.<name>, optim.v.<name>
 *                              the AdamW moments with the parameter's global shape; with ZeRO-1
 *                              every rank writes the part of each parameter inside its shard
 *   router.bias.<layer>        the aux-loss-free selection bias of MoE layer <layer> [E]
 * Every piece is read back from the device through the tensor API, so it works on any backend.
 * Loading reads exactly the ranges this rank holds in the current layout.
 */
#ifndef SL_TRAINER_CHECKPOINT_H
#define SL_TRAINER_CHECKPOINT_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "io/checkpoint.h"
#include "model/model.h"
#include "trainer/optimizer.h"
#include "trainer/topology.h"

typedef struct {
    sl_model *model; /* parameters (master weights) and the routers' biases */
    sl_optimizer *opt;
    const sl_topology *topo;
} sl_train_ckpt;

typedef struct {
    const char *out_dir; /* checkpoints go to <out_dir>/checkpoints/step-<step> */
    int64_t step;
    int keep_last;
    int64_t keep_every;
    const int64_t *keep_steps; /* steps whose checkpoints retention keeps (stage ends) */
    int n_keep_steps;
} sl_train_ckpt_save_opts;

/* Collective over topo->world: every rank writes its pieces, rank 0 commits with `state`
 * (its train_state; other ranks pass NULL). 0 on every rank when committed, else -1 with a
 * message in err (the previous checkpoint stays the newest). */
int sl_train_ckpt_save(const sl_train_ckpt *t, const sl_train_ckpt_save_opts *o, const cJSON *state,
                       char *err, size_t errlen);

/* An asynchronous save: the pieces are copied to host memory (the only time the step waits),
 * then a background thread writes this rank's files while training goes on; finish joins the
 * thread and commits (collective: every rank calls it at the same point of the loop). At most
 * one is in flight. `state` (rank 0's, else NULL) is taken over. NULL with a message when the
 * save could not start. */
typedef struct sl_train_ckpt_async sl_train_ckpt_async;
sl_train_ckpt_async *sl_train_ckpt_save_async(const sl_train_ckpt *t,
                                              const sl_train_ckpt_save_opts *o, cJSON *state,
                                              char *err, size_t errlen);
/* Waits for the write and commits; frees a. 0 on every rank when committed, else -1. */
int sl_train_ckpt_save_finish(sl_train_ckpt_async *a, char *err, size_t errlen);

/* Loads the tensors this rank holds from an open checkpoint: master weights (and their compute
 * copies), AdamW moments, router biases. Checks every tensor's global shape first (a
 * mismatch names the tensor). The optimizer step, data position and the rest of the train
 * state are the caller's (sl_ckpt_train_state). 0, or -1 with a message. */
int sl_train_ckpt_load(const sl_train_ckpt *t, sl_ckpt *ck, char *err, size_t errlen);

/* Only the master weights (and their compute copies) of `m`, e.g. for evaluation: every
 * parameter's global shape is checked, then the ranges this model holds are read. 0, or -1 with
 * a message. */
int sl_train_ckpt_load_weights(sl_model *m, sl_ckpt *ck, char *err, size_t errlen);

#endif
