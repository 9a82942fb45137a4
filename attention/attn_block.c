/* attention/attn_block.c - gated-attention block forward and backward (see attn_block.h). */
#include "attention/attn_block.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/log.h"
#include "core/ops.h"
#include "core/profile.h"

/* Profiling regions (core/profile.h); the norms and residual adds join the model-wide rows. */
#define R_PROJ_FWD "qkv+gate projections fwd"
#define R_PROJ_BWD "qkv+gate projections bwd"
#define R_SPLIT    "q/gate split, RoPE (fwd, bwd)"
#define R_ATTN_FWD "attention kernel fwd"
#define R_ATTN_BWD "attention kernel bwd"
#define R_O_FWD    "output projection fwd"
#define R_O_BWD    "output projection bwd"

/* A [T, heads * D] view of a [T, heads, D] tensor. */
static sl_tensor *flat2(sl_tensor *t) {
    return sl_tensor_view2(t, 0, sl_tensor_dim(t, 0), sl_tensor_numel(t) / sl_tensor_dim(t, 0));
}

/* The gate logits (or their gradient): [T, H, D] elementwise, [T, H, 1] headwise, none. */
static sl_tensor *gate_tensor(const sl_attn_config *c, sl_backend *be, int64_t t) {
    if (c->gate == SL_GATE_NONE) return NULL;
    return sl_tensor_new3(be, c->act, t, c->heads,
                          c->gate == SL_GATE_ELEMENTWISE ? c->head_dim : 1);
}

void sl_attn_block_declare(sl_attn_block *b, const sl_attn_config *cfg, int layer, sl_params *ps) {
    memset(b, 0, sizeof *b);
    b->cfg = *cfg;
    const int64_t c = cfg->hidden, hd = (int64_t)b->cfg.heads * b->cfg.head_dim;
    const int64_t kvd = (int64_t)b->cfg.kv_heads * b->cfg.head_dim;
    const float std = cfg->init_std;
    char name[112];
#define DECL(field, suffix, ndim, shape, init)                                                     \
    do {                                                                                           \
        snprintf(name, sizeof name, "model.layers.%d.%s", layer, suffix);                          \
        b->field = sl_params_add(ps, name, SL_PGROUP_DENSE, ndim, shape, init, std, -1);           \
    } while (0)
    DECL(norm, "input_layernorm.weight", 1, ((int64_t[]){c}), SL_INIT_ONES);
    DECL(q_proj, "self_attn.q_proj.weight", 2,
         ((int64_t[]){sl_qgate_width(b->cfg.gate, b->cfg.heads, b->cfg.head_dim), c}),
         SL_INIT_NORMAL);
    DECL(k_proj, "self_attn.k_proj.weight", 2, ((int64_t[]){kvd, c}), SL_INIT_NORMAL);
    DECL(v_proj, "self_attn.v_proj.weight", 2, ((int64_t[]){kvd, c}), SL_INIT_NORMAL);
    DECL(o_proj, "self_attn.o_proj.weight", 2, ((int64_t[]){c, hd}), SL_INIT_NORMAL);
    DECL(q_norm, "self_attn.q_norm.weight", 1, ((int64_t[]){b->cfg.head_dim}), SL_INIT_ONES);
    DECL(k_norm, "self_attn.k_norm.weight", 1, ((int64_t[]){b->cfg.head_dim}), SL_INIT_ONES);
#undef DECL
}

/* y, o, lse: what the attention kernel writes. */
static void alloc_kernel_out(sl_attn_block *b, sl_backend *be, int64_t t) {
    const int64_t h = b->cfg.heads, d = b->cfg.head_dim;
    b->y = sl_tensor_new3(be, b->cfg.act, t, h, d);
    b->o = sl_tensor_new3(be, b->cfg.act, t, h, d);
    b->lse = sl_tensor_new2(be, SL_F32, t, h);
    b->y2 = flat2(b->y);
}

void sl_attn_block_alloc(sl_attn_block *b, sl_backend *be, int64_t t) {
    const int64_t c = b->cfg.hidden, h = b->cfg.heads, kv = b->cfg.kv_heads, d = b->cfg.head_dim;
    const sl_dtype a = b->cfg.act;
    b->xn = sl_tensor_new2(be, a, t, c);
    b->rstd = sl_tensor_new1(be, SL_F32, t);
    b->qall = sl_tensor_new2(be, a, t, sl_qgate_width(b->cfg.gate, h, d));
    b->q_rstd = sl_tensor_new1(be, SL_F32, t * h);
    b->qn = sl_tensor_new3(be, a, t, h, d);
    b->k = sl_tensor_new3(be, a, t, kv, d);
    b->k_rstd = sl_tensor_new1(be, SL_F32, t * kv);
    b->kn = sl_tensor_new3(be, a, t, kv, d);
    b->v = sl_tensor_new3(be, a, t, kv, d);
    b->g = gate_tensor(&b->cfg, be, t);
    b->k2 = flat2(b->k);
    b->v2 = flat2(b->v);
    alloc_kernel_out(b, be, t);
    b->borrowed = b->own_out = false;
}

void sl_attn_block_share(sl_attn_block *b, const sl_attn_block *o, sl_backend *be, int64_t t,
                         bool keep_kernel_out) {
    SL_CHECK(o->cfg.hidden == b->cfg.hidden && o->cfg.heads == b->cfg.heads &&
                 o->cfg.kv_heads == b->cfg.kv_heads && o->cfg.head_dim == b->cfg.head_dim &&
                 o->cfg.gate == b->cfg.gate,
             "sharing the activations of a different attention shape");
    b->xn = o->xn, b->rstd = o->rstd, b->qall = o->qall, b->q_rstd = o->q_rstd;
    b->qn = o->qn, b->k = o->k, b->k_rstd = o->k_rstd, b->kn = o->kn, b->v = o->v, b->g = o->g;
    b->k2 = o->k2, b->v2 = o->v2;
    b->borrowed = true;
    b->own_out = keep_kernel_out;
    if (keep_kernel_out)
        alloc_kernel_out(b, be, t);
    else
        b->y = o->y, b->o = o->o, b->lse = o->lse, b->y2 = o->y2;
}

void sl_attn_workspace_alloc(sl_attn_workspace *ws, const sl_attn_config *c, sl_backend *be,
                             int64_t t) {
    const int64_t h = c->heads, kv = c->kv_heads, d = c->head_dim;
    const sl_dtype a = c->act;
    ws->dy = sl_tensor_new3(be, a, t, h, d);
    ws->dq = sl_tensor_new3(be, a, t, h, d);
    ws->dk = sl_tensor_new3(be, a, t, kv, d);
    ws->dk_pre = sl_tensor_new3(be, a, t, kv, d);
    ws->dv = sl_tensor_new3(be, a, t, kv, d);
    ws->dg = gate_tensor(c, be, t);
    ws->dqall = sl_tensor_new2(be, a, t, sl_qgate_width(c->gate, h, d));
    ws->dxn = sl_tensor_new2(be, a, t, c->hidden);
    ws->dy2 = flat2(ws->dy);
    ws->dk_pre2 = flat2(ws->dk_pre);
    ws->dv2 = flat2(ws->dv);
}

static float attn_scale(const sl_attn_block *b) {
    return 1.0f / sqrtf((float)b->cfg.head_dim);
}

/* The QK-norm and RoPE arguments of the block's layer. */
static sl_qk_norm_rope qk_args(const sl_attn_block *b, const sl_attn_inputs *in) {
    return (sl_qk_norm_rope){.qw = b->q_norm->w,
                             .kw = b->k_norm->w,
                             .eps = b->cfg.eps,
                             .mode = b->cfg.gate,
                             .pos = in->pos,
                             .inv_freq = in->inv_freq,
                             .mscale = in->mscale};
}

void sl_attn_block_recompute_inputs(sl_attn_block *b, const sl_attn_inputs *in,
                                    const sl_tensor *x) {
    sl_backend *be = sl_tensor_backend(x);
    SL_PROFILE_REGION (be, SL_PROFILE_NORMS)
        sl_op_rmsnorm_fwd(b->xn, b->rstd, x, b->norm->w, b->cfg.eps);
    SL_PROFILE_REGION (be, R_PROJ_FWD) {
        sl_op_matmul(b->qall, b->xn, b->q_proj->w, false, true, 1.0f, 0.0f);
        sl_op_matmul(b->k2, b->xn, b->k_proj->w, false, true, 1.0f, 0.0f);
        sl_op_matmul(b->v2, b->xn, b->v_proj->w, false, true, 1.0f, 0.0f);
    }
    /* the q/gate split, the QK-norm per head (never applied to the gate) and RoPE in one op */
    const sl_qk_norm_rope qk = qk_args(b, in);
    SL_PROFILE_REGION (be, R_SPLIT)
        sl_op_qk_norm_rope_fwd(b->qn, b->kn, b->g, b->q_rstd, b->k_rstd, b->qall, b->k, &qk);
}

void sl_attn_block_forward(sl_attn_block *b, const sl_attn_inputs *in, const sl_tensor *x,
                           sl_tensor *out) {
    sl_backend *be = sl_tensor_backend(x);
    sl_attn_block_recompute_inputs(b, in, x);
    SL_PROFILE_REGION (be, R_ATTN_FWD)
        sl_op_gated_attn_fwd(b->y, b->o, b->lse, b->qn, b->kn, b->v, b->g, in->seg, in->batch,
                             in->seq, attn_scale(b));
    /* out = x + y W_o^T: start from the residual and let the GEMM accumulate. */
    SL_PROFILE_REGION (be, SL_PROFILE_RESIDUAL) sl_tensor_copy(out, x);
    SL_PROFILE_REGION (be, R_O_FWD) sl_op_matmul(out, b->y2, b->o_proj->w, false, true, 1.0f, 1.0f);
}

void sl_attn_block_decode(sl_attn_block *b, const sl_attn_inputs *in, sl_tensor *kc, sl_tensor *vc,
                          const sl_tensor *start, const sl_tensor *x, sl_tensor *out) {
    sl_attn_block_recompute_inputs(b, in, x); /* in->pos holds start[b] + i: RoPE at an offset */
    sl_op_kv_cache_write(kc, b->kn, start, in->batch, in->seq);
    sl_op_kv_cache_write(vc, b->v, start, in->batch, in->seq);
    sl_op_gated_attn_decode(b->y, b->qn, kc, vc, b->g, start, in->batch, in->seq, attn_scale(b));
    sl_tensor_copy(out, x);
    sl_op_matmul(out, b->y2, b->o_proj->w, false, true, 1.0f, 1.0f);
}

void sl_attn_block_backward(sl_attn_block *b, const sl_attn_inputs *in, sl_attn_workspace *ws,
                            const sl_tensor *x, const sl_tensor *dout, sl_tensor *dx) {
    sl_backend *be = sl_tensor_backend(x);
    SL_PROFILE_REGION (be, R_O_BWD) {
        sl_op_matmul(b->o_proj->g, dout, b->y2, true, false, 1.0f, sl_param_grad_beta(b->o_proj));
        sl_op_matmul(ws->dy2, dout, b->o_proj->w, false, false, 1.0f, 0.0f);
    }
    /* attention and gate */
    SL_PROFILE_REGION (be, R_ATTN_BWD)
        sl_op_gated_attn_bwd(ws->dq, ws->dk, ws->dv, ws->dg, ws->dy, b->qn, b->kn, b->v, b->g,
                             in->seg, b->o, b->lse, in->batch, in->seq, attn_scale(b));
    /* RoPE, QK-norm and the q/gate merge in one op */
    const sl_qk_norm_rope qk = qk_args(b, in);
    SL_PROFILE_REGION (be, R_SPLIT) {
        sl_param_grad_prepare(b->q_norm); /* the norms' weight gradients add up */
        sl_param_grad_prepare(b->k_norm);
        sl_op_qk_norm_rope_bwd(ws->dqall, ws->dk_pre, b->q_norm->g, b->k_norm->g, ws->dq, ws->dk,
                               ws->dg, b->qall, b->k, b->q_rstd, b->k_rstd, &qk);
    }
    SL_PROFILE_REGION (be, R_PROJ_BWD) {
        sl_op_matmul(b->q_proj->g, ws->dqall, b->xn, true, false, 1.0f,
                     sl_param_grad_beta(b->q_proj));
        sl_op_matmul(b->k_proj->g, ws->dk_pre2, b->xn, true, false, 1.0f,
                     sl_param_grad_beta(b->k_proj));
        sl_op_matmul(b->v_proj->g, ws->dv2, b->xn, true, false, 1.0f,
                     sl_param_grad_beta(b->v_proj));
        sl_op_matmul(ws->dxn, ws->dqall, b->q_proj->w, false, false, 1.0f, 0.0f);
        sl_op_matmul(ws->dxn, ws->dk_pre2, b->k_proj->w, false, false, 1.0f, 1.0f);
        sl_op_matmul(ws->dxn, ws->dv2, b->v_proj->w, false, false, 1.0f, 1.0f);
    }
    /* input norm, the residual path's gradient added in the same pass */
    SL_PROFILE_REGION (be, SL_PROFILE_NORMS) {
        sl_param_grad_prepare(b->norm);
        sl_op_rmsnorm_bwd(dx, b->norm->g, ws->dxn, NULL, x, b->norm->w, b->rstd, dout);
    }
}

void sl_attn_block_gate_score(const sl_attn_block *b, sl_tensor *out) {
    if (b->g)
        sl_op_sigmoid_mean(out, b->g);
    else
        sl_op_fill(out, 0.0f);
}

void sl_attn_block_first_token_share(const sl_attn_block *b, const sl_attn_inputs *in,
                                     sl_tensor *out) {
    /* With document masks most queries cannot see the sequence's first token, and the share
     * of their own document's first token is another quantity: not reported (NaN). */
    if (in->seg) {
        sl_op_fill(out, NAN);
        return;
    }
    sl_op_attn_sink_share(out, b->qn, b->kn, b->lse, in->batch, in->seq, attn_scale(b));
}

void sl_attn_block_free(sl_attn_block *b) {
    if (b->borrowed) {
        if (b->own_out) {
            sl_tensor *own[] = {b->y2, b->y, b->o, b->lse};
            for (size_t i = 0; i < sizeof own / sizeof own[0]; i++) sl_tensor_free(own[i]);
        }
        return;
    }
    /* views first: they point into the tensors freed after them */
    sl_tensor *ts[] = {b->k2, b->v2,     b->y2, b->xn, b->rstd, b->qall, b->q_rstd, b->qn,
                       b->k,  b->k_rstd, b->kn, b->v,  b->g,    b->y,    b->o,      b->lse};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) sl_tensor_free(ts[i]);
}

void sl_attn_workspace_free(sl_attn_workspace *ws) {
    sl_tensor *ts[] = {ws->dy2, ws->dk_pre2, ws->dv2,    ws->dy,    ws->dq, ws->dk,
                       ws->dv,  ws->dg,      ws->dk_pre, ws->dqall, ws->dxn};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) sl_tensor_free(ts[i]);
}
