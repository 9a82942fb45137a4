/* tests/test_io_shuffle.c - the sequence shuffle (data.shuffle_window, docs/data.md "Sequence
 * shuffle"): a global batch draws its sequences from across the corpus (and in stream order it
 * does not: the property this shuffle exists for); each window delivers exactly the sequences
 * the stream order has there, tokens and document starts alike, so every token is still a
 * target once per epoch; windows of any size, epochs ending mid-window, a sequence length that
 * does not divide the corpus; a change of seq_len or window (set_seq_len and a cursor restore
 * agree, the rest of the window is skipped); version 2 cursors; eval order unchanged; and the
 * permutation itself (a bijection, not the identity, evenly spread). */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/reader.h"
#include "io/reader_internal.h"
#include "tests/reader_fixture.h"
#include "tests/test_util.h"

/* A key of one sequence: its tokens and document starts. */
static uint64_t seq_key(const record *r, int i) {
    const size_t w = (size_t)r->L + 1;
    uint64_t h = sl_sequence_hash(0, r->tok + i * w, w);
    return h ^ (sl_sequence_hash(1, r->ds + i * w, (size_t)r->nd[i]) * 3);
}

static int cmp_u64(const void *a, const void *b) {
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static sl_reader *reader_with(const char *dir, uint64_t window, int L, int64_t S) {
    g_shuffle_window = window;
    sl_data_config d = config(21, 0);
    add_corpus(&d, dir, 1);
    sl_reader *r = open_batched(&d, 0, 1, L, S);
    g_shuffle_window = 0;
    return r;
}

/* In stream order consecutive sequences of a batch continue each other (the last token of one
 * is the first of the next); shuffled, almost none do, and the batch spans many frames. */
static void test_batch_spread(void) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/spread", g_dir);
    truth t = make_corpus(dir, 4, 20000, 1000, 0, 100000, 4);
    enum { L = 50, S = 16, T = 20 };
    for (int k = 0; k < 2; k++) {
        const uint64_t window = k == 0 ? 0 : SL_SHUFFLE_DEFAULT;
        sl_reader *r = reader_with(dir, window, L, S);
        record rec;
        record_seqs(r, &rec, S * T, L);
        int continued = 0, min_frames = S;
        for (int b = 0; b < T; b++) {
            int frames[S], nf = 0;
            for (int j = 0; j < S; j++) {
                const int i = b * S + j;
                const int f = rec.tok[(size_t)i * (L + 1)] / 1000;
                bool seen = false;
                for (int x = 0; x < nf; x++) seen |= frames[x] == f;
                if (!seen) frames[nf++] = f;
                if (j > 0 && rec.tok[(size_t)i * (L + 1)] == rec.tok[(size_t)i * (L + 1) - 1])
                    continued++;
            }
            if (nf < min_frames) min_frames = nf;
        }
        if (k == 0)
            CHECK(continued == T * (S - 1) && min_frames <= 2,
                  "stream order: every batch is one passage (%d of %d continue, >= %d frames)",
                  continued, T * (S - 1), min_frames);
        else
            CHECK(continued <= T && min_frames >= S / 2,
                  "shuffled: %d of %d neighbours continue each other, every batch spans >= %d "
                  "frames",
                  continued, T * (S - 1), min_frames);
        record_free(&rec);
        sl_reader_close(r);
    }
    truth_free(&t);
}

/* Every window holds the stream order's sequences of that window, permuted. The windows are
 * computed here independently: the grid of sequences starts at 0, an epoch's windows start at
 * its first sequence start, K = max(1, W / L) sequences each. */
static void check_windows(const char *dir, uint64_t N, uint64_t window, int L, int n) {
    sl_reader *a = reader_with(dir, 0, L, 1), *b = reader_with(dir, window, L, 1);
    record ra, rb;
    record_seqs(a, &ra, n, L);
    record_seqs(b, &rb, n, L);
    const uint64_t K = window / (uint64_t)L > 0 ? window / (uint64_t)L : 1;
    uint64_t *ka = malloc(8 * (size_t)n), *kb = malloc(8 * (size_t)n);
    bool same_sets = true, moved = false;
    int windows = 0, i = 0;
    while (i < n) {
        const uint64_t e = (uint64_t)i * (uint64_t)L / N;
        const uint64_t first = (e * N + (uint64_t)L - 1) / (uint64_t)L;
        const uint64_t end = ((e + 1) * N + (uint64_t)L - 1) / (uint64_t)L;
        const uint64_t ws = first + ((uint64_t)i - first) / K * K;
        uint64_t we = ws + K < end ? ws + K : end;
        if (we > (uint64_t)n) break; /* a window not read completely */
        for (uint64_t j = ws; j < we; j++) {
            ka[j - ws] = seq_key(&ra, (int)j);
            kb[j - ws] = seq_key(&rb, (int)j);
            moved |= ka[j - ws] != kb[j - ws];
        }
        qsort(ka, we - ws, 8, cmp_u64);
        qsort(kb, we - ws, 8, cmp_u64);
        same_sets &= memcmp(ka, kb, 8 * (we - ws)) == 0;
        windows++;
        i = (int)we;
    }
    CHECK(same_sets && windows >= 2,
          "W %llu, L %d: each of %d windows holds the stream order's sequences (tokens and "
          "document starts)",
          (unsigned long long)window, L, windows);
    CHECK(moved, "W %llu, L %d: the sequences are not in stream order", (unsigned long long)window,
          L);
    free(ka), free(kb);
    record_free(&ra), record_free(&rb);
    sl_reader_close(a), sl_reader_close(b);
}

static void test_windows(void) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/win", g_dir);
    truth t = make_corpus(dir, 3, 2000, 300, 0, 100000, 4);
    const uint64_t N = t.n;
    /* L divides N; windows of 3 sequences, of 10 sequences plus a remainder, one per epoch */
    check_windows(dir, N, 3 * 20, 20, 700);
    check_windows(dir, N, 10 * 20 + 7, 20, 700);
    check_windows(dir, N, SL_SHUFFLE_EPOCH, 20, 2 * 300 + 10);
    /* L does not divide N: sequences cross epoch boundaries, an epoch's last window is short */
    check_windows(dir, N, 5 * 23, 23, 700);
    check_windows(dir, N, SL_SHUFFLE_EPOCH, 23, 2 * 261 + 1);
    truth_free(&t);
}

/* A change of seq_len inside a window skips the rest of it: set_seq_len and a cursor restored
 * into a reader of the new length agree, the new grid begins at the window's end and its
 * windows hold the stream order's sequences from there; at a window boundary nothing is
 * skipped. */
static void test_seq_len_change(void) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/slc", g_dir);
    truth t = make_corpus(dir, 2, 3000, 256, 0, 6000, 2);
    enum { L1 = 8, L2 = 32, K = 40 };
    const uint64_t W = K * L1;
    for (int at = 15; at <= K; at += K - 15) {
        sl_reader *x = reader_with(dir, W, L1, 1);
        record a, b, c, s;
        record_seqs(x, &a, at, L1);
        char *cur = sl_reader_cursor_json(x);
        CHECK(sl_reader_set_seq_len(x, L2) == 0, "set_seq_len");
        sl_reader_stats st;
        sl_reader_get_stats(x, &st);
        CHECK(st.position[0] == (uint64_t)K * L1,
              "after %d sequences of a %d-sequence window the grid restarts at %llu (want %llu)",
              at, K, (unsigned long long)st.position[0], (unsigned long long)K * L1);
        record_seqs(x, &b, 2 * K, L2);
        sl_reader *y = reader_with(dir, W, L2, 1);
        char err[1024];
        CHECK(sl_reader_restore(y, cur, err, sizeof err) == 0, "restore at seq_len %d: %s", L2,
              err);
        record_seqs(y, &c, 2 * K, L2);
        CHECK(record_eq(&b, 0, &c, 0, 2 * K),
              "set_seq_len and a restored cursor continue identically (cut at %d)", at);
        /* the stream order from the window's end, as a hand-made cursor puts it */
        sl_reader *z = reader_with(dir, 0, L2, 1);
        char json[1024];
        char *fp = strstr(cur, "\"fingerprint\":\"");
        snprintf(json, sizeof json,
                 "{\"format\":\"sluice-data-cursor\",\"version\":3,\"mode\":\"train\","
                 "\"seed\":\"21\",\"seq_len\":%d,\"shuffle_window\":\"0\",\"sequence\":%d,"
                 "\"corpora\":[{\"path\":\"%s\",\"fingerprint\":\"%.8s\",\"position\":%d,"
                 "\"anchor\":%d}]}",
                 L2, at, dir, fp ? fp + 15 : "", K * L1, K * L1);
        CHECK(sl_reader_restore(z, json, err, sizeof err) == 0, "hand-made cursor: %s", err);
        record_seqs(z, &s, 2 * K, L2);
        const int K2 = (int)(W / L2);
        bool perm = true;
        for (int w0 = 0; w0 + K2 <= 2 * K; w0 += K2) {
            uint64_t kb[64], ks[64];
            for (int j = 0; j < K2; j++) kb[j] = seq_key(&b, w0 + j), ks[j] = seq_key(&s, w0 + j);
            qsort(kb, (size_t)K2, 8, cmp_u64);
            qsort(ks, (size_t)K2, 8, cmp_u64);
            perm &= memcmp(kb, ks, 8 * (size_t)K2) == 0;
        }
        CHECK(perm, "the new grid's windows hold the stream order's sequences from %d", K * L1);
        free(cur);
        record_free(&a), record_free(&b), record_free(&c), record_free(&s);
        sl_reader_close(x), sl_reader_close(y), sl_reader_close(z);
    }
    truth_free(&t);
}

/* A cursor written with another window restores at the end of its window; a version 2 cursor
 * (stream order, no anchor) continues at its position. */
static void test_cursors(void) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/cur", g_dir);
    truth t = make_corpus(dir, 2, 3000, 256, 0, 6000, 2);
    enum { L = 10 };
    sl_reader *x = reader_with(dir, 30 * L, L, 1);
    record a;
    record_seqs(x, &a, 7, L);
    char *cur = sl_reader_cursor_json(x);
    CHECK(strstr(cur, "\"shuffle_window\":\"300\"") && strstr(cur, "\"anchor\":0"),
          "the cursor records the window and the anchor: %s", cur);
    sl_reader *y = reader_with(dir, 50 * L, L, 1);
    char err[1024];
    CHECK(sl_reader_restore(y, cur, err, sizeof err) == 0, "restore with another window: %s", err);
    sl_reader_stats st;
    sl_reader_get_stats(y, &st);
    CHECK(st.position[0] == 30 * L, "another window: the grid restarts at %llu (want %d)",
          (unsigned long long)st.position[0], 30 * L);
    /* version 2: the position of the old stream order */
    char v2[1024], *fp = strstr(cur, "\"fingerprint\":\"");
    snprintf(v2, sizeof v2,
             "{\"format\":\"sluice-data-cursor\",\"version\":2,\"mode\":\"train\",\"seed\":\"21\","
             "\"seq_len\":%d,\"sequence\":5,\"corpora\":[{\"path\":\"%s\",\"fingerprint\":"
             "\"%.8s\",\"tokens\":6000,\"position\":%d,\"epoch\":0}]}",
             L, dir, fp ? fp + 15 : "", 5 * L);
    sl_reader *s0 = reader_with(dir, 0, L, 1), *ref = reader_with(dir, 0, L, 1);
    CHECK(sl_reader_restore(s0, v2, err, sizeof err) == 0, "version 2 cursor: %s", err);
    record r5, rv;
    record_seqs(ref, &r5, 9, L);
    record_seqs(s0, &rv, 4, L);
    CHECK(record_eq(&r5, 5, &rv, 0, 4), "a version 2 cursor continues the stream order");
    char *bad = strdup(cur);
    char *q = strstr(bad, "\"anchor\":0");
    if (q) memcpy(q, "\"anchor\":3", 10);
    CHECK(sl_reader_restore(y, bad, err, sizeof err) != 0 && strstr(err, "anchor"),
          "an anchor off the grid is refused: %s", err);
    free(bad), free(cur);
    record_free(&a), record_free(&r5), record_free(&rv);
    sl_reader_close(x), sl_reader_close(y), sl_reader_close(s0), sl_reader_close(ref);
    truth_free(&t);
}

/* Eval reads in file order whatever the window says. */
static void test_eval_unchanged(void) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/ev", g_dir);
    truth t = make_corpus(dir, 2, 2000, 300, 0, 6000, 2);
    sl_data_config d0 = config(4, 0), d1 = config(4, 0);
    snprintf(d0.eval_path, sizeof d0.eval_path, "%s", dir);
    snprintf(d1.eval_path, sizeof d1.eval_path, "%s", dir);
    d1.shuffle_window = SL_SHUFFLE_EPOCH;
    sl_reader *a = open_reader(&d0, 0, 1, 30, true), *b = open_reader(&d1, 0, 1, 30, true);
    record ra, rb;
    record_seqs(a, &ra, 100, 30);
    record_seqs(b, &rb, 100, 30);
    CHECK(record_eq(&ra, 0, &rb, 0, 100) && ra.tok[0] == 0 && ra.tok[31] == 30,
          "eval order is file order with any shuffle window");
    record_free(&ra), record_free(&rb);
    sl_reader_close(a), sl_reader_close(b);
    truth_free(&t);
}

/* sl_rd_permute: a bijection of [0, n), different per key, not the identity, and each slot's
 * image spread evenly over keys. */
static void test_permutation(void) {
    const uint64_t sizes[] = {1, 2, 3, 5, 8, 17, 1000, 4097, 65539};
    bool bij = true, not_id = true;
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        const uint64_t n = sizes[s];
        unsigned char *seen = calloc(n, 1);
        for (uint64_t key = 1; key <= 3; key++) {
            memset(seen, 0, n);
            uint64_t fixed = 0;
            for (uint64_t j = 0; j < n; j++) {
                const uint64_t x = sl_rd_permute(j, n, key * 0x9E3779B97F4A7C15ull);
                if (x >= n || seen[x]++) bij = false;
                fixed += x == j;
            }
            if (n >= 1000 && fixed > n / 50) not_id = false;
        }
        free(seen);
    }
    CHECK(bij, "sl_rd_permute is a bijection of [0, n) for every n tried");
    CHECK(not_id, "sl_rd_permute fixes few points of large windows");
    /* where slot 0 of an 8-slot window goes, over 8000 keys: about 1000 each */
    int count[8] = {0};
    for (uint64_t key = 0; key < 8000; key++) count[sl_rd_permute(0, 8, key * 7919 + 1)]++;
    double chi2 = 0;
    for (int i = 0; i < 8; i++) chi2 += (count[i] - 1000.0) * (count[i] - 1000.0) / 1000.0;
    CHECK(chi2 < 24.3, "slot 0's image is uniform over keys (chi^2 %.1f, 7 dof, p = 0.001)", chi2);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/sluice_test_io_shuffle_%d", (int)getpid());
    mkdir(g_dir, 0755);
    test_batch_spread();
    test_windows();
    test_seq_len_change();
    test_cursors();
    test_eval_unchanged();
    test_permutation();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
    return sl_test_finish("test_io_shuffle");
}
