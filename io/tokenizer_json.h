/*
 * io/tokenizer_json.h - reading tokenizer.json (internal to io/tokenizer_load.c,
 * io/tokenizer_pipeline.c and io/tokenizer_json.c): the loader's state, the checks every field
 * goes through, and the pipeline components' loaders. Every refusal names the file and the
 * field ("tokenizer.json: normalizer.type: ...").
 */
#ifndef SL_IO_TOKENIZER_JSON_H
#define SL_IO_TOKENIZER_JSON_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/log.h"
#include "io/tokenizer_internal.h"

typedef struct {
    sl_tokenizer *t;
    const char *file;
    char *err;
    size_t errlen;
    char **vocab_str;       /* per id: the model token string (NULL: none) */
    uint32_t n_ids;         /* entries of vocab_str */
    tok_strmap added_by_id; /* id (4 bytes) -> index in added_tokens */
} tok_loader;

/* "<file>: <field>: <message>" into L->err; returns -1. */
int tok_bad(tok_loader *L, const char *field, const char *fmt, ...) SL_PRINTF(3, 4);
/* Refuses keys of object o other than the NULL-terminated `known`. */
int tok_only_keys(tok_loader *L, const cJSON *o, const char *field, const char *const *known);
/* The "type" string of component o (f gets "<field>.type"), or NULL with the error. */
const char *tok_type_of(tok_loader *L, const cJSON *o, const char *field, char *f, size_t fn);
/* An optional boolean field (absent or null: def). 0, or -1. */
int tok_opt_bool(tok_loader *L, const cJSON *o, const char *field, const char *key, bool def,
                 bool *out);
/* Whether v is an integer id in [0, SL_TOKENIZER_MAX_VOCAB). */
bool tok_is_id(const cJSON *v);
/* A Sequence component (`type`, and the array `key` of components): fn loads each, its field
 * "<field>.<key>[i]". 0, or -1. */
int tok_sequence(tok_loader *L, const cJSON *o, const char *field, const char *key,
                 int (*fn)(tok_loader *L, const cJSON *item, const char *field));

/* The pipeline's components (io/tokenizer_pipeline.c), each 0 or -1 with the error. */
int tok_load_normalizer(tok_loader *L, const cJSON *n, const char *field);
int tok_load_pre_tokenizer(tok_loader *L, const cJSON *p);
int tok_load_post(tok_loader *L, const cJSON *p, const char *field);
int tok_load_decoder(tok_loader *L, const cJSON *d);

#endif
