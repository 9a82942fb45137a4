/*
 * attention/gated_attn_tc.cuh - what the tensor-core gated-attention kernels share
 * (gated_attn_tc_fwd.cu, gated_attn_tc_bwd.cu): arguments, tile geometry, the swizzled shared-
 * memory tile layout, cp.async tile loads, and the four ways a warp takes an MMA operand out of a
 * tile. bf16 only, head dims 64 and 128; the design is in docs/attention.md ("The tensor-core
 * kernel") and at the top of gated_attn_tc_fwd.cu.
 *
 * Every inline-PTX instruction comes from core/ptx.cuh (mma.sync m16n8k16, ldmatrix, cp.async),
 * whose emulated twins implement the PTX ISA fragment layouts, so these kernels run unchanged
 * in the SIMT test double. Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16"),
 * with g = lane / 4 and t = lane % 4:
 *   A (16 x 16, row-major):  a[0] = (g, 2t..2t+1)   a[1] = (g+8, 2t..2t+1)
 *                            a[2] = (g, 2t+8..+9)   a[3] = (g+8, 2t+8..+9)
 *   B (16 x 8, k x n):       b[0] = (k 2t..2t+1, n g)  b[1] = (k 2t+8..2t+9, n g)
 *   C/D (16 x 8, fp32):      c[0..1] = (g, 2t..2t+1)   c[2..3] = (g+8, 2t..2t+1)
 * so the C fragments of two adjacent n-tiles are, packed to bf16 pairs, exactly the A fragment
 * of the next product (acc_to_a): P and dS never leave registers on their way into P V or dS K.
 */
#ifndef SL_GATED_ATTN_TC_CUH
#define SL_GATED_ATTN_TC_CUH

#include "attention/gated_attn.cuh" /* kLog2e, kLn2, sigmoid, first_key_tile */
#include "core/cuda_common.cuh"
#include "core/ptx.cuh"

namespace sl_attn_tc {

using sl_attn::first_key_tile;
using sl_attn::kLn2;
using sl_attn::kLog2e;
using sl_attn::sigmoid;

/* Four warps; a query tile is 64 rows (16 per warp), a key tile 64 keys. */
constexpr int kWarps = 4, kThreads = 32 * kWarps, kBr = 64, kBc = 64;

/* Arguments of every tensor-core attention kernel (unused fields stay null). Layouts as
 * core/ops.h: q/o/y/dy/dq [T, H, D], k/v/dk/dv [T, KV, D], g [T, H, D] (gate 2), [T, H]
 * (gate 1) or none (gate 0), lse/di [T, H] fp32, seg [T] (document start of each token) or null.
 * dob: dO = dy * sigmoid(g) in bf16, written by the backward's prep pass; dqacc: fp32 [T, H, D]
 * accumulator of the atomic dQ mode. */
struct args {
    const sl_bf16 *q, *k, *v, *g, *dy, *o, *dob;
    sl_bf16 *y, *ow, *dq, *dk, *dv, *dg, *dobw;
    const float *lse, *di;
    float *lsew, *diw, *dqacc;
    const int *seg;
    int batch, seq, h, kv, grp, gate;
    float scale;
};

/* A tile of ROWS rows x D bf16 columns in shared memory, in 16-byte chunks (8 elements) with
 * the chunk index XOR-swizzled by the row: chunk c of row r sits at chunk c ^ (r & 7). ldmatrix
 * reads the same logical chunk of 8 consecutive rows at once; unswizzled, rows of 128 or 256
 * bytes would put all 8 in the same banks (8-way conflict), swizzled they cover all 32 banks.
 * cp.async writes whole chunks, so the swizzle costs nothing on the way in. */
template <int D> __device__ __forceinline__ int swz(int r, int chunk) {
    static_assert(D == 64 || D == 128, "the swizzle needs at least 8 chunks per row");
    return r * D + ((chunk ^ (r & 7)) << 3);
}

/* Issues cp.async copies of rows [0, ROWS) of a row-major bf16 source (row r at src + r * ld)
 * into the swizzled tile s; rows >= nrows are zero-filled (a 0-byte source, from a valid
 * address). The caller commits the group and waits for it. */
template <int ROWS, int D>
__device__ __forceinline__ void load_tile_async(sl_bf16 *s, const sl_bf16 *src, int64_t ld,
                                                int nrows) {
    constexpr int CH = D / 8;
    for (int idx = threadIdx.x; idx < ROWS * CH; idx += kThreads) {
        const int r = idx / CH, c = idx % CH;
        const bool in = r < nrows;
        sl_cp_async_16_zfill(s + swz<D>(r, c), src + (in ? r * ld : 0) + c * 8, in ? 16 : 0);
    }
}

/* A operand (16 x 16, rows row0.., columns col0..) of a row-major tile: ldmatrix.x4, lanes
 * 0-7 / 8-15 / 16-23 / 24-31 address rows 0-7 / 8-15 / 0-7 / 8-15 at column chunks
 * c0 / c0 / c0+1 / c0+1, giving a[0..3] in the A layout above. */
template <int D>
__device__ __forceinline__ void ld_a(uint32_t (&a)[4], const sl_bf16 *s, int row0, int col0) {
    const int lane = threadIdx.x & 31;
    sl_ldmatrix_x4(a, s + swz<D>(row0 + (lane & 7) + (lane & 8), (col0 >> 3) + (lane >> 4)));
}

/* B operands of two n-tiles (n0..n0+7 and n0+8..n0+15) x k16 (k0..) from a tile stored [n][k]
 * (K for S = Q K^T: rows are keys = n, columns the head dim = k): ldmatrix.x4 without
 * transpose; b[0..1] is n-tile 0, b[2..3] n-tile 1. */
template <int D>
__device__ __forceinline__ void ld_b_nk(uint32_t (&b)[4], const sl_bf16 *s, int n0, int k0) {
    const int lane = threadIdx.x & 31;
    sl_ldmatrix_x4(b,
                   s + swz<D>(n0 + (lane & 7) + ((lane >> 4) << 3), (k0 >> 3) + ((lane >> 3) & 1)));
}

/* B operands of two n-tiles (n0.., n0+8..) x k16 (k0..) from a tile stored [k][n] (V for O +=
 * P V: rows are keys = k, columns the head dim = n): ldmatrix.x4.trans; b[0..1] is n-tile 0,
 * b[2..3] n-tile 1. */
template <int D>
__device__ __forceinline__ void ld_b_kn(uint32_t (&b)[4], const sl_bf16 *s, int k0, int n0) {
    const int lane = threadIdx.x & 31;
    sl_ldmatrix_x4_trans(b, s + swz<D>(k0 + (lane & 7) + (lane & 8), (n0 >> 3) + (lane >> 4)));
}

/* The A operand for keys 16 kk.. of a product whose left factor is an accumulator held as
 * n-tiles c[2 kk] and c[2 kk + 1] (fp32 C layout), rounded to bf16. */
__device__ __forceinline__ void acc_to_a(uint32_t (&a)[4], const float (&c0)[4],
                                         const float (&c1)[4]) {
    a[0] = sl_pack_bf16x2(c0[0], c0[1]);
    a[1] = sl_pack_bf16x2(c0[2], c0[3]);
    a[2] = sl_pack_bf16x2(c1[0], c1[1]);
    a[3] = sl_pack_bf16x2(c1[2], c1[3]);
}

/* d += a b on one 16 x 8 tile (fp32 accumulation). */
__device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                    uint32_t b1) {
    const uint32_t b[2] = {b0, b1};
    sl_mma_bf16_16816(d, a, b, d);
}

/* d0 += a b[0..1] and d1 += a b[2..3]: the two n-tiles one ld_b_nk / ld_b_kn load gives. */
__device__ __forceinline__ void mma2(float (&d0)[4], float (&d1)[4], const uint32_t (&a)[4],
                                     const uint32_t (&b)[4]) {
    mma(d0, a, b[0], b[1]);
    mma(d1, a, b[2], b[3]);
}

/* Zeroes N accumulator tiles. */
template <int N> __device__ __forceinline__ void zero(float (&acc)[N][4]) {
    SL_UNROLL
    for (int n = 0; n < N; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
}

/* One step of a two-stage cp.async pipeline. With more tiles to come, issue() queues the next
 * tile's copies (into the stage whose readers passed the previous step's closing barrier) as a
 * new group, and the wait leaves only that group in flight; at the last tile everything is
 * waited for. The barrier then makes the current tile visible to every warp. */
template <class Issue> __device__ __forceinline__ void pipeline_next(bool more, Issue issue) {
    if (more) {
        issue();
        sl_cp_async_commit();
        sl_cp_async_wait<1>();
    } else {
        sl_cp_async_wait<0>();
    }
    __syncthreads();
}

/* Max / sum over the 4 lanes of a quad (the lanes holding one row of a C fragment). */
__device__ __forceinline__ float quad_max(float v) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

/* A query-tile block (forward, and the backward's deterministic dQ pass): blockIdx.x enumerates
 * (query tile, sequence, head) with the head fastest, latest (longest) query tiles first. Heads
 * of one GQA group are adjacent, so the blocks streaming the same K/V run together and share
 * it through L2 (docs/attention.md: why the group is not packed into one block). */
struct qtile {
    int h, kvh, i0, nq;
    int64_t tok0;
};

/* The same grid for query tiles of BR rows (the Hopper kernel's are 128). */
template <int BR = kBr> __device__ __forceinline__ qtile locate_qtile(const args &a) {
    qtile t;
    const int nqt = (a.seq + BR - 1) / BR;
    const int64_t per_tile = (int64_t)a.batch * a.h;
    t.i0 = (nqt - 1 - (int)(blockIdx.x / per_tile)) * BR;
    t.h = (int)(blockIdx.x % a.h);
    t.tok0 = (int64_t)(blockIdx.x % per_tile / a.h) * a.seq;
    t.kvh = t.h / a.grp;
    t.nq = a.seq - t.i0 < BR ? a.seq - t.i0 : BR;
    return t;
}
/* Tile `index` of that order, for the Hopper kernels' blocks (a persistent one takes numbers
 * from a counter): 32-bit divisions (the launcher checks that the tiles' count fits an int),
 * which the persistent producer's few registers hold where the 64-bit ones spilled; b: the
 * tile's sequence. locate_qtile keeps its 64-bit form: built on this one, the mma.sync
 * forward at head dim 64 took 161 registers instead of 131 on sm_80 (nvcc 13.0, 2026-11-27). */
template <int BR>
__device__ __forceinline__ qtile locate_qtile_at(const args &a, int index, int &b) {
    qtile t;
    const int nqt = (a.seq + BR - 1) / BR, per_tile = a.batch * a.h;
    const int tile = index / per_tile, rest = index - tile * per_tile;
    b = rest / a.h;
    t.i0 = (nqt - 1 - tile) * BR;
    t.h = rest - b * a.h;
    t.tok0 = (int64_t)b * a.seq;
    t.kvh = t.h / a.grp;
    t.nq = a.seq - t.i0 < BR ? a.seq - t.i0 : BR;
    return t;
}

/* What the tensor-core kernels and the Hopper kernel (gated_attn_sm90_*.cu) share on the host
 * (gated_attn_tc_fwd.cu, gated_attn_tc_bwd.cu): the arguments of sl_cuda_gated_attn_fwd/bwd as
 * kernel arguments (bwd_args also takes the scratch buffers of the backward: Di, the bf16 dO and,
 * in the atomic dQ mode, the fp32 dQ accumulator), the backward's prep pass (the gate's
 * gradient, dO, Di; it zeroes the accumulator when there is one) and the atomic mode's final
 * dq = bf16(scale * accumulator). */
args fwd_args(sl_tensor *y, sl_tensor *o, sl_tensor *lse, const sl_tensor *q, const sl_tensor *k,
              const sl_tensor *v, const sl_tensor *g, const sl_tensor *seg, int batch, int seq,
              float scale);
args bwd_args(void *ctx, bool atomic, sl_tensor *dq, sl_tensor *dk, sl_tensor *dv, sl_tensor *dg,
              const sl_tensor *dy, const sl_tensor *q, const sl_tensor *k, const sl_tensor *v,
              const sl_tensor *g, const sl_tensor *seg, const sl_tensor *o, const sl_tensor *lse,
              int batch, int seq, float scale);
void launch_bwd_prep(const args &a, int d, cudaStream_t stream);
void launch_dq_convert(const args &a, int d, cudaStream_t stream);

} // namespace sl_attn_tc

/* The entry points are in attention/kernels_cuda.h. */

#endif
