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
 */
#include "core/comm_nccl.h"

#include <cuda_runtime_api.h>
/* nccl.h declares a few functions with () parameter lists; the emulated build includes the
 * toolkit's headers as ordinary (not system) headers, so the warning is silenced here. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend_impl.h"
#include "core/comm_impl.h"
#include "core/comm_rows.h"
#include "core/log.h"
#include "core/tensor_impl.h"

/* What every communicator of one backend shares (reference counted). */
typedef struct {
    int refs;
    int device;
    cudaStream_t compute; /* the backend's stream (not owned) */
    cudaStream_t stream;  /* the communication stream */
    cudaEvent_t enter, leave;
    void *stage; /* device staging for alltoallv_grouped's regrouping */
    size_t stage_cap;
    cudaEvent_t *spare; /* events of finished requests, reused by the next ones */
    int nspare;
    size_t spare_bytes;
} nccl_shared;

typedef struct {
    sl_comm *mpi; /* the same group over MPI (host operations) */
    int owns_mpi;
    ncclComm_t nccl;
    nccl_shared *sh;
    const sl_comm *self; /* its communicator: name, rank, size, world rank for messages */
} nccl_ctx;

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
static void nccl_check(const nccl_ctx *x, ncclResult_t r, const char *op, const char *what) {
    if (r == ncclSuccess) return;
    const char *last = ncclGetLastError(x->nccl);
    char why[640];
    snprintf(why, sizeof why, "%s%s%s%s", ncclGetErrorString(r), last && *last ? " (" : "",
             last && *last ? last : "", last && *last ? ")" : "");
    nccl_fail(x, op, what, why);
}

static void cuda_check(const sl_comm *c, cudaError_t e, const char *op, const char *what) {
    if (e != cudaSuccess) comm_fail(c, op, what, cudaGetErrorString(e));
}

#define NK(x, call, op)  nccl_check((x), (call), (op), #call)
#define CKC(c, call, op) cuda_check((c), (call), (op), #call)
#define CK(x, call, op)  CKC((x)->self, call, op)

/* Stops the job when NCCL has seen an asynchronous error (a peer gone, a network failure):
 * its kernels would otherwise wait forever. */
static void check_async(const nccl_ctx *x, const char *op) {
    ncclResult_t async = ncclSuccess;
    NK(x, ncclCommGetAsyncError(x->nccl, &async), op);
    if (async != ncclSuccess && async != ncclInProgress)
        nccl_fail(x, op, "asynchronous error", ncclGetErrorString(async));
}

/* The communication stream waits for everything queued on the compute stream so far. */
static void enter(const nccl_ctx *x, const char *op) {
    CK(x, cudaEventRecord(x->sh->enter, x->sh->compute), op);
    CK(x, cudaStreamWaitEvent(x->sh->stream, x->sh->enter, 0), op);
}

/* The compute stream waits for everything queued on the communication stream so far. */
static void leave(const nccl_ctx *x, const char *op) {
    CK(x, cudaEventRecord(x->sh->leave, x->sh->stream), op);
    CK(x, cudaStreamWaitEvent(x->sh->compute, x->sh->leave, 0), op);
}

static int on_host(const sl_tensor *t) {
    return sl_backend_host_memory(t->be);
}

static ncclDataType_t nccl_type(const nccl_ctx *x, sl_dtype dt, const char *op) {
    if (dt == SL_F32) return ncclFloat32;
    if (dt == SL_BF16) return ncclBfloat16;
    nccl_fail(x, op, "dtype", "only f32 and bf16 tensors can be reduced");
    return ncclFloat32;
}

static nccl_ctx *X(void *ctx) {
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
    sl_comm_barrier(X(ctx)->mpi);
}

static void nccl_allreduce_host(void *ctx, void *buf, int n, int is_int64, int is_max) {
    sl_comm *m = X(ctx)->mpi;
    if (is_int64)
        sl_comm_allreduce_sum_i64(m, buf, n);
    else if (is_max)
        sl_comm_allreduce_max_f64(m, buf, n);
    else
        sl_comm_allreduce_sum_f64(m, buf, n);
}

static void nccl_alltoall_i64(void *ctx, const int64_t *send, int64_t *recv, int n) {
    sl_comm_alltoall_i64(X(ctx)->mpi, send, recv, n);
}

static void nccl_broadcast_bytes(void *ctx, void *buf, int64_t nbytes, int root) {
    sl_comm_broadcast_bytes(X(ctx)->mpi, buf, nbytes, root);
}

/* ---- reductions ---------------------------------------------------------------------------- */

static void nccl_allreduce_sum(void *ctx, sl_tensor *t) {
    nccl_ctx *x = X(ctx);
    if (on_host(t)) {
        sl_comm_allreduce_sum(x->mpi, t);
        return;
    }
    const ncclDataType_t dt = nccl_type(x, t->dtype, "allreduce");
    enter(x, "allreduce");
    NK(x, ncclAllReduce(t->data, t->data, (size_t)t->numel, dt, ncclSum, x->nccl, x->sh->stream),
       "allreduce");
    leave(x, "allreduce");
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
static sl_comm_request *stream_request(nccl_ctx *x, const char *op) {
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
    nccl_ctx *x = X(ctx);
    if (on_host(t)) return mpi_request(sl_comm_iallreduce_sum(x->mpi, t));
    const ncclDataType_t dt = nccl_type(x, t->dtype, "iallreduce");
    enter(x, "iallreduce");
    NK(x, ncclAllReduce(t->data, t->data, (size_t)t->numel, dt, ncclSum, x->nccl, x->sh->stream),
       "iallreduce");
    return stream_request(x, "iallreduce");
}

/*
 * Equal segments are one ncclReduceScatter, in place (the receive buffer is the rank's own
 * segment of the send buffer). Uneven ones (ZeRO-1 shards cut by gradient buckets: a bucket
 * usually lies in one or two ranks' shards) are one ncclReduce per non-empty segment, rank
 * p the root of its own, in one group: each segment travels NCCL's reduce ring once, the
 * bytes of a reduce-scatter, where an all-reduce would also carry the result back.
 */
static sl_comm_request *nccl_ireduce_scatter_sum(void *ctx, sl_tensor *t, const int64_t *counts) {
    nccl_ctx *x = X(ctx);
    if (on_host(t)) return mpi_request(sl_comm_ireduce_scatter_sum(x->mpi, t, counts));
    const ncclDataType_t dt = nccl_type(x, t->dtype, "reduce_scatter");
    const size_t es = sl_dtype_size(t->dtype);
    bool even = true;
    for (int p = 1; p < x->self->size; p++)
        if (counts[p] != counts[0]) even = false;
    char *seg = t->data;
    enter(x, "reduce_scatter");
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
    return stream_request(x, "reduce_scatter");
}

static int nccl_test(void *ctx, sl_comm_request *req) {
    nccl_ctx *x = X(ctx);
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
    nccl_ctx *x = X(ctx);
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
    nccl_ctx *x = X(ctx);
    if (on_host(t)) {
        sl_comm_allgather_segments(x->mpi, t, offsets, counts);
        return;
    }
    const size_t es = sl_dtype_size(t->dtype);
    bool even = true; /* segments in range: sl_comm_allgather_segments checked */
    for (int p = 0; p < x->self->size; p++)
        if (offsets[p] != offsets[0] + p * counts[0] || counts[p] != counts[0]) even = false;
    char *base = t->data;
    enter(x, "allgather");
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
    leave(x, "allgather");
}

static void nccl_broadcast(void *ctx, sl_tensor *t, int root) {
    nccl_ctx *x = X(ctx);
    if (on_host(t)) {
        sl_comm_broadcast(x->mpi, t, root);
        return;
    }
    enter(x, "broadcast");
    NK(x,
       ncclBroadcast(t->data, t->data, sl_tensor_nbytes(t), ncclUint8, root, x->nccl,
                     x->sh->stream),
       "broadcast");
    leave(x, "broadcast");
}

/* ---- the expert exchange ------------------------------------------------------------------- */

static void copy_d2d(const nccl_ctx *x, void *dst, const void *src, size_t bytes, const char *op) {
    if (bytes > 0)
        CK(x, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, x->sh->stream), op);
}

/* Queues a send of `bytes` to peer p and a receive of `rbytes` from it (skipping empty ones;
 * both sides skip alike, the counts being each other's). Inside a group. */
static void sendrecv(const nccl_ctx *x, const void *s, size_t bytes, void *r, size_t rbytes, int p,
                     const char *op) {
    if (bytes > 0) NK(x, ncclSend(s, bytes, ncclUint8, p, x->nccl, x->sh->stream), op);
    if (rbytes > 0) NK(x, ncclRecv(r, rbytes, ncclUint8, p, x->nccl, x->sh->stream), op);
}

static void nccl_alltoallv_rows(void *ctx, const sl_tensor *send, const int64_t *send_rows,
                                sl_tensor *recv, const int64_t *recv_rows) {
    nccl_ctx *x = X(ctx);
    if (on_host(send) && on_host(recv)) {
        sl_comm_alltoallv_rows(x->mpi, send, send_rows, recv, recv_rows);
        return;
    }
    /* one row layout, rows within the tensors: sl_comm_alltoallv_rows checked */
    SL_CHECK(!on_host(send) && !on_host(recv),
             "alltoallv on group %s: both tensors must be device tensors", x->self->name);
    const size_t w = (size_t)sl_last_dim(send) * sl_dtype_size(send->dtype);
    const char *s = send->data;
    char *r = recv->data;
    enter(x, "alltoallv");
    NK(x, ncclGroupStart(), "alltoallv");
    int64_t so = 0, ro = 0;
    for (int p = 0; p < x->self->size; p++) {
        const size_t sb = (size_t)send_rows[p] * w, rb = (size_t)recv_rows[p] * w;
        if (p == x->self->rank) {
            SL_CHECK(sb == rb, "alltoallv on group %s: %lld rows to self but %lld expected",
                     x->self->name, (long long)send_rows[p], (long long)recv_rows[p]);
            copy_d2d(x, r + (size_t)ro * w, s + (size_t)so * w, sb, "alltoallv");
        } else {
            sendrecv(x, s + (size_t)so * w, sb, r + (size_t)ro * w, rb, p, "alltoallv");
        }
        so += send_rows[p];
        ro += recv_rows[p];
    }
    NK(x, ncclGroupEnd(), "alltoallv");
    leave(x, "alltoallv");
}

/* Device staging of at least `bytes` on the communication stream. Grows rarely (cudaFree
 * synchronizes the device, so no queued copy still uses the old buffer). */
static char *stage(nccl_ctx *x, size_t bytes, const char *op) {
    nccl_shared *sh = x->sh;
    if (bytes > sh->stage_cap) {
        if (sh->stage) CK(x, cudaFree(sh->stage), op);
        sh->stage = NULL;
        sh->stage_cap = bytes + bytes / 4;
        CK(x, cudaMalloc(&sh->stage, sh->stage_cap), op);
    }
    return sh->stage;
}

/*
 * NCCL matches a send with a receive of the same size, and the flat side does not know how
 * its peer splits the rows into groups. So each peer's rows travel as one message between the
 * flat side and a contiguous staging area, and a copy kernel on the communication stream
 * moves them between staging and the group blocks (the peer's own rows move straight from one
 * tensor to the other): size * groups blocks of rows, one launch per 64 of them
 * (core/comm_rows.h), where a cudaMemcpyAsync per block would cost a launch each.
 */
static const char *grouped_op(bool scatter) {
    return scatter ? "alltoallv_grouped (scatter)" : "alltoallv_grouped (gather)";
}

/* Queues the exchange on the communication stream after the compute stream's work so far
 * (host tensors: runs it over MPI at once and returns false, nothing queued). */
static bool queue_grouped(nccl_ctx *x, const sl_tensor *src, sl_tensor *dst,
                          const int64_t *flat_rows, const int64_t *grouped_rows, int groups,
                          bool scatter) {
    if (on_host(src) && on_host(dst)) {
        sl_comm_alltoallv_grouped(x->mpi, src, dst, flat_rows, grouped_rows, groups, scatter);
        return false;
    }
    const char *op = grouped_op(scatter);
    const int size = x->self->size, me = x->self->rank;
    /* one row layout, rows within the tensors: sl_comm_alltoallv_grouped checked */
    SL_CHECK(!on_host(src) && !on_host(dst), "%s on group %s: both tensors must be device tensors",
             op, x->self->name);
    const size_t w = (size_t)sl_last_dim(src) * sl_dtype_size(src->dtype);
    const sl_tensor *flat = scatter ? src : dst, *grouped = scatter ? dst : src;
    int64_t *start = sl_xmalloc(sizeof(int64_t) * (size_t)size * (size_t)groups);
    sl_comm_group_starts(grouped_rows, size, groups, start);
    int64_t *peer_rows = sl_xcalloc((size_t)size, sizeof(int64_t));
    int64_t staged = 0;
    for (int p = 0; p < size; p++) {
        for (int g = 0; g < groups; g++) peer_rows[p] += grouped_rows[p * groups + g];
        if (p != me) staged += peer_rows[p];
    }
    SL_CHECK(peer_rows[me] == flat_rows[me],
             "%s on group %s: %lld grouped rows of this rank but %lld flat", op, x->self->name,
             (long long)peer_rows[me], (long long)flat_rows[me]);
    char *st = staged > 0 ? stage(x, (size_t)staged * w, op) : NULL;
    char *fl = flat->data, *gr = grouped->data;
    /* The blocks between each peer's contiguous rows (staging, or the flat side for this
     * rank) and the group blocks: sources for the gather, destinations for the scatter. */
    sl_row_block *blk = sl_xmalloc(sizeof *blk * (size_t)size * (size_t)groups);
    int64_t fo = 0, so = 0;
    for (int p = 0; p < size; p++) {
        char *peer = p == me ? fl + (size_t)fo * w : st + (size_t)so * w;
        int64_t r = 0;
        for (int g = 0; g < groups; r += grouped_rows[p * groups + g], g++) {
            char *contiguous = peer + (size_t)r * w,
                 *block = gr + (size_t)start[p * groups + g] * w;
            blk[p * groups + g] = (sl_row_block){.src = scatter ? contiguous : block,
                                                 .dst = scatter ? block : contiguous,
                                                 .rows = grouped_rows[p * groups + g]};
        }
        fo += flat_rows[p];
        if (p != me) so += peer_rows[p];
    }
    enter(x, op);
    /* gather: pack each peer's blocks into staging first */
    if (!scatter) CK(x, sl_cuda_copy_row_blocks(blk, size * groups, w, x->sh->stream), op);
    NK(x, ncclGroupStart(), op);
    fo = so = 0;
    for (int p = 0; p < size; p++) {
        if (p != me) {
            char *f = fl + (size_t)fo * w, *s = st + (size_t)so * w;
            const size_t fb = (size_t)flat_rows[p] * w, sb = (size_t)peer_rows[p] * w;
            if (scatter)
                sendrecv(x, f, fb, s, sb, p, op);
            else
                sendrecv(x, s, sb, f, fb, p, op);
            so += peer_rows[p];
        }
        fo += flat_rows[p];
    }
    NK(x, ncclGroupEnd(), op);
    /* scatter: unpack staging (and this rank's own rows) into the group blocks */
    if (scatter) CK(x, sl_cuda_copy_row_blocks(blk, size * groups, w, x->sh->stream), op);
    free(blk);
    free(start);
    free(peer_rows);
    return true;
}

static void nccl_alltoallv_grouped(void *ctx, const sl_tensor *src, sl_tensor *dst,
                                   const int64_t *flat_rows, const int64_t *grouped_rows,
                                   int groups, bool scatter) {
    nccl_ctx *x = X(ctx);
    if (queue_grouped(x, src, dst, flat_rows, grouped_rows, groups, scatter))
        leave(x, grouped_op(scatter));
}

/* The compute stream does not wait here: the request's event, recorded after the exchange on
 * the communication stream, is what sl_comm_wait makes it wait for. */
static sl_comm_request *nccl_ialltoallv_grouped(void *ctx, const sl_tensor *src, sl_tensor *dst,
                                                const int64_t *flat_rows,
                                                const int64_t *grouped_rows, int groups,
                                                bool scatter) {
    nccl_ctx *x = X(ctx);
    if (!queue_grouped(x, src, dst, flat_rows, grouped_rows, groups, scatter))
        return sl_comm_request_new(NULL); /* completed over MPI */
    return stream_request(x, "ialltoallv_grouped");
}

/* ---- groups -------------------------------------------------------------------------------- */

static sl_comm *nccl_split(void *ctx, int color, int key) {
    nccl_ctx *x = X(ctx);
    /* sl_comm_split's default name already, for errors while the communicator is made */
    char name[96];
    snprintf(name, sizeof name, "%s/split%d", x->self->name, color);
    return wrap(sl_comm_split(x->mpi, color, key), 1, x->sh, name);
}

/* The group's MPI side (host operations) gets the name too (the NCCL side's messages read it
 * from the communicator). */
static void nccl_set_name(void *ctx, const char *name) {
    nccl_ctx *x = X(ctx);
    if (x->owns_mpi) sl_comm_set_name(x->mpi, name);
}

static void nccl_free_ctx(void *ctx) {
    nccl_ctx *x = X(ctx);
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
