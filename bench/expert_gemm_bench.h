/*
 * bench/expert_gemm_bench.h - what bench/expert_gemm_bench.c (the timings, --check) and
 * bench/expert_gemm_ablate.c (--ablate) share: the options, one MoE layer's expert GEMMs and
 * their tensors.
 */
#ifndef SL_BENCH_EXPERT_GEMM_BENCH_H
#define SL_BENCH_EXPERT_GEMM_BENCH_H

#include <stdbool.h>
#include <stdint.h>

#include "core/backend.h"
#include "core/tensor.h"

enum { NSTRATEGIES = 7 };

typedef struct {
    int experts, hidden, ffn, reps;
    int rows[8], nrows;
    sl_dtype dtype;
    bool uniform, check, ablate;
    int strategies[NSTRATEGIES], nstrategies; /* all of k_all_strategies by default */
} opts;

/* The six GEMMs of one MoE layer's experts: tensors and counts. */
typedef struct {
    /* counts2: counts reversed, the second micro-batch of a group (sl_op_grouped_matmul_dw_segments
     * over counts, counts2, counts, ...) */
    int64_t n, *counts, *counts2;
    int e, h, f;
    sl_tensor *x, *wgu, *wd, *gu, *mid, *y, *dy, *dmid, *dgu, *dx, *gwgu, *gwd;
} layer;

/* The GEMMs run_gemm runs: the six of a micro-batch (0-5: gate_up and down forward, their data
 * gradients, their weight gradients), the two weight gradients over a pair of micro-batches
 * (6, 7: sl_op_grouped_matmul_dw_segments over two), the first projection with its activation
 * (8: sl_op_grouped_matmul_swiglu, what a training step runs in place of 0 and the
 * activation), and the two weight gradients over four micro-batches (9, 10: training.
 * expert_wgrad_group 4). */
enum { SIX = 6, GEMM_SWIGLU = 8, GEMMS = 11 };
extern const char *const k_gemm_names[GEMMS];
static inline bool gemm_is_dw(int i) {
    return (i >= 4 && i < GEMM_SWIGLU) || i > GEMM_SWIGLU;
}

/* The layer's tensors on `be` for `rows` per expert on average (o's widths, spread and dtype). */
void layer_init(layer *L, sl_backend *be, const opts *o, int rows);
void layer_free(layer *L);
/* Runs GEMM i of the layer once (the weight gradients add to dW: beta 1). */
void run_gemm(layer *L, int i);
/* GEMM i's output (the fused SwiGLU's h) and its FLOPs. */
sl_tensor *gemm_output(layer *L, int i);
double gemm_flops(const layer *L, int i);
/* Host copy of a tensor as fp32 (converted on the device first; the caller frees it). */
float *to_host_f32(sl_tensor *t);
/* The median seconds of `reps` calls of GEMM i after two warm-up calls, each timed between
 * two sl_backend_synchronize calls. */
double time_gemm(sl_backend *be, layer *L, int i, int reps);

/* --ablate (bench/expert_gemm_ablate.c): the Hopper kernel's GEMMs at `rows` per expert with
 * parts left out (sl_cuda_expert_gemm_set_ablation). Returns 0; 1 if a GEMM did not run on the
 * kernel; 77 if none did (not a Hopper GPU). */
int ablate(sl_backend *be, const opts *o, int rows);
/* Then once: checks that each switch did what it says (at o's first shape where that is
 * small, else 64 rows per expert). Returns 0, or 1 if one failed. */
int ablate_check(sl_backend *be, const opts *o);

#endif
