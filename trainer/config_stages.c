/*
 * trainer/config_stages.c - training.stages: a staged schedule in the run config (docs/stages.md).
 *
 * A stage object mixes keys that belong to different sections (its own name, tokens and
 * reset_optimizer; the training keys of its batch and learning-rate schedule; the model's RoPE
 * keys; the data's train mixture and eval set). Each key is parsed by its own section's key
 * table, onto copies of the previous stage's settings (the first stage: of the training, model
 * and data sections), so a stage inherits every key it does not set and every key means exactly
 * what it means in its section. Which keys the file
 * set is remembered (sl_stage.given), so that printing the config writes only those and
 * inheritance survives --set overrides and round trips.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "trainer/config_sections.h"

/* The keys of a stage object, in output order, and where each one goes. */
typedef enum { TO_STAGE, TO_TRAIN, TO_MODEL, TO_DATA } stage_target;
static const struct {
    const char *key;
    stage_target to;
} k_stage_keys[] = {
    {"name", TO_STAGE},
    {"tokens", TO_STAGE},
    {"seq_len", TO_TRAIN},
    {"rope_theta", TO_MODEL},
    {"rope_scaling", TO_MODEL},
    {"max_position_embeddings", TO_MODEL},
    {"micro_batch_size", TO_TRAIN},
    {"global_batch_tokens", TO_TRAIN},
    {"lr", TO_TRAIN},
    {"min_lr", TO_TRAIN},
    {"warmup_steps", TO_TRAIN},
    {"schedule", TO_TRAIN},
    {"decay_fraction", TO_TRAIN},
    {"eval_every", TO_TRAIN},
    {"eval_tokens", TO_TRAIN},
    {"reset_optimizer", TO_STAGE},
    {"data", TO_DATA},
};
enum { N_STAGE_KEYS = SL_NKEYS(k_stage_keys) };
/* The data keys a stage may set, and their bits after the stage keys' in sl_stage.given. */
static const char *const k_stage_data_keys[] = {"train", "eval"};

static const sl_cfg_key stage_own_keys[] = {
    SL_KD(sl_stage, "name", SL_K_STR, name),
    SL_KD(sl_stage, "tokens", SL_K_I64, tokens),
    SL_KD(sl_stage, "reset_optimizer", SL_K_BOOL, reset_optimizer),
};

static const sl_config_section *section(const char *name) {
    for (int i = 0; i < sl_config_nsections; i++)
        if (strcmp(sl_config_sections[i].name, name) == 0) return &sl_config_sections[i];
    return NULL;
}

static int stage_key_index(const char *key) {
    for (int i = 0; i < N_STAGE_KEYS; i++)
        if (strcmp(k_stage_keys[i].key, key) == 0) return i;
    return -1;
}

/* Parses the single member `it` with a section's key table onto sec. */
static int apply_one(const sl_cfg_ctx *c, const cJSON *it, const char *prefix,
                     const sl_cfg_key *defs, int n, void *sec) {
    cJSON *one = cJSON_CreateObject();
    SL_CHECK(one && cJSON_AddItemReferenceToObject(one, it->string, (cJSON *)it), "out of memory");
    const int rc = sl_cfg_apply(c, one, prefix, defs, n, sec);
    cJSON_Delete(one); /* deletes the reference only */
    return rc;
}

static int parse_stage_data(const sl_cfg_ctx *c, const cJSON *v, const char *path, sl_stage *st) {
    char sub[SL_CFG_KEYPATH_MAX], d[96];
    if (!cJSON_IsObject(v))
        return sl_cfg_err(c, path, "expected an object with \"train\" and/or \"eval\", got %s",
                          sl_cfg_describe(v, d, 96));
    const sl_config_section *ds = section("data");
    for (const cJSON *it = v->child; it; it = it->next) {
        int k = -1;
        for (int i = 0; i < 2; i++)
            if (strcmp(it->string, k_stage_data_keys[i]) == 0) k = i;
        sl_cfg_join(sub, sizeof sub, path, it->string);
        if (k < 0)
            return sl_cfg_err(c, sub,
                              "a stage's data sets only \"train\" (its mixture) and \"eval\" (its "
                              "evaluation set); seed, shuffle_window and prefetch are the data "
                              "section's");
        if (apply_one(c, it, path, ds->keys, *ds->nkeys, &st->data)) return -1;
        st->given |= 1u << (N_STAGE_KEYS + k);
    }
    return 0;
}

/* A stage from its object, starting from the previous stage's resolved settings (the first
 * stage from the sections'): a schedule continues, so a RoPE base or data mixture set once
 * holds until a later stage changes it. */
static int parse_stage(const sl_cfg_ctx *c, const cJSON *obj, const char *path,
                       const sl_config *cfg, const sl_stage *prev, sl_stage *st) {
    char sub[SL_CFG_KEYPATH_MAX], d[96];
    memset(st, 0, sizeof *st);
    st->train = prev ? prev->train : cfg->train;
    st->model = prev ? prev->model : cfg->model;
    st->data = prev ? prev->data : cfg->data;
    if (!cJSON_IsObject(obj))
        return sl_cfg_err(c, path, "expected a stage object, got %s", sl_cfg_describe(obj, d, 96));
    const sl_config_section *ts = section("training"), *ms = section("model");
    for (const cJSON *it = obj->child; it; it = it->next) {
        sl_cfg_join(sub, sizeof sub, path, it->string);
        for (const cJSON *p = obj->child; p != it; p = p->next)
            if (strcmp(p->string, it->string) == 0) return sl_cfg_err(c, sub, "duplicate key");
        const int k = stage_key_index(it->string);
        if (k < 0) {
            char list[512] = "";
            for (int i = 0; i < N_STAGE_KEYS; i++) {
                const size_t n = strlen(list);
                snprintf(list + n, sizeof list - n, "%s%s", i ? ", " : "", k_stage_keys[i].key);
            }
            return sl_cfg_err(c, sub, "unknown stage key (a stage sets: %s)", list);
        }
        int rc = 0;
        switch (k_stage_keys[k].to) {
        case TO_STAGE:
            rc = apply_one(c, it, path, stage_own_keys, SL_NKEYS(stage_own_keys), st);
            break;
        case TO_TRAIN:
            rc = apply_one(c, it, path, ts->keys, *ts->nkeys, &st->train);
            break;
        case TO_MODEL:
            rc = apply_one(c, it, path, ms->keys, *ms->nkeys, &st->model);
            break;
        case TO_DATA:
            rc = parse_stage_data(c, it, sub, st);
            break;
        }
        if (rc) return -1;
        st->given |= 1u << k;
    }
    if (!(st->given & 1u << stage_key_index("name")))
        return sl_cfg_err(c, path, "a stage needs a \"name\"");
    if (!(st->given & 1u << stage_key_index("tokens")))
        return sl_cfg_err(c, path,
                          "a stage needs \"tokens\", its training-token budget (0 for an "
                          "evaluation-only stage)");
    /* YaRN stages advertise the extended length, as Hugging Face configs do, unless they say */
    if (st->model.rope_scaling.type == SL_ROPE_YARN &&
        !(st->given & 1u << stage_key_index("max_position_embeddings")))
        st->model.max_position_embeddings =
            (int)fmin(1 << 24, floor(st->model.rope_scaling.factor *
                                     st->model.rope_scaling.original_max_position_embeddings));
    const int64_t gbt = st->train.global_batch_tokens;
    st->steps = st->tokens > 0 && gbt > 0 ? (int)fmin(1e9, (double)(st->tokens / gbt)) : 0;
    st->train.max_steps = st->steps;
    return 0;
}

int sl_config_stages_check(const sl_cfg_ctx *c, const cJSON *v, const char *path, void *sec) {
    (void)sec; /* parsed by sl_config_stages_parse once every section is known */
    char d[96];
    if (cJSON_IsNull(v) || cJSON_IsArray(v)) return 0;
    return sl_cfg_err(c, path, "expected an array of stage objects (or null), got %s",
                      sl_cfg_describe(v, d, 96));
}

int sl_config_stages_parse(const sl_cfg_ctx *c, const cJSON *train_obj, sl_config *cfg) {
    cfg->n_stages = 0;
    cfg->stages_given = false;
    const cJSON *arr = train_obj ? sl_cfg_member(train_obj, "stages") : NULL;
    if (!arr || cJSON_IsNull(arr)) return 0;
    const int n = cJSON_GetArraySize(arr);
    if (n < 1) return sl_cfg_err(c, "training.stages", "empty (give at least one stage, or null)");
    if (n > SL_MAX_STAGES)
        return sl_cfg_err(c, "training.stages", "%d stages, at most %d", n, SL_MAX_STAGES);
    int i = 0, total = 0;
    for (const cJSON *it = arr->child; it; it = it->next, i++) {
        char path[64];
        snprintf(path, sizeof path, "training.stages[%d]", i);
        if (parse_stage(c, it, path, cfg, i > 0 ? &cfg->stages[i - 1] : NULL, &cfg->stages[i]))
            return -1;
        total += cfg->stages[i].steps;
    }
    cfg->n_stages = n;
    cfg->stages_given = true;
    /* max_steps follows from the budgets; a file may state it only if it agrees */
    const cJSON *ms = sl_cfg_member(train_obj, "max_steps");
    if (ms && cJSON_IsNumber(ms) && (int)ms->valuedouble != total && total > 0)
        return sl_cfg_err(c, "training.max_steps",
                          "%d, but the stages' token budgets add up to %d steps (leave "
                          "max_steps out: with stages it follows from their tokens)",
                          (int)ms->valuedouble, total);
    cfg->train.max_steps = total;
    return 0;
}

void sl_config_stages_emit(cJSON *train_obj, const sl_config *cfg) {
    cJSON_DeleteItemFromObjectCaseSensitive(train_obj, "stages");
    if (!cfg->stages_given) return;
    cJSON_DeleteItemFromObjectCaseSensitive(train_obj, "max_steps"); /* follows from the stages */
    cJSON *arr = cJSON_AddArrayToObject(train_obj, "stages");
    const sl_config_section *ts = section("training"), *ms = section("model"),
                            *ds = section("data");
    for (int i = 0; i < cfg->n_stages; i++) {
        const sl_stage *st = &cfg->stages[i];
        /* every key of each table, then only the given ones are moved into the stage */
        cJSON *all = cJSON_CreateObject(), *out = cJSON_CreateObject(), *data = NULL;
        sl_cfg_emit(all, stage_own_keys, SL_NKEYS(stage_own_keys), st);
        sl_cfg_emit(all, ts->keys, *ts->nkeys, &st->train);
        sl_cfg_emit(all, ms->keys, *ms->nkeys, &st->model);
        cJSON *dall = cJSON_CreateObject();
        sl_cfg_emit(dall, ds->keys, *ds->nkeys, &st->data);
        for (int k = 0; k < N_STAGE_KEYS; k++) {
            if (!(st->given & 1u << k)) continue;
            if (k_stage_keys[k].to == TO_DATA) {
                data = cJSON_AddObjectToObject(out, "data");
                for (int j = 0; j < 2; j++) {
                    cJSON *item =
                        cJSON_DetachItemFromObjectCaseSensitive(dall, k_stage_data_keys[j]);
                    if (st->given & 1u << (N_STAGE_KEYS + j) && item)
                        cJSON_AddItemToObject(data, k_stage_data_keys[j], item);
                    else
                        cJSON_Delete(item);
                }
                continue;
            }
            cJSON *item = cJSON_DetachItemFromObjectCaseSensitive(all, k_stage_keys[k].key);
            if (item) cJSON_AddItemToObject(out, k_stage_keys[k].key, item);
        }
        cJSON_Delete(all);
        cJSON_Delete(dall);
        cJSON_AddItemToArray(arr, out);
    }
}

int sl_stage_supported_positions(const sl_model_config *m) {
    if (m->rope_scaling.type == SL_ROPE_YARN) {
        const double yarn =
            m->rope_scaling.factor * m->rope_scaling.original_max_position_embeddings;
        return yarn < m->max_position_embeddings ? (int)yarn : m->max_position_embeddings;
    }
    return m->max_position_embeddings;
}

/* Appends ` (stage "name")` to a validation message. */
static int name_stage(const sl_cfg_vctx *v, const sl_stage *st) {
    const size_t n = strlen(v->err);
    if (n < v->errlen) snprintf(v->err + n, v->errlen - n, " (stage \"%s\")", st->name);
    return -1;
}

static int validate_stage(const sl_cfg_vctx *v, const sl_config *cfg, int i) {
    const sl_stage *st = &cfg->stages[i];
    const sl_train_config *t = &st->train;
    const sl_model_config *m = &st->model;
    if (!sl_cfg_terminated(st->name, sizeof st->name))
        return sl_cfg_verr(v, "name", "longer than %zu characters", sizeof st->name - 1);
    if (!st->name[0]) return sl_cfg_verr(v, "name", "must not be empty");
    for (const char *p = st->name; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '-' || *p == '_' || *p == '.'))
            return sl_cfg_verr(v, "name", "\"%s\": use letters, digits, '-', '_' and '.' only",
                               st->name);
    for (int j = 0; j < i; j++)
        if (strcmp(cfg->stages[j].name, st->name) == 0)
            return sl_cfg_verr(v, "name", "\"%s\" is also the name of stages[%d]", st->name, j);
    if (st->tokens < 0)
        return name_stage(v, st),
               sl_cfg_verr(v, "tokens", "must be >= 0, got %lld", (long long)st->tokens);
    /* the RoPE settings first: they decide which lengths make sense */
    if (sl_model_config_validate(v, m)) return name_stage(v, st);
    if (sl_cfg_check_range(v, "seq_len", t->seq_len, 1, 1 << 24)) return name_stage(v, st);
    const int supported = sl_stage_supported_positions(m);
    if (t->seq_len > supported) {
        if (m->rope_scaling.type == SL_ROPE_YARN)
            sl_cfg_verr(v, "seq_len",
                        "%d exceeds what the stage's RoPE settings support: %d positions, the "
                        "smaller of rope_scaling factor %g x original_max_position_embeddings %d "
                        "and max_position_embeddings %d (raise the one that limits it: a larger "
                        "factor, or the stage's max_position_embeddings)",
                        t->seq_len, supported, m->rope_scaling.factor,
                        m->rope_scaling.original_max_position_embeddings,
                        m->max_position_embeddings);
        else
            sl_cfg_verr(v, "seq_len",
                        "%d exceeds what the stage's RoPE settings support: "
                        "max_position_embeddings = %d (set the stage's max_position_embeddings "
                        "to at least %d, usually with a larger rope_theta to train at that "
                        "length; or extend the context with rope_scaling yarn, which covers "
                        "factor x original_max_position_embeddings)",
                        t->seq_len, supported, t->seq_len);
        return name_stage(v, st);
    }
    if (st->tokens == 0) {
        if (!st->data.eval_path[0])
            return name_stage(v, st),
                   sl_cfg_verr(v, "tokens",
                               "0 makes an evaluation-only stage, which needs an eval set "
                               "(data.eval, in the stage or the data section)");
        if (sl_cfg_check_range(v, "eval_tokens", t->eval_tokens, 1, 1 << 30))
            return name_stage(v, st);
        return 0;
    }
    if (t->global_batch_tokens < 1)
        return name_stage(v, st), sl_cfg_verr(v, "global_batch_tokens", "must be positive");
    if (st->steps < 1)
        return name_stage(v, st),
               sl_cfg_verr(v, "tokens",
                           "%lld is less than one global batch (global_batch_tokens = %lld)",
                           (long long)st->tokens, (long long)t->global_batch_tokens);
    if (t->warmup_steps > st->steps)
        return name_stage(v, st),
               sl_cfg_verr(v, "warmup_steps",
                           "%d exceeds the stage's %d steps (tokens %lld / global_batch_tokens "
                           "%lld): the schedule does not fit",
                           t->warmup_steps, st->steps, (long long)st->tokens,
                           (long long)t->global_batch_tokens);
    if (sl_config_validate_train(v, t, m)) return name_stage(v, st);
    return 0;
}

int sl_config_stages_validate(const sl_cfg_vctx *parent, const sl_config *cfg) {
    if (!cfg->stages_given) return 0;
    if (cfg->n_stages < 1 || cfg->n_stages > SL_MAX_STAGES)
        return sl_cfg_verr(parent, "stages", "%d stages, expected 1 to %d", cfg->n_stages,
                           SL_MAX_STAGES);
    int trained = 0;
    for (int i = 0; i < cfg->n_stages; i++) {
        char prefix[64];
        snprintf(prefix, sizeof prefix, "training.stages[%d]", i);
        sl_cfg_vctx v = *parent;
        v.prefix = prefix;
        if (validate_stage(&v, cfg, i)) return -1;
        trained += cfg->stages[i].steps;
    }
    if (trained < 1)
        return sl_cfg_verr(parent, "stages", "no stage trains (every stage has tokens = 0)");
    return 0;
}

void sl_config_stage_at(const sl_config *cfg, int i, sl_stage *out) {
    if (cfg->stages_given) {
        *out = cfg->stages[i];
        return;
    }
    /* the implicit single stage, from the sections as they are now */
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "main");
    out->train = cfg->train;
    out->model = cfg->model;
    out->data = cfg->data;
    out->steps = cfg->train.max_steps;
    out->tokens = (int64_t)cfg->train.max_steps * cfg->train.global_batch_tokens;
}

void sl_config_stage_data_key(const sl_config *cfg, int i, bool eval, char *buf, size_t n) {
    const char *key = k_stage_data_keys[eval ? 1 : 0];
    for (int j = cfg->stages_given ? i : -1; j >= 0; j--)
        if (cfg->stages[j].given & 1u << (N_STAGE_KEYS + (eval ? 1 : 0))) {
            snprintf(buf, n, "training.stages[%d] (\"%s\"): data.%s", j, cfg->stages[j].name, key);
            return;
        }
    snprintf(buf, n, "data.%s", key);
}

int sl_config_stage_count(const sl_config *cfg) {
    return cfg->stages_given ? cfg->n_stages : 1;
}
