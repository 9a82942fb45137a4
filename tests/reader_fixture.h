/* tests/reader_fixture.h - corpora with known contents and sequence helpers for the reader
 * tests. */
#ifndef SL_TESTS_READER_FIXTURE_H
#define SL_TESTS_READER_FIXTURE_H

#include <stdbool.h>
#include <stdint.h>

#include "io/reader.h"

/* The tests' scratch directory, and the data.shuffle_window that config() sets. */
extern char g_dir[256];
extern uint64_t g_shuffle_window;

/* Ground truth of a corpus: token value t sits at global position t - base; doc[t - base] says
 * whether a document starts there (per the index). */
typedef struct {
    uint32_t base, n;
    bool *doc;
    uint32_t *shard_start; /* global position where each shard starts */
    int n_shards;
} truth;

/* Sequences read from a reader: n of them, each L + 1 tokens and its document starts. */
typedef struct {
    int32_t *tok; /* n x (L+1) */
    int32_t *ds;  /* n x (L+1) */
    int *nd;
    int n, L;
} record;

/* A xorshift stream of the tests' random values. */
uint32_t rnd(void);
/* n_shards shards of `per` tokens each under dir (values base, base + 1, ...), frames of
 * frame_tokens, documents of random length; shard s > 0 starts mid-document when s is odd. */
truth make_corpus(const char *dir, int n_shards, uint32_t per, uint32_t frame_tokens, uint32_t base,
                  uint32_t vocab, uint32_t tb);
void truth_free(truth *t);
/* A data config with this seed and prefetch, and data.shuffle_window = g_shuffle_window. */
sl_data_config config(uint64_t seed, int prefetch);
void add_corpus(sl_data_config *d, const char *path, double w);
sl_reader *open_reader(const sl_data_config *d, int rank, int dp, int seq_len, bool eval);
/* Reads n sequences of L + 1 tokens into rec (malloc'ed; record_free). */
void record_seqs(sl_reader *r, record *rec, int n, int L);
void record_free(record *r);
/* Sequences a0 .. a0 + n of a equal b0 .. b0 + n of b (tokens and document starts). */
bool record_eq(const record *a, int a0, const record *b, int b0, int n);
/* A training reader with S sequences per global batch. */
sl_reader *open_batched(const sl_data_config *d, int rank, int dp, int seq_len, int64_t S);
/* Reads n sequences into tok/ds/nd at sequence index `at`. */
bool read_into(sl_reader *r, int n, int L, int at, int32_t *tok, int32_t *ds, int *nd);
bool seqs_eq(const int32_t *ta, const int32_t *da, const int *na, const int32_t *tb,
             const int32_t *db, const int *nb, int n, int L);
/* The dataset of the world-size tests: two corpora (weights 2:1) of several shards with frames
 * of different sizes, small enough that a few dozen steps cross epochs of both. Token values
 * name the corpus, shard and frame: see frame_id. */
void dp_dataset(const char *tag, sl_data_config *d, truth *ta, truth *tb);
/* A token value's frame (corpus b's ids from 1000000). */
int frame_id(int32_t v);

#endif
