/*
 * io/importers.h - the input formats of `sluice data build`: the sink an importer pushes tokens
 * into, format detection, each format's defaults, and the import of one input file.
 * Internal to io/build.c and the importer files (io/importers.c: detection, defaults and the
 * formats table; io/import_text.c and io/import_tokenized.c: the importers); users include
 * io/build.h (which describes the formats).
 *
 * An importer reads one input file and turns it into tokens and document starts. It knows
 * nothing of shards: it pushes into an sl_sink, which io/build.c implements (shard rotation at
 * document boundaries, staging, publishing).
 *
 * Adding an importer (a new input format):
 *   1. io/build.h: a value in sl_input_format, and the format's line in the comment at the top.
 *   2. io/import_text.c or io/import_tokenized.c (or a file of its own, listed in
 *      io/CMakeLists.txt): `int imp_<name>(sl_sink *k, const char *path, char *err,
 *      size_t errlen)`, declared at the end of this header, and its row in the `formats` table
 *      of io/importers.c (the --format name, which sl_input_format_name also returns). The
 *      function calls sl_sink_doc before the first token of every document and sl_sink_push for
 *      each token, checks every token against k->vocab, and fails with a message naming the
 *      file and the byte offset (or line). It reads its options from k->o and never flushes
 *      (build.c does at the end).
 *   3. io/importers.c: detect_format, when the format can be told from a file's name or first
 *      bytes; sl_import_defaults, for its default vocabulary and end-of-document token (a
 *      format without a default vocabulary fails there asking for --vocab).
 *   4. launch/cmd_data.c: the --format value and the flags of its options; docs/data.md;
 *      a round trip and its errors in tests/test_io_build.c.
 */
#ifndef SL_IO_IMPORTERS_H
#define SL_IO_IMPORTERS_H

#include <stddef.h>
#include <stdint.h>

#include "io/build.h"
#include "io/doc_encoder.h"

/* Tokens an importer pushes before the sink writes them out. */
#define SL_SINK_TOKENS 65536

/* What an importer sees of the build's output: the options, the vocabulary and a token buffer.
 * io/build.c embeds it as the first member of its own state. */
typedef struct {
    const sl_build_opts *o; /* the build's options, the format's defaults filled in */
    uint32_t vocab;         /* every token pushed is below it */
    sl_doc_encoder *enc;    /* with --tokenizer: sl_sink_text's documents are encoded here */
    int64_t eod;            /* with --tokenizer: appended to every document, -1: none */
    uint32_t buf[SL_SINK_TOKENS];
    size_t n; /* tokens in buf */
} sl_sink;

/* Starts a document: the next token pushed is its first (io/build.c). 0, or -1 with err. */
int sl_sink_doc(sl_sink *k, char *err, size_t errlen);

/* One whole document of text (text and JSONL input, io/build.c): with a tokenizer (k->enc) it
 * is queued for encoding and its ids, then k->eod, follow in order; byte-level, its bytes and
 * 256 are pushed at once. `origin` locates it for messages. 0, or -1 with err. */
int sl_sink_text(sl_sink *k, const char *text, size_t len, sl_doc_origin origin, char *err,
                 size_t errlen);

/* The encoder's emit callback (user: the sl_sink): a document start, the document's ids, then
 * k->eod. */
int sl_sink_encoded(void *user, const uint32_t *ids, size_t n, char *err, size_t errlen);

/* Writes the buffered tokens to the shards (io/build.c). 0, or -1 with err. */
int sl_sink_flush(sl_sink *k, char *err, size_t errlen);

/* Appends one token to the current document (inline: it runs once per token). */
static inline int sl_sink_push(sl_sink *k, uint32_t t, char *err, size_t errlen) {
    k->buf[k->n++] = t;
    return k->n == SL_SINK_TOKENS ? sl_sink_flush(k, err, errlen) : 0;
}

/* The one format of all inputs into *fmt: `format` unless SL_FMT_AUTO, else told from each
 * input's name or first bytes (all must agree). Checks that every input exists; a Megatron
 * input may be named by its prefix (PREFIX for PREFIX.idx + PREFIX.bin). 0, or -1 with err. */
int sl_import_format(sl_input_format format, char *const *inputs, int n_inputs,
                     sl_input_format *fmt, char *err, size_t errlen);

/* The format's defaults and checks of its options: sets o->eod where the format has a default
 * separator, *vocab (o->vocab, or the format's default when that is -1) and *eod_hdr (the
 * end-of-document token the shard headers record, -1 for none). llm.c input reads the header
 * of first_input for its token width. 0, or -1 with err. */
int sl_import_defaults(sl_input_format fmt, sl_build_opts *o, const char *first_input,
                       int64_t *vocab, int64_t *eod_hdr, char *err, size_t errlen);

/* Pushes the documents of input `path`, in format fmt, into k. 0, or -1 with err. */
int sl_import(sl_sink *k, sl_input_format fmt, const char *path, char *err, size_t errlen);

/* ---- between the importer files (io/importers.c, import_text.c, import_tokenized.c) ---- */

#define TEXT_VOCAB  257
#define TEXT_EOD    256
#define LLMC_MAGIC  20240520
#define CHUNK_BYTES (1u << 20)

/* The importers of the formats table (io/import_text.c, io/import_tokenized.c). */
int imp_text(sl_sink *k, const char *path, char *err, size_t errlen);
int imp_jsonl(sl_sink *k, const char *path, char *err, size_t errlen);
int imp_raw(sl_sink *k, const char *path, char *err, size_t errlen);
int imp_llmc(sl_sink *k, const char *path, char *err, size_t errlen);
int imp_megatron(sl_sink *k, const char *in, char *err, size_t errlen);

/* Opens a regular file for reading: the descriptor (its size in *size), or -1 with err. */
int imp_open_sized(const char *path, uint64_t *size, char *err, size_t errlen);
/* llm.c header: returns token width or -1. */
int imp_llmc_header(int fd, const char *path, uint64_t size, uint64_t *ntok, char *err,
                    size_t errlen);
/* The .idx and .bin paths of a Megatron input named by either file or by their prefix
 * (malloc'ed). */
void imp_megatron_paths(const char *in, char **idx, char **bin);

#endif
