/*
 * tests/test_parallel_equivalence.c - distributed training follows the single-process run.
 *
 *   mpirun -np N test_parallel_equivalence --ep EP [--zero1] [--capacity F] [--steps S]
 *                                          [--backend cuda [--transport nccl] [--bf16]]
 *
 * Every rank trains two copies of the same model from the same seed on the same global
 * batches: the distributed one (expert parallelism EP, data parallelism over all N ranks,
 * each rank taking its share of every global batch) and a single-process reference that
 * runs the whole global batch alone. Sequence g of a global batch is a fixed function of
 * (step, g); the distributed run gives rank r micro-batch m the sequences
 * (m * N + r) * B .. + B - 1, the reference takes them in order, so both see the same
 * micro-batch groups. After every step the global losses and gradient norms must agree, and
 * at the end every parameter (each rank's expert slice against the reference's experts).
 *
 * With --backend cuda the distributed run computes on the CUDA backend (the emulated one in
 * CI) and, with --transport nccl, communicates through the NCCL transport (core/comm_nccl.c;
 * the fake NCCL over MPI when emulated); the reference stays on the CPU with MPI. --bf16 makes
 * the distributed run compute in bf16 (fp32 master weights).
 *
 * Tolerances (fp32; the two runs sum gradients in different orders):
 *   loss and grad norm: |a - b| <= 1e-5 |b| + 1e-6;  parameters: max |a - b| <= 2e-5.
 * In bf16: 2e-2 relative for loss and grad norm.
 * The parameters are also judged by their updates (final minus initial, the initial values
 * being the same on both: one seed), since a few steps at lr 3e-3 move a weight by about
 * 1e-2 at most and an absolute bound on the weights that bf16 needs would pass no update at
 * all, a sign-flipped one or another rank's ZeRO-1 shard. With u the distributed update and r
 * the reference's: r must be non-zero; ||u - r|| / ||r|| <= UPDATE_REL; among the elements
 * where |r| > 0.1 rms(r) (clearly moved: zero-gradient elements move by weight decay alone),
 * at least SIGN_AGREE have u of r's sign; every weight finite. The bounds below are from
 * measurements (see there).
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/parallel_run.h"
#include "tests/test_util.h"
#include "trainer/optimizer.h"

enum { B = SL_PRUN_B, S = SL_PRUN_S, GLOBAL_SEQS = SL_PRUN_GLOBAL_SEQS };

static double g_rel = 1e-5; /* 2e-2 in bf16 */

/* The update bounds, from measurements: the relative L2 error of the update and the share of
 * the clearly moved weights that moved the reference's way.
 *   fp32, CPU + MPI (4 steps; np 1-4, EP 1-4, ZeRO-1, capacity): error <= 8.7e-6, all 1.0
 *   fp32, emulated CUDA + nccl (2 steps; the same layouts): error <= 7.9e-6, all 1.0
 *   bf16, emulated CUDA + nccl (2 steps; np 2 EP 2, with and without ZeRO-1): error 0.194,
 *     0.985 (Adam's first steps move a weight by about lr whatever its gradient's size, so a
 *     gradient near zero whose sign bf16 flips moves the full step the other way)
 * The bf16 bounds leave 1.8x on the error and 3x on the share moved the wrong way; they still
 * fail an update at half the learning rate (error 0.53), no update (1.0), the update's
 * negative (1.97) and ZeRO-1 without the gather of the other rank's shard (0.60, 0.68). */
#define UPDATE_REL_F32  1e-4
#define SIGN_AGREE_F32  0.999
#define UPDATE_REL_BF16 0.35
#define SIGN_AGREE_BF16 0.95

static bool close_enough(double a, double b) {
    return fabs(a - b) <= g_rel * fabs(b) + 1e-6;
}

int main(int argc, char **argv) {
    sl_prun pr = {.ep = 1, .steps = 4};
    if (sl_prun_parse(&pr, argc, argv, "test_parallel_equivalence", true) != 0) return 2;
    if (pr.bf16) g_rel = 2e-2;
    /* The distributed run's backend and world: the reference always uses CPU + MPI. */
    const int setup = sl_prun_setup(&pr, &argc, &argv);
    if (setup != 0) return setup;
    const int ep = pr.ep, steps = pr.steps, rank = pr.rank, size = pr.size;
    const bool zero1 = pr.zero1, bf16 = pr.bf16;
    const double capacity = pr.capacity;
    sl_backend *dbe = pr.be;
    sl_comm *world = pr.world, *dworld = pr.dworld;
    const sl_topology *topo = &pr.topo;
    const sl_model_config mc = pr.mc;
    const sl_train_config tc = pr.tc;
    char err[512];
    sl_comm *self = sl_comm_split(world, rank, 0);
    /* overlap_exchange as the trainer runs by default (parallel.overlap_moe) */
    sl_moe_options mo = {
        .capacity_factor = capacity, .drop_policy = SL_DROP_PROBS, .overlap_exchange = true};

    sl_model *dist =
        sl_model_create_ex(&mc, dbe, topo->ep, B, S, &mo, bf16 ? SL_BF16 : SL_F32, err, sizeof err);
    sl_model *ref = sl_model_create(&mc, sl_test_cpu(), NULL, B, S, &mo, err, sizeof err);
    CHECK(dist && ref, "model create: %s", err);
    sl_params_randomize(&dist->params, 77);
    sl_params_randomize(&ref->params, 77);
    /* the reference's initial weights: the starting point of both runs' updates */
    float **init = calloc((size_t)ref->params.count, sizeof(float *));
    for (int i = 0; i < ref->params.count; i++)
        init[i] = sl_test_host_f32(ref->params.items[i]->master);
    sl_optimizer dopt, ropt;
    sl_optimizer_params dp = {.dense = dworld,
                              .expert = topo->edp,
                              .ep = ep > 1 ? topo->ep : NULL,
                              .zero1 = zero1,
                              .bucket_bytes = 4096, /* small buckets: many in flight */
                              .layers = mc.num_hidden_layers};
    sl_optimizer_params rp = {.dense = self, .expert = self, .layers = mc.num_hidden_layers};
    sl_optimizer_init(&dopt, &dist->params, &dp);
    sl_optimizer_init(&ropt, &ref->params, &rp);
    int32_t *tokens = malloc(sizeof(int32_t) * B * (S + 1));
    const sl_stepper ds = {.model = dist,
                           .opt = &dopt,
                           .world = dworld,
                           .micro_batches = GLOBAL_SEQS / (B * size),
                           .tokens = tokens};
    const sl_stepper rs = {.model = ref,
                           .opt = &ropt,
                           .world = self,
                           .micro_batches = GLOBAL_SEQS / B,
                           .tokens = tokens};
    for (int step = 0; step < steps; step++) {
        sl_prun_feed fd = {
            .seed = 1000, .step = step, .rank = rank, .world = size, .vocab = mc.vocab_size};
        sl_prun_feed fr = {
            .seed = 1000, .step = step, .rank = 0, .world = 1, .vocab = mc.vocab_size};
        sl_step_result a = {.metrics = true}, b = {.metrics = true};
        sl_train_step(&ds, &tc, step, sl_prun_batch, &fd, &a, err, sizeof err);
        sl_train_step(&rs, &tc, step, sl_prun_batch, &fr, &b, err, sizeof err);
        CHECK(close_enough(a.loss, b.loss), "step %d: loss %.9g vs single process %.9g", step,
              a.loss, b.loss);
        CHECK(close_enough(a.grad_norm, b.grad_norm), "step %d: grad norm %.9g vs %.9g", step,
              a.grad_norm, b.grad_norm);
        CHECK(close_enough(a.lbl, b.lbl), "step %d: lbl %.9g vs %.9g", step, a.lbl, b.lbl);
        if (rank == 0)
            printf("step %d: loss %.7f (reference %.7f) grad norm %.6f (%.6f)\n", step, a.loss,
                   b.loss, a.grad_norm, b.grad_norm);
    }
    /* Parameters: same names on both; expert stacks hold a slice in the distributed model.
     * Two passes: the updates' sums, then the signs of the clearly moved elements. */
    double worst = 0.0;
    /* [0] ||r||^2, [1] ||u - r||^2, [2] elements compared, [3] not finite, [4] clearly moved,
     * [5] of those moved the same way */
    double sums[6] = {0};
    float **fin = calloc((size_t)dist->params.count, sizeof(float *));
    float **fref = calloc((size_t)dist->params.count, sizeof(float *));
    int *qi = calloc((size_t)dist->params.count, sizeof(int));
    for (int pass = 0; pass < 2; pass++) {
        /* the threshold of "clearly moved": a tenth of the reference update's rms over all
         * ranks' parameters */
        double thr = 0.0;
        if (pass == 1) {
            double t[2] = {sums[0], sums[2]};
            sl_comm_allreduce_sum_f64(world, t, 2);
            thr = 0.1 * sqrt(t[0] / fmax(t[1], 1.0));
        }
        for (int i = 0; i < dist->params.count; i++) {
            sl_param *p = dist->params.items[i];
            if (pass == 0) {
                sl_param *q = sl_params_find(&ref->params, p->name);
                CHECK(q != NULL, "parameter %s missing from the reference", p->name);
                qi[i] = -1;
                if (!q) continue;
                for (int j = 0; j < ref->params.count; j++)
                    if (ref->params.items[j] == q) qi[i] = j;
                fin[i] = sl_test_host_f32(p->master), fref[i] = sl_test_host_f32(q->master);
            }
            if (qi[i] < 0) continue;
            const float *a = fin[i], *bq = fref[i], *a0 = init[qi[i]];
            const int64_t off =
                p->expert_base >= 0 ? (int64_t)p->expert_base * (p->numel / p->shape[0]) : 0;
            for (int64_t k = 0; k < p->numel; k++) {
                const double r = (double)bq[off + k] - a0[off + k];
                const double u = (double)a[k] - a0[off + k];
                if (pass == 1) {
                    if (fabs(r) > thr) sums[4] += 1, sums[5] += (u > 0) == (r > 0) && u != 0;
                    continue;
                }
                const double d = fabs((double)a[k] - bq[off + k]);
                if (!(d <= worst)) worst = isnan(d) ? INFINITY : d; /* a NaN is the worst */
                sums[0] += r * r, sums[1] += (u - r) * (u - r), sums[2] += 1;
                sums[3] += !isfinite(a[k]) || !isfinite(bq[off + k]);
            }
        }
    }
    for (int i = 0; i < dist->params.count; i++) free(fin[i]), free(fref[i]);
    free(fin), free(fref), free(qi);
    for (int i = 0; i < ref->params.count; i++) free(init[i]);
    free(init);
    sl_comm_allreduce_sum_f64(world, sums, 6);
    const double rel = sqrt(sums[1]) / sqrt(sums[0]), agree = sums[5] / fmax(sums[4], 1.0);
    const double max_rel = bf16 ? UPDATE_REL_BF16 : UPDATE_REL_F32;
    const double min_agree = bf16 ? SIGN_AGREE_BF16 : SIGN_AGREE_F32;
    CHECK(sums[3] == 0, "%.0f of %.0f weights are not finite", sums[3], sums[2]);
    CHECK(sums[0] > 0, "the reference's weights did not move (update norm %.3g)", sqrt(sums[0]));
    CHECK(rel <= max_rel, "the update differs from the reference's by %.3g of its norm (bound %g)",
          rel, max_rel);
    CHECK(sums[4] > 0 && agree >= min_agree,
          "%.0f of %.0f clearly moved weights moved the reference's way (%.4f, bound %g)", sums[5],
          sums[4], agree, min_agree);
    if (!bf16) CHECK(worst <= 2e-5, "parameters differ by up to %.3g", worst);
    /* The compute copy is the master weights rounded, bit for bit, however it was written:
     * AdamW's fused copy of this rank's shard, the conversion of the shards gathered from the
     * other ranks (ZeRO-1; none in a group of one rank). */
    for (int g = 0; g < SL_PGROUP_COUNT; g++) {
        const sl_params *ps = &dist->params;
        if (!ps->wc[g] || ps->size[g] == 0) continue;
        sl_tensor *want = sl_tensor_new1(dbe, sl_tensor_dtype(ps->wc[g]), ps->size[g]);
        sl_op_convert(want, ps->w[g]);
        const size_t bytes = sl_tensor_nbytes(want);
        unsigned char *hw = malloc(bytes), *hg = malloc(bytes);
        sl_tensor_to_host(want, hw);
        sl_tensor_to_host_range(ps->wc[g], 0, ps->size[g], hg);
        int64_t differ = 0;
        const size_t es = bytes / (size_t)ps->size[g];
        for (int64_t k = 0; k < ps->size[g]; k++)
            differ += memcmp(hw + (size_t)k * es, hg + (size_t)k * es, es) != 0;
        CHECK(differ == 0, "group %d: %lld of %lld compute-copy values are not the master's", g,
              (long long)differ, (long long)ps->size[g]);
        free(hw), free(hg);
        sl_tensor_free(want);
    }
    double w = worst;
    sl_comm_allreduce_max_f64(world, &w, 1);
    if (rank == 0)
        printf("np %d, ep %d%s%s, backend %s, transport %s%s: largest parameter difference "
               "%.3g; update norm %.4g, relative error %.3g, %.0f of %.0f clearly moved weights "
               "(%.5f) moved the reference's way\n",
               size, ep, zero1 ? ", zero1" : "", capacity > 0 ? ", capacity" : "",
               sl_backend_name(dbe), sl_comm_transport(dworld), bf16 ? ", bf16" : "", w,
               sqrt(sums[0]), rel, sums[5], sums[4], agree);
    const int rc = sl_prun_finish(&pr, "test_parallel_equivalence");
    sl_optimizer_free(&dopt);
    sl_optimizer_free(&ropt);
    sl_model_free(dist);
    sl_model_free(ref);
    free(tokens);
    sl_comm_free(self);
    sl_prun_free(&pr);
    return rc;
}
