/*
 * core/backend_cuda.cuh - what kernel launchers need from the CUDA backend (C++, .cu files
 * only; docs/cuda.md).
 *
 * Every launcher in sl_ops_i receives the backend context `ctx` first; these functions read
 * the stream, the cuBLAS handle and the backend's runtime services from it. Everything a
 * launcher queues goes on sl_cuda_stream(ctx): the backend has one stream, so operations are
 * ordered and scratch memory can be reused by the next operation without a synchronization.
 */
#ifndef SL_BACKEND_CUDA_CUH
#define SL_BACKEND_CUDA_CUH

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdbool.h>
#include <stddef.h>

/* The backend's compute stream (every kernel of it runs there), its cuBLAS handle (bound to
 * that stream) and its device's properties. */
cudaStream_t sl_cuda_stream(void *ctx);
cublasHandle_t sl_cuda_cublas(void *ctx);
const cudaDeviceProp *sl_cuda_props(void *ctx);
/* False when the backend was created with allow_nondeterministic (core/backend.h). */
bool sl_cuda_deterministic(void *ctx);

/* Per-backend objects owned by a concern above core (core knows nothing of their contents): an
 * object is set once, read by that concern's launchers, and destroyed with the backend (after
 * its stream finished) by the function given with it. SL_CUDA_EXT_ATTENTION: attention/'s kernel
 * choice and its cuDNN handle and plans (attention/attn_kernels.cu). */
enum { SL_CUDA_EXT_ATTENTION = 0, SL_CUDA_EXT_SLOTS = 1 };
void *sl_cuda_ext(void *ctx, int slot);
/* Replaces the object in `slot` (the previous one is destroyed first). */
void sl_cuda_set_ext(void *ctx, int slot, void *obj, void (*destroy)(void *obj));

/* Device scratch of at least `bytes`, valid for the calling operation: the next call may
 * return the same memory, which is safe because every operation runs on the one stream. Grows
 * (stream-ordered) when a larger size is asked for the first time, so steady-state training
 * allocates nothing. `slot` 0..5 gives independent buffers to an operation that needs several
 * (the attention kernels use all six: attention/gated_attn_sm90_bwd.cu, gated_attn_sm90.cuh). */
void *sl_cuda_scratch(void *ctx, int slot, size_t bytes);

/* Side lanes: up to SL_CUDA_LANES extra streams, each with a cuBLAS handle of its own (a
 * handle's workspace must not serve two streams at once), for independent pieces of one
 * operation that the one stream would run one after another although none fills the GPU: the
 * 128 small per-expert GEMMs of an MoE layer (moe/grouped_matmul.cu). sl_cuda_lanes_fork(ctx, n)
 * makes lanes 0..n-1 (n clamped to 1..SL_CUDA_LANES; returned) start after everything queued
 * on the stream so far; sl_cuda_lane_cublas(ctx, i) is lane i's handle (bound to its stream);
 * sl_cuda_lanes_join(ctx, n) makes the stream wait for the lanes' work, so that what follows
 * on the stream (and the memory it frees) is ordered after it. Work on a lane must not use
 * sl_cuda_scratch or sl_cuda_upload (ordered by the stream alone). Created on first use,
 * destroyed with the backend. */
enum { SL_CUDA_LANES = 4 };
int sl_cuda_lanes_fork(void *ctx, int n);
cublasHandle_t sl_cuda_lane_cublas(void *ctx, int lane);
void sl_cuda_lanes_join(void *ctx, int n);

/* Copies `bytes` of host memory to device memory valid for the calling operation (through a
 * pinned staging ring, asynchronously: the host buffer may be reused on return). For small
 * per-call arrays such as cuBLAS pointer arrays. Returns the device address. */
void *sl_cuda_upload(void *ctx, const void *host, size_t bytes);

/* Stop the run (sl_fatal) when a CUDA or cuBLAS call failed, naming the operation (the
 * sl_ops_i entry, e.g. "rmsnorm_fwd") and what was being done. */
void sl_cuda_check(cudaError_t e, const char *op, const char *what);
void sl_cublas_check(cublasStatus_t s, const char *op, const char *what);

/* Opts kernel K in to `bytes` of dynamic shared memory (op: the sl_ops_i entry, for errors)
 * when that is above the default 48 KiB and above what K was given before. The attribute is
 * per kernel and device and stays set (sluice drives one device per process and never resets
 * it), so the driver call happens once per kernel and size, not at every launch. */
template <auto K> void sl_cuda_raise_smem(size_t bytes, const char *op) {
    static size_t raised = 48 * 1024;
    if (bytes <= raised) return;
    sl_cuda_check(cudaFuncSetAttribute(K, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes),
                  op, "cudaFuncSetAttribute(MaxDynamicSharedMemorySize)");
    raised = bytes;
}

#endif
