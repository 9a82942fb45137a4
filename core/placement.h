/*
 * core/placement.h - which device every rank of a job computes on.
 *
 * Each rank's backend chose its device itself (the CUDA backend: the launcher's local rank over
 * the devices the process sees, CUDA_VISIBLE_DEVICES applied by the runtime; core/backend.h,
 * sl_backend_device). sl_placement_gather collects every rank's choice on every rank, so that
 * all ranks decide alike on what depends on it - the transport: NCCL refuses two ranks of one
 * communicator on one device ("Duplicate GPU detected"), so `parallel.transport = auto` picks
 * MPI then and `nccl` is an error naming the ranks and the device (core/comm_nccl.h,
 * sl_transport_resolve) - and so that rank 0 can print each rank's device in the banner.
 * Devices are identified by their UUID (cudaDeviceProp::uuid), which no two physical devices
 * share, across hosts included; the PCI bus id and the host name are for the messages.
 */
#ifndef SL_PLACEMENT_H
#define SL_PLACEMENT_H

#include <stdbool.h>
#include <stddef.h>

#include "core/backend.h"
#include "core/comm.h"

/* One rank's placement. */
typedef struct {
    char host[64];      /* gethostname */
    char visible[64];   /* CUDA_VISIBLE_DEVICES as the rank saw it; "(unset)" when unset */
    bool on_device;     /* false: a host backend (cpu), dev is empty */
    sl_device_info dev; /* the device (core/backend.h) */
} sl_rank_place;

/* Every rank's placement, in world-rank order (size(world) entries; free() the array).
 * Collective over `world` (an MPI-transport communicator): every rank must call it. */
sl_rank_place *sl_placement_gather(sl_comm *world, const sl_backend *be);

/* Whether two ranks compute on one device: true with the lowest such pair (*a < *b); false when
 * every device rank has a device of its own (host ranks never share). */
bool sl_placement_shared(const sl_rank_place *p, int n, int *a, int *b);

/* "CUDA device 0 (NVIDIA H200, PCI 0000:3b:00.0) on host n1": rank r's device, for messages. */
void sl_placement_device_name(const sl_rank_place *p, int r, char *buf, size_t len);

/* The ranks on rank r's device, as "0, 1 and 3" (at most 16 named, then "and N more"). */
void sl_placement_sharers(const sl_rank_place *p, int n, int r, char *buf, size_t len);

/* This host's name (gethostname), or `unknown` where it cannot be read; always terminated. */
void sl_host_name(char *buf, size_t len, const char *unknown);

/* How many of the n ranks run on rank r's host (by host name, r included): the ranks whose
 * host memory r's node shares (sluice train's host memory check). */
int sl_placement_host_ranks(const sl_rank_place *p, int n, int r);

/* The banner lines: one per rank ("rank 1: CUDA device 1 (NVIDIA H200, PCI ...) on host n1,
 * chosen by OMPI_COMM_WORLD_LOCAL_RANK=1 mod 2 visible devices, CUDA_VISIBLE_DEVICES=0,1"),
 * at most `max_lines` (then "... N more ranks"), each ending in a newline. Empty when no rank
 * is on a device. */
void sl_placement_describe(const sl_rank_place *p, int n, int max_lines, char *buf, size_t len);

#endif
