/*
 * attention/gated_attn_sm90_dq.cu - the Hopper backward's deterministic dQ pass
 * (backend.deterministic, the default; the rest of the backward: gated_attn_sm90_bwd.cu).
 *
 * One block of three warpgroups per (query tile of 128 rows, sequence, head): the forward's grid.
 * The producer's first thread loads Q and dO once and the K and V tiles of 64 keys, from the one
 * holding the tile's first document start to the diagonal, through a two-stage ring (one "full"
 * and one "empty" mbarrier per stage). Each consumer warpgroup owns 64 query rows:
 * S = Q K^T and dP = dO V^T (wgmma from shared memory, two groups: P is computed while dP is on
 * the tensor cores), dS = P (dP - Di), dQ += dS K (dS as the register A operand, K MN-major).
 * Every dq element has one writer and every sum a fixed order, so the bits are the same run after
 * run; the price is recomputing S and dP, which the dK/dV pass computes too (seven tile
 * products instead of five). The blocks never wait for one another (an ordered accumulation
 * across blocks would deadlock under the emulator, which runs blocks one after another).
 * Epilogue: dq = bf16(scale dQ) through the consumer's Q rows and a TMA store.
 * Persistent form (SLUICE_ATTN_SM90_PERSISTENT=1 or dq; opt-in until measured): as the
 * forward's, a block per SM takes query tiles from a counter (tile_feed, tile_slots); Q's and
 * dO's buffers are released after the tile's last S and dP, so the next tile's Q and dO load
 * while this one's last dQ step and epilogue run (the epilogue stages dq in a buffer of its own),
 * and the K/V ring runs on across tiles.
 */
#include "attention/gated_attn_sm90.cuh"

namespace {

using namespace sl_attn_sm90;

template <int D, bool PERSIST = false, bool OVL = false> struct dq_layout {
    /* OVL: a stage is released a step later (dq_overlap), so the ring holds one more */
    static constexpr int BM = kConsumers * kRows, BN = 64, ST = OVL ? 3 : 2;
    /* setmaxnreg: gated_attn_sm90.cuh's splits, the persistent one's producer with its loop's
     * state */
    static constexpr int producer_regs = PERSIST ? kPersistProducerRegs : kProducerRegs;
    static constexpr int consumer_regs = PERSIST ? kPersistConsumerRegs : kConsumerRegs;
    static constexpr uint32_t q_bytes = BM * D * 2, kv_bytes = BN * D * 2;
    /* stage (PERSIST): the epilogue's rows of dq, as Q, so that Q's and dO's buffers are free
     * for the next tile once the tile's last S and dP have retired */
    static constexpr uint32_t q = 0, dO = q_bytes, k = 2 * q_bytes, v = k + ST * kv_bytes,
                              stage = v + ST * kv_bytes, bars = stage + (PERSIST ? q_bytes : 0);
    /* mbarriers: Q and dO full, then K/V full and empty of each stage; PERSIST: then Q and dO
     * empty, the tile slots' four, and the two slots */
    static constexpr int nbars = 1 + 2 * ST + (PERSIST ? 5 : 0);
    static constexpr uint32_t slots = bars + 8 * nbars;
    static constexpr uint32_t bytes = slots + (PERSIST ? 2 * sizeof(int) : 0);
};

template <int D, bool PERSIST, bool OVL>
__global__ void __launch_bounds__(kThreads, 1)
    sm90_dq_kernel(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tdo,
                   const __grid_constant__ CUtensorMap tk, const __grid_constant__ CUtensorMap tv,
                   const __grid_constant__ CUtensorMap tdq, const args a, int *const tile_counter) {
    using L = dq_layout<D, PERSIST, OVL>;
    constexpr int BM = L::BM, BN = L::BN, ST = L::ST;
    SL_DYNAMIC_SMEM_1024(uint8_t, smem);
    uint64_t *qd_full = (uint64_t *)(smem + L::bars), *kv_full = qd_full + 1,
             *kv_empty = kv_full + ST;
    uint64_t *qd_empty = kv_empty + ST; /* PERSIST only, as the tile slots */
    const tile_slots slots = {qd_empty + 1, (int *)(smem + L::slots)};
    const tile_feed<PERSIST> feed = {tile_counter, (a.seq + BM - 1) / BM * a.batch * a.h};

    if (threadIdx.x == 0) {
        sl_mbar_init(qd_full, 1);
        for (int s = 0; s < ST; s++) {
            sl_mbar_init(&kv_full[s], 1);
            sl_mbar_init(&kv_empty[s], kConsumerThreads);
        }
        if (PERSIST) {
            sl_mbar_init(qd_empty, kConsumerThreads);
            slots.init(kConsumerThreads);
        }
        sl_fence_mbarrier_init();
    }
    __syncthreads();

    const int wg = (int)(threadIdx.x / kWgThreads);
    if (wg == 0) { /* producer */
        sl_setmaxnreg_dec<L::producer_regs>();
        if (threadIdx.x != 0) return;
        uint32_t kv = 0; /* key tiles loaded for the block's earlier query tiles */
        int idx = (int)blockIdx.x;
        for (int it = 0;; it++) {
            if (PERSIST) slots.publish(it, idx); /* the tile (or the end) to the consumers */
            if (idx >= feed.total) break;
            const qspan sp = query_span<BM, BN>(a, idx);
            /* Q and dO once the previous tile's last S and dP have read them */
            if (PERSIST && it > 0) sl_mbar_wait(qd_empty, (uint32_t)((it - 1) & 1));
            sl_mbar_arrive_expect_tx(qd_full, 2 * L::q_bytes);
            for (int half = 0; half < kConsumers; half++)
                for (int c = 0; c < D / 64; c++) {
                    const uint32_t off = c * (BM * 128) + half * (kRows * 128);
                    const int r = sp.t.i0 + half * kRows;
                    sl_tma_load_4d(smem + L::q + off, &tq, qd_full, 64 * c, sp.t.h, r, sp.b);
                    sl_tma_load_4d(smem + L::dO + off, &tdo, qd_full, 64 * c, sp.t.h, r, sp.b);
                }
            for (int n = 0; n < sp.ntiles; n++) {
                const uint32_t m = kv + n, s = m % ST;
                if (m >= ST) sl_mbar_wait(&kv_empty[s], (m / ST - 1) & 1);
                sl_mbar_arrive_expect_tx(&kv_full[s], 2 * L::kv_bytes);
                for (int c = 0; c < D / 64; c++) {
                    const uint32_t off = s * L::kv_bytes + c * (BN * 128);
                    const int j = sp.jfirst + n * BN;
                    sl_tma_load_4d(smem + L::k + off, &tk, &kv_full[s], 64 * c, sp.t.kvh, j, sp.b);
                    sl_tma_load_4d(smem + L::v + off, &tv, &kv_full[s], 64 * c, sp.t.kvh, j, sp.b);
                }
            }
            kv += (uint32_t)sp.ntiles;
            idx = feed.next();
        }
        return;
    }

    /* consumer c: query rows i0 + 64 c .. i0 + 64 c + 63 of each of the block's tiles;
     * statistics in registers */
    sl_setmaxnreg_inc<L::consumer_regs>();
    const int c = wg - 1;
    const lane_pos p = lane_of();
    const float c2 = a.scale * kLog2e;
    uint8_t *sq = smem + L::q + c * (kRows * 128);
    const uint8_t *sdo = smem + L::dO + c * (kRows * 128);
    /* the epilogue's rows: Q's own (free by then) or, persistent, a staging area of their own */
    uint8_t *so = PERSIST ? smem + L::stage + c * (kRows * 128) : sq;
    uint32_t kv = 0; /* as the producer's */
    int idx = (int)blockIdx.x;
    for (int it = 0;; it++) {
        if (PERSIST) idx = slots.take(it);
        if (idx >= feed.total) break;
        const qspan sp = query_span<BM, BN>(a, idx);
        const sl_attn_tc::qtile &t = sp.t;
        const int jt0 = sp.jfirst, ntiles = sp.ntiles; /* step n: keys jt0 + n BN .. */
        float lse2[2], di[2];
        int qi[2], lo[2];
        SL_UNROLL
        for (int x = 0; x < 2; x++) {
            qi[x] = t.i0 + c * kRows + 16 * p.w + p.g + 8 * x;
            const bool in = qi[x] < a.seq;
            const int64_t row = (t.tok0 + qi[x]) * a.h + t.h;
            lse2[x] = in ? a.lse[row] * kLog2e : 0.0f;
            di[x] = in ? a.di[row] : 0.0f;
            lo[x] = in && a.seg ? a.seg[t.tok0 + qi[x]] : 0;
        }

        float dq[D / 2];
        /* dS of the step, the A operand of its dQ GEMM; with OVL read by the tensor cores until
         * the next step's S has retired, so it lives across the steps */
        uint32_t da[BN / 16][4];
        zero_acc(dq);
        sl_mbar_wait(qd_full, (uint32_t)(it & 1));
        for (int n = 0; n < ntiles; n++) {
            const uint32_t m = kv + n, s = m % ST;
            const int j0 = jt0 + n * BN;
            const uint8_t *sk = smem + L::k + s * L::kv_bytes, *sv = smem + L::v + s * L::kv_bytes;
            sl_mbar_wait(&kv_full[s], (m / ST) & 1);

            float sacc[BN / 2], dpacc[BN / 2];
            sl_wgmma_fence_operand(sacc);
            sl_wgmma_fence_operand(dpacc);
            sl_wgmma_fence();
            {
                const uint64_t dq = desc_kmajor<BM>(sq, 0), dk = desc_kmajor<BN>(sk, 0);
                SL_UNROLL
                for (int ks = 0; ks < D / 16; ks++)
                    sl_wgmma_bf16_ss<BN, 0, 0>(sacc, kslice<BM>(dq, ks), kslice<BN>(dk, ks),
                                               ks > 0);
                sl_wgmma_commit();
                const uint64_t ddo = desc_kmajor<BM>(sdo, 0), dv = desc_kmajor<BN>(sv, 0);
                SL_UNROLL
                for (int ks = 0; ks < D / 16; ks++)
                    sl_wgmma_bf16_ss<BN, 0, 0>(dpacc, kslice<BM>(ddo, ks), kslice<BN>(dv, ks),
                                               ks > 0);
                sl_wgmma_commit();
            }

            /* P (rows qi[x], keys j0 + 8 j + 2 q + e) while dP computes */
            sl_wgmma_wait<1>();
            sl_wgmma_fence_operand(sacc);
            if (OVL && n > 0) { /* the previous step's dQ GEMM, issued before S, has retired */
                sl_wgmma_fence_operand(dq);
                fence_frags(da);
                sl_mbar_arrive(&kv_empty[(m - 1) % ST]);
            }
            /* column 8 j + e of the thread is key j0 + 2 q + 8 j + e: visible to row x iff
             * lo_c[x] <= 8 j + e <= hi_c[x] (rows past the sequence see nothing) */
            const bool full = !a.seg && t.i0 >= j0 + BN - 1 && t.nq == BM;
            int hi_c[2], lo_c[2];
            SL_UNROLL
            for (int x = 0; x < 2; x++) {
                hi_c[x] = full ? BN : qi[x] < a.seq ? qi[x] - j0 - 2 * p.q : -1;
                lo_c[x] = full ? 0 : lo[x] - j0 - 2 * p.q;
            }
            if (full) { /* no comparisons and selects for the tiles without masking */
                SL_UNROLL
                for (int j = 0; j < BN / 8; j++) {
                    SL_UNROLL
                    for (int e = 0; e < 4; e++)
                        sacc[4 * j + e] = sl_ex2_ftz(fmaf(sacc[4 * j + e], c2, -lse2[e >> 1]));
                }
            } else {
                SL_UNROLL
                for (int j = 0; j < BN / 8; j++) {
                    SL_UNROLL
                    for (int e = 0; e < 4; e++) {
                        const int x = e >> 1, col = 8 * j + (e & 1);
                        const bool vis = col <= hi_c[x] && col >= lo_c[x];
                        sacc[4 * j + e] =
                            sl_ex2_ftz(vis ? fmaf(sacc[4 * j + e], c2, -lse2[x]) : -INFINITY);
                    }
                }
            }
            sl_wgmma_wait<0>();
            sl_wgmma_fence_operand(dpacc);
            /* persistent: the tile's last S and dP have retired, Q's and dO's buffers may take the
             * next tile's */
            if (PERSIST && n == ntiles - 1) sl_mbar_arrive(qd_empty);
            SL_UNROLL
            for (int j = 0; j < BN / 8; j++) {
                SL_UNROLL
                for (int e = 0; e < 4; e++)
                    dpacc[4 * j + e] = sacc[4 * j + e] * (dpacc[4 * j + e] - di[e >> 1]);
            }
            acc_to_frags<BN>(da, dpacc);

            /* dQ += dS K: contraction over the tile's keys */
            sl_wgmma_fence_operand(dq);
            fence_frags(da);
            sl_wgmma_fence();
            const uint64_t dk = desc_mnmajor<BN>(sk, 0);
            SL_UNROLL
            for (int kk = 0; kk < BN / 16; kk++)
                sl_wgmma_bf16_rs<D, 1>(dq, da[kk], mnslice(dk, kk), 1);
            sl_wgmma_commit();
            if (!OVL) { /* else it runs on while the next step's S and dP are issued */
                sl_wgmma_wait<0>();
                sl_wgmma_fence_operand(dq);
                fence_frags(da);
                sl_mbar_arrive(&kv_empty[s]);
            }
        }
        if (OVL) { /* the tile's last dQ GEMM */
            sl_wgmma_wait<0>();
            sl_wgmma_fence_operand(dq);
            fence_frags(da);
            sl_mbar_arrive(&kv_empty[(kv + ntiles - 1) % ST]);
        }

        store_rows<D, BM>(so, kBarWg + c, &tdq, t.h, t.i0 + c * kRows, sp.b, [&](int j, int x) {
            return make_float2(dq[4 * j + 2 * x] * a.scale, dq[4 * j + 2 * x + 1] * a.scale);
        });
        kv += (uint32_t)ntiles;
        if (!PERSIST) idx = feed.total;
    }
}

template <int D, bool PERSIST, bool OVL>
void launch(void *ctx, const args &a, cudaStream_t stream) {
    using L = dq_layout<D, PERSIST, OVL>;
    const char *op = "gated_attn_bwd";
    const CUtensorMap tq = head_map(a.q, a, a.h, D, kRows, op),
                      tdo = head_map(a.dob, a, a.h, D, kRows, op),
                      tk = head_map(a.k, a, a.kv, D, L::BN, op),
                      tv = head_map(a.v, a, a.kv, D, L::BN, op),
                      tdq = head_map(a.dq, a, a.h, D, kRows, op);
    int *counter;
    const unsigned grid = query_tile_grid(
        ctx, (int64_t)((a.seq + L::BM - 1) / L::BM) * a.batch * a.h, PERSIST, &counter, stream, op);
    sl_cuda_raise_smem<sm90_dq_kernel<D, PERSIST, OVL>>(L::bytes, op);
    SL_LAUNCH((sm90_dq_kernel<D, PERSIST, OVL>), dim3(grid), dim3(kThreads), L::bytes, stream, tq,
              tdo, tk, tv, tdq, a, counter);
    SL_CUDA_LAUNCHED(op);
}

/* SLUICE_ATTN_SM90_DQ_OVERLAP: 1 issues each step's S and dP before the previous step's dQ GEMM
 * has retired (FlashAttention-3's order: the GEMMs follow one another on the tensor cores
 * without the wait between them, a stage is released a step later, and the ring has three
 * stages); unset, "" or 0 waits for each dQ GEMM (the form measured on 2026-11-26). Off until a
 * GPU has measured it (docs/attention.md, "The dQ pass's GEMMs back to back"). A bad value
 * stops the run with a message naming the variable. Read at every backward. */
bool dq_overlap(void) {
    static const char *const values[] = {"0", "1"};
    return sl_env_choice("SLUICE_ATTN_SM90_DQ_OVERLAP", values, 2) == 1;
}

template <int D, bool PERSIST> void launch(void *ctx, const args &a, cudaStream_t stream) {
    if (dq_overlap())
        launch<D, PERSIST, true>(ctx, a, stream);
    else
        launch<D, PERSIST, false>(ctx, a, stream);
}

template <int D> void launch(void *ctx, const args &a, cudaStream_t stream) {
    if (persistent_kernels() & kPersistDq)
        launch<D, true>(ctx, a, stream);
    else
        launch<D, false>(ctx, a, stream);
}

} // namespace

void sl_attn_sm90::launch_dq(void *ctx, const args &a, int d, cudaStream_t stream) {
    if (d == 64)
        launch<64>(ctx, a, stream);
    else
        launch<128>(ctx, a, stream);
}
