/*
 * moe/router_cpu.c - the MoE router on the CPU (always fp32).
 *
 * Forward, per token n with logits l [E]:
 *   lse = log sum_e exp(l_e),  p_e = exp(l_e - lse)
 *   top-k of score_e = p_e + bias_e (bias only for selection; NULL = 0), descending, ties to
 *   the lower expert index; w_j = p_{i_j}, divided by S = sum_j p_{i_j} when norm_topk.
 *   stats[e] = sum_n p[n, e], stats[E] = sum_n lse_n^2 (reduced in double in a fixed order
 *   of fixed-size row blocks, so the result does not depend on the thread count).
 *
 * Backward, per token (selection fixed), with g_j = dL/dw_j:
 *   dL/dp_e = lbl_grad[e] + sum_{j: i_j = e} c_j, where
 *     c_j = g_j                           without normalization,
 *     c_j = (g_j - sum_m g_m w_m) / S     with w_j = p_{i_j} / S (dw_j/dp_{i_m} = (d_jm - w_j)/S);
 *   dlogits_e = p_e (dL/dp_e - sum_f p_f dL/dp_f) + 2 z_scale lse p_e     (d lse / d l_e = p_e).
 */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "moe/kernels_cpu.h"

/* Rows per block of the stats reduction (fixed, independent of the thread count). */
#define ROUTER_BLOCK 256

/* Softmax of one row in fp32 (max-subtracted, sum in double); returns the log-sum-exp. */
static float softmax_row(float *p, const float *l, int64_t e) {
    float m = l[0];
    for (int64_t i = 1; i < e; i++) m = l[i] > m ? l[i] : m;
    double s = 0.0;
    for (int64_t i = 0; i < e; i++) {
        p[i] = expf(l[i] - m);
        s += p[i];
    }
    const float inv = (float)(1.0 / s);
    for (int64_t i = 0; i < e; i++) p[i] *= inv;
    return m + (float)log(s);
}

/* Top-k of score (= p + bias) by insertion: a later expert enters only with a strictly larger
 * score, so equal scores keep the lower index first. */
static void topk_row(int32_t *idx, float *best, const float *p, const float *bias, int64_t e,
                     int64_t k) {
    int64_t have = 0;
    for (int64_t i = 0; i < e; i++) {
        const float sc = bias ? p[i] + bias[i] : p[i];
        if (have == k && !(sc > best[k - 1])) continue;
        int64_t pos = have < k ? have : k - 1;
        while (pos > 0 && sc > best[pos - 1]) {
            best[pos] = best[pos - 1];
            idx[pos] = idx[pos - 1];
            pos--;
        }
        best[pos] = sc;
        idx[pos] = (int32_t)i;
        if (have < k) have++;
    }
}

void sl_cpu_router_fwd(void *ctx, sl_tensor *probs, sl_tensor *topk_idx, sl_tensor *topk_w,
                       sl_tensor *stats, const sl_tensor *logits, const sl_tensor *bias,
                       bool norm_topk) {
    (void)ctx;
    SL_CHECK(stats->dtype == SL_F32 && (!bias || bias->dtype == SL_F32),
             "cpu router_fwd: stats and bias must be f32");
    const int64_t n = sl_rows(logits), e = sl_last_dim(logits), k = sl_last_dim(topk_idx);
    const float *pl = sl_f32(logits), *pb = bias ? sl_f32(bias) : NULL;
    float *pp = sl_f32(probs), *pw = sl_f32(topk_w), *pst = sl_f32(stats);
    int32_t *pi = sl_i32(topk_idx);
    const int64_t nblk = (n + ROUTER_BLOCK - 1) / ROUTER_BLOCK;
    double *part = sl_xcalloc((size_t)(nblk > 0 ? nblk : 1) * (size_t)(e + 1), sizeof(double));
#pragma omp parallel if (nblk > 1)
    {
        float *best = sl_xmalloc(sizeof(float) * (size_t)k);
#pragma omp for schedule(static)
        for (int64_t b = 0; b < nblk; b++) {
            double *acc = part + b * (e + 1);
            const int64_t r1 = (b + 1) * ROUTER_BLOCK < n ? (b + 1) * ROUTER_BLOCK : n;
            for (int64_t r = b * ROUTER_BLOCK; r < r1; r++) {
                float *p = pp + r * e, *w = pw + r * k;
                int32_t *idx = pi + r * k;
                const float lse = softmax_row(p, pl + r * e, e);
                topk_row(idx, best, p, pb, e, k);
                double sum = 0.0;
                for (int64_t j = 0; j < k; j++) {
                    w[j] = p[idx[j]];
                    sum += w[j];
                }
                if (norm_topk) {
                    const float inv = (float)(1.0 / sum);
                    for (int64_t j = 0; j < k; j++) w[j] *= inv;
                }
                for (int64_t i = 0; i < e; i++) acc[i] += p[i];
                acc[e] += (double)lse * lse;
            }
        }
        free(best);
    }
    for (int64_t i = 0; i <= e; i++) {
        double s = 0.0;
        for (int64_t b = 0; b < nblk; b++) s += part[b * (e + 1) + i];
        pst[i] = (float)s;
    }
    free(part);
}

void sl_cpu_router_bwd(void *ctx, sl_tensor *dlogits, const sl_tensor *dtopk_w,
                       const sl_tensor *probs, const sl_tensor *topk_idx, const sl_tensor *topk_w,
                       const sl_tensor *logits, const sl_tensor *lbl_grad, float z_scale,
                       bool norm_topk) {
    (void)ctx;
    const int64_t n = sl_rows(probs), e = sl_last_dim(probs), k = sl_last_dim(topk_idx);
    const float *pp = sl_f32(probs), *pl = sl_f32(logits), *pg = sl_f32(dtopk_w);
    const float *pw = sl_f32(topk_w), *plbl = lbl_grad ? sl_f32(lbl_grad) : NULL;
    const int32_t *pi = sl_i32(topk_idx);
    float *pd = sl_f32(dlogits);
#pragma omp parallel for schedule(static) if (n * e > 4096)
    for (int64_t r = 0; r < n; r++) {
        const float *p = pp + r * e, *l = pl + r * e, *g = pg + r * k, *w = pw + r * k;
        const int32_t *idx = pi + r * k;
        float *d = pd + r * e; /* holds dL/dp first, then dL/dlogits */
        if (plbl)
            memcpy(d, plbl, sizeof(float) * (size_t)e);
        else
            memset(d, 0, sizeof(float) * (size_t)e);
        if (norm_topk) {
            double sel = 0.0, gw = 0.0;
            for (int64_t j = 0; j < k; j++) {
                sel += p[idx[j]];
                gw += (double)g[j] * w[j];
            }
            for (int64_t j = 0; j < k; j++) d[idx[j]] += (float)((g[j] - gw) / sel);
        } else {
            for (int64_t j = 0; j < k; j++) d[idx[j]] += g[j];
        }
        double dot = 0.0;
        for (int64_t i = 0; i < e; i++) dot += (double)p[i] * d[i];
        float zc = 0.0f;
        if (z_scale != 0.0f) {
            float m = l[0];
            for (int64_t i = 1; i < e; i++) m = l[i] > m ? l[i] : m;
            double s = 0.0;
            for (int64_t i = 0; i < e; i++) s += exp((double)(l[i] - m));
            zc = (float)(2.0 * z_scale * (m + log(s)));
        }
        for (int64_t i = 0; i < e; i++) d[i] = p[i] * (d[i] - (float)dot + zc);
    }
}
