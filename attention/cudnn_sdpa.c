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

#include "attention/cudnn_api.h"
#include "core/log.h"

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

enum { MAX_PLANS = 8, MAX_DESCS = 192, MAX_OPS = 40, MAX_CONFIGS = 16, WS_ALIGN = 256 };

/* Unique ids of the tensors a call binds (the variant pack); virtual tensors count from
 * VIRTUAL_UID. */
enum {
    UID_Q = 1,
    UID_K, /* K^T: K's memory as [b, kv, d, s] */
    UID_V, /* forward: V [b, kv, s, d]; backward: V^T [b, kv, d, s] */
    UID_O,
    UID_STATS,
    UID_SCALE,   /* by value */
    UID_NEG_INF, /* by value: the masked logit */
    UID_DO,
    UID_DQ,
    UID_DK,
    UID_DV,
    UID_ONE,         /* by value: 1 */
    UID_SOFTMAX_SUM, /* workspace: rowsum(dO * O), fp32 [b, h, s, 1] */
    UID_DQ_ACCUM,    /* workspace: fp32 [b, h, s, d] */
    VIRTUAL_UID = 1000,
};

typedef struct {
    bool used;
    sl_cudnn_dir dir;
    sl_cudnn_shape shape;
    void *plan;
    void *descs[MAX_DESCS]; /* everything the plan was built from, destroyed with it */
    int ndescs;
    size_t cudnn_ws, sum_off, accum_off, total_ws; /* workspace layout */
    unsigned long long last_use;
} plan_entry;

struct sl_cudnn {
    void *lib;
    char path[512];
    sl_cudnn_api api;
    long version;
    void *handle;
    plan_entry plans[MAX_PLANS];
    unsigned long long clock;
};

/* ---- errors ------------------------------------------------------------------------------ */

/* "what: <cuDNN status name> (<code>)[: <cuDNN's last error message>]" into err; returns -1. */
static int cudnn_fail(const sl_cudnn_api *api, int status, char *err, size_t errlen,
                      const char *fmt, ...) SL_PRINTF(5, 6);
static int cudnn_fail(const sl_cudnn_api *api, int status, char *err, size_t errlen,
                      const char *fmt, ...) {
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
        cudnn_fail(a, st, err, errlen, "cudnnCreate (cuDNN %s from %s)", v, name);
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

/* ---- graph building ------------------------------------------------------------------------ */

typedef struct {
    sl_cudnn *c;
    plan_entry *p;
    void *ops[MAX_OPS];
    int nops;
    int64_t next_uid;
    int failed;
    char *err;
    size_t errlen;
} graph;

/* A new descriptor of `type`, kept for destruction with the plan; NULL after a failure. */
static void *desc_new(graph *g, int type, const char *what) {
    if (g->failed) return NULL;
    if (g->p->ndescs == MAX_DESCS) {
        g->failed =
            sl_fail(g->err, g->errlen, "cuDNN SDPA graph: more than %d descriptors", MAX_DESCS);
        return NULL;
    }
    void *d = NULL;
    const int st = g->c->api.BackendCreateDescriptor(type, &d);
    if (st != SL_CUDNN_STATUS_SUCCESS) {
        g->failed = cudnn_fail(&g->c->api, st, g->err, g->errlen,
                               "cudnnBackendCreateDescriptor (%s)", what);
        return NULL;
    }
    g->p->descs[g->p->ndescs++] = d;
    return d;
}

static void set_attr(graph *g, void *d, int name, int type, int64_t n, const void *values,
                     const char *what) {
    if (g->failed || !d) return;
    const int st = g->c->api.BackendSetAttribute(d, name, type, n, values);
    if (st != SL_CUDNN_STATUS_SUCCESS)
        g->failed = cudnn_fail(&g->c->api, st, g->err, g->errlen,
                               "cudnnBackendSetAttribute (%s, attribute %d)", what, name);
}

static void finalize(graph *g, void *d, const char *what) {
    if (g->failed || !d) return;
    const int st = g->c->api.BackendFinalize(d);
    if (st != SL_CUDNN_STATUS_SUCCESS)
        g->failed =
            cudnn_fail(&g->c->api, st, g->err, g->errlen, "cudnnBackendFinalize (%s)", what);
}

static void set_desc(graph *g, void *d, int name, void *value, const char *what) {
    set_attr(g, d, name, SL_CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &value, what);
}

/* A 4-d tensor. uid 0: the next virtual id. Virtual tensors live inside the fused kernel only;
 * by-value ones are host scalars bound at execution. */
static void *tensor(graph *g, int64_t uid, int dtype, const int64_t dims[4],
                    const int64_t strides[4], bool is_virtual, bool by_value, const char *what) {
    void *t = desc_new(g, SL_CUDNN_BACKEND_TENSOR_DESCRIPTOR, what);
    const int64_t id = uid ? uid : g->next_uid++, align = 16;
    set_attr(g, t, SL_CUDNN_ATTR_TENSOR_DATA_TYPE, SL_CUDNN_TYPE_DATA_TYPE, 1, &dtype, what);
    set_attr(g, t, SL_CUDNN_ATTR_TENSOR_DIMENSIONS, SL_CUDNN_TYPE_INT64, 4, dims, what);
    set_attr(g, t, SL_CUDNN_ATTR_TENSOR_STRIDES, SL_CUDNN_TYPE_INT64, 4, strides, what);
    set_attr(g, t, SL_CUDNN_ATTR_TENSOR_UNIQUE_ID, SL_CUDNN_TYPE_INT64, 1, &id, what);
    set_attr(g, t, SL_CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, SL_CUDNN_TYPE_INT64, 1, &align, what);
    set_attr(g, t, SL_CUDNN_ATTR_TENSOR_IS_VIRTUAL, SL_CUDNN_TYPE_BOOLEAN, 1, &is_virtual, what);
    set_attr(g, t, SL_CUDNN_ATTR_TENSOR_IS_BY_VALUE, SL_CUDNN_TYPE_BOOLEAN, 1, &by_value, what);
    finalize(g, t, what);
    return t;
}

/* A virtual tensor of dtype with the given dims and strides. */
static void *virt(graph *g, int dtype, const int64_t dims[4], const int64_t strides[4],
                  const char *what) {
    return tensor(g, 0, dtype, dims, strides, true, false, what);
}

/* A by-value fp32 scalar (dims and strides 1, as the frontend expands its scalars). */
static void *scalar(graph *g, int64_t uid, const char *what) {
    static const int64_t one[4] = {1, 1, 1, 1};
    return tensor(g, uid, SL_CUDNN_DATA_FLOAT, one, one, false, true, what);
}

static void add_op(graph *g, void *op) {
    if (g->failed || !op) return;
    if (g->nops == MAX_OPS) {
        g->failed =
            sl_fail(g->err, g->errlen, "cuDNN SDPA graph: more than %d operations", MAX_OPS);
        return;
    }
    g->ops[g->nops++] = op;
}

/* y = mode(x[, b[, t]]) with fp32 math unless `prec` says otherwise; axis only for GEN_INDEX. */
static void pointwise(graph *g, int mode, int prec, void *x, void *b, void *t, void *y,
                      int64_t axis, const char *what) {
    void *pw = desc_new(g, SL_CUDNN_BACKEND_POINTWISE_DESCRIPTOR, what);
    set_attr(g, pw, SL_CUDNN_ATTR_POINTWISE_MODE, SL_CUDNN_TYPE_POINTWISE_MODE, 1, &mode, what);
    set_attr(g, pw, SL_CUDNN_ATTR_POINTWISE_MATH_PREC, SL_CUDNN_TYPE_DATA_TYPE, 1, &prec, what);
    if (mode == SL_CUDNN_POINTWISE_GEN_INDEX)
        set_attr(g, pw, SL_CUDNN_ATTR_POINTWISE_AXIS, SL_CUDNN_TYPE_INT64, 1, &axis, what);
    finalize(g, pw, what);
    void *op = desc_new(g, SL_CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, what);
    set_desc(g, op, SL_CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw, what);
    set_desc(g, op, SL_CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x, what);
    if (b) set_desc(g, op, SL_CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b, what);
    if (t) set_desc(g, op, SL_CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t, what);
    set_desc(g, op, SL_CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y, what);
    const float one = 1.0f;
    set_attr(g, op, SL_CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, SL_CUDNN_TYPE_FLOAT, 1, &one, what);
    set_attr(g, op, SL_CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, SL_CUDNN_TYPE_FLOAT, 1, &one, what);
    finalize(g, op, what);
    add_op(g, op);
}

/* c = a b over the last two axes, batched over the first two (fp32 accumulation). */
static void matmul(graph *g, void *a, void *b, void *c, const char *what) {
    void *mm = desc_new(g, SL_CUDNN_BACKEND_MATMUL_DESCRIPTOR, what);
    const int comp = SL_CUDNN_DATA_FLOAT;
    set_attr(g, mm, SL_CUDNN_ATTR_MATMUL_COMP_TYPE, SL_CUDNN_TYPE_DATA_TYPE, 1, &comp, what);
    finalize(g, mm, what);
    void *op = desc_new(g, SL_CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, what);
    set_desc(g, op, SL_CUDNN_ATTR_OPERATION_MATMUL_ADESC, a, what);
    set_desc(g, op, SL_CUDNN_ATTR_OPERATION_MATMUL_BDESC, b, what);
    set_desc(g, op, SL_CUDNN_ATTR_OPERATION_MATMUL_CDESC, c, what);
    set_desc(g, op, SL_CUDNN_ATTR_OPERATION_MATMUL_DESC, mm, what);
    finalize(g, op, what);
    add_op(g, op);
}

/* y = reduce(x) over the axes where y has extent 1 (or fewer heads: the GQA sum). */
static void reduction(graph *g, int redop, void *x, void *y, const char *what) {
    void *rd = desc_new(g, SL_CUDNN_BACKEND_REDUCTION_DESCRIPTOR, what);
    const int comp = SL_CUDNN_DATA_FLOAT;
    set_attr(g, rd, SL_CUDNN_ATTR_REDUCTION_COMP_TYPE, SL_CUDNN_TYPE_DATA_TYPE, 1, &comp, what);
    set_attr(g, rd, SL_CUDNN_ATTR_REDUCTION_OPERATOR, SL_CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1,
             &redop, what);
    finalize(g, rd, what);
    void *op = desc_new(g, SL_CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, what);
    set_desc(g, op, SL_CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x, what);
    set_desc(g, op, SL_CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y, what);
    set_desc(g, op, SL_CUDNN_ATTR_OPERATION_REDUCTION_DESC, rd, what);
    finalize(g, op, what);
    add_op(g, op);
}

/* y is x seen through other dims and strides (a transpose here). */
static void reshape(graph *g, void *x, void *y, const char *what) {
    void *op = desc_new(g, SL_CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, what);
    set_desc(g, op, SL_CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x, what);
    set_desc(g, op, SL_CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y, what);
    finalize(g, op, what);
    add_op(g, op);
}

/* Dims and strides of the graph's tensors for one shape. sluice keeps tokens outermost
 * ([b, s, heads, d], core/ops.h): in cuDNN's [b, h, s, d] order that is strides
 * (s*H*d, d, H*d, 1), the "BSHD" layout cuDNN reads directly. */
typedef struct {
    int64_t q[4], qs[4];       /* Q, O, dO, dQ: [b, H, s, d] */
    int64_t kt[4], kts[4];     /* K^T (and V^T): [b, KV, d, s] */
    int64_t k[4], ks[4];       /* K, V, dK, dV: [b, KV, s, d] */
    int64_t sc[4], scs[4];     /* scores: [b, H, s, s], packed */
    int64_t sct[4], scts[4];   /* scores seen transposed: [b, H, s(kv), s(q)] */
    int64_t row[4], rows[4];   /* per-row statistics: [b, H, s, 1], packed */
    int64_t full[4], fulls[4]; /* per-query-head [b, H, s, d], packed (GQA partial dK/dV, dQ) */
} layout;

static void layout_of(const sl_cudnn_shape *s, layout *l) {
    const int64_t b = s->batch, S = s->seq, H = s->heads, KV = s->kv_heads, d = s->head_dim;
#define SET4(a, x0, x1, x2, x3) (a)[0] = (x0), (a)[1] = (x1), (a)[2] = (x2), (a)[3] = (x3)
    SET4(l->q, b, H, S, d), SET4(l->qs, S * H * d, d, H * d, 1);
    SET4(l->kt, b, KV, d, S), SET4(l->kts, S * KV * d, d, 1, KV * d);
    SET4(l->k, b, KV, S, d), SET4(l->ks, S * KV * d, d, KV * d, 1);
    SET4(l->sc, b, H, S, S), SET4(l->scs, H * S * S, S * S, S, 1);
    SET4(l->sct, b, H, S, S), SET4(l->scts, H * S * S, S * S, 1, S);
    SET4(l->row, b, H, S, 1), SET4(l->rows, H * S, S, 1, 1);
    SET4(l->full, b, H, S, d), SET4(l->fulls, H * S * d, S * d, d, 1);
#undef SET4
}

/* The causal mask on scores x (virtual fp32, [b, H, s, s]): keys after the query get the
 * by-value neg_inf. Returns the masked scores. */
static void *causal_mask(graph *g, const layout *l, void *x, void *neg_inf) {
    void *row = virt(g, SL_CUDNN_DATA_INT32, l->sc, l->scs, "mask: row index");
    pointwise(g, SL_CUDNN_POINTWISE_GEN_INDEX, SL_CUDNN_DATA_FLOAT, x, NULL, NULL, row, 2,
              "mask: row index");
    void *col = virt(g, SL_CUDNN_DATA_INT32, l->sc, l->scs, "mask: column index");
    pointwise(g, SL_CUDNN_POINTWISE_GEN_INDEX, SL_CUDNN_DATA_FLOAT, x, NULL, NULL, col, 3,
              "mask: column index");
    void *keep = virt(g, SL_CUDNN_DATA_BOOLEAN, l->sc, l->scs, "mask: row >= column");
    pointwise(g, SL_CUDNN_POINTWISE_CMP_GE, SL_CUDNN_DATA_BOOLEAN, row, col, NULL, keep, 0,
              "mask: row >= column");
    void *y = virt(g, SL_CUDNN_DATA_FLOAT, l->sc, l->scs, "mask: select");
    pointwise(g, SL_CUDNN_POINTWISE_BINARY_SELECT, SL_CUDNN_DATA_FLOAT, x, neg_inf, keep, y, 0,
              "mask: select");
    return y;
}

/* y = mode(x[, b]) into a new virtual fp32 tensor of the given dims and strides. */
static void *pw_new(graph *g, int mode, void *x, void *b, const int64_t dims[4],
                    const int64_t strides[4], const char *what) {
    void *y = virt(g, SL_CUDNN_DATA_FLOAT, dims, strides, what);
    pointwise(g, mode, SL_CUDNN_DATA_FLOAT, x, b, NULL, y, 0, what);
    return y;
}

/* ... of the scores' shape [b, H, s, s]. */
static void *pw_scores(graph *g, const layout *l, int mode, void *x, void *b, const char *what) {
    return pw_new(g, mode, x, b, l->sc, l->scs, what);
}

/* y = reduce(x) over the keys into a new virtual fp32 [b, H, s, 1]. */
static void *row_reduce(graph *g, const layout *l, int redop, void *x, const char *what) {
    void *y = virt(g, SL_CUDNN_DATA_FLOAT, l->row, l->rows, what);
    reduction(g, redop, x, y, what);
    return y;
}

/* a b into new virtual fp32 scores [b, H, s, s]. */
static void *mm_scores(graph *g, const layout *l, void *a, void *b, const char *what) {
    void *c = virt(g, SL_CUDNN_DATA_FLOAT, l->sc, l->scs, what);
    matmul(g, a, b, c, what);
    return c;
}

/* The gradient of K or V: out [b, KV, s, d] = x^T b with x per query head ([b, H, s, s],
 * seen transposed in bf16 through a reshape); with GQA the matmul writes a virtual per-query-head
 * [b, H, s, d] (bf16) that a reduction sums over each group, as the frontend does. */
static void kv_grad(graph *g, const layout *l, const sl_cudnn_shape *s, void *x, void *b, void *out,
                    const char *what) {
    void *xt = virt(g, SL_CUDNN_DATA_BFLOAT16, l->sct, l->scts, what);
    reshape(g, x, xt, what);
    if (s->heads == s->kv_heads) {
        matmul(g, xt, b, out, what);
        return;
    }
    void *full = virt(g, SL_CUDNN_DATA_BFLOAT16, l->full, l->fulls, what);
    matmul(g, xt, b, full, what);
    reduction(g, SL_CUDNN_REDUCE_TENSOR_ADD, full, out, what);
}

static void build_fwd(graph *g, const sl_cudnn_shape *s) {
    layout l;
    layout_of(s, &l);
    const int bf16 = SL_CUDNN_DATA_BFLOAT16, f32 = SL_CUDNN_DATA_FLOAT;
    void *q = tensor(g, UID_Q, bf16, l.q, l.qs, false, false, "Q");
    void *kt = tensor(g, UID_K, bf16, l.kt, l.kts, false, false, "K^T");
    void *v = tensor(g, UID_V, bf16, l.k, l.ks, false, false, "V");
    void *o = tensor(g, UID_O, bf16, l.q, l.qs, false, false, "O");
    void *stats = tensor(g, UID_STATS, f32, l.row, l.rows, false, false, "stats");
    void *scale = scalar(g, UID_SCALE, "scale");
    void *neg_inf = scalar(g, UID_NEG_INF, "mask value");

    void *s1 = mm_scores(g, &l, q, kt, "Q K^T");
    void *s2 = pw_scores(g, &l, SL_CUDNN_POINTWISE_MUL, s1, scale, "scaled scores");
    void *s3 = causal_mask(g, &l, s2, neg_inf);
    /* softmax, with the log-sum-exp written out */
    void *mx = row_reduce(g, &l, SL_CUDNN_REDUCE_TENSOR_MAX, s3, "softmax: row max");
    void *sub = pw_scores(g, &l, SL_CUDNN_POINTWISE_SUB, s3, mx, "softmax: scores - max");
    void *e = pw_scores(g, &l, SL_CUDNN_POINTWISE_EXP, sub, NULL, "softmax: exp");
    void *z = row_reduce(g, &l, SL_CUDNN_REDUCE_TENSOR_ADD, e, "softmax: row sum");
    void *lz = pw_new(g, SL_CUDNN_POINTWISE_LOG, z, NULL, l.row, l.rows, "softmax: log of the sum");
    pointwise(g, SL_CUDNN_POINTWISE_ADD, f32, mx, lz, NULL, stats, 0, "softmax: stats");
    void *p = virt(g, bf16, l.sc, l.scs, "softmax: probabilities");
    pointwise(g, SL_CUDNN_POINTWISE_DIV, f32, e, z, NULL, p, 0, "softmax: probabilities");
    matmul(g, p, v, o, "P V");
}

static void build_bwd(graph *g, const sl_cudnn_shape *s) {
    layout l;
    layout_of(s, &l);
    const int bf16 = SL_CUDNN_DATA_BFLOAT16, f32 = SL_CUDNN_DATA_FLOAT;
    void *q = tensor(g, UID_Q, bf16, l.q, l.qs, false, false, "Q");
    void *kt = tensor(g, UID_K, bf16, l.kt, l.kts, false, false, "K^T");
    void *vt = tensor(g, UID_V, bf16, l.kt, l.kts, false, false, "V^T");
    void *o = tensor(g, UID_O, bf16, l.q, l.qs, false, false, "O");
    void *dout = tensor(g, UID_DO, bf16, l.q, l.qs, false, false, "dO");
    void *stats = tensor(g, UID_STATS, f32, l.row, l.rows, false, false, "stats");
    void *dq = tensor(g, UID_DQ, bf16, l.q, l.qs, false, false, "dQ");
    void *dk = tensor(g, UID_DK, bf16, l.k, l.ks, false, false, "dK");
    void *dv = tensor(g, UID_DV, bf16, l.k, l.ks, false, false, "dV");
    void *scale = scalar(g, UID_SCALE, "scale");
    void *neg_inf = scalar(g, UID_NEG_INF, "mask value");
    void *one = scalar(g, UID_ONE, "one");
    void *sum = tensor(g, UID_SOFTMAX_SUM, f32, l.row, l.rows, false, false, "rowsum(dO O)");
    void *accum = tensor(g, UID_DQ_ACCUM, f32, l.full, l.fulls, false, false, "dQ accumulator");

    /* sum = rowsum(dO * O): the frontend gives the product these strides (b, h, s with the
     * heads and tokens interleaved); they are virtual, so only the pattern matters */
    const int64_t dos[4] = {l.q[1] * l.q[2] * l.q[3], l.q[2] * l.q[3], l.q[1] * l.q[3], 1};
    void *doo = pw_new(g, SL_CUDNN_POINTWISE_MUL, dout, o, l.q, dos, "dO * O");
    void *red = row_reduce(g, &l, SL_CUDNN_REDUCE_TENSOR_ADD, doo, "rowsum(dO O)");
    pointwise(g, SL_CUDNN_POINTWISE_MUL, f32, red, one, NULL, sum, 0, "rowsum(dO O) * 1");

    /* P = exp(scale Q K^T - stats), masked */
    void *s1 = mm_scores(g, &l, q, kt, "Q K^T");
    void *s2 = pw_scores(g, &l, SL_CUDNN_POINTWISE_MUL, s1, scale, "scaled scores");
    void *s3 = pw_scores(g, &l, SL_CUDNN_POINTWISE_SUB, s2, stats, "scores - stats");
    void *s4 = causal_mask(g, &l, s3, neg_inf);
    void *p = pw_scores(g, &l, SL_CUDNN_POINTWISE_EXP, s4, NULL, "P");
    kv_grad(g, &l, s, p, dout, dv, "dV = P^T dO");

    /* dS = (dO V^T - sum) * P * scale; dK = dS^T Q */
    void *dp = mm_scores(g, &l, dout, vt, "dO V^T");
    void *t1 = pw_scores(g, &l, SL_CUDNN_POINTWISE_SUB, dp, sum, "dP - sum");
    void *t2 = pw_scores(g, &l, SL_CUDNN_POINTWISE_MUL, t1, p, "(dP - sum) P");
    void *ds = pw_scores(g, &l, SL_CUDNN_POINTWISE_MUL, t2, scale, "dS");
    kv_grad(g, &l, s, ds, q, dk, "dK = dS^T Q");

    /* dQ = dS K (K^T seen as K again), through the fp32 accumulator. The view's type is left to
     * the intermediate fp32, as the frontend's reshape node leaves it. */
    void *k = virt(g, f32, l.k, l.ks, "K");
    reshape(g, kt, k, "K");
    matmul(g, ds, k, accum, "dS K");
    pointwise(g, SL_CUDNN_POINTWISE_IDENTITY, f32, accum, NULL, NULL, dq, 0, "dQ");
}

/* Keeps descriptor d (made outside desc_new) for destruction with the plan; false when full. */
static bool keep(graph *g, void *d) {
    if (g->p->ndescs == MAX_DESCS) return false;
    g->p->descs[g->p->ndescs++] = d;
    return true;
}

/* One heuristics query (mode) on the operation graph og: the first engine configuration whose
 * execution plan finalizes becomes g's plan. A failure here is not final (the next mode may
 * offer a plan): it is described in `last`. */
static void try_heuristics(graph *g, void *og, int mode, char *last, size_t lastlen) {
    sl_cudnn *c = g->c;
    const sl_cudnn_api *a = &c->api;
    void *heur = NULL;
    int st = a->BackendCreateDescriptor(SL_CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur);
    if (st == SL_CUDNN_STATUS_SUCCESS && !keep(g, heur)) {
        a->BackendDestroyDescriptor(heur);
        snprintf(last, lastlen, "too many descriptors");
        return;
    }
    if (st == SL_CUDNN_STATUS_SUCCESS)
        st = a->BackendSetAttribute(heur, SL_CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH,
                                    SL_CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &og);
    if (st == SL_CUDNN_STATUS_SUCCESS)
        st = a->BackendSetAttribute(heur, SL_CUDNN_ATTR_ENGINEHEUR_MODE, SL_CUDNN_TYPE_HEUR_MODE, 1,
                                    &mode);
    if (st == SL_CUDNN_STATUS_SUCCESS) st = a->BackendFinalize(heur);
    int64_t count = 0;
    if (st == SL_CUDNN_STATUS_SUCCESS)
        st = a->BackendGetAttribute(heur, SL_CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                    SL_CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, NULL);
    if (st != SL_CUDNN_STATUS_SUCCESS) {
        cudnn_fail(a, st, last, lastlen, "heuristics mode %d", mode);
        return;
    }
    if (count > MAX_CONFIGS) count = MAX_CONFIGS; /* the first ones are the recommended ones */
    void *cfgs[MAX_CONFIGS];
    for (int64_t i = 0; i < count; i++) {
        cfgs[i] = NULL;
        st = a->BackendCreateDescriptor(SL_CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfgs[i]);
        if (st != SL_CUDNN_STATUS_SUCCESS || !keep(g, cfgs[i])) {
            if (cfgs[i]) a->BackendDestroyDescriptor(cfgs[i]);
            cudnn_fail(a, st, last, lastlen, "engine configuration descriptors");
            return;
        }
    }
    int64_t got = 0;
    if (count > 0) {
        st = a->BackendGetAttribute(heur, SL_CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                    SL_CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, cfgs);
        if (st != SL_CUDNN_STATUS_SUCCESS) {
            cudnn_fail(a, st, last, lastlen, "heuristics mode %d: results", mode);
            return;
        }
    }
    if (got == 0) snprintf(last, lastlen, "heuristics mode %d offered no engine", mode);
    for (int64_t i = 0; i < got && i < count; i++) {
        void *plan = NULL;
        st = a->BackendCreateDescriptor(SL_CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan);
        if (st == SL_CUDNN_STATUS_SUCCESS)
            st = a->BackendSetAttribute(plan, SL_CUDNN_ATTR_EXECUTION_PLAN_HANDLE,
                                        SL_CUDNN_TYPE_HANDLE, 1, &c->handle);
        if (st == SL_CUDNN_STATUS_SUCCESS)
            st = a->BackendSetAttribute(plan, SL_CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                        SL_CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfgs[i]);
        if (st == SL_CUDNN_STATUS_SUCCESS) st = a->BackendFinalize(plan);
        if (st == SL_CUDNN_STATUS_SUCCESS && keep(g, plan)) {
            g->p->plan = plan;
            return;
        }
        cudnn_fail(a, st, last, lastlen, "heuristics mode %d, engine configuration %lld", mode,
                   (long long)i);
        if (plan) a->BackendDestroyDescriptor(plan);
    }
}

/* Finalizes the operation graph of g and makes the first execution plan that cuDNN's
 * heuristics offer (mode A, then the fallback list) and that finalizes. */
static void make_plan(graph *g) {
    sl_cudnn *c = g->c;
    void *og = desc_new(g, SL_CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "operation graph");
    set_attr(g, og, SL_CUDNN_ATTR_OPERATIONGRAPH_OPS, SL_CUDNN_TYPE_BACKEND_DESCRIPTOR, g->nops,
             g->ops, "operation graph");
    set_attr(g, og, SL_CUDNN_ATTR_OPERATIONGRAPH_HANDLE, SL_CUDNN_TYPE_HANDLE, 1, &c->handle,
             "operation graph");
    finalize(g, og, "operation graph");
    if (g->failed) return;
    char last[768] = "";
    try_heuristics(g, og, SL_CUDNN_HEUR_MODE_A, last, sizeof last);
    if (!g->p->plan) try_heuristics(g, og, SL_CUDNN_HEUR_MODE_FALLBACK, last, sizeof last);
    if (!g->p->plan)
        g->failed =
            sl_fail(g->err, g->errlen,
                    "cuDNN offers no execution plan for this attention graph (last: %s)", last);
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
    graph g = {.c = c, .p = slot, .next_uid = VIRTUAL_UID, .err = err, .errlen = errlen};
    if (dir == SL_CUDNN_SDPA_FWD)
        build_fwd(&g, s);
    else
        build_bwd(&g, s);
    make_plan(&g);
    int64_t ws = 0;
    if (!g.failed) {
        int64_t n = 0;
        const int st =
            c->api.BackendGetAttribute(slot->plan, SL_CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                       SL_CUDNN_TYPE_INT64, 1, &n, &ws);
        if (st != SL_CUDNN_STATUS_SUCCESS)
            g.failed = cudnn_fail(&c->api, st, err, errlen,
                                  "cudnnBackendGetAttribute (plan workspace size)");
    }
    if (g.failed) {
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
    if (st != SL_CUDNN_STATUS_SUCCESS) return cudnn_fail(a, st, err, errlen, "cudnnSetStream");
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
        return cudnn_fail(a, st, err, errlen, "cuDNN SDPA variant pack");
    }
    st = a->BackendExecute(c->handle, p->plan, vp);
    a->BackendDestroyDescriptor(vp);
    if (st != SL_CUDNN_STATUS_SUCCESS)
        return cudnn_fail(a, st, err, errlen, "cudnnBackendExecute (SDPA %s)",
                          call->dir == SL_CUDNN_SDPA_FWD ? "forward" : "backward");
    return 0;
}
