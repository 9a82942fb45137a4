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
#include "tests/reader_fixture.h"
#include "tests/test_util.h"

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
    /* without the prefetch nearly every step waits; a few waits leave room for a loaded machine
     * (ctest -j on two cores) starving the reader's thread now and then */
    CHECK(s1.waits - s0.waits <= 10, "the consumer waited %llu times in 100 steps",
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
    test_sequence_hash();
    test_seq_len_change();
    test_prefetch();
    test_errors();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
    return sl_test_finish("test_io_reader");
}
