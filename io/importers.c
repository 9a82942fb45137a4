/*
 * io/importers.c - the input formats of `sluice data build` (see importers.h and build.h): the
 * byte-level tokenizer for text and JSONL, already-tokenized raw, llm.c and Megatron files,
 * format detection and each format's defaults.
 */
#include "io/importers.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/log.h"
#include "io/shard.h"

#define TEXT_VOCAB  257
#define TEXT_EOD    256
#define LLMC_MAGIC  20240520
#define LLMC_HEADER 1024
#define MEG_HEADER  34
#define CHUNK_BYTES (1u << 20)

/* ---- text ---- */

/* A document of a text file being assembled. Byte-level, its bytes are pushed as they come
 * (nothing is held, however long the document); with a tokenizer they are collected and the
 * whole document goes to sl_sink_text. */
typedef struct {
    sl_sink *k;
    const char *path;
    char *buf;
    size_t len, cap;
    uint64_t start; /* file offset of its first byte */
} text_doc;

static int doc_begin(text_doc *d, uint64_t at, char *err, size_t errlen) {
    if (!d->k->enc) return sl_sink_doc(d->k, err, errlen);
    d->len = 0;
    d->start = at;
    return 0;
}

static inline int doc_byte(text_doc *d, unsigned char c, char *err, size_t errlen) {
    if (!d->k->enc) return sl_sink_push(d->k, c, err, errlen);
    if (d->len == d->cap) sl_xreserve((void **)&d->buf, &d->cap, d->len + 1);
    d->buf[d->len++] = (char)c;
    return 0;
}

static int doc_end(text_doc *d, char *err, size_t errlen) {
    if (!d->k->enc) return sl_sink_push(d->k, TEXT_EOD, err, errlen);
    return sl_sink_text(d->k, d->buf, d->len, (sl_doc_origin){d->path, 0, d->start}, err, errlen);
}

static int import_text(sl_sink *k, const char *path, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) return sl_fail(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    unsigned char *b = sl_xmalloc(CHUNK_BYTES);
    const sl_text_docs mode = k->o->text_docs;
    text_doc d = {.k = k, .path = path};
    bool in_doc = false;
    uint64_t line_len = 0, base = 0;
    bool pending_nl = false;
    int rc = 0;
    size_t got;
    while (rc == 0 && (got = fread(b, 1, CHUNK_BYTES, f)) > 0) {
        for (size_t i = 0; i < got && rc == 0; i++) {
            unsigned char ch = b[i];
            const uint64_t at = base + i;
            if (mode == SL_TEXT_DOC_FILE) {
                if (!in_doc) rc = doc_begin(&d, at, err, errlen), in_doc = true;
                if (rc == 0) rc = doc_byte(&d, ch, err, errlen);
            } else if (mode == SL_TEXT_DOC_LINE) {
                if (ch == '\n') {
                    if (in_doc) rc = doc_end(&d, err, errlen);
                    in_doc = false;
                } else {
                    if (!in_doc) rc = doc_begin(&d, at, err, errlen), in_doc = true;
                    if (rc == 0) rc = doc_byte(&d, ch, err, errlen);
                }
            } else { /* paragraph */
                if (ch == '\n') {
                    if (line_len == 0 && in_doc) {
                        rc = doc_end(&d, err, errlen);
                        in_doc = pending_nl = false;
                    } else if (line_len > 0) {
                        pending_nl = true;
                    }
                    line_len = 0;
                } else {
                    if (!in_doc) {
                        rc = doc_begin(&d, at, err, errlen);
                        in_doc = true;
                        pending_nl = false;
                    } else if (pending_nl) {
                        rc = doc_byte(&d, '\n', err, errlen);
                        pending_nl = false;
                    }
                    if (rc == 0) rc = doc_byte(&d, ch, err, errlen);
                    line_len++;
                }
            }
        }
        base += got;
    }
    if (rc == 0 && ferror(f))
        rc = sl_fail(err, errlen, "%s: read error: %s", path, strerror(errno));
    if (rc == 0 && in_doc) rc = doc_end(&d, err, errlen);
    free(d.buf);
    free(b);
    fclose(f);
    return rc;
}

/* Whether JSON text s (n bytes) escapes a NUL character (\u0000): cJSON ends its strings there,
 * so the rest of the text would be lost without a word. */
static bool escapes_nul(const char *s, size_t n) {
    for (size_t i = 0; i + 1 < n; i++) {
        if (s[i] != '\\') continue;
        if (s[i + 1] == 'u' && i + 5 < n && memcmp(s + i + 2, "0000", 4) == 0) return true;
        i++; /* the escaped character */
    }
    return false;
}

static int import_jsonl(sl_sink *k, const char *path, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) return sl_fail(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    uint64_t lineno = 0;
    int rc = 0;
    while (rc == 0 && (len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        ssize_t s = 0;
        while (s < len && (line[s] == ' ' || line[s] == '\t' || line[s] == '\r' || line[s] == '\n'))
            s++;
        if (s == len) continue; /* blank line */
        cJSON *o = cJSON_ParseWithLength(line, (size_t)len);
        if (!o) {
            rc = sl_fail(err, errlen, "%s: line %llu: not valid JSON", path,
                         (unsigned long long)lineno);
            break;
        }
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "text");
        if (!cJSON_IsString(t) || !t->valuestring) {
            rc = sl_fail(err, errlen, "%s: line %llu: no string field \"text\"", path,
                         (unsigned long long)lineno);
        } else if (escapes_nul(line, (size_t)len)) {
            rc = sl_fail(err, errlen,
                         "%s: line %llu: the line escapes a NUL character (\\u0000), which the "
                         "JSON parser cannot carry in a string",
                         path, (unsigned long long)lineno);
        } else if (t->valuestring[0]) {
            rc = sl_sink_text(k, t->valuestring, strlen(t->valuestring),
                              (sl_doc_origin){path, lineno, 0}, err, errlen);
        }
        cJSON_Delete(o);
    }
    if (rc == 0 && ferror(f))
        rc = sl_fail(err, errlen, "%s: read error: %s", path, strerror(errno));
    free(line);
    fclose(f);
    return rc;
}

int sl_sink_text(sl_sink *k, const char *text, size_t len, sl_doc_origin origin, char *err,
                 size_t errlen) {
    if (k->enc) return sl_doc_encoder_submit(k->enc, text, len, origin, err, errlen);
    int rc = sl_sink_doc(k, err, errlen);
    for (size_t i = 0; i < len && rc == 0; i++)
        rc = sl_sink_push(k, (unsigned char)text[i], err, errlen);
    return rc ? rc : sl_sink_push(k, TEXT_EOD, err, errlen);
}

int sl_sink_encoded(void *user, const uint32_t *ids, size_t n, char *err, size_t errlen) {
    sl_sink *k = user;
    if (sl_sink_doc(k, err, errlen) != 0) return -1;
    for (size_t i = 0; i < n; i++)
        if (sl_sink_push(k, ids[i], err, errlen) != 0) return -1;
    return k->eod >= 0 ? sl_sink_push(k, (uint32_t)k->eod, err, errlen) : 0;
}

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

static int open_sized(const char *path, uint64_t *size, char *err, size_t errlen) {
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

static int import_raw(sl_sink *k, const char *path, char *err, size_t errlen) {
    uint64_t size;
    int fd = open_sized(path, &size, err, errlen);
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

/* llm.c header: returns token width or -1. */
static int llmc_header(int fd, const char *path, uint64_t size, uint64_t *ntok, char *err,
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

static int import_llmc(sl_sink *k, const char *path, char *err, size_t errlen) {
    uint64_t size, ntok;
    int fd = open_sized(path, &size, err, errlen);
    if (fd < 0) return -1;
    int tb = llmc_header(fd, path, size, &ntok, err, errlen);
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

static void megatron_paths(const char *in, char **idx, char **bin) {
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

static int import_megatron(sl_sink *k, const char *in, char *err, size_t errlen) {
    char *ip, *bp;
    megatron_paths(in, &ip, &bp);
    uint64_t isz = 0, bsz = 0;
    int ifd = -1, bfd = -1, rc = -1;
    seqrd *sz = NULL, *ptr = NULL, *di = NULL;
    unsigned char *b = NULL;
    if ((ifd = open_sized(ip, &isz, err, errlen)) < 0) goto done;
    if ((bfd = open_sized(bp, &bsz, err, errlen)) < 0) goto done;
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

/* ---- format detection and defaults ---- */

static bool ends_with(const char *s, const char *suf) {
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && strcmp(s + n - m, suf) == 0;
}

static sl_input_format detect_format(const char *path) {
    if (ends_with(path, ".jsonl") || ends_with(path, ".json")) return SL_FMT_JSONL;
    if (ends_with(path, ".txt") || ends_with(path, ".md") || ends_with(path, ".text"))
        return SL_FMT_TEXT;
    if (ends_with(path, ".idx")) return SL_FMT_MEGATRON;
    if (ends_with(path, ".bin")) {
        char *ip, *bp;
        megatron_paths(path, &ip, &bp);
        struct stat st;
        bool meg = stat(ip, &st) == 0;
        free(ip), free(bp);
        if (meg) return SL_FMT_MEGATRON;
        FILE *f = fopen(path, "rb");
        unsigned char m[4];
        bool llmc = f && fread(m, 1, 4, f) == 4 && (int32_t)sl_le32(m) == LLMC_MAGIC;
        if (f) fclose(f);
        if (llmc) return SL_FMT_LLMC;
    }
    return SL_FMT_AUTO;
}

/* ---- the formats ---- */

/* One row per format: its name and its importer, so that a new format is one row here (plus
 * detection and defaults above and below) rather than a case in every switch. */
static const struct {
    sl_input_format fmt;
    const char *name; /* the --format value */
    int (*import)(sl_sink *k, const char *path, char *err, size_t errlen);
} formats[] = {
    {SL_FMT_TEXT, "text", import_text},
    {SL_FMT_JSONL, "jsonl", import_jsonl},
    {SL_FMT_RAW, "raw", import_raw},
    {SL_FMT_LLMC, "llmc", import_llmc},
    {SL_FMT_MEGATRON, "megatron", import_megatron},
};
#define N_FORMATS ((int)(sizeof formats / sizeof formats[0]))

const char *sl_input_format_name(sl_input_format f) {
    for (int i = 0; i < N_FORMATS; i++)
        if (formats[i].fmt == f) return formats[i].name;
    return "auto";
}

int sl_import_format(sl_input_format format, char *const *inputs, int n_inputs,
                     sl_input_format *out, char *err, size_t errlen) {
    sl_input_format fmt = format;
    for (int i = 0; i < n_inputs; i++) {
        struct stat st;
        if (stat(inputs[i], &st) != 0) {
            bool meg_prefix = false;
            if (fmt == SL_FMT_MEGATRON || fmt == SL_FMT_AUTO) {
                char *ip, *bp;
                megatron_paths(inputs[i], &ip, &bp);
                meg_prefix = stat(ip, &st) == 0;
                free(ip), free(bp);
                if (meg_prefix && fmt == SL_FMT_AUTO) fmt = SL_FMT_MEGATRON;
            }
            if (!meg_prefix)
                return sl_fail(err, errlen, "%s: cannot open: %s", inputs[i], strerror(ENOENT));
            continue;
        }
        if (format != SL_FMT_AUTO) continue;
        sl_input_format f = detect_format(inputs[i]);
        if (f == SL_FMT_AUTO)
            return sl_fail(err, errlen,
                           "%s: cannot tell the input format from the name or contents (use "
                           "--format text|jsonl|raw|llmc|megatron)",
                           inputs[i]);
        if (fmt != SL_FMT_AUTO && f != fmt)
            return sl_fail(err, errlen,
                           "%s: looks like %s input but an earlier input is %s; build "
                           "one format at a time",
                           inputs[i], sl_input_format_name(f), sl_input_format_name(fmt));
        fmt = f;
    }
    if (fmt == SL_FMT_AUTO) return sl_fail(err, errlen, "cannot tell the input format (--format)");
    *out = fmt;
    return 0;
}

int sl_import_defaults(sl_input_format fmt, sl_build_opts *o, const char *first_input,
                       int64_t *vocab_out, int64_t *eod_hdr_out, char *err, size_t errlen) {
    int64_t vocab = o->vocab, eod_hdr = -1;
    switch (fmt) {
    case SL_FMT_TEXT:
    case SL_FMT_JSONL:
        if (vocab < 0) vocab = TEXT_VOCAB;
        if (vocab < TEXT_VOCAB)
            return sl_fail(err, errlen, "--vocab %lld is smaller than the byte tokenizer's 257",
                           (long long)vocab);
        eod_hdr = TEXT_EOD;
        break;
    case SL_FMT_RAW:
        if (o->raw_token_bytes != 2 && o->raw_token_bytes != 4)
            return sl_fail(err, errlen, "raw input needs --dtype uint16 or uint32");
        if (vocab < 0) return sl_fail(err, errlen, "raw input needs --vocab N");
        if (o->eod == -1) o->eod = -2;
        eod_hdr = o->eod >= 0 ? o->eod : -1;
        break;
    case SL_FMT_LLMC: {
        uint64_t size, ntok;
        int fd = open_sized(first_input, &size, err, errlen);
        if (fd < 0) return -1;
        int tb = llmc_header(fd, first_input, size, &ntok, err, errlen);
        close(fd);
        if (tb < 0) return -1;
        if (vocab < 0) vocab = tb == 2 ? 50257 : 128256;
        if (o->eod == -1) o->eod = tb == 2 ? 50256 : 128000;
        eod_hdr = o->eod >= 0 ? o->eod : -1;
        break;
    }
    case SL_FMT_MEGATRON:
        if (vocab < 0) return sl_fail(err, errlen, "Megatron input needs --vocab N");
        eod_hdr = o->add_eod >= 0 ? o->add_eod : (o->eod >= 0 ? o->eod : -1);
        break;
    default:
        break;
    }
    *vocab_out = vocab;
    *eod_hdr_out = eod_hdr;
    return 0;
}

int sl_import(sl_sink *k, sl_input_format fmt, const char *path, char *err, size_t errlen) {
    for (int i = 0; i < N_FORMATS; i++)
        if (formats[i].fmt == fmt) return formats[i].import(k, path, err, errlen);
    sl_fatal("%s: input format %d has no row in importers.c's formats table", path, (int)fmt);
}
