/* moe/grouped_matmul_sm90.h - the expert GEMMs on Hopper (moe/grouped_matmul_sm90.cu), the
 * strategy "wgmma" of moe/grouped_matmul.cu. C++ (CUDA sources only). */
#ifndef SL_GROUPED_MATMUL_SM90_H
#define SL_GROUPED_MATMUL_SM90_H

#include <stdint.h>

#include "core/ops.h" /* sl_group_counts */
#include "core/tensor.h"

/* The kernels' parameters: counts [groups] (int32) on the device, the caller's (the MoE sort's)
 * or host counts uploaded; mm: C [rows, n] (bf16) from K = k; dW: C = dW [groups, m, n]
 * (fp32). */
struct sl_gmm_sm90_args {
    void *ctx;
    const int *counts; /* mm: the groups' rows (dW: unused) */
    /* dW: the rows' segments (sl_op_grouped_matmul_dw_segments), each group's reduction over its
     * rows of segment 0, then 1, ...: their counts */
    const int *seg_counts[SL_DW_MAX_SEGMENTS];
    int nseg; /* dW: 1..SL_DW_MAX_SEGMENTS; mm: 0 */
    int groups, m, n, k;
    void *c;
    void *h; /* mm with the fused SwiGLU: h [rows, n] (bf16), and then C is gu [rows, 2 n] */
    float beta;
    int prefetch_c; /* dW: prefetch each tile's old dW into L2 (beta != 0 and not turned off) */
    /* dW: the sum of the squares of each tile's final values, one fp32 partial per consumer
     * warp ([tiles][2 consumers][4 warps]), or null (sl_op_grouped_matmul_dw's sumsq) */
    float *sq;
    /* parts of the kernel left out for expert_gemm_bench --ablate (SL_EXPERT_GEMM_ABLATE_*,
     * moe/kernels_cuda.h; 0 in every real call) */
    unsigned ablate;
};

/* The parts sl_cuda_expert_gemm_set_ablation left out (0: none). */
unsigned sl_cuda_grouped_sm90_ablation(void);

/* Whether the kernels run the grouped GEMMs over B [groups, r, s] of dtype dt on this device
 * (bf16, widths multiples of 8, at most 1,024 groups, compute capability 9.x with sm_90a code;
 * the operands' alignment is the caller's: whole rows of widths that are multiples of 8 from
 * 16-byte aligned buffers are). */
bool sl_cuda_grouped_sm90_applies(void *ctx, sl_dtype dt, int64_t r, int64_t s, int groups);
/* sl_op_grouped_matmul (bf16 throughout) and sl_op_grouped_matmul_dw (bf16 dY, X into fp32
 * dW) with host or device counts, in one launch each. Return false, having done nothing, where
 * the kernel does not apply: other dtypes, widths not multiples of 8, operands not 16-byte
 * aligned, more than 1,024 groups, or a device that is not compute capability 9.x with sm_90a
 * code. loud: say once per process and operation which it was (SLUICE_EXPERT_GEMM=wgmma; auto
 * is silent). */
bool sl_cuda_grouped_mm_sm90(void *ctx, sl_tensor *c, const sl_tensor *a, const sl_tensor *b,
                             const sl_group_counts *counts, int groups, bool trans_b, float beta,
                             bool loud);
/* sl_op_grouped_matmul_swiglu (bf16 throughout): gu [rows, 2 I] = A_g B_g^T with B [groups,
 * 2 I, K], and h [rows, I] = SwiGLU(gu) from the epilogue's registers (the values written to gu,
 * rounded as stored: h is what sl_op_swiglu_fwd computes from gu, bit for bit), in one launch.
 * Returns false, having done nothing, where the kernel does not apply (as above, or I not a
 * multiple of 8). */
bool sl_cuda_grouped_mm_swiglu_sm90(void *ctx, sl_tensor *h, sl_tensor *gu, const sl_tensor *a,
                                    const sl_tensor *b, const sl_group_counts *counts, int groups,
                                    bool loud);
/* segs: 1..SL_DW_MAX_SEGMENTS segments of rows (sl_op_grouped_matmul_dw_segments), each group's
 * reduction running over its rows of the first segment, then of the next, ... in one
 * accumulator (one fp32 sum per element, one epilogue). sumsq (or null): += the squares of dW
 * after the op, from the epilogue's registers (a kept tile, an empty group with beta 1, is read
 * for them), summed per consumer warp and then in a fixed order (core's sl_cuda_reduce_add). */
bool sl_cuda_grouped_dw_sm90(void *ctx, sl_tensor *dw, const sl_dw_segment *segs, int nseg,
                             int groups, float beta, sl_tensor *sumsq, bool loud);

#endif
