/*
 * core/backend_cpu.c - the CPU backend: host memory, OpenMP threads, OpenBLAS.
 *
 * Memory is 64-byte aligned so that vectorized kernels and OpenBLAS see aligned rows. This
 * file is the memory half of the backend; the operation table is assembled above the
 * concerns (backends/cpu.c) and handed in, so core/ knows no model.
 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend_impl.h"
#include "core/log.h"

typedef struct {
    int threads;
} cpu_ctx;

static void *cpu_alloc(void *ctx, size_t bytes) {
    (void)ctx;
    size_t n = (bytes + 63) & ~(size_t)63;
    void *p = NULL;
    if (posix_memalign(&p, 64, n ? n : 64) != 0)
        sl_exit_error("out of host memory allocating a tensor of %zu bytes (%.2f GiB): the "
                      "model and its batch need more memory than this node gives the process "
                      "(the memory check before allocation was skipped with "
                      "SLUICE_HOST_MEMORY, or estimated too little: docs/memory.md, \"Host "
                      "memory\")",
                      bytes, (double)bytes / 1073741824.0);
    memset(p, 0, n);
    return p;
}

static void cpu_free(void *ctx, void *p) {
    (void)ctx;
    free(p);
}

static void cpu_memset0(void *ctx, void *p, size_t bytes) {
    (void)ctx;
    memset(p, 0, bytes);
}

static void cpu_memcpy(void *ctx, void *dst, const void *src, size_t bytes) {
    (void)ctx;
    if (bytes) memmove(dst, src, bytes);
}

static int cpu_threads(void *ctx) {
    return ((cpu_ctx *)ctx)->threads;
}

static void cpu_free_ctx(void *ctx) {
    free(ctx);
}

sl_backend *sl_backend_cpu_create(const sl_backend_params *params, const sl_ops_i *ops, char *err,
                                  size_t errlen) {
    (void)err;
    (void)errlen;
    cpu_ctx *ctx = sl_xcalloc(1, sizeof *ctx);
    ctx->threads = params->threads > 0 ? params->threads : omp_get_num_procs();
    /* One thread count for OpenMP and the OpenMP build of OpenBLAS. */
    omp_set_num_threads(ctx->threads);
    sl_backend *be = sl_xcalloc(1, sizeof *be);
    be->iface = (sl_backend_i){
        .name = "cpu",
        .host_memory = true,
        .alloc = cpu_alloc,
        .free = cpu_free,
        .memset0 = cpu_memset0,
        .to_host = cpu_memcpy,
        .from_host = cpu_memcpy,
        .copy = cpu_memcpy,
        .synchronize = NULL,
        .threads = cpu_threads,
        .free_ctx = cpu_free_ctx,
    };
    be->ops = ops;
    be->ctx = ctx;
    return be;
}
