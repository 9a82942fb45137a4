/*
 * attention/rope.cu - rotary embedding in place on x [T, heads, D], rotate-half, on the GPU
 * (CPU twin and formulas: attention/rope_cpu.c).
 *
 * The angle and its cos/sin are evaluated in double, as the CPU twin does: positions reach
 * 131071 with YaRN, where an fp32 product pos * inv_freq is off by up to half an ulp of 1.3e5
 * (8e-3 rad), far above the 1e-6 the fp32 mode is compared at. One cos/sin pair per (token,
 * frequency) serves every head of the token, so the double math is T * rot/2 evaluations per call
 * (cheap on sm_80/sm_90, whose fp64 rate is half the fp32 rate).
 *
 * Parallelization: one thread per (token, frequency i), grid-stride; the thread rotates the pair
 * (i, i + rot/2) of every head of its token. Consecutive threads take consecutive i of a token,
 * so each head's loads and stores are coalesced.
 */
#include "attention/kernels_cuda.h"
#include "attention/rope_angle.cuh"
#include "core/cuda_common.cuh"

namespace {

template <typename T>
__global__ void rope_kernel(T *x, const int32_t *pos, const float *inv_freq, int64_t tokens,
                            int heads, int d, int half, float mscale, int sign) {
    const int64_t n = tokens * half;
    for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < n;
         idx += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = idx / half;
        const int i = (int)(idx - r * half);
        /* The CPU twin's expressions, operation for operation, but for cos/sin
         * (attention/rope_angle.cuh). */
        float c, s;
        sl_rope_coef(pos[r], inv_freq[i], mscale, sign, &c, &s);
        T *row = x + r * heads * d;
        for (int h = 0; h < heads; h++) {
            T *v = row + (int64_t)h * d;
            const float x0 = sl_ld(v[i]), x1 = sl_ld(v[i + half]);
            v[i] = sl_st<T>(x0 * c - x1 * s);
            v[i + half] = sl_st<T>(x1 * c + x0 * s);
        }
    }
}

void rope(void *ctx, sl_tensor *x, const sl_tensor *pos, const sl_tensor *inv_freq, float mscale,
          int sign, const char *op) {
    const int64_t t = x->shape[0], heads = x->shape[1], d = x->shape[2];
    const int64_t half = inv_freq->numel, n = t * half;
    if (n == 0 || heads == 0) return; /* nothing rotates */
    const int threads = 256;
    const int64_t blocks = (n + threads - 1) / threads;
    const unsigned grid = (unsigned)(blocks < (1 << 20) ? blocks : (1 << 20)); /* then stride */
    SL_DISPATCH_FLOAT(x->dtype, T, {
        SL_LAUNCH(rope_kernel<T>, dim3(grid), dim3(threads), 0, sl_cuda_stream(ctx), sl_ptr<T>(x),
                  sl_ptr<int32_t>(pos), sl_ptr<float>(inv_freq), t, (int)heads, (int)d, (int)half,
                  mscale, sign);
    });
    SL_CUDA_LAUNCHED(op);
}

} // namespace

extern "C" void sl_cuda_rope_fwd(void *ctx, sl_tensor *x, const sl_tensor *pos,
                                 const sl_tensor *inv_freq, float mscale) {
    rope(ctx, x, pos, inv_freq, mscale, 1, "rope_fwd");
}

extern "C" void sl_cuda_rope_bwd(void *ctx, sl_tensor *dx, const sl_tensor *pos,
                                 const sl_tensor *inv_freq, float mscale) {
    rope(ctx, dx, pos, inv_freq, mscale, -1, "rope_bwd");
}
