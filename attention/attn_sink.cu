/*
 * attention/attn_sink.cu - the first token's attention share (sl_op_attn_sink_share, the paper's
 * "attention sink" diagnostic) on CUDA. CPU twin: attention/attn_sink_cpu.c; semantics:
 * core/ops.h.
 *
 * p(i, 0) = exp(scale q_i . k_0 - lse_i) for every query row (b, i >= 1, h), averaged. Pass 1: one
 * warp per row at a time (grid-stride over rows): the lanes read the row's q and key 0 of its kv
 * head in strides of 32 (coalesced), the dot product is a warp sum in fp32 (operands bf16 or
 * fp32), lane 0 adds exp(...) to its double; each block sums its threads in a fixed tree into
 * part[block]. Pass 2, one block, sums the partials in a fixed order and divides. The grid depends
 * only on the number of rows, so the result is the same on every GPU, run after run. A diagnostic
 * run once per layer in evaluation: simplicity over speed.
 */
#include "attention/kernels_cuda.h"
#include "core/cuda_pack.cuh"

namespace {

constexpr int kThreads = 256, kWarps = kThreads / 32, kMaxParts = 1024;

template <typename T>
__global__ void __launch_bounds__(kThreads)
    k_sink_partial(double *part, const T *q, const T *k, const float *lse, int seq, int h, int kv,
                   int d, int64_t rows, float scale) {
    __shared__ double sh[kThreads];
    const int lane = threadIdx.x & 31, grp = h / kv;
    const int64_t warp = (int64_t)blockIdx.x * kWarps + (threadIdx.x >> 5);
    const int64_t nwarps = (int64_t)gridDim.x * kWarps;
    double acc = 0.0;
    for (int64_t r = warp; r < rows; r += nwarps) { /* r enumerates (b, i - 1, head) */
        const int64_t hh = r % h, i = 1 + r / h % (seq - 1), b = r / h / (seq - 1);
        const int64_t row = (b * seq + i) * h + hh;
        const T *qr = q + row * d, *k0 = k + ((int64_t)b * seq * kv + hh / grp) * d;
        float dot = 0.0f;
        for (int e = lane; e < d; e += 32) dot += sl_ld(qr[e]) * sl_ld(k0[e]);
        dot = sl_warp_sum(dot);
        if (lane == 0) acc += exp((double)scale * (double)dot - (double)lse[row]);
    }
    acc = sl_block_sum_f64(acc, sh);
    if (threadIdx.x == 0) part[blockIdx.x] = acc;
}

__global__ void __launch_bounds__(kThreads)
    k_sink_final(float *out, const double *part, int nparts, int64_t rows) {
    __shared__ double sh[kThreads];
    double acc = 0.0;
    for (int i = threadIdx.x; i < nparts; i += kThreads) acc += part[i];
    acc = sl_block_sum_f64(acc, sh);
    if (threadIdx.x == 0) out[0] = rows > 0 ? (float)(acc / (double)rows) : 0.0f;
}

} // namespace

extern "C" void sl_cuda_attn_sink_share(void *ctx, sl_tensor *out, const sl_tensor *q,
                                        const sl_tensor *k, const sl_tensor *lse, int batch,
                                        int seq, float scale) {
    const int h = (int)q->shape[1], kv = (int)k->shape[1], d = (int)q->shape[2];
    const int64_t rows = seq < 2 ? 0 : (int64_t)batch * (seq - 1) * h;
    cudaStream_t stream = sl_cuda_stream(ctx);
    const int64_t want = (rows + kWarps - 1) / kWarps;
    const int nparts = (int)(want < kMaxParts ? want : kMaxParts);
    double *part =
        (double *)sl_cuda_scratch(ctx, 0, sizeof(double) * (size_t)(nparts ? nparts : 1));
    if (nparts > 0) {
        SL_DISPATCH_FLOAT(q->dtype, T, {
            const T *pq = sl_ptr<T>(q), *pk = sl_ptr<T>(k);
            SL_LAUNCH(k_sink_partial<T>, dim3((unsigned)nparts), dim3(kThreads), 0, stream, part,
                      pq, pk, sl_ptr<float>(lse), seq, h, kv, d, rows, scale);
        });
        SL_CUDA_LAUNCHED("attn_sink_share");
    }
    const double *cpart = part;
    SL_LAUNCH(k_sink_final, dim3(1), dim3(kThreads), 0, stream, sl_ptr<float>(out), cpart, nparts,
              rows);
    SL_CUDA_LAUNCHED("attn_sink_share");
}
