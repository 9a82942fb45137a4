/*
 * attention/gated_attn_bwd.cu - fused causal gated attention, backward, on CUDA cores (SIMT, fp32
 * arithmetic). CPU twin: attention/gated_attn_cpu.c; the forward and the tile scheme:
 * gated_attn_fwd.cu.
 *
 * FlashAttention-2's backward in three kernels, all deterministic (no atomics: every output
 * element has one writer, and every sum runs in a fixed order):
 *   1. prep, one warp per (token, head) row: s = sigmoid(g), dg = dy O s (1 - s) (headwise: summed
 *      over D), Di = rowsum(dO * O) with dO = dy * s into an fp32 scratch [T, H]. dO itself is
 *      never stored: the tile loads below recompute dy * s (load_do_tile).
 *   2. dK, dV: one block per (key tile, sequence, kv head, head-dim chunk), earliest (heaviest)
 *      key tiles first. K and V stay in shared memory; the block walks every query head of its
 *      GQA group in order and, for each, the query tiles at or after the key tile: P = 2^(S c -
 *      lse log2 e) recomputed from the saved lse, dP = dO V^T, dS = P (dP - Di), then
 *      dV += P^T dO and dK += dS^T Q in registers. dK = scale * dK at the end.
 *   3. dQ: one block per (query tile, sequence, head, chunk), latest first, over the key tiles up
 *      to the diagonal: S and dP recomputed, dQ += dS K in registers, dQ = scale * dQ. Recomputing
 *      S and dP here (two of the five tile products) is the price of a deterministic dQ, which
 *      would otherwise be summed across the key-tile blocks with atomics.
 *
 * Tiles: 64 threads (8 x 8, as the forward), B = 32 rows x 32 keys for head dims up to 64 and
 * B = 16 for DP = 128, since four B x DP fp32 tiles (Q, dO, K, V) plus P and dS must fit in the
 * 48 KiB of static shared memory (dK/dV: 41984 bytes at DP = 64, 35328 at DP = 128). D > 128 runs
 * in chunks of 128 output columns per block, S and dP contracting over every chunk (operands
 * reloaded).
 *
 * Documents (seg, core/ops.h): P is also masked before each query's document start; the dK/dV
 * block stops at the first query tile whose first row's document starts after its key tile,
 * and the dQ block starts at the key tile holding its first row's document start.
 */
#include "attention/gated_attn.cuh"
#include "attention/kernels_cuda.h"
#include "core/log.h"

namespace {

using namespace sl_attn;

/* ---- 1. prep ---- */

constexpr int kPrepWarps = 8;

template <typename T> __global__ void attn_bwd_prep_kernel(const args<T> a, float *di, T *dg) {
    const int lane = threadIdx.x & 31;
    const int64_t rows = (int64_t)a.batch * a.seq * a.h;
    for (int64_t r = (int64_t)blockIdx.x * kPrepWarps + (threadIdx.x >> 5); r < rows;
         r += (int64_t)gridDim.x * kPrepWarps) {
        const T *dyr = a.dy + r * a.d, *orow = a.o + r * a.d;
        const float sh = a.gate == 1 ? sigmoid(sl_ld(a.g[r])) : 1.0f;
        float dot = 0.0f, dyo = 0.0f;
        for (int c = lane; c < a.d; c += 32) {
            const float dyv = sl_ld(dyr[c]), ov = sl_ld(orow[c]);
            if (a.gate == 2) {
                const float s = sigmoid(sl_ld(a.g[r * a.d + c]));
                dg[r * a.d + c] = sl_st<T>(dyv * ov * s * (1.0f - s));
                dot += dyv * s * ov;
            } else {
                dyo += dyv * ov;
                dot += dyv * sh * ov;
            }
        }
        dot = sl_warp_sum(dot);
        if (a.gate == 1) dyo = sl_warp_sum(dyo);
        if (lane == 0) {
            di[r] = dot;
            if (a.gate == 1) dg[r] = sl_st<T>(dyo * sh * (1.0f - sh));
        }
    }
}

/* Saved row statistics of a query tile into shared memory: lse in the log2 domain, Di and the
 * document start (0 without documents); rows past the sequence get 0 (their P is masked to 0). */
template <typename T, int B>
__device__ __forceinline__ void load_rows(float *slse, float *sdi, int *sseg, const args<T> &a,
                                          int64_t tok, int h, int nrows) {
    for (int r = threadIdx.x; r < B; r += kThreads) {
        const int64_t row = (tok + r) * a.h + h;
        slse[r] = r < nrows ? a.lse[row] * kLog2e : 0.0f;
        sdi[r] = r < nrows ? a.di[row] : 0.0f;
        sseg[r] = r < nrows && a.seg ? a.seg[tok + r] : 0;
    }
}

/* P and dS of a tile from S (raw dot products) and dP; rows are queries i0 + tr + 8x, columns
 * keys j0 + tc + 8y, masked to P = 0 after the diagonal, before the row's document start and
 * past the sequence. */
template <int R, int LDP>
__device__ __forceinline__ void softmax_grad(float (&s)[R][R], const float (&dp)[R][R], float *sp,
                                             float *sds, const float *slse, const float *sdi,
                                             const int *sseg, int i0, int j0, int seq, float c2) {
    const int tr = threadIdx.x >> 3, tc = threadIdx.x & 7;
    SL_UNROLL
    for (int x = 0; x < R; x++) {
        const int ri = tr + 8 * x, i = i0 + ri;
        SL_UNROLL
        for (int y = 0; y < R; y++) {
            const int j = j0 + tc + 8 * y;
            const float p =
                j <= i && i < seq && j >= sseg[ri] ? exp2f(s[x][y] * c2 - slse[ri]) : 0.0f;
            if (sp) sp[ri * LDP + tc + 8 * y] = p;
            sds[ri * LDP + tc + 8 * y] = p * (dp[x][y] - sdi[ri]);
        }
    }
}

/* ---- 2. dK, dV ---- */

template <typename T, int DP, int B>
__global__ void __launch_bounds__(kThreads) attn_bwd_dkdv_kernel(const args<T> a) {
    constexpr int LD = DP + 1, LDP = B + 1, R = B / 8, RD = DP / 8;
    __shared__ float sk[B * LD], sv[B * LD], sq[B * LD], sdo[B * LD];
    __shared__ float sp[B * LDP], sds[B * LDP], slse[B], sdi[B];
    __shared__ int sseg[B];
    const int tid = threadIdx.x, tr = tid >> 3, tc = tid & 7;

    const int nt = (a.seq + B - 1) / B;
    const int64_t per_tile = (int64_t)a.batch * a.kv * a.nch;
    const int kt = (int)(blockIdx.x / per_tile);
    const int64_t rem = blockIdx.x % per_tile;
    const int chunk = (int)(rem % a.nch), kvh = (int)(rem / a.nch % a.kv);
    const int64_t b = rem / a.nch / a.kv;
    const int c_out = chunk * DP, j0 = kt * B, nk = a.seq - j0 < B ? a.seq - j0 : B;
    const int64_t tok0 = b * a.seq, ldq = (int64_t)a.h * a.d, ldk = (int64_t)a.kv * a.d;
    const T *kb = a.k + ((tok0 + j0) * a.kv + kvh) * a.d;
    const T *vb = a.v + ((tok0 + j0) * a.kv + kvh) * a.d;
    const float c2 = a.scale * kLog2e;
    const bool resident = a.nch == 1;

    float dk[R][RD], dv[R][RD];
    zero(dk);
    zero(dv);
    if (resident) {
        load_tile<B, DP>(sk, kb, ldk, nk, a.d);
        load_tile<B, DP>(sv, vb, ldk, nk, a.d);
    }
    for (int h = kvh * a.grp; h < (kvh + 1) * a.grp; h++) {
        for (int qt = kt; qt < nt; qt++) {
            const int i0 = qt * B, nq = a.seq - i0 < B ? a.seq - i0 : B;
            /* Documents: this and every later query tile (seg does not decrease) begin after
             * the key tile's last key, so they see none of it. The same for the whole block. */
            if (a.seg && a.seg[tok0 + i0] >= j0 + nk) break;
            const T *qb = a.q + ((tok0 + i0) * a.h + h) * a.d;
            load_rows<T, B>(slse, sdi, sseg, a, tok0 + i0, h, nq);
            float s[R][R], dp[R][R];
            zero(s);
            zero(dp);
            for (int dc = 0; dc < a.d; dc += DP) {
                load_tile<B, DP>(sq, qb + dc, ldq, nq, a.d - dc);
                load_do_tile<B, DP>(sdo, a, tok0 + i0, h, nq, dc);
                if (!resident) {
                    load_tile<B, DP>(sk, kb + dc, ldk, nk, a.d - dc);
                    load_tile<B, DP>(sv, vb + dc, ldk, nk, a.d - dc);
                }
                __syncthreads();
                tile_mma<R, R, DP, 8 * LD, 1, 8 * LD, 1>(s, sq + tr * LD, sk + tc * LD);
                tile_mma<R, R, DP, 8 * LD, 1, 8 * LD, 1>(dp, sdo + tr * LD, sv + tc * LD);
                __syncthreads();
            }
            softmax_grad<R, LDP>(s, dp, sp, sds, slse, sdi, sseg, i0, j0, a.seq, c2);
            if (!resident) { /* this block's output columns of Q and dO */
                load_tile<B, DP>(sq, qb + c_out, ldq, nq, a.d - c_out);
                load_do_tile<B, DP>(sdo, a, tok0 + i0, h, nq, c_out);
            }
            __syncthreads();
            /* rows: keys j0 + tr + 8x; contraction over the tile's queries */
            tile_mma<R, RD, B, 8, LDP, 8, LD>(dv, sp + tr, sdo + tc);
            tile_mma<R, RD, B, 8, LDP, 8, LD>(dk, sds + tr, sq + tc);
            __syncthreads();
        }
    }

    SL_UNROLL
    for (int x = 0; x < R; x++) {
        const int j = j0 + tr + 8 * x;
        if (j >= a.seq) continue;
        const int64_t row = (tok0 + j) * a.kv + kvh;
        SL_UNROLL
        for (int y = 0; y < RD; y++) {
            const int c = c_out + tc + 8 * y;
            if (c >= a.d) continue;
            a.dk[row * a.d + c] = sl_st<T>(dk[x][y] * a.scale);
            a.dv[row * a.d + c] = sl_st<T>(dv[x][y]);
        }
    }
}

/* ---- 3. dQ ---- */

template <typename T, int DP, int B>
__global__ void __launch_bounds__(kThreads) attn_bwd_dq_kernel(const args<T> a) {
    constexpr int LD = DP + 1, LDP = B + 1, R = B / 8, RD = DP / 8;
    __shared__ float sq[B * LD], sdo[B * LD], sk[B * LD], sv[B * LD];
    __shared__ float sds[B * LDP], slse[B], sdi[B];
    __shared__ int sseg[B];
    const int tid = threadIdx.x, tr = tid >> 3, tc = tid & 7;

    const auto [qt, chunk, h, kvh, c_out, i0, nq, kend, b, tok0, ldq, ldk, qb, kb, vb, c2,
                resident] = locate_qtile<T, B, DP>(a);

    float dq[R][RD];
    zero(dq);
    load_rows<T, B>(slse, sdi, sseg, a, tok0 + i0, h, nq);
    if (resident) {
        load_tile<B, DP>(sq, qb, ldq, nq, a.d);
        load_do_tile<B, DP>(sdo, a, tok0 + i0, h, nq, 0);
    }
    for (int j0 = first_key_tile<B>(a.seg, tok0, i0); j0 < kend; j0 += B) {
        const int nk = a.seq - j0 < B ? a.seq - j0 : B;
        float s[R][R], dp[R][R];
        zero(s);
        zero(dp);
        for (int dc = 0; dc < a.d; dc += DP) {
            if (!resident) {
                load_tile<B, DP>(sq, qb + dc, ldq, nq, a.d - dc);
                load_do_tile<B, DP>(sdo, a, tok0 + i0, h, nq, dc);
            }
            load_tile<B, DP>(sk, kb + j0 * ldk + dc, ldk, nk, a.d - dc);
            load_tile<B, DP>(sv, vb + j0 * ldk + dc, ldk, nk, a.d - dc);
            __syncthreads();
            tile_mma<R, R, DP, 8 * LD, 1, 8 * LD, 1>(s, sq + tr * LD, sk + tc * LD);
            tile_mma<R, R, DP, 8 * LD, 1, 8 * LD, 1>(dp, sdo + tr * LD, sv + tc * LD);
            __syncthreads();
        }
        softmax_grad<R, LDP>(s, dp, nullptr, sds, slse, sdi, sseg, i0, j0, a.seq, c2);
        if (!resident) load_tile<B, DP>(sk, kb + j0 * ldk + c_out, ldk, nk, a.d - c_out);
        __syncthreads();
        /* rows: queries; contraction over the tile's keys */
        tile_mma<R, RD, B, 8 * LDP, 1, 8, LD>(dq, sds + tr * LDP, sk + tc);
        __syncthreads();
    }

    SL_UNROLL
    for (int x = 0; x < R; x++) {
        const int i = i0 + tr + 8 * x;
        if (i >= a.seq) continue;
        const int64_t row = (tok0 + i) * a.h + h;
        SL_UNROLL
        for (int y = 0; y < RD; y++) {
            const int c = c_out + tc + 8 * y;
            if (c < a.d) a.dq[row * a.d + c] = sl_st<T>(dq[x][y] * a.scale);
        }
    }
}

template <typename T, int DP, int B> void launch_bwd(const args<T> &a, cudaStream_t stream) {
    const int64_t nt = (a.seq + B - 1) / B;
    const int64_t kv_blocks = nt * a.batch * a.kv * a.nch, q_blocks = nt * a.batch * a.h * a.nch;
    SL_CHECK(q_blocks <= 0x7fffffff, "gated_attn_bwd: %lld blocks exceed the grid limit",
             (long long)q_blocks);
    void (*attn_bwd_dkdv)(args<T>) = attn_bwd_dkdv_kernel<T, DP, B>;
    SL_LAUNCH(attn_bwd_dkdv, dim3((unsigned)kv_blocks), dim3(kThreads), 0, stream, a);
    SL_CUDA_LAUNCHED("gated_attn_bwd");
    void (*attn_bwd_dq)(args<T>) = attn_bwd_dq_kernel<T, DP, B>;
    SL_LAUNCH(attn_bwd_dq, dim3((unsigned)q_blocks), dim3(kThreads), 0, stream, a);
    SL_CUDA_LAUNCHED("gated_attn_bwd");
}

} // namespace

/* The SIMT kernel (attention/attn_kernels.cu chooses it; dg is given with a gate). */
extern "C" void sl_cuda_gated_attn_simt_bwd(void *ctx, sl_tensor *dq, sl_tensor *dk, sl_tensor *dv,
                                            sl_tensor *dg, const sl_tensor *dy, const sl_tensor *q,
                                            const sl_tensor *k, const sl_tensor *v,
                                            const sl_tensor *g, const sl_tensor *seg,
                                            const sl_tensor *o, const sl_tensor *lse, int batch,
                                            int seq, float scale) {
    if (batch == 0 || seq == 0) return;
    const int64_t h = q->shape[1], kv = k->shape[1], d = q->shape[2];
    const int64_t rows = (int64_t)batch * seq * h;
    const int dp = pick_dp(d);
    cudaStream_t stream = sl_cuda_stream(ctx);
    float *di = (float *)sl_cuda_scratch(ctx, 0, sizeof(float) * (size_t)rows);
    SL_DISPATCH_FLOAT(q->dtype, T, {
        args<T> a = {};
        a.q = sl_ptr<T>(q), a.k = sl_ptr<T>(k), a.v = sl_ptr<T>(v), a.g = sl_ptr<T>(g);
        a.dy = sl_ptr<T>(dy), a.o = sl_ptr<T>(o), a.lse = sl_ptr<float>(lse), a.di = di;
        a.seg = seg ? sl_ptr<int>(seg) : nullptr;
        a.dq = sl_ptr<T>(dq), a.dk = sl_ptr<T>(dk), a.dv = sl_ptr<T>(dv);
        a.batch = batch, a.seq = seq, a.h = (int)h, a.kv = (int)kv, a.d = (int)d;
        a.grp = (int)(h / kv), a.gate = !g ? 0 : g->numel == q->numel ? 2 : 1;
        a.nch = (int)((d + dp - 1) / dp), a.scale = scale;

        const int64_t pblocks = (rows + kPrepWarps - 1) / kPrepWarps;
        SL_LAUNCH(attn_bwd_prep_kernel<T>, dim3((unsigned)(pblocks < 65535 ? pblocks : 65535)),
                  dim3(32 * kPrepWarps), 0, stream, a, di, g ? sl_ptr<T>(dg) : (T *)nullptr);
        SL_CUDA_LAUNCHED("gated_attn_bwd");
        if (dp == 32)
            launch_bwd<T, 32, 32>(a, stream);
        else if (dp == 64)
            launch_bwd<T, 64, 32>(a, stream);
        else
            launch_bwd<T, 128, 16>(a, stream);
    });
}
