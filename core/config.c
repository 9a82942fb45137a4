/*
 * core/config.c - the run configuration: JSON parsing (cJSON), strict validation, overrides and
 * the Hugging Face config.json of the model section.
 *
 * Parsing is table-driven: each section has a table of keys (name, kind, field offset). A key
 * not in the table, a duplicate key or a value of the wrong JSON type is an error naming the
 * key path; range and cross-field checks live in the validate_* functions, which load, parse,
 * set and from_hf_json all run. Every message is "<name>: <key path>: <reason>".
 */
#include "core/config.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"

#define EXACT_INT_MAX 9007199254740992.0 /* 2^53: larger integers are not exact in a double */
#define KEYPATH_MAX   384

/* Implementation limits (they keep every derived width inside a 32-bit int). */
#define LIM_VOCAB       (1 << 24)
#define LIM_HIDDEN      (1 << 16)
#define LIM_HEADS       1024
#define LIM_HEAD_DIM    1024
#define LIM_FFN         (1 << 20)
#define LIM_EXPERTS     65536
#define LIM_POSITIONS   (1 << 24)
#define LIM_MICRO_BATCH (1 << 20)
#define LIM_PREFETCH    1024
#define LIM_THREADS     4096

/* ---- messages --------------------------------------------------------------------------- */

static void vmessage(char *err, size_t errlen, const char *name, const char *path, const char *fmt,
                     va_list ap) {
    if (!err || errlen == 0) return;
    int n = (path && path[0]) ? snprintf(err, errlen, "%s: %s: ", name, path)
                              : snprintf(err, errlen, "%s: ", name);
    if (n < 0) {
        err[0] = '\0';
        return;
    }
    if ((size_t)n < errlen) vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
}

static int message(char *err, size_t errlen, const char *name, const char *path, const char *fmt,
                   ...) SL_PRINTF(5, 6);
static int message(char *err, size_t errlen, const char *name, const char *path, const char *fmt,
                   ...) {
    va_list ap;
    va_start(ap, fmt);
    vmessage(err, errlen, name, path, fmt, ap);
    va_end(ap);
    return -1;
}

/* out = prefix.key (or key alone); an over-long path is cut and ends in "...". */
static void join(char *out, size_t n, const char *prefix, const char *key) {
    int w = (prefix && prefix[0]) ? snprintf(out, n, "%s.%s", prefix, key)
                                  : snprintf(out, n, "%s", key);
    if (w >= 0 && (size_t)w >= n && n > 4) memcpy(out + n - 4, "...", 4);
}

/* A short description of a JSON value for "expected X, got Y" messages. */
static const char *describe(const cJSON *v, char *buf, size_t n) {
    if (cJSON_IsString(v)) {
        const char *s = v->valuestring;
        snprintf(buf, n, "the string \"%.40s%s\"", s, strlen(s) > 40 ? "..." : "");
    } else if (cJSON_IsNumber(v)) {
        snprintf(buf, n, "%.15g", v->valuedouble);
    } else if (cJSON_IsTrue(v)) {
        snprintf(buf, n, "true");
    } else if (cJSON_IsFalse(v)) {
        snprintf(buf, n, "false");
    } else if (cJSON_IsNull(v)) {
        snprintf(buf, n, "null");
    } else if (cJSON_IsArray(v)) {
        snprintf(buf, n, "an array");
    } else {
        snprintf(buf, n, "an object");
    }
    return buf;
}

/* Edit distance (for "did you mean" hints on unknown keys); capped inputs. */
static int edit_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > 63 || lb > 63) return 99;
    int row[64];
    for (size_t j = 0; j <= lb; j++) row[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int up = row[j];
            int best = diag + (a[i - 1] != b[j - 1]);
            if (row[j] + 1 < best) best = row[j] + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

/* ---- parsing context and typed getters --------------------------------------------------- */

typedef struct {
    const char *name; /* file name for messages */
    char *err;
    size_t errlen;
    bool hf; /* a Hugging Face config.json: unknown keys are ignored */
} pctx;

static int perr(const pctx *c, const char *path, const char *fmt, ...) SL_PRINTF(3, 4);
static int perr(const pctx *c, const char *path, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vmessage(c->err, c->errlen, c->name, path, fmt, ap);
    va_end(ap);
    return -1;
}

static int get_integer(const pctx *c, const cJSON *v, const char *path, double lo, double hi,
                       double *out) {
    char d[96];
    if (!cJSON_IsNumber(v)) return perr(c, path, "expected an integer, got %s", describe(v, d, 96));
    double x = v->valuedouble;
    if (!isfinite(x) || x != floor(x))
        return perr(c, path, "expected an integer, got %s", describe(v, d, 96));
    if (x < lo || x > hi) return perr(c, path, "%.15g is out of range [%.15g, %.15g]", x, lo, hi);
    *out = x;
    return 0;
}

static int get_int(const pctx *c, const cJSON *v, const char *path, int *out) {
    double x = 0;
    if (get_integer(c, v, path, INT_MIN, INT_MAX, &x)) return -1;
    *out = (int)x;
    return 0;
}

static int get_double(const pctx *c, const cJSON *v, const char *path, double *out) {
    char d[96];
    if (!cJSON_IsNumber(v)) return perr(c, path, "expected a number, got %s", describe(v, d, 96));
    if (!isfinite(v->valuedouble)) return perr(c, path, "expected a finite number");
    *out = v->valuedouble;
    return 0;
}

static int get_bool(const pctx *c, const cJSON *v, const char *path, bool *out) {
    char d[96];
    if (!cJSON_IsBool(v))
        return perr(c, path, "expected true or false, got %s", describe(v, d, 96));
    *out = cJSON_IsTrue(v);
    return 0;
}

static int get_string(const pctx *c, const cJSON *v, const char *path, char *buf, size_t size) {
    char d[96];
    if (!cJSON_IsString(v)) return perr(c, path, "expected a string, got %s", describe(v, d, 96));
    size_t len = strlen(v->valuestring);
    if (len >= size)
        return perr(c, path, "string too long (%zu bytes, at most %zu)", len, size - 1);
    memcpy(buf, v->valuestring, len + 1);
    return 0;
}

/* ---- key tables -------------------------------------------------------------------------- */

typedef enum { K_INT, K_I64, K_U64, K_DBL, K_BOOL, K_STR, K_FN } key_kind;
typedef int (*key_fn)(const pctx *c, const cJSON *v, const char *path, void *sec);
typedef struct {
    const char *key;
    key_kind kind;
    size_t off, size;
    key_fn fn;
} keydef;

#define KD(S, name, kind, field)                                                                   \
    { name, kind, offsetof(S, field), sizeof(((S *)0)->field), NULL }
#define KF(name, fn)                                                                               \
    { name, K_FN, 0, 0, fn }
#define NKEYS(t) ((int)(sizeof(t) / sizeof((t)[0])))

static const keydef *find_key(const keydef *defs, int n, const char *key) {
    for (int i = 0; i < n; i++)
        if (strcmp(defs[i].key, key) == 0) return &defs[i];
    return NULL;
}

static int unknown_key(const pctx *c, const char *path, const char *key, const keydef *defs,
                       int n) {
    const char *best = NULL;
    int bestd = 3;
    for (int i = 0; i < n; i++) {
        int d = edit_distance(key, defs[i].key);
        if (d < bestd) bestd = d, best = defs[i].key;
    }
    if (best) return perr(c, path, "unknown key (did you mean \"%s\"?)", best);
    return perr(c, path, "unknown key (docs/config.md lists the valid keys)");
}

/* Applies every member of `obj` to the section struct `sec` through the key table. */
static int apply_object(const pctx *c, const cJSON *obj, const char *prefix, const keydef *defs,
                        int n, void *sec) {
    char path[KEYPATH_MAX], d[96];
    if (!cJSON_IsObject(obj))
        return perr(c, prefix, "expected an object, got %s", describe(obj, d, 96));
    for (const cJSON *it = obj->child; it; it = it->next) {
        join(path, sizeof path, prefix, it->string);
        for (const cJSON *p = obj->child; p != it; p = p->next)
            if (strcmp(p->string, it->string) == 0) return perr(c, path, "duplicate key");
        const keydef *k = find_key(defs, n, it->string);
        if (!k) {
            if (c->hf) continue;
            return unknown_key(c, path, it->string, defs, n);
        }
        char *f = (char *)sec + k->off;
        double x = 0;
        switch (k->kind) {
        case K_INT:
            if (get_int(c, it, path, (int *)(void *)f)) return -1;
            break;
        case K_I64:
            if (get_integer(c, it, path, -EXACT_INT_MAX, EXACT_INT_MAX, &x)) return -1;
            *(int64_t *)(void *)f = (int64_t)x;
            break;
        case K_U64:
            if (get_integer(c, it, path, 0, EXACT_INT_MAX, &x)) return -1;
            *(uint64_t *)(void *)f = (uint64_t)x;
            break;
        case K_DBL:
            if (get_double(c, it, path, (double *)(void *)f)) return -1;
            break;
        case K_BOOL:
            if (get_bool(c, it, path, (bool *)(void *)f)) return -1;
            break;
        case K_STR:
            if (get_string(c, it, path, f, k->size)) return -1;
            break;
        case K_FN:
            if (k->fn(c, it, path, sec)) return -1;
            break;
        }
    }
    return 0;
}

static const cJSON *member(const cJSON *obj, const char *key) {
    return obj ? cJSON_GetObjectItemCaseSensitive(obj, key) : NULL;
}

/* ---- enum names -------------------------------------------------------------------------- */

static const char *gate_name(sl_gate_mode g) {
    switch (g) {
    case SL_GATE_NONE:
        return "none";
    case SL_GATE_HEADWISE:
        return "headwise";
    case SL_GATE_ELEMENTWISE:
        return "elementwise";
    }
    return "?";
}

static const char *schedule_name(sl_lr_schedule s) {
    switch (s) {
    case SL_LR_COSINE:
        return "cosine";
    case SL_LR_WSD:
        return "wsd";
    case SL_LR_CONSTANT:
        return "constant";
    }
    return "?";
}

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

static int fn_rope_type(const pctx *c, const cJSON *v, const char *path, void *sec) {
    sl_rope_scaling *r = sec;
    char s[32], d[96];
    if (!cJSON_IsString(v)) return perr(c, path, "expected a string, got %s", describe(v, d, 96));
    if (get_string(c, v, path, s, sizeof s) == 0) {
        if (strcmp(s, "yarn") == 0) {
            r->type = SL_ROPE_YARN;
            return 0;
        }
        if (strcmp(s, "default") == 0) {
            r->type = SL_ROPE_DEFAULT;
            return 0;
        }
    }
    return perr(c, path, "unsupported rope type %s (expected \"yarn\" or \"default\")",
                describe(v, d, 96));
}

static const keydef rope_keys[] = {
    KF("rope_type", fn_rope_type),
    KF("type", fn_rope_type),
    KD(sl_rope_scaling, "factor", K_DBL, factor),
    KD(sl_rope_scaling, "original_max_position_embeddings", K_INT,
       original_max_position_embeddings),
    KD(sl_rope_scaling, "beta_fast", K_DBL, beta_fast),
    KD(sl_rope_scaling, "beta_slow", K_DBL, beta_slow),
    KD(sl_rope_scaling, "attention_factor", K_DBL, attention_factor),
};

static int fn_rope_scaling(const pctx *c, const cJSON *v, const char *path, void *sec) {
    sl_model_config *m = sec;
    sl_rope_scaling r = rope_default();
    char sub[KEYPATH_MAX], d[96];
    if (cJSON_IsNull(v)) {
        m->rope_scaling = r;
        return 0;
    }
    if (!cJSON_IsObject(v))
        return perr(c, path, "expected null or an object, got %s", describe(v, d, 96));
    const cJSON *t1 = member(v, "rope_type"), *t2 = member(v, "type");
    if (!t1 && !t2) {
        join(sub, sizeof sub, path, "rope_type");
        return perr(c, sub, "required key missing (\"yarn\" or \"default\")");
    }
    if (apply_object(c, v, path, rope_keys, NKEYS(rope_keys), &r)) return -1;
    if (t1 && t2 && strcmp(t1->valuestring, t2->valuestring) != 0) {
        join(sub, sizeof sub, path, "type");
        return perr(c, sub, "\"%s\" disagrees with rope_type \"%s\"", t2->valuestring,
                    t1->valuestring);
    }
    if (r.type == SL_ROPE_DEFAULT) {
        if (!c->hf)
            for (const cJSON *it = v->child; it; it = it->next)
                if (strcmp(it->string, "rope_type") != 0 && strcmp(it->string, "type") != 0) {
                    join(sub, sizeof sub, path, it->string);
                    return perr(c, sub, "only used with rope_type \"yarn\"");
                }
        r = rope_default();
    } else {
        static const char *const required[] = {"factor", "original_max_position_embeddings"};
        for (int i = 0; i < 2; i++)
            if (!member(v, required[i])) {
                join(sub, sizeof sub, path, required[i]);
                return perr(c, sub, "required key missing for rope_type \"yarn\"");
            }
        if (member(v, "attention_factor") && !(r.attention_factor > 0)) {
            join(sub, sizeof sub, path, "attention_factor");
            return perr(c, sub, "must be > 0, got %g (omit it for the default 0.1 ln(factor) + 1)",
                        r.attention_factor);
        }
    }
    m->rope_scaling = r;
    return 0;
}

static int fn_mlp_only_layers(const pctx *c, const cJSON *v, const char *path, void *sec) {
    sl_model_config *m = sec;
    bool dense[SL_MAX_LAYERS];
    char sub[KEYPATH_MAX], d[96];
    memset(dense, 0, sizeof dense);
    if (!cJSON_IsArray(v))
        return perr(c, path, "expected an array of layer indices, got %s", describe(v, d, 96));
    int i = 0;
    for (const cJSON *it = v->child; it; it = it->next, i++) {
        snprintf(sub, sizeof sub, "%s[%d]", path, i);
        int l;
        if (get_int(c, it, sub, &l)) return -1;
        if (l < 0 || l >= SL_MAX_LAYERS)
            return perr(c, sub, "layer %d is out of range [0, %d)", l, SL_MAX_LAYERS);
        if (dense[l]) return perr(c, sub, "layer %d is listed twice", l);
        dense[l] = true;
    }
    memcpy(m->dense_layer, dense, sizeof dense);
    return 0;
}

static int fn_gate(const pctx *c, const cJSON *v, const char *path, void *sec) {
    sl_model_config *m = sec;
    char d[96];
    if (cJSON_IsString(v)) {
        const sl_gate_mode modes[] = {SL_GATE_ELEMENTWISE, SL_GATE_HEADWISE, SL_GATE_NONE};
        for (int i = 0; i < 3; i++)
            if (strcmp(v->valuestring, gate_name(modes[i])) == 0) {
                m->attn_output_gate = modes[i];
                return 0;
            }
    }
    return perr(c, path, "expected \"elementwise\", \"headwise\" or \"none\", got %s",
                describe(v, d, 96));
}

/* Informational Hugging Face keys: checked, then ignored. */
static int fn_info_string(const pctx *c, const cJSON *v, const char *path, void *sec) {
    char d[96];
    (void)sec;
    if (!cJSON_IsString(v)) return perr(c, path, "expected a string, got %s", describe(v, d, 96));
    return 0;
}

static int fn_architectures(const pctx *c, const cJSON *v, const char *path, void *sec) {
    char sub[KEYPATH_MAX], d[96];
    (void)sec;
    if (!cJSON_IsArray(v))
        return perr(c, path, "expected an array of strings, got %s", describe(v, d, 96));
    int i = 0;
    for (const cJSON *it = v->child; it; it = it->next, i++)
        if (!cJSON_IsString(it)) {
            snprintf(sub, sizeof sub, "%s[%d]", path, i);
            return perr(c, sub, "expected a string, got %s", describe(it, d, 96));
        }
    return 0;
}

static int fn_hidden_act(const pctx *c, const cJSON *v, const char *path, void *sec) {
    char d[96];
    (void)sec;
    if (!cJSON_IsString(v) || strcmp(v->valuestring, "silu") != 0)
        return perr(c, path, "only \"silu\" is supported (SwiGLU), got %s", describe(v, d, 96));
    return 0;
}

static int fn_attention_bias(const pctx *c, const cJSON *v, const char *path, void *sec) {
    char d[96];
    (void)sec;
    if (!cJSON_IsFalse(v))
        return perr(c, path, "only false is supported (sluice has no biases), got %s",
                    describe(v, d, 96));
    return 0;
}

/* decoder_sparse_step: checked here, folded into dense_layer by model_finish. */
static int fn_sparse_step(const pctx *c, const cJSON *v, const char *path, void *sec) {
    double x = 0;
    (void)sec;
    if (get_integer(c, v, path, INT_MIN, INT_MAX, &x)) return -1;
    if (x < 1) return perr(c, path, "must be >= 1, got %.0f", x);
    return 0;
}

#define KM(name, kind) KD(sl_model_config, #name, kind, name)
static const keydef model_keys[] = {
    KM(vocab_size, K_INT),
    KM(hidden_size, K_INT),
    KM(num_hidden_layers, K_INT),
    KM(num_attention_heads, K_INT),
    KM(num_key_value_heads, K_INT),
    KM(head_dim, K_INT),
    KM(rms_norm_eps, K_DBL),
    KM(rope_theta, K_DBL),
    KM(partial_rotary_factor, K_DBL),
    KF("rope_scaling", fn_rope_scaling),
    KM(max_position_embeddings, K_INT),
    KM(num_experts, K_INT),
    KM(num_experts_per_tok, K_INT),
    KM(moe_intermediate_size, K_INT),
    KM(shared_expert_intermediate_size, K_INT),
    KM(intermediate_size, K_INT),
    KM(norm_topk_prob, K_BOOL),
    KM(router_aux_loss_coef, K_DBL),
    KM(router_z_loss_coef, K_DBL),
    KF("mlp_only_layers", fn_mlp_only_layers),
    KM(tie_word_embeddings, K_BOOL),
    KM(initializer_range, K_DBL),
    KF("attn_output_gate", fn_gate),
    KF("model_type", fn_info_string),
    KF("architectures", fn_architectures),
    KF("torch_dtype", fn_info_string),
    KF("hidden_act", fn_hidden_act),
    KF("attention_bias", fn_attention_bias),
    KF("decoder_sparse_step", fn_sparse_step),
};

static void model_defaults(sl_model_config *m) {
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
static int model_finish(const pctx *c, const cJSON *obj, const char *prefix, sl_model_config *m) {
    char path[KEYPATH_MAX];
    static const char *const required[] = {"vocab_size", "hidden_size", "num_hidden_layers",
                                           "num_attention_heads"};
    for (int i = 0; i < 4; i++)
        if (!member(obj, required[i])) {
            join(path, sizeof path, prefix, required[i]);
            return perr(c, path, "required key missing");
        }
    if (!member(obj, "num_key_value_heads")) m->num_key_value_heads = m->num_attention_heads;
    if (!member(obj, "head_dim")) {
        if (m->num_attention_heads > 0 && m->hidden_size % m->num_attention_heads == 0) {
            m->head_dim = m->hidden_size / m->num_attention_heads;
        } else {
            join(path, sizeof path, prefix, "head_dim");
            return perr(c, path,
                        "missing, and hidden_size = %d is not a multiple of num_attention_heads "
                        "= %d",
                        m->hidden_size, m->num_attention_heads);
        }
    }
    const cJSON *step = member(obj, "decoder_sparse_step");
    if (step) {
        int s = (int)step->valuedouble;
        int L = m->num_hidden_layers < SL_MAX_LAYERS ? m->num_hidden_layers : SL_MAX_LAYERS;
        for (int l = 0; l < L; l++)
            if ((l + 1) % s != 0) m->dense_layer[l] = true;
    }
    if (m->num_experts > 0) {
        static const char *const moe_required[] = {"num_experts_per_tok", "moe_intermediate_size"};
        for (int i = 0; i < 2; i++)
            if (!member(obj, moe_required[i])) {
                join(path, sizeof path, prefix, moe_required[i]);
                return perr(c, path, "required key missing (num_experts = %d)", m->num_experts);
            }
    }
    int l;
    if (!member(obj, "intermediate_size") && m->num_hidden_layers > 0 && m->num_experts >= 0 &&
        has_dense_layer(m, &l)) {
        join(path, sizeof path, prefix, "intermediate_size");
        return perr(c, path, "required key missing (layer %d is a dense FFN layer)", l);
    }
    if (c->hf) {
        /* A stock Qwen3-MoE config has no output gate. */
        if (!member(obj, "attn_output_gate")) m->attn_output_gate = SL_GATE_NONE;
        const cJSON *sw = member(obj, "use_sliding_window");
        if (cJSON_IsTrue(sw)) {
            join(path, sizeof path, prefix, "use_sliding_window");
            return perr(c, path, "sliding-window attention is not supported");
        }
    }
    return 0;
}

/* ---- training, data, parallel, backend sections ------------------------------------------ */

static int fn_schedule(const pctx *c, const cJSON *v, const char *path, void *sec) {
    sl_train_config *t = sec;
    char d[96];
    if (cJSON_IsString(v)) {
        const sl_lr_schedule all[] = {SL_LR_COSINE, SL_LR_WSD, SL_LR_CONSTANT};
        for (int i = 0; i < 3; i++)
            if (strcmp(v->valuestring, schedule_name(all[i])) == 0) {
                t->schedule = all[i];
                return 0;
            }
    }
    return perr(c, path, "expected \"cosine\", \"wsd\" or \"constant\", got %s",
                describe(v, d, 96));
}

#define KT(name, kind) KD(sl_train_config, #name, kind, name)
static const keydef train_keys[] = {
    KT(seq_len, K_INT),
    KT(micro_batch_size, K_INT),
    KT(global_batch_tokens, K_I64),
    KT(max_steps, K_INT),
    KT(lr, K_DBL),
    KT(min_lr, K_DBL),
    KT(warmup_steps, K_INT),
    KF("schedule", fn_schedule),
    KT(decay_fraction, K_DBL),
    KT(beta1, K_DBL),
    KT(beta2, K_DBL),
    KT(eps, K_DBL),
    KT(weight_decay, K_DBL),
    KT(grad_clip, K_DBL),
    KT(seed, K_U64),
    KT(eval_every, K_INT),
    KT(eval_tokens, K_INT),
    KT(log_every, K_INT),
    KT(save_every, K_INT),
    KT(out_dir, K_STR),
    KT(metrics_file, K_STR),
    KT(global_batch_lbl, K_BOOL),
    KT(router_bias_update_rate, K_DBL),
};

static int derive_metrics_file(sl_train_config *t) {
    size_t n = strlen(t->out_dir);
    const char *sep = (n > 0 && t->out_dir[n - 1] == '/') ? "" : "/";
    int w = snprintf(t->metrics_file, sizeof t->metrics_file, "%s%smetrics.jsonl", t->out_dir, sep);
    return (w < 0 || (size_t)w >= sizeof t->metrics_file) ? -1 : 0;
}

static int train_finish(const pctx *c, const cJSON *obj, sl_train_config *t) {
    if (!member(obj, "global_batch_tokens"))
        t->global_batch_tokens = (int64_t)t->seq_len * t->micro_batch_size;
    if (!member(obj, "metrics_file") && derive_metrics_file(t))
        return perr(c, "training.out_dir", "too long to derive metrics_file from it");
    return 0;
}

static const keydef corpus_keys[] = {
    KD(sl_corpus, "path", K_STR, path),
    KD(sl_corpus, "weight", K_DBL, weight),
};

static int fn_train(const pctx *c, const cJSON *v, const char *path, void *sec) {
    sl_data_config *dc = sec;
    char sub[KEYPATH_MAX], d[96];
    sl_corpus list[SL_MAX_CORPORA];
    memset(list, 0, sizeof list);
    if (cJSON_IsString(v)) {
        if (get_string(c, v, path, list[0].path, sizeof list[0].path)) return -1;
        if (!list[0].path[0]) return perr(c, path, "empty path");
        list[0].weight = 1.0;
        memcpy(dc->train, list, sizeof list);
        dc->n_train = 1;
        return 0;
    }
    if (!cJSON_IsArray(v))
        return perr(c, path,
                    "expected a path string or an array of {\"path\", \"weight\"} objects, got %s",
                    describe(v, d, 96));
    int n = cJSON_GetArraySize(v);
    if (n == 0) return perr(c, path, "empty array (give at least one corpus)");
    if (n > SL_MAX_CORPORA) return perr(c, path, "%d corpora, at most %d", n, SL_MAX_CORPORA);
    int i = 0;
    for (const cJSON *it = v->child; it; it = it->next, i++) {
        snprintf(sub, sizeof sub, "%s[%d]", path, i);
        list[i].weight = 1.0;
        if (apply_object(c, it, sub, corpus_keys, NKEYS(corpus_keys), &list[i])) return -1;
        char leaf[KEYPATH_MAX];
        if (!member(it, "path")) {
            join(leaf, sizeof leaf, sub, "path");
            return perr(c, leaf, "required key missing");
        }
        if (!list[i].path[0]) {
            join(leaf, sizeof leaf, sub, "path");
            return perr(c, leaf, "empty path");
        }
        if (!(list[i].weight > 0)) {
            join(leaf, sizeof leaf, sub, "weight");
            return perr(c, leaf, "must be > 0, got %g", list[i].weight);
        }
    }
    memcpy(dc->train, list, sizeof list);
    dc->n_train = n;
    return 0;
}

static const keydef data_keys[] = {
    KF("train", fn_train),
    KD(sl_data_config, "eval", K_STR, eval_path),
    KD(sl_data_config, "seed", K_U64, seed),
    KD(sl_data_config, "prefetch", K_INT, prefetch),
};

static const keydef parallel_keys[] = {
    KD(sl_parallel_config, "expert_parallel", K_INT, expert_parallel),
    KD(sl_parallel_config, "zero1", K_BOOL, zero1),
    KD(sl_parallel_config, "capacity_factor", K_DBL, capacity_factor),
    KD(sl_parallel_config, "drop_policy", K_STR, drop_policy),
    KD(sl_parallel_config, "bucket_mb", K_INT, bucket_mb),
};

static const keydef backend_keys[] = {
    KD(sl_backend_config, "name", K_STR, name),
    KD(sl_backend_config, "threads", K_INT, threads),
};

typedef struct {
    const char *name;
    const keydef *keys;
    int nkeys;
    size_t off;
} section_def;

static const section_def sections[] = {
    {"model", model_keys, NKEYS(model_keys), offsetof(sl_config, model)},
    {"training", train_keys, NKEYS(train_keys), offsetof(sl_config, train)},
    {"data", data_keys, NKEYS(data_keys), offsetof(sl_config, data)},
    {"parallel", parallel_keys, NKEYS(parallel_keys), offsetof(sl_config, parallel)},
    {"backend", backend_keys, NKEYS(backend_keys), offsetof(sl_config, backend)},
};
#define NSECTIONS NKEYS(sections)

/* ---- defaults ---------------------------------------------------------------------------- */

void sl_config_defaults(sl_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    model_defaults(&cfg->model);

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
    SL_CHECK(derive_metrics_file(t) == 0, "default metrics_file");

    cfg->data.n_train = 0;
    cfg->data.seed = 1234;
    cfg->data.prefetch = 4;

    cfg->parallel.expert_parallel = 1;
    cfg->parallel.zero1 = false;
    cfg->parallel.capacity_factor = 0.0;
    snprintf(cfg->parallel.drop_policy, sizeof cfg->parallel.drop_policy, "probs");
    cfg->parallel.bucket_mb = 64;

    snprintf(cfg->backend.name, sizeof cfg->backend.name, "cpu");
    cfg->backend.threads = 0;
}

/* ---- validation -------------------------------------------------------------------------- */

typedef struct {
    const char *name;
    const char *prefix; /* "model", "training", ... or "" for a bare HF config */
    char *err;
    size_t errlen;
} vctx;

static int verr(const vctx *v, const char *key, const char *fmt, ...) SL_PRINTF(3, 4);
static int verr(const vctx *v, const char *key, const char *fmt, ...) {
    char path[KEYPATH_MAX];
    join(path, sizeof path, v->prefix, key);
    va_list ap;
    va_start(ap, fmt);
    vmessage(v->err, v->errlen, v->name, path, fmt, ap);
    va_end(ap);
    return -1;
}

static int check_range(const vctx *v, const char *key, long long x, long long lo, long long hi) {
    if (x < lo) {
        if (lo == 1) return verr(v, key, "must be positive, got %lld", x);
        return verr(v, key, "must be >= %lld, got %lld", lo, x);
    }
    if (x > hi) return verr(v, key, "%lld exceeds the supported maximum %lld", x, hi);
    return 0;
}

static bool terminated(const char *s, size_t size) {
    return memchr(s, '\0', size) != NULL;
}

static int validate_model(const vctx *v, const sl_model_config *m) {
    if (check_range(v, "vocab_size", m->vocab_size, 1, LIM_VOCAB)) return -1;
    if (check_range(v, "hidden_size", m->hidden_size, 1, LIM_HIDDEN)) return -1;
    if (check_range(v, "num_hidden_layers", m->num_hidden_layers, 1, SL_MAX_LAYERS)) return -1;
    if (check_range(v, "num_attention_heads", m->num_attention_heads, 1, LIM_HEADS)) return -1;
    if (check_range(v, "num_key_value_heads", m->num_key_value_heads, 1, LIM_HEADS)) return -1;
    if (m->num_attention_heads % m->num_key_value_heads != 0)
        return verr(v, "num_key_value_heads", "%d does not divide num_attention_heads = %d",
                    m->num_key_value_heads, m->num_attention_heads);
    if (check_range(v, "head_dim", m->head_dim, 1, LIM_HEAD_DIM)) return -1;
    if (m->head_dim % 2 != 0)
        return verr(v, "head_dim", "%d is odd (RoPE rotates pairs of dimensions)", m->head_dim);
    if (!(m->rms_norm_eps > 0) || !isfinite(m->rms_norm_eps))
        return verr(v, "rms_norm_eps", "must be > 0, got %g", m->rms_norm_eps);
    if (!(m->rope_theta > 1) || !isfinite(m->rope_theta))
        return verr(v, "rope_theta", "must be > 1, got %g", m->rope_theta);
    double prf = m->partial_rotary_factor;
    if (!(prf > 0 && prf <= 1))
        return verr(v, "partial_rotary_factor", "must be in (0, 1], got %g", prf);
    double rot = m->head_dim * prf;
    if (fabs(rot - nearbyint(rot)) > 1e-9 * m->head_dim)
        return verr(v, "partial_rotary_factor",
                    "head_dim * partial_rotary_factor = %d * %g = %g is not an integer",
                    m->head_dim, prf, rot);
    long irot = lrint(rot);
    if (irot < 2 || irot % 2 != 0)
        return verr(v, "partial_rotary_factor",
                    "rotary dimension head_dim * partial_rotary_factor = %ld must be even and >= 2",
                    irot);
    const sl_rope_scaling *r = &m->rope_scaling;
    if (r->type == SL_ROPE_YARN) {
        if (!(r->factor > 1) || !isfinite(r->factor))
            return verr(v, "rope_scaling.factor", "must be > 1 for yarn, got %g", r->factor);
        if (check_range(v, "rope_scaling.original_max_position_embeddings",
                        r->original_max_position_embeddings, 1, LIM_POSITIONS))
            return -1;
        if (!(r->beta_slow > 0) || !isfinite(r->beta_slow))
            return verr(v, "rope_scaling.beta_slow", "must be > 0, got %g", r->beta_slow);
        if (!(r->beta_fast > r->beta_slow) || !isfinite(r->beta_fast))
            return verr(v, "rope_scaling.beta_fast", "%g must exceed beta_slow = %g", r->beta_fast,
                        r->beta_slow);
        if (!(r->attention_factor >= 0) || !isfinite(r->attention_factor))
            return verr(v, "rope_scaling.attention_factor", "must be > 0, got %g",
                        r->attention_factor);
    } else if (r->type != SL_ROPE_DEFAULT) {
        return verr(v, "rope_scaling.rope_type", "invalid value %d", (int)r->type);
    }
    if (check_range(v, "max_position_embeddings", m->max_position_embeddings, 1, LIM_POSITIONS))
        return -1;
    if (check_range(v, "num_experts", m->num_experts, 0, LIM_EXPERTS)) return -1;
    if (m->num_experts > 0) {
        if (m->num_experts_per_tok < 1)
            return verr(v, "num_experts_per_tok", "must be >= 1 when num_experts = %d, got %d",
                        m->num_experts, m->num_experts_per_tok);
        if (m->num_experts_per_tok > m->num_experts)
            return verr(v, "num_experts_per_tok", "%d exceeds num_experts = %d",
                        m->num_experts_per_tok, m->num_experts);
        if (m->moe_intermediate_size < 1)
            return verr(v, "moe_intermediate_size",
                        "must be positive when num_experts = %d, got %d", m->num_experts,
                        m->moe_intermediate_size);
        if (check_range(v, "moe_intermediate_size", m->moe_intermediate_size, 1, LIM_FFN))
            return -1;
    } else {
        /* A dense model: the MoE keys are ignored, but must not be negative. */
        if (check_range(v, "num_experts_per_tok", m->num_experts_per_tok, 0, LIM_EXPERTS))
            return -1;
        if (check_range(v, "moe_intermediate_size", m->moe_intermediate_size, 0, LIM_FFN))
            return -1;
    }
    if (check_range(v, "shared_expert_intermediate_size", m->shared_expert_intermediate_size, 0,
                    LIM_FFN))
        return -1;
    if (check_range(v, "intermediate_size", m->intermediate_size, 0, LIM_FFN)) return -1;
    int dl;
    if (m->intermediate_size < 1 && has_dense_layer(m, &dl)) {
        if (m->num_experts == 0)
            return verr(v, "intermediate_size",
                        "must be positive for a dense model (num_experts = "
                        "0), got %d",
                        m->intermediate_size);
        return verr(v, "intermediate_size",
                    "must be positive: layer %d is a dense FFN layer (mlp_only_layers), got %d", dl,
                    m->intermediate_size);
    }
    for (int l = m->num_hidden_layers; l < SL_MAX_LAYERS; l++)
        if (m->dense_layer[l])
            return verr(v, "mlp_only_layers",
                        "layer %d is out of range [0, num_hidden_layers = %d)", l,
                        m->num_hidden_layers);
    if (!(m->router_aux_loss_coef >= 0) || !isfinite(m->router_aux_loss_coef))
        return verr(v, "router_aux_loss_coef", "must be >= 0, got %g", m->router_aux_loss_coef);
    if (!(m->router_z_loss_coef >= 0) || !isfinite(m->router_z_loss_coef))
        return verr(v, "router_z_loss_coef", "must be >= 0, got %g", m->router_z_loss_coef);
    if (!(m->initializer_range > 0) || !isfinite(m->initializer_range))
        return verr(v, "initializer_range", "must be > 0, got %g", m->initializer_range);
    if (m->attn_output_gate != SL_GATE_NONE && m->attn_output_gate != SL_GATE_HEADWISE &&
        m->attn_output_gate != SL_GATE_ELEMENTWISE)
        return verr(v, "attn_output_gate", "invalid value %d", (int)m->attn_output_gate);
    return 0;
}

static int check_unit(const vctx *v, const char *key, double x) {
    if (!(x >= 0 && x < 1)) return verr(v, key, "must be in [0, 1), got %g", x);
    return 0;
}

static int check_nonneg(const vctx *v, const char *key, double x) {
    if (!(x >= 0) || !isfinite(x)) return verr(v, key, "must be >= 0, got %g", x);
    return 0;
}

static int validate_train(const vctx *v, const sl_train_config *t, const sl_model_config *m) {
    if (check_range(v, "seq_len", t->seq_len, 1, LIM_POSITIONS)) return -1;
    if (t->seq_len > m->max_position_embeddings)
        return verr(v, "seq_len", "%d exceeds model.max_position_embeddings = %d", t->seq_len,
                    m->max_position_embeddings);
    if (check_range(v, "micro_batch_size", t->micro_batch_size, 1, LIM_MICRO_BATCH)) return -1;
    if (t->global_batch_tokens < 1)
        return verr(v, "global_batch_tokens", "must be positive, got %lld",
                    (long long)t->global_batch_tokens);
    long long micro = (long long)t->seq_len * t->micro_batch_size;
    if (t->global_batch_tokens % micro != 0)
        return verr(v, "global_batch_tokens",
                    "%lld is not a multiple of seq_len * micro_batch_size = %d * %d = %lld",
                    (long long)t->global_batch_tokens, t->seq_len, t->micro_batch_size, micro);
    if (check_range(v, "max_steps", t->max_steps, 1, INT_MAX)) return -1;
    if (!(t->lr >= 0) || !isfinite(t->lr)) return verr(v, "lr", "must be >= 0, got %g", t->lr);
    if (check_nonneg(v, "min_lr", t->min_lr)) return -1;
    if (t->min_lr > t->lr) return verr(v, "min_lr", "%g exceeds lr = %g", t->min_lr, t->lr);
    if (check_range(v, "warmup_steps", t->warmup_steps, 0, INT_MAX)) return -1;
    if (t->warmup_steps > t->max_steps)
        return verr(v, "warmup_steps", "%d exceeds max_steps = %d", t->warmup_steps, t->max_steps);
    if (t->schedule != SL_LR_COSINE && t->schedule != SL_LR_WSD && t->schedule != SL_LR_CONSTANT)
        return verr(v, "schedule", "invalid value %d", (int)t->schedule);
    if (!(t->decay_fraction >= 0 && t->decay_fraction <= 1))
        return verr(v, "decay_fraction", "must be in [0, 1], got %g", t->decay_fraction);
    if (t->schedule == SL_LR_WSD) {
        double decay = ceil(t->decay_fraction * t->max_steps);
        if (t->warmup_steps + decay > t->max_steps)
            return verr(v, "decay_fraction",
                        "warmup_steps (%d) plus the decay (%g * %d = %.0f steps) exceed max_steps "
                        "= %d",
                        t->warmup_steps, t->decay_fraction, t->max_steps, decay, t->max_steps);
    }
    if (check_unit(v, "beta1", t->beta1) || check_unit(v, "beta2", t->beta2)) return -1;
    if (!(t->eps > 0) || !isfinite(t->eps)) return verr(v, "eps", "must be > 0, got %g", t->eps);
    if (check_nonneg(v, "weight_decay", t->weight_decay)) return -1;
    if (check_nonneg(v, "grad_clip", t->grad_clip)) return -1;
    if ((double)t->seed > EXACT_INT_MAX) return verr(v, "seed", "must be at most 2^53");
    if (check_range(v, "eval_every", t->eval_every, 0, INT_MAX)) return -1;
    if (check_range(v, "eval_tokens", t->eval_tokens, 1, INT_MAX)) return -1;
    if (check_range(v, "log_every", t->log_every, 1, INT_MAX)) return -1;
    if (check_range(v, "save_every", t->save_every, 0, INT_MAX)) return -1;
    if (!terminated(t->out_dir, sizeof t->out_dir)) return verr(v, "out_dir", "string too long");
    if (!t->out_dir[0]) return verr(v, "out_dir", "must not be empty");
    if (!terminated(t->metrics_file, sizeof t->metrics_file))
        return verr(v, "metrics_file", "string too long");
    if (!t->metrics_file[0]) return verr(v, "metrics_file", "must not be empty");
    if (check_nonneg(v, "router_bias_update_rate", t->router_bias_update_rate)) return -1;
    return 0;
}

static int validate_data(const vctx *v, const sl_data_config *d) {
    char key[64];
    if (check_range(v, "train", d->n_train, 0, SL_MAX_CORPORA)) return -1;
    for (int i = 0; i < d->n_train; i++) {
        const sl_corpus *c = &d->train[i];
        snprintf(key, sizeof key, "train[%d].path", i);
        if (!terminated(c->path, sizeof c->path)) return verr(v, key, "string too long");
        if (!c->path[0]) return verr(v, key, "empty path");
        snprintf(key, sizeof key, "train[%d].weight", i);
        if (!(c->weight > 0) || !isfinite(c->weight))
            return verr(v, key, "must be > 0, got %g", c->weight);
    }
    if (!terminated(d->eval_path, sizeof d->eval_path)) return verr(v, "eval", "string too long");
    if ((double)d->seed > EXACT_INT_MAX) return verr(v, "seed", "must be at most 2^53");
    if (check_range(v, "prefetch", d->prefetch, 0, LIM_PREFETCH)) return -1;
    return 0;
}

static int validate_parallel(const vctx *v, const sl_parallel_config *p, const sl_model_config *m) {
    if (check_range(v, "expert_parallel", p->expert_parallel, 1, INT_MAX)) return -1;
    if (m->num_experts == 0 && p->expert_parallel > 1)
        return verr(v, "expert_parallel", "%d needs an MoE model (model.num_experts = 0)",
                    p->expert_parallel);
    if (m->num_experts > 0 && m->num_experts % p->expert_parallel != 0)
        return verr(v, "expert_parallel", "%d does not divide model.num_experts = %d",
                    p->expert_parallel, m->num_experts);
    if (check_nonneg(v, "capacity_factor", p->capacity_factor)) return -1;
    if (!terminated(p->drop_policy, sizeof p->drop_policy))
        return verr(v, "drop_policy", "string too long");
    if (strcmp(p->drop_policy, "probs") != 0 && strcmp(p->drop_policy, "position") != 0)
        return verr(v, "drop_policy", "expected \"probs\" or \"position\", got \"%s\"",
                    p->drop_policy);
    if (check_range(v, "bucket_mb", p->bucket_mb, 1, 1 << 16)) return -1;
    return 0;
}

static int validate_backend(const vctx *v, const sl_backend_config *b) {
    if (!terminated(b->name, sizeof b->name)) return verr(v, "name", "string too long");
    if (strcmp(b->name, "cpu") != 0 && strcmp(b->name, "cuda") != 0)
        return verr(v, "name", "unknown backend \"%s\" (expected \"cpu\" or \"cuda\")", b->name);
    if (check_range(v, "threads", b->threads, 0, LIM_THREADS)) return -1;
    return 0;
}

static int validate_named(const sl_config *cfg, const char *name, char *err, size_t errlen) {
    vctx v = {name, "model", err, errlen};
    if (validate_model(&v, &cfg->model)) return -1;
    v.prefix = "training";
    if (validate_train(&v, &cfg->train, &cfg->model)) return -1;
    v.prefix = "data";
    if (validate_data(&v, &cfg->data)) return -1;
    v.prefix = "parallel";
    if (validate_parallel(&v, &cfg->parallel, &cfg->model)) return -1;
    v.prefix = "backend";
    if (validate_backend(&v, &cfg->backend)) return -1;
    return 0;
}

int sl_config_validate(const sl_config *cfg, char *err, size_t errlen) {
    const char *name =
        terminated(cfg->path, sizeof cfg->path) && cfg->path[0] ? cfg->path : "<config>";
    return validate_named(cfg, name, err, errlen);
}

/* ---- parse ------------------------------------------------------------------------------- */

/* Applies a parsed tree on top of the defaults and validates; writes cfg only on success. */
static int parse_tree(const cJSON *root, const char *name, const char *path, sl_config *cfg,
                      char *err, size_t errlen) {
    pctx c = {name, err, errlen, false};
    char d[96];
    if (!cJSON_IsObject(root))
        return perr(&c, "",
                    "the top level must be an object with the sections model, training, data, "
                    "parallel and backend; got %s",
                    describe(root, d, 96));
    sl_config *t = sl_xmalloc(sizeof *t);
    sl_config_defaults(t);
    snprintf(t->path, sizeof t->path, "%s", path);
    int rc = -1;
    const cJSON *model = NULL, *train = NULL;
    for (const cJSON *it = root->child; it; it = it->next) {
        for (const cJSON *p = root->child; p != it; p = p->next)
            if (strcmp(p->string, it->string) == 0) {
                perr(&c, it->string, "duplicate section");
                goto done;
            }
        const section_def *s = NULL;
        for (int i = 0; i < NSECTIONS; i++)
            if (strcmp(sections[i].name, it->string) == 0) s = &sections[i];
        if (!s) {
            perr(&c, it->string,
                 "unknown section (expected model, training, data, parallel or backend)");
            goto done;
        }
        if (apply_object(&c, it, s->name, s->keys, s->nkeys, (char *)t + s->off)) goto done;
        if (s->off == offsetof(sl_config, model)) model = it;
        if (s->off == offsetof(sl_config, train)) train = it;
    }
    if (!model) {
        perr(&c, "model", "required section missing");
        goto done;
    }
    if (model_finish(&c, model, "model", &t->model)) goto done;
    if (train_finish(&c, train, &t->train)) goto done;
    if (validate_named(t, name, err, errlen)) goto done;
    *cfg = *t;
    rc = 0;
done:
    free(t);
    return rc;
}

static cJSON *parse_json(const char *json, const char *name, char *err, size_t errlen) {
    const char *end = NULL;
    if (!json) {
        message(err, errlen, name, "", "no JSON text");
        return NULL;
    }
    cJSON *root = cJSON_ParseWithOpts(json, &end, 1);
    if (!root) {
        int line = 1, col = 1;
        if (!end) end = json;
        for (const char *p = json; p < end && *p; p++) {
            if (*p == '\n')
                line++, col = 1;
            else
                col++;
        }
        message(err, errlen, name, "", "invalid JSON at line %d, column %d", line, col);
    }
    return root;
}

int sl_config_parse(const char *json, const char *name, sl_config *cfg, char *err, size_t errlen) {
    if (!name) name = "<config>";
    cJSON *root = parse_json(json, name, err, errlen);
    if (!root) return -1;
    int rc = parse_tree(root, name, name, cfg, err, errlen);
    cJSON_Delete(root);
    return rc;
}

static char *read_file(const char *path, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        message(err, errlen, path, "", "cannot open: %s", strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, len = 0;
    char *buf = sl_xmalloc(cap);
    for (;;) {
        if (len + 1 >= cap) {
            if (cap >= ((size_t)64 << 20)) {
                message(err, errlen, path, "", "file larger than 64 MiB");
                free(buf), fclose(f);
                return NULL;
            }
            cap *= 2;
            buf = sl_xrealloc(buf, cap);
        }
        size_t n = fread(buf + len, 1, cap - 1 - len, f);
        len += n;
        if (n == 0) break;
    }
    if (ferror(f)) {
        message(err, errlen, path, "", "read error: %s", strerror(errno));
        free(buf), fclose(f);
        return NULL;
    }
    fclose(f);
    buf[len] = '\0';
    if (strlen(buf) != len) {
        message(err, errlen, path, "", "contains a NUL byte");
        free(buf);
        return NULL;
    }
    return buf;
}

int sl_config_load(const char *path, sl_config *cfg, char *err, size_t errlen) {
    char *text = read_file(path, err, errlen);
    if (!text) return -1;
    int rc = sl_config_parse(text, path, cfg, err, errlen);
    free(text);
    return rc;
}

/* ---- serialization ----------------------------------------------------------------------- */

static void add_rope_scaling(cJSON *o, const sl_rope_scaling *r) {
    if (r->type != SL_ROPE_YARN) {
        cJSON_AddNullToObject(o, "rope_scaling");
        return;
    }
    cJSON *rs = cJSON_AddObjectToObject(o, "rope_scaling");
    cJSON_AddStringToObject(rs, "rope_type", "yarn");
    cJSON_AddNumberToObject(rs, "factor", r->factor);
    cJSON_AddNumberToObject(rs, "original_max_position_embeddings",
                            r->original_max_position_embeddings);
    cJSON_AddNumberToObject(rs, "beta_fast", r->beta_fast);
    cJSON_AddNumberToObject(rs, "beta_slow", r->beta_slow);
    if (r->attention_factor > 0)
        cJSON_AddNumberToObject(rs, "attention_factor", r->attention_factor);
}

static void add_model(cJSON *o, const sl_model_config *m, bool hf) {
    if (hf) {
        cJSON *arch = cJSON_AddArrayToObject(o, "architectures");
        cJSON_AddItemToArray(arch, cJSON_CreateString("Qwen3MoeForCausalLM"));
        cJSON_AddStringToObject(o, "model_type", "qwen3_moe");
    }
    cJSON_AddNumberToObject(o, "vocab_size", m->vocab_size);
    cJSON_AddNumberToObject(o, "hidden_size", m->hidden_size);
    cJSON_AddNumberToObject(o, "num_hidden_layers", m->num_hidden_layers);
    cJSON_AddNumberToObject(o, "num_attention_heads", m->num_attention_heads);
    cJSON_AddNumberToObject(o, "num_key_value_heads", m->num_key_value_heads);
    cJSON_AddNumberToObject(o, "head_dim", m->head_dim);
    if (hf) {
        cJSON_AddStringToObject(o, "hidden_act", "silu");
        cJSON_AddFalseToObject(o, "attention_bias");
    }
    cJSON_AddNumberToObject(o, "rms_norm_eps", m->rms_norm_eps);
    cJSON_AddNumberToObject(o, "rope_theta", m->rope_theta);
    cJSON_AddNumberToObject(o, "partial_rotary_factor", m->partial_rotary_factor);
    add_rope_scaling(o, &m->rope_scaling);
    cJSON_AddNumberToObject(o, "max_position_embeddings", m->max_position_embeddings);
    cJSON_AddNumberToObject(o, "num_experts", m->num_experts);
    cJSON_AddNumberToObject(o, "num_experts_per_tok", m->num_experts_per_tok);
    cJSON_AddNumberToObject(o, "moe_intermediate_size", m->moe_intermediate_size);
    cJSON_AddNumberToObject(o, "shared_expert_intermediate_size",
                            m->shared_expert_intermediate_size);
    cJSON_AddNumberToObject(o, "intermediate_size", m->intermediate_size);
    if (hf) cJSON_AddNumberToObject(o, "decoder_sparse_step", 1);
    cJSON *mlp = cJSON_AddArrayToObject(o, "mlp_only_layers");
    for (int l = 0; l < SL_MAX_LAYERS; l++)
        if (m->dense_layer[l]) cJSON_AddItemToArray(mlp, cJSON_CreateNumber(l));
    cJSON_AddBoolToObject(o, "norm_topk_prob", m->norm_topk_prob);
    cJSON_AddNumberToObject(o, "router_aux_loss_coef", m->router_aux_loss_coef);
    cJSON_AddNumberToObject(o, "router_z_loss_coef", m->router_z_loss_coef);
    cJSON_AddBoolToObject(o, "tie_word_embeddings", m->tie_word_embeddings);
    cJSON_AddNumberToObject(o, "initializer_range", m->initializer_range);
    cJSON_AddStringToObject(o, "attn_output_gate", gate_name(m->attn_output_gate));
}

static char *print_and_free(cJSON *root) {
    char *s = cJSON_Print(root);
    cJSON_Delete(root);
    SL_CHECK(s != NULL, "cJSON_Print failed (out of memory)");
    return s;
}

static cJSON *config_tree(const sl_config *cfg) {
    cJSON *root = cJSON_CreateObject();
    SL_CHECK(root != NULL, "out of memory");
    add_model(cJSON_AddObjectToObject(root, "model"), &cfg->model, false);

    const sl_train_config *t = &cfg->train;
    cJSON *o = cJSON_AddObjectToObject(root, "training");
    cJSON_AddNumberToObject(o, "seq_len", t->seq_len);
    cJSON_AddNumberToObject(o, "micro_batch_size", t->micro_batch_size);
    cJSON_AddNumberToObject(o, "global_batch_tokens", (double)t->global_batch_tokens);
    cJSON_AddNumberToObject(o, "max_steps", t->max_steps);
    cJSON_AddNumberToObject(o, "lr", t->lr);
    cJSON_AddNumberToObject(o, "min_lr", t->min_lr);
    cJSON_AddNumberToObject(o, "warmup_steps", t->warmup_steps);
    cJSON_AddStringToObject(o, "schedule", schedule_name(t->schedule));
    cJSON_AddNumberToObject(o, "decay_fraction", t->decay_fraction);
    cJSON_AddNumberToObject(o, "beta1", t->beta1);
    cJSON_AddNumberToObject(o, "beta2", t->beta2);
    cJSON_AddNumberToObject(o, "eps", t->eps);
    cJSON_AddNumberToObject(o, "weight_decay", t->weight_decay);
    cJSON_AddNumberToObject(o, "grad_clip", t->grad_clip);
    cJSON_AddNumberToObject(o, "seed", (double)t->seed);
    cJSON_AddNumberToObject(o, "eval_every", t->eval_every);
    cJSON_AddNumberToObject(o, "eval_tokens", t->eval_tokens);
    cJSON_AddNumberToObject(o, "log_every", t->log_every);
    cJSON_AddNumberToObject(o, "save_every", t->save_every);
    cJSON_AddStringToObject(o, "out_dir", t->out_dir);
    /* Left out when it is the default, so that a later out_dir override moves it too. */
    sl_train_config derived = *t;
    if (derive_metrics_file(&derived) || strcmp(derived.metrics_file, t->metrics_file) != 0)
        cJSON_AddStringToObject(o, "metrics_file", t->metrics_file);
    cJSON_AddBoolToObject(o, "global_batch_lbl", t->global_batch_lbl);
    cJSON_AddNumberToObject(o, "router_bias_update_rate", t->router_bias_update_rate);

    const sl_data_config *d = &cfg->data;
    o = cJSON_AddObjectToObject(root, "data");
    if (d->n_train == 1 && d->train[0].weight == 1.0) {
        cJSON_AddStringToObject(o, "train", d->train[0].path);
    } else if (d->n_train > 0) {
        cJSON *arr = cJSON_AddArrayToObject(o, "train");
        for (int i = 0; i < d->n_train && i < SL_MAX_CORPORA; i++) {
            cJSON *e = cJSON_CreateObject();
            cJSON_AddStringToObject(e, "path", d->train[i].path);
            cJSON_AddNumberToObject(e, "weight", d->train[i].weight);
            cJSON_AddItemToArray(arr, e);
        }
    }
    cJSON_AddStringToObject(o, "eval", d->eval_path);
    cJSON_AddNumberToObject(o, "seed", (double)d->seed);
    cJSON_AddNumberToObject(o, "prefetch", d->prefetch);

    o = cJSON_AddObjectToObject(root, "parallel");
    cJSON_AddNumberToObject(o, "expert_parallel", cfg->parallel.expert_parallel);
    cJSON_AddBoolToObject(o, "zero1", cfg->parallel.zero1);
    cJSON_AddNumberToObject(o, "capacity_factor", cfg->parallel.capacity_factor);
    cJSON_AddStringToObject(o, "drop_policy", cfg->parallel.drop_policy);
    cJSON_AddNumberToObject(o, "bucket_mb", cfg->parallel.bucket_mb);

    o = cJSON_AddObjectToObject(root, "backend");
    cJSON_AddStringToObject(o, "name", cfg->backend.name);
    cJSON_AddNumberToObject(o, "threads", cfg->backend.threads);
    return root;
}

char *sl_config_to_json(const sl_config *cfg) {
    return print_and_free(config_tree(cfg));
}

char *sl_model_config_to_hf_json(const sl_model_config *m) {
    cJSON *root = cJSON_CreateObject();
    SL_CHECK(root != NULL, "out of memory");
    add_model(root, m, true);
    return print_and_free(root);
}

int sl_model_config_from_hf_json(const char *json, const char *name, sl_model_config *m, char *err,
                                 size_t errlen) {
    if (!name) name = "config.json";
    cJSON *root = parse_json(json, name, err, errlen);
    if (!root) return -1;
    pctx c = {name, err, errlen, true};
    sl_model_config t;
    model_defaults(&t);
    int rc = -1;
    char d[96];
    if (!cJSON_IsObject(root)) {
        perr(&c, "", "expected a JSON object, got %s", describe(root, d, 96));
        goto done;
    }
    if (apply_object(&c, root, "", model_keys, NKEYS(model_keys), &t)) goto done;
    if (model_finish(&c, root, "", &t)) goto done;
    vctx v = {name, "", err, errlen};
    if (validate_model(&v, &t)) goto done;
    *m = t;
    rc = 0;
done:
    cJSON_Delete(root);
    return rc;
}

/* ---- overrides --------------------------------------------------------------------------- */

static char *trim(char *s) {
    while (*s == ' ' || *s == '\t') s++;
    size_t n = strlen(s);
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\n')) s[--n] = '\0';
    return s;
}

int sl_config_set(sl_config *cfg, const char *assignment, char *err, size_t errlen) {
    const char *file =
        terminated(cfg->path, sizeof cfg->path) && cfg->path[0] ? cfg->path : "<config>";
    char name[SL_PATH_MAX + 16];
    snprintf(name, sizeof name, "%s (--set)", file);
    const char *eq = assignment ? strchr(assignment, '=') : NULL;
    if (!eq)
        return message(err, errlen, name, "", "\"%s\" is not of the form section.key=value",
                       assignment ? assignment : "");
    char *copy = sl_xstrdup(assignment);
    copy[eq - assignment] = '\0';
    char *key = trim(copy), *value = trim(copy + (eq - assignment) + 1);
    int rc = -1;
    cJSON *root = NULL, *val = NULL;
    if (!key[0] || key[0] == '.' || key[strlen(key) - 1] == '.' || strstr(key, "..")) {
        message(err, errlen, name, "", "\"%s\" is not a key path like section.key", key);
        goto done;
    }

    root = config_tree(cfg);
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
            char prefix[KEYPATH_MAX];
            snprintf(prefix, sizeof prefix, "%.*s", (int)(dot - key), key);
            message(err, errlen, name, prefix,
                    "is not an object, so %s cannot be set (set %s itself instead)", key, prefix);
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
    char path[SL_PATH_MAX];
    snprintf(path, sizeof path, "%s", terminated(cfg->path, sizeof cfg->path) ? cfg->path : "");
    rc = parse_tree(root, name, path, cfg, err, errlen);
done:
    cJSON_Delete(val);
    cJSON_Delete(root);
    free(copy);
    return rc;
}
