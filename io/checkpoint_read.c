/*
 * io/checkpoint_read.c - a checkpoint's tensor data: reads with pread, piece by piece, each
 * piece's CRC-32C checked the first time it is touched (sl_ckpt_read), and the whole-checkpoint
 * verification (sl_ckpt_verify). The handle and the loader: io/checkpoint_load.c.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/checkpoint_load_internal.h"
#include "io/crc32c.h"

/* ---- data files ---- */

static void piece_key(char *buf, size_t n, const ck_piece *p) {
    snprintf(buf, n, "%s@%" PRId64, p->tensor, p->begin);
}

/* Opens data file fi (closing the least recently used one beyond CK_MAX_OPEN) and, the first
 * time, checks its safetensors header against the manifest: every piece is there under
 * "<tensor>@<begin>" with its dtype, length and byte offset, and nothing else is. */
static int open_file(sl_ckpt *c, int fi, char *err, size_t errlen) {
    dfile *f = &c->files[fi];
    f->last_use = ++c->clock;
    if (f->bad) return sl_fail(err, errlen, "%s", f->bad);
    if (f->st) return 0;
    if (c->open_files >= CK_MAX_OPEN) {
        int lru = -1;
        for (int i = 0; i < c->nfiles; i++)
            if (c->files[i].st && (lru < 0 || c->files[i].last_use < c->files[lru].last_use))
                lru = i;
        sl_st_close(c->files[lru].st);
        c->files[lru].st = NULL;
        c->open_files--;
    }
    char e[1024];
    f->st = sl_st_open(f->path, e, sizeof e);
    if (!f->st) return sl_fail(err, errlen, "%s", e);
    c->open_files++;
    if (f->checked) return 0;
    char msg[1536] = "";
    for (int k = 0; k < f->nrefs && !msg[0]; k++) {
        const int ref = f->refs[k];
        const ck_piece *p = c->idx.refs[ref].piece;
        char key[1200];
        piece_key(key, sizeof key, p);
        int j = sl_st_find(f->st, key);
        if (j < 0) {
            snprintf(msg, sizeof msg, "%s: tensor '%s': piece '%s' the manifest lists is missing",
                     f->path, p->tensor, key);
        } else if (strcmp(sl_st_dtype(f->st, j), p->dtype) != 0 || sl_st_ndim(f->st, j) != 1 ||
                   sl_st_shape(f->st, j)[0] != p->end - p->begin ||
                   sl_st_file_offset(f->st, j) != p->offset) {
            snprintf(msg, sizeof msg,
                     "%s: tensor '%s': piece '%s' is %s [%" PRId64 "] at byte %" PRIu64
                     ", the manifest says %s [%" PRId64 "] at byte %" PRIu64,
                     f->path, p->tensor, key, sl_st_dtype(f->st, j),
                     sl_st_ndim(f->st, j) == 1 ? sl_st_shape(f->st, j)[0] : -1,
                     sl_st_file_offset(f->st, j), p->dtype, p->end - p->begin, p->offset);
        }
        c->ref_st[ref] = j;
    }
    if (!msg[0] && sl_st_count(f->st) != f->nrefs)
        snprintf(msg, sizeof msg, "%s: holds %d tensors, the manifest lists %d pieces", f->path,
                 sl_st_count(f->st), f->nrefs);
    f->checked = true;
    if (msg[0]) {
        f->bad = sl_xstrdup(msg);
        return sl_fail(err, errlen, "%s", msg);
    }
    return 0;
}

static int crc_mismatch(sl_ckpt *c, int ref, uint32_t got, char *err, size_t errlen) {
    const ck_piece *p = c->idx.refs[ref].piece;
    return sl_fail(err, errlen,
                   "%s: tensor '%s' elements [%" PRId64 ", %" PRId64
                   "): CRC-32C 0x%08x, the manifest records 0x%08x: the file is damaged",
                   c->files[c->ref_file[ref]].path, p->tensor, p->begin, p->end, got, p->crc32c);
}

/* Reads piece `ref` whole in chunks, checks its checksum, and copies its elements
 * [lo, hi) to dst (NULL: none). */
static int read_verify(sl_ckpt *c, int ref, int64_t lo, int64_t hi, unsigned char *dst, char *err,
                       size_t errlen) {
    const ck_piece *p = c->idx.refs[ref].piece;
    const sl_st_file *st = c->files[c->ref_file[ref]].st;
    const int j = c->ref_st[ref];
    const uint64_t nbytes = (uint64_t)(p->end - p->begin) * p->esize;
    const uint64_t want_lo = (uint64_t)(lo - p->begin) * p->esize;
    const uint64_t want_hi = (uint64_t)(hi - p->begin) * p->esize;
    uint32_t crc = 0;
    for (uint64_t off = 0; off < nbytes;) {
        size_t k = nbytes - off < CK_CHUNK ? (size_t)(nbytes - off) : CK_CHUNK;
        unsigned char *buf;
        bool inside = dst && off >= want_lo && off + k <= want_hi;
        if (inside) {
            buf = dst + (off - want_lo); /* straight into the caller's buffer */
        } else {
            if (!c->scratch) c->scratch = sl_xmalloc(CK_CHUNK);
            buf = c->scratch;
        }
        if (sl_st_read_part(st, j, (size_t)off, buf, k, err, errlen) != 0) return -1;
        crc = sl_crc32c(crc, buf, k);
        if (dst && !inside) {
            uint64_t a = off > want_lo ? off : want_lo;
            uint64_t b = off + k < want_hi ? off + k : want_hi;
            if (a < b) memcpy(dst + (a - want_lo), buf + (a - off), (size_t)(b - a));
        }
        off += k;
    }
    if (crc != p->crc32c) return crc_mismatch(c, ref, crc, err, errlen);
    c->ref_verified[ref] = true;
    return 0;
}

int sl_ckpt_read(sl_ckpt *c, const char *name, int64_t begin, int64_t end, void *dst, char *err,
                 size_t errlen) {
    int ti = sl_ckpt_find(c, name);
    if (ti < 0)
        return sl_fail(err, errlen, "checkpoint %s: tensor '%s' is not in the checkpoint", c->dir,
                       name ? name : "(null)");
    const ck_tensor *t = &c->idx.tensors[ti];
    if (begin < 0 || end < begin || end > t->first->numel)
        return sl_fail(err, errlen,
                       "checkpoint %s: tensor '%s': range [%" PRId64 ", %" PRId64
                       ") outside its %" PRId64 " elements",
                       c->dir, name, begin, end, t->first->numel);
    if (begin == end) return 0;
    if (!dst)
        return sl_fail(err, errlen, "checkpoint %s: tensor '%s': NULL destination", c->dir, name);
    const size_t es = t->first->esize;
    /* the first piece ending after begin (pieces tile the tensor in begin order) */
    int lo = t->start, hi = t->start + t->count - 1;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (c->idx.refs[mid].piece->end <= begin)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (int k = lo; k < t->start + t->count; k++) {
        const ck_piece *p = c->idx.refs[k].piece;
        if (p->begin >= end) break;
        int64_t a = p->begin > begin ? p->begin : begin;
        int64_t b = p->end < end ? p->end : end;
        if (a >= b) continue;
        if (open_file(c, c->ref_file[k], err, errlen) != 0) return -1;
        unsigned char *out = (unsigned char *)dst + (size_t)(a - begin) * es;
        if (!c->ref_verified[k]) {
            if (read_verify(c, k, a, b, out, err, errlen) != 0) return -1;
        } else if (sl_st_read_part(c->files[c->ref_file[k]].st, c->ref_st[k],
                                   (size_t)(a - p->begin) * es, out, (size_t)(b - a) * es, err,
                                   errlen) != 0) {
            return -1;
        }
    }
    return 0;
}

/* ---- verification ---- */

static int cmp_ref_offset(const void *a, const void *b, void *user) {
    const sl_ckpt *c = user;
    uint64_t x = c->idx.refs[*(const int *)a].piece->offset;
    uint64_t y = c->idx.refs[*(const int *)b].piece->offset;
    return (x > y) - (x < y);
}

int sl_ckpt_verify(const char *path, sl_ckpt_report_fn report, void *user,
                   sl_ckpt_verify_stats *stats) {
    reporter r = {report, user, 0};
    sl_ckpt_verify_stats s;
    memset(&s, 0, sizeof s);
    char e[1536];
    sl_ckpt *c = ck_load(path, &r, e, sizeof e);
    if (!c) {
        ck_problem(&r, "%s", e);
        if (stats) *stats = s;
        return r.count;
    }
    s.step = c->commit.step;
    s.tensors = c->idx.ntensors;
    s.pieces = c->idx.nrefs;
    s.files = c->nfiles;
    for (int fi = 0; fi < c->nfiles; fi++) {
        if (c->files[fi].absent) continue; /* reported by load */
        if (open_file(c, fi, e, sizeof e) != 0) {
            ck_problem(&r, "%s", e);
            continue;
        }
        /* pieces in file order: one sequential pass over the file */
        dfile *f = &c->files[fi];
        if (f->nrefs > 1) qsort_r(f->refs, (size_t)f->nrefs, sizeof(int), cmp_ref_offset, c);
        for (int k = 0; k < f->nrefs; k++) {
            const int ref = f->refs[k];
            const ck_piece *p = c->idx.refs[ref].piece;
            if (read_verify(c, ref, p->begin, p->begin, NULL, e, sizeof e) != 0)
                ck_problem(&r, "%s", e);
            else
                s.bytes_checked += (uint64_t)(p->end - p->begin) * p->esize;
            if (!f->st) break; /* closed under us: cannot happen with one pass per file */
        }
        sl_st_close(f->st); /* one file open at a time */
        f->st = NULL;
        c->open_files--;
    }
    sl_ckpt_close(c);
    if (stats) *stats = s;
    return r.count;
}
