/* moe/ffn_block.c - norm + (MoE | dense MLP) + residual (see ffn_block.h). */
#include "moe/ffn_block.h"

#include <stdio.h>
#include <string.h>

#include "core/log.h"
#include "core/ops.h"
#include "core/profile.h"

void sl_ffn_block_declare(sl_ffn_block *b, const sl_ffn_config *m, int layer, sl_params *ps,
                          int ep_rank, int ep_size) {
    memset(b, 0, sizeof *b);
    b->eps = m->eps;
    char name[112];
    snprintf(name, sizeof name, "model.layers.%d.post_attention_layernorm.weight", layer);
    b->norm =
        sl_params_add(ps, name, SL_PGROUP_DENSE, 1, (int64_t[]){m->hidden}, SL_INIT_ONES, 0.0f, -1);
    b->is_moe = m->is_moe;
    if (b->is_moe) {
        sl_moe_block_declare(&b->moe, &m->moe, layer, ps, ep_rank, ep_size);
    } else {
        snprintf(name, sizeof name, "model.layers.%d.mlp", layer);
        sl_swiglu_mlp_declare(&b->mlp, ps, name, m->hidden, m->dense_ffn, m->init_std);
    }
}

void sl_ffn_block_alloc(sl_ffn_block *b, const sl_ffn_config *m, sl_backend *be, sl_comm *ep,
                        int64_t t, const sl_moe_options *opts) {
    const sl_dtype a = sl_param_dtype(b->norm);
    b->borrowed = false;
    b->xn = sl_tensor_new2(be, a, t, m->hidden);
    b->rstd = sl_tensor_new1(be, SL_F32, t);
    /* the dense FFN's output before the residual add; the MoE block's combine writes the
     * layer's output itself */
    b->y = b->is_moe ? NULL : sl_tensor_new2(be, a, t, m->hidden);
    if (b->is_moe)
        sl_moe_block_alloc(&b->moe, &m->moe, be, ep, t, opts);
    else
        sl_swiglu_mlp_alloc(&b->mlp, be, t, !opts->forward_only);
}

void sl_ffn_block_share(sl_ffn_block *b, sl_ffn_block *owner, sl_backend *be,
                        const sl_moe_options *opts) {
    SL_CHECK(owner->is_moe == b->is_moe, "sharing the activations of a different FFN kind");
    b->xn = owner->xn, b->rstd = owner->rstd, b->y = owner->y;
    b->borrowed = true;
    if (b->is_moe)
        sl_moe_block_share(&b->moe, &owner->moe, be, opts);
    else
        sl_swiglu_mlp_share(&b->mlp, &owner->mlp);
}

void sl_ffn_workspace_alloc(sl_ffn_workspace *ws, int hidden, sl_dtype act, sl_backend *be,
                            int64_t t) {
    ws->dxn = sl_tensor_new2(be, act, t, hidden);
}

static void forward(sl_ffn_block *b, const sl_tensor *x, sl_tensor *out, bool recompute) {
    sl_backend *be = sl_tensor_backend(x);
    SL_PROFILE_REGION (be, SL_PROFILE_NORMS)
        sl_op_rmsnorm_fwd(b->xn, b->rstd, x, b->norm->w, b->eps);
    /* the MoE block adds the residual x into out itself (its combine); the dense FFN's output
     * joins it in an add */
    if (b->is_moe && recompute) {
        sl_moe_block_recompute(&b->moe, b->xn, x, out);
    } else if (b->is_moe) {
        sl_moe_block_forward(&b->moe, b->xn, x, out);
    } else {
        sl_swiglu_mlp_forward(&b->mlp, b->xn, b->y);
        SL_PROFILE_REGION (be, SL_PROFILE_RESIDUAL) sl_op_add(out, x, b->y);
    }
}

void sl_ffn_block_forward(sl_ffn_block *b, const sl_tensor *x, sl_tensor *out) {
    forward(b, x, out, false);
}

void sl_ffn_block_recompute(sl_ffn_block *b, const sl_tensor *x, sl_tensor *out) {
    forward(b, x, out, true);
}

void sl_ffn_block_backward(sl_ffn_block *b, sl_ffn_workspace *ws, const sl_tensor *x,
                           const sl_tensor *dout, const sl_moe_loss_coefs *coefs, sl_tensor *dx) {
    sl_backend *be = sl_tensor_backend(x);
    const sl_tensor *dxn_add = NULL; /* the router's fp32 part of dxn, for the norm to add */
    if (b->is_moe) {
        dxn_add = sl_moe_block_backward(&b->moe, b->xn, dout, coefs, ws->dxn);
    } else {
        SL_PROFILE_REGION (be, SL_PROFILE_RESIDUAL) sl_tensor_zero(ws->dxn);
        sl_swiglu_mlp_backward(&b->mlp, b->xn, dout, ws->dxn);
    }
    /* the norm's gradient plus the residual path's, in one pass (with the router's part of its
     * output gradient) */
    SL_PROFILE_REGION (be, SL_PROFILE_NORMS) {
        sl_param_grad_prepare(b->norm); /* the weight gradient adds up */
        sl_op_rmsnorm_bwd(dx, b->norm->g, ws->dxn, dxn_add, x, b->norm->w, b->rstd, dout);
    }
}

void sl_ffn_block_free(sl_ffn_block *b) {
    if (!b->borrowed) {
        sl_tensor_free(b->xn);
        sl_tensor_free(b->rstd);
        sl_tensor_free(b->y);
    }
    if (b->is_moe)
        sl_moe_block_free(&b->moe);
    else
        sl_swiglu_mlp_free(&b->mlp);
}

void sl_ffn_workspace_free(sl_ffn_workspace *ws) {
    sl_tensor_free(ws->dxn);
}
