/*
 * io/tokenizer.h - a byte-level BPE tokenizer loaded from a Hugging Face `tokenizer.json`
 * (the GPT-2 / Llama-3 / Qwen2-3 family): text bytes to token ids and back, with the same ids
 * as the Hugging Face `tokenizers` library (docs/data.md, "Tokenizers", says exactly what is
 * supported and how it was checked).
 *
 * Encoding one text, as Hugging Face's `encode(text)` (add_special_tokens = true) does:
 *   1. the added tokens (`added_tokens`) that are not `normalized` are found in the text,
 *      leftmost-longest, with their `lstrip` / `rstrip` whitespace;
 *   2. each stretch between them is normalized (`normalizer`: none or NFC, by utf8proc), and
 *      the `normalized` added tokens are found in it the same way;
 *   3. each remaining stretch is split by the pre-tokenizer: the `Split` regexes of a
 *      `Sequence` (Oniguruma syntax, run by PCRE2 with its JIT after a checked translation,
 *      io/tokenizer_regex.c), then `ByteLevel` (optional prefix space, optional GPT-2 regex);
 *   4. each piece's bytes go through the BPE model: merges applied lowest rank first, leftmost
 *      first among equal ranks (io/tokenizer_bpe.c);
 *   5. the post-processor's special tokens (`TemplateProcessing`'s single-sequence template,
 *      e.g. Llama 3's <|begin_of_text|>) go around the result.
 * Decoding is the `ByteLevel` decoder: each id's token string mapped back to bytes.
 *
 * Anything in the file that this does not implement exactly (another model type, normalizer,
 * pre-tokenizer, post-processor or decoder, a regex construct whose meaning differs between
 * Oniguruma and PCRE2, dropout, truncation, ...) is refused at load time with an error naming
 * the JSON field; nothing is approximated.
 *
 * A loaded sl_tokenizer is immutable and may be shared by threads; each thread encodes with
 * its own sl_tok_state (regex match data and a bounded cache of encoded words).
 */
#ifndef SL_IO_TOKENIZER_H
#define SL_IO_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SL_TOKENIZER_HASH_BYTES 32 /* SHA-256 */
/* Token ids are below this: the largest model.vocab_size a model config takes (model/config.c),
 * so no id a model could use is refused, while a stray large id in a small file cannot make the
 * load allocate its per-id tables by the gigabyte. */
#define SL_TOKENIZER_MAX_VOCAB (1u << 24)

typedef struct sl_tokenizer sl_tokenizer;
typedef struct sl_tok_state sl_tok_state;

/* A growable array of token ids (free ids with free(); zero-initialise). */
typedef struct {
    uint32_t *ids;
    size_t n, cap;
} sl_tok_ids;

/* Loads `path`: a tokenizer.json file, or a directory holding one. NULL with a message naming
 * the file and the JSON field on anything unsupported or malformed. */
sl_tokenizer *sl_tokenizer_load(const char *path, char *err, size_t errlen);
void sl_tokenizer_free(sl_tokenizer *t);

/* The tokenizer.json file that was read (a directory argument resolved to its file). */
const char *sl_tokenizer_path(const sl_tokenizer *t);
/* SHA-256 of that file's bytes (`sha256sum tokenizer.json` prints the same digest). */
const uint8_t *sl_tokenizer_hash(const sl_tokenizer *t);
/* Largest token id + 1, over the model's vocabulary and the added tokens. */
uint32_t sl_tokenizer_vocab_size(const sl_tokenizer *t);

/* The id of token `s` (n bytes): an added token's content, or a model token written as in
 * tokenizer.json (byte-level form, e.g. "Ġthe"). -1 when there is none. */
int64_t sl_tokenizer_token_id(const sl_tokenizer *t, const char *s, size_t n);
/* Whether id is an added token marked `special`. */
bool sl_tokenizer_is_special(const sl_tokenizer *t, uint32_t id);
/* The default end-of-document token: the first of <|endoftext|> (GPT-2, Qwen),
 * <|end_of_text|> (Llama 3) and </s> that is an added token; -1 when none is. */
int64_t sl_tokenizer_default_eod(const sl_tokenizer *t);

/* Per-thread encoding state. */
sl_tok_state *sl_tok_state_new(const sl_tokenizer *t);
void sl_tok_state_free(sl_tok_state *s);

/* Appends the ids of `text` (len bytes, which must be valid UTF-8; NUL bytes are text) to out.
 * Returns 0; or -1 with a message in err when the text is not valid UTF-8 (*bad_offset: the
 * byte offset of the first invalid sequence) or the regex engine failed, e.g. at its match
 * limit (*bad_offset: SIZE_MAX). Invalid UTF-8 is refused, not replaced: Hugging Face's
 * tokenizers take Unicode strings, so bytes that are not UTF-8 never reach them and there is
 * no reference behaviour to follow; replacing them would silently change the text. */
int sl_tokenizer_encode(sl_tok_state *s, const char *text, size_t len, sl_tok_ids *out,
                        size_t *bad_offset, char *err, size_t errlen);

/* The bytes token `id` decodes to (*n of them); NULL for an id no token has. Decoding a
 * sequence is the concatenation (it may split a UTF-8 character between tokens). */
const uint8_t *sl_tokenizer_id_bytes(const sl_tokenizer *t, uint32_t id, size_t *n);
/* Decodes ids[0, n): appends their bytes to the malloc'ed buffer *out (*len bytes used, *cap
 * allocated; grown as needed; may start NULL, 0, 0). As Hugging Face's decode with
 * skip_special_tokens = false, but bytes, not a string: a sequence cut inside a character
 * stays cut. 0, or -1 with err naming the first id that is no token. */
int sl_tokenizer_decode(const sl_tokenizer *t, const uint32_t *ids, size_t n, uint8_t **out,
                        size_t *len, size_t *cap, char *err, size_t errlen);

/* Copies the tokenizer of `path` (a tokenizer.json, or the directory holding one) into
 * directory dir, so that Hugging Face loads it with the model there: tokenizer.json, and when
 * path is a directory or a file named tokenizer.json, the companion files beside it that
 * exist (tokenizer_config.json, special_tokens_map.json, added_tokens.json, vocab.json,
 * merges.txt, chat_template.jinja, chat_template.json). Each file is written atomically.
 * expect (SL_TOKENIZER_HASH_BYTES, or NULL): the SHA-256 tokenizer.json must still have.
 * Returns the number of files copied, or -1 with err. */
int sl_tokenizer_copy_files(const char *path, const char *dir, const uint8_t *expect, char *err,
                            size_t errlen);

/* Appends `id` to ids (growing it). */
void sl_tok_ids_push(sl_tok_ids *ids, uint32_t id);

#endif
