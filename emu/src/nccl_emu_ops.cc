/*
 * emu/src/nccl_emu_ops.cc - the fake NCCL's groups and operations (emu/README.md, "NCCL"):
 * point to point, all-reduce, reduce, reduce-scatter, all-gather and broadcast over MPI on
 * host memory. Communicators and errors are in nccl_emu.cc.
 *
 * - streams are synchronous in the emulator: an operation outside a group is complete when the
 *   call returns; inside ncclGroupStart/End it is queued, and the outermost ncclGroupEnd posts
 *   every queued operation as non-blocking MPI (MPI_Isend/Irecv, MPI_Iallgather, ...) and waits
 *   for all of them at once, so grouped patterns cannot deadlock on their order;
 * - reductions gather every rank's contribution and reduce in rank order in fp32 (bf16
 *   converted, rounded once at the end): bitwise reproducible and independent of MPI's
 *   algorithm, unlike real NCCL's ring or tree order (bf16 rounded at every hop).
 */
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>
#include <limits>
#include <mutex>
#include <vector>

#include "internal.h"
#include "nccl_emu.h"

using namespace sl_emu_nccl;

namespace {

/* ---- element types and reductions ---------------------------------------------------------- */

size_t type_size(ncclDataType_t t) {
    switch (t) {
    case ncclInt8:
    case ncclUint8:
    case ncclFloat8e4m3:
    case ncclFloat8e5m2:
        return 1;
    case ncclFloat16:
    case ncclBfloat16:
        return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
        return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64:
        return 8;
    default:
        return 0;
    }
}

float load(ncclDataType_t t, const char *p, size_t i) {
    if (t == ncclFloat32) {
        float v;
        memcpy(&v, p + 4 * i, 4);
        return v;
    }
    __nv_bfloat16 b;
    memcpy(&b, p + 2 * i, 2);
    return __bfloat162float(b);
}

void store(ncclDataType_t t, char *p, size_t i, float v) {
    if (t == ncclFloat32) {
        memcpy(p + 4 * i, &v, 4);
        return;
    }
    const __nv_bfloat16 b = __float2bfloat16_rn(v);
    memcpy(p + 2 * i, &b, 2);
}

float combine(ncclRedOp_t op, float acc, float v) {
    switch (op) {
    case ncclProd:
        return acc * v;
    case ncclMax:
        return v > acc ? v : acc;
    case ncclMin:
        return v < acc ? v : acc;
    default: /* ncclSum, ncclAvg */
        return acc + v;
    }
}

/* out[i] = op over ranks r = 0..n-1, in that order, of parts[r * stride + i], in fp32. */
void reduce(ncclDataType_t t, ncclRedOp_t op, int nranks, const char *parts, size_t stride,
            size_t count, char *out) {
    for (size_t i = 0; i < count; i++) {
        float acc = load(t, parts, i);
        for (int r = 1; r < nranks; r++) acc = combine(op, acc, load(t, parts, r * stride + i));
        if (op == ncclAvg) acc /= (float)nranks;
        store(t, out, i, acc);
    }
}

/* ---- argument checks ------------------------------------------------------------------------ */

ncclResult_t check_type(const char *fn, ncclDataType_t t) {
    if (type_size(t) == 0) return fail(ncclInvalidArgument, "%s: invalid datatype %d", fn, (int)t);
    return ncclSuccess;
}

/* Reductions: fp32 and bf16, the built-in operations (the fake has no ncclRedOpCreate*). */
ncclResult_t check_reduction(const char *fn, ncclDataType_t t, ncclRedOp_t op) {
    if (ncclResult_t r = check_type(fn, t)) return r;
    if (t != ncclFloat32 && t != ncclBfloat16)
        return fail(
            ncclInvalidArgument,
            "%s: datatype %d: the emulator's NCCL reduces ncclFloat32 and ncclBfloat16 only", fn,
            (int)t);
    if ((int)op < 0 || op >= ncclNumOps)
        return fail(
            ncclInvalidArgument,
            "%s: reduction op %d: the emulator's NCCL has the built-in ops only (sum, prod, "
            "max, min, avg)",
            fn, (int)op);
    return ncclSuccess;
}

ncclResult_t check_rank(const char *fn, const char *what, int r, const ncclComm *comm) {
    if (r < 0 || r >= comm->nranks)
        return fail(ncclInvalidArgument, "%s: %s %d is not a rank of a communicator of %d", fn,
                    what, r, comm->nranks);
    return ncclSuccess;
}

/* A buffer of `bytes` the operation reads or writes: memory a GPU can address (a device
 * allocation, or pinned or registered host memory), the whole range inside one allocation. */
ncclResult_t check_buffer(const char *fn, const char *what, const void *p, size_t bytes) {
    if (bytes == 0) return ncclSuccess;
    if (!p) return fail(ncclInvalidArgument, "%s: %s is NULL", fn, what);
    std::lock_guard<std::recursive_mutex> lock(sl_emu::big_lock());
    if (sl_emu::find_allocation(p, bytes)) return ncclSuccess;
    if (const sl_emu::allocation *a = sl_emu::find_allocation(p, 0)) {
        char desc[256];
        sl_emu::describe(*a, desc, sizeof desc);
        return fail(ncclInvalidArgument, "%s: %s %p + %zu bytes runs past the end of %s", fn, what,
                    p, bytes, desc);
    }
    return fail(ncclInvalidArgument, "%s: %s %p is not device memory (no live allocation)", fn,
                what, p);
}

/* What a GPU operation meets before it runs: an unknown stream, or a sticky CUDA error. */
ncclResult_t check_stream(const char *fn, cudaStream_t s) {
    std::lock_guard<std::recursive_mutex> lock(sl_emu::big_lock());
    if (!sl_emu::valid_stream(s))
        return fail(ncclUnhandledCudaError, "%s: stream %p is not a stream of the device", fn,
                    (void *)s);
    if (cudaError_t e = sl_emu::sticky_error())
        return fail(ncclUnhandledCudaError, "%s: the device has a sticky CUDA error (%s)", fn,
                    cudaGetErrorName(e));
    return ncclSuccess;
}

/* MPI counts are ints: the fake moves at most INT_MAX bytes per message. */
ncclResult_t check_bytes(const char *fn, size_t bytes) {
    if (bytes > (size_t)std::numeric_limits<int>::max())
        return fail(ncclInvalidArgument,
                    "%s: %zu bytes in one message: the emulator's NCCL (over MPI) moves at most "
                    "INT_MAX",
                    fn, bytes);
    return ncclSuccess;
}

/* ---- operations: posted as non-blocking MPI, finished after the wait ----------------------- */

enum op_kind { k_send, k_recv, k_allreduce, k_reduce, k_reduce_scatter, k_allgather, k_broadcast };

struct pending {
    op_kind kind;
    const char *fn;
    ncclComm *comm;
    const char *send;
    char *recv;
    size_t count; /* elements: per rank for all-gather and reduce-scatter (NCCL's count) */
    ncclDataType_t type;
    ncclRedOp_t red;
    int peer; /* peer of a send or receive; root of reduce and broadcast */
    /* Staging: what is sent is copied at the call (the stream order: the data as they are when
     * the operation is enqueued); what arrives lands here and is copied out after the wait. */
    std::vector<char> out, in;
};

thread_local int t_group_depth;
thread_local std::vector<pending> t_queue;
thread_local ncclResult_t t_group_error;

/* Posts `o`'s MPI requests (appended to `reqs`). */
ncclResult_t post(pending &o, std::vector<MPI_Request> &reqs) {
    const size_t es = type_size(o.type), bytes = o.count * es;
    const int n = o.comm->nranks;
    MPI_Comm c = o.comm->mpi;
    MPI_Request rq = MPI_REQUEST_NULL;
    int err = MPI_SUCCESS;
    const char *what = "";
    switch (o.kind) {
    case k_send:
        o.out.assign(o.send, o.send + bytes);
        what = "MPI_Isend";
        err = MPI_Isend(o.out.data(), (int)bytes, MPI_BYTE, o.peer, 0, c, &rq);
        break;
    case k_recv:
        o.in.resize(bytes);
        what = "MPI_Irecv";
        err = MPI_Irecv(o.in.data(), (int)bytes, MPI_BYTE, o.peer, 0, c, &rq);
        break;
    case k_allreduce:
    case k_allgather:
        o.out.assign(o.send, o.send + bytes);
        o.in.resize(bytes * n);
        what = "MPI_Iallgather";
        err = MPI_Iallgather(o.out.data(), (int)bytes, MPI_BYTE, o.in.data(), (int)bytes, MPI_BYTE,
                             c, &rq);
        break;
    case k_reduce:
        o.out.assign(o.send, o.send + bytes);
        o.in.resize(o.comm->rank == o.peer ? bytes * n : 0);
        what = "MPI_Igather";
        err = MPI_Igather(o.out.data(), (int)bytes, MPI_BYTE, o.in.data(), (int)bytes, MPI_BYTE,
                          o.peer, c, &rq);
        break;
    case k_reduce_scatter:
        /* Rank j receives block j of every rank: an all-to-all of recvcount elements. */
        o.out.assign(o.send, o.send + bytes * n);
        o.in.resize(bytes * n);
        what = "MPI_Ialltoall";
        err = MPI_Ialltoall(o.out.data(), (int)bytes, MPI_BYTE, o.in.data(), (int)bytes, MPI_BYTE,
                            c, &rq);
        break;
    case k_broadcast:
        if (o.comm->rank == o.peer)
            o.in.assign(o.send, o.send + bytes);
        else
            o.in.resize(bytes);
        what = "MPI_Ibcast";
        err = MPI_Ibcast(o.in.data(), (int)bytes, MPI_BYTE, o.peer, c, &rq);
        break;
    }
    if (err != MPI_SUCCESS) return mpi_fail(o.comm, o.fn, what, err);
    reqs.push_back(rq);
    return ncclSuccess;
}

/* After the wait: the received bytes (reduced where it reduces) into the user's buffer. */
void finish(pending &o) {
    const int n = o.comm->nranks;
    std::lock_guard<std::recursive_mutex> lock(sl_emu::big_lock());
    switch (o.kind) {
    case k_send:
        break;
    case k_recv:
    case k_allgather:
    case k_broadcast:
        if (!o.in.empty()) memcpy(o.recv, o.in.data(), o.in.size());
        break;
    case k_allreduce:
    case k_reduce_scatter:
        reduce(o.type, o.red, n, o.in.data(), o.count, o.count, o.recv);
        break;
    case k_reduce:
        if (o.comm->rank == o.peer) reduce(o.type, o.red, n, o.in.data(), o.count, o.count, o.recv);
        break;
    }
}

/* Runs operations: posts all, waits for all, finishes all. */
ncclResult_t run(std::vector<pending> &ops) {
    std::vector<MPI_Request> reqs;
    reqs.reserve(ops.size());
    for (pending &o : ops)
        if (ncclResult_t r = post(o, reqs)) {
            /* Requests already posted cannot be taken back; the communicator is broken. */
            return r;
        }
    std::vector<MPI_Status> st(reqs.size());
    int err = MPI_Waitall((int)reqs.size(), reqs.data(), st.data());
    if (err != MPI_SUCCESS) {
        for (size_t i = 0; i < reqs.size(); i++)
            if (err == MPI_ERR_IN_STATUS && st[i].MPI_ERROR != MPI_SUCCESS &&
                st[i].MPI_ERROR != MPI_ERR_PENDING)
                return mpi_fail(ops[i].comm, ops[i].fn, "MPI_Waitall", st[i].MPI_ERROR);
        return mpi_fail(ops.empty() ? nullptr : ops[0].comm, "ncclGroupEnd", "MPI_Waitall", err);
    }
    for (pending &o : ops) finish(o);
    return ncclSuccess;
}

/* An operation whose arguments passed: run now, or queued inside a group. */
ncclResult_t enqueue(pending &&o) {
    if (t_group_depth > 0) {
        t_queue.push_back(std::move(o));
        return ncclSuccess;
    }
    std::vector<pending> one;
    one.push_back(std::move(o));
    return run(one);
}

/* The last step of every API call whose arguments passed: its operation, with empty staging,
 * run now or queued (enqueue). */
ncclResult_t enqueue_op(op_kind kind, const char *fn, ncclComm *comm, const void *send, void *recv,
                        size_t count, ncclDataType_t type, ncclRedOp_t red, int peer) {
    return enqueue(
        pending{kind, fn, comm, (const char *)send, (char *)recv, count, type, red, peer, {}, {}});
}

/* A failed argument check inside a group fails the whole group at ncclGroupEnd (real NCCL
 * too); outside a group it is just the call's result. */
ncclResult_t reject(ncclResult_t r) {
    if (t_group_depth > 0 && t_group_error == ncclSuccess) t_group_error = r;
    return r;
}

/* Test-only fault injection (emu/README.md): SLUICE_EMU_NCCL_FAIL=CALL:RANK[:N] makes the N-th
 * call (default the first) of the NCCL function CALL on MPI_COMM_WORLD rank RANK fail with
 * ncclRemoteError, the communicator's asynchronous error from then on: what real NCCL reports
 * when a peer or link is lost, so that callers' error paths run in CI. */
ncclResult_t injected_fault(const char *fn, ncclComm *comm) {
    const char *spec = getenv("SLUICE_EMU_NCCL_FAIL");
    if (!spec || !*spec) return ncclSuccess;
    char call[64] = "";
    int rank = -1, nth = 1;
    if (sscanf(spec, "%63[^:]:%d:%d", call, &rank, &nth) < 2 || strcmp(call, fn) != 0)
        return ncclSuccess;
    int me = -1;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    static std::atomic<int> seen{0};
    if (me != rank || ++seen != nth) return ncclSuccess;
    comm->async_error = ncclRemoteError;
    return fail(ncclRemoteError, "%s: failure injected by SLUICE_EMU_NCCL_FAIL=%s on world rank %d",
                fn, spec, me);
}

/* Checks shared by every operation; bytes_in/bytes_out: what it reads and writes here. */
ncclResult_t check_op(const char *fn, ncclComm *comm, ncclDataType_t t, cudaStream_t stream,
                      const void *send, size_t send_bytes, const void *recv, size_t recv_bytes) {
    ncclResult_t r;
    if ((r = check_comm(fn, comm)) || (r = check_type(fn, t)) || (r = check_stream(fn, stream)) ||
        (r = check_bytes(fn, send_bytes)) || (r = check_bytes(fn, recv_bytes)) ||
        (r = check_buffer(fn, "sendbuff", send, send_bytes)) ||
        (r = check_buffer(fn, "recvbuff", recv, recv_bytes)))
        return r;
    if (comm->async_error != ncclSuccess)
        return fail(ncclInvalidUsage, "%s: the communicator has failed before (%s)", fn,
                    ncclGetErrorString(comm->async_error));
    return injected_fault(fn, comm);
}
} // namespace

/* ---- the API -------------------------------------------------------------------------------- */

extern "C" {

/* ---- groups --------------------------------------------------------------------------------- */

ncclResult_t ncclGroupStart() {
    if (t_group_depth++ == 0) {
        t_queue.clear();
        t_group_error = ncclSuccess;
    }
    return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
    if (t_group_depth == 0)
        return fail(ncclInvalidUsage, "ncclGroupEnd: no matching ncclGroupStart");
    if (--t_group_depth > 0) return ncclSuccess;
    std::vector<pending> ops;
    ops.swap(t_queue);
    if (t_group_error != ncclSuccess) {
        /* An operation of the group failed its checks: none of them runs. */
        ncclResult_t r = t_group_error;
        t_group_error = ncclSuccess;
        return r;
    }
    return run(ops);
}

/* ---- point to point ------------------------------------------------------------------------- */

ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
    const char *fn = "ncclSend";
    ncclResult_t r;
    if ((r = check_op(fn, comm, datatype, stream, sendbuff, count * type_size(datatype), nullptr,
                      0)) ||
        (r = check_rank(fn, "peer", peer, comm)))
        return reject(r);
    if (count == 0) return ncclSuccess; /* nothing moves: no message (as in NCCL) */
    return enqueue_op(k_send, fn, comm, sendbuff, nullptr, count, datatype, ncclSum, peer);
}

ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
    const char *fn = "ncclRecv";
    ncclResult_t r;
    if ((r = check_op(fn, comm, datatype, stream, nullptr, 0, recvbuff,
                      count * type_size(datatype))) ||
        (r = check_rank(fn, "peer", peer, comm)))
        return reject(r);
    if (count == 0) return ncclSuccess;
    return enqueue_op(k_recv, fn, comm, nullptr, recvbuff, count, datatype, ncclSum, peer);
}

/* ---- collectives ---------------------------------------------------------------------------- */

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream) {
    const char *fn = "ncclAllReduce";
    const size_t bytes = count * type_size(datatype);
    ncclResult_t r;
    if ((r = check_op(fn, comm, datatype, stream, sendbuff, bytes, recvbuff, bytes)) ||
        (r = check_reduction(fn, datatype, op)) || (r = check_bytes(fn, bytes * comm->nranks)))
        return reject(r);
    return enqueue_op(k_allreduce, fn, comm, sendbuff, recvbuff, count, datatype, op, 0);
}

ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
    const char *fn = "ncclReduce";
    const size_t bytes = count * type_size(datatype);
    ncclResult_t r;
    if ((r = check_comm(fn, comm)) || (r = check_rank(fn, "root", root, comm)) ||
        (r = check_op(fn, comm, datatype, stream, sendbuff, bytes, recvbuff,
                      comm->rank == root ? bytes : 0)) ||
        (r = check_reduction(fn, datatype, op)) || (r = check_bytes(fn, bytes * comm->nranks)))
        return reject(r);
    return enqueue_op(k_reduce, fn, comm, sendbuff, recvbuff, count, datatype, op, root);
}

ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream) {
    const char *fn = "ncclReduceScatter";
    const size_t bytes = recvcount * type_size(datatype);
    ncclResult_t r;
    if ((r = check_comm(fn, comm)) ||
        (r = check_op(fn, comm, datatype, stream, sendbuff, bytes * comm->nranks, recvbuff,
                      bytes)) ||
        (r = check_reduction(fn, datatype, op)))
        return reject(r);
    return enqueue_op(k_reduce_scatter, fn, comm, sendbuff, recvbuff, recvcount, datatype, op, 0);
}

ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
    const char *fn = "ncclAllGather";
    const size_t bytes = sendcount * type_size(datatype);
    ncclResult_t r;
    if ((r = check_comm(fn, comm)) ||
        (r = check_op(fn, comm, datatype, stream, sendbuff, bytes, recvbuff, bytes * comm->nranks)))
        return reject(r);
    return enqueue_op(k_allgather, fn, comm, sendbuff, recvbuff, sendcount, datatype, ncclSum, 0);
}

ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm,
                           cudaStream_t stream) {
    const char *fn = "ncclBroadcast";
    const size_t bytes = count * type_size(datatype);
    ncclResult_t r;
    if ((r = check_comm(fn, comm)) || (r = check_rank(fn, "root", root, comm)) ||
        (r = check_op(fn, comm, datatype, stream, comm->rank == root ? sendbuff : nullptr,
                      comm->rank == root ? bytes : 0, recvbuff, bytes)))
        return reject(r);
    return enqueue_op(k_broadcast, fn, comm, sendbuff, recvbuff, count, datatype, ncclSum, root);
}

ncclResult_t ncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                       cudaStream_t stream) {
    return ncclBroadcast(buff, buff, count, datatype, root, comm, stream);
}

} // extern "C"
