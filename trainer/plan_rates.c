/*
 * trainer/plan_rates.c - THE table of hardware figures `sluice plan` uses (plan_rates.h).
 *
 * Every number says where it came from. "Measured" numbers come from one bench/gpu_check.sh
 * call on one NVIDIA H200 (143,771 MiB, driver 580.159.04) on 2026-11-28 (13:40 UTC), from a
 * bundle of commit a12893b, whose expert GEMM `auto` runs sluice's Hopper grouped GEMM (wgmma,
 * moe/kernels_cuda.h) for the forward, data gradient and weight gradient (the weight gradient
 * over pairs of micro-batches): its parts attn_bench (sluice's sm90 kernel, deterministic, and
 * cuDNN; bf16, causal, H 32, KV 4), expert_gemm (expert_gemm_bench: 128 experts, hidden 2048,
 * ffn 768, bf16, rows spread over [R/2, 3R/2), every strategy, at 256 and 2,048 rows per
 * expert) and the profiles (gpu_train_bench --profile on configs/qwen-gated-15a2b.json cut to 9
 * layers, 4 micro-batches of 1 x 4096 tokens, 256 rows per expert: 284.45 ms per step; the
 * EP-8 expert load, 5 layers, 1 micro-batch of 8 x 4096, 2,048 rows per expert: 302.29 ms).
 * Those raw outputs are in bench/results/h200-2026-11-28/call1/ (its README names each run),
 * the steps with their per-region rows and provenance in bench/results/h200-2026-11-28.json.
 * The rows at 512 and 1,024 rows per expert come from the call of 2026-11-26 (15:32 UTC,
 * bench/results/h200-2026-11-26c/expert_gemm.out), which measured four row counts: cuBLAS's
 * (grouped, per-expert, lanes) and the wgmma weight gradient, whose kernel has not changed in
 * speed since (at 256 and 2,048 rows it measured within 6% of then). The wgmma forward and data
 * gradient at those counts are left out: their kernel gained 16-32% since (16-byte epilogue
 * stores), so the plan interpolates them between 256 and 2,048 rows.
 * `bench/plan_rates.py derive DIR` prints every rate below from such a directory and `check`
 * compares this table with it (test_plan_rates_source). docs/plan.md, "Rates", maps each number
 * to its bench output line and lists the steps of an update after a re-measurement. Earlier
 * runs (bench/results/h200-2026-11-26*, h200-2026-11-27) are kept as history.
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

/* H200 expert_gemm_bench (2026-11-28, bench/results/h200-2026-11-28/call1/expert_gemm.out;
 * 512 and 1,024 rows: 2026-11-26, above): the "median ms / TFLOP/s" column of each GEMM and
 * strategy row, for the strategies the plan times (grouped, per-expert, lanes, wgmma). The
 * grouped strategy's weight gradients run per expert (cuBLAS refuses the grouped bf16-into-fp32
 * call; the bench's path column says so), so they are the per-expert rows; its `auto` rows ran
 * wgmma (path column) and are not a strategy of their own. */
static const sl_rate_expert h200_expert[] = {
    {GR, GU, SL_PASS_FWD, 256, 277.0},    {GR, DN, SL_PASS_FWD, 256, 239.6},
    {GR, GU, SL_PASS_DGRAD, 256, 272.2},  {GR, DN, SL_PASS_DGRAD, 256, 260.8},
    {GR, GU, SL_PASS_FWD, 512, 305.1},    {GR, DN, SL_PASS_FWD, 512, 253.5},
    {GR, GU, SL_PASS_DGRAD, 512, 278.8},  {GR, DN, SL_PASS_DGRAD, 512, 277.1},
    {GR, GU, SL_PASS_FWD, 1024, 321.9},   {GR, DN, SL_PASS_FWD, 1024, 218.5},
    {GR, GU, SL_PASS_DGRAD, 1024, 253.5}, {GR, DN, SL_PASS_DGRAD, 1024, 275.7},
    {GR, GU, SL_PASS_FWD, 2048, 329.9},   {GR, DN, SL_PASS_FWD, 2048, 235.1},
    {GR, GU, SL_PASS_DGRAD, 2048, 287.3}, {GR, DN, SL_PASS_DGRAD, 2048, 286.6},
    {PE, GU, SL_PASS_FWD, 256, 196.2},    {PE, DN, SL_PASS_FWD, 256, 106.0},
    {PE, GU, SL_PASS_DGRAD, 256, 209.6},  {PE, DN, SL_PASS_DGRAD, 256, 105.9},
    {PE, GU, SL_PASS_WGRAD, 256, 108.8},  {PE, DN, SL_PASS_WGRAD, 256, 86.8},
    {PE, GU, SL_PASS_FWD, 512, 251.0},    {PE, DN, SL_PASS_FWD, 512, 203.3},
    {PE, GU, SL_PASS_DGRAD, 512, 337.2},  {PE, DN, SL_PASS_DGRAD, 512, 184.7},
    {PE, GU, SL_PASS_WGRAD, 512, 190.9},  {PE, DN, SL_PASS_WGRAD, 512, 159.9},
    {PE, GU, SL_PASS_FWD, 1024, 470.2},   {PE, DN, SL_PASS_FWD, 1024, 322.0},
    {PE, GU, SL_PASS_DGRAD, 1024, 469.9}, {PE, DN, SL_PASS_DGRAD, 1024, 296.5},
    {PE, GU, SL_PASS_WGRAD, 1024, 320.0}, {PE, DN, SL_PASS_WGRAD, 1024, 263.8},
    {PE, GU, SL_PASS_FWD, 2048, 617.1},   {PE, DN, SL_PASS_FWD, 2048, 438.5},
    {PE, GU, SL_PASS_DGRAD, 2048, 586.9}, {PE, DN, SL_PASS_DGRAD, 2048, 464.6},
    {PE, GU, SL_PASS_WGRAD, 2048, 492.7}, {PE, DN, SL_PASS_WGRAD, 2048, 368.1},
    {LN, GU, SL_PASS_FWD, 256, 199.5},    {LN, DN, SL_PASS_FWD, 256, 101.8},
    {LN, GU, SL_PASS_DGRAD, 256, 205.8},  {LN, DN, SL_PASS_DGRAD, 256, 103.4},
    {LN, GU, SL_PASS_WGRAD, 256, 165.7},  {LN, DN, SL_PASS_WGRAD, 256, 104.4},
    {LN, GU, SL_PASS_FWD, 512, 373.6},    {LN, DN, SL_PASS_FWD, 512, 206.6},
    {LN, GU, SL_PASS_DGRAD, 512, 329.8},  {LN, DN, SL_PASS_DGRAD, 512, 207.3},
    {LN, GU, SL_PASS_WGRAD, 512, 289.5},  {LN, DN, SL_PASS_WGRAD, 512, 203.8},
    {LN, GU, SL_PASS_FWD, 1024, 509.2},   {LN, DN, SL_PASS_FWD, 1024, 408.4},
    {LN, GU, SL_PASS_DGRAD, 1024, 528.7}, {LN, DN, SL_PASS_DGRAD, 1024, 366.2},
    {LN, GU, SL_PASS_WGRAD, 1024, 475.2}, {LN, DN, SL_PASS_WGRAD, 1024, 376.5},
    {LN, GU, SL_PASS_FWD, 2048, 663.7},   {LN, DN, SL_PASS_FWD, 2048, 562.7},
    {LN, GU, SL_PASS_DGRAD, 2048, 652.2}, {LN, DN, SL_PASS_DGRAD, 2048, 521.0},
    {LN, GU, SL_PASS_WGRAD, 2048, 640.8}, {LN, DN, SL_PASS_WGRAD, 2048, 530.7},
    {WG, GU, SL_PASS_FWD, 256, 535.5},    {WG, DN, SL_PASS_FWD, 256, 489.5},
    {WG, GU, SL_PASS_DGRAD, 256, 526.6},  {WG, DN, SL_PASS_DGRAD, 256, 514.7},
    {WG, GU, SL_PASS_WGRAD, 256, 144.7},  {WG, DN, SL_PASS_WGRAD, 256, 139.9},
    {WG, GU, SL_PASS_WGRAD, 512, 253.1},  {WG, DN, SL_PASS_WGRAD, 512, 242.4},
    {WG, GU, SL_PASS_WGRAD, 1024, 400.2}, {WG, DN, SL_PASS_WGRAD, 1024, 380.3},
    {WG, GU, SL_PASS_FWD, 2048, 687.9},   {WG, DN, SL_PASS_FWD, 2048, 637.5},
    {WG, GU, SL_PASS_DGRAD, 2048, 659.4}, {WG, DN, SL_PASS_DGRAD, 2048, 698.0},
    {WG, GU, SL_PASS_WGRAD, 2048, 520.2}, {WG, DN, SL_PASS_WGRAD, 2048, 525.4},
};

/* H200, 2026-11-28, sluice's Hopper attention kernel (sm90), deterministic. B = 1: attn_bench
 * "sm90 1 S 32 4 D" rows, fwd and bwd TFLOP/s (bench/results/h200-2026-11-28/call1/
 * attn_bench.out). B = 8: no attn_bench row; measured inside the EP-8 profile (profile_ep8.json,
 * gpu_train_bench --profile --batch 8): "attention kernel fwd" 12.024 ms and "attention kernel
 * bwd" 37.804 ms for 5 calls of 1.0995e12 (fwd) and 2.7488e12 (bwd) FLOPs. */
static const sl_rate_attention h200_attention[] = {
    {1, 4096, 128, 483.46, 427.00}, {1, 32768, 128, 630.15, 448.92}, {1, 4096, 64, 343.30, 317.39},
    {1, 32768, 64, 495.61, 370.22}, {8, 4096, 128, 457.23, 363.55},
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
    .rates_source = "measured on an H200, 2026-11-28 (gpu_train_bench --profile, attn_bench, "
                    "expert_gemm_bench; 512 and 1,024 rows per expert: 2026-11-26)",
    /* The 4 x 1 x 4096 profile (bench/results/h200-2026-11-28/call1/profile.json):
     * gpu_train_bench's "bf16 GEMM peak" (cublasGemmEx 8192^3, median of 11), the larger of its
     * two lines: 821.5 before the steps (820.1 after). 2026-11-26 measured 792.9 and 802.7,
     * 2026-11-27 815.7: the peak varies by a few % between calls. */
    .dense_tflops = 821.5,
    /* "gradient reduction + norm" row on one GPU: a norm pass over the fp32 gradients of the
     * dense parameters (4 bytes each; the routed experts' squares come from the wgmma weight
     * gradient's epilogue): 8.701e8 x 4 B / 0.856 ms = 4065 GB/s (2026-11-26, every
     * parameter read: 4187). */
    .stream_gbs = 4064.6,
    /* "optimizer: AdamW (+ router bias)" row: 6.306e9 parameters x 30 B (fp32 master, m, v
     * read and written, fp32 gradient read, bf16 copy written) / 47.876 ms = 3951 GB/s (the
     * EP-8 run: 3.780e9 x 30 B / 28.716 ms = 3949); adamw_full measured 3.96 TB/s for AdamW
     * alone at the same count in the same call. */
    .adamw_gbs = 3951.4,
    /* Everything not modelled on its own (norms, q/gate split and RoPE, router, SwiGLU,
     * permute/unpermute, residual adds, embedding, idle and host waits): the sum of those rows
     * of the 4 x 1 x 4096 profile, 32.86 ms, over 9 layers x 16384 tokens = 222.9 ns per token
     * and layer (2026-11-26: 301.6, before the row paths; the EP-8 profile: 185.4, larger
     * kernels). */
    .other_ns_token_layer = 222.9,
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
