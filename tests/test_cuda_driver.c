/*
 * tests/test_cuda_driver.c - core/cuda_driver.h: without the NVIDIA driver's library the CUDA
 * runtime's "driver version is insufficient" becomes "no NVIDIA driver on this machine", with
 * the runtime's text kept; with the library, or for any other error, the runtime's text as it is.
 * Which case this machine is decides the expectation (dlopen of libcuda.so.1 here, independently).
 */
#include <dlfcn.h>
#include <string.h>

#include "core/cuda_driver.h"
#include "test_util.h"

int main(void) {
    static const char *const k_insufficient =
        "CUDA driver version is insufficient for CUDA runtime version";
    void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    const bool driver = h != NULL;
    if (h) dlclose(h);
    CHECK(sl_nvidia_driver_present() == driver, "sl_nvidia_driver_present() = %d, dlopen says %d",
          sl_nvidia_driver_present(), driver);
    char out[512];
    sl_cuda_no_device_reason(true, k_insufficient, out, sizeof out);
    if (driver) {
        CHECK(strcmp(out, k_insufficient) == 0, "with a driver: '%s'", out);
    } else {
        CHECK(strcmp(out, "no NVIDIA driver on this machine (libcuda.so.1 not found; the CUDA "
                          "runtime says: CUDA driver version is insufficient for CUDA runtime "
                          "version)") == 0,
              "without a driver: '%s'", out);
    }
    printf("this machine %s libcuda.so.1: '%s'\n", driver ? "has" : "lacks", out);
    /* another error, or a driver present: the runtime's text as it is */
    sl_cuda_no_device_reason(false, "no CUDA-capable device is detected", out, sizeof out);
    CHECK(strcmp(out, "no CUDA-capable device is detected") == 0, "another error: '%s'", out);
    return sl_test_finish("test_cuda_driver");
}
