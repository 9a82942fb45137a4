/*
 * emu/cudnn/cudnn_emu_execute.c - the cuDNN test double's execution (emu/README.md, "cuDNN"):
 * cudnnBackendExecute interprets the plan's operation graph on the CPU, operation by operation,
 * on the emulated device memory (which is host memory), every tensor materialized in fp32.
 * cudnn_emu.c holds the descriptors, cudnn_emu.h what the files share.
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
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cudnn_emu.h"

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
