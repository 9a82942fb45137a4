/*
 * io/checkpoint_print.c - the checkpoint's JSON files (rank manifests, the COMMIT index,
 * train_state.json) printed, as the writer saves them (see checkpoint_internal.h and
 * docs/checkpoint-format.md). Parsing them: io/checkpoint_manifest.c; the coverage index:
 * io/checkpoint_index.c.
 *
 * Like its two siblings, this file depends only on cJSON, core/log.c and the safetensors dtype
 * table, so that the fuzz harness (tests/fuzz/fuzz_ckpt.c) builds the three on their own.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "core/log.h"
#include "io/checkpoint_internal.h"

/* An integer as its decimal digits. cJSON prints a number above INT_MAX with "%1.15g" whenever
 * that reads back within a relative DBL_EPSILON, so 7999999999999999 came out as 8e+15 (the
 * checkpoint fuzzer's finding): every integer field (steps, sizes, offsets, shapes; the parsers
 * take them up to 2^53) is written exactly instead. */
static cJSON *int_json(int64_t v) {
    char buf[32];
    snprintf(buf, sizeof buf, "%" PRId64, v);
    cJSON *j = cJSON_CreateRaw(buf);
    if (!j) sl_fatal("checkpoint: out of memory printing a number");
    return j;
}

static void add_int(cJSON *o, const char *key, int64_t v) {
    cJSON_AddItemToObject(o, key, int_json(v));
}

static cJSON *shape_json(int ndim, const int64_t *shape) {
    cJSON *a = cJSON_CreateArray();
    for (int d = 0; d < ndim; d++) cJSON_AddItemToArray(a, int_json(shape[d]));
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

/* ---- manifest ---- */

char *ck_manifest_print(const ck_manifest *m) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "format", CK_MANIFEST_FORMAT);
    add_int(root, "format_version", SL_CKPT_FORMAT_VERSION);
    add_int(root, "step", m->step);
    add_int(root, "rank", m->rank);
    add_int(root, "world_size", m->world_size);
    cJSON *files = cJSON_AddArrayToObject(root, "files");
    for (int i = 0; i < m->nfiles; i++) {
        cJSON *f = cJSON_CreateObject();
        cJSON_AddStringToObject(f, "file", m->files[i].name);
        add_int(f, "bytes", m->files[i].bytes);
        cJSON_AddItemToArray(files, f);
    }
    cJSON *pieces = cJSON_AddArrayToObject(root, "pieces");
    for (int i = 0; i < m->npieces; i++) {
        const ck_piece *pc = &m->pieces[i];
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "tensor", pc->tensor);
        cJSON_AddStringToObject(j, "dtype", pc->dtype);
        cJSON_AddItemToObject(j, "shape", shape_json(pc->ndim, pc->shape));
        add_int(j, "begin", pc->begin);
        add_int(j, "end", pc->end);
        cJSON_AddStringToObject(j, "file", pc->file);
        add_int(j, "offset", pc->offset);
        add_int(j, "crc32c", pc->crc32c);
        cJSON_AddItemToArray(pieces, j);
    }
    return print_free(root);
}

/* ---- COMMIT ---- */

static cJSON *indexed_json(const ck_indexed *x, bool with_rank) {
    cJSON *j = cJSON_CreateObject();
    if (with_rank) add_int(j, "rank", x->rank);
    cJSON_AddStringToObject(j, "file", x->file);
    add_int(j, "bytes", x->bytes);
    add_int(j, "crc32c", x->crc32c);
    return j;
}

char *ck_commit_print(const ck_commit *c) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "format", CK_FORMAT_NAME);
    add_int(root, "format_version", SL_CKPT_FORMAT_VERSION);
    add_int(root, "step", c->step);
    add_int(root, "world_size", c->world_size);
    cJSON_AddItemToObject(root, "train_state", indexed_json(&c->state, false));
    cJSON *ms = cJSON_AddArrayToObject(root, "manifests");
    for (int i = 0; i < c->world_size; i++)
        cJSON_AddItemToArray(ms, indexed_json(&c->manifests[i], true));
    return print_free(root);
}

/* ---- train_state.json ---- */

char *ck_state_print(int64_t step, int world_size, const char *sluice_version,
                     const cJSON *trainer) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "format", CK_FORMAT_NAME);
    add_int(root, "format_version", SL_CKPT_FORMAT_VERSION);
    cJSON_AddStringToObject(root, "sluice_version", sluice_version);
    add_int(root, "step", step);
    add_int(root, "world_size", world_size);
    cJSON *t = trainer ? cJSON_Duplicate(trainer, 1) : cJSON_CreateObject();
    if (!t) sl_fatal("checkpoint: out of memory copying the train state");
    cJSON_AddItemToObject(root, "trainer", t);
    return print_free(root);
}
