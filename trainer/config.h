/*
 * trainer/config.h - the run configuration, parsed from JSON (cJSON) and validated.
 *
 * A config file has the sections "model" (model/config.h: Hugging Face Qwen3-MoE config keys
 * plus attn_output_gate), "training", "data" (the reader's sl_data_config, io/reader.h),
 * "parallel", "backend" and "attention". Every key is checked: an unknown key, a wrong type or an
 * impossible value is an error naming the file and the key path (e.g. "configs/tiny.json:
 * model.num_key_value_heads: 3 does not divide num_attention_heads = 4"). docs/config.md lists
 * every key.
 */
#ifndef SL_TRAINER_CONFIG_H
#define SL_TRAINER_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/fsutil.h" /* SL_PATH_MAX */
#include "core/tensor.h" /* sl_dtype */
#include "io/reader.h"   /* sl_data_config */
#include "model/config.h"

typedef enum { SL_LR_COSINE = 0, SL_LR_WSD = 1, SL_LR_CONSTANT = 2 } sl_lr_schedule;
/* "cosine", "wsd", "constant". */
const char *sl_lr_schedule_name(sl_lr_schedule s);

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
    char precision[8];              /* "auto" (fp32 on the CPU, bf16 on CUDA) | "fp32" | "bf16" */
    int keep_last;                  /* committed checkpoints kept (0 = all) */
    bool async_save;    /* write checkpoints in the background (snapshot to host memory first) */
    int64_t keep_every; /* also keep checkpoints whose step is a multiple of this (0 = none) */
    bool document_mask; /* attend within documents only; positions restart at each document */
    char recompute[16]; /* activation recomputation: "none" | "attention" | "layer" (model.h) */
    /* The experts' weight gradients over groups of micro-batches (train_step.h): "auto" (on
     * with backend cuda where the model allows it) | "on" | "off"; the group's size, 2-4 */
    char defer_expert_wgrad[8];
    int expert_wgrad_group;
    /* What a group's parked micro-batches keep in each MoE layer (moe/parked_tokens.h): "auto"
     * (tokens for groups of 3 or more, rows for pairs) | "rows" | "tokens" */
    char park_expert_rows[8];
    /* Samples during training (trainer/trainer_sample.c, docs/generate.md): every sample_every
     * steps (0 = off), sample_tokens tokens continuing sample_prompt (after the
     * end-of-document token), greedy at sample_temperature 0, else drawn with the run seed. */
    char export_format[16]; /* layout of <out_dir>/final: "qwen3_moe" | "qwen3_next" */
    int sample_every;
    char sample_prompt[256];
    int sample_tokens;
    double sample_temperature;
} sl_train_config;

typedef struct {
    int expert_parallel; /* EP */
    bool zero1;
    double capacity_factor; /* 0 = dropless */
    char drop_policy[16];   /* "probs" | "position": which slots over capacity drop */
    int bucket_mb;          /* gradient all-reduce bucket size in MiB */
    char transport[8];      /* "auto" | "mpi" | "nccl" (core/comm_nccl.h) */
    bool overlap_moe; /* MoE backward: expert weight gradients during the exchange (default on) */
} sl_parallel_config;

typedef struct {
    char name[32];      /* "cpu" | "cuda" */
    int threads;        /* 0 = all cores */
    bool deterministic; /* CUDA: bitwise-reproducible kernels (default true) */
    double peak_tflops; /* per device, for MFU; 0 = the GPU's datasheet bf16 figure (none on the
                         * CPU: MFU is then not reported) */
} sl_backend_config;

/* The "attention" section: how the attention operation is computed, not what it computes. */
typedef struct {
    /* "auto" (sluice's kernels; the default) | "sluice" | "cudnn" (cuDNN's fused attention with
     * sluice's gate around it; CUDA, bf16, no document mask, backend.deterministic = false):
     * attention/attn_kernels.h, docs/attention.md "Kernel choice" */
    char kernel[16];
} sl_attention_config;

/* One stage of a staged schedule (training.stages; docs/stages.md). Its settings are resolved
 * at parse time: what the stage does not set comes from the previous stage (the first stage:
 * from the training, model and data sections), so `train`, `model` and `data` are exactly what
 * the stage runs with. */
#define SL_MAX_STAGES 8
typedef struct {
    char name[32];
    int64_t tokens;        /* training-token budget; 0: an evaluation-only stage */
    int steps;             /* tokens / global_batch_tokens, rounded down (0: evaluation only) */
    bool reset_optimizer;  /* zero the AdamW moments (and its step count) when the stage starts */
    sl_train_config train; /* max_steps = steps; the learning-rate schedule spans the stage */
    sl_model_config model; /* rope_theta, rope_scaling, max_position_embeddings */
    sl_data_config data;   /* train mixture and eval set */
    uint32_t given;        /* which stage keys the file set (config_stages.c), for round trips */
} sl_stage;

typedef struct {
    char path[SL_PATH_MAX]; /* the file it came from, for messages */
    sl_model_config model;
    sl_train_config train;
    sl_data_config data;
    sl_parallel_config parallel;
    sl_backend_config backend;
    sl_attention_config attention;
    /* The schedule: training.stages when given (stages_given), else one stage "main" made from
     * the training section (max_steps steps). Either way the trainer walks stages[0 .. n). */
    int n_stages;
    bool stages_given;
    sl_stage stages[SL_MAX_STAGES];
} sl_config;

/* The schedule's stages: training.stages, or the one implicit stage "main" of a config without
 * them (made from the sections as they are when called). */
int sl_config_stage_count(const sl_config *cfg);
void sl_config_stage_at(const sl_config *cfg, int i, sl_stage *out);
/* Where stage i's training data (eval false) or eval set (eval true) is set, for messages:
 * "data.train" / "data.eval" of the data section, or `training.stages[j] ("name"): data.train`
 * for the stage j <= i whose own "data" set it (i's, or the one it inherits it from). */
void sl_config_stage_data_key(const sl_config *cfg, int i, bool eval, char *buf, size_t n);
/* The longest sequence a model's RoPE settings support: max_position_embeddings, and with
 * YaRN at most factor x original_max_position_embeddings. */
int sl_stage_supported_positions(const sl_model_config *m);

/* The dtype the model computes in: training.precision, with "auto" resolved by the backend
 * (bf16 on CUDA, fp32 on the CPU). */
sl_dtype sl_config_compute_dtype(const sl_config *cfg);

/* Fills every field with its documented default. */
void sl_config_defaults(sl_config *cfg);

/* Parses and validates `path`. On error writes "<path>: <key>: <reason>" into err and
 * returns -1 (cfg is left unchanged). Keys absent from the file keep their defaults. */
int sl_config_load(const char *path, sl_config *cfg, char *err, size_t errlen);
/* The same from a JSON string (`name` is used in messages). */
int sl_config_parse(const char *json, const char *name, sl_config *cfg, char *err, size_t errlen);

/* Applies "section.key=value" overrides (the CLI's --set) in order, then validates the result
 * once, so the order of the overrides does not matter to validation (a later override may
 * repair what an earlier one alone would break). A value is parsed as JSON when it is valid
 * JSON, else taken as a string (a scalar given for a string key is taken as its text).
 * Nested keys work: "model.rope_scaling.factor=8". On error cfg is unchanged and err is a
 * malformed override's message (sl_config_set_check) or names the key that failed, prefixed
 * with "<file> (--set)": "tiny.json (--set): training.lr: must be >= 0". */
int sl_config_apply_sets(sl_config *cfg, const char *const *assignments, int n, char *err,
                         size_t errlen);
/* Whether `assignment` is of the form "section.key=value" (a key path: dot-separated names,
 * spaces around it ignored; any value): 0, or -1 with "--set ASSIGNMENT: <why>" in err. What
 * `sluice train` checks before it starts, a usage error (exit status 2). */
int sl_config_set_check(const char *assignment, char *err, size_t errlen);
/* Whether one of the overrides sets the key path `key` ("data.train") or an object holding it
 * ("data"), so that the value at `key` comes from the command line (for messages). */
bool sl_config_set_covers(const char *const *assignments, int n, const char *key);
/* One override: sl_config_apply_sets with n = 1. */
int sl_config_set(sl_config *cfg, const char *assignment, char *err, size_t errlen);

/* Cross-field validation (run by load/parse/set). */
int sl_config_validate(const sl_config *cfg, char *err, size_t errlen);

/* The whole configuration as JSON in the format sl_config_parse reads (malloc'ed string):
 * parsing it reproduces cfg. metrics_file is left out when it is <out_dir>/metrics.jsonl. */
char *sl_config_to_json(const sl_config *cfg);

#endif
