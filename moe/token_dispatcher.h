/*
 * moe/token_dispatcher.h - moves routed tokens to their experts and the results back.
 *
 * dispatch:  sort the N*k routing slots of this rank's tokens by expert (stable); with a
 *            capacity factor, drop the slots beyond each expert's capacity; gather the kept
 *            token rows in that order; with expert parallelism, exchange the per-expert row
 *            counts (all-to-all) and the rows (all-to-allv) inside the EP group, so that each
 *            rank receives the rows of its own experts, placed directly in groups by local
 *            expert (sl_comm_alltoallv_grouped: no separate permutation pass).
 * combine:   the reverse path back to the origin ranks, then
 *            y[n] = sum_j w[n, j] * out(slot n, j)   (a dropped slot contributes 0).
 * The backward mirrors both with the same exchanges in the opposite direction.
 *
 * Without expert parallelism the exchange is skipped entirely.
 *
 * Host reads: the per-expert counts, once per dispatch, in one named place (the start of
 * sl_token_dispatcher_dispatch), queued right after the sort and waited for as late as the
 * gather allows; the backward and combine reuse them. None where nothing on the host needs them:
 * without drops and exchange, with experts whose grouped GEMMs read the sort's counts on the
 * device (counts_on_device) and unless the caller asks for them (host_counts_wanted: metrics,
 * the global-batch balancing loss). Capacity drops add their own reads (plan_drops) until they
 * move to a device kernel.
 * All data movement goes through core/ops.h and core/comm.h, so the NCCL transport takes
 * over on GPUs without changes here.
 */
#ifndef SL_TOKEN_DISPATCHER_H
#define SL_TOKEN_DISPATCHER_H

#include <stdbool.h>

#include "core/comm.h"
#include "core/ops.h" /* sl_group_counts */
#include "core/tensor.h"

typedef enum { SL_DROP_PROBS = 0, SL_DROP_POSITION = 1 } sl_drop_policy;

typedef struct {
    int experts, topk, hidden;
    int local_experts, first_expert; /* the experts this rank computes */
    sl_comm *ep;                     /* expert-parallel group (NULL: this rank holds all) */
    int ep_size, ep_rank;
    double capacity_factor; /* 0: dropless */
    sl_drop_policy drop_policy;
    sl_backend *be;
    sl_dtype act;            /* dtype of the rows */
    bool forward_only;       /* dxs, dys, dexpert_in and dexpert_out are not allocated */
    bool counts_on_device;   /* the experts' GEMMs take the sort's counts (sl_dispatcher_params) */
    bool host_counts_wanted; /* set by the caller: read the counts on the host anyway */
    bool counts_read;        /* whether the last dispatch read them (counts_host is current) */
    sl_tensor *hv[2];        /* view handles re-pointed each call (no allocation per step) */
    int64_t tokens;          /* N of the last dispatch */
    /* routing of this rank's tokens */
    sl_tensor *counts, *sorted_token, *slot_pos; /* [E] i32, [N*k], [N*k] */
    int64_t *counts_host;                /* [E] slots routed to each expert (before drops) */
    int32_t *counts_i32;                 /* [E] staging of the counts read */
    int64_t *kept_host;                  /* [E] slots kept (== counts_host when dropless) */
    int64_t kept, dropped;               /* totals of the last dispatch */
    sl_tensor *gather_idx, *combine_pos; /* with drops: remapped copies of the two above */
    sl_tensor *xs, *ys, *dys, *dxs;      /* [N*k, C]: kept rows in expert order (and results) */
    /* expert parallelism */
    int64_t *send_rows, *recv_rows; /* [ep_size] rows to / from each EP rank */
    int64_t *recv_counts;           /* [ep_size * local]: rows from rank p for local expert e */
    int64_t received;               /* rows received for the local experts */
    int64_t capacity;               /* rows the receive-side buffers hold */
    /* what the local experts compute, grouped by local expert */
    int64_t *local_counts; /* [local_experts] */
    sl_tensor *expert_in, *expert_out, *dexpert_in, *dexpert_out;
} sl_token_dispatcher;

typedef struct {
    int experts, topk, hidden;
    int64_t max_tokens;     /* N per micro-batch on this rank */
    sl_comm *ep;            /* NULL or the expert-parallel group */
    double capacity_factor; /* 0: dropless */
    sl_drop_policy drop_policy;
    sl_dtype act;      /* dtype of the rows it moves (the experts' compute dtype) */
    bool forward_only; /* no backward buffers (evaluation): the backward must not be called */
    /* the experts' grouped GEMMs take device counts (sl_grouped_counts_on_device for both
     * projections): then a dropless dispatch without exchange reads no counts */
    bool counts_on_device;
} sl_dispatcher_params;

/* A dispatcher on be for p's experts, top-k, expert-parallel group and capacity; its buffers
 * grow at the first dispatch of each size. */
void sl_token_dispatcher_init(sl_token_dispatcher *d, sl_backend *be,
                              const sl_dispatcher_params *p);
/* Routes xn [N, C] by topk_idx [N, k] (weights topk_w [N, k] rank slots for the "probs"
 * drop policy). Afterwards expert_in holds the local experts' rows and
 * sl_token_dispatcher_counts their group sizes (local_counts, counts_host and kept_host only
 * where the dispatch read them: counts_read). */
void sl_token_dispatcher_dispatch(sl_token_dispatcher *d, const sl_tensor *xn,
                                  const sl_tensor *topk_idx, const sl_tensor *topk_w);
/* The local experts' rows per expert of the last dispatch: local_counts on the host where it
 * read them, else the sort's counts on the device (all experts are local then). */
sl_group_counts sl_token_dispatcher_counts(const sl_token_dispatcher *d);
/* y [N, C] (written) from expert_out and the routing weights topk_w [N, k], plus res [N, C]
 * (NULL: nothing; not y itself): sl_op_moe_combine. */
void sl_token_dispatcher_combine(sl_token_dispatcher *d, const sl_tensor *topk_w,
                                 const sl_tensor *res, sl_tensor *y);
/* Backward of combine: fills dexpert_out and dtopk_w [N, k] from dy [N, C]. */
void sl_token_dispatcher_combine_backward(sl_token_dispatcher *d, const sl_tensor *dy,
                                          const sl_tensor *topk_w, sl_tensor *dtopk_w);
/* Backward of dispatch: the gradient of xn (from dexpert_in) into dxn, dxn = beta dxn + it with
 * beta 1 (added) or 0 (written, dxn's old contents unread: no zeroing pass before it). */
void sl_token_dispatcher_dispatch_backward(sl_token_dispatcher *d, sl_tensor *dxn, float beta);
/* The same in two halves: _start starts the exchange of dexpert_in back to the origin ranks
 * (NULL without expert parallelism), after which dexpert_in must not be written until _finish;
 * _finish joins it and writes or adds into dxn (beta). Work queued in between may overlap the
 * exchange. */
sl_comm_request *sl_token_dispatcher_dispatch_backward_start(sl_token_dispatcher *d);
void sl_token_dispatcher_dispatch_backward_finish(sl_token_dispatcher *d, sl_comm_request *req,
                                                  sl_tensor *dxn, float beta);
/* Exchanges this micro-batch's local expert rows and their output gradients (expert_in,
 * dexpert_out: what the experts' weight gradients read) with *in and *dout, which hold nothing
 * and are first grown to the dispatcher's buffers (allocated when null): the caller keeps the
 * rows (moe/experts.h, sl_experts_parked), the dispatcher routes the next micro-batch into the
 * other buffers. */
void sl_token_dispatcher_park(sl_token_dispatcher *d, sl_tensor **in, sl_tensor **dout);
void sl_token_dispatcher_free(sl_token_dispatcher *d);

#endif
