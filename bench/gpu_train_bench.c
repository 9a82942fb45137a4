/*
 * bench/gpu_train_bench.c - training throughput of the CUDA backend, as a fraction of a bf16
 * GEMM peak measured in the same run (issue 9, section 7).
 *
 *   gpu_train_bench [CONFIG] [--layers N] [--seq S] [--batch B] [--accum N] [--steps N]
 *                   [--warmup N] [--precision bf16|fp32] [--mem-gib G] [--peak-n N]
 *                   [--peak-reps N] [--nondeterministic] [--profile] [--profile-steps N]
 *                   [--init config|fast] [--defer-wgrad auto|on|off] [--wgrad-group N]
 *                   [--park auto|rows|tokens]
 *
 * CONFIG (default configs/qwen-gated-15a2b.json; also --config) is trained with its layers cut
 * to fit one GPU: the same widths, experts and routing, `--layers` decoder layers (default:
 * the most whose memory estimate below fits the device), seq `--seq` (default
 * training.seq_len), micro-batch `--batch` (default training.micro_batch_size), backend cuda,
 * training.precision `--precision` (default bf16). One step is sl_train_step, exactly what
 * `sluice train` runs per optimizer step: zero the gradients, `--accum` micro-batches of
 * forward + backward on random tokens (fixed seed), gradient norm, clipping, AdamW, router
 * statistics, with every host read the trainer makes (and training.defer_expert_wgrad, "auto"
 * unless `--defer-wgrad` says otherwise: on with a Hopper GPU, over groups of
 * training.expert_wgrad_group micro-batches unless `--wgrad-group` says otherwise, the parked
 * ones kept as training.park_expert_rows says unless `--park` does). `--warmup`
 * untimed steps (the caching allocator fills during the first), then `--steps` timed ones; the host
 * waits for the device only at the step boundaries (sl_backend_synchronize), so a step's time is
 * the device's time plus whatever the step's own host reads cost.
 *
 * Reported: tokens/s, model FLOP/s (model/counts.h convention: 6 x the active matmul
 * parameters incl. the LM head + 6 x layers x heads x head_dim x seq per token; elementwise
 * work not counted), and that as a fraction of the bf16 GEMM peak measured in the same
 * process: cublasGemmEx 8192^3 (bf16 A, B, C; fp32 accumulation), `--peak-reps` timed after 3
 * warm-ups, median, once before the model exists and once after the steps (the larger
 * counts; the second is skipped when its buffers no longer fit). The memory estimate, the
 * device memory in use after the steps, the tensors' peak bytes (what the estimate counts) and
 * the host reads per step are printed too. The last
 * line of the output is one JSON object for scripts (bench/run_gpu_bench.sh).
 *
 * --profile: after the timed steps, `--profile-steps` more (default 3), each region of the
 * step timed by CUDA events (core/profile.h, core/profile_table.h): the device time per op
 * class per step, the device's idle time between regions, the host reads' waits, and the
 * check that the rows add up to the profiled steps' wall time within 5% (exit status 1 when
 * they do not). The headline figures stay those of the unprofiled steps.
 *
 * On the emulated CUDA backend (-DSLUICE_CUDA=EMULATED) this runs end to end on the CPU with a
 * tiny config and a small --peak-n; its speed says nothing about a GPU.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/backends.h"
#include "core/profile_table.h"
#include "bench/bench_util.h"
#include "core/cuda_peak.h"
#include "core/comm.h"
#include "core/tensor.h"
#include "model/counts.h"
#include "model/model.h"
#include "moe/kernels_cuda.h"
#include "trainer/config.h"
#include "trainer/fit_device.h"
#include "trainer/train_step.h"

#define GIB ((double)(1ULL << 30))

static void print_estimate(const sl_fit_estimate *e, bool bf16, double budget) {
    printf("memory estimate: state %.2f GiB (%.0f bytes/param) + activations %.2f GiB + "
           "workspaces %.2f GiB + parked expert rows %.2f GiB = %.2f GiB of %.2f GiB usable (92%% "
           "of %.1f GiB - 2 GiB)\n",
           e->state / GIB, sl_fit_state_bytes_per_param(bf16), e->activations / GIB,
           e->workspace / GIB, e->deferred / GIB, e->total / GIB, sl_fit_usable_bytes(budget) / GIB,
           budget / GIB);
}

/* How many micro-batches' rows the estimate counts as parked at once by the deferred weight
 * gradients: the trainer's rule (sl_defer_wgrad_decide: --defer-wgrad, else the config) with
 * two or more micro-batches, one device, and the group taken as one pass in bf16 (the device
 * decides that, compute capability 9.x, which --estimate does not know: it counts them); then
 * all but the last of a group of min(group, accum) (cfg's training.expert_wgrad_group, which
 * --wgrad-group has set). */
static int estimate_parked(const sl_config *cfg, const char *defer_wgrad, bool bf16, int accum) {
    const sl_defer_facts f = {.can_park = cfg->model.num_experts > 0, .one_pass = bf16};
    if (accum < 2 ||
        !sl_defer_wgrad_decide(defer_wgrad ? defer_wgrad : cfg->train.defer_expert_wgrad, &f))
        return 0;
    const int group =
        sl_wgrad_group_decide(cfg->train.expert_wgrad_group, cfg->train.park_expert_rows, false);
    return (group < accum ? group : accum) - 1;
}

/* Whether those parked micro-batches keep tokens (the trainer's rule, sl_park_tokens_decide,
 * for cfg's training.park_expert_rows, which --park has set; one device: no exchange). */
static bool estimate_by_tokens(const sl_config *cfg, int parked) {
    return parked > 0 && sl_park_tokens_decide(cfg->train.park_expert_rows, parked + 1);
}

/* ---- options ----------------------------------------------------------------------------- */

typedef struct {
    const char *config;
    int layers, seq, batch, accum, steps, warmup, peak_n, peak_reps, profile_steps, wgrad_group;
    double mem_gib;
    const char *precision, *defer_wgrad, *park;
    bool nondeterministic, estimate_only, profile, init_fast;
} options;

static void usage(FILE *f) {
    fprintf(f,
            "usage: gpu_train_bench [CONFIG] [--config PATH] [--layers N] [--seq S] [--batch B]\n"
            "                       [--accum N] [--steps N] [--warmup N] [--precision bf16|fp32]\n"
            "                       [--mem-gib G] [--peak-n N] [--peak-reps N] "
            "[--nondeterministic]\n"
            "                       [--estimate] [--profile] [--profile-steps N]\n"
            "                       [--defer-wgrad auto|on|off] [--wgrad-group N]\n"
            "  CONFIG          default configs/qwen-gated-15a2b.json\n"
            "  --layers N      decoder layers (default: the most whose memory estimate fits)\n"
            "  --seq, --batch  default training.seq_len, training.micro_batch_size\n"
            "  --accum N       micro-batches per optimizer step (default 1)\n"
            "  --steps N       timed steps (default 10); --warmup N untimed steps (default 2)\n"
            "  --precision P   training.precision (default bf16)\n"
            "  --mem-gib G     memory to fit the default layer count in (default: the device's)\n"
            "  --peak-n N      size of the cuBLAS bf16 peak GEMM (default 8192; 0 skips it)\n"
            "  --peak-reps N   timed peak GEMMs, median reported (default 21)\n"
            "  --nondeterministic  let kernels with a faster atomic variant use it\n"
            "  --estimate      only print the memory estimate and the layer count it gives for\n"
            "                  --mem-gib (default 139, an H200) and exit; needs no GPU\n"
            "  --init config|fast  the config's initialization (default; about a minute for 9\n"
            "                  layers of 15A2B on the host) or a fast fill for timing only\n"
            "                  (trainer/fit_device.h; the loss then says nothing)\n"
            "  --defer-wgrad W training.defer_expert_wgrad (default: the config's)\n"
            "  --wgrad-group N training.expert_wgrad_group, 2 to 4 (default: the config's)\n"
            "  --park auto|rows|tokens  training.park_expert_rows (default: the config's)\n"
            "  --profile       after the timed steps, profile --profile-steps more (default 3):\n"
            "                  device time per region of the step (CUDA events), idle time,\n"
            "                  host reads; exit 1 when the rows do not add up to the step time\n"
            "                  within 5%%\n");
}

static int parse_options(int argc, char **argv, options *o) {
    *o = (options){.config = "configs/qwen-gated-15a2b.json",
                   .accum = 1,
                   .steps = 10,
                   .warmup = 2,
                   .peak_n = 8192,
                   .peak_reps = 21,
                   .profile_steps = 3,
                   .precision = "bf16",
                   .defer_wgrad = NULL,
                   .park = NULL};
    bool have_config = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int *dst = NULL;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            exit(0);
        } else if (strcmp(a, "--nondeterministic") == 0) {
            o->nondeterministic = true;
            continue;
        } else if (strcmp(a, "--estimate") == 0) {
            o->estimate_only = true;
            continue;
        } else if (strcmp(a, "--profile") == 0) {
            o->profile = true;
            continue;
        } else if (a[0] != '-') {
            if (have_config) {
                fprintf(stderr, "gpu_train_bench: a second config '%s'\n", a);
                return -1;
            }
            o->config = a;
            have_config = true;
            continue;
        }
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--config") == 0 || strcmp(a, "--precision") == 0 ||
            strcmp(a, "--mem-gib") == 0 || strcmp(a, "--init") == 0 ||
            strcmp(a, "--defer-wgrad") == 0 || strcmp(a, "--park") == 0) {
            /* string-valued options */
        } else if (strcmp(a, "--layers") == 0) {
            dst = &o->layers;
        } else if (strcmp(a, "--seq") == 0) {
            dst = &o->seq;
        } else if (strcmp(a, "--batch") == 0) {
            dst = &o->batch;
        } else if (strcmp(a, "--accum") == 0) {
            dst = &o->accum;
        } else if (strcmp(a, "--steps") == 0) {
            dst = &o->steps;
        } else if (strcmp(a, "--warmup") == 0) {
            dst = &o->warmup;
        } else if (strcmp(a, "--peak-n") == 0) {
            dst = &o->peak_n;
        } else if (strcmp(a, "--peak-reps") == 0) {
            dst = &o->peak_reps;
        } else if (strcmp(a, "--profile-steps") == 0) {
            dst = &o->profile_steps;
        } else if (strcmp(a, "--wgrad-group") == 0) {
            dst = &o->wgrad_group;
        } else {
            fprintf(stderr, "gpu_train_bench: unknown option '%s'\n", a);
            return -1;
        }
        if (!v) {
            fprintf(stderr, "gpu_train_bench: %s needs a value\n", a);
            return -1;
        }
        i++;
        if (strcmp(a, "--config") == 0) {
            o->config = v;
            have_config = true;
            continue;
        } else if (strcmp(a, "--precision") == 0) {
            o->precision = v;
            continue;
        } else if (strcmp(a, "--defer-wgrad") == 0) {
            if (strcmp(v, "auto") && strcmp(v, "on") && strcmp(v, "off")) {
                fprintf(stderr,
                        "gpu_train_bench: --defer-wgrad: expected auto, on or off, got "
                        "'%s'\n",
                        v);
                return -1;
            }
            o->defer_wgrad = v;
            continue;
        } else if (strcmp(a, "--park") == 0) {
            if (strcmp(v, "auto") && strcmp(v, "rows") && strcmp(v, "tokens")) {
                fprintf(stderr,
                        "gpu_train_bench: --park: expected auto, rows or tokens, got '%s'\n", v);
                return -1;
            }
            o->park = v;
            continue;
        } else if (strcmp(a, "--init") == 0) {
            if (strcmp(v, "fast") != 0 && strcmp(v, "config") != 0) {
                fprintf(stderr, "gpu_train_bench: --init: expected config or fast, got '%s'\n", v);
                return -1;
            }
            o->init_fast = strcmp(v, "fast") == 0;
            continue;
        } else if (strcmp(a, "--mem-gib") == 0) {
            char *end = NULL;
            o->mem_gib = strtod(v, &end);
            if (!end || *end || !(o->mem_gib > 0)) {
                fprintf(stderr, "gpu_train_bench: --mem-gib: not a positive number: '%s'\n", v);
                return -1;
            }
            continue;
        }
        char *end = NULL;
        const long x = strtol(v, &end, 10);
        if (!end || *end || x < 0 || x > 1000000000L) {
            fprintf(stderr, "gpu_train_bench: %s: not a count: '%s'\n", a, v);
            return -1;
        }
        *dst = (int)x;
    }
    if (o->steps < 1 || o->accum < 1 || o->peak_reps < 1 || o->profile_steps < 1 ||
        (o->wgrad_group != 0 && (o->wgrad_group < 2 || o->wgrad_group > SL_DW_MAX_SEGMENTS)) ||
        (strcmp(o->precision, "bf16") != 0 && strcmp(o->precision, "fp32") != 0)) {
        fprintf(stderr,
                "gpu_train_bench: need --steps >= 1, --accum >= 1, --peak-reps >= 1, "
                "--profile-steps >= 1, --wgrad-group 2 to %d and --precision bf16 or "
                "fp32\n",
                SL_DW_MAX_SEGMENTS);
        return -1;
    }
    return 0;
}

/* --estimate: the layer count and estimate for a budget, without a GPU. */
static int estimate_only(const sl_config *cfg, const options *o, int64_t tokens, bool bf16) {
    const double budget = (o->mem_gib > 0 ? o->mem_gib : 139.0) * GIB;
    const int parked = estimate_parked(cfg, o->defer_wgrad, bf16, o->accum);
    const bool by_tokens = estimate_by_tokens(cfg, parked);
    const int layers = o->layers > 0
                           ? o->layers
                           : sl_fit_layers(&cfg->model, tokens, bf16, parked, by_tokens, budget);
    const sl_fit_estimate e =
        sl_fit_estimate_memory(&cfg->model, layers, tokens, bf16, parked, by_tokens);
    printf("gpu_train_bench --estimate: %s | %d of %d layers | %lld tokens per micro-batch | "
           "precision %s\n",
           o->config, layers, cfg->model.num_hidden_layers, (long long)tokens, o->precision);
    print_estimate(&e, bf16, budget);
    printf("{\"config\": \"%s\", \"layers\": %d, \"tokens\": %lld, \"precision\": \"%s\", "
           "\"budget_gib\": %.6g, \"usable_gib\": %.6g, \"state_gib\": %.6g, "
           "\"activations_gib\": %.6g, \"workspace_gib\": %.6g, \"deferred_gib\": %.6g, "
           "\"parked\": %d, \"park_tokens\": %s, \"mem_estimate_gib\": %.6g}\n",
           o->config, layers, (long long)tokens, o->precision, budget / GIB,
           sl_fit_usable_bytes(budget) / GIB, e.state / GIB, e.activations / GIB, e.workspace / GIB,
           e.deferred / GIB, parked, by_tokens ? "true" : "false", e.total / GIB);
    return 0;
}

/* Measures the peak unless disabled; peak->n == 0 when not measured (reason in why). */
static void measure_peak(const options *o, sl_bench_peak *peak, char *why, size_t whylen) {
    memset(peak, 0, sizeof *peak);
    if (o->peak_n <= 0) {
        snprintf(why, whylen, "skipped (--peak-n 0)");
        return;
    }
    if (sl_bench_gemm_peak(o->peak_n, 3, o->peak_reps, peak, why, whylen) != 0) peak->n = 0;
}

int main(int argc, char **argv) {
    options o;
    if (parse_options(argc, argv, &o) != 0) {
        fprintf(stderr, "gpu_train_bench: --help lists the options\n");
        return 2;
    }
    sl_comm *world = sl_comm_init_world(&argc, &argv);
    int rc = 1;
    static sl_config cfg; /* large: keep it off the stack */
    char err[2048], why_before[512] = "", why_after[512] = "";
    sl_backend *be = NULL;
    sl_fit_model fm = {0};
    int64_t *counts = NULL;
    int32_t *tokens = NULL;
    double *dt = NULL;

    if (sl_config_load(o.config, &cfg, err, sizeof err) != 0) {
        fprintf(stderr, "gpu_train_bench: %s\n", err);
        goto out;
    }
    if (o.wgrad_group) cfg.train.expert_wgrad_group = o.wgrad_group;
    if (o.park)
        snprintf(cfg.train.park_expert_rows, sizeof cfg.train.park_expert_rows, "%s", o.park);
    const int full_layers = cfg.model.num_hidden_layers;
    const int seq = o.seq > 0 ? o.seq : cfg.train.seq_len;
    const int batch = o.batch > 0 ? o.batch : cfg.train.micro_batch_size;
    const bool bf16 = strcmp(o.precision, "bf16") == 0;
    const int64_t tokens_mb = (int64_t)batch * seq;
    if (o.estimate_only) {
        rc = estimate_only(&cfg, &o, tokens_mb, bf16);
        goto out;
    }

    /* as launch/cmd_train.c creates it (backend.deterministic from the config or the flag) */
    sl_backend_params bp = {.threads = 0,
                            .device = -1,
                            .allow_nondeterministic =
                                o.nondeterministic || !cfg.backend.deterministic};
    be = sl_backend_create("cuda", &bp, err, sizeof err);
    if (!be) {
        fprintf(stderr, "gpu_train_bench: backend cuda: %s\n", err);
        goto out;
    }
    sl_bench_device dev;
    if (sl_bench_device_info(&dev, err, sizeof err) != 0) {
        fprintf(stderr, "gpu_train_bench: %s\n", err);
        goto out;
    }

    /* The peak first, before the model takes the memory. */
    sl_bench_peak peak_before, peak_after;
    measure_peak(&o, &peak_before, why_before, sizeof why_before);

    /* Layers: the most that fit, unless given. */
    const double budget = o.mem_gib > 0 ? o.mem_gib * GIB : (double)dev.total_bytes;
    const int parked = estimate_parked(&cfg, o.defer_wgrad, bf16, o.accum);
    const bool by_tokens = estimate_by_tokens(&cfg, parked);
    const int layers = o.layers > 0
                           ? o.layers
                           : sl_fit_layers(&cfg.model, tokens_mb, bf16, parked, by_tokens, budget);
    if (layers > SL_MAX_LAYERS) {
        fprintf(stderr, "gpu_train_bench: --layers %d exceeds %d\n", layers, SL_MAX_LAYERS);
        goto out;
    }
    const sl_fit_estimate est =
        sl_fit_estimate_memory(&cfg.model, layers, tokens_mb, bf16, parked, by_tokens);
    const sl_fit_settings fs = {.layers = layers,
                                .seq = seq,
                                .batch = batch,
                                .accum = o.accum,
                                .precision = o.precision,
                                .nondeterministic = o.nondeterministic};
    /* created as trainer/trainer.c creates it for one rank, with the config's initialization */
    if (sl_fit_configure(&cfg, &fs, err, sizeof err) != 0 ||
        sl_fit_create(&fm, &cfg, be, world, o.init_fast ? SL_FIT_INIT_FAST : SL_FIT_INIT_CONFIG,
                      err, sizeof err) != 0) {
        fprintf(stderr, "gpu_train_bench: %s\n", err);
        goto out;
    }
    sl_model *m = fm.model;
    const char *ran_dtype = sl_dtype_name(sl_tensor_dtype(m->x[0]));
    if (strcmp(ran_dtype, bf16 ? "bf16" : "f32") != 0)
        fprintf(stderr,
                "gpu_train_bench: warning: --precision %s asked for, but the model's activations "
                "are %s\n",
                o.precision, ran_dtype);

    int64_t total_params = 0, active_params = 0;
    sl_model_param_count(&cfg.model, &total_params, &active_params);
    const double flops_tok = sl_model_flops_per_token(&cfg.model, seq);

    const int nl = cfg.model.num_hidden_layers, ne = cfg.model.num_experts;
    counts = calloc((size_t)nl * (ne > 0 ? ne : 1), sizeof(int64_t));
    tokens = malloc(sizeof(int32_t) * (size_t)batch * (size_t)(seq + 1));
    dt = malloc(sizeof(double) * (size_t)o.steps);
    if (!counts || !tokens || !dt) {
        fprintf(stderr, "gpu_train_bench: out of host memory\n");
        goto out;
    }
    sl_fit_tokens src = {.batch = batch, .seq = seq, .vocab = cfg.model.vocab_size};
    if (o.defer_wgrad)
        snprintf(cfg.train.defer_expert_wgrad, sizeof cfg.train.defer_expert_wgrad, "%s",
                 o.defer_wgrad);
    const sl_stepper stepper = {.model = m,
                                .opt = &fm.opt,
                                .world = world,
                                .micro_batches = o.accum,
                                .tokens = tokens,
                                .wgrad_group = sl_train_prepare_wgrad(&cfg.train, be, m, o.accum)};
    const int group = sl_train_wgrad_group_in_step(&cfg.train, be, m, o.accum);
    const int64_t step_tokens = tokens_mb * o.accum;
    double loss_first = NAN, loss_last = NAN, t_timed = 0.0;
    long long reads_step = -1, syncs_step = -1;
    sl_backend_synchronize(be);
    for (int s = 0; s < o.warmup + o.steps; s++) {
        const long long r0 = sl_backend_host_reads(be), y0 = sl_backend_syncs(be);
        const double t0 = sl_bench_now();
        sl_step_result res = {.counts = ne > 0 ? counts : NULL, .metrics = false};
        if (sl_train_step(&stepper, &cfg.train, s, sl_fit_random_batch, &src, &res, err,
                          sizeof err) != 0) {
            fprintf(stderr, "gpu_train_bench: %s\n", err);
            goto out;
        }
        sl_backend_synchronize(be);
        const double t1 = sl_bench_now();
        /* the closing synchronize is the benchmark's, not the step's */
        reads_step = sl_backend_host_reads(be) - r0;
        syncs_step = sl_backend_syncs(be) - y0 - 1;
        if (s == 0) loss_first = res.loss;
        loss_last = res.loss;
        if (s >= o.warmup) {
            dt[s - o.warmup] = t1 - t0;
            t_timed += t1 - t0;
        }
    }
    /* --profile: more steps with every region timed; the figures above stay unprofiled. */
    static sl_profile_report prof; /* large: keep it off the stack */
    if (o.profile) {
        sl_profile_enable(be, true);
        for (int s = 0; s < o.profile_steps; s++) {
            sl_profile_step_begin(be);
            sl_step_result res = {.counts = ne > 0 ? counts : NULL, .metrics = false};
            if (sl_train_step(&stepper, &cfg.train, o.warmup + o.steps + s, sl_fit_random_batch,
                              &src, &res, err, sizeof err) != 0) {
                fprintf(stderr, "gpu_train_bench: %s\n", err);
                goto out;
            }
            sl_profile_step_end(be); /* waits for the device */
        }
        sl_profile_get(be, &prof);
        sl_profile_enable(be, false);
    }
    sl_bench_device dev_after;
    const bool have_after = sl_bench_device_info(&dev_after, err, sizeof err) == 0;
    const double used = have_after ? (double)(dev_after.total_bytes - dev_after.free_bytes) : NAN;
    /* what the tensors held at their most (sl_backend_tensor_bytes): the figure the estimate
     * counts, without the allocator's cache, cuBLAS's workspace and the context */
    long long tensors_peak = 0;
    sl_backend_tensor_bytes(be, NULL, &tensors_peak);
    measure_peak(&o, &peak_after, why_after, sizeof why_after);
    const double peak = peak_before.median_flops > peak_after.median_flops
                            ? peak_before.median_flops
                            : peak_after.median_flops;

    const double mean_s = t_timed / o.steps;
    qsort(dt, (size_t)o.steps, sizeof(double), sl_bench_cmp_double);
    const double median_s = dt[o.steps / 2], min_s = dt[0];
    const double tok_s = (double)step_tokens / mean_s;
    const double model_flops_s = flops_tok * tok_s;
    const double frac = peak > 0 ? model_flops_s / peak : NAN;

    printf("gpu_train_bench: %s | %s (sm_%d%d, %d SMs, %.1f GiB) | precision %s (activations "
           "%s)\n",
           o.config, dev.name, dev.major, dev.minor, dev.sms, (double)dev.total_bytes / GIB,
           o.precision, ran_dtype);
    printf("model: %d of %d layers, hidden %d, %d/%d heads x %d, %d experts top-%d (expert ffn "
           "%d), vocab %d | %.1fM params, %.1fM active/token\n",
           nl, full_layers, cfg.model.hidden_size, cfg.model.num_attention_heads,
           cfg.model.num_key_value_heads, cfg.model.head_dim, ne, cfg.model.num_experts_per_tok,
           cfg.model.moe_intermediate_size, cfg.model.vocab_size, total_params / 1e6,
           active_params / 1e6);
    printf("step: %d micro-batch(es) of %d x %d = %lld tokens/step | %d warmup + %d timed | "
           "loss %.4f (step 1) -> %.4f (step %d)\n",
           o.accum, batch, seq, (long long)step_tokens, o.warmup, o.steps, loss_first, loss_last,
           o.warmup + o.steps);
    printf("memory estimate (%s%s): state %.2f GiB (%.0f bytes/param) + activations %.2f GiB + "
           "workspaces %.2f GiB = %.2f GiB of %.2f GiB usable (92%% of %.1f GiB - 2 GiB)\n",
           o.layers > 0 ? "--layers given" : "chose the layer count",
           o.mem_gib > 0 ? ", --mem-gib" : "", est.state / GIB, sl_fit_state_bytes_per_param(bf16),
           est.activations / GIB, est.workspace / GIB, est.total / GIB,
           sl_fit_usable_bytes(budget) / GIB, budget / GIB);
    printf("device memory in use after the steps (cudaMemGetInfo: tensors, allocator cache, "
           "context): %.2f GiB; the tensors at their peak: %.2f GiB (sl_backend_tensor_bytes)\n",
           used / GIB, (double)tensors_peak / GIB);
    /* where the MoE layers' expert counts live (moe/token_dispatcher.h): on the device where
     * the expert GEMMs read them there, else one host read per MoE layer and micro-batch */
    bool counts_on_device = false;
    for (int l = 0; l < m->cfg.num_hidden_layers; l++)
        if (m->ffn[l].is_moe) counts_on_device = m->ffn[l].moe.disp->counts_on_device;
    printf("host reads per step: %lld (+ %lld explicit synchronizations; MoE expert counts %s)\n",
           reads_step, syncs_step,
           counts_on_device ? "on the device" : "read on the host per layer and micro-batch");
    /* the kernel the profile's attention rows time (attention.kernel, docs/attention.md) */
    const char *attn_ran = sl_backend_attn_kernel_ran(be);
    attn_ran = attn_ran ? attn_ran : "?";
    printf("attention kernel: %s\n", attn_ran);
    /* how the last step's expert GEMMs ran (moe/kernels_cuda.h: SLUICE_EXPERT_GEMM, auto's rule) */
    const char *gemm_path = sl_cuda_expert_gemm_last_path(),
               *dw_path = sl_cuda_expert_gemm_dw_path();
    char over[64] = "";
    if (group > 1) snprintf(over, sizeof over, " (over groups of %d micro-batches)", group);
    printf("expert GEMMs (the last calls): forward and data gradient %s, weight gradient %s%s\n",
           gemm_path, dw_path, over);
    printf("time/step: mean %.2f ms, median %.2f ms, min %.2f ms\n", 1e3 * mean_s, 1e3 * median_s,
           1e3 * min_s);
    printf("throughput: %.1f tokens/s (at the median step %.1f, at the best step %.1f)\n", tok_s,
           (double)step_tokens / median_s, (double)step_tokens / min_s);
    printf("model FLOPs/token %.4g (model/counts.h: 6 x active matmul params + 6 L H D S) | "
           "%.2f TFLOP/s\n",
           flops_tok, model_flops_s * 1e-12);
    if (peak_before.n)
        printf("bf16 GEMM peak before the steps (cublasGemmEx %d^3, fp32 accumulation, median of "
               "%d): %.1f TFLOP/s (best %.1f, worst %.1f)\n",
               peak_before.n, peak_before.reps, peak_before.median_flops * 1e-12,
               peak_before.best_flops * 1e-12, peak_before.worst_flops * 1e-12);
    else
        printf("bf16 GEMM peak before the steps: not measured: %s\n", why_before);
    if (peak_after.n)
        printf("bf16 GEMM peak after the steps: %.1f TFLOP/s (best %.1f, worst %.1f)\n",
               peak_after.median_flops * 1e-12, peak_after.best_flops * 1e-12,
               peak_after.worst_flops * 1e-12);
    else
        printf("bf16 GEMM peak after the steps: not measured: %s\n", why_after);
    printf("model FLOP/s at %.1f%% of the measured bf16 GEMM peak (target >= 35%%)\n",
           100.0 * frac);
    const bool prof_ok =
        !o.profile || sl_profile_print(stdout, &prof, 1e3 * mean_s, "after the timed ones");
    /* JSON: one line; numbers that were not measured are null */
    printf("{\"impl\": \"sluice\", \"config\": \"%s\", \"device\": \"%s\", \"precision\": \"%s\", "
           "\"activation_dtype\": \"%s\", \"layers\": %d, \"full_layers\": %d, \"batch\": %d, "
           "\"seq\": %d, \"accum\": %d, \"warmup\": %d, \"steps\": %d, \"tokens_per_step\": %lld, "
           "\"host_reads_per_step\": %lld, \"syncs_per_step\": %lld, \"total_params\": %lld, "
           "\"active_params\": %lld, \"gemm_peak_n\": %d, \"init\": \"%s\", "
           "\"experts\": %d, \"topk\": %d, \"attention_kernel\": \"%s\", "
           "\"expert_gemm_path\": \"%s\", \"expert_gemm_dw_path\": \"%s\", "
           "\"defer_expert_wgrad\": %s, \"expert_wgrad_group\": %d, \"park_expert_rows\": \"%s\", "
           "\"optimizer_bytes_per_param\": %d",
           o.config, dev.name, o.precision, ran_dtype, nl, full_layers, batch, seq, o.accum,
           o.warmup, o.steps, (long long)step_tokens, reads_step, syncs_step,
           (long long)total_params, (long long)active_params,
           peak_before.n ? peak_before.n : peak_after.n, o.init_fast ? "fast" : "config", ne,
           cfg.model.num_experts_per_tok, attn_ran, gemm_path, dw_path,
           group > 1 ? "true" : "false", group,
           sl_train_park_tokens(&cfg.train, be, m, o.accum) ? "tokens" : "rows",
           /* what AdamW moves (one rank: every parameter is its shard): the fp32 master, m, v
            * read and written, the fp32 gradient read, and the bf16 compute copy written */
           m->params.wc[SL_PGROUP_DENSE] || m->params.wc[SL_PGROUP_EXPERT] ? 30 : 28);
    const struct {
        const char *key;
        double v;
    } nums[] = {{"tokens_per_s", tok_s},
                {"ms_per_step", 1e3 * mean_s},
                {"ms_per_step_median", 1e3 * median_s},
                {"ms_per_step_min", 1e3 * min_s},
                {"flops_per_token", flops_tok},
                {"model_tflops", model_flops_s * 1e-12},
                {"gemm_peak_tflops", peak > 0 ? peak * 1e-12 : NAN},
                {"gemm_peak_before_tflops", peak_before.n ? peak_before.median_flops * 1e-12 : NAN},
                {"gemm_peak_after_tflops", peak_after.n ? peak_after.median_flops * 1e-12 : NAN},
                {"peak_fraction", frac},
                {"mem_estimate_gib", est.total / GIB},
                {"mem_used_gib", used / GIB},
                {"mem_tensors_peak_gib", (double)tensors_peak / GIB},
                {"device_mem_gib", (double)dev.total_bytes / GIB},
                {"loss_first", loss_first},
                {"loss_last", loss_last}};
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) {
        if (isfinite(nums[i].v))
            printf(", \"%s\": %.6g", nums[i].key, nums[i].v);
        else
            printf(", \"%s\": null", nums[i].key);
    }
    printf(", \"profile\": ");
    if (o.profile)
        sl_profile_write_json(stdout, &prof, 1e3 * mean_s);
    else
        printf("null");
    printf("}\n");
    fflush(stdout);
    rc = prof_ok ? 0 : 1;
    if (!prof_ok)
        fprintf(stderr, "gpu_train_bench: the profile's rows do not add up to the step time "
                        "(above)\n");
out:
    free(dt);
    free(tokens);
    free(counts);
    sl_fit_free(&fm);
    if (be) sl_backend_free(be);
    sl_comm_finalize(world);
    return rc;
}
