/* moe/parked_tokens.c - expert rows kept as tokens and routing (see parked_tokens.h). */
#include "moe/parked_tokens.h"

#include <string.h>

#include "core/log.h"
#include "core/ops.h"

/* Makes *t hold at least n elements of dt on be (a vector; views give it its shapes). */
static void grow(sl_tensor **t, sl_backend *be, sl_dtype dt, int64_t n) {
    if (*t && sl_tensor_numel(*t) >= n) return;
    sl_tensor_free(*t);
    *t = sl_tensor_new1(be, dt, n);
}

/* The first n elements of t, as a vector. */
static sl_tensor *prefix(sl_tensor *view, const sl_tensor *t, int64_t n) {
    return sl_tensor_view_set1(view, t, 0, n);
}

void sl_token_dispatcher_park_tokens(const sl_token_dispatcher *d, sl_parked_tokens *p,
                                     const sl_tensor *xn, const sl_tensor *dy,
                                     const sl_tensor *topk_w) {
    SL_CHECK(d->ep_size == 1 && !d->forward_only,
             "internal error: parking the tokens of a dispatcher with expert parallelism (its "
             "rows came from other ranks) or without a backward");
    const int64_t n = d->tokens, c = d->hidden, slots = n * d->topk;
    SL_CHECK(sl_tensor_numel(xn) == n * c && sl_tensor_numel(dy) == n * c &&
                 sl_tensor_numel(topk_w) == slots && sl_tensor_dtype(xn) == d->act &&
                 sl_tensor_dtype(dy) == d->act,
             "internal error: parking tokens that are not the last dispatch's");
    const int64_t cap = sl_tensor_numel(d->slot_pos); /* the dispatcher's slots */
    sl_backend *be = d->be;
    if (!p->hv[0])
        for (int i = 0; i < 5; i++) p->hv[i] = sl_tensor_view_handle();
    grow(&p->xn, be, d->act, cap / d->topk * c);
    grow(&p->dy, be, d->act, cap / d->topk * c);
    grow(&p->gather, be, SL_I32, cap);
    grow(&p->pos, be, SL_I32, cap);
    grow(&p->w, be, SL_F32, cap);
    const bool drops = d->capacity_factor > 0.0;
    sl_tensor_copy(prefix(p->hv[0], p->xn, n * c), prefix(p->hv[1], xn, n * c));
    sl_tensor_copy(prefix(p->hv[0], p->dy, n * c), prefix(p->hv[1], dy, n * c));
    if (d->kept > 0)
        sl_tensor_copy(prefix(p->hv[0], p->gather, d->kept),
                       prefix(p->hv[1], drops ? d->gather_idx : d->sorted_token, d->kept));
    sl_tensor_copy(prefix(p->hv[0], p->pos, slots),
                   prefix(p->hv[1], drops ? d->combine_pos : d->slot_pos, slots));
    sl_tensor_copy(prefix(p->hv[0], p->w, slots), prefix(p->hv[1], topk_w, slots));
    p->tokens = n, p->kept = d->kept, p->topk = d->topk;
    p->hidden = c, p->slots = cap;
}

void sl_parked_tokens_regather(const sl_parked_tokens *p, sl_regather_rows *r, int i,
                               sl_tensor **in, sl_tensor **dout) {
    SL_CHECK(i >= 0 && i < SL_DW_MAX_SEGMENTS - 1 && p->xn,
             "internal error: regathering into slot %d, or tokens never parked", i);
    /* every slot's position lies below the dispatcher's slots (a dropped slot's too) */
    const int64_t n = p->tokens, k = p->topk, c = p->hidden, rows = p->slots;
    const sl_dtype dt = sl_tensor_dtype(p->xn);
    sl_backend *be = sl_tensor_backend(p->xn);
    for (int j = 0; j < 2; j++) {
        sl_tensor **t = j ? &r->dout[i] : &r->in[i];
        if (*t && sl_tensor_rows(*t) >= rows && sl_tensor_dtype(*t) == dt) continue;
        sl_tensor_free(*t);
        *t = sl_tensor_new2(be, dt, rows, c);
    }
    sl_tensor *const *hv = p->hv;
    /* the dispatch's gather (sl_token_dispatcher_dispatch, permute) */
    if (p->kept > 0)
        sl_op_gather_rows(sl_tensor_view_set2(hv[0], r->in[i], 0, p->kept, c),
                          sl_tensor_view_set2(hv[1], p->xn, 0, n, c),
                          prefix(hv[2], p->gather, p->kept));
    /* the combine's backward, its dx alone (sl_token_dispatcher_combine_backward) */
    if (n > 0)
        sl_op_moe_combine_bwd(r->dout[i], NULL, sl_tensor_view_set2(hv[1], p->dy, 0, n, c), NULL,
                              prefix(hv[3], p->pos, n * k),
                              sl_tensor_view_set2(hv[4], p->w, 0, n, k));
    *in = r->in[i];
    *dout = r->dout[i];
}

void sl_parked_tokens_free(sl_parked_tokens *p) {
    sl_tensor *ts[] = {p->xn,    p->dy,    p->gather, p->pos,   p->w,
                       p->hv[0], p->hv[1], p->hv[2],  p->hv[3], p->hv[4]};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) sl_tensor_free(ts[i]);
    memset(p, 0, sizeof *p);
}

void sl_regather_rows_trim(sl_regather_rows *r, int keep) {
    for (int i = keep < 0 ? 0 : keep; i < SL_DW_MAX_SEGMENTS - 1; i++) {
        sl_tensor_free(r->in[i]);
        sl_tensor_free(r->dout[i]);
        r->in[i] = r->dout[i] = NULL;
    }
}

void sl_regather_rows_free(sl_regather_rows *r) {
    sl_regather_rows_trim(r, 0);
}
