/*
 * core/ops_attn.c - the gated attention's operations (core/ops.h, "gated attention" and
 * "decoding with a KV cache"): their argument checks, then the dispatch (core/ops_check.h).
 */
#include <string.h>

#include "core/ops_check.h"

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
