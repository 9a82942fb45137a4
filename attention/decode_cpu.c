/*
 * attention/decode_cpu.c - decoding with a KV cache on the CPU: writing the new keys and values
 * into the cache, and the gated attention of the new queries against it (core/ops.h; the CUDA
 * twins are in attention/decode.cu).
 *
 * Layout: cache [B, L, KV, D], row b position p at ((b L + p) KV + kvh) D; the new tokens
 * [B*n, ...], token i of sequence b at row b n + i and position start[b] + i.
 *
 * Attention: one task per (query row, head), keys in chunks of KC with an online softmax (the
 * running max m, the running sum l and the unnormalized output O, rescaled by e^(m - m') when the
 * max grows), so the scratch is KC logits whatever the cache length. In fp32 this is the
 * arithmetic of the training kernel (attention/gated_attn_cpu.c) up to the order of the sums:
 * the two agree within rounding, which tests/test_generate.c checks through the whole model.
 * Decoding is latency-bound with few query rows (n = 1 per sequence), so the tasks are split
 * over OpenMP threads and nothing is tiled across queries.
 */
#include <math.h>
#include <string.h>

#include "attention/kernels_cpu.h"
#include "core/log.h"

enum { KC = 64 }; /* keys per chunk of the online softmax */

static void check_f32(const char *op, const sl_tensor *const *ts, int n) {
    for (int i = 0; i < n; i++)
        SL_CHECK(!ts[i] || ts[i]->dtype == SL_F32, "cpu %s: only f32 is supported", op);
}

void sl_cpu_kv_cache_write(void *ctx, sl_tensor *cache, const sl_tensor *x, const sl_tensor *start,
                           int batch, int n) {
    (void)ctx;
    check_f32("kv_cache_write", (const sl_tensor *[]){cache, x}, 2);
    const int64_t len = cache->shape[1], row = cache->shape[2] * cache->shape[3];
    const int32_t *st = sl_i32(start);
    const float *src = sl_f32(x);
    float *dst = sl_f32(cache);
    for (int b = 0; b < batch; b++) {
        SL_CHECK(st[b] >= 0, "kv_cache_write: start[%d] = %d is negative", b, (int)st[b]);
        for (int i = 0; i < n; i++) {
            const int64_t p = (int64_t)st[b] + i;
            if (p >= len) break; /* a padding row past the cache: never read */
            memcpy(dst + ((int64_t)b * len + p) * row, src + ((int64_t)b * n + i) * row,
                   (size_t)row * sizeof(float));
        }
    }
}

void sl_cpu_gated_attn_decode(void *ctx, sl_tensor *y, const sl_tensor *q, const sl_tensor *kc,
                              const sl_tensor *vc, const sl_tensor *g, const sl_tensor *start,
                              int batch, int n, float scale) {
    (void)ctx;
    check_f32("gated_attn_decode", (const sl_tensor *[]){y, q, kc, vc, g}, 5);
    const int64_t h = q->shape[1], d = q->shape[2], len = kc->shape[1], kv = kc->shape[2];
    const int64_t grp = h / kv, rows = (int64_t)batch * n;
    const int gate = !g ? 0 : g->numel == q->numel ? 2 : 1; /* none, headwise, elementwise */
    const int32_t *st = sl_i32(start);
    for (int b = 0; b < batch; b++)
        SL_CHECK(st[b] >= 0, "gated_attn_decode: start[%d] = %d is negative", b, (int)st[b]);
    const float *pq = sl_f32(q), *pk = sl_f32(kc), *pv = sl_f32(vc), *pg = g ? sl_f32(g) : NULL;
    float *py = sl_f32(y);
#pragma omp parallel for schedule(dynamic, 1) if (rows * h > 1)
    for (int64_t task = 0; task < rows * h; task++) {
        const int64_t r = task / h, hh = task % h, b = r / n, i = r % n;
        int64_t last = (int64_t)st[b] + i; /* the query's position: it sees keys 0 .. last */
        if (last > len - 1) last = len - 1;
        const float *qr = pq + (r * h + hh) * d;
        const float *kb = pk + ((int64_t)b * len * kv + hh / grp) * d;
        const float *vb = pv + ((int64_t)b * len * kv + hh / grp) * d;
        float *o = py + (r * h + hh) * d;
        float s[KC], mx = -INFINITY, l = 0.0f;
        memset(o, 0, (size_t)d * sizeof(float));
        for (int64_t j0 = 0; j0 <= last; j0 += KC) {
            const int nk = (int)(last + 1 - j0 < KC ? last + 1 - j0 : KC);
            float cmax = -INFINITY;
            for (int c = 0; c < nk; c++) {
                const float *kr = kb + (j0 + c) * kv * d;
                float dot = 0.0f;
                for (int64_t e = 0; e < d; e++) dot += qr[e] * kr[e];
                s[c] = scale * dot;
                cmax = s[c] > cmax ? s[c] : cmax;
            }
            const float mnew = cmax > mx ? cmax : mx;
            const float alpha = sl_exp_f32(mx - mnew); /* 0 on the first chunk */
            l *= alpha;
            for (int64_t e = 0; e < d; e++) o[e] *= alpha;
            for (int c = 0; c < nk; c++) {
                const float p = sl_exp_f32(s[c] - mnew);
                const float *vr = vb + (j0 + c) * kv * d;
                l += p;
                for (int64_t e = 0; e < d; e++) o[e] += p * vr[e];
            }
            mx = mnew;
        }
        const float inv = 1.0f / l;
        for (int64_t e = 0; e < d; e++) {
            const float gv = gate == 2 ? pg[(r * h + hh) * d + e] : gate == 1 ? pg[r * h + hh] : 0;
            o[e] *= inv * (gate ? sl_sigmoid_f32(gv) : 1.0f);
        }
    }
}
