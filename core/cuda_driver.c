/* core/cuda_driver.c - why no CUDA device is usable (cuda_driver.h). */
#include "core/cuda_driver.h"

#include <dlfcn.h>
#include <stdio.h>

bool sl_nvidia_driver_present(void) {
    void *h = dlopen(SL_LIBCUDA, RTLD_LAZY | RTLD_LOCAL);
    if (!h) return false;
    dlclose(h);
    return true;
}

void sl_cuda_no_device_reason(bool insufficient_driver, const char *runtime_text, char *out,
                              size_t n) {
    if (insufficient_driver && !sl_nvidia_driver_present())
        snprintf(out, n,
                 "no NVIDIA driver on this machine (" SL_LIBCUDA " not found; the CUDA runtime "
                 "says: %s)",
                 runtime_text);
    else
        snprintf(out, n, "%s", runtime_text);
}
