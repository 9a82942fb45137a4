/*
 * core/comm.h - collective communication between ranks.
 *
 * One interface, several implementations: "mpi" (Open MPI over host buffers; the CPU
 * backend's tensors are host memory, device tensors are staged through the host) and, with
 * the CUDA backend, NCCL over device buffers. A communicator is a group of ranks (the world,
 * an expert-parallel group, an expert-data-parallel group); the model and the trainer only
 * ever call these functions, so a new transport slots in without touching them.
 *
 * Errors inside a collective are fatal for the whole job (a training step cannot continue
 * with one rank missing): the implementation aborts every rank with a message naming the
 * failing rank instead of hanging.
 */
#ifndef SL_COMM_H
#define SL_COMM_H

#include <stdbool.h>
#include <stdint.h>

#include "core/tensor.h"

typedef struct sl_comm sl_comm;
typedef struct sl_comm_request sl_comm_request;

/* Initializes MPI (a plain process becomes an MPI singleton) and returns the world
 * communicator. Installs the abort hook used by sl_fatal. Call once, first thing. */
sl_comm *sl_comm_init_world(int *argc, char ***argv);
/* Finalizes MPI after freeing the world communicator. */
void sl_comm_finalize(sl_comm *world);
/* Ends every rank of the job at once with exit status `code` (never returns). */
void sl_comm_abort(int code);

/* The transport of c: "mpi" or "nccl" (core/comm_nccl.h). */
const char *sl_comm_transport(const sl_comm *c);
int sl_comm_rank(const sl_comm *c);
int sl_comm_size(const sl_comm *c);
/* The rank of this process in the world communicator. */
int sl_comm_world_rank(const sl_comm *c);

/* Splits `c` into sub-communicators of the ranks with equal `color`, ordered by `key`. The
 * result is named "<c's name>/split<color>" until sl_comm_set_name names it. */
sl_comm *sl_comm_split(sl_comm *c, int color, int key);
/* Names c's group in the transports' error messages ("... failed on group NAME (rank r of n,
 * world rank w)"); the world communicator is "world". Local (every rank names its own handle),
 * at most 63 bytes kept. */
void sl_comm_set_name(sl_comm *c, const char *name);
const char *sl_comm_name(const sl_comm *c);
void sl_comm_free(sl_comm *c);

/* Returns once every rank of c has entered it: a barrier of the host threads (device work
 * queued before it is not waited for, on either transport). */
void sl_comm_barrier(sl_comm *c);

/* In-place sum of a float tensor over the ranks of c. */
void sl_comm_allreduce_sum(sl_comm *c, sl_tensor *t);
/* Starts the same without blocking; sl_comm_wait completes it (the tensor must not be
 * touched in between). */
sl_comm_request *sl_comm_iallreduce_sum(sl_comm *c, sl_tensor *t);
void sl_comm_wait(sl_comm_request *req);
/* Lets a started operation progress; returns 1 when it has completed (then it still must be
 * passed to sl_comm_wait, which returns at once). */
int sl_comm_test(sl_comm_request *req);

/* Starts an in-place reduce-scatter, the half of an all-reduce that ZeRO-1 needs: t holds
 * size consecutive segments, counts[r] elements for rank r in rank order (they add up to
 * t's element count). After sl_comm_wait this rank's segment holds the sum over the ranks
 * of c of their values in it; the rest of t is unspecified. f32 (bf16 too on the NCCL
 * transport, summed as ncclSum sums bf16). Moves half the bytes of sl_comm_iallreduce_sum.
 * Until the wait, t must not be touched (as for iallreduce_sum). */
sl_comm_request *sl_comm_ireduce_scatter_sum(sl_comm *c, sl_tensor *t, const int64_t *counts);

/* In-place all-gather of a float tensor split into size segments: rank r owns elements
 * [offsets[r], offsets[r] + counts[r]) and afterwards every rank holds every segment. */
void sl_comm_allgather_segments(sl_comm *c, sl_tensor *t, const int64_t *offsets,
                                const int64_t *counts);

/* Whether any rank of c failed (collective; every rank passes its own `failed`): the lowest
 * failing rank prints the error it held (sl_error_hold, core/log.h), every rank forgets its
 * own. So an error all ranks find alike is printed once, and one only some find is not lost. */
bool sl_comm_agree(sl_comm *c, bool failed);

/* Host-side reductions of small arrays (metrics, expert counts). */
void sl_comm_allreduce_sum_f64(sl_comm *c, double *buf, int n);
void sl_comm_allreduce_sum_i64(sl_comm *c, int64_t *buf, int n);
void sl_comm_allreduce_max_f64(sl_comm *c, double *buf, int n);

/* Each rank sends n int64 to every rank: send [size * n], recv [size * n]. */
void sl_comm_alltoall_i64(sl_comm *c, const int64_t *send, int64_t *recv, int n);

/* Exchanges rows of width W = last dim: rank r sends send_rows[p] consecutive rows to each
 * rank p (in rank order) and receives recv_rows[p] rows from each, packed in rank order. */
void sl_comm_alltoallv_rows(sl_comm *c, const sl_tensor *send, const int64_t *send_rows,
                            sl_tensor *recv, const int64_t *recv_rows);

/* The exchange of alltoallv_rows with the rows on one side laid out group-major: on that
 * side, peer p's rows for group g (grouped_rows[p * groups + g] of them) sit in block g,
 * peers in rank order inside a block, blocks in group order. scatter = true: src holds
 * flat_rows[p] consecutive rows for each peer p (in rank order), dst is the grouped side;
 * scatter = false: src is the grouped side and dst receives flat_rows[p] rows from each peer.
 * The transport places the rows directly (no separate permutation pass). */
void sl_comm_alltoallv_grouped(sl_comm *c, const sl_tensor *src, sl_tensor *dst,
                               const int64_t *flat_rows, const int64_t *grouped_rows, int groups,
                               bool scatter);
/* Starts the same exchange; sl_comm_wait joins it, and until then src must not be written
 * and dst neither read nor written. What runs meanwhile on the compute side may overlap
 * it: the NCCL transport queues it on the communication stream and returns at once (the
 * wait makes the compute stream wait for it; the host never blocks); the MPI transport,
 * whose exchange is a host operation, completes it before returning (the request is
 * already done), so the order of results is the same either way. */
sl_comm_request *sl_comm_ialltoallv_grouped(sl_comm *c, const sl_tensor *src, sl_tensor *dst,
                                            const int64_t *flat_rows, const int64_t *grouped_rows,
                                            int groups, bool scatter);

/* Broadcasts a tensor / host bytes from `root` to every rank of c. */
void sl_comm_broadcast(sl_comm *c, sl_tensor *t, int root);
void sl_comm_broadcast_bytes(sl_comm *c, void *buf, int64_t nbytes, int root);

#endif
