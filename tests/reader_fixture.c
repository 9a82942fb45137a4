/* tests/reader_fixture.c - corpora with known contents and helpers that read and compare
 * sequences, shared by the reader tests (test_io_reader, test_io_order, test_io_shuffle). */
#include "tests/reader_fixture.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/shard.h"
#include "tests/test_util.h"

char g_dir[256];
uint64_t g_shuffle_window = 0;

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
uint32_t rnd(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 11);
}

/* n_shards shards of `per` tokens each (values base, base+1, ...), frames of frame_tokens;
 * documents of random length; shard s > 0 starts in the middle of a document when s is odd. */
truth make_corpus(const char *dir, int n_shards, uint32_t per, uint32_t frame_tokens, uint32_t base,
                  uint32_t vocab, uint32_t tb) {
    mkdir(dir, 0755);
    truth t = {.base = base, .n = per * (uint32_t)n_shards, .n_shards = n_shards};
    t.doc = calloc(t.n, 1);
    t.shard_start = calloc((size_t)n_shards, sizeof(uint32_t));
    uint32_t *tok = malloc(4 * per);
    char err[1024];
    uint32_t next_doc = 0;
    for (int s = 0; s < n_shards; s++) {
        char path[600];
        snprintf(path, sizeof path, "%s/c-%05d.shard.zst", dir, s);
        sl_shard_writer_opts o = {.token_bytes = tb,
                                  .vocab_size = vocab,
                                  .eod_token = SL_SHARD_NO_EOD,
                                  .frame_tokens = frame_tokens,
                                  .threads = 1};
        sl_shard_writer *w = sl_shard_writer_open(path, &o, err, sizeof err);
        if (!w) {
            fprintf(stderr, "%s\n", err);
            exit(1);
        }
        uint32_t g0 = per * (uint32_t)s;
        t.shard_start[s] = g0;
        if (s % 2 == 0 && next_doc > g0) next_doc = g0; /* even shards start a document */
        for (uint32_t i = 0; i < per; i++) tok[i] = base + g0 + i;
        uint32_t i = 0;
        while (i < per) {
            uint32_t g = g0 + i;
            if (g == next_doc) {
                sl_shard_writer_doc(w);
                t.doc[g] = true;
                next_doc = g + 1 + rnd() % 300;
            }
            uint32_t k = (next_doc > g ? next_doc - g : 1);
            if (k > per - i) k = per - i;
            sl_shard_writer_add(w, tok + i, k, err, sizeof err);
            i += k;
        }
        if (sl_shard_writer_close(w, NULL, err, sizeof err) != 0) {
            fprintf(stderr, "%s\n", err);
            exit(1);
        }
    }
    free(tok);
    return t;
}

void truth_free(truth *t) {
    free(t->doc), free(t->shard_start);
}

sl_data_config config(uint64_t seed, int prefetch) {
    sl_data_config d;
    memset(&d, 0, sizeof d);
    d.seed = seed;
    d.prefetch = prefetch;
    d.shuffle_window = g_shuffle_window;
    return d;
}
void add_corpus(sl_data_config *d, const char *path, double w) {
    snprintf(d->train[d->n_train].path, SL_PATH_MAX, "%s", path);
    d->train[d->n_train++].weight = w;
}

sl_reader *open_reader(const sl_data_config *d, int rank, int dp, int seq_len, bool eval) {
    char err[1024];
    sl_reader_opts o = {
        .data = d, .dp_rank = rank, .dp_size = dp, .seq_len = seq_len, .eval = eval};
    sl_reader *r = sl_reader_open(&o, err, sizeof err);
    if (!r) fprintf(stderr, "open: %s\n", err);
    return r;
}

void record_seqs(sl_reader *r, record *rec, int n, int L) {
    rec->n = n, rec->L = L;
    rec->tok = malloc(sizeof(int32_t) * (size_t)n * (L + 1));
    rec->ds = calloc((size_t)n * (L + 1), sizeof(int32_t));
    rec->nd = calloc((size_t)n, sizeof(int));
    char err[1024];
    for (int i = 0; i < n; i++) {
        int rc = sl_reader_next(r, rec->tok + (size_t)i * (L + 1), rec->ds + (size_t)i * (L + 1),
                                &rec->nd[i], err, sizeof err);
        if (rc != 1) {
            CHECK(0, "next %d: %s", i, err);
            break;
        }
    }
}
void record_free(record *r) {
    free(r->tok), free(r->ds), free(r->nd);
}
bool record_eq(const record *a, int a0, const record *b, int b0, int n) {
    size_t w = (size_t)a->L + 1;
    for (int i = 0; i < n; i++) {
        if (memcmp(a->tok + (a0 + i) * w, b->tok + (b0 + i) * w, 4 * w) != 0) return false;
        if (a->nd[a0 + i] != b->nd[b0 + i]) return false;
        if (memcmp(a->ds + (a0 + i) * w, b->ds + (b0 + i) * w, 4 * (size_t)a->nd[a0 + i]) != 0)
            return false;
    }
    return true;
}

sl_reader *open_batched(const sl_data_config *d, int rank, int dp, int seq_len, int64_t S) {
    char err[1024];
    sl_reader_opts o = {
        .data = d, .dp_rank = rank, .dp_size = dp, .seq_len = seq_len, .global_batch_sequences = S};
    sl_reader *r = sl_reader_open(&o, err, sizeof err);
    if (!r) fprintf(stderr, "open: %s\n", err);
    return r;
}

/* Reads n sequences into tok/ds/nd at sequence index `at`. */
bool read_into(sl_reader *r, int n, int L, int at, int32_t *tok, int32_t *ds, int *nd) {
    char err[1024];
    for (int i = at; i < at + n; i++)
        if (sl_reader_next(r, tok + (size_t)i * (L + 1), ds + (size_t)i * (L + 1), &nd[i], err,
                           sizeof err) != 1) {
            CHECK(0, "next: %s", err);
            return false;
        }
    return true;
}

bool seqs_eq(const int32_t *ta, const int32_t *da, const int *na, const int32_t *tb,
             const int32_t *db, const int *nb, int n, int L) {
    for (int i = 0; i < n; i++) {
        size_t o = (size_t)i * (L + 1);
        if (memcmp(ta + o, tb + o, 4 * ((size_t)L + 1)) != 0 || na[i] != nb[i] ||
            memcmp(da + o, db + o, 4 * (size_t)na[i]) != 0)
            return false;
    }
    return true;
}

/* The dataset of the world-size tests: two corpora (weights 2:1) of several shards with frames
 * of different sizes, small enough that a few dozen steps cross epochs of both. Token values
 * name the corpus, shard and frame: see frame_id. */
void dp_dataset(const char *tag, sl_data_config *d, truth *ta, truth *tb) {
    char da[512], db[512];
    snprintf(da, sizeof da, "%s/%sa", g_dir, tag);
    snprintf(db, sizeof db, "%s/%sb", g_dir, tag);
    *ta = make_corpus(da, 3, 1000, 128, 0, 100000, 4);
    *tb = make_corpus(db, 2, 700, 90, 50000, 100000, 4);
    *d = config(9, 2);
    add_corpus(d, da, 2);
    add_corpus(d, db, 1);
}
int frame_id(int32_t v) {
    if (v < 50000) return (v / 1000) * 1000 + (v % 1000) / 128;
    int x = v - 50000;
    return 1000000 + (x / 700) * 1000 + (x % 700) / 90;
}
