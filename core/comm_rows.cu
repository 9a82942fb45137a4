/*
 * core/comm_rows.cu - copies of many blocks of rows in one kernel (core/comm_rows.h).
 *
 * The blocks of one launch travel in the kernel's parameters (at most kBatch of them, 1.5 KiB,
 * inside the 4 KiB every CUDA version allows): no descriptor upload, so the host never waits
 * for a copy and never shares a host buffer with a queued one. Each warp copies one row: it
 * finds the row's block by binary search over the blocks' first rows, then its lanes move the
 * row in 16-byte words when the row width and every pointer of the launch allow, else in 4-,
 * 2- or 1-byte words.
 */
#include "core/comm_rows.h"

#include "core/cuda_common.cuh"

namespace {

constexpr int kWarps = 8, kThreads = 32 * kWarps;
constexpr int kBatch = 64;

struct row_batch {
    int n;
    int64_t first[kBatch + 1]; /* first[k]: the launch's row index of block k's first row */
    const char *src[kBatch];
    char *dst[kBatch];
};

/* Warp w of block b copies row 8b + w of the batch, `units` words of type U. */
template <typename U>
__global__ void __launch_bounds__(kThreads) k_copy_rows(const row_batch b, int64_t units) {
    const int lane = threadIdx.x & 31;
    const int64_t row = (int64_t)blockIdx.x * kWarps + (threadIdx.x >> 5);
    if (row >= b.first[b.n]) return;
    int lo = 0, hi = b.n - 1; /* the last block whose first row is <= row */
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (b.first[mid] <= row)
            lo = mid;
        else
            hi = mid - 1;
    }
    const int64_t r = row - b.first[lo];
    const U *s = reinterpret_cast<const U *>(b.src[lo]) + r * units;
    U *d = reinterpret_cast<U *>(b.dst[lo]) + r * units;
    SL_CHECK_ALIGNED(s, sizeof(U));
    SL_CHECK_ALIGNED(d, sizeof(U));
    for (int64_t j = lane; j < units; j += 32) d[j] = s[j];
}

/* The widest word that divides the width and aligns every pointer of the batch. */
size_t word_size(const row_batch &b, size_t width) {
    uintptr_t bits = width;
    for (int k = 0; k < b.n; k++) bits |= (uintptr_t)b.src[k] | (uintptr_t)b.dst[k];
    return bits % 16 == 0 ? 16 : bits % 4 == 0 ? 4 : bits % 2 == 0 ? 2 : 1;
}

cudaError_t launch(const row_batch &b, size_t width, cudaStream_t stream) {
    const int64_t rows = b.first[b.n];
    const size_t word = word_size(b, width);
    const int64_t units = (int64_t)(width / word);
    const unsigned grid = sl_blocks(rows, kWarps);
    if (word == 16)
        SL_LAUNCH(k_copy_rows<uint4>, grid, kThreads, 0, stream, b, units);
    else if (word == 4)
        SL_LAUNCH(k_copy_rows<uint32_t>, grid, kThreads, 0, stream, b, units);
    else if (word == 2)
        SL_LAUNCH(k_copy_rows<uint16_t>, grid, kThreads, 0, stream, b, units);
    else
        SL_LAUNCH(k_copy_rows<unsigned char>, grid, kThreads, 0, stream, b, units);
    return cudaGetLastError();
}

} // namespace

extern "C" cudaError_t sl_cuda_copy_row_blocks(const sl_row_block *blocks, int n, size_t width,
                                               cudaStream_t stream) {
    if (width == 0) return cudaSuccess;
    row_batch b{}; /* b.first[0] stays 0 */
    for (int k = 0; k < n; k++) {
        if (blocks[k].rows <= 0) continue;
        if (b.n == kBatch) {
            if (cudaError_t e = launch(b, width, stream)) return e;
            b.n = 0;
        }
        b.src[b.n] = static_cast<const char *>(blocks[k].src);
        b.dst[b.n] = static_cast<char *>(blocks[k].dst);
        b.first[b.n + 1] = b.first[b.n] + blocks[k].rows;
        b.n++;
    }
    return b.n > 0 ? launch(b, width, stream) : cudaSuccess;
}
