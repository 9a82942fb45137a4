/* moe/moe_block.c - MoE FFN composition (see moe_block.h). */
#include "moe/moe_block.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/ops.h"
#include "core/profile.h"

/* What the router, the dispatcher, the experts and the shared expert leave: zeroing, the LBL
 * gradient's upload, the shared expert's gate (core/profile.h). */
#define R_MOE "MoE block other (zeroing, LBL gradient, shared-expert gate)"
/* training.park_expert_rows "tokens": the copies when parking, the gathers before the group */
#define R_PARK_TOKENS "expert rows parked as tokens (copy, regather)"

void sl_moe_block_declare(sl_moe_block *b, const sl_moe_config *m, int layer, sl_params *ps,
                          int ep_rank, int ep_size) {
    memset(b, 0, sizeof *b);
    const float std = m->init_std;
    const int local = m->experts / ep_size;
    sl_router_declare(&b->router, ps, layer, m->hidden, m->experts, m->topk, m->norm_topk, std);
    sl_experts_declare(&b->experts, ps, layer, ep_rank * local, local, m->hidden, m->expert_ffn,
                       std);
    b->has_shared = m->shared_ffn > 0;
    if (b->has_shared) {
        char prefix[96], name[112];
        snprintf(prefix, sizeof prefix, "model.layers.%d.mlp.shared_expert", layer);
        sl_swiglu_mlp_declare(&b->shared, ps, prefix, m->hidden, m->shared_ffn, std);
        snprintf(name, sizeof name, "model.layers.%d.mlp.shared_expert_gate.weight", layer);
        b->shared_gate = sl_params_add(ps, name, SL_PGROUP_DENSE, 2, (int64_t[]){1, m->hidden},
                                       SL_INIT_NORMAL, std, -1);
    }
}

/* Whether the experts' grouped GEMMs (both projections) take the sort's counts on the device,
 * so that a dispatch without drops and exchange needs no host read. */
static bool counts_on_device(const sl_moe_block *b, sl_backend *be, sl_dtype a) {
    const sl_experts *x = &b->experts;
    return sl_grouped_counts_on_device(be, a, 2 * x->ffn, x->hidden, x->local) &&
           sl_grouped_counts_on_device(be, a, x->hidden, x->ffn, x->local);
}

void sl_moe_block_alloc(sl_moe_block *b, const sl_moe_config *m, sl_backend *be, sl_comm *ep,
                        int64_t t, const sl_moe_options *opts) {
    const sl_dtype a = sl_param_dtype(b->experts.gate_up);
    const bool backward = !opts->forward_only;
    b->borrowed = false;
    b->overlap_exchange = opts->overlap_exchange;
    sl_router_alloc(&b->router, be, t, opts->selection_bias, a, backward);
    sl_dispatcher_params dp = {.experts = m->experts,
                               .topk = m->topk,
                               .hidden = m->hidden,
                               .max_tokens = t,
                               .ep = ep,
                               .capacity_factor = opts->capacity_factor,
                               .drop_policy = opts->drop_policy,
                               .act = a,
                               .forward_only = opts->forward_only,
                               .counts_on_device = counts_on_device(b, be, a)};
    sl_token_dispatcher_init(&b->dispatcher, be, &dp);
    b->disp = &b->dispatcher;
    b->experts.buf = &b->experts.own;
    b->experts.own.forward_only = opts->forward_only;
    sl_experts_reserve(&b->experts, be, t * m->topk);
    b->lbl_comm = opts->lbl_comm;
    b->regather = opts->regather ? opts->regather : &b->own_regather;
    b->lbl_counts = sl_xcalloc((size_t)m->experts, sizeof(int64_t));
    b->counts = sl_xcalloc((size_t)m->experts, sizeof(int64_t));
    /* the last forward's counts in fp32 on the device: exact, a count is at most t <= 2^24 */
    SL_CHECK(t <= ((int64_t)1 << 24), "MoE block: %lld tokens per micro-batch (at most 2^24)",
             (long long)t);
    b->dcounts = sl_tensor_new1(be, SL_F32, m->experts);
    b->counts_fresh = true; /* zeros on both sides until a forward */
    if (b->has_shared) {
        sl_swiglu_mlp_alloc(&b->shared, be, t, backward);
        b->shared_out = sl_tensor_new2(be, a, t, m->hidden);
        b->shared_y = sl_tensor_new2(be, a, t, m->hidden);
        b->shared_logit = sl_tensor_new2(be, a, t, 1);
        b->dshared_out = b->dshared_logit = NULL;
        if (backward) {
            b->dshared_out = sl_tensor_new2(be, a, t, m->hidden);
            b->dshared_logit = sl_tensor_new2(be, a, t, 1);
        }
    }
}

void sl_moe_block_share(sl_moe_block *b, sl_moe_block *o, sl_backend *be,
                        const sl_moe_options *opts) {
    SL_CHECK(o->disp && o->has_shared == b->has_shared, "sharing the activations of a different "
                                                        "MoE block shape");
    sl_router_share(&b->router, &o->router, be, opts->selection_bias);
    b->disp = o->disp;
    sl_experts_share(&b->experts, &o->experts);
    if (b->has_shared) {
        sl_swiglu_mlp_share(&b->shared, &o->shared);
        b->shared_out = o->shared_out, b->shared_y = o->shared_y;
        b->dshared_out = o->dshared_out, b->shared_logit = o->shared_logit;
        b->dshared_logit = o->dshared_logit;
    }
    b->borrowed = true;
    b->overlap_exchange = opts->overlap_exchange;
    b->lbl_comm = opts->lbl_comm;
    b->regather = opts->regather ? opts->regather : &b->own_regather;
    b->lbl_counts = sl_xcalloc((size_t)b->router.experts, sizeof(int64_t));
    b->counts = sl_xcalloc((size_t)b->router.experts, sizeof(int64_t));
    b->dcounts = sl_tensor_new1(be, SL_F32, b->router.experts);
    b->counts_fresh = true;
}

void sl_moe_block_set_step_counts(sl_moe_block *b, sl_tensor *view) {
    sl_tensor_free(b->step_counts);
    b->step_counts = view;
}

void sl_moe_block_begin_step(sl_moe_block *b, bool host_counts) {
    b->want_host_counts = host_counts;
    /* rows still parked belong to a step that stopped early (its batch failed): its gradients
     * are overwritten anyway (sl_params_begin_grads), so they are dropped, not an error */
    b->parked.held = 0;
    b->wgrad = SL_WGRAD_NOW;
    b->grad_sumsq = NULL;
    memset(b->lbl_counts, 0, (size_t)b->router.experts * sizeof(int64_t));
}

/* record: keep the layer's expert counts and accumulate the LBL counts (not on a recompute). */
static void forward(sl_moe_block *b, const sl_tensor *xn, const sl_tensor *res, sl_tensor *y,
                    bool record) {
    sl_router *r = &b->router;
    sl_token_dispatcher *d = b->disp;
    sl_router_forward(r, xn);
    /* the global-batch LBL sums the counts over ranks on the host */
    d->host_counts_wanted = b->lbl_comm != NULL || b->want_host_counts;
    sl_token_dispatcher_dispatch(d, xn, r->topk_idx, r->topk_w);
    const sl_group_counts k = sl_token_dispatcher_counts(d);
    sl_experts_reserve(&b->experts, d->be, k.rows);
    sl_experts_forward(&b->experts, d->expert_in, k, d->expert_out);
    /* without a shared expert the combine adds the residual itself; with one, y = res + (routed
     * + shared), the order of the separate add this replaces */
    sl_token_dispatcher_combine(d, r->topk_w, b->has_shared ? NULL : res, y);
    if (b->has_shared) {
        sl_swiglu_mlp_forward(&b->shared, xn, b->shared_out);
        sl_op_matmul(b->shared_logit, xn, b->shared_gate->w, false, true, 1.0f, 0.0f);
        sl_op_rowgate_fwd(b->shared_y, b->shared_out, b->shared_logit);
        sl_op_axpy(y, b->shared_y, 1.0f);
        if (res) sl_op_add(y, res, y);
    }
    if (!record) return;
    /* the step's sums and, where the dispatch did not read them, a copy of this forward's for
     * sl_moe_block_counts (the dispatcher's may be another layer's by then): one launch */
    sl_op_moe_counts(b->step_counts, d->counts_read ? NULL : b->dcounts, d->counts, 1.0f);
    b->counts_fresh = d->counts_read;
    /* without a read (and without lbl_comm) the LBL gradient takes them on the device */
    if (!d->counts_read) return;
    memcpy(b->counts, d->counts_host, (size_t)r->experts * sizeof(int64_t));
    /* The LBL gradient's frequencies: this micro-batch, or (global-batch mode) everything
     * routed so far in this step by all ranks of lbl_comm. */
    if (b->lbl_comm) {
        int64_t *c = sl_xmalloc((size_t)r->experts * sizeof(int64_t));
        memcpy(c, d->counts_host, (size_t)r->experts * sizeof(int64_t));
        sl_comm_allreduce_sum_i64(b->lbl_comm, c, r->experts);
        for (int e = 0; e < r->experts; e++) b->lbl_counts[e] += c[e];
        free(c);
    } else {
        memcpy(b->lbl_counts, d->counts_host, (size_t)r->experts * sizeof(int64_t));
    }
}

void sl_moe_block_forward(sl_moe_block *b, const sl_tensor *xn, const sl_tensor *res,
                          sl_tensor *y) {
    SL_PROFILE_REGION (sl_tensor_backend(xn), R_MOE) forward(b, xn, res, y, true);
}

void sl_moe_block_recompute(sl_moe_block *b, const sl_tensor *xn, const sl_tensor *res,
                            sl_tensor *y) {
    SL_PROFILE_REGION (sl_tensor_backend(xn), R_MOE) forward(b, xn, res, y, false);
}

bool sl_moe_block_can_defer(const sl_moe_block *b) {
    return !b->borrowed && !b->experts.own.forward_only && b->experts.buf == &b->experts.own;
}

void sl_moe_block_set_wgrad(sl_moe_block *b, sl_wgrad_when when, sl_tensor *sumsq) {
    static const char *const names[] = {"now", "park", "group"};
    const int held = b->parked.held;
    SL_CHECK(when != SL_WGRAD_PARK || sl_moe_block_can_defer(b),
             "internal error: deferring the weight gradients of a MoE block that shares its "
             "activations or does not train");
    SL_CHECK(when == SL_WGRAD_PARK  ? held < SL_DW_MAX_SEGMENTS - 1
             : when == SL_WGRAD_NOW ? held == 0
                                    : held > 0,
             "internal error: MoE weight gradients set to %s with %d parked micro-batches",
             names[when], held);
    SL_CHECK(!sumsq || when != SL_WGRAD_PARK,
             "internal error: a parked micro-batch's weight gradients asked for their squares");
    b->wgrad = when;
    b->grad_sumsq = sumsq;
}

bool sl_moe_block_set_park_tokens(sl_moe_block *b, bool tokens, int group) {
    SL_CHECK(b->parked.held == 0,
             "internal error: changing how a MoE block parks with %d "
             "micro-batches parked",
             b->parked.held);
    b->park_tokens = tokens && b->disp && b->disp->ep_size == 1;
    /* what the other form kept from earlier steps: tokens leave the slots' rows unused (and
     * point the slots at the shared buffers during a group), rows the token copies; slots past
     * the group's group - 1 parked micro-batches hold nothing */
    for (int i = 0; i < SL_DW_MAX_SEGMENTS - 1; i++) {
        if (b->park_tokens) {
            sl_tensor_free(b->parked.mb[i].in);
            sl_tensor_free(b->parked.mb[i].dout);
            b->parked.mb[i].in = b->parked.mb[i].dout = NULL;
        }
        if (!b->park_tokens || i >= group - 1) sl_parked_tokens_free(&b->ptok[i]);
    }
    sl_experts_parked_trim(&b->parked, group - 1);
    return b->park_tokens;
}

/* The experts' weight gradients after their data gradients, as set_wgrad says: now, parked
 * (the dispatcher's rows and the experts' SwiGLU buffers change hands with a parked slot's;
 * with park_tokens the dispatcher keeps its rows and xn, dy and the routing are copied), or
 * for the parked micro-batches and this one (with park_tokens their rows regathered first,
 * into the shared buffers, which the parked slots hold only for the group's pass). */
static void expert_weights(sl_moe_block *b, const sl_tensor *xn, const sl_tensor *dy) {
    sl_token_dispatcher *d = b->disp;
    sl_experts_parked *p = &b->parked;
    switch (b->wgrad) {
    case SL_WGRAD_NOW:
        sl_experts_backward_weights(&b->experts, d->expert_in, sl_token_dispatcher_counts(d),
                                    d->dexpert_out, b->grad_sumsq);
        break;
    case SL_WGRAD_PARK: {
        sl_experts_parked_rows *slot = &p->mb[p->held];
        if (b->park_tokens)
            SL_PROFILE_REGION (d->be, R_PARK_TOKENS)
                sl_token_dispatcher_park_tokens(d, &b->ptok[p->held], xn, dy, b->router.topk_w);
        else
            sl_token_dispatcher_park(d, &slot->in, &slot->dout);
        sl_experts_park(&b->experts, p, sl_token_dispatcher_counts(d));
        break;
    }
    case SL_WGRAD_GROUP: {
        const int held = p->held;
        for (int i = 0; b->park_tokens && i < held; i++)
            SL_PROFILE_REGION (d->be, R_PARK_TOKENS)
                sl_parked_tokens_regather(&b->ptok[i], b->regather, i, &p->mb[i].in,
                                          &p->mb[i].dout);
        sl_experts_backward_weights_group(&b->experts, p, d->expert_in,
                                          sl_token_dispatcher_counts(d), d->dexpert_out,
                                          b->grad_sumsq);
        for (int i = 0; b->park_tokens && i < held; i++) p->mb[i].in = p->mb[i].dout = NULL;
        break;
    }
    }
}

static const sl_tensor *backward(sl_moe_block *b, const sl_tensor *xn, const sl_tensor *dy,
                                 const sl_moe_loss_coefs *coefs, sl_tensor *dxn) {
    sl_router *r = &b->router;
    sl_token_dispatcher *d = b->disp;
    sl_token_dispatcher_combine_backward(d, dy, r->topk_w, r->dtopk_w);
    if (b->overlap_exchange) {
        /* The input gradients first, their exchange started (nothing without expert
         * parallelism), and the weight gradients (which nothing downstream of the exchange
         * reads) computed while the rows travel. */
        sl_experts_backward_data(&b->experts, sl_token_dispatcher_counts(d), d->dexpert_out,
                                 d->dexpert_in);
        sl_comm_request *back = sl_token_dispatcher_dispatch_backward_start(d);
        expert_weights(b, xn, dy);
        sl_token_dispatcher_dispatch_backward_finish(d, back, dxn, 0.0f); /* dxn's first writer */
    } else {
        sl_experts_backward_data(&b->experts, sl_token_dispatcher_counts(d), d->dexpert_out,
                                 d->dexpert_in);
        expert_weights(b, xn, dy);
        sl_token_dispatcher_dispatch_backward(d, dxn, 0.0f); /* dxn's first writer */
    }
    /* d(lbl_coef * E/k * sum_i f_i P_i)/dp[n, i] = lbl_coef * E * f_i / (k N) with
     * f_i = k * count_i / slots; f is a constant (counts are not differentiable). */
    const double n = (double)r->tokens;
    const bool lbl = coefs->lbl_coef != 0.0;
    if (lbl && b->lbl_comm) { /* the step's counts over lbl_comm so far, on the host */
        double slots = 0.0;
        for (int e = 0; e < r->experts; e++) slots += (double)b->lbl_counts[e];
        float *g = sl_xmalloc((size_t)r->experts * sizeof(float));
        for (int e = 0; e < r->experts; e++)
            g[e] = (float)(coefs->lbl_coef * r->experts *
                           (slots > 0 ? (double)b->lbl_counts[e] / slots : 0.0) / n);
        sl_tensor_from_host(r->lbl_grad, g);
        free(g);
    } else if (lbl) {
        /* this micro-batch's counts (before drops: N k slots) times one fp32 factor, the same
         * product whether the counts were read (then on the host) or not (then on the device,
         * still the sort's: a recompute sorted the same again), so the two paths agree bitwise */
        const float scale = (float)(coefs->lbl_coef * r->experts / (n * r->topk * n));
        if (d->counts_read) {
            float *g = sl_xmalloc((size_t)r->experts * sizeof(float));
            for (int e = 0; e < r->experts; e++) g[e] = scale * (float)b->lbl_counts[e];
            sl_tensor_from_host(r->lbl_grad, g);
            free(g);
        } else {
            sl_op_moe_counts(NULL, r->lbl_grad, d->counts, scale);
        }
    }
    const sl_tensor *rest = sl_router_backward(r, xn, lbl, (float)(coefs->z_coef / n), dxn);
    if (b->has_shared) {
        sl_op_rowgate_bwd(b->dshared_out, b->dshared_logit, dy, b->shared_out, b->shared_logit);
        sl_op_matmul(b->shared_gate->g, b->dshared_logit, xn, true, false, 1.0f,
                     sl_param_grad_beta(b->shared_gate));
        sl_op_matmul(dxn, b->dshared_logit, b->shared_gate->w, false, false, 1.0f, 1.0f);
        sl_swiglu_mlp_backward(&b->shared, xn, b->dshared_out, dxn);
    }
    return rest;
}

const sl_tensor *sl_moe_block_backward(sl_moe_block *b, const sl_tensor *xn, const sl_tensor *dy,
                                       const sl_moe_loss_coefs *coefs, sl_tensor *dxn) {
    const sl_tensor *rest = NULL;
    SL_PROFILE_REGION (sl_tensor_backend(xn), R_MOE) rest = backward(b, xn, dy, coefs, dxn);
    return rest;
}

void sl_moe_aux_stats(int experts, int64_t tokens, const int64_t *counts, const float *stats,
                      double *lbl, double *zloss) {
    /* f_i = share of the tokens that picked expert i (sums to k), P_i = mean probability */
    const double n = (double)tokens;
    double s = 0.0;
    for (int e = 0; e < experts; e++) s += ((double)counts[e] / n) * ((double)stats[e] / n);
    *lbl = s * experts;
    *zloss = (double)stats[experts] / n;
}

void sl_moe_block_aux_stats(sl_moe_block *b, double *lbl, double *zloss) {
    const sl_router *r = &b->router;
    const int64_t *counts = sl_moe_block_counts(b);
    float *stats = sl_xmalloc(((size_t)r->experts + 1) * sizeof(float));
    sl_tensor_to_host(r->stats, stats);
    sl_moe_aux_stats(r->experts, r->tokens, counts, stats, lbl, zloss);
    free(stats);
}

const int64_t *sl_moe_block_counts(sl_moe_block *b) {
    if (!b->counts_fresh) {
        const int e = b->router.experts;
        float *h = sl_xmalloc((size_t)e * sizeof(float));
        sl_tensor_to_host(b->dcounts, h);
        for (int i = 0; i < e; i++) b->counts[i] = (int64_t)h[i];
        free(h);
        b->counts_fresh = true;
    }
    return b->counts;
}

void sl_moe_block_free(sl_moe_block *b) {
    sl_router_free(&b->router);
    sl_experts_parked_free(&b->parked);
    for (int i = 0; i < SL_DW_MAX_SEGMENTS - 1; i++) sl_parked_tokens_free(&b->ptok[i]);
    sl_regather_rows_free(&b->own_regather);
    sl_experts_free(&b->experts);
    free(b->lbl_counts);
    free(b->counts);
    b->lbl_counts = b->counts = NULL;
    sl_tensor_free(b->dcounts);
    sl_tensor_free(b->step_counts);
    b->dcounts = b->step_counts = NULL;
    if (b->borrowed) { /* the rest is the owner's */
        b->disp = NULL;
        return;
    }
    sl_token_dispatcher_free(&b->dispatcher);
    if (b->has_shared) {
        sl_swiglu_mlp_free(&b->shared);
        sl_tensor *ts[] = {b->shared_out, b->shared_y, b->dshared_out, b->shared_logit,
                           b->dshared_logit};
        for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) sl_tensor_free(ts[i]);
    }
}
