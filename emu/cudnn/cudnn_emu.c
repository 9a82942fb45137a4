/*
 * emu/cudnn/cudnn_emu.c - a test double of cuDNN 9's backend graph API for the emulated build
 * (emu/README.md, "cuDNN"): a shared library with cuDNN's entry points that checks every
 * descriptor a caller builds and, at execution, interprets the operation graph on the CPU,
 * operation by operation, on the emulated device memory (which is host memory).
 *
 * It exists so that CI runs sluice's cudnn attention kernel (attention/cudnn_sdpa.c,
 * attention/attn_cudnn.cu) end to end without a GPU: the graph's tensors, dimensions, strides,
 * unique ids, data types, the variant pack and the workspace layout all meet code that computes
 * with them, so a wrong stride, a mask the wrong way round or a statistic in the wrong order
 * gives wrong numbers that the tests see. It does not show whether real cuDNN accepts the graph
 * for its fused attention engine (only a GPU shows that) and it is nothing like cuDNN's speed:
 * it materializes every virtual tensor (S x S scores included).
 *
 * This file holds the descriptors and their attributes and the rest of the API;
 * cudnn_emu_finalize.c the checks at finalization; cudnn_emu_execute.c the execution (and the
 * semantics it gives each operation); cudnn_emu.h what they share.
 *
 * Environment: SLUICE_CUDNN_EMU_VERSION (default 91900) is what cudnnGetVersion returns, to test
 * the caller's version checks.
 */
#include <cudnn_graph.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cudnn_emu.h"

static char g_last_error[1024];

cudnnStatus_t fail(cudnnStatus_t st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_last_error, sizeof g_last_error, fmt, ap);
    va_end(ap);
    if (getenv("SLUICE_CUDNN_EMU_DEBUG")) fprintf(stderr, "cudnn_emu: %s\n", g_last_error);
    return st;
}

/* ---- descriptors -------------------------------------------------------------------------- */

static size_t type_size(int type) {
    switch (type) {
    case CUDNN_TYPE_HANDLE:
    case CUDNN_TYPE_VOID_PTR:
    case CUDNN_TYPE_BACKEND_DESCRIPTOR:
        return sizeof(void *);
    case CUDNN_TYPE_BOOLEAN:
        return sizeof(bool);
    case CUDNN_TYPE_INT64:
        return sizeof(int64_t);
    case CUDNN_TYPE_FLOAT:
        return sizeof(float);
    case CUDNN_TYPE_DOUBLE:
        return sizeof(double);
    default:
        return sizeof(int); /* enums */
    }
}

attr *find(desc *d, int name) {
    for (int i = 0; i < d->nattrs; i++)
        if (d->attrs[i].name == name) return &d->attrs[i];
    return NULL;
}

desc *desc_attr(desc *d, int name) {
    attr *a = find(d, name);
    return a && a->type == CUDNN_TYPE_BACKEND_DESCRIPTOR && a->n == 1 ? ((desc **)a->vals)[0]
                                                                      : NULL;
}

bool int_attr(desc *d, int name, int64_t *out) {
    attr *a = find(d, name);
    if (!a || a->n != 1) return false;
    if (a->type == CUDNN_TYPE_INT64)
        *out = *(int64_t *)a->vals;
    else if (a->type == CUDNN_TYPE_BOOLEAN)
        *out = *(bool *)a->vals;
    else if (a->type == CUDNN_TYPE_FLOAT || a->type == CUDNN_TYPE_DOUBLE ||
             a->type == CUDNN_TYPE_HANDLE || a->type == CUDNN_TYPE_VOID_PTR ||
             a->type == CUDNN_TYPE_BACKEND_DESCRIPTOR)
        return false;
    else
        *out = *(int *)a->vals;
    return true;
}

cudnnStatus_t cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t type,
                                           cudnnBackendDescriptor_t *out) {
    if (!out) return fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "CreateDescriptor: null output");
    desc *d = calloc(1, sizeof *d);
    if (!d) return CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
    d->type = type;
    *out = d;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t p) {
    desc *d = p;
    if (!d) return CUDNN_STATUS_SUCCESS;
    for (int i = 0; i < d->nattrs; i++) free(d->attrs[i].vals);
    free(d);
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendSetAttribute(cudnnBackendDescriptor_t p, cudnnBackendAttributeName_t name,
                                       cudnnBackendAttributeType_t type, int64_t n,
                                       const void *vals) {
    desc *d = p;
    if (!d || (!vals && n > 0))
        return fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "SetAttribute %d: null", name);
    if (d->finalized)
        return fail(CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED,
                    "SetAttribute %d on a finalized descriptor", name);
    if (n < 0 || n > 4096)
        return fail(CUDNN_STATUS_BAD_PARAM, "SetAttribute %d: count %lld", name, (long long)n);
    attr *a = find(d, name);
    if (!a) {
        if (d->nattrs == MAX_ATTRS) return fail(CUDNN_STATUS_BAD_PARAM, "too many attributes");
        a = &d->attrs[d->nattrs++];
    } else {
        free(a->vals);
    }
    const size_t bytes = type_size(type) * (size_t)n;
    a->name = name, a->type = type, a->n = n;
    a->vals = malloc(bytes ? bytes : 1);
    if (bytes) memcpy(a->vals, vals, bytes);
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t const p,
                                       cudnnBackendAttributeName_t name,
                                       cudnnBackendAttributeType_t type, int64_t requested,
                                       int64_t *count, void *vals) {
    desc *d = p;
    if (!d || !d->finalized)
        return fail(CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED, "GetAttribute %d: not finalized", name);
    if (d->type == CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR && name == CUDNN_ATTR_ENGINEHEUR_RESULTS &&
        type == CUDNN_TYPE_BACKEND_DESCRIPTOR) {
        if (count) *count = 1;
        if (requested >= 1 && vals) {
            desc *cfg = ((desc **)vals)[0];
            if (!cfg || cfg->type != CUDNN_BACKEND_ENGINECFG_DESCRIPTOR)
                return fail(CUDNN_STATUS_BAD_PARAM,
                            "heuristics results: not an engine configuration");
            cfg->graph = desc_attr(d, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH);
            cfg->finalized = true;
        }
        return CUDNN_STATUS_SUCCESS;
    }
    if (d->type == CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR &&
        name == CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE && type == CUDNN_TYPE_INT64 &&
        requested >= 1) {
        *(int64_t *)vals = WORKSPACE_BYTES;
        if (count) *count = 1;
        return CUDNN_STATUS_SUCCESS;
    }
    return fail(CUDNN_STATUS_NOT_SUPPORTED, "GetAttribute %d of descriptor type %d not emulated",
                name, (int)d->type);
}

/* ---- the rest of the API sluice uses -------------------------------------------------------- */

size_t cudnnGetVersion(void) {
    const char *v = getenv("SLUICE_CUDNN_EMU_VERSION");
    return v && v[0] ? (size_t)strtoul(v, NULL, 10) : 91900;
}

const char *cudnnGetErrorString(cudnnStatus_t st) {
    switch (st) {
    case CUDNN_STATUS_SUCCESS:
        return "CUDNN_STATUS_SUCCESS";
    case CUDNN_STATUS_BAD_PARAM:
        return "CUDNN_STATUS_BAD_PARAM";
    case CUDNN_STATUS_NOT_SUPPORTED:
        return "CUDNN_STATUS_NOT_SUPPORTED";
    default:
        return "CUDNN_STATUS (emulated)";
    }
}

void cudnnGetLastErrorString(char *message, size_t max_size) {
    if (message && max_size) {
        snprintf(message, max_size, "%s", g_last_error);
        g_last_error[0] = '\0';
    }
}

cudnnStatus_t cudnnCreate(cudnnHandle_t *handle) {
    static int token;
    *handle = (cudnnHandle_t)(void *)&token;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroy(cudnnHandle_t handle) {
    (void)handle;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t stream) {
    (void)stream; /* the emulator's streams complete synchronously */
    return handle ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
}
