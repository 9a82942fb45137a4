/*
 * tests/test_cuda_clock.c - core/cuda_clock.h: the names of NVML's clock event reasons (none,
 * one, several, a bit without a name, a buffer too short for them all), and the SM clock read:
 * in the emulated build it fails with the reason that build gives; on a real build with a GPU it
 * reads a clock between 100 and 5,000 MHz twice (the second read from the open handle); on a
 * real build without a usable NVML or GPU it must fail with a reason (never a number). Built
 * with the CUDA backend (the emulated build in CI).
 */
#include <string.h>

#include "core/cuda_clock.h"
#include "tests/test_util.h"

static void names(unsigned long long mask, const char *want) {
    char buf[160];
    sl_cuda_clock_reason_names(mask, buf, sizeof buf);
    CHECK(strcmp(buf, want) == 0, "reasons 0x%llx: \"%s\", want \"%s\"", mask, buf, want);
}

int main(void) {
    names(0, "none");
    names(0x4, "SW power cap");
    names(0x4 | 0x20 | 0x40, "SW power cap, SW thermal, HW thermal");
    names(0x1 | 0x100, "idle, display clocks");
    names(0x10000, "0x10000");
    names(0x8 | 0x30000, "HW slowdown, 0x30000");
    char tiny[8];
    sl_cuda_clock_reason_names(0x4 | 0x8, tiny, sizeof tiny); /* cut, still terminated */
    CHECK(strcmp(tiny, "SW powe") == 0, "a short buffer holds \"%s\"", tiny);

    unsigned mhz = 0;
    unsigned long long reasons = 0;
    char err[160] = "";
    const int rc = sl_cuda_sm_clock(&mhz, &reasons, err, sizeof err);
#ifdef SLUICE_CUDA_EMULATED
    CHECK(rc == -1 && strstr(err, "emulated device") != NULL,
          "the emulated build read a clock (rc %d, %u MHz, \"%s\")", rc, mhz, err);
#else
    if (rc == 0) {
        CHECK(mhz >= 100 && mhz <= 5000, "SM clock %u MHz", mhz);
        unsigned again = 0;
        CHECK(sl_cuda_sm_clock(&again, &reasons, err, sizeof err) == 0 && again >= 100,
              "the second read failed (%s) or gave %u MHz", err, again);
    } else {
        CHECK(err[0] != '\0', "a failed read gave no reason");
        printf("no clock here: %s\n", err);
    }
#endif
    /* a failure is remembered: the second call gives the same answer */
    char err2[160] = "";
    unsigned mhz2 = 0;
    const int rc2 = sl_cuda_sm_clock(&mhz2, &reasons, err2, sizeof err2);
    CHECK(rc2 == rc, "the second call returned %d after %d", rc2, rc);
    if (rc != 0) CHECK(strcmp(err, err2) == 0, "the reasons differ: \"%s\", \"%s\"", err, err2);
    return sl_test_finish("test_cuda_clock");
}
