/*
 * core/ops_moe.c - the mixture-of-experts operations (core/ops.h, "mixture of experts"): their
 * argument checks, then the dispatch (core/ops_check.h).
 */
#include "core/ops_check.h"

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

void sl_op_gather_add_rows(sl_tensor *dst, const sl_tensor *src, const sl_tensor *pos, int k,
                           float beta) {
    need_dtype("gather_add_rows", "pos", pos, SL_I32);
    need_float("gather_add_rows", "src", src);
    need_like("gather_add_rows", "dst", dst, src);
    SL_CHECK(sl_last_dim(dst) == sl_last_dim(src), "gather_add_rows: row widths differ");
    SL_CHECK(k >= 1 && k <= 32, "gather_add_rows: k = %d is not in 1..32", k);
    need_numel("gather_add_rows", "pos", pos, sl_rows(dst) * k);
    SL_CHECK(beta == 0.0f || beta == 1.0f, "gather_add_rows: beta = %g is not 0 or 1", beta);
    DISPATCH(BE(dst), gather_add_rows, dst, src, pos, k, beta);
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
                       const sl_tensor *w, const sl_tensor *res) {
    need_dtype("moe_combine", "slot_pos", slot_pos, SL_I32);
    need_float("moe_combine", "x", x);
    need_like("moe_combine", "y", y, x);
    need_dtype("moe_combine", "w", w, SL_F32);
    need_numel("moe_combine", "slot_pos", slot_pos, w->numel);
    SL_CHECK(sl_rows(w) == sl_rows(y) && sl_last_dim(x) == sl_last_dim(y) && sl_rows(x) >= w->numel,
             "moe_combine: shapes do not match");
    if (res) {
        need_like("moe_combine", "res", res, y);
        need_numel("moe_combine", "res", res, y->numel);
        SL_CHECK(res->data != y->data, "moe_combine: res is y itself (it must be another tensor)");
    }
    DISPATCH(BE(y), moe_combine, y, x, slot_pos, w, res);
}

void sl_op_moe_combine_bwd(sl_tensor *dx, sl_tensor *dw, const sl_tensor *dy, const sl_tensor *x,
                           const sl_tensor *slot_pos, const sl_tensor *w) {
    need_dtype("moe_combine_bwd", "slot_pos", slot_pos, SL_I32);
    need_float("moe_combine_bwd", "dx", dx);
    need_like("moe_combine_bwd", "dy", dy, dx);
    need_dtype("moe_combine_bwd", "w", w, SL_F32);
    need_numel("moe_combine_bwd", "dy", dy, sl_rows(w) * sl_last_dim(dx));
    SL_CHECK((dw == NULL) == (x == NULL),
             "moe_combine_bwd: dw and x go together (both given, or both NULL for dx alone)");
    SL_CHECK(sl_rows(dx) >= w->numel, "moe_combine_bwd: dx has fewer rows than slots");
    if (dw) {
        need_like("moe_combine_bwd", "x", x, dx);
        need_dtype("moe_combine_bwd", "dw", dw, SL_F32);
        need_numel("moe_combine_bwd", "dw", dw, w->numel);
        SL_CHECK(sl_last_dim(dx) == sl_last_dim(x), "moe_combine_bwd: dx shape does not match");
    }
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
