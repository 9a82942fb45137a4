/*
 * core/profile_cuda.cu - the CUDA backend's profiling services (core/profile.h): marks are
 * CUDA events recorded on the backend's stream, so the time between two marks is the stream's
 * time between them, whether the device computed or waited for the host; regions also open
 * NVTX ranges of the same names for Nsight Systems. NVTX v3 is header-only (the toolkit's
 * nvtx3/nvToolsExt.h): without a tool attached its calls return at once.
 */
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>

#include "core/backend_cuda.cuh"
#include "core/profile_cuda.h"

extern "C" void *sl_cuda_mark_new(void *ctx) {
    (void)ctx;
    cudaEvent_t e;
    sl_cuda_check(cudaEventCreate(&e), "profile", "cudaEventCreate");
    return (void *)e;
}

extern "C" void sl_cuda_mark_record(void *ctx, void *mark) {
    sl_cuda_check(cudaEventRecord((cudaEvent_t)mark, sl_cuda_stream(ctx)), "profile",
                  "cudaEventRecord");
}

extern "C" double sl_cuda_mark_ms(void *ctx, void *a, void *b) {
    (void)ctx;
    float ms = 0.0f;
    sl_cuda_check(cudaEventElapsedTime(&ms, (cudaEvent_t)a, (cudaEvent_t)b), "profile",
                  "cudaEventElapsedTime");
    return (double)ms;
}

extern "C" void sl_cuda_mark_free(void *ctx, void *mark) {
    (void)ctx;
    (void)cudaEventDestroy((cudaEvent_t)mark);
}

extern "C" void sl_cuda_range_push(void *ctx, const char *name) {
    (void)ctx;
    nvtxRangePushA(name);
}

extern "C" void sl_cuda_range_pop(void *ctx) {
    (void)ctx;
    nvtxRangePop();
}
