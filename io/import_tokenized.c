/*
 * io/import_tokenized.c - the already-tokenized input formats of `sluice data build`: raw token
 * arrays, llm.c token files and Megatron .idx/.bin pairs, streamed into the sink with every token
 * checked against the vocabulary. Text and JSONL: io/import_text.c; detection, defaults and the
 * formats table: io/importers.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/log.h"
#include "io/importers.h"
#include "io/shard.h"

#define LLMC_HEADER 1024
#define MEG_HEADER  34

/* ---- already tokenized ---- */

/* Streams `count` tokens of `tb` bytes (2 or 4, little-endian) from fd at `off`; a document
 * starts at the first token and, with split_before/after set, around every `eod` token. */
static int stream_tokens(sl_sink *k, const char *path, int fd, uint64_t off, uint64_t count, int tb,
                         int64_t eod, bool split_before, char *err, size_t errlen) {
    unsigned char *b = sl_xmalloc(CHUNK_BYTES);
    const uint32_t vocab = k->vocab;
    uint64_t done = 0;
    int rc = sl_sink_doc(k, err, errlen);
    bool doc_after = false;
    while (rc == 0 && done < count) {
        size_t want =
            (size_t)((count - done) * (uint64_t)tb < CHUNK_BYTES ? (count - done) * (uint64_t)tb
                                                                 : CHUNK_BYTES);
        uint64_t at = off + done * (uint64_t)tb;
        ssize_t r = pread(fd, b, want, (off_t)at);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            rc =
                sl_fail(err, errlen, "%s: %s at byte offset %llu", path,
                        r < 0 ? strerror(errno) : "unexpected end of file", (unsigned long long)at);
            break;
        }
        size_t nt = (size_t)r / (size_t)tb;
        if (nt == 0) {
            rc = sl_fail(err, errlen, "%s: unexpected end of file at byte offset %llu", path,
                         (unsigned long long)at);
            break;
        }
        for (size_t i = 0; i < nt && rc == 0; i++) {
            uint32_t t =
                tb == 2 ? (uint32_t)b[2 * i] | (uint32_t)b[2 * i + 1] << 8 : sl_le32(b + 4 * i);
            if (t >= vocab) {
                rc = sl_fail(err, errlen,
                             "%s: byte offset %llu: token id %u >= vocab_size %u (set --vocab?)",
                             path, (unsigned long long)(at + (uint64_t)tb * i), t, vocab);
                break;
            }
            if (doc_after || (split_before && (int64_t)t == eod && done + i > 0)) {
                rc = sl_sink_doc(k, err, errlen);
                doc_after = false;
                if (rc) break;
            }
            rc = sl_sink_push(k, t, err, errlen);
            if (!split_before && eod >= 0 && (int64_t)t == eod) doc_after = true;
        }
        done += nt;
    }
    free(b);
    return rc;
}

int imp_open_sized(const char *path, uint64_t *size, char *err, size_t errlen) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return sl_fail(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return sl_fail(err, errlen, "%s: not a regular file", path);
    }
    *size = (uint64_t)st.st_size;
    return fd;
}

int imp_raw(sl_sink *k, const char *path, char *err, size_t errlen) {
    uint64_t size;
    int fd = imp_open_sized(path, &size, err, errlen);
    if (fd < 0) return -1;
    int tb = k->o->raw_token_bytes;
    int rc;
    if (size % (uint64_t)tb != 0)
        rc = sl_fail(err, errlen,
                     "%s: %llu bytes is not a whole number of %d-byte tokens (truncated, or the "
                     "wrong --dtype?)",
                     path, (unsigned long long)size, tb);
    else
        rc = stream_tokens(k, path, fd, 0, size / (uint64_t)tb, tb, k->o->eod, false, err, errlen);
    close(fd);
    return rc;
}

int imp_llmc_header(int fd, const char *path, uint64_t size, uint64_t *ntok, char *err,
                    size_t errlen) {
    unsigned char h[LLMC_HEADER];
    if (size < LLMC_HEADER || pread(fd, h, LLMC_HEADER, 0) != LLMC_HEADER)
        return sl_fail(err, errlen, "%s: truncated: shorter than the %d-byte llm.c header", path,
                       LLMC_HEADER);
    int32_t magic = (int32_t)sl_le32(h), ver = (int32_t)sl_le32(h + 4), n = (int32_t)sl_le32(h + 8);
    if (magic != LLMC_MAGIC)
        return sl_fail(err, errlen, "%s: byte offset 0: magic %d is not an llm.c token file (%d)",
                       path, magic, LLMC_MAGIC);
    if (ver != 1 && ver != 7)
        return sl_fail(err, errlen,
                       "%s: byte offset 4: llm.c version %d is not supported (1 = uint16, 7 = "
                       "uint32 tokens)",
                       path, ver);
    int tb = ver == 1 ? 2 : 4;
    if (n < 0 || (uint64_t)LLMC_HEADER + (uint64_t)n * (uint64_t)tb != size)
        return sl_fail(err, errlen,
                       "%s: byte offset 8: the header declares %d tokens (%llu bytes with the "
                       "header) but the file has %llu bytes",
                       path, n, (unsigned long long)((uint64_t)LLMC_HEADER + (uint64_t)n * tb),
                       (unsigned long long)size);
    *ntok = (uint64_t)n;
    return tb;
}

int imp_llmc(sl_sink *k, const char *path, char *err, size_t errlen) {
    uint64_t size, ntok;
    int fd = imp_open_sized(path, &size, err, errlen);
    if (fd < 0) return -1;
    int tb = imp_llmc_header(fd, path, size, &ntok, err, errlen);
    int rc = tb < 0 ? -1
                    : stream_tokens(k, path, fd, LLMC_HEADER, ntok, tb, k->o->eod, k->o->eod >= 0,
                                    err, errlen);
    close(fd);
    return rc;
}

/* Megatron: sequential reader over a little-endian array in a file. */
typedef struct {
    int fd;
    uint64_t off;
    unsigned char buf[1 << 16];
    size_t len, pos;
} seqrd;

static int seq_next(seqrd *s, size_t w, unsigned char *out) {
    if (s->pos + w > s->len) {
        size_t keep = s->len - s->pos;
        memmove(s->buf, s->buf + s->pos, keep);
        ssize_t r = pread(s->fd, s->buf + keep, sizeof s->buf - keep, (off_t)s->off);
        if (r < 0) return -1;
        s->off += (uint64_t)r;
        s->len = keep + (size_t)r;
        s->pos = 0;
        if (s->len < w) return -1;
    }
    memcpy(out, s->buf + s->pos, w);
    s->pos += w;
    return 0;
}

void imp_megatron_paths(const char *in, char **idx, char **bin) {
    size_t n = strlen(in);
    size_t base = n;
    if (n > 4 && (strcmp(in + n - 4, ".idx") == 0 || strcmp(in + n - 4, ".bin") == 0)) base = n - 4;
    *idx = sl_xmalloc(base + 5);
    *bin = sl_xmalloc(base + 5);
    memcpy(*idx, in, base);
    memcpy(*bin, in, base);
    memcpy(*idx + base, ".idx", 5);
    memcpy(*bin + base, ".bin", 5);
}

int imp_megatron(sl_sink *k, const char *in, char *err, size_t errlen) {
    char *ip, *bp;
    imp_megatron_paths(in, &ip, &bp);
    uint64_t isz = 0, bsz = 0;
    int ifd = -1, bfd = -1, rc = -1;
    seqrd *sz = NULL, *ptr = NULL, *di = NULL;
    unsigned char *b = NULL;
    if ((ifd = imp_open_sized(ip, &isz, err, errlen)) < 0) goto done;
    if ((bfd = imp_open_sized(bp, &bsz, err, errlen)) < 0) goto done;
    unsigned char h[MEG_HEADER];
    if (isz < MEG_HEADER || pread(ifd, h, MEG_HEADER, 0) != MEG_HEADER) {
        sl_fail(err, errlen, "%s: truncated: shorter than the %d-byte index header", ip,
                MEG_HEADER);
        goto done;
    }
    if (memcmp(h, "MMIDIDX\0\0", 9) != 0) {
        sl_fail(err, errlen, "%s: byte offset 0: not a Megatron index (magic MMIDIDX\\0\\0)", ip);
        goto done;
    }
    uint64_t ver = sl_le64(h + 9), nseq = sl_le64(h + 18), ndoc = sl_le64(h + 26);
    int code = h[17], w = 0;
    if (ver != 1) {
        sl_fail(err, errlen, "%s: byte offset 9: index version %llu is not supported (1)", ip,
                (unsigned long long)ver);
        goto done;
    }
    switch (code) {
    case 1:
    case 2:
        w = 1;
        break;
    case 3:
    case 8:
        w = 2;
        break;
    case 4:
        w = 4;
        break;
    case 5:
        w = 8;
        break;
    default:
        sl_fail(err, errlen, "%s: byte offset 17: dtype code %d is not an integer token type", ip,
                code);
        goto done;
    }
    if (nseq > (isz - MEG_HEADER) / 12 || ndoc > (isz - MEG_HEADER - 12 * nseq) / 8 || ndoc < 1) {
        sl_fail(err, errlen,
                "%s: truncated: %llu sequences and %llu document indices do not fit in %llu bytes",
                ip, (unsigned long long)nseq, (unsigned long long)ndoc, (unsigned long long)isz);
        goto done;
    }
    sz = sl_xcalloc(1, sizeof *sz), ptr = sl_xcalloc(1, sizeof *ptr),
    di = sl_xcalloc(1, sizeof *di);
    sz->fd = ptr->fd = di->fd = ifd;
    sz->off = MEG_HEADER;
    ptr->off = MEG_HEADER + 4 * nseq;
    di->off = MEG_HEADER + 12 * nseq;
    b = sl_xmalloc(CHUNK_BYTES);
    const uint32_t vocab = k->vocab;
    unsigned char e[8];
    uint64_t prev_doc;
    if (seq_next(di, 8, e) != 0) goto trunc;
    prev_doc = sl_le64(e);
    if (prev_doc != 0) {
        sl_fail(err, errlen, "%s: byte offset %llu: the first document index is %llu, not 0", ip,
                (unsigned long long)(MEG_HEADER + 12 * nseq), (unsigned long long)prev_doc);
        goto done;
    }
    uint64_t s = 0;
    for (uint64_t d = 1; d < ndoc; d++) {
        if (seq_next(di, 8, e) != 0) goto trunc;
        uint64_t end = sl_le64(e);
        if (end < prev_doc || end > nseq) {
            sl_fail(err, errlen,
                    "%s: byte offset %llu: document index %llu out of order or past the %llu "
                    "sequences",
                    ip, (unsigned long long)(MEG_HEADER + 12 * nseq + 8 * d),
                    (unsigned long long)end, (unsigned long long)nseq);
            goto done;
        }
        bool started = false;
        for (; s < end; s++) {
            unsigned char l4[4], p8[8];
            if (seq_next(sz, 4, l4) != 0 || seq_next(ptr, 8, p8) != 0) goto trunc;
            int32_t len = (int32_t)sl_le32(l4);
            uint64_t p = sl_le64(p8);
            if (len < 0 || p > bsz || (uint64_t)len * (uint64_t)w > bsz - p) {
                sl_fail(err, errlen,
                        "%s: sequence %llu: %d tokens at byte offset %llu do not fit in %s (%llu "
                        "bytes)",
                        ip, (unsigned long long)s, len, (unsigned long long)p, bp,
                        (unsigned long long)bsz);
                goto done;
            }
            uint64_t left = (uint64_t)len * (uint64_t)w, at = p;
            while (left) {
                size_t want = left < CHUNK_BYTES ? (size_t)left : CHUNK_BYTES;
                ssize_t r = pread(bfd, b, want, (off_t)at);
                if (r <= 0 || (size_t)r % (size_t)w) {
                    sl_fail(err, errlen, "%s: read error at byte offset %llu", bp,
                            (unsigned long long)at);
                    goto done;
                }
                if (!started && r > 0) {
                    if (sl_sink_doc(k, err, errlen)) goto done;
                    started = true;
                }
                for (size_t i = 0; i < (size_t)r / (size_t)w; i++) {
                    const unsigned char *q = b + i * (size_t)w;
                    int64_t t;
                    switch (code) {
                    case 1:
                        t = q[0];
                        break;
                    case 2:
                        t = (int8_t)q[0];
                        break;
                    case 3:
                        t = (int16_t)(uint16_t)(q[0] | q[1] << 8);
                        break;
                    case 8:
                        t = (uint16_t)(q[0] | q[1] << 8);
                        break;
                    case 4:
                        t = (int32_t)sl_le32(q);
                        break;
                    default:
                        t = (int64_t)sl_le64(q);
                        break;
                    }
                    if (t < 0 || t >= (int64_t)vocab) {
                        sl_fail(err, errlen,
                                "%s: byte offset %llu: token id %lld outside [0, vocab_size %u)",
                                bp, (unsigned long long)(at + i * (size_t)w), (long long)t, vocab);
                        goto done;
                    }
                    if (sl_sink_push(k, (uint32_t)t, err, errlen)) goto done;
                }
                at += (uint64_t)r;
                left -= (uint64_t)r;
            }
        }
        if (started && k->o->add_eod >= 0 && sl_sink_push(k, (uint32_t)k->o->add_eod, err, errlen))
            goto done;
        prev_doc = end;
    }
    if (s != nseq) {
        sl_fail(err, errlen, "%s: the document indices cover %llu of the %llu sequences", ip,
                (unsigned long long)s, (unsigned long long)nseq);
        goto done;
    }
    rc = 0;
    goto done;
trunc:
    sl_fail(err, errlen, "%s: truncated index", ip);
done:
    free(sz), free(ptr), free(di), free(b);
    if (ifd >= 0) close(ifd);
    if (bfd >= 0) close(bfd);
    free(ip), free(bp);
    return rc;
}
