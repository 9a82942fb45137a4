/*
 * tests/test_defer_wgrad.c - the experts' weight gradients over pairs of micro-batches
 * (training.defer_expert_wgrad, sl_stepper.defer_wgrad) against the immediate ones.
 *
 *   mpirun -np N test_defer_wgrad --ep EP [--steps S] [--capacity F]
 *                                 [--backend cuda [--transport nccl] [--bf16]]
 *
 * Every rank trains two copies of the same model from the same seed on the same batches, one
 * deferring (the first micro-batch of each pair parks the rows its expert weight gradients
 * read, the second computes both micro-batches' gradients in one sl_op_grouped_matmul_dw_pair)
 * and one not, with the step's micro-batches per rank as the world gives them and, where that
 * is 3 or more, one fewer (an odd count: the last micro-batch alone computes its own), and
 * on the CPU once more with recompute "attention" (the MoE layers keep their own rows). The
 * pair is the two grouped_matmul_dw calls of the immediate order on the CPU and wherever the
 * CUDA backend has no one-pass kernel for it, so there every loss, gradient norm and master
 * weight must be bitwise equal; where it has one (bf16 on Hopper, and the emulated build's
 * Hopper kernel) each dW element is one fp32 accumulation over both micro-batches' rows
 * instead of two, so losses must agree within 1e-5 relative and the weights within 1e-5 of
 * their largest magnitude. A parked row overwritten by the next micro-batch's forward would
 * break either. The deferral must not make the host wait more often.
 */
#include <math.h>
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
                     const sl_topology *topo, int ep, bool bf16, double capacity,
                     sl_memory_mode mode) {
    char err[512];
    sl_moe_options mo = {.capacity_factor = capacity, .drop_policy = SL_DROP_PROBS};
    r->model = sl_model_create_mem(mc, be, topo->ep, B, S, &mo, bf16 ? SL_BF16 : SL_F32, mode, err,
                                   sizeof err);
    CHECK(r->model != NULL, "model create: %s", err);
    sl_params_randomize(&r->model->params, 57);
    sl_optimizer_params op = {.dense = world,
                              .expert = topo->edp,
                              .ep = ep > 1 ? topo->ep : NULL,
                              .bucket_bytes = 4096,
                              .layers = mc->num_hidden_layers};
    sl_optimizer_init(&r->opt, &r->model->params, &op);
}

static void run_free(run *r) {
    sl_optimizer_free(&r->opt);
    sl_model_free(r->model);
}

/* Trains both copies `steps` steps at `micro` micro-batches per rank in memory mode `mode` and
 * compares them. */
static void compare(sl_prun *pr, int micro, sl_memory_mode mode, int32_t *tokens) {
    const bool exact = !pr->bf16;
    const sl_model_config mc = pr->mc;
    sl_train_config tc = pr->tc;
    tc.global_batch_tokens = (int64_t)micro * B * S * pr->size;
    run on, off;
    run_init(&on, &mc, pr->be, pr->dworld, &pr->topo, pr->ep, pr->bf16, pr->capacity, mode);
    run_init(&off, &mc, pr->be, pr->dworld, &pr->topo, pr->ep, pr->bf16, pr->capacity, mode);
    CHECK(sl_model_can_defer_wgrad(on.model), "the model cannot defer its weight gradients");
    const sl_stepper son = {.model = on.model,
                            .opt = &on.opt,
                            .world = pr->dworld,
                            .micro_batches = micro,
                            .tokens = tokens,
                            .defer_wgrad = true};
    const sl_stepper soff = {.model = off.model,
                             .opt = &off.opt,
                             .world = pr->dworld,
                             .micro_batches = micro,
                             .tokens = tokens};
    char err[512];
    double worst_loss = 0;
    for (int step = 0; step < pr->steps; step++) {
        sl_prun_feed f = {.seed = 3000,
                          .step = step,
                          .rank = pr->rank,
                          .world = pr->size,
                          .vocab = mc.vocab_size};
        sl_step_result a = {.metrics = true}, b = {.metrics = true};
        sl_backend *be = pr->be;
        long long r0 = sl_backend_host_reads(be), s0 = sl_backend_syncs(be);
        CHECK(sl_train_step(&son, &tc, step, sl_prun_batch, &f, &a, err, sizeof err) == 0,
              "step %d (deferred): %s", step, err);
        const long long reads_on = sl_backend_host_reads(be) - r0,
                        syncs_on = sl_backend_syncs(be) - s0;
        r0 = sl_backend_host_reads(be), s0 = sl_backend_syncs(be);
        CHECK(sl_train_step(&soff, &tc, step, sl_prun_batch, &f, &b, err, sizeof err) == 0,
              "step %d (immediate): %s", step, err);
        const long long reads_off = sl_backend_host_reads(be) - r0,
                        syncs_off = sl_backend_syncs(be) - s0;
        CHECK(reads_on == reads_off && syncs_on == syncs_off,
              "step %d: %lld host reads and %lld syncs deferred, %lld and %lld immediate", step,
              reads_on, syncs_on, reads_off, syncs_off);
        const double rel = fabs(a.loss - b.loss) / fabs(b.loss);
        if (rel > worst_loss) worst_loss = rel;
        if (exact) {
            CHECK(a.loss == b.loss, "step %d: loss %.9g deferred, %.9g immediate", step, a.loss,
                  b.loss);
            CHECK(a.grad_norm == b.grad_norm, "step %d: grad norm %.9g deferred, %.9g immediate",
                  step, a.grad_norm, b.grad_norm);
        } else {
            CHECK(rel <= 1e-5, "step %d: loss %.9g deferred, %.9g immediate", step, a.loss, b.loss);
        }
        if (pr->rank == 0)
            printf("micro-batches %d, step %d: loss %.7f / %.7f, grad norm %.6f / %.6f, host "
                   "reads %lld, syncs %lld\n",
                   micro, step, a.loss, b.loss, a.grad_norm, b.grad_norm, reads_on, syncs_on);
    }
    int64_t differ = 0, compared = 0;
    double worst = 0, largest = 0;
    for (int i = 0; i < on.model->params.count; i++) {
        sl_param *p = on.model->params.items[i], *q = off.model->params.items[i];
        CHECK(strcmp(p->name, q->name) == 0 && p->numel == q->numel, "parameter %d: %s vs %s", i,
              p->name, q->name);
        float *a = sl_test_host_f32(p->master), *c = sl_test_host_f32(q->master);
        for (int64_t k = 0; k < p->numel; k++) {
            differ += memcmp(&a[k], &c[k], sizeof(float)) != 0;
            worst = fmax(worst, fabs((double)a[k] - c[k]));
            largest = fmax(largest, fabs((double)c[k]));
        }
        compared += p->numel;
        free(a), free(c);
    }
    if (exact)
        CHECK(differ == 0, "%lld of %lld master weights differ when deferred", (long long)differ,
              (long long)compared);
    else
        CHECK(worst <= 1e-5 * largest, "master weights: largest difference %.3g (bound %.3g)",
              worst, 1e-5 * largest);
    if (pr->rank == 0)
        printf("np %d, ep %d%s, backend %s%s, %d micro-batches, recompute %s: %lld weights on "
               "rank 0, %lld differ (largest difference %.3g, largest weight %.3g), worst relative "
               "loss difference %.3g\n",
               pr->size, pr->ep, pr->capacity > 0 ? ", capacity" : "", sl_backend_name(pr->be),
               pr->bf16 ? " bf16" : "", micro, sl_memory_mode_name(mode), (long long)compared,
               (long long)differ, worst, largest, worst_loss);
    run_free(&on);
    run_free(&off);
}

int main(int argc, char **argv) {
    sl_prun pr = {.ep = 1, .steps = 3};
    if (sl_prun_parse(&pr, argc, argv, "test_defer_wgrad", false) != 0) return 2;
    const int setup = sl_prun_setup(&pr, &argc, &argv);
    if (setup != 0) return setup;
    int32_t *tokens = malloc(sizeof(int32_t) * B * (S + 1));
    /* the harness's global batch per rank, but at least a pair (its batches are a function of
     * the sequence index, so more micro-batches are just more sequences) */
    const int micro = GLOBAL_SEQS / (B * pr.size) >= 2 ? GLOBAL_SEQS / (B * pr.size) : 2;
    compare(&pr, micro, SL_MEMORY_NONE, tokens);
    if (micro >= 3) compare(&pr, micro - 1, SL_MEMORY_NONE, tokens);
    /* recompute "attention": the layers keep their own FFN activations, so they can park */
    if (!pr.cuda) compare(&pr, micro, SL_MEMORY_ATTENTION, tokens);
    const int rc = sl_prun_finish(&pr, "test_defer_wgrad");
    free(tokens);
    sl_prun_free(&pr);
    return rc;
}
