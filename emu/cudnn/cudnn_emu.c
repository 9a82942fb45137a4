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
 * The semantics interpreted (as cuDNN documents its operations):
 *   - tensors are 4-d here (any rank up to 8 is accepted); element idx of a tensor lives at
 *     sum idx[k] * stride[k] of its memory; a by-value tensor is a host scalar from the variant
 *     pack; virtual tensors exist only inside the graph, rounded to their data type (bf16, int32,
 *     boolean) when written;
 *   - broadcasting (pointwise inputs, matmul batch axes): an input axis of extent 1 repeats; an
 *     axis whose extent divides the output's maps output index i to i / (out / in): consecutive
 *     groups share one input index (GQA: query head h reads kv head h / (H / KV));
 *   - matmul: C[.., m, n] = sum_k A[.., m, k] B[.., k, n] in double, rounded to C's type;
 *   - reduction: every input element goes to the output index of the same rule reversed (an
 *     output axis of extent 1 sums or maxes over the axis, a divisor extent over groups);
 *   - reshape: Y is X's memory seen through Y's dimensions and strides (X's layout taken from
 *     its own strides, also for a virtual X);
 *   - pointwise: ADD SUB MUL DIV EXP LOG IDENTITY, CMP_GE (boolean), GEN_INDEX (the output
 *     index along AXIS), BINARY_SELECT (y = t ? x : b).
 * Operations are evaluated in the order of CUDNN_ATTR_OPERATIONGRAPH_OPS, each virtual tensor
 * produced before it is read (real cuDNN takes any order; sluice's builder emits topological
 * order). Heuristics offer one engine configuration; the plan's workspace is WORKSPACE_BYTES,
 * filled with NaN at every execution so that a caller relying on its contents, or keeping its
 * own data there, is caught.
 *
 * Environment: SLUICE_CUDNN_EMU_VERSION (default 91900) is what cudnnGetVersion returns, to test
 * the caller's version checks.
 */
#include <cudnn_graph.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ATTRS  24
#define MAX_DIMS   8
#define MAX_OPS    64
#define MAX_TENSOR 256

enum { WORKSPACE_BYTES = 4096 };

static char g_last_error[1024];

static cudnnStatus_t fail(cudnnStatus_t st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static cudnnStatus_t fail(cudnnStatus_t st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_last_error, sizeof g_last_error, fmt, ap);
    va_end(ap);
    if (getenv("SLUICE_CUDNN_EMU_DEBUG")) fprintf(stderr, "cudnn_emu: %s\n", g_last_error);
    return st;
}

/* ---- descriptors -------------------------------------------------------------------------- */

typedef struct {
    int name, type;
    int64_t n;
    void *vals;
} attr;

typedef struct desc {
    cudnnBackendDescriptorType_t type;
    bool finalized;
    attr attrs[MAX_ATTRS];
    int nattrs;
    /* tensors, once finalized */
    int dtype, nd;
    int64_t dims[MAX_DIMS], strides[MAX_DIMS], uid, numel;
    bool is_virtual, by_value;
    /* engine configurations: the graph they run */
    struct desc *graph;
} desc;

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

static attr *find(desc *d, int name) {
    for (int i = 0; i < d->nattrs; i++)
        if (d->attrs[i].name == name) return &d->attrs[i];
    return NULL;
}

static desc *desc_attr(desc *d, int name) {
    attr *a = find(d, name);
    return a && a->type == CUDNN_TYPE_BACKEND_DESCRIPTOR && a->n == 1 ? ((desc **)a->vals)[0]
                                                                      : NULL;
}

static bool int_attr(desc *d, int name, int64_t *out) {
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

/* ---- finalization: the checks ------------------------------------------------------------- */

static bool is_tensor(desc *t) {
    return t && t->type == CUDNN_BACKEND_TENSOR_DESCRIPTOR && t->finalized;
}

static cudnnStatus_t finalize_tensor(desc *d) {
    int64_t v;
    attr *dims = find(d, CUDNN_ATTR_TENSOR_DIMENSIONS), *str = find(d, CUDNN_ATTR_TENSOR_STRIDES);
    if (!dims || !str || dims->type != CUDNN_TYPE_INT64 || str->type != CUDNN_TYPE_INT64)
        return fail(CUDNN_STATUS_BAD_PARAM, "tensor: dimensions and strides (int64) required");
    if (dims->n != str->n || dims->n < 1 || dims->n > MAX_DIMS)
        return fail(CUDNN_STATUS_BAD_PARAM, "tensor: %lld dimensions, %lld strides",
                    (long long)dims->n, (long long)str->n);
    if (!int_attr(d, CUDNN_ATTR_TENSOR_DATA_TYPE, &v))
        return fail(CUDNN_STATUS_BAD_PARAM, "tensor: no data type");
    d->dtype = (int)v;
    if (d->dtype != CUDNN_DATA_FLOAT && d->dtype != CUDNN_DATA_BFLOAT16 &&
        d->dtype != CUDNN_DATA_INT32 && d->dtype != CUDNN_DATA_BOOLEAN)
        return fail(CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE, "tensor: data type %d not emulated",
                    d->dtype);
    if (!int_attr(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, &d->uid))
        return fail(CUDNN_STATUS_BAD_PARAM, "tensor: no unique id");
    if (!int_attr(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, &v) || v < 1)
        return fail(CUDNN_STATUS_BAD_PARAM, "tensor %lld: no byte alignment", (long long)d->uid);
    d->is_virtual = int_attr(d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, &v) && v;
    d->by_value = int_attr(d, CUDNN_ATTR_TENSOR_IS_BY_VALUE, &v) && v;
    if (d->is_virtual && d->by_value)
        return fail(CUDNN_STATUS_BAD_PARAM, "tensor %lld: virtual and by value", (long long)d->uid);
    d->nd = (int)dims->n;
    d->numel = 1;
    for (int i = 0; i < d->nd; i++) {
        d->dims[i] = ((int64_t *)dims->vals)[i], d->strides[i] = ((int64_t *)str->vals)[i];
        if (d->dims[i] < 1 || d->strides[i] < 1)
            return fail(CUDNN_STATUS_BAD_PARAM, "tensor %lld: dimension %d is %lld, stride %lld",
                        (long long)d->uid, i, (long long)d->dims[i], (long long)d->strides[i]);
        d->numel *= d->dims[i];
    }
    if (d->by_value && d->numel != 1)
        return fail(CUDNN_STATUS_BAD_PARAM, "tensor %lld: by value but %lld elements",
                    (long long)d->uid, (long long)d->numel);
    return CUDNN_STATUS_SUCCESS;
}

static int arity(int mode) { /* inputs of a pointwise mode */
    switch (mode) {
    case CUDNN_POINTWISE_EXP:
    case CUDNN_POINTWISE_LOG:
    case CUDNN_POINTWISE_IDENTITY:
    case CUDNN_POINTWISE_GEN_INDEX:
        return 1;
    case CUDNN_POINTWISE_ADD:
    case CUDNN_POINTWISE_SUB:
    case CUDNN_POINTWISE_MUL:
    case CUDNN_POINTWISE_DIV:
    case CUDNN_POINTWISE_CMP_GE:
        return 2;
    case CUDNN_POINTWISE_BINARY_SELECT:
        return 3;
    default:
        return 0;
    }
}

/* Input axis extent `in` broadcasts to `out`: equal, 1, or a divisor (groups). */
static bool broadcasts(int64_t in, int64_t out) {
    return in == out || in == 1 || (in < out && out % in == 0);
}

static cudnnStatus_t check_broadcast(desc *in, desc *out, int from, int to, const char *what) {
    if (in->by_value) return CUDNN_STATUS_SUCCESS;
    if (in->nd != out->nd)
        return fail(CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH,
                    "%s: tensor %lld has %d dims, %lld has %d", what, (long long)in->uid, in->nd,
                    (long long)out->uid, out->nd);
    for (int k = from; k < to; k++)
        if (!broadcasts(in->dims[k], out->dims[k]))
            return fail(CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH,
                        "%s: tensor %lld axis %d: %lld does not broadcast to %lld", what,
                        (long long)in->uid, k, (long long)in->dims[k], (long long)out->dims[k]);
    return CUDNN_STATUS_SUCCESS;
}

static cudnnStatus_t finalize_op(desc *d) {
    cudnnStatus_t st;
    switch ((int)d->type) {
    case CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR: {
        desc *pw = desc_attr(d, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR);
        if (!pw || pw->type != CUDNN_BACKEND_POINTWISE_DESCRIPTOR || !pw->finalized)
            return fail(CUDNN_STATUS_BAD_PARAM,
                        "pointwise operation: no finalized pointwise descriptor");
        int64_t mode = 0;
        int_attr(pw, CUDNN_ATTR_POINTWISE_MODE, &mode);
        desc *x = desc_attr(d, CUDNN_ATTR_OPERATION_POINTWISE_XDESC),
             *y = desc_attr(d, CUDNN_ATTR_OPERATION_POINTWISE_YDESC);
        desc *b = desc_attr(d, CUDNN_ATTR_OPERATION_POINTWISE_BDESC),
             *t = desc_attr(d, CUDNN_ATTR_OPERATION_POINTWISE_TDESC);
        const int n = arity((int)mode);
        if (!is_tensor(x) || !is_tensor(y) || (n >= 2) != (b != NULL) || (n == 3) != (t != NULL) ||
            (b && !is_tensor(b)) || (t && !is_tensor(t)))
            return fail(CUDNN_STATUS_BAD_PARAM,
                        "pointwise mode %lld: wrong or unfinalized operands", (long long)mode);
        if (y->by_value) return fail(CUDNN_STATUS_BAD_PARAM, "pointwise: by-value output");
        desc *ins[3] = {x, b, t};
        for (int i = 0; i < n; i++)
            if ((st = check_broadcast(ins[i], y, 0, y->nd, "pointwise")) != CUDNN_STATUS_SUCCESS)
                return st;
        if (mode == CUDNN_POINTWISE_CMP_GE && y->dtype != CUDNN_DATA_BOOLEAN)
            return fail(CUDNN_STATUS_BAD_PARAM, "CMP_GE: the output must be boolean");
        if (mode == CUDNN_POINTWISE_BINARY_SELECT && t->dtype != CUDNN_DATA_BOOLEAN)
            return fail(CUDNN_STATUS_BAD_PARAM, "BINARY_SELECT: the mask (TDESC) must be boolean");
        return CUDNN_STATUS_SUCCESS;
    }
    case CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR: {
        desc *a = desc_attr(d, CUDNN_ATTR_OPERATION_MATMUL_ADESC),
             *b = desc_attr(d, CUDNN_ATTR_OPERATION_MATMUL_BDESC);
        desc *c = desc_attr(d, CUDNN_ATTR_OPERATION_MATMUL_CDESC),
             *m = desc_attr(d, CUDNN_ATTR_OPERATION_MATMUL_DESC);
        if (!is_tensor(a) || !is_tensor(b) || !is_tensor(c) || !m ||
            m->type != CUDNN_BACKEND_MATMUL_DESCRIPTOR || !m->finalized)
            return fail(CUDNN_STATUS_BAD_PARAM, "matmul: wrong or unfinalized operands");
        const int r = c->nd;
        if (r < 2 || a->nd != r || b->nd != r || a->dims[r - 1] != b->dims[r - 2] ||
            c->dims[r - 2] != a->dims[r - 2] || c->dims[r - 1] != b->dims[r - 1])
            return fail(CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH,
                        "matmul: A (%lld) [.., %lld, %lld] x B (%lld) [.., %lld, %lld] -> C (%lld) "
                        "[.., %lld, %lld]",
                        (long long)a->uid, (long long)a->dims[r - 2], (long long)a->dims[r - 1],
                        (long long)b->uid, (long long)b->dims[r - 2], (long long)b->dims[r - 1],
                        (long long)c->uid, (long long)c->dims[r - 2], (long long)c->dims[r - 1]);
        if ((st = check_broadcast(a, c, 0, r - 2, "matmul A")) ||
            (st = check_broadcast(b, c, 0, r - 2, "matmul B")))
            return st;
        return CUDNN_STATUS_SUCCESS;
    }
    case CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR: {
        desc *x = desc_attr(d, CUDNN_ATTR_OPERATION_REDUCTION_XDESC),
             *y = desc_attr(d, CUDNN_ATTR_OPERATION_REDUCTION_YDESC);
        desc *r = desc_attr(d, CUDNN_ATTR_OPERATION_REDUCTION_DESC);
        if (!is_tensor(x) || !is_tensor(y) || !r || !r->finalized)
            return fail(CUDNN_STATUS_BAD_PARAM, "reduction: wrong or unfinalized operands");
        return check_broadcast(y, x, 0, x->nd, "reduction (output to input)");
    }
    case CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR: {
        desc *x = desc_attr(d, CUDNN_ATTR_OPERATION_RESHAPE_XDESC),
             *y = desc_attr(d, CUDNN_ATTR_OPERATION_RESHAPE_YDESC);
        if (!is_tensor(x) || !is_tensor(y) || x->numel != y->numel || !y->is_virtual)
            return fail(CUDNN_STATUS_BAD_PARAM,
                        "reshape: operands (the output must be virtual, of as many elements)");
        return CUDNN_STATUS_SUCCESS;
    }
    }
    return CUDNN_STATUS_SUCCESS;
}

static bool is_op(desc *d) {
    return d && (d->type == CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR ||
                 d->type == CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR ||
                 d->type == CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR ||
                 d->type == CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
}

/* The tensors of op: inputs first (count in *nin), then the output. */
static int op_tensors(desc *op, desc **t, int *nin) {
    int n = 0;
    switch ((int)op->type) {
    case CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR:
        t[n++] = desc_attr(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC);
        if (desc_attr(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC))
            t[n++] = desc_attr(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC);
        if (desc_attr(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC))
            t[n++] = desc_attr(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC);
        *nin = n;
        t[n++] = desc_attr(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC);
        break;
    case CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR:
        t[n++] = desc_attr(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC);
        t[n++] = desc_attr(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC);
        *nin = n;
        t[n++] = desc_attr(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC);
        break;
    case CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR:
        t[n++] = desc_attr(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC);
        *nin = n;
        t[n++] = desc_attr(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC);
        break;
    default:
        t[n++] = desc_attr(op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC);
        *nin = n;
        t[n++] = desc_attr(op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC);
    }
    return n;
}

/* The graph's checks: unique ids, each virtual tensor written once before it is read, outputs
 * not by value. */
static cudnnStatus_t finalize_graph(desc *g) {
    attr *ops = find(g, CUDNN_ATTR_OPERATIONGRAPH_OPS);
    if (!ops || ops->type != CUDNN_TYPE_BACKEND_DESCRIPTOR || ops->n < 1 || ops->n > MAX_OPS)
        return fail(CUDNN_STATUS_BAD_PARAM, "operation graph: no operations");
    if (!find(g, CUDNN_ATTR_OPERATIONGRAPH_HANDLE))
        return fail(CUDNN_STATUS_BAD_PARAM,
                    "operation graph: no handle (required before cuDNN 9.8)");
    desc *seen[MAX_TENSOR];
    bool written[MAX_TENSOR];
    int ns = 0;
    for (int64_t i = 0; i < ops->n; i++) {
        desc *op = ((desc **)ops->vals)[i];
        if (!is_op(op) || !op->finalized)
            return fail(CUDNN_STATUS_BAD_PARAM,
                        "operation graph: operation %lld is not a finalized operation",
                        (long long)i);
        desc *t[4];
        int nin = 0;
        const int n = op_tensors(op, t, &nin);
        for (int j = 0; j < n; j++) {
            int k = 0;
            while (k < ns && seen[k] != t[j]) {
                if (seen[k]->uid == t[j]->uid)
                    return fail(CUDNN_STATUS_BAD_PARAM_DUPLICATED_ENTRIES,
                                "operation graph: two tensors with unique id %lld",
                                (long long)t[j]->uid);
                k++;
            }
            if (k == ns) {
                if (ns == MAX_TENSOR) return fail(CUDNN_STATUS_BAD_PARAM, "too many tensors");
                seen[ns] = t[j], written[ns++] = false;
            }
            if (j < nin && t[j]->is_virtual && !written[k])
                return fail(CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN,
                            "operation graph: virtual tensor %lld read by operation %lld before it "
                            "is written",
                            (long long)t[j]->uid, (long long)i);
            if (j == nin) {
                if (written[k])
                    return fail(CUDNN_STATUS_BAD_PARAM,
                                "operation graph: tensor %lld written twice", (long long)t[j]->uid);
                written[k] = true;
            }
        }
    }
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t p) {
    desc *d = p;
    if (!d) return fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "Finalize: null");
    if (d->finalized) return fail(CUDNN_STATUS_BAD_PARAM, "Finalize: already finalized");
    cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
    int64_t v;
    switch ((int)d->type) {
    case CUDNN_BACKEND_TENSOR_DESCRIPTOR:
        st = finalize_tensor(d);
        break;
    case CUDNN_BACKEND_POINTWISE_DESCRIPTOR:
        if (!int_attr(d, CUDNN_ATTR_POINTWISE_MODE, &v) || arity((int)v) == 0)
            st = fail(CUDNN_STATUS_NOT_SUPPORTED, "pointwise: mode missing or not emulated");
        else if (!find(d, CUDNN_ATTR_POINTWISE_MATH_PREC))
            st = fail(CUDNN_STATUS_BAD_PARAM, "pointwise: no math precision");
        else if (v == CUDNN_POINTWISE_GEN_INDEX && !int_attr(d, CUDNN_ATTR_POINTWISE_AXIS, &v))
            st = fail(CUDNN_STATUS_BAD_PARAM, "GEN_INDEX: no axis");
        break;
    case CUDNN_BACKEND_MATMUL_DESCRIPTOR:
        if (!find(d, CUDNN_ATTR_MATMUL_COMP_TYPE))
            st = fail(CUDNN_STATUS_BAD_PARAM, "matmul: no compute type");
        break;
    case CUDNN_BACKEND_REDUCTION_DESCRIPTOR:
        if (!int_attr(d, CUDNN_ATTR_REDUCTION_OPERATOR, &v) ||
            (v != CUDNN_REDUCE_TENSOR_ADD && v != CUDNN_REDUCE_TENSOR_MAX))
            st = fail(CUDNN_STATUS_NOT_SUPPORTED, "reduction: operator missing or not emulated");
        else if (!find(d, CUDNN_ATTR_REDUCTION_COMP_TYPE))
            st = fail(CUDNN_STATUS_BAD_PARAM, "reduction: no compute type");
        break;
    case CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR:
        st = finalize_op(d);
        break;
    case CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR:
        st = finalize_graph(d);
        break;
    case CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR: {
        desc *g = desc_attr(d, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH);
        if (!g || !g->finalized || !int_attr(d, CUDNN_ATTR_ENGINEHEUR_MODE, &v))
            st = fail(CUDNN_STATUS_BAD_PARAM, "heuristics: graph or mode missing");
        break;
    }
    case CUDNN_BACKEND_ENGINECFG_DESCRIPTOR:
        break;
    case CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR: {
        desc *cfg = desc_attr(d, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG);
        if (!find(d, CUDNN_ATTR_EXECUTION_PLAN_HANDLE) || !cfg || !cfg->graph)
            st = fail(CUDNN_STATUS_BAD_PARAM,
                      "execution plan: handle or engine configuration missing");
        else
            d->graph = cfg->graph;
        break;
    }
    case CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR: {
        attr *u = find(d, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS),
             *p2 = find(d, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS);
        if (!u || !p2 || u->n != p2->n || u->type != CUDNN_TYPE_INT64 ||
            p2->type != CUDNN_TYPE_VOID_PTR || !find(d, CUDNN_ATTR_VARIANT_PACK_WORKSPACE))
            st = fail(CUDNN_STATUS_BAD_PARAM,
                      "variant pack: ids, pointers (as many) and workspace required");
        break;
    }
    default:
        st = fail(CUDNN_STATUS_NOT_SUPPORTED, "descriptor type %d not emulated", (int)d->type);
    }
    if (st == CUDNN_STATUS_SUCCESS) d->finalized = true;
    return st;
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

/* ---- execution ---------------------------------------------------------------------------- */

/* The values of one tensor during an execution, dense in row-major order of its dims. */
typedef struct {
    desc *t;
    float *v;
    void *mem; /* non-virtual: the bound memory (by value: the host scalar) */
} value;

static float bf16_to_f(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint16_t f_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* NaN stays NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static float round_to(int dtype, double x) {
    switch (dtype) {
    case CUDNN_DATA_BFLOAT16:
        return bf16_to_f(f_to_bf16((float)x));
    case CUDNN_DATA_INT32:
        return (float)(int32_t)x;
    case CUDNN_DATA_BOOLEAN:
        return x != 0.0 ? 1.0f : 0.0f;
    default:
        return (float)x;
    }
}

/* Row-major index -> multi-index. */
static void unravel(const desc *t, int64_t i, int64_t *idx) {
    for (int k = t->nd - 1; k >= 0; k--) idx[k] = i % t->dims[k], i /= t->dims[k];
}

static int64_t offset(const desc *t, const int64_t *idx) {
    int64_t o = 0;
    for (int k = 0; k < t->nd; k++) o += idx[k] * t->strides[k];
    return o;
}

/* The row-major index in `in` of output multi-index oidx (broadcast rule of the header). */
static int64_t bcast_index(const desc *in, const desc *out, const int64_t *oidx) {
    if (in->by_value) return 0;
    int64_t i = 0;
    for (int k = 0; k < in->nd; k++) {
        const int64_t d = in->dims[k];
        const int64_t x = d == out->dims[k] ? oidx[k] : d == 1 ? 0 : oidx[k] / (out->dims[k] / d);
        i = i * d + x;
    }
    return i;
}

static void load(value *v) {
    const desc *t = v->t;
    int64_t idx[MAX_DIMS];
    for (int64_t i = 0; i < t->numel; i++) {
        unravel(t, i, idx);
        const int64_t o = offset(t, idx);
        switch (t->dtype) {
        case CUDNN_DATA_BFLOAT16:
            v->v[i] = bf16_to_f(((const uint16_t *)v->mem)[o]);
            break;
        case CUDNN_DATA_INT32:
            v->v[i] = (float)((const int32_t *)v->mem)[o];
            break;
        case CUDNN_DATA_BOOLEAN:
            v->v[i] = ((const uint8_t *)v->mem)[o] ? 1.0f : 0.0f;
            break;
        default:
            v->v[i] = ((const float *)v->mem)[o];
        }
    }
}

static void store(value *v) {
    const desc *t = v->t;
    int64_t idx[MAX_DIMS];
    for (int64_t i = 0; i < t->numel; i++) {
        unravel(t, i, idx);
        const int64_t o = offset(t, idx);
        switch (t->dtype) {
        case CUDNN_DATA_BFLOAT16:
            ((uint16_t *)v->mem)[o] = f_to_bf16(v->v[i]);
            break;
        case CUDNN_DATA_INT32:
            ((int32_t *)v->mem)[o] = (int32_t)v->v[i];
            break;
        case CUDNN_DATA_BOOLEAN:
            ((uint8_t *)v->mem)[o] = v->v[i] != 0.0f;
            break;
        default:
            ((float *)v->mem)[o] = v->v[i];
        }
    }
}

static void run_pointwise(desc *op, value *x, value *b, value *t, value *y) {
    desc *pw = desc_attr(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR);
    int64_t mode = 0, axis = 0, idx[MAX_DIMS];
    int_attr(pw, CUDNN_ATTR_POINTWISE_MODE, &mode);
    int_attr(pw, CUDNN_ATTR_POINTWISE_AXIS, &axis);
    for (int64_t i = 0; i < y->t->numel; i++) {
        unravel(y->t, i, idx);
        const double a = x->v[bcast_index(x->t, y->t, idx)];
        const double c = b ? b->v[bcast_index(b->t, y->t, idx)] : 0.0;
        double r = 0.0;
        switch ((int)mode) {
        case CUDNN_POINTWISE_ADD:
            r = a + c;
            break;
        case CUDNN_POINTWISE_SUB:
            r = a - c;
            break;
        case CUDNN_POINTWISE_MUL:
            r = a * c;
            break;
        case CUDNN_POINTWISE_DIV:
            r = a / c;
            break;
        case CUDNN_POINTWISE_EXP:
            r = exp(a);
            break;
        case CUDNN_POINTWISE_LOG:
            r = log(a);
            break;
        case CUDNN_POINTWISE_IDENTITY:
            r = a;
            break;
        case CUDNN_POINTWISE_CMP_GE:
            r = a >= c;
            break;
        case CUDNN_POINTWISE_GEN_INDEX:
            r = (double)idx[axis];
            break;
        case CUDNN_POINTWISE_BINARY_SELECT:
            r = t->v[bcast_index(t->t, y->t, idx)] != 0.0f ? a : c;
            break;
        }
        y->v[i] = round_to(y->t->dtype, r);
    }
}

static void run_matmul(value *a, value *b, value *c) {
    const desc *C = c->t;
    const int r = C->nd;
    const int64_t M = C->dims[r - 2], N = C->dims[r - 1], K = a->t->dims[r - 1];
    int64_t idx[MAX_DIMS], ai[MAX_DIMS], bi[MAX_DIMS];
    for (int64_t i = 0; i < C->numel; i++) {
        unravel(C, i, idx);
        memcpy(ai, idx, sizeof idx), memcpy(bi, idx, sizeof idx);
        for (int k = 0; k < r - 2; k++) {
            ai[k] = a->t->dims[k] == C->dims[k] ? idx[k]
                    : a->t->dims[k] == 1        ? 0
                                                : idx[k] / (C->dims[k] / a->t->dims[k]);
            bi[k] = b->t->dims[k] == C->dims[k] ? idx[k]
                    : b->t->dims[k] == 1        ? 0
                                                : idx[k] / (C->dims[k] / b->t->dims[k]);
        }
        double s = 0.0;
        for (int64_t k = 0; k < K; k++) {
            ai[r - 2] = idx[r - 2], ai[r - 1] = k;
            bi[r - 2] = k, bi[r - 1] = idx[r - 1];
            int64_t ao = 0, bo = 0;
            for (int q = 0; q < r; q++)
                ao = ao * a->t->dims[q] + ai[q], bo = bo * b->t->dims[q] + bi[q];
            s += (double)a->v[ao] * (double)b->v[bo];
        }
        (void)M, (void)N;
        c->v[i] = round_to(C->dtype, s);
    }
}

static void run_reduction(desc *op, value *x, value *y) {
    desc *rd = desc_attr(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC);
    int64_t redop = 0, idx[MAX_DIMS];
    int_attr(rd, CUDNN_ATTR_REDUCTION_OPERATOR, &redop);
    double *acc = malloc(sizeof(double) * (size_t)y->t->numel);
    for (int64_t i = 0; i < y->t->numel; i++)
        acc[i] = redop == CUDNN_REDUCE_TENSOR_MAX ? -INFINITY : 0.0;
    for (int64_t i = 0; i < x->t->numel; i++) {
        unravel(x->t, i, idx);
        const int64_t o = bcast_index(y->t, x->t, idx);
        const double v = x->v[i];
        if (redop == CUDNN_REDUCE_TENSOR_MAX)
            acc[o] = v > acc[o] ? v : acc[o];
        else
            acc[o] += v;
    }
    for (int64_t i = 0; i < y->t->numel; i++) y->v[i] = round_to(y->t->dtype, acc[i]);
    free(acc);
}

static cudnnStatus_t run_reshape(value *x, value *y) {
    int64_t idx[MAX_DIMS], span = 0;
    for (int k = 0; k < x->t->nd; k++) span += (x->t->dims[k] - 1) * x->t->strides[k];
    float *mem = malloc(sizeof(float) * (size_t)(span + 1));
    unsigned char *set = calloc((size_t)(span + 1), 1);
    for (int64_t i = 0; i < x->t->numel; i++) {
        unravel(x->t, i, idx);
        const int64_t o = offset(x->t, idx);
        mem[o] = x->v[i], set[o] = 1;
    }
    cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
    for (int64_t i = 0; i < y->t->numel && st == CUDNN_STATUS_SUCCESS; i++) {
        unravel(y->t, i, idx);
        const int64_t o = offset(y->t, idx);
        if (o > span || !set[o])
            st = fail(CUDNN_STATUS_BAD_PARAM,
                      "reshape %lld -> %lld: element %lld of the output is not in the input",
                      (long long)x->t->uid, (long long)y->t->uid, (long long)i);
        else
            y->v[i] = round_to(y->t->dtype, mem[o]);
    }
    free(mem), free(set);
    return st;
}

cudnnStatus_t cudnnBackendExecute(cudnnHandle_t handle, cudnnBackendDescriptor_t plan_p,
                                  cudnnBackendDescriptor_t vp_p) {
    desc *plan = plan_p, *vp = vp_p;
    if (!handle || !plan || !plan->finalized ||
        plan->type != CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR || !vp || !vp->finalized)
        return fail(CUDNN_STATUS_BAD_PARAM,
                    "Execute: handle, finalized plan and variant pack required");
    attr *ops = find(plan->graph, CUDNN_ATTR_OPERATIONGRAPH_OPS);
    attr *uids = find(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS),
         *ptrs = find(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS);
    void *ws = *(void **)find(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE)->vals;
    if (!ws)
        return fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER,
                    "Execute: the plan needs %d bytes of workspace", WORKSPACE_BYTES);
    /* a caller must neither read this nor keep its own data in it */
    for (int i = 0; i < WORKSPACE_BYTES / 4; i++) ((float *)ws)[i] = NAN;
    value vals[MAX_TENSOR];
    int nv = 0;
    cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
    for (int64_t i = 0; i < ops->n && st == CUDNN_STATUS_SUCCESS; i++) {
        desc *op = ((desc **)ops->vals)[i], *t[4];
        int nin = 0;
        const int n = op_tensors(op, t, &nin);
        value *v[4];
        for (int j = 0; j < n && st == CUDNN_STATUS_SUCCESS; j++) {
            int k = 0;
            while (k < nv && vals[k].t != t[j]) k++;
            if (k == nv) { /* first sight: bind and, for a non-virtual input, load */
                value *nvl = &vals[nv++];
                nvl->t = t[j], nvl->mem = NULL;
                nvl->v = malloc(sizeof(float) * (size_t)t[j]->numel);
                if (!t[j]->is_virtual) {
                    for (int64_t u = 0; u < uids->n; u++)
                        if (((int64_t *)uids->vals)[u] == t[j]->uid)
                            nvl->mem = ((void **)ptrs->vals)[u];
                    if (!nvl->mem)
                        st = fail(CUDNN_STATUS_BAD_PARAM,
                                  "Execute: tensor %lld is not in the variant pack",
                                  (long long)t[j]->uid);
                    else if (j < nin)
                        load(nvl);
                }
            }
            v[j] = &vals[k];
        }
        if (st != CUDNN_STATUS_SUCCESS) break;
        switch ((int)op->type) {
        case CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR:
            run_pointwise(op, v[0], nin > 1 ? v[1] : NULL, nin > 2 ? v[2] : NULL, v[nin]);
            break;
        case CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR:
            run_matmul(v[0], v[1], v[2]);
            break;
        case CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR:
            run_reduction(op, v[0], v[1]);
            break;
        default:
            st = run_reshape(v[0], v[1]);
        }
        if (st == CUDNN_STATUS_SUCCESS && !v[nin]->t->is_virtual) store(v[nin]);
    }
    for (int i = 0; i < nv; i++) free(vals[i].v);
    return st;
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
