/* tests/checkpoint_model.c - see checkpoint_model.h. */
#include "checkpoint_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"

const cJSON *ckm_extra_state = NULL;

static void add(ckm_model *m, const char *name, const char *dtype, int ndim, int64_t d0, int64_t d1,
                int64_t d2, int kind, int owner) {
    ckm_tensor *t = &m->t[m->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->dtype = dtype;
    t->ndim = ndim;
    t->shape[0] = d0;
    t->shape[1] = d1;
    t->shape[2] = d2;
    t->kind = kind;
    t->owner = owner;
}

void ckm_model_init(ckm_model *m, int hidden) {
    const int64_t c = hidden, v = 37, e = 8, i = 3;
    m->n = 0;
    add(m, "embed.weight", "F32", 2, v, c, 0, CKM_REPLICATED, 0);
    add(m, "layers.0.mlp.experts.gate_up_proj", "F32", 3, e, 2 * i, c, CKM_EXPERT, 0);
    add(m, "layers.0.mlp.experts.down_proj", "F32", 3, e, c, i, CKM_EXPERT, 0);
    add(m, "layers.0.mlp.router.bias", "BF16", 1, e, 0, 0, CKM_REPLICATED, 3);
    const int64_t flat = v * c + e * 3 * i * c;
    add(m, "optim.exp_avg.flat", "F32", 1, flat, 0, 0, CKM_ZERO, 0);
    add(m, "optim.exp_avg_sq.flat", "F32", 1, flat, 0, 0, CKM_ZERO, 0);
    add(m, "optim.step_counts", "I64", 1, 5, 0, 0, CKM_REPLICATED, 1);
    add(m, "empty", "F32", 2, 0, 4, 0, CKM_REPLICATED, 2);
}

int64_t ckm_numel(const ckm_tensor *t) {
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
    return n;
}

size_t ckm_esize(const ckm_tensor *t) {
    return strcmp(t->dtype, "BF16") == 0 ? 2 : strcmp(t->dtype, "I64") == 0 ? 8 : 4;
}

void ckm_range(const ckm_tensor *t, int r, int world, int64_t *b, int64_t *e) {
    const int64_t n = ckm_numel(t);
    if (t->kind == CKM_REPLICATED) {
        bool mine = r == t->owner % world;
        *b = 0;
        *e = mine ? n : 0;
    } else if (t->kind == CKM_EXPERT) {
        const int64_t ex = t->shape[0], row = n / ex;
        *b = ex * r / world * row;
        *e = ex * (r + 1) / world * row;
    } else {
        /* ZeRO-1 style: ceil-sized shards, the last one shorter */
        const int64_t per = (n + world - 1) / world;
        *b = per * r < n ? per * r : n;
        *e = per * (r + 1) < n ? per * (r + 1) : n;
    }
}

static uint64_t mix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

void ckm_fill(const ckm_tensor *t, int64_t step, int64_t b, int64_t n, void *dst) {
    uint64_t h = 1469598103934665603ull;
    for (const char *p = t->name; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
    h ^= mix((uint64_t)step);
    for (int64_t i = 0; i < n; i++) {
        uint64_t x = mix(h + (uint64_t)(b + i));
        if (strcmp(t->dtype, "F32") == 0) {
            float f = (float)((int64_t)(x >> 40) - (1 << 23)) / (float)(1 << 23);
            memcpy((char *)dst + 4 * i, &f, 4);
        } else if (strcmp(t->dtype, "BF16") == 0) {
            uint16_t v = (uint16_t)(0x3c00u + (x & 0x3ffu)); /* finite, varied */
            memcpy((char *)dst + 2 * i, &v, 2);
        } else {
            memcpy((char *)dst + 8 * i, &x, 8);
        }
    }
}

int ckm_add_pieces(sl_ckpt_writer *w, const ckm_model *m, int r, int world, int64_t step,
                   const ckm_fault *fault, void ***bufs, int *nbufs) {
    *bufs = sl_xcalloc((size_t)m->n * 2, sizeof(void *));
    *nbufs = 0;
    for (int k = 0; k < m->n; k++) {
        const ckm_tensor *t = &m->t[k];
        int64_t b, e;
        ckm_range(t, r, world, &b, &e);
        const bool faulty = fault && fault->rank == r && strcmp(fault->tensor, t->name) == 0;
        if (faulty && !fault->duplicate) continue;
        if (faulty && fault->duplicate) {
            int64_t b2, e2;
            ckm_range(t, (r + 1) % world, world, &b2, &e2);
            if (e2 > b2) {
                void *d = sl_xmalloc((size_t)(e2 - b2) * ckm_esize(t));
                ckm_fill(t, step, b2, e2 - b2, d);
                (*bufs)[(*nbufs)++] = d;
                if (sl_ckpt_save_piece(w, t->name, t->dtype, t->ndim, t->shape, b2, e2, d))
                    return -1;
            }
        }
        const bool empty_tensor = ckm_numel(t) == 0;
        if (e == b && !(empty_tensor && r == t->owner % world)) continue;
        void *d = sl_xmalloc((size_t)(e - b) * ckm_esize(t) + 1);
        ckm_fill(t, step, b, e - b, d);
        (*bufs)[(*nbufs)++] = d;
        if (sl_ckpt_save_piece(w, t->name, t->dtype, t->ndim, t->shape, b, e, d)) return -1;
    }
    return 0;
}

void ckm_free_bufs(void **bufs, int n) {
    for (int i = 0; i < n; i++) free(bufs[i]);
    free(bufs);
}

int ckm_save_sequential(const char *root, const ckm_model *m, int64_t step, int world,
                        int keep_last, int64_t keep_every, const ckm_fault *fault, char *err,
                        size_t errlen) {
    sl_ckpt_writer **w = sl_xcalloc((size_t)world, sizeof *w);
    void ***bufs = sl_xcalloc((size_t)world, sizeof *bufs);
    int *nb = sl_xcalloc((size_t)world, sizeof *nb);
    int rc = 0;
    err[0] = 0;
    for (int r = 0; r < world; r++) {
        sl_ckpt_save_opts o = {.root = root,
                               .step = step,
                               .rank = r,
                               .world_size = world,
                               .keep_last = keep_last,
                               .keep_every = keep_every};
        char e[2048];
        w[r] = sl_ckpt_save_begin(&o, e, sizeof e);
        if (!w[r]) {
            if (!err[0]) snprintf(err, errlen, "%s", e);
            rc = -1;
        }
    }
    for (int r = 0; r < world && rc == 0; r++)
        ckm_add_pieces(w[r], m, r, world, step, fault, &bufs[r], &nb[r]);
    for (int r = 0; r < world && rc == 0; r++) {
        char e[2048];
        if (sl_ckpt_save_write(w[r], e, sizeof e) != 0 && !err[0]) snprintf(err, errlen, "%s", e);
    }
    cJSON *state = cJSON_CreateObject();
    cJSON_AddNumberToObject(state, "tokens", (double)step * 1000);
    cJSON *layout = cJSON_AddObjectToObject(state, "layout");
    cJSON_AddNumberToObject(layout, "world", world);
    for (const cJSON *it = ckm_extra_state ? ckm_extra_state->child : NULL; it; it = it->next)
        cJSON_AddItemToObject(state, it->string, cJSON_Duplicate(it, 1));
    for (int r = world - 1; r >= 0 && rc == 0; r--) {
        char e[2048];
        int c = sl_ckpt_save_commit(w[r], r == 0 ? state : NULL, e, sizeof e);
        w[r] = NULL;
        if (c != 0 && r == 0) {
            rc = -1;
            if (!err[0]) snprintf(err, errlen, "%s", e); /* else: the write error that caused it */
        }
    }
    if (rc == 0 && err[0]) rc = -1; /* a write failed but rank 0 committed?! reported by caller */
    cJSON_Delete(state);
    for (int r = 0; r < world; r++) {
        sl_ckpt_save_abort(w[r]);
        if (bufs[r]) ckm_free_bufs(bufs[r], nb[r]);
    }
    free(w);
    free(bufs);
    free(nb);
    return rc;
}

static int compare_range(sl_ckpt *c, const ckm_tensor *t, int64_t step, int64_t b, int64_t e,
                         const char *what) {
    if (e <= b) return 0;
    const size_t es = ckm_esize(t), n = (size_t)(e - b) * es;
    unsigned char *got = sl_xmalloc(n), *want = sl_xmalloc(n);
    char err[2048];
    int bad = 0;
    if (sl_ckpt_read(c, t->name, b, e, got, err, sizeof err) != 0) {
        fprintf(stderr, "FAIL %s: read '%s' [%lld, %lld): %s\n", what, t->name, (long long)b,
                (long long)e, err);
        bad = 1;
    } else {
        ckm_fill(t, step, b, e - b, want);
        if (memcmp(got, want, n) != 0) {
            fprintf(stderr, "FAIL %s: '%s' [%lld, %lld): bytes differ\n", what, t->name,
                    (long long)b, (long long)e);
            bad = 1;
        }
    }
    free(got);
    free(want);
    return bad;
}

int ckm_check_rank(sl_ckpt *c, const ckm_model *m, int64_t step, int r, int world) {
    int bad = 0;
    char what[64];
    snprintf(what, sizeof what, "rank %d of %d", r, world);
    for (int k = 0; k < m->n; k++) {
        const ckm_tensor *t = &m->t[k];
        int64_t b, e;
        ckm_range(t, r, world, &b, &e);
        /* a replicated tensor is read by every rank of the new world */
        if (t->kind == CKM_REPLICATED) b = 0, e = ckm_numel(t);
        bad += compare_range(c, t, step, b, e, what);
    }
    return bad;
}

int ckm_check_world(sl_ckpt *c, const ckm_model *m, int64_t step, int world) {
    int bad = 0;
    for (int r = 0; r < world; r++) bad += ckm_check_rank(c, m, step, r, world);
    return bad;
}

int ckm_check_random(sl_ckpt *c, const ckm_model *m, int64_t step, int n_random, uint64_t seed) {
    int bad = 0;
    for (int k = 0; k < m->n; k++) {
        const ckm_tensor *t = &m->t[k];
        const int64_t n = ckm_numel(t);
        if (n == 0) continue;
        for (int i = 0; i < n_random; i++) {
            seed = mix(seed);
            int64_t b = (int64_t)(seed % (uint64_t)n);
            seed = mix(seed);
            int64_t e = b + 1 + (int64_t)(seed % (uint64_t)(n - b));
            bad += compare_range(c, t, step, b, e, "random range");
        }
    }
    return bad;
}
