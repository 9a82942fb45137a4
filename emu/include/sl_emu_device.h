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
 * - __syncthreads, __syncwarp and the warp collectives are scheduling points
 *   (emu/src/simt_sync.cc).
 * - atomics are plain read-modify-writes: only one emulated thread runs at a time; cache-hinted
 *   loads and stores are plain accesses (sl_emu_memory.h).
 * - math: what CUDA has and the C library lacks (sl_emu_math.h).
 */
#ifndef SL_EMU_DEVICE_H
#define SL_EMU_DEVICE_H

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
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

/* ---- the scheduler's entry points (emu/src/simt.cc, simt_sync.cc) --------------------------- */

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
/* A vector access of `bytes` bytes at p (core/cuda_common.cuh's SL_CHECK_ALIGNED, the
 * cache-hinted loads and stores): on the GPU an address that is not a multiple of `bytes`
 * raises a misaligned-address fault; the host's loads would not, so the emulator stops the
 * launch there, naming the call site (line 0: no site known). */
inline void sl_emu_check_aligned(const void *p, size_t bytes, const char *file, int line) {
    if (((uintptr_t)p & (bytes - 1)) == 0) return;
    static thread_local char msg[320];
    snprintf(msg, sizeof msg, "misaligned address: a %zu-byte access at %p (%s:%d)", bytes, p, file,
             line);
    sl_emu::device_fault(msg);
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

/* ---- atomics and cache-hinted loads and stores; math ---------------------------------------- */

#include "sl_emu_memory.h"
#include "sl_emu_math.h"

/* ---- the C++ runtime API templates the toolkit keeps for nvcc (behind __CUDACC__) ------------ */

template <class T>
inline cudaError_t cudaFuncSetAttribute(T *entry, cudaFuncAttribute attr, int value) {
    return ::cudaFuncSetAttribute((const void *)entry, attr, value);
}
template <class T> inline cudaError_t cudaFuncGetAttributes(cudaFuncAttributes *attr, T *entry) {
    return ::cudaFuncGetAttributes(attr, (const void *)entry);
}

#endif
