/*
 * trainer/config.c - the run configuration as a whole: defaults, parsing a file or string
 * section by section (trainer/config_sections.c, model/config.c), --set overrides and
 * serialization back to JSON. Every message is "<name>: <key path>: <reason>".
 */
#include "trainer/config.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fsutil.h"
#include "core/log.h"
#include "trainer/config_sections.h"

/* ---- defaults ---------------------------------------------------------------------------- */

void sl_config_defaults(sl_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    sl_model_config_defaults(&cfg->model);

    sl_train_config *t = &cfg->train;
    t->seq_len = 4096;
    t->micro_batch_size = 1;
    t->global_batch_tokens = 4096; /* when absent from a file: seq_len * micro_batch_size */
    t->max_steps = 1000;
    t->lr = 3e-4;
    t->min_lr = 3e-5;
    t->warmup_steps = 100;
    t->schedule = SL_LR_COSINE;
    t->decay_fraction = 0.2;
    t->beta1 = 0.9;
    t->beta2 = 0.95;
    t->eps = 1e-8;
    t->weight_decay = 0.1;
    t->grad_clip = 1.0;
    t->seed = 1234;
    t->eval_every = 500;
    t->eval_tokens = 262144;
    t->log_every = 10;
    t->save_every = 0;
    snprintf(t->out_dir, sizeof t->out_dir, "runs/default");
    SL_CHECK(sl_config_derive_metrics_file(t) == 0, "default metrics_file");

    cfg->data.n_train = 0;
    cfg->data.seed = 1234;
    cfg->data.shuffle_window = SL_SHUFFLE_DEFAULT;
    cfg->data.prefetch = 0;

    cfg->parallel.expert_parallel = 1;
    cfg->parallel.zero1 = false;
    cfg->parallel.capacity_factor = 0.0;
    snprintf(cfg->parallel.drop_policy, sizeof cfg->parallel.drop_policy, "probs");
    cfg->parallel.bucket_mb = 64;
    snprintf(cfg->parallel.transport, sizeof cfg->parallel.transport, "auto");
    cfg->parallel.overlap_moe = true;

    snprintf(cfg->backend.name, sizeof cfg->backend.name, "cpu");
    cfg->backend.threads = 0;
    cfg->backend.deterministic = true;
    snprintf(cfg->attention.kernel, sizeof cfg->attention.kernel, "auto");
    cfg->train.keep_last = 3;
    cfg->train.keep_every = 0;
    snprintf(cfg->train.precision, sizeof cfg->train.precision, "auto");
    snprintf(cfg->train.recompute, sizeof cfg->train.recompute, "none");
    snprintf(cfg->train.defer_expert_wgrad, sizeof cfg->train.defer_expert_wgrad, "auto");
    cfg->train.expert_wgrad_group = 0; /* auto: sl_wgrad_group_decide */
    snprintf(cfg->train.park_expert_rows, sizeof cfg->train.park_expert_rows, "auto");
    cfg->train.sample_tokens = 64;
    snprintf(cfg->train.export_format, sizeof cfg->train.export_format, "qwen3_moe");
}
/* ---- parse ------------------------------------------------------------------------------- */

/* Applies a parsed tree on top of the defaults and validates; writes cfg only on success. */
static int parse_tree(const cJSON *root, const char *name, const char *path, sl_config *cfg,
                      char *err, size_t errlen) {
    sl_cfg_ctx c = {name, err, errlen, false};
    char d[96];
    if (!cJSON_IsObject(root))
        return sl_cfg_err(
            &c, "",
            "the top level must be an object with the sections model, training, data, "
            "parallel, backend and attention; got %s",
            sl_cfg_describe(root, d, 96));
    sl_config *t = sl_xmalloc(sizeof *t);
    sl_config_defaults(t);
    snprintf(t->path, sizeof t->path, "%s", path);
    int rc = -1;
    const cJSON *model = NULL, *train = NULL;
    for (const cJSON *it = root->child; it; it = it->next) {
        for (const cJSON *p = root->child; p != it; p = p->next)
            if (strcmp(p->string, it->string) == 0) {
                sl_cfg_err(&c, it->string, "duplicate section");
                goto done;
            }
        const sl_config_section *s = NULL;
        for (int i = 0; i < sl_config_nsections; i++)
            if (strcmp(sl_config_sections[i].name, it->string) == 0) s = &sl_config_sections[i];
        if (!s) {
            sl_cfg_err(&c, it->string,
                       "unknown section (expected model, training, data, parallel, backend or "
                       "attention)");
            goto done;
        }
        if (sl_cfg_apply(&c, it, s->name, s->keys, *s->nkeys, (char *)t + s->off)) goto done;
        if (s->off == offsetof(sl_config, model)) model = it;
        if (s->off == offsetof(sl_config, train)) train = it;
    }
    if (!model) {
        sl_cfg_err(&c, "model", "required section missing");
        goto done;
    }
    if (sl_model_config_finish(&c, model, "model", &t->model)) goto done;
    if (sl_config_train_finish(&c, train, &t->train)) goto done;
    if (sl_config_stages_parse(&c, train, t)) goto done;
    if (sl_config_validate_named(t, name, err, errlen)) goto done;
    *cfg = *t;
    rc = 0;
done:
    free(t);
    return rc;
}

int sl_config_parse(const char *json, const char *name, sl_config *cfg, char *err, size_t errlen) {
    if (!name) name = "<config>";
    cJSON *root = sl_cfg_parse_json(json, name, err, errlen);
    if (!root) return -1;
    int rc = parse_tree(root, name, name, cfg, err, errlen);
    cJSON_Delete(root);
    return rc;
}

int sl_config_load(const char *path, sl_config *cfg, char *err, size_t errlen) {
    size_t len = 0;
    char *text = sl_read_file(path, &len, err, errlen);
    if (!text) return -1;
    if (strlen(text) != len) {
        free(text);
        return sl_cfg_message(err, errlen, path, "", "contains a NUL byte");
    }
    int rc = sl_config_parse(text, path, cfg, err, errlen);
    free(text);
    return rc;
}
static cJSON *config_tree(const sl_config *cfg) {
    cJSON *root = cJSON_CreateObject();
    SL_CHECK(root != NULL, "out of memory");
    for (int i = 0; i < sl_config_nsections; i++) {
        const sl_config_section *s = &sl_config_sections[i];
        sl_cfg_emit(cJSON_AddObjectToObject(root, s->name), s->keys, *s->nkeys,
                    (const char *)cfg + s->off);
    }
    /* metrics_file is left out when it is the default, so that a later out_dir override
     * moves it too. */
    sl_config_stages_emit(cJSON_GetObjectItemCaseSensitive(root, "training"), cfg);
    sl_train_config derived = cfg->train;
    if (sl_config_derive_metrics_file(&derived) == 0 &&
        strcmp(derived.metrics_file, cfg->train.metrics_file) == 0)
        cJSON_DeleteItemFromObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "training"),
                                                "metrics_file");
    return root;
}

char *sl_config_to_json(const sl_config *cfg) {
    return sl_cfg_print(config_tree(cfg));
}

/* ---- overrides --------------------------------------------------------------------------- */

static char *trim(char *s) {
    while (*s == ' ' || *s == '\t') s++;
    size_t n = strlen(s);
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\n')) s[--n] = '\0';
    return s;
}

/* The key of an assignment "key.path=value" (trimmed, malloc'ed), or NULL when it has no '='. */
static char *set_key(const char *assignment) {
    const char *eq = assignment ? strchr(assignment, '=') : NULL;
    if (!eq) return NULL;
    char *copy = sl_xstrdup(assignment);
    copy[eq - assignment] = '\0';
    char *key = trim(copy);
    memmove(copy, key, strlen(key) + 1);
    return copy;
}

int sl_config_set_check(const char *assignment, char *err, size_t errlen) {
    const char *a = assignment ? assignment : "";
    char *key = set_key(a);
    int rc = 0;
    if (!key)
        rc = sl_fail(err, errlen, "--set %s: not of the form section.key=value (no '=')", a);
    else if (!key[0] || key[0] == '.' || key[strlen(key) - 1] == '.' || strstr(key, ".."))
        rc =
            sl_fail(err, errlen, "--set %s: the key \"%s\" is not a path like section.key", a, key);
    free(key);
    return rc;
}

bool sl_config_set_covers(const char *const *assignments, int n, const char *key) {
    const size_t len = strlen(key);
    for (int i = 0; i < n; i++) {
        char *k = set_key(assignments[i]);
        const size_t kl = k ? strlen(k) : 0;
        /* the key itself, or an object that holds it ("data" for "data.train") */
        const bool covers = k && kl > 0 && kl <= len && strncmp(key, k, kl) == 0 &&
                            (key[kl] == '\0' || key[kl] == '.');
        free(k);
        if (covers) return true;
    }
    return false;
}

/* Applies one well-formed "key.path=value" (sl_config_set_check) to the tree; on error writes
 * the message, named `name` ("<file> (--set)"), into err. */
static int apply_set(cJSON *root, const char *assignment, const char *name, char *err,
                     size_t errlen) {
    const char *eq = strchr(assignment, '=');
    char *copy = sl_xstrdup(assignment);
    copy[eq - assignment] = '\0';
    char *key = trim(copy), *value = trim(copy + (eq - assignment) + 1);
    int rc = -1;
    cJSON *val = NULL;
    /* Walk to the parent object of the last segment, creating missing objects (the parse
     * then reports them as unknown keys with their full path). */
    cJSON *parent = root;
    char *seg = key, *dot;
    while ((dot = strchr(seg, '.')) != NULL) {
        *dot = '\0';
        cJSON *next = cJSON_GetObjectItemCaseSensitive(parent, seg);
        if (!next) next = cJSON_AddObjectToObject(parent, seg);
        *dot = '.';
        if (!cJSON_IsObject(next)) {
            char prefix[SL_CFG_KEYPATH_MAX];
            snprintf(prefix, sizeof prefix, "%.*s", (int)(dot - key), key);
            sl_cfg_message(err, errlen, name, prefix,
                           "is not an object, so %s cannot be set (set %s itself instead)", key,
                           prefix);
            goto done;
        }
        parent = next;
        seg = dot + 1;
    }
    cJSON *old = cJSON_GetObjectItemCaseSensitive(parent, seg);
    val = cJSON_ParseWithOpts(value, NULL, 1);
    /* A value that is not JSON is a bare string; so is a scalar given for a string key. */
    if (!val || (cJSON_IsString(old) && !cJSON_IsString(val) && !cJSON_IsObject(val) &&
                 !cJSON_IsArray(val))) {
        cJSON_Delete(val);
        val = cJSON_CreateString(value);
    }
    SL_CHECK(val != NULL, "out of memory");
    if (old)
        cJSON_ReplaceItemInObjectCaseSensitive(parent, seg, val); /* also names val */
    else
        cJSON_AddItemToObject(parent, seg, val);
    val = NULL;
    rc = 0;
done:
    cJSON_Delete(val);
    free(copy);
    return rc;
}

int sl_config_apply_sets(sl_config *cfg, const char *const *assignments, int n, char *err,
                         size_t errlen) {
    /* a malformed override first, whatever its place: the command line's mistake, not the
     * config's */
    for (int i = 0; i < n; i++)
        if (sl_config_set_check(assignments[i], err, errlen) != 0) return -1;
    const char *file =
        sl_cfg_terminated(cfg->path, sizeof cfg->path) && cfg->path[0] ? cfg->path : "<config>";
    char name[SL_PATH_MAX + 16];
    snprintf(name, sizeof name, "%s (--set)", file);
    /* Every override edits one tree; the tree is parsed and validated once at the end, so
     * validation sees the final values whatever the order of the overrides. */
    cJSON *root = config_tree(cfg);
    int rc = 0;
    for (int i = 0; rc == 0 && i < n; i++) rc = apply_set(root, assignments[i], name, err, errlen);
    if (rc == 0) {
        char path[SL_PATH_MAX];
        snprintf(path, sizeof path, "%s",
                 sl_cfg_terminated(cfg->path, sizeof cfg->path) ? cfg->path : "");
        rc = parse_tree(root, name, path, cfg, err, errlen);
    }
    cJSON_Delete(root);
    return rc;
}

int sl_config_set(sl_config *cfg, const char *assignment, char *err, size_t errlen) {
    return sl_config_apply_sets(cfg, &assignment, 1, err, errlen);
}
