/*
 * moe/router.cu - the MoE router on the GPU (always fp32; math and CPU twin: moe/router_cpu.c).
 *
 * One warp per token. E <= 1024: lane l holds the experts l, l + 32, l + 64, ... in registers
 * (NV = E / 32 rounded up to a power of two values per lane, a template parameter so that the
 * per-lane arrays stay in registers), so loads and stores of a row are coalesced and the
 * softmax needs two warp reductions. Top-k is k rounds of a warp argmax over (score desc,
 * index asc): each lane scans its untaken experts, a butterfly over the 32 lanes leaves the
 * winner in every lane, and its owner marks it taken. That order is the CPU's insertion order
 * exactly (descending score, ties to the lower index).
 *
 * stats are deterministic without atomics: a block owns a fixed range of 8 tpw tokens (tpw
 * tokens per warp, router_tpw: a function of the token count alone); each lane accumulates its
 * experts' probabilities over its warp's tokens in registers, the block adds its warps in warp
 * order into a per-block partial (double), and a second kernel adds the partials in block order.
 *
 * A warp's tokens run one after another, each a chain of dependent steps (the row's load, two
 * warp reductions, k rounds of a 5-level argmax butterfly: about 1.5-2 us), so the kernel's time
 * is about tpw chains. With 16 tokens per warp, as before 2026-11-28, 4,096 tokens made 32
 * blocks: 32 of an H200's 132 SMs, each waiting on 16 chains one after another. router_tpw
 * takes the fewest tokens per warp (at least 1, at most 16) that keep the grid within
 * ROUTER_BLOCKS, so a micro-batch of 4,096 tokens runs 2 per warp in 256 blocks.
 */
#include <limits.h>

#include "core/cuda_common.cuh"
#include "core/log.h"
#include "moe/kernels_cuda.h"

namespace {

enum {
    ROUTER_WARPS = 8,        /* warps per block */
    ROUTER_MAX_TPW = 16,     /* tokens per warp in router_fwd, at most */
    ROUTER_BLOCKS = 2 * 132, /* router_fwd's grid, at most, once tokens per warp exceed 1 */
    ROUTER_MAX_E = 32 * 32,
};

/* router_fwd's tokens per warp for n tokens: the fewest (1 to ROUTER_MAX_TPW) that keep the grid
 * within ROUTER_BLOCKS (two per SM of an H100 or H200). A constant, not the device's SM count:
 * the partition decides the stats' summation order, which must not depend on the GPU. */
static int router_tpw(int64_t n) {
    const int64_t per_block = ROUTER_WARPS * (int64_t)ROUTER_BLOCKS;
    const int64_t tpw = (n + per_block - 1) / per_block;
    return tpw < 1 ? 1 : tpw > ROUTER_MAX_TPW ? ROUTER_MAX_TPW : (int)tpw;
}

/* Values per lane for E experts: 1, 2, 4, ..., 32. */
static int router_nv(int64_t e) {
    SL_CHECK(e >= 1 && e <= ROUTER_MAX_E, "cuda router: %lld experts (1..%d supported)",
             (long long)e, ROUTER_MAX_E);
    int nv = 1;
    while (32 * nv < e) nv *= 2;
    return nv;
}

/* Total order of the top-k selection: higher score first, equal scores to the lower index. */
__device__ __forceinline__ bool router_better(float v, int i, float bv, int bi) {
    return v > bv || (v == bv && i < bi);
}

template <int NV>
__global__ void __launch_bounds__(ROUTER_WARPS * 32)
    router_fwd_kernel(float *__restrict__ probs, int32_t *__restrict__ topk_idx,
                      float *__restrict__ topk_w, double *__restrict__ partial,
                      const float *__restrict__ logits, const float *__restrict__ bias, int64_t n,
                      int e, int k, int tpw, bool norm_topk) {
    SL_DYNAMIC_SMEM(float, sh); /* [ROUTER_WARPS][e + 1]: each warp's stats */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float b[NV], acc[NV];
    unsigned invalid = 0; /* bit i: expert lane + 32 i does not exist */
#pragma unroll
    for (int i = 0; i < NV; i++) {
        const int x = lane + 32 * i;
        b[i] = bias && x < e ? bias[x] : 0.0f;
        acc[i] = 0.0f;
        if (x >= e) invalid |= 1u << i;
    }
    float lse2 = 0.0f;
    for (int t = 0; t < tpw; t++) {
        const int64_t r = ((int64_t)blockIdx.x * tpw + t) * ROUTER_WARPS + warp;
        if (r >= n) continue; /* warp-uniform; no block barrier inside the loop */
        const float *l = logits + r * e;
        float p[NV];
        float m = -INFINITY;
#pragma unroll
        for (int i = 0; i < NV; i++) {
            const int x = lane + 32 * i;
            p[i] = x < e ? l[x] : -INFINITY;
            m = fmaxf(m, p[i]);
        }
        m = sl_warp_max(m);
        float s = 0.0f;
#pragma unroll
        for (int i = 0; i < NV; i++) {
            p[i] = (invalid >> i) & 1u ? 0.0f : expf(p[i] - m);
            s += p[i];
        }
        s = sl_warp_sum(s);
        const float inv = 1.0f / s, lse = m + logf(s);
        float *pr = probs + r * e;
#pragma unroll
        for (int i = 0; i < NV; i++) {
            p[i] *= inv;
            acc[i] += p[i];
            const int x = lane + 32 * i;
            if (x < e) pr[x] = p[i];
        }
        lse2 += lse * lse;
        /* top-k: k rounds of warp argmax over the untaken experts */
        unsigned taken = invalid;
        float wsum = 0.0f;
        int32_t *ti = topk_idx + r * k;
        float *tw = topk_w + r * k;
        for (int j = 0; j < k; j++) {
            float bv = -INFINITY, bp = 0.0f;
            int bi = INT_MAX; /* no candidate; any real expert beats it */
#pragma unroll
            for (int i = 0; i < NV; i++) {
                float sc = p[i] + b[i];
                sc = sc == sc ? sc : -INFINITY; /* a NaN score ranks last, consistently */
                const int x = lane + 32 * i;
                if (!((taken >> i) & 1u) && router_better(sc, x, bv, bi)) {
                    bv = sc;
                    bi = x;
                    bp = p[i];
                }
            }
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) {
                const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
                const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
                const float op = __shfl_xor_sync(0xffffffffu, bp, o);
                if (router_better(ov, oi, bv, bi)) {
                    bv = ov;
                    bi = oi;
                    bp = op;
                }
            }
            /* k <= e, so an untaken expert always exists and bi is one. */
            if (bi < e && (bi & 31) == lane) taken |= 1u << (bi >> 5);
            if ((j & 31) == lane) {
                ti[j] = bi;
                tw[j] = bp;
            }
            wsum += bp;
        }
        if (norm_topk) {
            /* Each lane rescales the weights it wrote itself: no cross-lane memory ordering. */
            const float winv = 1.0f / wsum;
            for (int j = lane; j < k; j += 32) tw[j] *= winv;
        }
    }
    /* The block's stats: warps' registers to shared memory, then added in warp order. */
#pragma unroll
    for (int i = 0; i < NV; i++) {
        const int x = lane + 32 * i;
        if (x < e) sh[warp * (e + 1) + x] = acc[i];
    }
    if (lane == 0) sh[warp * (e + 1) + e] = lse2;
    __syncthreads();
    for (int x = threadIdx.x; x <= e; x += blockDim.x) {
        double t = 0.0;
        for (int w = 0; w < ROUTER_WARPS; w++) t += (double)sh[w * (e + 1) + x];
        partial[(int64_t)blockIdx.x * (e + 1) + x] = t;
    }
}

/* stats[x] = sum over blocks of partial[b][x], x in [0, cols). Block: 32 columns x
 * kStatRows rows of threads; thread (c, y) adds the blocks y, y + kStatRows, ... in order (8
 * loads in flight), then row 0 adds the row sums in order: a fixed summation order. */
constexpr int kStatRows = 32;
__global__ void __launch_bounds__(32 * kStatRows)
    router_stats_kernel(float *__restrict__ stats, const double *__restrict__ partial, int64_t nblk,
                        int cols) {
    __shared__ double sh[kStatRows][33];
    const int cx = threadIdx.x & 31, y = threadIdx.x >> 5;
    const int x = blockIdx.x * 32 + cx;
    double t = 0.0;
    if (x < cols) {
#pragma unroll 8
        for (int64_t b = y; b < nblk; b += kStatRows) t += partial[b * cols + x];
    }
    sh[y][cx] = t;
    __syncthreads();
    if (y == 0 && x < cols) {
        double s = 0.0;
        for (int i = 0; i < kStatRows; i++) s += sh[i][cx];
        stats[x] = (float)s;
    }
}

template <int NV>
static void router_fwd_launch(void *ctx, sl_tensor *probs, sl_tensor *topk_idx, sl_tensor *topk_w,
                              sl_tensor *stats, const sl_tensor *logits, const sl_tensor *bias,
                              bool norm_topk) {
    const int64_t n = sl_rows(logits);
    const int e = (int)sl_last_dim(logits), k = (int)sl_last_dim(topk_idx);
    cudaStream_t st = sl_cuda_stream(ctx);
    const int tpw = router_tpw(n);
    const unsigned nblk = sl_blocks(n, ROUTER_WARPS * tpw); /* >= 1: n = 0 still writes zeros */
    double *partial =
        (double *)sl_cuda_scratch(ctx, 0, sizeof(double) * (size_t)nblk * (size_t)(e + 1));
    const size_t smem = sizeof(float) * ROUTER_WARPS * (size_t)(e + 1);
    SL_LAUNCH(router_fwd_kernel<NV>, nblk, ROUTER_WARPS * 32, smem, st, sl_ptr<float>(probs),
              sl_ptr<int32_t>(topk_idx), sl_ptr<float>(topk_w), partial, sl_ptr<float>(logits),
              sl_ptr<float>(bias), n, e, k, tpw, norm_topk);
    SL_CUDA_LAUNCHED("router_fwd");
    SL_LAUNCH(router_stats_kernel, sl_blocks(e + 1, 32), 32 * kStatRows, 0, st,
              sl_ptr<float>(stats), partial, (int64_t)nblk, e + 1);
    SL_CUDA_LAUNCHED("router_fwd");
}

} // namespace

extern "C" void sl_cuda_router_fwd(void *ctx, sl_tensor *probs, sl_tensor *topk_idx,
                                   sl_tensor *topk_w, sl_tensor *stats, const sl_tensor *logits,
                                   const sl_tensor *bias, bool norm_topk) {
#define ROUTER_FWD(NV)                                                                             \
    router_fwd_launch<NV>(ctx, probs, topk_idx, topk_w, stats, logits, bias, norm_topk)
    switch (router_nv(sl_last_dim(logits))) {
    case 1:
        ROUTER_FWD(1);
        break;
    case 2:
        ROUTER_FWD(2);
        break;
    case 4:
        ROUTER_FWD(4);
        break;
    case 8:
        ROUTER_FWD(8);
        break;
    case 16:
        ROUTER_FWD(16);
        break;
    default:
        ROUTER_FWD(32);
        break;
    }
#undef ROUTER_FWD
}

namespace {

/* Backward, one warp per token, the same register layout. dL/dp starts as lbl_grad; the k
 * combine-weight gradients are broadcast one by one (j order, as the CPU adds them) and added
 * by the lane owning the expert; the softmax backward and the z-loss term then need two warp
 * reductions (sum p dL/dp, and the log-sum-exp when z_scale != 0). */
template <int NV>
__global__ void __launch_bounds__(ROUTER_WARPS * 32)
    router_bwd_kernel(float *__restrict__ dlogits, const float *__restrict__ dtopk_w,
                      const float *__restrict__ probs, const int32_t *__restrict__ topk_idx,
                      const float *__restrict__ topk_w, const float *__restrict__ logits,
                      const float *__restrict__ lbl_grad, float z_scale, bool norm_topk, int64_t n,
                      int e, int k) {
    const int lane = threadIdx.x & 31;
    const int64_t r = (int64_t)blockIdx.x * ROUTER_WARPS + (threadIdx.x >> 5);
    if (r >= n) return; /* warp-uniform; no barriers below */
    const float *p = probs + r * e, *g = dtopk_w + r * k, *w = topk_w + r * k;
    const int32_t *idx = topk_idx + r * k;
    /* z-loss term first: the logits' registers are free again before dL/dp needs its own. */
    float zc = 0.0f;
    if (z_scale != 0.0f) {
        const float *l = logits + r * e;
        float lv[NV], m = -INFINITY;
#pragma unroll
        for (int i = 0; i < NV; i++) {
            const int x = lane + 32 * i;
            lv[i] = x < e ? l[x] : -INFINITY;
            m = fmaxf(m, lv[i]);
        }
        m = sl_warp_max(m);
        float s = 0.0f;
#pragma unroll
        for (int i = 0; i < NV; i++) s += lane + 32 * i < e ? expf(lv[i] - m) : 0.0f;
        s = sl_warp_sum(s);
        zc = 2.0f * z_scale * (m + logf(s));
    }
    float sel = 0.0f, gw = 0.0f; /* sum_j p[i_j], sum_j g_j w_j (norm_topk only) */
    if (norm_topk) {
        for (int j = lane; j < k; j += 32) {
            const int x = idx[j];
            sel += x >= 0 && x < e ? p[x] : 0.0f;
            gw += g[j] * w[j];
        }
        sel = sl_warp_sum(sel);
        gw = sl_warp_sum(gw);
    }
    float d[NV];
#pragma unroll
    for (int i = 0; i < NV; i++) {
        const int x = lane + 32 * i;
        d[i] = lbl_grad && x < e ? lbl_grad[x] : 0.0f;
    }
    for (int j0 = 0; j0 < k; j0 += 32) {
        const int j = j0 + lane;
        int xj = -1;
        float cj = 0.0f;
        if (j < k) {
            xj = idx[j];
            cj = norm_topk ? (g[j] - gw) / sel : g[j];
        }
        const int cnt = k - j0 < 32 ? k - j0 : 32;
        for (int t = 0; t < cnt; t++) {
            const int x = __shfl_sync(0xffffffffu, xj, t);
            const float c = __shfl_sync(0xffffffffu, cj, t);
#pragma unroll
            for (int i = 0; i < NV; i++)
                if (lane + 32 * i == x) d[i] += c;
        }
    }
    float pv[NV], dot = 0.0f;
#pragma unroll
    for (int i = 0; i < NV; i++) {
        const int x = lane + 32 * i;
        pv[i] = x < e ? p[x] : 0.0f;
        dot += pv[i] * d[i];
    }
    dot = sl_warp_sum(dot);
    float *dl = dlogits + r * e;
#pragma unroll
    for (int i = 0; i < NV; i++) {
        const int x = lane + 32 * i;
        if (x < e) dl[x] = pv[i] * (d[i] - dot + zc);
    }
}

template <int NV>
static void router_bwd_launch(void *ctx, sl_tensor *dlogits, const sl_tensor *dtopk_w,
                              const sl_tensor *probs, const sl_tensor *topk_idx,
                              const sl_tensor *topk_w, const sl_tensor *logits,
                              const sl_tensor *lbl_grad, float z_scale, bool norm_topk) {
    const int64_t n = sl_rows(probs);
    const int e = (int)sl_last_dim(probs), k = (int)sl_last_dim(topk_idx);
    if (n == 0) return;
    SL_LAUNCH(router_bwd_kernel<NV>, sl_blocks(n, ROUTER_WARPS), ROUTER_WARPS * 32, 0,
              sl_cuda_stream(ctx), sl_ptr<float>(dlogits), sl_ptr<float>(dtopk_w),
              sl_ptr<float>(probs), sl_ptr<int32_t>(topk_idx), sl_ptr<float>(topk_w),
              sl_ptr<float>(logits), sl_ptr<float>(lbl_grad), z_scale, norm_topk, n, e, k);
    SL_CUDA_LAUNCHED("router_bwd");
}

} // namespace

extern "C" void sl_cuda_router_bwd(void *ctx, sl_tensor *dlogits, const sl_tensor *dtopk_w,
                                   const sl_tensor *probs, const sl_tensor *topk_idx,
                                   const sl_tensor *topk_w, const sl_tensor *logits,
                                   const sl_tensor *lbl_grad, float z_scale, bool norm_topk) {
#define ROUTER_BWD(NV)                                                                             \
    router_bwd_launch<NV>(ctx, dlogits, dtopk_w, probs, topk_idx, topk_w, logits, lbl_grad,        \
                          z_scale, norm_topk)
    switch (router_nv(sl_last_dim(probs))) {
    case 1:
        ROUTER_BWD(1);
        break;
    case 2:
        ROUTER_BWD(2);
        break;
    case 4:
        ROUTER_BWD(4);
        break;
    case 8:
        ROUTER_BWD(8);
        break;
    case 16:
        ROUTER_BWD(16);
        break;
    default:
        ROUTER_BWD(32);
        break;
    }
#undef ROUTER_BWD
}
