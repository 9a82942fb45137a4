/*
 * io/tokenizer_internal.h - the loaded tokenizer's tables, shared by io/tokenizer_*.c (and the
 * unit test). Users include io/tokenizer.h.
 *
 * Everything works on raw bytes: the ByteLevel map (bytes <-> printable characters, GPT-2's
 * bytes_to_unicode) is a bijection, so a token string of the file is stored as the bytes it
 * stands for, and BPE runs on the text's own bytes, never on the mapped characters.
 */
#ifndef SL_IO_TOKENIZER_INTERNAL_H
#define SL_IO_TOKENIZER_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "io/tokenizer.h"

#define TOK_MAX_SPLITS 8 /* Split pre-tokenizers in a Sequence */

/* Byte strings -> id, open addressing (built once at load time, read-only afterwards). */
typedef struct {
    uint32_t *slot; /* cap entries: entry index + 1, 0 = empty */
    size_t cap;     /* a power of two */
    uint32_t *off, *len, *val;
    size_t n, ncap;
    uint8_t *bytes; /* the keys, back to back */
    size_t used, bcap;
} tok_strmap;

/* An empty map; and its memory freed (the map is empty again). */
void tok_strmap_init(tok_strmap *m);
void tok_strmap_free(tok_strmap *m);
/* Sets key -> val (replacing an existing value). */
void tok_strmap_put(tok_strmap *m, const void *key, size_t n, uint32_t val);
/* The value of key, or -1. */
int64_t tok_strmap_get(const tok_strmap *m, const void *key, size_t n);
uint64_t tok_hash_bytes(const void *p, size_t n);

/* An added token (tokenizer.json "added_tokens"). */
typedef struct {
    uint8_t *content; /* as matched: the normalized content for `normalized` tokens */
    size_t len;
    uint32_t id;
    bool lstrip, rstrip, normalized, special;
} tok_added;

/* The added tokens matched in one pass: leftmost-longest over byte strings, the candidates of
 * each first byte sorted longest first. */
typedef struct {
    int *order;       /* indices into sl_tokenizer.added, grouped by first byte */
    int first[257];   /* order[first[b] .. first[b + 1]) start with byte b */
    uint8_t any[256]; /* whether some token starts with byte b */
    int n;
} tok_matcher;

/* A compiled pre-tokenizer regex. */
typedef struct {
    pcre2_code *code;
    bool jit;
    char *source; /* the pattern as written in tokenizer.json, for messages */
} tok_regex;

struct sl_tokenizer {
    char *path;
    uint8_t hash[SL_TOKENIZER_HASH_BYTES];
    uint32_t vocab_size; /* max id + 1 */

    /* model (BPE) */
    uint32_t byte_id[256]; /* the token of each single byte */
    uint64_t *merge_key;   /* (left << 32 | right), UINT64_MAX = empty slot */
    uint32_t *merge_rank, *merge_id;
    size_t merge_cap; /* a power of two */
    size_t n_merges;
    bool ignore_merges; /* a piece that is a vocabulary token is that token */
    tok_strmap vocab;   /* token bytes -> id (model vocabulary) */

    /* decoding: the bytes of each id (dec_off[id] .. dec_off[id + 1]); has[id] = 0 for holes */
    uint32_t *dec_off;
    uint8_t *dec_bytes;
    uint8_t *has;
    uint8_t *special; /* per id: an added token marked special */

    /* added tokens */
    tok_added *added;
    int n_added;
    tok_matcher raw_match, norm_match; /* not normalized / normalized tokens */
    tok_strmap added_ids;              /* content (as in the file) -> id */

    /* normalizer */
    bool nfc;

    /* pre-tokenizer: Split regexes (Isolated), then ByteLevel */
    tok_regex split[TOK_MAX_SPLITS];
    int n_split;
    bool prefix_space; /* ByteLevel add_prefix_space */
    bool bl_regex;     /* ByteLevel use_regex: GPT-2's pattern */
    tok_regex gpt2;    /* compiled when bl_regex */
    tok_regex ws;      /* \p{White_Space} (added tokens' lstrip / rstrip) */

    /* post-processor: ids before and after every encoded text */
    uint32_t *pre_ids, *post_ids;
    int n_pre, n_post;
};

/* SHA-256 of n bytes. */
void tok_sha256(const void *data, size_t n, uint8_t out[SL_TOKENIZER_HASH_BYTES]);
/* The tokenizer.json that path names: path itself, or path/tokenizer.json for a directory
 * (*is_dir). Malloc'ed, or NULL with err. */
char *tok_resolve(const char *path, bool *is_dir, char *err, size_t errlen);

/* The bytes <-> ByteLevel characters map: the code point of byte b, and the byte of code
 * point c (-1 when c stands for no byte). */
uint32_t tok_byte_char(uint8_t b);
int tok_char_byte(uint32_t c);
/* A token string of the file as bytes: every character must stand for a byte. Returns the
 * byte count, or -1 when some character does not (out has room for n bytes). */
long tok_unmap_string(const char *s, size_t n, uint8_t *out);

/* Translates an Oniguruma pattern (tokenizer.json's syntax) to PCRE2 and compiles it with JIT.
 * `field` names the JSON field for messages. 0, or -1 with err. */
int tok_regex_compile(tok_regex *r, const char *pattern, size_t n, bool literal, const char *file,
                      const char *field, char *err, size_t errlen);
void tok_regex_free(tok_regex *r);
/* The PCRE2 source sl translates `pattern` to (malloc'ed), or NULL with err naming the offset
 * of the first construct it refuses. Exposed for the unit test. */
char *tok_regex_translate(const char *pattern, size_t n, char *err, size_t errlen);

/* BPE of one piece (raw bytes) into out. */
typedef struct tok_bpe_scratch tok_bpe_scratch;
tok_bpe_scratch *tok_bpe_scratch_new(void);
void tok_bpe_scratch_free(tok_bpe_scratch *s);
void tok_bpe_word(const sl_tokenizer *t, tok_bpe_scratch *s, const uint8_t *p, size_t n,
                  sl_tok_ids *out);
/* Pieces of at least this many bytes use the heap merge loop, shorter ones the linear scan
 * (both give the same ids; the unit test lowers it to compare them). */
extern size_t tok_bpe_heap_min;

/* The merge of adjacent tokens a, b: its rank and the merged id; false when none. */
static inline bool tok_merge_find(const sl_tokenizer *t, uint32_t a, uint32_t b, uint32_t *rank,
                                  uint32_t *id) {
    const uint64_t key = (uint64_t)a << 32 | b;
    size_t mask = t->merge_cap - 1;
    size_t i = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 20) & mask;
    for (;;) {
        uint64_t k = t->merge_key[i];
        if (k == key) {
            *rank = t->merge_rank[i];
            *id = t->merge_id[i];
            return true;
        }
        if (k == UINT64_MAX) return false;
        i = (i + 1) & mask;
    }
}

#endif
