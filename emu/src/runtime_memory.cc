/*
 * emu/src/runtime_memory.cc - the memory functions of the emulator's CUDA runtime API
 * (emu/README.md, "Memory checks"): device and pinned allocations with their guard zones and
 * NaN filling, registered host memory, copies and memsets checked against the registry of
 * allocations (runtime.cc), pointer attributes and memory pools. runtime.h is what it shares
 * with runtime.cc and its other siblings.
 */
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "runtime.h"

namespace sl_emu {

/* Memory accounting: what the emulated device has handed out. */
size_t g_used;

namespace {

size_t g_peak;
uint64_t g_serial;

uint64_t g_pool_release_threshold;
int g_pool_dummy;

} // namespace

size_t round_up(size_t n, size_t a) {
    return (n + a - 1) / a * a;
}

namespace {

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

} // namespace

} // namespace sl_emu

using namespace sl_emu;

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
