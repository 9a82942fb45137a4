/*
 * moe/grouped_matmul_sm90.cuh - what the Hopper grouped GEMM's two kernels share
 * (moe/grouped_matmul_sm90.cu: the forward and data gradient; grouped_matmul_sm90_dw.cu: the
 * weight gradient; their design in the former's header): the tiles' layouts and wgmma
 * descriptors, the TMA ring, the groups' tables, the epilogue's stores, and the host's tensor
 * maps and checks. Internal to those two files (an anonymous namespace: each has its copy).
 */
#ifndef SL_MOE_GROUPED_MATMUL_SM90_CUH
#define SL_MOE_GROUPED_MATMUL_SM90_CUH

#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/backend_cuda.cuh"
#include "core/cuda_common.cuh"
#include "core/env.h"
#include "core/log.h"
#include "core/ptx_sm90.cuh"
#include "moe/grouped_matmul_sm90.h"
#include "moe/kernels_cuda.h" /* SL_EXPERT_GEMM_ABLATE_* */

namespace {

constexpr int kWg = 128, kConsumers = 2, kThreads = (1 + kConsumers) * kWg,
              kConsumerThreads = kConsumers * kWg;
constexpr int BM = 128, BK = 64; /* block tile rows (2 x 64), reduction chunk */
constexpr int kMaxGroups = 1024;
constexpr int kProducerRegs = 40, kConsumerRegs = 232;
static_assert(sl_setmaxnreg_fits(kWg, kProducerRegs, kConsumerThreads, kConsumerRegs),
              "setmaxnreg: the warpgroups' registers exceed the block's");
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
    /* + the groups' tables of groups + 1 ints each: mm's row_start and tile_start, dW's
     * row_start of each segment (group_tables) */
    static constexpr size_t bytes(int groups, int n_tables = 2) {
        return tables + (size_t)n_tables * sizeof(int) * (size_t)(groups + 1);
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
    /* mm: the groups' tables (group_tables); dW: segment i's groups' first rows at row_start +
     * i (groups + 1) (dW needs no tile table) */
    int *row_start, *tile_start;

    /* The producer: waits until the consumers released the stage's previous use, expects
     * `bytes` of TMA loads on it (0: none, the stage is full at once) and returns the stage. */
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
    /* one warp per table, in parallel: mm's two tables, or dW's segments' row tables */
    if (a.nseg == 0) {
        group_tables(a.counts, a.groups, r.row_start, r.tile_start, 0);
    } else {
        /* unrolled: a run-time index into the parameter's array would copy it to local memory */
        SL_UNROLL
        for (int i = 0; i < SL_DW_MAX_SEGMENTS; i++)
            if (i < a.nseg)
                group_tables(a.seg_counts[i], a.groups, r.row_start + i * (a.groups + 1), nullptr,
                             i);
    }
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

/* Whether expert_gemm_bench --ablate left out `part` (SL_EXPERT_GEMM_ABLATE_*,
 * moe/kernels_cuda.h; never in a real call). */
__device__ __forceinline__ bool left_out(const sl_gmm_sm90_args &a, unsigned part) {
    return (a.ablate & part) != 0;
}

/* Pairs of columns as one access: bf16x2 in 4 bytes, fp32 pairs in 8. */
__device__ __forceinline__ float2 load_pair(const sl_bf16 *p) {
    SL_CHECK_ALIGNED(p, 4);
    float2 v;
    sl_unpack_bf16x2(*(const uint32_t *)p, &v.x, &v.y);
    return v;
}
__device__ __forceinline__ float2 load_pair(const float *p) {
    SL_CHECK_ALIGNED(p, 8);
    return *(const float2 *)p;
}
__device__ __forceinline__ void store_pair(sl_bf16 *p, float a, float b) {
    SL_CHECK_ALIGNED(p, 4);
    *(uint32_t *)p = sl_pack_bf16x2(a, b);
}
__device__ __forceinline__ void store_pair(float *p, float a, float b) {
    SL_CHECK_ALIGNED(p, 8);
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

/* ---- host ------------------------------------------------------------------------------------ */

/* A 2D (rows x width bf16, row-major) or 3D ([groups][rows][width]) tensor map in boxes of
 * box_w (64) columns x box_rows rows, 128B swizzle, zeros past the edges. */
inline CUtensorMap bf16_map(const void *p, int64_t width, int64_t rows, int64_t groups,
                            int box_rows, const char *op) {
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

/* Persistent grid: one block per SM, fewer when there are fewer tiles. */
inline unsigned grid_for(void *ctx, int64_t tiles) {
    const int64_t sms = sl_cuda_props(ctx)->multiProcessorCount;
    return (unsigned)(tiles < sms ? tiles : sms);
}

inline bool aligned16(const void *p) {
    return ((uintptr_t)p & 15) == 0;
}

/* Whether this device runs kernel K (core/ptx_sm90.cuh's sl_sm90_code_runs), per device
 * ordinal. */
template <auto K> bool device_runs(void *ctx) {
    static signed char known[64];
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) {
        (void)cudaGetLastError();
        return false;
    }
    if (!known[dev]) known[dev] = sl_sm90_code_runs(sl_cuda_props(ctx), (const void *)K) ? 1 : -1;
    return known[dev] > 0;
}

/* The kernels' int32 counts: the device tensor's own, or the host's uploaded (each below
 * 2^31: the rows are, why_not). */
inline const int *device_counts(void *ctx, const sl_group_counts *k, int groups) {
    if (!k->host) return (const int *)k->dev->data;
    const std::vector<int> h(k->host, k->host + groups);
    return (const int *)sl_cuda_upload(ctx, h.data(), sizeof(int) * (size_t)groups);
}

/* Why the kernels do not apply to these operands on this device, or null: types as the kernel
 * takes them (types_ok: bf16 in, bf16 out for the forward, fp32 for the weight gradient),
 * widths multiples of 8 (TMA's 16-byte strides), 16-byte aligned, at most kMaxGroups groups and
 * 2^31 rows. */
template <auto K>
const char *why_not(void *ctx, bool types_ok, int64_t w1, int64_t w2, int groups, int64_t rows,
                    const void *p0, const void *p1, const void *p2) {
    if (!types_ok) return "its operands are not bf16";
    if (w1 % 8 || w2 % 8 || w1 == 0 || w2 == 0) return "a width is not a multiple of 8";
    if (groups < 1 || groups > kMaxGroups) return "more than 1,024 experts";
    if (rows >= INT32_MAX) return "2^31 rows or more";
    if (!aligned16(p0) || !aligned16(p1) || !aligned16(p2))
        return "an operand is not 16-byte aligned";
    if (!device_runs<K>(ctx))
        return "the device is not compute capability 9.x with this build's sm_90a code";
    return nullptr;
}

/* An off-by-default switch from the environment: 1 when `name` is "1"; unset, "" or "0" is 0,
 * anything else stops the run naming the variable. */
inline int env_switch(const char *name) {
    static const char *const values[] = {"0", "1"};
    return sl_env_choice(name, values, 2) == 1;
}

/* Says once per process and operation whether the kernel runs or why not, where
 * SLUICE_EXPERT_GEMM=wgmma asked for it (loud); auto takes it silently where it applies and
 * its other paths where not (gpu_train_bench and the profile name the path that ran). */
inline bool note(const char *op, bool *said, const char *why, bool loud) {
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

#endif
