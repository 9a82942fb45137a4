/* io/shard_writer.c - streaming, atomic shard writer with parallel frame compression. */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "core/fsutil.h"
#include "core/log.h"
#include "io/crc32c.h"
#include "io/shard.h"

/* One frame being filled or waiting in the compression batch. */
typedef struct {
    unsigned char *tok; /* n * token_bytes */
    uint32_t n;
    uint32_t *docs;
    uint32_t ndocs;
    unsigned char *out; /* compressed frame followed by its document-offset frame */
    size_t out_cap, csize, span;
    uint32_t crc;
    size_t zerr; /* zstd error code, 0 when fine */
} pending_frame;

struct sl_shard_writer {
    char *path, *tmp_path;
    int fd;
    uint64_t pos; /* bytes written */
    sl_shard_writer_opts o;
    pending_frame *batch;
    int batch_cap, batch_n; /* batch[batch_n] is the frame being filled */
    ZSTD_CCtx **cctx;
    int n_cctx;
    sl_shard_frame *frames;
    uint64_t n_frames, frames_cap;
    uint64_t n_tokens, n_docs;
    bool doc_pending;
};

static int pwrite_all(int fd, const void *buf, size_t n, off_t off) {
    const char *p = buf;
    while (n) {
        ssize_t r = pwrite(fd, p, n, off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        p += r;
        n -= (size_t)r;
        off += r;
    }
    return 0;
}

static int n_cores(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : (int)n;
}

sl_shard_writer *sl_shard_writer_open(const char *path, const sl_shard_writer_opts *o, char *err,
                                      size_t errlen) {
    sl_shard_writer_opts opt = *o;
    if (opt.frame_tokens == 0) opt.frame_tokens = SL_SHARD_DEFAULT_FRAME_TOKENS;
    if (opt.level == 0) opt.level = 3;
    if (opt.threads <= 0) opt.threads = n_cores();
    if (opt.token_bytes != 2 && opt.token_bytes != 4) {
        sl_fail(err, errlen, "%s: token width must be 2 or 4 bytes", path);
        return NULL;
    }
    if (opt.vocab_size == 0 || opt.vocab_size > (uint32_t)INT32_MAX ||
        (opt.token_bytes == 2 && opt.vocab_size > 65536)) {
        sl_fail(err, errlen, "%s: vocabulary size %u does not fit %u-byte tokens", path,
                opt.vocab_size, opt.token_bytes);
        return NULL;
    }
    if (opt.frame_tokens > SL_SHARD_MAX_FRAME_TOKENS) {
        sl_fail(err, errlen, "%s: frame size %u tokens exceeds the limit %u", path,
                opt.frame_tokens, SL_SHARD_MAX_FRAME_TOKENS);
        return NULL;
    }
    if (opt.eod_token != SL_SHARD_NO_EOD && opt.eod_token >= opt.vocab_size) {
        sl_fail(err, errlen, "%s: end-of-document token %u >= vocab_size %u", path, opt.eod_token,
                opt.vocab_size);
        return NULL;
    }
    if (opt.level < ZSTD_minCLevel() || opt.level > ZSTD_maxCLevel()) {
        sl_fail(err, errlen, "zstd level %d out of range [%d, %d]", opt.level, ZSTD_minCLevel(),
                ZSTD_maxCLevel());
        return NULL;
    }
    /* temporary file in the destination directory: ".<name>.tmp.XXXXXX" */
    char *dcopy = sl_xstrdup(path), *bcopy = sl_xstrdup(path);
    const char *dir = dirname(dcopy), *base = basename(bcopy);
    size_t tl = strlen(dir) + strlen(base) + 32;
    char *tmp = sl_xmalloc(tl);
    snprintf(tmp, tl, "%s/.%s.tmp.XXXXXX", dir, base);
    free(dcopy);
    free(bcopy);
    int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0) {
        sl_fail(err, errlen, "%s: cannot create a temporary file next to it: %s", path,
                strerror(errno));
        free(tmp);
        return NULL;
    }
    fchmod(fd, 0644);
    sl_shard_writer *w = sl_xcalloc(1, sizeof *w);
    w->path = sl_xstrdup(path);
    w->tmp_path = tmp;
    w->fd = fd;
    w->o = opt;
    /* placeholder header: magic but version 0 and no valid checksum, so a file that is never
     * finished cannot be mistaken for a shard */
    unsigned char hb[SL_SHARD_HEADER_BYTES] = {0};
    sl_put32(hb, SL_SHARD_SKIP_MAGIC);
    sl_put32(hb + 4, SL_SHARD_HEADER_CONTENT);
    memcpy(hb + 8, "SLUICESH", 8);
    sl_put32(hb + 8 + 124, 0xFFFFFFFFu);
    if (sl_write_all(fd, hb, sizeof hb) != 0) {
        sl_fail(err, errlen, "%s: write failed: %s", tmp, strerror(errno));
        sl_shard_writer_abort(w);
        return NULL;
    }
    w->pos = sizeof hb;
    w->n_cctx = opt.threads;
    w->batch_cap = opt.threads > 1 ? 2 * opt.threads : 1;
    w->batch = sl_xcalloc((size_t)w->batch_cap, sizeof(pending_frame));
    size_t frame_bytes = (size_t)opt.frame_tokens * opt.token_bytes;
    for (int i = 0; i < w->batch_cap; i++) {
        pending_frame *p = &w->batch[i];
        p->tok = sl_xmalloc(frame_bytes);
        p->docs = sl_xmalloc(sizeof(uint32_t) * opt.frame_tokens);
        p->out_cap = ZSTD_compressBound(frame_bytes) + 8 + 4 * (size_t)opt.frame_tokens;
        p->out = sl_xmalloc(p->out_cap);
    }
    w->cctx = sl_xcalloc((size_t)w->n_cctx, sizeof(ZSTD_CCtx *));
    for (int i = 0; i < w->n_cctx; i++) {
        w->cctx[i] = ZSTD_createCCtx();
        if (!w->cctx[i]) sl_fatal("ZSTD_createCCtx failed");
        ZSTD_CCtx_setParameter(w->cctx[i], ZSTD_c_compressionLevel, opt.level);
        ZSTD_CCtx_setParameter(w->cctx[i], ZSTD_c_checksumFlag, 1);
        ZSTD_CCtx_setParameter(w->cctx[i], ZSTD_c_contentSizeFlag, 1);
    }
    return w;
}

static void compress_one(sl_shard_writer *w, pending_frame *p, ZSTD_CCtx *cctx) {
    size_t in = (size_t)p->n * w->o.token_bytes;
    size_t cap = p->out_cap - 8 - 4 * (size_t)p->ndocs;
    size_t r = ZSTD_compress2(cctx, p->out, cap, p->tok, in);
    if (ZSTD_isError(r)) {
        p->zerr = r;
        return;
    }
    p->zerr = 0;
    p->csize = r;
    p->span = r;
    if (p->ndocs) {
        unsigned char *d = p->out + r;
        sl_put32(d, SL_SHARD_SKIP_MAGIC);
        sl_put32(d + 4, 4 * p->ndocs);
        for (uint32_t i = 0; i < p->ndocs; i++) sl_put32(d + 8 + 4 * (size_t)i, p->docs[i]);
        p->span += 8 + 4 * (size_t)p->ndocs;
    }
    p->crc = sl_crc32c(0, p->out, p->span);
}

/* Compresses the complete frames batch[0 .. batch_n) in parallel and appends them in order. */
static int flush_batch(sl_shard_writer *w, char *err, size_t errlen) {
    int n = w->batch_n;
    if (n == 0) return 0;
    if (n == 1 || w->n_cctx == 1) {
        for (int i = 0; i < n; i++) compress_one(w, &w->batch[i], w->cctx[0]);
    } else {
        int nt = w->n_cctx < n ? w->n_cctx : n;
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
        for (int i = 0; i < n; i++) {
#ifdef _OPENMP
            int t = omp_get_thread_num();
#else
            int t = 0;
#endif
            compress_one(w, &w->batch[i], w->cctx[t]);
        }
    }
    for (int i = 0; i < n; i++) {
        pending_frame *p = &w->batch[i];
        if (p->zerr)
            return sl_fail(err, errlen, "%s: zstd compression failed: %s", w->path,
                           ZSTD_getErrorName(p->zerr));
        if (w->n_frames == w->frames_cap) {
            w->frames_cap = w->frames_cap ? 2 * w->frames_cap : 64;
            w->frames = sl_xrealloc(w->frames, w->frames_cap * sizeof(sl_shard_frame));
        }
        sl_shard_frame *f = &w->frames[w->n_frames++];
        f->offset = w->pos;
        f->first_token = w->n_tokens;
        f->first_doc = w->n_docs;
        f->csize = (uint32_t)p->csize;
        f->n_tokens = p->n;
        f->n_docs = p->ndocs;
        f->crc = p->crc;
        if (sl_write_all(w->fd, p->out, p->span) != 0)
            return sl_fail(err, errlen, "%s: write failed: %s", w->tmp_path, strerror(errno));
        w->pos += p->span;
        w->n_tokens += p->n;
        w->n_docs += p->ndocs;
        p->n = p->ndocs = 0;
    }
    w->batch_n = 0;
    return 0;
}

void sl_shard_writer_doc(sl_shard_writer *w) {
    w->doc_pending = true;
}

int sl_shard_writer_add(sl_shard_writer *w, const uint32_t *tokens, size_t n, char *err,
                        size_t errlen) {
    const uint32_t tb = w->o.token_bytes, ft = w->o.frame_tokens, vocab = w->o.vocab_size;
    while (n) {
        pending_frame *p = &w->batch[w->batch_n];
        if (w->doc_pending) {
            p->docs[p->ndocs++] = p->n;
            w->doc_pending = false;
        }
        size_t k = ft - p->n < n ? ft - p->n : n;
        for (size_t i = 0; i < k; i++) {
            uint32_t t = tokens[i];
            if (t >= vocab)
                return sl_fail(err, errlen, "%s: token id %u >= vocab_size %u", w->path, t, vocab);
            if (tb == 2) {
                uint16_t v = (uint16_t)t;
                memcpy(p->tok + 2 * ((size_t)p->n + i), &v, 2);
            } else {
                memcpy(p->tok + 4 * ((size_t)p->n + i), &t, 4);
            }
        }
        p->n += (uint32_t)k;
        tokens += k;
        n -= k;
        if (p->n == ft) {
            w->batch_n++;
            if (w->batch_n == w->batch_cap && flush_batch(w, err, errlen) != 0) return -1;
        }
    }
    return 0;
}

uint64_t sl_shard_writer_bytes(const sl_shard_writer *w) {
    return w->pos;
}
uint64_t sl_shard_writer_tokens(const sl_shard_writer *w) {
    uint64_t n = w->n_tokens;
    for (int i = 0; i <= w->batch_n && i < w->batch_cap; i++) n += w->batch[i].n;
    return n;
}

static void writer_free(sl_shard_writer *w) {
    for (int i = 0; i < w->batch_cap; i++) {
        free(w->batch[i].tok);
        free(w->batch[i].docs);
        free(w->batch[i].out);
    }
    free(w->batch);
    for (int i = 0; i < w->n_cctx; i++) ZSTD_freeCCtx(w->cctx[i]);
    free(w->cctx);
    free(w->frames);
    free(w->path);
    free(w->tmp_path);
    free(w);
}

void sl_shard_writer_abort(sl_shard_writer *w) {
    if (!w) return;
    if (w->fd >= 0) close(w->fd);
    unlink(w->tmp_path);
    writer_free(w);
}

int sl_shard_writer_close(sl_shard_writer *w, sl_shard_header *out, char *err, size_t errlen) {
    /* the partly filled frame joins the batch */
    if (w->batch_n < w->batch_cap && w->batch[w->batch_n].n > 0) w->batch_n++;
    if (flush_batch(w, err, errlen) != 0) goto bad;
    /* index */
    uint64_t index_bytes = 8 + SL_SHARD_ENTRY_BYTES * w->n_frames;
    if (index_bytes > UINT32_MAX) {
        sl_fail(err, errlen, "%s: too many frames (%llu) for one shard", w->path,
                (unsigned long long)w->n_frames);
        goto bad;
    }
    unsigned char *ix = sl_xmalloc((size_t)index_bytes + 8);
    sl_put32(ix, SL_SHARD_SKIP_MAGIC);
    sl_put32(ix + 4, (uint32_t)index_bytes);
    memcpy(ix + 8, "SLUICEIX", 8);
    for (uint64_t i = 0; i < w->n_frames; i++) {
        unsigned char *e = ix + 16 + SL_SHARD_ENTRY_BYTES * i;
        const sl_shard_frame *f = &w->frames[i];
        sl_put64(e, f->offset);
        sl_put64(e + 8, f->first_token);
        sl_put64(e + 16, f->first_doc);
        sl_put32(e + 24, f->csize);
        sl_put32(e + 28, f->n_tokens);
        sl_put32(e + 32, f->n_docs);
        sl_put32(e + 36, f->crc);
    }
    sl_shard_header h = {
        .version = SL_SHARD_VERSION,
        .token_bytes = w->o.token_bytes,
        .vocab_size = w->o.vocab_size,
        .eod_token = w->o.eod_token,
        .frame_tokens = w->o.frame_tokens,
        .n_tokens = w->n_tokens,
        .n_docs = w->n_docs,
        .n_frames = w->n_frames,
        .index_offset = w->pos,
        .index_bytes = index_bytes,
        .file_size = w->pos + 8 + index_bytes,
        .payload_bytes = w->pos - SL_SHARD_HEADER_BYTES,
        .index_crc = sl_crc32c(0, ix + 8, (size_t)index_bytes),
    };
    memcpy(h.tokenizer_hash, w->o.tokenizer_hash, SL_SHARD_TOKENIZER_HASH);
    int wr = sl_write_all(w->fd, ix, (size_t)index_bytes + 8);
    free(ix);
    if (wr != 0) {
        sl_fail(err, errlen, "%s: write failed: %s", w->tmp_path, strerror(errno));
        goto bad;
    }
    /* the data and index must be durable before the header that declares them complete */
    if (fsync(w->fd) != 0) {
        sl_fail(err, errlen, "%s: fsync failed: %s", w->tmp_path, strerror(errno));
        goto bad;
    }
    unsigned char hb[SL_SHARD_HEADER_BYTES];
    sl_shard_header_encode(&h, hb);
    h.header_crc = sl_le32(hb + 8 + 124);
    if (pwrite_all(w->fd, hb, sizeof hb, 0) != 0 || fsync(w->fd) != 0) {
        sl_fail(err, errlen, "%s: writing the header failed: %s", w->tmp_path, strerror(errno));
        goto bad;
    }
    if (close(w->fd) != 0) {
        w->fd = -1;
        sl_fail(err, errlen, "%s: close failed: %s", w->tmp_path, strerror(errno));
        goto bad;
    }
    w->fd = -1;
    if (rename(w->tmp_path, w->path) != 0) {
        sl_fail(err, errlen, "%s: cannot rename %s into place: %s", w->path, w->tmp_path,
                strerror(errno));
        goto bad;
    }
    sl_fsync_parent_dir(w->path);
    if (out) *out = h;
    writer_free(w);
    return 0;
bad:
    sl_shard_writer_abort(w);
    return -1;
}
