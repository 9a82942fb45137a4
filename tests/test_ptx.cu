/*
 * tests/test_ptx.cu - core/ptx.cuh's wrappers against the PTX ISA's fragment layouts: an mma
 * tile against a plain matrix product and every lane's D registers, every lane's ldmatrix
 * registers (x1/x2/x4, with and without .trans) on a tile of known values, ldmatrix feeding
 * mma as the attention kernel does, cp.async with commit/wait and zero-fill, and (emulated
 * build) that a read before cp.async.wait_group sees the emulator's poison.
 *
 * The same file runs under the emulator (label emu) and, in the nvcc build, on a GPU (label
 * gpu; exit 77 without one), where the real instructions must pass the same layout checks.
 */
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/cuda_common.cuh"
#include "core/ptx.cuh"
#include "tests/emu/emu_test.h"

/* ---- host side of the layouts (core/ptx.cuh), written from the PTX ISA tables -------------- */

static inline int lane_g(int lane) {
    return lane >> 2;
}
static inline int lane_t(int lane) {
    return lane & 3;
}
static uint16_t bf16_bits(float x) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(x));
}
static float bf16_float(uint16_t b) {
    const uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* ---- kernels: one warp each ------------------------------------------------------------------ */

/* Each lane gathers its A, B, C fragments from row-major global A [16][16], B [16][8] ([k][n])
 * and C [16][8] by the layout, runs the mma, and writes its four D registers (dlane) and D by
 * the layout. */
__global__ void mma_kernel(const uint16_t *A, const uint16_t *B, const float *C, float *D,
                           float *dlane) {
    const int lane = threadIdx.x, g = lane >> 2, t = lane & 3;
    uint32_t a[4], b[2];
    float c[4], d[4];
    for (int i = 0; i < 4; i++) {
        const int row = g + (i & 1) * 8, col = 2 * t + (i >> 1) * 8;
        a[i] = (uint32_t)A[row * 16 + col] | (uint32_t)A[row * 16 + col + 1] << 16;
        c[i] = C[(g + (i >> 1) * 8) * 8 + 2 * t + (i & 1)];
    }
    for (int i = 0; i < 2; i++)
        b[i] = (uint32_t)B[(2 * t + 8 * i) * 8 + g] | (uint32_t)B[(2 * t + 8 * i + 1) * 8 + g]
                                                          << 16;
    sl_mma_bf16_16816(d, a, b, c);
    for (int i = 0; i < 4; i++) {
        dlane[lane * 4 + i] = d[i];
        D[(g + (i >> 1) * 8) * 8 + 2 * t + (i & 1)] = d[i];
    }
}

/* A shared tile [32][64] of b16 values row * 64 + col; lane l addresses row l at column
 * 8 * (l / 8), so matrix i is rows 8i..8i+7, columns 8i..8i+7. out[variant][lane][reg]. */
__global__ void ldmatrix_kernel(uint32_t *out) {
    __shared__ __align__(16) uint16_t tile[32][64];
    const int lane = threadIdx.x;
    for (int c = 0; c < 64; c++) tile[lane][c] = (uint16_t)(lane * 64 + c);
    __syncwarp();
    const void *row = &tile[lane][8 * (lane / 8)];
    uint32_t r[6][4];
    memset(r, 0, sizeof r);
    sl_ldmatrix_x1(r[0], row);
    sl_ldmatrix_x2(r[1], row);
    sl_ldmatrix_x4(r[2], row);
    sl_ldmatrix_x1_trans(r[3], row);
    sl_ldmatrix_x2_trans(r[4], row);
    sl_ldmatrix_x4_trans(r[5], row);
    for (int v = 0; v < 6; v++)
        for (int i = 0; i < 4; i++) out[(v * 32 + lane) * 4 + i] = r[v][i];
}

/* A [16][16] and B [16][8] ([k][n]) through shared memory and ldmatrix: A with .x4, B once with
 * .x2.trans from a [k][n] tile (D0) and once with .x2 from its transpose [n][k] (D1), the two
 * ways the attention kernel reads V and K. Rows padded to keep addresses 16-byte aligned. */
__global__ void ldmatrix_mma_kernel(const uint16_t *A, const uint16_t *B, float *D0, float *D1) {
    __shared__ __align__(16) uint16_t as[16][24];
    __shared__ __align__(16) uint16_t bs[16][8];
    __shared__ __align__(16) uint16_t bts[8][24];
    const int lane = threadIdx.x, g = lane >> 2, t = lane & 3;
    for (int e = lane; e < 256; e += 32) as[e / 16][e % 16] = A[e];
    for (int e = lane; e < 128; e += 32) {
        bs[e / 8][e % 8] = B[e];
        bts[e % 8][e / 8] = B[e];
    }
    __syncwarp();
    uint32_t a[4], b0[2], b1[2];
    sl_ldmatrix_x4(a, &as[lane % 16][(lane / 16) * 8]);
    sl_ldmatrix_x2_trans(b0, &bs[lane % 16][0]);
    sl_ldmatrix_x2(b1, &bts[lane % 8][((lane / 8) % 2) * 8]);
    const float zero[4] = {0, 0, 0, 0};
    float d0[4], d1[4];
    sl_mma_bf16_16816(d0, a, b0, zero);
    sl_mma_bf16_16816(d1, a, b1, zero);
    for (int i = 0; i < 4; i++) {
        D0[(g + (i >> 1) * 8) * 8 + 2 * t + (i & 1)] = d0[i];
        D1[(g + (i >> 1) * 8) * 8 + 2 * t + (i & 1)] = d1[i];
    }
}

/* cp.async: each of 32 threads copies two 16-byte chunks in two groups; the second group's
 * chunk of lane l has l % 17 source bytes (zero-fill). wait_group 1 then 0. Then everything
 * goes back to global memory after a barrier. */
__global__ void cp_async_kernel(const float *src, float *out, float *after_wait1) {
    __shared__ __align__(16) float s[2][32][4];
    const int lane = threadIdx.x;
    sl_cp_async_16(&s[0][lane][0], src + lane * 4);
    sl_cp_async_commit();
    sl_cp_async_16_zfill(&s[1][lane][0], src + 128 + lane * 4, lane % 17);
    sl_cp_async_commit();
    sl_cp_async_wait<1>();
    for (int i = 0; i < 4; i++) after_wait1[lane * 4 + i] = s[0][lane][i];
    sl_cp_async_wait<0>();
    __syncthreads();
    for (int i = 0; i < 4; i++) {
        out[lane * 4 + i] = s[0][(lane + 1) % 32][i];
        out[128 + lane * 4 + i] = s[1][(lane + 1) % 32][i];
    }
}

/* A kernel that forgets the wait: reads its cp.async destination right after the commit (early)
 * and, separately, after a wait_group 0 that does not cover an uncommitted copy (uncommitted).
 * Undefined on a GPU; under the emulator both reads see 0xff bytes. */
__global__ void missing_wait_kernel(const float *src, uint32_t *early, uint32_t *uncommitted) {
    __shared__ __align__(16) uint32_t s[2][32][4];
    const int lane = threadIdx.x;
    sl_cp_async_16(&s[0][lane][0], src + lane * 4);
    sl_cp_async_commit();
    for (int i = 0; i < 4; i++) early[lane * 4 + i] = s[0][lane][i];
    sl_cp_async_16(&s[1][lane][0], src + lane * 4);
    sl_cp_async_wait<0>();
    for (int i = 0; i < 4; i++) uncommitted[lane * 4 + i] = s[1][lane][i];
    sl_cp_async_commit();
    sl_cp_async_wait<0>();
}

/* Faulty uses the emulator must stop (run in child processes, emulated build only). */
__global__ void misaligned_ldmatrix_kernel(uint32_t *out) {
    __shared__ __align__(16) uint16_t tile[32][16];
    const int lane = threadIdx.x;
    for (int c = 0; c < 16; c++) tile[lane][c] = (uint16_t)c;
    __syncwarp();
    uint32_t r[1];
    sl_ldmatrix_x1(r, &tile[lane][1]); /* 2 bytes past the 16-byte boundary */
    out[lane] = r[0];
}
__global__ void partial_warp_mma_kernel(float *out) {
    const uint32_t a[4] = {0, 0, 0, 0}, b[2] = {0, 0};
    const float c[4] = {0, 0, 0, 0};
    float d[4];
    if (threadIdx.x == 31) return; /* lane 31 never reaches the warp-wide mma */
    sl_mma_bf16_16816(d, a, b, c);
    out[threadIdx.x] = d[0];
}

/* For the cost figures in emu/README.md (`test_ptx bench`): `iters` dependent mma and ldmatrix
 * per warp. */
__global__ void bench_kernel(float *out, int iters) {
    __shared__ __align__(16) uint16_t tile[4][32][8];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    for (int c = 0; c < 8; c++) tile[warp][lane][c] = (uint16_t)(0x3f80 + c);
    __syncwarp();
    uint32_t a[4] = {0x3f803f80u, 0x3f803f80u, 0x3f803f80u, 0x3f803f80u}, b[2];
    float d[4] = {0, 0, 0, 0};
    for (int i = 0; i < iters; i++) {
        sl_ldmatrix_x2(b, &tile[warp][lane % 16][0]);
        sl_mma_bf16_16816(d, a, b, d);
    }
    out[threadIdx.x] = d[0] + d[1] + d[2] + d[3];
}

static void bench() {
    float *f = nullptr;
    CUDA_CHECK(cudaMalloc(&f, 128 * sizeof(float)));
    const int iters = 20000;
    for (int rep = 0; rep < 3; rep++) {
        cudaEvent_t e0, e1;
        CUDA_CHECK(cudaEventCreate(&e0));
        CUDA_CHECK(cudaEventCreate(&e1));
        CUDA_CHECK(cudaEventRecord(e0, 0));
        SL_LAUNCH(bench_kernel, 1, 128, 0, 0, f, iters);
        CUDA_CHECK(cudaEventRecord(e1, 0));
        CUDA_CHECK(cudaEventSynchronize(e1));
        float ms = 0;
        CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
        printf("bench: 4 warps x %d (ldmatrix.x2 + mma): %.1f ms, %.0f ns per warp-wide "
               "ldmatrix + mma pair (race check doubles the runs: SLUICE_EMU_RACECHECK=0)\n",
               iters, (double)ms, ms * 1e6 / (4.0 * iters));
        cudaEventDestroy(e0), cudaEventDestroy(e1);
    }
    cudaFree(f);
}

static int run_case(const char *name) {
    if (!strcmp(name, "bench")) {
        bench();
        return emu_finish("test_ptx bench");
    }
    uint32_t *u = nullptr;
    float *f = nullptr;
    CUDA_CHECK(cudaMalloc(&u, 32 * sizeof(uint32_t)));
    CUDA_CHECK(cudaMalloc(&f, 32 * sizeof(float)));
    if (!strcmp(name, "misaligned_ldmatrix")) SL_LAUNCH(misaligned_ldmatrix_kernel, 1, 32, 0, 0, u);
    if (!strcmp(name, "partial_warp_mma")) SL_LAUNCH(partial_warp_mma_kernel, 1, 32, 0, 0, f);
    CUDA_CHECK(cudaDeviceSynchronize());
    return 0;
}

static void expect_fault(const char *self, const char *name, const char *needle) {
    const emu_child r = emu_run_child(self, name);
    CHECK(!(r.exited && r.code == 0) && emu_has(r, "FAULT") && emu_has(r, needle),
          "%s: expected an emulator fault mentioning '%s'; exit %d signal %d, output: %s", name,
          needle, r.code, r.signal, r.err.c_str());
}

/* ---- host ------------------------------------------------------------------------------------ */

template <class T> static T *to_device(const std::vector<T> &h) {
    T *d = nullptr;
    CUDA_CHECK(cudaMalloc(&d, h.size() * sizeof(T)));
    CUDA_CHECK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
    return d;
}
template <class T> static std::vector<T> to_host(const T *d, size_t n) {
    std::vector<T> h(n);
    CUDA_CHECK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
}

/* Random bf16 matrices A [16][16], B [16][8] (bits) and their fp32 product plus C, summed over k
 * in order in fp32 (the emulator's order, bitwise), with the bound of |sum| terms for the GPU's
 * tolerance. */
struct mma_case {
    std::vector<uint16_t> A, B;
    std::vector<float> C, ref, mag;
};
static mma_case make_case(std::mt19937 &rng, bool with_c) {
    std::uniform_real_distribution<float> u(-2.0f, 2.0f);
    mma_case m;
    m.A.resize(256);
    m.B.resize(128);
    m.C.assign(128, 0.0f);
    m.ref.resize(128);
    m.mag.resize(128);
    for (auto &x : m.A) x = bf16_bits(u(rng));
    for (auto &x : m.B) x = bf16_bits(u(rng));
    if (with_c)
        for (auto &x : m.C) x = u(rng);
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 8; j++) {
            float acc = m.C[i * 8 + j], mag = fabsf(acc);
            for (int k = 0; k < 16; k++) {
                const float p = bf16_float(m.A[i * 16 + k]) * bf16_float(m.B[k * 8 + j]);
                acc += p;
                mag += fabsf(p);
            }
            m.ref[i * 8 + j] = acc;
            m.mag[i * 8 + j] = mag;
        }
    return m;
}

/* Emulated: bitwise the in-order fp32 sum; GPU: within fp32 rounding of the terms' magnitude. */
static bool close(float got, float ref, float mag, bool emulated) {
    if (emulated) return memcmp(&got, &ref, 4) == 0;
    return fabsf(got - ref) <= 1e-6f * 17 * mag + 1e-30f;
}

static void test_mma(bool emulated) {
    std::mt19937 rng(7);
    for (int rep = 0; rep < 3; rep++) {
        mma_case m = make_case(rng, rep != 0);
        uint16_t *dA = to_device(m.A), *dB = to_device(m.B);
        float *dC = to_device(m.C), *dD = nullptr, *dl = nullptr;
        CUDA_CHECK(cudaMalloc(&dD, 128 * sizeof(float)));
        CUDA_CHECK(cudaMalloc(&dl, 128 * sizeof(float)));
        SL_LAUNCH(mma_kernel, 1, 32, 0, 0, dA, dB, dC, dD, dl);
        CUDA_CHECK(cudaDeviceSynchronize());
        const std::vector<float> D = to_host(dD, 128), L = to_host(dl, 128);
        int bad = 0;
        for (int e = 0; e < 128; e++)
            if (!close(D[e], m.ref[e], m.mag[e], emulated) && bad++ < 4)
                CHECK(false, "mma rep %d: D[%d][%d] = %.9g, product %.9g", rep, e / 8, e % 8,
                      (double)D[e], (double)m.ref[e]);
        /* Lane l's register i holds D[g + 8 * (i / 2)][2t + i % 2] (PTX ISA). */
        for (int lane = 0; lane < 32; lane++)
            for (int i = 0; i < 4; i++) {
                const int row = lane_g(lane) + 8 * (i / 2), col = 2 * lane_t(lane) + i % 2;
                const float want = m.ref[row * 8 + col];
                if (!close(L[lane * 4 + i], want, m.mag[row * 8 + col], emulated) && bad++ < 8)
                    CHECK(false, "mma rep %d: lane %d d[%d] = %.9g, want D[%d][%d] = %.9g", rep,
                          lane, i, (double)L[lane * 4 + i], row, col, (double)want);
            }
        CHECK(bad == 0, "mma rep %d: %d mismatches", rep, bad);
        cudaFree(dA), cudaFree(dB), cudaFree(dC), cudaFree(dD), cudaFree(dl);
    }
}

static void test_ldmatrix() {
    uint32_t *d = nullptr;
    CUDA_CHECK(cudaMalloc(&d, 6 * 32 * 4 * sizeof(uint32_t)));
    CUDA_CHECK(cudaMemset(d, 0, 6 * 32 * 4 * sizeof(uint32_t)));
    SL_LAUNCH(ldmatrix_kernel, 1, 32, 0, 0, d);
    CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<uint32_t> out = to_host(d, 6 * 32 * 4);
    static const char *const names[6] = {"x1", "x2", "x4", "x1.trans", "x2.trans", "x4.trans"};
    int bad = 0;
    for (int v = 0; v < 6; v++) {
        const int num = 1 << (v % 3);
        const bool trans = v >= 3;
        for (int lane = 0; lane < 32; lane++)
            for (int i = 0; i < num; i++) {
                /* Matrix i: rows 8i.., columns 8i.. of the tile; value = row * 64 + col. */
                const int g = lane_g(lane), t = lane_t(lane);
                const int r0 = trans ? 2 * t : g, c0 = trans ? g : 2 * t;
                const int r1 = trans ? 2 * t + 1 : g, c1 = trans ? g : 2 * t + 1;
                const uint32_t lo = (uint32_t)((8 * i + r0) * 64 + 8 * i + c0);
                const uint32_t hi = (uint32_t)((8 * i + r1) * 64 + 8 * i + c1);
                const uint32_t got = out[(v * 32 + lane) * 4 + i];
                if (got != (lo | hi << 16) && bad++ < 8)
                    CHECK(false, "ldmatrix.%s lane %d r[%d] = 0x%08x, want (%u, %u) = 0x%08x",
                          names[v], lane, i, got, lo, hi, lo | hi << 16);
            }
    }
    CHECK(bad == 0, "ldmatrix: %d mismatched registers", bad);
    cudaFree(d);
}

static void test_ldmatrix_mma(bool emulated) {
    std::mt19937 rng(11);
    mma_case m = make_case(rng, false);
    uint16_t *dA = to_device(m.A), *dB = to_device(m.B);
    float *d0 = nullptr, *d1 = nullptr;
    CUDA_CHECK(cudaMalloc(&d0, 128 * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&d1, 128 * sizeof(float)));
    SL_LAUNCH(ldmatrix_mma_kernel, 1, 32, 0, 0, dA, dB, d0, d1);
    CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<float> D0 = to_host(d0, 128), D1 = to_host(d1, 128);
    int bad0 = 0, bad1 = 0;
    for (int e = 0; e < 128; e++) {
        bad0 += !close(D0[e], m.ref[e], m.mag[e], emulated);
        bad1 += !close(D1[e], m.ref[e], m.mag[e], emulated);
    }
    CHECK(bad0 == 0,
          "ldmatrix.x4 A, .x2.trans B[k][n], mma: %d of 128 wrong (D[0][0] %.9g vs %.9g)", bad0,
          (double)D0[0], (double)m.ref[0]);
    CHECK(bad1 == 0, "ldmatrix.x4 A, .x2 B^T[n][k], mma: %d of 128 wrong (D[0][0] %.9g vs %.9g)",
          bad1, (double)D1[0], (double)m.ref[0]);
    cudaFree(dA), cudaFree(dB), cudaFree(d0), cudaFree(d1);
}

static void test_cp_async(bool emulated) {
    std::vector<float> src(256);
    for (int i = 0; i < 256; i++) src[i] = (float)(i + 1);
    float *dsrc = to_device(src), *dout = nullptr, *dw1 = nullptr;
    CUDA_CHECK(cudaMalloc(&dout, 256 * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&dw1, 128 * sizeof(float)));
    SL_LAUNCH(cp_async_kernel, 1, 32, 0, 0, dsrc, dout, dw1);
    CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<float> out = to_host(dout, 256), w1 = to_host(dw1, 128);
    int bad = 0;
    for (int lane = 0; lane < 32; lane++) {
        const int from = (lane + 1) % 32, nbytes = from % 17;
        for (int i = 0; i < 4; i++) {
            const float want0 = src[from * 4 + i];
            /* Zero-fill: bytes past src_bytes are 0; a float partly inside keeps its low bytes. */
            uint8_t b[4] = {0, 0, 0, 0};
            const float full = src[128 + from * 4 + i];
            for (int k = 0; k < 4; k++)
                if (4 * i + k < nbytes) b[k] = ((const uint8_t *)&full)[k];
            float want1;
            memcpy(&want1, b, 4);
            if (memcmp(&out[lane * 4 + i], &want0, 4) != 0 && bad++ < 4)
                CHECK(false, "cp.async group 0: lane %d float %d = %g, want %g", lane, i,
                      (double)out[lane * 4 + i], (double)want0);
            if (memcmp(&out[128 + lane * 4 + i], &want1, 4) != 0 && bad++ < 4)
                CHECK(false, "cp.async zfill (%d bytes): lane %d float %d = %g, want %g", nbytes,
                      lane, i, (double)out[128 + lane * 4 + i], (double)want1);
            if (w1[lane * 4 + i] != src[lane * 4 + i] && bad++ < 4)
                CHECK(false, "cp.async wait_group 1: lane %d float %d = %g, want %g", lane, i,
                      (double)w1[lane * 4 + i], (double)src[lane * 4 + i]);
        }
    }
    CHECK(bad == 0, "cp.async: %d wrong values", bad);
    if (emulated) {
        uint32_t *de = nullptr, *du = nullptr;
        CUDA_CHECK(cudaMalloc(&de, 128 * sizeof(uint32_t)));
        CUDA_CHECK(cudaMalloc(&du, 128 * sizeof(uint32_t)));
        SL_LAUNCH(missing_wait_kernel, 1, 32, 0, 0, dsrc, de, du);
        CUDA_CHECK(cudaDeviceSynchronize());
        const std::vector<uint32_t> e = to_host(de, 128), u = to_host(du, 128);
        int early_poison = 0, uncommitted_poison = 0;
        for (int i = 0; i < 128; i++) {
            early_poison += e[i] == 0xffffffffu;
            uncommitted_poison += u[i] == 0xffffffffu;
        }
        CHECK(early_poison == 128,
              "a read before cp.async.wait_group saw data in %d of 128 words "
              "(the emulator must show its poison)",
              128 - early_poison);
        CHECK(uncommitted_poison == 128,
              "a read of an uncommitted cp.async after wait_group 0 saw data in %d of 128 words",
              128 - uncommitted_poison);
        cudaFree(de), cudaFree(du);
    }
    cudaFree(dsrc), cudaFree(dout), cudaFree(dw1);
}

/* sl_ex2_ftz over a fixed set of arguments, one per thread. */
__global__ void ex2_kernel(const float *x, float *y, int n) {
    const int i = (int)threadIdx.x;
    if (i < n) y[i] = sl_ex2_ftz(x[i]);
}

/* ex2.approx.ftz.f32 (the softmax's exponential): within 2 ulp of 2^x where 2^x is a normal
 * float (PTX ISA "ex2": max relative error 2^-22 over the range), 0 where it is below 2^-126 or
 * x is -inf, +inf at +inf; the hardware and the emulated twin both. */
static void test_ex2() {
    const std::vector<float> xs = {0.0f,     1.0f,    -1.0f,     0.5f,     -0.3333f, 10.25f,
                                   -20.125f, 127.5f,  -125.9f,   -126.5f,  -140.0f,  -149.5f,
                                   1e-40f,   -1e-40f, -INFINITY, INFINITY, 3.14159f, -7.77f,
                                   64.0f,    -0.0f,   -100.1f};
    const int n = (int)xs.size();
    float *dx = to_device(xs), *dy = nullptr;
    CUDA_CHECK(cudaMalloc(&dy, n * sizeof(float)));
    SL_LAUNCH(ex2_kernel, 1, 32, 0, 0, dx, dy, n);
    CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<float> y = to_host(dy, n);
    int bad = 0;
    for (int i = 0; i < n; i++) {
        const double want = exp2((double)xs[i]);
        bool ok;
        if (want < 0x1p-126)
            ok = y[i] == 0.0f; /* flushed */
        else if (std::isinf(want))
            ok = std::isinf(y[i]) && y[i] > 0;
        else
            ok = fabs((double)y[i] - want) <= 2.0 * ldexp(1.0, ilogb(want) - 23);
        if (!ok && bad++ < 6)
            CHECK(false, "ex2.approx.ftz(%.9g) = %.9g, want %.9g (2 ulp; 0 below 2^-126)",
                  (double)xs[i], (double)y[i], want);
    }
    CHECK(bad == 0, "ex2.approx.ftz: %d wrong values", bad);
    cudaFree(dx), cudaFree(dy);
}

int main(int argc, char **argv) {
    if (argc > 1) return run_case(argv[1]);
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        printf("test_ptx: no CUDA device, skipped\n");
        return 77;
    }
    cudaDeviceProp p;
    CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
    if (p.major < 8) {
        printf("test_ptx: compute capability %d.%d < 8.0, skipped\n", p.major, p.minor);
        return 77;
    }
    const bool emulated = strcmp(p.name, "sluice SIMT emulator") == 0;
    test_mma(emulated);
    test_ldmatrix();
    test_ldmatrix_mma(emulated);
    test_cp_async(emulated);
    test_ex2();
    if (emulated) {
        expect_fault(argv[0], "misaligned_ldmatrix", "not 16-byte aligned");
        expect_fault(argv[0], "partial_warp_mma", "has exited");
    }
    return emu_finish("test_ptx");
}
