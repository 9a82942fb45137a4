/*
 * tests/parallel_run.c - the setup shared by the distributed-training tests
 * (tests/parallel_run.h).
 */
#include "tests/parallel_run.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/comm_nccl.h"
#include "core/rng.h"

int sl_prun_parse(sl_prun *p, int argc, char **argv, const char *name, bool allow_zero1) {
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--ep") == 0 && i + 1 < argc)
            p->ep = atoi(argv[++i]);
        else if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc)
            p->steps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--capacity") == 0 && i + 1 < argc)
            p->capacity = atof(argv[++i]);
        else if (allow_zero1 && strcmp(argv[i], "--zero1") == 0)
            p->zero1 = true;
        else if (strcmp(argv[i], "--backend") == 0 && i + 1 < argc)
            p->cuda = strcmp(argv[++i], "cuda") == 0;
        else if (strcmp(argv[i], "--transport") == 0 && i + 1 < argc)
            p->nccl = strcmp(argv[++i], "nccl") == 0;
        else if (strcmp(argv[i], "--bf16") == 0)
            p->bf16 = true;
        else {
            fprintf(stderr, "%s: unknown argument %s\n", name, argv[i]);
            return 2;
        }
    }
    return 0;
}

int sl_prun_setup(sl_prun *p, int *argc, char ***argv) {
    p->world = sl_comm_init_world(argc, argv);
    p->rank = sl_comm_rank(p->world);
    p->size = sl_comm_size(p->world);
    char err[512];
    p->be = p->cuda ? sl_test_cuda_or_skip(NULL) : sl_test_cpu();
    /* as launch/cmd_train.c resolves it: nccl needs one device per rank */
    sl_rank_place *places = sl_placement_gather(p->world, p->be);
    sl_transport t = SL_TRANSPORT_MPI;
    const int bad = sl_transport_resolve(p->nccl ? SL_TRANSPORT_NCCL : SL_TRANSPORT_MPI, p->be,
                                         places, p->size, &t, NULL, 0, err, sizeof err);
    free(places);
    if (bad) {
        /* On a real machine with fewer GPUs than ranks that is missing hardware: a skip. The
         * emulated build gives each rank a device (tests/parallel.cmake: SLUICE_EMU_DEVICES),
         * so there it is a failure. */
#ifdef SLUICE_CUDA_EMULATED
        const int rc = 1;
#else
        const int rc = 77;
#endif
        if (p->rank == 0) printf("%s: the nccl transport: %s\n", rc == 77 ? "SKIP" : "FAIL", err);
        sl_comm_finalize(p->world);
        return rc;
    }
    p->dworld = sl_transport_world(t, p->world, p->be, err, sizeof err);
    if (!p->dworld) {
        fprintf(stderr, "the nccl transport: %s\n", err);
        sl_comm_finalize(p->world);
        return 2;
    }
    if (sl_topology_init(&p->topo, p->dworld, p->ep, 8, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        if (p->dworld != p->world) sl_comm_free(p->dworld);
        sl_comm_finalize(p->world);
        return 2;
    }
    p->mc = sl_test_model_config();
    p->mc.num_hidden_layers = 3;
    p->mc.dense_layer[1] = true;
    p->mc.shared_expert_intermediate_size = 12;
    sl_train_config *tc = &p->tc;
    memset(tc, 0, sizeof *tc);
    tc->seq_len = SL_PRUN_S;
    tc->micro_batch_size = SL_PRUN_B;
    tc->global_batch_tokens = (int64_t)SL_PRUN_GLOBAL_SEQS * SL_PRUN_S;
    tc->max_steps = p->steps;
    tc->lr = 3e-3;
    tc->min_lr = 3e-4;
    tc->warmup_steps = 1;
    tc->schedule = SL_LR_COSINE;
    tc->beta1 = 0.9;
    tc->beta2 = 0.95;
    tc->eps = 1e-8;
    tc->weight_decay = 0.1;
    tc->grad_clip = 1.0;
    return 0;
}

int sl_prun_finish(sl_prun *p, const char *name) {
    double fails = sl_test_failures;
    sl_comm_allreduce_sum_f64(p->world, &fails, 1);
    const int rc = sl_test_finish(name);
    return fails > 0 ? 1 : rc;
}

void sl_prun_free(sl_prun *p) {
    sl_topology_free(&p->topo);
    if (p->dworld != p->world) sl_comm_free(p->dworld);
    if (p->cuda) sl_backend_free(p->be);
    sl_comm_finalize(p->world);
}

int sl_prun_batch(void *user, int micro, int32_t *tokens, char *err, size_t errlen) {
    (void)err, (void)errlen;
    const sl_prun_feed *f = user;
    for (int b = 0; b < SL_PRUN_B; b++) {
        const int g = (micro * f->world + f->rank) * SL_PRUN_B + b;
        sl_rng r;
        sl_rng_init(&r, f->seed + (uint64_t)f->step, (uint64_t)g);
        for (int i = 0; i <= SL_PRUN_S; i++)
            tokens[b * (SL_PRUN_S + 1) + i] = (int32_t)sl_rng_below(&r, (uint64_t)f->vocab);
    }
    return 0;
}

int sl_prun_step_both(const sl_prun *p, const sl_stepper *a, const sl_stepper *b,
                      const sl_train_config *tc, int step, sl_prun_feed *f, sl_step_result *ra,
                      sl_step_result *rb, const char *what_a, const char *what_b) {
    char err[512];
    long long reads[2], syncs[2];
    const sl_stepper *st[2] = {a, b};
    sl_step_result *res[2] = {ra, rb};
    const char *what[2] = {what_a, what_b};
    for (int i = 0; i < 2; i++) {
        const long long r0 = sl_backend_host_reads(p->be), s0 = sl_backend_syncs(p->be);
        const int rc = sl_train_step(st[i], tc, step, sl_prun_batch, f, res[i], err, sizeof err);
        CHECK(rc == 0, "step %d (%s): %s", step, what[i], err);
        if (rc != 0) return -1;
        reads[i] = sl_backend_host_reads(p->be) - r0, syncs[i] = sl_backend_syncs(p->be) - s0;
    }
    CHECK(reads[0] == reads[1] && syncs[0] == syncs[1],
          "step %d: %lld host reads and %lld syncs %s, %lld and %lld %s", step, reads[0], syncs[0],
          what_a, reads[1], syncs[1], what_b);
    return 0;
}

sl_prun_weights sl_prun_compare_weights(const sl_model *a, const sl_model *b) {
    sl_prun_weights w = {0};
    for (int i = 0; i < a->params.count; i++) {
        const sl_param *p = a->params.items[i], *q = b->params.items[i];
        CHECK(strcmp(p->name, q->name) == 0 && p->numel == q->numel, "parameter %d: %s vs %s", i,
              p->name, q->name);
        float *x = sl_test_host_f32(p->master), *y = sl_test_host_f32(q->master);
        int64_t nonfinite = 0;
        for (int64_t k = 0; k < p->numel; k++) {
            w.differ += memcmp(&x[k], &y[k], sizeof(float)) != 0;
            nonfinite += !isfinite(x[k]) || !isfinite(y[k]);
            /* !(d <= worst): a NaN is the worst difference (fmax would drop it) */
            const double d = fabs((double)x[k] - y[k]);
            if (!(d <= w.worst)) w.worst = isnan(d) ? INFINITY : d;
            w.largest = fmax(w.largest, fabs((double)y[k]));
        }
        /* equal NaNs compare bitwise equal: a run that diverged in both models is no match */
        CHECK(nonfinite == 0, "parameter %s: %lld weights are not finite", p->name,
              (long long)nonfinite);
        w.compared += p->numel;
        free(x), free(y);
    }
    return w;
}

void sl_prun_model_init(const sl_prun *p, sl_prun_model *r, sl_moe_options mo, sl_memory_mode mode,
                        uint64_t seed) {
    char err[512];
    mo.capacity_factor = p->capacity, mo.drop_policy = SL_DROP_PROBS;
    r->model = sl_model_create_mem(&p->mc, p->be, p->topo.ep, SL_PRUN_B, SL_PRUN_S, &mo,
                                   p->bf16 ? SL_BF16 : SL_F32, mode, err, sizeof err);
    CHECK(r->model != NULL, "model create: %s", err);
    if (!r->model) exit(1);
    sl_params_randomize(&r->model->params, seed);
    sl_optimizer_params op = {.dense = p->dworld,
                              .expert = p->topo.edp,
                              .ep = p->ep > 1 ? p->topo.ep : NULL,
                              .bucket_bytes = 4096,
                              .layers = p->mc.num_hidden_layers};
    sl_optimizer_init(&r->opt, &r->model->params, &op);
}

void sl_prun_model_free(sl_prun_model *r) {
    sl_optimizer_free(&r->opt);
    sl_model_free(r->model);
}
