/*
 * attention/decode.cu - decoding with a KV cache on CUDA: the new keys and values written into the
 * cache, and the gated attention of the new queries against it. CPU twins and layouts:
 * attention/decode_cpu.c; semantics: core/ops.h.
 *
 * kv_cache_write: one thread per element of the new rows (grid-stride), each copying one value
 * to its cache position; rows past the cache's length are skipped.
 *
 * gated_attn_decode: one block of kThreads per (query row, head). The query is staged in shared
 * memory as fp32; the keys up to the query's position stream in chunks of kThreads: each warp
 * takes every kWarps-th key of the chunk and its lanes stride over the head dim (coalesced),
 * a warp sum giving the logit. The chunk's max and sum are block reductions and the output
 * follows the online softmax (O = O e^(m - m') + P V, l = l e^(m - m') + rowsum P), each thread
 * owning the head-dim columns tid, tid + kThreads, ... (coalesced loads of V, at most
 * kMaxD / kThreads of them in registers). At the end y = O / l * sigmoid(g). Arithmetic is fp32
 * for fp32 and bf16 operands. Decoding reads the whole cache once per new token, so the kernel is
 * bound by memory traffic, not by the arithmetic it shares no tile for.
 */
#include "attention/kernels_cuda.h"
#include "core/cuda_common.cuh"
#include "core/log.h"

namespace {

constexpr int kThreads = 128, kWarps = kThreads / 32, kMaxD = 512, kCols = kMaxD / kThreads;

template <typename T>
__global__ void k_cache_write(T *cache, const T *x, const int32_t *start, int n, int64_t len,
                              int64_t row, int64_t total) {
    for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = idx / row, e = idx - r * row, b = r / n, i = r - b * n;
        const int64_t p = (int64_t)start[b] + i;
        if (p < len) cache[(b * len + p) * row + e] = x[idx];
    }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    k_attn_decode(T *y, const T *q, const T *kc, const T *vc, const T *g, int gate,
                  const int32_t *start, int n, int h, int kv, int d, int64_t len, float scale) {
    __shared__ float sq[kMaxD], sp[kThreads], red[32];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int64_t r = blockIdx.x, hh = blockIdx.y, b = r / n, i = r - b * n;
    int64_t last = (int64_t)start[b] + i; /* keys 0 .. last are visible */
    if (last > len - 1) last = len - 1;
    const int64_t ld = (int64_t)kv * d, kvh = hh / (h / kv);
    const T *qr = q + (r * h + hh) * d;
    const T *kb = kc + b * len * ld + kvh * d, *vb = vc + b * len * ld + kvh * d;
    for (int e = tid; e < d; e += kThreads) sq[e] = sl_ld(qr[e]);
    __syncthreads();
    float o[kCols], m = -INFINITY, l = 0.0f;
    SL_UNROLL
    for (int c = 0; c < kCols; c++) o[c] = 0.0f;
    for (int64_t j0 = 0; j0 <= last; j0 += kThreads) {
        const int nk = (int)(last + 1 - j0 < kThreads ? last + 1 - j0 : kThreads);
        for (int c = warp; c < nk; c += kWarps) {
            const T *kr = kb + (j0 + c) * ld;
            float dot = 0.0f;
            for (int e = lane; e < d; e += 32) dot += sq[e] * sl_ld(kr[e]);
            dot = sl_warp_sum(dot);
            if (lane == 0) sp[c] = scale * dot;
        }
        __syncthreads();
        const float s = tid < nk ? sp[tid] : -INFINITY;
        const float mnew = fmaxf(m, sl_block_max(s, red));
        const float p = tid < nk ? expf(s - mnew) : 0.0f;
        const float alpha = expf(m - mnew); /* 0 on the first chunk */
        l = l * alpha + sl_block_sum(p, red);
        sp[tid] = p; /* every thread read its logit before the reductions' barriers */
        __syncthreads();
        SL_UNROLL
        for (int c = 0; c < kCols; c++) {
            const int e = tid + c * kThreads;
            if (e >= d) break;
            float acc = o[c] * alpha;
            for (int k = 0; k < nk; k++) acc += sp[k] * sl_ld(vb[(j0 + k) * ld + e]);
            o[c] = acc;
        }
        m = mnew;
        __syncthreads(); /* sp is rewritten by the next chunk */
    }
    const float inv = 1.0f / l;
    T *yr = y + (r * h + hh) * d;
    SL_UNROLL
    for (int c = 0; c < kCols; c++) {
        const int e = tid + c * kThreads;
        if (e >= d) break;
        float sgate = 1.0f;
        if (gate == 2) sgate = 1.0f / (1.0f + expf(-sl_ld(g[(r * h + hh) * d + e])));
        if (gate == 1) sgate = 1.0f / (1.0f + expf(-sl_ld(g[r * h + hh])));
        yr[e] = sl_st<T>(o[c] * inv * sgate);
    }
}

} // namespace

extern "C" void sl_cuda_kv_cache_write(void *ctx, sl_tensor *cache, const sl_tensor *x,
                                       const sl_tensor *start, int batch, int n) {
    const int64_t len = cache->shape[1], row = cache->shape[2] * cache->shape[3];
    const int64_t total = (int64_t)batch * n * row;
    if (total == 0) return;
    const unsigned grid = sl_blocks(total < ((int64_t)1 << 26) ? total : ((int64_t)1 << 26), 256);
    SL_DISPATCH_FLOAT(cache->dtype, T, {
        SL_LAUNCH(k_cache_write<T>, dim3(grid), dim3(256), 0, sl_cuda_stream(ctx), sl_ptr<T>(cache),
                  sl_ptr<T>(x), sl_ptr<int32_t>(start), n, len, row, total);
    });
    SL_CUDA_LAUNCHED("kv_cache_write");
}

extern "C" void sl_cuda_gated_attn_decode(void *ctx, sl_tensor *y, const sl_tensor *q,
                                          const sl_tensor *kc, const sl_tensor *vc,
                                          const sl_tensor *g, const sl_tensor *start, int batch,
                                          int n, float scale) {
    const int h = (int)q->shape[1], d = (int)q->shape[2], kv = (int)kc->shape[2];
    SL_CHECK(d <= kMaxD, "gated_attn_decode: head dim %d exceeds the CUDA kernel's %d", d, kMaxD);
    const int gate = !g ? 0 : g->numel == q->numel ? 2 : 1;
    const int64_t rows = (int64_t)batch * n;
    SL_CHECK(rows < (1ll << 31) && h < 65536, "gated_attn_decode: %lld rows x %d heads too many",
             (long long)rows, h);
    SL_DISPATCH_FLOAT(q->dtype, T, {
        SL_LAUNCH(k_attn_decode<T>, dim3((unsigned)rows, (unsigned)h), dim3(kThreads), 0,
                  sl_cuda_stream(ctx), sl_ptr<T>(y), sl_ptr<T>(q), sl_ptr<T>(kc), sl_ptr<T>(vc),
                  sl_ptr<T>(g), gate, sl_ptr<int32_t>(start), n, h, kv, d, kc->shape[1], scale);
    });
    SL_CUDA_LAUNCHED("gated_attn_decode");
}
