/*
 * io/reader.h - the streaming training-data reader (behaviour documented in docs/data.md).
 *
 * Each corpus (a data path: shard file, directory or glob; io/paths.h) is a list of frames.
 * Every epoch the frames are put in a deterministic order from data.seed (shards shuffled, then
 * the frames inside each shard), and the epochs' orders, one after the other, define the corpus's
 * token stream. The stream does not depend on the number of ranks.
 *
 * Packing (llm.c style): each sequence is seq_len + 1 consecutive tokens of one corpus's stream;
 * the corpus's sequences tile the stream with an overlap of one token (sequence k holds tokens
 * [a + k L, a + (k + 1) L] from the grid's anchor a), so inputs are tokens[0 .. seq_len) and
 * targets tokens[1 .. seq_len], and every token is a target exactly once. Documents are packed
 * back to back with the separators stored in the shards (e.g. the byte tokenizer's
 * end-of-document token 256); doc_start lists the positions where a document begins (a frame that
 * does not continue the previous frame of the stream also begins one).
 *
 * Sequence shuffle (data.shuffle_window = W tokens): each epoch's sequences are cut into windows
 * of floor(W / seq_len) and delivered in a pseudorandom order inside each window, keyed by (seed,
 * corpus, epoch, window), so a global batch draws from across the window instead of being one
 * passage. W = 0 is the stream order.
 *
 * Several training corpora are interleaved sequence by sequence: the next sequence comes from
 * the corpus whose share of the tokens so far lags its weight the most, so the mixture holds
 * to within one sequence at every point. This defines one global sequence order, the same for
 * any number of ranks.
 *
 * Global batch t is the global_batch_sequences (S) sequences after the first t * S. Data-parallel
 * rank r of dp takes the contiguous share [r S / dp, (r + 1) S / dp) of every global batch, in
 * order, so a rank's micro-batch m is the next micro_batch_size sequences of its share. The rank's
 * background thread assembles only its own sequences, decoding the frames they touch (found from
 * the token counts in the shard indexes), into a bounded queue (data.prefetch sequences).
 *
 * The cursor records the global position in tokens of each corpus (and the anchor of its grid),
 * not sequences or frames of one rank, so it restores the identical global order at any number
 * of ranks; when seq_len or the window changes, the grid restarts at the end of the current
 * window.
 *
 * Eval mode keeps a per-rank partition: rank r reads frames r, r + dp, ... of data.eval_path in
 * file order, once.
 */
#ifndef SL_IO_READER_H
#define SL_IO_READER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/fsutil.h" /* SL_PATH_MAX */

#define SL_MAX_CORPORA 16
/* data.shuffle_window = "epoch": one window per epoch (a full shuffle of its sequences). */
#define SL_SHUFFLE_EPOCH UINT64_MAX
/* The default window: 2^30 tokens, hundreds of global batches of the shipped configs. */
#define SL_SHUFFLE_DEFAULT (1ull << 30)

/* The "data" section of a run config (trainer/config.h parses it; docs/config.md). */
typedef struct {
    char path[SL_PATH_MAX];
    double weight;
} sl_corpus;

typedef struct {
    sl_corpus train[SL_MAX_CORPORA];
    int n_train;
    char eval_path[SL_PATH_MAX];
    uint64_t seed;           /* data order */
    uint64_t shuffle_window; /* tokens per sequence-shuffle window; 0 = stream order,
                              * SL_SHUFFLE_EPOCH = the whole epoch */
    int prefetch;            /* sequences assembled ahead; 0 = automatic */
    /* the tokenizer.json (or its directory) the shards were built with; "" = none. The reader
     * does not use it; the trainer checks the shards against it and exports it. */
    char tokenizer[SL_PATH_MAX];
} sl_data_config;

typedef struct sl_reader sl_reader;

typedef struct {
    const sl_data_config *data;
    int dp_rank, dp_size;
    int seq_len;
    /* Sequences per global batch (training): a multiple of dp_size; 0 means dp_size (each rank
     * takes every dp_size-th sequence). The trainer passes global_batch_tokens / seq_len. */
    int64_t global_batch_sequences;
    bool eval; /* read data.eval_path in order: no shuffle, no loop, partitioned over ranks */
} sl_reader_opts;

/* Opens the corpora of o (shards, directories or globs), checks them and starts the background
 * thread that assembles this rank's sequences. NULL with the first problem in err (naming the
 * file and, for a damaged shard, the offset). */
sl_reader *sl_reader_open(const sl_reader_opts *o, char *err, size_t errlen);

/* This rank's next packed sequence: tokens[seq_len + 1]; doc_start[] (room for seq_len + 1
 * entries) gets the offsets where a document begins, n_docs of them (pass doc_start = NULL to
 * skip). Returns 1 on success, 0 at the end (eval mode only; a trailing part shorter than a
 * sequence is not returned), -1 on error with a message naming the file and frame/offset in
 * err. After an error every later call fails too. */
int sl_reader_next(sl_reader *r, int32_t *tokens, int32_t *doc_start, int *n_docs, char *err,
                   size_t errlen);

/* The position as JSON (malloc'ed). Between global batches (every rank has taken its whole
 * share, or not started it) the training cursor is the same on every rank and independent of
 * dp_size; inside a rank's share it also names the rank and restores only there. */
char *sl_reader_cursor_json(const sl_reader *r);
/* Restores a position written by sl_reader_cursor_json for the same data, seed and mode (and,
 * for eval cursors and cursors inside a rank's share, the same data-parallel rank and size).
 * 0, or -1 with err set and the reader unchanged. */
int sl_reader_restore(sl_reader *r, const char *cursor_json, char *err, size_t errlen);

/* A new seq_len between global batches: each corpus's grid of sequences restarts at the end of
 * its current shuffle window (at the position itself in stream order); the global batch keeps its
 * number of sequences. 0, or -1 (the reader then fails every call). */
int sl_reader_set_seq_len(sl_reader *r, int seq_len);
/* The vocabulary size the shards declare (their headers agree; checked at open). */
int sl_reader_vocab_size(const sl_reader *r);
/* The tokens the data's shards hold, every corpus's together (an eval reader: the eval set,
 * every rank's slice). With one rank, an eval reader returns floor((tokens - 1) / seq_len)
 * sequences: callers check that a batch fits before allocating for it. */
uint64_t sl_reader_tokens(const sl_reader *r);
/* The eval split without a reader: the tokens of the eval set `spec` (a data path) that each of
 * dp data-parallel ranks reads in eval mode (frames r, r + dp, ... in file order) into
 * share[dp], the whole set's into *total and its largest frame's into *max_frame (each may be
 * NULL). Reads the shards' headers and indexes, nothing decompressed. 0, or -1 with err set
 * (naming the file). */
int sl_reader_eval_shares(const char *spec, int dp, uint64_t *share, uint64_t *total,
                          uint32_t *max_frame, char *err, size_t errlen);
/* The sequences of seq_len an eval reader returns from a share of `tokens` tokens: sequence k
 * needs tokens [k seq_len, (k + 1) seq_len], so floor((tokens - 1) / seq_len). */
static inline uint64_t sl_reader_eval_sequences(uint64_t tokens, int seq_len) {
    return tokens > 0 && seq_len > 0 ? (tokens - 1) / (uint64_t)seq_len : 0;
}
/* The fingerprint a cursor records for the corpus `spec` (a data path; its shards' headers
 * only): a cursor restores only into shards of the same fingerprint. 0, or -1 with err set. */
int sl_reader_fingerprint(const char *spec, uint32_t *fp, char *err, size_t errlen);
/* The first shard of the data (for messages naming a file). */
const char *sl_reader_first_shard(const sl_reader *r);
/* The tokenizer the shards record (the first SL_SHARD_TOKENIZER_HASH bytes of its SHA-256;
 * every shard that records one records the same, or the reader does not open), or NULL when
 * none does; *shard: the first shard that records it. */
const uint8_t *sl_reader_tokenizer(const sl_reader *r, const char **shard);
void sl_reader_close(sl_reader *r);

/* ---- batch hashes: proof that runs at different world sizes read the same batches ----
 * sl_sequence_hash(g, tokens, n) hashes global sequence g (its index in the global sequence
 * order) with its n tokens; a batch's hash is the sum modulo 2^64 of its sequences' hashes, so
 * each rank hashes its share and the ranks' sums add up to the global batch's hash in any
 * grouping. Across ranks: split into int64 parts, sum-allreduce them, join. */
uint64_t sl_sequence_hash(uint64_t index, const int32_t *tokens, size_t n);
/* The sum of sl_sequence_hash over the sequences next() returned since the previous call
 * (this rank's share of the step); resets the sum. */
uint64_t sl_reader_take_hash(sl_reader *r);
/* Two 32-bit halves as int64: their sums over up to 2^31 ranks cannot overflow. */
static inline void sl_hash_split(uint64_t h, int64_t parts[2]) {
    parts[0] = (int64_t)(h & 0xFFFFFFFFu);
    parts[1] = (int64_t)(h >> 32);
}
static inline uint64_t sl_hash_join(const int64_t parts[2]) {
    return (uint64_t)parts[0] + ((uint64_t)parts[1] << 32);
}

/* Statistics for logging and tests. */
typedef struct {
    int n_corpora;
    uint64_t tokens[SL_MAX_CORPORA];   /* tokens in each corpus (all ranks) */
    uint64_t consumed[SL_MAX_CORPORA]; /* tokens of each corpus in this rank's sequences so far
                                        * (seq_len per sequence) */
    uint64_t position[SL_MAX_CORPORA]; /* the corpus's stream position at the reader's global
                                        * position (tokens consumed by all ranks together) */
    uint64_t epoch[SL_MAX_CORPORA];    /* epoch of the last token this rank read per corpus */
    uint64_t sequence;                 /* global sequences before the reader's position */
    uint64_t frames;                   /* frames this rank has decoded */
    uint64_t tokens_decoded;           /* tokens in those frames */
    uint64_t waits;                    /* times next() found the queue empty and waited */
} sl_reader_stats;
/* The reader's position and counters now (what the tests check the order and the decoding by). */
void sl_reader_get_stats(const sl_reader *r, sl_reader_stats *s);

#endif
