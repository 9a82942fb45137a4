/*
 * core/ops.h - every operation the model uses, dispatched to the tensor's backend.
 *
 * The model calls these and nothing else to compute. Each sl_op_x() checks shapes and dtypes,
 * then calls the backend's implementation (core/backend_impl.h). The CPU kernels live next to
 * their concern (attention/rope_cpu.c, moe/router_cpu.c, ...) beside their CUDA versions.
 *
 * Conventions (all operations):
 *   - Tensors are row-major. "x [N, C]" means x holds N*C elements seen as N rows of C; any
 *     leading dimensions are folded into N.
 *   - Gradients of PARAMETERS accumulate (+=) so that micro-batches sum without extra
 *     buffers; gradients of ACTIVATIONS are written (=). Each op says which.
 *   - Index tensors are SL_I32. Host arrays (counts) are plain C arrays.
 *   - fp32 on the CPU; the router is always fp32 on every backend. A device backend also
 *     takes bf16 operands; which operands of an op must share a dtype is the table in
 *     docs/cuda.md ("Precision"), checked below in core/ops.c.
 */
#ifndef SL_OPS_H
#define SL_OPS_H

#include <stdbool.h>
#include <stdint.h>

#include "core/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- memory-level helpers ------------------------------------------------------------ */

/* x[i] = value; x is a float tensor or an i32 tensor (value converted to an integer). */
void sl_op_fill(sl_tensor *x, float value);
/* y = a + b (y may alias a or b). */
void sl_op_add(sl_tensor *y, const sl_tensor *a, const sl_tensor *b);
/* y += alpha * x */
void sl_op_axpy(sl_tensor *y, const sl_tensor *x, float alpha);
/* x *= s */
void sl_op_scale(sl_tensor *x, float s);
/* dst = src converted to dst's dtype (fp32 <-> bf16, round to nearest even; same numel). */
void sl_op_convert(sl_tensor *dst, const sl_tensor *src);
/* Sum and sum of squares of all elements into the device scalar out (a 1-element fp32
 * tensor on x's backend), accumulated in double on the CPU. Nothing is read by the host:
 * callers copy scalars out once per step (see docs/architecture.md, "Host reads"). */
void sl_op_sum(sl_tensor *out, const sl_tensor *x);
void sl_op_sumsq(sl_tensor *out, const sl_tensor *x);
/* Largest |x[i]| into the device scalar out (0 for an empty x; NaN when any element is NaN, so
 * a diverged activation shows instead of hiding behind the finite ones). */
void sl_op_absmax(sl_tensor *out, const sl_tensor *x);

/* ---- dense linear algebra ------------------------------------------------------------ */

/* C = alpha * op(A) op(B) + beta * C for row-major matrices A [.., K] etc. With trans_a,
 * A is stored [K, M]; with trans_b, B is stored [N, K] (the layout of a Linear weight
 * [out, in], so y = x W^T is sl_op_matmul(y, x, W, false, true, 1, 0)). */
void sl_op_matmul(sl_tensor *c, const sl_tensor *a, const sl_tensor *b, bool trans_a, bool trans_b,
                  float alpha, float beta);

/* The rows of each group of a grouped GEMM (below): counts[g] on the host, or an I32 tensor
 * [groups] on the operands' backend (the MoE sort's counts), which the backend's kernel reads
 * on the device where it can (no host read: the host does not wait for the device) and the op
 * reads on the host where it cannot (sl_grouped_counts_on_device says which). rows: their sum,
 * which the caller knows either way (how many rows it routed). Build with sl_counts_host or
 * sl_counts_device. */
typedef struct sl_group_counts {
    const int64_t *host;  /* [groups] on the host, or NULL */
    const sl_tensor *dev; /* [groups] I32 on the device, where host is NULL */
    int64_t rows;         /* sum of the counts */
} sl_group_counts;
/* Host counts (rows = their sum; a negative count stops the run). */
sl_group_counts sl_counts_host(const int64_t *counts, int groups);
/* Device counts: counts [groups] I32 that sum to rows (not checked on the host: reading them
 * is what this avoids; the CPU backend checks them where it reads them). */
sl_group_counts sl_counts_device(const sl_tensor *counts, int64_t rows);
/* The counts on the host: c.host itself, or device counts read into *buf (allocated here, the
 * caller frees it; one host read, checked against c.rows; none where c.rows is 0: all zero).
 * The one place that reads them:
 * core/ops.c for backends that cannot take device counts, and a backend whose kernel declined
 * the call after saying it could. */
const int64_t *sl_group_counts_host(sl_group_counts c, int groups, int64_t **buf);
/* Whether be runs the grouped GEMMs (forward, data gradient, weight gradient) over a stack B
 * [groups, r, s] with operands of dtype dt from device counts without reading them on the
 * host: the CPU always (its "device" memory is the host's), the CUDA backend where its Hopper
 * kernel runs them (moe/grouped_matmul_sm90.cu; cuBLAS takes host sizes). Elsewhere each op
 * given device counts reads them first (one host read per call). */
bool sl_grouped_counts_on_device(sl_backend *be, sl_dtype dt, int64_t r, int64_t s, int groups);

/* One GEMM per group over row ranges: the rows of A (and C) are split into `groups`
 * consecutive blocks of counts[g] rows (sum <= rows of A). B is a stack
 * [groups, R, S]. With trans_b: A [n, S] -> C [n, R] = A_g B_g^T; without: A [n, R] ->
 * C [n, S] = A_g B_g. C = result + beta * C. Rows of C beyond sum(counts) are untouched. */
void sl_op_grouped_matmul(sl_tensor *c, const sl_tensor *a, const sl_tensor *b,
                          sl_group_counts counts, int groups, bool trans_b, float beta);
/* Weight gradient of the above: dW_g [R, S] = dY_g^T X_g + beta * dW_g, with dY [n, R],
 * X [n, S], for every group: an empty group gets beta * dW_g (beta 0 writes zeros without
 * reading dW, so a gradient's first writer needs no zeroed buffer; beta 1 accumulates).
 * sumsq: NULL, or [1] fp32 on dW's (fp32) backend: sumsq += the sum of the squares of every element
 * of dW after the op, summed in an order fixed by the shapes (the gradient norm's share of a
 * weight whose gradient the op completes, without another pass over dW where the backend
 * fuses it: the CUDA backend's Hopper kernel adds them up in its epilogue). */
void sl_op_grouped_matmul_dw(sl_tensor *dw, const sl_tensor *dy, const sl_tensor *x,
                             sl_group_counts counts, int groups, float beta, sl_tensor *sumsq);
/* One micro-batch's rows for a weight gradient over several (sl_op_grouped_matmul_dw_segments):
 * dY [n, R] and X [n, S], grouped by counts (n = counts.rows). */
typedef struct {
    const sl_tensor *dy, *x;
    sl_group_counts counts;
} sl_dw_segment;
/* The most segments one call takes (training.expert_wgrad_group's largest value). */
#define SL_DW_MAX_SEGMENTS 4
/* The same over the rows of 1..SL_DW_MAX_SEGMENTS micro-batches at once (the deferred weight
 * gradient, moe/experts.h): dW_g = sum_i dY_i,g^T X_i,g + beta dW_g, the segments in order:
 * one pass over dW where the backend has a kernel for it (the CUDA backend on Hopper: each
 * element one fp32 sum over all the segments' rows), else grouped_matmul_dw over the first with
 * beta, then over each next with 1 (the CPU: bitwise those calls one after another); sumsq as
 * above, of dW after all of them. */
void sl_op_grouped_matmul_dw_segments(sl_tensor *dw, const sl_dw_segment *segs, int nseg,
                                      int groups, float beta, sl_tensor *sumsq);

/* The experts' first projection and their activation in one: gu [n, 2I] = A_g B_g^T over the
 * groups' rows (sl_op_grouped_matmul with trans_b and beta 0; B [groups, 2I, S], A [n, S]) and
 * h [n, I] = SwiGLU of those rows of gu (sl_op_swiglu_fwd: gate = gu's first I columns, up
 * the last I). Both written, as by the two ops (h from gu's stored values, bit for bit); rows
 * past sum(counts) untouched. One kernel where the backend fuses them (the CUDA backend's
 * Hopper grouped GEMM: h from its epilogue's registers, no pass over gu), else the two ops. */
void sl_op_grouped_matmul_swiglu(sl_tensor *h, sl_tensor *gu, const sl_tensor *a,
                                 const sl_tensor *b, sl_group_counts counts, int groups);

/* ---- normalization -------------------------------------------------------------------- */

/* y = x * rsqrt(mean(x^2) + eps) * w over rows of width D = numel(w); rstd [rows] saved. */
void sl_op_rmsnorm_fwd(sl_tensor *y, sl_tensor *rstd, const sl_tensor *x, const sl_tensor *w,
                       float eps);
/* dx = dres + the norm's input gradient (written; dres NULL: the gradient alone), dw
 * accumulated. dres, shaped as x, is the residual path's gradient, added in the same pass instead
 * of an axpy after it (one read and one write of dx fewer); it may be dx itself. The output
 * gradient is dy, or with dy_add (fp32, shaped as dy) dy + dy_add rounded to dy's dtype: what
 * sl_op_add(dy, dy, dy_add) would leave in dy (which is not written), without that pass over
 * memory (the router's fp32 input gradient, moe/router.h). */
void sl_op_rmsnorm_bwd(sl_tensor *dx, sl_tensor *dw, const sl_tensor *dy, const sl_tensor *dy_add,
                       const sl_tensor *x, const sl_tensor *w, const sl_tensor *rstd,
                       const sl_tensor *dres);

/* ---- embedding and loss --------------------------------------------------------------- */

/* out [N, C] = table[ids[n]]. ids [N] i32, table [V, C]. */
void sl_op_embedding_fwd(sl_tensor *out, const sl_tensor *ids, const sl_tensor *table);
/* dtable[ids[n]] += dout[n] (accumulated). */
void sl_op_embedding_bwd(sl_tensor *dtable, const sl_tensor *dout, const sl_tensor *ids);

/* Fused softmax cross-entropy over logits [N, V] with targets [N] i32 (a target < 0 is
 * ignored: loss 0, gradient 0). Writes losses [N] (natural log) and, when dlogits is not NULL,
 * dlogits = (softmax - onehot) * grad_scale (dlogits may alias logits). */
void sl_op_cross_entropy(sl_tensor *losses, sl_tensor *dlogits, const sl_tensor *logits,
                         const sl_tensor *targets, float grad_scale);

/* ---- gated attention (attention/) ------------------------------------------------------ */

typedef enum { SL_GATE_NONE = 0, SL_GATE_HEADWISE = 1, SL_GATE_ELEMENTWISE = 2 } sl_gate_mode;

/* The config spelling of a gate mode ("none", "headwise", "elementwise"), and back
 * (0, or -1 for an unknown name). */
const char *sl_gate_mode_name(sl_gate_mode mode);
int sl_gate_mode_from_name(const char *name, sl_gate_mode *mode);
/* Width of q_proj's output for `heads` heads of dimension d: the queries plus the gate
 * logits of the mode (2HD elementwise, HD + H headwise, HD without a gate). */
static inline int64_t sl_qgate_width(sl_gate_mode mode, int64_t heads, int64_t d) {
    return mode == SL_GATE_ELEMENTWISE ? 2 * heads * d
           : mode == SL_GATE_HEADWISE  ? heads * d + heads
                                       : heads * d;
}

/* Splits q_proj output qall [T, W] into q [T, H, D] and gate g [T, H, Dg] using the
 * checkpoint layout of the reference card: elementwise (W = 2HD, per head [q_h | g_h]),
 * headwise (W = HD + H: all queries, then the H gate values), none (W = HD; g is NULL). */
void sl_op_qgate_split(sl_tensor *q, sl_tensor *g, const sl_tensor *qall, sl_gate_mode mode);
/* Inverse layout for the backward: dqall written from dq and dg. */
void sl_op_qgate_merge(sl_tensor *dqall, const sl_tensor *dq, const sl_tensor *dg,
                       sl_gate_mode mode);

/* Rotary embedding in place on x [T, heads, D] (rotate-half convention): the first
 * rot = 2 * numel(inv_freq) dims of each head rotate by angle pos[t] * inv_freq[i], and cos
 * and sin are multiplied by mscale (YaRN; 1 otherwise). pos [T] i32. */
void sl_op_rope_fwd(sl_tensor *x, const sl_tensor *pos, const sl_tensor *inv_freq, float mscale);
/* Backward in place: dx = mscale * R^T dx. */
void sl_op_rope_bwd(sl_tensor *dx, const sl_tensor *pos, const sl_tensor *inv_freq, float mscale);

/* The QK-norm and RoPE of the attention's queries and keys (the checkpoint layout and formulas
 * of sl_op_qgate_split, sl_op_rmsnorm_fwd and sl_op_rope_fwd): the norm weights qw, kw [D] (the
 * activation dtype), eps, qall's gate layout, and the rotation's positions [T] i32, inverse
 * frequencies [rot / 2] fp32 and mscale. */
typedef struct {
    const sl_tensor *qw, *kw;
    float eps;
    sl_gate_mode mode;
    const sl_tensor *pos, *inv_freq;
    float mscale;
} sl_qk_norm_rope;

/* The attention's inputs from the projections in one pass over them: with q the query part of
 * qall [T, W] and its gate part written to g (as sl_op_qgate_split; g NULL without a gate),
 * qn = RoPE(RMSNorm(q, qw)) [T, H, D] and kn = RoPE(RMSNorm(k, kw)) [T, KV, D] per head, their
 * fp32 rstd q_rstd [T * H] and k_rstd [T * KV]. The results of qgate_split, rmsnorm_fwd on q
 * and k and rope_fwd on both, but for roundings: a backend may keep the normalized values in
 * fp32 until the rotation (one rounding to the activation dtype instead of two). */
void sl_op_qk_norm_rope_fwd(sl_tensor *qn, sl_tensor *kn, sl_tensor *g, sl_tensor *q_rstd,
                            sl_tensor *k_rstd, const sl_tensor *qall, const sl_tensor *k,
                            const sl_qk_norm_rope *p);
/* Its backward from the attention's dq [T, H, D], dk [T, KV, D] and dg: dqall [T, W] holds the
 * queries' gradient through the rotation and the norm, and dg in the gate's place (as
 * sl_op_qgate_merge); dk_pre [T, KV, D] the keys'; dqw and dkw (fp32 or the weights' dtype)
 * accumulate the norm weights' gradients. Reads the pre-norm queries from qall. */
void sl_op_qk_norm_rope_bwd(sl_tensor *dqall, sl_tensor *dk_pre, sl_tensor *dqw, sl_tensor *dkw,
                            const sl_tensor *dq, const sl_tensor *dk, const sl_tensor *dg,
                            const sl_tensor *qall, const sl_tensor *k, const sl_tensor *q_rstd,
                            const sl_tensor *k_rstd, const sl_qk_norm_rope *p);

/* Causal attention with GQA and the output gate, computed in tiles with an online softmax
 * (memory linear in sequence length). Tokens are laid out [B, S] (T = B*S):
 *   q [T, H, D], k/v [T, KV, D], g [T, H, Dg] with Dg = D (elementwise), 1 (headwise) or
 *   g = NULL (no gate). Query head h uses kv head h / (H / KV).
 * Per-document masking (packed documents): seg [T] i32, or NULL for plain causal attention.
 * seg[b*S + i] is the offset within sequence b of the first token of token i's document, so
 * query i of sequence b sees key j of the same sequence iff seg[b*S + i] <= j <= i. The
 * values must satisfy 0 <= seg[b*S + i] <= i and be non-decreasing along each sequence (the
 * documents are contiguous runs); the kernels rely on it to skip the key tiles that lie
 * entirely before a query tile's first document (as they skip those after the diagonal), so
 * short documents cost less. An all-zero seg gives the same bits as NULL. (The layout is
 * FlashAttention's varlen masking per token: a tile finds its key range from seg of its first
 * row and its last row, with no per-sequence offsets table.)
 * Writes y = O * sigmoid(g) [T, H, D], the pre-gate O [T, H, D] and lse [T, H] (natural-log
 * sum of exp of the scaled logits), which the backward needs. */
void sl_op_gated_attn_fwd(sl_tensor *y, sl_tensor *o, sl_tensor *lse, const sl_tensor *q,
                          const sl_tensor *k, const sl_tensor *v, const sl_tensor *g,
                          const sl_tensor *seg, int batch, int seq, float scale);
/* Writes dq, dk, dv and (when g is not NULL) dg from dy; seg as in the forward. */
void sl_op_gated_attn_bwd(sl_tensor *dq, sl_tensor *dk, sl_tensor *dv, sl_tensor *dg,
                          const sl_tensor *dy, const sl_tensor *q, const sl_tensor *k,
                          const sl_tensor *v, const sl_tensor *g, const sl_tensor *seg,
                          const sl_tensor *o, const sl_tensor *lse, int batch, int seq,
                          float scale);
/* ---- decoding with a KV cache (model/decode.c) ----
 * A cache holds the keys (or values) of `batch` sequences, cache [B, L, KV, D]: row b, position
 * p. start [B] i32 (on the device) is each sequence's length before the n new tokens of this
 * call, laid out [B, n] (token i of sequence b is row b*n + i, at position start[b] + i).
 * "RoPE at an offset" needs no op of its own: sl_op_qk_norm_rope_fwd takes the positions
 * start[b] + i. */

/* cache[b, start[b] + i] = x[b*n + i] for i < n, with x [B*n, KV, D] of the cache's dtype.
 * Positions at or beyond L are not written (the caller sizes the cache; padding rows of a
 * shorter sequence in a batch may run past it). */
void sl_op_kv_cache_write(sl_tensor *cache, const sl_tensor *x, const sl_tensor *start, int batch,
                          int n);
/* Attention of the n new queries of each sequence against its cache, with the output gate:
 * q [B*n, H, D], kc/vc [B, L, KV, D] (the new keys and values already written), g as in
 * sl_op_gated_attn_fwd ([B*n, H, D], [B*n, H, 1] or NULL). Query i of sequence b, at position
 * p = start[b] + i, attends to keys 0 .. min(p, L - 1) of row b (causal; query head h reads kv
 * head h / (H / KV)): y = softmax(scale q.k) V * sigmoid(g), [B*n, H, D]. The same numbers as
 * the training kernel's y over the same tokens, within rounding (tests/test_generate.c). */
void sl_op_gated_attn_decode(sl_tensor *y, const sl_tensor *q, const sl_tensor *kc,
                             const sl_tensor *vc, const sl_tensor *g, const sl_tensor *start,
                             int batch, int n, float scale);

/* Mean of sigmoid(g) over all elements (the paper's "gate score" diagnostic), into the device
 * scalar out (1-element fp32). */
void sl_op_sigmoid_mean(sl_tensor *out, const sl_tensor *g);
/* The attention share of the first token (the paper's "attention sink" diagnostic), into the
 * device scalar out: the mean over sequences b, heads h and query positions i = 1 .. seq - 1
 * of the softmax weight of key 0, p(i, 0) = exp(scale * q_i . k_0 - lse_i), with q [T, H, D],
 * k [T, KV, D] (query head h reads kv head h / (H / KV)) and lse [T, H] as sl_op_gated_attn_fwd
 * wrote them. Query 0 is left out: it sees only key 0, so p(0, 0) = 1 says nothing about the
 * model. 0 when seq < 2. */
void sl_op_attn_sink_share(sl_tensor *out, const sl_tensor *q, const sl_tensor *k,
                           const sl_tensor *lse, int batch, int seq, float scale);

/* ---- mixture of experts (moe/) -------------------------------------------------------- */

/* Router, fp32. logits [N, E] -> probs = softmax(logits) [N, E]; top-k of (probs + bias)
 * (bias [E] may be NULL: aux-loss-free balancing uses it for selection only) gives
 * topk_idx [N, k] i32 (descending score, ties to the lower index) and topk_w [N, k] =
 * probs at those experts, divided by their sum when norm_topk. stats [E + 1] is written:
 * stats[e] = sum_n probs[n, e]; stats[E] = sum_n logsumexp(logits[n])^2. */
void sl_op_router_fwd(sl_tensor *probs, sl_tensor *topk_idx, sl_tensor *topk_w, sl_tensor *stats,
                      const sl_tensor *logits, const sl_tensor *bias, bool norm_topk);
/* dlogits [N, E] (written) from: dtopk_w [N, k] (gradient of the combine weights), the
 * load-balancing term dL/dprobs[n, e] = lbl_grad[e] for every n (lbl_grad [E] or NULL), and
 * the z-loss L_z = z_scale * sum_n lse_n^2. */
void sl_op_router_bwd(sl_tensor *dlogits, const sl_tensor *dtopk_w, const sl_tensor *probs,
                      const sl_tensor *topk_idx, const sl_tensor *topk_w, const sl_tensor *logits,
                      const sl_tensor *lbl_grad, float z_scale, bool norm_topk);

/* Stable counting sort of the N*k routing slots by expert. topk_idx [N, k] holds expert ids
 * in [0, E) (E = numel(counts)). Writes counts [E] i32, sorted_token [N*k] i32 (the token of
 * each slot in expert order) and slot_pos [N*k] i32 (for slot n*k + j, its position in the
 * sorted order). */
void sl_op_moe_sort(sl_tensor *counts, sl_tensor *sorted_token, sl_tensor *slot_pos,
                    const sl_tensor *topk_idx);
/* The expert counts kept on the device (moe_sort's counts [E] i32): acc [E] i32 (or NULL)
 * += counts, and freq [E] fp32 (or NULL) = scale * counts (the load-balancing loss's gradient
 * factor per expert; with scale 1 a copy, exact for counts below 2^24), so that no host read is
 * needed for either (moe/moe_block.c). */
void sl_op_moe_counts(sl_tensor *acc, sl_tensor *freq, const sl_tensor *counts, float scale);
/* dst[i] = src[idx[i]] for rows of width C; dst [M, C], idx [M]. */
void sl_op_gather_rows(sl_tensor *dst, const sl_tensor *src, const sl_tensor *idx);
/* dst[idx[i]] += src[i] (accumulated; several i may share a row). */
void sl_op_scatter_add_rows(sl_tensor *dst, const sl_tensor *src, const sl_tensor *idx);
/* dst[n] = beta dst[n] + sum over j < k of src[pos[n*k + j]] for dst [N, C], src [M, C], pos
 * [N*k] i32, 1 <= k <= 32, beta 1 (added) or 0 (written: dst's old contents are not read, a row
 * with no valid position becomes 0); positions outside [0, M) are skipped (the slots a capacity
 * drop left out). The terms are added in increasing position: when pos lists, for each n, the
 * rows i with idx[i] = n, the sums of sl_op_scatter_add_rows(dst, src, idx) in its order (into
 * a zeroed dst for beta 0), without inverting idx (the dispatcher has slot_pos from its sort). */
void sl_op_gather_add_rows(sl_tensor *dst, const sl_tensor *src, const sl_tensor *pos, int k,
                           float beta);
/* y[n] = res[n] + sum_j w[n, j] * x[slot_pos[n*k + j]]; y [N, C] written, x [N*k, C], w [N, k].
 * res (shaped as y, not y itself; NULL: no term) is the residual stream the MoE block's output
 * joins, added after the sum (the residual add after the block, without its pass). */
void sl_op_moe_combine(sl_tensor *y, const sl_tensor *x, const sl_tensor *slot_pos,
                       const sl_tensor *w, const sl_tensor *res);
/* Backward of moe_combine: dx[slot_pos[n*k+j]] = w[n,j] dy[n] (written);
 * dw[n, j] = <dy[n], x[slot_pos[n*k+j]]> (written). dw and x both NULL: dx alone, the same
 * bits (the rows the MoE experts' deferred weight gradients regather, moe/moe_block.c). */
void sl_op_moe_combine_bwd(sl_tensor *dx, sl_tensor *dw, const sl_tensor *dy, const sl_tensor *x,
                           const sl_tensor *slot_pos, const sl_tensor *w);
/* SwiGLU: gu [M, 2I] holds [gate | up] per row; h [M, I] = silu(gate) * up. */
void sl_op_swiglu_fwd(sl_tensor *h, const sl_tensor *gu);
/* dgu written. */
void sl_op_swiglu_bwd(sl_tensor *dgu, const sl_tensor *dh, const sl_tensor *gu);
/* y [N, C] = x [N, C] * sigmoid(s [N]) per row (the shared expert's gate). */
void sl_op_rowgate_fwd(sl_tensor *y, const sl_tensor *x, const sl_tensor *s);
/* dx [N, C] and ds [N] written. */
void sl_op_rowgate_bwd(sl_tensor *dx, sl_tensor *ds, const sl_tensor *dy, const sl_tensor *x,
                       const sl_tensor *s);

/* ---- optimizer (trainer/) ------------------------------------------------------------- */

typedef struct {
    float lr, beta1, beta2, eps, weight_decay;
    float grad_scale; /* gradients are multiplied by this first (clipping, averaging) */
    int step;         /* 1-based, for bias correction */
} sl_adamw_params;

/* Decoupled AdamW: p -= lr * (mhat / (sqrt(vhat) + eps) + weight_decay * p). p, g, m, v
 * are fp32 (master weights, their gradient, the moments). When p_copy is not NULL it receives
 * the updated p in its own dtype (the bf16 compute copy), in the same pass. */
void sl_op_adamw(sl_tensor *p, const sl_tensor *g, sl_tensor *m, sl_tensor *v, sl_tensor *p_copy,
                 const sl_adamw_params *hp);

#ifdef __cplusplus
}
#endif

#endif
