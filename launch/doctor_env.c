/* launch/doctor_env.c - `sluice doctor`'s environment section (docs/doctor.md). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "launch/doctor.h"

#ifdef SLUICE_WITH_CUDA
#include "attention/kernels_cuda.h"
#include "core/cuda_info.h"

#define GIB ((double)(1ULL << 30))

/* Which gated-attention kernel a run takes, by the backend's own rule
 * (sl_cuda_gated_attn_tc_takes; attention/attn_kernels.h): "bf16 at head dim 64, 128: tensor
 * cores (sm90 on 9.x GPUs, mma.sync elsewhere and emulated); other head dims and fp32: the SIMT
 * kernel". The correctness rows name the kernel that ran on each device. */
static void attention_kernels(char *buf, size_t len) {
    size_t at = (size_t)snprintf(buf, len, "attention: bf16 at head dim");
    int n = 0;
    for (int dim = 1; dim <= 1024 && at < len; dim++)
        if (sl_cuda_gated_attn_tc_takes(SL_BF16, dim))
            at += (size_t)snprintf(buf + at, len - at, "%s %d", n++ ? "," : "", dim);
    if (at < len)
        snprintf(buf + at, len - at,
                 "%s: tensor cores (sm90 on 9.x GPUs, mma.sync elsewhere and emulated); other "
                 "head dims and fp32: the SIMT kernel",
                 n ? "" : " (none)");
}

int sl_doctor_environment(sl_doctor *d) {
    sl_cuda_versions v;
    sl_cuda_versions_get(&v);
    char drv[16], rt[16];
    sl_cuda_version_string(v.cuda_driver, drv, sizeof drv);
    sl_cuda_version_string(v.cuda_runtime, rt, sizeof rt);
    /* Driver, runtime and libraries: facts (INFO); a missing driver shows under devices. */
    if (v.cuda_driver && v.have_driver)
        sl_dr_add(d, "environment", "driver", "NVIDIA driver", SL_DR_INFO, NAN, "",
                  "%s, supports CUDA %s", v.driver, drv);
    else if (v.cuda_driver)
        sl_dr_add(d, "environment", "driver", "NVIDIA driver", SL_DR_INFO, NAN, "",
                  "release unknown (%s), supports CUDA %s", v.driver, drv);
    else
        sl_dr_add(d, "environment", "driver", "NVIDIA driver", SL_DR_INFO, NAN, "",
                  "none: no CUDA driver (%s)", v.driver);
    sl_dr_add(d, "environment", "cuda_runtime", "CUDA runtime", SL_DR_INFO, NAN, "", "%s", rt);
    sl_dr_add(d, "environment", "cublas", "cuBLAS", SL_DR_INFO, NAN, "", "%s", v.cublas);
    sl_dr_add(d, "environment", "nccl", "NCCL", SL_DR_INFO, NAN, "", "%s", v.nccl);
    sl_dr_add(d, "environment", "cudnn", "cuDNN (for attention.kernel = cudnn)", SL_DR_INFO, NAN,
              "", "%s", v.cudnn);
    sl_dr_add(d, "environment", "build", "GPU code in this build", SL_DR_INFO, NAN, "", "%s",
              v.targets);

    sl_dr_json_append(&d->env_json, "{\"driver\": ");
    if (v.have_driver)
        sl_dr_json_str(&d->env_json, v.driver);
    else
        sl_dr_json_append(&d->env_json, "null");
    sl_dr_json_append(&d->env_json,
                      ", \"cuda_driver\": %d, \"cuda_runtime\": %d, \"cublas\": ", v.cuda_driver,
                      v.cuda_runtime);
    sl_dr_json_str(&d->env_json, v.cublas);
    sl_dr_json_append(&d->env_json, ", \"nccl\": ");
    sl_dr_json_str(&d->env_json, v.nccl);
    sl_dr_json_append(&d->env_json, ", \"cudnn\": ");
    if (v.have_cudnn)
        sl_dr_json_str(&d->env_json, v.cudnn);
    else
        sl_dr_json_append(&d->env_json, "null");
    sl_dr_json_append(&d->env_json, ", \"targets\": ");
    sl_dr_json_str(&d->env_json, v.targets);
    sl_dr_json_append(&d->env_json, ", \"device_count\": %d}", v.devices);

    sl_dr_json_append(&d->devices_json, "[");
    if (v.devices == 0) {
        sl_dr_add(d, "environment", "gpus", "GPUs", SL_DR_FAIL, 0, "", "no device: %s (exit 3)",
                  v.no_devices);
        sl_dr_json_append(&d->devices_json, "]");
        return 0;
    }
    for (int i = 0; i < v.devices; i++) {
        char key[32], label[48], err[256];
        sl_cuda_device g;
        snprintf(key, sizeof key, "gpu%d", i);
        snprintf(label, sizeof label, "GPU %d", i);
        if (sl_cuda_device_get(i, &g, err, sizeof err) != 0) {
            sl_dr_add(d, "environment", key, label, SL_DR_FAIL, NAN, "", "%s", err);
            continue;
        }
        sl_dr_add(d, "environment", key, label, SL_DR_OK, (double)g.total_bytes / GIB, "GiB",
                  "%s, sm_%d%d, %d SMs, %.1f GiB (%.1f free), PCI %s, %s", g.name, g.major, g.minor,
                  g.sms, (double)g.total_bytes / GIB, (double)g.free_bytes / GIB, g.pci_bus,
                  g.uuid);
        snprintf(key, sizeof key, "gpu%d.kernels", i);
        snprintf(label, sizeof label, "GPU %d kernels", i);
        if (g.image_version > 0) {
            char attn[200];
            attention_kernels(attn, sizeof attn);
            sl_dr_add(d, "environment", key, label, SL_DR_OK, g.image_version, "",
                      "runs this build's sm_%d image; %s", g.image_version, attn);
            if (i < (int)(sizeof d->usable / sizeof d->usable[0])) d->usable[i] = true;
        } else {
            sl_dr_add(d, "environment", key, label, SL_DR_FAIL, NAN, "",
                      "no kernel image for sm_%d%d in this build (it has %s): %s", g.major, g.minor,
                      v.targets, g.image_err);
        }
        sl_dr_json_append(&d->devices_json, "%s{\"index\": %d, \"name\": ", i ? ", " : "", i);
        sl_dr_json_str(&d->devices_json, g.name);
        sl_dr_json_append(&d->devices_json,
                          ", \"compute_capability\": \"%d.%d\", \"sms\": %d, \"memory_bytes\": "
                          "%zu, \"free_bytes\": %zu, \"clock_khz\": %d, \"memory_clock_khz\": %d, "
                          "\"bus_bits\": %d, \"pci_bus\": ",
                          g.major, g.minor, g.sms, g.total_bytes, g.free_bytes, g.clock_khz,
                          g.mem_clock_khz, g.bus_bits);
        sl_dr_json_str(&d->devices_json, g.pci_bus);
        sl_dr_json_append(&d->devices_json, ", \"uuid\": ");
        sl_dr_json_str(&d->devices_json, g.uuid);
        sl_dr_json_append(&d->devices_json, ", \"kernel_image\": ");
        if (g.image_version > 0)
            sl_dr_json_append(&d->devices_json, "\"sm_%d\"", g.image_version);
        else
            sl_dr_json_append(&d->devices_json, "null");
        /* the bf16 head dims on tensor cores; everything else runs the SIMT kernel */
        sl_dr_json_append(&d->devices_json, ", \"attention_tensor_core_head_dims\": [");
        for (int dim = 1, n = 0; dim <= 1024; dim++)
            if (sl_cuda_gated_attn_tc_takes(SL_BF16, dim))
                sl_dr_json_append(&d->devices_json, "%s%d", n++ ? ", " : "", dim);
        sl_dr_json_append(&d->devices_json, "]}");
    }
    sl_dr_json_append(&d->devices_json, "]");
    return v.devices;
}

#else /* a build without the CUDA backend */

int sl_doctor_environment(sl_doctor *d) {
    sl_dr_add(d, "environment", "build", "GPU code in this build", SL_DR_INFO, NAN, "",
              "none: built without the CUDA backend (nvcc was not found; docs/cuda.md)");
    sl_dr_add(d, "environment", "gpus", "GPUs", SL_DR_FAIL, 0, "",
              "no device: this build has no CUDA backend (exit 3)");
    sl_dr_json_append(&d->env_json, "{\"driver\": null, \"cuda_driver\": 0, \"cuda_runtime\": 0, "
                                    "\"cublas\": null, \"nccl\": null, \"cudnn\": null, "
                                    "\"targets\": null, \"device_count\": 0}");
    sl_dr_json_append(&d->devices_json, "[]");
    return 0;
}

#endif
