/*
 * core/rmsnorm.cu - RMSNorm forward and backward on the GPU (CPU twin: core/rmsnorm_cpu.c;
 * semantics: core/ops.h). x, y, w, dx, dy share the dtype T; rstd is fp32; dw is fp32 or bf16.
 *
 * One warp per row: rows are the decoder's hidden states (width 2048 in the paper's configs)
 * and the per-head QK norm (width = head_dim, many rows), both short enough for a warp, and a
 * warp needs no block barrier for its row sums. Lanes take packs of 8 elements (16-byte
 * accesses) when the width is a multiple of 8 and the pointers are aligned, else single
 * elements. A row is read twice (its sum, then the output), the second time mostly from L1.
 *
 * Backward, with r = rstd, xh = x r:  dx = r (dy w - xh mean(dy w xh)) (+ dres, the residual
 * path's gradient, added in fp32 before the one rounding to T: the axpy that followed the norm
 * in the decoder's backward, without its read and write of dx) (written) and
 * dw += sum over rows of dy xh (accumulated), deterministically and without float atomics:
 *   1. k_rmsnorm_bwd: block b owns a contiguous chunk of rows; its 8 warps take the chunk's
 *      rows in turn. A lane always handles the same columns (packs lane, lane + 32, ...), so
 *      it accumulates its share of dw in registers across rows; at the end the warps add their
 *      registers into shared memory in warp order and the block writes one partial dw row.
 *   2. k_rmsnorm_dw adds the partial rows to dw column by column in a fixed order.
 * The number of partials depends only on the number of rows, so results do not depend on the
 * GPU. The registers bound the columns a lane can own (max_np packs), so wider rows run in
 * column windows: each launch covers one window of the row (and recomputes the row's dot
 * product, which needs the whole row).
 */
#include "core/cuda_pack.cuh"
#include "core/kernels_cuda.h"
#include "core/log.h"

namespace {

constexpr int kWarps = 8, kThreads = 32 * kWarps;
/* Partial dw rows (blocks of the backward) at most. */
constexpr int64_t kMaxPartials = 512;

/* ---- forward ---- */

/* Warp w of block b normalizes row 8b + w. */
template <typename T, int VEC>
__global__ void __launch_bounds__(kThreads)
    k_rmsnorm_fwd(T *y, float *rstd, const T *x, const T *w, int64_t rows, int d, float eps) {
    const int lane = threadIdx.x & 31;
    const int64_t row = (int64_t)blockIdx.x * kWarps + (threadIdx.x >> 5);
    if (row >= rows) return; /* the whole warp: no barrier below, only warp shuffles */
    const T *xr = x + row * d;
    T *yr = y + row * d;
    const int npk = d / VEC;
    float ss = 0.0f;
    for (int p = lane; p < npk; p += 32) {
        float v[VEC];
        sl_ldv<VEC>(xr + p * VEC, v);
        SL_UNROLL
        for (int k = 0; k < VEC; k++) ss += v[k] * v[k];
    }
    ss = sl_warp_sum(ss);
    const float s = 1.0f / sqrtf(ss / (float)d + eps);
    if (lane == 0) rstd[row] = s;
    for (int p = lane; p < npk; p += 32) {
        float v[VEC], wv[VEC];
        sl_ldv<VEC>(xr + p * VEC, v);
        sl_ldv<VEC>(w + p * VEC, wv);
        SL_UNROLL
        for (int k = 0; k < VEC; k++) v[k] = v[k] * s * wv[k];
        sl_stv<VEC>(yr + p * VEC, v);
    }
}

/* ---- backward ---- */

/* Rows [b * rpb, (b + 1) * rpb) of block b, columns [c0, c0 + cw) of the window: writes dx
 * there and part[b * cw + j] = sum over the block's rows of dy xh at column c0 + j. Lane l owns
 * the window's packs l + 32 k, k < NP. Dynamic shared memory: cw floats. */
template <typename T, int VEC, int NP>
__global__ void __launch_bounds__(kThreads)
    k_rmsnorm_bwd(T *dx, float *part, const T *dy, const T *x, const T *w, const float *rstd,
                  const T *dres, int64_t rows, int64_t rpb, int d, int c0, int cw) {
    SL_DYNAMIC_SMEM(float, sdw);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int npk = d / VEC, wpk = cw / VEC;
    const int64_t r0 = (int64_t)blockIdx.x * rpb;
    const int64_t r1 = r0 + rpb < rows ? r0 + rpb : rows;
    float acc[NP][VEC];
    SL_UNROLL
    for (int k = 0; k < NP; k++) {
        SL_UNROLL
        for (int e = 0; e < VEC; e++) acc[k][e] = 0.0f;
    }

    for (int64_t row = r0 + warp; row < r1; row += kWarps) {
        const T *xr = x + row * d, *dyr = dy + row * d;
        const float s = rstd[row];
        float dot = 0.0f; /* sum over the whole row of dy w xh */
        for (int p = lane; p < npk; p += 32) {
            float xv[VEC], gv[VEC], wv[VEC];
            sl_ldv<VEC>(xr + p * VEC, xv);
            sl_ldv<VEC>(dyr + p * VEC, gv);
            sl_ldv<VEC>(w + p * VEC, wv);
            SL_UNROLL
            for (int e = 0; e < VEC; e++) dot += gv[e] * wv[e] * (xv[e] * s);
        }
        const float mean = sl_warp_sum(dot) / (float)d;
        SL_UNROLL
        for (int k = 0; k < NP; k++) {
            const int p = lane + 32 * k;
            if (p < wpk) {
                const int col = c0 + p * VEC;
                float xv[VEC], gv[VEC], wv[VEC], out[VEC];
                sl_ldv<VEC>(xr + col, xv);
                sl_ldv<VEC>(dyr + col, gv);
                sl_ldv<VEC>(w + col, wv);
                SL_UNROLL
                for (int e = 0; e < VEC; e++) {
                    const float xh = xv[e] * s;
                    out[e] = s * (gv[e] * wv[e] - xh * mean);
                    acc[k][e] += gv[e] * xh;
                }
                if (dres) { /* read before the write: dres may be dx, element for element; into
                             * xv, dead by now (a fresh array spilled at NP 8 in fp32) */
                    sl_ldv<VEC>(dres + row * d + col, xv);
                    SL_UNROLL
                    for (int e = 0; e < VEC; e++) out[e] += xv[e];
                }
                sl_stv<VEC>(dx + row * d + col, out);
            }
        }
    }

    /* The block's partial: warps add their registers in warp order (one warp at a time). */
    for (int j = threadIdx.x; j < cw; j += blockDim.x) sdw[j] = 0.0f;
    __syncthreads();
    for (int wi = 0; wi < kWarps; wi++) {
        if (warp == wi) {
            SL_UNROLL
            for (int k = 0; k < NP; k++) {
                const int p = lane + 32 * k;
                if (p < wpk) {
                    SL_UNROLL
                    for (int e = 0; e < VEC; e++) sdw[p * VEC + e] += acc[k][e];
                }
            }
        }
        __syncthreads();
    }
    for (int j = threadIdx.x; j < cw; j += blockDim.x) part[(int64_t)blockIdx.x * cw + j] = sdw[j];
}

/* dw[c0 + j] += sum over b < nparts of part[b * cw + j]. A block of 32 x kGroups threads
 * takes 32 columns: thread (x, y) sums the y-th contiguous range of partials of column x (8
 * loads in flight, added in order), then thread (x, 0) adds the kGroups range sums in order -
 * a fixed order, and many threads in flight even when the row is narrow. */
constexpr int kGroups = 16;
template <typename TW>
__global__ void __launch_bounds__(32 * kGroups)
    k_rmsnorm_dw(TW *dw, const float *part, int nparts, int c0, int cw) {
    __shared__ float sums[kGroups][32];
    const int x = threadIdx.x & 31, y = threadIdx.x >> 5;
    const int j = blockIdx.x * 32 + x;
    const int chunk = (nparts + kGroups - 1) / kGroups;
    const int b0 = y * chunk, b1 = b0 + chunk < nparts ? b0 + chunk : nparts;
    float acc = 0.0f;
    if (j < cw) {
        int b = b0;
        for (; b + 8 <= b1; b += 8) {
            float v[8];
            SL_UNROLL
            for (int k = 0; k < 8; k++) v[k] = part[(int64_t)(b + k) * cw + j];
            SL_UNROLL
            for (int k = 0; k < 8; k++) acc += v[k];
        }
        for (; b < b1; b++) acc += part[(int64_t)b * cw + j];
    }
    sums[y][x] = acc;
    __syncthreads();
    if (y == 0 && j < cw) {
        float total = sums[0][x];
        for (int g = 1; g < kGroups; g++) total += sums[g][x];
        dw[c0 + j] = sl_st<TW>(sl_ld(dw[c0 + j]) + total);
    }
}

/* Columns one lane can own: packs (VEC = 8) or elements (VEC = 1) per lane, at most. fp32 packs
 * are two 16-byte accesses each: 8 of them per lane with the residual's add took 8 bytes of
 * spills on sm_80 (ptxas keeps this kernel at 128 registers there), so fp32 rows run in windows
 * of 1,024 columns (bf16: 2,048, the hidden width in one window). */
template <typename T, int VEC> constexpr int max_np() {
    return VEC == SL_PACK ? (sizeof(T) == 4 ? 4 : 8) : 32;
}

/* The row kernel with the fewest packs per lane (NP = 1, 2, 4, ..., max_np) that hold np: only
 * the widths a window can have are instantiated. */
template <typename T, int VEC, int NP = 1>
void bwd_rows_launch(int np, void *ctx, T *dx, float *part, const T *dy, const T *x, const T *w,
                     const float *rstd, const T *dres, int64_t rows, int64_t rpb, int nparts, int d,
                     int c0, int cw) {
    if constexpr (NP < max_np<T, VEC>()) {
        if (np > NP)
            return bwd_rows_launch<T, VEC, 2 * NP>(np, ctx, dx, part, dy, x, w, rstd, dres, rows,
                                                   rpb, nparts, d, c0, cw);
    }
    auto *const bwd_kernel = k_rmsnorm_bwd<T, VEC, NP>;
    SL_LAUNCH(bwd_kernel, (unsigned)nparts, kThreads, sizeof(float) * (size_t)cw,
              sl_cuda_stream(ctx), dx, part, dy, x, w, rstd, dres, rows, rpb, d, c0, cw);
    SL_CUDA_LAUNCHED("rmsnorm_bwd");
}

template <typename T, typename TW, int VEC>
void bwd_launch(void *ctx, T *dx, TW *dw, const T *dy, const T *x, const T *w, const float *rstd,
                const T *dres, int64_t rows, int d) {
    /* Blocks: one per 8 rows, at most kMaxPartials, each a contiguous chunk of rows. */
    const int64_t want = (rows + kWarps - 1) / kWarps;
    const int64_t g0 = want < kMaxPartials ? want : kMaxPartials;
    const int64_t rpb = (rows + g0 - 1) / g0;
    const int nparts = (int)((rows + rpb - 1) / rpb);
    const int window = 32 * VEC * max_np<T, VEC>();
    for (int c0 = 0; c0 < d; c0 += window) {
        const int cw = d - c0 < window ? d - c0 : window;
        float *part = (float *)sl_cuda_scratch(ctx, 0, sizeof(float) * (size_t)nparts * cw);
        const int np = (cw / VEC + 31) / 32; /* packs per lane */
        bwd_rows_launch<T, VEC>(np, ctx, dx, part, dy, x, w, rstd, dres, rows, rpb, nparts, d, c0,
                                cw);
        const float *cpart = part;
        auto *const dw_kernel = k_rmsnorm_dw<TW>;
        SL_LAUNCH(dw_kernel, sl_blocks(cw, 32), 32 * kGroups, 0, sl_cuda_stream(ctx), dw, cpart,
                  nparts, c0, cw);
        SL_CUDA_LAUNCHED("rmsnorm_bwd");
    }
}

} // namespace

extern "C" void sl_cuda_rmsnorm_fwd(void *ctx, sl_tensor *y, sl_tensor *rstd, const sl_tensor *x,
                                    const sl_tensor *w, float eps) {
    const int64_t d64 = w->numel, rows = x->numel / d64;
    SL_CHECK(d64 <= INT32_MAX, "rmsnorm_fwd: rows of %lld elements", (long long)d64);
    if (rows == 0) return;
    const int d = (int)d64;
    const unsigned blocks = sl_blocks(rows, kWarps);
    SL_DISPATCH_FLOAT(x->dtype, T, {
        T *py = sl_ptr<T>(y);
        float *pr = sl_ptr<float>(rstd);
        const T *px = sl_ptr<T>(x), *pw = sl_ptr<T>(w);
        if (d % SL_PACK == 0 && sl_aligned16(py) && sl_aligned16(px) && sl_aligned16(pw)) {
            auto *const fwd_kernel = k_rmsnorm_fwd<T, SL_PACK>;
            SL_LAUNCH(fwd_kernel, blocks, kThreads, 0, sl_cuda_stream(ctx), py, pr, px, pw, rows, d,
                      eps);
        } else {
            auto *const fwd_kernel = k_rmsnorm_fwd<T, 1>;
            SL_LAUNCH(fwd_kernel, blocks, kThreads, 0, sl_cuda_stream(ctx), py, pr, px, pw, rows, d,
                      eps);
        }
        SL_CUDA_LAUNCHED("rmsnorm_fwd");
    });
}

extern "C" void sl_cuda_rmsnorm_bwd(void *ctx, sl_tensor *dx, sl_tensor *dw, const sl_tensor *dy,
                                    const sl_tensor *x, const sl_tensor *w, const sl_tensor *rstd,
                                    const sl_tensor *dres) {
    const int64_t d64 = w->numel, rows = x->numel / d64;
    SL_CHECK(d64 <= INT32_MAX, "rmsnorm_bwd: rows of %lld elements", (long long)d64);
    if (rows == 0) return; /* dx is empty and dw gains nothing */
    const int d = (int)d64;
    SL_DISPATCH_FLOAT(x->dtype, T, SL_DISPATCH_FLOAT(dw->dtype, TW, {
                          T *pdx = sl_ptr<T>(dx);
                          TW *pdw = sl_ptr<TW>(dw);
                          const T *pdy = sl_ptr<T>(dy), *px = sl_ptr<T>(x), *pw = sl_ptr<T>(w);
                          const float *pr = sl_ptr<float>(rstd);
                          const T *pres = dres ? sl_ptr<T>(dres) : NULL;
                          if (d % SL_PACK == 0 && sl_aligned16(pdx) && sl_aligned16(pdy) &&
                              sl_aligned16(px) && sl_aligned16(pw) && sl_aligned16(pres))
                              bwd_launch<T, TW, SL_PACK>(ctx, pdx, pdw, pdy, px, pw, pr, pres, rows,
                                                         d);
                          else
                              bwd_launch<T, TW, 1>(ctx, pdx, pdw, pdy, px, pw, pr, pres, rows, d);
                      }));
}
