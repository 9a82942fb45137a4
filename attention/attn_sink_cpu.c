/*
 * attention/attn_sink_cpu.c - the first token's attention share (sl_op_attn_sink_share, the
 * paper's "attention sink" diagnostic) on the CPU; CUDA twin: attention/attn_sink.cu.
 *
 * The fused attention keeps no probabilities, only each row's log-sum-exp, so the weight of key
 * 0 in row (b, i, h) is recomputed from one dot product: p = exp(scale q_i . k_0 - lse_i). The
 * rows are independent; each is summed in double, and the rows' sum in a fixed static
 * partition, so the result does not change between runs with the same thread count.
 */
#include <math.h>

#include "attention/kernels_cpu.h"
#include "core/log.h"

void sl_cpu_attn_sink_share(void *ctx, sl_tensor *out, const sl_tensor *q, const sl_tensor *k,
                            const sl_tensor *lse, int batch, int seq, float scale) {
    (void)ctx;
    SL_CHECK(q->dtype == SL_F32 && k->dtype == SL_F32,
             "cpu attn_sink_share: only f32 is supported");
    const int64_t h = q->shape[1], kv = k->shape[1], d = q->shape[2], grp = h / kv;
    const float *pq = sl_f32(q), *pk = sl_f32(k), *pl = sl_f32(lse);
    const int64_t queries = (int64_t)batch * (seq - 1) * h; /* rows i >= 1 */
    if (seq < 2 || queries <= 0) {
        sl_f32(out)[0] = 0.0f;
        return;
    }
    double acc = 0.0;
#pragma omp parallel for reduction(+ : acc) schedule(static) if (queries > 4096)
    for (int64_t r = 0; r < queries; r++) {
        const int64_t hh = r % h, i = 1 + r / h % (seq - 1), b = r / h / (seq - 1);
        const int64_t row = (b * seq + i) * h + hh; /* token (b, i), head hh */
        const float *qr = pq + row * d, *k0 = pk + (b * seq * kv + hh / grp) * d;
        double dot = 0.0;
        for (int64_t e = 0; e < d; e++) dot += (double)qr[e] * k0[e];
        acc += exp((double)scale * dot - (double)pl[row]);
    }
    sl_f32(out)[0] = (float)(acc / (double)queries);
}
