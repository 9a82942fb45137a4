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

#endif
