/*
 * moe/parked_tokens.h - a micro-batch's expert rows kept as its tokens and routing until the
 * deferred expert weight gradients need them, then regathered (training.park_expert_rows
 * "tokens", docs/memory.md).
 *
 * The deferred weight gradients (moe/experts.h, sl_experts_parked) read four tensors of each
 * parked micro-batch: the experts' input rows and output gradients (C values per routed row
 * each), the SwiGLU output and gate_up's gradient. The first two are the layer's input xn and
 * output gradient dy, gathered and scaled per routed row: k = 8 rows per token on Qwen3-style
 * models. Kept as xn and dy themselves (C values per token each) with the routing (a few
 * integers per slot), they take 1 / k of the memory; the group's pass remakes the rows with
 * the same two operations the dispatch and the combine's backward ran (sl_op_gather_rows, and
 * sl_op_moe_combine_bwd for dx alone), so the rows and every gradient are bitwise those of
 * the rows kept whole. The cost is those two passes per parked micro-batch and MoE layer.
 *
 * Only for a dispatcher without expert parallelism: with it the rows came from other ranks.
 */
#ifndef SL_PARKED_TOKENS_H
#define SL_PARKED_TOKENS_H

#include "core/ops.h" /* SL_DW_MAX_SEGMENTS */
#include "moe/token_dispatcher.h"

typedef struct {
    sl_tensor *xn, *dy;      /* [max tokens, C]: copies of the layer's input, output gradient */
    sl_tensor *gather, *pos; /* [max slots] i32: the kept rows' tokens, each slot's row */
    sl_tensor *w;            /* [max slots] fp32: the routing weights */
    sl_tensor *hv[5];        /* view handles */
    int64_t tokens, kept;    /* of the parked micro-batch */
    int64_t hidden, slots;   /* C; the slots the tensors hold (the dispatcher's) */
    int topk;
} sl_parked_tokens;

/* Buffers for the regathered rows of up to SL_DW_MAX_SEGMENTS - 1 parked micro-batches at once
 * (a group's pass reads them together). One set serves every MoE layer of a model: the layers'
 * groups run one at a time (sl_moe_options.regather). */
typedef struct {
    sl_tensor *in[SL_DW_MAX_SEGMENTS - 1], *dout[SL_DW_MAX_SEGMENTS - 1];
} sl_regather_rows;

/* Keeps the last dispatch's tokens and routing (after its combine backward) in p: xn [N, C] the
 * tokens it dispatched, dy [N, C] the gradient its combine's backward read, topk_w [N, k] the
 * weights it used. p's tensors are allocated at the dispatcher's capacity on first use. */
void sl_token_dispatcher_park_tokens(const sl_token_dispatcher *d, sl_parked_tokens *p,
                                     const sl_tensor *xn, const sl_tensor *dy,
                                     const sl_tensor *topk_w);
/* Remakes p's rows in r's slot i (< SL_DW_MAX_SEGMENTS - 1): *in receives the buffer holding the
 * experts' input rows (p->kept of them, in expert order) and *dout the one holding their output
 * gradients, bitwise those the dispatch and the combine's backward wrote. The buffers stay r's. */
void sl_parked_tokens_regather(const sl_parked_tokens *p, sl_regather_rows *r, int i,
                               sl_tensor **in, sl_tensor **dout);
void sl_parked_tokens_free(sl_parked_tokens *p);
/* Frees r's slots from `keep` on (a group that parks fewer micro-batches, or none: keep 0). */
void sl_regather_rows_trim(sl_regather_rows *r, int keep);
void sl_regather_rows_free(sl_regather_rows *r);

#endif
