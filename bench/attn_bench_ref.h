/*
 * bench/attn_bench_ref.h - attn_bench's own double-precision gated attention (forward and
 * backward), the reference `attn_bench --backend cpu --check` compares the CPU backend's tiled
 * fp32 kernel with. It is the definition of core/ops.h's sl_op_gated_attn_fwd/bwd written as
 * plain loops over (query, key) pairs: no tiles, no online softmax, every sum in double.
 * (The test suite has its own naive reference in backends/ref_ops.c; a benchmark does not link test
 * code, so this is the bench's.)
 */
#ifndef SL_BENCH_ATTN_BENCH_REF_H
#define SL_BENCH_ATTN_BENCH_REF_H

#include <stdint.h>

#include "core/ops.h"

typedef struct {
    int batch, seq, heads, kv, d;
    sl_gate_mode gate;
    double scale;
    const int32_t *seg; /* [batch * seq] document starts, or NULL (plain causal) */
} attn_ref_dims;

/* y, o [T, H, D] and lse [T, H] from q [T, H, D], k and v [T, KV, D] and g ([T, H, D]
 * elementwise, [T, H] headwise, NULL without a gate); T = batch * seq. */
void attn_ref_fwd(const attn_ref_dims *a, const float *q, const float *k, const float *v,
                  const float *g, double *y, double *o, double *lse);

/* dq [T, H, D], dk and dv [T, KV, D] and dg (shaped as g; not written when g is NULL) from dy,
 * with o and lse from attn_ref_fwd. All outputs are written (not accumulated). */
void attn_ref_bwd(const attn_ref_dims *a, const float *dy, const float *q, const float *k,
                  const float *v, const float *g, const double *o, const double *lse, double *dq,
                  double *dk, double *dv, double *dg);

/* One row of a sampled check (attn_bench --check-rows): sequence b, position i in it, head h (a
 * query head for attn_ref_query_row, a kv head for attn_ref_key_row). */
typedef struct {
    int b, i, h;
} attn_ref_row;

/* Query row r from the inputs alone, exactly: y, o, dq [D], *lse and dg ([D] elementwise, [1]
 * headwise; not written without a gate). Work O(i D): usable at any sequence length. */
void attn_ref_query_row(const attn_ref_dims *a, attn_ref_row r, const float *q, const float *k,
                        const float *v, const float *g, const float *dy, double *y, double *o,
                        double *lse, double *dq, double *dg);

/* For attn_ref_key_row: dO = dy * sigmoid(g) [T, H, D] and Di = dO . o [T, H] of every query row,
 * with o_in [T, H, D] the checked backend's output (see there). Work O(T H D). */
void attn_ref_dout(const attn_ref_dims *a, const float *g, const float *dy, const float *o_in,
                   float *dout, double *di);

/* Key row r: dk and dv [D] of key position r.i of kv head r.h, summed over the queries that see
 * it in every query head of the group. Their log-sum-exp lse_in [T, H], dO and Di (attn_ref_dout)
 * come from the checked backend's forward, whose own sampled rows are what attn_ref_query_row
 * checks: the exact values would need the whole forward, O(S^2). Work O((S - i) D H / KV). */
void attn_ref_key_row(const attn_ref_dims *a, attn_ref_row r, const float *q, const float *k,
                      const float *v, const float *dout, const double *di, const float *lse_in,
                      double *dk, double *dv);

#endif
