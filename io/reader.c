/* io/reader.c - the streaming reader's public face (reader.h, docs/data.md): opening the
 * corpora, next(), seq_len changes, statistics. The order, the streams, the prefetch thread and
 * the cursor are their own files (reader_internal.h lists them). */
#include "io/reader.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "io/paths.h"
#include "io/reader_internal.h"
#include "io/shard.h"

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
    r->window = o->eval ? 0 : d->shuffle_window;
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
    if (o->eval) {
        if (!d->eval_path[0]) {
            sl_fail(err, errlen, "data.eval_path is not set");
            goto bad;
        }
        r->n = 1;
        r->c[0].weight = 1;
        if (sl_rd_corpus_load(r, &r->c[0], d->eval_path, err, errlen) != 0) goto bad;
    } else {
        if (d->n_train < 1 || d->n_train > SL_MAX_CORPORA) {
            sl_fail(err, errlen, "data.train: %d corpora (need 1 to %d)", d->n_train,
                    SL_MAX_CORPORA);
            goto bad;
        }
        double wsum = 0;
        for (int i = 0; i < d->n_train; i++) {
            const double w = d->train[i].weight;
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
            if (sl_rd_corpus_load(r, &r->c[i], d->train[i].path, err, errlen) != 0) goto bad;
        }
    }
    r->n_ring = sl_rd_queue_depth(r, d->prefetch);
    r->ring = sl_xcalloc((size_t)r->n_ring, sizeof(sl_rd_slot));
    if (sl_rd_start(r, err, errlen) != 0) goto bad;
    return r;
bad:
    sl_reader_close(r);
    return NULL;
}

void sl_reader_close(sl_reader *r) {
    if (!r) return;
    sl_rd_stop(r);
    for (int i = 0; i < r->n; i++) sl_rd_corpus_free(&r->c[i]);
    if (r->ring)
        for (int i = 0; i < r->n_ring; i++) sl_rd_slot_free(&r->ring[i]);
    free(r->ring);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv_prod);
    pthread_cond_destroy(&r->cv_cons);
    free(r);
}

int sl_reader_vocab_size(const sl_reader *r) {
    return (int)r->vocab;
}

uint64_t sl_reader_tokens(const sl_reader *r) {
    uint64_t n = 0;
    for (int i = 0; i < r->n; i++) n += r->c[i].n_tokens;
    return n;
}

int sl_reader_eval_shares(const char *spec, int dp, uint64_t *share, uint64_t *total,
                          uint32_t *max_frame, char *err, size_t errlen) {
    if (dp < 1) return sl_fail(err, errlen, "data reader: %d data-parallel ranks", dp);
    char **files = NULL;
    int nf = 0;
    if (sl_data_resolve(spec, &files, &nf, err, errlen) != 0) return -1;
    if (share) memset(share, 0, (size_t)dp * sizeof *share);
    uint64_t frame = 0, sum = 0; /* frame: the set's frames so far, in file order */
    uint32_t largest = 0;
    int rc = 0;
    for (int f = 0; f < nf && rc == 0; f++) {
        sl_shard *sh = sl_shard_open(files[f], err, errlen);
        if (!sh) {
            rc = -1;
            break;
        }
        const sl_shard_frame *fr = sl_shard_frames(sh);
        for (uint64_t i = 0; i < sl_shard_hdr(sh)->n_frames; i++, frame++) {
            if (share) share[frame % (uint64_t)dp] += fr[i].n_tokens;
            sum += fr[i].n_tokens;
            if (fr[i].n_tokens > largest) largest = fr[i].n_tokens;
        }
        sl_shard_close(sh);
    }
    sl_data_paths_free(files, nf);
    if (total) *total = sum;
    if (max_frame) *max_frame = largest;
    return rc;
}

int sl_reader_fingerprint(const char *spec, uint32_t *fp, char *err, size_t errlen) {
    char **files = NULL;
    int nf = 0;
    if (sl_data_resolve(spec, &files, &nf, err, errlen) != 0) return -1;
    uint32_t v = 0;
    int rc = 0;
    for (int f = 0; f < nf && rc == 0; f++) {
        sl_shard_header h;
        rc = sl_shard_read_header(files[f], &h, err, errlen);
        if (rc == 0) v = sl_rd_fingerprint_add(v, &h);
    }
    sl_data_paths_free(files, nf);
    *fp = v;
    return rc;
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
    /* the producer planned ahead with the old length: restart it from next()'s position, on a
     * new grid of sequences (the rest of a partly read shuffle window is skipped) */
    sl_rd_stop(r);
    if (!r->eval) sl_rd_plan_change_grid(r, &r->cplan, r->seq_len, r->window);
    r->seq_len = seq_len;
    char err[256];
    if (sl_rd_start(r, err, sizeof err) != 0) {
        r->failed = true;
        snprintf(r->fail_msg, sizeof r->fail_msg, "%s", err);
        return -1;
    }
    return 0;
}

static int fail(sl_reader *r, char *err, size_t errlen) {
    r->failed = true;
    return sl_fail(err, errlen, "%s", r->fail_msg);
}

int sl_reader_next(sl_reader *r, int32_t *tokens, int32_t *doc_start, int *n_docs, char *err,
                   size_t errlen) {
    if (n_docs) *n_docs = 0;
    if (r->failed) return sl_fail(err, errlen, "%s", r->fail_msg);
    if (r->at_end) return 0;
    sl_rd_plan pl = r->cplan; /* committed once the sequence is taken */
    int ci;
    uint64_t p;
    const uint64_t gi = sl_rd_plan_next_mine(r, &pl, &ci, &p);
    sl_rd_slot *x = sl_rd_queue_head(r);
    if (x->kind == SL_RD_END) {
        r->at_end = true; /* the tail shorter than a sequence is dropped */
        return 0;
    }
    if (x->kind == SL_RD_ERROR) {
        snprintf(r->fail_msg, sizeof r->fail_msg, "%s", x->msg);
        return fail(r, err, errlen);
    }
    if (x->g != gi || x->corpus != ci) {
        snprintf(r->fail_msg, sizeof r->fail_msg,
                 "data reader: internal error: the prefetched sequence (%llu, corpus %d) is not "
                 "the one needed (%llu, corpus %d)",
                 (unsigned long long)x->g, x->corpus, (unsigned long long)gi, ci);
        return fail(r, err, errlen);
    }
    const size_t n = (size_t)r->seq_len + 1;
    memcpy(tokens, x->tokens, n * sizeof(int32_t));
    if (doc_start && x->n_docs) memcpy(doc_start, x->docs, (size_t)x->n_docs * sizeof(int32_t));
    if (n_docs) *n_docs = x->n_docs;
    sl_rd_corpus *c = &r->c[ci];
    c->last_epoch = x->epoch;
    c->delivered += (uint64_t)r->seq_len;
    r->hash += sl_sequence_hash(gi, tokens, n);
    sl_rd_queue_pop(r);
    r->cplan = pl;
    sl_rd_plan_finish_share(r, &r->cplan);
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
    s->tokens_decoded = r->tokens_decoded;
    pthread_mutex_unlock((pthread_mutex_t *)&r->mu);
    s->waits = r->waits;
}

uint64_t sl_reader_take_hash(sl_reader *r) {
    const uint64_t h = r->hash;
    r->hash = 0;
    return h;
}
