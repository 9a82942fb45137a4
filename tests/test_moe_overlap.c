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

#include "core/comm_nccl.h"
#include "core/rng.h"
#include "tests/test_util.h"
#include "trainer/optimizer.h"
#include "trainer/topology.h"
#include "trainer/train_step.h"

enum { B = 2, S = 16, GLOBAL_SEQS = 8 };

typedef struct {
    int step, rank, world;
    int vocab;
} feed;

static int make_batch(void *user, int micro, int32_t *tokens, char *err, size_t errlen) {
    (void)err, (void)errlen;
    const feed *f = user;
    for (int b = 0; b < B; b++) {
        const int g = (micro * f->world + f->rank) * B + b;
        sl_rng r;
        sl_rng_init(&r, 2000 + (uint64_t)f->step, (uint64_t)g);
        for (int i = 0; i <= S; i++)
            tokens[b * (S + 1) + i] = (int32_t)sl_rng_below(&r, (uint64_t)f->vocab);
    }
    return 0;
}

/* Two MoE layers around a dense one, with a gated shared expert. */
static sl_model_config model_config(void) {
    sl_model_config c = sl_test_model_config();
    c.num_hidden_layers = 3;
    c.dense_layer[1] = true;
    c.shared_expert_intermediate_size = 12;
    return c;
}

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
    int ep = 2, steps = 3;
    bool cuda = false, nccl = false, bf16 = false;
    double capacity = 0.0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--ep") == 0 && i + 1 < argc)
            ep = atoi(argv[++i]);
        else if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc)
            steps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--capacity") == 0 && i + 1 < argc)
            capacity = atof(argv[++i]);
        else if (strcmp(argv[i], "--backend") == 0 && i + 1 < argc)
            cuda = strcmp(argv[++i], "cuda") == 0;
        else if (strcmp(argv[i], "--transport") == 0 && i + 1 < argc)
            nccl = strcmp(argv[++i], "nccl") == 0;
        else if (strcmp(argv[i], "--bf16") == 0)
            bf16 = true;
        else {
            fprintf(stderr, "test_moe_overlap: unknown argument %s\n", argv[i]);
            return 2;
        }
    }
    sl_comm *world = sl_comm_init_world(&argc, &argv);
    const int rank = sl_comm_rank(world), size = sl_comm_size(world);
    char err[512];
    sl_backend *be = cuda ? sl_test_cuda_or_skip(NULL) : sl_test_cpu();
    sl_comm *dworld = world;
#ifdef SLUICE_WITH_CUDA
    if (nccl) dworld = sl_comm_nccl_create(world, be, err, sizeof err);
#endif
    if (!dworld || (nccl && dworld == world)) {
        fprintf(stderr, "the nccl transport: %s\n", dworld ? "not in this build" : err);
        sl_comm_finalize(world);
        return 2;
    }
    sl_topology topo;
    if (sl_topology_init(&topo, dworld, ep, 8, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        sl_comm_finalize(world);
        return 2;
    }
    CHECK(ep > 1, "--ep %d: the overlap needs expert parallelism (an exchange)", ep);
    const sl_model_config mc = model_config();
    sl_train_config tc;
    memset(&tc, 0, sizeof tc);
    tc.seq_len = S;
    tc.micro_batch_size = B;
    tc.global_batch_tokens = (int64_t)GLOBAL_SEQS * S;
    tc.max_steps = steps;
    tc.lr = 3e-3;
    tc.min_lr = 3e-4;
    tc.warmup_steps = 1;
    tc.schedule = SL_LR_COSINE;
    tc.beta1 = 0.9;
    tc.beta2 = 0.95;
    tc.eps = 1e-8;
    tc.weight_decay = 0.1;
    tc.grad_clip = 1.0;
    run on, off;
    run_init(&on, &mc, be, dworld, &topo, ep, bf16, capacity, true);
    run_init(&off, &mc, be, dworld, &topo, ep, bf16, capacity, false);
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
        feed f = {.step = step, .rank = rank, .world = size, .vocab = mc.vocab_size};
        sl_step_result a = {.metrics = true}, b = {.metrics = true};
        long long r0 = sl_backend_host_reads(be), s0 = sl_backend_syncs(be);
        CHECK(sl_train_step(&son, &tc, step, make_batch, &f, &a, err, sizeof err) == 0,
              "step %d (overlap on): %s", step, err);
        const long long reads_on = sl_backend_host_reads(be) - r0,
                        syncs_on = sl_backend_syncs(be) - s0;
        r0 = sl_backend_host_reads(be), s0 = sl_backend_syncs(be);
        CHECK(sl_train_step(&soff, &tc, step, make_batch, &f, &b, err, sizeof err) == 0,
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
    double fails = sl_test_failures;
    sl_comm_allreduce_sum_f64(world, &fails, 1);
    if (rank == 0)
        printf("np %d, ep %d%s, backend %s, transport %s%s: %lld weights on rank 0, %lld differ\n",
               size, ep, capacity > 0 ? ", capacity" : "", sl_backend_name(be),
               sl_comm_transport(dworld), bf16 ? ", bf16" : "", (long long)compared,
               (long long)differ);
    int rc = sl_test_finish("test_moe_overlap");
    sl_optimizer_free(&on.opt);
    sl_optimizer_free(&off.opt);
    sl_model_free(on.model);
    sl_model_free(off.model);
    free(tokens);
    sl_topology_free(&topo);
    if (dworld != world) sl_comm_free(dworld);
    if (cuda) sl_backend_free(be);
    sl_comm_finalize(world);
    return fails > 0 ? 1 : rc;
}
