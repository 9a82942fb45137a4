/*
 * moe/permute.cu - routing slots to expert order and back on the GPU: the sort, the gathers and
 * the scatter-adds (the weighted combine: moe/permute_combine.cu; CPU twin and semantics of
 * both: moe/permute_cpu.c).
 *
 * The stable counting sort (moe_sort, and the radix passes of the deterministic scatter-add)
 * is three kernels, none of which relies on the order of atomics:
 *   1. sort_hist: the keys are cut into tiles of `tile` consecutive items, one block each, and
 *      each warp of the block owns a contiguous part of the tile. A warp walks its part 32
 *      items at a time; the lanes holding the same bucket find each other with one ballot per
 *      bit of the bucket (a portable match_any), and the lowest of them adds the group's size
 *      to the warp's own counter row in shared memory. The block's count per bucket (its
 *      warps' rows added) goes to hist[bucket][block].
 *   2. sort_scan: one block per bucket scans hist[bucket][*] (exclusive, in place) and writes
 *      the bucket's total.
 *   3. sort_scatter: each block scans the totals into bucket starts, recounts its tile per
 *      warp, turns the warp rows into each warp's first position per bucket (start + earlier
 *      blocks + earlier warps of this block), then walks its items again in order: an item's
 *      position is its warp's next position for its bucket plus the number of lanes before it
 *      in its match group. Items land in increasing index order within a bucket: stable.
 *
 * The row kernels move 16 bytes per access when the rows allow it (moe/moe_vec.cuh) and
 * accumulate in fp32 in a fixed order, so every result is deterministic; the one exception,
 * the atomic scatter-add, runs only when the backend is not deterministic.
 */
#include <limits.h>

#include "core/cuda_common.cuh"
#include "core/log.h"
#include "moe/kernels_cuda.h"
#include "moe/moe_vec.cuh"

namespace {

/* ---- the stable counting sort ----------------------------------------------------------- */

enum {
    SORT_MAX_WARPS = 8,
    SORT_SMEM_INTS = 12288,   /* 48 KiB of shared memory: counter rows and bucket starts */
    SORT_MIN_TILE = 512,      /* items per block at least (bounds the hist array) */
    SORT_MAX_TILE = 2048,     /* the tile of a large sort (8 steps of 8 warps) */
    SORT_TARGET_BLOCKS = 264, /* a smaller tile while the grid stays within this many blocks */
    SORT_THREADS_SCAN = 256,
};

/* How a key maps to a bucket: u = min((uint32)key, limit); bucket = (u >> shift) & mask; an
 * item whose bucket is >= nb is skipped (moe_sort's out-of-range expert ids). */
struct sort_key {
    uint32_t limit, mask;
    int shift, nb, nbits; /* nbits: bits that tell the buckets apart (ceil(log2 nb)) */
};

struct sort_plan {
    sort_key key;
    int warps, steps; /* warps per block, 32-item steps per warp */
    int64_t n, tile, nblk;
};

__device__ __forceinline__ uint32_t sort_bucket(int32_t key, const sort_key &k) {
    uint32_t u = (uint32_t)key;
    u = u < k.limit ? u : k.limit;
    return (u >> k.shift) & k.mask;
}

/* Lanes of the warp whose `b` equals this lane's (valid lanes only). Every lane must call it. */
__device__ __forceinline__ unsigned sort_match(uint32_t b, bool valid, int nbits) {
    unsigned m = __ballot_sync(0xffffffffu, valid);
    for (int i = 0; i < nbits; i++) {
        const bool bit = (b >> i) & 1u;
        const unsigned bal = __ballot_sync(0xffffffffu, bit);
        m &= bit ? bal : ~bal;
    }
    return m;
}

/* Exclusive prefix sum over the block (blockDim.x a multiple of 32); *total gets the block's
 * sum. `sh` is __shared__ int[32]. Contains two __syncthreads: every thread must call it. */
__device__ int sort_block_scan(int v, int *sh, int *total) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    int x = v;
    for (int o = 1; o < 32; o <<= 1) {
        const int y = __shfl_up_sync(0xffffffffu, x, o);
        if (lane >= o) x += y;
    }
    if (lane == 31) sh[warp] = x;
    __syncthreads();
    const int ws = lane < nw ? sh[lane] : 0;
    int wi = ws;
    for (int o = 1; o < 32; o <<= 1) {
        const int y = __shfl_up_sync(0xffffffffu, wi, o);
        if (lane >= o) wi += y;
    }
    *total = __shfl_sync(0xffffffffu, wi, 31);
    const int before = __shfl_sync(0xffffffffu, wi - ws, warp);
    __syncthreads(); /* sh is reused by the next call */
    return before + x - v;
}

/* The warp's count per bucket over its part of the tile, into cnt[warp][*] (zeroed by the
 * caller). The lowest lane of each match group adds the group; groups of one step have distinct
 * buckets, and __syncwarp orders the steps. */
__device__ void sort_count_warp(int *cnt, const int32_t *keys, const sort_plan &p) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t first = (int64_t)blockIdx.x * p.tile + (int64_t)warp * p.steps * 32;
    int *row = cnt + warp * p.key.nb;
    for (int st = 0; st < p.steps; st++) {
        const int64_t s = first + st * 32 + lane;
        const uint32_t b = s < p.n ? sort_bucket(keys[s], p.key) : 0u;
        const bool valid = s < p.n && b < (uint32_t)p.key.nb;
        const unsigned m = sort_match(b, valid, p.key.nbits);
        if (valid && lane == __ffs(m) - 1) row[b] += __popc(m);
        __syncwarp();
    }
}

__global__ void __launch_bounds__(SORT_MAX_WARPS * 32)
    sort_hist_kernel(int *__restrict__ hist, const int32_t *__restrict__ keys, sort_plan p) {
    SL_DYNAMIC_SMEM(int, cnt); /* [warps][nb] */
    const int nb = p.key.nb;
    for (int i = threadIdx.x; i < p.warps * nb; i += blockDim.x) cnt[i] = 0;
    __syncthreads();
    sort_count_warp(cnt, keys, p);
    __syncthreads();
    for (int b = threadIdx.x; b < nb; b += blockDim.x) {
        int t = 0;
        for (int w = 0; w < p.warps; w++) t += cnt[w * nb + b];
        hist[(int64_t)b * p.nblk + blockIdx.x] = t;
    }
}

/* One block per bucket: hist[b][*] becomes its exclusive prefix sum; totals[b] its sum. */
__global__ void __launch_bounds__(SORT_THREADS_SCAN)
    sort_scan_kernel(int *__restrict__ hist, int32_t *__restrict__ totals, int64_t nblk) {
    __shared__ int sh[32];
    int *row = hist + (int64_t)blockIdx.x * nblk;
    int carry = 0;
    for (int64_t base = 0; base < nblk; base += blockDim.x) {
        const int64_t i = base + threadIdx.x;
        const int v = i < nblk ? row[i] : 0;
        int tot;
        const int ex = sort_block_scan(v, sh, &tot);
        if (i < nblk) row[i] = carry + ex;
        carry += tot;
    }
    if (threadIdx.x == 0) totals[blockIdx.x] = carry;
}

enum { SORT_OUT_MOE, SORT_OUT_RADIX };

/* Where sort_scatter writes. SORT_OUT_MOE: a[pos] = item / k (the token of a slot), b[item] =
 * pos (-1 for a skipped item). SORT_OUT_RADIX: a[pos] = the clamped key, b[pos] = vals_in[item]
 * (or the item itself when vals_in is NULL). */
struct sort_out {
    int32_t *a, *b;
    const int32_t *vals_in;
    int k;
};

template <int MODE>
__global__ void __launch_bounds__(SORT_MAX_WARPS * 32)
    sort_scatter_kernel(const int32_t *__restrict__ keys, const int *__restrict__ hist,
                        const int32_t *__restrict__ totals, sort_plan p, sort_out out) {
    SL_DYNAMIC_SMEM(int, cnt); /* [warps][nb] counters, then [nb] bucket starts */
    __shared__ int sh[32];
    const int nb = p.key.nb, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int *start = cnt + p.warps * nb;
    /* bucket starts: exclusive scan of the totals */
    int carry = 0;
    for (int base = 0; base < nb; base += blockDim.x) {
        const int i = base + threadIdx.x;
        const int v = i < nb ? totals[i] : 0;
        int tot;
        const int ex = sort_block_scan(v, sh, &tot);
        if (i < nb) start[i] = carry + ex;
        carry += tot;
    }
    for (int i = threadIdx.x; i < p.warps * nb; i += blockDim.x) cnt[i] = 0;
    __syncthreads();
    sort_count_warp(cnt, keys, p);
    __syncthreads();
    /* each warp's first position per bucket */
    for (int b = threadIdx.x; b < nb; b += blockDim.x) {
        int run = start[b] + hist[(int64_t)b * p.nblk + blockIdx.x];
        for (int w = 0; w < p.warps; w++) {
            const int t = cnt[w * nb + b];
            cnt[w * nb + b] = run;
            run += t;
        }
    }
    __syncthreads();
    const int64_t first = (int64_t)blockIdx.x * p.tile + (int64_t)warp * p.steps * 32;
    int *row = cnt + warp * nb;
    const unsigned before = (1u << lane) - 1u;
    for (int st = 0; st < p.steps; st++) {
        const int64_t s = first + st * 32 + lane;
        const int32_t key = s < p.n ? keys[s] : 0;
        const uint32_t b = sort_bucket(key, p.key);
        const bool valid = s < p.n && b < (uint32_t)nb;
        const unsigned m = sort_match(b, valid, p.key.nbits);
        const int pos = valid ? row[b] + __popc(m & before) : -1;
        __syncwarp(); /* every lane has read its counter before the group's leader moves it */
        if (valid && lane == __ffs(m) - 1) row[b] += __popc(m);
        __syncwarp();
        if (MODE == SORT_OUT_MOE) {
            if (valid) out.a[pos] = (int32_t)s / out.k; /* s < 2^31 (make_plan) */
            if (s < p.n) out.b[s] = pos;
        } else if (valid) {
            const uint32_t u = (uint32_t)key < p.key.limit ? (uint32_t)key : p.key.limit;
            out.a[pos] = (int32_t)u;
            out.b[pos] = out.vals_in ? out.vals_in[s] : (int32_t)s;
        }
    }
}

/* ceil(log2(x)) for x >= 1: the bits that tell x values 0..x-1 apart. */
static int bits_for(uint32_t x) {
    int b = 0;
    while (b < 32 && ((x - 1u) >> b) != 0u) b++;
    return b;
}

static sort_plan make_plan(int64_t n, int nb, uint32_t limit, int shift, uint32_t mask,
                           const char *op) {
    SL_CHECK(nb >= 1 && nb <= SORT_SMEM_INTS / 2 - 1, "cuda %s: %d buckets (at most %d)", op, nb,
             SORT_SMEM_INTS / 2 - 1);
    SL_CHECK(n <= INT32_MAX, "cuda %s: %lld items overflow i32", op, (long long)n);
    sort_plan p;
    p.key.limit = limit;
    p.key.mask = mask;
    p.key.shift = shift;
    p.key.nb = nb;
    p.key.nbits = bits_for((uint32_t)nb);
    p.warps = SORT_SMEM_INTS / nb - 1;
    p.warps = p.warps < SORT_MAX_WARPS ? p.warps : SORT_MAX_WARPS;
    /* Steps (32 items each) per warp: a block's warps walk theirs one step at a time, each step
     * a dependent chain (the keys' load, a ballot per bucket bit, the counter's update), so few
     * steps in more blocks spread the sort over the SMs: a micro-batch's 32,768 routing slots
     * took 16 blocks of 8 steps per warp, now 64 of 2 (two per SM of an H100 or H200 at most,
     * SORT_TARGET_BLOCKS). Large sorts keep tiles of SORT_MAX_TILE. Which block holds an item
     * does not change where it lands: the sort is stable. */
    const int64_t lo = (SORT_MIN_TILE / (32 * p.warps)) > 2 ? SORT_MIN_TILE / (32 * p.warps) : 2;
    const int64_t hi = (SORT_MAX_TILE / (32 * p.warps)) > 8 ? SORT_MAX_TILE / (32 * p.warps) : 8;
    const int64_t per_block = (int64_t)SORT_TARGET_BLOCKS * 32 * p.warps;
    const int64_t want = (n + per_block - 1) / per_block;
    p.steps = (int)(want < lo ? lo : want > hi ? hi : want);
    p.n = n;
    p.tile = (int64_t)p.warps * p.steps * 32;
    p.nblk = (n + p.tile - 1) / p.tile;
    p.nblk = p.nblk > 0 ? p.nblk : 1;
    return p;
}

/* One stable counting sort pass: hist (nb * nblk ints) and totals (nb) are device buffers. */
template <int MODE>
static void sort_pass(cudaStream_t st, const sort_plan &p, const int32_t *keys, int *hist,
                      int32_t *totals, sort_out out, const char *op) {
    const unsigned threads = (unsigned)p.warps * 32;
    const size_t smem_hist = sizeof(int) * (size_t)p.warps * (size_t)p.key.nb;
    SL_LAUNCH(sort_hist_kernel, (unsigned)p.nblk, threads, smem_hist, st, hist, keys, p);
    SL_CUDA_LAUNCHED(op);
    SL_LAUNCH(sort_scan_kernel, (unsigned)p.key.nb, SORT_THREADS_SCAN, 0, st, hist, totals, p.nblk);
    SL_CUDA_LAUNCHED(op);
    SL_LAUNCH(sort_scatter_kernel<MODE>, (unsigned)p.nblk, threads,
              smem_hist + sizeof(int) * (size_t)p.key.nb, st, keys, hist, totals, p, out);
    SL_CUDA_LAUNCHED(op);
}

} // namespace

extern "C" void sl_cuda_moe_sort(void *ctx, sl_tensor *counts, sl_tensor *sorted_token,
                                 sl_tensor *slot_pos, const sl_tensor *topk_idx) {
    const int64_t e = counts->numel, slots = topk_idx->numel;
    if (e == 0) return;
    /* Expert ids are the buckets; ids outside [0, E) land in no bucket (slot_pos -1) instead
     * of writing out of bounds. */
    const sort_plan p = make_plan(slots, (int)e, UINT32_MAX, 0, UINT32_MAX, "moe_sort");
    int *hist = (int *)sl_cuda_scratch(ctx, 0, sizeof(int) * (size_t)(p.nblk * e));
    sort_out out = {sl_ptr<int32_t>(sorted_token), sl_ptr<int32_t>(slot_pos), 0,
                    (int)(slots > 0 ? sl_last_dim(topk_idx) : 1)};
    sort_pass<SORT_OUT_MOE>(sl_cuda_stream(ctx), p, sl_ptr<int32_t>(topk_idx), hist,
                            sl_ptr<int32_t>(counts), out, "moe_sort");
}

namespace {

/* acc += counts, freq = scale * counts: E is small (the experts), one block strides over it */
__global__ void __launch_bounds__(256)
    moe_counts_kernel(int32_t *acc, float *freq, const int32_t *counts, int64_t e, float scale) {
    for (int64_t i = threadIdx.x; i < e; i += blockDim.x) {
        const int32_t c = counts[i];
        if (acc) acc[i] += c;
        if (freq) freq[i] = scale * (float)c;
    }
}

} // namespace

extern "C" void sl_cuda_moe_counts(void *ctx, sl_tensor *acc, sl_tensor *freq,
                                   const sl_tensor *counts, float scale) {
    const int64_t e = counts->numel;
    if (e == 0) return;
    SL_LAUNCH(moe_counts_kernel, 1, 256, 0, sl_cuda_stream(ctx),
              acc ? sl_ptr<int32_t>(acc) : nullptr, freq ? sl_ptr<float>(freq) : nullptr,
              sl_ptr<int32_t>(counts), e, scale);
    SL_CUDA_LAUNCHED("moe_counts");
}

namespace {

/* ---- gather ---------------------------------------------------------------------------- */

/* dst row i = src row idx[i], a bit copy in units U (the widest that divides the rows and the
 * bases' alignment): one warp per row. An index outside [0, rows) leaves its row unwritten
 * rather than read out of bounds. */
template <typename U>
__global__ void SL_MOE_ROW_BOUNDS gather_kernel(U *__restrict__ dst, const U *__restrict__ src,
                                                const int32_t *__restrict__ idx, int64_t m,
                                                int64_t upr, int64_t rows) {
    const int lane = threadIdx.x & 31;
    SL_MOE_FOR_WARP_ROWS(i, m) {
        const int64_t r = idx[i];
        if (r < 0 || r >= rows) continue;
        const U *s = src + r * upr;
        U *d = dst + i * upr;
        SL_CHECK_ALIGNED(s, sizeof(U));
        SL_CHECK_ALIGNED(d, sizeof(U));
        for (int64_t j = lane; j < upr; j += 32) d[j] = s[j];
    }
}

template <typename U>
static void gather_launch(cudaStream_t st, void *dst, const void *src, const int32_t *idx,
                          int64_t m, int64_t row_bytes, int64_t rows) {
    SL_LAUNCH(gather_kernel<U>, sl_moe_row_blocks(m), SL_MOE_ROW_WARPS * 32, 0, st, (U *)dst,
              (const U *)src, idx, m, row_bytes / (int64_t)sizeof(U), rows);
    SL_CUDA_LAUNCHED("gather_rows");
}

} // namespace

extern "C" void sl_cuda_gather_rows(void *ctx, sl_tensor *dst, const sl_tensor *src,
                                    const sl_tensor *idx) {
    const int64_t m = idx->numel, c = sl_last_dim(dst);
    if (m == 0 || c == 0) return;
    const int64_t rb = c * (int64_t)(dst->dtype == SL_BF16 ? 2 : 4);
    const uintptr_t al = (uintptr_t)dst->data | (uintptr_t)src->data | (uintptr_t)rb;
    cudaStream_t st = sl_cuda_stream(ctx);
    const int32_t *pi = sl_ptr<int32_t>(idx);
    const int64_t rows = sl_rows(src);
    if (al % 16 == 0)
        gather_launch<uint4>(st, dst->data, src->data, pi, m, rb, rows);
    else if (al % 8 == 0)
        gather_launch<uint2>(st, dst->data, src->data, pi, m, rb, rows);
    else if (al % 4 == 0)
        gather_launch<uint32_t>(st, dst->data, src->data, pi, m, rb, rows);
    else
        gather_launch<uint16_t>(st, dst->data, src->data, pi, m, rb, rows);
}

namespace {

/* ---- scatter-add ------------------------------------------------------------------------ */

/* Deterministic: `keys` are idx sorted stably (ties in increasing i) and `order` the matching
 * source rows. One warp per destination row r finds its sources [lo, hi) by binary search and
 * adds them in that order onto dst[r] in fp32, storing once: the same order as the serial
 * loop, one rounding for bf16. */
__device__ __forceinline__ int64_t lower_bound_i32(const int32_t *a, int64_t n, int32_t v) {
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        const int64_t mid = (lo + hi) >> 1;
        if (a[mid] < v)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

template <typename T, int V>
__global__ void SL_MOE_ROW_BOUNDS scatter_rows_kernel(T *__restrict__ dst,
                                                      const T *__restrict__ src,
                                                      const int32_t *__restrict__ keys,
                                                      const int32_t *__restrict__ order, int64_t m,
                                                      int64_t rows, int64_t c) {
    const int lane = threadIdx.x & 31;
    SL_MOE_FOR_WARP_ROWS(r, rows) {
        const int64_t lo = lower_bound_i32(keys, m, (int32_t)r);
        const int64_t hi = lower_bound_i32(keys + lo, m - lo, (int32_t)(r + 1)) + lo;
        if (lo == hi) continue;
        T *d = dst + r * c;
        for (int64_t c0 = (int64_t)lane * V; c0 < c; c0 += 32 * V) {
            float acc[V], v[V];
            sl_moe_vload<T, V>(acc, d + c0);
            for (int64_t q = lo; q < hi; q++) {
                sl_moe_vload<T, V>(v, src + (int64_t)order[q] * c + c0);
#pragma unroll
                for (int i = 0; i < V; i++) acc[i] += v[i];
            }
            sl_moe_vstore<T, V>(d + c0, acc);
        }
    }
}

/* Not deterministic (the order of the atomic adds varies): fp32 only, and only when the backend
 * is not deterministic. One warp per source row. */
__global__ void SL_MOE_ROW_BOUNDS scatter_atomic_kernel(float *__restrict__ dst,
                                                        const float *__restrict__ src,
                                                        const int32_t *__restrict__ idx, int64_t m,
                                                        int64_t rows, int64_t c) {
    const int lane = threadIdx.x & 31;
    SL_MOE_FOR_WARP_ROWS(i, m) {
        const int64_t r = idx[i];
        if (r < 0 || r >= rows) continue;
        for (int64_t j = lane; j < c; j += 32) atomicAdd(dst + r * c + j, src[i * c + j]);
    }
}

/* Sources whose loads a lane issues before it adds the first (as moe_combine's kRowBatch,
 * moe/permute_combine.cu): a row's k = 8 at once, one round trip per 32 x V columns. */
constexpr int kGatherBatch = 8;

/* dst[r] (= 0 first with beta 0, never read then) += src[q] over row r's valid positions q in
 * increasing order (sl_op_gather_add_rows):
 * one warp per destination row. Lane j < k holds position j (invalid ones as UINT32_MAX), its rank
 * among the row's positions (ties, only between invalid ones, by lane) comes from k shuffles, and
 * lane t ends up holding the position of rank t; the row is then summed as scatter_rows_kernel
 * sums it (fp32 from dst, the sources in increasing order): the same bits, without the sort. */
template <typename T, int V>
__global__ void SL_MOE_ROW_BOUNDS gather_add_kernel(T *__restrict__ dst, const T *__restrict__ src,
                                                    const int32_t *__restrict__ pos, int64_t rows,
                                                    int64_t m, int64_t c, int k, bool add) {
    const int lane = threadIdx.x & 31;
    const unsigned full = 0xffffffffu;
    SL_MOE_FOR_WARP_ROWS(r, rows) {
        uint32_t p = 0xffffffffu;
        if (lane < k) {
            const int32_t v = pos[r * k + lane];
            if (v >= 0 && v < m) p = (uint32_t)v;
        }
        int rank = 0;
        for (int i = 0; i < k; i++) {
            const uint32_t q = __shfl_sync(full, p, i);
            rank += q < p || (q == p && i < lane);
        }
        uint32_t mine = 0xffffffffu; /* lane t: the position of rank t */
        for (int t = 0; t < k; t++) {
            const unsigned owner = __ballot_sync(full, lane < k && rank == t);
            const uint32_t q = __shfl_sync(full, p, __ffs((int)owner) - 1);
            if (lane == t) mine = q;
        }
        T *d = dst + r * c;
        const int64_t steps = (c + 32 * V - 1) / (32 * V);
        for (int64_t it = 0; it < steps; it++) {
            /* every lane runs the shuffles; a lane past the row's end only passes them on */
            const int64_t c0 = it * 32 * V + (int64_t)lane * V;
            const bool in = c0 < c;
            float acc[V] = {};
            if (in && add) sl_moe_vload<T, V>(acc, d + c0);
            /* kGatherBatch sources' loads in flight before the first is added (the invalid
             * positions come last, so a batch's valid ones are its first) */
            for (int t0 = 0; t0 < k; t0 += kGatherBatch) {
                sl_raw<T, V> r[kGatherBatch];
                unsigned valid = 0; /* bit u: r[u] holds a source (a mask, not an array of
                                     * positions: 8 registers fewer, which spilled at 64) */
#pragma unroll
                for (int u = 0; u < kGatherBatch; u++) {
                    const uint32_t q = t0 + u < k ? __shfl_sync(full, mine, t0 + u) : 0xffffffffu;
                    if (in && q != 0xffffffffu) {
                        r[u].load(src + (int64_t)q * c + c0);
                        valid |= 1u << u;
                    }
                }
#pragma unroll
                for (int u = 0; u < kGatherBatch; u++)
                    if (valid >> u & 1u) {
#pragma unroll
                        for (int i = 0; i < V; i++) acc[i] += r[u].at(i);
                    }
            }
            if (in) sl_moe_vstore<T, V>(d + c0, acc);
        }
    }
}

static size_t align256(size_t b) {
    return (b + 255) & ~(size_t)255;
}

template <typename T>
static void scatter_sorted_launch(cudaStream_t st, sl_tensor *dst, const sl_tensor *src,
                                  const int32_t *keys, const int32_t *order, int64_t m) {
    const int64_t rows = sl_rows(dst), c = sl_last_dim(dst);
    SL_MOE_ROW_LAUNCH(scatter_rows_kernel, T, sl_moe_rows_vec16<T>(c, dst->data, src->data),
                      "scatter_add_rows", st, rows, sl_ptr<T>(dst), sl_ptr<T>(src), keys, order, m,
                      rows, c);
}

} // namespace

extern "C" void sl_cuda_gather_add_rows(void *ctx, sl_tensor *dst, const sl_tensor *src,
                                        const sl_tensor *pos, int k, float beta) {
    const int64_t rows = sl_rows(dst), c = sl_last_dim(dst), m = sl_rows(src);
    if (rows == 0 || c == 0) return;
    SL_DISPATCH_FLOAT(dst->dtype, T, {
        SL_MOE_ROW_LAUNCH(gather_add_kernel, T, sl_moe_rows_vec16<T>(c, dst->data, src->data),
                          "gather_add_rows", sl_cuda_stream(ctx), rows, sl_ptr<T>(dst),
                          sl_ptr<T>(src), sl_ptr<int32_t>(pos), rows, m, c, k, beta != 0.0f);
    });
}

extern "C" void sl_cuda_scatter_add_rows(void *ctx, sl_tensor *dst, const sl_tensor *src,
                                         const sl_tensor *idx) {
    const int64_t m = idx->numel, c = sl_last_dim(dst), rows = sl_rows(dst);
    if (m == 0 || c == 0 || rows == 0) return;
    cudaStream_t st = sl_cuda_stream(ctx);
    const int32_t *pi = sl_ptr<int32_t>(idx);
    if (dst->dtype == SL_F32 && !sl_cuda_deterministic(ctx)) {
        SL_LAUNCH(scatter_atomic_kernel, sl_moe_row_blocks(m), SL_MOE_ROW_WARPS * 32, 0, st,
                  sl_ptr<float>(dst), sl_ptr<float>(src), pi, m, rows, c);
        SL_CUDA_LAUNCHED("scatter_add_rows");
        return;
    }
    /* Invert idx: an LSD radix sort of (idx[i], i) by idx, made of stable counting-sort passes
     * of at most 10 bits. Indices outside [0, rows) are clamped to `rows`, a key no row looks
     * up. */
    const uint32_t limit = rows < (int64_t)INT32_MAX ? (uint32_t)rows : (uint32_t)INT32_MAX;
    const int bits = bits_for(limit + 1);
    const int passes = (bits + 9) / 10, pb = (bits + passes - 1) / passes;
    size_t hist_ints = 0;
    for (int ps = 0; ps < passes; ps++) {
        const int nbits = bits - ps * pb < pb ? bits - ps * pb : pb;
        const sort_plan p =
            make_plan(m, 1 << nbits, limit, ps * pb, (1u << nbits) - 1u, "scatter_add_rows");
        const size_t h = (size_t)p.nblk * (size_t)p.key.nb;
        hist_ints = h > hist_ints ? h : hist_ints;
    }
    const size_t arr = align256(sizeof(int32_t) * (size_t)m);
    const size_t hb = align256(sizeof(int) * hist_ints), tb = align256(sizeof(int32_t) << pb);
    char *base = (char *)sl_cuda_scratch(ctx, 0, 4 * arr + hb + tb);
    int32_t *kbuf[2] = {(int32_t *)base, (int32_t *)(base + arr)};
    int32_t *vbuf[2] = {(int32_t *)(base + 2 * arr), (int32_t *)(base + 3 * arr)};
    int *hist = (int *)(base + 4 * arr);
    int32_t *totals = (int32_t *)(base + 4 * arr + hb);
    const int32_t *keys = pi, *vals = NULL;
    for (int ps = 0; ps < passes; ps++) {
        const int nbits = bits - ps * pb < pb ? bits - ps * pb : pb;
        const sort_plan p =
            make_plan(m, 1 << nbits, limit, ps * pb, (1u << nbits) - 1u, "scatter_add_rows");
        const sort_out out = {kbuf[ps & 1], vbuf[ps & 1], vals, 0};
        sort_pass<SORT_OUT_RADIX>(st, p, keys, hist, totals, out, "scatter_add_rows");
        keys = kbuf[ps & 1];
        vals = vbuf[ps & 1];
    }
    SL_DISPATCH_FLOAT(dst->dtype, T, scatter_sorted_launch<T>(st, dst, src, keys, vals, m));
}
