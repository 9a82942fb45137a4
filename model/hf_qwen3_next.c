/*
 * model/hf_qwen3_next.c - the Qwen3-Next export layout (hf_export.h, docs/safetensors.md).
 *
 * Hugging Face transformers' Qwen3-Next (models/qwen3_next) has sluice's attention: q_proj
 * [2 H D, C] viewed per head as [q_h (D) | g_h (D)], QK-norm on q and k per head, RoPE on the
 * first partial_rotary_factor of each head, then o_proj(attention * sigmoid(g)); its MoE block is
 * sluice's (softmax router, top-k, optional renormalization, SwiGLU experts, a shared expert
 * scaled by sigmoid(shared_expert_gate x)), and `layer_types` may mark every layer
 * "full_attention". What differs is written so that the same numbers come out:
 *   - its RMSNorm multiplies by (1 + weight) (zero-centred): every norm (input_layernorm,
 *     post_attention_layernorm, q_norm, k_norm, model.norm) is stored as weight - 1;
 *   - its gate is always elementwise: a headwise gate is written as D copies of each head's gate
 *     row (sigmoid of the same logit on every element of the head), no gate as zero gate rows
 *     (sigmoid(0) = 1/2) with o_proj doubled, which undoes the half exactly (powers of two);
 *   - its MoE block always has a shared expert: a model without one gets a width-1 shared expert
 *     whose weights are zeros (it adds exactly 0).
 * Everything else keeps the Qwen3-MoE names (experts one tensor each, as Qwen3-Next checkpoints
 * store them).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "core/config_keys.h"
#include "model/hf_export.h"

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* Whether name is one of the RMSNorm weights. */
static bool is_norm(const char *name) {
    return ends_with(name, "layernorm.weight") || ends_with(name, ".q_norm.weight") ||
           ends_with(name, ".k_norm.weight") || strcmp(name, "model.norm.weight") == 0;
}

static void entry(sl_ckpt_export_entry *e, const char *name, int ndim, int64_t d0, int64_t d1) {
    memset(e, 0, sizeof *e);
    snprintf(e->name, sizeof e->name, "%s", name);
    e->ndim = ndim;
    e->shape[0] = d0;
    e->shape[1] = d1;
}

/* q_proj [W, C] of a headwise or ungated model as Qwen3-Next's [2 H D, C]: per head its D query
 * rows, then its gate row D times (headwise) or D zero rows (none). */
static void q_proj(sl_hf_layout *l, const char *name, int64_t cols, sl_hf_emit_fn emit,
                   void *user) {
    const int64_t h = l->cfg.num_attention_heads, d = l->cfg.head_dim;
    const bool headwise = l->cfg.attn_output_gate == SL_GATE_HEADWISE;
    sl_ckpt_export_piece *p = sl_hf_layout_pieces(l, (int)(2 * h));
    for (int64_t i = 0; i < h; i++) {
        p[2 * i] = (sl_ckpt_export_piece){.offset = i * d * cols, .count = d * cols, .repeat = 1};
        p[2 * i + 1] =
            headwise
                ? (sl_ckpt_export_piece){.offset = (h * d + i) * cols, .count = cols, .repeat = d}
                : (sl_ckpt_export_piece){.count = d * cols, .repeat = 1, .zero = true};
    }
    sl_ckpt_export_entry e;
    entry(&e, name, 2, 2 * h * d, cols);
    e.pieces = p;
    e.npieces = (int)(2 * h);
    emit(user, &e);
}

/* The zero shared expert of an MoE layer (from its router tensor "...mlp.gate.weight"). */
static int zero_shared_expert(sl_hf_layout *l, const char *router, sl_hf_emit_fn emit, void *user) {
    const int64_t c = l->cfg.hidden_size;
    const int keep = (int)(strlen(router) - strlen("gate.weight")); /* "model.layers.L.mlp." */
    static const struct {
        const char *leaf;
        int out_is_one; /* [1, C] (1) or [C, 1] (0) */
    } k_leaves[] = {{"shared_expert.gate_proj.weight", 1},
                    {"shared_expert.up_proj.weight", 1},
                    {"shared_expert.down_proj.weight", 0},
                    {"shared_expert_gate.weight", 1}};
    char name[256];
    for (size_t i = 0; i < sizeof k_leaves / sizeof k_leaves[0]; i++) {
        sl_ckpt_export_piece *p = sl_hf_layout_pieces(l, 1);
        *p = (sl_ckpt_export_piece){.count = c, .repeat = 1, .zero = true};
        snprintf(name, sizeof name, "%.*s%s", keep, router, k_leaves[i].leaf);
        sl_ckpt_export_entry e;
        entry(&e, name, 2, k_leaves[i].out_is_one ? 1 : c, k_leaves[i].out_is_one ? c : 1);
        e.pieces = p;
        e.npieces = 1;
        emit(user, &e);
    }
    return (int)(sizeof k_leaves / sizeof k_leaves[0]);
}

typedef struct {
    sl_hf_emit_fn emit;
    void *user;
    bool norm;   /* stored as weight - 1 */
    float scale; /* o_proj of an ungated model: 2 */
} wrap;

static void transformed(void *user, const sl_ckpt_export_entry *e) {
    const wrap *w = user;
    sl_ckpt_export_entry x = *e;
    if (w->norm) x.xform = true, x.scale = 1.0f, x.add = -1.0f;
    if (w->scale != 1.0f) x.xform = true, x.scale = w->scale, x.add = 0.0f;
    w->emit(w->user, &x);
}

int sl_qwen3_next_map(sl_hf_layout *l, const char *name, int ndim, const int64_t *shape,
                      int64_t first_expert, sl_hf_emit_fn emit, void *user) {
    const sl_gate_mode gate = l->cfg.attn_output_gate;
    if (ndim == 2 && ends_with(name, ".self_attn.q_proj.weight") && gate != SL_GATE_ELEMENTWISE) {
        q_proj(l, name, shape[1], emit, user);
        return 1;
    }
    wrap w = {.emit = emit, .user = user, .norm = is_norm(name), .scale = 1.0f};
    if (ndim == 2 && ends_with(name, ".self_attn.o_proj.weight") && gate == SL_GATE_NONE)
        w.scale = 2.0f;
    int n = sl_hf_layout_map(&(sl_hf_layout){.format = SL_HF_QWEN3_MOE, .cfg = l->cfg}, name, ndim,
                             shape, first_expert, transformed, &w);
    if (ndim == 2 && ends_with(name, ".mlp.gate.weight") && l->cfg.num_experts > 0 &&
        l->cfg.shared_expert_intermediate_size == 0)
        n += zero_shared_expert(l, name, emit, user);
    return n;
}

/* The RoPE settings as both spellings transformers reads: the legacy top-level rope_theta,
 * partial_rotary_factor and rope_scaling (4.5x), and rope_parameters (5.x, where the legacy keys
 * are folded into it as well, so the two agree whichever a version prefers). */
static void add_rope(cJSON *o, const sl_model_config *m) {
    const sl_rope_scaling *r = &m->rope_scaling;
    const bool yarn = r->type == SL_ROPE_YARN;
    cJSON_AddNumberToObject(o, "rope_theta", m->rope_theta);
    cJSON_AddNumberToObject(o, "partial_rotary_factor", m->partial_rotary_factor);
    cJSON *params = cJSON_AddObjectToObject(o, "rope_parameters");
    cJSON_AddStringToObject(params, "rope_type", yarn ? "yarn" : "default");
    cJSON_AddNumberToObject(params, "rope_theta", m->rope_theta);
    cJSON_AddNumberToObject(params, "partial_rotary_factor", m->partial_rotary_factor);
    if (!yarn) {
        cJSON_AddNullToObject(o, "rope_scaling");
        return;
    }
    cJSON *rs = cJSON_AddObjectToObject(o, "rope_scaling");
    cJSON *both[2] = {rs, params};
    for (int i = 0; i < 2; i++) {
        if (i == 0) cJSON_AddStringToObject(rs, "rope_type", "yarn");
        cJSON_AddNumberToObject(both[i], "factor", r->factor);
        cJSON_AddNumberToObject(both[i], "original_max_position_embeddings",
                                r->original_max_position_embeddings);
        cJSON_AddNumberToObject(both[i], "beta_fast", r->beta_fast);
        cJSON_AddNumberToObject(both[i], "beta_slow", r->beta_slow);
        if (r->attention_factor > 0)
            cJSON_AddNumberToObject(both[i], "attention_factor", r->attention_factor);
    }
}

char *sl_qwen3_next_config_json(const sl_model_config *m) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "architectures"),
                         cJSON_CreateString("Qwen3NextForCausalLM"));
    cJSON_AddStringToObject(o, "model_type", "qwen3_next");
    cJSON_AddStringToObject(o, "torch_dtype", "float32");
    cJSON_AddNumberToObject(o, "vocab_size", m->vocab_size);
    cJSON_AddNumberToObject(o, "hidden_size", m->hidden_size);
    cJSON_AddNumberToObject(o, "intermediate_size", m->intermediate_size);
    cJSON_AddNumberToObject(o, "num_hidden_layers", m->num_hidden_layers);
    cJSON_AddNumberToObject(o, "num_attention_heads", m->num_attention_heads);
    cJSON_AddNumberToObject(o, "num_key_value_heads", m->num_key_value_heads);
    cJSON_AddNumberToObject(o, "head_dim", m->head_dim);
    cJSON_AddStringToObject(o, "hidden_act", "silu");
    cJSON_AddNumberToObject(o, "max_position_embeddings", m->max_position_embeddings);
    cJSON_AddNumberToObject(o, "initializer_range", m->initializer_range);
    cJSON_AddNumberToObject(o, "rms_norm_eps", m->rms_norm_eps);
    cJSON_AddTrueToObject(o, "use_cache");
    cJSON_AddBoolToObject(o, "tie_word_embeddings", m->tie_word_embeddings);
    add_rope(o, m);
    cJSON_AddFalseToObject(o, "attention_bias");
    cJSON_AddNumberToObject(o, "attention_dropout", 0.0);
    cJSON *types = cJSON_AddArrayToObject(o, "layer_types");
    for (int i = 0; i < m->num_hidden_layers; i++)
        cJSON_AddItemToArray(types, cJSON_CreateString("full_attention"));
    cJSON_AddNumberToObject(o, "decoder_sparse_step", 1);
    cJSON *mlp = cJSON_AddArrayToObject(o, "mlp_only_layers");
    for (int i = 0; i < m->num_hidden_layers; i++)
        if (m->dense_layer[i]) cJSON_AddItemToArray(mlp, cJSON_CreateNumber(i));
    cJSON_AddNumberToObject(o, "num_experts", m->num_experts);
    cJSON_AddNumberToObject(o, "num_experts_per_tok", m->num_experts_per_tok);
    cJSON_AddNumberToObject(o, "moe_intermediate_size", m->moe_intermediate_size);
    cJSON_AddNumberToObject(
        o, "shared_expert_intermediate_size",
        m->shared_expert_intermediate_size > 0 ? m->shared_expert_intermediate_size : 1);
    cJSON_AddBoolToObject(o, "norm_topk_prob", m->norm_topk_prob);
    cJSON_AddNumberToObject(o, "router_aux_loss_coef", m->router_aux_loss_coef);
    cJSON_AddFalseToObject(o, "output_router_logits");
    return sl_cfg_print(o);
}
