/*
 * trainer/plan_rates.c - THE table of hardware figures `sluice plan` uses (plan_rates.h).
 *
 * Every number says where it came from. "Measured" numbers come from one bench/gpu_check.sh
 * session on one NVIDIA H200 (143,771 MiB, driver 580.159.04) on 2026-11-26, from bundles of
 * the tree whose expert GEMM `auto` runs sluice's Hopper grouped GEMM (wgmma, moe/kernels_cuda.h)
 * for the forward, data gradient and weight gradient (commit 0d59184):
 *   - call 1 (15:15 UTC): attn_bench (sluice's sm90 kernel, deterministic, and cuDNN; bf16,
 *     causal, H 32, KV 4);
 *   - call 2 (15:32 UTC): expert_gemm_bench (128 experts, hidden 2048, ffn 768, bf16, rows spread
 *     over [R/2, 3R/2), every strategy);
 *   - call 3 (15:47 UTC, the final defaults: 0d59184 plus 98c0a75, AdamW's coalesced form):
 *     gpu_train_bench --profile on configs/qwen-gated-15a2b.json cut to 9 layers, 4 micro-batches
 *     of 1 x 4096 tokens (256 rows per expert): 342.93 ms per step; the EP-8 expert load, 5
 *     layers, 1 micro-batch of 8 x 4096 (2,048 rows per expert): 341.27 ms; both with every
 *     expert GEMM pass on wgmma, attention kernel sm90. (Call 2's profiles, 342.98 and 338.81 ms
 *     with AdamW's old form, are superseded; the directory keeps them as profile_call2.json and
 *     profile_ep8_call2.json.)
 * Those raw outputs are in bench/results/h200-2026-11-26c/ (its README names each file's run),
 * both steps with their per-region rows and provenance in bench/results/h200-2026-11-26c.json.
 * `bench/plan_rates.py derive DIR` prints every rate below from such a directory and `check`
 * compares this table with it (test_plan_rates_source). docs/plan.md, "Rates", maps each number
 * to its bench output line and lists the steps of an update after a re-measurement. The day's
 * earlier runs (bench/results/h200-2026-11-26/, before the split attention backward, and
 * h200-2026-11-26b/, the cuBLAS `auto` of commit 307d9eb) are kept as history.
 */
#include "trainer/plan_rates.h"

#include <math.h>
#include <stddef.h>
#include <strings.h>

#define GU SL_EXPERT_GATE_UP
#define DN SL_EXPERT_DOWN
#define GR SL_EXPERTS_GROUPED
#define PE SL_EXPERTS_PER_EXPERT
#define LN SL_EXPERTS_LANES
#define WG SL_EXPERTS_WGMMA

/* H200, 2026-11-26 call 2, expert_gemm_bench (bench/results/h200-2026-11-26c/expert_gemm.out):
 * the "median ms / TFLOP/s" column of each GEMM and strategy row at 256, 512, 1,024 and 2,048
 * rows per expert, for the strategies the plan times (grouped, per-expert, lanes, wgmma). The
 * grouped strategy's weight gradients run per expert (cuBLAS refuses the grouped bf16-into-fp32
 * call; the bench's path column says so), so they are the per-expert rows; its `auto` rows ran
 * wgmma (path column) and are not a strategy of their own. The expert GEMM code did not change
 * between calls 2 and 3. */
static const sl_rate_expert h200_expert[] = {
    {GR, GU, SL_PASS_FWD, 256, 276.3},    {GR, DN, SL_PASS_FWD, 256, 244.9},
    {GR, GU, SL_PASS_DGRAD, 256, 269.9},  {GR, DN, SL_PASS_DGRAD, 256, 258.4},
    {GR, GU, SL_PASS_FWD, 512, 305.1},    {GR, DN, SL_PASS_FWD, 512, 253.5},
    {GR, GU, SL_PASS_DGRAD, 512, 278.8},  {GR, DN, SL_PASS_DGRAD, 512, 277.1},
    {GR, GU, SL_PASS_FWD, 1024, 321.9},   {GR, DN, SL_PASS_FWD, 1024, 218.5},
    {GR, GU, SL_PASS_DGRAD, 1024, 253.5}, {GR, DN, SL_PASS_DGRAD, 1024, 275.7},
    {GR, GU, SL_PASS_FWD, 2048, 326.4},   {GR, DN, SL_PASS_FWD, 2048, 216.2},
    {GR, GU, SL_PASS_DGRAD, 2048, 286.3}, {GR, DN, SL_PASS_DGRAD, 2048, 296.0},
    {PE, GU, SL_PASS_FWD, 256, 196.1},    {PE, DN, SL_PASS_FWD, 256, 107.0},
    {PE, GU, SL_PASS_DGRAD, 256, 212.9},  {PE, DN, SL_PASS_DGRAD, 256, 108.4},
    {PE, GU, SL_PASS_WGRAD, 256, 108.7},  {PE, DN, SL_PASS_WGRAD, 256, 87.0},
    {PE, GU, SL_PASS_FWD, 512, 251.0},    {PE, DN, SL_PASS_FWD, 512, 203.3},
    {PE, GU, SL_PASS_DGRAD, 512, 337.2},  {PE, DN, SL_PASS_DGRAD, 512, 184.7},
    {PE, GU, SL_PASS_WGRAD, 512, 190.9},  {PE, DN, SL_PASS_WGRAD, 512, 159.9},
    {PE, GU, SL_PASS_FWD, 1024, 470.2},   {PE, DN, SL_PASS_FWD, 1024, 322.0},
    {PE, GU, SL_PASS_DGRAD, 1024, 469.9}, {PE, DN, SL_PASS_DGRAD, 1024, 296.5},
    {PE, GU, SL_PASS_WGRAD, 1024, 320.0}, {PE, DN, SL_PASS_WGRAD, 1024, 263.8},
    {PE, GU, SL_PASS_FWD, 2048, 611.1},   {PE, DN, SL_PASS_FWD, 2048, 431.4},
    {PE, GU, SL_PASS_DGRAD, 2048, 573.8}, {PE, DN, SL_PASS_DGRAD, 2048, 461.9},
    {PE, GU, SL_PASS_WGRAD, 2048, 490.0}, {PE, DN, SL_PASS_WGRAD, 2048, 409.6},
    {LN, GU, SL_PASS_FWD, 256, 205.6},    {LN, DN, SL_PASS_FWD, 256, 101.9},
    {LN, GU, SL_PASS_DGRAD, 256, 211.8},  {LN, DN, SL_PASS_DGRAD, 256, 104.5},
    {LN, GU, SL_PASS_WGRAD, 256, 167.1},  {LN, DN, SL_PASS_WGRAD, 256, 102.1},
    {LN, GU, SL_PASS_FWD, 512, 373.6},    {LN, DN, SL_PASS_FWD, 512, 206.6},
    {LN, GU, SL_PASS_DGRAD, 512, 329.8},  {LN, DN, SL_PASS_DGRAD, 512, 207.3},
    {LN, GU, SL_PASS_WGRAD, 512, 289.5},  {LN, DN, SL_PASS_WGRAD, 512, 203.8},
    {LN, GU, SL_PASS_FWD, 1024, 509.2},   {LN, DN, SL_PASS_FWD, 1024, 408.4},
    {LN, GU, SL_PASS_DGRAD, 1024, 528.7}, {LN, DN, SL_PASS_DGRAD, 1024, 366.2},
    {LN, GU, SL_PASS_WGRAD, 1024, 475.2}, {LN, DN, SL_PASS_WGRAD, 1024, 376.5},
    {LN, GU, SL_PASS_FWD, 2048, 650.2},   {LN, DN, SL_PASS_FWD, 2048, 561.1},
    {LN, GU, SL_PASS_DGRAD, 2048, 651.4}, {LN, DN, SL_PASS_DGRAD, 2048, 518.6},
    {LN, GU, SL_PASS_WGRAD, 2048, 628.2}, {LN, DN, SL_PASS_WGRAD, 2048, 522.4},
    {WG, GU, SL_PASS_FWD, 256, 423.3},    {WG, DN, SL_PASS_FWD, 256, 369.9},
    {WG, GU, SL_PASS_DGRAD, 256, 425.1},  {WG, DN, SL_PASS_DGRAD, 256, 425.9},
    {WG, GU, SL_PASS_WGRAD, 256, 147.8},  {WG, DN, SL_PASS_WGRAD, 256, 141.4},
    {WG, GU, SL_PASS_FWD, 512, 496.1},    {WG, DN, SL_PASS_FWD, 512, 415.7},
    {WG, GU, SL_PASS_DGRAD, 512, 489.1},  {WG, DN, SL_PASS_DGRAD, 512, 500.1},
    {WG, GU, SL_PASS_WGRAD, 512, 253.1},  {WG, DN, SL_PASS_WGRAD, 512, 242.4},
    {WG, GU, SL_PASS_FWD, 1024, 556.1},   {WG, DN, SL_PASS_FWD, 1024, 464.7},
    {WG, GU, SL_PASS_DGRAD, 1024, 537.6}, {WG, DN, SL_PASS_DGRAD, 1024, 567.0},
    {WG, GU, SL_PASS_WGRAD, 1024, 400.2}, {WG, DN, SL_PASS_WGRAD, 1024, 380.3},
    {WG, GU, SL_PASS_FWD, 2048, 594.6},   {WG, DN, SL_PASS_FWD, 2048, 481.4},
    {WG, GU, SL_PASS_DGRAD, 2048, 552.6}, {WG, DN, SL_PASS_DGRAD, 2048, 586.0},
    {WG, GU, SL_PASS_WGRAD, 2048, 490.5}, {WG, DN, SL_PASS_WGRAD, 2048, 514.3},
};

/* H200, 2026-11-26, sluice's Hopper attention kernel (sm90), deterministic. B = 1: attn_bench
 * "sm90 1 S 32 4 D" rows, fwd and bwd TFLOP/s (call 1, bench/results/h200-2026-11-26c/
 * attn_bench.out; the kernel did not change between calls 1 and 3). B = 8: no attn_bench row;
 * measured inside the EP-8 profile (call 3, profile_ep8.json, gpu_train_bench --profile
 * --batch 8): "attention kernel fwd" 13.971 ms and "attention kernel bwd" 40.432 ms for 5 calls
 * of 1.0995e12 (fwd) and 2.7488e12 (bwd) FLOPs. */
static const sl_rate_attention h200_attention[] = {
    {1, 4096, 128, 409.26, 411.52}, {1, 32768, 128, 611.15, 441.79}, {1, 4096, 64, 284.61, 238.52},
    {1, 32768, 64, 438.02, 287.43}, {8, 4096, 128, 393.50, 339.93},
};

static const sl_plan_gpu h200 = {
    .name = "h200",
    .label = "H200 SXM",
    .peak_tflops = 989.0,     /* datasheet, dense bf16 (as the H100 SXM) */
    .memory_gib = 139.8,      /* measured: cudaMemGetInfo total on the H200 above */
    .hbm_gbs = 4800.0,        /* datasheet, HBM3e */
    .nvlink_gbs = 450.0,      /* datasheet 900 GB/s both directions (NVLink 4, as the H100) */
    .ib_gbs = 50.0,           /* one 400 Gb/s NDR port per GPU, HGX H200 */
    .gpus_per_node = 8,       /* HGX H200 */
    .compute_capability = 90, /* sm_90: the expert GEMMs' `auto` runs wgmma (bf16) */
    .rates_source = "measured on an H200, 2026-11-26 (gpu_train_bench --profile, attn_bench, "
                    "expert_gemm_bench)",
    /* The 4 x 1 x 4096 profile (call 3, bench/results/h200-2026-11-26c/profile.json):
     * gpu_train_bench's "bf16 GEMM peak" (cublasGemmEx 8192^3, median of 11), the larger of its
     * two lines: 792.9 before the steps (791.0 after; the EP-8 run: 792.5). Call 2 measured
     * 802.7: the peak varies by about 1% between calls. */
    .dense_tflops = 792.9,
    /* "gradient reduction + norm" row on one GPU (a norm pass over fp32 gradients, 4 bytes
     * per parameter): 6.306e9 x 4 B / 6.024 ms = 4187 GB/s (the EP-8 run: 4111). */
    .stream_gbs = 4187.2,
    /* "optimizer: AdamW (+ router bias)" row, AdamW's coalesced form (the default since
     * 98c0a75; SLUICE_ADAMW): 6.306e9 parameters x 34 B / 53.988 ms = 3971 GB/s. The row moved
     * 34 B per parameter, not the 30 the plan counts (fp32 master, m, v read and written, fp32
     * gradient read, bf16 copy written): the config's ZeRO-1 had AdamW skip the copy and a
     * conversion pass write it from the master afterwards (4 B read, 2 written), on one GPU
     * too; since 2026-11-28 AdamW writes it (trainer/optimizer.c), so the plan's 30 B at this
     * rate are the prediction for the row now (docs/performance.md, "AdamW's compute copy
     * under ZeRO-1"). The EP-8 run: 3.780e9 x 34 B / 32.398 ms = 3967. */
    .adamw_gbs = 3971.3,
    /* Everything not modelled on its own (norms, q/gate split and RoPE, router, SwiGLU,
     * permute/unpermute, residual adds, embedding, idle and host waits): the sum of those rows
     * of the 4 x 1 x 4096 profile, 44.48 ms, over 9 layers x 16384 tokens = 301.6 ns per token
     * and layer (the EP-8 profile: 232.9, larger kernels). */
    .other_ns_token_layer = 301.6,
    .expert = h200_expert,
    .n_expert = (int)(sizeof h200_expert / sizeof *h200_expert),
    .attention = h200_attention,
    .n_attention = (int)(sizeof h200_attention / sizeof *h200_attention),
};

/* The H100 SXM: not measured. Same SMs (132), clocks and dense bf16 peak (989 TFLOP/s) as the
 * H200 in the datasheets, so its compute rates are taken as the H200's (the wgmma expert GEMMs
 * included: the same sm_90 code runs there); the memory-bound rates scale with the datasheet
 * bandwidth, 3.35 / 4.8 TB/s. */
static const sl_plan_gpu h100 = {
    .name = "h100",
    .label = "H100 SXM",
    .peak_tflops = 989.0,     /* datasheet, dense bf16 without sparsity */
    .memory_gib = 80.0,       /* datasheet "80 GB" taken as GiB (the device reports ~79.6) */
    .hbm_gbs = 3350.0,        /* datasheet, HBM3 */
    .nvlink_gbs = 450.0,      /* datasheet 900 GB/s both directions */
    .ib_gbs = 50.0,           /* one ConnectX-7 400 Gb/s NDR port per GPU */
    .gpus_per_node = 8,       /* HGX/DGX H100 */
    .compute_capability = 90, /* sm_90, as the H200: `auto` runs wgmma (bf16) */
    .rates_source = "not measured: the H200's rates, memory-bound ones x 3.35/4.8 (datasheet "
                    "bandwidths)",
    .base = &h200,
    .compute_scale = 1.0,
    .memory_scale = 3350.0 / 4800.0,
};

static const sl_plan_gpu *const gpus[] = {&h100, &h200};

const sl_plan_gpu *sl_plan_gpu_find(const char *name) {
    for (size_t i = 0; name && i < sizeof gpus / sizeof *gpus; i++)
        if (strcasecmp(name, gpus[i]->name) == 0) return gpus[i];
    return NULL;
}

const sl_plan_gpu *sl_plan_gpu_default(void) {
    return &h100;
}

const char *sl_plan_gpu_names(void) {
    return "h100, h200";
}

const char *sl_expert_strategy_name(sl_expert_strategy s) {
    switch (s) {
    case SL_EXPERTS_PER_EXPERT:
        return "per-expert";
    case SL_EXPERTS_LANES:
        return "lanes";
    case SL_EXPERTS_WGMMA:
        return "wgmma";
    default:
        return "grouped";
    }
}

/* The GPU holding the rates and the factor for compute- or memory-bound ones. */
static const sl_plan_gpu *rates_of(const sl_plan_gpu *g, bool memory, double *scale) {
    *scale = 1.0;
    if (!g->base) return g;
    *scale = memory ? g->memory_scale : g->compute_scale;
    return g->base;
}

double sl_rate_dense_tflops(const sl_plan_gpu *g) {
    double s;
    return rates_of(g, false, &s)->dense_tflops * s;
}

double sl_rate_stream_gbs(const sl_plan_gpu *g) {
    double s;
    return rates_of(g, true, &s)->stream_gbs * s;
}

double sl_rate_adamw_gbs(const sl_plan_gpu *g) {
    double s;
    return rates_of(g, true, &s)->adamw_gbs * s;
}

double sl_rate_other_ns(const sl_plan_gpu *g) {
    double s;
    return rates_of(g, true, &s)->other_ns_token_layer / s; /* a time: slower memory, longer */
}

/* y at x on the line through (x0, y0), (x1, y1) in log(x); y0 when the points coincide. */
static double log_lerp(double x, double x0, double y0, double x1, double y1) {
    if (x1 == x0) return y0;
    const double t = (log(x) - log(x0)) / (log(x1) - log(x0));
    return y0 + (t < 0 ? 0 : t > 1 ? 1 : t) * (y1 - y0);
}

double sl_rate_expert_tflops(const sl_plan_gpu *g, sl_expert_strategy s, sl_expert_gemm gemm,
                             sl_gemm_pass pass, double rows_per_expert) {
    double scale;
    const sl_plan_gpu *r = rates_of(g, false, &scale);
    /* the nearest measured rows below and above (or the ends) */
    const sl_rate_expert *lo = NULL, *hi = NULL;
    for (int i = 0; i < r->n_expert; i++) {
        const sl_rate_expert *e = &r->expert[i];
        if (e->strategy != s || e->gemm != gemm || e->pass != pass) continue;
        if (e->rows_per_expert <= rows_per_expert &&
            (!lo || e->rows_per_expert > lo->rows_per_expert))
            lo = e;
        if (e->rows_per_expert >= rows_per_expert &&
            (!hi || e->rows_per_expert < hi->rows_per_expert))
            hi = e;
    }
    if (!lo) lo = hi;
    if (!hi) hi = lo;
    if (!lo) return 0; /* no measurement: the caller's table is incomplete */
    return scale * log_lerp(rows_per_expert, lo->rows_per_expert, lo->tflops, hi->rows_per_expert,
                            hi->tflops);
}

/* Rate over S at one batch and head dim; 0 if that batch has no point. */
static double attn_at_batch(const sl_plan_gpu *r, bool bwd, int batch, int seq, int d) {
    const sl_rate_attention *lo = NULL, *hi = NULL;
    for (int i = 0; i < r->n_attention; i++) {
        const sl_rate_attention *a = &r->attention[i];
        if (a->batch != batch || a->head_dim != d) continue;
        if (a->seq <= seq && (!lo || a->seq > lo->seq)) lo = a;
        if (a->seq >= seq && (!hi || a->seq < hi->seq)) hi = a;
    }
    if (!lo) lo = hi;
    if (!hi) hi = lo;
    if (!lo) return 0;
    return log_lerp(seq, lo->seq, bwd ? lo->bwd_tflops : lo->fwd_tflops, hi->seq,
                    bwd ? hi->bwd_tflops : hi->fwd_tflops);
}

double sl_rate_attention_tflops(const sl_plan_gpu *g, bool bwd, int batch, int seq, int head_dim) {
    double scale;
    const sl_plan_gpu *r = rates_of(g, false, &scale);
    /* the nearest measured head dim (in log), then the nearest batches below and above */
    int d = 0, blo = 0, bhi = 0;
    for (int i = 0; i < r->n_attention; i++) {
        const int x = r->attention[i].head_dim;
        if (!d || fabs(log((double)x / head_dim)) < fabs(log((double)d / head_dim))) d = x;
    }
    for (int i = 0; i < r->n_attention; i++) {
        const sl_rate_attention *a = &r->attention[i];
        if (a->head_dim != d) continue;
        if (a->batch <= batch && a->batch > blo) blo = a->batch;
        if (a->batch >= batch && (!bhi || a->batch < bhi)) bhi = a->batch;
    }
    if (!blo) blo = bhi;
    if (!bhi) bhi = blo;
    if (!blo) return 0;
    return scale * log_lerp(batch, blo, attn_at_batch(r, bwd, blo, seq, d), bhi,
                            attn_at_batch(r, bwd, bhi, seq, d));
}
