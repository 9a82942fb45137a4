/*
 * tests/test_step_syncs.c - how often a training step makes the host wait for the device.
 *
 *   test_step_syncs [backend]     (default: $SLUICE_TEST_BACKEND, else "cpu")
 *
 * A GPU runs ahead of the host only if the host never waits inside a step. The tensor layer
 * counts every device-to-host read (sl_backend_host_reads) and the backend every explicit
 * synchronization (sl_backend_syncs); both count on any backend, so the CPU build checks the
 * same budget the CUDA backend must keep (docs/architecture.md, "Host reads"). One step
 * with M micro-batches of a model with L_moe MoE layers may wait:
 *   - M * L_moe times for the per-expert counts where the experts' grouped GEMMs need them on
 *     the host (one read per layer; none where they read the sort's counts on the device:
 *     sl_grouped_counts_on_device, the CPU and the Hopper kernel),
 *   - once for the step's loss sums (sl_model_read_stats),
 *   - once for the gradient norm's sums of squares (sl_optimizer_finish_reduce),
 *   - once for the step's expert counts where the caller asks for them (sl_step_result.counts:
 *     the trainer always; summed on the device, sl_model_read_expert_counts),
 * and never otherwise, on a step that logs no metrics. A metrics step reads the metrics
 * scalars once more and every layer's counts on the host (M * L_moe). With training.recompute
 * = "layer" the backward reruns the forward of every layer but the last, so each micro-batch
 * reads the counts, where it reads them, once more per MoE layer among layers 0 .. L-2
 * (L_moe_re): M * (L_moe + L_moe_re) + 2; "none" and "attention" have the same budget
 * (docs/memory.md). The test trains a dropless model with a shared expert and a
 * dense layer for a few steps in each mode and asserts these counts exactly, so a new read
 * or synchronization in the step fails it (and must then be justified and this budget and
 * the docs changed).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "tests/test_util.h"
#include "trainer/optimizer.h"
#include "trainer/train_step.h"

enum { B = 2, S = 16, MICRO = 3 };

static int make_batch(void *user, int micro, int32_t *tokens, char *err, size_t errlen) {
    (void)err, (void)errlen;
    const int *step = user;
    sl_rng r;
    sl_rng_init(&r, 500 + (uint64_t)*step, (uint64_t)micro);
    for (int i = 0; i < B * (S + 1); i++)
        tokens[i] = (int32_t)sl_rng_below(&r, 40); /* the test vocabulary */
    return 0;
}

/* Trains a few steps in memory mode `mode` and checks every step's reads and syncs. */
static void check_mode(sl_backend *be, sl_comm *world, const sl_model_config *mc,
                       const sl_train_config *tc, sl_dtype compute, sl_memory_mode mode) {
    char err[512] = "";
    sl_model *m = sl_model_create_ex(mc, be, NULL, B, S, NULL, compute, err, sizeof err);
    CHECK(m != NULL, "model: %s", err);
    if (!m) return;
    CHECK(sl_model_set_memory(m, mode, err, sizeof err) == 0, "set_memory: %s", err);
    sl_params_randomize(&m->params, 5);
    sl_optimizer opt;
    const sl_optimizer_params op = {
        .dense = world, .expert = world, .layers = mc->num_hidden_layers};
    sl_optimizer_init(&opt, &m->params, &op);
    int32_t *tokens = malloc(sizeof(int32_t) * B * (S + 1));
    const sl_stepper st = {
        .model = m, .opt = &opt, .world = world, .micro_batches = MICRO, .tokens = tokens};
    /* MoE layers whose forward a "layer" backward reruns: all but the last layer */
    int moe_re = 0;
    for (int l = 0; mode == SL_MEMORY_LAYER && l < mc->num_hidden_layers - 1; l++)
        moe_re += m->ffn[l].is_moe;
    /* whether the MoE layers keep their counts on the device (all alike: one backend, one
     * shape; the CPU always does) */
    bool on_device = true;
    for (int l = 0; l < mc->num_hidden_layers; l++)
        if (m->ffn[l].is_moe) on_device &= m->ffn[l].moe.disp->counts_on_device;
    if (!strcmp(sl_backend_name(be), "cpu"))
        CHECK(on_device, "the CPU's MoE layers read their expert counts on the host");
    const long long counts_reads = (long long)MICRO * (m->n_moe_layers + moe_re);
    const long long budget = (on_device ? 0 : counts_reads) + 2;
    printf("backend %s (%s), recompute %s, %d micro-batches, %d MoE layers (%d rerun), counts "
           "on the %s: budget %lld waits per step\n",
           sl_backend_name(be), sl_dtype_name(compute), sl_memory_mode_name(mode), MICRO,
           m->n_moe_layers, moe_re, on_device ? "device" : "host", budget);
    int64_t *counts = calloc((size_t)mc->num_hidden_layers * mc->num_experts, sizeof(int64_t));
    for (int step = 0; step < 4; step++) {
        const bool metrics = step == 2, with_counts = step == 3;
        sl_step_result res = {.metrics = metrics, .counts = with_counts ? counts : NULL};
        const long long r0 = sl_backend_host_reads(be), s0 = sl_backend_syncs(be);
        CHECK(sl_train_step(&st, tc, step, make_batch, &step, &res, err, sizeof err) == 0,
              "step %d: %s", step, err);
        const long long reads = sl_backend_host_reads(be) - r0, syncs = sl_backend_syncs(be) - s0;
        printf("step %d%s: loss %.5f, %lld host reads, %lld synchronizations\n", step,
               metrics ? " (metrics)" : "", res.loss, reads, syncs);
        CHECK(syncs == 0, "step %d: %lld explicit synchronizations, expected none", step, syncs);
        if (metrics)
            CHECK(reads == counts_reads + 3, "step %d (metrics): %lld host reads, expected %lld",
                  step, reads, counts_reads + 3);
        else
            CHECK(reads == budget + with_counts, "step %d: %lld host reads, expected %lld", step,
                  reads, budget + with_counts);
        if (with_counts) { /* the device's sums: every slot of every micro-batch, per layer */
            for (int l = 0; l < mc->num_hidden_layers; l++) {
                int64_t sum = 0;
                for (int e = 0; e < mc->num_experts; e++) sum += counts[l * mc->num_experts + e];
                const int64_t want =
                    m->ffn[l].is_moe ? (int64_t)MICRO * B * S * mc->num_experts_per_tok : 0;
                CHECK(sum == want, "step %d: layer %d routed %lld slots, expected %lld", step, l,
                      (long long)sum, (long long)want);
            }
        }
    }
    free(counts);
    free(tokens);
    sl_optimizer_free(&opt);
    sl_model_free(m);
}

int main(int argc, char **argv) {
    const char *name = argc > 1 ? argv[1] : getenv("SLUICE_TEST_BACKEND");
    if (!name || !*name) name = "cpu";
    sl_comm *world = sl_comm_init_world(&argc, &argv);
    char err[512] = "";
    const sl_backend_params bp = {.threads = 2, .device = -1};
    sl_backend *be = sl_backend_create(name, &bp, err, sizeof err);
    if (!be) {
        printf("SKIP: backend %s: %s\n", name, err);
        sl_comm_finalize(world);
        return 77;
    }
    sl_model_config mc = sl_test_model_config();
    mc.num_hidden_layers = 3;
    mc.dense_layer[1] = true; /* two MoE layers, one dense */
    mc.shared_expert_intermediate_size = 12;
    sl_train_config tc;
    memset(&tc, 0, sizeof tc);
    tc.seq_len = S;
    tc.micro_batch_size = B;
    tc.global_batch_tokens = (int64_t)MICRO * B * S;
    tc.max_steps = 4;
    tc.lr = 3e-3;
    tc.min_lr = 3e-4;
    tc.warmup_steps = 1;
    tc.schedule = SL_LR_COSINE;
    tc.beta1 = 0.9, tc.beta2 = 0.95, tc.eps = 1e-8, tc.weight_decay = 0.1, tc.grad_clip = 1.0;
    const sl_dtype compute = strcmp(sl_backend_name(be), "cuda") == 0 ? SL_BF16 : SL_F32;
    const sl_memory_mode modes[] = {SL_MEMORY_NONE, SL_MEMORY_ATTENTION, SL_MEMORY_LAYER};
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++)
        check_mode(be, world, &mc, &tc, compute, modes[i]);
    sl_backend_free(be);
    const int rc = sl_test_finish("test_step_syncs");
    sl_comm_finalize(world);
    return rc;
}
