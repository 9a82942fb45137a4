/*
 * bench/attn_bench_ref.c - the double-precision loops of bench/attn_bench_ref.h.
 *
 * Forward, per (sequence b, head h, query i) with kv head h / (H / KV) and visible keys
 * j in [lo, i] (lo = seg[b S + i], or 0): s_j = scale q_i.k_j, lse = ln sum_j exp(s_j),
 * p_j = exp(s_j - lse), o_i = sum_j p_j v_j, y_i = o_i * sigmoid(g_i).
 * Backward: sg = sigmoid(g), do_i = dy_i * sg, dg = dy_i * o_i * sg (1 - sg) (summed over D for
 * a headwise gate), Di = do_i.o_i; per visible pair: dp = do_i.v_j, ds = p_j (dp - Di),
 * dq_i += scale ds k_j, dk_j += scale ds q_i, dv_j += p_j do_i.
 * OpenMP: the forward over (b, h); the backward over (b, kv head), so that dk and dv of a kv
 * head have one writer (the query heads of its group run inside the task).
 * The row functions (attn_ref_query_row, attn_ref_key_row) are the same sums restricted to one
 * query row or one key row, for checks at lengths where the whole reference is out of reach.
 */
#include "bench/attn_bench_ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"

static double sigmoid(double x) {
    return 1.0 / (1.0 + exp(-x));
}

/* The gate logit of element (t, h, e) and whether it is per element. */
static double gate_at(const attn_ref_dims *a, const float *g, int64_t t, int h, int e) {
    if (a->gate == SL_GATE_ELEMENTWISE) return g[((t * a->heads) + h) * a->d + e];
    return g[t * a->heads + h];
}

static int first_key(const attn_ref_dims *a, int b, int i) {
    return a->seg ? a->seg[(int64_t)b * a->seq + i] : 0;
}

static double dot(const float *x, const float *y, int n) {
    double s = 0.0;
    for (int e = 0; e < n; e++) s += (double)x[e] * (double)y[e];
    return s;
}

/* Query row i of sequence b, head h: the scores s[j] (j in the row's keys, [lo, i]; s has at
 * least i + 1 entries), o and y [D]; returns the log-sum-exp. attn_ref_fwd's and
 * attn_ref_query_row's forward. */
static double fwd_row(const attn_ref_dims *a, int b, int h, int i, const float *q, const float *k,
                      const float *v, const float *g, double *s, double *o, double *y) {
    const int S = a->seq, H = a->heads, KV = a->kv, D = a->d, c = h / (H / KV);
    const int64_t t = (int64_t)b * S + i, row = (t * H + h) * D;
    const int lo = first_key(a, b, i);
    double m = -INFINITY, sum = 0.0;
    for (int j = lo; j <= i; j++) {
        s[j] = a->scale * dot(q + row, k + (((int64_t)b * S + j) * KV + c) * D, D);
        if (s[j] > m) m = s[j];
    }
    for (int j = lo; j <= i; j++) sum += exp(s[j] - m);
    const double l = m + log(sum);
    for (int e = 0; e < D; e++) o[e] = 0.0;
    for (int j = lo; j <= i; j++) {
        const double p = exp(s[j] - l);
        const float *vj = v + (((int64_t)b * S + j) * KV + c) * D;
        for (int e = 0; e < D; e++) o[e] += p * vj[e];
    }
    for (int e = 0; e < D; e++) y[e] = g ? o[e] * sigmoid(gate_at(a, g, t, h, e)) : o[e];
    return l;
}

void attn_ref_fwd(const attn_ref_dims *a, const float *q, const float *k, const float *v,
                  const float *g, double *y, double *o, double *lse) {
    const int S = a->seq, H = a->heads, D = a->d;
#pragma omp parallel
    {
        double *s = sl_xmalloc(sizeof(double) * (size_t)S);
#pragma omp for collapse(2) schedule(dynamic)
        for (int b = 0; b < a->batch; b++)
            for (int h = 0; h < H; h++)
                for (int i = 0; i < S; i++) {
                    const int64_t t = (int64_t)b * S + i, row = (t * H + h) * D;
                    lse[t * H + h] = fwd_row(a, b, h, i, q, k, v, g, s, o + row, y + row);
                }
        free(s);
    }
}

void attn_ref_bwd(const attn_ref_dims *a, const float *dy, const float *q, const float *k,
                  const float *v, const float *g, const double *o, const double *lse, double *dq,
                  double *dk, double *dv, double *dg) {
    const int S = a->seq, H = a->heads, KV = a->kv, D = a->d, group = H / KV;
    const int64_t T = (int64_t)a->batch * S, nq = T * H * D;
    double *dout = sl_xmalloc(sizeof(double) * (size_t)nq),
           *di = sl_xmalloc(sizeof(double) * T * H);
    if (g && a->gate == SL_GATE_HEADWISE) memset(dg, 0, sizeof(double) * (size_t)(T * H));
    /* the gate, dO and Di = dO.O per row */
    for (int64_t r = 0; r < T * H; r++) {
        double acc = 0.0;
        for (int e = 0; e < D; e++) {
            const int64_t x = r * D + e;
            double sg = 1.0;
            if (g) {
                sg = sigmoid(gate_at(a, g, r / H, (int)(r % H), e));
                const double dgx = dy[x] * o[x] * sg * (1.0 - sg);
                if (a->gate == SL_GATE_ELEMENTWISE)
                    dg[x] = dgx;
                else
                    dg[r] += dgx;
            }
            dout[x] = dy[x] * sg;
            acc += dout[x] * o[x];
        }
        di[r] = acc;
    }
    memset(dq, 0, sizeof(double) * (size_t)nq);
    memset(dk, 0, sizeof(double) * (size_t)(T * KV * D));
    memset(dv, 0, sizeof(double) * (size_t)(T * KV * D));
#pragma omp parallel for collapse(2) schedule(dynamic)
    for (int b = 0; b < a->batch; b++)
        for (int c = 0; c < KV; c++)
            for (int h = c * group; h < (c + 1) * group; h++)
                for (int i = 0; i < S; i++) {
                    const int64_t t = (int64_t)b * S + i, row = (t * H + h) * D;
                    for (int j = first_key(a, b, i); j <= i; j++) {
                        const int64_t kr = (((int64_t)b * S + j) * KV + c) * D;
                        const double p = exp(a->scale * dot(q + row, k + kr, D) - lse[t * H + h]);
                        double dp = 0.0;
                        for (int e = 0; e < D; e++) dp += dout[row + e] * v[kr + e];
                        const double ds = p * (dp - di[t * H + h]);
                        for (int e = 0; e < D; e++) {
                            dq[row + e] += a->scale * ds * k[kr + e];
                            dk[kr + e] += a->scale * ds * q[row + e];
                            dv[kr + e] += p * dout[row + e];
                        }
                    }
                }
    free(dout);
    free(di);
}

void attn_ref_query_row(const attn_ref_dims *a, attn_ref_row r, const float *q, const float *k,
                        const float *v, const float *g, const float *dy, double *y, double *o,
                        double *lse, double *dq, double *dg) {
    const int S = a->seq, H = a->heads, KV = a->kv, D = a->d, c = r.h / (H / KV);
    const int64_t t = (int64_t)r.b * S + r.i, row = (t * H + r.h) * D;
    const int lo = first_key(a, r.b, r.i);
    double *s = sl_xmalloc(sizeof(double) * (size_t)(r.i + 1));
    const double l = fwd_row(a, r.b, r.h, r.i, q, k, v, g, s, o, y);
    *lse = l;
    /* the gate's gradient, dO and Di = dO.o */
    double *dout = sl_xmalloc(sizeof(double) * (size_t)D), di = 0.0;
    if (g && a->gate == SL_GATE_HEADWISE) dg[0] = 0.0;
    for (int e = 0; e < D; e++) {
        const double sg = g ? sigmoid(gate_at(a, g, t, r.h, e)) : 1.0;
        if (g) {
            const double dgx = dy[row + e] * o[e] * sg * (1.0 - sg);
            if (a->gate == SL_GATE_ELEMENTWISE)
                dg[e] = dgx;
            else
                dg[0] += dgx;
        }
        dout[e] = dy[row + e] * sg;
        di += dout[e] * o[e];
    }
    for (int e = 0; e < D; e++) dq[e] = 0.0;
    for (int j = lo; j <= r.i; j++) {
        const int64_t kr = (((int64_t)r.b * S + j) * KV + c) * D;
        const double p = exp(s[j] - l);
        double dp = 0.0;
        for (int e = 0; e < D; e++) dp += dout[e] * v[kr + e];
        const double ds = p * (dp - di);
        for (int e = 0; e < D; e++) dq[e] += a->scale * ds * k[kr + e];
    }
    free(dout);
    free(s);
}

void attn_ref_dout(const attn_ref_dims *a, const float *g, const float *dy, const float *o_in,
                   float *dout, double *di) {
    const int H = a->heads, D = a->d;
    const int64_t rows = (int64_t)a->batch * a->seq * H;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        double acc = 0.0;
        for (int e = 0; e < D; e++) {
            const int64_t x = r * D + e;
            const double d = dy[x] * (g ? sigmoid(gate_at(a, g, r / H, (int)(r % H), e)) : 1.0);
            dout[x] = (float)d;
            acc += d * o_in[x];
        }
        di[r] = acc;
    }
}

void attn_ref_key_row(const attn_ref_dims *a, attn_ref_row r, const float *q, const float *k,
                      const float *v, const float *dout, const double *di, const float *lse_in,
                      double *dk, double *dv) {
    const int S = a->seq, H = a->heads, KV = a->kv, D = a->d, group = H / KV;
    const int64_t kr = (((int64_t)r.b * S + r.i) * KV + r.h) * D;
    for (int e = 0; e < D; e++) dk[e] = 0.0, dv[e] = 0.0;
    for (int h = r.h * group; h < (r.h + 1) * group; h++)
        /* queries from the key on, while the key is in their document (document starts never
         * decrease along a sequence) */
        for (int i = r.i; i < S && first_key(a, r.b, i) <= r.i; i++) {
            const int64_t t = (int64_t)r.b * S + i, row = (t * H + h) * D;
            const double p = exp(a->scale * dot(q + row, k + kr, D) - lse_in[t * H + h]);
            const double ds = p * (dot(dout + row, v + kr, D) - di[t * H + h]);
            for (int e = 0; e < D; e++) {
                dk[e] += a->scale * ds * q[row + e];
                dv[e] += p * dout[row + e];
            }
        }
}
