/*
 * core/config_keys.h - table-driven parsing and validation of JSON configuration sections.
 *
 * Knows no section: a section is a C struct plus a table of its keys (name, kind, field
 * offset, or a function for keys that need more than a type check). sl_cfg_apply() applies a
 * JSON object to the struct through its table; a key not in the table, a duplicate key or a
 * value of the wrong JSON type is an error naming the key path. The model layer
 * (model/config.c) and the run configuration (trainer/config*.c) build their sections on it.
 *
 * Every message has the form "<name>: <key path>: <reason>", name being the file.
 */
#ifndef SL_CONFIG_KEYS_H
#define SL_CONFIG_KEYS_H

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

#include "core/log.h"

#define SL_CFG_EXACT_INT_MAX 9007199254740992.0 /* 2^53: larger integers are not exact */
#define SL_CFG_KEYPATH_MAX   384

/* ---- messages ------------------------------------------------------------------------- */

/* Writes "<name>: <path>: <fmt...>" (or "<name>: <fmt...>" with an empty path) into err. */
void sl_cfg_vmessage(char *err, size_t errlen, const char *name, const char *path, const char *fmt,
                     va_list ap);
/* The same; returns -1 so that callers can `return sl_cfg_message(...)`. */
int sl_cfg_message(char *err, size_t errlen, const char *name, const char *path, const char *fmt,
                   ...) SL_PRINTF(5, 6);
/* out = prefix.key (or key alone); an over-long path is cut and ends in "...". */
void sl_cfg_join(char *out, size_t n, const char *prefix, const char *key);
/* A short description of a JSON value for "expected X, got Y" messages. */
const char *sl_cfg_describe(const cJSON *v, char *buf, size_t n);

/* ---- parsing -------------------------------------------------------------------------- */

typedef struct {
    const char *name; /* file name for messages */
    char *err;
    size_t errlen;
    bool hf; /* a Hugging Face config.json: unknown keys are ignored */
} sl_cfg_ctx;

/* Formats an error at key path `path`; returns -1. */
int sl_cfg_err(const sl_cfg_ctx *c, const char *path, const char *fmt, ...) SL_PRINTF(3, 4);

/* Typed getters: check the JSON type (and range), or report an error at `path`. */
int sl_cfg_get_integer(const sl_cfg_ctx *c, const cJSON *v, const char *path, double lo, double hi,
                       double *out);
int sl_cfg_get_int(const sl_cfg_ctx *c, const cJSON *v, const char *path, int *out);
int sl_cfg_get_double(const sl_cfg_ctx *c, const cJSON *v, const char *path, double *out);
int sl_cfg_get_bool(const sl_cfg_ctx *c, const cJSON *v, const char *path, bool *out);
int sl_cfg_get_string(const sl_cfg_ctx *c, const cJSON *v, const char *path, char *buf,
                      size_t size);

typedef enum {
    SL_K_INT,
    SL_K_I64,
    SL_K_U64,
    SL_K_DBL,
    SL_K_BOOL,
    SL_K_STR,
    SL_K_FN
} sl_cfg_key_kind;
/* A key that needs its own parsing: v is the value, sec the section struct. */
typedef int (*sl_cfg_key_fn)(const sl_cfg_ctx *c, const cJSON *v, const char *path, void *sec);
/* Writes a function-parsed key's value from the section struct into the JSON object o. */
typedef void (*sl_cfg_emit_fn)(cJSON *o, const char *key, const void *sec);
typedef struct {
    const char *key;
    sl_cfg_key_kind kind;
    size_t off, size;
    sl_cfg_key_fn fn;    /* SL_K_FN: parses the value */
    sl_cfg_emit_fn emit; /* SL_K_FN: writes it back (NULL: the key is input-only) */
} sl_cfg_key;

/* A plain key of struct S stored in `field`; a key parsed by a function and written back by
 * another; an input-only key (informational keys that are checked, then ignored). */
#define SL_KD(S, name, kind, field)                                                                \
    { name, kind, offsetof(S, field), sizeof(((S *)0)->field), NULL, NULL }
#define SL_KFE(name, fn, emit)                                                                     \
    { name, SL_K_FN, 0, 0, fn, emit }
#define SL_KF(name, fn) SL_KFE(name, fn, NULL)
#define SL_NKEYS(t)     ((int)(sizeof(t) / sizeof((t)[0])))

/* Applies every member of `obj` to the section struct `sec` through the key table. Unknown
 * keys are errors (with a "did you mean" hint), except in a Hugging Face config (c->hf). */
int sl_cfg_apply(const sl_cfg_ctx *c, const cJSON *obj, const char *prefix, const sl_cfg_key *defs,
                 int n, void *sec);
/* The inverse of sl_cfg_apply: adds every key of the table, in table order, with its value
 * in `sec` to the JSON object o (function keys through their emit function), so a section
 * is serialized from the same table it is parsed with and a new key cannot be forgotten. */
void sl_cfg_emit(cJSON *o, const sl_cfg_key *defs, int n, const void *sec);
/* obj[key] or NULL (obj may be NULL). */
const cJSON *sl_cfg_member(const cJSON *obj, const char *key);

/* Parses JSON text; on a syntax error reports its line and column and returns NULL. */
cJSON *sl_cfg_parse_json(const char *json, const char *name, char *err, size_t errlen);
/* Prints a tree as indented JSON and frees it (malloc'ed string). */
char *sl_cfg_print(cJSON *root);

/* ---- validation (range and cross-field checks after parsing) ------------------------------ */

typedef struct {
    const char *name;
    const char *prefix; /* "model", "training", ... or "" for a bare HF config */
    char *err;
    size_t errlen;
} sl_cfg_vctx;

/* Formats an error at key prefix.key; returns -1. */
int sl_cfg_verr(const sl_cfg_vctx *v, const char *key, const char *fmt, ...) SL_PRINTF(3, 4);
/* lo <= x <= hi, else an error ("must be positive" when lo is 1). */
int sl_cfg_check_range(const sl_cfg_vctx *v, const char *key, long long x, long long lo,
                       long long hi);
/* 0 <= x < 1; x >= 0 and finite. */
int sl_cfg_check_unit(const sl_cfg_vctx *v, const char *key, double x);
int sl_cfg_check_nonneg(const sl_cfg_vctx *v, const char *key, double x);
/* Whether a fixed-size string field holds its terminating NUL. */
bool sl_cfg_terminated(const char *s, size_t size);

#endif
