/* moe/kernels_cuda.h - the CUDA kernels of moe/ (listed in backends/cuda.cu; semantics: core/ops.h,
 * conventions: docs/cuda.md). C linkage: the launchers fill the C table sl_ops_i. */
#ifndef SL_MOE_KERNELS_CUDA_H
#define SL_MOE_KERNELS_CUDA_H

#include "core/backend_impl.h" /* C linkage of its own */

#ifdef __cplusplus
extern "C" {
#endif

/* grouped_matmul.cu */
void sl_cuda_grouped_matmul(void *ctx, sl_tensor *c, const sl_tensor *a, const sl_tensor *b,
                            const int64_t *counts, int groups, bool trans_b, float beta);
void sl_cuda_grouped_matmul_dw(void *ctx, sl_tensor *dw, const sl_tensor *dy, const sl_tensor *x,
                               const int64_t *counts, int groups);

/* router.cu */
void sl_cuda_router_fwd(void *ctx, sl_tensor *probs, sl_tensor *topk_idx, sl_tensor *topk_w,
                        sl_tensor *stats, const sl_tensor *logits, const sl_tensor *bias,
                        bool norm_topk);
void sl_cuda_router_bwd(void *ctx, sl_tensor *dlogits, const sl_tensor *dtopk_w,
                        const sl_tensor *probs, const sl_tensor *topk_idx, const sl_tensor *topk_w,
                        const sl_tensor *logits, const sl_tensor *lbl_grad, float z_scale,
                        bool norm_topk);

/* permute.cu */
void sl_cuda_moe_sort(void *ctx, sl_tensor *counts, sl_tensor *sorted_token, sl_tensor *slot_pos,
                      const sl_tensor *topk_idx);
void sl_cuda_gather_rows(void *ctx, sl_tensor *dst, const sl_tensor *src, const sl_tensor *idx);
void sl_cuda_scatter_add_rows(void *ctx, sl_tensor *dst, const sl_tensor *src,
                              const sl_tensor *idx);
void sl_cuda_moe_combine(void *ctx, sl_tensor *y, const sl_tensor *x, const sl_tensor *slot_pos,
                         const sl_tensor *w);
void sl_cuda_moe_combine_bwd(void *ctx, sl_tensor *dx, sl_tensor *dw, const sl_tensor *dy,
                             const sl_tensor *x, const sl_tensor *slot_pos, const sl_tensor *w);

/* swiglu.cu */
void sl_cuda_swiglu_fwd(void *ctx, sl_tensor *h, const sl_tensor *gu);
void sl_cuda_swiglu_bwd(void *ctx, sl_tensor *dgu, const sl_tensor *dh, const sl_tensor *gu);
void sl_cuda_rowgate_fwd(void *ctx, sl_tensor *y, const sl_tensor *x, const sl_tensor *s);
void sl_cuda_rowgate_bwd(void *ctx, sl_tensor *dx, sl_tensor *ds, const sl_tensor *dy,
                         const sl_tensor *x, const sl_tensor *s);

#ifdef __cplusplus
}
#endif

#endif
