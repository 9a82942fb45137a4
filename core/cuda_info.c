/* core/cuda_info.c - versions and device facts for the CUDA backend (cuda_info.h). */
#include "core/cuda_info.h"

#include <cublas_api.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
/* nccl.h declares a few functions with () parameter lists (as in core/comm_nccl.c) */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/backend_impl.h"
#include "core/cuda_driver.h"
#include "core/cuda_peak.h"

#ifndef SLUICE_CUDA_TARGETS
#define SLUICE_CUDA_TARGETS "unknown"
#endif

void sl_cuda_version_string(int v, char *buf, size_t len) {
    snprintf(buf, len, "%d.%d", v / 1000, (v % 1000) / 10);
}

/* The driver's release through NVML, which comes with the driver (never a build dependency). */
static void nvml_driver(sl_cuda_versions *v) {
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(v->driver, sizeof v->driver, "libnvidia-ml.so.1 not found");
        return;
    }
    int (*init)(void) = (int (*)(void))dlsym(h, "nvmlInit_v2");
    int (*version)(char *, unsigned) =
        (int (*)(char *, unsigned))dlsym(h, "nvmlSystemGetDriverVersion");
    int (*shutdown)(void) = (int (*)(void))dlsym(h, "nvmlShutdown");
    char buf[80] = "";
    if (init && version && shutdown && init() == 0) {
        if (version(buf, sizeof buf) == 0 && buf[0]) {
            snprintf(v->driver, sizeof v->driver, "%s", buf);
            v->have_driver = true;
        }
        shutdown();
    }
    if (!v->have_driver) snprintf(v->driver, sizeof v->driver, "NVML did not answer");
    dlclose(h);
}

/* cuDNN's version if the library is there (sluice does not use it; PyTorch baselines do). */
static void cudnn_version(sl_cuda_versions *v) {
    void *h = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(v->cudnn, sizeof v->cudnn, "not found (libcudnn.so.9)");
        return;
    }
    size_t (*get)(void) = (size_t(*)(void))dlsym(h, "cudnnGetVersion");
    if (get) {
        const size_t x = get(); /* cuDNN 9: major * 10000 + minor * 100 + patch */
        snprintf(v->cudnn, sizeof v->cudnn, "%zu.%zu.%zu", x / 10000, (x % 10000) / 100, x % 100);
        v->have_cudnn = true;
    } else {
        snprintf(v->cudnn, sizeof v->cudnn, "unknown (no cudnnGetVersion in libcudnn.so.9)");
    }
    dlclose(h);
}

void sl_cuda_versions_get(sl_cuda_versions *v) {
    memset(v, 0, sizeof *v);
    nvml_driver(v);
    if (cudaDriverGetVersion(&v->cuda_driver) != cudaSuccess) v->cuda_driver = 0;
    if (cudaRuntimeGetVersion(&v->cuda_runtime) != cudaSuccess) v->cuda_runtime = 0;
    int ma = 0, mi = 0, pa = 0;
    if (cublasGetProperty(MAJOR_VERSION, &ma) == CUBLAS_STATUS_SUCCESS &&
        cublasGetProperty(MINOR_VERSION, &mi) == CUBLAS_STATUS_SUCCESS &&
        cublasGetProperty(PATCH_LEVEL, &pa) == CUBLAS_STATUS_SUCCESS)
        snprintf(v->cublas, sizeof v->cublas, "%d.%d.%d", ma, mi, pa);
    else
        snprintf(v->cublas, sizeof v->cublas, "unknown");
    int nv = 0;
    if (ncclGetVersion(&nv) == ncclSuccess) /* major * 10000 + minor * 100 + patch since 2.9 */
        snprintf(v->nccl, sizeof v->nccl, "%d.%d.%d", nv / 10000, (nv % 10000) / 100, nv % 100);
    else
        snprintf(v->nccl, sizeof v->nccl, "unknown");
    cudnn_version(v);
#ifdef SLUICE_CUDA_EMULATED
    v->targets = "none: the CPU SIMT test double (emu/) runs the kernels";
    v->emulated = true;
#else
    v->targets = SLUICE_CUDA_TARGETS;
#endif
    const cudaError_t e = cudaGetDeviceCount(&v->devices);
    if (e != cudaSuccess || v->devices == 0) {
        sl_cuda_no_device_reason(e == cudaErrorInsufficientDriver,
                                 e != cudaSuccess ? cudaGetErrorString(e) : "0 devices",
                                 v->no_devices, sizeof v->no_devices);
        v->devices = 0;
        (void)cudaGetLastError();
    }
}

int sl_cuda_device_get(int index, sl_cuda_device *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    out->index = index;
    cudaError_t e = cudaSetDevice(index);
    struct cudaDeviceProp p;
    if (e == cudaSuccess) e = cudaGetDeviceProperties(&p, index);
    if (e != cudaSuccess) {
        snprintf(err, errlen, "device %d: %s", index, cudaGetErrorString(e));
        (void)cudaGetLastError();
        return -1;
    }
    sl_bench_device d;
    if (sl_bench_device_info(&d, err, errlen) != 0) return -1;
    snprintf(out->name, sizeof out->name, "%s", d.name);
    out->major = d.major, out->minor = d.minor, out->sms = d.sms;
    out->total_bytes = d.total_bytes, out->free_bytes = d.free_bytes;
    out->clock_khz = d.clock_khz, out->mem_clock_khz = d.mem_clock_khz, out->bus_bits = d.bus_bits;
    if (cudaDeviceGetPCIBusId(out->pci_bus, (int)sizeof out->pci_bus, index) != cudaSuccess) {
        snprintf(out->pci_bus, sizeof out->pci_bus, "?");
        (void)cudaGetLastError();
    }
    const unsigned char *u = (const unsigned char *)p.uuid.bytes;
    snprintf(out->uuid, sizeof out->uuid,
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1],
             u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14],
             u[15]);
    if (sl_cuda_kernel_image(&out->image_version, out->image_err, sizeof out->image_err) != 0)
        out->image_version = 0;
    return 0;
}
