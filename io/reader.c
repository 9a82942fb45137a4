/* io/reader.c - the streaming reader: epoch order, the global sequence order and this rank's
 * share of it, the prefetch thread, packing, corpus mixture, batch hashes and cursors (see
 * reader.h and docs/data.md).
 *
 * Two copies of one deterministic plan run side by side: the background thread walks it ahead
 * to find and decode the frames this rank's sequences touch (in the order they are first
 * needed, each once), and next() walks it to know which corpus and stream position its next
 * sequence has. Both skip the other ranks' sequences by arithmetic on token positions, so a
 * frame no sequence of this rank touches is never read. */
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
#define CURSOR_VERSION 2
#define MSG_LEN        1024

typedef enum { SLOT_DATA = 0, SLOT_END = 1, SLOT_ERROR = 2 } slot_kind;

/* One decoded frame (or the end of an eval slice, or an error) at its place in the stream. */
typedef struct {
    slot_kind kind;
    int corpus;
    uint64_t start; /* stream position of tokens[0] */
    uint64_t epoch;
    void *tokens;
    size_t tokens_cap;
    uint32_t *docs; /* document starts inside the frame, increasing */
    size_t docs_cap;
    uint32_t n, n_docs, tb;
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

/* The producer's place in a corpus's stream. Training: the shard at position j of epoch e's
 * shard order begins at stream position sstart; with have_frame, the frame at position i of that
 * shard's frame order holds [fstart, fstart + fn). Eval: j is the unit (this rank's j-th frame
 * in file order) and sstart is unused. */
typedef struct {
    bool valid;
    uint64_t e;
    uint32_t j;
    uint64_t sstart;
    bool have_frame;
    uint32_t i;
    uint64_t fstart;
    uint32_t fn;
    uint32_t shard;
    uint64_t frame;
} walker;

typedef struct {
    /* what the corpus is */
    char *spec;
    double weight; /* normalised */
    int index;
    int n_shards;
    shard_info *shards;
    uint64_t n_frames, n_tokens, units_per_rank; /* units_per_rank: eval only */
    uint32_t fingerprint;
    /* consumer state (the caller's thread) */
    slot cur; /* the frame this corpus's last sequence ended in */
    bool have_cur;
    uint64_t delivered, last_epoch;
    /* producer state (the background thread, or the caller while it is stopped) */
    walker w;
    bool planned; /* last_planned holds the stream position of the last frame queued */
    uint64_t last_planned;
    sl_shard *sh;
    int sh_idx;
    uint64_t so_epoch;
    bool so_valid;
    uint32_t so_first; /* position of the first shard with tokens in that order */
    uint32_t *so_perm; /* shard order of so_epoch */
    uint64_t *so_cum;  /* eval: first file-order frame of each shard */
    uint64_t fo_epoch;
    uint32_t fo_shard;
    bool fo_valid;
    uint32_t *fo_perm; /* frame order of shard fo_shard in epoch fo_epoch */
    uint64_t fo_cap;
} corpus;

/* A position in the global sequence order: g sequences lie before it, batches begin at every
 * origin + t * S, and pos[c] is where corpus c's next sequence starts in its stream. */
typedef struct {
    uint64_t g, origin;
    uint64_t pos[SL_MAX_CORPORA];
} plan;

struct sl_reader {
    uint64_t seed;
    int rank, dp, seq_len;
    uint64_t S, lo, hi; /* sequences per global batch; this rank's share [lo, hi) of each */
    bool eval;
    uint32_t vocab;
    const char *vocab_shard; /* the first shard (its path lives in the corpus) */
    const char *tok_shard;   /* the first shard recording a tokenizer, NULL: none does */
    uint8_t tok_hash[SL_SHARD_TOKENIZER_HASH];
    int n;
    corpus c[SL_MAX_CORPORA];
    plan cplan, pplan; /* consumer's and producer's */
    /* the queue of decoded frames, in the order next() needs them (r->mu) */
    slot *ring;
    int n_ring, q_head, q_count;
    sl_frame_buf fb; /* the producer's decoding buffers */
    uint64_t frames;
    pthread_t th;
    bool running, stop;
    pthread_mutex_t mu;
    pthread_cond_t cv_prod, cv_cons;
    bool failed, at_end;
    char fail_msg[MSG_LEN];
    uint64_t waits, hash;
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

static void shard_order(const sl_reader *r, const corpus *c, uint64_t epoch, uint32_t *perm) {
    for (int i = 0; i < c->n_shards; i++) perm[i] = (uint32_t)i;
    if (!r->eval)
        shuffle(perm, (uint64_t)c->n_shards, r->seed, (uint64_t)c->index, epoch, 0xFFFFFFFFull);
}

static void frame_order(const sl_reader *r, const corpus *c, uint64_t epoch, uint32_t s,
                        uint32_t *perm) {
    uint64_t n = c->shards[s].h.n_frames;
    for (uint64_t i = 0; i < n; i++) perm[i] = (uint32_t)i;
    if (!r->eval) shuffle(perm, n, r->seed, (uint64_t)c->index, epoch, s);
}

static void ensure_shard_order(sl_reader *r, corpus *c, uint64_t epoch) {
    if (c->so_valid && c->so_epoch == epoch) return;
    shard_order(r, c, epoch, c->so_perm);
    c->so_first = 0;
    while ((int)c->so_first < c->n_shards && c->shards[c->so_perm[c->so_first]].h.n_tokens == 0)
        c->so_first++;
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
    frame_order(r, c, epoch, s, c->fo_perm);
    c->fo_epoch = epoch;
    c->fo_shard = s;
    c->fo_valid = true;
}

/* Whether the walker's frame directly follows the previous frame of the training stream in
 * the same shard (then its first token continues a document; otherwise it begins one). */
static bool continues_previous(sl_reader *r, corpus *c) {
    const walker *w = &c->w;
    if (w->i > 0) return c->fo_perm[w->i - 1] + 1 == w->frame;
    /* the first frame of its shard in this epoch: the previous frame is another shard's, or,
     * at the start of an epoch, the last frame of the previous epoch */
    if (w->j != c->so_first || w->e == 0) return false;
    uint32_t *perm = sl_xmalloc(sizeof(uint32_t) * (size_t)c->n_shards);
    shard_order(r, c, w->e - 1, perm);
    int last = c->n_shards - 1;
    while (last >= 0 && c->shards[perm[last]].h.n_tokens == 0) last--;
    bool same = last >= 0 && perm[last] == w->shard;
    free(perm);
    if (!same) return false;
    uint64_t n = c->shards[w->shard].h.n_frames;
    uint32_t *fperm = sl_xmalloc(sizeof(uint32_t) * (size_t)n);
    frame_order(r, c, w->e - 1, w->shard, fperm);
    bool cont = (uint64_t)fperm[n - 1] + 1 == w->frame;
    free(fperm);
    return cont;
}

/* ---- the plan: the global sequence order and this rank's share ---- */

/* The corpus whose share of the tokens so far lags its weight the most (ties: the first). */
static int plan_choose(const sl_reader *r, const plan *pl) {
    if (r->n == 1) return 0;
    double total = 0;
    for (int i = 0; i < r->n; i++) total += (double)pl->pos[i];
    int best = 0;
    double bv = -INFINITY;
    for (int i = 0; i < r->n; i++) {
        double v = r->c[i].weight * (total + r->seq_len) - (double)pl->pos[i];
        if (v > bv) bv = v, best = i;
    }
    return best;
}

static void plan_take(const sl_reader *r, plan *pl, int *c, uint64_t *p) {
    *c = plan_choose(r, pl);
    *p = pl->pos[*c];
    pl->pos[*c] += (uint64_t)r->seq_len;
    pl->g++;
}

static void plan_skip(const sl_reader *r, plan *pl, uint64_t k) {
    if (r->n == 1) {
        pl->pos[0] += k * (uint64_t)r->seq_len;
        pl->g += k;
        return;
    }
    int c;
    uint64_t p;
    while (k--) plan_take(r, pl, &c, &p);
}

static uint64_t plan_offset(const sl_reader *r, const plan *pl) {
    return (pl->g - pl->origin) % r->S;
}

/* Skips to this rank's next sequence and takes it; returns its global index. */
static uint64_t plan_next_mine(const sl_reader *r, plan *pl, int *c, uint64_t *p) {
    uint64_t off = plan_offset(r, pl);
    if (off >= r->hi)
        plan_skip(r, pl, r->S - off + r->lo);
    else if (off < r->lo)
        plan_skip(r, pl, r->lo - off);
    uint64_t g = pl->g;
    plan_take(r, pl, c, p);
    return g;
}

/* After the last sequence of the share: on to the next batch, so that the position between
 * batches is the same on every rank. */
static void plan_finish_share(const sl_reader *r, plan *pl) {
    if (r->hi < r->S && plan_offset(r, pl) == r->hi) plan_skip(r, pl, r->S - r->hi);
}

/* ---- producer ---- */

static int open_shard(corpus *c, uint32_t s, char *msg, size_t len) {
    if (c->sh_idx == (int)s) return 0;
    sl_shard_close(c->sh);
    c->sh = NULL;
    c->sh_idx = -1;
    const shard_info *info = &c->shards[s];
    c->sh = sl_shard_open(info->path, msg, len);
    if (!c->sh) return -1;
    if (sl_shard_hdr(c->sh)->header_crc != info->h.header_crc)
        return sl_fail(msg, len, "%s: the shard changed on disk after the reader opened it",
                       info->path);
    c->sh_idx = (int)s;
    return 0;
}

/* Eval: the shard and frame of file-order frame u. */
static void eval_unit(const corpus *c, uint64_t u, uint32_t *shard, uint64_t *frame) {
    int lo = 0, hi = c->n_shards - 1; /* last s with so_cum[s] <= u */
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (c->so_cum[mid] <= u)
            lo = mid;
        else
            hi = mid - 1;
    }
    *shard = (uint32_t)lo;
    *frame = u - c->so_cum[lo];
}

/* Moves the walker to the frame holding stream position p (never backwards unless it is
 * reset). 0, 1 past the end of an eval slice, -1 with msg set. */
static int walk_seek(sl_reader *r, corpus *c, uint64_t p, char *msg, size_t len) {
    walker *w = &c->w;
    if (r->eval) {
        if (!w->valid || p < w->fstart) *w = (walker){.valid = true};
        for (;;) {
            if (w->j >= c->units_per_rank) return 1;
            if (!w->have_frame) {
                eval_unit(c, (uint64_t)w->j * (uint64_t)r->dp + (uint64_t)r->rank, &w->shard,
                          &w->frame);
                if (open_shard(c, w->shard, msg, len) != 0) return -1;
                w->fn = sl_shard_frames(c->sh)[w->frame].n_tokens;
                w->have_frame = true;
            }
            if (p < w->fstart + w->fn) return 0;
            w->fstart += w->fn;
            w->j++;
            w->have_frame = false;
        }
    }
    if (!w->valid || p < (w->have_frame ? w->fstart : w->sstart)) {
        *w = (walker){.valid = true, .e = p / c->n_tokens};
        w->sstart = w->e * c->n_tokens;
    }
    for (;;) { /* whole shards are skipped by their header's token count */
        ensure_shard_order(r, c, w->e);
        const uint64_t send = w->sstart + c->shards[c->so_perm[w->j]].h.n_tokens;
        if (p < send) break;
        w->sstart = send;
        w->have_frame = false;
        if (++w->j == (uint32_t)c->n_shards) w->e++, w->j = 0;
    }
    const uint32_t s = c->so_perm[w->j];
    if (open_shard(c, s, msg, len) != 0) return -1;
    ensure_frame_order(r, c, w->e, s);
    const sl_shard_frame *fr = sl_shard_frames(c->sh);
    if (!w->have_frame) {
        w->i = 0;
        w->fstart = w->sstart;
        w->shard = s;
        w->frame = c->fo_perm[0];
        w->fn = fr[w->frame].n_tokens;
        w->have_frame = true;
    }
    while (p >= w->fstart + w->fn) { /* the index's token counts add up to the header's */
        w->fstart += w->fn;
        w->i++;
        w->frame = c->fo_perm[w->i];
        w->fn = fr[w->frame].n_tokens;
    }
    return 0;
}

/* Decodes the walker's frame into s. 0 or -1 with s->msg set. */
static int decode(sl_reader *r, corpus *c, slot *s) {
    const walker *w = &c->w;
    const shard_info *info = &c->shards[w->shard];
    r->fb.skip_vocab_check = true; /* next() checks the ids while it copies them */
    if (sl_shard_read_frame(c->sh, w->frame, &r->fb, s->msg, sizeof s->msg) != 0) return -1;
    /* hand the decoded tokens over by swapping buffers */
    void *t = s->tokens;
    size_t tc = s->tokens_cap;
    s->tokens = r->fb.tokens;
    s->tokens_cap = r->fb.tokens_cap;
    r->fb.tokens = t;
    r->fb.tokens_cap = tc;
    s->corpus = c->index;
    s->start = w->fstart;
    s->epoch = w->e;
    s->n = r->fb.n_tokens;
    s->tb = info->h.token_bytes;
    s->path = info->path;
    s->frame = w->frame;
    s->entry = sl_shard_frames(c->sh)[w->frame];
    s->vocab = info->h.vocab_size;
    bool contiguous = r->eval ? w->j > 0 && r->dp == 1 && w->frame > 0 : continues_previous(r, c);
    bool has0 = r->fb.n_docs > 0 && r->fb.docs[0] == 0;
    uint32_t extra = (!contiguous && !has0) ? 1 : 0;
    sl_xreserve((void **)&s->docs, &s->docs_cap, sizeof(uint32_t) * ((size_t)r->fb.n_docs + 1));
    if (extra) s->docs[0] = 0;
    if (r->fb.n_docs) memcpy(s->docs + extra, r->fb.docs, sizeof(uint32_t) * r->fb.n_docs);
    s->n_docs = r->fb.n_docs + extra;
    s->kind = SLOT_DATA;
    return 0;
}

/* The next free slot at the tail of the queue, or NULL when asked to stop. */
static slot *free_slot(sl_reader *r) {
    pthread_mutex_lock(&r->mu);
    while (r->q_count == r->n_ring && !r->stop) pthread_cond_wait(&r->cv_prod, &r->mu);
    slot *s = r->stop ? NULL : &r->ring[(r->q_head + r->q_count) % r->n_ring];
    pthread_mutex_unlock(&r->mu);
    return s;
}

static void publish(sl_reader *r, bool frame) {
    pthread_mutex_lock(&r->mu);
    r->q_count++;
    r->frames += frame;
    pthread_cond_broadcast(&r->cv_cons);
    pthread_mutex_unlock(&r->mu);
}

/* Queues the end or an error, then idles until stopped. */
static void *finish(sl_reader *r, slot_kind kind, const char *msg) {
    slot *s = free_slot(r);
    if (s) {
        s->kind = kind;
        s->n = 0;
        if (msg != s->msg) snprintf(s->msg, sizeof s->msg, "%s", msg ? msg : "");
        publish(r, false);
    }
    pthread_mutex_lock(&r->mu);
    while (!r->stop) pthread_cond_wait(&r->cv_prod, &r->mu);
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

static void *producer_main(void *arg) {
    sl_reader *r = arg;
    char msg[MSG_LEN];
    for (;;) {
        int ci;
        uint64_t p;
        plan_next_mine(r, &r->pplan, &ci, &p);
        corpus *c = &r->c[ci];
        const uint64_t last = p + (uint64_t)r->seq_len;
        /* the frames holding tokens p .. last, each queued once */
        for (uint64_t q = p;;) {
            int rc = walk_seek(r, c, q, msg, sizeof msg);
            if (rc != 0) return finish(r, rc > 0 ? SLOT_END : SLOT_ERROR, rc > 0 ? NULL : msg);
            if (!c->planned || c->w.fstart > c->last_planned) {
                slot *s = free_slot(r);
                if (!s) return NULL;
                if (decode(r, c, s) != 0) {
                    s->kind = SLOT_ERROR;
                    return finish(r, SLOT_ERROR, s->msg);
                }
                publish(r, true);
                c->planned = true;
                c->last_planned = c->w.fstart;
            }
            if (c->w.fstart + c->w.fn > last) break;
            q = c->w.fstart + c->w.fn;
        }
        pthread_mutex_lock(&r->mu);
        bool stop = r->stop;
        pthread_mutex_unlock(&r->mu);
        if (stop) return NULL;
    }
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

/* Starts the producer at the consumer's position with an empty queue (thread stopped). */
static int start_thread(sl_reader *r, char *err, size_t errlen) {
    r->q_head = r->q_count = 0;
    r->pplan = r->cplan;
    for (int i = 0; i < r->n; i++) {
        corpus *c = &r->c[i];
        c->have_cur = false;
        c->planned = false;
        c->w.valid = false;
    }
    r->stop = false;
    if (pthread_create(&r->th, NULL, producer_main, r) != 0)
        return sl_fail(err, errlen, "cannot start the data reader thread");
    r->running = true;
    return 0;
}

/* ---- opening ---- */

static void free_slot_buffers(slot *s) {
    free(s->tokens);
    free(s->docs);
}

static void free_corpus(corpus *c) {
    for (int i = 0; i < c->n_shards; i++) free(c->shards[i].path);
    free(c->shards);
    free(c->spec);
    free_slot_buffers(&c->cur);
    sl_shard_close(c->sh);
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
        if (r->vocab == 0) r->vocab = s->h.vocab_size, r->vocab_shard = s->path;
        if (s->h.vocab_size != r->vocab) {
            sl_data_paths_free(files, nf);
            return sl_fail(err, errlen,
                           "%s: vocabulary size %u differs from %u in %s (every corpus must use "
                           "the same tokenizer)",
                           s->path, s->h.vocab_size, r->vocab, r->vocab_shard);
        }
        if (sl_shard_has_tokenizer(&s->h)) {
            if (!r->tok_shard) {
                r->tok_shard = s->path;
                memcpy(r->tok_hash, s->h.tokenizer_hash, SL_SHARD_TOKENIZER_HASH);
            } else if (memcmp(r->tok_hash, s->h.tokenizer_hash, SL_SHARD_TOKENIZER_HASH) != 0) {
                char a[33], b[33];
                sl_shard_tokenizer_hex(s->h.tokenizer_hash, a);
                sl_shard_tokenizer_hex(r->tok_hash, b);
                sl_data_paths_free(files, nf);
                return sl_fail(err, errlen,
                               "%s: built with tokenizer sha256 %s..., but %s with %s... (every "
                               "corpus must use the same tokenizer)",
                               s->path, a, r->tok_shard, b);
            }
        }
        c->n_frames += s->h.n_frames;
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
    uint64_t rk = (uint64_t)r->rank, dp = (uint64_t)r->dp;
    c->units_per_rank = c->n_frames > rk ? (c->n_frames - rk + dp - 1) / dp : 0;
    c->so_perm = sl_xmalloc(sizeof(uint32_t) * (size_t)nf);
    c->so_cum = sl_xmalloc(sizeof(uint64_t) * ((size_t)nf + 1));
    c->so_cum[0] = 0;
    for (int i = 0; i < nf; i++) c->so_cum[i + 1] = c->so_cum[i] + c->shards[i].h.n_frames;
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
    const int64_t S = o->global_batch_sequences ? o->global_batch_sequences : o->dp_size;
    if (!o->eval && (S < 0 || S % o->dp_size != 0)) {
        sl_fail(err, errlen,
                "data reader: a global batch of %lld sequences does not split evenly over %d "
                "data-parallel ranks",
                (long long)S, o->dp_size);
        return NULL;
    }
    const sl_data_config *d = o->data;
    sl_reader *r = sl_xcalloc(1, sizeof *r);
    r->seed = d->seed;
    r->rank = o->dp_rank;
    r->dp = o->dp_size;
    r->seq_len = o->seq_len;
    r->eval = o->eval;
    /* eval: every sequence of the rank's own slice is the rank's */
    r->S = o->eval ? 1 : (uint64_t)S;
    r->lo = o->eval ? 0 : r->S / (uint64_t)r->dp * (uint64_t)r->rank;
    r->hi = o->eval ? 1 : r->lo + r->S / (uint64_t)r->dp;
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
    r->n_ring = prefetch * r->n;
    r->ring = sl_xcalloc((size_t)r->n_ring, sizeof(slot));
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
    if (r->ring)
        for (int i = 0; i < r->n_ring; i++) free_slot_buffers(&r->ring[i]);
    free(r->ring);
    sl_frame_buf_free(&r->fb);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv_prod);
    pthread_cond_destroy(&r->cv_cons);
    free(r);
}

int sl_reader_vocab_size(const sl_reader *r) {
    return (int)r->vocab;
}

const char *sl_reader_first_shard(const sl_reader *r) {
    return r->vocab_shard;
}

const uint8_t *sl_reader_tokenizer(const sl_reader *r, const char **shard) {
    if (shard) *shard = r->tok_shard;
    return r->tok_shard ? r->tok_hash : NULL;
}

int sl_reader_set_seq_len(sl_reader *r, int seq_len) {
    if (seq_len < 1) return -1;
    if (seq_len == r->seq_len) return 0;
    /* the producer planned ahead with the old length: restart it from next()'s position */
    stop_thread(r);
    r->seq_len = seq_len;
    char err[256];
    if (start_thread(r, err, sizeof err) != 0) {
        r->failed = true;
        snprintf(r->fail_msg, sizeof r->fail_msg, "%s", err);
        return -1;
    }
    return 0;
}

/* ---- consumer ---- */

/* The head of the queue, waiting for the producer when it is empty. */
static slot *queue_head(sl_reader *r) {
    pthread_mutex_lock(&r->mu);
    if (r->q_count == 0) r->waits++;
    while (r->q_count == 0) pthread_cond_wait(&r->cv_cons, &r->mu);
    slot *s = &r->ring[r->q_head];
    pthread_mutex_unlock(&r->mu);
    return s;
}

static void queue_pop(sl_reader *r) {
    pthread_mutex_lock(&r->mu);
    r->q_head = (r->q_head + 1) % r->n_ring;
    r->q_count--;
    pthread_cond_signal(&r->cv_prod);
    pthread_mutex_unlock(&r->mu);
}

static int fail(sl_reader *r, char *err, size_t errlen) {
    r->failed = true;
    return sl_fail(err, errlen, "%s", r->fail_msg);
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
    sl_shard_vocab_error(s->path, s->frame, &s->entry, off + j, (uint32_t)dst[j], s->vocab,
                         r->fail_msg, sizeof r->fail_msg);
    return fail(r, err, errlen);
}

int sl_reader_next(sl_reader *r, int32_t *tokens, int32_t *doc_start, int *n_docs, char *err,
                   size_t errlen) {
    if (n_docs) *n_docs = 0;
    if (r->failed) return sl_fail(err, errlen, "%s", r->fail_msg);
    if (r->at_end) return 0;
    plan pl = r->cplan; /* committed once the sequence is complete */
    int ci;
    uint64_t p;
    const uint64_t gi = plan_next_mine(r, &pl, &ci, &p);
    corpus *c = &r->c[ci];
    const uint64_t end = p + (uint64_t)r->seq_len + 1;
    uint64_t q = p;
    uint32_t i = 0;
    int nd = 0;
    while (q < end) {
        slot *s = &c->cur;
        if (!c->have_cur || q < s->start || q >= s->start + s->n) {
            slot *x = queue_head(r);
            if (x->kind == SLOT_END) {
                r->at_end = true; /* the tail shorter than a sequence is dropped */
                return 0;
            }
            if (x->kind == SLOT_ERROR) {
                snprintf(r->fail_msg, sizeof r->fail_msg, "%s", x->msg);
                return fail(r, err, errlen);
            }
            if (x->corpus != ci || q < x->start || q >= x->start + x->n) {
                snprintf(r->fail_msg, sizeof r->fail_msg,
                         "data reader: internal error: the prefetched frame (corpus %d, stream "
                         "tokens %llu..%llu) is not the one needed (corpus %d, token %llu)",
                         x->corpus, (unsigned long long)x->start,
                         (unsigned long long)(x->start + x->n), ci, (unsigned long long)q);
                return fail(r, err, errlen);
            }
            slot t = *x; /* the frame becomes the corpus's current one */
            *x = c->cur;
            c->cur = t;
            c->have_cur = true;
            queue_pop(r);
            s = &c->cur;
        }
        const uint32_t off = (uint32_t)(q - s->start);
        uint32_t k = s->n - off;
        if ((uint64_t)k > end - q) k = (uint32_t)(end - q);
        if (copy_checked(r, s, off, k, tokens + i, err, errlen) != 0) return -1;
        uint32_t lo = 0, hi = s->n_docs; /* first document start >= off */
        while (lo < hi) {
            uint32_t mid = (lo + hi) / 2;
            if (s->docs[mid] < off)
                lo = mid + 1;
            else
                hi = mid;
        }
        for (uint32_t d = lo; d < s->n_docs && s->docs[d] < off + k; d++) {
            if (doc_start) doc_start[nd] = (int32_t)(i + s->docs[d] - off);
            nd++;
        }
        i += k;
        q += k;
    }
    c->last_epoch = c->cur.epoch;
    c->delivered += (uint64_t)r->seq_len;
    r->hash += sl_sequence_hash(gi, tokens, (size_t)r->seq_len + 1);
    r->cplan = pl;
    plan_finish_share(r, &r->cplan);
    if (n_docs) *n_docs = nd;
    return 1;
}

void sl_reader_get_stats(const sl_reader *r, sl_reader_stats *s) {
    memset(s, 0, sizeof *s);
    s->n_corpora = r->n;
    for (int i = 0; i < r->n; i++) {
        s->tokens[i] = r->c[i].n_tokens;
        s->consumed[i] = r->c[i].delivered;
        s->position[i] = r->cplan.pos[i];
        s->epoch[i] = r->c[i].last_epoch;
    }
    s->sequence = r->cplan.g;
    pthread_mutex_lock((pthread_mutex_t *)&r->mu);
    s->frames = r->frames;
    pthread_mutex_unlock((pthread_mutex_t *)&r->mu);
    s->waits = r->waits;
}

/* ---- batch hashes ---- */

static inline uint64_t rotl64(uint64_t x, int k) {
    return (x << k) | (x >> (64 - k));
}

/* Four independent multiply-rotate lanes (xxHash64's round on 32-bit token values) so that
 * hashing keeps up with copying, then splitmix64's finalizer over the lanes, the length and
 * the index. */
uint64_t sl_sequence_hash(uint64_t index, const int32_t *t, size_t n) {
    const uint64_t P1 = 0x9E3779B185EBCA87ull, P2 = 0xC2B2AE3D27D4EB4Full;
    uint64_t a = P1 + P2, b = P2, c = 0, d = 0 - P1;
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        a = rotl64(a + (uint64_t)(uint32_t)t[i] * P2, 31) * P1;
        b = rotl64(b + (uint64_t)(uint32_t)t[i + 1] * P2, 31) * P1;
        c = rotl64(c + (uint64_t)(uint32_t)t[i + 2] * P2, 31) * P1;
        d = rotl64(d + (uint64_t)(uint32_t)t[i + 3] * P2, 31) * P1;
    }
    for (; i < n; i++) a = rotl64(a + (uint64_t)(uint32_t)t[i] * P2, 31) * P1;
    uint64_t h = rotl64(a, 1) + rotl64(b, 7) + rotl64(c, 12) + rotl64(d, 18);
    return sl_mix64(h ^ sl_mix64((uint64_t)n ^ sl_mix64(index)));
}

uint64_t sl_reader_take_hash(sl_reader *r) {
    uint64_t h = r->hash;
    r->hash = 0;
    return h;
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
    cJSON_AddNumberToObject(o, "seq_len", r->seq_len);
    cJSON_AddNumberToObject(o, "sequence", (double)r->cplan.g);
    const uint64_t off = r->eval ? 0 : plan_offset(r, &r->cplan);
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
        const corpus *c = &r->c[i];
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "path", c->spec);
        snprintf(buf, sizeof buf, "%08x", c->fingerprint);
        cJSON_AddStringToObject(e, "fingerprint", buf);
        cJSON_AddNumberToObject(e, "tokens", (double)c->n_tokens);
        cJSON_AddNumberToObject(e, "position", (double)r->cplan.pos[i]);
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

int sl_reader_restore(sl_reader *r, const char *json, char *err, size_t errlen) {
    cJSON *o = cJSON_Parse(json ? json : "");
    if (!o) return sl_fail(err, errlen, "data cursor: not valid JSON");
    int rc = -1;
    plan pl;
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
            if (S != r->S || seq_len != (uint64_t)r->seq_len || pl.g - start <= r->lo ||
                pl.g - start >= r->hi) {
                sl_fail(err, errlen,
                        "data cursor: written inside rank %llu's share of a global batch (%llu "
                        "sequences of %llu tokens, %llu taken); this reader has %llu sequences "
                        "of %d tokens per batch",
                        (unsigned long long)rk, (unsigned long long)S, (unsigned long long)seq_len,
                        (unsigned long long)(pl.g - start), (unsigned long long)r->S, r->seq_len);
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
        if (get_u64(e, "position", UINT64_MAX, &pl.pos[i], err, errlen)) goto done;
    }
    stop_thread(r);
    r->failed = false;
    r->at_end = false;
    r->cplan = pl;
    rc = start_thread(r, err, errlen);
done:
    cJSON_Delete(o);
    return rc;
}
