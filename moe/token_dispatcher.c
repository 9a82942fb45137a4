/* moe/token_dispatcher.c - token permutation, capacity drops and the expert-parallel
 * exchange (see token_dispatcher.h). */
#include "moe/token_dispatcher.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/ops.h"
#include "core/profile.h"

/* Profiling regions (core/profile.h). */
#define R_PERMUTE     "permute fwd (sort, gather)"
#define R_UNPERMUTE   "unpermute fwd (weighted combine)"
#define R_UNPERMUTE_B "unpermute bwd"
#define R_PERMUTE_B   "permute bwd (scatter-add)"
#define R_EXCHANGE    "expert-parallel exchange"

static bool exchanges(const sl_token_dispatcher *d) {
    return d->ep_size > 1;
}
static bool drops(const sl_token_dispatcher *d) {
    return d->capacity_factor > 0.0;
}

void sl_token_dispatcher_init(sl_token_dispatcher *d, sl_backend *be,
                              const sl_dispatcher_params *p) {
    memset(d, 0, sizeof *d);
    d->be = be;
    d->ep = p->ep;
    d->experts = p->experts;
    d->topk = p->topk;
    d->hidden = p->hidden;
    d->capacity_factor = p->capacity_factor;
    d->drop_policy = p->drop_policy;
    d->ep_size = p->ep ? sl_comm_size(p->ep) : 1;
    d->ep_rank = p->ep ? sl_comm_rank(p->ep) : 0;
    SL_CHECK(p->experts % d->ep_size == 0, "%d experts over %d expert-parallel ranks", p->experts,
             d->ep_size);
    d->local_experts = p->experts / d->ep_size;
    d->first_expert = d->ep_rank * d->local_experts;
    const int64_t slots = p->max_tokens * p->topk, c = p->hidden;
    d->counts = sl_tensor_new1(be, SL_I32, p->experts);
    for (int i = 0; i < 2; i++) d->hv[i] = sl_tensor_view_handle();
    d->sorted_token = sl_tensor_new1(be, SL_I32, slots);
    d->slot_pos = sl_tensor_new1(be, SL_I32, slots);
    d->counts_host = sl_xcalloc((size_t)p->experts, sizeof(int64_t));
    d->counts_i32 = sl_xcalloc((size_t)p->experts, sizeof(int32_t));
    d->kept_host = sl_xcalloc((size_t)p->experts, sizeof(int64_t));
    d->local_counts = sl_xcalloc((size_t)d->local_experts, sizeof(int64_t));
    d->act = p->act;
    d->forward_only = p->forward_only;
    d->counts_on_device = p->counts_on_device;
    d->xs = sl_tensor_new2(be, d->act, slots, c);
    d->ys = sl_tensor_new2(be, d->act, slots, c);
    if (!d->forward_only) {
        d->dxs = sl_tensor_new2(be, d->act, slots, c);
        d->dys = sl_tensor_new2(be, d->act, slots, c);
    }
    if (drops(d)) {
        d->gather_idx = sl_tensor_new1(be, SL_I32, slots);
        d->combine_pos = sl_tensor_new1(be, SL_I32, slots);
    }
    if (exchanges(d)) {
        d->send_rows = sl_xcalloc((size_t)d->ep_size, sizeof(int64_t));
        d->recv_rows = sl_xcalloc((size_t)d->ep_size, sizeof(int64_t));
        d->recv_counts = sl_xcalloc((size_t)d->ep_size * d->local_experts, sizeof(int64_t));
    } else {
        /* Without an exchange the kept rows in expert order are the experts' input. */
        d->expert_in = d->xs;
        d->dexpert_in = d->dxs;
        d->expert_out = d->ys;
        d->dexpert_out = d->dys;
    }
}

/* Grows the receive-side buffers to hold `rows` rows (expert parallelism only: how many
 * rows arrive depends on the routing of the whole group). */
static void reserve(sl_token_dispatcher *d, int64_t rows) {
    if (d->expert_in && rows <= d->capacity) return;
    const int64_t cap = rows + rows / 4 + 1;
    sl_tensor *ts[] = {d->expert_in, d->expert_out, d->dexpert_in, d->dexpert_out};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) sl_tensor_free(ts[i]);
    d->expert_in = sl_tensor_new2(d->be, d->act, cap, d->hidden);
    d->expert_out = sl_tensor_new2(d->be, d->act, cap, d->hidden);
    d->dexpert_in = d->forward_only ? NULL : sl_tensor_new2(d->be, d->act, cap, d->hidden);
    d->dexpert_out = d->forward_only ? NULL : sl_tensor_new2(d->be, d->act, cap, d->hidden);
    d->capacity = cap;
}

/* Completes the counts read started in dispatch. */
static void wait_counts(sl_token_dispatcher *d, sl_host_read *r) {
    sl_tensor_read_wait(r);
    for (int e = 0; e < d->experts; e++) d->counts_host[e] = d->kept_host[e] = d->counts_i32[e];
}

static int32_t *download_i32(const sl_tensor *t, int64_t n) {
    int32_t *h = sl_xmalloc((size_t)(n ? n : 1) * sizeof(int32_t));
    if (n) sl_tensor_to_host_range(t, 0, n, h);
    return h;
}

/*
 * Capacity drops are planned on the host for now: besides the counts this reads the sorted
 * slots, their positions and the routing weights (three more host reads per MoE layer, only
 * with training.capacity_factor > 0); a device kernel replaces it with the CUDA backend.
 *
 * Capacity drops: expert e keeps at most cap = ceil(capacity_factor * N * k / E) of its
 * slots; "probs" keeps the slots with the largest routing weights (ties: earlier slot),
 * "position" the earliest tokens. Kept slots stay in expert order; gather_idx lists their
 * tokens; combine_pos sends each kept slot to its row and each dropped slot to its own
 * all-zero row after the kept ones.
 */
typedef struct {
    float w;
    int64_t slot;
} slot_weight;

static int heavier_first(const void *a, const void *b) {
    const slot_weight *x = a, *y = b;
    if (x->w != y->w) return x->w > y->w ? -1 : 1;
    return x->slot < y->slot ? -1 : x->slot > y->slot;
}

static void plan_drops(sl_token_dispatcher *d, const sl_tensor *topk_w) {
    const int64_t slots = d->tokens * d->topk;
    const int64_t cap = (int64_t)ceil(d->capacity_factor * (double)slots / d->experts);
    int32_t *sorted = download_i32(d->sorted_token, slots);
    int32_t *pos = download_i32(d->slot_pos, slots);
    float *w = sl_xmalloc((size_t)(slots ? slots : 1) * sizeof(float));
    if (slots) sl_tensor_to_host(topk_w, w);
    /* weight of each sorted slot: invert slot_pos */
    float *sw = sl_xmalloc((size_t)(slots ? slots : 1) * sizeof(float));
    for (int64_t s = 0; s < slots; s++) sw[pos[s]] = w[s];
    char *keep = sl_xcalloc((size_t)(slots ? slots : 1), 1);
    slot_weight *order = sl_xmalloc((size_t)(slots ? slots : 1) * sizeof *order);
    int64_t start = 0;
    for (int e = 0; e < d->experts; e++) {
        const int64_t n = d->counts_host[e];
        if (n <= cap || d->drop_policy == SL_DROP_POSITION) {
            for (int64_t i = 0; i < n && i < cap; i++) keep[start + i] = 1;
        } else {
            /* keep the cap heaviest: sort this expert's slots by weight (descending, ties
             * to the earlier slot) and keep the first cap */
            for (int64_t i = 0; i < n; i++) order[i] = (slot_weight){sw[start + i], i};
            qsort(order, (size_t)n, sizeof *order, heavier_first);
            for (int64_t c = 0; c < cap; c++) keep[start + order[c].slot] = 1;
        }
        d->kept_host[e] = n < cap ? n : cap;
        start += n;
    }
    int32_t *newpos_of_sorted = sl_xmalloc((size_t)(slots ? slots : 1) * sizeof(int32_t));
    int64_t kept = 0;
    for (int64_t s = 0; s < slots; s++)
        if (keep[s]) {
            sorted[kept] = sorted[s]; /* compaction in place: kept <= s */
            newpos_of_sorted[s] = (int32_t)kept++;
        }
    int64_t dropped = 0;
    for (int64_t s = 0; s < slots; s++)
        if (!keep[s]) newpos_of_sorted[s] = (int32_t)(kept + dropped++);
    for (int64_t s = 0; s < slots; s++) pos[s] = newpos_of_sorted[pos[s]];
    if (kept) sl_tensor_from_host_range(d->gather_idx, 0, kept, sorted);
    if (slots) sl_tensor_from_host_range(d->combine_pos, 0, slots, pos);
    d->kept = kept;
    d->dropped = dropped;
    free(sorted), free(pos), free(w), free(sw), free(keep), free(newpos_of_sorted), free(order);
}

/* Exchanges the per-expert row counts inside the EP group and sizes the receive side. The
 * rows then travel with sl_comm_alltoallv_grouped, which lands them grouped by local expert
 * (block e holds expert e's rows from every source rank, in rank order). */
static void plan_exchange(sl_token_dispatcher *d) {
    const int ep = d->ep_size, le = d->local_experts;
    int64_t *send_counts = sl_xmalloc((size_t)ep * le * sizeof(int64_t));
    for (int p = 0; p < ep; p++) {
        d->send_rows[p] = 0;
        for (int e = 0; e < le; e++) {
            send_counts[p * le + e] = d->kept_host[p * le + e];
            d->send_rows[p] += d->kept_host[p * le + e];
        }
    }
    sl_comm_alltoall_i64(d->ep, send_counts, d->recv_counts, le);
    free(send_counts);
    d->received = 0;
    for (int p = 0; p < ep; p++) {
        d->recv_rows[p] = 0;
        for (int e = 0; e < le; e++) d->recv_rows[p] += d->recv_counts[p * le + e];
        d->received += d->recv_rows[p];
    }
    for (int e = 0; e < le; e++) {
        d->local_counts[e] = 0;
        for (int p = 0; p < ep; p++) d->local_counts[e] += d->recv_counts[p * le + e];
    }
    reserve(d, d->received);
}

/* Rows in this rank's expert order (flat, per destination rank) <-> the local experts'
 * grouped layout. to_experts: flat -> grouped; otherwise grouped -> flat. */
static void exchange(sl_token_dispatcher *d, const sl_tensor *src, sl_tensor *dst,
                     bool to_experts) {
    SL_PROFILE_REGION (d->be, R_EXCHANGE)
        sl_comm_alltoallv_grouped(d->ep, src, dst, d->send_rows, d->recv_counts, d->local_experts,
                                  to_experts);
}

static void permute(sl_token_dispatcher *d, sl_tensor *dst, const sl_tensor *src,
                    const sl_tensor *idx, int64_t n) {
    if (n == 0) return;
    sl_op_gather_rows(dst, src, sl_tensor_view_set1(d->hv[0], idx, 0, n));
}

void sl_token_dispatcher_dispatch(sl_token_dispatcher *d, const sl_tensor *xn,
                                  const sl_tensor *topk_idx, const sl_tensor *topk_w) {
    sl_profile_begin(d->be, R_PERMUTE);
    d->tokens = sl_tensor_rows(xn);
    const int64_t slots = d->tokens * d->topk;
    sl_op_moe_sort(d->counts, sl_tensor_view_set1(d->hv[0], d->sorted_token, 0, slots),
                   sl_tensor_view_set1(d->hv[1], d->slot_pos, 0, slots), topk_idx);
    d->kept = slots;
    d->dropped = 0;
    d->counts_read = !d->counts_on_device || drops(d) || exchanges(d) || d->host_counts_wanted;
    if (!d->counts_read) { /* the experts read the sort's counts on the device */
        permute(d, d->xs, xn, d->sorted_token, d->kept);
        sl_profile_end(d->be);
        return;
    }
    /* The MoE layer's one host read: the per-expert counts size the grouped GEMMs and the
     * exchange. It is queued right after the sort and waited for where it is first needed:
     * without drops the gather of the rows (slots rows, known on the host) runs before. */
    sl_host_read counts_read;
    sl_tensor_read_start(d->counts, d->counts_i32, &counts_read);
    if (drops(d)) {
        wait_counts(d, &counts_read);
        plan_drops(d, topk_w);
        permute(d, d->xs, xn, d->gather_idx, d->kept);
    } else {
        permute(d, d->xs, xn, d->sorted_token, d->kept);
        wait_counts(d, &counts_read);
    }
    if (exchanges(d)) {
        SL_PROFILE_REGION (d->be, R_EXCHANGE) plan_exchange(d);
        exchange(d, d->xs, d->expert_in, true);
    } else {
        for (int e = 0; e < d->local_experts; e++) d->local_counts[e] = d->kept_host[e];
    }
    sl_profile_end(d->be);
}

sl_group_counts sl_token_dispatcher_counts(const sl_token_dispatcher *d) {
    if (d->counts_read) return sl_counts_host(d->local_counts, d->local_experts);
    return sl_counts_device(d->counts, d->kept);
}

void sl_token_dispatcher_combine(sl_token_dispatcher *d, const sl_tensor *topk_w,
                                 const sl_tensor *res, sl_tensor *y) {
    sl_profile_begin(d->be, R_UNPERMUTE);
    const int64_t slots = d->tokens * d->topk;
    if (exchanges(d)) {
        exchange(d, d->expert_out, d->ys, false);
    }
    if (d->dropped > 0) {
        /* dropped slots read all-zero rows */
        sl_tensor_zero(
            sl_tensor_view_set2(d->hv[0], d->ys, d->kept * d->hidden, d->dropped, d->hidden));
    }
    sl_tensor *pos =
        sl_tensor_view_set1(d->hv[1], drops(d) ? d->combine_pos : d->slot_pos, 0, slots);
    sl_op_moe_combine(y, d->ys, pos, topk_w, res);
    sl_profile_end(d->be);
}

void sl_token_dispatcher_combine_backward(sl_token_dispatcher *d, const sl_tensor *dy,
                                          const sl_tensor *topk_w, sl_tensor *dtopk_w) {
    SL_CHECK(!d->forward_only, "backward through a forward-only token dispatcher");
    const int64_t slots = d->tokens * d->topk;
    sl_tensor *pos =
        sl_tensor_view_set1(d->hv[1], drops(d) ? d->combine_pos : d->slot_pos, 0, slots);
    SL_PROFILE_REGION (d->be, R_UNPERMUTE_B) {
        sl_op_moe_combine_bwd(d->dys, dtopk_w, dy, d->ys, pos, topk_w);
        if (exchanges(d)) exchange(d, d->dys, d->dexpert_out, true);
    }
}

void sl_token_dispatcher_dispatch_backward(sl_token_dispatcher *d, sl_tensor *dxn, float beta) {
    sl_token_dispatcher_dispatch_backward_finish(d, sl_token_dispatcher_dispatch_backward_start(d),
                                                 dxn, beta);
}

sl_comm_request *sl_token_dispatcher_dispatch_backward_start(sl_token_dispatcher *d) {
    SL_CHECK(!d->forward_only, "backward through a forward-only token dispatcher");
    if (!exchanges(d)) return NULL;
    sl_comm_request *req = NULL;
    SL_PROFILE_REGION (d->be, R_EXCHANGE)
        req = sl_comm_ialltoallv_grouped(d->ep, d->dexpert_in, d->dxs, d->send_rows, d->recv_counts,
                                         d->local_experts, false);
    return req;
}

void sl_token_dispatcher_dispatch_backward_finish(sl_token_dispatcher *d, sl_comm_request *req,
                                                  sl_tensor *dxn, float beta) {
    if (req)
        SL_PROFILE_REGION (d->be, R_EXCHANGE) sl_comm_wait(req);
    /* written where nothing writes it below: no kept row, or the scatter that only adds */
    if (beta == 0.0f && (d->kept == 0 || d->topk > 32))
        SL_PROFILE_REGION (d->be, R_PERMUTE_B) sl_tensor_zero(dxn);
    if (d->kept == 0) return;
    /* each token's gradient from its kept rows, through the forward sort's inverse (slot_pos,
     * or with drops combine_pos, whose dropped slots point past the kept rows): no sort here.
     * The same sums in the same order as scattering the kept rows to their tokens, which
     * inverts the sort again (top-k past a warp's 32 lanes still does). */
    const int64_t slots = d->tokens * d->topk;
    SL_PROFILE_REGION (d->be, R_PERMUTE_B) {
        if (d->topk <= 32)
            sl_op_gather_add_rows(
                dxn, sl_tensor_view_set2(d->hv[0], d->dxs, 0, d->kept, d->hidden),
                sl_tensor_view_set1(d->hv[1], drops(d) ? d->combine_pos : d->slot_pos, 0, slots),
                d->topk, beta);
        else
            sl_op_scatter_add_rows(dxn, d->dxs,
                                   sl_tensor_view_set1(d->hv[0],
                                                       drops(d) ? d->gather_idx : d->sorted_token,
                                                       0, d->kept));
    }
}

void sl_token_dispatcher_park(sl_token_dispatcher *d, sl_tensor **in, sl_tensor **dout) {
    SL_CHECK(!d->forward_only, "internal error: parking the rows of a forward-only dispatcher");
    if (exchanges(d)) { /* the received rows: separate buffers of `capacity` rows */
        sl_tensor_trade(in, &d->expert_in);
        sl_tensor_trade(dout, &d->dexpert_out);
    } else { /* the kept rows are the experts' own (init): trade them and keep the aliases */
        sl_tensor_trade(in, &d->xs);
        sl_tensor_trade(dout, &d->dys);
        d->expert_in = d->xs;
        d->dexpert_out = d->dys;
    }
}

void sl_token_dispatcher_free(sl_token_dispatcher *d) {
    sl_tensor *ts[] = {d->hv[0],    d->hv[1],      d->counts,      d->sorted_token,
                       d->slot_pos, d->gather_idx, d->combine_pos, d->xs,
                       d->ys,       d->dys,        d->dxs};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) sl_tensor_free(ts[i]);
    if (exchanges(d)) {
        sl_tensor *rs[] = {d->expert_in, d->expert_out, d->dexpert_in, d->dexpert_out};
        for (size_t i = 0; i < sizeof rs / sizeof rs[0]; i++) sl_tensor_free(rs[i]);
    }
    free(d->counts_host);
    free(d->counts_i32);
    free(d->kept_host);
    free(d->local_counts);
    free(d->send_rows);
    free(d->recv_rows);
    free(d->recv_counts);
}
