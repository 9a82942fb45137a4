/*
 * io/checkpoint_export.c - a checkpoint's weights as a Hugging Face directory: sharded
 * safetensors files, model.safetensors.index.json and config.json (see checkpoint.h).
 *
 * Tensors are streamed from the checkpoint (8 MiB of source elements at a time) through the
 * dtype conversion into the output files, so memory does not depend on the model size. The
 * files are written into a directory beside the output one, which replaces it once complete.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/fsutil.h"
#include "core/log.h"
#include "io/checkpoint.h"
#include "io/checkpoint_internal.h"
#include "io/safetensors.h"
#include "io/safetensors_internal.h"

#define CK_EXPORT_CHUNK  ((size_t)8 << 20)
#define CK_DEFAULT_SHARD ((uint64_t)2 << 30)

typedef struct {
    sl_ckpt_export_entry e;
    int tensor; /* index in the checkpoint */
    const char *src_dtype, *dst_dtype;
    size_t src_es, dst_es;
    int64_t numel;
    uint64_t bytes; /* output bytes */
    int shard;
} xentry;

static bool is_float(const char *dt) {
    return strcmp(dt, "F32") == 0 || strcmp(dt, "BF16") == 0 || strcmp(dt, "F16") == 0 ||
           strcmp(dt, "F64") == 0;
}

static float half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
    if (exp == 0x1f) {
        u = sign | 0x7f800000u | (man << 13); /* inf, NaN */
    } else if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else { /* subnormal: normalize */
            int e = -1;
            do {
                man <<= 1;
                e++;
            } while (!(man & 0x400));
            u = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ff) << 13);
        }
    } else {
        u = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* bf16 by rounding to nearest even; NaN stays a (quiet) NaN. */
static uint16_t float_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

static float load_float(const char *dt, const unsigned char *p) {
    if (dt[0] == 'B') { /* BF16 */
        uint16_t h;
        memcpy(&h, p, 2);
        uint32_t u = (uint32_t)h << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    if (strcmp(dt, "F16") == 0) {
        uint16_t h;
        memcpy(&h, p, 2);
        return half_to_float(h);
    }
    if (strcmp(dt, "F64") == 0) {
        double d;
        memcpy(&d, p, 8);
        return (float)d;
    }
    float f;
    memcpy(&f, p, 4);
    return f;
}

/* n elements of src_dtype into dst_dtype (F32 or BF16, or the same dtype: a copy). */
static void convert(const xentry *x, const unsigned char *src, unsigned char *dst, size_t n) {
    if (x->src_dtype == x->dst_dtype) {
        memcpy(dst, src, n * x->src_es);
        return;
    }
    const bool to_bf16 = strcmp(x->dst_dtype, "BF16") == 0;
    for (size_t i = 0; i < n; i++) {
        float f = load_float(x->src_dtype, src + i * x->src_es);
        if (to_bf16) {
            uint16_t h = float_to_bf16(f);
            memcpy(dst + 2 * i, &h, 2);
        } else {
            memcpy(dst + 4 * i, &f, 4);
        }
    }
}

int sl_ckpt_export_assemble(const sl_ckpt_export_entry *e, int64_t first, int64_t n, float *out,
                            sl_ckpt_export_read_fn read, void *user, char *err, size_t errlen) {
    float *o = out;
    int64_t left = n;
    if (!e->pieces) {
        if (read(user, e->offset + first, n, out, err, errlen) != 0) return -1;
        left = 0;
    }
    /* the pieces in output order; pos is where the current one starts in the output */
    int64_t pos = 0;
    for (int i = 0; e->pieces && i < e->npieces && left > 0; i++) {
        const sl_ckpt_export_piece *p = &e->pieces[i];
        const int64_t len = p->count * p->repeat, at = first - pos;
        pos += len;
        if (at >= len) continue;
        const int64_t take = len - at < left ? len - at : left;
        if (p->zero) {
            memset(o, 0, (size_t)take * sizeof *o);
        } else { /* at most one read per repetition the range touches */
            for (int64_t done = 0; done < take;) {
                const int64_t in = (at + done) % p->count;
                const int64_t k = p->count - in < take - done ? p->count - in : take - done;
                if (read(user, p->offset + in, k, o + done, err, errlen) != 0) return -1;
                done += k;
            }
        }
        o += take, first += take, left -= take;
    }
    if (left > 0) return sl_fail(err, errlen, "export: tensor '%s': its pieces end early", e->name);
    if (e->xform)
        for (int64_t i = 0; i < n; i++) out[i] = out[i] * e->scale + e->add;
    return 0;
}

bool sl_ckpt_export_entry_valid(const sl_ckpt_export_entry *e, int64_t numel) {
    uint64_t want = 1;
    if (e->ndim < 0 || e->ndim > SL_CKPT_MAX_DIMS || !sl_st_shape_numel(e->ndim, e->shape, &want))
        return false;
    if (!e->pieces) return e->offset >= 0 && (int64_t)want <= numel - e->offset;
    uint64_t sum = 0;
    for (int i = 0; i < e->npieces; i++) {
        const sl_ckpt_export_piece *p = &e->pieces[i];
        if (p->count < 0 || p->repeat < 1 || p->count > (int64_t)1 << 50 || p->repeat > 1 << 20)
            return false;
        if (!p->zero && (p->offset < 0 || p->count > numel - p->offset)) return false;
        sum += (uint64_t)p->count * (uint64_t)p->repeat;
    }
    return sum == want;
}

/* The checkpoint tensor of an entry, read as floats (its dtype converted). */
typedef struct {
    sl_ckpt *c;
    const char *name, *dtype;
    size_t es;
    unsigned char *raw; /* CK_EXPORT_CHUNK bytes */
} float_reader;

static int read_floats(void *user, int64_t offset, int64_t n, float *out, char *err,
                       size_t errlen) {
    float_reader *r = user;
    const int64_t step = (int64_t)(CK_EXPORT_CHUNK / r->es);
    for (int64_t k = 0; k < n; k += step) {
        const int64_t m = n - k < step ? n - k : step;
        if (sl_ckpt_read(r->c, r->name, offset + k, offset + k + m, r->raw, err, errlen) != 0)
            return -1;
        for (int64_t i = 0; i < m; i++) out[k + i] = load_float(r->dtype, r->raw + i * r->es);
    }
    return 0;
}

static int cmp_xentry(const void *a, const void *b) {
    return strcmp(((const xentry *)a)->e.name, ((const xentry *)b)->e.name);
}

/* ---- the output directory: the export is written beside it, then exchanged for it ----
 * A failed export (a damaged checkpoint, a full disk) leaves an earlier export in dir as it was:
 * dir is replaced in one rename only after every file is written, synced and read back. */

typedef struct {
    char *final;  /* dir, resolved (symlinks, "."): the directory replaced */
    char *stage;  /* <parent>/.<name>.export-tmp: the new export is written here */
    char *aside;  /* <parent>/.<name>.export-old: the old one, on file systems without exchange */
    bool created; /* dir did not exist: created empty here, removed again on failure */
    mode_t mode;  /* dir's permissions, which the stage gets before it replaces dir */
} xdir;

/* An export cut short between the two renames of ck_replace_dir's fallback leaves the old
 * directory at its aside name and nothing at dir: it is put back first, never removed. */
static void restore_aside(const char *dir) {
    char p[CK_PATH_MAX], aside[CK_PATH_MAX];
    snprintf(p, sizeof p, "%s", dir);
    size_t n = strlen(p);
    while (n > 1 && p[n - 1] == '/') p[--n] = 0;
    const char *slash = strrchr(p, '/');
    const char *name = slash ? slash + 1 : p;
    if (!*name || strcmp(name, ".") == 0 || strcmp(name, "..") == 0) return;
    if (!ck_path(aside, sizeof aside, "%.*s.%s.export-old", (int)(name - p), p, name)) return;
    struct stat st;
    if (lstat(aside, &st) == 0 && S_ISDIR(st.st_mode) && rename(aside, p) == 0)
        sl_warn("%s: put back from %s, where an interrupted export had left it", p, aside);
}

static void xdir_free(xdir *x) {
    free(x->final);
    free(x->stage);
    free(x->aside);
}

/* Resolves dir (created when missing) and makes an empty stage beside it. */
static int xdir_open(xdir *x, const char *dir, char *err, size_t errlen) {
    struct stat st, up;
    if (stat(dir, &st) != 0) restore_aside(dir);
    x->created = stat(dir, &st) != 0;
    if (!x->created && !S_ISDIR(st.st_mode))
        return sl_fail(err, errlen, "%s: not a directory", dir);
    if (x->created && sl_mkdirs(dir, err, errlen) != 0) return -1;
    x->final = realpath(dir, NULL);
    if (!x->final || stat(x->final, &st) != 0)
        return sl_fail(err, errlen, "%s: %s", dir, strerror(errno));
    x->mode = st.st_mode & 07777;
    const char *slash = strrchr(x->final, '/');
    const size_t n = strlen(x->final) + 32;
    if (n > CK_PATH_MAX - 300)
        return sl_fail(err, errlen, "export: output directory path too long: %s", x->final);
    x->stage = sl_xmalloc(n);
    x->aside = sl_xmalloc(n);
    const int pl = (int)(slash - x->final);
    snprintf(x->stage, n, "%.*s/.%s.export-tmp", pl, x->final, slash + 1);
    snprintf(x->aside, n, "%.*s/.%s.export-old", pl, x->final, slash + 1);
    /* a mount point (or /) cannot be renamed, and the stage beside it would be written on
     * another file system: refused before anything is written */
    char parent[CK_PATH_MAX];
    snprintf(parent, sizeof parent, "%.*s", pl > 0 ? pl : 1, x->final);
    if (!slash[1] || stat(parent, &up) != 0 || up.st_dev != st.st_dev)
        return sl_fail(err, errlen,
                       "%s: a mount point: an export replaces its directory in one rename, which a "
                       "mount point cannot be; export into a directory inside it",
                       dir);
    /* leftovers of an interrupted export: dir exists, so they are not its only copy */
    ck_rmtree(x->stage);
    ck_rmtree(x->aside);
    if (mkdir(x->stage, 0700) != 0)
        return sl_fail(err, errlen, "%s: cannot create: %s", x->stage, strerror(errno));
    return 0;
}

/* After a failure: the stage removed, dir as it was. */
static void xdir_discard(const xdir *x) {
    if (x->stage) ck_rmtree(x->stage);
    if (x->created && x->final) rmdir(x->final);
}

/* A copy of a file or symlink where the file system has no hard links. */
static int copy_entry(const char *src, const char *dst, const struct stat *st, char *err,
                      size_t errlen) {
    if (S_ISLNK(st->st_mode)) {
        char target[CK_PATH_MAX];
        const ssize_t n = readlink(src, target, sizeof target - 1);
        if (n < 0) return sl_fail(err, errlen, "%s: %s", src, strerror(errno));
        target[n] = 0;
        if (symlink(target, dst) != 0) return sl_fail(err, errlen, "%s: %s", dst, strerror(errno));
        return 0;
    }
    if (!S_ISREG(st->st_mode))
        return sl_fail(err, errlen, "%s: neither a file, a symlink nor a directory: not kept", src);
    const int in = open(src, O_RDONLY | O_CLOEXEC);
    const int out = in < 0 ? -1 : open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    int rc = in < 0 || out < 0 ? -1 : 0;
    char *buf = sl_xmalloc(CK_EXPORT_CHUNK);
    for (ssize_t n; rc == 0 && (n = read(in, buf, CK_EXPORT_CHUNK)) != 0;)
        rc = n < 0 ? -1 : sl_write_all(out, buf, (size_t)n);
    if (rc == 0 && (fchmod(out, st->st_mode & 07777) != 0 || fsync(out) != 0)) rc = -1;
    if (rc != 0) sl_fail(err, errlen, "copying %s to %s: %s", src, dst, strerror(errno));
    free(buf);
    if (in >= 0) close(in);
    if (out >= 0 && close(out) != 0 && rc == 0)
        rc = sl_fail(err, errlen, "%s: %s", dst, strerror(errno));
    return rc;
}

/* src (a file, a symlink or a directory tree) at dst without copying data: hard links (a copy
 * where the file system has none; symlinks are linked, never followed); directories created
 * and synced. */
static int carry_tree(const char *src, const char *dst, char *err, size_t errlen) {
    struct stat st;
    if (lstat(src, &st) != 0) return sl_fail(err, errlen, "%s: %s", src, strerror(errno));
    if (!S_ISDIR(st.st_mode)) {
        if (linkat(AT_FDCWD, src, AT_FDCWD, dst, 0) == 0) return 0;
        if (errno != EPERM && errno != EXDEV && errno != EMLINK && errno != ENOTSUP)
            return sl_fail(err, errlen, "linking %s to %s: %s", src, dst, strerror(errno));
        return copy_entry(src, dst, &st, err, errlen);
    }
    if (mkdir(dst, 0700) != 0) return sl_fail(err, errlen, "%s: %s", dst, strerror(errno));
    DIR *d = opendir(src);
    if (!d) return sl_fail(err, errlen, "%s: cannot list: %s", src, strerror(errno));
    int rc = 0;
    const size_t na = strlen(src) + 258, nb = strlen(dst) + 258; /* + "/", a name, NUL */
    char *a = sl_xmalloc(na), *b = sl_xmalloc(nb);
    for (struct dirent *e; rc == 0 && (e = readdir(d)) != NULL;) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        snprintf(a, na, "%s/%s", src, e->d_name);
        snprintf(b, nb, "%s/%s", dst, e->d_name);
        rc = carry_tree(a, b, err, errlen);
    }
    free(a);
    free(b);
    closedir(d);
    if (rc == 0 && (chmod(dst, st.st_mode & 07777) != 0 || sl_fsync_dir(dst) != 0))
        rc = sl_fail(err, errlen, "%s: %s", dst, strerror(errno));
    return rc;
}

/* What dir holds beside the export (a README, a .git directory, an earlier export's tokenizer
 * files the new one does not write) into the stage, as an export in place kept them. */
static int carry_over(const xdir *x, char *err, size_t errlen) {
    DIR *d = opendir(x->final);
    if (!d) return sl_fail(err, errlen, "%s: cannot list: %s", x->final, strerror(errno));
    int rc = 0;
    char from[CK_PATH_MAX], to[CK_PATH_MAX];
    struct stat st;
    for (struct dirent *e; rc == 0 && (e = readdir(d)) != NULL;) {
        const char *s = e->d_name;
        /* an earlier export's weights are not kept: a different shard count would leave files
         * that the new index does not name */
        if (strcmp(s, ".") == 0 || strcmp(s, "..") == 0 || sl_st_hf_weights_file(s)) continue;
        if (!ck_path(from, sizeof from, "%s/%s", x->final, s) ||
            !ck_path(to, sizeof to, "%s/%s", x->stage, s)) {
            rc = sl_fail(err, errlen, "%s/%s: path too long", x->final, s);
            break;
        }
        if (lstat(to, &st) == 0) continue; /* the new export writes it */
        rc = carry_tree(from, to, err, errlen);
    }
    closedir(d);
    return rc;
}

/* The written shards read back (their headers against what was declared): dir is replaced by
 * a complete export only. */
static int verify_shards(const char *dir, const xentry *xs, int nx, int nshards, char *err,
                         size_t errlen) {
    char file[64], path[CK_PATH_MAX];
    for (int s = 0; s < nshards; s++) {
        sl_st_hf_shard_name(file, sizeof file, s, nshards);
        ck_path(path, sizeof path, "%s/%s", dir, file);
        sl_st_file *f = sl_st_open(path, err, errlen);
        if (!f) return -1;
        int want = 0, rc = 0;
        for (int i = 0; i < nx && rc == 0; i++) {
            if (xs[i].shard != s) continue;
            want++;
            const int j = sl_st_find(f, xs[i].e.name);
            if (j < 0 || sl_st_nbytes(f, j) != xs[i].bytes)
                rc = sl_fail(err, errlen, "%s: read back, tensor '%s' is %s", path, xs[i].e.name,
                             j < 0 ? "missing" : "not of the size written");
        }
        if (rc == 0 && sl_st_count(f) != want)
            rc = sl_fail(err, errlen, "%s: read back, %d tensors where %d were written", path,
                         sl_st_count(f), want);
        sl_st_close(f);
        if (rc != 0) return -1;
    }
    return 0;
}

static int write_shard(sl_ckpt *c, const char *path, xentry *xs, int nx, int shard,
                       unsigned char *sbuf, unsigned char *dbuf, char *err, size_t errlen) {
    sl_st_writer *w = sl_st_writer_open(path, err, errlen);
    if (!w) return -1;
    sl_st_writer_set_metadata(w, "format", "pt");
    sl_st_writer_set_metadata(w, "producer", "sluice");
    for (int i = 0; i < nx; i++)
        if (xs[i].shard == shard)
            sl_st_writer_declare(w, xs[i].e.name, xs[i].dst_dtype, xs[i].e.ndim, xs[i].e.shape);
    for (int i = 0; i < nx && !sl_st_writer_error(w); i++) {
        xentry *x = &xs[i];
        if (x->shard != shard) continue;
        sl_ckpt_tensor t;
        sl_ckpt_tensor_at(c, x->tensor, &t);
        if (x->e.pieces || x->e.xform) { /* assembled or transformed: through floats */
            float_reader fr = {c, t.name, x->src_dtype, x->src_es, sbuf};
            float *fbuf = sl_xmalloc(CK_EXPORT_CHUNK);
            const int64_t step = (int64_t)(CK_EXPORT_CHUNK / sizeof(float));
            const xentry as_f32 = {.src_dtype = "F32", .dst_dtype = x->dst_dtype, .src_es = 4};
            int frc = 0;
            for (int64_t k = 0; k < x->numel && frc == 0; k += step) {
                const int64_t m = x->numel - k < step ? x->numel - k : step;
                frc = sl_ckpt_export_assemble(&x->e, k, m, fbuf, read_floats, &fr, err, errlen);
                if (frc == 0) {
                    if (strcmp(x->dst_dtype, "F32") == 0)
                        memcpy(dbuf, fbuf, (size_t)m * sizeof(float));
                    else
                        convert(&as_f32, (const unsigned char *)fbuf, dbuf, (size_t)m);
                    frc = sl_st_writer_write_chunk(w, dbuf, (size_t)m * x->dst_es);
                }
            }
            free(fbuf);
            if (frc != 0 && !sl_st_writer_error(w)) {
                sl_st_writer_abort(w);
                return -1;
            }
            continue;
        }
        const int64_t step = (int64_t)(CK_EXPORT_CHUNK / x->src_es);
        for (int64_t k = 0; k < x->numel; k += step) {
            int64_t m = x->numel - k < step ? x->numel - k : step;
            if (sl_ckpt_read(c, t.name, x->e.offset + k, x->e.offset + k + m, sbuf, err, errlen) !=
                0) {
                sl_st_writer_abort(w);
                return -1;
            }
            convert(x, sbuf, dbuf, (size_t)m);
            if (sl_st_writer_write_chunk(w, dbuf, (size_t)m * x->dst_es) != 0) break;
        }
    }
    return sl_st_writer_close(w, err, errlen);
}

int sl_ckpt_export_hf(sl_ckpt *c, const char *dir, const sl_ckpt_export_opts *o, char *err,
                      size_t errlen) {
    const char *want = NULL;
    if (o->dtype) {
        want = sl_st_dtype_lookup(o->dtype, NULL);
        if (!want || (strcmp(want, "F32") != 0 && strcmp(want, "BF16") != 0))
            return sl_fail(err, errlen, "export: dtype '%s': F32 or BF16 expected", o->dtype);
    }
    if (!dir || strlen(dir) > CK_PATH_MAX - 300)
        return sl_fail(err, errlen, "export: output directory path too long or missing");
    const uint64_t max_shard = o->max_shard_bytes ? o->max_shard_bytes : CK_DEFAULT_SHARD;
    xdir out = {0};
    const int nt = sl_ckpt_tensor_count(c);
    xentry *xs = NULL;
    int nx = 0, cap = 0;
    enum { MAXE = 4096 };
    sl_ckpt_export_entry *tmp = sl_xmalloc(sizeof *tmp * MAXE);
    int rc = -1;
    for (int i = 0; i < nt; i++) {
        sl_ckpt_tensor t;
        sl_ckpt_tensor_at(c, i, &t);
        if (o->skip_prefix && *o->skip_prefix &&
            strncmp(t.name, o->skip_prefix, strlen(o->skip_prefix)) == 0)
            continue;
        int k;
        if (o->map) {
            k = o->map(o->map_user, &t, tmp, MAXE, err, errlen);
            if (k < 0) goto done;
            if (k > MAXE) {
                sl_fail(err, errlen, "export: tensor '%s' maps to more than %d tensors", t.name,
                        MAXE);
                goto done;
            }
        } else {
            memset(&tmp[0], 0, sizeof tmp[0]);
            if (strlen(t.name) >= sizeof tmp[0].name) {
                sl_fail(err, errlen, "export: tensor name '%.64s...' is too long", t.name);
                goto done;
            }
            snprintf(tmp[0].name, sizeof tmp[0].name, "%s", t.name);
            tmp[0].ndim = t.ndim;
            memcpy(tmp[0].shape, t.shape, sizeof t.shape);
            k = 1;
        }
        for (int j = 0; j < k; j++) {
            if (nx == cap) {
                cap = cap ? 2 * cap : 256;
                xs = sl_xrealloc(xs, sizeof *xs * (size_t)cap);
            }
            xentry *x = &xs[nx++];
            memset(x, 0, sizeof *x);
            x->e = tmp[j];
            x->e.name[sizeof x->e.name - 1] = 0;
            x->tensor = i;
            x->src_dtype = t.dtype;
            x->src_es = t.elem_size;
            x->dst_dtype = want && is_float(t.dtype) ? want : t.dtype;
            sl_st_dtype_lookup(x->dst_dtype, &x->dst_es);
            uint64_t n = 1;
            bool ok = sl_ckpt_export_entry_valid(&x->e, t.numel) &&
                      sl_st_shape_numel(x->e.ndim, x->e.shape, &n);
            x->numel = (int64_t)n;
            if (x->e.pieces || x->e.xform) { /* written as floats: float tensors only */
                ok &= is_float(t.dtype);
                x->dst_dtype = want ? want : "F32";
                sl_st_dtype_lookup(x->dst_dtype, &x->dst_es);
            }
            if (!ok || !x->e.name[0]) {
                sl_fail(err, errlen,
                        "export: tensor '%s': mapped entry '%s' (offset %" PRId64
                        ") lies outside its %" PRId64 " elements",
                        t.name, x->e.name, x->e.offset, t.numel);
                goto done;
            }
            x->bytes = (uint64_t)x->numel * x->dst_es;
        }
    }
    if (nx > 1) qsort(xs, (size_t)nx, sizeof *xs, cmp_xentry);
    for (int i = 1; i < nx; i++)
        if (strcmp(xs[i - 1].e.name, xs[i].e.name) == 0) {
            sl_fail(err, errlen, "export: two tensors would be named '%s'", xs[i].e.name);
            goto done;
        }
    int nshards = 0;
    uint64_t cur = 0, total = 0;
    for (int i = 0; i < nx; i++) {
        if (nshards == 0 || (cur > 0 && cur + xs[i].bytes > max_shard)) nshards++, cur = 0;
        xs[i].shard = nshards - 1;
        cur += xs[i].bytes;
        total += xs[i].bytes;
    }
    if (nshards == 0) nshards = 1; /* no tensors: one empty file */
    if (xdir_open(&out, dir, err, errlen) != 0) goto done;
    const char *sd = out.stage; /* everything is written here, then exchanged for dir */
    if (o->extra_files && o->extra_files(o->extra_user, sd, err, errlen) != 0) goto done;
    unsigned char *sbuf = sl_xmalloc(CK_EXPORT_CHUNK), *dbuf = sl_xmalloc(CK_EXPORT_CHUNK * 2);
    char file[64], path[CK_PATH_MAX];
    int wrc = 0;
    for (int s = 0; s < nshards && wrc == 0; s++) {
        sl_st_hf_shard_name(file, sizeof file, s, nshards);
        ck_path(path, sizeof path, "%s/%s", sd, file);
        wrc = write_shard(c, path, xs, nx, s, sbuf, dbuf, err, errlen);
    }
    free(sbuf);
    free(dbuf);
    if (wrc != 0) goto done;
    cJSON *root = cJSON_CreateObject();
    cJSON *meta = cJSON_AddObjectToObject(root, "metadata");
    cJSON_AddNumberToObject(meta, "total_size", (double)total);
    cJSON *map = cJSON_AddObjectToObject(root, "weight_map");
    for (int i = 0; i < nx; i++) {
        sl_st_hf_shard_name(file, sizeof file, xs[i].shard, nshards);
        cJSON_AddStringToObject(map, xs[i].e.name, file);
    }
    char *json = cJSON_Print(root);
    cJSON_Delete(root);
    ck_path(path, sizeof path, "%s/" SL_ST_HF_INDEX, sd);
    wrc = sl_write_file_atomic(path, json, strlen(json), err, errlen);
    cJSON_free(json);
    if (wrc != 0) goto done;
    if (o->config_json) {
        ck_path(path, sizeof path, "%s/config.json", sd);
        if (sl_write_file_atomic(path, o->config_json, strlen(o->config_json), err, errlen) != 0)
            goto done;
    }
    if (verify_shards(sd, xs, nx, nshards, err, errlen) != 0 || carry_over(&out, err, errlen) != 0)
        goto done;
    if (chmod(sd, out.mode) != 0 || sl_fsync_dir(sd) != 0) {
        sl_fail(err, errlen, "%s: %s", sd, strerror(errno));
        goto done;
    }
    if (ck_replace_dir(out.final, sd, out.aside, "export", err, errlen) != 0) goto done;
    rc = nx;
done:
    if (rc < 0) xdir_discard(&out);
    xdir_free(&out);
    free(tmp);
    free(xs);
    return rc;
}
