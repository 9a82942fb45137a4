/* moe/router.c - router forward/backward around the router ops (see router.h). */
#include "moe/router.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/ops.h"
#include "core/profile.h"

void sl_router_declare(sl_router *r, sl_params *ps, int layer, int hidden, int experts, int topk,
                       bool norm_topk, float init_std) {
    memset(r, 0, sizeof *r);
    r->experts = experts;
    r->topk = topk;
    r->norm_topk = norm_topk;
    char name[112];
    snprintf(name, sizeof name, "model.layers.%d.mlp.gate.weight", layer);
    r->weight = sl_params_add(ps, name, SL_PGROUP_DENSE, 2, (int64_t[]){experts, hidden},
                              SL_INIT_NORMAL, init_std, -1);
}

static void alloc_bias(sl_router *r, sl_backend *be, bool selection_bias) {
    if (!selection_bias) return;
    r->bias = sl_tensor_new1(be, SL_F32, r->experts);
    r->bias_host = sl_xcalloc((size_t)r->experts, sizeof(float));
}

void sl_router_alloc(sl_router *r, sl_backend *be, int64_t t, bool selection_bias, sl_dtype act,
                     bool backward) {
    r->borrowed = false;
    r->x32 = r->dx32 = r->dlogits = r->dtopk_w = r->lbl_grad = NULL; /* those not allocated */
    if (act != SL_F32) {
        const int64_t c = sl_tensor_dim(r->weight->master, 1);
        r->x32 = sl_tensor_new2(be, SL_F32, t, c);
        if (backward) r->dx32 = sl_tensor_new2(be, SL_F32, t, c);
    }
    alloc_bias(r, be, selection_bias);
    r->logits = sl_tensor_new2(be, SL_F32, t, r->experts);
    r->probs = sl_tensor_new2(be, SL_F32, t, r->experts);
    r->topk_idx = sl_tensor_new2(be, SL_I32, t, r->topk);
    r->topk_w = sl_tensor_new2(be, SL_F32, t, r->topk);
    r->stats = sl_tensor_new1(be, SL_F32, r->experts + 1);
    if (backward) {
        r->dlogits = sl_tensor_new2(be, SL_F32, t, r->experts);
        r->dtopk_w = sl_tensor_new2(be, SL_F32, t, r->topk);
        r->lbl_grad = sl_tensor_new1(be, SL_F32, r->experts);
    }
}

void sl_router_share(sl_router *r, const sl_router *o, sl_backend *be, bool selection_bias) {
    SL_CHECK(o->experts == r->experts && o->topk == r->topk,
             "sharing the tensors of a different router shape");
    r->logits = o->logits, r->probs = o->probs, r->topk_idx = o->topk_idx;
    r->topk_w = o->topk_w, r->stats = o->stats, r->dlogits = o->dlogits;
    r->dtopk_w = o->dtopk_w, r->lbl_grad = o->lbl_grad, r->x32 = o->x32, r->dx32 = o->dx32;
    r->borrowed = true;
    alloc_bias(r, be, selection_bias);
}

void sl_router_forward(sl_router *r, const sl_tensor *xn) {
    sl_backend *be = sl_tensor_backend(xn);
    sl_profile_begin(be, "router fwd (fp32 GEMM, softmax, top-k)");
    r->tokens = sl_tensor_rows(xn);
    if (r->x32) {
        sl_op_convert(r->x32, xn);
        xn = r->x32;
    }
    sl_op_matmul(r->logits, xn, r->weight->master, false, true, 1.0f, 0.0f);
    sl_op_router_fwd(r->probs, r->topk_idx, r->topk_w, r->stats, r->logits, r->bias, r->norm_topk);
    sl_profile_end(be);
}

const sl_tensor *sl_router_backward(sl_router *r, const sl_tensor *xn, bool lbl, float z_scale,
                                    sl_tensor *dxn) {
    sl_backend *be = sl_tensor_backend(xn);
    sl_profile_begin(be, "router bwd");
    sl_op_router_bwd(r->dlogits, r->dtopk_w, r->probs, r->topk_idx, r->topk_w, r->logits,
                     lbl ? r->lbl_grad : NULL, z_scale, r->norm_topk);
    if (r->x32) { /* x32 still holds this micro-batch's input from the forward */
        sl_op_matmul(r->weight->g, r->dlogits, r->x32, true, false, 1.0f,
                     sl_param_grad_beta(r->weight));
        sl_op_matmul(r->dx32, r->dlogits, r->weight->master, false, false, 1.0f, 0.0f);
    } else {
        sl_op_matmul(r->weight->g, r->dlogits, xn, true, false, 1.0f,
                     sl_param_grad_beta(r->weight));
        sl_op_matmul(dxn, r->dlogits, r->weight->master, false, false, 1.0f, 1.0f);
    }
    sl_profile_end(be);
    return r->x32 ? r->dx32 : NULL;
}

void sl_router_update_bias(sl_router *r, const int64_t *counts, double rate) {
    if (!r->bias) return;
    double mean = 0.0;
    for (int e = 0; e < r->experts; e++) mean += (double)counts[e] / r->experts;
    for (int e = 0; e < r->experts; e++) {
        const double c = (double)counts[e];
        r->bias_host[e] += (float)(rate * (c < mean ? 1.0 : c > mean ? -1.0 : 0.0));
    }
    sl_tensor_from_host(r->bias, r->bias_host);
}

void sl_router_set_bias(sl_router *r, const float *bias) {
    if (!r->bias) return;
    memcpy(r->bias_host, bias, (size_t)r->experts * sizeof(float));
    sl_tensor_from_host(r->bias, r->bias_host);
}

void sl_router_free(sl_router *r) {
    sl_tensor_free(r->bias);
    free(r->bias_host);
    r->bias = NULL;
    r->bias_host = NULL;
    if (r->borrowed) return;
    sl_tensor *ts[] = {r->logits,  r->probs, r->dlogits,  r->topk_idx, r->topk_w,
                       r->dtopk_w, r->stats, r->lbl_grad, r->x32,      r->dx32};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) sl_tensor_free(ts[i]);
}
