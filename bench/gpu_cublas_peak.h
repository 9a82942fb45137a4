/*
 * bench/gpu_cublas_peak.h - what gpu_train_bench needs from the CUDA runtime and cuBLAS
 * directly (bench/gpu_cublas_peak.cu): the measured bf16 GEMM peak and the device's memory.
 * C linkage, so the benchmark itself stays C.
 */
#ifndef SL_BENCH_GPU_CUBLAS_PEAK_H
#define SL_BENCH_GPU_CUBLAS_PEAK_H

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

#ifdef __cplusplus
}
#endif

#endif
