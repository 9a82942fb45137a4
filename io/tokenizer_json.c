/*
 * io/tokenizer_json.c - checks of tokenizer.json values shared by the loader's files
 * (io/tokenizer_json.h): error messages naming the field, unknown keys refused, typed fields.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/log.h"
#include "io/tokenizer_json.h"

int tok_bad(tok_loader *L, const char *field, const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return sl_fail(L->err, L->errlen, "%s: %s: %s", L->file, field, msg);
}

/* Refuses keys of object o other than the NULL-terminated `known`. */
int tok_only_keys(tok_loader *L, const cJSON *o, const char *field, const char *const *known) {
    const cJSON *it;
    cJSON_ArrayForEach(it, o) {
        bool ok = false;
        for (int k = 0; known[k]; k++) ok = ok || strcmp(it->string, known[k]) == 0;
        if (!ok) {
            char f[256];
            snprintf(f, sizeof f, "%s%s%s", field, *field ? "." : "", it->string);
            return tok_bad(L, f, "unknown field: sluice does not implement it, so it refuses it");
        }
    }
    return 0;
}

const char *tok_type_of(tok_loader *L, const cJSON *o, const char *field, char *f, size_t fn) {
    snprintf(f, fn, "%s.type", field);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "type");
    if (!cJSON_IsObject(o)) {
        tok_bad(L, field, "must be an object or null");
        return NULL;
    }
    if (!cJSON_IsString(t)) {
        tok_bad(L, f, "missing (a string naming the component)");
        return NULL;
    }
    return t->valuestring;
}

/* An optional boolean field (absent: def). */
int tok_opt_bool(tok_loader *L, const cJSON *o, const char *field, const char *key, bool def,
                 bool *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    *out = def;
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsBool(v)) {
        char f[256];
        snprintf(f, sizeof f, "%s.%s", field, key);
        return tok_bad(L, f, "must be true or false");
    }
    *out = cJSON_IsTrue(v);
    return 0;
}

bool tok_is_id(const cJSON *v) {
    return cJSON_IsNumber(v) && v->valuedouble >= 0 &&
           v->valuedouble < (double)SL_TOKENIZER_MAX_VOCAB &&
           floor(v->valuedouble) == v->valuedouble;
}

/* A Sequence component (`type`, and the array `key` of components): fn loads each, its field
 * "<field>.<key>[i]". 0, or -1. */
int tok_sequence(tok_loader *L, const cJSON *o, const char *field, const char *key,
                 int (*fn)(tok_loader *L, const cJSON *item, const char *field)) {
    const char *const keys[] = {"type", key, NULL};
    if (tok_only_keys(L, o, field, keys)) return -1;
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(o, key);
    char f[160];
    snprintf(f, sizeof f, "%s.%s", field, key);
    if (!cJSON_IsArray(list)) return tok_bad(L, f, "must be an array");
    int i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, list) {
        snprintf(f, sizeof f, "%s.%s[%d]", field, key, i++);
        if (!cJSON_IsObject(it)) return tok_bad(L, f, "must be an object");
        if (fn(L, it, f) != 0) return -1;
    }
    return 0;
}
