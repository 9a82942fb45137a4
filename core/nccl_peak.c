/* core/nccl_peak.c - NCCL bus bandwidth between one node's devices (nccl_peak.h). */
#include "core/nccl_peak.h"

#include <stdio.h>
#include <string.h>

#ifdef SLUICE_CUDA_EMULATED

int sl_nccl_peak_measure(int devices, size_t bytes, int reps, sl_nccl_peak *out, char *err,
                         size_t errlen) {
    (void)bytes, (void)reps;
    memset(out, 0, sizeof *out);
    out->devices = devices;
    snprintf(err, errlen,
             "not measured under the emulator: its NCCL runs between processes over MPI "
             "(emu/README.md), not between the devices of one process");
    return -1;
}

#else

#include <cuda_runtime_api.h>
#include <time.h>
/* nccl.h declares a few functions with () parameter lists (as in core/comm_nccl.c) */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop

enum { MAX_DEV = 64 };

typedef struct {
    int n;
    ncclComm_t comm[MAX_DEV];
    cudaStream_t stream[MAX_DEV];
    char *send[MAX_DEV], *recv[MAX_DEV];
} run;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void release(run *r) {
    for (int d = 0; d < r->n; d++) {
        cudaSetDevice(d);
        if (r->comm[d]) ncclCommDestroy(r->comm[d]);
        if (r->stream[d]) cudaStreamDestroy(r->stream[d]);
        cudaFree(r->send[d]);
        cudaFree(r->recv[d]);
    }
}

static int cuda_fail(cudaError_t e, const char *what, char *err, size_t errlen) {
    snprintf(err, errlen, "%s: %s", what, cudaGetErrorString(e));
    (void)cudaGetLastError();
    return -1;
}

static int nccl_fail(ncclResult_t e, const char *what, char *err, size_t errlen) {
    snprintf(err, errlen, "%s: %s", what, ncclGetErrorString(e));
    return -1;
}

/* Every device's streams drained. */
static int sync_all(run *r, char *err, size_t errlen) {
    for (int d = 0; d < r->n; d++) {
        cudaError_t e = cudaSetDevice(d);
        if (e == cudaSuccess) e = cudaStreamSynchronize(r->stream[d]);
        if (e != cudaSuccess) return cuda_fail(e, "NCCL bandwidth: synchronize", err, errlen);
    }
    return 0;
}

/* One collective on every device inside one group: 0 = all-reduce, 1 = all-to-all. */
static int collective(run *r, int kind, size_t bytes, char *err, size_t errlen) {
    ncclResult_t e = ncclGroupStart();
    const size_t chunk = bytes / (size_t)r->n;
    for (int d = 0; d < r->n && e == ncclSuccess; d++) {
        if (kind == 0) {
            e = ncclAllReduce(r->send[d], r->recv[d], bytes / sizeof(float), ncclFloat32, ncclSum,
                              r->comm[d], r->stream[d]);
            continue;
        }
        for (int p = 0; p < r->n && e == ncclSuccess; p++) {
            e = ncclSend(r->send[d] + (size_t)p * chunk, chunk, ncclInt8, p, r->comm[d],
                         r->stream[d]);
            if (e == ncclSuccess)
                e = ncclRecv(r->recv[d] + (size_t)p * chunk, chunk, ncclInt8, p, r->comm[d],
                             r->stream[d]);
        }
    }
    const ncclResult_t end = ncclGroupEnd();
    if (e == ncclSuccess) e = end;
    return e == ncclSuccess
               ? 0
               : nccl_fail(e, kind == 0 ? "ncclAllReduce" : "ncclSend/ncclRecv", err, errlen);
}

/* Mean seconds of one collective over `reps`, after two untimed. */
static double timed(run *r, int kind, size_t bytes, int reps, char *err, size_t errlen) {
    for (int i = 0; i < 2; i++)
        if (collective(r, kind, bytes, err, errlen) != 0) return -1;
    if (sync_all(r, err, errlen) != 0) return -1;
    const double t0 = now_s();
    for (int i = 0; i < reps; i++)
        if (collective(r, kind, bytes, err, errlen) != 0) return -1;
    if (sync_all(r, err, errlen) != 0) return -1;
    return (now_s() - t0) / reps;
}

int sl_nccl_peak_measure(int devices, size_t bytes, int reps, sl_nccl_peak *out, char *err,
                         size_t errlen) {
    memset(out, 0, sizeof *out);
    out->devices = devices, out->bytes = bytes, out->reps = reps;
    if (devices < 2 || devices > MAX_DEV || reps < 1 || bytes < (size_t)devices * 4) {
        snprintf(err, errlen, "NCCL bandwidth: %d devices, %zu bytes, %d reps", devices, bytes,
                 reps);
        return -1;
    }
    bytes -= bytes % ((size_t)devices * sizeof(float)); /* whole floats, whole chunks */
    out->bytes = bytes;
    run r;
    memset(&r, 0, sizeof r);
    r.n = devices;
    int devs[MAX_DEV];
    for (int d = 0; d < devices; d++) devs[d] = d;
    ncclResult_t ne = ncclCommInitAll(r.comm, devices, devs);
    if (ne != ncclSuccess) {
        memset(r.comm, 0, sizeof r.comm);
        return nccl_fail(ne, "ncclCommInitAll", err, errlen);
    }
    int rc = 0;
    for (int d = 0; d < devices && rc == 0; d++) {
        cudaError_t e = cudaSetDevice(d);
        if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&r.stream[d], cudaStreamNonBlocking);
        if (e == cudaSuccess) e = cudaMalloc((void **)&r.send[d], bytes);
        if (e == cudaSuccess) e = cudaMalloc((void **)&r.recv[d], bytes);
        if (e == cudaSuccess) e = cudaMemset(r.send[d], 0, bytes); /* 0.0f: sums stay finite */
        if (e != cudaSuccess) rc = cuda_fail(e, "NCCL bandwidth: buffers", err, errlen);
    }
    const double n = devices;
    if (rc == 0) {
        const double t = timed(&r, 0, bytes, reps, err, errlen);
        if (t < 0) rc = -1;
        out->allreduce_ms = 1e3 * t;
        out->allreduce_busbw = (double)bytes / t * 2.0 * (n - 1.0) / n;
    }
    if (rc == 0) {
        const double t = timed(&r, 1, bytes, reps, err, errlen);
        if (t < 0) rc = -1;
        out->alltoall_ms = 1e3 * t;
        out->alltoall_busbw = (double)bytes / t * (n - 1.0) / n;
    }
    release(&r);
    return rc;
}

#endif
