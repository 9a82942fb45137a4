/* model/hf_export.c - Hugging Face naming of sluice's parameters (see hf_export.h). */
#include "model/hf_export.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "core/fsutil.h"
#include "core/log.h"
#include "io/safetensors.h"

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

const char *sl_hf_format_name(sl_hf_format f) {
    return f == SL_HF_QWEN3_NEXT ? "qwen3_next" : "qwen3_moe";
}

int sl_hf_format_parse(const char *name, sl_hf_format *f) {
    if (strcmp(name, "qwen3_moe") == 0) return *f = SL_HF_QWEN3_MOE, 0;
    if (strcmp(name, "qwen3_next") == 0) return *f = SL_HF_QWEN3_NEXT, 0;
    return -1;
}

void sl_hf_layout_init(sl_hf_layout *l, sl_hf_format f, const sl_model_config *m) {
    memset(l, 0, sizeof *l);
    l->format = f;
    l->cfg = *m;
}

void sl_hf_layout_free(sl_hf_layout *l) {
    for (int i = 0; i < l->nblocks; i++) free(l->blocks[i]);
    free(l->blocks);
    l->blocks = NULL, l->nblocks = 0;
}

sl_ckpt_export_piece *sl_hf_layout_pieces(sl_hf_layout *l, int n) {
    l->blocks = sl_xrealloc(l->blocks, (size_t)(l->nblocks + 1) * sizeof *l->blocks);
    return l->blocks[l->nblocks++] = sl_xcalloc((size_t)n, sizeof(sl_ckpt_export_piece));
}

/* A plain entry: elements [off, off + d0 * d1) (d1 = 0: a vector). */
static void emit_plain(sl_hf_emit_fn emit, void *user, const char *name, int64_t off, int ndim,
                       int64_t d0, int64_t d1) {
    sl_ckpt_export_entry e;
    memset(&e, 0, sizeof e);
    snprintf(e.name, sizeof e.name, "%s", name);
    e.offset = off;
    e.ndim = ndim;
    e.shape[0] = d0;
    e.shape[1] = d1;
    emit(user, &e);
}

/* The Qwen3-MoE cuts: fused projections and expert stacks split, everything else as it is. */
static int qwen3_moe_map(const char *name, int ndim, const int64_t *shape, int64_t first_expert,
                         sl_hf_emit_fn emit, void *user) {
    char hf[256];
    int n = 0;
    if (ndim == 3 && strstr(name, ".mlp.experts.")) {
        /* "model.layers.L.mlp.experts.<gate_up_proj|down_proj>" stacked over experts */
        const char *leaf = strrchr(name, '.') + 1;
        const int base_len = (int)(leaf - name); /* keeps the trailing '.' */
        const int64_t per = shape[1] * shape[2];
        for (int64_t e = 0; e < shape[0]; e++) {
            const long long ge = first_expert + e;
            if (strcmp(leaf, "gate_up_proj") == 0) {
                const int64_t half = shape[1] / 2;
                snprintf(hf, sizeof hf, "%.*s%lld.gate_proj.weight", base_len, name, ge);
                emit_plain(emit, user, hf, e * per, 2, half, shape[2]), n++;
                snprintf(hf, sizeof hf, "%.*s%lld.up_proj.weight", base_len, name, ge);
                emit_plain(emit, user, hf, e * per + half * shape[2], 2, half, shape[2]), n++;
            } else {
                snprintf(hf, sizeof hf, "%.*s%lld.%s.weight", base_len, name, ge, leaf);
                emit_plain(emit, user, hf, e * per, 2, shape[1], shape[2]), n++;
            }
        }
    } else if (ndim == 2 && ends_with(name, ".gate_up_proj.weight")) {
        const int keep = (int)(strlen(name) - strlen("gate_up_proj.weight"));
        const int64_t half = shape[0] / 2;
        snprintf(hf, sizeof hf, "%.*sgate_proj.weight", keep, name);
        emit_plain(emit, user, hf, 0, 2, half, shape[1]), n++;
        snprintf(hf, sizeof hf, "%.*sup_proj.weight", keep, name);
        emit_plain(emit, user, hf, half * shape[1], 2, half, shape[1]), n++;
    } else {
        emit_plain(emit, user, name, 0, ndim, shape[0], ndim > 1 ? shape[1] : 0), n++;
    }
    return n;
}

int sl_hf_layout_map(sl_hf_layout *l, const char *name, int ndim, const int64_t *shape,
                     int64_t first_expert, sl_hf_emit_fn emit, void *user) {
    if (l->format == SL_HF_QWEN3_NEXT)
        return sl_qwen3_next_map(l, name, ndim, shape, first_expert, emit, user);
    return qwen3_moe_map(name, ndim, shape, first_expert, emit, user);
}

typedef struct {
    sl_hf_entry *v;
    int n, cap;
    sl_param *p;
} entries;

static void push(void *user, const sl_ckpt_export_entry *e) {
    entries *x = user;
    if (x->n == x->cap) {
        x->cap = x->cap ? 2 * x->cap : 256;
        x->v = sl_xrealloc(x->v, (size_t)x->cap * sizeof *x->v);
    }
    x->v[x->n].e = *e;
    x->v[x->n++].param = x->p;
}

int sl_hf_entries(const sl_model *m, sl_hf_layout *l, sl_hf_entry **out) {
    entries x = {0};
    for (int i = 0; i < m->params.count; i++) {
        x.p = m->params.items[i];
        sl_hf_layout_map(l, x.p->name, x.p->ndim, x.p->shape,
                         x.p->expert_base >= 0 ? x.p->expert_base : 0, push, &x);
    }
    *out = x.v;
    return x.n;
}

static int64_t entry_numel(const sl_hf_entry *e) {
    return e->e.ndim == 1 ? e->e.shape[0] : e->e.shape[0] * e->e.shape[1];
}

/* A parameter's values (or gradients) as the export reads them. */
static int read_param(void *user, int64_t offset, int64_t n, float *out, char *err, size_t errlen) {
    (void)err, (void)errlen;
    sl_tensor_to_host_range((const sl_tensor *)user, offset, n, out);
    return 0;
}

/* Writes the weights (or their gradients) under Hugging Face names of layout l: every entry, or
 * only the expert entries when with_dense is false. */
static int write_tensors(const sl_model *m, sl_hf_layout *l, const char *path, bool grads,
                         bool with_dense, char *err, size_t errlen) {
    sl_hf_entry *ents = NULL;
    int n = sl_hf_entries(m, l, &ents);
    if (!with_dense) {
        int k = 0;
        for (int i = 0; i < n; i++)
            if (ents[i].param->expert_base >= 0) ents[k++] = ents[i];
        n = k;
    }
    sl_st_writer *w = sl_st_writer_open(path, err, errlen);
    if (!w) {
        free(ents);
        return -1;
    }
    sl_st_writer_set_metadata(w, "format", "pt");
    sl_st_writer_set_metadata(w, "producer", "sluice");
    if (grads) sl_st_writer_set_metadata(w, "content", "gradients");
    for (int i = 0; i < n; i++)
        sl_st_writer_declare(w, ents[i].e.name, "F32", ents[i].e.ndim, ents[i].e.shape);
    int64_t maxn = 0;
    for (int i = 0; i < n; i++) maxn = entry_numel(&ents[i]) > maxn ? entry_numel(&ents[i]) : maxn;
    float *buf = sl_xmalloc((size_t)(maxn ? maxn : 1) * sizeof(float));
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        const int64_t k = entry_numel(&ents[i]);
        sl_tensor *src = grads ? ents[i].param->g : ents[i].param->master;
        rc = sl_ckpt_export_assemble(&ents[i].e, 0, k, buf, read_param, src, err, errlen);
        if (rc == 0) sl_st_writer_write(w, ents[i].e.name, buf, (size_t)k * sizeof(float));
    }
    free(buf);
    free(ents);
    if (rc != 0) {
        sl_st_writer_abort(w);
        return -1;
    }
    return sl_st_writer_close(w, err, errlen);
}

/* With YaRN, Hugging Face transformers 4.45 to 4.5x ignore rope_scaling.factor when
 * original_max_position_embeddings is present and use max_position_embeddings / original
 * instead (later versions use the factor and warn when the two disagree), so a config.json whose
 * max_position_embeddings is not factor x original gets another factor and mscale there: a model
 * trained or evaluated with YaRN would be served without it. config.json therefore states the
 * post-YaRN context. */
static void yarn_context(sl_model_config *c) {
    const sl_rope_scaling *r = &c->rope_scaling;
    if (r->type != SL_ROPE_YARN) return;
    const double ctx = r->factor * r->original_max_position_embeddings;
    if (ctx == (double)c->max_position_embeddings) return;
    if (ctx == floor(ctx) && ctx <= INT_MAX) {
        c->max_position_embeddings = (int)ctx;
        return;
    }
    sl_warn("config.json: YaRN factor %g x original_max_position_embeddings %d is not an "
            "integer; Hugging Face transformers 4.45-4.5x will compute factor "
            "max_position_embeddings / original = %g instead",
            r->factor, r->original_max_position_embeddings,
            (double)c->max_position_embeddings / r->original_max_position_embeddings);
}

char *sl_hf_config_json(const sl_model_config *m) {
    sl_model_config c = *m;
    yarn_context(&c);
    return sl_model_config_to_hf_json(&c);
}

char *sl_hf_layout_config_json(const sl_hf_layout *l) {
    if (l->format != SL_HF_QWEN3_NEXT) return sl_hf_config_json(&l->cfg);
    sl_model_config c = l->cfg;
    yarn_context(&c);
    return sl_qwen3_next_config_json(&c);
}

static int write_config(const sl_hf_layout *l, const char *dir, char *err, size_t errlen) {
    char path[4096];
    char *json = sl_hf_layout_config_json(l);
    snprintf(path, sizeof path, "%s/config.json", dir);
    int rc = sl_write_file_atomic(path, json, strlen(json), err, errlen);
    free(json);
    return rc;
}

/* The names of the tensors this rank writes, one per line. */
static char *name_list(const sl_model *m, sl_hf_layout *l, bool with_dense) {
    sl_hf_entry *ents = NULL;
    const int n = sl_hf_entries(m, l, &ents);
    size_t cap = 1, len = 0;
    for (int i = 0; i < n; i++) cap += strlen(ents[i].e.name) + 1;
    char *out = sl_xmalloc(cap);
    for (int i = 0; i < n; i++) {
        if (!with_dense && ents[i].param->expert_base < 0) continue;
        len += (size_t)sprintf(out + len, "%s\n", ents[i].e.name);
    }
    out[len] = '\0';
    free(ents);
    return out;
}

/* model.safetensors.index.json: {"metadata": {...}, "weight_map": {name: file}}. Every EP
 * rank's name list reaches EP rank 0 by one broadcast per rank. */
static int write_index(const sl_model *m, sl_hf_layout *l, const char *dir, sl_comm *ep, char *err,
                       size_t errlen) {
    const int size = sl_comm_size(ep), rank = sl_comm_rank(ep);
    cJSON *root = rank == 0 ? cJSON_CreateObject() : NULL;
    cJSON *map = NULL;
    if (root) {
        cJSON *meta = cJSON_AddObjectToObject(root, "metadata");
        int64_t total = 0;
        for (int g = 0; g < SL_PGROUP_COUNT; g++)
            total += m->params.size[g] * (g == SL_PGROUP_EXPERT ? size : 1);
        cJSON_AddNumberToObject(meta, "total_size", (double)total * sizeof(float));
        map = cJSON_AddObjectToObject(root, "weight_map");
    }
    for (int r = 0; r < size; r++) {
        char *mine = r == rank ? name_list(m, l, r == 0) : NULL;
        int64_t len = mine ? (int64_t)strlen(mine) + 1 : 0;
        sl_comm_broadcast_bytes(ep, &len, sizeof len, r);
        char *names = mine ? mine : sl_xmalloc((size_t)len);
        sl_comm_broadcast_bytes(ep, names, len, r);
        if (map) {
            char file[64];
            sl_st_hf_shard_name(file, sizeof file, r, size);
            for (char *line = strtok(names, "\n"); line; line = strtok(NULL, "\n"))
                cJSON_AddStringToObject(map, line, file);
        }
        free(names);
    }
    int rc = 0;
    if (root) {
        char *json = cJSON_Print(root);
        char path[4096];
        snprintf(path, sizeof path, "%s/" SL_ST_HF_INDEX, dir);
        rc = sl_write_file_atomic(path, json, strlen(json), err, errlen);
        free(json);
        cJSON_Delete(root);
    }
    return rc;
}

int sl_hf_save(const sl_model *m, const char *dir, sl_comm *ep, char *err, size_t errlen) {
    return sl_hf_save_format(m, SL_HF_QWEN3_MOE, dir, ep, err, errlen);
}

/* After a save into a directory that held another layout's weights (one file, then shards of an
 * expert-parallel run, or the other way): the weight files and index this save did not write.
 * Left there, a loader would find them first (Hugging Face reads model.safetensors before an
 * index; sluice reads a stale index). Removed only once the new files are complete, so the
 * directory always holds a whole set. 0, or -1 with err set. */
static int remove_stale_weights(const char *dir, int shards, char *err, size_t errlen) {
    DIR *d = opendir(dir);
    if (!d) return sl_fail(err, errlen, "%s: cannot list: %s", dir, strerror(errno));
    int rc = 0;
    char keep[64], path[4400];
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        const char *s = e->d_name;
        if (!sl_st_hf_weights_file(s)) continue;
        bool written = shards > 1 && strcmp(s, SL_ST_HF_INDEX) == 0;
        for (int r = 0; r < shards && !written; r++) {
            sl_st_hf_shard_name(keep, sizeof keep, r, shards);
            written = strcmp(s, keep) == 0;
        }
        if (written) continue;
        snprintf(path, sizeof path, "%s/%s", dir, s);
        if (unlink(path) != 0 && rc == 0)
            rc = sl_fail(err, errlen, "%s: cannot remove the previous weights: %s", path,
                         strerror(errno));
    }
    closedir(d);
    return rc;
}

static int save(const sl_model *m, sl_hf_layout *l, const char *dir, sl_comm *ep, char *err,
                size_t errlen) {
    const int size = ep ? sl_comm_size(ep) : 1, rank = ep ? sl_comm_rank(ep) : 0;
    int rc = sl_mkdirs(dir, err, errlen);
    char path[4096], file[64];
    if (size == 1) {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        if (rc == 0) rc = write_tensors(m, l, path, false, true, err, errlen);
        if (rc == 0) rc = write_config(l, dir, err, errlen);
        if (rc == 0) rc = remove_stale_weights(dir, 1, err, errlen);
        return rc;
    }
    /* Expert parallelism: shard r holds EP rank r's experts (and rank 0's the dense
     * parameters), written by that rank: nothing is gathered to one rank. */
    sl_st_hf_shard_name(file, sizeof file, rank, size);
    snprintf(path, sizeof path, "%s/%s", dir, file);
    if (rc == 0) rc = write_tensors(m, l, path, false, rank == 0, err, errlen);
    double fail = rc != 0;
    sl_comm_allreduce_max_f64(ep, &fail, 1);
    if (fail > 0) {
        if (rc == 0)
            snprintf(err, errlen, "another expert-parallel rank failed to write its shard");
        return -1;
    }
    rc = write_index(m, l, dir, ep, err, errlen);
    if (rc == 0 && rank == 0) rc = write_config(l, dir, err, errlen);
    if (rc == 0 && rank == 0) rc = remove_stale_weights(dir, size, err, errlen);
    return rc;
}

int sl_hf_save_format(const sl_model *m, sl_hf_format f, const char *dir, sl_comm *ep, char *err,
                      size_t errlen) {
    sl_hf_layout l;
    sl_hf_layout_init(&l, f, &m->cfg);
    const int rc = save(m, &l, dir, ep, err, errlen);
    sl_hf_layout_free(&l);
    return rc;
}

int sl_hf_save_grads(const sl_model *m, const char *path, char *err, size_t errlen) {
    if (m->params.no_grads)
        return sl_fail(err, errlen, "%s: a model created forward-only has no gradients to save",
                       path);
    sl_hf_layout l;
    sl_hf_layout_init(&l, SL_HF_QWEN3_MOE, &m->cfg);
    const int rc = write_tensors(m, &l, path, true, true, err, errlen);
    sl_hf_layout_free(&l);
    return rc;
}

/* The safetensors files behind a weights path: one file, or the shards named by
 * model.safetensors.index.json. */
typedef struct {
    char dir[4096];
    cJSON *weight_map; /* NULL: a single file */
    char single[4096];
    int nopen;
    char **names;
    sl_st_file **files;
} weight_files;

static int weight_files_open(weight_files *w, const char *path, char *err, size_t errlen) {
    memset(w, 0, sizeof *w);
    struct stat st;
    if (!(stat(path, &st) == 0 && S_ISDIR(st.st_mode))) {
        snprintf(w->single, sizeof w->single, "%s", path);
        return 0;
    }
    snprintf(w->dir, sizeof w->dir, "%s", path);
    char index[4200];
    snprintf(index, sizeof index, "%s/" SL_ST_HF_INDEX, path);
    if (stat(index, &st) != 0) {
        snprintf(w->single, sizeof w->single, "%s/model.safetensors", path);
        return 0;
    }
    size_t len = 0;
    char *json = sl_read_file(index, &len, err, errlen);
    if (!json) return -1;
    cJSON *root = cJSON_Parse(json);
    free(json);
    cJSON *map = root ? cJSON_DetachItemFromObject(root, "weight_map") : NULL;
    cJSON_Delete(root);
    if (!cJSON_IsObject(map)) {
        cJSON_Delete(map);
        return sl_fail(err, errlen, "%s: not JSON with a \"weight_map\" object", index);
    }
    w->weight_map = map;
    return 0;
}

/* The open file holding `name` (NULL + err when the index or the file lacks it). */
static sl_st_file *weight_file_for(weight_files *w, const char *name, char *err, size_t errlen) {
    const char *file = w->single;
    char path[8300];
    if (w->weight_map) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(w->weight_map, name);
        if (!cJSON_IsString(f)) {
            sl_fail(err, errlen, "%s/model.safetensors.index.json: tensor '%s' is missing", w->dir,
                    name);
            return NULL;
        }
        snprintf(path, sizeof path, "%s/%s", w->dir, f->valuestring);
        file = path;
    }
    for (int i = 0; i < w->nopen; i++)
        if (strcmp(w->names[i], file) == 0) return w->files[i];
    sl_st_file *f = sl_st_open(file, err, errlen);
    if (!f) return NULL;
    w->names = sl_xrealloc(w->names, (size_t)(w->nopen + 1) * sizeof *w->names);
    w->files = sl_xrealloc(w->files, (size_t)(w->nopen + 1) * sizeof *w->files);
    w->names[w->nopen] = sl_xstrdup(file);
    w->files[w->nopen++] = f;
    return f;
}

static void weight_files_close(weight_files *w) {
    for (int i = 0; i < w->nopen; i++) {
        sl_st_close(w->files[i]);
        free(w->names[i]);
    }
    free(w->names);
    free(w->files);
    cJSON_Delete(w->weight_map);
}

int sl_hf_load(sl_model *m, const char *path, char *err, size_t errlen) {
    weight_files wf;
    if (weight_files_open(&wf, path, err, errlen) != 0) return -1;
    sl_hf_layout l;
    sl_hf_layout_init(&l, SL_HF_QWEN3_MOE, &m->cfg);
    sl_hf_entry *ents = NULL;
    const int n = sl_hf_entries(m, &l, &ents);
    sl_hf_layout_free(&l); /* the Qwen3-MoE cuts have no pieces */
    int rc = 0;
    float *buf = NULL;
    for (int i = 0; i < n && rc == 0; i++) {
        const sl_ckpt_export_entry *e = &ents[i].e;
        sl_st_file *f = weight_file_for(&wf, e->name, err, errlen);
        if (!f) {
            rc = -1;
            break;
        }
        const int idx = sl_st_find(f, e->name);
        if (idx < 0) {
            snprintf(err, errlen, "%s: tensor '%s' is missing", wf.weight_map ? wf.dir : wf.single,
                     e->name);
            rc = -1;
            break;
        }
        const int64_t *shape = sl_st_shape(f, idx);
        const bool bf16 = strcmp(sl_st_dtype(f, idx), "BF16") == 0; /* upcast exactly */
        if ((!bf16 && strcmp(sl_st_dtype(f, idx), "F32") != 0) || sl_st_ndim(f, idx) != e->ndim ||
            shape[0] != e->shape[0] || (e->ndim > 1 && shape[1] != e->shape[1])) {
            /* every dimension of the file's tensor, so that the one that differs shows */
            char dims[160] = "";
            for (int d = 0, used = 0; d < sl_st_ndim(f, idx) && used < (int)sizeof dims; d++)
                used += snprintf(dims + used, sizeof dims - (size_t)used, "%s%lld", d ? ", " : "",
                                 (long long)shape[d]);
            snprintf(err, errlen,
                     "%s: tensor '%s' is %s [%s], the model expects F32 or BF16 [%lld%s%lld]",
                     wf.weight_map ? wf.dir : wf.single, e->name, sl_st_dtype(f, idx), dims,
                     (long long)e->shape[0], e->ndim > 1 ? ", " : "",
                     (long long)(e->ndim > 1 ? e->shape[1] : 0));
            rc = -1;
            break;
        }
        const int64_t k = entry_numel(&ents[i]);
        buf = sl_xrealloc(buf, (size_t)(k ? k : 1) * sizeof(float));
        if (sl_st_read(f, idx, buf, (size_t)k * (bf16 ? 2 : 4), err, errlen) != 0) {
            rc = -1;
            break;
        }
        if (bf16) { /* in place, from the end: element j's 2 bytes lie below its 4 */
            const uint16_t *h = (const uint16_t *)buf;
            for (int64_t j = k - 1; j >= 0; j--) {
                const uint32_t bits = (uint32_t)h[j] << 16;
                memcpy(&buf[j], &bits, sizeof bits);
            }
        }
        sl_tensor_from_host_range(ents[i].param->master, e->offset, k, buf);
    }
    if (rc == 0) sl_params_sync_compute(&m->params);
    free(buf);
    free(ents);
    weight_files_close(&wf);
    return rc;
}
