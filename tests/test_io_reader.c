/* tests/test_io_reader.c - the streaming reader: packing with one-token overlap and document
 * starts, eval order, rank partitions (disjoint, covering), deterministic shuffles, resume from a
 * cursor (identical stream, across epochs, mixtures and a seq_len change), mixture weights over a
 * million tokens, the prefetch thread keeping ahead, and reader errors. */
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

/* Training over 3 ranks: each epoch's slices are disjoint and cover the corpus; the order is
 * shuffled, deterministic per seed, and different in the next epoch. */
static void test_train_partition_and_shuffle(void) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/tr", g_dir);
    truth t = make_corpus(dir, 3, 1000, 100, 0, 3000, 2);
    sl_data_config d = config(42, 4);
    add_corpus(&d, dir, 1);
    int *owner[2];
    bool disjoint[2] = {true, true}, cover[2] = {true, true};
    owner[0] = malloc(sizeof(int) * t.n), owner[1] = malloc(sizeof(int) * t.n);
    for (uint32_t i = 0; i < t.n; i++) owner[0][i] = owner[1][i] = -1;
    int32_t *order[2];
    order[0] = malloc(4 * t.n), order[1] = malloc(4 * t.n);
    int n_order[2] = {0, 0};
    for (int rank = 0; rank < 3; rank++) {
        sl_reader *r = open_reader(&d, rank, 3, 1, false);
        int32_t tok[2];
        char err[1024];
        sl_reader_stats st;
        bool first = true;
        for (;;) {
            if (sl_reader_next(r, tok, NULL, NULL, err, sizeof err) != 1) {
                CHECK(0, "train next: %s", err);
                break;
            }
            sl_reader_get_stats(r, &st);
            uint64_t ep = st.epoch[0];
            if (ep >= 2) break;
            for (int i = first ? 0 : 1; i < 2; i++) {
                if (owner[ep][tok[i]] != -1) disjoint[ep] = false;
                owner[ep][tok[i]] = rank;
                if (rank == 0) order[ep][n_order[ep]++] = tok[i];
            }
            first = false;
        }
        sl_reader_close(r);
    }
    for (int ep = 0; ep < 2; ep++) {
        for (uint32_t i = 0; i < t.n; i++) cover[ep] &= owner[ep][i] >= 0;
        CHECK(disjoint[ep], "epoch %d: rank slices are disjoint", ep);
        CHECK(cover[ep], "epoch %d: rank slices cover the corpus", ep);
    }
    bool sorted = true;
    for (int i = 1; i < n_order[0]; i++) sorted &= order[0][i] > order[0][i - 1];
    CHECK(!sorted, "training order is shuffled");
    CHECK(n_order[0] != n_order[1] || memcmp(order[0], order[1], 4 * (size_t)n_order[0]) != 0,
          "epoch 1 is in a different order than epoch 0");
    /* same seed: same stream; other seed: another stream */
    int32_t a[65], b[65], c[65];
    sl_data_config d2 = config(43, 4);
    add_corpus(&d2, dir, 1);
    sl_reader *ra = open_reader(&d, 1, 3, 64, false), *rb = open_reader(&d, 1, 3, 64, false),
              *rc = open_reader(&d2, 1, 3, 64, false);
    bool same = true, differ = false;
    char err[1024];
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
    free(owner[0]), free(owner[1]), free(order[0]), free(order[1]);
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
    CHECK(sl_reader_restore(other_rank, cur[3], err, sizeof err) != 0 && strstr(err, "rank"),
          "cursor of another rank: %s", err);
    CHECK(sl_reader_restore(one_corpus, cur[3], err, sizeof err) != 0 && strstr(err, "corpora"),
          "cursor with another number of corpora: %s", err);
    CHECK(sl_reader_restore(swap, cur[3], err, sizeof err) != 0 && strstr(err, "different shards"),
          "cursor for other shards: %s", err);
    CHECK(sl_reader_restore(r, "{not json", err, sizeof err) != 0, "garbage cursor: %s", err);
    char *bad = strdup(cur[3]);
    char *o = strstr(bad, "\"offset\":");
    if (o) memcpy(o, "\"offsex\":", 9);
    CHECK(sl_reader_restore(r, bad, err, sizeof err) != 0 && strstr(err, "offset"),
          "cursor without an offset: %s", err);
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
    /* more ranks than frames */
    sl_data_config dsmall = config(1, 2);
    add_corpus(&dsmall, d2, 1);
    o = (sl_reader_opts){.data = &dsmall, .dp_rank = 0, .dp_size = 2, .seq_len = 8};
    r = sl_reader_open(&o, err, sizeof err);
    CHECK(!r && strstr(err, "fewer than the 2 data-parallel ranks"), "dp > frames: %s", err);
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
    test_train_partition_and_shuffle();
    test_resume();
    test_seq_len_change();
    test_mixture();
    test_prefetch();
    test_errors();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
    return sl_test_finish("test_io_reader");
}
