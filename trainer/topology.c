/* trainer/topology.c - rank groups (see topology.h). */
#include "trainer/topology.h"

#include <stdio.h>
#include <string.h>

int sl_topology_init(sl_topology *t, sl_comm *world, int expert_parallel, int num_experts,
                     char *err, size_t errlen) {
    memset(t, 0, sizeof *t);
    const int size = sl_comm_size(world), rank = sl_comm_rank(world);
    const int ep = expert_parallel < 1 ? 1 : expert_parallel;
    if (size % ep != 0) {
        snprintf(err, errlen,
                 "parallel.expert_parallel = %d does not divide the number of ranks (%d)", ep,
                 size);
        return -1;
    }
    if (num_experts > 0 && num_experts % ep != 0) {
        snprintf(err, errlen, "parallel.expert_parallel = %d does not divide num_experts = %d", ep,
                 num_experts);
        return -1;
    }
    t->world = world;
    t->rank = rank;
    t->size = size;
    t->ep_size = ep;
    t->ep_rank = rank % ep;
    t->dp_rank = rank;
    t->dp_size = size;
    t->ep = sl_comm_split(world, rank / ep, rank);
    t->edp = sl_comm_split(world, rank % ep, rank);
    /* for error messages; the data-parallel group of the dense weights is the world */
    sl_comm_set_name(t->ep, "ep");
    sl_comm_set_name(t->edp, "edp");
    return 0;
}

void sl_topology_free(sl_topology *t) {
    sl_comm_free(t->ep);
    sl_comm_free(t->edp);
    memset(t, 0, sizeof *t);
}
