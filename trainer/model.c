/* trainer/model.c - the decoder stack, LM head and loss (see model.h). */
#include "trainer/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention/rope.h"
#include "core/log.h"
#include "core/ops.h"

/* Elements of one logits chunk: bounds the LM head's memory independently of T. */
#define SL_LOGITS_CHUNK_ELEMS ((int64_t)1 << 24)

static void declare(sl_model *m, int ep_rank, int ep_size) {
    const sl_model_config *c = &m->cfg;
    const float std = (float)c->initializer_range;
    sl_params *ps = &m->params;
    m->embed = sl_params_add(ps, "model.embed_tokens.weight", SL_PGROUP_DENSE, 2,
                             (int64_t[]){c->vocab_size, c->hidden_size}, SL_INIT_NORMAL, std, -1);
    m->attn = sl_xcalloc((size_t)c->num_hidden_layers, sizeof *m->attn);
    m->ffn = sl_xcalloc((size_t)c->num_hidden_layers, sizeof *m->ffn);
    for (int l = 0; l < c->num_hidden_layers; l++) {
        sl_attn_block_declare(&m->attn[l], c, l, ps);
        sl_ffn_block_declare(&m->ffn[l], c, l, ps, ep_rank, ep_size);
        m->n_moe_layers += m->ffn[l].is_moe;
    }
    m->final_norm = sl_params_add(ps, "model.norm.weight", SL_PGROUP_DENSE, 1,
                                  (int64_t[]){c->hidden_size}, SL_INIT_ONES, 0.0f, -1);
    m->lm_head = c->tie_word_embeddings ? m->embed
                                        : sl_params_add(ps, "lm_head.weight", SL_PGROUP_DENSE, 2,
                                                        (int64_t[]){c->vocab_size, c->hidden_size},
                                                        SL_INIT_NORMAL, std, -1);
}

static void allocate(sl_model *m, sl_comm *ep, const sl_moe_options *opts) {
    const sl_model_config *c = &m->cfg;
    const int64_t t = m->tokens, hid = c->hidden_size;
    sl_backend *be = m->be;
    for (int l = 0; l < c->num_hidden_layers; l++) {
        sl_attn_block_alloc(&m->attn[l], be, t);
        sl_ffn_block_alloc(&m->ffn[l], c, be, ep, t, opts);
    }
    sl_attn_workspace_alloc(&m->attn_ws, c, be, t);
    sl_ffn_workspace_alloc(&m->ffn_ws, c, be, t);
    m->x = sl_xcalloc((size_t)c->num_hidden_layers + 1, sizeof *m->x);
    m->h = sl_xcalloc((size_t)c->num_hidden_layers, sizeof *m->h);
    for (int l = 0; l <= c->num_hidden_layers; l++) {
        m->x[l] = sl_tensor_new2(be, SL_F32, t, hid);
        if (l < c->num_hidden_layers) m->h[l] = sl_tensor_new2(be, SL_F32, t, hid);
    }
    m->dx = sl_tensor_new2(be, SL_F32, t, hid);
    m->dh = sl_tensor_new2(be, SL_F32, t, hid);
    m->ids = sl_tensor_new1(be, SL_I32, t);
    m->targets = sl_tensor_new1(be, SL_I32, t);
    m->pos = sl_tensor_new1(be, SL_I32, t);
    m->inv_freq = sl_tensor_new1(be, SL_F32, c->head_dim / 2);
    m->xf = sl_tensor_new2(be, SL_F32, t, hid);
    m->xf_rstd = sl_tensor_new1(be, SL_F32, t);
    m->dxf = sl_tensor_new2(be, SL_F32, t, hid);
    m->chunk_rows = SL_LOGITS_CHUNK_ELEMS / c->vocab_size;
    if (m->chunk_rows < 1) m->chunk_rows = 1;
    if (m->chunk_rows > t) m->chunk_rows = t;
    m->logits = sl_tensor_new2(be, SL_F32, m->chunk_rows, c->vocab_size);
    m->losses = sl_tensor_new1(be, SL_F32, t);
    m->host_ids = sl_xmalloc((size_t)t * sizeof(int32_t));
}

int sl_model_set_rope(sl_model *m, char *err, size_t errlen) {
    const sl_model_config *c = &m->cfg;
    sl_rope_params rp = {
        .head_dim = c->head_dim,
        .partial_rotary_factor = c->partial_rotary_factor,
        .base = c->rope_theta,
        .yarn = c->rope_scaling.type == SL_ROPE_YARN,
        .factor = c->rope_scaling.factor,
        .original_max_position_embeddings = c->rope_scaling.original_max_position_embeddings,
        .beta_fast = c->rope_scaling.beta_fast,
        .beta_slow = c->rope_scaling.beta_slow,
        .attention_factor = c->rope_scaling.attention_factor,
    };
    float *inv = sl_xcalloc((size_t)c->head_dim / 2 + 1, sizeof(float));
    int half = sl_rope_inv_freq(&rp, inv, &m->mscale, NULL, NULL);
    if (half < 1) {
        snprintf(err, errlen, "invalid RoPE parameters (head_dim %d, partial_rotary_factor %g)",
                 c->head_dim, c->partial_rotary_factor);
        free(inv);
        return -1;
    }
    sl_tensor_free(m->inv_freq);
    m->inv_freq = sl_tensor_new1(m->be, SL_F32, half);
    sl_tensor_from_host(m->inv_freq, inv);
    free(inv);
    return 0;
}

sl_model *sl_model_create(const sl_model_config *cfg, sl_backend *be, sl_comm *ep, int batch,
                          int seq, const sl_moe_options *opts, char *err, size_t errlen) {
    static const sl_moe_options defaults = {0};
    if (!opts) opts = &defaults;
    const int ep_size = ep ? sl_comm_size(ep) : 1, ep_rank = ep ? sl_comm_rank(ep) : 0;
    if (cfg->num_experts > 0 && cfg->num_experts % ep_size != 0) {
        snprintf(err, errlen, "expert_parallel = %d does not divide num_experts = %d", ep_size,
                 cfg->num_experts);
        return NULL;
    }
    sl_model *m = sl_xcalloc(1, sizeof *m);
    m->cfg = *cfg;
    m->be = be;
    m->batch = batch;
    m->seq = seq;
    m->tokens = (int64_t)batch * seq;
    sl_params_init(&m->params, be);
    declare(m, ep_rank, ep_size);
    sl_params_finalize(&m->params);
    allocate(m, ep, opts);
    if (sl_model_set_rope(m, err, errlen) != 0) {
        sl_model_free(m);
        return NULL;
    }
    return m;
}

/* Splits [batch, seq + 1] tokens into inputs, targets and positions on the device. */
static void load_tokens(sl_model *m, const int32_t *tokens) {
    const int s = m->seq;
    for (int b = 0; b < m->batch; b++)
        for (int i = 0; i < s; i++)
            m->host_ids[(int64_t)b * s + i] = tokens[(int64_t)b * (s + 1) + i];
    sl_tensor_from_host(m->ids, m->host_ids);
    for (int b = 0; b < m->batch; b++)
        for (int i = 0; i < s; i++)
            m->host_ids[(int64_t)b * s + i] = tokens[(int64_t)b * (s + 1) + i + 1];
    sl_tensor_from_host(m->targets, m->host_ids);
    for (int64_t t = 0; t < m->tokens; t++) m->host_ids[t] = (int32_t)(t % s);
    sl_tensor_from_host(m->pos, m->host_ids);
}

static void forward_stack(sl_model *m, sl_fwd_stats *st) {
    const sl_model_config *c = &m->cfg;
    sl_attn_inputs in = {.batch = m->batch,
                         .seq = m->seq,
                         .pos = m->pos,
                         .inv_freq = m->inv_freq,
                         .mscale = m->mscale};
    memset(st, 0, sizeof *st);
    sl_op_embedding_fwd(m->x[0], m->ids, m->embed->w);
    for (int l = 0; l < c->num_hidden_layers; l++) {
        sl_attn_block_forward(&m->attn[l], &in, m->x[l], m->h[l]);
        sl_ffn_block_forward(&m->ffn[l], m->h[l], m->x[l + 1]);
        st->gate_score += sl_attn_block_gate_score(&m->attn[l]) / c->num_hidden_layers;
        if (m->ffn[l].is_moe) {
            st->lbl += m->ffn[l].moe.lbl / m->n_moe_layers;
            st->zloss += m->ffn[l].moe.zloss / m->n_moe_layers;
        }
    }
    sl_op_rmsnorm_fwd(m->xf, m->xf_rstd, m->x[c->num_hidden_layers], m->final_norm->w,
                      (float)c->rms_norm_eps);
}

/* LM head + cross-entropy over row chunks; with backward, also the head's gradients. */
static void head_and_loss(sl_model *m, bool backward, float ce_scale, sl_fwd_stats *st) {
    const int64_t v = m->cfg.vocab_size, hid = m->cfg.hidden_size;
    for (int64_t r0 = 0; r0 < m->tokens; r0 += m->chunk_rows) {
        const int64_t n = m->tokens - r0 < m->chunk_rows ? m->tokens - r0 : m->chunk_rows;
        sl_tensor *xf = sl_tensor_view2(m->xf, r0 * hid, n, hid);
        sl_tensor *logits = sl_tensor_view2(m->logits, 0, n, v);
        sl_tensor *tg = sl_tensor_view1(m->targets, r0, n);
        sl_tensor *loss = sl_tensor_view1(m->losses, r0, n);
        sl_op_matmul(logits, xf, m->lm_head->w, false, true, 1.0f, 0.0f);
        /* The gradient overwrites the logits in place. */
        sl_op_cross_entropy(loss, backward ? logits : NULL, logits, tg, ce_scale);
        if (backward) {
            sl_tensor *dxf = sl_tensor_view2(m->dxf, r0 * hid, n, hid);
            sl_op_matmul(m->lm_head->g, logits, xf, true, false, 1.0f, 1.0f);
            sl_op_matmul(dxf, logits, m->lm_head->w, false, false, 1.0f, 0.0f);
            sl_tensor_free(dxf);
        }
        sl_tensor_free(xf), sl_tensor_free(logits), sl_tensor_free(tg), sl_tensor_free(loss);
    }
    st->loss_sum = sl_op_sum(m->losses);
    st->tokens = m->tokens;
}

void sl_model_forward(sl_model *m, const int32_t *tokens, sl_fwd_stats *st) {
    load_tokens(m, tokens);
    forward_stack(m, st);
    head_and_loss(m, false, 1.0f, st);
}

void sl_model_forward_backward(sl_model *m, const int32_t *tokens, float ce_scale, double aux_scale,
                               sl_fwd_stats *st) {
    const sl_model_config *c = &m->cfg;
    load_tokens(m, tokens);
    forward_stack(m, st);
    head_and_loss(m, true, ce_scale, st);
    sl_attn_inputs in = {.batch = m->batch,
                         .seq = m->seq,
                         .pos = m->pos,
                         .inv_freq = m->inv_freq,
                         .mscale = m->mscale};
    /* The objective has coef * mean over MoE layers: each layer gets coef / n_moe. */
    sl_moe_loss_coefs coefs = {0};
    if (m->n_moe_layers > 0) {
        coefs.lbl_coef = c->router_aux_loss_coef * aux_scale / m->n_moe_layers;
        coefs.z_coef = c->router_z_loss_coef * aux_scale / m->n_moe_layers;
    }
    sl_op_rmsnorm_bwd(m->dx, m->final_norm->g, m->dxf, m->x[c->num_hidden_layers], m->final_norm->w,
                      m->xf_rstd);
    for (int l = c->num_hidden_layers - 1; l >= 0; l--) {
        sl_ffn_block_backward(&m->ffn[l], &m->ffn_ws, m->h[l], m->dx, &coefs, m->dh);
        sl_attn_block_backward(&m->attn[l], &in, &m->attn_ws, m->x[l], m->dh, m->dx);
        if (m->grad_ready) m->grad_ready(m->grad_ready_user, l);
    }
    sl_op_embedding_bwd(m->embed->g, m->dx, m->ids);
    if (m->grad_ready) m->grad_ready(m->grad_ready_user, -1);
}

void sl_model_begin_step(sl_model *m) {
    for (int l = 0; l < m->cfg.num_hidden_layers; l++)
        if (m->ffn[l].is_moe) sl_moe_block_begin_step(&m->ffn[l].moe);
}

void sl_model_update_router_bias(sl_model *m, const int64_t *counts, double rate) {
    for (int l = 0; l < m->cfg.num_hidden_layers; l++)
        if (m->ffn[l].is_moe)
            sl_router_update_bias(&m->ffn[l].moe.router, counts + (int64_t)l * m->cfg.num_experts,
                                  rate);
}

const int64_t *sl_model_expert_counts(const sl_model *m, int layer) {
    return m->ffn[layer].is_moe ? sl_moe_block_counts(&m->ffn[layer].moe) : NULL;
}

void sl_model_free(sl_model *m) {
    if (!m) return;
    const int nl = m->cfg.num_hidden_layers;
    for (int l = 0; l < nl; l++) {
        if (m->x) sl_attn_block_free(&m->attn[l]);
        if (m->x) sl_ffn_block_free(&m->ffn[l]);
    }
    if (m->x) {
        sl_attn_workspace_free(&m->attn_ws);
        sl_ffn_workspace_free(&m->ffn_ws);
        for (int l = 0; l <= nl; l++) {
            sl_tensor_free(m->x[l]);
            if (l < nl) sl_tensor_free(m->h[l]);
        }
    }
    sl_tensor *ts[] = {m->dx, m->dh,      m->ids, m->targets, m->pos,   m->inv_freq,
                       m->xf, m->xf_rstd, m->dxf, m->logits,  m->losses};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) sl_tensor_free(ts[i]);
    free(m->x);
    free(m->h);
    free(m->attn);
    free(m->ffn);
    free(m->host_ids);
    sl_params_free(&m->params);
    free(m);
}
