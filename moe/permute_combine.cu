/*
 * moe/permute_combine.cu - the weighted combine of the experts' rows back into token order, and
 * its backward, on the GPU (the rest of the permutation: moe/permute.cu; CPU twin and
 * semantics: moe/permute_cpu.c). Row kernels as in moe/permute.cu: 16 bytes per access where
 * the rows allow it (moe/moe_vec.cuh), fp32 sums in a fixed order, deterministic.
 */
#include "core/cuda_common.cuh"
#include "moe/kernels_cuda.h"
#include "moe/moe_vec.cuh"

namespace {

/* ---- combine ---------------------------------------------------------------------------- */

/* Rows whose loads a lane issues before it adds the first of them: a token's k = 8 experts at
 * once, so a warp waits for one round trip to memory per 32 x V columns, not k of them one after
 * another (with one load in flight per warp, 4,096 tokens kept about 2 MB in flight on an H200,
 * where its memory needs about 2.4 MB to run at speed; docs/performance.md, 2026-11-28). */
constexpr int kRowBatch = 8;

/* y[t] = res[t] + sum_j w[t, j] x[slot_pos[t k + j]], j in order, fp32, the residual (if any)
 * added last, then one rounding. One warp per token; the k weights and slot positions are read
 * by every lane (one broadcast each), kRowBatch rows' accesses in flight. */
template <typename T, int V>
__global__ void SL_MOE_ROW_BOUNDS combine_kernel(T *__restrict__ y, const T *__restrict__ x,
                                                 const int32_t *__restrict__ sp,
                                                 const float *__restrict__ w,
                                                 const T *__restrict__ res, int64_t n, int k,
                                                 int64_t c, int64_t xrows) {
    const int lane = threadIdx.x & 31;
    SL_MOE_FOR_WARP_ROWS(t, n) {
        for (int64_t c0 = (int64_t)lane * V; c0 < c; c0 += 32 * V) {
            float acc[V], v[V];
#pragma unroll
            for (int i = 0; i < V; i++) acc[i] = 0.0f;
            for (int j0 = 0; j0 < k; j0 += kRowBatch) {
                sl_raw<T, V> r[kRowBatch];
                unsigned ok = 0; /* bit u: r[u] holds a row (a mask: a bool array spilled) */
#pragma unroll
                for (int u = 0; u < kRowBatch; u++) {
                    const int64_t row = j0 + u < k ? sp[t * k + j0 + u] : -1;
                    if (row >= 0 && row < xrows) { /* no read out of bounds */
                        r[u].load(x + row * c + c0);
                        ok |= 1u << u;
                    }
                }
#pragma unroll
                for (int u = 0; u < kRowBatch; u++) {
                    if (!(ok >> u & 1u)) continue;
                    const float wj = w[t * k + j0 + u];
#pragma unroll
                    for (int i = 0; i < V; i++) acc[i] += wj * r[u].at(i);
                }
            }
            if (res) {
                sl_moe_vload<T, V>(v, res + t * c + c0);
#pragma unroll
                for (int i = 0; i < V; i++) acc[i] = v[i] + acc[i];
            }
            sl_moe_vstore<T, V>(y + t * c + c0, acc);
        }
    }
}

template <typename T>
static void combine_launch(cudaStream_t st, sl_tensor *y, const sl_tensor *x,
                           const sl_tensor *slot_pos, const sl_tensor *w, const sl_tensor *res) {
    const int64_t n = sl_rows(y), c = sl_last_dim(y);
    const T *pres = res ? sl_ptr<T>(res) : NULL;
    const bool vec = sl_moe_rows_vec16<T>(c, y->data, x->data, res ? res->data : NULL);
    SL_MOE_ROW_LAUNCH(combine_kernel, T, vec, "moe_combine", st, n, sl_ptr<T>(y), sl_ptr<T>(x),
                      sl_ptr<int32_t>(slot_pos), sl_ptr<float>(w), pres, n, (int)sl_last_dim(w), c,
                      sl_rows(x));
}

} // namespace

extern "C" void sl_cuda_moe_combine(void *ctx, sl_tensor *y, const sl_tensor *x,
                                    const sl_tensor *slot_pos, const sl_tensor *w,
                                    const sl_tensor *res) {
    if (y->numel == 0) return;
    SL_DISPATCH_FLOAT(y->dtype, T, combine_launch<T>(sl_cuda_stream(ctx), y, x, slot_pos, w, res));
}

namespace {

/* Backward, one warp per slot p = t k + j: dx[slot_pos[p]] = w[p] dy[t] and dw[p] = <dy[t],
 * x[slot_pos[p]]> (fp32, each lane's elements in order, then the warp's butterfly: a fixed
 * order). The k warps of a token read the same dy row, mostly from cache. dw null (x too): dx
 * alone, x never read. */
template <typename T, int V>
__global__ void SL_MOE_ROW_BOUNDS combine_bwd_kernel(T *__restrict__ dx, float *__restrict__ dw,
                                                     const T *__restrict__ dy,
                                                     const T *__restrict__ x,
                                                     const int32_t *__restrict__ sp,
                                                     const float *__restrict__ w, int64_t slots,
                                                     int k, int64_t c, int64_t rows) {
    const int lane = threadIdx.x & 31;
    SL_MOE_FOR_WARP_ROWS(p, slots) {
        const int64_t row = sp[p], tok = p / k;
        const float wj = w[p];
        if (!dw) {
            if (row >= 0 && row < rows)
                sl_moe_scale_row<T, V>(dx + row * c, dy + tok * c, c, wj, lane);
            continue;
        }
        float dot = 0.0f;
        if (row >= 0 && row < rows)
            dot = sl_moe_scale_dot_row<T, V>(dx + row * c, dy + tok * c, x + row * c, c, wj, lane);
        dot = sl_warp_sum(dot);
        if (lane == 0) dw[p] = dot;
    }
}

template <typename T>
static void combine_bwd_launch(cudaStream_t st, sl_tensor *dx, sl_tensor *dw, const sl_tensor *dy,
                               const sl_tensor *x, const sl_tensor *slot_pos, const sl_tensor *w) {
    const int64_t slots = w->numel, c = sl_last_dim(dx);
    const int64_t rows = x && sl_rows(x) < sl_rows(dx) ? sl_rows(x) : sl_rows(dx);
    SL_MOE_ROW_LAUNCH(combine_bwd_kernel, T,
                      sl_moe_rows_vec16<T>(c, dx->data, dy->data, x ? x->data : nullptr),
                      "moe_combine_bwd", st, slots, sl_ptr<T>(dx), dw ? sl_ptr<float>(dw) : nullptr,
                      sl_ptr<T>(dy), x ? sl_ptr<T>(x) : nullptr, sl_ptr<int32_t>(slot_pos),
                      sl_ptr<float>(w), slots, (int)sl_last_dim(w), c, rows);
}

} // namespace

extern "C" void sl_cuda_moe_combine_bwd(void *ctx, sl_tensor *dx, sl_tensor *dw,
                                        const sl_tensor *dy, const sl_tensor *x,
                                        const sl_tensor *slot_pos, const sl_tensor *w) {
    if (w->numel == 0) return;
    SL_DISPATCH_FLOAT(dx->dtype, T,
                      combine_bwd_launch<T>(sl_cuda_stream(ctx), dx, dw, dy, x, slot_pos, w));
}
