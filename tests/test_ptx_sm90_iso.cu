/*
 * tests/test_ptx_sm90_iso.cu - sections of test_ptx_sm90 that each run one of the instructions
 * tma_load_kernel (tests/test_ptx_sm90.cu) combines, alone or with only what the Hopper
 * attention kernel (known to run on an H200) already uses, so that one run on a GPU names the
 * instruction a device refuses: on an H200 on 2026-11-26 the first TMA load case failed with
 * cudaErrorIllegalInstruction. Each section runs in a process of its own
 * (tests/test_ptx_sm90_main.cu), since that error is sticky.
 *
 *   iso_smem_layout        where dynamic (__align__(1024)) and static __shared__ memory start
 *   iso_mbar_wait          mbarrier.init, fence.mbarrier_init, arrive, try_wait.parity
 *   iso_mbar_test_wait     mbarrier.test_wait.parity (before and after the phase completes)
 *   iso_mbar_expect_tx     mbarrier.expect_tx.relaxed.cta (no arrival), then arrive
 *   iso_prefetch_tensormap prefetch.tensormap of a __grid_constant__ CUtensorMap
 *   iso_bulk_prefetch      cp.async.bulk.prefetch.L2.global of whole and partial rows (the
 *                          Hopper grouped GEMM's weight gradient), then plain loads of them
 *   iso_tma_*              one 2D TMA load completing on an mbarrier (arrive.expect_tx,
 *                          try_wait), swizzle none with 48-byte box rows (24 bf16, the first
 *                          failing case) or 128B with 128-byte rows, the mbarrier in static
 *                          __shared__ (as tma_load_kernel has it) or inside the dynamic shared
 *                          memory (as the attention kernels have it)
 *
 * The emulated build runs the same sections on the emulated twins (label emu).
 */
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/cuda_common.cuh"
#include "core/ptx_sm90.cuh"
#include "tests/emu/emu_test.h"
#include "tests/test_ptx_sm90.h"

const ptx_iso_section ptx_iso_sections[] = {
    {"iso_smem_layout", "dynamic and static shared memory addresses"},
    {"iso_mbar_wait", "mbarrier.init + fence.mbarrier_init + arrive + try_wait.parity"},
    {"iso_mbar_test_wait", "mbarrier.test_wait.parity"},
    {"iso_mbar_expect_tx", "mbarrier.expect_tx.relaxed.cta.shared::cta.b64, then arrive"},
    {"iso_prefetch_tensormap", "prefetch.tensormap of a __grid_constant__ CUtensorMap"},
    {"iso_bulk_prefetch", "cp.async.bulk.prefetch.L2.global, then loads of the range"},
    {"iso_tma_none_static_bar", "2D TMA load, swizzle none, 48-byte rows, static mbarrier"},
    {"iso_tma_none_dyn_bar", "2D TMA load, swizzle none, 48-byte rows, mbarrier in dynamic smem"},
    {"iso_tma_128b_static_bar", "2D TMA load, swizzle 128B, 128-byte rows, static mbarrier"},
    {"iso_tma_128b_dyn_bar", "2D TMA load, swizzle 128B, 128-byte rows, mbarrier in dynamic smem"},
};
const int ptx_iso_count = (int)(sizeof ptx_iso_sections / sizeof ptx_iso_sections[0]);

/* out[0]: the dynamic shared memory's shared-window address, out[1]: the static mbarrier's
 * (the emulator's static __shared__ has no window address: 8 plus its misalignment there). */
__global__ void iso_smem_layout_kernel(uint32_t *out) {
    SL_DYNAMIC_SMEM_1024(uint8_t, smem);
    __shared__ uint64_t bar;
    if (threadIdx.x == 0) {
        bar = 0;
        smem[0] = 0;
        out[0] = sl_sm90_smem_addr(smem);
#ifdef SLUICE_CUDA_EMULATED
        out[1] = 8 + (uint32_t)((uintptr_t)&bar % 8); /* its alignment only */
#else
        out[1] = (uint32_t)__cvta_generic_to_shared(&bar);
#endif
    }
}

/* Every thread arrives once on a static mbarrier counting blockDim.x, then waits for phase 0. */
__global__ void iso_mbar_wait_kernel(int *out) {
    __shared__ uint64_t bar;
    const int t = threadIdx.x;
    if (t == 0) {
        sl_mbar_init(&bar, blockDim.x);
        sl_fence_mbarrier_init();
    }
    __syncthreads();
    sl_mbar_arrive(&bar);
    sl_mbar_wait(&bar, 0);
    out[t] = 1;
}

/* test_wait before the arrival (0), polled after it (1), the next phase's parity (0). */
__global__ void iso_mbar_test_wait_kernel(int *out) {
    __shared__ uint64_t bar;
    if (threadIdx.x == 0) {
        sl_mbar_init(&bar, 1);
        sl_fence_mbarrier_init();
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        out[0] = sl_mbar_test_wait(&bar, 0);
        sl_mbar_arrive(&bar);
        int done = 0;
        for (int i = 0; i < 1000000 && !done; i++) done = sl_mbar_test_wait(&bar, 0);
        out[1] = done;
        out[2] = sl_mbar_test_wait(&bar, 1);
    }
}

/* expect_tx of 0 bytes (no transfer can be made without TMA, which is another suspect) and
 * the arrival: the phase completes, and everyone's try_wait returns. */
__global__ void iso_mbar_expect_tx_kernel(int *out) {
    __shared__ uint64_t bar;
    const int t = threadIdx.x;
    if (t == 0) {
        sl_mbar_init(&bar, 1);
        sl_fence_mbarrier_init();
    }
    __syncthreads();
    if (t == 0) {
        sl_mbar_expect_tx(&bar, 0);
        sl_mbar_arrive(&bar);
    }
    sl_mbar_wait(&bar, 0);
    out[t] = 1;
}

__global__ void iso_prefetch_kernel(const __grid_constant__ CUtensorMap map, int *out) {
    if (threadIdx.x == 0) {
        sl_tma_prefetch(&map);
        out[0] = 1;
    }
}

/* Thread 0 prefetches rows of src (1 KB each, as the grouped GEMM's dW tiles, and the last one
 * cut to 48 bytes); then every thread copies src to dst with plain loads. */
__global__ void iso_bulk_prefetch_kernel(const float *src, float *dst, int n) {
    if (threadIdx.x == 0) {
        for (int r = 0; r + 256 <= n; r += 256) sl_bulk_prefetch_l2(src + r, 1024);
        sl_bulk_prefetch_l2(src + n - 12, 48);
    }
    __syncthreads();
    for (int i = (int)threadIdx.x; i < n; i += (int)blockDim.x) dst[i] = src[i];
}

/* The mbarrier of iso_tma_kernel: in static __shared__, or `off` bytes into dynamic smem. */
template <bool DynBar> __device__ __forceinline__ uint64_t *iso_bar(uint8_t *smem, int off);
template <> __device__ __forceinline__ uint64_t *iso_bar<true>(uint8_t *smem, int off) {
    return (uint64_t *)(smem + off);
}
template <> __device__ __forceinline__ uint64_t *iso_bar<false>(uint8_t *, int) {
    __shared__ uint64_t bar;
    return &bar;
}

/* One 2D box at (c0, c1) into the 1024-aligned dynamic smem, as the attention kernel issues
 * its loads (arrive.expect_tx, the load, try_wait; no prefetch, no test_wait), copied out. */
template <bool DynBar>
__global__ void iso_tma_kernel(const __grid_constant__ CUtensorMap map, int c0, int c1,
                               int box_bytes, uint8_t *out) {
    SL_DYNAMIC_SMEM_1024(uint8_t, smem);
    uint64_t *bar = iso_bar<DynBar>(smem, (box_bytes + 1023) / 1024 * 1024);
    const int t = threadIdx.x;
    if (t == 0) {
        sl_mbar_init(bar, 1);
        sl_fence_mbarrier_init();
    }
    __syncthreads();
    if (t == 0) {
        sl_mbar_arrive_expect_tx(bar, (uint32_t)box_bytes);
        sl_tma_load_2d(smem, &map, bar, c0, c1);
    }
    sl_mbar_wait(bar, 0);
    for (int i = t; i < box_bytes; i += blockDim.x) out[i] = smem[i];
}

/* A bf16 [40][96] tensor's map with boxes of `inner` x 16 elements; host keeps the bytes. */
static CUtensorMap iso_map(int swz, uint32_t inner, std::vector<uint8_t> &host, uint8_t **dg) {
    std::mt19937 rng(11);
    host.resize(96 * 40 * 2);
    for (auto &b : host) b = (uint8_t)(rng() & 0xff);
    *dg = to_device(host);
    CUtensorMap map;
    memset(&map, 0, sizeof map);
    const cuuint64_t dims[2] = {96, 40}, strides[1] = {96 * 2};
    const cuuint32_t box[2] = {inner, 16};
    const CUresult r = sl_tensor_map_tiled(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, *dg, dims,
                                           strides, box, (sl_swizzle)swz);
    CHECK(r == CUDA_SUCCESS, "cuTensorMapEncodeTiled (swizzle %d, box row %u bf16): %d", swz, inner,
          (int)r);
    return map;
}

static void iso_tma(int swz, bool dyn_bar) {
    const uint32_t inner = swz ? (16u << swz) / 2 : 24;
    std::vector<uint8_t> host;
    uint8_t *dg = nullptr, *dout = nullptr;
    const CUtensorMap map = iso_map(swz, inner, host, &dg);
    const int box_bytes = (int)inner * 16 * 2;
    const size_t smem = (size_t)(box_bytes + 1023) / 1024 * 1024 + 64;
    CUDA_CHECK(cudaMalloc(&dout, (size_t)box_bytes));
    void (*k)(const CUtensorMap, int, int, int, uint8_t *) =
        dyn_bar ? iso_tma_kernel<true> : iso_tma_kernel<false>;
    CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    SL_LAUNCH(k, 1, 96, smem, 0, map, 8, 4, box_bytes, dout);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<uint8_t> out = to_host(dout, (size_t)box_bytes);
    const uint64_t dims[2] = {96, 40};
    const uint32_t box[2] = {inner, 16};
    const int coords[2] = {8, 4};
    const std::vector<uint8_t> want = tma_box_image(host, 2, 2, dims, box, coords, swz);
    int bad = 0;
    for (int i = 0; i < box_bytes; i++) bad += out[(size_t)i] != want[(size_t)i];
    CHECK(bad == 0, "TMA load (swizzle %d, %s mbarrier): %d of %d bytes differ", swz,
          dyn_bar ? "dynamic" : "static", bad, box_bytes);
    cudaFree(dg), cudaFree(dout);
}

/* The n flags a kernel set: every thread that got past the instruction wrote 1. */
static void expect_ones(const int *d, int n, const char *what) {
    const std::vector<int> h = to_host(d, (size_t)n);
    int bad = 0;
    for (int v : h) bad += v != 1;
    CHECK(bad == 0, "%s: %d of %d threads did not get past it", what, bad, n);
}

ptx_tally ptx_section_iso(int i) {
    const char *const name = ptx_iso_sections[i].name;
    int *d = nullptr;
    CUDA_CHECK(cudaMalloc(&d, 96 * sizeof(int)));
    CUDA_CHECK(cudaMemset(d, 0, 96 * sizeof(int)));
    if (!strcmp(name, "iso_smem_layout")) {
        uint32_t *a = (uint32_t *)d;
        CUDA_CHECK(cudaFuncSetAttribute(iso_smem_layout_kernel,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, 2048));
        SL_LAUNCH(iso_smem_layout_kernel, 1, 32, 2048, 0, a);
        CUDA_CHECK(cudaDeviceSynchronize());
        const std::vector<uint32_t> h = to_host(a, 2);
        printf("%s: dynamic shared memory at 0x%x, the static mbarrier at 0x%x\n", name, h[0],
               h[1]);
        CHECK(h[0] % 1024 == 0, "SL_DYNAMIC_SMEM_1024 starts at 0x%x, not 1024-aligned", h[0]);
        CHECK(h[1] % 8 == 0, "the static mbarrier at 0x%x is not 8-byte aligned", h[1]);
    } else if (!strcmp(name, "iso_mbar_wait")) {
        SL_LAUNCH(iso_mbar_wait_kernel, 1, 64, 0, 0, d);
        CUDA_CHECK(cudaDeviceSynchronize());
        expect_ones(d, 64, "mbarrier arrive + try_wait");
    } else if (!strcmp(name, "iso_mbar_test_wait")) {
        SL_LAUNCH(iso_mbar_test_wait_kernel, 1, 32, 0, 0, d);
        CUDA_CHECK(cudaDeviceSynchronize());
        const std::vector<int> h = to_host(d, 3);
        CHECK(h[0] == 0 && h[1] == 1 && h[2] == 0,
              "test_wait: before the arrival %d (want 0), after it %d (want 1), the next "
              "phase's parity %d (want 0)",
              h[0], h[1], h[2]);
    } else if (!strcmp(name, "iso_mbar_expect_tx")) {
        SL_LAUNCH(iso_mbar_expect_tx_kernel, 1, 64, 0, 0, d);
        CUDA_CHECK(cudaDeviceSynchronize());
        expect_ones(d, 64, "mbarrier.expect_tx + arrive + try_wait");
    } else if (!strcmp(name, "iso_prefetch_tensormap")) {
        std::vector<uint8_t> host;
        uint8_t *dg = nullptr;
        const CUtensorMap map = iso_map(0, 24, host, &dg);
        SL_LAUNCH(iso_prefetch_kernel, 1, 32, 0, 0, map, d);
        CUDA_CHECK(cudaDeviceSynchronize());
        expect_ones(d, 1, "prefetch.tensormap");
        cudaFree(dg);
    } else if (!strcmp(name, "iso_bulk_prefetch")) {
        const int n = 4 * 256 + 12;
        std::vector<float> h(n);
        for (int i = 0; i < n; i++) h[i] = 0.5f * (float)i - 3.0f;
        float *src = to_device(h), *dst = nullptr;
        CUDA_CHECK(cudaMalloc(&dst, sizeof(float) * n));
        SL_LAUNCH(iso_bulk_prefetch_kernel, 1, 128, 0, 0, src, dst, n);
        CUDA_CHECK(cudaDeviceSynchronize());
        const std::vector<float> got = to_host(dst, (size_t)n);
        CHECK(memcmp(got.data(), h.data(), sizeof(float) * n) == 0,
              "loads after cp.async.bulk.prefetch.L2 read other values than were written");
        cudaFree(src), cudaFree(dst);
    } else if (!strcmp(name, "iso_tma_none_static_bar")) {
        iso_tma(0, false);
    } else if (!strcmp(name, "iso_tma_none_dyn_bar")) {
        iso_tma(0, true);
    } else if (!strcmp(name, "iso_tma_128b_static_bar")) {
        iso_tma(3, false);
    } else if (!strcmp(name, "iso_tma_128b_dyn_bar")) {
        iso_tma(3, true);
    } else {
        CHECK(false, "no isolation section %s", name);
    }
    cudaFree(d);
    return ptx_tally_here();
}
