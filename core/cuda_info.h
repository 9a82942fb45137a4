/*
 * core/cuda_info.h - what a node has for the CUDA backend: the versions of the driver and the
 * libraries, and each visible device's facts and kernel image. For `sluice doctor`'s
 * environment section (launch/doctor_env.c). Built with the CUDA backend (SLUICE_WITH_CUDA).
 *
 * Libraries that are not build dependencies are asked through dlopen, never linked: NVML
 * (libnvidia-ml.so.1, part of the driver: the driver's release, e.g. "580.159.04") and cuDNN
 * (libcudnn.so.9, cudnnGetVersion). Missing ones are reported as such.
 */
#ifndef SL_CORE_CUDA_INFO_H
#define SL_CORE_CUDA_INFO_H

#include <stdbool.h>
#include <stddef.h>

typedef struct {
    char driver[64];      /* the driver's release from NVML, or why not */
    bool have_driver;     /* NVML answered */
    int cuda_driver;      /* cudaDriverGetVersion (13000 = CUDA 13.0); 0: no driver */
    int cuda_runtime;     /* cudaRuntimeGetVersion */
    char cublas[32];      /* cublasGetProperty: "13.1.0" */
    char nccl[32];        /* ncclGetVersion: "2.28.3" */
    char cudnn[64];       /* cudnnGetVersion through dlopen: "9.10.2", or why not */
    bool have_cudnn;      /* libcudnn.so.9 was found */
    const char *targets;  /* the GPU code this build carries: "sm_80 sm_90a" (nvcc) or the
                             emulator */
    bool emulated;        /* the CPU SIMT test double (SLUICE_CUDA=EMULATED) */
    int devices;          /* cudaGetDeviceCount; 0 with the reason in no_devices */
    char no_devices[256]; /* why there is none ("no CUDA-capable device is detected", "no
                             NVIDIA driver on this machine (...)": core/cuda_driver.h) */
} sl_cuda_versions;

/* Fills every field; never fails (what cannot be asked says why in its string). */
void sl_cuda_versions_get(sl_cuda_versions *v);

/* "13.0" from 13000 (cudaDriverGetVersion's and cudaRuntimeGetVersion's form). */
void sl_cuda_version_string(int v, char *buf, size_t len);

typedef struct {
    int index;
    char name[256];
    int major, minor, sms;
    size_t total_bytes, free_bytes;
    char pci_bus[32];
    char uuid[48]; /* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as nvidia-smi prints it */
    int clock_khz, mem_clock_khz, bus_bits;
    int image_version;   /* the compute capability of the kernel image the runtime picks for it
                            (90 for sm_90a code on an sm_90 device); 0 when there is none */
    char image_err[160]; /* why there is none (cudaErrorNoKernelImageForDevice...) */
} sl_cuda_device;

/* Device `index`'s facts (it becomes the current device). Returns 0, or -1 with a reason. */
int sl_cuda_device_get(int index, sl_cuda_device *out, char *err, size_t errlen);

#endif
