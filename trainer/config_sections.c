/*
 * trainer/config_sections.c - the "training", "data", "parallel", "backend" and "attention"
 * sections of a run config: key tables, defaults that depend on other keys, and validation. The
 * "model" section is model/config.c; the file-level parsing is trainer/config.c.
 */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "trainer/config_sections.h"

#include "core/comm_nccl.h"
#include "model/hf_export.h" /* sl_hf_format_parse */
#include "model/model.h"     /* sl_memory_mode_parse */

#define LIM_MICRO_BATCH (1 << 20)
#define LIM_PREFETCH    1024
#define LIM_THREADS     4096
#define LIM_POSITIONS   (1 << 24)

static const char *const k_schedule_names[] = {
    [SL_LR_COSINE] = "cosine", [SL_LR_WSD] = "wsd", [SL_LR_CONSTANT] = "constant"};

const char *sl_lr_schedule_name(sl_lr_schedule s) {
    return (unsigned)s < SL_NKEYS(k_schedule_names) ? k_schedule_names[s] : "?";
}

static int fn_schedule(const sl_cfg_ctx *c, const cJSON *v, const char *path, void *sec) {
    sl_train_config *t = sec;
    char d[96];
    if (cJSON_IsString(v)) {
        for (int i = 0; i < SL_NKEYS(k_schedule_names); i++)
            if (strcmp(v->valuestring, k_schedule_names[i]) == 0) {
                t->schedule = (sl_lr_schedule)i;
                return 0;
            }
    }
    return sl_cfg_err(c, path, "expected \"cosine\", \"wsd\" or \"constant\", got %s",
                      sl_cfg_describe(v, d, 96));
}

static void emit_schedule(cJSON *o, const char *key, const void *sec) {
    cJSON_AddStringToObject(o, key, sl_lr_schedule_name(((const sl_train_config *)sec)->schedule));
}

#define KT(name, kind) SL_KD(sl_train_config, #name, kind, name)
static const sl_cfg_key train_keys[] = {
    KT(seq_len, SL_K_INT),
    KT(micro_batch_size, SL_K_INT),
    KT(global_batch_tokens, SL_K_I64),
    KT(max_steps, SL_K_INT),
    KT(lr, SL_K_DBL),
    KT(min_lr, SL_K_DBL),
    KT(warmup_steps, SL_K_INT),
    SL_KFE("schedule", fn_schedule, emit_schedule),
    KT(decay_fraction, SL_K_DBL),
    KT(beta1, SL_K_DBL),
    KT(beta2, SL_K_DBL),
    KT(eps, SL_K_DBL),
    KT(weight_decay, SL_K_DBL),
    KT(grad_clip, SL_K_DBL),
    KT(seed, SL_K_U64),
    KT(eval_every, SL_K_INT),
    KT(eval_tokens, SL_K_INT),
    KT(log_every, SL_K_INT),
    KT(save_every, SL_K_INT),
    KT(out_dir, SL_K_STR),
    KT(metrics_file, SL_K_STR),
    KT(global_batch_lbl, SL_K_BOOL),
    KT(router_bias_update_rate, SL_K_DBL),
    KT(precision, SL_K_STR),
    KT(keep_last, SL_K_INT),
    KT(keep_every, SL_K_I64),
    KT(async_save, SL_K_BOOL),
    KT(document_mask, SL_K_BOOL),
    KT(recompute, SL_K_STR),
    KT(defer_expert_wgrad, SL_K_STR),
    KT(expert_wgrad_group, SL_K_INT),
    KT(park_expert_rows, SL_K_STR),
    KT(export_format, SL_K_STR),
    KT(sample_every, SL_K_INT),
    KT(sample_prompt, SL_K_STR),
    KT(sample_tokens, SL_K_INT),
    KT(sample_temperature, SL_K_DBL),
    SL_KF("stages", sl_config_stages_check), /* parsed last, printed by config.c */
};

int sl_config_derive_metrics_file(sl_train_config *t) {
    size_t n = strlen(t->out_dir);
    const char *sep = (n > 0 && t->out_dir[n - 1] == '/') ? "" : "/";
    int w = snprintf(t->metrics_file, sizeof t->metrics_file, "%s%smetrics.jsonl", t->out_dir, sep);
    return (w < 0 || (size_t)w >= sizeof t->metrics_file) ? -1 : 0;
}

int sl_config_train_finish(const sl_cfg_ctx *c, const cJSON *obj, sl_train_config *t) {
    if (!sl_cfg_member(obj, "global_batch_tokens"))
        t->global_batch_tokens = (int64_t)t->seq_len * t->micro_batch_size;
    if (!sl_cfg_member(obj, "metrics_file") && sl_config_derive_metrics_file(t))
        return sl_cfg_err(c, "training.out_dir", "too long to derive metrics_file from it");
    return 0;
}

static const sl_cfg_key corpus_keys[] = {
    SL_KD(sl_corpus, "path", SL_K_STR, path),
    SL_KD(sl_corpus, "weight", SL_K_DBL, weight),
};

static int fn_train(const sl_cfg_ctx *c, const cJSON *v, const char *path, void *sec) {
    sl_data_config *dc = sec;
    char sub[SL_CFG_KEYPATH_MAX], d[96];
    sl_corpus list[SL_MAX_CORPORA];
    memset(list, 0, sizeof list);
    if (cJSON_IsString(v)) {
        if (sl_cfg_get_string(c, v, path, list[0].path, sizeof list[0].path)) return -1;
        if (!list[0].path[0]) return sl_cfg_err(c, path, "empty path");
        list[0].weight = 1.0;
        memcpy(dc->train, list, sizeof list);
        dc->n_train = 1;
        return 0;
    }
    if (!cJSON_IsArray(v))
        return sl_cfg_err(
            c, path, "expected a path string or an array of {\"path\", \"weight\"} objects, got %s",
            sl_cfg_describe(v, d, 96));
    int n = cJSON_GetArraySize(v);
    if (n == 0) return sl_cfg_err(c, path, "empty array (give at least one corpus)");
    if (n > SL_MAX_CORPORA) return sl_cfg_err(c, path, "%d corpora, at most %d", n, SL_MAX_CORPORA);
    int i = 0;
    for (const cJSON *it = v->child; it; it = it->next, i++) {
        snprintf(sub, sizeof sub, "%s[%d]", path, i);
        list[i].weight = 1.0;
        if (sl_cfg_apply(c, it, sub, corpus_keys, SL_NKEYS(corpus_keys), &list[i])) return -1;
        char leaf[SL_CFG_KEYPATH_MAX];
        if (!sl_cfg_member(it, "path")) {
            sl_cfg_join(leaf, sizeof leaf, sub, "path");
            return sl_cfg_err(c, leaf, "required key missing");
        }
        if (!list[i].path[0]) {
            sl_cfg_join(leaf, sizeof leaf, sub, "path");
            return sl_cfg_err(c, leaf, "empty path");
        }
        if (!(list[i].weight > 0)) {
            sl_cfg_join(leaf, sizeof leaf, sub, "weight");
            return sl_cfg_err(c, leaf, "must be > 0, got %g", list[i].weight);
        }
    }
    memcpy(dc->train, list, sizeof list);
    dc->n_train = n;
    return 0;
}

/* One corpus of weight 1 as its path; otherwise the list of {path, weight}. */
static void emit_train(cJSON *o, const char *key, const void *sec) {
    const sl_data_config *d = sec;
    if (d->n_train == 1 && d->train[0].weight == 1.0) {
        cJSON_AddStringToObject(o, key, d->train[0].path);
    } else if (d->n_train > 0) {
        cJSON *arr = cJSON_AddArrayToObject(o, key);
        for (int i = 0; i < d->n_train && i < SL_MAX_CORPORA; i++) {
            cJSON *e = cJSON_CreateObject();
            sl_cfg_emit(e, corpus_keys, SL_NKEYS(corpus_keys), &d->train[i]);
            cJSON_AddItemToArray(arr, e);
        }
    }
}

/* data.shuffle_window: a token count (0 = stream order) or "epoch" (one window per epoch). */
static int fn_shuffle_window(const sl_cfg_ctx *c, const cJSON *v, const char *path, void *sec) {
    sl_data_config *dc = sec;
    char d[96];
    if (cJSON_IsString(v)) {
        if (strcmp(v->valuestring, "epoch") != 0)
            return sl_cfg_err(c, path, "expected a number of tokens or \"epoch\", got %s",
                              sl_cfg_describe(v, d, 96));
        dc->shuffle_window = SL_SHUFFLE_EPOCH;
        return 0;
    }
    double x;
    if (sl_cfg_get_integer(c, v, path, 0, SL_CFG_EXACT_INT_MAX, &x)) return -1;
    dc->shuffle_window = (uint64_t)x;
    return 0;
}

static void emit_shuffle_window(cJSON *o, const char *key, const void *sec) {
    const sl_data_config *d = sec;
    if (d->shuffle_window == SL_SHUFFLE_EPOCH)
        cJSON_AddStringToObject(o, key, "epoch");
    else
        cJSON_AddNumberToObject(o, key, (double)d->shuffle_window);
}

static const sl_cfg_key data_keys[] = {
    SL_KFE("train", fn_train, emit_train),
    SL_KD(sl_data_config, "eval", SL_K_STR, eval_path),
    SL_KD(sl_data_config, "seed", SL_K_U64, seed),
    SL_KFE("shuffle_window", fn_shuffle_window, emit_shuffle_window),
    SL_KD(sl_data_config, "prefetch", SL_K_INT, prefetch),
    SL_KD(sl_data_config, "tokenizer", SL_K_STR, tokenizer),
};

static const sl_cfg_key parallel_keys[] = {
    SL_KD(sl_parallel_config, "expert_parallel", SL_K_INT, expert_parallel),
    SL_KD(sl_parallel_config, "zero1", SL_K_BOOL, zero1),
    SL_KD(sl_parallel_config, "capacity_factor", SL_K_DBL, capacity_factor),
    SL_KD(sl_parallel_config, "drop_policy", SL_K_STR, drop_policy),
    SL_KD(sl_parallel_config, "bucket_mb", SL_K_INT, bucket_mb),
    SL_KD(sl_parallel_config, "transport", SL_K_STR, transport),
    SL_KD(sl_parallel_config, "overlap_moe", SL_K_BOOL, overlap_moe),
};

static const sl_cfg_key backend_keys[] = {
    SL_KD(sl_backend_config, "name", SL_K_STR, name),
    SL_KD(sl_backend_config, "threads", SL_K_INT, threads),
    SL_KD(sl_backend_config, "deterministic", SL_K_BOOL, deterministic),
    SL_KD(sl_backend_config, "peak_tflops", SL_K_DBL, peak_tflops),
};

static const sl_cfg_key attention_keys[] = {
    SL_KD(sl_attention_config, "kernel", SL_K_STR, kernel),
};

static const int n_train_keys = SL_NKEYS(train_keys), n_data_keys = SL_NKEYS(data_keys),
                 n_parallel_keys = SL_NKEYS(parallel_keys), n_backend_keys = SL_NKEYS(backend_keys),
                 n_attention_keys = SL_NKEYS(attention_keys);

const sl_config_section sl_config_sections[] = {
    {"model", sl_model_keys, &sl_model_nkeys, offsetof(sl_config, model)},
    {"training", train_keys, &n_train_keys, offsetof(sl_config, train)},
    {"data", data_keys, &n_data_keys, offsetof(sl_config, data)},
    {"parallel", parallel_keys, &n_parallel_keys, offsetof(sl_config, parallel)},
    {"backend", backend_keys, &n_backend_keys, offsetof(sl_config, backend)},
    {"attention", attention_keys, &n_attention_keys, offsetof(sl_config, attention)},
};
const int sl_config_nsections = SL_NKEYS(sl_config_sections);

/* training.sample_*: the ranges here; which tokenizer decodes them is checked with the data
 * section (validate_sample_tokenizer). */
static int validate_samples(const sl_cfg_vctx *v, const sl_train_config *t,
                            const sl_model_config *m) {
    if (sl_cfg_check_range(v, "sample_every", t->sample_every, 0, INT_MAX)) return -1;
    if (sl_cfg_check_range(v, "sample_tokens", t->sample_tokens, 1, 1 << 16)) return -1;
    if (!(t->sample_temperature >= 0) || !isfinite(t->sample_temperature))
        return sl_cfg_verr(v, "sample_temperature", "must be >= 0 (0: greedy), got %g",
                           t->sample_temperature);
    if (!sl_cfg_terminated(t->sample_prompt, sizeof t->sample_prompt))
        return sl_cfg_verr(v, "sample_prompt", "string too long (at most %d bytes)",
                           (int)sizeof t->sample_prompt - 1);
    (void)m;
    return 0;
}

/* Samples are decoded by data.tokenizer, or as bytes (vocabulary 257) without one. */
static int validate_sample_tokenizer(const sl_cfg_vctx *v, const sl_config *cfg) {
    if (cfg->train.sample_every > 0 && cfg->model.vocab_size != 257 && !cfg->data.tokenizer[0])
        return sl_cfg_verr(v, "sample_every",
                           "samples of a model with model.vocab_size = %d need the tokenizer "
                           "that decodes them: set data.tokenizer (byte-level models, "
                           "vocabulary 257, need none)",
                           cfg->model.vocab_size);
    return 0;
}

int sl_config_validate_train(const sl_cfg_vctx *v, const sl_train_config *t,
                             const sl_model_config *m) {
    if (sl_cfg_check_range(v, "seq_len", t->seq_len, 1, LIM_POSITIONS)) return -1;
    if (t->seq_len > m->max_position_embeddings)
        return sl_cfg_verr(v, "seq_len", "%d exceeds model.max_position_embeddings = %d",
                           t->seq_len, m->max_position_embeddings);
    if (sl_cfg_check_range(v, "micro_batch_size", t->micro_batch_size, 1, LIM_MICRO_BATCH))
        return -1;
    if (t->global_batch_tokens < 1)
        return sl_cfg_verr(v, "global_batch_tokens", "must be positive, got %lld",
                           (long long)t->global_batch_tokens);
    long long micro = (long long)t->seq_len * t->micro_batch_size;
    if (t->global_batch_tokens % micro != 0)
        return sl_cfg_verr(v, "global_batch_tokens",
                           "%lld is not a multiple of seq_len * micro_batch_size = %d * %d = %lld",
                           (long long)t->global_batch_tokens, t->seq_len, t->micro_batch_size,
                           micro);
    if (sl_cfg_check_range(v, "max_steps", t->max_steps, 1, INT_MAX)) return -1;
    if (!(t->lr >= 0) || !isfinite(t->lr))
        return sl_cfg_verr(v, "lr", "must be >= 0, got %g", t->lr);
    if (sl_cfg_check_nonneg(v, "min_lr", t->min_lr)) return -1;
    if (t->min_lr > t->lr) return sl_cfg_verr(v, "min_lr", "%g exceeds lr = %g", t->min_lr, t->lr);
    if (sl_cfg_check_range(v, "warmup_steps", t->warmup_steps, 0, INT_MAX)) return -1;
    if (sl_cfg_check_range(v, "keep_last", t->keep_last, 0, INT_MAX)) return -1;
    if (t->keep_every < 0)
        return sl_cfg_verr(v, "keep_every", "must be >= 0, got %lld", (long long)t->keep_every);
    if (t->warmup_steps > t->max_steps)
        return sl_cfg_verr(v, "warmup_steps", "%d exceeds max_steps = %d", t->warmup_steps,
                           t->max_steps);
    if (t->schedule != SL_LR_COSINE && t->schedule != SL_LR_WSD && t->schedule != SL_LR_CONSTANT)
        return sl_cfg_verr(v, "schedule", "invalid value %d", (int)t->schedule);
    if (!(t->decay_fraction >= 0 && t->decay_fraction <= 1))
        return sl_cfg_verr(v, "decay_fraction", "must be in [0, 1], got %g", t->decay_fraction);
    if (t->schedule == SL_LR_WSD) {
        double decay = ceil(t->decay_fraction * t->max_steps);
        if (t->warmup_steps + decay > t->max_steps)
            return sl_cfg_verr(
                v, "decay_fraction",
                "warmup_steps (%d) plus the decay (%g * %d = %.0f steps) exceed max_steps "
                "= %d",
                t->warmup_steps, t->decay_fraction, t->max_steps, decay, t->max_steps);
    }
    if (sl_cfg_check_unit(v, "beta1", t->beta1) || sl_cfg_check_unit(v, "beta2", t->beta2))
        return -1;
    if (!(t->eps > 0) || !isfinite(t->eps))
        return sl_cfg_verr(v, "eps", "must be > 0, got %g", t->eps);
    if (sl_cfg_check_nonneg(v, "weight_decay", t->weight_decay)) return -1;
    if (sl_cfg_check_nonneg(v, "grad_clip", t->grad_clip)) return -1;
    if ((double)t->seed > SL_CFG_EXACT_INT_MAX)
        return sl_cfg_verr(v, "seed", "must be at most 2^53");
    if (sl_cfg_check_range(v, "eval_every", t->eval_every, 0, INT_MAX)) return -1;
    if (sl_cfg_check_range(v, "eval_tokens", t->eval_tokens, 1, INT_MAX)) return -1;
    if (sl_cfg_check_range(v, "log_every", t->log_every, 1, INT_MAX)) return -1;
    if (sl_cfg_check_range(v, "save_every", t->save_every, 0, INT_MAX)) return -1;
    if (!sl_cfg_terminated(t->out_dir, sizeof t->out_dir))
        return sl_cfg_verr(v, "out_dir", "string too long");
    if (!t->out_dir[0]) return sl_cfg_verr(v, "out_dir", "must not be empty");
    if (!sl_cfg_terminated(t->metrics_file, sizeof t->metrics_file))
        return sl_cfg_verr(v, "metrics_file", "string too long");
    if (!t->metrics_file[0]) return sl_cfg_verr(v, "metrics_file", "must not be empty");
    if (sl_cfg_check_nonneg(v, "router_bias_update_rate", t->router_bias_update_rate)) return -1;
    if (!sl_cfg_terminated(t->recompute, sizeof t->recompute))
        return sl_cfg_verr(v, "recompute", "string too long");
    sl_memory_mode mode;
    if (sl_memory_mode_parse(t->recompute, &mode) != 0)
        return sl_cfg_verr(v, "recompute",
                           "expected \"none\", \"attention\" or \"layer\", got \"%s\"",
                           t->recompute);
    const char *dw = t->defer_expert_wgrad;
    if (!sl_cfg_terminated(dw, sizeof t->defer_expert_wgrad) ||
        (strcmp(dw, "auto") && strcmp(dw, "on") && strcmp(dw, "off")))
        return sl_cfg_verr(v, "defer_expert_wgrad",
                           "expected \"auto\", \"on\" or \"off\", got \"%.8s\"", dw);
    if (!strcmp(dw, "on") && mode == SL_MEMORY_LAYER)
        return sl_cfg_verr(v, "defer_expert_wgrad",
                           "\"on\" keeps a micro-batch's expert rows in each MoE layer, but "
                           "recompute \"layer\" shares one set between the layers (use "
                           "\"attention\" or \"none\", or \"auto\")");
    if (t->expert_wgrad_group != 0 &&
        (t->expert_wgrad_group < 2 || t->expert_wgrad_group > SL_DW_MAX_SEGMENTS))
        return sl_cfg_verr(v, "expert_wgrad_group",
                           "expected 0 (auto) or 2 to %d micro-batches, got %d", SL_DW_MAX_SEGMENTS,
                           t->expert_wgrad_group);
    const char *pr = t->park_expert_rows;
    if (!sl_cfg_terminated(pr, sizeof t->park_expert_rows) ||
        (strcmp(pr, "auto") && strcmp(pr, "rows") && strcmp(pr, "tokens")))
        return sl_cfg_verr(v, "park_expert_rows",
                           "expected \"auto\", \"rows\" or \"tokens\", got \"%.8s\"", pr);
    sl_hf_format fmt;
    if (!sl_cfg_terminated(t->export_format, sizeof t->export_format) ||
        sl_hf_format_parse(t->export_format, &fmt) != 0)
        return sl_cfg_verr(v, "export_format",
                           "expected \"qwen3_moe\" or \"qwen3_next\", got \"%.32s\"",
                           t->export_format);
    return validate_samples(v, t, m);
}

static int validate_data(const sl_cfg_vctx *v, const sl_data_config *d) {
    char key[64];
    if (sl_cfg_check_range(v, "train", d->n_train, 0, SL_MAX_CORPORA)) return -1;
    for (int i = 0; i < d->n_train; i++) {
        const sl_corpus *c = &d->train[i];
        snprintf(key, sizeof key, "train[%d].path", i);
        if (!sl_cfg_terminated(c->path, sizeof c->path))
            return sl_cfg_verr(v, key, "string too long");
        if (!c->path[0]) return sl_cfg_verr(v, key, "empty path");
        snprintf(key, sizeof key, "train[%d].weight", i);
        if (!(c->weight > 0) || !isfinite(c->weight))
            return sl_cfg_verr(v, key, "must be > 0, got %g", c->weight);
    }
    if (!sl_cfg_terminated(d->eval_path, sizeof d->eval_path))
        return sl_cfg_verr(v, "eval", "string too long");
    if ((double)d->seed > SL_CFG_EXACT_INT_MAX)
        return sl_cfg_verr(v, "seed", "must be at most 2^53");
    if (sl_cfg_check_range(v, "prefetch", d->prefetch, 0, LIM_PREFETCH)) return -1;
    if (!sl_cfg_terminated(d->tokenizer, sizeof d->tokenizer))
        return sl_cfg_verr(v, "tokenizer", "string too long");
    return 0;
}

static int validate_parallel(const sl_cfg_vctx *v, const sl_parallel_config *p,
                             const sl_model_config *m) {
    if (sl_cfg_check_range(v, "expert_parallel", p->expert_parallel, 1, INT_MAX)) return -1;
    if (m->num_experts == 0 && p->expert_parallel > 1)
        return sl_cfg_verr(v, "expert_parallel", "%d needs an MoE model (model.num_experts = 0)",
                           p->expert_parallel);
    if (m->num_experts > 0 && m->num_experts % p->expert_parallel != 0)
        return sl_cfg_verr(v, "expert_parallel", "%d does not divide model.num_experts = %d",
                           p->expert_parallel, m->num_experts);
    if (sl_cfg_check_nonneg(v, "capacity_factor", p->capacity_factor)) return -1;
    if (!sl_cfg_terminated(p->drop_policy, sizeof p->drop_policy))
        return sl_cfg_verr(v, "drop_policy", "string too long");
    if (strcmp(p->drop_policy, "probs") != 0 && strcmp(p->drop_policy, "position") != 0)
        return sl_cfg_verr(v, "drop_policy", "expected \"probs\" or \"position\", got \"%s\"",
                           p->drop_policy);
    /* 4 GiB at most: a bucket of fp32 gradients is one MPI request, whose count is an int
     * (8 GiB would be 2^31 elements); larger buckets only delay the first all-reduce */
    if (sl_cfg_check_range(v, "bucket_mb", p->bucket_mb, 1, 4096)) return -1;
    sl_transport tr;
    if (!sl_cfg_terminated(p->transport, sizeof p->transport) ||
        sl_transport_parse(p->transport, &tr) != 0)
        return sl_cfg_verr(v, "transport", "expected \"auto\", \"mpi\" or \"nccl\", got \"%.*s\"",
                           (int)sizeof p->transport, p->transport);
    return 0;
}

static int validate_backend(const sl_cfg_vctx *v, const sl_backend_config *b) {
    if (!sl_cfg_terminated(b->name, sizeof b->name))
        return sl_cfg_verr(v, "name", "string too long");
    if (strcmp(b->name, "cpu") != 0 && strcmp(b->name, "cuda") != 0)
        return sl_cfg_verr(v, "name", "unknown backend \"%s\" (expected \"cpu\" or \"cuda\")",
                           b->name);
    if (sl_cfg_check_range(v, "threads", b->threads, 0, LIM_THREADS)) return -1;
    if (!(b->peak_tflops >= 0) || !isfinite(b->peak_tflops))
        return sl_cfg_verr(v, "peak_tflops", "must be >= 0 (0: the GPU's datasheet figure), got %g",
                           b->peak_tflops);
    return 0;
}

static int validate_precision(const sl_cfg_vctx *v, const sl_config *cfg) {
    const char *p = cfg->train.precision;
    if (!sl_cfg_terminated(p, sizeof cfg->train.precision))
        return sl_cfg_verr(v, "precision", "string too long");
    if (strcmp(p, "auto") != 0 && strcmp(p, "fp32") != 0 && strcmp(p, "bf16") != 0)
        return sl_cfg_verr(v, "precision",
                           "unknown precision \"%s\" (expected \"auto\", \"fp32\" "
                           "or \"bf16\")",
                           p);
    if (strcmp(p, "bf16") == 0 && strcmp(cfg->backend.name, "cuda") != 0)
        return sl_cfg_verr(
            v, "precision",
            "\"bf16\" needs backend.name = \"cuda\" (the %s backend computes in fp32)",
            cfg->backend.name);
    return 0;
}

/* attention.kernel, and what the cudnn kernel needs of the other sections (checked here, when
 * the config is read, as far as the config can tell; the node's libcudnn is checked when the
 * backend is made: sl_backend_set_attn_kernel). */
static int validate_attention(const sl_cfg_vctx *v, const sl_config *cfg) {
    const char *k = cfg->attention.kernel;
    if (!sl_cfg_terminated(k, sizeof cfg->attention.kernel))
        return sl_cfg_verr(v, "kernel", "string too long");
    if (strcmp(k, "auto") != 0 && strcmp(k, "sluice") != 0 && strcmp(k, "cudnn") != 0)
        return sl_cfg_verr(v, "kernel", "expected \"auto\", \"sluice\" or \"cudnn\", got \"%s\"",
                           k);
    if (strcmp(k, "cudnn") != 0) return 0;
    if (strcmp(cfg->backend.name, "cuda") != 0)
        return sl_cfg_verr(v, "kernel",
                           "\"cudnn\" needs backend.name = \"cuda\" (the %s backend has one "
                           "attention kernel, its own)",
                           cfg->backend.name);
    if (sl_config_compute_dtype(cfg) != SL_BF16)
        return sl_cfg_verr(v, "kernel",
                           "\"cudnn\" computes in bf16 only: it needs training.precision = "
                           "\"bf16\" or \"auto\", not \"%s\"",
                           cfg->train.precision);
    if (cfg->backend.deterministic)
        return sl_cfg_verr(v, "kernel",
                           "\"cudnn\": cuDNN's attention backward sums dQ with atomics, so its "
                           "bits vary run to run; it needs backend.deterministic = false");
    if (cfg->model.head_dim != 64 && cfg->model.head_dim != 128)
        return sl_cfg_verr(v, "kernel", "\"cudnn\" takes model.head_dim 64 or 128, not %d",
                           cfg->model.head_dim);
    if (cfg->train.document_mask) /* the stages inherit it */
        return sl_cfg_verr(v, "kernel",
                           "\"cudnn\": cuDNN's fused attention has no per-document mask, and "
                           "training.document_mask is true (use \"auto\" or \"sluice\")");
    return 0;
}

sl_dtype sl_config_compute_dtype(const sl_config *cfg) {
    const char *p = cfg->train.precision;
    if (strcmp(p, "bf16") == 0) return SL_BF16;
    if (strcmp(p, "fp32") == 0) return SL_F32;
    return strcmp(cfg->backend.name, "cuda") == 0 ? SL_BF16 : SL_F32;
}

int sl_config_validate_named(const sl_config *cfg, const char *name, char *err, size_t errlen) {
    sl_cfg_vctx v = {name, "model", err, errlen};
    if (sl_model_config_validate(&v, &cfg->model)) return -1;
    v.prefix = "training";
    if (!cfg->stages_given) {
        if (sl_config_validate_train(&v, &cfg->train, &cfg->model)) return -1;
    } else {
        /* with stages, the batch and schedule keys here are only the stages' defaults: each
         * stage checks the values it runs with */
        sl_train_config rest = cfg->train;
        rest.seq_len = rest.micro_batch_size = 1;
        rest.global_batch_tokens = 1;
        rest.warmup_steps = 0;
        rest.schedule = SL_LR_CONSTANT;
        if (rest.max_steps < 1) rest.max_steps = 1; /* "no stage trains" is the stages' error */
        if (sl_config_validate_train(&v, &rest, &cfg->model)) return -1;
        if (sl_config_stages_validate(&v, cfg)) return -1;
    }
    v.prefix = "data";
    if (validate_data(&v, &cfg->data)) return -1;
    v.prefix = "training"; /* it depends on the data section's tokenizer */
    if (validate_sample_tokenizer(&v, cfg)) return -1;
    v.prefix = "parallel";
    if (validate_parallel(&v, &cfg->parallel, &cfg->model)) return -1;
    v.prefix = "backend";
    if (validate_backend(&v, &cfg->backend)) return -1;
    v.prefix = "training"; /* it depends on the backend */
    if (validate_precision(&v, cfg)) return -1;
    v.prefix = "attention"; /* last: it depends on all of the above */
    if (validate_attention(&v, cfg)) return -1;
    return 0;
}

int sl_config_validate(const sl_config *cfg, char *err, size_t errlen) {
    const char *name =
        sl_cfg_terminated(cfg->path, sizeof cfg->path) && cfg->path[0] ? cfg->path : "<config>";
    return sl_config_validate_named(cfg, name, err, errlen);
}
