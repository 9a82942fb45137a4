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
/* How sl_cuda_adamw walks memory (the forms of adamw.cu's header: "coalesced", the default,
 * "plain", "stream", "wide"; every form writes the same bits). The process-wide default comes
 * from the environment variable SLUICE_ADAMW (anything else stops the run); this overrides it.
 * "streams", for bench/adamw_bench.c only, makes the same memory accesses as "coalesced"
 * without AdamW's arithmetic (its results are not AdamW's). Returns false, changing nothing,
 * for an unknown name. */
bool sl_cuda_adamw_set_form(const char *name);

#ifdef __cplusplus
}
#endif

#endif
