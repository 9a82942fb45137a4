/*
 * tests/test_ptx_sm90.h - host helpers of test_ptx_sm90 (tests/test_ptx_sm90.cu and
 * tests/test_ptx_sm90_gemm.cu): bf16 data, the shared-memory images wgmma and TMA expect,
 * written here from the PTX ISA's descriptions independently of the emulator, and plain
 * matrix-product references.
 */
#ifndef SL_TEST_PTX_SM90_H
#define SL_TEST_PTX_SM90_H

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "tests/emu/emu_test.h"

static inline uint16_t bf16_of(float x) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(x));
}
static inline float float_of_bf16(uint16_t b) {
    const uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline std::vector<uint16_t> random_bf16(std::mt19937 &rng, size_t n) {
    std::uniform_real_distribution<float> u(-2.0f, 2.0f);
    std::vector<uint16_t> v(n);
    for (auto &x : v) x = bf16_of(u(rng));
    return v;
}

template <class T> static inline T *to_device(const std::vector<T> &h) {
    T *d = nullptr;
    CUDA_CHECK(cudaMalloc(&d, h.size() * sizeof(T)));
    CUDA_CHECK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
    return d;
}
static inline uint4 *to_device_bytes(const std::vector<uint8_t> &h) {
    return (uint4 *)to_device(h);
}
template <class T> static inline std::vector<T> to_host(const T *d, size_t n) {
    std::vector<T> h(n);
    CUDA_CHECK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
}

/* Byte offset of element (mn, k) of a 16-bit wgmma operand in shared memory, from a
 * 1024-aligned base (so that offset bits are address bits). swz: 0 none, 1 32B, 2 64B, 3 128B.
 * A "line" is 16 bytes without swizzle, else the swizzle span (32 << (swz - 1) bytes).
 *   K-major: a line holds consecutive k of one row; rows of a group of 8 are one line apart,
 *     groups SBO apart; without swizzle, k 8..15 sit in a second 8 x 16-byte core matrix LBO
 *     away, with swizzle k continues along the line.
 *   MN-major: a line holds consecutive mn of one k; 8 k one line apart form a group; with
 *     swizzle, groups of 8 k are SBO apart and the next line's worth of mn LBO away; without,
 *     8-mn groups are SBO apart and 8-k groups LBO apart.
 *   Swizzle: the 16-byte chunk index (bits 4..6) XOR the line index in the 8-line pattern
 *     (bits 7..9), one, two or three bits for 32B, 64B, 128B. */
static inline size_t layout_offset(int swz, bool mn_major, int mn, int k, size_t lbo, size_t sbo) {
    const size_t line = swz ? (size_t)16 << swz : 16;
    size_t o;
    if (!mn_major) {
        const size_t kb = (size_t)k * 2;
        if (!swz)
            o = (size_t)(mn / 8) * sbo + (size_t)(mn % 8) * 16 + kb / 16 * lbo + kb % 16;
        else
            o = (size_t)(mn / 8) * sbo + (size_t)(mn % 8) * line + kb;
    } else {
        const size_t per_line = line / 2;
        if (!swz)
            o = (size_t)(k / 8) * lbo + (size_t)(k % 8) * 16 + (size_t)(mn / 8) * sbo +
                (size_t)(mn % 8) * 2;
        else
            o = (size_t)(k / 8) * sbo + (size_t)(k % 8) * line + (size_t)mn / per_line * lbo +
                (size_t)mn % per_line * 2;
    }
    if (swz) o ^= ((o >> 7) & (((size_t)1 << swz) - 1)) << 4;
    return o;
}

/* Writes a matrix into the image at `base`: A (is_a) given as [mns][kdim], B as [kdim][mns]
 * (row-major), element (mn, k) at layout_offset. */
static inline void place_operand(std::vector<uint8_t> &img, size_t base,
                                 const std::vector<uint16_t> &m, int mns, int kdim, bool is_a,
                                 int swz, bool mn_major, size_t lbo, size_t sbo) {
    for (int mn = 0; mn < mns; mn++)
        for (int k = 0; k < kdim; k++) {
            const size_t o = base + layout_offset(swz, mn_major, mn, k, lbo, sbo);
            if (img.size() < o + 2) img.resize(o + 2, 0);
            const uint16_t v = is_a ? m[(size_t)mn * kdim + k] : m[(size_t)k * mns + mn];
            memcpy(&img[o], &v, 2);
        }
}

/* ref = C + A B, A [M][K] and B [K][N] bf16, summed over k in order in fp32 (the emulator's
 * order); mag = C's and the products' magnitudes, for a GPU's tolerance. */
static inline void reference_gemm(const std::vector<uint16_t> &A, const std::vector<uint16_t> &B,
                                  const std::vector<float> &C, int M, int N, int K,
                                  std::vector<float> &ref, std::vector<float> &mag) {
    ref.assign((size_t)M * N, 0.0f);
    mag.assign((size_t)M * N, 0.0f);
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            float acc = C[(size_t)m * N + n], g = fabsf(acc);
            for (int k = 0; k < K; k++) {
                const float p =
                    float_of_bf16(A[(size_t)m * K + k]) * float_of_bf16(B[(size_t)k * N + n]);
                acc += p;
                g += fabsf(p);
            }
            ref[(size_t)m * N + n] = acc;
            mag[(size_t)m * N + n] = g;
        }
}

/* Emulated: bitwise; GPU: within fp32 rounding of k + 1 terms of the given magnitude (the tensor
 * core's summation order is not specified). */
static inline bool close_to(float got, float ref, float mag, int k, bool emulated) {
    if (emulated) return memcmp(&got, &ref, 4) == 0;
    return fabsf(got - ref) <= 1.2e-7f * (float)(k + 2) * mag + 1e-30f;
}

/* The shared-memory image of a TMA box: dense, dimension 0 innermost, 16-byte chunks swizzled
 * (layout_offset's XOR), elements outside the tensor zero. `host` is the dense tensor. */
static inline std::vector<uint8_t> tma_box_image(const std::vector<uint8_t> &host, int rank,
                                                 int esize, const uint64_t *dims,
                                                 const uint32_t *box, const int *coords, int swz) {
    size_t n = (size_t)esize;
    for (int d = 0; d < rank; d++) n *= box[d];
    std::vector<uint8_t> img(n, 0);
    std::vector<int> idx(rank, 0);
    for (size_t e = 0; e < n / (size_t)esize; e++) {
        size_t rem = e, g = 0, stride = 1;
        bool in = true;
        for (int d = 0; d < rank; d++) {
            idx[d] = (int)(rem % box[d]);
            rem /= box[d];
            const int64_t c = (int64_t)coords[d] + idx[d];
            in = in && c >= 0 && (uint64_t)c < dims[d];
            g += (size_t)(in ? c : 0) * stride;
            stride *= (size_t)dims[d];
        }
        size_t o = e * (size_t)esize;
        if (swz) o ^= ((o >> 7) & (((size_t)1 << swz) - 1)) << 4;
        if (in) memcpy(&img[o], &host[g * (size_t)esize], (size_t)esize);
    }
    return img;
}

/* ---- the sections (tests/test_ptx_sm90_main.cu runs each in a process of its own) ---- */

/* Checks made and failed by the calling translation unit (emu_test.h's counters are per file). */
struct ptx_tally {
    int checks, failures;
};
static inline ptx_tally ptx_tally_here() {
    return ptx_tally{emu_checks, emu_failures};
}

/* tests/test_ptx_sm90.cu */
ptx_tally ptx_section_wgmma(bool emulated);
ptx_tally ptx_section_wgmma_chain(bool emulated);
ptx_tally ptx_section_barriers();
int ptx_bench(); /* `test_ptx_sm90 bench`: wgmma's cost; returns the exit status */

/* tests/test_ptx_sm90_tma.cu */
int ptx_tma_load_cases();                  /* how many TMA load cases there are (host only) */
std::string ptx_tma_load_case_name(int i); /* "2d bf16, box row 48 bytes, ..." (host only) */
ptx_tally ptx_section_tma_load(int i);     /* TMA load case i */
ptx_tally ptx_section_tma_store();
ptx_tally ptx_section_tma_reduce();

/* tests/test_ptx_sm90_gemm.cu: the composed example kernel; returns its failed checks. */
int test_gemm_example(bool emulated);

/* tests/test_ptx_sm90_iso.cu: one suspect instruction of tma_load_kernel per section, to tell
 * which one a GPU refuses. */
struct ptx_iso_section {
    const char *name, *what;
};
extern const ptx_iso_section ptx_iso_sections[];
extern const int ptx_iso_count;
ptx_tally ptx_section_iso(int i);

#endif
