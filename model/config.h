/*
 * model/config.h - the model's configuration: the "model" section of a run config, which is
 * also a Hugging Face Qwen3-MoE config.json plus attn_output_gate.
 *
 * Parsing goes through the key tables of core/config_keys.h; every error names the file and
 * the key path (e.g. "configs/tiny.json: model.num_key_value_heads: 3 does not divide
 * num_attention_heads = 4"). docs/config.md lists every key.
 */
#ifndef SL_MODEL_CONFIG_H
#define SL_MODEL_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/config_keys.h"
#include "core/ops.h" /* sl_gate_mode */

#define SL_MAX_LAYERS 256

typedef enum { SL_ROPE_DEFAULT = 0, SL_ROPE_YARN = 1 } sl_rope_type;

typedef struct {
    sl_rope_type type; /* rope_scaling.rope_type (or "type"): "default" | "yarn" */
    double factor;     /* s */
    int original_max_position_embeddings; /* L */
    double beta_fast, beta_slow;          /* 32, 1 */
    double attention_factor;              /* mscale override; 0 = 0.1 ln(s) + 1 */
} sl_rope_scaling;

typedef struct {
    int vocab_size;
    int hidden_size;
    int num_hidden_layers;
    int num_attention_heads;
    int num_key_value_heads;
    int head_dim;
    double rms_norm_eps;
    double rope_theta;
    double partial_rotary_factor;
    sl_rope_scaling rope_scaling;
    int max_position_embeddings;
    int num_experts; /* 0: a dense model (every layer a SwiGLU FFN) */
    int num_experts_per_tok;
    int moe_intermediate_size;
    int shared_expert_intermediate_size; /* 0: no shared expert */
    int intermediate_size;               /* dense FFN width (dense models, mlp_only_layers) */
    bool norm_topk_prob;
    double router_aux_loss_coef; /* applied to LBL / k, averaged over MoE layers */
    double router_z_loss_coef;
    bool dense_layer[SL_MAX_LAYERS]; /* from mlp_only_layers */
    bool tie_word_embeddings;
    double initializer_range;
    sl_gate_mode attn_output_gate;
} sl_model_config;

/* Fills every field with its documented default (the required keys stay 0). */
void sl_model_config_defaults(sl_model_config *m);

/* The key table of the model section (for the run config's section list). */
extern const sl_cfg_key sl_model_keys[];
extern const int sl_model_nkeys;
/* Required keys and defaults that depend on other keys, after the table was applied to m
 * from the JSON object obj (prefix: "model", or "" for a bare config.json). */
int sl_model_config_finish(const sl_cfg_ctx *c, const cJSON *obj, const char *prefix,
                           sl_model_config *m);
/* Range and cross-field checks. */
int sl_model_config_validate(const sl_cfg_vctx *v, const sl_model_config *m);
/* Adds the model's keys to the JSON object o (hf: also the informational Hugging Face keys
 * architectures, model_type, hidden_act, attention_bias, decoder_sparse_step). */
void sl_model_config_to_json(cJSON *o, const sl_model_config *m, bool hf);

/* The model as a Hugging Face config.json object (malloc'ed string). */
char *sl_model_config_to_hf_json(const sl_model_config *m);
/* Parses a Hugging Face config.json (as written above) into m. Unknown HF keys are ignored;
 * a config without attn_output_gate (a stock Qwen3-MoE) gets SL_GATE_NONE;
 * decoder_sparse_step > 1 is folded into dense_layer. */
int sl_model_config_from_hf_json(const char *json, const char *name, sl_model_config *m, char *err,
                                 size_t errlen);

/* Whether layer l has an MoE block (false: dense SwiGLU FFN). */
static inline bool sl_layer_is_moe(const sl_model_config *m, int l) {
    return m->num_experts > 0 && !m->dense_layer[l];
}

#endif
