/*
 * emu/src/nccl_emu.cc - NCCL for the CPU test double, over MPI on host memory (emu/README.md,
 * section "NCCL"): errors and communicators. The groups and the operations (data movement and
 * reductions) are in nccl_emu_ops.cc.
 *
 * The declarations are the real header's (the toolkit's nccl.h), so every signature is NCCL's
 * own and the emulated build links these files instead of libnccl. Device memory is host memory
 * here, so a communicator is an MPI communicator and every operation is MPI on those bytes.
 * Rendezvous: ncclCommInitRank splits MPI_COMM_WORLD by a colour derived from the unique id,
 * so EVERY world rank must call it at the same point (ncclCommSplit is MPI_Comm_split of the
 * parent and has no such restriction beyond the parent's members).
 */
#include "nccl_emu.h"

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
#include <vector>

namespace sl_emu_nccl {

/* ---- errors: the last one, named, for ncclGetLastError ------------------------------------- */

namespace {
thread_local char t_last_error[512];
} // namespace

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

ncclResult_t check_comm(const char *fn, const ncclComm *comm) {
    if (!comm) return fail(ncclInvalidArgument, "%s: comm is NULL", fn);
    return ncclSuccess;
}

} // namespace sl_emu_nccl

using namespace sl_emu_nccl;

namespace {

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
        int bus;                /* the PCI bus of the member's current device */
        unsigned char uuid[16]; /* its UUID: two members on one device is an error, as in NCCL */
    } mine{commId, nranks, rank, -1, {0}};
    int dev = 0;
    cudaDeviceProp prop;
    if (cudaGetDevice(&dev) == cudaSuccess && cudaGetDeviceProperties(&prop, dev) == cudaSuccess) {
        mine.bus = prop.pciBusID;
        memcpy(mine.uuid, prop.uuid.bytes, sizeof mine.uuid);
    }
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
        for (int j = 0; j < i && r == ncclSuccess; j++)
            if (all[i].bus >= 0 && memcmp(all[i].uuid, all[j].uuid, sizeof all[i].uuid) == 0)
                r = fail(ncclInvalidUsage,
                         "Duplicate GPU detected : rank %d and rank %d both on CUDA device %x000",
                         j, i, all[i].bus);
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

} // extern "C"
