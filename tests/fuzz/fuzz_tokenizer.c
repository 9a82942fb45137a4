/*
 * tests/fuzz/fuzz_tokenizer.c - libFuzzer harness for the tokenizer.json loader
 * (io/tokenizer_load.c, tokenizer_pipeline.c, tokenizer_json.c, and the Oniguruma -> PCRE2
 * translation of tokenizer_regex.c) and for encoding with what it accepts (tokenizer_encode.c,
 * tokenizer_bpe.c), built with clang -fsanitize=fuzzer,address,undefined by
 * tests/fuzz/run_fuzz_tokenizer.sh.
 *
 * The input is a tokenizer.json, optionally followed by a NUL byte and a text to encode (at
 * most 4 KiB of it). The file goes through sl_tokenizer_load itself, from a memfd named by its
 * /proc/self/fd path, so the loader runs exactly as on a user's file. A refused file must say
 * so with a message that starts with that path. A loaded one encodes the fuzzed text and a few
 * fixed ones (every added token inside whitespace, digits, CJK, combining marks, a long run),
 * and the harness asserts, besides the sanitizers' checks:
 *   - valid UTF-8 encodes (or fails only in the regex engine, with *bad_offset SIZE_MAX) to ids
 *     that all decode; invalid UTF-8 is refused at an offset inside the text;
 *   - encoding twice with one state (the second time through its word cache), and with the
 *     heap merge loop forced for every piece, gives the same ids;
 *   - without NFC, a prefix space or lstrip/rstrip added tokens, and when no added token decodes
 *     to other bytes than its content, the ids between the post-processor's decode back to the
 *     text exactly (every split of the pre-tokenizer keeps every byte).
 *
 * An input that starts with byte 0x01 (which no JSON text does) is instead a pre-tokenizer
 * pattern, a NUL byte and a text: the pattern goes through the translation and compilation
 * alone (a refusal must name the field), and compiled, it splits the text with encode's match
 * settings, each match non-empty and inside the text. Mutations then reach the translator far
 * more often than inside a whole file.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <utf8proc.h>

#include "io/tokenizer.h"
#include "io/tokenizer_internal.h"
#include "tests/fuzz/fuzz_util.h"

#define MAX_TEXT 4096

/* The ids of text (n bytes) with a fresh state and the heap loop from heap_min bytes on; the
 * encode's return code into *rc. */
static sl_tok_ids encode_fresh(const sl_tokenizer *t, const char *text, size_t n, size_t heap_min,
                               int *rc) {
    const size_t saved = tok_bpe_heap_min;
    tok_bpe_heap_min = heap_min;
    sl_tok_state *s = sl_tok_state_new(t);
    sl_tok_ids v = {0};
    char err[512];
    size_t bad = 0;
    *rc = sl_tokenizer_encode(s, text, n, &v, &bad, err, sizeof err);
    sl_tok_state_free(s);
    tok_bpe_heap_min = saved;
    return v;
}

static bool same_ids(const sl_tok_ids *a, const sl_tok_ids *b) {
    return a->n == b->n && (a->n == 0 || memcmp(a->ids, b->ids, a->n * sizeof *a->ids) == 0);
}

/* Whether decode(encode(text)) must give the text back (see the file comment). */
static bool round_trips(const sl_tokenizer *t) {
    if (t->nfc || t->prefix_space) return false;
    for (int i = 0; i < t->n_added; i++) {
        const tok_added *a = &t->added[i];
        if (a->lstrip || a->rstrip) return false;
        /* an added token decodes through the ByteLevel map when every character of it stands
         * for a byte ("Ġ" -> " "), and then not to the text it matched */
        uint8_t *b = malloc(a->len + 1);
        long k = tok_unmap_string((const char *)a->content, a->len, b);
        bool differs = k >= 0 && ((size_t)k != a->len || memcmp(b, a->content, a->len) != 0);
        free(b);
        if (differs) return false;
    }
    return true;
}

static void check_text(const sl_tokenizer *t, sl_tok_state *s, const char *text, size_t n) {
    sl_tok_ids v = {0};
    char err[512];
    size_t bad = 0;
    const int rc = sl_tokenizer_encode(s, text, n, &v, &bad, err, sizeof err);
    if (rc != 0) {
        /* invalid UTF-8 at an offset inside the text, or the regex engine's failure */
        REQUIRE(rc == -1 && err[0] && (bad < n || bad == SIZE_MAX));
        free(v.ids);
        return;
    }
    REQUIRE(v.n >= (size_t)(t->n_pre + t->n_post));
    for (size_t i = 0; i < v.n; i++) {
        size_t k;
        REQUIRE(v.ids[i] < sl_tokenizer_vocab_size(t) && sl_tokenizer_id_bytes(t, v.ids[i], &k));
    }
    /* the same state again: words now come from its cache */
    sl_tok_ids again = {0};
    REQUIRE(sl_tokenizer_encode(s, text, n, &again, &bad, err, sizeof err) == 0);
    REQUIRE(same_ids(&v, &again));
    free(again.ids);
    /* the heap merge loop on every piece of two bytes or more */
    int hrc;
    sl_tok_ids heap = encode_fresh(t, text, n, 2, &hrc);
    REQUIRE(hrc == 0 && same_ids(&v, &heap));
    free(heap.ids);

    uint8_t *dec = NULL;
    size_t dlen = 0, dcap = 0;
    REQUIRE(sl_tokenizer_decode(t, v.ids, v.n, &dec, &dlen, &dcap, err, sizeof err) == 0);
    /* (an empty text: no ids between the post-processor's) */
    if (n == 0) REQUIRE(v.n == (size_t)(t->n_pre + t->n_post));
    if (round_trips(t) && v.n > (size_t)(t->n_pre + t->n_post)) {
        free(dec);
        dec = NULL, dlen = 0, dcap = 0;
        REQUIRE(sl_tokenizer_decode(t, v.ids + t->n_pre, v.n - (size_t)(t->n_pre + t->n_post), &dec,
                                    &dlen, &dcap, err, sizeof err) == 0);
        if (dlen != n || (n && memcmp(dec, text, n) != 0)) {
            fprintf(stderr,
                    "fuzz_tokenizer: decode(encode(text)) differs: %zu bytes \"%.*s\" for %zu "
                    "bytes \"%.*s\"\n",
                    dlen, (int)(dlen < 200 ? dlen : 200), dec ? (const char *)dec : "", n,
                    (int)(n < 200 ? n : 200), text);
            abort();
        }
    }
    free(dec);
    free(v.ids);
}

static void check_tokenizer(const sl_tokenizer *t, const char *text, size_t tn) {
    const uint32_t vs = sl_tokenizer_vocab_size(t);
    REQUIRE(vs > 0);
    for (int b = 0; b < 256; b++) REQUIRE(t->byte_id[b] < vs);
    for (int i = 0; i < t->n_added; i++) REQUIRE(t->added[i].id < vs && t->added[i].len > 0);
    REQUIRE(sl_tokenizer_token_id(t, "<|endoftext|>", 13) < (int64_t)vs);
    int64_t eod = sl_tokenizer_default_eod(t);
    REQUIRE(eod < (int64_t)vs);
    (void)sl_tokenizer_is_special(t, vs - 1);

    sl_tok_state *s = sl_tok_state_new(t);
    if (text) check_text(t, s, text, tn);
    static const struct {
        const char *s;
        size_t n;
    } fixed[] = {
#define LIT(s) {s, sizeof s - 1}
        LIT("Hello, world! It's 2024: 12345 apples.\n\n  x\tY'LL  "),
        LIT("caf\xC3\xA9 cafe\xCC\x81 \xE4\xBD\xA0\xE5\xA5\xBD \xF0\x9F\x98\x80!"),
        LIT("   \n\r\n\t \xC2\xA0\xE3\x80\x80 end"),
        LIT(""),
        LIT(" "),
        LIT("a\0b"),
        LIT("ok\xC3("), /* invalid UTF-8 */
#undef LIT
    };
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        check_text(t, s, fixed[i].s, fixed[i].n);
    /* every added token (its content as matched), with whitespace and letters around it, so
     * that the matcher, lstrip and rstrip run */
    size_t cap = 64, len = 0;
    char *all = malloc(cap);
    for (int i = 0; i < t->n_added && i < 64; i++) {
        const tok_added *a = &t->added[i];
        if (len + a->len + 8 > cap) all = realloc(all, cap = 2 * (len + a->len + 8));
        memcpy(all + len, " x ", 3);
        memcpy(all + len + 3, a->content, a->len);
        memcpy(all + len + 3 + a->len, "  y", 3);
        len += a->len + 6;
    }
    check_text(t, s, all, len);
    free(all);
    /* a piece of 300 letters: the heap merge loop without forcing it */
    char run[300];
    for (size_t i = 0; i < sizeof run; i++) run[i] = "thea"[i % 4];
    check_text(t, s, run, sizeof run);
    sl_tok_state_free(s);
}

/* The pre-tokenizer regex alone (see the file comment). */
static void regex(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    const size_t pn = nul ? (size_t)(nul - data) : size;
    /* exact-size copies: the translation takes (pattern, length), not a C string */
    char *pat = malloc(pn ? pn : 1);
    memcpy(pat, data, pn);
    tok_regex r;
    char err[1024];
    if (tok_regex_compile(&r, pat, pn, false, "fuzz", "pattern", err, sizeof err) != 0) {
        REQUIRE(strncmp(err, "fuzz: pattern: ", 15) == 0);
        free(pat);
        return;
    }
    free(pat);
    size_t tn = nul ? size - pn - 1 : 0;
    if (tn > MAX_TEXT) tn = MAX_TEXT;
    uint8_t *text = malloc(tn ? tn : 1);
    memcpy(text, nul ? nul + 1 : data, tn);
    /* encode matches valid UTF-8 only (it refuses the rest first) */
    for (size_t i = 0; i < tn;) {
        int32_t c;
        const utf8proc_ssize_t k = utf8proc_iterate(text + i, (utf8proc_ssize_t)(tn - i), &c);
        if (k <= 0) {
            tn = i;
            break;
        }
        i += (size_t)k;
    }
    pcre2_match_data *md = pcre2_match_data_create(1, NULL);
    pcre2_match_context *mctx = pcre2_match_context_create(NULL);
    pcre2_jit_stack *js = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, NULL);
    pcre2_jit_stack_assign(mctx, NULL, js);
    pcre2_set_match_limit(mctx, UINT32_MAX);
    size_t at = 0;
    while (at < tn) {
        const int rc = r.jit ? pcre2_jit_match(r.code, text, tn, at, 0, md, mctx)
                             : pcre2_match(r.code, text, tn, at, PCRE2_NO_UTF_CHECK, md, mctx);
        if (rc < 0) break;
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        REQUIRE(ov[0] >= at && ov[1] > ov[0] && ov[1] <= tn);
        at = ov[1];
    }
    pcre2_jit_stack_free(js);
    pcre2_match_context_free(mctx);
    pcre2_match_data_free(md);
    free(text);
    tok_regex_free(&r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 0 && data[0] == 1) {
        regex(data + 1, size - 1);
        return 0;
    }
    const uint8_t *nul = memchr(data, 0, size);
    const size_t jn = nul ? (size_t)(nul - data) : size;
    const char *in_path = fuzz_file("tokenizer.json", data, jn);
    char err[1024];
    sl_tokenizer *t = sl_tokenizer_load(in_path, err, sizeof err);
    if (!t) {
        REQUIRE(strncmp(err, in_path, strlen(in_path)) == 0);
        return 0;
    }
    /* the text as an exact-size copy, so that a read past it is caught by ASan */
    char *text = NULL;
    size_t tn = 0;
    if (nul) {
        tn = size - jn - 1;
        if (tn > MAX_TEXT) tn = MAX_TEXT;
        text = malloc(tn ? tn : 1);
        memcpy(text, nul + 1, tn);
    }
    check_tokenizer(t, text, tn);
    free(text);
    sl_tokenizer_free(t);
    return 0;
}
