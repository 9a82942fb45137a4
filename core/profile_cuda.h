/*
 * core/profile_cuda.h - the CUDA backend's marks and NVTX ranges (core/profile_cuda.cu), the
 * optional profiling entries of its sl_backend_i (core/backend_impl.h).
 */
#ifndef SL_PROFILE_CUDA_H
#define SL_PROFILE_CUDA_H

#ifdef __cplusplus
extern "C" {
#endif

void *sl_cuda_mark_new(void *ctx);
void sl_cuda_mark_record(void *ctx, void *mark);
double sl_cuda_mark_ms(void *ctx, void *a, void *b);
void sl_cuda_mark_free(void *ctx, void *mark);
void sl_cuda_range_push(void *ctx, const char *name);
void sl_cuda_range_pop(void *ctx);

#ifdef __cplusplus
}
#endif

#endif
