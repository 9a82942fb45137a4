/*
 * core/comm_nccl.h - the NCCL transport of the communication interface (core/comm.h).
 *
 * Built when the CUDA backend is (SLUICE_WITH_CUDA; in the emulated build against the fake
 * NCCL in emu/). Tensor collectives on device memory go GPU to GPU through NCCL on a
 * communication stream of the backend's device, ordered with the backend's compute stream by
 * events; host operations (barrier, host reductions, the all-to-all of counts, byte
 * broadcasts) stay on MPI. docs/parallelism.md, "NCCL transport", has the design.
 */
#ifndef SL_COMM_NCCL_H
#define SL_COMM_NCCL_H

#include <stddef.h>

#include "core/backend.h"
#include "core/comm.h"
#include "core/placement.h"

/* The transports a run can ask for (config key parallel.transport). */
typedef enum { SL_TRANSPORT_AUTO = 0, SL_TRANSPORT_MPI, SL_TRANSPORT_NCCL } sl_transport;

/* Parses "auto" | "mpi" | "nccl"; -1 for anything else. */
int sl_transport_parse(const char *name, sl_transport *out);
/* What `want` means for backend `be` on the ranks whose devices `places` lists (n of them,
 * sl_placement_gather; NULL: one rank). auto = nccl for a device backend ("cuda") when every
 * rank has a device of its own; mpi for a host-memory backend, and when two ranks share a
 * device (NCCL refuses two ranks of one communicator on one device, and every group is split
 * from the world). `why` (may be NULL) gets one line for the banner saying how the transport
 * was chosen. Returns -1 with a message in err when nccl is asked for but unavailable: a build
 * without CUDA, a host-memory backend, or ranks sharing a device (the message names them and
 * the device). Every rank gets the same result from the same `places`. */
int sl_transport_resolve(sl_transport want, const sl_backend *be, const sl_rank_place *places,
                         int n, sl_transport *out, char *why, size_t whylen, char *err,
                         size_t errlen);
/* The world communicator of transport t (resolved: mpi or nccl): mpi_world itself for mpi,
 * a new NCCL world on be's device for nccl (sl_comm_nccl_create; the caller frees it), or NULL
 * with a message in err when that cannot be made (also in a build without CUDA). */
sl_comm *sl_transport_world(sl_transport t, sl_comm *mpi_world, sl_backend *be, char *err,
                            size_t errlen);

#ifdef SLUICE_WITH_CUDA
/* A world communicator of the NCCL transport over the ranks of `mpi_world` (an MPI-transport
 * communicator, which must outlive the result), on the device of the CUDA backend `be`:
 * rank 0 makes an ncclUniqueId, MPI broadcasts it, every rank joins. Collective over
 * mpi_world. Sub-groups come from sl_comm_split of the result and are NCCL communicators too.
 * Returns NULL with a message in err when `be` is not a CUDA backend. */
sl_comm *sl_comm_nccl_create(sl_comm *mpi_world, sl_backend *be, char *err, size_t errlen);
#endif

#endif
