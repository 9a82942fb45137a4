/* tests/test_tokenizer.c - io/tokenizer.h on small hand-made tokenizer.json files: merge order
 * (rank, then leftmost), the linear and heap merge loops agreeing, the GPT-2 pre-tokenizer
 * split, added tokens (longest match, lstrip/rstrip, normalized ones under NFC), NFC,
 * ignore_merges, TemplateProcessing, decoding, invalid UTF-8 refused at its offset, a Split
 * with a String pattern, Splits inside Splits, the Oniguruma -> PCRE2 translation, and every
 * refused field named in the load error (those two in tests/test_tokenizer_load.c, part of
 * the same program). The ids expected here follow from the hand-made merges below; the
 * exactness against Hugging Face on real tokenizers is tests/test_tokenizer_hf.sh. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <utf8proc.h>

#include "core/log.h"
#include "io/build.h"
#include "io/shard.h"
#include "io/tokenizer.h"
#include "io/tokenizer_internal.h"
#include "tests/test_tokenizer.h"
#include "tests/test_util.h"

char tt_dir[256];

/* The ByteLevel string of byte b. */
void tt_byte_str(uint8_t b, char out[8]) {
    utf8proc_ssize_t n =
        utf8proc_encode_char((utf8proc_int32_t)tok_byte_char(b), (utf8proc_uint8_t *)out);
    out[n] = '\0';
}

/* The ByteLevel string of text s. */
void tt_bl(const char *s, char *out) {
    out[0] = '\0';
    for (; *s; s++) {
        char c[8];
        tt_byte_str((uint8_t)*s, c);
        strcat(out, c);
    }
}

/* Vocabulary: byte b has id b; then ab 256, bc 257, abc 258, aa 259, ca 260 (no merge makes
 * it), "Ġab" 261. Merges by rank: a+b, b+c, ab+c, a+a, Ġ+ab. */
cJSON *tt_base(void) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "version", "1.0");
    cJSON_AddNullToObject(root, "truncation");
    cJSON_AddNullToObject(root, "padding");
    cJSON_AddArrayToObject(root, "added_tokens");
    cJSON_AddNullToObject(root, "normalizer");
    cJSON *pre = cJSON_AddObjectToObject(root, "pre_tokenizer");
    cJSON_AddStringToObject(pre, "type", "ByteLevel");
    cJSON_AddFalseToObject(pre, "add_prefix_space");
    cJSON_AddTrueToObject(pre, "trim_offsets");
    cJSON_AddTrueToObject(pre, "use_regex");
    cJSON_AddNullToObject(root, "post_processor");
    cJSON *dec = cJSON_AddObjectToObject(root, "decoder");
    cJSON_AddStringToObject(dec, "type", "ByteLevel");
    cJSON *m = cJSON_AddObjectToObject(root, "model");
    cJSON_AddStringToObject(m, "type", "BPE");
    cJSON_AddNullToObject(m, "dropout");
    cJSON_AddNullToObject(m, "unk_token");
    cJSON_AddStringToObject(m, "continuing_subword_prefix", "");
    cJSON_AddStringToObject(m, "end_of_word_suffix", "");
    cJSON_AddFalseToObject(m, "fuse_unk");
    cJSON_AddFalseToObject(m, "byte_fallback");
    cJSON *v = cJSON_AddObjectToObject(m, "vocab");
    for (int b = 0; b < 256; b++) {
        char s[8];
        tt_byte_str((uint8_t)b, s);
        cJSON_AddNumberToObject(v, s, b);
    }
    const char *extra[] = {"ab", "bc", "abc", "aa", "ca", " ab"};
    for (int i = 0; i < 6; i++) {
        char s[64];
        tt_bl(extra[i], s);
        cJSON_AddNumberToObject(v, s, 256 + i);
    }
    cJSON *mg = cJSON_AddArrayToObject(m, "merges");
    const char *pairs[][2] = {{"a", "b"}, {"b", "c"}, {"ab", "c"}, {"a", "a"}, {" ", "ab"}};
    for (int i = 0; i < 5; i++) {
        char a[64], b[64], s[130];
        tt_bl(pairs[i][0], a);
        tt_bl(pairs[i][1], b);
        snprintf(s, sizeof s, "%s %s", a, b);
        cJSON_AddItemToArray(mg, cJSON_CreateString(s));
    }
    return root;
}

void tt_add_token(cJSON *root, int id, const char *content, bool special, bool normalized,
                  bool lstrip, bool rstrip) {
    cJSON *a = cJSON_CreateObject();
    cJSON_AddNumberToObject(a, "id", id);
    cJSON_AddStringToObject(a, "content", content);
    cJSON_AddFalseToObject(a, "single_word");
    cJSON_AddBoolToObject(a, "lstrip", lstrip);
    cJSON_AddBoolToObject(a, "rstrip", rstrip);
    cJSON_AddBoolToObject(a, "normalized", normalized);
    cJSON_AddBoolToObject(a, "special", special);
    cJSON_AddItemToArray(cJSON_GetObjectItemCaseSensitive(root, "added_tokens"), a);
}

/* Writes root (consumed) to tt_dir/name and loads it; NULL with the message in err. */
sl_tokenizer *tt_load_json(cJSON *root, const char *name, char *err, size_t n) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", tt_dir, name);
    char *s = cJSON_PrintUnformatted(root);
    FILE *f = fopen(path, "wb");
    fputs(s, f);
    fclose(f);
    cJSON_free(s);
    cJSON_Delete(root);
    return sl_tokenizer_load(path, err, n);
}

static int encode(sl_tokenizer *t, const char *text, size_t len, uint32_t *ids, int max) {
    sl_tok_state *s = sl_tok_state_new(t);
    sl_tok_ids v = {0};
    char err[512];
    size_t bad;
    int n = sl_tokenizer_encode(s, text, len, &v, &bad, err, sizeof err) == 0 ? (int)v.n : -1;
    for (int i = 0; i < n && i < max; i++) ids[i] = v.ids[i];
    free(v.ids);
    sl_tok_state_free(s);
    return n;
}

#define EXPECT(t, text, ...)                                                                       \
    do {                                                                                           \
        const uint32_t want[] = {__VA_ARGS__};                                                     \
        const int nw = (int)(sizeof want / sizeof want[0]);                                        \
        uint32_t got[64];                                                                          \
        int ng = encode(t, text, strlen(text), got, 64);                                           \
        bool same = ng == nw;                                                                      \
        for (int i_ = 0; same && i_ < nw; i_++) same = got[i_] == want[i_];                        \
        CHECK(same, "encode(\"%s\"): %d ids, first %u (want %d, first %u)", text, ng,              \
              ng > 0 ? got[0] : 0, nw, want[0]);                                                   \
    } while (0)

static void test_merges(void) {
    char err[1024];
    sl_tokenizer *t = tt_load_json(tt_base(), "base.json", err, sizeof err);
    CHECK(t, "load: %s", err);
    if (!t) return;
    CHECK(sl_tokenizer_vocab_size(t) == 262, "vocab %u", sl_tokenizer_vocab_size(t));
    EXPECT(t, "abc", 258);              /* a+b (rank 0), then ab+c (rank 2) */
    EXPECT(t, "bcab", 257, 256);        /* a+b first (rank 0), then b+c; bc+ab has no merge */
    EXPECT(t, "aaa", 259, 'a');         /* equal ranks: the leftmost pair first */
    EXPECT(t, "aaaa", 259, 259);        /* aa a a -> aa aa */
    EXPECT(t, "ca", 'c', 'a');          /* a token no merge reaches */
    EXPECT(t, "ab ab", 256, 261);       /* GPT-2 split: "ab", " ab"; Ġ+ab is rank 4 */
    EXPECT(t, "ab  ab", 256, ' ', 261); /* "\s+(?!\S)" leaves the last space to " ab" */
    EXPECT(t, "x\xC3\xA9", 'x', 0xC3, 0xA9);
    CHECK(sl_tokenizer_token_id(t,
                                "\xC4\xA0"
                                "ab",
                                4) == 261,
          "token_id(Ġab)"); /* Ġab */
    CHECK(sl_tokenizer_token_id(t, "zz", 2) == -1, "token_id(zz)");
    CHECK(sl_tokenizer_default_eod(t) == -1, "no default eod");
    size_t n;
    const uint8_t *b = sl_tokenizer_id_bytes(t, 261, &n);
    CHECK(b && n == 3 && memcmp(b, " ab", 3) == 0, "decode 261");
    CHECK(sl_tokenizer_id_bytes(t, 262, &n) == NULL, "decode past the vocabulary");

    /* the heap loop against the linear scan on many words over {a, b, c, space} */
    const size_t saved = tok_bpe_heap_min;
    uint64_t x = 88172645463325252ull;
    int mismatches = 0;
    for (int w = 0; w < 400; w++) {
        char s[200];
        int len = 1 + w % 150;
        for (int i = 0; i < len; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            s[i] = "abca "[x % 5];
        }
        s[len] = '\0';
        uint32_t a[256], h[256];
        tok_bpe_heap_min = SIZE_MAX;
        int na = encode(t, s, (size_t)len, a, 256);
        tok_bpe_heap_min = 2;
        int nh = encode(t, s, (size_t)len, h, 256);
        if (na != nh || memcmp(a, h, (size_t)na * 4) != 0) mismatches++;
    }
    tok_bpe_heap_min = saved;
    CHECK(mismatches == 0, "heap and linear BPE differ on %d words", mismatches);

    /* invalid UTF-8 is refused at its byte offset */
    const struct {
        const char *s;
        size_t len, at;
    } badutf[] = {{"ab\xff", 3, 2},
                  {"\xed\xa0\x80", 3, 0}, /* a surrogate */
                  {"x\xc0\xaf", 3, 1},
                  {"\xe4\xb8", 2, 0},            /* overlong; truncated */
                  {"ok\xf4\x90\x80\x80", 6, 2}}; /* past U+10FFFF */
    for (size_t i = 0; i < sizeof badutf / sizeof badutf[0]; i++) {
        sl_tok_state *s = sl_tok_state_new(t);
        sl_tok_ids v = {0};
        size_t at = 999;
        int rc = sl_tokenizer_encode(s, badutf[i].s, badutf[i].len, &v, &at, err, sizeof err);
        CHECK(rc == -1 && at == badutf[i].at && strstr(err, "invalid UTF-8"),
              "invalid UTF-8 case %zu: rc %d at %zu: %s", i, rc, at, err);
        free(v.ids);
        sl_tok_state_free(s);
    }
    uint32_t ids[8];
    CHECK(encode(t, "a\0b", 3, ids, 8) == 3 && ids[1] == 0, "a NUL byte is text");
    sl_tokenizer_free(t);
}

static void test_added_and_normalizer(void) {
    char err[1024];
    cJSON *root = tt_base();
    tt_add_token(root, 300, "<x>", true, false, false, false);
    tt_add_token(root, 301, "<xy>", true, false, false, false);
    tt_add_token(root, 302, "<l>", false, false, true, false);
    tt_add_token(root, 303, "<r>", false, false, false, true);
    tt_add_token(root, 304, "e\xCC\x81!", false, true, false, false); /* NFD e + U+0301, "!" */
    tt_add_token(root, 305, "<|endoftext|>", true, false, false, false);
    cJSON_ReplaceItemInObjectCaseSensitive(root, "normalizer", cJSON_Parse("{\"type\":\"NFC\"}"));
    cJSON_ReplaceItemInObjectCaseSensitive(
        root, "post_processor",
        cJSON_Parse("{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":"
                    "\"<x>\",\"type_id\":0}},{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],"
                    "\"pair\":[],\"special_tokens\":{\"<x>\":{\"id\":\"<x>\",\"ids\":[300],"
                    "\"tokens\":[\"<x>\"]}}}"));
    sl_tokenizer *t = tt_load_json(root, "added.json", err, sizeof err);
    CHECK(t, "load: %s", err);
    if (!t) return;
    CHECK(sl_tokenizer_vocab_size(t) == 306, "vocab %u", sl_tokenizer_vocab_size(t));
    CHECK(sl_tokenizer_default_eod(t) == 305, "default eod");
    CHECK(sl_tokenizer_is_special(t, 300) && !sl_tokenizer_is_special(t, 302), "special flags");
    EXPECT(t, "ab<x>ab", 300, 256, 300, 256);    /* the template's <x> first */
    EXPECT(t, "<xy>c", 300, 301, 'c');           /* the longest token */
    EXPECT(t, "<x", 300, '<', 'x');              /* no token */
    EXPECT(t, "ab  <l>ab", 300, 256, 302, 256);  /* lstrip takes the two spaces */
    EXPECT(t, "ab<r>\t ab", 300, 256, 303, 256); /* rstrip takes tab and space */
    EXPECT(t, "ab<x>  <l>", 300, 256, 300, 302); /* lstrip stops at the previous token */
    EXPECT(t, "e\xCC\x81!x", 300, 304, 'x');     /* NFD text: normalized, then matched */
    EXPECT(t, "\xC3\xA9!x", 300, 304, 'x');      /* NFC text */
    EXPECT(t, "e\xCC\x81", 300, 0xC3, 0xA9);     /* NFC composes e + U+0301 */
    EXPECT(t, "a\xCC\x81", 300, 0xC3, 0xA1);     /* a + U+0301 -> U+00E1 */
    EXPECT(t, "", 300);
    size_t n;
    const uint8_t *b = sl_tokenizer_id_bytes(t, 305, &n);
    CHECK(b && n == 13 && memcmp(b, "<|endoftext|>", 13) == 0, "decode an added token");
    /* decode(encode(text)): the template's <x>, then the text (NFC: e + U+0301 composed) */
    uint32_t ids[32];
    const char *text = "ab <l>\t<x>e\xCC\x81 the";
    int k = encode(t, text, strlen(text), ids, 32);
    uint8_t *dec = NULL;
    size_t dlen = 0, dcap = 0;
    CHECK(k > 0 &&
              sl_tokenizer_decode(t, ids, (size_t)k, &dec, &dlen, &dcap, err, sizeof err) == 0 &&
              dlen == strlen("<x>ab<l>\t<x>\xC3\xA9 the") &&
              memcmp(dec, "<x>ab<l>\t<x>\xC3\xA9 the", dlen) == 0,
          "decode(encode(text)): %.*s", (int)dlen, dec ? (char *)dec : "");
    const uint32_t bad_ids[] = {97, 999};
    CHECK(sl_tokenizer_decode(t, bad_ids, 2, &dec, &dlen, &dcap, err, sizeof err) == -1 &&
              strstr(err, "id 999 (position 1) is no token"),
          "decode of an id past the vocabulary: %s", err);
    free(dec);
    sl_tokenizer_free(t);

    /* ignore_merges: a piece that is a vocabulary token is that token */
    root = tt_base();
    cJSON_AddTrueToObject(cJSON_GetObjectItemCaseSensitive(root, "model"), "ignore_merges");
    t = tt_load_json(root, "ignore.json", err, sizeof err);
    CHECK(t, "load: %s", err);
    if (t) {
        EXPECT(t, "ca", 260);
        EXPECT(t, "cab", 'c', 256); /* not a token: BPE */
        sl_tokenizer_free(t);
    }

    /* a Split regex (Oniguruma syntax) before ByteLevel without its regex, merges as pairs,
     * and the tokenizer found in its directory */
    root = tt_base();
    cJSON_ReplaceItemInObjectCaseSensitive(
        root, "pre_tokenizer",
        cJSON_Parse("{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{"
                    "\"Regex\":\"\\\\p{N}{1,2}|[^\\\\s\\\\p{N}]+|\\\\s+\"},\"behavior\":"
                    "\"Isolated\",\"invert\":false},{\"type\":\"ByteLevel\",\"add_prefix_space\":"
                    "true,\"trim_offsets\":false,\"use_regex\":false}]}"));
    cJSON *mg =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "model"), "merges");
    cJSON *pairs = cJSON_CreateArray();
    for (cJSON *it = mg->child; it; it = it->next) {
        char *a = sl_xstrdup(it->valuestring), *sp = strchr(a, ' ');
        *sp = '\0';
        cJSON *p = cJSON_CreateArray();
        cJSON_AddItemToArray(p, cJSON_CreateString(a));
        cJSON_AddItemToArray(p, cJSON_CreateString(sp + 1));
        cJSON_AddItemToArray(pairs, p);
        free(a);
    }
    cJSON_ReplaceItemInObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "model"),
                                           "merges", pairs);
    char sub[300];
    snprintf(sub, sizeof sub, "%s/dir", tt_dir);
    mkdir(sub, 0755);
    t = tt_load_json(root, "dir/tokenizer.json", err, sizeof err);
    sl_tokenizer_free(t);
    t = sl_tokenizer_load(sub, err, sizeof err);
    CHECK(t, "load from the directory: %s", err);
    if (t) {
        /* pieces "ab", "12", "3", " ", "ab"; each gets a prefix space unless it has one */
        EXPECT(t, "ab123 ab", 261, ' ', '1', '2', ' ', '3', ' ', 261);
        sl_tokenizer_free(t);
    }
}

/* A Split with a String pattern: the string is matched literally (its '.' is a dot). Every
 * String pattern used to be refused: PCRE2 does not take PCRE2_NEVER_BACKSLASH_C with
 * PCRE2_LITERAL ("invalid option bits"). */
static void test_string_split(void) {
    char err[1024];
    cJSON *root = tt_base();
    cJSON_ReplaceItemInObjectCaseSensitive(
        root, "pre_tokenizer",
        cJSON_Parse("{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{"
                    "\"String\":\".\"},\"behavior\":\"Isolated\"},{\"type\":\"ByteLevel\","
                    "\"add_prefix_space\":false,\"use_regex\":false}]}"));
    sl_tokenizer *t = tt_load_json(root, "string.json", err, sizeof err);
    CHECK(t, "load: %s", err);
    if (!t) return;
    EXPECT(t, "abc", 258);            /* no dot: one piece */
    EXPECT(t, "a.bc", 'a', '.', 257); /* split at the dot only */
    sl_tokenizer_free(t);
}

/* A Split whose pieces are split again (a second Split, or ByteLevel's GPT-2 regex) must keep
 * its own match: the nested split used to overwrite the shared match data, so the piece after
 * a gap was taken from the inner match (ids repeated, bytes lost) or the scan went back and
 * never ended. tests/fuzz/fuzz_tokenizer.c found it on a DeepSeek-V3-like Sequence of Splits. */
static void test_nested_splits(void) {
    char err[1024];
    static const char *const pre[] = {
        /* digits, then "b": "ab1c" -> "a" "b" | "1" | "c" */
        "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":"
        "\"\\\\p{N}\"},\"behavior\":\"Isolated\"},{\"type\":\"Split\",\"pattern\":{\"String\":"
        "\"b\"},\"behavior\":\"Isolated\"},{\"type\":\"ByteLevel\",\"add_prefix_space\":false,"
        "\"use_regex\":false}]}",
        /* digits, then GPT-2's regex: "ab1c" -> "ab" | "1" | "c" */
        "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":"
        "\"\\\\p{N}\"},\"behavior\":\"Isolated\"},{\"type\":\"ByteLevel\",\"add_prefix_space\":"
        "false,\"use_regex\":true}]}",
    };
    for (int k = 0; k < 2; k++) {
        cJSON *root = tt_base();
        cJSON *p = cJSON_Parse(pre[k]);
        CHECK(p, "pre_tokenizer %d is JSON", k);
        cJSON_ReplaceItemInObjectCaseSensitive(root, "pre_tokenizer", p);
        sl_tokenizer *t = tt_load_json(root, "nested.json", err, sizeof err);
        CHECK(t, "load: %s", err);
        if (!t) continue;
        if (k == 0) {
            EXPECT(t, "ab1c", 'a', 'b', '1', 'c');
            EXPECT(t, "xab12ab3", 'x', 'a', 'b', '1', '2', 'a', 'b', '3');
        } else {
            EXPECT(t, "ab1c", 256, '1', 'c');
            EXPECT(t, "x ab12 ab3", 'x', 261, '1', '2', 261, '3');
        }
        sl_tokenizer_free(t);
    }
}

/* The concatenated tokens and document starts of the shards in dir. */
static size_t read_shards(const char *dir, uint32_t **tok, size_t **docs, size_t *n_docs,
                          sl_shard_header *h0) {
    size_t n = 0, cap = 0, dcap = 0;
    *tok = NULL, *docs = NULL, *n_docs = 0;
    for (int i = 0;; i++) {
        char path[1024], err[512];
        snprintf(path, sizeof path, "%s/shard-%05d.shard.zst", dir, i);
        if (access(path, F_OK) != 0) break;
        sl_shard *sh = sl_shard_open(path, err, sizeof err);
        CHECK(sh, "%s", err);
        if (!sh) break;
        if (i == 0) *h0 = *sl_shard_hdr(sh);
        sl_frame_buf fb = {0};
        for (uint64_t f = 0; f < sl_shard_hdr(sh)->n_frames; f++) {
            CHECK(sl_shard_read_frame(sh, f, &fb, err, sizeof err) == 0, "%s", err);
            for (uint32_t d = 0; d < fb.n_docs; d++) {
                sl_xreserve((void **)docs, &dcap, (*n_docs + 1) * sizeof **docs);
                (*docs)[(*n_docs)++] = n + fb.docs[d];
            }
            sl_xreserve((void **)tok, &cap, (n + fb.n_tokens) * sizeof **tok);
            for (uint32_t k = 0; k < fb.n_tokens; k++)
                (*tok)[n++] = sl_shard_hdr(sh)->token_bytes == 2 ? ((uint16_t *)fb.tokens)[k]
                                                                 : ((uint32_t *)fb.tokens)[k];
        }
        sl_frame_buf_free(&fb);
        sl_shard_close(sh);
    }
    return n;
}

/* sluice data build --tokenizer: the shards equal the documents encoded one after the other
 * (order kept on any number of threads, byte-identical files), the header records the
 * tokenizer, and the options' errors. */
static void test_build(void) {
    char err[1024], tokpath[512], jsonl[512], out1[512], out3[512];
    cJSON *root = tt_base();
    tt_add_token(root, 300, "<x>", true, false, false, false);
    tt_add_token(root, 305, "<|endoftext|>", true, false, false, false);
    sl_tokenizer *t = tt_load_json(root, "build.json", err, sizeof err);
    CHECK(t, "load: %s", err);
    if (!t) return;
    snprintf(tokpath, sizeof tokpath, "%s/build.json", tt_dir);
    snprintf(jsonl, sizeof jsonl, "%s/docs.jsonl", tt_dir);
    /* 3000 documents of 1 to 600 characters over a small alphabet, some with <x> inside */
    FILE *f = fopen(jsonl, "wb");
    uint64_t x = 0x2545F4914F6CDD1Dull;
    char **docs = sl_xcalloc(3000, sizeof *docs);
    for (int d = 0; d < 3000; d++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        int len = 1 + (int)(x % 600);
        docs[d] = sl_xmalloc((size_t)len + 4);
        for (int i = 0; i < len; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            docs[d][i] = "abc  ,\n"[x % 7];
        }
        docs[d][len] = '\0';
        if (d % 7 == 0 && len > 3) memcpy(docs[d] + len / 2, "<x>", 3);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "text", docs[d]);
        char *line = cJSON_PrintUnformatted(o);
        fprintf(f, "%s\n", line);
        cJSON_free(line);
        cJSON_Delete(o);
    }
    fclose(f);
    snprintf(out1, sizeof out1, "%s/b1", tt_dir);
    snprintf(out3, sizeof out3, "%s/b3", tt_dir);
    char *inputs[] = {jsonl};
    sl_build_result res;
    /* one shard: byte-identical on 1 and 3 threads. (Where a shard is closed depends on the
     * compressed bytes written so far, which depend on the compression batches and so on the
     * thread count, as for every input format; the token stream does not.) */
    sl_build_opts o = {.out_dir = out1,
                       .vocab = -1,
                       .eod = -1,
                       .add_eod = -1,
                       .quiet = true,
                       .tokenizer = tokpath,
                       .threads = 1,
                       .frame_tokens = 4096};
    CHECK(sl_data_build(&o, inputs, 1, &res, err, sizeof err) == 0, "build: %s", err);
    o.out_dir = out3, o.threads = 3;
    CHECK(sl_data_build(&o, inputs, 1, &res, err, sizeof err) == 0, "build: %s", err);
    char a[600], b[600];
    snprintf(a, sizeof a, "%s/shard-00000.shard.zst", out1);
    snprintf(b, sizeof b, "%s/shard-00000.shard.zst", out3);
    size_t na, nb;
    char *da = sl_read_file(a, &na, err, sizeof err), *db = sl_read_file(b, &nb, err, sizeof err);
    CHECK(res.n_shards == 1 && da && db && na == nb && memcmp(da, db, na) == 0,
          "the shard differs between 1 and 3 threads");
    free(da), free(db);
    /* many shards on 3 threads: the documents in order across them */
    o.shard_bytes = 20000, o.force = true;
    CHECK(sl_data_build(&o, inputs, 1, &res, err, sizeof err) == 0, "build: %s", err);
    CHECK(res.n_shards > 1 && res.docs == 3000, "%d shards, %llu documents", res.n_shards,
          (unsigned long long)res.docs);
    uint32_t *tok;
    size_t *starts, n_starts;
    sl_shard_header h;
    size_t n = read_shards(out3, &tok, &starts, &n_starts, &h);
    CHECK(h.vocab_size == 306 && h.eod_token == 305 && h.token_bytes == 2, "header vocab %u eod %u",
          h.vocab_size, h.eod_token);
    CHECK(memcmp(h.tokenizer_hash, sl_tokenizer_hash(t), SL_SHARD_TOKENIZER_HASH) == 0,
          "the header records the tokenizer's hash");
    /* the same ids, document by document, encoded in order on one thread */
    sl_tok_state *st = sl_tok_state_new(t);
    sl_tok_ids want = {0};
    size_t bad;
    bool same = n_starts == 3000;
    for (int d = 0; d < 3000 && same; d++) {
        const size_t at = want.n;
        CHECK(sl_tokenizer_encode(st, docs[d], strlen(docs[d]), &want, &bad, err, sizeof err) == 0,
              "%s", err);
        sl_tok_ids_push(&want, 305);
        same = starts[d] == at;
    }
    CHECK(same && n == want.n && memcmp(tok, want.ids, n * sizeof *tok) == 0,
          "the shards hold the documents' ids in order (%zu tokens, want %zu)", n, want.n);
    free(want.ids), free(tok), free(starts);
    sl_tok_state_free(st);
    for (int d = 0; d < 3000; d++) free(docs[d]);
    free(docs);

    /* the options */
    char out[512];
    snprintf(out, sizeof out, "%s/b", tt_dir);
    sl_build_opts e = {.out_dir = out,
                       .vocab = 1000,
                       .eod = -1,
                       .add_eod = -1,
                       .quiet = true,
                       .tokenizer = tokpath,
                       .eod_token = "<x>",
                       .force = true};
    CHECK(sl_data_build(&e, inputs, 1, &res, err, sizeof err) == 0 && res.vocab == 1000 &&
              res.eod == 300,
          "--vocab 1000 --eod <x>: %s", err);
    e.eod_token = NULL, e.eod = -2;
    CHECK(sl_data_build(&e, inputs, 1, &res, err, sizeof err) == 0 && res.eod == -1,
          "--eod none: %s", err);
    e.vocab = 100;
    CHECK(sl_data_build(&e, inputs, 1, &res, err, sizeof err) != 0 &&
              strstr(err, "smaller than the tokenizer's 306"),
          "--vocab 100: %s", err);
    e.vocab = -1, e.eod_token = "<nope>";
    CHECK(sl_data_build(&e, inputs, 1, &res, err, sizeof err) != 0 &&
              strstr(err, "--eod <nope>: no such token"),
          "--eod <nope>: %s", err);
    e.eod_token = NULL, e.eod = 999;
    CHECK(sl_data_build(&e, inputs, 1, &res, err, sizeof err) != 0 &&
              strstr(err, "--eod 999: no such token id"),
          "--eod 999: %s", err);
    e.eod = -1, e.format = SL_FMT_RAW, e.raw_token_bytes = 2;
    CHECK(sl_data_build(&e, inputs, 1, &res, err, sizeof err) != 0 &&
              strstr(err, "--tokenizer applies to text and jsonl input, not raw"),
          "raw: %s", err);
    e.format = SL_FMT_AUTO, e.tokenizer = NULL, e.eod_token = "<x>";
    CHECK(sl_data_build(&e, inputs, 1, &res, err, sizeof err) != 0 &&
              strstr(err, "needs --tokenizer"),
          "a token name without a tokenizer: %s", err);
    char nodef[512];
    snprintf(nodef, sizeof nodef, "%s/base.json", tt_dir); /* has no <|endoftext|> */
    e.tokenizer = nodef, e.eod_token = NULL;
    CHECK(sl_data_build(&e, inputs, 1, &res, err, sizeof err) != 0 &&
              strstr(err, "name one with --eod TOKEN"),
          "no default end-of-document token: %s", err);
    /* invalid UTF-8 in a text file: the file and byte offset; nothing written */
    char txt[512], fresh[512];
    snprintf(txt, sizeof txt, "%s/bad.txt", tt_dir);
    f = fopen(txt, "wb");
    fputs("abc\nab\xc3(c\n", f);
    fclose(f);
    snprintf(fresh, sizeof fresh, "%s/fresh/out", tt_dir);
    char *tin[] = {txt};
    sl_build_opts bt = {.out_dir = fresh,
                        .vocab = -1,
                        .eod = -1,
                        .add_eod = -1,
                        .quiet = true,
                        .tokenizer = tokpath,
                        .text_docs = SL_TEXT_DOC_LINE};
    CHECK(sl_data_build(&bt, tin, 1, &res, err, sizeof err) != 0 &&
              strstr(err, "bad.txt: byte offset 6: invalid UTF-8 (byte 0xC3)"),
          "invalid UTF-8: %s", err);
    snprintf(fresh, sizeof fresh, "%s/fresh", tt_dir);
    CHECK(access(fresh, F_OK) != 0, "a failed build leaves no directory");
    sl_tokenizer_free(t);
}

int main(void) {
    snprintf(tt_dir, sizeof tt_dir, "/tmp/sluice_test_tokenizer_XXXXXX");
    if (!mkdtemp(tt_dir)) return 1;
    test_merges();
    test_added_and_normalizer();
    test_string_split();
    test_nested_splits();
    test_refusals();
    test_translation();
    test_build();
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tt_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tt_dir);
    return sl_test_finish("test_tokenizer");
}
