/*
 * core/backend_cuda.cu - the CUDA backend's memory half and runtime services: device memory
 * through a caching allocator, one stream, one cuBLAS handle, pinned staging for host
 * transfers, per-operation scratch, and the error checks every launcher uses
 * (core/backend_cuda.cuh). The operation table is assembled in backends/cuda.cu.
 *
 * Why each piece:
 *   - Caching allocator: cudaMalloc and cudaFree synchronize the device and cost tens of
 *     microseconds; a training step frees and reallocates the same sizes every time, so freed
 *     blocks are kept and reused (best fit within a size class). Everything runs on one stream,
 *     so a block freed by the host can be handed to later work at once: the stream orders the
 *     old users before the new ones. Out of memory: the cache is returned to the driver and the
 *     allocation retried once; then the run stops naming the tensor and the sizes.
 *   - Pinned staging ring: copies from pageable host memory are synchronous. Host data is
 *     copied into a pinned ring and queued asynchronously, so the host never waits to upload
 *     (token ids, parameters); the ring is split into segments, each guarded by an event, so
 *     a segment is rewritten only after the copies that used it finished.
 *   - Host reads: to_host waits for the stream (counted by the tensor layer); to_host_async
 *     queues the copy into pinned memory and the host copy-out happens in synchronize, so a
 *     read can be started early and waited for late (the MoE counts read).
 */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend_cuda.cuh"
#include "core/backend_impl.h"
#include "core/cuda_driver.h"
#include "core/log.h"
#include "core/profile_cuda.h"

/* ---- errors ------------------------------------------------------------------------------- */

void sl_cuda_check(cudaError_t e, const char *op, const char *what) {
    if (e != cudaSuccess)
        sl_fatal("CUDA error in %s (%s): %s: %s", op, what, cudaGetErrorName(e),
                 cudaGetErrorString(e));
}

void sl_cublas_check(cublasStatus_t s, const char *op, const char *what) {
    if (s != CUBLAS_STATUS_SUCCESS)
        sl_fatal("cuBLAS error in %s (%s): %s", op, what, cublasGetStatusString(s));
}

#define CK(call, op) sl_cuda_check((call), (op), #call)

/* ---- the context -------------------------------------------------------------------------- */

enum { STAGE_SEGMENTS = 4, SCRATCH_SLOTS = 6 };
/* A cached block serves a request of at least 1/SLACK of its size (1: equal sizes only). */
#ifdef SLUICE_CUDA_EMULATED
#define SL_CACHE_SLACK 1
#else
#define SL_CACHE_SLACK 2
#endif

typedef struct cached_block {
    void *ptr;
    size_t size;
    struct cached_block *next;
} cached_block;

/* A pending read: `bytes` at pinned `src` go to `dst` when the stream is synchronized. */
typedef struct {
    void *dst;
    const void *src;
    size_t bytes;
} pending_read;

typedef struct {
    int device;
    char chosen_by[96]; /* how pick_device chose it (sl_backend_device) */
    cudaStream_t stream;
    cublasHandle_t cublas;
    cudaDeviceProp props;
    bool deterministic;

    /* caching allocator */
    cached_block *free_blocks; /* cached, not in use */
    cached_block *used_blocks; /* in use (looked up by pointer on free) */
    size_t bytes_in_use, bytes_cached, peak_in_use;
    long long driver_allocs; /* cudaMalloc calls so far */
    const char *alloc_what;  /* the tensor being allocated, for the out-of-memory message */

    /* per-operation scratch */
    void *scratch[SCRATCH_SLOTS];
    size_t scratch_cap[SCRATCH_SLOTS];

    /* objects of the concerns above core (sl_cuda_ext) */
    void *ext[SL_CUDA_EXT_SLOTS];
    void (*ext_destroy[SL_CUDA_EXT_SLOTS])(void *);

    /* pinned staging ring (host side) and the device ring for sl_cuda_upload */
    unsigned char *stage;
    size_t stage_seg, stage_off;
    int stage_cur;
    cudaEvent_t stage_done[STAGE_SEGMENTS];
    bool stage_has_reads[STAGE_SEGMENTS];
    unsigned char *upload;
    size_t upload_cap, upload_off;
    pending_read *reads;
    int nreads, cap_reads;

    /* side lanes (sl_cuda_lanes_fork), created on first use */
    int lanes;
    cudaStream_t lane_stream[SL_CUDA_LANES];
    cublasHandle_t lane_cublas[SL_CUDA_LANES];
    cudaEvent_t lane_done[SL_CUDA_LANES], lane_fork;
} cuda_ctx;

static cuda_ctx *C(void *ctx) {
    return (cuda_ctx *)ctx;
}

cudaStream_t sl_cuda_stream(void *ctx) {
    return C(ctx)->stream;
}
cublasHandle_t sl_cuda_cublas(void *ctx) {
    return C(ctx)->cublas;
}
const cudaDeviceProp *sl_cuda_props(void *ctx) {
    return &C(ctx)->props;
}
bool sl_cuda_deterministic(void *ctx) {
    return C(ctx)->deterministic;
}

void *sl_cuda_ext(void *ctx, int slot) {
    SL_CHECK(slot >= 0 && slot < SL_CUDA_EXT_SLOTS, "sl_cuda_ext: slot %d", slot);
    return C(ctx)->ext[slot];
}

void sl_cuda_set_ext(void *ctx, int slot, void *obj, void (*destroy)(void *obj)) {
    SL_CHECK(slot >= 0 && slot < SL_CUDA_EXT_SLOTS, "sl_cuda_set_ext: slot %d", slot);
    cuda_ctx *c = C(ctx);
    if (c->ext[slot] && c->ext_destroy[slot]) {
        /* queued work may still use what the old object owns (a cuDNN plan) */
        CK(cudaStreamSynchronize(c->stream), "sl_cuda_set_ext");
        c->ext_destroy[slot](c->ext[slot]);
    }
    c->ext[slot] = obj;
    c->ext_destroy[slot] = destroy;
}

/* ---- caching allocator -------------------------------------------------------------------- */

/* Size classes: 512-byte granules up to 1 MiB, 2 MiB granules above, so that the sizes a
 * step asks for map to few classes and a cached block fits the next request of its class. */
static size_t round_size(size_t bytes) {
    const size_t small = 512, large = (size_t)2 << 20;
    if (bytes == 0) bytes = 1;
#ifdef SLUICE_CUDA_EMULATED
    /* Exact sizes under the emulator, so that its guard zones sit right after each tensor and
     * an out-of-bounds write by one element is caught (blocks are reused at equal size only). */
    (void)small, (void)large;
    return bytes;
#endif
    return bytes <= ((size_t)1 << 20) ? (bytes + small - 1) / small * small
                                      : (bytes + large - 1) / large * large;
}

static void release_cache(cuda_ctx *c) {
    /* cudaFree synchronizes the device, so no queued work still uses these blocks. */
    while (c->free_blocks) {
        cached_block *b = c->free_blocks;
        c->free_blocks = b->next;
        CK(cudaFree(b->ptr), "allocator");
        c->bytes_cached -= b->size;
        free(b);
    }
}

static void *cuda_alloc(void *ctx, size_t bytes) {
    cuda_ctx *c = C(ctx);
    const size_t size = round_size(bytes);
    /* Best fit among cached blocks of at least this size and at most twice it. */
    cached_block **best = NULL;
    for (cached_block **p = &c->free_blocks; *p; p = &(*p)->next)
        if ((*p)->size >= size && (*p)->size <= SL_CACHE_SLACK * size &&
            (!best || (*p)->size < (*best)->size))
            best = p;
    cached_block *b;
    if (best) {
        b = *best;
        *best = b->next;
        c->bytes_cached -= b->size;
    } else {
        void *ptr = NULL;
        cudaError_t e = cudaMalloc(&ptr, size);
        if (e == cudaErrorMemoryAllocation) {
            (void)cudaGetLastError(); /* clear it; retry with the cache given back */
            release_cache(c);
            e = cudaMalloc(&ptr, size);
        }
        if (e != cudaSuccess) {
            size_t free_b = 0, total_b = 0;
            (void)cudaGetLastError();
            (void)cudaMemGetInfo(&free_b, &total_b);
            sl_fatal("CUDA out of memory allocating %s: %.1f MiB requested; sluice holds %.1f MiB "
                     "in tensors (peak %.1f MiB); device %d has %.1f MiB free of %.1f MiB (%s)",
                     c->alloc_what ? c->alloc_what : "a tensor", (double)bytes / 1048576.0,
                     (double)c->bytes_in_use / 1048576.0, (double)c->peak_in_use / 1048576.0,
                     c->device, (double)free_b / 1048576.0, (double)total_b / 1048576.0,
                     cudaGetErrorString(e));
        }
        c->driver_allocs++;
        b = (cached_block *)sl_xcalloc(1, sizeof *b);
        b->ptr = ptr;
        b->size = size;
    }
    b->next = c->used_blocks;
    c->used_blocks = b;
    c->bytes_in_use += b->size;
    if (c->bytes_in_use > c->peak_in_use) c->peak_in_use = c->bytes_in_use;
    /* The interface promises zero-filled memory; queued, so it costs the host nothing. */
    CK(cudaMemsetAsync(b->ptr, 0, bytes, c->stream), "allocator");
    return b->ptr;
}

static void cuda_free(void *ctx, void *ptr) {
    cuda_ctx *c = C(ctx);
    for (cached_block **p = &c->used_blocks; *p; p = &(*p)->next)
        if ((*p)->ptr == ptr) {
            cached_block *b = *p;
            *p = b->next;
            c->bytes_in_use -= b->size;
            b->next = c->free_blocks;
            c->free_blocks = b;
            c->bytes_cached += b->size;
            return;
        }
    sl_fatal("CUDA allocator: freeing %p, which it did not allocate", ptr);
}

/* ---- side lanes ---------------------------------------------------------------------------- */

int sl_cuda_lanes_fork(void *ctx, int n) {
    cuda_ctx *c = C(ctx);
    n = n < 1 ? 1 : n > SL_CUDA_LANES ? SL_CUDA_LANES : n;
    for (; c->lanes < n; c->lanes++) {
        const int i = c->lanes;
        CK(cudaStreamCreateWithFlags(&c->lane_stream[i], cudaStreamNonBlocking), "side lanes");
        sl_cublas_check(cublasCreate(&c->lane_cublas[i]), "side lanes", "cublasCreate");
        sl_cublas_check(cublasSetStream(c->lane_cublas[i], c->lane_stream[i]), "side lanes",
                        "cublasSetStream");
        CK(cudaEventCreateWithFlags(&c->lane_done[i], cudaEventDisableTiming), "side lanes");
        if (i == 0)
            CK(cudaEventCreateWithFlags(&c->lane_fork, cudaEventDisableTiming), "side lanes");
    }
    CK(cudaEventRecord(c->lane_fork, c->stream), "side lanes");
    for (int i = 0; i < n; i++)
        CK(cudaStreamWaitEvent(c->lane_stream[i], c->lane_fork, 0), "side lanes");
    return n;
}

cublasHandle_t sl_cuda_lane_cublas(void *ctx, int lane) {
    cuda_ctx *c = C(ctx);
    SL_CHECK(lane >= 0 && lane < c->lanes, "sl_cuda_lane_cublas: lane %d not forked", lane);
    return c->lane_cublas[lane];
}

void sl_cuda_lanes_join(void *ctx, int n) {
    cuda_ctx *c = C(ctx);
    SL_CHECK(n >= 1 && n <= c->lanes, "sl_cuda_lanes_join: %d lanes, %d forked", n, c->lanes);
    for (int i = 0; i < n; i++) {
        CK(cudaEventRecord(c->lane_done[i], c->lane_stream[i]), "side lanes");
        CK(cudaStreamWaitEvent(c->stream, c->lane_done[i], 0), "side lanes");
    }
}

/* ---- scratch and staging ------------------------------------------------------------------- */

void *sl_cuda_scratch(void *ctx, int slot, size_t bytes) {
    cuda_ctx *c = C(ctx);
    SL_CHECK(slot >= 0 && slot < SCRATCH_SLOTS, "sl_cuda_scratch: slot %d out of range", slot);
    if (bytes > c->scratch_cap[slot]) {
        /* Grows rarely (the first step's largest size): the old buffer goes back to the cache,
         * where queued work that still uses it is ordered before any new user. */
        if (c->scratch[slot]) cuda_free(ctx, c->scratch[slot]);
        const size_t cap = round_size(bytes + bytes / 4);
        c->alloc_what = "operation scratch";
        c->scratch[slot] = cuda_alloc(ctx, cap);
        c->alloc_what = NULL;
        c->scratch_cap[slot] = cap;
    }
    return c->scratch[slot];
}

static void finish_reads(cuda_ctx *c) {
    for (int i = 0; i < c->nreads; i++) memcpy(c->reads[i].dst, c->reads[i].src, c->reads[i].bytes);
    c->nreads = 0;
    for (int s = 0; s < STAGE_SEGMENTS; s++) c->stage_has_reads[s] = false;
}

static void cuda_synchronize(void *ctx) {
    cuda_ctx *c = C(ctx);
    CK(cudaStreamSynchronize(c->stream), "synchronize");
    finish_reads(c);
}

/* `bytes` (at most one segment) of pinned staging memory, free for the host to write: when
 * the current segment is full, the next one is entered after the copies that last used it have
 * finished (its event) and its pending reads have been delivered. */
static unsigned char *stage_take(cuda_ctx *c, size_t bytes) {
    if (c->stage_off + bytes > c->stage_seg) {
        CK(cudaEventRecord(c->stage_done[c->stage_cur], c->stream), "staging");
        c->stage_cur = (c->stage_cur + 1) % STAGE_SEGMENTS;
        if (c->stage_has_reads[c->stage_cur]) cuda_synchronize(c);
        CK(cudaEventSynchronize(c->stage_done[c->stage_cur]), "staging");
        c->stage_off = 0;
    }
    unsigned char *p = c->stage + (size_t)c->stage_cur * c->stage_seg + c->stage_off;
    c->stage_off += (bytes + 255) & ~(size_t)255;
    return p;
}

static void cuda_from_host(void *ctx, void *dst, const void *host, size_t bytes) {
    cuda_ctx *c = C(ctx);
    /* Through the ring in segment-sized pieces: the host copies into pinned memory and goes
     * on; the device copies when the stream reaches them. */
    for (size_t off = 0; off < bytes;) {
        const size_t n = bytes - off < c->stage_seg ? bytes - off : c->stage_seg;
        unsigned char *p = stage_take(c, n);
        memcpy(p, (const unsigned char *)host + off, n);
        CK(cudaMemcpyAsync((unsigned char *)dst + off, p, n, cudaMemcpyHostToDevice, c->stream),
           "from_host");
        off += n;
    }
}

void *sl_cuda_upload(void *ctx, const void *host, size_t bytes) {
    cuda_ctx *c = C(ctx);
    SL_CHECK(bytes <= c->upload_cap && bytes <= c->stage_seg,
             "sl_cuda_upload: %zu bytes exceed the upload ring (%zu)", bytes, c->upload_cap);
    /* The device ring needs no event: a later upload into the same bytes is queued on the
     * stream after the operations that read the earlier one. */
    if (c->upload_off + bytes > c->upload_cap) c->upload_off = 0;
    unsigned char *dev = c->upload + c->upload_off;
    c->upload_off += (bytes + 255) & ~(size_t)255;
    cuda_from_host(ctx, dev, host, bytes);
    return dev;
}

static void cuda_to_host(void *ctx, void *host, const void *src, size_t bytes) {
    cuda_ctx *c = C(ctx);
    CK(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, c->stream), "to_host");
    cuda_synchronize(ctx);
}

static void cuda_to_host_async(void *ctx, void *host, const void *src, size_t bytes) {
    cuda_ctx *c = C(ctx);
    if (bytes > c->stage_seg) { /* too large to stage: a blocking read */
        cuda_to_host(ctx, host, src, bytes);
        return;
    }
    unsigned char *p = stage_take(c, bytes);
    c->stage_has_reads[c->stage_cur] = true;
    CK(cudaMemcpyAsync(p, src, bytes, cudaMemcpyDeviceToHost, c->stream), "to_host_async");
    if (c->nreads == c->cap_reads) {
        c->cap_reads = c->cap_reads ? 2 * c->cap_reads : 16;
        c->reads = (pending_read *)sl_xrealloc(c->reads, sizeof *c->reads * (size_t)c->cap_reads);
    }
    c->reads[c->nreads++] = (pending_read){host, p, bytes};
}

static void cuda_memset0(void *ctx, void *p, size_t bytes) {
    CK(cudaMemsetAsync(p, 0, bytes, C(ctx)->stream), "memset0");
}

static void cuda_copy(void *ctx, void *dst, const void *src, size_t bytes) {
    CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, C(ctx)->stream), "copy");
}

static int cuda_threads(void *ctx) {
    (void)ctx;
    return 1;
}

static void cuda_set_alloc_context(void *ctx, const char *what) {
    C(ctx)->alloc_what = what;
}

static void cuda_free_ctx(void *ctx) {
    cuda_ctx *c = C(ctx);
    (void)cudaStreamSynchronize(c->stream);
    finish_reads(c);
    for (int s = 0; s < SL_CUDA_EXT_SLOTS; s++)
        if (c->ext[s] && c->ext_destroy[s]) c->ext_destroy[s](c->ext[s]);
    for (int s = 0; s < SCRATCH_SLOTS; s++)
        if (c->scratch[s]) cuda_free(ctx, c->scratch[s]);
    if (c->upload) cuda_free(ctx, c->upload);
    while (c->used_blocks) { /* tensors still alive: their memory goes with the backend */
        cached_block *b = c->used_blocks;
        c->used_blocks = b->next;
        (void)cudaFree(b->ptr);
        free(b);
    }
    release_cache(c);
    for (int s = 0; s < STAGE_SEGMENTS; s++) cudaEventDestroy(c->stage_done[s]);
    cudaFreeHost(c->stage);
    free(c->reads);
    for (int i = 0; i < c->lanes; i++) {
        (void)cudaStreamSynchronize(c->lane_stream[i]);
        cublasDestroy(c->lane_cublas[i]);
        cudaEventDestroy(c->lane_done[i]);
        cudaStreamDestroy(c->lane_stream[i]);
    }
    if (c->lanes) cudaEventDestroy(c->lane_fork);
    cublasDestroy(c->cublas);
    cudaStreamDestroy(c->stream);
    free(c);
}

/* ---- creation ------------------------------------------------------------------------------ */

/* The ordinal among the `count` devices this process sees (the CUDA runtime has applied
 * CUDA_VISIBLE_DEVICES already), and in `how` why. */
static int pick_device(const sl_backend_params *params, int count, char *how, size_t howlen) {
    if (params->device >= 0) {
        snprintf(how, howlen, "device %d asked for", params->device);
        return params->device;
    }
    /* Map local ranks round-robin onto the node's GPUs (launchers export these). */
    const char *vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "LOCAL_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v) {
            snprintf(how, howlen, "%s=%d mod %d visible device%s", vars[i], atoi(v), count,
                     count == 1 ? "" : "s");
            return atoi(v) % count;
        }
    }
    snprintf(how, howlen, "no local rank: the first of %d visible device%s", count,
             count == 1 ? "" : "s");
    return 0;
}

static void cuda_device(void *ctx, sl_device_info *out) {
    cuda_ctx *c = C(ctx);
    out->ordinal = c->device;
    if (cudaDeviceGetPCIBusId(out->pci_bus, (int)sizeof out->pci_bus, c->device) != cudaSuccess) {
        (void)cudaGetLastError();
        snprintf(out->pci_bus, sizeof out->pci_bus, "?");
    }
    memcpy(out->uuid, c->props.uuid.bytes, sizeof out->uuid);
    snprintf(out->name, sizeof out->name, "%.63s", c->props.name);
    out->cc_major = c->props.major, out->cc_minor = c->props.minor;
    snprintf(out->chosen_by, sizeof out->chosen_by, "%s", c->chosen_by);
}

/* An empty kernel: its attributes say which of the build's images the device would run. */
__global__ void k_image_probe() {}

extern "C" int sl_cuda_kernel_image(int *version, char *err, size_t errlen) {
    cudaFuncAttributes a;
    const cudaError_t e = cudaFuncGetAttributes(&a, (const void *)k_image_probe);
    if (e != cudaSuccess) {
        snprintf(err, errlen, "%s (%s)", cudaGetErrorString(e), cudaGetErrorName(e));
        (void)cudaGetLastError();
        *version = 0;
        return -1;
    }
    *version = a.binaryVersion;
    return 0;
}

extern "C" void *sl_backend_cuda_stream(const sl_backend *be) {
    if (!be || strcmp(be->iface.name, "cuda") != 0) return NULL;
    return (void *)C(be->ctx)->stream;
}

extern "C" int sl_backend_cuda_device(const sl_backend *be) {
    if (!be || strcmp(be->iface.name, "cuda") != 0) return -1;
    return C(be->ctx)->device;
}

extern "C" sl_backend *sl_backend_cuda_create(const sl_backend_params *params, const sl_ops_i *ops,
                                              char *err, size_t errlen) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        char why[512];
        sl_cuda_no_device_reason(e == cudaErrorInsufficientDriver,
                                 e != cudaSuccess ? cudaGetErrorString(e) : "0 devices", why,
                                 sizeof why);
        snprintf(err, errlen, "no CUDA device available: %s", why);
        (void)cudaGetLastError();
        return NULL;
    }
    char how[96];
    const int device = pick_device(params, count, how, sizeof how);
    if (device >= count) {
        snprintf(err, errlen, "CUDA device %d requested but only %d present", device, count);
        return NULL;
    }
    CK(cudaSetDevice(device), "backend creation");
    cuda_ctx *c = (cuda_ctx *)sl_xcalloc(1, sizeof *c);
    c->device = device;
    snprintf(c->chosen_by, sizeof c->chosen_by, "%s", how);
    c->deterministic = !params->allow_nondeterministic;
    CK(cudaGetDeviceProperties(&c->props, device), "backend creation");
    CK(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking), "backend creation");
    if (cublasCreate(&c->cublas) != CUBLAS_STATUS_SUCCESS) {
        snprintf(err, errlen, "cublasCreate failed on device %d", device);
        cudaStreamDestroy(c->stream);
        free(c);
        return NULL;
    }
    sl_cublas_check(cublasSetStream(c->cublas, c->stream), "backend creation", "cublasSetStream");
    /* 16 MiB of pinned staging in 4 segments; 1 MiB of device memory for small uploads. */
    const size_t stage_bytes = (size_t)16 << 20;
    CK(cudaMallocHost((void **)&c->stage, stage_bytes), "backend creation");
    c->stage_seg = stage_bytes / STAGE_SEGMENTS;
    for (int s = 0; s < STAGE_SEGMENTS; s++) {
        CK(cudaEventCreateWithFlags(&c->stage_done[s], cudaEventDisableTiming), "backend creation");
        CK(cudaEventRecord(c->stage_done[s], c->stream), "backend creation");
    }
    c->upload_cap = (size_t)1 << 20;
    c->alloc_what = "the upload ring";
    c->upload = (unsigned char *)cuda_alloc(c, c->upload_cap);
    c->alloc_what = NULL;

    sl_backend *be = (sl_backend *)sl_xcalloc(1, sizeof *be);
    be->iface.name = "cuda";
    be->iface.host_memory = false;
    be->iface.bf16 = true;
    be->iface.alloc = cuda_alloc;
    be->iface.free = cuda_free;
    be->iface.memset0 = cuda_memset0;
    be->iface.to_host = cuda_to_host;
    be->iface.to_host_async = cuda_to_host_async;
    be->iface.from_host = cuda_from_host;
    be->iface.copy = cuda_copy;
    be->iface.synchronize = cuda_synchronize;
    be->iface.threads = cuda_threads;
    be->iface.set_alloc_context = cuda_set_alloc_context;
    be->iface.device = cuda_device;
    be->iface.mark_new = sl_cuda_mark_new;
    be->iface.mark_record = sl_cuda_mark_record;
    be->iface.mark_ms = sl_cuda_mark_ms;
    be->iface.mark_free = sl_cuda_mark_free;
    be->iface.range_push = sl_cuda_range_push;
    be->iface.range_pop = sl_cuda_range_pop;
    be->iface.free_ctx = cuda_free_ctx;
    /* NVTX ranges around the profiling regions unless SLUICE_NVTX=0 (core/profile.h). */
    const char *nvtx = getenv("SLUICE_NVTX");
    be->ranges = !(nvtx && strcmp(nvtx, "0") == 0);
    be->ops = ops;
    be->ctx = c;
    return be;
}
