/*
 * tests/parallel_run.h - the setup shared by the distributed-training tests
 * (test_parallel_equivalence, test_moe_overlap): their command line, the MPI world, the
 * distributed run's backend and transport, the expert-parallel topology, a small MoE model
 * config, the training config and the batches, and the teardown.
 *
 * Batches: B sequences of S tokens a micro-batch, GLOBAL_SEQS a global batch. Sequence g of
 * a global batch is a fixed function of (seed, step, g); a run with `world` ranks gives rank r
 * micro-batch m the sequences (m * world + r) * B .. + B - 1, so a one-rank reference sees the
 * same micro-batch groups in order.
 */
#ifndef SL_TEST_PARALLEL_RUN_H
#define SL_TEST_PARALLEL_RUN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/comm.h"
#include "tests/test_util.h"
#include "trainer/topology.h"
#include "trainer/train_step.h"

enum { SL_PRUN_B = 2, SL_PRUN_S = 16, SL_PRUN_GLOBAL_SEQS = 8 };

typedef struct {
    /* The command line (sl_prun_parse); set ep and steps to the test's defaults first. */
    int ep, steps;
    bool zero1, cuda, nccl, bf16;
    double capacity;
    /* Set by sl_prun_setup. */
    sl_comm *world;  /* MPI's world */
    sl_comm *dworld; /* the distributed run's: world, or the NCCL transport over it */
    sl_backend *be;  /* the distributed run's: CPU, or CUDA with --backend cuda */
    sl_topology topo;
    int rank, size;
    sl_model_config mc; /* three layers, the middle one dense, a gated shared expert */
    sl_train_config tc; /* cosine schedule, steps from --steps, GLOBAL_SEQS sequences a step */
} sl_prun;

/*
 * Reads --ep EP, --steps S, --capacity F, --backend cuda, --transport nccl, --bf16 and, when
 * allow_zero1, --zero1 into p. Returns 0, or 2 after naming an unknown argument (as `name`).
 */
int sl_prun_parse(sl_prun *p, int argc, char **argv, const char *name, bool allow_zero1);

/* Starts MPI and sets up the rest of p (above). Returns 0, or 2 after printing why (MPI then
 * finalized). The CUDA backend skips (exit 77) where there is none; --transport nccl with
 * ranks sharing a GPU returns 77 (a skip: fewer GPUs than ranks) on a real machine and 1 in
 * the emulated build, whose tests give every rank a device of its own. */
int sl_prun_setup(sl_prun *p, int *argc, char ***argv);

/* Every rank's failed checks summed over the world, then sl_test_finish(name): the exit
 * status (1 when any rank failed). Collective. */
int sl_prun_finish(sl_prun *p, const char *name);

/* Frees what sl_prun_setup made and finalizes MPI (after the test freed its models). */
void sl_prun_free(sl_prun *p);

/* What sl_prun_batch generates for one step on one rank (world = 1 for a reference). */
typedef struct {
    uint64_t seed; /* a test's own base seed: the step is added */
    int step, rank, world;
    int vocab;
} sl_prun_feed;

/* An sl_batch_fn (trainer/train_step.h) with an sl_prun_feed as user. */
int sl_prun_batch(void *user, int micro, int32_t *tokens, char *err, size_t errlen);

#endif
