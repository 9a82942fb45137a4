/*
 * attention/gated_attn_sm90_bwd.cu - fused causal gated attention, backward, for Hopper
 * (sm_90a): FlashAttention-3's backward with wgmma and TMA, sluice's gate, document masks and
 * GQA. The forward and the choice of kernel: gated_attn_sm90_fwd.cu; shared pieces:
 * gated_attn_sm90.cuh; design: docs/attention.md ("The Hopper kernel", "Backward").
 *
 * Three kernels:
 *   1. prep (the tensor-core kernels' own, gated_attn_tc_bwd.cu): the gate's gradient fused,
 *      dO = dy sigmoid(g) in bf16, dg, Di = rowsum(dO O), and the fused dQ's accumulator zeroed;
 *   2. dK, dV (this file): one block per (key tile of 128, chunk of the GQA group, sequence,
 *      kv head), earliest key tiles first. The group is split into hsplit chunks of grp / hsplit
 *      query heads (choose_hsplit, gated_attn_sm90_split.cu: 1 unless the blocks are too few and
 *      uneven to fill the GPU evenly); with hsplit > 1 each block writes fp32 partial dK, dV of
 *      its chunk to a workspace and the split's reduce (same file) sums the chunks in order. The
 * producer's first thread loads K and V once and then Q and dO of every step (every query head of
 * the block's chunk, query tiles from the diagonal on, as the mma.sync kernel walks them) into two
 * stages by TMA; its second warp writes the step's lse log2 e, Di and document starts into the
 * stage (plain stores, published by its mbarrier arrival). Each consumer warpgroup owns 64 keys and
 * keeps dK and dV in registers; per step S^T = K Q^T and dP^T = V dO^T (wgmma, shared memory, both
 *      K-major), P^T = 2^(S^T c - lse2) masked, dS^T = P^T (dP^T - Di), then dV += P^T dO and
 *      dK += dS^T Q with P^T and dS^T as register A operands (dO, Q MN-major). The softmax of
 *      S^T runs while dP^T is on the tensor cores (and, with SLUICE_ATTN_SM90_BWD_EARLY_DV=1,
 *      dS^T while dV is).
 *      Fused dQ (SLUICE_ATTN_SM90_DQ=fused; always without backend.deterministic): each
 *      consumer also writes its dS^T into a
 *      double-buffered shared tile, the two meet, and each computes half of the step's dQ = dS
 *      K (wgmma, both operands MN-major from shared memory) into a shared fp32 tile; the
 *      producer's third warp adds the tile to the fp32 accumulator with TMA add reductions
 *      (cp.reduce.async.bulk.tensor). With backend.deterministic (the default) the additions
 *      into each (query tile, head) are ordered by key tile through a counter per tile in
 *      global memory (a block waits for the previous key tile's addition: the same sum order,
 *      so the same bits, every run); without it they land in any order;
 *   3. the separate deterministic dQ pass (gated_attn_sm90_dq.cu), which recomputes S and
 *      dP (the deterministic default), or the fused dQ's accumulator converted to bf16
 *      (gated_attn_tc_bwd.cu).
 * P and dS are rounded to bf16 as MMA operands; every sum is fp32.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention/gated_attn_sm90.cuh"
#include "attention/kernels_cuda.h"
#include "core/env.h"

namespace {

using namespace sl_attn_sm90;

/* sm90_dkdv_kernel's opts: bits chosen at launch (bwd_pingpong, bwd_tiles_down) */
constexpr int kOptPingpong = 1, kOptTilesDown = 2;

/* The producer runs an index loop and the stats warp's loads: 40 registers (FlashAttention-3's
 * figure for a producer that does more than issue TMA), the consumers get 232. */
constexpr int kBwdProducerRegs = 40, kBwdConsumerRegs = 232;
static_assert(sl_setmaxnreg_fits(kWgThreads, kBwdProducerRegs, kConsumerThreads, kBwdConsumerRegs),
              "setmaxnreg: the warpgroups' registers exceed the block's");
/* The early dV's consumers hold P^T's fragments beside P^T, dP^T, dK and dV (208 registers of
 * values): at 232 ptxas spilled 16 bytes at D = 128. They take 240 and the producer 24
 * (FlashAttention-3's split; ptxas: 0 spills in the producer's index loop and statistics warp
 * too). */
constexpr int kEarlyProducerRegs = 24, kEarlyConsumerRegs = 240;
static_assert(sl_setmaxnreg_fits(kWgThreads, kEarlyProducerRegs, kConsumerThreads,
                                 kEarlyConsumerRegs),
              "setmaxnreg: the warpgroups' registers exceed the block's");

template <int D, bool FUSED, int BM_, int ST_ = 2> struct dkdv_layout {
    /* BN keys per block (64 per consumer); BM queries per step: 64 at D = 128 (S^T, dP^T: 32
     * registers each, dK and dV: 64 each); at D = 64 either 64 (32 each: room for the unmasked
     * tile's own branch; the default, see bwd_bm) or 128 (64 each, dK and dV 32 each;
     * FlashAttention-3's choice). A stage's statistics: lse log2 e, Di and the document start of BM
     * rows (16 more bytes keep the mbarriers aligned). The fused dQ's fp32 tile, BM x D in boxes of
     * 32 columns (128-byte rows, 128B swizzle), has DQST buffers: two (224 KiB in all at D = 128),
     * one at D = 64 with BM = 128, where a second would pass the 227 KiB a block may have.
     * ST stages of Q, dO and statistics: 2, or more without the fused dQ
     * (SLUICE_ATTN_SM90_BWD_STAGES, bwd_stages: the loads of step s + ST - 1 issued while step
     * s runs, ST - 1 steps ahead of their use). */
    static_assert(BM_ == 64 || (BM_ == 128 && D == 64), "BM: 64, or 128 at D = 64");
    static_assert(ST_ >= 2 && ST_ <= 4, "stages: 2 to 4");
    static constexpr int BN = kConsumers * kRows, BM = BM_, ST = ST_,
                         DQST = D == 64 && BM == 128 ? 1 : 2;
    static constexpr uint32_t kv_bytes = BN * D * 2, q_bytes = BM * D * 2,
                              ds_bytes = FUSED ? BN * BM * 2 : 0, dq_bytes = FUSED ? BM * D * 4 : 0,
                              stat_bytes = 12 * BM + 16;
    static constexpr uint32_t k = 0, v = kv_bytes, q = 2 * kv_bytes, dO = q + ST * q_bytes,
                              ds = dO + ST * q_bytes, dq = ds + 2 * ds_bytes,
                              stats = dq + DQST * dq_bytes, bars = stats + ST * stat_bytes;
    /* mbarriers: K and V full, Q/dO full and empty of each stage; with the fused dQ also the dQ
     * tiles' and the dS^T buffers' full and empty */
    static constexpr uint32_t bytes = bars + 8 * (1 + 2 * ST + (FUSED ? 2 * DQST + 4 : 0));
    static_assert(bytes <= 227 * 1024, "the dK/dV pass's shared memory exceeds the SM's 227 KiB");
};

/* The fused deterministic dQ's order: the key tile that adds to a (query tile, head) waits
 * until its counter shows every earlier key tile's addition. Blocks run earliest key tile
 * first, so the one waited for has started (on a GPU) or finished (in the emulator, which
 * runs blocks one after another: there the count must already be right). */
__device__ __forceinline__ void wait_turn(const int *counter, int want) {
#ifdef SLUICE_CUDA_EMULATED
    if (*(volatile const int *)counter != want) {
        printf("gated_attn_bwd: fused dQ counter %d, want %d: an earlier key tile has not "
               "added its dQ\n",
               *(volatile const int *)counter, want);
        __trap();
    }
#else
    while (*(volatile const int *)counter != want) {
    }
#endif
    __threadfence();
}

/* Whether key j is visible to query i (lo: i's document start, 0 without documents). */
__device__ __forceinline__ bool visible(int i, int j, int lo, int seq) {
    return j <= i && j >= lo && i < seq;
}

/* EARLY (SLUICE_ATTN_SM90_BWD_EARLY_DV, bwd_early_dv; without the fused dQ): a template
 * parameter, not an opts bit, because both step orders in one kernel made ptxas spill. */
template <int D, bool FUSED, int BM_, int ST_, bool EARLY>
__global__ void __launch_bounds__(kThreads, 1)
    sm90_dkdv_kernel(const __grid_constant__ CUtensorMap tq,
                     const __grid_constant__ CUtensorMap tdo,
                     const __grid_constant__ CUtensorMap tk, const __grid_constant__ CUtensorMap tv,
                     const __grid_constant__ CUtensorMap tdq, const args a, const int hsplit,
                     float *const part, int *const order, const int opts) {
    using L = dkdv_layout<D, FUSED, BM_, ST_>;
    constexpr int BN = L::BN, BM = L::BM, ST = L::ST, DQST = L::DQST;
    /* the fused dQ's halves, one per consumer: query rows at BM = 128, else head-dim columns
     * (NH of them) */
    constexpr int NH = BM == 128 ? 64 : D / 2;
    SL_DYNAMIC_SMEM_1024(uint8_t, smem);
    uint64_t *kv_full = (uint64_t *)(smem + L::bars), *q_full = kv_full + 1, *q_empty = q_full + ST,
             *dq_full = q_empty + ST, *dq_empty = dq_full + DQST, *ds_full = dq_empty + DQST,
             *ds_empty = ds_full + 2;

    /* block: key tile (major: earliest, the longest, first), then chunk, sequence, kv head */
    const int64_t per_tile = (int64_t)a.batch * a.kv * hsplit;
    const int j0 = (int)(blockIdx.x / per_tile) * BN, kvh = (int)(blockIdx.x % a.kv);
    const int b = (int)(blockIdx.x % per_tile / a.kv % a.batch);
    /* the chunk, from blockIdx again in the epilogue (not held in a register through the loop) */
    auto chunk_of = [&]() { return (int)(blockIdx.x % per_tile / ((int64_t)a.kv * a.batch)); };
    const int gh = a.grp / hsplit; /* query heads of this block: its chunk of the GQA group */
    const int64_t tok0 = (int64_t)b * a.seq;
    const int nk = a.seq - j0 < BN ? a.seq - j0 : BN;

    /* Query tiles [qt0, qt1) of each head: from the one holding the diagonal to the sequence end
     * or, with documents, to the first whose first row's document starts after the last key
     * (seg does not decrease, so no later row sees this key tile either). */
    const int qt0 = j0 / BM, nqt = (a.seq + BM - 1) / BM;
    int qt1 = qt0 + 1;
    while (qt1 < nqt && !(a.seg && a.seg[tok0 + qt1 * BM] >= j0 + nk)) qt1++;
    const int per_head = qt1 - qt0, steps = gh * per_head;
    /* step s, stage s % ST. By heads (the default): head h0 + s / per_head, query tile qt0 + s %
     * per_head, each head's tiles from the diagonal up. By tiles (kOptTilesDown,
     * SLUICE_ATTN_SM90_BWD_ORDER=tiles): query tile qt1 - 1 - s / gh, head h0 + s % gh, every
     * head of the chunk at a tile, from the last tile down, so that the blocks of a wave read
     * the same rows of Q and dO at the same step instead of drifting apart by their diagonals
     * (bench/l2_reuse_model.py: fewer L2 misses only where the L2 holds less than about 40 MB
     * for them). Same steps, same masks; dK and dV are summed in another (fixed) order. */
    const int h0 = kvh * a.grp + chunk_of() * gh;
    const bool down = (opts & kOptTilesDown) != 0;
    auto head_of = [&](int s) { return down ? h0 + s % gh : h0 + s / per_head; };
    auto row_of = [&](int s) { return (down ? qt1 - 1 - s / gh : qt0 + s % per_head) * BM; };

    if (threadIdx.x == 0) {
        sl_mbar_init(kv_full, 1);
        for (int s = 0; s < ST; s++) {
            sl_mbar_init(&q_full[s], 1 + 32); /* the TMA thread and the stats warp */
            sl_mbar_init(&q_empty[s], kConsumerThreads);
        }
        if (FUSED) {
            for (int s = 0; s < DQST; s++) {
                sl_mbar_init(&dq_full[s], kConsumerThreads);
                sl_mbar_init(&dq_empty[s], 1); /* the dQ writer, once the tile is read */
            }
            for (int s = 0; s < 2; s++) { /* both consumers wrote / read a dS^T buffer */
                sl_mbar_init(&ds_full[s], kConsumerThreads);
                sl_mbar_init(&ds_empty[s], kConsumerThreads);
            }
        }
        sl_fence_mbarrier_init();
    }
    __syncthreads();

    const int wg = (int)(threadIdx.x / kWgThreads);
    if (wg == 0) { /* producer */
        sl_setmaxnreg_dec<EARLY ? kEarlyProducerRegs : kBwdProducerRegs>();
        const int warp = (int)(threadIdx.x / 32), lane = (int)(threadIdx.x % 32);
        if (threadIdx.x == 0) {
            sl_mbar_arrive_expect_tx(kv_full, 2 * L::kv_bytes);
            for (int c = 0; c < D / 64; c++) {
                sl_tma_load_4d(smem + L::k + c * (BN * 128), &tk, kv_full, 64 * c, kvh, j0, b);
                sl_tma_load_4d(smem + L::v + c * (BN * 128), &tv, kv_full, 64 * c, kvh, j0, b);
            }
            for (int s = 0; s < steps; s++) {
                const int st = s % ST;
                if (s >= ST) sl_mbar_wait(&q_empty[st], (uint32_t)((s / ST - 1) & 1));
                sl_mbar_arrive_expect_tx(&q_full[st], 2 * L::q_bytes);
                for (int c = 0; c < D / 64; c++) {
                    sl_tma_load_4d(smem + L::q + st * L::q_bytes + c * (BM * 128), &tq, &q_full[st],
                                   64 * c, head_of(s), row_of(s), b);
                    sl_tma_load_4d(smem + L::dO + st * L::q_bytes + c * (BM * 128), &tdo,
                                   &q_full[st], 64 * c, head_of(s), row_of(s), b);
                }
            }
        } else if (warp == 1) { /* the step's row statistics */
            for (int s = 0; s < steps; s++) {
                const int st = s % ST, i0 = row_of(s);
                if (s >= ST) sl_mbar_wait(&q_empty[st], (uint32_t)((s / ST - 1) & 1));
                float *slse = (float *)(smem + L::stats + st * L::stat_bytes), *sdi = slse + BM;
                int *sseg = (int *)(sdi + BM);
                const int64_t row0 = (tok0 + i0) * a.h + head_of(s);
                for (int r = lane; r < BM; r += 32) {
                    const bool in = i0 + r < a.seq;
                    slse[r] = in ? a.lse[row0 + (int64_t)r * a.h] * kLog2e : 0.0f;
                    sdi[r] = in ? a.di[row0 + (int64_t)r * a.h] : 0.0f;
                    sseg[r] = in && a.seg ? a.seg[tok0 + i0 + r] : 0;
                }
                sl_mbar_arrive(&q_full[st]);
            }
        } else if (FUSED && threadIdx.x == 64) { /* the dQ writer (the third warp's first lane) */
            const int nqt_all = (a.seq + BM - 1) / BM, kt = j0 / BN;
            for (int s = 0; s < steps; s++) {
                const int qb = s % DQST, h = head_of(s), i0 = row_of(s);
                const uint8_t *sdq = smem + L::dq + qb * L::dq_bytes;
                sl_mbar_wait(&dq_full[qb], (uint32_t)((s / DQST) & 1));
                int *counter = nullptr;
                if (order) { /* key tiles [first, kt) have added to this tile before */
                    const int first = a.seg ? a.seg[tok0 + i0] / BN : 0;
                    counter = order + ((int64_t)b * a.h + h) * nqt_all + i0 / BM;
                    wait_turn(counter, kt - first);
                    sl_fence_proxy_async_global(); /* the flag (generic) before the reduce (async)
                                                    */
                }
                for (int c = 0; c < D / 32; c++)
                    sl_tma_reduce_add_4d(&tdq, sdq + c * (BM * 128), 32 * c, h, i0, b);
                sl_tma_store_commit();
                sl_tma_store_wait_read<0>();
                sl_mbar_arrive(&dq_empty[qb]);
                if (counter) { /* the additions done (not just read), then the next key tile */
                    sl_tma_store_wait<0>();
                    sl_fence_proxy_async_global(); /* the reduce (async) before the flag */
                    __threadfence();
                    atomicAdd(counter, 1);
                }
            }
            sl_tma_store_wait<0>();
        }
        return;
    }

    /* consumer c: keys j0 + 64 c .. j0 + 64 c + 63 */
    sl_setmaxnreg_inc<EARLY ? kEarlyConsumerRegs : kBwdConsumerRegs>();
    const int c = wg - 1;
    const lane_pos p = lane_of();
    const float c2 = a.scale * kLog2e;
    const uint8_t *sk = smem + L::k, *sv = smem + L::v;
    int kj[2];
    SL_UNROLL
    for (int x = 0; x < 2; x++) kj[x] = j0 + c * kRows + 16 * p.w + p.g + 8 * x;
    /* the fused dQ's half of dQ = dS K: query rows m0.., head-dim columns n0.. (64 x NH) */
    const int m0 = BM == 128 ? c * kRows : 0, n0 = BM == 128 ? 0 : NH * c;

    float dk[D / 2], dv[D / 2];
    zero_acc(dk);
    zero_acc(dv);
    sl_mbar_wait(kv_full, 0);

    /* The fused dQ of step t: this consumer's half of dS K (issued and committed; the caller
     * waits), then into the shared fp32 tile t % DQST once the writer has read it DQST steps
     * ago: rows m0 + 16 w + g (+ 8), columns n0 + 8 j + 2 q (+ 1); 32-column boxes of 128-byte
     * rows whose 16-byte chunks are XOR-swizzled by the row, so the 8 rows of a store fall in
     * different banks. */
    auto dq_issue = [&](float(&dqa)[NH / 2], int t) {
        const uint8_t *sds = smem + L::ds + (t & 1) * L::ds_bytes;
        sl_mbar_wait(&ds_full[t & 1], (uint32_t)((t >> 1) & 1));
        sl_wgmma_fence_operand(dqa);
        sl_wgmma_fence();
        const uint64_t dds = desc_mnmajor<BN>(sds, m0), dkk = desc_mnmajor<BN>(sk, n0);
        SL_UNROLL
        for (int kk = 0; kk < BN / 16; kk++)
            sl_wgmma_bf16_ss<NH, 1, 1>(dqa, mnslice(dds, kk), mnslice(dkk, kk), kk > 0);
        sl_wgmma_commit();
    };
    auto dq_store = [&](float(&dqa)[NH / 2], int t) {
        sl_wgmma_fence_operand(dqa);
        const int qb = t % DQST;
        uint8_t *sdq = smem + L::dq + qb * L::dq_bytes;
        if (t >= DQST) sl_mbar_wait(&dq_empty[qb], (uint32_t)((t / DQST - 1) & 1));
        SL_UNROLL
        for (int x = 0; x < 2; x++) {
            /* column n0 + 8 j + 2 q: box n0 / 32 + j / 4, chunk 2 (j % 4) + q / 2, 8 (q % 2)
             * bytes into it; the chunk XOR (row % 8) */
            const int r = m0 + 16 * p.w + p.g + 8 * x;
            const uint32_t u = (uint32_t)((p.q >> 1) ^ (r & 7));
            uint8_t *row = sdq + (n0 / 32) * (BM * 128) + r * 128 + (p.q & 1) * 8;
            SL_UNROLL
            for (int j = 0; j < NH / 8; j++)
                *(float2 *)(row + (j / 4) * (BM * 128) + (((uint32_t)(2 * (j % 4)) ^ u) << 4)) =
                    make_float2(dqa[4 * j + 2 * x], dqa[4 * j + 2 * x + 1]);
        }
        sl_fence_proxy_async();
        sl_mbar_arrive(&dq_full[qb]);
    };

    /* SLUICE_ATTN_SM90_BWD_PINGPONG (without the fused dQ only): the two consumers issue their
     * GEMMs in turns (the forward's ring, named barriers kBarTurn + c), so that one's softmax and
     * dS run beside the other's GEMMs instead of both consumers, fed by the same stage, doing
     * the same phase at once. Uniform per block: every thread takes the same branches. */
    using turn = turns<kConsumers, kBarTurn>;
    const bool pp = !FUSED && !EARLY && (opts & kOptPingpong) != 0;
    /* EARLY (beside the dQ pass, BM 64, any stages; bwd_early_dv refuses the turns): dV += P^T dO
     * is issued as soon as P^T is in registers, behind dP^T, and dS^T is computed while it runs, so
     * that a consumer's tensor-core queue stays filled through its own elementwise work. Same
     * products on the same values: the same bits as the default order. */
    static_assert(!(EARLY && FUSED), "the early dV is for the dK/dV pass without the fused dQ");
    constexpr bool early = EARLY;
    if (pp) turn::start(c);
    for (int s = 0; s < steps; s++) {
        const int st = s % ST, i0 = row_of(s);
        const uint8_t *sq = smem + L::q + st * L::q_bytes, *sdo = smem + L::dO + st * L::q_bytes;
        const float *slse = (const float *)(smem + L::stats + st * L::stat_bytes), *sdi = slse + BM;
        const int *sseg = (const int *)(sdi + BM);
        sl_mbar_wait(&q_full[st], (uint32_t)((s / ST) & 1));

        /* S^T = K Q^T and dP^T = V dO^T: 64 keys x BM queries, two groups */
        float sacc[BM / 2], dpacc[BM / 2];
        sl_wgmma_fence_operand(sacc);
        sl_wgmma_fence_operand(dpacc);
        if (pp) turn::wait(c);
        sl_wgmma_fence();
        {
            const uint64_t dk = desc_kmajor<BN>(sk, c * kRows), dq = desc_kmajor<BM>(sq, 0);
            SL_UNROLL
            for (int ks = 0; ks < D / 16; ks++)
                sl_wgmma_bf16_ss<BM, 0, 0>(sacc, kslice<BN>(dk, ks), kslice<BM>(dq, ks), ks > 0);
            sl_wgmma_commit();
            const uint64_t dv = desc_kmajor<BN>(sv, c * kRows), ddo = desc_kmajor<BM>(sdo, 0);
            SL_UNROLL
            for (int ks = 0; ks < D / 16; ks++)
                sl_wgmma_bf16_ss<BM, 0, 0>(dpacc, kslice<BN>(dv, ks), kslice<BM>(ddo, ks), ks > 0);
            sl_wgmma_commit();
        }
        if (pp) turn::pass(c);

        /* P^T (rows: keys kj[x]; columns: queries i0 + 8 j + 2 q + e) while dP^T computes. */
        sl_wgmma_wait<1>();
        sl_wgmma_fence_operand(sacc);
        /* Masking is needed only where some pair is invisible. Written per score as `full ||
         * visible(...)`, nvcc 13.0 kept a branch per score around the document start's shared
         * load (BSSY, BRA, BSYNC, two shared loads and address arithmetic: about 15 instructions
         * per score in the SASS). With BM = 64 (D = 128, and D = 64 by SLUICE_ATTN_SM90_BWD_BM)
         * the unmasked tile is a branch of its own (FFMA, MUFU and a shared load per score);
         * with BM = 128 (D = 64: 192 accumulator registers live here) that branch made ptxas
         * spill, so it keeps the per-score form. */
        const bool full = !a.seg && i0 >= j0 + BN - 1 && i0 + BM <= a.seq;
        if (BM == 64 && full) {
            SL_UNROLL
            for (int j = 0; j < BM / 8; j++) {
                SL_UNROLL
                for (int e = 0; e < 4; e++)
                    sacc[4 * j + e] =
                        sl_ex2_ftz(fmaf(sacc[4 * j + e], c2, -slse[8 * j + 2 * p.q + (e & 1)]));
            }
        } else {
            SL_UNROLL
            for (int j = 0; j < BM / 8; j++) {
                SL_UNROLL
                for (int e = 0; e < 4; e++) {
                    const int qi = 8 * j + 2 * p.q + (e & 1);
                    const bool vis = full || visible(i0 + qi, kj[e >> 1], sseg[qi], a.seq);
                    sacc[4 * j + e] =
                        sl_ex2_ftz(vis ? fmaf(sacc[4 * j + e], c2, -slse[qi]) : -INFINITY);
                }
            }
        }
        uint32_t pa[BM / 16][4], da[BM / 16][4];
        if (early) { /* dV behind dP^T; the wait below then retires dP^T only */
            acc_to_frags<BM>(pa, sacc);
            sl_wgmma_fence_operand(dv);
            fence_frags(pa);
            sl_wgmma_fence();
            const uint64_t ddo = desc_mnmajor<BM>(sdo, 0);
            SL_UNROLL
            for (int kk = 0; kk < BM / 16; kk++)
                sl_wgmma_bf16_rs<D, 1>(dv, pa[kk], mnslice(ddo, kk), 1);
            sl_wgmma_commit();
            sl_wgmma_wait<1>();
        } else {
            sl_wgmma_wait<0>();
        }
        sl_wgmma_fence_operand(dpacc);
        SL_UNROLL
        for (int j = 0; j < BM / 8; j++) {
            SL_UNROLL
            for (int e = 0; e < 4; e++) {
                const int qi = 8 * j + 2 * p.q + (e & 1);
                dpacc[4 * j + e] = sacc[4 * j + e] * (dpacc[4 * j + e] - sdi[qi]);
            }
        }
        if (!early) acc_to_frags<BM>(pa, sacc);
        acc_to_frags<BM>(da, dpacc);

        if constexpr (FUSED) {
            /* dS^T (keys x queries, bf16 as the MMAs see it) into this step's buffer, once both
             * consumers have read what step s - 2 left there (in step s - 1): the pair (key row
             * x, queries 8 j + 2 q, + 1) is da[j / 2][2 (j % 2) + x] */
            uint8_t *sds = smem + L::ds + (s & 1) * L::ds_bytes;
            if (s >= 2) sl_mbar_wait(&ds_empty[s & 1], (uint32_t)(((s - 2) >> 1) & 1));
            SL_UNROLL
            for (int j = 0; j < BM / 8; j++) {
                SL_UNROLL
                for (int x = 0; x < 2; x++)
                    *(uint32_t *)(sds + tile_off<BN>(c * kRows + 16 * p.w + p.g + 8 * x,
                                                     8 * j + 2 * p.q)) = da[j / 2][2 * (j % 2) + x];
            }
            sl_fence_proxy_async();
            sl_mbar_arrive(&ds_full[s & 1]);
        }

        /* dV += P^T dO (unless issued early), dK += dS^T Q: contraction over the step's BM
         * queries */
        sl_wgmma_fence_operand(dk);
        if (!early) sl_wgmma_fence_operand(dv);
        if (!early) fence_frags(pa);
        fence_frags(da);
        if (pp) turn::wait(c);
        sl_wgmma_fence();
        {
            const uint64_t ddo = desc_mnmajor<BM>(sdo, 0), dq = desc_mnmajor<BM>(sq, 0);
            if (!early) {
                SL_UNROLL
                for (int kk = 0; kk < BM / 16; kk++)
                    sl_wgmma_bf16_rs<D, 1>(dv, pa[kk], mnslice(ddo, kk), 1);
            }
            SL_UNROLL
            for (int kk = 0; kk < BM / 16; kk++)
                sl_wgmma_bf16_rs<D, 1>(dk, da[kk], mnslice(dq, kk), 1);
            sl_wgmma_commit();
        }
        if (pp) turn::pass(c);

        if constexpr (FUSED) {
            /* dQ of the previous step, one step late: its dS^T (both halves) is in its buffer by
             * now, so the two consumers rarely wait for each other and drift apart as they do
             * without the fused dQ, one's softmax beside the other's GEMMs */
            if (s > 0) { /* dqa declared here: live from the issue to the store only */
                float dqa[NH / 2];
                dq_issue(dqa, s - 1);
                sl_wgmma_wait<0>();
                sl_mbar_arrive(&q_empty[st]);
                sl_mbar_arrive(&ds_empty[(s - 1) & 1]);
                dq_store(dqa, s - 1);
            } else {
                sl_wgmma_wait<0>();
                sl_mbar_arrive(&q_empty[st]);
            }
        } else {
            sl_wgmma_wait<0>();
            sl_mbar_arrive(&q_empty[st]);
        }
        sl_wgmma_fence_operand(dk);
        sl_wgmma_fence_operand(dv);
        fence_frags(pa);
        fence_frags(da);
    }
    if (pp) turn::finish(c);
    if constexpr (FUSED) { /* the last step's dQ */
        float dqa[NH / 2];
        dq_issue(dqa, steps - 1);
        sl_wgmma_wait<0>();
        dq_store(dqa, steps - 1);
    }

    /* Epilogue: rows keys kj[x], columns 8 j + 2 q (+1). With the group split (hsplit > 1) the
     * chunk's fp32 sums go to its slice of the workspace, summed by dkdv_reduce_kernel; whole,
     * dK takes the softmax scale and both are rounded to bf16 here. */
    const int64_t slice = (int64_t)a.batch * a.seq * a.kv * D;
    SL_UNROLL
    for (int x = 0; x < 2; x++) {
        if (kj[x] >= a.seq) continue;
        const int64_t row = ((tok0 + kj[x]) * a.kv + kvh) * D + 2 * p.q;
        if (hsplit > 1) {
            float *pk = part + chunk_of() * slice + row, *pv = pk + hsplit * slice;
            SL_UNROLL
            for (int j = 0; j < D / 8; j++) {
                *(float2 *)(pk + 8 * j) = make_float2(dk[4 * j + 2 * x], dk[4 * j + 2 * x + 1]);
                *(float2 *)(pv + 8 * j) = make_float2(dv[4 * j + 2 * x], dv[4 * j + 2 * x + 1]);
            }
            continue;
        }
        SL_UNROLL
        for (int j = 0; j < D / 8; j++) {
            *(uint32_t *)(a.dk + row + 8 * j) =
                sl_pack_bf16x2(dk[4 * j + 2 * x] * a.scale, dk[4 * j + 2 * x + 1] * a.scale);
            *(uint32_t *)(a.dv + row + 8 * j) =
                sl_pack_bf16x2(dv[4 * j + 2 * x], dv[4 * j + 2 * x + 1]);
        }
    }
}

/* The fused dQ accumulator [T, H, D] fp32 as the TMA reductions' target: boxes of 32 columns
 * x 1 head x BM rows, 128B swizzle (the shared tile's layout). */
CUtensorMap acc_map(const args &a, int d, int rows, const char *op) {
    CUtensorMap m;
    const cuuint64_t dims[4] = {(cuuint64_t)d, (cuuint64_t)a.h, (cuuint64_t)a.seq,
                                (cuuint64_t)a.batch};
    const cuuint64_t row = (cuuint64_t)a.h * d * sizeof(float);
    const cuuint64_t strides[3] = {(cuuint64_t)d * sizeof(float), row, row * a.seq};
    const cuuint32_t box[4] = {32, 1, (cuuint32_t)rows, 1};
    const CUresult r = sl_tensor_map_tiled(&m, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, a.dqacc, dims,
                                           strides, box, SL_SWIZZLE_128B);
    SL_CHECK(r == CUDA_SUCCESS,
             "%s: cuTensorMapEncodeTiled failed (%d) for the [%d, %d, %d, %d] dQ accumulator", op,
             (int)r, a.batch, a.seq, a.h, d);
    return m;
}

/* SLUICE_ATTN_SM90_DQ, for backend.deterministic: unset, "" or "pass": the separate
 * deterministic dQ pass (recomputes S and dP); "fused": dQ added from the dK/dV pass by TMA
 * reductions in key-tile order. The pass is the default: on an H200 (2026-11-26, attn_bench,
 * docs/attention.md) the ordered fused dQ's backward measured 4-43% slower at the four
 * benchmark shapes (with BM 64 at head dim 64).
 * Without backend.deterministic dQ is always fused, unordered (faster than the pass at S =
 * 32768). Read at every backward, so a test can change it between calls. */
bool dq_fused(void) {
    static const char *const values[] = {"fused", "pass"};
    return sl_env_choice("SLUICE_ATTN_SM90_DQ", values, 2) == 0;
}

/* The dK/dV pass's query rows per step (BM) at head dim d: 64 at D = 128; at D = 64
 * SLUICE_ATTN_SM90_BWD_BM = 64 or 128, unset, "" or "auto": kD64BwdBm. 64 since an H200 measured
 * the deterministic backward at D = 64 30% faster with it than with 128 (314 against 242
 * TFLOP/s at S = 4096, 369 against 287 at S = 32768; attn_bench, 2026-11-26): the unmasked
 * tile's softmax branch fits its registers. Read at every backward. */
constexpr int kD64BwdBm = 64;
int bwd_bm(int d) {
    static const char *const values[3] = {"64", "128", "auto"};
    return d64_rows("SLUICE_ATTN_SM90_BWD_BM", values, d, 64, kD64BwdBm);
}

/* SLUICE_ATTN_SM90_BWD_PINGPONG: unset, "" or "0": the dK/dV pass's consumers run freely (the
 * default, as measured); "1": they issue their GEMMs in turns (sm90_dkdv_kernel; opt-in, not yet
 * measured on a GPU: docs/attention.md, "The backward's consumers in turns"). Without the fused
 * dQ only. Read at every backward. */
bool bwd_pingpong(void) {
    static const char *const values[] = {"0", "1"};
    return sl_env_choice("SLUICE_ATTN_SM90_BWD_PINGPONG", values, 2) == 1;
}

/* SLUICE_ATTN_SM90_BWD_STAGES: the dK/dV pass's stages of Q, dO and statistics, "2", "3" or
 * "4"; unset, "" or "auto": kBwdStages. The producer loads step s + ST - 1 while step s runs: with
 * 2 the loads of a step (32 KB by TMA at D = 128, and the statistics warp's scattered lse and Di
 * reads) have one step's time, about 1.7 us at S 32768, D 128 on an H200, to land. More stages
 * take shared memory the block leaves unused (one block per SM: 166 KB with 3 at D = 128, 200
 * KB with 4). Without the fused dQ and with BM = 64 only (the fused dQ's tiles leave no room at
 * D = 128); elsewhere 2. Opt-in, not yet measured on a GPU (docs/attention.md, "The dK/dV pass's
 * stages"). Read at every backward. */
constexpr int kBwdStages = 2;
int bwd_stages(void) {
    static const char *const values[] = {"2", "3", "4", "auto"};
    const int i = sl_env_choice("SLUICE_ATTN_SM90_BWD_STAGES", values, 4);
    return i < 0 || i == 3 ? kBwdStages : 2 + i;
}

/* SLUICE_ATTN_SM90_BWD_ORDER: the order of a dK/dV block's steps. Unset, "" or "heads": each
 * query head's tiles from the diagonal up, head after head (the default, as measured); "tiles":
 * from the sequence's last query tile down to the diagonal, every head of the block's chunk at
 * each tile (sm90_dkdv_kernel, kOptTilesDown). The blocks of a kv head that start together then
 * read the same Q and dO rows together instead of up to a whole sequence apart (their diagonals
 * differ, and head by head their starts drift further). Opt-in, not yet measured on a GPU
 * (docs/attention.md, "The dK/dV pass's stages and step order"). Read at every backward. */
bool bwd_tiles_down(void) {
    static const char *const values[] = {"heads", "tiles"};
    return sl_env_choice("SLUICE_ATTN_SM90_BWD_ORDER", values, 2) == 1;
}

/* SLUICE_ATTN_SM90_BWD_EARLY_DV: unset, "" or "0": a dK/dV step issues dV and dK together once
 * dS^T is ready (the default, as measured); "1": dV as soon as P^T is ready, dS^T computed
 * while it runs (sm90_dkdv_kernel's EARLY; the same bits). Beside the dQ pass at BM 64, with
 * 2, 3 or 4 stages (launch_bwd stops the backward elsewhere), and not with
 * SLUICE_ATTN_SM90_BWD_PINGPONG=1 (whose turns would hold the tensor cores through dS^T): that
 * pair stops it too. Opt-in, not yet measured on a GPU (docs/attention.md, "dV
 * before dS"). Read at every backward. */
bool bwd_early_dv(void) {
    static const char *const values[] = {"0", "1"};
    const bool early = sl_env_choice("SLUICE_ATTN_SM90_BWD_EARLY_DV", values, 2) == 1;
    SL_CHECK(!early || !bwd_pingpong(),
             "gated_attn_bwd: SLUICE_ATTN_SM90_BWD_EARLY_DV=1 does not combine with "
             "SLUICE_ATTN_SM90_BWD_PINGPONG=1 (set one of them)");
    return early;
}

/* ordered: the fused dQ's additions in key-tile order (backend.deterministic) */
template <int D, bool FUSED, int BM, int ST = 2, bool EARLY = false>
void launch_dkdv(void *ctx, const args &a, bool ordered, cudaStream_t stream) {
    using L = dkdv_layout<D, FUSED, BM, ST>;
    const char *op = "gated_attn_bwd";
    const CUtensorMap tq = head_map(a.q, a, a.h, D, L::BM, op),
                      tdo = head_map(a.dob, a, a.h, D, L::BM, op),
                      tk = head_map(a.k, a, a.kv, D, L::BN, op),
                      tv = head_map(a.v, a, a.kv, D, L::BN, op);
    /* without the fused dQ the kernel never reads its accumulator map: any valid map will do */
    const CUtensorMap tdq = FUSED ? acc_map(a, D, L::BM, op) : tq;
    const int hsplit = choose_hsplit(a, D, L::BN, L::BM, sl_cuda_props(ctx)->multiProcessorCount);
    /* scratch slots: bwd_args holds 0 (Di), 1 (dO) and 2 (the fused dQ accumulator); 3 the
     * group split's workspace, 4 the ordered dQ's counters (one per query tile and head) */
    float *part =
        hsplit > 1 ? (float *)sl_cuda_scratch(ctx, 3, split_bytes(a, D, hsplit)) : nullptr;
    int *order = nullptr;
    if (FUSED && ordered) {
        const size_t n = (size_t)a.batch * a.h * (size_t)((a.seq + L::BM - 1) / L::BM);
        order = (int *)sl_cuda_scratch(ctx, 4, n * sizeof(int));
        sl_cuda_check(cudaMemsetAsync(order, 0, n * sizeof(int), stream), op, "cudaMemsetAsync");
    }
    const int64_t blocks = (int64_t)((a.seq + L::BN - 1) / L::BN) * a.batch * a.kv * hsplit;
    SL_CHECK(blocks <= 0x7fffffff, "%s: %lld blocks exceed the grid limit", op, (long long)blocks);
    sl_cuda_raise_smem<sm90_dkdv_kernel<D, FUSED, BM, ST, EARLY>>(L::bytes, op);
#ifdef SLUICE_CUDA_EMULATED
    /* the ordered dQ's blocks wait for earlier key tiles' blocks: the emulator must run them
     * in index order (emu/README.md) */
    if (order) sl_emu_blocks_in_order((const void *)sm90_dkdv_kernel<D, FUSED, BM, ST, EARLY>);
#endif
    void (*kernel)(const CUtensorMap, const CUtensorMap, const CUtensorMap, const CUtensorMap,
                   const CUtensorMap, const args, const int, float *const, int *const, const int) =
        sm90_dkdv_kernel<D, FUSED, BM, ST, EARLY>;
    const int opts =
        (!FUSED && bwd_pingpong() ? kOptPingpong : 0) | (bwd_tiles_down() ? kOptTilesDown : 0);
    SL_LAUNCH(kernel, dim3((unsigned)blocks), dim3(kThreads), L::bytes, stream, tq, tdo, tk, tv,
              tdq, a, hsplit, part, order, opts);
    SL_CUDA_LAUNCHED(op);
    if (hsplit > 1) launch_dkdv_reduce(a, D, part, hsplit, stream);
}

/* The dK/dV pass beside the dQ pass at BM 64 with `stages` (2, 3 or 4) stages of Q, dO and
 * statistics, in the default step order or (EARLY) with dV issued before dS. */
template <int D, bool EARLY>
void launch_dkdv_ring(void *ctx, const args &a, int stages, cudaStream_t stream) {
    if (stages == 3)
        launch_dkdv<D, false, 64, 3, EARLY>(ctx, a, false, stream);
    else if (stages == 4)
        launch_dkdv<D, false, 64, 4, EARLY>(ctx, a, false, stream);
    else
        launch_dkdv<D, false, 64, 2, EARLY>(ctx, a, false, stream);
}

/* fused: dQ from the dK/dV pass into a.dqacc (which the prep zeroes), then converted; ordered
 * as well when deterministic. Else the separate deterministic dQ pass. */
template <int D>
void launch_bwd(void *ctx, const args &a, bool fused, bool deterministic, cudaStream_t stream) {
    constexpr int BIG = D == 64 ? 128 : 64; /* BM = 128 exists at D = 64 only */
    const bool big = bwd_bm(D) == 128;
    /* The early dV is built for the dQ pass's dK/dV kernel at BM 64, with each of its 2, 3 and
     * 4 stages (the deeper rings change where a step's loads land, not its registers): at BM
     * 128 ptxas spilled 48 bytes even at 240 registers, and the fused dQ keeps its own order.
     * Asked for there it stops the backward rather than be dropped from a measurement unseen. */
    const bool early = bwd_early_dv();
    const int stages = fused ? 2 : bwd_stages();
    SL_CHECK(!early || (!fused && !big),
             "gated_attn_bwd: SLUICE_ATTN_SM90_BWD_EARLY_DV=1 is built for the dK/dV pass beside "
             "the dQ pass with BM 64 only: not with the fused dQ or SLUICE_ATTN_SM90_BWD_BM=128");
    sl_attn_tc::launch_bwd_prep(a, D, stream);
    if (fused) {
        if (big)
            launch_dkdv<D, true, BIG>(ctx, a, deterministic, stream);
        else
            launch_dkdv<D, true, 64>(ctx, a, deterministic, stream);
        sl_attn_tc::launch_dq_convert(a, D, stream);
    } else {
        if (big)
            launch_dkdv<D, false, BIG>(ctx, a, false, stream);
        else if (early)
            launch_dkdv_ring<D, true>(ctx, a, stages, stream);
        else
            launch_dkdv_ring<D, false>(ctx, a, stages, stream);
        launch_dq(ctx, a, D, stream);
    }
}

} // namespace

int sl_cuda_gated_attn_sm90_hsplit(int batch, int seq, int kv, int grp, int d, int sms) {
    args a = {};
    a.batch = batch, a.seq = seq, a.kv = kv, a.grp = grp, a.h = kv * grp;
    return choose_hsplit(a, d, dkdv_layout<128, false, 64>::BN, bwd_bm(d), sms);
}

void sl_cuda_gated_attn_sm90_bwd(void *ctx, sl_tensor *dq, sl_tensor *dk, sl_tensor *dv,
                                 sl_tensor *dg, const sl_tensor *dy, const sl_tensor *q,
                                 const sl_tensor *k, const sl_tensor *v, const sl_tensor *g,
                                 const sl_tensor *seg, const sl_tensor *o, const sl_tensor *lse,
                                 int batch, int seq, float scale) {
    sl_cuda_gated_attn_sm90_note();
    const bool deterministic = sl_cuda_deterministic(ctx), fused = !deterministic || dq_fused();
    const args a = sl_attn_tc::bwd_args(ctx, fused, dq, dk, dv, dg, dy, q, k, v, g, seg, o, lse,
                                        batch, seq, scale);
    cudaStream_t stream = sl_cuda_stream(ctx);
    if (q->shape[2] == 64)
        launch_bwd<64>(ctx, a, fused, deterministic, stream);
    else
        launch_bwd<128>(ctx, a, fused, deterministic, stream);
}
