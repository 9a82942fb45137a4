/*
 * core/embedding.cu - token embedding lookup and its gradient on the GPU (CPU twin:
 * core/embedding_cpu.c; semantics: core/ops.h). out, table and dout share the dtype T; dtable
 * is fp32 or bf16. A token id outside [0, V) cannot stop the run from a kernel: the forward
 * writes a row of NaN for it (the loss shows it at once) and the backward drops its row.
 *
 * Forward: one warp per token copies the table row (16-byte words when rows and pointers
 * allow, else elements): a pure copy, exact in any dtype.
 *
 * Backward, deterministic (the default; no float atomics, a fixed summation order):
 *   1. A stable LSD radix sort of the token positions by id (8-bit digits, as many passes as
 *      the vocabulary needs: 3 for 151,936), each pass three kernels: per-tile digit counts,
 *      one exclusive scan of the counts (digit-major, tile-minor), and a scatter in which each
 *      tile ranks its tokens per digit in token order (warp ballots, then warp order), so equal
 *      ids keep their token order. Out-of-range ids sort as the key V, after every valid id.
 *   2. k_emb_bwd_runs: the sorted ids form one run per distinct id; the warp at a run's first
 *      position adds, for one 256-column slice of the row (blockIdx.y), the run's dout rows to
 *      dtable[id] in token order, starting from dtable's value - the CPU's order exactly.
 *      Rows are loaded 4 at a time before they are added, so a frequent id's long run keeps
 *      several loads in flight.
 * Scratch: keys and positions twice (ping-pong) and the count table, for N tokens.
 *
 * Non-deterministic mode (backend.deterministic = false) with an fp32 dtable: one thread per
 * element of dout does an atomicAdd into dtable, one pass and no sort.
 */
#include "core/cuda_pack.cuh"
#include "core/kernels_cuda.h"
#include "core/log.h"

namespace {

constexpr int kWarps = 8, kThreads = 32 * kWarps;
constexpr int kDigits = 256, kDigitBits = 8;
constexpr int kRounds = 4, kTile = kRounds * kThreads; /* tokens per radix block */

/* ---- forward ---- */

/* Warp w of block b copies the row of token 8b + w, in units U (uint4 or T). */
template <typename T, typename U>
__global__ void __launch_bounds__(kThreads)
    k_emb_fwd(T *out, const int32_t *ids, const T *table, int64_t n, int64_t v, int c) {
    const int lane = threadIdx.x & 31;
    const int64_t tok = (int64_t)blockIdx.x * kWarps + (threadIdx.x >> 5);
    if (tok >= n) return;
    const int32_t id = ids[tok];
    const int units = (int)(c * sizeof(T) / sizeof(U));
    if (id < 0 || id >= v) {
        for (int j = lane; j < c; j += 32) out[tok * c + j] = sl_st<T>(NAN);
        return;
    }
    const U *src = reinterpret_cast<const U *>(table + id * (int64_t)c);
    U *dst = reinterpret_cast<U *>(out + tok * c);
    SL_CHECK_ALIGNED(src, sizeof(U));
    SL_CHECK_ALIGNED(dst, sizeof(U));
    for (int j = lane; j < units; j += 32) dst[j] = src[j];
}

/* ---- backward: radix sort of (id, position) by id ---- */

/* The key of token i for the first pass: its id, or `vocab` when out of range. */
__device__ __forceinline__ int32_t emb_key(int32_t id, int64_t vocab) {
    return id >= 0 && id < vocab ? id : (int32_t)vocab;
}

/* hist[d * nblocks + b] = tokens of tile b whose key has digit d at `shift`. Pass 0 reads the
 * ids (vocab > 0 maps them to keys); later passes the previous pass's keys (vocab = 0). */
__global__ void __launch_bounds__(kThreads)
    k_radix_hist(int32_t *hist, const int32_t *keys, int64_t n, int shift, int nblocks,
                 int64_t vocab) {
    __shared__ int32_t cnt[kDigits];
    cnt[threadIdx.x] = 0;
    __syncthreads();
    for (int r = 0; r < kRounds; r++) {
        const int64_t i = (int64_t)blockIdx.x * kTile + r * kThreads + threadIdx.x;
        if (i < n) {
            const int32_t key = vocab > 0 ? emb_key(keys[i], vocab) : keys[i];
            atomicAdd(&cnt[(key >> shift) & (kDigits - 1)], 1); /* integer: order-free */
        }
    }
    __syncthreads();
    hist[(int64_t)threadIdx.x * nblocks + blockIdx.x] = cnt[threadIdx.x];
}

/* In-place exclusive prefix sum of a[0, len), one block of 1024 threads: thread t sums its
 * contiguous chunk, the block scans the chunk sums (Hillis-Steele in shared memory), and each
 * thread rewrites its chunk from its offset. */
constexpr int kScanThreads = 1024;
__global__ void __launch_bounds__(kScanThreads) k_scan_excl(int32_t *a, int64_t len) {
    __shared__ int32_t s[kScanThreads];
    const int t = threadIdx.x;
    const int64_t chunk = (len + kScanThreads - 1) / kScanThreads;
    const int64_t lo = t * chunk, hi = lo + chunk < len ? lo + chunk : len;
    int32_t sum = 0;
    for (int64_t i = lo; i < hi; i++) sum += a[i];
    s[t] = sum;
    __syncthreads();
    for (int off = 1; off < kScanThreads; off <<= 1) {
        const int32_t add = t >= off ? s[t - off] : 0;
        __syncthreads();
        s[t] += add;
        __syncthreads();
    }
    int32_t run = s[t] - sum;
    for (int64_t i = lo; i < hi; i++) {
        const int32_t x = a[i];
        a[i] = run;
        run += x;
    }
}

/* Stable scatter of tile b by the digit at `shift`: the tile's tokens go in rounds of 256 in
 * token order; within a round, a token's rank among equal digits is its rank in its warp
 * (ballots over the 8 digit bits) plus the counts of the warps before it; the block keeps a
 * running position per digit (base), starting at the scanned offsets. Pass 0 (vals_in = NULL)
 * takes keys from the ids and positions from the token index. */
__global__ void __launch_bounds__(kThreads)
    k_radix_scatter(int32_t *keys_out, int32_t *vals_out, const int32_t *keys_in,
                    const int32_t *vals_in, const int32_t *offs, int64_t n, int shift, int nblocks,
                    int64_t vocab) {
    __shared__ int32_t base[kDigits];
    __shared__ int32_t wcnt[kWarps][kDigits];
    const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
    base[t] = offs[(int64_t)t * nblocks + blockIdx.x]; /* thread t owns digit t's counter */
    for (int r = 0; r < kRounds; r++) {
        for (int k = t; k < kWarps * kDigits; k += kThreads) wcnt[k / kDigits][k % kDigits] = 0;
        __syncthreads();
        const int64_t i = (int64_t)blockIdx.x * kTile + r * kThreads + t;
        const bool valid = i < n;
        int32_t key = 0, val = 0;
        if (valid) {
            key = vocab > 0 ? emb_key(keys_in[i], vocab) : keys_in[i];
            val = vals_in ? vals_in[i] : (int32_t)i;
        }
        const int digit = (key >> shift) & (kDigits - 1);
        unsigned peers = __ballot_sync(0xffffffffu, valid); /* valid lanes with my digit */
        SL_UNROLL
        for (int bit = 0; bit < kDigitBits; bit++) {
            const bool set = (digit >> bit) & 1;
            const unsigned b = __ballot_sync(0xffffffffu, set);
            peers &= set ? b : ~b;
        }
        const int rank = __popc(peers & ((1u << lane) - 1u));
        if (valid && rank == 0) wcnt[warp][digit] = __popc(peers);
        __syncthreads();
        int32_t run = base[t]; /* digit t: counts of warps 0..7 -> their first positions */
        for (int w = 0; w < kWarps; w++) {
            const int32_t c = wcnt[w][t];
            wcnt[w][t] = run;
            run += c;
        }
        base[t] = run;
        __syncthreads();
        if (valid) {
            const int32_t dest = wcnt[warp][digit] + rank;
            keys_out[dest] = key;
            vals_out[dest] = val;
        }
        __syncthreads(); /* wcnt is cleared for the next round */
    }
}

/* ---- backward: one warp per (run of equal ids, 32 VEC-column slice) ---- */

template <typename TD, typename TT, int VEC>
__global__ void __launch_bounds__(kThreads)
    k_emb_bwd_runs(TT *dtable, const TD *dout, const int32_t *keys, const int32_t *pos, int64_t n,
                   int c, int64_t vocab) {
    constexpr int kAhead = 4; /* rows loaded before they are added */
    const int lane = threadIdx.x & 31;
    const int64_t i = (int64_t)blockIdx.x * kWarps + (threadIdx.x >> 5);
    if (i >= n) return; /* whole warps exit; no barriers below */
    const int32_t key = keys[i];
    if ((i > 0 && keys[i - 1] == key) || key >= vocab) return; /* not a run's start, or dropped */
    /* The run's end: lanes test 32 positions at a time; equal keys are a prefix of them. */
    int64_t end = i;
    for (;;) {
        const int64_t k = end + lane;
        const unsigned same = __ballot_sync(0xffffffffu, k < n && keys[k] == key);
        if (same != 0xffffffffu) {
            end += __ffs(~same) - 1;
            break;
        }
        end += 32;
    }
    const int col = (blockIdx.y * 32 + lane) * VEC;
    if (col >= c) return;
    TT *trow = dtable + (int64_t)key * c + col;
    float acc[VEC];
    sl_ldv<VEC>(trow, acc);
    for (int64_t j = i; j < end; j += kAhead) {
        float rows[kAhead][VEC] = {}; /* rows past the run stay unused */
        SL_UNROLL
        for (int u = 0; u < kAhead; u++)
            if (j + u < end) sl_ldv<VEC>(dout + (int64_t)pos[j + u] * c + col, rows[u]);
        SL_UNROLL
        for (int u = 0; u < kAhead; u++) {
            if (j + u < end) {
                SL_UNROLL
                for (int e = 0; e < VEC; e++) acc[e] += rows[u][e];
            }
        }
    }
    sl_stv<VEC>(trow, acc);
}

/* Non-deterministic: dtable[ids[i], j] += dout[i, j] by atomicAdd, one thread per element. */
template <typename TD>
__global__ void __launch_bounds__(kThreads)
    k_emb_bwd_atomic(float *dtable, const TD *dout, const int32_t *ids, int64_t n, int c,
                     int64_t vocab) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n * c; e += stride) {
        const int64_t tok = e / c;
        const int32_t id = ids[tok];
        if (id >= 0 && id < vocab)
            atomicAdd(&dtable[(int64_t)id * c + (e - tok * c)], sl_ld(dout[e]));
    }
}

/* Sorts positions by id: on return *keys / *pos point at the sorted arrays (in scratch). */
void emb_sort(void *ctx, const int32_t *ids, int64_t n, int64_t vocab, const int32_t **keys,
              const int32_t **pos) {
    const char *op = "embedding_bwd";
    cudaStream_t st = sl_cuda_stream(ctx);
    const int nblocks = (int)((n + kTile - 1) / kTile);
    int bits = 1; /* keys lie in [0, vocab]: vocab itself marks out-of-range ids */
    while (bits < 31 && (vocab >> bits) != 0) bits++;
    const int passes = (bits + kDigitBits - 1) / kDigitBits;
    int32_t *kbuf = (int32_t *)sl_cuda_scratch(ctx, 0, sizeof(int32_t) * 2 * (size_t)n);
    int32_t *vbuf = (int32_t *)sl_cuda_scratch(ctx, 1, sizeof(int32_t) * 2 * (size_t)n);
    int32_t *hist = (int32_t *)sl_cuda_scratch(ctx, 2, sizeof(int32_t) * kDigits * (size_t)nblocks);
    const int32_t *kin = ids, *vin = NULL;
    for (int pass = 0; pass < passes; pass++) {
        const int shift = pass * kDigitBits;
        const int64_t map = pass == 0 ? vocab : 0;
        int32_t *kout = kbuf + (pass & 1) * n, *vout = vbuf + (pass & 1) * n;
        SL_LAUNCH(k_radix_hist, (unsigned)nblocks, kThreads, 0, st, hist, kin, n, shift, nblocks,
                  map);
        SL_CUDA_LAUNCHED(op);
        const int64_t len = (int64_t)kDigits * nblocks;
        SL_LAUNCH(k_scan_excl, 1, kScanThreads, 0, st, hist, len);
        SL_CUDA_LAUNCHED(op);
        const int32_t *offs = hist;
        SL_LAUNCH(k_radix_scatter, (unsigned)nblocks, kThreads, 0, st, kout, vout, kin, vin, offs,
                  n, shift, nblocks, map);
        SL_CUDA_LAUNCHED(op);
        kin = kout, vin = vout;
    }
    *keys = kin, *pos = vin;
}

template <typename TD, typename TT, int VEC>
void runs_launch(void *ctx, TT *dtable, const TD *dout, const int32_t *keys, const int32_t *pos,
                 int64_t n, int c, int64_t vocab) {
    const unsigned slices = sl_blocks(c, 32 * VEC);
    SL_CHECK(slices <= 65535, "embedding_bwd: rows of %d elements", c);
    auto *const runs_kernel = k_emb_bwd_runs<TD, TT, VEC>;
    SL_LAUNCH(runs_kernel, dim3(sl_blocks(n, kWarps), slices), kThreads, 0, sl_cuda_stream(ctx),
              dtable, dout, keys, pos, n, c, vocab);
    SL_CUDA_LAUNCHED("embedding_bwd");
}

} // namespace

extern "C" void sl_cuda_embedding_fwd(void *ctx, sl_tensor *out, const sl_tensor *ids,
                                      const sl_tensor *table) {
    const int64_t n = ids->numel, c64 = sl_last_dim(table), v = sl_rows(table);
    SL_CHECK(c64 <= INT32_MAX / 16, "embedding_fwd: rows of %lld elements", (long long)c64);
    if (n == 0) return;
    const int c = (int)c64;
    const int32_t *pid = sl_ptr<int32_t>(ids);
    SL_DISPATCH_FLOAT(table->dtype, T, {
        T *po = sl_ptr<T>(out);
        const T *pt = sl_ptr<T>(table);
        if ((c * sizeof(T)) % 16 == 0 && sl_aligned16(po) && sl_aligned16(pt)) {
            auto *const fwd_kernel = k_emb_fwd<T, uint4>;
            SL_LAUNCH(fwd_kernel, sl_blocks(n, kWarps), kThreads, 0, sl_cuda_stream(ctx), po, pid,
                      pt, n, v, c);
        } else {
            auto *const fwd_kernel = k_emb_fwd<T, T>;
            SL_LAUNCH(fwd_kernel, sl_blocks(n, kWarps), kThreads, 0, sl_cuda_stream(ctx), po, pid,
                      pt, n, v, c);
        }
        SL_CUDA_LAUNCHED("embedding_fwd");
    });
}

extern "C" void sl_cuda_embedding_bwd(void *ctx, sl_tensor *dtable, const sl_tensor *dout,
                                      const sl_tensor *ids) {
    const int64_t n = ids->numel, c64 = sl_last_dim(dtable), v = sl_rows(dtable);
    SL_CHECK(c64 <= INT32_MAX / 16 && n <= INT32_MAX, "embedding_bwd: %lld tokens of %lld elements",
             (long long)n, (long long)c64);
    if (n == 0) return;
    const int c = (int)c64;
    const int32_t *pid = sl_ptr<int32_t>(ids);
    if (!sl_cuda_deterministic(ctx) && dtable->dtype == SL_F32) {
        int64_t blocks = sl_blocks(n * c, kThreads);
        if (blocks > 65536) blocks = 65536;
        SL_DISPATCH_FLOAT(dout->dtype, TD, {
            const TD *pd = sl_ptr<TD>(dout);
            auto *const atomic_kernel = k_emb_bwd_atomic<TD>;
            SL_LAUNCH(atomic_kernel, (unsigned)blocks, kThreads, 0, sl_cuda_stream(ctx),
                      sl_ptr<float>(dtable), pd, pid, n, c, v);
            SL_CUDA_LAUNCHED("embedding_bwd");
        });
        return;
    }
    const int32_t *keys = NULL, *pos = NULL;
    emb_sort(ctx, pid, n, v, &keys, &pos);
    SL_DISPATCH_FLOAT(dout->dtype, TD, SL_DISPATCH_FLOAT(dtable->dtype, TT, {
                          TT *pt = sl_ptr<TT>(dtable);
                          const TD *pd = sl_ptr<TD>(dout);
                          if (c % SL_PACK == 0 && sl_aligned16(pt) && sl_aligned16(pd))
                              runs_launch<TD, TT, SL_PACK>(ctx, pt, pd, keys, pos, n, c, v);
                          else
                              runs_launch<TD, TT, 1>(ctx, pt, pd, keys, pos, n, c, v);
                      }));
}
