/* moe/kernels_cpu.h - the CPU kernels of moe/ (listed in backends/cpu.c). */
#ifndef SL_MOE_KERNELS_CPU_H
#define SL_MOE_KERNELS_CPU_H

#include "core/backend_impl.h"

/* grouped_matmul_cpu.c */
/* The counts may be on the "device" (host memory here): read where they are. */
bool sl_cpu_grouped_counts_on_device(void *ctx, sl_dtype dt, int64_t r, int64_t s, int groups);
void sl_cpu_grouped_matmul(void *ctx, sl_tensor *c, const sl_tensor *a, const sl_tensor *b,
                           const sl_group_counts *counts, int groups, bool trans_b, float beta);
void sl_cpu_grouped_matmul_dw(void *ctx, sl_tensor *dw, const sl_tensor *dy, const sl_tensor *x,
                              const sl_group_counts *counts, int groups, float beta,
                              sl_tensor *sumsq);
void sl_cpu_grouped_matmul_dw_segments(void *ctx, sl_tensor *dw, const sl_dw_segment *segs,
                                       int nseg, int groups, float beta, sl_tensor *sumsq);
void sl_cpu_grouped_matmul_swiglu(void *ctx, sl_tensor *h, sl_tensor *gu, const sl_tensor *a,
                                  const sl_tensor *b, const sl_group_counts *counts, int groups);

/* How the grouped GEMM spreads over threads. AUTO (the default) picks per call from the group
 * sizes; the others force one strategy (for benchmarks and tests). Every strategy writes each
 * output element from exactly one GEMM, so results do not depend on the choice. */
typedef enum {
    SL_GGEMM_AUTO = 0,
    SL_GGEMM_SERIAL_GROUPS = 1,  /* groups in order, each GEMM uses all threads */
    SL_GGEMM_PARALLEL_GROUPS = 2 /* OpenMP over groups (largest first), 1-thread GEMMs */
} sl_ggemm_mode;
void sl_cpu_grouped_matmul_set_mode(sl_ggemm_mode mode);

/* router_cpu.c */
void sl_cpu_router_fwd(void *ctx, sl_tensor *probs, sl_tensor *topk_idx, sl_tensor *topk_w,
                       sl_tensor *stats, const sl_tensor *logits, const sl_tensor *bias,
                       bool norm_topk);
void sl_cpu_router_bwd(void *ctx, sl_tensor *dlogits, const sl_tensor *dtopk_w,
                       const sl_tensor *probs, const sl_tensor *topk_idx, const sl_tensor *topk_w,
                       const sl_tensor *logits, const sl_tensor *lbl_grad, float z_scale,
                       bool norm_topk);

/* permute_cpu.c */
void sl_cpu_moe_sort(void *ctx, sl_tensor *counts, sl_tensor *sorted_token, sl_tensor *slot_pos,
                     const sl_tensor *topk_idx);
void sl_cpu_moe_counts(void *ctx, sl_tensor *acc, sl_tensor *freq, const sl_tensor *counts,
                       float scale);
void sl_cpu_gather_rows(void *ctx, sl_tensor *dst, const sl_tensor *src, const sl_tensor *idx);
void sl_cpu_scatter_add_rows(void *ctx, sl_tensor *dst, const sl_tensor *src, const sl_tensor *idx);
void sl_cpu_gather_add_rows(void *ctx, sl_tensor *dst, const sl_tensor *src, const sl_tensor *pos,
                            int k, float beta);
void sl_cpu_moe_combine(void *ctx, sl_tensor *y, const sl_tensor *x, const sl_tensor *slot_pos,
                        const sl_tensor *w, const sl_tensor *res);
void sl_cpu_moe_combine_bwd(void *ctx, sl_tensor *dx, sl_tensor *dw, const sl_tensor *dy,
                            const sl_tensor *x, const sl_tensor *slot_pos, const sl_tensor *w);

/* swiglu_cpu.c */
void sl_cpu_swiglu_fwd(void *ctx, sl_tensor *h, const sl_tensor *gu);
void sl_cpu_swiglu_bwd(void *ctx, sl_tensor *dgu, const sl_tensor *dh, const sl_tensor *gu);
void sl_cpu_rowgate_fwd(void *ctx, sl_tensor *y, const sl_tensor *x, const sl_tensor *s);
void sl_cpu_rowgate_bwd(void *ctx, sl_tensor *dx, sl_tensor *ds, const sl_tensor *dy,
                        const sl_tensor *x, const sl_tensor *s);

#endif
