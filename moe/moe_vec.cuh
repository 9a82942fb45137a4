/*
 * moe/moe_vec.cuh - vectorized row access for the memory-bound MoE kernels (permute.cu,
 * swiglu.cu).
 *
 * A kernel over rows of width C moves V elements per thread access, V = 16 bytes / sizeof(T)
 * (4 fp32 or 8 bf16), when every row start of every operand is 16-byte aligned, and one
 * element otherwise (odd widths, offset views). The aligned struct below is what makes nvcc
 * emit one 128-bit load or store for V elements; under the emulator it is a plain copy.
 */
#ifndef SL_MOE_VEC_CUH
#define SL_MOE_VEC_CUH

#include "core/cuda_pack.cuh" /* sl_raw; cuda_common.cuh */

template <typename T, int V> struct alignas(sizeof(T) * V) sl_moe_vec { T v[V]; };

/* f[0..V) = p[0..V) as fp32; p aligned to sizeof(T) * V. */
template <typename T, int V>
__device__ __forceinline__ void sl_moe_vload(float (&f)[V], const T *p) {
    const sl_moe_vec<T, V> x = *reinterpret_cast<const sl_moe_vec<T, V> *>(p);
#pragma unroll
    for (int i = 0; i < V; i++) f[i] = sl_ld(x.v[i]);
}

/* p[0..V) = f[0..V) rounded to T. */
template <typename T, int V>
__device__ __forceinline__ void sl_moe_vstore(T *p, const float (&f)[V]) {
    sl_moe_vec<T, V> x;
#pragma unroll
    for (int i = 0; i < V; i++) x.v[i] = sl_st<T>(f[i]);
    *reinterpret_cast<sl_moe_vec<T, V> *>(p) = x;
}

/* One warp over a row of width c: writes dx = scale * dy and returns this lane's share of the
 * dot product <dy, x> (the caller sums the warp). The gradient of a row scaled by a weight
 * (combine's dx and dw, the row gate's dx and ds) in one pass over dy and x. */
template <typename T, int V>
__device__ __forceinline__ float sl_moe_scale_dot_row(T *dx, const T *dy, const T *x, int64_t c,
                                                      float scale, int lane) {
    float dot = 0.0f;
    for (int64_t c0 = (int64_t)lane * V; c0 < c; c0 += 32 * V) {
        float a[V], b[V];
        sl_moe_vload<T, V>(a, dy + c0);
        sl_moe_vload<T, V>(b, x + c0);
#pragma unroll
        for (int i = 0; i < V; i++) {
            dot += a[i] * b[i];
            a[i] *= scale;
        }
        sl_moe_vstore<T, V>(dx + c0, a);
    }
    return dot;
}

/* sl_moe_scale_dot_row without the dot product: dx = scale * dy, the same bits (the combine's
 * backward for dx alone; the row gate's forward). */
template <typename T, int V>
__device__ __forceinline__ void sl_moe_scale_row(T *dx, const T *dy, int64_t c, float scale,
                                                 int lane) {
    for (int64_t c0 = (int64_t)lane * V; c0 < c; c0 += 32 * V) {
        float a[V];
        sl_moe_vload<T, V>(a, dy + c0);
#pragma unroll
        for (int i = 0; i < V; i++) a[i] *= scale;
        sl_moe_vstore<T, V>(dx + c0, a);
    }
}

/* Elements per 16-byte access of T. */
template <typename T> constexpr int sl_moe_vec16() {
    return (int)(16 / sizeof(T));
}

static inline bool sl_moe_aligned16(const void *p) {
    return ((uintptr_t)p & 15u) == 0;
}

/* Whether rows of `width` elements of T, starting at every given base (NULL = unused), can all
 * be accessed 16 bytes at a time. */
template <typename T>
static inline bool sl_moe_rows_vec16(int64_t width, const void *a, const void *b = 0,
                                     const void *c = 0, const void *d = 0) {
    return (width * (int64_t)sizeof(T)) % 16 == 0 && sl_moe_aligned16(a) && sl_moe_aligned16(b) &&
           sl_moe_aligned16(c) && sl_moe_aligned16(d);
}

/* Row kernels run one warp per row, SL_MOE_ROW_WARPS warps per block, grid-stride over the rows:
 * a row's accesses are 32 lanes x 16 bytes wide and no index needs a 64-bit division. */
enum { SL_MOE_ROW_WARPS = 8 };

/* Launch bounds of the row kernels: 256 threads, at least 4 blocks per SM (<= 64 registers).
 * Plenty for streaming a few rows, and without the minimum ptxas was seen to spill a few bytes
 * at 48 registers (a build error here). */
#define SL_MOE_ROW_BOUNDS __launch_bounds__(SL_MOE_ROW_WARPS * 32, 4)

/* Blocks for `rows` rows at one warp each: enough to fill the GPU many times over, capped so
 * that huge row counts keep gridDim.x modest (the kernels loop). */
static inline unsigned sl_moe_row_blocks(int64_t rows) {
    const int64_t cap = 1 << 20;
    const int64_t b = (rows + SL_MOE_ROW_WARPS - 1) / SL_MOE_ROW_WARPS;
    return (unsigned)(b < 1 ? 1 : b > cap ? cap : b);
}

/* for (int64_t r = this warp's first row; r < rows; r += warps in the grid) */
#define SL_MOE_FOR_WARP_ROWS(r, rows)                                                              \
    for (int64_t r = (int64_t)blockIdx.x * SL_MOE_ROW_WARPS + (threadIdx.x >> 5); r < (rows);      \
         r += (int64_t)gridDim.x * SL_MOE_ROW_WARPS)

/* Launches the row kernel template `kernel<T, V>` (V elements per access) over `rows` rows:
 * V = 16 bytes of T when `vec` (see sl_moe_rows_vec16), else 1. The instances get names of their
 * own (SL_LAUNCH takes no template argument list with a comma). */
#define SL_MOE_ROW_LAUNCH(kernel, T, vec, op, stream, rows, ...)                                   \
    do {                                                                                           \
        if (vec) {                                                                                 \
            const auto kernel##_vec = kernel<T, sl_moe_vec16<T>()>;                                \
            SL_LAUNCH(kernel##_vec, sl_moe_row_blocks(rows), SL_MOE_ROW_WARPS * 32, 0, stream,     \
                      __VA_ARGS__);                                                                \
        } else {                                                                                   \
            const auto kernel##_1 = kernel<T, 1>;                                                  \
            SL_LAUNCH(kernel##_1, sl_moe_row_blocks(rows), SL_MOE_ROW_WARPS * 32, 0, stream,       \
                      __VA_ARGS__);                                                                \
        }                                                                                          \
        SL_CUDA_LAUNCHED(op);                                                                      \
    } while (0)

/* sigmoid as the CPU twin computes it (core/vmath.h): 1 / (1 + exp(-x)); expf saturates to
 * +inf for very negative x, giving exactly 0, and to 0 for large x, giving exactly 1. */
__device__ __forceinline__ float sl_moe_sigmoidf(float x) {
    return 1.0f / (1.0f + expf(-x));
}

/* SwiGLU's value silu(g) u = g sigmoid(g) u, in this order: the activation kernel
 * (moe/swiglu.cu) and the Hopper grouped GEMM's fused epilogue (moe/grouped_matmul_sm90.cu)
 * both call it, so their h agree bit for bit. */
__device__ __forceinline__ float sl_moe_swiglu(float g, float u) {
    return g * sl_moe_sigmoidf(g) * u;
}

#endif
