/*
 * trainer/adamw_cpu.c - decoupled AdamW (Loshchilov & Hutter) on the CPU, fp32 state.
 *
 *   g' = g * grad_scale;  m = b1 m + (1-b1) g';  v = b2 v + (1-b2) g'^2
 *   p -= lr * ( (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps) + wd * p )
 */
#include <math.h>

#include "core/cpu_kernels.h"
#include "core/log.h"

static void cpu_adamw(void *ctx, sl_tensor *p, const sl_tensor *g, sl_tensor *m, sl_tensor *v,
                      const sl_adamw_params *hp) {
    (void)ctx;
    SL_CHECK(p->dtype == SL_F32 && g->dtype == SL_F32, "cpu adamw: only f32 is supported");
    float *pp = sl_f32(p), *pm = sl_f32(m), *pv = sl_f32(v);
    const float *pg = sl_f32(g);
    const int64_t n = p->numel;
    const float b1 = hp->beta1, b2 = hp->beta2, lr = hp->lr, wd = hp->weight_decay;
    const float eps = hp->eps, gs = hp->grad_scale;
    const float bc1 = 1.0f - powf(b1, (float)hp->step), bc2 = 1.0f - powf(b2, (float)hp->step);
#pragma omp parallel for if (n > 32768)
    for (int64_t i = 0; i < n; i++) {
        const float gi = pg[i] * gs;
        const float mi = b1 * pm[i] + (1.0f - b1) * gi;
        const float vi = b2 * pv[i] + (1.0f - b2) * gi * gi;
        pm[i] = mi;
        pv[i] = vi;
        pp[i] -= lr * ((mi / bc1) / (sqrtf(vi / bc2) + eps) + wd * pp[i]);
    }
}

void sl_cpu_register_trainer(sl_ops_i *ops) {
    ops->adamw = cpu_adamw;
}
