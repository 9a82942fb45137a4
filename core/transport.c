/* core/transport.c - choosing the communication transport (see comm_nccl.h). */
#include <stdio.h>
#include <string.h>

#include "core/comm_nccl.h"

int sl_transport_parse(const char *name, sl_transport *out) {
    if (strcmp(name, "auto") == 0)
        *out = SL_TRANSPORT_AUTO;
    else if (strcmp(name, "mpi") == 0)
        *out = SL_TRANSPORT_MPI;
    else if (strcmp(name, "nccl") == 0)
        *out = SL_TRANSPORT_NCCL;
    else
        return -1;
    return 0;
}

int sl_transport_resolve(sl_transport want, const sl_backend *be, const sl_rank_place *places,
                         int n, sl_transport *out, char *why, size_t whylen, char *err,
                         size_t errlen) {
    char ignore[8];
    if (!why) why = ignore, whylen = sizeof ignore;
    why[0] = '\0';
    const bool device = be && !sl_backend_host_memory(be);
    const char *asked = want == SL_TRANSPORT_AUTO  ? "auto"
                        : want == SL_TRANSPORT_MPI ? "mpi"
                                                   : "nccl";
    if (want == SL_TRANSPORT_MPI || (want == SL_TRANSPORT_AUTO && !device)) {
        *out = SL_TRANSPORT_MPI;
        snprintf(why, whylen, "%s -> mpi (%s)", asked,
                 want == SL_TRANSPORT_MPI ? "as configured" : "host-memory backend");
        return 0;
    }
#ifdef SLUICE_WITH_CUDA
    if (device && strcmp(sl_backend_name(be), "cuda") == 0) {
        int a = -1, b = -1;
        if (places && sl_placement_shared(places, n, &a, &b)) {
            char dev[200], ranks[160];
            sl_placement_device_name(places, a, dev, sizeof dev);
            sl_placement_sharers(places, n, a, ranks, sizeof ranks);
            if (want == SL_TRANSPORT_NCCL) {
                snprintf(err, errlen,
                         "nccl needs one GPU per rank, but ranks %s share %s (NCCL refuses two "
                         "ranks on one device); use \"auto\" or \"mpi\", which stage through "
                         "the host, or start one rank per GPU",
                         ranks, dev);
                return -1;
            }
            *out = SL_TRANSPORT_MPI;
            snprintf(why, whylen, "auto -> mpi: ranks %s share %s, and NCCL needs one GPU per rank",
                     ranks, dev);
            return 0;
        }
        *out = SL_TRANSPORT_NCCL;
        snprintf(why, whylen, "%s -> nccl (%s)", asked,
                 n > 1 ? "every rank on a GPU of its own" : "one rank");
        return 0;
    }
    snprintf(err, errlen, "the nccl transport needs backend cuda (the backend is %s)",
             be ? sl_backend_name(be) : "none");
#else
    (void)places, (void)n;
    snprintf(err, errlen, "the nccl transport needs a build with the CUDA backend (SLUICE_CUDA)");
#endif
    return -1;
}

sl_comm *sl_transport_world(sl_transport t, sl_comm *mpi_world, sl_backend *be, char *err,
                            size_t errlen) {
    if (t != SL_TRANSPORT_NCCL) return mpi_world;
#ifdef SLUICE_WITH_CUDA
    return sl_comm_nccl_create(mpi_world, be, err, errlen);
#else
    (void)be;
    snprintf(err, errlen, "the nccl transport needs a build with the CUDA backend (SLUICE_CUDA)");
    return NULL;
#endif
}
