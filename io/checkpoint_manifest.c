/*
 * io/checkpoint_manifest.c - the checkpoint's JSON files (rank manifests, the COMMIT index,
 * train_state.json) parsed and checked against their schema, and the names and paths they use
 * (see checkpoint_internal.h and docs/checkpoint-format.md). Printing them:
 * io/checkpoint_print.c; the coverage index over every rank's pieces: io/checkpoint_index.c.
 *
 * Like its two siblings, this file depends only on cJSON, core/log.c and the safetensors dtype
 * table, so that the fuzz harness (tests/fuzz/fuzz_ckpt.c) builds the three on their own.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "io/checkpoint_internal.h"
#include "io/safetensors_internal.h"

void ck_data_name(char *buf, size_t n, int rank) {
    snprintf(buf, n, "rank-%05d.safetensors", rank);
}

void ck_manifest_name(char *buf, size_t n, int rank) {
    snprintf(buf, n, "rank-%05d.manifest.json", rank);
}

bool ck_plain_name(const char *s) {
    if (!s || !*s || strcmp(s, ".") == 0 || strcmp(s, "..") == 0) return false;
    if (strlen(s) > 255) return false;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if (*p == '/' || *p < 0x20 || *p == 0x7f) return false;
    return true;
}

bool ck_path(char *buf, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(buf, n, fmt, ap);
    va_end(ap);
    if (k < 0 || (size_t)k >= n) {
        if (n) buf[0] = 0;
        return false;
    }
    return true;
}

const char *ck_fmt_shape(char *buf, size_t n, int ndim, const int64_t *shape) {
    return sl_st_fmt_shape(buf, n, ndim, shape);
}

/* ---- parsing helpers ---- */

typedef struct {
    const char *name; /* file name */
    char *err;
    size_t errlen;
} pctx;

static int perr(const pctx *p, const char *fmt, ...) SL_PRINTF(2, 3);
static int perr(const pctx *p, const char *fmt, ...) {
    if (!p->err || !p->errlen) return -1;
    int k = snprintf(p->err, p->errlen, "%s: ", p->name);
    if (k < 0 || (size_t)k >= p->errlen) return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->err + k, p->errlen - (size_t)k, fmt, ap);
    va_end(ap);
    return -1;
}

/* Parses the whole buffer as one JSON value (only whitespace may follow). */
static cJSON *parse_json(const pctx *p, const char *json, size_t len) {
    if (!json) return perr(p, "no data"), NULL;
    if (len > CK_MAX_JSON_BYTES) return perr(p, "%zu bytes is too large", len), NULL;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(json, len, &end, 0);
    if (!root) {
        size_t at = end && end >= json && end <= json + len ? (size_t)(end - json) : 0;
        perr(p, "not valid JSON (at byte %zu)", at);
        return NULL;
    }
    for (const char *q = end; q < json + len; q++)
        if (*q != ' ' && *q != '\t' && *q != '\n' && *q != '\r') {
            cJSON_Delete(root);
            perr(p, "trailing data after the JSON value at byte %zu", (size_t)(q - json));
            return NULL;
        }
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        perr(p, "not a JSON object");
        return NULL;
    }
    return root;
}

/* An integer in [lo, hi] at key `key` of obj (path names it in messages). */
static int get_int(const pctx *p, const cJSON *obj, const char *key, const char *path, int64_t lo,
                   int64_t hi, int64_t *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v) return perr(p, "%s%s: missing", path, key);
    if (!cJSON_IsNumber(v)) return perr(p, "%s%s: not a number", path, key);
    double d = v->valuedouble;
    /* the comparisons are false for NaN, so NaN is refused too */
    if (!(d >= (double)lo && d <= (double)hi) || d != (double)(int64_t)d)
        return perr(p, "%s%s: %.17g is not an integer in [%" PRId64 ", %" PRId64 "]", path, key, d,
                    lo, hi);
    *out = (int64_t)d;
    return 0;
}

static const char *get_str(const pctx *p, const cJSON *obj, const char *key, const char *path) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v) return perr(p, "%s%s: missing", path, key), NULL;
    if (!cJSON_IsString(v) || !v->valuestring)
        return perr(p, "%s%s: not a string", path, key), NULL;
    return v->valuestring;
}

static int check_format(const pctx *p, const cJSON *root, const char *want, int *version) {
    const char *f = get_str(p, root, "format", "");
    if (!f) return -1;
    if (strcmp(f, want) != 0) return perr(p, "format: \"%.64s\", expected \"%s\"", f, want);
    int64_t v;
    if (get_int(p, root, "format_version", "", 1, CK_INT_MAX, &v)) return -1;
    if (v > SL_CKPT_FORMAT_VERSION)
        return perr(p,
                    "format_version %" PRId64 " was written by a newer sluice (this one reads "
                    "versions up to %d)",
                    v, SL_CKPT_FORMAT_VERSION);
    *version = (int)v;
    return 0;
}

static const cJSON *get_array(const pctx *p, const cJSON *obj, const char *key) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!a) return perr(p, "%s: missing", key), NULL;
    if (!cJSON_IsArray(a)) return perr(p, "%s: not an array", key), NULL;
    return a;
}

/* ---- manifest ---- */

void ck_manifest_free(ck_manifest *m) {
    if (!m) return;
    for (int i = 0; i < m->nfiles; i++) free(m->files[i].name);
    for (int i = 0; i < m->npieces; i++) free(m->pieces[i].tensor), free(m->pieces[i].file);
    free(m->files);
    free(m->pieces);
    memset(m, 0, sizeof *m);
}

static int parse_piece(const pctx *p, const cJSON *j, int i, ck_manifest *m, ck_piece *pc) {
    char path[64];
    snprintf(path, sizeof path, "pieces[%d].", i);
    if (!cJSON_IsObject(j)) return perr(p, "pieces[%d]: not an object", i);
    const char *t = get_str(p, j, "tensor", path);
    if (!t) return -1;
    if (!*t) return perr(p, "%stensor: empty name", path);
    if (sl_st_utf8_invalid_at((const unsigned char *)t, strlen(t)) >= 0)
        return perr(p, "%stensor: not valid UTF-8", path);
    pc->tensor = sl_xstrdup(t);
    const char *dt = get_str(p, j, "dtype", path);
    if (!dt) return -1;
    pc->dtype = sl_st_dtype_lookup(dt, &pc->esize);
    if (!pc->dtype) return perr(p, "%sdtype: unknown dtype \"%.32s\" (tensor '%s')", path, dt, t);
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(j, "shape");
    if (!sh || !cJSON_IsArray(sh)) return perr(p, "%sshape: missing or not an array", path);
    int nd = cJSON_GetArraySize(sh);
    if (nd > SL_CKPT_MAX_DIMS)
        return perr(p, "%sshape: %d dimensions, at most %d (tensor '%s')", path, nd,
                    SL_CKPT_MAX_DIMS, t);
    pc->ndim = nd;
    int d = 0;
    for (const cJSON *x = sh->child; x; x = x->next, d++) {
        double v = cJSON_IsNumber(x) ? x->valuedouble : -1;
        if (!(v >= 0 && v <= (double)CK_INT_MAX) || v != (double)(int64_t)v)
            return perr(p, "%sshape[%d]: not a non-negative integer (tensor '%s')", path, d, t);
        pc->shape[d] = (int64_t)v;
    }
    uint64_t numel;
    if (!sl_st_shape_numel(nd, pc->shape, &numel) || numel > (uint64_t)CK_INT_MAX / pc->esize) {
        char sb[160];
        return perr(p, "%sshape: %s of %s is too large (tensor '%s')", path,
                    ck_fmt_shape(sb, sizeof sb, nd, pc->shape), pc->dtype, t);
    }
    pc->numel = (int64_t)numel;
    if (get_int(p, j, "begin", path, 0, pc->numel, &pc->begin) ||
        get_int(p, j, "end", path, 0, pc->numel, &pc->end))
        return -1;
    if (pc->end < pc->begin || (pc->end == pc->begin && pc->numel > 0))
        return perr(p, "%s: range [%" PRId64 ", %" PRId64 ") of tensor '%s' is empty or reversed",
                    path, pc->begin, pc->end, t);
    const char *f = get_str(p, j, "file", path);
    if (!f) return -1;
    int fi = -1;
    for (int k = 0; k < m->nfiles; k++)
        if (strcmp(m->files[k].name, f) == 0) fi = k;
    if (fi < 0) return perr(p, "%sfile: \"%.64s\" is not in \"files\" (tensor '%s')", path, f, t);
    pc->file = sl_xstrdup(f);
    int64_t off, crc;
    if (get_int(p, j, "offset", path, 0, CK_INT_MAX, &off) ||
        get_int(p, j, "crc32c", path, 0, UINT32_MAX, &crc))
        return -1;
    pc->offset = (uint64_t)off;
    pc->crc32c = (uint32_t)crc;
    uint64_t nbytes = (uint64_t)(pc->end - pc->begin) * pc->esize;
    if (pc->offset > m->files[fi].bytes || nbytes > m->files[fi].bytes - pc->offset)
        return perr(p,
                    "%s: tensor '%s' [%" PRId64 ", %" PRId64 "): bytes [%" PRIu64 ", %" PRIu64
                    ") lie outside %s (%" PRIu64 " bytes)",
                    path, t, pc->begin, pc->end, pc->offset, pc->offset + nbytes, f,
                    m->files[fi].bytes);
    return 0;
}

int ck_manifest_parse(const char *json, size_t len, const char *name, ck_manifest *m, char *err,
                      size_t errlen) {
    memset(m, 0, sizeof *m);
    pctx p = {name, err, errlen};
    cJSON *root = parse_json(&p, json, len);
    if (!root) return -1;
    int rc = -1;
    int64_t v;
    if (check_format(&p, root, CK_MANIFEST_FORMAT, &m->format_version)) goto done;
    if (get_int(&p, root, "step", "", 0, CK_INT_MAX, &m->step)) goto done;
    if (get_int(&p, root, "world_size", "", 1, CK_MAX_RANKS, &v)) goto done;
    m->world_size = (int)v;
    if (get_int(&p, root, "rank", "", 0, m->world_size - 1, &v)) goto done;
    m->rank = (int)v;
    const cJSON *files = get_array(&p, root, "files");
    if (!files) goto done;
    int nf = cJSON_GetArraySize(files);
    m->files = sl_xcalloc((size_t)(nf ? nf : 1), sizeof *m->files);
    for (const cJSON *f = files->child; f; f = f->next) {
        char path[48];
        snprintf(path, sizeof path, "files[%d].", m->nfiles);
        if (!cJSON_IsObject(f)) {
            perr(&p, "files[%d]: not an object", m->nfiles);
            goto done;
        }
        const char *fn = get_str(&p, f, "file", path);
        if (!fn) goto done;
        if (!ck_plain_name(fn)) {
            perr(&p, "%sfile: \"%.64s\" is not a plain file name", path, fn);
            goto done;
        }
        for (int k = 0; k < m->nfiles; k++)
            if (strcmp(m->files[k].name, fn) == 0) {
                perr(&p, "%sfile: \"%s\" listed twice", path, fn);
                goto done;
            }
        if (get_int(&p, f, "bytes", path, 0, CK_INT_MAX, &v)) goto done;
        m->files[m->nfiles].name = sl_xstrdup(fn);
        m->files[m->nfiles].bytes = (uint64_t)v;
        m->nfiles++;
    }
    const cJSON *pieces = get_array(&p, root, "pieces");
    if (!pieces) goto done;
    int np = cJSON_GetArraySize(pieces);
    m->pieces = sl_xcalloc((size_t)(np ? np : 1), sizeof *m->pieces);
    for (const cJSON *j = pieces->child; j; j = j->next) {
        /* counted before parsing so that a partly filled piece is freed with the rest */
        ck_piece *pc = &m->pieces[m->npieces++];
        if (parse_piece(&p, j, m->npieces - 1, m, pc)) goto done;
    }
    rc = 0;
done:
    cJSON_Delete(root);
    if (rc) ck_manifest_free(m);
    return rc;
}

/* ---- COMMIT ---- */

void ck_commit_free(ck_commit *c) {
    if (!c) return;
    free(c->state.file);
    if (c->manifests)
        for (int i = 0; i < c->world_size; i++) free(c->manifests[i].file);
    free(c->manifests);
    memset(c, 0, sizeof *c);
}

static int parse_indexed(const pctx *p, const cJSON *j, const char *path, ck_indexed *x) {
    if (!cJSON_IsObject(j)) return perr(p, "%s: not an object", path);
    char pre[64];
    snprintf(pre, sizeof pre, "%s.", path);
    const char *f = get_str(p, j, "file", pre);
    if (!f) return -1;
    if (!ck_plain_name(f)) return perr(p, "%sfile: \"%.64s\" is not a plain file name", pre, f);
    int64_t b, c;
    if (get_int(p, j, "bytes", pre, 0, CK_INT_MAX, &b) ||
        get_int(p, j, "crc32c", pre, 0, UINT32_MAX, &c))
        return -1;
    x->file = sl_xstrdup(f);
    x->bytes = (uint64_t)b;
    x->crc32c = (uint32_t)c;
    return 0;
}

int ck_commit_parse(const char *json, size_t len, const char *name, ck_commit *c, char *err,
                    size_t errlen) {
    memset(c, 0, sizeof *c);
    pctx p = {name, err, errlen};
    cJSON *root = parse_json(&p, json, len);
    if (!root) return -1;
    int rc = -1;
    int64_t v;
    if (check_format(&p, root, CK_FORMAT_NAME, &c->format_version)) goto done;
    if (get_int(&p, root, "step", "", 0, CK_INT_MAX, &c->step)) goto done;
    if (get_int(&p, root, "world_size", "", 1, CK_MAX_RANKS, &v)) goto done;
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(root, "train_state");
    if (!st) {
        perr(&p, "train_state: missing");
        goto done;
    }
    if (parse_indexed(&p, st, "train_state", &c->state)) goto done;
    c->state.rank = -1;
    const cJSON *ms = get_array(&p, root, "manifests");
    if (!ms) goto done;
    if (cJSON_GetArraySize(ms) != v) {
        perr(&p, "manifests: %d entries for world_size %d", cJSON_GetArraySize(ms), (int)v);
        goto done;
    }
    /* set only now: ck_commit_free walks world_size entries */
    c->manifests = sl_xcalloc((size_t)v, sizeof *c->manifests);
    c->world_size = (int)v;
    int i = 0;
    for (const cJSON *j = ms->child; j; j = j->next, i++) {
        char path[48];
        snprintf(path, sizeof path, "manifests[%d]", i);
        if (parse_indexed(&p, j, path, &c->manifests[i])) goto done;
        int64_t r;
        snprintf(path, sizeof path, "manifests[%d].", i);
        if (get_int(&p, j, "rank", path, 0, CK_MAX_RANKS, &r)) goto done;
        if (r != i) {
            perr(&p, "manifests[%d].rank: %d, expected %d (ranks in order)", i, (int)r, i);
            goto done;
        }
        c->manifests[i].rank = i;
        for (int k = 0; k < i; k++)
            if (strcmp(c->manifests[k].file, c->manifests[i].file) == 0) {
                perr(&p, "manifests[%d].file: \"%s\" listed twice", i, c->manifests[i].file);
                goto done;
            }
    }
    rc = 0;
done:
    cJSON_Delete(root);
    if (rc) ck_commit_free(c);
    return rc;
}

/* ---- train_state.json ---- */

void ck_state_free(ck_state *s) {
    if (!s) return;
    cJSON_Delete(s->trainer);
    memset(s, 0, sizeof *s);
}

int ck_state_parse(const char *json, size_t len, const char *name, ck_state *s, char *err,
                   size_t errlen) {
    memset(s, 0, sizeof *s);
    pctx p = {name, err, errlen};
    cJSON *root = parse_json(&p, json, len);
    if (!root) return -1;
    int rc = -1;
    int64_t v;
    if (check_format(&p, root, CK_FORMAT_NAME, &s->format_version)) goto done;
    if (get_int(&p, root, "step", "", 0, CK_INT_MAX, &s->step)) goto done;
    if (get_int(&p, root, "world_size", "", 1, CK_MAX_RANKS, &v)) goto done;
    s->world_size = (int)v;
    const char *ver = get_str(&p, root, "sluice_version", "");
    if (!ver) goto done;
    if (strlen(ver) >= sizeof s->sluice_version) {
        perr(&p, "sluice_version: longer than %zu characters", sizeof s->sluice_version - 1);
        goto done;
    }
    snprintf(s->sluice_version, sizeof s->sluice_version, "%s", ver);
    cJSON *t = cJSON_DetachItemFromObjectCaseSensitive(root, "trainer");
    if (t && !cJSON_IsObject(t)) {
        cJSON_Delete(t);
        perr(&p, "trainer: not an object");
        goto done;
    }
    s->trainer = t ? t : cJSON_CreateObject();
    rc = 0;
done:
    cJSON_Delete(root);
    if (rc) ck_state_free(s);
    return rc;
}
