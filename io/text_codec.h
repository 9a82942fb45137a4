/*
 * io/text_codec.h - text to token ids and back, for `sluice generate` and the training samples
 * (training.sample_every): the one place sluice's decoding side meets a tokenizer.
 *
 * Two codecs:
 *   bytes  the byte-level tokenizer of `sluice data build` without a tokenizer: ids 0-255 are
 *          the bytes of the UTF-8 text, 256 (SL_TEXT_EOD_BYTE) ends a document; vocabulary 257.
 *   bpe    a Hugging Face tokenizer.json (io/tokenizer.h, the byte-level BPE tokenizer of
 *          `sluice data build --tokenizer`): ids as Hugging Face's, generation stops at its
 *          end-of-document token; special tokens other than that print their text.
 */
#ifndef SL_IO_TEXT_CODEC_H
#define SL_IO_TEXT_CODEC_H

#include <stddef.h>
#include <stdint.h>

#define SL_TEXT_EOD_BYTE 256 /* the byte-level end-of-document token */

typedef struct sl_text_codec sl_text_codec;

/* The codec of a model with `vocab_size` tokens: the tokenizer at `tokenizer` (a tokenizer.json,
 * or a directory holding one) when not NULL, else the byte-level one, which needs vocab_size 257.
 * NULL with a message naming the path or the vocabulary otherwise. */
sl_text_codec *sl_text_codec_open(const char *tokenizer, int vocab_size, char *err, size_t errlen);
void sl_text_codec_free(sl_text_codec *c);

/* Appends the ids of text[0 .. len) to *ids (realloc'ed; *n counts them). 0, or -1 with a
 * message (a BPE tokenizer refuses text that is not valid UTF-8, with its byte offset). */
int sl_text_codec_encode(const sl_text_codec *c, const char *text, size_t len, int32_t **ids,
                         int *n, char *err, size_t errlen);
/* The bytes token `id` stands for (*n of them; 0 for the end-of-document token and other
 * special tokens without text), or NULL for an id outside the vocabulary. A UTF-8 character may
 * span tokens: print the bytes as they come and the text comes out whole. */
const uint8_t *sl_text_codec_token(const sl_text_codec *c, int32_t id, size_t *n);
/* The end-of-document token (generation stops there), or -1 when the tokenizer has none. */
int32_t sl_text_codec_eod(const sl_text_codec *c);
/* Ids the codec produces are below this. */
int sl_text_codec_vocab(const sl_text_codec *c);
/* The bytes of tokens ids[0 .. n) as a NUL-terminated string of valid UTF-8 (malloc'ed): a byte
 * that does not start or continue a valid character (a NUL too) becomes U+FFFD, as a model may
 * cut a character or emit any byte; for JSON and logs. */
char *sl_text_codec_printable(const sl_text_codec *c, const int32_t *ids, int n);
/* "bytes" or "bpe <path>", for messages and metrics. */
const char *sl_text_codec_name(const sl_text_codec *c);

#endif
