/*
 * emu/src/runtime.cc - the CUDA runtime API of the CPU test double (emu/README.md).
 *
 * The declarations are the toolkit's own (cuda_runtime_api.h), so every signature here is the
 * real one. SLUICE_EMU_DEVICES emulated devices (default 1; "sluice SIMT emulator", H100-like
 * limits), all sharing one memory and one executor, each with its own identity (UUID, PCI
 * bus id). Device memory is host memory with guard zones around each allocation, filled with NaN
 * bytes when allocated; streams and events complete their work when it is enqueued; errors follow
 * CUDA's rules (a failed call sets the last error; a fault in a kernel is sticky).
 */
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <string>

#include <unistd.h>

#include "internal.h"

#if SL_EMU_ASAN
#include <sanitizer/asan_interface.h>
#endif

struct CUstream_st {
    unsigned flags;
    int priority;
};
struct CUevent_st {
    unsigned flags;
    bool recorded;
    std::chrono::steady_clock::time_point when;
};

namespace sl_emu {

namespace {

size_t env_size(const char *name, size_t dflt) {
    const char *v = getenv(name);
    if (!v || !*v) return dflt;
    char *end = nullptr;
    double x = strtod(v, &end);
    switch (end && *end ? *end : 0) {
    case 'k':
    case 'K':
        x *= 1024.0;
        break;
    case 'm':
    case 'M':
        x *= 1024.0 * 1024.0;
        break;
    case 'g':
    case 'G':
        x *= 1024.0 * 1024.0 * 1024.0;
        break;
    case 't':
    case 'T':
        x *= 1024.0 * 1024.0 * 1024.0 * 1024.0;
        break;
    case 0:
        break;
    default:
        fprintf(stderr, "sluice emu: %s=%s: expected a size such as 65536, 64K, 2G\n", name, v);
        exit(2);
    }
    return (size_t)x;
}
long env_long(const char *name, long dflt) {
    const char *v = getenv(name);
    return v && *v ? strtol(v, nullptr, 10) : dflt;
}

/* Memory accounting: what the emulated device has handed out. */
size_t g_used, g_peak;
uint64_t g_serial;
std::set<cudaStream_t> g_streams;
std::set<cudaEvent_t> g_events;
std::map<const void *, size_t> g_smem_limits; /* cudaFuncAttributeMaxDynamicSharedMemorySize */
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

uint64_t g_pool_release_threshold;
int g_pool_dummy;

thread_local cudaError_t t_last = cudaSuccess;
cudaError_t g_sticky = cudaSuccess;

cudaError_t ret(cudaError_t e) {
    if (e != cudaSuccess) set_last_error(e);
    return e;
}

/* A diagnostic for a call the emulator rejects (CUDA itself would only return the code). */
cudaError_t reject(cudaError_t e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
cudaError_t reject(cudaError_t e, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "sluice emu: %s (%s)\n", msg, cudaGetErrorName(e));
    return ret(e);
}

size_t round_up(size_t n, size_t a) {
    return (n + a - 1) / a * a;
}

cudaError_t do_alloc(void **p, size_t size, alloc_kind kind) {
    if (!p) return ret(cudaErrorInvalidValue);
    *p = nullptr;
    if (size == 0) return cudaSuccess;
    if (kind == k_device && (size > cfg().mem_limit || g_used > cfg().mem_limit - size))
        return ret(cudaErrorMemoryAllocation);
    const size_t raw_size = k_front + round_up(size + k_guard, 256);
    char *raw = raw_size > size ? (char *)aligned_alloc(256, raw_size) : nullptr;
    if (!raw) return ret(cudaErrorMemoryAllocation);
    char *user = raw + k_front;
    memset(user - k_guard, k_guard_byte, k_guard);
    memset(user + size, k_guard_byte, k_guard);
    /* NaN bytes (fp32 and bf16): a kernel reading memory nobody wrote produces NaN. */
    memset(user, 0xff, size);
    poison(raw, k_front);
    poison(user + size, raw_size - k_front - size);
    allocations()[(uintptr_t)user] = allocation{raw, user, size, kind, ++g_serial};
    if (kind == k_device) {
        g_used += size;
        if (g_used > g_peak) g_peak = g_used;
    }
    *p = user;
    return cudaSuccess;
}

cudaError_t do_free(void *p, bool device, const char *fn) {
    if (!p) return cudaSuccess;
    auto &m = allocations();
    auto it = m.find((uintptr_t)p);
    if (it == m.end() || (it->second.kind == k_device) != device || it->second.kind == k_registered)
        return reject(cudaErrorInvalidValue, "%s(%p): not the start of a live %s allocation", fn, p,
                      device ? "device" : "pinned host");
    const allocation a = it->second;
    check_guard(a, fn);
    m.erase(it);
    if (a.kind == k_device) g_used -= a.size;
    unpoison(a.raw, k_front + round_up(a.size + k_guard, 256));
    free(a.raw);
    return cudaSuccess;
}

/* A range the runtime is asked to read or write as device memory must lie inside one
 * allocation (device memory, or pinned or registered host memory, which a GPU can address). */
cudaError_t check_range(const char *fn, const char *which, const void *p, size_t n) {
    if (n == 0 || find_allocation(p, n)) return cudaSuccess;
    const allocation *a = find_allocation(p, 0);
    if (a) {
        char what[256];
        describe(*a, what, sizeof what);
        return reject(cudaErrorInvalidValue, "%s: %s range %p + %zu bytes runs past the end of %s",
                      fn, which, p, n, what);
    }
    return reject(cudaErrorInvalidValue, "%s: %s %p is not device memory (no live allocation)", fn,
                  which, p);
}
/* The host side of a copy must not be device memory (CUDA: undefined behaviour). */
cudaError_t check_host(const char *fn, const char *which, const void *p, size_t n) {
    const allocation *a = n ? find_allocation(p, 0) : nullptr;
    if (a && a->kind == k_device)
        return reject(cudaErrorInvalidValue,
                      "%s: %s %p is device memory, but the copy kind says host memory", fn, which,
                      p);
    return cudaSuccess;
}

cudaError_t do_memcpy(void *dst, const void *src, size_t n, cudaMemcpyKind kind, const char *fn) {
    cudaError_t e = cudaSuccess;
    switch (kind) {
    case cudaMemcpyHostToHost:
        if ((e = check_host(fn, "destination", dst, n)) || (e = check_host(fn, "source", src, n)))
            return e;
        break;
    case cudaMemcpyHostToDevice:
        if ((e = check_range(fn, "destination", dst, n)) || (e = check_host(fn, "source", src, n)))
            return e;
        break;
    case cudaMemcpyDeviceToHost:
        if ((e = check_host(fn, "destination", dst, n)) || (e = check_range(fn, "source", src, n)))
            return e;
        break;
    case cudaMemcpyDeviceToDevice:
        if ((e = check_range(fn, "destination", dst, n)) || (e = check_range(fn, "source", src, n)))
            return e;
        break;
    case cudaMemcpyDefault:
        /* Unified addressing: whatever each pointer is; a range starting in an allocation must
         * end in it. */
        if ((find_allocation(dst, 0) && (e = check_range(fn, "destination", dst, n))) ||
            (find_allocation(src, 0) && (e = check_range(fn, "source", src, n))))
            return e;
        break;
    default:
        return reject(cudaErrorInvalidMemcpyDirection, "%s: copy kind %d", fn, (int)kind);
    }
    if (n) memmove(dst, src, n);
    return cudaSuccess;
}

bool known_stream(cudaStream_t s) {
    return s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread || g_streams.count(s);
}

#define API_BEGIN                                                                                  \
    std::lock_guard<std::recursive_mutex> lock_(big_lock());                                       \
    if (cudaError_t sticky_ = sticky_error()) return ret(sticky_)

#define CHECK_STREAM(s)                                                                            \
    if (!known_stream(s))                                                                          \
    return reject(cudaErrorInvalidResourceHandle, "%s: unknown stream %p", __func__, (void *)(s))

} // namespace

/* ---- shared with simt.cc --------------------------------------------------------------------- */

const config &cfg() {
    static const config c = [] {
        config x;
        x.racecheck = env_long("SLUICE_EMU_RACECHECK", 1) != 0;
        x.orders = (int)env_long("SLUICE_EMU_ORDERS", 2);
        if (x.orders < 2) x.orders = 2;
        if (!x.racecheck) x.orders = 1;
        x.seed = (uint64_t)env_long("SLUICE_EMU_SEED", 1);
        x.fatal = env_long("SLUICE_EMU_FATAL", 1) != 0;
        x.stack_bytes = env_size("SLUICE_EMU_STACK", SL_EMU_ASAN ? 256 * 1024 : 64 * 1024);
        if (x.stack_bytes < 16384) x.stack_bytes = 16384;
        x.mem_limit = env_size("SLUICE_EMU_MEM_LIMIT", (size_t)80 << 30);
        const long devices = env_long("SLUICE_EMU_DEVICES", 1);
        x.devices = devices < 0 ? 0 : devices > k_max_devices ? k_max_devices : (int)devices;
        x.stats = env_long("SLUICE_EMU_STATS", 0) != 0;
        return x;
    }();
    return c;
}

std::recursive_mutex &big_lock() {
    static std::recursive_mutex m;
    return m;
}

/* Never destroyed: memory a program leaves allocated at exit stays reachable (as on a GPU it
 * is freed with the context), so LeakSanitizer does not report it. */
std::map<uintptr_t, allocation> &allocations() {
    static auto *m = new std::map<uintptr_t, allocation>();
    return *m;
}

const allocation *find_allocation(const void *p, size_t n) {
    auto &m = allocations();
    const uintptr_t a = (uintptr_t)p;
    auto it = m.upper_bound(a);
    if (it == m.begin()) return nullptr;
    --it;
    const allocation &x = it->second;
    const uintptr_t lo = (uintptr_t)x.user;
    if (a < lo || a - lo > x.size || (a - lo == x.size && x.size)) {
        /* p == end is inside only for an empty range: a pointer one past an allocation is
         * not in it. */
        return nullptr;
    }
    if (n > x.size - (a - lo)) return nullptr;
    return &x;
}

void describe(const allocation &a, char *buf, size_t len) {
    static const char *const kinds[] = {"device allocation", "pinned host allocation",
                                        "registered host memory"};
    snprintf(buf, len, "%s #%llu (%zu bytes at %p)", kinds[a.kind], (unsigned long long)a.serial,
             a.size, (void *)a.user);
}

bool check_guard(const allocation &a, const char *who) {
#if SL_EMU_ASAN
    /* ASan reports the access itself: the guard zones are poisoned. */
    (void)a, (void)who;
    return true;
#else
    if (a.kind == k_registered) return true;
    long bad = 0;
    bool found = false;
    for (size_t i = 0; i < k_guard && !found; i++)
        if ((unsigned char)a.user[-(long)k_guard + (long)i] != k_guard_byte) {
            bad = -(long)k_guard + (long)i;
            found = true;
        }
    for (size_t i = 0; i < k_guard && !found; i++)
        if ((unsigned char)a.user[a.size + i] != k_guard_byte) {
            bad = (long)(a.size + i);
            found = true;
        }
    if (!found) return true;
    char what[256], msg[640];
    describe(a, what, sizeof what);
    snprintf(msg, sizeof msg,
             "%s: out-of-bounds write: %s has its guard zone overwritten at byte offset %ld (%s "
             "its %s)",
             who, what, bad, bad < 0 ? "before" : "past", bad < 0 ? "start" : "end");
    /* Repair it, so that (with SLUICE_EMU_FATAL=0) the next check does not report it again. */
    memset(a.user - k_guard, k_guard_byte, k_guard);
    memset(a.user + a.size, k_guard_byte, k_guard);
    fault(cudaErrorIllegalAddress, msg);
    return false;
#endif
}

bool check_guards(const char *who) {
    for (const auto &kv : allocations())
        if (!check_guard(kv.second, who)) return false;
    return true;
}

void set_last_error(cudaError_t e) {
    t_last = e;
}
cudaError_t sticky_error() {
    return g_sticky;
}
void set_sticky_error(cudaError_t e) {
    g_sticky = e;
    t_last = e;
}

void fault(cudaError_t e, const char *msg) {
    fprintf(stderr, "sluice emu: FAULT: %s\n", msg);
    if (cfg().fatal) {
        fprintf(stderr, "sluice emu: aborting (SLUICE_EMU_FATAL=0 turns faults into sticky CUDA "
                        "errors)\n");
        fflush(stderr);
        abort();
    }
    set_sticky_error(e);
}

size_t dynamic_smem_limit(const void *kernel) {
    auto it = g_smem_limits.find(kernel);
    return it == g_smem_limits.end() ? 49152 : it->second;
}

bool valid_stream(cudaStream_t s) {
    if (known_stream(s)) return true;
    fprintf(stderr, "sluice emu: launch on unknown stream %p\n", (void *)s);
    return false;
}

void poison(const void *p, size_t n) {
#if SL_EMU_ASAN
    ASAN_POISON_MEMORY_REGION(p, n);
#else
    (void)p, (void)n;
#endif
}
void unpoison(const void *p, size_t n) {
#if SL_EMU_ASAN
    ASAN_UNPOISON_MEMORY_REGION(p, n);
#else
    (void)p, (void)n;
#endif
}

} // namespace sl_emu

using namespace sl_emu;

/* ---- errors ---------------------------------------------------------------------------------- */

cudaError_t cudaGetLastError(void) {
    std::lock_guard<std::recursive_mutex> lock(big_lock());
    const cudaError_t e = t_last;
    if (!g_sticky) t_last = cudaSuccess;
    return e;
}

cudaError_t cudaPeekAtLastError(void) {
    return t_last;
}

#define SL_EMU_ERRORS(X)                                                                           \
    X(cudaSuccess, "no error")                                                                     \
    X(cudaErrorInvalidValue, "invalid argument")                                                   \
    X(cudaErrorMemoryAllocation, "out of memory")                                                  \
    X(cudaErrorInitializationError, "initialization error")                                        \
    X(cudaErrorCudartUnloading, "driver shutting down")                                            \
    X(cudaErrorInvalidConfiguration, "invalid configuration argument")                             \
    X(cudaErrorInvalidPitchValue, "invalid pitch argument")                                        \
    X(cudaErrorInvalidSymbol, "invalid device symbol")                                             \
    X(cudaErrorInvalidDevicePointer, "invalid device pointer")                                     \
    X(cudaErrorInvalidMemcpyDirection, "invalid copy direction for memcpy")                        \
    X(cudaErrorNoDevice, "no CUDA-capable device is detected")                                     \
    X(cudaErrorInvalidDevice, "invalid device ordinal")                                            \
    X(cudaErrorInvalidResourceHandle, "invalid resource handle")                                   \
    X(cudaErrorNotReady, "device not ready")                                                       \
    X(cudaErrorIllegalAddress, "an illegal memory access was encountered")                         \
    X(cudaErrorLaunchOutOfResources, "too many resources requested for launch")                    \
    X(cudaErrorLaunchFailure, "unspecified launch failure")                                        \
    X(cudaErrorInvalidDeviceFunction, "invalid device function")                                   \
    X(cudaErrorNotSupported, "operation not supported")                                            \
    X(cudaErrorAssert, "device-side assert triggered")                                             \
    X(cudaErrorHostMemoryAlreadyRegistered,                                                        \
      "part or all of the requested memory range is already mapped")                               \
    X(cudaErrorHostMemoryNotRegistered,                                                            \
      "pointer does not correspond to a registered memory region")                                 \
    X(cudaErrorUnknown, "unknown error")

const char *cudaGetErrorString(cudaError_t error) {
#define X(e, s)                                                                                    \
    case e:                                                                                        \
        return s;
    switch (error) { SL_EMU_ERRORS(X) default : return "unrecognized error code"; }
#undef X
}

const char *cudaGetErrorName(cudaError_t error) {
#define X(e, s)                                                                                    \
    case e:                                                                                        \
        return #e;
    switch (error) { SL_EMU_ERRORS(X) default : return "cudaErrorUnknown"; }
#undef X
}

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
    prop->multiProcessorCount = 132;
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

/* ---- memory ---------------------------------------------------------------------------------- */

cudaError_t cudaMalloc(void **devPtr, size_t size) {
    API_BEGIN;
    return do_alloc(devPtr, size, k_device);
}

cudaError_t cudaFree(void *devPtr) {
    API_BEGIN;
    return do_free(devPtr, true, "cudaFree");
}

cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t hStream) {
    API_BEGIN;
    CHECK_STREAM(hStream);
    return do_alloc(devPtr, size, k_device);
}

cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t hStream) {
    API_BEGIN;
    CHECK_STREAM(hStream);
    return do_free(devPtr, true, "cudaFreeAsync");
}

cudaError_t cudaMallocHost(void **ptr, size_t size) {
    API_BEGIN;
    return do_alloc(ptr, size, k_pinned);
}

cudaError_t cudaHostAlloc(void **pHost, size_t size, unsigned int flags) {
    API_BEGIN;
    (void)flags;
    return do_alloc(pHost, size, k_pinned);
}

cudaError_t cudaFreeHost(void *ptr) {
    API_BEGIN;
    return do_free(ptr, false, "cudaFreeHost");
}

cudaError_t cudaHostRegister(void *ptr, size_t size, unsigned int flags) {
    API_BEGIN;
    (void)flags;
    if (!ptr || !size) return ret(cudaErrorInvalidValue);
    auto &m = allocations();
    auto it = m.lower_bound((uintptr_t)ptr);
    if (find_allocation(ptr, 0) || (it != m.end() && it->first < (uintptr_t)ptr + size))
        return ret(cudaErrorHostMemoryAlreadyRegistered);
    m[(uintptr_t)ptr] = allocation{nullptr, (char *)ptr, size, k_registered, ++g_serial};
    return cudaSuccess;
}

cudaError_t cudaHostUnregister(void *ptr) {
    API_BEGIN;
    auto &m = allocations();
    auto it = m.find((uintptr_t)ptr);
    if (it == m.end() || it->second.kind != k_registered)
        return ret(cudaErrorHostMemoryNotRegistered);
    m.erase(it);
    return cudaSuccess;
}

cudaError_t cudaHostGetDevicePointer(void **pDevice, void *pHost, unsigned int flags) {
    API_BEGIN;
    (void)flags;
    const allocation *a = find_allocation(pHost, 0);
    if (!pDevice || !a || a->kind == k_device) return ret(cudaErrorInvalidValue);
    *pDevice = pHost; /* unified addressing */
    return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attributes, const void *ptr) {
    API_BEGIN;
    if (!attributes) return ret(cudaErrorInvalidValue);
    memset(attributes, 0, sizeof *attributes);
    const allocation *a = find_allocation(ptr, 0);
    attributes->device = 0;
    if (!a) {
        attributes->type = cudaMemoryTypeUnregistered;
        attributes->device = -2;
    } else if (a->kind == k_device) {
        attributes->type = cudaMemoryTypeDevice;
        attributes->devicePointer = (void *)ptr;
    } else {
        attributes->type = cudaMemoryTypeHost;
        attributes->devicePointer = (void *)ptr;
        attributes->hostPointer = (void *)ptr;
    }
    return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total) {
    API_BEGIN;
    if (!free_bytes || !total) return ret(cudaErrorInvalidValue);
    *total = cfg().mem_limit;
    *free_bytes = cfg().mem_limit - g_used;
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind) {
    API_BEGIN;
    return do_memcpy(dst, src, count, kind, "cudaMemcpy");
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                            cudaStream_t stream) {
    API_BEGIN;
    CHECK_STREAM(stream);
    return do_memcpy(dst, src, count, kind, "cudaMemcpyAsync");
}

cudaError_t cudaMemcpy2D(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                         size_t height, enum cudaMemcpyKind kind) {
    API_BEGIN;
    if (width > dpitch || width > spitch) return ret(cudaErrorInvalidPitchValue);
    for (size_t r = 0; r < height; r++)
        if (cudaError_t e = do_memcpy((char *)dst + r * dpitch, (const char *)src + r * spitch,
                                      width, kind, "cudaMemcpy2D"))
            return e;
    return cudaSuccess;
}

cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch,
                              size_t width, size_t height, enum cudaMemcpyKind kind,
                              cudaStream_t stream) {
    API_BEGIN;
    CHECK_STREAM(stream);
    return cudaMemcpy2D(dst, dpitch, src, spitch, width, height, kind);
}

cudaError_t cudaMemset(void *devPtr, int value, size_t count) {
    API_BEGIN;
    if (cudaError_t e = check_range("cudaMemset", "destination", devPtr, count)) return e;
    if (count) memset(devPtr, value, count);
    return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream) {
    API_BEGIN;
    CHECK_STREAM(stream);
    if (cudaError_t e = check_range("cudaMemsetAsync", "destination", devPtr, count)) return e;
    if (count) memset(devPtr, value, count);
    return cudaSuccess;
}

/* Memory pools: allocation is immediate, so the pool only answers questions. */
cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *memPool, int device) {
    API_BEGIN;
    if (!memPool) return ret(cudaErrorInvalidValue);
    if (device != 0) return ret(cudaErrorInvalidDevice);
    *memPool = (cudaMemPool_t)&g_pool_dummy;
    return cudaSuccess;
}

cudaError_t cudaDeviceGetMemPool(cudaMemPool_t *memPool, int device) {
    return cudaDeviceGetDefaultMemPool(memPool, device);
}

cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr, void *value) {
    API_BEGIN;
    if (memPool != (cudaMemPool_t)&g_pool_dummy || !value) return ret(cudaErrorInvalidValue);
    if (attr == cudaMemPoolAttrReleaseThreshold) g_pool_release_threshold = *(uint64_t *)value;
    return cudaSuccess;
}

cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr, void *value) {
    API_BEGIN;
    if (memPool != (cudaMemPool_t)&g_pool_dummy || !value) return ret(cudaErrorInvalidValue);
    switch (attr) {
    case cudaMemPoolAttrReleaseThreshold:
        *(uint64_t *)value = g_pool_release_threshold;
        break;
    case cudaMemPoolAttrReservedMemCurrent:
    case cudaMemPoolAttrUsedMemCurrent:
        *(uint64_t *)value = g_used;
        break;
    case cudaMemPoolAttrReservedMemHigh:
    case cudaMemPoolAttrUsedMemHigh:
        *(uint64_t *)value = g_peak;
        break;
    default:
        *(int *)value = 0;
        break;
    }
    return cudaSuccess;
}

cudaError_t cudaMemPoolTrimTo(cudaMemPool_t memPool, size_t minBytesToKeep) {
    API_BEGIN;
    (void)minBytesToKeep;
    return memPool == (cudaMemPool_t)&g_pool_dummy ? cudaSuccess : ret(cudaErrorInvalidValue);
}

/* ---- streams and events: synchronous (the work is done when it is enqueued) -------------------
 */

cudaError_t cudaStreamCreateWithPriority(cudaStream_t *pStream, unsigned int flags, int priority) {
    API_BEGIN;
    if (!pStream) return ret(cudaErrorInvalidValue);
    *pStream = new CUstream_st{flags, priority};
    g_streams.insert(*pStream);
    return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags) {
    return cudaStreamCreateWithPriority(pStream, flags, 0);
}

cudaError_t cudaStreamCreate(cudaStream_t *pStream) {
    return cudaStreamCreateWithPriority(pStream, cudaStreamDefault, 0);
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
    API_BEGIN;
    if (!g_streams.erase(stream))
        return reject(cudaErrorInvalidResourceHandle, "cudaStreamDestroy: unknown stream %p",
                      (void *)stream);
    delete stream;
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
    API_BEGIN;
    CHECK_STREAM(stream);
    return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
    API_BEGIN;
    CHECK_STREAM(stream);
    return cudaSuccess;
}

cudaError_t cudaStreamGetFlags(cudaStream_t hStream, unsigned int *flags) {
    API_BEGIN;
    CHECK_STREAM(hStream);
    if (!flags) return ret(cudaErrorInvalidValue);
    *flags = g_streams.count(hStream) ? hStream->flags : 0;
    return cudaSuccess;
}

cudaError_t cudaDeviceGetStreamPriorityRange(int *leastPriority, int *greatestPriority) {
    if (leastPriority) *leastPriority = 0;
    if (greatestPriority) *greatestPriority = 0;
    return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
    API_BEGIN;
    (void)flags;
    CHECK_STREAM(stream);
    if (!g_events.count(event))
        return reject(cudaErrorInvalidResourceHandle, "cudaStreamWaitEvent: unknown event %p",
                      (void *)event);
    return cudaSuccess;
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void *userData) {
    API_BEGIN;
    CHECK_STREAM(stream);
    if (!fn) return ret(cudaErrorInvalidValue);
    fn(userData);
    return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags) {
    API_BEGIN;
    if (!event) return ret(cudaErrorInvalidValue);
    *event = new CUevent_st{flags, false, {}};
    g_events.insert(*event);
    return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *event) {
    return cudaEventCreateWithFlags(event, cudaEventDefault);
}

#define CHECK_EVENT(e)                                                                             \
    if (!g_events.count(e))                                                                        \
    return reject(cudaErrorInvalidResourceHandle, "%s: unknown event %p", __func__, (void *)(e))

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
    API_BEGIN;
    CHECK_EVENT(event);
    CHECK_STREAM(stream);
    event->recorded = true;
    event->when = std::chrono::steady_clock::now();
    return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
    API_BEGIN;
    CHECK_EVENT(event);
    return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
    API_BEGIN;
    CHECK_EVENT(event);
    return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
    API_BEGIN;
    CHECK_EVENT(event);
    g_events.erase(event);
    delete event;
    return cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end) {
    API_BEGIN;
    CHECK_EVENT(start);
    CHECK_EVENT(end);
    if (!ms) return ret(cudaErrorInvalidValue);
    if ((start->flags | end->flags) & cudaEventDisableTiming)
        return ret(cudaErrorInvalidResourceHandle);
    if (!start->recorded || !end->recorded) return ret(cudaErrorInvalidResourceHandle);
    *ms = std::chrono::duration<float, std::milli>(end->when - start->when).count();
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
