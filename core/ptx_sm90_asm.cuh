/*
 * core/ptx_sm90_asm.cuh - the nvcc half of core/ptx_sm90.cuh: each Hopper wrapper as its
 * inline-PTX instruction (layouts, conventions and the emulated twins are in
 * core/ptx_sm90.cuh, which includes this file outside the emulated build; do not include it
 * directly).
 */
#ifndef SL_PTX_SM90_ASM_CUH
#define SL_PTX_SM90_ASM_CUH

/* ---- the instructions ------------------------------------------------------------------------ */

/* Device passes for targets without the instructions (sm_80) compile the wrappers to a trap. */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#define SL_SM90_MISSING 1
#else
#define SL_SM90_MISSING 0
#endif
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define SL_SM90A_MISSING 1 /* wgmma and setmaxnreg need the `a` target */
#else
#define SL_SM90A_MISSING 0
#endif
template <class... T> __device__ __forceinline__ void sl_sm90_trap(const T &...) {
    __trap();
}

__device__ __forceinline__ uint32_t sl_sm90_smem_addr(const void *p) {
    return sl_smem_addr(p);
}
__device__ __forceinline__ uint64_t sl_wgmma_desc(const void *smem, sl_swizzle swizzle,
                                                  uint32_t lbo, uint32_t sbo) {
    return sl_wgmma_desc_bits(sl_smem_addr(smem), swizzle, lbo, sbo);
}

/* wgmma.mma_async.sync.aligned.m64nNk16.f32.bf16.bf16, one specialization per N: the register
 * list {%0 .. %(N/2 - 1)} and the operand numbers after it are spelled out per N. */
#define SL_WG_F8(b)                                                                                \
    "+f"(d[(b) + 0]), "+f"(d[(b) + 1]), "+f"(d[(b) + 2]), "+f"(d[(b) + 3]), "+f"(d[(b) + 4]),      \
        "+f"(d[(b) + 5]), "+f"(d[(b) + 6]), "+f"(d[(b) + 7])
#define SL_WG_REGS_8   "%0, %1, %2, %3, %4, %5, %6, %7"
#define SL_WG_REGS_16  SL_WG_REGS_8 ", %8, %9, %10, %11, %12, %13, %14, %15"
#define SL_WG_REGS_24  SL_WG_REGS_16 ", %16, %17, %18, %19, %20, %21, %22, %23"
#define SL_WG_REGS_32  SL_WG_REGS_24 ", %24, %25, %26, %27, %28, %29, %30, %31"
#define SL_WG_REGS_40  SL_WG_REGS_32 ", %32, %33, %34, %35, %36, %37, %38, %39"
#define SL_WG_REGS_48  SL_WG_REGS_40 ", %40, %41, %42, %43, %44, %45, %46, %47"
#define SL_WG_REGS_56  SL_WG_REGS_48 ", %48, %49, %50, %51, %52, %53, %54, %55"
#define SL_WG_REGS_64  SL_WG_REGS_56 ", %56, %57, %58, %59, %60, %61, %62, %63"
#define SL_WG_REGS_72  SL_WG_REGS_64 ", %64, %65, %66, %67, %68, %69, %70, %71"
#define SL_WG_REGS_80  SL_WG_REGS_72 ", %72, %73, %74, %75, %76, %77, %78, %79"
#define SL_WG_REGS_88  SL_WG_REGS_80 ", %80, %81, %82, %83, %84, %85, %86, %87"
#define SL_WG_REGS_96  SL_WG_REGS_88 ", %88, %89, %90, %91, %92, %93, %94, %95"
#define SL_WG_REGS_104 SL_WG_REGS_96 ", %96, %97, %98, %99, %100, %101, %102, %103"
#define SL_WG_REGS_112 SL_WG_REGS_104 ", %104, %105, %106, %107, %108, %109, %110, %111"
#define SL_WG_REGS_120 SL_WG_REGS_112 ", %112, %113, %114, %115, %116, %117, %118, %119"
#define SL_WG_REGS_128 SL_WG_REGS_120 ", %120, %121, %122, %123, %124, %125, %126, %127"
#define SL_WG_OUT_8    SL_WG_F8(0)
#define SL_WG_OUT_16   SL_WG_OUT_8, SL_WG_F8(8)
#define SL_WG_OUT_24   SL_WG_OUT_16, SL_WG_F8(16)
#define SL_WG_OUT_32   SL_WG_OUT_24, SL_WG_F8(24)
#define SL_WG_OUT_40   SL_WG_OUT_32, SL_WG_F8(32)
#define SL_WG_OUT_48   SL_WG_OUT_40, SL_WG_F8(40)
#define SL_WG_OUT_56   SL_WG_OUT_48, SL_WG_F8(48)
#define SL_WG_OUT_64   SL_WG_OUT_56, SL_WG_F8(56)
#define SL_WG_OUT_72   SL_WG_OUT_64, SL_WG_F8(64)
#define SL_WG_OUT_80   SL_WG_OUT_72, SL_WG_F8(72)
#define SL_WG_OUT_88   SL_WG_OUT_80, SL_WG_F8(80)
#define SL_WG_OUT_96   SL_WG_OUT_88, SL_WG_F8(88)
#define SL_WG_OUT_104  SL_WG_OUT_96, SL_WG_F8(96)
#define SL_WG_OUT_112  SL_WG_OUT_104, SL_WG_F8(104)
#define SL_WG_OUT_120  SL_WG_OUT_112, SL_WG_F8(112)
#define SL_WG_OUT_128  SL_WG_OUT_120, SL_WG_F8(120)
template <int N> struct sl_wgmma_asm;
#define SL_WGMMA_ASM(N, R, o0, o1, o2, o3, o4, o5, o6)                                             \
    template <> struct sl_wgmma_asm<N> {                                                           \
        template <int TA, int TB>                                                                  \
        static __device__ __forceinline__ void ss(float (&d)[R], uint64_t da, uint64_t db,         \
                                                  int acc) {                                       \
            asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #o2 ", 0;\n"                         \
                         "wgmma.mma_async.sync.aligned.m64n" #N                                    \
                         "k16.f32.bf16.bf16 {" SL_WG_REGS_##R                                      \
                         "}, %" #o0 ", %" #o1 ", p, 1, 1, %" #o3 ", %" #o4 ";\n}\n"                \
                         : SL_WG_OUT_##R                                                           \
                         : "l"(da), "l"(db), "r"(acc), "n"(TA), "n"(TB));                          \
        }                                                                                          \
        template <int TB>                                                                          \
        static __device__ __forceinline__ void rs(float (&d)[R], const uint32_t (&a)[4],           \
                                                  uint64_t db, int acc) {                          \
            asm volatile(                                                                          \
                "{\n.reg .pred p;\nsetp.ne.b32 p, %" #o5 ", 0;\n"                                  \
                "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32.bf16.bf16 {" SL_WG_REGS_##R        \
                "}, {%" #o0 ", %" #o1 ", %" #o2 ", %" #o3 "}, %" #o4 ", p, 1, 1, %" #o6 ";\n}\n"   \
                : SL_WG_OUT_##R                                                                    \
                : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(acc), "n"(TB));         \
        }                                                                                          \
    };
SL_WGMMA_ASM(16, 8, 8, 9, 10, 11, 12, 13, 14)
SL_WGMMA_ASM(32, 16, 16, 17, 18, 19, 20, 21, 22)
SL_WGMMA_ASM(48, 24, 24, 25, 26, 27, 28, 29, 30)
SL_WGMMA_ASM(64, 32, 32, 33, 34, 35, 36, 37, 38)
SL_WGMMA_ASM(80, 40, 40, 41, 42, 43, 44, 45, 46)
SL_WGMMA_ASM(96, 48, 48, 49, 50, 51, 52, 53, 54)
SL_WGMMA_ASM(112, 56, 56, 57, 58, 59, 60, 61, 62)
SL_WGMMA_ASM(128, 64, 64, 65, 66, 67, 68, 69, 70)
SL_WGMMA_ASM(144, 72, 72, 73, 74, 75, 76, 77, 78)
SL_WGMMA_ASM(160, 80, 80, 81, 82, 83, 84, 85, 86)
SL_WGMMA_ASM(176, 88, 88, 89, 90, 91, 92, 93, 94)
SL_WGMMA_ASM(192, 96, 96, 97, 98, 99, 100, 101, 102)
SL_WGMMA_ASM(208, 104, 104, 105, 106, 107, 108, 109, 110)
SL_WGMMA_ASM(224, 112, 112, 113, 114, 115, 116, 117, 118)
SL_WGMMA_ASM(240, 120, 120, 121, 122, 123, 124, 125, 126)
SL_WGMMA_ASM(256, 128, 128, 129, 130, 131, 132, 133, 134)
#undef SL_WGMMA_ASM

/* D (+)= A * B, A and B from shared memory (descriptors); accumulate = 0: D = A * B. */
template <int N, int TransA, int TransB>
__device__ __forceinline__ void sl_wgmma_bf16_ss(float (&d)[N / 2], uint64_t desc_a,
                                                 uint64_t desc_b, int accumulate) {
    static_assert(N % 16 == 0 && N >= 16 && N <= 256, "wgmma: N is a multiple of 16 in 16..256");
    static_assert((TransA | TransB) >> 1 == 0, "wgmma: transpose bits are 0 or 1");
#if SL_SM90A_MISSING
    sl_sm90_trap(d, desc_a, desc_b, accumulate);
#else
    sl_wgmma_asm<N>::template ss<TransA, TransB>(d, desc_a, desc_b, accumulate);
#endif
}
/* D (+)= A * B, A from registers (layout above, K-major), B from shared memory. */
template <int N, int TransB>
__device__ __forceinline__ void sl_wgmma_bf16_rs(float (&d)[N / 2], const uint32_t (&a)[4],
                                                 uint64_t desc_b, int accumulate) {
    static_assert(N % 16 == 0 && N >= 16 && N <= 256, "wgmma: N is a multiple of 16 in 16..256");
    static_assert(TransB >> 1 == 0, "wgmma: transpose bits are 0 or 1");
#if SL_SM90A_MISSING
    sl_sm90_trap(d, a, desc_b, accumulate);
#else
    sl_wgmma_asm<N>::template rs<TransB>(d, a, desc_b, accumulate);
#endif
}
/* wgmma.fence.sync.aligned: orders this thread's register accesses before the next wgmma. */
__device__ __forceinline__ void sl_wgmma_fence() {
#if SL_SM90A_MISSING
    __trap();
#else
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
/* wgmma.commit_group.sync.aligned: the wgmmas issued since the last commit form a group. */
__device__ __forceinline__ void sl_wgmma_commit() {
#if SL_SM90A_MISSING
    __trap();
#else
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
/* wgmma.wait_group.sync.aligned N: at most N groups remain pending. */
template <int N> __device__ __forceinline__ void sl_wgmma_wait() {
    static_assert(N >= 0 && N <= 7, "wgmma.wait_group takes 0..7");
#if SL_SM90A_MISSING
    __trap();
#else
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}
/* Keeps nvcc from moving accesses of these registers across a wgmma's asynchronous window. */
template <int R> __device__ __forceinline__ void sl_wgmma_fence_operand(float (&r)[R]) {
#pragma unroll
    for (int i = 0; i < R; i++) asm volatile("" : "+f"(r[i])::"memory");
}
template <int R> __device__ __forceinline__ void sl_wgmma_fence_operand(uint32_t (&r)[R]) {
#pragma unroll
    for (int i = 0; i < R; i++) asm volatile("" : "+r"(r[i])::"memory");
}

/* mbarrier.init.shared::cta.b64 [bar], count (1 .. 2^20 - 1). */
__device__ __forceinline__ void sl_mbar_init(uint64_t *bar, uint32_t count) {
#if SL_SM90_MISSING
    sl_sm90_trap(bar, count);
#else
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(sl_smem_addr(bar)), "r"(count)
                 : "memory");
#endif
}
/* mbarrier.inval.shared::cta.b64 [bar]: before its memory is used for anything else. */
__device__ __forceinline__ void sl_mbar_inval(uint64_t *bar) {
#if SL_SM90_MISSING
    sl_sm90_trap(bar);
#else
    asm volatile("mbarrier.inval.shared::cta.b64 [%0];\n" ::"r"(sl_smem_addr(bar)) : "memory");
#endif
}
/* fence.mbarrier_init.release.cluster: initializations visible to the async proxy (TMA). */
__device__ __forceinline__ void sl_fence_mbarrier_init() {
#if SL_SM90_MISSING
    __trap();
#else
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}
/* mbarrier.arrive.shared::cta.b64 _, [bar]. */
__device__ __forceinline__ void sl_mbar_arrive(uint64_t *bar) {
#if SL_SM90_MISSING
    sl_sm90_trap(bar);
#else
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(sl_smem_addr(bar)) : "memory");
#endif
}
/* mbarrier.arrive.expect_tx.shared::cta.b64 _, [bar], bytes: expects `bytes` more transaction
 * bytes in the current phase, then arrives. */
__device__ __forceinline__ void sl_mbar_arrive_expect_tx(uint64_t *bar, uint32_t bytes) {
#if SL_SM90_MISSING
    sl_sm90_trap(bar, bytes);
#else
    asm volatile(
        "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(sl_smem_addr(bar)),
        "r"(bytes)
        : "memory");
#endif
}
/* mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [bar], bytes (no arrival). */
__device__ __forceinline__ void sl_mbar_expect_tx(uint64_t *bar, uint32_t bytes) {
#if SL_SM90_MISSING
    sl_sm90_trap(bar, bytes);
#else
    asm volatile(
        "mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(sl_smem_addr(bar)),
        "r"(bytes)
        : "memory");
#endif
}
/* mbarrier.try_wait.parity.shared::cta.b64: true once the phase of this parity has completed
 * (may wait a while first); false means try again. */
__device__ __forceinline__ bool sl_mbar_try_wait(uint64_t *bar, uint32_t parity) {
#if SL_SM90_MISSING
    sl_sm90_trap(bar, parity);
    return false;
#else
    uint32_t done;
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                 "selp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done)
                 : "r"(sl_smem_addr(bar)), "r"(parity)
                 : "memory");
    return done != 0;
#endif
}
/* mbarrier.test_wait.parity.shared::cta.b64: the same without waiting. */
__device__ __forceinline__ bool sl_mbar_test_wait(uint64_t *bar, uint32_t parity) {
#if SL_SM90_MISSING
    sl_sm90_trap(bar, parity);
    return false;
#else
    uint32_t done;
    asm volatile("{\n.reg .pred p;\nmbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                 "selp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done)
                 : "r"(sl_smem_addr(bar)), "r"(parity)
                 : "memory");
    return done != 0;
#endif
}
/* Waits until the phase of this parity has completed. */
__device__ __forceinline__ void sl_mbar_wait(uint64_t *bar, uint32_t parity) {
    while (!sl_mbar_try_wait(bar, parity)) {
    }
}
/* fence.proxy.async.shared::cta: this thread's ordinary shared-memory stores become visible to
 * the async proxy (wgmma operands, TMA stores). */
__device__ __forceinline__ void sl_fence_proxy_async() {
#if SL_SM90_MISSING
    __trap();
#else
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

/* fence.proxy.async.global: the same between this thread's ordinary accesses to global memory
 * and the async proxy's (TMA stores and reductions into global memory): where a generic-proxy
 * flag in global memory orders TMA reductions of different blocks (the ordered fused dQ). */
__device__ __forceinline__ void sl_fence_proxy_async_global() {
#if SL_SM90_MISSING
    __trap();
#else
    asm volatile("fence.proxy.async.global;\n" ::: "memory");
#endif
}

/* prefetch.tensormap: fetches the tensor map into the cache ahead of the first load. */
__device__ __forceinline__ void sl_tma_prefetch(const CUtensorMap *map) {
#if SL_SM90_MISSING
    sl_sm90_trap(map);
#else
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(map) : "memory");
#endif
}
/* cp.async.bulk.prefetch.L2.global [src], bytes: brings a contiguous range of global memory
 * into L2 ahead of its loads (a hint; src 16-byte aligned, bytes a non-zero multiple of 16). */
__device__ __forceinline__ void sl_bulk_prefetch_l2(const void *src, uint32_t bytes) {
#if SL_SM90_MISSING
    sl_sm90_trap(src, bytes);
#else
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(src), "r"(bytes) : "memory");
#endif
}
/* cp.async.bulk.tensor.Nd.shared::cluster.global.mbarrier::complete_tx::bytes [smem],
 * [map, {c0, ...}], [bar]: the box at element coordinates (c0 innermost) into smem; its bytes
 * complete on bar. */
__device__ __forceinline__ void sl_tma_load_2d(void *smem, const CUtensorMap *map, uint64_t *bar,
                                               int c0, int c1) {
#if SL_SM90_MISSING
    sl_sm90_trap(smem, map, bar, c0, c1);
#else
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes "
                 "[%0], [%1, {%3, %4}], [%2];\n" ::"r"(sl_smem_addr(smem)),
                 "l"(map), "r"(sl_smem_addr(bar)), "r"(c0), "r"(c1)
                 : "memory");
#endif
}
__device__ __forceinline__ void sl_tma_load_3d(void *smem, const CUtensorMap *map, uint64_t *bar,
                                               int c0, int c1, int c2) {
#if SL_SM90_MISSING
    sl_sm90_trap(smem, map, bar, c0, c1, c2);
#else
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes "
                 "[%0], [%1, {%3, %4, %5}], [%2];\n" ::"r"(sl_smem_addr(smem)),
                 "l"(map), "r"(sl_smem_addr(bar)), "r"(c0), "r"(c1), "r"(c2)
                 : "memory");
#endif
}
__device__ __forceinline__ void sl_tma_load_4d(void *smem, const CUtensorMap *map, uint64_t *bar,
                                               int c0, int c1, int c2, int c3) {
#if SL_SM90_MISSING
    sl_sm90_trap(smem, map, bar, c0, c1, c2, c3);
#else
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes "
                 "[%0], [%1, {%3, %4, %5, %6}], [%2];\n" ::"r"(sl_smem_addr(smem)),
                 "l"(map), "r"(sl_smem_addr(bar)), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
                 : "memory");
#endif
}
/* cp.async.bulk.tensor.Nd.global.shared::cta.bulk_group [map, {c0, ...}], [smem]: the box
 * from smem into the tensor (elements outside it are not written); completes with
 * sl_tma_store_commit and sl_tma_store_wait[_read]. */
__device__ __forceinline__ void sl_tma_store_2d(const CUtensorMap *map, const void *smem, int c0,
                                                int c1) {
#if SL_SM90_MISSING
    sl_sm90_trap(map, smem, c0, c1);
#else
    asm volatile(
        "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];\n" ::"l"(map),
        "r"(sl_smem_addr(smem)), "r"(c0), "r"(c1)
        : "memory");
#endif
}
__device__ __forceinline__ void sl_tma_store_3d(const CUtensorMap *map, const void *smem, int c0,
                                                int c1, int c2) {
#if SL_SM90_MISSING
    sl_sm90_trap(map, smem, c0, c1, c2);
#else
    asm volatile(
        "cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];\n" ::"l"(
            map),
        "r"(sl_smem_addr(smem)), "r"(c0), "r"(c1), "r"(c2)
        : "memory");
#endif
}
__device__ __forceinline__ void sl_tma_store_4d(const CUtensorMap *map, const void *smem, int c0,
                                                int c1, int c2, int c3) {
#if SL_SM90_MISSING
    sl_sm90_trap(map, smem, c0, c1, c2, c3);
#else
    asm volatile(
        "cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];\n" ::
            "l"(map),
        "r"(sl_smem_addr(smem)), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
        : "memory");
#endif
}
/* cp.reduce.async.bulk.tensor.4d ... .add.tile.bulk_group: the box at the coordinates becomes
 * global + shared, element by element, each addition atomic in L2 (the element type is the
 * tensor map's; sluice uses fp32). A bulk async-group operation like a store: its shared memory
 * stays untouched until sl_tma_store_wait_read, its global result is there after
 * sl_tma_store_wait. Elements outside the tensor are left alone. */
__device__ __forceinline__ void sl_tma_reduce_add_4d(const CUtensorMap *map, const void *smem,
                                                     int c0, int c1, int c2, int c3) {
#if SL_SM90_MISSING
    sl_sm90_trap(map, smem, c0, c1, c2, c3);
#else
    asm volatile("cp.reduce.async.bulk.tensor.4d.global.shared::cta.add.tile.bulk_group"
                 " [%0, {%2, %3, %4, %5}], [%1];\n" ::"l"(map),
                 "r"(sl_smem_addr(smem)), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
                 : "memory");
#endif
}
/* cp.async.bulk.commit_group: this thread's TMA stores since the last commit form a group. */
__device__ __forceinline__ void sl_tma_store_commit() {
#if SL_SM90_MISSING
    __trap();
#else
    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
#endif
}
/* cp.async.bulk.wait_group.read N: the sources of all but N groups have been read (their
 * shared memory may be reused). */
template <int N> __device__ __forceinline__ void sl_tma_store_wait_read() {
    static_assert(N >= 0, "cp.async.bulk.wait_group takes a non-negative count");
#if SL_SM90_MISSING
    __trap();
#else
    asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
#endif
}
/* cp.async.bulk.wait_group N: all but N groups have completed (global memory written). */
template <int N> __device__ __forceinline__ void sl_tma_store_wait() {
    static_assert(N >= 0, "cp.async.bulk.wait_group takes a non-negative count");
#if SL_SM90_MISSING
    __trap();
#else
    asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

/* bar.sync id, nthreads / bar.arrive id, nthreads: named barrier id (1..15; 0 is
 * __syncthreads'), nthreads a multiple of 32; whole warps execute it. */
__device__ __forceinline__ void sl_named_bar_sync(int id, int nthreads) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(nthreads) : "memory");
}
__device__ __forceinline__ void sl_named_bar_arrive(int id, int nthreads) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(nthreads) : "memory");
}

/* setmaxnreg.{inc,dec}.sync.aligned.u32 R: the warpgroup's per-thread register budget becomes
 * R (a multiple of 8 in 24..256); all 128 threads of the warpgroup execute it. */
template <int R> __device__ __forceinline__ void sl_setmaxnreg_inc() {
    static_assert(R >= 24 && R <= 256 && R % 8 == 0, "setmaxnreg: a multiple of 8 in 24..256");
#if SL_SM90A_MISSING
    __trap();
#else
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(R));
#endif
}
template <int R> __device__ __forceinline__ void sl_setmaxnreg_dec() {
    static_assert(R >= 24 && R <= 256 && R % 8 == 0, "setmaxnreg: a multiple of 8 in 24..256");
#if SL_SM90A_MISSING
    __trap();
#else
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(R));
#endif
}

#endif
