/* model/model_build.c - making a model (see model.h): its parameters declared, its activations
 * allocated for a micro-batch shape and a memory mode (and again when either changes), its RoPE
 * tables, and freeing it. The step itself: model/model.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention/rope.h"
#include "core/log.h"
#include "core/ops.h"
#include "model/counts.h" /* sl_logits_chunk_rows, which sluice plan counts too */
#include "model/model.h"
#include "model/model_internal.h"

static sl_attn_config attn_config(const sl_model_config *c, sl_dtype act) {
    return (sl_attn_config){.act = act,
                            .hidden = c->hidden_size,
                            .heads = c->num_attention_heads,
                            .kv_heads = c->num_key_value_heads,
                            .head_dim = c->head_dim,
                            .gate = c->attn_output_gate,
                            .eps = (float)c->rms_norm_eps,
                            .init_std = (float)c->initializer_range};
}

static sl_ffn_config ffn_config(const sl_model_config *c, int layer) {
    return (sl_ffn_config){.hidden = c->hidden_size,
                           .is_moe = sl_layer_is_moe(c, layer),
                           .dense_ffn = c->intermediate_size,
                           .moe = {.hidden = c->hidden_size,
                                   .experts = c->num_experts,
                                   .topk = c->num_experts_per_tok,
                                   .expert_ffn = c->moe_intermediate_size,
                                   .shared_ffn = c->shared_expert_intermediate_size,
                                   .norm_topk = c->norm_topk_prob,
                                   .init_std = (float)c->initializer_range},
                           .eps = (float)c->rms_norm_eps,
                           .init_std = (float)c->initializer_range};
}

static void declare(sl_model *m, int ep_rank, int ep_size) {
    const sl_model_config *c = &m->cfg;
    const float std = (float)c->initializer_range;
    sl_params *ps = &m->params;
    m->embed = sl_params_add(ps, "model.embed_tokens.weight", SL_PGROUP_DENSE, 2,
                             (int64_t[]){c->vocab_size, c->hidden_size}, SL_INIT_NORMAL, std, -1);
    m->attn = sl_xcalloc((size_t)c->num_hidden_layers, sizeof *m->attn);
    m->ffn = sl_xcalloc((size_t)c->num_hidden_layers, sizeof *m->ffn);
    const sl_attn_config ac = attn_config(c, ps->compute);
    for (int l = 0; l < c->num_hidden_layers; l++) {
        const sl_ffn_config fc = ffn_config(c, l);
        sl_params_set_layer(ps, l);
        sl_attn_block_declare(&m->attn[l], &ac, l, ps);
        sl_ffn_block_declare(&m->ffn[l], &fc, l, ps, ep_rank, ep_size);
        m->n_moe_layers += m->ffn[l].is_moe;
    }
    sl_params_set_layer(ps, -1);
    m->final_norm = sl_params_add(ps, "model.norm.weight", SL_PGROUP_DENSE, 1,
                                  (int64_t[]){c->hidden_size}, SL_INIT_ONES, 0.0f, -1);
    m->lm_head = c->tie_word_embeddings ? m->embed
                                        : sl_params_add(ps, "lm_head.weight", SL_PGROUP_DENSE, 2,
                                                        (int64_t[]){c->vocab_size, c->hidden_size},
                                                        SL_INIT_NORMAL, std, -1);
}

/*
 * Step statistics stay on the device until sl_model_read_stats reads them, once per step:
 * per micro-batch slot, the loss sum (stat_loss) and, on metrics steps, each layer's gate
 * score and each MoE layer's router statistics (stat_metrics); the per-expert counts are on
 * the host already (the dispatcher's one read per layer) and are copied beside them.
 */
void sl_model_stats_reserve(sl_model *m, int cap) {
    if (cap <= m->stat_cap) return;
    const int64_t w = m->stat_width, ne = m->cfg.num_experts;
    const int64_t moe_counts = (int64_t)m->n_moe_layers * ne;
    sl_tensor *loss = sl_tensor_new1(m->be, SL_F32, cap);
    sl_tensor *metrics = sl_tensor_new2(m->be, SL_F32, cap, w);
    int64_t *counts =
        sl_xcalloc((size_t)cap * (size_t)(moe_counts > 0 ? moe_counts : 1), sizeof(int64_t));
    if (m->stat_cap > 0) { /* keep the slots recorded so far */
        sl_tensor *dst = sl_tensor_view1(loss, 0, m->stat_cap);
        sl_tensor_copy(dst, m->stat_loss);
        sl_tensor_free(dst);
        dst = sl_tensor_view2(metrics, 0, m->stat_cap, w);
        sl_tensor_copy(dst, m->stat_metrics);
        sl_tensor_free(dst);
        memcpy(counts, m->stat_counts, (size_t)m->stat_cap * moe_counts * sizeof(int64_t));
    }
    sl_tensor_free(m->stat_loss);
    sl_tensor_free(m->stat_metrics);
    free(m->stat_counts);
    m->stat_loss = loss, m->stat_metrics = metrics, m->stat_counts = counts;
    m->stat_cap = cap;
}

/* Layers share one set of block activations: nothing of a layer outlives its backward's
 * recompute (LAYER) or the next layer's forward (FORWARD_ONLY). */
static bool shares_layers(sl_memory_mode mode) {
    return mode == SL_MEMORY_LAYER || mode == SL_MEMORY_FORWARD_ONLY;
}
/* Distinct tensors behind x[0..L] and h[0..L-1] (the rest alias them, see allocate). */
static int distinct_x(const sl_model *m) {
    return m->memory == SL_MEMORY_FORWARD_ONLY ? 2 : m->cfg.num_hidden_layers + 1;
}
static int distinct_h(const sl_model *m) {
    return shares_layers(m->memory) ? 1 : m->cfg.num_hidden_layers;
}

/* The activations, gradient buffers and staging of micro-batches of m->tokens tokens, as
 * m->memory says: the first layer (of each FFN kind) owns the activations the layers share. */
static void allocate(sl_model *m) {
    const sl_model_config *c = &m->cfg;
    sl_comm *ep = m->ep;
    sl_moe_options opts = m->moe_opts;
    opts.forward_only = m->memory == SL_MEMORY_FORWARD_ONLY;
    opts.regather = &m->regather; /* one set for every layer (moe/parked_tokens.h) */
    const bool share = shares_layers(m->memory), train = !opts.forward_only;
    const int64_t t = m->tokens, hid = c->hidden_size;
    sl_backend *be = m->be;
    int moe_owner = -1, dense_owner = -1;
    for (int l = 0; l < c->num_hidden_layers; l++) {
        const sl_ffn_config fc = ffn_config(c, l);
        if (l == 0 || m->memory == SL_MEMORY_NONE)
            sl_attn_block_alloc(&m->attn[l], be, t);
        else
            sl_attn_block_share(&m->attn[l], &m->attn[0], be, t, m->memory == SL_MEMORY_ATTENTION);
        int *owner = m->ffn[l].is_moe ? &moe_owner : &dense_owner;
        if (share && *owner >= 0) {
            sl_ffn_block_share(&m->ffn[l], &m->ffn[*owner], be, &opts);
        } else {
            sl_ffn_block_alloc(&m->ffn[l], &fc, be, ep, t, &opts);
            *owner = l;
        }
    }
    const sl_dtype a = m->params.compute;
    const sl_attn_config ac = attn_config(c, a);
    if (train) {
        sl_attn_workspace_alloc(&m->attn_ws, &ac, be, t);
        sl_ffn_workspace_alloc(&m->ffn_ws, c->hidden_size, a, be, t);
    }
    /* FORWARD_ONLY: layer l reads x[l] and writes x[l + 1], so two buffers alternate */
    m->x = sl_xcalloc((size_t)c->num_hidden_layers + 1, sizeof *m->x);
    m->h = sl_xcalloc((size_t)c->num_hidden_layers, sizeof *m->h);
    for (int l = 0; l <= c->num_hidden_layers; l++)
        m->x[l] = l < distinct_x(m) ? sl_tensor_new2(be, a, t, hid) : m->x[l % 2];
    for (int l = 0; l < c->num_hidden_layers; l++)
        m->h[l] = l < distinct_h(m) ? sl_tensor_new2(be, a, t, hid) : m->h[0];
    m->dx = train ? sl_tensor_new2(be, a, t, hid) : NULL;
    m->dh = train ? sl_tensor_new2(be, a, t, hid) : NULL;
    m->ids = sl_tensor_new1(be, SL_I32, t);
    m->targets = sl_tensor_new1(be, SL_I32, t);
    m->pos = sl_tensor_new1(be, SL_I32, t);
    m->xf = sl_tensor_new2(be, a, t, hid);
    m->xf_rstd = sl_tensor_new1(be, SL_F32, t);
    m->dxf = train ? sl_tensor_new2(be, a, t, hid) : NULL;
    /* the LM head's logits in chunks: its memory bounded independently of T */
    m->chunk_rows =
        sl_logits_chunk_rows(t, c->vocab_size, (int)sl_dtype_size(a), !sl_backend_host_memory(be));
    m->logits = sl_tensor_new2(be, a, m->chunk_rows, c->vocab_size);
    m->losses = sl_tensor_new1(be, SL_F32, t);
    m->host_ids = sl_xmalloc((size_t)t * sizeof(int32_t));
    for (int i = 0; i < SL_MODEL_VIEWS; i++) m->hv[i] = sl_tensor_view_handle();
    m->stat_width = c->num_hidden_layers + m->n_moe_layers * (c->num_experts + 1);
    sl_model_stats_reserve(m, 1);
    /* the step's expert counts per MoE layer, summed on the device (sl_model_read_expert_counts) */
    const int64_t ne = c->num_experts;
    m->step_counts = m->n_moe_layers > 0 ? sl_tensor_new2(be, SL_I32, m->n_moe_layers, ne) : NULL;
    for (int l = 0, k = 0; l < c->num_hidden_layers; l++)
        if (m->ffn[l].is_moe)
            sl_moe_block_set_step_counts(&m->ffn[l].moe,
                                         sl_tensor_view1(m->step_counts, ne * k++, ne));
}

/* Frees what allocate() made, except the step statistics (their shape does not depend on
 * the tokens). */
static void free_activations(sl_model *m) {
    const int nl = m->cfg.num_hidden_layers;
    if (!m->x) return; /* never allocated (a failed create) */
    for (int l = 0; l < nl; l++) {
        sl_attn_block_free(&m->attn[l]);
        sl_ffn_block_free(&m->ffn[l]);
    }
    sl_attn_workspace_free(&m->attn_ws);
    sl_ffn_workspace_free(&m->ffn_ws);
    sl_regather_rows_free(&m->regather);
    memset(&m->attn_ws, 0, sizeof m->attn_ws); /* a forward-only model has none */
    memset(&m->ffn_ws, 0, sizeof m->ffn_ws);
    for (int l = 0; l < distinct_x(m); l++) sl_tensor_free(m->x[l]);
    for (int l = 0; l < distinct_h(m); l++) sl_tensor_free(m->h[l]);
    free(m->x);
    free(m->h);
    m->x = m->h = NULL;
    sl_tensor *ts[] = {m->dx,      m->dh,  m->ids,    m->targets, m->pos,        m->xf,
                       m->xf_rstd, m->dxf, m->logits, m->losses,  m->step_counts};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) sl_tensor_free(ts[i]);
    free(m->host_ids);
    m->host_ids = NULL;
    m->step_counts = NULL;
    for (int i = 0; i < SL_MODEL_VIEWS; i++) {
        sl_tensor_free(m->hv[i]);
        m->hv[i] = NULL;
    }
}

/* Re-allocates the activations for a new shape or memory mode. inv_freq stays (it depends on
 * the RoPE settings only), and so do the routers' selection biases, which live beside their
 * activations but are trained state. */
static void reallocate(sl_model *m, int batch, int seq, sl_memory_mode mode) {
    const int nl = m->cfg.num_hidden_layers, ne = m->cfg.num_experts;
    float *bias = NULL;
    for (int l = 0; l < nl; l++) {
        const float *b = m->ffn[l].is_moe ? m->ffn[l].moe.router.bias_host : NULL;
        if (!b) continue;
        if (!bias) bias = sl_xcalloc((size_t)nl * ne, sizeof(float));
        memcpy(bias + (int64_t)l * ne, b, (size_t)ne * sizeof(float));
    }
    free_activations(m);
    m->batch = batch;
    m->seq = seq;
    m->tokens = (int64_t)batch * seq;
    m->memory = mode;
    allocate(m);
    for (int l = 0; bias && l < nl; l++)
        if (m->ffn[l].is_moe) sl_router_set_bias(&m->ffn[l].moe.router, bias + (int64_t)l * ne);
    free(bias);
}

int sl_model_set_shape(sl_model *m, int batch, int seq, char *err, size_t errlen) {
    if (batch < 1 || seq < 1) {
        snprintf(err, errlen, "micro-batch shape [%d, %d] is empty", batch, seq);
        return -1;
    }
    if (batch == m->batch && seq == m->seq) return 0;
    reallocate(m, batch, seq, m->memory);
    return 0;
}

static int check_mode(sl_memory_mode mode, char *err, size_t errlen) {
    if (mode == SL_MEMORY_NONE || mode == SL_MEMORY_ATTENTION || mode == SL_MEMORY_LAYER ||
        mode == SL_MEMORY_FORWARD_ONLY)
        return 0;
    snprintf(err, errlen, "unknown memory mode %d", (int)mode);
    return -1;
}

int sl_model_set_memory(sl_model *m, sl_memory_mode mode, char *err, size_t errlen) {
    if (check_mode(mode, err, errlen) != 0) return -1;
    if (mode != SL_MEMORY_FORWARD_ONLY && m->params.no_grads) {
        snprintf(err, errlen,
                 "a model created forward-only has no gradients: memory mode %s "
                 "needs a model created to train",
                 sl_memory_mode_name(mode));
        return -1;
    }
    if (mode != m->memory) reallocate(m, m->batch, m->seq, mode);
    return 0;
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
    return sl_model_create_ex(cfg, be, ep, batch, seq, opts, SL_F32, err, errlen);
}

sl_model *sl_model_create_ex(const sl_model_config *cfg, sl_backend *be, sl_comm *ep, int batch,
                             int seq, const sl_moe_options *opts, sl_dtype compute, char *err,
                             size_t errlen) {
    return sl_model_create_mem(cfg, be, ep, batch, seq, opts, compute, SL_MEMORY_NONE, err, errlen);
}

/* share: NULL, or a model whose parameter memory the new one computes with
 * (sl_model_create_shared). */
static sl_model *create(const sl_model_config *cfg, sl_backend *be, sl_comm *ep, int batch, int seq,
                        const sl_moe_options *opts, sl_dtype compute, sl_memory_mode memory,
                        const sl_params *share, char *err, size_t errlen) {
    static const sl_moe_options defaults = {0};
    if (!opts) opts = &defaults;
    const int ep_size = ep ? sl_comm_size(ep) : 1, ep_rank = ep ? sl_comm_rank(ep) : 0;
    if (check_mode(memory, err, errlen) != 0) return NULL;
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
    m->ep = ep;
    m->moe_opts = *opts;
    m->memory = memory;
    m->stat_metrics_on = true; /* until the trainer's begin_step says otherwise */
    sl_params_init(&m->params, be);
    sl_params_set_compute_dtype(&m->params, compute);
    declare(m, ep_rank, ep_size);
    /* a model created forward-only never trains: no gradients (half its parameters' memory) */
    if (memory == SL_MEMORY_FORWARD_ONLY) sl_params_without_grads(&m->params);
    if (share)
        sl_params_finalize_shared(&m->params, share);
    else
        sl_params_finalize(&m->params);
    allocate(m);
    if (sl_model_set_rope(m, err, errlen) != 0) {
        sl_model_free(m);
        return NULL;
    }
    return m;
}

sl_model *sl_model_create_mem(const sl_model_config *cfg, sl_backend *be, sl_comm *ep, int batch,
                              int seq, const sl_moe_options *opts, sl_dtype compute,
                              sl_memory_mode memory, char *err, size_t errlen) {
    return create(cfg, be, ep, batch, seq, opts, compute, memory, NULL, err, errlen);
}

sl_model *sl_model_create_shared(const sl_model *src, int batch, int seq, char *err,
                                 size_t errlen) {
    sl_moe_options opts = src->moe_opts;
    opts.lbl_comm = NULL;       /* no backward, no load-balancing loss */
    opts.capacity_factor = 0.0; /* dropless, as evaluation: padding rows must not take capacity */
    sl_model *m = create(&src->cfg, src->be, src->ep, batch, seq, &opts, src->params.compute,
                         SL_MEMORY_FORWARD_ONLY, &src->params, err, errlen);
    if (!m) return NULL;
    sl_tensor_copy(m->inv_freq, src->inv_freq); /* a stage's RoPE, not the config's */
    m->mscale = src->mscale;
    for (int l = 0; l < src->cfg.num_hidden_layers; l++)
        if (src->ffn[l].is_moe && src->ffn[l].moe.router.bias_host)
            sl_router_set_bias(&m->ffn[l].moe.router, src->ffn[l].moe.router.bias_host);
    return m;
}
void sl_model_free(sl_model *m) {
    if (!m) return;
    free_activations(m);
    sl_tensor *ts[] = {m->inv_freq, m->stat_loss, m->stat_metrics, m->seg};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) sl_tensor_free(ts[i]);
    free(m->attn);
    free(m->ffn);
    free(m->stat_counts);
    free(m->host_seg);
    sl_params_free(&m->params);
    free(m);
}
