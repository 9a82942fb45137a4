/*
 * core/cuda_peak.cu - device facts, the bf16 GEMM peak and the copy bandwidth (cuda_peak.h).
 * Host code only: no kernels, so it builds the same way with nvcc and against the emulator's
 * runtime and cuBLAS.
 */
#include "core/cuda_peak.h"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <algorithm>
#include <vector>

namespace {

double now_s() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Everything the peak measurement holds, released on every path. */
struct PeakRun {
    __nv_bfloat16 *a = nullptr, *b = nullptr, *c = nullptr;
    cudaStream_t stream = nullptr;
    cublasHandle_t handle = nullptr;
    std::vector<cudaEvent_t> events;
    ~PeakRun() {
        for (cudaEvent_t e : events) cudaEventDestroy(e);
        if (handle) cublasDestroy(handle);
        if (stream) cudaStreamDestroy(stream);
        cudaFree(a);
        cudaFree(b);
        cudaFree(c);
    }
};

bool cuda_ok(cudaError_t e, const char *what, char *err, size_t errlen) {
    if (e == cudaSuccess) return true;
    snprintf(err, errlen, "%s: %s", what, cudaGetErrorString(e));
    (void)cudaGetLastError(); /* clear a sticky-free error so the run can go on */
    return false;
}

bool cublas_ok(cublasStatus_t s, const char *what, char *err, size_t errlen) {
    if (s == CUBLAS_STATUS_SUCCESS) return true;
    snprintf(err, errlen, "%s: cuBLAS status %d", what, (int)s);
    return false;
}

/* Uniform values in [-1, 1) from a 64-bit LCG, rounded to bf16. */
void fill_random(std::vector<__nv_bfloat16> &h, uint64_t seed) {
    uint64_t s = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    for (size_t i = 0; i < h.size(); i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        const float u = (float)(s >> 40) * (1.0f / (float)(1 << 24));
        h[i] = __float2bfloat16(2.0f * u - 1.0f);
    }
}

/* Runs `op` `reps` times on `stream`, each between two of `events` (reps + 1 of them), with
 * one synchronization at the end, and gives each run's seconds in ascending order. A runtime
 * whose events carry no time (a CPU stand-in of CUDA) gets the host's mean for every run. */
template <typename Op>
bool time_reps(cudaStream_t stream, std::vector<cudaEvent_t> &events, int reps, Op op,
               const char *what, std::vector<double> &secs, char *err, size_t errlen) {
    char msg[96];
    snprintf(msg, sizeof msg, "%s: cudaEventRecord", what);
    const double t0 = now_s();
    if (!cuda_ok(cudaEventRecord(events[0], stream), msg, err, errlen)) return false;
    for (int i = 0; i < reps; i++)
        if (!op() || !cuda_ok(cudaEventRecord(events[(size_t)i + 1], stream), msg, err, errlen))
            return false;
    snprintf(msg, sizeof msg, "%s: the timed runs", what);
    if (!cuda_ok(cudaStreamSynchronize(stream), msg, err, errlen)) return false;
    const double wall = now_s() - t0;
    secs.assign((size_t)reps, 0.0);
    bool timed = true;
    snprintf(msg, sizeof msg, "%s: cudaEventElapsedTime", what);
    for (int i = 0; i < reps; i++) {
        float ms = 0.0f;
        if (!cuda_ok(cudaEventElapsedTime(&ms, events[(size_t)i], events[(size_t)i + 1]), msg, err,
                     errlen))
            return false;
        secs[(size_t)i] = 1e-3 * (double)ms;
        if (ms <= 0.0f) timed = false;
    }
    if (!timed) std::fill(secs.begin(), secs.end(), wall / reps);
    std::sort(secs.begin(), secs.end());
    return true;
}

} // namespace

extern "C" int sl_bench_device_info(sl_bench_device *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    int dev = 0;
    cudaDeviceProp p;
    if (!cuda_ok(cudaGetDevice(&dev), "cudaGetDevice", err, errlen) ||
        !cuda_ok(cudaGetDeviceProperties(&p, dev), "cudaGetDeviceProperties", err, errlen) ||
        !cuda_ok(cudaMemGetInfo(&out->free_bytes, &out->total_bytes), "cudaMemGetInfo", err,
                 errlen))
        return -1;
    snprintf(out->name, sizeof out->name, "%s", p.name);
    out->major = p.major;
    out->minor = p.minor;
    out->sms = p.multiProcessorCount;
    out->bus_bits = p.memoryBusWidth;
    /* not in cudaDeviceProp since CUDA 13: attributes; 0 when a runtime does not say */
    if (cudaDeviceGetAttribute(&out->clock_khz, cudaDevAttrClockRate, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&out->mem_clock_khz, cudaDevAttrMemoryClockRate, dev) !=
            cudaSuccess) {
        (void)cudaGetLastError();
        out->clock_khz = out->mem_clock_khz = 0;
    }
    return 0;
}

extern "C" double sl_bench_nominal_bf16_flops(const sl_bench_device *d) {
    const int per_sm_clock = d->major == 8 && d->minor == 0 ? 2048 : d->major == 9 ? 4096 : 0;
    return (double)d->sms * 1e3 * (double)d->clock_khz * per_sm_clock;
}

extern "C" double sl_bench_nominal_bandwidth(const sl_bench_device *d) {
    return 2.0 * 1e3 * (double)d->mem_clock_khz * (double)d->bus_bits / 8.0;
}

extern "C" int sl_bench_copy_bandwidth(size_t bytes, int reps, sl_bench_copy *out, char *err,
                                       size_t errlen) {
    memset(out, 0, sizeof *out);
    if (bytes == 0 || reps < 1) {
        snprintf(err, errlen, "copy bandwidth: bytes = %zu, reps = %d", bytes, reps);
        return -1;
    }
    out->bytes = bytes;
    out->reps = reps;
    struct CopyRun {
        void *src = nullptr, *dst = nullptr;
        cudaStream_t stream = nullptr;
        std::vector<cudaEvent_t> events;
        ~CopyRun() {
            for (cudaEvent_t e : events) cudaEventDestroy(e);
            if (stream) cudaStreamDestroy(stream);
            cudaFree(src);
            cudaFree(dst);
        }
    } r;
    if (!cuda_ok(cudaMalloc(&r.src, bytes), "copy bandwidth: cudaMalloc", err, errlen) ||
        !cuda_ok(cudaMalloc(&r.dst, bytes), "copy bandwidth: cudaMalloc", err, errlen) ||
        !cuda_ok(cudaMemset(r.src, 1, bytes), "copy bandwidth: cudaMemset", err, errlen) ||
        !cuda_ok(cudaStreamCreateWithFlags(&r.stream, cudaStreamNonBlocking),
                 "copy bandwidth: cudaStreamCreate", err, errlen))
        return -1;
    r.events.resize((size_t)reps + 1, nullptr);
    for (cudaEvent_t &e : r.events)
        if (!cuda_ok(cudaEventCreate(&e), "copy bandwidth: cudaEventCreate", err, errlen))
            return -1;
    auto copy = [&]() {
        return cuda_ok(cudaMemcpyAsync(r.dst, r.src, bytes, cudaMemcpyDeviceToDevice, r.stream),
                       "copy bandwidth: cudaMemcpyAsync", err, errlen);
    };
    if (!copy() ||
        !cuda_ok(cudaStreamSynchronize(r.stream), "copy bandwidth: warm-up", err, errlen))
        return -1;
    std::vector<double> secs;
    if (!time_reps(r.stream, r.events, reps, copy, "copy bandwidth", secs, err, errlen)) return -1;
    out->best_bps = 2.0 * (double)bytes / secs.front();
    out->median_bps = 2.0 * (double)bytes / secs[(size_t)reps / 2];
    return 0;
}

extern "C" int sl_bench_gemm_peak(int n, int warmup, int reps, sl_bench_peak *out, char *err,
                                  size_t errlen) {
    memset(out, 0, sizeof *out);
    if (n < 1 || reps < 1 || warmup < 0) {
        snprintf(err, errlen, "GEMM peak: n = %d, reps = %d, warmup = %d", n, reps, warmup);
        return -1;
    }
    out->n = n;
    out->warmup = warmup;
    out->reps = reps;
    const size_t nn = (size_t)n * (size_t)n;
    PeakRun r;
    {
        std::vector<__nv_bfloat16> h(nn);
        if (!cuda_ok(cudaMalloc((void **)&r.a, nn * sizeof *r.a), "GEMM peak: cudaMalloc A", err,
                     errlen) ||
            !cuda_ok(cudaMalloc((void **)&r.b, nn * sizeof *r.b), "GEMM peak: cudaMalloc B", err,
                     errlen) ||
            !cuda_ok(cudaMalloc((void **)&r.c, nn * sizeof *r.c), "GEMM peak: cudaMalloc C", err,
                     errlen))
            return -1;
        fill_random(h, 1);
        if (!cuda_ok(cudaMemcpy(r.a, h.data(), nn * sizeof *r.a, cudaMemcpyHostToDevice),
                     "GEMM peak: upload A", err, errlen))
            return -1;
        fill_random(h, 2);
        if (!cuda_ok(cudaMemcpy(r.b, h.data(), nn * sizeof *r.b, cudaMemcpyHostToDevice),
                     "GEMM peak: upload B", err, errlen))
            return -1;
    }
    if (!cuda_ok(cudaStreamCreateWithFlags(&r.stream, cudaStreamNonBlocking),
                 "GEMM peak: cudaStreamCreate", err, errlen) ||
        !cublas_ok(cublasCreate(&r.handle), "GEMM peak: cublasCreate", err, errlen) ||
        !cublas_ok(cublasSetStream(r.handle, r.stream), "GEMM peak: cublasSetStream", err, errlen))
        return -1;
    r.events.resize((size_t)reps + 1, nullptr);
    for (cudaEvent_t &e : r.events)
        if (!cuda_ok(cudaEventCreate(&e), "GEMM peak: cudaEventCreate", err, errlen)) return -1;
    const float alpha = 1.0f, beta = 0.0f;
    auto gemm = [&]() {
        return cublas_ok(cublasGemmEx(r.handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, r.a,
                                      CUDA_R_16BF, n, r.b, CUDA_R_16BF, n, &beta, r.c, CUDA_R_16BF,
                                      n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                         "GEMM peak: cublasGemmEx", err, errlen);
    };
    for (int i = 0; i < warmup; i++)
        if (!gemm()) return -1;
    if (!cuda_ok(cudaStreamSynchronize(r.stream), "GEMM peak: warm-up", err, errlen)) return -1;
    /* Consecutive events bracket one GEMM each; nothing waits until all are queued. */
    std::vector<double> secs;
    if (!time_reps(r.stream, r.events, reps, gemm, "GEMM peak", secs, err, errlen)) return -1;
    const double flops = 2.0 * (double)n * (double)n * (double)n;
    out->best_flops = flops / secs.front();
    out->worst_flops = flops / secs.back();
    out->median_flops = flops / secs[(size_t)reps / 2];
    return 0;
}
