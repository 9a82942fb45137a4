/*
 * attention/gated_attn.cuh - what the gated-attention kernels share (gated_attn_fwd.cu,
 * gated_attn_bwd.cu): arguments, the tile geometry, shared-memory tile loads and the register-
 * blocked tile product. CUDA C++ only; the design is described in gated_attn_fwd.cu.
 */
#ifndef SL_GATED_ATTN_CUH
#define SL_GATED_ATTN_CUH

#include "core/cuda_common.cuh"

namespace sl_attn {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.69314718055994531f;

/* Every kernel runs 64 threads seen as an 8 x 8 grid (tr = tid / 8, tc = tid % 8) over each tile
 * product: thread (tr, tc) owns output rows tr + 8x and columns tc + 8y. The 8 threads of a row
 * group are 8 consecutive lanes of one warp, so row reductions are 3 shuffles. */
constexpr int kThreads = 64;

/* Head-dim chunk: the tiles hold DP columns; D > DP is processed in ceil(D / DP) chunks. */
inline int pick_dp(int64_t d) {
    return d <= 32 ? 32 : d <= 64 ? 64 : 128;
}

template <typename T> struct args {
    const T *q, *k, *v, *g, *dy, *o;
    T *y, *ow, *dq, *dk, *dv;
    const float *lse, *di;
    const int *seg; /* [T] document start of each query (core/ops.h), or nullptr: causal */
    float *lsew;
    int batch, seq, h, kv, d, grp;
    int gate; /* 0 none, 1 headwise, 2 elementwise (as the CPU twin) */
    int nch;  /* head-dim chunks: ceil(d / DP) */
    float scale;
};

/* Where a query-tile block works (the forward and the dQ pass share the grid): blockIdx.x
 * enumerates (query tile, sequence b, head h, head-dim chunk), latest query tiles first so the
 * longest causal rows start first. Rows [i0, i0 + nq) of sequence b are the tile's queries;
 * keys run to kend; qb/kb/vb point at the tile's first query row and the sequence's first
 * key/value row of head h's kv head; c2 folds the softmax scale into the base-2 exponent;
 * resident: the whole head fits one chunk, so Q stays in shared memory. */
template <typename T> struct qtile {
    int qt, chunk, h, kvh, c_out, i0, nq, kend;
    int64_t b, tok0, ldq, ldk;
    const T *qb, *kb, *vb;
    float c2;
    bool resident;
};

template <typename T, int B, int DP>
__device__ __forceinline__ qtile<T> locate_qtile(const args<T> &a) {
    qtile<T> t;
    const int nqt = (a.seq + B - 1) / B;
    const int64_t per_tile = (int64_t)a.batch * a.h * a.nch;
    t.qt = nqt - 1 - (int)(blockIdx.x / per_tile);
    const int64_t rem = blockIdx.x % per_tile;
    t.chunk = (int)(rem % a.nch);
    t.h = (int)(rem / a.nch % a.h);
    t.b = rem / a.nch / a.h;
    t.kvh = t.h / a.grp;
    t.c_out = t.chunk * DP;
    t.i0 = t.qt * B;
    t.nq = a.seq - t.i0 < B ? a.seq - t.i0 : B;
    t.kend = t.i0 + t.nq;
    t.tok0 = t.b * a.seq;
    t.ldq = (int64_t)a.h * a.d;
    t.ldk = (int64_t)a.kv * a.d;
    t.qb = a.q + ((t.tok0 + t.i0) * a.h + t.h) * a.d;
    t.kb = a.k + (t.tok0 * a.kv + t.kvh) * a.d;
    t.vb = a.v + (t.tok0 * a.kv + t.kvh) * a.d;
    t.c2 = a.scale * kLog2e;
    t.resident = a.nch == 1;
    return t;
}

/* The first key tile (of B keys) a query tile starting at i0 of the sequence at token tok0
 * needs: the tile holding its first row's document start (seg does not decrease along a
 * sequence); 0 without documents (seg null). Shared with the tensor-core kernels. */
template <int B>
__device__ __forceinline__ int first_key_tile(const int *seg, int64_t tok0, int i0) {
    return seg ? seg[tok0 + i0] / B * B : 0;
}

__device__ __forceinline__ float sigmoid(float x) {
    return 1.0f / (1.0f + expf(-x));
}

/* s[R][DP + 1] <- rows [0, R) x columns [0, DP) of a row-major source (row r at src + r * ld),
 * as fp32, zero where r >= nrows or c >= ncols. Consecutive threads read consecutive columns. */
template <int R, int DP, typename T>
__device__ __forceinline__ void load_tile(float *s, const T *src, int64_t ld, int nrows,
                                          int ncols) {
    for (int idx = threadIdx.x; idx < R * DP; idx += kThreads) {
        const int r = idx / DP, c = idx % DP;
        s[r * (DP + 1) + c] = r < nrows && c < ncols ? sl_ld(src[r * ld + c]) : 0.0f;
    }
}

/* The pre-gate output gradient dO = dy * sigmoid(g) for rows [tok, tok + nrows) of head h,
 * columns [c0, c0 + DP), computed as it is loaded (never stored). */
template <int R, int DP, typename T>
__device__ __forceinline__ void load_do_tile(float *s, const args<T> &a, int64_t tok, int h,
                                             int nrows, int c0) {
    for (int idx = threadIdx.x; idx < R * DP; idx += kThreads) {
        const int r = idx / DP, c = idx % DP;
        float v = 0.0f;
        if (r < nrows && c0 + c < a.d) {
            const int64_t row = (tok + r) * a.h + h, e = row * a.d + c0 + c;
            v = sl_ld(a.dy[e]);
            if (a.gate == 2)
                v *= sigmoid(sl_ld(a.g[e]));
            else if (a.gate == 1)
                v *= sigmoid(sl_ld(a.g[row]));
        }
        s[r * (DP + 1) + c] = v;
    }
}

/* acc[x][y] += sum_{p < NP} A(x, p) B(y, p) with A(x, p) = a[x * AI + p * AP] and
 * B(y, p) = b[y * BJ + p * BP] (shared memory, a and b already offset to the thread's first
 * row and column). The strides express transposes, so one routine serves every product. */
template <int RM, int RN, int NP, int AI, int AP, int BJ, int BP>
__device__ __forceinline__ void tile_mma(float (&acc)[RM][RN], const float *a, const float *b) {
#ifndef SLUICE_CUDA_EMULATED
#pragma unroll 4
#endif
    for (int p = 0; p < NP; p++) {
        float av[RM], bv[RN];
        SL_UNROLL
        for (int x = 0; x < RM; x++) av[x] = a[x * AI + p * AP];
        SL_UNROLL
        for (int y = 0; y < RN; y++) bv[y] = b[y * BJ + p * BP];
        SL_UNROLL
        for (int x = 0; x < RM; x++) {
            SL_UNROLL
            for (int y = 0; y < RN; y++) acc[x][y] = fmaf(av[x], bv[y], acc[x][y]);
        }
    }
}

template <int RM, int RN> __device__ __forceinline__ void zero(float (&acc)[RM][RN]) {
    SL_UNROLL
    for (int x = 0; x < RM; x++) {
        SL_UNROLL
        for (int y = 0; y < RN; y++) acc[x][y] = 0.0f;
    }
}

/* Max / sum over the 8 lanes of a row group (lanes 8k .. 8k + 7). */
__device__ __forceinline__ float group_max(float v) {
    for (int o = 1; o < 8; o <<= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ __forceinline__ float group_sum(float v) {
    for (int o = 1; o < 8; o <<= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

} // namespace sl_attn

#endif
