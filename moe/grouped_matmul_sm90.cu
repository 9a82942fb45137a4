/*
 * moe/grouped_matmul_sm90.cu - the expert GEMMs as one kernel of sluice's own on Hopper
 * (sm_90a): wgmma from TMA-loaded shared memory, one launch per projection, the per-expert row
 * counts read on the device. The strategy "wgmma" of moe/grouped_matmul.cu (SLUICE_EXPERT_GEMM);
 * CPU twin moe/grouped_matmul_cpu.c, semantics core/ops.h (sl_op_grouped_matmul and _dw).
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
 *        group's own rows. K and N tails read zeros from TMA and are not stored.
 *   dW   dW_g [R, S] (fp32) = dY_g^T [R, n_g] X_g [n_g, S] + beta dW_g: the reduction runs over
 *        the group's rows, 64 at a time, both operands MN-major. The last chunk's rows past the
 *        group belong to the next one: the consumers zero them in shared memory before its
 *        wgmmas. Every group has the same tiles (empty ones get beta dW_g from the epilogue,
 *        nothing when beta is 1). With beta != 0 the producer prefetches each tile's old dW
 *        into L2 (cp.async.bulk.prefetch) as it starts the tile's loads (opt-in). With a second
 *        segment (dY2, X2, counts2: two micro-batches' rows, sl_op_grouped_matmul_dw_pair) a
 *        group's reduction runs over its chunks of the first, then of the second segment, each
 *        segment's last chunk zero-padded as above: one epilogue (one pass over dW) for both.
 * The groups' first rows and tile offsets are prefix sums of the counts, computed by each block
 * from the device array (warp 0, shuffles) into shared memory; a tile's group is a binary search
 * there. Results are deterministic: each output element is one accumulator's fixed sequence of
 * wgmmas, whatever the block that runs it.
 */
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/backend_cuda.cuh"
#include "core/cuda_common.cuh"
#include "core/env.h"
#include "core/kernels_cuda.h" /* sl_cuda_reduce_add */
#include "core/log.h"
#include "core/ptx_sm90.cuh"
#include "moe/grouped_matmul_sm90.h"

namespace {

constexpr int kWg = 128, kConsumers = 2, kThreads = (1 + kConsumers) * kWg,
              kConsumerThreads = kConsumers * kWg;
constexpr int BM = 128, BK = 64; /* block tile rows (2 x 64), reduction chunk */
constexpr int kMaxGroups = 1024;
constexpr int kProducerRegs = 40, kConsumerRegs = 232;
/* named barriers: both consumers (256 threads); consumer c's warpgroup alone, kBarWg + c */
enum : int { kBarPair = 1, kBarWg = 2 };

/* ---- tiles and descriptors (the 128B-swizzled [rows][64] chunks TMA writes) --------------- */

/* K-major operand ([rows][64 k], one chunk): rows row0..; k-slice ks (0..3) 32 bytes on. */
__device__ __forceinline__ uint64_t desc_k(const uint8_t *tile, int row0) {
    return sl_wgmma_desc(tile + row0 * 128, SL_SWIZZLE_128B, 16, 1024);
}
__device__ __forceinline__ uint64_t kslice(uint64_t d, int ks) {
    return sl_wgmma_desc_add(d, (uint32_t)(32 * ks));
}
/* MN-major operand ([64 k][cols] as cols / 64 chunks of [64][64]): columns col0.. (a multiple
 * of 64); the next 64 columns one chunk (8 KB) on (LBO), the next 8 k 1024 bytes (SBO); k-slice
 * kk (0..3) 16 rows = 2048 bytes on. */
__device__ __forceinline__ uint64_t desc_mn(const uint8_t *tile, int col0) {
    return sl_wgmma_desc(tile + (col0 >> 6) * (BK * 128), SL_SWIZZLE_128B, BK * 128, 1024);
}
__device__ __forceinline__ uint64_t mnslice(uint64_t d, int kk) {
    return sl_wgmma_desc_add(d, (uint32_t)(2048 * kk));
}

/* RED: the weight gradient's add-reduction epilogue (dw_kernel), whose four staging buffers
 * (two per consumer, each 64 rows x 32 fp32 columns: one TMA box of 128-byte rows, 128B
 * swizzle) take the place of one ring stage. */
constexpr uint32_t kRedBytes = 64 * 32 * 4; /* a staging buffer of the dW add reductions */
template <int BN, bool RED = false> struct layout {
    static constexpr int ST = (BN == 256 ? 4 : 6) - (RED ? 1 : 0);
    static constexpr uint32_t a_bytes = BM * BK * 2, b_bytes = BN * BK * 2, red_bytes = kRedBytes;
    static constexpr uint32_t a = 0, b = ST * a_bytes, red = b + ST * b_bytes,
                              bars = red + (RED ? 4 * red_bytes : 0);
    static constexpr uint32_t tables = bars + 16 * ST; /* full[ST], empty[ST] */
    /* + row_start[groups + 1], tile_start[groups + 1] (int) */
    static constexpr size_t bytes(int groups) {
        return tables + 2 * sizeof(int) * (size_t)(groups + 1);
    }
};

/* Prefix sums of the counts into shared memory by warp `warp`: row_start[g] (first row of
 * group g), tile_start[g] (its first 128-row tile; not written where null), g = 0 .. groups. */
__device__ __forceinline__ void group_tables(const int *counts, int groups, int *row_start,
                                             int *tile_start, int warp) {
    if ((int)threadIdx.x / 32 != warp) return;
    const int lane = (int)threadIdx.x % 32;
    int rows = 0, tiles = 0;
    for (int base = 0; base < groups; base += 32) {
        const int g = base + lane;
        int r = g < groups ? counts[g] : 0, t = (r + BM - 1) / BM;
        SL_UNROLL
        for (int off = 1; off < 32; off <<= 1) {
            const int ur = __shfl_up_sync(0xffffffffu, r, off),
                      ut = __shfl_up_sync(0xffffffffu, t, off);
            if (lane >= off) r += ur, t += ut;
        }
        if (g < groups) {
            row_start[g + 1] = rows + r;
            if (tile_start) tile_start[g + 1] = tiles + t;
        }
        rows += __shfl_sync(0xffffffffu, r, 31);
        tiles += __shfl_sync(0xffffffffu, t, 31);
    }
    if (lane == 0) {
        row_start[0] = 0;
        if (tile_start) tile_start[0] = 0;
    }
}

/* The ring of ST stages both kernels share, and a block's start. Iteration `it` counts the
 * reduction chunks a block has walked over all its tiles; it uses stage it % ST, whose phase
 * parity is (it / ST) & 1. "full" completes on the producer's arrival and TMA's transaction
 * bytes, "empty" on the 256 consumer threads' arrivals. */
template <int ST> struct ring {
    uint64_t *full, *empty;
    int *row_start, *tile_start; /* the groups' tables (group_tables) */
    /* dW with a second segment: its groups' first rows, in tile_start's place (dW needs no
     * tile table) */
    int *row_start2;

    /* The producer: waits until the consumers released the stage's previous use, expects
     * `bytes` of TMA loads on it and returns the stage. */
    __device__ __forceinline__ int produce(int it, uint32_t bytes) const {
        const int s = it % ST;
        if (it >= ST) sl_mbar_wait(&empty[s], (uint32_t)((it / ST - 1) & 1));
        sl_mbar_arrive_expect_tx(&full[s], bytes);
        return s;
    }
    /* A consumer: waits for the stage's data and returns the stage. */
    __device__ __forceinline__ int consume(int it) const {
        const int s = it % ST;
        sl_mbar_wait(&full[s], (uint32_t)((it / ST) & 1));
        return s;
    }
    /* A consumer: iteration it's stage may be refilled (its wgmmas have retired). */
    __device__ __forceinline__ void release(int it) const { sl_mbar_arrive(&empty[it % ST]); }
};

/* The start of a block of either kernel: the ring's mbarriers (after the shared-memory tiles,
 * layout<BN>) and the groups' tables, initialized, then the block meets. */
template <int BN, bool RED = false>
__device__ __forceinline__ ring<layout<BN, RED>::ST> block_start(uint8_t *smem,
                                                                 const sl_gmm_sm90_args &a) {
    using L = layout<BN, RED>;
    ring<L::ST> r;
    r.full = (uint64_t *)(smem + L::bars), r.empty = r.full + L::ST;
    r.row_start = (int *)(smem + L::tables), r.tile_start = r.row_start + a.groups + 1;
    if (threadIdx.x == 0) {
        for (int s = 0; s < L::ST; s++) {
            sl_mbar_init(&r.full[s], 1);
            sl_mbar_init(&r.empty[s], kConsumerThreads);
        }
        sl_fence_mbarrier_init();
    }
    r.row_start2 = a.counts2 ? r.tile_start : nullptr;
    group_tables(a.counts, a.groups, r.row_start, a.counts2 ? nullptr : r.tile_start, 0);
    if (a.counts2) group_tables(a.counts2, a.groups, r.row_start2, nullptr, 1);
    __syncthreads();
    return r;
}

struct mm_tile {
    int g, row0, rows, nt; /* group, first row, its rows in this tile (<= BM), column tile */
};
__device__ __forceinline__ mm_tile locate_mm(const int *row_start, const int *tile_start,
                                             int groups, int n_tiles, int t) {
    /* t enumerates (group, column tile, row tile) with the row tile fastest. The group: the
     * largest g with tile_start[g] n_tiles <= t (an empty group shares its start with the next,
     * so the largest is the non-empty one). */
    int lo = 0, hi = groups - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (tile_start[mid] * n_tiles <= t)
            lo = mid;
        else
            hi = mid - 1;
    }
    const int g = lo, mts = tile_start[g + 1] - tile_start[g], local = t - tile_start[g] * n_tiles;
    mm_tile r;
    r.g = g;
    r.row0 = row_start[g] + (local % mts) * BM;
    r.rows = min(BM, row_start[g + 1] - r.row0);
    r.nt = local / mts;
    return r;
}

/* Pairs of columns as one access: bf16x2 in 4 bytes, fp32 pairs in 8. */
__device__ __forceinline__ float2 load_pair(const sl_bf16 *p) {
    float2 v;
    sl_unpack_bf16x2(*(const uint32_t *)p, &v.x, &v.y);
    return v;
}
__device__ __forceinline__ float2 load_pair(const float *p) {
    return *(const float2 *)p;
}
__device__ __forceinline__ void store_pair(sl_bf16 *p, float a, float b) {
    *(uint32_t *)p = sl_pack_bf16x2(a, b);
}
__device__ __forceinline__ void store_pair(float *p, float a, float b) {
    *(float2 *)p = make_float2(a, b);
}

/* The epilogue of one consumer: out = acc + beta out for its rows 16 w + g + 8 x (row[x], or
 * null where that row is not stored) and the columns n0 + 8 j + 2 q, + 1 below n (n a multiple
 * of 8, so a pair is stored whole or not at all), straight from the accumulators. Every read of
 * the old values comes before the first store: interleaved, each load would wait for the store
 * before it (nvcc cannot tell the addresses apart), one memory round trip per pair. */
template <int BN, class T>
__device__ __forceinline__ void store_tile(float (&acc)[BN / 2], T *const (&row)[2], int n0, int n,
                                           float beta, int q) {
    if (beta != 0.0f) {
        SL_UNROLL
        for (int x = 0; x < 2; x++) {
            if (!row[x]) continue;
            SL_UNROLL
            for (int j = 0; j < BN / 8; j++) {
                const int col = n0 + 8 * j + 2 * q;
                if (col >= n) continue;
                const float2 o = load_pair(row[x] + col);
                acc[4 * j + 2 * x] += beta * o.x, acc[4 * j + 2 * x + 1] += beta * o.y;
            }
        }
    }
    SL_UNROLL
    for (int x = 0; x < 2; x++) {
        if (!row[x]) continue;
        SL_UNROLL
        for (int j = 0; j < BN / 8; j++) {
            const int col = n0 + 8 * j + 2 * q;
            if (col < n) store_pair(row[x] + col, acc[4 * j + 2 * x], acc[4 * j + 2 * x + 1]);
        }
    }
}

/* The squares of a consumer's values of a dW tile (rows row[x], columns n0 + 8 j + 2 q, + 1
 * below n), summed over the warp (a fixed tree) into its slot of a.sq: from the accumulators
 * (the values just stored) or, for a tile the kernel keeps (dw_kept), from dW itself. */
template <int BN>
__device__ __forceinline__ void tile_squares(const float (&acc)[BN / 2], float *const (&row)[2],
                                             int n0, int n, bool from_memory, float *slot,
                                             const sl_wg_lane &p) {
    float ss = 0.0f;
    SL_UNROLL
    for (int x = 0; x < 2; x++) {
        if (!row[x]) continue;
        SL_UNROLL
        for (int j = 0; j < BN / 8; j++) {
            const int col = n0 + 8 * j + 2 * p.q;
            if (col >= n) continue;
            const float2 v = from_memory ? load_pair(row[x] + col)
                                         : make_float2(acc[4 * j + 2 * x], acc[4 * j + 2 * x + 1]);
            ss = fmaf(v.x, v.x, ss);
            ss = fmaf(v.y, v.y, ss);
        }
    }
    ss = sl_warp_sum(ss);
    if ((p.t & 31) == 0) *slot = ss;
}

/* ---- the forward / data-gradient kernel ----------------------------------------------------- */

template <int BN, int TB>
__global__ void __launch_bounds__(kThreads, 1)
    mm_kernel(const __grid_constant__ CUtensorMap ta, const __grid_constant__ CUtensorMap tb,
              const sl_gmm_sm90_args a) {
    using L = layout<BN>;
    SL_DYNAMIC_SMEM_1024(uint8_t, smem);
    const auto R = block_start<BN>(smem, a);
    const int wg = (int)(threadIdx.x / kWg);
    const int n_tiles = (a.n + BN - 1) / BN, k_chunks = (a.k + BK - 1) / BK;
    const int total = R.tile_start[a.groups] * n_tiles;

    if (wg == 0) { /* producer */
        sl_setmaxnreg_dec<kProducerRegs>();
        if (threadIdx.x != 0) return;
        sl_tma_prefetch(&ta);
        sl_tma_prefetch(&tb);
        int it = 0;
        for (int t = (int)blockIdx.x; t < total; t += (int)gridDim.x) {
            const mm_tile m = locate_mm(R.row_start, R.tile_start, a.groups, n_tiles, t);
            const int n0 = m.nt * BN;
            for (int kc = 0; kc < k_chunks; kc++, it++) {
                const int s = R.produce(it, L::a_bytes + L::b_bytes);
                sl_tma_load_2d(smem + L::a + s * L::a_bytes, &ta, &R.full[s], kc * BK, m.row0);
                uint8_t *sb = smem + L::b + s * L::b_bytes;
                if (TB) /* B_g [K, N]: BN / 64 chunks of [64 k][64 n] */
                    for (int c = 0; c < BN / 64; c++)
                        sl_tma_load_3d(sb + c * (BK * 128), &tb, &R.full[s], n0 + 64 * c, kc * BK,
                                       m.g);
                else /* B_g [N, K]: one [BN n][64 k] box */
                    sl_tma_load_3d(sb, &tb, &R.full[s], kc * BK, n0, m.g);
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
        const int n0 = m.nt * BN;
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

        /* epilogue: this consumer's rows of the group only */
        sl_bf16 *row[2];
        SL_UNROLL
        for (int x = 0; x < 2; x++) {
            const int r = 64 * c + 16 * p.w + p.g + 8 * x;
            row[x] = r < m.rows ? (sl_bf16 *)a.c + (int64_t)(m.row0 + r) * a.n : nullptr;
        }
        store_tile<BN>(acc, row, n0, a.n, a.beta, p.q);
    }
}

/* ---- the weight-gradient kernel ---------------------------------------------------------- */

/* Zeroes rows kv .. 63 of a [64][64] chunk (bf16, 128-byte rows: the swizzle permutes 16-byte
 * pieces within a row, so a row's bytes stay where they were) by one warpgroup's threads. */
__device__ __forceinline__ void zero_rows_from(uint8_t *chunk, int kv, int t) {
    uint4 *p = (uint4 *)(chunk + kv * 128);
    const int n = (BK - kv) * 8; /* 16-byte pieces */
    for (int i = t; i < n; i += kWg) p[i] = make_uint4(0u, 0u, 0u, 0u);
}

/* Whether a dW tile stays as it is: an empty group (no reduction chunks) with beta 1, the
 * accumulating micro-batches. Neither the producer (no loads, no prefetch) nor the consumers
 * (no read-modify-write of 2 x 4 bytes per element; with routing as uneven as at
 * initialization that was most of the step's weight-gradient traffic) touch it. */
__device__ __forceinline__ bool dw_kept(int chunks, float beta) {
    return chunks == 0 && beta == 1.0f;
}

/* The dW tile's old values (group g, rows m0.., columns n0..) into L2, one row (BN fp32, at
 * most 1 KB) per bulk prefetch: issued by the producer as it starts the tile's loads, so the
 * epilogue's beta reads hit L2 instead of waiting on DRAM after the mainloop (the tile's 128 KB
 * then arrive while its wgmmas run). Rows are 16-byte aligned: n is a multiple of 8. */
template <int BN>
__device__ __forceinline__ void prefetch_c_tile(const sl_gmm_sm90_args &a, int g, int m0, int n0) {
    const int rows = a.m - m0 < BM ? a.m - m0 : BM, cols = a.n - n0 < BN ? a.n - n0 : BN;
    const float *c = (const float *)a.c + ((int64_t)g * a.m + m0) * a.n + n0;
    for (int r = 0; r < rows; r++) sl_bulk_prefetch_l2(c + (int64_t)r * a.n, (uint32_t)cols * 4);
}

/* The add-reduction epilogue of one consumer (RED, beta 1): its 64 rows of the tile go to dW
 * through the staging buffers, 32 columns at a time, each added to dW by one TMA add
 * reduction (cp.reduce.async.bulk.tensor, fp32) that the warpgroup's first thread issues: the
 * consumer never waits for the old dW to come from memory, as the read-modify-write of
 * store_tile does after every tile. n_red counts the consumer's chunks over the block's life
 * (buffer n_red % 2, reused once the reduction two chunks back has read it). */
template <int BN>
__device__ __forceinline__ void reduce_tile(float (&acc)[BN / 2], uint8_t *stage,
                                            const CUtensorMap *tc, int g, int row0, int n0, int n,
                                            const sl_wg_lane &p, int bar, int &n_red) {
    SL_UNROLL
    for (int i = 0; i < BN / 32; i++) {
        if (n0 + 32 * i >= n) break; /* the same for the whole warpgroup */
        uint8_t *buf = stage + (n_red & 1) * kRedBytes;
        if (n_red >= 2) {
            if (p.t == 0) sl_tma_store_wait_read<1>();
            sl_named_bar_sync(bar, kWg);
        }
        /* columns n0 + 32 i + 8 jj + 2 q (+ 1): chunk 2 jj + q / 2 of the 128-byte row, 8 (q
         * % 2) bytes into it, the chunk XOR (row % 8) */
        SL_UNROLL
        for (int x = 0; x < 2; x++) {
            const int r = 16 * p.w + p.g + 8 * x;
            const uint32_t u = (uint32_t)((p.q >> 1) ^ (r & 7));
            uint8_t *row = buf + r * 128 + (p.q & 1) * 8;
            SL_UNROLL
            for (int jj = 0; jj < 4; jj++) {
                const int j = 4 * i + jj;
                *(float2 *)(row + (((uint32_t)(2 * jj) ^ u) << 4)) =
                    make_float2(acc[4 * j + 2 * x], acc[4 * j + 2 * x + 1]);
            }
        }
        sl_fence_proxy_async();
        sl_named_bar_sync(bar, kWg);
        if (p.t == 0) {
            sl_tma_reduce_add_4d(tc, buf, n0 + 32 * i, row0, g, 0);
            sl_tma_store_commit();
        }
        n_red++;
    }
}

/* A dW tile's reduction: its group's rows in the first segment (rows from r0, `chunks` chunks
 * of BK) and, with a second, in that one (from r2, chunks2), walked as one run of chunks. */
struct dw_run {
    int r0, rows, chunks, r2, rows2, chunks2;
    __device__ __forceinline__ int total() const { return chunks + chunks2; }
    /* chunk kc's segment (0, 1), its first row there and its rows in that segment from it */
    __device__ __forceinline__ int seg(int kc) const { return kc >= chunks; }
    __device__ __forceinline__ int row(int kc) const {
        return kc < chunks ? r0 + kc * BK : r2 + (kc - chunks) * BK;
    }
    __device__ __forceinline__ int left(int kc) const {
        return kc < chunks ? rows - kc * BK : rows2 - (kc - chunks) * BK;
    }
};
template <int ST> __device__ __forceinline__ dw_run dw_run_of(const ring<ST> &R, int g) {
    dw_run d;
    d.r0 = R.row_start[g], d.rows = R.row_start[g + 1] - d.r0;
    d.chunks = (d.rows + BK - 1) / BK;
    d.r2 = d.rows2 = d.chunks2 = 0;
    if (R.row_start2) {
        d.r2 = R.row_start2[g], d.rows2 = R.row_start2[g + 1] - d.r2;
        d.chunks2 = (d.rows2 + BK - 1) / BK;
    }
    return d;
}

template <int BN, bool RED>
__global__ void __launch_bounds__(kThreads, 1)
    dw_kernel(const __grid_constant__ CUtensorMap tdy, const __grid_constant__ CUtensorMap tx,
              const __grid_constant__ CUtensorMap tc, const __grid_constant__ CUtensorMap tdy2,
              const __grid_constant__ CUtensorMap tx2, const sl_gmm_sm90_args a) {
    using L = layout<BN, RED>;
    SL_DYNAMIC_SMEM_1024(uint8_t, smem);
    const auto R = block_start<BN, RED>(smem, a);
    const int wg = (int)(threadIdx.x / kWg);
    const int m_tiles = (a.m + BM - 1) / BM, n_tiles = (a.n + BN - 1) / BN;
    const int per_group = m_tiles * n_tiles, total = a.groups * per_group;

    /* tile t: group t / per_group, then the row tile of dW, column tile fastest */
    if (wg == 0) { /* producer */
        sl_setmaxnreg_dec<kProducerRegs>();
        if (threadIdx.x != 0) return;
        sl_tma_prefetch(&tdy);
        sl_tma_prefetch(&tx);
        if (a.counts2) {
            sl_tma_prefetch(&tdy2);
            sl_tma_prefetch(&tx2);
        }
        int it = 0;
        for (int t = (int)blockIdx.x; t < total; t += (int)gridDim.x) {
            const int g = t / per_group, local = t % per_group;
            const int m0 = (local / n_tiles) * BM, n0 = (local % n_tiles) * BN;
            const dw_run d = dw_run_of(R, g);
            const int chunks = d.total();
            if (a.prefetch_c && !dw_kept(chunks, a.beta)) prefetch_c_tile<BN>(a, g, m0, n0);
            for (int kc = 0; kc < chunks; kc++, it++) {
                const int s = R.produce(it, L::a_bytes + L::b_bytes), row = d.row(kc);
                const CUtensorMap *mdy = d.seg(kc) ? &tdy2 : &tdy, *mx = d.seg(kc) ? &tx2 : &tx;
                uint8_t *sa = smem + L::a + s * L::a_bytes, *sb = smem + L::b + s * L::b_bytes;
                for (int c = 0; c < BM / 64; c++)
                    sl_tma_load_2d(sa + c * (BK * 128), mdy, &R.full[s], m0 + 64 * c, row);
                for (int c = 0; c < BN / 64; c++)
                    sl_tma_load_2d(sb + c * (BK * 128), mx, &R.full[s], n0 + 64 * c, row);
            }
        }
        return;
    }

    sl_setmaxnreg_inc<kConsumerRegs>();
    const int c = wg - 1;
    const sl_wg_lane p = sl_wg_lane_of();
    float acc[BN / 2];
    int it = 0, n_red = 0;
    for (int t = (int)blockIdx.x; t < total; t += (int)gridDim.x) {
        const int g = t / per_group, local = t % per_group;
        const int m0 = (local / n_tiles) * BM, n0 = (local % n_tiles) * BN;
        const dw_run d = dw_run_of(R, g);
        const int chunks = d.total();
        float *row[2];
        SL_UNROLL
        for (int x = 0; x < 2; x++) {
            const int r = m0 + 64 * c + 16 * p.w + p.g + 8 * x;
            row[x] = r < a.m ? (float *)a.c + ((int64_t)g * a.m + r) * a.n : nullptr;
        }
        float *slot = a.sq ? a.sq + ((int64_t)t * kConsumers + c) * 4 + p.w : nullptr;
        if (dw_kept(chunks, a.beta)) {
            if (slot) tile_squares<BN>(acc, row, n0, a.n, true, slot, p);
            continue;
        }
        /* zero first, every wgmma accumulates: an empty group's tile is all zeros, and no
         * branch around the wgmmas (one made ptxas serialize them, C7518) */
        SL_UNROLL
        for (int i = 0; i < BN / 2; i++) acc[i] = 0.0f;
        for (int kc = 0; kc < chunks; kc++, it++) {
            const int s = R.consume(it);
            uint8_t *sa = smem + L::a + s * L::a_bytes, *sb = smem + L::b + s * L::b_bytes;
            /* the last chunk of the group in a segment: the next group's rows count as zeros
             * (skipping the k-slices past the group instead made ptxas serialize the wgmmas,
             * C7520: a branch around them; the padding is at most 63 rows of the group's
             * reduction per segment) */
            const int kv = d.left(kc);
            if (kv < BK) {
                zero_rows_from(sa + c * (BK * 128), kv, p.t);
                for (int cc = c; cc < BN / 64; cc += 2)
                    zero_rows_from(sb + cc * (BK * 128), kv, p.t);
                sl_fence_proxy_async();
                sl_named_bar_sync(kBarPair, kConsumerThreads);
            }
            const uint64_t da = desc_mn(sa, 64 * c), db = desc_mn(sb, 0);
            sl_wgmma_fence_operand(acc);
            sl_wgmma_fence();
            SL_UNROLL
            for (int kk = 0; kk < BK / 16; kk++)
                sl_wgmma_bf16_ss<BN, 1, 1>(acc, mnslice(da, kk), mnslice(db, kk), 1);
            sl_wgmma_commit();
            sl_wgmma_wait<1>();
            sl_wgmma_fence_operand(acc);
            if (kc > 0) R.release(it - 1);
        }
        sl_wgmma_wait<0>();
        sl_wgmma_fence_operand(acc);
        if (chunks > 0) R.release(it - 1);

        /* epilogue: dW rows m0 + this consumer's 64 below R */
        if constexpr (RED) {
            reduce_tile<BN>(acc, smem + L::red + 2 * c * L::red_bytes, &tc, g, m0 + 64 * c, n0, a.n,
                            p, kBarWg + c, n_red);
        } else {
            store_tile<BN>(acc, row, n0, a.n, a.beta, p.q);
            if (slot) tile_squares<BN>(acc, row, n0, a.n, false, slot, p);
        }
    }
    if constexpr (RED) {
        if (p.t == 0) sl_tma_store_wait<0>(); /* the staging buffers live until read */
    }
}

/* ---- host ------------------------------------------------------------------------------------ */

/* A 2D (rows x width bf16, row-major) or 3D ([groups][rows][width]) tensor map in boxes of
 * box_w (64) columns x box_rows rows, 128B swizzle, zeros past the edges. */
CUtensorMap bf16_map(const void *p, int64_t width, int64_t rows, int64_t groups, int box_rows,
                     const char *op) {
    CUtensorMap m;
    const cuuint64_t dims[3] = {(cuuint64_t)width, (cuuint64_t)rows, (cuuint64_t)groups};
    const cuuint64_t strides[2] = {(cuuint64_t)width * 2, (cuuint64_t)(width * rows * 2)};
    const cuuint32_t box[3] = {64, (cuuint32_t)box_rows, 1};
    const CUresult r = sl_tensor_map_tiled(&m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, groups ? 3 : 2, p,
                                           dims, strides, box, SL_SWIZZLE_128B);
    SL_CHECK(r == CUDA_SUCCESS,
             "%s: cuTensorMapEncodeTiled failed (%d) for a [%lld, %lld, %lld] "
             "bf16 tensor",
             op, (int)r, (long long)groups, (long long)rows, (long long)width);
    return m;
}

template <auto K> void raise_smem(size_t bytes, const char *op) {
    static size_t raised = 48 * 1024;
    if (bytes <= raised) return;
    sl_cuda_check(cudaFuncSetAttribute(K, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes),
                  op, "cudaFuncSetAttribute(MaxDynamicSharedMemorySize)");
    raised = bytes;
}

/* Persistent grid: one block per SM, fewer when there are fewer tiles. */
unsigned grid_for(void *ctx, int64_t tiles) {
    const int64_t sms = sl_cuda_props(ctx)->multiProcessorCount;
    return (unsigned)(tiles < sms ? tiles : sms);
}

bool aligned16(const void *p) {
    return ((uintptr_t)p & 15) == 0;
}

/* Whether this device runs the kernels (core/ptx_sm90.cuh's sl_sm90_code_runs), per device
 * ordinal. */
bool device_runs(void *ctx) {
    static signed char known[64];
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) {
        (void)cudaGetLastError();
        return false;
    }
    if (!known[dev])
        known[dev] =
            sl_sm90_code_runs(sl_cuda_props(ctx), (const void *)mm_kernel<128, 0>) ? 1 : -1;
    return known[dev] > 0;
}

/* The kernels' int32 counts: the device tensor's own, or the host's uploaded (each below
 * 2^31: the rows are, why_not). */
const int *device_counts(void *ctx, const sl_group_counts *k, int groups) {
    if (!k->host) return (const int *)k->dev->data;
    const std::vector<int> h(k->host, k->host + groups);
    return (const int *)sl_cuda_upload(ctx, h.data(), sizeof(int) * (size_t)groups);
}

template <int BN, int TB>
void launch_mm(const CUtensorMap &ta, const CUtensorMap &tb, const sl_gmm_sm90_args &a,
               int64_t tiles) {
    const size_t smem = layout<BN>::bytes(a.groups);
    raise_smem<mm_kernel<BN, TB>>(smem, "grouped_matmul");
    SL_LAUNCH((mm_kernel<BN, TB>), dim3(grid_for(a.ctx, tiles)), dim3(kThreads), smem,
              sl_cuda_stream(a.ctx), ta, tb, a);
}

/* dW [groups][m][n] fp32 as the add reductions' target: boxes of 32 columns x 64 rows (one
 * consumer's), 128B swizzle; 4D ({n, m, groups, 1}) for the 4D reduction wrapper. */
CUtensorMap dw_map(void *p, int64_t n, int64_t m, int64_t groups, const char *op) {
    CUtensorMap t;
    const cuuint64_t dims[4] = {(cuuint64_t)n, (cuuint64_t)m, (cuuint64_t)groups, 1};
    const cuuint64_t strides[3] = {(cuuint64_t)n * 4, (cuuint64_t)(n * m * 4),
                                   (cuuint64_t)(n * m * groups * 4)};
    const cuuint32_t box[4] = {32, 64, 1, 1};
    const CUresult r = sl_tensor_map_tiled(&t, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, p, dims, strides,
                                           box, SL_SWIZZLE_128B);
    SL_CHECK(r == CUDA_SUCCESS,
             "%s: cuTensorMapEncodeTiled failed (%d) for the [%lld, %lld, %lld] fp32 dW", op,
             (int)r, (long long)groups, (long long)m, (long long)n);
    return t;
}

/* The weight gradient's tensor maps: dY, X (and a second segment's, else those again), and
 * dW as the add reductions' target (else any valid map). */
struct dw_maps {
    CUtensorMap dy, x, c, dy2, x2;
};

template <int BN, bool RED>
void launch_dw(const dw_maps &m, const sl_gmm_sm90_args &a, int64_t tiles) {
    const size_t smem = layout<BN, RED>::bytes(a.groups);
    raise_smem<dw_kernel<BN, RED>>(smem, "grouped_matmul_dw");
    SL_LAUNCH((dw_kernel<BN, RED>), dim3(grid_for(a.ctx, tiles)), dim3(kThreads), smem,
              sl_cuda_stream(a.ctx), m.dy, m.x, m.c, m.dy2, m.x2, a);
}

/* Why the kernels do not apply to these operands on this device, or null: types as the kernel
 * takes them (types_ok: bf16 in, bf16 out for the forward, fp32 for the weight gradient),
 * widths multiples of 8 (TMA's 16-byte strides), 16-byte aligned, at most kMaxGroups groups and
 * 2^31 rows. */
const char *why_not(void *ctx, bool types_ok, int64_t w1, int64_t w2, int groups, int64_t rows,
                    const void *p0, const void *p1, const void *p2) {
    if (!types_ok) return "its operands are not bf16";
    if (w1 % 8 || w2 % 8 || w1 == 0 || w2 == 0) return "a width is not a multiple of 8";
    if (groups < 1 || groups > kMaxGroups) return "more than 1,024 experts";
    if (rows >= INT32_MAX) return "2^31 rows or more";
    if (!aligned16(p0) || !aligned16(p1) || !aligned16(p2))
        return "an operand is not 16-byte aligned";
    if (!device_runs(ctx))
        return "the device is not compute capability 9.x with this build's sm_90a code";
    return nullptr;
}

/* An off-by-default switch from the environment: 1 when `name` is "1"; unset, "" or "0" is 0,
 * anything else stops the run naming the variable. */
int env_switch(const char *name) {
    static const char *const values[] = {"0", "1"};
    return sl_env_choice(name, values, 2) == 1;
}

/* Whether the weight gradient prefetches its old dW tiles (SLUICE_EXPERT_GEMM_PREFETCH=1). Off
 * by default: on an H200 (2026-11-26) the step at 4 x 1 x 4096 took 346.6 ms with it and 344.2
 * without (weight gradient 63.4 against 61.2 ms; docs/performance.md). */
int prefetch_c_enabled(void) {
    static const int on = env_switch("SLUICE_EXPERT_GEMM_PREFETCH");
    return on;
}

/* Whether the weight gradient with beta 1 adds its tiles to dW by TMA add reductions
 * (SLUICE_EXPERT_GEMM_DW_REDUCE=1) instead of reading the old dW into registers. Off by default
 * until a GPU has measured it (docs/performance.md). The sum is the same fp32 addition either
 * way (old + new, round to nearest; whether L2's reduction keeps subnormals as the SM does is
 * not established). */
int dw_reduce_enabled(void) {
    static const int on = env_switch("SLUICE_EXPERT_GEMM_DW_REDUCE");
    return on;
}

/* Says once per process and operation whether the kernel runs or why not, where
 * SLUICE_EXPERT_GEMM=wgmma asked for it (loud); auto takes it silently where it applies and
 * its other paths where not (gpu_train_bench and the profile name the path that ran). */
bool note(const char *op, bool *said, const char *why, bool loud) {
    if (loud && !*said) {
        *said = true;
        if (why)
            sl_info("expert GEMMs: %s runs auto's path, not the Hopper grouped GEMM: %s", op, why);
        else
            sl_info("expert GEMMs: %s runs the Hopper grouped GEMM (wgmma)", op);
    }
    return why == nullptr;
}

} // namespace

bool sl_cuda_grouped_sm90_applies(void *ctx, sl_dtype dt, int64_t r, int64_t s, int groups) {
    static const char aligned[16] __attribute__((aligned(16))) = {0};
    return why_not(ctx, dt == SL_BF16, r, s, groups, 0, aligned, aligned, aligned) == nullptr;
}

bool sl_cuda_grouped_mm_sm90(void *ctx, sl_tensor *c, const sl_tensor *a, const sl_tensor *b,
                             const sl_group_counts *counts, int groups, bool trans_b, float beta,
                             bool loud) {
    static const char *op = "grouped_matmul";
    const int64_t r = b->shape[1], s = b->shape[2];
    const int64_t in = trans_b ? s : r, out = trans_b ? r : s;
    /* the groups' rows only: a tensor may be sized for more (expert parallelism's receive
     * buffers), its memory not (TMA's zeros past the last row stand in for the rest) */
    const int64_t rows = counts->rows;
    static bool said = false;
    const bool types_ok = a->dtype == SL_BF16 && b->dtype == SL_BF16 && c->dtype == SL_BF16;
    const char *why = why_not(ctx, types_ok, in, out, groups, rows, a->data, b->data, c->data);
    if (!note(op, &said, why, loud)) return false;
    const int bn = out > 128 ? 256 : 128;
    /* the 128-row tiles: exact from host counts; from device counts their bound (each group's
     * last tile at most one more), the grid's size only: the blocks count them on the device */
    int64_t m_tiles = 0;
    for (int g = 0; counts->host && g < groups; g++) m_tiles += (counts->host[g] + BM - 1) / BM;
    if (!counts->host) m_tiles = (rows + (int64_t)groups * (BM - 1)) / BM;
    const int64_t tiles = m_tiles * ((out + bn - 1) / bn);
    if (tiles >= INT32_MAX) return false;
    if (rows == 0 || tiles == 0) return true; /* no rows: nothing to write */
    sl_gmm_sm90_args args = {};
    args.ctx = ctx, args.counts = device_counts(ctx, counts, groups), args.groups = groups;
    args.n = (int)out, args.k = (int)in, args.c = c->data, args.beta = beta;
    const CUtensorMap ta = bf16_map(a->data, in, rows, 0, BM, op);
    /* B [groups, R, S]: rows of S; trans_b reads [BN n][64 k] boxes, else [64 k][64 n] */
    const CUtensorMap tb = bf16_map(b->data, s, r, groups, trans_b ? bn : BK, op);
    if (bn == 256)
        trans_b ? launch_mm<256, 0>(ta, tb, args, tiles) : launch_mm<256, 1>(ta, tb, args, tiles);
    else
        trans_b ? launch_mm<128, 0>(ta, tb, args, tiles) : launch_mm<128, 1>(ta, tb, args, tiles);
    SL_CUDA_LAUNCHED(op);
    return true;
}

bool sl_cuda_grouped_dw_sm90(void *ctx, sl_tensor *dw, const sl_tensor *dy, const sl_tensor *x,
                             const sl_group_counts *counts, const sl_tensor *dy2,
                             const sl_tensor *x2, const sl_group_counts *counts2, int groups,
                             float beta, sl_tensor *sumsq, bool loud) {
    static const char *op = "grouped_matmul_dw";
    const int64_t r = dw->shape[1], s = dw->shape[2];
    /* the groups' rows only, as in sl_cuda_grouped_mm_sm90 */
    int64_t rows = counts->rows, rows2 = counts2 ? counts2->rows : 0;
    if (rows == 0 && rows2 > 0) { /* no tensor map over no rows: the second segment alone */
        dy = dy2, x = x2, counts = counts2, rows = rows2;
        rows2 = 0;
    }
    const bool pair = rows2 > 0;
    static bool said = false;
    bool types_ok = dy->dtype == SL_BF16 && x->dtype == SL_BF16 && dw->dtype == SL_F32;
    const char *why = why_not(ctx, types_ok, r, s, groups, rows, dy->data, x->data, dw->data);
    if (!why && pair) {
        types_ok = dy2->dtype == SL_BF16 && x2->dtype == SL_BF16;
        why = why_not(ctx, types_ok, r, s, groups, rows2, dy2->data, x2->data, dw->data);
    }
    if (!note(op, &said, why, loud)) return false;
    if (rows == 0) return false; /* no tensor map over no rows: auto's path scales dW by beta */
    const int bn = s > 128 ? 256 : 128;
    const int64_t tiles = (int64_t)groups * ((r + BM - 1) / BM) * ((s + bn - 1) / bn);
    if (tiles >= INT32_MAX) return false;
    sl_gmm_sm90_args args = {};
    args.ctx = ctx, args.counts = device_counts(ctx, counts, groups), args.groups = groups;
    args.counts2 = pair ? device_counts(ctx, counts2, groups) : nullptr;
    args.m = (int)r, args.n = (int)s, args.c = dw->data, args.beta = beta;
    args.prefetch_c = beta != 0.0f && prefetch_c_enabled(); /* beta 0 reads no old dW */
    dw_maps m;
    m.dy = bf16_map(dy->data, r, rows, 0, BK, op);
    m.x = bf16_map(x->data, s, rows, 0, BK, op);
    m.dy2 = pair ? bf16_map(dy2->data, r, rows2, 0, BK, op) : m.dy;
    m.x2 = pair ? bf16_map(x2->data, s, rows2, 0, BK, op) : m.x;
    /* the add-reduction epilogue adds to the old dW: beta 1 only (and not with the prefetch,
     * which serves the read-modify-write, nor with sumsq, whose squares need the sums) */
    const bool red = beta == 1.0f && dw_reduce_enabled() && !args.prefetch_c && !sumsq;
    const int64_t slots = tiles * kConsumers * 4; /* a partial per consumer warp and tile */
    if (sumsq) args.sq = (float *)sl_cuda_scratch(ctx, 3, sizeof(float) * (size_t)slots);
    m.c = red ? dw_map(dw->data, s, r, groups, op) : m.dy;
    if (bn == 256)
        red ? launch_dw<256, true>(m, args, tiles) : launch_dw<256, false>(m, args, tiles);
    else
        red ? launch_dw<128, true>(m, args, tiles) : launch_dw<128, false>(m, args, tiles);
    SL_CUDA_LAUNCHED(op);
    if (sumsq) sl_cuda_reduce_add(ctx, (float *)sumsq->data, args.sq, slots, false);
    return true;
}
