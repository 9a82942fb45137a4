/* io/reader_cursor.c - the reader's position as JSON and restoring it (docs/data.md,
 * "Cursors"). A cursor holds the position in the global order (sequences before it, and per
 * corpus the stream position and the anchor of its grid of sequences), so it restores at any
 * number of ranks; written inside a rank's share of a batch it names that rank. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "io/reader_internal.h"

#define CURSOR_FORMAT  "sluice-data-cursor"
#define CURSOR_VERSION 3

char *sl_reader_cursor_json(const sl_reader *r) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "format", CURSOR_FORMAT);
    cJSON_AddNumberToObject(o, "version", CURSOR_VERSION);
    cJSON_AddStringToObject(o, "mode", r->eval ? "eval" : "train");
    char buf[32];
    snprintf(buf, sizeof buf, "%llu", (unsigned long long)r->seed);
    cJSON_AddStringToObject(o, "seed", buf);
    cJSON_AddNumberToObject(o, "seq_len", r->seq_len);
    snprintf(buf, sizeof buf, "%" PRIu64, r->window);
    cJSON_AddStringToObject(o, "shuffle_window", buf);
    cJSON_AddNumberToObject(o, "sequence", (double)r->cplan.g);
    const uint64_t off = r->eval ? 0 : sl_rd_plan_offset(r, &r->cplan);
    if (r->eval || off != 0) {
        /* an eval slice, or inside this rank's share of a batch: only this rank can go on */
        cJSON *k = cJSON_AddObjectToObject(o, "rank");
        cJSON_AddNumberToObject(k, "dp_rank", r->rank);
        cJSON_AddNumberToObject(k, "dp_size", r->dp);
        if (!r->eval) {
            cJSON_AddNumberToObject(k, "global_batch_sequences", (double)r->S);
            cJSON_AddNumberToObject(k, "batch_start", (double)(r->cplan.g - off));
        }
    }
    cJSON *arr = cJSON_AddArrayToObject(o, "corpora");
    for (int i = 0; i < r->n; i++) {
        const sl_rd_corpus *c = &r->c[i];
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "path", c->spec);
        snprintf(buf, sizeof buf, "%08x", c->fingerprint);
        cJSON_AddStringToObject(e, "fingerprint", buf);
        cJSON_AddNumberToObject(e, "tokens", (double)c->n_tokens);
        cJSON_AddNumberToObject(e, "position", (double)r->cplan.pos[i]);
        cJSON_AddNumberToObject(e, "anchor", (double)r->cplan.anchor[i]);
        cJSON_AddNumberToObject(e, "epoch", (double)(r->cplan.pos[i] / c->n_tokens));
        cJSON_AddItemToArray(arr, e);
    }
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!s) sl_fatal("cJSON_PrintUnformatted failed");
    char *copy = sl_xstrdup(s);
    cJSON_free(s);
    return copy;
}

static int get_u64(const cJSON *o, const char *key, uint64_t max, uint64_t *v, char *err,
                   size_t errlen) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(x) || !(x->valuedouble >= 0) || x->valuedouble > (double)max ||
        x->valuedouble != floor(x->valuedouble) || x->valuedouble > 9007199254740992.0)
        return sl_fail(err, errlen, "data cursor: \"%s\" is missing or not an integer in [0, %llu]",
                       key, (unsigned long long)max);
    *v = (uint64_t)x->valuedouble;
    return 0;
}

/* "shuffle_window": the window in tokens as a decimal string (it may be 2^64 - 1, "epoch"). */
static int parse_window(const cJSON *o, uint64_t *w, char *err, size_t errlen) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, "shuffle_window");
    char *end = NULL;
    if (cJSON_IsString(x) && x->valuestring[0] >= '0' && x->valuestring[0] <= '9') {
        errno = 0;
        *w = strtoull(x->valuestring, &end, 10);
        if (errno == 0 && *end == 0) return 0;
    }
    return sl_fail(err, errlen,
                   "data cursor: \"shuffle_window\" is missing or not a decimal string");
}

int sl_reader_restore(sl_reader *r, const char *json, char *err, size_t errlen) {
    cJSON *o = cJSON_Parse(json ? json : "");
    if (!o) return sl_fail(err, errlen, "data cursor: not valid JSON");
    int rc = -1;
    sl_rd_plan pl;
    memset(&pl, 0, sizeof pl);
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(o, "format");
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(o, "version");
    const cJSON *mode = cJSON_GetObjectItemCaseSensitive(o, "mode");
    const cJSON *seed = cJSON_GetObjectItemCaseSensitive(o, "seed");
    const cJSON *rank = cJSON_GetObjectItemCaseSensitive(o, "rank");
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(o, "corpora");
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, CURSOR_FORMAT) != 0) {
        sl_fail(err, errlen, "data cursor: not a sluice data cursor");
        goto done;
    }
    if (cJSON_IsNumber(ver) && ver->valuedouble == 1) {
        sl_fail(err, errlen,
                "data cursor: version 1 records per-rank frame positions of the old data order "
                "and cannot be restored into this reader (version %d: one global order)",
                CURSOR_VERSION);
        goto done;
    }
    /* version 2 cursors come from the stream order without the sequence shuffle: a grid that
     * begins at their position continues them */
    if (!cJSON_IsNumber(ver) || (ver->valuedouble != 2 && ver->valuedouble != CURSOR_VERSION)) {
        sl_fail(err, errlen,
                "data cursor: unsupported version (this build reads versions 2 and %d)",
                CURSOR_VERSION);
        goto done;
    }
    const bool v2 = ver->valuedouble == 2;
    uint64_t window = 0;
    if (!v2 && parse_window(o, &window, err, errlen) != 0) goto done;
    if (!cJSON_IsString(mode) || strcmp(mode->valuestring, r->eval ? "eval" : "train") != 0) {
        sl_fail(err, errlen, "data cursor: written for %s mode, the reader is in %s mode",
                cJSON_IsString(mode) ? mode->valuestring : "?", r->eval ? "eval" : "train");
        goto done;
    }
    char sbuf[32];
    snprintf(sbuf, sizeof sbuf, "%llu", (unsigned long long)r->seed);
    if (!cJSON_IsString(seed) || strcmp(seed->valuestring, sbuf) != 0) {
        sl_fail(err, errlen, "data cursor: written with data seed %s, the reader uses %s",
                cJSON_IsString(seed) ? seed->valuestring : "?", sbuf);
        goto done;
    }
    uint64_t seq_len = 0;
    if (get_u64(o, "sequence", UINT64_MAX, &pl.g, err, errlen) ||
        get_u64(o, "seq_len", INT32_MAX, &seq_len, err, errlen))
        goto done;
    pl.origin = pl.g;
    if (r->eval && !cJSON_IsObject(rank)) {
        sl_fail(err, errlen, "data cursor: an eval cursor must name its data-parallel rank");
        goto done;
    }
    if (cJSON_IsObject(rank)) {
        uint64_t rk = 0, dp = 0, S = 0, start = 0;
        if (get_u64(rank, "dp_rank", INT32_MAX, &rk, err, errlen) ||
            get_u64(rank, "dp_size", INT32_MAX, &dp, err, errlen))
            goto done;
        if (rk != (uint64_t)r->rank || dp != (uint64_t)r->dp) {
            sl_fail(err, errlen,
                    "data cursor: written %s of data-parallel rank %llu of %llu, this is rank "
                    "%d of %d",
                    r->eval ? "for the eval slice" : "inside the share of a global batch",
                    (unsigned long long)rk, (unsigned long long)dp, r->rank, r->dp);
            goto done;
        }
        if (!r->eval) {
            if (get_u64(rank, "global_batch_sequences", UINT64_MAX, &S, err, errlen) ||
                get_u64(rank, "batch_start", pl.g, &start, err, errlen))
                goto done;
            if (S != r->S || seq_len != (uint64_t)r->seq_len || window != r->window ||
                pl.g - start <= r->lo || pl.g - start >= r->hi) {
                sl_fail(err, errlen,
                        "data cursor: written inside rank %llu's share of a global batch (%llu "
                        "sequences of %llu tokens, %llu taken, shuffle window %llu); this "
                        "reader has %llu sequences of %d tokens per batch, shuffle window %llu",
                        (unsigned long long)rk, (unsigned long long)S, (unsigned long long)seq_len,
                        (unsigned long long)(pl.g - start), (unsigned long long)window,
                        (unsigned long long)r->S, r->seq_len, (unsigned long long)r->window);
                goto done;
            }
            pl.origin = start;
        }
    }
    if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) != r->n) {
        sl_fail(err, errlen, "data cursor: has %d corpora, the reader %d",
                cJSON_IsArray(arr) ? cJSON_GetArraySize(arr) : 0, r->n);
        goto done;
    }
    for (int i = 0; i < r->n; i++) {
        const sl_rd_corpus *c = &r->c[i];
        const cJSON *e = cJSON_GetArrayItem(arr, i);
        const cJSON *fpj = cJSON_GetObjectItemCaseSensitive(e, "fingerprint");
        char fpb[16];
        snprintf(fpb, sizeof fpb, "%08x", c->fingerprint);
        if (!cJSON_IsString(fpj) || strcmp(fpj->valuestring, fpb) != 0) {
            sl_fail(err, errlen,
                    "data cursor: corpus %d (%s) was written for different shards (fingerprint "
                    "%s, these shards %s)",
                    i, c->spec, cJSON_IsString(fpj) ? fpj->valuestring : "?", fpb);
            goto done;
        }
        if (get_u64(e, "position", UINT64_MAX, &pl.pos[i], err, errlen)) goto done;
        pl.anchor[i] = pl.pos[i];
        if (!v2) {
            if (get_u64(e, "anchor", pl.pos[i], &pl.anchor[i], err, errlen)) goto done;
            if (seq_len == 0 || (pl.pos[i] - pl.anchor[i]) % seq_len != 0) {
                sl_fail(err, errlen,
                        "data cursor: corpus %d: position %llu is not a whole number of "
                        "sequences of %llu tokens after its anchor %llu",
                        i, (unsigned long long)pl.pos[i], (unsigned long long)seq_len,
                        (unsigned long long)pl.anchor[i]);
                goto done;
            }
        }
    }
    /* written with another sequence length or shuffle window: a new grid of sequences begins
     * where the cursor's own grid may be left (as sl_reader_set_seq_len does) */
    if (!r->eval && (seq_len != (uint64_t)r->seq_len || window != r->window))
        sl_rd_plan_change_grid(r, &pl, (int)seq_len, window);
    sl_rd_stop(r);
    r->failed = false;
    r->at_end = false;
    r->cplan = pl;
    rc = sl_rd_start(r, err, errlen);
done:
    cJSON_Delete(o);
    return rc;
}
