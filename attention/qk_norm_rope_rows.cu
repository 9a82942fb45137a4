/*
 * attention/qk_norm_rope_rows.cu - the fused QK-norm and RoPE's row path (core/ops.h,
 * sl_op_qk_norm_rope_fwd/_bwd; launched from qk_norm_rope.cu, whose element path serves the
 * other shapes): a head row across one warp, C = d / 32 columns per lane.
 *
 * Measured on an H200 (2026-11-27): the element path took 318 us per layer and
 * micro-batch for its 322 MB, about 1.0 TB/s. Its warps load a row two bytes per lane and
 * column, wait for the loads, then the norm's shuffles and the rotation's shared-memory row,
 * and only then the next row's loads: a few hundred bytes in flight per warp, where the
 * memory system needs about 18 KB per SM (3.5 TB/s over 132 SMs times about 0.7 us) to run at
 * speed. Here each lane holds C consecutive columns of a row in registers (one access per
 * operand: 8 bytes at head dim 128 in bf16), the rotation's partner columns come from the lane
 * half / C away by a shuffle (no shared row, no __syncwarp), the norm weights stay in
 * registers, and each warp loads kRowBatch head rows before it computes the first: 2 KB in
 * flight per warp in the forward (the queries and their gate), 2-3 KB in the backward.
 * Blocks own chunks of kChunk tokens (the rotation coefficients computed by the whole block
 * once per chunk); the backward's blocks own runs of tokens as the element path's, so its
 * partial rows and their summation order depend only on T (docs/performance.md, "The queries'
 * and keys' norm and rotation with rows in flight"). */
#include <initializer_list>

#include "attention/qk_norm_rope.cuh"
#include "core/cuda_pack.cuh"

namespace sl_qk {
namespace {

constexpr int kRowWarps = 8;
constexpr int kRowBatch = 4; /* head rows a warp loads before it computes the first */

/* C consecutive elements at p as fp32, in accesses of up to 16 bytes (p aligned to their
 * size: rows_aligned checks the operands). */
template <int C, typename T> __device__ __forceinline__ void ld_cols(const T *p, float (&v)[C]) {
    constexpr int kBytes = C * (int)sizeof(T);
    SL_CHECK_ALIGNED(p, kBytes >= 16 ? 16 : kBytes);
    T h[C];
    if constexpr (kBytes >= 16) {
        uint4 u[kBytes / 16];
        SL_UNROLL
        for (int i = 0; i < kBytes / 16; i++) u[i] = reinterpret_cast<const uint4 *>(p)[i];
        memcpy((void *)h, u, kBytes);
    } else if constexpr (kBytes == 8) {
        const uint2 u = *reinterpret_cast<const uint2 *>(p);
        memcpy((void *)h, &u, kBytes);
    } else {
        static_assert(kBytes == 4, "2 to 8 columns of bf16 or fp32");
        const unsigned u = *reinterpret_cast<const unsigned *>(p);
        memcpy((void *)h, &u, kBytes);
    }
    SL_UNROLL
    for (int c = 0; c < C; c++) v[c] = sl_ld(h[c]);
}

template <int C, typename T> __device__ __forceinline__ void st_cols(T *p, const float (&v)[C]) {
    constexpr int kBytes = C * (int)sizeof(T);
    T h[C];
    SL_UNROLL
    for (int c = 0; c < C; c++) h[c] = sl_st<T>(v[c]);
    SL_CHECK_ALIGNED(p, kBytes >= 16 ? 16 : kBytes);
    if constexpr (kBytes >= 16) {
        uint4 u[kBytes / 16];
        memcpy(u, (const void *)h, kBytes);
        SL_UNROLL
        for (int i = 0; i < kBytes / 16; i++) reinterpret_cast<uint4 *>(p)[i] = u[i];
    } else if constexpr (kBytes == 8) {
        uint2 u;
        memcpy(&u, (const void *)h, kBytes);
        *reinterpret_cast<uint2 *>(p) = u;
    } else {
        unsigned u;
        memcpy(&u, (const void *)h, kBytes);
        *reinterpret_cast<unsigned *>(p) = u;
    }
}

/* Where a lane's columns j0 .. j0 + C - 1 sit in the rotation: rot 1 (j0 < half: partner
 * columns j + half), -1 (partner j - half) or 0 (past the rotated dims), fi the frequency of
 * column j0, partner the lane holding the partner columns (half % C == 0, so a lane's columns
 * are all on one side). */
struct row_lane {
    int j0, fi, rot, partner;
};

__device__ __forceinline__ row_lane lane_cols(int lane, int c, int half) {
    row_lane L;
    L.j0 = lane * c;
    L.rot = L.j0 < half ? 1 : L.j0 < 2 * half ? -1 : 0;
    L.fi = L.rot > 0 ? L.j0 : L.j0 - half;
    L.partner = lane + L.rot * (half / c);
    return L;
}

/* The lane's columns of a row rotated, rotated()'s expressions (sn = -s: the backward). Every
 * lane of the warp calls it (a shuffle). */
template <int C>
__device__ __forceinline__ void rotate_cols(float (&v)[C], const row_lane &L, const float *cs,
                                            const float *sn) {
    float p[C];
    SL_UNROLL
    for (int c = 0; c < C; c++) p[c] = __shfl_sync(0xffffffffu, v[c], L.partner);
    if (L.rot > 0) {
        SL_UNROLL
        for (int c = 0; c < C; c++) v[c] = v[c] * cs[L.fi + c] - p[c] * sn[L.fi + c];
    } else if (L.rot < 0) {
        SL_UNROLL
        for (int c = 0; c < C; c++) v[c] = v[c] * cs[L.fi + c] + p[c] * sn[L.fi + c];
    }
}

/* Row b of a warp's batch starting at item `base`: item base + b kRowWarps of a chunk of `items`
 * head rows (rows per token: queries first, then keys) from token c0; tok its token in the
 * chunk, r in the sequence, hr its head. valid is false past the chunk's items. */
struct row_item {
    bool valid;
    int tok, hr;
    int64_t r;
};

__device__ __forceinline__ row_item batch_item(int base, int b, int items, int rows, int64_t c0) {
    const int item = base + b * kRowWarps;
    row_item it;
    it.valid = item < items;
    it.tok = item / rows;
    it.hr = item % rows;
    it.r = c0 + it.tok;
    return it;
}

/* Forward, block b: tokens [b kChunk, (b + 1) kChunk). Head row i of the chunk (token
 * i / (h + kv), head i % (h + kv)) goes to warp i % kRowWarps, kRowBatch of them loaded at a
 * time. Dynamic shared memory: cs, sn [kChunk][half]. */
template <typename T, int C>
__global__ void __launch_bounds__(32 * kRowWarps)
    k_qk_fwd_rows(T *__restrict__ qn, T *__restrict__ kn, T *__restrict__ g,
                  float *__restrict__ q_rstd, float *__restrict__ k_rstd,
                  const T *__restrict__ qall, const T *__restrict__ k, const T *__restrict__ qw,
                  const T *__restrict__ kw, const int32_t *__restrict__ pos,
                  const float *__restrict__ inv_freq, int64_t tokens, int h, int kv, int half,
                  float eps, float mscale, sl_gate_mode mode) {
    constexpr int d = 32 * C;
    SL_DYNAMIC_SMEM(float, smem);
    float *cs = smem, *sn = smem + kChunk * half;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t c0 = (int64_t)blockIdx.x * kChunk;
    const int n = (int)(tokens - c0 < kChunk ? tokens - c0 : kChunk);
    const row_lane L = lane_cols(lane, C, half);
    float wq[C], wk[C];
    ld_cols<C>(qw + L.j0, wq);
    ld_cols<C>(kw + L.j0, wk);
    rope_coefs(cs, sn, pos + c0, n, inv_freq, half, mscale, 1);
    const int rows = h + kv, items = n * rows;
    const int64_t width = qall_width(mode, h, d);
    const bool elem = mode == SL_GATE_ELEMENTWISE;
    for (int base = warp; base < items; base += kRowWarps * kRowBatch) {
        float v[kRowBatch][C] = {}, gv[kRowBatch][C] = {};
        SL_UNROLL
        for (int b = 0; b < kRowBatch; b++) {
            const row_item it = batch_item(base, b, items, rows, c0);
            if (!it.valid) continue; /* the same for the whole warp */
            const int64_t r = it.r;
            const int hr = it.hr;
            if (hr < h) {
                const T *src = qall + r * width + q_offset(mode, hr, d) + L.j0;
                ld_cols<C>(src, v[b]);
                if (elem) ld_cols<C>(src + d, gv[b]);
            } else {
                ld_cols<C>(k + (r * kv + hr - h) * d + L.j0, v[b]);
            }
        }
        SL_UNROLL
        for (int b = 0; b < kRowBatch; b++) {
            const row_item it = batch_item(base, b, items, rows, c0);
            if (!it.valid) continue;
            const int tok = it.tok, hr = it.hr;
            const int64_t r = it.r;
            const bool isq = hr < h;
            float ss = 0.0f;
            SL_UNROLL
            for (int c = 0; c < C; c++) ss += v[b][c] * v[b][c];
            ss = sl_warp_sum(ss);
            const float s = 1.0f / sqrtf(ss / (float)d + eps); /* core/rmsnorm.cu's expression */
            if (lane == 0) (isq ? q_rstd[r * h + hr] : k_rstd[r * kv + hr - h]) = s;
            SL_UNROLL
            for (int c = 0; c < C; c++) v[b][c] = v[b][c] * s * (isq ? wq[c] : wk[c]);
            rotate_cols<C>(v[b], L, cs + tok * half, sn + tok * half);
            if (isq) {
                st_cols<C>(qn + (r * h + hr) * d + L.j0, v[b]);
                if (elem)
                    st_cols<C>(g + (r * h + hr) * d + L.j0, gv[b]);
                else if (mode == SL_GATE_HEADWISE && lane == 0)
                    g[r * h + hr] = qall[r * width + (int64_t)h * d + hr];
            } else {
                st_cols<C>(kn + (r * kv + hr - h) * d + L.j0, v[b]);
            }
        }
    }
}

/* Backward, block b: tokens [b tpb, (b + 1) tpb) in chunks of kChunk, each chunk's head rows
 * shared out as the forward's. A lane adds g xh of its columns to its own dw registers (for q
 * and for k); at the end the warps' rows go through shared memory into the block's partial
 * rows in warp order (as the element path's). Dynamic shared memory: cs, sn [kChunk][half],
 * then [kRowWarps][2][d]. */
template <typename T, int C>
__global__ void __launch_bounds__(32 * kRowWarps)
    k_qk_bwd_rows(T *__restrict__ dqall, T *__restrict__ dk_pre, float *__restrict__ part,
                  const T *__restrict__ dq, const T *__restrict__ dk, const T *__restrict__ dg,
                  const T *__restrict__ qall, const T *__restrict__ k, const T *__restrict__ qw,
                  const T *__restrict__ kw, const float *__restrict__ q_rstd,
                  const float *__restrict__ k_rstd, const int32_t *__restrict__ pos,
                  const float *__restrict__ inv_freq, int64_t tokens, int64_t tpb, int h, int kv,
                  int half, float mscale, sl_gate_mode mode) {
    constexpr int d = 32 * C;
    SL_DYNAMIC_SMEM(float, smem);
    float *cs_all = smem, *sn_all = smem + kChunk * half, *dw_rows = smem + 2 * kChunk * half;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const row_lane L = lane_cols(lane, C, half);
    float wq[C], wk[C], dwq[C] = {}, dwk[C] = {};
    ld_cols<C>(qw + L.j0, wq);
    ld_cols<C>(kw + L.j0, wk);
    const int64_t width = qall_width(mode, h, d);
    const bool elem = mode == SL_GATE_ELEMENTWISE;
    const int rows = h + kv;
    const int64_t r0 = blockIdx.x * tpb, r1 = r0 + tpb < tokens ? r0 + tpb : tokens;
    for (int64_t c0 = r0; c0 < r1; c0 += kChunk) {
        const int n = (int)(r1 - c0 < kChunk ? r1 - c0 : kChunk), items = n * rows;
        rope_coefs(cs_all, sn_all, pos + c0, n, inv_freq, half, mscale, -1);
        for (int base = warp; base < items; base += kRowWarps * kRowBatch) {
            float gy[kRowBatch][C] = {}, x[kRowBatch][C] = {}, gv[kRowBatch][C] = {};
            float s[kRowBatch] = {};
            SL_UNROLL
            for (int b = 0; b < kRowBatch; b++) {
                const row_item it = batch_item(base, b, items, rows, c0);
                if (!it.valid) continue; /* the same for the whole warp */
                const int64_t r = it.r;
                const int hr = it.hr;
                if (hr < h) {
                    const int64_t go = (r * h + hr) * d;
                    ld_cols<C>(dq + go + L.j0, gy[b]);
                    ld_cols<C>(qall + r * width + q_offset(mode, hr, d) + L.j0, x[b]);
                    s[b] = q_rstd[r * h + hr];
                    if (elem) ld_cols<C>(dg + go + L.j0, gv[b]);
                } else {
                    const int64_t ko = (r * kv + hr - h) * d;
                    ld_cols<C>(dk + ko + L.j0, gy[b]);
                    ld_cols<C>(k + ko + L.j0, x[b]);
                    s[b] = k_rstd[r * kv + hr - h];
                }
            }
            SL_UNROLL
            for (int b = 0; b < kRowBatch; b++) {
                const row_item it = batch_item(base, b, items, rows, c0);
                if (!it.valid) continue;
                const int tok = it.tok, hr = it.hr;
                const int64_t r = it.r;
                const bool isq = hr < h;
                /* the norm's gradient g = R^T dq; then core/rmsnorm.cu's expressions */
                rotate_cols<C>(gy[b], L, cs_all + tok * half, sn_all + tok * half);
                float dot = 0.0f;
                SL_UNROLL
                for (int c = 0; c < C; c++)
                    dot += gy[b][c] * (isq ? wq[c] : wk[c]) * (x[b][c] * s[b]);
                const float mean = sl_warp_sum(dot) / (float)d;
                float dx[C];
                SL_UNROLL
                for (int c = 0; c < C; c++) {
                    const float xh = x[b][c] * s[b];
                    dx[c] = s[b] * (gy[b][c] * (isq ? wq[c] : wk[c]) - xh * mean);
                    if (isq)
                        dwq[c] += gy[b][c] * xh;
                    else
                        dwk[c] += gy[b][c] * xh;
                }
                if (isq) {
                    T *row = dqall + r * width + q_offset(mode, hr, d);
                    st_cols<C>(row + L.j0, dx);
                    if (elem)
                        st_cols<C>(row + d + L.j0, gv[b]);
                    else if (mode == SL_GATE_HEADWISE && lane == 0)
                        dqall[r * width + (int64_t)h * d + hr] = dg[r * h + hr];
                } else {
                    st_cols<C>(dk_pre + (r * kv + hr - h) * d + L.j0, dx);
                }
            }
        }
        __syncthreads(); /* cs, sn are rewritten for the next chunk */
    }
    float *mine = dw_rows + warp * 2 * d;
    SL_UNROLL
    for (int c = 0; c < C; c++) mine[L.j0 + c] = dwq[c], mine[d + L.j0 + c] = dwk[c];
    __syncthreads();
    for (int j = threadIdx.x; j < 2 * d; j += blockDim.x) {
        float acc = 0.0f;
        for (int wi = 0; wi < kRowWarps; wi++) acc += dw_rows[wi * 2 * d + j];
        part[(int64_t)blockIdx.x * 2 * d + j] = acc;
    }
}

/* The row path's columns per lane for head dim d and rotated half `half` (0: the element path):
 * whole rows across a warp in 2-8 columns per lane, the rotation's partner columns on one lane
 * (half a multiple of them). */
int row_cols(int d, int half) {
    const int c = d / 32;
    return (d == 64 || d == 128 || d == 256) && half % c == 0 && 2 * half <= d ? c : 0;
}

/* Whether every row the row path touches starts 16-byte aligned: the operands' bases (NULL
 * passes) and the row pitch of qall (`width` elements of `elsize` bytes; the other operands'
 * rows are d >= 64 elements). */
bool rows_aligned(std::initializer_list<const void *> ptrs, int64_t width, size_t elsize) {
    for (const void *p : ptrs)
        if (!sl_aligned16(p)) return false;
    return (width * (int64_t)elsize) % 16 == 0;
}

template <typename T, int C>
void fwd_rows(cudaStream_t st, sl_tensor *qn, sl_tensor *kn, sl_tensor *g, sl_tensor *q_rstd,
              sl_tensor *k_rstd, const sl_tensor *qall, const sl_tensor *k,
              const sl_qk_norm_rope *p, int64_t t, int h, int kv, int half) {
    SL_LAUNCH((k_qk_fwd_rows<T, C>), (unsigned)((t + kChunk - 1) / kChunk), 32 * kRowWarps,
              coef_smem(half), st, sl_ptr<T>(qn), sl_ptr<T>(kn), g ? sl_ptr<T>(g) : (T *)nullptr,
              sl_ptr<float>(q_rstd), sl_ptr<float>(k_rstd), sl_ptr<T>(qall), sl_ptr<T>(k),
              sl_ptr<T>(p->qw), sl_ptr<T>(p->kw), sl_ptr<int32_t>(p->pos),
              sl_ptr<float>(p->inv_freq), t, h, kv, half, p->eps, p->mscale, p->mode);
}

template <typename T, int C>
void bwd_rows(cudaStream_t st, float *part, int64_t nparts, int64_t tpb, sl_tensor *dqall,
              sl_tensor *dk_pre, const sl_tensor *dq, const sl_tensor *dk, const sl_tensor *dg,
              const sl_tensor *qall, const sl_tensor *k, const sl_tensor *q_rstd,
              const sl_tensor *k_rstd, const sl_qk_norm_rope *p, int64_t t, int h, int kv,
              int half) {
    const size_t smem = coef_smem(half) + sizeof(float) * kRowWarps * 2 * 32 * C;
    SL_LAUNCH((k_qk_bwd_rows<T, C>), (unsigned)nparts, 32 * kRowWarps, smem, st, sl_ptr<T>(dqall),
              sl_ptr<T>(dk_pre), part, sl_ptr<T>(dq), sl_ptr<T>(dk),
              dg ? sl_ptr<T>(dg) : (const T *)nullptr, sl_ptr<T>(qall), sl_ptr<T>(k),
              sl_ptr<T>(p->qw), sl_ptr<T>(p->kw), sl_ptr<float>(q_rstd), sl_ptr<float>(k_rstd),
              sl_ptr<int32_t>(p->pos), sl_ptr<float>(p->inv_freq), t, tpb, h, kv, half, p->mscale,
              p->mode);
}

} // namespace

bool rows_fwd(cudaStream_t st, sl_tensor *qn, sl_tensor *kn, sl_tensor *g, sl_tensor *q_rstd,
              sl_tensor *k_rstd, const sl_tensor *qall, const sl_tensor *k,
              const sl_qk_norm_rope *p) {
    const int64_t t = qn->shape[0];
    const int h = (int)qn->shape[1], kv = (int)kn->shape[1], d = (int)qn->shape[2];
    const int half = (int)p->inv_freq->numel, cols = row_cols(d, half);
    if (!cols || !rows_aligned({qn->data, kn->data, g ? g->data : NULL, qall->data, k->data,
                                p->qw->data, p->kw->data},
                               sl_qgate_width(p->mode, h, d), sl_dtype_size(qn->dtype)))
        return false;
    SL_DISPATCH_FLOAT(qn->dtype, T, {
        if (cols == 2) fwd_rows<T, 2>(st, qn, kn, g, q_rstd, k_rstd, qall, k, p, t, h, kv, half);
        if (cols == 4) fwd_rows<T, 4>(st, qn, kn, g, q_rstd, k_rstd, qall, k, p, t, h, kv, half);
        if (cols == 8) fwd_rows<T, 8>(st, qn, kn, g, q_rstd, k_rstd, qall, k, p, t, h, kv, half);
    });
    return true;
}

bool rows_bwd(cudaStream_t st, float *part, int64_t nparts, int64_t tpb, sl_tensor *dqall,
              sl_tensor *dk_pre, const sl_tensor *dq, const sl_tensor *dk, const sl_tensor *dg,
              const sl_tensor *qall, const sl_tensor *k, const sl_tensor *q_rstd,
              const sl_tensor *k_rstd, const sl_qk_norm_rope *p) {
    const int64_t t = dq->shape[0];
    const int h = (int)dq->shape[1], kv = (int)dk->shape[1], d = (int)dq->shape[2];
    const int half = (int)p->inv_freq->numel, cols = row_cols(d, half);
    if (!cols || !rows_aligned({dqall->data, dk_pre->data, dq->data, dk->data, dg ? dg->data : NULL,
                                qall->data, k->data, p->qw->data, p->kw->data},
                               sl_qgate_width(p->mode, h, d), sl_dtype_size(dq->dtype)))
        return false;
    SL_DISPATCH_FLOAT(dq->dtype, T, {
        if (cols == 2)
            bwd_rows<T, 2>(st, part, nparts, tpb, dqall, dk_pre, dq, dk, dg, qall, k, q_rstd,
                           k_rstd, p, t, h, kv, half);
        if (cols == 4)
            bwd_rows<T, 4>(st, part, nparts, tpb, dqall, dk_pre, dq, dk, dg, qall, k, q_rstd,
                           k_rstd, p, t, h, kv, half);
        if (cols == 8)
            bwd_rows<T, 8>(st, part, nparts, tpb, dqall, dk_pre, dq, dk, dg, qall, k, q_rstd,
                           k_rstd, p, t, h, kv, half);
    });
    return true;
}

} // namespace sl_qk
