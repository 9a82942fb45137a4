/* io/reader.c - the streaming reader: epoch order, rank partition, prefetch thread, packing,
 * corpus mixture and cursors (see reader.h and docs/data.md). */
#include "io/reader.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/rng.h"
#include "io/crc32c.h"
#include "io/paths.h"
#include "io/shard.h"

#define CURSOR_FORMAT  "sluice-data-cursor"
#define CURSOR_VERSION 1
#define MSG_LEN        1024

typedef enum { SLOT_DATA = 0, SLOT_END = 1, SLOT_ERROR = 2 } slot_kind;

typedef struct {
    slot_kind kind;
    void *tokens;
    size_t tokens_cap;
    uint32_t *docs;
    size_t docs_cap;
    uint32_t n, n_docs, tb;
    uint64_t epoch, k;
    /* where the tokens came from, for the token-id check done while copying */
    const char *path;
    uint64_t frame;
    sl_shard_frame entry;
    uint32_t vocab;
    char msg[MSG_LEN];
} slot;

typedef struct {
    char *path;
    sl_shard_header h;
} shard_info;

typedef struct {
    /* what the corpus is */
    char *spec;
    double weight; /* normalised */
    int index;
    int n_shards;
    shard_info *shards;
    uint64_t n_units, n_tokens, units_per_rank;
    uint32_t fingerprint;
    /* consumer state (the caller's thread) */
    uint64_t c_epoch, c_k;
    uint32_t c_off, doc_i;
    bool resume; /* the next slot taken continues at c_off (after open/restore) */
    bool has_carry, carry_doc;
    int32_t carry;
    uint64_t consumed;
    bool have_cur;
    /* the queue (r->mu) */
    slot *slots;
    int n_slots, q_head, q_count;
    /* producer state (the background thread, or the caller while it is stopped) */
    uint64_t p_epoch, p_k;
    bool p_done;
    bool prev_valid;
    uint32_t prev_shard;
    uint64_t prev_frame;
    sl_shard *sh;
    int sh_idx;
    sl_frame_buf fb;
    uint64_t so_epoch;
    bool so_valid;
    uint32_t *so_perm; /* shard order of so_epoch */
    uint64_t *so_cum;  /* first epoch position of each shard in that order */
    uint64_t fo_epoch;
    uint32_t fo_shard;
    bool fo_valid;
    uint32_t *fo_perm; /* frame order of shard fo_shard in epoch fo_epoch */
    uint64_t fo_cap;
} corpus;

struct sl_reader {
    uint64_t seed;
    int rank, dp, seq_len;
    bool eval;
    uint32_t vocab;
    int n;
    corpus c[SL_MAX_CORPORA];
    pthread_t th;
    bool running, stop;
    pthread_mutex_t mu;
    pthread_cond_t cv_prod, cv_cons;
    bool failed;
    char fail_msg[MSG_LEN];
    uint64_t waits;
};

/* ---- deterministic order ---- */

/* Fisher-Yates with a splitmix64 stream keyed by (seed, corpus, epoch, shard). */
static void shuffle(uint32_t *a, uint64_t n, uint64_t seed, uint64_t corpus_i, uint64_t epoch,
                    uint64_t what) {
    uint64_t s = sl_mix64(sl_mix64(sl_mix64(sl_mix64(seed) ^ corpus_i) ^ epoch) ^ what);
    for (uint64_t i = n; i > 1; i--) {
        s += 0x9E3779B97F4A7C15ull;
        uint64_t j = sl_mix64(s) % i;
        uint32_t t = a[i - 1];
        a[i - 1] = a[j];
        a[j] = t;
    }
}

static void ensure_shard_order(sl_reader *r, corpus *c, uint64_t epoch) {
    if (c->so_valid && c->so_epoch == epoch) return;
    for (int i = 0; i < c->n_shards; i++) c->so_perm[i] = (uint32_t)i;
    if (!r->eval)
        shuffle(c->so_perm, (uint64_t)c->n_shards, r->seed, (uint64_t)c->index, epoch,
                0xFFFFFFFFull);
    c->so_cum[0] = 0;
    for (int i = 0; i < c->n_shards; i++)
        c->so_cum[i + 1] = c->so_cum[i] + c->shards[c->so_perm[i]].h.n_frames;
    c->so_epoch = epoch;
    c->so_valid = true;
}

static void ensure_frame_order(sl_reader *r, corpus *c, uint64_t epoch, uint32_t s) {
    if (c->fo_valid && c->fo_epoch == epoch && c->fo_shard == s) return;
    uint64_t n = c->shards[s].h.n_frames;
    if (n > c->fo_cap) {
        c->fo_perm = sl_xrealloc(c->fo_perm, n * sizeof(uint32_t));
        c->fo_cap = n;
    }
    for (uint64_t i = 0; i < n; i++) c->fo_perm[i] = (uint32_t)i;
    if (!r->eval) shuffle(c->fo_perm, n, r->seed, (uint64_t)c->index, epoch, s);
    c->fo_epoch = epoch;
    c->fo_shard = s;
    c->fo_valid = true;
}

/* The k-th frame of this rank in `epoch`. */
static void map_unit(sl_reader *r, corpus *c, uint64_t epoch, uint64_t k, uint32_t *shard,
                     uint64_t *frame) {
    uint64_t p = k * (uint64_t)r->dp + (uint64_t)r->rank;
    ensure_shard_order(r, c, epoch);
    int lo = 0, hi = c->n_shards - 1; /* last j with so_cum[j] <= p */
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (c->so_cum[mid] <= p)
            lo = mid;
        else
            hi = mid - 1;
    }
    uint32_t s = c->so_perm[lo];
    ensure_frame_order(r, c, epoch, s);
    *shard = s;
    *frame = c->fo_perm[p - c->so_cum[lo]];
}

static void set_prev(sl_reader *r, corpus *c) {
    c->prev_valid = false;
    if (c->p_k > 0 && c->p_k <= c->units_per_rank) {
        map_unit(r, c, c->p_epoch, c->p_k - 1, &c->prev_shard, &c->prev_frame);
        c->prev_valid = true;
    } else if (c->p_k == 0 && c->p_epoch > 0 && !r->eval) {
        map_unit(r, c, c->p_epoch - 1, c->units_per_rank - 1, &c->prev_shard, &c->prev_frame);
        c->prev_valid = true;
    }
}

/* ---- producer ---- */

static void produce(sl_reader *r, corpus *c, slot *s) {
    if (c->p_k >= c->units_per_rank) {
        if (r->eval) {
            s->kind = SLOT_END;
            s->epoch = c->p_epoch;
            s->k = c->p_k;
            s->n = 0;
            c->p_done = true;
            return;
        }
        c->p_epoch++;
        c->p_k = 0;
    }
    uint32_t si;
    uint64_t fi;
    map_unit(r, c, c->p_epoch, c->p_k, &si, &fi);
    s->epoch = c->p_epoch;
    s->k = c->p_k;
    s->kind = SLOT_ERROR;
    s->n = 0;
    const shard_info *info = &c->shards[si];
    if (c->sh_idx != (int)si) {
        sl_shard_close(c->sh);
        c->sh = NULL;
        c->sh_idx = -1;
        c->sh = sl_shard_open(info->path, s->msg, sizeof s->msg);
        if (!c->sh) {
            c->p_done = true;
            return;
        }
        const sl_shard_header *h = sl_shard_hdr(c->sh);
        if (h->header_crc != info->h.header_crc) {
            snprintf(s->msg, sizeof s->msg,
                     "%s: the shard changed on disk after the reader opened it", info->path);
            c->p_done = true;
            return;
        }
        c->sh_idx = (int)si;
    }
    c->fb.skip_vocab_check = true; /* next() checks the ids while it copies them */
    if (sl_shard_read_frame(c->sh, fi, &c->fb, s->msg, sizeof s->msg) != 0) {
        c->p_done = true;
        return;
    }
    /* hand the decoded tokens over by swapping buffers */
    void *t = s->tokens;
    size_t tc = s->tokens_cap;
    s->tokens = c->fb.tokens;
    s->tokens_cap = c->fb.tokens_cap;
    c->fb.tokens = t;
    c->fb.tokens_cap = tc;
    s->n = c->fb.n_tokens;
    s->tb = info->h.token_bytes;
    s->path = info->path;
    s->frame = fi;
    s->entry = sl_shard_frames(c->sh)[fi];
    s->vocab = info->h.vocab_size;
    bool contiguous = c->prev_valid && c->prev_shard == si && c->prev_frame + 1 == fi;
    bool has0 = c->fb.n_docs > 0 && c->fb.docs[0] == 0;
    uint32_t extra = (!contiguous && !has0) ? 1 : 0;
    sl_xreserve((void **)&s->docs, &s->docs_cap, sizeof(uint32_t) * ((size_t)c->fb.n_docs + 1));
    if (extra) s->docs[0] = 0;
    if (c->fb.n_docs) memcpy(s->docs + extra, c->fb.docs, sizeof(uint32_t) * c->fb.n_docs);
    s->n_docs = c->fb.n_docs + extra;
    s->kind = SLOT_DATA;
    c->prev_valid = true;
    c->prev_shard = si;
    c->prev_frame = fi;
    c->p_k++;
}

static void *producer_main(void *arg) {
    sl_reader *r = arg;
    pthread_mutex_lock(&r->mu);
    while (!r->stop) {
        corpus *best = NULL;
        for (int i = 0; i < r->n; i++) {
            corpus *c = &r->c[i];
            if (c->p_done || c->q_count >= c->n_slots) continue;
            if (!best || c->q_count < best->q_count) best = c;
        }
        if (!best) {
            pthread_cond_wait(&r->cv_prod, &r->mu);
            continue;
        }
        slot *s = &best->slots[(best->q_head + best->q_count) % best->n_slots];
        pthread_mutex_unlock(&r->mu);
        produce(r, best, s);
        pthread_mutex_lock(&r->mu);
        best->q_count++;
        pthread_cond_broadcast(&r->cv_cons);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

static void stop_thread(sl_reader *r) {
    if (!r->running) return;
    pthread_mutex_lock(&r->mu);
    r->stop = true;
    pthread_cond_broadcast(&r->cv_prod);
    pthread_mutex_unlock(&r->mu);
    pthread_join(r->th, NULL);
    r->running = false;
    r->stop = false;
}

static int start_thread(sl_reader *r, char *err, size_t errlen) {
    r->stop = false;
    if (pthread_create(&r->th, NULL, producer_main, r) != 0)
        return sl_fail(err, errlen, "cannot start the data reader thread");
    r->running = true;
    return 0;
}

/* Positions corpus c (thread stopped) at (epoch, k, off). */
static void position(sl_reader *r, corpus *c, uint64_t epoch, uint64_t k, uint32_t off) {
    c->q_head = c->q_count = 0;
    c->have_cur = false;
    c->c_epoch = epoch;
    c->c_k = k;
    c->c_off = off;
    c->doc_i = 0;
    c->resume = true;
    c->p_epoch = epoch;
    c->p_k = k;
    c->p_done = false;
    set_prev(r, c);
}

/* ---- opening ---- */

static void free_corpus(corpus *c) {
    for (int i = 0; i < c->n_shards; i++) free(c->shards[i].path);
    free(c->shards);
    free(c->spec);
    if (c->slots)
        for (int i = 0; i < c->n_slots; i++) free(c->slots[i].tokens), free(c->slots[i].docs);
    free(c->slots);
    sl_shard_close(c->sh);
    sl_frame_buf_free(&c->fb);
    free(c->so_perm);
    free(c->so_cum);
    free(c->fo_perm);
}

static int load_corpus(sl_reader *r, corpus *c, const char *spec, char *err, size_t errlen) {
    char **files;
    int nf;
    if (sl_data_resolve(spec, &files, &nf, err, errlen) != 0) return -1;
    c->spec = sl_xstrdup(spec);
    c->shards = sl_xcalloc((size_t)nf, sizeof(shard_info));
    c->n_shards = nf;
    c->sh_idx = -1;
    uint32_t fp = 0;
    for (int i = 0; i < nf; i++) {
        shard_info *s = &c->shards[i];
        s->path = files[i];
        files[i] = NULL;
        if (sl_shard_read_header(s->path, &s->h, err, errlen) != 0) {
            sl_data_paths_free(files, nf);
            return -1;
        }
        if (s->h.n_frames > UINT32_MAX) {
            sl_data_paths_free(files, nf);
            return sl_fail(err, errlen, "%s: too many frames", s->path);
        }
        if (r->vocab == 0) r->vocab = s->h.vocab_size;
        if (s->h.vocab_size != r->vocab) {
            sl_data_paths_free(files, nf);
            return sl_fail(err, errlen,
                           "%s: vocabulary size %u differs from %u in the other shards (every "
                           "corpus must use the same tokenizer)",
                           s->path, s->h.vocab_size, r->vocab);
        }
        c->n_units += s->h.n_frames;
        c->n_tokens += s->h.n_tokens;
        unsigned char b[20];
        sl_put32(b, s->h.header_crc);
        sl_put64(b + 4, s->h.n_tokens);
        sl_put64(b + 12, s->h.n_frames);
        fp = sl_crc32c(fp, b, sizeof b);
    }
    sl_data_paths_free(files, nf);
    c->fingerprint = fp;
    if (c->n_tokens == 0)
        return sl_fail(err, errlen, "%s: empty corpus: its shards hold no tokens", spec);
    if (!r->eval && c->n_units < (uint64_t)r->dp)
        return sl_fail(err, errlen,
                       "%s: the corpus has %llu frames, fewer than the %d data-parallel ranks; "
                       "rebuild it with a smaller --frame-tokens",
                       spec, (unsigned long long)c->n_units, r->dp);
    uint64_t rk = (uint64_t)r->rank, dp = (uint64_t)r->dp;
    c->units_per_rank = c->n_units > rk ? (c->n_units - rk + dp - 1) / dp : 0;
    c->so_perm = sl_xmalloc(sizeof(uint32_t) * (size_t)nf);
    c->so_cum = sl_xmalloc(sizeof(uint64_t) * ((size_t)nf + 1));
    return 0;
}

sl_reader *sl_reader_open(const sl_reader_opts *o, char *err, size_t errlen) {
    if (!o || !o->data) {
        sl_fail(err, errlen, "data reader: no data configuration");
        return NULL;
    }
    if (o->dp_size < 1 || o->dp_rank < 0 || o->dp_rank >= o->dp_size) {
        sl_fail(err, errlen, "data reader: data-parallel rank %d of %d is invalid", o->dp_rank,
                o->dp_size);
        return NULL;
    }
    if (o->seq_len < 1) {
        sl_fail(err, errlen, "data reader: seq_len %d must be positive", o->seq_len);
        return NULL;
    }
    const sl_data_config *d = o->data;
    sl_reader *r = sl_xcalloc(1, sizeof *r);
    r->seed = d->seed;
    r->rank = o->dp_rank;
    r->dp = o->dp_size;
    r->seq_len = o->seq_len;
    r->eval = o->eval;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv_prod, NULL);
    pthread_cond_init(&r->cv_cons, NULL);
    int prefetch = d->prefetch > 0 ? (d->prefetch < 1024 ? d->prefetch : 1024) : 4;
    double wsum = 0;
    if (o->eval) {
        if (!d->eval_path[0]) {
            sl_fail(err, errlen, "data.eval_path is not set");
            goto bad;
        }
        r->n = 1;
        r->c[0].weight = 1;
        if (load_corpus(r, &r->c[0], d->eval_path, err, errlen) != 0) goto bad;
    } else {
        if (d->n_train < 1 || d->n_train > SL_MAX_CORPORA) {
            sl_fail(err, errlen, "data.train: %d corpora (need 1 to %d)", d->n_train,
                    SL_MAX_CORPORA);
            goto bad;
        }
        for (int i = 0; i < d->n_train; i++) {
            double w = d->train[i].weight;
            if (!(w > 0) || !isfinite(w)) {
                sl_fail(err, errlen, "data.train[%d] (%s): weight %g must be positive", i,
                        d->train[i].path, w);
                goto bad;
            }
            wsum += w;
        }
        r->n = d->n_train;
        for (int i = 0; i < d->n_train; i++) {
            r->c[i].index = i;
            r->c[i].weight = d->train[i].weight / wsum;
            if (load_corpus(r, &r->c[i], d->train[i].path, err, errlen) != 0) goto bad;
        }
    }
    for (int i = 0; i < r->n; i++) {
        corpus *c = &r->c[i];
        c->n_slots = prefetch + 1;
        c->slots = sl_xcalloc((size_t)c->n_slots, sizeof(slot));
        position(r, c, 0, 0, 0);
    }
    if (start_thread(r, err, errlen) != 0) goto bad;
    return r;
bad:
    sl_reader_close(r);
    return NULL;
}

void sl_reader_close(sl_reader *r) {
    if (!r) return;
    stop_thread(r);
    for (int i = 0; i < r->n; i++) free_corpus(&r->c[i]);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv_prod);
    pthread_cond_destroy(&r->cv_cons);
    free(r);
}

int sl_reader_vocab_size(const sl_reader *r) {
    return (int)r->vocab;
}

int sl_reader_set_seq_len(sl_reader *r, int seq_len) {
    if (seq_len < 1) return -1;
    r->seq_len = seq_len;
    return 0;
}

/* ---- consumer ---- */

static slot *acquire(sl_reader *r, corpus *c) {
    pthread_mutex_lock(&r->mu);
    if (c->have_cur) {
        c->q_head = (c->q_head + 1) % c->n_slots;
        c->q_count--;
        c->have_cur = false;
        pthread_cond_signal(&r->cv_prod);
    }
    if (c->q_count == 0) r->waits++;
    while (c->q_count == 0) pthread_cond_wait(&r->cv_cons, &r->mu);
    c->have_cur = true;
    slot *s = &c->slots[c->q_head];
    pthread_mutex_unlock(&r->mu);
    return s;
}

/* Copies k tokens of slot s from offset `off` as int32 and checks them against the vocabulary
 * in the same pass. */
static int copy_checked(sl_reader *r, const slot *s, uint32_t off, uint32_t k, int32_t *dst,
                        char *err, size_t errlen) {
    uint32_t m = 0;
    if (s->tb == 2) {
        const uint16_t *src = (const uint16_t *)s->tokens + off;
        uint16_t m16 = 0;
        for (uint32_t j = 0; j < k; j++) {
            uint16_t v = src[j];
            m16 = v > m16 ? v : m16;
            dst[j] = v;
        }
        m = m16;
    } else {
        const uint32_t *src = (const uint32_t *)s->tokens + off;
        for (uint32_t j = 0; j < k; j++) {
            uint32_t v = src[j];
            m = v > m ? v : m;
            dst[j] = (int32_t)v;
        }
    }
    if (m < s->vocab) return 0;
    uint32_t j = 0;
    while ((uint32_t)dst[j] < s->vocab) j++;
    r->failed = true;
    sl_shard_vocab_error(s->path, s->frame, &s->entry, off + j, (uint32_t)dst[j], s->vocab,
                         r->fail_msg, sizeof r->fail_msg);
    return sl_fail(err, errlen, "%s", r->fail_msg);
}

static int choose(const sl_reader *r) {
    if (r->n == 1) return 0;
    double total = 0;
    for (int i = 0; i < r->n; i++) total += (double)r->c[i].consumed;
    int best = 0;
    double bv = -INFINITY;
    for (int i = 0; i < r->n; i++) {
        double v = r->c[i].weight * (total + r->seq_len) - (double)r->c[i].consumed;
        if (v > bv) bv = v, best = i;
    }
    return best;
}

int sl_reader_next(sl_reader *r, int32_t *tokens, int32_t *doc_start, int *n_docs, char *err,
                   size_t errlen) {
    if (n_docs) *n_docs = 0;
    if (r->failed) return sl_fail(err, errlen, "%s", r->fail_msg);
    corpus *c = &r->c[choose(r)];
    const uint32_t need = (uint32_t)r->seq_len + 1;
    uint32_t i = 0;
    int nd = 0;
    int64_t last_doc = -1;
    if (c->has_carry) {
        tokens[0] = c->carry;
        if (c->carry_doc) {
            if (doc_start) doc_start[nd] = 0;
            nd++;
            last_doc = 0;
        }
        i = 1;
    }
    while (i < need) {
        slot *s = c->have_cur ? &c->slots[c->q_head] : NULL;
        if (!s || (s->kind == SLOT_DATA && c->c_off >= s->n)) {
            s = acquire(r, c);
            c->c_epoch = s->epoch;
            c->c_k = s->k;
            if (c->resume) {
                c->resume = false;
                if (s->kind == SLOT_DATA && c->c_off > s->n) {
                    r->failed = true;
                    snprintf(r->fail_msg, sizeof r->fail_msg,
                             "%s: the cursor's offset %u is past the %u tokens of its frame: the "
                             "cursor does not match this data",
                             c->spec, c->c_off, s->n);
                    return sl_fail(err, errlen, "%s", r->fail_msg);
                }
            } else {
                c->c_off = 0;
            }
            c->doc_i = 0;
            if (s->kind == SLOT_DATA)
                while (c->doc_i < s->n_docs && s->docs[c->doc_i] < c->c_off) c->doc_i++;
        }
        if (s->kind == SLOT_END) {
            c->c_off = 0;
            return 0;
        }
        if (s->kind == SLOT_ERROR) {
            r->failed = true;
            snprintf(r->fail_msg, sizeof r->fail_msg, "%s", s->msg);
            return sl_fail(err, errlen, "%s", r->fail_msg);
        }
        uint32_t k = s->n - c->c_off;
        if (k > need - i) k = need - i;
        if (copy_checked(r, s, c->c_off, k, tokens + i, err, errlen) != 0) return -1;
        uint32_t end = c->c_off + k;
        while (c->doc_i < s->n_docs && s->docs[c->doc_i] < end) {
            int32_t at = (int32_t)(i + s->docs[c->doc_i] - c->c_off);
            if (doc_start) doc_start[nd] = at;
            nd++;
            last_doc = at;
            c->doc_i++;
        }
        i += k;
        c->c_off = end;
    }
    c->has_carry = true;
    c->carry = tokens[r->seq_len];
    c->carry_doc = last_doc == r->seq_len;
    c->consumed += (uint64_t)r->seq_len;
    if (n_docs) *n_docs = nd;
    return 1;
}

void sl_reader_get_stats(const sl_reader *r, sl_reader_stats *s) {
    memset(s, 0, sizeof *s);
    s->n_corpora = r->n;
    for (int i = 0; i < r->n; i++) {
        s->tokens[i] = r->c[i].n_tokens;
        s->consumed[i] = r->c[i].consumed;
        s->epoch[i] = r->c[i].c_epoch;
    }
    s->waits = r->waits;
}

/* ---- cursor ---- */

char *sl_reader_cursor_json(const sl_reader *r) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "format", CURSOR_FORMAT);
    cJSON_AddNumberToObject(o, "version", CURSOR_VERSION);
    cJSON_AddStringToObject(o, "mode", r->eval ? "eval" : "train");
    char buf[32];
    snprintf(buf, sizeof buf, "%llu", (unsigned long long)r->seed);
    cJSON_AddStringToObject(o, "seed", buf);
    cJSON_AddNumberToObject(o, "dp_rank", r->rank);
    cJSON_AddNumberToObject(o, "dp_size", r->dp);
    cJSON_AddNumberToObject(o, "seq_len", r->seq_len);
    cJSON *arr = cJSON_AddArrayToObject(o, "corpora");
    for (int i = 0; i < r->n; i++) {
        const corpus *c = &r->c[i];
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "path", c->spec);
        snprintf(buf, sizeof buf, "%08x", c->fingerprint);
        cJSON_AddStringToObject(e, "fingerprint", buf);
        cJSON_AddNumberToObject(e, "tokens", (double)c->n_tokens);
        cJSON_AddNumberToObject(e, "epoch", (double)c->c_epoch);
        cJSON_AddNumberToObject(e, "frame", (double)c->c_k);
        cJSON_AddNumberToObject(e, "offset", c->c_off);
        cJSON_AddNumberToObject(e, "consumed", (double)c->consumed);
        if (c->has_carry) {
            cJSON_AddNumberToObject(e, "carry", c->carry);
            cJSON_AddBoolToObject(e, "carry_doc", c->carry_doc);
        } else {
            cJSON_AddNullToObject(e, "carry");
        }
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

int sl_reader_restore(sl_reader *r, const char *json, char *err, size_t errlen) {
    cJSON *o = cJSON_Parse(json ? json : "");
    if (!o) return sl_fail(err, errlen, "data cursor: not valid JSON");
    int rc = -1;
    struct {
        uint64_t epoch, k, off, consumed;
        bool has_carry, carry_doc;
        int32_t carry;
    } st[SL_MAX_CORPORA];
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(o, "format");
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(o, "version");
    const cJSON *mode = cJSON_GetObjectItemCaseSensitive(o, "mode");
    const cJSON *seed = cJSON_GetObjectItemCaseSensitive(o, "seed");
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(o, "corpora");
    uint64_t rank = 0, dp = 0;
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, CURSOR_FORMAT) != 0) {
        sl_fail(err, errlen, "data cursor: not a sluice data cursor");
        goto done;
    }
    if (!cJSON_IsNumber(ver) || ver->valuedouble != CURSOR_VERSION) {
        sl_fail(err, errlen, "data cursor: unsupported version (this build reads version %d)",
                CURSOR_VERSION);
        goto done;
    }
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
    if (get_u64(o, "dp_rank", INT32_MAX, &rank, err, errlen) ||
        get_u64(o, "dp_size", INT32_MAX, &dp, err, errlen))
        goto done;
    if (rank != (uint64_t)r->rank || dp != (uint64_t)r->dp) {
        sl_fail(err, errlen,
                "data cursor: written by data-parallel rank %llu of %llu, this is rank %d of %d "
                "(the partition differs)",
                (unsigned long long)rank, (unsigned long long)dp, r->rank, r->dp);
        goto done;
    }
    if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) != r->n) {
        sl_fail(err, errlen, "data cursor: has %d corpora, the reader %d",
                cJSON_IsArray(arr) ? cJSON_GetArraySize(arr) : 0, r->n);
        goto done;
    }
    for (int i = 0; i < r->n; i++) {
        const corpus *c = &r->c[i];
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
        uint64_t kmax = r->eval ? c->units_per_rank : c->units_per_rank - 1;
        if (get_u64(e, "epoch", r->eval ? 0 : UINT32_MAX, &st[i].epoch, err, errlen) ||
            get_u64(e, "frame", kmax, &st[i].k, err, errlen) ||
            get_u64(e, "offset", SL_SHARD_MAX_FRAME_TOKENS, &st[i].off, err, errlen) ||
            get_u64(e, "consumed", UINT64_MAX, &st[i].consumed, err, errlen))
            goto done;
        const cJSON *carry = cJSON_GetObjectItemCaseSensitive(e, "carry");
        st[i].has_carry = !cJSON_IsNull(carry);
        st[i].carry = 0;
        st[i].carry_doc = false;
        if (st[i].has_carry) {
            uint64_t cv = 0;
            if (get_u64(e, "carry", r->vocab - 1, &cv, err, errlen)) goto done;
            st[i].carry = (int32_t)cv;
            st[i].carry_doc = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "carry_doc"));
        }
    }
    stop_thread(r);
    r->failed = false;
    for (int i = 0; i < r->n; i++) {
        corpus *c = &r->c[i];
        position(r, c, st[i].epoch, st[i].k, (uint32_t)st[i].off);
        c->consumed = st[i].consumed;
        c->has_carry = st[i].has_carry;
        c->carry = st[i].carry;
        c->carry_doc = st[i].carry_doc;
    }
    rc = start_thread(r, err, errlen);
done:
    cJSON_Delete(o);
    return rc;
}
