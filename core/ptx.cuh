/*
 * core/ptx.cuh - the tensor-core and asynchronous-copy instructions sluice's kernels use, one
 * inline device function per PTX instruction (docs/cuda.md, "Tensor-core wrappers").
 *
 * Rule: every inline-PTX instruction lives here, in one wrapper, and has an emulated twin that
 * implements the PTX ISA's semantics exactly in the CPU SIMT test double (emu/, built with
 * -DSLUICE_CUDA=EMULATED). The warp-wide instructions (mma, ldmatrix) are warp collectives
 * there: all 32 lanes meet, the emulator gathers every lane's registers, computes, and
 * scatters each lane's result by the ISA's fragment layout (emu/src/ptx.cc). sm_80 or newer.
 *
 * Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type" and
 * "ldmatrix"). lane = laneid, g = groupID = lane >> 2, t = threadID_in_group = lane % 4. A
 * 32-bit register holding two bf16 holds the element with the smaller column (A, C/D) or row
 * (B) index in its low 16 bits.
 *
 *   mma.m16n8k16 A (16x16, row major, 4 x .b32 = 8 bf16):
 *     a[0] = A[g    ][2t, 2t+1]      a[1] = A[g + 8][2t, 2t+1]
 *     a[2] = A[g    ][2t+8, 2t+9]    a[3] = A[g + 8][2t+8, 2t+9]
 *   mma.m16n8k16 B (16x8, "col": K x N, 2 x .b32 = 4 bf16):
 *     b[0] = B[2t, 2t+1][g]          b[1] = B[2t+8, 2t+9][g]
 *   C and D (16x8 fp32, 4 x .f32):
 *     c[0] = C[g][2t]  c[1] = C[g][2t+1]  c[2] = C[g+8][2t]  c[3] = C[g+8][2t+1]
 *
 *   ldmatrix.m8n8.b16 (.x1 / .x2 / .x4: 1, 2 or 4 matrices of 8x8 b16): lane 8i + r gives the
 *   shared-memory address of row r of matrix i (16 contiguous bytes, 16-byte aligned; .x1 uses
 *   lanes 0-7's addresses, .x2 lanes 0-15's, the others are ignored). Register r[i] of lane
 *   receives from matrix M = matrix i:
 *     without .trans: M[g][2t] (low half), M[g][2t+1] (high half)
 *     with .trans:    M[2t][g] (low half), M[2t+1][g] (high half)
 *   So an x4 over the four 8x8 quadrants of a row-major 16x16 tile (matrix 0 rows 0-7 cols 0-7,
 *   1 rows 8-15 cols 0-7, 2 rows 0-7 cols 8-15, 3 rows 8-15 cols 8-15) yields exactly mma's A
 *   fragment, and .x2.trans over a row-major K x N tile (matrix 0 rows k 0-7, matrix 1 rows k
 *   8-15) yields mma's B fragment.
 *
 * Emulated accumulation order: d = c, then for k = 0..15 in order d += a[m][k] * b[k][n] in
 * fp32 (each bf16 x bf16 product is exact in fp32, so this is a plain fp32 loop over k, bitwise;
 * the tensor core's own summation order is unspecified and its result may differ in the last
 * bits).
 *
 * cp.async (16 bytes, .cg: global -> shared, bypassing L1): the copy is complete only after a
 * cp.async.wait_group that leaves fewer groups pending than its own. The emulator makes a
 * missing wait visible: at issue the 16 destination bytes become 0xff (NaN as fp32 and bf16)
 * and the data arrive only when a wait_group retires the copy's group, so a kernel that reads
 * before waiting reads NaN. Copies not yet committed to a group are not retired by any wait.
 */
#ifndef SL_PTX_CUH
#define SL_PTX_CUH

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

/* ---- bf16 pairs as one 32-bit register --------------------------------------------------- */

/* lo and hi rounded to bf16 (nearest even), lo in the low 16 bits: the element with the
 * smaller column (A, C) or row (B) index, as the mma fragments expect. */
__device__ __forceinline__ uint32_t sl_pack_bf16x2(float lo, float hi) {
    const uint32_t l = __bfloat16_as_ushort(__float2bfloat16_rn(lo));
    const uint32_t h = __bfloat16_as_ushort(__float2bfloat16_rn(hi));
    return l | (h << 16);
}
/* The reverse: the two bf16 of v as floats (exact). */
__device__ __forceinline__ void sl_unpack_bf16x2(uint32_t v, float *lo, float *hi) {
    *lo = __uint_as_float(v << 16);
    *hi = __uint_as_float(v & 0xffff0000u);
}

/* ---- the softmax's exponential ------------------------------------------------------------ */

/* 2^x as ex2.approx.ftz.f32: one MUFU.EX2. exp2f compiles to ex2.approx.f32 without .ftz, which
 * ptxas wraps for results below 2^-126 (FSETP, and a predicated FMUL before and after the MUFU:
 * nvcc 13.0, sm_90a, read in the attention kernels' SASS), three more instructions for every
 * score of a softmax. With .ftz such results are 0 (a probability below 2^-126 adds nothing to
 * an fp32 sum of values up to 1) and 2^-inf is 0. The twin is exp2f with the same flush (the
 * hardware's approximation differs from it by at most 2 ulp, PTX ISA "ex2"). */
__device__ __forceinline__ float sl_ex2_ftz(float x) {
#ifdef SLUICE_CUDA_EMULATED
    const float y = exp2f(x);
    return y < 1.17549435e-38f ? 0.0f : y;
#else
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
#endif
}

#ifdef SLUICE_CUDA_EMULATED

/* ---- emulated twins (emu/src/ptx.cc): warp collectives and per-thread copy queues ---------- */

/* d = a * b + c for the warp's 16x8x16 tile; every lane of the warp must call it. */
__device__ __forceinline__ void sl_mma_bf16_16816(float d[4], const uint32_t a[4],
                                                  const uint32_t b[2], const float c[4]) {
    sl_emu::mma_bf16_16816(d, a, b, c);
}
__device__ __forceinline__ void sl_ldmatrix_x1(uint32_t *r, const void *smem_row_addr) {
    sl_emu::ldmatrix(r, smem_row_addr, 1, false);
}
__device__ __forceinline__ void sl_ldmatrix_x2(uint32_t *r, const void *smem_row_addr) {
    sl_emu::ldmatrix(r, smem_row_addr, 2, false);
}
__device__ __forceinline__ void sl_ldmatrix_x4(uint32_t *r, const void *smem_row_addr) {
    sl_emu::ldmatrix(r, smem_row_addr, 4, false);
}
__device__ __forceinline__ void sl_ldmatrix_x1_trans(uint32_t *r, const void *smem_row_addr) {
    sl_emu::ldmatrix(r, smem_row_addr, 1, true);
}
__device__ __forceinline__ void sl_ldmatrix_x2_trans(uint32_t *r, const void *smem_row_addr) {
    sl_emu::ldmatrix(r, smem_row_addr, 2, true);
}
__device__ __forceinline__ void sl_ldmatrix_x4_trans(uint32_t *r, const void *smem_row_addr) {
    sl_emu::ldmatrix(r, smem_row_addr, 4, true);
}
__device__ __forceinline__ void sl_cp_async_16(void *smem, const void *gmem) {
    sl_emu::cp_async_16(smem, gmem, 16);
}
__device__ __forceinline__ void sl_cp_async_16_zfill(void *smem, const void *gmem, int src_bytes) {
    sl_emu::cp_async_16(smem, gmem, src_bytes);
}
__device__ __forceinline__ void sl_cp_async_commit() {
    sl_emu::cp_async_commit();
}
template <int N> __device__ __forceinline__ void sl_cp_async_wait() {
    static_assert(N >= 0, "cp.async.wait_group takes a non-negative group count");
    sl_emu::cp_async_wait(N);
}

#else

/* ---- the instructions ------------------------------------------------------------------- */

/* 32-bit shared-state-space address of a generic pointer into shared memory. */
__device__ __forceinline__ uint32_t sl_smem_addr(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32: d = a * b + c (layouts above); every
 * lane of the warp must execute it. d may be c. */
__device__ __forceinline__ void sl_mma_bf16_16816(float d[4], const uint32_t a[4],
                                                  const uint32_t b[2], const float c[4]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
                 "{%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]),
                   "f"(c[1]), "f"(c[2]), "f"(c[3]));
}

/* ldmatrix.sync.aligned.m8n8.{x1,x2,x4}{,.trans}.shared.b16: r[0..n-1] (layouts above);
 * smem_row_addr is this lane's row address (16-byte aligned shared memory). The "memory"
 * clobber keeps the compiler from moving shared-memory stores across it. */
__device__ __forceinline__ void sl_ldmatrix_x1(uint32_t *r, const void *smem_row_addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n"
                 : "=r"(r[0])
                 : "r"(sl_smem_addr(smem_row_addr))
                 : "memory");
}
__device__ __forceinline__ void sl_ldmatrix_x2(uint32_t *r, const void *smem_row_addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(sl_smem_addr(smem_row_addr))
                 : "memory");
}
__device__ __forceinline__ void sl_ldmatrix_x4(uint32_t *r, const void *smem_row_addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(sl_smem_addr(smem_row_addr))
                 : "memory");
}
__device__ __forceinline__ void sl_ldmatrix_x1_trans(uint32_t *r, const void *smem_row_addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n"
                 : "=r"(r[0])
                 : "r"(sl_smem_addr(smem_row_addr))
                 : "memory");
}
__device__ __forceinline__ void sl_ldmatrix_x2_trans(uint32_t *r, const void *smem_row_addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(sl_smem_addr(smem_row_addr))
                 : "memory");
}
__device__ __forceinline__ void sl_ldmatrix_x4_trans(uint32_t *r, const void *smem_row_addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(sl_smem_addr(smem_row_addr))
                 : "memory");
}

/* cp.async.cg.shared.global [smem], [gmem], 16: copies 16 bytes (both 16-byte aligned),
 * asynchronously: complete only after a wait that retires its group (sl_cp_async_wait). */
__device__ __forceinline__ void sl_cp_async_16(void *smem, const void *gmem) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(sl_smem_addr(smem)), "l"(gmem)
                 : "memory");
}
/* The same with a source size: reads src_bytes (0..16) bytes of gmem and zero-fills the rest
 * of the 16; src_bytes = 0 reads nothing (bounds handling at a tile's edge). */
__device__ __forceinline__ void sl_cp_async_16_zfill(void *smem, const void *gmem, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(sl_smem_addr(smem)),
                 "l"(gmem), "r"(src_bytes)
                 : "memory");
}
/* cp.async.commit_group: this thread's copies issued since the last commit form one group. */
__device__ __forceinline__ void sl_cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
/* cp.async.wait_group N: waits until at most N of this thread's committed groups are pending
 * (N = 0: all). Other threads' copies need a __syncthreads() after their own waits. */
template <int N> __device__ __forceinline__ void sl_cp_async_wait() {
    static_assert(N >= 0, "cp.async.wait_group takes a non-negative group count");
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

#endif

#endif
