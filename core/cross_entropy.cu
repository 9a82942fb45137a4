/*
 * core/cross_entropy.cu - fused softmax cross-entropy on the GPU (CPU twin:
 * core/cross_entropy_cpu.c; semantics: core/ops.h). logits and dlogits share the dtype T (and
 * may be the same tensor: the gradient is written in place); losses are fp32.
 *
 * One block per row (vocabulary up to 151,936), two passes over the row and nothing but the
 * row itself in memory (no fp32 copy of the logits):
 *   1. an online logsumexp: each thread keeps a running (max m, sum s of exp(x - m)) over its
 *      packs of 8 elements (one rescale per pack whose max is new), then the block combines
 *      the pairs in a fixed order (lanes, then warps): lse = m + log(s);
 *   2. with dlogits, each thread rewrites its own packs as (exp(x - lse) - onehot) grad_scale.
 * Every element is read (pass 1 and 2) and then written by the same thread, and the target's
 * logit, needed for the loss, is read before the block's first barrier, so dlogits may alias
 * logits. A row whose target is < 0 gets loss 0 and a zero gradient without being read; a
 * target >= V (which stops the CPU) gives a NaN loss and a NaN gradient row.
 *
 * Pass 2 reads the LM head's rows (151,936 bf16 logits, 297 KiB) from DRAM again: with several
 * blocks per SM more rows are in flight than the L2 holds. A form that kept each row's first
 * 226 KiB in shared memory between the passes (one block per SM, four packs loaded per thread
 * before use; 2026-11-28, sixteenth session) moved a third fewer bytes but measured slower on an
 * H200 (2026-11-28): the LM head's row rose by 0.37 ms per 4,096 rows at 4 x 1 x 4096 and 0.41
 * at 1 x 8 x 4096 with its GEMMs unchanged, the kernel 1.15 ms per 4,096 rows, about 2.2 TB/s:
 * one block of 16 warps per SM kept too few loads in flight. This is the form measured before
 * it (docs/performance.md, "Measured on an H200 (2026-11-28)"); the bits are the same.
 */
#include "core/cuda_pack.cuh"
#include "core/kernels_cuda.h"
#include "core/log.h"

namespace {

constexpr int kMaxThreads = 512;

/* (m, s) <- the logsumexp pair of the union of (m, s) and (m2, s2). m = -inf: empty. */
__device__ __forceinline__ void lse_merge(float &m, float &s, float m2, float s2) {
    if (m2 == -INFINITY) return;
    if (m == -INFINITY) {
        m = m2, s = s2;
        return;
    }
    const float mx = fmaxf(m, m2);
    s = s * expf(m - mx) + s2 * expf(m2 - mx);
    m = mx;
}

template <typename T, int VEC>
__global__ void __launch_bounds__(kMaxThreads)
    k_xent(float *losses, T *dlogits, const T *logits, const int32_t *targets, int64_t v,
           float grad_scale) {
    __shared__ float sm[32], ss[32];
    const int64_t row = blockIdx.x;
    const int32_t t = targets[row];
    const T *l = logits + row * v;
    T *d = dlogits ? dlogits + row * v : NULL;
    const int64_t npk = v / VEC;
    if (t < 0 || t >= v) { /* uniform over the block: no barrier is skipped by some threads */
        const float fill = t < 0 ? 0.0f : NAN;
        if (threadIdx.x == 0) losses[row] = fill;
        if (d) {
            float z[VEC];
            SL_UNROLL
            for (int e = 0; e < VEC; e++) z[e] = fill;
            for (int64_t p = threadIdx.x; p < npk; p += blockDim.x) sl_stv<VEC>(d + p * VEC, z);
        }
        return;
    }
    const float lt = threadIdx.x == 0 ? sl_ld(l[t]) : 0.0f; /* before anything is written */

    float m = -INFINITY, s = 0.0f;
    for (int64_t p = threadIdx.x; p < npk; p += blockDim.x) {
        float x[VEC];
        sl_ldv<VEC>(l + p * VEC, x);
        float pm = x[0];
        SL_UNROLL
        for (int e = 1; e < VEC; e++) pm = fmaxf(pm, x[e]);
        if (pm > m) {
            s *= expf(m - pm); /* 0 while m = -inf and s = 0 */
            m = pm;
        }
        if (m != -INFINITY) { /* else every logit so far is -inf: nothing to add */
            SL_UNROLL
            for (int e = 0; e < VEC; e++) s += expf(x[e] - m);
        }
    }
    /* Combine: lanes by butterfly (every lane ends with the warp's pair), then warps in order. */
    for (int o = 16; o > 0; o >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, o);
        const float s2 = __shfl_xor_sync(0xffffffffu, s, o);
        lse_merge(m, s, m2, s2);
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    if (lane == 0) sm[warp] = m, ss[warp] = s;
    __syncthreads();
    m = sm[0], s = ss[0];
    for (int w = 1; w < nwarps; w++) lse_merge(m, s, sm[w], ss[w]);
    const float lse = m + logf(s);
    if (threadIdx.x == 0) losses[row] = lse - lt;
    if (!d) return;
    for (int64_t p = threadIdx.x; p < npk; p += blockDim.x) {
        float x[VEC];
        sl_ldv<VEC>(l + p * VEC, x);
        SL_UNROLL
        for (int e = 0; e < VEC; e++) {
            x[e] = expf(x[e] - lse) * grad_scale;
            if (p * VEC + e == t) x[e] -= grad_scale;
        }
        sl_stv<VEC>(d + p * VEC, x);
    }
}

template <typename T, int VEC>
void xent_launch(void *ctx, float *losses, T *dlogits, const T *logits, const int32_t *targets,
                 int64_t n, int64_t v, float grad_scale) {
    /* Threads: one per pack up to kMaxThreads (whole warps), so short rows use small blocks. */
    const int64_t npk = v / VEC;
    int threads = (int)(npk < kMaxThreads ? (npk + 31) / 32 * 32 : kMaxThreads);
    if (threads < 32) threads = 32;
    auto *const xent_kernel = k_xent<T, VEC>;
    SL_LAUNCH(xent_kernel, (unsigned)n, threads, 0, sl_cuda_stream(ctx), losses, dlogits, logits,
              targets, v, grad_scale);
    SL_CUDA_LAUNCHED("cross_entropy");
}

} // namespace

extern "C" void sl_cuda_cross_entropy(void *ctx, sl_tensor *losses, sl_tensor *dlogits,
                                      const sl_tensor *logits, const sl_tensor *targets,
                                      float grad_scale) {
    const int64_t n = sl_rows(logits), v = sl_last_dim(logits);
    SL_CHECK(n <= INT32_MAX, "cross_entropy: %lld rows", (long long)n);
    if (n == 0) return;
    float *pl = sl_ptr<float>(losses);
    const int32_t *pt = sl_ptr<int32_t>(targets);
    SL_DISPATCH_FLOAT(logits->dtype, T, {
        T *pd = sl_ptr<T>(dlogits);
        const T *px = sl_ptr<T>(logits);
        if (v % SL_PACK == 0 && sl_aligned16(px) && sl_aligned16(pd))
            xent_launch<T, SL_PACK>(ctx, pl, pd, px, pt, n, v, grad_scale);
        else
            xent_launch<T, 1>(ctx, pl, pd, px, pt, n, v, grad_scale);
    });
}
