/* core/backend.c - backend registry and the public backend API (see backend.h). */
#include "core/backend_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"

typedef sl_backend *(*backend_ctor)(const sl_backend_params *, char *, size_t);

static const struct {
    const char *name;
    backend_ctor create;
} k_backends[] = {
    {"cpu", sl_backend_cpu_create},
#ifdef SLUICE_WITH_CUDA
    {"cuda", sl_backend_cuda_create},
#endif
};

int sl_backend_count(void) {
    return (int)(sizeof k_backends / sizeof k_backends[0]);
}

const char *sl_backend_name_at(int i) {
    return i >= 0 && i < sl_backend_count() ? k_backends[i].name : NULL;
}

sl_backend *sl_backend_create(const char *name, const sl_backend_params *params, char *err,
                              size_t errlen) {
    sl_backend_params defaults = {.threads = 0, .device = -1};
    if (!params) params = &defaults;
    for (int i = 0; i < sl_backend_count(); i++)
        if (strcmp(name, k_backends[i].name) == 0) return k_backends[i].create(params, err, errlen);
    char names[256] = "";
    for (int i = 0; i < sl_backend_count(); i++) {
        strncat(names, i ? ", " : "", sizeof names - strlen(names) - 1);
        strncat(names, k_backends[i].name, sizeof names - strlen(names) - 1);
    }
    snprintf(err, errlen, "unknown backend '%s' (this build has: %s)", name, names);
    return NULL;
}

void sl_backend_free(sl_backend *be) {
    if (!be) return;
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
    if (be->iface.synchronize) be->iface.synchronize(be->ctx);
}
int sl_backend_threads(const sl_backend *be) {
    return be->iface.threads ? be->iface.threads(be->ctx) : 1;
}
