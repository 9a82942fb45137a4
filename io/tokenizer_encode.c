/*
 * io/tokenizer_encode.c - text to ids (the steps of io/tokenizer.h): UTF-8 check, added
 * tokens, NFC, the pre-tokenizer's regex splits, ByteLevel, BPE with a per-thread cache of
 * encoded words, post-processor ids.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "core/log.h"
#include "io/tokenizer_internal.h"

/* The word cache: direct-mapped, fixed-size entries, so a state's memory is bounded (about
 * 6 MiB) whatever it encodes. Words longer than CACHE_KEY bytes or of more than CACHE_IDS
 * tokens are not cached (they are rare, and BPE handles them anyway). */
#define CACHE_SLOTS 65536
#define CACHE_KEY   32
#define CACHE_IDS   15

typedef struct {
    uint8_t klen, nids; /* klen 0: empty */
    uint8_t key[CACHE_KEY];
    uint32_t ids[CACHE_IDS];
} cache_entry;

struct sl_tok_state {
    const sl_tokenizer *t;
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    pcre2_jit_stack *jit_stack;
    tok_bpe_scratch *bpe;
    uint8_t *norm, *pref; /* NFC output; a piece with its prefix space */
    size_t norm_cap, pref_cap;
    cache_entry *cache;
    sl_tok_ids word; /* one word's ids */
    int rc;          /* first regex failure */
    char *err;
    size_t errlen;
};

sl_tok_state *sl_tok_state_new(const sl_tokenizer *t) {
    sl_tok_state *s = sl_xcalloc(1, sizeof *s);
    s->t = t;
    s->md = pcre2_match_data_create(1, NULL);
    s->mctx = pcre2_match_context_create(NULL);
    /* the JIT's own stack, larger than the default 32 KiB, for long pieces */
    s->jit_stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, NULL);
    SL_CHECK(s->md && s->mctx && s->jit_stack, "PCRE2: out of memory");
    pcre2_jit_stack_assign(s->mctx, NULL, s->jit_stack);
    /* no match-step limit: the default (10^7) stops a pattern like Qwen's on a run of about
     * ten million spaces, and the patterns are checked at load time (they run in time linear
     * in such runs) */
    pcre2_set_match_limit(s->mctx, UINT32_MAX);
    s->bpe = tok_bpe_scratch_new();
    s->cache = sl_xcalloc(CACHE_SLOTS, sizeof *s->cache);
    return s;
}

void sl_tok_state_free(sl_tok_state *s) {
    if (!s) return;
    pcre2_match_data_free(s->md);
    pcre2_match_context_free(s->mctx);
    pcre2_jit_stack_free(s->jit_stack);
    tok_bpe_scratch_free(s->bpe);
    free(s->norm), free(s->pref), free(s->cache), free(s->word.ids);
    free(s);
}

/* ---- words ---- */

static void word(sl_tok_state *s, const uint8_t *p, size_t n, sl_tok_ids *out) {
    if (n == 0) return;
    if (n > CACHE_KEY) {
        tok_bpe_word(s->t, s->bpe, p, n, out);
        return;
    }
    uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    cache_entry *e = &s->cache[(h ^ (h >> 29)) & (CACHE_SLOTS - 1)];
    if (e->klen == n && memcmp(e->key, p, n) == 0) {
        if (out->n + e->nids > out->cap) {
            out->cap = 2 * (out->n + e->nids) + 256;
            out->ids = sl_xrealloc(out->ids, out->cap * sizeof *out->ids);
        }
        memcpy(out->ids + out->n, e->ids, e->nids * sizeof *e->ids);
        out->n += e->nids;
        return;
    }
    s->word.n = 0;
    tok_bpe_word(s->t, s->bpe, p, n, &s->word);
    for (size_t i = 0; i < s->word.n; i++) sl_tok_ids_push(out, s->word.ids[i]);
    if (s->word.n <= CACHE_IDS) {
        e->klen = (uint8_t)n;
        e->nids = (uint8_t)s->word.n;
        memcpy(e->key, p, n);
        memcpy(e->ids, s->word.ids, s->word.n * sizeof *e->ids);
    }
}

/* ---- regex splits ---- */

typedef void (*piece_fn)(sl_tok_state *s, int level, const uint8_t *p, size_t n, sl_tok_ids *out);

/* Calls fn for every piece of p[0, n): each match of r and each stretch between matches
 * (Hugging Face's "Isolated" behaviour). The patterns never match the empty string (checked
 * at load time). */
static void split(sl_tok_state *s, const tok_regex *r, int level, const uint8_t *p, size_t n,
                  piece_fn fn, sl_tok_ids *out) {
    size_t prev = 0;
    while (prev < n && s->rc == 0) {
        int rc = r->jit ? pcre2_jit_match(r->code, p, n, prev, 0, s->md, s->mctx)
                        : pcre2_match(r->code, p, n, prev, PCRE2_NO_UTF_CHECK, s->md, s->mctx);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR buf[256];
            pcre2_get_error_message(rc, buf, sizeof buf);
            s->rc = sl_fail(s->err, s->errlen, "the pre-tokenizer regex \"%.120s\" failed: %s",
                            r->source, (const char *)buf);
            return;
        }
        /* copied out first: fn splits the pieces further (the next Split, ByteLevel's GPT-2
         * regex) with the same match data, which overwrites the ovector */
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(s->md);
        const size_t begin = ov[0], end = ov[1];
        SL_CHECK(end > begin, "an empty match of \"%s\"", r->source);
        if (begin > prev) fn(s, level, p + prev, begin - prev, out);
        fn(s, level, p + begin, end - begin, out);
        prev = end;
    }
    if (prev < n && s->rc == 0) fn(s, level, p + prev, n - prev, out);
}

static void gpt2_piece(sl_tok_state *s, int level, const uint8_t *p, size_t n, sl_tok_ids *out) {
    (void)level;
    word(s, p, n, out);
}

/* ByteLevel: the optional prefix space, the optional GPT-2 split, then BPE. */
static void byte_level(sl_tok_state *s, const uint8_t *p, size_t n, sl_tok_ids *out) {
    const sl_tokenizer *t = s->t;
    if (t->prefix_space && p[0] != ' ') {
        sl_xreserve((void **)&s->pref, &s->pref_cap, n + 1);
        s->pref[0] = ' ';
        memcpy(s->pref + 1, p, n);
        p = s->pref;
        n++;
    }
    if (t->bl_regex)
        split(s, &t->gpt2, 0, p, n, gpt2_piece, out);
    else
        word(s, p, n, out);
}

static void pre_tokenize(sl_tok_state *s, int level, const uint8_t *p, size_t n, sl_tok_ids *out) {
    if (n == 0) return;
    if (level < s->t->n_split)
        split(s, &s->t->split[level], level + 1, p, n, pre_tokenize, out);
    else
        byte_level(s, p, n, out);
}

/* ---- added tokens ---- */

/* The length of the White_Space character at p[i] (0 when it is none). */
static size_t space_at(sl_tok_state *s, const uint8_t *p, size_t n, size_t i) {
    const tok_regex *ws = &s->t->ws;
    int rc = pcre2_match(ws->code, p, n, i, PCRE2_ANCHORED | PCRE2_NO_UTF_CHECK, s->md, NULL);
    return rc >= 0 ? pcre2_get_ovector_pointer(s->md)[1] - i : 0;
}

typedef void (*stretch_fn)(sl_tok_state *s, const uint8_t *p, size_t n, sl_tok_ids *out);

/* Splits p[0, n) at the tokens of m (leftmost-longest, Hugging Face's AddedVocabulary): the
 * stretches between them go to fn, the tokens' ids to out. */
static void added_split(sl_tok_state *s, const tok_matcher *m, const uint8_t *p, size_t n,
                        stretch_fn fn, sl_tok_ids *out) {
    const sl_tokenizer *t = s->t;
    size_t from = 0, i = 0;
    while (i < n) {
        if (!m->any[p[i]]) {
            i++;
            continue;
        }
        const tok_added *hit = NULL;
        for (int k = m->first[p[i]]; k < m->first[p[i] + 1] && !hit; k++) {
            const tok_added *a = &t->added[m->order[k]];
            if (a->len <= n - i && memcmp(p + i, a->content, a->len) == 0) hit = a;
        }
        if (!hit) {
            i++;
            continue;
        }
        size_t start = i, stop = i + hit->len;
        if (hit->lstrip) { /* the whitespace before it, down to the previous token's end */
            size_t b = start;
            while (b > from) {
                size_t c = b - 1;
                while (c > from && (p[c] & 0xC0) == 0x80) c--;
                if (space_at(s, p, n, c) != b - c) break;
                b = c;
            }
            start = b;
        }
        if (hit->rstrip) {
            size_t w;
            while (stop < n && (w = space_at(s, p, n, stop)) > 0) stop += w;
        }
        if (start > from) fn(s, p + from, start - from, out);
        sl_tok_ids_push(out, hit->id);
        /* the search goes on after the token itself, as Aho-Corasick's does, even when rstrip
         * took whitespace beyond it */
        i += hit->len;
        from = stop;
    }
    if (from < n) fn(s, p + from, n - from, out);
}

static void normalized_stretch(sl_tok_state *s, const uint8_t *p, size_t n, sl_tok_ids *out) {
    pre_tokenize(s, 0, p, n, out);
}

/* NFC of p[0, n) into s->norm. Every ASCII character starts a new normalization segment (it
 * has canonical combining class 0 and never composes with what precedes it), so only runs of
 * non-ASCII characters, with the ASCII character just before them, go through utf8proc. */
static size_t nfc(sl_tok_state *s, const uint8_t *p, size_t n) {
    size_t out = 0, k = 0;
    sl_xreserve((void **)&s->norm, &s->norm_cap, n + 1);
    while (k < n) {
        if (p[k] < 0x80 && (k + 1 == n || p[k + 1] < 0x80)) {
            size_t e = k + 1;
            while (e < n && p[e] < 0x80 && (e + 1 == n || p[e + 1] < 0x80)) e++;
            sl_xreserve((void **)&s->norm, &s->norm_cap, out + (e - k) + 1);
            memcpy(s->norm + out, p + k, e - k);
            out += e - k;
            k = e;
            continue;
        }
        size_t u = k;
        if (p[k] < 0x80) k++;
        while (k < n && p[k] >= 0x80) k++;
        utf8proc_uint8_t *d = NULL;
        utf8proc_ssize_t r =
            utf8proc_map(p + u, (utf8proc_ssize_t)(k - u), &d, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
        SL_CHECK(r >= 0, "utf8proc_map: %s", utf8proc_errmsg(r));
        sl_xreserve((void **)&s->norm, &s->norm_cap, out + (size_t)r + 1);
        memcpy(s->norm + out, d, (size_t)r);
        out += (size_t)r;
        free(d);
    }
    return out;
}

/* A stretch of the text between non-normalized added tokens. */
static void raw_stretch(sl_tok_state *s, const uint8_t *p, size_t n, sl_tok_ids *out) {
    const sl_tokenizer *t = s->t;
    if (t->nfc) {
        n = nfc(s, p, n);
        p = s->norm;
    }
    if (t->norm_match.n)
        added_split(s, &t->norm_match, p, n, normalized_stretch, out);
    else
        pre_tokenize(s, 0, p, n, out);
}

/* ---- the text ---- */

/* The offset of the first byte that does not start a valid UTF-8 sequence (n: none).
 * utf8proc_iterate rejects overlong forms, surrogates and code points past U+10FFFF. */
static size_t invalid_utf8(const uint8_t *p, size_t n) {
    size_t i = 0;
    while (i < n) {
        if (p[i] < 0x80) {
            i++;
            continue;
        }
        utf8proc_int32_t c;
        utf8proc_ssize_t used = utf8proc_iterate(p + i, (utf8proc_ssize_t)(n - i), &c);
        if (used <= 0) return i;
        i += (size_t)used;
    }
    return n;
}

int sl_tokenizer_encode(sl_tok_state *s, const char *text, size_t len, sl_tok_ids *out,
                        size_t *bad_offset, char *err, size_t errlen) {
    const sl_tokenizer *t = s->t;
    const uint8_t *p = (const uint8_t *)text;
    size_t bad = invalid_utf8(p, len);
    if (bad < len) {
        if (bad_offset) *bad_offset = bad;
        return sl_fail(err, errlen, "byte offset %zu: invalid UTF-8 (byte 0x%02X)", bad, p[bad]);
    }
    s->rc = 0;
    s->err = err;
    s->errlen = errlen;
    for (int i = 0; i < t->n_pre; i++) sl_tok_ids_push(out, t->pre_ids[i]);
    if (t->raw_match.n)
        added_split(s, &t->raw_match, p, len, raw_stretch, out);
    else if (len)
        raw_stretch(s, p, len, out);
    for (int i = 0; i < t->n_post; i++) sl_tok_ids_push(out, t->post_ids[i]);
    if (s->rc != 0 && bad_offset) *bad_offset = SIZE_MAX;
    return s->rc;
}
