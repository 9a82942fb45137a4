/*
 * moe/swiglu.cu - the expert activation and the shared expert's row gate on the GPU (CPU twin
 * and formulas: moe/swiglu_cpu.c).
 *
 * All four are memory-bound and run one warp per row, grid-stride over the rows, each lane
 * taking V consecutive elements per access (16 bytes when the rows allow it, moe/moe_vec.cuh).
 * rowgate_bwd's sum over a row is each lane's elements in order, then the warp's butterfly: a
 * fixed order, no atomics. fp32 arithmetic; T = float or bf16 storage.
 */
#include "core/cuda_common.cuh"
#include "moe/kernels_cuda.h"
#include "moe/moe_vec.cuh"

namespace {

/* h[r, i] = silu(g) u with g = gu[r, i], u = gu[r, I + i]. */
template <typename T, int V>
__global__ void SL_MOE_ROW_BOUNDS swiglu_fwd_kernel(T *__restrict__ h, const T *__restrict__ gu,
                                                    int64_t m, int64_t in) {
    const int lane = threadIdx.x & 31;
    SL_MOE_FOR_WARP_ROWS(r, m) {
        const T *g = gu + r * 2 * in, *u = g + in;
        T *hr = h + r * in;
        for (int64_t c = (int64_t)lane * V; c < in; c += 32 * V) {
            float gv[V], uv[V];
            sl_moe_vload<T, V>(gv, g + c);
            sl_moe_vload<T, V>(uv, u + c);
#pragma unroll
            for (int i = 0; i < V; i++) gv[i] = sl_moe_swiglu(gv[i], uv[i]);
            sl_moe_vstore<T, V>(hr + c, gv);
        }
    }
}

/* d up = dh silu(g); d gate = dh u s (1 + g (1 - s)), s = sigmoid(g). */
template <typename T, int V>
__global__ void SL_MOE_ROW_BOUNDS swiglu_bwd_kernel(T *__restrict__ dgu, const T *__restrict__ dh,
                                                    const T *__restrict__ gu, int64_t m,
                                                    int64_t in) {
    const int lane = threadIdx.x & 31;
    SL_MOE_FOR_WARP_ROWS(r, m) {
        const T *g = gu + r * 2 * in, *u = g + in, *d = dh + r * in;
        T *dg = dgu + r * 2 * in, *du = dg + in;
        for (int64_t c = (int64_t)lane * V; c < in; c += 32 * V) {
            float gv[V], uv[V], dv[V];
            sl_moe_vload<T, V>(gv, g + c);
            sl_moe_vload<T, V>(uv, u + c);
            sl_moe_vload<T, V>(dv, d + c);
#pragma unroll
            for (int i = 0; i < V; i++) {
                const float s = sl_moe_sigmoidf(gv[i]), dd = dv[i];
                dv[i] = dd * uv[i] * s * (1.0f + gv[i] * (1.0f - s)); /* d gate */
                uv[i] = dd * gv[i] * s;                               /* d up */
            }
            sl_moe_vstore<T, V>(dg + c, dv);
            sl_moe_vstore<T, V>(du + c, uv);
        }
    }
}

/* y[r, c] = x[r, c] sigmoid(s[r]). */
template <typename T, int V>
__global__ void SL_MOE_ROW_BOUNDS rowgate_fwd_kernel(T *__restrict__ y, const T *__restrict__ x,
                                                     const T *__restrict__ s, int64_t n,
                                                     int64_t c) {
    const int lane = threadIdx.x & 31;
    SL_MOE_FOR_WARP_ROWS(r, n) {
        sl_moe_scale_row<T, V>(y + r * c, x + r * c, c, sl_moe_sigmoidf(sl_ld(s[r])), lane);
    }
}

/* dx = dy sigmoid(s); ds = (sum_c dy x) sigmoid(s) (1 - sigmoid(s)). */
template <typename T, int V>
__global__ void SL_MOE_ROW_BOUNDS rowgate_bwd_kernel(T *__restrict__ dx, T *__restrict__ ds,
                                                     const T *__restrict__ dy,
                                                     const T *__restrict__ x,
                                                     const T *__restrict__ s, int64_t n,
                                                     int64_t c) {
    const int lane = threadIdx.x & 31;
    SL_MOE_FOR_WARP_ROWS(r, n) {
        const float gate = sl_moe_sigmoidf(sl_ld(s[r]));
        float dot = sl_moe_scale_dot_row<T, V>(dx + r * c, dy + r * c, x + r * c, c, gate, lane);
        dot = sl_warp_sum(dot);
        if (lane == 0) ds[r] = sl_st<T>(dot * gate * (1.0f - gate));
    }
}

template <typename T>
static void swiglu_fwd_launch(cudaStream_t st, sl_tensor *h, const sl_tensor *gu) {
    const int64_t m = sl_rows(h), in = sl_last_dim(h);
    SL_MOE_ROW_LAUNCH(swiglu_fwd_kernel, T, sl_moe_rows_vec16<T>(in, h->data, gu->data),
                      "swiglu_fwd", st, m, sl_ptr<T>(h), sl_ptr<T>(gu), m, in);
}

} // namespace

extern "C" void sl_cuda_swiglu_fwd(void *ctx, sl_tensor *h, const sl_tensor *gu) {
    if (h->numel == 0) return;
    SL_DISPATCH_FLOAT(h->dtype, T, swiglu_fwd_launch<T>(sl_cuda_stream(ctx), h, gu));
}

namespace {

template <typename T>
static void swiglu_bwd_launch(cudaStream_t st, sl_tensor *dgu, const sl_tensor *dh,
                              const sl_tensor *gu) {
    const int64_t in = sl_last_dim(gu) / 2, m = sl_rows(gu);
    SL_MOE_ROW_LAUNCH(swiglu_bwd_kernel, T, sl_moe_rows_vec16<T>(in, dgu->data, dh->data, gu->data),
                      "swiglu_bwd", st, m, sl_ptr<T>(dgu), sl_ptr<T>(dh), sl_ptr<T>(gu), m, in);
}

} // namespace

extern "C" void sl_cuda_swiglu_bwd(void *ctx, sl_tensor *dgu, const sl_tensor *dh,
                                   const sl_tensor *gu) {
    if (gu->numel == 0) return;
    SL_DISPATCH_FLOAT(dgu->dtype, T, swiglu_bwd_launch<T>(sl_cuda_stream(ctx), dgu, dh, gu));
}

namespace {

template <typename T>
static void rowgate_fwd_launch(cudaStream_t st, sl_tensor *y, const sl_tensor *x,
                               const sl_tensor *s) {
    const int64_t n = sl_rows(x), c = sl_last_dim(x);
    SL_MOE_ROW_LAUNCH(rowgate_fwd_kernel, T, sl_moe_rows_vec16<T>(c, y->data, x->data),
                      "rowgate_fwd", st, n, sl_ptr<T>(y), sl_ptr<T>(x), sl_ptr<T>(s), n, c);
}

} // namespace

extern "C" void sl_cuda_rowgate_fwd(void *ctx, sl_tensor *y, const sl_tensor *x,
                                    const sl_tensor *s) {
    if (x->numel == 0) return;
    SL_DISPATCH_FLOAT(y->dtype, T, rowgate_fwd_launch<T>(sl_cuda_stream(ctx), y, x, s));
}

namespace {

template <typename T>
static void rowgate_bwd_launch(cudaStream_t st, sl_tensor *dx, sl_tensor *ds, const sl_tensor *dy,
                               const sl_tensor *x, const sl_tensor *s) {
    const int64_t n = sl_rows(x), c = sl_last_dim(x);
    SL_MOE_ROW_LAUNCH(rowgate_bwd_kernel, T, sl_moe_rows_vec16<T>(c, dx->data, dy->data, x->data),
                      "rowgate_bwd", st, n, sl_ptr<T>(dx), sl_ptr<T>(ds), sl_ptr<T>(dy),
                      sl_ptr<T>(x), sl_ptr<T>(s), n, c);
}

} // namespace

extern "C" void sl_cuda_rowgate_bwd(void *ctx, sl_tensor *dx, sl_tensor *ds, const sl_tensor *dy,
                                    const sl_tensor *x, const sl_tensor *s) {
    if (x->numel == 0) return;
    SL_DISPATCH_FLOAT(dx->dtype, T, rowgate_bwd_launch<T>(sl_cuda_stream(ctx), dx, ds, dy, x, s));
}
