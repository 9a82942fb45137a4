/*
 * attention/qgate.cu - q/gate split and merge on the GPU (CPU twin: attention/qgate_cpu.c, which
 * describes the three row layouts of qall).
 *
 * Pure copies, so the dtype does not matter: the kernels move words of W bytes, the widest of
 * 16/8/4/2 bytes that divides every contiguous segment (a head's queries or gate, the headwise
 * gate block) and the three tensors' addresses, so rows of D = 64 or 128 move as 16-byte vectors.
 *
 * Parallelization: a 2-D block, threadIdx.x over the words of a qall row (consecutive threads,
 * consecutive words: loads and stores coalesced on both sides, since every segment is contiguous
 * in both layouts), threadIdx.y over rows; blocks stride over rows.
 */
#include "attention/kernels_cuda.h"
#include "core/cuda_common.cuh"

namespace {

/* One row of qall in words: `q` holds heads * qw words per row; `g` holds gw words per row
 * (elementwise: heads * qw; headwise: the H gate values; none: 0). */
struct qgate_geom {
    int64_t rows;
    int heads, qw, gw, row_w; /* row_w: words per qall row */
    int mode;
};

/* kMerge false: q, g <- all (split); true: all <- q, g (merge). */
template <typename W, bool kMerge>
__global__ void qgate_kernel(W *all, W *q, W *g, const qgate_geom m) {
    const int64_t qrow = (int64_t)m.heads * m.qw;
    for (int64_t r = (int64_t)blockIdx.x * blockDim.y + threadIdx.y; r < m.rows;
         r += (int64_t)gridDim.x * blockDim.y) {
        W *a = all + r * m.row_w, *qr = q + r * qrow, *gr = g ? g + r * m.gw : nullptr;
        SL_CHECK_ALIGNED(a, sizeof(W));
        SL_CHECK_ALIGNED(qr, sizeof(W));
        if (gr) SL_CHECK_ALIGNED(gr, sizeof(W));
        for (int c = threadIdx.x; c < m.row_w; c += blockDim.x) {
            W *other;
            if (m.mode == SL_GATE_ELEMENTWISE) { /* per head [q_h | g_h] */
                const int h = c / (2 * m.qw), e = c - h * 2 * m.qw;
                other = e < m.qw ? qr + h * m.qw + e : gr + h * m.qw + (e - m.qw);
            } else { /* headwise: all queries, then the gates; none: queries only */
                other = c < qrow ? qr + c : gr + (c - qrow);
            }
            if (kMerge)
                a[c] = *other;
            else
                *other = a[c];
        }
    }
}

/* Largest word size (bytes) dividing every value in `v`. */
int word_bytes(const uint64_t *v, int n) {
    for (int w = 16; w > 1; w /= 2) {
        bool ok = true;
        for (int i = 0; i < n; i++) ok &= v[i] % (uint64_t)w == 0;
        if (ok) return w;
    }
    return 1;
}

template <typename W, bool kMerge>
void launch(void *ctx, void *all, void *q, void *g, qgate_geom m, int wb, const char *op) {
    m.qw /= wb, m.gw /= wb, m.row_w /= wb; /* bytes -> words */
    const int bx = m.row_w >= 256 ? 256 : (m.row_w + 31) / 32 * 32, by = 256 / bx;
    const int64_t blocks = (m.rows + by - 1) / by;
    const unsigned grid = (unsigned)(blocks < 65535 ? blocks : 65535); /* blocks stride */
    /* alias: SL_LAUNCH takes no comma; the emulator names the kernel after it */
    void (*qgate_copy)(W *, W *, W *, qgate_geom) = qgate_kernel<W, kMerge>;
    SL_LAUNCH(qgate_copy, dim3(grid), dim3(bx, by), 0, sl_cuda_stream(ctx), (W *)all, (W *)q,
              (W *)g, m);
    SL_CUDA_LAUNCHED(op);
}

template <bool kMerge>
void run(void *ctx, void *all, void *q, void *g, const sl_tensor *qt, sl_gate_mode mode, size_t es,
         const char *op) {
    const int64_t t = qt->shape[0], h = qt->shape[1], d = qt->shape[2];
    if (t == 0 || h * d == 0) return;
    qgate_geom m;
    m.rows = t, m.heads = (int)h, m.mode = (int)mode;
    m.qw = (int)(d * (int64_t)es); /* in bytes until launch() */
    m.gw = mode == SL_GATE_ELEMENTWISE ? (int)(h * d * (int64_t)es)
           : mode == SL_GATE_HEADWISE  ? (int)(h * (int64_t)es)
                                       : 0;
    m.row_w = (int)(h * m.qw + m.gw);
    const uint64_t v[] = {(uint64_t)m.qw, (uint64_t)m.gw, (uint64_t)(uintptr_t)all,
                          (uint64_t)(uintptr_t)q, (uint64_t)(uintptr_t)g};
    switch (word_bytes(v, 5)) {
    case 16:
        launch<uint4, kMerge>(ctx, all, q, g, m, 16, op);
        break;
    case 8:
        launch<uint2, kMerge>(ctx, all, q, g, m, 8, op);
        break;
    case 4:
        launch<unsigned, kMerge>(ctx, all, q, g, m, 4, op);
        break;
    default:
        launch<unsigned short, kMerge>(ctx, all, q, g, m, 2, op);
        break;
    }
}

} // namespace

extern "C" void sl_cuda_qgate_split(void *ctx, sl_tensor *q, sl_tensor *g, const sl_tensor *qall,
                                    sl_gate_mode mode) {
    const bool gated = mode != SL_GATE_NONE;
    run<false>(ctx, qall->data, q->data, gated ? g->data : nullptr, q, mode,
               sl_dtype_size(q->dtype), "qgate_split");
}

extern "C" void sl_cuda_qgate_merge(void *ctx, sl_tensor *dqall, const sl_tensor *dq,
                                    const sl_tensor *dg, sl_gate_mode mode) {
    const bool gated = mode != SL_GATE_NONE;
    run<true>(ctx, dqall->data, dq->data, gated ? dg->data : nullptr, dq, mode,
              sl_dtype_size(dq->dtype), "qgate_merge");
}
