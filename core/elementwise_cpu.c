/* core/elementwise_cpu.c - fill, add, axpy, scale and reductions on the CPU (fp32). */
#include <math.h>
#include <string.h>

#include "core/kernels_cpu.h"
#include "core/log.h"
#include "core/vmath.h"

/* Elementwise loops only pay for threads on large tensors. */
#define SL_PAR_MIN 32768

static void need_f32(const sl_tensor *t, const char *op) {
    SL_CHECK(t->dtype == SL_F32, "cpu %s: only f32 is supported, got %s", op,
             sl_dtype_name(t->dtype));
}

void sl_cpu_fill(void *ctx, sl_tensor *x, float value) {
    (void)ctx;
    if (x->dtype == SL_I32) {
        int32_t *p = sl_i32(x);
        for (int64_t i = 0; i < x->numel; i++) p[i] = (int32_t)value;
        return;
    }
    need_f32(x, "fill");
    float *p = sl_f32(x);
    int64_t n = x->numel;
#pragma omp parallel for if (n > SL_PAR_MIN)
    for (int64_t i = 0; i < n; i++) p[i] = value;
}

void sl_cpu_add(void *ctx, sl_tensor *y, const sl_tensor *a, const sl_tensor *b) {
    (void)ctx;
    need_f32(y, "add");
    float *py = sl_f32(y);
    const float *pa = sl_f32(a), *pb = sl_f32(b);
    int64_t n = y->numel;
#pragma omp parallel for if (n > SL_PAR_MIN)
    for (int64_t i = 0; i < n; i++) py[i] = pa[i] + pb[i];
}

void sl_cpu_axpy(void *ctx, sl_tensor *y, const sl_tensor *x, float alpha) {
    (void)ctx;
    need_f32(y, "axpy");
    float *py = sl_f32(y);
    const float *px = sl_f32(x);
    int64_t n = y->numel;
#pragma omp parallel for if (n > SL_PAR_MIN)
    for (int64_t i = 0; i < n; i++) py[i] += alpha * px[i];
}

void sl_cpu_scale(void *ctx, sl_tensor *x, float s) {
    (void)ctx;
    need_f32(x, "scale");
    float *p = sl_f32(x);
    int64_t n = x->numel;
#pragma omp parallel for if (n > SL_PAR_MIN)
    for (int64_t i = 0; i < n; i++) p[i] *= s;
}

void sl_cpu_convert(void *ctx, sl_tensor *dst, const sl_tensor *src) {
    (void)ctx;
    need_f32(dst, "convert");
    need_f32(src, "convert");
    if (dst->data != src->data) memcpy(dst->data, src->data, sizeof(float) * (size_t)dst->numel);
}

void sl_cpu_sum(void *ctx, sl_tensor *out, const sl_tensor *x) {
    (void)ctx;
    need_f32(x, "sum");
    const float *p = sl_f32(x);
    int64_t n = x->numel;
    double acc = 0.0;
#pragma omp parallel for reduction(+ : acc) if (n > SL_PAR_MIN)
    for (int64_t i = 0; i < n; i++) acc += p[i];
    sl_f32(out)[0] = (float)acc;
}

/* Sum of squares of one range in double, vectorized per ISA: several independent partial
 * sums instead of one serial dependency chain. */
SL_CPU_CLONES static double sumsq_range(const float *p, int64_t n) {
    double acc = 0.0;
#pragma omp simd reduction(+ : acc)
    for (int64_t i = 0; i < n; i++) acc += (double)p[i] * p[i];
    return acc;
}

double sl_cpu_sumsq_f64(const float *p, int64_t n) {
    const int64_t chunk = 65536, nchunks = (n + chunk - 1) / chunk;
    double acc = 0.0;
#pragma omp parallel for reduction(+ : acc) schedule(static) if (nchunks > 1)
    for (int64_t c = 0; c < nchunks; c++) {
        const int64_t lo = c * chunk;
        acc += sumsq_range(p + lo, n - lo < chunk ? n - lo : chunk);
    }
    return acc;
}

void sl_cpu_sumsq(void *ctx, sl_tensor *out, const sl_tensor *x) {
    (void)ctx;
    need_f32(x, "sumsq");
    sl_f32(out)[0] = (float)sl_cpu_sumsq_f64(sl_f32(x), x->numel);
}

void sl_cpu_absmax(void *ctx, sl_tensor *out, const sl_tensor *x) {
    (void)ctx;
    need_f32(x, "absmax");
    const float *p = sl_f32(x);
    const int64_t n = x->numel;
    float m = 0.0f;
    int nan = 0;
#pragma omp parallel for reduction(max : m) reduction(| : nan) if (n > SL_PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        const float a = fabsf(p[i]);
        nan |= a != a;
        m = a > m ? a : m;
    }
    sl_f32(out)[0] = nan ? NAN : m;
}
