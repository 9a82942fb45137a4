/*
 * core/ops.c - checks each operation's arguments, then dispatches to the backend.
 *
 * Shape and dtype mismatches between operations are programming errors inside sluice, so
 * they stop the run (sl_fatal) with the operation's name and the offending shapes.
 */
#include "core/ops.h"

#include <stdlib.h>
#include <string.h>

#include "core/backend_impl.h"
#include "core/log.h"

#define BE(t) ((t)->be)

#define DISPATCH(be, op, ...)                                                                      \
    do {                                                                                           \
        sl_backend *be_ = (be);                                                                    \
        if (!be_->ops->op)                                                                         \
            sl_fatal("operation '%s' is not implemented by backend '%s'", #op, be_->iface.name);   \
        be_->ops->op(be_->ctx, __VA_ARGS__);                                                       \
    } while (0)

#define DISPATCH_RET(be, op, ...)                                                                  \
    do {                                                                                           \
        sl_backend *be_ = (be);                                                                    \
        if (!be_->ops->op)                                                                         \
            sl_fatal("operation '%s' is not implemented by backend '%s'", #op, be_->iface.name);   \
        return be_->ops->op(be_->ctx, __VA_ARGS__);                                                \
    } while (0)

static void need_dtype(const char *op, const char *arg, const sl_tensor *t, sl_dtype dt) {
    SL_CHECK(t != NULL, "%s: %s is NULL", op, arg);
    SL_CHECK(t->dtype == dt, "%s: %s has dtype %s, expected %s", op, arg, sl_dtype_name(t->dtype),
             sl_dtype_name(dt));
}

static void need_same_backend(const char *op, const sl_tensor *a, const sl_tensor *b) {
    if (a && b) SL_CHECK(a->be == b->be, "%s: tensors live on different backends", op);
}

static void need_numel(const char *op, const char *arg, const sl_tensor *t, int64_t n) {
    SL_CHECK(t->numel == n, "%s: %s has %lld elements, expected %lld", op, arg, (long long)t->numel,
             (long long)n);
}

/* A float operand ("any" in docs/cuda.md): fp32, or bf16 on a backend whose kernels take it. */
static void need_float(const char *op, const char *arg, const sl_tensor *t) {
    SL_CHECK(t != NULL, "%s: %s is NULL", op, arg);
    SL_CHECK(t->dtype == SL_F32 || t->dtype == SL_BF16, "%s: %s has dtype %s, expected a float", op,
             arg, sl_dtype_name(t->dtype));
    SL_CHECK(t->dtype == SL_F32 || t->be->iface.bf16,
             "%s: %s is bf16, but backend '%s' computes in fp32 only", op, arg, t->be->iface.name);
}

/* A float operand that must have the dtype of `ref` ("T" in docs/cuda.md). */
static void need_like(const char *op, const char *arg, const sl_tensor *t, const sl_tensor *ref) {
    need_float(op, arg, t);
    SL_CHECK(t->dtype == ref->dtype,
             "%s: %s has dtype %s, expected %s (as the op's other operands)", op, arg,
             sl_dtype_name(t->dtype), sl_dtype_name(ref->dtype));
}

/* ---- memory-level helpers ---- */

void sl_op_fill(sl_tensor *x, float value) {
    if (x->dtype != SL_I32) need_float("fill", "x", x); /* index tensors are filled too */
    DISPATCH(BE(x), fill, x, value);
}

void sl_op_add(sl_tensor *y, const sl_tensor *a, const sl_tensor *b) {
    need_float("add", "y", y);
    need_float("add", "a", a);
    need_float("add", "b", b);
    need_numel("add", "a", a, y->numel);
    need_numel("add", "b", b, y->numel);
    need_same_backend("add", y, a);
    need_same_backend("add", y, b);
    DISPATCH(BE(y), add, y, a, b);
}

void sl_op_axpy(sl_tensor *y, const sl_tensor *x, float alpha) {
    need_float("axpy", "y", y);
    need_float("axpy", "x", x);
    need_numel("axpy", "x", x, y->numel);
    need_same_backend("axpy", y, x);
    DISPATCH(BE(y), axpy, y, x, alpha);
}

void sl_op_scale(sl_tensor *x, float s) {
    need_float("scale", "x", x);
    DISPATCH(BE(x), scale, x, s);
}

void sl_op_convert(sl_tensor *dst, const sl_tensor *src) {
    need_float("convert", "dst", dst);
    need_float("convert", "src", src);
    need_numel("convert", "src", src, dst->numel);
    need_same_backend("convert", dst, src);
    DISPATCH(BE(dst), convert, dst, src);
}
/* A device scalar: one fp32 element on the same backend as the input. */
static void need_scalar(const char *op, const sl_tensor *out, const sl_tensor *x) {
    need_float(op, "x", x);
    need_numel(op, "out", out, 1);
    need_dtype(op, "out", out, SL_F32);
    need_same_backend(op, out, x);
}

void sl_op_sum(sl_tensor *out, const sl_tensor *x) {
    need_scalar("sum", out, x);
    DISPATCH(BE(x), sum, out, x);
}
void sl_op_sumsq(sl_tensor *out, const sl_tensor *x) {
    need_scalar("sumsq", out, x);
    DISPATCH(BE(x), sumsq, out, x);
}
void sl_op_absmax(sl_tensor *out, const sl_tensor *x) {
    need_scalar("absmax", out, x);
    DISPATCH(BE(x), absmax, out, x);
}

/* ---- dense linear algebra ---- */

void sl_op_matmul(sl_tensor *c, const sl_tensor *a, const sl_tensor *b, bool trans_a, bool trans_b,
                  float alpha, float beta) {
    need_float("matmul", "c", c);
    need_float("matmul", "a", a);
    need_like("matmul", "b", b, a);
    need_same_backend("matmul", c, a);
    need_same_backend("matmul", c, b);
    int64_t am = trans_a ? sl_last_dim(a) : sl_rows(a), ak = trans_a ? sl_rows(a) : sl_last_dim(a);
    int64_t bk = trans_b ? sl_last_dim(b) : sl_rows(b), bn = trans_b ? sl_rows(b) : sl_last_dim(b);
    SL_CHECK(ak == bk && sl_rows(c) == am && sl_last_dim(c) == bn,
             "matmul: [%lld x %lld] x [%lld x %lld] into [%lld x %lld]", (long long)am,
             (long long)ak, (long long)bk, (long long)bn, (long long)sl_rows(c),
             (long long)sl_last_dim(c));
    DISPATCH(BE(c), matmul, c, a, b, trans_a, trans_b, alpha, beta);
}

static int64_t sum_counts(const int64_t *counts, int groups) {
    int64_t n = 0;
    for (int g = 0; g < groups; g++) {
        SL_CHECK(counts[g] >= 0, "negative group count %lld", (long long)counts[g]);
        n += counts[g];
    }
    return n;
}

sl_group_counts sl_counts_host(const int64_t *counts, int groups) {
    const sl_group_counts c = {counts, NULL, sum_counts(counts, groups)};
    return c;
}

sl_group_counts sl_counts_device(const sl_tensor *counts, int64_t rows) {
    const sl_group_counts c = {NULL, counts, rows};
    return c;
}

bool sl_grouped_counts_on_device(sl_backend *be, sl_dtype dt, int64_t r, int64_t s, int groups) {
    return be->ops->grouped_counts_on_device &&
           be->ops->grouped_counts_on_device(be->ctx, dt, r, s, groups);
}

const int64_t *sl_group_counts_host(sl_group_counts c, int groups, int64_t **buf) {
    *buf = NULL;
    if (c.host) return c.host;
    if (c.rows == 0) /* counts of no rows are all zero: nothing to read */
        return *buf = sl_xcalloc((size_t)(groups > 0 ? groups : 1), sizeof(int64_t));
    int32_t *h = sl_xmalloc((size_t)(groups > 0 ? groups : 1) * sizeof(int32_t));
    sl_tensor_to_host(c.dev, h);
    *buf = sl_xmalloc((size_t)(groups > 0 ? groups : 1) * sizeof(int64_t));
    for (int g = 0; g < groups; g++) (*buf)[g] = h[g];
    free(h);
    const int64_t n = sum_counts(*buf, groups);
    SL_CHECK(n == c.rows, "grouped GEMM: the device counts sum to %lld rows, the caller said %lld",
             (long long)n, (long long)c.rows);
    return *buf;
}

/* A grouped GEMM's counts as its backend takes them: checked, and device counts the backend
 * cannot take (sl_grouped_counts_on_device) read on the host into *buf (freed by the caller):
 * the op's one host read, so a path that needs host sizes (cuBLAS) stays correct. */
static sl_group_counts resolve_counts(const char *op, sl_backend *be, sl_group_counts c, int groups,
                                      sl_dtype dt, int64_t r, int64_t s, int64_t **buf) {
    *buf = NULL;
    static const int64_t no_groups[1] = {0};
    if (groups == 0 && !c.host && !c.dev) c.host = no_groups; /* nothing to count */
    SL_CHECK((c.host != NULL) != (c.dev != NULL),
             "%s: the counts must be given on the host or on the device (one of them)", op);
    SL_CHECK(c.rows >= 0, "%s: negative total rows %lld", op, (long long)c.rows);
    if (c.host) return c;
    need_dtype(op, "counts", c.dev, SL_I32);
    SL_CHECK(sl_tensor_numel(c.dev) == groups, "%s: counts has %lld elements for %d groups", op,
             (long long)sl_tensor_numel(c.dev), groups);
    SL_CHECK(c.dev->be == be, "%s: counts live on another backend than the operands", op);
    if (sl_grouped_counts_on_device(be, dt, r, s, groups)) return c;
    c.host = sl_group_counts_host(c, groups, buf);
    c.dev = NULL;
    return c;
}

void sl_op_grouped_matmul(sl_tensor *c, const sl_tensor *a, const sl_tensor *b,
                          sl_group_counts counts, int groups, bool trans_b, float beta) {
    need_float("grouped_matmul", "a", a);
    need_like("grouped_matmul", "b", b, a);
    need_like("grouped_matmul", "c", c, a);
    SL_CHECK(b->ndim == 3 && b->shape[0] == groups, "grouped_matmul: b must be [groups=%d, R, S]",
             groups);
    const int64_t r = b->shape[1], s = b->shape[2], n = counts.rows;
    const int64_t in = trans_b ? s : r, out = trans_b ? r : s;
    SL_CHECK(sl_last_dim(a) == in && sl_last_dim(c) == out && n <= sl_rows(a) && n <= sl_rows(c),
             "grouped_matmul: a [%lld, %lld], c [%lld, %lld], b [%d, %lld, %lld], %lld rows",
             (long long)sl_rows(a), (long long)sl_last_dim(a), (long long)sl_rows(c),
             (long long)sl_last_dim(c), groups, (long long)r, (long long)s, (long long)n);
    int64_t *buf;
    const sl_group_counts k =
        resolve_counts("grouped_matmul", BE(c), counts, groups, a->dtype, r, s, &buf);
    DISPATCH(BE(c), grouped_matmul, c, a, b, &k, groups, trans_b, beta);
    free(buf);
}

/* The optional sum of squares of the weight-gradient ops: [1] fp32 beside dW. */
static void need_sumsq(const char *op, const sl_tensor *sumsq, const sl_tensor *dw) {
    if (!sumsq) return;
    need_dtype(op, "dw (with sumsq)", dw, SL_F32);
    need_numel(op, "sumsq", sumsq, 1);
    need_dtype(op, "sumsq", sumsq, SL_F32);
    need_same_backend(op, sumsq, dw);
}

void sl_op_grouped_matmul_dw(sl_tensor *dw, const sl_tensor *dy, const sl_tensor *x,
                             sl_group_counts counts, int groups, float beta, sl_tensor *sumsq) {
    need_float("grouped_matmul_dw", "dw", dw);
    need_float("grouped_matmul_dw", "dy", dy);
    need_like("grouped_matmul_dw", "x", x, dy);
    need_sumsq("grouped_matmul_dw", sumsq, dw);
    SL_CHECK(dw->ndim == 3 && dw->shape[0] == groups,
             "grouped_matmul_dw: dw must be [groups=%d, R, S]", groups);
    const int64_t n = counts.rows;
    SL_CHECK(sl_last_dim(dy) == dw->shape[1] && sl_last_dim(x) == dw->shape[2] &&
                 n <= sl_rows(dy) && n <= sl_rows(x),
             "grouped_matmul_dw: shapes do not match");
    int64_t *buf;
    const sl_group_counts k = resolve_counts("grouped_matmul_dw", BE(dw), counts, groups, dy->dtype,
                                             dw->shape[1], dw->shape[2], &buf);
    DISPATCH(BE(dw), grouped_matmul_dw, dw, dy, x, &k, groups, beta, sumsq);
    free(buf);
}

void sl_op_grouped_matmul_dw_pair(sl_tensor *dw, const sl_tensor *dy, const sl_tensor *x,
                                  sl_group_counts counts, const sl_tensor *dy2, const sl_tensor *x2,
                                  sl_group_counts counts2, int groups, float beta,
                                  sl_tensor *sumsq) {
    need_float("grouped_matmul_dw_pair", "dw", dw);
    need_float("grouped_matmul_dw_pair", "dy", dy);
    need_like("grouped_matmul_dw_pair", "x", x, dy);
    need_like("grouped_matmul_dw_pair", "dy2", dy2, dy);
    need_like("grouped_matmul_dw_pair", "x2", x2, dy);
    need_sumsq("grouped_matmul_dw_pair", sumsq, dw);
    SL_CHECK(dw->ndim == 3 && dw->shape[0] == groups,
             "grouped_matmul_dw_pair: dw must be [groups=%d, R, S]", groups);
    const int64_t n = counts.rows, n2 = counts2.rows;
    SL_CHECK(sl_last_dim(dy) == dw->shape[1] && sl_last_dim(x) == dw->shape[2] &&
                 sl_last_dim(dy2) == dw->shape[1] && sl_last_dim(x2) == dw->shape[2] &&
                 n <= sl_rows(dy) && n <= sl_rows(x) && n2 <= sl_rows(dy2) && n2 <= sl_rows(x2),
             "grouped_matmul_dw_pair: shapes do not match");
    int64_t *buf, *buf2;
    const int64_t r = dw->shape[1], s = dw->shape[2];
    const sl_group_counts k =
        resolve_counts("grouped_matmul_dw_pair", BE(dw), counts, groups, dy->dtype, r, s, &buf);
    const sl_group_counts k2 =
        resolve_counts("grouped_matmul_dw_pair", BE(dw), counts2, groups, dy->dtype, r, s, &buf2);
    DISPATCH(BE(dw), grouped_matmul_dw_pair, dw, dy, x, &k, dy2, x2, &k2, groups, beta, sumsq);
    free(buf);
    free(buf2);
}

/* ---- normalization ---- */

void sl_op_rmsnorm_fwd(sl_tensor *y, sl_tensor *rstd, const sl_tensor *x, const sl_tensor *w,
                       float eps) {
    need_float("rmsnorm_fwd", "x", x);
    need_like("rmsnorm_fwd", "y", y, x);
    need_like("rmsnorm_fwd", "w", w, x);
    need_dtype("rmsnorm_fwd", "rstd", rstd, SL_F32);
    need_numel("rmsnorm_fwd", "y", y, x->numel);
    SL_CHECK(x->numel % w->numel == 0, "rmsnorm_fwd: x is not rows of width %lld",
             (long long)w->numel);
    need_numel("rmsnorm_fwd", "rstd", rstd, x->numel / w->numel);
    DISPATCH(BE(y), rmsnorm_fwd, y, rstd, x, w, eps);
}

void sl_op_rmsnorm_bwd(sl_tensor *dx, sl_tensor *dw, const sl_tensor *dy, const sl_tensor *x,
                       const sl_tensor *w, const sl_tensor *rstd) {
    need_float("rmsnorm_bwd", "x", x);
    need_like("rmsnorm_bwd", "dx", dx, x);
    need_like("rmsnorm_bwd", "dy", dy, x);
    need_like("rmsnorm_bwd", "w", w, x);
    need_float("rmsnorm_bwd", "dw", dw);
    need_dtype("rmsnorm_bwd", "rstd", rstd, SL_F32);
    need_numel("rmsnorm_bwd", "dx", dx, x->numel);
    need_numel("rmsnorm_bwd", "dy", dy, x->numel);
    need_numel("rmsnorm_bwd", "dw", dw, w->numel);
    need_numel("rmsnorm_bwd", "rstd", rstd, x->numel / w->numel);
    DISPATCH(BE(dx), rmsnorm_bwd, dx, dw, dy, x, w, rstd);
}

/* ---- embedding and loss ---- */

void sl_op_embedding_fwd(sl_tensor *out, const sl_tensor *ids, const sl_tensor *table) {
    need_dtype("embedding_fwd", "ids", ids, SL_I32);
    need_float("embedding_fwd", "table", table);
    need_like("embedding_fwd", "out", out, table);
    need_numel("embedding_fwd", "out", out, ids->numel * sl_last_dim(table));
    DISPATCH(BE(out), embedding_fwd, out, ids, table);
}

void sl_op_embedding_bwd(sl_tensor *dtable, const sl_tensor *dout, const sl_tensor *ids) {
    need_dtype("embedding_bwd", "ids", ids, SL_I32);
    need_float("embedding_bwd", "dtable", dtable);
    need_float("embedding_bwd", "dout", dout);
    need_numel("embedding_bwd", "dout", dout, ids->numel * sl_last_dim(dtable));
    DISPATCH(BE(dtable), embedding_bwd, dtable, dout, ids);
}

void sl_op_cross_entropy(sl_tensor *losses, sl_tensor *dlogits, const sl_tensor *logits,
                         const sl_tensor *targets, float grad_scale) {
    need_dtype("cross_entropy", "targets", targets, SL_I32);
    need_float("cross_entropy", "logits", logits);
    if (dlogits) need_like("cross_entropy", "dlogits", dlogits, logits);
    need_dtype("cross_entropy", "losses", losses, SL_F32);
    need_numel("cross_entropy", "losses", losses, sl_rows(logits));
    need_numel("cross_entropy", "targets", targets, sl_rows(logits));
    if (dlogits) need_numel("cross_entropy", "dlogits", dlogits, logits->numel);
    DISPATCH(BE(logits), cross_entropy, losses, dlogits, logits, targets, grad_scale);
}

/* ---- gated attention ---- */

static const char *const k_gate_names[] = {[SL_GATE_NONE] = "none",
                                           [SL_GATE_HEADWISE] = "headwise",
                                           [SL_GATE_ELEMENTWISE] = "elementwise"};

const char *sl_gate_mode_name(sl_gate_mode mode) {
    return (unsigned)mode < sizeof k_gate_names / sizeof k_gate_names[0] ? k_gate_names[mode] : "?";
}

int sl_gate_mode_from_name(const char *name, sl_gate_mode *mode) {
    for (int i = 0; i < (int)(sizeof k_gate_names / sizeof k_gate_names[0]); i++)
        if (name && strcmp(name, k_gate_names[i]) == 0) {
            *mode = (sl_gate_mode)i;
            return 0;
        }
    return -1;
}

void sl_op_qgate_split(sl_tensor *q, sl_tensor *g, const sl_tensor *qall, sl_gate_mode mode) {
    SL_CHECK(q->ndim == 3, "qgate_split: q must be [T, H, D]");
    need_float("qgate_split", "qall", qall);
    need_like("qgate_split", "q", q, qall);
    if (mode != SL_GATE_NONE) need_like("qgate_split", "g", g, qall);
    int64_t t = q->shape[0], h = q->shape[1], d = q->shape[2];
    int64_t w = sl_qgate_width(mode, h, d);
    need_numel("qgate_split", "qall", qall, t * w);
    if (mode != SL_GATE_NONE)
        need_numel("qgate_split", "g", g, t * h * (mode == SL_GATE_ELEMENTWISE ? d : 1));
    DISPATCH(BE(q), qgate_split, q, g, qall, mode);
}

void sl_op_qgate_merge(sl_tensor *dqall, const sl_tensor *dq, const sl_tensor *dg,
                       sl_gate_mode mode) {
    SL_CHECK(dq->ndim == 3, "qgate_merge: dq must be [T, H, D]");
    need_float("qgate_merge", "dqall", dqall);
    need_like("qgate_merge", "dq", dq, dqall);
    if (mode != SL_GATE_NONE) need_like("qgate_merge", "dg", dg, dqall);
    int64_t t = dq->shape[0], h = dq->shape[1], d = dq->shape[2];
    int64_t w = sl_qgate_width(mode, h, d);
    need_numel("qgate_merge", "dqall", dqall, t * w);
    if (mode != SL_GATE_NONE)
        need_numel("qgate_merge", "dg", dg, t * h * (mode == SL_GATE_ELEMENTWISE ? d : 1));
    DISPATCH(BE(dqall), qgate_merge, dqall, dq, dg, mode);
}

static void check_rope(const char *op, const sl_tensor *x, const sl_tensor *pos,
                       const sl_tensor *inv_freq) {
    SL_CHECK(x->ndim == 3, "%s: x must be [T, heads, D]", op);
    need_float(op, "x", x);
    need_dtype(op, "pos", pos, SL_I32);
    need_dtype(op, "inv_freq", inv_freq, SL_F32);
    need_numel(op, "pos", pos, x->shape[0]);
    SL_CHECK(2 * inv_freq->numel <= x->shape[2], "%s: rotary dims %lld exceed head dim %lld", op,
             (long long)(2 * inv_freq->numel), (long long)x->shape[2]);
}

void sl_op_rope_fwd(sl_tensor *x, const sl_tensor *pos, const sl_tensor *inv_freq, float mscale) {
    check_rope("rope_fwd", x, pos, inv_freq);
    DISPATCH(BE(x), rope_fwd, x, pos, inv_freq, mscale);
}

void sl_op_rope_bwd(sl_tensor *dx, const sl_tensor *pos, const sl_tensor *inv_freq, float mscale) {
    check_rope("rope_bwd", dx, pos, inv_freq);
    DISPATCH(BE(dx), rope_bwd, dx, pos, inv_freq, mscale);
}

/* The shapes of sl_op_qk_norm_rope_fwd/_bwd: q-side [T, H, D], k-side [T, KV, D], qall [T, W]. */
static void check_qk(const char *op, const sl_tensor *qn, const sl_tensor *kn, const sl_tensor *g,
                     const sl_tensor *q_rstd, const sl_tensor *k_rstd, const sl_tensor *qall,
                     const sl_tensor *k, const sl_qk_norm_rope *p) {
    SL_CHECK(qn->ndim == 3 && kn->ndim == 3, "%s: q and k must be [T, heads, D]", op);
    const int64_t t = qn->shape[0], h = qn->shape[1], d = qn->shape[2], kv = kn->shape[1];
    SL_CHECK(kn->shape[0] == t && kn->shape[2] == d,
             "%s: k [%lld, %lld, %lld] against q [%lld, %lld, %lld]", op, (long long)kn->shape[0],
             (long long)kv, (long long)kn->shape[2], (long long)t, (long long)h, (long long)d);
    need_float(op, "qall", qall);
    need_like(op, "q", qn, qall);
    need_like(op, "k", kn, qall);
    need_like(op, "k input", k, qall);
    need_like(op, "qw", p->qw, qall);
    need_like(op, "kw", p->kw, qall);
    need_numel(op, "qall", qall, t * sl_qgate_width(p->mode, h, d));
    need_numel(op, "k input", k, t * kv * d);
    need_numel(op, "qw", p->qw, d);
    need_numel(op, "kw", p->kw, d);
    if (p->mode != SL_GATE_NONE) {
        SL_CHECK(g != NULL, "%s: a gate needs g", op);
        need_like(op, "g", g, qall);
        need_numel(op, "g", g, t * h * (p->mode == SL_GATE_ELEMENTWISE ? d : 1));
    }
    need_dtype(op, "q_rstd", q_rstd, SL_F32);
    need_dtype(op, "k_rstd", k_rstd, SL_F32);
    need_numel(op, "q_rstd", q_rstd, t * h);
    need_numel(op, "k_rstd", k_rstd, t * kv);
    check_rope(op, qn, p->pos, p->inv_freq);
}

void sl_op_qk_norm_rope_fwd(sl_tensor *qn, sl_tensor *kn, sl_tensor *g, sl_tensor *q_rstd,
                            sl_tensor *k_rstd, const sl_tensor *qall, const sl_tensor *k,
                            const sl_qk_norm_rope *p) {
    check_qk("qk_norm_rope_fwd", qn, kn, g, q_rstd, k_rstd, qall, k, p);
    DISPATCH(BE(qn), qk_norm_rope_fwd, qn, kn, g, q_rstd, k_rstd, qall, k, p);
}

void sl_op_qk_norm_rope_bwd(sl_tensor *dqall, sl_tensor *dk_pre, sl_tensor *dqw, sl_tensor *dkw,
                            const sl_tensor *dq, const sl_tensor *dk, const sl_tensor *dg,
                            const sl_tensor *qall, const sl_tensor *k, const sl_tensor *q_rstd,
                            const sl_tensor *k_rstd, const sl_qk_norm_rope *p) {
    const char *op = "qk_norm_rope_bwd";
    check_qk(op, dq, dk, dg, q_rstd, k_rstd, qall, k, p);
    need_like(op, "dqall", dqall, qall);
    need_numel(op, "dqall", dqall, qall->numel);
    need_like(op, "dk_pre", dk_pre, qall);
    need_numel(op, "dk_pre", dk_pre, dk->numel);
    need_float(op, "dqw", dqw);
    need_like(op, "dkw", dkw, dqw);
    need_numel(op, "dqw", dqw, p->qw->numel);
    need_numel(op, "dkw", dkw, p->kw->numel);
    DISPATCH(BE(dqall), qk_norm_rope_bwd, dqall, dk_pre, dqw, dkw, dq, dk, dg, qall, k, q_rstd,
             k_rstd, p);
}

static void check_attn(const char *op, const sl_tensor *q, const sl_tensor *k, const sl_tensor *v,
                       const sl_tensor *g, const sl_tensor *seg, int batch, int seq) {
    SL_CHECK(q->ndim == 3 && k->ndim == 3 && v->ndim == 3, "%s: q, k, v must be [T, heads, D]", op);
    need_float(op, "q", q);
    need_like(op, "k", k, q);
    need_like(op, "v", v, q);
    if (g) need_like(op, "g", g, q);
    int64_t t = q->shape[0], h = q->shape[1], d = q->shape[2], kv = k->shape[1];
    SL_CHECK(t == (int64_t)batch * seq, "%s: %lld tokens is not batch %d x seq %d", op,
             (long long)t, batch, seq);
    SL_CHECK(kv > 0 && h % kv == 0, "%s: %lld query heads not a multiple of %lld kv heads", op,
             (long long)h, (long long)kv);
    SL_CHECK(k->shape[0] == t && v->shape[0] == t && k->shape[2] == d && v->shape[1] == kv &&
                 v->shape[2] == d,
             "%s: k/v shapes do not match q", op);
    if (g)
        SL_CHECK(g->numel == t * h * d || g->numel == t * h,
                 "%s: gate must be [T, H, D] or [T, H, 1]", op);
    if (seg) { /* its values are the backend's to check: they may live on the device */
        need_dtype(op, "seg", seg, SL_I32);
        need_numel(op, "seg", seg, t);
        SL_CHECK(BE(seg) == BE(q), "%s: seg is on another backend", op);
    }
}

void sl_op_gated_attn_fwd(sl_tensor *y, sl_tensor *o, sl_tensor *lse, const sl_tensor *q,
                          const sl_tensor *k, const sl_tensor *v, const sl_tensor *g,
                          const sl_tensor *seg, int batch, int seq, float scale) {
    check_attn("gated_attn_fwd", q, k, v, g, seg, batch, seq);
    need_like("gated_attn_fwd", "y", y, q);
    need_like("gated_attn_fwd", "o", o, q);
    need_dtype("gated_attn_fwd", "lse", lse, SL_F32);
    need_numel("gated_attn_fwd", "y", y, q->numel);
    need_numel("gated_attn_fwd", "o", o, q->numel);
    need_numel("gated_attn_fwd", "lse", lse, q->shape[0] * q->shape[1]);
    DISPATCH(BE(q), gated_attn_fwd, y, o, lse, q, k, v, g, seg, batch, seq, scale);
}

void sl_op_gated_attn_bwd(sl_tensor *dq, sl_tensor *dk, sl_tensor *dv, sl_tensor *dg,
                          const sl_tensor *dy, const sl_tensor *q, const sl_tensor *k,
                          const sl_tensor *v, const sl_tensor *g, const sl_tensor *seg,
                          const sl_tensor *o, const sl_tensor *lse, int batch, int seq,
                          float scale) {
    check_attn("gated_attn_bwd", q, k, v, g, seg, batch, seq);
    need_like("gated_attn_bwd", "dq", dq, q);
    need_like("gated_attn_bwd", "dk", dk, q);
    need_like("gated_attn_bwd", "dv", dv, q);
    need_like("gated_attn_bwd", "dy", dy, q);
    need_like("gated_attn_bwd", "o", o, q);
    if (g) need_like("gated_attn_bwd", "dg", dg, q);
    need_dtype("gated_attn_bwd", "lse", lse, SL_F32);
    need_numel("gated_attn_bwd", "dq", dq, q->numel);
    need_numel("gated_attn_bwd", "dk", dk, k->numel);
    need_numel("gated_attn_bwd", "dv", dv, v->numel);
    need_numel("gated_attn_bwd", "dy", dy, q->numel);
    if (g) need_numel("gated_attn_bwd", "dg", dg, g->numel);
    DISPATCH(BE(q), gated_attn_bwd, dq, dk, dv, dg, dy, q, k, v, g, seg, o, lse, batch, seq, scale);
}

/* cache [B, L, KV, D] and the per-sequence lengths start [B] i32 on the same backend. */
static void check_cache(const char *op, const char *arg, const sl_tensor *cache,
                        const sl_tensor *start, int batch, int n) {
    SL_CHECK(cache && cache->ndim == 4 && cache->shape[1] >= 1,
             "%s: %s must be [B, L, KV, D] with L >= 1", op, arg);
    SL_CHECK(batch >= 1 && n >= 0 && cache->shape[0] == batch,
             "%s: %s holds %lld sequences, batch is %d (n %d)", op, arg, (long long)cache->shape[0],
             batch, n);
    need_dtype(op, "start", start, SL_I32);
    need_numel(op, "start", start, batch);
    need_same_backend(op, cache, start);
}

void sl_op_kv_cache_write(sl_tensor *cache, const sl_tensor *x, const sl_tensor *start, int batch,
                          int n) {
    check_cache("kv_cache_write", "cache", cache, start, batch, n);
    need_float("kv_cache_write", "cache", cache);
    need_like("kv_cache_write", "x", x, cache);
    need_same_backend("kv_cache_write", cache, x);
    SL_CHECK(x->ndim == 3 && x->shape[0] == (int64_t)batch * n && x->shape[1] == cache->shape[2] &&
                 x->shape[2] == cache->shape[3],
             "kv_cache_write: x [%lld, %lld, %lld] is not [batch %d x n %d, KV %lld, D %lld]",
             (long long)x->shape[0], (long long)x->shape[1], (long long)x->shape[2], batch, n,
             (long long)cache->shape[2], (long long)cache->shape[3]);
    if (n == 0) return;
    DISPATCH(BE(cache), kv_cache_write, cache, x, start, batch, n);
}

void sl_op_gated_attn_decode(sl_tensor *y, const sl_tensor *q, const sl_tensor *kc,
                             const sl_tensor *vc, const sl_tensor *g, const sl_tensor *start,
                             int batch, int n, float scale) {
    const char *op = "gated_attn_decode";
    check_cache(op, "kc", kc, start, batch, n);
    check_cache(op, "vc", vc, start, batch, n);
    SL_CHECK(q->ndim == 3, "%s: q must be [B*n, H, D]", op);
    need_float(op, "q", q);
    need_like(op, "kc", kc, q);
    need_like(op, "vc", vc, q);
    need_like(op, "y", y, q);
    if (g) need_like(op, "g", g, q);
    const int64_t t = q->shape[0], h = q->shape[1], d = q->shape[2], kv = kc->shape[2];
    SL_CHECK(t == (int64_t)batch * n, "%s: %lld query rows is not batch %d x n %d", op,
             (long long)t, batch, n);
    SL_CHECK(kv > 0 && h % kv == 0, "%s: %lld query heads not a multiple of %lld kv heads", op,
             (long long)h, (long long)kv);
    for (int i = 0; i < 4; i++)
        SL_CHECK(vc->shape[i] == kc->shape[i], "%s: kc and vc differ in shape", op);
    SL_CHECK(kc->shape[3] == d, "%s: cache head dim %lld, q's %lld", op, (long long)kc->shape[3],
             (long long)d);
    need_numel(op, "y", y, q->numel);
    if (g)
        SL_CHECK(g->numel == t * h * d || g->numel == t * h,
                 "%s: gate must be [B*n, H, D] or [B*n, H, 1]", op);
    need_same_backend(op, q, kc);
    need_same_backend(op, q, y);
    if (t == 0) return;
    DISPATCH(BE(q), gated_attn_decode, y, q, kc, vc, g, start, batch, n, scale);
}

void sl_op_sigmoid_mean(sl_tensor *out, const sl_tensor *g) {
    need_scalar("sigmoid_mean", out, g);
    DISPATCH(BE(g), sigmoid_mean, out, g);
}

void sl_op_attn_sink_share(sl_tensor *out, const sl_tensor *q, const sl_tensor *k,
                           const sl_tensor *lse, int batch, int seq, float scale) {
    check_attn("attn_sink_share", q, k, k, NULL, NULL, batch, seq);
    need_scalar("attn_sink_share", out, q);
    need_dtype("attn_sink_share", "lse", lse, SL_F32);
    need_numel("attn_sink_share", "lse", lse, q->shape[0] * q->shape[1]);
    need_same_backend("attn_sink_share", q, lse);
    DISPATCH(BE(q), attn_sink_share, out, q, k, lse, batch, seq, scale);
}

/* ---- mixture of experts ---- */

void sl_op_router_fwd(sl_tensor *probs, sl_tensor *topk_idx, sl_tensor *topk_w, sl_tensor *stats,
                      const sl_tensor *logits, const sl_tensor *bias, bool norm_topk) {
    need_dtype("router_fwd", "logits", logits, SL_F32); /* the router is always fp32 */
    need_dtype("router_fwd", "probs", probs, SL_F32);
    need_dtype("router_fwd", "topk_idx", topk_idx, SL_I32);
    need_dtype("router_fwd", "topk_w", topk_w, SL_F32);
    int64_t n = sl_rows(logits), e = sl_last_dim(logits), k = sl_last_dim(topk_idx);
    SL_CHECK(k >= 1 && k <= e, "router_fwd: top-%lld of %lld experts", (long long)k, (long long)e);
    need_numel("router_fwd", "probs", probs, n * e);
    need_numel("router_fwd", "topk_idx", topk_idx, n * k);
    need_numel("router_fwd", "topk_w", topk_w, n * k);
    need_numel("router_fwd", "stats", stats, e + 1);
    need_dtype("router_fwd", "stats", stats, SL_F32);
    if (bias) need_dtype("router_fwd", "bias", bias, SL_F32);
    if (bias) need_numel("router_fwd", "bias", bias, e);
    DISPATCH(BE(logits), router_fwd, probs, topk_idx, topk_w, stats, logits, bias, norm_topk);
}

void sl_op_router_bwd(sl_tensor *dlogits, const sl_tensor *dtopk_w, const sl_tensor *probs,
                      const sl_tensor *topk_idx, const sl_tensor *topk_w, const sl_tensor *logits,
                      const sl_tensor *lbl_grad, float z_scale, bool norm_topk) {
    need_dtype("router_bwd", "dlogits", dlogits, SL_F32);
    need_dtype("router_bwd", "dtopk_w", dtopk_w, SL_F32);
    need_dtype("router_bwd", "probs", probs, SL_F32);
    need_dtype("router_bwd", "topk_idx", topk_idx, SL_I32);
    need_dtype("router_bwd", "topk_w", topk_w, SL_F32);
    need_dtype("router_bwd", "logits", logits, SL_F32);
    if (lbl_grad) need_dtype("router_bwd", "lbl_grad", lbl_grad, SL_F32);
    need_numel("router_bwd", "dlogits", dlogits, probs->numel);
    need_numel("router_bwd", "dtopk_w", dtopk_w, topk_w->numel);
    if (lbl_grad) need_numel("router_bwd", "lbl_grad", lbl_grad, sl_last_dim(probs));
    DISPATCH(BE(dlogits), router_bwd, dlogits, dtopk_w, probs, topk_idx, topk_w, logits, lbl_grad,
             z_scale, norm_topk);
}

void sl_op_moe_sort(sl_tensor *counts, sl_tensor *sorted_token, sl_tensor *slot_pos,
                    const sl_tensor *topk_idx) {
    need_dtype("moe_sort", "counts", counts, SL_I32);
    need_dtype("moe_sort", "sorted_token", sorted_token, SL_I32);
    need_dtype("moe_sort", "slot_pos", slot_pos, SL_I32);
    need_dtype("moe_sort", "topk_idx", topk_idx, SL_I32);
    need_numel("moe_sort", "sorted_token", sorted_token, topk_idx->numel);
    need_numel("moe_sort", "slot_pos", slot_pos, topk_idx->numel);
    DISPATCH(BE(topk_idx), moe_sort, counts, sorted_token, slot_pos, topk_idx);
}

void sl_op_moe_counts(sl_tensor *acc, sl_tensor *freq, const sl_tensor *counts, float scale) {
    need_dtype("moe_counts", "counts", counts, SL_I32);
    if (acc) {
        need_dtype("moe_counts", "acc", acc, SL_I32);
        need_numel("moe_counts", "acc", acc, counts->numel);
        need_same_backend("moe_counts", acc, counts);
    }
    if (freq) {
        need_dtype("moe_counts", "freq", freq, SL_F32);
        need_numel("moe_counts", "freq", freq, counts->numel);
        need_same_backend("moe_counts", freq, counts);
    }
    if (acc || freq) DISPATCH(BE(counts), moe_counts, acc, freq, counts, scale);
}

void sl_op_gather_rows(sl_tensor *dst, const sl_tensor *src, const sl_tensor *idx) {
    need_dtype("gather_rows", "idx", idx, SL_I32);
    need_float("gather_rows", "src", src);
    need_like("gather_rows", "dst", dst, src);
    SL_CHECK(sl_last_dim(dst) == sl_last_dim(src), "gather_rows: row widths differ");
    SL_CHECK(sl_rows(dst) >= idx->numel, "gather_rows: %lld indices into %lld rows",
             (long long)idx->numel, (long long)sl_rows(dst));
    DISPATCH(BE(dst), gather_rows, dst, src, idx);
}

void sl_op_gather_add_rows(sl_tensor *dst, const sl_tensor *src, const sl_tensor *pos, int k) {
    need_dtype("gather_add_rows", "pos", pos, SL_I32);
    need_float("gather_add_rows", "src", src);
    need_like("gather_add_rows", "dst", dst, src);
    SL_CHECK(sl_last_dim(dst) == sl_last_dim(src), "gather_add_rows: row widths differ");
    SL_CHECK(k >= 1 && k <= 32, "gather_add_rows: k = %d is not in 1..32", k);
    need_numel("gather_add_rows", "pos", pos, sl_rows(dst) * k);
    DISPATCH(BE(dst), gather_add_rows, dst, src, pos, k);
}

void sl_op_scatter_add_rows(sl_tensor *dst, const sl_tensor *src, const sl_tensor *idx) {
    need_dtype("scatter_add_rows", "idx", idx, SL_I32);
    need_float("scatter_add_rows", "src", src);
    need_like("scatter_add_rows", "dst", dst, src);
    SL_CHECK(sl_last_dim(dst) == sl_last_dim(src), "scatter_add_rows: row widths differ");
    SL_CHECK(sl_rows(src) >= idx->numel, "scatter_add_rows: %lld indices over %lld rows",
             (long long)idx->numel, (long long)sl_rows(src));
    DISPATCH(BE(dst), scatter_add_rows, dst, src, idx);
}

void sl_op_moe_combine(sl_tensor *y, const sl_tensor *x, const sl_tensor *slot_pos,
                       const sl_tensor *w) {
    need_dtype("moe_combine", "slot_pos", slot_pos, SL_I32);
    need_float("moe_combine", "x", x);
    need_like("moe_combine", "y", y, x);
    need_dtype("moe_combine", "w", w, SL_F32);
    need_numel("moe_combine", "slot_pos", slot_pos, w->numel);
    SL_CHECK(sl_rows(w) == sl_rows(y) && sl_last_dim(x) == sl_last_dim(y) && sl_rows(x) >= w->numel,
             "moe_combine: shapes do not match");
    DISPATCH(BE(y), moe_combine, y, x, slot_pos, w);
}

void sl_op_moe_combine_bwd(sl_tensor *dx, sl_tensor *dw, const sl_tensor *dy, const sl_tensor *x,
                           const sl_tensor *slot_pos, const sl_tensor *w) {
    need_dtype("moe_combine_bwd", "slot_pos", slot_pos, SL_I32);
    need_float("moe_combine_bwd", "x", x);
    need_like("moe_combine_bwd", "dx", dx, x);
    need_like("moe_combine_bwd", "dy", dy, x);
    need_dtype("moe_combine_bwd", "w", w, SL_F32);
    need_dtype("moe_combine_bwd", "dw", dw, SL_F32);
    need_numel("moe_combine_bwd", "dw", dw, w->numel);
    need_numel("moe_combine_bwd", "dy", dy, sl_rows(w) * sl_last_dim(x));
    SL_CHECK(sl_rows(dx) >= w->numel && sl_last_dim(dx) == sl_last_dim(x),
             "moe_combine_bwd: dx shape does not match");
    DISPATCH(BE(dx), moe_combine_bwd, dx, dw, dy, x, slot_pos, w);
}

void sl_op_swiglu_fwd(sl_tensor *h, const sl_tensor *gu) {
    need_float("swiglu_fwd", "gu", gu);
    need_like("swiglu_fwd", "h", h, gu);
    SL_CHECK(sl_last_dim(gu) == 2 * sl_last_dim(h) && sl_rows(gu) == sl_rows(h),
             "swiglu_fwd: gu must be [M, 2I] for h [M, I]");
    DISPATCH(BE(h), swiglu_fwd, h, gu);
}

void sl_op_swiglu_bwd(sl_tensor *dgu, const sl_tensor *dh, const sl_tensor *gu) {
    need_float("swiglu_bwd", "gu", gu);
    need_like("swiglu_bwd", "dgu", dgu, gu);
    need_like("swiglu_bwd", "dh", dh, gu);
    need_numel("swiglu_bwd", "dgu", dgu, gu->numel);
    SL_CHECK(2 * dh->numel == gu->numel, "swiglu_bwd: dh must be half of gu");
    DISPATCH(BE(dgu), swiglu_bwd, dgu, dh, gu);
}

void sl_op_rowgate_fwd(sl_tensor *y, const sl_tensor *x, const sl_tensor *s) {
    need_float("rowgate_fwd", "x", x);
    need_like("rowgate_fwd", "y", y, x);
    need_like("rowgate_fwd", "s", s, x);
    need_numel("rowgate_fwd", "y", y, x->numel);
    need_numel("rowgate_fwd", "s", s, sl_rows(x));
    DISPATCH(BE(y), rowgate_fwd, y, x, s);
}

void sl_op_rowgate_bwd(sl_tensor *dx, sl_tensor *ds, const sl_tensor *dy, const sl_tensor *x,
                       const sl_tensor *s) {
    need_float("rowgate_bwd", "x", x);
    need_like("rowgate_bwd", "dx", dx, x);
    need_like("rowgate_bwd", "ds", ds, x);
    need_like("rowgate_bwd", "dy", dy, x);
    need_like("rowgate_bwd", "s", s, x);
    need_numel("rowgate_bwd", "dx", dx, x->numel);
    need_numel("rowgate_bwd", "dy", dy, x->numel);
    need_numel("rowgate_bwd", "ds", ds, sl_rows(x));
    DISPATCH(BE(dx), rowgate_bwd, dx, ds, dy, x, s);
}

/* ---- optimizer ---- */

void sl_op_adamw(sl_tensor *p, const sl_tensor *g, sl_tensor *m, sl_tensor *v, sl_tensor *p_copy,
                 const sl_adamw_params *hp) {
    /* master weights, gradients and optimizer state are fp32 on every backend */
    need_dtype("adamw", "p", p, SL_F32);
    need_dtype("adamw", "g", g, SL_F32);
    need_dtype("adamw", "m", m, SL_F32);
    need_dtype("adamw", "v", v, SL_F32);
    need_numel("adamw", "g", g, p->numel);
    need_numel("adamw", "m", m, p->numel);
    need_numel("adamw", "v", v, p->numel);
    if (p_copy) {
        need_float("adamw", "p_copy", p_copy);
        need_numel("adamw", "p_copy", p_copy, p->numel);
        need_same_backend("adamw", p, p_copy);
    }
    SL_CHECK(hp->step >= 1, "adamw: step must be >= 1");
    DISPATCH(BE(p), adamw, p, g, m, v, p_copy, hp);
}
