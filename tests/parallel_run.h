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
#include "trainer/optimizer.h"
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

/* One training step of two models on the same batches (feed f): the step of a, then of b, each
 * counting the host waits it made (host reads and synchronizations of p's backend), which must
 * be equal (a failed check names the step and what_a / what_b). Returns 0, or -1 when a step
 * failed (its message checked as a failure). */
int sl_prun_step_both(const sl_prun *p, const sl_stepper *a, const sl_stepper *b,
                      const sl_train_config *tc, int step, sl_prun_feed *f, sl_step_result *ra,
                      sl_step_result *rb, const char *what_a, const char *what_b);

/* A model of p's config (micro-batches of SL_PRUN_B x SL_PRUN_S) on p's backend and
 * expert-parallel group, in bf16 with --bf16, with MoE options mo (p's capacity factor and the
 * probs drop policy filled in) and memory mode `mode`, its parameters randomized from `seed`,
 * and its optimizer over p's groups in small buckets (4 KiB: many of them start during the last
 * backward). A failed creation is a failed check. */
typedef struct {
    sl_model *model;
    sl_optimizer opt;
} sl_prun_model;
void sl_prun_model_init(const sl_prun *p, sl_prun_model *r, sl_moe_options mo, sl_memory_mode mode,
                        uint64_t seed);
void sl_prun_model_free(sl_prun_model *r);

/* The fp32 master weights of two models of the same parameters, compared on this rank. */
typedef struct {
    int64_t compared, differ; /* weights; those whose bits differ */
    double worst, largest;    /* the largest |a - b|; the largest |b| */
} sl_prun_weights;
sl_prun_weights sl_prun_compare_weights(const sl_model *a, const sl_model *b);

#endif
