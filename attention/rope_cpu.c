/*
 * attention/rope_cpu.c - rotary embedding in place on x [T, heads, D], rotate-half.
 *
 * With half = numel(inv_freq), rot = 2 * half, angle = pos[t] * inv_freq[i],
 * c = mscale * cos(angle), s = mscale * sin(angle), for i < half:
 *   forward   x'[i] = x[i] c - x[i+half] s        x'[i+half] = x[i+half] c + x[i] s
 *   backward  the transpose: x'[i] = x[i] c + x[i+half] s,  x'[i+half] = x[i+half] c - x[i] s
 * Dims >= rot are untouched. The angle and its cos/sin are evaluated in double (positions
 * reach 1e5 with YaRN, where a float angle would be off by ~1e-2 rad), once per token and
 * shared by all heads of that token.
 */
#include <math.h>
#include <stdlib.h>

#include "attention/kernels_cpu.h"
#include "core/log.h"

static void rope_apply(sl_tensor *x, const sl_tensor *pos, const sl_tensor *inv_freq, float mscale,
                       int sign) {
    SL_CHECK(x->dtype == SL_F32, "cpu rope: only f32 is supported");
    const int64_t t = x->shape[0], heads = x->shape[1], d = x->shape[2];
    const int64_t half = inv_freq->numel;
    const int32_t *pp = sl_i32(pos);
    const float *pf = sl_f32(inv_freq);
    float *px = sl_f32(x);
    if (half == 0 || t == 0) return; /* nothing rotates */
#pragma omp parallel if (t > 16)
    {
        float *cs = sl_xmalloc(2 * (size_t)half * sizeof(float));
        float *sn = cs + half;
#pragma omp for schedule(static)
        for (int64_t r = 0; r < t; r++) {
            const double p = (double)pp[r];
            for (int64_t i = 0; i < half; i++) {
                const double a = p * (double)pf[i];
                cs[i] = (float)(mscale * cos(a));
                sn[i] = (float)(sign * mscale * sin(a));
            }
            for (int64_t h = 0; h < heads; h++) {
                float *v = px + (r * heads + h) * d;
                for (int64_t i = 0; i < half; i++) {
                    const float x0 = v[i], x1 = v[i + half];
                    v[i] = x0 * cs[i] - x1 * sn[i];
                    v[i + half] = x1 * cs[i] + x0 * sn[i];
                }
            }
        }
        free(cs);
    }
}

void sl_cpu_rope_fwd(void *ctx, sl_tensor *x, const sl_tensor *pos, const sl_tensor *inv_freq,
                     float mscale) {
    (void)ctx;
    rope_apply(x, pos, inv_freq, mscale, 1);
}

void sl_cpu_rope_bwd(void *ctx, sl_tensor *dx, const sl_tensor *pos, const sl_tensor *inv_freq,
                     float mscale) {
    (void)ctx;
    rope_apply(dx, pos, inv_freq, mscale, -1);
}
