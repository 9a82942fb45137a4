/* core/device_peak.c - the datasheet table of device_peak.h. */
#include "core/device_peak.h"

#include <stddef.h>
#include <string.h>

/* Matched in order by a substring of the device name, so the variants come before the plain
 * name they contain ("H100 PCIe" before "H100"). Figures: NVIDIA's datasheets, dense bf16
 * Tensor Core (the sparsity figures halved). */
static const struct {
    const char *match, *model;
    double tflops;
} k_table[] = {
    {"GH200", "GH200", 989.0},         {"H200 NVL", "H200 NVL", 835.0},
    {"H200", "H200 SXM", 989.0},       {"H100 NVL", "H100 NVL", 835.0},
    {"H100 PCIe", "H100 PCIe", 756.0}, {"H100", "H100 SXM", 989.0},
    {"H800 PCIe", "H800 PCIe", 756.0}, {"H800", "H800 SXM", 989.0},
    {"A100", "A100", 312.0},           {"A800", "A800", 312.0},
    {"L40S", "L40S", 362.0},           {"B200", "B200", 2250.0},
};

double sl_device_datasheet_bf16_tflops(const char *name, const char **model) {
    if (model) *model = NULL;
    if (!name) return 0;
    for (size_t i = 0; i < sizeof k_table / sizeof k_table[0]; i++)
        if (strstr(name, k_table[i].match)) {
            if (model) *model = k_table[i].model;
            return k_table[i].tflops;
        }
    return 0;
}
