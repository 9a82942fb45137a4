/* moe/kernels_cuda.h - the CUDA kernels of moe/ (listed in backends/cuda.cu; semantics: core/ops.h,
 * conventions: docs/cuda.md). C linkage: the launchers fill the C table sl_ops_i. */
#ifndef SL_MOE_KERNELS_CUDA_H
#define SL_MOE_KERNELS_CUDA_H

#include "core/backend_impl.h" /* C linkage of its own */

#ifdef __cplusplus
extern "C" {
#endif

/* grouped_matmul.cu */
/* Device counts (no host read) where the strategy is auto or wgmma and the Hopper kernel
 * applies to the operands (moe/grouped_matmul_sm90.h). */
bool sl_cuda_grouped_counts_on_device(void *ctx, sl_dtype dt, int64_t r, int64_t s, int groups);
void sl_cuda_grouped_matmul(void *ctx, sl_tensor *c, const sl_tensor *a, const sl_tensor *b,
                            const sl_group_counts *counts, int groups, bool trans_b, float beta);
void sl_cuda_grouped_matmul_dw(void *ctx, sl_tensor *dw, const sl_tensor *dy, const sl_tensor *x,
                               const sl_group_counts *counts, int groups, float beta,
                               sl_tensor *sumsq);
void sl_cuda_grouped_matmul_dw_segments(void *ctx, sl_tensor *dw, const sl_dw_segment *segs,
                                        int nseg, int groups, float beta, sl_tensor *sumsq);
/* One launch where the Hopper kernel applies and SLUICE_EXPERT_GEMM_SWIGLU is 1
 * (moe/grouped_matmul_sm90.h); else sl_cuda_grouped_matmul and sl_cuda_swiglu_fwd. */
void sl_cuda_grouped_matmul_swiglu(void *ctx, sl_tensor *h, sl_tensor *gu, const sl_tensor *a,
                                   const sl_tensor *b, const sl_group_counts *counts, int groups);
/* Whether the first projection and the activation run as one kernel where the Hopper kernel
 * applies: SLUICE_EXPERT_GEMM_SWIGLU=1 runs them as one, 0 or unset as two; another value stops
 * the run naming the variable. Read once. Two by default since an H200 measured them faster
 * (2026-11-27, 4 x 1 x 4096: the row "expert GEMMs fwd" 22.06 ms per step with the separate
 * activation kernel, 23.55 fused; the step 295.5 against 296.5 ms; docs/performance.md). */
bool sl_cuda_expert_gemm_swiglu_fused(void);

/* How the expert GEMMs run (bench/expert_gemm_bench.c measures each; docs/performance.md):
 *   SL_EXPERT_GEMM_AUTO        WGMMA where its kernel applies (bf16 on compute capability 9.x
 *                              with this build's sm_90a code; chosen from training steps on an
 *                              H200, 2026-11-26, call 2 of the fourth session); elsewhere as
 *                              GROUPED, except for the bf16-into-fp32 weight gradient below
 *                              SL_EXPERT_GEMM_PAD_ROWS mean rows per expert: padded as in
 *                              SL_EXPERT_GEMM_PADDED where that applies, else on the side lanes
 *                              (the default)
 *   SL_EXPERT_GEMM_GROUPED     one grouped call where cuBLAS takes the types, else one
 *                              cublasGemmEx per expert on the stream (the default until
 *                              2026-11-26)
 *   SL_EXPERT_GEMM_PER_EXPERT  one cublasGemmEx per non-empty expert on the stream, always
 *   SL_EXPERT_GEMM_GROUPED_TF32  as GROUPED, but the bf16-into-fp32 weight gradient runs as one
 *                              grouped fp32 call with TF32 math on fp32 copies of its inputs
 *   SL_EXPERT_GEMM_LANES       one cublasGemmEx per non-empty expert, spread over the backend's
 *                              side lanes (core/backend_cuda.cuh: 4 streams, a cuBLAS handle
 *                              each) so that several small GEMMs run at once
 *   SL_EXPERT_GEMM_PADDED      one cublasGemmStridedBatchedEx per call over copies of the
 *                              row operands with every expert's rows zero-padded to the largest
 *                              count (the forward and data gradient when beta is 0, the
 *                              bf16-into-fp32 weight gradient), when the padding at most doubles
 *                              the work and its copies fit SL_EXPERT_GEMM_PAD_BYTES; else as
 *                              GROUPED
 *   SL_EXPERT_GEMM_WGMMA       sluice's own grouped GEMM on Hopper (moe/grouped_matmul_sm90.cu):
 *                              one persistent launch per call for bf16 operands (the weight
 *                              gradient bf16 into fp32), wgmma from TMA-loaded tiles, the counts
 *                              read on the device; where it does not apply (other dtypes or
 *                              devices) as AUTO elsewhere, and the log says why, once
 * Every strategy computes each expert's product with fp32 accumulation (one cuBLAS GEMM, or
 * the wgmma kernel's fixed order), so the results agree to rounding (not bitwise across strategies:
 * kernels differ; each strategy is deterministic run to run, lanes included, since every expert
 * writes its own rows). The process-wide default comes from the environment variable
 * SLUICE_EXPERT_GEMM (auto, grouped, per-expert, grouped-tf32, lanes, padded, wgmma; anything else
 * stops the run); sl_cuda_expert_gemm_set_strategy overrides it. sl_cuda_expert_gemm_parse maps a
 * name to its value (false for an unknown name), sl_cuda_expert_gemm_name a value to its name;
 * sl_cuda_expert_gemm_dw_path says how the last weight gradient ran, sl_cuda_expert_gemm_last_path
 * how the last forward or data-gradient call ran ("wgmma + SwiGLU" for the first projection
 * with the activation in its epilogue, sl_cuda_grouped_matmul_swiglu). */
enum {
    SL_EXPERT_GEMM_AUTO = 0,
    SL_EXPERT_GEMM_GROUPED = 1,
    SL_EXPERT_GEMM_PER_EXPERT = 2,
    SL_EXPERT_GEMM_GROUPED_TF32 = 3,
    SL_EXPERT_GEMM_LANES = 4,
    SL_EXPERT_GEMM_PADDED = 5,
    SL_EXPERT_GEMM_WGMMA = 6
};
/* The mean rows per expert below which auto, where the Hopper kernel does not apply, pads the
 * bf16-into-fp32 weight gradient or runs it on the lanes: measured on an H200 (2026-11-26,
 * gpu_train_bench --profile, hidden 2048, ffn 768): on the lanes 62 ms per step against 82 one
 * GEMM after another at 256 rows; at 2,048 rows one after another took 25 ms, on the lanes 46. */
enum { SL_EXPERT_GEMM_PAD_ROWS = 1024 };
/* The padded copies of one call at most (bytes); a larger call is not padded. */
#define SL_EXPERT_GEMM_PAD_BYTES ((int64_t)1 << 30)
bool sl_cuda_expert_gemm_parse(const char *name, int *strategy);
const char *sl_cuda_expert_gemm_name(int strategy); /* "?" for a value out of range */
void sl_cuda_expert_gemm_set_strategy(int strategy);
const char *sl_cuda_expert_gemm_dw_path(void);
const char *sl_cuda_expert_gemm_last_path(void);
/* For bench/expert_gemm_bench --ablate only: the Hopper grouped GEMM's kernels (forward, data
 * gradient, weight gradient, the fused SwiGLU) leave out the named parts until it is called
 * with 0, so that the time without a part, against the time with all, says what that part
 * costs where it does not overlap the rest. Their results are wrong while the epilogue, the
 * loads or the weights' own reads are left out.
 *   SL_EXPERT_GEMM_ABLATE_EPILOGUE  the consumers store nothing (no read-modify-write, no
 *                                   squares): the mainloop alone
 *   SL_EXPERT_GEMM_ABLATE_LOADS     the producer loads nothing (each stage's barrier completes
 *                                   at once; the wgmmas read whatever the ring holds): the tiles'
 *                                   arithmetic and epilogue without the memory system's feed
 *   SL_EXPERT_GEMM_ABLATE_WIDE_STORES  the forward / data-gradient epilogue stores one pair of
 *                                   columns (4 bytes) a thread per instruction, as before
 *                                   2026-11-27, instead of 16 bytes after a shuffle within each
 *                                   quad: the same results, for timing the two forms
 *   SL_EXPERT_GEMM_ABLATE_WIDE_TILES   every GEMM in 128 x 128 tiles with a ring of 6 stages
 *                                   instead of 128 x 256 with 4 where the output is wider than
 *                                   128 columns: a third more bytes from L2 per FLOP, a deeper
 *                                   ring (the same results to rounding)
 *   SL_EXPERT_GEMM_ABLATE_B_FROM_DRAM  the forward and data gradient read every tile's weight
 *                                   operand from expert 0 (one expert's weights, which stay in
 *                                   L2) instead of its own expert's (each expert's weights come
 *                                   from DRAM once per call): the weights' trip from DRAM left
 *                                   out; results wrong */
enum {
    SL_EXPERT_GEMM_ABLATE_EPILOGUE = 1,
    SL_EXPERT_GEMM_ABLATE_LOADS = 2,
    SL_EXPERT_GEMM_ABLATE_WIDE_STORES = 4,
    SL_EXPERT_GEMM_ABLATE_WIDE_TILES = 8,
    SL_EXPERT_GEMM_ABLATE_B_FROM_DRAM = 16
};
void sl_cuda_expert_gemm_set_ablation(unsigned parts);

/* router.cu */
void sl_cuda_router_fwd(void *ctx, sl_tensor *probs, sl_tensor *topk_idx, sl_tensor *topk_w,
                        sl_tensor *stats, const sl_tensor *logits, const sl_tensor *bias,
                        bool norm_topk);
void sl_cuda_router_bwd(void *ctx, sl_tensor *dlogits, const sl_tensor *dtopk_w,
                        const sl_tensor *probs, const sl_tensor *topk_idx, const sl_tensor *topk_w,
                        const sl_tensor *logits, const sl_tensor *lbl_grad, float z_scale,
                        bool norm_topk);

/* permute.cu */
void sl_cuda_moe_sort(void *ctx, sl_tensor *counts, sl_tensor *sorted_token, sl_tensor *slot_pos,
                      const sl_tensor *topk_idx);
void sl_cuda_moe_counts(void *ctx, sl_tensor *acc, sl_tensor *freq, const sl_tensor *counts,
                        float scale);
void sl_cuda_gather_rows(void *ctx, sl_tensor *dst, const sl_tensor *src, const sl_tensor *idx);
void sl_cuda_scatter_add_rows(void *ctx, sl_tensor *dst, const sl_tensor *src,
                              const sl_tensor *idx);
void sl_cuda_gather_add_rows(void *ctx, sl_tensor *dst, const sl_tensor *src, const sl_tensor *pos,
                             int k, float beta);
void sl_cuda_moe_combine(void *ctx, sl_tensor *y, const sl_tensor *x, const sl_tensor *slot_pos,
                         const sl_tensor *w, const sl_tensor *res);
void sl_cuda_moe_combine_bwd(void *ctx, sl_tensor *dx, sl_tensor *dw, const sl_tensor *dy,
                             const sl_tensor *x, const sl_tensor *slot_pos, const sl_tensor *w);

/* swiglu.cu */
void sl_cuda_swiglu_fwd(void *ctx, sl_tensor *h, const sl_tensor *gu);
void sl_cuda_swiglu_bwd(void *ctx, sl_tensor *dgu, const sl_tensor *dh, const sl_tensor *gu);
void sl_cuda_rowgate_fwd(void *ctx, sl_tensor *y, const sl_tensor *x, const sl_tensor *s);
void sl_cuda_rowgate_bwd(void *ctx, sl_tensor *dx, sl_tensor *ds, const sl_tensor *dy,
                         const sl_tensor *x, const sl_tensor *s);

#ifdef __cplusplus
}
#endif

#endif
