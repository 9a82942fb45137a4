/* tests/test_tokenizer_load.c - part of test_tokenizer (tests/test_tokenizer.c): what the load
 * refuses (every unsupported field of tokenizer.json named in the error) and the Oniguruma ->
 * PCRE2 translation of the pre-tokenizer regexes. */
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

/* Loads tt_base() changed by `edit` and checks the error names `field` (and `also`). */
static void refused(void (*edit)(cJSON *), const char *field, const char *also) {
    char err[1024] = "";
    cJSON *root = tt_base();
    edit(root);
    sl_tokenizer *t = tt_load_json(root, "bad.json", err, sizeof err);
    CHECK(!t, "%s: loaded, expected a refusal", field);
    char want[256];
    snprintf(want, sizeof want, ": %s: ", field);
    CHECK(strstr(err, want) && (!also || strstr(err, also)), "%s: message '%s'", field, err);
    sl_tokenizer_free(t);
}

static cJSON *model(cJSON *r) {
    return cJSON_GetObjectItemCaseSensitive(r, "model");
}
static void set(cJSON *o, const char *k, cJSON *v) {
    if (cJSON_GetObjectItemCaseSensitive(o, k))
        cJSON_ReplaceItemInObjectCaseSensitive(o, k, v);
    else
        cJSON_AddItemToObject(o, k, v);
}
static void split_regex(cJSON *r, const char *re) {
    cJSON *seq = cJSON_Parse("{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\","
                             "\"pattern\":{\"Regex\":\"\"},\"behavior\":\"Isolated\",\"invert\":"
                             "false},{\"type\":\"ByteLevel\",\"use_regex\":false}]}");
    cJSON *p = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(seq, "pretokenizers"), 0), "pattern");
    cJSON_ReplaceItemInObjectCaseSensitive(p, "Regex", cJSON_CreateString(re));
    set(r, "pre_tokenizer", seq);
}
static void e_type(cJSON *r) {
    set(model(r), "type", cJSON_CreateString("WordPiece"));
}
static void e_dropout(cJSON *r) {
    set(model(r), "dropout", cJSON_CreateNumber(0.1));
}
static void e_prefix(cJSON *r) {
    set(model(r), "continuing_subword_prefix", cJSON_CreateString("##"));
}
static void e_suffix(cJSON *r) {
    set(model(r), "end_of_word_suffix", cJSON_CreateString("</w>"));
}
static void e_model_key(cJSON *r) {
    set(model(r), "foo", cJSON_CreateTrue());
}
static void e_nobyte(cJSON *r) {
    char s[8];
    tt_byte_str('q', s);
    cJSON_DeleteItemFromObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(model(r), "vocab"), s);
}
static void e_dupid(cJSON *r) {
    set(cJSON_GetObjectItemCaseSensitive(model(r), "vocab"), "zz", cJSON_CreateNumber(5));
}
static void e_merge_tok(cJSON *r) {
    cJSON_ReplaceItemInArray(cJSON_GetObjectItemCaseSensitive(model(r), "merges"), 0,
                             cJSON_CreateString("a Z9"));
}
static void e_merge_form(cJSON *r) {
    cJSON_ReplaceItemInArray(cJSON_GetObjectItemCaseSensitive(model(r), "merges"), 1,
                             cJSON_CreateString("ab"));
}
static void e_nfkc(cJSON *r) {
    set(r, "normalizer", cJSON_Parse("{\"type\":\"NFKC\"}"));
}
static void e_normseq(cJSON *r) {
    set(r, "normalizer",
        cJSON_Parse("{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"NFC\"},{\"type\":"
                    "\"Lowercase\"}]}"));
}
static void e_nopre(cJSON *r) {
    set(r, "pre_tokenizer", cJSON_CreateNull());
}
static void e_metaspace(cJSON *r) {
    set(r, "pre_tokenizer", cJSON_Parse("{\"type\":\"Metaspace\",\"replacement\":\"_\"}"));
}
static void e_removed(cJSON *r) {
    split_regex(r, "\\s+");
    cJSON *s = cJSON_GetArrayItem(
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(r, "pre_tokenizer"),
                                         "pretokenizers"),
        0);
    set(s, "behavior", cJSON_CreateString("Removed"));
}
static void e_invert(cJSON *r) {
    split_regex(r, "\\s+");
    cJSON *s = cJSON_GetArrayItem(
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(r, "pre_tokenizer"),
                                         "pretokenizers"),
        0);
    set(s, "invert", cJSON_CreateTrue());
}
static void e_bl_first(cJSON *r) {
    set(r, "pre_tokenizer",
        cJSON_Parse("{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"ByteLevel\"},{"
                    "\"type\":\"Split\",\"pattern\":{\"Regex\":\"a\"},\"behavior\":\"Isolated\"}"
                    "]}"));
}
static void e_re_b(cJSON *r) {
    split_regex(r, "\\bx");
}
static void e_re_anchor(cJSON *r) {
    split_regex(r, "a|^b");
}
static void e_re_named(cJSON *r) {
    split_regex(r, "(?<w>a)");
}
static void e_re_script(cJSON *r) {
    split_regex(r, "\\p{Han}+");
}
static void e_re_fold(cJSON *r) {
    split_regex(r, "(?i:'ss)");
}
static void e_re_ci_class(cJSON *r) {
    split_regex(r, "(?i:[a-z])");
}
static void e_re_interval(cJSON *r) {
    split_regex(r, "a{2,3}+");
}
static void e_re_empty(cJSON *r) {
    split_regex(r, "a*");
}
static void e_re_backref(cJSON *r) {
    split_regex(r, "(a)\\1");
}
static void e_bert(cJSON *r) {
    set(r, "post_processor", cJSON_Parse("{\"type\":\"BertProcessing\",\"sep\":[\"x\",1]}"));
}
static void e_template(cJSON *r) {
    set(r, "post_processor",
        cJSON_Parse("{\"type\":\"TemplateProcessing\",\"single\":[],\"special_tokens\":{}}"));
}
/* two templates in a Sequence, the first without special tokens (it was taken, and its id
 * arrays leaked) */
static void e_template_twice(cJSON *r) {
    set(r, "post_processor",
        cJSON_Parse("{\"type\":\"Sequence\",\"processors\":[{\"type\":\"TemplateProcessing\","
                    "\"single\":[{\"Sequence\":{\"id\":\"A\"}}],\"special_tokens\":{}},{\"type\":"
                    "\"TemplateProcessing\",\"single\":[{\"Sequence\":{\"id\":\"A\"}}],"
                    "\"special_tokens\":{}}]}"));
}
static void e_decoder(cJSON *r) {
    set(r, "decoder", cJSON_Parse("{\"type\":\"WordPiece\"}"));
}
static void e_nodecoder(cJSON *r) {
    set(r, "decoder", cJSON_CreateNull());
}
static void e_trunc(cJSON *r) {
    set(r, "truncation", cJSON_Parse("{\"max_length\":512,\"strategy\":\"LongestFirst\"}"));
}
static void e_padding(cJSON *r) {
    set(r, "padding", cJSON_Parse("{\"strategy\":\"BatchLongest\"}"));
}
static void e_single(cJSON *r) {
    tt_add_token(r, 300, "<s>", true, false, false, false);
    set(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(r, "added_tokens"), 0), "single_word",
        cJSON_CreateTrue());
}
static void e_added_id(cJSON *r) {
    char s[64];
    tt_bl("ab", s);
    tt_add_token(r, 300, s, true, false, false, false); /* "ab" is model token 256 */
}
/* an added token with the id of another token: the id would stand for two strings */
static void e_added_model_id(cJSON *r) {
    tt_add_token(r, 32, "<x>", true, false, false, false); /* 32: the token of byte ' ' */
}
static void e_added_dup_id(cJSON *r) {
    tt_add_token(r, 300, "<x>", true, false, false, false);
    tt_add_token(r, 300, "<y>", true, false, false, false);
}
/* an id a model's vocabulary cannot reach: refused, not tables of 2^24+ entries allocated */
static void e_big_id(cJSON *r) {
    set(cJSON_GetObjectItemCaseSensitive(model(r), "vocab"), "zz", cJSON_CreateNumber(1 << 24));
}
static void e_added_big_id(cJSON *r) {
    tt_add_token(r, 1 << 24, "<big>", true, false, false, false);
}
static void e_top_key(cJSON *r) {
    set(r, "foo", cJSON_CreateNumber(1));
}

void test_refusals(void) {
    refused(e_type, "model.type", "WordPiece");
    refused(e_dropout, "model.dropout", NULL);
    refused(e_prefix, "model.continuing_subword_prefix", NULL);
    refused(e_suffix, "model.end_of_word_suffix", NULL);
    refused(e_model_key, "model.foo", "unknown field");
    refused(e_nobyte, "model.vocab", "byte 0x71");
    refused(e_dupid, "model.vocab[\"zz\"]", "id 5");
    refused(e_added_model_id, "added_tokens[0].id", "32 is the id of model token");
    refused(e_added_dup_id, "added_tokens[1].id", "300 is also the id of added_tokens[0] \"<x>\"");
    refused(e_big_id, "model.vocab[\"zz\"]", "[0, 2^24)");
    refused(e_added_big_id, "added_tokens[0].id", "[0, 2^24)");
    refused(e_merge_tok, "model.merges[0]", "\"Z9\"");
    refused(e_merge_form, "model.merges[1]", "two tokens");
    refused(e_nfkc, "normalizer.type", "NFKC");
    refused(e_normseq, "normalizer.normalizers[1].type", "Lowercase");
    refused(e_nopre, "pre_tokenizer", "ByteLevel");
    refused(e_metaspace, "pre_tokenizer.type", "Metaspace");
    refused(e_removed, "pre_tokenizer.pretokenizers[0].behavior", "Removed");
    refused(e_invert, "pre_tokenizer.pretokenizers[0].invert", NULL);
    refused(e_bl_first, "pre_tokenizer.pretokenizers[0].type", "ByteLevel");
    refused(e_re_b, "pre_tokenizer.pretokenizers[0].pattern.Regex", "byte offset 0");
    refused(e_re_anchor, "pre_tokenizer.pretokenizers[0].pattern.Regex", "byte offset 2");
    refused(e_re_named, "pre_tokenizer.pretokenizers[0].pattern.Regex", "group kind");
    refused(e_re_script, "pre_tokenizer.pretokenizers[0].pattern.Regex", "general-category");
    refused(e_re_fold, "pre_tokenizer.pretokenizers[0].pattern.Regex", "byte offset 6");
    refused(e_re_ci_class, "pre_tokenizer.pretokenizers[0].pattern.Regex", "class inside");
    refused(e_re_interval, "pre_tokenizer.pretokenizers[0].pattern.Regex", "possessive");
    refused(e_re_empty, "pre_tokenizer.pretokenizers[0].pattern.Regex", "empty string");
    refused(e_re_backref, "pre_tokenizer.pretokenizers[0].pattern.Regex", "\\1");
    refused(e_bert, "post_processor.type", "BertProcessing");
    refused(e_template, "post_processor.single", "\"A\"");
    refused(e_template_twice, "post_processor.processors[1]", "a second TemplateProcessing");
    refused(e_decoder, "decoder.type", "WordPiece");
    refused(e_nodecoder, "decoder", "ByteLevel");
    refused(e_trunc, "truncation", "must be null");
    refused(e_padding, "padding", "must be null");
    refused(e_single, "added_tokens[0].single_word", NULL);
    refused(e_added_id, "added_tokens[0].id", "model token 256");
    refused(e_top_key, "foo", "unknown field");

    char err[1024], path[512];
    snprintf(path, sizeof path, "%s/broken.json", tt_dir);
    FILE *f = fopen(path, "wb");
    fputs("{\"model\": {\"type\": \"BPE\",,}}", f);
    fclose(f);
    sl_tokenizer *t = sl_tokenizer_load(path, err, sizeof err);
    CHECK(!t && strstr(err, "broken.json: byte offset ") && strstr(err, "not valid JSON"), "%s",
          err);
    /* bytes that are not UTF-8 (here an added token's content, a lone continuation byte that
     * used to match inside a character of the text and abort the encoding in NFC) */
    cJSON *root = tt_base();
    tt_add_token(root, 300, "\xA9", true, false, false, false);
    cJSON_ReplaceItemInObjectCaseSensitive(root, "normalizer", cJSON_Parse("{\"type\":\"NFC\"}"));
    t = tt_load_json(root, "latin1.json", err, sizeof err);
    CHECK(!t && strstr(err, "latin1.json: byte offset ") &&
              strstr(err, "not valid UTF-8 (byte 0xA9)"),
          "%s", err);
    sl_tokenizer_free(t);
    snprintf(path, sizeof path, "%s/nothing", tt_dir);
    mkdir(path, 0755);
    t = sl_tokenizer_load(path, err, sizeof err);
    CHECK(!t && strstr(err, "without tokenizer.json"), "%s", err);
    t = sl_tokenizer_load("/nonexistent/tokenizer.json", err, sizeof err);
    CHECK(!t && strstr(err, "cannot open"), "%s", err);
}

void test_translation(void) {
    char err[512];
    /* Qwen2/3's pattern, translated by the table in io/tokenizer_regex.c */
    const char *qwen = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
                       "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
    const char *want = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
                       "?[^\\p{White_Space}\\p{L}\\p{N}]+[\\r\\n]*|\\p{White_Space}*[\\r\\n]+|"
                       "\\p{White_Space}+(?!\\P{White_Space})|\\p{White_Space}+";
    char *got = tok_regex_translate(qwen, strlen(qwen), err, sizeof err);
    CHECK(got && strcmp(got, want) == 0, "Qwen pattern: %s", got ? got : err);
    free(got);
    const char *pairs[][2] = {{"\\p{N}{1,3}", "\\p{N}{1,3}"},
                              {"a{,2}", "a{0,2}"},
                              {"x{y", "x\\{y"},
                              {"(ab)+", "(?:ab)+"},
                              {"\\h\\v.", "[0-9a-fA-F]\\x{0B}[^\\n]"},
                              {"[\\w-]", "[\\p{L}\\p{M}\\p{Nd}\\p{Pc}\\-]"},
                              {"\\u00e9\\x41", "\\x{00e9}\\x{41}"}};
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        got = tok_regex_translate(pairs[i][0], strlen(pairs[i][0]), err, sizeof err);
        CHECK(got && strcmp(got, pairs[i][1]) == 0, "%s -> %s (want %s)", pairs[i][0],
              got ? got : err, pairs[i][1]);
        free(got);
    }
}
