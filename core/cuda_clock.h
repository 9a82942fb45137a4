/*
 * core/cuda_clock.h - the current CUDA device's SM clock as it runs and why it is below its
 * peak, read through NVML between a benchmark's timed passes (bench/attn_bench.c): a pass's
 * rate depends on the clock the GPU holds under the load before it (docs/attention.md, "The
 * passes timed apart"), and nvidia-smi's samples every 250 ms cannot tell one 20 ms pass from
 * the next. NVML (libnvidia-ml.so.1) comes with the driver: opened by dlopen, never a build
 * dependency. Built with the CUDA backend (SLUICE_WITH_CUDA).
 */
#ifndef SL_CORE_CUDA_CLOCK_H
#define SL_CORE_CUDA_CLOCK_H

#include <stddef.h>

/* The current device's SM clock now, in MHz (nvmlDeviceGetClockInfo, NVML_CLOCK_SM), and the
 * clock event reasons active now (nvmlDeviceGetCurrentClocksEventReasons, or its older name
 * ...ThrottleReasons: a mask of nvmlClocksEventReason* bits). The device is matched to NVML's by
 * its PCI bus id; NVML is opened at the first call and stays open. Returns 0, or -1 with the
 * reason in err (no NVML on this node, the emulated build's device, an NVML error); once it has
 * failed it fails at once with the same reason. Not thread-safe. */
int sl_cuda_sm_clock(unsigned *mhz, unsigned long long *reasons, char *err, size_t errlen);

/* The names of the reason bits set in mask, joined by ", " ("SW power cap, HW slowdown"; bits
 * without a name as "0x..."), or "none" for 0. */
void sl_cuda_clock_reason_names(unsigned long long mask, char *buf, size_t len);

#endif
