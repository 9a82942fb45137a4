/* core/matmul_cpu.c - dense GEMM on the CPU through OpenBLAS cblas_sgemm. */
#include <cblas.h>

#include "core/kernels_cpu.h"
#include "core/log.h"

void sl_cpu_matmul(void *ctx, sl_tensor *c, const sl_tensor *a, const sl_tensor *b, bool trans_a,
                   bool trans_b, float alpha, float beta) {
    (void)ctx;
    SL_CHECK(c->dtype == SL_F32 && a->dtype == SL_F32 && b->dtype == SL_F32,
             "cpu matmul: only f32 is supported");
    const int m = (int)sl_rows(c), n = (int)sl_last_dim(c);
    const int k = (int)(trans_a ? sl_rows(a) : sl_last_dim(a));
    if (m == 0 || n == 0) return;
    /* Row-major leading dimensions are the stored row widths. */
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, sl_f32(a), (int)sl_last_dim(a),
                sl_f32(b), (int)sl_last_dim(b), beta, sl_f32(c), n);
}
