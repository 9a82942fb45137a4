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

typedef struct {
    sl_model *model;
    sl_optimizer opt;
} run;

static void run_init(run *r, const sl_model_config *mc, sl_backend *be, sl_comm *world,
                     const sl_topology *topo, int ep, bool bf16, double capacity, bool overlap) {
    char err[512];
    sl_moe_options mo = {
        .capacity_factor = capacity, .drop_policy = SL_DROP_PROBS, .overlap_exchange = overlap};
    r->model =
        sl_model_create_ex(mc, be, topo->ep, B, S, &mo, bf16 ? SL_BF16 : SL_F32, err, sizeof err);
    CHECK(r->model != NULL, "model create: %s", err);
    sl_params_randomize(&r->model->params, 91);
    sl_optimizer_params op = {.dense = world,
                              .expert = topo->edp,
                              .ep = ep > 1 ? topo->ep : NULL,
                              .bucket_bytes = 4096,
                              .layers = mc->num_hidden_layers};
    sl_optimizer_init(&r->opt, &r->model->params, &op);
}

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
    const sl_topology *topo = &pr.topo;
    const sl_model_config mc = pr.mc;
    const sl_train_config tc = pr.tc;
    char err[512];
    CHECK(ep > 1, "--ep %d: the overlap needs expert parallelism (an exchange)", ep);
    run on, off;
    run_init(&on, &mc, be, dworld, topo, ep, bf16, capacity, true);
    run_init(&off, &mc, be, dworld, topo, ep, bf16, capacity, false);
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
        long long r0 = sl_backend_host_reads(be), s0 = sl_backend_syncs(be);
        CHECK(sl_train_step(&son, &tc, step, sl_prun_batch, &f, &a, err, sizeof err) == 0,
              "step %d (overlap on): %s", step, err);
        const long long reads_on = sl_backend_host_reads(be) - r0,
                        syncs_on = sl_backend_syncs(be) - s0;
        r0 = sl_backend_host_reads(be), s0 = sl_backend_syncs(be);
        CHECK(sl_train_step(&soff, &tc, step, sl_prun_batch, &f, &b, err, sizeof err) == 0,
              "step %d (overlap off): %s", step, err);
        const long long reads_off = sl_backend_host_reads(be) - r0,
                        syncs_off = sl_backend_syncs(be) - s0;
        /* The overlap must not make the host wait more often (tests/test_step_syncs.c). */
        CHECK(reads_on == reads_off && syncs_on == syncs_off,
              "step %d: %lld host reads and %lld syncs with overlap, %lld and %lld without", step,
              reads_on, syncs_on, reads_off, syncs_off);
        CHECK(a.loss == b.loss, "step %d: loss %.9g with overlap, %.9g without", step, a.loss,
              b.loss);
        CHECK(a.grad_norm == b.grad_norm, "step %d: grad norm %.9g with overlap, %.9g without",
              step, a.grad_norm, b.grad_norm);
        if (rank == 0)
            printf("step %d: loss %.7f grad norm %.6f, host reads %lld, syncs %lld\n", step, a.loss,
                   a.grad_norm, reads_on, syncs_on);
    }
    int64_t differ = 0, compared = 0;
    for (int i = 0; i < on.model->params.count; i++) {
        sl_param *p = on.model->params.items[i];
        sl_param *q = off.model->params.items[i];
        CHECK(strcmp(p->name, q->name) == 0 && p->numel == q->numel, "parameter %d: %s vs %s", i,
              p->name, q->name);
        float *a = sl_test_host_f32(p->master), *c = sl_test_host_f32(q->master);
        for (int64_t k = 0; k < p->numel; k++) differ += memcmp(&a[k], &c[k], sizeof(float)) != 0;
        compared += p->numel;
        free(a), free(c);
    }
    CHECK(differ == 0, "%lld of %lld master weights differ with the overlap", (long long)differ,
          (long long)compared);
    if (rank == 0)
        printf("np %d, ep %d%s, backend %s, transport %s%s: %lld weights on rank 0, %lld differ\n",
               size, ep, capacity > 0 ? ", capacity" : "", sl_backend_name(be),
               sl_comm_transport(dworld), bf16 ? ", bf16" : "", (long long)compared,
               (long long)differ);
    const int rc = sl_prun_finish(&pr, "test_moe_overlap");
    sl_optimizer_free(&on.opt);
    sl_optimizer_free(&off.opt);
    sl_model_free(on.model);
    sl_model_free(off.model);
    free(tokens);
    sl_prun_free(&pr);
    return rc;
}
