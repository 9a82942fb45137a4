/*
 * trainer/adamw.cu - decoupled AdamW on the GPU (CPU twin: trainer/adamw_cpu.c, whose
 * arithmetic this follows step for step; semantics: core/ops.h).
 *
 *   g' = g * grad_scale;  m = b1 m + (1-b1) g';  v = b2 v + (1-b2) g'^2
 *   p -= lr * ( (m / (1-b1^t)) / (sqrt(v) / sqrt(1-b2^t) + eps) + wd * p )
 *
 * p, g, m, v are fp32; the optional p_copy (fp32 or bf16, the compute copy of bf16 training)
 * receives the updated p in the same pass, so the copy costs no extra read of p. One grid-
 * stride loop, each thread taking packs of 8 elements of every operand (16-byte accesses) when
 * all pointers are aligned, then the tail element by element. The bias corrections are
 * computed on the host exactly as the CPU does (powf in fp32), so both backends use the same
 * constants.
 */
#include "core/cuda_pack.cuh"
#include "trainer/kernels_cuda.h"

namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 4096;

struct adamw_consts {
    float b1, b2, lr, wd, eps, gs, inv_bc1, inv_sqrt_bc2;
};

__device__ __forceinline__ void adamw_elem(float &p, float g, float &m, float &v,
                                           const adamw_consts &k) {
    const float gi = g * k.gs;
    const float mi = k.b1 * m + (1.0f - k.b1) * gi;
    const float vi = k.b2 * v + (1.0f - k.b2) * gi * gi;
    m = mi;
    v = vi;
    p -= k.lr * ((mi * k.inv_bc1) / (sqrtf(vi) * k.inv_sqrt_bc2 + k.eps) + k.wd * p);
}

template <typename TC>
__global__ void __launch_bounds__(kThreads) k_adamw(float *p, const float *g, float *m, float *v,
                                                    TC *copy, int64_t n, adamw_consts k, bool vec) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t npacks = vec ? n / SL_PACK : 0;
    for (int64_t q = tid; q < npacks; q += stride) {
        const int64_t i = q * SL_PACK;
        float pv[SL_PACK], gv[SL_PACK], mv[SL_PACK], vv[SL_PACK];
        sl_ld8(p + i, pv);
        sl_ld8(g + i, gv);
        sl_ld8(m + i, mv);
        sl_ld8(v + i, vv);
        SL_UNROLL
        for (int e = 0; e < SL_PACK; e++) adamw_elem(pv[e], gv[e], mv[e], vv[e], k);
        sl_st8(p + i, pv);
        sl_st8(m + i, mv);
        sl_st8(v + i, vv);
        if (copy) sl_st8(copy + i, pv);
    }
    for (int64_t i = npacks * SL_PACK + tid; i < n; i += stride) {
        float pi = p[i], mi = m[i], vi = v[i];
        adamw_elem(pi, g[i], mi, vi, k);
        p[i] = pi, m[i] = mi, v[i] = vi;
        if (copy) copy[i] = sl_st<TC>(pi);
    }
}

template <typename TC>
void adamw_launch(void *ctx, float *p, const float *g, float *m, float *v, TC *copy, int64_t n,
                  const adamw_consts &k) {
    const bool vec = sl_aligned16(p) && sl_aligned16(g) && sl_aligned16(m) && sl_aligned16(v) &&
                     sl_aligned16(copy);
    int64_t blocks = sl_blocks(vec ? n / SL_PACK + n % SL_PACK : n, kThreads);
    if (blocks > kMaxBlocks) blocks = kMaxBlocks;
    auto *const adamw_kernel = k_adamw<TC>;
    SL_LAUNCH(adamw_kernel, (unsigned)blocks, kThreads, 0, sl_cuda_stream(ctx), p, g, m, v, copy, n,
              k, vec);
    SL_CUDA_LAUNCHED("adamw");
}

} // namespace

extern "C" void sl_cuda_adamw(void *ctx, sl_tensor *p, const sl_tensor *g, sl_tensor *m,
                              sl_tensor *v, sl_tensor *p_copy, const sl_adamw_params *hp) {
    const int64_t n = p->numel;
    if (n == 0) return;
    const float bc1 = 1.0f - powf(hp->beta1, (float)hp->step);
    const float bc2 = 1.0f - powf(hp->beta2, (float)hp->step);
    const adamw_consts k = {hp->beta1, hp->beta2,      hp->lr,     hp->weight_decay,
                            hp->eps,   hp->grad_scale, 1.0f / bc1, 1.0f / sqrtf(bc2)};
    float *pp = sl_ptr<float>(p), *pm = sl_ptr<float>(m), *pv = sl_ptr<float>(v);
    const float *pg = sl_ptr<float>(g);
    /* A copy that is p itself needs no writing. */
    if (!p_copy || p_copy->data == p->data) {
        float *none = NULL;
        adamw_launch(ctx, pp, pg, pm, pv, none, n, k);
        return;
    }
    SL_DISPATCH_FLOAT(p_copy->dtype, TC,
                      adamw_launch(ctx, pp, pg, pm, pv, sl_ptr<TC>(p_copy), n, k));
}
