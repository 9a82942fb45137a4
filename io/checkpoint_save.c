/*
 * io/checkpoint_save.c - writing a checkpoint: every rank's pieces into its own safetensors file
 * and manifest inside <root>/checkpoints/.tmp-step-<N>/, then rank 0's commit (coverage check,
 * train_state.json, COMMIT, rename to step-<N>, `latest`, retention). See checkpoint.h and the
 * commit protocol in docs/checkpoint-format.md.
 *
 * Crash safety rests on the order of durable operations: a checkpoint becomes visible under its
 * final name only by one rename, after every file in it (COMMIT last) and the directory itself
 * were fsynced; `latest` is replaced by another rename afterwards; old checkpoints are removed
 * only after that, each first renamed back to a .tmp-* name so that a half-deleted one is never
 * mistaken for a checkpoint. A kill at any moment therefore leaves the previous `latest` valid.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/comm.h"
#include "core/fsutil.h"
#include "core/log.h"
#include "io/checkpoint.h"
#include "io/checkpoint_internal.h"
#include "io/crc32c.h"
#include "io/safetensors.h"
#include "io/safetensors_internal.h"

#ifndef SLUICE_VERSION
#error "SLUICE_VERSION must be defined (io/CMakeLists.txt passes the CMake project version)"
#endif

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

typedef struct {
    char *name;
    const char *dtype;
    size_t esize;
    int ndim;
    int64_t shape[SL_CKPT_MAX_DIMS];
    int64_t begin, end;
    const void *data;
    sl_ckpt_fetch_fn fetch;
    void *user;
    int order; /* declaration order (a tie-break that keeps the sort stable) */
} wpiece;

struct sl_ckpt_writer {
    int64_t step;
    int rank, world;
    sl_ckpt_agree_fn agree;
    void *agree_user;
    int keep_last;
    int64_t keep_every;
    int64_t *keep_steps; /* owned copy of the option */
    int n_keep_steps;
    char *ckdir, *tmpdir, *final;
    wpiece *p;
    int n, cap;
    bool failed, written;
    char err[2048];
};

static char *join(const char *a, const char *b) {
    size_t n = strlen(a) + strlen(b) + 2;
    char *s = sl_xmalloc(n);
    snprintf(s, n, "%s/%s", a, b);
    return s;
}

static void wfail(sl_ckpt_writer *w, const char *fmt, ...) SL_PRINTF(2, 3);
static void wfail(sl_ckpt_writer *w, const char *fmt, ...) {
    if (w->failed) return;
    w->failed = true;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->err, sizeof w->err, fmt, ap);
    va_end(ap);
}

/* rm -rf of a directory tree (or a single file); symlinks are removed, never followed. */
static int rmtree_at(int dfd, const char *name) {
    if (unlinkat(dfd, name, 0) == 0 || errno == ENOENT) return 0;
    if (errno != EISDIR && errno != EPERM) return -1;
    int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return -1;
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return -1;
    }
    int rc = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        if (rmtree_at(fd, e->d_name) != 0) rc = -1;
    }
    closedir(d);
    if (unlinkat(dfd, name, AT_REMOVEDIR) != 0 && errno != ENOENT) rc = -1;
    return rc;
}

static int rmtree(const char *path) {
    return rmtree_at(AT_FDCWD, path);
}

static int fsync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

/* Rank 0: removes what interrupted saves left in the checkpoints directory. */
static int clean_leftovers(const char *ckdir, char *err, size_t errlen) {
    DIR *d = opendir(ckdir);
    if (!d) return sl_fail(err, errlen, "%s: cannot list: %s", ckdir, strerror(errno));
    struct dirent *e;
    int rc = 0;
    while ((e = readdir(d)) != NULL) {
        bool tmp = strncmp(e->d_name, ".tmp-", 5) == 0;
        bool latest_tmp =
            strncmp(e->d_name, CK_LATEST_FILE ".tmp.", strlen(CK_LATEST_FILE) + 5) == 0;
        if (!tmp && !latest_tmp) continue;
        char *p = join(ckdir, e->d_name);
        if (rmtree(p) != 0 && rc == 0)
            rc = sl_fail(err, errlen, "%s: cannot remove the leftover of an interrupted save: %s",
                         p, strerror(errno));
        free(p);
    }
    closedir(d);
    return rc;
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
    w->ckdir = join(o->root, CK_DIR_NAME);
    char name[64];
    snprintf(name, sizeof name, ".tmp-step-%" PRId64, o->step);
    w->tmpdir = join(w->ckdir, name);
    snprintf(name, sizeof name, "step-%" PRId64, o->step);
    w->final = join(w->ckdir, name);
    char e[1024] = "";
    int bad = 0;
    if (w->rank == 0) {
        bad = sl_mkdirs(w->ckdir, e, sizeof e) != 0 || clean_leftovers(w->ckdir, e, sizeof e) != 0;
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
        wfail(w, "%s: not accessible on rank %d: %s", w->tmpdir, w->rank, strerror(errno));
    return w;
}

static int add_piece(sl_ckpt_writer *w, const char *name, const char *dtype, int ndim,
                     const int64_t *shape, int64_t begin, int64_t end, const void *data,
                     sl_ckpt_fetch_fn fetch, void *user) {
    if (w->failed) return -1;
    if (w->written) return wfail(w, "checkpoint: a piece declared after the write"), -1;
    if (!name || !*name) return wfail(w, "checkpoint: a piece without a tensor name"), -1;
    if (sl_st_utf8_invalid_at((const unsigned char *)name, strlen(name)) >= 0)
        return wfail(w, "checkpoint: tensor name is not valid UTF-8"), -1;
    size_t esize = 0;
    const char *dt = sl_st_dtype_lookup(dtype, &esize);
    if (!dt)
        return wfail(w, "checkpoint: tensor '%s': unknown dtype '%s'", name,
                     dtype ? dtype : "(null)"),
               -1;
    if (ndim < 0 || ndim > SL_CKPT_MAX_DIMS || (ndim > 0 && !shape))
        return wfail(w, "checkpoint: tensor '%s': %d dimensions (at most %d)", name, ndim,
                     SL_CKPT_MAX_DIMS),
               -1;
    uint64_t numel = 1;
    for (int d = 0; d < ndim; d++)
        if (shape[d] < 0) return wfail(w, "checkpoint: tensor '%s': negative dimension", name), -1;
    if (!sl_st_shape_numel(ndim, shape, &numel) || numel > (uint64_t)CK_INT_MAX / esize)
        return wfail(w, "checkpoint: tensor '%s': too large", name), -1;
    if (begin < 0 || end < begin || (uint64_t)end > numel || (begin == end && numel > 0))
        return wfail(w,
                     "checkpoint: tensor '%s': piece [%" PRId64 ", %" PRId64
                     ") is not a non-empty range of its %" PRIu64 " elements",
                     name, begin, end, numel),
               -1;
    if (end > begin && !data && !fetch)
        return wfail(w, "checkpoint: tensor '%s': piece without data", name), -1;
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
        wfail(w, "checkpoint: tensor '%s': NULL fetch function", name ? name : "(null)");
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
    if (!sw) return wfail(w, "%s", e), -1;
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
                    return wfail(w, "%s: tensor '%s': the data source failed at byte %" PRIu64,
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
    if (sl_st_writer_close(sw, e, sizeof e) != 0) return wfail(w, "%s", e), -1;
    return 0;
}

int sl_ckpt_save_write(sl_ckpt_writer *w, char *err, size_t errlen) {
    if (!w) return sl_fail(err, errlen, "checkpoint save: NULL writer");
    if (!w->failed && w->written) wfail(w, "checkpoint: written twice");
    if (!w->failed && w->n > 1) {
        const wpiece **by = sl_xmalloc(sizeof(*by) * (size_t)w->n);
        for (int i = 0; i < w->n; i++) by[i] = &w->p[i];
        qsort(by, (size_t)w->n, sizeof *by, cmp_wpiece_key);
        for (int i = 1; i < w->n && !w->failed; i++)
            if (cmp_wpiece_key(&by[i - 1], &by[i]) == 0)
                wfail(w, "checkpoint: tensor '%s': piece at element %" PRId64 " declared twice",
                      by[i]->name, by[i]->begin);
        free(by);
    }
    if (w->failed) return sl_fail(err, errlen, "%s", w->err);
    if (w->n > 1) qsort(w->p, (size_t)w->n, sizeof(wpiece), cmp_wpiece);
    char dname[64], mname[64];
    ck_data_name(dname, sizeof dname, w->rank);
    ck_manifest_name(mname, sizeof mname, w->rank);
    char *dpath = join(w->tmpdir, dname), *mpath = join(w->tmpdir, mname);
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
            wfail(w, "%s: reading back what was written: %s", dpath, e);
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
                    wfail(w, "%s: tensor '%s' missing after the write", dpath, key);
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
        if (sl_write_file_atomic(mpath, json, strlen(json), e, sizeof e) != 0) wfail(w, "%s", e);
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

/* ---- rank 0's commit ---- */

typedef struct {
    char first[1024];
    int count;
} problems;

static void collect(void *user, const char *line) {
    problems *p = user;
    if (p->count++ == 0) snprintf(p->first, sizeof p->first, "%s", line);
}

static uint32_t crc_of(const char *s, size_t n) {
    return sl_crc32c(0, s, n);
}

/* Reads every manifest of the temporary directory and checks the whole checkpoint before it is
 * committed: a rank that wrote nothing, or pieces that do not cover a tensor exactly once,
 * fail the save instead of producing a checkpoint that cannot be loaded. */
static int check_and_index(sl_ckpt_writer *w, ck_commit *cm) {
    ck_manifest *ms = sl_xcalloc((size_t)w->world, sizeof *ms);
    char **names = sl_xcalloc((size_t)w->world, sizeof *names);
    int rc = 0;
    char e[1024];
    for (int r = 0; r < w->world && rc == 0; r++) {
        char mname[64];
        ck_manifest_name(mname, sizeof mname, r);
        char *path = join(w->tmpdir, mname);
        size_t len = 0;
        char *text = sl_read_file(path, &len, e, sizeof e);
        if (!text) {
            wfail(w,
                  "%s (rank %d did not write its part, or wrote it to a file system rank 0 does "
                  "not see: every rank must see the same directory)",
                  e, r);
            rc = -1;
        } else if (ck_manifest_parse(text, len, path, &ms[r], e, sizeof e) != 0) {
            wfail(w, "%s", e);
            rc = -1;
        } else if (ms[r].rank != r || ms[r].world_size != w->world || ms[r].step != w->step) {
            wfail(w,
                  "%s: rank %d of %d at step %" PRId64 ", expected rank %d of %d at step %" PRId64,
                  path, ms[r].rank, ms[r].world_size, ms[r].step, r, w->world, w->step);
            rc = -1;
        } else {
            for (int k = 0; k < ms[r].nfiles && rc == 0; k++) {
                char *fp = join(w->tmpdir, ms[r].files[k].name);
                struct stat st;
                if (stat(fp, &st) != 0 || (uint64_t)st.st_size != ms[r].files[k].bytes) {
                    wfail(w, "%s: missing or not %" PRIu64 " bytes as %s says", fp,
                          ms[r].files[k].bytes, path);
                    rc = -1;
                }
                free(fp);
            }
            cm->manifests[r].file = sl_xstrdup(mname);
            cm->manifests[r].rank = r;
            cm->manifests[r].bytes = len;
            cm->manifests[r].crc32c = crc_of(text, len);
        }
        free(text);
        free(path);
        names[r] = sl_xstrdup(mname);
    }
    if (rc == 0) {
        ck_index idx;
        problems pr = {"", 0};
        ck_index_build(ms, w->world, (const char *const *)names, w->tmpdir, collect, &pr, &idx);
        ck_index_free(&idx);
        if (pr.count) {
            if (pr.count > 1)
                wfail(w, "%s (and %d more problems)", pr.first, pr.count - 1);
            else
                wfail(w, "%s", pr.first);
            rc = -1;
        }
    }
    for (int r = 0; r < w->world; r++) {
        ck_manifest_free(&ms[r]);
        free(names[r]);
    }
    free(ms);
    free(names);
    return rc;
}

/* Puts the temporary directory in place as step-<N>, replacing an existing one atomically. */
static int install(sl_ckpt_writer *w) {
    struct stat st;
    if (lstat(w->final, &st) != 0) {
        if (rename(w->tmpdir, w->final) != 0)
            return wfail(w, "renaming %s to %s: %s", w->tmpdir, w->final, strerror(errno)), -1;
    } else if (renameat2(AT_FDCWD, w->tmpdir, AT_FDCWD, w->final, RENAME_EXCHANGE) == 0) {
        /* the old step-<N> now sits at the temporary name */
        if (fsync_dir(w->ckdir) != 0 || rmtree(w->tmpdir) != 0)
            sl_warn("checkpoint: %s: could not remove the replaced checkpoint: %s", w->tmpdir,
                    strerror(errno));
    } else if (errno == EINVAL || errno == ENOSYS || errno == ENOTSUP) {
        /* a file system without atomic exchange: move the old one aside first (a crash in
         * between leaves `latest` naming the old one, which sl_ckpt_find_latest then misses
         * and falls back to the newest committed checkpoint) */
        char *aside = sl_xmalloc(strlen(w->final) + 32);
        sprintf(aside, "%s/.tmp-replaced-step-%" PRId64, w->ckdir, w->step);
        rmtree(aside);
        if (rename(w->final, aside) != 0 || rename(w->tmpdir, w->final) != 0) {
            wfail(w, "replacing %s: %s", w->final, strerror(errno));
            free(aside);
            return -1;
        }
        rmtree(aside);
        free(aside);
    } else {
        return wfail(w, "replacing %s by %s: %s", w->final, w->tmpdir, strerror(errno)), -1;
    }
    if (fsync_dir(w->ckdir) != 0)
        return wfail(w, "%s: fsync after the rename: %s", w->ckdir, strerror(errno)), -1;
    return 0;
}

static int cmp_desc(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x < y) - (x > y);
}

/* keep_last / keep_every / keep_steps, after the new checkpoint is committed and `latest` names it.
 */
static void retention(sl_ckpt_writer *w) {
    if (w->keep_last <= 0) return;
    int n = 0;
    int64_t *steps = ck_committed_steps(w->ckdir, &n);
    if (n > 1) qsort(steps, (size_t)n, sizeof *steps, cmp_desc);
    int kept = 0;
    bool removed = false;
    for (int i = 0; i < n; i++) {
        int64_t s = steps[i];
        if (s > w->step) continue; /* another run's newer checkpoint: never ours to delete */
        if (kept < w->keep_last || s == w->step) {
            kept++;
            continue;
        }
        if (w->keep_every > 0 && s % w->keep_every == 0) continue;
        bool pinned = false;
        for (int k = 0; k < w->n_keep_steps; k++) pinned |= w->keep_steps[k] == s;
        if (pinned) continue;
        char from[CK_PATH_MAX], to[CK_PATH_MAX];
        ck_path(from, sizeof from, "%s/step-%" PRId64, w->ckdir, s);
        ck_path(to, sizeof to, "%s/.tmp-delete-step-%" PRId64, w->ckdir, s);
        /* renamed first: a deletion cut short leaves a .tmp-* directory, never a partial
         * checkpoint under a step-* name */
        if (rename(from, to) != 0) {
            sl_warn("checkpoint: cannot remove old checkpoint %s: %s", from, strerror(errno));
            continue;
        }
        removed = true;
        if (rmtree(to) != 0)
            sl_warn("checkpoint: %s: cannot remove: %s (removed at the next save)", to,
                    strerror(errno));
    }
    if (removed) fsync_dir(w->ckdir);
    free(steps);
}

static int commit_rank0(sl_ckpt_writer *w, const cJSON *state) {
    ck_commit cm = {
        .format_version = SL_CKPT_FORMAT_VERSION, .step = w->step, .world_size = w->world};
    cm.manifests = sl_xcalloc((size_t)w->world, sizeof *cm.manifests);
    int rc = check_and_index(w, &cm);
    char e[1024];
    if (rc == 0) {
        char *js = ck_state_print(w->step, w->world, SLUICE_VERSION, state);
        char *sp = join(w->tmpdir, CK_STATE_FILE);
        size_t n = strlen(js);
        if (sl_write_file_atomic(sp, js, n, e, sizeof e) != 0) {
            wfail(w, "%s", e);
            rc = -1;
        }
        cm.state = (ck_indexed){sl_xstrdup(CK_STATE_FILE), -1, n, crc_of(js, n)};
        free(js);
        free(sp);
    }
    if (rc == 0) {
        /* COMMIT last: sl_write_file_atomic fsyncs it and the directory */
        char *cj = ck_commit_print(&cm);
        char *cp = join(w->tmpdir, CK_COMMIT_FILE);
        if (sl_write_file_atomic(cp, cj, strlen(cj), e, sizeof e) != 0) {
            wfail(w, "%s", e);
            rc = -1;
        }
        free(cj);
        free(cp);
    }
    ck_commit_free(&cm);
    if (rc == 0) rc = install(w);
    if (rc == 0) {
        char *lp = join(w->ckdir, CK_LATEST_FILE);
        char text[64];
        int n = snprintf(text, sizeof text, "step-%" PRId64 "\n", w->step);
        if (sl_write_file_atomic(lp, text, (size_t)n, e, sizeof e) != 0) {
            /* committed, but `latest` still names the previous checkpoint: a resume would
             * repeat steps; report it as a failure of this save */
            wfail(w, "%s (the checkpoint %s is complete, `latest` was not updated)", e, w->final);
            rc = -1;
        }
        free(lp);
    }
    if (rc == 0) retention(w);
    return rc;
}

static void writer_free(sl_ckpt_writer *w) {
    for (int i = 0; i < w->n; i++) free(w->p[i].name);
    free(w->p);
    free(w->ckdir);
    free(w->tmpdir);
    free(w->final);
    free(w->keep_steps);
    free(w);
}

void sl_ckpt_save_abort(sl_ckpt_writer *w) {
    if (w) writer_free(w);
}

int sl_ckpt_save_commit(sl_ckpt_writer *w, const cJSON *state, char *err, size_t errlen) {
    if (!w) return sl_fail(err, errlen, "checkpoint save: NULL writer");
    if (!w->failed && !w->written) wfail(w, "checkpoint: committed before sl_ckpt_save_write");
    const bool local = w->failed;
    const int nfail = w->agree(w->agree_user, local);
    int mine = 0; /* rank 0: the commit itself failed */
    if (w->rank == 0) {
        if (nfail == 0) mine = commit_rank0(w, state) != 0;
        if (nfail || mine) rmtree(w->tmpdir); /* nothing committed: free the space */
    }
    const int nfail2 = w->agree(w->agree_user, mine);
    int rc = 0;
    if (local || mine) {
        sl_fail(err, errlen, "checkpoint step %" PRId64 " not committed: %s", w->step, w->err);
        rc = -1;
    } else if (nfail) {
        sl_fail(err, errlen,
                "checkpoint step %" PRId64 " not committed: %d of %d ranks failed to write their "
                "part (their messages name the files)",
                w->step, nfail, w->world);
        rc = -1;
    } else if (nfail2) {
        sl_fail(err, errlen,
                "checkpoint step %" PRId64 " not committed: rank 0 failed to commit it (its "
                "message names the cause)",
                w->step);
        rc = -1;
    }
    writer_free(w);
    return rc;
}

int sl_ckpt_save(sl_ckpt_writer *w, const cJSON *state, char *err, size_t errlen) {
    if (!w) return sl_fail(err, errlen, "checkpoint save: NULL writer");
    char e[2048] = "";
    int wr = sl_ckpt_save_write(w, e, sizeof e);
    int rc = sl_ckpt_save_commit(w, state, err, errlen);
    (void)wr; /* the commit reports a failed write (w->err) itself */
    return rc;
}
