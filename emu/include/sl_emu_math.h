/*
 * emu/include/sl_emu_math.h - the math CUDA's device code has and the C library lacks, for the
 * CPU SIMT test double (emu/README.md): fast-math intrinsics, arithmetic with a named rounding,
 * the __*_as_* casts and conversions, bit intrinsics, and CUDA's min and max overloads, each
 * with the CPU's arithmetic. Included by sl_emu_device.h, the device-side language, whose
 * sl_emu::to_bits and from_bits the casts use.
 */
#ifndef SL_EMU_MATH_H
#define SL_EMU_MATH_H

#include <cmath>
#include <cstdint>

#include <math.h>

/* ---- math CUDA has and the C library lacks --------------------------------------------------- */

/* glibc's math.h declares (without exporting) __expf, __logf, __sinf, __cosf, ...; these
 * definitions give CUDA's fast-math intrinsics of the same names their CPU meaning. */
extern "C" {
inline float __expf(float x) noexcept {
    return expf(x);
}
inline float __logf(float x) noexcept {
    return logf(x);
}
inline float __log2f(float x) noexcept {
    return log2f(x);
}
inline float __log10f(float x) noexcept {
    return log10f(x);
}
inline float __exp10f(float x) noexcept {
    return exp10f(x);
}
inline float __sinf(float x) noexcept {
    return sinf(x);
}
inline float __cosf(float x) noexcept {
    return cosf(x);
}
inline float __tanf(float x) noexcept {
    return tanf(x);
}
inline float __powf(float x, float y) noexcept {
    return powf(x, y);
}
}
inline void __sincosf(float x, float *s, float *c) {
    *s = sinf(x);
    *c = cosf(x);
}
inline float rsqrtf(float x) {
    return 1.0f / sqrtf(x);
}
inline double rsqrt(double x) {
    return 1.0 / sqrt(x);
}
inline float __frsqrt_rn(float x) {
    return 1.0f / sqrtf(x);
}
inline float __fsqrt_rn(float x) {
    return sqrtf(x);
}
inline float __fdividef(float a, float b) {
    return a / b;
}
inline float fdividef(float a, float b) {
    return a / b;
}
inline float __fdiv_rn(float a, float b) {
    return a / b;
}
inline float __frcp_rn(float x) {
    return 1.0f / x;
}
inline float __fadd_rn(float a, float b) {
    return a + b;
}
inline float __fsub_rn(float a, float b) {
    return a - b;
}
inline float __fmul_rn(float a, float b) {
    return a * b;
}
inline float __fmaf_rn(float a, float b, float c) {
    return fmaf(a, b, c);
}
inline float __saturatef(float x) {
    return x != x ? 0.0f : (x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x));
}
inline float __int_as_float(int x) {
    return sl_emu::from_bits<float>((uint32_t)x);
}
inline int __float_as_int(float x) {
    return (int)(uint32_t)sl_emu::to_bits(x);
}
inline unsigned __float_as_uint(float x) {
    return (uint32_t)sl_emu::to_bits(x);
}
inline float __uint_as_float(unsigned x) {
    return sl_emu::from_bits<float>(x);
}
inline long long __double_as_longlong(double x) {
    return (long long)sl_emu::to_bits(x);
}
inline double __longlong_as_double(long long x) {
    return sl_emu::from_bits<double>((uint64_t)x);
}
inline int __float2int_rn(float x) {
    return (int)nearbyintf(x);
}
inline int __float2int_rz(float x) {
    return (int)x;
}
inline int __float2int_rd(float x) {
    return (int)floorf(x);
}
inline int __float2int_ru(float x) {
    return (int)ceilf(x);
}
inline unsigned __float2uint_rn(float x) {
    return (unsigned)nearbyintf(x);
}
inline float __int2float_rn(int x) {
    return (float)x;
}
inline float __uint2float_rn(unsigned x) {
    return (float)x;
}
inline int __popc(unsigned x) {
    return __builtin_popcount(x);
}
inline int __popcll(unsigned long long x) {
    return __builtin_popcountll(x);
}
inline int __clz(int x) {
    return x == 0 ? 32 : __builtin_clz((unsigned)x);
}
inline int __clzll(long long x) {
    return x == 0 ? 64 : __builtin_clzll((unsigned long long)x);
}
inline int __ffs(int x) {
    return __builtin_ffs(x);
}
inline int __ffsll(long long x) {
    return __builtin_ffsll(x);
}
inline unsigned __brev(unsigned x) {
    x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
    x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
    x = ((x >> 4) & 0x0f0f0f0fu) | ((x & 0x0f0f0f0fu) << 4);
    return __builtin_bswap32(x);
}
inline unsigned long long __brevll(unsigned long long x) {
    return ((unsigned long long)__brev((unsigned)x) << 32) | __brev((unsigned)(x >> 32));
}
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
    const uint64_t v = ((uint64_t)y << 32) | x;
    unsigned r = 0;
    for (int i = 0; i < 4; i++)
        r |= (unsigned)((v >> (8 * ((s >> (4 * i)) & 7))) & 0xff) << (8 * i);
    return r;
}
inline unsigned __funnelshift_l(unsigned lo, unsigned hi, unsigned shift) {
    const uint64_t v = ((uint64_t)hi << 32) | lo;
    return (unsigned)((v << (shift & 31)) >> 32);
}
inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned shift) {
    const uint64_t v = ((uint64_t)hi << 32) | lo;
    return (unsigned)(v >> (shift & 31));
}
inline int __mulhi(int a, int b) {
    return (int)(((int64_t)a * b) >> 32);
}
inline unsigned __umulhi(unsigned a, unsigned b) {
    return (unsigned)(((uint64_t)a * b) >> 32);
}
inline long long __mul64hi(long long a, long long b) {
    return (long long)(((__int128)a * b) >> 64);
}
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
    return (unsigned long long)(((unsigned __int128)a * b) >> 64);
}
inline int __mul24(int a, int b) {
    return (int)((unsigned)((a << 8) >> 8) * (unsigned)((b << 8) >> 8));
}
inline unsigned __umul24(unsigned a, unsigned b) {
    return (a & 0xffffffu) * (b & 0xffffffu);
}

/* min and max: CUDA's overloads for integer and floating types (math_functions.hpp). Mixed
 * signed/unsigned arguments compare as unsigned, as there. */
#define SL_EMU_MINMAX(T)                                                                           \
    inline T min(T a, T b) {                                                                       \
        return b < a ? b : a;                                                                      \
    }                                                                                              \
    inline T max(T a, T b) {                                                                       \
        return a < b ? b : a;                                                                      \
    }
SL_EMU_MINMAX(int)
SL_EMU_MINMAX(unsigned)
SL_EMU_MINMAX(long)
SL_EMU_MINMAX(unsigned long)
SL_EMU_MINMAX(long long)
SL_EMU_MINMAX(unsigned long long)
#undef SL_EMU_MINMAX
inline unsigned min(int a, unsigned b) {
    return min((unsigned)a, b);
}
inline unsigned min(unsigned a, int b) {
    return min(a, (unsigned)b);
}
inline unsigned max(int a, unsigned b) {
    return max((unsigned)a, b);
}
inline unsigned max(unsigned a, int b) {
    return max(a, (unsigned)b);
}
inline unsigned long long min(long long a, unsigned long long b) {
    return min((unsigned long long)a, b);
}
inline unsigned long long min(unsigned long long a, long long b) {
    return min(a, (unsigned long long)b);
}
inline unsigned long long max(long long a, unsigned long long b) {
    return max((unsigned long long)a, b);
}
inline unsigned long long max(unsigned long long a, long long b) {
    return max(a, (unsigned long long)b);
}
inline float min(float a, float b) {
    return fminf(a, b);
}
inline float max(float a, float b) {
    return fmaxf(a, b);
}
inline double min(double a, double b) {
    return fmin(a, b);
}
inline double max(double a, double b) {
    return fmax(a, b);
}
inline double min(float a, double b) {
    return fmin(a, b);
}
inline double min(double a, float b) {
    return fmin(a, b);
}
inline double max(float a, double b) {
    return fmax(a, b);
}
inline double max(double a, float b) {
    return fmax(a, b);
}
inline unsigned umin(unsigned a, unsigned b) {
    return min(a, b);
}
inline unsigned umax(unsigned a, unsigned b) {
    return max(a, b);
}
inline long long llmin(long long a, long long b) {
    return min(a, b);
}
inline long long llmax(long long a, long long b) {
    return max(a, b);
}
inline unsigned long long ullmin(unsigned long long a, unsigned long long b) {
    return min(a, b);
}
inline unsigned long long ullmax(unsigned long long a, unsigned long long b) {
    return max(a, b);
}

#endif
