/*
 * emu/include/sl_emu_device.h - CUDA's device-side language for the CPU SIMT test double.
 *
 * Included by emu's cuda_runtime.h after the toolkit's runtime header. A kernel is an ordinary
 * C++ function that the emulator runs once per thread, each thread on a fiber; everything
 * below gives CUDA's device vocabulary its meaning there (emu/README.md explains the model):
 *
 * - qualifiers: __global__, __device__, __host__, __constant__ are empty (the toolkit header
 *   already makes them so for a host compiler); __shared__ is `static`, because the blocks of
 *   a launch run one after another on one OS thread, so a function-static variable is the
 *   block's shared memory. Consequence: a static __shared__ array keeps its values from the
 *   previous block (there is no way to re-poison function statics), whereas the dynamic
 *   shared buffer (SL_DYNAMIC_SMEM) is filled with 0xff bytes (NaN) at every block start.
 * - threadIdx, blockIdx, blockDim, gridDim: globals the scheduler sets to the running
 *   fiber's values whenever it switches; warpSize is the constant 32.
 * - __syncthreads, __syncwarp and the warp collectives are scheduling points (emu/src/simt.cc).
 * - atomics are plain read-modify-writes: only one emulated thread runs at a time.
 * - math: what CUDA has and the C library lacks.
 */
#ifndef SL_EMU_DEVICE_H
#define SL_EMU_DEVICE_H

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <vector_types.h>

/* ---- qualifiers ---------------------------------------------------------------------------- */

#undef __shared__
#define __shared__ static
#undef __launch_bounds__
#define __launch_bounds__(...)
/* The toolkit maps these to attributes only nvcc knows; g++ would warn (an error here). */
#undef __maxnreg__
#define __maxnreg__(n)
#undef __local_maxnreg__
#define __local_maxnreg__(n)
#undef __inline_hint__
#define __inline_hint__
/* A kernel parameter the kernel may take the address of (CUtensorMap): parameters are
 * ordinary copies here. */
#undef __grid_constant__
#define __grid_constant__

/* ---- built-in variables ---------------------------------------------------------------------- */

/* Set by the scheduler to the running thread's values before every switch into a fiber. */
extern uint3 threadIdx;
extern uint3 blockIdx;
extern dim3 blockDim;
extern dim3 gridDim;
/* A variable, not a macro: cudaDeviceProp has a member of the same name. */
static constexpr int warpSize = 32;

/* ---- the scheduler's entry points (emu/src/simt.cc) ------------------------------------------ */

namespace sl_emu {
/* Barrier kinds (the __syncthreads family) and warp collective kinds. */
enum sync_kind : int { bar_sync, bar_count, bar_and, bar_or };
enum warp_kind : int {
    w_syncwarp,
    w_shfl_idx,
    w_shfl_up,
    w_shfl_down,
    w_shfl_bfly,
    w_ballot,
    w_any,
    w_all,
    w_reduce_add,
    w_reduce_min_u,
    w_reduce_max_u,
    w_reduce_min_i,
    w_reduce_max_i,
    w_reduce_and,
    w_reduce_or,
    w_reduce_xor,
    w_match_any,
    w_match_all,
    /* core/ptx.cuh's warp-wide instructions: each lane gives a pointer to its operands */
    w_mma_bf16_16816,
    w_ldmatrix_x1,
    w_ldmatrix_x2,
    w_ldmatrix_x4,
    w_ldmatrix_x1_trans,
    w_ldmatrix_x2_trans,
    w_ldmatrix_x4_trans,
};
/* Waits at the block barrier; returns the barrier's reduction of `pred` (kind bar_count:
 * count of non-zero predicates; bar_and / bar_or: 0 or 1). */
int barrier(int kind, int pred);
/* Rendezvous of the lanes named in `mask` at a warp collective of `kind`: each lane gives
 * `value` (raw bits) and the mode operands b, c (shuffles: lane/delta/xor mask and PTX's
 * clamp-segment word); returns this lane's result. */
uint64_t warp_op(int kind, unsigned mask, uint64_t value, int b, int c);
/* The lanes of the calling thread's warp that have not exited. */
unsigned active_lanes();
/* core/ptx.cuh's emulated instructions (emu/src/ptx.cc; layouts in core/ptx.cuh). mma and
 * ldmatrix are collectives of the full warp: one rendezvous, then the emulator computes from
 * every lane's registers and writes each lane's results. */
void mma_bf16_16816(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4]);
void ldmatrix(uint32_t *r, const void *row, int num, bool trans);
/* cp.async of 16 bytes with src_bytes (0..16) read and the rest zero-filled: the destination
 * turns 0xff at issue and gets its data when a wait retires the copy's group. */
void cp_async_16(void *dst, const void *src, int src_bytes);
void cp_async_commit();
/* Retires this thread's oldest committed groups until at most n are pending. */
void cp_async_wait(int n);
/* Stops the launch with an error naming the kernel and thread (__trap, bad operands). */
[[noreturn]] void device_fault(const char *what);

/* core/ptx_sm90.cuh's emulated Hopper instructions (emu/src/sm90_*.cc; semantics in
 * emu/README.md, "Hopper instructions"). `file` and `line` name the call site in reports. */
/* The emulated shared-state-space address of p: its offset in the block's dynamic shared
 * memory (faults if p is not inside it). */
uint32_t smem_offset(const void *p);
/* wgmma.mma_async m64nNk16 .f32.bf16.bf16: d is this thread's N/2 accumulators, a_regs its
 * four A registers (null: A from shared memory through desc_a). */
void wgmma(int n, int trans_a, int trans_b, float *d, const uint32_t *a_regs, uint64_t desc_a,
           uint64_t desc_b, int accumulate);
void wgmma_fence();
void wgmma_commit();
void wgmma_wait(int n, const char *file, int line);
void mbar_init(uint64_t *bar, uint32_t count, const char *file, int line);
void mbar_inval(uint64_t *bar);
/* expect_tx(tx_bytes) then, if `arrive`, arrive-on. */
void mbar_arrive(uint64_t *bar, uint32_t tx_bytes, bool arrive);
/* try_wait (may block until the phase completes: returns true) or test_wait (never blocks). */
bool mbar_wait(uint64_t *bar, uint32_t parity, bool test, const char *file, int line);
void fence_mbarrier_init();
void fence_proxy_async();
/* cp.async.bulk.tensor.Nd global -> shared with mbarrier complete_tx; shared -> global. */
void tma_load(void *smem, const void *tensor_map, uint64_t *bar, int rank, const int32_t *coords);
void tma_store(const void *tensor_map, const void *smem, int rank, const int32_t *coords);
void tma_store_commit();
/* cp.reduce.async.bulk.tensor.Nd.global.shared::cta.add.tile.bulk_group (fp32 tensor maps). */
void tma_reduce_add(const void *tensor_map, const void *smem, int rank, const int32_t *coords);
/* cp.async.bulk.prefetch.L2.global [src], bytes (no effect; its rules checked). */
void bulk_prefetch_l2(const void *src, uint32_t bytes);
void tma_store_wait(int n, bool read_only);
/* bar.sync (wait) / bar.arrive id, count. */
void named_barrier(int id, int count, bool wait, const char *file, int line);
/* setmaxnreg.inc (inc) / .dec .sync.aligned.u32 count. */
void setmaxnreg(int count, bool inc);

template <class T> inline uint64_t to_bits(T v) {
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value,
                  "warp collectives move values of at most 8 bytes");
    uint64_t u = 0;
    std::memcpy(&u, (const void *)&v, sizeof v);
    return u;
}
template <class T> inline T from_bits(uint64_t u) {
    T v;
    std::memcpy((void *)&v, &u, sizeof v);
    return v;
}
/* PTX shfl's c operand: ((32 - width) << 8) | clamp. */
inline int shfl_c(int width, int clamp) {
    if (width < 1 || width > 32 || (width & (width - 1)))
        device_fault("shuffle width must be a power of 2 in [1, 32]");
    return ((32 - width) << 8) | clamp;
}
} // namespace sl_emu

/* ---- synchronization ------------------------------------------------------------------------- */

inline void __syncthreads() {
    sl_emu::barrier(sl_emu::bar_sync, 0);
}
inline int __syncthreads_count(int pred) {
    return sl_emu::barrier(sl_emu::bar_count, pred);
}
inline int __syncthreads_and(int pred) {
    return sl_emu::barrier(sl_emu::bar_and, pred);
}
inline int __syncthreads_or(int pred) {
    return sl_emu::barrier(sl_emu::bar_or, pred);
}
inline void __syncwarp(unsigned mask = 0xffffffffu) {
    sl_emu::warp_op(sl_emu::w_syncwarp, mask, 0, 0, 0);
}
/* Memory fences order memory operations of one thread; the emulator runs threads one at a
 * time, so a compiler barrier is all that is needed. */
inline void __threadfence() {
    std::atomic_signal_fence(std::memory_order_seq_cst);
}
inline void __threadfence_block() {
    std::atomic_signal_fence(std::memory_order_seq_cst);
}
inline void __threadfence_system() {
    std::atomic_signal_fence(std::memory_order_seq_cst);
}
/* No other thread can run while this one sleeps: a spin-wait on another thread never ends
 * under the emulator (and is not something sluice's kernels do). */
inline void __nanosleep(unsigned ns) {
    (void)ns;
}
[[noreturn]] inline void __trap() {
    sl_emu::device_fault("__trap()");
}
[[noreturn]] inline void __brkpt() {
    sl_emu::device_fault("__brkpt()");
}

/* ---- warp collectives ------------------------------------------------------------------------ */

template <class T> inline T __shfl_sync(unsigned mask, T var, int srcLane, int width = warpSize) {
    return sl_emu::from_bits<T>(sl_emu::warp_op(sl_emu::w_shfl_idx, mask, sl_emu::to_bits(var),
                                                srcLane, sl_emu::shfl_c(width, 0x1f)));
}
template <class T>
inline T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = warpSize) {
    return sl_emu::from_bits<T>(sl_emu::warp_op(sl_emu::w_shfl_up, mask, sl_emu::to_bits(var),
                                                (int)delta, sl_emu::shfl_c(width, 0)));
}
template <class T>
inline T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = warpSize) {
    return sl_emu::from_bits<T>(sl_emu::warp_op(sl_emu::w_shfl_down, mask, sl_emu::to_bits(var),
                                                (int)delta, sl_emu::shfl_c(width, 0x1f)));
}
template <class T>
inline T __shfl_xor_sync(unsigned mask, T var, int laneMask, int width = warpSize) {
    return sl_emu::from_bits<T>(sl_emu::warp_op(sl_emu::w_shfl_bfly, mask, sl_emu::to_bits(var),
                                                laneMask, sl_emu::shfl_c(width, 0x1f)));
}
inline unsigned __ballot_sync(unsigned mask, int pred) {
    return (unsigned)sl_emu::warp_op(sl_emu::w_ballot, mask, pred != 0, 0, 0);
}
inline int __any_sync(unsigned mask, int pred) {
    return (int)sl_emu::warp_op(sl_emu::w_any, mask, pred != 0, 0, 0);
}
inline int __all_sync(unsigned mask, int pred) {
    return (int)sl_emu::warp_op(sl_emu::w_all, mask, pred != 0, 0, 0);
}
/* Not a rendezvous in CUDA either. The emulator cannot know which lanes a real GPU would run
 * converged, so this is every lane of the warp that has not exited. */
inline unsigned __activemask() {
    return sl_emu::active_lanes();
}
inline unsigned __reduce_add_sync(unsigned mask, unsigned v) {
    return (unsigned)sl_emu::warp_op(sl_emu::w_reduce_add, mask, v, 0, 0);
}
inline int __reduce_add_sync(unsigned mask, int v) {
    return (int)sl_emu::warp_op(sl_emu::w_reduce_add, mask, (uint32_t)v, 0, 0);
}
inline unsigned __reduce_min_sync(unsigned mask, unsigned v) {
    return (unsigned)sl_emu::warp_op(sl_emu::w_reduce_min_u, mask, v, 0, 0);
}
inline int __reduce_min_sync(unsigned mask, int v) {
    return (int)(uint32_t)sl_emu::warp_op(sl_emu::w_reduce_min_i, mask, (uint32_t)v, 0, 0);
}
inline unsigned __reduce_max_sync(unsigned mask, unsigned v) {
    return (unsigned)sl_emu::warp_op(sl_emu::w_reduce_max_u, mask, v, 0, 0);
}
inline int __reduce_max_sync(unsigned mask, int v) {
    return (int)(uint32_t)sl_emu::warp_op(sl_emu::w_reduce_max_i, mask, (uint32_t)v, 0, 0);
}
inline unsigned __reduce_and_sync(unsigned mask, unsigned v) {
    return (unsigned)sl_emu::warp_op(sl_emu::w_reduce_and, mask, v, 0, 0);
}
inline unsigned __reduce_or_sync(unsigned mask, unsigned v) {
    return (unsigned)sl_emu::warp_op(sl_emu::w_reduce_or, mask, v, 0, 0);
}
inline unsigned __reduce_xor_sync(unsigned mask, unsigned v) {
    return (unsigned)sl_emu::warp_op(sl_emu::w_reduce_xor, mask, v, 0, 0);
}
template <class T> inline unsigned __match_any_sync(unsigned mask, T value) {
    return (unsigned)sl_emu::warp_op(sl_emu::w_match_any, mask, sl_emu::to_bits(value), 0, 0);
}
template <class T> inline unsigned __match_all_sync(unsigned mask, T value, int *pred) {
    const uint64_t r = sl_emu::warp_op(sl_emu::w_match_all, mask, sl_emu::to_bits(value), 0, 0);
    *pred = (int)(r >> 32);
    return (unsigned)r;
}

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

/* ---- cache-hinted loads and stores: plain accesses on the CPU ----------------------------------
 */

template <class T> inline T __ldg(const T *p) {
    return *p;
}
template <class T> inline T __ldcg(const T *p) {
    return *p;
}
template <class T> inline T __ldca(const T *p) {
    return *p;
}
template <class T> inline T __ldcs(const T *p) {
    return *p;
}
template <class T> inline T __ldlu(const T *p) {
    return *p;
}
template <class T> inline T __ldcv(const T *p) {
    return *p;
}
template <class T> inline void __stwb(T *p, T v) {
    *p = v;
}
template <class T> inline void __stcg(T *p, T v) {
    *p = v;
}
template <class T> inline void __stcs(T *p, T v) {
    *p = v;
}
template <class T> inline void __stwt(T *p, T v) {
    *p = v;
}

/* ---- the C++ runtime API templates the toolkit keeps for nvcc (behind __CUDACC__) ------------ */

template <class T>
inline cudaError_t cudaFuncSetAttribute(T *entry, cudaFuncAttribute attr, int value) {
    return ::cudaFuncSetAttribute((const void *)entry, attr, value);
}
template <class T> inline cudaError_t cudaFuncGetAttributes(cudaFuncAttributes *attr, T *entry) {
    return ::cudaFuncGetAttributes(attr, (const void *)entry);
}

#endif
