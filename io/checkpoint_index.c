/*
 * io/checkpoint_index.c - the coverage index over every rank's pieces: tensors sorted by name,
 * each with its pieces sorted by begin, and every inconsistency reported (a dtype or shape that
 * differs between pieces, elements no piece covers, elements covered twice); see
 * checkpoint_internal.h. Parsing and printing the JSON files the pieces come from:
 * io/checkpoint_manifest.c and io/checkpoint_print.c.
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
