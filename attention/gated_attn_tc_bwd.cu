/*
 * attention/gated_attn_tc_bwd.cu - fused causal gated attention, backward, on tensor cores
 * (bf16 operands, fp32 accumulation; head dims 64 and 128). The SIMT kernel with the same
 * semantics is gated_attn_bwd.cu, the CPU reference gated_attn_cpu.c; the shared pieces and the
 * fragment layouts are in gated_attn_tc.cuh; the design is in docs/attention.md ("Backward").
 *
 * FlashAttention-2's backward in three or four kernels:
 *   1. prep, D / 8 lanes per (token, head) row, the gate fused in: s = sigmoid(g), dO = dy s stored
 *      once in bf16 (the MMA operand the next kernels stream), dg = dy O s (1 - s) (headwise:
 *      summed over D), Di = rowsum(dO O) in fp32 from that bf16 dO; in the atomic dQ mode it
 *      also zeroes the row of the fp32 dQ accumulator.
 *   2. dK, dV: one block (4 warps) per (key tile of 64, sequence, kv head), earliest key tiles
 *      first. K and V stay in shared memory; the block walks every query head of its GQA group
 *      and the query tiles from the diagonal on, Q and dO double-buffered with cp.async. Each
 *      warp owns 16 keys and keeps everything else in registers: S^T = K Q^T, P^T = 2^(S^T c -
 *      lse log2 e), dV += P^T dO, dP^T = V dO^T, dS^T = P^T (dP^T - Di), dK += dS^T Q. P^T and
 *      dS^T become the next product's A operand without leaving registers (acc_to_a).
 *   3. dQ, deterministic (backend.deterministic, the default): one block per query tile (the
 *      forward's grid), Q and dO fragments in registers, K and V double-buffered from the first
 *      key tile the tile's documents need to the diagonal: S and dP recomputed, dQ += dS K.
 *      Atomic (allow_nondeterministic): the dK/dV block also puts dS of each tile into shared
 *      memory and adds its dQ contribution dS K to an fp32 accumulator with atomicAdd (one
 *      kernel less, two tile products less, but the summation order varies), and 4. converts
 *      the accumulator to bf16.
 * P and dS are rounded to bf16 as MMA operands (as FlashAttention-2 does); every sum is fp32.
 */
#include <cstring>

#include "attention/gated_attn_tc.cuh"
#include "attention/kernels_cuda.h"
#include "core/log.h"

namespace {

using namespace sl_attn_tc;

/* Query rows per dK/dV step: the per-warp accumulators are dK and dV (D / 2 floats each) plus
 * S^T and dP^T (QT / 2 each); at D = 128 a 64-row step would not fit 255 registers. */
template <int D> constexpr int kQt = D == 64 ? 64 : 32;

/* ---- 1. prep -------------------------------------------------------------------------------- */

constexpr int kPrepWarps = 8;
/* Blocks of the prep at most: it loops over the rows (2,048 blocks of 8 warps are two per SM
 * of 132 eight times over), so that blocks do not come and go every couple of microseconds:
 * with a block per 8 rows (16,384 blocks at S 4096, H 32) the pass ran at about 2.6 TB/s on an
 * H200 (Nsight Compute, 2026-11-27: 0.52 ms for its 1.35 GB at S 32768, D 128). */
constexpr int64_t kPrepMaxBlocks = 2048;

/* 8 bf16 of a 16-byte access as fp32 pairs, and back. */
__device__ __forceinline__ void ld8_bf16(float2 (&v)[4], const sl_bf16 *p) {
    SL_CHECK_ALIGNED(p, 16);
    const uint4 u = *reinterpret_cast<const uint4 *>(p);
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
    SL_UNROLL
    for (int i = 0; i < 4; i++) {
        __nv_bfloat162 h;
        memcpy(&h, &w[i], sizeof h);
        v[i] = __bfloat1622float2(h);
    }
}
__device__ __forceinline__ void st8_bf16(sl_bf16 *p, const __nv_bfloat162 (&h)[4]) {
    uint32_t w[4];
    SL_UNROLL
    for (int i = 0; i < 4; i++) memcpy(&w[i], &h[i], sizeof w[i]);
    SL_CHECK_ALIGNED(p, 16);
    *reinterpret_cast<uint4 *>(p) = make_uint4(w[0], w[1], w[2], w[3]);
}

/* One (token, head) row per LPR = D / 8 lanes (16 bytes, 8 elements, a lane), so a warp takes
 * 32 / LPR rows at once (2 at D = 128, 4 at D = 64) and loops over the rows with the grid's
 * stride; the row sums are shuffles within the row's lanes. Every pointer 16-byte aligned
 * (launch_bwd_prep checks). */
template <int D> __global__ void __launch_bounds__(32 * kPrepWarps) tc_bwd_prep_kernel(args a) {
    constexpr int LPR = D / 8, RPW = 32 / LPR;
    const int lane = threadIdx.x & 31, l = lane % LPR;
    const int64_t rows = (int64_t)a.batch * a.seq * a.h;
    const int64_t stride = (int64_t)gridDim.x * kPrepWarps * RPW;
    for (int64_t r0 = ((int64_t)blockIdx.x * kPrepWarps + (threadIdx.x >> 5)) * RPW; r0 < rows;
         r0 += stride) { /* r0 is the warp's: the shuffles below see every lane */
        const int64_t r = r0 + lane / LPR;
        const bool in = r < rows;
        float dot = 0.0f, dyo = 0.0f, sh = 1.0f;
        if (in) {
            const int64_t e = r * D + l * 8;
            float2 dy[4], o[4], g[4];
            ld8_bf16(dy, a.dy + e);
            ld8_bf16(o, a.o + e);
            if (a.gate == 2) ld8_bf16(g, a.g + e);
            if (a.gate == 1) sh = sigmoid(__bfloat162float(a.g[r]));
            __nv_bfloat162 dob[4], dgv[4];
            SL_UNROLL
            for (int i = 0; i < 4; i++) {
                float s0 = sh, s1 = sh;
                if (a.gate == 2) {
                    s0 = sigmoid(g[i].x), s1 = sigmoid(g[i].y);
                    dgv[i] = __floats2bfloat162_rn(dy[i].x * o[i].x * s0 * (1.0f - s0),
                                                   dy[i].y * o[i].y * s1 * (1.0f - s1));
                } else {
                    dyo += dy[i].x * o[i].x + dy[i].y * o[i].y;
                }
                /* Di from dO as rounded for the MMAs: then Di = rowsum(P dP) up to O's own
                 * error, and dS = P (dP - Di) cancels where it should (a row that sees one
                 * key: dS = 0). */
                dob[i] = __floats2bfloat162_rn(dy[i].x * s0, dy[i].y * s1);
                const float2 d = __bfloat1622float2(dob[i]);
                dot += d.x * o[i].x + d.y * o[i].y;
            }
            st8_bf16(a.dobw + e, dob);
            if (a.gate == 2) st8_bf16(a.dg + e, dgv);
            if (a.dqacc) {
                float4 *z = reinterpret_cast<float4 *>(a.dqacc + e);
                SL_CHECK_ALIGNED(z, 16);
                z[0] = z[1] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            }
        }
        SL_UNROLL
        for (int off = LPR / 2; off > 0; off >>= 1) { /* within the row's lanes */
            dot += __shfl_xor_sync(0xffffffffu, dot, off);
            if (a.gate == 1) dyo += __shfl_xor_sync(0xffffffffu, dyo, off);
        }
        if (in && l == 0) {
            a.diw[r] = dot;
            if (a.gate == 1) a.dg[r] = __float2bfloat16_rn(dyo * sh * (1.0f - sh));
        }
    }
}

/* Whether key j is visible to query i (lo: i's document start, 0 without documents). */
__device__ __forceinline__ bool visible(int i, int j, int lo, int seq) {
    return j <= i && j >= lo && i < seq;
}

/* ---- 2. dK, dV (and the atomic dQ contribution) -------------------------------------------- */

/* Shared memory of the dK/dV kernel: bf16 tiles first (16-byte aligned), then row statistics. */
template <int D> struct dkdv_smem {
    static constexpr int QT = kQt<D>;
    static constexpr int k = 0, v = k + kBc * D, q = v + kBc * D, dO = q + 2 * QT * D,
                         ds = dO + 2 * QT * D, bf16_end = ds + QT * kBc;
    static constexpr size_t stats = sizeof(sl_bf16) * bf16_end; /* lse2, di, seg: 2 x QT each */
    static constexpr size_t bytes = stats + 3 * 2 * QT * sizeof(float);
};

template <int D, bool ATOMIC>
__global__ void __launch_bounds__(kThreads) tc_bwd_dkdv_kernel(const args a) {
    constexpr int QT = kQt<D>;
    SL_DYNAMIC_SMEM(unsigned char, smem);
    sl_bf16 *sb = (sl_bf16 *)smem;
    sl_bf16 *sk = sb + dkdv_smem<D>::k, *sv = sb + dkdv_smem<D>::v;
    sl_bf16 *sq = sb + dkdv_smem<D>::q, *sdo = sb + dkdv_smem<D>::dO, *sds = sb + dkdv_smem<D>::ds;
    float *slse = (float *)(smem + dkdv_smem<D>::stats), *sdi = slse + 2 * QT;
    int *sseg = (int *)(sdi + 2 * QT);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;

    const int64_t per_tile = (int64_t)a.batch * a.kv;
    const int j0 = (int)(blockIdx.x / per_tile) * kBc;
    const int kvh = (int)(blockIdx.x % a.kv);
    const int64_t tok0 = (int64_t)(blockIdx.x % per_tile / a.kv) * a.seq;
    const int nk = a.seq - j0 < kBc ? a.seq - j0 : kBc;
    const int64_t ldq = (int64_t)a.h * D, ldk = (int64_t)a.kv * D;
    const float c2 = a.scale * kLog2e;

    /* Query tiles [qt0, qt1) of each head: from the one holding the diagonal to the sequence end
     * or, with documents, to the first whose first row's document starts after the last key
     * (seg does not decrease, so no later row sees this key tile either). */
    const int qt0 = j0 / QT, nqt = (a.seq + QT - 1) / QT;
    int qt1 = qt0 + 1;
    while (qt1 < nqt && !(a.seg && a.seg[tok0 + qt1 * QT] >= j0 + nk)) qt1++;
    const int per_head = qt1 - qt0, steps = a.grp * per_head;

    /* Step s: head kvh * grp + s / per_head, query tile qt0 + s % per_head, buffer s & 1. */
    auto issue = [&](int s) {
        const int h = kvh * a.grp + s / per_head, i0 = (qt0 + s % per_head) * QT, b = s & 1;
        const int nq = a.seq - i0 < QT ? a.seq - i0 : QT;
        const int64_t row0 = (tok0 + i0) * a.h + h;
        load_tile_async<QT, D>(sq + b * QT * D, a.q + row0 * D, ldq, nq);
        load_tile_async<QT, D>(sdo + b * QT * D, a.dob + row0 * D, ldq, nq);
        for (int r = threadIdx.x; r < QT; r += kThreads) {
            const bool in = r < nq;
            slse[b * QT + r] = in ? a.lse[row0 + (int64_t)r * a.h] * kLog2e : 0.0f;
            sdi[b * QT + r] = in ? a.di[row0 + (int64_t)r * a.h] : 0.0f;
            sseg[b * QT + r] = in && a.seg ? a.seg[tok0 + i0 + r] : 0;
        }
    };

    load_tile_async<kBc, D>(sk, a.k + ((tok0 + j0) * a.kv + kvh) * D, ldk, nk);
    load_tile_async<kBc, D>(sv, a.v + ((tok0 + j0) * a.kv + kvh) * D, ldk, nk);
    issue(0);
    sl_cp_async_commit();

    float dk[D / 8][4], dv[D / 8][4];
    zero(dk);
    zero(dv);
    const int kr = warp * 16; /* the warp's first key row in the tile */

    for (int s = 0; s < steps; s++) {
        /* step s + 1's tiles in flight; step s's tiles and statistics visible to every warp
         * (the statistics are plain stores, made visible by the same barrier) */
        pipeline_next(s + 1 < steps, [&] { issue(s + 1); });
        const int b = s & 1, h = kvh * a.grp + s / per_head, i0 = (qt0 + s % per_head) * QT;
        const sl_bf16 *cq = sq + b * QT * D, *cdo = sdo + b * QT * D;
        const float *clse = slse + b * QT, *cdi = sdi + b * QT;
        const int *cseg = sseg + b * QT;

        /* S^T = K Q^T and dP^T = V dO^T (16 keys x QT queries per warp) */
        float st[QT / 8][4], dpt[QT / 8][4];
        zero(st);
        zero(dpt);
        SL_UNROLL
        for (int kk = 0; kk < D / 16; kk++) {
            uint32_t ak[4], av[4];
            ld_a<D>(ak, sk, kr, 16 * kk);
            ld_a<D>(av, sv, kr, 16 * kk);
            SL_UNROLL
            for (int np = 0; np < QT / 16; np++) {
                uint32_t bq[4], bo[4];
                ld_b_nk<D>(bq, cq, 16 * np, 16 * kk);
                ld_b_nk<D>(bo, cdo, 16 * np, 16 * kk);
                mma2(st[2 * np], st[2 * np + 1], ak, bq);
                mma2(dpt[2 * np], dpt[2 * np + 1], av, bo);
            }
        }

        /* P^T and dS^T in place (st, dpt): rows keys j0 + kr + g (+8), columns queries
         * i0 + 8 n + 2 t (+1). Masking is needed only where some pair is invisible. */
        const bool full = !a.seg && i0 >= j0 + kBc - 1 && i0 + QT <= a.seq;
        SL_UNROLL
        for (int n = 0; n < QT / 8; n++) {
            SL_UNROLL
            for (int e = 0; e < 4; e++) {
                const int qi = 8 * n + 2 * t + (e & 1), j = j0 + kr + g + 8 * (e >> 1);
                const bool vis = full || visible(i0 + qi, j, cseg[qi], a.seq);
                const float p = exp2f((vis ? st[n][e] * c2 : -INFINITY) - clse[qi]);
                st[n][e] = p;
                dpt[n][e] = p * (dpt[n][e] - cdi[qi]);
            }
        }

        /* dV += P^T dO, dK += dS^T Q (contraction over the step's queries) */
        SL_UNROLL
        for (int kk = 0; kk < QT / 16; kk++) {
            uint32_t ap[4], ad[4];
            acc_to_a(ap, st[2 * kk], st[2 * kk + 1]);
            acc_to_a(ad, dpt[2 * kk], dpt[2 * kk + 1]);
            SL_UNROLL
            for (int np = 0; np < D / 16; np++) {
                uint32_t bo[4], bq[4];
                ld_b_kn<D>(bo, cdo, 16 * kk, 16 * np);
                ld_b_kn<D>(bq, cq, 16 * kk, 16 * np);
                mma2(dv[2 * np], dv[2 * np + 1], ap, bo);
                mma2(dk[2 * np], dk[2 * np + 1], ad, bq);
            }
        }

        if constexpr (ATOMIC) {
            /* dS (queries x keys) into shared memory, then the step's dQ += dS K: warp w takes
             * query rows 16 (w % MT).. and D / (4 / MT) columns. */
            SL_UNROLL
            for (int n = 0; n < QT / 8; n++) {
                SL_UNROLL
                for (int e = 0; e < 4; e++) {
                    const int qi = 8 * n + 2 * t + (e & 1), kj = kr + g + 8 * (e >> 1);
                    sds[swz<kBc>(qi, kj >> 3) + (kj & 7)] = __float2bfloat16_rn(dpt[n][e]);
                }
            }
            __syncthreads();
            constexpr int MT = QT / 16, NW = D * MT / kWarps; /* columns per warp */
            const int m0 = 16 * (warp % MT), c0 = (warp / MT) * NW;
            float dq[NW / 8][4];
            zero(dq);
            SL_UNROLL
            for (int kk = 0; kk < kBc / 16; kk++) {
                uint32_t ad[4];
                ld_a<kBc>(ad, sds, m0, 16 * kk);
                SL_UNROLL
                for (int np = 0; np < NW / 16; np++) {
                    uint32_t bk[4];
                    ld_b_kn<D>(bk, sk, 16 * kk, c0 + 16 * np);
                    mma2(dq[2 * np], dq[2 * np + 1], ad, bk);
                }
            }
            SL_UNROLL
            for (int half = 0; half < 2; half++) {
                const int i = i0 + m0 + g + 8 * half;
                if (i >= a.seq) continue;
                float *dst = a.dqacc + ((tok0 + i) * a.h + h) * D + c0 + 2 * t;
                SL_UNROLL
                for (int n = 0; n < NW / 8; n++) {
                    atomicAdd(dst + 8 * n, dq[n][2 * half]);
                    atomicAdd(dst + 8 * n + 1, dq[n][2 * half + 1]);
                }
            }
        }
        __syncthreads(); /* every warp is done with buffer b (and sds) before they are refilled */
    }

    /* Epilogue: rows keys j0 + kr + g (+8), columns 8 n + 2 t (+1); dK takes the softmax scale. */
    SL_UNROLL
    for (int half = 0; half < 2; half++) {
        const int j = j0 + kr + g + 8 * half;
        if (j >= a.seq) continue;
        const int64_t row = ((tok0 + j) * a.kv + kvh) * D + 2 * t;
        SL_UNROLL
        for (int n = 0; n < D / 8; n++) {
            *(__nv_bfloat162 *)(a.dk + row + 8 * n) =
                __floats2bfloat162_rn(dk[n][2 * half] * a.scale, dk[n][2 * half + 1] * a.scale);
            *(__nv_bfloat162 *)(a.dv + row + 8 * n) =
                __floats2bfloat162_rn(dv[n][2 * half], dv[n][2 * half + 1]);
        }
    }
}

/* ---- 3. dQ, deterministic -------------------------------------------------------------------- */

/* Keys per dQ sub-step: a warp holds Q and dO fragments (D / 4 registers each), dQ (D / 2) and
 * S, dP (KS / 2 each). A whole 64-key tile at once spilled (nvcc 13.0: D = 128 on sm_80, D = 64 on
 * sm_90a, 12 bytes each); 32 keys do not (docs/attention.md, "Resources"). */
template <int D> constexpr int kDqKeys = 32;

template <int D> struct dq_smem {
    static constexpr int q = 0, dO = q + kBr * D, k = dO + kBr * D, v = k + 2 * kBc * D,
                         end = v + 2 * kBc * D;
    static constexpr size_t bytes = sizeof(sl_bf16) * end;
};

template <int D> __global__ void __launch_bounds__(kThreads) tc_bwd_dq_kernel(const args a) {
    constexpr int KS = kDqKeys<D>;
    SL_DYNAMIC_SMEM(sl_bf16, sb);
    sl_bf16 *sq = sb + dq_smem<D>::q, *sdo = sb + dq_smem<D>::dO;
    sl_bf16 *sk = sb + dq_smem<D>::k, *sv = sb + dq_smem<D>::v;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const qtile qt = locate_qtile(a);
    const int64_t ldq = (int64_t)a.h * D, ldk = (int64_t)a.kv * D;
    const int64_t row0 = (qt.tok0 + qt.i0) * a.h + qt.h;
    const sl_bf16 *kb = a.k + (qt.tok0 * a.kv + qt.kvh) * D;
    const sl_bf16 *vb = a.v + (qt.tok0 * a.kv + qt.kvh) * D;
    const float c2 = a.scale * kLog2e;
    const int jt0 = first_key_tile<kBc>(a.seg, qt.tok0, qt.i0), kend = qt.i0 + qt.nq;

    load_tile_async<kBr, D>(sq, a.q + row0 * D, ldq, qt.nq);
    load_tile_async<kBr, D>(sdo, a.dob + row0 * D, ldq, qt.nq);
    sl_cp_async_commit();
    auto issue = [&](int j0, int b) {
        const int nk = a.seq - j0 < kBc ? a.seq - j0 : kBc;
        load_tile_async<kBc, D>(sk + b * kBc * D, kb + j0 * ldk, ldk, nk);
        load_tile_async<kBc, D>(sv + b * kBc * D, vb + j0 * ldk, ldk, nk);
    };
    issue(jt0, 0);
    sl_cp_async_commit();

    /* the warp's rows qt.i0 + 16 warp + g (+8): statistics in registers */
    float lse2[2], di[2];
    int lo[2], qi[2];
    SL_UNROLL
    for (int half = 0; half < 2; half++) {
        qi[half] = qt.i0 + 16 * warp + g + 8 * half;
        const bool in = qi[half] < a.seq;
        const int64_t row = row0 + (int64_t)(16 * warp + g + 8 * half) * a.h;
        lse2[half] = in ? a.lse[row] * kLog2e : 0.0f;
        di[half] = in ? a.di[row] : 0.0f;
        lo[half] = in && a.seg ? a.seg[qt.tok0 + qi[half]] : 0;
    }

    sl_cp_async_wait<1>(); /* Q and dO (the K/V group may still be in flight) */
    __syncthreads();
    uint32_t aq[D / 16][4], ao[D / 16][4];
    SL_UNROLL
    for (int kk = 0; kk < D / 16; kk++) {
        ld_a<D>(aq[kk], sq, 16 * warp, 16 * kk);
        ld_a<D>(ao[kk], sdo, 16 * warp, 16 * kk);
    }

    float dq[D / 8][4];
    zero(dq);
    for (int j0 = jt0, s = 0; j0 < kend; j0 += kBc, s++) {
        /* the next key tile in flight; this step's K and V visible to every warp */
        pipeline_next(j0 + kBc < kend, [&] { issue(j0 + kBc, (s + 1) & 1); });
        const sl_bf16 *ck = sk + (s & 1) * kBc * D, *cv = sv + (s & 1) * kBc * D;

        const bool full = !a.seg && qt.i0 >= j0 + kBc - 1 && qt.nq == kBr;
        /* The key tile in sub-steps of KS keys (registers: see kDqKeys) */
        for (int ks = 0; ks < kBc; ks += KS) {
            /* S = Q K^T, dP = dO V^T: 16 queries x KS keys per warp */
            float sc[KS / 8][4], dp[KS / 8][4];
            zero(sc);
            zero(dp);
            SL_UNROLL
            for (int kk = 0; kk < D / 16; kk++) {
                SL_UNROLL
                for (int np = 0; np < KS / 16; np++) {
                    uint32_t bk[4], bv[4];
                    ld_b_nk<D>(bk, ck, ks + 16 * np, 16 * kk);
                    ld_b_nk<D>(bv, cv, ks + 16 * np, 16 * kk);
                    mma2(sc[2 * np], sc[2 * np + 1], aq[kk], bk);
                    mma2(dp[2 * np], dp[2 * np + 1], ao[kk], bv);
                }
            }

            /* dS = P (dP - Di) in place (dp): rows qi[e >> 1], keys j0 + ks + 8 n + 2 t (+1) */
            SL_UNROLL
            for (int n = 0; n < KS / 8; n++) {
                SL_UNROLL
                for (int e = 0; e < 4; e++) {
                    const int half = e >> 1, j = j0 + ks + 8 * n + 2 * t + (e & 1);
                    const bool vis = full || visible(qi[half], j, lo[half], a.seq);
                    const float p = exp2f((vis ? sc[n][e] * c2 : -INFINITY) - lse2[half]);
                    dp[n][e] = p * (dp[n][e] - di[half]);
                }
            }

            /* dQ += dS K (contraction over the sub-step's keys) */
            SL_UNROLL
            for (int kk = 0; kk < KS / 16; kk++) {
                uint32_t ad[4];
                acc_to_a(ad, dp[2 * kk], dp[2 * kk + 1]);
                SL_UNROLL
                for (int np = 0; np < D / 16; np++) {
                    uint32_t bk[4];
                    ld_b_kn<D>(bk, ck, ks + 16 * kk, 16 * np);
                    mma2(dq[2 * np], dq[2 * np + 1], ad, bk);
                }
            }
        }
        __syncthreads(); /* every warp is done with buffer s & 1 before it is refilled */
    }

    SL_UNROLL
    for (int half = 0; half < 2; half++) {
        if (qi[half] >= a.seq) continue;
        sl_bf16 *dst = a.dq + (row0 + (int64_t)(16 * warp + g + 8 * half) * a.h) * D + 2 * t;
        SL_UNROLL
        for (int n = 0; n < D / 8; n++)
            *(__nv_bfloat162 *)(dst + 8 * n) =
                __floats2bfloat162_rn(dq[n][2 * half] * a.scale, dq[n][2 * half + 1] * a.scale);
    }
}

/* ---- 4. atomic dQ: fp32 accumulator -> bf16 ------------------------------------------------ */

__global__ void tc_bwd_dq_convert_kernel(sl_bf16 *dq, const float *acc, int64_t n, float scale) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        dq[i] = __float2bfloat16_rn(acc[i] * scale);
}

template <int D> void launch(const args &a, bool atomic, cudaStream_t stream) {
    launch_bwd_prep(a, D, stream);
    const int64_t nkt = (a.seq + kBc - 1) / kBc, nqt = (a.seq + kBr - 1) / kBr;
    const int64_t kv_blocks = nkt * a.batch * a.kv, q_blocks = nqt * a.batch * a.h;
    SL_CHECK(q_blocks <= 0x7fffffff, "gated_attn_bwd: %lld blocks exceed the grid limit",
             (long long)q_blocks);
    void (*dkdv)(args) = atomic ? tc_bwd_dkdv_kernel<D, true> : tc_bwd_dkdv_kernel<D, false>;
    if (atomic)
        sl_cuda_raise_smem<tc_bwd_dkdv_kernel<D, true>>(dkdv_smem<D>::bytes, "gated_attn_bwd");
    else
        sl_cuda_raise_smem<tc_bwd_dkdv_kernel<D, false>>(dkdv_smem<D>::bytes, "gated_attn_bwd");
    SL_LAUNCH(dkdv, dim3((unsigned)kv_blocks), dim3(kThreads), dkdv_smem<D>::bytes, stream, a);
    SL_CUDA_LAUNCHED("gated_attn_bwd");
    if (atomic) {
        launch_dq_convert(a, D, stream);
    } else {
        void (*dq)(args) = tc_bwd_dq_kernel<D>;
        sl_cuda_raise_smem<tc_bwd_dq_kernel<D>>(dq_smem<D>::bytes, "gated_attn_bwd");
        SL_LAUNCH(dq, dim3((unsigned)q_blocks), dim3(kThreads), dq_smem<D>::bytes, stream, a);
        SL_CUDA_LAUNCHED("gated_attn_bwd");
    }
}

} // namespace

void sl_attn_tc::launch_bwd_prep(const args &a, int d, cudaStream_t stream) {
    const int64_t rows = (int64_t)a.batch * a.seq * a.h;
    const int64_t rows_per_block = (int64_t)kPrepWarps * (32 / (d / 8));
    const int64_t pblocks = (rows + rows_per_block - 1) / rows_per_block;
    /* rows of d bf16 from 16-byte aligned bases: every row starts on 16 bytes */
    const uintptr_t al = (uintptr_t)a.dy | (uintptr_t)a.o | (uintptr_t)a.dobw |
                         (a.gate == 2 ? (uintptr_t)a.g | (uintptr_t)a.dg : 0) | (uintptr_t)a.dqacc;
    SL_CHECK(al % 16 == 0, "gated_attn_bwd: the prep pass needs 16-byte aligned dy, O, dO, g, dg");
    void (*prep)(args) = d == 64 ? tc_bwd_prep_kernel<64> : tc_bwd_prep_kernel<128>;
    SL_LAUNCH(prep, dim3((unsigned)(pblocks < kPrepMaxBlocks ? pblocks : kPrepMaxBlocks)),
              dim3(32 * kPrepWarps), 0, stream, a);
    SL_CUDA_LAUNCHED("gated_attn_bwd");
}

void sl_attn_tc::launch_dq_convert(const args &a, int d, cudaStream_t stream) {
    const int64_t n = (int64_t)a.batch * a.seq * a.h * d;
    SL_LAUNCH(tc_bwd_dq_convert_kernel, dim3(sl_blocks(n < (1 << 24) ? n : 1 << 24, 256)),
              dim3(256), 0, stream, a.dq, (const float *)a.dqacc, n, a.scale);
    SL_CUDA_LAUNCHED("gated_attn_bwd");
}

args sl_attn_tc::bwd_args(void *ctx, bool atomic, sl_tensor *dq, sl_tensor *dk, sl_tensor *dv,
                          sl_tensor *dg, const sl_tensor *dy, const sl_tensor *q,
                          const sl_tensor *k, const sl_tensor *v, const sl_tensor *g,
                          const sl_tensor *seg, const sl_tensor *o, const sl_tensor *lse, int batch,
                          int seq, float scale) {
    const int64_t h = q->shape[1], kv = k->shape[1], d = q->shape[2];
    const int64_t rows = (int64_t)batch * seq * h;
    args a = {};
    a.q = sl_ptr<sl_bf16>(q), a.k = sl_ptr<sl_bf16>(k), a.v = sl_ptr<sl_bf16>(v);
    a.g = sl_ptr<sl_bf16>(g), a.dy = sl_ptr<sl_bf16>(dy), a.o = sl_ptr<sl_bf16>(o);
    a.dq = sl_ptr<sl_bf16>(dq), a.dk = sl_ptr<sl_bf16>(dk), a.dv = sl_ptr<sl_bf16>(dv);
    a.dg = g ? sl_ptr<sl_bf16>(dg) : nullptr;
    a.lse = sl_ptr<float>(lse), a.seg = seg ? sl_ptr<int>(seg) : nullptr;
    /* scratch slots of this operation: Di, dO, the atomic mode's dQ accumulator */
    a.diw = (float *)sl_cuda_scratch(ctx, 0, sizeof(float) * (size_t)rows);
    a.di = a.diw;
    a.dobw = (sl_bf16 *)sl_cuda_scratch(ctx, 1, sizeof(sl_bf16) * (size_t)(rows * d));
    a.dob = a.dobw;
    a.dqacc =
        atomic ? (float *)sl_cuda_scratch(ctx, 2, sizeof(float) * (size_t)(rows * d)) : nullptr;
    a.batch = batch, a.seq = seq, a.h = (int)h, a.kv = (int)kv, a.grp = (int)(h / kv);
    a.gate = !g ? 0 : g->numel == q->numel ? 2 : 1, a.scale = scale;
    return a;
}

void sl_cuda_gated_attn_tc_bwd(void *ctx, sl_tensor *dq, sl_tensor *dk, sl_tensor *dv,
                               sl_tensor *dg, const sl_tensor *dy, const sl_tensor *q,
                               const sl_tensor *k, const sl_tensor *v, const sl_tensor *g,
                               const sl_tensor *seg, const sl_tensor *o, const sl_tensor *lse,
                               int batch, int seq, float scale) {
    const bool atomic = !sl_cuda_deterministic(ctx);
    const args a = sl_attn_tc::bwd_args(ctx, atomic, dq, dk, dv, dg, dy, q, k, v, g, seg, o, lse,
                                        batch, seq, scale);
    cudaStream_t stream = sl_cuda_stream(ctx);
    if (q->shape[2] == 64)
        launch<64>(a, atomic, stream);
    else
        launch<128>(a, atomic, stream);
}
