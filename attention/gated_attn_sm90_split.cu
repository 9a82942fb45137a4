/*
 * attention/gated_attn_sm90_split.cu - the Hopper backward's GQA group split (docs/attention.md,
 * "Work balance"): how many chunks of the group the dK/dV pass (gated_attn_sm90_bwd.cu) splits
 * into, from a simulation of its blocks on the SMs, and the reduce that sums the chunks' fp32
 * partial dK and dV in a fixed order. Host code and one small kernel, apart from the dK/dV
 * kernel itself.
 */
#include <stdlib.h>

#include <algorithm>
#include <vector>

#include "attention/gated_attn_sm90.cuh"
#include "core/env.h"

namespace sl_attn_sm90 {

/* The group split's reduce: dk = bf16(scale sum_c part_k[c]), dv = bf16(sum_c part_v[c]), the
 * chunks c = 0 .. hsplit - 1 in order (fp32, the same bits every run). part: [2][hsplit][slice],
 * slice = tokens x kv x D (a multiple of 4); item i is 4 elements of dk (i < slice / 4) or dv. */
namespace {

__global__ void dkdv_reduce_kernel(sl_bf16 *dk, sl_bf16 *dv, const float *part, int64_t slice,
                                   int hsplit, float scale) {
    const int64_t n4 = slice / 4, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < 2 * n4; i += stride) {
        const bool isv = i >= n4;
        const int64_t e = 4 * (isv ? i - n4 : i);
        const float *src = part + (isv ? hsplit * slice : 0) + e;
        SL_CHECK_ALIGNED(src, 16);
        SL_CHECK_ALIGNED((isv ? dv : dk) + e, 8);
        float4 sum = *(const float4 *)src;
        for (int c = 1; c < hsplit; c++) {
            const float4 t = *(const float4 *)(src + c * slice);
            sum.x += t.x, sum.y += t.y, sum.z += t.z, sum.w += t.w;
        }
        const float f = isv ? 1.0f : scale;
        uint2 out;
        out.x = sl_pack_bf16x2(sum.x * f, sum.y * f);
        out.y = sl_pack_bf16x2(sum.z * f, sum.w * f);
        *(uint2 *)((isv ? dv : dk) + e) = out;
    }
}

} // namespace

/* The workspace of the group split is bounded: past it a smaller split is taken (the split pays
 * off where the problem is small, a few waves, and there the workspace is small too). */
static constexpr size_t kMaxSplitBytes = (size_t)256 << 20;

/* SLUICE_ATTN_SM90_HSPLIT: unset, "" or "auto": 0 (choose_hsplit decides); 1, 2, 4 or 8: that
 * split, or the largest divisor of the GQA group below it. Read at every backward (getenv is
 * cheap next to a launch), so a test can change it between calls. */
static int forced_hsplit(void) {
    static const char *const values[] = {"1", "2", "4", "8", "auto"};
    const int i = sl_env_choice("SLUICE_ATTN_SM90_HSPLIT", values, 5);
    return i < 0 || i == 4 ? 0 : atoi(values[i]);
}

size_t split_bytes(const args &a, int d, int hsplit) {
    return 2 * (size_t)hsplit * (size_t)a.batch * (size_t)a.seq * (size_t)a.kv * (size_t)d *
           sizeof(float);
}

/* The dK/dV pass's makespan in steps when its blocks at split hs run on `sms` SMs, one block
 * per SM, each SM taking the next block in launch order when its previous one ends (the
 * hardware's order: key tiles earliest, so longest, first). A block's time is its steps, grp /
 * hs heads x the query tiles from its key tile's diagonal on; documents only shorten blocks, so
 * the count is the plain causal one. */
static double dkdv_makespan(int nkt, int nqt, int tile_ratio, int heads_per_block, int64_t per_tile,
                            int sms) {
    std::vector<double> sm((size_t)sms, 0.0); /* a min-heap of the SMs' finish times */
    const auto later = [](double x, double y) { return x > y; };
    for (int t = 0; t < nkt; t++) {
        const int qts = nqt - t * tile_ratio;
        const double steps = (double)heads_per_block * (qts > 1 ? qts : 1);
        for (int64_t i = 0; i < per_tile; i++) {
            std::pop_heap(sm.begin(), sm.end(), later);
            sm.back() += steps;
            std::push_heap(sm.begin(), sm.end(), later);
        }
    }
    return *std::max_element(sm.begin(), sm.end());
}

/* How many chunks of the GQA group the dK/dV pass splits into (a divisor of grp). One chunk
 * (the whole group in one block, no workspace) is right when the blocks are many: at 4 blocks
 * per SM or more the greedy schedule ends within about 1% of the balanced time (S 32768, B 1,
 * KV 4: 1,024 blocks). Fewer blocks (S 4096, B 1, KV 4: 128, the first twice the average) leave
 * the longest ones setting the makespan, up to twice the ideal: then every divisor's makespan
 * is simulated (dkdv_makespan) and the smallest split within 1% of the best is taken (fewer
 * chunks: less workspace and a shorter reduce). On an H200 on 2026-11-26 the rule before this
 * one (the smallest split whose longest block is at most half of total / SMs) took 4 at S 4096
 * where 2 measured 3% faster (309 against 300 TFLOP/s at D 128, 206 against 202 at D 64); the
 * simulation gives 2 (makespan 1.00 of the balanced time, 4: 1.02, 1: 2.00). */
int choose_hsplit(const args &a, int d, int bn, int bm, int sms) {
    int want = forced_hsplit();
    if (want == 0) {
        const int nkt = (a.seq + bn - 1) / bn, nqt = (a.seq + bm - 1) / bm;
        const int64_t blocks = (int64_t)nkt * a.batch * a.kv;
        want = 1;
        if (blocks < 4 * (int64_t)sms) {
            double best = 0;
            std::vector<double> span((size_t)a.grp + 1, 0.0);
            for (int hs = 1; hs <= a.grp; hs++) {
                if (a.grp % hs || (hs > 1 && split_bytes(a, d, hs) > kMaxSplitBytes)) continue;
                span[(size_t)hs] =
                    dkdv_makespan(nkt, nqt, bn / bm, a.grp / hs, blocks / nkt * hs, sms);
                if (best == 0 || span[(size_t)hs] < best) best = span[(size_t)hs];
            }
            for (int hs = 1; hs <= a.grp; hs++)
                if (span[(size_t)hs] > 0 && span[(size_t)hs] <= 1.01 * best) {
                    want = hs;
                    break;
                }
        }
    }
    int hs = want < a.grp ? want : a.grp;
    while (hs > 1 && (a.grp % hs != 0 || split_bytes(a, d, hs) > kMaxSplitBytes)) hs--;
    return hs;
}

void launch_dkdv_reduce(const args &a, int d, const float *part, int hsplit, cudaStream_t stream) {
    const int64_t slice = (int64_t)a.batch * a.seq * a.kv * d, items = slice / 2;
    SL_LAUNCH(dkdv_reduce_kernel, dim3(sl_blocks(items < (1 << 24) ? items : 1 << 24, 256)),
              dim3(256), 0, stream, a.dk, a.dv, part, slice, hsplit, a.scale);
    SL_CUDA_LAUNCHED("gated_attn_bwd");
}

} // namespace sl_attn_sm90
