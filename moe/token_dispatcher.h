/*
 * moe/token_dispatcher.h - moves routed tokens to their experts and the results back.
 *
 * dispatch:  sort the N*k routing slots by expert (stable), gather the token rows into that
 *            order; with expert parallelism, exchange them inside the EP group so that each
 *            rank receives the rows of its own experts, grouped by local expert.
 * combine:   the reverse path, then y[n] = sum_j w[n, j] * expert_out(slot n, j).
 * The backward mirrors both. All data movement goes through core/ops.h and core/comm.h.
 */
#ifndef SL_TOKEN_DISPATCHER_H
#define SL_TOKEN_DISPATCHER_H

#include "core/comm.h"
#include "core/tensor.h"

typedef struct {
    int experts, topk, hidden;
    int local_experts, first_expert; /* the experts this rank computes */
    sl_comm *ep;                     /* expert-parallel group (NULL: this rank holds all) */
    sl_backend *be;
    int64_t tokens;                  /* N of the last dispatch */
    /* routing of this rank's tokens */
    sl_tensor *counts, *sorted_token, *slot_pos; /* [E] i32, [N*k], [N*k] */
    int64_t *counts_host;            /* [E] rows this rank routes to each expert */
    sl_tensor *xs, *dxs;             /* [N*k, C] rows in expert order, and their gradient */
    /* rows the local experts compute, grouped by local expert */
    int64_t *local_counts;           /* [local_experts] */
    sl_tensor *expert_in, *expert_out, *dexpert_in, *dexpert_out;
} sl_token_dispatcher;

void sl_token_dispatcher_init(sl_token_dispatcher *d, sl_backend *be, sl_comm *ep, int experts,
                              int topk, int hidden, int64_t max_tokens);
/* Routes xn [N, C] by topk_idx [N, k]; afterwards expert_in holds the local experts' rows
 * and local_counts their group sizes. */
void sl_token_dispatcher_dispatch(sl_token_dispatcher *d, const sl_tensor *xn,
                                  const sl_tensor *topk_idx);
/* y [N, C] (written) from expert_out and the routing weights topk_w [N, k]. */
void sl_token_dispatcher_combine(sl_token_dispatcher *d, const sl_tensor *topk_w, sl_tensor *y);
/* Backward of combine: fills dexpert_out and dtopk_w [N, k] from dy [N, C]. */
void sl_token_dispatcher_combine_backward(sl_token_dispatcher *d, const sl_tensor *dy,
                                          const sl_tensor *topk_w, sl_tensor *dtopk_w);
/* Backward of dispatch: adds the gradient of xn (from dexpert_in) into dxn. */
void sl_token_dispatcher_dispatch_backward(sl_token_dispatcher *d, sl_tensor *dxn);
void sl_token_dispatcher_free(sl_token_dispatcher *d);

#endif
