/*
 * moe/grouped_matmul_sm90_dw.cu - the Hopper grouped GEMM's weight gradient
 * (sl_op_grouped_matmul_dw and _dw_segments: bf16 dY, X into fp32 dW, one launch per
 * projection): its kernel, its epilogues (read-modify-write, or TMA add reductions with
 * SLUICE_EXPERT_GEMM_DW_REDUCE=1), the old dW's L2 prefetch (SLUICE_EXPERT_GEMM_PREFETCH=1) and
 * the sum of squares for the gradient norm. Design: moe/grouped_matmul_sm90.cu's header ("dW");
 * shared pieces: moe/grouped_matmul_sm90.cuh.
 */
#include "core/kernels_cuda.h" /* sl_cuda_reduce_add */
#include "moe/grouped_matmul_sm90.cuh"

namespace {

/* ---- the weight-gradient kernel ---------------------------------------------------------- */

/* Zeroes rows kv .. 63 of a [64][64] chunk (bf16, 128-byte rows: the swizzle permutes 16-byte
 * pieces within a row, so a row's bytes stay where they were) by one warpgroup's threads. */
__device__ __forceinline__ void zero_rows_from(uint8_t *chunk, int kv, int t) {
    uint4 *p = (uint4 *)(chunk + kv * 128);
    const int n = (BK - kv) * 8; /* 16-byte pieces */
    for (int i = t; i < n; i += kWg) p[i] = make_uint4(0u, 0u, 0u, 0u);
}

/* Whether a dW tile stays as it is: an empty group (no reduction chunks) with beta 1, the
 * accumulating micro-batches. Neither the producer (no loads, no prefetch) nor the consumers
 * (no read-modify-write of 2 x 4 bytes per element; with routing as uneven as at
 * initialization that was most of the step's weight-gradient traffic) touch it. */
__device__ __forceinline__ bool dw_kept(int chunks, float beta) {
    return chunks == 0 && beta == 1.0f;
}

/* The dW tile's old values (group g, rows m0.., columns n0..) into L2, one row (BN fp32, at
 * most 1 KB) per bulk prefetch: issued by the producer as it starts the tile's loads, so the
 * epilogue's beta reads hit L2 instead of waiting on DRAM after the mainloop (the tile's 128 KB
 * then arrive while its wgmmas run). Rows are 16-byte aligned: n is a multiple of 8. */
template <int BN>
__device__ __forceinline__ void prefetch_c_tile(const sl_gmm_sm90_args &a, int g, int m0, int n0) {
    const int rows = a.m - m0 < BM ? a.m - m0 : BM, cols = a.n - n0 < BN ? a.n - n0 : BN;
    const float *c = (const float *)a.c + ((int64_t)g * a.m + m0) * a.n + n0;
    for (int r = 0; r < rows; r++) sl_bulk_prefetch_l2(c + (int64_t)r * a.n, (uint32_t)cols * 4);
}

/* The add-reduction epilogue of one consumer (RED, beta 1): its 64 rows of the tile go to dW
 * through the staging buffers, 32 columns at a time, each added to dW by one TMA add
 * reduction (cp.reduce.async.bulk.tensor, fp32) that the warpgroup's first thread issues: the
 * consumer never waits for the old dW to come from memory, as the read-modify-write of
 * store_tile does after every tile. n_red counts the consumer's chunks over the block's life
 * (buffer n_red % 2, reused once the reduction two chunks back has read it). */
template <int BN>
__device__ __forceinline__ void reduce_tile(float (&acc)[BN / 2], uint8_t *stage,
                                            const CUtensorMap *tc, int g, int row0, int n0, int n,
                                            const sl_wg_lane &p, int bar, int &n_red) {
    SL_UNROLL
    for (int i = 0; i < BN / 32; i++) {
        if (n0 + 32 * i >= n) break; /* the same for the whole warpgroup */
        uint8_t *buf = stage + (n_red & 1) * kRedBytes;
        if (n_red >= 2) {
            if (p.t == 0) sl_tma_store_wait_read<1>();
            sl_named_bar_sync(bar, kWg);
        }
        /* columns n0 + 32 i + 8 jj + 2 q (+ 1): chunk 2 jj + q / 2 of the 128-byte row, 8 (q
         * % 2) bytes into it, the chunk XOR (row % 8) */
        SL_UNROLL
        for (int x = 0; x < 2; x++) {
            const int r = 16 * p.w + p.g + 8 * x;
            const uint32_t u = (uint32_t)((p.q >> 1) ^ (r & 7));
            uint8_t *row = buf + r * 128 + (p.q & 1) * 8;
            SL_UNROLL
            for (int jj = 0; jj < 4; jj++) {
                const int j = 4 * i + jj;
                *(float2 *)(row + (((uint32_t)(2 * jj) ^ u) << 4)) =
                    make_float2(acc[4 * j + 2 * x], acc[4 * j + 2 * x + 1]);
            }
        }
        sl_fence_proxy_async();
        sl_named_bar_sync(bar, kWg);
        if (p.t == 0) {
            sl_tma_reduce_add_4d(tc, buf, n0 + 32 * i, row0, g, 0);
            sl_tma_store_commit();
        }
        n_red++;
    }
}

/* A dW tile's reduction: its group's rows in each segment, walked as one run of BK-row chunks
 * (segment 0's, then 1's, ...; empty ones skipped). The cursor is where the run is: a segment,
 * a chunk in it, and the group's rows there, read from the segment's table in shared memory
 * as the run enters it (no array indexed at run time in registers). */
struct dw_cursor {
    const int *tables; /* segment i's row table at tables + i (groups + 1) */
    int stride, nseg, g;
    int seg, kk, r0, rows; /* segment, chunk in it, the group's first row and rows there */

    /* the first non-empty segment from seg on (seg == nseg: the run is over) */
    __device__ __forceinline__ void enter() {
        for (; seg < nseg; seg++) {
            const int *t = tables + seg * stride;
            r0 = t[g], rows = t[g + 1] - r0;
            if (rows > 0) return;
        }
    }
    __device__ __forceinline__ void next() {
        if (++kk * BK >= rows) {
            kk = 0, seg++;
            enter();
        }
    }
    __device__ __forceinline__ int row() const { return r0 + kk * BK; }
    __device__ __forceinline__ int left() const { return rows - kk * BK; } /* rows from row() */
};
template <int ST>
__device__ __forceinline__ dw_cursor dw_cursor_of(const ring<ST> &R, const sl_gmm_sm90_args &a,
                                                  int g) {
    dw_cursor d = {R.row_start, a.groups + 1, a.nseg, g, 0, 0, 0, 0};
    d.enter();
    return d;
}
/* The chunks of group g's reduction over all segments. */
template <int ST>
__device__ __forceinline__ int dw_chunks(const ring<ST> &R, const sl_gmm_sm90_args &a, int g) {
    int n = 0;
    for (int i = 0; i < a.nseg; i++) {
        const int *t = R.row_start + i * (a.groups + 1);
        n += (t[g + 1] - t[g] + BK - 1) / BK;
    }
    return n;
}

/* The weight gradient's tensor maps, one kernel parameter: dY and X of each segment (those
 * past nseg unused), and dW as the add reductions' target (else any valid map). A map is
 * picked by its segment at run time: its address in the parameter space, as TMA takes it. */
struct dw_maps {
    CUtensorMap dy[SL_DW_MAX_SEGMENTS], x[SL_DW_MAX_SEGMENTS], c;
};

template <int BN, bool RED>
__global__ void __launch_bounds__(kThreads, 1)
    dw_kernel(const __grid_constant__ dw_maps maps, const sl_gmm_sm90_args a) {
    using L = layout<BN, RED>;
    SL_DYNAMIC_SMEM_1024(uint8_t, smem);
    const auto R = block_start<BN, RED>(smem, a);
    const int wg = (int)(threadIdx.x / kWg);
    const int m_tiles = (a.m + BM - 1) / BM, n_tiles = (a.n + BN - 1) / BN;
    const int per_group = m_tiles * n_tiles, total = a.groups * per_group;

    /* tile t: group t / per_group, then the row tile of dW, column tile fastest */
    if (wg == 0) { /* producer */
        sl_setmaxnreg_dec<kProducerRegs>();
        if (threadIdx.x != 0) return;
        for (int i = 0; i < a.nseg; i++) {
            sl_tma_prefetch(&maps.dy[i]);
            sl_tma_prefetch(&maps.x[i]);
        }
        int it = 0;
        for (int t = (int)blockIdx.x; t < total; t += (int)gridDim.x) {
            const int g = t / per_group, local = t % per_group;
            const int m0 = (local / n_tiles) * BM, n0 = (local % n_tiles) * BN;
            const int chunks = dw_chunks(R, a, g);
            if (a.prefetch_c && !dw_kept(chunks, a.beta)) prefetch_c_tile<BN>(a, g, m0, n0);
            dw_cursor d = dw_cursor_of(R, a, g);
            for (int kc = 0; kc < chunks; kc++, it++, d.next()) {
                const int s = R.produce(it, left_out(a, SL_EXPERT_GEMM_ABLATE_LOADS)
                                                ? 0u
                                                : L::a_bytes + L::b_bytes),
                          row = d.row();
                if (left_out(a, SL_EXPERT_GEMM_ABLATE_LOADS)) continue;
                const CUtensorMap *mdy = &maps.dy[d.seg], *mx = &maps.x[d.seg];
                uint8_t *sa = smem + L::a + s * L::a_bytes, *sb = smem + L::b + s * L::b_bytes;
                for (int c = 0; c < BM / 64; c++)
                    sl_tma_load_2d(sa + c * (BK * 128), mdy, &R.full[s], m0 + 64 * c, row);
                for (int c = 0; c < BN / 64; c++)
                    sl_tma_load_2d(sb + c * (BK * 128), mx, &R.full[s], n0 + 64 * c, row);
            }
        }
        return;
    }

    sl_setmaxnreg_inc<kConsumerRegs>();
    const int c = wg - 1;
    const sl_wg_lane p = sl_wg_lane_of();
    float acc[BN / 2];
    int it = 0, n_red = 0;
    for (int t = (int)blockIdx.x; t < total; t += (int)gridDim.x) {
        const int g = t / per_group, local = t % per_group;
        const int m0 = (local / n_tiles) * BM, n0 = (local % n_tiles) * BN;
        const int chunks = dw_chunks(R, a, g);
        float *row[2];
        SL_UNROLL
        for (int x = 0; x < 2; x++) {
            const int r = m0 + 64 * c + 16 * p.w + p.g + 8 * x;
            row[x] = r < a.m ? (float *)a.c + ((int64_t)g * a.m + r) * a.n : nullptr;
        }
        float *slot = a.sq ? a.sq + ((int64_t)t * kConsumers + c) * 4 + p.w : nullptr;
        if (dw_kept(chunks, a.beta)) {
            if (slot && !left_out(a, SL_EXPERT_GEMM_ABLATE_EPILOGUE))
                tile_squares<BN>(acc, row, n0, a.n, true, slot, p);
            continue;
        }
        /* zero first, every wgmma accumulates: an empty group's tile is all zeros, and no
         * branch around the wgmmas (one made ptxas serialize them, C7518) */
        SL_UNROLL
        for (int i = 0; i < BN / 2; i++) acc[i] = 0.0f;
        dw_cursor d = dw_cursor_of(R, a, g);
        for (int kc = 0; kc < chunks; kc++, it++, d.next()) {
            const int s = R.consume(it);
            uint8_t *sa = smem + L::a + s * L::a_bytes, *sb = smem + L::b + s * L::b_bytes;
            /* the last chunk of the group in a segment: the next group's rows count as zeros
             * (skipping the k-slices past the group instead made ptxas serialize the wgmmas,
             * C7520: a branch around them; the padding is at most 63 rows of the group's
             * reduction per segment) */
            const int kv = d.left();
            if (kv < BK) {
                zero_rows_from(sa + c * (BK * 128), kv, p.t);
                for (int cc = c; cc < BN / 64; cc += 2)
                    zero_rows_from(sb + cc * (BK * 128), kv, p.t);
                sl_fence_proxy_async();
                sl_named_bar_sync(kBarPair, kConsumerThreads);
            }
            const uint64_t da = desc_mn(sa, 64 * c), db = desc_mn(sb, 0);
            sl_wgmma_fence_operand(acc);
            sl_wgmma_fence();
            SL_UNROLL
            for (int kk = 0; kk < BK / 16; kk++)
                sl_wgmma_bf16_ss<BN, 1, 1>(acc, mnslice(da, kk), mnslice(db, kk), 1);
            sl_wgmma_commit();
            sl_wgmma_wait<1>();
            sl_wgmma_fence_operand(acc);
            if (kc > 0) R.release(it - 1);
        }
        sl_wgmma_wait<0>();
        sl_wgmma_fence_operand(acc);
        if (chunks > 0) R.release(it - 1);
        if (left_out(a, SL_EXPERT_GEMM_ABLATE_EPILOGUE)) continue;

        /* epilogue: dW rows m0 + this consumer's 64 below R */
        if constexpr (RED) {
            reduce_tile<BN>(acc, smem + L::red + 2 * c * L::red_bytes, &maps.c, g, m0 + 64 * c, n0,
                            a.n, p, kBarWg + c, n_red);
        } else {
            store_tile<BN>(acc, row, n0, a.n, a.beta, p.q);
            if (slot) tile_squares<BN>(acc, row, n0, a.n, false, slot, p);
        }
    }
    if constexpr (RED) {
        if (p.t == 0) sl_tma_store_wait<0>(); /* the staging buffers live until read */
    }
}

/* dW [groups][m][n] fp32 as the add reductions' target: boxes of 32 columns x 64 rows (one
 * consumer's), 128B swizzle; 4D ({n, m, groups, 1}) for the 4D reduction wrapper. */
CUtensorMap dw_map(void *p, int64_t n, int64_t m, int64_t groups, const char *op) {
    CUtensorMap t;
    const cuuint64_t dims[4] = {(cuuint64_t)n, (cuuint64_t)m, (cuuint64_t)groups, 1};
    const cuuint64_t strides[3] = {(cuuint64_t)n * 4, (cuuint64_t)(n * m * 4),
                                   (cuuint64_t)(n * m * groups * 4)};
    const cuuint32_t box[4] = {32, 64, 1, 1};
    const CUresult r = sl_tensor_map_tiled(&t, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, p, dims, strides,
                                           box, SL_SWIZZLE_128B);
    SL_CHECK(r == CUDA_SUCCESS,
             "%s: cuTensorMapEncodeTiled failed (%d) for the [%lld, %lld, %lld] fp32 dW", op,
             (int)r, (long long)groups, (long long)m, (long long)n);
    return t;
}

template <int BN, bool RED>
void launch_dw(const dw_maps &m, const sl_gmm_sm90_args &a, int64_t tiles) {
    const size_t smem = layout<BN, RED>::bytes(a.groups, a.nseg > 2 ? a.nseg : 2);
    sl_cuda_raise_smem<dw_kernel<BN, RED>>(smem, "grouped_matmul_dw");
    SL_LAUNCH((dw_kernel<BN, RED>), dim3(grid_for(a.ctx, tiles)), dim3(kThreads), smem,
              sl_cuda_stream(a.ctx), m, a);
}

/* Whether the weight gradient prefetches its old dW tiles (SLUICE_EXPERT_GEMM_PREFETCH=1). Off
 * by default: on an H200 (2026-11-26) the step at 4 x 1 x 4096 took 346.6 ms with it and 344.2
 * without (weight gradient 63.4 against 61.2 ms; docs/performance.md). */
int prefetch_c_enabled(void) {
    static const int on = env_switch("SLUICE_EXPERT_GEMM_PREFETCH");
    return on;
}

/* Whether the weight gradient with beta 1 adds its tiles to dW by TMA add reductions
 * (SLUICE_EXPERT_GEMM_DW_REDUCE=1) instead of reading the old dW into registers. Off by default
 * until a GPU has measured it (docs/performance.md). The sum is the same fp32 addition either
 * way (old + new, round to nearest; whether L2's reduction keeps subnormals as the SM does is
 * not established). */
int dw_reduce_enabled(void) {
    static const int on = env_switch("SLUICE_EXPERT_GEMM_DW_REDUCE");
    return on;
}

} // namespace

bool sl_cuda_grouped_dw_sm90(void *ctx, sl_tensor *dw, const sl_dw_segment *segs, int nseg,
                             int groups, float beta, sl_tensor *sumsq, bool loud) {
    static const char *op = "grouped_matmul_dw";
    const int64_t r = dw->shape[1], s = dw->shape[2];
    /* the segments with rows (no tensor map over no rows; an empty segment adds nothing) */
    const sl_dw_segment *use[SL_DW_MAX_SEGMENTS];
    int n = 0;
    for (int i = 0; i < nseg && i < SL_DW_MAX_SEGMENTS; i++)
        if (segs[i].counts.rows > 0) use[n++] = &segs[i];
    static bool said = false;
    const char *why = nseg > SL_DW_MAX_SEGMENTS ? "more segments than it takes" : nullptr;
    for (int i = 0; i < n && !why; i++) {
        const sl_dw_segment *g = use[i];
        const bool types_ok =
            g->dy->dtype == SL_BF16 && g->x->dtype == SL_BF16 && dw->dtype == SL_F32;
        why = why_not<dw_kernel<128, false>>(ctx, types_ok, r, s, groups, g->counts.rows,
                                             g->dy->data, g->x->data, dw->data);
    }
    if (!note(op, &said, why, loud)) return false;
    if (n == 0) return false; /* no tensor map over no rows: auto's path scales dW by beta */
    const unsigned ablate = sl_cuda_grouped_sm90_ablation();
    const int bn = s > 128 && !(ablate & SL_EXPERT_GEMM_ABLATE_WIDE_TILES) ? 256 : 128;
    const int64_t tiles = (int64_t)groups * ((r + BM - 1) / BM) * ((s + bn - 1) / bn);
    if (tiles >= INT32_MAX) return false;
    sl_gmm_sm90_args args = {};
    args.ctx = ctx, args.groups = groups, args.nseg = n;
    dw_maps m;
    for (int i = 0; i < n; i++) {
        const sl_dw_segment *g = use[i];
        args.seg_counts[i] = device_counts(ctx, &g->counts, groups);
        m.dy[i] = bf16_map(g->dy->data, r, g->counts.rows, 0, BK, op);
        m.x[i] = bf16_map(g->x->data, s, g->counts.rows, 0, BK, op);
    }
    for (int i = n; i < SL_DW_MAX_SEGMENTS; i++) m.dy[i] = m.dy[0], m.x[i] = m.x[0];
    args.m = (int)r, args.n = (int)s, args.c = dw->data, args.beta = beta;
    args.ablate = ablate;
    args.prefetch_c = beta != 0.0f && prefetch_c_enabled(); /* beta 0 reads no old dW */
    /* the add-reduction epilogue adds to the old dW: beta 1 only (and not with the prefetch,
     * which serves the read-modify-write, nor with sumsq, whose squares need the sums) */
    const bool red = beta == 1.0f && dw_reduce_enabled() && !args.prefetch_c && !sumsq;
    const int64_t slots = tiles * kConsumers * 4; /* a partial per consumer warp and tile */
    if (sumsq) args.sq = (float *)sl_cuda_scratch(ctx, 3, sizeof(float) * (size_t)slots);
    m.c = red ? dw_map(dw->data, s, r, groups, op) : m.dy[0];
    if (bn == 256)
        red ? launch_dw<256, true>(m, args, tiles) : launch_dw<256, false>(m, args, tiles);
    else
        red ? launch_dw<128, true>(m, args, tiles) : launch_dw<128, false>(m, args, tiles);
    SL_CUDA_LAUNCHED(op);
    if (sumsq) sl_cuda_reduce_add(ctx, (float *)sumsq->data, args.sq, slots, false);
    return true;
}
