/*
 * attention/gated_attn_sm90.cuh - what the Hopper (sm_90a) gated-attention kernels share
 * (gated_attn_sm90_fwd.cu, gated_attn_sm90_bwd.cu, gated_attn_sm90_dq.cu): the block's warp
 * roles, shared-memory tiles as TMA writes them, wgmma descriptors over those tiles, tensor
 * maps over the attention tensors, the ping-pong turn and the TMA-store epilogue. Design,
 * figures and the reasons for the choices: docs/attention.md, "The Hopper kernel".
 *
 * Every block has three warpgroups (384 threads): warpgroup 0 is the producer (its first thread
 * issues the TMA loads; setmaxnreg.dec gives its registers away), warpgroups 1 and 2 are the
 * consumers (setmaxnreg.inc), each owning 64 rows of every wgmma (m64nNk16). Every instruction
 * is a wrapper of core/ptx_sm90.cuh, whose emulated twins run these kernels in CI.
 *
 * Tiles. A tile of R rows x D bf16 columns is stored as D / 64 column chunks of [R][64] (128-byte
 * rows, 128B swizzle: the 16-byte chunk index XOR the row's index within its 8-row group), chunk
 * c at c * R * 128 bytes: exactly what a TMA load of box {64, 1, R, 1} with
 * CU_TENSOR_MAP_SWIZZLE_128B writes, one load per chunk. Every tile starts at a multiple of 1024
 * bytes (the swizzle pattern's repeat) and R is a multiple of 8, so every 8-row group of every
 * chunk does too: wgmma descriptors take base offset 0.
 */
#ifndef SL_GATED_ATTN_SM90_CUH
#define SL_GATED_ATTN_SM90_CUH

#include <stdlib.h>

#include "attention/gated_attn_tc.cuh" /* args, qtile, locate_qtile, quad_max/sum, sigmoid */
#include "core/backend_cuda.cuh"
#include "core/env.h"
#include "core/log.h"
#include "core/ptx_sm90.cuh"

/* Logs, once per process, that the Hopper kernel runs (gated_attn_sm90_fwd.cu). */
void sl_cuda_gated_attn_sm90_note(void);

namespace sl_attn_sm90 {

using sl_attn_tc::args;
using sl_attn_tc::first_key_tile;
using sl_attn_tc::kLn2;
using sl_attn_tc::kLog2e;
using sl_attn_tc::quad_max;
using sl_attn_tc::quad_sum;
using sl_attn_tc::sigmoid;

/* Warp roles: one producer warpgroup, two consumer warpgroups of 64 rows each. */
constexpr int kWgThreads = 128, kConsumers = 2, kThreads = (1 + kConsumers) * kWgThreads;
constexpr int kRows = 64; /* the M of every wgmma: one consumer warpgroup's rows */
constexpr int kConsumerThreads = kConsumers * kWgThreads;
/* setmaxnreg: 128 x 24 + 256 x 240 = 64,512, the block's 384 x 168 registers at launch (one
 * block per SM; sl_setmaxnreg_fits); the producer only runs a loop of TMA issues, the
 * consumers hold the accumulators. */
constexpr int kProducerRegs = 24, kConsumerRegs = 240;
static_assert(sl_setmaxnreg_fits(kWgThreads, kProducerRegs, kConsumerThreads, kConsumerRegs),
              "setmaxnreg: the warpgroups' registers exceed the block's");
/* The persistent forward and dQ pass (two consumers): the producer keeps its loop's state (the
 * tile, the ring's position, the counter) beside the tile's coordinates, 32 registers (ptxas
 * spilled it at 24), which the consumers pay for: 128 x 32 + 256 x 232 = 384 x 168. */
constexpr int kPersistProducerRegs = 32, kPersistConsumerRegs = 232;
static_assert(sl_setmaxnreg_fits(kWgThreads, kPersistProducerRegs, kConsumerThreads,
                                 kPersistConsumerRegs),
              "setmaxnreg: the warpgroups' registers exceed the block's");

/* Named barriers (id 0 is __syncthreads): the ping-pong turn of consumer c is kBarTurn + c
 * (256 threads: c's bar.sync, the other consumer's bar.arrive), the epilogue barrier of
 * consumer c is kBarWg + c (its 128 threads), kBarPair is both consumers (256). The forward
 * with three consumers numbers its own (fwd_layout). */
enum : int { kBarTurn = 1, kBarWg = 3, kBarPair = 5 };

/* ---- tiles and descriptors ------------------------------------------------------------------ */

/* Byte offset of element (row, col) in a tile of R rows per chunk. */
template <int R> __device__ __forceinline__ uint32_t tile_off(int row, int col) {
    return (uint32_t)(col >> 6) * (uint32_t)(R * 128) +
           sl_swizzle_offset(SL_SWIZZLE_128B, (uint32_t)(row * 128 + (col & 63) * 2));
}

/* Descriptors are made once per GEMM, for its first k-slice, and advanced per slice by a
 * constant (sl_wgmma_desc_add). The first is opaque to nvcc (an empty asm): otherwise it hoists
 * every slice's descriptor of the loop-invariant tiles out of the main loop, and the registers
 * they held spilled the D = 128 forward. */
__device__ __forceinline__ uint64_t desc_at_use(uint64_t d) {
#ifndef SLUICE_CUDA_EMULATED
    asm volatile("" : "+l"(d));
#endif
    return d;
}

/* K-major operand (A stored [m][k], or B stored [n][k]): rows row0.. of a tile of R rows per
 * chunk. 8-row groups 1024 bytes apart (SBO); LBO unused with a swizzle. k-slice ks (columns
 * 16 ks .. 16 ks + 15) is kslice<R>(desc, ks): chunk ks / 4, 32 bytes per slice within the
 * swizzled row. */
template <int R> __device__ __forceinline__ uint64_t desc_kmajor(const uint8_t *tile, int row0) {
    return desc_at_use(sl_wgmma_desc(tile + row0 * 128, SL_SWIZZLE_128B, 16, 1024));
}
template <int R> __device__ __forceinline__ uint64_t kslice(uint64_t desc, int ks) {
    return sl_wgmma_desc_add(desc, (uint32_t)((ks >> 2) * (R * 128) + (ks & 3) * 32));
}

/* MN-major operand (B stored [k][n], or A stored [k][m]) of a tile of R rows (= k) per chunk,
 * columns (= n or m) from col0 (a multiple of 64, or of 8 for an operand of fewer than 64
 * columns) on. A 128-byte row holds 64 consecutive n of one k; the next 64 n are the next
 * chunk, R * 128 bytes on (LBO); the next 8 k are 1024 bytes on (SBO). Within a row col0 moves
 * the start address by 2 col0 bytes: the swizzle is a function of the address, as kslice's
 * 32-byte steps rely on. k-slice kk (rows 16 kk .. 16 kk + 15) is mnslice(desc, kk), 2048
 * bytes per slice. */
template <int R> __device__ __forceinline__ uint64_t desc_mnmajor(const uint8_t *tile, int col0) {
    return desc_at_use(sl_wgmma_desc(tile + (col0 >> 6) * (R * 128) + (col0 & 63) * 2,
                                     SL_SWIZZLE_128B, (uint32_t)(R * 128), 1024));
}
__device__ __forceinline__ uint64_t mnslice(uint64_t desc, int kk) {
    return sl_wgmma_desc_add(desc, (uint32_t)(kk * 2048));
}

/* The accumulator's rows: thread t of a consumer warpgroup holds rows 16 w + g and 16 w + g + 8
 * (w = warp in the warpgroup, g = lane / 4) and columns 8 j + 2 q, + 1 (q = lane % 4) of every
 * 8-column block j: acc[4 j + 2 x + e] is (row 16 w + g + 8 x, column 8 j + 2 q + e). */
using lane_pos = sl_wg_lane;
__device__ __forceinline__ lane_pos lane_of() {
    return sl_wg_lane_of();
}

template <int N> __device__ __forceinline__ void zero_acc(float (&d)[N]) {
    SL_UNROLL
    for (int i = 0; i < N; i++) d[i] = 0.0f;
}

/* The accumulator (64 x N fp32) as N / 16 bf16 A fragments (k-slices of 16 columns). */
template <int N>
__device__ __forceinline__ void acc_to_frags(uint32_t (&a)[N / 16][4], const float (&d)[N / 2]) {
    SL_UNROLL
    for (int s = 0; s < N / 16; s++) sl_wgmma_acc_to_a(a[s], d, s);
}

template <int N> __device__ __forceinline__ void fence_frags(uint32_t (&a)[N][4]) {
    SL_UNROLL
    for (int s = 0; s < N; s++) sl_wgmma_fence_operand(a[s]);
}

/* ---- ping-pong (FlashAttention-3's warp-scheduler barriers) ---------------------------------- */

/* The NC consumers issue their GEMMs in turns, in a ring (named barriers BAR .. BAR + NC - 1):
 * c waits for its turn, issues, and passes the turn to the next, then runs its softmax while
 * the others' GEMMs occupy the tensor cores. Consumer 0 gives itself the first turn (start);
 * each consumer takes as many turns as the others, so the last consumer's last pass is left
 * over: consumer 0 takes it at its end (finish), and every barrier phase completes. */
template <int NC, int BAR> struct turns {
    /* each turn barrier meets two warpgroups: its consumer's bar.sync and the previous one's
     * bar.arrive (consumer 0's own arrive at the start) */
    static constexpr int kCount = 2 * kWgThreads;
    static __device__ __forceinline__ void start(int c) {
        if (c == 0) sl_named_bar_arrive(BAR, kCount);
    }
    static __device__ __forceinline__ void wait(int c) { sl_named_bar_sync(BAR + c, kCount); }
    static __device__ __forceinline__ void pass(int c) {
        sl_named_bar_arrive(BAR + (c + 1 == NC ? 0 : c + 1), kCount);
    }
    static __device__ __forceinline__ void finish(int c) {
        if (c == 0) sl_named_bar_sync(BAR, kCount);
    }
};

/* ---- the TMA-store epilogue ------------------------------------------------------------------ */

/* Stores a consumer's 64 x D accumulator-layout rows as bf16 through shared memory (`bar`: the
 * consumer's own named barrier, its 128 threads): value(j, x)
 * gives the pair (row 16 w + g + 8 x, columns 8 j + 2 q, + 1) as a float2. `region` is the
 * consumer's 64 rows of a tile of R rows per chunk (its own Q rows, free once its last GEMM
 * reading them has retired); the writes are fenced for the async proxy, the warpgroup meets,
 * its first thread stores the D / 64 chunks at (head, row0, b) of `map` (rows past the
 * sequence are clipped by the tensor map) and waits until the store has read the region (not
 * for its writes to reach memory: nothing in the kernel reads them, and they are complete when
 * the kernel is; waiting for them held every block's end and the forward's second store by a
 * memory round trip each), and the warpgroup meets again so that the region can be written
 * anew. */
template <int D, int R, class F>
__device__ __forceinline__ void store_rows(uint8_t *region, int bar, const CUtensorMap *map,
                                           int head, int row0, int b, F value) {
    const lane_pos p = lane_of();
    SL_UNROLL
    for (int j = 0; j < D / 8; j++) {
        SL_UNROLL
        for (int x = 0; x < 2; x++) {
            const float2 v = value(j, x);
            *(uint32_t *)(region + tile_off<R>(16 * p.w + p.g + 8 * x, 8 * j + 2 * p.q)) =
                sl_pack_bf16x2(v.x, v.y);
        }
    }
    sl_fence_proxy_async();
    sl_named_bar_sync(bar, kWgThreads);
    if (p.t == 0) {
        SL_UNROLL
        for (int cc = 0; cc < D / 64; cc++)
            sl_tma_store_4d(map, region + cc * (R * 128), 64 * cc, head, row0, b);
        sl_tma_store_commit();
        sl_tma_store_wait_read<0>();
    }
    sl_named_bar_sync(bar, kWgThreads);
}

/* ---- persistent blocks (SLUICE_ATTN_SM90_PERSISTENT) ----------------------------------------- */

/* A block's query tiles (the forward and the dQ pass). Without PERSIST, one: tile blockIdx.x of
 * locate_qtile's order. With it, a block per SM walks tiles until none is left: its first is
 * blockIdx.x, each further one the next number of a counter in global memory (zeroed before
 * the launch, query_tile_grid) plus gridDim.x, so that the blocks take the tiles longest first,
 * each as it becomes free, as the hardware hands out the blocks of the plain grid. A number of
 * `total` or more ends the block. Which block computes a tile does not change its results. */
template <bool PERSIST> struct tile_feed {
    int *counter;
    int total;
    /* the producer's next tile */
    __device__ __forceinline__ int next() const {
        return PERSIST ? atomicAdd(counter, 1) + (int)gridDim.x : total;
    }
};

/* The producer passes each tile number (or the end) to the consumers through two slots of
 * shared memory, each with a "full" mbarrier (the producer's arrival) and an "empty" one (every
 * consumer thread's, once it has read the slot): the producer runs at most one tile ahead of
 * the slot the consumers read. `bars`: four mbarriers (full[2], empty[2]); `slot`: two ints. */
struct tile_slots {
    uint64_t *bars;
    int *slot;
    __device__ __forceinline__ void init(int consumer_threads) const {
        for (int s = 0; s < 2; s++) {
            sl_mbar_init(&bars[s], 1);
            sl_mbar_init(&bars[2 + s], consumer_threads);
        }
    }
    /* the producer's it-th tile is idx (the slot's use it / 2 waits for the use before it) */
    __device__ __forceinline__ void publish(int it, int idx) const {
        if (it >= 2) sl_mbar_wait(&bars[2 + (it & 1)], (uint32_t)((it / 2 - 1) & 1));
        slot[it & 1] = idx;
        sl_mbar_arrive(&bars[it & 1]);
    }
    /* the consumers' it-th tile */
    __device__ __forceinline__ int take(int it) const {
        sl_mbar_wait(&bars[it & 1], (uint32_t)((it / 2) & 1));
        const int idx = slot[it & 1];
        sl_mbar_arrive(&bars[2 + (it & 1)]);
        return idx;
    }
};

/* A query tile's place (the forward and the dQ pass): the tile, its sequence b and its key tiles
 * of BN, from jfirst (the one holding the tile's first document start) up to the causal
 * diagonal, ntiles of them. */
struct qspan {
    sl_attn_tc::qtile t;
    int b, jfirst, ntiles;
};
template <int BM, int BN> __device__ __forceinline__ qspan query_span(const args &a, int idx) {
    qspan s;
    s.t = sl_attn_tc::locate_qtile_at<BM>(a, idx, s.b);
    s.jfirst = first_key_tile<BN>(a.seg, s.t.tok0, s.t.i0);
    s.ntiles = (s.t.i0 + s.t.nq - s.jfirst + BN - 1) / BN;
    return s;
}

/* SLUICE_ATTN_SM90_PERSISTENT: which of the query-tile kernels run as persistent blocks: unset,
 * "" or "0" none (the default until a GPU has measured them, docs/attention.md, "The query-tile
 * kernels' blocks kept resident"); "1" the forward and the dQ pass; "fwd" or "dq" that one. A bad
 * value stops the run with a message naming the variable. Read at every launch. */
enum : int { kPersistFwd = 1, kPersistDq = 2 };
inline int persistent_kernels(void) {
    static const char *const values[] = {"0", "1", "fwd", "dq"};
    static const int masks[] = {0, kPersistFwd | kPersistDq, kPersistFwd, kPersistDq};
    const int i = sl_env_choice("SLUICE_ATTN_SM90_PERSISTENT", values, 4);
    return i < 0 ? 0 : masks[i];
}

/* The grid of a query-tile kernel with `tiles` tiles: all of them, or with `persistent` one
 * block per SM (one block fills an SM) and *counter, the tiles' counter, zeroed on the stream
 * (scratch slot 5, which only these launches use). Tile numbers are ints. */
inline unsigned query_tile_grid(void *ctx, int64_t tiles, bool persistent, int **counter,
                                cudaStream_t stream, const char *op) {
    SL_CHECK(tiles <= 0x7fffffff - 1024, "%s: %lld query tiles exceed the grid limit", op,
             (long long)tiles);
    *counter = nullptr;
    if (!persistent) return (unsigned)tiles;
    const int sms = sl_cuda_props(ctx)->multiProcessorCount;
    *counter = (int *)sl_cuda_scratch(ctx, 5, sizeof(int));
    sl_cuda_check(cudaMemsetAsync(*counter, 0, sizeof(int), stream), op, "cudaMemsetAsync");
    return (unsigned)(tiles < sms ? tiles : sms);
}

/* ---- host: tensor maps ------------------------------------------------------------------------
 */

/* A tensor map over a [batch, seq, heads, D] bf16 tensor (q, o, y, dO, dq: heads = H; k, v:
 * heads = KV) in tiles of `rows` tokens x 64 columns of one head: dimensions {D, heads, seq,
 * batch} (innermost first), box {64, 1, rows, 1}, 128B swizzle. The sequence is a dimension of
 * its own, so a tile sticking out of a sequence reads zeros (and a store is clipped) instead of
 * reaching into the next sequence. */
inline CUtensorMap head_map(const sl_bf16 *p, const args &a, int heads, int d, int rows,
                            const char *op) {
    SL_CHECK(((uintptr_t)p & 15) == 0, "%s: the Hopper kernel needs 16-byte aligned tensors", op);
    CUtensorMap m;
    const cuuint64_t dims[4] = {(cuuint64_t)d, (cuuint64_t)heads, (cuuint64_t)a.seq,
                                (cuuint64_t)a.batch};
    const cuuint64_t row = (cuuint64_t)heads * d * sizeof(sl_bf16);
    const cuuint64_t strides[3] = {(cuuint64_t)d * sizeof(sl_bf16), row, row * a.seq};
    const cuuint32_t box[4] = {64, 1, (cuuint32_t)rows, 1};
    const CUresult r = sl_tensor_map_tiled(&m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, p, dims,
                                           strides, box, SL_SWIZZLE_128B);
    SL_CHECK(r == CUDA_SUCCESS,
             "%s: cuTensorMapEncodeTiled failed (%d) for a [%d, %d, %d, %d] tensor", op, (int)r,
             a.batch, a.seq, heads, d);
    return m;
}

/* A switch of a kernel's rows at head dim 64 (SLUICE_ATTN_SM90_FWD_BM, _BWD_BM): the rows
 * values[0] or values[1] name, `dflt` for unset, "" or values[2] ("auto"); `fixed` at other
 * head dims. A bad value stops the run with a message naming the variable (sl_env_choice). */
inline int d64_rows(const char *var, const char *const (&values)[3], int d, int fixed, int dflt) {
    if (d != 64) return fixed;
    const int i = sl_env_choice(var, values, 3);
    return i < 0 || i == 2 ? dflt : atoi(values[i]);
}

/* Opts kernel K in to `bytes` of dynamic shared memory (once per process). */

/* The deterministic dQ pass (gated_attn_sm90_dq.cu) for head dim d, after the prep pass. */
void launch_dq(void *ctx, const args &a, int d, cudaStream_t stream);
/* The dK/dV pass's GQA group split (gated_attn_sm90_split.cu): the chunks of the group for its
 * tiles of bn keys and bm queries on `sms` SMs (a divisor of grp; SLUICE_ATTN_SM90_HSPLIT
 * forces one), the bytes of its fp32 partials at split hsplit, and the reduce of those
 * partials into a.dk and a.dv. */
int choose_hsplit(const args &a, int d, int bn, int bm, int sms);
size_t split_bytes(const args &a, int d, int hsplit);
void launch_dkdv_reduce(const args &a, int d, const float *part, int hsplit, cudaStream_t stream);

} // namespace sl_attn_sm90

#endif
