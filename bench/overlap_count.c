/*
 * bench/overlap_count.c - how much of the expert exchange could hide behind computation, by
 * counting (no timing): bytes of each exchange and FLOPs of the work independent of it, per
 * MoE layer and micro-batch on one GPU, converted to time with `sluice plan`'s hardware
 * figures (trainer/plan.h: H100 defaults, matmul efficiency, NVLink inside a node and
 * InfiniBand across nodes, the same per-peer split and serial sum as the plan's t_a2a).
 *
 *   overlap_count CONFIG --gpus N [--ep E] [--gpus-per-node G]
 *
 * Assumes balanced routing (each rank computes k * T rows per micro-batch of T tokens) and
 * counts matmul FLOPs only (model/counts.h). docs/parallelism.md, "Overlap", has the output
 * for configs/qwen-gated-15a2b.json and what it led to.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ops.h" /* sl_qgate_width */
#include "trainer/config.h"
#include "trainer/plan.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: overlap_count CONFIG --gpus N [--ep E] [--gpus-per-node G]\n"
            "  CONFIG            a training config (model section and training stages)\n"
            "  --gpus N          GPUs, one rank each (required)\n"
            "  --ep E            expert parallelism (default: parallel.expert_parallel)\n"
            "  --gpus-per-node G GPUs per node (default %d)\n",
            SL_PLAN_GPUS_PER_NODE);
}

static int parse_int(const char *flag, const char *v, int *out) {
    char *end = NULL;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || *end || x < 1 || x > 1 << 20) {
        fprintf(stderr, "overlap_count: error: %s needs a positive integer, got '%s'\n", flag,
                v ? v : "");
        return 2;
    }
    *out = (int)x;
    return 0;
}

/* One row of the table: work that can run during `exchanges` exchanges of t_x each, in
 * `slots` windows of t_slot each (its share t_work = flops / slots each). */
static void row(const char *what, const char *during, double flops, double t_flop, int slots,
                double t_slot, double exchanges, double t_x) {
    const double t_work = flops / slots / t_flop;
    const double hidden = slots * (t_work < t_slot ? t_work : t_slot);
    printf("| %s | %s | %.3g | %.1f | %.1f of %.1f (%.0f%%) |\n", what, during, flops,
           flops / t_flop * 1e6, hidden * 1e6, exchanges * t_x * 1e6,
           100.0 * hidden / (exchanges * t_x));
}

int main(int argc, char **argv) {
    const char *path = NULL;
    sl_plan_request r;
    sl_plan_request_defaults(&r);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int rc = 0;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--gpus")) {
            rc = parse_int(a, v, &r.gpus), i++;
        } else if (!strcmp(a, "--ep")) {
            rc = parse_int(a, v, &r.ep), i++;
        } else if (!strcmp(a, "--gpus-per-node")) {
            rc = parse_int(a, v, &r.gpus_per_node), i++;
        } else if (a[0] != '-' && !path) {
            path = a;
        } else {
            fprintf(stderr, "overlap_count: error: unknown argument '%s'\n", a);
            usage(stderr);
            return 2;
        }
        if (rc) return rc;
    }
    if (!path || r.gpus < 1) {
        fprintf(stderr, "overlap_count: error: CONFIG and --gpus N are required\n");
        usage(stderr);
        return 2;
    }
    sl_config cfg;
    char err[1024];
    sl_plan p;
    if (sl_config_load(path, &cfg, err, sizeof err) ||
        sl_plan_compute(&cfg, &r, &p, err, sizeof err)) {
        fprintf(stderr, "overlap_count: error: %s\n", err);
        return 1;
    }
    const sl_model_config *m = &cfg.model;
    if (m->num_experts == 0 || p.ep < 2) {
        fprintf(stderr, "overlap_count: error: no expert exchange (num_experts %d, ep %d)\n",
                m->num_experts, p.ep);
        return 1;
    }
    const double T = (double)p.micro_tokens, h = m->hidden_size;
    const double H = m->num_attention_heads, KV = m->num_key_value_heads, D = m->head_dim;
    const double Is = m->shared_expert_intermediate_size;
    /* One exchange: the rows this rank sends to the other EP ranks (and, balanced, receives),
     * split over NVLink and InfiniBand as the plan splits t_a2a. */
    const double per_step = (double)p.exchanges * p.moe_layers * p.accum;
    const double bytes = p.a2a_bytes / per_step;
    const double nv_share = p.a2a_bytes > 0 ? p.a2a_nvlink_bytes / p.a2a_bytes : 1.0;
    const double t_x = p.t_a2a_one; /* the plan's own figure for one exchange */
    const double t_flop = p.gpu_tflops * 1e12 * p.efficiency;
    /* FLOPs per micro-batch on this rank (matmuls only, model/counts.h). */
    const double experts_dw = p.expert_dw_flops; /* dW of gate_up and down, k T rows */
    const double experts_fwd = experts_dw;       /* the same GEMM shapes */
    const double shared_fwd = Is > 0 ? 2.0 * T * (3.0 * h * Is + h) : 0.0;
    const double wq = (double)sl_qgate_width(m->attn_output_gate, (int)H, (int)D);
    const double attn_fwd =
        2.0 * T * (h * wq + 2.0 * h * KV * D + H * D * h) + 2.0 * T * H * D * (double)p.seq_len;
    printf("%s: %d GPUs (%d per node, %d node%s), EP %d, %s activations, micro-batch %lld "
           "tokens\n",
           path, p.gpus, p.gpus_per_node, p.nodes, p.nodes > 1 ? "s" : "", p.ep,
           p.act_bytes == 2 ? "bf16" : "fp32", (long long)p.micro_tokens);
    printf("hardware (sluice plan defaults): %.0f TFLOP/s at %.0f%%, NVLink %.0f GB/s, IB %.0f "
           "GB/s per direction\n",
           p.gpu_tflops, 100 * p.efficiency, p.nvlink_gbs, p.ib_gbs);
    printf("one exchange per MoE layer and micro-batch: %.4g bytes sent per GPU (%.0f%% over "
           "NVLink), %.1f us; %d per layer and micro-batch (dispatch, combine, their "
           "backward%s): %.1f us\n",
           bytes, 100 * nv_share, t_x * 1e6, p.exchanges,
           p.exchanges > 4 ? ", the recomputed forward's two" : "", p.exchanges * t_x * 1e6);
    printf("expert GEMMs per MoE layer and micro-batch: forward %.3g FLOPs (%.1f us), backward "
           "%.3g (%.1f us)\n\n",
           experts_fwd, experts_fwd / t_flop * 1e6, 2 * experts_fwd,
           2 * experts_fwd / t_flop * 1e6);
    printf("| independent work | during | FLOPs | us | exchange us hidden |\n");
    printf("|---|---|---|---|---|\n");
    row("experts' weight gradients dW (implemented)", "dispatch backward", experts_dw, t_flop, 1,
        t_x, 1, t_x);
    /* Two chunks: chunk 2's dispatch under chunk 1's expert GEMMs, chunk 1's combine under
     * chunk 2's; the first dispatch and the last combine (half an exchange each) stay. */
    row("2 chunks: the other chunk's expert GEMMs", "dispatch + combine", experts_fwd, t_flop, 2,
        t_x / 2, 2, t_x);
    row("2 chunks: the other chunk's expert dgrad", "combine bwd + dispatch bwd", experts_fwd,
        t_flop, 2, t_x / 2, 2, t_x);
    row("shared expert forward", "dispatch", shared_fwd, t_flop, 1, t_x, 1, t_x);
    row("shared expert backward", "combine backward", 2 * shared_fwd, t_flop, 1, t_x, 1, t_x);
    row("next micro-batch's attention forward", "dispatch + combine", attn_fwd, t_flop, 1, 2 * t_x,
        2, t_x);
    row("next micro-batch's attention backward", "both backward exchanges", 2 * attn_fwd, t_flop, 1,
        2 * t_x, 2, t_x);
    printf("\nper step (%d MoE layers x %d micro-batches): exchanges %.1f ms of the plan's "
           "%.1f ms step; the implemented overlap hides %.1f ms (parallel.overlap_moe %s; the "
           "plan's step subtracts it)\n",
           p.moe_layers, p.accum, p.t_a2a * 1e3, p.t_step * 1e3, p.t_a2a_hidden * 1e3,
           p.overlap_moe ? "on" : "off");
    return 0;
}
