/*
 * io/shard.h - sluice token shards (format version 1; the byte-level spec is
 * docs/shard-format.md).
 *
 * A shard file is a valid zstd stream: a header in a zstd skippable frame, then the tokens in
 * independent zstd frames (each with zstd's content checksum and followed, when documents start
 * in it, by a skippable frame listing their offsets), then the frame index in a final
 * skippable frame. `zstd -d shard.shard.zst` prints the raw little-endian tokens.
 *
 * Reading: sl_shard_open() loads and checks the header and index without decompressing anything;
 * sl_shard_read_frame() decodes one frame with every integrity check. Every error message names
 * the file and, where it applies, the frame and byte offset.
 *
 * Writing: sl_shard_writer streams tokens with bounded memory into a temporary file in the
 * destination directory, compresses frames in parallel, and on close writes the index and the
 * final header, fsyncs and renames. A build that dies leaves only a dot-named temporary file
 * whose header is a placeholder that no reader accepts.
 */
#ifndef SL_IO_SHARD_H
#define SL_IO_SHARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SL_SHARD_VERSION              1
#define SL_SHARD_SKIP_MAGIC           0x184D2A5Du /* zstd skippable frame magic used by sluice */
#define SL_SHARD_ZSTD_MAGIC           0xFD2FB528u
#define SL_SHARD_HEADER_CONTENT       128 /* header bytes inside its skippable frame */
#define SL_SHARD_HEADER_BYTES         136 /* with the 8-byte skippable frame header */
#define SL_SHARD_ENTRY_BYTES          40  /* one frame-table entry */
#define SL_SHARD_MAX_FRAME_TOKENS     (1u << 24)
#define SL_SHARD_DEFAULT_FRAME_TOKENS (1u << 18)
#define SL_SHARD_NO_EOD               0xFFFFFFFFu
#define SL_SHARD_SUFFIX               ".shard.zst"
#define SL_SHARD_TOKENIZER_HASH       16 /* bytes of the tokenizer's SHA-256 a header keeps */

typedef struct {
    uint32_t version;
    uint32_t token_bytes;  /* 2 or 4 */
    uint32_t vocab_size;   /* every token id is < vocab_size */
    uint32_t eod_token;    /* the document separator id, or SL_SHARD_NO_EOD */
    uint32_t frame_tokens; /* maximum tokens per frame */
    uint64_t n_tokens, n_docs, n_frames;
    uint64_t index_offset; /* file offset of the index skippable frame */
    uint64_t index_bytes;  /* its content size: 8 + 40 * n_frames */
    uint64_t file_size;
    uint64_t payload_bytes; /* zstd frames plus document-offset frames */
    uint32_t index_crc;     /* CRC-32C of the index content */
    uint32_t header_crc;    /* CRC-32C of header content bytes [0, 124) */
    /* the first 16 bytes of the SHA-256 of the tokenizer.json the tokens come from; all zero
     * when the shard records none (byte-level text, imported ids, shards written before) */
    uint8_t tokenizer_hash[SL_SHARD_TOKENIZER_HASH];
} sl_shard_header;

/* Whether h records a tokenizer; its hash as 32 lowercase hex digits (out: 33 bytes). */
bool sl_shard_has_tokenizer(const sl_shard_header *h);
void sl_shard_tokenizer_hex(const uint8_t hash[SL_SHARD_TOKENIZER_HASH], char out[33]);

typedef struct {
    uint64_t offset;      /* file offset of the zstd frame */
    uint64_t first_token; /* index in the shard of the frame's first token */
    uint64_t first_doc;   /* ordinal of the first document starting in this frame */
    uint32_t csize;       /* bytes of the zstd frame */
    uint32_t n_tokens;    /* 1 .. frame_tokens */
    uint32_t n_docs;      /* documents starting in this frame */
    uint32_t crc;         /* CRC-32C of the zstd frame followed by its document frame */
} sl_shard_frame;

/* Bytes a frame occupies in the file: the zstd frame plus its document-offset frame. */
static inline uint64_t sl_shard_frame_span(const sl_shard_frame *f) {
    return (uint64_t)f->csize + (f->n_docs ? 8 + 4 * (uint64_t)f->n_docs : 0);
}

typedef struct sl_shard sl_shard;

/* Opens a shard file and validates the header and frame index (no decompression). */
sl_shard *sl_shard_open(const char *path, char *err, size_t errlen);
/* The same over a memory image (not copied; must outlive the shard). `name` is for messages. */
sl_shard *sl_shard_open_mem(const void *data, size_t size, const char *name, char *err,
                            size_t errlen);
void sl_shard_close(sl_shard *s);

/* An open shard's header, its frame index (header's frame count entries) and the name it was
 * opened under (path, or the name given to sl_shard_open_mem). */
const sl_shard_header *sl_shard_hdr(const sl_shard *s);
const sl_shard_frame *sl_shard_frames(const sl_shard *s);
const char *sl_shard_name(const sl_shard *s);

/* Reads only the header of `path` and checks it (magic, version, CRC, file size). */
int sl_shard_read_header(const char *path, sl_shard_header *h, char *err, size_t errlen);

/* Whether `path` is a file of another kind: readable, not empty, and its first bytes are not
 * a shard's (the magic of the header's skippable frame at byte offset 0), e.g. the text a
 * shard was built from. A damaged shard whose first bytes are intact, an empty file and one
 * that cannot be read are not (false); opening any of them fails with its own message. */
bool sl_shard_not_a_shard(const char *path);

/* Decoding scratch for one frame; zero-initialise, free with sl_frame_buf_free(). */
typedef struct {
    void *tokens; /* n_tokens little-endian tokens of token_bytes each */
    size_t tokens_cap;
    uint32_t n_tokens;
    uint32_t *docs; /* n_docs strictly increasing offsets inside the frame */
    size_t docs_cap;
    uint32_t n_docs;
    unsigned char *cbuf;
    size_t cbuf_cap;
    void *dctx;            /* ZSTD_DCtx */
    bool skip_vocab_check; /* the caller checks token ids itself (the reader, while copying) */
} sl_frame_buf;
void sl_frame_buf_free(sl_frame_buf *b);

/* Decodes frame `f` into b: CRC-32C, zstd frame header and content checksum, token count,
 * document offsets and token ids < vocab_size are all checked. 0 or -1 with err set. */
int sl_shard_read_frame(sl_shard *s, uint64_t f, sl_frame_buf *b, char *err, size_t errlen);

/* The error for token `i` of frame `fi` having id v >= vocab (the message sl_shard_read_frame
 * gives). Returns -1. */
int sl_shard_vocab_error(const char *name, uint64_t fi, const sl_shard_frame *f, uint32_t i,
                         uint32_t v, uint32_t vocab, char *err, size_t errlen);

/* Full integrity check of one file: header, index and every frame. Each problem is passed to
 * `report` (may be NULL); returns the number of problems (0 = the file is sound). */
typedef struct {
    sl_shard_header h;
    bool header_ok;
} sl_shard_verify_info;
int sl_shard_verify(const char *path, sl_shard_verify_info *info,
                    void (*report)(void *user, const char *msg), void *user);

/* ---- writing ---- */

typedef struct {
    uint32_t token_bytes; /* 2 or 4 */
    uint32_t vocab_size;
    uint32_t eod_token;                              /* SL_SHARD_NO_EOD when there is none */
    uint32_t frame_tokens;                           /* 0 = SL_SHARD_DEFAULT_FRAME_TOKENS */
    int level;                                       /* zstd level; 0 = 3 */
    int threads;                                     /* compression threads; 0 = all cores */
    uint8_t tokenizer_hash[SL_SHARD_TOKENIZER_HASH]; /* recorded in the header; zero: none */
} sl_shard_writer_opts;

typedef struct sl_shard_writer sl_shard_writer;

/* Starts a shard at path (written under a temporary name, renamed by the close that commits
 * it, so a crash never leaves a partial shard under its name). NULL with the reason in err. */
sl_shard_writer *sl_shard_writer_open(const char *path, const sl_shard_writer_opts *o, char *err,
                                      size_t errlen);
/* The next token added begins a document. */
void sl_shard_writer_doc(sl_shard_writer *w);
/* Appends tokens (each must be < vocab_size). */
int sl_shard_writer_add(sl_shard_writer *w, const uint32_t *tokens, size_t n, char *err,
                        size_t errlen);
/* Bytes written to the file so far (grows as batches of frames are compressed). */
uint64_t sl_shard_writer_bytes(const sl_shard_writer *w);
/* Tokens added so far. */
uint64_t sl_shard_writer_tokens(const sl_shard_writer *w);
/* Finishes the file (index, header, fsync, rename); frees w. 0 or -1. */
int sl_shard_writer_close(sl_shard_writer *w, sl_shard_header *out, char *err, size_t errlen);
/* Discards the temporary file; frees w. */
void sl_shard_writer_abort(sl_shard_writer *w);

/* Little-endian helpers shared by the io/ sources. */
static inline uint32_t sl_le32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t sl_le64(const unsigned char *p) {
    return (uint64_t)sl_le32(p) | (uint64_t)sl_le32(p + 4) << 32;
}
static inline void sl_put32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)v, p[1] = (unsigned char)(v >> 8), p[2] = (unsigned char)(v >> 16),
    p[3] = (unsigned char)(v >> 24);
}
static inline void sl_put64(unsigned char *p, uint64_t v) {
    sl_put32(p, (uint32_t)v);
    sl_put32(p + 4, (uint32_t)(v >> 32));
}

/* Encodes a header into its 136 on-disk bytes (computing header_crc) / decodes and checks
 * the skippable frame, magic, version, CRC and field ranges (not the file size). */
void sl_shard_header_encode(const sl_shard_header *h, unsigned char out[SL_SHARD_HEADER_BYTES]);
int sl_shard_header_decode(const unsigned char in[SL_SHARD_HEADER_BYTES], const char *name,
                           sl_shard_header *h, char *err, size_t errlen);

#endif
