/* tests/test_io_reader.c - the streaming reader: packing with one-token overlap and document
 * starts, eval order and eval rank partitions (disjoint, covering), the training stream (whole
 * shuffled frames, a permutation per epoch, deterministic per seed), the global order at dp = 1,
 * 2 and 4 (identical global batches, batch hashes, only touched frames decoded), resume from a
 * cursor (identical stream, across epochs, mixtures, a seq_len change, and across world sizes),
 * the sequence hash, mixture weights over a million tokens, the prefetch thread keeping ahead,
 * and reader errors. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/reader.h"
#include "io/shard.h"
#include "tests/test_util.h"

static char g_dir[256];

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 11);
}

/* Ground truth of a corpus: token value t sits at global position t - base; doc[t - base] says
 * whether a document starts there (per the index). */
typedef struct {
    uint32_t base, n;
    bool *doc;
    uint32_t *shard_start; /* global position where each shard starts */
    int n_shards;
} truth;

/* n_shards shards of `per` tokens each (values base, base+1, ...), frames of frame_tokens;
 * documents of random length; shard s > 0 starts in the middle of a document when s is odd. */
static truth make_corpus(const char *dir, int n_shards, uint32_t per, uint32_t frame_tokens,
                         uint32_t base, uint32_t vocab, uint32_t tb) {
    mkdir(dir, 0755);
    truth t = {.base = base, .n = per * (uint32_t)n_shards, .n_shards = n_shards};
    t.doc = calloc(t.n, 1);
    t.shard_start = calloc((size_t)n_shards, sizeof(uint32_t));
    uint32_t *tok = malloc(4 * per);
    char err[1024];
    uint32_t next_doc = 0;
    for (int s = 0; s < n_shards; s++) {
        char path[512];
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

static void truth_free(truth *t) {
    free(t->doc), free(t->shard_start);
}

static sl_data_config config(uint64_t seed, int prefetch) {
    sl_data_config d;
    memset(&d, 0, sizeof d);
    d.seed = seed;
    d.prefetch = prefetch;
    return d;
}
static void add_corpus(sl_data_config *d, const char *path, double w) {
    snprintf(d->train[d->n_train].path, SL_PATH_MAX, "%s", path);
    d->train[d->n_train++].weight = w;
}

static sl_reader *open_reader(const sl_data_config *d, int rank, int dp, int seq_len, bool eval) {
    char err[1024];
    sl_reader_opts o = {
        .data = d, .dp_rank = rank, .dp_size = dp, .seq_len = seq_len, .eval = eval};
    sl_reader *r = sl_reader_open(&o, err, sizeof err);
    if (!r) fprintf(stderr, "open: %s\n", err);
    return r;
}

/* Eval mode, one rank: sequences are consecutive windows overlapping by one token, document
 * starts as indexed plus every shard start, and 0 at the end. */
static void test_eval_packing(void) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/ev", g_dir);
    truth t = make_corpus(dir, 3, 1000, 128, 7, 5000, 2);
    sl_data_config d = config(1, 3);
    snprintf(d.eval_path, SL_PATH_MAX, "%s", dir);
    const int L = 50;
    sl_reader *r = open_reader(&d, 0, 1, L, true);
    CHECK(r != NULL, "open eval reader");
    if (!r) return;
    CHECK(sl_reader_vocab_size(r) == 5000, "vocab size");
    int32_t tok[51], ds[51];
    int nd, rc, seqs = 0;
    char err[1024];
    bool ok_tok = true, ok_doc = true;
    while ((rc = sl_reader_next(r, tok, ds, &nd, err, sizeof err)) == 1) {
        uint32_t p0 = (uint32_t)seqs * L;
        int k = 0;
        for (int i = 0; i <= L; i++) {
            ok_tok &= tok[i] == (int32_t)(t.base + p0 + i);
            uint32_t g = p0 + (uint32_t)i;
            bool want = t.doc[g] || (g % 1000 == 0);
            if (want) ok_doc &= k < nd && ds[k++] == i;
        }
        ok_doc &= k == nd;
        seqs++;
    }
    CHECK(rc == 0, "eval ends with 0 (%s)", rc < 0 ? err : "");
    CHECK(ok_tok, "eval sequences are consecutive windows overlapping by one token");
    CHECK(ok_doc, "document starts: indexed ones plus every shard start");
    CHECK(seqs == (3000 - 1) / L, "%d sequences, want %d (the short tail is dropped)", seqs,
          (3000 - 1) / L);
    CHECK(sl_reader_next(r, tok, ds, &nd, err, sizeof err) == 0, "stays at the end");
    /* the cursor at the end restores to the end; the first cursor restores the start */
    char *end = sl_reader_cursor_json(r);
    sl_reader_close(r);
    r = open_reader(&d, 0, 1, L, true);
    char *start = sl_reader_cursor_json(r);
    CHECK(sl_reader_restore(r, end, err, sizeof err) == 0, "restore the end: %s", err);
    CHECK(sl_reader_next(r, tok, ds, &nd, err, sizeof err) == 0, "restored end is the end");
    CHECK(sl_reader_restore(r, start, err, sizeof err) == 0, "restore the start: %s", err);
    CHECK(sl_reader_next(r, tok, NULL, &nd, err, sizeof err) == 1 && tok[0] == (int32_t)t.base,
          "restored start is the start");
    free(end), free(start);
    sl_reader_close(r);
    truth_free(&t);
}

/* Eval over 3 ranks: disjoint slices covering the corpus. */
static void test_eval_partition(void) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/evp", g_dir);
    truth t = make_corpus(dir, 2, 1000, 64, 0, 2000, 2);
    sl_data_config d = config(1, 2);
    snprintf(d.eval_path, SL_PATH_MAX, "%s", dir);
    int *owner = malloc(sizeof(int) * t.n);
    for (uint32_t i = 0; i < t.n; i++) owner[i] = -1;
    bool disjoint = true;
    for (int rank = 0; rank < 3; rank++) {
        sl_reader *r = open_reader(&d, rank, 3, 1, true);
        int32_t tok[2];
        char err[1024];
        bool first = true;
        while (sl_reader_next(r, tok, NULL, NULL, err, sizeof err) == 1) {
            for (int i = first ? 0 : 1; i < 2; i++) {
                if (owner[tok[i]] != -1) disjoint = false;
                owner[tok[i]] = rank;
            }
            first = false;
        }
        sl_reader_close(r);
    }
    bool cover = true;
    for (uint32_t i = 0; i < t.n; i++) cover &= owner[i] >= 0;
    CHECK(disjoint, "eval slices of 3 ranks are disjoint");
    CHECK(cover, "eval slices of 3 ranks cover the corpus");
    free(owner);
    truth_free(&t);
}

/* Training, one rank: each epoch of the stream is a permutation of the corpus, shuffled,
 * deterministic per seed, and in another order the next epoch. */
static void test_train_order_and_shuffle(void) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/tr", g_dir);
    truth t = make_corpus(dir, 3, 1000, 100, 0, 3000, 2);
    sl_data_config d = config(42, 4);
    add_corpus(&d, dir, 1);
    const int L = 7;
    /* the stream positions 0 .. 2N (sequence j holds positions jL .. jL + L) */
    int32_t *stream = malloc(4 * ((size_t)2 * t.n + L + 1));
    bool *is_doc = calloc((size_t)2 * t.n + L + 1, 1);
    sl_reader *r = open_reader(&d, 0, 1, L, false);
    int32_t tok[8], ds[8];
    int nd;
    char err[1024];
    for (uint32_t j = 0; j * L < 2 * t.n; j++) {
        if (sl_reader_next(r, tok, ds, &nd, err, sizeof err) != 1) {
            CHECK(0, "train next: %s", err);
            break;
        }
        memcpy(stream + (size_t)j * L, tok, sizeof tok);
        for (int k = 0; k < nd; k++) is_doc[(size_t)j * L + ds[k]] = true;
    }
    sl_reader_stats st;
    sl_reader_get_stats(r, &st);
    CHECK(st.epoch[0] == 2 && st.position[0] / st.tokens[0] == 2,
          "the run reached epoch 2 (epoch %llu, position %llu)", (unsigned long long)st.epoch[0],
          (unsigned long long)st.position[0]);
    sl_reader_close(r);
    int *seen = calloc(t.n, sizeof(int));
    bool perm[2] = {true, true};
    for (int ep = 0; ep < 2; ep++) {
        memset(seen, 0, sizeof(int) * t.n);
        for (uint32_t i = 0; i < t.n; i++) {
            int32_t v = stream[(size_t)ep * t.n + i];
            if (v < 0 || (uint32_t)v >= t.n || seen[v]++) perm[ep] = false;
        }
        CHECK(perm[ep], "epoch %d of the stream holds every token exactly once", ep);
    }
    bool sorted = true;
    for (uint32_t i = 1; i < t.n; i++) sorted &= stream[i] > stream[i - 1];
    CHECK(!sorted, "training order is shuffled");
    CHECK(memcmp(stream, stream + t.n, 4 * (size_t)t.n) != 0,
          "epoch 1 is in a different order than epoch 0");
    /* frames stay whole: inside a frame of 100 tokens the values are consecutive */
    bool whole = true;
    for (uint32_t i = 0; i < t.n; i++)
        if (i % 100 != 0) whole &= stream[i] == stream[i - 1] + 1;
    CHECK(whole, "the stream is made of whole frames");
    /* document starts: the indexed ones, and every frame that does not continue the previous
     * frame of the stream (the start of the stream, and across the epoch boundary too) */
    bool docs_ok = true;
    for (uint32_t i = 0; i < 2 * t.n; i++) {
        bool fresh = i == 0 || (i % 100 == 0 && stream[i] != stream[i - 1] + 1);
        docs_ok &= is_doc[i] == (t.doc[stream[i]] || fresh);
    }
    CHECK(docs_ok, "document starts are the indexed ones plus every discontinuity");
    /* same seed: same stream; other seed: another stream */
    int32_t a[65], b[65], c[65];
    sl_data_config d2 = config(43, 4);
    add_corpus(&d2, dir, 1);
    sl_reader *ra = open_reader(&d, 1, 3, 64, false), *rb = open_reader(&d, 1, 3, 64, false),
              *rc = open_reader(&d2, 1, 3, 64, false);
    bool same = true, differ = false;
    for (int i = 0; i < 100; i++) {
        sl_reader_next(ra, a, NULL, NULL, err, sizeof err);
        sl_reader_next(rb, b, NULL, NULL, err, sizeof err);
        sl_reader_next(rc, c, NULL, NULL, err, sizeof err);
        same &= memcmp(a, b, sizeof a) == 0;
        differ |= memcmp(a, c, sizeof a) != 0;
    }
    CHECK(same, "the same seed gives the same stream");
    CHECK(differ, "another seed gives another stream");
    sl_reader_close(ra), sl_reader_close(rb), sl_reader_close(rc);
    free(stream), free(seen), free(is_doc);
    truth_free(&t);
}

typedef struct {
    int32_t *tok; /* n x (L+1) */
    int32_t *ds;  /* n x (L+1) */
    int *nd;
    int n, L;
} record;

static void record_seqs(sl_reader *r, record *rec, int n, int L) {
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
static void record_free(record *r) {
    free(r->tok), free(r->ds), free(r->nd);
}
static bool record_eq(const record *a, int a0, const record *b, int b0, int n) {
    size_t w = (size_t)a->L + 1;
    for (int i = 0; i < n; i++) {
        if (memcmp(a->tok + (a0 + i) * w, b->tok + (b0 + i) * w, 4 * w) != 0) return false;
        if (a->nd[a0 + i] != b->nd[b0 + i]) return false;
        if (memcmp(a->ds + (a0 + i) * w, b->ds + (b0 + i) * w, 4 * (size_t)a->nd[a0 + i]) != 0)
            return false;
    }
    return true;
}

/* Resume: a reader restored from a cursor continues with the identical stream, at arbitrary
 * points (mid-frame, across epochs, two corpora mixed, rank 1 of 2). */
static void test_resume(void) {
    char da[512], db[512];
    snprintf(da, sizeof da, "%s/ra", g_dir);
    snprintf(db, sizeof db, "%s/rb", g_dir);
    truth ta = make_corpus(da, 3, 1000, 128, 0, 100000, 4);
    truth tb = make_corpus(db, 2, 700, 90, 50000, 100000, 4);
    sl_data_config d = config(7, 2);
    add_corpus(&d, da, 2);
    add_corpus(&d, db, 1);
    const int L = 37, N = 300;
    sl_reader *ref = open_reader(&d, 1, 2, L, false);
    const int cut[] = {0, 1, 17, 100, 199, 250};
    char *cur[6];
    int done = 0;
    record parts[6];
    for (int c = 0; c < 6; c++) {
        if (cut[c] > done) {
            record_seqs(ref, &parts[c], cut[c] - done, L);
            done = cut[c];
        } else {
            memset(&parts[c], 0, sizeof parts[c]);
        }
        cur[c] = sl_reader_cursor_json(ref);
    }
    record tail;
    record_seqs(ref, &tail, N - done, L);
    sl_reader_stats st;
    sl_reader_get_stats(ref, &st);
    CHECK(st.epoch[0] >= 2 && st.epoch[1] >= 2, "the run spans several epochs (%llu, %llu)",
          (unsigned long long)st.epoch[0], (unsigned long long)st.epoch[1]);
    /* the full reference stream */
    record full = {.L = L, .n = N};
    full.tok = malloc(sizeof(int32_t) * N * (L + 1));
    full.ds = calloc((size_t)N * (L + 1), 4);
    full.nd = calloc(N, sizeof(int));
    int at = 0;
    for (int c = 0; c <= 6; c++) {
        record *p = c < 6 ? &parts[c] : &tail;
        if (!p->n) continue;
        memcpy(full.tok + (size_t)at * (L + 1), p->tok, 4 * (size_t)p->n * (L + 1));
        memcpy(full.ds + (size_t)at * (L + 1), p->ds, 4 * (size_t)p->n * (L + 1));
        memcpy(full.nd + at, p->nd, sizeof(int) * (size_t)p->n);
        at += p->n;
    }
    for (int c = 0; c < 6; c++) {
        sl_reader *r = open_reader(&d, 1, 2, L, false);
        char err[1024];
        CHECK(sl_reader_restore(r, cur[c], err, sizeof err) == 0, "restore: %s", err);
        record again;
        record_seqs(r, &again, N - cut[c], L);
        CHECK(record_eq(&full, cut[c], &again, 0, N - cut[c]),
              "resume after %d sequences gives the identical stream", cut[c]);
        char *c2 = sl_reader_cursor_json(r);
        sl_reader_restore(ref, cur[c], err, sizeof err); /* rewinding a live reader */
        record again2;
        record_seqs(ref, &again2, 5, L);
        CHECK(record_eq(&full, cut[c], &again2, 0, 5), "rewinding a live reader to cursor %d", c);
        record_free(&again), record_free(&again2);
        free(c2);
        sl_reader_close(r);
    }
    /* cursors that do not fit are refused, and the reader keeps going */
    sl_reader *r = open_reader(&d, 1, 2, L, false);
    char err[1024];
    int32_t tok[38];
    sl_reader_next(r, tok, NULL, NULL, err, sizeof err);
    sl_data_config dseed = config(8, 2);
    add_corpus(&dseed, da, 2);
    add_corpus(&dseed, db, 1);
    sl_reader *other_seed = open_reader(&dseed, 1, 2, L, false);
    sl_reader *other_rank = open_reader(&d, 0, 2, L, false);
    sl_data_config done1 = config(7, 2);
    add_corpus(&done1, da, 2);
    sl_reader *one_corpus = open_reader(&done1, 1, 2, L, false);
    sl_data_config swapped = config(7, 2);
    add_corpus(&swapped, db, 2);
    add_corpus(&swapped, da, 1);
    sl_reader *swap = open_reader(&swapped, 1, 2, L, false);
    CHECK(sl_reader_restore(other_seed, cur[3], err, sizeof err) != 0 && strstr(err, "seed"),
          "cursor with another seed: %s", err);
    /* between global batches (here of 2 sequences, one per rank) the position is global */
    CHECK(sl_reader_restore(other_rank, cur[3], err, sizeof err) == 0,
          "a cursor between batches restores into another rank: %s", err);
    CHECK(sl_reader_restore(one_corpus, cur[3], err, sizeof err) != 0 && strstr(err, "corpora"),
          "cursor with another number of corpora: %s", err);
    CHECK(sl_reader_restore(swap, cur[3], err, sizeof err) != 0 && strstr(err, "different shards"),
          "cursor for other shards: %s", err);
    CHECK(sl_reader_restore(r, "{not json", err, sizeof err) != 0, "garbage cursor: %s", err);
    char *bad = strdup(cur[3]);
    char *o = strstr(bad, "\"position\":");
    CHECK(o != NULL, "the cursor has positions: %s", cur[3]);
    if (o) memcpy(o, "\"positiox\":", 11);
    CHECK(sl_reader_restore(r, bad, err, sizeof err) != 0 && strstr(err, "position"),
          "cursor without a position: %s", err);
    free(bad);
    CHECK(sl_reader_next(r, tok, NULL, NULL, err, sizeof err) == 1 &&
              memcmp(tok, full.tok + (L + 1), sizeof tok) == 0,
          "a refused cursor leaves the reader where it was");
    sl_reader_close(r), sl_reader_close(other_seed), sl_reader_close(other_rank);
    sl_reader_close(one_corpus), sl_reader_close(swap);
    for (int c = 0; c < 6; c++) free(cur[c]), record_free(&parts[c]);
    record_free(&tail), record_free(&full);
    sl_reader_close(ref);
    truth_free(&ta), truth_free(&tb);
}

static sl_reader *open_batched(const sl_data_config *d, int rank, int dp, int seq_len, int64_t S) {
    char err[1024];
    sl_reader_opts o = {
        .data = d, .dp_rank = rank, .dp_size = dp, .seq_len = seq_len, .global_batch_sequences = S};
    sl_reader *r = sl_reader_open(&o, err, sizeof err);
    if (!r) fprintf(stderr, "open: %s\n", err);
    return r;
}

/* Reads n sequences into tok/ds/nd at sequence index `at`. */
static bool read_into(sl_reader *r, int n, int L, int at, int32_t *tok, int32_t *ds, int *nd) {
    char err[1024];
    for (int i = at; i < at + n; i++)
        if (sl_reader_next(r, tok + (size_t)i * (L + 1), ds + (size_t)i * (L + 1), &nd[i], err,
                           sizeof err) != 1) {
            CHECK(0, "next: %s", err);
            return false;
        }
    return true;
}

static bool seqs_eq(const int32_t *ta, const int32_t *da, const int *na, const int32_t *tb,
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
static void dp_dataset(const char *tag, sl_data_config *d, truth *ta, truth *tb) {
    char da[512], db[512];
    snprintf(da, sizeof da, "%s/%sa", g_dir, tag);
    snprintf(db, sizeof db, "%s/%sb", g_dir, tag);
    *ta = make_corpus(da, 3, 1000, 128, 0, 100000, 4);
    *tb = make_corpus(db, 2, 700, 90, 50000, 100000, 4);
    *d = config(9, 2);
    add_corpus(d, da, 2);
    add_corpus(d, db, 1);
}
static int frame_id(int32_t v) {
    if (v < 50000) return (v / 1000) * 1000 + (v % 1000) / 128;
    int x = v - 50000;
    return 1000000 + (x / 700) * 1000 + (x % 700) / 90;
}

/* sl_sequence_hash depends on the index, the length, every token and their order. */
static void test_sequence_hash(void) {
    enum { N = 513, K = 20000 };
    int32_t t[N];
    for (int i = 0; i < N; i++) t[i] = (int32_t)(rnd() % 50000);
    const uint64_t h = sl_sequence_hash(1234, t, N);
    CHECK(sl_sequence_hash(1234, t, N) == h, "deterministic");
    bool idx = true, len = true, tok = true, order = true;
    for (uint64_t g = 0; g < 64; g++) idx &= g == 1234 || sl_sequence_hash(g, t, N) != h;
    for (uint64_t g = 0; g < 64; g++) idx &= sl_sequence_hash(1234 ^ (1ull << g), t, N) != h;
    for (int n = 0; n < N; n++) len &= sl_sequence_hash(1234, t, (size_t)n) != h;
    for (int i = 0; i < N; i++) {
        for (int b = 0; b < 32; b++) {
            t[i] ^= (int32_t)(1u << b);
            tok &= sl_sequence_hash(1234, t, N) != h;
            t[i] ^= (int32_t)(1u << b);
        }
        int j = (i + 1 + (int)(rnd() % (N - 1))) % N;
        if (t[i] == t[j]) continue;
        int32_t x = t[i];
        t[i] = t[j], t[j] = x;
        order &= sl_sequence_hash(1234, t, N) != h;
        t[j] = t[i], t[i] = x;
    }
    CHECK(idx, "another index, another hash");
    CHECK(len, "a prefix hashes differently");
    CHECK(tok, "flipping any bit of any token changes the hash");
    CHECK(order, "swapping two tokens changes the hash");
    /* no collisions among K hashes of short sequences of neighbouring indices */
    uint64_t *hs = malloc(sizeof(uint64_t) * K);
    for (int k = 0; k < K; k++) {
        int32_t u[3] = {k % 7, k % 11, k % 13};
        hs[k] = sl_sequence_hash((uint64_t)k / 3, u, 3);
    }
    int dup = 0;
    for (int k = 0; k < K; k++)
        for (int m = k + 1; m < K && m < k + 400; m++) dup += hs[k] == hs[m];
    CHECK(dup == 0, "%d collisions among neighbouring sequences", dup);
    free(hs);
    int64_t parts[2];
    bool split = true;
    for (int k = 0; k < 1000; k++) {
        uint64_t a = ((uint64_t)rnd() << 43) ^ ((uint64_t)rnd() << 21) ^ rnd();
        uint64_t b = ((uint64_t)rnd() << 43) ^ ((uint64_t)rnd() << 21) ^ rnd();
        int64_t pa[2], pb[2];
        sl_hash_split(a, pa), sl_hash_split(b, pb);
        parts[0] = pa[0] + pb[0], parts[1] = pa[1] + pb[1];
        split &= sl_hash_join(parts) == a + b && pa[0] >= 0 && pa[1] >= 0;
    }
    CHECK(split, "summing split halves and joining them gives the sum modulo 2^64");
}

/* The data order does not depend on the number of ranks: for every step, the sequences of dp
 * = 2 and dp = 4 readers, concatenated in rank order, are the dp = 1 reader's global batch,
 * token for token with the same document starts, across epoch boundaries of both corpora; the
 * ranks' batch hashes add up to the global batch's; and a rank decodes only the frames its
 * sequences touch. */
static void test_dp_invariance(void) {
    sl_data_config d;
    truth ta, tb;
    dp_dataset("dpi", &d, &ta, &tb);
    enum { L = 37, S = 8, T = 40 };
    sl_reader *rd[7];
    rd[0] = open_batched(&d, 0, 1, L, S);
    for (int r = 0; r < 2; r++) rd[1 + r] = open_batched(&d, r, 2, L, S);
    for (int r = 0; r < 4; r++) rd[3 + r] = open_batched(&d, r, 4, L, S);
    for (int i = 0; i < 7; i++)
        if (!rd[i]) return;
    const size_t w = L + 1;
    int32_t *rt = malloc(4 * S * w), *rds = malloc(4 * S * w), *gt = malloc(4 * S * w),
            *gds = malloc(4 * S * w);
    int rnd_[S], gnd[S];
    bool same[2] = {true, true}, hash_ok = true, hash_dp = true;
    int last_frame[4][2], runs[4] = {0, 0, 0, 0};
    memset(last_frame, 0xFF, sizeof last_frame);
    for (int t = 0; t < T; t++) {
        if (!read_into(rd[0], S, L, 0, rt, rds, rnd_)) break;
        uint64_t want = 0;
        for (int j = 0; j < S; j++)
            want += sl_sequence_hash((uint64_t)t * S + (uint64_t)j, rt + j * w, w);
        hash_ok &= sl_reader_take_hash(rd[0]) == want;
        for (int k = 0; k < 2; k++) {
            const int dp = k == 0 ? 2 : 4, first = k == 0 ? 1 : 3, share = S / dp;
            uint64_t h = 0;
            for (int r = 0; r < dp; r++) {
                if (!read_into(rd[first + r], share, L, r * share, gt, gds, gnd)) break;
                h += sl_reader_take_hash(rd[first + r]);
                if (dp != 4) continue;
                for (int j = r * share; j < (r + 1) * share; j++)
                    for (size_t i = 0; i < w; i++) {
                        int f = frame_id(gt[j * w + i]), c = f >= 1000000;
                        if (f != last_frame[r][c]) runs[r]++, last_frame[r][c] = f;
                    }
            }
            same[k] &= seqs_eq(rt, rds, rnd_, gt, gds, gnd, S, L);
            hash_dp &= h == want;
        }
    }
    CHECK(same[0], "dp = 2: the ranks' sequences make up the dp = 1 global batches");
    CHECK(same[1], "dp = 4: the ranks' sequences make up the dp = 1 global batches");
    CHECK(hash_ok, "a batch hash is the sum of sl_sequence_hash over (global index, tokens)");
    CHECK(hash_dp, "the ranks' batch hashes add up to the global batch's at dp = 2 and 4");
    sl_reader_stats s1, s4;
    sl_reader_get_stats(rd[0], &s1);
    CHECK(s1.position[0] / s1.tokens[0] >= 2 && s1.position[1] / s1.tokens[1] >= 2 &&
              s1.sequence == (uint64_t)T * S,
          "the run crosses two epochs of both corpora (positions %llu, %llu; %llu sequences)",
          (unsigned long long)s1.position[0], (unsigned long long)s1.position[1],
          (unsigned long long)s1.sequence);
    for (int r = 0; r < 4; r++) {
        sl_reader_get_stats(rd[3 + r], &s4);
        /* the queue (prefetch 2 x 2 corpora) may hold frames beyond the last sequence; a frame
         * read again in the next epoch counts once more */
        CHECK(s4.frames >= (uint64_t)runs[r] && s4.frames <= (uint64_t)runs[r] + 4 + 4,
              "dp 4 rank %d decoded %llu frames for %d touched", r, (unsigned long long)s4.frames,
              runs[r]);
        CHECK(s4.frames < s1.frames, "dp 4 rank %d decoded fewer frames (%llu) than dp 1 (%llu)", r,
              (unsigned long long)s4.frames, (unsigned long long)s1.frames);
        CHECK(s4.sequence == s1.sequence &&
                  memcmp(s4.position, s1.position, sizeof s1.position) == 0,
              "dp 4 rank %d stands at the same global position as dp 1", r);
    }
    for (int i = 0; i < 7; i++) sl_reader_close(rd[i]);
    free(rt), free(rds), free(gt), free(gds);
    truth_free(&ta), truth_free(&tb);
}

/* A cursor written between batches at dp = 4 is the same on every rank and restores at dp = 2
 * and dp = 1 into the identical continuing stream; one written inside a rank's share restores
 * only into that rank of the same layout. */
static void test_cursor_across_dp(void) {
    sl_data_config d;
    truth ta, tb;
    dp_dataset("dpc", &d, &ta, &tb);
    enum { L = 37, S = 8, K = 13, M = 30 };
    const size_t w = L + 1;
    sl_reader *ref = open_batched(&d, 0, 1, L, S);
    record full;
    record_seqs(ref, &full, (K + M) * S, L);
    sl_reader_close(ref);
    sl_reader *r4[4];
    int32_t *tok = malloc(4 * S * w), *ds = malloc(4 * S * w);
    int nd[S];
    char *cur[4];
    for (int r = 0; r < 4; r++) {
        r4[r] = open_batched(&d, r, 4, L, S);
        for (int t = 0; t < K; t++) read_into(r4[r], S / 4, L, 0, tok, ds, nd);
        cur[r] = sl_reader_cursor_json(r4[r]);
    }
    bool equal = true;
    for (int r = 1; r < 4; r++) equal &= strcmp(cur[0], cur[r]) == 0;
    CHECK(equal, "every dp 4 rank writes the same cursor after %d steps: %s", K, cur[0]);
    CHECK(strstr(cur[0], "\"rank\"") == NULL, "a cursor between batches names no rank");
    char err[1024];
    for (int dp = 1; dp <= 4; dp *= 2) {
        sl_reader *rr[4];
        bool ok = true, same = true;
        for (int r = 0; r < dp; r++) {
            rr[r] = open_batched(&d, r, dp, L, S);
            ok &= rr[r] && sl_reader_restore(rr[r], cur[r % 4], err, sizeof err) == 0;
        }
        CHECK(ok, "restore the dp 4 cursor at dp %d: %s", dp, err);
        for (int t = K; ok && t < K + M; t++) {
            for (int r = 0; r < dp; r++) read_into(rr[r], S / dp, L, r * (S / dp), tok, ds, nd);
            same &= seqs_eq(full.tok + (size_t)t * S * w, full.ds + (size_t)t * S * w,
                            full.nd + t * S, tok, ds, nd, S, L);
        }
        CHECK(same, "after the dp 4 cursor, dp %d continues with the identical global batches", dp);
        for (int r = 0; r < dp; r++) sl_reader_close(rr[r]);
    }
    /* inside a share: rank 1 of 2 has taken 2 of its 4 sequences of batch K */
    sl_reader *a = open_batched(&d, 1, 2, L, S);
    for (int t = 0; t < K; t++) read_into(a, S / 2, L, 0, tok, ds, nd);
    read_into(a, 2, L, 0, tok, ds, nd);
    char *mid = sl_reader_cursor_json(a);
    CHECK(strstr(mid, "\"rank\"") != NULL, "a cursor inside a share names the rank: %s", mid);
    sl_reader *b0 = open_batched(&d, 0, 2, L, S), *b4 = open_batched(&d, 1, 4, L, S),
              *bs = open_batched(&d, 1, 2, L, 2 * S), *b = open_batched(&d, 1, 2, L, S);
    CHECK(sl_reader_restore(b0, mid, err, sizeof err) != 0 && strstr(err, "rank"),
          "a mid-share cursor of rank 1 refused by rank 0: %s", err);
    CHECK(sl_reader_restore(b4, mid, err, sizeof err) != 0 && strstr(err, "rank"),
          "a mid-share cursor of rank 1 of 2 refused by rank 1 of 4: %s", err);
    CHECK(sl_reader_restore(bs, mid, err, sizeof err) != 0 && strstr(err, "sequences"),
          "a mid-share cursor refused with another batch size: %s", err);
    CHECK(sl_reader_restore(b, mid, err, sizeof err) == 0, "mid-share restore: %s", err);
    /* the rest of the share (global K S + 6, + 7), then rank 1's share of batch K + 1 */
    read_into(b, 2, L, 0, tok, ds, nd);
    read_into(b, 4, L, 2, tok, ds, nd);
    CHECK(seqs_eq(full.tok + ((size_t)K * S + 6) * w, full.ds + ((size_t)K * S + 6) * w,
                  full.nd + K * S + 6, tok, ds, nd, 2, L) &&
              seqs_eq(full.tok + ((size_t)(K + 1) * S + 4) * w,
                      full.ds + ((size_t)(K + 1) * S + 4) * w, full.nd + (K + 1) * S + 4,
                      tok + 2 * w, ds + 2 * w, nd + 2, 4, L),
          "a mid-share cursor continues the rank's share and the next batch");
    char *after = sl_reader_cursor_json(b);
    CHECK(strstr(after, "\"rank\"") == NULL, "after its share the cursor is global again");
    free(after), free(mid);
    sl_reader_close(a), sl_reader_close(b0), sl_reader_close(b4), sl_reader_close(bs);
    sl_reader_close(b);
    for (int r = 0; r < 4; r++) sl_reader_close(r4[r]), free(cur[r]);
    free(tok), free(ds);
    record_free(&full);
    truth_free(&ta), truth_free(&tb);
}

/* Flattens sequences into the token stream they cover (dropping each overlap) and the
 * document starts as stream positions. */
static size_t flatten(const record *r, int32_t *out, int64_t *docs, size_t *nd, size_t at) {
    size_t w = (size_t)r->L + 1;
    for (int i = 0; i < r->n; i++) {
        const int32_t *t = r->tok + i * w;
        int skip = at == 0 ? 0 : 1; /* the first token repeats the previous last one */
        for (int k = 0; k < r->nd[i]; k++)
            if (r->ds[i * w + k] >= skip) docs[(*nd)++] = (int64_t)at + r->ds[i * w + k] - skip;
        for (size_t j = (size_t)skip; j < w; j++) out[at++] = t[j];
    }
    return at;
}

/* A cursor carries over when seq_len changes: the token stream continues exactly. */
static void test_seq_len_change(void) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/sl", g_dir);
    truth t = make_corpus(dir, 2, 3000, 256, 0, 6000, 2);
    sl_data_config d = config(3, 3);
    add_corpus(&d, dir, 1);
    sl_reader *x = open_reader(&d, 0, 1, 8, false);
    record a, b, c;
    record_seqs(x, &a, 20, 8);
    char *cur = sl_reader_cursor_json(x);
    CHECK(sl_reader_set_seq_len(x, 32) == 0, "set_seq_len");
    record_seqs(x, &b, 40, 32);
    sl_reader *y = open_reader(&d, 0, 1, 32, false);
    char err[1024];
    CHECK(sl_reader_restore(y, cur, err, sizeof err) == 0, "restore at seq_len 32: %s", err);
    record_seqs(y, &c, 40, 32);
    CHECK(record_eq(&b, 0, &c, 0, 40), "seq_len 8 -> 32: restored reader continues identically");
    CHECK(b.tok[0] == a.tok[19 * 9 + 8], "the first long sequence starts with the last token of "
                                         "the last short one");
    /* the same stream as staying at seq_len 8 */
    sl_reader *z = open_reader(&d, 0, 1, 8, false);
    record s8;
    record_seqs(z, &s8, 20 + 160, 8);
    size_t n1 = 20 * 8 + 1 + 40 * 32;
    int32_t *f1 = malloc(4 * (n1 + 64)), *f2 = malloc(4 * (n1 + 64));
    int64_t *d1 = malloc(8 * (n1 + 64)), *d2 = malloc(8 * (n1 + 64));
    size_t nd1 = 0, nd2 = 0;
    size_t at = flatten(&a, f1, d1, &nd1, 0);
    at = flatten(&b, f1, d1, &nd1, at);
    size_t at2 = flatten(&s8, f2, d2, &nd2, 0);
    CHECK(at == n1 && at2 == n1, "stream lengths %zu %zu %zu", at, at2, n1);
    CHECK(memcmp(f1, f2, 4 * n1) == 0, "seq_len 8 then 32 covers the same tokens as 8 throughout");
    CHECK(nd1 == nd2 && memcmp(d1, d2, 8 * nd1) == 0, "and the same document starts (%zu, %zu)",
          nd1, nd2);
    free(f1), free(f2), free(d1), free(d2), free(cur);
    record_free(&a), record_free(&b), record_free(&c), record_free(&s8);
    sl_reader_close(x), sl_reader_close(y), sl_reader_close(z);
    truth_free(&t);
}

/* Mixture weights hold within 1% over a million tokens. */
static void test_mixture(void) {
    char d1[512], d2[512], d3[512];
    snprintf(d1, sizeof d1, "%s/m1", g_dir);
    snprintf(d2, sizeof d2, "%s/m2", g_dir);
    snprintf(d3, sizeof d3, "%s/m3", g_dir);
    truth t1 = make_corpus(d1, 2, 20000, 4096, 0, 60000, 2);
    truth t2 = make_corpus(d2, 1, 9000, 4096, 40000, 60000, 2);
    truth t3 = make_corpus(d3, 3, 3000, 1024, 50000, 60000, 2);
    const double w[3] = {0.5, 0.3, 0.2};
    sl_data_config d = config(11, 4);
    add_corpus(&d, d1, 5);
    add_corpus(&d, d2, 3);
    add_corpus(&d, d3, 2);
    const int L = 509;
    sl_reader *r = open_reader(&d, 0, 1, L, false);
    int32_t *tok = malloc(4 * (L + 1));
    uint64_t count[3] = {0, 0, 0}, total = 0;
    char err[1024];
    bool ok = true;
    while (total < 1000000) {
        if (sl_reader_next(r, tok, NULL, NULL, err, sizeof err) != 1) {
            ok = false;
            break;
        }
        for (int i = 1; i <= L; i++) {
            int c = tok[i] < 40000 ? 0 : tok[i] < 50000 ? 1 : 2;
            count[c]++;
        }
        total += L;
    }
    CHECK(ok, "mixture next: %s", err);
    for (int c = 0; c < 3; c++) {
        double f = (double)count[c] / (double)total;
        CHECK(f > w[c] - 0.01 && f < w[c] + 0.01,
              "corpus %d: share %.4f of %llu tokens, weight %.2f", c, f, (unsigned long long)total,
              w[c]);
    }
    sl_reader_stats st;
    sl_reader_get_stats(r, &st);
    CHECK(st.n_corpora == 3 && st.consumed[0] + st.consumed[1] + st.consumed[2] == total,
          "stats count the consumed tokens");
    free(tok);
    sl_reader_close(r);
    truth_free(&t1), truth_free(&t2), truth_free(&t3);
}

/* With a consumer slower than decoding, next() finds the queue filled. */
static void test_prefetch(void) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/pf", g_dir);
    truth t = make_corpus(dir, 1, 200000, 1000, 0, 65536, 2);
    sl_data_config d = config(5, 4);
    add_corpus(&d, dir, 1);
    sl_reader *r = open_reader(&d, 0, 1, 255, false);
    int32_t tok[256];
    char err[1024];
    sl_reader_next(r, tok, NULL, NULL, err, sizeof err);
    sl_reader_stats s0, s1;
    sl_reader_get_stats(r, &s0);
    for (int i = 0; i < 100; i++) {
        usleep(2000); /* "compute" */
        sl_reader_next(r, tok, NULL, NULL, err, sizeof err);
    }
    sl_reader_get_stats(r, &s1);
    CHECK(s1.waits - s0.waits <= 2, "the consumer waited %llu times in 100 steps",
          (unsigned long long)(s1.waits - s0.waits));
    sl_reader_close(r);
    truth_free(&t);
}

static void patch_header(const char *path, void (*edit)(sl_shard_header *)) {
    sl_shard_header h;
    char err[1024];
    if (sl_shard_read_header(path, &h, err, sizeof err) != 0) return;
    edit(&h);
    unsigned char hb[SL_SHARD_HEADER_BYTES];
    sl_shard_header_encode(&h, hb);
    FILE *f = fopen(path, "r+b");
    fwrite(hb, 1, sizeof hb, f);
    fclose(f);
}
static void shrink_vocab(sl_shard_header *h) {
    h->vocab_size = 500;
}

static void test_errors(void) {
    char dir[512], err[1024];
    snprintf(dir, sizeof dir, "%s/er", g_dir);
    truth t = make_corpus(dir, 2, 1000, 100, 0, 2000, 2);
    sl_data_config d = config(1, 2);
    snprintf(d.eval_path, SL_PATH_MAX, "%s", dir);
    /* a corrupt frame in the middle: the error names file and frame, at the right moment */
    char s1[600];
    snprintf(s1, sizeof s1, "%s/c-00001.shard.zst", dir);
    sl_shard *sh = sl_shard_open(s1, err, sizeof err);
    uint64_t off = sl_shard_frames(sh)[3].offset;
    sl_shard_close(sh);
    FILE *f = fopen(s1, "r+b");
    fseek(f, (long)off + 30, SEEK_SET);
    int ch = fgetc(f);
    fseek(f, (long)off + 30, SEEK_SET);
    fputc(ch ^ 4, f);
    fclose(f);
    sl_reader *r = open_reader(&d, 0, 1, 99, true);
    int32_t tok[100];
    int n_ok = 0, rc;
    while ((rc = sl_reader_next(r, tok, NULL, NULL, err, sizeof err)) == 1) n_ok++;
    char want[200];
    snprintf(want, sizeof want, "frame 3 (byte offset %llu)", (unsigned long long)off);
    CHECK(rc == -1 && strstr(err, s1) && strstr(err, want), "corrupt frame: %s", err);
    CHECK(n_ok == 13, "the %d sequences before the corrupt frame were delivered", n_ok);
    CHECK(sl_reader_next(r, tok, NULL, NULL, err, sizeof err) == -1, "errors are sticky");
    sl_reader_close(r);
    /* token ids >= vocab (the declared vocabulary of a fresh shard shrunk to 500) */
    char d3[512], s3[600];
    snprintf(d3, sizeof d3, "%s/er3", g_dir);
    truth t3 = make_corpus(d3, 1, 1000, 100, 0, 2000, 2);
    snprintf(s3, sizeof s3, "%s/c-00000.shard.zst", d3);
    patch_header(s3, shrink_vocab);
    sl_data_config dv = config(1, 2);
    snprintf(dv.eval_path, SL_PATH_MAX, "%s", d3);
    r = open_reader(&dv, 0, 1, 99, true);
    CHECK(r && sl_reader_vocab_size(r) == 500, "declared vocabulary 500");
    while (r && (rc = sl_reader_next(r, tok, NULL, NULL, err, sizeof err)) == 1) {
    }
    CHECK(rc == -1 && strstr(err, s3) && strstr(err, "frame 5") &&
              strstr(err, "token 500 of the shard) has id 500 >= vocab_size 500"),
          "token >= vocab: %s", err);
    sl_reader_close(r);
    truth_free(&t3);
    /* vocabulary mismatch between shards */
    char d2[512];
    snprintf(d2, sizeof d2, "%s/er2", g_dir);
    truth t2 = make_corpus(d2, 1, 100, 100, 0, 3000, 2);
    sl_data_config dm = config(1, 2);
    add_corpus(&dm, dir, 1);
    add_corpus(&dm, d2, 1);
    sl_reader_opts o = {.data = &dm, .dp_rank = 0, .dp_size = 1, .seq_len = 8};
    r = sl_reader_open(&o, err, sizeof err);
    CHECK(!r && strstr(err, "vocabulary size"), "vocab mismatch: %s", err);
    /* more ranks than frames: the ranks share sequences, not frames */
    sl_data_config dsmall = config(1, 2);
    add_corpus(&dsmall, d2, 1);
    o = (sl_reader_opts){.data = &dsmall, .dp_rank = 1, .dp_size = 2, .seq_len = 8};
    r = sl_reader_open(&o, err, sizeof err);
    int32_t t9[9];
    CHECK(r && sl_reader_next(r, t9, NULL, NULL, err, sizeof err) == 1 && t9[0] != t9[1],
          "rank 1 of 2 reads a one-frame corpus: %s", r ? err : "open failed");
    sl_reader_close(r);
    /* a global batch that does not split over the ranks */
    o = (sl_reader_opts){
        .data = &dsmall, .dp_rank = 0, .dp_size = 4, .seq_len = 8, .global_batch_sequences = 6};
    r = sl_reader_open(&o, err, sizeof err);
    CHECK(!r && strstr(err, "6 sequences") && strstr(err, "4 data-parallel ranks"),
          "6 sequences over 4 ranks: %s", err);
    /* truncated shard, missing path, no eval path */
    char s0[600];
    snprintf(s0, sizeof s0, "%s/c-00000.shard.zst", dir);
    struct stat sb;
    stat(s0, &sb);
    CHECK(truncate(s0, sb.st_size - 10) == 0, "truncate");
    o = (sl_reader_opts){.data = &d, .dp_rank = 0, .dp_size = 1, .seq_len = 8, .eval = true};
    r = sl_reader_open(&o, err, sizeof err);
    CHECK(!r && strstr(err, s0) && strstr(err, "truncated"), "truncated shard: %s", err);
    snprintf(d.eval_path, SL_PATH_MAX, "%s/missing", g_dir);
    r = sl_reader_open(&o, err, sizeof err);
    CHECK(!r && strstr(err, "missing") && strstr(err, "No such file"), "missing path: %s", err);
    d.eval_path[0] = 0;
    r = sl_reader_open(&o, err, sizeof err);
    CHECK(!r && strstr(err, "eval_path"), "no eval path: %s", err);
    truth_free(&t), truth_free(&t2);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/sluice_test_io_reader_%d", (int)getpid());
    mkdir(g_dir, 0755);
    test_eval_packing();
    test_eval_partition();
    test_train_order_and_shuffle();
    test_resume();
    test_sequence_hash();
    test_dp_invariance();
    test_cursor_across_dp();
    test_seq_len_change();
    test_mixture();
    test_prefetch();
    test_errors();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
    return sl_test_finish("test_io_reader");
}
