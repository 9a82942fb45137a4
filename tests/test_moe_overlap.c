/*
 * tests/test_moe_overlap.c - the overlapped MoE backward gives bitwise the results of the
 * plain order.
 *
 *   mpirun -np N test_moe_overlap --ep EP [--steps S] [--capacity F]
 *                                 [--backend cuda [--transport nccl] [--bf16]]
 *
 * Every rank trains two copies of the same model from the same seed on the same batches, one
 * with sl_moe_options.overlap_exchange (parallel.overlap_moe: the expert weight gradients are
 * computed while the input-gradient rows travel back, sl_comm_ialltoallv_grouped) and one
 * without (the exchange first, then the weight gradients). The same kernels run on the same
 * data, only their order and, with NCCL, the stream of the exchange differ, so after every
 * step the losses and gradient norms must be equal and at the end every fp32 master weight
 * bitwise equal, and each step must make the host wait (device reads, synchronizations) as
 * often with the overlap as without. The emulated CUDA runtime's streams are synchronous: under
 * emulation this checks the results and the request plumbing, not the stream ordering
 * (docs/parallelism.md, "Overlap").
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/parallel_run.h"
#include "tests/test_util.h"
#include "trainer/optimizer.h"

enum { B = SL_PRUN_B, S = SL_PRUN_S, GLOBAL_SEQS = SL_PRUN_GLOBAL_SEQS };

int main(int argc, char **argv) {
    sl_prun pr = {.ep = 2, .steps = 3};
    if (sl_prun_parse(&pr, argc, argv, "test_moe_overlap", false) != 0) return 2;
    const int setup = sl_prun_setup(&pr, &argc, &argv);
    if (setup != 0) return setup;
    const int ep = pr.ep, steps = pr.steps, rank = pr.rank, size = pr.size;
    const bool bf16 = pr.bf16;
    const double capacity = pr.capacity;
    sl_backend *be = pr.be;
    sl_comm *dworld = pr.dworld;
    const sl_model_config mc = pr.mc;
    const sl_train_config tc = pr.tc;
    CHECK(ep > 1, "--ep %d: the overlap needs expert parallelism (an exchange)", ep);
    sl_prun_model on, off;
    sl_prun_model_init(&pr, &on, (sl_moe_options){.overlap_exchange = true}, SL_MEMORY_NONE, 91);
    sl_prun_model_init(&pr, &off, (sl_moe_options){.overlap_exchange = false}, SL_MEMORY_NONE, 91);
    int32_t *tokens = malloc(sizeof(int32_t) * B * (S + 1));
    const int micro = GLOBAL_SEQS / (B * size);
    const sl_stepper son = {.model = on.model,
                            .opt = &on.opt,
                            .world = dworld,
                            .micro_batches = micro,
                            .tokens = tokens};
    const sl_stepper soff = {.model = off.model,
                             .opt = &off.opt,
                             .world = dworld,
                             .micro_batches = micro,
                             .tokens = tokens};
    for (int step = 0; step < steps; step++) {
        sl_prun_feed f = {
            .seed = 2000, .step = step, .rank = rank, .world = size, .vocab = mc.vocab_size};
        sl_step_result a = {.metrics = true}, b = {.metrics = true};
        /* the overlap must not make the host wait more often (tests/test_step_syncs.c) */
        if (sl_prun_step_both(&pr, &son, &soff, &tc, step, &f, &a, &b, "with overlap", "without"))
            break;
        CHECK(a.loss == b.loss, "step %d: loss %.9g with overlap, %.9g without", step, a.loss,
              b.loss);
        CHECK(a.grad_norm == b.grad_norm, "step %d: grad norm %.9g with overlap, %.9g without",
              step, a.grad_norm, b.grad_norm);
        if (rank == 0) printf("step %d: loss %.7f grad norm %.6f\n", step, a.loss, a.grad_norm);
    }
    const sl_prun_weights w = sl_prun_compare_weights(on.model, off.model);
    const int64_t differ = w.differ, compared = w.compared;
    CHECK(differ == 0, "%lld of %lld master weights differ with the overlap", (long long)differ,
          (long long)compared);
    if (rank == 0)
        printf("np %d, ep %d%s, backend %s, transport %s%s: %lld weights on rank 0, %lld differ\n",
               size, ep, capacity > 0 ? ", capacity" : "", sl_backend_name(be),
               sl_comm_transport(dworld), bf16 ? ", bf16" : "", (long long)compared,
               (long long)differ);
    const int rc = sl_prun_finish(&pr, "test_moe_overlap");
    sl_prun_model_free(&on);
    sl_prun_model_free(&off);
    free(tokens);
    sl_prun_free(&pr);
    return rc;
}
