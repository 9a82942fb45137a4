/* trainer/plan.c - the per-GPU plan of a run (see plan.h; formulas in docs/plan.md). */
#include "trainer/plan.h"

#include <stdio.h>
#include <string.h>

#include "trainer/plan_time.h"
#include "trainer/train_step.h"

#define GIB ((double)(1ULL << 30))

void sl_plan_request_defaults(sl_plan_request *r) {
    memset(r, 0, sizeof *r); /* 0 / NULL: the GPU's and the config's */
    r->zero1 = -1;
}

static int fail(char *err, size_t errlen, const char *msg) {
    snprintf(err, errlen, "%s", msg);
    return -1;
}

/* The training stage with the most tokens per micro-batch: it sets the activation peak. */
static void pick_stage(const sl_config *cfg, sl_stage *out, int *n_train) {
    const int n = sl_config_stage_count(cfg);
    int64_t best = -1;
    *n_train = 0;
    for (int i = 0; i < n; i++) {
        sl_stage s;
        sl_config_stage_at(cfg, i, &s);
        if (s.tokens == 0 && n > 1) continue; /* evaluation only */
        (*n_train)++;
        const int64_t t = (int64_t)s.train.seq_len * s.train.micro_batch_size;
        if (t > best) best = t, *out = s;
    }
    if (best < 0) sl_config_stage_at(cfg, 0, out);
}

/* Model state bytes per GPU (weights, gradients, moments) for the given sharding. */
static double state_bytes(const sl_plan *p, bool zero1, int ep) {
    const double expert = (double)p->params_expert / ep;
    const double dense = (double)(p->params_total - p->params_expert);
    const double params = expert + dense;
    const double moments = zero1 ? 8.0 * (dense / p->gpus + expert / (p->gpus / ep)) : 8.0 * params;
    return params * ((p->act_bytes == 2 ? 2.0 : 0.0) + 4.0 + 4.0) + moments;
}

/* Whether groups of `group` micro-batches park tokens here: training.park_expert_rows' rule,
 * never with expert parallelism (the trainer's, sl_train_park_tokens). */
static bool parks_tokens(const sl_plan *p, int group) {
    return p->ep == 1 && sl_park_tokens_decide(p->park_expert_rows, group);
}

/* What groups of `group` micro-batches park: all but the last, as tokens or rows. */
static double parked_bytes(const sl_plan *p, const sl_model_config *m, int group, bool by_tokens,
                           int64_t tokens) {
    return (group - 1) * sl_model_deferred_wgrad_bytes(m, tokens, p->act_bytes, by_tokens);
}

/* The expert rows training.defer_expert_wgrad parks (p->defer_wgrad: all but the last
 * micro-batch of a group of p->wgrad_group), in memory mode `mode` (none with recompute
 * "layer", whose layers share their activations). */
static double deferred_bytes(const sl_plan *p, const sl_model_config *m, sl_memory_mode mode,
                             int64_t tokens) {
    const int group = sl_plan_group(p, mode);
    return parked_bytes(p, m, group, parks_tokens(p, group), tokens);
}

static double total_bytes(const sl_plan *p, const sl_model_config *m, bool zero1, int ep,
                          sl_memory_mode mode, int64_t tokens) {
    sl_activation_bytes a;
    sl_model_activation_bytes(m, mode, tokens, p->act_bytes, ep, !p->host, &a);
    return state_bytes(p, zero1, ep) + a.total + deferred_bytes(p, m, mode, tokens);
}

/* Fills p->advice with the single changes that make the plan fit (or a combination). */
static void advise(sl_plan *p, const sl_model_config *m) {
    char *s = p->advice;
    size_t n = sizeof p->advice, used = 0;
#define ADD(...) used += (size_t)snprintf(s + used, used < n ? n - used : 0, __VA_ARGS__)
    const int64_t t = p->micro_tokens;
    int found = 0;
    if (!p->zero1 && total_bytes(p, m, true, p->ep, p->mode, t) <= p->usable)
        ADD("%s--zero1", found++ ? "; " : "");
    for (int ep = p->ep * 2; ep <= p->gpus; ep *= 2) {
        if (p->gpus % ep || m->num_experts % ep) continue;
        if (total_bytes(p, m, p->zero1, ep, p->mode, t) <= p->usable) {
            ADD("%s--ep %d", found++ ? "; " : "", ep);
            break;
        }
    }
    static const sl_memory_mode modes[] = {SL_MEMORY_ATTENTION, SL_MEMORY_LAYER};
    for (int i = 0; i < 2; i++) {
        if (modes[i] <= p->mode) continue;
        if (total_bytes(p, m, p->zero1, p->ep, modes[i], t) <= p->usable) {
            ADD("%s--recompute %s", found++ ? "; " : "", sl_memory_mode_name(modes[i]));
            break;
        }
    }
    /* the same group parked as tokens (no expert parallelism; an automatic group would grow
     * with tokens, so the advice pins it); a smaller group parks fewer micro-batches: the
     * largest that fits, else none */
    const int group = sl_plan_group(p, p->mode);
    if (group > 1 && p->ep == 1 && !p->park_tokens &&
        p->total - p->deferred + parked_bytes(p, m, group, true, t) <= p->usable) {
        ADD("%straining.park_expert_rows=tokens", found++ ? "; " : "");
        if (p->wgrad_auto) ADD(" with training.expert_wgrad_group=%d", group);
    }
    for (int gs = group - 1; gs >= 1; gs--)
        if (p->total - p->deferred + parked_bytes(p, m, gs, parks_tokens(p, gs), t) <= p->usable) {
            if (gs > 1)
                ADD("%straining.expert_wgrad_group=%d", found++ ? "; " : "", gs);
            else
                ADD("%straining.defer_expert_wgrad=off", found++ ? "; " : "");
            break;
        }
    for (int mb = p->micro_batch - 1; mb >= 1; mb--)
        if (total_bytes(p, m, p->zero1, p->ep, p->mode, (int64_t)mb * p->seq_len) <= p->usable) {
            ADD("%s--micro-batch %d (training.micro_batch_size)", found++ ? "; " : "", mb);
            break;
        }
    if (found) return;
    /* No single knob: all of them at once. */
    int ep = p->ep;
    for (int e = p->ep * 2; e <= p->gpus; e *= 2)
        if (p->gpus % e == 0 && m->num_experts % e == 0) ep = e;
    const double all = total_bytes(p, m, true, ep, SL_MEMORY_LAYER, p->seq_len);
    if (all <= p->usable)
        ADD("no single knob; together: --zero1 --ep %d --recompute layer --micro-batch 1", ep);
    else
        ADD("nothing fits on %d GPUs: even --zero1 --ep %d --recompute layer --micro-batch 1 "
            "needs %.1f GiB; use more GPUs (larger --ep) or GPUs with more memory",
            p->gpus, ep, all / GIB);
#undef ADD
}

/* Bytes a ring all-reduce (2 (n-1)/n x payload), reduce-scatter or all-gather ((n-1)/n)
 * sends per rank. */
static double ring(double payload, int n, double passes) {
    return n > 1 ? passes * (n - 1) / n * payload : 0.0;
}

/* v if positive, else the GPU's figure d. */
static double or_gpu(double v, double d) {
    return v > 0 ? v : d;
}

int sl_plan_compute(const sl_config *cfg, const sl_plan_request *r, sl_plan *p, char *err,
                    size_t errlen) {
    memset(p, 0, sizeof *p);
    p->gpu = r->gpu ? sl_plan_gpu_find(r->gpu) : sl_plan_gpu_default();
    if (!p->gpu) {
        snprintf(err, errlen, "--gpu: unknown GPU '%s' (known: %s)", r->gpu, sl_plan_gpu_names());
        return -1;
    }
    const sl_plan_gpu *gpu = p->gpu;
    /* --layers: the first N decoder layers, as gpu_train_bench --layers cuts a model */
    sl_model_config cut = cfg->model;
    if (r->layers > 0) {
        if (r->layers > cut.num_hidden_layers) {
            snprintf(err, errlen, "--layers: %d exceeds model.num_hidden_layers = %d", r->layers,
                     cut.num_hidden_layers);
            return -1;
        }
        cut.num_hidden_layers = r->layers;
    }
    const sl_model_config *m = &cut;
    p->layers = m->num_hidden_layers;
    if (r->gpus < 1) return fail(err, errlen, "--gpus: must be a positive number of GPUs");
    const int gpn = r->gpus_per_node > 0 ? r->gpus_per_node : gpu->gpus_per_node;
    sl_stage st;
    pick_stage(cfg, &st, &p->n_stages);
    snprintf(p->stage, sizeof p->stage, "%s", st.name);
    p->gpus = r->gpus;
    p->gpus_per_node = gpn;
    p->nodes = (r->gpus + gpn - 1) / gpn;
    p->ep = r->ep > 0 ? r->ep : cfg->parallel.expert_parallel;
    /* where the expert parallelism comes from, for messages: --ep, or the config's key named
     * with its file (a user who gave no --ep must not read of one) */
    char ep_src[SL_PATH_MAX + 64];
    if (r->ep > 0)
        snprintf(ep_src, sizeof ep_src, "--ep: %d", p->ep);
    else
        snprintf(ep_src, sizeof ep_src, "parallel.expert_parallel = %d (%s)", p->ep,
                 cfg->path[0] ? cfg->path : "the config");
    /* without --ep, the flag to pass: the largest EP up to the config's that divides both */
    char ep_fix[160] = "";
    if (r->ep == 0 && m->num_experts > 0) {
        int fit = p->ep > 1 ? p->ep : 1;
        while (fit > 1 && (r->gpus % fit || m->num_experts % fit)) fit--;
        snprintf(ep_fix, sizeof ep_fix,
                 "; pass --ep E that divides both the GPUs and the %d experts, e.g. --ep %d",
                 m->num_experts, fit);
    }
    if (m->num_experts == 0 && p->ep > 1) {
        if (r->ep > 0)
            return fail(err, errlen, "--ep: a dense model (model.num_experts = 0) has no experts");
        snprintf(err, errlen,
                 "%s: a dense model (model.num_experts = 0) has no experts; pass --ep 1", ep_src);
        return -1;
    }
    if (p->ep < 1) p->ep = 1;
    if (r->gpus % p->ep) {
        snprintf(err, errlen, "%s does not divide --gpus %d%s", ep_src, r->gpus, ep_fix);
        return -1;
    }
    if (m->num_experts > 0 && m->num_experts % p->ep) {
        snprintf(err, errlen, "%s does not divide model.num_experts = %d%s", ep_src, m->num_experts,
                 ep_fix);
        return -1;
    }
    p->edp = r->gpus / p->ep;
    p->zero1 = r->zero1 < 0 ? cfg->parallel.zero1 : r->zero1 != 0;
    const char *rc = r->recompute ? r->recompute : st.train.recompute;
    if (sl_memory_mode_parse(rc, &p->mode) != 0) {
        snprintf(err, errlen, "--recompute: unknown mode '%s' (expected none, attention or layer)",
                 rc);
        return -1;
    }
    p->host = r->host;
    p->act_bytes = strcmp(st.train.precision, "fp32") == 0 ||
                           (r->host && strcmp(st.train.precision, "auto") == 0)
                       ? 4
                       : 2;
    p->seq_len = r->seq_len > 0 ? r->seq_len : st.train.seq_len;
    p->micro_batch = r->micro_batch > 0 ? r->micro_batch : st.train.micro_batch_size;
    p->micro_tokens = (int64_t)p->seq_len * p->micro_batch;
    p->global_batch_tokens = r->global_batch > 0 ? r->global_batch : st.train.global_batch_tokens;
    const int64_t per_round = p->micro_tokens * r->gpus;
    if (p->global_batch_tokens % per_round) {
        snprintf(err, errlen,
                 "%s = %lld is not a multiple of --gpus %d x "
                 "micro-batch %d x sequence %d = %lld tokens",
                 r->global_batch > 0 ? "--global-batch" : "training.global_batch_tokens",
                 (long long)p->global_batch_tokens, r->gpus, p->micro_batch, p->seq_len,
                 (long long)per_round);
        return -1;
    }
    p->accum = (int)(p->global_batch_tokens / per_round);
    p->gpu_memory_gib = or_gpu(r->gpu_memory_gib, gpu->memory_gib);
    p->gpu_tflops = or_gpu(r->gpu_tflops, gpu->peak_tflops);
    p->nvlink_gbs = or_gpu(r->nvlink_gbs, gpu->nvlink_gbs);
    p->ib_gbs = or_gpu(r->ib_gbs, gpu->ib_gbs);
    p->flat = r->efficiency > 0;
    p->efficiency = or_gpu(r->efficiency, SL_PLAN_EFFICIENCY);

    /* Parameters and state. */
    sl_model_param_count(m, &p->params_total, &p->params_active);
    p->params_expert = sl_model_expert_param_count(m);
    p->gpu_params_expert = p->params_expert / p->ep;
    p->gpu_params_dense = p->params_total - p->params_expert;
    p->gpu_params = p->gpu_params_expert + p->gpu_params_dense;
    const double n = (double)p->gpu_params;
    p->weights_compute = p->act_bytes == 2 ? 2.0 * n : 0.0;
    p->master = 4.0 * n;
    p->grads = 4.0 * n;
    p->adam_full = 8.0 * n;
    p->adam_zero1 =
        8.0 * ((double)p->gpu_params_dense / p->gpus + (double)p->gpu_params_expert / p->edp);
    p->state = state_bytes(p, p->zero1, p->ep); /* the breakdown above, as advise() counts it */
    static const sl_memory_mode modes[3] = {SL_MEMORY_NONE, SL_MEMORY_ATTENTION, SL_MEMORY_LAYER};
    for (int i = 0; i < 3; i++)
        sl_model_activation_bytes(m, modes[i], p->micro_tokens, p->act_bytes, p->ep, !p->host,
                                  &p->act[i]);
    /* the trainer's rule; the memory mode is deferred_bytes' (advise() tries others) */
    const sl_defer_facts df = {.can_park = m->num_experts > 0,
                               .one_pass = !r->host && p->act_bytes == 2 &&
                                           p->gpu->compute_capability / 10 == 9,
                               .ep_overlap = p->ep > 1 && cfg->parallel.overlap_moe};
    const char *dwg = r->defer_wgrad ? r->defer_wgrad : st.train.defer_expert_wgrad;
    if (strcmp(dwg, "auto") && strcmp(dwg, "on") && strcmp(dwg, "off")) {
        snprintf(err, errlen, "--defer-wgrad: unknown '%s' (expected auto, on or off)", dwg);
        return -1;
    }
    p->defer_wgrad = p->accum > 1 && sl_defer_wgrad_decide(dwg, &df);
    const char *park = r->park ? r->park : st.train.park_expert_rows;
    if (strcmp(park, "auto") && strcmp(park, "rows") && strcmp(park, "tokens")) {
        snprintf(err, errlen, "--park: unknown '%s' (expected auto, rows or tokens)", park);
        return -1;
    }
    const int group_setting = r->wgrad_group > 0 ? r->wgrad_group : st.train.expert_wgrad_group;
    p->wgrad_auto = group_setting == 0;
    const int group = sl_wgrad_group_decide(group_setting, park, p->ep > 1);
    if (group < 2 || group > SL_DW_MAX_SEGMENTS) {
        snprintf(err, errlen, "--wgrad-group: %d (expected 2 to %d micro-batches)", group,
                 SL_DW_MAX_SEGMENTS);
        return -1;
    }
    p->wgrad_group = !p->defer_wgrad ? 1 : group < p->accum ? group : p->accum;
    snprintf(p->park_expert_rows, sizeof p->park_expert_rows, "%s", park);
    p->park_tokens = parks_tokens(p, sl_plan_group(p, p->mode));
    p->deferred = deferred_bytes(p, m, p->mode, p->micro_tokens);
    p->total = p->state + p->act[p->mode].total + p->deferred;
    p->usable = 0.92 * p->gpu_memory_gib * GIB - 2.0 * GIB;
    p->fits = p->total <= p->usable;
    if (!p->fits && !p->host) advise(p, m); /* a GPU's advice: none for host memory */

    /* Communication. EP groups are consecutive ranks, EDP groups stride EP, nodes hold
     * gpus_per_node consecutive ranks (docs/parallelism.md): count rank 0's peers. */
    const int a2a_local = (p->ep < gpn ? p->ep : gpn) - 1; /* EP peers on rank 0's node */
    for (int l = 0; l < m->num_hidden_layers; l++) p->moe_layers += sl_layer_is_moe(m, l);
    /* dispatch and combine, forward and backward; `layer` reruns the forward's two */
    p->exchanges = 4 + (p->mode == SL_MEMORY_LAYER ? 2 : 0);
    const int moe_layers = p->moe_layers, exchanges = p->exchanges;
    const double rows_out =
        p->ep > 1 ? (double)p->micro_tokens * m->num_experts_per_tok * (p->ep - 1) / p->ep : 0;
    p->a2a_bytes = rows_out * m->hidden_size * p->act_bytes * exchanges * moe_layers * p->accum;
    p->a2a_nvlink_bytes = p->ep > 1 ? p->a2a_bytes * a2a_local / (p->ep - 1) : 0;
    p->a2a_ib_bytes = p->a2a_bytes - p->a2a_nvlink_bytes;
    p->grad_dense_payload = 4.0 * (double)p->gpu_params_dense;
    p->grad_expert_payload = 4.0 * (double)p->gpu_params_expert;
    p->dense_ib = r->gpus > gpn;
    p->expert_ib = (p->edp - 1) * p->ep >= gpn;
    const double bw_nv = p->nvlink_gbs * 1e9, bw_ib = p->ib_gbs * 1e9;
    /* ZeRO-1 reduce-scatters the gradients (each rank needs its shard summed): one pass */
    const double passes = p->zero1 ? 1 : 2;
    const double ar_d = ring(p->grad_dense_payload, r->gpus, passes);
    const double ar_e = ring(p->grad_expert_payload, p->edp, passes);
    p->grad_bytes = ar_d + ar_e;
    p->t_grad = ar_d / (p->dense_ib ? bw_ib : bw_nv) + ar_e / (p->expert_ib ? bw_ib : bw_nv);
    if (p->zero1) {
        const double ag_d = ring(p->grad_dense_payload, r->gpus, 1);
        const double ag_e = ring(p->grad_expert_payload, p->edp, 1);
        p->ag_bytes = ag_d + ag_e;
        p->t_ag = ag_d / (p->dense_ib ? bw_ib : bw_nv) + ag_e / (p->expert_ib ? bw_ib : bw_nv);
    }
    p->t_a2a = p->a2a_nvlink_bytes / bw_nv + p->a2a_ib_bytes / bw_ib;

    /* FLOPs and time. */
    p->flops_token = sl_model_flops_per_token(m, p->seq_len);
    p->flops_step_total = p->flops_token * (double)p->global_batch_tokens;
    p->flops_step_gpu = p->flops_step_total / r->gpus;
    p->hw_flops_step_gpu =
        p->flops_step_gpu + sl_model_recompute_flops_per_token(m, p->mode, p->seq_len) *
                                (double)p->global_batch_tokens / r->gpus;
    /* Compute: the flat model (--efficiency: every FLOP at one share of the peak) or the
     * per-component rates of the GPU (trainer/plan_time.c, trainer/plan_rates.c). */
    const double flop_rate = p->gpu_tflops * 1e12 * p->efficiency;
    if (moe_layers > 0)
        p->rows_per_expert =
            (double)p->micro_tokens * m->num_experts_per_tok / ((double)m->num_experts / p->ep);
    /* As the runtime (moe/grouped_matmul.cu): `auto` and `wgmma` run the Hopper kernel for
     * every pass where it applies (bf16 on compute capability 9.x); elsewhere both run auto's
     * cuBLAS paths: the grouped call for the forward and data gradient, the weight gradient on
     * the lanes below SL_EXPERTS_PER_EXPERT_ROWS rows per expert and per expert from there. */
    const char *eg = r->expert_gemm ? r->expert_gemm : "auto";
    const bool wgmma_runs = p->gpu->compute_capability / 10 == 9 && p->act_bytes == 2;
    sl_expert_strategy fwd = SL_EXPERTS_GROUPED, dw = SL_EXPERTS_PER_EXPERT;
    if (!strcmp(eg, "auto") || !strcmp(eg, "wgmma")) {
        if (wgmma_runs)
            fwd = dw = SL_EXPERTS_WGMMA;
        else if (p->rows_per_expert < SL_EXPERTS_PER_EXPERT_ROWS)
            dw = SL_EXPERTS_LANES;
    } else if (!strcmp(eg, "per-expert")) {
        fwd = SL_EXPERTS_PER_EXPERT;
    } else if (!strcmp(eg, "lanes")) {
        fwd = dw = SL_EXPERTS_LANES;
    } else if (strcmp(eg, "grouped")) {
        snprintf(err, errlen,
                 "--expert-gemm: unknown '%s' (expected auto, grouped, per-expert, lanes or "
                 "wgmma)",
                 eg);
        return -1;
    }
    p->expert_gemm = !strcmp(eg, "auto")         ? "auto"
                     : !strcmp(eg, "grouped")    ? "grouped"
                     : !strcmp(eg, "per-expert") ? "per-expert"
                     : !strcmp(eg, "lanes")      ? "lanes"
                                                 : "wgmma";
    p->expert_path[SL_PASS_FWD] = p->expert_path[SL_PASS_DGRAD] = fwd;
    p->expert_path[SL_PASS_WGRAD] = dw;
    double t_dw[SL_DW_MAX_SEGMENTS + 1];
    sl_plan_time_parts(m, p, t_dw);
    if (p->flat) {
        p->n_parts = 0;
        p->t_compute = p->hw_flops_step_gpu / flop_rate;
    }
    /* parallel.overlap_moe (moe/ffn_block.c): each MoE layer's dispatch backward runs while
     * the experts compute their weight gradients, 2 x 3 h Im FLOPs per routed row, k T rows
     * per micro-batch on each rank when routing is balanced. It hides min(one exchange, that
     * work) per MoE layer and micro-batch; with training.defer_expert_wgrad the micro-batches
     * of a group that park compute none and hide nothing, its last min(one exchange, the
     * group's work). */
    p->overlap_moe = cfg->parallel.overlap_moe;
    if (moe_layers > 0 && p->t_a2a > 0) {
        p->t_a2a_one = p->t_a2a / ((double)exchanges * moe_layers * p->accum);
        const double per_row = 3.0 * m->hidden_size * m->moe_intermediate_size; /* 3 h Im */
        p->expert_dw_flops = 2.0 * per_row * (double)p->micro_tokens * m->num_experts_per_tok;
        if (p->flat)
            for (int i = 0; i <= SL_DW_MAX_SEGMENTS; i++)
                t_dw[i] = i * p->expert_dw_flops / flop_rate;
        const int gs = sl_plan_group(p, p->mode);
        int full, rest;
        sl_plan_groups(p->accum, gs, &full, &rest);
        const double whole = t_dw[gs] < p->t_a2a_one ? t_dw[gs] : p->t_a2a_one;
        const double part = t_dw[rest] < p->t_a2a_one ? t_dw[rest] : p->t_a2a_one;
        if (p->overlap_moe) p->t_a2a_hidden = moe_layers * (full * whole + part);
    }
    /* The gradient reduction overlaps the last micro-batch's backward (2/3 of its compute). */
    const double hide = p->t_compute / p->accum * 2.0 / 3.0;
    p->t_grad_exposed = p->t_grad > hide ? p->t_grad - hide : 0.0;
    p->t_step = p->t_compute + p->t_a2a - p->t_a2a_hidden + p->t_grad_exposed + p->t_ag;
    p->tokens_per_s = (double)p->global_batch_tokens / p->t_step;
    p->mfu = p->flops_step_gpu / (p->t_step * p->gpu_tflops * 1e12);
    return 0;
}
