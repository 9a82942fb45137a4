/*
 * core/cuda_pack.cuh - packed loads and stores for memory-bound kernels (docs/cuda.md).
 *
 * A "pack" is 8 consecutive elements moved with 16-byte accesses: one for bf16, two for fp32.
 * Kernels that take operands of different dtypes (add with an fp32 y and bf16 a, say) then
 * move the same 8 elements per operand, each with full-width accesses. A pack pointer must be
 * 16-byte aligned; launchers check it (sl_aligned16) and fall back to element accesses
 * otherwise (views at odd offsets, rows of odd width).
 *
 * sl_ldv<VEC>/sl_stv<VEC> pick the pack (VEC = 8) or one element (VEC = 1), so a kernel written
 * once over "VEC elements" serves both paths. sl_raw keeps packs as loaded, for kernels with
 * several in flight. Also here: a deterministic block sum in double for the reductions whose CPU
 * twins accumulate in double.
 */
#ifndef SL_CUDA_PACK_CUH
#define SL_CUDA_PACK_CUH

#include <string.h>

#include "core/cuda_common.cuh"

/* Elements per pack. */
#define SL_PACK 8

static inline bool sl_aligned16(const void *p) {
    return ((uintptr_t)p & 15u) == 0;
}

__device__ __forceinline__ void sl_ld8(const float *p, float (&v)[8]) {
    SL_CHECK_ALIGNED(p, 16);
    const float4 a = reinterpret_cast<const float4 *>(p)[0];
    const float4 b = reinterpret_cast<const float4 *>(p)[1];
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
    v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}

__device__ __forceinline__ void sl_ld8(const sl_bf16 *p, float (&v)[8]) {
    SL_CHECK_ALIGNED(p, 16);
    const uint4 u = *reinterpret_cast<const uint4 *>(p);
    sl_bf16 h[8];
    memcpy((void *)h, &u, sizeof u); /* register moves once optimized; no aliasing question */
    SL_UNROLL
    for (int k = 0; k < 8; k++) v[k] = __bfloat162float(h[k]);
}

__device__ __forceinline__ void sl_st8(float *p, const float (&v)[8]) {
    SL_CHECK_ALIGNED(p, 16);
    reinterpret_cast<float4 *>(p)[0] = make_float4(v[0], v[1], v[2], v[3]);
    reinterpret_cast<float4 *>(p)[1] = make_float4(v[4], v[5], v[6], v[7]);
}

__device__ __forceinline__ void sl_st8(sl_bf16 *p, const float (&v)[8]) {
    SL_CHECK_ALIGNED(p, 16);
    sl_bf16 h[8];
    SL_UNROLL
    for (int k = 0; k < 8; k++) h[k] = __float2bfloat16_rn(v[k]);
    uint4 u;
    memcpy(&u, (const void *)h, sizeof u);
    *reinterpret_cast<uint4 *>(p) = u;
}

/* VEC elements at p as fp32 (VEC = 8: p 16-byte aligned). */
template <int VEC, typename T> __device__ __forceinline__ void sl_ldv(const T *p, float (&v)[VEC]) {
    if constexpr (VEC == SL_PACK) {
        sl_ld8(p, v);
    } else {
        static_assert(VEC == 1, "a pack is 8 elements or one");
        v[0] = sl_ld(p[0]);
    }
}

template <int VEC, typename T> __device__ __forceinline__ void sl_stv(T *p, const float (&v)[VEC]) {
    if constexpr (VEC == SL_PACK) {
        sl_st8(p, v);
    } else {
        static_assert(VEC == 1, "a pack is 8 elements or one");
        p[0] = sl_st<T>(v[0]);
    }
}

/* V elements of T as loaded, converted to fp32 one at a time where used: for kernels that keep
 * several accesses in flight before computing (core/rmsnorm.cu's rows, core/cross_entropy.cu's
 * unrolled packs, moe/permute*.cu's batches of rows). Whole 16-byte accesses are kept as 32-bit
 * words: nvcc splits bf16 held as sl_bf16 into 16-bit registers, each of which takes a 32-bit
 * register of its own (twice the registers: the RMSNorm backward and the combine spilled so).
 * Other widths (single elements) keep T. Every conversion is exact. */
template <typename T, int V> struct sl_raw {
    static constexpr int kBytes = V * (int)sizeof(T);
    static constexpr bool kWords = kBytes % 16 == 0;
    uint32_t w[kWords ? kBytes / 4 : 1];
    T e[kWords ? 1 : V];
    /* p aligned to 16 bytes when kWords */
    __device__ __forceinline__ void load(const T *p) {
        if constexpr (kWords) {
            SL_CHECK_ALIGNED(p, 16);
            SL_UNROLL
            for (int q = 0; q < kBytes / 16; q++) {
                const uint4 u = reinterpret_cast<const uint4 *>(p)[q];
                w[4 * q] = u.x, w[4 * q + 1] = u.y, w[4 * q + 2] = u.z, w[4 * q + 3] = u.w;
            }
        } else {
            SL_UNROLL
            for (int i = 0; i < V; i++) e[i] = p[i];
        }
    }
    __device__ __forceinline__ void store(T *p) const {
        if constexpr (kWords) {
            SL_CHECK_ALIGNED(p, 16);
            SL_UNROLL
            for (int q = 0; q < kBytes / 16; q++)
                reinterpret_cast<uint4 *>(p)[q] =
                    make_uint4(w[4 * q], w[4 * q + 1], w[4 * q + 2], w[4 * q + 3]);
        } else {
            SL_UNROLL
            for (int i = 0; i < V; i++) p[i] = e[i];
        }
    }
    /* element i (a constant after unrolling) as fp32 */
    __device__ __forceinline__ float at(int i) const {
        if constexpr (!kWords)
            return sl_ld(e[i]);
        else if constexpr (sizeof(T) == 4)
            return __uint_as_float(w[i]);
        else /* bf16, little-endian: element 2j is word j's low half */
            return __uint_as_float(i % 2 ? w[i / 2] & 0xffff0000u : w[i / 2] << 16);
    }
    __device__ __forceinline__ void unpack(float (&v)[V]) const {
        SL_UNROLL
        for (int i = 0; i < V; i++) v[i] = at(i);
    }
    /* the inverse of unpack, for values T holds exactly (rounded to T before) */
    __device__ __forceinline__ void set(const float (&v)[V]) {
        if constexpr (!kWords) {
            SL_UNROLL
            for (int i = 0; i < V; i++) e[i] = sl_st<T>(v[i]);
        } else if constexpr (sizeof(T) == 4) {
            SL_UNROLL
            for (int i = 0; i < V; i++) w[i] = __float_as_uint(v[i]);
        } else {
            SL_UNROLL
            for (int i = 0; i < V / 2; i++)
                w[i] = (__float_as_uint(v[2 * i]) >> 16) |
                       (__float_as_uint(v[2 * i + 1]) & 0xffff0000u);
        }
    }
};

/* Sum over the block of one double per thread, in a fixed order (a shared-memory tree), so
 * the result does not depend on scheduling. blockDim.x must be a power of two and `sh` hold
 * blockDim.x doubles. Every thread of the block must call it; every thread gets the sum. */
__device__ __forceinline__ double sl_block_sum_f64(double v, double *sh) {
    const unsigned t = threadIdx.x;
    sh[t] = v;
    __syncthreads();
    for (unsigned o = blockDim.x / 2; o > 0; o >>= 1) {
        if (t < o) sh[t] += sh[t + o];
        __syncthreads();
    }
    const double s = sh[0];
    __syncthreads(); /* sh may be reused by the caller */
    return s;
}

#endif
