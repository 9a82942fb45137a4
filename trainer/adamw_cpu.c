/*
 * trainer/adamw_cpu.c - decoupled AdamW (Loshchilov & Hutter) on the CPU, fp32 state.
 *
 *   g' = g * grad_scale;  m = b1 m + (1-b1) g';  v = b2 v + (1-b2) g'^2
 *   p -= lr * ( (m / (1-b1^t)) / (sqrt(v) / sqrt(1-b2^t) + eps) + wd * p )
 */
#include <math.h>
#include <string.h>

#include "core/log.h"
#include "core/vmath.h"
#include "trainer/kernels_cpu.h"

/* The update of one contiguous range, vectorized per ISA (SL_CPU_CLONES). Constants are
 * hoisted so the loop is multiplies, one sqrt and one divide per element. */
SL_CPU_CLONES static void adamw_range(float *restrict p, const float *restrict g, float *restrict m,
                                      float *restrict v, int64_t n, float b1, float b2, float lr,
                                      float wd, float eps, float gs, float inv_bc1,
                                      float inv_sqrt_bc2) {
#pragma omp simd
    for (int64_t i = 0; i < n; i++) {
        const float gi = g[i] * gs;
        const float mi = b1 * m[i] + (1.0f - b1) * gi;
        const float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        p[i] -= lr * ((mi * inv_bc1) / (sqrtf(vi) * inv_sqrt_bc2 + eps) + wd * p[i]);
    }
}

void sl_cpu_adamw(void *ctx, sl_tensor *p, const sl_tensor *g, sl_tensor *m, sl_tensor *v,
                  sl_tensor *p_copy, const sl_adamw_params *hp) {
    (void)ctx;
    SL_CHECK(p->dtype == SL_F32 && g->dtype == SL_F32, "cpu adamw: only f32 is supported");
    float *pp = sl_f32(p), *pm = sl_f32(m), *pv = sl_f32(v);
    const float *pg = sl_f32(g);
    const int64_t n = p->numel;
    const float bc1 = 1.0f - powf(hp->beta1, (float)hp->step);
    const float bc2 = 1.0f - powf(hp->beta2, (float)hp->step);
    const float inv_bc1 = 1.0f / bc1, inv_sqrt_bc2 = 1.0f / sqrtf(bc2);
    /* Chunks of 16k elements spread over the threads; each is one vector loop. */
    const int64_t chunk = 16384, nchunks = (n + chunk - 1) / chunk;
#pragma omp parallel for schedule(static) if (nchunks > 1)
    for (int64_t c = 0; c < nchunks; c++) {
        const int64_t lo = c * chunk, len = n - lo < chunk ? n - lo : chunk;
        adamw_range(pp + lo, pg + lo, pm + lo, pv + lo, len, hp->beta1, hp->beta2, hp->lr,
                    hp->weight_decay, hp->eps, hp->grad_scale, inv_bc1, inv_sqrt_bc2);
    }
    /* The CPU computes in fp32 (core/ops.c rejects bf16 here), so a copy is a plain copy. */
    if (p_copy && p_copy->data != p->data) memcpy(p_copy->data, p->data, sizeof(float) * (size_t)n);
}
