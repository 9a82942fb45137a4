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

/* Hardware defaults: one H100 SXM per rank, 8 per node (docs/plan.md names the sources). */
#define SL_PLAN_GPU_TFLOPS    989.0 /* dense bf16, datasheet */
#define SL_PLAN_GPU_MEMORY    80.0  /* GiB, the "80GB" of the datasheet taken as GiB */
#define SL_PLAN_NVLINK_GBS    450.0 /* GB/s per direction: half the datasheet's 900 GB/s */
#define SL_PLAN_IB_GBS        50.0  /* GB/s per direction: one 400 Gb/s NDR port per GPU */
#define SL_PLAN_EFFICIENCY    0.75  /* share of the peak the matmuls reach (performance.md) */
#define SL_PLAN_GPUS_PER_NODE 8

/* What to plan. 0 / NULL / a negative value means "the config's" where noted. */
typedef struct {
    int gpus;              /* ranks, one GPU each (required) */
    int ep;                /* expert parallelism; 0: parallel.expert_parallel */
    int zero1;             /* -1: parallel.zero1; 0 off; 1 on */
    int seq_len;           /* 0: the stage's training.seq_len */
    int micro_batch;       /* 0: the stage's training.micro_batch_size */
    const char *recompute; /* NULL: training.recompute; "none" | "attention" | "layer" */
    double gpu_memory_gib, gpu_tflops, nvlink_gbs, ib_gbs, efficiency;
    int gpus_per_node;
} sl_plan_request;

/* Fills a request with the hardware defaults above and "the config's" for the rest. */
void sl_plan_request_defaults(sl_plan_request *r);

typedef struct {
    /* what was planned */
    char stage[32];    /* the planned stage (the one with the most tokens per micro-batch) */
    int n_stages;      /* training stages in the config */
    int gpus, ep, edp; /* edp = gpus / ep: ranks holding the same experts */
    int gpus_per_node, nodes;
    bool zero1;
    sl_memory_mode mode;
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
    double total;                 /* state + act[mode].total */
    double usable;                /* 92% of the GPU memory - 2 GiB */
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
    double gpu_memory_gib, gpu_tflops, nvlink_gbs, ib_gbs, efficiency;
} sl_plan;

/* Computes the plan of cfg under r. On bad input (EP not dividing the GPUs or the experts,
 * a global batch that the GPUs and micro-batches do not divide, an unknown recompute mode)
 * writes a message naming the flag or key into err and returns -1. */
int sl_plan_compute(const sl_config *cfg, const sl_plan_request *r, sl_plan *p, char *err,
                    size_t errlen);

#endif
