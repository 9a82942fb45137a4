/*
 * emu/src/nccl_emu.h - what the two halves of the fake NCCL share (emu/README.md, "NCCL"):
 * nccl_emu.cc (errors, communicators) and nccl_emu_ops.cc (groups, data movement, reductions).
 */
#ifndef SL_EMU_NCCL_EMU_H
#define SL_EMU_NCCL_EMU_H

#include <mpi.h>
#include <nccl.h>

/* A communicator of the fake: an MPI communicator (its errors returned, not fatal). */
struct ncclComm {
    MPI_Comm mpi;
    int rank, nranks;
    int device;
    ncclResult_t async_error; /* ncclRemoteError after an MPI failure (or an injected one) */
};

namespace sl_emu_nccl {

/* Records a failed call's reason for ncclGetLastError (and prints it when NCCL_DEBUG asks for
 * warnings, as real NCCL does) and returns its code. */
ncclResult_t fail(ncclResult_t r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* An MPI call that failed: ncclRemoteError, and the communicator's asynchronous error. */
ncclResult_t mpi_fail(ncclComm *comm, const char *fn, const char *mpi_fn, int err);
/* ncclInvalidArgument for a null communicator. */
ncclResult_t check_comm(const char *fn, const ncclComm *comm);

} // namespace sl_emu_nccl

#endif
