/*
 * io/safetensors_reader.c - opening a safetensors file and reading its tensors (see
 * safetensors.h).
 *
 * sl_st_open parses the header with cJSON and validates every field before any tensor can be
 * read; integers in the header are accepted up to 2^53 (ST_INT_MAX), the range cJSON, which
 * stores numbers as doubles, represents exactly. Tensor data is read with pread, so a file may
 * be read from several threads at once.
 */
#include "io/safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/log.h"
#include "io/safetensors_internal.h"

/* An element count as size_t (0 for the impossible negative case). */
static size_t ucount(int n) {
    return n > 0 ? (size_t)n : 0;
}

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
        sl_fail(err, errlen, "%s: tensor '%s': entry is not a JSON object", path, name);
        return false;
    }
    static const char *const fields[3] = {"dtype", "shape", "data_offsets"};
    for (int k = 0; k < 3; k++) {
        int seen = 0;
        for (const cJSON *x = j->child; x; x = x->next) seen += strcmp(x->string, fields[k]) == 0;
        if (seen > 1) {
            sl_fail(err, errlen, "%s: tensor '%s': field \"%s\" appears twice", path, name,
                    fields[k]);
            return false;
        }
    }
    const cJSON *jd = cJSON_GetObjectItemCaseSensitive(j, "dtype");
    const cJSON *js = cJSON_GetObjectItemCaseSensitive(j, "shape");
    const cJSON *jo = cJSON_GetObjectItemCaseSensitive(j, "data_offsets");
    if (!cJSON_IsString(jd)) {
        sl_fail(err, errlen, "%s: tensor '%s': \"dtype\" is %s", path, name,
                jd ? "not a string" : "missing");
        return false;
    }
    size_t esize = 0;
    e->dtype = sl_st_dtype_lookup(jd->valuestring, &esize);
    if (!e->dtype) {
        sl_fail(err, errlen, "%s: tensor '%s': unknown dtype '%s'", path, name, jd->valuestring);
        return false;
    }
    if (!cJSON_IsArray(js)) {
        sl_fail(err, errlen, "%s: tensor '%s': \"shape\" is %s", path, name,
                js ? "not an array" : "missing");
        return false;
    }
    int nd = cJSON_GetArraySize(js);
    if (nd > SL_ST_MAX_DIMS) {
        sl_fail(err, errlen, "%s: tensor '%s': shape has %d dimensions (at most %d supported)",
                path, name, nd, SL_ST_MAX_DIMS);
        return false;
    }
    e->ndim = nd;
    int d = 0;
    for (const cJSON *x = js->child; x; x = x->next, d++) {
        uint64_t v;
        if (!json_uint(x, &v)) {
            sl_fail(err, errlen, "%s: tensor '%s': shape[%d] is not a non-negative integer", path,
                    name, d);
            return false;
        }
        e->shape[d] = (int64_t)v;
    }
    if (!cJSON_IsArray(jo) || cJSON_GetArraySize(jo) != 2) {
        sl_fail(err, errlen, "%s: tensor '%s': \"data_offsets\" is %s", path, name,
                jo ? "not an array of 2 integers" : "missing");
        return false;
    }
    if (!json_uint(jo->child, &e->begin) || !json_uint(jo->child->next, &e->end)) {
        sl_fail(err, errlen,
                "%s: tensor '%s': data_offsets are not non-negative integers (at most 2^53)", path,
                name);
        return false;
    }
    if (e->begin > e->end) {
        sl_fail(err, errlen, "%s: tensor '%s': data_offsets [%llu, %llu]: begin is after end", path,
                name, (ull)e->begin, (ull)e->end);
        return false;
    }
    uint64_t numel;
    char sb[256];
    bool ok = sl_st_shape_numel(e->ndim, e->shape, &numel) && numel <= ST_INT_MAX / esize;
    if (!ok || numel * esize != e->end - e->begin) {
        sl_st_fmt_shape(sb, sizeof sb, e->ndim, e->shape);
        if (ok)
            sl_fail(err, errlen,
                    "%s: tensor '%s': data_offsets [%llu, %llu] do not match shape %s of %s (%llu "
                    "bytes)",
                    path, name, (ull)e->begin, (ull)e->end, sb, e->dtype, (ull)(numel * esize));
        else
            sl_fail(err, errlen,
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
        sl_fail(err, errlen, "%s: header is not valid JSON (near file offset %llu)", path,
                (ull)(8 + at));
        return false;
    }
    bool ok = false;
    st_key *keys = NULL;
    size_t pos = (size_t)(end - hdr);
    for (size_t k = pos; k < hlen; k++)
        if (hdr[k] != ' ' && hdr[k] != '\t' && hdr[k] != '\n' && hdr[k] != '\r') {
            sl_fail(err, errlen,
                    "%s: header has bytes other than space padding after the JSON object (file "
                    "offset %llu)",
                    path, (ull)(8 + k));
            goto done;
        }
    if (!cJSON_IsObject(root)) {
        sl_fail(err, errlen, "%s: header is not a JSON object", path);
        goto done;
    }
    int nt = 0, nmeta = 0;
    for (const cJSON *c = root->child; c; c = c->next) {
        if (strcmp(c->string, "__metadata__") == 0) {
            if (++nmeta > 1) {
                sl_fail(err, errlen, "%s: header has \"__metadata__\" twice", path);
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
                sl_fail(err, errlen, "%s: \"__metadata__\" is not a JSON object", path);
                goto done;
            }
            int m = cJSON_GetArraySize(c);
            f->mkey = sl_xmalloc(sizeof(char *) * ucount(m));
            f->mval = sl_xmalloc(sizeof(char *) * ucount(m));
            for (const cJSON *x = c->child; x; x = x->next) {
                if (!cJSON_IsString(x)) {
                    sl_fail(err, errlen, "%s: __metadata__ '%s': value is not a string", path,
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
                    sl_fail(err, errlen, "%s: __metadata__ '%s': key appears twice", path,
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
            sl_fail(err, errlen, "%s: tensor #%d has an empty name", path, f->n - 1);
            goto done;
        }
        if (!parse_entry(path, c, e, err, errlen)) goto done;
        if (e->end > f->data_size) {
            sl_fail(err, errlen,
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
            sl_fail(err, errlen, "%s: tensor '%s' appears twice in the header", path, keys[i].name);
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
            sl_fail(err, errlen,
                    "%s: tensor '%s': data_offsets [%llu, %llu] overlap tensor '%s' [%llu, %llu]",
                    path, e->name, (ull)e->begin, (ull)e->end, prev->name, (ull)prev->begin,
                    (ull)prev->end);
            goto done;
        }
        if (e->begin > at) {
            sl_fail(err, errlen,
                    "%s: tensor '%s': data_offsets [%llu, %llu] leave a gap: data bytes [%llu, "
                    "%llu) belong to no tensor",
                    path, e->name, (ull)e->begin, (ull)e->end, (ull)at, (ull)e->begin);
            goto done;
        }
        at = e->end;
        prev = e;
    }
    if (at != f->data_size) {
        sl_fail(err, errlen,
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
        sl_fail(err, errlen, "safetensors: NULL path");
        return NULL;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        sl_fail(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    sl_st_file *f = sl_xmalloc(sizeof *f);
    memset(f, 0, sizeof *f);
    f->fd = fd;
    f->path = sl_xstrdup(path);
    char *hdr = NULL;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        sl_fail(err, errlen, "%s: fstat: %s", path, strerror(errno));
        goto fail;
    }
    if (!S_ISREG(st.st_mode)) {
        sl_fail(err, errlen, "%s: not a regular file", path);
        goto fail;
    }
    f->file_size = (uint64_t)st.st_size;
    if (f->file_size < 8) {
        sl_fail(err, errlen,
                "%s: file is %llu bytes, too short for the 8-byte header length (truncated "
                "header)",
                path, (ull)f->file_size);
        goto fail;
    }
    unsigned char len8[8];
    int r = pread_all(fd, len8, 8, 0);
    if (r != 0) {
        sl_fail(err, errlen, "%s: reading the header length: %s", path,
                r < 0 ? strerror(errno) : "unexpected end of file");
        goto fail;
    }
    uint64_t n = 0;
    for (int k = 7; k >= 0; k--) n = (n << 8) | len8[k];
    if (n >= SL_ST_MAX_HEADER) {
        sl_fail(err, errlen, "%s: header length %llu (file offset 0) exceeds the %u-byte limit",
                path, (ull)n, SL_ST_MAX_HEADER);
        goto fail;
    }
    if (n > f->file_size - 8) {
        sl_fail(err, errlen,
                "%s: header length %llu (file offset 0) extends past the end of the file (%llu "
                "bytes; truncated header?)",
                path, (ull)n, (ull)f->file_size);
        goto fail;
    }
    if (n < 2) {
        sl_fail(err, errlen,
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
        sl_fail(err, errlen, "%s: reading the %llu-byte header: %s", path, (ull)n,
                r < 0 ? strerror(errno) : "unexpected end of file");
        goto fail;
    }
    hdr[n] = 0;
    if (hdr[0] != '{') {
        sl_fail(err, errlen, "%s: header does not start with '{' (file offset 8)", path);
        goto fail;
    }
    long long bad = sl_st_utf8_invalid_at((const unsigned char *)hdr, (size_t)n);
    if (bad >= 0) {
        sl_fail(err, errlen, "%s: header %s (file offset %llu)", path,
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
    sl_st_shape_numel(e->ndim, e->shape, &n); /* validated at open */
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
        sl_fail(err, errlen, "%s: tensor index %d out of range (the file has %d tensors)", f->path,
                i, f->n);
        return -1;
    }
    const st_entry *e = &f->t[i];
    if (offset > e->nbytes || nbytes > e->nbytes - offset) {
        sl_fail(err, errlen, "%s: tensor '%s': read of bytes [%zu, %zu) outside its %llu bytes",
                f->path, e->name, offset, offset + nbytes, (ull)e->nbytes);
        return -1;
    }
    if (nbytes && !dst) {
        sl_fail(err, errlen, "%s: tensor '%s': NULL destination", f->path, e->name);
        return -1;
    }
    uint64_t off = f->data_start + e->begin + offset;
    int r = pread_all(f->fd, dst, nbytes, off);
    if (r != 0) {
        sl_fail(err, errlen, "%s: tensor '%s': reading %zu bytes at file offset %llu: %s", f->path,
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
        sl_fail(err, errlen, "%s: tensor '%s': read of %zu bytes, but shape %s of %s is %llu bytes",
                f->path, e->name, nbytes, sl_st_fmt_shape(sb, sizeof sb, e->ndim, e->shape),
                e->dtype, (ull)e->nbytes);
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
