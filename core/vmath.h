/*
 * core/vmath.h - elementwise math for CPU kernels that the compiler can vectorize.
 *
 * libm's expf is an opaque call that stops a loop from vectorizing; these are inline and
 * branch-free. SL_CPU_CLONES compiles a hot loop for AVX-512, AVX2 and baseline x86-64 and
 * picks one at load time (GCC target_clones), so a portable build still runs wide vectors.
 */
#ifndef SL_VMATH_H
#define SL_VMATH_H

#include <stdint.h>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) &&                             \
    !defined(__SANITIZE_ADDRESS__)
#define SL_CPU_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define SL_CPU_CLONES
#endif

/*
 * exp written to vectorize (libm expf does not without -ffast-math,
 * and was ~60% of the forward time at head_dim 16): exp(x) = 2^n exp(r), n = round(x / ln 2),
 * r = x - n ln 2 in two parts (Cody-Waite), exp(r) by its Taylor series to degree 7
 * (|r| <= ln2/2: truncation 5e-9). Max relative error 1.0e-7 (1.7 ulp) over [-87, 1] against
 * exp in double; libm expf: 6e-8. Out of range: 0 below -87 (exp(-87) = 1.6e-38; below it lie
 * subnormals), +inf above 88, NaN stays NaN. The range cases are bit masks, not branches: with
 * a branch GCC sinks the polynomial into it and then (trapping math) will not if-convert the
 * loop for SSE2/AVX2. Every vector width gives the same bits (no FMA contraction in ISO C).
 */
static inline float sl_exp_f32(float x) {
    union {
        float f;
        uint32_t u;
        int32_t i;
    } in = {.f = x}, xc, two_n, out;
    const uint32_t nan = 0u - (uint32_t)((in.u & 0x7fffffffu) > 0x7f800000u);
    const uint32_t under = ~nan & (0u - (uint32_t)(in.u > 0xc2ae0000u)); /* x < -87, -inf */
    const uint32_t over = ~nan & (0u - (uint32_t)(in.i > 0x42b00000));   /* x > 88, +inf */
    const uint32_t keep = ~(nan | under | over);
    xc.u = (in.u & keep) | (0xc2ae0000u & under) | (0x42b00000u & over); /* NaN -> 0 */
    const float nf = (xc.f * 1.44269504f + 12582912.0f) - 12582912.0f;   /* round to nearest */
    const float r = (xc.f - nf * 0.693359375f) + nf * 2.12194440e-4f;
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    two_n.u = (uint32_t)((int32_t)nf + 127) << 23;
    out.f = p * two_n.f;
    out.u = (out.u & keep) | (in.u & nan) | (0x7f800000u & over); /* x < -87: 0 */
    return out.f;
}

/* sigmoid(x) = 1 / (1 + exp(-x)) with the vectorizable exp; exact at the limits (0 and 1). */
static inline float sl_sigmoid_f32(float x) {
    return 1.0f / (1.0f + sl_exp_f32(-x));
}

#endif
