/*
 * core/comm_nccl.c - the NCCL transport of the communication interface (core/comm_nccl.h).
 *
 * A communicator is a pair: the MPI communicator of the group (host operations: barrier,
 * host reductions, the all-to-all of counts, byte broadcasts - small, and the host needs the
 * results anyway) and an NCCL communicator of the same ranks for tensor operations on device
 * memory. Every communicator of one backend shares one communication stream: NCCL kernels of
 * different communicators on different streams could wait for each other across ranks in a
 * different order and deadlock, one stream executes them in program order, which is the same
 * on every rank.
 *
 * Ordering with the backend's compute stream, per operation: record an event on the compute
 * stream and make the communication stream wait for it (the inputs are written), queue the
 * NCCL calls, record an event on the communication stream and make the compute stream wait
 * for it (later kernels, and the caching allocator's reuse of freed blocks, come after the
 * collective). The host never blocks. iallreduce_sum, ireduce_scatter_sum and
 * ialltoallv_grouped skip the last step and keep their own event in the request: sl_comm_test
 * queries it, sl_comm_wait makes the compute stream wait on it (compute queued in between
 * overlaps the collective).
 *
 * Tensors in host memory (a CPU-backend tensor handed to this transport, e.g. a reference
 * model in a test) go through the MPI communicator of the group instead.
 *
 * This file: creation, host operations, reductions, gathers, groups; the expert exchange (the
 * all-to-alls of rows) is core/comm_nccl_exchange.c, what both use core/comm_nccl_impl.h.
 */
#include "core/comm_nccl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend_impl.h"
#include "core/comm_impl.h"
#include "core/comm_nccl_impl.h"
#include "core/log.h"
#include "core/tensor_impl.h"

static const sl_comm_i k_nccl_iface;

static void comm_fail(const sl_comm *c, const char *op, const char *what, const char *why) {
    sl_fatal("NCCL: %s failed on group %s (rank %d of %d, world rank %d): %s: %s", op, c->name,
             c->rank, c->size, c->world_rank, what, why);
}

static void nccl_fail(const nccl_ctx *x, const char *op, const char *what, const char *why) {
    comm_fail(x->self, op, what, why);
}

/* The reason: NCCL's string for the code, and its last warning (which names the argument or
 * the peer) when it has one. */
void nc_check(const nccl_ctx *x, ncclResult_t r, const char *op, const char *what) {
    if (r == ncclSuccess) return;
    const char *last = ncclGetLastError(x->nccl);
    char why[640];
    snprintf(why, sizeof why, "%s%s%s%s", ncclGetErrorString(r), last && *last ? " (" : "",
             last && *last ? last : "", last && *last ? ")" : "");
    nccl_fail(x, op, what, why);
}

void nc_cuda_check(const sl_comm *c, cudaError_t e, const char *op, const char *what) {
    if (e != cudaSuccess) comm_fail(c, op, what, cudaGetErrorString(e));
}

/* Stops the job when NCCL has seen an asynchronous error (a peer gone, a network failure):
 * its kernels would otherwise wait forever. */
static void check_async(const nccl_ctx *x, const char *op) {
    ncclResult_t async = ncclSuccess;
    NK(x, ncclCommGetAsyncError(x->nccl, &async), op);
    if (async != ncclSuccess && async != ncclInProgress)
        nccl_fail(x, op, "asynchronous error", ncclGetErrorString(async));
}

/* The communication stream waits for everything queued on the compute stream so far. */
void nc_enter(const nccl_ctx *x, const char *op) {
    CK(x, cudaEventRecord(x->sh->enter, x->sh->compute), op);
    CK(x, cudaStreamWaitEvent(x->sh->stream, x->sh->enter, 0), op);
}

/* The compute stream waits for everything queued on the communication stream so far. */
void nc_leave(const nccl_ctx *x, const char *op) {
    CK(x, cudaEventRecord(x->sh->leave, x->sh->stream), op);
    CK(x, cudaStreamWaitEvent(x->sh->compute, x->sh->leave, 0), op);
}

int nc_on_host(const sl_tensor *t) {
    return sl_backend_host_memory(t->be);
}

static ncclDataType_t nccl_type(const nccl_ctx *x, sl_dtype dt, const char *op) {
    if (dt == SL_F32) return ncclFloat32;
    if (dt == SL_BF16) return ncclBfloat16;
    nccl_fail(x, op, "dtype", "only f32 and bf16 tensors can be reduced");
    return ncclFloat32;
}

nccl_ctx *ncx(void *ctx) {
    return (nccl_ctx *)ctx;
}

/* Joins an NCCL communicator over the ranks of `mpi`: its rank 0 makes the unique id, MPI
 * broadcasts it. (Not ncclCommSplit: one way to create every group, and the id broadcast is
 * the part MPI is for.) */
static ncclComm_t nccl_join(nccl_ctx *x) {
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (x->self->rank == 0) NK(x, ncclGetUniqueId(&id), "communicator creation");
    sl_comm_broadcast_bytes(x->mpi, &id, (int64_t)sizeof id, 0);
    ncclComm_t comm = NULL;
    NK(x, ncclCommInitRank(&comm, x->self->size, id, x->self->rank), "communicator creation");
    return comm;
}

static sl_comm *wrap(sl_comm *mpi, int owns_mpi, nccl_shared *sh, const char *name) {
    sl_comm *c = sl_xcalloc(1, sizeof *c);
    nccl_ctx *x = sl_xcalloc(1, sizeof *x);
    c->iface = &k_nccl_iface;
    c->ctx = x;
    c->rank = sl_comm_rank(mpi);
    c->size = sl_comm_size(mpi);
    c->world_rank = sl_comm_world_rank(mpi);
    snprintf(c->name, sizeof c->name, "%s", name);
    x->mpi = mpi;
    x->owns_mpi = owns_mpi;
    x->sh = sh;
    x->self = c;
    CK(x, cudaSetDevice(sh->device), "communicator creation");
    x->nccl = nccl_join(x);
    sh->refs++;
    return c;
}

sl_comm *sl_comm_nccl_create(sl_comm *mpi_world, sl_backend *be, char *err, size_t errlen) {
    void *stream = sl_backend_cuda_stream(be);
    if (!stream) {
        snprintf(err, errlen, "the nccl transport needs the cuda backend, not %s",
                 be ? sl_backend_name(be) : "none");
        return NULL;
    }
    nccl_shared *sh = sl_xcalloc(1, sizeof *sh);
    sh->device = sl_backend_cuda_device(be);
    sh->compute = (cudaStream_t)stream;
    /* errors before the communicator exists name the MPI world ("world") */
    CKC(mpi_world, cudaSetDevice(sh->device), "communicator creation");
    CKC(mpi_world, cudaStreamCreateWithFlags(&sh->stream, cudaStreamNonBlocking),
        "communicator creation");
    CKC(mpi_world, cudaEventCreateWithFlags(&sh->enter, cudaEventDisableTiming),
        "communicator creation");
    CKC(mpi_world, cudaEventCreateWithFlags(&sh->leave, cudaEventDisableTiming),
        "communicator creation");
    return wrap(mpi_world, 0, sh, "world");
}

/* ---- host operations: MPI ------------------------------------------------------------------ */

static void nccl_barrier(void *ctx) {
    sl_comm_barrier(ncx(ctx)->mpi);
}

static void nccl_allreduce_host(void *ctx, void *buf, int n, int is_int64, int is_max) {
    sl_comm *m = ncx(ctx)->mpi;
    if (is_int64)
        sl_comm_allreduce_sum_i64(m, buf, n);
    else if (is_max)
        sl_comm_allreduce_max_f64(m, buf, n);
    else
        sl_comm_allreduce_sum_f64(m, buf, n);
}

static void nccl_alltoall_i64(void *ctx, const int64_t *send, int64_t *recv, int n) {
    sl_comm_alltoall_i64(ncx(ctx)->mpi, send, recv, n);
}

static void nccl_broadcast_bytes(void *ctx, void *buf, int64_t nbytes, int root) {
    sl_comm_broadcast_bytes(ncx(ctx)->mpi, buf, nbytes, root);
}

/* ---- reductions ---------------------------------------------------------------------------- */

static void nccl_allreduce_sum(void *ctx, sl_tensor *t) {
    nccl_ctx *x = ncx(ctx);
    if (nc_on_host(t)) {
        sl_comm_allreduce_sum(x->mpi, t);
        return;
    }
    const ncclDataType_t dt = nccl_type(x, t->dtype, "allreduce");
    nc_enter(x, "allreduce");
    NK(x, ncclAllReduce(t->data, t->data, (size_t)t->numel, dt, ncclSum, x->nccl, x->sh->stream),
       "allreduce");
    nc_leave(x, "allreduce");
}

/* A request: either an MPI request (host tensor) or the event recorded after the NCCL call. */
typedef struct {
    sl_comm_request *mpi;
    cudaEvent_t done;
    const char *op; /* the operation, for errors */
} nccl_req;

/* A request completed by an event recorded on the communication stream after what was just
 * queued there. Events come from the shared spare list (a bucketed all-reduce makes several
 * requests per step: no event creation per request once the list has filled). */
sl_comm_request *nc_stream_request(nccl_ctx *x, const char *op) {
    nccl_shared *sh = x->sh;
    nccl_req *r = sl_xcalloc(1, sizeof *r);
    r->op = op;
    if (sh->nspare > 0)
        r->done = sh->spare[--sh->nspare];
    else
        CK(x, cudaEventCreateWithFlags(&r->done, cudaEventDisableTiming), op);
    CK(x, cudaEventRecord(r->done, sh->stream), op);
    return sl_comm_request_new(r);
}

/* A request that forwards to one of the group's MPI side (a host tensor). */
static sl_comm_request *mpi_request(sl_comm_request *mpi) {
    nccl_req *r = sl_xcalloc(1, sizeof *r);
    r->mpi = mpi;
    return sl_comm_request_new(r);
}

static sl_comm_request *nccl_iallreduce_sum(void *ctx, sl_tensor *t) {
    nccl_ctx *x = ncx(ctx);
    if (nc_on_host(t)) return mpi_request(sl_comm_iallreduce_sum(x->mpi, t));
    const ncclDataType_t dt = nccl_type(x, t->dtype, "iallreduce");
    nc_enter(x, "iallreduce");
    NK(x, ncclAllReduce(t->data, t->data, (size_t)t->numel, dt, ncclSum, x->nccl, x->sh->stream),
       "iallreduce");
    return nc_stream_request(x, "iallreduce");
}

/*
 * Equal segments are one ncclReduceScatter, in place (the receive buffer is the rank's own
 * segment of the send buffer). Uneven ones (ZeRO-1 shards cut by gradient buckets: a bucket
 * usually lies in one or two ranks' shards) are one ncclReduce per non-empty segment, rank
 * p the root of its own, in one group: each segment travels NCCL's reduce ring once, the
 * bytes of a reduce-scatter, where an all-reduce would also carry the result back.
 */
static sl_comm_request *nccl_ireduce_scatter_sum(void *ctx, sl_tensor *t, const int64_t *counts) {
    nccl_ctx *x = ncx(ctx);
    if (nc_on_host(t)) return mpi_request(sl_comm_ireduce_scatter_sum(x->mpi, t, counts));
    const ncclDataType_t dt = nccl_type(x, t->dtype, "reduce_scatter");
    const size_t es = sl_dtype_size(t->dtype);
    bool even = true;
    for (int p = 1; p < x->self->size; p++)
        if (counts[p] != counts[0]) even = false;
    char *seg = t->data;
    nc_enter(x, "reduce_scatter");
    if (even) {
        const size_t n = (size_t)counts[0];
        if (n > 0)
            NK(x,
               ncclReduceScatter(seg, seg + (size_t)x->self->rank * n * es, n, dt, ncclSum, x->nccl,
                                 x->sh->stream),
               "reduce_scatter");
    } else {
        NK(x, ncclGroupStart(), "reduce_scatter");
        for (int p = 0; p < x->self->size; seg += (size_t)counts[p] * es, p++) {
            if (counts[p] == 0) continue;
            NK(x, ncclReduce(seg, seg, (size_t)counts[p], dt, ncclSum, p, x->nccl, x->sh->stream),
               "reduce_scatter");
        }
        NK(x, ncclGroupEnd(), "reduce_scatter");
    }
    return nc_stream_request(x, "reduce_scatter");
}

static int nccl_test(void *ctx, sl_comm_request *req) {
    nccl_ctx *x = ncx(ctx);
    nccl_req *r = req->impl;
    if (r->mpi) return sl_comm_test(r->mpi);
    const cudaError_t e = cudaEventQuery(r->done);
    if (e == cudaErrorNotReady) {
        check_async(x, r->op);
        return 0;
    }
    CK(x, e, r->op);
    return 1;
}

static void nccl_wait(void *ctx, sl_comm_request *req) {
    nccl_ctx *x = ncx(ctx);
    nccl_req *r = req->impl;
    if (r->mpi) {
        sl_comm_wait(r->mpi);
    } else {
        /* No host block: the compute stream waits. The event can be recorded again at once
         * (by a later request): the wait already queued keeps the state it captured. */
        nccl_shared *sh = x->sh;
        check_async(x, r->op);
        CK(x, cudaStreamWaitEvent(sh->compute, r->done, 0), r->op);
        sl_xreserve((void **)&sh->spare, &sh->spare_bytes,
                    sizeof *sh->spare * (size_t)(sh->nspare + 1));
        sh->spare[sh->nspare++] = r->done;
    }
    free(r);
    free(req);
}

/* ---- gathers and broadcasts --------------------------------------------------------------- */

/*
 * Uneven segments: one ncclBroadcast per segment (rank p the root of its own), all in one
 * group, in place. Each segment moves along NCCL's broadcast ring/tree once, so the bytes on
 * the wire equal an all-gather's; point-to-point sends would need size - 1 copies of every
 * segment out of its owner's link. Equal contiguous segments are an ncclAllGather (in place:
 * the send buffer is the rank's own segment).
 */
static void nccl_allgather_segments(void *ctx, sl_tensor *t, const int64_t *offsets,
                                    const int64_t *counts) {
    nccl_ctx *x = ncx(ctx);
    if (nc_on_host(t)) {
        sl_comm_allgather_segments(x->mpi, t, offsets, counts);
        return;
    }
    const size_t es = sl_dtype_size(t->dtype);
    bool even = true; /* segments in range: sl_comm_allgather_segments checked */
    for (int p = 0; p < x->self->size; p++)
        if (offsets[p] != offsets[0] + p * counts[0] || counts[p] != counts[0]) even = false;
    char *base = t->data;
    nc_enter(x, "allgather");
    if (even) {
        const size_t n = (size_t)counts[0] * es;
        char *all = base + (size_t)offsets[0] * es;
        if (n > 0)
            NK(x,
               ncclAllGather(all + (size_t)x->self->rank * n, all, n, ncclUint8, x->nccl,
                             x->sh->stream),
               "allgather");
    } else {
        NK(x, ncclGroupStart(), "allgather");
        for (int p = 0; p < x->self->size; p++) {
            if (counts[p] == 0) continue;
            char *seg = base + (size_t)offsets[p] * es;
            NK(x,
               ncclBroadcast(seg, seg, (size_t)counts[p] * es, ncclUint8, p, x->nccl,
                             x->sh->stream),
               "allgather");
        }
        NK(x, ncclGroupEnd(), "allgather");
    }
    nc_leave(x, "allgather");
}

static void nccl_broadcast(void *ctx, sl_tensor *t, int root) {
    nccl_ctx *x = ncx(ctx);
    if (nc_on_host(t)) {
        sl_comm_broadcast(x->mpi, t, root);
        return;
    }
    nc_enter(x, "broadcast");
    NK(x,
       ncclBroadcast(t->data, t->data, sl_tensor_nbytes(t), ncclUint8, root, x->nccl,
                     x->sh->stream),
       "broadcast");
    nc_leave(x, "broadcast");
}

/* ---- groups -------------------------------------------------------------------------------- */

static sl_comm *nccl_split(void *ctx, int color, int key) {
    nccl_ctx *x = ncx(ctx);
    /* sl_comm_split's default name already, for errors while the communicator is made */
    char name[96];
    snprintf(name, sizeof name, "%s/split%d", x->self->name, color);
    return wrap(sl_comm_split(x->mpi, color, key), 1, x->sh, name);
}

/* The group's MPI side (host operations) gets the name too (the NCCL side's messages read it
 * from the communicator). */
static void nccl_set_name(void *ctx, const char *name) {
    nccl_ctx *x = ncx(ctx);
    if (x->owns_mpi) sl_comm_set_name(x->mpi, name);
}

static void nccl_free_ctx(void *ctx) {
    nccl_ctx *x = ncx(ctx);
    nccl_shared *sh = x->sh;
    /* Queued collectives finish before the communicator goes. */
    CK(x, cudaStreamSynchronize(sh->stream), "communicator release");
    NK(x, ncclCommDestroy(x->nccl), "communicator release");
    if (x->owns_mpi) sl_comm_free(x->mpi);
    if (--sh->refs == 0) {
        if (sh->stage) (void)cudaFree(sh->stage);
        for (int i = 0; i < sh->nspare; i++) (void)cudaEventDestroy(sh->spare[i]);
        free(sh->spare);
        (void)cudaEventDestroy(sh->enter);
        (void)cudaEventDestroy(sh->leave);
        (void)cudaStreamDestroy(sh->stream);
        free(sh);
    }
    free(x);
}

static const sl_comm_i k_nccl_iface = {
    .name = "nccl",
    .barrier = nccl_barrier,
    .allreduce_sum = nccl_allreduce_sum,
    .iallreduce_sum = nccl_iallreduce_sum,
    .wait = nccl_wait,
    .test = nccl_test,
    .ireduce_scatter_sum = nccl_ireduce_scatter_sum,
    .allgather_segments = nccl_allgather_segments,
    .allreduce_host = nccl_allreduce_host,
    .alltoall_i64 = nccl_alltoall_i64,
    .alltoallv_rows = nccl_alltoallv_rows,
    .alltoallv_grouped = nccl_alltoallv_grouped,
    .ialltoallv_grouped = nccl_ialltoallv_grouped,
    .broadcast_bytes = nccl_broadcast_bytes,
    .broadcast = nccl_broadcast,
    .split = nccl_split,
    .set_name = nccl_set_name,
    .free_ctx = nccl_free_ctx,
};
