/*
 * attention/qk_norm_rope.cuh - what the two paths of the fused QK-norm and RoPE share
 * (qk_norm_rope.cu: the element path and the ops' launchers; qk_norm_rope_rows.cu: the row
 * path): qall's layout, a chunk's rotation coefficients, and the row path's launchers.
 */
#ifndef SL_QK_NORM_ROPE_CUH
#define SL_QK_NORM_ROPE_CUH

#include "attention/rope_angle.cuh"
#include "core/backend_impl.h"
#include "core/cuda_common.cuh"

namespace sl_qk {

/* Tokens per chunk: their rotations are computed together (by the whole block) and their head
 * rows shared out among the warps with no barrier between tokens (the backward's, and the row
 * path's forward). */
constexpr int kChunk = 8;

/* A row of qall: its width (sl_qgate_width's, on the device; one expression for both kernels),
 * and below, where head h's queries start in it (core/ops.h's layouts). */
__device__ __forceinline__ int64_t qall_width(sl_gate_mode mode, int h, int d) {
    return mode == SL_GATE_ELEMENTWISE ? 2 * (int64_t)h * d
           : mode == SL_GATE_HEADWISE  ? (int64_t)h * d + h
                                       : (int64_t)h * d;
}

__device__ __forceinline__ int64_t q_offset(sl_gate_mode mode, int h, int d) {
    return mode == SL_GATE_ELEMENTWISE ? (int64_t)h * 2 * d : (int64_t)h * d;
}

/* The rotations of n consecutive tokens (positions pos[0 .. n)) into shared memory: cs[t half
 * + i], sn[t half + i] for i < half, computed by the whole block, then a barrier. */
__device__ __forceinline__ void rope_coefs(float *cs, float *sn, const int32_t *pos, int n,
                                           const float *inv_freq, int half, float mscale,
                                           int sign) {
    for (int e = threadIdx.x; e < n * half; e += blockDim.x) {
        const int t = e / half, i = e % half;
        sl_rope_coef(pos[t], inv_freq[i], mscale, sign, &cs[e], &sn[e]);
    }
    __syncthreads();
}

/* Shared memory of a chunk's rotation coefficients, cs and sn [kChunk][half] (the backward's
 * and the row path's forward). */
inline size_t coef_smem(int half) {
    return sizeof(float) * 2 * (size_t)kChunk * (size_t)half;
}

/* The row path (qk_norm_rope_rows.cu), for the shapes it serves: head dims 64, 128 and 256, the
 * rotated half a multiple of d / 32, every row 16-byte aligned. Each returns false, having
 * launched nothing, for any other shape (the caller then runs the element path). rows_bwd
 * writes the block partials part [nparts][2][d] of blocks of tpb tokens, as the element path. */
bool rows_fwd(cudaStream_t st, sl_tensor *qn, sl_tensor *kn, sl_tensor *g, sl_tensor *q_rstd,
              sl_tensor *k_rstd, const sl_tensor *qall, const sl_tensor *k,
              const sl_qk_norm_rope *p);
bool rows_bwd(cudaStream_t st, float *part, int64_t nparts, int64_t tpb, sl_tensor *dqall,
              sl_tensor *dk_pre, const sl_tensor *dq, const sl_tensor *dk, const sl_tensor *dg,
              const sl_tensor *qall, const sl_tensor *k, const sl_tensor *q_rstd,
              const sl_tensor *k_rstd, const sl_qk_norm_rope *p);

} // namespace sl_qk

#endif
