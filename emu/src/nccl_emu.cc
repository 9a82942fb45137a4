/*
 * emu/src/nccl_emu.cc - NCCL for the CPU test double, over MPI on host memory (emu/README.md,
 * section "NCCL").
 *
 * The declarations are the real header's (the toolkit's nccl.h), so every signature is NCCL's
 * own and the emulated build links this file instead of libnccl. Device memory is host memory
 * here, so a communicator is an MPI communicator and every operation is MPI on those bytes:
 *
 * - rendezvous: ncclCommInitRank splits MPI_COMM_WORLD by a colour derived from the unique id,
 *   so EVERY world rank must call it at the same point (ncclCommSplit is MPI_Comm_split of the
 *   parent and has no such restriction beyond the parent's members);
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
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <limits>
#include <mutex>
#include <string>
#include <vector>

#include "internal.h"

namespace sl_emu {
bool valid_stream(cudaStream_t s); /* runtime.cc (as simt.cc declares it) */
} // namespace sl_emu

struct ncclComm {
    MPI_Comm mpi;
    int rank, nranks;
    int device;
    ncclResult_t async_error;
};

namespace {

/* ---- errors: the last one, named, for ncclGetLastError ------------------------------------- */

thread_local char t_last_error[512];

/* Records a failed call's reason (and prints it when NCCL_DEBUG asks for warnings, as real
 * NCCL does) and returns its code. */
ncclResult_t fail(ncclResult_t r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
ncclResult_t fail(ncclResult_t r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t_last_error, sizeof t_last_error, fmt, ap);
    va_end(ap);
    const char *debug = getenv("NCCL_DEBUG");
    if (debug && *debug && strcasecmp(debug, "VERSION") != 0)
        fprintf(stderr, "sluice emu: NCCL WARN %s (%s)\n", t_last_error, ncclGetErrorString(r));
    return r;
}

/* An MPI call that failed (the fake's communicators return MPI errors instead of aborting). */
ncclResult_t mpi_fail(ncclComm *comm, const char *fn, const char *mpi_fn, int err) {
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(err, text, &len) != MPI_SUCCESS)
        snprintf(text, sizeof text, "error %d", err);
    if (comm) comm->async_error = ncclRemoteError;
    return fail(ncclRemoteError, "%s: %s failed on rank %d: %s", fn, mpi_fn, comm ? comm->rank : -1,
                text);
}

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

ncclResult_t check_comm(const char *fn, const ncclComm *comm) {
    if (!comm) return fail(ncclInvalidArgument, "%s: comm is NULL", fn);
    return ncclSuccess;
}

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

/* ---- communicators -------------------------------------------------------------------------- */

/* A new communicator over `mpi` (taken over); its MPI errors are returned, not fatal. */
ncclResult_t make_comm(MPI_Comm mpi, ncclComm **out) {
    MPI_Comm_set_errhandler(mpi, MPI_ERRORS_RETURN);
    ncclComm *c = new ncclComm;
    c->mpi = mpi;
    MPI_Comm_rank(mpi, &c->rank);
    MPI_Comm_size(mpi, &c->nranks);
    c->device = 0;
    if (cudaGetDevice(&c->device) != cudaSuccess) c->device = 0;
    c->async_error = ncclSuccess;
    *out = c;
    return ncclSuccess;
}

bool mpi_ready(const char *fn, ncclResult_t *r) {
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (init && !fin) return true;
    *r = fail(ncclInvalidUsage, "%s: the emulator's NCCL runs over MPI: call MPI_Init first", fn);
    return false;
}

const char k_id_magic[] = "sluice-emu-nccl";

/* The colour of MPI_COMM_WORLD's split for a unique id: a hash of its bytes (FNV-1a). */
int id_colour(const ncclUniqueId &id) {
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; i++)
        h = (h ^ (unsigned char)id.internal[i]) * 1099511628211ull;
    return (int)(h & 0x3fffffff);
}

} // namespace

/* ---- the API -------------------------------------------------------------------------------- */

extern "C" {

ncclResult_t ncclGetVersion(int *version) {
    if (!version) return fail(ncclInvalidArgument, "ncclGetVersion: version is NULL");
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t result) {
    switch (result) {
    case ncclSuccess:
        return "no error";
    case ncclUnhandledCudaError:
        return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError:
        return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError:
        return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument:
        return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage:
        return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError:
        return "remote process exited or there was a network error";
    case ncclInProgress:
        return "NCCL operation in progress";
    default:
        return "unknown result code";
    }
}

const char *ncclGetLastError(ncclComm_t comm) {
    (void)comm; /* real NCCL ignores it too */
    return t_last_error;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId) {
    if (!uniqueId) return fail(ncclInvalidArgument, "ncclGetUniqueId: uniqueId is NULL");
    /* Unique per call: magic, the caller's host and process, a counter and the time. */
    static std::atomic<uint64_t> counter{0};
    memset(uniqueId->internal, 0, sizeof uniqueId->internal);
    struct {
        char magic[16];
        uint64_t pid, n, ns;
        char host[64];
    } id{};
    memcpy(id.magic, k_id_magic, sizeof k_id_magic);
    id.pid = (uint64_t)getpid();
    id.n = ++counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    id.ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    gethostname(id.host, sizeof id.host - 1);
    static_assert(sizeof id <= NCCL_UNIQUE_ID_BYTES, "the id fits ncclUniqueId");
    memcpy(uniqueId->internal, &id, sizeof id);
    return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank,
                                    ncclConfig_t *config) {
    const char *fn = "ncclCommInitRank";
    ncclResult_t r = ncclSuccess;
    if (!comm) return fail(ncclInvalidArgument, "%s: comm is NULL", fn);
    *comm = nullptr;
    if (config && config->magic != 0xcafebeef)
        return fail(ncclInvalidArgument, "%s: config not initialized with NCCL_CONFIG_INITIALIZER",
                    fn);
    if (!mpi_ready(fn, &r)) return r;
    if (memcmp(commId.internal, k_id_magic, sizeof k_id_magic) != 0)
        return fail(ncclInvalidArgument, "%s: the unique id does not come from ncclGetUniqueId",
                    fn);
    /* Every world rank calls this at the same point (emu/README.md): the members of one id
     * find each other by the id's colour, in the order of their NCCL ranks. A rank with a bad
     * rank or count still joins the split, so that every member learns of the error below. */
    MPI_Comm mpi;
    int err = MPI_Comm_split(MPI_COMM_WORLD, id_colour(commId), rank, &mpi);
    if (err != MPI_SUCCESS) return mpi_fail(nullptr, fn, "MPI_Comm_split", err);
    int size;
    MPI_Comm_size(mpi, &size);
    /* Every member checks every member's id, rank and count: all agree on the outcome. */
    struct member {
        ncclUniqueId id;
        int nranks, rank;
    } mine{commId, nranks, rank};
    std::vector<member> all(size);
    err = MPI_Allgather(&mine, (int)sizeof mine, MPI_BYTE, all.data(), (int)sizeof mine, MPI_BYTE,
                        mpi);
    if (err != MPI_SUCCESS) {
        MPI_Comm_free(&mpi);
        return mpi_fail(nullptr, fn, "MPI_Allgather", err);
    }
    for (int i = 0; i < size && r == ncclSuccess; i++) {
        if (memcmp(&all[i].id, &commId, sizeof commId) != 0)
            r = fail(ncclInternalError, "%s: two unique ids hash to the same colour", fn);
        else if (all[i].nranks != size)
            r = fail(ncclInvalidArgument,
                     "%s: nranks %d on a member, but %d ranks called it with this id", fn,
                     all[i].nranks, size);
        else if (all[i].rank != i)
            r = fail(ncclInvalidArgument,
                     "%s: ranks of the members are not 0..%d, each once (rank %d given)", fn,
                     size - 1, all[i].rank);
    }
    if (r != ncclSuccess) {
        MPI_Comm_free(&mpi);
        return r;
    }
    return make_comm(mpi, comm);
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank) {
    return ncclCommInitRankConfig(comm, nranks, commId, rank, nullptr);
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                           ncclConfig_t *config) {
    const char *fn = "ncclCommSplit";
    if (ncclResult_t r = check_comm(fn, comm)) return r;
    if (!newcomm) return fail(ncclInvalidArgument, "%s: newcomm is NULL", fn);
    *newcomm = nullptr;
    if (config && config->magic != 0xcafebeef)
        return fail(ncclInvalidArgument, "%s: config not initialized with NCCL_CONFIG_INITIALIZER",
                    fn);
    if (color < 0 && color != NCCL_SPLIT_NOCOLOR)
        return fail(ncclInvalidArgument, "%s: color %d is negative (NCCL_SPLIT_NOCOLOR is %d)", fn,
                    color, NCCL_SPLIT_NOCOLOR);
    MPI_Comm mpi;
    int err =
        MPI_Comm_split(comm->mpi, color == NCCL_SPLIT_NOCOLOR ? MPI_UNDEFINED : color, key, &mpi);
    if (err != MPI_SUCCESS) return mpi_fail(comm, fn, "MPI_Comm_split", err);
    if (mpi == MPI_COMM_NULL) return ncclSuccess; /* NCCL_SPLIT_NOCOLOR: no new communicator */
    return make_comm(mpi, newcomm);
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
    /* Nothing is ever in flight after a call returns. */
    return check_comm("ncclCommFinalize", comm);
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    if (!comm) return ncclSuccess;
    MPI_Comm_free(&comm->mpi);
    delete comm;
    return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
    if (!comm) return ncclSuccess;
    /* MPI_Comm_free is collective by the standard, and the peers may be gone: the MPI
     * communicator is left behind (a process aborting a communicator is about to exit). */
    delete comm;
    return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int *count) {
    if (ncclResult_t r = check_comm("ncclCommCount", comm)) return r;
    if (!count) return fail(ncclInvalidArgument, "ncclCommCount: count is NULL");
    *count = comm->nranks;
    return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank) {
    if (ncclResult_t r = check_comm("ncclCommUserRank", comm)) return r;
    if (!rank) return fail(ncclInvalidArgument, "ncclCommUserRank: rank is NULL");
    *rank = comm->rank;
    return ncclSuccess;
}

ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device) {
    if (ncclResult_t r = check_comm("ncclCommCuDevice", comm)) return r;
    if (!device) return fail(ncclInvalidArgument, "ncclCommCuDevice: device is NULL");
    *device = comm->device;
    return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError) {
    if (ncclResult_t r = check_comm("ncclCommGetAsyncError", comm)) return r;
    if (!asyncError) return fail(ncclInvalidArgument, "ncclCommGetAsyncError: asyncError is NULL");
    *asyncError = comm->async_error;
    return ncclSuccess;
}

ncclResult_t ncclMemAlloc(void **ptr, size_t size) {
    if (!ptr) return fail(ncclInvalidArgument, "ncclMemAlloc: ptr is NULL");
    if (cudaMalloc(ptr, size) != cudaSuccess)
        return fail(ncclUnhandledCudaError, "ncclMemAlloc: cudaMalloc of %zu bytes failed", size);
    return ncclSuccess;
}

ncclResult_t ncclMemFree(void *ptr) {
    if (cudaFree(ptr) != cudaSuccess)
        return fail(ncclUnhandledCudaError, "ncclMemFree: cudaFree(%p) failed", ptr);
    return ncclSuccess;
}

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
    return enqueue(pending{
        k_send, fn, comm, (const char *)sendbuff, nullptr, count, datatype, ncclSum, peer, {}, {}});
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
    return enqueue(pending{
        k_recv, fn, comm, nullptr, (char *)recvbuff, count, datatype, ncclSum, peer, {}, {}});
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
    return enqueue(pending{k_allreduce,
                           fn,
                           comm,
                           (const char *)sendbuff,
                           (char *)recvbuff,
                           count,
                           datatype,
                           op,
                           0,
                           {},
                           {}});
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
    return enqueue(pending{k_reduce,
                           fn,
                           comm,
                           (const char *)sendbuff,
                           (char *)recvbuff,
                           count,
                           datatype,
                           op,
                           root,
                           {},
                           {}});
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
    return enqueue(pending{k_reduce_scatter,
                           fn,
                           comm,
                           (const char *)sendbuff,
                           (char *)recvbuff,
                           recvcount,
                           datatype,
                           op,
                           0,
                           {},
                           {}});
}

ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
    const char *fn = "ncclAllGather";
    const size_t bytes = sendcount * type_size(datatype);
    ncclResult_t r;
    if ((r = check_comm(fn, comm)) ||
        (r = check_op(fn, comm, datatype, stream, sendbuff, bytes, recvbuff, bytes * comm->nranks)))
        return reject(r);
    return enqueue(pending{k_allgather,
                           fn,
                           comm,
                           (const char *)sendbuff,
                           (char *)recvbuff,
                           sendcount,
                           datatype,
                           ncclSum,
                           0,
                           {},
                           {}});
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
    return enqueue(pending{k_broadcast,
                           fn,
                           comm,
                           (const char *)sendbuff,
                           (char *)recvbuff,
                           count,
                           datatype,
                           ncclSum,
                           root,
                           {},
                           {}});
}

ncclResult_t ncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                       cudaStream_t stream) {
    return ncclBroadcast(buff, buff, count, datatype, root, comm, stream);
}

} // extern "C"
