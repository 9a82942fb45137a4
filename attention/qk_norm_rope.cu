/*
 * attention/qk_norm_rope.cu - the attention's queries and keys from the projections in one pass
 * (core/ops.h, sl_op_qk_norm_rope_fwd/_bwd; the CPU twin composes the separate kernels:
 * attention/qk_norm_rope_cpu.c).
 *
 * Why fused: the separate kernels (q/gate split, the QK-norm on q and on k, RoPE on each) read
 * and write the queries four times per layer and direction: 285 MB forward and 322 MB backward
 * per layer at 4,096 tokens of the 15A2B shape (32 heads, 4 KV heads, head dim 128, bf16).
 * Here the forward reads qall and k once and writes qn, kn and the gate once (142 MB); the
 * backward reads dq, dk, dg and the pre-norm q (from qall) and k once and writes dqall and
 * dk_pre (180 MB). Between the norm and the rotation the values stay in fp32: one rounding to
 * the activation dtype instead of two.
 *
 * Two paths, the same arithmetic. The row path (below, "the row path") serves head dims 64, 128
 * and 256 with 16-byte aligned rows (the models sluice trains): a head row across one warp in
 * registers, several rows' loads in flight per warp. The element path serves every other shape
 * (head dims that are not a multiple of 32, odd gate layouts, views at odd offsets):
 *
 * Forward: one block per token, 8 warps. The token's cos/sin (double math, as attention/rope.cu)
 * go to shared memory once and serve every head; each warp takes the token's H + KV head rows in
 * turn: loads the row (lane j, j + 32, ...), sums its squares (warp shuffles), normalizes into a
 * per-warp fp32 row in shared memory, then rotates from there (the rotate-half partner of column
 * j is column j +- rot/2, another lane's) and stores. The gate part of qall is copied on the way.
 *
 * Backward: each block owns a contiguous run of tokens (at most 512 blocks, so the number of
 * partial weight-gradient rows depends only on T: the same bits on any GPU), taken in chunks of
 * 8 tokens: the block computes a chunk's rotations together, then its warps share out the
 * chunk's head rows with no barrier between tokens (a barrier per token kept every warp waiting
 * for the one with the most rows, 5 of 36 where the others had 4). Per head row a warp
 * rotates dq back into its shared fp32 row, takes the norm's dot product over the row, and writes
 * dx = r (g w - xh mean(g w xh)) into dqall (or dk_pre); each lane adds g xh of its columns to
 * the warp's own fp32 dw rows in shared memory (one for q, one for k). At the end the warps' rows
 * are summed in warp order into the block's partial rows, and a second kernel adds the partials
 * to dqw and dkw in a fixed order (k_qk_dw), for both paths. No float atomics: deterministic
 * (the two paths sum in different orders, so their bits differ; a shape always takes the same
 * path).
 */
#include "attention/kernels_cuda.h"
#include "attention/qk_norm_rope.cuh"
#include "core/log.h"

namespace {

using namespace sl_qk;

constexpr int kFwdWarps = 8;
/* The backward's blocks, at most: 512 of 256 threads at 64 registers (4 per SM, the registers'
 * limit) are one wave on an H200's 132 SMs; more blocks with fewer tokens each would run in
 * two waves for the same time. */
constexpr int64_t kMaxParts = 512;
/* k_qk_dw: row slices per block of 32 columns (a block of 32 x kDwSlices threads). */
constexpr int kDwSlices = 16;

/* Column j of the rotation of row v (fp32, shared): the forward's x'[i] = x[i] c - x[i+half] s,
 * x'[i+half] = x[i+half] c + x[i] s; with sn = -s the same expressions give the backward. */
__device__ __forceinline__ float rotated(const float *v, const float *cs, const float *sn, int j,
                                         int half) {
    if (j < half) return v[j] * cs[j] - v[j + half] * sn[j];
    if (j < 2 * half) return v[j] * cs[j - half] + v[j - half] * sn[j - half];
    return v[j];
}

/* Dynamic shared memory: cs, sn [half] then one fp32 row [d] per warp. */
template <typename T>
__global__ void __launch_bounds__(32 * kFwdWarps)
    k_qk_fwd(T *qn, T *kn, T *g, float *q_rstd, float *k_rstd, const T *qall, const T *k,
             const T *qw, const T *kw, const int32_t *pos, const float *inv_freq, int h, int kv,
             int d, int half, float eps, float mscale, sl_gate_mode mode) {
    SL_DYNAMIC_SMEM(float, smem);
    float *cs = smem, *sn = smem + half;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float *row = smem + 2 * half + warp * d;
    const int64_t r = blockIdx.x, width = qall_width(mode, h, d);
    rope_coefs(cs, sn, pos + r, 1, inv_freq, half, mscale, 1);
    for (int hr = warp; hr < h + kv; hr += kFwdWarps) {
        const bool isq = hr < h;
        const T *src = isq ? qall + r * width + q_offset(mode, hr, d) : k + (r * kv + hr - h) * d;
        T *dst = isq ? qn + (r * h + hr) * d : kn + (r * kv + hr - h) * d;
        const T *w = isq ? qw : kw;
        if (isq && mode == SL_GATE_ELEMENTWISE)
            for (int j = lane; j < d; j += 32) g[(r * h + hr) * d + j] = src[d + j];
        else if (isq && mode == SL_GATE_HEADWISE && lane == 0)
            g[r * h + hr] = qall[r * width + (int64_t)h * d + hr];
        float ss = 0.0f;
        for (int j = lane; j < d; j += 32) {
            const float v = sl_ld(src[j]);
            row[j] = v;
            ss += v * v;
        }
        ss = sl_warp_sum(ss);
        const float s = 1.0f / sqrtf(ss / (float)d + eps); /* core/rmsnorm.cu's expression */
        if (lane == 0) (isq ? q_rstd[r * h + hr] : k_rstd[r * kv + hr - h]) = s;
        for (int j = lane; j < d; j += 32) row[j] = row[j] * s * sl_ld(w[j]);
        __syncwarp();
        for (int j = lane; j < d; j += 32) dst[j] = sl_st<T>(rotated(row, cs, sn, j, half));
        __syncwarp(); /* the row is rewritten by the warp's next head */
    }
}

/* Dynamic shared memory: cs, sn [kChunk][half]; per warp one fp32 row [d] and its dw rows for
 * q and k [2][d]; the block's partial rows come from the warps' in warp order. Block b owns
 * tokens [b * tpb, (b + 1) * tpb), in chunks of kChunk: the chunk's rotation coefficients,
 * a barrier, then head row i of the chunk (token i / (h + kv), head i % (h + kv)) to warp
 * i % warps, then a barrier before the next chunk's coefficients. part [nparts][2][d]. */
template <typename T>
__global__ void k_qk_bwd(T *dqall, T *dk_pre, float *part, const T *dq, const T *dk, const T *dg,
                         const T *qall, const T *k, const T *qw, const T *kw, const float *q_rstd,
                         const float *k_rstd, const int32_t *pos, const float *inv_freq,
                         int64_t tokens, int64_t tpb, int h, int kv, int d, int half, float mscale,
                         sl_gate_mode mode) {
    SL_DYNAMIC_SMEM(float, smem);
    const int warps = blockDim.x >> 5;
    float *cs_all = smem, *sn_all = smem + kChunk * half;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float *row = smem + 2 * kChunk * half + warp * 3 * d;
    float *dwq = row + d, *dwk = row + 2 * d;
    for (int j = lane; j < 2 * d; j += 32) dwq[j] = 0.0f; /* dwq and dwk, contiguous */
    const int64_t width = qall_width(mode, h, d);
    const int rows = h + kv;
    const int64_t r0 = blockIdx.x * tpb, r1 = r0 + tpb < tokens ? r0 + tpb : tokens;
    for (int64_t c0 = r0; c0 < r1; c0 += kChunk) {
        const int n = (int)(r1 - c0 < kChunk ? r1 - c0 : kChunk);
        rope_coefs(cs_all, sn_all, pos + c0, n, inv_freq, half, mscale, -1);
        for (int item = warp; item < n * rows; item += warps) {
            const int64_t r = c0 + item / rows;
            const int hr = item % rows;
            const float *cs = cs_all + (item / rows) * half, *sn = sn_all + (item / rows) * half;
            const bool isq = hr < h;
            const int64_t xo = isq ? r * width + q_offset(mode, hr, d) : (r * kv + hr - h) * d;
            const int64_t go = isq ? (r * h + hr) * d : (r * kv + hr - h) * d;
            const T *x = (isq ? qall : k) + xo, *gy = (isq ? dq : dk) + go, *w = isq ? qw : kw;
            T *dx = (isq ? dqall : dk_pre) + xo;
            float *dw = isq ? dwq : dwk;
            const float s = isq ? q_rstd[r * h + hr] : k_rstd[r * kv + hr - h];
            if (isq && mode == SL_GATE_ELEMENTWISE)
                for (int j = lane; j < d; j += 32) dx[d + j] = dg[go + j];
            else if (isq && mode == SL_GATE_HEADWISE && lane == 0)
                dqall[r * width + (int64_t)h * d + hr] = dg[r * h + hr];
            for (int j = lane; j < d; j += 32) row[j] = sl_ld(gy[j]);
            __syncwarp();
            /* the norm's gradient g = R^T dq; then core/rmsnorm.cu's expressions */
            float dot = 0.0f;
            for (int j = lane; j < d; j += 32)
                dot += rotated(row, cs, sn, j, half) * sl_ld(w[j]) * (sl_ld(x[j]) * s);
            const float mean = sl_warp_sum(dot) / (float)d;
            for (int j = lane; j < d; j += 32) {
                const float gj = rotated(row, cs, sn, j, half), xh = sl_ld(x[j]) * s;
                dx[j] = sl_st<T>(s * (gj * sl_ld(w[j]) - xh * mean));
                dw[j] += gj * xh;
            }
            __syncwarp(); /* the row is rewritten by the warp's next head row */
        }
        __syncthreads(); /* cs, sn are rewritten for the next chunk */
    }
    /* the block's partial rows: the warps' rows added in warp order (the last chunk's barrier
     * made every warp's rows visible) */
    for (int j = threadIdx.x; j < 2 * d; j += blockDim.x) {
        float acc = 0.0f;
        for (int wi = 0; wi < warps; wi++) acc += smem[2 * kChunk * half + wi * 3 * d + d + j];
        part[(int64_t)blockIdx.x * 2 * d + j] = acc;
    }
}

/* dw[j] += the sum over b < nparts of part[b][j] (j < 2 d: q's columns, then k's). A block takes
 * 32 columns; its slice y adds the parts y, y + kDwSlices, ... in order, then thread y = 0 adds
 * the slices in order: a fixed order for a given nparts (which depends only on T), so the same
 * bits on any GPU. The first form, one thread per column walking all the parts, kept 256
 * threads waiting on one load after another: 20-80 us per call by a count of L2 latencies. */
template <typename TW>
__global__ void __launch_bounds__(32 * kDwSlices)
    k_qk_dw(TW *dqw, TW *dkw, const float *part, int nparts, int d) {
    __shared__ float slice[kDwSlices][33];
    const int x = threadIdx.x & 31, y = threadIdx.x >> 5;
    const int j = blockIdx.x * 32 + x;
    float acc = 0.0f;
    if (j < 2 * d) {
#pragma unroll 4
        for (int b = y; b < nparts; b += kDwSlices) acc += part[(int64_t)b * 2 * d + j];
    }
    slice[y][x] = acc;
    __syncthreads();
    if (y != 0 || j >= 2 * d) return;
    float sum = 0.0f;
    for (int i = 0; i < kDwSlices; i++) sum += slice[i][x];
    TW *dw = j < d ? dqw + j : dkw + (j - d);
    *dw = sl_st<TW>(sl_ld(*dw) + sum);
}

/* The backward's shared memory with `warps` warps: a chunk's coefficients and each warp's three
 * fp32 rows. */
size_t bwd_smem(int d, int half, int warps) {
    return coef_smem(half) + sizeof(float) * (size_t)warps * 3 * d;
}
/* Warps of the backward's blocks: 8, or fewer where the shared memory would pass 48 KB. */
int bwd_warps(int d, int half) {
    int warps = 8;
    while (warps > 1 && bwd_smem(d, half, warps) > 48 * 1024) warps /= 2;
    SL_CHECK(bwd_smem(d, half, warps) <= 48 * 1024,
             "qk_norm_rope_bwd: head dim %d needs %zu bytes of shared memory (at most 49152)", d,
             bwd_smem(d, half, warps));
    return warps;
}

} // namespace

extern "C" void sl_cuda_qk_norm_rope_fwd(void *ctx, sl_tensor *qn, sl_tensor *kn, sl_tensor *g,
                                         sl_tensor *q_rstd, sl_tensor *k_rstd,
                                         const sl_tensor *qall, const sl_tensor *k,
                                         const sl_qk_norm_rope *p) {
    const int64_t t = qn->shape[0];
    const int h = (int)qn->shape[1], kv = (int)kn->shape[1], d = (int)qn->shape[2];
    const int half = (int)p->inv_freq->numel;
    if (t == 0) return;
    SL_CHECK(t <= INT32_MAX, "qk_norm_rope_fwd: %lld tokens", (long long)t);
    cudaStream_t st = sl_cuda_stream(ctx);
    if (rows_fwd(st, qn, kn, g, q_rstd, k_rstd, qall, k, p)) {
        SL_CUDA_LAUNCHED("qk_norm_rope_fwd");
        return;
    }
    const size_t smem = sizeof(float) * (2 * (size_t)half + (size_t)kFwdWarps * d);
    SL_DISPATCH_FLOAT(qn->dtype, T, {
        SL_LAUNCH(k_qk_fwd<T>, (unsigned)t, 32 * kFwdWarps, smem, st, sl_ptr<T>(qn), sl_ptr<T>(kn),
                  g ? sl_ptr<T>(g) : (T *)nullptr, sl_ptr<float>(q_rstd), sl_ptr<float>(k_rstd),
                  sl_ptr<T>(qall), sl_ptr<T>(k), sl_ptr<T>(p->qw), sl_ptr<T>(p->kw),
                  sl_ptr<int32_t>(p->pos), sl_ptr<float>(p->inv_freq), h, kv, d, half, p->eps,
                  p->mscale, p->mode);
    });
    SL_CUDA_LAUNCHED("qk_norm_rope_fwd");
}

extern "C" void sl_cuda_qk_norm_rope_bwd(void *ctx, sl_tensor *dqall, sl_tensor *dk_pre,
                                         sl_tensor *dqw, sl_tensor *dkw, const sl_tensor *dq,
                                         const sl_tensor *dk, const sl_tensor *dg,
                                         const sl_tensor *qall, const sl_tensor *k,
                                         const sl_tensor *q_rstd, const sl_tensor *k_rstd,
                                         const sl_qk_norm_rope *p) {
    const int64_t t = dq->shape[0];
    const int h = (int)dq->shape[1], kv = (int)dk->shape[1], d = (int)dq->shape[2];
    const int half = (int)p->inv_freq->numel;
    if (t == 0) return; /* nothing written, the weights' gradients gain nothing */
    /* a contiguous run of tokens per block, at most kMaxParts blocks (the partials depend only
     * on T) */
    const int64_t want = t < kMaxParts ? t : kMaxParts;
    const int64_t tpb = (t + want - 1) / want, nparts = (t + tpb - 1) / tpb;
    float *part = (float *)sl_cuda_scratch(ctx, 0, sizeof(float) * (size_t)nparts * 2 * d);
    cudaStream_t st = sl_cuda_stream(ctx);
    if (!rows_bwd(st, part, nparts, tpb, dqall, dk_pre, dq, dk, dg, qall, k, q_rstd, k_rstd, p)) {
        const int warps = bwd_warps(d, half);
        const size_t smem = bwd_smem(d, half, warps);
        SL_DISPATCH_FLOAT(dq->dtype, T, {
            SL_LAUNCH(k_qk_bwd<T>, (unsigned)nparts, 32 * warps, smem, st, sl_ptr<T>(dqall),
                      sl_ptr<T>(dk_pre), part, sl_ptr<T>(dq), sl_ptr<T>(dk),
                      dg ? sl_ptr<T>(dg) : (const T *)nullptr, sl_ptr<T>(qall), sl_ptr<T>(k),
                      sl_ptr<T>(p->qw), sl_ptr<T>(p->kw), sl_ptr<float>(q_rstd),
                      sl_ptr<float>(k_rstd), sl_ptr<int32_t>(p->pos), sl_ptr<float>(p->inv_freq), t,
                      tpb, h, kv, d, half, p->mscale, p->mode);
        });
    }
    SL_CUDA_LAUNCHED("qk_norm_rope_bwd");
    const float *cpart = part;
    SL_DISPATCH_FLOAT(dqw->dtype, TW, {
        SL_LAUNCH(k_qk_dw<TW>, sl_blocks(2 * (int64_t)d, 32), 32 * kDwSlices, 0, st,
                  sl_ptr<TW>(dqw), sl_ptr<TW>(dkw), cpart, (int)nparts, d);
    });
    SL_CUDA_LAUNCHED("qk_norm_rope_bwd");
}
