/*
 * model/config.c - the model section of a run config and the Hugging Face config.json of a
 * model: keys (Qwen3-MoE names plus attn_output_gate), defaults, validation, serialization.
 * The key-table machinery is core/config_keys.c; docs/config.md lists every key.
 */
#include "model/config.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Implementation limits (they keep every derived width inside a 32-bit int). */
#define LIM_VOCAB     (1 << 24)
#define LIM_HIDDEN    (1 << 16)
#define LIM_HEADS     1024
#define LIM_HEAD_DIM  1024
#define LIM_FFN       (1 << 20)
#define LIM_EXPERTS   65536
#define LIM_POSITIONS (1 << 24)

/* ---- model section ----------------------------------------------------------------------- */

static sl_rope_scaling rope_default(void) {
    sl_rope_scaling r;
    memset(&r, 0, sizeof r);
    r.type = SL_ROPE_DEFAULT;
    r.factor = 1.0;
    r.beta_fast = 32.0;
    r.beta_slow = 1.0;
    return r;
}

static int fn_rope_type(const sl_cfg_ctx *c, const cJSON *v, const char *path, void *sec) {
    sl_rope_scaling *r = sec;
    char s[32], d[96];
    if (!cJSON_IsString(v))
        return sl_cfg_err(c, path, "expected a string, got %s", sl_cfg_describe(v, d, 96));
    if (sl_cfg_get_string(c, v, path, s, sizeof s) == 0) {
        if (strcmp(s, "yarn") == 0) {
            r->type = SL_ROPE_YARN;
            return 0;
        }
        if (strcmp(s, "default") == 0) {
            r->type = SL_ROPE_DEFAULT;
            return 0;
        }
    }
    return sl_cfg_err(c, path, "unsupported rope type %s (expected \"yarn\" or \"default\")",
                      sl_cfg_describe(v, d, 96));
}

static const sl_cfg_key rope_keys[] = {
    SL_KF("rope_type", fn_rope_type),
    SL_KF("type", fn_rope_type),
    SL_KD(sl_rope_scaling, "factor", SL_K_DBL, factor),
    SL_KD(sl_rope_scaling, "original_max_position_embeddings", SL_K_INT,
          original_max_position_embeddings),
    SL_KD(sl_rope_scaling, "beta_fast", SL_K_DBL, beta_fast),
    SL_KD(sl_rope_scaling, "beta_slow", SL_K_DBL, beta_slow),
    SL_KD(sl_rope_scaling, "attention_factor", SL_K_DBL, attention_factor),
};

static int fn_rope_scaling(const sl_cfg_ctx *c, const cJSON *v, const char *path, void *sec) {
    sl_model_config *m = sec;
    sl_rope_scaling r = rope_default();
    char sub[SL_CFG_KEYPATH_MAX], d[96];
    if (cJSON_IsNull(v)) {
        m->rope_scaling = r;
        return 0;
    }
    if (!cJSON_IsObject(v))
        return sl_cfg_err(c, path, "expected null or an object, got %s", sl_cfg_describe(v, d, 96));
    const cJSON *t1 = sl_cfg_member(v, "rope_type"), *t2 = sl_cfg_member(v, "type");
    if (!t1 && !t2) {
        sl_cfg_join(sub, sizeof sub, path, "rope_type");
        return sl_cfg_err(c, sub, "required key missing (\"yarn\" or \"default\")");
    }
    if (sl_cfg_apply(c, v, path, rope_keys, SL_NKEYS(rope_keys), &r)) return -1;
    if (t1 && t2 && strcmp(t1->valuestring, t2->valuestring) != 0) {
        sl_cfg_join(sub, sizeof sub, path, "type");
        return sl_cfg_err(c, sub, "\"%s\" disagrees with rope_type \"%s\"", t2->valuestring,
                          t1->valuestring);
    }
    if (r.type == SL_ROPE_DEFAULT) {
        if (!c->hf)
            for (const cJSON *it = v->child; it; it = it->next)
                if (strcmp(it->string, "rope_type") != 0 && strcmp(it->string, "type") != 0) {
                    sl_cfg_join(sub, sizeof sub, path, it->string);
                    return sl_cfg_err(c, sub, "only used with rope_type \"yarn\"");
                }
        r = rope_default();
    } else {
        static const char *const required[] = {"factor", "original_max_position_embeddings"};
        for (int i = 0; i < 2; i++)
            if (!sl_cfg_member(v, required[i])) {
                sl_cfg_join(sub, sizeof sub, path, required[i]);
                return sl_cfg_err(c, sub, "required key missing for rope_type \"yarn\"");
            }
        if (sl_cfg_member(v, "attention_factor") && !(r.attention_factor > 0)) {
            sl_cfg_join(sub, sizeof sub, path, "attention_factor");
            return sl_cfg_err(c, sub,
                              "must be > 0, got %g (omit it for the default 0.1 ln(factor) + 1)",
                              r.attention_factor);
        }
    }
    m->rope_scaling = r;
    return 0;
}

static int fn_mlp_only_layers(const sl_cfg_ctx *c, const cJSON *v, const char *path, void *sec) {
    sl_model_config *m = sec;
    bool dense[SL_MAX_LAYERS];
    char sub[SL_CFG_KEYPATH_MAX], d[96];
    memset(dense, 0, sizeof dense);
    if (!cJSON_IsArray(v))
        return sl_cfg_err(c, path, "expected an array of layer indices, got %s",
                          sl_cfg_describe(v, d, 96));
    int i = 0;
    for (const cJSON *it = v->child; it; it = it->next, i++) {
        snprintf(sub, sizeof sub, "%s[%d]", path, i);
        int l;
        if (sl_cfg_get_int(c, it, sub, &l)) return -1;
        if (l < 0 || l >= SL_MAX_LAYERS)
            return sl_cfg_err(c, sub, "layer %d is out of range [0, %d)", l, SL_MAX_LAYERS);
        if (dense[l]) return sl_cfg_err(c, sub, "layer %d is listed twice", l);
        dense[l] = true;
    }
    memcpy(m->dense_layer, dense, sizeof dense);
    return 0;
}

static int fn_gate(const sl_cfg_ctx *c, const cJSON *v, const char *path, void *sec) {
    sl_model_config *m = sec;
    char d[96];
    if (cJSON_IsString(v)) {
        if (sl_gate_mode_from_name(v->valuestring, &m->attn_output_gate) == 0) return 0;
    }
    return sl_cfg_err(c, path, "expected \"elementwise\", \"headwise\" or \"none\", got %s",
                      sl_cfg_describe(v, d, 96));
}

/* Informational Hugging Face keys: checked, then ignored. */
static int fn_info_string(const sl_cfg_ctx *c, const cJSON *v, const char *path, void *sec) {
    char d[96];
    (void)sec;
    if (!cJSON_IsString(v))
        return sl_cfg_err(c, path, "expected a string, got %s", sl_cfg_describe(v, d, 96));
    return 0;
}

static int fn_architectures(const sl_cfg_ctx *c, const cJSON *v, const char *path, void *sec) {
    char sub[SL_CFG_KEYPATH_MAX], d[96];
    (void)sec;
    if (!cJSON_IsArray(v))
        return sl_cfg_err(c, path, "expected an array of strings, got %s",
                          sl_cfg_describe(v, d, 96));
    int i = 0;
    for (const cJSON *it = v->child; it; it = it->next, i++)
        if (!cJSON_IsString(it)) {
            snprintf(sub, sizeof sub, "%s[%d]", path, i);
            return sl_cfg_err(c, sub, "expected a string, got %s", sl_cfg_describe(it, d, 96));
        }
    return 0;
}

static int fn_hidden_act(const sl_cfg_ctx *c, const cJSON *v, const char *path, void *sec) {
    char d[96];
    (void)sec;
    if (!cJSON_IsString(v) || strcmp(v->valuestring, "silu") != 0)
        return sl_cfg_err(c, path, "only \"silu\" is supported (SwiGLU), got %s",
                          sl_cfg_describe(v, d, 96));
    return 0;
}

static int fn_attention_bias(const sl_cfg_ctx *c, const cJSON *v, const char *path, void *sec) {
    char d[96];
    (void)sec;
    if (!cJSON_IsFalse(v))
        return sl_cfg_err(c, path, "only false is supported (sluice has no biases), got %s",
                          sl_cfg_describe(v, d, 96));
    return 0;
}

/* decoder_sparse_step: checked here, folded into dense_layer by sl_model_config_finish. */
static int fn_sparse_step(const sl_cfg_ctx *c, const cJSON *v, const char *path, void *sec) {
    double x = 0;
    (void)sec;
    if (sl_cfg_get_integer(c, v, path, INT_MIN, INT_MAX, &x)) return -1;
    if (x < 1) return sl_cfg_err(c, path, "must be >= 1, got %.0f", x);
    return 0;
}

static void emit_rope_scaling(cJSON *o, const char *key, const void *sec) {
    const sl_rope_scaling *r = &((const sl_model_config *)sec)->rope_scaling;
    if (r->type != SL_ROPE_YARN) {
        cJSON_AddNullToObject(o, key);
        return;
    }
    cJSON *rs = cJSON_AddObjectToObject(o, key);
    cJSON_AddStringToObject(rs, "rope_type", "yarn");
    cJSON_AddNumberToObject(rs, "factor", r->factor);
    cJSON_AddNumberToObject(rs, "original_max_position_embeddings",
                            r->original_max_position_embeddings);
    cJSON_AddNumberToObject(rs, "beta_fast", r->beta_fast);
    cJSON_AddNumberToObject(rs, "beta_slow", r->beta_slow);
    if (r->attention_factor > 0)
        cJSON_AddNumberToObject(rs, "attention_factor", r->attention_factor);
}

static void emit_mlp_only_layers(cJSON *o, const char *key, const void *sec) {
    const sl_model_config *m = sec;
    cJSON *mlp = cJSON_AddArrayToObject(o, key);
    for (int l = 0; l < SL_MAX_LAYERS; l++)
        if (m->dense_layer[l]) cJSON_AddItemToArray(mlp, cJSON_CreateNumber(l));
}

static void emit_gate(cJSON *o, const char *key, const void *sec) {
    cJSON_AddStringToObject(o, key,
                            sl_gate_mode_name(((const sl_model_config *)sec)->attn_output_gate));
}

#define KM(name, kind) SL_KD(sl_model_config, #name, kind, name)
const sl_cfg_key sl_model_keys[] = {
    KM(vocab_size, SL_K_INT),
    KM(hidden_size, SL_K_INT),
    KM(num_hidden_layers, SL_K_INT),
    KM(num_attention_heads, SL_K_INT),
    KM(num_key_value_heads, SL_K_INT),
    KM(head_dim, SL_K_INT),
    KM(rms_norm_eps, SL_K_DBL),
    KM(rope_theta, SL_K_DBL),
    KM(partial_rotary_factor, SL_K_DBL),
    SL_KFE("rope_scaling", fn_rope_scaling, emit_rope_scaling),
    KM(max_position_embeddings, SL_K_INT),
    KM(num_experts, SL_K_INT),
    KM(num_experts_per_tok, SL_K_INT),
    KM(moe_intermediate_size, SL_K_INT),
    KM(shared_expert_intermediate_size, SL_K_INT),
    KM(intermediate_size, SL_K_INT),
    KM(norm_topk_prob, SL_K_BOOL),
    KM(router_aux_loss_coef, SL_K_DBL),
    KM(router_z_loss_coef, SL_K_DBL),
    SL_KFE("mlp_only_layers", fn_mlp_only_layers, emit_mlp_only_layers),
    KM(tie_word_embeddings, SL_K_BOOL),
    KM(initializer_range, SL_K_DBL),
    SL_KFE("attn_output_gate", fn_gate, emit_gate),
    SL_KF("model_type", fn_info_string),
    SL_KF("architectures", fn_architectures),
    SL_KF("torch_dtype", fn_info_string),
    SL_KF("hidden_act", fn_hidden_act),
    SL_KF("attention_bias", fn_attention_bias),
    SL_KF("decoder_sparse_step", fn_sparse_step),
};
const int sl_model_nkeys = SL_NKEYS(sl_model_keys);

void sl_model_config_defaults(sl_model_config *m) {
    memset(m, 0, sizeof *m);
    /* vocab_size, hidden_size, num_hidden_layers, num_attention_heads: required (0). */
    m->rms_norm_eps = 1e-6;
    m->rope_theta = 10000.0;
    m->partial_rotary_factor = 1.0;
    m->rope_scaling = rope_default();
    m->max_position_embeddings = 32768;
    m->norm_topk_prob = true;
    m->router_aux_loss_coef = 1e-3;
    m->router_z_loss_coef = 0.0;
    m->tie_word_embeddings = false;
    m->initializer_range = 0.02;
    m->attn_output_gate = SL_GATE_ELEMENTWISE;
}

static bool has_dense_layer(const sl_model_config *m, int *which) {
    int L = m->num_hidden_layers < SL_MAX_LAYERS ? m->num_hidden_layers : SL_MAX_LAYERS;
    for (int l = 0; l < L; l++)
        if (!sl_layer_is_moe(m, l)) {
            if (which) *which = l;
            return true;
        }
    return false;
}

/* Required keys and defaults that depend on other keys, after the model object is applied. */
int sl_model_config_finish(const sl_cfg_ctx *c, const cJSON *obj, const char *prefix,
                           sl_model_config *m) {
    char path[SL_CFG_KEYPATH_MAX];
    static const char *const required[] = {"vocab_size", "hidden_size", "num_hidden_layers",
                                           "num_attention_heads"};
    for (int i = 0; i < 4; i++)
        if (!sl_cfg_member(obj, required[i])) {
            sl_cfg_join(path, sizeof path, prefix, required[i]);
            return sl_cfg_err(c, path, "required key missing");
        }
    if (!sl_cfg_member(obj, "num_key_value_heads")) m->num_key_value_heads = m->num_attention_heads;
    if (!sl_cfg_member(obj, "head_dim")) {
        if (m->num_attention_heads > 0 && m->hidden_size % m->num_attention_heads == 0) {
            m->head_dim = m->hidden_size / m->num_attention_heads;
        } else {
            sl_cfg_join(path, sizeof path, prefix, "head_dim");
            return sl_cfg_err(
                c, path,
                "missing, and hidden_size = %d is not a multiple of num_attention_heads "
                "= %d",
                m->hidden_size, m->num_attention_heads);
        }
    }
    const cJSON *step = sl_cfg_member(obj, "decoder_sparse_step");
    if (step) {
        int s = (int)step->valuedouble;
        int L = m->num_hidden_layers < SL_MAX_LAYERS ? m->num_hidden_layers : SL_MAX_LAYERS;
        for (int l = 0; l < L; l++)
            if ((l + 1) % s != 0) m->dense_layer[l] = true;
    }
    if (m->num_experts > 0) {
        static const char *const moe_required[] = {"num_experts_per_tok", "moe_intermediate_size"};
        for (int i = 0; i < 2; i++)
            if (!sl_cfg_member(obj, moe_required[i])) {
                sl_cfg_join(path, sizeof path, prefix, moe_required[i]);
                return sl_cfg_err(c, path, "required key missing (num_experts = %d)",
                                  m->num_experts);
            }
    }
    int l;
    if (!sl_cfg_member(obj, "intermediate_size") && m->num_hidden_layers > 0 &&
        m->num_experts >= 0 && has_dense_layer(m, &l)) {
        sl_cfg_join(path, sizeof path, prefix, "intermediate_size");
        return sl_cfg_err(c, path, "required key missing (layer %d is a dense FFN layer)", l);
    }
    if (c->hf) {
        /* A stock Qwen3-MoE config has no output gate. */
        if (!sl_cfg_member(obj, "attn_output_gate")) m->attn_output_gate = SL_GATE_NONE;
        const cJSON *sw = sl_cfg_member(obj, "use_sliding_window");
        if (cJSON_IsTrue(sw)) {
            sl_cfg_join(path, sizeof path, prefix, "use_sliding_window");
            return sl_cfg_err(c, path, "sliding-window attention is not supported");
        }
    }
    return 0;
}
int sl_model_config_validate(const sl_cfg_vctx *v, const sl_model_config *m) {
    if (sl_cfg_check_range(v, "vocab_size", m->vocab_size, 1, LIM_VOCAB)) return -1;
    if (sl_cfg_check_range(v, "hidden_size", m->hidden_size, 1, LIM_HIDDEN)) return -1;
    if (sl_cfg_check_range(v, "num_hidden_layers", m->num_hidden_layers, 1, SL_MAX_LAYERS))
        return -1;
    if (sl_cfg_check_range(v, "num_attention_heads", m->num_attention_heads, 1, LIM_HEADS))
        return -1;
    if (sl_cfg_check_range(v, "num_key_value_heads", m->num_key_value_heads, 1, LIM_HEADS))
        return -1;
    if (m->num_attention_heads % m->num_key_value_heads != 0)
        return sl_cfg_verr(v, "num_key_value_heads", "%d does not divide num_attention_heads = %d",
                           m->num_key_value_heads, m->num_attention_heads);
    if (sl_cfg_check_range(v, "head_dim", m->head_dim, 1, LIM_HEAD_DIM)) return -1;
    if (m->head_dim % 2 != 0)
        return sl_cfg_verr(v, "head_dim", "%d is odd (RoPE rotates pairs of dimensions)",
                           m->head_dim);
    if (!(m->rms_norm_eps > 0) || !isfinite(m->rms_norm_eps))
        return sl_cfg_verr(v, "rms_norm_eps", "must be > 0, got %g", m->rms_norm_eps);
    if (!(m->rope_theta > 1) || !isfinite(m->rope_theta))
        return sl_cfg_verr(v, "rope_theta", "must be > 1, got %g", m->rope_theta);
    double prf = m->partial_rotary_factor;
    if (!(prf > 0 && prf <= 1))
        return sl_cfg_verr(v, "partial_rotary_factor", "must be in (0, 1], got %g", prf);
    double rot = m->head_dim * prf;
    if (fabs(rot - nearbyint(rot)) > 1e-9 * m->head_dim)
        return sl_cfg_verr(v, "partial_rotary_factor",
                           "head_dim * partial_rotary_factor = %d * %g = %g is not an integer",
                           m->head_dim, prf, rot);
    long irot = lrint(rot);
    if (irot < 2 || irot % 2 != 0)
        return sl_cfg_verr(
            v, "partial_rotary_factor",
            "rotary dimension head_dim * partial_rotary_factor = %ld must be even and >= 2", irot);
    const sl_rope_scaling *r = &m->rope_scaling;
    if (r->type == SL_ROPE_YARN) {
        if (!(r->factor > 1) || !isfinite(r->factor))
            return sl_cfg_verr(v, "rope_scaling.factor", "must be > 1 for yarn, got %g", r->factor);
        if (sl_cfg_check_range(v, "rope_scaling.original_max_position_embeddings",
                               r->original_max_position_embeddings, 1, LIM_POSITIONS))
            return -1;
        if (!(r->beta_slow > 0) || !isfinite(r->beta_slow))
            return sl_cfg_verr(v, "rope_scaling.beta_slow", "must be > 0, got %g", r->beta_slow);
        if (!(r->beta_fast > r->beta_slow) || !isfinite(r->beta_fast))
            return sl_cfg_verr(v, "rope_scaling.beta_fast", "%g must exceed beta_slow = %g",
                               r->beta_fast, r->beta_slow);
        if (!(r->attention_factor >= 0) || !isfinite(r->attention_factor))
            return sl_cfg_verr(v, "rope_scaling.attention_factor", "must be > 0, got %g",
                               r->attention_factor);
    } else if (r->type != SL_ROPE_DEFAULT) {
        return sl_cfg_verr(v, "rope_scaling.rope_type", "invalid value %d", (int)r->type);
    }
    if (sl_cfg_check_range(v, "max_position_embeddings", m->max_position_embeddings, 1,
                           LIM_POSITIONS))
        return -1;
    if (sl_cfg_check_range(v, "num_experts", m->num_experts, 0, LIM_EXPERTS)) return -1;
    if (m->num_experts > 0) {
        if (m->num_experts_per_tok < 1)
            return sl_cfg_verr(v, "num_experts_per_tok",
                               "must be >= 1 when num_experts = %d, got %d", m->num_experts,
                               m->num_experts_per_tok);
        if (m->num_experts_per_tok > m->num_experts)
            return sl_cfg_verr(v, "num_experts_per_tok", "%d exceeds num_experts = %d",
                               m->num_experts_per_tok, m->num_experts);
        if (m->moe_intermediate_size < 1)
            return sl_cfg_verr(v, "moe_intermediate_size",
                               "must be positive when num_experts = %d, got %d", m->num_experts,
                               m->moe_intermediate_size);
        if (sl_cfg_check_range(v, "moe_intermediate_size", m->moe_intermediate_size, 1, LIM_FFN))
            return -1;
    } else {
        /* A dense model: the MoE keys are ignored, but must not be negative. */
        if (sl_cfg_check_range(v, "num_experts_per_tok", m->num_experts_per_tok, 0, LIM_EXPERTS))
            return -1;
        if (sl_cfg_check_range(v, "moe_intermediate_size", m->moe_intermediate_size, 0, LIM_FFN))
            return -1;
    }
    if (sl_cfg_check_range(v, "shared_expert_intermediate_size", m->shared_expert_intermediate_size,
                           0, LIM_FFN))
        return -1;
    if (sl_cfg_check_range(v, "intermediate_size", m->intermediate_size, 0, LIM_FFN)) return -1;
    int dl;
    if (m->intermediate_size < 1 && has_dense_layer(m, &dl)) {
        if (m->num_experts == 0)
            return sl_cfg_verr(v, "intermediate_size",
                               "must be positive for a dense model (num_experts = "
                               "0), got %d",
                               m->intermediate_size);
        return sl_cfg_verr(
            v, "intermediate_size",
            "must be positive: layer %d is a dense FFN layer (mlp_only_layers), got %d", dl,
            m->intermediate_size);
    }
    for (int l = m->num_hidden_layers; l < SL_MAX_LAYERS; l++)
        if (m->dense_layer[l])
            return sl_cfg_verr(v, "mlp_only_layers",
                               "layer %d is out of range [0, num_hidden_layers = %d)", l,
                               m->num_hidden_layers);
    if (!(m->router_aux_loss_coef >= 0) || !isfinite(m->router_aux_loss_coef))
        return sl_cfg_verr(v, "router_aux_loss_coef", "must be >= 0, got %g",
                           m->router_aux_loss_coef);
    if (!(m->router_z_loss_coef >= 0) || !isfinite(m->router_z_loss_coef))
        return sl_cfg_verr(v, "router_z_loss_coef", "must be >= 0, got %g", m->router_z_loss_coef);
    if (!(m->initializer_range > 0) || !isfinite(m->initializer_range))
        return sl_cfg_verr(v, "initializer_range", "must be > 0, got %g", m->initializer_range);
    if (m->attn_output_gate != SL_GATE_NONE && m->attn_output_gate != SL_GATE_HEADWISE &&
        m->attn_output_gate != SL_GATE_ELEMENTWISE)
        return sl_cfg_verr(v, "attn_output_gate", "invalid value %d", (int)m->attn_output_gate);
    return 0;
}
/* ---- serialization ----------------------------------------------------------------------- */

void sl_model_config_to_json(cJSON *o, const sl_model_config *m, bool hf) {
    if (hf) {
        /* the informational keys a Hugging Face loader expects (input-only in the table) */
        cJSON *arch = cJSON_AddArrayToObject(o, "architectures");
        cJSON_AddItemToArray(arch, cJSON_CreateString("Qwen3MoeForCausalLM"));
        cJSON_AddStringToObject(o, "model_type", "qwen3_moe");
        cJSON_AddStringToObject(o, "hidden_act", "silu");
        cJSON_AddFalseToObject(o, "attention_bias");
        cJSON_AddNumberToObject(o, "decoder_sparse_step", 1);
    }
    sl_cfg_emit(o, sl_model_keys, sl_model_nkeys, m);
}

char *sl_model_config_to_hf_json(const sl_model_config *m) {
    cJSON *root = cJSON_CreateObject();
    SL_CHECK(root != NULL, "out of memory");
    sl_model_config_to_json(root, m, true);
    return sl_cfg_print(root);
}

int sl_model_config_from_hf_json(const char *json, const char *name, sl_model_config *m, char *err,
                                 size_t errlen) {
    if (!name) name = "config.json";
    cJSON *root = sl_cfg_parse_json(json, name, err, errlen);
    if (!root) return -1;
    sl_cfg_ctx c = {name, err, errlen, true};
    sl_model_config t;
    sl_model_config_defaults(&t);
    int rc = -1;
    char d[96];
    if (!cJSON_IsObject(root)) {
        sl_cfg_err(&c, "", "expected a JSON object, got %s", sl_cfg_describe(root, d, 96));
        goto done;
    }
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(root, "model_type");
    if (cJSON_IsString(type) && strcmp(type->valuestring, "qwen3_next") == 0) {
        /* its norms are stored as weight - 1 and its gate rows rearranged (model/hf_export.h):
         * read as Qwen3-MoE, the numbers would be silently wrong */
        sl_cfg_err(&c, "model_type",
                   "\"qwen3_next\" is the export for other tools (sluice ckpt export --format "
                   "qwen3_next, training.export_format); sluice reads the Qwen3-MoE layout: give "
                   "the training checkpoint or an export without --format");
        goto done;
    }
    if (sl_cfg_apply(&c, root, "", sl_model_keys, sl_model_nkeys, &t)) goto done;
    if (sl_model_config_finish(&c, root, "", &t)) goto done;
    sl_cfg_vctx v = {name, "", err, errlen};
    if (sl_model_config_validate(&v, &t)) goto done;
    *m = t;
    rc = 0;
done:
    cJSON_Delete(root);
    return rc;
}
