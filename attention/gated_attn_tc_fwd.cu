/*
 * attention/gated_attn_tc_fwd.cu - fused causal gated attention, forward, on tensor cores (bf16
 * mma.sync m16n8k16 with fp32 accumulation, sm_80+). The CUDA backend's attention for bf16 with
 * head dim 64 or 128 (gated_attn_fwd.cu dispatches; other problems take its SIMT kernel). CPU
 * twin: attention/gated_attn_cpu.c; semantics: core/ops.h; shared pieces: gated_attn_tc.cuh;
 * design and figures: docs/attention.md ("The tensor-core kernel").
 *
 * FlashAttention-2's forward. One block of 4 warps per (query tile of 64 rows, sequence, head),
 * latest tiles first; each warp owns 16 query rows, whose Q fragments it keeps in registers for
 * the whole block. The block streams the key/value tiles (64 keys) of its sequence from the
 * first one its rows can see (document start, or 0) to the causal diagonal, through a two-stage
 * cp.async pipeline: while tile n is multiplied, tile n + 1 is in flight. Per tile and warp:
 *   S = Q K^T            16 x 64, 4 x (D / 16) MMAs per 16 keys, K fragments by ldmatrix
 *   mask                 only on the diagonal tile and tiles before a row's document start
 *   online softmax       in the log2 domain (scale * log2 e folded into one multiply), per row
 *                        m' = max(m, rowmax S), P = 2^(S - m'), l = l 2^(m - m') + rowsum P,
 *                        O = O 2^(m - m'); row maxima over the 4 lanes of a quad (2 shuffles)
 *   O += P V             P goes from the S accumulators straight into A fragments (bf16),
 *                        V fragments by ldmatrix.trans
 * Epilogue, fused: O /= l, lse = ln 2 (m + log2 l) (fp32, natural log as the CPU writes it),
 * y = O * sigmoid(g) (elementwise or headwise gate) and the pre-gate O, both bf16. Nothing of
 * size S x S exists anywhere: memory is linear in the sequence length.
 *
 * Shared memory (dynamic): Q 64 x D, K and V 2 x 64 x D each, bf16, swizzled: 80 KiB at D = 128
 * (opted in with cudaFuncSetAttribute), 40 KiB at D = 64. Q's buffer is dead after the first
 * tile's fragment loads; it stays reserved so that the pipeline needs no aliasing argument.
 */
#include "attention/gated_attn_tc.cuh"
#include "attention/kernels_cuda.h"
#include "core/log.h"

namespace {

using namespace sl_attn_tc;

template <int D> constexpr size_t fwd_smem_bytes() {
    return sizeof(sl_bf16) * (size_t)(kBr * D + 4 * kBc * D);
}

template <int D> __global__ void __launch_bounds__(kThreads) tc_fwd_kernel(const args a) {
    constexpr int KD = D / 16;  /* k-steps over the head dim */
    constexpr int ND = D / 8;   /* n-tiles of O */
    constexpr int NS = kBc / 8; /* n-tiles of S */
    SL_DYNAMIC_SMEM(sl_bf16, smem);
    sl_bf16 *sq = smem, *sk0 = sq + kBr * D, *sv0 = sk0 + 2 * kBc * D;

    const qtile t = locate_qtile(a);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, tq = lane & 3;
    const int64_t ldq = (int64_t)a.h * D, ldk = (int64_t)a.kv * D;
    const sl_bf16 *qb = a.q + ((t.tok0 + t.i0) * a.h + t.h) * D;
    const sl_bf16 *kb = a.k + (t.tok0 * a.kv + t.kvh) * D;
    const sl_bf16 *vb = a.v + (t.tok0 * a.kv + t.kvh) * D;
    const float c2 = a.scale * kLog2e;

    /* This thread's two rows (g and g + 8 of its warp's 16) and their first visible keys. Rows
     * past the sequence compute on zero-filled queries and are never written. */
    int row[2], lo[2];
    float m[2], l[2];
    for (int x = 0; x < 2; x++) {
        row[x] = t.i0 + warp * 16 + g + 8 * x;
        const int rc = row[x] < a.seq ? row[x] : a.seq - 1;
        lo[x] = a.seg ? a.seg[t.tok0 + rc] : 0;
        m[x] = -INFINITY, l[x] = 0.0f;
    }
    float o[ND][4];
    zero(o);

    const int jfirst = first_key_tile<kBc>(a.seg, t.tok0, t.i0), kend = t.i0 + t.nq;
    const int ntiles = (kend - jfirst + kBc - 1) / kBc;
    auto issue_kv = [&](int n) {
        const int j0 = jfirst + n * kBc, nk = a.seq - j0 < kBc ? a.seq - j0 : kBc;
        load_tile_async<kBc, D>(sk0 + (n & 1) * kBc * D, kb + j0 * ldk, ldk, nk);
        load_tile_async<kBc, D>(sv0 + (n & 1) * kBc * D, vb + j0 * ldk, ldk, nk);
    };
    load_tile_async<kBr, D>(sq, qb, ldq, t.nq);
    issue_kv(0);
    sl_cp_async_commit();

    uint32_t qf[KD][4];
    for (int n = 0; n < ntiles; n++) {
        /* tile n + 1 in flight into the other stage while tile n is used */
        pipeline_next(n + 1 < ntiles, [&] { issue_kv(n + 1); });
        if (n == 0) {
            SL_UNROLL
            for (int kk = 0; kk < KD; kk++) ld_a<D>(qf[kk], sq, warp * 16, kk * 16);
        }
        const sl_bf16 *sk = sk0 + (n & 1) * kBc * D, *sv = sv0 + (n & 1) * kBc * D;
        const int j0 = jfirst + n * kBc;

        float s[NS][4];
        zero(s);
        SL_UNROLL
        for (int kk = 0; kk < KD; kk++) {
            SL_UNROLL
            for (int jp = 0; jp < NS / 2; jp++) {
                uint32_t b[4];
                ld_b_nk<D>(b, sk, jp * 16, kk * 16);
                mma2(s[2 * jp], s[2 * jp + 1], qf[kk], b);
            }
        }

        /* Masking is needed on the diagonal tile (keys after a row) and where a row's document
         * starts inside or after the tile (lo[1] is the larger start). */
        const bool masked = j0 + kBc - 1 > row[0] || j0 < lo[1];
        SL_UNROLL
        for (int x = 0; x < 2; x++) {
            float mx = -INFINITY;
            SL_UNROLL
            for (int j = 0; j < NS; j++) {
                SL_UNROLL
                for (int e = 0; e < 2; e++) {
                    const int key = j0 + 8 * j + 2 * tq + e;
                    float &v = s[j][2 * x + e];
                    v = !masked || (key <= row[x] && key >= lo[x]) ? v * c2 : -INFINITY;
                    mx = fmaxf(mx, v);
                }
            }
            /* With documents a row can meet a tile with no visible key before its first
             * visible one: m stays -inf and exponents are taken from 0 (P = 0, alpha = 0). */
            const float mnew = fmaxf(m[x], quad_max(mx));
            const float mref = mnew == -INFINITY ? 0.0f : mnew;
            const float alpha = exp2f(m[x] - mref);
            float sum = 0.0f;
            SL_UNROLL
            for (int j = 0; j < NS; j++) {
                SL_UNROLL
                for (int e = 0; e < 2; e++) {
                    float &v = s[j][2 * x + e];
                    v = exp2f(v - mref);
                    sum += v;
                }
            }
            l[x] = l[x] * alpha + sum; /* this lane's share; the quad sums at the end */
            m[x] = mnew;
            SL_UNROLL
            for (int n2 = 0; n2 < ND; n2++) o[n2][2 * x] *= alpha, o[n2][2 * x + 1] *= alpha;
        }

        SL_UNROLL
        for (int kk = 0; kk < kBc / 16; kk++) {
            uint32_t pa[4];
            acc_to_a(pa, s[2 * kk], s[2 * kk + 1]);
            SL_UNROLL
            for (int dp = 0; dp < ND / 2; dp++) {
                uint32_t b[4];
                ld_b_kn<D>(b, sv, kk * 16, dp * 16);
                mma2(o[2 * dp], o[2 * dp + 1], pa, b);
            }
        }
        __syncthreads(); /* every warp is done with this stage before it is refilled */
    }

    SL_UNROLL
    for (int x = 0; x < 2; x++) {
        const float lt = quad_sum(l[x]);
        if (row[x] >= a.seq) continue;
        const int64_t r = (t.tok0 + row[x]) * a.h + t.h;
        if (tq == 0) a.lsew[r] = (m[x] + log2f(lt)) * kLn2;
        const float inv = 1.0f / lt;
        const float gh = a.gate == 1 ? sigmoid(sl_ld(a.g[r])) : 1.0f;
        SL_UNROLL
        for (int n = 0; n < ND; n++) {
            const int64_t e = r * D + 8 * n + 2 * tq;
            const float o0 = o[n][2 * x] * inv, o1 = o[n][2 * x + 1] * inv;
            float g0 = gh, g1 = gh;
            if (a.gate == 2) {
                sl_unpack_bf16x2(*(const uint32_t *)(a.g + e), &g0, &g1);
                g0 = sigmoid(g0), g1 = sigmoid(g1);
            }
            /* e is even and rows have even length: one aligned 4-byte store per pair */
            *(uint32_t *)(a.ow + e) = sl_pack_bf16x2(o0, o1);
            *(uint32_t *)(a.y + e) = sl_pack_bf16x2(o0 * g0, o1 * g1);
        }
    }
}

template <int D> void launch_tc_fwd(const args &a, cudaStream_t stream) {
    const int64_t blocks = (int64_t)((a.seq + kBr - 1) / kBr) * a.batch * a.h;
    SL_CHECK(blocks <= 0x7fffffff, "gated_attn_fwd: %lld blocks exceed the grid limit",
             (long long)blocks);
    constexpr size_t smem = fwd_smem_bytes<D>();
    sl_cuda_raise_smem<tc_fwd_kernel<D>>(smem, "gated_attn_fwd");
    SL_LAUNCH(tc_fwd_kernel<D>, dim3((unsigned)blocks), dim3(kThreads), smem, stream, a);
}

} // namespace

bool sl_cuda_gated_attn_tc_takes(sl_dtype dt, int64_t head_dim) {
    return dt == SL_BF16 && (head_dim == 64 || head_dim == 128);
}

bool sl_cuda_gated_attn_tc_supported(const sl_tensor *q) {
    return sl_cuda_gated_attn_tc_takes(q->dtype, q->shape[2]);
}

args sl_attn_tc::fwd_args(sl_tensor *y, sl_tensor *o, sl_tensor *lse, const sl_tensor *q,
                          const sl_tensor *k, const sl_tensor *v, const sl_tensor *g,
                          const sl_tensor *seg, int batch, int seq, float scale) {
    args a = {};
    a.q = sl_ptr<sl_bf16>(q), a.k = sl_ptr<sl_bf16>(k), a.v = sl_ptr<sl_bf16>(v);
    a.g = g ? sl_ptr<sl_bf16>(g) : nullptr;
    a.y = sl_ptr<sl_bf16>(y), a.ow = sl_ptr<sl_bf16>(o), a.lsew = sl_ptr<float>(lse);
    a.seg = seg ? sl_ptr<int>(seg) : nullptr;
    a.batch = batch, a.seq = seq, a.h = (int)q->shape[1], a.kv = (int)k->shape[1];
    a.grp = a.h / a.kv, a.gate = !g ? 0 : g->numel == q->numel ? 2 : 1;
    a.scale = scale;
    return a;
}

void sl_cuda_gated_attn_tc_fwd(void *ctx, sl_tensor *y, sl_tensor *o, sl_tensor *lse,
                               const sl_tensor *q, const sl_tensor *k, const sl_tensor *v,
                               const sl_tensor *g, const sl_tensor *seg, int batch, int seq,
                               float scale) {
    const args a = fwd_args(y, o, lse, q, k, v, g, seg, batch, seq, scale);
    cudaStream_t stream = sl_cuda_stream(ctx);
    if (q->shape[2] == 64)
        launch_tc_fwd<64>(a, stream);
    else
        launch_tc_fwd<128>(a, stream);
    SL_CUDA_LAUNCHED("gated_attn_fwd");
}
