/*
 * attention/qgate_cpu.c - splits the q_proj output into queries and the output gate, and
 * merges their gradients back (the checkpoint layouts of the reference card).
 *
 * Row t of qall [T, W]:
 *   elementwise  W = 2HD: per head h, [q_h (D) | g_h (D)], heads in order.
 *   headwise     W = HD + H: the H*D queries (head-major), then the H gate values.
 *   none         W = HD: the queries only; g is not touched.
 * Pure copies, so split and merge are exact inverses.
 */
#include <string.h>

#include "attention/kernels_cpu.h"
#include "core/log.h"

static void check_f32(const char *op, const sl_tensor *a, const sl_tensor *b, const sl_tensor *c) {
    SL_CHECK(a->dtype == SL_F32 && b->dtype == SL_F32 && (!c || c->dtype == SL_F32),
             "cpu %s: only f32 is supported", op);
}

void sl_cpu_qgate_split(void *ctx, sl_tensor *q, sl_tensor *g, const sl_tensor *qall,
                        sl_gate_mode mode) {
    (void)ctx;
    const bool gated = mode != SL_GATE_NONE;
    check_f32("qgate_split", q, qall, gated ? g : NULL);
    const int64_t t = q->shape[0], h = q->shape[1], d = q->shape[2];
    const int64_t hd = h * d;
    const float *src = sl_f32(qall);
    float *pq = sl_f32(q), *pg = gated ? sl_f32(g) : NULL;
    const size_t row = (size_t)d * sizeof(float);
#pragma omp parallel for if (t > 64)
    for (int64_t r = 0; r < t; r++) {
        float *qr = pq + r * hd;
        if (mode == SL_GATE_ELEMENTWISE) {
            const float *a = src + r * 2 * hd;
            float *gr = pg + r * hd;
            for (int64_t j = 0; j < h; j++) {
                memcpy(qr + j * d, a + j * 2 * d, row);
                memcpy(gr + j * d, a + j * 2 * d + d, row);
            }
        } else if (mode == SL_GATE_HEADWISE) {
            const float *a = src + r * (hd + h);
            memcpy(qr, a, (size_t)hd * sizeof(float));
            memcpy(pg + r * h, a + hd, (size_t)h * sizeof(float));
        } else {
            memcpy(qr, src + r * hd, (size_t)hd * sizeof(float));
        }
    }
}

void sl_cpu_qgate_merge(void *ctx, sl_tensor *dqall, const sl_tensor *dq, const sl_tensor *dg,
                        sl_gate_mode mode) {
    (void)ctx;
    const bool gated = mode != SL_GATE_NONE;
    check_f32("qgate_merge", dqall, dq, gated ? dg : NULL);
    const int64_t t = dq->shape[0], h = dq->shape[1], d = dq->shape[2];
    const int64_t hd = h * d;
    const float *pq = sl_f32(dq), *pg = gated ? sl_f32(dg) : NULL;
    float *dst = sl_f32(dqall);
    const size_t row = (size_t)d * sizeof(float);
#pragma omp parallel for if (t > 64)
    for (int64_t r = 0; r < t; r++) {
        const float *qr = pq + r * hd;
        if (mode == SL_GATE_ELEMENTWISE) {
            float *a = dst + r * 2 * hd;
            const float *gr = pg + r * hd;
            for (int64_t j = 0; j < h; j++) {
                memcpy(a + j * 2 * d, qr + j * d, row);
                memcpy(a + j * 2 * d + d, gr + j * d, row);
            }
        } else if (mode == SL_GATE_HEADWISE) {
            float *a = dst + r * (hd + h);
            memcpy(a, qr, (size_t)hd * sizeof(float));
            memcpy(a + hd, pg + r * h, (size_t)h * sizeof(float));
        } else {
            memcpy(dst + r * hd, qr, (size_t)hd * sizeof(float));
        }
    }
}
