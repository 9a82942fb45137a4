/* core/kernels_cpu.h - the CPU kernels of core/ (listed in the CPU operation table,
 * backends/cpu.c). Semantics: the op of the same name in core/ops.h (sl_cpu_X implements
 * sl_op_X); the first argument is the backend's context. */
#ifndef SL_KERNELS_CPU_H
#define SL_KERNELS_CPU_H

#include "core/backend_impl.h"

void sl_cpu_fill(void *ctx, sl_tensor *x, float value);
void sl_cpu_add(void *ctx, sl_tensor *y, const sl_tensor *a, const sl_tensor *b);
void sl_cpu_axpy(void *ctx, sl_tensor *y, const sl_tensor *x, float alpha);
void sl_cpu_scale(void *ctx, sl_tensor *x, float s);
void sl_cpu_convert(void *ctx, sl_tensor *dst, const sl_tensor *src);
void sl_cpu_sum(void *ctx, sl_tensor *out, const sl_tensor *x);
void sl_cpu_sumsq(void *ctx, sl_tensor *out, const sl_tensor *x);
/* sumsq's sum of the squares of p[0 .. n) in double (its order: fixed chunks, threaded), for
 * kernels that add it to an accumulator of their own (moe/grouped_matmul_cpu.c). */
double sl_cpu_sumsq_f64(const float *p, int64_t n);
void sl_cpu_absmax(void *ctx, sl_tensor *out, const sl_tensor *x);

void sl_cpu_matmul(void *ctx, sl_tensor *c, const sl_tensor *a, const sl_tensor *b, bool trans_a,
                   bool trans_b, float alpha, float beta);

void sl_cpu_rmsnorm_fwd(void *ctx, sl_tensor *y, sl_tensor *rstd, const sl_tensor *x,
                        const sl_tensor *w, float eps);
void sl_cpu_rmsnorm_bwd(void *ctx, sl_tensor *dx, sl_tensor *dw, const sl_tensor *dy,
                        const sl_tensor *dy_add, const sl_tensor *x, const sl_tensor *w,
                        const sl_tensor *rstd, const sl_tensor *dres);

void sl_cpu_embedding_fwd(void *ctx, sl_tensor *out, const sl_tensor *ids, const sl_tensor *table);
void sl_cpu_embedding_bwd(void *ctx, sl_tensor *dtable, const sl_tensor *dout,
                          const sl_tensor *ids);
void sl_cpu_cross_entropy(void *ctx, sl_tensor *losses, sl_tensor *dlogits, const sl_tensor *logits,
                          const sl_tensor *targets, float grad_scale);

#endif
