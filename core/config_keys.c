/*
 * core/config_keys.c - table-driven JSON section parsing and validation (see config_keys.h).
 */
#include "core/config_keys.h"

#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- messages --------------------------------------------------------------------------- */

void sl_cfg_vmessage(char *err, size_t errlen, const char *name, const char *path, const char *fmt,
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

int sl_cfg_message(char *err, size_t errlen, const char *name, const char *path, const char *fmt,
                   ...) {
    va_list ap;
    va_start(ap, fmt);
    sl_cfg_vmessage(err, errlen, name, path, fmt, ap);
    va_end(ap);
    return -1;
}

/* out = prefix.key (or key alone); an over-long path is cut and ends in "...". */
void sl_cfg_join(char *out, size_t n, const char *prefix, const char *key) {
    int w = (prefix && prefix[0]) ? snprintf(out, n, "%s.%s", prefix, key)
                                  : snprintf(out, n, "%s", key);
    if (w >= 0 && (size_t)w >= n && n > 4) memcpy(out + n - 4, "...", 4);
}

/* A short description of a JSON value for "expected X, got Y" messages. */
const char *sl_cfg_describe(const cJSON *v, char *buf, size_t n) {
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

int sl_cfg_err(const sl_cfg_ctx *c, const char *path, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    sl_cfg_vmessage(c->err, c->errlen, c->name, path, fmt, ap);
    va_end(ap);
    return -1;
}

int sl_cfg_get_integer(const sl_cfg_ctx *c, const cJSON *v, const char *path, double lo, double hi,
                       double *out) {
    char d[96];
    if (!cJSON_IsNumber(v))
        return sl_cfg_err(c, path, "expected an integer, got %s", sl_cfg_describe(v, d, 96));
    double x = v->valuedouble;
    if (!isfinite(x) || x != floor(x))
        return sl_cfg_err(c, path, "expected an integer, got %s", sl_cfg_describe(v, d, 96));
    if (x < lo || x > hi)
        return sl_cfg_err(c, path, "%.15g is out of range [%.15g, %.15g]", x, lo, hi);
    *out = x;
    return 0;
}

int sl_cfg_get_int(const sl_cfg_ctx *c, const cJSON *v, const char *path, int *out) {
    double x = 0;
    if (sl_cfg_get_integer(c, v, path, INT_MIN, INT_MAX, &x)) return -1;
    *out = (int)x;
    return 0;
}

int sl_cfg_get_double(const sl_cfg_ctx *c, const cJSON *v, const char *path, double *out) {
    char d[96];
    if (!cJSON_IsNumber(v))
        return sl_cfg_err(c, path, "expected a number, got %s", sl_cfg_describe(v, d, 96));
    if (!isfinite(v->valuedouble)) return sl_cfg_err(c, path, "expected a finite number");
    *out = v->valuedouble;
    return 0;
}

int sl_cfg_get_bool(const sl_cfg_ctx *c, const cJSON *v, const char *path, bool *out) {
    char d[96];
    if (!cJSON_IsBool(v))
        return sl_cfg_err(c, path, "expected true or false, got %s", sl_cfg_describe(v, d, 96));
    *out = cJSON_IsTrue(v);
    return 0;
}

int sl_cfg_get_string(const sl_cfg_ctx *c, const cJSON *v, const char *path, char *buf,
                      size_t size) {
    char d[96];
    if (!cJSON_IsString(v))
        return sl_cfg_err(c, path, "expected a string, got %s", sl_cfg_describe(v, d, 96));
    size_t len = strlen(v->valuestring);
    if (len >= size)
        return sl_cfg_err(c, path, "string too long (%zu bytes, at most %zu)", len, size - 1);
    memcpy(buf, v->valuestring, len + 1);
    return 0;
}

/* ---- key tables -------------------------------------------------------------------------- */

static const sl_cfg_key *find_key(const sl_cfg_key *defs, int n, const char *key) {
    for (int i = 0; i < n; i++)
        if (strcmp(defs[i].key, key) == 0) return &defs[i];
    return NULL;
}

static int unknown_key(const sl_cfg_ctx *c, const char *path, const char *key,
                       const sl_cfg_key *defs, int n) {
    const char *best = NULL;
    int bestd = 3;
    for (int i = 0; i < n; i++) {
        int d = edit_distance(key, defs[i].key);
        if (d < bestd) bestd = d, best = defs[i].key;
    }
    if (best) return sl_cfg_err(c, path, "unknown key (did you mean \"%s\"?)", best);
    return sl_cfg_err(c, path, "unknown key (docs/config.md lists the valid keys)");
}

/* Applies every sl_cfg_member of `obj` to the section struct `sec` through the key table. */
int sl_cfg_apply(const sl_cfg_ctx *c, const cJSON *obj, const char *prefix, const sl_cfg_key *defs,
                 int n, void *sec) {
    char path[SL_CFG_KEYPATH_MAX], d[96];
    if (!cJSON_IsObject(obj))
        return sl_cfg_err(c, prefix, "expected an object, got %s", sl_cfg_describe(obj, d, 96));
    for (const cJSON *it = obj->child; it; it = it->next) {
        sl_cfg_join(path, sizeof path, prefix, it->string);
        for (const cJSON *p = obj->child; p != it; p = p->next)
            if (strcmp(p->string, it->string) == 0) return sl_cfg_err(c, path, "duplicate key");
        const sl_cfg_key *k = find_key(defs, n, it->string);
        if (!k) {
            if (c->hf) continue;
            return unknown_key(c, path, it->string, defs, n);
        }
        char *f = (char *)sec + k->off;
        double x = 0;
        switch (k->kind) {
        case SL_K_INT:
            if (sl_cfg_get_int(c, it, path, (int *)(void *)f)) return -1;
            break;
        case SL_K_I64:
            if (sl_cfg_get_integer(c, it, path, -SL_CFG_EXACT_INT_MAX, SL_CFG_EXACT_INT_MAX, &x))
                return -1;
            *(int64_t *)(void *)f = (int64_t)x;
            break;
        case SL_K_U64:
            if (sl_cfg_get_integer(c, it, path, 0, SL_CFG_EXACT_INT_MAX, &x)) return -1;
            *(uint64_t *)(void *)f = (uint64_t)x;
            break;
        case SL_K_DBL:
            if (sl_cfg_get_double(c, it, path, (double *)(void *)f)) return -1;
            break;
        case SL_K_BOOL:
            if (sl_cfg_get_bool(c, it, path, (bool *)(void *)f)) return -1;
            break;
        case SL_K_STR:
            if (sl_cfg_get_string(c, it, path, f, k->size)) return -1;
            break;
        case SL_K_FN:
            if (k->fn(c, it, path, sec)) return -1;
            break;
        }
    }
    return 0;
}

void sl_cfg_emit(cJSON *o, const sl_cfg_key *defs, int n, const void *sec) {
    for (int i = 0; i < n; i++) {
        const sl_cfg_key *k = &defs[i];
        const void *f = (const char *)sec + k->off;
        switch (k->kind) {
        case SL_K_INT:
            cJSON_AddNumberToObject(o, k->key, *(const int *)f);
            break;
        case SL_K_I64:
            cJSON_AddNumberToObject(o, k->key, (double)*(const int64_t *)f);
            break;
        case SL_K_U64:
            cJSON_AddNumberToObject(o, k->key, (double)*(const uint64_t *)f);
            break;
        case SL_K_DBL:
            cJSON_AddNumberToObject(o, k->key, *(const double *)f);
            break;
        case SL_K_BOOL:
            cJSON_AddBoolToObject(o, k->key, *(const bool *)f);
            break;
        case SL_K_STR:
            cJSON_AddStringToObject(o, k->key, (const char *)f);
            break;
        case SL_K_FN:
            if (k->emit) k->emit(o, k->key, sec);
            break;
        }
    }
}

const cJSON *sl_cfg_member(const cJSON *obj, const char *key) {
    return obj ? cJSON_GetObjectItemCaseSensitive(obj, key) : NULL;
}
/* ---- validation -------------------------------------------------------------------------- */

int sl_cfg_verr(const sl_cfg_vctx *v, const char *key, const char *fmt, ...) {
    char path[SL_CFG_KEYPATH_MAX];
    sl_cfg_join(path, sizeof path, v->prefix, key);
    va_list ap;
    va_start(ap, fmt);
    sl_cfg_vmessage(v->err, v->errlen, v->name, path, fmt, ap);
    va_end(ap);
    return -1;
}

int sl_cfg_check_range(const sl_cfg_vctx *v, const char *key, long long x, long long lo,
                       long long hi) {
    if (x < lo) {
        if (lo == 1) return sl_cfg_verr(v, key, "must be positive, got %lld", x);
        return sl_cfg_verr(v, key, "must be >= %lld, got %lld", lo, x);
    }
    if (x > hi) return sl_cfg_verr(v, key, "%lld exceeds the supported maximum %lld", x, hi);
    return 0;
}

bool sl_cfg_terminated(const char *s, size_t size) {
    return memchr(s, '\0', size) != NULL;
}

int sl_cfg_check_unit(const sl_cfg_vctx *v, const char *key, double x) {
    if (!(x >= 0 && x < 1)) return sl_cfg_verr(v, key, "must be in [0, 1), got %g", x);
    return 0;
}

int sl_cfg_check_nonneg(const sl_cfg_vctx *v, const char *key, double x) {
    if (!(x >= 0) || !isfinite(x)) return sl_cfg_verr(v, key, "must be >= 0, got %g", x);
    return 0;
}

cJSON *sl_cfg_parse_json(const char *json, const char *name, char *err, size_t errlen) {
    const char *end = NULL;
    if (!json) {
        sl_cfg_message(err, errlen, name, "", "no JSON text");
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
        sl_cfg_message(err, errlen, name, "", "invalid JSON at line %d, column %d", line, col);
    }
    return root;
}
char *sl_cfg_print(cJSON *root) {
    char *s = cJSON_Print(root);
    cJSON_Delete(root);
    SL_CHECK(s != NULL, "cJSON_Print failed (out of memory)");
    return s;
}
