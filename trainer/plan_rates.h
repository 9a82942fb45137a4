/*
 * trainer/plan_rates.h - the hardware figures `sluice plan` times a step with: per GPU kind,
 * datasheet figures (memory, links, peak) and per-component rates (dense GEMM, the experts'
 * grouped GEMMs by rows per expert, attention by sequence length, memory-bound passes), each
 * with where it came from. The numbers live in trainer/plan_rates.c; docs/plan.md, "Rates",
 * says which bench output line feeds which number and how to update them from a re-measurement.
 */
#ifndef SL_TRAINER_PLAN_RATES_H
#define SL_TRAINER_PLAN_RATES_H

#include <stdbool.h>

/* The two GEMMs of a routed expert (SwiGLU): gate_up [rows, h] x [h, 2 Im] and down
 * [rows, Im] x [Im, h], and the three passes of each. */
typedef enum { SL_EXPERT_GATE_UP, SL_EXPERT_DOWN } sl_expert_gemm;
typedef enum { SL_PASS_FWD, SL_PASS_DGRAD, SL_PASS_WGRAD } sl_gemm_pass;
/* How the experts' GEMMs are issued (moe/kernels_cuda.h, SLUICE_EXPERT_GEMM): one grouped
 * cuBLAS call per GEMM, one cublasGemmEx per expert on the stream, one per expert spread over
 * the backend's 4 side lanes, or sluice's own Hopper grouped GEMM (wgmma, one launch per call;
 * bf16 on compute capability 9.x only). */
typedef enum {
    SL_EXPERTS_GROUPED,
    SL_EXPERTS_PER_EXPERT,
    SL_EXPERTS_LANES,
    SL_EXPERTS_WGMMA
} sl_expert_strategy;

/* Where the Hopper kernel does not apply (not compute capability 9.x, or fp32): mean rows per
 * expert from which the trainer's `auto` runs the bf16-into-fp32 weight gradient per expert on
 * the stream, and below which on the side lanes (moe/kernels_cuda.h, SL_EXPERT_GEMM_PAD_ROWS;
 * it pads there only where a guard allows, which the measured steps did not):
 * `--expert-gemm auto` times it so on such a plan. */
#define SL_EXPERTS_PER_EXPERT_ROWS 1024

/* The strategy's name as SLUICE_EXPERT_GEMM and the plan's output spell it: "grouped",
 * "per-expert", "lanes", "wgmma". */
const char *sl_expert_strategy_name(sl_expert_strategy s);

/* One measured expert GEMM: strategy, GEMM, pass, rows per expert, TFLOP/s. */
typedef struct {
    sl_expert_strategy strategy;
    sl_expert_gemm gemm;
    sl_gemm_pass pass;
    double rows_per_expert, tflops;
} sl_rate_expert;

/* One measured attention kernel call: micro-batch B, sequence S, head dim D; forward and
 * backward TFLOP/s counted as attn_bench counts them (forward 4 B H D S^2/2, backward 2.5x). */
typedef struct {
    int batch, seq, head_dim;
    double fwd_tflops, bwd_tflops;
} sl_rate_attention;

typedef struct sl_plan_gpu sl_plan_gpu;
struct sl_plan_gpu {
    const char *name;  /* the --gpu value: "h100", "h200" */
    const char *label; /* "H100 SXM" */
    /* datasheet (or, where said, measured) figures: the defaults of the plan's options */
    double peak_tflops; /* dense bf16 tensor-core peak, datasheet */
    double memory_gib;  /* --gpu-memory */
    double hbm_gbs;     /* memory bandwidth, datasheet */
    double nvlink_gbs;  /* per direction */
    double ib_gbs;      /* per direction */
    int gpus_per_node;
    /* Compute capability x 10 (90: Hopper, where the runtime's expert GEMM `auto` runs the
     * wgmma kernel for bf16, so the plan's `auto` times it there). */
    int compute_capability;
    /* Where the rates come from, one line for the output. */
    const char *rates_source;
    /* A GPU without a measurement of its own takes `base`'s rates, compute-bound ones x
     * compute_scale and memory-bound ones x memory_scale (ratios of datasheet figures). */
    const sl_plan_gpu *base;
    double compute_scale, memory_scale;
    /* The rates (base == NULL only). */
    double dense_tflops;         /* cuBLAS bf16 GEMM, fp32 accumulation */
    double stream_gbs;           /* one pass reading fp32 gradients (gradient norm) */
    double adamw_gbs;            /* AdamW's 30 bytes per parameter per step */
    double other_ns_token_layer; /* everything not modelled on its own, per token and layer */
    const sl_rate_expert *expert;
    int n_expert;
    const sl_rate_attention *attention;
    int n_attention;
};

/* The GPU kinds the plan knows, by --gpu name (case-insensitive); NULL if unknown. */
const sl_plan_gpu *sl_plan_gpu_find(const char *name);
/* The default GPU (H100 SXM) and a comma-separated list of the known names, for messages. */
const sl_plan_gpu *sl_plan_gpu_default(void);
const char *sl_plan_gpu_names(void);

/* The rates of `g` (base rates scaled where g has none of its own). */
double sl_rate_dense_tflops(const sl_plan_gpu *g);
double sl_rate_stream_gbs(const sl_plan_gpu *g);
double sl_rate_adamw_gbs(const sl_plan_gpu *g);
double sl_rate_other_ns(const sl_plan_gpu *g);
/* TFLOP/s of one expert GEMM pass at `rows_per_expert` rows per expert: interpolated in
 * log(rows) between the measured points of that strategy, GEMM and pass, held constant beyond
 * the first and last. */
double sl_rate_expert_tflops(const sl_plan_gpu *g, sl_expert_strategy s, sl_expert_gemm gemm,
                             sl_gemm_pass pass, double rows_per_expert);
/* Attention TFLOP/s (forward, or backward if bwd) for micro-batch B, sequence S, head dim D:
 * the measurements of the nearest head dim, interpolated in log(S) at each measured batch,
 * then in log(B) between the two nearest batches; constant beyond the measured ends. */
double sl_rate_attention_tflops(const sl_plan_gpu *g, bool bwd, int batch, int seq, int head_dim);

#endif
