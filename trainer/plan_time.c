/*
 * trainer/plan_time.c - the compute part of `sluice plan`'s step time on one GPU, component by
 * component, from the rates of trainer/plan_rates.c (docs/plan.md, "Step time"). Each
 * component stands for rows of gpu_train_bench --profile so that estimate and measurement can
 * be compared row by row (tests/test_plan_measured.c, bench/results/).
 */
#include "trainer/plan_time.h"

#include <math.h>

#include "core/ops.h" /* sl_qgate_width */

static void add(sl_plan *p, const char *name, const char *regions, double flops, double s) {
    if (p->n_parts >= SL_PLAN_MAX_PARTS) return;
    p->parts[p->n_parts++] = (sl_plan_part){name, regions, flops, s};
}

/* Seconds of `flops` at `tflops` (a missing rate, 0, counts as no time rather than infinity:
 * the tables cover every kind, so that only happens with an incomplete table). */
static double at(double flops, double tflops) {
    return tflops > 0 ? flops / (tflops * 1e12) : 0;
}

int sl_plan_group(const sl_plan *p, sl_memory_mode mode) {
    return mode != SL_MEMORY_LAYER ? p->wgrad_group : 1;
}

void sl_plan_groups(int accum, int group, int *full, int *rest) {
    *full = accum / group, *rest = accum % group;
}

/* Seconds of one pass of a MoE layer's expert GEMMs over `times` micro-batches' routed rows at
 * once (k T rows each on this GPU with balanced routing, times x p->rows_per_expert per local
 * expert), at strategy `path`'s measured rates, scaled by cs: gate_up 2 rows h 2Im FLOPs, down
 * 2 rows Im h. */
static double expert_pass_s(const sl_model_config *m, const sl_plan *p, double cs,
                            sl_expert_strategy path, sl_gemm_pass pass, double times) {
    const double rows = times * (double)p->micro_tokens * m->num_experts_per_tok;
    const double h = m->hidden_size, Im = m->moe_intermediate_size, r = times * p->rows_per_expert;
    const sl_plan_gpu *g = p->gpu;
    return at(2 * rows * h * 2 * Im,
              cs * sl_rate_expert_tflops(g, path, SL_EXPERT_GATE_UP, pass, r)) +
           at(2 * rows * Im * h, cs * sl_rate_expert_tflops(g, path, SL_EXPERT_DOWN, pass, r));
}

void sl_plan_time_parts(const sl_model_config *m, sl_plan *p,
                        double t_wgrad[SL_DW_MAX_SEGMENTS + 1]) {
    const sl_plan_gpu *g = p->gpu;
    /* --gpu-tflops other than the GPU's peak scales every compute rate */
    const double cs = p->gpu_tflops / g->peak_tflops;
    const double dense = sl_rate_dense_tflops(g) * cs;
    const double stream = sl_rate_stream_gbs(g) * 1e9, adamw = sl_rate_adamw_gbs(g) * 1e9;
    const double T = (double)p->micro_tokens, mb = p->accum;
    const double h = m->hidden_size, H = m->num_attention_heads, KV = m->num_key_value_heads;
    const double D = m->head_dim, V = m->vocab_size, k = m->num_experts_per_tok;
    const double L = m->num_hidden_layers;
    p->n_parts = 0;
    for (int n = 0; n <= SL_DW_MAX_SEGMENTS; n++) t_wgrad[n] = 0;

    /* Routed experts: k T rows per micro-batch on this GPU (balanced routing), over E / EP
     * local experts (p->rows_per_expert each); the FLOPs of one pass: 2 k T h 3 Im. */
    double expert_s[3] = {0, 0, 0}, expert_f = 0;
    if (p->moe_layers > 0) {
        expert_f = 2 * T * k * h * 3 * m->moe_intermediate_size;
        for (int pass = 0; pass < 3; pass++)
            expert_s[pass] = expert_pass_s(m, p, cs, p->expert_path[pass], (sl_gemm_pass)pass, 1);
    }
    for (int n = 1; n <= SL_DW_MAX_SEGMENTS; n++) t_wgrad[n] = n * expert_s[SL_PASS_WGRAD];
    const double n_moe = (double)p->moe_layers * mb;
    /* training.defer_expert_wgrad with the Hopper kernel: each group of n micro-batches' weight
     * gradients is one pass over n times the rows per expert (one pass over the fp32 gradients
     * for all of them), timed at the rate measured at n R rows (plan_rates.c interpolates the
     * table's row counts); a last micro-batch alone at R. Where a group runs as n passes
     * (other kernels) its time is that of n micro-batches. */
    double wgrad_s = expert_s[SL_PASS_WGRAD] * n_moe;
    const int group = sl_plan_group(p, p->mode);
    p->wgrad_grouped =
        group > 1 && p->expert_path[SL_PASS_WGRAD] == SL_EXPERTS_WGMMA && p->moe_layers > 0;
    if (p->wgrad_grouped) {
        for (int n = 2; n <= SL_DW_MAX_SEGMENTS; n++)
            t_wgrad[n] = expert_pass_s(m, p, cs, SL_EXPERTS_WGMMA, SL_PASS_WGRAD, n);
        int full, rest;
        sl_plan_groups(p->accum, group, &full, &rest);
        wgrad_s = p->moe_layers * (full * t_wgrad[group] + t_wgrad[rest]);
    }
    add(p, "expert GEMMs fwd", "expert GEMMs fwd", expert_f * n_moe, expert_s[0] * n_moe);
    add(p, "expert GEMMs data grad", "expert GEMMs data grad", expert_f * n_moe,
        expert_s[1] * n_moe);
    add(p, "expert GEMMs weight grad", "expert GEMMs weight grad", expert_f * n_moe, wgrad_s);
    /* training.park_expert_rows "tokens" (moe/parked_tokens.h): per parked micro-batch and MoE
     * layer, the copies of xn and dy (read and write T h each) and the two regathers (each
     * reads T h and writes k T h), at the streaming rate */
    if (p->park_tokens && group > 1 && p->moe_layers > 0) {
        int full, rest;
        sl_plan_groups(p->accum, group, &full, &rest);
        const double parked = full * (group - 1) + (rest > 1 ? rest - 1 : 0);
        const double bytes = (4 + 2 + 2 * k) * T * h * p->act_bytes;
        add(p, "expert rows parked as tokens", "expert rows parked as tokens (copy, regather)", 0,
            parked * p->moe_layers * bytes / stream);
    }

    /* Attention kernel, attn_bench's count: forward 4 B H D S^2/2 = 2 T H D S, backward 2.5x. */
    const double attn_f = 2 * T * H * D * p->seq_len;
    const double attn_fwd =
        at(attn_f, cs * sl_rate_attention_tflops(g, false, p->micro_batch, p->seq_len, (int)D));
    const double attn_bwd = at(
        2.5 * attn_f, cs * sl_rate_attention_tflops(g, true, p->micro_batch, p->seq_len, (int)D));
    add(p, "attention kernel fwd", "attention kernel fwd", attn_f * L * mb, attn_fwd * L * mb);
    add(p, "attention kernel bwd", "attention kernel bwd", 2.5 * attn_f * L * mb,
        attn_bwd * L * mb);

    /* Dense GEMMs at cuBLAS's measured rate: q (with the gate), k, v, o in every layer; the
     * shared expert and its gate in MoE layers, the FFN in dense layers; backward 2x. */
    const double qkv =
        h * (double)sl_qgate_width(m->attn_output_gate, (int64_t)H, (int64_t)D) + 2 * h * KV * D;
    double proj = L * 2 * T * (qkv + H * D * h);
    const double Is = m->shared_expert_intermediate_size;
    proj += p->moe_layers * (Is > 0 ? 2 * T * (3 * h * Is + h) : 0.0);
    proj += (L - p->moe_layers) * 2 * T * 3 * h * m->intermediate_size;
    add(p, "projections fwd", "qkv+gate projections fwd; output projection fwd", proj * mb,
        at(proj * mb, dense));
    add(p, "projections bwd", "qkv+gate projections bwd; output projection bwd", 2 * proj * mb,
        at(2 * proj * mb, dense));

    /* LM head + cross-entropy (model/model.c, in chunks of sl_logits_chunk_rows): 6 T h V FLOPs at
     * the dense rate; the cross-entropy reads the logits and writes their gradient in place (2 x T
     * V activation bytes); each chunk reads and writes the fp32 head gradient (8 V h). */
    const double chunks =
        ceil(T / (double)sl_logits_chunk_rows(p->micro_tokens, m->vocab_size, p->act_bytes, true));
    const double head_f = 6 * T * h * V;
    const double head_s =
        at(head_f, dense) + (2.0 * p->act_bytes * T * V + chunks * 8 * V * h) / stream;
    add(p, "LM head + cross-entropy", "LM head + cross-entropy", head_f * mb, head_s * mb);

    /* Optimizer over the parameters this GPU updates (with ZeRO-1 its shard), 30 bytes each
     * (the bf16 compute copy written in the same pass); with ZeRO-1 over several GPUs the
     * gathered rest of the copy converted from the master weights (read 4, write 2 bytes);
     * the gradient norm reads every fp32 gradient once, but the experts' where their squares
     * come from the Hopper kernel's weight-gradient epilogue (each expert's gradient on one
     * GPU: EDP 1; trainer/optimizer.h, sl_optimizer_expert_sumsq). */
    const double updated = p->zero1 ? p->adam_zero1 / 8 : (double)p->gpu_params;
    const double gathered = p->act_bytes == 2 ? (double)p->gpu_params - updated : 0;
    add(p, "optimizer: AdamW", "optimizer: AdamW (+ router bias)", 0,
        updated * 30 / adamw + gathered * 6 / stream);
    const bool fused_sq = p->edp == 1 && p->expert_path[SL_PASS_WGRAD] == SL_EXPERTS_WGMMA;
    const double normed = fused_sq ? (double)p->gpu_params_dense : (double)p->gpu_params;
    add(p, "gradient norm", "gradient reduction + norm", 0, normed * 4 / stream);

    /* Everything else, per token and layer (norms, RoPE, router, SwiGLU, permutes, residual
     * adds, embedding, idle). */
    const double other = sl_rate_other_ns(g) * 1e-9 * T * L * mb;
    add(p, "other (norms, RoPE, router, SwiGLU, permutes, adds, idle)", "every other row", 0,
        other);

    /* Recomputation reruns forwards: `attention` the q/k/v projections, `layer` each layer's
     * forward (the other work counted as a third forward) - of every layer but the last. */
    double re = 0;
    if (p->mode == SL_MEMORY_ATTENTION) re = at(2 * T * qkv * (L - 1) * mb, dense);
    if (p->mode == SL_MEMORY_LAYER && L > 0)
        re = (L - 1) / L *
             (expert_s[0] * n_moe + attn_fwd * L * mb + at(proj * mb, dense) + other / 3);
    if (re > 0)
        add(p, "recomputation (forwards rerun)", "(not profiled: recompute none)",
            p->hw_flops_step_gpu - p->flops_step_gpu, re);

    p->t_compute = 0;
    for (int i = 0; i < p->n_parts; i++) p->t_compute += p->parts[i].seconds;
}
