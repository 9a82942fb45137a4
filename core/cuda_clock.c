/* core/cuda_clock.c - the SM clock and its event reasons through NVML (cuda_clock.h). */
#include "core/cuda_clock.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

/* NVML's types as its ABI has them (nvml.h is not a build dependency): a device is an opaque
 * pointer, every call returns 0 (NVML_SUCCESS) or an error code. */
typedef struct sl_nvml_device_st *sl_nvml_device;
enum { SL_NVML_CLOCK_SM = 1 };

static struct {
    int state; /* 0 not tried, 1 open, -1 failed (why) */
    char why[160];
    sl_nvml_device dev;
    int (*clock)(sl_nvml_device, int, unsigned *);
    int (*reasons)(sl_nvml_device, unsigned long long *);
    const char *(*error)(int);
} g_nvml;

static int nvml_fail(const char *fmt, const char *what, int code) {
    char detail[64] = "";
    if (code && g_nvml.error) snprintf(detail, sizeof detail, ": %s", g_nvml.error(code));
    snprintf(g_nvml.why, sizeof g_nvml.why, fmt, what);
    strncat(g_nvml.why, detail, sizeof g_nvml.why - strlen(g_nvml.why) - 1);
    g_nvml.state = -1;
    return -1;
}

static int nvml_open(void) {
#ifdef SLUICE_CUDA_EMULATED
    return nvml_fail("%s", "the emulated device has no clock to read", 0);
#else
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) return nvml_fail("%s", "libnvidia-ml.so.1 not found", 0);
    int (*init)(void) = (int (*)(void))dlsym(h, "nvmlInit_v2");
    int (*by_bus)(const char *, sl_nvml_device *) =
        (int (*)(const char *, sl_nvml_device *))dlsym(h, "nvmlDeviceGetHandleByPciBusId_v2");
    g_nvml.error = (const char *(*)(int))dlsym(h, "nvmlErrorString");
    g_nvml.clock = (int (*)(sl_nvml_device, int, unsigned *))dlsym(h, "nvmlDeviceGetClockInfo");
    g_nvml.reasons = (int (*)(sl_nvml_device, unsigned long long *))dlsym(
        h, "nvmlDeviceGetCurrentClocksEventReasons");
    if (!g_nvml.reasons) /* the name before the drivers of 2023 */
        g_nvml.reasons = (int (*)(sl_nvml_device, unsigned long long *))dlsym(
            h, "nvmlDeviceGetCurrentClocksThrottleReasons");
    if (!init || !by_bus || !g_nvml.clock || !g_nvml.reasons)
        return nvml_fail("%s", "libnvidia-ml.so.1 lacks a function it needs", 0);
    int rc = init();
    if (rc != 0) return nvml_fail("%s", "nvmlInit", rc);
    int dev = 0;
    char bus[32];
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetPCIBusId(bus, (int)sizeof bus, dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return nvml_fail("%s", "the CUDA device's PCI bus id is unknown", 0);
    }
    rc = by_bus(bus, &g_nvml.dev);
    if (rc != 0) return nvml_fail("NVML has no device at PCI bus %s", bus, rc);
    g_nvml.state = 1;
    return 0; /* the library stays loaded: the handles point into it */
#endif
}

int sl_cuda_sm_clock(unsigned *mhz, unsigned long long *reasons, char *err, size_t errlen) {
    if (g_nvml.state == 0) nvml_open();
    int rc = 0;
    if (g_nvml.state == 1) {
        rc = g_nvml.clock(g_nvml.dev, SL_NVML_CLOCK_SM, mhz);
        if (rc == 0) rc = g_nvml.reasons(g_nvml.dev, reasons);
        if (rc == 0) return 0;
    }
    if (rc != 0) {
        snprintf(err, errlen, "NVML: %s", g_nvml.error ? g_nvml.error(rc) : "error");
        return -1;
    }
    snprintf(err, errlen, "%s", g_nvml.why);
    return -1;
}

void sl_cuda_clock_reason_names(unsigned long long mask, char *buf, size_t len) {
    /* nvmlClocksEventReason* (nvml.h): the bits nvidia-smi names too */
    static const struct {
        unsigned long long bit;
        const char *name;
    } k_names[] = {{0x1, "idle"},        {0x2, "app clocks"},      {0x4, "SW power cap"},
                   {0x8, "HW slowdown"}, {0x10, "sync boost"},     {0x20, "SW thermal"},
                   {0x40, "HW thermal"}, {0x80, "HW power brake"}, {0x100, "display clocks"}};
    size_t n = 0;
    buf[0] = '\0';
    if (!mask) {
        snprintf(buf, len, "none");
        return;
    }
    unsigned long long rest = mask;
    for (size_t i = 0; i < sizeof k_names / sizeof k_names[0]; i++) {
        if (!(mask & k_names[i].bit)) continue;
        rest &= ~k_names[i].bit;
        n += (size_t)snprintf(buf + (n < len ? n : len), n < len ? len - n : 0, "%s%s",
                              n ? ", " : "", k_names[i].name);
    }
    if (rest)
        snprintf(buf + (n < len ? n : len), n < len ? len - n : 0, "%s0x%llx", n ? ", " : "", rest);
}
