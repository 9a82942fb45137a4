/*
 * core/rmsnorm_cpu.c - RMSNorm forward and backward over rows of width D (fp32).
 *
 * Used for the decoder norms (D = hidden) and for the per-head QK norm (D = head_dim).
 * Backward: with r = rstd, xh = x * r, y = xh * w:
 *   dx = r * (dy*w - xh * mean(dy*w*xh)),   dw += sum over rows of dy * xh.
 */
#include <math.h>
#include <omp.h>
#include <stdlib.h>

#include "core/kernels_cpu.h"
#include "core/log.h"

void sl_cpu_rmsnorm_fwd(void *ctx, sl_tensor *y, sl_tensor *rstd, const sl_tensor *x,
                        const sl_tensor *w, float eps) {
    (void)ctx;
    const int64_t d = w->numel, rows = x->numel / d;
    const float *px = sl_f32(x), *pw = sl_f32(w);
    float *py = sl_f32(y), *pr = sl_f32(rstd);
#pragma omp parallel for if (rows > 64)
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = px + r * d;
        float *yr = py + r * d;
        double ss = 0.0;
        for (int64_t i = 0; i < d; i++) ss += (double)xr[i] * xr[i];
        float s = (float)(1.0 / sqrt(ss / (double)d + (double)eps));
        pr[r] = s;
        for (int64_t i = 0; i < d; i++) yr[i] = xr[i] * s * pw[i];
    }
}

void sl_cpu_rmsnorm_bwd(void *ctx, sl_tensor *dx, sl_tensor *dw, const sl_tensor *dy,
                        const sl_tensor *dy_add, const sl_tensor *x, const sl_tensor *w,
                        const sl_tensor *rstd, const sl_tensor *dres) {
    const int64_t d = w->numel, rows = x->numel / d;
    const float *px = sl_f32(x), *pw = sl_f32(w), *pdy = sl_f32(dy), *pr = sl_f32(rstd);
    const float *padd = dy_add ? sl_f32(dy_add) : NULL;
    const float *pres = dres ? sl_f32(dres) : NULL;
    float *pdx = sl_f32(dx), *pdw = sl_f32(dw);
    const int nt = omp_get_max_threads();
    (void)ctx;
    /* Per-thread partial dw, summed at the end: deterministic for a fixed thread count. */
    float *partial = sl_xcalloc((size_t)nt * (size_t)d, sizeof(float));
#pragma omp parallel num_threads(nt)
    {
        float *mydw = partial + (size_t)omp_get_thread_num() * (size_t)d;
        float *sum = padd ? sl_xmalloc(sizeof(float) * (size_t)d) : NULL; /* dy + dy_add */
#pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; r++) {
            const float *xr = px + r * d, *dyr = pdy + r * d;
            float *dxr = pdx + r * d;
            if (padd) { /* fp32 already: the sum's rounding to dy's dtype is none */
                for (int64_t i = 0; i < d; i++) sum[i] = dyr[i] + padd[r * d + i];
                dyr = sum;
            }
            const float s = pr[r];
            double dot = 0.0;
            for (int64_t i = 0; i < d; i++) {
                float xh = xr[i] * s;
                dot += (double)dyr[i] * pw[i] * xh;
                mydw[i] += dyr[i] * xh;
            }
            const float mean = (float)(dot / (double)d);
            /* the gradient rounded to fp32 first, then the residual's added: the bits of the
             * axpy this replaces */
            for (int64_t i = 0; i < d; i++) {
                const float g = s * (dyr[i] * pw[i] - xr[i] * s * mean);
                dxr[i] = pres ? g + pres[r * d + i] : g;
            }
        }
        free(sum);
    }
    for (int t = 0; t < nt; t++)
        for (int64_t i = 0; i < d; i++) pdw[i] += partial[(size_t)t * (size_t)d + (size_t)i];
    free(partial);
}
