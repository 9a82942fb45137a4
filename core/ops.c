/*
 * core/ops.c - checks each operation's arguments, then dispatches to the backend: memory
 * helpers, dense linear algebra (the grouped GEMMs too), norms, embedding and loss, optimizer.
 * The gated attention's operations are in core/ops_attn.c, the MoE's in core/ops_moe.c; the
 * checks they share in core/ops_check.h.
 *
 * Shape and dtype mismatches between operations are programming errors inside sluice, so
 * they stop the run (sl_fatal) with the operation's name and the offending shapes.
 */
#include "core/ops.h"

#include <stdlib.h>
#include <string.h>

#include "core/ops_check.h"

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

void sl_op_grouped_matmul_swiglu(sl_tensor *h, sl_tensor *gu, const sl_tensor *a,
                                 const sl_tensor *b, sl_group_counts counts, int groups) {
    need_float("grouped_matmul_swiglu", "a", a);
    need_like("grouped_matmul_swiglu", "b", b, a);
    need_like("grouped_matmul_swiglu", "gu", gu, a);
    need_like("grouped_matmul_swiglu", "h", h, a);
    SL_CHECK(b->ndim == 3 && b->shape[0] == groups && b->shape[1] % 2 == 0,
             "grouped_matmul_swiglu: b must be [groups=%d, 2I, S]", groups);
    const int64_t in = b->shape[2], width = b->shape[1] / 2, n = counts.rows;
    SL_CHECK(sl_last_dim(a) == in && sl_last_dim(gu) == 2 * width && sl_last_dim(h) == width &&
                 n <= sl_rows(a) && n <= sl_rows(gu) && n <= sl_rows(h),
             "grouped_matmul_swiglu: a [%lld, %lld], gu [%lld, %lld], h [%lld, %lld], b [%d, %lld, "
             "%lld], %lld rows",
             (long long)sl_rows(a), (long long)sl_last_dim(a), (long long)sl_rows(gu),
             (long long)sl_last_dim(gu), (long long)sl_rows(h), (long long)sl_last_dim(h), groups,
             (long long)b->shape[1], (long long)in, (long long)n);
    SL_CHECK(h->data != gu->data, "grouped_matmul_swiglu: h and gu are the same memory");
    int64_t *buf;
    const sl_group_counts k = resolve_counts("grouped_matmul_swiglu", BE(gu), counts, groups,
                                             a->dtype, b->shape[1], in, &buf);
    DISPATCH(BE(gu), grouped_matmul_swiglu, h, gu, a, b, &k, groups);
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

void sl_op_grouped_matmul_dw_segments(sl_tensor *dw, const sl_dw_segment *segs, int nseg,
                                      int groups, float beta, sl_tensor *sumsq) {
    static const char *op = "grouped_matmul_dw_segments";
    SL_CHECK(nseg >= 1 && nseg <= SL_DW_MAX_SEGMENTS, "%s: %d segments (1 to %d)", op, nseg,
             SL_DW_MAX_SEGMENTS);
    need_float(op, "dw", dw);
    need_sumsq(op, sumsq, dw);
    SL_CHECK(dw->ndim == 3 && dw->shape[0] == groups, "%s: dw must be [groups=%d, R, S]", op,
             groups);
    const int64_t r = dw->shape[1], s = dw->shape[2];
    sl_dw_segment k[SL_DW_MAX_SEGMENTS];
    int64_t *buf[SL_DW_MAX_SEGMENTS];
    for (int i = 0; i < nseg; i++) {
        const sl_dw_segment *g = &segs[i];
        need_float(op, "dy", g->dy);
        need_like(op, "dy", g->dy, segs[0].dy);
        need_like(op, "x", g->x, segs[0].dy);
        const int64_t n = g->counts.rows;
        SL_CHECK(sl_last_dim(g->dy) == r && sl_last_dim(g->x) == s && n <= sl_rows(g->dy) &&
                     n <= sl_rows(g->x),
                 "%s: segment %d's shapes do not match dw [%d, %lld, %lld]", op, i, groups,
                 (long long)r, (long long)s);
        k[i] = *g;
        k[i].counts = resolve_counts(op, BE(dw), g->counts, groups, g->dy->dtype, r, s, &buf[i]);
    }
    DISPATCH(BE(dw), grouped_matmul_dw_segments, dw, k, nseg, groups, beta, sumsq);
    for (int i = 0; i < nseg; i++) free(buf[i]);
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

void sl_op_rmsnorm_bwd(sl_tensor *dx, sl_tensor *dw, const sl_tensor *dy, const sl_tensor *dy_add,
                       const sl_tensor *x, const sl_tensor *w, const sl_tensor *rstd,
                       const sl_tensor *dres) {
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
    if (dres) {
        need_like("rmsnorm_bwd", "dres", dres, x);
        need_numel("rmsnorm_bwd", "dres", dres, x->numel);
    }
    if (dy_add) {
        need_same_backend("rmsnorm_bwd", dx, dy_add);
        need_dtype("rmsnorm_bwd", "dy_add", dy_add, SL_F32);
        need_numel("rmsnorm_bwd", "dy_add", dy_add, x->numel);
    }
    DISPATCH(BE(dx), rmsnorm_bwd, dx, dw, dy, dy_add, x, w, rstd, dres);
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
