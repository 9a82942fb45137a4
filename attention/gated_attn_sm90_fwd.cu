/*
 * attention/gated_attn_sm90_fwd.cu - fused causal gated attention, forward, for Hopper (sm_90a):
 * FlashAttention-3's forward (Shah et al., 2024) with sluice's gate, document masks and GQA.
 * The attention kernel "sm90" (attn_kernels.cu): bf16 at head dims 64 and 128 on compute
 * capability 9.x, where the choice "auto" takes it before the mma.sync kernel (gated_attn_tc_*.cu);
 * this file also holds its support checks (sl_cuda_gated_attn_sm90_runs_on, _automatic).
 * CPU twin: attention/gated_attn_cpu.c; semantics: core/ops.h; shared pieces:
 * gated_attn_sm90.cuh; design and estimates: docs/attention.md ("The Hopper kernel").
 *
 * One block of 1 + NC warpgroups per (query tile of BM = 64 NC rows, sequence, head), latest
 * tiles first (NC = 2; at D = 64 also 3, SLUICE_ATTN_SM90_FWD_BM = 192):
 *   producer     one thread: Q by TMA once, then K and V tiles of 128 keys through a ring of ST
 *                stages (3 at D = 64, 2 at D = 128), K and V each with a "full" mbarrier (TMA
 *                transaction bytes) and an "empty" one (the 128 NC consumer threads) per stage;
 *   consumers    NC warpgroups of 64 query rows: S = Q K^T (wgmma from shared memory, both
 *                K-major), online softmax in registers (log2 domain), O += P V (P from
 *                registers, V MN-major), fp32 accumulators throughout.
 * Key tiles run from the causal diagonal down to the tile holding the block's first document
 * start (FlashAttention-3's order: the masked diagonal tile first); tiles above the diagonal and
 * before the document are never loaded.
 *
 * Overlap, as FlashAttention-3:
 *   - within a warpgroup, step n issues S_n = Q K_n^T and then O += P_{n-1} V_{n-1} before
 *     waiting for S_n, so the softmax of tile n runs while P_{n-1} V_{n-1} is on the tensor
 *     cores; O is rescaled after that GEMM retires (it already holds P_{n-1} V_{n-1}, which is
 *     scaled to the same running max);
 *   - between the consumers (ping-pong, a ring of turns with three), named barriers give each
 *     its turn to issue its GEMMs, so one warpgroup's softmax overlaps the others' GEMMs.
 * Persistent form (SLUICE_ATTN_SM90_PERSISTENT=1 or fwd; opt-in until measured): a block per
 * SM takes query tiles, longest first, from a counter (tile_feed and tile_slots in
 * gated_attn_sm90.cuh), and the producer loads the next tile's Q and first keys while the
 * consumers finish this one (Q's buffer is released after the tile's last S, the epilogue
 * stages its rows in a buffer of its own), so the block's start and the pipeline's fill are
 * paid once per SM instead of once per tile.
 * Epilogue, fused: O / l, lse = ln 2 (m + log2 l), the pre-gate O and y = O * sigmoid(g)
 * (elementwise or headwise gate; y = O without one) as bf16 through shared memory and TMA
 * stores (the consumer's own Q rows are free by then). The elementwise gate's tile is loaded by
 * TMA into shared memory of its own after the first key tile, so the epilogue does not wait on
 * global memory for it.
 */
#include <stdlib.h>
#include <string.h>

#include "attention/gated_attn_sm90.cuh"
#include "attention/kernels_cuda.h"
#include "core/env.h"

namespace {

using namespace sl_attn_sm90;

/* NC consumer warpgroups of 64 query rows each: 2 (BM 128), or 3 (BM 192) at D = 64 where the
 * consumers' registers allow it (fwd_rows). PERSIST: the persistent form (persistent_kernels), with
 * a staging area of its own for the epilogue and the barriers that pass tiles between roles. */
template <int D, int NC, bool PERSIST = false> struct fwd_layout {
    static constexpr int BM = NC * kRows, BN = 128, ST = D == 64 ? 3 : 2;
    static constexpr int threads = (1 + NC) * kWgThreads, consumer_threads = NC * kWgThreads;
    /* setmaxnreg: within the block's launch registers (sl_setmaxnreg_fits), 384 x 168 =
     * 64,512 with two consumers (kProducerRegs, kConsumerRegs; persistent:
     * kPersistProducerRegs, kPersistConsumerRegs); 512 x 128 = 65,536 with three: 128 x 24
     * (128 x 32 persistent) + 384 x 160 */
    static constexpr int producer_regs = PERSIST ? kPersistProducerRegs : kProducerRegs;
    static constexpr int consumer_regs = NC == 3   ? 160
                                         : PERSIST ? kPersistConsumerRegs
                                                   : kConsumerRegs;
    static_assert(sl_setmaxnreg_fits(kWgThreads, producer_regs, consumer_threads, consumer_regs),
                  "setmaxnreg: the warpgroups' registers exceed the block's");
    /* named barriers: the turns of the NC consumers, then each consumer's epilogue */
    static constexpr int bar_turn = kBarTurn, bar_wg = kBarTurn + NC;
    static constexpr uint32_t q_bytes = BM * D * 2, kv_bytes = BN * D * 2;
    /* g: the block's tile of the elementwise gate, as Q (loaded while the keys run, read by the
     * epilogue); stage (PERSIST): the epilogue's rows of O and y, as Q, so that Q's buffer is
     * free for the next tile as soon as the last S = Q K^T has retired */
    static constexpr uint32_t q = 0, k = q_bytes, v = k + ST * kv_bytes, g = v + ST * kv_bytes,
                              stage = g + q_bytes, bars = stage + (PERSIST ? q_bytes : 0);
    /* mbarriers: Q full, then K full, K empty, V full, V empty of each stage, then g full;
     * PERSIST: then Q empty, g empty, tile full[2], tile empty[2], and the two tile slots */
    static constexpr int nbars = 2 + 4 * ST + (PERSIST ? 6 : 0);
    static constexpr uint32_t slots = bars + 8 * nbars;
    static constexpr uint32_t bytes = slots + (PERSIST ? 2 * sizeof(int) : 0);
    static_assert(bytes <= 227 * 1024, "the forward's shared memory exceeds the SM's 227 KiB");
};

/* Online softmax of one key tile (keys j0.. in sacc, the accumulator of S), in place: masked
 * scores become -inf, P = 2^(S scale log2 e - m') with the new running max m' (kept in that
 * scaled, log2 domain), l and m updated, alpha = 2^(m - m') the factor O must be rescaled by.
 * Masking is needed on the diagonal tile (keys after a row) and where a row's document starts
 * inside or after the tile (lo[1] is the larger start). A row that sees no key yet keeps m =
 * -inf and takes the exponents from 0 (P = 0, alpha = 0).
 * Per score, unmasked: a max, one FFMA (the scale folded into the exponent's argument: the max of
 * the raw scores times c2 is the max of the scaled ones, c2 > 0, bitwise), one MUFU.EX2
 * (sl_ex2_ftz) and the sum's add: 4 instructions and half a pack where exp2f and a separate scale
 * took 8 (nvcc 13.0 SASS, 2026-11-26). */
template <int BN>
__device__ __forceinline__ void softmax_tile(float (&sacc)[BN / 2], int j0, const int (&row)[2],
                                             const int (&lo)[2], float c2, float (&m)[2],
                                             float (&l)[2], float (&alpha)[2], int q) {
    const bool masked = j0 + BN - 1 > row[0] || j0 < lo[1];
    SL_UNROLL
    for (int x = 0; x < 2; x++) {
        /* the thread's column 8 j + e of the tile is key j0 + 2 q + 8 j + e: visible iff
         * lo_c <= 8 j + e <= hi_c (compile-time left sides: one comparison each) */
        const int hi_c = row[x] - j0 - 2 * q, lo_c = lo[x] - j0 - 2 * q;
        float mx = -INFINITY;
        if (masked) {
            SL_UNROLL
            for (int j = 0; j < BN / 8; j++) {
                SL_UNROLL
                for (int e = 0; e < 2; e++) {
                    float &v = sacc[4 * j + 2 * x + e];
                    v = 8 * j + e <= hi_c && 8 * j + e >= lo_c ? v : -INFINITY;
                    mx = fmaxf(mx, v);
                }
            }
        } else {
            SL_UNROLL
            for (int j = 0; j < BN / 8; j++) {
                SL_UNROLL
                for (int e = 0; e < 2; e++) mx = fmaxf(mx, sacc[4 * j + 2 * x + e]);
            }
        }
        const float mnew = fmaxf(m[x], quad_max(mx) * c2);
        const float mref = mnew == -INFINITY ? 0.0f : mnew;
        alpha[x] = sl_ex2_ftz(m[x] - mref);
        float sum = 0.0f;
        SL_UNROLL
        for (int j = 0; j < BN / 8; j++) {
            SL_UNROLL
            for (int e = 0; e < 2; e++) {
                float &v = sacc[4 * j + 2 * x + e];
                v = sl_ex2_ftz(fmaf(v, c2, -mref));
                sum += v;
            }
        }
        l[x] = l[x] * alpha[x] + sum; /* this lane's share; the quad sums at the end */
        m[x] = mnew;
    }
}

template <int D, int NC, bool PERSIST>
__global__ void __launch_bounds__(fwd_layout<D, NC, PERSIST>::threads, 1)
    sm90_fwd_kernel(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tk,
                    const __grid_constant__ CUtensorMap tv, const __grid_constant__ CUtensorMap to,
                    const __grid_constant__ CUtensorMap ty, const __grid_constant__ CUtensorMap tg,
                    const args a, int *const tile_counter) {
    using L = fwd_layout<D, NC, PERSIST>;
    constexpr int BM = L::BM, BN = L::BN, ST = L::ST;
    using turn = turns<NC, L::bar_turn>;
    SL_DYNAMIC_SMEM_1024(uint8_t, smem);
    uint64_t *q_full = (uint64_t *)(smem + L::bars), *k_full = q_full + 1, *k_empty = k_full + ST;
    uint64_t *v_full = k_empty + ST, *v_empty = v_full + ST, *g_full = v_empty + ST;
    /* PERSIST only: Q's and the gate's buffers free again, the tile slots */
    uint64_t *q_empty = g_full + 1, *g_empty = q_empty + 1;
    const tile_slots slots = {g_empty + 1, (int *)(smem + L::slots)};
    const tile_feed<PERSIST> feed = {tile_counter, (a.seq + BM - 1) / BM * a.batch * a.h};
    const int wg = (int)(threadIdx.x / kWgThreads);

    if (threadIdx.x == 0) {
        sl_mbar_init(q_full, 1);
        sl_mbar_init(g_full, 1);
        for (int s = 0; s < ST; s++) {
            sl_mbar_init(&k_full[s], 1);
            sl_mbar_init(&v_full[s], 1);
            sl_mbar_init(&k_empty[s], L::consumer_threads);
            sl_mbar_init(&v_empty[s], L::consumer_threads);
        }
        if (PERSIST) {
            sl_mbar_init(q_empty, L::consumer_threads);
            sl_mbar_init(g_empty, L::consumer_threads);
            slots.init(L::consumer_threads);
        }
        sl_fence_mbarrier_init();
    }
    __syncthreads();

    /* A tile's key tiles run from the causal diagonal (jlast, step 0) down to the first one the
     * tile's first document needs (jfirst, step ntiles - 1). */
    auto jlast_of = [](const qspan &sp) { return sp.jfirst + (sp.ntiles - 1) * BN; };

    if (wg == 0) { /* producer */
        sl_setmaxnreg_dec<L::producer_regs>();
        if (threadIdx.x != 0) return;
        sl_tma_prefetch(&tk);
        sl_tma_prefetch(&tv);
        /* the tile's rows of Q (or of the gate) as [D / 64 chunks][BM rows][64] */
        auto load_rows = [&](const qspan &sp, const CUtensorMap *map, uint32_t off,
                             uint64_t *full) {
            sl_mbar_arrive_expect_tx(full, L::q_bytes);
            for (int half = 0; half < NC; half++)
                for (int c = 0; c < D / 64; c++)
                    sl_tma_load_4d(smem + off + c * (BM * 128) + half * (kRows * 128), map, full,
                                   64 * c, sp.t.h, sp.t.i0 + half * kRows, sp.b);
        };
        /* the ring's position as a stage and a parity: the block's next key tile goes into
         * stage s once the consumers released the tile ST before it (of the pass before,
         * parity ph ^ 1; none before the first wrap) */
        uint32_t s = 0, ph = 0;
        bool wrapped = false;
        /* key (or value) tile j into stage s */
        auto load = [&](int j, const qspan &sp, uint64_t *full, uint64_t *empty,
                        const CUtensorMap *map, uint32_t off) {
            if (wrapped) sl_mbar_wait(&empty[s], ph ^ 1);
            sl_mbar_arrive_expect_tx(&full[s], L::kv_bytes);
            for (int c = 0; c < D / 64; c++)
                sl_tma_load_4d(smem + off + s * L::kv_bytes + c * (BN * 128), map, &full[s], 64 * c,
                               sp.t.kvh, j, sp.b);
        };
        int idx = (int)blockIdx.x;
        for (int it = 0;; it++) {
            if (PERSIST) slots.publish(it, idx); /* the tile (or the end) to the consumers */
            if (idx >= feed.total) break;
            const qspan sp = query_span<BM, BN>(a, idx);
            /* Q once the previous tile's last S has read it */
            if (PERSIST && it > 0) sl_mbar_wait(q_empty, (uint32_t)((it - 1) & 1));
            load_rows(sp, &tq, L::q, q_full);
            /* the elementwise gate after the first keys (plain form) or once the ring is
             * full (persistent: after the previous tile's epilogue has read the gate's buffer,
             * which the ring's first tiles need not wait for): the epilogue reads it from
             * shared memory instead of waiting on 2 bytes per element from global memory */
            const int gate_step = PERSIST ? (sp.ntiles < ST ? sp.ntiles : ST) - 1 : 0;
            const int jlast = jlast_of(sp);
            for (int n = 0; n < sp.ntiles; n++) {
                load(jlast - n * BN, sp, k_full, k_empty, &tk, L::k);
                load(jlast - n * BN, sp, v_full, v_empty, &tv, L::v);
                if (++s == ST) s = 0, ph ^= 1, wrapped = true;
                if (n == gate_step && a.gate == 2) {
                    if (PERSIST && it > 0) sl_mbar_wait(g_empty, (uint32_t)((it - 1) & 1));
                    load_rows(sp, &tg, L::g, g_full);
                }
            }
            /* the next tile: the atomic's latency passes while the consumers still work
             * through the last key tiles just issued */
            idx = feed.next();
        }
        return;
    }

    /* consumer c: query rows i0 + 64 c .. i0 + 64 c + 63 of each of the block's tiles */
    sl_setmaxnreg_inc<L::consumer_regs>();
    const int c = wg - 1;
    const lane_pos p = lane_of();
    const float c2 = a.scale * kLog2e;
    uint8_t *sq = smem + L::q + c * (kRows * 128); /* this consumer's rows of each Q chunk */
    /* the epilogue's rows: Q's own (free by then) or, persistent, a staging area of their own */
    uint8_t *so = PERSIST ? smem + L::stage + c * (kRows * 128) : sq;
    const uint8_t *sg = smem + L::g + c * (kRows * 128); /* this consumer's rows of the gate */

    float o[D / 2], sacc[BN / 2];
    uint32_t pa[BN / 16][4];
    turn::start(c);
    uint32_t kv = 0; /* key tiles of the block's earlier query tiles: the ring's position */
    int idx = (int)blockIdx.x;
    for (int it = 0;; it++) {
        if (PERSIST) idx = slots.take(it);
        if (idx >= feed.total) break;
        const qspan sp = query_span<BM, BN>(a, idx);
        const sl_attn_tc::qtile &t = sp.t;
        const int ntiles = sp.ntiles, jlast = jlast_of(sp); /* step n: key tile jlast - n BN */
        int row[2], lo[2];
        float m[2], l[2], alpha[2];
        SL_UNROLL
        for (int x = 0; x < 2; x++) {
            row[x] = t.i0 + c * kRows + 16 * p.w + p.g + 8 * x;
            const int rc = row[x] < a.seq ? row[x] : a.seq - 1;
            lo[x] = a.seg ? a.seg[t.tok0 + rc] : 0;
            m[x] = -INFINITY, l[x] = 0.0f;
        }
        zero_acc(o);

        /* The waits for a tile come before the wgmma.fence of its GEMMs: nothing but the issues
         * between the fence and the wgmmas (ptxas otherwise inserts fences of its own, C7519). */
        auto wait_k = [&](int n) {
            sl_mbar_wait(&k_full[(kv + n) % ST], (uint32_t)(((kv + n) / ST) & 1));
        };
        auto wait_v = [&](int n) {
            sl_mbar_wait(&v_full[(kv + n) % ST], (uint32_t)(((kv + n) / ST) & 1));
        };
        /* S = Q K_n^T: D / 16 k-slices over the head dim */
        auto issue_s = [&](int n) {
            const uint64_t dq = desc_kmajor<BM>(sq, 0),
                           dk = desc_kmajor<BN>(smem + L::k + ((kv + n) % ST) * L::kv_bytes, 0);
            SL_UNROLL
            for (int ks = 0; ks < D / 16; ks++)
                sl_wgmma_bf16_ss<BN, 0, 0>(sacc, kslice<BM>(dq, ks), kslice<BN>(dk, ks), ks > 0);
            sl_wgmma_commit();
        };
        /* O += P_n V_n: BN / 16 k-slices over the keys */
        auto issue_pv = [&](int n) {
            const uint64_t dv = desc_mnmajor<BN>(smem + L::v + ((kv + n) % ST) * L::kv_bytes, 0);
            SL_UNROLL
            for (int kk = 0; kk < BN / 16; kk++)
                sl_wgmma_bf16_rs<D, 1>(o, pa[kk], mnslice(dv, kk), 1);
            sl_wgmma_commit();
        };
        /* persistent: the tile's last S has retired, Q's buffer may take the next tile's */
        auto release_q = [&](int n) {
            if (PERSIST && n == ntiles - 1) sl_mbar_arrive(q_empty);
        };

        sl_mbar_wait(q_full, (uint32_t)(it & 1));

        /* step 0: S_0 alone */
        turn::wait(c);
        wait_k(0);
        sl_wgmma_fence_operand(sacc);
        sl_wgmma_fence();
        issue_s(0);
        turn::pass(c);
        sl_wgmma_wait<0>();
        sl_wgmma_fence_operand(sacc);
        sl_mbar_arrive(&k_empty[kv % ST]);
        release_q(0);
        softmax_tile<BN>(sacc, jlast, row, lo, c2, m, l, alpha, p.q); /* O = 0: alpha unused */
        acc_to_frags<BN>(pa, sacc);

        for (int n = 1; n < ntiles; n++) {
            turn::wait(c);
            wait_k(n);
            wait_v(n - 1);
            sl_wgmma_fence_operand(sacc);
            sl_wgmma_fence_operand(o);
            fence_frags(pa);
            sl_wgmma_fence();
            issue_s(n);      /* group 1: S_n */
            issue_pv(n - 1); /* group 2: O += P_{n-1} V_{n-1} */
            turn::pass(c);
            sl_wgmma_wait<1>(); /* S_n has retired */
            sl_wgmma_fence_operand(sacc);
            sl_mbar_arrive(&k_empty[(kv + n) % ST]);
            release_q(n);
            softmax_tile<BN>(sacc, jlast - n * BN, row, lo, c2, m, l, alpha, p.q);
            sl_wgmma_wait<0>(); /* P_{n-1} V_{n-1} has retired: O and pa are free */
            sl_wgmma_fence_operand(o);
            fence_frags(pa);
            sl_mbar_arrive(&v_empty[(kv + n - 1) % ST]);
            SL_UNROLL
            for (int j = 0; j < D / 8; j++) {
                o[4 * j + 0] *= alpha[0], o[4 * j + 1] *= alpha[0];
                o[4 * j + 2] *= alpha[1], o[4 * j + 3] *= alpha[1];
            }
            acc_to_frags<BN>(pa, sacc);
        }

        /* the last tile's O += P V */
        turn::wait(c);
        wait_v(ntiles - 1);
        sl_wgmma_fence_operand(o);
        fence_frags(pa);
        sl_wgmma_fence();
        issue_pv(ntiles - 1);
        turn::pass(c);
        sl_wgmma_wait<0>();
        sl_wgmma_fence_operand(o);
        fence_frags(pa);
        sl_mbar_arrive(&v_empty[(kv + ntiles - 1) % ST]);

        /* epilogue: lse, then O and y through the staging rows */
        float inv[2], gh[2];
        int64_t r[2];
        SL_UNROLL
        for (int x = 0; x < 2; x++) {
            const float lt = quad_sum(l[x]);
            inv[x] = 1.0f / lt;
            r[x] = (t.tok0 + (row[x] < a.seq ? row[x] : a.seq - 1)) * a.h + t.h;
            if (row[x] < a.seq && p.q == 0) a.lsew[r[x]] = (m[x] + log2f(lt)) * kLn2;
            gh[x] = a.gate == 1 ? sigmoid(sl_ld(a.g[r[x]])) : 1.0f;
        }
        const int row0 = t.i0 + c * kRows;
        if (a.gate == 2) sl_mbar_wait(g_full, (uint32_t)(it & 1));
        store_rows<D, BM>(so, L::bar_wg + c, &to, t.h, row0, sp.b, [&](int j, int x) {
            return make_float2(o[4 * j + 2 * x] * inv[x], o[4 * j + 2 * x + 1] * inv[x]);
        });
        store_rows<D, BM>(so, L::bar_wg + c, &ty, t.h, row0, sp.b, [&](int j, int x) {
            float g0 = gh[x], g1 = gh[x];
            if (a.gate == 2) {
                const uint32_t off = tile_off<BM>(16 * p.w + p.g + 8 * x, 8 * j + 2 * p.q);
                sl_unpack_bf16x2(*(const uint32_t *)(sg + off), &g0, &g1);
                g0 = sigmoid(g0), g1 = sigmoid(g1);
            }
            return make_float2(o[4 * j + 2 * x] * inv[x] * g0, o[4 * j + 2 * x + 1] * inv[x] * g1);
        });
        /* persistent: the gate's rows are read (store_rows computed every value before its
         * barrier), the next tile's may load */
        if (PERSIST && a.gate == 2) sl_mbar_arrive(g_empty);
        kv += (uint32_t)ntiles;
        if (!PERSIST) idx = feed.total;
    }
    turn::finish(c);
}

template <int D, int NC, bool PERSIST>
void launch_fwd(void *ctx, const args &a, cudaStream_t stream) {
    using L = fwd_layout<D, NC, PERSIST>;
    const char *op = "gated_attn_fwd";
    const CUtensorMap tq = head_map(a.q, a, a.h, D, kRows, op),
                      tk = head_map(a.k, a, a.kv, D, L::BN, op),
                      tv = head_map(a.v, a, a.kv, D, L::BN, op),
                      to = head_map(a.ow, a, a.h, D, kRows, op),
                      ty = head_map(a.y, a, a.h, D, kRows, op),
                      /* the elementwise gate [tokens, H, D] as Q; else any valid map */
        tg = a.gate == 2 ? head_map(a.g, a, a.h, D, kRows, op) : tq;
    int *counter;
    const unsigned grid = query_tile_grid(
        ctx, (int64_t)((a.seq + L::BM - 1) / L::BM) * a.batch * a.h, PERSIST, &counter, stream, op);
    auto *const kernel = sm90_fwd_kernel<D, NC, PERSIST>;
    sl_cuda_raise_smem<sm90_fwd_kernel<D, NC, PERSIST>>(L::bytes, op);
    SL_LAUNCH(kernel, dim3(grid), dim3(L::threads), L::bytes, stream, tq, tk, tv, to, ty, tg, a,
              counter);
}

template <int D, int NC> void launch_fwd(void *ctx, const args &a, cudaStream_t stream) {
    if (persistent_kernels() & kPersistFwd)
        launch_fwd<D, NC, true>(ctx, a, stream);
    else
        launch_fwd<D, NC, false>(ctx, a, stream);
}

/* The forward's query rows per block (BM) at head dim d: 128 (two consumer warpgroups) at
 * D = 128, whose consumers need 240 registers; at D = 64 SLUICE_ATTN_SM90_FWD_BM = 128 or 192
 * (three consumers of 160 registers, FlashAttention-3's choice at that head dim: one more warp
 * per scheduler to issue while the others wait, and the K/V tiles and the block's fixed costs
 * shared by 1.5x the rows), unset, "" or "auto": kD64FwdBm. 192 since an H200 measured it
 * (2026-11-27, docs/attention.md, "Three consumers at head dim 64"): forward 311 -> 332
 * TFLOP/s at S 4096 and 427 -> 495 at S 32768. Read at every forward. */
constexpr int kD64FwdBm = 192;
int fwd_bm(int d) {
    static const char *const values[3] = {"128", "192", "auto"};
    return d64_rows("SLUICE_ATTN_SM90_FWD_BM", values, d, 128, kD64FwdBm);
}

/* SLUICE_ATTN_SM90: 1, 0, or unset / "auto" (sl_cuda_gated_attn_sm90_automatic). Read once per
 * process. */
int sm90_choice(void) {
    static const char *const values[] = {"0", "1", "auto"};
    static const int i = sl_env_choice("SLUICE_ATTN_SM90", values, 3);
    return i == 2 ? -1 : i; /* unset, "" and "auto" alike */
}

/* Whether this device can run the kernel (core/ptx_sm90.cuh: compute capability 9.x, the
 * sm_90a code in the binary, the driver's cuTensorMapEncodeTiled). */
bool sm90_device(const cudaDeviceProp *props) {
    return sl_sm90_code_runs(props, (const void *)sm90_fwd_kernel<64, 2, false>);
}

} // namespace

bool sl_cuda_gated_attn_sm90_device(void) {
    int dev = 0;
    cudaDeviceProp props;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&props, dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
    }
    return sm90_device(&props);
}

bool sl_cuda_gated_attn_sm90_runs_on(void *ctx) {
    /* per device ordinal (the backend's device is the current one while it runs ops): a run
     * drives one device, but `sluice doctor` checks every device of the node in turn */
    static signed char known[64];
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) {
        (void)cudaGetLastError();
        return sm90_device(sl_cuda_props(ctx));
    }
    if (!known[dev]) known[dev] = sm90_device(sl_cuda_props(ctx)) ? 1 : -1;
    return known[dev] > 0;
}

bool sl_cuda_gated_attn_sm90_automatic(void *ctx) {
    const int choice = sm90_choice();
    if (choice == 1) {
        const cudaDeviceProp *props = sl_cuda_props(ctx);
        SL_CHECK(sl_cuda_gated_attn_sm90_runs_on(ctx),
                 "SLUICE_ATTN_SM90=1: the Hopper attention kernel needs a compute capability 9.x "
                 "device with the sm_90a code and cuTensorMapEncodeTiled (%s is %d.%d)",
                 props->name, props->major, props->minor);
        return true;
    }
#ifdef SLUICE_CUDA_EMULATED
    return false;
#else
    return choice != 0;
#endif
}

/* Says once per process that the Hopper kernel runs: a run's log shows it. */
void sl_cuda_gated_attn_sm90_note(void) {
    static bool said = false;
    if (said) return;
    said = true;
    sl_info("gated attention: the Hopper kernel (wgmma, TMA; sm_90a)");
}

void sl_cuda_gated_attn_sm90_fwd(void *ctx, sl_tensor *y, sl_tensor *o, sl_tensor *lse,
                                 const sl_tensor *q, const sl_tensor *k, const sl_tensor *v,
                                 const sl_tensor *g, const sl_tensor *seg, int batch, int seq,
                                 float scale) {
    sl_cuda_gated_attn_sm90_note();
    const args a = sl_attn_tc::fwd_args(y, o, lse, q, k, v, g, seg, batch, seq, scale);
    cudaStream_t stream = sl_cuda_stream(ctx);
    if (q->shape[2] == 128)
        launch_fwd<128, 2>(ctx, a, stream);
    else if (fwd_bm(64) == 192)
        launch_fwd<64, 3>(ctx, a, stream);
    else
        launch_fwd<64, 2>(ctx, a, stream);
    SL_CUDA_LAUNCHED("gated_attn_fwd");
}
