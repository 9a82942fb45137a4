/*
 * tests/test_ptx_sm90_gemm.cu - the Hopper pieces composed the way the attention kernel uses
 * them (part of test_ptx_sm90): O = sum over key tiles j of bf16(scale * Q K_j^T) V_j, i.e.
 * attention without the softmax, for a 64-row query tile per block.
 *
 * Warpgroup 0 is the producer: setmaxnreg.dec, then one thread loads Q once and K_j, V_j
 * through a two-stage ring of TMA tiles (128B swizzle), each stage guarded by a "full"
 * mbarrier (TMA transaction bytes) and an "empty" one (128 consumer arrivals), so the phases
 * wrap. Warpgroup 1 consumes: setmaxnreg.inc, S = Q K^T as four chained k-slices from shared
 * memory (both K-major), P = bf16(scale * S) turned into A fragments in registers, O += P V
 * (A from registers, V MN-major), then the epilogue writes O as bf16 into a swizzled shared
 * tile, fences it for the async proxy, meets at a named barrier (the producer does not take
 * part) and one thread stores it with TMA. Lengths are not multiples of 64: the last key tile
 * and the second query tile stick out of their tensors (zero fill on load, clipped on store).
 */
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/cuda_common.cuh"
#include "core/ptx_sm90.cuh"
#include "tests/test_ptx_sm90.h"

namespace {

constexpr uint32_t kTileBytes = 64 * 64 * 2; /* a 64 x 64 bf16 tile, 128-byte rows */
/* Dynamic shared memory: Q, K[2], V[2], O (1024-aligned tiles), then the mbarriers. */
constexpr uint32_t kQ = 0, kK = kTileBytes, kV = 3 * kTileBytes, kO = 5 * kTileBytes,
                   kBars = 6 * kTileBytes, kSmem = kBars + 64;

__global__ void __launch_bounds__(256, 1)
    attn_like_kernel(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tk,
                     const __grid_constant__ CUtensorMap tv, const __grid_constant__ CUtensorMap to,
                     int ntiles, float scale) {
    SL_DYNAMIC_SMEM_1024(uint8_t, smem);
    uint64_t *q_full = (uint64_t *)(smem + kBars), *kv_full = q_full + 1, *kv_empty = q_full + 3;
    const int t = threadIdx.x, row0 = blockIdx.x * 64;
    if (t == 0) {
        sl_mbar_init(q_full, 1);
        for (int s = 0; s < 2; s++) {
            sl_mbar_init(&kv_full[s], 1);
            sl_mbar_init(&kv_empty[s], 128);
        }
        sl_fence_mbarrier_init();
    }
    __syncthreads();
    if (t < 128) { /* producer warpgroup */
        sl_setmaxnreg_dec<40>();
        if (t == 0) {
            sl_tma_prefetch(&tk);
            sl_tma_prefetch(&tv);
            sl_mbar_arrive_expect_tx(q_full, kTileBytes);
            sl_tma_load_2d(smem + kQ, &tq, q_full, 0, row0);
            for (int j = 0; j < ntiles; j++) {
                const int s = j % 2;
                if (j >= 2) sl_mbar_wait(&kv_empty[s], (uint32_t)((j / 2 - 1) & 1));
                sl_mbar_arrive_expect_tx(&kv_full[s], 2 * kTileBytes);
                sl_tma_load_2d(smem + kK + s * kTileBytes, &tk, &kv_full[s], 0, 64 * j);
                sl_tma_load_2d(smem + kV + s * kTileBytes, &tv, &kv_full[s], 0, 64 * j);
            }
        }
        return;
    }
    sl_setmaxnreg_inc<232>();
    const int i = t - 128, w = i / 32, g = (i % 32) / 4, q = i % 4;
    float o[32];
    sl_mbar_wait(q_full, 0);
    const uint64_t dq = sl_wgmma_desc(smem + kQ, SL_SWIZZLE_128B, 16, 1024);
    for (int j = 0; j < ntiles; j++) {
        const int s = j % 2;
        sl_mbar_wait(&kv_full[s], (uint32_t)((j / 2) & 1));
        /* S = Q K^T: k = head dim, four 16-wide slices 32 bytes apart along the swizzled rows. */
        float sacc[32];
        const uint64_t dk = sl_wgmma_desc(smem + kK + s * kTileBytes, SL_SWIZZLE_128B, 16, 1024);
        sl_wgmma_fence_operand(sacc);
        sl_wgmma_fence();
        for (int k = 0; k < 4; k++)
            sl_wgmma_bf16_ss<64, 0, 0>(sacc, sl_wgmma_desc_add(dq, 32 * k),
                                       sl_wgmma_desc_add(dk, 32 * k), k > 0);
        sl_wgmma_commit();
        sl_wgmma_wait<0>();
        sl_wgmma_fence_operand(sacc);
        /* O += P V: k = key, V's tile [key][dim] is N-major; the slice of keys 16k.. starts 16
         * rows (2048 bytes) further. */
        uint32_t pa[4][4];
        for (int r = 0; r < 32; r++) sacc[r] *= scale;
        for (int k = 0; k < 4; k++) {
            sl_wgmma_acc_to_a(pa[k], sacc, k);
            sl_wgmma_fence_operand(pa[k]);
        }
        const uint64_t dv =
            sl_wgmma_desc(smem + kV + s * kTileBytes, SL_SWIZZLE_128B, kTileBytes, 1024);
        sl_wgmma_fence_operand(o);
        sl_wgmma_fence();
        for (int k = 0; k < 4; k++)
            sl_wgmma_bf16_rs<64, 1>(o, pa[k], sl_wgmma_desc_add(dv, 2048 * k), j > 0 || k > 0);
        sl_wgmma_commit();
        sl_wgmma_wait<0>();
        sl_wgmma_fence_operand(o);
        for (int k = 0; k < 4; k++) sl_wgmma_fence_operand(pa[k]);
        sl_mbar_arrive(&kv_empty[s]); /* this thread is done with stage s */
    }
    /* Epilogue: O as bf16 into the 128B-swizzled tile [64][64] a TMA store reads. */
    for (int r = 0; r < 32; r += 2) {
        const int row = 16 * w + g + 8 * ((r % 4) >> 1), col = 8 * (r / 4) + 2 * q;
        const uint32_t off = sl_swizzle_offset(SL_SWIZZLE_128B, (uint32_t)(row * 128 + col * 2));
        *(uint32_t *)(smem + kO + off) = sl_pack_bf16x2(o[r], o[r + 1]);
    }
    sl_fence_proxy_async();
    sl_named_bar_sync(1, 128);
    if (i == 0) {
        sl_tma_store_2d(&to, smem + kO, 0, row0);
        sl_tma_store_commit();
        sl_tma_store_wait<0>();
    }
}

CUtensorMap rows64_map(const void *p, int rows) {
    CUtensorMap m;
    const cuuint64_t dims[2] = {64, (cuuint64_t)rows}, strides[1] = {128};
    const cuuint32_t box[2] = {64, 64};
    const CUresult r = sl_tensor_map_tiled(&m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, p, dims,
                                           strides, box, SL_SWIZZLE_128B);
    CHECK(r == CUDA_SUCCESS, "cuTensorMapEncodeTiled (%d rows of 64 bf16): %d", rows, (int)r);
    return m;
}

} // namespace

int test_gemm_example(bool emulated) {
    const int lq = 100, lk = 200, ntiles = (lk + 63) / 64, qrows = 128;
    const float scale = 0.125f;
    std::mt19937 rng(77);
    const std::vector<uint16_t> Q = random_bf16(rng, (size_t)lq * 64),
                                K = random_bf16(rng, (size_t)lk * 64),
                                V = random_bf16(rng, (size_t)lk * 64);
    /* Reference in the emulator's order: S over the head dim from +0, P = bf16(scale S), O over
     * all 64 * ntiles keys (the padding ones are zeros) from +0. */
    std::vector<uint16_t> want((size_t)qrows * 64, 0x7fbf); /* rows >= lq keep the sentinel */
    std::vector<float> ref((size_t)lq * 64), mag((size_t)lq * 64);
    std::vector<float> P((size_t)ntiles * 64);
    for (int r = 0; r < lq; r++) {
        for (int key = 0; key < ntiles * 64; key++) {
            float acc = 0.0f;
            for (int d = 0; d < 64; d++)
                acc += float_of_bf16(Q[(size_t)r * 64 + d]) *
                       (key < lk ? float_of_bf16(K[(size_t)key * 64 + d]) : 0.0f);
            P[key] = float_of_bf16(bf16_of(acc * scale));
        }
        for (int n = 0; n < 64; n++) {
            float acc = 0.0f, m = 0.0f;
            for (int key = 0; key < ntiles * 64; key++) {
                const float p = P[key] * (key < lk ? float_of_bf16(V[(size_t)key * 64 + n]) : 0.0f);
                acc += p;
                m += fabsf(p);
            }
            ref[(size_t)r * 64 + n] = acc;
            mag[(size_t)r * 64 + n] = m;
            want[(size_t)r * 64 + n] = bf16_of(acc);
        }
    }
    uint16_t *dq = to_device(Q), *dk = to_device(K), *dv = to_device(V);
    uint16_t *dout = to_device(std::vector<uint16_t>((size_t)qrows * 64, 0x7fbf));
    const CUtensorMap tq = rows64_map(dq, lq), tk = rows64_map(dk, lk), tv = rows64_map(dv, lk),
                      to = rows64_map(dout, lq);
    CUDA_CHECK(cudaFuncSetAttribute(attn_like_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)kSmem));
    SL_LAUNCH(attn_like_kernel, (lq + 63) / 64, 256, kSmem, 0, tq, tk, tv, to, ntiles, scale);
    CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<uint16_t> out = to_host(dout, (size_t)qrows * 64);
    int bad = 0;
    for (int r = 0; r < qrows; r++)
        for (int n = 0; n < 64; n++) {
            const size_t e = (size_t)r * 64 + n;
            bool ok;
            if (emulated || r >= lq) {
                ok = out[e] == want[e];
            } else {
                const float got = float_of_bf16(out[e]);
                ok = fabsf(got - ref[e]) <= 0.008f * fabsf(ref[e]) + 0.004f * mag[e] + 1e-6f;
            }
            if (!ok && bad++ < 4)
                CHECK(false, "composed kernel: O[%d][%d] = %.6g (0x%04x), want %.6g (0x%04x)%s", r,
                      n, (double)float_of_bf16(out[e]), out[e], (double)float_of_bf16(want[e]),
                      want[e],
                      r >= lq ? " (a row past the tensor: the store must not write it)" : "");
        }
    CHECK(bad == 0,
          "composed kernel (TMA + mbarrier ring + wgmma SS and RS + TMA store): %d of %d "
          "outputs wrong",
          bad, qrows * 64);
    cudaFree(dq), cudaFree(dk), cudaFree(dv), cudaFree(dout);
    return emu_failures;
}
