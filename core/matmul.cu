/*
 * core/matmul.cu - dense GEMM on the GPU through cuBLAS (the CPU twin: core/matmul_cpu.c), and
 * the GEMM helpers of core/gemm_cuda.cuh that the grouped expert GEMMs share.
 *
 * One cublasGemmEx per call, compute type CUBLAS_COMPUTE_32F: bf16 inputs run on the tensor
 * cores with fp32 accumulation; fp32 inputs are multiplied in fp32 (not TF32, which
 * CUBLAS_COMPUTE_32F excludes unless the handle's math mode allows it, and the backend leaves
 * the default math mode), so "fp32" precision matches the CPU at the CPU's tolerances.
 * cuBLAS's own kernels are deterministic run to run on one GPU with one stream. An fp32 GEMM
 * with too few output tiles for the GPU (the router's) splits K instead (core/gemm_split.h):
 * one strided-batched call and an ordered sum, deterministic as well.
 */
#include <limits.h>
#include <stdlib.h>

#include "core/cuda_common.cuh"
#include "core/gemm_cuda.cuh"
#include "core/gemm_split.h"
#include "core/kernels_cuda.h"
#include "core/log.h"

/* ---- the one kernel: a strided column copy with a scale and a dtype change ----------------
 * dst[i + j ldd] = scale * src[i + j lds] for i < m, j < n (column-major; scale = 0 writes 0
 * without reading src, so NaN or junk in src does not propagate, as BLAS's beta = 0). It
 * serves C = beta C when k = 0 (dst = src in place) and the fp32 round trip of a bf16 C.
 * Parallelization: a grid-stride loop over the m n elements in column order, so consecutive
 * threads touch consecutive addresses within a column; 64-bit indices. Each element is read
 * and written by the same thread, which makes the in-place use safe. */
template <typename D, typename S>
__global__ void gemm_copy_cols(D *dst, int64_t ldd, const S *src, int64_t lds, int64_t m, int64_t n,
                               float scale) {
    const int64_t total = m * n;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += stride) {
        const int64_t j = e / m, i = e - j * m;
        const float v = scale == 0.0f ? 0.0f : scale * sl_ld(src[i + j * lds]);
        dst[i + j * ldd] = sl_st<D>(v);
    }
}

template <typename D, typename S>
static void copy_cols(void *ctx, const char *op, D *dst, int64_t ldd, const S *src, int64_t lds,
                      int64_t m, int64_t n, float scale) {
    if (m == 0 || n == 0) return;
    /* Enough blocks to fill any current GPU; the grid-stride loop covers the rest. */
    const unsigned threads = 256, want = sl_blocks(m * n, threads);
    const unsigned blocks = want < 4096u ? want : 4096u;
    void (*kernel)(D *, int64_t, const S *, int64_t, int64_t, int64_t, float) =
        gemm_copy_cols<D, S>;
    SL_LAUNCH(kernel, blocks, threads, 0, sl_cuda_stream(ctx), dst, ldd, src, lds, m, n, scale);
    SL_CUDA_LAUNCHED(op);
}

/* ---- fp32 GEMMs with few output tiles: K split (core/gemm_split.h) ------------------------
 * C = alpha (P_0 + P_1 + ... + P_{s-1}) + beta C over column-major [m, n], the partial products
 * P [s][m n] (leading dimension m) summed in slice order: the same bits every run. beta = 0
 * writes without reading C. Grid-stride over the elements in column order, as gemm_copy_cols. */
__global__ void gemm_sum_slices(float *c, int64_t ldc, const float *p, int64_t m, int64_t n, int s,
                                float alpha, float beta) {
    const int64_t total = m * n;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += stride) {
        const int64_t j = e / m, i = e - j * m;
        float acc = 0.0f;
        for (int q = 0; q < s; q++) acc += p[q * total + e];
        const float v = alpha * acc;
        c[i + j * ldc] = beta == 0.0f ? v : v + beta * c[i + j * ldc];
    }
}

/* Slices for an fp32 GEMM: SLUICE_GEMM_SPLIT_K (read every call) or the rule. */
static int split_slices(void *ctx, int64_t m, int64_t n, int64_t k) {
    int forced = 0;
    const char *v = getenv("SLUICE_GEMM_SPLIT_K");
    if (sl_gemm_split_k_parse(v, &forced) != 0)
        sl_fatal("SLUICE_GEMM_SPLIT_K=%s: expected auto, off or a number of slices from 1 to 64",
                 v);
    if (forced > 0) return forced > 1 && k % forced == 0 ? forced : 1;
    return sl_gemm_split_k(m, n, k, sl_cuda_props(ctx)->multiProcessorCount);
}

/* The split product: S GEMMs of k / S in one strided-batched call into fp32 partials (scratch
 * slot 0), then their ordered sum into C. Slice q of op(A) [m, k] is columns q ks.. of A, or rows
 * of A^T; slice q of op(B) [k, n] rows q ks.. of B, or columns of B^T. */
static void gemm_split(void *ctx, const char *op, cublasOperation_t ta, cublasOperation_t tb,
                       int64_t m, int64_t n, int64_t k, int s, float alpha, const float *a,
                       int64_t lda, const float *b, int64_t ldb, float beta, float *c,
                       int64_t ldc) {
    const int64_t ks = k / s;
    float *parts = (float *)sl_cuda_scratch(ctx, 0, (size_t)s * (size_t)m * (size_t)n * 4);
    const float one = 1.0f, zero = 0.0f;
    const long long stride_a = ta == CUBLAS_OP_N ? ks * lda : ks;
    const long long stride_b = tb == CUBLAS_OP_N ? ks : ks * ldb;
    sl_cublas_check(
        cublasGemmStridedBatchedEx(sl_cuda_cublas(ctx), ta, tb, sl_cuda_blas_int(m, op, "m"),
                                   sl_cuda_blas_int(n, op, "n"), sl_cuda_blas_int(ks, op, "k"),
                                   &one, a, CUDA_R_32F, sl_cuda_blas_int(lda, op, "lda"), stride_a,
                                   b, CUDA_R_32F, sl_cuda_blas_int(ldb, op, "ldb"), stride_b, &zero,
                                   parts, CUDA_R_32F, sl_cuda_blas_int(m, op, "m"),
                                   (long long)(m * n), s, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        op, "cublasGemmStridedBatchedEx (K split)");
    const unsigned threads = 256, want = sl_blocks(m * n, threads);
    SL_LAUNCH(gemm_sum_slices, want < 4096u ? want : 4096u, threads, 0, sl_cuda_stream(ctx), c, ldc,
              (const float *)parts, m, n, s, alpha, beta);
    SL_CUDA_LAUNCHED(op);
}

/* ---- helpers (core/gemm_cuda.cuh) --------------------------------------------------------- */

cudaDataType sl_cuda_data_type(sl_dtype dt) {
    SL_CHECK(dt == SL_F32 || dt == SL_BF16, "cuda gemm: dtype %s is not a float type",
             sl_dtype_name(dt));
    return dt == SL_BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

int sl_cuda_blas_int(int64_t v, const char *op, const char *what) {
    SL_CHECK(v >= 0 && v <= INT_MAX, "%s: %s %lld does not fit a cuBLAS int", op, what,
             (long long)v);
    return (int)v;
}

void sl_cuda_gemm_scale_c(void *ctx, const char *op, void *c, int64_t ldc, sl_dtype cd, int64_t m,
                          int64_t n, float beta) {
    if (beta == 1.0f) return;
    if (cd == SL_BF16)
        copy_cols(ctx, op, (sl_bf16 *)c, ldc, (const sl_bf16 *)c, ldc, m, n, beta);
    else
        copy_cols(ctx, op, (float *)c, ldc, (const float *)c, ldc, m, n, beta);
}

void sl_cuda_gemm(void *ctx, const char *op, bool trans_a, bool trans_b, int64_t m, int64_t n,
                  int64_t k, float alpha, const void *a, int64_t lda, const void *b, int64_t ldb,
                  sl_dtype ab, float beta, void *c, int64_t ldc, sl_dtype cd) {
    if (m == 0 || n == 0) return;
    if (k == 0) {
        sl_cuda_gemm_scale_c(ctx, op, c, ldc, cd, m, n, beta);
        return;
    }
    const cublasOperation_t ta = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t tb = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    const int im = sl_cuda_blas_int(m, op, "m"), in = sl_cuda_blas_int(n, op, "n");
    const int ik = sl_cuda_blas_int(k, op, "k");
    const int ilda = sl_cuda_blas_int(lda, op, "lda"), ildb = sl_cuda_blas_int(ldb, op, "ldb");
    const cudaDataType t_ab = sl_cuda_data_type(ab);
    cublasHandle_t h = sl_cuda_cublas(ctx);
    if (ab == SL_F32 && cd == SL_BF16) {
        /* cublasGemmEx has no fp32-input, bf16-output mode: run the fp32 GEMM on an fp32 copy
         * of C (read only when beta != 0) and round once into C. */
        float *tmp = (float *)sl_cuda_scratch(ctx, 0, (size_t)m * (size_t)n * sizeof(float));
        if (beta != 0.0f) copy_cols(ctx, op, tmp, m, (const sl_bf16 *)c, ldc, m, n, 1.0f);
        sl_cublas_check(cublasGemmEx(h, ta, tb, im, in, ik, &alpha, a, t_ab, ilda, b, t_ab, ildb,
                                     &beta, tmp, CUDA_R_32F, im, CUBLAS_COMPUTE_32F,
                                     CUBLAS_GEMM_DEFAULT),
                        op, "cublasGemmEx (fp32 into a bf16 output)");
        copy_cols(ctx, op, (sl_bf16 *)c, ldc, (const float *)tmp, m, m, n, 1.0f);
        return;
    }
    if (ab == SL_F32 && cd == SL_F32) {
        const int s = split_slices(ctx, m, n, k);
        if (s > 1) {
            gemm_split(ctx, op, ta, tb, m, n, k, s, alpha, (const float *)a, lda, (const float *)b,
                       ldb, beta, (float *)c, ldc);
            return;
        }
    }
    const int ildc = sl_cuda_blas_int(ldc, op, "ldc");
    sl_cublas_check(cublasGemmEx(h, ta, tb, im, in, ik, &alpha, a, t_ab, ilda, b, t_ab, ildb, &beta,
                                 c, sl_cuda_data_type(cd), ildc, CUBLAS_COMPUTE_32F,
                                 CUBLAS_GEMM_DEFAULT),
                    op, "cublasGemmEx");
}

/* ---- sl_ops_i.matmul ----------------------------------------------------------------------- */

/* Row-major C [M, N] = alpha op(A) op(B) + beta C is column-major C^T [N, M] = alpha op(B)^T
 * op(A)^T + beta C^T: B comes first, each operand keeps its transpose flag, and every leading
 * dimension is the stored row width (core/matmul_cpu.c passes the same ones to cblas). */
void sl_cuda_matmul(void *ctx, sl_tensor *c, const sl_tensor *a, const sl_tensor *b, bool trans_a,
                    bool trans_b, float alpha, float beta) {
    const int64_t m = sl_rows(c), n = sl_last_dim(c);
    const int64_t k = trans_a ? sl_rows(a) : sl_last_dim(a);
    sl_cuda_gemm(ctx, "matmul", trans_b, trans_a, n, m, k, alpha, b->data, sl_last_dim(b), a->data,
                 sl_last_dim(a), a->dtype, beta, c->data, n, c->dtype);
}
