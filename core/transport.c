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

int sl_transport_resolve(sl_transport want, const sl_backend *be, sl_transport *out, char *err,
                         size_t errlen) {
    const bool device = be && !sl_backend_host_memory(be);
    if (want == SL_TRANSPORT_MPI || (want == SL_TRANSPORT_AUTO && !device)) {
        *out = SL_TRANSPORT_MPI;
        return 0;
    }
#ifdef SLUICE_WITH_CUDA
    if (device && strcmp(sl_backend_name(be), "cuda") == 0) {
        *out = SL_TRANSPORT_NCCL;
        return 0;
    }
    snprintf(err, errlen, "the nccl transport needs backend cuda (the backend is %s)",
             be ? sl_backend_name(be) : "none");
#else
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
