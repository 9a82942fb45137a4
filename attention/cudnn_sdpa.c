/*
 * attention/cudnn_sdpa.c - cuDNN's fused SDPA through its backend graph API, loaded with dlopen
 * (interface: cudnn_sdpa.h; the API subset: cudnn_api.h).
 *
 * cuDNN 9 has no single "attention" call for causal training attention: a caller describes the
 * computation as an operation graph of matmuls, pointwise operations and reductions, and cuDNN's
 * heuristics hand it to the fused flash-attention engine when the graph has the shape that engine
 * recognizes. The shape is the one cudnn-frontend's composite SDPA node emits (read in
 * NVIDIA/cudnn-frontend, include/cudnn_frontend/node/scaled_dot_product_flash_attention.h,
 * softmax.h, diagonal_band_mask.h, and the tensor and operation lowering in node/pointwise.h,
 * matmul.h, reduction.h, reshape.h; commit 3929da2 of 2026-05-08), rebuilt here operation by
 * operation, with its data types, dimensions and strides:
 *
 * Forward (tensors [b, h, s, x]; "virt" = virtual, fp32 unless noted):
 *   S  = Q K^T                  matmul; K^T is K's memory seen as [b, kv, d, s]; GQA: head h
 *                               pairs with kv head h / (H / KV), cuDNN broadcasts the head axis
 *   S  = S * scale              pointwise MUL by a by-value scalar
 *   r, c = row and column index GEN_INDEX on axes 2 and 3 (int32)
 *   m  = r >= c                 CMP_GE (boolean)
 *   S  = m ? S : -inf           BINARY_SELECT (the causal mask)
 *   M  = max over keys          reduction MAX to [b, h, s, 1]
 *   E  = exp(S - M)             SUB, EXP
 *   Z  = sum over keys of E     reduction ADD
 *   stats = M + log Z           LOG, ADD: the log-sum-exp, written out (fp32 [b, h, s, 1])
 *   P  = E / Z                  DIV, P virtual bf16 (the second matmul's operand type)
 *   O  = P V                    matmul
 * Backward (dO, O, stats given; cuDNN >= 9 without the dP workspace, i.e. the default
 * non-deterministic engine):
 *   sum = rowsum(dO * O) * 1    MUL, reduction ADD, MUL by 1: written to the workspace (fp32)
 *   S  = (Q K^T) * scale - stats, masked as above, P = exp(S)
 *   dV = P^T dO                 reshape P to P^T (a view: strides swapped, bf16), matmul; with
 *                               GQA into a virtual [b, h, s, d] (bf16), then reduction ADD over
 *                               the heads of a group into dV [b, kv, s, d]
 *   dP = dO V^T; dS = (dP - sum) * P * scale
 *   dK = dS^T Q                 as dV (reshape, matmul, GQA reduction)
 *   dQ = dS K                   K^T reshaped back to K (a virtual view), matmul into an fp32
 *                               accumulator in the workspace, then IDENTITY into dQ (bf16)
 *
 * Everything here is written from cuDNN's headers and the frontend's sources: no GPU ran it on
 * the machine where it was written (docs/attention.md, "The cudnn kernel", lists what the first
 * GPU run must confirm).
 */
#include "attention/cudnn_sdpa.h"

#include <dlfcn.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention/cudnn_sdpa_impl.h"

/* Where cuDNN's own header is at hand (the toolkit's include directory), every value copied
 * into cudnn_api.h is checked against it at compile time. */
#if !defined(SLUICE_CUDA_EMULATED) && defined(__has_include)
#if __has_include(<cudnn_graph.h>)
#include <cudnn_graph.h>
#define SL_SAME(x) _Static_assert((long)SL_##x == (long)x, #x " differs from cudnn_graph.h")
SL_SAME(CUDNN_STATUS_SUCCESS);
SL_SAME(CUDNN_DATA_FLOAT);
SL_SAME(CUDNN_DATA_INT32);
SL_SAME(CUDNN_DATA_BFLOAT16);
SL_SAME(CUDNN_DATA_BOOLEAN);
SL_SAME(CUDNN_POINTWISE_ADD);
SL_SAME(CUDNN_POINTWISE_MUL);
SL_SAME(CUDNN_POINTWISE_DIV);
SL_SAME(CUDNN_POINTWISE_SUB);
SL_SAME(CUDNN_POINTWISE_EXP);
SL_SAME(CUDNN_POINTWISE_LOG);
SL_SAME(CUDNN_POINTWISE_IDENTITY);
SL_SAME(CUDNN_POINTWISE_CMP_GE);
SL_SAME(CUDNN_POINTWISE_GEN_INDEX);
SL_SAME(CUDNN_POINTWISE_BINARY_SELECT);
SL_SAME(CUDNN_REDUCE_TENSOR_ADD);
SL_SAME(CUDNN_REDUCE_TENSOR_MAX);
SL_SAME(CUDNN_HEUR_MODE_INSTANT);
SL_SAME(CUDNN_HEUR_MODE_FALLBACK);
SL_SAME(CUDNN_HEUR_MODE_A);
SL_SAME(CUDNN_TYPE_HANDLE);
SL_SAME(CUDNN_TYPE_DATA_TYPE);
SL_SAME(CUDNN_TYPE_BOOLEAN);
SL_SAME(CUDNN_TYPE_INT64);
SL_SAME(CUDNN_TYPE_FLOAT);
SL_SAME(CUDNN_TYPE_VOID_PTR);
SL_SAME(CUDNN_TYPE_HEUR_MODE);
SL_SAME(CUDNN_TYPE_POINTWISE_MODE);
SL_SAME(CUDNN_TYPE_BACKEND_DESCRIPTOR);
SL_SAME(CUDNN_TYPE_REDUCTION_OPERATOR_TYPE);
SL_SAME(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
SL_SAME(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
SL_SAME(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
SL_SAME(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
SL_SAME(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
SL_SAME(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
SL_SAME(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
SL_SAME(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
SL_SAME(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
SL_SAME(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
SL_SAME(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
SL_SAME(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
SL_SAME(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
SL_SAME(CUDNN_ATTR_POINTWISE_MODE);
SL_SAME(CUDNN_ATTR_POINTWISE_MATH_PREC);
SL_SAME(CUDNN_ATTR_POINTWISE_AXIS);
SL_SAME(CUDNN_ATTR_ENGINEHEUR_MODE);
SL_SAME(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH);
SL_SAME(CUDNN_ATTR_ENGINEHEUR_RESULTS);
SL_SAME(CUDNN_ATTR_EXECUTION_PLAN_HANDLE);
SL_SAME(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG);
SL_SAME(CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE);
SL_SAME(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR);
SL_SAME(CUDNN_ATTR_OPERATION_POINTWISE_XDESC);
SL_SAME(CUDNN_ATTR_OPERATION_POINTWISE_BDESC);
SL_SAME(CUDNN_ATTR_OPERATION_POINTWISE_YDESC);
SL_SAME(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1);
SL_SAME(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2);
SL_SAME(CUDNN_ATTR_OPERATION_POINTWISE_TDESC);
SL_SAME(CUDNN_ATTR_OPERATIONGRAPH_HANDLE);
SL_SAME(CUDNN_ATTR_OPERATIONGRAPH_OPS);
SL_SAME(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT);
SL_SAME(CUDNN_ATTR_TENSOR_DATA_TYPE);
SL_SAME(CUDNN_ATTR_TENSOR_DIMENSIONS);
SL_SAME(CUDNN_ATTR_TENSOR_STRIDES);
SL_SAME(CUDNN_ATTR_TENSOR_UNIQUE_ID);
SL_SAME(CUDNN_ATTR_TENSOR_IS_VIRTUAL);
SL_SAME(CUDNN_ATTR_TENSOR_IS_BY_VALUE);
SL_SAME(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS);
SL_SAME(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS);
SL_SAME(CUDNN_ATTR_VARIANT_PACK_WORKSPACE);
SL_SAME(CUDNN_ATTR_MATMUL_COMP_TYPE);
SL_SAME(CUDNN_ATTR_OPERATION_MATMUL_ADESC);
SL_SAME(CUDNN_ATTR_OPERATION_MATMUL_BDESC);
SL_SAME(CUDNN_ATTR_OPERATION_MATMUL_CDESC);
SL_SAME(CUDNN_ATTR_OPERATION_MATMUL_DESC);
SL_SAME(CUDNN_ATTR_REDUCTION_OPERATOR);
SL_SAME(CUDNN_ATTR_REDUCTION_COMP_TYPE);
SL_SAME(CUDNN_ATTR_OPERATION_REDUCTION_XDESC);
SL_SAME(CUDNN_ATTR_OPERATION_REDUCTION_YDESC);
SL_SAME(CUDNN_ATTR_OPERATION_REDUCTION_DESC);
SL_SAME(CUDNN_ATTR_OPERATION_RESHAPE_XDESC);
SL_SAME(CUDNN_ATTR_OPERATION_RESHAPE_YDESC);
#undef SL_SAME
#endif
#endif

/* ---- errors ------------------------------------------------------------------------------ */

int sl_cudnn_fail(const sl_cudnn_api *api, int status, char *err, size_t errlen, const char *fmt,
                  ...) {
    char what[256], last[512] = "";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (api->GetLastErrorString) api->GetLastErrorString(last, sizeof last);
    const char *name = api->GetErrorString ? api->GetErrorString(status) : NULL;
    return sl_fail(err, errlen, "%s: %s (%d)%s%s", what, name ? name : "cuDNN error", status,
                   last[0] ? ": " : "", last);
}
/* ---- loading ----------------------------------------------------------------------------- */

static void *sym(sl_cudnn *c, const char *name, bool required, char *err, size_t errlen) {
    void *p = dlsym(c->lib, name);
    if (!p && required) sl_fail(err, errlen, "%s has no %s: not a cuDNN 9 library", c->path, name);
    return p;
}

static void fmt_version(long v, char *buf, size_t len) {
    snprintf(buf, len, "%ld.%ld.%ld", v / 10000, v / 100 % 100, v % 100);
}

sl_cudnn *sl_cudnn_open(char *err, size_t errlen) {
    const char *env = getenv("SLUICE_CUDNN_LIBRARY");
    const char *name = env && env[0] ? env : "libcudnn.so.9";
#ifdef SLUICE_CUDA_EMULATED
    if (!(env && env[0])) {
        sl_fail(err, errlen,
                "cuDNN is not available in the emulated build (the CPU SIMT test double runs "
                "sluice's kernels only; set SLUICE_CUDNN_LIBRARY to load a library anyway)");
        return NULL;
    }
#endif
    sl_cudnn *c = sl_xcalloc(1, sizeof *c);
    snprintf(c->path, sizeof c->path, "%s", name);
    c->lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!c->lib) {
        const char *why = dlerror();
        sl_fail(err, errlen,
                "cannot load %s (%s); cuDNN 9 comes with the NVIDIA cuDNN package or a PyTorch "
                "installation (nvidia/cudnn/lib: put it on LD_LIBRARY_PATH, or name the library in "
                "SLUICE_CUDNN_LIBRARY)",
                name, why ? why : "dlopen failed");
        free(c);
        return NULL;
    }
    sl_cudnn_api *a = &c->api;
    bool ok = true;
#define LOAD(field, symbol, required)                                                              \
    do {                                                                                           \
        void *p_ = sym(c, symbol, required, err, errlen);                                          \
        ok = ok && (p_ != NULL || !(required));                                                    \
        memcpy(&a->field, &p_, sizeof p_); /* object pointer to function pointer, as dlsym does */ \
    } while (0)
    LOAD(GetVersion, "cudnnGetVersion", true);
    LOAD(GetErrorString, "cudnnGetErrorString", true);
    LOAD(GetLastErrorString, "cudnnGetLastErrorString", false);
    LOAD(Create, "cudnnCreate", true);
    LOAD(Destroy, "cudnnDestroy", true);
    LOAD(SetStream, "cudnnSetStream", true);
    LOAD(BackendCreateDescriptor, "cudnnBackendCreateDescriptor", true);
    LOAD(BackendDestroyDescriptor, "cudnnBackendDestroyDescriptor", true);
    LOAD(BackendFinalize, "cudnnBackendFinalize", true);
    LOAD(BackendSetAttribute, "cudnnBackendSetAttribute", true);
    LOAD(BackendGetAttribute, "cudnnBackendGetAttribute", true);
    LOAD(BackendExecute, "cudnnBackendExecute", true);
#undef LOAD
    if (!ok) {
        dlclose(c->lib);
        free(c);
        return NULL;
    }
    c->version = (long)a->GetVersion();
    char v[32];
    fmt_version(c->version, v, sizeof v);
    /* 9.6.0 zeroes the backward's dQ accumulator itself (the frontend zeroes it before);
     * 9.10.0 and 9.10.1 have known bugs in the bf16 backward (the frontend refuses them). */
    const char *old = c->version < 90000    ? "it is not cuDNN 9"
                      : c->version < 90600  ? "this path needs 9.6.0 or later"
                      : c->version == 91000 ? "9.10.0 has known bugs in the SDPA backward"
                      : c->version == 91001 ? "9.10.1 has known bugs in the SDPA backward"
                                            : NULL;
    if (old) {
        sl_fail(err, errlen, "%s is cuDNN %s: %s", name, v, old);
        dlclose(c->lib);
        free(c);
        return NULL;
    }
    const int st = a->Create(&c->handle);
    if (st != SL_CUDNN_STATUS_SUCCESS) {
        sl_cudnn_fail(a, st, err, errlen, "cudnnCreate (cuDNN %s from %s)", v, name);
        dlclose(c->lib);
        free(c);
        return NULL;
    }
    return c;
}

static void plan_release(sl_cudnn *c, plan_entry *p) {
    for (int i = p->ndescs - 1; i >= 0; i--)
        if (p->descs[i]) c->api.BackendDestroyDescriptor(p->descs[i]);
    memset(p, 0, sizeof *p);
}

void sl_cudnn_close(sl_cudnn *c) {
    if (!c) return;
    for (int i = 0; i < MAX_PLANS; i++)
        if (c->plans[i].used) plan_release(c, &c->plans[i]);
    if (c->handle) c->api.Destroy(c->handle);
    dlclose(c->lib);
    free(c);
}

long sl_cudnn_version(const sl_cudnn *c) {
    return c->version;
}

const char *sl_cudnn_library(const sl_cudnn *c) {
    return c->path;
}

const char *sl_cudnn_sdpa_unsupported(const sl_cudnn *c, const sl_cudnn_shape *s, char *buf,
                                      size_t len) {
    char v[32];
    fmt_version(c->version, v, sizeof v);
    const int dmax = s->compute_capability / 10 == 9 ? 256 : 128;
    if (s->compute_capability < 80)
        snprintf(buf, len,
                 "cuDNN's fused attention needs compute capability 8.0 or later, this "
                 "device has %d.%d",
                 s->compute_capability / 10, s->compute_capability % 10);
    else if (s->head_dim % 8 != 0 || s->head_dim > dmax)
        snprintf(buf, len,
                 "cuDNN's fused attention needs a head dim that is a multiple of 8 and at most %d "
                 "on this device, got %d",
                 dmax, s->head_dim);
    else if (s->kv_heads < 1 || s->heads % s->kv_heads != 0)
        snprintf(buf, len, "%d query heads are not a multiple of %d kv heads", s->heads,
                 s->kv_heads);
    else if (s->seq < 2)
        snprintf(buf, len, "cuDNN's SDPA backward does not take one-token sequences (seq 1)");
    else if (c->version <= 91500 && s->seq % 128 != 0)
        /* the frontend adds a padding mask for these versions (a workaround for their
         * backward), which this path does not build */
        snprintf(buf, len,
                 "cuDNN %s needs the sequence length to be a multiple of 128 here (9.16 and later "
                 "do not), got %d",
                 v, s->seq);
    else
        return NULL;
    return buf;
}

static bool same_shape(const sl_cudnn_shape *a, const sl_cudnn_shape *b) {
    return a->batch == b->batch && a->seq == b->seq && a->heads == b->heads &&
           a->kv_heads == b->kv_heads && a->head_dim == b->head_dim &&
           a->compute_capability == b->compute_capability;
}

static size_t align_up(size_t x) {
    return (x + WS_ALIGN - 1) / WS_ALIGN * WS_ALIGN;
}

/* The cached plan of (dir, shape), built when missing (evicting the least recently used). */
static plan_entry *get_plan(sl_cudnn *c, sl_cudnn_dir dir, const sl_cudnn_shape *s, char *err,
                            size_t errlen) {
    plan_entry *slot = NULL;
    for (int i = 0; i < MAX_PLANS; i++) {
        plan_entry *p = &c->plans[i];
        if (p->used && p->dir == dir && same_shape(&p->shape, s)) {
            p->last_use = ++c->clock;
            return p;
        }
        if (!slot || !p->used || (slot->used && p->last_use < slot->last_use)) slot = p;
    }
    char why[256];
    if (sl_cudnn_sdpa_unsupported(c, s, why, sizeof why)) {
        sl_fail(err, errlen, "%s", why);
        return NULL;
    }
    if (slot->used) plan_release(c, slot);
    slot->used = true, slot->dir = dir, slot->shape = *s;
    int failed = sl_cudnn_graph_build(c, slot, dir, s, err, errlen);
    int64_t ws = 0;
    if (!failed) {
        int64_t n = 0;
        const int st =
            c->api.BackendGetAttribute(slot->plan, SL_CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                       SL_CUDNN_TYPE_INT64, 1, &n, &ws);
        if (st != SL_CUDNN_STATUS_SUCCESS)
            failed = sl_cudnn_fail(&c->api, st, err, errlen,
                                   "cudnnBackendGetAttribute (plan workspace size)");
    }
    if (failed) {
        char prefix[160];
        snprintf(prefix, sizeof prefix, "cuDNN SDPA %s, B %d S %d H %d KV %d D %d: ",
                 dir == SL_CUDNN_SDPA_FWD ? "forward" : "backward", s->batch, s->seq, s->heads,
                 s->kv_heads, s->head_dim);
        const size_t pl = strlen(prefix), el = strlen(err);
        if (pl + el + 1 <= errlen) {
            memmove(err + pl, err, el + 1);
            memcpy(err, prefix, pl);
        }
        plan_release(c, slot);
        return NULL;
    }
    slot->cudnn_ws = align_up((size_t)(ws > 0 ? ws : 0));
    slot->total_ws = slot->cudnn_ws;
    if (dir == SL_CUDNN_SDPA_BWD) {
        const size_t rows = (size_t)s->batch * (size_t)s->heads * (size_t)s->seq;
        slot->sum_off = slot->total_ws;
        slot->total_ws += align_up(sizeof(float) * rows);
        slot->accum_off = slot->total_ws;
        slot->total_ws += align_up(sizeof(float) * rows * (size_t)s->head_dim);
    }
    slot->last_use = ++c->clock;
    return slot;
}

int sl_cudnn_sdpa_workspace(sl_cudnn *c, sl_cudnn_dir dir, const sl_cudnn_shape *s, size_t *bytes,
                            char *err, size_t errlen) {
    const plan_entry *p = get_plan(c, dir, s, err, errlen);
    if (!p) return -1;
    *bytes = p->total_ws;
    return 0;
}

/* ---- execution ----------------------------------------------------------------------------- */

int sl_cudnn_sdpa_run(sl_cudnn *c, const sl_cudnn_sdpa_call *call, char *err, size_t errlen) {
    plan_entry *p = get_plan(c, call->dir, &call->shape, err, errlen);
    if (!p) return -1;
    const sl_cudnn_api *a = &c->api;
    int st = a->SetStream(c->handle, call->stream);
    if (st != SL_CUDNN_STATUS_SUCCESS) return sl_cudnn_fail(a, st, err, errlen, "cudnnSetStream");
    /* by-value scalars: host values, read when the call is queued */
    float scale = call->scale, one = 1.0f;
    float neg_inf = c->version >= 91000 ? -INFINITY : -3.402823466e38f; /* older: lowest float */
    char *ws = call->workspace;
    int64_t uids[16];
    void *ptrs[16];
    int n = 0;
#define BIND(uid, ptr) uids[n] = (uid), ptrs[n] = (void *)(ptr), n++
    BIND(UID_Q, call->q);
    BIND(UID_K, call->k);
    BIND(UID_V, call->v);
    BIND(UID_O, call->o);
    BIND(UID_STATS, call->stats);
    BIND(UID_SCALE, &scale);
    BIND(UID_NEG_INF, &neg_inf);
    if (call->dir == SL_CUDNN_SDPA_BWD) {
        BIND(UID_DO, call->dout);
        BIND(UID_DQ, call->dq);
        BIND(UID_DK, call->dk);
        BIND(UID_DV, call->dv);
        BIND(UID_ONE, &one);
        BIND(UID_SOFTMAX_SUM, ws + p->sum_off);
        BIND(UID_DQ_ACCUM, ws + p->accum_off);
    }
#undef BIND
    void *vp = NULL, *wsp = ws;
    st = a->BackendCreateDescriptor(SL_CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp);
    if (st == SL_CUDNN_STATUS_SUCCESS)
        st = a->BackendSetAttribute(vp, SL_CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, SL_CUDNN_TYPE_INT64,
                                    n, uids);
    if (st == SL_CUDNN_STATUS_SUCCESS)
        st = a->BackendSetAttribute(vp, SL_CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
                                    SL_CUDNN_TYPE_VOID_PTR, n, ptrs);
    if (st == SL_CUDNN_STATUS_SUCCESS)
        st = a->BackendSetAttribute(vp, SL_CUDNN_ATTR_VARIANT_PACK_WORKSPACE,
                                    SL_CUDNN_TYPE_VOID_PTR, 1, &wsp);
    if (st == SL_CUDNN_STATUS_SUCCESS) st = a->BackendFinalize(vp);
    if (st != SL_CUDNN_STATUS_SUCCESS) {
        if (vp) a->BackendDestroyDescriptor(vp);
        return sl_cudnn_fail(a, st, err, errlen, "cuDNN SDPA variant pack");
    }
    st = a->BackendExecute(c->handle, p->plan, vp);
    a->BackendDestroyDescriptor(vp);
    if (st != SL_CUDNN_STATUS_SUCCESS)
        return sl_cudnn_fail(a, st, err, errlen, "cudnnBackendExecute (SDPA %s)",
                             call->dir == SL_CUDNN_SDPA_FWD ? "forward" : "backward");
    return 0;
}
