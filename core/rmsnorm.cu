/*
 * core/rmsnorm.cu - RMSNorm forward and backward on the GPU (CPU twin: core/rmsnorm_cpu.c;
 * semantics: core/ops.h). x, y, w, dx, dy share the dtype T; rstd is fp32; dw is fp32 or bf16.
 *
 * One warp per row: rows are the decoder's hidden states (width 2048 in the paper's configs),
 * short enough for a warp, and a warp needs no block barrier for its row sums. Lanes take packs
 * of 8 elements (16-byte accesses) when the width is a multiple of 8 and the pointers are
 * aligned, else single elements; lane l always owns packs l, l + 32, ... of a row.
 *
 * Backward, with r = rstd, xh = x r:  dx = r (dy w - xh mean(dy w xh)) (+ dres, the residual
 * path's gradient, added in fp32 before the one rounding to T: the axpy that followed the norm
 * in the decoder's backward, without its read and write of dx) (written) and
 * dw += sum over rows of dy xh (accumulated), deterministically and without float atomics; with
 * the optional fp32 dy_add, dy is T(dy + dy_add) throughout (the add the router's gradient
 * needed before the norm, folded in: core/ops.h);
 * block b owns a contiguous chunk of rows, its 8 warps take the chunk's rows in turn, each warp
 * sums dy xh over its rows column by column, the block adds its warps' sums in warp order into
 * one partial dw row, and k_rmsnorm_dw adds the partial rows to dw column by column in a fixed
 * order. The number of partials depends only on the number of rows, so results do not depend
 * on the GPU.
 *
 * Two paths, the same bits (each operation rounded on its own, below, and the same sums in the
 * same order; test_cuda_kernels compares them):
 *   - the row path (packs, rows of at most max_np packs per lane: 2,048 columns in bf16, 1,024
 *     in fp32): a lane loads all its packs of x, dy (backward: and dres) before it computes, in
 *     registers as loaded (bf16 stays bf16 there), so a row costs one round trip to memory; the
 *     backward's column sums live in shared memory, one row per warp, to leave the registers
 *     to the loads. The window path's loops, with a load per pack after the previous pack's
 *     store, kept a few hundred bytes in flight per warp: the backward at a width of 2,048 was
 *     about eight round trips per row (docs/performance.md, 2026-11-28).
 *   - the window path (any width, element accesses too): a lane accumulates its share of dw in
 *     registers across rows, which bounds the columns it can own, so wider rows run in column
 *     windows, each launch covering one window (and recomputing the row's dot product, which
 *     needs the whole row).
 * SLUICE_RMSNORM=windows (or sl_cuda_rmsnorm_set_path) takes the window path everywhere.
 */
#include <cstring>

#include "core/backend_cuda.cuh"
#include "core/cuda_pack.cuh"
#include "core/env.h"
#include "core/kernels_cuda.h"
#include "core/log.h"
#include "core/ptx.cuh"

namespace {

constexpr int kWarps = 8, kThreads = 32 * kWarps;
/* Partial dw rows (blocks of the backward) at most. */
constexpr int64_t kMaxPartials = 512;

/* The path (the header): 0 rows where they fit, 1 windows; -1 unset, SLUICE_RMSNORM at first use.
 */
const char *const k_path_names[] = {"rows", "windows"};
int g_path = -1;

bool row_path(void) {
    if (g_path < 0) {
        const int i = sl_env_choice("SLUICE_RMSNORM", k_path_names, 2);
        g_path = i < 0 ? 0 : i;
    }
    return g_path == 0;
}

/* Columns one lane can own: packs (VEC = 8) or elements (VEC = 1) per lane, at most. fp32 packs
 * are two 16-byte accesses each: 8 of them per lane with the residual's add took 8 bytes of
 * spills on sm_80 (ptxas keeps the window kernel at 128 registers there), so fp32 rows run in
 * windows of 1,024 columns (bf16: 2,048, the hidden width in one window). The row path holds up
 * to three operands' packs as loaded: 3 x 8 x 16 bytes per lane in bf16, 3 x 4 x 32 in fp32. */
template <typename T, int VEC> constexpr int max_np() {
    return VEC == SL_PACK ? (sizeof(T) == 4 ? 4 : 8) : 32;
}

/* A pack as loaded (core/cuda_pack.cuh): the row path's registers. */
template <typename T> using raw8 = sl_raw<T, SL_PACK>;

/* The element arithmetic both paths share, each operation rounded on its own: nvcc contracts
 * a * b + c into an fma wherever it sees one, and how depends on the code around it, so two
 * kernels written with plain operators may round differently (AdamW's forms did, on an H200). */
__device__ __forceinline__ float fwd_sumsq(float ss, float x) {
    return __fmaf_rn(x, x, ss);
}
/* dot + dy w (x r) */
__device__ __forceinline__ float bwd_dot(float dot, float g, float w, float x, float r) {
    return __fmaf_rn(__fmul_rn(g, w), __fmul_rn(x, r), dot);
}
/* r (dy w - xh mean) */
__device__ __forceinline__ float bwd_dx(float g, float w, float xh, float mean, float r) {
    return __fmul_rn(r, __fsub_rn(__fmul_rn(g, w), __fmul_rn(xh, mean)));
}
/* dy + dy_add rounded to T: what the add that the fold replaces stored in dy */
template <typename T> __device__ __forceinline__ float dy_plus(float g, float a) {
    return sl_ld(sl_st<T>(g + a));
}
/* acc + dy xh */
__device__ __forceinline__ float bwd_dw(float acc, float g, float xh) {
    return __fmaf_rn(g, xh, acc);
}

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
        for (int k = 0; k < VEC; k++) ss = fwd_sumsq(ss, v[k]);
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

/* The row path's forward: warp w of block b normalizes row 8b + w, its NP packs per lane loaded
 * before anything is summed (one round trip), then scaled from the registers. */
template <typename T, int NP>
__global__ void __launch_bounds__(kThreads)
    k_rmsnorm_fwd_row(T *y, float *rstd, const T *x, const T *__restrict__ w, int64_t rows, int d,
                      float eps) {
    const int lane = threadIdx.x & 31;
    const int64_t row = (int64_t)blockIdx.x * kWarps + (threadIdx.x >> 5);
    if (row >= rows) return; /* the whole warp: no barrier below, only warp shuffles */
    const T *xr = x + row * d;
    T *yr = y + row * d;
    const int npk = d / SL_PACK;
    raw8<T> xs[NP];
    SL_UNROLL
    for (int k = 0; k < NP; k++)
        if (lane + 32 * k < npk) xs[k].load(xr + (lane + 32 * k) * SL_PACK);
    float ss = 0.0f;
    SL_UNROLL
    for (int k = 0; k < NP; k++) {
        if (lane + 32 * k < npk) {
            float v[SL_PACK];
            xs[k].unpack(v);
            SL_UNROLL
            for (int e = 0; e < SL_PACK; e++) ss = fwd_sumsq(ss, v[e]);
        }
    }
    ss = sl_warp_sum(ss);
    const float s = 1.0f / sqrtf(ss / (float)d + eps);
    if (lane == 0) rstd[row] = s;
    SL_UNROLL
    for (int k = 0; k < NP; k++) {
        const int p = lane + 32 * k;
        if (p < npk) {
            float v[SL_PACK], wv[SL_PACK];
            xs[k].unpack(v);
            sl_ld8(w + p * SL_PACK, wv);
            SL_UNROLL
            for (int e = 0; e < SL_PACK; e++) v[e] = v[e] * s * wv[e];
            sl_st8(yr + p * SL_PACK, v);
        }
    }
}

/* ---- backward ---- */

/* Rows [b * rpb, (b + 1) * rpb) of block b, columns [c0, c0 + cw) of the window: writes dx
 * there and part[b * cw + j] = sum over the block's rows of dy xh at column c0 + j. Lane l owns
 * the window's packs l + 32 k, k < NP. Dynamic shared memory: cw floats. */
template <typename T, int VEC, int NP>
__global__ void __launch_bounds__(kThreads)
    k_rmsnorm_bwd(T *dx, float *part, const T *dy, const float *dy_add, const T *x, const T *w,
                  const float *rstd, const T *dres, int64_t rows, int64_t rpb, int d, int c0,
                  int cw) {
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
            if (dy_add) {
                float av[VEC];
                sl_ldv<VEC>(dy_add + row * d + p * VEC, av);
                SL_UNROLL
                for (int e = 0; e < VEC; e++) gv[e] = dy_plus<T>(gv[e], av[e]);
            }
            SL_UNROLL
            for (int e = 0; e < VEC; e++) dot = bwd_dot(dot, gv[e], wv[e], xv[e], s);
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
                if (dy_add) { /* into out, written below */
                    sl_ldv<VEC>(dy_add + row * d + col, out);
                    SL_UNROLL
                    for (int e = 0; e < VEC; e++) gv[e] = dy_plus<T>(gv[e], out[e]);
                }
                SL_UNROLL
                for (int e = 0; e < VEC; e++) {
                    const float xh = xv[e] * s;
                    out[e] = bwd_dx(gv[e], wv[e], xh, mean, s);
                    acc[k][e] = bwd_dw(acc[k][e], gv[e], xh);
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

/* Starts copying a lane's packs (lane + 32 k, k < NP, below npk) of a row from src to the same
 * places of dst in shared memory, as one cp.async group: registers stay free while they
 * travel, and the lane waits for the group before it reads them. */
template <int NP, typename U>
__device__ __forceinline__ void copy_packs_async(U *dst, const U *src, int npk, int lane) {
    SL_UNROLL
    for (int k = 0; k < NP; k++) {
        const int p = lane + 32 * k;
        if (p < npk)
            for (int b = 0; b < (int)(SL_PACK * sizeof(U)); b += 16)
                sl_cp_async_16((char *)(dst + p * SL_PACK) + b,
                               (const char *)(src + p * SL_PACK) + b);
    }
    sl_cp_async_commit();
}

/* The row path's backward: rows [b * rpb, (b + 1) * rpb) of block b, the whole row (NP packs per
 * lane at most). Per row a lane starts copying its packs of dres into its warp's row of shared
 * memory (cp.async: no registers held while they travel), loads its packs of x and dy into
 * registers, and only then computes: one round trip per row. dres may be dx: each element is
 * read before it is written, and only this warp writes the row. The lane then writes dx and adds
 * dy xh into its warp's row of column sums in shared memory. The block's partial
 * part[b * d + j] is the sum of its warps' rows in warp order: the window path's sum, in the
 * same order. dy_add's row comes by cp.async too and is folded into the registers' dy (rounded
 * to T, as stored by the add it replaces) before the dot product. Dynamic shared memory: kWarps
 * x d floats (the sums), with dy_add kWarps x d floats, with dres kWarps x d T. */
template <typename T, int NP>
__global__ void __launch_bounds__(kThreads, 2)
    k_rmsnorm_bwd_row(T *dx, float *part, const T *dy, const float *dy_add, const T *x, const T *w,
                      const float *rstd, const T *dres, int64_t rows, int64_t rpb, int d) {
    SL_DYNAMIC_SMEM(float, sums);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int npk = d / SL_PACK;
    float *acc = sums + (int64_t)warp * d; /* this warp's column sums; lane-owned packs */
    float *add = sums + (int64_t)(kWarps + warp) * d; /* with dy_add: this warp's row of it */
    T *res =
        reinterpret_cast<T *>(sums + (int64_t)kWarps * d * (dy_add ? 2 : 1)) + (int64_t)warp * d;
    SL_UNROLL
    for (int k = 0; k < NP; k++) {
        const int p = lane + 32 * k;
        if (p < npk) {
            const float z[SL_PACK] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
            sl_st8(acc + p * SL_PACK, z);
        }
    }
    const int64_t r0 = (int64_t)blockIdx.x * rpb;
    const int64_t r1 = r0 + rpb < rows ? r0 + rpb : rows;
    for (int64_t row = r0 + warp; row < r1; row += kWarps) {
        const T *xr = x + row * d, *dyr = dy + row * d;
        /* each lane reads back only the bytes it copied: no barrier */
        if (dy_add) copy_packs_async<NP>(add, dy_add + row * d, npk, lane);
        if (dres) copy_packs_async<NP>(res, dres + row * d, npk, lane);
        raw8<T> xs[NP], gs[NP];
        SL_UNROLL
        for (int k = 0; k < NP; k++) {
            const int p = lane + 32 * k;
            if (p < npk) {
                xs[k].load(xr + p * SL_PACK);
                gs[k].load(dyr + p * SL_PACK);
            }
        }
        if (dy_add) { /* dy = T(dy + dy_add), in the registers as loaded */
            if (dres)
                sl_cp_async_wait<1>(); /* dy_add's group (the older); dres may still travel */
            else
                sl_cp_async_wait<0>();
            SL_UNROLL
            for (int k = 0; k < NP; k++) {
                const int p = lane + 32 * k;
                if (p < npk) {
                    float gv[SL_PACK], av[SL_PACK];
                    gs[k].unpack(gv);
                    sl_ld8(add + p * SL_PACK, av);
                    SL_UNROLL
                    for (int e = 0; e < SL_PACK; e++) gv[e] = dy_plus<T>(gv[e], av[e]);
                    gs[k].set(gv);
                }
            }
        }
        const float s = rstd[row];
        float dot = 0.0f; /* sum over the whole row of dy w xh */
        SL_UNROLL
        for (int k = 0; k < NP; k++) {
            const int p = lane + 32 * k;
            if (p < npk) {
                float xv[SL_PACK], gv[SL_PACK], wv[SL_PACK];
                xs[k].unpack(xv);
                gs[k].unpack(gv);
                sl_ld8(w + p * SL_PACK, wv);
                SL_UNROLL
                for (int e = 0; e < SL_PACK; e++) dot = bwd_dot(dot, gv[e], wv[e], xv[e], s);
            }
        }
        const float mean = sl_warp_sum(dot) / (float)d;
        if (dres) sl_cp_async_wait<0>();
        SL_UNROLL
        for (int k = 0; k < NP; k++) {
            const int p = lane + 32 * k;
            if (p < npk) {
                float xv[SL_PACK], gv[SL_PACK], wv[SL_PACK], out[SL_PACK], a[SL_PACK];
                xs[k].unpack(xv);
                gs[k].unpack(gv);
                sl_ld8(w + p * SL_PACK, wv);
                sl_ld8(acc + p * SL_PACK, a);
                SL_UNROLL
                for (int e = 0; e < SL_PACK; e++) {
                    const float xh = xv[e] * s;
                    out[e] = bwd_dx(gv[e], wv[e], xh, mean, s);
                    a[e] = bwd_dw(a[e], gv[e], xh);
                }
                if (dres) {
                    raw8<T> rv; /* into xv, dead by now */
                    rv.load(res + p * SL_PACK);
                    rv.unpack(xv);
                    SL_UNROLL
                    for (int e = 0; e < SL_PACK; e++) out[e] += xv[e];
                }
                sl_st8(acc + p * SL_PACK, a);
                sl_st8(dx + row * d + p * SL_PACK, out);
            }
        }
    }
    __syncthreads();
    for (int j = threadIdx.x; j < d; j += blockDim.x) {
        float t = 0.0f;
        for (int wi = 0; wi < kWarps; wi++) t += sums[(int64_t)wi * d + j];
        part[(int64_t)blockIdx.x * d + j] = t;
    }
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

/* The window kernel with the fewest packs per lane (NP = 1, 2, 4, ..., max_np) that hold np: only
 * the widths a window can have are instantiated. */
template <typename T, int VEC, int NP = 1>
void bwd_window_launch(int np, void *ctx, T *dx, float *part, const T *dy, const float *dy_add,
                       const T *x, const T *w, const float *rstd, const T *dres, int64_t rows,
                       int64_t rpb, int nparts, int d, int c0, int cw) {
    if constexpr (NP < max_np<T, VEC>()) {
        if (np > NP)
            return bwd_window_launch<T, VEC, 2 * NP>(np, ctx, dx, part, dy, dy_add, x, w, rstd,
                                                     dres, rows, rpb, nparts, d, c0, cw);
    }
    auto *const bwd_kernel = k_rmsnorm_bwd<T, VEC, NP>;
    SL_LAUNCH(bwd_kernel, (unsigned)nparts, kThreads, sizeof(float) * (size_t)cw,
              sl_cuda_stream(ctx), dx, part, dy, dy_add, x, w, rstd, dres, rows, rpb, d, c0, cw);
    SL_CUDA_LAUNCHED("rmsnorm_bwd");
}

/* The row path's backward with the fewest packs per lane that hold np (at most max_np). */
template <typename T, int NP = 1>
void bwd_row_launch(int np, void *ctx, T *dx, float *part, const T *dy, const float *dy_add,
                    const T *x, const T *w, const float *rstd, const T *dres, int64_t rows,
                    int64_t rpb, int nparts, int d) {
    if constexpr (NP < max_np<T, SL_PACK>()) {
        if (np > NP)
            return bwd_row_launch<T, 2 * NP>(np, ctx, dx, part, dy, dy_add, x, w, rstd, dres, rows,
                                             rpb, nparts, d);
    }
    auto *const kernel = k_rmsnorm_bwd_row<T, NP>;
    const size_t per_col =
        sizeof(float) * (dy_add ? 2 : 1) + (dres ? sizeof(T) : 0); /* bytes per warp and column */
    const size_t smem = per_col * (size_t)kWarps * d;
    sl_cuda_raise_smem<k_rmsnorm_bwd_row<T, NP>>(smem, "rmsnorm_bwd");
    SL_LAUNCH(kernel, (unsigned)nparts, kThreads, smem, sl_cuda_stream(ctx), dx, part, dy, dy_add,
              x, w, rstd, dres, rows, rpb, d);
    SL_CUDA_LAUNCHED("rmsnorm_bwd");
}

/* The row path's forward with the fewest packs per lane that hold the row's; false where the row
 * is wider than max_np packs per lane (the window kernel's forward then). */
template <typename T, int NP = 1>
bool fwd_row_launch(void *ctx, T *y, float *rstd, const T *x, const T *w, int64_t rows, int d,
                    float eps) {
    const int np = (d / SL_PACK + 31) / 32;
    if constexpr (NP < max_np<T, SL_PACK>()) {
        if (np > NP) return fwd_row_launch<T, 2 * NP>(ctx, y, rstd, x, w, rows, d, eps);
    } else {
        if (np > NP) return false;
    }
    auto *const kernel = k_rmsnorm_fwd_row<T, NP>;
    SL_LAUNCH(kernel, sl_blocks(rows, kWarps), kThreads, 0, sl_cuda_stream(ctx), y, rstd, x, w,
              rows, d, eps);
    SL_CUDA_LAUNCHED("rmsnorm_fwd");
    return true;
}

template <typename T, typename TW, int VEC>
void bwd_launch(void *ctx, T *dx, TW *dw, const T *dy, const float *dy_add, const T *x, const T *w,
                const float *rstd, const T *dres, int64_t rows, int d) {
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
        if (VEC == SL_PACK && c0 == 0 && cw == d && row_path())
            bwd_row_launch<T>(np, ctx, dx, part, dy, dy_add, x, w, rstd, dres, rows, rpb, nparts,
                              d);
        else
            bwd_window_launch<T, VEC>(np, ctx, dx, part, dy, dy_add, x, w, rstd, dres, rows, rpb,
                                      nparts, d, c0, cw);
        const float *cpart = part;
        auto *const dw_kernel = k_rmsnorm_dw<TW>;
        SL_LAUNCH(dw_kernel, sl_blocks(cw, 32), 32 * kGroups, 0, sl_cuda_stream(ctx), dw, cpart,
                  nparts, c0, cw);
        SL_CUDA_LAUNCHED("rmsnorm_bwd");
    }
}

} // namespace

extern "C" bool sl_cuda_rmsnorm_set_path(const char *name) {
    for (int i = 0; name && i < 2; i++)
        if (!strcmp(name, k_path_names[i])) {
            g_path = i;
            return true;
        }
    return false;
}

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
        const bool packs =
            d % SL_PACK == 0 && sl_aligned16(py) && sl_aligned16(px) && sl_aligned16(pw);
        if (packs && row_path() && fwd_row_launch<T>(ctx, py, pr, px, pw, rows, d, eps)) {
            /* the row path */
        } else if (packs) {
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
                                    const sl_tensor *dy_add, const sl_tensor *x, const sl_tensor *w,
                                    const sl_tensor *rstd, const sl_tensor *dres) {
    const int64_t d64 = w->numel, rows = x->numel / d64;
    SL_CHECK(d64 <= INT32_MAX, "rmsnorm_bwd: rows of %lld elements", (long long)d64);
    if (rows == 0) return; /* dx is empty and dw gains nothing */
    const int d = (int)d64;
    const float *padd = dy_add ? sl_ptr<float>(dy_add) : NULL;
    SL_DISPATCH_FLOAT(
        x->dtype, T, SL_DISPATCH_FLOAT(dw->dtype, TW, {
            T *pdx = sl_ptr<T>(dx);
            TW *pdw = sl_ptr<TW>(dw);
            const T *pdy = sl_ptr<T>(dy), *px = sl_ptr<T>(x), *pw = sl_ptr<T>(w);
            const float *pr = sl_ptr<float>(rstd);
            const T *pres = dres ? sl_ptr<T>(dres) : NULL;
            if (d % SL_PACK == 0 && sl_aligned16(pdx) && sl_aligned16(pdy) && sl_aligned16(px) &&
                sl_aligned16(pw) && sl_aligned16(pres) && sl_aligned16(padd))
                bwd_launch<T, TW, SL_PACK>(ctx, pdx, pdw, pdy, padd, px, pw, pr, pres, rows, d);
            else
                bwd_launch<T, TW, 1>(ctx, pdx, pdw, pdy, padd, px, pw, pr, pres, rows, d);
        }));
}
