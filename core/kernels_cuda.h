/* core/kernels_cuda.h - the CUDA kernels of core/ (listed in backends/cuda.cu; semantics:
 * core/ops.h, conventions: docs/cuda.md). C linkage: the launchers fill the C table sl_ops_i. */
#ifndef SL_CORE_KERNELS_CUDA_H
#define SL_CORE_KERNELS_CUDA_H

#include "core/backend_impl.h" /* C linkage of its own */

#ifdef __cplusplus
extern "C" {
#endif

/* elementwise.cu */
void sl_cuda_fill(void *ctx, sl_tensor *x, float value);
void sl_cuda_add(void *ctx, sl_tensor *y, const sl_tensor *a, const sl_tensor *b);
void sl_cuda_axpy(void *ctx, sl_tensor *y, const sl_tensor *x, float alpha);
void sl_cuda_scale(void *ctx, sl_tensor *x, float s);
void sl_cuda_convert(void *ctx, sl_tensor *dst, const sl_tensor *src);
void sl_cuda_sum(void *ctx, sl_tensor *out, const sl_tensor *x);
void sl_cuda_sumsq(void *ctx, sl_tensor *out, const sl_tensor *x);
/* out[0] (device fp32) += the sum of x[0 .. n) (squares: of their squares), as sum and sumsq
 * sum (double, a fixed order), rounded once: for kernels that add to an accumulator of their
 * own (moe/grouped_matmul*.cu). Uses scratch slot 0. */
void sl_cuda_reduce_add(void *ctx, float *out, const float *x, int64_t n, bool squares);
void sl_cuda_absmax(void *ctx, sl_tensor *out, const sl_tensor *x);

/* matmul.cu */
void sl_cuda_matmul(void *ctx, sl_tensor *c, const sl_tensor *a, const sl_tensor *b, bool trans_a,
                    bool trans_b, float alpha, float beta);

/* rmsnorm.cu */
void sl_cuda_rmsnorm_fwd(void *ctx, sl_tensor *y, sl_tensor *rstd, const sl_tensor *x,
                         const sl_tensor *w, float eps);
void sl_cuda_rmsnorm_bwd(void *ctx, sl_tensor *dx, sl_tensor *dw, const sl_tensor *dy,
                         const sl_tensor *dy_add, const sl_tensor *x, const sl_tensor *w,
                         const sl_tensor *rstd, const sl_tensor *dres);
/* The RMSNorm kernels' path (rmsnorm.cu's header): "rows" (the default, where a row fits a warp's
 * registers) or "windows" (everywhere); both write the same bits. The process-wide default comes
 * from the environment variable SLUICE_RMSNORM (anything else stops the run); this overrides it.
 * Returns false, changing nothing, for an unknown name. */
bool sl_cuda_rmsnorm_set_path(const char *name);

/* embedding.cu */
void sl_cuda_embedding_fwd(void *ctx, sl_tensor *out, const sl_tensor *ids, const sl_tensor *table);
void sl_cuda_embedding_bwd(void *ctx, sl_tensor *dtable, const sl_tensor *dout,
                           const sl_tensor *ids);

/* cross_entropy.cu */
void sl_cuda_cross_entropy(void *ctx, sl_tensor *losses, sl_tensor *dlogits,
                           const sl_tensor *logits, const sl_tensor *targets, float grad_scale);

#ifdef __cplusplus
}
#endif

#endif
