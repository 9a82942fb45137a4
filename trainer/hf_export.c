/* trainer/hf_export.c - Hugging Face naming of sluice's parameters (see hf_export.h). */
#include "trainer/hf_export.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/fsutil.h"
#include "core/log.h"
#include "trainer/safetensors.h"

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

static void push(sl_hf_entry **v, int *n, int *cap, const char *name, sl_param *p, int64_t off,
                 int ndim, int64_t d0, int64_t d1) {
    if (*n == *cap) {
        *cap = *cap ? 2 * *cap : 256;
        *v = sl_xrealloc(*v, (size_t)*cap * sizeof **v);
    }
    sl_hf_entry *e = &(*v)[(*n)++];
    snprintf(e->name, sizeof e->name, "%s", name);
    e->param = p;
    e->offset = off;
    e->ndim = ndim;
    e->shape[0] = d0;
    e->shape[1] = d1;
}

int sl_hf_entries(const sl_model *m, sl_hf_entry **out) {
    sl_hf_entry *v = NULL;
    int n = 0, cap = 0;
    char name[160];
    for (int i = 0; i < m->params.count; i++) {
        sl_param *p = m->params.items[i];
        const size_t plen = strlen(p->name);
        if (p->expert_base >= 0) {
            /* "model.layers.L.mlp.experts.<gate_up_proj|down_proj>" stacked over experts */
            const char *leaf = strrchr(p->name, '.') + 1;
            const int base_len = (int)(leaf - p->name); /* keeps the trailing '.' */
            const int64_t per = p->numel / p->shape[0];
            for (int64_t e = 0; e < p->shape[0]; e++) {
                const long long ge = p->expert_base + e;
                if (strcmp(leaf, "gate_up_proj") == 0) {
                    const int64_t half = p->shape[1] / 2;
                    snprintf(name, sizeof name, "%.*s%lld.gate_proj.weight", base_len, p->name, ge);
                    push(&v, &n, &cap, name, p, e * per, 2, half, p->shape[2]);
                    snprintf(name, sizeof name, "%.*s%lld.up_proj.weight", base_len, p->name, ge);
                    push(&v, &n, &cap, name, p, e * per + half * p->shape[2], 2, half, p->shape[2]);
                } else {
                    snprintf(name, sizeof name, "%.*s%lld.%s.weight", base_len, p->name, ge, leaf);
                    push(&v, &n, &cap, name, p, e * per, 2, p->shape[1], p->shape[2]);
                }
            }
        } else if (ends_with(p->name, ".gate_up_proj.weight")) {
            const int keep = (int)(plen - strlen("gate_up_proj.weight"));
            const int64_t half = p->shape[0] / 2;
            snprintf(name, sizeof name, "%.*sgate_proj.weight", keep, p->name);
            push(&v, &n, &cap, name, p, 0, 2, half, p->shape[1]);
            snprintf(name, sizeof name, "%.*sup_proj.weight", keep, p->name);
            push(&v, &n, &cap, name, p, half * p->shape[1], 2, half, p->shape[1]);
        } else {
            push(&v, &n, &cap, p->name, p, 0, p->ndim, p->shape[0], p->ndim > 1 ? p->shape[1] : 0);
        }
    }
    *out = v;
    return n;
}

static int64_t entry_numel(const sl_hf_entry *e) {
    return e->ndim == 1 ? e->shape[0] : e->shape[0] * e->shape[1];
}

/* Writes the weights (or their gradients) under Hugging Face names. */
static int write_tensors(const sl_model *m, const char *path, bool grads, char *err,
                         size_t errlen) {
    sl_hf_entry *ents = NULL;
    const int n = sl_hf_entries(m, &ents);
    sl_st_writer *w = sl_st_writer_open(path, err, errlen);
    if (!w) {
        free(ents);
        return -1;
    }
    sl_st_writer_set_metadata(w, "format", "pt");
    sl_st_writer_set_metadata(w, "producer", "sluice");
    if (grads) sl_st_writer_set_metadata(w, "content", "gradients");
    for (int i = 0; i < n; i++)
        sl_st_writer_declare(w, ents[i].name, "F32", ents[i].ndim, ents[i].shape);
    int64_t maxn = 0;
    for (int i = 0; i < n; i++) maxn = entry_numel(&ents[i]) > maxn ? entry_numel(&ents[i]) : maxn;
    float *buf = sl_xmalloc((size_t)(maxn ? maxn : 1) * sizeof(float));
    for (int i = 0; i < n; i++) {
        const int64_t k = entry_numel(&ents[i]);
        sl_tensor_to_host_range(grads ? ents[i].param->g : ents[i].param->w, ents[i].offset, k,
                                buf);
        sl_st_writer_write(w, ents[i].name, buf, (size_t)k * sizeof(float));
    }
    free(buf);
    free(ents);
    return sl_st_writer_close(w, err, errlen);
}

int sl_hf_save(const sl_model *m, const char *dir, char *err, size_t errlen) {
    if (sl_mkdirs(dir, err, errlen) != 0) return -1;
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (write_tensors(m, path, false, err, errlen) != 0) return -1;
    char *json = sl_model_config_to_hf_json(&m->cfg);
    snprintf(path, sizeof path, "%s/config.json", dir);
    int rc = sl_write_file_atomic(path, json, strlen(json), err, errlen);
    free(json);
    return rc;
}

int sl_hf_save_grads(const sl_model *m, const char *path, char *err, size_t errlen) {
    return write_tensors(m, path, true, err, errlen);
}

int sl_hf_load(sl_model *m, const char *path, char *err, size_t errlen) {
    char file[4096];
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        snprintf(file, sizeof file, "%s/model.safetensors", path);
    else
        snprintf(file, sizeof file, "%s", path);
    sl_st_file *f = sl_st_open(file, err, errlen);
    if (!f) return -1;
    sl_hf_entry *ents = NULL;
    const int n = sl_hf_entries(m, &ents);
    int rc = 0;
    float *buf = NULL;
    for (int i = 0; i < n && rc == 0; i++) {
        const sl_hf_entry *e = &ents[i];
        const int idx = sl_st_find(f, e->name);
        if (idx < 0) {
            snprintf(err, errlen, "%s: tensor '%s' is missing", file, e->name);
            rc = -1;
            break;
        }
        const int64_t *shape = sl_st_shape(f, idx);
        if (strcmp(sl_st_dtype(f, idx), "F32") != 0 || sl_st_ndim(f, idx) != e->ndim ||
            shape[0] != e->shape[0] || (e->ndim > 1 && shape[1] != e->shape[1])) {
            snprintf(err, errlen,
                     "%s: tensor '%s' is %s with %d dims [%lld, ...], the model expects F32 "
                     "[%lld%s%lld]",
                     file, e->name, sl_st_dtype(f, idx), sl_st_ndim(f, idx),
                     (long long)(sl_st_ndim(f, idx) > 0 ? shape[0] : 0), (long long)e->shape[0],
                     e->ndim > 1 ? ", " : "", (long long)(e->ndim > 1 ? e->shape[1] : 0));
            rc = -1;
            break;
        }
        const int64_t k = entry_numel(e);
        buf = sl_xrealloc(buf, (size_t)(k ? k : 1) * sizeof(float));
        if (sl_st_read(f, idx, buf, (size_t)k * sizeof(float), err, errlen) != 0) {
            rc = -1;
            break;
        }
        sl_tensor_from_host_range(e->param->w, e->offset, k, buf);
    }
    free(buf);
    free(ents);
    sl_st_close(f);
    return rc;
}
