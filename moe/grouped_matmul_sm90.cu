/*
 * moe/grouped_matmul_sm90.cu - the expert GEMMs as one kernel of sluice's own on Hopper
 * (sm_90a): wgmma from TMA-loaded shared memory, one launch per projection, the per-expert row
 * counts read on the device. The strategy "wgmma" of moe/grouped_matmul.cu (SLUICE_EXPERT_GEMM);
 * CPU twin moe/grouped_matmul_cpu.c, semantics core/ops.h (sl_op_grouped_matmul and _dw).
 * This file: the forward / data-gradient kernel (mm); the weight gradient's is in
 * moe/grouped_matmul_sm90_dw.cu; what both use in moe/grouped_matmul_sm90.cuh.
 *
 * Why: on an H200 (2026-11-26, docs/performance.md) cuBLAS's grouped call ran the forward and
 * data gradient at about 265 TFLOP/s, a third of the measured peak, and refused the bf16-into-
 * fp32 weight gradient, which then took 128 GEMM calls per projection. A grouped GEMM that reads
 * the counts on the device needs no host array of sizes and pointers per call, runs every
 * expert in one persistent launch and can later take the counts without a host read.
 *
 * Layout of a block, as the Hopper attention kernels (attention/gated_attn_sm90.cuh): three
 * warpgroups; warpgroup 0's first thread is the producer (TMA loads into a ring of ST stages,
 * each with a "full" mbarrier counting transaction bytes and an "empty" one the 256 consumer
 * threads arrive on), warpgroups 1 and 2 are consumers, each owning 64 rows of the block's
 * 128 x BN output tile (m64nBNk16 wgmmas, fp32 accumulators). Blocks are persistent: one per SM,
 * each walking the tiles blockIdx.x, + gridDim.x, ...; the producer runs ahead across tile
 * boundaries, so the next tile's loads overlap this tile's epilogue.
 *
 * Data (row-major, bf16 operands):
 *   mm   C [rows, N] = A_g [n_g, K] op(B_g) (+ beta C) for each group's rows; B [groups, R, S]:
 *        with trans_b B_g is [N, K] (a K-major wgmma operand), without it [K, N] (MN-major).
 *        Tiles: for each group, for each 128-row tile of its rows, for each BN-column tile
 *        (rows fastest within a column tile, so the blocks running at once share the expert's
 *        B tile through L2). A tile may reach into the next group's rows or past the last row:
 *        it computes them (TMA reads zeros past the tensor) and the epilogue stores only the
 *        group's own rows. K and N tails read zeros from TMA and are not stored. With beta 0
 *        the epilogue stores 16 bytes a thread (quad_transpose: each quad's lanes swap their
 *        column pairs so that a lane holds 8 consecutive columns of its row).
 *   mm + SwiGLU (sl_op_grouped_matmul_swiglu, the experts' first projection): gu = A_g B_g^T
 *        with B_g [2 I, K] (gate rows, then up rows), and h = silu(gate) up from the
 *        epilogue's registers: a column tile loads BN / 2 gate rows and the same BN / 2 up rows
 *        of B (two TMA boxes into the one B tile), so each thread's accumulators hold both
 *        factors of its columns of h. The activation's own pass over gu (read 2 I, write I per
 *        row) is gone; the epilogue stores I more per row.
 *   dW   dW_g [R, S] (fp32) = dY_g^T [R, n_g] X_g [n_g, S] + beta dW_g: the reduction runs over
 *        the group's rows, 64 at a time, both operands MN-major. The last chunk's rows past the
 *        group belong to the next one: the consumers zero them in shared memory before its
 *        wgmmas. Every group has the same tiles (empty ones get beta dW_g from the epilogue,
 *        nothing when beta is 1). With beta != 0 the producer prefetches each tile's old dW
 *        into L2 (cp.async.bulk.prefetch) as it starts the tile's loads (opt-in). With up to
 *        four segments (dY_i, X_i, counts_i: the rows of up to four micro-batches,
 *        sl_op_grouped_matmul_dw_segments) a group's reduction runs over its chunks of the first,
 *        then of the next segment, ..., each segment's last chunk zero-padded as above: one
 *        epilogue (one pass over dW) for all of them.
 * The groups' first rows and tile offsets are prefix sums of the counts, computed by each block
 * from the device array (warp 0, shuffles; dW: warp i for segment i) into shared memory; a tile's
 * group is a binary search there. Results are deterministic: each output element is one
 * accumulator's fixed sequence of wgmmas, whatever the block that runs it.
 */
#include "moe/grouped_matmul_sm90.cuh"
#include "moe/moe_vec.cuh"

namespace {

/* ---- the forward / data-gradient kernel ----------------------------------------------------- */

/* The epilogue's stores, 16 bytes a thread (the default since 2026-11-27). In wgmma's
 * accumulator layout the four lanes of a quad (q = 0..3) hold one row's columns 8 j + 2 q, + 1
 * for every j: a warp store of one pair per thread (4 bytes) covers 16 bytes of each of 8 rows,
 * 8 lines for 128 bytes. quad_transpose exchanges four column groups' pairs within the quad
 * (two butterfly stages of shuffles, xor 2 then xor 1) so that lane q holds all 8 columns of
 * group jb + q: a 16-byte store each, 8 rows x 64 bytes per warp instruction, a quarter of the
 * instructions and of the partial-line writes for the same bytes. Every lane of the warp must
 * call it (the shuffles); the values and where they land are the pair stores', bit for bit.
 * In: p[k] = this lane's pair of group jb + k. Out: the pairs of group jb + q, of lanes 0..3. */
__device__ __forceinline__ uint4 quad_transpose(const uint32_t (&p)[4], int q) {
    const bool lo = q & 1, hi = q & 2;
    /* stage 1, with lane q ^ 2: keep the groups of this lane's half (2 hi, 2 hi + 1), send
     * the others */
    const uint32_t k0 = hi ? p[2] : p[0], k1 = hi ? p[3] : p[1];
    const uint32_t r0 = __shfl_xor_sync(0xffffffffu, hi ? p[0] : p[2], 2),
                   r1 = __shfl_xor_sync(0xffffffffu, hi ? p[1] : p[3], 2);
    /* stage 2, with lane q ^ 1: keep group 2 hi + lo (= q) of this lane and of lane q ^ 2 */
    const uint32_t t0 = __shfl_xor_sync(0xffffffffu, lo ? k0 : k1, 1),
                   t1 = __shfl_xor_sync(0xffffffffu, lo ? r0 : r1, 1);
    const uint32_t m0 = lo ? k1 : k0, m1 = lo ? r1 : r0;
    /* group q's pairs came from lanes q (m0), q ^ 1 (t0), q ^ 2 (m1), q ^ 3 (t1) */
    const uint32_t v0 = lo ? t0 : m0, v1 = lo ? m0 : t0, w0 = lo ? t1 : m1, w1 = lo ? m1 : t1;
    return hi ? make_uint4(w0, w1, v0, v1) : make_uint4(v0, v1, w0, w1);
}

/* Stores one row's pairs pk[j] (bf16x2 of columns n0 + 8 j + 2 q, + 1; j < J, J a multiple of
 * 4) at out + n0 + 8 j + 2 q where that is below n (n a multiple of 8: a group of 8 columns is
 * stored whole or not at all); out null: nothing stored. wide (the default): 16 bytes a lane
 * after quad_transpose (every lane of the warp must take part: the shuffles run for a null
 * row too); else one pair a lane, as before 2026-11-27 (expert_gemm_bench --ablate times
 * both). */
template <int J>
__device__ __forceinline__ void store_row(const uint32_t (&pk)[J], sl_bf16 *out, int n0, int n,
                                          int q, bool wide) {
    static_assert(J % 4 == 0, "whole quads of column groups");
    if (!wide) {
        SL_UNROLL
        for (int j = 0; j < J; j++)
            if (out && n0 + 8 * j < n) *(uint32_t *)(out + n0 + 8 * j + 2 * q) = pk[j];
        return;
    }
    SL_UNROLL
    for (int jb = 0; jb < J; jb += 4) {
        const uint32_t p[4] = {pk[jb], pk[jb + 1], pk[jb + 2], pk[jb + 3]};
        const uint4 v = quad_transpose(p, q);
        const int col = n0 + 8 * (jb + q);
        if (out && col < n) {
            SL_CHECK_ALIGNED(out + col, 16);
            *(uint4 *)(out + col) = v;
        }
    }
}

/* store_tile's beta-0 case for bf16 C: acc rounded to bf16, stored by store_row. */
template <int BN>
__device__ __forceinline__ void store_tile_bf16(const float (&acc)[BN / 2],
                                                sl_bf16 *const (&row)[2], int n0, int n, int q,
                                                bool wide) {
    constexpr int J = BN / 8;
    SL_UNROLL
    for (int x = 0; x < 2; x++) {
        uint32_t pk[J];
        SL_UNROLL
        for (int j = 0; j < J; j++)
            pk[j] = sl_pack_bf16x2(acc[4 * j + 2 * x], acc[4 * j + 2 * x + 1]);
        store_row<J>(pk, row[x], n0, n, q, wide);
    }
}

/* The fused SwiGLU's epilogue (GLU): the tile's first BN / 2 accumulator columns are the gate's
 * columns n0 + 8 j + 2 q (+ 1), its last BN / 2 the up projection's same columns (the
 * producer's two boxes), so each thread holds both halves of each of its pairs: j and j + BN /
 * 16 in the accumulators' column groups. Both are rounded to bf16 and stored into gu's row
 * (gate at col, up at I + col), and h = silu(g) u is computed from those rounded values, as the
 * activation kernel computes it from gu in memory (moe/swiglu.cu): the same h, bit for bit. */
template <int BN>
__device__ __forceinline__ void store_glu_tile(const float (&acc)[BN / 2], sl_bf16 *const (&gu)[2],
                                               sl_bf16 *const (&h)[2], int n0, int in, int q,
                                               bool wide) {
    constexpr int J = BN / 16;
    SL_UNROLL
    for (int x = 0; x < 2; x++) {
        uint32_t g2[J], u2[J], h2[J];
        SL_UNROLL
        for (int j = 0; j < J; j++) {
            g2[j] = sl_pack_bf16x2(acc[4 * j + 2 * x], acc[4 * j + 2 * x + 1]);
            u2[j] = sl_pack_bf16x2(acc[4 * (j + J) + 2 * x], acc[4 * (j + J) + 2 * x + 1]);
            float g0, g1, u0, u1;
            sl_unpack_bf16x2(g2[j], &g0, &g1);
            sl_unpack_bf16x2(u2[j], &u0, &u1);
            h2[j] = sl_pack_bf16x2(sl_moe_swiglu(g0, u0), sl_moe_swiglu(g1, u1));
        }
        store_row<J>(g2, gu[x], n0, in, q, wide);
        store_row<J>(u2, gu[x] ? gu[x] + in : nullptr, n0, in, q, wide);
        store_row<J>(h2, h[x], n0, in, q, wide);
    }
}

/* GLU (with trans_b only): B_g is [2 I, K], gate rows then up rows; a column tile covers BN / 2
 * columns of h (a.n = I): the gate's rows n0 .. n0 + BN / 2 and the up projection's I + n0 ..
 * as the B tile's two halves. Past I the gate's box reads up rows and the up's box zeros: those
 * columns are computed and not stored. */
template <int BN, int TB, bool GLU>
__global__ void __launch_bounds__(kThreads, 1)
    mm_kernel(const __grid_constant__ CUtensorMap ta, const __grid_constant__ CUtensorMap tb,
              const sl_gmm_sm90_args a) {
    static_assert(!GLU || !TB, "the fused SwiGLU takes B_g as [2 I, K] (trans_b)");
    using L = layout<BN>;
    constexpr int TN = GLU ? BN / 2 : BN; /* the output columns of a column tile */
    SL_DYNAMIC_SMEM_1024(uint8_t, smem);
    const auto R = block_start<BN>(smem, a);
    const int wg = (int)(threadIdx.x / kWg);
    const int n_tiles = (a.n + TN - 1) / TN, k_chunks = (a.k + BK - 1) / BK;
    const int total = R.tile_start[a.groups] * n_tiles;

    if (wg == 0) { /* producer */
        sl_setmaxnreg_dec<kProducerRegs>();
        if (threadIdx.x != 0) return;
        sl_tma_prefetch(&ta);
        sl_tma_prefetch(&tb);
        int it = 0;
        for (int t = (int)blockIdx.x; t < total; t += (int)gridDim.x) {
            const mm_tile m = locate_mm(R.row_start, R.tile_start, a.groups, n_tiles, t);
            const int n0 = m.nt * TN;
            const int gb = left_out(a, SL_EXPERT_GEMM_ABLATE_B_FROM_DRAM)
                               ? 0
                               : m.g; /* B's group (the expert's weights) */
            for (int kc = 0; kc < k_chunks; kc++, it++) {
                const int s = R.produce(
                    it, left_out(a, SL_EXPERT_GEMM_ABLATE_LOADS) ? 0u : L::a_bytes + L::b_bytes);
                if (left_out(a, SL_EXPERT_GEMM_ABLATE_LOADS)) continue;
                sl_tma_load_2d(smem + L::a + s * L::a_bytes, &ta, &R.full[s], kc * BK, m.row0);
                uint8_t *sb = smem + L::b + s * L::b_bytes;
                if (TB) /* B_g [K, N]: BN / 64 chunks of [64 k][64 n] */
                    for (int c = 0; c < BN / 64; c++)
                        sl_tma_load_3d(sb + c * (BK * 128), &tb, &R.full[s], n0 + 64 * c, kc * BK,
                                       gb);
                else if (GLU) { /* the gate's and the up projection's [BN / 2 n][64 k] boxes */
                    sl_tma_load_3d(sb, &tb, &R.full[s], kc * BK, n0, gb);
                    sl_tma_load_3d(sb + (BN / 2) * 128, &tb, &R.full[s], kc * BK, a.n + n0, gb);
                } else /* B_g [N, K]: one [BN n][64 k] box */
                    sl_tma_load_3d(sb, &tb, &R.full[s], kc * BK, n0, gb);
            }
        }
        return;
    }

    sl_setmaxnreg_inc<kConsumerRegs>();
    const int c = wg - 1;
    const sl_wg_lane p = sl_wg_lane_of();
    float acc[BN / 2];
    int it = 0;
    for (int t = (int)blockIdx.x; t < total; t += (int)gridDim.x) {
        const mm_tile m = locate_mm(R.row_start, R.tile_start, a.groups, n_tiles, t);
        const int n0 = m.nt * TN;
        if (64 * c >= m.rows) {
            /* every row of this consumer's half is past the group (its last tile holds 64 rows
             * or fewer): nothing to compute or store, and the other consumer's wgmmas have the
             * tensor cores alone. Release the stages as they come. */
            for (int kc = 0; kc < k_chunks; kc++, it++) {
                R.consume(it);
                R.release(it);
            }
            continue;
        }
        for (int kc = 0; kc < k_chunks; kc++, it++) {
            const int s = R.consume(it);
            const uint64_t da = desc_k(smem + L::a + s * L::a_bytes, 64 * c);
            const uint8_t *sb = smem + L::b + s * L::b_bytes;
            const uint64_t db = TB ? desc_mn(sb, 0) : desc_k(sb, 0);
            sl_wgmma_fence_operand(acc);
            sl_wgmma_fence();
            SL_UNROLL
            for (int ks = 0; ks < BK / 16; ks++)
                sl_wgmma_bf16_ss<BN, 0, TB>(
                    acc, kslice(da, ks), TB ? mnslice(db, ks) : kslice(db, ks), kc > 0 || ks > 0);
            sl_wgmma_commit();
            /* the previous chunk's wgmmas have retired: release its stage */
            sl_wgmma_wait<1>();
            sl_wgmma_fence_operand(acc);
            if (kc > 0) R.release(it - 1);
        }
        sl_wgmma_wait<0>();
        sl_wgmma_fence_operand(acc);
        R.release(it - 1);
        if (left_out(a, SL_EXPERT_GEMM_ABLATE_EPILOGUE)) continue;

        /* epilogue: this consumer's rows of the group only (C's width: 2 I with GLU) */
        sl_bf16 *row[2], *hrow[2];
        SL_UNROLL
        for (int x = 0; x < 2; x++) {
            const int r = 64 * c + 16 * p.w + p.g + 8 * x;
            const bool in = r < m.rows;
            const int64_t at = (int64_t)(m.row0 + r);
            row[x] = in ? (sl_bf16 *)a.c + at * (GLU ? 2 * a.n : a.n) : nullptr;
            hrow[x] = in && GLU ? (sl_bf16 *)a.h + at * a.n : nullptr;
        }
        /* 16-byte stores unless the bench asked for the pair stores
         * (SL_EXPERT_GEMM_ABLATE_WIDE_STORES): the same values either way; beta != 0 (no
         * training call) reads C first, pair by pair (store_tile) */
        const bool wide = !left_out(a, SL_EXPERT_GEMM_ABLATE_WIDE_STORES);
        if (GLU)
            store_glu_tile<BN>(acc, row, hrow, n0, a.n, p.q, wide);
        else if (a.beta == 0.0f)
            store_tile_bf16<BN>(acc, row, n0, a.n, p.q, wide);
        else
            store_tile<BN>(acc, row, n0, a.n, a.beta, p.q);
    }
}

template <int BN, int TB, bool GLU = false>
void launch_mm(const CUtensorMap &ta, const CUtensorMap &tb, const sl_gmm_sm90_args &a,
               int64_t tiles) {
    const size_t smem = layout<BN>::bytes(a.groups);
    sl_cuda_raise_smem<mm_kernel<BN, TB, GLU>>(smem, "grouped_matmul");
    SL_LAUNCH((mm_kernel<BN, TB, GLU>), dim3(grid_for(a.ctx, tiles)), dim3(kThreads), smem,
              sl_cuda_stream(a.ctx), ta, tb, a);
}

/* The 128-row tiles of the groups: exact from host counts; from device counts their bound
 * (each group's last tile at most one more), the grid's size only: the blocks count them on
 * the device. */
int64_t row_tiles(const sl_group_counts *counts, int groups) {
    int64_t m_tiles = 0;
    for (int g = 0; counts->host && g < groups; g++) m_tiles += (counts->host[g] + BM - 1) / BM;
    if (!counts->host) m_tiles = (counts->rows + (int64_t)groups * (BM - 1)) / BM;
    return m_tiles;
}

} // namespace

bool sl_cuda_grouped_sm90_applies(void *ctx, sl_dtype dt, int64_t r, int64_t s, int groups) {
    static const char aligned[16] __attribute__((aligned(16))) = {0};
    return why_not<mm_kernel<128, 0, false>>(ctx, dt == SL_BF16, r, s, groups, 0, aligned, aligned,
                                             aligned) == nullptr;
}

namespace {

/* What both entry points share: C [rows, n] = A_g op(B_g) (+ beta C), or, with h, the fused
 * SwiGLU (C = gu [rows, 2 I], h [rows, I]; trans_b, beta 0): the checks, the tiles, the tensor
 * maps and the launch. False, having done nothing, where the kernel does not apply. */
bool run_mm(void *ctx, const char *op, bool *said, bool loud, sl_tensor *c, sl_tensor *h,
            const sl_tensor *a, const sl_tensor *b, const sl_group_counts *counts, int groups,
            bool trans_b, float beta) {
    const bool glu = h != nullptr;
    const int64_t r = b->shape[1], s = b->shape[2];
    const int64_t in = trans_b ? s : r, out = trans_b ? r : s;
    /* the groups' rows only: a tensor may be sized for more (expert parallelism's receive
     * buffers), its memory not (TMA's zeros past the last row stand in for the rest) */
    const int64_t rows = counts->rows;
    const bool types_ok = a->dtype == SL_BF16 && b->dtype == SL_BF16 && c->dtype == SL_BF16 &&
                          (!glu || h->dtype == SL_BF16);
    const char *why = why_not<mm_kernel<128, 0, false>>(ctx, types_ok, in, out, groups, rows,
                                                        a->data, b->data, c->data);
    if (!why && glu && (out / 2) % 8) why = "the activation's width is not a multiple of 8";
    if (!why && glu && !aligned16(h->data)) why = "an operand is not 16-byte aligned";
    if (!note(op, said, why, loud)) return false;
    /* BN columns of B per tile; with the fused SwiGLU half of them gate, half up: BN / 2 of h */
    const unsigned ablate = sl_cuda_grouped_sm90_ablation();
    const int bn = out > 128 && !(ablate & SL_EXPERT_GEMM_ABLATE_WIDE_TILES) ? 256 : 128;
    const int tn = glu ? bn / 2 : bn;
    const int64_t n = glu ? out / 2 : out;
    const int64_t tiles = row_tiles(counts, groups) * ((n + tn - 1) / tn);
    if (tiles >= INT32_MAX) return false;
    if (rows == 0 || tiles == 0) return true; /* no rows: nothing to write */
    sl_gmm_sm90_args args = {};
    args.ctx = ctx, args.counts = device_counts(ctx, counts, groups), args.groups = groups;
    args.n = (int)n, args.k = (int)in, args.c = c->data, args.h = glu ? h->data : nullptr;
    args.beta = beta, args.ablate = ablate;
    const CUtensorMap ta = bf16_map(a->data, in, rows, 0, BM, op);
    /* B [groups, R, S]: rows of S; trans_b reads [TN n][64 k] boxes (two per stage with the
     * fused SwiGLU: the gate's, the up's), else [64 k][64 n] */
    const CUtensorMap tb = bf16_map(b->data, s, r, groups, trans_b ? tn : BK, op);
    if (bn == 256)
        glu       ? launch_mm<256, 0, true>(ta, tb, args, tiles)
        : trans_b ? launch_mm<256, 0>(ta, tb, args, tiles)
                  : launch_mm<256, 1>(ta, tb, args, tiles);
    else
        glu       ? launch_mm<128, 0, true>(ta, tb, args, tiles)
        : trans_b ? launch_mm<128, 0>(ta, tb, args, tiles)
                  : launch_mm<128, 1>(ta, tb, args, tiles);
    SL_CUDA_LAUNCHED(op);
    return true;
}

} // namespace

bool sl_cuda_grouped_mm_sm90(void *ctx, sl_tensor *c, const sl_tensor *a, const sl_tensor *b,
                             const sl_group_counts *counts, int groups, bool trans_b, float beta,
                             bool loud) {
    static bool said = false;
    return run_mm(ctx, "grouped_matmul", &said, loud, c, nullptr, a, b, counts, groups, trans_b,
                  beta);
}

bool sl_cuda_grouped_mm_swiglu_sm90(void *ctx, sl_tensor *h, sl_tensor *gu, const sl_tensor *a,
                                    const sl_tensor *b, const sl_group_counts *counts, int groups,
                                    bool loud) {
    static bool said = false;
    return run_mm(ctx, "grouped_matmul_swiglu", &said, loud, gu, h, a, b, counts, groups, true,
                  0.0f);
}

/* expert_gemm_bench --ablate's parts left out (moe/kernels_cuda.h); 0 in every real run */
static unsigned g_ablation;

void sl_cuda_expert_gemm_set_ablation(unsigned parts) {
    g_ablation = parts;
}

unsigned sl_cuda_grouped_sm90_ablation(void) {
    return g_ablation;
}
