/*
 * emu/src/runtime_stream.cc - the streams and events of the emulator's CUDA runtime API
 * (emu/README.md, "How CUDA maps onto the CPU"), and host functions: synchronous, so the work is
 * complete when it is enqueued and an event records the host time. runtime.h is what it shares
 * with runtime.cc and its other siblings.
 */
#include <chrono>
#include <set>

#include "runtime.h"

namespace sl_emu {

std::set<cudaStream_t> g_streams;
std::set<cudaEvent_t> g_events;

bool known_stream(cudaStream_t s) {
    return s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread || g_streams.count(s);
}

} // namespace sl_emu

using namespace sl_emu;

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
