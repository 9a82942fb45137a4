/*
 * core/cuda_common.cuh - what every CUDA kernel file includes (docs/cuda.md).
 *
 * The same .cu sources compile two ways: with nvcc for a GPU, and as C++ with g++ against the
 * CPU SIMT test double in emu/ (-DSLUICE_CUDA=EMULATED, which defines SLUICE_CUDA_EMULATED).
 * The two places where CUDA syntax is not C++ - the <<<...>>> launch and `extern __shared__`
 * - go through the macros below; everything else (__global__, __shared__, threadIdx,
 * __syncthreads, warp shuffles, atomics, cuda_bf16.h) is written as in any CUDA source and
 * the emulator's headers give it meaning on the CPU.
 *
 * Also here: the dtype helpers that let one kernel template serve fp32 and bf16 tensors
 * (loads and stores convert; arithmetic is always fp32), warp and block reductions, and the
 * launch check that names the operation when a launch fails.
 */
#ifndef SL_CUDA_COMMON_CUH
#define SL_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "core/backend_cuda.cuh"
#include "core/tensor_impl.h"

/* `#pragma unroll` for nvcc, where it keeps per-thread arrays indexed in unrolled loops in
 * registers (a dynamically indexed array would go to local memory, which the build rejects);
 * g++ (the emulated build) does not know the pragma. */
#ifdef SLUICE_CUDA_EMULATED
#define SL_UNROLL
#else
#define SL_UNROLL _Pragma("unroll")
#endif

/* SL_CHECK_ALIGNED(p, bytes): before a vector access of `bytes` bytes (uint4, float4, uint2,
 * float2) through a cast pointer. The GPU raises a misaligned-address fault where p is not a
 * multiple of `bytes`, which ends the process; the host's loads do not care, so the emulated
 * build checks here and stops the launch naming the site. Nothing on the GPU. */
#ifdef SLUICE_CUDA_EMULATED
#define SL_CHECK_ALIGNED(p, bytes)                                                                 \
    sl_emu_check_aligned((const void *)(p), (bytes), __FILE__, __LINE__)
#else
#define SL_CHECK_ALIGNED(p, bytes) ((void)0)
#endif

#ifdef SLUICE_CUDA_EMULATED
#include "sl_emu.h"
/* SL_LAUNCH(kernel, grid, block, shared_bytes, stream, args...): kernel<<<...>>>(args...).
 * `kernel` may be a template instance (k<float>) but must not contain a top-level comma: give
 * a multi-argument instance an alias first. */
#define SL_LAUNCH(kernel, grid, block, smem, stream, ...)                                          \
    sl_emu_launch(#kernel, kernel, grid, block, smem, stream, ##__VA_ARGS__)
/* SL_DYNAMIC_SMEM(type, name): `type *name` pointing at the block's dynamic shared memory
 * (the launch's shared_bytes), 16-byte aligned. */
#define SL_DYNAMIC_SMEM(type, name) type *name = (type *)sl_emu_dynamic_smem()
#else
#define SL_LAUNCH(kernel, grid, block, smem, stream, ...)                                          \
    kernel<<<(grid), (block), (smem), (stream)>>>(__VA_ARGS__)
#define SL_DYNAMIC_SMEM(type, name)                                                                \
    extern __shared__ __align__(16) unsigned char sl_dynamic_smem_[];                              \
    type *name = (type *)sl_dynamic_smem_
#endif

/* ---- dtypes: storage type T, fp32 arithmetic --------------------------------------------- */

typedef __nv_bfloat16 sl_bf16;

__device__ __forceinline__ float sl_ld(float x) {
    return x;
}
__device__ __forceinline__ float sl_ld(sl_bf16 x) {
    return __bfloat162float(x);
}
/* Converts an fp32 result to the storage type T (round to nearest even for bf16). */
template <typename T> __device__ __forceinline__ T sl_st(float x);
template <> __device__ __forceinline__ float sl_st<float>(float x) {
    return x;
}
template <> __device__ __forceinline__ sl_bf16 sl_st<sl_bf16>(float x) {
    return __float2bfloat16_rn(x);
}

/* SL_DISPATCH_FLOAT(dtype, T, body): runs `body` with T = float or sl_bf16 after the tensor
 * dtype; any other dtype is a programming error (core/ops.c checks dtypes before dispatch). */
#define SL_DISPATCH_FLOAT(dtype, T, ...)                                                           \
    do {                                                                                           \
        if ((dtype) == SL_BF16) {                                                                  \
            typedef sl_bf16 T;                                                                     \
            __VA_ARGS__;                                                                           \
        } else {                                                                                   \
            typedef float T;                                                                       \
            __VA_ARGS__;                                                                           \
        }                                                                                          \
    } while (0)

/* Typed data pointers of a tensor (device memory; only kernels dereference them). */
template <typename T> static inline T *sl_ptr(const sl_tensor *t) {
    return t ? (T *)t->data : (T *)0;
}

/* ---- reductions ---------------------------------------------------------------------------- */

/* Sum over the 32 lanes of a full warp; every lane gets the result. */
__device__ __forceinline__ float sl_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float sl_warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the
 * result. `scratch` is __shared__ float[32]. Contains two __syncthreads: call it from every
 * thread of the block. The summation order is fixed (lanes, then warps), so results are
 * deterministic. */
__device__ __forceinline__ float sl_block_sum(float v, float *scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = sl_warp_sum(v);
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < nwarps ? scratch[lane] : 0.0f;
    v = sl_warp_sum(v);
    __syncthreads(); /* scratch may be reused by the caller's next reduction */
    return v;
}
__device__ __forceinline__ float sl_block_max(float v, float *scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = sl_warp_max(v);
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < nwarps ? scratch[lane] : -INFINITY;
    v = sl_warp_max(v);
    __syncthreads();
    return v;
}

/* ---- launching ------------------------------------------------------------------------------ */

/* Grid size for n items at `per_block` items per block (at least 1 block; the kernel guards). */
static inline unsigned sl_blocks(int64_t n, int64_t per_block) {
    const int64_t b = (n + per_block - 1) / per_block;
    return (unsigned)(b > 0 ? b : 1);
}

/* After every launch: stops the run naming the operation if the launch failed (bad
 * configuration, too much shared memory, a previous asynchronous fault). */
#define SL_CUDA_LAUNCHED(op) sl_cuda_check(cudaGetLastError(), (op), "kernel launch")

#endif
