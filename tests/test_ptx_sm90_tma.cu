/*
 * tests/test_ptx_sm90_tma.cu - part of test_ptx_sm90 (tests/test_ptx_sm90.cu says what the
 * program checks and how it runs): the TMA sections. Tile loads (2D, 3D, 4D, every swizzle,
 * boxes sticking out of the tensor) compared byte for byte with the expected shared-memory
 * image, tile stores, and fp32 add reductions.
 */
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/cuda_common.cuh"
#include "core/ptx_sm90.cuh"
#include "tests/emu/emu_test.h"
#include "tests/test_ptx_sm90.h"

/* ---- TMA loads ------------------------------------------------------------------------------ */

/* Thread 0 initializes the mbarrier, loads box 0 (phase 0) and box 1 at coordinates shifted by
 * one in dimension 1 (phase 1); everyone waits for each phase by its parity and copies the raw
 * shared-memory box out. probes: test_wait results thread 0 saw (see the host). */
__global__ void tma_load_kernel(const __grid_constant__ CUtensorMap map, int rank, int4 c,
                                int box_bytes, uint8_t *out, int *probes) {
    SL_DYNAMIC_SMEM_1024(uint8_t, smem);
    __shared__ uint64_t bar;
    const int t = threadIdx.x;
    if (t == 0) {
        sl_mbar_init(&bar, 1);
        sl_fence_mbarrier_init();
    }
    __syncthreads();
    for (int phase = 0; phase < 2; phase++) {
        uint8_t *dst = smem + phase * ((box_bytes + 1023) / 1024 * 1024);
        if (t == 0) {
            probes[3 * phase] = sl_mbar_test_wait(&bar, phase); /* nobody arrived: false */
            sl_tma_prefetch(&map);
            if (phase == 0) {
                sl_mbar_arrive_expect_tx(&bar, (uint32_t)box_bytes);
            } else { /* the same in two steps */
                sl_mbar_expect_tx(&bar, (uint32_t)box_bytes);
                sl_mbar_arrive(&bar);
            }
            if (rank == 2) sl_tma_load_2d(dst, &map, &bar, c.x, c.y + phase);
            if (rank == 3) sl_tma_load_3d(dst, &map, &bar, c.x, c.y + phase, c.z);
            if (rank == 4) sl_tma_load_4d(dst, &map, &bar, c.x, c.y + phase, c.z, c.w);
        }
        sl_mbar_wait(&bar, phase);
        if (t == 0) {
            probes[3 * phase + 1] = sl_mbar_test_wait(&bar, phase);     /* completed: true */
            probes[3 * phase + 2] = sl_mbar_test_wait(&bar, phase ^ 1); /* the next: false */
        }
        for (int i = t; i < box_bytes; i += blockDim.x) out[phase * box_bytes + i] = dst[i];
        __syncthreads(); /* everyone has waited for this phase before thread 0 starts the next */
    }
}

struct tma_case {
    int rank, esize, swz;
    uint64_t dims[4];
    uint32_t box[4];
    int coords[4];
};

/* The cases, each its own process (tests/test_ptx_sm90_main.cu): a sticky error in one (an
 * illegal instruction) would fail every later CUDA call of the process. */
static std::vector<tma_case> tma_cases() {
    std::vector<tma_case> cases;
    /* 2D bf16 [40][96] (rows not a multiple of the box), every swizzle, boxes inside, sticking
     * out at each side, and wholly outside. */
    for (int swz = 0; swz < 4; swz++) {
        const uint32_t inner = swz ? (16u << swz) / 2 : 24; /* elements per box row */
        /* innermost coordinates on 16-byte boundaries (multiples of 8 bf16): the H200 raised an
         * illegal instruction for -5 and 84 (2026-11-26); the emulator refuses them too */
        const int cs[4][2] = {{8, 4}, {-8, -3}, {(96 - (int)inner / 2) / 8 * 8, 40 - 9}, {200, 7}};
        for (const auto &xy : cs)
            cases.push_back(
                tma_case{2, 2, swz, {96, 40, 1, 1}, {inner, 16, 1, 1}, {xy[0], xy[1], 0, 0}});
    }
    /* 3D fp32 [5][12][32] and 4D bf16 [batch 2][seq 37][head 3][dim 64], like attention's Q:
     * one head, 16 positions, 128B swizzle, out of bounds in the outer dimensions. */
    cases.push_back(tma_case{3, 4, 3, {32, 12, 5, 1}, {32, 8, 2, 1}, {0, 6, 4, 0}});
    cases.push_back(tma_case{4, 2, 3, {64, 3, 37, 2}, {64, 1, 16, 1}, {0, 2, 30, 1}});
    cases.push_back(tma_case{4, 2, 0, {64, 3, 37, 2}, {64, 2, 8, 2}, {0, 2, -4, 1}});
    return cases;
}

int ptx_tma_load_cases() {
    return (int)tma_cases().size();
}

std::string ptx_tma_load_case_name(int i) {
    static const char *const names[4] = {"none", "32B", "64B", "128B"};
    const tma_case tc = tma_cases()[(size_t)i];
    char buf[160];
    snprintf(buf, sizeof buf, "%dd %s, box row %u bytes, swizzle %s, at (%d, %d, %d, %d)", tc.rank,
             tc.esize == 2 ? "bf16" : "fp32", tc.box[0] * (uint32_t)tc.esize, names[tc.swz],
             tc.coords[0], tc.coords[1], tc.coords[2], tc.coords[3]);
    return buf;
}

ptx_tally ptx_section_tma_load(int which) {
    static const char *const names[4] = {"none", "32B", "64B", "128B"};
    const std::vector<tma_case> all = tma_cases();
    const std::vector<tma_case> cases(all.begin() + which, all.begin() + which + 1);
    std::mt19937 rng(5);
    for (const tma_case &tc : cases) {
        uint64_t elems = 1;
        for (int d = 0; d < tc.rank; d++) elems *= tc.dims[d];
        std::vector<uint8_t> host(elems * tc.esize);
        for (auto &b : host) b = (uint8_t)(rng() & 0xff);
        uint8_t *dg = to_device(host);
        CUtensorMap map;
        cuuint64_t dims[4], strides[3];
        cuuint32_t box[4];
        uint64_t s = tc.esize;
        for (int d = 0; d < tc.rank; d++) {
            dims[d] = tc.dims[d];
            box[d] = tc.box[d];
            if (d > 0) strides[d - 1] = s;
            s *= tc.dims[d];
        }
        const CUresult r = sl_tensor_map_tiled(&map,
                                               tc.esize == 2 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                             : CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
                                               tc.rank, dg, dims, strides, box, (sl_swizzle)tc.swz);
        CHECK(r == CUDA_SUCCESS, "cuTensorMapEncodeTiled (rank %d, swizzle %s): %d", tc.rank,
              names[tc.swz], (int)r);
        size_t box_bytes = tc.esize;
        for (int d = 0; d < tc.rank; d++) box_bytes *= tc.box[d];
        uint8_t *dout = nullptr;
        int *dprobes = nullptr;
        CUDA_CHECK(cudaMalloc(&dout, 2 * box_bytes));
        CUDA_CHECK(cudaMalloc(&dprobes, 6 * sizeof(int)));
        const size_t smem = 2 * ((box_bytes + 1023) / 1024 * 1024);
        CUDA_CHECK(cudaFuncSetAttribute(tma_load_kernel,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        const int4 c = make_int4(tc.coords[0], tc.coords[1], tc.coords[2], tc.coords[3]);
        SL_LAUNCH(tma_load_kernel, 1, 96, smem, 0, map, tc.rank, c, (int)box_bytes, dout, dprobes);
        CUDA_CHECK(cudaDeviceSynchronize());
        const std::vector<uint8_t> out = to_host(dout, 2 * box_bytes);
        const std::vector<int> probes = to_host(dprobes, 6);
        for (int phase = 0; phase < 2; phase++) {
            int coords[4] = {tc.coords[0], tc.coords[1] + phase, tc.coords[2], tc.coords[3]};
            const std::vector<uint8_t> want =
                tma_box_image(host, tc.rank, tc.esize, tc.dims, tc.box, coords, tc.swz);
            size_t bad = 0, first = 0;
            for (size_t i = 0; i < box_bytes; i++)
                if (out[phase * box_bytes + i] != want[i] && !bad++) first = i;
            CHECK(bad == 0,
                  "TMA load %dd swizzle %s at (%d, %d, %d, %d): %zu of %zu bytes differ from the "
                  "expected shared-memory image, the first at byte %zu (0x%02x, want 0x%02x)",
                  tc.rank, names[tc.swz], coords[0], coords[1], coords[2], coords[3], bad,
                  box_bytes, first, out[phase * box_bytes + first], want[first]);
            CHECK(probes[3 * phase] == 0 && probes[3 * phase + 1] == 1 &&
                      probes[3 * phase + 2] == 0,
                  "mbarrier test_wait in phase %d: before the arrival %d (want 0), after the wait "
                  "%d (want 1), the next phase's parity %d (want 0)",
                  phase, probes[3 * phase], probes[3 * phase + 1], probes[3 * phase + 2]);
        }
        cudaFree(dg), cudaFree(dout), cudaFree(dprobes);
    }
    return ptx_tally_here();
}

/* ---- TMA stores ----------------------------------------------------------------------------- */

/* A box of 16 rows of 64 bf16 (its outer dimensions flattened into rows): every thread writes
 * part of it (value = box index + 1) into shared memory in the store map's swizzled layout,
 * fences for the async proxy, and thread 0 stores it at coordinates c. */
__global__ void tma_store_kernel(const __grid_constant__ CUtensorMap map, int rank, int swz,
                                 int4 c) {
    SL_DYNAMIC_SMEM_1024(uint8_t, smem);
    const int t = threadIdx.x;
    for (int e = t; e < 16 * 64; e += blockDim.x) {
        const int row = e / 64, col = e % 64;
        const uint32_t o = sl_swizzle_offset((sl_swizzle)swz, (uint32_t)(row * 128 + col * 2));
        const uint16_t v = (uint16_t)(e + 1);
        memcpy(smem + o, &v, 2);
    }
    sl_fence_proxy_async();
    __syncthreads();
    if (t == 0) {
        if (rank == 2) sl_tma_store_2d(&map, smem, c.x, c.y);
        if (rank == 3) sl_tma_store_3d(&map, smem, c.x, c.y, c.z);
        if (rank == 4) sl_tma_store_4d(&map, smem, c.x, c.y, c.z, c.w);
        sl_tma_store_commit();
        sl_tma_store_wait_read<0>();
        sl_tma_store_wait<0>();
    }
}

ptx_tally ptx_section_tma_store() {
    struct store_case {
        int rank;
        cuuint64_t dims[4]; /* dims[0] = 96 columns in rows of pitch 104 */
        cuuint32_t box[4];  /* box[0] = 64; the others multiply to 16 */
        int c[4];           /* sticking out at several sides */
    } cases[] = {
        /* Innermost: coordinates and extent on 16-byte boundaries, coordinates not negative.
         * The H200 (2026-11-26) raised an illegal instruction for innermost coordinates 60 and
         * -8, and into rows of 100 elements it wrote up to the 16-byte boundary past each row's
         * end; the emulator refuses all three (test_emu_sm90). */
        {2, {96, 40, 1, 1}, {64, 16, 1, 1}, {56, 30, 0, 0}},
        {3, {96, 12, 3, 1}, {64, 8, 2, 1}, {56, 10, 2, 0}},
        {4, {96, 3, 5, 2}, {64, 2, 4, 2}, {0, 2, 3, 1}},
    };
    const int pitch = 104; /* elements: 208-byte rows, a multiple of 16 */
    for (const store_case &sc : cases)
        for (int swz : {0, 3}) {
            size_t n = pitch;
            cuuint64_t strides[3];
            for (int d = 1; d < sc.rank; d++) {
                strides[d - 1] = n * 2;
                n *= sc.dims[d];
            }
            std::vector<uint16_t> host(n, 0xabcd);
            uint16_t *dg = to_device(host);
            CUtensorMap map;
            CHECK(sl_tensor_map_tiled(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, sc.rank, dg, sc.dims,
                                      strides, sc.box, (sl_swizzle)swz) == CUDA_SUCCESS,
                  "cuTensorMapEncodeTiled (store map, rank %d)", sc.rank);
            CUDA_CHECK(cudaFuncSetAttribute(tma_store_kernel,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, 2048));
            const int4 c = make_int4(sc.c[0], sc.c[1], sc.c[2], sc.c[3]);
            SL_LAUNCH(tma_store_kernel, 1, 64, 2048, 0, map, sc.rank, swz, c);
            CUDA_CHECK(cudaDeviceSynchronize());
            const std::vector<uint16_t> out = to_host(dg, host.size());
            int bad = 0;
            for (size_t e = 0; e < n; e++) {
                /* the element's coordinates, its place in the box (if any) */
                size_t rem = e / pitch, row = 0, row_stride = 1;
                const int x = (int)(e % pitch), bx = x - sc.c[0];
                bool in = x < (int)sc.dims[0] && bx >= 0 && bx < 64;
                for (int d = 1; d < sc.rank; d++) {
                    const int y = (int)(rem % sc.dims[d]), by = y - sc.c[d];
                    rem /= sc.dims[d];
                    in = in && by >= 0 && by < (int)sc.box[d];
                    row += (size_t)(in ? by : 0) * row_stride;
                    row_stride *= sc.box[d];
                }
                const uint16_t want = in ? (uint16_t)(row * 64 + (size_t)bx + 1) : (uint16_t)0xabcd;
                if (out[e] != want && bad++ < 4)
                    CHECK(false, "TMA store %dd (swizzle %d): element %zu = 0x%04x, want 0x%04x",
                          sc.rank, swz, e, out[e], want);
            }
            CHECK(bad == 0, "TMA store %dd (swizzle %d): %d elements wrong", sc.rank, swz, bad);
            cudaFree(dg);
        }
    return ptx_tally_here();
}

/* ---- TMA add reductions (fp32) -------------------------------------------------------------- */

/* Block b adds (b + 1) (e + 1) to the box element e (16 rows of 32 fp32, 128B swizzle: the
 * layout the Hopper attention's dQ tile has) at coordinates c, twice (two operations of one
 * bulk group, from the same shared memory); the blocks run at once on a GPU, so the additions
 * into the same elements meet in L2. */
__global__ void tma_reduce_kernel(const __grid_constant__ CUtensorMap map, int4 c) {
    SL_DYNAMIC_SMEM_1024(uint8_t, smem);
    for (int e = threadIdx.x; e < 16 * 32; e += blockDim.x) {
        const uint32_t o = sl_swizzle_offset(SL_SWIZZLE_128B, (uint32_t)(e * 4));
        *(float *)(smem + o) = (float)((blockIdx.x + 1) * (e + 1));
    }
    sl_fence_proxy_async();
    __syncthreads();
    if (threadIdx.x == 0) {
        sl_tma_reduce_add_4d(&map, smem, c.x, c.y, c.z, c.w);
        sl_tma_reduce_add_4d(&map, smem, c.x, c.y, c.z, c.w);
        sl_tma_store_commit();
        sl_tma_store_wait_read<0>();
        sl_tma_store_wait<0>();
    }
}

ptx_tally ptx_section_tma_reduce() {
    /* [batch 2][seq 40][heads 3][64] fp32; the box: 32 columns, head 1, 16 rows of batch 1
     * from row 32 (8 rows stick out of the sequence and are left alone) */
    const cuuint64_t dims[4] = {64, 3, 40, 2};
    const cuuint64_t strides[3] = {64 * 4, 3 * 64 * 4, 40 * 3 * 64 * 4};
    const cuuint32_t box[4] = {32, 1, 16, 1};
    const int c[4] = {32, 1, 32, 1}, blocks = 4;
    const size_t n = 64 * 3 * 40 * 2;
    std::vector<float> host(n);
    for (size_t e = 0; e < n; e++) host[e] = 0.5f * (float)(e % 7);
    float *dg = to_device(host);
    CUtensorMap map;
    CHECK(sl_tensor_map_tiled(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, dg, dims, strides, box,
                              SL_SWIZZLE_128B) == CUDA_SUCCESS,
          "cuTensorMapEncodeTiled (fp32 reduce map)");
    CUDA_CHECK(
        cudaFuncSetAttribute(tma_reduce_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 2048));
    SL_LAUNCH(tma_reduce_kernel, blocks, 64, 2048, 0, map, make_int4(c[0], c[1], c[2], c[3]));
    CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<float> out = to_host(dg, n);
    int bad = 0;
    for (size_t e = 0; e < n; e++) {
        const int x = (int)(e % 64), h = (int)(e / 64 % 3), r = (int)(e / 192 % 40),
                  b = (int)(e / (192 * 40));
        const int bx = x - c[0], br = r - c[2];
        const bool in = bx >= 0 && bx < 32 && h == c[1] && br >= 0 && br < 16 && b == c[3];
        /* sum over blocks of 2 (b + 1) (e + 1) = 2 (e + 1) blocks (blocks + 1) / 2 */
        const float want =
            host[e] + (in ? (float)((br * 32 + bx + 1) * blocks * (blocks + 1)) : 0.0f);
        if (out[e] != want && bad++ < 4)
            CHECK(false,
                  "TMA reduce add: element %zu (col %d, head %d, row %d, batch %d) = %g, "
                  "want %g",
                  e, x, h, r, b, out[e], want);
    }
    CHECK(bad == 0, "TMA reduce add: %d elements wrong", bad);
    cudaFree(dg);
    return ptx_tally_here();
}
