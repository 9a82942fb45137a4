/*
 * core/cross_entropy_cpu.c - fused softmax cross-entropy (loss and dlogits in one pass).
 *
 * Per row: m = max, lse = m + log(sum exp(l - m)), loss = lse - l[target],
 * dlogits = (exp(l - lse) - onehot) * grad_scale. Written in place when dlogits aliases
 * logits, so the [N, V] logits buffer is reused for its own gradient.
 */
#include <math.h>

#include "core/kernels_cpu.h"
#include "core/log.h"

void sl_cpu_cross_entropy(void *ctx, sl_tensor *losses, sl_tensor *dlogits, const sl_tensor *logits,
                          const sl_tensor *targets, float grad_scale) {
    (void)ctx;
    const int64_t n = sl_rows(logits), v = sl_last_dim(logits);
    const float *pl = sl_f32(logits);
    const int32_t *pt = sl_i32(targets);
    float *ploss = sl_f32(losses);
    float *pd = dlogits ? sl_f32(dlogits) : NULL;
#pragma omp parallel for if (n > 16)
    for (int64_t r = 0; r < n; r++) {
        const float *l = pl + r * v;
        const int32_t t = pt[r];
        SL_CHECK(t < v, "cross_entropy: target %d at row %lld outside the vocabulary of %lld", t,
                 (long long)r, (long long)v);
        float m = l[0];
        for (int64_t i = 1; i < v; i++) m = l[i] > m ? l[i] : m;
        double s = 0.0;
        for (int64_t i = 0; i < v; i++) s += exp((double)(l[i] - m));
        const float lse = m + (float)log(s);
        ploss[r] = t >= 0 ? lse - l[t] : 0.0f;
        if (!pd) continue;
        float *d = pd + r * v;
        if (t < 0) {
            for (int64_t i = 0; i < v; i++) d[i] = 0.0f;
            continue;
        }
        for (int64_t i = 0; i < v; i++) d[i] = expf(l[i] - lse) * grad_scale;
        d[t] -= grad_scale;
    }
}
