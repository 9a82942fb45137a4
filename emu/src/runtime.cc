/*
 * emu/src/runtime.cc - the CUDA runtime API of the CPU test double (emu/README.md): its
 * configuration, the registry of allocations and their guard zones, errors and faults (what
 * internal.h gives the rest of the emulator), and the API's error functions. The siblings
 * runtime_device.cc (devices, kernel attributes), runtime_memory.cc (allocation, copies,
 * memsets, pools) and runtime_stream.cc (streams, events) share its state through runtime.h.
 *
 * The declarations are the toolkit's own (cuda_runtime_api.h), so every signature here is the
 * real one. SLUICE_EMU_DEVICES emulated devices (default 1; "sluice SIMT emulator", H100-like
 * limits), all sharing one memory and one executor, each with its own identity (UUID, PCI
 * bus id). Device memory is host memory with guard zones around each allocation, filled with NaN
 * bytes when allocated; streams and events complete their work when it is enqueued; errors follow
 * CUDA's rules (a failed call sets the last error; a fault in a kernel is sticky).
 */
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>

#include "runtime.h"

#if SL_EMU_ASAN
#include <sanitizer/asan_interface.h>
#endif

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

} // namespace

/* ---- the runtime's errors, shared by its files (runtime.h) ---------------------------------- */

thread_local cudaError_t t_last = cudaSuccess;
cudaError_t g_sticky = cudaSuccess;

cudaError_t ret(cudaError_t e) {
    if (e != cudaSuccess) set_last_error(e);
    return e;
}

/* A diagnostic for a call the emulator rejects (CUDA itself would only return the code). */
cudaError_t reject(cudaError_t e, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "sluice emu: %s (%s)\n", msg, cudaGetErrorName(e));
    return ret(e);
}

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
        const long sms = env_long("SLUICE_EMU_SMS", 132);
        x.sms = sms < 1 ? 1 : sms > 1024 ? 1024 : (int)sms;
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
