/*
 * io/safetensors.c - the safetensors reader and writer (see safetensors.h).
 *
 * The writer builds the JSON header itself (exact integers, its own escaping) and streams the
 * data; the reader parses the header with cJSON and validates every field before any tensor can
 * be read. Integers in the header are accepted up to 2^53, the range a JSON parser that stores
 * numbers as doubles (cJSON) represents exactly; the writer refuses files larger than that.
 */
#include "io/safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/fsutil.h"
#include "core/log.h"

#define ST_INT_MAX (UINT64_C(1) << 53) /* largest integer accepted in a header */

typedef unsigned long long ull;

/* ---- shared helpers ---- */

static const struct {
    const char *name;
    size_t size;
} st_dtypes[] = {
    {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"F8_E8M0", 1},
    {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},     {"U32", 4},
    {"F32", 4},  {"I64", 8}, {"U64", 8}, {"F64", 8},
};

/* The canonical (static) spelling of a dtype name, or NULL if unknown. */
static const char *st_dtype_lookup(const char *dtype, size_t *size) {
    if (!dtype) return NULL;
    for (size_t k = 0; k < sizeof st_dtypes / sizeof st_dtypes[0]; k++)
        if (strcmp(dtype, st_dtypes[k].name) == 0) {
            if (size) *size = st_dtypes[k].size;
            return st_dtypes[k].name;
        }
    return NULL;
}

size_t sl_st_dtype_size(const char *dtype) {
    size_t s = 0;
    return st_dtype_lookup(dtype, &s) ? s : 0;
}

typedef struct {
    char *name;
    const char *dtype; /* static, from st_dtypes */
    int ndim;
    int64_t shape[SL_ST_MAX_DIMS];
    uint64_t nbytes;
    uint64_t begin, end; /* relative to the data section */
} st_entry;

/* An element count as size_t (0 for the impossible negative case). */
static size_t ucount(int n) {
    return n > 0 ? (size_t)n : 0;
}

static void set_err(char *err, size_t errlen, const char *fmt, ...) SL_PRINTF(3, 4);
static void set_err(char *err, size_t errlen, const char *fmt, ...) {
    if (!err || errlen == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* "[2, 3]" (truncated to fit). */
static const char *fmt_shape(char *buf, size_t len, int ndim, const int64_t *shape) {
    size_t o = 0;
    o += (size_t)snprintf(buf, len, "[");
    for (int d = 0; d < ndim && o < len; d++)
        o += (size_t)snprintf(buf + o, len - o, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (o < len) snprintf(buf + o, len - o, "]");
    return buf;
}

/* Element count of a shape; false when it exceeds ST_INT_MAX. */
static bool shape_numel(int ndim, const int64_t *shape, uint64_t *numel) {
    uint64_t n = 1;
    for (int d = 0; d < ndim; d++)
        if (shape[d] == 0) {
            *numel = 0;
            return true;
        }
    for (int d = 0; d < ndim; d++) {
        uint64_t s = (uint64_t)shape[d];
        if (n > ST_INT_MAX / s) return false;
        n *= s;
    }
    *numel = n;
    return true;
}

/* Offset of the first byte that is not valid UTF-8 (or is NUL), or -1 if all is valid. */
static long long utf8_invalid_at(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t len;
        uint32_t cp, min;
        if (c == 0) return (long long)i;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xE0) == 0xC0) {
            len = 2, cp = c & 0x1F, min = 0x80;
        } else if ((c & 0xF0) == 0xE0) {
            len = 3, cp = c & 0x0F, min = 0x800;
        } else if ((c & 0xF8) == 0xF0) {
            len = 4, cp = c & 0x07, min = 0x10000;
        } else {
            return (long long)i;
        }
        if (n - i < len) return (long long)i;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return (long long)i;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return (long long)i;
        i += len;
    }
    return -1;
}

static bool utf8_ok(const char *s) {
    return utf8_invalid_at((const unsigned char *)s, strlen(s)) < 0;
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
        set_err(err, errlen, "safetensors writer: empty path");
        return NULL;
    }
    size_t tl = strlen(path) + 32;
    char *tmp = sl_xmalloc(tl);
    snprintf(tmp, tl, "%s.tmp.%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        set_err(err, errlen, "%s: cannot create temporary file %s: %s", path, tmp, strerror(errno));
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
    const char *dt = st_dtype_lookup(dtype, &esize);
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
    if (!shape_numel(ndim, shape, &numel) || numel > ST_INT_MAX / esize) {
        char sb[256];
        return werr(w, "tensor '%s': shape %s of %s is too large", name,
                    fmt_shape(sb, sizeof sb, ndim, shape), dt),
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
                    nbytes, fmt_shape(sb, sizeof sb, e->ndim, e->shape), e->dtype, (ull)e->nbytes),
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
        set_err(err, errlen, "safetensors writer: NULL");
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
        set_err(err, errlen, "%s", w->err);
        writer_free(w);
        return -1;
    }
    char *dir = dir_of(w->path);
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int rc = 0;
    if (dfd < 0 || fsync(dfd) != 0) {
        set_err(err, errlen, "%s: written, but fsync of directory %s failed: %s", w->path, dir,
                strerror(errno));
        rc = -1;
    }
    if (dfd >= 0) close(dfd);
    free(dir);
    writer_free(w);
    return rc;
}

/* ---- reader ---- */

struct sl_st_file {
    char *path;
    int fd;
    uint64_t file_size, data_start, data_size;
    st_entry *t;
    int n;
    int *by_name; /* tensor indices sorted by name */
    char **mkey, **mval;
    int nm;
};

void sl_st_close(sl_st_file *f) {
    if (!f) return;
    if (f->fd >= 0) close(f->fd);
    for (int i = 0; i < f->n; i++) free(f->t[i].name);
    for (int i = 0; i < f->nm; i++) free(f->mkey[i]), free(f->mval[i]);
    free(f->t), free(f->by_name), free(f->mkey), free(f->mval), free(f->path);
    free(f);
}

static int pread_all(int fd, void *dst, size_t n, uint64_t off) {
    char *p = dst;
    while (n > 0) {
        size_t step = n < ((size_t)1 << 30) ? n : ((size_t)1 << 30);
        ssize_t r = pread(fd, p, step, (off_t)off);
        if (r < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (r == 0) return 1; /* end of file */
        p += r, n -= (size_t)r, off += (uint64_t)r;
    }
    return 0;
}

/* A JSON number that is an integer in [0, 2^53]. */
static bool json_uint(const cJSON *j, uint64_t *v) {
    if (!cJSON_IsNumber(j)) return false;
    double d = j->valuedouble;
    if (!(d >= 0) || d > (double)ST_INT_MAX || d != floor(d)) return false;
    *v = (uint64_t)d;
    return true;
}

/* Parses one tensor entry; returns false with err set. */
static bool parse_entry(const char *path, const cJSON *j, st_entry *e, char *err, size_t errlen) {
    const char *name = e->name;
    if (!cJSON_IsObject(j)) {
        set_err(err, errlen, "%s: tensor '%s': entry is not a JSON object", path, name);
        return false;
    }
    static const char *const fields[3] = {"dtype", "shape", "data_offsets"};
    for (int k = 0; k < 3; k++) {
        int seen = 0;
        for (const cJSON *x = j->child; x; x = x->next) seen += strcmp(x->string, fields[k]) == 0;
        if (seen > 1) {
            set_err(err, errlen, "%s: tensor '%s': field \"%s\" appears twice", path, name,
                    fields[k]);
            return false;
        }
    }
    const cJSON *jd = cJSON_GetObjectItemCaseSensitive(j, "dtype");
    const cJSON *js = cJSON_GetObjectItemCaseSensitive(j, "shape");
    const cJSON *jo = cJSON_GetObjectItemCaseSensitive(j, "data_offsets");
    if (!cJSON_IsString(jd)) {
        set_err(err, errlen, "%s: tensor '%s': \"dtype\" is %s", path, name,
                jd ? "not a string" : "missing");
        return false;
    }
    size_t esize = 0;
    e->dtype = st_dtype_lookup(jd->valuestring, &esize);
    if (!e->dtype) {
        set_err(err, errlen, "%s: tensor '%s': unknown dtype '%s'", path, name, jd->valuestring);
        return false;
    }
    if (!cJSON_IsArray(js)) {
        set_err(err, errlen, "%s: tensor '%s': \"shape\" is %s", path, name,
                js ? "not an array" : "missing");
        return false;
    }
    int nd = cJSON_GetArraySize(js);
    if (nd > SL_ST_MAX_DIMS) {
        set_err(err, errlen, "%s: tensor '%s': shape has %d dimensions (at most %d supported)",
                path, name, nd, SL_ST_MAX_DIMS);
        return false;
    }
    e->ndim = nd;
    int d = 0;
    for (const cJSON *x = js->child; x; x = x->next, d++) {
        uint64_t v;
        if (!json_uint(x, &v)) {
            set_err(err, errlen, "%s: tensor '%s': shape[%d] is not a non-negative integer", path,
                    name, d);
            return false;
        }
        e->shape[d] = (int64_t)v;
    }
    if (!cJSON_IsArray(jo) || cJSON_GetArraySize(jo) != 2) {
        set_err(err, errlen, "%s: tensor '%s': \"data_offsets\" is %s", path, name,
                jo ? "not an array of 2 integers" : "missing");
        return false;
    }
    if (!json_uint(jo->child, &e->begin) || !json_uint(jo->child->next, &e->end)) {
        set_err(err, errlen,
                "%s: tensor '%s': data_offsets are not non-negative integers (at most 2^53)", path,
                name);
        return false;
    }
    if (e->begin > e->end) {
        set_err(err, errlen, "%s: tensor '%s': data_offsets [%llu, %llu]: begin is after end", path,
                name, (ull)e->begin, (ull)e->end);
        return false;
    }
    uint64_t numel;
    char sb[256];
    bool ok = shape_numel(e->ndim, e->shape, &numel) && numel <= ST_INT_MAX / esize;
    if (!ok || numel * esize != e->end - e->begin) {
        fmt_shape(sb, sizeof sb, e->ndim, e->shape);
        if (ok)
            set_err(err, errlen,
                    "%s: tensor '%s': data_offsets [%llu, %llu] do not match shape %s of %s (%llu "
                    "bytes)",
                    path, name, (ull)e->begin, (ull)e->end, sb, e->dtype, (ull)(numel * esize));
        else
            set_err(err, errlen,
                    "%s: tensor '%s': data_offsets [%llu, %llu] do not match shape %s of %s (more "
                    "than 2^53 bytes)",
                    path, name, (ull)e->begin, (ull)e->end, sb, e->dtype);
        return false;
    }
    e->nbytes = e->end - e->begin;
    return true;
}

typedef struct {
    const char *name;
    uint64_t begin, end;
    int idx;
} st_key;

static int cmp_key_name(const void *a, const void *b) {
    return strcmp(((const st_key *)a)->name, ((const st_key *)b)->name);
}

static int cmp_key_offset(const void *a, const void *b) {
    const st_key *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return (x->idx > y->idx) - (x->idx < y->idx);
}

/* Tensor sort keys of t[0..n), sorted by cmp. */
static st_key *sorted_keys(const st_entry *t, int n, int (*cmp)(const void *, const void *)) {
    st_key *k = sl_xmalloc(sizeof(st_key) * ucount(n));
    for (int i = 0; i < n; i++) k[i] = (st_key){t[i].name, t[i].begin, t[i].end, i};
    qsort(k, (size_t)n, sizeof(st_key), cmp);
    return k;
}

static int cmp_str_ptr(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Validates the header JSON of f (already holding path, sizes); false with err set. */
static bool parse_header(sl_st_file *f, const char *hdr, size_t hlen, char *err, size_t errlen) {
    const char *path = f->path;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(hdr, hlen, &end, 0);
    if (!root) {
        size_t at = end && end >= hdr && end <= hdr + hlen ? (size_t)(end - hdr) : 0;
        set_err(err, errlen, "%s: header is not valid JSON (near file offset %llu)", path,
                (ull)(8 + at));
        return false;
    }
    bool ok = false;
    st_key *keys = NULL;
    size_t pos = (size_t)(end - hdr);
    for (size_t k = pos; k < hlen; k++)
        if (hdr[k] != ' ' && hdr[k] != '\t' && hdr[k] != '\n' && hdr[k] != '\r') {
            set_err(err, errlen,
                    "%s: header has bytes other than space padding after the JSON object (file "
                    "offset %llu)",
                    path, (ull)(8 + k));
            goto done;
        }
    if (!cJSON_IsObject(root)) {
        set_err(err, errlen, "%s: header is not a JSON object", path);
        goto done;
    }
    int nt = 0, nmeta = 0;
    for (const cJSON *c = root->child; c; c = c->next) {
        if (strcmp(c->string, "__metadata__") == 0) {
            if (++nmeta > 1) {
                set_err(err, errlen, "%s: header has \"__metadata__\" twice", path);
                goto done;
            }
        } else {
            nt++;
        }
    }
    f->t = sl_xmalloc(sizeof(st_entry) * ucount(nt));
    memset(f->t, 0, sizeof(st_entry) * ucount(nt));
    for (const cJSON *c = root->child; c; c = c->next) {
        if (strcmp(c->string, "__metadata__") == 0) {
            if (!cJSON_IsObject(c)) {
                set_err(err, errlen, "%s: \"__metadata__\" is not a JSON object", path);
                goto done;
            }
            int m = cJSON_GetArraySize(c);
            f->mkey = sl_xmalloc(sizeof(char *) * ucount(m));
            f->mval = sl_xmalloc(sizeof(char *) * ucount(m));
            for (const cJSON *x = c->child; x; x = x->next) {
                if (!cJSON_IsString(x)) {
                    set_err(err, errlen, "%s: __metadata__ '%s': value is not a string", path,
                            x->string);
                    goto done;
                }
                f->mkey[f->nm] = sl_xstrdup(x->string);
                f->mval[f->nm] = sl_xstrdup(x->valuestring);
                f->nm++;
            }
            char **sorted = sl_xmalloc(sizeof(char *) * ucount(f->nm));
            memcpy(sorted, f->mkey, sizeof(char *) * (size_t)f->nm);
            qsort(sorted, (size_t)f->nm, sizeof(char *), cmp_str_ptr);
            for (int i = 1; i < f->nm; i++)
                if (strcmp(sorted[i - 1], sorted[i]) == 0) {
                    set_err(err, errlen, "%s: __metadata__ '%s': key appears twice", path,
                            sorted[i]);
                    free(sorted);
                    goto done;
                }
            free(sorted);
            continue;
        }
        st_entry *e = &f->t[f->n++];
        e->name = sl_xstrdup(c->string);
        if (!*e->name) {
            set_err(err, errlen, "%s: tensor #%d has an empty name", path, f->n - 1);
            goto done;
        }
        if (!parse_entry(path, c, e, err, errlen)) goto done;
        if (e->end > f->data_size) {
            set_err(err, errlen,
                    "%s: tensor '%s': data_offsets [%llu, %llu] extend past the end of the file "
                    "(the data section is %llu bytes, from file offset %llu)",
                    path, e->name, (ull)e->begin, (ull)e->end, (ull)f->data_size,
                    (ull)f->data_start);
            goto done;
        }
    }
    /* names: unique; kept sorted for sl_st_find */
    keys = sorted_keys(f->t, f->n, cmp_key_name);
    f->by_name = sl_xmalloc(sizeof(int) * ucount(f->n));
    for (int i = 0; i < f->n; i++) f->by_name[i] = keys[i].idx;
    for (int i = 1; i < f->n; i++)
        if (strcmp(keys[i - 1].name, keys[i].name) == 0) {
            set_err(err, errlen, "%s: tensor '%s' appears twice in the header", path, keys[i].name);
            goto done;
        }
    free(keys);
    /* byte ranges: they must tile [0, data_size) */
    keys = sorted_keys(f->t, f->n, cmp_key_offset);
    uint64_t at = 0;
    const st_entry *prev = NULL;
    for (int i = 0; i < f->n; i++) {
        const st_entry *e = &f->t[keys[i].idx];
        if (e->begin < at) {
            set_err(err, errlen,
                    "%s: tensor '%s': data_offsets [%llu, %llu] overlap tensor '%s' [%llu, %llu]",
                    path, e->name, (ull)e->begin, (ull)e->end, prev->name, (ull)prev->begin,
                    (ull)prev->end);
            goto done;
        }
        if (e->begin > at) {
            set_err(err, errlen,
                    "%s: tensor '%s': data_offsets [%llu, %llu] leave a gap: data bytes [%llu, "
                    "%llu) belong to no tensor",
                    path, e->name, (ull)e->begin, (ull)e->end, (ull)at, (ull)e->begin);
            goto done;
        }
        at = e->end;
        prev = e;
    }
    if (at != f->data_size) {
        set_err(err, errlen,
                "%s: the data section is %llu bytes but the tensors cover only %llu (trailing "
                "bytes from file offset %llu)",
                path, (ull)f->data_size, (ull)at, (ull)(f->data_start + at));
        goto done;
    }
    ok = true;
done:
    free(keys);
    cJSON_Delete(root);
    return ok;
}

sl_st_file *sl_st_open(const char *path, char *err, size_t errlen) {
    if (!path) {
        set_err(err, errlen, "safetensors: NULL path");
        return NULL;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        set_err(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    sl_st_file *f = sl_xmalloc(sizeof *f);
    memset(f, 0, sizeof *f);
    f->fd = fd;
    f->path = sl_xstrdup(path);
    char *hdr = NULL;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        set_err(err, errlen, "%s: fstat: %s", path, strerror(errno));
        goto fail;
    }
    if (!S_ISREG(st.st_mode)) {
        set_err(err, errlen, "%s: not a regular file", path);
        goto fail;
    }
    f->file_size = (uint64_t)st.st_size;
    if (f->file_size < 8) {
        set_err(err, errlen,
                "%s: file is %llu bytes, too short for the 8-byte header length (truncated "
                "header)",
                path, (ull)f->file_size);
        goto fail;
    }
    unsigned char len8[8];
    int r = pread_all(fd, len8, 8, 0);
    if (r != 0) {
        set_err(err, errlen, "%s: reading the header length: %s", path,
                r < 0 ? strerror(errno) : "unexpected end of file");
        goto fail;
    }
    uint64_t n = 0;
    for (int k = 7; k >= 0; k--) n = (n << 8) | len8[k];
    if (n >= SL_ST_MAX_HEADER) {
        set_err(err, errlen, "%s: header length %llu (file offset 0) exceeds the %u-byte limit",
                path, (ull)n, SL_ST_MAX_HEADER);
        goto fail;
    }
    if (n > f->file_size - 8) {
        set_err(err, errlen,
                "%s: header length %llu (file offset 0) extends past the end of the file (%llu "
                "bytes; truncated header?)",
                path, (ull)n, (ull)f->file_size);
        goto fail;
    }
    if (n < 2) {
        set_err(err, errlen,
                "%s: header length %llu (file offset 0) is too small for a JSON "
                "object",
                path, (ull)n);
        goto fail;
    }
    f->data_start = 8 + n;
    f->data_size = f->file_size - f->data_start;
    hdr = sl_xmalloc((size_t)n + 1);
    r = pread_all(fd, hdr, (size_t)n, 8);
    if (r != 0) {
        set_err(err, errlen, "%s: reading the %llu-byte header: %s", path, (ull)n,
                r < 0 ? strerror(errno) : "unexpected end of file");
        goto fail;
    }
    hdr[n] = 0;
    if (hdr[0] != '{') {
        set_err(err, errlen, "%s: header does not start with '{' (file offset 8)", path);
        goto fail;
    }
    long long bad = utf8_invalid_at((const unsigned char *)hdr, (size_t)n);
    if (bad >= 0) {
        set_err(err, errlen, "%s: header %s (file offset %llu)", path,
                hdr[bad] == 0 ? "contains a NUL byte (padding must be spaces)"
                              : "is not valid UTF-8 text",
                (ull)(8 + bad));
        goto fail;
    }
    if (!parse_header(f, hdr, (size_t)n, err, errlen)) goto fail;
    free(hdr);
    return f;
fail:
    free(hdr);
    sl_st_close(f);
    return NULL;
}

int sl_st_count(const sl_st_file *f) {
    return f->n;
}

static const st_entry *entry(const sl_st_file *f, int i) {
    if (i < 0 || i >= f->n)
        sl_fatal("safetensors: %s: tensor index %d out of range [0, %d)", f->path, i, f->n);
    return &f->t[i];
}

const char *sl_st_name_at(const sl_st_file *f, int i) {
    return entry(f, i)->name;
}
const char *sl_st_dtype(const sl_st_file *f, int i) {
    return entry(f, i)->dtype;
}
int sl_st_ndim(const sl_st_file *f, int i) {
    return entry(f, i)->ndim;
}
const int64_t *sl_st_shape(const sl_st_file *f, int i) {
    return entry(f, i)->shape;
}
size_t sl_st_nbytes(const sl_st_file *f, int i) {
    return (size_t)entry(f, i)->nbytes;
}
uint64_t sl_st_file_offset(const sl_st_file *f, int i) {
    return f->data_start + entry(f, i)->begin;
}

int64_t sl_st_numel(const sl_st_file *f, int i) {
    const st_entry *e = entry(f, i);
    uint64_t n = 1;
    shape_numel(e->ndim, e->shape, &n); /* validated at open */
    return (int64_t)n;
}

int sl_st_find(const sl_st_file *f, const char *name) {
    int lo = 0, hi = f->n - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        int c = strcmp(name, f->t[f->by_name[mid]].name);
        if (c == 0) return f->by_name[mid];
        if (c < 0)
            hi = mid - 1;
        else
            lo = mid + 1;
    }
    return -1;
}

int sl_st_read_part(const sl_st_file *f, int i, size_t offset, void *dst, size_t nbytes, char *err,
                    size_t errlen) {
    if (i < 0 || i >= f->n) {
        set_err(err, errlen, "%s: tensor index %d out of range (the file has %d tensors)", f->path,
                i, f->n);
        return -1;
    }
    const st_entry *e = &f->t[i];
    if (offset > e->nbytes || nbytes > e->nbytes - offset) {
        set_err(err, errlen, "%s: tensor '%s': read of bytes [%zu, %zu) outside its %llu bytes",
                f->path, e->name, offset, offset + nbytes, (ull)e->nbytes);
        return -1;
    }
    if (nbytes && !dst) {
        set_err(err, errlen, "%s: tensor '%s': NULL destination", f->path, e->name);
        return -1;
    }
    uint64_t off = f->data_start + e->begin + offset;
    int r = pread_all(f->fd, dst, nbytes, off);
    if (r != 0) {
        set_err(err, errlen, "%s: tensor '%s': reading %zu bytes at file offset %llu: %s", f->path,
                e->name, nbytes, (ull)off,
                r < 0 ? strerror(errno) : "unexpected end of file (truncated after opening?)");
        return -1;
    }
    return 0;
}

int sl_st_read(const sl_st_file *f, int i, void *dst, size_t nbytes, char *err, size_t errlen) {
    if (i >= 0 && i < f->n && nbytes != f->t[i].nbytes) {
        const st_entry *e = &f->t[i];
        char sb[256];
        set_err(err, errlen, "%s: tensor '%s': read of %zu bytes, but shape %s of %s is %llu bytes",
                f->path, e->name, nbytes, fmt_shape(sb, sizeof sb, e->ndim, e->shape), e->dtype,
                (ull)e->nbytes);
        return -1;
    }
    return sl_st_read_part(f, i, 0, dst, nbytes, err, errlen);
}

const char *sl_st_metadata(const sl_st_file *f, const char *key) {
    for (int i = 0; i < f->nm; i++)
        if (strcmp(f->mkey[i], key) == 0) return f->mval[i];
    return NULL;
}

int sl_st_metadata_count(const sl_st_file *f) {
    return f->nm;
}

const char *sl_st_metadata_key_at(const sl_st_file *f, int i) {
    if (i < 0 || i >= f->nm)
        sl_fatal("safetensors: %s: metadata index %d out of range [0, %d)", f->path, i, f->nm);
    return f->mkey[i];
}
