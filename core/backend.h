/*
 * core/backend.h - compute backends (public API).
 *
 * A backend owns tensor memory and executes operations on it. sluice ships "cpu" (fp32,
 * OpenBLAS + OpenMP; the numerical reference) and, when built with CUDA, "cuda". Callers hold
 * an opaque sl_backend; the function table behind it lives in core/backend_impl.h.
 */
#ifndef SL_BACKEND_H
#define SL_BACKEND_H

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sl_backend sl_backend;

typedef struct {
    int threads; /* CPU: OpenMP/OpenBLAS threads (0 = all cores); ignored by CUDA */
    int device;  /* CUDA: device ordinal (-1 = from the launcher's local rank) */
    /* CUDA: false (the default) makes every kernel give bitwise the same result run after
     * run (no floating-point atomics whose order varies); true lets the few kernels that have
     * a faster atomic variant use it. The CPU is always deterministic. */
    bool allow_nondeterministic;
} sl_backend_params;

/* Backends are created by name through backends/backends.h (sl_backend_create), which
 * pairs each backend's memory half with its operation table. */
void sl_backend_free(sl_backend *be);
const char *sl_backend_name(const sl_backend *be);
/* True when tensor memory of this backend is directly addressable by the host (MPI can
 * send it without staging). */
bool sl_backend_host_memory(const sl_backend *be);
/* Waits for all queued work (a no-op on the CPU). */
void sl_backend_synchronize(sl_backend *be);
/* Threads the CPU backend uses (1 for device backends). */
int sl_backend_threads(const sl_backend *be);
/* Device-to-host copies made through the tensor API so far: on a GPU each one waits for the
 * stream, so tests count them per training step (docs/architecture.md, "Host reads"). */
long long sl_backend_host_reads(const sl_backend *be);
/* Explicit sl_backend_synchronize calls so far. A host read waits for the device too, so the
 * host waits at most host_reads + syncs times (docs/architecture.md, "Host reads"). */
long long sl_backend_syncs(const sl_backend *be);

/* Bytes held by the tensors of this backend that own their memory: now, and the most at any
 * time since it was created (NULL for one not wanted). What the tensors asked for, not what
 * the allocator holds (the CPU backend rounds each up to 64 bytes; a device's allocator may
 * keep freed blocks). model/counts.h's counts are of these bytes, and the tests compare them
 * (tests/test_memory_counts.c). */
void sl_backend_tensor_bytes(const sl_backend *be, long long *now, long long *peak);

/* The device a backend computes on, for the start-up banner, the transport choice (two ranks
 * on one device cannot share an NCCL communicator) and `sluice doctor`. */
typedef struct {
    int ordinal;            /* among the devices this process sees (CUDA_VISIBLE_DEVICES applied) */
    char pci_bus[32];       /* PCI bus id, e.g. "0000:3b:00.0" (cudaDeviceGetPCIBusId) */
    unsigned char uuid[16]; /* the device's UUID: equal only for the same physical device */
    char name[64];          /* e.g. "NVIDIA H200" */
    int cc_major, cc_minor; /* compute capability, e.g. 9.0 (the emulated build's device: 9.0) */
    char chosen_by[96];     /* how the ordinal was chosen, e.g. "OMPI_COMM_WORLD_LOCAL_RANK=1
                               mod 2 devices" or "backend.device 3" */
} sl_device_info;

/* Fills *out and returns true for a device backend (cuda); false for a host backend (cpu). */
bool sl_backend_device(const sl_backend *be, sl_device_info *out);

#ifdef __cplusplus
}
#endif

#endif
