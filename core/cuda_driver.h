/*
 * core/cuda_driver.h - why no CUDA device is usable, said plainly. Without an NVIDIA driver the
 * CUDA runtime reports cudaErrorInsufficientDriver, "CUDA driver version is insufficient for CUDA
 * runtime version", which reads as if a driver upgrade would help; on a machine with no driver
 * at all (no libcuda.so.1) sluice says that instead (`sluice doctor`, backend.name = "cuda").
 * Plain C, in every build (the CUDA backend and the doctor call it; test_cuda_driver tests it).
 */
#ifndef SL_CORE_CUDA_DRIVER_H
#define SL_CORE_CUDA_DRIVER_H

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The NVIDIA driver's CUDA library, which the CUDA runtime loads. */
#define SL_LIBCUDA "libcuda.so.1"

/* Whether SL_LIBCUDA can be loaded here (dlopen). */
bool sl_nvidia_driver_present(void);

/* Why no device is usable, into out: when the runtime's error is an insufficient driver
 * (insufficient_driver: cudaErrorInsufficientDriver) and the driver's library cannot be loaded,
 * "no NVIDIA driver on this machine (libcuda.so.1 not found; the CUDA runtime says: <text>)";
 * otherwise runtime_text as it is. */
void sl_cuda_no_device_reason(bool insufficient_driver, const char *runtime_text, char *out,
                              size_t n);

#ifdef __cplusplus
}
#endif

#endif
