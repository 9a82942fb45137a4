/*
 * emu/src/cublas_emu_gemm.cc - the GEMMs of the emulator's cuBLAS (cublasGemmEx, its strided,
 * pointer-array and grouped batches, the legacy fp32 cublasSgemm routines) on OpenBLAS: the
 * argument checks, the type combinations cuBLAS has, the checks that every operand is device
 * memory, and the arithmetic. The rules the checks keep are in cublas_emu.cc's header comment,
 * which also holds the handle; cublas_emu.h is what the two share.
 *
 * Arithmetic: inputs are converted to fp32 (bf16 and fp16 exactly), multiplied by
 * cblas_sgemm (fp32 accumulation), and the epilogue alpha acc + beta C is formed in fp32 and
 * rounded once to C's type (round to nearest even), as cuBLAS's fp32-compute kernels do.
 * Reduced-precision compute modes round the inputs first, so that their error shows in tests:
 * CUBLAS_COMPUTE_32F_FAST_TF32, or CUBLAS_COMPUTE_32F with fp32 inputs under the math mode
 * CUBLAS_TF32_TENSOR_OP_MATH, round fp32 inputs to TF32 (10 mantissa bits, to nearest);
 * _FAST_16BF and _FAST_16F round them to bf16 and fp16 (CUBLAS_TENSOR_OP_MATH is _FAST_16F).
 */
#include <cblas.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <mutex>
#include <vector>

#include "cublas_emu.h"
#include "internal.h"

namespace {

/* ---- element types ------------------------------------------------------------------------ */

bool is_float_type(cudaDataType t) {
    return t == CUDA_R_32F || t == CUDA_R_16BF || t == CUDA_R_16F;
}

size_t type_size(cudaDataType t) {
    return t == CUDA_R_32F ? 4 : 2;
}

float load(cudaDataType t, const void *p, int64_t i) {
    switch (t) {
    case CUDA_R_16BF:
        return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    case CUDA_R_16F:
        return __half2float(((const __half *)p)[i]);
    default:
        return ((const float *)p)[i];
    }
}

void store(cudaDataType t, void *p, int64_t i, float v) {
    switch (t) {
    case CUDA_R_16BF:
        ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(v);
        break;
    case CUDA_R_16F:
        ((__half *)p)[i] = __float2half_rn(v);
        break;
    default:
        ((float *)p)[i] = v;
    }
}

/* fp32 -> TF32 (1 sign, 8 exponent, 10 mantissa bits) kept in an fp32, to nearest, ties away
 * from zero; infinities and NaN unchanged. */
float round_tf32(float x) {
    if (!isfinite(x)) return x;
    uint32_t u;
    memcpy(&u, &x, 4);
    u = (u + 0x1000u) & 0xffffe000u;
    memcpy(&x, &u, 4);
    return x;
}

/* What the inputs are rounded to before the fp32 multiply. */
enum rounding { ROUND_NONE, ROUND_TF32, ROUND_BF16, ROUND_FP16 };

float round_input(rounding r, float x) {
    switch (r) {
    case ROUND_TF32:
        return round_tf32(x);
    case ROUND_BF16:
        return __bfloat162float(__float2bfloat16_rn(x));
    case ROUND_FP16:
        return __half2float(__float2half_rn(x));
    default:
        return x;
    }
}

/* ---- which type combinations exist --------------------------------------------------------- */

enum support { UNSUPPORTED, NOT_EMULATED, EMULATED };

bool is_complex(cudaDataType t) {
    return t == CUDA_C_32F || t == CUDA_C_64F || t == CUDA_C_16F || t == CUDA_C_16BF ||
           t == CUDA_C_8I;
}

/* cublasGemmEx's table of (compute type, A/B type, C type); A and B always share a type. The
 * scale type (alpha, beta) follows the compute type: float for every fp32 compute type. */
support gemm_ex_support(cudaDataType at, cudaDataType bt, cudaDataType ct,
                        cublasComputeType_t compute) {
    if (at != bt) return UNSUPPORTED;
    switch (compute) {
    case CUBLAS_COMPUTE_32F:
    case CUBLAS_COMPUTE_32F_PEDANTIC:
        if ((at == CUDA_R_16BF || at == CUDA_R_16F) && (ct == at || ct == CUDA_R_32F))
            return EMULATED;
        if (at == CUDA_R_32F && ct == CUDA_R_32F) return EMULATED;
        if (at == CUDA_R_8I && ct == CUDA_R_32F) return NOT_EMULATED;
        if ((at == CUDA_C_8I || at == CUDA_C_32F) && ct == CUDA_C_32F) return NOT_EMULATED;
        return UNSUPPORTED;
    case CUBLAS_COMPUTE_32F_FAST_16F:
    case CUBLAS_COMPUTE_32F_FAST_16BF:
    case CUBLAS_COMPUTE_32F_FAST_TF32:
        if (at == CUDA_R_32F && ct == CUDA_R_32F) return EMULATED;
        if (at == CUDA_C_32F && ct == CUDA_C_32F) return NOT_EMULATED;
        return UNSUPPORTED;
    case CUBLAS_COMPUTE_32F_EMULATED_16BFX9:
        return at == CUDA_R_32F && ct == CUDA_R_32F ? NOT_EMULATED : UNSUPPORTED;
    case CUBLAS_COMPUTE_16F:
    case CUBLAS_COMPUTE_16F_PEDANTIC:
        return at == CUDA_R_16F && ct == CUDA_R_16F ? NOT_EMULATED : UNSUPPORTED;
    case CUBLAS_COMPUTE_32I:
    case CUBLAS_COMPUTE_32I_PEDANTIC:
        return at == CUDA_R_8I && ct == CUDA_R_32I ? NOT_EMULATED : UNSUPPORTED;
    case CUBLAS_COMPUTE_64F:
    case CUBLAS_COMPUTE_64F_PEDANTIC:
        return (at == CUDA_R_64F && ct == CUDA_R_64F) || (at == CUDA_C_64F && ct == CUDA_C_64F)
                   ? NOT_EMULATED
                   : UNSUPPORTED;
    default:
        return UNSUPPORTED;
    }
}

/* cublasGemmGroupedBatchedEx's table: one type for A, B and C. */
support grouped_support(cudaDataType at, cudaDataType bt, cudaDataType ct,
                        cublasComputeType_t compute) {
    if (at != bt || at != ct) return UNSUPPORTED;
    if (compute == CUBLAS_COMPUTE_32F && is_float_type(at)) return EMULATED;
    if (compute == CUBLAS_COMPUTE_32F_FAST_TF32 && at == CUDA_R_32F) return EMULATED;
    return UNSUPPORTED;
}

cublasStatus_t refuse(support s, const char *fn, cudaDataType at, cudaDataType bt, cudaDataType ct,
                      cublasComputeType_t compute) {
    if (s == NOT_EMULATED)
        fprintf(stderr,
                "cublas fake: %s with A/B/C types %d/%d/%d and compute type %d is valid cuBLAS "
                "but not emulated (emu/src/cublas_emu_gemm.cc)\n",
                fn, (int)at, (int)bt, (int)ct, (int)compute);
    return CUBLAS_STATUS_NOT_SUPPORTED;
}

/* The input rounding a float-type GEMM gets from its compute type and the handle's math mode. */
rounding input_rounding(const cublasContext *h, cudaDataType at, cublasComputeType_t compute,
                        bool legacy) {
    if (at != CUDA_R_32F) return ROUND_NONE; /* bf16/fp16 inputs are exact in any mode */
    const int mode = (int)h->math & 0xf;
    switch (compute) {
    case CUBLAS_COMPUTE_32F_FAST_TF32:
        return ROUND_TF32;
    case CUBLAS_COMPUTE_32F_FAST_16BF:
        return ROUND_BF16;
    case CUBLAS_COMPUTE_32F_FAST_16F:
        return ROUND_FP16;
    case CUBLAS_COMPUTE_32F:
        if (mode == CUBLAS_TF32_TENSOR_OP_MATH) return ROUND_TF32;
        /* The deprecated tensor-op mode acts as _FAST_16F on the legacy single-precision
         * routines. */
        if (legacy && mode == CUBLAS_TENSOR_OP_MATH) return ROUND_FP16;
        return ROUND_NONE;
    default:
        return ROUND_NONE;
    }
}

/* ---- one GEMM ------------------------------------------------------------------------------ */

struct gemm_args {
    cublasOperation_t ta, tb;
    int64_t m, n, k;
    const void *a, *b;
    void *c;
    int64_t lda, ldb, ldc;
    cudaDataType at, bt, ct;
};

bool valid_op(cublasOperation_t op) {
    return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C;
}

int64_t max1(int64_t v) {
    return v > 1 ? v : 1;
}

/* cuBLAS's argument checks for one problem. */
cublasStatus_t validate(const gemm_args &g) {
    if (!valid_op(g.ta) || !valid_op(g.tb)) return CUBLAS_STATUS_INVALID_VALUE;
    if (g.m < 0 || g.n < 0 || g.k < 0) return CUBLAS_STATUS_INVALID_VALUE;
    const int64_t rows_a = g.ta == CUBLAS_OP_N ? g.m : g.k;
    const int64_t rows_b = g.tb == CUBLAS_OP_N ? g.k : g.n;
    if (g.lda < max1(rows_a) || g.ldb < max1(rows_b) || g.ldc < max1(g.m))
        return CUBLAS_STATUS_INVALID_VALUE;
    return CUBLAS_STATUS_SUCCESS;
}

/* The stored matrix (rows x cols, column-major, leading dimension ld) as a dense fp32 matrix
 * with leading dimension `rows`, inputs rounded per `r`. */
std::vector<float> to_f32(cudaDataType t, const void *p, int64_t rows, int64_t cols, int64_t ld,
                          rounding r) {
    std::vector<float> out((size_t)(rows * cols));
    for (int64_t j = 0; j < cols; j++)
        for (int64_t i = 0; i < rows; i++)
            out[(size_t)(i + j * rows)] = round_input(r, load(t, p, i + j * ld));
    return out;
}

CBLAS_TRANSPOSE blas_op(cublasOperation_t op) {
    return op == CUBLAS_OP_N ? CblasNoTrans : CblasTrans;
}

/* C = alpha op(A) op(B) + beta C for a validated problem of a float-type combination. */
void run_gemm(const gemm_args &g, float alpha, float beta, rounding r) {
    if (g.m == 0 || g.n == 0) return;
    std::vector<float> acc((size_t)(g.m * g.n), 0.0f);
    if (g.k > 0) {
        const int64_t rows_a = g.ta == CUBLAS_OP_N ? g.m : g.k, cols_a = g.m + g.k - rows_a;
        const int64_t rows_b = g.tb == CUBLAS_OP_N ? g.k : g.n, cols_b = g.k + g.n - rows_b;
        /* fp32 operands without rounding are used in place; others are converted. */
        std::vector<float> a32, b32;
        const float *pa = (const float *)g.a, *pb = (const float *)g.b;
        int64_t lda = g.lda, ldb = g.ldb;
        if (g.at != CUDA_R_32F || r != ROUND_NONE) {
            a32 = to_f32(g.at, g.a, rows_a, cols_a, g.lda, r);
            pa = a32.data(), lda = rows_a;
        }
        if (g.bt != CUDA_R_32F || r != ROUND_NONE) {
            b32 = to_f32(g.bt, g.b, rows_b, cols_b, g.ldb, r);
            pb = b32.data(), ldb = rows_b;
        }
        cblas_sgemm(CblasColMajor, blas_op(g.ta), blas_op(g.tb), (int)g.m, (int)g.n, (int)g.k, 1.0f,
                    pa, (int)lda, pb, (int)ldb, 0.0f, acc.data(), (int)g.m);
    }
    for (int64_t j = 0; j < g.n; j++)
        for (int64_t i = 0; i < g.m; i++) {
            const int64_t ci = i + j * g.ldc;
            float v = alpha * acc[(size_t)(i + j * g.m)];
            if (beta != 0.0f) v += beta * load(g.ct, g.c, ci); /* beta = 0: C is not read */
            store(g.ct, g.c, ci, v);
        }
}

/* Reads alpha and beta (fp32 scale type) from host or "device" memory; both are host memory in
 * the emulator, so the pointer mode only matters for validation. */
cublasStatus_t read_scalars(const void *alpha, const void *beta, float *a, float *b) {
    if (!alpha || !beta) return CUBLAS_STATUS_INVALID_VALUE;
    *a = *(const float *)alpha;
    *b = *(const float *)beta;
    return CUBLAS_STATUS_SUCCESS;
}

/* A matrix that would be read or written must be there (a GPU would fault on it). */
bool pointers_present(const gemm_args &g) {
    if (g.m == 0 || g.n == 0) return true;
    return g.c && (g.k == 0 || (g.a && g.b));
}

const void *offset(const void *p, long long elems, cudaDataType t) {
    return p ? (const char *)p + elems * (long long)type_size(t) : nullptr;
}

/* Whether [p, p + bytes) lies inside one allocation the emulated GPU can address; if not, a
 * fault naming the call and the operand (the fault aborts unless SLUICE_EMU_FATAL=0). */
bool addressable(const char *fn, const char *what, const void *p, size_t bytes) {
    if (bytes == 0) return true;
    std::lock_guard<std::recursive_mutex> lock(sl_emu::big_lock());
    if (sl_emu::find_allocation(p, bytes)) return true;
    char msg[320];
    snprintf(msg, sizeof msg,
             "%s: %s at %p (%zu bytes) is not inside one allocation of the device: a host "
             "pointer, or a region running past its allocation's end",
             fn, what, p, bytes);
    sl_emu::fault(cudaErrorIllegalAddress, msg);
    return false;
}

/* The bytes a column-major rows x cols matrix with leading dimension ld spans. */
size_t span(cudaDataType t, int64_t rows, int64_t cols, int64_t ld) {
    if (rows == 0 || cols == 0) return 0;
    return (size_t)((cols - 1) * ld + rows) * type_size(t);
}

/* The matrices one problem touches are device memory (A and B only when k > 0). */
bool operands_addressable(const char *fn, const gemm_args &g) {
    if (g.m == 0 || g.n == 0) return true;
    const int64_t rows_a = g.ta == CUBLAS_OP_N ? g.m : g.k, cols_a = g.m + g.k - rows_a;
    const int64_t rows_b = g.tb == CUBLAS_OP_N ? g.k : g.n, cols_b = g.k + g.n - rows_b;
    return addressable(fn, "matrix A", g.a, span(g.at, rows_a, cols_a, g.lda)) &&
           addressable(fn, "matrix B", g.b, span(g.bt, rows_b, cols_b, g.ldb)) &&
           addressable(fn, "matrix C", g.c, span(g.ct, g.m, g.n, g.ldc));
}

/* What a GPU call on this handle meets before any computing: an unknown stream, or a sticky
 * error from an earlier fault, fails the call as a kernel launch would fail. */
bool can_launch(const cublasContext *h) {
    std::lock_guard<std::recursive_mutex> lock(sl_emu::big_lock());
    return sl_emu::valid_stream(h->stream) && sl_emu::sticky_error() == cudaSuccess;
}

/* One GEMM, or a strided or pointer-array batch of GEMMs of one shape: `problem(i, g)` sets
 * g's matrices to problem i's and returns a status (what reading a pointer array met).
 * `legacy`: a cublas<t>gemm routine (math-mode rules). */
template <typename F>
cublasStatus_t run_batch(cublasHandle_t h, const char *fn, gemm_args g, const void *alpha,
                         const void *beta, int64_t batch, cublasComputeType_t compute, bool legacy,
                         F problem) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    cublasStatus_t st = validate(g);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    if (batch < 0) return CUBLAS_STATUS_INVALID_VALUE;
    const support s = gemm_ex_support(g.at, g.bt, g.ct, compute);
    if (s != EMULATED) return refuse(s, fn, g.at, g.bt, g.ct, compute);
    if (!can_launch(h)) return CUBLAS_STATUS_EXECUTION_FAILED;
    /* In device pointer mode alpha and beta are device memory too. */
    if (h->pointer_mode == CUBLAS_POINTER_MODE_DEVICE && alpha && beta &&
        (!addressable(fn, "alpha", alpha, sizeof(float)) ||
         !addressable(fn, "beta", beta, sizeof(float))))
        return CUBLAS_STATUS_EXECUTION_FAILED;
    float a, b;
    if ((st = read_scalars(alpha, beta, &a, &b)) != CUBLAS_STATUS_SUCCESS) return st;
    const rounding r = input_rounding(h, g.at, compute, legacy);
    for (int64_t i = 0; i < batch; i++) {
        if ((st = problem(i, g)) != CUBLAS_STATUS_SUCCESS) return st;
        if (!pointers_present(g)) return CUBLAS_STATUS_INVALID_VALUE;
        if (!operands_addressable(fn, g)) return CUBLAS_STATUS_EXECUTION_FAILED;
        run_gemm(g, a, b, r);
    }
    return CUBLAS_STATUS_SUCCESS;
}

} // namespace

/* ---- GEMMs --------------------------------------------------------------------------------- */

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                            cublasOperation_t transb, int m, int n, int k, const void *alpha,
                            const void *A, cudaDataType Atype, int lda, const void *B,
                            cudaDataType Btype, int ldb, const void *beta, void *C,
                            cudaDataType Ctype, int ldc, cublasComputeType_t computeType,
                            cublasGemmAlgo_t algo) {
    (void)algo; /* an algorithm choice changes speed, not the result's definition */
    const gemm_args g = {transa, transb, m, n, k, A, B, C, lda, ldb, ldc, Atype, Btype, Ctype};
    return run_batch(handle, "cublasGemmEx", g, alpha, beta, 1, computeType, false,
                     [](int64_t, gemm_args &) { return CUBLAS_STATUS_SUCCESS; });
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa,
                                          cublasOperation_t transb, int m, int n, int k,
                                          const void *alpha, const void *A, cudaDataType Atype,
                                          int lda, long long int strideA, const void *B,
                                          cudaDataType Btype, int ldb, long long int strideB,
                                          const void *beta, void *C, cudaDataType Ctype, int ldc,
                                          long long int strideC, int batchCount,
                                          cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
    (void)algo;
    const gemm_args g = {transa, transb, m, n, k, A, B, C, lda, ldb, ldc, Atype, Btype, Ctype};
    return run_batch(handle, "cublasGemmStridedBatchedEx", g, alpha, beta, batchCount, computeType,
                     false, [&](int64_t i, gemm_args &p) {
                         p.a = offset(A, i * strideA, Atype);
                         p.b = offset(B, i * strideB, Btype);
                         p.c = (void *)offset(C, i * strideC, Ctype);
                         return CUBLAS_STATUS_SUCCESS;
                     });
}

cublasStatus_t cublasGemmBatchedEx(cublasHandle_t handle, cublasOperation_t transa,
                                   cublasOperation_t transb, int m, int n, int k, const void *alpha,
                                   const void *const Aarray[], cudaDataType Atype, int lda,
                                   const void *const Barray[], cudaDataType Btype, int ldb,
                                   const void *beta, void *const Carray[], cudaDataType Ctype,
                                   int ldc, int batchCount, cublasComputeType_t computeType,
                                   cublasGemmAlgo_t algo) {
    (void)algo;
    const gemm_args g = {transa,  transb, m,   n,   k,     nullptr, nullptr,
                         nullptr, lda,    ldb, ldc, Atype, Btype,   Ctype};
    return run_batch(handle, "cublasGemmBatchedEx", g, alpha, beta, batchCount, computeType, false,
                     [&](int64_t i, gemm_args &p) {
                         if (i == 0) { /* the arrays themselves, before the first read */
                             if (!Aarray || !Barray || !Carray) return CUBLAS_STATUS_INVALID_VALUE;
                             const size_t bytes = (size_t)batchCount * sizeof(void *);
                             const char *fn = "cublasGemmBatchedEx";
                             if (!addressable(fn, "the A pointer array", Aarray, bytes) ||
                                 !addressable(fn, "the B pointer array", Barray, bytes) ||
                                 !addressable(fn, "the C pointer array", Carray, bytes))
                                 return CUBLAS_STATUS_EXECUTION_FAILED;
                         }
                         p.a = Aarray[i];
                         p.b = Barray[i];
                         p.c = Carray[i];
                         return CUBLAS_STATUS_SUCCESS;
                     });
}

/* The legacy fp32 routines: CUBLAS_COMPUTE_32F under the handle's math mode. */
cublasStatus_t cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa,
                              cublasOperation_t transb, int m, int n, int k, const float *alpha,
                              const float *A, int lda, const float *B, int ldb, const float *beta,
                              float *C, int ldc) {
    return cublasSgemmStridedBatched(handle, transa, transb, m, n, k, alpha, A, lda, 0, B, ldb, 0,
                                     beta, C, ldc, 0, 1);
}

cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa,
                                         cublasOperation_t transb, int m, int n, int k,
                                         const float *alpha, const float *A, int lda,
                                         long long int strideA, const float *B, int ldb,
                                         long long int strideB, const float *beta, float *C,
                                         int ldc, long long int strideC, int batchCount) {
    const gemm_args g = {transa, transb, m,   n,   k,          A,          B,
                         C,      lda,    ldb, ldc, CUDA_R_32F, CUDA_R_32F, CUDA_R_32F};
    return run_batch(handle, "cublasSgemmStridedBatched", g, alpha, beta, batchCount,
                     CUBLAS_COMPUTE_32F, true, [&](int64_t i, gemm_args &p) {
                         p.a = offset(A, i * strideA, CUDA_R_32F);
                         p.b = offset(B, i * strideB, CUDA_R_32F);
                         p.c = (void *)offset(C, i * strideC, CUDA_R_32F);
                         return CUBLAS_STATUS_SUCCESS;
                     });
}

/* Groups of problems: group i has group_size[i] problems of one shape, alpha_array[i] and
 * beta_array[i]; the pointer arrays list the problems of all groups in order. Sizes, leading
 * dimensions, transposes, scalars and group sizes are host arrays; the pointer arrays are device
 * arrays (host memory here). Every argument is checked before anything is computed. */
cublasStatus_t cublasGemmGroupedBatchedEx(
    cublasHandle_t handle, const cublasOperation_t transa_array[],
    const cublasOperation_t transb_array[], const int m_array[], const int n_array[],
    const int k_array[], const void *alpha_array, const void *const Aarray[], cudaDataType_t Atype,
    const int lda_array[], const void *const Barray[], cudaDataType_t Btype, const int ldb_array[],
    const void *beta_array, void *const Carray[], cudaDataType_t Ctype, const int ldc_array[],
    int group_count, const int group_size[], cublasComputeType_t computeType) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (group_count < 0) return CUBLAS_STATUS_INVALID_VALUE;
    if (group_count == 0) return CUBLAS_STATUS_SUCCESS;
    const support s = grouped_support(Atype, Btype, Ctype, computeType);
    if (s != EMULATED)
        return refuse(s, "cublasGemmGroupedBatchedEx", Atype, Btype, Ctype, computeType);
    if (!transa_array || !transb_array || !m_array || !n_array || !k_array || !alpha_array ||
        !beta_array || !lda_array || !ldb_array || !ldc_array || !group_size)
        return CUBLAS_STATUS_INVALID_VALUE;
    int64_t problems = 0;
    for (int i = 0; i < group_count; i++) {
        const gemm_args g = {
            transa_array[i], transb_array[i], m_array[i], n_array[i],   k_array[i],
            nullptr,         nullptr,         nullptr,    lda_array[i], ldb_array[i],
            ldc_array[i],    Atype,           Btype,      Ctype};
        const cublasStatus_t st = validate(g);
        if (st != CUBLAS_STATUS_SUCCESS) return st;
        if (group_size[i] < 0) return CUBLAS_STATUS_INVALID_VALUE;
        problems += group_size[i];
    }
    if (problems > 0 && (!Aarray || !Barray || !Carray)) return CUBLAS_STATUS_INVALID_VALUE;
    if (!can_launch(handle)) return CUBLAS_STATUS_EXECUTION_FAILED;
    const char *fn = "cublasGemmGroupedBatchedEx";
    const size_t array_bytes = (size_t)problems * sizeof(void *);
    if (!addressable(fn, "the A pointer array", Aarray, array_bytes) ||
        !addressable(fn, "the B pointer array", Barray, array_bytes) ||
        !addressable(fn, "the C pointer array", Carray, array_bytes))
        return CUBLAS_STATUS_EXECUTION_FAILED;
    const float *alphas = (const float *)alpha_array, *betas = (const float *)beta_array;
    const rounding r = input_rounding(handle, Atype, computeType, false);
    int64_t p = 0;
    for (int i = 0; i < group_count; i++)
        for (int j = 0; j < group_size[i]; j++, p++) {
            const gemm_args g = {
                transa_array[i], transb_array[i], m_array[i], n_array[i],   k_array[i],
                Aarray[p],       Barray[p],       Carray[p],  lda_array[i], ldb_array[i],
                ldc_array[i],    Atype,           Btype,      Ctype};
            if (!pointers_present(g)) return CUBLAS_STATUS_INVALID_VALUE;
            if (!operands_addressable(fn, g)) return CUBLAS_STATUS_EXECUTION_FAILED;
            run_gemm(g, alphas[i], betas[i], r);
        }
    return CUBLAS_STATUS_SUCCESS;
}
