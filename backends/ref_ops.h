/*
 * backends/ref_ops.h - naive double-precision references of the operations in core/ops.h.
 *
 * Shared by the per-area op tests and the backend conformance harness (backends/conformance.c), so
 * each formula is written once. Every function takes the float (and i32) arrays a kernel
 * sees and writes double results; layouts and semantics are those of the matching sl_op_x()
 * in core/ops.h. Outputs the operation accumulates into (parameter gradients) must hold their
 * initial values on entry; outputs it writes are overwritten. Straight loops without blocking
 * or threads: slow and obviously right.
 */
#ifndef SL_BACKENDS_REF_OPS_H
#define SL_BACKENDS_REF_OPS_H

#include <stdbool.h>
#include <stdint.h>

#include "core/ops.h"

/* 1 / (1 + e^-x) in double. */
double sl_ref_sigmoid(double x);
/* dst[i] = (float)src[i], for comparing with sl_test_compare. */
void sl_ref_f32(float *dst, const double *src, int64_t n);

/* c [m, n] = alpha op(a) op(b) + beta c0 (c0 is read only when beta != 0). */
void sl_ref_matmul(double *c, const float *a, const float *b, const float *c0, int64_t m, int64_t n,
                   int64_t k, bool trans_a, bool trans_b, double alpha, double beta);
/* c [rows, out]: the rows of the groups get a_g op(b_g) + beta c0, the rows past sum(counts)
 * keep c0; b is [groups, r, s], (in, out) = (s, r) with trans_b, else (r, s). */
void sl_ref_grouped_matmul(double *c, const float *a, const float *b, const float *c0,
                           const int64_t *counts, int groups, int64_t rows, int64_t r, int64_t s,
                           bool trans_b, double beta);
/* dw [groups, r, s] += dy_g^T x_g with dy [n, r], x [n, s]. */
void sl_ref_grouped_matmul_dw(double *dw, const float *dy, const float *x, const int64_t *counts,
                              int groups, int64_t r, int64_t s);

/* y = x rstd w per row of d, rstd = 1 / sqrt(mean(x^2) + eps). */
void sl_ref_rmsnorm_fwd(double *y, double *rstd, const float *x, const float *w, int64_t rows,
                        int64_t d, double eps);
/* dx written, dw accumulated; rstd is the forward's saved value, as the kernel receives it. */
void sl_ref_rmsnorm_bwd(double *dx, double *dw, const float *dy, const float *x, const float *w,
                        const float *rstd, int64_t rows, int64_t d);

/* out [n, c] = the table's rows ids; and its backward, dtable's rows ids accumulating dout. */
void sl_ref_embedding_fwd(double *out, const int32_t *ids, const float *table, int64_t n,
                          int64_t c);
void sl_ref_embedding_bwd(double *dtable, const float *dout, const int32_t *ids, int64_t n,
                          int64_t c);
/* losses [n]; dlogits [n, v] when not NULL. */
void sl_ref_cross_entropy(double *losses, double *dlogits, const float *logits,
                          const int32_t *targets, int64_t n, int64_t v, double grad_scale);

/* q [t, h, d], g [t, h, d] (elementwise) or [t, h] (headwise) or unused (none). */
void sl_ref_qgate_split(double *q, double *g, const float *qall, int64_t t, int64_t h, int64_t d,
                        sl_gate_mode mode);
void sl_ref_qgate_merge(double *dqall, const float *dq, const float *dg, int64_t t, int64_t h,
                        int64_t d, sl_gate_mode mode);

/* One head vector x [d]: out = R x (sign 1) or R^T x (sign -1), rotate-half, the first
 * 2 * half dims rotating by pos * inv_freq[i], cos and sin times mscale. */
void sl_ref_rope(double *out, const float *x, int d, int half, const float *inv_freq, int pos,
                 double mscale, int sign);
/* The same over x [t, nh, d] with pos [t]. */
void sl_ref_rope_all(double *out, const float *x, const int32_t *pos, int64_t t, int64_t nh, int d,
                     int half, const float *inv_freq, double mscale, int sign);

/* sl_op_qk_norm_rope_fwd in double (qall's layout `mode`; g unused without a gate): per head row
 * rstd = 1 / sqrt(mean(x^2) + eps), y = x rstd w, out = R y (rope as sl_ref_rope, on y unrounded).
 * q [t, h, d] of qall, k [t, kv, d]. */
void sl_ref_qk_norm_rope_fwd(double *qn, double *kn, double *g, double *q_rstd, double *k_rstd,
                             const float *qall, const float *k, const float *qw, const float *kw,
                             int64_t t, int64_t h, int64_t kv, int d, double eps, sl_gate_mode mode,
                             const int32_t *pos, int half, const float *inv_freq, double mscale);
/* Its backward: dqall (the gate's place holding dg) and dk_pre written, dqw and dkw accumulated;
 * q_rstd and k_rstd the forward's saved values, as the kernel receives them. */
void sl_ref_qk_norm_rope_bwd(double *dqall, double *dk_pre, double *dqw, double *dkw,
                             const float *dq, const float *dk, const float *dg, const float *qall,
                             const float *k, const float *qw, const float *kw, const float *q_rstd,
                             const float *k_rstd, int64_t t, int64_t h, int64_t kv, int d,
                             sl_gate_mode mode, const int32_t *pos, int half, const float *inv_freq,
                             double mscale);

/* Softmax probabilities p[0..i] of query row i of sequence b, head hh, over keys 0..i (q, k
 * laid out as in sl_op_gated_attn_fwd); returns the row's log-sum-exp. */
double sl_ref_attn_probs(double *p, const float *q, const float *k, int b, int i, int hh, int s,
                         int h, int kv, int d, double scale);
/* Causal attention with GQA and output gate (core/ops.h), full softmax rows. seg [b * s]: the
 * document start of each query (query i sees keys seg[i] .. i of its sequence), or NULL (keys
 * 0 .. i). */
void sl_ref_attn_fwd(double *y, double *o, double *lse, const float *q, const float *k,
                     const float *v, const float *g, const int32_t *seg, sl_gate_mode mode, int b,
                     int s, int h, int kv, int d, double scale);
/* sl_op_gated_attn_decode: query row (b, i) at position start[b] + i against keys
 * 0 .. min(start[b] + i, len - 1) of cache row b (kc, vc [b, len, kv, d]). */
void sl_ref_attn_decode(double *y, const float *q, const float *kc, const float *vc, const float *g,
                        const int32_t *start, sl_gate_mode mode, int b, int n, int len, int h,
                        int kv, int d, double scale);
/* Its gradients (all written; dg unused without a gate), recomputing the forward in double. */
void sl_ref_attn_bwd(double *dq, double *dk, double *dv, double *dg, const float *dy,
                     const float *q, const float *k, const float *v, const float *g,
                     const int32_t *seg, sl_gate_mode mode, int b, int s, int h, int kv, int d,
                     double scale);
/* sl_op_attn_sink_share: the mean over rows (b, i >= 1, h) of exp(scale q_i . k_0 - lse_i) with
 * the given lse [t, h] (0 when s < 2). */
double sl_ref_attn_sink_share(const float *q, const float *k, const float *lse, int b, int s, int h,
                              int kv, int d, double scale);

/* Router of one row (e <= 256): probs p [e], top-k idx (descending score = p + bias, ties to
 * the lower index), weights w (normalized when norm) and the row's log-sum-exp. */
void sl_ref_router_row(const float *l, const float *bias, int e, int k, bool norm, double *p,
                       int *idx, double *w, double *lse);
/* dlogits [e] of one row from the inputs of sl_op_router_bwd (lbl may be NULL). */
void sl_ref_router_bwd_row(double *dl, const float *dw, const float *p, const int32_t *idx,
                           const float *w, const float *l, const float *lbl, int e, int k,
                           double z_scale, bool norm);

/* Stable counting sort of the n*k slots by expert (topk_idx in [0, e)). */
void sl_ref_moe_sort(int32_t *counts, int32_t *sorted_token, int32_t *slot_pos,
                     const int32_t *topk_idx, int64_t n, int64_t k, int64_t e);
void sl_ref_moe_combine(double *y, const float *x, const int32_t *slot_pos, const float *w,
                        int64_t n, int64_t k, int64_t c);
/* dx rows at slot_pos written (others untouched), dw [n, k] written. */
void sl_ref_moe_combine_bwd(double *dx, double *dw, const float *dy, const float *x,
                            const int32_t *slot_pos, const float *w, int64_t n, int64_t k,
                            int64_t c);
void sl_ref_swiglu_fwd(double *h, const float *gu, int64_t m, int64_t width);
void sl_ref_swiglu_bwd(double *dgu, const float *dh, const float *gu, int64_t m, int64_t width);
void sl_ref_rowgate_fwd(double *y, const float *x, const float *s, int64_t n, int64_t c);
void sl_ref_rowgate_bwd(double *dx, double *ds, const float *dy, const float *x, const float *s,
                        int64_t n, int64_t c);

/* One AdamW step on double state p, m, v (updated in place) from gradient g. */
void sl_ref_adamw(double *p, double *m, double *v, const float *g, int64_t n,
                  const sl_adamw_params *hp);

#endif
