/*
 * bench/attn_bench.h - what the parts of attn_bench share (bench/attn_bench.c: options, timing,
 * main; bench/attn_bench_set.c: the tensors of one shape; bench/attn_bench_check.c: --check and
 * --check-rows). Names carry the prefix ab_.
 */
#ifndef SL_BENCH_ATTN_BENCH_H
#define SL_BENCH_ATTN_BENCH_H

#include <stdbool.h>
#include <stdint.h>

#include "core/ops.h"
#include "core/tensor.h"

enum { AB_MAX_DOCS = 64, AB_CHUNK = 1 << 22, AB_MAX_KERNELS = 8, AB_MAX_SHAPES = 4 };

/* The outputs in the order the check prints them: y o lse dq dk dv dg. */
enum { AB_N_OUT = 7 };
extern const char *const ab_outputs[AB_N_OUT];

typedef struct {
    int batch, seq, heads, kv, d;
} ab_shape;

typedef struct {
    const char *backend, *corrupt;
    sl_dtype dt;
    sl_gate_mode gate;
    int iters, warmup, ndocs, nkernels;
    int check_rows; /* --check-rows N: N sampled query rows and N key rows; 0: the whole check */
    int docs[AB_MAX_DOCS];
    char kernels[AB_MAX_KERNELS][32]; /* --kernel, in order */
    /* --separate: the timed forwards back to back, then the timed backwards (else each timed
     * forward is followed by its backward) */
    bool check, nondeterministic, shape_given, separate;
    ab_shape s; /* the given shape (defaults for the options not given) */
} ab_options;

/* The tensors of one shape on one backend. */
typedef struct {
    ab_shape s;
    int64_t t, nq, nk, ng; /* tokens, q elements, k elements, gate elements */
    sl_tensor *q, *k, *v, *g, *seg, *y, *o, *lse, *dy, *dq, *dk, *dv, *dg;
    sl_tensor *stage; /* f32 [AB_CHUNK] for bf16 uploads and downloads */
} ab_set;

/* attn_bench_set.c */
/* Device bytes of an ab_set. */
double ab_set_bytes(const ab_shape *s, sl_gate_mode gate, sl_dtype dt);
/* seg [B * S] from repeating document lengths, or NULL without them. */
int32_t *ab_build_seg(const ab_options *o, const ab_shape *s);
void ab_set_create(ab_set *a, sl_backend *be, sl_dtype dt, const ab_shape *s, sl_gate_mode gate,
                   const int32_t *seg);
void ab_set_free(ab_set *a);
/* Standard normal values, stream `stream` of a fixed seed, into t (any float dtype); host is
 * scratch of AB_CHUNK floats. */
void ab_fill_normal(ab_set *a, sl_tensor *t, uint64_t stream, float *host);
/* t (any float dtype) as fp32 values into host [numel]. */
void ab_download(ab_set *a, const sl_tensor *t, float *host);
/* One forward, one backward of the operation on the set (sl_op_gated_attn_fwd / _bwd). */
void ab_forward(ab_set *a);
void ab_backward(ab_set *a);

/* attn_bench_check.c */
/* One forward and backward on a's backend against the reference (o->check_rows: sampled rows);
 * prints a table of the outputs; 0 when every output passes, 1 when one fails, -1 on an error. */
int ab_check_shape(const ab_options *o, ab_set *a, const int32_t *seg);

#endif
