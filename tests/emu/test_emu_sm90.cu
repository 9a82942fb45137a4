/*
 * tests/emu/test_emu_sm90.cu - the emulator's checks of the Hopper instructions
 * (core/ptx_sm90.cuh, emu/README.md "Hopper instructions"): each misuse is flagged with a
 * message saying what was wrong, each faulty kernel in a child process (a fault aborts it, as
 * in test_emu_faults); the same kernels used correctly run clean, so that a check cannot pass
 * for the wrong reason. Also: what a kernel reads when it skips a wait (the emulator's NaN),
 * and cuTensorMapEncodeTiled's argument checks. Correct results of the instructions are
 * tests/test_ptx_sm90.cu's business.
 */
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/cuda_common.cuh"
#include "core/ptx_sm90.cuh"
#include "tests/emu/emu_test.h"

/* ---- wgmma ---------------------------------------------------------------------------------- */

enum wg_mode {
    wg_ok,
    wg_no_wait,
    wg_write_in_flight,
    wg_no_fence,
    wg_read_before_wait,
    wg_smem_changed,
    wg_no_proxy_fence,
    wg_partial,
    wg_mismatch,
    wg_outside,
    wg_no_refence,
    wg_changed_before_last_wait,
};

/* One m64n16k16 wgmma with A and B K-major without swizzle (A at 0, B at 2048), used well
 * (wg_ok) or in one wrong way. out[t]: the thread's first accumulator. */
__global__ void wgmma_misuse_kernel(int mode, float *out) {
    SL_DYNAMIC_SMEM_1024(uint16_t, smem);
    __shared__ int past_wait; /* threads past their wait (wg_changed_before_last_wait) */
    const int t = threadIdx.x;
    for (int i = t; i < 2048; i += blockDim.x) smem[i] = 0x3f80; /* 1.0 */
    if (t == 0) past_wait = 0;
    if (mode != wg_no_proxy_fence) sl_fence_proxy_async();
    __syncthreads();
    if (mode == wg_partial && t >= 96) return;
    float d[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    const uint64_t da = sl_wgmma_desc(smem, SL_SWIZZLE_NONE, 128, 256);
    uint64_t db = sl_wgmma_desc(smem + 1024, SL_SWIZZLE_NONE, 128, 256);
    if (mode == wg_mismatch && t == 5) db = sl_wgmma_desc_add(db, 16);
    if (mode == wg_outside) db = sl_wgmma_desc_add(db, 1 << 16);
    if (mode != wg_no_fence) sl_wgmma_fence();
    sl_wgmma_bf16_ss<16, 0, 0>(d, da, db, 1);
    if (mode == wg_write_in_flight) d[3] = 2.0f;
    if (mode == wg_read_before_wait) out[t] = d[0];
    if (mode == wg_smem_changed && t == 0) smem[1024 + 7] = 0x4000;
    sl_wgmma_commit();
    if (mode == wg_no_wait) return;
    sl_wgmma_wait<0>();
    /* the first thread past its wait changes an operand (as a stage released before the other
     * threads' waits and refilled would): their waits come a pass later */
    if (mode == wg_changed_before_last_wait && atomicAdd(&past_wait, 1) == 0)
        smem[1024 + 7] = 0x4000;
    if (mode == wg_no_refence) { /* a second wgmma after the wait, without a new fence */
        sl_wgmma_bf16_ss<16, 0, 0>(d, da, db, 1);
        sl_wgmma_commit();
        sl_wgmma_wait<0>();
    }
    if (mode != wg_read_before_wait) out[t] = d[0];
}

/* Overlapping accumulators of a different shape: an n16 (8 registers) over registers 4..11
 * while an n16 over 0..7 is in flight. */
__global__ void wgmma_overlap_kernel(float *out) {
    SL_DYNAMIC_SMEM_1024(uint16_t, smem);
    for (int i = threadIdx.x; i < 2048; i += blockDim.x) smem[i] = 0x3f80;
    sl_fence_proxy_async();
    __syncthreads();
    float d[12] = {0};
    const uint64_t da = sl_wgmma_desc(smem, SL_SWIZZLE_NONE, 128, 256);
    const uint64_t db = sl_wgmma_desc(smem + 1024, SL_SWIZZLE_NONE, 128, 256);
    sl_wgmma_fence();
    sl_wgmma_bf16_ss<16, 0, 0>(*(float(*)[8]) & d[0], da, db, 1);
    sl_wgmma_bf16_ss<16, 0, 0>(*(float(*)[8]) & d[4], da, db, 1);
    sl_wgmma_commit();
    sl_wgmma_wait<0>();
    out[threadIdx.x] = d[0];
}

/* ---- mbarrier and TMA ----------------------------------------------------------------------- */

enum mb_mode {
    mb_ok,
    mb_deadlock,
    mb_uninit,
    mb_over_arrive,
    mb_no_init_fence,
    mb_never_waited,
    mb_read_before_wait,
    mb_spin_deadlock,
    mb_store_no_wait,
    mb_store_changed,
    mb_store_no_fence,
    mb_after_inval,
    mb_load_unaligned,
    mb_store_unaligned,
    mb_store_negative,
    mb_store_ragged,
};

/* 128 threads; thread 0 loads a 16 x 64 bf16 tile into shared memory with TMA on an mbarrier,
 * everyone waits and copies it out; then the tile goes back out through a TMA store. */
__global__ void tma_misuse_kernel(const __grid_constant__ CUtensorMap map,
                                  const __grid_constant__ CUtensorMap omap, int mode,
                                  uint16_t *out) {
    SL_DYNAMIC_SMEM_1024(uint8_t, smem);
    uint64_t *bar = (uint64_t *)(smem + 4096);
    const int t = threadIdx.x;
    if (t == 0 && mode != mb_uninit) {
        sl_mbar_init(bar, 1);
        if (mode == mb_after_inval) sl_mbar_inval(bar);
        if (mode != mb_no_init_fence) sl_fence_mbarrier_init();
    }
    __syncthreads();
    if (mode == mb_deadlock) {
        sl_mbar_wait(bar, 0); /* nobody arrives */
        return;
    }
    if (mode == mb_spin_deadlock) {
        if (t == 0)
            while (!sl_mbar_test_wait(bar, 0)) {
            }
        return;
    }
    if (t == 0) {
        sl_mbar_arrive_expect_tx(bar, 2048);
        if (mode == mb_over_arrive) sl_mbar_arrive(bar);
        /* an innermost coordinate off a 16-byte boundary: the H200 raised an illegal instruction */
        sl_tma_load_2d(smem, &map, bar, mode == mb_load_unaligned ? 3 : 0, 0);
    }
    if (mode == mb_never_waited) return;
    if (mode == mb_read_before_wait && t == 0) /* the issuing thread, before its wait */
        for (int i = 0; i < 1024; i++) out[i] = ((const uint16_t *)smem)[i];
    sl_mbar_wait(bar, 0);
    if (mode != mb_read_before_wait)
        for (int i = t; i < 1024; i += 128) out[i] = ((const uint16_t *)smem)[i];
    __syncthreads();
    /* The tile, doubled, back out. */
    uint16_t *tile = (uint16_t *)(smem + 2048);
    for (int i = t; i < 1024; i += 128) tile[i] = ((const uint16_t *)smem)[i];
    if (mode != mb_store_no_fence) sl_fence_proxy_async();
    __syncthreads();
    if (t == 0) {
        sl_tma_store_2d(&omap, tile,
                        mode == mb_store_unaligned  ? 4
                        : mode == mb_store_negative ? -8
                                                    : 0,
                        0);
        sl_tma_store_commit();
        if (mode == mb_store_changed) tile[3] = 0;
        if (mode != mb_store_no_wait) sl_tma_store_wait<0>();
    }
}

/* ---- named barriers and setmaxnreg ---------------------------------------------------------- */

enum nb_mode {
    nb_ok,
    nb_deadlock,
    nb_partial_warp,
    nb_id0,
    mr_partial,
    mr_range,
    mr_block,
    mr_pool_ok,
    mr_pool_over
};

__global__ void sync_misuse_kernel(int mode, int *out) {
    const int t = threadIdx.x;
    switch (mode) {
    case nb_ok:
        if (t < 64) sl_named_bar_sync(1, 64);
        sl_setmaxnreg_inc<232>();
        break;
    case nb_deadlock:
        if (t >= 64) return;
        sl_named_bar_sync(1, 128); /* only 64 of the 128 come */
        break;
    case nb_partial_warp:
        if (t % 32 >= 16 || t >= 64) return;
        sl_named_bar_sync(1, 32); /* half of warp 0 and half of warp 1 */
        break;
    case nb_id0:
        sl_named_bar_sync(0, 128);
        break;
    case mr_partial:
        if (t < 32) sl_setmaxnreg_inc<232>(); /* one warp of the warpgroup */
        break;
    case mr_range:
        sl_emu::setmaxnreg(20, true); /* below the range (the wrapper's static_assert stops this) */
        break;
    case mr_block:
        sl_setmaxnreg_dec<40>(); /* launched with 96 threads: no whole warpgroup */
        break;
    case mr_pool_ok: /* 384 threads hold 168 each: 128 x 24 + 256 x 240 = 384 x 168 */
        if (t < 128)
            sl_setmaxnreg_dec<24>();
        else
            sl_setmaxnreg_inc<240>();
        break;
    case mr_pool_over: /* 128 x 32 + 256 x 240 = 65,536 > 384 x 168: the second .inc waits for
                        * ever (an H200 hung so, 2026-11-27) */
        if (t < 128)
            sl_setmaxnreg_dec<32>();
        else
            sl_setmaxnreg_inc<240>();
        break;
    }
    out[t] = 1;
}

/* ---- the cases ------------------------------------------------------------------------------ */

static CUtensorMap tile_map(void *p, int rows, int cols = 64) {
    CUtensorMap m;
    const cuuint64_t dims[2] = {(cuuint64_t)cols, (cuuint64_t)rows}, strides[1] = {128};
    const cuuint32_t box[2] = {64, 16}, ones[2] = {1, 1};
    /* the driver function itself, with cuda.h's signature */
    const CUresult r =
        cuTensorMapEncodeTiled(&m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, p, dims, strides, box, ones,
                               CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                               CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    CHECK(r == CUDA_SUCCESS, "cuTensorMapEncodeTiled: %d", (int)r);
    return m;
}

static int run_case(const std::string &c) {
    float *f = nullptr;
    int *n = nullptr;
    uint16_t *src = nullptr, *dst = nullptr, *out = nullptr;
    cudaMalloc((void **)&f, 256 * sizeof(float));
    cudaMalloc((void **)&n, 384 * sizeof(int));
    cudaMalloc((void **)&src, 16 * 64 * 2);
    cudaMalloc((void **)&dst, 16 * 64 * 2);
    cudaMalloc((void **)&out, 16 * 64 * 2);
    cudaMemset(src, 0x3f, 16 * 64 * 2);
    static const char *const wg[] = {"wg_ok",
                                     "wg_no_wait",
                                     "wg_write_in_flight",
                                     "wg_no_fence",
                                     "wg_read_before_wait",
                                     "wg_smem_changed",
                                     "wg_no_proxy_fence",
                                     "wg_partial",
                                     "wg_mismatch",
                                     "wg_outside",
                                     "wg_no_refence",
                                     "wg_changed_before_last_wait"};
    for (int m = 0; m < (int)(sizeof wg / sizeof *wg); m++)
        if (c == wg[m]) SL_LAUNCH(wgmma_misuse_kernel, 1, 128, 4096, 0, m, f);
    if (c == "wg_small_block") SL_LAUNCH(wgmma_misuse_kernel, 1, 64, 4096, 0, (int)wg_ok, f);
    if (c == "wg_overlap") SL_LAUNCH(wgmma_overlap_kernel, 1, 128, 4096, 0, f);
    static const char *const mb[] = {"mb_ok",
                                     "mb_deadlock",
                                     "mb_uninit",
                                     "mb_over_arrive",
                                     "mb_no_init_fence",
                                     "mb_never_waited",
                                     "mb_read_before_wait",
                                     "mb_spin_deadlock",
                                     "mb_store_no_wait",
                                     "mb_store_changed",
                                     "mb_store_no_fence",
                                     "mb_after_inval",
                                     "mb_load_unaligned",
                                     "mb_store_unaligned",
                                     "mb_store_negative",
                                     "mb_store_ragged"};
    for (int m = 0; m < (int)(sizeof mb / sizeof *mb); m++)
        if (c == mb[m]) {
            const CUtensorMap in = tile_map(src, 16),
                              o = tile_map(dst, 16, m == mb_store_ragged ? 60 : 64);
            SL_LAUNCH(tma_misuse_kernel, 1, 128, 4096 + 64, 0, in, o, m, out);
        }
    static const char *const nb[] = {"nb_ok",    "nb_deadlock", "nb_partial_warp",
                                     "nb_id0",   "mr_partial",  "mr_range",
                                     "mr_block", "mr_pool_ok",  "mr_pool_over"};
    for (int m = 0; m < (int)(sizeof nb / sizeof *nb); m++)
        if (c == nb[m])
            SL_LAUNCH(sync_misuse_kernel, 1,
                      m == mr_block     ? 96
                      : m >= mr_pool_ok ? 384
                                        : 128,
                      0, 0, m, n);
    return cudaDeviceSynchronize() == cudaSuccess && emu_failures == 0 ? 0 : 3;
}

static void expect_fault(const char *self, const char *name, const char *needle,
                         const char *needle2 = nullptr) {
    const emu_child r = emu_run_child(self, name);
    CHECK(!(r.exited && r.code == 0) && emu_has(r, "FAULT") && emu_has(r, needle) &&
              (!needle2 || emu_has(r, needle2)),
          "%s: expected an emulator fault mentioning '%s'%s%s; exit %d signal %d, output: %s", name,
          needle, needle2 ? " and " : "", needle2 ? needle2 : "", r.code, r.signal, r.err.c_str());
}
static void expect_clean(const char *self, const char *name) {
    const emu_child r = emu_run_child(self, name);
    CHECK(r.exited && r.code == 0 && !emu_has(r, "FAULT"),
          "%s: expected a clean run; exit %d, output: %s", name, r.code, r.err.c_str());
}

/* What a kernel that skips a wait reads: the emulator's 0xff bytes (NaN). */
static void test_reads_before_waits() {
    float *f = nullptr;
    CUDA_CHECK(cudaMalloc(&f, 128 * sizeof(float)));
    SL_LAUNCH(wgmma_misuse_kernel, 1, 128, 4096, 0, (int)wg_read_before_wait, f);
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<float> h(128);
    CUDA_CHECK(cudaMemcpy(h.data(), f, 128 * sizeof(float), cudaMemcpyDeviceToHost));
    int nan = 0;
    for (float x : h) nan += std::isnan(x);
    CHECK(nan == 128, "accumulators read before wgmma.wait_group: %d of 128 NaN", nan);
    uint16_t *src = nullptr, *dst = nullptr, *out = nullptr;
    CUDA_CHECK(cudaMalloc(&src, 2048));
    CUDA_CHECK(cudaMalloc(&dst, 2048));
    CUDA_CHECK(cudaMalloc(&out, 2048));
    CUDA_CHECK(cudaMemset(src, 0x3f, 2048));
    const CUtensorMap in = tile_map(src, 16), o = tile_map(dst, 16);
    SL_LAUNCH(tma_misuse_kernel, 1, 128, 4096 + 64, 0, in, o, (int)mb_read_before_wait, out);
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<uint16_t> u(1024), v(1024);
    CUDA_CHECK(cudaMemcpy(u.data(), out, 2048, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(v.data(), dst, 2048, cudaMemcpyDeviceToHost));
    int poison = 0, stored = 0;
    for (int i = 0; i < 1024; i++) {
        poison += u[i] == 0xffff;
        stored += v[i] == 0x3f3f;
    }
    CHECK(poison == 1024, "a TMA tile read before its mbarrier wait: %d of 1024 elements 0xffff",
          poison);
    CHECK(stored == 1024, "the TMA store after the wait: %d of 1024 elements stored", stored);
    cudaFree(f), cudaFree(src), cudaFree(dst), cudaFree(out);
}

/* cuTensorMapEncodeTiled refuses what cuda.h forbids (and what the emulator does not do). */
static void test_encode_errors() {
    void *p = nullptr;
    CUDA_CHECK(cudaMalloc(&p, 1 << 16));
    CUtensorMap m;
    struct bad {
        const char *what;
        uintptr_t offset;
        cuuint64_t dim0, stride;
        cuuint32_t box0, estride;
        CUtensorMapSwizzle swz;
    } cases[] = {
        {"a global address not 16-byte aligned", 8, 64, 128, 64, 1, CU_TENSOR_MAP_SWIZZLE_NONE},
        {"a stride not a multiple of 16", 0, 64, 120, 64, 1, CU_TENSOR_MAP_SWIZZLE_NONE},
        {"a box dimension above 256", 0, 512, 1024, 300, 1, CU_TENSOR_MAP_SWIZZLE_NONE},
        {"a box row of 14 bytes", 0, 64, 128, 7, 1, CU_TENSOR_MAP_SWIZZLE_NONE},
        {"a 256-byte box row with 128B swizzle", 0, 256, 512, 128, 1, CU_TENSOR_MAP_SWIZZLE_128B},
        {"a 64-byte box row with 128B swizzle (not emulated)", 0, 64, 128, 32, 1,
         CU_TENSOR_MAP_SWIZZLE_128B},
        {"element stride 2 (not emulated)", 0, 64, 128, 64, 2, CU_TENSOR_MAP_SWIZZLE_NONE},
        {"a tensor past its allocation", 0, 64, 8192, 64, 1, CU_TENSOR_MAP_SWIZZLE_NONE},
    };
    for (const bad &b : cases) {
        const cuuint64_t dims[2] = {b.dim0, 16}, strides[1] = {b.stride};
        const cuuint32_t box[2] = {b.box0, 4}, es[2] = {1, b.estride};
        const CUresult r = cuTensorMapEncodeTiled(
            &m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (char *)p + b.offset, dims, strides, box, es,
            CU_TENSOR_MAP_INTERLEAVE_NONE, b.swz, CU_TENSOR_MAP_L2_PROMOTION_NONE,
            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
        CHECK(r == CUDA_ERROR_INVALID_VALUE, "cuTensorMapEncodeTiled with %s: %d, want %d", b.what,
              (int)r, (int)CUDA_ERROR_INVALID_VALUE);
    }
    void *fn = nullptr;
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSuccess;
    CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuMemAlloc", &fn, 12000, cudaEnableDefault, &q));
    CHECK(fn == nullptr && q == cudaDriverEntryPointSymbolNotFound,
          "a driver entry point the emulator lacks: %p, status %d", fn, (int)q);
    CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000,
                                                cudaEnableDefault, &q));
    CHECK(fn == (void *)&cuTensorMapEncodeTiled && q == cudaDriverEntryPointSuccess,
          "cuTensorMapEncodeTiled through the runtime: %p, status %d", fn, (int)q);
    cudaFree(p);
}

int main(int argc, char **argv) {
    if (argc > 1) return run_case(argv[1]);
    const char *self = argv[0];
    test_reads_before_waits();
    test_encode_errors();
    /* wgmma */
    expect_clean(self, "wg_ok");
    expect_fault(self, "wg_no_wait", "not retired by wgmma.wait_group");
    expect_fault(self, "wg_write_in_flight", "written while the wgmma was in flight");
    expect_fault(self, "wg_no_fence", "without a wgmma.fence");
    expect_fault(self, "wg_no_refence", "without a wgmma.fence");
    expect_fault(self, "wg_smem_changed", "changed between the issue and the wait");
    expect_fault(self, "wg_changed_before_last_wait", "changed between the issue and the wait",
                 "its warpgroup's last thread to retire it");
    expect_fault(self, "wg_no_proxy_fence", "no fence.proxy.async");
    expect_fault(self, "wg_partial", "deadlock", "issued by 96 of its 128 threads");
    expect_fault(self, "wg_mismatch", "differ from those of the warpgroup's first thread");
    expect_fault(self, "wg_outside", "outside the block's 4096 bytes of dynamic shared memory");
    expect_fault(self, "wg_small_block", "do not fill");
    expect_fault(self, "wg_overlap", "overlap those of wgmma #0");
    /* mbarriers and TMA */
    expect_clean(self, "mb_ok");
    expect_fault(self, "mb_deadlock", "deadlock", "mbarrier.try_wait.parity 0 at");
    expect_fault(self, "mb_deadlock", "test_emu_sm90.cu", "initialized at");
    expect_fault(self, "mb_uninit", "not an initialized mbarrier");
    expect_fault(self, "mb_after_inval", "not an initialized mbarrier");
    expect_fault(self, "mb_over_arrive", "no arrivals left");
    expect_fault(self, "mb_no_init_fence", "no fence.mbarrier_init");
    expect_fault(self, "mb_never_waited", "never completed");
    expect_fault(self, "mb_spin_deadlock", "deadlock", "spins on mbarrier.test_wait.parity 0");
    expect_fault(self, "mb_store_no_wait", "not retired by cp.async.bulk.wait_group");
    expect_fault(self, "mb_store_changed", "changed before the wait");
    expect_fault(self, "mb_store_no_fence", "no fence.proxy.async");
    expect_fault(self, "mb_load_unaligned", "(load): the innermost coordinate 3", "16 bytes");
    expect_fault(self, "mb_store_unaligned", "(store): the innermost coordinate 4", "16 bytes");
    expect_fault(self, "mb_store_negative", "(store): a negative innermost coordinate (-8)");
    expect_fault(self, "mb_store_ragged", "innermost extent (60 elements of 2 bytes)");
    /* named barriers and setmaxnreg */
    expect_clean(self, "nb_ok");
    expect_fault(self, "nb_deadlock", "deadlock", "bar.sync 1, 128 at");
    expect_fault(self, "nb_partial_warp", "every thread of a warp");
    expect_fault(self, "nb_id0", "0 is __syncthreads()'s barrier");
    expect_fault(self, "mr_partial", "different setmaxnreg sequences");
    expect_fault(self, "mr_range", "multiple of 8 in 24..256");
    expect_fault(self, "mr_block", "do not fill");
    expect_clean(self, "mr_pool_ok");
    expect_fault(self, "mr_pool_over", "deadlock", "setmaxnreg.inc 240 in warpgroup");
    return emu_finish("test_emu_sm90");
}
