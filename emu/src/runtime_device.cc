/*
 * emu/src/runtime_device.cc - the device functions of the emulator's CUDA runtime API
 * (emu/README.md, "How CUDA maps onto the CPU"): the devices and their H100-like properties
 * and attributes, their identities (UUID, PCI bus id), cudaDeviceReset, versions, and the
 * attributes of kernels (the dynamic shared memory limit) and occupancy. runtime.h is what it
 * shares with runtime.cc and its other siblings.
 */
#include <cstdio>
#include <cstring>
#include <map>

#include <unistd.h>

#include "runtime.h"

namespace sl_emu {

std::map<const void *, size_t> g_smem_limits; /* cudaFuncAttributeMaxDynamicSharedMemorySize */

namespace {

int g_device_flags;
thread_local int t_device = 0;   /* the calling thread's current device, as CUDA keeps it */
constexpr int k_pci_bus0 = 0x10; /* the PCI bus of device 0; device d is on bus 0x10 + d */

/* A device's identity: every process on one host sees the same devices (as the processes of
 * one node see the same GPUs), so both the UUID and the PCI bus id derive from the host name
 * and the ordinal only. Bus 0x10 + ordinal, domain 0, device 0. */
void device_uuid(int device, unsigned char out[16]) {
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    uint64_t h[2] = {0xcbf29ce484222325ULL, 0x84222325cbf29ce4ULL}; /* FNV-1a, two seeds */
    for (int k = 0; k < 2; k++) {
        for (const char *c = host; *c; c++) h[k] = (h[k] ^ (unsigned char)*c) * 0x100000001b3ULL;
        h[k] = (h[k] ^ (uint64_t)(device + 1)) * 0x100000001b3ULL;
    }
    memcpy(out, h, 16);
}

} // namespace

} // namespace sl_emu

using namespace sl_emu;

/* ---- device ---------------------------------------------------------------------------------- */

cudaError_t cudaGetDeviceCount(int *count) {
    if (!count) return ret(cudaErrorInvalidValue);
    *count = cfg().devices;
    return cfg().devices ? cudaSuccess : ret(cudaErrorNoDevice);
}

cudaError_t cudaSetDevice(int device) {
    API_BEGIN;
    if (!cfg().devices) return ret(cudaErrorNoDevice);
    if (device < 0 || device >= cfg().devices) return ret(cudaErrorInvalidDevice);
    t_device = device;
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int *device) {
    if (!device) return ret(cudaErrorInvalidValue);
    if (!cfg().devices) return ret(cudaErrorNoDevice);
    *device = t_device;
    return cudaSuccess;
}

cudaError_t cudaSetDeviceFlags(unsigned int flags) {
    API_BEGIN;
    g_device_flags = (int)flags;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceFlags(unsigned int *flags) {
    if (!flags) return ret(cudaErrorInvalidValue);
    *flags = (unsigned)g_device_flags;
    return cudaSuccess;
}

/* H100-like limits (so that launch configurations are checked as on the GPU sluice targets
 * first); the name says it is the emulator. */
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device) {
    if (!prop) return ret(cudaErrorInvalidValue);
    if (!cfg().devices) return ret(cudaErrorNoDevice);
    if (device < 0 || device >= cfg().devices) return ret(cudaErrorInvalidDevice);
    memset(prop, 0, sizeof *prop);
    snprintf(prop->name, sizeof prop->name, "sluice SIMT emulator");
    device_uuid(device, (unsigned char *)prop->uuid.bytes);
    prop->pciDomainID = 0;
    prop->pciBusID = k_pci_bus0 + device;
    prop->pciDeviceID = 0;
    prop->totalGlobalMem = cfg().mem_limit;
    prop->sharedMemPerBlock = 49152;
    prop->regsPerBlock = 65536;
    prop->warpSize = 32;
    prop->memPitch = 2147483647;
    prop->maxThreadsPerBlock = 1024;
    prop->maxThreadsDim[0] = 1024;
    prop->maxThreadsDim[1] = 1024;
    prop->maxThreadsDim[2] = 64;
    prop->maxGridSize[0] = 2147483647;
    prop->maxGridSize[1] = 65535;
    prop->maxGridSize[2] = 65535;
    prop->totalConstMem = 65536;
    prop->major = 9;
    prop->minor = 0;
    prop->textureAlignment = 512;
    prop->texturePitchAlignment = 32;
    prop->multiProcessorCount = cfg().sms; /* 132 unless SLUICE_EMU_SMS says otherwise */
    prop->canMapHostMemory = 1;
    prop->concurrentKernels = 1;
    prop->unifiedAddressing = 1;
    prop->memoryBusWidth = 5120;
    prop->l2CacheSize = 50 * 1024 * 1024;
    prop->maxThreadsPerMultiProcessor = 2048;
    prop->sharedMemPerMultiprocessor = 233472;
    prop->regsPerMultiprocessor = 65536;
    prop->sharedMemPerBlockOptin = 232448;
    prop->maxBlocksPerMultiProcessor = 32;
    prop->reservedSharedMemPerBlock = 1024;
    prop->hostRegisterSupported = 1;
    prop->memoryPoolsSupported = 1;
    prop->globalL1CacheSupported = 1;
    prop->localL1CacheSupported = 1;
    return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device) {
    if (!value) return ret(cudaErrorInvalidValue);
    cudaDeviceProp p;
    if (cudaError_t e = cudaGetDeviceProperties(&p, device)) return e;
    switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock:
        *value = p.maxThreadsPerBlock;
        break;
    case cudaDevAttrMaxBlockDimX:
        *value = p.maxThreadsDim[0];
        break;
    case cudaDevAttrMaxBlockDimY:
        *value = p.maxThreadsDim[1];
        break;
    case cudaDevAttrMaxBlockDimZ:
        *value = p.maxThreadsDim[2];
        break;
    case cudaDevAttrMaxGridDimX:
        *value = p.maxGridSize[0];
        break;
    case cudaDevAttrMaxGridDimY:
        *value = p.maxGridSize[1];
        break;
    case cudaDevAttrMaxGridDimZ:
        *value = p.maxGridSize[2];
        break;
    case cudaDevAttrMaxSharedMemoryPerBlock:
        *value = (int)p.sharedMemPerBlock;
        break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin:
        *value = (int)p.sharedMemPerBlockOptin;
        break;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor:
        *value = (int)p.sharedMemPerMultiprocessor;
        break;
    case cudaDevAttrTotalConstantMemory:
        *value = (int)p.totalConstMem;
        break;
    case cudaDevAttrWarpSize:
        *value = p.warpSize;
        break;
    case cudaDevAttrMaxRegistersPerBlock:
        *value = p.regsPerBlock;
        break;
    case cudaDevAttrMaxRegistersPerMultiprocessor:
        *value = p.regsPerMultiprocessor;
        break;
    case cudaDevAttrMultiProcessorCount:
        *value = p.multiProcessorCount;
        break;
    case cudaDevAttrMaxThreadsPerMultiProcessor:
        *value = p.maxThreadsPerMultiProcessor;
        break;
    case cudaDevAttrMaxBlocksPerMultiprocessor:
        *value = p.maxBlocksPerMultiProcessor;
        break;
    case cudaDevAttrComputeCapabilityMajor:
        *value = p.major;
        break;
    case cudaDevAttrComputeCapabilityMinor:
        *value = p.minor;
        break;
    case cudaDevAttrL2CacheSize:
        *value = p.l2CacheSize;
        break;
    case cudaDevAttrGlobalMemoryBusWidth:
        *value = p.memoryBusWidth;
        break;
    case cudaDevAttrClockRate: /* an H100 SXM's boost clock, kHz */
        *value = 1980000;
        break;
    case cudaDevAttrMemoryClockRate: /* its HBM3: 2 x 2.619 GHz x 5120 bits = 3.35 TB/s */
        *value = 2619000;
        break;
    case cudaDevAttrUnifiedAddressing:
        *value = 1;
        break;
    case cudaDevAttrCanMapHostMemory:
        *value = 1;
        break;
    case cudaDevAttrConcurrentKernels:
        *value = 1;
        break;
    case cudaDevAttrMemoryPoolsSupported:
        *value = 1;
        break;
    case cudaDevAttrHostRegisterSupported:
        *value = 1;
        break;
    case cudaDevAttrIntegrated:
        *value = 0;
        break;
    case cudaDevAttrEccEnabled:
        *value = 0;
        break;
    case cudaDevAttrCooperativeLaunch:
        *value = 0;
        break;
    case cudaDevAttrManagedMemory:
        *value = 0;
        break;
    case cudaDevAttrReservedSharedMemoryPerBlock:
        *value = (int)p.reservedSharedMemPerBlock;
        break;
    default:
        return reject(cudaErrorInvalidValue, "cudaDeviceGetAttribute: attribute %d is not emulated",
                      (int)attr);
    }
    return cudaSuccess;
}

cudaError_t cudaDeviceGetPCIBusId(char *pciBusId, int len, int device) {
    if (!pciBusId || len <= 0) return ret(cudaErrorInvalidValue);
    if (!cfg().devices) return ret(cudaErrorNoDevice);
    if (device < 0 || device >= cfg().devices) return ret(cudaErrorInvalidDevice);
    /* CUDA's form: domain:bus:device.function in hexadecimal */
    snprintf(pciBusId, (size_t)len, "%04x:%02x:00.0", 0, k_pci_bus0 + device);
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
    API_BEGIN;
    return cudaSuccess;
}

/* Frees everything the program allocated on the device and clears the errors, as a reset of
 * the GPU does. */
cudaError_t cudaDeviceReset(void) {
    std::lock_guard<std::recursive_mutex> lock(big_lock());
    auto &m = allocations();
    for (auto it = m.begin(); it != m.end();) {
        const allocation a = it->second;
        it = m.erase(it);
        if (a.raw) {
            unpoison(a.raw, k_front + round_up(a.size + k_guard, 256));
            free(a.raw);
        }
    }
    g_used = 0;
    for (cudaStream_t s : g_streams) delete s;
    g_streams.clear();
    for (cudaEvent_t e : g_events) delete e;
    g_events.clear();
    g_smem_limits.clear();
    g_sticky = cudaSuccess;
    t_last = cudaSuccess;
    return cudaSuccess;
}

cudaError_t cudaDeviceSetLimit(enum cudaLimit limit, size_t value) {
    API_BEGIN;
    (void)limit, (void)value;
    return cudaSuccess;
}

cudaError_t cudaDeviceGetLimit(size_t *pValue, enum cudaLimit limit) {
    if (!pValue) return ret(cudaErrorInvalidValue);
    *pValue = limit == cudaLimitStackSize ? cfg().stack_bytes : 0;
    return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int *runtimeVersion) {
    if (!runtimeVersion) return ret(cudaErrorInvalidValue);
    *runtimeVersion = CUDART_VERSION;
    return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int *driverVersion) {
    if (!driverVersion) return ret(cudaErrorInvalidValue);
    *driverVersion = CUDART_VERSION;
    return cudaSuccess;
}

/* ---- kernels --------------------------------------------------------------------------------- */

cudaError_t cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr, int value) {
    API_BEGIN;
    if (!func) return ret(cudaErrorInvalidDeviceFunction);
    switch (attr) {
    case cudaFuncAttributeMaxDynamicSharedMemorySize:
        if (value < 0 || value > 232448)
            return reject(cudaErrorInvalidValue,
                          "cudaFuncSetAttribute: MaxDynamicSharedMemorySize %d outside [0, 232448]",
                          value);
        g_smem_limits[func] = (size_t)value;
        return cudaSuccess;
    case cudaFuncAttributePreferredSharedMemoryCarveout:
        if (value < -1 || value > 100) return ret(cudaErrorInvalidValue);
        return cudaSuccess;
    default:
        return reject(cudaErrorInvalidValue, "cudaFuncSetAttribute: attribute %d is not emulated",
                      (int)attr);
    }
}

cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes *attr, const void *func) {
    API_BEGIN;
    if (!attr) return ret(cudaErrorInvalidValue);
    if (!func) return ret(cudaErrorInvalidDeviceFunction);
    memset(attr, 0, sizeof *attr);
    attr->maxThreadsPerBlock = 1024;
    attr->maxDynamicSharedSizeBytes = (int)dynamic_smem_limit(func);
    attr->ptxVersion = 90;
    attr->binaryVersion = 90;
    attr->preferredShmemCarveout = -1;
    return cudaSuccess;
}

cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *numBlocks, const void *func,
                                                          int blockSize, size_t dynamicSMemSize) {
    API_BEGIN;
    if (!numBlocks || blockSize <= 0 || blockSize > 1024) return ret(cudaErrorInvalidValue);
    if (!func) return ret(cudaErrorInvalidDeviceFunction);
    const int warps = (blockSize + 31) / 32;
    int n = 64 / warps;
    if (n > 32) n = 32;
    const size_t per_block = dynamicSMemSize + 1024;
    if ((size_t)n * per_block > 233472) n = (int)(233472 / per_block);
    *numBlocks = n;
    return cudaSuccess;
}
