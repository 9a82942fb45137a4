/*
 * bench/train_bench.c - training throughput of the CPU backend on one config.
 *
 *   bench_train CONFIG [--steps N] [--warmup N] [--threads N] [--batch B] [--seq S]
 *               [--profile] [--profile-steps N]
 *
 * Builds the model of CONFIG's model section for micro-batches of B x S tokens (defaults:
 * training.micro_batch_size and training.seq_len), initializes it from training.seed and
 * feeds random tokens (fixed seed). Each step is the work `sluice train` does for one
 * micro-batch per optimizer step: zero the gradients, forward + backward, reduce the
 * gradients (a single rank), global gradient norm, clipping, AdamW at the schedule's learning
 * rate. `warmup` untimed steps, then `steps` timed ones.
 *
 * In the same process it measures the OpenBLAS sgemm peak (cblas_sgemm 2048^3, fp32, the
 * same thread count, best of 5) and reports the model FLOP/s (model/counts.h convention)
 * as a fraction of it. The last line of the output is one JSON object for scripts.
 *
 * --profile: after the timed steps, `--profile-steps` more (default 3) run as sl_train_step
 * (trainer/train_step.c, what `sluice train` runs) with every profiling region timed on the
 * host's clock (core/profile.h; the CPU backend runs each operation when it is called): the
 * same table and JSON as gpu_train_bench --profile (core/profile_table.h), exit status 1 when
 * the rows do not add up to the step time within 5%.
 */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/backends.h"
#include "core/profile_table.h"
#include "bench/bench_util.h"
#include "core/comm.h"
#include "core/rng.h"
#include "model/counts.h"
#include "model/model.h"
#include "trainer/config.h"
#include "trainer/lr_schedule.h"
#include "trainer/optimizer.h"
#include "trainer/train_step.h"

/* Best FLOP/s of cblas_sgemm on n x n x n over `reps` calls (after one untimed call). */
static double sgemm_peak(int n, int reps) {
    const size_t nn = (size_t)n * n;
    float *a = malloc(nn * sizeof(float)), *b = malloc(nn * sizeof(float));
    float *c = calloc(nn, sizeof(float));
    if (!a || !b || !c) {
        fprintf(stderr, "bench_train: out of memory for the sgemm peak\n");
        exit(1);
    }
    for (size_t i = 0; i < nn; i++) {
        a[i] = (float)((i * 7) % 13) * 0.01f;
        b[i] = (float)((i * 5) % 11) * 0.01f;
    }
    double best = 0.0;
    for (int r = -1; r < reps; r++) {
        const double t0 = sl_bench_now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c,
                    n);
        const double dt = sl_bench_now() - t0;
        const double f = 2.0 * (double)n * n * n / dt;
        if (r >= 0 && f > best) best = f;
    }
    free(a), free(b), free(c);
    return best;
}

/* --profile's steps: every micro-batch is the benchmark's fixed tokens. */
typedef struct {
    const int32_t *tokens;
    int64_t n;
} fixed_batch;

static int fixed_tokens(void *user, int micro, int32_t *tokens, char *err, size_t errlen) {
    (void)micro, (void)err, (void)errlen;
    const fixed_batch *b = user;
    memcpy(tokens, b->tokens, (size_t)b->n * sizeof(int32_t));
    return 0;
}

/* The model's backward progress starts gradient buckets, as in the trainer. */
static void on_grads_ready(void *user, int layer) {
    sl_optimizer_grads_ready(user, layer);
}

static void usage(FILE *f) {
    fprintf(f, "usage: bench_train CONFIG [--steps N] [--warmup N] [--threads N] [--batch B] "
               "[--seq S]\n"
               "                   [--profile] [--profile-steps N]\n"
               "  defaults: --steps 10 --warmup 2, threads/batch/seq from the config\n"
               "  --profile: after the timed steps, time every region of --profile-steps more\n"
               "  (default 3); exit 1 when the rows do not add up to the step time within 5%%\n");
}

int main(int argc, char **argv) {
    const char *path = NULL;
    int steps = 10, warmup = 2, threads = -1, batch = -1, seq = -1, profile_steps = 3;
    bool profile = false;
    for (int i = 1; i < argc; i++) {
        int *dst = NULL;
        if (strcmp(argv[i], "--profile") == 0) {
            profile = true;
            continue;
        } else if (strcmp(argv[i], "--profile-steps") == 0)
            dst = &profile_steps;
        else if (strcmp(argv[i], "--steps") == 0)
            dst = &steps;
        else if (strcmp(argv[i], "--warmup") == 0)
            dst = &warmup;
        else if (strcmp(argv[i], "--threads") == 0)
            dst = &threads;
        else if (strcmp(argv[i], "--batch") == 0)
            dst = &batch;
        else if (strcmp(argv[i], "--seq") == 0)
            dst = &seq;
        else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (argv[i][0] != '-' && !path) {
            path = argv[i];
            continue;
        } else {
            fprintf(stderr, "bench_train: unexpected argument '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "bench_train: %s needs a value\n", argv[i]);
            return 2;
        }
        *dst = atoi(argv[++i]);
    }
    if (!path || steps < 1 || warmup < 0 || profile_steps < 1) {
        usage(stderr);
        return 2;
    }

    sl_comm *world = sl_comm_init_world(&argc, &argv);
    static sl_config cfg; /* large: keep it off the stack */
    char err[2048];
    if (sl_config_load(path, &cfg, err, sizeof err) != 0) {
        fprintf(stderr, "bench_train: %s\n", err);
        sl_comm_finalize(world);
        return 1;
    }
    if (batch <= 0) batch = cfg.train.micro_batch_size;
    if (seq <= 0) seq = cfg.train.seq_len;
    if (threads < 0) threads = cfg.backend.threads;
    if (seq > cfg.model.max_position_embeddings) {
        fprintf(stderr, "bench_train: --seq %d exceeds model.max_position_embeddings %d\n", seq,
                cfg.model.max_position_embeddings);
        sl_comm_finalize(world);
        return 1;
    }
    sl_backend_params bp = {.threads = threads, .device = -1};
    sl_backend *be = sl_backend_create("cpu", &bp, err, sizeof err);
    if (!be) {
        fprintf(stderr, "bench_train: %s\n", err);
        sl_comm_finalize(world);
        return 1;
    }
    threads = sl_backend_threads(be);

    /* The peak first, on an otherwise idle process (the model is not allocated yet). */
    const double peak_before = sgemm_peak(2048, 5);

    /* MoE options as `sluice train` sets them for a single rank. */
    sl_moe_options mo = {
        .capacity_factor = cfg.parallel.capacity_factor,
        .drop_policy =
            strcmp(cfg.parallel.drop_policy, "position") == 0 ? SL_DROP_POSITION : SL_DROP_PROBS,
        .lbl_comm = cfg.train.global_batch_lbl ? world : NULL,
        .selection_bias = cfg.train.router_bias_update_rate > 0,
    };
    sl_model *m = sl_model_create(&cfg.model, be, NULL, batch, seq, &mo, err, sizeof err);
    if (!m) {
        fprintf(stderr, "bench_train: %s\n", err);
        sl_backend_free(be);
        sl_comm_finalize(world);
        return 1;
    }
    sl_params_randomize(&m->params, cfg.train.seed);
    int64_t total_params = 0, active_params = 0;
    sl_model_param_count(&cfg.model, &total_params, &active_params);
    const double flops_tok = sl_model_flops_per_token(&cfg.model, seq);

    const int64_t ntok = (int64_t)batch * (seq + 1);
    int32_t *tokens = malloc(sizeof(int32_t) * (size_t)ntok);
    sl_rng rng;
    sl_rng_init(&rng, 20240601, 1);
    for (int64_t i = 0; i < ntok; i++)
        tokens[i] = (int32_t)sl_rng_below(&rng, (uint64_t)cfg.model.vocab_size);

    sl_optimizer opt;
    sl_optimizer_params op = {.dense = world,
                              .expert = world,
                              .ep = NULL,
                              .zero1 = cfg.parallel.zero1,
                              .bucket_bytes = (int64_t)cfg.parallel.bucket_mb << 20,
                              .layers = cfg.model.num_hidden_layers};
    sl_optimizer_init(&opt, &m->params, &op);
    const int nl = cfg.model.num_hidden_layers, ne = cfg.model.num_experts;
    int64_t *counts = calloc((size_t)nl * (ne > 0 ? ne : 1), sizeof(int64_t));
    const sl_train_config *tc = &cfg.train;
    const int64_t step_tokens = (int64_t)batch * seq;
    const float ce_scale = (float)(1.0 / (double)step_tokens);
    double *dt = malloc(sizeof(double) * (size_t)steps);
    double loss_first = NAN, loss_last = NAN, t_timed = 0.0;
    double phase[4] = {0, 0, 0, 0}; /* zero grads, forward+backward, reduce+norm, AdamW */
    for (int s = 0; s < warmup + steps; s++) {
        const double t0 = sl_bench_now();
        /* one optimizer step of one micro-batch, as trainer/trainer.c does it */
        sl_params_zero_grad(&m->params);
        const double ta = sl_bench_now();
        sl_model_begin_step(m, false);
        sl_optimizer_begin_reduce(&opt);
        m->grad_ready = on_grads_ready;
        m->grad_ready_user = &opt;
        sl_fwd_stats st;
        sl_model_forward_backward(m, tokens, ce_scale, 1.0, &st);
        m->grad_ready = NULL;
        const double tb = sl_bench_now();
        const double gnorm = sl_optimizer_finish_reduce(&opt);
        const double tc0 = sl_bench_now();
        const double clip =
            tc->grad_clip > 0 && gnorm > tc->grad_clip ? tc->grad_clip / gnorm : 1.0;
        if (isfinite(gnorm)) sl_optimizer_apply(&opt, tc, sl_lr_at(tc, s), clip);
        const double td = sl_bench_now();
        if (ne > 0 && tc->router_bias_update_rate > 0) { /* one host read of the step's counts */
            sl_model_read_expert_counts(m, counts);
            sl_model_update_router_bias(m, counts, tc->router_bias_update_rate);
        }
        sl_backend_synchronize(be);
        const double t1 = sl_bench_now();
        const double loss = st.loss_sum / (double)st.tokens;
        if (s == 0) loss_first = loss;
        loss_last = loss;
        if (s >= warmup) {
            dt[s - warmup] = t1 - t0;
            t_timed += t1 - t0;
            phase[0] += ta - t0, phase[1] += tb - ta, phase[2] += tc0 - tb, phase[3] += td - tc0;
        }
    }
    /* --profile: more steps, as the trainer runs them, with every region timed. */
    static sl_profile_report prof; /* large: keep it off the stack */
    if (profile) {
        fixed_batch fb = {tokens, ntok};
        int32_t *staging = malloc(sizeof(int32_t) * (size_t)ntok);
        const sl_stepper stepper = {
            .model = m, .opt = &opt, .world = world, .micro_batches = 1, .tokens = staging};
        sl_profile_enable(be, true);
        for (int s = 0; s < profile_steps; s++) {
            sl_profile_step_begin(be);
            sl_step_result res = {.counts = ne > 0 ? counts : NULL, .metrics = false};
            if (sl_train_step(&stepper, tc, warmup + steps + s, fixed_tokens, &fb, &res, err,
                              sizeof err) != 0) {
                fprintf(stderr, "bench_train: %s\n", err);
                return 1;
            }
            sl_profile_step_end(be);
        }
        sl_profile_get(be, &prof);
        sl_profile_enable(be, false);
        free(staging);
    }
    /* The peak again after the steps: interference from other processes only lowers it,
     * so the larger of the two measurements stands. */
    const double peak_after = sgemm_peak(2048, 5);
    const double peak = peak_before > peak_after ? peak_before : peak_after;
    const double mean_s = t_timed / steps;
    qsort(dt, (size_t)steps, sizeof(double), sl_bench_cmp_double);
    const double median_s = dt[steps / 2], min_s = dt[0];
    const double tok_s = (double)step_tokens / mean_s;
    const double model_flops_s = flops_tok * tok_s;
    const double frac = model_flops_s / peak;

    printf("bench_train: %s | cpu x %d threads | batch %d x seq %d = %lld tokens/step\n", path,
           threads, batch, seq, (long long)step_tokens);
    printf("model: %d layers, hidden %d, %d/%d heads x %d, %d experts top-%d (expert ffn %d) | "
           "%.2fM params, %.2fM active/token\n",
           cfg.model.num_hidden_layers, cfg.model.hidden_size, cfg.model.num_attention_heads,
           cfg.model.num_key_value_heads, cfg.model.head_dim, cfg.model.num_experts,
           cfg.model.num_experts_per_tok, cfg.model.moe_intermediate_size, total_params / 1e6,
           active_params / 1e6);
    printf("steps: %d warmup + %d timed | loss %.4f (step 1) -> %.4f (step %d)\n", warmup, steps,
           loss_first, loss_last, warmup + steps);
    printf("time/step: mean %.2f ms, median %.2f ms, min %.2f ms\n", 1e3 * mean_s, 1e3 * median_s,
           1e3 * min_s);
    printf("phases (mean ms): zero grads %.2f | forward+backward %.2f | grad reduce+norm %.2f | "
           "AdamW %.2f\n",
           1e3 * phase[0] / steps, 1e3 * phase[1] / steps, 1e3 * phase[2] / steps,
           1e3 * phase[3] / steps);
    printf("throughput: %.1f tokens/s (at the median step %.1f, at the best step %.1f)\n", tok_s,
           (double)step_tokens / median_s, (double)step_tokens / min_s);
    printf("model FLOPs/token: %.4g | achieved %.2f GFLOP/s\n", flops_tok, model_flops_s * 1e-9);
    printf("sgemm peak (OpenBLAS 2048^3 fp32, %d threads, best of 5 before and after the "
           "steps): %.2f GFLOP/s (before %.2f, after %.2f) | step at %.1f%% of it\n",
           threads, peak * 1e-9, peak_before * 1e-9, peak_after * 1e-9, 100.0 * frac);
    const bool prof_ok =
        !profile || sl_profile_print(stdout, &prof, 1e3 * mean_s, "after the timed ones");
    printf("{\"impl\": \"sluice\", \"config\": \"%s\", \"threads\": %d, \"batch\": %d, "
           "\"seq\": %d, \"warmup\": %d, \"steps\": %d, \"tokens_per_s\": %.6g, "
           "\"ms_per_step\": %.6g, \"ms_per_step_median\": %.6g, \"ms_per_step_min\": %.6g, "
           "\"phase_ms\": {\"zero_grad\": %.6g, \"forward_backward\": %.6g, "
           "\"reduce_norm\": %.6g, \"adamw\": %.6g}, \"flops_per_token\": %.6g, "
           "\"model_flops_per_s\": %.6g, \"sgemm_peak_flops_per_s\": %.6g, "
           "\"peak_fraction\": %.6g, \"loss_first\": %.6g, \"loss_last\": %.6g",
           path, threads, batch, seq, warmup, steps, tok_s, 1e3 * mean_s, 1e3 * median_s,
           1e3 * min_s, 1e3 * phase[0] / steps, 1e3 * phase[1] / steps, 1e3 * phase[2] / steps,
           1e3 * phase[3] / steps, flops_tok, model_flops_s, peak, frac, loss_first, loss_last);
    printf(", \"profile\": ");
    if (profile)
        sl_profile_write_json(stdout, &prof, 1e3 * mean_s);
    else
        printf("null");
    printf("}\n");
    fflush(stdout);

    free(dt);
    free(counts);
    free(tokens);
    sl_optimizer_free(&opt);
    sl_model_free(m);
    sl_backend_free(be);
    sl_comm_finalize(world);
    if (!prof_ok) fprintf(stderr, "bench_train: the profile's rows do not add up (above)\n");
    return prof_ok ? 0 : 1;
}
