/*
 * launch/cmd_plan.c - `sluice plan CONFIG --gpus N ...`: what a run needs per GPU before it is
 * launched (trainer/plan.h computes it; docs/plan.md explains every line). Text or --json.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "core/log.h"
#include "launch/commands.h"
#include "trainer/plan.h"

#define GIB ((double)(1ULL << 30))

static void usage(FILE *f) {
    const sl_plan_gpu *d = sl_plan_gpu_default();
    fprintf(f,
            "usage: sluice plan CONFIG --gpus N [options]\n"
            "\n"
            "Prints what a training run of CONFIG needs per GPU before it is launched:\n"
            "parameters, weight/gradient/optimizer bytes, activations per layer and in total\n"
            "for each recomputation mode, expert all-to-all and gradient reduction bytes per\n"
            "step, model FLOPs, an estimated step time (component by component, from rates\n"
            "measured on a GPU: trainer/plan_rates.c) and MFU, and whether it fits in memory\n"
            "(if not, which option would make it fit). No model is allocated. With\n"
            "training.stages the stage with the most tokens per micro-batch is planned.\n"
            "Explained in docs/plan.md.\n"
            "\n"
            "options:\n"
            "  --gpus N            GPUs (ranks), required\n"
            "  --gpu NAME          GPU kind: %s (default %s); sets the defaults below and\n"
            "                      the rates of the step time (docs/plan.md, \"Rates\")\n"
            "  --ep E              expert parallelism (default: parallel.expert_parallel)\n"
            "  --zero1             shard the AdamW moments (default: parallel.zero1)\n"
            "  --no-zero1          do not\n"
            "  --seq-len S         sequence length (default: training.seq_len)\n"
            "  --micro-batch B     sequences per micro-batch (default: "
            "training.micro_batch_size)\n"
            "  --global-batch T    tokens per optimizer step, all GPUs (default:\n"
            "                      training.global_batch_tokens)\n"
            "  --layers N          plan the first N decoder layers only (default: all)\n"
            "  --recompute MODE    none | attention | layer (default: training.recompute)\n"
            "  --expert-gemm S     auto | grouped | per-expert | lanes | wgmma: how the\n"
            "                      experts' GEMMs are timed, as SLUICE_EXPERT_GEMM runs them\n"
            "                      (default auto: on Hopper (h100, h200) in bf16 wgmma, the\n"
            "                      Hopper grouped GEMM, for every pass; elsewhere, and for\n"
            "                      wgmma where it does not apply, forward and data gradient\n"
            "                      grouped, weight gradient on the lanes below %d rows per\n"
            "                      expert, per expert from there)\n"
            "  --defer-wgrad W     auto | on | off: the experts' weight gradients over groups\n"
            "                      of micro-batches, as training.defer_expert_wgrad (default:\n"
            "                      that key): their parked rows in the memory, each group\n"
            "                      timed as one pass over its micro-batches' rows per expert\n"
            "  --wgrad-group N     micro-batches per group, 2 to 4, as\n"
            "                      training.expert_wgrad_group (default: that key)\n"
            "  --park P            auto | rows | tokens: what a group's parked micro-batches\n"
            "                      keep, as training.park_expert_rows (default: that key)\n"
            "  --gpu-memory GiB    memory per GPU (default: the GPU's, %g for %s)\n"
            "  --gpu-tflops T      dense bf16 peak per GPU for the MFU (default: the GPU's\n"
            "                      datasheet peak, %g); another value scales every compute rate\n"
            "  --efficiency F      the flat model instead of the rates: every FLOP at F x the\n"
            "                      peak, (0, 1] (%g is the old default)\n"
            "  --nvlink-gbs B      NVLink GB/s per GPU and direction (default: the GPU's, %g)\n"
            "  --ib-gbs B          InfiniBand GB/s per GPU and direction (default %g, NDR 400)\n"
            "  --gpus-per-node G   GPUs per node: NVLink inside, InfiniBand between (default %d)\n"
            "  --json              print the plan as one JSON object\n"
            "  -h, --help          show this help\n"
            "\n"
            "Exit status: 0 when a plan was printed (whether or not it fits: see its last\n"
            "line, or \"fits\" in the JSON), 1 for a bad config, 2 for bad options.\n",
            sl_plan_gpu_names(), d->name, SL_EXPERTS_PER_EXPERT_ROWS, d->memory_gib, d->label,
            d->peak_tflops, SL_PLAN_EFFICIENCY, d->nvlink_gbs, d->ib_gbs, d->gpus_per_node);
}

static int bad(const char *flag, const char *value, const char *what) {
    fprintf(stderr, "sluice plan: error: %s: '%s' is not %s\n", flag, value, what);
    return 2;
}

/* A positive int option. */
static int parse_int(const char *flag, const char *v, int *out) {
    uint64_t x;
    if (sl_cli_parse_u64(v, false, &x) || x < 1 || x > 1000000000)
        return bad(flag, v, "a positive integer");
    *out = (int)x;
    return 0;
}

/* A positive finite number option (max: upper bound, 0 = none). */
static int parse_num(const char *flag, const char *v, double max, double *out) {
    char *end;
    const double x = strtod(v, &end);
    if (end == v || *end || !(x > 0) || x > 1e12 || (max > 0 && x > max))
        return bad(flag, v, max > 0 ? "a number in (0, 1]" : "a positive number");
    *out = x;
    return 0;
}

static void print_text(const sl_plan *p, const char *path) {
    const double g = GIB;
    printf("plan: %s, stage '%s' (%s), %d GPU%s (%d node%s of %d), EP %d, EDP %d, ZeRO-1 %s, "
           "recompute %s, %s\n",
           path, p->stage, p->n_stages > 1 ? "the most tokens per micro-batch" : "the only one",
           p->gpus, p->gpus == 1 ? "" : "s", p->nodes, p->nodes == 1 ? "" : "s", p->gpus_per_node,
           p->ep, p->edp, p->zero1 ? "on" : "off", sl_memory_mode_name(p->mode),
           p->act_bytes == 2 ? "bf16" : "fp32");
    printf("batch: sequence %d x micro-batch %d = %lld tokens per micro-batch; global batch "
           "%lld tokens = %d micro-batch%s per GPU per step\n",
           p->seq_len, p->micro_batch, (long long)p->micro_tokens,
           (long long)p->global_batch_tokens, p->accum, p->accum == 1 ? "" : "es");
    if (p->flat)
        printf("hardware: %s, %.0f TFLOP/s bf16 x %.2f efficiency (flat model), %.1f GiB, "
               "NVLink %.0f GB/s, InfiniBand %.0f GB/s (docs/plan.md)\n",
               p->gpu->label, p->gpu_tflops, p->efficiency, p->gpu_memory_gib, p->nvlink_gbs,
               p->ib_gbs);
    else
        printf("hardware: %s, %.0f TFLOP/s bf16 peak, %.1f GiB, NVLink %.0f GB/s, InfiniBand "
               "%.0f GB/s; step-time rates %s (docs/plan.md)\n",
               p->gpu->label, p->gpu_tflops, p->gpu_memory_gib, p->nvlink_gbs, p->ib_gbs,
               p->gpu->rates_source);
    printf("\nparameters (model): %lld total, %lld active per token, %lld in routed experts\n",
           (long long)p->params_total, (long long)p->params_active, (long long)p->params_expert);
    printf("parameters per GPU: %lld = %lld expert (1/%d of them) + %lld non-expert "
           "(replicated)\n",
           (long long)p->gpu_params, (long long)p->gpu_params_expert, p->ep,
           (long long)p->gpu_params_dense);
    printf("\nmemory per GPU                             GiB\n");
    printf("  bf16 compute weights               %10.2f\n", p->weights_compute / g);
    printf("  fp32 master weights                %10.2f\n", p->master / g);
    printf("  fp32 gradients                     %10.2f\n", p->grads / g);
    printf("  AdamW moments, without ZeRO-1      %10.2f%s\n", p->adam_full / g,
           p->zero1 ? "" : "  <- used");
    printf("  AdamW moments, with ZeRO-1         %10.2f%s\n", p->adam_zero1 / g,
           p->zero1 ? "  <- used" : "");
    printf("  activations (%lld tokens)     per layer  all layers  shared  workspace  total\n",
           (long long)p->micro_tokens);
    for (int i = 0; i < 3; i++) {
        const sl_activation_bytes *a = &p->act[i];
        printf("    recompute %-10s        %9.2f  %10.2f  %6.2f  %9.2f  %6.2f%s\n",
               sl_memory_mode_name((sl_memory_mode)i), a->per_layer_max / g, a->layers / g,
               a->shared / g, a->workspace / g, a->total / g, (int)p->mode == i ? "  <- used" : "");
    }
    if (p->defer_wgrad && p->mode == SL_MEMORY_LAYER)
        printf("  parked expert rows (training.defer_expert_wgrad) %6.2f  (none: recompute "
               "layer)\n",
               p->deferred / g);
    else if (p->defer_wgrad)
        printf("  parked expert rows (training.defer_expert_wgrad) %6.2f  (%d micro-batch%s of "
               "each group of %d, kept as %s)\n",
               p->deferred / g, p->wgrad_group - 1, p->wgrad_group > 2 ? "es" : "", p->wgrad_group,
               p->park_tokens ? "tokens" : "rows");
    printf("  total                              %10.2f of %.2f usable (92%% of %.1f GiB - 2 "
           "GiB)\n",
           p->total / g, p->usable / g, p->gpu_memory_gib);
    printf("\ncommunication per GPU per step (bytes sent)\n");
    printf("  expert all-to-all       %8.2f GiB (%.2f NVLink, %.2f InfiniBand)\n", p->a2a_bytes / g,
           p->a2a_nvlink_bytes / g, p->a2a_ib_bytes / g);
    printf("  gradient %-14s %8.2f GiB (ring; payload %.2f GiB non-expert over %d "
           "GPUs%s, %.2f GiB expert over %d%s)\n",
           p->zero1 ? "reduce-scatter" : "all-reduce", p->grad_bytes / g, p->grad_dense_payload / g,
           p->gpus, p->dense_ib ? " via IB" : "", p->grad_expert_payload / g, p->edp,
           p->expert_ib ? " via IB" : "");
    printf("  ZeRO-1 all-gather       %8.2f GiB\n", p->ag_bytes / g);
    printf("\nFLOPs: %.4g per token (model/counts.h), %.4g per step per GPU, %.4g per step "
           "in all (%.4g with recomputation per GPU)\n",
           p->flops_token, p->flops_step_gpu, p->flops_step_total, p->hw_flops_step_gpu);
    printf("step time (estimate): %.3f s = compute %.3f + exposed all-to-all %.3f (of %.3f; "
           "%.3f %s) + exposed gradient %s %.3f (of %.3f) + all-gather %.3f\n",
           p->t_step, p->t_compute, p->t_a2a - p->t_a2a_hidden, p->t_a2a, p->t_a2a_hidden,
           p->overlap_moe ? "hidden behind the experts' weight gradients"
                          : "hidden: parallel.overlap_moe is off",
           p->zero1 ? "reduce-scatter" : "all-reduce", p->t_grad_exposed, p->t_grad, p->t_ag);
    printf("throughput (estimate): %.0f tokens/s in all, %.0f per GPU; MFU %.1f%%\n",
           p->tokens_per_s, p->tokens_per_s / p->gpus, 100.0 * p->mfu);
    if (p->n_parts > 0) {
        char over[48] = " over pairs of micro-batches";
        if (p->wgrad_group != 2)
            snprintf(over, sizeof over, " over groups of %d micro-batches", p->wgrad_group);
        printf("\ncompute per GPU per step, by component (%.0f rows per expert, expert GEMMs "
               "%s: %s, weight grad %s%s)\n%79s\n",
               p->rows_per_expert, p->expert_gemm,
               sl_expert_strategy_name(p->expert_path[SL_PASS_FWD]),
               sl_expert_strategy_name(p->expert_path[SL_PASS_WGRAD]), p->wgrad_grouped ? over : "",
               "ms  TFLOP/s");
        for (int i = 0; i < p->n_parts; i++) {
            const sl_plan_part *c = &p->parts[i];
            printf("  %-58s %9.2f", c->name, 1e3 * c->seconds);
            if (c->flops > 0 && c->seconds > 0) printf("  %7.0f", c->flops / c->seconds / 1e12);
            printf("\n");
        }
        printf("  %-58s %9.2f\n", "compute", 1e3 * p->t_compute);
    }
    if (p->fits)
        printf("\nfits: %.2f of %.2f GiB usable\n", p->total / g, p->usable / g);
    else
        printf("\nDOES NOT FIT: %.2f GiB needed, %.2f usable; would fit with: %s\n", p->total / g,
               p->usable / g, p->advice);
}

static cJSON *act_json(const sl_activation_bytes *a) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "per_layer_bytes", a->per_layer_max);
    cJSON_AddNumberToObject(o, "layers_bytes", a->layers);
    cJSON_AddNumberToObject(o, "shared_bytes", a->shared);
    cJSON_AddNumberToObject(o, "workspace_bytes", a->workspace);
    cJSON_AddNumberToObject(o, "total_bytes", a->total);
    return o;
}

static void print_json(const sl_plan *p, const char *path) {
    cJSON *o = cJSON_CreateObject();
#define NUM(k, v) cJSON_AddNumberToObject(o, k, (double)(v))
    cJSON_AddStringToObject(o, "config", path);
    cJSON_AddStringToObject(o, "stage", p->stage);
    NUM("gpus", p->gpus);
    NUM("gpus_per_node", p->gpus_per_node);
    NUM("nodes", p->nodes);
    NUM("ep", p->ep);
    NUM("edp", p->edp);
    cJSON_AddBoolToObject(o, "zero1", p->zero1);
    cJSON_AddStringToObject(o, "recompute", sl_memory_mode_name(p->mode));
    cJSON_AddStringToObject(o, "precision", p->act_bytes == 2 ? "bf16" : "fp32");
    NUM("seq_len", p->seq_len);
    NUM("micro_batch", p->micro_batch);
    NUM("micro_batch_tokens", p->micro_tokens);
    NUM("global_batch_tokens", p->global_batch_tokens);
    NUM("accum", p->accum);
    NUM("params_total", p->params_total);
    NUM("params_active", p->params_active);
    NUM("params_expert", p->params_expert);
    NUM("gpu_params", p->gpu_params);
    NUM("gpu_params_expert", p->gpu_params_expert);
    NUM("gpu_params_non_expert", p->gpu_params_dense);
    NUM("bf16_weights_bytes", p->weights_compute);
    NUM("fp32_master_bytes", p->master);
    NUM("gradient_bytes", p->grads);
    NUM("adamw_bytes", p->adam_full);
    NUM("adamw_zero1_bytes", p->adam_zero1);
    NUM("state_bytes", p->state);
    cJSON *acts = cJSON_AddObjectToObject(o, "activations");
    for (int i = 0; i < 3; i++)
        cJSON_AddItemToObject(acts, sl_memory_mode_name((sl_memory_mode)i), act_json(&p->act[i]));
    cJSON_AddBoolToObject(o, "defer_expert_wgrad", p->defer_wgrad);
    NUM("deferred_bytes", p->deferred);
    cJSON_AddBoolToObject(o, "park_tokens", p->park_tokens);
    NUM("total_bytes", p->total);
    NUM("usable_bytes", p->usable);
    cJSON_AddBoolToObject(o, "fits", p->fits);
    cJSON_AddStringToObject(o, "advice", p->advice);
    NUM("alltoall_bytes", p->a2a_bytes);
    NUM("alltoall_nvlink_bytes", p->a2a_nvlink_bytes);
    NUM("alltoall_ib_bytes", p->a2a_ib_bytes);
    cJSON_AddStringToObject(o, "grad_reduce_op", p->zero1 ? "reduce-scatter" : "all-reduce");
    NUM("grad_reduce_non_expert_payload_bytes", p->grad_dense_payload);
    NUM("grad_reduce_expert_payload_bytes", p->grad_expert_payload);
    NUM("grad_reduce_bytes", p->grad_bytes);
    NUM("allgather_bytes", p->ag_bytes);
    NUM("flops_per_token", p->flops_token);
    NUM("flops_per_step_gpu", p->flops_step_gpu);
    NUM("flops_per_step", p->flops_step_total);
    NUM("hw_flops_per_step_gpu", p->hw_flops_step_gpu);
    NUM("compute_s", p->t_compute);
    NUM("alltoall_s", p->t_a2a);
    cJSON_AddBoolToObject(o, "overlap_moe", p->overlap_moe);
    NUM("expert_dw_flops", p->expert_dw_flops);
    NUM("alltoall_hidden_s", p->t_a2a_hidden);
    NUM("grad_reduce_s", p->t_grad);
    NUM("grad_reduce_exposed_s", p->t_grad_exposed);
    NUM("allgather_s", p->t_ag);
    NUM("step_s", p->t_step);
    NUM("tokens_per_s", p->tokens_per_s);
    NUM("mfu", p->mfu);
    cJSON_AddStringToObject(o, "gpu", p->gpu->name);
    cJSON_AddStringToObject(o, "rates_source", p->gpu->rates_source);
    cJSON_AddBoolToObject(o, "flat_model", p->flat);
    NUM("layers", p->layers);
    NUM("rows_per_expert", p->rows_per_expert);
    cJSON_AddStringToObject(o, "expert_gemm", p->expert_gemm);
    cJSON_AddStringToObject(o, "expert_gemm_path",
                            sl_expert_strategy_name(p->expert_path[SL_PASS_FWD]));
    cJSON_AddStringToObject(o, "expert_gemm_dw_path",
                            sl_expert_strategy_name(p->expert_path[SL_PASS_WGRAD]));
    cJSON_AddNumberToObject(o, "expert_wgrad_group", p->wgrad_grouped ? p->wgrad_group : 1);
    cJSON *parts = cJSON_AddArrayToObject(o, "compute_parts");
    for (int i = 0; i < p->n_parts; i++) {
        cJSON *c = cJSON_CreateObject();
        cJSON_AddStringToObject(c, "name", p->parts[i].name);
        cJSON_AddStringToObject(c, "profile_regions", p->parts[i].regions);
        cJSON_AddNumberToObject(c, "flops", p->parts[i].flops);
        cJSON_AddNumberToObject(c, "seconds", p->parts[i].seconds);
        cJSON_AddItemToArray(parts, c);
    }
    NUM("gpu_memory_gib", p->gpu_memory_gib);
    NUM("gpu_tflops", p->gpu_tflops);
    NUM("efficiency", p->efficiency);
    NUM("nvlink_gbs", p->nvlink_gbs);
    NUM("ib_gbs", p->ib_gbs);
#undef NUM
    char *s = cJSON_Print(o);
    printf("%s\n", s);
    free(s);
    cJSON_Delete(o);
}

int sl_cmd_plan(int argc, char **argv) {
    sl_plan_request r;
    sl_plan_request_defaults(&r);
    const char *path = NULL;
    bool json = false, have_gpus = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (sl_cli_is_help(a)) {
            usage(stdout);
            return 0;
        }
        if (strcmp(a, "--json") == 0) {
            json = true;
            continue;
        }
        if (strcmp(a, "--zero1") == 0 || strcmp(a, "--no-zero1") == 0) {
            r.zero1 = strcmp(a, "--zero1") == 0;
            continue;
        }
        if (a[0] != '-') {
            if (path) {
                fprintf(stderr, "sluice plan: error: one CONFIG expected, got '%s' too\n", a);
                return 2;
            }
            path = a;
            continue;
        }
        static const char *valued[] = {
            "--gpus",        "--ep",          "--seq-len",      "--micro-batch", "--recompute",
            "--gpu-memory",  "--gpu-tflops",  "--efficiency",   "--nvlink-gbs",  "--ib-gbs",
            "--gpu",         "--layers",      "--global-batch", "--expert-gemm", "--gpus-per-node",
            "--defer-wgrad", "--wgrad-group", "--park"};
        bool known = false;
        for (size_t k = 0; k < sizeof valued / sizeof *valued; k++) known |= !strcmp(a, valued[k]);
        if (!known) return sl_cli_usage_error("plan", "unknown option '%s'", a);
        if (i + 1 >= argc) {
            fprintf(stderr, "sluice plan: error: %s needs a value\n", a);
            return 2;
        }
        const char *v = argv[++i];
        int rc = 0;
        if (!strcmp(a, "--gpus"))
            rc = parse_int(a, v, &r.gpus), have_gpus = true;
        else if (!strcmp(a, "--ep"))
            rc = parse_int(a, v, &r.ep);
        else if (!strcmp(a, "--seq-len"))
            rc = parse_int(a, v, &r.seq_len);
        else if (!strcmp(a, "--micro-batch"))
            rc = parse_int(a, v, &r.micro_batch);
        else if (!strcmp(a, "--gpus-per-node"))
            rc = parse_int(a, v, &r.gpus_per_node);
        else if (!strcmp(a, "--layers"))
            rc = parse_int(a, v, &r.layers);
        else if (!strcmp(a, "--wgrad-group"))
            rc = parse_int(a, v, &r.wgrad_group);
        else if (!strcmp(a, "--global-batch")) {
            uint64_t x;
            if (sl_cli_parse_u64(v, false, &x) || x < 1 || x > ((uint64_t)1 << 50))
                return bad(a, v, "a positive number of tokens");
            r.global_batch = (int64_t)x;
        } else if (!strcmp(a, "--recompute")) /* these four checked by sl_plan_compute */
            r.recompute = v;
        else if (!strcmp(a, "--gpu"))
            r.gpu = v;
        else if (!strcmp(a, "--expert-gemm"))
            r.expert_gemm = v;
        else if (!strcmp(a, "--defer-wgrad"))
            r.defer_wgrad = v;
        else if (!strcmp(a, "--park"))
            r.park = v;
        else if (!strcmp(a, "--gpu-memory"))
            rc = parse_num(a, v, 0, &r.gpu_memory_gib);
        else if (!strcmp(a, "--gpu-tflops"))
            rc = parse_num(a, v, 0, &r.gpu_tflops);
        else if (!strcmp(a, "--efficiency"))
            rc = parse_num(a, v, 1, &r.efficiency);
        else if (!strcmp(a, "--nvlink-gbs"))
            rc = parse_num(a, v, 0, &r.nvlink_gbs);
        else
            rc = parse_num(a, v, 0, &r.ib_gbs);
        if (rc) return rc;
    }
    if (!path || !have_gpus)
        return sl_cli_usage_error("plan", "%s required",
                                  !path && !have_gpus ? "CONFIG and --gpus N are"
                                  : !path             ? "CONFIG is"
                                                      : "--gpus N is");
    sl_config cfg;
    char err[1024];
    if (sl_config_load(path, &cfg, err, sizeof err)) {
        sl_error("%s", err);
        return 1;
    }
    sl_plan p;
    if (sl_plan_compute(&cfg, &r, &p, err, sizeof err)) {
        fprintf(stderr, "sluice plan: error: %s\n", err);
        return strncmp(err, "--", 2) == 0 ? 2 : 1; /* a message naming an option: bad option */
    }
    if (json)
        print_json(&p, path);
    else
        print_text(&p, path);
    return 0;
}
