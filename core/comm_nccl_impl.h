/*
 * core/comm_nccl_impl.h - what the NCCL transport's files share (core/comm_nccl.c: creation,
 * reductions, gathers, groups; core/comm_nccl_exchange.c: the expert exchange): the
 * communicator's context, the checks that stop the job naming the group, the ordering with the
 * compute stream, and requests. Internal to those two files.
 */
#ifndef SL_CORE_COMM_NCCL_IMPL_H
#define SL_CORE_COMM_NCCL_IMPL_H

#include <cuda_runtime_api.h>
/* nccl.h declares a few functions with () parameter lists; the emulated build includes the
 * toolkit's headers as ordinary (not system) headers, so the warning is silenced here. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop
#include <stdbool.h>
#include <stddef.h>

#include "core/comm_impl.h"

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

/* The context of a communicator's ctx pointer. */
nccl_ctx *ncx(void *ctx);
/* Whether t lives in host memory (then the group's MPI side moves it). */
int nc_on_host(const sl_tensor *t);
/* Stop the job naming the group, the operation and the call where r (NCCL) or e (CUDA) is an
 * error. */
void nc_check(const nccl_ctx *x, ncclResult_t r, const char *op, const char *what);
void nc_cuda_check(const sl_comm *c, cudaError_t e, const char *op, const char *what);
#define NK(x, call, op)  nc_check((x), (call), (op), #call)
#define CKC(c, call, op) nc_cuda_check((c), (call), (op), #call)
#define CK(x, call, op)  CKC((x)->self, call, op)
/* The communication stream waits for the compute stream's work so far (nc_enter), and the
 * compute stream for the communication stream's (nc_leave). */
void nc_enter(const nccl_ctx *x, const char *op);
void nc_leave(const nccl_ctx *x, const char *op);
/* A request completed by an event recorded on the communication stream after what was just
 * queued there. */
sl_comm_request *nc_stream_request(nccl_ctx *x, const char *op);

/* core/comm_nccl_exchange.c: the interface's all-to-alls */
void nccl_alltoallv_rows(void *ctx, const sl_tensor *send, const int64_t *send_rows,
                         sl_tensor *recv, const int64_t *recv_rows);
void nccl_alltoallv_grouped(void *ctx, const sl_tensor *src, sl_tensor *dst,
                            const int64_t *flat_rows, const int64_t *grouped_rows, int groups,
                            bool scatter);
sl_comm_request *nccl_ialltoallv_grouped(void *ctx, const sl_tensor *src, sl_tensor *dst,
                                         const int64_t *flat_rows, const int64_t *grouped_rows,
                                         int groups, bool scatter);

#endif
