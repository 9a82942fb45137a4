/*
 * emu/src/runtime.h - what the files of the emulator's CUDA runtime API share: runtime.cc
 * (configuration, the registry of allocations, errors), runtime_device.cc (devices, kernel
 * attributes), runtime_memory.cc (allocation, copies, memsets, pools) and runtime_stream.cc
 * (streams, events). The rest of the emulator reaches the runtime through internal.h.
 */
#ifndef SL_EMU_RUNTIME_H
#define SL_EMU_RUNTIME_H

#include <chrono>
#include <cstddef>
#include <map>
#include <mutex>
#include <set>

#include "internal.h"

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

/* Device memory handed out (runtime_memory.cc; cudaDeviceReset clears it). */
extern size_t g_used;
/* The live streams and events (runtime_stream.cc). */
extern std::set<cudaStream_t> g_streams;
extern std::set<cudaEvent_t> g_events;
/* cudaFuncAttributeMaxDynamicSharedMemorySize per kernel (runtime_device.cc). */
extern std::map<const void *, size_t> g_smem_limits;
/* The calling thread's last error and the sticky error of a fault (runtime.cc). */
extern thread_local cudaError_t t_last;
extern cudaError_t g_sticky;

/* Returns e, after making it the last error if it is one (runtime.cc). */
cudaError_t ret(cudaError_t e);
/* A diagnostic for a call the emulator rejects (CUDA itself would only return the code). */
cudaError_t reject(cudaError_t e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* n rounded up to a multiple of a (runtime_memory.cc). */
size_t round_up(size_t n, size_t a);
/* The default stream, the legacy and per-thread handles, and live streams (runtime_stream.cc). */
bool known_stream(cudaStream_t s);

/* Opens every API function that may fail: the big lock, and a sticky error fails the call. */
#define API_BEGIN                                                                                  \
    std::lock_guard<std::recursive_mutex> lock_(big_lock());                                       \
    if (cudaError_t sticky_ = sticky_error()) return ret(sticky_)

#define CHECK_STREAM(s)                                                                            \
    if (!known_stream(s))                                                                          \
    return reject(cudaErrorInvalidResourceHandle, "%s: unknown stream %p", __func__, (void *)(s))

} // namespace sl_emu

#endif
