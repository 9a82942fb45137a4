/* io/reader_source.c - a corpus's token stream (docs/data.md, "One global order"): its shards,
 * the epoch order of shards and frames, locating a stream position, decoding the frames that
 * hold it (a small cache), and assembling one sequence's tokens and document starts.
 *
 * Training: epoch e covers stream positions [e N, (e + 1) N) of a corpus of N tokens; in it the
 * shards are in a shuffled order and the frames inside each shard too, each permutation keyed
 * by (data.seed, corpus, epoch, shard). Eval: the stream is this rank's frames r, r + dp, ... in
 * file order, once.
 *
 * Only the producer thread calls these (or the caller while the thread is stopped). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "io/crc32c.h"
#include "io/paths.h"
#include "io/reader_internal.h"

/* ---- loading ---- */

int sl_rd_corpus_load(sl_reader *r, sl_rd_corpus *c, const char *spec, char *err, size_t errlen) {
    char **files;
    int nf;
    if (sl_data_resolve(spec, &files, &nf, err, errlen) != 0) return -1;
    c->spec = sl_xstrdup(spec);
    c->shards = sl_xcalloc((size_t)nf, sizeof(sl_rd_shard));
    c->n_shards = nf;
    uint32_t fp = 0;
    int rc = 0;
    for (int i = 0; i < nf && rc == 0; i++) {
        sl_rd_shard *s = &c->shards[i];
        s->path = files[i];
        files[i] = NULL;
        if (sl_shard_read_header(s->path, &s->h, err, errlen) != 0) {
            rc = -1;
            break;
        }
        if (s->h.n_frames > UINT32_MAX) {
            rc = sl_fail(err, errlen, "%s: too many frames", s->path);
            break;
        }
        if (r->vocab == 0) r->vocab = s->h.vocab_size, r->vocab_shard = s->path;
        if (s->h.vocab_size != r->vocab) {
            rc = sl_fail(err, errlen,
                         "%s: vocabulary size %u differs from %u in %s (every corpus must use "
                         "the same tokenizer)",
                         s->path, s->h.vocab_size, r->vocab, r->vocab_shard);
            break;
        }
        if (sl_shard_has_tokenizer(&s->h)) {
            if (!r->tok_shard) {
                r->tok_shard = s->path;
                memcpy(r->tok_hash, s->h.tokenizer_hash, SL_SHARD_TOKENIZER_HASH);
            } else if (memcmp(r->tok_hash, s->h.tokenizer_hash, SL_SHARD_TOKENIZER_HASH) != 0) {
                char a[33], b[33];
                sl_shard_tokenizer_hex(s->h.tokenizer_hash, a);
                sl_shard_tokenizer_hex(r->tok_hash, b);
                rc = sl_fail(err, errlen,
                             "%s: built with tokenizer sha256 %s..., but %s with %s... (every "
                             "corpus must use the same tokenizer)",
                             s->path, a, r->tok_shard, b);
                break;
            }
        }
        c->n_frames += s->h.n_frames;
        c->n_tokens += s->h.n_tokens;
        fp = sl_rd_fingerprint_add(fp, &s->h);
    }
    sl_data_paths_free(files, nf);
    if (rc != 0) return rc;
    c->fingerprint = fp;
    if (c->n_tokens == 0)
        return sl_fail(err, errlen, "%s: empty corpus: its shards hold no tokens", spec);
    const uint64_t rk = (uint64_t)r->rank, dp = (uint64_t)r->dp;
    c->units_per_rank = c->n_frames > rk ? (c->n_frames - rk + dp - 1) / dp : 0;
    for (int k = 0; k < 2; k++) {
        c->so_perm[k] = sl_xmalloc(sizeof(uint32_t) * (size_t)nf);
        c->so_cum[k] = sl_xmalloc(sizeof(uint64_t) * ((size_t)nf + 1));
    }
    c->eval_cum = sl_xmalloc(sizeof(uint64_t) * ((size_t)nf + 1));
    c->eval_cum[0] = 0;
    for (int i = 0; i < nf; i++) c->eval_cum[i + 1] = c->eval_cum[i] + c->shards[i].h.n_frames;
    return 0;
}

void sl_rd_corpus_reset(sl_rd_corpus *c) {
    for (int i = 0; i < SL_READER_FRAME_CACHE; i++) c->frames[i].valid = false;
    c->eval_have = false;
}

void sl_rd_corpus_free(sl_rd_corpus *c) {
    for (int i = 0; i < c->n_shards; i++) free(c->shards[i].path);
    free(c->shards);
    free(c->spec);
    for (int k = 0; k < 2; k++) {
        free(c->so_perm[k]);
        free(c->so_cum[k]);
    }
    free(c->eval_cum);
    for (int i = 0; i < SL_READER_SHARD_CACHE; i++) {
        sl_shard_close(c->open[i].sh);
        free(c->open[i].perm);
        free(c->open[i].cum);
    }
    for (int i = 0; i < SL_READER_FRAME_CACHE; i++) sl_frame_buf_free(&c->frames[i].fb);
}

/* ---- epoch orders ---- */

static void shard_order(const sl_reader *r, const sl_rd_corpus *c, uint64_t epoch, uint32_t *perm) {
    for (int i = 0; i < c->n_shards; i++) perm[i] = (uint32_t)i;
    sl_rd_shuffle(perm, (uint64_t)c->n_shards, r->seed, (uint64_t)c->index, epoch, 0xFFFFFFFFull);
}

/* The shard order of `epoch` (one of two cached entries: a sequence may cross into the next
 * epoch). */
static int epoch_order(const sl_reader *r, sl_rd_corpus *c, uint64_t epoch) {
    for (int k = 0; k < 2; k++)
        if (c->so_valid[k] && c->so_epoch[k] == epoch) return k;
    const int k = c->so_next;
    c->so_next ^= 1;
    shard_order(r, c, epoch, c->so_perm[k]);
    c->so_cum[k][0] = 0;
    for (int j = 0; j < c->n_shards; j++)
        c->so_cum[k][j + 1] = c->so_cum[k][j] + c->shards[c->so_perm[k][j]].h.n_tokens;
    c->so_first[k] = 0;
    while ((int)c->so_first[k] < c->n_shards &&
           c->shards[c->so_perm[k][c->so_first[k]]].h.n_tokens == 0)
        c->so_first[k]++;
    c->so_epoch[k] = epoch;
    c->so_valid[k] = true;
    return k;
}

/* Shard s opened, with (training) the frame order of `epoch` and its cumulative counts; the
 * least recently used entry is replaced. Training entries are per (shard, epoch), so a sequence
 * that crosses into the next epoch of a one-shard corpus does not reshuffle at every crossing.
 * NULL with msg set. */
static sl_rd_open *open_shard(sl_reader *r, sl_rd_corpus *c, uint32_t s, uint64_t epoch, char *msg,
                              size_t len) {
    sl_rd_open *slot = NULL, *lru = &c->open[0];
    for (int i = 0; i < SL_READER_SHARD_CACHE; i++) {
        sl_rd_open *o = &c->open[i];
        if (o->sh && o->shard == s && (r->eval || (o->valid && o->epoch == epoch))) {
            slot = o;
            break;
        }
        if (!o->sh || (lru->sh && o->used < lru->used)) lru = o;
    }
    if (!slot) {
        slot = lru;
        sl_shard_close(slot->sh);
        slot->sh = NULL;
        slot->valid = false;
        const sl_rd_shard *info = &c->shards[s];
        slot->sh = sl_shard_open(info->path, msg, len);
        if (!slot->sh) return NULL;
        if (sl_shard_hdr(slot->sh)->header_crc != info->h.header_crc) {
            sl_fail(msg, len, "%s: the shard changed on disk after the reader opened it",
                    info->path);
            sl_shard_close(slot->sh);
            slot->sh = NULL;
            return NULL;
        }
        slot->shard = s;
    }
    slot->used = ++c->clock;
    if (!r->eval && (!slot->valid || slot->epoch != epoch)) {
        const uint64_t n = c->shards[s].h.n_frames;
        if (n + 1 > slot->cap) {
            slot->perm = sl_xrealloc(slot->perm, (n + 1) * sizeof(uint32_t));
            slot->cum = sl_xrealloc(slot->cum, (n + 1) * sizeof(uint64_t));
            slot->cap = n + 1;
        }
        for (uint64_t i = 0; i < n; i++) slot->perm[i] = (uint32_t)i;
        sl_rd_shuffle(slot->perm, n, r->seed, (uint64_t)c->index, epoch, s);
        const sl_shard_frame *fr = sl_shard_frames(slot->sh);
        slot->cum[0] = 0;
        for (uint64_t i = 0; i < n; i++)
            slot->cum[i + 1] = slot->cum[i] + fr[slot->perm[i]].n_tokens;
        slot->epoch = epoch;
        slot->valid = true;
    }
    return slot;
}

/* Index of the last entry of cum[0 .. n] that is <= x (cum increasing, cum[0] <= x). */
static uint64_t last_at_most(const uint64_t *cum, uint64_t n, uint64_t x) {
    uint64_t lo = 0, hi = n;
    while (lo < hi) {
        const uint64_t mid = lo + (hi - lo + 1) / 2;
        if (cum[mid] <= x)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* Whether the first frame of shard position j in epoch e's order continues the last frame of
 * the previous epoch (the same shard last there and first here, the frames consecutive). */
static bool continues_previous_epoch(sl_reader *r, sl_rd_corpus *c, uint64_t e, uint32_t j,
                                     uint32_t s, uint64_t frame) {
    const int k = epoch_order(r, c, e);
    if (j != c->so_first[k] || e == 0) return false;
    const int kp = epoch_order(r, c, e - 1);
    int last = c->n_shards - 1;
    while (last >= 0 && c->shards[c->so_perm[kp][last]].h.n_tokens == 0) last--;
    if (last < 0 || c->so_perm[kp][last] != s) return false;
    const uint64_t n = c->shards[s].h.n_frames;
    uint32_t *fperm = sl_xmalloc(sizeof(uint32_t) * (size_t)n);
    for (uint64_t i = 0; i < n; i++) fperm[i] = (uint32_t)i;
    sl_rd_shuffle(fperm, n, r->seed, (uint64_t)c->index, e - 1, s);
    const bool cont = (uint64_t)fperm[n - 1] + 1 == frame;
    free(fperm);
    return cont;
}

/* Training: the frame holding stream position p. 0 or -1 with msg set. */
static int locate_train(sl_reader *r, sl_rd_corpus *c, uint64_t p, sl_rd_loc *loc, char *msg,
                        size_t len) {
    const uint64_t e = p / c->n_tokens, base = e * c->n_tokens;
    const int k = epoch_order(r, c, e);
    /* the shard: the last position whose cumulative count is <= the offset, skipping empty
     * shards (equal counts) by taking the last of equals */
    const uint64_t off = p - base;
    const uint32_t j = (uint32_t)last_at_most(c->so_cum[k], (uint64_t)c->n_shards - 1, off);
    const uint32_t s = c->so_perm[k][j];
    const uint64_t sstart = c->so_cum[k][j];
    sl_rd_open *o = open_shard(r, c, s, e, msg, len);
    if (!o) return -1;
    const uint64_t nf = c->shards[s].h.n_frames;
    const uint64_t i = last_at_most(o->cum, nf - 1, off - sstart);
    const uint32_t perm_prev = i > 0 ? o->perm[i - 1] : 0;
    loc->shard = s;
    loc->frame = o->perm[i];
    loc->start = base + sstart + o->cum[i];
    loc->n = sl_shard_frames(o->sh)[loc->frame].n_tokens;
    loc->epoch = e;
    loc->continues = i > 0 ? (uint64_t)perm_prev + 1 == loc->frame
                           : continues_previous_epoch(r, c, e, j, s, loc->frame);
    return 0;
}

/* Eval: the frame holding position p of this rank's slice. 0, 1 past its end, -1. */
static int locate_eval(sl_reader *r, sl_rd_corpus *c, uint64_t p, sl_rd_loc *loc, char *msg,
                       size_t len) {
    if (!c->eval_have || p < c->eval_ustart) {
        c->eval_u = 0;
        c->eval_ustart = 0;
        c->eval_un = 0;
        c->eval_have = false;
    }
    for (;;) {
        if (c->eval_u >= c->units_per_rank) return 1;
        const uint64_t file_frame = c->eval_u * (uint64_t)r->dp + (uint64_t)r->rank;
        const uint32_t s =
            (uint32_t)last_at_most(c->eval_cum, (uint64_t)c->n_shards - 1, file_frame);
        const uint64_t frame = file_frame - c->eval_cum[s];
        if (!c->eval_have) {
            sl_rd_open *o = open_shard(r, c, s, 0, msg, len);
            if (!o) return -1;
            c->eval_un = sl_shard_frames(o->sh)[frame].n_tokens;
            c->eval_have = true;
        }
        if (p < c->eval_ustart + c->eval_un) {
            loc->shard = s;
            loc->frame = frame;
            loc->start = c->eval_ustart;
            loc->n = c->eval_un;
            loc->epoch = 0;
            loc->continues = c->eval_u > 0 && r->dp == 1 && frame > 0;
            return 0;
        }
        c->eval_ustart += c->eval_un;
        c->eval_u++;
        c->eval_have = false;
    }
}

/* ---- decoding ---- */

/* The decoded frame at loc (from the cache, or decoded into its least recently used entry).
 * NULL with msg set. */
static sl_rd_frame *frame_at(sl_reader *r, sl_rd_corpus *c, const sl_rd_loc *loc, uint64_t *frames,
                             uint64_t *decoded, char *msg, size_t len) {
    sl_rd_frame *lru = &c->frames[0];
    for (int i = 0; i < SL_READER_FRAME_CACHE; i++) {
        sl_rd_frame *f = &c->frames[i];
        if (f->valid && f->shard == loc->shard && f->frame == loc->frame) {
            f->used = ++c->clock;
            return f;
        }
        if (!f->valid || (lru->valid && f->used < lru->used)) lru = f;
    }
    sl_rd_open *o = open_shard(r, c, loc->shard, loc->epoch, msg, len);
    if (!o) return NULL;
    lru->valid = false;
    lru->fb.skip_vocab_check = true; /* checked while the tokens are copied out */
    if (sl_shard_read_frame(o->sh, loc->frame, &lru->fb, msg, len) != 0) return NULL;
    lru->valid = true;
    lru->shard = loc->shard;
    lru->frame = loc->frame;
    lru->used = ++c->clock;
    (*frames)++;
    *decoded += lru->fb.n_tokens;
    return lru;
}

/* Copies k tokens of the frame from offset `off` as int32 and checks them against the
 * vocabulary in the same pass. 0 or -1 with msg set. */
static int copy_checked(sl_reader *r, sl_rd_corpus *c, const sl_rd_loc *loc, const sl_rd_frame *f,
                        uint32_t off, uint32_t k, int32_t *dst, char *msg, size_t len) {
    const sl_rd_shard *info = &c->shards[loc->shard];
    uint32_t m = 0;
    if (info->h.token_bytes == 2) {
        const uint16_t *src = (const uint16_t *)f->fb.tokens + off;
        uint16_t m16 = 0;
        for (uint32_t j = 0; j < k; j++) {
            const uint16_t v = src[j];
            m16 = v > m16 ? v : m16;
            dst[j] = v;
        }
        m = m16;
    } else {
        const uint32_t *src = (const uint32_t *)f->fb.tokens + off;
        for (uint32_t j = 0; j < k; j++) {
            const uint32_t v = src[j];
            m = v > m ? v : m;
            dst[j] = (int32_t)v;
        }
    }
    if (m < info->h.vocab_size) return 0;
    uint32_t j = 0;
    while ((uint32_t)dst[j] < info->h.vocab_size) j++;
    sl_rd_open *o = open_shard(r, c, loc->shard, loc->epoch, msg, len);
    if (!o) return -1;
    return sl_shard_vocab_error(info->path, loc->frame, &sl_shard_frames(o->sh)[loc->frame],
                                off + j, (uint32_t)dst[j], info->h.vocab_size, msg, len);
}

int sl_rd_assemble(sl_reader *r, sl_rd_corpus *c, uint64_t p, uint32_t n, int32_t *tokens,
                   int32_t **docs, size_t *docs_cap, int *n_docs, uint64_t *epoch, uint64_t *frames,
                   uint64_t *decoded, char *msg, size_t len) {
    *n_docs = 0;
    uint32_t i = 0;
    while (i < n) {
        const uint64_t q = p + i;
        sl_rd_loc loc;
        const int rc =
            r->eval ? locate_eval(r, c, q, &loc, msg, len) : locate_train(r, c, q, &loc, msg, len);
        if (rc != 0) return rc;
        *epoch = loc.epoch; /* the epoch of the sequence's last token */
        const sl_rd_frame *f = frame_at(r, c, &loc, frames, decoded, msg, len);
        if (!f) return -1;
        const uint32_t off = (uint32_t)(q - loc.start);
        uint32_t k = loc.n - off;
        if (k > n - i) k = n - i;
        if (copy_checked(r, c, &loc, f, off, k, tokens + i, msg, len) != 0) return -1;
        /* document starts in [off, off + k): the recorded ones, and the frame's first token
         * when the frame does not continue the previous frame of the stream */
        const uint32_t *d = f->fb.docs;
        const uint32_t nd = f->fb.n_docs;
        uint32_t lo = 0, hi = nd; /* first recorded start >= off */
        while (lo < hi) {
            const uint32_t mid = (lo + hi) / 2;
            if (d[mid] < off)
                lo = mid + 1;
            else
                hi = mid;
        }
        sl_xreserve((void **)docs, docs_cap, sizeof(int32_t) * ((size_t)*n_docs + k + 1));
        if (off == 0 && !loc.continues && !(nd > 0 && d[0] == 0)) (*docs)[(*n_docs)++] = (int32_t)i;
        for (uint32_t x = lo; x < nd && d[x] < off + k; x++)
            (*docs)[(*n_docs)++] = (int32_t)(i + d[x] - off);
        i += k;
    }
    return 0;
}
