/*
 * io/reader.h - the streaming training-data reader (behaviour documented in docs/data.md).
 *
 * Each corpus (a data path: shard file, directory or glob; io/paths.h) is a list of frames.
 * Every epoch the frames are put in a deterministic order from data.seed (shards shuffled, then
 * the frames inside each shard), and data-parallel rank r takes the frames at positions
 * r, r + dp_size, r + 2 dp_size, ... of that order: the ranks' slices are disjoint and together
 * cover the corpus. A background thread decodes the rank's frames ahead into a bounded queue
 * (data.prefetch frames per corpus).
 *
 * Packing (llm.c style): each sequence is seq_len + 1 consecutive tokens of one corpus's stream
 * and the next sequence of that corpus starts with the last token of this one, so inputs are
 * tokens[0 .. seq_len) and targets tokens[1 .. seq_len], and every token is a target exactly
 * once. Documents are packed back to back with the separators stored in the shards (e.g. the
 * byte tokenizer's end-of-document token 256); doc_start lists the positions where a document
 * begins (a frame that does not continue the previous frame read also begins one).
 *
 * Several training corpora are interleaved sequence by sequence: the next sequence comes from
 * the corpus whose share of the tokens so far lags its weight the most, so the mixture holds
 * to within one sequence at every point.
 *
 * The cursor records the position in tokens, not sequences, so it restores the identical token
 * stream and carries over unchanged when seq_len changes between training stages.
 */
#ifndef SL_IO_READER_H
#define SL_IO_READER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/fsutil.h" /* SL_PATH_MAX */

#define SL_MAX_CORPORA 16

/* The "data" section of a run config (trainer/config.h parses it; docs/config.md). */
typedef struct {
    char path[SL_PATH_MAX];
    double weight;
} sl_corpus;

typedef struct {
    sl_corpus train[SL_MAX_CORPORA];
    int n_train;
    char eval_path[SL_PATH_MAX];
    uint64_t seed; /* data order */
    int prefetch;  /* decompressed frames queued ahead */
} sl_data_config;

typedef struct sl_reader sl_reader;

typedef struct {
    const sl_data_config *data;
    int dp_rank, dp_size;
    int seq_len;
    bool eval; /* read data.eval_path in order: no shuffle, no loop, partitioned over ranks */
} sl_reader_opts;

sl_reader *sl_reader_open(const sl_reader_opts *o, char *err, size_t errlen);

/* Next packed sequence: tokens[seq_len + 1]; doc_start[] (room for seq_len + 1 entries) gets the
 * offsets where a document begins, n_docs of them (pass doc_start = NULL to skip).
 * Returns 1 on success, 0 at the end (eval mode only; a trailing part shorter than a sequence is
 * not returned), -1 on error with a message naming the file and frame/offset in err. After an
 * error every later call fails too. */
int sl_reader_next(sl_reader *r, int32_t *tokens, int32_t *doc_start, int *n_docs, char *err,
                   size_t errlen);

/* The position as JSON (malloc'ed). */
char *sl_reader_cursor_json(const sl_reader *r);
/* Restores a position written by sl_reader_cursor_json for the same data, seed, mode and
 * data-parallel layout. 0 or -1 with err set. */
int sl_reader_restore(sl_reader *r, const char *cursor_json, char *err, size_t errlen);

int sl_reader_set_seq_len(sl_reader *r, int seq_len);
int sl_reader_vocab_size(const sl_reader *r);
void sl_reader_close(sl_reader *r);

/* Statistics for logging and tests. */
typedef struct {
    int n_corpora;
    uint64_t tokens[SL_MAX_CORPORA];   /* tokens in each corpus (all ranks) */
    uint64_t consumed[SL_MAX_CORPORA]; /* tokens this rank has advanced through per corpus */
    uint64_t epoch[SL_MAX_CORPORA];    /* epoch of the frame being read per corpus */
    uint64_t waits;                    /* times next() found the queue empty and waited */
} sl_reader_stats;
void sl_reader_get_stats(const sl_reader *r, sl_reader_stats *s);

#endif
