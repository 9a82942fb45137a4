/*
 * tests/emu/test_emu_bench.cu - what the CPU SIMT test double costs, measured and printed (not
 * asserted: the figures depend on the machine): a fiber switch per thread per __syncthreads, a
 * warp shuffle, a thread of a kernel without scheduling points, an empty launch, and the race
 * check's share. The results of every kernel are checked, so the test still fails when the
 * kernels compute wrong values. Runs itself twice in child processes: with the race check off
 * (the raw scheduler) and on (the default).
 */
#include <chrono>
#include <vector>

#include "core/cuda_common.cuh"
#include "tests/emu/emu_test.h"

/* `iters` barriers per thread; every thread adds its neighbour's value each round. */
__global__ void barrier_loop_kernel(float *out, int iters) {
    __shared__ float s[1024];
    const int t = threadIdx.x, n = blockDim.x;
    float v = (float)t;
    for (int i = 0; i < iters; i++) {
        s[t] = v;
        __syncthreads();
        v = 0.5f * (v + s[(t + 1) % n]);
        __syncthreads();
    }
    out[blockIdx.x * n + t] = v;
}

__global__ void shuffle_loop_kernel(float *out, int iters) {
    float v = (float)threadIdx.x;
    for (int i = 0; i < iters; i++) v = __shfl_xor_sync(0xffffffffu, v, 1 + i % 31) * 0.5f + 1.0f;
    out[blockIdx.x * blockDim.x + threadIdx.x] = v;
}

__global__ void axpy_kernel(float *y, const float *x, float a, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += a * x[i];
}

__global__ void empty_kernel() {}

static double now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

static int measure(bool racecheck) {
    const char *mode = racecheck ? "race check on (2 orders)" : "race check off";
    /* barriers: 4 blocks of 256 threads, 200 barriers each */
    {
        const int blocks = 4, nt = 256, iters = 100;
        float *out;
        CUDA_CHECK(cudaMalloc((void **)&out, blocks * nt * 4));
        SL_LAUNCH(barrier_loop_kernel, blocks, nt, 0, 0, out, 1); /* warm the stack pool */
        const double t0 = now();
        SL_LAUNCH(barrier_loop_kernel, blocks, nt, 0, 0, out, iters);
        const double t = now() - t0;
        CUDA_CHECK(cudaGetLastError());
        std::vector<float> h(blocks * nt);
        CUDA_CHECK(cudaMemcpy(h.data(), out, h.size() * 4, cudaMemcpyDeviceToHost));
        /* the average over the block is invariant: (n - 1) / 2 */
        double mean = 0;
        for (int i = 0; i < nt; i++) mean += h[i];
        mean /= nt;
        CHECK(std::fabs(mean - 127.5) < 1e-3, "barrier loop result %g", mean);
        const double waits = (double)blocks * nt * 2 * iters * (racecheck ? 2 : 1);
        printf("[%s] __syncthreads, 256-thread blocks: %.1f ns per thread per barrier "
               "(a fiber switch to the scheduler and back), %.1f us per block barrier\n",
               mode, t / waits * 1e9, t / waits * nt * 1e6);
        cudaFree(out);
    }
    /* shuffles: 8 warps, 500 xor shuffles each */
    {
        const int nt = 256, iters = 500;
        float *out;
        CUDA_CHECK(cudaMalloc((void **)&out, nt * 4));
        const double t0 = now();
        SL_LAUNCH(shuffle_loop_kernel, 1, nt, 0, 0, out, iters);
        const double t = now() - t0;
        CUDA_CHECK(cudaGetLastError());
        float h[2];
        CUDA_CHECK(cudaMemcpy(h, out, sizeof h, cudaMemcpyDeviceToHost));
        CHECK(std::isfinite(h[0]) && h[0] > 1.0f, "shuffle loop result %g", h[0]);
        printf("[%s] __shfl_xor_sync: %.1f ns per lane per shuffle\n", mode,
               t / ((double)nt * iters * (racecheck ? 2 : 1)) * 1e9);
        cudaFree(out);
    }
    /* a kernel without scheduling points: one fiber per block */
    {
        const int n = 1 << 20;
        float *x, *y;
        CUDA_CHECK(cudaMalloc((void **)&x, n * 4));
        CUDA_CHECK(cudaMalloc((void **)&y, n * 4));
        CUDA_CHECK(cudaMemset(x, 0, n * 4));
        CUDA_CHECK(cudaMemset(y, 0, n * 4));
        const double t0 = now();
        SL_LAUNCH(axpy_kernel, n / 256, 256, 0, 0, y, x, 2.0f, n);
        const double t = now() - t0;
        CUDA_CHECK(cudaGetLastError());
        printf("[%s] axpy over 2^20 elements (4096 blocks of 256, no scheduling point): %.1f ns "
               "per thread, %.1f ms per launch\n",
               mode, t / ((double)n * (racecheck ? 2 : 1)) * 1e9, t * 1e3);
        cudaFree(x);
        cudaFree(y);
    }
    /* launch overhead: an empty kernel, 1 thread */
    {
        const int launches = 20000;
        const double t0 = now();
        for (int i = 0; i < launches; i++) SL_LAUNCH(empty_kernel, 1, 1, 0, 0);
        const double t = now() - t0;
        CUDA_CHECK(cudaGetLastError());
        printf("[%s] an empty 1-thread launch: %.2f us (no device memory allocated)\n", mode,
               t / launches * 1e6);
    }
    /* the race check's snapshot: an empty launch with 64 MiB of live device memory */
    {
        void *big;
        CUDA_CHECK(cudaMalloc(&big, 64 << 20));
        const int launches = 20;
        const double t0 = now();
        for (int i = 0; i < launches; i++) SL_LAUNCH(empty_kernel, 1, 1, 0, 0);
        const double t = now() - t0;
        printf("[%s] an empty launch with 64 MiB allocated: %.2f ms\n", mode, t / launches * 1e3);
        cudaFree(big);
    }
    return emu_finish(racecheck ? "test_emu_bench (race check on)"
                                : "test_emu_bench (race check off)");
}

int main(int argc, char **argv) {
    if (argc > 1) return measure(strcmp(argv[1], "on") == 0);
    const char *off[] = {"SLUICE_EMU_RACECHECK=0", nullptr};
    const char *on[] = {"SLUICE_EMU_RACECHECK=1", nullptr};
    for (int k = 0; k < 2; k++) {
        const emu_child r = emu_run_child(argv[0], k ? "on" : "off", k ? on : off);
        fputs(r.err.c_str(), stdout);
        CHECK(r.exited && r.code == 0, "measurement run %d: exit %d", k, r.code);
    }
    return emu_finish("test_emu_bench");
}
