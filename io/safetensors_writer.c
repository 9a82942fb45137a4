/*
 * io/safetensors_writer.c - writing a safetensors file (see safetensors.h): the declaration
 * phase, the header, the streamed data and the atomic rename.
 *
 * The writer builds the JSON header itself (exact integers, its own escaping) and streams the
 * data, so only the names and shapes are held in memory. It refuses files larger than 2^53
 * bytes, the integer range the reader accepts (ST_INT_MAX).
 */
#include "io/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/fsutil.h"
#include "core/log.h"
#include "io/safetensors_internal.h"

static bool utf8_ok(const char *s) {
    return sl_st_utf8_invalid_at((const unsigned char *)s, strlen(s)) < 0;
}

/* ---- a growable string ---- */

typedef struct {
    char *p;
    size_t n, cap;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        b->p = sl_xrealloc(b->p, cap);
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void sb_puts(sbuf *b, const char *s) {
    sb_put(b, s, strlen(s));
}

static void sb_u64(sbuf *b, uint64_t v) {
    char t[32];
    int k = snprintf(t, sizeof t, "%llu", (ull)v);
    sb_put(b, t, (size_t)k);
}

/* A JSON string literal; s must be valid UTF-8 (non-ASCII bytes are copied as they are). */
static void sb_json_str(sbuf *b, const char *s) {
    sb_put(b, "\"", 1);
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c == '"' || *c == '\\') {
            char e[2] = {'\\', (char)*c};
            sb_put(b, e, 2);
        } else if (*c < 0x20) {
            char e[8];
            snprintf(e, sizeof e, "\\u%04x", *c);
            sb_put(b, e, 6);
        } else {
            sb_put(b, (const char *)c, 1);
        }
    }
    sb_put(b, "\"", 1);
}

/* ---- writer ---- */

struct sl_st_writer {
    char *path, *tmp;
    int fd;
    st_entry *t;
    int n, cap;
    char **mkey, **mval;
    int nm, capm;
    bool data_phase;
    int cur;       /* tensor being written */
    uint64_t done; /* bytes of tensor `cur` written */
    bool failed;
    char err[1024];
};

static void werr(sl_st_writer *w, const char *fmt, ...) SL_PRINTF(2, 3);
static void werr(sl_st_writer *w, const char *fmt, ...) {
    if (w->failed) return;
    w->failed = true;
    int k = snprintf(w->err, sizeof w->err, "%s: ", w->path);
    va_list ap;
    va_start(ap, fmt);
    if (k > 0 && (size_t)k < sizeof w->err)
        vsnprintf(w->err + k, sizeof w->err - (size_t)k, fmt, ap);
    va_end(ap);
}

sl_st_writer *sl_st_writer_open(const char *path, char *err, size_t errlen) {
    if (!path || !*path) {
        sl_fail(err, errlen, "safetensors writer: empty path");
        return NULL;
    }
    size_t tl = strlen(path) + 32;
    char *tmp = sl_xmalloc(tl);
    snprintf(tmp, tl, "%s.tmp.%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        sl_fail(err, errlen, "%s: cannot create temporary file %s: %s", path, tmp, strerror(errno));
        free(tmp);
        return NULL;
    }
    sl_st_writer *w = sl_xmalloc(sizeof *w);
    memset(w, 0, sizeof *w);
    w->path = sl_xstrdup(path);
    w->tmp = tmp;
    w->fd = fd;
    return w;
}

const char *sl_st_writer_error(const sl_st_writer *w) {
    return w && w->failed ? w->err : NULL;
}

int sl_st_writer_set_metadata(sl_st_writer *w, const char *key, const char *value) {
    if (w->failed) return -1;
    if (!key || !value) return werr(w, "metadata: NULL key or value"), -1;
    if (w->data_phase) return werr(w, "metadata '%s': set after the data phase began", key), -1;
    if (!utf8_ok(key) || !utf8_ok(value))
        return werr(w, "metadata '%s': key or value is not valid UTF-8", key), -1;
    for (int i = 0; i < w->nm; i++)
        if (strcmp(w->mkey[i], key) == 0) {
            free(w->mval[i]);
            w->mval[i] = sl_xstrdup(value);
            return 0;
        }
    if (w->nm == w->capm) {
        w->capm = w->capm ? 2 * w->capm : 8;
        w->mkey = sl_xrealloc(w->mkey, sizeof(char *) * (size_t)w->capm);
        w->mval = sl_xrealloc(w->mval, sizeof(char *) * (size_t)w->capm);
    }
    w->mkey[w->nm] = sl_xstrdup(key);
    w->mval[w->nm] = sl_xstrdup(value);
    w->nm++;
    return 0;
}

int sl_st_writer_declare(sl_st_writer *w, const char *name, const char *dtype, int ndim,
                         const int64_t *shape) {
    if (w->failed) return -1;
    if (!name || !*name) return werr(w, "tensor #%d: empty name", w->n), -1;
    if (w->data_phase) return werr(w, "tensor '%s': declared after the data phase began", name), -1;
    if (strcmp(name, "__metadata__") == 0)
        return werr(w, "tensor '__metadata__': the name is reserved"), -1;
    if (!utf8_ok(name)) return werr(w, "tensor #%d: name is not valid UTF-8", w->n), -1;
    size_t esize = 0;
    const char *dt = sl_st_dtype_lookup(dtype, &esize);
    if (!dt) return werr(w, "tensor '%s': unknown dtype '%s'", name, dtype ? dtype : "(null)"), -1;
    if (ndim < 0 || ndim > SL_ST_MAX_DIMS)
        return werr(w, "tensor '%s': ndim %d outside [0, %d]", name, ndim, SL_ST_MAX_DIMS), -1;
    if (ndim > 0 && !shape) return werr(w, "tensor '%s': NULL shape", name), -1;
    for (int d = 0; d < ndim; d++)
        if (shape[d] < 0 || (uint64_t)shape[d] > ST_INT_MAX)
            return werr(w, "tensor '%s': shape[%d] = %lld is invalid", name, d,
                        (long long)shape[d]),
                   -1;
    uint64_t numel;
    if (!sl_st_shape_numel(ndim, shape, &numel) || numel > ST_INT_MAX / esize) {
        char sb[256];
        return werr(w, "tensor '%s': shape %s of %s is too large", name,
                    sl_st_fmt_shape(sb, sizeof sb, ndim, shape), dt),
               -1;
    }
    if (w->n == w->cap) {
        w->cap = w->cap ? 2 * w->cap : 64;
        w->t = sl_xrealloc(w->t, sizeof(st_entry) * (size_t)w->cap);
    }
    st_entry *e = &w->t[w->n];
    memset(e, 0, sizeof *e);
    e->name = sl_xstrdup(name);
    e->dtype = dt;
    e->ndim = ndim;
    for (int d = 0; d < ndim; d++) e->shape[d] = shape[d];
    e->nbytes = numel * esize;
    return w->n++;
}

static int cmp_name_ptr(const void *a, const void *b) {
    return strcmp((*(const st_entry *const *)a)->name, (*(const st_entry *const *)b)->name);
}

int sl_st_writer_begin_data(sl_st_writer *w) {
    if (w->failed) return -1;
    if (w->data_phase) return 0;
    /* duplicate names */
    if (w->n > 1) {
        const st_entry **by = sl_xmalloc(sizeof(*by) * (size_t)w->n);
        for (int i = 0; i < w->n; i++) by[i] = &w->t[i];
        qsort(by, (size_t)w->n, sizeof(*by), cmp_name_ptr);
        for (int i = 1; i < w->n; i++)
            if (strcmp(by[i - 1]->name, by[i]->name) == 0) {
                werr(w, "tensor '%s': declared twice", by[i]->name);
                free(by);
                return -1;
            }
        free(by);
    }
    uint64_t off = 0;
    for (int i = 0; i < w->n; i++) {
        if (w->t[i].nbytes > ST_INT_MAX - off)
            return werr(w, "tensor '%s': the data section would exceed 2^53 bytes", w->t[i].name),
                   -1;
        w->t[i].begin = off;
        off += w->t[i].nbytes;
        w->t[i].end = off;
    }
    sbuf h = {0};
    sb_puts(&h, "{");
    bool first = true;
    if (w->nm > 0) {
        sb_puts(&h, "\"__metadata__\":{");
        for (int i = 0; i < w->nm; i++) {
            if (i) sb_puts(&h, ",");
            sb_json_str(&h, w->mkey[i]);
            sb_puts(&h, ":");
            sb_json_str(&h, w->mval[i]);
        }
        sb_puts(&h, "}");
        first = false;
    }
    for (int i = 0; i < w->n; i++) {
        const st_entry *e = &w->t[i];
        if (!first) sb_puts(&h, ",");
        first = false;
        sb_json_str(&h, e->name);
        sb_puts(&h, ":{\"dtype\":\"");
        sb_puts(&h, e->dtype);
        sb_puts(&h, "\",\"shape\":[");
        for (int d = 0; d < e->ndim; d++) {
            if (d) sb_puts(&h, ",");
            sb_u64(&h, (uint64_t)e->shape[d]);
        }
        sb_puts(&h, "],\"data_offsets\":[");
        sb_u64(&h, e->begin);
        sb_puts(&h, ",");
        sb_u64(&h, e->end);
        sb_puts(&h, "]}");
    }
    sb_puts(&h, "}");
    while (h.n % 8) sb_puts(&h, " "); /* data section starts 8-byte aligned */
    if (h.n >= SL_ST_MAX_HEADER) {
        werr(w, "header of %zu bytes exceeds the %u-byte limit", h.n, SL_ST_MAX_HEADER);
        free(h.p);
        return -1;
    }
    unsigned char len8[8];
    for (int k = 0; k < 8; k++) len8[k] = (unsigned char)((uint64_t)h.n >> (8 * k));
    int rc = sl_write_all(w->fd, len8, 8);
    if (rc == 0) rc = sl_write_all(w->fd, h.p, h.n);
    free(h.p);
    if (rc != 0) return werr(w, "writing the header to %s: %s", w->tmp, strerror(errno)), -1;
    w->data_phase = true;
    w->cur = 0;
    w->done = 0;
    return 0;
}

/* Moves the cursor past complete tensors (those with all their bytes written, incl. empty). */
static void advance(sl_st_writer *w) {
    while (w->cur < w->n && w->done == w->t[w->cur].nbytes) w->cur++, w->done = 0;
}

int sl_st_writer_write(sl_st_writer *w, const char *name, const void *data, size_t nbytes) {
    if (w->failed) return -1;
    if (!w->data_phase && sl_st_writer_begin_data(w) != 0) return -1;
    if (!name) return werr(w, "write: NULL tensor name"), -1;
    /* the next tensor, possibly after empty ones (which need no write) */
    int j = w->cur;
    if (w->done == 0)
        while (j < w->n && w->t[j].nbytes == 0 && strcmp(w->t[j].name, name) != 0) j++;
    if (j >= w->n || strcmp(w->t[j].name, name) != 0) {
        if (w->cur >= w->n)
            return werr(w, "tensor '%s': written after all declared tensors", name), -1;
        if (w->done != 0)
            return werr(w,
                        "tensor '%s': written while tensor '%s' is incomplete (%llu of %llu "
                        "bytes)",
                        name, w->t[w->cur].name, (ull)w->done, (ull)w->t[w->cur].nbytes),
                   -1;
        return werr(w, "tensor '%s': written out of order (the next declared tensor is '%s')", name,
                    w->t[j < w->n ? j : w->cur].name),
               -1;
    }
    st_entry *e = &w->t[j];
    if (nbytes != e->nbytes) {
        char sb[256];
        return werr(w, "tensor '%s': write of %zu bytes, but shape %s of %s is %llu bytes", name,
                    nbytes, sl_st_fmt_shape(sb, sizeof sb, e->ndim, e->shape), e->dtype,
                    (ull)e->nbytes),
               -1;
    }
    if (nbytes && !data) return werr(w, "tensor '%s': NULL data", name), -1;
    if (sl_write_all(w->fd, data, nbytes) != 0)
        return werr(w, "tensor '%s': writing %zu bytes at file offset %llu of %s: %s", name, nbytes,
                    (ull)e->begin, w->tmp, strerror(errno)),
               -1;
    w->cur = j + 1;
    w->done = 0;
    return 0;
}

int sl_st_writer_write_chunk(sl_st_writer *w, const void *data, size_t nbytes) {
    if (w->failed) return -1;
    if (!w->data_phase && sl_st_writer_begin_data(w) != 0) return -1;
    if (nbytes == 0) return 0;
    advance(w);
    if (w->cur >= w->n)
        return werr(w, "write of %zu bytes after all declared tensors were written", nbytes), -1;
    st_entry *e = &w->t[w->cur];
    if (nbytes > e->nbytes - w->done)
        return werr(w, "tensor '%s': chunk of %zu bytes exceeds the %llu bytes remaining", e->name,
                    nbytes, (ull)(e->nbytes - w->done)),
               -1;
    if (!data) return werr(w, "tensor '%s': NULL data", e->name), -1;
    if (sl_write_all(w->fd, data, nbytes) != 0)
        return werr(w, "tensor '%s': writing %zu bytes at byte %llu of its data in %s: %s", e->name,
                    nbytes, (ull)w->done, w->tmp, strerror(errno)),
               -1;
    w->done += nbytes;
    if (w->done == e->nbytes) w->cur++, w->done = 0; /* never rest on a complete tensor */
    return 0;
}

static void writer_free(sl_st_writer *w) {
    for (int i = 0; i < w->n; i++) free(w->t[i].name);
    for (int i = 0; i < w->nm; i++) free(w->mkey[i]), free(w->mval[i]);
    free(w->t), free(w->mkey), free(w->mval);
    free(w->path), free(w->tmp);
    free(w);
}

void sl_st_writer_abort(sl_st_writer *w) {
    if (!w) return;
    if (w->fd >= 0) close(w->fd);
    unlink(w->tmp);
    writer_free(w);
}

/* The directory part of path ("." when there is none). */
static char *dir_of(const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash) return sl_xstrdup(".");
    if (slash == path) return sl_xstrdup("/");
    size_t n = (size_t)(slash - path);
    char *d = sl_xmalloc(n + 1);
    memcpy(d, path, n);
    d[n] = 0;
    return d;
}

int sl_st_writer_close(sl_st_writer *w, char *err, size_t errlen) {
    if (!w) {
        sl_fail(err, errlen, "safetensors writer: NULL");
        return -1;
    }
    if (!w->failed && !w->data_phase) sl_st_writer_begin_data(w);
    if (!w->failed) {
        advance(w);
        if (w->cur < w->n) {
            if (w->done)
                werr(w, "tensor '%s': only %llu of its %llu bytes were written", w->t[w->cur].name,
                     (ull)w->done, (ull)w->t[w->cur].nbytes);
            else
                werr(w, "tensor '%s' (#%d of %d) and those after it were never written",
                     w->t[w->cur].name, w->cur, w->n);
        }
    }
    if (!w->failed && fsync(w->fd) != 0) werr(w, "fsync of %s: %s", w->tmp, strerror(errno));
    if (w->fd >= 0) {
        if (close(w->fd) != 0) werr(w, "close of %s: %s", w->tmp, strerror(errno));
        w->fd = -1;
    }
    if (!w->failed && rename(w->tmp, w->path) != 0)
        werr(w, "renaming %s to the destination: %s", w->tmp, strerror(errno));
    if (w->failed) {
        unlink(w->tmp);
        sl_fail(err, errlen, "%s", w->err);
        writer_free(w);
        return -1;
    }
    char *dir = dir_of(w->path);
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int rc = 0;
    if (dfd < 0 || fsync(dfd) != 0) {
        sl_fail(err, errlen, "%s: written, but fsync of directory %s failed: %s", w->path, dir,
                strerror(errno));
        rc = -1;
    }
    if (dfd >= 0) close(dfd);
    free(dir);
    writer_free(w);
    return rc;
}
