/*
 * tests/test_plan.c - trainer/plan.c (`sluice plan`) against hand counts for
 * configs/qwen-gated-15a2b.json on 8 GPUs with EP 8, the advice when a plan does not fit, the
 * rate table's lookups and how each --expert-gemm strategy times the passes.
 *
 * The expected figures are derived here from the config's widths, written out as arithmetic
 * (V = 151936, h = 2048, L = 24, H = 32 query heads, KV = 4, D = 128, E = 128 experts, top-8,
 * expert FFN 768, elementwise gate, untied head, no shared expert, seq 4096, micro-batch 1,
 * global batch 4194304 tokens, ZeRO-1 on in the config, bf16 on the GPU).
 */
#include <math.h>
#include <string.h>

#include "test_util.h"
#include "trainer/plan.h"

#define GIB ((double)(1ULL << 30))

static bool near(double a, double b, double rel) {
    return fabs(a - b) <= rel * fabs(b);
}

static void check_15a2b(const sl_config *cfg) {
    sl_plan_request r;
    sl_plan_request_defaults(&r);
    r.gpus = 8;
    r.ep = 8;
    r.efficiency = 0.75; /* the flat model, whose step time is written out below; the
                          * per-component rates are checked against a GPU's measured steps in
                          * tests/test_plan_measured.c */
    sl_plan p;
    char err[512];
    CHECK(sl_plan_compute(cfg, &r, &p, err, sizeof err) == 0, "plan failed: %s", err);

    /* Parameters of one layer. */
    const int64_t q = 2048LL * (2 * 32 * 128); /* q_proj with the elementwise gate: 2*H*D */
    const int64_t kv = 2 * 2048LL * (4 * 128); /* k_proj, v_proj */
    const int64_t o = (32 * 128LL) * 2048;     /* o_proj */
    const int64_t norms = 2 * 2048 + 2 * 128;  /* input/post norms, q_norm, k_norm */
    const int64_t router = 2048LL * 128;       /* [E, h] */
    const int64_t expert = 3 * 2048LL * 768;   /* gate, up, down of one expert */
    const int64_t layer = q + kv + o + norms + router + 128 * expert;
    const int64_t embed = 151936LL * 2048;               /* embed_tokens; lm_head the same */
    const int64_t total = 24 * layer + 2 * embed + 2048; /* + final norm */
    const int64_t experts_all = 24 * 128 * expert;
    CHECK(p.params_total == total, "total params %lld, hand %lld", (long long)p.params_total,
          (long long)total);
    CHECK(total == 15778553856LL, "hand count drifted from the README's 15.8B: %lld",
          (long long)total);
    CHECK(p.params_expert == experts_all, "expert params %lld, hand %lld",
          (long long)p.params_expert, (long long)experts_all);
    const int64_t gpu_expert = experts_all / 8, gpu_dense = total - experts_all;
    CHECK(p.gpu_params_expert == gpu_expert, "expert params per GPU %lld, hand %lld",
          (long long)p.gpu_params_expert, (long long)gpu_expert);
    CHECK(p.gpu_params_dense == gpu_dense, "non-expert params per GPU %lld, hand %lld",
          (long long)p.gpu_params_dense, (long long)gpu_dense);
    const double n = (double)(gpu_expert + gpu_dense);

    /* State bytes. */
    CHECK(p.weights_compute == 2 * n, "bf16 weights %.0f, hand %.0f", p.weights_compute, 2 * n);
    CHECK(p.master == 4 * n && p.grads == 4 * n, "master %.0f / grads %.0f, hand %.0f", p.master,
          p.grads, 4 * n);
    CHECK(p.adam_full == 8 * n, "AdamW %.0f, hand %.0f", p.adam_full, 8 * n);
    /* ZeRO-1: non-expert moments over all 8 ranks, expert moments over the EDP group (1). */
    const double adam_z = 8.0 * ((double)gpu_dense / 8 + (double)gpu_expert / 1);
    CHECK(near(p.adam_zero1, adam_z, 1e-12), "AdamW ZeRO-1 %.0f, hand %.0f", p.adam_zero1, adam_z);

    /* Activations of one layer, recompute none, bf16 (2 bytes), per token. */
    const double residual = 2 * 2048 * 2;                                        /* x[l], h[l] */
    const double attn_set = (2048 + 8192 + 4096 + 3 * 512 + (8192 - 4096)) * 2.0 /* xn, qall,
                               qn, k, kn, v, g */
                            + (1 + 32 + 4) * 4.0;        /* fp32 rstd, q_rstd, k_rstd */
    const double kernel_out = 2 * 4096 * 2.0 + 32 * 4.0; /* y, o; fp32 lse */
    const double moe = 2048 * 2.0 + 4.0                  /* ffn xn (no y: the combine writes
                                                            the layer's output); rstd */
                       + (3 * 128 + 2 * 8) * 4.0         /* logits, probs, dlogits, topk_w(2) */
                       + 3 * 8 * 4.0                     /* topk_idx, sorted_token, slot_pos */
                       + 2 * 2048 * 4.0                  /* the router's fp32 x and dx */
                       + 8 * 8 * 2048 * 2.0 /* xs, ys, dxs, dys + 4 received (EP > 1) */
                       + 8 * 6 * 768 * 2.0; /* experts gu, h, dgu, dh per routed row */
    const double per_layer = (residual + attn_set + kernel_out + moe) * 4096;
    CHECK(near(p.act[0].per_layer_max, per_layer, 1e-12), "activations per layer %.0f, hand %.0f",
          p.act[0].per_layer_max, per_layer);
    CHECK(near(p.act[0].layers, 24 * per_layer, 1e-12), "activations of 24 layers %.0f, hand %.0f",
          p.act[0].layers, 24 * per_layer);
    /* layer recompute keeps only x[l] per layer; one x[L] (the output), one h and one set of
     * everything else shared by all layers. */
    CHECK(near(p.act[2].layers, 24 * 2048 * 2.0 * 4096, 1e-12), "layer mode keeps %.0f",
          p.act[2].layers);
    const double layer_shared = (2048 * 2.0 + 2048 * 2.0 + attn_set + kernel_out + moe) * 4096;
    CHECK(near(p.act[2].shared, layer_shared, 1e-12), "layer mode shares %.0f, hand %.0f",
          p.act[2].shared, layer_shared);
    CHECK(p.act[1].total < p.act[0].total && p.act[2].total < p.act[1].total,
          "recomputation must save memory: %.0f %.0f %.0f", p.act[0].total, p.act[1].total,
          p.act[2].total);
    CHECK(p.mode == SL_MEMORY_NONE && !p.fits, "15A2B without recompute on 80 GiB should not fit");
    CHECK(strstr(p.advice, "--recompute layer") != NULL, "advice '%s' lacks --recompute layer",
          p.advice);

    /* FLOPs per token: 6 x active matmul parameters + 6 L H D S. */
    const double mm_layer = (double)(q + kv + o + router + 8 * expert);
    const double flops_tok = 6.0 * (24 * mm_layer + (double)embed) + 6.0 * 24 * 32 * 128 * 4096;
    CHECK(near(p.flops_token, flops_tok, 1e-12), "FLOPs per token %.6g, hand %.6g", p.flops_token,
          flops_tok);
    CHECK(p.accum == 4194304 / (8 * 4096), "micro-batches per step %d", p.accum);
    const double flops_gpu = flops_tok * 4194304 / 8;
    CHECK(near(p.flops_step_gpu, flops_gpu, 1e-12), "FLOPs per step per GPU %.6g, hand %.6g",
          p.flops_step_gpu, flops_gpu);

    /* Communication per GPU per step: 7/8 of each token's 8 rows leave, 4 exchanges per MoE
     * layer and micro-batch, 24 layers, 128 micro-batches; all inside one node. */
    const double a2a = 4096 * 8 * 7.0 / 8 * 2048 * 2 * 4 * 24 * 128;
    CHECK(near(p.a2a_bytes, a2a, 1e-12) && near(p.a2a_nvlink_bytes, a2a, 1e-12),
          "all-to-all %.0f (NVLink %.0f), hand %.0f", p.a2a_bytes, p.a2a_nvlink_bytes, a2a);
    /* ZeRO-1 (on in the config) reduce-scatters: one ring pass; the expert group is 1 rank */
    const double ar = 7.0 / 8 * 4 * (double)gpu_dense;
    CHECK(near(p.grad_bytes, ar, 1e-12), "reduce-scatter %.0f, hand %.0f", p.grad_bytes, ar);
    const double ag = 7.0 / 8 * 4 * (double)gpu_dense;
    CHECK(near(p.ag_bytes, ag, 1e-12), "all-gather %.0f, hand %.0f", p.ag_bytes, ag);

    /* Step time from the default hardware figures (H100 SXM), flat model. */
    const double t_compute = flops_gpu / (989e12 * 0.75);
    const double t_grad = ar / 450e9, hide = t_compute / 128 * 2 / 3;
    /* parallel.overlap_moe: each layer's dispatch backward (a quarter of its exchanges) under
     * the experts' weight gradients, 2 x 3 h Im FLOPs for each of the k T rows */
    const double dw = 2.0 * 3 * 2048 * 768 * 4096 * 8, t_dw = dw / (989e12 * 0.75);
    const double t_x = a2a / 450e9 / (4 * 24 * 128);
    const double hidden = (t_dw < t_x ? t_dw : t_x) * 24 * 128;
    CHECK(p.overlap_moe && near(p.expert_dw_flops, dw, 1e-12) && near(p.t_a2a_hidden, hidden, 1e-9),
          "overlap: dW %.6g FLOPs (hand %.6g), hidden %.6f s (hand %.6f)", p.expert_dw_flops, dw,
          p.t_a2a_hidden, hidden);
    const double t_step =
        t_compute + a2a / 450e9 - hidden + (t_grad > hide ? t_grad - hide : 0) + ag / 450e9;
    CHECK(near(p.t_step, t_step, 1e-9), "step %.6f s, hand %.6f", p.t_step, t_step);
    CHECK(near(p.mfu, flops_gpu / (t_step * 989e12), 1e-9), "MFU %.4f", p.mfu);

    /* parallel.overlap_moe off: nothing hidden, the whole exchange adds to the step */
    sl_config off = *cfg; /* a shallow copy, only read */
    off.parallel.overlap_moe = false;
    sl_plan po;
    CHECK(sl_plan_compute(&off, &r, &po, err, sizeof err) == 0, "plan failed: %s", err);
    CHECK(!po.overlap_moe && po.t_a2a_hidden == 0 && near(po.t_step, t_step + hidden, 1e-9),
          "overlap_moe off: hidden %.6f s, step %.6f s (hand %.6f)", po.t_a2a_hidden, po.t_step,
          t_step + hidden);
}

/* Single knobs named when they make a plan fit. */
static void check_advice(const sl_config *cfg) {
    sl_plan_request r;
    sl_plan_request_defaults(&r);
    r.gpus = 8;
    r.zero1 = 0;
    r.recompute = "layer";
    r.gpu_memory_gib = 60; /* 53.2 GiB usable: layer recompute needs ZeRO-1 to fit */
    sl_plan p;
    char err[512];
    CHECK(sl_plan_compute(cfg, &r, &p, err, sizeof err) == 0, "plan failed: %s", err);
    CHECK(!p.fits && strstr(p.advice, "--zero1"), "advice '%s' should name --zero1", p.advice);
    r.zero1 = 1;
    CHECK(sl_plan_compute(cfg, &r, &p, err, sizeof err) == 0 && p.fits,
          "with --zero1 it should fit: %.2f of %.2f GiB", p.total / GIB, p.usable / GIB);
    r.gpu_memory_gib = 10;
    CHECK(sl_plan_compute(cfg, &r, &p, err, sizeof err) == 0 && !p.fits &&
              strstr(p.advice, "more GPUs"),
          "10 GiB: advice '%s'", p.advice);
    /* Two nodes of four: EP 8 crosses nodes, 4 of the 7 peers over InfiniBand. */
    r.gpu_memory_gib = 80;
    r.gpus_per_node = 4;
    CHECK(sl_plan_compute(cfg, &r, &p, err, sizeof err) == 0, "plan failed: %s", err);
    CHECK(near(p.a2a_ib_bytes, p.a2a_bytes * 4 / 7, 1e-12), "IB share %.0f of %.0f", p.a2a_ib_bytes,
          p.a2a_bytes);
    /* Bad input names the flag. */
    r.gpus = 12;
    CHECK(sl_plan_compute(cfg, &r, &p, err, sizeof err) == -1 && strstr(err, "--ep"),
          "EP 8 on 12 GPUs: '%s'", err);
}

/* training.defer_expert_wgrad: the parked expert rows, k (2 h + 3 Im) bf16 values per token
 * in each of the 24 MoE layers, counted where the runtime would park them and in the total;
 * "auto" parks nothing with expert parallelism and parallel.overlap_moe (the config's). */
static void check_deferred(const sl_config *cfg) {
    sl_plan_request r;
    sl_plan_request_defaults(&r);
    r.gpus = 8;
    r.ep = 8;
    sl_plan p, q;
    char err[512];
    const double want = 24.0 * 4096 * 8 * (2 * 2048 + 3 * 768) * 2;
    CHECK(sl_plan_compute(cfg, &r, &q, err, sizeof err) == 0 && !q.defer_wgrad && q.deferred == 0,
          "auto with EP 8 and overlap_moe: parked %.0f bytes", q.deferred);
    sl_config c = *cfg; /* a shallow copy, only read */
    snprintf(c.train.defer_expert_wgrad, sizeof c.train.defer_expert_wgrad, "on");
    CHECK(sl_plan_compute(&c, &r, &p, err, sizeof err) == 0, "plan failed: %s", err);
    CHECK(p.defer_wgrad && p.deferred == want, "on: parked %.0f bytes, hand %.0f", p.deferred,
          want);
    CHECK(near(p.total, p.state + p.act[p.mode].total + want, 1e-12) &&
              near(p.total, q.total + want, 1e-12),
          "total %.0f, without %.0f", p.total, q.total);
    /* with overlap_moe the first micro-batch of a pair has no weight gradient to hide its
     * exchange behind: half the micro-batches hide one (an exchange is shorter than either) */
    CHECK(p.accum % 2 == 0 && p.t_a2a_hidden > 0 && near(p.t_a2a_hidden, q.t_a2a_hidden / 2, 1e-9),
          "hidden all-to-all with pairs %.4f s, without %.4f s", p.t_a2a_hidden, q.t_a2a_hidden);
    c.parallel.overlap_moe = false; /* auto parks without the overlap */
    snprintf(c.train.defer_expert_wgrad, sizeof c.train.defer_expert_wgrad, "auto");
    CHECK(sl_plan_compute(&c, &r, &q, err, sizeof err) == 0 && q.deferred == want,
          "auto without overlap_moe: parked %.0f bytes", q.deferred);
    r.recompute = "layer"; /* the layers share their activations: nothing parked */
    CHECK(sl_plan_compute(&c, &r, &q, err, sizeof err) == 0 && q.deferred == 0,
          "recompute layer: parked %.0f bytes", q.deferred);
    /* parked rows alone over the budget: the advice names the key */
    r.recompute = NULL;
    r.gpu_memory_gib = (p.total - want / 2 + 2 * GIB) / 0.92 / GIB;
    CHECK(sl_plan_compute(&c, &r, &q, err, sizeof err) == 0 && !q.fits &&
              strstr(q.advice, "training.defer_expert_wgrad=off"),
          "advice '%s' should name training.defer_expert_wgrad=off", q.advice);
    /* groups of 4 (training.expert_wgrad_group): three micro-batches' rows parked; with memory
     * for pairs but not for groups of 3, the advice names the group of 2 */
    r.gpu_memory_gib = 0, r.wgrad_group = 4;
    CHECK(sl_plan_compute(&c, &r, &q, err, sizeof err) == 0 && q.accum >= 4 && q.wgrad_group == 4 &&
              q.deferred == 3 * want,
          "groups of 4 (accum %d): group %d, parked %.0f bytes, hand %.0f", q.accum, q.wgrad_group,
          q.deferred, 3 * want);
    r.gpu_memory_gib = (q.total - 1.5 * want + 2 * GIB) / 0.92 / GIB;
    CHECK(sl_plan_compute(&c, &r, &q, err, sizeof err) == 0 && !q.fits &&
              strstr(q.advice, "training.expert_wgrad_group=2"),
          "advice '%s' should name training.expert_wgrad_group=2", q.advice);
    /* one GPU, the automatic group with rows (pairs: park_expert_rows rows) over the budget by
     * its parked rows but not as tokens: the advice pins the pair, since tokens alone would
     * make the automatic group 4 (three micro-batches parked, more than the rows it replaces) */
    sl_plan_request one;
    sl_plan_request_defaults(&one);
    one.gpus = 1, one.ep = 1, one.layers = 9, one.gpu = "h200", one.global_batch = 4 * 4096;
    one.park = "rows";
    CHECK(sl_plan_compute(&c, &one, &q, err, sizeof err) == 0 && q.wgrad_auto &&
              q.wgrad_group == 2 && !q.park_tokens,
          "automatic group with rows: group %d, tokens %d: %s", q.wgrad_group, q.park_tokens, err);
    const double rows1 = q.deferred;
    one.park = "tokens", one.wgrad_group = 2; /* one micro-batch's tokens */
    CHECK(sl_plan_compute(&c, &one, &q, err, sizeof err) == 0 && q.park_tokens && q.deferred > 0 &&
              q.deferred < rows1,
          "pairs as tokens: %.0f bytes against the rows' %.0f", q.deferred, rows1);
    const double tokens1 = q.deferred;
    one.park = "rows", one.wgrad_group = 0;
    CHECK(sl_plan_compute(&c, &one, &q, err, sizeof err) == 0, "plan failed: %s", err);
    one.gpu_memory_gib = (q.total - rows1 + (rows1 + tokens1) / 2 + 2 * GIB) / 0.92 / GIB;
    CHECK(
        sl_plan_compute(&c, &one, &q, err, sizeof err) == 0 && !q.fits &&
            strstr(q.advice, "training.park_expert_rows=tokens with training.expert_wgrad_group=2"),
        "advice '%s' should pin the pair with tokens", q.advice);
    one.wgrad_group = 2; /* a group named: nothing to pin */
    CHECK(sl_plan_compute(&c, &one, &q, err, sizeof err) == 0 && !q.fits && !q.wgrad_auto &&
              strstr(q.advice, "training.park_expert_rows=tokens") &&
              !strstr(q.advice, "with training.expert_wgrad_group"),
          "advice '%s' with --wgrad-group 2", q.advice);
    r.gpu_memory_gib = 0, r.wgrad_group = 5;
    CHECK(sl_plan_compute(&c, &r, &q, err, sizeof err) == -1 && strstr(err, "--wgrad-group"),
          "a group of 5: '%s'", err);
}

/* The rate table's lookups (trainer/plan_rates.c): log-linear between measured points,
 * constant beyond them; the H100 takes the H200's rates, memory-bound ones scaled. */
static void check_rates(void) {
    const sl_plan_gpu *h200 = sl_plan_gpu_find("H200"), *h100 = sl_plan_gpu_find("h100");
    CHECK(h200 && h100 && !sl_plan_gpu_find("a100") && sl_plan_gpu_default() == h100,
          "GPU kinds by name");
    if (!h200 || !h100) return;
    const sl_expert_strategy g = SL_EXPERTS_GROUPED;
    /* gate_up forward, grouped: 277.0 at 256 rows, 305.1 at 512, 329.9 at 2048 (the last);
     * sqrt(256 x 512) is the middle in log(rows) */
    const double mid = sqrt(256.0 * 512.0);
    CHECK(near(sl_rate_expert_tflops(h200, g, SL_EXPERT_GATE_UP, SL_PASS_FWD, mid),
               (277.0 + 305.1) / 2, 1e-12) &&
              sl_rate_expert_tflops(h200, g, SL_EXPERT_GATE_UP, SL_PASS_FWD, 64) == 277.0 &&
              sl_rate_expert_tflops(h200, g, SL_EXPERT_GATE_UP, SL_PASS_FWD, 1e6) == 329.9,
          "expert rate interpolation");
    /* the lanes and the Hopper kernel have rates of their own: down weight gradient 104.4 on
     * the lanes and 139.9 on wgmma at 256 rows; the H100 takes the H200's wgmma rates */
    CHECK(sl_rate_expert_tflops(h200, SL_EXPERTS_LANES, SL_EXPERT_DOWN, SL_PASS_WGRAD, 256) ==
              104.4,
          "lanes rates");
    CHECK(sl_rate_expert_tflops(h200, SL_EXPERTS_WGMMA, SL_EXPERT_DOWN, SL_PASS_WGRAD, 256) ==
                  139.9 &&
              sl_rate_expert_tflops(h100, SL_EXPERTS_WGMMA, SL_EXPERT_GATE_UP, SL_PASS_FWD, 2048) ==
                  687.9,
          "wgmma rates");
    /* the wgmma forward has no rows between 256 (535.5) and 2,048 (687.9): 1,024 rows are
     * two thirds of the way in log(rows) */
    CHECK(near(sl_rate_expert_tflops(h200, SL_EXPERTS_WGMMA, SL_EXPERT_GATE_UP, SL_PASS_FWD, 1024),
               535.5 + (687.9 - 535.5) * 2 / 3, 1e-9),
          "wgmma forward between its two measured row counts");
    /* attention, D 128: bwd B 1 S 4096 427.00, B 8 S 4096 363.55 (held for larger B), fwd
     * B 1 S 32768 630.15 (held for longer S); D 64 has rows of its own */
    CHECK(near(sl_rate_attention_tflops(h200, true, 1, 4096, 128), 427.00, 1e-12) &&
              near(sl_rate_attention_tflops(h200, true, 8, 4096, 128), 363.55, 1e-12) &&
              near(sl_rate_attention_tflops(h200, true, 16, 4096, 128), 363.55, 1e-12) &&
              near(sl_rate_attention_tflops(h200, false, 1, 65536, 128), 630.15, 1e-12) &&
              near(sl_rate_attention_tflops(h200, true, 1, 4096, 64), 317.39, 1e-12),
          "attention rate lookup");
    /* B 8 at S 32768: the B 8 table has only S 4096 (held), B 1 interpolated in log(B) */
    CHECK(near(sl_rate_attention_tflops(h200, true, 8, 32768, 128), 363.55, 1e-12),
          "attention B 8, S 32768: %.2f", sl_rate_attention_tflops(h200, true, 8, 32768, 128));
    CHECK(near(sl_rate_adamw_gbs(h100), 3951.4 * 3350 / 4800, 1e-12) &&
              near(sl_rate_dense_tflops(h100), 821.5, 1e-12) &&
              near(sl_rate_other_ns(h100), 222.9 * 4800 / 3350, 1e-12),
          "H100 derived rates");
}

/* How --expert-gemm is timed per pass, as the runtime's strategies run (moe/grouped_matmul.cu):
 * `auto` and `wgmma` run the Hopper kernel for every pass in bf16 on compute capability 9.x
 * (both GPU kinds the plan knows); in fp32 (the kernel is bf16 only) `auto`'s cuBLAS paths:
 * grouped forward and data gradient, the weight gradient on the lanes below 1,024 rows per
 * expert and per expert from there. */
static void check_expert_paths(const sl_config *bf16) {
    static sl_config fp32;
    fp32 = *bf16;
    snprintf(fp32.train.precision, sizeof fp32.train.precision, "fp32");
    static const struct {
        const sl_config *cfg;
        const char *gpu, *strategy;
        int micro_batch; /* 1: 256 rows per expert on one GPU; 8: 2,048 */
        sl_expert_strategy fwd, dw;
    } cases[] = {
        {NULL, "h200", NULL, 1, SL_EXPERTS_WGMMA, SL_EXPERTS_WGMMA},
        {NULL, "h200", "auto", 8, SL_EXPERTS_WGMMA, SL_EXPERTS_WGMMA},
        {NULL, "h100", "auto", 1, SL_EXPERTS_WGMMA, SL_EXPERTS_WGMMA},
        {NULL, "h200", "wgmma", 8, SL_EXPERTS_WGMMA, SL_EXPERTS_WGMMA},
        {NULL, "h200", "lanes", 1, SL_EXPERTS_LANES, SL_EXPERTS_LANES},
        {NULL, "h200", "grouped", 1, SL_EXPERTS_GROUPED, SL_EXPERTS_PER_EXPERT},
        {&fp32, "h200", "auto", 1, SL_EXPERTS_GROUPED, SL_EXPERTS_LANES},
        {&fp32, "h200", "auto", 8, SL_EXPERTS_GROUPED, SL_EXPERTS_PER_EXPERT},
        {&fp32, "h100", "wgmma", 1, SL_EXPERTS_GROUPED, SL_EXPERTS_LANES},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        sl_plan_request r;
        sl_plan_request_defaults(&r);
        r.gpus = 1;
        r.ep = 1;
        r.layers = 2;
        r.micro_batch = cases[i].micro_batch;
        r.global_batch = 4096LL * cases[i].micro_batch;
        r.gpu = cases[i].gpu;
        r.expert_gemm = cases[i].strategy;
        sl_plan p;
        char err[512];
        const sl_config *cfg = cases[i].cfg ? cases[i].cfg : bf16;
        CHECK(sl_plan_compute(cfg, &r, &p, err, sizeof err) == 0, "case %zu: %s", i, err);
        CHECK(p.expert_path[SL_PASS_FWD] == cases[i].fwd &&
                  p.expert_path[SL_PASS_DGRAD] == cases[i].fwd &&
                  p.expert_path[SL_PASS_WGRAD] == cases[i].dw,
              "case %zu (%s, %s, %s, B %d): fwd %s, dW %s; expected %s, %s", i,
              cfg == bf16 ? "bf16" : "fp32", cases[i].gpu,
              cases[i].strategy ? cases[i].strategy : "default", cases[i].micro_batch,
              sl_expert_strategy_name(p.expert_path[SL_PASS_FWD]),
              sl_expert_strategy_name(p.expert_path[SL_PASS_WGRAD]),
              sl_expert_strategy_name(cases[i].fwd), sl_expert_strategy_name(cases[i].dw));
    }
}

/* The weight gradient over groups of micro-batches (--defer-wgrad, --wgrad-group): each group
 * of n one pass at n R rows per expert and n times the FLOPs, at that row count's rate; a last
 * micro-batch alone at R; ungrouped with `off`, and where a group runs as n passes (fp32: not
 * the Hopper kernel, even with `on`). Computed here from the rate table by hand. */
static void check_wgrad_groups(const sl_config *bf16) {
    static sl_config fp32;
    fp32 = *bf16;
    snprintf(fp32.train.precision, sizeof fp32.train.precision, "fp32");
    const sl_plan_gpu *g = sl_plan_gpu_find("h200");
    const double h = 2048, Im = 768, rows = 4096.0 * 8, R = rows / 128;
    const double f_gu = 2 * rows * h * 2 * Im, f_dn = 2 * rows * Im * h;
    double t[5] = {0};
    for (int n = 1; n <= 4; n++)
        t[n] =
            n * f_gu /
                (sl_rate_expert_tflops(g, SL_EXPERTS_WGMMA, SL_EXPERT_GATE_UP, SL_PASS_WGRAD,
                                       n * R) *
                 1e12) +
            n * f_dn /
                (sl_rate_expert_tflops(g, SL_EXPERTS_WGMMA, SL_EXPERT_DOWN, SL_PASS_WGRAD, n * R) *
                 1e12);
    CHECK(t[2] < 2 * t[1] && t[4] < 2 * t[2], "the table's groups are not faster: %.3g %.3g %.3g s",
          t[1], t[2], t[4]);
    static const struct {
        const sl_config *cfg;
        const char *setting;
        int group, accum, full, size, rest; /* full groups of `size`, one of `rest` */
        bool grouped;
    } cases[] = {
        {NULL, NULL, 0, 4, 1, 4, 0, true},    /* auto: bf16 on an H200, groups of 4 (tokens) */
        {NULL, "on", 0, 3, 1, 3, 0, true},    /* the group of 4 over 3 micro-batches */
        {NULL, "on", 2, 3, 1, 2, 1, true},    /* pairs: an odd last micro-batch alone */
        {NULL, NULL, 2, 4, 2, 2, 0, true},    /* two pairs */
        {NULL, "off", 0, 4, 4, 1, 0, false},  /* ungrouped */
        {NULL, "auto", 0, 1, 1, 1, 0, false}, /* one micro-batch: nothing to group */
        {&fp32, "on", 0, 4, 4, 1, 0, false},  /* parked, but one pass per micro-batch */
        {NULL, NULL, 4, 4, 1, 4, 0, true},    /* one group of 4 */
        {NULL, NULL, 4, 6, 1, 4, 2, true},    /* a group of 4 and a pair */
        {NULL, NULL, 3, 4, 1, 3, 1, true},    /* a group of 3 and one alone */
        {NULL, NULL, 4, 3, 1, 3, 0, true},    /* a group of 4 over 3 micro-batches: 3 */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        sl_plan_request r;
        sl_plan_request_defaults(&r);
        r.gpus = 1, r.ep = 1, r.layers = 2, r.gpu = "h200";
        r.global_batch = 4096LL * cases[i].accum;
        r.defer_wgrad = cases[i].setting;
        r.wgrad_group = cases[i].group;
        sl_plan p;
        char err[512];
        const sl_config *cfg = cases[i].cfg ? cases[i].cfg : bf16;
        CHECK(sl_plan_compute(cfg, &r, &p, err, sizeof err) == 0, "groups case %zu: %s", i, err);
        double got = -1;
        for (int j = 0; j < p.n_parts; j++)
            if (!strcmp(p.parts[j].name, "expert GEMMs weight grad")) got = p.parts[j].seconds;
        /* fp32 times another strategy: only whether it groups is checked there */
        const double want = 2 * (cases[i].full * t[cases[i].size] + t[cases[i].rest]);
        CHECK(p.wgrad_grouped == cases[i].grouped && (cases[i].cfg || near(got, want, 1e-9)),
              "groups case %zu (%s, group %d, accum %d): grouped %d, %.4f s, expected %d, %.4f s",
              i, cases[i].setting ? cases[i].setting : "default", cases[i].group, cases[i].accum,
              p.wgrad_grouped, got, cases[i].grouped, want);
    }
    sl_plan_request r;
    sl_plan_request_defaults(&r);
    r.gpus = 1, r.ep = 1, r.defer_wgrad = "sometimes";
    sl_plan p;
    char err[512];
    CHECK(sl_plan_compute(bf16, &r, &p, err, sizeof err) == -1 && strstr(err, "--defer-wgrad"),
          "a bad --defer-wgrad: '%s'", err);
}

int main(void) {
    sl_config cfg;
    char err[1024];
    if (sl_config_load(SLUICE_SOURCE_DIR "/configs/qwen-gated-15a2b.json", &cfg, err, sizeof err)) {
        fprintf(stderr, "FAIL: %s\n", err);
        return 1;
    }
    check_15a2b(&cfg);
    check_advice(&cfg);
    check_deferred(&cfg);
    check_rates();
    check_expert_paths(&cfg);
    check_wgrad_groups(&cfg);
    return sl_test_finish("test_plan");
}
