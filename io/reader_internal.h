/*
 * io/reader_internal.h - the state the reader's pieces share (not a public header).
 *
 * The reader is four pieces with one job each, plus the glue in reader.c:
 *   reader_order.c    the global sequence order: the corpus mixture, this rank's share of every
 *                     global batch, and the sequence shuffle (window geometry, the permutation
 *                     of a window, re-anchoring when seq_len changes);
 *   reader_source.c   a corpus's token stream: its shards, the epoch order of shards and frames,
 *                     locating a stream position, decoding frames (a small cache), and
 *                     assembling one sequence's tokens and document starts from the stream;
 *   reader_prefetch.c the background thread that assembles this rank's next sequences into a
 *                     bounded queue, and the queue itself;
 *   reader_cursor.c   the position as JSON, and restoring it.
 */
#ifndef SL_IO_READER_INTERNAL_H
#define SL_IO_READER_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "io/crc32c.h"
#include "io/reader.h"
#include "io/shard.h"

#define SL_READER_MSG_LEN 1024
/* Decoded frames kept per corpus: enough that a sequence spanning several frames, and the next
 * sequence starting in the last of them, decode each frame once. */
#define SL_READER_FRAME_CACHE 4
/* Open shards (file handle and frame table) and epoch frame orders kept per corpus. */
#define SL_READER_SHARD_CACHE 4

typedef struct {
    char *path;
    sl_shard_header h;
} sl_rd_shard;

/* One decoded frame of a corpus. */
typedef struct {
    bool valid;
    uint32_t shard;
    uint64_t frame;
    uint64_t used; /* LRU clock */
    sl_frame_buf fb;
} sl_rd_frame;

/* An open shard with the frame order of one epoch (training) and its cumulative token counts. */
typedef struct {
    bool valid;
    uint32_t shard;
    uint64_t epoch;
    uint64_t used;
    sl_shard *sh;
    uint32_t *perm; /* training: frame order of `epoch`; eval: unused */
    uint64_t *cum;  /* cum[i] = tokens before position i of that order (n_frames + 1 entries) */
    uint64_t cap;
} sl_rd_open;

/* Where a stream position lies: its frame, the frame's place in the stream, and whether the
 * frame directly continues the previous frame of the stream (same shard, next frame). */
typedef struct {
    uint32_t shard;
    uint64_t frame;
    uint64_t start; /* stream position of the frame's first token */
    uint32_t n;     /* tokens in the frame */
    uint64_t epoch;
    bool continues;
} sl_rd_loc;

typedef struct {
    /* what the corpus is */
    char *spec;
    double weight; /* normalised */
    int index;
    int n_shards;
    sl_rd_shard *shards;
    uint64_t n_frames, n_tokens;
    uint32_t fingerprint;
    /* source state: the producer thread's (or the caller's while the thread is stopped) */
    uint64_t so_epoch[2];
    bool so_valid[2];
    uint32_t *so_perm[2];         /* shard order of so_epoch[k] */
    uint64_t *so_cum[2];          /* tokens before each position of that order (n_shards + 1) */
    uint32_t so_first[2];         /* position of the first shard with tokens in that order */
    int so_next;                  /* which of the two entries is replaced next */
    uint64_t *eval_cum;           /* eval: first file-order frame of each shard (n_shards + 1) */
    uint64_t eval_u, eval_ustart; /* eval: the last unit located and its stream position */
    uint32_t eval_un;
    bool eval_have;
    sl_rd_open open[SL_READER_SHARD_CACHE];
    sl_rd_frame frames[SL_READER_FRAME_CACHE];
    uint64_t clock;
    uint64_t units_per_rank; /* eval: this rank's frames */
    /* consumer state (the caller's thread) */
    uint64_t delivered, last_epoch;
} sl_rd_corpus;

/* A position in the global sequence order: g sequences lie before it, batches begin at every
 * origin + t * S, pos[c] is where corpus c's next sequence starts in its delivered stream and
 * anchor[c] where its current grid of sequences (and windows) begins. */
typedef struct {
    uint64_t g, origin;
    uint64_t pos[SL_MAX_CORPORA];
    uint64_t anchor[SL_MAX_CORPORA];
} sl_rd_plan;

typedef enum { SL_RD_SEQ = 0, SL_RD_END = 1, SL_RD_ERROR = 2 } sl_rd_kind;

/* One assembled sequence (or the end of an eval slice, or an error) in the queue. */
typedef struct {
    sl_rd_kind kind;
    int corpus;
    uint64_t g;     /* global sequence index */
    uint64_t epoch; /* epoch of its last token */
    int32_t *tokens;
    size_t tokens_cap;
    int32_t *docs;
    size_t docs_cap;
    int n_docs;
    char msg[SL_READER_MSG_LEN];
} sl_rd_slot;

struct sl_reader {
    uint64_t seed;
    uint64_t window; /* data.shuffle_window in tokens: 0 = stream order, UINT64_MAX = epoch */
    int rank, dp, seq_len;
    uint64_t S, lo, hi; /* sequences per global batch; this rank's share [lo, hi) of each */
    bool eval;
    uint32_t vocab;
    const char *vocab_shard; /* the first shard (its path lives in the corpus) */
    const char *tok_shard;   /* the first shard recording a tokenizer, NULL: none does */
    uint8_t tok_hash[SL_SHARD_TOKENIZER_HASH];
    int n;
    sl_rd_corpus c[SL_MAX_CORPORA];
    sl_rd_plan cplan, pplan; /* consumer's and producer's */
    /* the queue of assembled sequences, in the order next() returns them (mu) */
    sl_rd_slot *ring;
    int n_ring, q_head, q_count;
    uint64_t frames, tokens_decoded; /* decoding statistics (mu) */
    pthread_t th;
    bool running, stop;
    pthread_mutex_t mu;
    pthread_cond_t cv_prod, cv_cons;
    bool failed, at_end;
    char fail_msg[SL_READER_MSG_LEN];
    uint64_t waits, hash;
};

/* ---- reader_order.c ---- */
/* Fisher-Yates with a splitmix64 stream keyed by (seed, corpus, epoch, what). */
void sl_rd_shuffle(uint32_t *a, uint64_t n, uint64_t seed, uint64_t corpus, uint64_t epoch,
                   uint64_t what);
/* The corpus of the next sequence and where it starts in that corpus's delivered stream; the
 * plan advances. */
void sl_rd_plan_take(const sl_reader *r, sl_rd_plan *pl, int *c, uint64_t *p);
/* Skips to this rank's next sequence and takes it; returns its global index. */
uint64_t sl_rd_plan_next_mine(const sl_reader *r, sl_rd_plan *pl, int *c, uint64_t *p);
/* After the last sequence of the share: on to the next batch boundary. */
void sl_rd_plan_finish_share(const sl_reader *r, sl_rd_plan *pl);
/* Sequences since the current batch began. */
uint64_t sl_rd_plan_offset(const sl_reader *r, const sl_rd_plan *pl);
/* The stream position of the sequence delivered at position p of corpus c (p on the grid that
 * begins at anchor): p itself in stream order, its window's permutation otherwise. */
uint64_t sl_rd_source(const sl_reader *r, int c, uint64_t anchor, uint64_t p);
/* Where a grid of sequences of seq_len tokens and windows of `window` tokens, begun at anchor,
 * may be left for a new grid when the sequence at p is next: p itself at a window boundary (or
 * in stream order), otherwise the end of p's window (the rest of it is skipped). */
uint64_t sl_rd_reanchor(uint64_t n_tokens, uint64_t window, int seq_len, uint64_t anchor,
                        uint64_t p);
/* Every corpus of the plan leaves its grid (of old_seq_len and old_window) for a new one that
 * begins at sl_rd_reanchor's position: sequence length or shuffle window change. */
void sl_rd_plan_change_grid(const sl_reader *r, sl_rd_plan *pl, int old_seq_len,
                            uint64_t old_window);
/* A pseudorandom permutation of [0, n): the image of j under the permutation keyed by key. */
uint64_t sl_rd_permute(uint64_t j, uint64_t n, uint64_t key);

/* ---- reader_source.c ---- */
int sl_rd_corpus_load(sl_reader *r, sl_rd_corpus *c, const char *spec, char *err, size_t errlen);
/* A corpus's fingerprint (the cursor's check that it restores into the same shards): folds in
 * each shard's header CRC, tokens and frames, in file order, from fp = 0. */
static inline uint32_t sl_rd_fingerprint_add(uint32_t fp, const sl_shard_header *h) {
    unsigned char b[20];
    sl_put32(b, h->header_crc);
    sl_put64(b + 4, h->n_tokens);
    sl_put64(b + 12, h->n_frames);
    return sl_crc32c(fp, b, sizeof b);
}
void sl_rd_corpus_free(sl_rd_corpus *c);
/* Drops every cached frame and position (the producer restarts somewhere else). */
void sl_rd_corpus_reset(sl_rd_corpus *c);
/* Assembles the n tokens of corpus c's stream from position p into tokens (as int32, checked
 * against the vocabulary) and their document starts into *docs (grown as needed); *epoch is the
 * epoch of the last token. 0, 1 when an
 * eval slice ends before p + n, -1 with msg set. *decoded grows by the tokens decoded. */
int sl_rd_assemble(sl_reader *r, sl_rd_corpus *c, uint64_t p, uint32_t n, int32_t *tokens,
                   int32_t **docs, size_t *docs_cap, int *n_docs, uint64_t *epoch, uint64_t *frames,
                   uint64_t *decoded, char *msg, size_t len);

/* ---- reader_prefetch.c ---- */
/* Starts the producer at the consumer's position with an empty queue (thread stopped). */
int sl_rd_start(sl_reader *r, char *err, size_t errlen);
void sl_rd_stop(sl_reader *r);
/* The head of the queue, waiting for the producer when it is empty; then pop it. */
sl_rd_slot *sl_rd_queue_head(sl_reader *r);
void sl_rd_queue_pop(sl_reader *r);
/* Queue depth for the reader's options (data.prefetch sequences, or the automatic choice). */
int sl_rd_queue_depth(const sl_reader *r, int prefetch);
void sl_rd_slot_free(sl_rd_slot *s);

#endif
