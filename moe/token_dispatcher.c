/* moe/token_dispatcher.c - token permutation and exchange (see token_dispatcher.h). */
#include "moe/token_dispatcher.h"

#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/ops.h"

void sl_token_dispatcher_init(sl_token_dispatcher *d, sl_backend *be, sl_comm *ep, int experts,
                              int topk, int hidden, int64_t max_tokens) {
    memset(d, 0, sizeof *d);
    d->be = be;
    d->ep = ep;
    d->experts = experts;
    d->topk = topk;
    d->hidden = hidden;
    const int ep_size = ep ? sl_comm_size(ep) : 1, ep_rank = ep ? sl_comm_rank(ep) : 0;
    SL_CHECK(ep_size == 1, "expert parallelism across %d ranks is not available yet", ep_size);
    d->local_experts = experts / ep_size;
    d->first_expert = ep_rank * d->local_experts;
    const int64_t slots = max_tokens * topk;
    d->counts = sl_tensor_new1(be, SL_I32, experts);
    d->sorted_token = sl_tensor_new1(be, SL_I32, slots);
    d->slot_pos = sl_tensor_new1(be, SL_I32, slots);
    d->counts_host = sl_xcalloc((size_t)experts, sizeof(int64_t));
    d->local_counts = sl_xcalloc((size_t)d->local_experts, sizeof(int64_t));
    d->xs = sl_tensor_new2(be, SL_F32, slots, hidden);
    d->dxs = sl_tensor_new2(be, SL_F32, slots, hidden);
    /* Without expert parallelism the sorted rows are already the experts' input. */
    d->expert_in = d->xs;
    d->dexpert_in = d->dxs;
    d->expert_out = sl_tensor_new2(be, SL_F32, slots, hidden);
    d->dexpert_out = sl_tensor_new2(be, SL_F32, slots, hidden);
}

void sl_token_dispatcher_dispatch(sl_token_dispatcher *d, const sl_tensor *xn,
                                  const sl_tensor *topk_idx) {
    d->tokens = sl_tensor_rows(xn);
    const int64_t slots = d->tokens * d->topk;
    sl_tensor *sorted = sl_tensor_view1(d->sorted_token, 0, slots);
    sl_tensor *pos = sl_tensor_view1(d->slot_pos, 0, slots);
    sl_op_moe_sort(d->counts, sorted, pos, topk_idx);
    int32_t *c32 = sl_xmalloc((size_t)d->experts * sizeof(int32_t));
    sl_tensor_to_host(d->counts, c32);
    for (int e = 0; e < d->experts; e++) d->counts_host[e] = c32[e];
    free(c32);
    sl_op_gather_rows(d->xs, xn, sorted);
    for (int e = 0; e < d->local_experts; e++)
        d->local_counts[e] = d->counts_host[d->first_expert + e];
    sl_tensor_free(sorted);
    sl_tensor_free(pos);
}

void sl_token_dispatcher_combine(sl_token_dispatcher *d, const sl_tensor *topk_w, sl_tensor *y) {
    sl_tensor *pos = sl_tensor_view1(d->slot_pos, 0, d->tokens * d->topk);
    sl_op_moe_combine(y, d->expert_out, pos, topk_w);
    sl_tensor_free(pos);
}

void sl_token_dispatcher_combine_backward(sl_token_dispatcher *d, const sl_tensor *dy,
                                          const sl_tensor *topk_w, sl_tensor *dtopk_w) {
    sl_tensor *pos = sl_tensor_view1(d->slot_pos, 0, d->tokens * d->topk);
    sl_op_moe_combine_bwd(d->dexpert_out, dtopk_w, dy, d->expert_out, pos, topk_w);
    sl_tensor_free(pos);
}

void sl_token_dispatcher_dispatch_backward(sl_token_dispatcher *d, sl_tensor *dxn) {
    sl_tensor *sorted = sl_tensor_view1(d->sorted_token, 0, d->tokens * d->topk);
    sl_op_scatter_add_rows(dxn, d->dxs, sorted);
    sl_tensor_free(sorted);
}

void sl_token_dispatcher_free(sl_token_dispatcher *d) {
    sl_tensor *ts[] = {d->counts, d->sorted_token, d->slot_pos, d->xs, d->dxs, d->expert_out,
                       d->dexpert_out};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) sl_tensor_free(ts[i]);
    free(d->counts_host);
    free(d->local_counts);
}
