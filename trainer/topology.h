/*
 * trainer/topology.h - how ranks are arranged (docs/parallelism.md).
 *
 * With W ranks and expert_parallel = EP (EP divides W and num_experts):
 *   expert-parallel group     ranks {g*EP, ..., g*EP + EP-1} for g = rank / EP; together they
 *                             hold all experts, rank r holding experts
 *                             [(r % EP) * E/EP, (r % EP + 1) * E/EP)
 *   expert-data-parallel group ranks with the same r % EP (they hold the same experts)
 *   data parallelism          every rank is a data-parallel replica of the dense parameters
 *                             and reads its own slice of the data (dp_rank = rank, dp_size = W)
 */
#ifndef SL_TOPOLOGY_H
#define SL_TOPOLOGY_H

#include <stddef.h>

#include "core/comm.h"

typedef struct {
    sl_comm *world;
    sl_comm *ep;  /* expert-parallel group */
    sl_comm *edp; /* expert-data-parallel group */
    int rank, size, ep_size, ep_rank, dp_rank, dp_size;
} sl_topology;

/* Builds the groups. Fails (message in err) when EP does not divide the world size or the
 * expert count. */
int sl_topology_init(sl_topology *t, sl_comm *world, int expert_parallel, int num_experts,
                     char *err, size_t errlen);
void sl_topology_free(sl_topology *t);

#endif
