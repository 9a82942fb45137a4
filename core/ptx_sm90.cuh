/*
 * core/ptx_sm90.cuh - the Hopper (sm_90a) instructions of sluice's kernels: wgmma with
 * shared-memory matrix descriptors, TMA tile loads and stores through tensor maps, the bulk L2
 * prefetch, mbarriers, named barriers, the async-proxy fences and setmaxnreg (docs/cuda.md,
 * "Hopper wrappers").
 *
 * As in core/ptx.cuh: one inline device function per PTX instruction, and under the CPU SIMT
 * test double (-DSLUICE_CUDA=EMULATED) an emulated twin implementing the PTX ISA's semantics
 * (emu/src/sm90_*.cc, emu/README.md "Hopper instructions"). Compiled by nvcc for sm_90a the
 * wrappers are the instructions; for other targets (sm_80) they compile to __trap(), so a file
 * holding a Hopper kernel still builds for every target: choose the kernel at run time on
 * compute capability 9.x.
 *
 * ---- wgmma (warpgroup MMA) ----
 * A warpgroup is 4 consecutive warps, threads 128w .. 128w + 127; all 128 execute every
 * wgmma, fence, commit and wait (same operands). D (64 x N, fp32) += A (64 x 16, bf16) *
 * B (16 x N, bf16), N a multiple of 16 in 16..256.
 *
 * Register layouts, with t = thread index in the warpgroup, w = t / 32 (its warp), lane =
 * t % 32, g = lane / 4, q = lane % 4 (the mma.m16n8k16 layouts of core/ptx.cuh, warp w taking
 * rows 16w .. 16w + 15):
 *   accumulator d[N / 2]: for j = 0 .. N/8 - 1 (8-column block j):
 *     d[4j + 0] = D[16w + g    ][8j + 2q]     d[4j + 1] = D[16w + g    ][8j + 2q + 1]
 *     d[4j + 2] = D[16w + g + 8][8j + 2q]     d[4j + 3] = D[16w + g + 8][8j + 2q + 1]
 *   A from registers, a[4] (two bf16 each, the smaller column in the low 16 bits):
 *     a[0] = A[16w + g][2q, 2q+1]       a[1] = A[16w + g + 8][2q, 2q+1]
 *     a[2] = A[16w + g][2q+8, 2q+9]     a[3] = A[16w + g + 8][2q+8, 2q+9]
 *   So the accumulator of one wgmma, rounded to bf16 in pairs, is the A operand of the next:
 *   for the k-slice of columns 16s .. 16s + 15, a[0] = pack(d[8s], d[8s+1]), a[1] =
 *   pack(d[8s+2], d[8s+3]), a[2] = pack(d[8s+4], d[8s+5]), a[3] = pack(d[8s+6], d[8s+7])
 *   (sl_wgmma_acc_to_a; FlashAttention's P = softmax(S) feeding O += P V).
 *
 * Shared-memory operands are described by a 64-bit matrix descriptor (sl_wgmma_desc): start
 * address, leading (LBO) and stride (SBO) byte offsets, swizzle mode. Transpose bits: 0 =
 * K-major (A stored [m][k], B stored [n][k]: k contiguous), 1 = MN-major (A stored [k][m], B
 * stored [k][n]). In 16-byte chunks of 8 elements, "a line" being 16 bytes (no swizzle) or
 * the swizzle span (32, 64, 128 bytes):
 *   K-major:  rows (m or n) one line apart in groups of 8 (a 8 x line "core matrix"); the
 *             next 8 rows SBO on; k 8..15 16 bytes on (swizzled; LBO unused) or LBO on (no
 *             swizzle). E.g. a TMA tile [rows][64] bf16 with 128B swizzle: SBO = 1024; the
 *             k-slice s of a wgmma starts 32 s bytes into the tile (sl_wgmma_desc_add).
 *   MN-major: a line holds 8 / 16 / 32 / 64 consecutive m or n of one k; k rows one line
 *             apart; the next 8 k SBO on (swizzled) or LBO on (no swizzle); the next line's
 *             worth of m or n LBO on (swizzled) or SBO on (no swizzle). E.g. V tile [keys][64]
 *             with 128B swizzle as B (k = key, n = dim): SBO = 1024, LBO = the byte distance to
 *             the next 64 columns; the k-slice s starts 16 s lines = 2048 s bytes in.
 *   Swizzle: bits [4, 7) of the shared address XOR bits [7, 10) (128B), [4, 6) ^ [7, 9) (64B),
 *   4 ^ 7 (32B): the layout TMA writes with the same swizzle mode. Keep swizzled tiles at
 *   multiples of 1024 (128B), 512 (64B), 256 (32B) bytes of the shared window (descriptor
 *   base offset 0): `extern __shared__ __align__(1024)` dynamic shared memory.
 *
 * Asynchrony: sl_wgmma_fence() before the first wgmma and again after each wait before
 * registers are reused; issue; sl_wgmma_commit() closes a group; sl_wgmma_wait<N>() waits
 * until at most N groups are pending. Until then the accumulators (and A registers, and the
 * shared memory read) must not be touched. Successive wgmmas on the same accumulators (same
 * N) need no wait in between. Keep the accumulator arrays alive (in scope) until the wait;
 * sl_wgmma_fence_operand(regs) stops nvcc from moving register accesses across the
 * asynchronous window (CUTLASS's warpgroup_fence_operand).
 *
 * ---- TMA ----
 * Host: sl_tensor_map_tiled() / sl_tensor_map_encode_tiled() (cuTensorMapEncodeTiled, reached
 * through the runtime, so no libcuda link). Pass the map as a kernel parameter `const
 * __grid_constant__ CUtensorMap map` and its address to the loads. Coordinates are element
 * indices, innermost dimension first (c0 = column); a box may stick out of the tensor: those
 * elements arrive as zeros and still count in the transaction bytes (box bytes =
 * product of the box dimensions x element size). A load completes on an mbarrier
 * (sl_mbar_arrive_expect_tx with the box bytes, then wait on the phase). Shared destinations
 * and store sources: 128-byte aligned, and aligned to the swizzle's repeat when swizzled.
 *
 * ---- mbarrier ----
 * An 8-byte object in shared memory: sl_mbar_init(bar, count) by one thread, then
 * sl_fence_mbarrier_init() and a __syncthreads() before anyone uses it. A phase completes
 * when `count` arrivals and all expected transaction bytes have come; waits name the phase by
 * parity (the first phase is 0): sl_mbar_wait(bar, parity) returns once the phase of that
 * parity has completed.
 *
 * ---- async proxy ----
 * wgmma's shared-memory reads and TMA are the "async proxy": ordinary stores to shared memory
 * that wgmma or a TMA store then reads need sl_fence_proxy_async() (by the writing threads,
 * then a barrier). Data that TMA wrote and an mbarrier wait published need no fence.
 */
#ifndef SL_PTX_SM90_CUH
#define SL_PTX_SM90_CUH

#include <cuda.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "core/ptx.cuh"

/* Swizzle modes, numbered as CUtensorMapSwizzle (the same constant serves the tensor map and
 * the wgmma descriptor). */
enum sl_swizzle : int {
    SL_SWIZZLE_NONE = 0,
    SL_SWIZZLE_32B = 1,
    SL_SWIZZLE_64B = 2,
    SL_SWIZZLE_128B = 3
};

/* SL_DYNAMIC_SMEM_1024(type, name): SL_DYNAMIC_SMEM (core/cuda_common.cuh) aligned to 1024
 * bytes, the repeat of the 128B swizzle pattern: where swizzled TMA tiles and wgmma operands
 * go. (The emulator's dynamic shared memory is always 1024-aligned.) */
#ifdef SLUICE_CUDA_EMULATED
#define SL_DYNAMIC_SMEM_1024(type, name) type *name = (type *)sl_emu_dynamic_smem()
#else
#define SL_DYNAMIC_SMEM_1024(type, name)                                                           \
    extern __shared__ __align__(1024) unsigned char sl_dynamic_smem_1024_[];                       \
    type *name = (type *)sl_dynamic_smem_1024_
#endif

/* ---- setmaxnreg's register pool ------------------------------------------------------------ */

/* The registers per thread a block of `threads` holds from its launch with one block per SM
 * (__launch_bounds__(threads, 1)): the SM's 65,536 over the threads, at most 255, in the
 * allocation unit of 8 (ptxas gave 168 at 384 threads, 128 at 512: docs/cuda-resources.md). */
constexpr int sl_launch_regs(int threads) {
    return (65536 / threads < 255 ? 65536 / threads : 255) / 8 * 8;
}
/* Whether warp roles fit that allocation: `producer_threads` at `producer_regs` after their
 * setmaxnreg.dec and `consumer_threads` at `consumer_regs` after their .inc. An .inc takes
 * registers only from those the block's .dec released, never from the rest of the SM, and
 * waits until they are there: a split over the launch's total hangs the block for ever. (An
 * H200 did, 2026-11-27: 128 x 32 + 256 x 240 = 65,536 of a block's 384 x 168 = 64,512.) */
constexpr bool sl_setmaxnreg_fits(int producer_threads, int producer_regs, int consumer_threads,
                                  int consumer_regs) {
    return producer_threads * producer_regs + consumer_threads * consumer_regs <=
           (producer_threads + consumer_threads) *
               sl_launch_regs(producer_threads + consumer_threads);
}

/* ---- host: tensor maps ------------------------------------------------------------------ */

/* The driver's cuTensorMapEncodeTiled, looked up once through the runtime
 * (cudaGetDriverEntryPointByVersion) so that nothing links libcuda; null when the driver has no
 * such entry point. */
static inline void *sl_tensor_map_encode_entry(void) {
    static void *const fn = [] {
        void *p = nullptr;
        cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault,
                                             &q) != cudaSuccess ||
            q != cudaDriverEntryPointSuccess)
            p = nullptr;
        return p;
    }();
    return fn;
}

/* cuTensorMapEncodeTiled (cuda.h's signature and rules) through sl_tensor_map_encode_entry.
 * Returns CUDA_ERROR_NOT_FOUND when the driver has no such entry point. */
static inline CUresult
sl_tensor_map_encode_tiled(CUtensorMap *map, CUtensorMapDataType dtype, cuuint32_t rank,
                           void *global, const cuuint64_t *dims, const cuuint64_t *strides,
                           const cuuint32_t *box, const cuuint32_t *element_strides,
                           CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
                           CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob) {
    typedef CUresult (*encode_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *,
                                  const cuuint64_t *, const cuuint64_t *, const cuuint32_t *,
                                  const cuuint32_t *, CUtensorMapInterleave, CUtensorMapSwizzle,
                                  CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
    const encode_fn fn = (encode_fn)sl_tensor_map_encode_entry();
    if (!fn) return CUDA_ERROR_NOT_FOUND;
    return fn(map, dtype, rank, global, dims, strides, box, element_strides, interleave, swizzle,
              l2, oob);
}

/* Whether a device (props) runs this build's Hopper kernels: compute capability 9.x, `kernel`
 * (any kernel of the calling file: every file is built for the same targets) present as sm_90a
 * code in the binary (a build without it would trap), and the driver's cuTensorMapEncodeTiled.
 * Uncached: callers keep the answer per device. */
static inline bool sl_sm90_code_runs(const cudaDeviceProp *props, const void *kernel) {
    if (props->major != 9) return false;
    cudaFuncAttributes attr;
    if (cudaFuncGetAttributes(&attr, kernel) != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
    }
    return attr.binaryVersion >= 90 && sl_tensor_map_encode_entry() != nullptr;
}

/* The common case: a dense tensor of `rank` dimensions (dims innermost first, strides[i] =
 * bytes between consecutive indices of dimension i + 1, multiples of 16), tiles of `box`,
 * element strides 1, out-of-bounds elements read as zero. */
static inline CUresult sl_tensor_map_tiled(CUtensorMap *map, CUtensorMapDataType dtype, int rank,
                                           const void *global, const cuuint64_t *dims,
                                           const cuuint64_t *strides, const cuuint32_t *box,
                                           sl_swizzle swizzle) {
    const cuuint32_t ones[5] = {1, 1, 1, 1, 1};
    return sl_tensor_map_encode_tiled(
        map, dtype, (cuuint32_t)rank, (void *)global, dims, strides, box, ones,
        CU_TENSOR_MAP_INTERLEAVE_NONE, (CUtensorMapSwizzle)swizzle,
        CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

/* ---- descriptors: the same bits on both paths ---------------------------------------------- */

/* The wgmma descriptor of a shared-memory operand starting at `smem_addr` (shared-window
 * address, sl_sm90_smem_addr): LBO and SBO in bytes (multiples of 16), base offset 0. */
__host__ __device__ __forceinline__ uint64_t sl_wgmma_desc_bits(uint32_t smem_addr,
                                                                sl_swizzle swizzle, uint32_t lbo,
                                                                uint32_t sbo) {
    const uint64_t mode = (uint64_t)((4 - (int)swizzle) & 3); /* 128B: 1, 64B: 2, 32B: 3 */
    return (uint64_t)((smem_addr & 0x3ffffu) >> 4) | (uint64_t)((lbo & 0x3ffffu) >> 4) << 16 |
           (uint64_t)((sbo & 0x3ffffu) >> 4) << 32 | mode << 62;
}
/* Where byte `offset` of a swizzled tile (from a base aligned to the pattern's repeat) lives:
 * the 16-byte chunk index XOR the line index, as TMA writes and wgmma reads. For threads that
 * write such a tile themselves (an epilogue for a TMA store, P for a wgmma). */
__host__ __device__ __forceinline__ uint32_t sl_swizzle_offset(sl_swizzle swizzle,
                                                               uint32_t offset) {
    const uint32_t mask = (1u << (int)swizzle) - 1; /* 0, 1, 3, 7 */
    return offset ^ (((offset >> 7) & mask) << 4);
}
/* The descriptor advanced by `bytes` (a multiple of 16): the next k-slice of a tile. */
__host__ __device__ __forceinline__ uint64_t sl_wgmma_desc_add(uint64_t desc, uint32_t bytes) {
    return desc + (uint64_t)(bytes >> 4);
}
/* Where a thread's accumulator elements are (the layout above): t its index in the
 * warpgroup, w its warp there, g = lane / 4, q = lane % 4; it holds rows 16 w + g and 16 w + g
 * + 8, columns 8 j + 2 q and + 1 of every 8-column block j. */
struct sl_wg_lane {
    int t, w, g, q;
};
__device__ __forceinline__ sl_wg_lane sl_wg_lane_of() {
    sl_wg_lane p;
    p.t = (int)(threadIdx.x % 128);
    p.w = p.t / 32, p.g = (p.t % 32) / 4, p.q = p.t % 4;
    return p;
}
/* Four bf16 pairs of accumulator block pair s (columns 16s .. 16s + 15) as an A fragment. */
template <int R>
__device__ __forceinline__ void sl_wgmma_acc_to_a(uint32_t (&a)[4], const float (&d)[R], int s) {
    a[0] = sl_pack_bf16x2(d[8 * s + 0], d[8 * s + 1]);
    a[1] = sl_pack_bf16x2(d[8 * s + 2], d[8 * s + 3]);
    a[2] = sl_pack_bf16x2(d[8 * s + 4], d[8 * s + 5]);
    a[3] = sl_pack_bf16x2(d[8 * s + 6], d[8 * s + 7]);
}

#ifdef SLUICE_CUDA_EMULATED

/* ---- emulated twins (emu/src/sm90_*.cc) ------------------------------------------------------ */

__device__ __forceinline__ uint32_t sl_sm90_smem_addr(const void *p) {
    return sl_emu::smem_offset(p);
}
__device__ __forceinline__ uint64_t sl_wgmma_desc(const void *smem, sl_swizzle swizzle,
                                                  uint32_t lbo, uint32_t sbo) {
    return sl_wgmma_desc_bits(sl_emu::smem_offset(smem), swizzle, lbo, sbo);
}
template <int N, int TransA, int TransB>
__device__ __forceinline__ void sl_wgmma_bf16_ss(float (&d)[N / 2], uint64_t desc_a,
                                                 uint64_t desc_b, int accumulate) {
    static_assert(N % 16 == 0 && N >= 16 && N <= 256, "wgmma: N is a multiple of 16 in 16..256");
    static_assert((TransA | TransB) >> 1 == 0, "wgmma: transpose bits are 0 or 1");
    sl_emu::wgmma(N, TransA, TransB, d, nullptr, desc_a, desc_b, accumulate);
}
template <int N, int TransB>
__device__ __forceinline__ void sl_wgmma_bf16_rs(float (&d)[N / 2], const uint32_t (&a)[4],
                                                 uint64_t desc_b, int accumulate) {
    static_assert(N % 16 == 0 && N >= 16 && N <= 256, "wgmma: N is a multiple of 16 in 16..256");
    static_assert(TransB >> 1 == 0, "wgmma: transpose bits are 0 or 1");
    sl_emu::wgmma(N, 0, TransB, d, a, 0, desc_b, accumulate);
}
__device__ __forceinline__ void sl_wgmma_fence() {
    sl_emu::wgmma_fence();
}
__device__ __forceinline__ void sl_wgmma_commit() {
    sl_emu::wgmma_commit();
}
template <int N>
__device__ __forceinline__ void sl_wgmma_wait(const char *file = __builtin_FILE(),
                                              int line = __builtin_LINE()) {
    static_assert(N >= 0 && N <= 7, "wgmma.wait_group takes 0..7");
    sl_emu::wgmma_wait(N, file, line);
}
template <class T, int R> __device__ __forceinline__ void sl_wgmma_fence_operand(T (&)[R]) {}

__device__ __forceinline__ void sl_mbar_init(uint64_t *bar, uint32_t count,
                                             const char *file = __builtin_FILE(),
                                             int line = __builtin_LINE()) {
    sl_emu::mbar_init(bar, count, file, line);
}
__device__ __forceinline__ void sl_mbar_inval(uint64_t *bar) {
    sl_emu::mbar_inval(bar);
}
__device__ __forceinline__ void sl_fence_mbarrier_init() {
    sl_emu::fence_mbarrier_init();
}
__device__ __forceinline__ void sl_mbar_arrive(uint64_t *bar) {
    sl_emu::mbar_arrive(bar, 0, true);
}
__device__ __forceinline__ void sl_mbar_arrive_expect_tx(uint64_t *bar, uint32_t bytes) {
    sl_emu::mbar_arrive(bar, bytes, true);
}
__device__ __forceinline__ void sl_mbar_expect_tx(uint64_t *bar, uint32_t bytes) {
    sl_emu::mbar_arrive(bar, bytes, false);
}
__device__ __forceinline__ bool sl_mbar_try_wait(uint64_t *bar, uint32_t parity,
                                                 const char *file = __builtin_FILE(),
                                                 int line = __builtin_LINE()) {
    return sl_emu::mbar_wait(bar, parity, false, file, line);
}
__device__ __forceinline__ bool sl_mbar_test_wait(uint64_t *bar, uint32_t parity,
                                                  const char *file = __builtin_FILE(),
                                                  int line = __builtin_LINE()) {
    return sl_emu::mbar_wait(bar, parity, true, file, line);
}
__device__ __forceinline__ void sl_mbar_wait(uint64_t *bar, uint32_t parity,
                                             const char *file = __builtin_FILE(),
                                             int line = __builtin_LINE()) {
    while (!sl_emu::mbar_wait(bar, parity, false, file, line)) {
    }
}
__device__ __forceinline__ void sl_fence_proxy_async() {
    sl_emu::fence_proxy_async();
}
/* Global memory has one proxy here: TMA stores and reductions are performed as plain accesses. */
__device__ __forceinline__ void sl_fence_proxy_async_global() {}

__device__ __forceinline__ void sl_tma_prefetch(const CUtensorMap *map) {
    (void)map;
}
__device__ __forceinline__ void sl_tma_load_2d(void *smem, const CUtensorMap *map, uint64_t *bar,
                                               int c0, int c1) {
    const int32_t c[2] = {c0, c1};
    sl_emu::tma_load(smem, map, bar, 2, c);
}
__device__ __forceinline__ void sl_tma_load_3d(void *smem, const CUtensorMap *map, uint64_t *bar,
                                               int c0, int c1, int c2) {
    const int32_t c[3] = {c0, c1, c2};
    sl_emu::tma_load(smem, map, bar, 3, c);
}
__device__ __forceinline__ void sl_tma_load_4d(void *smem, const CUtensorMap *map, uint64_t *bar,
                                               int c0, int c1, int c2, int c3) {
    const int32_t c[4] = {c0, c1, c2, c3};
    sl_emu::tma_load(smem, map, bar, 4, c);
}
__device__ __forceinline__ void sl_tma_store_2d(const CUtensorMap *map, const void *smem, int c0,
                                                int c1) {
    const int32_t c[2] = {c0, c1};
    sl_emu::tma_store(map, smem, 2, c);
}
__device__ __forceinline__ void sl_tma_store_3d(const CUtensorMap *map, const void *smem, int c0,
                                                int c1, int c2) {
    const int32_t c[3] = {c0, c1, c2};
    sl_emu::tma_store(map, smem, 3, c);
}
__device__ __forceinline__ void sl_tma_store_4d(const CUtensorMap *map, const void *smem, int c0,
                                                int c1, int c2, int c3) {
    const int32_t c[4] = {c0, c1, c2, c3};
    sl_emu::tma_store(map, smem, 4, c);
}
__device__ __forceinline__ void sl_tma_reduce_add_4d(const CUtensorMap *map, const void *smem,
                                                     int c0, int c1, int c2, int c3) {
    const int32_t c[4] = {c0, c1, c2, c3};
    sl_emu::tma_reduce_add(map, smem, 4, c);
}
__device__ __forceinline__ void sl_tma_store_commit() {
    sl_emu::tma_store_commit();
}
__device__ __forceinline__ void sl_bulk_prefetch_l2(const void *src, uint32_t bytes) {
    sl_emu::bulk_prefetch_l2(src, bytes);
}
template <int N> __device__ __forceinline__ void sl_tma_store_wait_read() {
    static_assert(N >= 0, "cp.async.bulk.wait_group takes a non-negative count");
    sl_emu::tma_store_wait(N, true);
}
template <int N> __device__ __forceinline__ void sl_tma_store_wait() {
    static_assert(N >= 0, "cp.async.bulk.wait_group takes a non-negative count");
    sl_emu::tma_store_wait(N, false);
}

__device__ __forceinline__ void sl_named_bar_sync(int id, int nthreads,
                                                  const char *file = __builtin_FILE(),
                                                  int line = __builtin_LINE()) {
    sl_emu::named_barrier(id, nthreads, true, file, line);
}
__device__ __forceinline__ void sl_named_bar_arrive(int id, int nthreads,
                                                    const char *file = __builtin_FILE(),
                                                    int line = __builtin_LINE()) {
    sl_emu::named_barrier(id, nthreads, false, file, line);
}

template <int R> __device__ __forceinline__ void sl_setmaxnreg_inc() {
    static_assert(R >= 24 && R <= 256 && R % 8 == 0, "setmaxnreg: a multiple of 8 in 24..256");
    sl_emu::setmaxnreg(R, true);
}
template <int R> __device__ __forceinline__ void sl_setmaxnreg_dec() {
    static_assert(R >= 24 && R <= 256 && R % 8 == 0, "setmaxnreg: a multiple of 8 in 24..256");
    sl_emu::setmaxnreg(R, false);
}

#else

/* The instructions (nvcc): core/ptx_sm90_asm.cuh. */
#include "core/ptx_sm90_asm.cuh"

#endif

#endif
