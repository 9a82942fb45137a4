/*
 * attention/gated_attn_fwd.cu - fused causal gated attention, forward, on CUDA cores (SIMT,
 * fp32 arithmetic), and the gate-score diagnostic. CPU twin: attention/gated_attn_cpu.c; layouts
 * and semantics: core/ops.h. The backward is in gated_attn_bwd.cu, the shared pieces in
 * gated_attn.cuh; which attention kernel runs is decided in attn_kernels.cu.
 *
 * Algorithm (FlashAttention-2): one block per (query tile of B rows, sequence, head, head-dim
 * chunk), heaviest (latest) query tiles first. The block keeps its query tile in shared memory
 * and streams the key/value tiles of its sequence up to the causal diagonal through shared memory,
 * each loaded once: S = Q K^T, scaled into the log2 domain (scale * log2 e, so exp2 is one
 * instruction); online softmax per row with the running max m and sum l in registers
 * (m' = max(m, rowmax S), P = 2^(S - m'), l = l 2^(m - m') + rowsum P, O = O 2^(m - m') + P V).
 * At the end O /= l, lse = ln 2 (m + log2 l) (natural log, as the CPU writes it), y = O sigmoid(g)
 * with g elementwise or headwise, or y = O. Nothing S x S is stored: memory is linear in S.
 *
 * Tiles: B = 32 query rows x 32 keys, 64 threads as an 8 x 8 grid: a thread owns 4 rows, 4 keys of
 * S and D/8 columns of O (rows tr + 8x, columns tc + 8y: strided, so shared-memory reads hit
 * distinct banks with rows padded to DP + 1 floats). Head dims are rounded up to DP = 32, 64 or 128
 * (zero padding; D = 64 and 128 are exact); D > 128 runs in chunks of 128: each chunk's block
 * computes S over all of D (the query chunk then reloads per key tile) and its slice of O.
 * K and V take turns in one shared buffer, which with the query tile and P keeps a block within
 * the 48 KiB of static shared memory (37248 bytes at DP = 128).
 *
 * Documents (seg, core/ops.h): a query tile starts at the key tile holding its first row's
 * document start, and each row masks the keys before its own start as the diagonal masks those
 * after it (tile skipping and masking as in the CPU twin).
 */
#include "attention/gated_attn.cuh"
#include "attention/kernels_cuda.h"
#include "core/log.h"

namespace {

using namespace sl_attn;

template <typename T, int DP, int B>
__global__ void __launch_bounds__(kThreads) attn_fwd_kernel(const args<T> a) {
    constexpr int LD = DP + 1, LDP = B + 1, R = B / 8, RD = DP / 8;
    __shared__ float sq[B * LD], skv[B * LD], sp[B * LDP];
    const int tid = threadIdx.x, tr = tid >> 3, tc = tid & 7;

    const auto [qt, chunk, h, kvh, c_out, i0, nq, kend, b, tok0, ldq, ldk, qb, kb, vb, c2,
                resident] = locate_qtile<T, B, DP>(a);

    float o[R][RD], m[R], l[R];
    int lo[R]; /* each row's first visible key: its document start (0 without documents) */
    zero(o);
    SL_UNROLL
    for (int x = 0; x < R; x++) {
        const int i = i0 + tr + 8 * x;
        m[x] = -INFINITY, l[x] = 0.0f;
        lo[x] = a.seg && i < a.seq ? a.seg[tok0 + i] : 0;
    }
    if (resident) load_tile<B, DP>(sq, qb, ldq, nq, a.d);

    for (int j0 = first_key_tile<B>(a.seg, tok0, i0); j0 < kend; j0 += B) {
        const int nk = a.seq - j0 < B ? a.seq - j0 : B;
        float s[R][R];
        zero(s);
        for (int dc = 0; dc < a.d; dc += DP) {
            if (!resident) load_tile<B, DP>(sq, qb + dc, ldq, nq, a.d - dc);
            load_tile<B, DP>(skv, kb + j0 * ldk + dc, ldk, nk, a.d - dc);
            __syncthreads();
            tile_mma<R, R, DP, 8 * LD, 1, 8 * LD, 1>(s, sq + tr * LD, skv + tc * LD);
            __syncthreads();
        }
        /* Online softmax. Only the diagonal tile has keys after some of its queries. Keys before
         * a row's document start are masked too, so with documents a row can meet a tile with
         * no visible key before its first visible one: m stays -inf and the exponents are taken
         * from 0 instead (P = 0, alpha = 0; no inf - inf). Without documents every row sees key
         * 0 in the first tile and mref is always mnew. */
        const bool diag = j0 + B > i0;
        SL_UNROLL
        for (int x = 0; x < R; x++) {
            const int i = i0 + tr + 8 * x;
            float mx = -INFINITY;
            SL_UNROLL
            for (int y = 0; y < R; y++) {
                const int j = j0 + tc + 8 * y;
                s[x][y] = (!diag || j <= i) && j >= lo[x] ? s[x][y] * c2 : -INFINITY;
                mx = fmaxf(mx, s[x][y]);
            }
            const float mnew = fmaxf(m[x], group_max(mx));
            const float mref = mnew == -INFINITY ? 0.0f : mnew;
            const float alpha = exp2f(m[x] - mref); /* 0 on the first visible tile */
            float sum = 0.0f;
            SL_UNROLL
            for (int y = 0; y < R; y++) {
                const float p = exp2f(s[x][y] - mref);
                sum += p;
                sp[(tr + 8 * x) * LDP + tc + 8 * y] = p;
            }
            l[x] = l[x] * alpha + group_sum(sum);
            m[x] = mnew;
            SL_UNROLL
            for (int y = 0; y < RD; y++) o[x][y] *= alpha;
        }
        /* V takes K's buffer: every thread passed the barrier after its last read of K. */
        load_tile<B, DP>(skv, vb + j0 * ldk + c_out, ldk, nk, a.d - c_out);
        __syncthreads();
        tile_mma<R, RD, B, 8 * LDP, 1, 8, LD>(o, sp + tr * LDP, skv + tc);
        __syncthreads();
    }

    SL_UNROLL
    for (int x = 0; x < R; x++) {
        const int i = i0 + tr + 8 * x;
        if (i >= a.seq) continue;
        const int64_t row = (tok0 + i) * a.h + h;
        if (chunk == 0 && tc == 0) a.lsew[row] = (m[x] + log2f(l[x])) * kLn2;
        const float inv = 1.0f / l[x];
        const float gh = a.gate == 1 ? sigmoid(sl_ld(a.g[row])) : 1.0f;
        SL_UNROLL
        for (int y = 0; y < RD; y++) {
            const int c = c_out + tc + 8 * y;
            if (c >= a.d) continue;
            const int64_t e = row * a.d + c;
            const float ov = o[x][y] * inv;
            a.ow[e] = sl_st<T>(ov);
            a.y[e] = sl_st<T>(ov * (a.gate == 2 ? sigmoid(sl_ld(a.g[e])) : gh));
        }
    }
}

template <typename T, int DP> void launch_fwd(const args<T> &a, cudaStream_t stream) {
    constexpr int B = 32;
    const int64_t blocks = (int64_t)((a.seq + B - 1) / B) * a.batch * a.h * a.nch;
    SL_CHECK(blocks <= 0x7fffffff, "gated_attn_fwd: %lld blocks exceed the grid limit",
             (long long)blocks);
    /* alias: SL_LAUNCH takes no comma; the emulator names the kernel after it */
    void (*attn_fwd)(args<T>) = attn_fwd_kernel<T, DP, B>;
    SL_LAUNCH(attn_fwd, dim3((unsigned)blocks), dim3(kThreads), 0, stream, a);
}

/* ---- sigmoid_mean: two-stage deterministic reduction ------------------------------------ */

constexpr int kMeanThreads = 256, kMeanBlocks = 512;

/* Sum of a block's per-thread doubles in a fixed tree order (every thread must call it). */
__device__ __forceinline__ double block_sum_d(double v, double *s) {
    s[threadIdx.x] = v;
    __syncthreads();
    for (int w = kMeanThreads / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w) s[threadIdx.x] += s[threadIdx.x + w];
        __syncthreads();
    }
    return s[0];
}

/* Stage 1: block b sums sigmoid(g[i]) over its fixed grid-stride share (fp32 sigmoid, fp64
 * sums: the mean of 1e8 values keeps ~1e-9 relative). The grid depends on n only. */
template <typename T> __global__ void sigmoid_sum_kernel(double *part, const T *g, int64_t n) {
    __shared__ double s[kMeanThreads];
    double acc = 0.0;
    for (int64_t i = (int64_t)blockIdx.x * kMeanThreads + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * kMeanThreads)
        acc += (double)sigmoid(sl_ld(g[i]));
    const double total = block_sum_d(acc, s);
    if (threadIdx.x == 0) part[blockIdx.x] = total;
}

/* Stage 2: one block adds the partial sums in order and divides. */
__global__ void sigmoid_mean_kernel(float *out, const double *part, int nparts, int64_t n) {
    __shared__ double s[kMeanThreads];
    double acc = 0.0;
    for (int i = threadIdx.x; i < nparts; i += kMeanThreads) acc += part[i];
    const double total = block_sum_d(acc, s);
    if (threadIdx.x == 0) out[0] = n > 0 ? (float)(total / (double)n) : 0.0f;
}

} // namespace

/* The SIMT kernel: any head dim, fp32 or bf16 storage (attention/attn_kernels.cu chooses it). */
extern "C" void sl_cuda_gated_attn_simt_fwd(void *ctx, sl_tensor *y, sl_tensor *o, sl_tensor *lse,
                                            const sl_tensor *q, const sl_tensor *k,
                                            const sl_tensor *v, const sl_tensor *g,
                                            const sl_tensor *seg, int batch, int seq, float scale) {
    if (batch == 0 || seq == 0) return;
    const int64_t h = q->shape[1], kv = k->shape[1], d = q->shape[2];
    const int dp = pick_dp(d);
    cudaStream_t stream = sl_cuda_stream(ctx);
    SL_DISPATCH_FLOAT(q->dtype, T, {
        args<T> a = {};
        a.q = sl_ptr<T>(q), a.k = sl_ptr<T>(k), a.v = sl_ptr<T>(v), a.g = sl_ptr<T>(g);
        a.y = sl_ptr<T>(y), a.ow = sl_ptr<T>(o), a.lsew = sl_ptr<float>(lse);
        a.seg = seg ? sl_ptr<int>(seg) : nullptr;
        a.batch = batch, a.seq = seq, a.h = (int)h, a.kv = (int)kv, a.d = (int)d;
        a.grp = (int)(h / kv), a.gate = !g ? 0 : g->numel == q->numel ? 2 : 1;
        a.nch = (int)((d + dp - 1) / dp), a.scale = scale;
        if (dp == 32)
            launch_fwd<T, 32>(a, stream);
        else if (dp == 64)
            launch_fwd<T, 64>(a, stream);
        else
            launch_fwd<T, 128>(a, stream);
    });
    SL_CUDA_LAUNCHED("gated_attn_fwd");
}

extern "C" void sl_cuda_sigmoid_mean(void *ctx, sl_tensor *out, const sl_tensor *g) {
    const int64_t n = g->numel;
    const int64_t want = (n + 4 * kMeanThreads - 1) / (4 * kMeanThreads); /* >= 4 per thread */
    const int nparts = (int)(want < kMeanBlocks ? want : kMeanBlocks);
    cudaStream_t stream = sl_cuda_stream(ctx);
    double *part =
        (double *)sl_cuda_scratch(ctx, 0, sizeof(double) * (size_t)(nparts ? nparts : 1));
    if (nparts > 0) {
        SL_DISPATCH_FLOAT(g->dtype, T, {
            SL_LAUNCH(sigmoid_sum_kernel<T>, dim3((unsigned)nparts), dim3(kMeanThreads), 0, stream,
                      part, sl_ptr<T>(g), n);
        });
        SL_CUDA_LAUNCHED("sigmoid_mean");
    }
    SL_LAUNCH(sigmoid_mean_kernel, dim3(1), dim3(kMeanThreads), 0, stream, sl_ptr<float>(out),
              (const double *)part, nparts, n);
    SL_CUDA_LAUNCHED("sigmoid_mean");
}
