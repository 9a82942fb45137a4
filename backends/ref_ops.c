/* backends/ref_ops.c - see ref_ops.h. */
#include "backends/ref_ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"

/* The longest head row the QK-norm references keep on the stack. */
#define SL_REF_MAX_D 1024

double sl_ref_sigmoid(double x) {
    return 1.0 / (1.0 + exp(-x));
}

void sl_ref_f32(float *dst, const double *src, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = (float)src[i];
}

/* ---- dense and grouped GEMM ---- */

void sl_ref_matmul(double *c, const float *a, const float *b, const float *c0, int64_t m, int64_t n,
                   int64_t k, bool trans_a, bool trans_b, double alpha, double beta) {
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double acc = 0.0;
            for (int64_t p = 0; p < k; p++)
                acc += (double)(trans_a ? a[p * m + i] : a[i * k + p]) *
                       (trans_b ? b[j * k + p] : b[p * n + j]);
            c[i * n + j] = alpha * acc + (beta != 0.0 ? beta * c0[i * n + j] : 0.0);
        }
}

void sl_ref_grouped_matmul(double *c, const float *a, const float *b, const float *c0,
                           const int64_t *counts, int groups, int64_t rows, int64_t r, int64_t s,
                           bool trans_b, double beta) {
    const int64_t in = trans_b ? s : r, out = trans_b ? r : s;
    for (int64_t i = 0; i < rows * out; i++) c[i] = c0[i];
    int64_t row0 = 0;
    for (int g = 0; g < groups; row0 += counts[g], g++)
        for (int64_t i = row0; i < row0 + counts[g]; i++)
            for (int64_t o = 0; o < out; o++) {
                double acc = 0.0;
                for (int64_t p = 0; p < in; p++) /* trans_b: B_g [out, in]; else [in, out] */
                    acc += (double)a[i * in + p] *
                           (trans_b ? b[(g * r + o) * s + p] : b[(g * r + p) * s + o]);
                c[i * out + o] = acc + beta * c0[i * out + o];
            }
}

void sl_ref_grouped_matmul_dw(double *dw, const float *dy, const float *x, const int64_t *counts,
                              int groups, int64_t r, int64_t s) {
    int64_t row0 = 0;
    for (int g = 0; g < groups; row0 += counts[g], g++)
        for (int64_t i = 0; i < r; i++)
            for (int64_t j = 0; j < s; j++)
                for (int64_t t = row0; t < row0 + counts[g]; t++)
                    dw[(g * r + i) * s + j] += (double)dy[t * r + i] * x[t * s + j];
}

/* ---- normalization, embedding, loss ---- */

void sl_ref_rmsnorm_fwd(double *y, double *rstd, const float *x, const float *w, int64_t rows,
                        int64_t d, double eps) {
    for (int64_t r = 0; r < rows; r++) {
        double ss = 0.0;
        for (int64_t i = 0; i < d; i++) ss += (double)x[r * d + i] * x[r * d + i];
        rstd[r] = 1.0 / sqrt(ss / (double)d + eps);
        for (int64_t i = 0; i < d; i++) y[r * d + i] = x[r * d + i] * rstd[r] * w[i];
    }
}

/* With xh = x * rstd: dx = rstd (dy w - xh mean(dy w xh)), dw += sum over rows of dy xh. */
void sl_ref_rmsnorm_bwd(double *dx, double *dw, const float *dy, const float *x, const float *w,
                        const float *rstd, int64_t rows, int64_t d) {
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * d, *dyr = dy + r * d;
        double dot = 0.0;
        for (int64_t i = 0; i < d; i++) dot += (double)dyr[i] * w[i] * xr[i] * rstd[r];
        for (int64_t i = 0; i < d; i++) {
            const double xh = (double)xr[i] * rstd[r];
            dx[r * d + i] = rstd[r] * ((double)dyr[i] * w[i] - xh * dot / (double)d);
            dw[i] += dyr[i] * xh;
        }
    }
}

void sl_ref_embedding_fwd(double *out, const int32_t *ids, const float *table, int64_t n,
                          int64_t c) {
    for (int64_t i = 0; i < n * c; i++) out[i] = table[(int64_t)ids[i / c] * c + i % c];
}

void sl_ref_embedding_bwd(double *dtable, const float *dout, const int32_t *ids, int64_t n,
                          int64_t c) {
    for (int64_t i = 0; i < n * c; i++) dtable[(int64_t)ids[i / c] * c + i % c] += dout[i];
}

void sl_ref_cross_entropy(double *losses, double *dlogits, const float *logits,
                          const int32_t *targets, int64_t n, int64_t v, double grad_scale) {
    for (int64_t r = 0; r < n; r++) {
        const float *l = logits + r * v;
        double m = -INFINITY, s = 0.0;
        for (int64_t i = 0; i < v; i++) m = fmax(m, l[i]);
        for (int64_t i = 0; i < v; i++) s += exp(l[i] - m);
        const double lse = m + log(s);
        losses[r] = targets[r] < 0 ? 0.0 : lse - l[targets[r]];
        if (!dlogits) continue;
        for (int64_t i = 0; i < v; i++)
            dlogits[r * v + i] =
                targets[r] < 0 ? 0.0 : (exp(l[i] - lse) - (i == targets[r])) * grad_scale;
    }
}

/* ---- attention ---- */

/* Column of a qall row holding query element (hh, e), and the gate's (the reference card's
 * layout: elementwise per head [q_h | g_h]; otherwise all queries, then headwise gates). */
static int64_t qcol(int64_t hh, int64_t e, int64_t d, sl_gate_mode mode) {
    return mode == SL_GATE_ELEMENTWISE ? hh * 2 * d + e : hh * d + e;
}
static int64_t gcol(int64_t hh, int64_t e, int64_t h, int64_t d, sl_gate_mode mode) {
    return mode == SL_GATE_ELEMENTWISE ? hh * 2 * d + d + e : h * d + hh;
}
static int64_t qall_width(int64_t h, int64_t d, sl_gate_mode mode) {
    return mode == SL_GATE_ELEMENTWISE ? 2 * h * d : mode == SL_GATE_HEADWISE ? h * d + h : h * d;
}

void sl_ref_qgate_split(double *q, double *g, const float *qall, int64_t t, int64_t h, int64_t d,
                        sl_gate_mode mode) {
    const int64_t w = qall_width(h, d, mode), dg = mode == SL_GATE_ELEMENTWISE ? d : 1;
    for (int64_t i = 0; i < t; i++)
        for (int64_t hh = 0; hh < h; hh++) {
            for (int64_t e = 0; e < d; e++)
                q[(i * h + hh) * d + e] = qall[i * w + qcol(hh, e, d, mode)];
            if (mode != SL_GATE_NONE)
                for (int64_t e = 0; e < dg; e++)
                    g[(i * h + hh) * dg + e] = qall[i * w + gcol(hh, e, h, d, mode)];
        }
}

void sl_ref_qgate_merge(double *dqall, const float *dq, const float *dg, int64_t t, int64_t h,
                        int64_t d, sl_gate_mode mode) {
    const int64_t w = qall_width(h, d, mode), ng = mode == SL_GATE_ELEMENTWISE ? d : 1;
    for (int64_t i = 0; i < t; i++)
        for (int64_t hh = 0; hh < h; hh++) {
            for (int64_t e = 0; e < d; e++)
                dqall[i * w + qcol(hh, e, d, mode)] = dq[(i * h + hh) * d + e];
            if (mode != SL_GATE_NONE)
                for (int64_t e = 0; e < ng; e++)
                    dqall[i * w + gcol(hh, e, h, d, mode)] = dg[(i * h + hh) * ng + e];
        }
}

/* out = R y (sign 1) or R^T y (sign -1) of one head row y [d] in double. */
static void rope_row(double *out, const double *y, int d, int half, const float *inv_freq, int pos,
                     double mscale, int sign) {
    for (int e = 0; e < d; e++) out[e] = y[e];
    for (int i = 0; i < half; i++) {
        const double a = (double)pos * (double)inv_freq[i];
        const double c = mscale * cos(a), s = sign * mscale * sin(a);
        out[i] = y[i] * c - y[i + half] * s;
        out[i + half] = y[i + half] * c + y[i] * s;
    }
}

void sl_ref_rope(double *out, const float *x, int d, int half, const float *inv_freq, int pos,
                 double mscale, int sign) {
    double y[SL_REF_MAX_D] = {0};
    SL_CHECK(d <= SL_REF_MAX_D, "reference rope: head dim %d", d);
    for (int e = 0; e < d; e++) y[e] = x[e];
    rope_row(out, y, d, half, inv_freq, pos, mscale, sign);
}

void sl_ref_rope_all(double *out, const float *x, const int32_t *pos, int64_t t, int64_t nh, int d,
                     int half, const float *inv_freq, double mscale, int sign) {
    for (int64_t i = 0; i < t * nh; i++)
        sl_ref_rope(out + i * d, x + i * d, d, half, inv_freq, pos[i / nh], mscale, sign);
}

/* ---- QK-norm and RoPE in one (sl_op_qk_norm_rope_fwd/_bwd) ---- */

/* Offset of head hh's queries in row r of qall. */
static int64_t qall_q(sl_gate_mode mode, int64_t h, int d, int64_t r, int64_t hh) {
    return r * qall_width(h, d, mode) + (mode == SL_GATE_ELEMENTWISE ? hh * 2 * d : hh * d);
}

static void norm_rope_row(double *out, double *rstd, const float *x, const float *w, int d,
                          double eps, int half, const float *inv_freq, int pos, double mscale) {
    double ss = 0.0, y[SL_REF_MAX_D] = {0};
    for (int e = 0; e < d; e++) ss += (double)x[e] * x[e];
    *rstd = 1.0 / sqrt(ss / d + eps);
    for (int e = 0; e < d; e++) y[e] = x[e] * *rstd * w[e];
    rope_row(out, y, d, half, inv_freq, pos, mscale, 1);
}

void sl_ref_qk_norm_rope_fwd(double *qn, double *kn, double *g, double *q_rstd, double *k_rstd,
                             const float *qall, const float *k, const float *qw, const float *kw,
                             int64_t t, int64_t h, int64_t kv, int d, double eps, sl_gate_mode mode,
                             const int32_t *pos, int half, const float *inv_freq, double mscale) {
    SL_CHECK(d <= SL_REF_MAX_D, "reference qk_norm_rope: head dim %d", d);
    for (int64_t r = 0; r < t; r++) {
        for (int64_t hh = 0; hh < h; hh++) {
            const float *x = qall + qall_q(mode, h, d, r, hh);
            norm_rope_row(qn + (r * h + hh) * d, &q_rstd[r * h + hh], x, qw, d, eps, half, inv_freq,
                          pos[r], mscale);
            if (mode == SL_GATE_ELEMENTWISE)
                for (int e = 0; e < d; e++) g[(r * h + hh) * d + e] = x[d + e];
            else if (mode == SL_GATE_HEADWISE)
                g[r * h + hh] = qall[r * qall_width(h, d, mode) + h * d + hh];
        }
        for (int64_t hh = 0; hh < kv; hh++)
            norm_rope_row(kn + (r * kv + hh) * d, &k_rstd[r * kv + hh], k + (r * kv + hh) * d, kw,
                          d, eps, half, inv_freq, pos[r], mscale);
    }
}

/* dx [d] written and dw [d] accumulated for one head row from its gradient gy after RoPE. */
static void norm_rope_row_bwd(double *dx, double *dw, const float *gy, const float *x,
                              const float *w, double rstd, int d, int half, const float *inv_freq,
                              int pos, double mscale) {
    double in[SL_REF_MAX_D] = {0}, g[SL_REF_MAX_D] = {0}, dot = 0.0;
    for (int e = 0; e < d; e++) in[e] = gy[e];
    rope_row(g, in, d, half, inv_freq, pos, mscale, -1);
    for (int e = 0; e < d; e++) dot += g[e] * w[e] * (x[e] * rstd);
    const double mean = dot / d;
    for (int e = 0; e < d; e++) {
        const double xh = x[e] * rstd;
        dx[e] = rstd * (g[e] * w[e] - xh * mean);
        dw[e] += g[e] * xh;
    }
}

void sl_ref_qk_norm_rope_bwd(double *dqall, double *dk_pre, double *dqw, double *dkw,
                             const float *dq, const float *dk, const float *dg, const float *qall,
                             const float *k, const float *qw, const float *kw, const float *q_rstd,
                             const float *k_rstd, int64_t t, int64_t h, int64_t kv, int d,
                             sl_gate_mode mode, const int32_t *pos, int half, const float *inv_freq,
                             double mscale) {
    SL_CHECK(d <= SL_REF_MAX_D, "reference qk_norm_rope: head dim %d", d);
    for (int64_t r = 0; r < t; r++) {
        for (int64_t hh = 0; hh < h; hh++) {
            const int64_t o = qall_q(mode, h, d, r, hh);
            norm_rope_row_bwd(dqall + o, dqw, dq + (r * h + hh) * d, qall + o, qw,
                              q_rstd[r * h + hh], d, half, inv_freq, pos[r], mscale);
            if (mode == SL_GATE_ELEMENTWISE)
                for (int e = 0; e < d; e++) dqall[o + d + e] = dg[(r * h + hh) * d + e];
            else if (mode == SL_GATE_HEADWISE)
                dqall[r * qall_width(h, d, mode) + h * d + hh] = dg[r * h + hh];
        }
        for (int64_t hh = 0; hh < kv; hh++) {
            const int64_t o = (r * kv + hh) * d;
            norm_rope_row_bwd(dk_pre + o, dkw, dk + o, k + o, kw, k_rstd[r * kv + hh], d, half,
                              inv_freq, pos[r], mscale);
        }
    }
}

/* The gate's sigmoid for element e of row `row` ([T*H] rows of d), 1 without a gate. */
static double gate_of(const float *g, sl_gate_mode mode, size_t row, int d, int e) {
    return mode == SL_GATE_ELEMENTWISE ? sl_ref_sigmoid(g[row * d + e])
           : mode == SL_GATE_HEADWISE  ? sl_ref_sigmoid(g[row])
                                       : 1.0;
}

/* The same over keys lo..i (p[j] = 0 before lo). */
static double probs_from(double *p, const float *q, const float *k, int b, int i, int lo, int hh,
                         int s, int h, int kv, int d, double scale) {
    const int kh = hh / (h / kv);
    const float *qi = q + ((size_t)(b * s + i) * h + hh) * d;
    double mx = -INFINITY, sum = 0.0;
    for (int j = 0; j < lo; j++) p[j] = 0.0;
    for (int j = lo; j <= i; j++) {
        const float *kj = k + ((size_t)(b * s + j) * kv + kh) * d;
        double dot = 0.0;
        for (int e = 0; e < d; e++) dot += (double)qi[e] * kj[e];
        p[j] = dot * scale;
        mx = fmax(mx, p[j]);
    }
    for (int j = lo; j <= i; j++) sum += exp(p[j] - mx);
    const double lse = mx + log(sum);
    for (int j = lo; j <= i; j++) p[j] = exp(p[j] - lse);
    return lse;
}

double sl_ref_attn_probs(double *p, const float *q, const float *k, int b, int i, int hh, int s,
                         int h, int kv, int d, double scale) {
    return probs_from(p, q, k, b, i, 0, hh, s, h, kv, d, scale);
}

/* The first key query (b, i) sees: its document start (0 without seg). */
static int doc_lo(const int32_t *seg, int b, int i, int s) {
    return seg ? seg[(size_t)b * s + i] : 0;
}

/* Probabilities p and output o [d] = P V of query row (b, i, hh); returns the log-sum-exp. */
static double attn_row(double *p, double *o, const float *q, const float *k, const float *v, int b,
                       int i, int lo, int hh, int s, int h, int kv, int d, double scale) {
    const double lse = probs_from(p, q, k, b, i, lo, hh, s, h, kv, d, scale);
    const int kh = hh / (h / kv);
    for (int e = 0; e < d; e++) {
        o[e] = 0.0;
        for (int j = lo; j <= i; j++) o[e] += p[j] * v[((size_t)(b * s + j) * kv + kh) * d + e];
    }
    return lse;
}

void sl_ref_attn_fwd(double *y, double *o, double *lse, const float *q, const float *k,
                     const float *v, const float *g, const int32_t *seg, sl_gate_mode mode, int b_,
                     int s_, int h_, int kv, int d, double scale) {
    double *p = malloc(sizeof(double) * (size_t)s_);
    for (int b = 0; b < b_; b++)
        for (int h = 0; h < h_; h++)
            for (int i = 0; i < s_; i++) {
                const size_t row = (size_t)(b * s_ + i) * h_ + h;
                lse[row] = attn_row(p, o + row * d, q, k, v, b, i, doc_lo(seg, b, i, s_), h, s_, h_,
                                    kv, d, scale);
                for (int e = 0; e < d; e++)
                    y[row * d + e] = o[row * d + e] * gate_of(g, mode, row, d, e);
            }
    free(p);
}

void sl_ref_attn_decode(double *y, const float *q, const float *kc, const float *vc, const float *g,
                        const int32_t *start, sl_gate_mode mode, int b_, int n, int len, int h_,
                        int kv, int d, double scale) {
    double *p = malloc(sizeof(double) * (size_t)len);
    for (int b = 0; b < b_; b++)
        for (int i = 0; i < n; i++)
            for (int h = 0; h < h_; h++) {
                const size_t row = (size_t)(b * n + i) * h_ + h;
                const int kh = h / (h_ / kv), last = start[b] + i < len ? start[b] + i : len - 1;
                const float *qi = q + row * d;
                double mx = -INFINITY, sum = 0.0;
                for (int j = 0; j <= last; j++) {
                    const float *kj = kc + ((size_t)(b * len + j) * kv + kh) * d;
                    double dot = 0.0;
                    for (int e = 0; e < d; e++) dot += (double)qi[e] * kj[e];
                    p[j] = dot * scale;
                    mx = fmax(mx, p[j]);
                }
                for (int j = 0; j <= last; j++) sum += exp(p[j] - mx);
                for (int e = 0; e < d; e++) {
                    double o = 0.0;
                    for (int j = 0; j <= last; j++)
                        o += exp(p[j] - mx) / sum * vc[((size_t)(b * len + j) * kv + kh) * d + e];
                    y[row * d + e] = o * gate_of(g, mode, row, d, e);
                }
            }
    free(p);
}

/* Per query row: O = P V, sg = sigmoid(g), dO = dy sg, dg = dy O sg (1 - sg) (headwise: summed
 * over d), Di = <dO, O>; per key j <= i: dS = P_j (<dO, v_j> - Di), dq += scale dS k_j,
 * dk_j += scale dS q, dv_j += P_j dO (dk, dv summed over the query heads of a kv head). */
void sl_ref_attn_bwd(double *dq, double *dk, double *dv, double *dg, const float *dy,
                     const float *q, const float *k, const float *v, const float *g,
                     const int32_t *seg, sl_gate_mode mode, int b_, int s_, int h_, int kv, int d,
                     double scale) {
    const size_t nk = (size_t)b_ * s_ * kv * d;
    double *p = malloc(sizeof(double) * (size_t)s_), *o = malloc(sizeof(double) * (size_t)d);
    double *dout = malloc(sizeof(double) * (size_t)d);
    memset(dk, 0, sizeof(double) * nk), memset(dv, 0, sizeof(double) * nk);
    for (int b = 0; b < b_; b++)
        for (int h = 0; h < h_; h++)
            for (int i = 0; i < s_; i++) {
                const size_t row = (size_t)(b * s_ + i) * h_ + h;
                const int kh = h / (h_ / kv);
                const int lo = doc_lo(seg, b, i, s_);
                attn_row(p, o, q, k, v, b, i, lo, h, s_, h_, kv, d, scale);
                double di = 0.0, dgh = 0.0;
                for (int e = 0; e < d; e++) {
                    const double sg = gate_of(g, mode, row, d, e);
                    dout[e] = dy[row * d + e] * sg;
                    di += dout[e] * o[e];
                    const double dge = dy[row * d + e] * o[e] * sg * (1.0 - sg);
                    if (mode == SL_GATE_ELEMENTWISE) dg[row * d + e] = dge;
                    dgh += dge;
                }
                if (mode == SL_GATE_HEADWISE) dg[row] = dgh;
                for (int e = 0; e < d; e++) dq[row * d + e] = 0.0;
                for (int j = lo; j <= i; j++) {
                    const size_t kr = ((size_t)(b * s_ + j) * kv + kh) * d;
                    double dp = 0.0;
                    for (int e = 0; e < d; e++) dp += dout[e] * v[kr + e];
                    const double ds = p[j] * (dp - di) * scale;
                    for (int e = 0; e < d; e++) {
                        dq[row * d + e] += ds * k[kr + e];
                        dk[kr + e] += ds * q[row * d + e];
                        dv[kr + e] += p[j] * dout[e];
                    }
                }
            }
    free(p), free(o), free(dout);
}

/* ---- mixture of experts ---- */

void sl_ref_router_row(const float *l, const float *bias, int e, int k, bool norm, double *p,
                       int *idx, double *w, double *lse) {
    double m = l[0], s = 0.0;
    for (int i = 1; i < e; i++) m = fmax(m, l[i]);
    for (int i = 0; i < e; i++) s += exp((double)l[i] - m);
    *lse = m + log(s);
    for (int i = 0; i < e; i++) p[i] = exp((double)l[i] - *lse);
    /* Selection sort: largest score first, ties to the lower index. */
    bool used[256] = {false};
    double sum = 0.0;
    for (int j = 0; j < k; j++) {
        int best = -1;
        double bs = 0.0;
        for (int i = 0; i < e; i++) {
            double sc = p[i] + (bias ? (double)bias[i] : 0.0);
            if (!used[i] && (best < 0 || sc > bs)) best = i, bs = sc;
        }
        used[best] = true;
        idx[j] = best;
        w[j] = p[best];
        sum += p[best];
    }
    if (norm)
        for (int j = 0; j < k; j++) w[j] /= sum;
}

/* dL/dp_e = lbl_e + sum_{j: idx_j = e} c_j with c_j = dw_j, or (dw_j - sum_m dw_m w_m) / S
 * with S = sum_j p_{idx_j} when normalized; dlogits = p (dL/dp - <p, dL/dp>) + 2 z lse p. */
void sl_ref_router_bwd_row(double *dl, const float *dw, const float *p, const int32_t *idx,
                           const float *w, const float *l, const float *lbl, int e, int k,
                           double z_scale, bool norm) {
    double sel = 0.0, gw = 0.0, dot = 0.0, m = l[0], s = 0.0;
    for (int j = 0; j < k; j++) sel += p[idx[j]], gw += (double)dw[j] * w[j];
    for (int i = 0; i < e; i++) dl[i] = lbl ? lbl[i] : 0.0;
    for (int j = 0; j < k; j++) dl[idx[j]] += norm ? (dw[j] - gw) / sel : dw[j];
    for (int i = 0; i < e; i++) dot += p[i] * dl[i], m = fmax(m, l[i]);
    for (int i = 0; i < e; i++) s += exp((double)l[i] - m);
    const double lse = m + log(s);
    for (int i = 0; i < e; i++) dl[i] = p[i] * (dl[i] - dot + 2.0 * z_scale * lse);
}

void sl_ref_moe_sort(int32_t *counts, int32_t *sorted_token, int32_t *slot_pos,
                     const int32_t *topk_idx, int64_t n, int64_t k, int64_t e) {
    int32_t pos = 0;
    for (int64_t x = 0; x < e; x++) {
        counts[x] = 0;
        for (int64_t s = 0; s < n * k; s++)
            if (topk_idx[s] == x)
                sorted_token[pos] = (int32_t)(s / k), slot_pos[s] = pos++, counts[x]++;
    }
}

void sl_ref_moe_combine(double *y, const float *x, const int32_t *slot_pos, const float *w,
                        int64_t n, int64_t k, int64_t c) {
    for (int64_t t = 0; t < n; t++)
        for (int64_t i = 0; i < c; i++) {
            double acc = 0.0;
            for (int64_t j = 0; j < k; j++)
                acc += (double)w[t * k + j] * x[(int64_t)slot_pos[t * k + j] * c + i];
            y[t * c + i] = acc;
        }
}

void sl_ref_moe_combine_bwd(double *dx, double *dw, const float *dy, const float *x,
                            const int32_t *slot_pos, const float *w, int64_t n, int64_t k,
                            int64_t c) {
    for (int64_t t = 0; t < n; t++)
        for (int64_t j = 0; j < k; j++) {
            const int64_t row = slot_pos[t * k + j];
            double acc = 0.0;
            for (int64_t i = 0; i < c; i++) {
                acc += (double)dy[t * c + i] * x[row * c + i];
                dx[row * c + i] = (double)w[t * k + j] * dy[t * c + i];
            }
            dw[t * k + j] = acc;
        }
}

/* h = silu(gate) up, silu(a) = a sigmoid(a), silu'(a) = sigmoid(a) (1 + a (1 - sigmoid(a))). */
void sl_ref_swiglu_fwd(double *h, const float *gu, int64_t m, int64_t width) {
    for (int64_t t = 0; t < m; t++)
        for (int64_t i = 0; i < width; i++) {
            const double a = gu[t * 2 * width + i];
            h[t * width + i] = a * sl_ref_sigmoid(a) * gu[t * 2 * width + width + i];
        }
}

void sl_ref_swiglu_bwd(double *dgu, const float *dh, const float *gu, int64_t m, int64_t width) {
    for (int64_t t = 0; t < m; t++)
        for (int64_t i = 0; i < width; i++) {
            const double a = gu[t * 2 * width + i], u = gu[t * 2 * width + width + i];
            const double sg = sl_ref_sigmoid(a), d = dh[t * width + i];
            dgu[t * 2 * width + i] = d * u * sg * (1.0 + a * (1.0 - sg));
            dgu[t * 2 * width + width + i] = d * a * sg;
        }
}

void sl_ref_rowgate_fwd(double *y, const float *x, const float *s, int64_t n, int64_t c) {
    for (int64_t i = 0; i < n * c; i++) y[i] = x[i] * sl_ref_sigmoid(s[i / c]);
}

void sl_ref_rowgate_bwd(double *dx, double *ds, const float *dy, const float *x, const float *s,
                        int64_t n, int64_t c) {
    for (int64_t t = 0; t < n; t++) {
        const double sg = sl_ref_sigmoid(s[t]);
        double acc = 0.0;
        for (int64_t i = 0; i < c; i++) {
            dx[t * c + i] = dy[t * c + i] * sg;
            acc += (double)dy[t * c + i] * x[t * c + i];
        }
        ds[t] = acc * sg * (1.0 - sg);
    }
}

/* ---- optimizer ---- */

void sl_ref_adamw(double *p, double *m, double *v, const float *g, int64_t n,
                  const sl_adamw_params *hp) {
    const double b1 = hp->beta1, b2 = hp->beta2;
    const double bc1 = 1.0 - pow(b1, hp->step), bc2 = 1.0 - pow(b2, hp->step);
    for (int64_t i = 0; i < n; i++) {
        const double gi = (double)g[i] * hp->grad_scale;
        m[i] = b1 * m[i] + (1.0 - b1) * gi;
        v[i] = b2 * v[i] + (1.0 - b2) * gi * gi;
        p[i] -= hp->lr * ((m[i] / bc1) / (sqrt(v[i] / bc2) + hp->eps) + hp->weight_decay * p[i]);
    }
}

double sl_ref_attn_sink_share(const float *q, const float *k, const float *lse, int b, int s, int h,
                              int kv, int d, double scale) {
    double sum = 0.0;
    int64_t n = 0;
    for (int bb = 0; bb < b; bb++)
        for (int i = 1; i < s; i++)
            for (int hh = 0; hh < h; hh++) {
                const int64_t row = ((int64_t)bb * s + i) * h + hh;
                const float *k0 = k + ((int64_t)bb * s * kv + hh / (h / kv)) * d;
                double dot = 0.0;
                for (int e = 0; e < d; e++) dot += (double)q[row * d + e] * k0[e];
                sum += exp(scale * dot - lse[row]);
                n++;
            }
    return n ? sum / (double)n : 0.0;
}
