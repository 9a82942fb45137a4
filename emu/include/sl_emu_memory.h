/*
 * emu/include/sl_emu_memory.h - the device's memory operations for the CPU SIMT test double
 * (emu/README.md): atomics, and the cache-hinted loads and stores. Included by sl_emu_device.h,
 * the device-side language.
 */
#ifndef SL_EMU_MEMORY_H
#define SL_EMU_MEMORY_H

#include <cuda_bf16.h>

/* ---- atomics --------------------------------------------------------------------------------- */
/* One emulated thread runs at a time, so these are plain read-modify-writes. Integer
 * arithmetic wraps as on the GPU (done in unsigned types: no signed-overflow UB). */

inline int atomicAdd(int *a, int v) {
    const int o = *a;
    *a = (int)((unsigned)o + (unsigned)v);
    return o;
}
inline unsigned atomicAdd(unsigned *a, unsigned v) {
    const unsigned o = *a;
    *a = o + v;
    return o;
}
inline unsigned long long atomicAdd(unsigned long long *a, unsigned long long v) {
    const unsigned long long o = *a;
    *a = o + v;
    return o;
}
inline float atomicAdd(float *a, float v) {
    const float o = *a;
    *a = o + v;
    return o;
}
inline double atomicAdd(double *a, double v) {
    const double o = *a;
    *a = o + v;
    return o;
}
inline __nv_bfloat16 atomicAdd(__nv_bfloat16 *a, __nv_bfloat16 v) {
    const __nv_bfloat16 o = *a;
    *a = __float2bfloat16_rn(__bfloat162float(o) + __bfloat162float(v));
    return o;
}
inline int atomicSub(int *a, int v) {
    const int o = *a;
    *a = (int)((unsigned)o - (unsigned)v);
    return o;
}
inline unsigned atomicSub(unsigned *a, unsigned v) {
    const unsigned o = *a;
    *a = o - v;
    return o;
}
template <class T> inline T sl_emu_exch(T *a, T v) {
    const T o = *a;
    *a = v;
    return o;
}
inline int atomicExch(int *a, int v) {
    return sl_emu_exch(a, v);
}
inline unsigned atomicExch(unsigned *a, unsigned v) {
    return sl_emu_exch(a, v);
}
inline unsigned long long atomicExch(unsigned long long *a, unsigned long long v) {
    return sl_emu_exch(a, v);
}
inline float atomicExch(float *a, float v) {
    return sl_emu_exch(a, v);
}
template <class T> inline T sl_emu_max(T *a, T v) {
    const T o = *a;
    *a = o < v ? v : o;
    return o;
}
template <class T> inline T sl_emu_min(T *a, T v) {
    const T o = *a;
    *a = v < o ? v : o;
    return o;
}
inline int atomicMax(int *a, int v) {
    return sl_emu_max(a, v);
}
inline unsigned atomicMax(unsigned *a, unsigned v) {
    return sl_emu_max(a, v);
}
inline long long atomicMax(long long *a, long long v) {
    return sl_emu_max(a, v);
}
inline unsigned long long atomicMax(unsigned long long *a, unsigned long long v) {
    return sl_emu_max(a, v);
}
inline int atomicMin(int *a, int v) {
    return sl_emu_min(a, v);
}
inline unsigned atomicMin(unsigned *a, unsigned v) {
    return sl_emu_min(a, v);
}
inline long long atomicMin(long long *a, long long v) {
    return sl_emu_min(a, v);
}
inline unsigned long long atomicMin(unsigned long long *a, unsigned long long v) {
    return sl_emu_min(a, v);
}
template <class T> inline T sl_emu_cas(T *a, T cmp, T v) {
    const T o = *a;
    if (o == cmp) *a = v;
    return o;
}
inline int atomicCAS(int *a, int cmp, int v) {
    return sl_emu_cas(a, cmp, v);
}
inline unsigned atomicCAS(unsigned *a, unsigned cmp, unsigned v) {
    return sl_emu_cas(a, cmp, v);
}
inline unsigned long long atomicCAS(unsigned long long *a, unsigned long long cmp,
                                    unsigned long long v) {
    return sl_emu_cas(a, cmp, v);
}
inline unsigned short atomicCAS(unsigned short *a, unsigned short cmp, unsigned short v) {
    return sl_emu_cas(a, cmp, v);
}
#define SL_EMU_BITWISE_ATOMIC(name, op)                                                            \
    inline int name(int *a, int v) {                                                               \
        const int o = *a;                                                                          \
        *a = o op v;                                                                               \
        return o;                                                                                  \
    }                                                                                              \
    inline unsigned name(unsigned *a, unsigned v) {                                                \
        const unsigned o = *a;                                                                     \
        *a = o op v;                                                                               \
        return o;                                                                                  \
    }                                                                                              \
    inline unsigned long long name(unsigned long long *a, unsigned long long v) {                  \
        const unsigned long long o = *a;                                                           \
        *a = o op v;                                                                               \
        return o;                                                                                  \
    }
SL_EMU_BITWISE_ATOMIC(atomicAnd, &)
SL_EMU_BITWISE_ATOMIC(atomicOr, |)
SL_EMU_BITWISE_ATOMIC(atomicXor, ^)
#undef SL_EMU_BITWISE_ATOMIC
inline unsigned atomicInc(unsigned *a, unsigned v) {
    const unsigned o = *a;
    *a = o >= v ? 0 : o + 1;
    return o;
}
inline unsigned atomicDec(unsigned *a, unsigned v) {
    const unsigned o = *a;
    *a = (o == 0 || o > v) ? v : o - 1;
    return o;
}
/* The scoped variants (_block, _system) behave the same with one thread running at a time. */
template <class T, class U> inline T atomicAdd_block(T *a, U v) {
    return atomicAdd(a, (T)v);
}
template <class T, class U> inline T atomicAdd_system(T *a, U v) {
    return atomicAdd(a, (T)v);
}

/* ---- cache-hinted loads and stores: plain accesses on the CPU, alignment checked -------------
 * The GPU faults on an access that is not aligned to its type's size (a float4 at an address
 * that is 8 mod 16, say); the host's loads do not, so the emulator checks it. */

template <class T> inline const T *sl_emu_aligned(const T *p) {
    sl_emu_check_aligned(p, alignof(T), "a cache-hinted access", 0);
    return p;
}
template <class T> inline T __ldg(const T *p) {
    return *sl_emu_aligned(p);
}
template <class T> inline T __ldcg(const T *p) {
    return *sl_emu_aligned(p);
}
template <class T> inline T __ldca(const T *p) {
    return *sl_emu_aligned(p);
}
template <class T> inline T __ldcs(const T *p) {
    return *sl_emu_aligned(p);
}
template <class T> inline T __ldlu(const T *p) {
    return *sl_emu_aligned(p);
}
template <class T> inline T __ldcv(const T *p) {
    return *sl_emu_aligned(p);
}
template <class T> inline void __stwb(T *p, T v) {
    *const_cast<T *>(sl_emu_aligned(p)) = v;
}
template <class T> inline void __stcg(T *p, T v) {
    *const_cast<T *>(sl_emu_aligned(p)) = v;
}
template <class T> inline void __stcs(T *p, T v) {
    *const_cast<T *>(sl_emu_aligned(p)) = v;
}
template <class T> inline void __stwt(T *p, T v) {
    *const_cast<T *>(sl_emu_aligned(p)) = v;
}

#endif
