/* backends/registry.c - backends by name: each memory half paired with its op table. */
#include <stdio.h>
#include <string.h>

#include "backends/backends.h"
#include "core/backend_impl.h"
#ifdef SLUICE_WITH_CUDA
#include "attention/attn_kernels.h"
#endif

typedef sl_backend *(*backend_ctor)(const sl_backend_params *, const sl_ops_i *, char *, size_t);

static const struct {
    const char *name;
    backend_ctor create;
    const sl_ops_i *(*ops)(void);
} k_backends[] = {
    {"cpu", sl_backend_cpu_create, sl_backends_cpu_ops},
#ifdef SLUICE_WITH_CUDA
    {"cuda", sl_backend_cuda_create, sl_backends_cuda_ops},
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
        if (strcmp(name, k_backends[i].name) == 0)
            return k_backends[i].create(params, k_backends[i].ops(), err, errlen);
    char names[256] = "";
    for (int i = 0; i < sl_backend_count(); i++) {
        strncat(names, i ? ", " : "", sizeof names - strlen(names) - 1);
        strncat(names, k_backends[i].name, sizeof names - strlen(names) - 1);
    }
    snprintf(err, errlen, "unknown backend '%s' (this build has: %s)", name, names);
    return NULL;
}

int sl_backend_set_attn_kernel(sl_backend *be, const char *choice, char *err, size_t errlen) {
#ifdef SLUICE_WITH_CUDA
    if (strcmp(be->iface.name, "cuda") == 0)
        return sl_cuda_attn_configure(be->ctx, choice, err, errlen);
#endif
    if (!choice || !choice[0] || strcmp(choice, "auto") == 0 || strcmp(choice, "sluice") == 0)
        return 0;
    snprintf(err, errlen,
             "the %s backend has one attention kernel, its own: \"%s\" needs backend.name = "
             "\"cuda\" (\"auto\" and \"sluice\" work everywhere)",
             be->iface.name, choice);
    return -1;
}

const char *sl_backend_attn_kernel_ran(const sl_backend *be) {
#ifdef SLUICE_WITH_CUDA
    if (strcmp(be->iface.name, "cuda") == 0) return sl_cuda_attn_last_kernel(be->ctx);
#endif
    return be->iface.name; /* the CPU's one kernel */
}
