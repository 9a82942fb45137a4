/*
 * io/checkpoint_load.c - finding, opening, validating, reading and verifying checkpoints (see
 * checkpoint.h and "Load validation" in docs/checkpoint-format.md).
 *
 * Opening reads only JSON (COMMIT, train_state.json, every rank's manifest) and stats the data
 * files; tensor data is read on demand with pread, piece by piece, so a rank reads the bytes of
 * the slices it asks for (plus, once per piece it touches, the rest of that piece for its
 * checksum) and never the whole model.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/fsutil.h"
#include "core/log.h"
#include "io/checkpoint.h"
#include "io/checkpoint_internal.h"
#include "io/crc32c.h"
#include "io/safetensors.h"

/* Bytes per read while checksumming a piece. */
#define CK_CHUNK ((size_t)8 << 20)
/* Data files kept open at once (a checkpoint of thousands of ranks would exceed the
 * descriptor limit): the least recently used one is closed beyond this. */
#define CK_MAX_OPEN 128

/* ---- finding ---- */

static bool is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static bool is_file(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* "step-<digits>" -> the step, else -1. */
static int64_t step_of(const char *s) {
    if (strncmp(s, "step-", 5) != 0 || s[5] < '0' || s[5] > '9') return -1;
    int64_t v = 0;
    for (const char *p = s + 5; *p; p++) {
        if (*p < '0' || *p > '9' || v > (CK_INT_MAX - 9) / 10) return -1;
        v = v * 10 + (*p - '0');
    }
    return v;
}

int64_t *ck_committed_steps(const char *ckdir, int *count) {
    *count = 0;
    DIR *d = opendir(ckdir);
    if (!d) return NULL;
    int64_t *v = NULL;
    int cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        int64_t st = step_of(e->d_name);
        if (st < 0) continue;
        char c[CK_PATH_MAX];
        ck_path(c, sizeof c, "%s/%s/" CK_COMMIT_FILE, ckdir, e->d_name);
        if (!is_file(c)) continue;
        if (*count == cap) {
            cap = cap ? 2 * cap : 16;
            v = sl_xrealloc(v, sizeof *v * (size_t)cap);
        }
        v[(*count)++] = st;
    }
    closedir(d);
    return v;
}

int sl_ckpt_find_latest(const char *root, char *dir, size_t dirlen, char *err, size_t errlen) {
    char ckdir[CK_PATH_MAX], p[CK_PATH_MAX];
    if (!root || strlen(root) > CK_PATH_MAX - 128)
        return sl_fail(err, errlen, "checkpoint: path too long or missing");
    ck_path(ckdir, sizeof ckdir, "%s/" CK_DIR_NAME, root);
    if (!is_dir(ckdir)) {
        /* root may be the checkpoints directory itself */
        ck_path(p, sizeof p, "%s/" CK_LATEST_FILE, root);
        const char *base = strrchr(root, '/');
        base = base ? base + 1 : root;
        if (!is_file(p) && strcmp(base, CK_DIR_NAME) != 0) return 0; /* a fresh start */
        ck_path(ckdir, sizeof ckdir, "%s", root);
        if (!is_dir(ckdir)) return 0;
    }
    ck_path(p, sizeof p, "%s/" CK_LATEST_FILE, ckdir);
    if (is_file(p)) {
        size_t len = 0;
        char e[1024];
        char *text = sl_read_file(p, &len, e, sizeof e);
        if (!text) return sl_fail(err, errlen, "%s", e);
        while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == ' ')) text[--len] = 0;
        int64_t st = strlen(text) == len ? step_of(text) : -1;
        if (st >= 0) {
            ck_path(p, sizeof p, "%s/%s/" CK_COMMIT_FILE, ckdir, text);
            if (is_file(p)) {
                bool fits = ck_path(dir, dirlen, "%s/%s", ckdir, text);
                free(text);
                return fits ? 1 : sl_fail(err, errlen, "%s: path too long", ckdir);
            }
            sl_warn("%s/" CK_LATEST_FILE " names %s, which is not a committed checkpoint; using "
                    "the newest committed one",
                    ckdir, text);
        } else {
            sl_warn("%s/" CK_LATEST_FILE ": not of the form step-<N>; using the newest committed "
                    "checkpoint",
                    ckdir);
        }
        free(text);
    }
    int n = 0;
    int64_t *steps = ck_committed_steps(ckdir, &n);
    if (!steps && n == 0 && !is_dir(ckdir))
        return sl_fail(err, errlen, "%s: cannot list: %s", ckdir, strerror(errno));
    int64_t best = -1;
    for (int i = 0; i < n; i++) best = steps[i] > best ? steps[i] : best;
    free(steps);
    if (best < 0) return 0;
    if (!ck_path(dir, dirlen, "%s/step-%" PRId64, ckdir, best))
        return sl_fail(err, errlen, "%s: path too long", ckdir);
    return 1;
}

/* ---- the handle ---- */

typedef struct {
    char *name, *path;
    uint64_t bytes;
    sl_st_file *st; /* open, or NULL */
    bool checked;   /* its safetensors header was checked against the manifests */
    bool absent;    /* missing or of the wrong size when opened (reported then) */
    char *bad;      /* the problem found then (reads from the file fail with it) */
    uint64_t last_use;
    int *refs; /* the pieces it holds: indices into idx.refs */
    int nrefs;
} dfile;

struct sl_ckpt {
    char *dir;
    ck_commit commit;
    ck_state state;
    ck_manifest *ms;
    char **mnames; /* "rank-00003.manifest.json", per manifest, for messages */
    int nms;
    ck_index idx;
    dfile *files;
    int nfiles;
    int *ref_file;       /* per ref: index into files */
    int *ref_st;         /* per ref: tensor index in the safetensors file (after the check) */
    bool *ref_verified;  /* per ref: its checksum was checked */
    uint64_t data_bytes; /* sum of the tensors' bytes */
    int open_files;
    uint64_t clock;
    unsigned char *scratch;
};

typedef struct {
    ck_report_fn report;
    void *user;
    int count;
} reporter;

static void problem(reporter *r, const char *fmt, ...) SL_PRINTF(2, 3);
static void problem(reporter *r, const char *fmt, ...) {
    char line[1536];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    r->count++;
    if (r->report) r->report(r->user, line);
}

static void forward(void *user, const char *line) {
    reporter *r = user;
    r->count++;
    if (r->report) r->report(r->user, line);
}

static char *join(const char *a, const char *b) {
    size_t n = strlen(a) + strlen(b) + 2;
    char *s = sl_xmalloc(n);
    snprintf(s, n, "%s/%s", a, b);
    return s;
}

/* Reads a JSON file the COMMIT index lists and checks its size and checksum. NULL after
 * reporting a problem. */
static char *read_indexed(const char *dir, const ck_indexed *x, size_t *len, reporter *r) {
    char *path = join(dir, x->file);
    char e[1024];
    char *text = sl_read_file(path, len, e, sizeof e);
    if (!text) {
        problem(r, "%s", e);
    } else if (*len != x->bytes || sl_crc32c(0, text, *len) != x->crc32c) {
        problem(r,
                "%s: %zu bytes with CRC-32C 0x%08x, but " CK_COMMIT_FILE " records %" PRIu64
                " bytes with 0x%08x: the file is damaged",
                path, *len, sl_crc32c(0, text, *len), x->bytes, x->crc32c);
        free(text);
        text = NULL;
    }
    free(path);
    return text;
}

static int cmp_dfile(const void *a, const void *b) {
    return strcmp(((const dfile *)a)->name, ((const dfile *)b)->name);
}

static int find_dfile(const sl_ckpt *c, const char *name) {
    int lo = 0, hi = c->nfiles - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        int k = strcmp(c->files[mid].name, name);
        if (k == 0) return mid;
        if (k < 0)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return -1;
}

/* Resolves `path` to a checkpoint directory (malloc'ed), or NULL with a message. */
static char *resolve(const char *path, char *err, size_t errlen) {
    char p[CK_PATH_MAX];
    if (!path || strlen(path) > CK_PATH_MAX - 128) {
        sl_fail(err, errlen, "checkpoint: path too long or missing");
        return NULL;
    }
    ck_path(p, sizeof p, "%s/" CK_COMMIT_FILE, path);
    if (is_file(p)) return sl_xstrdup(path);
    if (!is_dir(path)) {
        sl_fail(err, errlen, "%s: no such checkpoint directory", path);
        return NULL;
    }
    /* the last component, trailing slashes ignored */
    char last[CK_PATH_MAX];
    snprintf(last, sizeof last, "%s", path);
    size_t n = strlen(last);
    while (n > 1 && last[n - 1] == '/') last[--n] = 0;
    const char *base = strrchr(last, '/');
    base = base ? base + 1 : last;
    if (step_of(base) >= 0 || strncmp(base, ".tmp-", 5) == 0) {
        sl_fail(err, errlen,
                "%s: not a committed checkpoint (no " CK_COMMIT_FILE
                "): the save was interrupted, it is never loaded",
                path);
        return NULL;
    }
    char dir[CK_PATH_MAX];
    int f = sl_ckpt_find_latest(path, dir, sizeof dir, err, errlen);
    if (f < 0) return NULL;
    if (f == 0) {
        sl_fail(err, errlen, "%s: no committed checkpoint there", path);
        return NULL;
    }
    return sl_xstrdup(dir);
}

void sl_ckpt_close(sl_ckpt *c) {
    if (!c) return;
    for (int i = 0; i < c->nfiles; i++) {
        dfile *f = &c->files[i];
        if (f->st) sl_st_close(f->st);
        free(f->path);
        free(f->bad);
        free(f->refs);
    }
    free(c->files);
    ck_index_free(&c->idx);
    for (int i = 0; i < c->nms; i++) {
        ck_manifest_free(&c->ms[i]);
        free(c->mnames[i]);
    }
    free(c->ms);
    free(c->mnames);
    ck_commit_free(&c->commit);
    ck_state_free(&c->state);
    free(c->ref_file);
    free(c->ref_st);
    free(c->ref_verified);
    free(c->scratch);
    free(c->dir);
    free(c);
}

/* Everything but the data: reports each problem; returns the handle (NULL when not even
 * COMMIT could be read). */
static sl_ckpt *load(const char *path, reporter *r, char *err, size_t errlen) {
    char *dir = resolve(path, err, errlen);
    if (!dir) return NULL;
    sl_ckpt *c = sl_xcalloc(1, sizeof *c);
    c->dir = dir;
    char *cpath = join(dir, CK_COMMIT_FILE);
    size_t len = 0;
    char e[1024];
    char *text = sl_read_file(cpath, &len, e, sizeof e);
    int prc = text ? ck_commit_parse(text, len, cpath, &c->commit, e, sizeof e) : -1;
    free(text);
    free(cpath);
    if (prc != 0) {
        sl_fail(err, errlen, "%s", e);
        sl_ckpt_close(c);
        return NULL;
    }
    const ck_commit *cm = &c->commit;
    /* train_state.json */
    text = read_indexed(dir, &cm->state, &len, r);
    if (text) {
        char *sp = join(dir, cm->state.file);
        if (ck_state_parse(text, len, sp, &c->state, e, sizeof e) != 0)
            problem(r, "%s", e);
        else if (c->state.step != cm->step || c->state.world_size != cm->world_size)
            problem(r,
                    "%s: step %" PRId64 " of %d ranks, but " CK_COMMIT_FILE " says %" PRId64
                    " of %d",
                    sp, c->state.step, c->state.world_size, cm->step, cm->world_size);
        free(sp);
        free(text);
    }
    if (!c->state.trainer) c->state.trainer = cJSON_CreateObject();
    /* manifests */
    c->nms = cm->world_size;
    c->ms = sl_xcalloc((size_t)c->nms, sizeof *c->ms);
    c->mnames = sl_xcalloc((size_t)c->nms, sizeof *c->mnames);
    for (int i = 0; i < c->nms; i++) {
        const ck_indexed *x = &cm->manifests[i];
        c->mnames[i] = join(dir, x->file);
        text = read_indexed(dir, x, &len, r);
        if (!text) continue;
        if (ck_manifest_parse(text, len, c->mnames[i], &c->ms[i], e, sizeof e) != 0) {
            problem(r, "%s", e);
        } else if (c->ms[i].rank != i || c->ms[i].world_size != cm->world_size ||
                   c->ms[i].step != cm->step) {
            problem(r,
                    "%s: rank %d of %d at step %" PRId64 ", but " CK_COMMIT_FILE
                    " lists it as rank %d of %d at step %" PRId64,
                    c->mnames[i], c->ms[i].rank, c->ms[i].world_size, c->ms[i].step, i,
                    cm->world_size, cm->step);
            ck_manifest_free(&c->ms[i]);
        }
        free(text);
    }
    /* data files: each listed by one manifest, present, of the recorded size */
    int nf = 0;
    for (int i = 0; i < c->nms; i++) nf += c->ms[i].nfiles;
    c->files = sl_xcalloc((size_t)(nf ? nf : 1), sizeof *c->files);
    for (int i = 0; i < c->nms; i++)
        for (int k = 0; k < c->ms[i].nfiles; k++) {
            dfile *f = &c->files[c->nfiles++];
            f->name = c->ms[i].files[k].name;
            f->bytes = c->ms[i].files[k].bytes;
            f->path = join(dir, f->name);
        }
    qsort(c->files, (size_t)c->nfiles, sizeof *c->files, cmp_dfile);
    for (int i = 1; i < c->nfiles; i++)
        if (strcmp(c->files[i - 1].name, c->files[i].name) == 0)
            problem(r, "%s: listed by two manifests", c->files[i].path);
    for (int i = 0; i < c->nfiles; i++) {
        struct stat st;
        dfile *f = &c->files[i];
        if (stat(f->path, &st) != 0) {
            problem(r, "%s: missing (%s)", f->path, strerror(errno));
            f->absent = true;
        } else if ((uint64_t)st.st_size != f->bytes) {
            problem(r, "%s: %lld bytes, the manifest says %" PRIu64 " (truncated or replaced)",
                    f->path, (long long)st.st_size, f->bytes);
            f->absent = true;
        }
    }
    /* coverage */
    reporter fwd = *r;
    fwd.count = 0;
    ck_index_build(c->ms, c->nms, (const char *const *)c->mnames, dir, forward, &fwd, &c->idx);
    r->count += fwd.count;
    c->ref_file = sl_xcalloc((size_t)(c->idx.nrefs ? c->idx.nrefs : 1), sizeof(int));
    c->ref_st = sl_xcalloc((size_t)(c->idx.nrefs ? c->idx.nrefs : 1), sizeof(int));
    c->ref_verified = sl_xcalloc((size_t)(c->idx.nrefs ? c->idx.nrefs : 1), sizeof(bool));
    for (int k = 0; k < c->idx.nrefs; k++) {
        int fi = find_dfile(c, c->idx.refs[k].piece->file);
        c->ref_file[k] = fi; /* always found: the parser checked the name against "files" */
        c->ref_st[k] = -1;
        if (fi >= 0) {
            dfile *f = &c->files[fi];
            f->refs = sl_xrealloc(f->refs, sizeof(int) * (size_t)(f->nrefs + 1));
            f->refs[f->nrefs++] = k;
        }
    }
    for (int t = 0; t < c->idx.ntensors; t++) {
        const ck_tensor *tt = &c->idx.tensors[t];
        c->data_bytes += (uint64_t)tt->first->numel * tt->first->esize;
    }
    return c;
}

typedef struct {
    char first[1536];
    int count;
} first_problem;

static void keep_first(void *user, const char *line) {
    first_problem *p = user;
    if (p->count++ == 0) snprintf(p->first, sizeof p->first, "%s", line);
}

sl_ckpt *sl_ckpt_open(const char *path, char *err, size_t errlen) {
    first_problem fp = {"", 0};
    reporter r = {keep_first, &fp, 0};
    sl_ckpt *c = load(path, &r, err, errlen);
    if (!c) return NULL;
    if (r.count) {
        if (r.count > 1)
            sl_fail(err, errlen, "%s (and %d more problems; `sluice ckpt verify %s` lists them)",
                    fp.first, r.count - 1, c->dir);
        else
            sl_fail(err, errlen, "%s", fp.first);
        sl_ckpt_close(c);
        return NULL;
    }
    return c;
}

const char *sl_ckpt_dir(const sl_ckpt *c) {
    return c->dir;
}
int64_t sl_ckpt_step(const sl_ckpt *c) {
    return c->commit.step;
}
int sl_ckpt_world_size(const sl_ckpt *c) {
    return c->commit.world_size;
}
int sl_ckpt_format_version(const sl_ckpt *c) {
    return c->commit.format_version;
}
const char *sl_ckpt_sluice_version(const sl_ckpt *c) {
    return c->state.sluice_version;
}
const cJSON *sl_ckpt_train_state(const sl_ckpt *c) {
    return c->state.trainer;
}

int sl_ckpt_tensor_count(const sl_ckpt *c) {
    return c->idx.ntensors;
}

void sl_ckpt_tensor_at(const sl_ckpt *c, int i, sl_ckpt_tensor *t) {
    if (i < 0 || i >= c->idx.ntensors)
        sl_fatal("checkpoint: tensor index %d outside [0, %d)", i, c->idx.ntensors);
    const ck_tensor *x = &c->idx.tensors[i];
    memset(t, 0, sizeof *t);
    t->name = x->name;
    t->dtype = x->first->dtype;
    t->elem_size = x->first->esize;
    t->ndim = x->first->ndim;
    memcpy(t->shape, x->first->shape, sizeof t->shape);
    t->numel = x->first->numel;
    t->pieces = x->count;
}

int sl_ckpt_find(const sl_ckpt *c, const char *name) {
    return name ? ck_index_find(&c->idx, name) : -1;
}

int sl_ckpt_expect(const sl_ckpt *c, const char *name, const char *dtype, int ndim,
                   const int64_t *shape, char *err, size_t errlen) {
    int i = sl_ckpt_find(c, name);
    char a[200], b[200];
    if (i < 0)
        return sl_fail(err, errlen,
                       "checkpoint %s: tensor '%s' (shape %s) is not in the checkpoint", c->dir,
                       name ? name : "(null)", ck_fmt_shape(b, sizeof b, ndim, shape));
    sl_ckpt_tensor t;
    sl_ckpt_tensor_at(c, i, &t);
    bool same = t.ndim == ndim && (!dtype || strcmp(dtype, t.dtype) == 0);
    for (int d = 0; same && d < ndim; d++) same = t.shape[d] == shape[d];
    if (!same)
        return sl_fail(err, errlen,
                       "checkpoint %s: tensor '%s': shape %s %s in the checkpoint, %s %s expected",
                       c->dir, name, ck_fmt_shape(a, sizeof a, t.ndim, t.shape), t.dtype,
                       ck_fmt_shape(b, sizeof b, ndim, shape), dtype ? dtype : t.dtype);
    return 0;
}

uint64_t sl_ckpt_data_bytes(const sl_ckpt *c) {
    return c->data_bytes;
}

int sl_ckpt_file_count(const sl_ckpt *c) {
    return c->nfiles;
}

const char *sl_ckpt_file_at(const sl_ckpt *c, int i, uint64_t *bytes) {
    if (i < 0 || i >= c->nfiles)
        sl_fatal("checkpoint: file index %d outside [0, %d)", i, c->nfiles);
    if (bytes) *bytes = c->files[i].bytes;
    return c->files[i].name;
}

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
    sl_ckpt *c = load(path, &r, e, sizeof e);
    if (!c) {
        problem(&r, "%s", e);
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
            problem(&r, "%s", e);
            continue;
        }
        /* pieces in file order: one sequential pass over the file */
        dfile *f = &c->files[fi];
        if (f->nrefs > 1) qsort_r(f->refs, (size_t)f->nrefs, sizeof(int), cmp_ref_offset, c);
        for (int k = 0; k < f->nrefs; k++) {
            const int ref = f->refs[k];
            const ck_piece *p = c->idx.refs[ref].piece;
            if (read_verify(c, ref, p->begin, p->begin, NULL, e, sizeof e) != 0)
                problem(&r, "%s", e);
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
