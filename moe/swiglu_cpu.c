/*
 * moe/swiglu_cpu.c - the expert activation and the shared expert's row gate (CPU, fp32).
 *
 * SwiGLU: a row of gu [M, 2I] is [gate | up]; h = silu(gate) * up with silu(g) = g s(g),
 * s = sigmoid. Backward: d up = dh silu(g); d gate = dh up s (1 + g (1 - s)).
 * Row gate: y = x sigmoid(s_n) per row n; dx = dy sigmoid(s_n);
 * ds_n = sum_c dy x * sigmoid(s_n) (1 - sigmoid(s_n)).
 */
#include <math.h>

#include "core/log.h"
#include "core/vmath.h"
#include "moe/kernels_cpu.h"

#define ACT_PAR_MIN 32768

#define sigmoidf sl_sigmoid_f32

/* Row bodies, compiled per ISA (SL_CPU_CLONES) so that they vectorize. */
SL_CPU_CLONES static void swiglu_row(float *h, const float *g, const float *u, int64_t n) {
    for (int64_t i = 0; i < n; i++) h[i] = g[i] * sigmoidf(g[i]) * u[i];
}

SL_CPU_CLONES static void swiglu_row_bwd(float *dg, float *du, const float *g, const float *u,
                                         const float *d, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const float s = sigmoidf(g[i]);
        du[i] = d[i] * g[i] * s;
        dg[i] = d[i] * u[i] * s * (1.0f + g[i] * (1.0f - s));
    }
}

void sl_cpu_swiglu_fwd(void *ctx, sl_tensor *h, const sl_tensor *gu) {
    (void)ctx;
    SL_CHECK(h->dtype == SL_F32 && gu->dtype == SL_F32, "cpu swiglu_fwd: only f32");
    const int64_t m = sl_rows(h), in = sl_last_dim(h);
    const float *pg = sl_f32(gu);
    float *ph = sl_f32(h);
#pragma omp parallel for schedule(static) if (m * in > ACT_PAR_MIN)
    for (int64_t r = 0; r < m; r++) {
        const float *g = pg + r * 2 * in, *u = g + in;
        float *hr = ph + r * in;
        swiglu_row(hr, g, u, in);
    }
}

void sl_cpu_swiglu_bwd(void *ctx, sl_tensor *dgu, const sl_tensor *dh, const sl_tensor *gu) {
    (void)ctx;
    SL_CHECK(dgu->dtype == SL_F32 && dh->dtype == SL_F32 && gu->dtype == SL_F32,
             "cpu swiglu_bwd: only f32");
    const int64_t in = sl_last_dim(gu) / 2, m = sl_rows(gu);
    const float *pg = sl_f32(gu), *pdh = sl_f32(dh);
    float *pd = sl_f32(dgu);
#pragma omp parallel for schedule(static) if (m * in > ACT_PAR_MIN)
    for (int64_t r = 0; r < m; r++) {
        const float *g = pg + r * 2 * in, *u = g + in, *d = pdh + r * in;
        float *dg = pd + r * 2 * in, *du = dg + in;
        swiglu_row_bwd(dg, du, g, u, d, in);
    }
}

void sl_cpu_rowgate_fwd(void *ctx, sl_tensor *y, const sl_tensor *x, const sl_tensor *s) {
    (void)ctx;
    SL_CHECK(y->dtype == SL_F32 && x->dtype == SL_F32 && s->dtype == SL_F32,
             "cpu rowgate_fwd: only f32");
    const int64_t n = sl_rows(x), c = sl_last_dim(x);
    const float *px = sl_f32(x), *ps = sl_f32(s);
    float *py = sl_f32(y);
#pragma omp parallel for schedule(static) if (n * c > ACT_PAR_MIN)
    for (int64_t r = 0; r < n; r++) {
        const float g = sigmoidf(ps[r]);
        for (int64_t i = 0; i < c; i++) py[r * c + i] = px[r * c + i] * g;
    }
}

void sl_cpu_rowgate_bwd(void *ctx, sl_tensor *dx, sl_tensor *ds, const sl_tensor *dy,
                        const sl_tensor *x, const sl_tensor *s) {
    (void)ctx;
    SL_CHECK(dx->dtype == SL_F32 && ds->dtype == SL_F32 && dy->dtype == SL_F32 &&
                 x->dtype == SL_F32 && s->dtype == SL_F32,
             "cpu rowgate_bwd: only f32");
    const int64_t n = sl_rows(x), c = sl_last_dim(x);
    const float *px = sl_f32(x), *ps = sl_f32(s), *pdy = sl_f32(dy);
    float *pdx = sl_f32(dx), *pds = sl_f32(ds);
#pragma omp parallel for schedule(static) if (n * c > ACT_PAR_MIN)
    for (int64_t r = 0; r < n; r++) {
        const float g = sigmoidf(ps[r]);
        double dot = 0.0;
        for (int64_t i = 0; i < c; i++) {
            dot += (double)pdy[r * c + i] * px[r * c + i];
            pdx[r * c + i] = pdy[r * c + i] * g;
        }
        pds[r] = (float)(dot * g * (1.0f - g));
    }
}
