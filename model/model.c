/* model/model.c - the decoder stack, LM head and loss (see model.h): a micro-batch's forward and
 * backward and the step's statistics. Making and freeing a model: model/model_build.c. */
#include "model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/ops.h"
#include "core/profile.h"
#include "model/diagnostics.h"
#include "model/model_internal.h"

/* Profiling regions (core/profile.h). */
#define R_EMBED   "embedding (+ token upload)"
#define R_HEAD    "LM head + cross-entropy"
#define R_METRICS "step metrics (gate score, router statistics)"
#define R_STATS   "loss statistics"

/* A view of n entries of slot `mb`'s metrics row from column col: the gate score of layer l
 * is column l, MoE layer k's router statistics the E + 1 columns from L + k (E + 1). */
static sl_tensor *metrics_view(sl_model *m, int mb, int64_t col, int64_t n) {
    return sl_tensor_view1(m->stat_metrics, (int64_t)mb * m->stat_width + col, n);
}

void sl_model_set_documents(sl_model *m, const int32_t *doc_start, const int *n_docs) {
    const int s = m->seq;
    if (!m->seg || sl_tensor_numel(m->seg) != m->tokens) { /* first use, or a new shape */
        sl_tensor_free(m->seg);
        free(m->host_seg);
        m->seg = sl_tensor_new1(m->be, SL_I32, m->tokens);
        m->host_seg = sl_xmalloc((size_t)m->tokens * sizeof(int32_t));
    }
    for (int b = 0; b < m->batch; b++) {
        const int32_t *ds = doc_start + (int64_t)b * (s + 1);
        int32_t *seg = m->host_seg + (int64_t)b * s;
        int k = 0, start = 0;
        for (int i = 0; i < s; i++) {
            for (; k < n_docs[b] && ds[k] <= i; k++) {
                SL_CHECK(ds[k] >= start,
                         "sl_model_set_documents: row %d: document starts are "
                         "not increasing (%d after %d)",
                         b, (int)ds[k], start);
                start = ds[k];
            }
            seg[i] = start;
        }
    }
    m->docs_next = true;
    m->docs_batch = m->batch, m->docs_seq = s;
}

/* Splits [batch, seq + 1] tokens into inputs, targets and positions on the device; with
 * documents (sl_model_set_documents) positions count from each token's document start. */
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
    m->docs_on = m->docs_next;
    m->docs_next = false;
    SL_CHECK(!m->docs_on || (m->docs_batch == m->batch && m->docs_seq == m->seq),
             "sl_model_set_documents was called before a change of the micro-batch shape");
    for (int64_t t = 0; t < m->tokens; t++)
        m->host_ids[t] = (int32_t)(t % s) - (m->docs_on ? m->host_seg[t] : 0);
    sl_tensor_from_host(m->pos, m->host_ids);
    if (m->docs_on) sl_tensor_from_host(m->seg, m->host_seg);
}

/* Records micro-batch slot m->stat_mb's metrics as the stack runs (metrics steps only). */
static void forward_stack(sl_model *m) {
    const sl_model_config *c = &m->cfg;
    sl_attn_inputs in = {.batch = m->batch,
                         .seq = m->seq,
                         .pos = m->pos,
                         .seg = m->docs_on ? m->seg : NULL,
                         .inv_freq = m->inv_freq,
                         .mscale = m->mscale};
    const int mb = m->stat_mb, ne = c->num_experts;
    int moe = 0;
    SL_PROFILE_REGION (m->be, R_EMBED) sl_op_embedding_fwd(m->x[0], m->ids, m->embed->w);
    for (int l = 0; l < c->num_hidden_layers; l++) {
        sl_attn_block_forward(&m->attn[l], &in, m->x[l], m->h[l]);
        sl_ffn_block_forward(&m->ffn[l], m->h[l], m->x[l + 1]);
        if (m->diag) sl_model_diagnostics_layer(m->diag, l, &m->attn[l], &in, m->x[l + 1]);
        if (!m->stat_metrics_on) continue;
        sl_profile_begin(m->be, R_METRICS);
        sl_tensor *gate = metrics_view(m, mb, l, 1);
        sl_attn_block_gate_score(&m->attn[l], gate);
        sl_tensor_free(gate);
        if (m->ffn[l].is_moe) {
            sl_tensor *dst =
                metrics_view(m, mb, c->num_hidden_layers + (int64_t)moe * (ne + 1), ne + 1);
            sl_tensor_copy(dst, m->ffn[l].moe.router.stats);
            sl_tensor_free(dst);
            memcpy(m->stat_counts + ((int64_t)mb * m->n_moe_layers + moe) * ne,
                   sl_moe_block_counts(&m->ffn[l].moe), (size_t)ne * sizeof(int64_t));
            moe++;
        }
        sl_profile_end(m->be);
    }
    SL_PROFILE_REGION (m->be, SL_PROFILE_NORMS)
        sl_op_rmsnorm_fwd(m->xf, m->xf_rstd, m->x[c->num_hidden_layers], m->final_norm->w,
                          (float)c->rms_norm_eps);
}

/* LM head + cross-entropy over row chunks; with backward, also the head's gradients. */
static void head_and_loss(sl_model *m, bool backward, float ce_scale) {
    const int64_t v = m->cfg.vocab_size, hid = m->cfg.hidden_size;
    for (int64_t r0 = 0; r0 < m->tokens; r0 += m->chunk_rows) {
        const int64_t n = m->tokens - r0 < m->chunk_rows ? m->tokens - r0 : m->chunk_rows;
        sl_tensor *xf = sl_tensor_view_set2(m->hv[0], m->xf, r0 * hid, n, hid);
        sl_tensor *logits = sl_tensor_view_set2(m->hv[1], m->logits, 0, n, v);
        sl_tensor *tg = sl_tensor_view_set1(m->hv[2], m->targets, r0, n);
        sl_tensor *loss = sl_tensor_view_set1(m->hv[3], m->losses, r0, n);
        sl_op_matmul(logits, xf, m->lm_head->w, false, true, 1.0f, 0.0f);
        /* The gradient overwrites the logits in place. */
        sl_op_cross_entropy(loss, backward ? logits : NULL, logits, tg, ce_scale);
        if (backward) {
            sl_tensor *dxf = sl_tensor_view_set2(m->hv[4], m->dxf, r0 * hid, n, hid);
            sl_op_matmul(m->lm_head->g, logits, xf, true, false, 1.0f,
                         sl_param_grad_beta(m->lm_head));
            sl_op_matmul(dxf, logits, m->lm_head->w, false, false, 1.0f, 0.0f);
        }
    }
    sl_op_sum(sl_tensor_view_set1(m->hv[5], m->stat_loss, m->stat_mb, 1), m->losses);
}

/* The statistics of slots [first, first + n): loss sum and tokens always, the metrics (gate
 * score, LBL, z-loss) on metrics steps. One host read, two on metrics steps. */
static void read_slots(sl_model *m, int first, int n, sl_fwd_stats *st) {
    const sl_model_config *c = &m->cfg;
    const int ne = c->num_experts;
    memset(st, 0, sizeof *st);
    st->lbl = st->zloss = st->gate_score = NAN;
    if (n <= 0) return;
    float *loss = sl_xmalloc((size_t)n * sizeof(float));
    sl_tensor_to_host_range(m->stat_loss, first, n, loss);
    for (int i = 0; i < n; i++) st->loss_sum += loss[i];
    free(loss);
    st->tokens = (int64_t)n * m->tokens;
    if (!m->stat_metrics_on) return;
    const int64_t w = m->stat_width;
    float *mt = sl_xmalloc((size_t)(n * w) * sizeof(float));
    sl_tensor_to_host_range(m->stat_metrics, (int64_t)first * w, n * w, mt);
    st->lbl = st->zloss = st->gate_score = 0.0;
    for (int i = 0; i < n; i++) {
        const float *row = mt + (int64_t)i * w;
        double gate = 0.0, lbl = 0.0, z = 0.0;
        for (int l = 0; l < c->num_hidden_layers; l++) gate += row[l] / c->num_hidden_layers;
        for (int k = 0; k < m->n_moe_layers; k++) {
            double lk, zk;
            const int64_t *counts =
                m->stat_counts + ((int64_t)(first + i) * m->n_moe_layers + k) * ne;
            sl_moe_aux_stats(ne, m->tokens, counts,
                             row + c->num_hidden_layers + (int64_t)k * (ne + 1), &lk, &zk);
            lbl += lk / m->n_moe_layers;
            z += zk / m->n_moe_layers;
        }
        st->gate_score += gate / n;
        st->lbl += lbl / n;
        st->zloss += z / n;
    }
    free(mt);
}

/* Claims the next statistics slot of the step. */
static void stats_next_slot(sl_model *m) {
    if (m->stat_mb == m->stat_cap) sl_model_stats_reserve(m, 2 * m->stat_cap);
}

void sl_model_forward(sl_model *m, const int32_t *tokens, sl_fwd_stats *st) {
    /* evaluation, between training steps: slot 0, metrics as the last begin_step said */
    m->stat_mb = 0;
    SL_PROFILE_REGION (m->be, R_EMBED) load_tokens(m, tokens);
    forward_stack(m);
    SL_PROFILE_REGION (m->be, R_HEAD) head_and_loss(m, false, 1.0f);
    SL_PROFILE_REGION (m->be, R_STATS) read_slots(m, 0, 1, st);
}

void sl_model_forward_backward(sl_model *m, const int32_t *tokens, float ce_scale, double aux_scale,
                               sl_fwd_stats *st) {
    const sl_model_config *c = &m->cfg;
    SL_CHECK(m->memory != SL_MEMORY_FORWARD_ONLY,
             "sl_model_forward_backward on a model in memory mode \"%s\": it keeps nothing for "
             "a backward (sl_model_set_memory)",
             sl_memory_mode_name(m->memory));
    stats_next_slot(m);
    SL_PROFILE_REGION (m->be, R_EMBED) load_tokens(m, tokens);
    forward_stack(m);
    SL_PROFILE_REGION (m->be, R_HEAD) head_and_loss(m, true, ce_scale);
    sl_attn_inputs in = {.batch = m->batch,
                         .seq = m->seq,
                         .pos = m->pos,
                         .seg = m->docs_on ? m->seg : NULL,
                         .inv_freq = m->inv_freq,
                         .mscale = m->mscale};
    /* The objective has coef * mean over MoE layers: each layer gets coef / n_moe. */
    sl_moe_loss_coefs coefs = {0};
    if (m->n_moe_layers > 0) {
        coefs.lbl_coef = c->router_aux_loss_coef * aux_scale / m->n_moe_layers;
        coefs.z_coef = c->router_z_loss_coef * aux_scale / m->n_moe_layers;
    }
    SL_PROFILE_REGION (m->be, SL_PROFILE_NORMS) {
        sl_param_grad_prepare(m->final_norm); /* norms and the embedding add to their gradients */
        sl_op_rmsnorm_bwd(m->dx, m->final_norm->g, m->dxf, NULL, m->x[c->num_hidden_layers],
                          m->final_norm->w, m->xf_rstd, NULL);
    }
    for (int l = c->num_hidden_layers - 1; l >= 0; l--) {
        /* The last layer ran last: what it shares with the others is still its own. */
        const bool again = l < c->num_hidden_layers - 1;
        if (m->memory == SL_MEMORY_LAYER && again) {
            sl_attn_block_forward(&m->attn[l], &in, m->x[l], m->h[l]);
            /* x[l + 1] is kept already; dh is free until the FFN backward writes it */
            sl_ffn_block_recompute(&m->ffn[l], m->h[l], m->dh);
        }
        sl_ffn_block_backward(&m->ffn[l], &m->ffn_ws, m->h[l], m->dx, &coefs, m->dh);
        if (m->memory == SL_MEMORY_ATTENTION && again)
            sl_attn_block_recompute_inputs(&m->attn[l], &in, m->x[l]);
        sl_attn_block_backward(&m->attn[l], &in, &m->attn_ws, m->x[l], m->dh, m->dx);
        if (m->grad_ready) m->grad_ready(m->grad_ready_user, l);
    }
    SL_PROFILE_REGION (m->be, R_EMBED) {
        sl_param_grad_prepare(m->embed); /* tied: the head's GEMM wrote it first */
        sl_op_embedding_bwd(m->embed->g, m->dx, m->ids);
    }
    if (m->grad_ready) m->grad_ready(m->grad_ready_user, -1);
    /* st: this micro-batch alone, read now, and its slot is free again (tests and tools);
     * the trainer passes NULL and reads the whole step with sl_model_read_stats */
    if (st)
        SL_PROFILE_REGION (m->be, R_STATS) read_slots(m, m->stat_mb, 1, st);
    else
        m->stat_mb++;
}

void sl_model_begin_step(sl_model *m, bool metrics) {
    m->stat_mb = 0;
    m->stat_metrics_on = metrics;
    if (m->step_counts) sl_op_fill(m->step_counts, 0.0f);
    /* a metrics step copies each micro-batch's counts beside its statistics: on the host */
    for (int l = 0; l < m->cfg.num_hidden_layers; l++)
        if (m->ffn[l].is_moe) sl_moe_block_begin_step(&m->ffn[l].moe, metrics);
}

void sl_model_read_expert_counts(sl_model *m, int64_t *counts) {
    const int nl = m->cfg.num_hidden_layers, ne = m->cfg.num_experts;
    memset(counts, 0, (size_t)nl * (size_t)(ne > 0 ? ne : 1) * sizeof(int64_t));
    if (!m->step_counts) return;
    int32_t *h = sl_xmalloc((size_t)m->n_moe_layers * (size_t)ne * sizeof(int32_t));
    SL_PROFILE_REGION (m->be, R_STATS) sl_tensor_to_host(m->step_counts, h);
    for (int l = 0, k = 0; l < nl; l++)
        if (m->ffn[l].is_moe) {
            for (int e = 0; e < ne; e++) counts[(int64_t)l * ne + e] = h[(int64_t)k * ne + e];
            k++;
        }
    free(h);
}

bool sl_model_can_defer_wgrad(const sl_model *m) {
    bool any = false;
    for (int l = 0; l < m->cfg.num_hidden_layers; l++) {
        if (!m->ffn[l].is_moe) continue;
        if (!sl_moe_block_can_defer(&m->ffn[l].moe)) return false;
        any = true;
    }
    return any;
}

void sl_model_set_wgrad(sl_model *m, sl_wgrad_when when, sl_tensor *sumsq) {
    for (int l = 0; l < m->cfg.num_hidden_layers; l++)
        if (m->ffn[l].is_moe) sl_moe_block_set_wgrad(&m->ffn[l].moe, when, sumsq);
}

bool sl_model_set_park_tokens(sl_model *m, bool tokens, int group) {
    bool any = false;
    for (int l = 0; l < m->cfg.num_hidden_layers; l++)
        if (m->ffn[l].is_moe && sl_moe_block_set_park_tokens(&m->ffn[l].moe, tokens, group))
            any = true;
    sl_regather_rows_trim(&m->regather, any ? group - 1 : 0);
    return any;
}

void sl_model_read_stats(sl_model *m, sl_fwd_stats *st) {
    SL_PROFILE_REGION (m->be, R_STATS) read_slots(m, 0, m->stat_mb, st);
}
void sl_model_update_router_bias(sl_model *m, const int64_t *counts, double rate) {
    for (int l = 0; l < m->cfg.num_hidden_layers; l++)
        if (m->ffn[l].is_moe)
            sl_router_update_bias(&m->ffn[l].moe.router, counts + (int64_t)l * m->cfg.num_experts,
                                  rate);
}

const int64_t *sl_model_expert_counts(sl_model *m, int layer) {
    return m->ffn[layer].is_moe ? sl_moe_block_counts(&m->ffn[layer].moe) : NULL;
}
