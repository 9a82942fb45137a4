/*
 * io/tokenizer_load.c - reads a Hugging Face tokenizer.json into sl_tokenizer's tables
 * (io/tokenizer_internal.h), checking every field it meets: what sluice does not implement
 * exactly is refused with an error naming the field (io/tokenizer.h lists what is supported;
 * docs/data.md, "Tokenizers", says why). This file: the BPE model, the added tokens, the
 * decoding tables, the load itself and the queries; the pipeline components are
 * io/tokenizer_pipeline.c.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "core/fsutil.h"
#include "core/log.h"
#include "io/tokenizer_json.h"

/* ---- model ---- */

static int load_vocab(tok_loader *L, const cJSON *vocab) {
    sl_tokenizer *t = L->t;
    if (!cJSON_IsObject(vocab)) return tok_bad(L, "model.vocab", "must be an object {token: id}");
    uint32_t max_id = 0;
    size_t count = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, vocab) {
        if (!tok_is_id(it)) {
            char f[320];
            snprintf(f, sizeof f, "model.vocab[\"%.200s\"]", it->string);
            return tok_bad(L, f,
                           "the id must be an integer in [0, 2^24) (a model's vocabulary is at "
                           "most 2^24)");
        }
        if ((uint32_t)it->valuedouble > max_id) max_id = (uint32_t)it->valuedouble;
        count++;
    }
    if (count == 0) return tok_bad(L, "model.vocab", "is empty");
    L->n_ids = max_id + 1;
    L->vocab_str = sl_xcalloc(L->n_ids, sizeof *L->vocab_str);
    uint8_t *buf = NULL;
    size_t cap = 0;
    cJSON_ArrayForEach(it, vocab) {
        uint32_t id = (uint32_t)it->valuedouble;
        if (L->vocab_str[id]) {
            char f[320];
            snprintf(f, sizeof f, "model.vocab[\"%.200s\"]", it->string);
            free(buf);
            return tok_bad(L, f, "id %u is also the id of \"%.200s\"", id, L->vocab_str[id]);
        }
        L->vocab_str[id] = it->string;
        size_t n = strlen(it->string);
        sl_xreserve((void **)&buf, &cap, n + 1);
        long b = tok_unmap_string(it->string, n, buf);
        /* a token with a character that stands for no byte can never come out of byte-level
         * BPE; it is still decodable (as its own UTF-8 bytes) */
        if (b >= 0) tok_strmap_put(&t->vocab, buf, (size_t)b, id);
    }
    free(buf);
    for (int b = 0; b < 256; b++) {
        uint8_t byte = (uint8_t)b;
        int64_t id = tok_strmap_get(&t->vocab, &byte, 1);
        if (id < 0)
            return tok_bad(
                L, "model.vocab",
                "has no token for byte 0x%02X (ByteLevel character U+%04X): a byte-level "
                "vocabulary holds all 256",
                b, tok_byte_char(byte));
        t->byte_id[b] = (uint32_t)id;
    }
    return 0;
}

static void merge_put(sl_tokenizer *t, uint32_t a, uint32_t b, uint32_t rank, uint32_t id) {
    const uint64_t key = (uint64_t)a << 32 | b;
    size_t mask = t->merge_cap - 1;
    size_t i = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 20) & mask;
    while (t->merge_key[i] != UINT64_MAX && t->merge_key[i] != key) i = (i + 1) & mask;
    if (t->merge_key[i] == UINT64_MAX) t->n_merges++;
    t->merge_key[i] = key; /* a repeated pair takes its last rank, as Hugging Face's map does */
    t->merge_rank[i] = rank;
    t->merge_id[i] = id;
}

/* The id of byte-level token string s (n bytes) in the model vocabulary, or -1. */
static int64_t model_id(tok_loader *L, const char *s, size_t n, uint8_t *scratch) {
    long b = tok_unmap_string(s, n, scratch);
    return b < 0 ? -1 : tok_strmap_get(&L->t->vocab, scratch, (size_t)b);
}

static int load_merges(tok_loader *L, const cJSON *merges) {
    sl_tokenizer *t = L->t;
    if (!cJSON_IsArray(merges)) return tok_bad(L, "model.merges", "must be an array");
    size_t n = (size_t)cJSON_GetArraySize(merges);
    t->merge_cap = 1024;
    while (t->merge_cap < 2 * n + 2) t->merge_cap *= 2;
    t->merge_key = sl_xmalloc(t->merge_cap * sizeof *t->merge_key);
    memset(t->merge_key, 0xff, t->merge_cap * sizeof *t->merge_key);
    t->merge_rank = sl_xmalloc(t->merge_cap * sizeof *t->merge_rank);
    t->merge_id = sl_xmalloc(t->merge_cap * sizeof *t->merge_id);
    uint8_t *scratch = NULL, *joined = NULL;
    size_t scap = 0, jcap = 0;
    uint32_t rank = 0;
    int rc = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, merges) {
        char f[64];
        snprintf(f, sizeof f, "model.merges[%u]", rank);
        const char *a, *b;
        size_t na, nb;
        char *split = NULL;
        if (cJSON_IsString(m)) {
            /* "a b": byte-level token strings never hold a space (it is Ġ) */
            const char *s = m->valuestring, *sp = strchr(s, ' ');
            if (!sp || strchr(sp + 1, ' ') || sp == s || !sp[1]) {
                rc = tok_bad(L, f, "\"%.200s\" is not two tokens separated by one space", s);
                break;
            }
            split = sl_xstrdup(s);
            split[sp - s] = '\0';
            a = split, na = (size_t)(sp - s), b = split + na + 1, nb = strlen(b);
        } else if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 &&
                   cJSON_IsString(cJSON_GetArrayItem(m, 0)) &&
                   cJSON_IsString(cJSON_GetArrayItem(m, 1))) {
            a = cJSON_GetArrayItem(m, 0)->valuestring, na = strlen(a);
            b = cJSON_GetArrayItem(m, 1)->valuestring, nb = strlen(b);
        } else {
            rc = tok_bad(L, f, "must be a string \"a b\" or an array [\"a\", \"b\"]");
            break;
        }
        sl_xreserve((void **)&scratch, &scap, na + nb + 1);
        int64_t ia = model_id(L, a, na, scratch), ib = model_id(L, b, nb, scratch);
        sl_xreserve((void **)&joined, &jcap, na + nb + 1);
        memcpy(joined, a, na);
        memcpy(joined + na, b, nb);
        int64_t im = model_id(L, (const char *)joined, na + nb, scratch);
        if (ia < 0 || ib < 0 || im < 0) {
            rc = tok_bad(L, f, "the token \"%.*s\" is not a byte-level token of model.vocab",
                         (int)(ia < 0   ? na
                               : ib < 0 ? nb
                                        : na + nb),
                         ia < 0   ? a
                         : ib < 0 ? b
                                  : (const char *)joined);
            free(split);
            break;
        }
        free(split);
        merge_put(t, (uint32_t)ia, (uint32_t)ib, rank, (uint32_t)im);
        rank++;
    }
    free(scratch), free(joined);
    return rc;
}

static int load_model(tok_loader *L, const cJSON *model) {
    char f[64];
    const char *type = tok_type_of(L, model, "model", f, sizeof f);
    if (!type) return -1;
    if (strcmp(type, "BPE") != 0)
        return tok_bad(L, f, "\"%s\" is not supported (only byte-level \"BPE\")", type);
    static const char *const keys[] = {"type",
                                       "dropout",
                                       "unk_token",
                                       "continuing_subword_prefix",
                                       "end_of_word_suffix",
                                       "fuse_unk",
                                       "byte_fallback",
                                       "ignore_merges",
                                       "vocab",
                                       "merges",
                                       NULL};
    if (tok_only_keys(L, model, "model", keys)) return -1;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(model, "dropout");
    if (v && !cJSON_IsNull(v))
        return tok_bad(L, "model.dropout", "must be null: BPE dropout samples different ids");
    static const char *const empty_ok[] = {"continuing_subword_prefix", "end_of_word_suffix", NULL};
    for (int k = 0; empty_ok[k]; k++) {
        v = cJSON_GetObjectItemCaseSensitive(model, empty_ok[k]);
        if (v && !cJSON_IsNull(v) && !(cJSON_IsString(v) && v->valuestring[0] == '\0')) {
            snprintf(f, sizeof f, "model.%s", empty_ok[k]);
            return tok_bad(L, f, "must be null or \"\" (byte-level BPE has no word affixes)");
        }
    }
    v = cJSON_GetObjectItemCaseSensitive(model, "unk_token");
    if (v && !cJSON_IsNull(v) && !cJSON_IsString(v))
        return tok_bad(L, "model.unk_token", "must be a string or null");
    /* unk_token, fuse_unk and byte_fallback act on pieces with a byte missing from the
     * vocabulary; load_vocab requires all 256, so they never act */
    bool flag;
    if (tok_opt_bool(L, model, "model", "fuse_unk", false, &flag) ||
        tok_opt_bool(L, model, "model", "byte_fallback", false, &flag) ||
        tok_opt_bool(L, model, "model", "ignore_merges", false, &L->t->ignore_merges))
        return -1;
    if (load_vocab(L, cJSON_GetObjectItemCaseSensitive(model, "vocab")) != 0) return -1;
    return load_merges(L, cJSON_GetObjectItemCaseSensitive(model, "merges"));
}

/* ---- added tokens ---- */

/* NFC of s (n bytes), malloc'ed, *out_n bytes; NULL on invalid UTF-8. */
static uint8_t *nfc_copy(const uint8_t *s, size_t n, size_t *out_n) {
    utf8proc_uint8_t *d = NULL;
    utf8proc_ssize_t r =
        utf8proc_map(s, (utf8proc_ssize_t)n, &d, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    if (r < 0) return NULL;
    *out_n = (size_t)r;
    return d;
}

static int load_added(tok_loader *L, const cJSON *list) {
    sl_tokenizer *t = L->t;
    if (!list || cJSON_IsNull(list)) return 0;
    if (!cJSON_IsArray(list)) return tok_bad(L, "added_tokens", "must be an array");
    t->added = sl_xcalloc((size_t)cJSON_GetArraySize(list) + 1, sizeof *t->added);
    int i = -1;
    const cJSON *a;
    cJSON_ArrayForEach(a, list) {
        i++;
        char f[64], g[96];
        snprintf(f, sizeof f, "added_tokens[%d]", i);
        if (!cJSON_IsObject(a)) return tok_bad(L, f, "must be an object");
        static const char *const keys[] = {"id",     "content",    "single_word", "lstrip",
                                           "rstrip", "normalized", "special",     NULL};
        if (tok_only_keys(L, a, f, keys)) return -1;
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(a, "id");
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(a, "content");
        snprintf(g, sizeof g, "%s.id", f);
        if (!tok_is_id(id))
            return tok_bad(
                L, g, "must be an integer in [0, 2^24) (a model's vocabulary is at most 2^24)");
        snprintf(g, sizeof g, "%s.content", f);
        if (!cJSON_IsString(c)) return tok_bad(L, g, "must be a string");
        tok_added tk = {.id = (uint32_t)id->valuedouble};
        bool single;
        if (tok_opt_bool(L, a, f, "single_word", false, &single) ||
            tok_opt_bool(L, a, f, "lstrip", false, &tk.lstrip) ||
            tok_opt_bool(L, a, f, "rstrip", false, &tk.rstrip) ||
            tok_opt_bool(L, a, f, "special", false, &tk.special) ||
            tok_opt_bool(L, a, f, "normalized", !tk.special, &tk.normalized))
            return -1;
        snprintf(g, sizeof g, "%s.single_word", f);
        if (single) return tok_bad(L, g, "true is not supported");
        const size_t n = strlen(c->valuestring);
        if (n == 0) continue; /* Hugging Face ignores an empty added token */
        /* a content that is also a model token must have that token's id, which is the id
         * Hugging Face gives it whatever the file says */
        uint8_t *tmp = sl_xmalloc(n + 1);
        int64_t mid = model_id(L, c->valuestring, n, tmp);
        free(tmp);
        if (mid >= 0 && (uint32_t)mid != tk.id) {
            snprintf(g, sizeof g, "%s.id", f);
            return tok_bad(L, g,
                           "%u, but its content \"%.200s\" is model token %lld (Hugging Face would "
                           "use that id)",
                           tk.id, c->valuestring, (long long)mid);
        }
        /* nor may its id be another token's: one id would then stand for two strings (the text
         * of both would encode to it, and it would decode to one of them); Hugging Face would
         * give this token a new id */
        snprintf(g, sizeof g, "%s.id", f);
        if (tk.id < L->n_ids && L->vocab_str[tk.id] && strcmp(L->vocab_str[tk.id], c->valuestring))
            return tok_bad(L, g, "%u is the id of model token \"%.200s\", not of \"%.200s\"", tk.id,
                           L->vocab_str[tk.id], c->valuestring);
        int64_t other = tok_strmap_get(&L->added_by_id, &tk.id, sizeof tk.id);
        if (other >= 0) {
            const cJSON *o =
                cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(list, (int)other), "content");
            if (strcmp(o->valuestring, c->valuestring) != 0)
                return tok_bad(L, g, "%u is also the id of added_tokens[%lld] \"%.200s\"", tk.id,
                               (long long)other, o->valuestring);
        }
        tok_strmap_put(&L->added_by_id, &tk.id, sizeof tk.id, (uint32_t)i);
        tok_strmap_put(&t->added_ids, c->valuestring, n, tk.id);
        if (tk.normalized && t->nfc) {
            tk.content = nfc_copy((const uint8_t *)c->valuestring, n, &tk.len);
            snprintf(g, sizeof g, "%s.content", f);
            if (!tk.content) return tok_bad(L, g, "is not valid UTF-8");
        } else {
            tk.content = sl_xmalloc(n + 1);
            memcpy(tk.content, c->valuestring, n + 1);
            tk.len = n;
        }
        t->added[t->n_added++] = tk;
    }
    return 0;
}

/* The matcher over the added tokens with normalized == which. */
static void build_matcher(sl_tokenizer *t, tok_matcher *m, bool which) {
    memset(m, 0, sizeof *m);
    m->order = sl_xmalloc(((size_t)t->n_added + 1) * sizeof *m->order);
    int count[257] = {0};
    for (int i = 0; i < t->n_added; i++)
        if (t->added[i].normalized == which) count[t->added[i].content[0] + 1]++;
    for (int b = 0; b < 256; b++) count[b + 1] += count[b];
    memcpy(m->first, count, sizeof m->first);
    int fill[256];
    memcpy(fill, count, sizeof fill);
    for (int i = 0; i < t->n_added; i++)
        if (t->added[i].normalized == which) {
            int b = t->added[i].content[0];
            m->order[fill[b]++] = i;
            m->any[b] = 1;
            m->n++;
        }
    /* longest first within a first byte (insertion sort: few tokens share one) */
    for (int b = 0; b < 256; b++)
        for (int i = m->first[b] + 1; i < m->first[b + 1]; i++)
            for (int j = i;
                 j > m->first[b] && t->added[m->order[j]].len > t->added[m->order[j - 1]].len;
                 j--) {
                int x = m->order[j];
                m->order[j] = m->order[j - 1];
                m->order[j - 1] = x;
            }
}

/* ---- tables ---- */

/* The ByteLevel decoder's bytes for token string s: the bytes its characters stand for, or,
 * when some character stands for none, the string's own UTF-8 bytes. */
static size_t decode_string(const char *s, uint8_t *out) {
    size_t n = strlen(s);
    long b = tok_unmap_string(s, n, out);
    if (b >= 0) return (size_t)b;
    memcpy(out, s, n);
    return n;
}

static int build_tables(tok_loader *L, const cJSON *added) {
    sl_tokenizer *t = L->t;
    uint32_t vs = L->n_ids;
    for (int i = 0; i < t->n_added; i++)
        if (t->added[i].id + 1 > vs) vs = t->added[i].id + 1;
    t->vocab_size = vs;
    const char **str = sl_xcalloc(vs, sizeof *str);
    for (uint32_t id = 0; id < L->n_ids; id++) str[id] = L->vocab_str[id];
    t->special = sl_xcalloc(vs, 1);
    const cJSON *a;
    cJSON_ArrayForEach(a, added) {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(a, "content");
        uint32_t id = (uint32_t)cJSON_GetObjectItemCaseSensitive(a, "id")->valuedouble;
        if (!c->valuestring[0]) continue;
        str[id] = c->valuestring; /* an added token decodes as its content */
        t->special[id] = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(a, "special"));
    }
    size_t total = 0;
    for (uint32_t id = 0; id < vs; id++)
        if (str[id]) total += strlen(str[id]);
    t->dec_off = sl_xmalloc(((size_t)vs + 1) * sizeof *t->dec_off);
    t->dec_bytes = sl_xmalloc(total + 1);
    t->has = sl_xcalloc(vs, 1);
    SL_CHECK(total < UINT32_MAX, "token strings exceed 4 GiB");
    size_t at = 0;
    for (uint32_t id = 0; id < vs; id++) {
        t->dec_off[id] = (uint32_t)at;
        if (str[id]) {
            at += decode_string(str[id], t->dec_bytes + at);
            t->has[id] = 1;
        }
    }
    t->dec_off[vs] = (uint32_t)at;
    free(str);
    for (int i = 0; i < t->n_pre + t->n_post; i++) {
        uint32_t id = i < t->n_pre ? t->pre_ids[i] : t->post_ids[i - t->n_pre];
        if (id >= vs || !t->has[id])
            return tok_bad(L, "post_processor", "template id %u is no token of the vocabulary", id);
    }
    build_matcher(t, &t->raw_match, false);
    build_matcher(t, &t->norm_match, true);
    return 0;
}

/* ---- load ---- */

/* The offset of the first byte of text (n bytes) that does not start a valid UTF-8 sequence;
 * n when there is none. */
static size_t invalid_utf8(const char *text, size_t n) {
    const uint8_t *p = (const uint8_t *)text;
    size_t i = 0;
    while (i < n) {
        utf8proc_int32_t c;
        utf8proc_ssize_t used =
            p[i] < 0x80 ? 1 : utf8proc_iterate(p + i, (utf8proc_ssize_t)(n - i), &c);
        if (used <= 0) return i;
        i += (size_t)used;
    }
    return n;
}

sl_tokenizer *sl_tokenizer_load(const char *path, char *err, size_t errlen) {
    bool is_dir;
    char *file = tok_resolve(path, &is_dir, err, errlen);
    if (!file) return NULL;
    size_t len;
    char *text = sl_read_file(file, &len, err, errlen);
    if (!text) {
        free(file);
        return NULL;
    }
    sl_tokenizer *t = sl_xcalloc(1, sizeof *t);
    t->path = file;
    tok_sha256(text, len, t->hash);
    tok_strmap_init(&t->vocab);
    tok_strmap_init(&t->added_ids);
    tok_loader L = {.t = t, .file = file, .err = err, .errlen = errlen};
    tok_strmap_init(&L.added_by_id);
    /* JSON text is UTF-8, and Hugging Face refuses a file that is not; cJSON does not check.
     * Checked here once, every string of the file is valid UTF-8: an added token cannot match
     * inside a character of a text and cut it (NFC and the regexes take whole characters). */
    const size_t bad = invalid_utf8(text, len);
    cJSON *root = bad < len ? NULL : cJSON_ParseWithLength(text, len);
    int rc = 0;
    if (bad < len) {
        rc = sl_fail(err, errlen, "%s: byte offset %zu: not valid UTF-8 (byte 0x%02X)", file, bad,
                     (uint8_t)text[bad]);
    } else if (!root) {
        const char *at = cJSON_GetErrorPtr();
        rc = sl_fail(err, errlen, "%s: byte offset %zu: not valid JSON", file,
                     at && at >= text && at <= text + len ? (size_t)(at - text) : (size_t)0);
    } else if (!cJSON_IsObject(root)) {
        rc = sl_fail(err, errlen, "%s: not a JSON object", file);
    }
    static const char *const keys[] = {
        "version",       "truncation",     "padding", "added_tokens", "normalizer",
        "pre_tokenizer", "post_processor", "decoder", "model",        NULL};
    if (rc == 0) rc = tok_only_keys(&L, root, "", keys);
    if (rc == 0) {
        static const char *const must_null[] = {"truncation", "padding", NULL};
        for (int k = 0; must_null[k] && rc == 0; k++) {
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, must_null[k]);
            if (v && !cJSON_IsNull(v))
                rc = tok_bad(&L, must_null[k], "must be null (it would cut or pad documents)");
        }
    }
    /* the normalizer first: normalized added tokens are matched in their normalized form */
    if (rc == 0)
        rc = tok_load_normalizer(&L, cJSON_GetObjectItemCaseSensitive(root, "normalizer"),
                                 "normalizer");
    if (rc == 0) rc = load_model(&L, cJSON_GetObjectItemCaseSensitive(root, "model"));
    if (rc == 0)
        rc = tok_load_pre_tokenizer(&L, cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"));
    if (rc == 0)
        rc = tok_load_post(&L, cJSON_GetObjectItemCaseSensitive(root, "post_processor"),
                           "post_processor");
    if (rc == 0) rc = tok_load_decoder(&L, cJSON_GetObjectItemCaseSensitive(root, "decoder"));
    const cJSON *added = root ? cJSON_GetObjectItemCaseSensitive(root, "added_tokens") : NULL;
    if (rc == 0) rc = load_added(&L, added);
    if (rc == 0) rc = build_tables(&L, added);
    static const char gpt2[] =
        "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
    if (rc == 0 && t->bl_regex)
        rc = tok_regex_compile(&t->gpt2, gpt2, sizeof gpt2 - 1, false, file,
                               "ByteLevel use_regex (GPT-2's pattern)", err, errlen);
    static const char ws[] = "\\s";
    if (rc == 0)
        rc = tok_regex_compile(&t->ws, ws, sizeof ws - 1, false, file, "(whitespace)", err, errlen);
    cJSON_Delete(root);
    free(L.vocab_str);
    tok_strmap_free(&L.added_by_id);
    free(text);
    if (rc != 0) {
        sl_tokenizer_free(t);
        return NULL;
    }
    return t;
}

void sl_tokenizer_free(sl_tokenizer *t) {
    if (!t) return;
    free(t->path);
    free(t->merge_key), free(t->merge_rank), free(t->merge_id);
    tok_strmap_free(&t->vocab);
    tok_strmap_free(&t->added_ids);
    free(t->dec_off), free(t->dec_bytes), free(t->has), free(t->special);
    for (int i = 0; i < t->n_added; i++) free(t->added[i].content);
    free(t->added);
    free(t->raw_match.order), free(t->norm_match.order);
    for (int i = 0; i < t->n_split; i++) tok_regex_free(&t->split[i]);
    tok_regex_free(&t->gpt2);
    tok_regex_free(&t->ws);
    free(t->pre_ids), free(t->post_ids);
    free(t);
}

/* ---- queries ---- */

const char *sl_tokenizer_path(const sl_tokenizer *t) {
    return t->path;
}
const uint8_t *sl_tokenizer_hash(const sl_tokenizer *t) {
    return t->hash;
}
uint32_t sl_tokenizer_vocab_size(const sl_tokenizer *t) {
    return t->vocab_size;
}

int64_t sl_tokenizer_token_id(const sl_tokenizer *t, const char *s, size_t n) {
    int64_t id = tok_strmap_get(&t->added_ids, s, n);
    if (id >= 0) return id;
    uint8_t *b = sl_xmalloc(n + 1);
    long k = tok_unmap_string(s, n, b);
    id = k < 0 ? -1 : tok_strmap_get(&t->vocab, b, (size_t)k);
    free(b);
    return id;
}

bool sl_tokenizer_is_special(const sl_tokenizer *t, uint32_t id) {
    return id < t->vocab_size && t->special[id];
}

int64_t sl_tokenizer_default_eod(const sl_tokenizer *t) {
    static const char *const names[] = {"<|endoftext|>", "<|end_of_text|>", "</s>", NULL};
    for (int k = 0; names[k]; k++) {
        int64_t id = tok_strmap_get(&t->added_ids, names[k], strlen(names[k]));
        if (id >= 0) return id;
    }
    return -1;
}

const uint8_t *sl_tokenizer_id_bytes(const sl_tokenizer *t, uint32_t id, size_t *n) {
    if (id >= t->vocab_size || !t->has[id]) return NULL;
    *n = t->dec_off[id + 1] - t->dec_off[id];
    return t->dec_bytes + t->dec_off[id];
}

int sl_tokenizer_decode(const sl_tokenizer *t, const uint32_t *ids, size_t n, uint8_t **out,
                        size_t *len, size_t *cap, char *err, size_t errlen) {
    for (size_t i = 0; i < n; i++) {
        size_t k;
        const uint8_t *b = sl_tokenizer_id_bytes(t, ids[i], &k);
        if (!b)
            return sl_fail(err, errlen, "id %u (position %zu) is no token of %s", ids[i], i,
                           t->path);
        sl_xreserve((void **)out, cap, *len + k + 1);
        memcpy(*out + *len, b, k);
        *len += k;
    }
    return 0;
}
