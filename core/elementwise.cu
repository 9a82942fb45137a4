/*
 * core/elementwise.cu - fill, add, axpy, scale, convert, sum and sumsq on the GPU (CPU twin:
 * core/elementwise_cpu.c; semantics: core/ops.h).
 *
 * Every operand is fp32 or bf16 independently of the others (docs/cuda.md), so the kernels are
 * templates over each operand's storage type, computing in fp32 (fill also takes an i32
 * tensor).
 *
 * Maps (fill ... convert): one kernel, k_ew, a grid-stride loop in which each thread moves
 * packs of 8 elements per operand (16-byte accesses, core/cuda_pack.cuh) and then the n % 8
 * tail element by element; when any pointer is not 16-byte aligned everything goes element
 * by element. An element is read and written by the same thread, so y may alias a or b.
 *
 * Reductions (sum, sumsq) into a device scalar, deterministic: pass 1 gives each block a
 * grid-stride share, accumulated in double per thread (the CPU accumulates in double; a
 * gradient norm over 1e8 elements in fp32 would lose digits) and summed over the block in a
 * fixed tree; the block's partial goes to scratch. Pass 2, one block, sums the partials in a
 * fixed order and rounds once to fp32. The number of partials depends only on n (not on the
 * device), so the result is the same on every GPU, run after run. absmax has the same two
 * passes with a max (exact in fp32, so in any order) and a NaN flag beside it, since fmaxf would
 * drop a NaN that the CPU twin reports.
 */
#include "core/cuda_pack.cuh"
#include "core/kernels_cuda.h"

namespace {

enum { EW_FILL, EW_SCALE, EW_ADD, EW_AXPY, EW_CONVERT };

constexpr int kThreads = 256;
/* Enough blocks to fill any current GPU several times over; the loops stride beyond it. */
constexpr int64_t kMaxBlocks = 4096;
/* Partials of the reductions: at most this many blocks in pass 1 (a power of two, so pass 2's
 * tree stays simple). */
constexpr int kMaxPartials = 1024;

/* y = f(a, b; s) per element: fill y = s; scale y = a * s; add y = a + b; axpy y = a + s * b;
 * convert y = a. */
template <int OP> __device__ __forceinline__ float ew_apply(float a, float b, float s) {
    if constexpr (OP == EW_FILL)
        return s;
    else if constexpr (OP == EW_SCALE)
        return a * s;
    else if constexpr (OP == EW_ADD)
        return a + b;
    else if constexpr (OP == EW_AXPY)
        return a + s * b;
    else
        return a;
}

/* The map, over n elements; `vec`: every pointer is 16-byte aligned (packs allowed). Threads
 * take packs p = tid, tid + stride, ... (consecutive threads, consecutive 16-byte words), then
 * the tail elements the same way. Operands OP does not read are never dereferenced. */
template <int OP, typename TY, typename TA, typename TB>
__global__ void __launch_bounds__(kThreads)
    k_ew(TY *y, const TA *a, const TB *b, int64_t n, float s, bool vec) {
    constexpr bool use_a = OP != EW_FILL, use_b = OP == EW_ADD || OP == EW_AXPY;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t npacks = vec ? n / SL_PACK : 0;
    for (int64_t p = tid; p < npacks; p += stride) {
        const int64_t i = p * SL_PACK;
        float va[SL_PACK] = {}, vb[SL_PACK] = {}, vy[SL_PACK];
        if constexpr (use_a) sl_ld8(a + i, va);
        if constexpr (use_b) sl_ld8(b + i, vb);
        SL_UNROLL
        for (int k = 0; k < SL_PACK; k++) vy[k] = ew_apply<OP>(va[k], vb[k], s);
        sl_st8(y + i, vy);
    }
    for (int64_t i = npacks * SL_PACK + tid; i < n; i += stride) {
        float va = 0.0f, vb = 0.0f;
        if constexpr (use_a) va = sl_ld(a[i]);
        if constexpr (use_b) vb = sl_ld(b[i]);
        y[i] = sl_st<TY>(ew_apply<OP>(va, vb, s));
    }
}

/* fill of an index tensor: x[i] = v, 4 per 16-byte store when aligned. */
__global__ void __launch_bounds__(kThreads) k_fill_i32(int32_t *x, int64_t n, int32_t v, bool vec) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t nquads = vec ? n / 4 : 0;
    if (nquads > 0) SL_CHECK_ALIGNED(x, 16);
    for (int64_t q = tid; q < nquads; q += stride)
        reinterpret_cast<int4 *>(x)[q] = make_int4(v, v, v, v);
    for (int64_t i = nquads * 4 + tid; i < n; i += stride) x[i] = v;
}

/* Threads needed for n elements: one per pack plus the tail, or one per element. */
int64_t ew_items(int64_t n, bool vec) {
    return vec ? n / SL_PACK + n % SL_PACK : n;
}

template <int OP, typename TY, typename TA, typename TB>
void ew_launch(void *ctx, const char *op, TY *y, const TA *a, const TB *b, int64_t n, float s) {
    if (n == 0) return;
    const bool vec = sl_aligned16(y) && sl_aligned16(a) && sl_aligned16(b);
    int64_t blocks = sl_blocks(ew_items(n, vec), kThreads);
    if (blocks > kMaxBlocks) blocks = kMaxBlocks;
    auto *const ew_kernel = k_ew<OP, TY, TA, TB>;
    SL_LAUNCH(ew_kernel, (unsigned)blocks, kThreads, 0, sl_cuda_stream(ctx), y, a, b, n, s, vec);
    SL_CUDA_LAUNCHED(op);
}

/* ---- reductions ---- */

/* Pass 1: block b writes part[b] = sum over its grid-stride share of x (SQ: of x^2), in
 * double. */
template <bool SQ, typename T>
__global__ void __launch_bounds__(kThreads)
    k_reduce_partial(double *part, const T *x, int64_t n, bool vec) {
    __shared__ double sh[kThreads];
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t npacks = vec ? n / SL_PACK : 0;
    double acc = 0.0;
    for (int64_t p = tid; p < npacks; p += stride) {
        float v[SL_PACK];
        sl_ld8(x + p * SL_PACK, v);
        SL_UNROLL
        for (int k = 0; k < SL_PACK; k++) acc += SQ ? (double)v[k] * v[k] : (double)v[k];
    }
    for (int64_t i = npacks * SL_PACK + tid; i < n; i += stride) {
        const double v = sl_ld(x[i]);
        acc += SQ ? v * v : v;
    }
    acc = sl_block_sum_f64(acc, sh);
    if (threadIdx.x == 0) part[blockIdx.x] = acc;
}

/* Pass 2, one block: out[0] = sum of the nparts partials (thread t takes t, t + 256, ... in
 * order, then the fixed tree), rounded once to fp32 (add: out[0] + that sum, rounded once).
 * nparts = 0 gives 0. */
__global__ void __launch_bounds__(kThreads)
    k_reduce_final(float *out, const double *part, int nparts, bool add) {
    __shared__ double sh[kThreads];
    double acc = 0.0;
    for (int i = threadIdx.x; i < nparts; i += blockDim.x) acc += part[i];
    acc = sl_block_sum_f64(acc, sh);
    if (threadIdx.x == 0) out[0] = (float)(add ? (double)out[0] + acc : acc);
}

template <bool SQ, typename T>
void reduce_launch(void *ctx, const char *op, float *out, const T *x, int64_t n, bool add = false) {
    const bool vec = sl_aligned16(x);
    const int64_t items = ew_items(n, vec);
    int nparts = 0;
    double *part = NULL;
    if (n > 0) {
        const int64_t b = sl_blocks(items, kThreads);
        nparts = (int)(b < kMaxPartials ? b : kMaxPartials);
        part = (double *)sl_cuda_scratch(ctx, 0, sizeof(double) * (size_t)nparts);
        auto *const partial_kernel = k_reduce_partial<SQ, T>;
        SL_LAUNCH(partial_kernel, (unsigned)nparts, kThreads, 0, sl_cuda_stream(ctx), part, x, n,
                  vec);
        SL_CUDA_LAUNCHED(op);
    }
    const double *cpart = part;
    SL_LAUNCH(k_reduce_final, 1, kThreads, 0, sl_cuda_stream(ctx), out, cpart, nparts, add);
    SL_CUDA_LAUNCHED(op);
}

/* absmax pass 1: part[b] = max |x| over the block's grid-stride share, NaN when it holds one. */
template <typename T>
__global__ void __launch_bounds__(kThreads) k_absmax_partial(float *part, const T *x, int64_t n) {
    __shared__ float sh[32];
    float m = 0.0f, nan = 0.0f;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const float a = fabsf(sl_ld(x[i]));
        if (a != a) nan = 1.0f;
        m = fmaxf(m, a);
    }
    m = sl_block_max(m, sh);
    nan = sl_block_max(nan, sh);
    if (threadIdx.x == 0) part[blockIdx.x] = nan > 0.0f ? NAN : m;
}

/* absmax pass 2, one block: the max of the partials (NaN if any is NaN); 0 without partials. */
__global__ void __launch_bounds__(kThreads)
    k_absmax_final(float *out, const float *part, int nparts) {
    __shared__ float sh[32];
    float m = 0.0f, nan = 0.0f;
    for (int i = threadIdx.x; i < nparts; i += blockDim.x) {
        if (part[i] != part[i]) nan = 1.0f;
        m = fmaxf(m, part[i]);
    }
    m = sl_block_max(m, sh);
    nan = sl_block_max(nan, sh);
    if (threadIdx.x == 0) out[0] = nan > 0.0f ? NAN : m;
}

} // namespace

/* ---- launchers (sl_ops_i) ---- */

extern "C" void sl_cuda_fill(void *ctx, sl_tensor *x, float value) {
    if (x->dtype == SL_I32) {
        const int64_t n = x->numel;
        if (n == 0) return;
        int32_t *p = sl_ptr<int32_t>(x);
        const bool vec = sl_aligned16(p);
        int64_t blocks = sl_blocks(vec ? n / 4 + n % 4 : n, kThreads);
        if (blocks > kMaxBlocks) blocks = kMaxBlocks;
        const int32_t v = (int32_t)value; /* as the CPU converts it */
        SL_LAUNCH(k_fill_i32, (unsigned)blocks, kThreads, 0, sl_cuda_stream(ctx), p, n, v, vec);
        SL_CUDA_LAUNCHED("fill");
        return;
    }
    SL_DISPATCH_FLOAT(x->dtype, T, {
        const float *none = NULL;
        ew_launch<EW_FILL>(ctx, "fill", sl_ptr<T>(x), none, none, x->numel, value);
    });
}

extern "C" void sl_cuda_scale(void *ctx, sl_tensor *x, float s) {
    SL_DISPATCH_FLOAT(x->dtype, T, {
        const T *in = sl_ptr<T>(x);
        const float *none = NULL;
        ew_launch<EW_SCALE>(ctx, "scale", sl_ptr<T>(x), in, none, x->numel, s);
    });
}

extern "C" void sl_cuda_add(void *ctx, sl_tensor *y, const sl_tensor *a, const sl_tensor *b) {
    SL_DISPATCH_FLOAT(y->dtype, TY,
                      SL_DISPATCH_FLOAT(a->dtype, TA, SL_DISPATCH_FLOAT(b->dtype, TB, {
                                            const TA *pa = sl_ptr<TA>(a);
                                            const TB *pb = sl_ptr<TB>(b);
                                            ew_launch<EW_ADD>(ctx, "add", sl_ptr<TY>(y), pa, pb,
                                                              y->numel, 0.0f);
                                        })));
}

extern "C" void sl_cuda_axpy(void *ctx, sl_tensor *y, const sl_tensor *x, float alpha) {
    SL_DISPATCH_FLOAT(y->dtype, TY, SL_DISPATCH_FLOAT(x->dtype, TX, {
                          const TY *py = sl_ptr<TY>(y);
                          const TX *px = sl_ptr<TX>(x);
                          ew_launch<EW_AXPY>(ctx, "axpy", sl_ptr<TY>(y), py, px, y->numel, alpha);
                      }));
}

extern "C" void sl_cuda_convert(void *ctx, sl_tensor *dst, const sl_tensor *src) {
    if (dst->dtype == src->dtype) { /* a copy: the copy engine is at least as fast */
        if (dst->data != src->data && dst->numel > 0)
            sl_cuda_check(cudaMemcpyAsync(dst->data, src->data,
                                          (size_t)dst->numel * sl_dtype_size(dst->dtype),
                                          cudaMemcpyDeviceToDevice, sl_cuda_stream(ctx)),
                          "convert", "cudaMemcpyAsync");
        return;
    }
    SL_DISPATCH_FLOAT(dst->dtype, TY, SL_DISPATCH_FLOAT(src->dtype, TX, {
                          const TX *px = sl_ptr<TX>(src);
                          const float *none = NULL;
                          ew_launch<EW_CONVERT>(ctx, "convert", sl_ptr<TY>(dst), px, none,
                                                dst->numel, 0.0f);
                      }));
}

extern "C" void sl_cuda_sum(void *ctx, sl_tensor *out, const sl_tensor *x) {
    SL_DISPATCH_FLOAT(
        x->dtype, T,
        reduce_launch<false>(ctx, "sum", sl_ptr<float>(out), (const T *)sl_ptr<T>(x), x->numel));
}

extern "C" void sl_cuda_sumsq(void *ctx, sl_tensor *out, const sl_tensor *x) {
    SL_DISPATCH_FLOAT(
        x->dtype, T,
        reduce_launch<true>(ctx, "sumsq", sl_ptr<float>(out), (const T *)sl_ptr<T>(x), x->numel));
}

extern "C" void sl_cuda_reduce_add(void *ctx, float *out, const float *x, int64_t n, bool squares) {
    if (squares)
        reduce_launch<true>(ctx, "sumsq", out, x, n, true);
    else
        reduce_launch<false>(ctx, "sum", out, x, n, true);
}

extern "C" void sl_cuda_absmax(void *ctx, sl_tensor *out, const sl_tensor *x) {
    const int64_t n = x->numel;
    const int64_t b = n > 0 ? sl_blocks(n, kThreads) : 0;
    const int nparts = (int)(b < kMaxPartials ? b : kMaxPartials);
    float *part = (float *)sl_cuda_scratch(ctx, 0, sizeof(float) * (size_t)(nparts ? nparts : 1));
    if (nparts > 0) {
        SL_DISPATCH_FLOAT(x->dtype, T, {
            const T *px = sl_ptr<T>(x);
            SL_LAUNCH(k_absmax_partial<T>, (unsigned)nparts, kThreads, 0, sl_cuda_stream(ctx), part,
                      px, n);
        });
        SL_CUDA_LAUNCHED("absmax");
    }
    const float *cpart = part;
    SL_LAUNCH(k_absmax_final, 1, kThreads, 0, sl_cuda_stream(ctx), sl_ptr<float>(out), cpart,
              nparts);
    SL_CUDA_LAUNCHED("absmax");
}
