/*
 * trainer/plan.h - what a training run needs per GPU before it is launched (`sluice plan`,
 * docs/plan.md): memory, communication, FLOPs, an estimated step time and MFU, and whether it
 * fits. Computed from the configuration alone (no model is allocated); parameter, FLOP and
 * activation counts come from model/counts.h.
 */
#ifndef SL_TRAINER_PLAN_H
#define SL_TRAINER_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/counts.h"
#include "trainer/config.h"
#include "trainer/plan_rates.h"

/* The hardware defaults are per GPU kind in trainer/plan_rates.c (default: H100 SXM, 8 per
 * node). --efficiency's default, for the flat model only (all FLOPs at one share of the peak,
 * the "practical" GEMM factor of bench/perf_model.py; an assumption, not a measurement): */
#define SL_PLAN_EFFICIENCY    0.75
#define SL_PLAN_GPUS_PER_NODE 8 /* HGX/DGX H100 and H200 */

/* What to plan. 0 / NULL / a negative value means "the config's" where noted. */
typedef struct {
    int gpus;              /* ranks, one GPU each (required) */
    int ep;                /* expert parallelism; 0: parallel.expert_parallel */
    int zero1;             /* -1: parallel.zero1; 0 off; 1 on */
    int seq_len;           /* 0: the stage's training.seq_len */
    int micro_batch;       /* 0: the stage's training.micro_batch_size */
    const char *recompute; /* NULL: training.recompute; "none" | "attention" | "layer" */
    int layers;            /* 0: model.num_hidden_layers; else the first `layers` layers */
    int64_t global_batch;  /* 0: the stage's training.global_batch_tokens */
    const char *gpu;       /* NULL: H100 SXM; a name of sl_plan_gpu_find ("h100", "h200") */
    /* As SLUICE_EXPERT_GEMM: "auto" (NULL): on a compute capability 9.x GPU in bf16 the
     * Hopper kernel (wgmma) for every pass; elsewhere (other GPUs, fp32) the forward and data
     * gradient grouped, the weight gradient per expert on the lanes below
     * SL_EXPERTS_PER_EXPERT_ROWS rows per expert and on the stream from there; "grouped" (its
     * weight gradient per expert on the stream, as cuBLAS runs it); "per-expert"; "lanes";
     * "wgmma" (where it does not apply, auto's cuBLAS paths, as the runtime) */
    const char *expert_gemm;
    /* NULL: training.defer_expert_wgrad; "auto" | "on" | "off", as that key */
    const char *defer_wgrad;
    int wgrad_group;  /* 0: training.expert_wgrad_group; else 2 to 4, as that key */
    const char *park; /* NULL: training.park_expert_rows; "auto" | "rows" | "tokens", as it */
    /* 0: the GPU's (plan_rates.c). gpu_tflops other than the GPU's peak scales every
     * compute rate by gpu_tflops / peak. */
    double gpu_memory_gib, gpu_tflops, nvlink_gbs, ib_gbs;
    int gpus_per_node;
    /* efficiency > 0: the flat model, all FLOPs at gpu_tflops x efficiency, instead of the
     * per-component rates; 0: the rates (efficiency stays SL_PLAN_EFFICIENCY in the plan,
     * for tools that want a flat rate) */
    double efficiency;
    /* The CPU backend's ranks (sluice train's host memory check): training.precision "auto"
     * is fp32 there, and no GPU kernel's rule (the Hopper expert GEMMs' single pass) applies.
     * The memory figures are then host bytes; the GPU's are the request's as ever. */
    bool host;
} sl_plan_request;

/* One component of the estimated single-GPU step (the compute part of t_step): its name, the
 * gpu_train_bench --profile regions it stands for, its FLOPs (0 for memory-bound ones) and
 * seconds per optimizer step. */
typedef struct {
    const char *name;
    const char *regions;
    double flops, seconds;
} sl_plan_part;
#define SL_PLAN_MAX_PARTS 14

/* Fills a request with "the GPU's" and "the config's" for everything. */
void sl_plan_request_defaults(sl_plan_request *r);

typedef struct {
    /* what was planned */
    char stage[32];    /* the planned stage (the one with the most tokens per micro-batch) */
    int n_stages;      /* training stages in the config */
    int gpus, ep, edp; /* edp = gpus / ep: ranks holding the same experts */
    int gpus_per_node, nodes;
    bool zero1;
    sl_memory_mode mode;
    bool host;     /* the request's host: CPU-backend ranks, their memory host bytes */
    int act_bytes; /* 2 (bf16) or 4 (fp32): training.precision, "auto" = bf16 on a GPU */
    int seq_len, micro_batch;
    int64_t micro_tokens;        /* seq_len * micro_batch */
    int64_t global_batch_tokens; /* per optimizer step, all GPUs */
    int accum;                   /* micro-batches per GPU per step */
    /* parameters */
    int64_t params_total, params_active, params_expert; /* whole model */
    int64_t gpu_params_expert, gpu_params_dense, gpu_params;
    /* bytes per GPU */
    double weights_compute;       /* bf16 compute copy (0 in fp32) */
    double master;                /* fp32 master weights */
    double grads;                 /* fp32 gradients */
    double adam_full, adam_zero1; /* AdamW m and v without and with ZeRO-1 */
    double state;                 /* the four above, with the chosen ZeRO-1 */
    sl_activation_bytes act[3];   /* by memory mode: none, attention, layer */
    /* training.defer_expert_wgrad as the runtime would decide it here ("auto": bf16 on a
     * compute capability 9.x GPU kind, two or more micro-batches, recompute not "layer", not
     * with expert parallelism and parallel.overlap_moe) and
     * the expert rows it parks (sl_model_deferred_wgrad_bytes for each micro-batch of a group
     * but its last; 0 when off); wgrad_group: the micro-batches whose expert weight gradients
     * the trainer computes together (training.expert_wgrad_group, at most accum; 1 when off) */
    bool defer_wgrad;
    int wgrad_group;
    /* training.park_expert_rows, and whether the group's parked micro-batches keep tokens
     * (sl_park_tokens_decide; rows with expert parallelism): deferred counts them so */
    char park_expert_rows[8];
    bool park_tokens;
    /* the group is automatic (training.expert_wgrad_group 0 and no --wgrad-group): it follows
     * park_expert_rows (sl_wgrad_group_decide), so advice that changes that key names the group */
    bool wgrad_auto;
    double deferred;
    double total;  /* state + act[mode].total + deferred */
    double usable; /* 92% of the GPU memory - 2 GiB */
    bool fits;
    char advice[512]; /* when it does not fit: which knob(s) would make it fit */
    /* communication per GPU per step, bytes sent */
    double a2a_bytes, a2a_nvlink_bytes, a2a_ib_bytes; /* expert exchanges */
    double grad_dense_payload, grad_expert_payload;   /* fp32 gradients reduced */
    /* ring all-reduce of both groups, or with ZeRO-1 reduce-scatter (half the bytes) */
    double grad_bytes;
    double ag_bytes;           /* ZeRO-1 all-gather of fp32 weights */
    bool dense_ib, expert_ib;  /* whether a group crosses nodes */
    int moe_layers, exchanges; /* expert exchanges per MoE layer and micro-batch */
    /* compute and time */
    double flops_token, flops_step_gpu, flops_step_total; /* model FLOPs */
    double hw_flops_step_gpu;                             /* with recomputation */
    /* Expert exchange overlap (parallel.overlap_moe): the FLOPs of the experts' weight
     * gradients per MoE layer and micro-batch (balanced routing), which run during that
     * layer's dispatch backward; one exchange's time; the all-to-all time they hide per step. */
    bool overlap_moe;
    double expert_dw_flops, t_a2a_one, t_a2a_hidden;
    double t_compute, t_a2a, t_grad, t_grad_exposed, t_ag, t_step; /* seconds */
    double tokens_per_s, mfu;
    /* hardware used */
    const sl_plan_gpu *gpu; /* the GPU kind whose defaults and rates were used */
    double gpu_memory_gib, gpu_tflops, nvlink_gbs, ib_gbs, efficiency;
    bool flat; /* the flat model (--efficiency) instead of the per-component rates */
    /* the per-component estimate (trainer/plan_time.c): t_compute is their sum */
    int layers;              /* decoder layers planned */
    double rows_per_expert;  /* routed rows per local expert and micro-batch (balanced) */
    const char *expert_gemm; /* the --expert-gemm strategy planned: "auto", "grouped", ... */
    /* how each pass of the experts' GEMMs is timed (sl_gemm_pass: fwd, data grad, weight grad) */
    sl_expert_strategy expert_path[3];
    /* the experts' weight gradients timed as one pass per group of wgrad_group micro-batches
     * (where the Hopper kernel runs a group in one pass) */
    bool wgrad_grouped;
    int n_parts;
    sl_plan_part parts[SL_PLAN_MAX_PARTS];
} sl_plan;

/* Computes the plan of cfg under r. On bad input (EP not dividing the GPUs or the experts,
 * a global batch that the GPUs and micro-batches do not divide, an unknown recompute mode)
 * writes a message naming the flag or key into err and returns -1. */
int sl_plan_compute(const sl_config *cfg, const sl_plan_request *r, sl_plan *p, char *err,
                    size_t errlen);

#endif
