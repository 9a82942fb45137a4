/*
 * core/config.h - the run configuration, parsed from JSON (cJSON) and validated.
 *
 * A config file has the sections "model" (Hugging Face Qwen3-MoE config keys plus
 * attn_output_gate), "training", "data", "parallel" and "backend". Every key is checked:
 * an unknown key, a wrong type or an impossible value is an error naming the file and the
 * key path (e.g. "configs/tiny.json: model.num_key_value_heads: 3 does not divide
 * num_attention_heads = 4"). docs/config.md lists every key.
 */
#ifndef SL_CONFIG_H
#define SL_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/ops.h" /* sl_gate_mode */

#define SL_MAX_LAYERS  256
#define SL_MAX_CORPORA 16
#define SL_PATH_MAX    1024

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

typedef enum { SL_LR_COSINE = 0, SL_LR_WSD = 1, SL_LR_CONSTANT = 2 } sl_lr_schedule;

typedef struct {
    int seq_len;
    int micro_batch_size;        /* sequences per micro-batch per rank */
    int64_t global_batch_tokens; /* tokens per optimizer step over all ranks */
    int max_steps;
    double lr, min_lr;
    int warmup_steps;
    sl_lr_schedule schedule;
    double decay_fraction; /* WSD: fraction of steps in the final decay */
    double beta1, beta2, eps, weight_decay, grad_clip;
    uint64_t seed;   /* initialization */
    int eval_every;  /* steps; 0 = only at start and end */
    int eval_tokens; /* held-out tokens per evaluation */
    int log_every;
    int save_every; /* steps; 0 = only at the end */
    char out_dir[SL_PATH_MAX];
    char metrics_file[SL_PATH_MAX]; /* default: <out_dir>/metrics.jsonl */
    bool global_batch_lbl;          /* LBL frequencies over the global batch (Qwen) */
    double router_bias_update_rate; /* aux-loss-free balancing (DeepSeek-V3); 0 = off */
} sl_train_config;

typedef struct {
    char path[SL_PATH_MAX];
    double weight;
} sl_corpus;

typedef struct {
    sl_corpus train[SL_MAX_CORPORA];
    int n_train;
    char eval_path[SL_PATH_MAX];
    uint64_t seed; /* data order */
    int prefetch;  /* decompressed frames queued ahead */
} sl_data_config;

typedef struct {
    int expert_parallel; /* EP */
    bool zero1;
    double capacity_factor; /* 0 = dropless */
    char drop_policy[16];   /* "probs" | "position": which slots over capacity drop */
    int bucket_mb;          /* gradient all-reduce bucket size in MiB */
} sl_parallel_config;

typedef struct {
    char name[32]; /* "cpu" | "cuda" */
    int threads;   /* 0 = all cores */
} sl_backend_config;

typedef struct {
    char path[SL_PATH_MAX]; /* the file it came from, for messages */
    sl_model_config model;
    sl_train_config train;
    sl_data_config data;
    sl_parallel_config parallel;
    sl_backend_config backend;
} sl_config;

/* Fills every field with its documented default. */
void sl_config_defaults(sl_config *cfg);

/* Parses and validates `path`. On error writes "<path>: <key>: <reason>" into err and
 * returns -1 (cfg is left unchanged). Keys absent from the file keep their defaults. */
int sl_config_load(const char *path, sl_config *cfg, char *err, size_t errlen);
/* The same from a JSON string (`name` is used in messages). */
int sl_config_parse(const char *json, const char *name, sl_config *cfg, char *err, size_t errlen);

/* Applies one "section.key=value" override (the CLI's --set), then re-validates.
 * The value is parsed as JSON when it is valid JSON, else taken as a string (a scalar given
 * for a string key is taken as its text). Nested keys work: "model.rope_scaling.factor=8".
 * On error cfg is unchanged. */
int sl_config_set(sl_config *cfg, const char *assignment, char *err, size_t errlen);

/* Cross-field validation (run by load/parse/set). */
int sl_config_validate(const sl_config *cfg, char *err, size_t errlen);

/* The whole configuration as JSON in the format sl_config_parse reads (malloc'ed string):
 * parsing it reproduces cfg. metrics_file is left out when it is <out_dir>/metrics.jsonl. */
char *sl_config_to_json(const sl_config *cfg);

/* The model section as a Hugging Face config.json object (malloc'ed string). */
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
