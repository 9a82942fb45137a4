/* core/backend.c - the public backend API (see backend.h); backends/registry.c creates them. */
#include "core/backend_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/profile.h"

void sl_backend_free(sl_backend *be) {
    if (!be) return;
    sl_profile_enable(be, false); /* its device marks belong to the context */
    if (be->iface.free_ctx) be->iface.free_ctx(be->ctx);
    free(be);
}

const char *sl_backend_name(const sl_backend *be) {
    return be->iface.name;
}
bool sl_backend_host_memory(const sl_backend *be) {
    return be->iface.host_memory;
}
void sl_backend_synchronize(sl_backend *be) {
    be->syncs++;
    if (be->iface.synchronize) be->iface.synchronize(be->ctx);
}
int sl_backend_threads(const sl_backend *be) {
    return be->iface.threads ? be->iface.threads(be->ctx) : 1;
}
long long sl_backend_host_reads(const sl_backend *be) {
    return (long long)be->host_reads;
}
long long sl_backend_syncs(const sl_backend *be) {
    return (long long)be->syncs;
}
void sl_backend_tensor_bytes(const sl_backend *be, long long *now, long long *peak) {
    if (now) *now = (long long)__atomic_load_n(&be->tensor_bytes, __ATOMIC_RELAXED);
    if (peak) *peak = (long long)__atomic_load_n(&be->tensor_bytes_peak, __ATOMIC_RELAXED);
}
bool sl_backend_device(const sl_backend *be, sl_device_info *out) {
    memset(out, 0, sizeof *out);
    out->ordinal = -1;
    if (!be || !be->iface.device) return false;
    be->iface.device(be->ctx, out);
    return true;
}
