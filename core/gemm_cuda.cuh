/*
 * core/gemm_cuda.cuh - the cuBLAS GEMM helpers shared by the dense GEMM (core/matmul.cu, which
 * implements them) and the grouped expert GEMMs (moe/grouped_matmul.cu). C++, .cu files only.
 *
 * cuBLAS is column-major; sluice's tensors are row-major. A row-major [r, c] matrix with row
 * stride ld is the column-major [c, r] matrix with the same ld, so a row-major product
 * C = op(A) op(B) is computed as the column-major C^T = op(B)^T op(A)^T: the callers swap the
 * operands and keep each operand's transpose flag.
 */
#ifndef SL_GEMM_CUDA_CUH
#define SL_GEMM_CUDA_CUH

#include <cublas_v2.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/tensor.h"

/* CUDA_R_32F or CUDA_R_16BF for SL_F32 or SL_BF16 (any other dtype stops the run). */
cudaDataType sl_cuda_data_type(sl_dtype dt);

/* Column-major C [m, n] = alpha op(A) op(B) + beta C with fp32 accumulation (compute type
 * CUBLAS_COMPUTE_32F: fp32 inputs are multiplied in full fp32, never TF32), through one
 * cublasGemmEx on the backend's stream. A and B share `ab`; C has its own dtype `cd`.
 *   - m = 0 or n = 0: nothing.
 *   - k = 0: C = beta C (BLAS semantics; C = 0 without reading C when beta = 0), by a kernel,
 *     so that no cuBLAS corner case or leading-dimension rule for empty operands matters.
 *   - fp32 A/B with a bf16 C, which cublasGemmEx cannot write: the product goes through an
 *     fp32 scratch copy of C (slot 0), rounded to bf16 once at the end.
 *   - fp32 A/B/C with few output tiles for the GPU's SMs and a long k (core/gemm_split.h, or
 *     SLUICE_GEMM_SPLIT_K): k in S slices, one cublasGemmStridedBatchedEx into fp32 partials
 *     (scratch slot 0) and one kernel that sums them in slice order into C.
 * `op` names the sl_ops_i operation for error messages. Sizes and leading dimensions must fit
 * an int (checked). */
void sl_cuda_gemm(void *ctx, const char *op, bool trans_a, bool trans_b, int64_t m, int64_t n,
                  int64_t k, float alpha, const void *a, int64_t lda, const void *b, int64_t ldb,
                  sl_dtype ab, float beta, void *c, int64_t ldc, sl_dtype cd);

/* Column-major C [m, n] (leading dimension ldc, dtype cd) = beta C, or 0 without reading C
 * when beta = 0; nothing when beta = 1 or the matrix is empty. */
void sl_cuda_gemm_scale_c(void *ctx, const char *op, void *c, int64_t ldc, sl_dtype cd, int64_t m,
                          int64_t n, float beta);

/* v as a cuBLAS int, stopping the run (naming `op` and `what`) when it does not fit. */
int sl_cuda_blas_int(int64_t v, const char *op, const char *what);

#endif
