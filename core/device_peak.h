/*
 * core/device_peak.h - datasheet peak rates of GPUs, for model FLOP utilization (MFU): the
 * progress line and metrics of `sluice train` divide the model FLOPs per second and GPU by this
 * peak (docs/metrics.md). Dense (no sparsity) bf16 tensor-core rates with fp32 accumulation, as
 * NVIDIA's datasheets state them; the convention of MFU as PaLM and Megatron report it.
 */
#ifndef SL_CORE_DEVICE_PEAK_H
#define SL_CORE_DEVICE_PEAK_H

#ifdef __cplusplus
extern "C" {
#endif

/* The dense bf16 peak in TFLOP/s of the GPU named `name` (cudaDeviceProp::name, e.g. "NVIDIA
 * H100 80GB HBM3"), and in *model the datasheet entry it matched ("H100 SXM"); 0 and NULL for
 * a GPU not in the table. */
double sl_device_datasheet_bf16_tflops(const char *name, const char **model);

#ifdef __cplusplus
}
#endif

#endif
