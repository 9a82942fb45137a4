/*
 * tests/dump_optimizer.c - writes what the PyTorch optimizer reference
 * (tests/torch_optimizer.py) replays:
 *
 *   dump_optimizer OUT_DIR [--schedule cosine|wsd|constant] [--steps N] [--warmup W]
 *                  [--lr X] [--min-lr X] [--decay-fraction X] [--clip X] [--wd X]
 *                  [--eps X] [--seed N]
 *
 * Trains a tiny model (tests/test_util.h's, with a shared expert) for N steps with
 * sl_train_step on one process, max_steps = N so the schedule runs to its end. Writes
 *   OUT_DIR/meta.json    the training settings, every parameter (name, shape, group) in the
 *                        order of the flat files, and per step the lr and the gradient norm
 *                        sluice used;
 *   OUT_DIR/params.f32   (N + 1) x total float32: the parameters before step 0, after step 0,
 *                        ..., after step N - 1;
 *   OUT_DIR/grads.f32    N x total float32: the gradient each step used (before clipping).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/comm.h"
#include "core/rng.h"
#include "model/model.h"
#include "tests/test_util.h"
#include "trainer/optimizer.h"
#include "trainer/train_step.h"

enum { B = 2, S = 8, MICRO = 2 };

static int make_batch(void *user, int micro, int32_t *tokens, char *err, size_t errlen) {
    (void)err, (void)errlen;
    const int *step = user;
    sl_rng r;
    sl_rng_init(&r, 900 + (uint64_t)*step, (uint64_t)micro);
    for (int i = 0; i < B * (S + 1); i++) tokens[i] = (int32_t)sl_rng_below(&r, 40);
    return 0;
}

/* Appends every parameter (or gradient) in declaration order. */
static void write_all(FILE *f, const sl_params *ps, bool grads) {
    for (int i = 0; i < ps->count; i++) {
        const sl_param *p = ps->items[i];
        float *h = sl_test_host_f32(grads ? p->g : p->master);
        fwrite(h, sizeof(float), (size_t)p->numel, f);
        free(h);
    }
}

static FILE *open_out(const char *dir, const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) {
        fprintf(stderr, "dump_optimizer: cannot write %s\n", path);
        exit(1);
    }
    return f;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: dump_optimizer OUT_DIR [--schedule cosine|wsd|constant] "
                        "[--steps N] [--warmup W] [--lr X] [--min-lr X] [--decay-fraction X] "
                        "[--clip X] [--wd X] [--eps X] [--seed N]\n");
        return 2;
    }
    const char *out = argv[1];
    sl_train_config tc;
    memset(&tc, 0, sizeof tc);
    tc.seq_len = S;
    tc.micro_batch_size = B;
    tc.global_batch_tokens = (int64_t)MICRO * B * S;
    tc.max_steps = 8;
    tc.lr = 1e-2;
    tc.min_lr = 1e-3;
    tc.schedule = SL_LR_COSINE;
    tc.decay_fraction = 0.5;
    tc.beta1 = 0.9, tc.beta2 = 0.95, tc.eps = 1e-4, tc.weight_decay = 0.1, tc.grad_clip = 0.05;
    uint64_t seed = 5;
    const char *schedule = "cosine";
    for (int i = 2; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (strcmp(k, "--schedule") == 0)
            schedule = v;
        else if (strcmp(k, "--steps") == 0)
            tc.max_steps = atoi(v);
        else if (strcmp(k, "--warmup") == 0)
            tc.warmup_steps = atoi(v);
        else if (strcmp(k, "--lr") == 0)
            tc.lr = atof(v);
        else if (strcmp(k, "--min-lr") == 0)
            tc.min_lr = atof(v);
        else if (strcmp(k, "--decay-fraction") == 0)
            tc.decay_fraction = atof(v);
        else if (strcmp(k, "--clip") == 0)
            tc.grad_clip = atof(v);
        else if (strcmp(k, "--wd") == 0)
            tc.weight_decay = atof(v);
        else if (strcmp(k, "--eps") == 0)
            tc.eps = atof(v);
        else if (strcmp(k, "--seed") == 0)
            seed = strtoull(v, NULL, 10);
        else {
            fprintf(stderr, "dump_optimizer: unknown option %s\n", k);
            return 2;
        }
    }
    if (strcmp(schedule, "cosine") == 0)
        tc.schedule = SL_LR_COSINE;
    else if (strcmp(schedule, "wsd") == 0)
        tc.schedule = SL_LR_WSD;
    else if (strcmp(schedule, "constant") == 0)
        tc.schedule = SL_LR_CONSTANT;
    else {
        fprintf(stderr, "dump_optimizer: unknown schedule %s\n", schedule);
        return 2;
    }

    sl_comm *world = sl_comm_init_world(&argc, &argv);
    char err[512];
    sl_model_config mc = sl_test_model_config();
    mc.shared_expert_intermediate_size = 12;
    sl_model *model = sl_model_create(&mc, sl_test_cpu(), NULL, B, S, NULL, err, sizeof err);
    if (!model) {
        fprintf(stderr, "dump_optimizer: %s\n", err);
        return 1;
    }
    sl_params *ps = &model->params;
    sl_params_randomize(ps, seed);
    sl_optimizer opt;
    sl_optimizer_params op = {.dense = world, .expert = world, .layers = mc.num_hidden_layers};
    sl_optimizer_init(&opt, ps, &op);
    int32_t *tokens = malloc(sizeof(int32_t) * B * (S + 1));
    const sl_stepper st = {
        .model = model, .opt = &opt, .world = world, .micro_batches = MICRO, .tokens = tokens};

    FILE *fp = open_out(out, "params.f32"), *fg = open_out(out, "grads.f32");
    write_all(fp, ps, false);
    double *lr = calloc((size_t)tc.max_steps, sizeof(double));
    double *norm = calloc((size_t)tc.max_steps, sizeof(double));
    for (int step = 0; step < tc.max_steps; step++) {
        sl_step_result res = {0};
        int s = step;
        if (sl_train_step(&st, &tc, step, make_batch, &s, &res, err, sizeof err) != 0) {
            fprintf(stderr, "dump_optimizer: %s\n", err);
            return 1;
        }
        lr[step] = res.lr;
        norm[step] = res.grad_norm;
        write_all(fg, ps, true);
        write_all(fp, ps, false);
    }
    fclose(fp);
    fclose(fg);

    FILE *f = open_out(out, "meta.json");
    fprintf(f,
            "{\"schedule\": \"%s\", \"steps\": %d, \"max_steps\": %d, \"warmup_steps\": %d,\n"
            " \"lr\": %.17g, \"min_lr\": %.17g, \"decay_fraction\": %.17g,\n"
            " \"beta1\": %.17g, \"beta2\": %.17g, \"eps\": %.17g, \"weight_decay\": %.17g,\n"
            " \"grad_clip\": %.17g,\n \"step_lr\": [",
            schedule, tc.max_steps, tc.max_steps, tc.warmup_steps, tc.lr, tc.min_lr,
            tc.decay_fraction, tc.beta1, tc.beta2, tc.eps, tc.weight_decay, tc.grad_clip);
    for (int i = 0; i < tc.max_steps; i++) fprintf(f, "%s%.17g", i ? ", " : "", lr[i]);
    fprintf(f, "],\n \"step_grad_norm\": [");
    for (int i = 0; i < tc.max_steps; i++) fprintf(f, "%s%.17g", i ? ", " : "", norm[i]);
    fprintf(f, "],\n \"params\": [");
    for (int i = 0; i < ps->count; i++) {
        const sl_param *p = ps->items[i];
        fprintf(f, "%s\n  {\"name\": \"%s\", \"group\": %d, \"shape\": [", i ? "," : "", p->name,
                (int)p->group);
        for (int d = 0; d < p->ndim; d++)
            fprintf(f, "%s%lld", d ? ", " : "", (long long)p->shape[d]);
        fprintf(f, "]}");
    }
    fprintf(f, "\n]}\n");
    fclose(f);
    printf("dump_optimizer: %d parameters, %lld values, %d steps (%s) -> %s\n", ps->count,
           (long long)sl_params_numel(ps), tc.max_steps, schedule, out);

    free(lr), free(norm), free(tokens);
    sl_optimizer_free(&opt);
    sl_model_free(model);
    sl_comm_finalize(world);
    return 0;
}
