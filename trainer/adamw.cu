/*
 * trainer/adamw.cu - decoupled AdamW on the GPU (CPU twin: trainer/adamw_cpu.c, whose
 * arithmetic this follows step for step; semantics: core/ops.h).
 *
 *   g' = g * grad_scale;  m = b1 m + (1-b1) g';  v = b2 v + (1-b2) g'^2
 *   p -= lr * ( (m / (1-b1^t)) / (sqrt(v) / sqrt(1-b2^t) + eps) + wd * p )
 *
 * p, g, m, v are fp32; the optional p_copy (fp32 or bf16, the compute copy of bf16 training)
 * receives the updated p in the same pass, so the copy costs no extra read of p: 30 bytes per
 * parameter in bf16 training, the step's largest stream (189 GB for 6.3B parameters).
 *
 * Forms (SLUICE_ADAMW, read once; every form computes the same values, bitwise): "coalesced"
 * (the default), a persistent grid (the blocks that fit on the device at once) whose threads
 * take 16-byte units one grid stride apart, two per operand and iteration, so that each access
 * instruction of a warp reads 512 contiguous bytes, then the tail element by element; "plain",
 * the form before it: a grid-stride loop of at most 4,096 blocks, each thread taking packs of 8
 * elements (two 16-byte accesses 32 bytes apart); "stream", "coalesced" with the
 * cache-streaming hints (ld.global.cs, st.global.cs); "wide", "stream" with four units per
 * operand and iteration. Measured on an H200 (2026-11-26, gpu_train_bench --profile, 15A2B cut
 * to 9 layers, 6.3B parameters, one run each in one call): the optimizer row 60.2 ms per step
 * with plain (3.14 TB/s of its 189 GB), 54.0 coalesced (3.50 TB/s), 54.5 wide, 55.1 stream.
 * "streams" (bench/adamw_bench.c only: sl_cuda_adamw_set_form, never SLUICE_ADAMW) is "coalesced"
 * without the arithmetic, each store taking another operand's loaded value: what the memory
 * system gives AdamW's eight streams; its results are not AdamW's.
 * The bias corrections are computed on the host exactly as the CPU does (powf in
 * fp32), so both backends use the same constants.
 */
#include <cstdlib>
#include <cstring>

#include "core/backend_cuda.cuh"
#include "core/cuda_pack.cuh"
#include "core/env.h"
#include "core/log.h"
#include "trainer/kernels_cuda.h"

namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 4096;

struct adamw_consts {
    float b1, b2, lr, wd, eps, gs, inv_bc1, inv_sqrt_bc2;
};

/* One element, each operation rounded on its own in the CPU twin's order (no contraction into
 * fma): nvcc contracts a * b + c wherever it sees one, and how depends on the code around it,
 * so the forms' loops gave different bits on an H200 (2026-11-27, test_cuda_kernels) although
 * the emulator, whose host compiler contracts nothing here, agreed with itself. */
__device__ __forceinline__ void adamw_elem(float &p, float g, float &m, float &v,
                                           const adamw_consts &k) {
    const float gi = __fmul_rn(g, k.gs);
    const float mi = __fadd_rn(__fmul_rn(k.b1, m), __fmul_rn(__fsub_rn(1.0f, k.b1), gi));
    const float vi =
        __fadd_rn(__fmul_rn(k.b2, v), __fmul_rn(__fmul_rn(__fsub_rn(1.0f, k.b2), gi), gi));
    m = mi;
    v = vi;
    const float den = __fadd_rn(__fmul_rn(__fsqrt_rn(vi), k.inv_sqrt_bc2), k.eps);
    const float step = __fadd_rn(__fdiv_rn(__fmul_rn(mi, k.inv_bc1), den), __fmul_rn(k.wd, p));
    p = __fsub_rn(p, __fmul_rn(k.lr, step));
}

/* Elements i0, i0 + stride, ... below n one at a time: the unaligned case and the tails. */
template <typename TC>
__device__ __forceinline__ void adamw_elems(float *p, const float *g, float *m, float *v, TC *copy,
                                            int64_t i0, int64_t n, int64_t stride,
                                            const adamw_consts &k) {
    for (int64_t i = i0; i < n; i += stride) {
        float pi = p[i], mi = m[i], vi = v[i];
        adamw_elem(pi, g[i], mi, vi, k);
        p[i] = pi, m[i] = mi, v[i] = vi;
        if (copy) copy[i] = sl_st<TC>(pi);
    }
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
    adamw_elems(p, g, m, v, copy, npacks * SL_PACK + tid, n, stride, k);
}

/* ---- the coalesced forms: 16-byte units of 4 elements, U per operand and iteration -------- */

template <bool CS> __device__ __forceinline__ float4 ld4(const float *p) {
    SL_CHECK_ALIGNED(p, 16);
    if constexpr (CS)
        return __ldcs(reinterpret_cast<const float4 *>(p));
    else
        return *reinterpret_cast<const float4 *>(p);
}
template <bool CS> __device__ __forceinline__ void st4(float *p, float4 v) {
    SL_CHECK_ALIGNED(p, 16);
    if constexpr (CS)
        __stcs(reinterpret_cast<float4 *>(p), v);
    else
        *reinterpret_cast<float4 *>(p) = v;
}
template <bool CS> __device__ __forceinline__ void st4(sl_bf16 *p, float4 v) {
    sl_bf16 h[4] = {__float2bfloat16_rn(v.x), __float2bfloat16_rn(v.y), __float2bfloat16_rn(v.z),
                    __float2bfloat16_rn(v.w)};
    uint2 u;
    memcpy(&u, (const void *)h, sizeof u);
    SL_CHECK_ALIGNED(p, 8);
    if constexpr (CS)
        __stcs(reinterpret_cast<uint2 *>(p), u);
    else
        *reinterpret_cast<uint2 *>(p) = u;
}

__device__ __forceinline__ void adamw4(float4 &p, float4 g, float4 &m, float4 &v,
                                       const adamw_consts &k) {
    adamw_elem(p.x, g.x, m.x, v.x, k);
    adamw_elem(p.y, g.y, m.y, v.y, k);
    adamw_elem(p.z, g.z, m.z, v.z, k);
    adamw_elem(p.w, g.w, m.w, v.w, k);
}

/* Units base, base + stride, ... (U of them) per iteration: all loads first, then the math and
 * the stores; elements past the last whole unit go one per thread at the end. */
template <typename TC, bool CS, int U, bool MATH = true>
__global__ void __launch_bounds__(kThreads)
    k_adamw_units(float *p, const float *g, float *m, float *v, TC *copy, int64_t n,
                  adamw_consts k) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t units = n / 4;
    for (int64_t base = tid; base < units; base += U * stride) {
        float4 pv[U], gv[U], mv[U], vv[U];
        if constexpr (!MATH) /* g++ (the emulated build) sees the guarded loads as maybe unset */
            for (int u = 0; u < U; u++) pv[u] = gv[u] = mv[u] = vv[u] = make_float4(0, 0, 0, 0);
        SL_UNROLL
        for (int u = 0; u < U; u++) {
            const int64_t i = 4 * (base + u * stride);
            if (base + u * stride < units) {
                pv[u] = ld4<CS>(p + i), gv[u] = ld4<CS>(g + i);
                mv[u] = ld4<CS>(m + i), vv[u] = ld4<CS>(v + i);
            }
        }
        SL_UNROLL
        for (int u = 0; u < U; u++) {
            const int64_t i = 4 * (base + u * stride);
            if (base + u * stride < units) {
                if constexpr (MATH) {
                    adamw4(pv[u], gv[u], mv[u], vv[u], k);
                    st4<CS>(p + i, pv[u]), st4<CS>(m + i, mv[u]), st4<CS>(v + i, vv[u]);
                    if (copy) st4<CS>(copy + i, pv[u]);
                } else { /* "streams": p <- v, m <- g, v <- m, copy <- the old p: every load
                          * is stored (none is dead code), and no arithmetic */
                    st4<CS>(p + i, vv[u]), st4<CS>(m + i, gv[u]), st4<CS>(v + i, mv[u]);
                    if (copy) st4<CS>(copy + i, pv[u]);
                }
            }
        }
    }
    adamw_elems(p, g, m, v, copy, units * 4 + tid, n, stride, k);
}

enum adamw_form { FORM_COALESCED, FORM_PLAIN, FORM_STREAM, FORM_WIDE, FORM_STREAMS };
/* the first four: SLUICE_ADAMW's values; "streams" only through sl_cuda_adamw_set_form */
const char *const k_form_names[] = {"coalesced", "plain", "stream", "wide", "streams"};
int g_form = -1; /* unset: SLUICE_ADAMW at the first call */

int parse_form(const char *name) {
    for (int i = 0; i < 5; i++)
        if (!strcmp(name, k_form_names[i])) return i;
    return -1;
}

int form(void) {
    if (g_form < 0) {
        const int i = sl_env_choice("SLUICE_ADAMW", k_form_names, 4);
        g_form = i < 0 ? FORM_COALESCED : i;
    }
    return g_form;
}

/* The persistent grid of kernel K: as many blocks as fit on the device at once (per_sm, asked
 * once per kernel by the caller), at most one per 16-byte unit. */
template <typename K> int blocks_per_sm(K kernel) {
    int per_sm = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, (const void *)kernel, kThreads, 0) !=
            cudaSuccess ||
        per_sm < 1) {
        (void)cudaGetLastError();
        per_sm = 1;
    }
    return per_sm;
}

template <typename TC, bool CS, int U, bool MATH = true>
void adamw_units_launch(void *ctx, float *p, const float *g, float *m, float *v, TC *copy,
                        int64_t n, const adamw_consts &k) {
    auto *const kernel = k_adamw_units<TC, CS, U, MATH>;
    /* one occupancy query per kernel and process, not per parameter tensor and step: it sizes
     * the grid only (the loop strides over any grid), so devices of another kind in the same
     * process still compute right */
    static const int per_sm = blocks_per_sm(kernel);
    const int64_t resident = (int64_t)per_sm * sl_cuda_props(ctx)->multiProcessorCount;
    const int64_t need = sl_blocks(n / 4 > 0 ? n / 4 : 1, kThreads);
    SL_LAUNCH(kernel, (unsigned)(resident < need ? resident : need), kThreads, 0,
              sl_cuda_stream(ctx), p, g, m, v, copy, n, k);
    SL_CUDA_LAUNCHED("adamw");
}

template <typename TC>
void adamw_launch(void *ctx, float *p, const float *g, float *m, float *v, TC *copy, int64_t n,
                  const adamw_consts &k) {
    const bool vec = sl_aligned16(p) && sl_aligned16(g) && sl_aligned16(m) && sl_aligned16(v) &&
                     sl_aligned16(copy);
    /* the unit forms need 16-byte units of p, g, m, v and 8 bytes of a bf16 copy (aligned16
     * of the copy is stricter than needed, and true for every parameter slice sluice makes) */
    switch (vec ? form() : FORM_PLAIN) {
    case FORM_COALESCED:
        return adamw_units_launch<TC, false, 2>(ctx, p, g, m, v, copy, n, k);
    case FORM_STREAM:
        return adamw_units_launch<TC, true, 2>(ctx, p, g, m, v, copy, n, k);
    case FORM_WIDE:
        return adamw_units_launch<TC, true, 4>(ctx, p, g, m, v, copy, n, k);
    case FORM_STREAMS:
        return adamw_units_launch<TC, false, 2, false>(ctx, p, g, m, v, copy, n, k);
    default:
        break;
    }
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

extern "C" bool sl_cuda_adamw_set_form(const char *name) {
    const int f = name ? parse_form(name) : -1;
    if (f >= 0) g_form = f;
    return f >= 0;
}
