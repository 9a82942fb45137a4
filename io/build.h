/*
 * io/build.h - `sluice data build`: turns text, JSONL or already-tokenized files into shards.
 *
 * Inputs and how documents are found (docs/data.md has the details; io/import_*.c read them):
 *   text      byte-level tokenizer (token = byte value, 0..255), end-of-document token 256 after
 *             every document, vocabulary 257. A document is a whole file, a line, or a
 *             paragraph (lines up to an empty line), per text_docs.
 *   jsonl     one JSON object per line; its "text" string is one document (byte tokenizer).
 *   (text and jsonl with `tokenizer` set: encoded by that Hugging Face tokenizer.json instead,
 *   io/tokenizer.h, on `threads` threads in document order; the end-of-document token `eod`,
 *   `eod_token` or the tokenizer's default follows every document.)
 *   raw       headerless little-endian uint16 or uint32 tokens; with eod set, a document ends
 *             after every eod token, else the file is one document.
 *   llmc      llm.c token files: 256 x int32 header (magic 20240520, version 1 = uint16 or
 *             7 = uint32 tokens, header[2] = token count), then the tokens. A document begins
 *             at every eod token (llm.c puts <|endoftext|> before each document).
 *   megatron  Megatron-LM indexed dataset, PREFIX.bin + PREFIX.idx ("MMIDIDX\0\0" version 1);
 *             documents come from the index; add_eod appends a separator to each.
 * Every token is checked against the vocabulary; an error names the input file and byte
 * offset. Output: OUT_DIR/PREFIX-00000.shard.zst, ... of about shard_bytes each (a shard is
 * closed at the first document boundary after it reaches shard_bytes, or mid-document at twice
 * that).
 */
#ifndef SL_IO_BUILD_H
#define SL_IO_BUILD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
    SL_FMT_AUTO = 0,
    SL_FMT_TEXT,
    SL_FMT_JSONL,
    SL_FMT_RAW,
    SL_FMT_LLMC,
    SL_FMT_MEGATRON
} sl_input_format;

typedef enum { SL_TEXT_DOC_FILE = 0, SL_TEXT_DOC_LINE, SL_TEXT_DOC_PARAGRAPH } sl_text_docs;

typedef struct {
    const char *out_dir;
    const char *prefix;     /* default "shard" */
    sl_input_format format; /* AUTO: by extension / magic (importers.c: detect_format) */
    sl_text_docs text_docs;
    int raw_token_bytes;   /* raw inputs: 2 or 4 */
    int64_t vocab;         /* -1: the format's default (text 257, llm.c 50257 / 128256) */
    int64_t eod;           /* -1: the format's default; -2: none */
    const char *tokenizer; /* text/jsonl: a tokenizer.json (or its directory); NULL: bytes */
    const char *eod_token; /* with tokenizer: the end-of-document token by name (NULL: eod) */
    int64_t add_eod;       /* megatron: appended to every document; -1 none */
    uint64_t shard_bytes;  /* target compressed size of a shard; 0 = 1 GiB */
    uint32_t frame_tokens; /* 0 = default */
    int token_bytes;       /* 0 = 2 when vocab <= 65536, else 4 */
    int level, threads;    /* zstd level (0 = 3), compression and encoding threads (0 = all) */
    bool force;            /* replace existing PREFIX-*.shard.zst in out_dir */
    bool quiet;
} sl_build_opts;

typedef struct {
    int n_shards;
    uint64_t tokens, docs, bytes;
    uint32_t vocab;
    int token_bytes;
    int64_t eod;        /* the end-of-document token the headers record, -1: none */
    char tokenizer[33]; /* the recorded tokenizer hash in hex, "" when none */
} sl_build_result;

/* `sluice data build`: tokenizes or imports the n_inputs input files as o says into shards;
 * 0 with res filled, or -1 with the first problem (file, line or offset) in err. */
int sl_data_build(const sl_build_opts *o, char *const *inputs, int n_inputs, sl_build_result *res,
                  char *err, size_t errlen);

/* The input format's name as --format spells it. */
const char *sl_input_format_name(sl_input_format f);

#endif
