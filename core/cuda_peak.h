/*
 * core/cuda_peak.h - device measurements straight from the CUDA runtime and cuBLAS
 * (core/cuda_peak.cu): the device's facts and memory, the measured bf16 GEMM peak, the device
 * copy bandwidth. Shared by the benchmarks (bench/gpu_train_bench.c, bench/attn_bench.c) and
 * `sluice doctor`, hence the sl_bench_ prefix. Built with the CUDA backend (SLUICE_WITH_CUDA);
 * C linkage, so its callers stay C.
 */
#ifndef SL_CORE_CUDA_PEAK_H
#define SL_CORE_CUDA_PEAK_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    char name[256];     /* cudaDeviceProp::name */
    int major, minor;   /* compute capability */
    int sms;            /* multiprocessors */
    size_t free_bytes;  /* cudaMemGetInfo */
    size_t total_bytes; /* cudaMemGetInfo */
    int clock_khz;      /* peak SM clock (cudaDevAttrClockRate) */
    int mem_clock_khz;  /* peak memory clock (cudaDevAttrMemoryClockRate) */
    int bus_bits;       /* memory bus width (cudaDevAttrGlobalMemoryBusWidth) */
} sl_bench_device;

/* The current device (the one the backend selected). Returns 0, or -1 with a reason. */
int sl_bench_device_info(sl_bench_device *out, char *err, size_t errlen);

typedef struct {
    int n, warmup, reps;
    double median_flops, best_flops, worst_flops; /* 2 n^3 / time of one GEMM */
} sl_bench_peak;

/* Times `reps` cublasGemmEx calls C = A B (n x n x n; A, B, C bf16; fp32 accumulation,
 * CUBLAS_COMPUTE_32F) after `warmup` untimed ones, each between two CUDA events on a stream
 * of its own, with one synchronization at the end. Operands hold pseudo-random values
 * (all-zero inputs would draw less power and run faster than real data). Returns 0, or -1
 * with a reason (for example when the three n x n buffers do not fit). */
int sl_bench_gemm_peak(int n, int warmup, int reps, sl_bench_peak *out, char *err, size_t errlen);

/* The device's nominal dense bf16 tensor-core rate with fp32 accumulation: SMs x peak clock x
 * FLOPs per clock and SM of its architecture (2048 for sm_80, 4096 for sm_90, from the A100 and
 * H100 datasheets' 312 and 989 TFLOP/s at their boost clocks); 0 where not known. */
double sl_bench_nominal_bf16_flops(const sl_bench_device *d);
/* The nominal memory bandwidth: 2 (double data rate) x memory clock x bus width / 8; 0 where
 * the runtime does not say. */
double sl_bench_nominal_bandwidth(const sl_bench_device *d);

typedef struct {
    size_t bytes;
    int reps;
    double median_bps, best_bps; /* 2 x bytes (read and written) / time of one copy */
} sl_bench_copy;

/* Times `reps` device-to-device cudaMemcpyAsync of `bytes` (after one untimed), each between
 * two CUDA events, on the current device. Returns 0, or -1 with a reason. */
int sl_bench_copy_bandwidth(size_t bytes, int reps, sl_bench_copy *out, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
