/*
 * attention/cudnn_graph.c - the operation graphs of cuDNN's fused SDPA (forward and backward, as
 * attention/cudnn_sdpa.c's header describes them) and their execution plans, through cuDNN's
 * backend descriptors (attention/cudnn_sdpa_impl.h).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "attention/cudnn_sdpa_impl.h"

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
        g->failed = sl_cudnn_fail(&g->c->api, st, g->err, g->errlen,
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
        g->failed = sl_cudnn_fail(&g->c->api, st, g->err, g->errlen,
                                  "cudnnBackendSetAttribute (%s, attribute %d)", what, name);
}

static void finalize(graph *g, void *d, const char *what) {
    if (g->failed || !d) return;
    const int st = g->c->api.BackendFinalize(d);
    if (st != SL_CUDNN_STATUS_SUCCESS)
        g->failed =
            sl_cudnn_fail(&g->c->api, st, g->err, g->errlen, "cudnnBackendFinalize (%s)", what);
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
        sl_cudnn_fail(a, st, last, lastlen, "heuristics mode %d", mode);
        return;
    }
    if (count > MAX_CONFIGS) count = MAX_CONFIGS; /* the first ones are the recommended ones */
    void *cfgs[MAX_CONFIGS];
    for (int64_t i = 0; i < count; i++) {
        cfgs[i] = NULL;
        st = a->BackendCreateDescriptor(SL_CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfgs[i]);
        if (st != SL_CUDNN_STATUS_SUCCESS || !keep(g, cfgs[i])) {
            if (cfgs[i]) a->BackendDestroyDescriptor(cfgs[i]);
            sl_cudnn_fail(a, st, last, lastlen, "engine configuration descriptors");
            return;
        }
    }
    int64_t got = 0;
    if (count > 0) {
        st = a->BackendGetAttribute(heur, SL_CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                    SL_CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, cfgs);
        if (st != SL_CUDNN_STATUS_SUCCESS) {
            sl_cudnn_fail(a, st, last, lastlen, "heuristics mode %d: results", mode);
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
        sl_cudnn_fail(a, st, last, lastlen, "heuristics mode %d, engine configuration %lld", mode,
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

int sl_cudnn_graph_build(sl_cudnn *c, plan_entry *p, sl_cudnn_dir dir, const sl_cudnn_shape *s,
                         char *err, size_t errlen) {
    graph g = {.c = c, .p = p, .next_uid = VIRTUAL_UID, .err = err, .errlen = errlen};
    if (dir == SL_CUDNN_SDPA_FWD)
        build_fwd(&g, s);
    else
        build_bwd(&g, s);
    make_plan(&g);
    return g.failed ? -1 : 0;
}
