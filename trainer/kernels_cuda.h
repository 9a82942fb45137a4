/* trainer/kernels_cuda.h - the CUDA kernels of trainer/ (listed in backends/cuda.cu; semantics:
 * core/ops.h, conventions: docs/cuda.md). C linkage: the launchers fill the C table sl_ops_i. */
#ifndef SL_TRAINER_KERNELS_CUDA_H
#define SL_TRAINER_KERNELS_CUDA_H

#include "core/backend_impl.h" /* C linkage of its own */

#ifdef __cplusplus
extern "C" {
#endif

/* adamw.cu */
void sl_cuda_adamw(void *ctx, sl_tensor *p, const sl_tensor *g, sl_tensor *m, sl_tensor *v,
                   sl_tensor *p_copy, const sl_adamw_params *hp);

#ifdef __cplusplus
}
#endif

#endif
