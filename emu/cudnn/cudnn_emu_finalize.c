/*
 * emu/cudnn/cudnn_emu_finalize.c - the cuDNN test double's finalization (emu/README.md,
 * "cuDNN"): cudnnBackendFinalize checks what cuDNN documents and a caller can get wrong -
 * required attributes, data types, shapes (matmul inner dimensions, broadcastable inputs,
 * reductions to extents that divide), unique ids, a virtual tensor read before it is written, a
 * reshape's output. cudnn_emu.c holds the descriptors, cudnn_emu.h what the files share.
 */
#include <stdbool.h>
#include <stdint.h>

#include "cudnn_emu.h"

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
int op_tensors(desc *op, desc **t, int *nin) {
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
