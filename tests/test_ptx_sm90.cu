/*
 * tests/test_ptx_sm90.cu - core/ptx_sm90.cuh's Hopper wrappers against plain references:
 * wgmma (A and B from shared memory through descriptors, A from registers) for every N the
 * wrappers have, every swizzle mode and both major-nesses, checked element by element through
 * the documented accumulator layout; k-slices chained on one accumulator through advanced
 * descriptors; TMA tile loads (2D, 3D, 4D, every swizzle, boxes sticking out of the tensor)
 * compared byte for byte with the expected shared-memory image; TMA stores; mbarrier phases
 * and parities; named barriers between producer and consumer warps; and a complete small
 * kernel composed the way the Hopper attention kernel is (tests/test_ptx_sm90_gemm.cu); the TMA
 * sections are in tests/test_ptx_sm90_tma.cu. Each
 * section (and each TMA load case) runs in a process of its own (tests/test_ptx_sm90_main.cu);
 * tests/test_ptx_sm90_iso.cu isolates the instructions of the TMA load kernel.
 *
 * The same file runs under the emulator (label emu) and, in the nvcc build, on a GPU (label
 * gpu; skipped without one or on one other than compute capability 9.x): the first Hopper GPU
 * that runs it validates the emulator's layouts. Emulated results are bitwise the in-order fp32
 * sums; a GPU's within a tolerance.
 */
#include <cmath>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <random>
#include <vector>

#include "core/cuda_common.cuh"
#include "core/ptx_sm90.cuh"
#include "tests/emu/emu_test.h"
#include "tests/test_ptx_sm90.h"

/* ---- wgmma: one instruction --------------------------------------------------------------- */

/* The block copies the host-made shared-memory image in with ordinary stores, fenced for the
 * async proxy that wgmma reads with. */
__device__ __forceinline__ void load_image(uint4 *smem, const uint4 *img, int chunks) {
    for (int i = threadIdx.x; i < chunks; i += blockDim.x) smem[i] = img[i];
    sl_fence_proxy_async();
    __syncthreads();
}
/* Where accumulator register r of thread t lives in a 64 x N row-major D. */
__device__ __forceinline__ int acc_index(int t, int r, int n) {
    const int w = t / 32, g = (t % 32) / 4, q = t % 4;
    return (16 * w + g + 8 * ((r % 4) >> 1)) * n + 8 * (r / 4) + 2 * q + (r & 1);
}

/* One warpgroup. The shared-memory image (A's at offset 0, B's at b_off) comes ready-made from
 * the host; the thread's C fragment is read from C [64][N] by the accumulator layout, D
 * written back by it. RS: A from registers, read from A [64][16] by the A-fragment layout. */
template <int N, int TA, int TB, bool RS>
__global__ void __launch_bounds__(128)
    wgmma_kernel(const uint4 *img, int img_chunks, int b_off, int swz, uint32_t lbo_a,
                 uint32_t sbo_a, uint32_t lbo_b, uint32_t sbo_b, const uint16_t *A, const float *C,
                 float *D) {
    SL_DYNAMIC_SMEM_1024(uint4, smem);
    const int t = threadIdx.x, w = t / 32, g = (t % 32) / 4, q = t % 4;
    load_image(smem, img, img_chunks);
    float d[N / 2];
    for (int r = 0; r < N / 2; r++) d[r] = C[acc_index(t, r, N)];
    const uint64_t db = sl_wgmma_desc((const char *)smem + b_off, (sl_swizzle)swz, lbo_b, sbo_b);
    sl_wgmma_fence_operand(d);
    sl_wgmma_fence();
    if (RS) {
        uint32_t a[4];
        for (int i = 0; i < 4; i++) {
            const int row = 16 * w + g + 8 * (i & 1), col = 2 * q + 8 * (i >> 1);
            a[i] = (uint32_t)A[row * 16 + col] | (uint32_t)A[row * 16 + col + 1] << 16;
        }
        sl_wgmma_fence_operand(a);
        sl_wgmma_bf16_rs<N, TB>(d, a, db, 1);
        sl_wgmma_commit();
        sl_wgmma_wait<0>();
        sl_wgmma_fence_operand(a);
    } else {
        const uint64_t da = sl_wgmma_desc(smem, (sl_swizzle)swz, lbo_a, sbo_a);
        sl_wgmma_bf16_ss<N, TA, TB>(d, da, db, 1);
        sl_wgmma_commit();
        sl_wgmma_wait<0>();
    }
    sl_wgmma_fence_operand(d);
    for (int r = 0; r < N / 2; r++) D[acc_index(threadIdx.x, r, N)] = d[r];
}

/* The descriptors' byte offsets this test uses for an operand of `mns` rows (m or n) and 16
 * k: padded beyond the minimum so that LBO and SBO are both decoded. */
static void test_offsets(int swz, bool mn_major, int mns, uint32_t *lbo, uint32_t *sbo) {
    const uint32_t line = swz ? 16u << swz : 16u, atom = 8 * line;
    if (!mn_major) {
        *lbo = swz ? 16 : 128;       /* unused when swizzled */
        *sbo = swz ? 2 * atom : 384; /* one atom (resp. 128 bytes) of padding per 8 rows */
    } else if (!swz) {
        *sbo = 128;                             /* 8-mn groups back to back */
        *lbo = (uint32_t)(mns / 8) * 128 + 256; /* the second 8 of k after a gap */
    } else {
        *sbo = atom;     /* the two 8-k groups back to back */
        *lbo = 3 * atom; /* the next line's worth of mn after a gap */
    }
}

struct wgmma_case {
    int n, ta, tb, rs;
};

template <int N, int TA, int TB, bool RS> static void run_wgmma(bool emulated, std::mt19937 &rng) {
    static const char *const names[4] = {"none", "32B", "64B", "128B"};
    for (int swz = 0; swz < 4; swz++) {
        const uint32_t line_elems = swz ? (16u << swz) / 2 : 8u;
        if (TB && N % line_elems) continue; /* an MN-major B narrower than a swizzle line */
        uint32_t lbo_a, sbo_a, lbo_b, sbo_b;
        test_offsets(swz, TA, 64, &lbo_a, &sbo_a);
        test_offsets(swz, TB, N, &lbo_b, &sbo_b);
        const std::vector<uint16_t> A = random_bf16(rng, 64 * 16), B = random_bf16(rng, 16 * N);
        std::vector<float> C(64 * N);
        std::uniform_real_distribution<float> u(-2.0f, 2.0f);
        for (float &c : C) c = u(rng);
        /* The shared-memory image: A (if from shared memory) then B, each 1024-aligned. */
        std::vector<uint8_t> img;
        if (!RS) place_operand(img, 0, A, 64, 16, true, swz, TA, lbo_a, sbo_a);
        const size_t b_off = (img.size() + 1023) / 1024 * 1024;
        place_operand(img, b_off, B, N, 16, false, swz, TB, lbo_b, sbo_b);
        img.resize((img.size() + 1023) / 1024 * 1024);
        std::vector<float> ref, mag;
        reference_gemm(A, B, C, 64, N, 16, ref, mag);
        uint4 *dimg = to_device_bytes(img);
        uint16_t *dA = to_device(A);
        float *dC = to_device(C), *dD = nullptr;
        CUDA_CHECK(cudaMalloc(&dD, C.size() * sizeof(float)));
        /* alias: SL_LAUNCH takes no comma; the emulator names the kernel after it */
        void (*wgmma_k)(const uint4 *, int, int, int, uint32_t, uint32_t, uint32_t, uint32_t,
                        const uint16_t *, const float *, float *) = wgmma_kernel<N, TA, TB, RS>;
        CUDA_CHECK(cudaFuncSetAttribute(wgmma_k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        (int)img.size()));
        SL_LAUNCH(wgmma_k, 1, 128, img.size(), 0, dimg, (int)(img.size() / 16), (int)b_off, swz,
                  lbo_a, sbo_a, lbo_b, sbo_b, dA, dC, dD);
        CUDA_CHECK(cudaDeviceSynchronize());
        const std::vector<float> D = to_host(dD, C.size());
        int bad = 0;
        for (size_t e = 0; e < D.size(); e++)
            if (!close_to(D[e], ref[e], mag[e], 16, emulated) && bad++ < 4)
                CHECK(false,
                      "wgmma %s m64n%dk16 trans %d/%d swizzle %s: D[%zu][%zu] = %.9g, "
                      "want %.9g",
                      RS ? "RS" : "SS", N, TA, TB, names[swz], e / N, e % N, (double)D[e],
                      (double)ref[e]);
        CHECK(bad == 0, "wgmma %s m64n%dk16 trans %d/%d swizzle %s: %d of %zu wrong",
              RS ? "RS" : "SS", N, TA, TB, names[swz], bad, D.size());
        cudaFree(dimg), cudaFree(dA), cudaFree(dC), cudaFree(dD);
    }
}

/* Every N with A and B K-major, from shared memory and A from registers; the other
 * transposes at a few N. */
template <int N> static void run_wgmma_n(bool emulated, std::mt19937 &rng) {
    run_wgmma<N, 0, 0, false>(emulated, rng);
    run_wgmma<N, 0, 0, true>(emulated, rng);
}
ptx_tally ptx_section_wgmma(bool emulated) {
    std::mt19937 rng(21);
    run_wgmma_n<16>(emulated, rng);
    run_wgmma_n<32>(emulated, rng);
    run_wgmma_n<48>(emulated, rng);
    run_wgmma_n<64>(emulated, rng);
    run_wgmma_n<80>(emulated, rng);
    run_wgmma_n<96>(emulated, rng);
    run_wgmma_n<112>(emulated, rng);
    run_wgmma_n<128>(emulated, rng);
    run_wgmma_n<144>(emulated, rng);
    run_wgmma_n<160>(emulated, rng);
    run_wgmma_n<176>(emulated, rng);
    run_wgmma_n<192>(emulated, rng);
    run_wgmma_n<208>(emulated, rng);
    run_wgmma_n<224>(emulated, rng);
    run_wgmma_n<240>(emulated, rng);
    run_wgmma_n<256>(emulated, rng);
    run_wgmma<64, 0, 1, false>(emulated, rng);
    run_wgmma<64, 1, 0, false>(emulated, rng);
    run_wgmma<64, 1, 1, false>(emulated, rng);
    run_wgmma<64, 0, 1, true>(emulated, rng);
    run_wgmma<256, 0, 1, false>(emulated, rng);
    run_wgmma<256, 1, 1, false>(emulated, rng);
    run_wgmma<256, 0, 1, true>(emulated, rng);
    return ptx_tally_here();
}

/* ---- wgmma: k-slices of TMA-shaped tiles chained on one accumulator -------------------------- */

/* A [64][64] K-major with 128B swizzle (what a TMA box of 64 x 64 bf16 writes), B either
 * [N][64] K-major (like K in S = Q K^T) or [64][N] MN-major in 64-column blocks (like V in
 * O = P V), four k-slices issued back to back on the same accumulators, one commit, one wait. */
template <int N, int TB>
__global__ void __launch_bounds__(128)
    wgmma_chain_kernel(const uint4 *img, int img_chunks, int b_off, float *D) {
    SL_DYNAMIC_SMEM_1024(uint4, smem);
    load_image(smem, img, img_chunks);
    float d[N / 2];
    const uint64_t da = sl_wgmma_desc(smem, SL_SWIZZLE_128B, 16, 1024);
    const uint64_t db =
        TB ? sl_wgmma_desc((const char *)smem + b_off, SL_SWIZZLE_128B, 64 * 128, 1024)
           : sl_wgmma_desc((const char *)smem + b_off, SL_SWIZZLE_128B, 16, 1024);
    sl_wgmma_fence();
    for (int s = 0; s < 4; s++)
        sl_wgmma_bf16_ss<N, 0, TB>(d, sl_wgmma_desc_add(da, 32 * s),
                                   sl_wgmma_desc_add(db, TB ? 2048 * s : 32 * s), s > 0);
    sl_wgmma_commit();
    sl_wgmma_wait<0>();
    sl_wgmma_fence_operand(d);
    for (int r = 0; r < N / 2; r++) D[acc_index(threadIdx.x, r, N)] = d[r];
}

template <int N, int TB> static void run_chain(bool emulated, std::mt19937 &rng) {
    const std::vector<uint16_t> A = random_bf16(rng, 64 * 64), B = random_bf16(rng, 64 * N);
    std::vector<uint8_t> img;
    place_operand(img, 0, A, 64, 64, true, SL_SWIZZLE_128B, false, 16, 1024);
    const size_t b_off = img.size();
    place_operand(img, b_off, B, N, 64, false, SL_SWIZZLE_128B, TB, TB ? 64 * 128 : 16, 1024);
    img.resize((img.size() + 1023) / 1024 * 1024);
    std::vector<float> ref, mag, C(64 * N, 0.0f);
    reference_gemm(A, B, C, 64, N, 64, ref, mag);
    uint4 *dimg = to_device_bytes(img);
    float *dD = nullptr;
    CUDA_CHECK(cudaMalloc(&dD, C.size() * sizeof(float)));
    void (*chain_k)(const uint4 *, int, int, float *) = wgmma_chain_kernel<N, TB>;
    CUDA_CHECK(cudaFuncSetAttribute(chain_k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)img.size()));
    SL_LAUNCH(chain_k, 1, 128, img.size(), 0, dimg, (int)(img.size() / 16), (int)b_off, dD);
    CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<float> D = to_host(dD, C.size());
    int bad = 0;
    for (size_t e = 0; e < D.size(); e++) bad += !close_to(D[e], ref[e], mag[e], 64, emulated);
    CHECK(bad == 0, "wgmma k-slices m64n%d, B %s-major: %d of %zu wrong (D[0] %.9g vs %.9g)", N,
          TB ? "N" : "K", bad, D.size(), (double)D[0], (double)ref[0]);
    cudaFree(dimg), cudaFree(dD);
}

ptx_tally ptx_section_wgmma_chain(bool emulated) {
    std::mt19937 rng(33);
    run_chain<64, 0>(emulated, rng);
    run_chain<128, 0>(emulated, rng);
    run_chain<64, 1>(emulated, rng);
    run_chain<128, 1>(emulated, rng);
    return ptx_tally_here();
}

/* ---- mbarrier phases and named barriers -------------------------------------------------- */

/* 64 threads, an mbarrier counting 64 arrivals (thread 0 arrives twice and thread 1 never: the
 * count is of arrivals, not threads) for four phases. out[phase][t]: whether the phase was
 * complete after the wait (1), and the next phase's parity still open (0). */
__global__ void mbar_phase_kernel(int *out) {
    __shared__ uint64_t bar;
    const int t = threadIdx.x;
    if (t == 0) sl_mbar_init(&bar, 64);
    __syncthreads();
    for (int phase = 0; phase < 4; phase++) {
        const uint32_t parity = phase & 1;
        if (t == 0) sl_mbar_arrive(&bar);
        if (t != 1) sl_mbar_arrive(&bar);
        sl_mbar_wait(&bar, parity);
        out[(2 * phase) * 64 + t] = sl_mbar_test_wait(&bar, parity);
        out[(2 * phase + 1) * 64 + t] = sl_mbar_test_wait(&bar, parity ^ 1);
        __syncthreads(); /* before anyone arrives for the next phase */
    }
    if (t == 0) sl_mbar_inval(&bar);
}

/* Warps 0-3 produce into a shared buffer, warps 4-7 consume, three rounds, synchronized only by
 * named barriers: 1 (full: producers arrive, consumers sync) and 2 (empty: the reverse). */
__global__ void named_barrier_kernel(float *out) {
    __shared__ float buf[128];
    const int t = threadIdx.x;
    for (int round = 0; round < 3; round++) {
        if (t < 128) {
            if (round > 0) sl_named_bar_sync(2, 256);
            buf[t] = (float)(round * 1000 + t);
            sl_named_bar_arrive(1, 256);
        } else {
            sl_named_bar_sync(1, 256);
            out[round * 128 + (t - 128)] = buf[255 - t] + 0.5f;
            if (round < 2) sl_named_bar_arrive(2, 256);
        }
    }
}

ptx_tally ptx_section_barriers() {
    int *dout = nullptr;
    CUDA_CHECK(cudaMalloc(&dout, 8 * 64 * sizeof(int)));
    SL_LAUNCH(mbar_phase_kernel, 1, 64, 0, 0, dout);
    CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<int> o = to_host(dout, 8 * 64);
    int bad = 0;
    for (int phase = 0; phase < 4; phase++)
        for (int t = 0; t < 64; t++)
            bad += o[(2 * phase) * 64 + t] != 1 || o[(2 * phase + 1) * 64 + t] != 0;
    CHECK(bad == 0, "mbarrier phases: %d wrong test_wait results (phase 0 thread 5: %d %d)", bad,
          o[5], o[64 + 5]);
    cudaFree(dout);
    float *df = nullptr;
    CUDA_CHECK(cudaMalloc(&df, 3 * 128 * sizeof(float)));
    SL_LAUNCH(named_barrier_kernel, 1, 256, 0, 0, df);
    CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<float> f = to_host(df, 3 * 128);
    bad = 0;
    for (int round = 0; round < 3; round++)
        for (int i = 0; i < 128; i++)
            bad += f[round * 128 + i] != (float)(round * 1000 + 127 - i) + 0.5f;
    CHECK(bad == 0, "named barriers: %d wrong values", bad);
    cudaFree(df);
    return ptx_tally_here();
}

/* ---- cost (`test_ptx_sm90 bench`, for the figures in emu/README.md) ----------------------------
 */

/* One warpgroup: `iters` rounds of fence, four chained m64nNk16 wgmmas (a 64 x N x 64 product
 * from shared memory), commit, wait. */
template <int N> __global__ void __launch_bounds__(128) wgmma_bench_kernel(float *out, int iters) {
    SL_DYNAMIC_SMEM_1024(uint16_t, smem);
    for (int i = threadIdx.x; i < (64 + N) * 64; i += 128) smem[i] = 0x3c00; /* 2^-7 */
    sl_fence_proxy_async();
    __syncthreads();
    const uint64_t da = sl_wgmma_desc(smem, SL_SWIZZLE_128B, 16, 1024);
    const uint64_t db = sl_wgmma_desc(smem + 64 * 64, SL_SWIZZLE_128B, 16, 1024);
    float d[N / 2];
    for (int it = 0; it < iters; it++) {
        sl_wgmma_fence();
        for (int k = 0; k < 4; k++)
            sl_wgmma_bf16_ss<N, 0, 0>(d, sl_wgmma_desc_add(da, 32 * k),
                                      sl_wgmma_desc_add(db, 32 * k), it > 0 || k > 0);
        sl_wgmma_commit();
        sl_wgmma_wait<0>();
    }
    out[threadIdx.x] = d[0];
}

template <int N> static void bench_n() {
    float *f = nullptr;
    CUDA_CHECK(cudaMalloc(&f, 128 * sizeof(float)));
    const int iters = 500;
    const int smem = (64 + N) * 64 * 2;
    void (*bench_k)(float *, int) = wgmma_bench_kernel<N>;
    CUDA_CHECK(cudaFuncSetAttribute(bench_k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    for (int rep = 0; rep < 3; rep++) {
        cudaEvent_t e0, e1;
        CUDA_CHECK(cudaEventCreate(&e0));
        CUDA_CHECK(cudaEventCreate(&e1));
        const std::clock_t c0 = std::clock();
        CUDA_CHECK(cudaEventRecord(e0, 0));
        SL_LAUNCH(bench_k, 1, 128, smem, 0, f, iters);
        CUDA_CHECK(cudaEventRecord(e1, 0));
        CUDA_CHECK(cudaEventSynchronize(e1));
        const double cpu_ms = 1e3 * (double)(std::clock() - c0) / CLOCKS_PER_SEC;
        float ms = 0;
        CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
        printf("bench: %d x 4 wgmma m64n%dk16 (one warpgroup): %.1f ms, %.1f us per wgmma; this "
               "process's CPU time %.1f us per wgmma (race check doubles the runs: "
               "SLUICE_EMU_RACECHECK=0)\n",
               iters, N, (double)ms, ms * 1e3 / (4.0 * iters), cpu_ms * 1e3 / (4.0 * iters));
        cudaEventDestroy(e0), cudaEventDestroy(e1);
    }
    cudaFree(f);
}

/* `test_ptx_sm90 bench` (tests/test_ptx_sm90_main.cu). */
int ptx_bench() {
    bench_n<64>();
    bench_n<128>();
    bench_n<256>();
    return emu_finish("test_ptx_sm90 bench");
}
