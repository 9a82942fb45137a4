/*
 * io/checkpoint_load.c - finding, opening and validating checkpoints (see checkpoint.h and
 * "Load validation" in docs/checkpoint-format.md); reading their data and verifying it:
 * io/checkpoint_read.c.
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
#include "io/checkpoint_load_internal.h"
#include "io/crc32c.h"

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

int sl_ckpt_find_previous(const char *newest, char *dir, size_t dirlen) {
    char ckdir[CK_PATH_MAX];
    if (!ck_path(ckdir, sizeof ckdir, "%s", newest)) return 0;
    size_t n = strlen(ckdir);
    while (n > 1 && ckdir[n - 1] == '/') ckdir[--n] = 0;
    char *slash = strrchr(ckdir, '/');
    const int64_t before = step_of(slash ? slash + 1 : ckdir);
    if (before < 0) return 0;
    if (slash)
        *slash = 0;
    else
        snprintf(ckdir, sizeof ckdir, ".");
    int count = 0;
    int64_t *steps = ck_committed_steps(ckdir, &count);
    int found = 0;
    for (;;) { /* newest first */
        int64_t best = -1;
        for (int i = 0; i < count; i++)
            if (steps[i] < before && steps[i] > best) best = steps[i];
        if (best < 0) break;
        char p[CK_PATH_MAX], e[256];
        if (ck_path(p, sizeof p, "%s/step-%" PRId64, ckdir, best)) {
            sl_ckpt *c = sl_ckpt_open(p, e, sizeof e);
            if (c) {
                sl_ckpt_close(c);
                found = ck_path(dir, dirlen, "%s", p);
                break;
            }
        }
        for (int i = 0; i < count; i++)
            if (steps[i] == best) steps[i] = -1;
    }
    free(steps);
    return found;
}

/* ---- the handle ---- */
void ck_problem(reporter *r, const char *fmt, ...) {
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
        ck_problem(r, "%s", e);
    } else if (*len != x->bytes || sl_crc32c(0, text, *len) != x->crc32c) {
        ck_problem(r,
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
        struct stat st;
        if (stat(path, &st) == 0) /* a checkpoint is a directory: say what this one is not */
            sl_fail(err, errlen,
                    "%s: not a directory (a checkpoint is a directory, checkpoints/step-N, or a "
                    "run or checkpoints directory holding them)",
                    path);
        else
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
    /* a checkpoint's own files without its COMMIT: a save cut short, whatever its name */
    ck_path(p, sizeof p, "%s/" CK_STATE_FILE, path);
    if (step_of(base) >= 0 || strncmp(base, ".tmp-", 5) == 0 || is_file(p)) {
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

sl_ckpt *ck_load(const char *path, reporter *r, char *err, size_t errlen) {
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
            ck_problem(r, "%s", e);
        else if (c->state.step != cm->step || c->state.world_size != cm->world_size)
            ck_problem(r,
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
            ck_problem(r, "%s", e);
        } else if (c->ms[i].rank != i || c->ms[i].world_size != cm->world_size ||
                   c->ms[i].step != cm->step) {
            ck_problem(r,
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
            ck_problem(r, "%s: listed by two manifests", c->files[i].path);
    for (int i = 0; i < c->nfiles; i++) {
        struct stat st;
        dfile *f = &c->files[i];
        if (stat(f->path, &st) != 0) {
            ck_problem(r, "%s: missing (%s)", f->path, strerror(errno));
            f->absent = true;
        } else if ((uint64_t)st.st_size != f->bytes) {
            ck_problem(r, "%s: %lld bytes, the manifest says %" PRIu64 " (truncated or replaced)",
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
    sl_ckpt *c = ck_load(path, &r, err, errlen);
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
