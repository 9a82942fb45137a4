/*
 * io/tokenizer_pipeline.c - the pipeline components of tokenizer.json: normalizer,
 * pre-tokenizer, post-processor and decoder, each loaded into sl_tokenizer or refused with
 * the field named (what is supported: io/tokenizer.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/tokenizer_json.h"

/* ---- normalizer ---- */

int tok_load_normalizer(tok_loader *L, const cJSON *n, const char *field) {
    if (!n || cJSON_IsNull(n)) return 0;
    char f[128];
    const char *type = tok_type_of(L, n, field, f, sizeof f);
    if (!type) return -1;
    if (strcmp(type, "NFC") == 0) {
        static const char *const keys[] = {"type", NULL};
        if (tok_only_keys(L, n, field, keys)) return -1;
        L->t->nfc = true;
        return 0;
    }
    if (strcmp(type, "Sequence") == 0)
        return tok_sequence(L, n, field, "normalizers", tok_load_normalizer);
    return tok_bad(L, f, "\"%s\" is not supported (only NFC, or a Sequence of NFC)", type);
}

/* ---- pre-tokenizer ---- */

static int load_split(tok_loader *L, const cJSON *s, const char *field) {
    sl_tokenizer *t = L->t;
    static const char *const keys[] = {"type", "pattern", "behavior", "invert", NULL};
    if (tok_only_keys(L, s, field, keys)) return -1;
    char f[192];
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(s, "behavior");
    snprintf(f, sizeof f, "%s.behavior", field);
    if (!cJSON_IsString(b) || strcmp(b->valuestring, "Isolated") != 0)
        return tok_bad(L, f, "only \"Isolated\" is supported (got %s)",
                       cJSON_IsString(b) ? b->valuestring : "no string");
    bool invert;
    if (tok_opt_bool(L, s, field, "invert", false, &invert)) return -1;
    snprintf(f, sizeof f, "%s.invert", field);
    if (invert) return tok_bad(L, f, "must be false");
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(s, "pattern");
    snprintf(f, sizeof f, "%s.pattern", field);
    if (!cJSON_IsObject(p) || cJSON_GetArraySize(p) != 1)
        return tok_bad(L, f, "must be {\"Regex\": ...} or {\"String\": ...}");
    const cJSON *re = cJSON_GetObjectItemCaseSensitive(p, "Regex");
    const cJSON *str = cJSON_GetObjectItemCaseSensitive(p, "String");
    const cJSON *v = re ? re : str;
    snprintf(f, sizeof f, "%s.pattern.%s", field, re ? "Regex" : "String");
    if (!cJSON_IsString(v) || !v->valuestring[0])
        return tok_bad(L, f, "must be a non-empty string");
    if (t->n_split == TOK_MAX_SPLITS)
        return tok_bad(L, field, "more than %d Split pre-tokenizers", TOK_MAX_SPLITS);
    return tok_regex_compile(&t->split[t->n_split++], v->valuestring, strlen(v->valuestring), !re,
                             L->file, f, L->err, L->errlen);
}

/* A ByteLevel object (pre-tokenizer, post-processor or decoder): its keys and their types;
 * the pre-tokenizer's settings into *prefix_space and *use_regex. */
static int bytelevel(tok_loader *L, const cJSON *b, const char *field, bool *prefix_space,
                     bool *use_regex) {
    static const char *const keys[] = {"type", "add_prefix_space", "trim_offsets", "use_regex",
                                       NULL};
    if (tok_only_keys(L, b, field, keys)) return -1;
    bool trim;
    return tok_opt_bool(L, b, field, "add_prefix_space", true, prefix_space) ||
                   tok_opt_bool(L, b, field, "trim_offsets", true, &trim) ||
                   tok_opt_bool(L, b, field, "use_regex", true, use_regex)
               ? -1
               : 0;
}

static int load_bytelevel(tok_loader *L, const cJSON *b, const char *field) {
    return bytelevel(L, b, field, &L->t->prefix_space, &L->t->bl_regex);
}

int tok_load_pre_tokenizer(tok_loader *L, const cJSON *p) {
    if (!p || cJSON_IsNull(p))
        return tok_bad(L, "pre_tokenizer",
                       "is null: byte-level BPE needs a ByteLevel pre-tokenizer");
    char f[128];
    const char *type = tok_type_of(L, p, "pre_tokenizer", f, sizeof f);
    if (!type) return -1;
    if (strcmp(type, "ByteLevel") == 0) return load_bytelevel(L, p, "pre_tokenizer");
    if (strcmp(type, "Sequence") != 0)
        return tok_bad(L, f,
                       "\"%s\" is not supported (ByteLevel, or a Sequence of Split and a final "
                       "ByteLevel)",
                       type);
    static const char *const keys[] = {"type", "pretokenizers", NULL};
    if (tok_only_keys(L, p, "pre_tokenizer", keys)) return -1;
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(p, "pretokenizers");
    if (!cJSON_IsArray(list)) return tok_bad(L, "pre_tokenizer.pretokenizers", "must be an array");
    const int n = cJSON_GetArraySize(list);
    for (int i = 0; i < n; i++) {
        const cJSON *it = cJSON_GetArrayItem(list, i);
        char g[96], gt[128];
        snprintf(g, sizeof g, "pre_tokenizer.pretokenizers[%d]", i);
        const char *ty = tok_type_of(L, it, g, gt, sizeof gt);
        if (!ty) return -1;
        if (strcmp(ty, "Split") == 0 && i < n - 1) {
            if (load_split(L, it, g) != 0) return -1;
        } else if (strcmp(ty, "ByteLevel") == 0 && i == n - 1) {
            if (load_bytelevel(L, it, g) != 0) return -1;
        } else {
            return tok_bad(L, gt,
                           "\"%s\" is not supported here (a Sequence of Split pre-tokenizers and a "
                           "final ByteLevel)",
                           ty);
        }
    }
    if (n == 0)
        return tok_bad(L, "pre_tokenizer.pretokenizers", "is empty: it must end with ByteLevel");
    return 0;
}

/* ---- post-processor and decoder ---- */

static int template_ids(tok_loader *L, const cJSON *tp, const char *field) {
    sl_tokenizer *t = L->t;
    static const char *const keys[] = {"type", "single", "pair", "special_tokens", NULL};
    if (tok_only_keys(L, tp, field, keys)) return -1;
    /* pre_ids, not n_pre / n_post: a first template without special tokens leaves those 0 */
    if (t->pre_ids) return tok_bad(L, field, "a second TemplateProcessing is not supported");
    char f[160];
    const cJSON *single = cJSON_GetObjectItemCaseSensitive(tp, "single");
    const cJSON *specials = cJSON_GetObjectItemCaseSensitive(tp, "special_tokens");
    snprintf(f, sizeof f, "%s.single", field);
    if (!cJSON_IsArray(single)) return tok_bad(L, f, "must be an array");
    bool seen_a = false;
    const int n = cJSON_GetArraySize(single);
    t->pre_ids = sl_xcalloc(64, sizeof *t->pre_ids);
    t->post_ids = sl_xcalloc(64, sizeof *t->post_ids);
    for (int i = 0; i < n; i++) {
        const cJSON *it = cJSON_GetArrayItem(single, i);
        snprintf(f, sizeof f, "%s.single[%d]", field, i);
        const cJSON *seq = cJSON_GetObjectItemCaseSensitive(it, "Sequence");
        const cJSON *sp = cJSON_GetObjectItemCaseSensitive(it, "SpecialToken");
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(seq ? seq : sp, "id");
        if (!cJSON_IsObject(it) || cJSON_GetArraySize(it) != 1 || (!seq && !sp) ||
            !cJSON_IsString(id))
            return tok_bad(L, f,
                           "must be {\"Sequence\": {\"id\": \"A\", ...}} or "
                           "{\"SpecialToken\": {\"id\": NAME, ...}}");
        if (seq) {
            if (strcmp(id->valuestring, "A") != 0 || seen_a)
                return tok_bad(L, f, "the single-sequence template must hold sequence A once");
            seen_a = true;
            continue;
        }
        const cJSON *st = cJSON_GetObjectItemCaseSensitive(specials, id->valuestring);
        const cJSON *ids = cJSON_GetObjectItemCaseSensitive(st, "ids");
        char g[320];
        snprintf(g, sizeof g, "%s.special_tokens[\"%.200s\"].ids", field, id->valuestring);
        if (!cJSON_IsArray(ids)) return tok_bad(L, g, "missing (an array of ids)");
        const cJSON *v;
        cJSON_ArrayForEach(v, ids) {
            if (!tok_is_id(v)) return tok_bad(L, g, "must hold integer ids");
            if ((seen_a ? t->n_post : t->n_pre) == 64) return tok_bad(L, g, "too many ids");
            if (seen_a)
                t->post_ids[t->n_post++] = (uint32_t)v->valuedouble;
            else
                t->pre_ids[t->n_pre++] = (uint32_t)v->valuedouble;
        }
    }
    snprintf(f, sizeof f, "%s.single", field);
    if (!seen_a) return tok_bad(L, f, "has no {\"Sequence\": {\"id\": \"A\"}}");
    return 0;
}

int tok_load_post(tok_loader *L, const cJSON *p, const char *field) {
    if (!p || cJSON_IsNull(p)) return 0;
    char f[128];
    const char *type = tok_type_of(L, p, field, f, sizeof f);
    if (!type) return -1;
    bool a, b;
    if (strcmp(type, "ByteLevel") == 0) /* changes offsets only, never ids */
        return bytelevel(L, p, field, &a, &b);
    if (strcmp(type, "TemplateProcessing") == 0) return template_ids(L, p, field);
    if (strcmp(type, "Sequence") == 0)
        return tok_sequence(L, p, field, "processors", tok_load_post);
    return tok_bad(L, f,
                   "\"%s\" is not supported (ByteLevel, TemplateProcessing, or a Sequence of them)",
                   type);
}

int tok_load_decoder(tok_loader *L, const cJSON *d) {
    if (!d || cJSON_IsNull(d))
        return tok_bad(L, "decoder", "is null: byte-level BPE needs the ByteLevel decoder");
    char f[64];
    const char *type = tok_type_of(L, d, "decoder", f, sizeof f);
    if (!type) return -1;
    if (strcmp(type, "ByteLevel") != 0)
        return tok_bad(L, f, "\"%s\" is not supported (only ByteLevel)", type);
    bool a, b;
    return bytelevel(L, d, "decoder", &a, &b);
}
