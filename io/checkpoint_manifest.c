/*
 * io/checkpoint_manifest.c - the checkpoint's JSON files (rank manifests, the COMMIT index,
 * train_state.json): parsing, printing, and the coverage index over every rank's pieces (see
 * checkpoint_internal.h and docs/checkpoint-format.md).
 *
 * This file depends only on cJSON, core/log.c and the safetensors dtype table, so that the fuzz
 * harness (tests/fuzz/fuzz_ckpt.c) builds it on its own.
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

static cJSON *shape_json(int ndim, const int64_t *shape) {
    cJSON *a = cJSON_CreateArray();
    for (int d = 0; d < ndim; d++) cJSON_AddItemToArray(a, cJSON_CreateNumber((double)shape[d]));
    return a;
}

/* Prints the tree with a trailing newline and frees it. */
static char *print_free(cJSON *root) {
    char *s = cJSON_Print(root);
    cJSON_Delete(root);
    if (!s) sl_fatal("checkpoint: out of memory printing JSON");
    size_t n = strlen(s);
    char *out = sl_xmalloc(n + 2);
    memcpy(out, s, n);
    out[n] = '\n';
    out[n + 1] = 0;
    cJSON_free(s);
    return out;
}

char *ck_manifest_print(const ck_manifest *m) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "format", CK_MANIFEST_FORMAT);
    cJSON_AddNumberToObject(root, "format_version", SL_CKPT_FORMAT_VERSION);
    cJSON_AddNumberToObject(root, "step", (double)m->step);
    cJSON_AddNumberToObject(root, "rank", m->rank);
    cJSON_AddNumberToObject(root, "world_size", m->world_size);
    cJSON *files = cJSON_AddArrayToObject(root, "files");
    for (int i = 0; i < m->nfiles; i++) {
        cJSON *f = cJSON_CreateObject();
        cJSON_AddStringToObject(f, "file", m->files[i].name);
        cJSON_AddNumberToObject(f, "bytes", (double)m->files[i].bytes);
        cJSON_AddItemToArray(files, f);
    }
    cJSON *pieces = cJSON_AddArrayToObject(root, "pieces");
    for (int i = 0; i < m->npieces; i++) {
        const ck_piece *pc = &m->pieces[i];
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "tensor", pc->tensor);
        cJSON_AddStringToObject(j, "dtype", pc->dtype);
        cJSON_AddItemToObject(j, "shape", shape_json(pc->ndim, pc->shape));
        cJSON_AddNumberToObject(j, "begin", (double)pc->begin);
        cJSON_AddNumberToObject(j, "end", (double)pc->end);
        cJSON_AddStringToObject(j, "file", pc->file);
        cJSON_AddNumberToObject(j, "offset", (double)pc->offset);
        cJSON_AddNumberToObject(j, "crc32c", (double)pc->crc32c);
        cJSON_AddItemToArray(pieces, j);
    }
    return print_free(root);
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

static cJSON *indexed_json(const ck_indexed *x, bool with_rank) {
    cJSON *j = cJSON_CreateObject();
    if (with_rank) cJSON_AddNumberToObject(j, "rank", x->rank);
    cJSON_AddStringToObject(j, "file", x->file);
    cJSON_AddNumberToObject(j, "bytes", (double)x->bytes);
    cJSON_AddNumberToObject(j, "crc32c", (double)x->crc32c);
    return j;
}

char *ck_commit_print(const ck_commit *c) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "format", CK_FORMAT_NAME);
    cJSON_AddNumberToObject(root, "format_version", SL_CKPT_FORMAT_VERSION);
    cJSON_AddNumberToObject(root, "step", (double)c->step);
    cJSON_AddNumberToObject(root, "world_size", c->world_size);
    cJSON_AddItemToObject(root, "train_state", indexed_json(&c->state, false));
    cJSON *ms = cJSON_AddArrayToObject(root, "manifests");
    for (int i = 0; i < c->world_size; i++)
        cJSON_AddItemToArray(ms, indexed_json(&c->manifests[i], true));
    return print_free(root);
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

char *ck_state_print(int64_t step, int world_size, const char *sluice_version,
                     const cJSON *trainer) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "format", CK_FORMAT_NAME);
    cJSON_AddNumberToObject(root, "format_version", SL_CKPT_FORMAT_VERSION);
    cJSON_AddStringToObject(root, "sluice_version", sluice_version);
    cJSON_AddNumberToObject(root, "step", (double)step);
    cJSON_AddNumberToObject(root, "world_size", world_size);
    cJSON *t = trainer ? cJSON_Duplicate(trainer, 1) : cJSON_CreateObject();
    if (!t) sl_fatal("checkpoint: out of memory copying the train state");
    cJSON_AddItemToObject(root, "trainer", t);
    return print_free(root);
}

/* ---- the coverage index ---- */

static int cmp_ref(const void *a, const void *b) {
    const ck_piece *x = ((const ck_ref *)a)->piece, *y = ((const ck_ref *)b)->piece;
    int c = strcmp(x->tensor, y->tensor);
    if (c) return c;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    /* a stable order for equal ranges (qsort is not stable): by origin */
    int ox = ((const ck_ref *)a)->origin, oy = ((const ck_ref *)b)->origin;
    return (ox > oy) - (ox < oy);
}

typedef struct {
    ck_report_fn report;
    void *user;
    const char *where;
    int problems;
} rctx;

static void rep(rctx *r, const char *fmt, ...) SL_PRINTF(2, 3);
static void rep(rctx *r, const char *fmt, ...) {
    char line[1024];
    int k = snprintf(line, sizeof line, "%s: ", r->where);
    va_list ap;
    va_start(ap, fmt);
    if (k >= 0 && (size_t)k < sizeof line) vsnprintf(line + k, sizeof line - (size_t)k, fmt, ap);
    va_end(ap);
    r->problems++;
    if (r->report) r->report(r->user, line);
}

/* " (index [a, b) of dimension 0)" when [lo, hi) is made of whole rows of the first dimension
 * (e.g. whole experts of an expert stack), else "". */
static const char *rows_note(char *buf, size_t n, const ck_piece *t, int64_t lo, int64_t hi) {
    buf[0] = 0;
    if (t->ndim < 2 || t->shape[0] <= 1 || t->numel == 0) return buf;
    int64_t row = t->numel / t->shape[0];
    if (row > 0 && lo % row == 0 && hi % row == 0)
        snprintf(buf, n, " (index [%" PRId64 ", %" PRId64 ") of dimension 0)", lo / row, hi / row);
    return buf;
}

int ck_index_build(const ck_manifest *manifests, int n, const char *const *origin_names,
                   const char *where, ck_report_fn report, void *user, ck_index *idx) {
    memset(idx, 0, sizeof *idx);
    rctx r = {report, user, where, 0};
    int total = 0;
    for (int i = 0; i < n; i++) total += manifests[i].npieces;
    idx->refs = sl_xmalloc(sizeof(ck_ref) * (size_t)(total ? total : 1));
    for (int i = 0; i < n; i++)
        for (int k = 0; k < manifests[i].npieces; k++)
            idx->refs[idx->nrefs++] = (ck_ref){&manifests[i].pieces[k], i};
    qsort(idx->refs, (size_t)idx->nrefs, sizeof(ck_ref), cmp_ref);
    idx->tensors = sl_xmalloc(sizeof(ck_tensor) * (size_t)(total ? total : 1));
    char sa[160], sb[160], note[96];
    for (int s = 0; s < idx->nrefs;) {
        int e = s + 1;
        while (e < idx->nrefs &&
               strcmp(idx->refs[e].piece->tensor, idx->refs[s].piece->tensor) == 0)
            e++;
        const ck_piece *t0 = idx->refs[s].piece;
        const char *o0 = origin_names[idx->refs[s].origin];
        ck_tensor *t = &idx->tensors[idx->ntensors++];
        t->name = t0->tensor;
        t->first = t0;
        t->start = s;
        t->count = e - s;
        bool consistent = true;
        for (int k = s + 1; k < e; k++) {
            const ck_piece *pk = idx->refs[k].piece;
            bool same = pk->dtype == t0->dtype && pk->ndim == t0->ndim;
            for (int d = 0; same && d < t0->ndim; d++) same = pk->shape[d] == t0->shape[d];
            if (!same) {
                rep(&r, "tensor '%s': %s has shape %s %s but %s has shape %s %s", t->name,
                    origin_names[idx->refs[k].origin],
                    ck_fmt_shape(sa, sizeof sa, pk->ndim, pk->shape), pk->dtype, o0,
                    ck_fmt_shape(sb, sizeof sb, t0->ndim, t0->shape), t0->dtype);
                consistent = false;
            }
        }
        if (consistent) {
            /* coverage: walk the pieces in begin order */
            int64_t pos = 0;
            int at = -1; /* the piece that reached pos */
            for (int k = s; k < e; k++) {
                const ck_piece *pk = idx->refs[k].piece;
                if (pk->begin > pos)
                    rep(&r,
                        "tensor '%s': elements [%" PRId64 ", %" PRId64 ")%s of %" PRId64
                        " are missing: no rank saved them",
                        t->name, pos, pk->begin, rows_note(note, sizeof note, t0, pos, pk->begin),
                        t0->numel);
                else if (k > s && (pk->begin < pos || (t0->numel == 0)))
                    rep(&r,
                        "tensor '%s': elements [%" PRId64 ", %" PRId64 ")%s are saved twice: by %s "
                        "and by %s",
                        t->name, pk->begin, pk->end < pos ? pk->end : pos,
                        rows_note(note, sizeof note, t0, pk->begin, pk->end < pos ? pk->end : pos),
                        origin_names[idx->refs[at].origin], origin_names[idx->refs[k].origin]);
                if (pk->end > pos || at < 0) pos = pk->end, at = k;
            }
            if (pos < t0->numel)
                rep(&r,
                    "tensor '%s': elements [%" PRId64 ", %" PRId64 ")%s of %" PRId64
                    " are missing: no rank saved them",
                    t->name, pos, t0->numel, rows_note(note, sizeof note, t0, pos, t0->numel),
                    t0->numel);
        }
        s = e;
    }
    return r.problems;
}

void ck_index_free(ck_index *idx) {
    if (!idx) return;
    free(idx->refs);
    free(idx->tensors);
    memset(idx, 0, sizeof *idx);
}

int ck_index_find(const ck_index *idx, const char *name) {
    int lo = 0, hi = idx->ntensors - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        int c = strcmp(idx->tensors[mid].name, name);
        if (c == 0) return mid;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return -1;
}
