/*
 * moe/experts.h - this rank's routed experts, computed as grouped GEMMs.
 *
 * The experts are stored stacked: gate_up [E_local, 2I, C] and down [E_local, C, I]. Input
 * rows arrive grouped by local expert (counts[e] rows each, in expert order); one GEMM per
 * expert and projection computes them, never a loop over tokens.
 */
#ifndef SL_EXPERTS_H
#define SL_EXPERTS_H

#include "core/ops.h" /* sl_group_counts */
#include "core/params.h"

/* The experts' activation buffers. A struct of its own so that the layers of a recomputing
 * or forward-only model can share one (sl_experts_share) although reserve re-allocates it. */
typedef struct {
    int64_t capacity; /* rows the buffers hold */
    sl_tensor *gu, *h, *dgu, *dh;
    sl_tensor *hv[3];  /* view handles re-pointed at the routed rows each call */
    bool forward_only; /* no dgu, dh (evaluation) */
} sl_experts_buffers;

typedef struct {
    sl_param *gate_up, *down;
    int local, first; /* number of local experts, global index of the first */
    int64_t hidden, ffn;
    sl_experts_buffers own;  /* this layer's buffers, unless it shares another layer's */
    sl_experts_buffers *buf; /* the buffers it computes in: &own or another layer's */
} sl_experts;

/* One micro-batch's rows that the experts' weight gradients read, kept for a later
 * micro-batch's backward: the deferred weight gradient (training.defer_expert_wgrad), which
 * computes up to SL_DW_MAX_SEGMENTS micro-batches' dW in one pass over the fp32 gradients
 * (sl_op_grouped_matmul_dw_segments) instead of one read-modify-write of them each. The tensors
 * change hands with the experts' and the dispatcher's own buffers (sl_experts_park,
 * sl_token_dispatcher_park): nothing is copied. */
typedef struct {
    sl_tensor *in, *dout; /* the experts' input rows and output gradients [rows, hidden] */
    sl_tensor *h, *dgu;   /* the SwiGLU output [rows, ffn] and gate_up's gradient [rows, 2 ffn] */
    int64_t *counts;      /* [local] rows per local expert (host counts) */
    sl_tensor *dcounts;   /* [local] I32, a copy of device counts */
    sl_group_counts k;    /* the parked counts: counts or dcounts */
} sl_experts_parked_rows;
/* The micro-batches parked so far in a step: mb[0 .. held - 1], in the order they ran. */
typedef struct {
    sl_experts_parked_rows mb[SL_DW_MAX_SEGMENTS - 1];
    int held;
} sl_experts_parked;

/* Declares layer `layer`'s expert weights in ps: this rank's `local` experts from global index
 * `first` (gate_up [local, 2 ffn, hidden], down [local, hidden, ffn], normal init of std
 * init_std); buffers come later (sl_experts_reserve). */
void sl_experts_declare(sl_experts *x, sl_params *ps, int layer, int first, int local,
                        int64_t hidden, int64_t ffn, float init_std);
/* Makes the buffers hold at least `rows` rows. */
void sl_experts_reserve(sl_experts *x, sl_backend *be, int64_t rows);
/* Makes x compute in owner's buffers (experts of the same shape that never run at the same
 * time as x); x's own are freed. */
void sl_experts_share(sl_experts *x, sl_experts *owner);
/* out [M, C] = expert_e(in rows of group e); counts [local] on the host or the device
 * (core/ops.h), whose rows the experts' buffers must hold (sl_experts_reserve). */
void sl_experts_forward(sl_experts *x, const sl_tensor *in, sl_group_counts counts, sl_tensor *out);
/* The backward in two halves (din's exchange can overlap the second): _data writes din (and
 * the SwiGLU gradient the second half reads); _weights then accumulates the parameter
 * gradients (or _park keeps what it reads for _weights_pair in the next micro-batch). */
void sl_experts_backward_data(sl_experts *x, sl_group_counts counts, const sl_tensor *dout,
                              sl_tensor *din);
void sl_experts_backward_weights(sl_experts *x, const sl_tensor *in, sl_group_counts counts,
                                 const sl_tensor *dout, sl_tensor *sumsq);
/* Parks this micro-batch's h and dgu in p->mb[p->held] (after sl_experts_backward_data; fewer
 * than SL_DW_MAX_SEGMENTS - 1 held), giving the experts that slot's previous buffers, grown to
 * their capacity, for the next micro-batch; counts are copied (device counts on the device).
 * The caller parks the dispatcher's rows (in, dout) into the same slot first. */
void sl_experts_park(sl_experts *x, sl_experts_parked *p, sl_group_counts counts);
/* The weight gradients of the parked micro-batches and this one (after
 * sl_experts_backward_data), in the order they ran, in one op per projection: on the CPU
 * bitwise the same as sl_experts_backward_weights for each in turn. p holds nothing
 * afterwards. sumsq: NULL, or where the weight gradients add the squares of their values once
 * written (sl_op_grouped_matmul_dw's; for the backward that completes them: the gradient
 * norm's share of the experts). */
void sl_experts_backward_weights_group(sl_experts *x, sl_experts_parked *p, const sl_tensor *in,
                                       sl_group_counts counts, const sl_tensor *dout,
                                       sl_tensor *sumsq);
/* Frees the slots from `keep` on (their buffers; the experts and the dispatcher allocate their
 * own again where a trade handed them none). Not while micro-batches are parked. */
void sl_experts_parked_trim(sl_experts_parked *p, int keep);
void sl_experts_parked_free(sl_experts_parked *p);
void sl_experts_free(sl_experts *x);

#endif
