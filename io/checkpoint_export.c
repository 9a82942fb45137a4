/*
 * io/checkpoint_export.c - a checkpoint's weights as a Hugging Face directory: sharded
 * safetensors files, model.safetensors.index.json and config.json (see checkpoint.h).
 *
 * Tensors are streamed from the checkpoint (8 MiB of source elements at a time) through the
 * dtype conversion into the output files, so memory does not depend on the model size.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

static void shard_name(char *buf, size_t n, int shard, int count) {
    if (count == 1)
        snprintf(buf, n, "model.safetensors");
    else
        snprintf(buf, n, "model-%05d-of-%05d.safetensors", shard + 1, count);
}

/* Removes the weights of an earlier export from dir (a different shard count would leave stale
 * files that the new index does not name). */
static int remove_old(const char *dir, char *err, size_t errlen) {
    DIR *d = opendir(dir);
    if (!d) return sl_fail(err, errlen, "%s: cannot list: %s", dir, strerror(errno));
    struct dirent *e;
    int rc = 0;
    while ((e = readdir(d)) != NULL) {
        const char *s = e->d_name;
        size_t n = strlen(s);
        bool weights =
            strncmp(s, "model", 5) == 0 && n > 12 && strcmp(s + n - 12, ".safetensors") == 0;
        if (!weights && strcmp(s, "model.safetensors.index.json") != 0) continue;
        char p[CK_PATH_MAX];
        ck_path(p, sizeof p, "%s/%s", dir, s);
        if (unlink(p) != 0 && rc == 0)
            rc = sl_fail(err, errlen, "%s: cannot remove: %s", p, strerror(errno));
    }
    closedir(d);
    return rc;
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
    if (sl_mkdirs(dir, err, errlen) != 0 || remove_old(dir, err, errlen) != 0) goto done;
    unsigned char *sbuf = sl_xmalloc(CK_EXPORT_CHUNK), *dbuf = sl_xmalloc(CK_EXPORT_CHUNK * 2);
    char file[64], path[CK_PATH_MAX];
    int wrc = 0;
    for (int s = 0; s < nshards && wrc == 0; s++) {
        shard_name(file, sizeof file, s, nshards);
        ck_path(path, sizeof path, "%s/%s", dir, file);
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
        shard_name(file, sizeof file, xs[i].shard, nshards);
        cJSON_AddStringToObject(map, xs[i].e.name, file);
    }
    char *json = cJSON_Print(root);
    cJSON_Delete(root);
    ck_path(path, sizeof path, "%s/model.safetensors.index.json", dir);
    wrc = sl_write_file_atomic(path, json, strlen(json), err, errlen);
    cJSON_free(json);
    if (wrc != 0) goto done;
    if (o->config_json) {
        ck_path(path, sizeof path, "%s/config.json", dir);
        if (sl_write_file_atomic(path, o->config_json, strlen(o->config_json), err, errlen) != 0)
            goto done;
    }
    rc = nx;
done:
    free(tmp);
    free(xs);
    return rc;
}
