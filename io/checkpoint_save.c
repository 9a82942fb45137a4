/*
 * io/checkpoint_save.c - writing a checkpoint: every rank's pieces into its own safetensors file
 * and manifest inside <root>/checkpoints/.tmp-step-<N>/ (sl_ckpt_save_begin, the pieces,
 * sl_ckpt_save_write). Rank 0's commit (coverage check, train_state.json, COMMIT, rename to
 * step-<N>, `latest`, retention) and the end of a save: io/checkpoint_commit.c; the checkpoints
 * directory's renames and removals: io/checkpoint_publish.c. See checkpoint.h and the commit
 * protocol in docs/checkpoint-format.md.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/comm.h"
#include "core/fsutil.h"
#include "core/log.h"
#include "io/checkpoint_save_internal.h"
#include "io/crc32c.h"
#include "io/safetensors.h"
#include "io/safetensors_internal.h"

/* Bytes per write (and per fetch call): large enough for full disk bandwidth, small enough that
 * the checksum runs on data still in cache. */
#define CK_CHUNK ((size_t)8 << 20)

int sl_ckpt_agree_local(void *user, int local_failed) {
    (void)user;
    return local_failed != 0;
}

int sl_ckpt_agree_comm(void *user, int local_failed) {
    int64_t v = local_failed != 0;
    sl_comm_allreduce_sum_i64((sl_comm *)user, &v, 1);
    return (int)v;
}

char *ck_join(const char *a, const char *b) {
    size_t n = strlen(a) + strlen(b) + 2;
    char *s = sl_xmalloc(n);
    snprintf(s, n, "%s/%s", a, b);
    return s;
}

void ck_wfail(sl_ckpt_writer *w, const char *fmt, ...) {
    if (w->failed) return;
    w->failed = true;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->err, sizeof w->err, fmt, ap);
    va_end(ap);
}

sl_ckpt_writer *sl_ckpt_save_begin(const sl_ckpt_save_opts *o, char *err, size_t errlen) {
    if (!o || !o->root || !*o->root || strlen(o->root) > CK_PATH_MAX - 128) {
        sl_fail(err, errlen, "checkpoint save: no output directory, or its path is too long");
        return NULL;
    }
    if (o->world_size < 1 || o->world_size > CK_MAX_RANKS || o->rank < 0 ||
        o->rank >= o->world_size || o->step < 0 || o->step >= CK_INT_MAX || o->keep_last < 0 ||
        o->keep_every < 0) {
        sl_fail(err, errlen,
                "checkpoint save: invalid options (step %" PRId64 ", rank %d of %d, keep_last %d, "
                "keep_every %" PRId64 ")",
                o->step, o->rank, o->world_size, o->keep_last, o->keep_every);
        return NULL;
    }
    sl_ckpt_writer *w = sl_xcalloc(1, sizeof *w);
    w->step = o->step;
    w->rank = o->rank;
    w->world = o->world_size;
    w->agree = o->agree ? o->agree : sl_ckpt_agree_local;
    w->agree_user = o->agree_user;
    w->keep_last = o->keep_last;
    w->keep_every = o->keep_every;
    if (o->n_keep_steps > 0 && o->keep_steps) {
        w->keep_steps = sl_xmalloc((size_t)o->n_keep_steps * sizeof(int64_t));
        memcpy(w->keep_steps, o->keep_steps, (size_t)o->n_keep_steps * sizeof(int64_t));
        w->n_keep_steps = o->n_keep_steps;
    }
    w->ckdir = ck_join(o->root, CK_DIR_NAME);
    char name[64];
    snprintf(name, sizeof name, ".tmp-step-%" PRId64, o->step);
    w->tmpdir = ck_join(w->ckdir, name);
    snprintf(name, sizeof name, "step-%" PRId64, o->step);
    w->final = ck_join(w->ckdir, name);
    char e[1024] = "";
    int bad = 0;
    if (w->rank == 0) {
        bad =
            sl_mkdirs(w->ckdir, e, sizeof e) != 0 || ck_clean_leftovers(w->ckdir, e, sizeof e) != 0;
        if (!bad && mkdir(w->tmpdir, 0755) != 0) {
            snprintf(e, sizeof e, "%s: cannot create: %s", w->tmpdir, strerror(errno));
            bad = 1;
        }
    }
    int nfail = w->agree(w->agree_user, bad);
    if (bad || nfail) {
        if (bad)
            sl_fail(err, errlen, "checkpoint step %" PRId64 ": %s", w->step, e);
        else
            sl_fail(err, errlen,
                    "checkpoint step %" PRId64 ": rank 0 could not prepare %s (its message names "
                    "the cause)",
                    w->step, w->tmpdir);
        sl_ckpt_save_abort(w);
        return NULL;
    }
    /* mkdir rather than stat on the other ranks: on a network file system a lookup may answer
     * from a stale cache, a mkdir asks the server (EEXIST: rank 0's directory is there) */
    if (w->rank != 0 && mkdir(w->tmpdir, 0755) != 0 && errno != EEXIST)
        ck_wfail(w, "%s: not accessible on rank %d: %s", w->tmpdir, w->rank, strerror(errno));
    return w;
}

static int add_piece(sl_ckpt_writer *w, const char *name, const char *dtype, int ndim,
                     const int64_t *shape, int64_t begin, int64_t end, const void *data,
                     sl_ckpt_fetch_fn fetch, void *user) {
    if (w->failed) return -1;
    if (w->written) return ck_wfail(w, "checkpoint: a piece declared after the write"), -1;
    if (!name || !*name) return ck_wfail(w, "checkpoint: a piece without a tensor name"), -1;
    if (sl_st_utf8_invalid_at((const unsigned char *)name, strlen(name)) >= 0)
        return ck_wfail(w, "checkpoint: tensor name is not valid UTF-8"), -1;
    size_t esize = 0;
    const char *dt = sl_st_dtype_lookup(dtype, &esize);
    if (!dt)
        return ck_wfail(w, "checkpoint: tensor '%s': unknown dtype '%s'", name,
                        dtype ? dtype : "(null)"),
               -1;
    if (ndim < 0 || ndim > SL_CKPT_MAX_DIMS || (ndim > 0 && !shape))
        return ck_wfail(w, "checkpoint: tensor '%s': %d dimensions (at most %d)", name, ndim,
                        SL_CKPT_MAX_DIMS),
               -1;
    uint64_t numel = 1;
    for (int d = 0; d < ndim; d++)
        if (shape[d] < 0)
            return ck_wfail(w, "checkpoint: tensor '%s': negative dimension", name), -1;
    if (!sl_st_shape_numel(ndim, shape, &numel) || numel > (uint64_t)CK_INT_MAX / esize)
        return ck_wfail(w, "checkpoint: tensor '%s': too large", name), -1;
    if (begin < 0 || end < begin || (uint64_t)end > numel || (begin == end && numel > 0))
        return ck_wfail(w,
                        "checkpoint: tensor '%s': piece [%" PRId64 ", %" PRId64
                        ") is not a non-empty range of its %" PRIu64 " elements",
                        name, begin, end, numel),
               -1;
    if (end > begin && !data && !fetch)
        return ck_wfail(w, "checkpoint: tensor '%s': piece without data", name), -1;
    if (w->n == w->cap) {
        w->cap = w->cap ? 2 * w->cap : 64;
        w->p = sl_xrealloc(w->p, sizeof(wpiece) * (size_t)w->cap);
    }
    wpiece *p = &w->p[w->n];
    memset(p, 0, sizeof *p);
    p->name = sl_xstrdup(name);
    p->dtype = dt;
    p->esize = esize;
    p->ndim = ndim;
    for (int d = 0; d < ndim; d++) p->shape[d] = shape[d];
    p->begin = begin;
    p->end = end;
    p->data = data;
    p->fetch = fetch;
    p->user = user;
    p->order = w->n++;
    return 0;
}

int sl_ckpt_save_piece(sl_ckpt_writer *w, const char *name, const char *dtype, int ndim,
                       const int64_t *shape, int64_t begin, int64_t end, const void *data) {
    return add_piece(w, name, dtype, ndim, shape, begin, end, data, NULL, NULL);
}

int sl_ckpt_save_piece_fn(sl_ckpt_writer *w, const char *name, const char *dtype, int ndim,
                          const int64_t *shape, int64_t begin, int64_t end, sl_ckpt_fetch_fn fetch,
                          void *user) {
    if (!fetch && end > begin) {
        ck_wfail(w, "checkpoint: tensor '%s': NULL fetch function", name ? name : "(null)");
        return -1;
    }
    return add_piece(w, name, dtype, ndim, shape, begin, end, NULL, fetch, user);
}

/* Wider element types first, so that every piece stays aligned to its element size in the file
 * (the data section starts 8-byte aligned); declaration order otherwise. */
static int cmp_wpiece(const void *a, const void *b) {
    const wpiece *x = a, *y = b;
    if (x->esize != y->esize) return x->esize > y->esize ? -1 : 1;
    return (x->order > y->order) - (x->order < y->order);
}

static int cmp_wpiece_key(const void *a, const void *b) {
    const wpiece *x = *(const wpiece *const *)a, *y = *(const wpiece *const *)b;
    int c = strcmp(x->name, y->name);
    if (c) return c;
    return (x->begin > y->begin) - (x->begin < y->begin);
}

static void piece_key(char *buf, size_t n, const wpiece *p) {
    snprintf(buf, n, "%s@%" PRId64, p->name, p->begin);
}

/* Writes the data file; fills crc[] (in w->p order). */
static int write_data(sl_ckpt_writer *w, const char *path, uint32_t *crc) {
    char e[1024];
    sl_st_writer *sw = sl_st_writer_open(path, e, sizeof e);
    if (!sw) return ck_wfail(w, "%s", e), -1;
    char meta[32];
    sl_st_writer_set_metadata(sw, "format", CK_FORMAT_NAME);
    snprintf(meta, sizeof meta, "%" PRId64, w->step);
    sl_st_writer_set_metadata(sw, "step", meta);
    snprintf(meta, sizeof meta, "%d", w->rank);
    sl_st_writer_set_metadata(sw, "rank", meta);
    for (int i = 0; i < w->n; i++) {
        char key[1200];
        piece_key(key, sizeof key, &w->p[i]);
        int64_t len = w->p[i].end - w->p[i].begin;
        sl_st_writer_declare(sw, key, w->p[i].dtype, 1, &len);
    }
    unsigned char *buf = NULL;
    for (int i = 0; i < w->n && !sl_st_writer_error(sw); i++) {
        const wpiece *p = &w->p[i];
        const uint64_t nbytes = (uint64_t)(p->end - p->begin) * p->esize;
        uint32_t c = 0;
        for (uint64_t off = 0; off < nbytes;) {
            size_t k = nbytes - off < CK_CHUNK ? (size_t)(nbytes - off) : CK_CHUNK;
            const void *src;
            if (p->fetch) {
                if (!buf) buf = sl_xmalloc(CK_CHUNK);
                if (p->fetch(p->user, off, buf, k) != 0) {
                    free(buf);
                    sl_st_writer_abort(sw);
                    return ck_wfail(w, "%s: tensor '%s': the data source failed at byte %" PRIu64,
                                    path, p->name, off),
                           -1;
                }
                src = buf;
            } else {
                src = (const unsigned char *)p->data + off;
            }
            c = sl_crc32c(c, src, k);
            if (sl_st_writer_write_chunk(sw, src, k) != 0) break;
            off += k;
        }
        crc[i] = c;
    }
    free(buf);
    if (sl_st_writer_close(sw, e, sizeof e) != 0) return ck_wfail(w, "%s", e), -1;
    return 0;
}

int sl_ckpt_save_write(sl_ckpt_writer *w, char *err, size_t errlen) {
    if (!w) return sl_fail(err, errlen, "checkpoint save: NULL writer");
    if (!w->failed && w->written) ck_wfail(w, "checkpoint: written twice");
    if (!w->failed && w->n > 1) {
        const wpiece **by = sl_xmalloc(sizeof(*by) * (size_t)w->n);
        for (int i = 0; i < w->n; i++) by[i] = &w->p[i];
        qsort(by, (size_t)w->n, sizeof *by, cmp_wpiece_key);
        for (int i = 1; i < w->n && !w->failed; i++)
            if (cmp_wpiece_key(&by[i - 1], &by[i]) == 0)
                ck_wfail(w, "checkpoint: tensor '%s': piece at element %" PRId64 " declared twice",
                         by[i]->name, by[i]->begin);
        free(by);
    }
    if (w->failed) return sl_fail(err, errlen, "%s", w->err);
    if (w->n > 1) qsort(w->p, (size_t)w->n, sizeof(wpiece), cmp_wpiece);
    char dname[64], mname[64];
    ck_data_name(dname, sizeof dname, w->rank);
    ck_manifest_name(mname, sizeof mname, w->rank);
    char *dpath = ck_join(w->tmpdir, dname), *mpath = ck_join(w->tmpdir, mname);
    uint32_t *crc = sl_xcalloc((size_t)(w->n ? w->n : 1), sizeof *crc);
    ck_manifest m = {.format_version = SL_CKPT_FORMAT_VERSION,
                     .step = w->step,
                     .rank = w->rank,
                     .world_size = w->world};
    ck_file file = {dname, 0};
    if (w->n > 0 && write_data(w, dpath, crc) == 0) {
        /* the offsets as the file holds them (the writer lays the header out) */
        char e[1024];
        sl_st_file *f = sl_st_open(dpath, e, sizeof e);
        if (!f) {
            ck_wfail(w, "%s: reading back what was written: %s", dpath, e);
        } else {
            struct stat st;
            if (stat(dpath, &st) == 0) file.bytes = (uint64_t)st.st_size;
            m.files = &file;
            m.nfiles = 1;
            m.pieces = sl_xcalloc((size_t)w->n, sizeof(ck_piece));
            m.npieces = w->n;
            for (int i = 0; i < w->n && !w->failed; i++) {
                const wpiece *p = &w->p[i];
                char key[1200];
                piece_key(key, sizeof key, p);
                int j = sl_st_find(f, key);
                if (j < 0) {
                    ck_wfail(w, "%s: tensor '%s' missing after the write", dpath, key);
                    break;
                }
                ck_piece *q = &m.pieces[i];
                q->tensor = p->name;
                q->dtype = p->dtype;
                q->esize = p->esize;
                q->ndim = p->ndim;
                memcpy(q->shape, p->shape, sizeof q->shape);
                q->begin = p->begin;
                q->end = p->end;
                q->file = dname;
                q->offset = sl_st_file_offset(f, j);
                q->crc32c = crc[i];
            }
            sl_st_close(f);
        }
    }
    if (!w->failed) {
        char *json = ck_manifest_print(&m);
        char e[1024];
        if (sl_write_file_atomic(mpath, json, strlen(json), e, sizeof e) != 0) ck_wfail(w, "%s", e);
        free(json);
    }
    free(m.pieces); /* its strings belong to w->p */
    free(crc);
    free(dpath);
    free(mpath);
    if (w->failed) return sl_fail(err, errlen, "%s", w->err);
    w->written = true;
    return 0;
}
