/*
 * tests/emu/test_emu_simt.cu - correct kernels give the right answers on the CPU SIMT test
 * double, under its forward and reverse thread orders (the race check runs every launch under
 * both and would abort on any difference): block reductions, every warp collective against a
 * host model written from the CUDA programming guide's wording, barriers with predicates,
 * atomics, dynamic shared memory, multi-dimensional grids and blocks, partial warps.
 */
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/cuda_common.cuh"
#include "tests/emu/emu_test.h"

/* ---- kernels --------------------------------------------------------------------------------- */

/* One block per row: sum of the row with sl_block_sum (warp shuffles + shared memory). */
__global__ void row_sum_kernel(const float *x, float *out, int n) {
    __shared__ float scratch[32];
    const float *row = x + (size_t)blockIdx.x * n;
    float v = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) v += row[i];
    v = sl_block_sum(v, scratch);
    if (threadIdx.x == 0) out[blockIdx.x] = v;
}

/* A tree reduction in shared memory with a barrier per level (the textbook kernel). */
__global__ void tree_sum_kernel(const int *x, int *out) {
    __shared__ int s[256];
    s[threadIdx.x] = x[blockIdx.x * 256 + threadIdx.x];
    __syncthreads();
    for (int h = 128; h > 0; h >>= 1) {
        if ((int)threadIdx.x < h) s[threadIdx.x] += s[threadIdx.x + h];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = s[0];
}

/* Every shuffle flavour for one width; each thread writes its 4 results. */
__global__ void shuffle_kernel(const int *in, int *out, int width, int arg) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    const int v = in[t];
    out[4 * t + 0] = __shfl_sync(0xffffffffu, v, arg, width);
    out[4 * t + 1] = __shfl_up_sync(0xffffffffu, v, (unsigned)arg, width);
    out[4 * t + 2] = __shfl_down_sync(0xffffffffu, v, (unsigned)arg, width);
    out[4 * t + 3] = __shfl_xor_sync(0xffffffffu, v, arg, width);
}

/* Shuffles of 64-bit and bf16 values. */
__global__ void shuffle_types_kernel(const double *d, double *dout, const sl_bf16 *h,
                                     sl_bf16 *hout) {
    const int t = threadIdx.x;
    dout[t] = __shfl_xor_sync(0xffffffffu, d[t], 5);
    hout[t] = __shfl_down_sync(0xffffffffu, h[t], 3);
}

__global__ void vote_kernel(const int *pred, unsigned *out) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    const int p = pred[t];
    out[8 * t + 0] = __ballot_sync(0xffffffffu, p);
    out[8 * t + 1] = (unsigned)__any_sync(0xffffffffu, p);
    out[8 * t + 2] = (unsigned)__all_sync(0xffffffffu, p);
    out[8 * t + 3] = __reduce_add_sync(0xffffffffu, (unsigned)p);
    out[8 * t + 4] = (unsigned)__reduce_min_sync(0xffffffffu, p - 5);
    out[8 * t + 5] = __reduce_max_sync(0xffffffffu, (unsigned)p);
    out[8 * t + 6] = __match_any_sync(0xffffffffu, p);
    out[8 * t + 7] = __reduce_xor_sync(0xffffffffu, (unsigned)p);
}

/* A partial last warp (48 threads: lanes 0..15 of warp 1) and a half-warp mask. */
__global__ void partial_warp_kernel(const float *x, float *out) {
    const int t = threadIdx.x;
    float v = x[t];
    const unsigned mask = t < 32 ? 0xffffffffu : 0x0000ffffu;
    const int top = t < 32 ? 16 : 8;
    for (int o = top; o > 0; o >>= 1) v += __shfl_xor_sync(mask, v, o);
    __syncwarp(mask);
    out[t] = v;
}

/* __syncwarp waits for the named lanes that have not exited: odd lanes leave, a partial warp
 * names lanes that do not exist; shared memory written before it is read after it. */
__global__ void syncwarp_exit_kernel(int *out) {
    __shared__ int s[64];
    const int t = threadIdx.x;
    if (t % 2) return;
    s[t] = t * 10;
    __syncwarp();
    out[t] = s[t ^ 2];
}

__global__ void barrier_pred_kernel(const int *pred, int *out) {
    const int p = pred[blockIdx.x * blockDim.x + threadIdx.x];
    const int c = __syncthreads_count(p);
    const int a = __syncthreads_and(p);
    const int o = __syncthreads_or(p);
    if (threadIdx.x == 0) {
        out[3 * blockIdx.x + 0] = c;
        out[3 * blockIdx.x + 1] = a;
        out[3 * blockIdx.x + 2] = o;
    }
}

/* Integer atomics: order-independent results. */
__global__ void histogram_kernel(const int *x, int n, unsigned *hist, int *maxv, unsigned *ticket) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        atomicAdd(&hist[x[i] & 15], 1u);
        atomicMax(maxv, x[i]);
        atomicInc(ticket, 1000000u);
    }
}

/* 3D grid and block; dynamic shared memory staged through and reversed within the block. */
__global__ void index_kernel(unsigned *out) {
    SL_DYNAMIC_SMEM(unsigned, stage);
    const unsigned nt = blockDim.x * blockDim.y * blockDim.z;
    const unsigned lt = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    const unsigned lb = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    stage[lt] = lb * 1000u + lt;
    __syncthreads();
    out[lb * nt + lt] = stage[nt - 1 - lt];
}

/* Uses 100 KiB of dynamic shared memory (needs cudaFuncSetAttribute). */
__global__ void big_smem_kernel(float *out) {
    SL_DYNAMIC_SMEM(float, s);
    const int n = 100 * 1024 / 4;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s[i] = (float)i;
    __syncthreads();
    float acc = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) acc += s[n - 1 - i];
    out[threadIdx.x] = acc;
}

/* Device math CUDA has and libm lacks. */
__global__ void math_kernel(float *out, unsigned *bits) {
    out[0] = rsqrtf(4.0f);
    out[1] = __expf(1.0f);
    out[2] = __saturatef(1.5f);
    out[3] = __int_as_float(0x3f800000);
    out[4] = min(2.0f, -3.0f);
    out[5] = (float)max(3, 7);
    out[6] = __fdividef(1.0f, 4.0f);
    out[7] = __ldg(&out[0]);
    bits[0] = (unsigned)__popc(0xf0f0u);
    bits[1] = (unsigned)__clz(1);
    bits[2] = (unsigned)__ffs(8);
    bits[3] = __brev(1u);
    bits[4] = __float_as_uint(1.0f);
    bits[5] = min(5u, 9u);
}

/* ---- host models (from the programming guide's description, not from the emulator's code) - */

static int model_shfl(const std::vector<int> &v, int base, int lane, int kind, int arg, int width) {
    const int seg = lane / width * width, in = lane % width;
    switch (kind) {
    case 0:
        return v[base + seg + arg % width]; /* srcLane modulo width, within the segment */
    case 1:
        return in >= arg ? v[base + lane - arg] : v[base + lane]; /* up: no wrap */
    case 2:
        return in + arg < width ? v[base + lane + arg] : v[base + lane]; /* down: no wrap */
    default: {
        /* xor: earlier segments are readable, later ones give the caller its own value */
        const int src = lane ^ arg;
        return src / width > lane / width ? v[base + lane] : v[base + src];
    }
    }
}

int main() {
    /* Row sums through sl_block_sum: 37 rows of 1000, 256 threads. */
    {
        const int rows = 37, n = 1000;
        std::vector<float> x((size_t)rows * n), out(rows);
        for (size_t i = 0; i < x.size(); i++) x[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
        float *dx, *dout;
        CUDA_CHECK(cudaMalloc((void **)&dx, x.size() * 4));
        CUDA_CHECK(cudaMalloc((void **)&dout, rows * 4));
        CUDA_CHECK(cudaMemcpy(dx, x.data(), x.size() * 4, cudaMemcpyHostToDevice));
        SL_LAUNCH(row_sum_kernel, rows, 256, 0, 0, dx, dout, n);
        CUDA_CHECK(cudaGetLastError());
        CUDA_CHECK(cudaMemcpy(out.data(), dout, rows * 4, cudaMemcpyDeviceToHost));
        double worst = 0;
        for (int r = 0; r < rows; r++) {
            double s = 0;
            for (int i = 0; i < n; i++) s += x[(size_t)r * n + i];
            worst = std::max(worst, std::fabs(s - out[r]));
        }
        CHECK(worst < 1e-3, "sl_block_sum row sums: worst error %g", worst);
        cudaFree(dx);
        cudaFree(dout);
    }
    /* Tree reduction: exact integers. */
    {
        const int blocks = 9;
        std::vector<int> x(blocks * 256), out(blocks);
        for (size_t i = 0; i < x.size(); i++) x[i] = (int)(i % 97) - 40;
        int *dx, *dout;
        CUDA_CHECK(cudaMalloc((void **)&dx, x.size() * 4));
        CUDA_CHECK(cudaMalloc((void **)&dout, blocks * 4));
        CUDA_CHECK(cudaMemcpy(dx, x.data(), x.size() * 4, cudaMemcpyHostToDevice));
        SL_LAUNCH(tree_sum_kernel, blocks, 256, 0, 0, dx, dout);
        CUDA_CHECK(cudaGetLastError());
        CUDA_CHECK(cudaMemcpy(out.data(), dout, blocks * 4, cudaMemcpyDeviceToHost));
        bool ok = true;
        for (int b = 0; b < blocks; b++) {
            int s = 0;
            for (int i = 0; i < 256; i++) s += x[b * 256 + i];
            ok &= s == out[b];
        }
        CHECK(ok, "shared-memory tree reduction");
        cudaFree(dx);
        cudaFree(dout);
    }
    /* Shuffles: widths 32, 16, 8, 4, 2, 1 with several lane arguments, 3 warps. */
    {
        const int nt = 96;
        std::vector<int> in(nt), out(4 * nt);
        for (int i = 0; i < nt; i++) in[i] = 1000 + i * 3;
        int *din, *dout;
        CUDA_CHECK(cudaMalloc((void **)&din, nt * 4));
        CUDA_CHECK(cudaMalloc((void **)&dout, 4 * nt * 4));
        CUDA_CHECK(cudaMemcpy(din, in.data(), nt * 4, cudaMemcpyHostToDevice));
        int bad = 0;
        for (int width = 32; width >= 1; width >>= 1)
            for (int arg : {0, 1, 3, 5, 16, 31}) {
                if (arg >= width && arg != 0) continue;
                SL_LAUNCH(shuffle_kernel, 1, nt, 0, 0, din, dout, width, arg);
                CUDA_CHECK(cudaGetLastError());
                CUDA_CHECK(cudaMemcpy(out.data(), dout, 4 * nt * 4, cudaMemcpyDeviceToHost));
                for (int t = 0; t < nt; t++)
                    for (int k = 0; k < 4; k++) {
                        const int want = model_shfl(in, t / 32 * 32, t % 32, k, arg, width);
                        if (out[4 * t + k] != want && bad++ < 5)
                            fprintf(stderr,
                                    "shuffle kind %d width %d arg %d thread %d: %d, want %d\n", k,
                                    width, arg, t, out[4 * t + k], want);
                    }
            }
        /* xor across a segment boundary to a later segment: the caller's own value */
        CHECK(bad == 0, "shuffles match the programming guide's model (%d mismatches)", bad);
        cudaFree(din);
        cudaFree(dout);
    }
    /* 64-bit and bf16 shuffles. */
    {
        std::vector<double> d(32), dout(32);
        std::vector<sl_bf16> h(32), hout(32);
        for (int i = 0; i < 32; i++) {
            d[i] = 1.0 / (i + 1);
            h[i] = __float2bfloat16_rn((float)i * 0.25f);
        }
        double *dd, *ddo;
        sl_bf16 *dh, *dho;
        CUDA_CHECK(cudaMalloc((void **)&dd, 32 * 8));
        CUDA_CHECK(cudaMalloc((void **)&ddo, 32 * 8));
        CUDA_CHECK(cudaMalloc((void **)&dh, 32 * 2));
        CUDA_CHECK(cudaMalloc((void **)&dho, 32 * 2));
        CUDA_CHECK(cudaMemcpy(dd, d.data(), 32 * 8, cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemcpy(dh, h.data(), 32 * 2, cudaMemcpyHostToDevice));
        SL_LAUNCH(shuffle_types_kernel, 1, 32, 0, 0, dd, ddo, dh, dho);
        CUDA_CHECK(cudaGetLastError());
        CUDA_CHECK(cudaMemcpy(dout.data(), ddo, 32 * 8, cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy(hout.data(), dho, 32 * 2, cudaMemcpyDeviceToHost));
        bool ok = true;
        for (int i = 0; i < 32; i++) {
            ok &= dout[i] == d[i ^ 5];
            ok &= __bfloat162float(hout[i]) == __bfloat162float(h[i + 3 < 32 ? i + 3 : i]);
        }
        CHECK(ok, "double and bf16 shuffles");
        cudaFree(dd);
        cudaFree(ddo);
        cudaFree(dh);
        cudaFree(dho);
    }
    /* Votes, reductions, match over 2 warps. */
    {
        const int nt = 64;
        std::vector<int> p(nt);
        std::vector<unsigned> out(8 * nt);
        for (int i = 0; i < nt; i++) p[i] = (i * 5 + 1) % 7 < 3 ? (i % 4) : 0;
        int *dp;
        unsigned *dout;
        CUDA_CHECK(cudaMalloc((void **)&dp, nt * 4));
        CUDA_CHECK(cudaMalloc((void **)&dout, 8 * nt * 4));
        CUDA_CHECK(cudaMemcpy(dp, p.data(), nt * 4, cudaMemcpyHostToDevice));
        SL_LAUNCH(vote_kernel, 1, nt, 0, 0, dp, dout);
        CUDA_CHECK(cudaGetLastError());
        CUDA_CHECK(cudaMemcpy(out.data(), dout, 8 * nt * 4, cudaMemcpyDeviceToHost));
        int bad = 0;
        for (int t = 0; t < nt; t++) {
            const int w = t / 32 * 32;
            unsigned ballot = 0, sum = 0, mx = 0, x = 0, match = 0;
            int mn = 1 << 30;
            for (int j = 0; j < 32; j++) {
                const int q = p[w + j];
                if (q) ballot |= 1u << j;
                sum += (unsigned)q;
                mx = std::max(mx, (unsigned)q);
                mn = std::min(mn, q - 5);
                x ^= (unsigned)q;
                if (q == p[t]) match |= 1u << j;
            }
            const unsigned want[8] = {
                ballot, ballot != 0, ballot == 0xffffffffu, sum, (unsigned)mn, mx, match, x};
            for (int k = 0; k < 8; k++) bad += out[8 * t + k] != want[k];
        }
        CHECK(bad == 0, "ballot/any/all/reduce/match (%d mismatches)", bad);
        cudaFree(dp);
        cudaFree(dout);
    }
    /* A partial last warp with a half-warp mask. */
    {
        std::vector<float> x(48), out(48);
        for (int i = 0; i < 48; i++) x[i] = (float)(i + 1);
        float *dx, *dout;
        CUDA_CHECK(cudaMalloc((void **)&dx, 48 * 4));
        CUDA_CHECK(cudaMalloc((void **)&dout, 48 * 4));
        CUDA_CHECK(cudaMemcpy(dx, x.data(), 48 * 4, cudaMemcpyHostToDevice));
        SL_LAUNCH(partial_warp_kernel, 1, 48, 0, 0, dx, dout);
        CUDA_CHECK(cudaGetLastError());
        CUDA_CHECK(cudaMemcpy(out.data(), dout, 48 * 4, cudaMemcpyDeviceToHost));
        bool ok = true;
        for (int t = 0; t < 32; t++) ok &= out[t] == 528.0f;               /* 1 + ... + 32 */
        for (int t = 32; t < 48; t++) ok &= out[t] == 33.0f * 16 + 120.0f; /* 33 + ... + 48 */
        CHECK(ok, "partial warp with a 16-lane mask (got %g and %g)", out[0], out[40]);
        cudaFree(dx);
        cudaFree(dout);
    }
    /* __syncwarp with exited and non-existent lanes in its mask. */
    {
        int *dout;
        std::vector<int> out(48, -1);
        CUDA_CHECK(cudaMalloc((void **)&dout, 48 * 4));
        CUDA_CHECK(cudaMemcpy(dout, out.data(), 48 * 4, cudaMemcpyHostToDevice));
        SL_LAUNCH(syncwarp_exit_kernel, 1, 48, 0, 0, dout);
        CUDA_CHECK(cudaGetLastError());
        CUDA_CHECK(cudaMemcpy(out.data(), dout, 48 * 4, cudaMemcpyDeviceToHost));
        bool ok = true;
        for (int t = 0; t < 48; t++) ok &= out[t] == (t % 2 ? -1 : (t ^ 2) * 10);
        CHECK(ok, "__syncwarp after lanes exited, in a partial warp");
        cudaFree(dout);
    }
    /* __syncthreads_count/and/or. */
    {
        const int blocks = 3, nt = 128;
        std::vector<int> p(blocks * nt), out(3 * blocks);
        for (int i = 0; i < blocks * nt; i++) p[i] = i / nt == 1 ? 1 : (i % 3 == 0);
        int *dp, *dout;
        CUDA_CHECK(cudaMalloc((void **)&dp, p.size() * 4));
        CUDA_CHECK(cudaMalloc((void **)&dout, out.size() * 4));
        CUDA_CHECK(cudaMemcpy(dp, p.data(), p.size() * 4, cudaMemcpyHostToDevice));
        SL_LAUNCH(barrier_pred_kernel, blocks, nt, 0, 0, dp, dout);
        CUDA_CHECK(cudaGetLastError());
        CUDA_CHECK(cudaMemcpy(out.data(), dout, out.size() * 4, cudaMemcpyDeviceToHost));
        CHECK(out[0] == 43 && out[1] == 0 && out[2] == 1, "block 0: count %d and %d or %d", out[0],
              out[1], out[2]);
        CHECK(out[3] == 128 && out[4] == 1 && out[5] == 1, "block 1: count %d and %d or %d", out[3],
              out[4], out[5]);
    }
    /* Integer atomics. */
    {
        const int n = 5000;
        std::vector<int> x(n);
        for (int i = 0; i < n; i++) x[i] = (i * 37) % 1001;
        int *dx, *dmax;
        unsigned *dhist, *dticket;
        CUDA_CHECK(cudaMalloc((void **)&dx, n * 4));
        CUDA_CHECK(cudaMalloc((void **)&dhist, 16 * 4));
        CUDA_CHECK(cudaMalloc((void **)&dmax, 4));
        CUDA_CHECK(cudaMalloc((void **)&dticket, 4));
        CUDA_CHECK(cudaMemcpy(dx, x.data(), n * 4, cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemset(dhist, 0, 16 * 4));
        CUDA_CHECK(cudaMemset(dmax, 0, 4));
        CUDA_CHECK(cudaMemset(dticket, 0, 4));
        SL_LAUNCH(histogram_kernel, 7, 128, 0, 0, dx, n, dhist, dmax, dticket);
        CUDA_CHECK(cudaGetLastError());
        unsigned hist[16], ticket;
        int mx;
        CUDA_CHECK(cudaMemcpy(hist, dhist, sizeof hist, cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy(&mx, dmax, 4, cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy(&ticket, dticket, 4, cudaMemcpyDeviceToHost));
        unsigned want[16] = {0};
        for (int i = 0; i < n; i++) want[x[i] & 15]++;
        CHECK(memcmp(hist, want, sizeof want) == 0 && mx == 1000 && ticket == (unsigned)n,
              "atomics: max %d ticket %u", mx, ticket);
    }
    /* 3D grid and block with dynamic shared memory. */
    {
        const dim3 grid(3, 2, 2), block(4, 3, 5);
        const unsigned nt = 60, nb = 12;
        std::vector<unsigned> out(nt * nb);
        unsigned *dout;
        CUDA_CHECK(cudaMalloc((void **)&dout, out.size() * 4));
        SL_LAUNCH(index_kernel, grid, block, nt * 4, 0, dout);
        CUDA_CHECK(cudaGetLastError());
        CUDA_CHECK(cudaMemcpy(out.data(), dout, out.size() * 4, cudaMemcpyDeviceToHost));
        bool ok = true;
        for (unsigned b = 0; b < nb; b++)
            for (unsigned t = 0; t < nt; t++) ok &= out[b * nt + t] == b * 1000u + (nt - 1 - t);
        CHECK(ok, "3D indices and dynamic shared memory");
        cudaFree(dout);
    }
    /* 100 KiB of dynamic shared memory after raising the kernel's limit. */
    {
        float *dout;
        CUDA_CHECK(cudaMalloc((void **)&dout, 128 * 4));
        CUDA_CHECK(cudaFuncSetAttribute(big_smem_kernel,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, 100 * 1024));
        SL_LAUNCH(big_smem_kernel, 1, 128, 100 * 1024, 0, dout);
        CUDA_CHECK(cudaGetLastError());
        std::vector<float> out(128);
        CUDA_CHECK(cudaMemcpy(out.data(), dout, 128 * 4, cudaMemcpyDeviceToHost));
        double want = 0;
        for (int i = 0; i < 100 * 256; i += 128) want += 100 * 256 - 1 - i;
        CHECK(out[0] == (float)want, "100 KiB dynamic shared memory: %g vs %g", out[0], want);
        cudaFree(dout);
    }
    /* Device math. */
    {
        float *dout;
        unsigned *dbits;
        CUDA_CHECK(cudaMalloc((void **)&dout, 8 * 4));
        CUDA_CHECK(cudaMalloc((void **)&dbits, 6 * 4));
        SL_LAUNCH(math_kernel, 1, 1, 0, 0, dout, dbits);
        CUDA_CHECK(cudaGetLastError());
        float o[8];
        unsigned b[6];
        CUDA_CHECK(cudaMemcpy(o, dout, sizeof o, cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy(b, dbits, sizeof b, cudaMemcpyDeviceToHost));
        CHECK(o[0] == 0.5f && std::fabs(o[1] - 2.7182817f) < 1e-6f && o[2] == 1.0f &&
                  o[3] == 1.0f && o[4] == -3.0f && o[5] == 7.0f && o[6] == 0.25f && o[7] == 0.5f,
              "device math");
        CHECK(b[0] == 8 && b[1] == 31 && b[2] == 4 && b[3] == 0x80000000u && b[4] == 0x3f800000u &&
                  b[5] == 5,
              "bit intrinsics");
    }
    return emu_finish("test_emu_simt");
}
