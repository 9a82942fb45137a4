/* io/shard.c - shard header/index parsing and frame decoding (see shard.h and
 * docs/shard-format.md). Everything read from a file is bounds-checked before use. */
#include "io/shard.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include "core/log.h"
#include "io/crc32c.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "sluice token shards store little-endian tokens; this build assumes a little-endian host"
#endif

static const char k_header_magic[8] = {'S', 'L', 'U', 'I', 'C', 'E', 'S', 'H'};
static const char k_index_magic[8] = {'S', 'L', 'U', 'I', 'C', 'E', 'I', 'X'};

struct sl_shard {
    char *name;
    int fd;                   /* -1 for a memory image */
    const unsigned char *mem; /* memory image */
    uint64_t size;            /* actual file size */
    sl_shard_header h;
    sl_shard_frame *frames;
};

/* ---- header ---- */

void sl_shard_header_encode(const sl_shard_header *h, unsigned char out[SL_SHARD_HEADER_BYTES]) {
    memset(out, 0, SL_SHARD_HEADER_BYTES);
    sl_put32(out, SL_SHARD_SKIP_MAGIC);
    sl_put32(out + 4, SL_SHARD_HEADER_CONTENT);
    unsigned char *c = out + 8;
    memcpy(c, k_header_magic, 8);
    sl_put32(c + 8, h->version);
    sl_put32(c + 12, SL_SHARD_HEADER_CONTENT);
    sl_put32(c + 16, h->token_bytes);
    sl_put32(c + 20, h->vocab_size);
    sl_put32(c + 24, h->eod_token);
    sl_put32(c + 28, h->frame_tokens);
    sl_put64(c + 32, h->n_tokens);
    sl_put64(c + 40, h->n_docs);
    sl_put64(c + 48, h->n_frames);
    sl_put64(c + 56, h->index_offset);
    sl_put64(c + 64, h->index_bytes);
    sl_put64(c + 72, h->file_size);
    sl_put64(c + 80, h->payload_bytes);
    sl_put32(c + 88, h->index_crc);
    sl_put32(c + 92, 0); /* flags */
    memcpy(c + 96, h->tokenizer_hash, SL_SHARD_TOKENIZER_HASH);
    sl_put32(c + 124, sl_crc32c(0, c, 124));
}

int sl_shard_header_decode(const unsigned char in[SL_SHARD_HEADER_BYTES], const char *name,
                           sl_shard_header *h, char *err, size_t errlen) {
    memset(h, 0, sizeof *h);
    uint32_t skip = sl_le32(in);
    if (skip != SL_SHARD_SKIP_MAGIC) {
        if (skip == SL_SHARD_ZSTD_MAGIC)
            return sl_fail(err, errlen,
                           "%s: byte offset 0: a plain zstd file, not a sluice shard (no shard "
                           "header; build shards with 'sluice data build')",
                           name);
        return sl_fail(err, errlen, "%s: byte offset 0: bad magic 0x%08x: not a sluice shard", name,
                       skip);
    }
    const unsigned char *c = in + 8;
    if (sl_le32(in + 4) != SL_SHARD_HEADER_CONTENT || memcmp(c, k_header_magic, 8) != 0)
        return sl_fail(err, errlen, "%s: byte offset 8: bad header magic: not a sluice shard",
                       name);
    h->version = sl_le32(c + 8);
    h->header_crc = sl_le32(c + 124);
    uint32_t crc = sl_crc32c(0, c, 124);
    if (h->version == 0 && crc != h->header_crc)
        return sl_fail(err, errlen,
                       "%s: byte offset 8: placeholder header: the file was never finished (an "
                       "interrupted build?)",
                       name);
    if (h->version != SL_SHARD_VERSION)
        return sl_fail(err, errlen,
                       "%s: byte offset 16: unsupported shard format version %u (this build reads "
                       "version %d)",
                       name, h->version, SL_SHARD_VERSION);
    if (crc != h->header_crc)
        return sl_fail(err, errlen,
                       "%s: byte offset 8: header checksum mismatch (stored 0x%08x, computed "
                       "0x%08x): the header is corrupt",
                       name, h->header_crc, crc);
    h->token_bytes = sl_le32(c + 16);
    h->vocab_size = sl_le32(c + 20);
    h->eod_token = sl_le32(c + 24);
    h->frame_tokens = sl_le32(c + 28);
    h->n_tokens = sl_le64(c + 32);
    h->n_docs = sl_le64(c + 40);
    h->n_frames = sl_le64(c + 48);
    h->index_offset = sl_le64(c + 56);
    h->index_bytes = sl_le64(c + 64);
    h->file_size = sl_le64(c + 72);
    h->payload_bytes = sl_le64(c + 80);
    h->index_crc = sl_le32(c + 88);
    uint32_t flags = sl_le32(c + 92);
    memcpy(h->tokenizer_hash, c + 96, SL_SHARD_TOKENIZER_HASH);
    if (sl_le32(c + 12) != SL_SHARD_HEADER_CONTENT || flags != 0)
        return sl_fail(err, errlen, "%s: byte offset 20: unsupported header size or flags", name);
    if (h->token_bytes != 2 && h->token_bytes != 4)
        return sl_fail(err, errlen, "%s: byte offset 24: token width %u bytes (must be 2 or 4)",
                       name, h->token_bytes);
    if (h->vocab_size == 0 || h->vocab_size > (uint32_t)INT32_MAX ||
        (h->token_bytes == 2 && h->vocab_size > 65536))
        return sl_fail(err, errlen,
                       "%s: byte offset 28: vocabulary size %u impossible for %u-byte "
                       "tokens",
                       name, h->vocab_size, h->token_bytes);
    if (h->eod_token != SL_SHARD_NO_EOD && h->eod_token >= h->vocab_size)
        return sl_fail(err, errlen, "%s: byte offset 32: end-of-document token %u >= vocab_size %u",
                       name, h->eod_token, h->vocab_size);
    if (h->frame_tokens == 0 || h->frame_tokens > SL_SHARD_MAX_FRAME_TOKENS)
        return sl_fail(err, errlen, "%s: byte offset 36: frame size %u tokens out of range [1, %u]",
                       name, h->frame_tokens, SL_SHARD_MAX_FRAME_TOKENS);
    if (h->n_docs > h->n_tokens)
        return sl_fail(err, errlen, "%s: byte offset 48: %llu documents but only %llu tokens", name,
                       (unsigned long long)h->n_docs, (unsigned long long)h->n_tokens);
    if (h->n_frames > (UINT32_MAX - 8) / SL_SHARD_ENTRY_BYTES ||
        h->index_bytes != 8 + SL_SHARD_ENTRY_BYTES * h->n_frames)
        return sl_fail(err, errlen, "%s: byte offset 72: index size %llu does not fit %llu frames",
                       name, (unsigned long long)h->index_bytes, (unsigned long long)h->n_frames);
    if (h->index_offset != SL_SHARD_HEADER_BYTES + h->payload_bytes ||
        h->index_offset < SL_SHARD_HEADER_BYTES ||
        h->file_size != h->index_offset + 8 + h->index_bytes)
        return sl_fail(err, errlen,
                       "%s: byte offset 64: inconsistent index offset / file size in "
                       "the header",
                       name);
    return 0;
}

bool sl_shard_has_tokenizer(const sl_shard_header *h) {
    for (int i = 0; i < SL_SHARD_TOKENIZER_HASH; i++)
        if (h->tokenizer_hash[i]) return true;
    return false;
}

void sl_shard_tokenizer_hex(const uint8_t hash[SL_SHARD_TOKENIZER_HASH], char out[33]) {
    for (int i = 0; i < SL_SHARD_TOKENIZER_HASH; i++) snprintf(out + 2 * i, 3, "%02x", hash[i]);
}

/* ---- opening ---- */

static int src_read(const sl_shard *s, void *buf, size_t n, uint64_t off, char *err,
                    size_t errlen) {
    if (off > s->size || n > s->size - off)
        return sl_fail(err, errlen, "%s: truncated: needs bytes [%llu, %llu) but the file has %llu",
                       s->name, (unsigned long long)off, (unsigned long long)(off + n),
                       (unsigned long long)s->size);
    if (s->mem) {
        memcpy(buf, s->mem + off, n);
        return 0;
    }
    size_t done = 0;
    while (done < n) {
        ssize_t r = pread(s->fd, (char *)buf + done, n - done, (off_t)(off + done));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0)
            return sl_fail(err, errlen, "%s: read error at byte offset %llu: %s", s->name,
                           (unsigned long long)(off + done), strerror(errno));
        if (r == 0)
            return sl_fail(err, errlen, "%s: truncated: unexpected end of file at byte offset %llu",
                           s->name, (unsigned long long)(off + done));
        done += (size_t)r;
    }
    return 0;
}

static int load_index(sl_shard *s, char *err, size_t errlen) {
    const sl_shard_header *h = &s->h;
    if (s->size != h->file_size)
        return sl_fail(err, errlen, "%s: file is %llu bytes but its header records %llu (%s)",
                       s->name, (unsigned long long)s->size, (unsigned long long)h->file_size,
                       s->size < h->file_size ? "truncated" : "trailing garbage");
    size_t n = (size_t)(8 + h->index_bytes);
    unsigned char *ix = malloc(n);
    if (!ix) return sl_fail(err, errlen, "%s: cannot allocate %zu bytes for the index", s->name, n);
    if (src_read(s, ix, n, h->index_offset, err, errlen) != 0) {
        free(ix);
        return -1;
    }
    int rc = -1;
    uint32_t crc = sl_crc32c(0, ix + 8, n - 8);
    if (sl_le32(ix) != SL_SHARD_SKIP_MAGIC || sl_le32(ix + 4) != h->index_bytes) {
        sl_fail(err, errlen, "%s: byte offset %llu: bad index frame header", s->name,
                (unsigned long long)h->index_offset);
        goto done;
    }
    if (crc != h->index_crc) {
        sl_fail(err, errlen,
                "%s: byte offset %llu: index checksum mismatch (stored 0x%08x, computed 0x%08x): "
                "the frame index is corrupt",
                s->name, (unsigned long long)h->index_offset, h->index_crc, crc);
        goto done;
    }
    if (memcmp(ix + 8, k_index_magic, 8) != 0) {
        sl_fail(err, errlen, "%s: byte offset %llu: bad index magic", s->name,
                (unsigned long long)(h->index_offset + 8));
        goto done;
    }
    s->frames = calloc(h->n_frames ? h->n_frames : 1, sizeof(sl_shard_frame));
    if (!s->frames) {
        sl_fail(err, errlen, "%s: cannot allocate the frame table", s->name);
        goto done;
    }
    uint64_t pos = SL_SHARD_HEADER_BYTES, tok = 0, doc = 0;
    const size_t tb = h->token_bytes;
    for (uint64_t i = 0; i < h->n_frames; i++) {
        const unsigned char *e = ix + 16 + SL_SHARD_ENTRY_BYTES * i;
        sl_shard_frame *f = &s->frames[i];
        f->offset = sl_le64(e);
        f->first_token = sl_le64(e + 8);
        f->first_doc = sl_le64(e + 16);
        f->csize = sl_le32(e + 24);
        f->n_tokens = sl_le32(e + 28);
        f->n_docs = sl_le32(e + 32);
        f->crc = sl_le32(e + 36);
        const char *what = NULL;
        if (f->offset != pos)
            what = "frame offset does not follow the previous frame";
        else if (f->n_tokens == 0 || f->n_tokens > h->frame_tokens)
            what = "token count out of range";
        else if (f->n_docs > f->n_tokens)
            what = "more documents than tokens";
        else if (f->first_token != tok || f->first_doc != doc)
            what = "first token / first document does not match the running totals";
        else if (f->csize < 9 || f->csize > ZSTD_compressBound(f->n_tokens * tb))
            what = "compressed size out of range";
        else if (sl_shard_frame_span(f) > h->index_offset - pos)
            what = "frame extends past the index";
        if (what) {
            sl_fail(err, errlen, "%s: frame %llu (index entry at byte offset %llu): %s", s->name,
                    (unsigned long long)i,
                    (unsigned long long)(h->index_offset + 16 + SL_SHARD_ENTRY_BYTES * i), what);
            goto done;
        }
        pos += sl_shard_frame_span(f);
        tok += f->n_tokens;
        doc += f->n_docs;
    }
    if (pos != h->index_offset || tok != h->n_tokens || doc != h->n_docs) {
        sl_fail(err, errlen,
                "%s: the frame index does not add up to the header's totals (%llu tokens, %llu "
                "documents, payload end %llu; header: %llu, %llu, %llu)",
                s->name, (unsigned long long)tok, (unsigned long long)doc, (unsigned long long)pos,
                (unsigned long long)h->n_tokens, (unsigned long long)h->n_docs,
                (unsigned long long)h->index_offset);
        goto done;
    }
    rc = 0;
done:
    free(ix);
    return rc;
}

/* Whether the first n bytes of a file (n > 0) begin a shard: the skippable-frame magic, or as
 * much of it as a shorter file holds (a truncated shard). */
static bool starts_as_shard(const unsigned char *b, size_t n) {
    unsigned char magic[4];
    sl_put32(magic, SL_SHARD_SKIP_MAGIC);
    return memcmp(b, magic, n < 4 ? n : 4) == 0;
}

/* Reads and decodes the header of s into s->h: 0, or -1 with err set. A file that does not
 * begin with the shard magic is "not a sluice shard" however short it is; a shorter one that
 * does is truncated. */
static int read_header(sl_shard *s, char *err, size_t errlen) {
    unsigned char hb[SL_SHARD_HEADER_BYTES] = {0};
    const size_t have = s->size < sizeof hb ? (size_t)s->size : sizeof hb;
    if (src_read(s, hb, have, 0, err, errlen) != 0) return -1;
    if (have > 0 && !starts_as_shard(hb, have))
        return sl_shard_header_decode(hb, s->name, &s->h, err, errlen); /* fails: the magic */
    if (have < sizeof hb)
        return sl_fail(err, errlen,
                       "%s: truncated: %llu bytes, shorter than the %d-byte shard header", s->name,
                       (unsigned long long)s->size, SL_SHARD_HEADER_BYTES);
    return sl_shard_header_decode(hb, s->name, &s->h, err, errlen);
}

static sl_shard *open_common(sl_shard *s, char *err, size_t errlen) {
    if (read_header(s, err, errlen) != 0) goto bad;
    if (load_index(s, err, errlen) != 0) goto bad;
    return s;
bad:
    sl_shard_close(s);
    return NULL;
}

sl_shard *sl_shard_open(const char *path, char *err, size_t errlen) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        sl_fail(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        sl_fail(err, errlen, "%s: not a regular file", path);
        close(fd);
        return NULL;
    }
    sl_shard *s = sl_xcalloc(1, sizeof *s);
    s->name = sl_xstrdup(path);
    s->fd = fd;
    s->size = (uint64_t)st.st_size;
    return open_common(s, err, errlen);
}

sl_shard *sl_shard_open_mem(const void *data, size_t size, const char *name, char *err,
                            size_t errlen) {
    sl_shard *s = sl_xcalloc(1, sizeof *s);
    s->name = sl_xstrdup(name);
    s->fd = -1;
    s->mem = data;
    s->size = size;
    return open_common(s, err, errlen);
}

void sl_shard_close(sl_shard *s) {
    if (!s) return;
    if (s->fd >= 0) close(s->fd);
    free(s->frames);
    free(s->name);
    free(s);
}

const sl_shard_header *sl_shard_hdr(const sl_shard *s) {
    return &s->h;
}
const sl_shard_frame *sl_shard_frames(const sl_shard *s) {
    return s->frames;
}
const char *sl_shard_name(const sl_shard *s) {
    return s->name;
}

int sl_shard_read_header(const char *path, sl_shard_header *h, char *err, size_t errlen) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return sl_fail(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    sl_shard s = {.name = (char *)path, .fd = fd};
    int rc = -1;
    memset(h, 0, sizeof *h);
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        sl_fail(err, errlen, "%s: not a regular file", path);
        goto done;
    }
    s.size = (uint64_t)st.st_size;
    if (read_header(&s, err, errlen) != 0) goto done;
    *h = s.h;
    if (s.size != h->file_size) {
        sl_fail(err, errlen, "%s: file is %llu bytes but its header records %llu (%s)", path,
                (unsigned long long)s.size, (unsigned long long)h->file_size,
                s.size < h->file_size ? "truncated" : "trailing garbage");
        goto done;
    }
    rc = 0;
done:
    close(fd);
    return rc;
}

bool sl_shard_not_a_shard(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    unsigned char m[4];
    ssize_t n;
    do n = read(fd, m, sizeof m);
    while (n < 0 && errno == EINTR);
    close(fd);
    return n > 0 && !starts_as_shard(m, (size_t)n);
}

/* ---- frames ---- */

void sl_frame_buf_free(sl_frame_buf *b) {
    free(b->tokens);
    free(b->docs);
    free(b->cbuf);
    ZSTD_freeDCtx(b->dctx);
    memset(b, 0, sizeof *b);
}

static uint32_t max_u16(const uint16_t *t, size_t n) {
    uint16_t m = 0;
    for (size_t i = 0; i < n; i++) m = t[i] > m ? t[i] : m;
    return m;
}
static uint32_t max_u32(const uint32_t *t, size_t n) {
    uint32_t m = 0;
    for (size_t i = 0; i < n; i++) m = t[i] > m ? t[i] : m;
    return m;
}

int sl_shard_read_frame(sl_shard *s, uint64_t fi, sl_frame_buf *b, char *err, size_t errlen) {
    const sl_shard_header *h = &s->h;
    b->n_tokens = b->n_docs = 0;
    if (fi >= h->n_frames)
        return sl_fail(err, errlen, "%s: frame %llu does not exist (the shard has %llu)", s->name,
                       (unsigned long long)fi, (unsigned long long)h->n_frames);
    const sl_shard_frame *f = &s->frames[fi];
    const unsigned long long fno = (unsigned long long)fi, off = (unsigned long long)f->offset;
    size_t span = (size_t)sl_shard_frame_span(f);
    sl_xreserve((void **)&b->cbuf, &b->cbuf_cap, span);
    if (src_read(s, b->cbuf, span, f->offset, err, errlen) != 0) return -1;
    uint32_t crc = sl_crc32c(0, b->cbuf, span);
    if (crc != f->crc)
        return sl_fail(err, errlen,
                       "%s: frame %llu (byte offset %llu): checksum mismatch (stored 0x%08x, "
                       "computed 0x%08x): the frame is corrupt",
                       s->name, fno, off, f->crc, crc);
    const unsigned char *c = b->cbuf;
    if (sl_le32(c) != SL_SHARD_ZSTD_MAGIC)
        return sl_fail(err, errlen, "%s: frame %llu (byte offset %llu): not a zstd frame", s->name,
                       fno, off);
    if (!((c[4] >> 2) & 1))
        return sl_fail(err, errlen,
                       "%s: frame %llu (byte offset %llu): zstd frame without a content checksum",
                       s->name, fno, off);
    const size_t tb = h->token_bytes, want = (size_t)f->n_tokens * tb;
    unsigned long long fcs = ZSTD_getFrameContentSize(c, f->csize);
    if (fcs != want)
        return sl_fail(err, errlen,
                       "%s: frame %llu (byte offset %llu): zstd frame declares %lld content bytes, "
                       "the index %zu",
                       s->name, fno, off, fcs >= ZSTD_CONTENTSIZE_ERROR ? -1LL : (long long)fcs,
                       want);
    size_t fsz = ZSTD_findFrameCompressedSize(c, f->csize);
    if (ZSTD_isError(fsz) || fsz != f->csize)
        return sl_fail(
            err, errlen,
            "%s: frame %llu (byte offset %llu): zstd frame size does not match the index "
            "(%s)",
            s->name, fno, off, ZSTD_isError(fsz) ? ZSTD_getErrorName(fsz) : "size differs");
    if (!b->dctx) {
        b->dctx = ZSTD_createDCtx();
        if (!b->dctx) sl_fatal("ZSTD_createDCtx failed");
    }
    sl_xreserve(&b->tokens, &b->tokens_cap, want);
    size_t r = ZSTD_decompressDCtx(b->dctx, b->tokens, want, c, f->csize);
    if (ZSTD_isError(r) || r != want)
        return sl_fail(err, errlen, "%s: frame %llu (byte offset %llu): zstd: %s", s->name, fno,
                       off, ZSTD_isError(r) ? ZSTD_getErrorName(r) : "short output");
    /* document offsets */
    if (f->n_docs) {
        const unsigned char *d = c + f->csize;
        if (sl_le32(d) != SL_SHARD_SKIP_MAGIC || sl_le32(d + 4) != 4 * f->n_docs)
            return sl_fail(err, errlen,
                           "%s: frame %llu (byte offset %llu): bad document-offset frame header",
                           s->name, fno, (unsigned long long)(f->offset + f->csize));
        sl_xreserve((void **)&b->docs, &b->docs_cap, 4 * (size_t)f->n_docs);
        uint32_t prev = 0;
        for (uint32_t i = 0; i < f->n_docs; i++) {
            uint32_t v = sl_le32(d + 8 + 4 * (size_t)i);
            if (v >= f->n_tokens || (i > 0 && v <= prev))
                return sl_fail(
                    err, errlen,
                    "%s: frame %llu (byte offset %llu): document offset %u (entry %u) is "
                    "out of order or past the frame's %u tokens",
                    s->name, fno, (unsigned long long)(f->offset + f->csize + 8 + 4 * i), v, i,
                    f->n_tokens);
            b->docs[i] = prev = v;
        }
    }
    /* token ids */
    if (!b->skip_vocab_check && !(tb == 2 && h->vocab_size >= 65536)) {
        uint32_t m = tb == 2 ? max_u16(b->tokens, f->n_tokens) : max_u32(b->tokens, f->n_tokens);
        if (m >= h->vocab_size) {
            uint32_t i = 0, v = 0;
            for (; i < f->n_tokens; i++) {
                v = tb == 2 ? ((const uint16_t *)b->tokens)[i] : ((const uint32_t *)b->tokens)[i];
                if (v >= h->vocab_size) break;
            }
            return sl_shard_vocab_error(s->name, fi, f, i, v, h->vocab_size, err, errlen);
        }
    }
    b->n_tokens = f->n_tokens;
    b->n_docs = f->n_docs;
    return 0;
}

int sl_shard_vocab_error(const char *name, uint64_t fi, const sl_shard_frame *f, uint32_t i,
                         uint32_t v, uint32_t vocab, char *err, size_t errlen) {
    return sl_fail(err, errlen,
                   "%s: frame %llu (byte offset %llu): token %u of the frame (token %llu of the "
                   "shard) has id %u >= vocab_size %u",
                   name, (unsigned long long)fi, (unsigned long long)f->offset, i,
                   (unsigned long long)(f->first_token + i), v, vocab);
}

/* ---- verification ---- */

int sl_shard_verify(const char *path, sl_shard_verify_info *info,
                    void (*report)(void *user, const char *msg), void *user) {
    char err[1024];
    if (info) memset(info, 0, sizeof *info);
    sl_shard *s = sl_shard_open(path, err, sizeof err);
    if (!s) {
        if (report) report(user, err);
        return 1;
    }
    if (info) info->h = s->h, info->header_ok = true;
    int problems = 0;
    sl_frame_buf b = {0};
    for (uint64_t i = 0; i < s->h.n_frames; i++) {
        if (sl_shard_read_frame(s, i, &b, err, sizeof err) != 0) {
            problems++;
            if (report) report(user, err);
        }
    }
    sl_frame_buf_free(&b);
    sl_shard_close(s);
    return problems;
}
